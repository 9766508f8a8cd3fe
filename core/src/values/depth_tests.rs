//! A schema nested as deep as the API lets a tenant write it must not overflow the
//! caller's stack: a stack overflow aborts the process, and with it every team's
//! reconciles. Each test runs on a thread with a runtime worker's 2 MiB stack.

use std::collections::BTreeMap;

use configrollout_api::{ConfigRule, ConfigSchemaSpec, KeyRule, ValueType};
use serde_json::json;

use super::*;

/// Runs `work` on a thread with the stack of a tokio worker.
fn on_worker_stack(work: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(work)
        .expect("thread")
        .join()
        .expect("no panic");
}

#[test]
fn a_rule_nested_past_the_bound_is_refused_not_parsed() {
    on_worker_stack(|| {
        for (open, close) in [("(", ")"), ("[", "]"), ("{1: ", "}")] {
            let rule = format!("{}true{} == true", open.repeat(1000), close.repeat(1000));
            let spec = ConfigSchemaSpec {
                rules: vec![ConfigRule {
                    rule: rule.chars().take(2048).collect(),
                    message: None,
                }],
                ..ConfigSchemaSpec::default()
            };
            let errors = compile(&spec).expect_err("refused");
            assert!(
                errors
                    .iter()
                    .any(|e| e.field == "spec.rules[0].rule" && e.message.contains("nested deeper")),
                "{errors:?}"
            );
        }
    });
}

#[test]
fn a_rule_nested_within_the_bound_compiles_and_runs_on_a_small_stack() {
    on_worker_stack(|| {
        let depth = cel_rules::MAX_RULE_NESTING;
        let rule = format!(
            "{}size(self) == 0{}",
            "(".repeat(depth - 1),
            ")".repeat(depth - 1)
        );
        let spec = ConfigSchemaSpec {
            rules: vec![ConfigRule {
                rule,
                message: None,
            }],
            ..ConfigSchemaSpec::default()
        };
        let compiled = compile(&spec).expect("compiles");
        assert!(compiled.check(&BTreeMap::new()).is_empty());
    });
}

#[test]
fn a_document_nested_to_the_parsers_limit_against_a_recursive_schema_is_checked() {
    on_worker_stack(|| {
        let schema = json!({
            "$ref": "#/$defs/node",
            "$defs": {"node": {
                "type": ["object", "integer"],
                "additionalProperties": {"$ref": "#/$defs/node"},
                "minimum": 5
            }}
        });
        let spec = ConfigSchemaSpec {
            keys: vec![KeyRule {
                name: "doc".into(),
                value_type: ValueType::Json,
                json_schema: Some(schema),
                ..KeyRule::default()
            }],
            ..ConfigSchemaSpec::default()
        };
        let compiled = compile(&spec).expect("compiles");
        // serde_json refuses past 128 levels; 127 is the deepest a document gets.
        let doc = format!("{}1{}", "{\"a\":".repeat(127), "}".repeat(127));
        let violations = compiled.check(&[("doc".to_owned(), doc)].into());
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(
            violations[0].to_string().contains("below minimum 5"),
            "{violations:?}"
        );
    });
}
