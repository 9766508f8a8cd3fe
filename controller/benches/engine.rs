//! One engine decision (`engine::decide`) for a rollout of 50 regions in 5 stages with 3
//! gates, mid-rollout (two stages passed, the third verifying its gates with samples due).
//! The benchmark names keep their `engine_step_` prefix so results compare with
//! BENCHMARKS.md.

use std::collections::BTreeMap;
use std::hint::black_box;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use configrollout::api::{ConfigRolloutSpec, ConfigRolloutStatus, StageState};
use configrollout::engine::{
    Action, AppliedRevision, DesiredRevision, GateSampleObservation, Grant, Observations,
    RegionObservation, decide, gates_due,
};
use configrollout::gates::QueryResult;
use criterion::measurement::Measurement;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

#[path = "support/thread_cpu_time.rs"]
mod thread_cpu_time;
use serde_json::json;
use thread_cpu_time::ThreadCpuTime;

fn spec() -> Option<ConfigRolloutSpec> {
    let stages: Vec<_> = (0..5)
        .map(|stage| {
            let names: Vec<String> = (0..10).map(|r| format!("region-{stage}-{r}")).collect();
            json!({"name": format!("wave{stage}"), "regions": {"names": names},
                   "maxParallel": 5, "gates": ["errors", "latency", "saturation"],
                   "progressDeadline": "1h"})
        })
        .collect();
    let gate = |name: &str, query: &str| {
        json!({"name": name, "query": query, "condition": "result < 0.05",
               "interval": "30s", "count": 4, "failureLimit": 1, "inconclusiveLimit": 2})
    };
    serde_json::from_value(json!({
        "target": {"namespace": "app", "name": "app-config"},
        "data": {"k": "v"},
        "stages": stages,
        "gates": [
            gate("errors", "sum(rate(errors_total{region=\"{{region}}\"}[5m]))"),
            gate("latency", "histogram_quantile(0.99, sum by (le) (rate(latency_bucket{region=\"{{region}}\"}[5m])))"),
            gate("saturation", "max(saturation{stage=\"{{stage}}\"})"),
        ],
    }))
    .ok()
}

fn observations(
    regions: &BTreeMap<String, Option<AppliedRevision>>,
    samples: Vec<GateSampleObservation>,
) -> Observations {
    Observations {
        generation: 1,
        desired: DesiredRevision {
            digest: "digest-1".into(),
            keys_set: 12,
            keys_removed: 0,
        },
        fresh_stamp: "1767268800000-0-rollout:app/demo".into(),
        regions: regions
            .iter()
            .map(|(name, applied)| RegionObservation {
                name: name.clone(),
                labels: BTreeMap::from([("geo".to_string(), "eu".to_string())]),
                reachable: true,
                last_error: None,
                applied: applied.clone(),
                rolled_back: None,
                consumers: None,
                drifted_keys: Vec::new(),
                overridden_keys: Vec::new(),
                restored_overrides: Vec::new(),
                future_stamped_keys: 0,
                tampered: false,
                state_key_id: None,
                tombstones: 0,
            })
            .collect(),
        gate_samples: samples,
        grant: Grant::own_namespace("app"),
        ..Observations::default()
    }
}

fn sample_all(
    spec: &ConfigRolloutSpec,
    status: &ConfigRolloutStatus,
    now: DateTime<Utc>,
) -> Vec<GateSampleObservation> {
    gates_due(spec, status, now)
        .into_iter()
        .map(|request| GateSampleObservation {
            gate: request.gate,
            stage: request.stage,
            revision: request.revision,
            region: request.region,
            at: now,
            evaluated_at: Some(now),
            result: QueryResult::Scalar(0.01),
            comparison: None,
        })
        .collect()
}

/// Runs the simulated rollout until the third stage is verifying with samples recorded.
fn mid_rollout(spec: &ConfigRolloutSpec) -> (ConfigRolloutStatus, Observations, DateTime<Utc>) {
    let mut now = Utc
        .with_ymd_and_hms(2026, 1, 1, 12, 0, 0)
        .single()
        .unwrap_or_default();
    let mut regions: BTreeMap<String, Option<AppliedRevision>> = spec
        .stages
        .iter()
        .flat_map(|stage| stage.regions.names.iter().map(|name| (name.clone(), None)))
        .collect();
    let mut status = ConfigRolloutStatus::default();
    for _ in 0..200 {
        let third = status.stages.get(2);
        let verifying = third.is_some_and(|stage| {
            stage.state == StageState::Verifying
                && stage.gates.iter().all(|window| window.samples.len() >= 2)
        });
        if verifying {
            break;
        }
        let obs = observations(&regions, sample_all(spec, &status, now));
        let decision = decide(spec, std::mem::take(&mut status), &obs, now);
        for action in &decision.actions {
            if let Action::Publish {
                region,
                revision,
                step,
            } = action
            {
                regions.insert(
                    region.clone(),
                    Some(AppliedRevision {
                        revision: revision.clone(),
                        step: *step,
                        digest: "live".into(),
                    }),
                );
            }
        }
        status = decision.status;
        now += TimeDelta::seconds(30);
    }
    let obs = observations(&regions, sample_all(spec, &status, now));
    (status, obs, now)
}

