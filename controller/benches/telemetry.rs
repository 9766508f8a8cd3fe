//! Costs of the process infrastructure on the paths that run often: recording a metric
//! (every reconcile and write), rendering the exposition (every scrape), and one lease
//! decision (every renewal).

use std::hint::black_box;
use std::time::Duration;

use configrollout::api::{RolloutPhase, SampleVerdict};
use configrollout::leader::lease::{LeaseConfig, Sighting, decide};
use configrollout::telemetry::metrics::{Metrics, ReconcileResult, WriteResult};
use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use tokio::time::Instant;

fn busy_metrics() -> Metrics {
    let metrics = Metrics::new();
    for step in 0..10_000_u32 {
        metrics.reconcile_total.inc(ReconcileResult::Ok);
        metrics
            .reconcile_duration_seconds
            .observe(f64::from(step % 500) / 100.0);
        metrics.region_writes_total.inc(WriteResult::Ok);
        metrics.gate_samples_total.inc(SampleVerdict::Successful);
    }
    metrics
        .rollouts
        .set_counts([RolloutPhase::Progressing, RolloutPhase::Complete]);
    metrics
}

fn metrics(c: &mut Criterion) {
    let metrics = busy_metrics();
    c.bench_function("metrics/observe_duration", |b| {
        b.iter(|| {
            metrics
                .status_patch_duration_seconds
                .observe_duration(black_box(Duration::from_millis(37)))
        })
    });
    c.bench_function("metrics/counter_inc", |b| {
        b.iter(|| {
            metrics
                .region_writes_total
                .inc(black_box(WriteResult::Conflict))
        })
    });
    c.bench_function("metrics/render", |b| b.iter(|| black_box(metrics.render())));
}

fn lease(c: &mut Criterion) {
    let config = LeaseConfig::new("configrollout-system", "configrollout-controller", "a");
    let held = Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some("b".into()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        }),
        ..Lease::default()
    };
    let now = Instant::now();
    let sighting = Sighting::observe(None, &held, now);
    c.bench_function("leader/observe_and_decide", |b| {
        b.iter(|| {
            let seen = Sighting::observe(Some(&sighting), black_box(&held), now);
            black_box(decide(Some(&held), Some(&seen), &config, now))
        })
    });
}

criterion_group!(benches, metrics, lease);
criterion_main!(benches);
