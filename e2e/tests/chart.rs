//! The Helm chart (`deploy/chart`) without a cluster: `helm lint`, `helm template`, the
//! values schema, agreement with the kustomize base object by object, the files generated
//! from it, and the alert rules under `promtool`. Helm 4 is built from Go modules
//! (`e2e/tools/helm`) and cached, like the lab's programs; Helm 3 (`e2e/tools/helm3`)
//! lints the chart and renders it too, and must render what Helm 4 does.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use configrollout::app::Options;

use configrollout_e2e::chart::{
    self, Helm, dashboard_expressions, generated_files, kustomize_objects, metric_names,
    one_of_kind, rendered_objects, rule_expressions,
};
use configrollout_e2e::repository_root;
use serde_json::Value;

fn helm() -> &'static Helm {
    static HELM: OnceLock<Helm> = OnceLock::new();
    HELM.get_or_init(|| Helm::ensure().expect("helm builds from e2e/tools/helm"))
}

fn helm3() -> &'static Helm {
    static HELM3: OnceLock<Helm> = OnceLock::new();
    HELM3.get_or_init(|| Helm::ensure_v3().expect("helm 3 builds from e2e/tools/helm3"))
}

fn render(sets: &[&str]) -> String {
    helm()
        .template(sets)
        .unwrap_or_else(|e| panic!("helm template {sets:?}: {e}"))
}

fn deployment(sets: &[&str]) -> Value {
    one_of_kind(&render(sets), "Deployment").expect("one Deployment")
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn args(deployment: &Value) -> Vec<String> {
    container(deployment)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_owned())
        .collect()
}

#[test]
fn helm_lint_passes_with_defaults_and_every_toggle() {
    let dir = chart::chart_dir();
    let dir = dir.to_string_lossy();
    helm()
        .run(["lint", "--strict", &dir])
        .expect("helm lint with the default values");
    helm()
        .run([
            "lint",
            "--strict",
            &dir,
            "--set",
            "serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboard.enabled=true",
        ])
        .expect("helm lint with the ServiceMonitor, PrometheusRule and dashboard");
}

/// The chart serves Helm 3 and Helm 4 alike: Helm 3 lints it strictly, and renders,
/// with the defaults and with every toggle, exactly what Helm 4 renders (which the other
/// tests check).
#[test]
fn helm_3_lints_the_chart_and_renders_what_helm_4_renders() {
    let dir = chart::chart_dir();
    let toggles = "serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboard.enabled=true";
    helm3()
        .run(["lint", "--strict", &dir.to_string_lossy(), "--set", toggles])
        .expect("helm 3 lint with the ServiceMonitor, PrometheusRule and dashboard");
    for sets in [&[][..], &[toggles][..]] {
        let by_helm3 = helm3()
            .template(sets)
            .unwrap_or_else(|e| panic!("helm 3 template {sets:?}: {e}"));
        // Object by object, labels included: Helm 4 only adds a blank line before each
        // `---`.
        let by_helm3 = chart::documents(&by_helm3).expect("helm 3's documents");
        let by_helm4 = chart::documents(&render(sets)).expect("helm 4's documents");
        assert!(by_helm4.len() >= 8, "{} objects", by_helm4.len());
        assert!(
            by_helm3 == by_helm4,
            "helm 3 and helm 4 render {sets:?} differently"
        );
    }
}

/// `kubeVersion` holds the hub to the Kubernetes the CRDs need (selectable fields, GA in
/// 1.32), under either Helm.
#[test]
fn the_chart_requires_the_hubs_minimum_kubernetes() {
    let dir = chart::chart_dir();
    let dir = dir.to_string_lossy();
    for (name, helm) in [("helm 4", helm()), ("helm 3", helm3())] {
        let at = |version: &str| {
            helm.run(["template", "configrollout", &dir, "--kube-version", version])
        };
        at("v1.32.0").unwrap_or_else(|e| panic!("{name} on Kubernetes 1.32: {e}"));
        let refused = at("v1.31.14")
            .expect_err("Kubernetes 1.31 is refused")
            .to_string();
        assert!(
            refused.contains("chart requires kubeVersion: >=1.32.0-0"),
            "{name}: {refused}"
        );
    }
}

#[test]
fn default_render_is_the_kustomize_base_object_by_object() {
    let rendered = rendered_objects(&render(&[])).expect("rendered objects");
    let mut base = kustomize_objects().expect("kustomize base");
    // The chart installs into the release namespace (`-n configrollout-system
    // --create-namespace`); it does not own the Namespace.
    let namespace = base
        .remove("Namespace//configrollout-system")
        .expect("the base creates the namespace");
    assert_eq!(namespace["apiVersion"], "v1");
    let rendered_keys: Vec<&String> = rendered.keys().collect();
    let base_keys: Vec<&String> = base.keys().collect();
    assert_eq!(rendered_keys, base_keys, "the same objects");
    for (key, object) in &base {
        assert_eq!(
            &rendered[key], object,
            "{key}: the chart's default render differs from deploy/ (rendered left, base right)"
        );
    }
}

