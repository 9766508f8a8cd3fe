//! Failure: a failed gate or an exceeded progress deadline applies `onFailure`. `Halt`
//! stops where it is; `Rollback` reverts the revision in every region of every stage it
//! reached, last stage first, one stage at a time, then reports RolledBack. A region the
//! revision never reached has nothing to revert and counts as rolled back; one that stays
//! unreachable (or refuses the compensation) ends the rollback Halted
//! (`RollbackIncomplete`, naming it) after the progress deadline. A halted rollout resumes only by retry, abort or a new revision.

use std::collections::HashMap;

use crate::api::{
    DEFAULT_PROGRESS_DEADLINE, OnFailure, RevisionStep, RolloutPhase, StageState, conditions,
};

use super::clock::{after, from_time, spec_duration};
use super::revisions::{OUTCOME_HALTED, OUTCOME_ROLLED_BACK, set_outcome};
use super::{Draft, EventType, control};

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
            draft.status.phase = Some(RolloutPhase::RollingBack);
            draft.halt = Some((reason.to_owned(), message));
            let revision = draft.revision().unwrap_or_default().to_owned();
            draft.event(
                EventType::Warning,
                "RollbackStarted",
                format!("reverting {revision} in every region it reached, last stage first"),
            );
            continue_rollback(draft);
        }
    }
}

/// Reason on the Halted condition when a region holds entries stamped far ahead.
pub const REASON_FUTURE_STAMPS: &str = "FutureStamps";

/// Halts a running rollout when a selected region holds entries of its keys stamped
/// further ahead than the clock's drift bound: those entries win every write until their
/// time comes, so the revision could never really reach the region, and reporting it
/// Complete would be a lie. Neither rollback nor retry helps; a person must look.
pub(super) fn halt_on_future_stamps(draft: &mut Draft<'_>) {
    if !matches!(
        draft.status.phase,
        Some(RolloutPhase::Progressing | RolloutPhase::AwaitingApproval | RolloutPhase::Paused)
    ) {
        return;
    }
    let selected: std::collections::HashSet<&str> =
        draft.plan.all_regions().map(|(_, name)| name).collect();
    let found: Vec<String> = draft
        .obs
        .regions
        .iter()
        .filter(|region| region.future_stamped_keys > 0 && selected.contains(region.name.as_str()))
        .map(|region| format!("{} ({} keys)", region.name, region.future_stamped_keys))
        .collect();
    if found.is_empty() {
        return;
    }
    let message = format!(
        "region(s) {} hold entries of this rollout's keys stamped further ahead than the \
         clock's drift bound: they would win every later write, so the revision cannot \
         take effect there; a person must remove them (the companion ConfigMap) and retry",
        found.join(", ")
    );
    draft.event(EventType::Warning, REASON_FUTURE_STAMPS, message.clone());
    draft.status.phase = Some(RolloutPhase::Halted);
    set_outcome(draft, Some(OUTCOME_HALTED));
    draft.halt = Some((REASON_FUTURE_STAMPS.to_owned(), message));
}

/// Stages whose regions may have received the revision: every stage once the contract
/// pass runs (the expand pass reached them all), otherwise the stages that started.
fn reached_stages(draft: &Draft<'_>) -> Vec<usize> {
    (0..draft.spec.stages.len())
        .filter(|&index| {
            draft.revision_step() == RevisionStep::Contract
                || draft.status.stages.get(index).is_some_and(|stage| {
                    !matches!(
                        stage.state,
                        StageState::Pending | StageState::AwaitingApproval
                    )
                })
        })
        .collect()
}

/// The stage being rolled back (the last reached stage with a reachable region not yet
/// reverted), and whether any region still waits for its rollback.
pub(super) fn rollback_cursor(draft: &Draft<'_>) -> (Option<usize>, bool) {
    let revision = draft.revision().unwrap_or_default();
    let rolled_back: HashMap<&str, bool> = draft
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
    let reachable = |name: &str| {
        draft
            .status
            .regions
            .iter()
            .find(|region| region.name == name)
            .is_some_and(|region| region.reachable == Some(true))
    };
    let mut any_pending = false;
    let mut cursor = None;
    for index in reached_stages(draft).into_iter().rev() {
        for name in &draft.plan.stages[index] {
            if rolled_back.get(name).copied().unwrap_or(false) {
                continue;
            }
            any_pending = true;
            if cursor.is_none() && reachable(name) {
                cursor = Some(index);
            }
        }
        if cursor.is_some() {
            break;
        }
    }
    (cursor, any_pending)
}

/// Moves the rollback on; the publishes themselves come from `dispatch`.
pub(super) fn continue_rollback(draft: &mut Draft<'_>) {
    let (cursor, any_pending) = rollback_cursor(draft);
    if !any_pending {
        draft.status.phase = Some(RolloutPhase::RolledBack);
        draft.status.current_stage = None;
        set_outcome(draft, Some(OUTCOME_ROLLED_BACK));
        let message = format!(
            "{} reverted in every region it reached",
            draft.revision().unwrap_or_default()
        );
        draft.event(EventType::Normal, "RolledBack", message);
        return;
    }
    if rollback_expired(draft) {
        give_up_rollback(draft);
        return;
    }
    draft.status.current_stage = cursor.map(|index| draft.spec.stages[index].name.clone());
    draft.poll_regions();
}

/// Reason on the Halted condition when a rollback could not reach every region in time.
pub const REASON_ROLLBACK_INCOMPLETE: &str = "RollbackIncomplete";

/// Whether the rollback has run for the rollout's progress deadline since it began (the
/// Halted condition's transition) with regions still not reverted. Schedules a look at
/// the deadline otherwise.
fn rollback_expired(draft: &mut Draft<'_>) -> bool {
    let deadline = draft
        .spec
        .progress_deadline
        .as_deref()
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE);
    let Some(deadline) = spec_duration(deadline) else {
        return false;
    };
    let Some(began) = draft
        .status
        .true_condition(conditions::HALTED)
        .map(|condition| from_time(&condition.last_transition_time))
    else {
        return false;
    };
    let expires = after(began, deadline);
    if draft.now >= expires {
        return true;
    }
    draft.wake_at(expires);
    false
}

/// Ends a rollback that regions still wait for past its deadline (unreachable, or
/// refusing the compensation): Halted, naming them, so that a person decides (retry or
/// abort once they are back) instead of it spinning.
fn give_up_rollback(draft: &mut Draft<'_>) {
    let revision = draft.revision().unwrap_or_default().to_owned();
    let waiting: Vec<String> = reached_stages(draft)
        .into_iter()
        .flat_map(|index| draft.plan.stages[index].iter().copied())
        .filter(|name| {
            !draft.obs.regions.iter().any(|region| {
                region.name == *name && region.rolled_back.as_deref() == Some(revision.as_str())
            })
        })
        .take(10)
        .map(|name| {
            let reachable = draft
                .status
                .regions
                .iter()
                .any(|region| region.name == name && region.reachable == Some(true));
            if reachable {
                name.to_owned()
            } else {
                format!("{name} (unreachable)")
            }
        })
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
    control::consume_pending_retry(draft);
    draft.status.phase = Some(RolloutPhase::Halted);
    draft.status.current_stage = None;
    set_outcome(draft, Some(OUTCOME_HALTED));
    draft.halt = Some((REASON_ROLLBACK_INCOMPLETE.to_owned(), message));
}
