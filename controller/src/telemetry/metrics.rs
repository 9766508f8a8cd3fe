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

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter as RawCounter;
use prometheus_client::metrics::gauge::Gauge as RawGauge;
use prometheus_client::metrics::histogram::Histogram as RawHistogram;
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

/// A closed set of label values.
pub trait LabelValue: Copy + std::fmt::Debug + Send + Sync + 'static {
    /// The label's name.
    const LABEL: &'static str;
    /// Every value, in the order of [`LabelValue::index`].
    const ALL: &'static [Self];
    /// The value as exported.
    fn as_str(self) -> &'static str;
    /// Position in [`LabelValue::ALL`].
    fn index(self) -> usize;
}

/// Outcome of a reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Finished without error.
    Ok,
    /// Returned an error (and will be retried).
    Error,
}

impl LabelValue for ReconcileResult {
    const LABEL: &'static str = "result";
    const ALL: &'static [Self] = &[ReconcileResult::Ok, ReconcileResult::Error];
    fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Ok => "ok",
            ReconcileResult::Error => "error",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Outcome of a write (a region object, or a status patch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteResult {
    /// Written.
    Ok,
    /// Refused by optimistic concurrency or a field-manager conflict (HTTP 409).
    Conflict,
    /// Any other failure.
    Error,
}

impl LabelValue for WriteResult {
    const LABEL: &'static str = "result";
    const ALL: &'static [Self] = &[WriteResult::Ok, WriteResult::Conflict, WriteResult::Error];
    fn as_str(self) -> &'static str {
        match self {
            WriteResult::Ok => "ok",
            WriteResult::Conflict => "conflict",
            WriteResult::Error => "error",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// What a Region's last probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionState {
    /// Its apiserver answered.
    Reachable,
    /// It could not be reached (no kubeconfig, refused, timed out).
    Unreachable,
    /// Not probed yet.
    Unknown,
}

impl LabelValue for RegionState {
    const LABEL: &'static str = "state";
    const ALL: &'static [Self] = &[
        RegionState::Reachable,
        RegionState::Unreachable,
        RegionState::Unknown,
    ];
    fn as_str(self) -> &'static str {
        match self {
            RegionState::Reachable => "reachable",
            RegionState::Unreachable => "unreachable",
            RegionState::Unknown => "unknown",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

impl From<Option<bool>> for RegionState {
    /// From a Region's `status.reachable`.
    fn from(reachable: Option<bool>) -> Self {
        match reachable {
            Some(true) => RegionState::Reachable,
            Some(false) => RegionState::Unreachable,
            None => RegionState::Unknown,
        }
    }
}

pub use configrollout_clusters::hub::ErrorCategory;

impl LabelValue for ErrorCategory {
    const LABEL: &'static str = "category";
    const ALL: &'static [Self] = &[
        ErrorCategory::Api,
        ErrorCategory::Invalid,
        ErrorCategory::NotLeader,
        ErrorCategory::Panic,
    ];
    fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::Api => "api",
            ErrorCategory::Invalid => "invalid",
            ErrorCategory::NotLeader => "not_leader",
            ErrorCategory::Panic => "panic",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Why a region's state (its companion ConfigMap) was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRefusal {
    /// Its state fails the MAC of the controller's key: edited outside configrollout.
    Tampered,
    /// An object under the companion's reserved name that the target does not own.
    Foreign,
}

impl LabelValue for StateRefusal {
    const LABEL: &'static str = "reason";
    const ALL: &'static [Self] = &[StateRefusal::Tampered, StateRefusal::Foreign];
    fn as_str(self) -> &'static str {
        match self {
            StateRefusal::Tampered => "tampered",
            StateRefusal::Foreign => "foreign",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// What a write was about to change, for writes dropped because this replica did not hold
/// the Lease at that moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// A ConfigRollout's status.
    RolloutStatus,
    /// A Region's status.
    RegionStatus,
    /// A stored revision (ControllerRevision).
    Revision,
    /// A target ConfigMap or a consumer workload in a region.
    RegionObject,
    /// An Event on a rollout.
    Event,
    /// A TargetClaim (who owns the keys of a shared target).
    Claim,
}

impl LabelValue for WriteKind {
    const LABEL: &'static str = "write";
    const ALL: &'static [Self] = &[
        WriteKind::RolloutStatus,
        WriteKind::RegionStatus,
        WriteKind::Revision,
        WriteKind::RegionObject,
        WriteKind::Event,
        WriteKind::Claim,
    ];
    fn as_str(self) -> &'static str {
        match self {
            WriteKind::RolloutStatus => "rollout_status",
            WriteKind::RegionStatus => "region_status",
            WriteKind::Revision => "revision",
            WriteKind::RegionObject => "region_object",
            WriteKind::Event => "event",
            WriteKind::Claim => "claim",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

impl LabelValue for SampleVerdict {
    const LABEL: &'static str = "verdict";
    const ALL: &'static [Self] = &[
        SampleVerdict::Successful,
        SampleVerdict::Failed,
        SampleVerdict::Inconclusive,
        SampleVerdict::Error,
    ];
    fn as_str(self) -> &'static str {
        match self {
            SampleVerdict::Successful => "successful",
            SampleVerdict::Failed => "failed",
            SampleVerdict::Inconclusive => "inconclusive",
            SampleVerdict::Error => "error",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Phases are exported spelled as in `status.phase`, so they match `kubectl get`.
impl LabelValue for RolloutPhase {
    const LABEL: &'static str = "phase";
    const ALL: &'static [Self] = &[
        RolloutPhase::Pending,
        RolloutPhase::Progressing,
        RolloutPhase::Paused,
        RolloutPhase::AwaitingApproval,
        RolloutPhase::Halted,
        RolloutPhase::RollingBack,
        RolloutPhase::RolledBack,
        RolloutPhase::Complete,
        RolloutPhase::Refused,
    ];
    fn as_str(self) -> &'static str {
        match self {
            RolloutPhase::Pending => "Pending",
            RolloutPhase::Progressing => "Progressing",
            RolloutPhase::Paused => "Paused",
            RolloutPhase::AwaitingApproval => "AwaitingApproval",
            RolloutPhase::Halted => "Halted",
            RolloutPhase::RollingBack => "RollingBack",
            RolloutPhase::RolledBack => "RolledBack",
            RolloutPhase::Complete => "Complete",
            RolloutPhase::Refused => "Refused",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Encodes one series per value of `L`, in the order of [`LabelValue::ALL`].
fn encode_by_label<L: LabelValue, M: EncodeMetric>(
    metrics: &[M],
    mut encoder: MetricEncoder,
) -> Result<(), std::fmt::Error> {
    for label in L::ALL {
        if let Some(metric) = metrics.get(label.index()) {
            let labels = [(L::LABEL, label.as_str())];
            metric.encode(encoder.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// A monotonically increasing count per label value. Clones share the counts.
#[derive(Debug, Clone)]
pub struct CounterVec<L: LabelValue> {
    counters: Arc<[RawCounter]>,
    _label: PhantomData<L>,
}

impl<L: LabelValue> Default for CounterVec<L> {
    fn default() -> Self {
        CounterVec {
            counters: L::ALL.iter().map(|_| RawCounter::default()).collect(),
            _label: PhantomData,
        }
    }
}

impl<L: LabelValue> CounterVec<L> {
    /// Adds one for `label`.
    pub fn inc(&self, label: L) {
        self.add(label, 1);
    }

    /// Adds `n` for `label`.
    pub fn add(&self, label: L, n: u64) {
        if let Some(counter) = self.counters.get(label.index()) {
            counter.inc_by(n);
        }
    }

    /// The current count for `label`.
    pub fn get(&self, label: L) -> u64 {
        self.counters.get(label.index()).map_or(0, RawCounter::get)
    }
}

impl<L: LabelValue> EncodeMetric for CounterVec<L> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encode_by_label::<L, _>(&self.counters, encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// A value that goes up and down. Clones share the value.
#[derive(Debug, Clone, Default)]
pub struct Gauge(RawGauge);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, value: i64) {
        self.0.set(value);
    }

    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.get()
    }
}

impl EncodeMetric for Gauge {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// A gauge per label value. Clones share the values.
#[derive(Debug, Clone)]
pub struct GaugeVec<L: LabelValue> {
    gauges: Arc<[RawGauge]>,
    _label: PhantomData<L>,
}

impl<L: LabelValue> Default for GaugeVec<L> {
    fn default() -> Self {
        GaugeVec {
            gauges: L::ALL.iter().map(|_| RawGauge::default()).collect(),
            _label: PhantomData,
        }
    }
}

impl<L: LabelValue> GaugeVec<L> {
    /// Sets the value for `label`.
    pub fn set(&self, label: L, value: i64) {
        if let Some(gauge) = self.gauges.get(label.index()) {
            gauge.set(value);
        }
    }

    /// The value for `label`.
    pub fn get(&self, label: L) -> i64 {
        self.gauges.get(label.index()).map_or(0, RawGauge::get)
    }

    /// Sets every label's value to how often it occurs in `labels` (absent ones to zero).
    pub fn set_counts(&self, labels: impl IntoIterator<Item = L>) {
        let mut counts = vec![0_i64; L::ALL.len()];
        for label in labels {
            if let Some(count) = counts.get_mut(label.index()) {
                *count += 1;
            }
        }
        for (gauge, count) in self.gauges.iter().zip(counts) {
            gauge.set(count);
        }
    }
}

impl<L: LabelValue> EncodeMetric for GaugeVec<L> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encode_by_label::<L, _>(&self.gauges, encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// Observations counted into fixed buckets, with an implicit `+Inf`. Clones share them.
#[derive(Debug, Clone)]
pub struct Histogram(RawHistogram);

impl Histogram {
    /// A histogram with upper bounds `bounds` (ascending) and an implicit `+Inf`.
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram(RawHistogram::new(bounds.iter().copied()))
    }

    /// Records one observation.
    pub fn observe(&self, value: f64) {
        self.0.observe(value);
    }

    /// Records a duration in seconds.
    pub fn observe_duration(&self, duration: Duration) {
        self.observe(duration.as_secs_f64());
    }
}

impl EncodeMetric for Histogram {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

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
        let writes_dropped_total = CounterVec::default();
        let leader = Gauge::default();
        let rollouts = GaugeVec::default();
        let rollouts_drifted = Gauge::default();
        let regions = GaugeVec::default();
        let region_watches = Gauge::default();
        let region_state_refused_total = CounterVec::default();
        let reconciles_deferred_total = RawCounter::default();
        let status_writes_held_total = RawCounter::default();

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
        Metrics {
            reconcile_total,
            reconcile_errors_total,
            reconcile_duration_seconds,
            region_writes_total,
            status_patches_total,
            status_patch_duration_seconds,
            gate_samples_total,
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
        let samples = record.samples_judged;
        for (verdict, count) in [
            (SampleVerdict::Successful, samples.successful),
            (SampleVerdict::Failed, samples.failed),
            (SampleVerdict::Inconclusive, samples.inconclusive),
            (SampleVerdict::Error, samples.errors),
        ] {
            self.gate_samples_total.add(verdict, u64::from(count));
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
mod tests {
    use super::*;

    fn consistent<L: LabelValue + PartialEq>() {
        for (position, value) in L::ALL.iter().enumerate() {
            assert_eq!(value.index(), position, "{value:?} out of place in ALL");
        }
        let mut names: Vec<_> = L::ALL.iter().map(|value| value.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), L::ALL.len(), "duplicate label values");
    }

    #[test]
    fn label_sets_are_closed_and_consistent() {
        consistent::<ReconcileResult>();
        consistent::<WriteResult>();
        consistent::<SampleVerdict>();
        consistent::<RolloutPhase>();
        consistent::<ErrorCategory>();
        consistent::<RegionState>();
        consistent::<WriteKind>();
        consistent::<StateRefusal>();
        assert_eq!(RolloutPhase::ALL.len(), 9);
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Awkward {
        Plain,
        Nasty,
    }

    impl LabelValue for Awkward {
        const LABEL: &'static str = "kind";
        const ALL: &'static [Self] = &[Awkward::Plain, Awkward::Nasty];
        fn as_str(self) -> &'static str {
            match self {
                Awkward::Plain => "plain",
                Awkward::Nasty => "a\\b\"c\nd",
            }
        }
        fn index(self) -> usize {
            match self {
                Awkward::Plain => 0,
                Awkward::Nasty => 1,
            }
        }
    }

    fn encode(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn label_values_are_escaped() {
        let counter = CounterVec::<Awkward>::default();
        counter.inc(Awkward::Nasty);
        let mut registry = Registry::default();
        registry.register(
            counter_name("x_total"),
            help("Help with \\ and\nnewline."),
            counter,
        );
        assert_eq!(
            encode(&registry),
            "# HELP x_total Help with \\\\ and\\nnewline.\n\
             # TYPE x_total counter\n\
             x_total{kind=\"plain\"} 0\n\
             x_total{kind=\"a\\\\b\\\"c\\nd\"} 1\n"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_with_inf_sum_and_count() {
        static BOUNDS: &[f64] = &[0.1, 1.0, 2.5];
        let histogram = Histogram::new(BOUNDS);
        histogram.observe(0.05);
        histogram.observe(0.1);
        histogram.observe(2.0);
        histogram.observe_duration(Duration::from_secs(30));
        let mut registry = Registry::default();
        registry.register("d_seconds", help("Durations."), histogram);
        assert_eq!(
            encode(&registry),
            "# HELP d_seconds Durations.\n\
             # TYPE d_seconds histogram\n\
             d_seconds_bucket{le=\"0.1\"} 2\n\
             d_seconds_bucket{le=\"1\"} 2\n\
             d_seconds_bucket{le=\"2.5\"} 3\n\
             d_seconds_bucket{le=\"+Inf\"} 4\n\
             d_seconds_sum 32.15\n\
             d_seconds_count 4\n"
        );
    }

    /// The exported names, types and label sets: what dashboards and alert rules are
    /// written against. Changing this list breaks them.
    const CONTRACT: &[(&str, &str, &str)] = &[
        ("configrollout_reconcile_total", "counter", "result"),
        (
            "configrollout_reconcile_errors_total",
            "counter",
            "category",
        ),
        (
            "configrollout_reconcile_duration_seconds",
            "histogram",
            "le",
        ),
        ("configrollout_region_writes_total", "counter", "result"),
        ("configrollout_status_patches_total", "counter", "result"),
        (
            "configrollout_status_patch_duration_seconds",
            "histogram",
            "le",
        ),
        ("configrollout_gate_samples_total", "counter", "verdict"),
        ("configrollout_writes_dropped_total", "counter", "write"),
        ("configrollout_leader", "gauge", ""),
        ("configrollout_rollouts", "gauge", "phase"),
        ("configrollout_rollouts_drifted", "gauge", ""),
        ("configrollout_regions", "gauge", "state"),
        ("configrollout_region_watches", "gauge", ""),
        (
            "configrollout_region_state_refused_total",
            "counter",
            "reason",
        ),
        ("configrollout_reconciles_deferred_total", "counter", ""),
        ("configrollout_status_writes_held_total", "counter", ""),
    ];

    #[test]
    fn names_types_and_labels_are_the_published_ones() {
        let text = Metrics::new().render();
        let families: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|line| line.split_once(' '))
            .collect();
        let expected: Vec<(&str, &str)> = CONTRACT
            .iter()
            .map(|(name, kind, _)| (*name, *kind))
            .collect();
        assert_eq!(families, expected);
        for line in text.lines().filter(|line| line.starts_with("# HELP ")) {
            assert!(!line.ends_with(".."), "{line}");
        }
        for sample in text.lines().filter(|line| !line.starts_with('#')) {
            let (series, _value) = sample.rsplit_once(' ').unwrap();
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let (family, kind, label) = CONTRACT
                .iter()
                .find(|(family, kind, _)| match *kind {
                    "histogram" => name
                        .strip_prefix(family)
                        .is_some_and(|rest| ["_bucket", "_sum", "_count"].contains(&rest)),
                    _ => name == *family,
                })
                .unwrap_or_else(|| panic!("{sample} belongs to no family"));
            let label_names: Vec<&str> = labels
                .split(',')
                .filter(|pair| !pair.is_empty())
                .filter_map(|pair| pair.split_once('=').map(|(name, _)| name))
                .collect();
            let expected: Vec<&str> = match (*kind, name.ends_with("_bucket")) {
                ("histogram", false) => vec![],
                _ => label.split(',').filter(|l| !l.is_empty()).collect(),
            };
            assert_eq!(label_names, expected, "{sample} ({family})");
        }
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn render_exports_every_series_from_the_start() {
        let metrics = Metrics::new();
        metrics.reconcile_total.inc(ReconcileResult::Ok);
        metrics.reconcile_total.inc(ReconcileResult::Ok);
        metrics.region_writes_total.inc(WriteResult::Conflict);
        metrics
            .gate_samples_total
            .add(SampleVerdict::Inconclusive, 3);
        metrics.leader.set(1);
        let text = metrics.render();
        let mut expected = vec![
            "# TYPE configrollout_reconcile_total counter".to_owned(),
            "configrollout_reconcile_total{result=\"ok\"} 2".to_owned(),
            "configrollout_reconcile_total{result=\"error\"} 0".to_owned(),
            "# TYPE configrollout_reconcile_duration_seconds histogram".to_owned(),
            "configrollout_reconcile_duration_seconds_bucket{le=\"0.005\"} 0".to_owned(),
            "configrollout_reconcile_duration_seconds_bucket{le=\"10\"} 0".to_owned(),
            "configrollout_reconcile_duration_seconds_bucket{le=\"+Inf\"} 0".to_owned(),
            "configrollout_reconcile_duration_seconds_count 0".to_owned(),
            "configrollout_region_writes_total{result=\"conflict\"} 1".to_owned(),
            "configrollout_gate_samples_total{verdict=\"inconclusive\"} 3".to_owned(),
            "# TYPE configrollout_leader gauge".to_owned(),
            "configrollout_leader 1".to_owned(),
        ];
        let every = |name: &str, values: Vec<&str>, label: &str| -> Vec<String> {
            values
                .into_iter()
                .map(|value| format!("{name}{{{label}=\"{value}\"}}"))
                .collect()
        };
        let labelled = [
            every(
                "configrollout_reconcile_errors_total",
                ErrorCategory::ALL.iter().map(|v| v.as_str()).collect(),
                "category",
            ),
            every(
                "configrollout_region_writes_total",
                vec!["ok", "conflict", "error"],
                "result",
            ),
            every(
                "configrollout_status_patches_total",
                vec!["ok", "conflict", "error"],
                "result",
            ),
            every(
                "configrollout_gate_samples_total",
                vec!["successful", "failed", "inconclusive", "error"],
                "verdict",
            ),
            every(
                "configrollout_writes_dropped_total",
                vec![
                    "rollout_status",
                    "region_status",
                    "revision",
                    "region_object",
                    "event",
                ],
                "write",
            ),
            every(
                "configrollout_rollouts",
                vec![
                    "Pending",
                    "Progressing",
                    "Paused",
                    "AwaitingApproval",
                    "Halted",
                    "RollingBack",
                    "RolledBack",
                    "Complete",
                ],
                "phase",
            ),
            every(
                "configrollout_regions",
                vec!["reachable", "unreachable", "unknown"],
                "state",
            ),
        ];
        for series in labelled.iter().flatten() {
            assert!(
                text.lines()
                    .any(|line| line.starts_with(&format!("{series} "))),
                "missing {series} in\n{text}"
            );
        }
        assert_eq!(
            ErrorCategory::ALL
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>(),
            ["api", "invalid", "not_leader", "panic"]
        );
        expected.retain(|line| !text.lines().any(|candidate| candidate == line));
        assert!(expected.is_empty(), "missing {expected:?} in\n{text}");
    }

    #[test]
    fn one_record_moves_every_metric_a_reconcile_moves() {
        let metrics = Metrics::new();
        metrics.record_reconcile(&ReconcileRecord {
            duration: Duration::from_millis(40),
            error: Some(ErrorCategory::Invalid),
            region_writes: 3,
            region_write_conflicts: 2,
            region_write_failures: 1,
            samples_judged: SampleTally {
                successful: 2,
                failed: 1,
                inconclusive: 0,
                errors: 1,
            },
            status_patch: Some((WriteResult::Conflict, Duration::from_millis(5))),
            status_held: true,
        });
        assert_eq!(metrics.reconcile_total.get(ReconcileResult::Error), 1);
        assert_eq!(
            metrics.reconcile_errors_total.get(ErrorCategory::Invalid),
            1
        );
        assert_eq!(metrics.region_writes_total.get(WriteResult::Ok), 3);
        assert_eq!(metrics.region_writes_total.get(WriteResult::Conflict), 2);
        assert_eq!(metrics.region_writes_total.get(WriteResult::Error), 1);
        assert_eq!(metrics.gate_samples_total.get(SampleVerdict::Successful), 2);
        assert_eq!(metrics.gate_samples_total.get(SampleVerdict::Failed), 1);
        assert_eq!(metrics.gate_samples_total.get(SampleVerdict::Error), 1);
        assert_eq!(metrics.status_patches_total.get(WriteResult::Conflict), 1);
        let text = metrics.render();
        assert!(text.contains("configrollout_region_writes_total{result=\"conflict\"} 2\n"));
        assert!(text.contains("configrollout_reconcile_errors_total{category=\"invalid\"} 1\n"));
        assert!(text.contains("configrollout_reconcile_duration_seconds_count 1\n"));
        assert!(text.contains("configrollout_status_patch_duration_seconds_count 1\n"));
        assert!(text.contains("configrollout_status_writes_held_total 1\n"));
    }

    fn sample(text: &str, series: &str) -> i64 {
        let prefix = format!("{series} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    }

    fn phase_count(text: &str, phase: &str) -> i64 {
        sample(
            text,
            &format!("configrollout_rollouts{{phase=\"{phase}\"}}"),
        )
    }

    fn region_count(text: &str, state: &str) -> i64 {
        sample(text, &format!("configrollout_regions{{state=\"{state}\"}}"))
    }

    #[test]
    fn the_rollouts_gauge_counts_what_the_census_holds_at_each_scrape() {
        let metrics = Arc::new(Metrics::new());
        // Nothing watched yet (a standby): every phase 0.
        assert_eq!(phase_count(&metrics.render(), "Complete"), 0);

        let known = Arc::new(Mutex::new(Census {
            phases: vec![
                Some(RolloutPhase::Complete),
                Some(RolloutPhase::Complete),
                Some(RolloutPhase::Halted),
                None,
            ],
            drifted: 1,
            regions: vec![
                RegionState::Reachable,
                RegionState::Unreachable,
                RegionState::Reachable,
                RegionState::Unknown,
            ],
        }));
        let census = {
            let known = known.clone();
            move || known.lock().unwrap().clone()
        };
        let guard = metrics.take_census_from(census);
        let text = metrics.render();
        assert_eq!(phase_count(&text, "Complete"), 2);
        assert_eq!(phase_count(&text, "Halted"), 1);
        assert_eq!(phase_count(&text, "Pending"), 1, "no status yet is Pending");
        assert_eq!(phase_count(&text, "Progressing"), 0);
        assert_eq!(sample(&text, "configrollout_rollouts_drifted"), 1);
        assert_eq!(region_count(&text, "reachable"), 2);
        assert_eq!(region_count(&text, "unreachable"), 1);
        assert_eq!(region_count(&text, "unknown"), 1);

        // A rollout deleted, a region back: the counts follow at the next scrape.
        {
            let mut known = known.lock().unwrap();
            known.phases.remove(0);
            known.regions[1] = RegionState::Reachable;
        }
        let text = metrics.render();
        assert_eq!(phase_count(&text, "Complete"), 1);
        assert_eq!(region_count(&text, "unreachable"), 0);
        assert_eq!(region_count(&text, "reachable"), 3);
        *known.lock().unwrap() = Census::default();
        let text = metrics.render();
        for phase in RolloutPhase::ALL {
            assert_eq!(phase_count(&text, phase.as_str()), 0, "{phase:?}");
        }
        assert_eq!(sample(&text, "configrollout_rollouts_drifted"), 0);

        // Stopped leading: the census goes, and so do the counts.
        {
            let mut known = known.lock().unwrap();
            known.phases.push(Some(RolloutPhase::Paused));
            known.drifted = 1;
            known.regions.push(RegionState::Unreachable);
        }
        assert_eq!(phase_count(&metrics.render(), "Paused"), 1);
        drop(guard);
        let text = metrics.render();
        assert_eq!(phase_count(&text, "Paused"), 0);
        assert_eq!(sample(&text, "configrollout_rollouts_drifted"), 0);
        assert_eq!(region_count(&text, "unreachable"), 0);
    }

    #[test]
    fn only_a_sharded_controller_exposes_the_shards_it_holds() {
        assert!(
            !Metrics::new()
                .render()
                .contains("configrollout_shards_held")
        );
        let (_leading, leading_rx) = tokio::sync::watch::channel(true);
        let (_reachable, reachable_rx) = tokio::sync::watch::channel(true);
        let single = Shards::single(LeaderState::from_channels(leading_rx, reachable_rx), "a");
        let text = Metrics::with_shards(single).render();
        assert!(
            text.contains("# TYPE configrollout_shards_held gauge"),
            "{text}"
        );
        assert!(text.contains("\nconfigrollout_shards_held 1\n"), "{text}");
    }

    #[test]
    fn the_leader_gauge_follows_the_election_at_each_scrape() {
        let metrics = Metrics::new();
        let (leading, leading_rx) = tokio::sync::watch::channel(false);
        let (_reachable, reachable_rx) = tokio::sync::watch::channel(true);
        metrics.follow_leader(LeaderState::from_channels(leading_rx, reachable_rx));
        assert!(metrics.render().contains("\nconfigrollout_leader 0\n"));
        leading.send_replace(true);
        assert!(metrics.render().contains("\nconfigrollout_leader 1\n"));
        // The elector gone: not leading, whatever it said last.
        drop(leading);
        assert!(metrics.render().contains("\nconfigrollout_leader 0\n"));
    }

    #[test]
    fn every_label_value_sits_at_its_index() {
        fn indexes_follow_all(all: &[impl LabelValue]) {
            for (position, label) in all.iter().enumerate() {
                assert_eq!(label.index(), position, "{}", label.as_str());
            }
        }
        indexes_follow_all(ReconcileResult::ALL);
        indexes_follow_all(WriteResult::ALL);
        indexes_follow_all(SampleVerdict::ALL);
        indexes_follow_all(RolloutPhase::ALL);
        indexes_follow_all(ErrorCategory::ALL);
        indexes_follow_all(WriteKind::ALL);
        indexes_follow_all(RegionState::ALL);
    }
}
