//! Schemas that cannot be checked are refused at compile, each problem naming its field.

use configrollout_api::{ConfigSchemaSpec, KeyRule, ValueType};
use serde_json::json;

use super::tests::{one_key, schema_errors, shown};
use super::*;

#[test]
fn schema_errors_name_the_field() {
    assert_eq!(
        schema_errors(json!({"keys": [
            {"name": "a", "type": "String"}, {"name": "a", "type": "Integer"},
            {"name": "b", "type": "Integer", "minimum": 5, "maximum": 1},
            {"name": "c", "type": "String", "pattern": "([a-z]"},
            {"name": "d", "type": "Enum"},
            {"name": "e", "type": "String", "minLength": 3, "maxLength": 2},
            {"name": "f", "type": "Integer", "pattern": "x", "values": ["y"]},
            {"name": "old", "type": "String"},
            {"name": "bad key!", "type": "String"},
        ], "forbiddenKeys": ["old"], "validators": ["Not_A_Name"]})),
        [
            "spec.keys[1].name: key `a` has a rule already",
            "spec.keys[2].minimum: 5 is above maximum 1",
            "spec.keys[3].pattern: not a regular expression: regex parse error:\n    ([a-z]\n    ^\nerror: unclosed group",
            "spec.keys[4].values: type Enum needs at least one value",
            "spec.keys[5].minLength: 3 is above maxLength 2",
            "spec.keys[6].pattern: applies to type String only",
            "spec.keys[6].values: applies to type Enum only",
            "spec.keys[7].name: key `old` is also in spec.forbiddenKeys",
            "spec.keys[8].name: `bad key!` is not a ConfigMap key (letters, digits, `-`, `.`, `_`)",
            "spec.validators[0]: not a ClusterConfigValidator name (a DNS-1123 subdomain)",
        ]
    );
}

#[test]
fn hostile_patterns_and_bounds_are_refused() {
    let errors = schema_errors(json!({"keys": [
        {"name": "a", "type": "String", "pattern": "(((a{100}){100}){100})"},
        {"name": "b", "type": "String", "pattern": "a".repeat(1025)},
    ]}));
    assert_eq!(
        errors,
        [
            format!(
                "spec.keys[0].pattern: compiles to more than {} bytes",
                PATTERN_SIZE_LIMIT
            ),
            "spec.keys[1].pattern: longer than 1024 characters".to_owned(),
        ]
    );
    let mut nan = ConfigSchemaSpec::default();
    nan.keys.push(KeyRule {
        name: "x".into(),
        value_type: ValueType::Number,
        minimum: Some(f64::NAN),
        maximum: Some(f64::INFINITY),
        ..KeyRule::default()
    });
    let errors: Vec<String> = compile(&nan)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        [
            "spec.keys[0].minimum: not a finite number",
            "spec.keys[0].maximum: not a finite number"
        ]
    );
    let rules: Vec<_> = (0..33).map(|_| json!({"rule": "true"})).collect();
    assert_eq!(
        schema_errors(json!({"rules": rules})),
        ["spec.rules: 33 entries, more than the 32 allowed"]
    );
}

