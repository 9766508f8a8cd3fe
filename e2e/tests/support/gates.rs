//! What the gate scenarios share: the lab's per-region error ratio, the comparison gate
//! they roll out, and reading a finished rollout's gate windows.

use configrollout::api::{ConfigRollout, GateSample, GateVerdict};

use super::{PROGRESS, World, eventually, phase_of, rollout_yaml};

/// A region's error ratio over the last 5 s of 1 s scrapes: one series per region.
pub const ERROR_RATIO: &str = "sum(rate(configrollout_lab_errors_total{region=\"{{region}}\"}[5s])) / sum(rate(configrollout_lab_requests_total{region=\"{{region}}\"}[5s]))";

/// A rollout `name` of `data` whose stages (YAML list items, indented four spaces) may
/// name the gate `errors`: the error ratio compared with the regions not yet updated over
/// 10 s windows at 1 s, halting on failure.
pub fn compared_rollout(name: &str, data: &str, stages: &str) -> String {
    rollout_yaml(
        name,
        &format!(
            r#"  onFailure: Halt
  data: {data}
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      interval: 3s
      count: 2
      failureLimit: 0
      compare: {{failOn: Increase, tolerancePercent: 20, window: 10s, step: 1s, minSamples: 8}}
  stages:
{stages}"#
        ),
    )
}

/// The verdict and kept samples of the gate window of `region` in `stage`.
pub fn window_of<'a>(
    rollout: &'a ConfigRollout,
    stage: &str,
    region: &str,
) -> (Option<GateVerdict>, &'a [GateSample]) {
    let window = rollout
        .status
        .as_ref()
        .and_then(|status| status.stages.iter().find(|s| s.name == stage))
        .and_then(|stage| {
            stage
                .gates
                .iter()
                .find(|gate| gate.region.as_deref() == Some(region))
        })
        .unwrap_or_else(|| panic!("no gate window for {region} in stage {stage}"));
    (window.verdict, &window.samples)
}

/// Waits until rollout `name` has finished one way or another, and checks it ended in
/// `phase`; otherwise fails showing its conditions and gate windows (metrics, never
/// values).
pub async fn ends(world: &World, name: &str, phase: &str) -> ConfigRollout {
    let rollout = eventually(&format!("{name} finishes"), PROGRESS, || async {
        let rollout = world.rollout(name).await;
        matches!(
            phase_of(&rollout).as_deref(),
            Some("Complete" | "Halted" | "RolledBack")
        )
        .then_some(rollout)
    })
    .await;
    let status = rollout.status.as_ref();
    assert_eq!(
        phase_of(&rollout).as_deref(),
        Some(phase),
        "{name}: conditions {:?}, stages {}",
        status.map(|status| &status.conditions),
        serde_json::to_string_pretty(&status.map(|status| &status.stages)).unwrap_or_default()
    );
    rollout
}

/// A number the status renders (a sample's value, a median, a p-value).
pub fn number(text: Option<&str>) -> f64 {
    text.and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("not a number: {text:?}"))
}
