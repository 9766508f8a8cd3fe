//! No violation ever quotes the candidate: every refused value below carries a sentinel,
//! which must appear in no field and no Display of any violation.

use proptest::prelude::*;
use serde_json::json;

use super::tests::{compiled, data};
use super::*;

const SENTINEL: &str = "SENTINEL-7f3a";

fn assert_no_sentinel(violations: &[Violation]) {
    assert!(!violations.is_empty(), "the value was accepted");
    for violation in violations {
        let fields = [
            violation.to_string(),
            violation.key.clone().unwrap_or_default(),
            violation.rule.clone(),
            violation.pointer.clone().unwrap_or_default(),
            violation.message.clone(),
        ];
        for field in fields {
            assert!(!field.contains("SENTINEL"), "a value leaked: {field}");
        }
    }
}

fn schema() -> CompiledSchema {
    compiled(json!({
        "keys": [
            {"name": "name", "type": "String", "pattern": "^[a-z]+$", "maxLength": 5},
            {"name": "rate", "type": "Integer", "minimum": 0, "maximum": 10},
            {"name": "ratio", "type": "Number"},
            {"name": "on", "type": "Boolean"},
            {"name": "timeout", "type": "Duration"},
            {"name": "mode", "type": "Enum", "values": ["fast", "safe"]},
            {"name": "doc", "type": "Json", "jsonSchema": {
                "type": "object",
                "properties": {
                    "kind": {"enum": ["a", "b"]},
                    "version": {"const": 2},
                    "host": {"type": "string", "pattern": "^[a-z.]+$", "maxLength": 5, "format": "hostname"},
                    "port": {"type": "integer", "minimum": 1},
                    "tags": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
                    "meta": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"},
                             "additionalProperties": {"type": "integer"}},
                    "choice": {"oneOf": [{"type": "integer"}, {"type": "boolean"}]},
                    "any": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
                    "not": {"not": {"type": "string"}},
                },
                "required": ["kind"],
                "additionalProperties": false,
            }},
            {"name": "yaml", "type": "Yaml", "jsonSchema": {
                "type": "object", "additionalProperties": {"type": "integer"}}},
        ],
        "forbiddenKeys": ["old"],
        "unknownKeys": "Forbid",
        "rules": [
            {"rule": "!has(self.rate) || int(self.rate) >= 0", "message": "rate is a number"},
            {"rule": "!has(self.pat) || self.name.startsWith(self.pat)"},
            {"rule": "!has(self.ref) || self[self.ref] == 'x'"},
            {"rule": "!has(self.ratio) || double(self.ratio) > 0.0"},
            {"rule": "!has(self.name) || self.name + 1 == 2"},
            {"rule": "!has(self.name) || self.name == 1"},
            {"rule": "!has(self.on) || self.exists(k, self[k] == self.on + 'x')"},
            {"rule": "!has(self.rate) || [1, 2][int(self.rate)] == 1"},
            {"rule": "!has(self.rate) || uint(self.rate) > 0u"},
        ],
    }))
}

