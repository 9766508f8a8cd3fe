//! The controller's metrics, rendered in the Prometheus text exposition format 0.0.4.
//!
//! Every label value comes from a closed enum through [`LabelValue`], mapped to a
//! `&'static str` by hand: no rollout, region or configuration data can reach a label,
//! and each family has a fixed, small number of series, all exported from the start.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::api::{RolloutPhase, SampleVerdict};
use crate::engine::SampleTally;

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Buckets (seconds) for API-call and reconcile latencies: 5 ms to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A closed set of label values.
pub trait LabelValue: Copy + 'static {
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

/// What kind of failure ended a reconcile, which also decides when it is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCategory {
    /// An API call failed or timed out: retried soon.
    Api,
    /// Something stored is malformed or cannot be stored: retried late, or when the
    /// rollout changes.
    Invalid,
    /// This replica stopped holding the Lease mid-reconcile.
    NotLeader,
}

impl LabelValue for ErrorCategory {
    const LABEL: &'static str = "category";
    const ALL: &'static [Self] = &[
        ErrorCategory::Api,
        ErrorCategory::Invalid,
        ErrorCategory::NotLeader,
    ];
    fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::Api => "api",
            ErrorCategory::Invalid => "invalid",
            ErrorCategory::NotLeader => "not_leader",
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
}

impl LabelValue for WriteKind {
    const LABEL: &'static str = "write";
    const ALL: &'static [Self] = &[
        WriteKind::RolloutStatus,
        WriteKind::RegionStatus,
        WriteKind::Revision,
        WriteKind::RegionObject,
        WriteKind::Event,
    ];
    fn as_str(self) -> &'static str {
        match self {
            WriteKind::RolloutStatus => "rollout_status",
            WriteKind::RegionStatus => "region_status",
            WriteKind::Revision => "revision",
            WriteKind::RegionObject => "region_object",
            WriteKind::Event => "event",
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
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// A monotonically increasing count per label value.
#[derive(Debug)]
pub struct CounterVec<L: LabelValue> {
    values: Box<[AtomicU64]>,
    _label: std::marker::PhantomData<L>,
}

impl<L: LabelValue> Default for CounterVec<L> {
    fn default() -> Self {
        CounterVec {
            values: L::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            _label: std::marker::PhantomData,
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
        if let Some(value) = self.values.get(label.index()) {
            value.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The current count for `label`.
    pub fn get(&self, label: L) -> u64 {
        self.values
            .get(label.index())
            .map_or(0, |value| value.load(Ordering::Relaxed))
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "counter");
        for label in L::ALL {
            series(
                out,
                name,
                Some((L::LABEL, label.as_str())),
                self.get(*label),
            );
        }
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, value: i64) {
        self.0.store(value, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "gauge");
        series(out, name, None, self.get());
    }
}

/// A gauge per label value.
#[derive(Debug)]
pub struct GaugeVec<L: LabelValue> {
    values: Box<[AtomicI64]>,
    _label: std::marker::PhantomData<L>,
}

impl<L: LabelValue> Default for GaugeVec<L> {
    fn default() -> Self {
        GaugeVec {
            values: L::ALL.iter().map(|_| AtomicI64::new(0)).collect(),
            _label: std::marker::PhantomData,
        }
    }
}

impl<L: LabelValue> GaugeVec<L> {
    /// Sets the value for `label`.
    pub fn set(&self, label: L, value: i64) {
        if let Some(slot) = self.values.get(label.index()) {
            slot.store(value, Ordering::Relaxed);
        }
    }

    /// The value for `label`.
    pub fn get(&self, label: L) -> i64 {
        self.values
            .get(label.index())
            .map_or(0, |value| value.load(Ordering::Relaxed))
    }

    /// Sets every label's value to how often it occurs in `labels` (absent ones to zero).
    pub fn set_counts(&self, labels: impl IntoIterator<Item = L>) {
        let mut counts = vec![0_i64; L::ALL.len()];
        for label in labels {
            if let Some(count) = counts.get_mut(label.index()) {
                *count += 1;
            }
        }
        for (slot, count) in self.values.iter().zip(counts) {
            slot.store(count, Ordering::Relaxed);
        }
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "gauge");
        for label in L::ALL {
            series(
                out,
                name,
                Some((L::LABEL, label.as_str())),
                self.get(*label),
            );
        }
    }
}

/// Observations counted into fixed buckets.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative); the last one is `+Inf`.
    buckets: Box<[AtomicU64]>,
    sum_bits: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// A histogram with upper bounds `bounds` (ascending) and an implicit `+Inf`.
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0_f64.to_bits()),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, value: f64) {
        let bucket = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        if let Some(slot) = self.buckets.get(bucket) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
        let _ = self
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a duration in seconds.
    pub fn observe_duration(&self, duration: Duration) {
        self.observe(duration.as_secs_f64());
    }

    /// How many observations.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, help, "histogram");
        let bucket_name = format!("{name}_bucket");
        let mut cumulative = 0_u64;
        for (index, slot) in self.buckets.iter().enumerate() {
            cumulative += slot.load(Ordering::Relaxed);
            let bound = self
                .bounds
                .get(index)
                .map_or_else(|| "+Inf".to_owned(), |bound| float(*bound));
            series(out, &bucket_name, Some(("le", &bound)), cumulative);
        }
        let sum = f64::from_bits(self.sum_bits.load(Ordering::Relaxed));
        let _ = writeln!(out, "{name}_sum {}", float(sum));
        // The count is the +Inf bucket, not `self.count`, so that the exposition stays
        // self-consistent while observations race with the scrape.
        let _ = writeln!(out, "{name}_count {cumulative}");
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
    /// Writes made in regions.
    pub region_writes: u32,
    /// Region merges that failed.
    pub region_write_failures: u32,
    /// Gate samples judged, by verdict.
    pub samples_judged: SampleTally,
    /// The status patch's result and duration, when one was sent.
    pub status_patch: Option<(WriteResult, Duration)>,
}

