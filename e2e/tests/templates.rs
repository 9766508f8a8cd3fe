//! Issue 34, "gates a platform can share", on real clusters: the platform writes a check
//! once as a ClusterGateTemplate and two teams' rollouts use it with their own args; a
//! `web` check reads a real HTTP server's JSON (with a header from a Secret) and halts a
//! canary the server reports unhealthy; a `job` check runs a Job in the region (the
//! lab's upstream job controller and KWOK's kubelet) and a failing Job halts its stage.
//! One lab for the binary.

mod support;

use std::collections::BTreeMap;

use configrollout::api::{ClusterGateTemplate, ConfigRollout, GateVerdict, SampleVerdict};
use configrollout_e2e::{HUB, LabOptions, SYSTEM_NAMESPACE, WebServer};
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, PostParams};

use support::gates::{ERROR_RATIO, ends, window_of};
use support::*;

/// The second team's hub namespace.
const TEAM_B: &str = "team-b";

/// The web check's token, in a Secret of the controller's namespace.
const TOKEN: &str = "lab-web-gate-token-4f1c";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn platform_templates_guard_rollouts() {
    let world = World::start(LabOptions {
        regions: 2,
        workload_controllers: true,
        ..LabOptions::default()
    })
    .await;
    within("team-b namespace", world.lab.create_namespace(HUB, TEAM_B)).await;
    within(
        "grant team-b the app namespace",
        world.lab.annotate_namespace(
            HUB,
            TEAM_B,
            &[(
                configrollout::engine::tenancy::ALLOWED_TARGET_NAMESPACES,
                APP,
            )],
        ),
    )
    .await;
    let _controller = world.start_controller("controller-templates");
    for region in world.lab.regions() {
        within("no errors", world.lab.set_error_rate(&region, 0.0)).await;
    }

    one_cluster_template_serves_two_teams(&world).await;
    a_web_check_halts_the_canary_its_endpoint_reports(&world).await;
    a_failing_job_halts_its_stage(&world).await;
}

async fn create_cluster_template(world: &World, yaml: &str) {
    let template: ClusterGateTemplate = serde_saphyr::from_str(yaml).expect("template YAML");
    let api: Api<ClusterGateTemplate> = Api::all(world.hub.clone());
    within(
        "create ClusterGateTemplate",
        api.create(&PostParams::default(), &template),
    )
    .await;
}

/// A two-stage rollout in `namespace` whose gate `check` uses the ClusterGateTemplate
/// `template` with `args` (YAML flow mapping).
fn templated_rollout(namespace: &str, name: &str, template: &str, args: &str) -> String {
    format!(
        r#"apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata:
  name: {name}
  namespace: {namespace}
spec:
  target: {{namespace: {APP}, name: {name}}}
  onFailure: Halt
  data: {{rate: "5"}}
  gates:
    - name: check
      template: {{name: {template}, args: {args}}}
      interval: 2s
      count: 2
      failureLimit: 0
  stages:
    - {{name: canary, regions: {{names: [region-1]}}, gates: [check]}}
    - {{name: rest, regions: {{names: [region-2]}}, gates: [check]}}
"#
    )
}

async fn create_in(world: &World, namespace: &str, yaml: &str) {
    let rollout: ConfigRollout = serde_saphyr::from_str(yaml).expect("rollout YAML");
    let api: Api<ConfigRollout> = Api::namespaced(world.hub.clone(), namespace);
    within(
        "create rollout",
        api.create(&PostParams::default(), &rollout),
    )
    .await;
}

async fn finished_in(world: &World, namespace: &str, name: &str) -> ConfigRollout {
    let api: Api<ConfigRollout> = Api::namespaced(world.hub.clone(), namespace);
    eventually(
        &format!("{namespace}/{name} finishes"),
        PROGRESS,
        || async {
            let rollout = within("read rollout", api.get(name)).await;
            matches!(
                phase_of(&rollout).as_deref(),
                Some("Complete" | "Halted" | "RolledBack")
            )
            .then_some(rollout)
        },
    )
    .await
}

/// The platform's error-ratio check, used by `team` with the default threshold and by
/// `team-b` with its own: both complete, each status records the template and its
/// generation, and each gate judged its own threshold.
async fn one_cluster_template_serves_two_teams(world: &World) {
    create_cluster_template(
        world,
        &format!(
            r#"apiVersion: configrollout.dev/v1alpha1
kind: ClusterGateTemplate
metadata: {{name: error-ratio}}
spec:
  description: The region's error ratio over 5 s, below a threshold.
  args:
    - {{name: threshold, type: Number, default: "0.1"}}
  prometheus:
    query: '{ERROR_RATIO}'
    condition: result < {{{{args.threshold}}}}
"#
        ),
    )
    .await;
    create_in(
        world,
        TEAM,
        &templated_rollout(TEAM, "team-a-limits", "error-ratio", "{}"),
    )
    .await;
    create_in(
        world,
        TEAM_B,
        &templated_rollout(
            TEAM_B,
            "team-b-limits",
            "error-ratio",
            r#"{threshold: "0.05"}"#,
        ),
    )
    .await;
    for (namespace, name, threshold) in [
        (TEAM, "team-a-limits", "0.1"),
        (TEAM_B, "team-b-limits", "0.05"),
    ] {
        let rollout = finished_in(world, namespace, name).await;
        assert_eq!(phase_of(&rollout).as_deref(), Some("Complete"), "{name}");
        let status = rollout.status.as_ref().expect("status");
        let used = &status.gate_templates;
        assert_eq!(used.len(), 1, "{used:?}");
        assert_eq!(used[0].template, "ClusterGateTemplate error-ratio");
        assert_eq!(used[0].generation, 1);
        assert_eq!(used[0].stage, "rest");
        let check = used[0].check.prometheus.as_ref().expect("a query check");
        assert_eq!(check.condition, format!("result < {threshold}"));
        let (verdict, samples) = window_of(&rollout, "canary", "region-1");
        assert_eq!(verdict, Some(GateVerdict::Passed), "{name}");
        assert!(!samples.is_empty());
    }
}

