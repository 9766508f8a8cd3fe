//! Gate and activation queries are parsed as PromQL (rendered with sample values first),
//! so a typo is `InvalidSpec` before any region is written, and `lint` says so offline.

use configrollout_api::ConfigRolloutSpec;
use configrollout_core::engine::validate;

fn spec(gate_query: &str, activation_query: &str) -> ConfigRolloutSpec {
    let yaml = format!(
        r#"
target: {{namespace: app, name: app-config}}
data: {{timeout_ms: "300"}}
stages:
  - name: canary
    regions: {{names: [region-1]}}
    gates: [errors]
gates:
  - name: errors
    query: '{gate_query}'
    condition: result < 0.01
consumers:
  - kind: Deployment
    name: app
    activationQuery: '{activation_query}'
"#
    );
    serde_saphyr::from_str(&yaml).expect("spec YAML")
}

const ACTIVATION: &str =
    r#"count(app_config_revision{region="{{region}}", revision="{{revision}}"})"#;

fn problems(gate_query: &str, activation_query: &str) -> Vec<(String, String)> {
    validate(&spec(gate_query, activation_query))
        .into_iter()
        .map(|error| (error.field, error.message))
        .collect()
}

#[test]
fn instant_queries_with_placeholders_are_valid() {
    for query in [
        r#"sum(rate(errors_total{region="{{region}}"}[5m])) / sum(rate(requests_total{region="{{ region }}"}[5m]))"#,
        r#"max by (stage) (latency_seconds{stage="{{stage}}", revision="{{revision}}"})"#,
        "vector(0)",
        "1",
        "up",
    ] {
        assert_eq!(problems(query, ACTIVATION), Vec::new(), "{query}");
    }
}

#[test]
fn unparsable_queries_name_the_field() {
    let found = problems(
        r#"sum(rate(errors_total{region="{{region}}"}[5m])"#,
        ACTIVATION,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "spec.gates[0].query");
    assert!(found[0].1.starts_with("not valid PromQL: "), "{found:?}");

    let found = problems("up", "count(app_config_revision{region=})");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "spec.consumers[0].activationQuery");
    assert!(found[0].1.starts_with("not valid PromQL: "), "{found:?}");
}

#[test]
fn range_vectors_and_strings_are_refused() {
    let found = problems(r#"errors_total{region="{{region}}"}[5m]"#, ACTIVATION);
    assert_eq!(
        found,
        vec![(
            "spec.gates[0].query".to_owned(),
            "is a range vector (such as `x[5m]`): a gate needs an instant vector or a scalar, \
             e.g. `rate(x[5m])`"
                .to_owned()
        )]
    );
    let found = problems(r#""{{region}}""#, ACTIVATION);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].1.starts_with("is a string"), "{found:?}");
}

#[test]
fn a_placeholder_error_is_reported_once_not_also_as_promql() {
    let found = problems(r#"up{region="{{regoin}}"}"#, ACTIVATION);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].1.contains("unknown placeholder"), "{found:?}");
}

#[test]
fn placeholder_values_cannot_break_out_of_their_literal() {
    // Placeholders belong inside quoted label values; one outside a literal renders to a
    // bare name that is not a label matcher value, and the query is refused up front.
    let found = problems("up{region={{region}}}", ACTIVATION);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].1.starts_with("not valid PromQL: "), "{found:?}");
}
