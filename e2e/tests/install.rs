//! The Helm chart installed into the lab's hub, and the shipped observability on the lab's
//! real Prometheus. One lab (hub + 1 region) for the binary, steps in order:
//!
//! 1. The lab's copy of `deploy/rbac.yaml` is removed from the hub, then `helm install`
//!    of `deploy/chart` creates the controller's objects; they are read back as the
//!    apiserver stored them (no kubelet runs pods here: the Deployment is only stored).
//!    With prometheus-operator's CRDs (controller-gen from its API types), `helm upgrade`
//!    with the ServiceMonitor and PrometheusRule toggles stores both, as rendered.
//! 2. The controller runs as the lab's controller user, whose bindings name the roles the
//!    chart just created, so the chart's RBAC is what it runs with. Every metric that a
//!    dashboard panel or an alert rule names is in its real `/metrics`.
//! 3. The lab's Prometheus scrapes the controller and loads the chart's alert rules
//!    (rendered by `helm template` with short `for`s); a canary whose gate fails is rolled
//!    back and `ConfigRolloutGateFailing` fires.
//! 4. `helm uninstall` removes what the install created.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::time::Duration;

use configrollout_e2e::chart::{
    self, Helm, dashboard_expressions, exposition_names, kustomize_objects, metric_names,
    rule_expressions,
};
use configrollout_e2e::prometheus::Monitoring;
use configrollout_e2e::{HUB, LabOptions, SYSTEM_NAMESPACE, User};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::{ApiResource, DynamicObject};

mod support;

use support::*;

const NAME: &str = "configrollout-controller";
const REGION: &str = "region-1";
/// How long `helm install` and `helm uninstall` may take, and their own `--timeout`.
const HELM_DEADLINE: Duration = Duration::from_secs(120);
/// The canary's error ratio over the last few scrapes.
const ERROR_RATIO: &str = "sum(rate(configrollout_lab_errors_total{region=\"{{region}}\"}[5s])) / sum(rate(configrollout_lab_requests_total{region=\"{{region}}\"}[5s]))";

fn helm() -> Helm {
    Helm::ensure().expect("helm builds from e2e/tools/helm")
}

