//! Issue 34, "tenant-scoped queries", on a real Prometheus. Every region's workload reports
//! `configrollout_lab_tenant_load` for two tenants sharing the server: 1 for
//! `namespace="tenant-a"`, 1000 for `namespace="tenant-b"`. The platform admin pins
//! `namespace="tenant-a"` for the hub namespace `team`
//! (`configrollout.dev/gate-label-matchers`): its gates then read tenant-a's series only.
//! A gate that passes only because of that scope completes (the unscoped query sees
//! tenant-b's 1000); a join whose unscoped answer carries tenant-b's values shows none of
//! them; a query naming tenant-b is refused before any region is touched; and a
//! Prometheus error whose text quotes series labels reaches the status as its kind only.
//! One lab for the binary.

mod support;

use std::collections::BTreeSet;

use configrollout::api::{ConfigRollout, GateVerdict};
use configrollout::engine::tenancy::GATE_LABEL_MATCHERS;
use configrollout_e2e::{HUB, LabOptions};

use support::*;

/// The scope the admin pins for `team`.
const TENANT_A: &str = r#"namespace="tenant-a""#;

/// A join over the tenants' series: unscoped, one series per tenant in the region (1 for
/// tenant-a, 1000000 for tenant-b); scoped, tenant-a's alone.
const JOIN: &str = r#"configrollout_lab_tenant_load{region="{{region}}"} * on(namespace, region) group_left configrollout_lab_tenant_load"#;

/// A join whose right side has one series per region for each namespace: Prometheus
/// refuses it, quoting the series' labels in its error, scoped or not.
const DUPLICATES: &str =
    "configrollout_lab_tenant_load * on(namespace) group_left configrollout_lab_tenant_load";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gate_queries_read_only_the_namespace_scope() {
    let world = World::start(LabOptions {
        regions: 2,
        ..LabOptions::default()
    })
    .await;
    within(
        "pin the team's gate label matchers",
        world
            .lab
            .annotate_namespace(HUB, TEAM, &[(GATE_LABEL_MATCHERS, TENANT_A)]),
    )
    .await;
    let _controller = world.start_controller("controller-scoping");
    // Both tenants' series of both regions are scraped before any gate samples them.
    eventually("both tenants' series scraped", PROGRESS, || async {
        let series = world
            .lab
            .query_prometheus("configrollout_lab_tenant_load")
            .await
            .ok()?;
        (series.len() == 4).then_some(())
    })
    .await;

    a_gate_that_passes_only_within_its_scope_completes(&world).await;
    a_query_naming_another_tenant_is_refused(&world).await;
    a_prometheus_error_shows_no_labels(&world).await;
}

/// `max(configrollout_lab_tenant_load) < 10`: false on the whole server (tenant-b's 1000),
/// true within tenant-a. The rollout completes; the join's samples carry tenant-a's
/// value, never tenant-b's.
async fn a_gate_that_passes_only_within_its_scope_completes(world: &World) {
    let unscoped = world
        .lab
        .query_prometheus("max(configrollout_lab_tenant_load)")
        .await
        .expect("unscoped max");
    assert_eq!(
        unscoped.first().map(|sample| sample.value),
        Some(1000.0),
        "unscoped, the gate would see tenant-b's load and fail"
    );
    let joined = world
        .lab
        .query_prometheus(&JOIN.replace("{{region}}", "region-1"))
        .await
        .expect("unscoped join");
    assert!(
        joined
            .iter()
            .any(|sample| sample.value == 1_000_000.0 && sample.labels["namespace"] == "tenant-b"),
        "unscoped, the join answers with tenant-b's series: {joined:?}"
    );

    let name = "scoped";
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                r#"  onFailure: Halt
  data: {{rate: "1"}}
  gates:
    - name: load
      query: 'max(configrollout_lab_tenant_load)'
      condition: result < 10
      interval: 2s
      count: 3
      failureLimit: 0
    - name: joined
      query: '{JOIN}'
      condition: all(result < 10)
      interval: 2s
      count: 3
      failureLimit: 0
  stages:
    - {{name: canary, regions: {{names: [region-1]}}, gates: [load, joined]}}
    - {{name: rest, regions: {{names: [region-2]}}, gates: [load, joined]}}
"#
            ),
        ))
        .await;
    // Every sample value the status shows while the rollout runs.
    let values = std::sync::Mutex::new(BTreeSet::new());
    let complete = eventually(&format!("{name} finishes"), PROGRESS, || async {
        let rollout = world.rollout(name).await;
        values
            .lock()
            .expect("values")
            .extend(sample_values(&rollout));
        matches!(
            phase_of(&rollout).as_deref(),
            Some("Complete" | "Halted" | "RolledBack")
        )
        .then_some(rollout)
    })
    .await;
    let values = values.into_inner().expect("values");
    assert_eq!(
        phase_of(&complete).as_deref(),
        Some("Complete"),
        "{}",
        stages_of(&complete)
    );
    let status = complete.status.as_ref().expect("status");
    for stage in &status.stages {
        for gate in &stage.gates {
            assert_eq!(
                gate.verdict,
                Some(GateVerdict::Passed),
                "{}",
                stages_of(&complete)
            );
        }
    }
    assert!(!values.is_empty(), "samples were seen");
    assert!(
        values.iter().all(|value| value == "1"),
        "only tenant-a's value, never tenant-b's (1000, 1000000): {values:?}"
    );
    world.delete_rollout(name).await;
}

