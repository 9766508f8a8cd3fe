//! The reconcile's part in notifications: raise the notices of this reconcile's
//! transitions into the status it writes, then hand the written outbox to the sender.

use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::ResourceExt;

use super::Context;
use crate::api::{ConfigRollout, ConfigRolloutStatus, NotificationStatus, Subscription};
use crate::notify::{self, Transition};

/// Raises `transitions` (what this reconcile's rounds changed) into `status` for the
/// rollout's `subscriptions`, with what the sender delivered since the stored status was
/// written. Returns when a reminder of an awaited approval falls due, if one will.
pub(super) fn raise(
    ctx: &Context,
    stored: &ConfigRollout,
    subscriptions: &[Subscription],
    status: &mut ConfigRolloutStatus,
    transitions: Vec<Transition>,
    now: DateTime<Utc>,
) -> Option<Duration> {
    let deliveries = match stored.uid() {
        Some(uid) if !subscriptions.is_empty() => ctx.notifier.deliveries(&uid),
        _ => Vec::new(),
    };
    let unwritten = ConfigRolloutStatus::default();
    let previous = stored.status.as_ref().unwrap_or(&unwritten);
    notify::raise_found(
        previous,
        status,
        transitions,
        subscriptions,
        &deliveries,
        now,
    )
}

/// Hands the outbox as stored now to the sender, when this replica holds the rollout's
/// shard: only the holder sends.
pub(super) fn offer(ctx: &Context, stored: &ConfigRollout, outbox: Option<&NotificationStatus>) {
    if !ctx.fence.holds(stored) {
        return;
    }
    ctx.notifier.offer(stored, outbox);
}