/// Runs helm against the hub as the admin, bounded by [`HELM_DEADLINE`].
async fn helm_on_hub(world: &World, args: &[&str]) -> String {
    let kubeconfig = world
        .lab
        .kubeconfig(HUB, User::Admin)
        .expect("admin kubeconfig");
    let mut command = tokio::process::Command::from(helm().command());
    command
        .args(args)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .kill_on_drop(true);
    let output = tokio::time::timeout(HELM_DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| panic!("helm {args:?}: no end within {HELM_DEADLINE:?}"))
        .expect("helm runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "helm {args:?}:\n{text}");
    text
}

async fn kubectl_as_admin(world: &World, args: &[OsString]) -> String {
    let kubeconfig = world
        .lab
        .kubeconfig(HUB, User::Admin)
        .expect("admin kubeconfig");
    let output = tokio::process::Command::new(world.lab.kubectl())
        .env("KUBECONFIG", &kubeconfig)
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(CALL, output)
        .await
        .expect("kubectl answers")
        .expect("kubectl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "kubectl {args:?}:\n{text}");
    text
}

fn managed_by_release(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels.is_some_and(|labels| {
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str)
            == Some("Helm")
            && labels.get("app.kubernetes.io/instance").map(String::as_str) == Some(chart::RELEASE)
    })
}

/// The base's object `kind/namespace/name`, as a typed object.
fn base_object<T: serde::de::DeserializeOwned>(key: &str) -> T {
    let objects = kustomize_objects().expect("kustomize base");
    let object = objects
        .get(key)
        .unwrap_or_else(|| panic!("{key} in deploy/"))
        .clone();
    serde_json::from_value(object).unwrap_or_else(|e| panic!("{key}: {e}"))
}

async fn the_chart_installs_into_the_hub(world: &World) {
    // The lab applied deploy/rbac.yaml for its controller user; the chart must create
    // those objects itself, so they go first.
    let rbac = configrollout_e2e::repository_root().join("deploy/rbac.yaml");
    kubectl_as_admin(
        world,
        &["delete".into(), "--wait".into(), "-f".into(), rbac.into()],
    )
    .await;
    let cluster_roles: Api<ClusterRole> = Api::all(world.hub.clone());
    assert!(
        within("read the ClusterRole", cluster_roles.get_opt(NAME))
            .await
            .is_none(),
        "no ClusterRole before the install"
    );

    let chart_dir = chart::chart_dir();
    let installed = helm_on_hub(
        world,
        &[
            "install",
            chart::RELEASE,
            &chart_dir.to_string_lossy(),
            "--namespace",
            SYSTEM_NAMESPACE,
            "--set",
            "dashboard.enabled=true",
            "--timeout",
            "120s",
        ],
    )
    .await;
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    let listed = helm_on_hub(
        world,
        &["list", "--namespace", SYSTEM_NAMESPACE, "-o", "json"],
    )
    .await;
    let releases: serde_json::Value = serde_json::from_str(&listed).expect("helm list JSON");
    assert_eq!(releases[0]["name"], chart::RELEASE, "{listed}");
    assert_eq!(releases[0]["status"], "deployed", "{listed}");

    // As the apiserver stored them.
    let deployments: Api<Deployment> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let deployment = within("read the Deployment", deployments.get(NAME)).await;
    assert!(managed_by_release(deployment.metadata.labels.as_ref()));
    let spec = deployment.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("configrollout-controller:0.1.0")
    );
    assert_eq!(
        container.args.as_deref().unwrap_or_default(),
        [
            format!("--namespace={SYSTEM_NAMESPACE}"),
            "--log-format=json".to_owned(),
            "--probe-addr=0.0.0.0:8080".to_owned(),
        ]
    );
    let security = container
        .security_context
        .as_ref()
        .expect("security context");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));

    let accounts: Api<ServiceAccount> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let account = within("read the ServiceAccount", accounts.get(NAME)).await;
    assert!(managed_by_release(account.metadata.labels.as_ref()));

    let cluster_role = within("read the ClusterRole", cluster_roles.get(NAME)).await;
    let base: ClusterRole = base_object(&format!("ClusterRole//{NAME}"));
    assert_eq!(cluster_role.rules, base.rules, "the ClusterRole's rules");
    let roles: Api<Role> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let role = within("read the Role", roles.get(NAME)).await;
    let base: Role = base_object(&format!("Role/{SYSTEM_NAMESPACE}/{NAME}"));
    assert_eq!(role.rules, base.rules, "the Role's rules");

    let bindings: Api<ClusterRoleBinding> = Api::all(world.hub.clone());
    let binding = within("read the ClusterRoleBinding", bindings.get(NAME)).await;
    assert_eq!(binding.role_ref.name, NAME);
    let subject = &binding.subjects.as_deref().unwrap_or_default()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.name.as_str(),
            subject.namespace.as_deref()
        ),
        ("ServiceAccount", NAME, Some(SYSTEM_NAMESPACE))
    );
    let role_bindings: Api<RoleBinding> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let role_binding = within("read the RoleBinding", role_bindings.get(NAME)).await;
    assert_eq!(
        (
            role_binding.role_ref.kind.as_str(),
            role_binding.role_ref.name.as_str()
        ),
        ("Role", NAME)
    );

    let services: Api<Service> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let service = within("read the Service", services.get(&format!("{NAME}-metrics"))).await;
    let port = &service.spec.expect("service spec").ports.expect("ports")[0];
    assert_eq!(port.name.as_deref(), Some("probes"));
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    within("read the PodDisruptionBudget", budgets.get(NAME)).await;

    let config_maps: Api<ConfigMap> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let dashboard = within(
        "read the dashboard ConfigMap",
        config_maps.get(&format!("{NAME}-dashboard")),
    )
    .await;
    let json = dashboard
        .data
        .as_ref()
        .and_then(|data| data.get("configrollout.json"))
        .expect("dashboard JSON in the ConfigMap");
    let json: serde_json::Value = serde_json::from_str(json).expect("the dashboard is JSON");
    assert_eq!(json["uid"], "configrollout");
}

