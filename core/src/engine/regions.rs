//! The per-region lifecycle of the current revision and pass: Materialized (replica
//! merged, digest read back), Delivered (consumers restarted and ready, or projected),
//! Activated (consumers report it), each marked once with the time it was first seen.
//! Counts only, never values.

use std::collections::HashMap;

use configrollout_api::{
    ConsumerCounts, Delivery, LifecycleMark, RegionRolloutStatus, RevisionStep, RolloutPhase,
};

use super::clock::to_time;
use super::observations::RegionObservation;
use super::{Action, Draft, EventType};

/// Most names of ignored workloads kept per region in status.
const MAX_IGNORED_NAMES: usize = 20;

/// Whether `mark` is for this revision and pass.
pub(super) fn mark_is(mark: Option<&LifecycleMark>, revision: &str, pass: RevisionStep) -> bool {
    mark.is_some_and(|mark| mark.revision == revision && mark.step == Some(pass))
}

/// Whether a region has finished the pass: Activated, or Materialized where the rollout
/// declares no consumers.
pub(super) fn region_done(
    region: &RegionRolloutStatus,
    revision: &str,
    pass: RevisionStep,
    has_consumers: bool,
) -> bool {
    let mark = if has_consumers {
        region.activated.as_ref()
    } else {
        region.materialized.as_ref()
    };
    mark_is(mark, revision, pass)
}

/// Clears the mark of a region that no longer holds the revision of a rollout this
/// decision leaves Complete (a companion restored from a backup, or deleted by hand), so
/// the revision is published there again (see `dispatch`). It runs once the phase is
/// decided rather than in [`sync`]: a rollout that turns Complete in this decision must
/// publish now, not in the next one, or a restart would emit work the first decision
/// did not.
pub(super) fn forget_lost(draft: &mut Draft<'_>) {
    if draft.status.phase != Some(RolloutPhase::Complete) {
        return;
    }
    let Some(revision) = draft.status.revision.as_deref() else {
        return;
    };
    let pass = draft.status.step.unwrap_or(RevisionStep::Single);
    for region in &mut draft.status.regions {
        let lost = draft.obs.regions.iter().any(|seen| {
            seen.name == region.name
                && seen.reachable
                && seen.last_error.is_none()
                && !seen
                    .applied
                    .as_ref()
                    .is_some_and(|applied| applied.revision == revision && applied.step == pass)
        });
        if lost && mark_is(region.materialized.as_ref(), revision, pass) {
            region.materialized = None;
        }
    }
}

