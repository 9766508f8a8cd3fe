//! What `status.control` records: the operator requests (abort, retry) already settled,
//! shared by the commands that settle them (`control`) and the halts that must consume a
//! pending retry (`failure`).

use chrono::{DateTime, Utc};

use configrollout_api::ControlRecord;

use super::Draft;
use super::clock::to_time;

/// A request time as recorded: whole seconds, as annotations carry them.
pub(super) fn whole_seconds(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(at.timestamp(), 0).unwrap_or(at)
}

/// The rollout's record of settled requests, created on first use.
pub(super) fn record<'s>(draft: &'s mut Draft<'_>) -> &'s mut ControlRecord {
    draft
        .status
        .control
        .get_or_insert_with(ControlRecord::default)
}

/// Settles a retry requested before now without acting on it: for a halt that happens
/// now (a rollback giving up), which a retry requested earlier must not resume.
pub(super) fn consume_pending_retry(draft: &mut Draft<'_>) {
    let now = draft.now;
    if let Some(requested_at) = draft.obs.control.retry_requested_at.filter(|at| *at <= now) {
        record(draft).retry_at = Some(to_time(whole_seconds(requested_at)));
    }
}