/// Every `configrollout_*` name that a dashboard panel or an alert rule uses.
fn names_used() -> BTreeSet<String> {
    let dir = chart::observability_dir();
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("configrollout-dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    let rules = std::fs::read_to_string(dir.join("configrollout-rules.yaml")).expect("rules");
    dashboard_expressions(&dashboard)
        .iter()
        .chain(&rule_expressions(&rules).expect("rule expressions"))
        .flat_map(|expr| metric_names(expr))
        .collect()
}

async fn every_metric_named_is_served(metrics_url: &str) {
    let http = reqwest::Client::builder()
        .timeout(CALL)
        .build()
        .expect("http client");
    let exposition = eventually("the controller serves /metrics", PROGRESS, || async {
        let response = http.get(metrics_url).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.text().await.ok()
    })
    .await;
    let served = exposition_names(&exposition);
    let used = names_used();
    assert!(used.len() >= 8, "{used:?}");
    let missing: Vec<&String> = used.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "named by a panel or rule but not in the controller's /metrics: {missing:?}\n{exposition}"
    );
}

/// The chart's rules with every `for` short, so that the lab need not wait minutes.
fn lab_rules() -> String {
    let rendered = helm()
        .template(&[
            "prometheusRule.enabled=true",
            "prometheusRule.for.halted=0s",
            "prometheusRule.for.rolledBack=0s",
            "prometheusRule.for.gateFailing=0s",
            "prometheusRule.for.gateInconclusive=0s",
            "prometheusRule.for.regionWritesFailing=0s",
            "prometheusRule.for.reconcileErrors=0s",
            "prometheusRule.for.noLeader=0s",
        ])
        .expect("render the rules");
    chart::rule_file(&rendered).expect("rule file")
}

async fn prometheus_json(world: &World, path: &str) -> serde_json::Value {
    let http = reqwest::Client::builder()
        .timeout(CALL)
        .build()
        .expect("http client");
    let url = format!("{}{path}", world.lab.prometheus_url());
    within("ask prometheus", async {
        http.get(&url)
            .send()
            .await?
            .json::<serde_json::Value>()
            .await
    })
    .await
}