/// A web check: the platform's status endpoint answers each region's error ratio; the
/// controller sends the token from a Secret. region-1 is reported at 0.5: the canary
/// halts, region-2 is never written, and the token is nowhere in the rollout.
async fn a_web_check_halts_the_canary_its_endpoint_reports(world: &World) {
    let server = within("start the status server", WebServer::start()).await;
    server.answer(
        "/v1/errors/region-1",
        200,
        serde_json::json!({"data": {"region": "region-1", "errorRatio": 0.5}}),
    );
    server.answer(
        "/v1/errors/region-2",
        200,
        serde_json::json!({"data": {"region": "region-2", "errorRatio": 0.0}}),
    );
    let secrets: Api<Secret> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    within(
        "create the token Secret",
        secrets.create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("status-token".into()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(
                    "token".to_owned(),
                    ByteString(format!("Bearer {TOKEN}").into_bytes()),
                )])),
                ..Secret::default()
            },
        ),
    )
    .await;
    create_cluster_template(
        world,
        &format!(
            r#"apiVersion: configrollout.dev/v1alpha1
kind: ClusterGateTemplate
metadata: {{name: status-endpoint}}
spec:
  args:
    - {{name: threshold, type: Number}}
  web:
    url: '{}/{{{{region}}}}'
    headers:
      - {{name: Authorization, valueFrom: {{name: status-token, key: token}}}}
    jsonPath: $.data.errorRatio
    condition: result < {{{{args.threshold}}}}
    timeoutSeconds: 5
"#,
            server.url("/v1/errors")
        ),
    )
    .await;
    let name = "web-checked";
    create_in(
        world,
        TEAM,
        &templated_rollout(TEAM, name, "status-endpoint", r#"{threshold: "0.1"}"#),
    )
    .await;
    let halted = ends(world, name, "Halted").await;
    let (verdict, samples) = window_of(&halted, "canary", "region-1");
    assert_eq!(verdict, Some(GateVerdict::Failed));
    let failed = samples
        .iter()
        .find(|sample| sample.verdict == SampleVerdict::Failed)
        .expect("a failed sample");
    assert_eq!(failed.value.as_deref(), Some("0.5"), "{failed:?}");
    let seen = server.requests("/v1/errors/region-1");
    assert!(!seen.is_empty(), "the controller asked the server");
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str()),
        "the token from the Secret"
    );
    assert!(
        server.requests("/v1/errors/region-2").is_empty(),
        "region-2 was never checked"
    );
    assert!(
        world.target_data("region-2", name).await.is_none(),
        "region-2 was never written"
    );
    let shown = serde_json::to_string(&halted).expect("rollout JSON");
    assert!(
        !shown.contains(TOKEN),
        "the token is nowhere in the rollout"
    );
    world.delete_rollout(name).await;
}

/// A job check: the platform's smoke test runs as a Job in the region; the lab's kubelet
/// (KWOK) ends a pod labelled `lab.configrollout.dev/exit: "1"` as failed. The team's
/// arg makes it fail: the canary halts, and the Job is the controller's, in the target
/// namespace of the region.
async fn a_failing_job_halts_its_stage(world: &World) {
    create_cluster_template(
        world,
        r#"apiVersion: configrollout.dev/v1alpha1
kind: ClusterGateTemplate
metadata: {name: smoke-test}
spec:
  args:
    - {name: exitCode, default: "0"}
  job:
    timeoutSeconds: 120
    template:
      template:
        metadata:
          labels: {lab.configrollout.dev/exit: "{{args.exitCode}}"}
        spec:
          containers:
            - name: smoke
              image: registry.invalid/smoke:1
              args: ["--region", "{{region}}"]
          restartPolicy: Never
"#,
    )
    .await;
    let passing = "job-passes";
    create_in(
        world,
        TEAM,
        &templated_rollout(TEAM, passing, "smoke-test", "{}"),
    )
    .await;
    let complete = ends(world, passing, "Complete").await;
    let (verdict, samples) = window_of(&complete, "rest", "region-2");
    assert_eq!(verdict, Some(GateVerdict::Passed));
    assert_eq!(samples[0].value.as_deref(), Some("1"));
    world.delete_rollout(passing).await;

    let failing = "job-fails";
    create_in(
        world,
        TEAM,
        &templated_rollout(TEAM, failing, "smoke-test", r#"{exitCode: "1"}"#),
    )
    .await;
    let halted = ends(world, failing, "Halted").await;
    let (verdict, samples) = window_of(&halted, "canary", "region-1");
    assert_eq!(verdict, Some(GateVerdict::Failed));
    assert_eq!(samples[0].verdict, SampleVerdict::Failed);
    assert_eq!(samples[0].value.as_deref(), Some("0"));
    assert!(
        world.target_data("region-2", failing).await.is_none(),
        "region-2 was never written"
    );
    let jobs: Api<Job> = Api::namespaced(world.region("region-1"), APP);
    let ran = within(
        "list the gate's Jobs",
        jobs.list(&ListParams::default().labels("configrollout.dev/gate=check")),
    )
    .await;
    assert!(
        !ran.items.is_empty(),
        "the Job ran in region-1's app namespace"
    );
    world.delete_rollout(failing).await;
}
