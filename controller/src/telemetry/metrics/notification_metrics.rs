//! Notification deliveries. The one family labelled by something other than a closed
//! enum: the sink, whose names a platform admin chooses (cluster-scoped objects a tenant
//! cannot create). A name no ClusterNotificationSink has is exported as `unknown`, and
//! past [`MAX_SINK_LABELS`] names every further one as `other`, so a tenant naming
//! sinks that do not exist cannot grow the series.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as RawGauge;
use prometheus_client::registry::Registry;

use super::Histogram;

/// Most sink names exported as labels.
pub const MAX_SINK_LABELS: usize = 64;
/// Buckets (seconds) of the time from a transition to its delivery.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// How one delivery attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The receiver answered 2xx.
    Delivered,
    /// It failed and is retried.
    Failed,
    /// It failed on its last attempt: given up.
    GaveUp,
    /// Dropped from a full outbox before it was delivered.
    Dropped,
    /// The sink could not be used (missing, a Secret missing, an invalid URL).
    Unusable,
}

impl DeliveryOutcome {
    /// Every outcome.
    pub const ALL: [DeliveryOutcome; 5] = [
        Self::Delivered,
        Self::Failed,
        Self::GaveUp,
        Self::Dropped,
        Self::Unusable,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Failed => "failed",
            Self::GaveUp => "gave_up",
            Self::Dropped => "dropped",
            Self::Unusable => "unusable",
        }
    }
}

type Labels = Vec<(&'static str, String)>;

/// The notification families.
#[derive(Debug, Clone)]
pub struct NotificationMetrics {
    deliveries: Family<Labels, Counter>,
    latency: Histogram,
    queued: RawGauge,
    names: Arc<Mutex<BTreeSet<String>>>,
}

impl Default for NotificationMetrics {
    fn default() -> Self {
        let metrics = Self {
            deliveries: Family::default(),
            latency: Histogram::new(LATENCY_BUCKETS),
            queued: RawGauge::default(),
            names: Arc::default(),
        };
        // The family is exported from the start, as every other is: with the `unknown`
        // sink's series, which each real sink's join at its first attempt.
        for outcome in DeliveryOutcome::ALL {
            metrics.count(None, outcome, 0);
        }
        metrics
    }
}

impl NotificationMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            super::counter_name("configrollout_notifications_total"),
            "Notification delivery attempts, by sink and result (delivered, failed and \
             retried, gave_up after the last attempt, dropped from a full outbox, unusable \
             sink)",
            self.deliveries.clone(),
        );
        registry.register(
            "configrollout_notification_latency_seconds",
            "Time from a rollout's transition to the delivery of its notification",
            self.latency.clone(),
        );
        registry.register(
            "configrollout_notifications_queued",
            "Notices waiting for delivery in this process, over every sink",
            self.queued.clone(),
        );
    }

    /// Counts `count` attempts of `sink` (`None`: no such sink) that ended as `outcome`.
    pub fn count(&self, sink: Option<&str>, outcome: DeliveryOutcome, count: u64) {
        let label = self.label(sink);
        self.deliveries
            .get_or_create(&vec![
                ("sink", label),
                ("result", outcome.as_str().to_owned()),
            ])
            .inc_by(count);
    }

    /// Records the time from a transition to its delivery.
    pub fn delivered_after(&self, seconds: f64) {
        self.latency.observe(seconds.max(0.0));
    }

    /// Sets the number of notices queued.
    pub fn set_queued(&self, queued: usize) {
        self.queued.set(i64::try_from(queued).unwrap_or(i64::MAX));
    }

    /// The count of `sink`'s `outcome` so far (tests and the lab read it).
    pub fn get(&self, sink: &str, outcome: DeliveryOutcome) -> u64 {
        self.deliveries
            .get_or_create(&vec![
                ("sink", sink.to_owned()),
                ("result", outcome.as_str().to_owned()),
            ])
            .get()
    }

    fn label(&self, sink: Option<&str>) -> String {
        let Some(sink) = sink else {
            return "unknown".to_owned();
        };
        let mut names = match self.names.lock() {
            Ok(names) => names,
            Err(poisoned) => poisoned.into_inner(),
        };
        if names.contains(sink) || names.len() < MAX_SINK_LABELS {
            names.insert(sink.to_owned());
            sink.to_owned()
        } else {
            "other".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_labels_are_bounded() {
        let metrics = NotificationMetrics::default();
        for index in 0..(MAX_SINK_LABELS + 10) {
            metrics.count(
                Some(&format!("sink-{index}")),
                DeliveryOutcome::Delivered,
                1,
            );
        }
        metrics.count(None, DeliveryOutcome::Unusable, 1);
        assert_eq!(metrics.get("sink-0", DeliveryOutcome::Delivered), 1);
        assert_eq!(metrics.get("other", DeliveryOutcome::Delivered), 10);
        assert_eq!(metrics.get("unknown", DeliveryOutcome::Unusable), 1);
        assert_eq!(metrics.names.lock().unwrap().len(), MAX_SINK_LABELS);
    }
}