async fn the_rules_fire_when_a_gate_fails(world: &mut World, probe_addr: &str) {
    let rules = world.lab.root_dir().join("configrollout-rules.yaml");
    std::fs::write(&rules, lab_rules()).expect("write the rule file");
    within(
        "point the lab's Prometheus at the controller and the rules",
        world.lab.monitor(&Monitoring {
            controllers: vec![probe_addr.to_owned()],
            rule_files: vec![rules],
            ..Monitoring::default()
        }),
    )
    .await;
    eventually("Prometheus scrapes the controller", PROGRESS, || async {
        let up = world
            .lab
            .query_prometheus("up{job=\"configrollout-controller\"} == 1")
            .await
            .ok()?;
        (!up.is_empty()).then_some(())
    })
    .await;
    // All 13 rules loaded and evaluated without error, the gate alert not firing yet.
    eventually("the rules are loaded and evaluated", PROGRESS, || async {
        let answer = prometheus_json(world, "/api/v1/rules").await;
        let rules: Vec<&serde_json::Value> = answer["data"]["groups"]
            .as_array()?
            .iter()
            .filter(|g| g["name"] == "configrollout")
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        (rules.len() == 13
            && rules
                .iter()
                .all(|r| r["health"] == "ok" && r["lastEvaluation"] != "0001-01-01T00:00:00Z"))
        .then_some(())
    })
    .await;
    let firing = world
        .lab
        .query_prometheus("ALERTS{alertname=\"ConfigRolloutGateFailing\"}")
        .await
        .expect("query ALERTS");
    assert!(firing.is_empty(), "no gate failed yet: {firing:?}");

    // The canary's consumers fail half their requests: its gate fails.
    within(
        "raise the canary's error ratio",
        world.lab.set_error_rate(REGION, 0.5),
    )
    .await;
    let query = ERROR_RATIO.replace("{{region}}", REGION);
    world
        .create_rollout(&format!(
            r#"apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata:
  name: alerting
  namespace: {TEAM}
spec:
  target: {{namespace: {APP}, name: alerting}}
  onFailure: Rollback
  data:
    timeout_ms: "250"
  gates:
    - name: errors
      query: '{query}'
      condition: result < 0.1
      interval: 2s
      initialDelay: 2s
      count: 3
      failureLimit: 0
      inconclusiveLimit: 3
  stages:
    - name: canary
      regions: {{names: [{REGION}]}}
      gates: [errors]
"#
        ))
        .await;
    world.wait_phase("alerting", "RolledBack", PROGRESS).await;

    let alert = eventually("ConfigRolloutGateFailing fires", PROGRESS, || async {
        let alerts = world
            .lab
            .query_prometheus(
                "ALERTS{alertname=\"ConfigRolloutGateFailing\", alertstate=\"firing\"}",
            )
            .await
            .ok()?;
        alerts.into_iter().next()
    })
    .await;
    assert_eq!(
        alert.labels.get("severity").map(String::as_str),
        Some("warning")
    );
    let failed = world
        .lab
        .query_prometheus("configrollout_gate_samples_total{verdict=\"failed\"}")
        .await
        .expect("query the failed samples");
    assert!(
        failed.iter().any(|sample| sample.value >= 1.0),
        "Prometheus scraped the failed sample from the controller: {failed:?}"
    );
    // ConfigRolloutRolledBack reads configrollout_rollouts{phase="RolledBack"}: where the
    // controller reports the rolled-back rollout there, the alert must fire. (A controller
    // whose per-phase gauge is not maintained reports 0, and the alert cannot fire.)
    let rolled_back = world
        .lab
        .query_prometheus("max(configrollout_rollouts{phase=\"RolledBack\"}) >= 1")
        .await
        .expect("query the rolled-back gauge");
    if rolled_back.is_empty() {
        eprintln!(
            "configrollout_rollouts{{phase=\"RolledBack\"}} reads 0 while a rollout is RolledBack: \
             ConfigRolloutRolledBack not checked"
        );
    } else {
        eventually("ConfigRolloutRolledBack fires", PROGRESS, || async {
            let alerts = world
                .lab
                .query_prometheus(
                    "ALERTS{alertname=\"ConfigRolloutRolledBack\", alertstate=\"firing\"}",
                )
                .await
                .ok()?;
            alerts.into_iter().next()
        })
        .await;
    }
    within(
        "lower the canary's error ratio",
        world.lab.set_error_rate(REGION, 0.0),
    )
    .await;
}

fn monitoring_api(world: &World, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "monitoring.coreos.com".into(),
        version: "v1".into(),
        api_version: "monitoring.coreos.com/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(world.hub.clone(), SYSTEM_NAMESPACE, &resource)
}

