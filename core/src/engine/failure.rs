//! Failure: a failed gate or an exceeded progress deadline applies `onFailure`. `Halt`
//! stops where it is; `Rollback` reverts the revision in every region a revision reached
//! since the stable one (the last that completed), off-plan regions first, then last
//! stage first, one group at a time, then reports RolledBack. It restores the stable
//! revision's values (see `regions::publication`): never a value that was itself rolled
//! back or never verified. A region with nothing to revert counts as rolled back; one
//! that stays unreachable, is not read (no Region object, or outside the grant) or
//! refuses the compensation ends the rollback Halted (`RollbackIncomplete`, naming it)
//! after the progress deadline, and a retry or abort resumes the rollback, never the
//! forward pass. A halted rollout resumes only by retry, abort or a new revision.

use std::collections::HashSet;

use configrollout_api::{
    ConfigRolloutSpec, ConfigRolloutStatus, DEFAULT_PROGRESS_DEADLINE, OnFailure, RevisionStep,
    RolloutPhase, StageState, conditions,
};

use super::clock::{after, from_time, spec_duration};
use super::control_record::consume_pending_retry;
use super::observations::Observations;
use super::revisions::{OUTCOME_HALTED, OUTCOME_ROLLED_BACK, set_outcome};
use super::selection::StagePlan;
use super::{Draft, EventType};

/// Fails the stage at `index` and applies `onFailure`.
pub(super) fn fail(draft: &mut Draft<'_>, index: usize, reason: &str, message: String) {
    draft.status.stages[index].state = StageState::Failed;
    draft.status.current_stage = Some(draft.spec.stages[index].name.clone());
    draft.event(EventType::Warning, reason, message.clone());
    match draft.spec.on_failure {
        OnFailure::Halt => {
            draft.status.phase = Some(RolloutPhase::Halted);
            set_outcome(draft, Some(OUTCOME_HALTED));
            draft.halt = Some((reason.to_owned(), message));
        }
        OnFailure::Rollback => {
            start_rollback(draft, reason, message);
            continue_rollback(draft);
        }
    }
}

/// Turns the rollout to reverting the current revision, for `reason` (the Halted
/// condition's); [`continue_rollback`] moves it on.
pub(super) fn start_rollback(draft: &mut Draft<'_>, reason: &str, message: String) {
    draft.status.phase = Some(RolloutPhase::RollingBack);
    draft.halt = Some((reason.to_owned(), message));
    let revision = draft.revision().unwrap_or_default().to_owned();
    let message = format!(
        "reverting {revision} in every region it reached, last stage first, to {}",
        restored(draft)
    );
    draft.event(EventType::Warning, "RollbackStarted", message);
}

/// Reason on the Halted condition when a region holds entries stamped far ahead.
pub const REASON_FUTURE_STAMPS: &str = "FutureStamps";
/// Reason of the halt when a selected region's companion state fails its MAC.
pub const REASON_TAMPERED_STATE: &str = "TamperedState";

/// Halts a running rollout when a selected region holds entries of its keys stamped
/// further ahead than the clock's drift bound: those entries win every write until their
/// time comes, so the revision could never really reach the region, and reporting it
/// Complete would be a lie. Neither rollback nor retry helps; a person must look.
pub(super) fn halt_on_future_stamps(draft: &mut Draft<'_>) {
    let found = running_and_selected(draft, |region| {
        (region.future_stamped_keys > 0)
            .then(|| format!("{} ({} keys)", region.name, region.future_stamped_keys))
    });
    if found.is_empty() {
        return;
    }
    let message = format!(
        "region(s) {} hold entries of this rollout's keys (or a horizon) stamped further \
         ahead than the clock's drift bound: they would win every later write, so the \
         revision cannot take effect there; a person must look, rebuild the region's state \
         with `kubectl configrollout repair-state --force` and retry",
        found.join(", ")
    );
    halt(draft, REASON_FUTURE_STAMPS, message);
}

/// Halts a progressing rollout when a region its stages select holds a companion state
/// that fails its MAC: someone who may edit ConfigMaps there changed the replica (or it
/// was signed with a key the controller does not hold). The state is never read or
/// written over, so the revision cannot be shown to have reached the region; waiting for
/// the stage's deadline would only delay what a person must do (README, "A region's
/// state fails its MAC").
pub(super) fn halt_on_tampered_state(draft: &mut Draft<'_>) {
    let found = running_and_selected(draft, |region| region.tampered.then(|| region.name.clone()));
    if found.is_empty() {
        return;
    }
    let message = format!(
        "region(s) {} hold a companion state that fails its MAC: it was edited outside \
         configrollout, so nothing of it is read or written over; repair it with `kubectl \
         configrollout repair-state` (README, \"A region's state fails its MAC\") and retry",
        found.join(", ")
    );
    halt(draft, REASON_TAMPERED_STATE, message);
}

