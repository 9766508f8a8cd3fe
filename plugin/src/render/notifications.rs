//! A rollout's notifications as rows: one per subscription the spec names (in its
//! order), then one per sink the status still delivers to that the spec no longer
//! names. Raw text: each rendering makes it safe for where it is shown.

use configrollout_api::{ConfigRollout, NotificationStatus, NotificationTrigger, SinkDelivery};

use super::text::time;

/// One sink's subscription and delivery, as `get` and the dashboard show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotificationRow {
    /// The ClusterNotificationSink.
    pub sink: String,
    /// Whether the spec names it. A sink only the status names is one the namespace's
    /// grant subscribes every rollout to (annotation `configrollout.dev/notify`): the
    /// controller lists every subscription in the status, and drops one that ends at its
    /// next reconcile.
    pub subscribed: bool,
    /// The triggers announced, comma-separated, or `all`.
    pub triggers: String,
    /// The delivery the status records, `None` before the controller recorded one.
    pub delivery: Option<DeliveryRow>,
}

/// How far one sink was delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryRow {
    /// Notices in the outbox for this sink and not delivered to it yet.
    pub pending: usize,
    /// How the last attempt ended, or `-`.
    pub last: String,
    /// When the last attempt ended, or `-`.
    pub at: String,
    /// Notices given up on.
    pub given_up: i64,
    /// Why the last attempt failed, or `-`.
    pub message: String,
}

fn trigger_list(triggers: &[NotificationTrigger]) -> String {
    if triggers.is_empty() {
        return "all".to_owned();
    }
    triggers
        .iter()
        .map(|trigger| trigger.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The notices of `status`'s outbox not yet delivered to `delivery`'s sink and meant
/// for it (no triggers: every notice is).
pub fn pending_notices(status: &NotificationStatus, delivery: &SinkDelivery) -> usize {
    configrollout_core::notify::owed(&status.outbox, delivery).count()
}

fn delivery_row(status: &NotificationStatus, delivery: &SinkDelivery) -> DeliveryRow {
    DeliveryRow {
        pending: pending_notices(status, delivery),
        last: delivery
            .last_result
            .map_or_else(|| "-".to_owned(), |result| result.as_str().to_owned()),
        at: delivery
            .last_attempt_at
            .as_ref()
            .map_or_else(|| "-".to_owned(), time),
        given_up: delivery.given_up,
        message: delivery.message.clone().unwrap_or_else(|| "-".to_owned()),
    }
}

/// The rollout's notification rows; empty when it subscribes to nothing and its status
/// records no delivery.
pub fn notification_rows(rollout: &ConfigRollout) -> Vec<NotificationRow> {
    let status = rollout
        .status
        .as_ref()
        .and_then(|status| status.notifications.as_ref());
    let delivery = |sink: &str| status.and_then(|status| Some((status, status.sink(sink)?)));
    let mut rows: Vec<NotificationRow> = rollout
        .spec
        .notifications
        .iter()
        .map(|subscription| NotificationRow {
            sink: subscription.sink.clone(),
            subscribed: true,
            triggers: trigger_list(&subscription.triggers),
            delivery: delivery(&subscription.sink)
                .map(|(status, delivery)| delivery_row(status, delivery)),
        })
        .collect();
    if let Some(status) = status {
        for delivery in &status.sinks {
            if rows.iter().any(|row| row.sink == delivery.sink) {
                continue;
            }
            rows.push(NotificationRow {
                sink: delivery.sink.clone(),
                subscribed: false,
                triggers: trigger_list(&delivery.triggers),
                delivery: Some(delivery_row(status, delivery)),
            });
        }
    }
    rows
}