#[test]
fn schema_refuses_unknown_keys_and_wrong_types() {
    for (set, says) in [
        ("replicas=two", "/replicas"),
        ("replica=2", "additional properties 'replica' not allowed"),
        (
            "image.registry=x",
            "additional properties 'registry' not allowed",
        ),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("logFormat=xml", "/logFormat"),
        ("leaderElection.enabled=yes", "/leaderElection/enabled"),
        ("prometheusUrl=prometheus:9090", "/prometheusUrl"),
        ("gateSettleTime=a minute", "/gateSettleTime"),
        ("serviceMonitor.enabled=1", "/serviceMonitor/enabled"),
        ("minGateInterval=soon", "/minGateInterval"),
        (
            "prometheusLimits.maxSeries=-1",
            "/prometheusLimits/maxSeries",
        ),
        ("security.fourEyes=yes", "/security/fourEyes"),
        (
            "security.fourEye=true",
            "additional properties 'fourEye' not allowed",
        ),
        ("digestKeySecret=Not_A_Name", "/digestKeySecret"),
        (
            "prometheusRule.for.halted=soon",
            "/prometheusRule/for/halted",
        ),
        (
            "prometheusRule.for.other=1m",
            "additional properties 'other' not allowed",
        ),
    ] {
        let refused = helm()
            .template(&[set])
            .expect_err(&format!("{set} is refused"))
            .to_string();
        assert!(
            refused.contains("schema") && refused.contains(says),
            "{set}: {refused}"
        );
    }
}

#[test]
fn values_reach_the_deployment() {
    let deployment = deployment(&[
        "image.repository=registry.example/configrollout-controller",
        "image.tag=1.2.3",
        "image.pullPolicy=Always",
        "replicas=3",
        "resources.requests.cpu=100m",
        "resources.limits.memory=512Mi",
        "leaderElection.leaseDuration=20s",
        "prometheusUrl=http://prometheus.monitoring:9090",
        "gateSettleTime=2m",
        "logFormat=text",
        "imagePullSecrets[0]=regcred",
    ]);
    assert_eq!(deployment["spec"]["replicas"], 3);
    let container = container(&deployment);
    assert_eq!(
        container["image"],
        "registry.example/configrollout-controller:1.2.3"
    );
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(container["resources"]["requests"]["cpu"], "100m");
    assert_eq!(container["resources"]["limits"]["memory"], "512Mi");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["imagePullSecrets"][0]["name"],
        "regcred"
    );
    assert_eq!(
        args(&deployment),
        [
            "--namespace=configrollout-system",
            "--log-format=text",
            "--probe-addr=0.0.0.0:8080",
            "--lease-duration=20s",
            "--prometheus-url=http://prometheus.monitoring:9090",
            "--gate-settle-time=2m",
        ]
    );

    // The image tag defaults to the chart's appVersion.
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart::chart_dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    let default = deployment_image(&[]);
    assert_eq!(
        default,
        format!(
            "configrollout-controller:{}",
            chart["appVersion"].as_str().expect("appVersion")
        )
    );

    // Without leader election every replica leads: one replica only.
    let single = self::deployment(&["leaderElection.enabled=false", "replicas=1"]);
    assert!(args(&single).contains(&"--leader-election=false".to_owned()));
    let refused = helm()
        .template(&["leaderElection.enabled=false"])
        .expect_err("two leaders are refused")
        .to_string();
    assert!(refused.contains("set replicas to 1"), "{refused}");
}