/// What `describe` says of each region the stages select, while the rollout runs (nothing
/// when it does not: a complete or halted rollout writes nothing to halt).
fn running_and_selected(
    draft: &Draft<'_>,
    describe: impl Fn(&super::RegionObservation) -> Option<String>,
) -> Vec<String> {
    if !matches!(
        draft.status.phase,
        Some(RolloutPhase::Progressing | RolloutPhase::AwaitingApproval | RolloutPhase::Paused)
    ) {
        return Vec::new();
    }
    let selected: std::collections::HashSet<&str> =
        draft.plan.all_regions().map(|(_, name)| name).collect();
    draft
        .obs
        .regions
        .iter()
        .filter(|region| selected.contains(region.name.as_str()))
        .filter_map(describe)
        .collect()
}

fn halt(draft: &mut Draft<'_>, reason: &str, message: String) {
    draft.event(EventType::Warning, reason, message.clone());
    draft.status.phase = Some(RolloutPhase::Halted);
    set_outcome(draft, Some(OUTCOME_HALTED));
    draft.halt = Some((reason.to_owned(), message));
}

/// The regions a rollback reverts, in the order it reverts them, each group a stage
/// (`Some(index)`) or the regions no stage selects any more (`None`). Off-plan regions
/// come first (nothing else will ever look at them); then, last stage first, each stage
/// that started, or that holds a region a revision reached since the stable one. A
/// region a revision reached is covered whatever the stages select now: relabelled,
/// named by no stage, or moved to a later stage.
pub(super) fn rollback_groups(
    spec: &ConfigRolloutSpec,
    plan: &StagePlan<'_>,
    status: &ConfigRolloutStatus,
) -> Vec<(Option<usize>, Vec<String>)> {
    let reached: HashSet<&str> = status.reached.iter().map(String::as_str).collect();
    let planned: HashSet<&str> = plan.all_regions().map(|(_, name)| name).collect();
    let mut groups = Vec::new();
    let off_plan: Vec<String> = status
        .reached
        .iter()
        .filter(|name| !planned.contains(name.as_str()))
        .cloned()
        .collect();
    if !off_plan.is_empty() {
        groups.push((None, off_plan));
    }
    let contract = status.step == Some(RevisionStep::Contract);
    for (index, regions) in plan.stages.iter().enumerate().rev() {
        let started = contract
            || status.stages.get(index).is_some_and(|stage| {
                !matches!(
                    stage.state,
                    StageState::Pending | StageState::AwaitingApproval
                )
            });
        let covered: Vec<String> = regions
            .iter()
            .filter(|name| started || reached.contains(**name))
            .map(|name| (*name).to_owned())
            .collect();
        if !covered.is_empty() && index < spec.stages.len() {
            groups.push((Some(index), covered));
        }
    }
    groups
}

/// Where a rollback stands: the group being reverted (the first, in rollback order, with
/// a reachable region not reverted yet), and whether any region still waits.
pub(super) struct RollbackCursor {
    /// Index in [`rollback_groups`] of the group being reverted.
    pub(super) group: Option<usize>,
    /// Whether some region (reachable or not) is not reverted yet.
    pub(super) pending: bool,
}

/// Reads where the rollback of the status's revision stands from what was observed: a
/// region is reverted when its replica holds nothing of the revision left to revert,
/// reachable when it answered. A region that was not read (no Region object, or outside
/// the grant) is neither.
pub(super) fn rollback_cursor(
    groups: &[(Option<usize>, Vec<String>)],
    obs: &Observations,
    revision: &str,
) -> RollbackCursor {
    let mut cursor = RollbackCursor {
        group: None,
        pending: false,
    };
    for (position, (_, regions)) in groups.iter().enumerate() {
        for name in regions {
            let seen = obs.regions.iter().find(|region| &region.name == name);
            if seen.is_some_and(|region| region.rolled_back.as_deref() == Some(revision)) {
                continue;
            }
            cursor.pending = true;
            if cursor.group.is_none() && seen.is_some_and(|region| region.reachable) {
                cursor.group = Some(position);
            }
        }
        if cursor.group.is_some() {
            break;
        }
    }
    cursor
}

/// Moves the rollback on; the merges themselves come from `dispatch`.
pub(super) fn continue_rollback(draft: &mut Draft<'_>) {
    let revision = draft.revision().unwrap_or_default().to_owned();
    let groups = rollback_groups(draft.spec, &draft.plan, &draft.status);
    let cursor = rollback_cursor(&groups, draft.obs, &revision);
    forget_reverted(draft, &revision);
    if !cursor.pending {
        draft.status.phase = Some(RolloutPhase::RolledBack);
        draft.status.current_stage = None;
        draft.status.reached.clear();
        set_outcome(draft, Some(OUTCOME_ROLLED_BACK));
        let message = format!(
            "{revision} reverted in every region it reached, to {}",
            restored(draft)
        );
        draft.event(EventType::Normal, "RolledBack", message);
        return;
    }
    if rollback_expired(draft) {
        give_up_rollback(draft, &groups);
        return;
    }
    draft.status.current_stage = cursor
        .group
        .and_then(|position| groups.get(position))
        .and_then(|(stage, _)| *stage)
        .map(|index| draft.spec.stages[index].name.clone());
    draft.poll_regions();
}

