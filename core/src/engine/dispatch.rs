//! Which publishes and rollbacks are new. Region work is derived from the status: the
//! regions "in the window" of the running stage (the first `maxParallel` not done) that
//! are reachable receive the revision, and during a rollback the reachable regions of
//! the stage being reverted receive the compensating delta. A decision emits only the work
//! that is in the window of its new status and was not in the window of the status it
//! started from. So feeding a returned status back with the same observations emits
//! nothing again (restart safety), while the reconcile, which executes actions before it
//! writes the status, repeats work that a crash interrupted. A Complete rollout whose
//! `driftPolicy` is Revert or Adopt sends a drifted region its last pass again.

use configrollout_api::{
    ConfigRolloutSpec, ConfigRolloutStatus, DriftPolicy, RegionRolloutStatus, RevisionStep,
    RolloutPhase, StageState, conditions,
};

use super::observations::Observations;
use super::regions::{mark_is, region_done};
use super::selection::StagePlan;
use super::{Action, Draft, approvals, failure};

/// One piece of region work, of the status's revision (each status has one revision, so
/// it is not repeated here). Region names borrow from the stage plan, which outlives the
/// status it was computed for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Work<'p> {
    Publish {
        stage: usize,
        position: usize,
        region: &'p str,
        step: RevisionStep,
    },
    Rollback {
        /// Position in reverse rollout order, so the list runs last stage first.
        reverse_position: usize,
        region: &'p str,
    },
}

fn find_region<'s>(status: &'s ConfigRolloutStatus, name: &str) -> Option<&'s RegionRolloutStatus> {
    status.regions.iter().find(|region| region.name == name)
}

/// The region work a status calls for, in order (publishes by stage and rollout
/// position, rollbacks last stage first); a status calls for one kind at a time.
pub(super) fn work_of<'p>(
    spec: &ConfigRolloutSpec,
    plan: &StagePlan<'p>,
    obs: &'p Observations,
    status: &ConfigRolloutStatus,
) -> Vec<Work<'p>> {
    let mut work = Vec::new();
    if status.is_true(conditions::PAUSED) || status.is_true(conditions::INVALID_SPEC) {
        return work;
    }
    let Some(revision) = status.revision.as_deref() else {
        return work;
    };
    match status.phase {
        Some(RolloutPhase::Progressing) => {
            let pass = status.step.unwrap_or(RevisionStep::Single);
            let has_consumers = !spec.consumers.is_empty();
            for (index, stage) in status.stages.iter().enumerate() {
                if stage.state != StageState::Progressing {
                    continue;
                }
                // Stages run in order, and a stage that needs approval publishes only on
                // one the StageApproval objects verify: a status written by someone else
                // (a forged approval record, a later stage marked running) sends nothing.
                let in_order = status.stages[..index]
                    .iter()
                    .all(|earlier| earlier.state == StageState::Passed);
                if !in_order || !approvals::stage_approved(spec, status, obs, index) {
                    continue;
                }
                let (Some(spec_stage), Some(regions)) =
                    (spec.stages.get(index), plan.stages.get(index))
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
                        work.push(Work::Publish {
                            stage: index,
                            position,
                            region: name,
                            step: pass,
                        });
                    }
                }
            }
        }
        Some(RolloutPhase::RollingBack) => {
            // The group the status says is being reverted (`failure` keeps it in
            // `currentStage`: a stage, or none for the regions no stage selects any more);
            // a region is reverted only if it was read, and it is named by the read.
            let groups = failure::rollback_groups(spec, plan, status);
            let reverting = status
                .current_stage
                .as_deref()
                .map(|name| spec.stages.iter().position(|stage| stage.name == name));
            let group = groups.iter().find(|(stage, _)| match reverting {
                Some(index) => index.is_some() && *stage == index,
                None => stage.is_none(),
            });
            let Some((_, regions)) = group else {
                return work;
            };
            for (reverse_position, name) in regions.iter().rev().enumerate() {
                let Some(seen) = obs.regions.iter().find(|region| &region.name == name) else {
                    continue;
                };
                if seen.reachable && seen.rolled_back.as_deref() != Some(revision) {
                    work.push(Work::Rollback {
                        reverse_position,
                        region: seen.name.as_str(),
                    });
                }
            }
        }
        // Drift acted on while Complete: under Revert or Adopt, a region whose target
        // was edited out of band gets the revision's last pass again, which puts the
        // declared values back (Revert) or keeps the edit as an override (Adopt). Under
        // any policy, a region that lost the revision (its mark cleared by `regions`: a
        // companion restored from a backup) gets it again. Keyed on the drift and marks
        // the status records, so it is sent once per drift or loss seen, and again when
        // the region turns reachable.
        Some(RolloutPhase::Complete) => {
            let pass = status.step.unwrap_or(RevisionStep::Single);
            let acts_on_drift = spec.drift_policy != DriftPolicy::Report;
            for (index, regions) in plan.stages.iter().enumerate() {
                for (position, name) in regions.iter().enumerate() {
                    let republish = find_region(status, name).is_some_and(|region| {
                        region.reachable == Some(true)
                            && ((acts_on_drift && !region.drifted_keys.is_empty())
                                || !mark_is(region.materialized.as_ref(), revision, pass))
                    });
                    if republish {
                        work.push(Work::Publish {
                            stage: index,
                            position,
                            region: name,
                            step: pass,
                        });
                    }
                }
            }
        }
        _ => {}
    }
    work
}

/// Appends the region work that is new in this decision: publishes in stage and rollout
/// order, rollbacks in reverse rollout order (one stage at a time, last stage first).
pub(super) fn emit_new(draft: &mut Draft<'_>) {
    let Some(revision) = draft.status.revision.clone() else {
        return;
    };
    let revision = revision.as_str();
    let after = work_of(draft.spec, &draft.plan, draft.obs, &draft.status);
    let before: &[Work<'_>] = if draft.before.revision.as_deref() == Some(revision) {
        &draft.before.work
    } else {
        &[]
    };
    let new_work = after
        .iter()
        .filter(|work| before.binary_search(work).is_err())
        .collect::<Vec<_>>();
    // Where a revision goes, a rollback must be able to follow: the region is recorded
    // before the write is made (the status is written after the actions, and a write
    // that never happened only costs the rollback a look). Not once Complete: the
    // revision there is the stable one.
    if draft.status.phase != Some(RolloutPhase::Complete) {
        for work in &new_work {
            if let Work::Publish { region, .. } = work
                && !draft.status.reached.iter().any(|known| known == region)
            {
                draft.status.reached.push((*region).to_owned());
            }
        }
    }
    // A region sent a rollback no longer runs the revision: its marks go with the same
    // status write (a compensation that fails leaves it unmarked, which is the safe side:
    // the rollback is retried there, and nothing rolls forward from a rollback).
    for work in &new_work {
        if let Work::Rollback { region, .. } = work {
            failure::forget_marks(&mut draft.status, region, revision);
        }
    }
    let new_work = new_work.into_iter().map(|work| match work {
        Work::Publish {
            region, step: pass, ..
        } => Action::Publish {
            region: (*region).to_owned(),
            revision: revision.to_owned(),
            step: *pass,
        },
        Work::Rollback { region, .. } => Action::Rollback {
            region: (*region).to_owned(),
            revision: revision.to_owned(),
        },
    });
    draft.actions.extend(new_work);
}