/// Every metric of the controller. Share it as `Arc<Metrics>`.
#[derive(Debug)]
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
    /// 1 while this process holds the Lease.
    pub leader: Gauge,
    /// Rollouts per phase.
    pub rollouts: GaugeVec<RolloutPhase>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// All metrics at zero.
    pub fn new() -> Self {
        Metrics {
            reconcile_total: CounterVec::default(),
            reconcile_errors_total: CounterVec::default(),
            reconcile_duration_seconds: Histogram::new(LATENCY_BUCKETS),
            region_writes_total: CounterVec::default(),
            status_patches_total: CounterVec::default(),
            status_patch_duration_seconds: Histogram::new(LATENCY_BUCKETS),
            gate_samples_total: CounterVec::default(),
            writes_dropped_total: CounterVec::default(),
            leader: Gauge::default(),
            rollouts: GaugeVec::default(),
        }
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
        if let Some((result, duration)) = record.status_patch {
            self.status_patches_total.inc(result);
            self.status_patch_duration_seconds
                .observe_duration(duration);
        }
    }

    /// The exposition in text format 0.0.4 (see [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        self.reconcile_total.render(
            &mut out,
            "configrollout_reconcile_total",
            "Reconciles of ConfigRollouts, by result.",
        );
        self.reconcile_errors_total.render(
            &mut out,
            "configrollout_reconcile_errors_total",
            "Failed reconciles of ConfigRollouts, by category.",
        );
        self.reconcile_duration_seconds.render(
            &mut out,
            "configrollout_reconcile_duration_seconds",
            "Time spent in one reconcile of a ConfigRollout.",
        );
        self.region_writes_total.render(
            &mut out,
            "configrollout_region_writes_total",
            "Writes to ConfigMaps in regions, by result.",
        );
        self.status_patches_total.render(
            &mut out,
            "configrollout_status_patches_total",
            "Patches of ConfigRollout status, by result.",
        );
        self.status_patch_duration_seconds.render(
            &mut out,
            "configrollout_status_patch_duration_seconds",
            "Time spent in one status patch.",
        );
        self.gate_samples_total.render(
            &mut out,
            "configrollout_gate_samples_total",
            "Metric gate samples taken, by verdict.",
        );
        self.writes_dropped_total.render(
            &mut out,
            "configrollout_writes_dropped_total",
            "Writes not sent because this replica did not hold the leader Lease, by kind.",
        );
        self.leader.render(
            &mut out,
            "configrollout_leader",
            "1 while this process holds the leader Lease, else 0.",
        );
        self.rollouts.render(
            &mut out,
            "configrollout_rollouts",
            "ConfigRollouts known to this process, by phase.",
        );
        out
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn series(
    out: &mut String,
    name: &str,
    label: Option<(&str, &str)>,
    value: impl std::fmt::Display,
) {
    match label {
        Some((label, label_value)) => {
            let _ = writeln!(
                out,
                "{name}{{{label}=\"{}\"}} {value}",
                escape_label_value(label_value)
            );
        }
        None => {
            let _ = writeln!(out, "{name} {value}");
        }
    }
}

