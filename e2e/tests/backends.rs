//! Issue 34 on real clusters: gates on a second server of the Prometheus query API.
//! Debian's VictoriaMetrics scrapes the lab's workloads every second, with the flags
//! the README's "Prometheus-API backends" asks for (`configrollout_e2e::victoria`). The
//! Regions name no Prometheus, the controller's `--prometheus-url` is VictoriaMetrics,
//! and the lab's Prometheus is stopped: every sample below comes from VictoriaMetrics.
//! A threshold gate passes on healthy regions and halts on a failing canary; a
//! comparison gate (range queries) fails a bad canary against healthy regions. One lab
//! for the binary.

mod support;

use configrollout::api::{GateVerdict, Region, SampleVerdict};
use configrollout_e2e::LabOptions;
use kube::api::{Api, Patch, PatchParams};

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gates_work_on_victoria_metrics() {
    let mut world = World::start(LabOptions {
        regions: 3,
        victoria_metrics: true,
        ..LabOptions::default()
    })
    .await;
    let victoria_metrics = world
        .lab
        .victoria_metrics_url()
        .expect("the lab runs VictoriaMetrics");
    regions_name_no_prometheus(&world).await;
    world.lab.stop_prometheus();
    assert!(
        world.lab.query_prometheus("up").await.is_err(),
        "the lab's Prometheus answers no gate"
    );
    for region in world.lab.regions() {
        world
            .lab
            .set_error_rate(&region, 0.0)
            .await
            .expect("errors down");
    }
    let _controller = world.start_controller_against("controller-backends", &victoria_metrics, &[]);

    a_threshold_gate_passes_on_healthy_regions(&world).await;
    a_threshold_gate_halts_a_failing_canary(&world, &victoria_metrics).await;
    a_bad_canary_fails_the_comparison(&world).await;
}

/// Removes `spec.prometheus` from every Region, as a platform whose regions share the
/// controller's default Prometheus has them.
async fn regions_name_no_prometheus(world: &World) {
    let regions: Api<Region> = Api::all(world.hub.clone());
    let patch = serde_json::json!({"spec": {"prometheus": null}});
    for name in world.lab.regions() {
        let region = within(
            "drop the Region's Prometheus",
            regions.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
        assert!(region.spec.prometheus.is_none(), "{name} names none");
    }
}

/// The threshold gate of these scenarios on both stages.
fn threshold_rollout(name: &str) -> String {
    rollout_yaml(
        name,
        &format!(
            r#"  onFailure: Halt
  data: {{rate: "100"}}
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      condition: result < 0.1
      interval: 2s
      initialDelay: 4s
      count: 3
      failureLimit: 0
  stages:
    - {{name: canary, regions: {{names: [region-1]}}, gates: [errors]}}
    - {{name: rest, regions: {{names: [region-2, region-3]}}, gates: [errors]}}
"#
        ),
    )
}

/// The error ratio of `region` as VictoriaMetrics answers it now.
async fn error_ratio(victoria_metrics: &str, region: &str) -> Option<f64> {
    let http = reqwest::Client::new();
    let query = ERROR_RATIO.replace("{{region}}", region);
    configrollout_e2e::prometheus::instant_query(&http, victoria_metrics, &query)
        .await
        .ok()?
        .first()
        .map(|sample| sample.value)
}

/// No region fails requests: every window passes on samples VictoriaMetrics answered
/// (none is a query error or a stale answer) and the rollout completes everywhere.
async fn a_threshold_gate_passes_on_healthy_regions(world: &World) {
    let name = "vm-healthy";
    world.create_rollout(&threshold_rollout(name)).await;
    let complete = ends(world, name, "Complete").await;
    for (stage, region) in [
        ("canary", "region-1"),
        ("rest", "region-2"),
        ("rest", "region-3"),
    ] {
        let (verdict, samples) = window_of(&complete, stage, region);
        assert_eq!(verdict, Some(GateVerdict::Passed), "{region}: {samples:?}");
        // A passed window keeps only the sample that passed it.
        assert!(
            !samples.is_empty()
                && samples.iter().all(|sample| {
                    sample.verdict == SampleVerdict::Successful
                        && number(sample.value.as_deref()) < 0.1
                }),
            "{region}: every sample a fresh answer under the threshold: {samples:?}"
        );
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("rate", "100")])),
            "{region} runs the value"
        );
    }
    world.delete_rollout(name).await;
}

