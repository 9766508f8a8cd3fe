//! Issue 35 on real clusters: a change judged against its baseline. The lab's workloads
//! serve requests in three regions and fail half of them while they run an invalid
//! `timeout_ms`; Prometheus scrapes them every second. A comparison gate compares the
//! canary region's error ratio with the regions not yet updated, over the same window:
//! a bad value in the canary fails against healthy baseline regions; a fleet-wide error
//! increase that hits every region alike passes the comparison while a fixed threshold
//! on the same data halts; and the last stage, with no region left to compare with,
//! compares each region with its own window before the change. A dry-run gate (issue 34)
//! that fails throughout is kept, charted and counted apart while its rollout completes.
//! One lab for the binary.

mod support;

use std::time::Duration;

use configrollout::api::{GateVerdict, SampleVerdict};
use configrollout_e2e::LabOptions;

use support::*;

/// Long enough for a comparison window (10 s) to fill with the data of a new setting.
const NEW_DATA: Duration = Duration::from_secs(16);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_is_judged_against_its_baseline() {
    let world = World::start(LabOptions {
        regions: 3,
        ..LabOptions::default()
    })
    .await;
    let probe = free_local_addr();
    let _controller = world.start_controller_on("controller-compare", &probe);
    errors_everywhere(&world, 0.0).await;

    a_failing_dry_run_gate_is_kept_while_the_rollout_completes(&world, &probe).await;
    a_bad_canary_fails_against_healthy_regions(&world).await;
    a_fleet_wide_increase_passes_the_comparison_but_not_a_threshold(&world).await;
    the_last_stage_compares_with_its_own_earlier_window(&world).await;
}

/// A gate in dry run that fails every sample beside a real one that passes: the rollout
/// completes, the failed samples are in its status, and the controller counts them apart
/// from the samples its alerts read.
async fn a_failing_dry_run_gate_is_kept_while_the_rollout_completes(world: &World, probe: &str) {
    let name = "dry-run";
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                r#"  onFailure: Halt
  data: {{rate: "10"}}
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      condition: result < 0.1
      interval: 2s
      count: 3
    - name: requests-never-seen
      query: 'sum(configrollout_lab_requests_total{{region="{{{{region}}}}"}})'
      condition: result < 1
      interval: 2s
      dryRun: true
  stages:
    - {{name: canary, regions: {{names: [region-1]}}, gates: [errors, requests-never-seen]}}
    - {{name: rest, regions: {{names: [region-2]}}}}
"#
            ),
        ))
        .await;
    let complete = ends(world, name, "Complete").await;
    let canary = complete
        .status
        .as_ref()
        .and_then(|status| status.stages.iter().find(|stage| stage.name == "canary"))
        .expect("canary stage");
    let dry_run = canary
        .gates
        .iter()
        .find(|gate| gate.name == "requests-never-seen")
        .expect("the dry run's window is kept");
    assert!(dry_run.dry_run);
    assert_eq!(dry_run.verdict, Some(GateVerdict::Failed));
    let failed = dry_run
        .samples
        .iter()
        .find(|sample| sample.verdict == SampleVerdict::Failed)
        .expect("its failed sample is visible");
    assert!(
        number(failed.value.as_deref()) >= 1.0,
        "the value it failed on: {failed:?}"
    );
    let exposition = scrape(&format!("http://{probe}/metrics")).await;
    assert!(
        sample(
            &exposition,
            "configrollout_gate_dry_run_samples_total{verdict=\"failed\"}"
        ) >= 1.0,
        "counted apart"
    );
    assert_eq!(
        sample(
            &exposition,
            "configrollout_gate_samples_total{verdict=\"failed\"}"
        ),
        0.0,
        "no failed sample of a real gate: the alert stays quiet"
    );
    world.delete_rollout(name).await;
}

/// Sets every region's workload to fail `ratio` of its requests.
async fn errors_everywhere(world: &World, ratio: f64) {
    for region in world.lab.regions() {
        world
            .lab
            .set_error_rate(&region, ratio)
            .await
            .expect("set the error rate");
    }
}

