use std::collections::BTreeMap;

use configrollout_api::ConfigSchemaSpec;
use serde_json::json;

use super::*;

pub(super) fn spec(value: serde_json::Value) -> ConfigSchemaSpec {
    serde_json::from_value(value).expect("a ConfigSchemaSpec")
}

pub(super) fn compiled(value: serde_json::Value) -> CompiledSchema {
    compile(&spec(value)).expect("a valid schema")
}

pub(super) fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The violations' Display, one per line.
pub(super) fn shown(schema: &CompiledSchema, pairs: &[(&str, &str)]) -> Vec<String> {
    schema
        .check(&data(pairs))
        .iter()
        .map(ToString::to_string)
        .collect()
}

pub(super) fn one_key(rule: serde_json::Value) -> CompiledSchema {
    compiled(json!({"keys": [rule]}))
}

pub(super) fn schema_errors(value: serde_json::Value) -> Vec<String> {
    match compile(&spec(value)) {
        Ok(_) => panic!("the schema compiled"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn string_pattern_and_lengths() {
    let schema = one_key(
        json!({"name": "name", "type": "String", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 3}),
    );
    assert!(shown(&schema, &[("name", "abc")]).is_empty());
    assert_eq!(
        shown(&schema, &[("name", "Ab")]),
        ["key `name`: pattern: does not match `^[a-z]+$`"]
    );
    assert_eq!(
        shown(&schema, &[("name", "a")]),
        ["key `name`: minLength: shorter than 2 characters"]
    );
    assert_eq!(
        shown(&schema, &[("name", "abcd")]),
        ["key `name`: maxLength: longer than 3 characters"]
    );
    // Lengths count characters, not bytes.
    let lengths = one_key(json!({"name": "name", "type": "String", "maxLength": 3}));
    assert!(shown(&lengths, &[("name", "ééé")]).is_empty());
    // Unanchored patterns match anywhere, as the regex says.
    let unanchored = one_key(json!({"name": "name", "type": "String", "pattern": "[0-9]"}));
    assert!(shown(&unanchored, &[("name", "ab1cd")]).is_empty());
}

#[test]
fn integer_text_and_exact_bounds() {
    let schema =
        one_key(json!({"name": "rate", "type": "Integer", "minimum": 0.5, "maximum": 1000}));
    for ok in ["1", "1000", "0001", "999"] {
        assert!(shown(&schema, &[("rate", ok)]).is_empty(), "{ok}");
    }
    for bad in ["+1", " 1", "1 ", "1.0", "", "-", "1e3", "0x10", "1_000"] {
        assert_eq!(
            shown(&schema, &[("rate", bad)]),
            ["key `rate`: type: not an Integer (optional `-`, then digits)"],
            "{bad:?}"
        );
    }
    assert_eq!(
        shown(&schema, &[("rate", "1001")]),
        ["key `rate`: maximum: above 1000"]
    );
    assert_eq!(
        shown(&schema, &[("rate", "0")]),
        ["key `rate`: minimum: below 0.5"]
    );
    assert_eq!(
        shown(&schema, &[("rate", "-7")]),
        ["key `rate`: minimum: below 0.5"]
    );
    assert_eq!(
        shown(&schema, &[("rate", "9223372036854775808")]),
        ["key `rate`: type: an Integer out of the 64-bit range"]
    );
    // Exact at the edges of i64, where an f64 would round.
    let huge = one_key(json!({"name": "n", "type": "Integer", "maximum": 9007199254740992.0}));
    assert!(shown(&huge, &[("n", "9007199254740992")]).is_empty());
    assert_eq!(
        shown(&huge, &[("n", "9007199254740993")]),
        ["key `n`: maximum: above 9007199254740992"]
    );
    let edge = one_key(json!({"name": "n", "type": "Integer", "minimum": -1e30, "maximum": 1e30}));
    assert!(shown(&edge, &[("n", "-9223372036854775808")]).is_empty());
    assert!(shown(&edge, &[("n", "9223372036854775807")]).is_empty());
}

#[test]
fn number_is_finite_decimal_or_scientific() {
    let schema =
        one_key(json!({"name": "ratio", "type": "Number", "minimum": -1, "maximum": 1000}));
    for ok in ["0.25", "1e3", "-1", "+0.5", ".5", "5.", "1E-3"] {
        assert!(shown(&schema, &[("ratio", ok)]).is_empty(), "{ok}");
    }
    for bad in [
        "NaN", "nan", "inf", "-inf", "infinity", "", ".", "1e", "0x10", "1,5", " 1",
    ] {
        assert_eq!(
            shown(&schema, &[("ratio", bad)]),
            ["key `ratio`: type: not a Number (e.g. `0.25`, `-3`, `1e3`)"],
            "{bad:?}"
        );
    }
    assert_eq!(
        shown(&schema, &[("ratio", "1e999")]),
        ["key `ratio`: type: a Number out of the 64-bit floating-point range"]
    );
    assert_eq!(
        shown(&schema, &[("ratio", "1000.5")]),
        ["key `ratio`: maximum: above 1000"]
    );
    assert_eq!(
        shown(&schema, &[("ratio", "-1.5")]),
        ["key `ratio`: minimum: below -1"]
    );
}

#[test]
fn boolean_is_exactly_true_or_false() {
    let schema = one_key(json!({"name": "on", "type": "Boolean"}));
    assert!(shown(&schema, &[("on", "true")]).is_empty());
    assert!(shown(&schema, &[("on", "false")]).is_empty());
    for bad in ["True", "yes", "1", "", "true "] {
        assert_eq!(
            shown(&schema, &[("on", bad)]),
            ["key `on`: type: not a Boolean (`true` or `false`)"]
        );
    }
}

#[test]
fn duration_is_go_grammar_bounded_in_seconds() {
    let schema =
        one_key(json!({"name": "timeout", "type": "Duration", "minimum": 1, "maximum": 5400}));
    for ok in [
        "1s",
        "3000000us",
        "1500ms",
        "1m30s",
        "1.5h",
        "+2s",
        ".5h",
        "1.h",
        "1000000µs",
        "1h30m",
    ] {
        assert!(shown(&schema, &[("timeout", ok)]).is_empty(), "{ok}");
    }
    let malformed = "key `timeout`: type: not a Duration (e.g. `300ms`, `1m30s`, `1.5h`; units ns, us, ms, s, m, h)";
    for bad in [
        "", "5", "1d", "1.5", "h", ".h", "1 s", "1S", "-", "1m30", "--1s",
    ] {
        assert_eq!(shown(&schema, &[("timeout", bad)]), [malformed], "{bad:?}");
    }
    assert_eq!(
        shown(&schema, &[("timeout", "500ms")]),
        ["key `timeout`: minimum: below 1s"]
    );
    assert_eq!(
        shown(&schema, &[("timeout", "-2s")]),
        ["key `timeout`: minimum: below 1s"]
    );
    assert_eq!(
        shown(&schema, &[("timeout", "0")]),
        ["key `timeout`: minimum: below 1s"]
    );
    assert_eq!(
        shown(&schema, &[("timeout", "1h31m")]),
        ["key `timeout`: maximum: above 5400s"]
    );
    assert_eq!(
        shown(&schema, &[("timeout", "3000000h")]),
        ["key `timeout`: type: a Duration out of range (about 292 years)"]
    );
    assert_eq!(
        shown(
            &schema,
            &[("timeout", "99999999999999999999999999999999999999999s")]
        ),
        ["key `timeout`: type: a Duration out of range (about 292 years)"]
    );
    assert_eq!(
        go_duration::parse_seconds("2562047h47m16.854775807s"),
        Ok(9_223_372_036.854_776)
    );
    assert!(go_duration::parse_seconds("2562047h47m16.854775808s").is_err());
    assert!(go_duration::parse_seconds("-2562047h47m16.854775808s").is_ok());
    assert_eq!(
        go_duration::parse_seconds("1.0000000000000000000000001s"),
        Ok(1.0)
    );
}

#[test]
fn enum_is_one_of_values() {
    let schema = one_key(json!({"name": "mode", "type": "Enum", "values": ["fast", "safe"]}));
    assert!(shown(&schema, &[("mode", "safe")]).is_empty());
    assert_eq!(
        shown(&schema, &[("mode", "Safe")]),
        ["key `mode`: values: not one of the 2 values the schema lists"]
    );
}

#[test]
fn required_forbidden_and_unknown_keys() {
    let schema = compiled(json!({
        "keys": [{"name": "rate", "type": "Integer", "required": true},
                 {"name": "burst", "type": "Integer"}],
        "forbiddenKeys": ["old_flag"],
        "unknownKeys": "Forbid",
    }));
    assert!(shown(&schema, &[("rate", "1")]).is_empty());
    assert_eq!(
        shown(&schema, &[("old_flag", "1"), ("x", "y")]),
        [
            "key `rate`: required: missing",
            "key `old_flag`: forbiddenKeys: forbidden",
            "key `x`: unknownKeys: not in the schema (unknownKeys: Forbid)",
        ]
    );
    let allow = compiled(json!({"keys": [{"name": "rate", "type": "Integer"}]}));
    assert!(shown(&allow, &[("x", "y")]).is_empty());
}

#[test]
fn json_documents_and_their_schema() {
    let schema = one_key(json!({"name": "limits", "type": "Json", "jsonSchema": {
        "type": "object",
        "properties": {"routes": {"type": "array", "items": {
            "type": "object", "properties": {"timeout": {"type": "integer", "minimum": 0}}}}},
        "required": ["routes"],
    }}));
    assert!(shown(&schema, &[("limits", r#"{"routes": [{"timeout": 3}]}"#)]).is_empty());
    assert_eq!(
        shown(&schema, &[("limits", r#"{"routes": [{"timeout": "3"}]}"#)]),
        [
            "key `limits`: jsonSchema at /routes/0/timeout: not of type integer \
          (schema /properties/routes/items/properties/timeout/type)"
        ]
    );
    assert_eq!(
        shown(&schema, &[("limits", r#"{"routes": [{"timeout": -1}]}"#)]),
        [
            "key `limits`: jsonSchema at /routes/0/timeout: below minimum 0 \
          (schema /properties/routes/items/properties/timeout/minimum)"
        ]
    );
    assert_eq!(
        shown(&schema, &[("limits", "{}")]),
        ["key `limits`: jsonSchema at /: property `routes` is required (schema /required)"]
    );
    assert_eq!(
        shown(&schema, &[("limits", "{\n  \"routes\": [1,]\n}")]),
        ["key `limits`: type: not a JSON document (syntax error at line 2, column 16)"]
    );
    assert_eq!(
        shown(&schema, &[("limits", "")]),
        ["key `limits`: type: not a JSON document (unexpected end at line 1, column 0)"]
    );
    let plain = one_key(json!({"name": "doc", "type": "Json"}));
    assert!(shown(&plain, &[("doc", "[1, 2]")]).is_empty());
    // Deeper than serde_json's recursion limit: refused, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(plain.check(&data(&[("doc", &deep)])).len(), 1);
}

#[test]
fn a_document_reports_at_most_five_violations() {
    let schema = one_key(json!({"name": "list", "type": "Json",
        "jsonSchema": {"type": "array", "items": {"type": "string"}}}));
    let many = format!("[{}]", vec!["1"; 10_000].join(","));
    let violations = schema.check(&data(&[("list", &many)]));
    assert_eq!(violations.len(), MAX_VIOLATIONS_PER_KEY);
    assert_eq!(violations[4].pointer.as_deref(), Some("/4"));
}

#[test]
fn yaml_documents_are_bounded() {
    let schema = one_key(json!({"name": "conf", "type": "Yaml",
        "jsonSchema": {"type": "object", "properties": {"port": {"type": "integer"}}}}));
    assert!(shown(&schema, &[("conf", "port: 8080\nname: x\n")]).is_empty());
    assert_eq!(
        shown(&schema, &[("conf", "port: eighty\n")]),
        ["key `conf`: jsonSchema at /port: not of type integer (schema /properties/port/type)"]
    );
    let anchors = "base: &b {port: 1}\nother: *b\nport: 2\n";
    assert!(shown(&schema, &[("conf", anchors)]).is_empty());
    // A billion laughs: each level doubles the previous one.
    let mut bomb = String::from("a0: &a0 [x, x]\n");
    for level in 1..40 {
        let previous = level - 1;
        bomb.push_str(&format!(
            "a{level}: &a{level} [*a{previous}, *a{previous}]\n"
        ));
    }
    let refused = shown(&schema, &[("conf", &bomb)]);
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].starts_with("key `conf`: type: not a YAML document ("),
        "{refused:?}"
    );
    assert_eq!(
        shown(&schema, &[("conf", "a: 1\n---\nb: 2\n")]),
        ["key `conf`: type: not a YAML document (more than one document at line 2, column 1)"]
    );
    let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
    assert_eq!(shown(&schema, &[("conf", &deep)]).len(), 1);
}

#[test]
fn cel_rules_over_the_whole_configuration() {
    let schema = compiled(json!({"rules": [
        {"rule": "int(self.burst) >= int(self.rate)", "message": "burst must be at least rate"},
        {"rule": "!has(self.legacy) || self.legacy == 'off'"},
        {"rule": "self.all(k, k.startsWith('app.') || k in ['rate', 'burst', 'legacy'])"},
    ]}));
    assert!(shown(&schema, &[("rate", "10"), ("burst", "20"), ("app.x", "1")]).is_empty());
    assert_eq!(
        shown(
            &schema,
            &[
                ("rate", "10"),
                ("burst", "5"),
                ("legacy", "on"),
                ("zzz", "1")
            ]
        ),
        [
            "rules[0] (\"burst must be at least rate\"): false",
            "rules[1]: false",
            "rules[2]: false",
        ]
    );
    assert_eq!(
        shown(&schema, &[("rate", "ten"), ("burst", "5")]),
        [
            "rules[0] (\"burst must be at least rate\"): could not be evaluated (function `int` failed)"
        ]
    );
    assert_eq!(
        shown(&schema, &[("rate", "10")]),
        ["rules[0] (\"burst must be at least rate\"): could not be evaluated (no such key)"]
    );
    let not_bool = compiled(json!({"rules": [{"rule": "self.rate"}]}));
    assert_eq!(
        shown(&not_bool, &[("rate", "1")]),
        ["rules[0]: not a Boolean"]
    );
}

#[test]
fn validators_and_display() {
    let schema = compiled(json!({"validators": ["policy.example.com"]}));
    assert_eq!(schema.validators(), ["policy.example.com"]);
    let violation = Violation {
        key: Some("rate".into()),
        rule: "maximum".into(),
        pointer: None,
        message: "above 1000".into(),
    };
    assert_eq!(violation.to_string(), "key `rate`: maximum: above 1000");
    let error = SchemaError::new("spec.rules[0].rule", "empty rule");
    assert_eq!(error.to_string(), "spec.rules[0].rule: empty rule");
}