/// Every flag of the controller's `--help` is set through a value (but the three the
/// chart fixes), and what the chart renders with every value set is a command line the
/// controller's own parser accepts, with the values given.
#[test]
fn every_controller_flag_can_be_set_through_the_chart() {
    let everything = [
        "leaderElection.leaseDuration=20s",
        "shards=4",
        "prometheusUrl=http://prometheus.monitoring:9090",
        "gateSettleTime=2m",
        "minGateInterval=10s",
        "prometheusLimits.maxResponseBytes=8388608",
        "prometheusLimits.maxSeries=250",
        "digestKeySecret=platform-digest-key",
        "logFormat=text",
        "logFilter=info\\,configrollout=debug",
        "security.fourEyes=true",
        "security.approverEnforcedExternally=true",
        "security.allowUnsafeKubeconfig=true",
        "security.acceptUnsignedStates=true",
    ];
    // Leader election off excludes shards above 1 and more than one replica.
    let single = ["leaderElection.enabled=false", "replicas=1"];
    let rendered = [args(&deployment(&everything)), args(&deployment(&single))];

    // Fixed by the chart: the pod's name (POD_NAME), the Lease its RBAC names, the port
    // its probes and Service use.
    let fixed_by_the_chart = ["identity", "lease-name", "probe-addr"];
    for flag in Options::documented_flags() {
        let set = rendered
            .iter()
            .flatten()
            .any(|arg| arg.starts_with(&format!("--{flag}=")));
        assert!(
            set || fixed_by_the_chart.contains(&flag.as_str()),
            "--{flag} cannot be set through the chart: add a value (values.yaml, \
             values.schema.json, templates/deployment.yaml, docs/install.md)"
        );
    }

    let parse = |args: &[String]| {
        Options::parse_args(
            std::iter::once("configrollout-controller".to_owned()).chain(args.iter().cloned()),
        )
        .unwrap_or_else(|e| panic!("the controller refuses the chart's {args:?}: {e}"))
    };
    let options = parse(&rendered[0]);
    assert_eq!(options.namespace, "configrollout-system");
    assert_eq!(options.lease_duration, Duration::from_secs(20));
    assert_eq!(options.shards, 4);
    assert_eq!(
        options.prometheus_url.as_deref(),
        Some("http://prometheus.monitoring:9090")
    );
    assert_eq!(options.gate_settle_time, Duration::from_secs(120));
    assert_eq!(options.min_gate_interval, Duration::from_secs(10));
    assert_eq!(options.prometheus_max_response_bytes, 8 * 1024 * 1024);
    assert_eq!(options.prometheus_max_series, 250);
    assert_eq!(options.digest_key_secret, "platform-digest-key");
    assert_eq!(options.log_filter, "info,configrollout=debug");
    assert!(options.four_eyes);
    assert!(options.approver_enforced_externally);
    assert!(options.allow_unsafe_kubeconfig);
    assert!(options.accept_unsigned_states);
    assert!(options.leader_election);
    assert!(!parse(&rendered[1]).leader_election);

    // The defaults leave every switch at the controller's own default.
    let defaults = parse(&args(&deployment(&[])));
    assert!(!defaults.four_eyes && !defaults.allow_unsafe_kubeconfig);
    assert_eq!(defaults.min_gate_interval, Duration::from_secs(1));
    assert_eq!(defaults.digest_key_secret, "configrollout-digest-key");
}

fn deployment_image(sets: &[&str]) -> String {
    container(&deployment(sets))["image"]
        .as_str()
        .expect("image")
        .to_owned()
}

#[test]
fn toggles_add_the_monitoring_objects() {
    let kinds = |sets: &[&str]| -> Vec<String> {
        chart::documents(&render(sets))
            .expect("documents")
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let defaults = kinds(&[]);
    for kind in ["ServiceMonitor", "PrometheusRule", "ConfigMap"] {
        assert!(!defaults.contains(&kind.to_owned()), "{kind} is opt-in");
    }
    let rendered = render(&[
        "serviceMonitor.enabled=true",
        "serviceMonitor.labels.release=kube-prometheus",
        "prometheusRule.enabled=true",
        "prometheusRule.for.awaitingApproval=3h",
        "dashboard.enabled=true",
    ]);
    let monitor = one_of_kind(&rendered, "ServiceMonitor").expect("ServiceMonitor");
    assert_eq!(monitor["metadata"]["labels"]["release"], "kube-prometheus");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "probes");
    // It selects the metrics Service by its labels and port name.
    let service = one_of_kind(&rendered, "Service").expect("Service");
    assert_eq!(service["spec"]["ports"][0]["name"], "probes");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector");
    for (key, value) in selector {
        assert_eq!(&service["metadata"]["labels"][key], value);
    }
    let rules = chart::rule_file(&rendered).expect("rules");
    assert!(rules.contains("for: 3h"), "{rules}");
    let dashboard = one_of_kind(&rendered, "ConfigMap").expect("dashboard ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: serde_json::Value = serde_json::from_str(
        dashboard["data"]["configrollout.json"]
            .as_str()
            .expect("dashboard JSON"),
    )
    .expect("the dashboard is JSON");
    assert_eq!(json["uid"], "configrollout");
}

#[test]
fn generated_files_are_fresh() {
    let mut stale = Vec::new();
    let files = generated_files(helm()).expect("generate");
    for (path, content) in &files {
        match std::fs::read_to_string(path) {
            Ok(committed) if committed == *content => {}
            Ok(_) => stale.push(format!("{} differs", path.display())),
            Err(e) => stale.push(format!("{}: {e}", path.display())),
        }
    }
    // Nothing in the chart's crds/ that crds/ does not have.
    for entry in std::fs::read_dir(chart::chart_dir().join("crds")).expect("chart crds/") {
        let path = entry.expect("entry").path();
        if !files.iter().any(|(p, _)| *p == path) {
            stale.push(format!("{} is not in crds/ (remove it)", path.display()));
        }
    }
    assert!(
        stale.is_empty(),
        "files generated from the chart are stale, run `make chart` and commit:\n  {}",
        stale.join("\n  ")
    );
}