/// A gate naming tenant-b: refused at once, naming the field and the label; no region is
/// written.
async fn a_query_naming_another_tenant_is_refused(world: &World) {
    let name = "other-tenant";
    world
        .create_rollout(&rollout_yaml(
            name,
            r#"  data: {rate: "2"}
  gates:
    - name: theirs
      query: 'sum(configrollout_lab_tenant_load{namespace="tenant-b"})'
      condition: result < 10
      interval: 2s
  stages:
    - {name: canary, regions: {names: [region-1]}, gates: [theirs]}
"#,
        ))
        .await;
    let refused = world.wait_condition(name, "InvalidSpec", PROGRESS).await;
    let message = refused
        .status
        .as_ref()
        .and_then(|status| {
            status
                .conditions
                .iter()
                .find(|condition| condition.type_ == "InvalidSpec")
        })
        .map(|condition| condition.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains(
            "spec.gates[0].query: cannot be scoped to the namespace's gate-label-matchers"
        ) && message.contains("label namespace"),
        "{message}"
    );
    assert!(
        sample_values(&refused).is_empty(),
        "nothing sampled: {}",
        stages_of(&refused)
    );
    assert_eq!(
        world.target_data("region-1", name).await,
        None,
        "nothing written"
    );
    world.delete_rollout(name).await;
}

/// Scoped to tenant-a, the join still has two series (one per region) on its right side
/// for `{namespace="tenant-a"}`: Prometheus fails it with an error quoting them. The
/// status shows the error's kind, never that text.
async fn a_prometheus_error_shows_no_labels(world: &World) {
    let scoped = DUPLICATES.replace(
        "configrollout_lab_tenant_load",
        "configrollout_lab_tenant_load{namespace=\"tenant-a\"}",
    );
    let error = world
        .lab
        .query_prometheus(&scoped)
        .await
        .expect_err("Prometheus refuses the join");
    let error = format!("{error:?}");
    assert!(
        error.contains("match group") && error.contains("tenant-a"),
        "Prometheus's own error quotes the series' labels: {error}"
    );

    let name = "duplicates";
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                r#"  onFailure: Halt
  data: {{rate: "3"}}
  gates:
    - name: joined
      query: '{DUPLICATES}'
      condition: all(result < 10)
      interval: 2s
      count: 3
      inconclusiveLimit: 1
      failureLimit: 0
  stages:
    - {{name: canary, regions: {{names: [region-1]}}, gates: [joined]}}
"#
            ),
        ))
        .await;
    let halted = world.wait_phase(name, "Halted", PROGRESS).await;
    // A query error sample (Inconclusive, or Error once errors repeat), saying which.
    let messages: Vec<String> = halted
        .status
        .iter()
        .flat_map(|status| &status.stages)
        .flat_map(|stage| &stage.gates)
        .flat_map(|gate| &gate.samples)
        .filter_map(|sample| sample.message.clone())
        .collect();
    assert!(
        messages
            .iter()
            .any(|message| message.contains("Prometheus error execution")),
        "the error's kind is shown: {}",
        stages_of(&halted)
    );
    let status = serde_json::to_string(&halted.status).expect("status JSON");
    for quoted in [
        "match group",
        "duplicate series",
        "tenant-",
        "namespace=",
        "region=",
    ] {
        assert!(!status.contains(quoted), "{quoted} in the status: {status}");
    }
    world.delete_rollout(name).await;
}

/// Every sample value in `rollout`'s status.
fn sample_values(rollout: &ConfigRollout) -> Vec<String> {
    rollout
        .status
        .iter()
        .flat_map(|status| &status.stages)
        .flat_map(|stage| &stage.gates)
        .flat_map(|gate| &gate.samples)
        .filter_map(|sample| sample.value.clone())
        .collect()
}

/// The stages of `rollout`'s status, for a failure message (metrics, never values).
fn stages_of(rollout: &ConfigRollout) -> String {
    serde_json::to_string_pretty(&rollout.status.as_ref().map(|status| &status.stages))
        .unwrap_or_default()
}