/// region-1 fails half its requests: the canary's window fails on a sample of about
/// 0.5, the rollout halts with GateFailed, and region-2 and region-3 are never written.
async fn a_threshold_gate_halts_a_failing_canary(world: &World, victoria_metrics: &str) {
    let name = "vm-halting";
    world
        .lab
        .set_error_rate("region-1", 0.5)
        .await
        .expect("errors up in the canary");
    eventually("VictoriaMetrics sees the canary fail", PROGRESS, || async {
        error_ratio(victoria_metrics, "region-1")
            .await
            .filter(|ratio| *ratio > 0.4)
    })
    .await;
    world.create_rollout(&threshold_rollout(name)).await;
    let halted = ends(world, name, "Halted").await;
    let status = halted.status.as_ref().expect("status");
    let condition = status.condition("Halted").expect("Halted condition");
    assert_eq!(condition.reason, "GateFailed");
    assert!(
        condition.message.contains("gate errors") && condition.message.contains("region region-1"),
        "{}",
        condition.message
    );
    let (verdict, samples) = window_of(&halted, "canary", "region-1");
    assert_eq!(verdict, Some(GateVerdict::Failed));
    let failed = samples
        .iter()
        .rev()
        .find(|sample| sample.verdict == SampleVerdict::Failed)
        .expect("the failing sample is in status");
    let value = number(failed.value.as_deref());
    assert!(
        (value - 0.5).abs() < 0.1,
        "the canary fails half its requests: {failed:?}"
    );
    for region in ["region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, name).await,
            None,
            "a halted canary keeps the value from {region}"
        );
    }
    world
        .lab
        .set_error_rate("region-1", 0.0)
        .await
        .expect("errors down in the canary");
    eventually(
        "VictoriaMetrics sees the canary healthy again",
        PROGRESS,
        || async {
            error_ratio(victoria_metrics, "region-1")
                .await
                .filter(|ratio| *ratio < 0.01)
        },
    )
    .await;
    world.delete_rollout(name).await;
}

/// tests/comparison.rs's first scenario on range queries answered by VictoriaMetrics:
/// region-1 runs an invalid timeout and fails half its requests; region-2 and region-3,
/// not yet updated, fail none. The comparison fails the canary and halts.
async fn a_bad_canary_fails_the_comparison(world: &World) {
    let name = "vm-bad-canary";
    world
        .lab
        .watch_config("region-1", APP, name)
        .await
        .expect("region-1 follows the target");
    world
        .create_rollout(&compared_rollout(
            name,
            r#"{timeout_ms: "-5", rate: "100"}"#,
            r#"    - {name: canary, regions: {names: [region-1]}, gates: [errors]}
    - {name: rest, regions: {names: [region-2, region-3]}}
"#,
        ))
        .await;
    let halted = ends(world, name, "Halted").await;
    let (verdict, samples) = window_of(&halted, "canary", "region-1");
    assert_eq!(verdict, Some(GateVerdict::Failed));
    let failed = samples
        .iter()
        .rev()
        .find(|sample| sample.verdict == SampleVerdict::Failed)
        .expect("a failed comparison");
    let comparison = failed.comparison.as_ref().expect("both sides shown");
    assert_eq!(comparison.baseline_source, "regions region-2, region-3");
    assert!(
        comparison.canary.points >= 8 && comparison.baseline.points >= 16,
        "a whole window on each side, both baseline regions pooled: {comparison:?}"
    );
    let canary = number(comparison.canary.median.as_deref());
    let baseline = number(comparison.baseline.median.as_deref());
    assert!(
        (canary - 0.5).abs() < 0.1 && baseline == 0.0,
        "the canary fails half its requests, the baseline none: {comparison:?}"
    );
    assert!(
        number(comparison.p_value.as_deref()) < 0.05,
        "significant: {comparison:?}"
    );
    let message = failed.message.as_deref().unwrap_or_default();
    assert!(message.contains("higher"), "says which way: {message}");
    for region in ["region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, name).await,
            None,
            "a halted canary keeps the bad value from {region}"
        );
    }
    world.delete_rollout(name).await;
}