/// What a rollback restores, in words: the stable revision, or no keys at all when none
/// ever completed.
pub(super) fn restored(draft: &Draft<'_>) -> String {
    match draft.status.stable_revision.as_deref() {
        Some(stable) => format!("the values of {stable}, the last revision that completed"),
        None => "no keys of this rollout (no revision had completed before)".to_owned(),
    }
}

/// Clears the lifecycle marks of `revision` in every region observed reverted: a mark
/// says the region runs the revision, and a reverted region does not.
fn forget_reverted(draft: &mut Draft<'_>, revision: &str) {
    let reverted: Vec<&str> = draft
        .obs
        .regions
        .iter()
        .filter(|seen| seen.rolled_back.as_deref() == Some(revision))
        .map(|seen| seen.name.as_str())
        .collect();
    for region in reverted {
        forget_marks(&mut draft.status, region, revision);
    }
}

/// Clears `region`'s lifecycle marks of `revision`.
pub(super) fn forget_marks(status: &mut ConfigRolloutStatus, region: &str, revision: &str) {
    let Some(region) = status.regions.iter_mut().find(|known| known.name == region) else {
        return;
    };
    for mark in [
        &mut region.materialized,
        &mut region.delivered,
        &mut region.activated,
    ] {
        if mark.as_ref().is_some_and(|mark| mark.revision == revision) {
            *mark = None;
        }
    }
}

/// Reason on the Halted condition when a rollback could not reach every region in time.
pub const REASON_ROLLBACK_INCOMPLETE: &str = "RollbackIncomplete";

/// Whether the rollback has run for the rollout's progress deadline since it began (the
/// Halted condition's transition, or the retry or abort that resumed it, whichever is
/// later) with regions still not reverted. Schedules a look at the deadline otherwise.
fn rollback_expired(draft: &mut Draft<'_>) -> bool {
    let deadline = draft
        .spec
        .progress_deadline
        .as_deref()
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE);
    let Some(deadline) = spec_duration(deadline) else {
        return false;
    };
    let halted = draft
        .status
        .true_condition(conditions::HALTED)
        .map(|condition| from_time(&condition.last_transition_time));
    let resumed = draft.status.control.as_ref().and_then(|control| {
        [control.retry_at.as_ref(), control.abort_at.as_ref()]
            .into_iter()
            .flatten()
            .map(from_time)
            .max()
    });
    let began = if draft.resumed_now {
        Some(draft.now)
    } else {
        halted.max(resumed)
    };
    let Some(began) = began else {
        return false;
    };
    let expires = after(began, deadline);
    if draft.now >= expires {
        return true;
    }
    draft.wake_at(expires);
    false
}

/// Ends a rollback that regions still wait for past its deadline (unreachable, not read,
/// or refusing the compensation): Halted, naming them, so that a person decides (retry
/// or abort once they are back) instead of it spinning.
fn give_up_rollback(draft: &mut Draft<'_>, groups: &[(Option<usize>, Vec<String>)]) {
    let revision = draft.revision().unwrap_or_default().to_owned();
    let waiting: Vec<String> = groups
        .iter()
        .flat_map(|(_, regions)| regions.iter())
        .filter_map(|name| {
            let seen = draft.obs.regions.iter().find(|region| &region.name == name);
            if seen.is_some_and(|region| region.rolled_back.as_deref() == Some(revision.as_str())) {
                return None;
            }
            Some(match seen {
                Some(region) if region.reachable => name.clone(),
                Some(_) => format!("{name} (unreachable)"),
                None if !draft.obs.grant.allows_region(name) => {
                    format!("{name} (no longer in the grant)")
                }
                None => format!("{name} (not read: no Region object)"),
            })
        })
        .take(10)
        .collect();
    let message = format!(
        "rollback of {revision} did not finish in region(s) {} within the progress \
         deadline: they may still hold {revision}; retry or abort once they are back",
        waiting.join(", ")
    );
    draft.event(
        EventType::Warning,
        REASON_ROLLBACK_INCOMPLETE,
        message.clone(),
    );
    // This halt is new: a retry asked for while the rollback ran does not resume it.
    consume_pending_retry(draft);
    draft.status.phase = Some(RolloutPhase::Halted);
    draft.status.current_stage = None;
    set_outcome(draft, Some(OUTCOME_HALTED));
    draft.halt = Some((REASON_ROLLBACK_INCOMPLETE.to_owned(), message));
}