fn promtool(args: &[&str], dir: &Path) -> String {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs (Debian's prometheus package, scripts/install-deps)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn promtool_checks_and_unit_tests_the_rules() {
    let dir = chart::observability_dir();
    let checked = promtool(&["check", "rules", "configrollout-rules.yaml"], &dir);
    assert!(checked.contains("SUCCESS: 13 rules found"), "{checked}");
    let tested = promtool(
        &["test", "rules", "tests/configrollout-rules.test.yaml"],
        &dir,
    );
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a unit test.
    let rules = std::fs::read_to_string(dir.join("configrollout-rules.yaml")).expect("rules");
    let tests = std::fs::read_to_string(dir.join("tests/configrollout-rules.test.yaml"))
        .expect("rule tests");
    let file: Value = serde_saphyr::from_str(&rules).expect("rules parse");
    for rule in file["groups"][0]["rules"].as_array().expect("rules") {
        let alert = rule["alert"].as_str().expect("alert name");
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert} has no unit test"
        );
    }
}

/// The names the dashboard and rules use; the lab test (`install.rs`) checks them
/// against the controller's real `/metrics`; this checks that there is something to
/// check and that every name is one the controller's source declares.
#[test]
fn dashboard_and_rules_name_controller_metrics() {
    let dir = chart::observability_dir();
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("configrollout-dashboard.json")).expect("dashboard"),
    )
    .expect("dashboard JSON");
    let expressions = dashboard_expressions(&dashboard);
    assert!(expressions.len() >= 10, "{expressions:?}");
    let rules = std::fs::read_to_string(dir.join("configrollout-rules.yaml")).expect("rules");
    let rule_exprs = rule_expressions(&rules).expect("rule expressions");
    assert_eq!(rule_exprs.len(), 13);
    let source = ["metrics.rs", "metrics/notification_metrics.rs"]
        .iter()
        .map(|file| {
            std::fs::read_to_string(
                repository_root()
                    .join("controller/src/telemetry")
                    .join(file),
            )
            .expect("metrics source")
        })
        .collect::<String>();
    for expr in expressions.iter().chain(&rule_exprs) {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{expr} names no configrollout metric");
        for name in names {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(&name);
            assert!(
                source.contains(&format!("\"{family}\"")),
                "{name} (in {expr}) is not declared in controller/src/telemetry/metrics{{.rs,/}}"
            );
        }
    }
    // Panels all read the data source the dashboard asks for on import.
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        }
    }
}

/// The kustomize overlay of the install guide (taken from `docs/install.md`, not copied)
/// sets the image and adds flags to the base, and the controller accepts the result.
#[test]
fn the_install_guides_kustomize_overlay_sets_the_image_and_flags() {
    let root = repository_root();
    let guide = std::fs::read_to_string(root.join("docs/install.md")).expect("docs/install.md");
    let block = guide
        .split("```yaml\n")
        .find(|block| block.starts_with("# kustomization.yaml of your overlay"))
        .and_then(|block| block.split("```").next())
        .expect("docs/install.md has the overlay block");
    let mut overlay: Value = serde_saphyr::from_str(block).expect("the overlay parses");
    // Its `resources` names where a reader keeps the repository; here, this checkout (a
    // relative path: kustomize refuses an absolute one), from a directory two below it.
    overlay["resources"] = Value::Array(vec![Value::String("../../../deploy".to_owned())]);
    let dir = root
        .join("e2e/.cache")
        .join(format!("overlay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("overlay dir");
    std::fs::write(
        dir.join("kustomization.yaml"),
        serde_saphyr::to_string(&overlay).expect("overlay"),
    )
    .expect("write the overlay");
    let kubectl = configrollout_e2e::gobuild::ensure_built()
        .expect("the lab's Go programs build")
        .path(configrollout_e2e::gobuild::KUBECTL);
    let output = Command::new(kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("kubectl kustomize runs");
    let _ = std::fs::remove_dir_all(&dir);
    let built = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let deployment = one_of_kind(&built, "Deployment").expect("one Deployment");
    assert_eq!(
        container(&deployment)["image"],
        "registry.example/configrollout-controller:0.1.0"
    );
    let args = args(&deployment);
    let options = Options::parse_args(
        std::iter::once("configrollout-controller".to_owned()).chain(args.iter().cloned()),
    )
    .unwrap_or_else(|e| panic!("the controller refuses the overlay's {args:?}: {e}"));
    assert_eq!(
        options.prometheus_url.as_deref(),
        Some("http://prometheus.monitoring:9090")
    );
    assert!(options.four_eyes);
}