#[test]
fn no_rule_type_quotes_a_refused_value() {
    let schema = schema();
    let s = SENTINEL;
    let documents = [
        json!({"kind": s}),
        json!({"kind": "a", "version": s}),
        json!({"kind": "a", "host": s}),
        json!({"kind": "a", "port": s}),
        json!({"kind": "a", "port": -5, s: 1}),
        json!({"kind": "a", "tags": [s, s]}),
        json!({"kind": "a", "meta": {s: 1}}),
        json!({"kind": "a", "meta": {"ok": s}}),
        json!({"kind": "a", "meta": {s: {s: s}}}),
        json!({"kind": "a", "choice": s, "any": s, "not": s}),
        json!({s: {s: [s]}}),
        json!([s]),
        json!(s),
    ];
    let mut cases: Vec<(String, String)> = vec![
        ("name".into(), format!("{s}-abc")),
        ("rate".into(), s.into()),
        ("rate".into(), format!("{s}1")),
        ("ratio".into(), s.into()),
        ("on".into(), s.into()),
        ("timeout".into(), format!("1{s}")),
        ("mode".into(), s.into()),
        ("old".into(), s.into()),
        (s.to_lowercase(), "x".into()),
        ("doc".into(), format!("{{\"a\": \"{s}")),
        ("doc".into(), format!("{{\"a\": {s}}}")),
        ("yaml".into(), format!("a: [{s}\nb: {s}: {s}")),
        ("yaml".into(), format!("a: *{s}\n")),
        ("yaml".into(), format!("{s}: {s}\n{s}: 1\n")),
        ("yaml".into(), format!("a: {s}\n")),
        ("yaml".into(), format!("{s}: x\n---\n{s}: 1\n")),
    ];
    cases.extend(
        documents
            .iter()
            .map(|doc| ("doc".to_owned(), doc.to_string())),
    );
    for (key, value) in cases {
        let mut candidate = data(&[]);
        candidate.insert(key.clone(), value.clone());
        let violations = schema.check(&candidate);
        assert_no_sentinel(&violations);
    }
}

#[test]
fn cel_errors_never_quote_a_value() {
    let schema = schema();
    let s = SENTINEL;
    for pairs in [
        vec![("rate", s.to_owned())],
        vec![("name", s.to_owned()), ("pat", format!("({s}"))],
        vec![("ref", s.to_owned())],
        vec![("ratio", s.to_owned())],
        vec![("name", s.to_owned())],
        vec![("on", s.to_owned()), ("mode", s.to_owned())],
        vec![("rate", "99999999999999999999".to_owned())],
        vec![("rate", "-1".to_owned())],
    ] {
        let candidate = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        let violations = schema.check(&candidate);
        assert!(
            violations.iter().any(|v| v.key.is_none()),
            "no CEL rule refused {pairs:?}"
        );
        assert_no_sentinel(&violations);
    }
    // The CEL errors say which function failed.
    let shown: Vec<String> = schema
        .check(&data(&[("rate", s)]))
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        shown.contains(
            &"rules[0] (\"rate is a number\"): could not be evaluated (function `int` failed)"
                .to_owned()
        )
    );
}

fn value() -> impl Strategy<Value = String> {
    let s = SENTINEL;
    prop_oneof![
        "\\PC{0,16}".prop_map(move |v| format!("{s}{v}")),
        "\\PC{0,16}".prop_map(move |v| format!("{v}{s}")),
        "[0-9.eE+-]{0,6}".prop_map(move |v| format!("{v}{s}")),
        "[a-z: \\[\\]{},\"\n-]{0,24}".prop_map(move |v| format!("{v}{s}")),
        "[a-z]{0,6}".prop_map(move |v| format!("{{\"{s}\": \"{v}\", \"kind\": \"{s}\"}}")),
        "[a-z]{0,6}".prop_map(move |v| format!("{v}: [{s}, *{s}]\n{s}: &{s} {s}")),
        Just(format!(
            "{{\"kind\": \"a\", \"meta\": {{\"{s}\": \"{s}\"}}}}"
        )),
    ]
}

proptest! {
    #[test]
    fn check_never_panics_nor_quotes_a_value(
        candidate in prop::collection::btree_map(
            prop_oneof![
                prop::sample::select(vec![
                    "name", "rate", "ratio", "on", "timeout", "mode", "doc", "yaml", "old",
                    "pat", "ref",
                ]).prop_map(str::to_owned),
                "[a-z]{1,8}",
            ],
            value(),
            0..12,
        )
    ) {
        let violations = schema().check(&candidate);
        for violation in &violations {
            let text = violation.to_string();
            prop_assert!(!text.contains("SENTINEL"), "a value leaked: {}", text);
            prop_assert!(!violation.message.contains("SENTINEL"));
            prop_assert!(!violation.rule.contains("SENTINEL"));
            prop_assert!(!violation.pointer.clone().unwrap_or_default().contains("SENTINEL"));
        }
    }
}
