//! Which publishes and rollbacks are new. Region work is derived from the status: the
//! regions "in the window" of the running stage (the first `maxParallel` not done) that
//! are reachable receive the revision, and during a rollback the reachable regions of
//! the stage being reverted receive the compensating delta. A step emits only the work
//! that is in the window of its new status and was not in the window of the status it
//! started from. So feeding a returned status back with the same observations emits
//! nothing again (restart safety), while the reconcile, which executes actions before it
//! writes the status, repeats work that a crash interrupted.

use std::collections::{BTreeSet, HashMap};

use crate::api::{ConfigRolloutStatus, RevisionStep, RolloutPhase, StageState, conditions};

use super::regions::{mark_is, region_done};
use super::{Action, Step};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Work {
    Publish {
        stage: usize,
        position: usize,
        region: String,
        revision: String,
        step: StepKey,
    },
    Rollback {
        region: String,
        revision: String,
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

/// The region work a status calls for.
fn work_of(step: &Step<'_>, status: &ConfigRolloutStatus) -> BTreeSet<Work> {
    let mut work = BTreeSet::new();
    if condition_is_true(status, conditions::PAUSED)
        || condition_is_true(status, conditions::INVALID_SPEC)
    {
        return work;
    }
    let Some(revision) = status.revision.as_deref() else {
        return work;
    };
    let by_name: HashMap<&str, &crate::api::RegionRolloutStatus> = status
        .regions
        .iter()
        .map(|region| (region.name.as_str(), region))
        .collect();
    let reachable = |name: &str| {
        by_name
            .get(name)
            .is_some_and(|region| region.reachable == Some(true))
    };
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
                let window = regions
                    .iter()
                    .enumerate()
                    .filter(|(_, name)| {
                        !by_name.get(name.as_str()).is_some_and(|region| {
                            region_done(region, revision, pass, has_consumers)
                        })
                    })
                    .take(usize::try_from(spec_stage.max_parallel.max(1)).unwrap_or(1));
                for (position, name) in window {
                    let materialized = by_name.get(name.as_str()).is_some_and(|region| {
                        mark_is(region.materialized.as_ref(), revision, pass)
                    });
                    if reachable(name) && !materialized {
                        work.insert(Work::Publish {
                            stage: index,
                            position,
                            region: name.clone(),
                            revision: revision.to_owned(),
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
            let rolled_back: HashMap<&str, bool> = step
                .obs
                .regions
                .iter()
                .map(|region| {
                    (
                        region.name.as_str(),
                        region.rolled_back.as_deref() == Some(revision),
                    )
                })
                .collect();
            for name in step.plan.stages[index].iter().rev() {
                let done = rolled_back.get(name.as_str()).copied().unwrap_or(false);
                if reachable(name) && !done {
                    work.insert(Work::Rollback {
                        region: name.clone(),
                        revision: revision.to_owned(),
                    });
                }
            }
        }
        _ => {}
    }
    work
}

/// Appends the region work that is new in this step, publishes in stage and rollout
/// order, rollbacks last stage first.
pub(super) fn emit_new(step: &mut Step<'_>) {
    let before = work_of(step, step.before);
    let after = work_of(step, &step.status);
    let mut rollbacks = Vec::new();
    for work in after.difference(&before) {
        match work {
            Work::Publish {
                region,
                revision,
                step: pass,
                ..
            } => step.actions.push(Action::Publish {
                region: region.clone(),
                revision: revision.clone(),
                step: (*pass).into(),
            }),
            Work::Rollback { region, revision } => rollbacks.push(Action::Rollback {
                region: region.clone(),
                revision: revision.clone(),
            }),
        }
    }
    // The rollback set is ordered by name; put it back in reverse rollout order.
    if !rollbacks.is_empty() {
        let order = rollback_order(step);
        rollbacks.sort_by_key(|action| match action {
            Action::Rollback { region, .. } => order.get(region.as_str()).copied(),
            _ => None,
        });
        step.actions.extend(rollbacks);
    }
}

fn rollback_order<'s>(step: &'s Step<'_>) -> HashMap<&'s str, usize> {
    step.plan
        .all_regions()
        .map(|(_, name)| name)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .enumerate()
        .map(|(position, name)| (name, position))
        .collect()
}
