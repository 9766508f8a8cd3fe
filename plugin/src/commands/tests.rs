use super::lint::{LintReport, Schemas, lint_text, lint_with};

const VALID: &str = "\
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata:
  name: app
spec:
  target: {namespace: app, name: app-config}
  data: {timeout_ms: \"300\"}
  stages:
    - name: canary
      regions: {names: [region-1]}
      gates: [errors]
  gates:
    - name: errors
      query: sum(rate(errors_total{region=\"{{region}}\"}[1m]))
      condition: result < 0.01
";

#[test]
fn a_valid_rollout_passes() {
    let report = lint_text(VALID);
    assert_eq!(
        report,
        LintReport {
            ok: true,
            lines: vec!["configrollout app: valid".to_owned()],
        }
    );
}

#[test]
fn errors_name_the_field() {
    let text = VALID
        .replace("result < 0.01", "result <<< 0.01")
        .replace("gates: [errors]", "gates: [errors, latency]");
    let report = lint_text(&text);
    assert!(!report.ok);
    assert!(
        report
            .lines
            .iter()
            .any(|line| line.starts_with("configrollout app: spec.gates[0].condition: ")),
        "{report:?}"
    );
    assert!(
        report
            .lines
            .iter()
            .any(|line| line.contains("spec.stages[0].gates: gate `latency` is not declared")),
        "{report:?}"
    );
}

#[test]
fn gate_queries_are_parsed_as_promql() {
    let report = lint_text(&VALID.replace("[1m]))", "[1m])"));
    assert!(!report.ok);
    assert_eq!(report.lines.len(), 1, "{report:?}");
    assert!(
        report.lines[0].starts_with("configrollout app: spec.gates[0].query: not valid PromQL"),
        "{report:?}"
    );
    let report = lint_text(&VALID.replace(
        "sum(rate(errors_total{region=\"{{region}}\"}[1m]))",
        "errors_total[1m]",
    ));
    assert!(!report.ok);
    assert!(report.lines[0].contains("is a range vector"), "{report:?}");
}

#[test]
fn a_value_kubectl_reads_as_a_boolean_is_refused_and_bad_yaml_names_its_line() {
    // kubectl (sigs.k8s.io/yaml) reads YAML 1.1: `no` is false, which a ConfigMap
    // value cannot hold; lint says so before the apply does.
    let report = lint_text(&VALID.replace("timeout_ms: \"300\"", "enabled: no"));
    assert!(!report.ok);
    assert!(
        report.lines[0].starts_with("document 1: ") && report.lines[0].contains("boolean"),
        "{report:?}"
    );
    let report = lint_text(&VALID.replace("  stages:\n", "  stages: [\n"));
    assert!(!report.ok);
    assert!(report.lines[0].starts_with("not YAML: "), "{report:?}");
    assert!(report.lines[0].contains("line"), "{report:?}");
}

#[test]
fn other_kinds_and_unparsable_specs_are_refused() {
    let report = lint_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n");
    assert!(!report.ok);
    assert!(
        report.lines[0].contains("is not a ConfigRollout"),
        "{report:?}"
    );

    let report = lint_text(&VALID.replace("      regions: {names: [region-1]}\n", ""));
    assert!(!report.ok);
    assert!(report.lines[0].contains("regions"), "{report:?}");

    let report = lint_text(&VALID.replace("  data: {timeout_ms: \"300\"}\n", ""));
    assert!(!report.ok);
    assert!(
        report.lines[0].contains("set exactly one of spec.data or spec.fromConfigMap"),
        "{report:?}"
    );

    assert!(!lint_text("").ok);
}

#[test]
fn every_document_is_checked() {
    let second = VALID
        .replace("name: app\n", "name: other\n")
        .replace("result < 0.01", "result <<< 0.01");
    let report = lint_text(&format!("{VALID}---\n{second}"));
    assert!(!report.ok);
    assert_eq!(report.lines[0], "configrollout app: valid");
    assert!(
        report.lines[1..]
            .iter()
            .any(|line| line.starts_with("configrollout other: spec.gates[0]")),
        "{report:?}"
    );
}

const SCHEMA: &str = "\
apiVersion: configrollout.dev/v1alpha1
kind: ConfigSchema
metadata: {name: timeouts}
spec:
  keys:
    - {name: timeout_ms, type: Integer, required: true, minimum: 1, maximum: 1000}
  validators: [capacity]
";

const ERROR_RATIO: &str = "\
apiVersion: configrollout.dev/v1alpha1
kind: ClusterGateTemplate
metadata: {name: error-ratio}
spec:
  args:
    - {name: service}
    - {name: threshold, type: Number, default: \"0.05\"}
  prometheus:
    query: sum(rate(errors{service=\"{{args.service}}\",region=\"{{region}}\"}[5m]))
    condition: result < {{args.threshold}}
";

#[test]
fn lint_resolves_template_gates_from_the_file_or_says_where_it_looked() {
    let gated = VALID
        .replace(
            "      query: sum(rate(errors_total{region=\"{{region}}\"}[1m]))\n",
            "      template: {name: error-ratio, args: {service: checkout}}\n",
        )
        .replace("      condition: result < 0.01\n", "");
    assert!(gated.contains("error-ratio") && !gated.contains("condition"));
    let report = lint_text(&format!("{ERROR_RATIO}---\n{gated}"));
    assert!(report.ok, "{report:?}");

    let typo = gated.replace("service: checkout", "servce: checkout");
    let report = lint_text(&format!("{ERROR_RATIO}---\n{typo}"));
    assert!(!report.ok);
    assert!(
        report.lines.iter().any(|line| line.contains(
            "spec.gates[0].template.args.servce: ClusterGateTemplate error-ratio declares no arg servce"
        )),
        "{report:?}"
    );

    let broken = ERROR_RATIO.replace("[5m]))", "[5m]");
    let report = lint_text(&format!("{broken}---\n{gated}"));
    assert!(!report.ok);
    assert!(
        report.lines.iter().any(
            |line| line.contains("spec.gates[0].template (prometheus.query): not valid PromQL")
        ),
        "{report:?}"
    );

    let report = lint_text(&gated);
    assert!(!report.ok);
    assert!(
        report.lines.iter().any(|line| line.contains(
            "ClusterGateTemplate error-ratio not found (not in the file, a --schema file, nor read with --from-hub)"
        )),
        "{report:?}"
    );
}

#[test]
fn lint_checks_values_against_the_schemas_the_rollout_names() {
    let named = VALID.replace("spec:\n", "spec:\n  schemas: [{name: timeouts}]\n");
    // The schema in the linted file itself.
    let report = lint_text(&format!("{SCHEMA}---\n{named}"));
    assert!(report.ok, "{report:?}");
    assert!(
        report.lines.contains(
            &"configrollout app: not called offline: ClusterConfigValidator capacity".to_owned()
        ),
        "{report:?}"
    );

    let bad = named.replace("timeout_ms: \"300\"", "timeout_ms: \"SENTINEL-lint-5000\"");
    let report = lint_text(&format!("{SCHEMA}---\n{bad}"));
    assert!(!report.ok);
    let refusal = report
        .lines
        .iter()
        .find(|line| line.contains("ConfigSchema timeouts: key `timeout_ms`"))
        .unwrap_or_else(|| panic!("{report:?}"));
    assert!(!refusal.contains("SENTINEL"), "no value quoted: {refusal}");

    // Given with --schema rather than in the file.
    let mut schemas = Schemas::default();
    assert_eq!(schemas.add_file(SCHEMA), Vec::<String>::new());
    assert!(!lint_with(&bad, schemas).ok);

    // Named but given nowhere: said, and not valid.
    let report = lint_text(&named);
    assert!(!report.ok);
    assert!(
        report.lines.iter().any(|line| line.contains(
            "spec.schemas[0]: ConfigSchema timeouts is not in the file nor in a --schema file"
        )),
        "{report:?}"
    );
}

#[test]
fn a_cluster_schema_applies_to_every_rollout_and_source_values_are_not_checked_offline() {
    let cluster = "\
apiVersion: configrollout.dev/v1alpha1
kind: ClusterConfigSchema
metadata: {name: org}
spec:
  forbiddenKeys: [timeout_ms]
";
    let mut schemas = Schemas::default();
    assert!(schemas.add_file(cluster).is_empty());
    let report = lint_with(VALID, schemas);
    assert!(!report.ok);
    assert!(
        report
            .lines
            .iter()
            .any(|line| line.contains("ClusterConfigSchema org: key `timeout_ms`: forbiddenKeys")),
        "{report:?}"
    );

    let sourced = VALID.replace(
        "  data: {timeout_ms: \"300\"}\n",
        "  fromConfigMap: {name: src}\n",
    );
    let mut schemas = Schemas::default();
    assert!(schemas.add_file(cluster).is_empty());
    let report = lint_with(&sourced, schemas);
    assert!(report.ok, "{report:?}");
    assert!(
        report
            .lines
            .iter()
            .any(|line| line.contains("values not checked offline")),
        "{report:?}"
    );

    // A schema that does not compile is named with its field.
    let broken = SCHEMA.replace(
        "type: Integer, required: true, minimum: 1, maximum: 1000",
        "type: String, pattern: \"(\"",
    );
    let mut schemas = Schemas::default();
    assert!(schemas.add_file(&broken).is_empty());
    let named = VALID.replace("spec:\n", "spec:\n  schemas: [{name: timeouts}]\n");
    let report = lint_with(&named, schemas);
    assert!(
        report
            .lines
            .iter()
            .any(|line| line.contains("ConfigSchema timeouts is invalid: spec.keys[0].pattern")),
        "{report:?}"
    );
}
