//! Operator commands. `abort` stops the rollout where it is (Halted, reason Aborted);
//! `retry` resumes a halted rollout from its failed stage with fresh gate windows and a
//! fresh deadline. Each command is a request time (an annotation's RFC 3339 value), and:
//!
//! - each request acts once: `status.control` records the request times settled (acted
//!   on, refused, or consumed by an abort), and a request whose time is recorded (or
//!   older than the current revision) is stale;
//! - abort always wins: a fresh abort stops the rollout whatever a retry's time says,
//!   and consumes the retry requested at that moment, so that a retry written before the
//!   abort (however it is dated) never resumes it;
//! - a retry resumes only a halt that happened before it was requested, so it never
//!   resumes a later halt;
//! - a retry dated beyond now plus [`MAX_REQUEST_SKEW`] is refused (recorded, with an
//!   Event, and never acted on, not even once its time comes): a clock ahead must not
//!   keep resuming halts. An abort is never refused for its date: stopping is safe.

use chrono::{DateTime, TimeDelta, Utc};

use configrollout_api::{RolloutPhase, StageState, conditions};

use super::clock::{after, from_time, to_time};
use super::control_record::{record, whole_seconds};
use super::revisions::{OUTCOME_ABORTED, set_outcome};
use super::{Draft, EventType, failure};

/// Reason on the Halted condition when an operator aborted.
pub const REASON_ABORTED: &str = "Aborted";
/// How far ahead of the controller's clock a request may be dated.
pub const MAX_REQUEST_SKEW: TimeDelta = TimeDelta::seconds(60);

pub(super) fn apply(draft: &mut Draft<'_>) {
    let declared_at = draft
        .status
        .history
        .iter()
        .rev()
        .find(|record| Some(&record.name) == draft.status.revision.as_ref())
        .map(|record| from_time(&record.declared_at));
    let record = draft.status.control.clone().unwrap_or_default();
    let acted = |at: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        at.as_ref().map(from_time)
    };
    // A request is its annotation's value: a new request is a new time. Requests are
    // told apart from the settled ones by equality, not order, so that one dated ahead
    // cannot shadow the ones after it; at whole seconds, which is what status keeps
    // (metav1.Time), or one written with a fraction would never match its record and
    // act again forever. Ordering (after the declaration, after the halt) uses the full
    // time.
    let fresh = |at: Option<DateTime<Utc>>, settled: &[Option<DateTime<Utc>>]| {
        at.filter(|at| declared_at.is_none_or(|declared| *at >= declared))
            .filter(|at| !settled.contains(&Some(whole_seconds(*at))))
    };
    let control = &draft.obs.control;
    if let Some(abort_at) = fresh(control.abort_requested_at, &[acted(&record.abort_at)]) {
        abort(draft, abort_at, control.retry_requested_at);
        return;
    }
    let settled = [acted(&record.retry_at), acted(&record.refused_retry_at)];
    let Some(retry_at) = fresh(control.retry_requested_at, &settled) else {
        return;
    };
    if retry_at > after(draft.now, MAX_REQUEST_SKEW) {
        refuse_retry(draft, retry_at);
        return;
    }
    retry(draft, retry_at);
}

fn abort(draft: &mut Draft<'_>, requested_at: DateTime<Utc>, pending_retry: Option<DateTime<Utc>>) {
    let record = record(draft);
    record.abort_at = Some(to_time(whole_seconds(requested_at)));
    if let Some(retry) = pending_retry {
        record.retry_at = Some(to_time(whole_seconds(retry)));
    }
    // Nothing in flight to abort: a complete revision is the stable one, a rolled-back
    // one runs nowhere, and a rollback already reverts what was published.
    if matches!(
        draft.status.phase,
        Some(RolloutPhase::RolledBack | RolloutPhase::Complete | RolloutPhase::RollingBack)
    ) {
        return;
    }
    let revision = draft.revision().unwrap_or_default().to_owned();
    let message = format!("rollout of {revision} aborted by an operator");
    draft.event(EventType::Warning, REASON_ABORTED, message.clone());
    // An abort rolls back what was published, whatever `onFailure` says and whatever
    // stopped the rollout before (a halted one, or a rollback that gave up).
    if !draft.status.reached.is_empty() {
        failure::start_rollback(draft, REASON_ABORTED, message);
        return;
    }
    draft.status.phase = Some(RolloutPhase::Halted);
    set_outcome(draft, Some(OUTCOME_ABORTED));
    draft.halt = Some((REASON_ABORTED.to_owned(), message));
}

/// Records a retry dated too far ahead as refused: it must not resume anything, now or
/// when its time comes; a new request (with the current time) is needed.
fn refuse_retry(draft: &mut Draft<'_>, requested_at: DateTime<Utc>) {
    record(draft).refused_retry_at = Some(to_time(whole_seconds(requested_at)));
    let message = format!(
        "retry requested for {} refused: it is dated more than {}s ahead of the \
         controller's clock ({}); request it again with the current time",
        requested_at.to_rfc3339(),
        MAX_REQUEST_SKEW.num_seconds(),
        draft.now.to_rfc3339()
    );
    draft.event(EventType::Warning, "ControlRefused", message);
}

fn retry(draft: &mut Draft<'_>, requested_at: DateTime<Utc>) {
    if draft.status.phase != Some(RolloutPhase::Halted) {
        return;
    }
    let halted_since = draft
        .status
        .true_condition(conditions::HALTED)
        .map(|condition| from_time(&condition.last_transition_time));
    if halted_since.is_some_and(|since| requested_at <= since) {
        return;
    }
    record(draft).retry_at = Some(to_time(whole_seconds(requested_at)));
    // A rollback that gave up is resumed, never the forward pass it stopped: the revision
    // it reverts failed, and its marks in the regions not reverted yet are stale.
    let gave_up = draft
        .status
        .true_condition(conditions::HALTED)
        .is_some_and(|condition| condition.reason == failure::REASON_ROLLBACK_INCOMPLETE);
    if gave_up {
        draft.status.phase = Some(RolloutPhase::RollingBack);
        draft.resumed_now = true;
        set_outcome(draft, None);
        let message = format!(
            "rollback of {} resumed by an operator",
            draft.revision().unwrap_or_default()
        );
        draft.event(EventType::Normal, "Retried", message.clone());
        draft.halt = Some(("RollbackRetried".to_owned(), message));
        return;
    }
    for stage in &mut draft.status.stages {
        if stage.state == StageState::Failed {
            stage.state = StageState::Progressing;
            stage.verified_at = None;
            stage.gates.clear();
        }
    }
    draft.status.phase = Some(RolloutPhase::Progressing);
    draft.resumed_now = true;
    set_outcome(draft, None);
    let message = format!(
        "rollout of {} resumed by an operator",
        draft.revision().unwrap_or_default()
    );
    draft.event(EventType::Normal, "Retried", message);
}
