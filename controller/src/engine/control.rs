//! Operator commands. `abort` stops the rollout where it is (Halted, reason Aborted);
//! `retry` resumes a halted rollout from its failed stage with fresh gate windows and a
//! fresh deadline. Each command is a request time: the latest command wins, a command
//! older than the current revision is stale, and a retry resumes only a halt that
//! happened before it was requested, so one retry is acted on once.

use chrono::{DateTime, Utc};

use crate::api::{RolloutPhase, StageState, conditions};

use super::clock::from_time;
use super::revisions::{OUTCOME_ABORTED, set_outcome};
use super::{EventType, Step};

/// Reason on the Halted condition when an operator aborted.
pub const REASON_ABORTED: &str = "Aborted";

enum Command {
    Abort,
    Retry(DateTime<Utc>),
}

pub(super) fn apply(step: &mut Step<'_>) {
    let declared_at = step
        .status
        .history
        .iter()
        .rev()
        .find(|record| Some(&record.name) == step.status.revision.as_ref())
        .map(|record| from_time(&record.declared_at));
    let fresh = |at: Option<DateTime<Utc>>| at.filter(|at| declared_at.is_none_or(|d| *at >= d));
    let control = &step.obs.control;
    let command = match (
        fresh(control.abort_requested_at),
        fresh(control.retry_requested_at),
    ) {
        (Some(abort), Some(retry)) if retry > abort => Command::Retry(retry),
        (Some(_), _) => Command::Abort,
        (None, Some(retry)) => Command::Retry(retry),
        (None, None) => return,
    };
    match command {
        Command::Abort => abort(step),
        Command::Retry(at) => retry(step, at),
    }
}

fn abort(step: &mut Step<'_>) {
    if matches!(
        step.status.phase,
        Some(RolloutPhase::Halted | RolloutPhase::RolledBack | RolloutPhase::Complete)
    ) {
        return;
    }
    let revision = step.revision().unwrap_or_default().to_owned();
    let message = format!("rollout of {revision} aborted by an operator");
    step.status.phase = Some(RolloutPhase::Halted);
    set_outcome(step, Some(OUTCOME_ABORTED));
    step.event(EventType::Warning, REASON_ABORTED, message.clone());
    step.halt = Some((REASON_ABORTED.to_owned(), message));
}

fn retry(step: &mut Step<'_>, requested_at: DateTime<Utc>) {
    if step.status.phase != Some(RolloutPhase::Halted) {
        return;
    }
    let halted_since = step
        .status
        .conditions
        .iter()
        .find(|condition| condition.type_ == conditions::HALTED && condition.status == "True")
        .map(|condition| from_time(&condition.last_transition_time));
    if halted_since.is_some_and(|since| requested_at <= since) {
        return;
    }
    for stage in &mut step.status.stages {
        if stage.state == StageState::Failed {
            stage.state = StageState::Progressing;
            stage.verified_at = None;
            stage.gates.clear();
        }
    }
    step.status.phase = Some(RolloutPhase::Progressing);
    step.resumed_now = true;
    set_outcome(step, None);
    let message = format!(
        "rollout of {} resumed by an operator",
        step.revision().unwrap_or_default()
    );
    step.event(EventType::Normal, "Retried", message);
}
