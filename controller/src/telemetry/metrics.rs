//! The controller's metrics, kept in a `prometheus-client` registry and rendered in the
//! Prometheus text exposition format 0.0.4.
//!
//! Every label value comes from a closed enum through [`LabelValue`], mapped to a
//! `&'static str` by hand (never derived from `Debug`): no rollout, region or
//! configuration data can reach a label, and each family has a fixed, small number of
//! series, all exported from the start, in declaration order.
//!
//! Some families are read from the process when scraped rather than counted as things
//! happen: `configrollout_rollouts` (by phase), `configrollout_rollouts_drifted` and
//! `configrollout_regions` (by reachability) count what the controller's caches hold
//! ([`Metrics::take_census_from`]), and `configrollout_leader` asks the election
//! ([`Metrics::follow_leader`]). They are therefore true at the moment of the scrape: a
//! deleted rollout leaves its phase's count as soon as the watch sees it go.

mod labels;
mod metric_types;
mod notification_metrics;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter as RawCounter;
use prometheus_client::registry::Registry;

use crate::api::{RolloutPhase, SampleVerdict};
use crate::engine::SampleTally;
use crate::leader::{LeaderState, Shards};

/// The `Content-Type` of [`Metrics::render`]'s output.
pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Buckets (seconds) for API-call and reconcile latencies: 5 ms to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

pub use configrollout_clusters::hub::ErrorCategory;
pub use labels::{LabelValue, ReconcileResult, RegionState, StateRefusal, WriteKind, WriteResult};
pub use metric_types::{CounterVec, Gauge, GaugeVec, Histogram};
pub use notification_metrics::{DeliveryOutcome, NotificationMetrics};

/// What one reconcile did, for [`Metrics::record_reconcile`]. Filled in as the reconcile
/// goes, so that a reconcile failing half-way still counts the work it did.
#[derive(Clone, Debug, Default)]
pub struct ReconcileRecord {
    /// Time the reconcile took.
    pub duration: Duration,
    /// What ended it, if it failed.
    pub error: Option<ErrorCategory>,
    /// Writes made in regions (each object written once counts one).
    pub region_writes: u32,
    /// Writes in regions refused because the object changed since it was read (HTTP
    /// 409); each is read again and planned again.
    pub region_write_conflicts: u32,
    /// Region merges that failed.
    pub region_write_failures: u32,
    /// Gate samples judged, by verdict.
    pub samples_judged: SampleTally,
    /// Dry-run gates' samples judged, by verdict.
    pub dry_run_samples_judged: SampleTally,
    /// The status patch's result and duration, when one was sent.
    pub status_patch: Option<(WriteResult, Duration)>,
    /// Whether a status change of gate samples only was held back, to be written with
    /// the next (see `reconcile::held_status`).
    pub status_held: bool,
}

/// What the controller's caches hold at a scrape.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Census {
    /// The phase of each rollout (`None`: no status yet).
    pub phases: Vec<Option<RolloutPhase>>,
    /// How many rollouts have `Drifted=True`.
    pub drifted: usize,
    /// Each Region's reachability as its last probe found it.
    pub regions: Vec<RegionState>,
}

/// Takes a [`Census`], at every scrape.
pub type CensusSource = Box<dyn Fn() -> Census + Send + Sync>;

/// Where the families read at scrape time come from.
#[derive(Default)]
struct Sources {
    census: Option<CensusSource>,
    leader: Option<LeaderState>,
    shards: Option<Shards>,
}

