//! Which publishes and rollbacks are new. Region work is derived from the status: the
//! regions "in the window" of the running stage (the first `maxParallel` not done) that
//! are reachable receive the revision, and during a rollback the reachable regions of
//! the stage being reverted receive the compensating delta. A step emits only the work
//! that is in the window of its new status and was not in the window of the status it
//! started from. So feeding a returned status back with the same observations emits
//! nothing again (restart safety), while the reconcile, which executes actions before it
//! writes the status, repeats work that a crash interrupted.

use std::collections::BTreeSet;

use crate::api::{
    ConfigRolloutStatus, RegionRolloutStatus, RevisionStep, RolloutPhase, StageState, conditions,
};

use super::regions::{mark_is, region_done};
use super::{Action, Step};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Work<'s> {
    Publish {
        stage: usize,
        position: usize,
        region: &'s str,
        revision: &'s str,
        step: StepKey,
    },
    Rollback {
        /// Position in reverse rollout order, so the set iterates last stage first.
        reverse_position: usize,
        region: &'s str,
        revision: &'s str,
    },
}

/// `RevisionStep` is not `Ord`; this mirrors it for the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum StepKey {
    Expand,
    Contract,
    Single,
}

impl From<RevisionStep> for StepKey {
    fn from(step: RevisionStep) -> Self {
        match step {
            RevisionStep::Expand => StepKey::Expand,
            RevisionStep::Contract => StepKey::Contract,
            RevisionStep::Single => StepKey::Single,
        }
    }
}

impl From<StepKey> for RevisionStep {
    fn from(step: StepKey) -> Self {
        match step {
            StepKey::Expand => RevisionStep::Expand,
            StepKey::Contract => RevisionStep::Contract,
            StepKey::Single => RevisionStep::Single,
        }
    }
}

fn condition_is_true(status: &ConfigRolloutStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|condition| condition.type_ == type_ && condition.status == "True")
}

fn find_region<'s>(status: &'s ConfigRolloutStatus, name: &str) -> Option<&'s RegionRolloutStatus> {
    status.regions.iter().find(|region| region.name == name)
}

/// The region work a status calls for.
fn work_of<'s>(step: &'s Step<'_>, status: &'s ConfigRolloutStatus) -> BTreeSet<Work<'s>> {
    let mut work = BTreeSet::new();
    if condition_is_true(status, conditions::PAUSED)
        || condition_is_true(status, conditions::INVALID_SPEC)
    {
        return work;
    }
    let Some(revision) = status.revision.as_deref() else {
        return work;
    };
    let reachable =
        |name: &str| find_region(status, name).is_some_and(|region| region.reachable == Some(true));
    match status.phase {
        Some(RolloutPhase::Progressing) => {
            let pass = status.step.unwrap_or(RevisionStep::Single);
            let has_consumers = !step.spec.consumers.is_empty();
            for (index, stage) in status.stages.iter().enumerate() {
                if stage.state != StageState::Progressing {
                    continue;
                }
                let (Some(spec_stage), Some(regions)) =
                    (step.spec.stages.get(index), step.plan.stages.get(index))
                else {
                    continue;
                };
                let limit = usize::try_from(spec_stage.max_parallel.max(1)).unwrap_or(1);
                let window = regions
                    .iter()
                    .enumerate()
                    .map(|(position, name)| (position, name, find_region(status, name)))
                    .filter(|(.., region)| {
                        !region.is_some_and(|region| {
                            region_done(region, revision, pass, has_consumers)
                        })
                    })
                    .take(limit);
                for (position, name, region) in window {
                    let materialized = region.is_some_and(|region| {
                        mark_is(region.materialized.as_ref(), revision, pass)
                    });
                    let reachable = region.is_some_and(|region| region.reachable == Some(true));
                    if reachable && !materialized {
                        work.insert(Work::Publish {
                            stage: index,
                            position,
                            region: name,
                            revision,
                            step: pass.into(),
                        });
                    }
                }
            }
        }
        Some(RolloutPhase::RollingBack) => {
            let Some(index) = status
                .current_stage
                .as_deref()
                .and_then(|name| step.spec.stages.iter().position(|stage| stage.name == name))
            else {
                return work;
            };
            let Some(regions) = step.plan.stages.get(index) else {
                return work;
            };
            for (reverse_position, name) in regions.iter().rev().enumerate() {
                let done = step
                    .obs
                    .regions
                    .iter()
                    .find(|region| &region.name == name)
                    .is_some_and(|region| region.rolled_back.as_deref() == Some(revision));
                if reachable(name) && !done {
                    work.insert(Work::Rollback {
                        reverse_position,
                        region: name,
                        revision,
                    });
                }
            }
        }
        _ => {}
    }
    work
}

/// Appends the region work that is new in this step: publishes in stage and rollout
/// order, rollbacks in reverse rollout order (one stage at a time, last stage first).
pub(super) fn emit_new(step: &mut Step<'_>) {
    let new_work: Vec<Action> = {
        let before = work_of(step, step.before);
        let after = work_of(step, &step.status);
        after
            .difference(&before)
            .map(|work| match work {
                Work::Publish {
                    region,
                    revision,
                    step: pass,
                    ..
                } => Action::Publish {
                    region: (*region).to_owned(),
                    revision: (*revision).to_owned(),
                    step: (*pass).into(),
                },
                Work::Rollback {
                    region, revision, ..
                } => Action::Rollback {
                    region: (*region).to_owned(),
                    revision: (*revision).to_owned(),
                },
            })
            .collect()
    };
    step.actions.extend(new_work);
}