#[test]
fn json_schema_errors_and_references() {
    let error = |schema: serde_json::Value| {
        schema_errors(json!({"keys": [{"name": "doc", "type": "Json", "jsonSchema": schema}]}))
    };
    let invalid = error(json!({"type": 12}));
    assert_eq!(invalid.len(), 1);
    assert!(
        invalid[0].starts_with(
            "spec.keys[0].jsonSchema: not a valid JSON Schema (draft 2020-12) at /type: "
        ),
        "{invalid:?}"
    );
    for reference in [
        "https://example.com/s.json",
        "file:///etc/passwd",
        "other.json#/x",
    ] {
        assert_eq!(
            error(json!({"properties": {"a": {"$ref": reference}}})),
            [format!(
                "spec.keys[0].jsonSchema: `$ref` to `{reference}`: only references inside the \
                 schema (`#...`) are resolved, nothing is fetched"
            )]
        );
    }
    assert_eq!(
        error(json!({"$dynamicRef": "https://example.com/s.json#meta"})).len(),
        1
    );
    // A dangling local reference is refused at compile too.
    assert_eq!(error(json!({"$ref": "#/$defs/missing"})).len(), 1);
    // A local one compiles; a `$ref` inside data (const) is not a reference.
    let local = one_key(json!({"name": "doc", "type": "Json", "jsonSchema": {
        "$defs": {"port": {"type": "integer"}},
        "properties": {"port": {"$ref": "#/$defs/port"}, "default": {"const": {"$ref": "http://x"}}},
    }}));
    assert_eq!(
        shown(&local, &[("doc", r#"{"port": "x"}"#)]),
        ["key `doc`: jsonSchema at /port: not of type integer (schema /$defs/port/type)"]
    );
    // Lookaround needs backtracking: refused, patterns run in linear time.
    assert_eq!(error(json!({"pattern": "(?=a)a"})).len(), 1);
    let mut deep = json!({"type": "integer"});
    for _ in 0..100 {
        deep = json!({"items": deep});
    }
    assert_eq!(
        error(deep),
        ["spec.keys[0].jsonSchema: nested deeper than 64 levels"]
    );
}

#[test]
fn cel_rule_errors_at_compile() {
    let errors = schema_errors(json!({"rules": [
        {"rule": "self.rate >"},
        {"rule": "self.all(k, self.exists(j, j == k))"},
        {"rule": "self.map(k, k).filter(k, k != '')"},
        {"rule": "self.exists(k, k == 'a')"},
        {"rule": "  "},
    ]}));
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert!(
        errors[0].starts_with("spec.rules[0].rule: not a CEL expression: "),
        "{errors:?}"
    );
    assert_eq!(
        errors[1],
        "spec.rules[1].rule: 2 macro calls (all, exists, exists_one, map, filter); at most 1 per \
         rule, so that its cost stays linear in the number of keys"
    );
    assert!(
        errors[2].starts_with("spec.rules[2].rule: 2 macro calls"),
        "{errors:?}"
    );
    assert_eq!(errors[3], "spec.rules[4].rule: empty rule");
}

#[test]
fn rules_that_could_cost_without_bound_are_refused() {
    let errors = schema_errors(json!({"rules": [
        {"rule": "self.all(k, self[k].matches('^[a-z]+$'))"},
        {"rule": format!("size(self.a{}) > 0", " + self.a".repeat(17))},
        {"rule": format!("size(self.a{}) > 0", " + self.a".repeat(16))},
    ]}));
    assert_eq!(
        errors,
        [
            "spec.rules[0].rule: `matches` is not available in rules: give the key a `pattern` \
             (checked with a compiled, bounded regular expression)",
            "spec.rules[1].rule: 17 `+` operations; at most 16 per rule",
        ]
    );
}

#[test]
fn a_schema_holds_a_bounded_number_of_regular_expressions() {
    let keys: Vec<serde_json::Value> = (0..MAX_PATTERNS)
        .map(|i| json!({"name": format!("k{i}"), "type": "String", "pattern": "^[a-z]+$"}))
        .collect();
    let within: ConfigSchemaSpec = serde_json::from_value(json!({ "keys": keys })).expect("schema");
    assert!(compile(&within).is_ok());
    let mut over = keys;
    over.push(json!({"name": "doc", "type": "Json", "jsonSchema": {
        "properties": {"a": {"type": "string", "pattern": "^x"}}}}));
    assert_eq!(
        schema_errors(json!({ "keys": over })),
        [format!(
            "spec.keys: {} regular expressions (patterns, and patterns in JSON Schemas); at \
             most {MAX_PATTERNS} per schema",
            MAX_PATTERNS + 1
        )]
    );
}

#[test]
fn patterns_and_rules_hold_no_terminal_control() {
    let errors = schema_errors(json!({
        "keys": [{"name": "a", "type": "String", "pattern": "^a\u{1b}[2J$"}],
        "rules": [{"rule": "true \u{202e}"}],
    }));
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("spec.keys[0].pattern: holds U+001B"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("spec.rules[0].rule: holds U+202E"),
        "{errors:?}"
    );
}