fn bench_decide(c: &mut Criterion) {
    let Some(spec) = spec() else {
        return;
    };
    let (status, obs, now) = mid_rollout(&spec);
    assert_eq!(status.stages[2].state, StageState::Verifying, "bench setup");
    assert!(!obs.gate_samples.is_empty(), "bench setup: samples due");
    let windows: usize = status.stages.iter().map(|stage| stage.gates.len()).sum();
    let samples: usize = status
        .stages
        .iter()
        .flat_map(|stage| &stage.gates)
        .map(|window| window.samples.len())
        .sum();
    eprintln!(
        "mid-rollout status: {} regions, {windows} gate windows, {samples} samples, {} bytes of JSON",
        status.regions.len(),
        serde_json::to_string(&status)
            .map(|json| json.len())
            .unwrap_or(0)
    );
    bench_one_decision(
        c,
        "engine_step_50_regions_5_stages_3_gates",
        &spec,
        &status,
        &obs,
        now,
    );
    // What a caller pays if it keeps the old status and gives `decide` a copy.
    c.bench_function("status_clone_same_rollout", |b| b.iter(|| status.clone()));
}

/// One decision as the reconcile takes it: `decide` consumes the status it is given. The
/// reconcile gives up the copy it already made when reading the shared object, so here a
/// fresh copy per iteration is made outside the measurement (one per batch, so it is as
/// hot in cache as the reconcile's own); dropping the decision is measured with it.
fn bench_one_decision<M: Measurement + 'static>(
    c: &mut Criterion<M>,
    name: &str,
    spec: &ConfigRolloutSpec,
    status: &ConfigRolloutStatus,
    obs: &Observations,
    now: DateTime<Utc>,
) {
    c.bench_function(name, |b| {
        b.iter_batched(
            || status.clone(),
            |status| {
                let decision = decide(spec, status, obs, now);
                black_box(&decision);
            },
            BatchSize::NumIterations(1),
        )
    });
}

fn bench_decide_cpu(c: &mut Criterion<ThreadCpuTime>) {
    let Some(spec) = spec() else {
        return;
    };
    let (status, obs, now) = mid_rollout(&spec);
    bench_one_decision(
        c,
        "engine_step_50_regions_5_stages_3_gates_cpu_time",
        &spec,
        &status,
        &obs,
        now,
    );
    c.bench_function("status_clone_same_rollout_cpu_time", |b| {
        b.iter(|| status.clone())
    });
    // Calibration: 500 short strings cloned, to compare this machine with others.
    let strings: Vec<String> = (0..500).map(|i| format!("region-{i}")).collect();
    c.bench_function("calibration_clone_500_strings_cpu_time", |b| {
        b.iter(|| strings.clone())
    });
}

/// One comparison gate sample judged, at the sizes a spec can ask for: the README's
/// example (5m at 30s: 11 points against 3 baseline regions' 33), an hour at 10s (361
/// against 1083), and the most a spec allows (1000 points a side, 10 baseline regions).
fn bench_compare(c: &mut Criterion) {
    use configrollout::gates::compare::{Direction, Rules, compare};
    let rules = Rules {
        direction: Direction::Increase,
        tolerance: 0.2,
        alpha: 0.05,
        min_samples: 10,
    };
    // Error ratios around 1 %, a little noise, no two alike.
    let points = |n: usize, level: f64| -> Vec<f64> {
        (0..n)
            .map(|i| level * (1.0 + ((i * 7919) % 101) as f64 / 1000.0))
            .collect()
    };
    for (canary, baseline) in [(11, 33), (361, 1083), (1000, 10_000)] {
        let (c_points, b_points) = (points(canary, 0.011), points(baseline, 0.01));
        c.bench_function(&format!("compare_{canary}_vs_{baseline}_points"), |b| {
            b.iter(|| black_box(compare(&c_points, &b_points, &rules)))
        });
    }
}

criterion_group!(benches, bench_decide, bench_compare);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpuTime::new());
    targets = bench_decide_cpu
}
criterion_main!(benches, cpu_time);
