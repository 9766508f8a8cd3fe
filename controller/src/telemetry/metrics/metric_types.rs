//! The metric types the registry holds: a counter or a gauge per label value, a plain
//! gauge and a histogram, each over prometheus-client's own and encoded by it.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter as RawCounter;
use prometheus_client::metrics::gauge::Gauge as RawGauge;
use prometheus_client::metrics::histogram::Histogram as RawHistogram;

use super::labels::LabelValue;

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