/// Every metric of the controller. Share it as `Arc<Metrics>`.
pub struct Metrics {
    /// Reconciles by result.
    pub reconcile_total: CounterVec<ReconcileResult>,
    /// Failed reconciles by category.
    pub reconcile_errors_total: CounterVec<ErrorCategory>,
    /// Reconcile duration.
    pub reconcile_duration_seconds: Histogram,
    /// Writes to region objects by result.
    pub region_writes_total: CounterVec<WriteResult>,
    /// Status patches by result.
    pub status_patches_total: CounterVec<WriteResult>,
    /// Status patch duration.
    pub status_patch_duration_seconds: Histogram,
    /// Gate samples by verdict.
    pub gate_samples_total: CounterVec<SampleVerdict>,
    /// Dry-run gates' samples by verdict (apart: no alert reads them).
    pub gate_dry_run_samples_total: CounterVec<SampleVerdict>,
    /// Writes not sent because this replica did not hold the Lease, by what they changed.
    pub writes_dropped_total: CounterVec<WriteKind>,
    /// 1 while this process holds the Lease (read from the election at each scrape once
    /// [`Metrics::follow_leader`] was called).
    pub leader: Gauge,
    /// Rollouts per phase (counted at each scrape, see [`Metrics::take_census_from`]).
    pub rollouts: GaugeVec<RolloutPhase>,
    /// Rollouts with `Drifted=True` (counted at each scrape).
    pub rollouts_drifted: Gauge,
    /// Regions by what their last probe found (counted at each scrape).
    pub regions: GaugeVec<RegionState>,
    /// Shards whose Lease this process holds (exposed only when sharded, see
    /// [`Metrics::with_shards`]).
    pub shards_held: Gauge,
    /// Region ConfigMap watches this process keeps open (read at each scrape).
    pub region_watches: Gauge,
    /// Region states not read, by why (each time a reconcile finds one).
    pub region_state_refused_total: CounterVec<StateRefusal>,
    /// Reconciles put back because their namespace ran its share of the slots.
    pub reconciles_deferred_total: RawCounter,
    /// Status changes of gate samples only held back to be written with the next.
    pub status_writes_held_total: RawCounter,
    /// Notification deliveries, by sink and result.
    pub notifications: NotificationMetrics,
    registry: Registry,
    sources: Mutex<Sources>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// prometheus-client appends `_total` to a counter's name and `.` to its help: both are
/// taken off here, so that the exposed names and help stay as written below.
fn counter_name(name: &'static str) -> &'static str {
    name.strip_suffix("_total").unwrap_or(name)
}

fn help(text: &'static str) -> &'static str {
    text.strip_suffix('.').unwrap_or(text)
}

impl Metrics {
    /// All metrics at zero.
    pub fn new() -> Self {
        let reconcile_total = CounterVec::default();
        let reconcile_errors_total = CounterVec::default();
        let reconcile_duration_seconds = Histogram::new(LATENCY_BUCKETS);
        let region_writes_total = CounterVec::default();
        let status_patches_total = CounterVec::default();
        let status_patch_duration_seconds = Histogram::new(LATENCY_BUCKETS);
        let gate_samples_total = CounterVec::default();
        let gate_dry_run_samples_total = CounterVec::default();
        let writes_dropped_total = CounterVec::default();
        let leader = Gauge::default();
        let rollouts = GaugeVec::default();
        let rollouts_drifted = Gauge::default();
        let regions = GaugeVec::default();
        let region_watches = Gauge::default();
        let region_state_refused_total = CounterVec::default();
        let reconciles_deferred_total = RawCounter::default();
        let status_writes_held_total = RawCounter::default();
        let notifications = NotificationMetrics::default();

        let mut registry = Registry::default();
        registry.register(
            counter_name("configrollout_reconcile_total"),
            help("Reconciles of ConfigRollouts, by result."),
            reconcile_total.clone(),
        );
        registry.register(
            counter_name("configrollout_reconcile_errors_total"),
            help("Failed reconciles of ConfigRollouts, by category of the error that ended them."),
            reconcile_errors_total.clone(),
        );
        registry.register(
            "configrollout_reconcile_duration_seconds",
            help("Time spent in one reconcile of a ConfigRollout."),
            reconcile_duration_seconds.clone(),
        );
        registry.register(
            counter_name("configrollout_region_writes_total"),
            help(
                "Writes to ConfigMaps and consumers in regions, by result (error counts \
                 region merges that failed).",
            ),
            region_writes_total.clone(),
        );
        registry.register(
            counter_name("configrollout_status_patches_total"),
            help("Patches of ConfigRollout status, by result."),
            status_patches_total.clone(),
        );
        registry.register(
            "configrollout_status_patch_duration_seconds",
            help("Time spent in one status patch."),
            status_patch_duration_seconds.clone(),
        );
        registry.register(
            counter_name("configrollout_gate_samples_total"),
            help("Metric gate samples taken, by verdict."),
            gate_samples_total.clone(),
        );
        registry.register(
            counter_name("configrollout_gate_dry_run_samples_total"),
            help("Dry-run gates' samples taken, by verdict: they never pass nor fail a stage."),
            gate_dry_run_samples_total.clone(),
        );
        registry.register(
            counter_name("configrollout_writes_dropped_total"),
            help("Writes not sent because this replica did not hold the leader Lease, by kind."),
            writes_dropped_total.clone(),
        );
        registry.register(
            "configrollout_leader",
            help("1 while this process holds the leader Lease, else 0."),
            leader.clone(),
        );
        registry.register(
            "configrollout_rollouts",
            help(
                "ConfigRollouts this process knows now, by phase (a rollout without status \
                 counts as Pending; a replica that does not lead watches none).",
            ),
            rollouts.clone(),
        );
        registry.register(
            "configrollout_rollouts_drifted",
            help(
                "ConfigRollouts this process knows now whose Drifted condition is True (a \
                 target key edited out of band in some region).",
            ),
            rollouts_drifted.clone(),
        );
        registry.register(
            "configrollout_regions",
            help(
                "Regions by what their last probe found (a replica that does not lead \
                 watches none).",
            ),
            regions.clone(),
        );
        registry.register(
            "configrollout_region_watches",
            help(
                "ConfigMap watches this process keeps open in regions (one per region and \
                 namespace a rollout targets; stopped when unused, at most 64 per region).",
            ),
            region_watches.clone(),
        );
        registry.register(
            counter_name("configrollout_region_state_refused_total"),
            help(
                "Region states (companion ConfigMaps) not read, by reason: tampered (fails \
                 its MAC) or foreign (an object under a reserved name).",
            ),
            region_state_refused_total.clone(),
        );
        registry.register(
            counter_name("configrollout_reconciles_deferred_total"),
            help(
                "Reconciles put back without work because their namespace already ran its \
                 share of the reconcile slots (fair share between namespaces).",
            ),
            reconciles_deferred_total.clone(),
        );
        registry.register(
            counter_name("configrollout_status_writes_held_total"),
            help(
                "Status changes that carried gate samples only, held back to be written \
                 with the next (at most one such write per rollout every 10s).",
            ),
            status_writes_held_total.clone(),
        );
        notifications.register(&mut registry);
        Metrics {
            reconcile_total,
            reconcile_errors_total,
            reconcile_duration_seconds,
            region_writes_total,
            status_patches_total,
            status_patch_duration_seconds,
            gate_samples_total,
            gate_dry_run_samples_total,
            writes_dropped_total,
            leader,
            rollouts,
            rollouts_drifted,
            regions,
            shards_held: Gauge::default(),
            region_watches,
            region_state_refused_total,
            reconciles_deferred_total,
            status_writes_held_total,
            notifications,
            registry,
            sources: Mutex::new(Sources::default()),
        }
    }

    /// The metrics of a sharded controller: those of [`Metrics::new`], and
    /// `configrollout_shards_held`, read from `shards` at each scrape. (An install with one
    /// shard exposes exactly what it exposed before sharding existed.)
    pub fn with_shards(shards: Shards) -> Self {
        let mut metrics = Metrics::new();
        metrics.registry.register(
            "configrollout_shards_held",
            help("Shards whose Lease this process holds now (sharded controllers only)."),
            metrics.shards_held.clone(),
        );
        metrics.sources().shards = Some(shards);
        metrics
    }

    /// Records one reconcile: every metric a reconcile moves is moved here.
    pub fn record_reconcile(&self, record: &ReconcileRecord) {
        self.reconcile_duration_seconds
            .observe_duration(record.duration);
        match record.error {
            None => self.reconcile_total.inc(ReconcileResult::Ok),
            Some(category) => {
                self.reconcile_total.inc(ReconcileResult::Error);
                self.reconcile_errors_total.inc(category);
            }
        }
        self.region_writes_total
            .add(WriteResult::Ok, u64::from(record.region_writes));
        self.region_writes_total.add(
            WriteResult::Conflict,
            u64::from(record.region_write_conflicts),
        );
        self.region_writes_total
            .add(WriteResult::Error, u64::from(record.region_write_failures));
        for (tally, counter) in [
            (record.samples_judged, &self.gate_samples_total),
            (
                record.dry_run_samples_judged,
                &self.gate_dry_run_samples_total,
            ),
        ] {
            for (verdict, count) in [
                (SampleVerdict::Successful, tally.successful),
                (SampleVerdict::Failed, tally.failed),
                (SampleVerdict::Inconclusive, tally.inconclusive),
                (SampleVerdict::Error, tally.errors),
            ] {
                counter.add(verdict, u64::from(count));
            }
        }
        if record.status_held {
            self.status_writes_held_total.inc();
        }
        if let Some((result, duration)) = record.status_patch {
            self.status_patches_total.inc(result);
            self.status_patch_duration_seconds
                .observe_duration(duration);
        }
    }

    fn sources(&self) -> std::sync::MutexGuard<'_, Sources> {
        // A panic while holding the lock left the sources as they were: still usable.
        self.sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// From now on `configrollout_rollouts`, `configrollout_rollouts_drifted` and
    /// `configrollout_regions` count, at each scrape, what `census` returns, until the
    /// returned guard is dropped; then every count reads 0 again (a replica that stopped
    /// leading watches nothing).
    pub fn take_census_from(
        self: &Arc<Self>,
        census: impl Fn() -> Census + Send + Sync + 'static,
    ) -> CensusGuard {
        self.sources().census = Some(Box::new(census));
        CensusGuard {
            metrics: self.clone(),
        }
    }

    /// From now on `configrollout_leader` is read from `leader` at each scrape.
    pub fn follow_leader(&self, leader: LeaderState) {
        self.sources().leader = Some(leader);
    }

    /// Sets the families read from the process to what it holds now.
    fn refresh(&self) {
        let sources = self.sources();
        let census = sources
            .census
            .as_ref()
            .map(|census| census())
            .unwrap_or_default();
        self.rollouts.set_counts(
            census
                .phases
                .into_iter()
                .map(|phase| phase.unwrap_or(RolloutPhase::Pending)),
        );
        self.rollouts_drifted
            .set(i64::try_from(census.drifted).unwrap_or(i64::MAX));
        self.regions.set_counts(census.regions);
        if let Some(leader) = &sources.leader {
            self.leader.set(i64::from(leader.is_leading()));
        }
        if let Some(shards) = &sources.shards {
            self.shards_held.set(i64::from(shards.held_count()));
        }
        self.region_watches
            .set(crate::regions::object_cache::open_watches());
    }

    /// Counts one region state not read, for `reason`.
    pub fn region_state_refused(&self, reason: StateRefusal) {
        self.region_state_refused_total.inc(reason);
    }

    /// The exposition in text format 0.0.4 (see [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        self.refresh();
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail, and every metric encodes infallibly.
        if let Err(error) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::warn!(%error, "metrics exposition failed");
        }
        out
    }
}

/// While it lives, the census families are counted from a census (see
/// [`Metrics::take_census_from`]).
pub struct CensusGuard {
    metrics: Arc<Metrics>,
}

impl Drop for CensusGuard {
    fn drop(&mut self) {
        self.metrics.sources().census = None;
    }
}

#[cfg(test)]
mod tests;