/// Rebuilds `status.regions` in plan order from the observations, keeping marks already
/// reached, and restarts consumers in regions that just materialized.
pub(super) fn sync(draft: &mut Draft<'_>) {
    let Some(revision) = draft.revision().map(str::to_owned) else {
        return;
    };
    let pass = draft.revision_step();
    let has_consumers = !draft.spec.consumers.is_empty();
    let restarts = draft
        .spec
        .consumers
        .iter()
        .any(|consumer| consumer.delivery == Delivery::Restart);
    let observed: HashMap<&str, &RegionObservation> = draft
        .obs
        .regions
        .iter()
        .map(|region| (region.name.as_str(), region))
        .collect();
    // The common case is a status already in plan order: update it in place instead
    // of rebuilding (this runs on every reconcile of every rollout).
    let aligned = draft
        .status
        .regions
        .iter()
        .map(|region| region.name.as_str())
        .eq(draft.plan.all_regions().map(|(_, name)| name));
    let mut previous: HashMap<String, RegionRolloutStatus> = if aligned {
        HashMap::new()
    } else {
        std::mem::take(&mut draft.status.regions)
            .into_iter()
            .map(|region| (region.name.clone(), region))
            .collect()
    };
    let now = to_time(draft.now);
    let mut regions = if aligned {
        std::mem::take(&mut draft.status.regions)
    } else {
        Vec::with_capacity(draft.plan.region_count())
    };
    let mut restart_in = Vec::new();

    for (position, (stage_index, name)) in draft.plan.all_regions().enumerate() {
        if !aligned {
            let region = previous
                .remove(name)
                .unwrap_or_else(|| RegionRolloutStatus {
                    name: name.to_owned(),
                    ..RegionRolloutStatus::default()
                });
            regions.push(region);
        }
        let Some(region) = regions.get_mut(position) else {
            continue;
        };
        let stage_name = &draft.spec.stages[stage_index].name;
        if region.stage.as_ref() != Some(stage_name) {
            region.stage = Some(stage_name.clone());
        }
        let Some(seen) = observed.get(name) else {
            region.reachable = Some(false);
            region.last_error = Some(format!("no Region object named {name}"));
            continue;
        };
        region.reachable = Some(seen.reachable);
        region.last_error.clone_from(&seen.last_error);
        // An unreachable region keeps what was last seen of it.
        if seen.reachable {
            if region.drifted_keys != seen.drifted_keys {
                region.drifted_keys.clone_from(&seen.drifted_keys);
            }
            if region.overridden_keys != seen.overridden_keys {
                region.overridden_keys.clone_from(&seen.overridden_keys);
            }
            if region.restored_overrides != seen.restored_overrides {
                region
                    .restored_overrides
                    .clone_from(&seen.restored_overrides);
            }
            if region.state_key_id != seen.state_key_id {
                region.state_key_id.clone_from(&seen.state_key_id);
            }
        }

        if let Some(applied) = &seen.applied
            && applied.revision == revision
            && applied.step == pass
            && !mark_is(region.materialized.as_ref(), &revision, pass)
        {
            region.materialized = Some(LifecycleMark {
                revision: revision.clone(),
                step: Some(pass),
                digest: Some(applied.digest.clone()),
                at: now.clone(),
            });
            if has_consumers && restarts {
                restart_in.push(name.to_owned());
            }
        } else if has_consumers
            && restarts
            && mark_is(region.materialized.as_ref(), &revision, pass)
            && !mark_is(region.delivered.as_ref(), &revision, pass)
            && seen.consumers.as_ref().is_some_and(|counts| {
                counts.revision == revision && counts.step == pass && counts.restart_pending
            })
        {
            // The restart asked for when the region materialized did not land (region
            // down, write refused): ask again. Restarting is keyed on revision and pass,
            // so asking twice restarts once.
            restart_in.push(name.to_owned());
        }

        if let Some(counts) = &seen.consumers
            && counts.revision == revision
            && counts.step == pass
        {
            region.consumers = Some(ConsumerCounts {
                total: i32::try_from(counts.total).unwrap_or(i32::MAX),
                delivered: i32::try_from(counts.delivered).unwrap_or(i32::MAX),
                activated: i32::try_from(counts.activated).unwrap_or(i32::MAX),
            });
            let ignored: Vec<String> = counts
                .ignored
                .iter()
                .take(MAX_IGNORED_NAMES)
                .cloned()
                .collect();
            if region.ignored_workloads != ignored {
                region.ignored_workloads = ignored;
            }
            let materialized = mark_is(region.materialized.as_ref(), &revision, pass);
            if has_consumers
                && materialized
                && counts.delivered >= counts.total
                && !mark_is(region.delivered.as_ref(), &revision, pass)
            {
                region.delivered = Some(LifecycleMark {
                    revision: revision.clone(),
                    step: Some(pass),
                    digest: None,
                    at: now.clone(),
                });
            }
            if has_consumers
                && mark_is(region.delivered.as_ref(), &revision, pass)
                && counts.activated >= counts.total
                && !mark_is(region.activated.as_ref(), &revision, pass)
            {
                region.activated = Some(LifecycleMark {
                    revision: revision.clone(),
                    step: Some(pass),
                    digest: None,
                    at: now.clone(),
                });
            }
        }
    }
    draft.status.regions = regions;
    // Regions the status listed that no stage selects any more keep what they hold; say
    // so once, when they leave. A rollback still reaches them (`status.reached`).
    let mut left: Vec<String> = previous
        .into_values()
        .filter(|region| region.materialized.is_some())
        .map(|region| region.name)
        .collect();
    left.sort();
    for name in left {
        let message = format!(
            "region {name} is no longer selected by any stage: it keeps what it holds of \
             this rollout, which is no longer rolled out there (a rollback of a revision \
             that reached it still reverts it)"
        );
        draft.event(EventType::Warning, "RegionLeftPlan", message);
    }
    for region in restart_in {
        draft.actions.push(Action::RestartConsumers {
            region,
            revision: revision.clone(),
            step: pass,
        });
    }
}
