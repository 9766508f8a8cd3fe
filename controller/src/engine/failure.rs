//! Failure: a failed gate or an exceeded progress deadline applies `onFailure`. `Halt`
//! stops where it is; `Rollback` reverts the revision in every region of every stage it
//! reached, last stage first, one stage at a time, then reports RolledBack. A halted
//! rollout resumes only by retry, abort or a new revision.

use std::collections::HashMap;

use crate::api::{OnFailure, RevisionStep, RolloutPhase, StageState};

use super::revisions::{OUTCOME_HALTED, OUTCOME_ROLLED_BACK, set_outcome};
use super::{EventType, Step};

/// Fails the stage at `index` and applies `onFailure`.
pub(super) fn fail(step: &mut Step<'_>, index: usize, reason: &str, message: String) {
    step.status.stages[index].state = StageState::Failed;
    step.status.current_stage = Some(step.spec.stages[index].name.clone());
    step.event(EventType::Warning, reason, message.clone());
    match step.spec.on_failure {
        OnFailure::Halt => {
            step.status.phase = Some(RolloutPhase::Halted);
            set_outcome(step, Some(OUTCOME_HALTED));
            step.halt = Some((reason.to_owned(), message));
        }
        OnFailure::Rollback => {
            step.status.phase = Some(RolloutPhase::RollingBack);
            step.halt = Some((reason.to_owned(), message));
            let revision = step.revision().unwrap_or_default().to_owned();
            step.event(
                EventType::Warning,
                "RollbackStarted",
                format!("reverting {revision} in every region it reached, last stage first"),
            );
            continue_rollback(step);
        }
    }
}

/// Reason on the Halted condition when a region holds entries stamped far ahead.
pub const REASON_FUTURE_STAMPS: &str = "FutureStamps";

/// Halts a running rollout when a selected region holds entries of its keys stamped
/// further ahead than the clock's drift bound: those entries win every write until their
/// time comes, so the revision could never really reach the region, and reporting it
/// Complete would be a lie. Neither rollback nor retry helps; a person must look.
pub(super) fn halt_on_future_stamps(step: &mut Step<'_>) {
    if !matches!(
        step.status.phase,
        Some(RolloutPhase::Progressing | RolloutPhase::AwaitingApproval | RolloutPhase::Paused)
    ) {
        return;
    }
    let selected: std::collections::HashSet<&str> =
        step.plan.all_regions().map(|(_, name)| name).collect();
    let found: Vec<String> = step
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
    step.event(EventType::Warning, REASON_FUTURE_STAMPS, message.clone());
    step.status.phase = Some(RolloutPhase::Halted);
    set_outcome(step, Some(OUTCOME_HALTED));
    step.halt = Some((REASON_FUTURE_STAMPS.to_owned(), message));
}

/// Stages whose regions may have received the revision: every stage once the contract
/// pass runs (the expand pass reached them all), otherwise the stages that started.
fn reached_stages(step: &Step<'_>) -> Vec<usize> {
    (0..step.spec.stages.len())
        .filter(|&index| {
            step.pass() == RevisionStep::Contract
                || step.status.stages.get(index).is_some_and(|stage| {
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
pub(super) fn rollback_cursor(step: &Step<'_>) -> (Option<usize>, bool) {
    let revision = step.revision().unwrap_or_default();
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
    let reachable = |name: &str| {
        step.status
            .regions
            .iter()
            .find(|region| region.name == name)
            .is_some_and(|region| region.reachable == Some(true))
    };
    let mut any_pending = false;
    let mut cursor = None;
    for index in reached_stages(step).into_iter().rev() {
        for name in &step.plan.stages[index] {
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
pub(super) fn continue_rollback(step: &mut Step<'_>) {
    let (cursor, any_pending) = rollback_cursor(step);
    if !any_pending {
        step.status.phase = Some(RolloutPhase::RolledBack);
        step.status.current_stage = None;
        set_outcome(step, Some(OUTCOME_ROLLED_BACK));
        let message = format!(
            "{} reverted in every region it reached",
            step.revision().unwrap_or_default()
        );
        step.event(EventType::Normal, "RolledBack", message);
        return;
    }
    step.status.current_stage = cursor.map(|index| step.spec.stages[index].name.clone());
    step.poll_regions();
}