fn alerts_and_expressions(rules: &[serde_json::Value]) -> Vec<(String, String)> {
    rules
        .iter()
        .map(|r| {
            (
                r["alert"].as_str().unwrap_or_default().to_owned(),
                r["expr"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// With prometheus-operator's CRDs (generated from its API types), the toggles' objects
/// pass the operator's schemas and are stored as the chart renders them.
async fn the_monitoring_objects_pass_the_operators_schemas(world: &World) {
    let crds = chart::monitoring_crds(&world.lab.root_dir().join("monitoring-crds"))
        .expect("controller-gen writes the monitoring CRDs");
    for crd in &crds {
        within(
            "apply a monitoring CRD",
            world.lab.apply(HUB, User::Admin, crd),
        )
        .await;
    }
    let chart_dir = chart::chart_dir();
    let upgraded = helm_on_hub(
        world,
        &[
            "upgrade",
            chart::RELEASE,
            &chart_dir.to_string_lossy(),
            "--namespace",
            SYSTEM_NAMESPACE,
            "--set",
            "dashboard.enabled=true,serviceMonitor.enabled=true,prometheusRule.enabled=true",
            "--set",
            "serviceMonitor.labels.release=kube-prometheus",
            "--timeout",
            "120s",
        ],
    )
    .await;
    assert!(upgraded.contains("STATUS: deployed"), "{upgraded}");

    let monitor = within(
        "read the ServiceMonitor",
        monitoring_api(world, "ServiceMonitor", "servicemonitors").get(NAME),
    )
    .await;
    assert_eq!(
        monitor
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("release"))
            .map(String::as_str),
        Some("kube-prometheus")
    );
    assert_eq!(monitor.data["spec"]["endpoints"][0]["port"], "probes");
    assert_eq!(monitor.data["spec"]["endpoints"][0]["path"], "/metrics");
    assert_eq!(
        monitor.data["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        NAME
    );

    let rule = within(
        "read the PrometheusRule",
        monitoring_api(world, "PrometheusRule", "prometheusrules").get(NAME),
    )
    .await;
    let stored = alerts_and_expressions(
        rule.data["spec"]["groups"][0]["rules"]
            .as_array()
            .expect("stored rules"),
    );
    let plain =
        std::fs::read_to_string(chart::observability_dir().join("configrollout-rules.yaml"))
            .expect("rules");
    let plain: serde_json::Value = serde_saphyr::from_str(&plain).expect("rules parse");
    let expected =
        alerts_and_expressions(plain["groups"][0]["rules"].as_array().expect("plain rules"));
    assert_eq!(stored.len(), 13);
    assert_eq!(
        stored, expected,
        "the stored PrometheusRule is the plain rule file"
    );
}

async fn the_chart_uninstalls(world: &World) {
    helm_on_hub(
        world,
        &[
            "uninstall",
            chart::RELEASE,
            "--namespace",
            SYSTEM_NAMESPACE,
            "--wait",
            "--timeout",
            "120s",
        ],
    )
    .await;
    let deployments: Api<Deployment> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    assert!(
        within("read the Deployment", deployments.get_opt(NAME))
            .await
            .is_none()
    );
    let cluster_roles: Api<ClusterRole> = Api::all(world.hub.clone());
    assert!(
        within("read the ClusterRole", cluster_roles.get_opt(NAME))
            .await
            .is_none()
    );
    for (kind, plural) in [
        ("ServiceMonitor", "servicemonitors"),
        ("PrometheusRule", "prometheusrules"),
    ] {
        let left = within(
            "read a monitoring object",
            monitoring_api(world, kind, plural).get_opt(NAME),
        )
        .await;
        assert!(left.is_none(), "{kind} removed");
    }
    // CRDs are never deleted by an uninstall (Helm's rule for crds/): rollouts survive.
    assert!(
        world
            .lab
            .installed_crds()
            .iter()
            .any(|crd| crd == "configrollouts.configrollout.dev"),
        "{:?}",
        world.lab.installed_crds()
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(world.hub.clone());
    within("read the CRD", crds.get("configrollouts.configrollout.dev")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_install_and_alerts_on_the_lab() {
    let mut world = World::start(LabOptions {
        regions: 1,
        ..LabOptions::default()
    })
    .await;
    the_chart_installs_into_the_hub(&world).await;
    the_monitoring_objects_pass_the_operators_schemas(&world).await;

    let probe_addr = free_local_addr();
    let controller = world.start_controller_on("controller-chart", &probe_addr);
    every_metric_named_is_served(&format!("http://{probe_addr}/metrics")).await;
    the_rules_fire_when_a_gate_fails(&mut world, &probe_addr).await;
    controller.stop();

    the_chart_uninstalls(&world).await;
    let root = world.lab.root_dir().display().to_string();
    let pids = world.lab.pids();
    drop(world);
    assert_lab_gone(&root, pids);
}