/// Escapes a label value: backslash, double quote and line feed.
pub fn escape_label_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for character in value.chars() {
        match character {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// Escapes HELP text: backslash and line feed.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A float as Prometheus writes it (`+Inf`, `-Inf`, `NaN`).
fn float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consistent<L: LabelValue + PartialEq + std::fmt::Debug>() {
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
        assert_eq!(RolloutPhase::ALL.len(), 8);
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

    #[test]
    fn label_values_are_escaped() {
        let counter = CounterVec::<Awkward>::default();
        counter.inc(Awkward::Nasty);
        let mut out = String::new();
        counter.render(&mut out, "x_total", "Help with \\ and\nnewline.");
        assert_eq!(
            out,
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
        let mut out = String::new();
        histogram.render(&mut out, "d_seconds", "Durations.");
        assert_eq!(
            out,
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
        metrics.rollouts.set_counts([
            RolloutPhase::Progressing,
            RolloutPhase::Complete,
            RolloutPhase::Progressing,
        ]);
        let text = metrics.render();
        for line in [
            "# TYPE configrollout_reconcile_total counter",
            "configrollout_reconcile_total{result=\"ok\"} 2",
            "configrollout_reconcile_total{result=\"error\"} 0",
            "configrollout_reconcile_errors_total{category=\"not_leader\"} 0",
            "configrollout_writes_dropped_total{write=\"region_object\"} 0",
            "# TYPE configrollout_reconcile_duration_seconds histogram",
            "configrollout_reconcile_duration_seconds_bucket{le=\"0.005\"} 0",
            "configrollout_reconcile_duration_seconds_bucket{le=\"+Inf\"} 0",
            "configrollout_reconcile_duration_seconds_count 0",
            "configrollout_region_writes_total{result=\"ok\"} 0",
            "configrollout_region_writes_total{result=\"conflict\"} 1",
            "configrollout_region_writes_total{result=\"error\"} 0",
            "configrollout_status_patches_total{result=\"ok\"} 0",
            "configrollout_status_patch_duration_seconds_sum 0",
            "configrollout_gate_samples_total{verdict=\"successful\"} 0",
            "configrollout_gate_samples_total{verdict=\"inconclusive\"} 3",
            "# TYPE configrollout_leader gauge",
            "configrollout_leader 1",
            "configrollout_rollouts{phase=\"Progressing\"} 2",
            "configrollout_rollouts{phase=\"Complete\"} 1",
            "configrollout_rollouts{phase=\"Pending\"} 0",
        ] {
            assert!(
                text.lines().any(|candidate| candidate == line),
                "missing {line:?} in\n{text}"
            );
        }
        // Every family is declared once, and every sample belongs to a declared family.
        let families: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|line| line.split(' ').next())
            .collect();
        assert_eq!(families.len(), 10);
        for sample in text.lines().filter(|line| !line.starts_with('#')) {
            assert!(
                families.iter().any(|family| sample.starts_with(family)),
                "{sample} belongs to no family"
            );
        }
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn floats_are_written_as_prometheus_reads_them() {
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(0.25), "0.25");
        assert_eq!(float(10.0), "10");
    }

    #[test]
    fn one_record_moves_every_metric_a_reconcile_moves() {
        let metrics = Metrics::new();
        metrics.record_reconcile(&ReconcileRecord {
            duration: Duration::from_millis(40),
            error: Some(ErrorCategory::Invalid),
            region_writes: 3,
            region_write_failures: 1,
            samples_judged: SampleTally {
                successful: 2,
                failed: 1,
                inconclusive: 0,
                errors: 1,
            },
            status_patch: Some((WriteResult::Conflict, Duration::from_millis(5))),
        });
        assert_eq!(metrics.reconcile_total.get(ReconcileResult::Error), 1);
        assert_eq!(
            metrics.reconcile_errors_total.get(ErrorCategory::Invalid),
            1
        );
        assert_eq!(metrics.region_writes_total.get(WriteResult::Ok), 3);
        assert_eq!(metrics.region_writes_total.get(WriteResult::Error), 1);
        assert_eq!(metrics.gate_samples_total.get(SampleVerdict::Successful), 2);
        assert_eq!(metrics.gate_samples_total.get(SampleVerdict::Failed), 1);
        assert_eq!(metrics.gate_samples_total.get(SampleVerdict::Error), 1);
        assert_eq!(metrics.status_patches_total.get(WriteResult::Conflict), 1);
        let text = metrics.render();
        assert!(text.contains("configrollout_reconcile_duration_seconds_count 1\n"));
        assert!(text.contains("configrollout_status_patch_duration_seconds_count 1\n"));
    }

    fn indexes_follow_all(all: &[impl LabelValue]) {
        for (position, label) in all.iter().enumerate() {
            assert_eq!(label.index(), position, "{}", label.as_str());
        }
    }

    #[test]
    fn every_label_value_sits_at_its_index() {
        indexes_follow_all(ReconcileResult::ALL);
        indexes_follow_all(WriteResult::ALL);
        indexes_follow_all(SampleVerdict::ALL);
        indexes_follow_all(RolloutPhase::ALL);
        indexes_follow_all(ErrorCategory::ALL);
        indexes_follow_all(WriteKind::ALL);
    }
}