/// region-1 runs an invalid timeout and fails half its requests; region-2 and region-3,
/// not yet updated, fail none. The comparison fails the canary and halts: the bad value
/// never reaches the other regions.
async fn a_bad_canary_fails_against_healthy_regions(world: &World) {
    let name = "bad-canary";
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

/// Every region fails 30 % of its requests (a bad hour for the whole fleet, not the
/// change). The same query over the same data: the comparison sees no difference between
/// updated and not-yet-updated regions and completes; a fixed `result < 0.1` halts.
async fn a_fleet_wide_increase_passes_the_comparison_but_not_a_threshold(world: &World) {
    // Every workload follows the target of the compared rollout: valid values, and no
    // longer the bad canary's (which its region may still hold).
    world
        .lab
        .watch_config_everywhere(APP, "fleet-compared")
        .await
        .expect("the workloads follow the compared target");
    errors_everywhere(world, 0.3).await;
    // Every region's own earlier window (the last stage's baseline) holds the bad hour too.
    tokio::time::sleep(NEW_DATA).await;
    let stages = r#"    - {name: canary, regions: {names: [region-1]}, gates: [errors]}
    - {name: rest, regions: {names: [region-2, region-3]}, gates: [errors]}
"#;
    world
        .create_rollout(&compared_rollout(
            "fleet-compared",
            r#"{rate: "200"}"#,
            stages,
        ))
        .await;
    world
        .create_rollout(&rollout_yaml(
            "fleet-threshold",
            &format!(
                r#"  onFailure: Halt
  data: {{rate: "200"}}
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      condition: result < 0.1
      interval: 3s
      count: 2
      failureLimit: 0
  stages:
{stages}"#
            ),
        ))
        .await;
    ends(world, "fleet-threshold", "Halted").await;
    let complete = ends(world, "fleet-compared", "Complete").await;
    let (verdict, samples) = window_of(&complete, "canary", "region-1");
    assert_eq!(verdict, Some(GateVerdict::Passed));
    let passed = samples.last().expect("the deciding sample is kept");
    let comparison = passed.comparison.as_ref().expect("both sides shown");
    assert_eq!(comparison.baseline_source, "regions region-2, region-3");
    let canary = number(comparison.canary.median.as_deref());
    let baseline = number(comparison.baseline.median.as_deref());
    assert!(
        (canary - 0.3).abs() < 0.1 && (baseline - 0.3).abs() < 0.1,
        "both sides in the bad hour: {comparison:?}"
    );
    for region in ["region-2", "region-3"] {
        let (verdict, samples) = window_of(&complete, "rest", region);
        assert_eq!(verdict, Some(GateVerdict::Passed), "{region}");
        let comparison = samples
            .last()
            .and_then(|sample| sample.comparison.as_ref())
            .expect("both sides shown");
        assert!(
            comparison
                .baseline_source
                .starts_with(&format!("{region} before ")),
            "no region left to compare with: {region} against its own window, {comparison:?}"
        );
    }
    errors_everywhere(world, 0.0).await;
    world.delete_rollout("fleet-compared").await;
    world.delete_rollout("fleet-threshold").await;
}

/// A one-stage rollout to region-3: no region is left to compare with, so the gate
/// compares region-3 after the change with region-3 before it, and the invalid timeout
/// fails.
async fn the_last_stage_compares_with_its_own_earlier_window(world: &World) {
    let name = "last-stage";
    world
        .lab
        .watch_config("region-3", APP, name)
        .await
        .expect("region-3 follows the target");
    // Region-3's window before the change: healthy.
    tokio::time::sleep(NEW_DATA).await;
    world
        .create_rollout(&compared_rollout(
            name,
            r#"{timeout_ms: "soon"}"#,
            r#"    - {name: only, regions: {names: [region-3]}, gates: [errors]}
"#,
        ))
        .await;
    let halted = ends(world, name, "Halted").await;
    let (verdict, samples) = window_of(&halted, "only", "region-3");
    assert_eq!(verdict, Some(GateVerdict::Failed));
    let comparison = samples
        .last()
        .and_then(|sample| sample.comparison.as_ref())
        .expect("both sides shown");
    assert!(
        comparison.baseline_source.starts_with("region-3 before "),
        "{comparison:?}"
    );
    assert!(
        number(comparison.canary.median.as_deref()) > 0.3
            && number(comparison.baseline.median.as_deref()) == 0.0,
        "worse than its own healthy past: {comparison:?}"
    );
    world.delete_rollout(name).await;
}
