use super::lint::{LintReport, lint_text};

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
