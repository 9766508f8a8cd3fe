//! Schema pieces shared by the kinds: CEL rules, bounds and list semantics that schemars
//! cannot express from the Rust types alone.
//!
//! Every string and list that a CEL rule walks has a `maxLength`/`maxItems` here, because
//! the apiserver estimates each rule's worst-case cost from those bounds and refuses a CRD
//! whose estimate is over budget.

use schemars::Schema;
use serde_json::{Value, json};

use super::duration::{Ceiling, DURATION_MAX_LENGTH, DURATION_PATTERN};

/// RFC 1123 label (namespace names, stage and gate names): lower-case alphanumerics and
/// `-`, starting and ending with an alphanumeric, at most [`DNS1123_LABEL_MAX_LENGTH`].
pub const DNS1123_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// Maximum length of an RFC 1123 label.
pub const DNS1123_LABEL_MAX_LENGTH: u64 = 63;
/// RFC 1123 subdomain (ConfigMap and Region names): dot-separated labels, at most
/// [`DNS1123_SUBDOMAIN_MAX_LENGTH`].
pub const DNS1123_SUBDOMAIN_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Maximum length of an RFC 1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: u64 = 253;
/// A ConfigMap data key, as the apiserver accepts it for ConfigMaps.
pub const CONFIG_MAP_KEY_PATTERN: &str = "^[-._a-zA-Z0-9]+$";
/// Maximum length of a ConfigMap data key.
pub const CONFIG_MAP_KEY_MAX_LENGTH: u64 = 253;

/// One `x-kubernetes-validations` entry.
pub(crate) struct Rule<'a> {
    pub rule: String,
    pub message: String,
    /// JSONPath relative to the schema node the rule sits on; the apiserver reports the
    /// failure at this field rather than at the node.
    pub field_path: Option<&'a str>,
    /// `FieldValueInvalid` unless set: what `kubectl` shows as the cause type. Not
    /// `FieldValueDuplicate`: the apiserver then prints "Duplicate value" and drops the
    /// message.
    pub reason: Option<&'a str>,
}

impl Rule<'_> {
    pub(crate) fn new(rule: impl Into<String>, message: impl Into<String>) -> Self {
        Rule {
            rule: rule.into(),
            message: message.into(),
            field_path: None,
            reason: None,
        }
    }
}

impl<'a> Rule<'a> {
    pub(crate) fn at(mut self, field_path: &'a str) -> Self {
        self.field_path = Some(field_path);
        self
    }

    pub(crate) fn reason(mut self, reason: &'a str) -> Self {
        self.reason = Some(reason);
        self
    }

    fn to_value(&self) -> Value {
        let mut v = json!({ "rule": self.rule, "message": self.message });
        if let (Some(path), Some(obj)) = (self.field_path, v.as_object_mut()) {
            obj.insert("fieldPath".into(), path.into());
        }
        if let (Some(reason), Some(obj)) = (self.reason, v.as_object_mut()) {
            obj.insert("reason".into(), reason.into());
        }
        v
    }
}

/// Appends CEL rules to a schema node.
pub(crate) fn add_rules(schema: &mut Schema, rules: &[Rule<'_>]) {
    let obj = schema.ensure_object();
    let entry = obj
        .entry("x-kubernetes-validations")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = entry {
        list.extend(rules.iter().map(Rule::to_value));
    }
}

/// Sets a keyword on a schema node.
pub(crate) fn set(schema: &mut Schema, keyword: &str, value: impl Into<Value>) {
    schema.insert(keyword.to_owned(), value.into());
}

/// A CEL string literal (single-quoted) for `s`.
pub(crate) fn cel_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A duration string field named `field`: bounded length, Go-style grammar, at most
/// `ceiling`.
pub(crate) fn duration(field: &'static str, ceiling: Ceiling) -> impl FnMut(&mut Schema) {
    move |schema| {
        set(schema, "maxLength", DURATION_MAX_LENGTH);
        add_rules(
            schema,
            &[
                Rule::new(
                    format!("self.matches({})", cel_str(DURATION_PATTERN)),
                    format!("{field} must be a duration such as 500ms, 30s, 5m or 1h30m"),
                ),
                Rule::new(
                    duration_ceiling_rule(ceiling),
                    format!("{field} must be at most {}", ceiling.text()),
                ),
            ],
        );
    }
}

/// Longest number of one `<digits><unit>` group the ceiling rule converts: 11 digits of
/// hours are 3.6e17 ms, and at most 16 groups fit in [`DURATION_MAX_LENGTH`], so no sum
/// of them overflows CEL's 64-bit integers. Every ceiling is far below 11 digits of
/// milliseconds, so a longer group is over it whatever its unit.
const CEILING_GROUP_DIGITS: u32 = 11;

/// The CEL rule that a duration string of the grammar is at most `ceiling`. It adds the
/// groups up in milliseconds itself rather than calling CEL's `duration()`, which fails
/// (an evaluation error, not this rule's message) on values past 292 years; a group too
/// long to convert without overflow is refused before any conversion (`&&` is
/// short-circuit in CEL). A string outside the grammar passes this rule: the grammar rule
/// reports it.
fn duration_ceiling_rule(ceiling: Ceiling) -> String {
    duration_sum_rule(&format!("<= {}", ceiling.millis()))
}

/// The CEL rule that a duration string of the grammar is at least `floor_ms`, built as the
/// ceiling rule is; a group too long to convert is far above any floor.
fn duration_floor_rule(floor_ms: u64) -> String {
    format!(
        "!self.matches({pattern}) || self.findAll({group}).exists(g, !g.matches('^[0-9]{{1,{max_digits}}}[a-z]+$')) \
         || {sum}",
        pattern = cel_str(DURATION_PATTERN),
        group = DURATION_GROUP,
        max_digits = CEILING_GROUP_DIGITS,
        sum = duration_sum(&format!(">= {floor_ms}")),
    )
}

/// One `<digits><unit>` group of a duration, for CEL's `findAll`.
const DURATION_GROUP: &str = "'[0-9]+(ms|s|m|h)'";

/// `sum of the groups in ms <comparison>`, for strings whose groups all convert.
fn duration_sum(comparison: &str) -> String {
    let unit_ms =
        "(g.endsWith('ms') ? 1 : g.endsWith('s') ? 1000 : g.endsWith('m') ? 60000 : 3600000)";
    let digits = "int(g.replace('ms', '').replace('s', '').replace('m', '').replace('h', ''))";
    format!(
        "self.findAll({group}).map(g, {digits} * {unit_ms}).sum() {comparison}",
        group = DURATION_GROUP,
    )
}

fn duration_sum_rule(comparison: &str) -> String {
    format!(
        "!self.matches({pattern}) || (self.findAll({group}).all(g, g.matches('^[0-9]{{1,{max_digits}}}[a-z]+$')) \
         && {sum})",
        pattern = cel_str(DURATION_PATTERN),
        group = DURATION_GROUP,
        max_digits = CEILING_GROUP_DIGITS,
        sum = duration_sum(comparison),
    )
}

/// A duration field with a floor as well as a ceiling (`spec.gates[].interval`).
pub(crate) fn duration_between(
    field: &'static str,
    floor: std::time::Duration,
    ceiling: Ceiling,
) -> impl FnMut(&mut Schema) {
    let mut within_ceiling = duration(field, ceiling);
    move |schema| {
        within_ceiling(schema);
        let floor_ms = u64::try_from(floor.as_millis()).unwrap_or(u64::MAX);
        add_rules(
            schema,
            &[Rule::new(
                duration_floor_rule(floor_ms),
                format!("{field} must be at least {}", floor_text(floor)),
            )],
        );
    }
}

/// A floor as written in a spec: `1s`, `500ms`.
pub fn floor_text(floor: std::time::Duration) -> String {
    if floor.subsec_millis() == 0 {
        format!("{}s", floor.as_secs())
    } else {
        format!("{}ms", floor.as_millis())
    }
}

/// Most requirements, label pairs and values a label selector of a spec may hold.
pub const MAX_SELECTOR_TERMS: u64 = 20;
/// Longest label key or value a selector may name (a qualified label key is at most 317).
pub const MAX_SELECTOR_TEXT: u64 = 317;

/// A label selector (`metav1.LabelSelector`) field: its operator one of the four the
/// apiserver knows (an enum, so that no other text, a control character included, is
/// ever stored), and its lists bounded, so that the rules reading it have a bounded cost.
pub(crate) fn label_selector(schema: &mut Schema) {
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(labels) = properties
        .get_mut("matchLabels")
        .and_then(Value::as_object_mut)
    {
        labels.insert("maxProperties".into(), MAX_SELECTOR_TERMS.into());
        if let Some(values) = labels
            .get_mut("additionalProperties")
            .and_then(Value::as_object_mut)
        {
            values.insert("maxLength".into(), MAX_SELECTOR_TEXT.into());
        }
    }
    let Some(expressions) = properties
        .get_mut("matchExpressions")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    expressions.insert("maxItems".into(), MAX_SELECTOR_TERMS.into());
    let Some(requirement) = expressions
        .get_mut("items")
        .and_then(|items| items.get_mut("properties"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if let Some(operator) = requirement
        .get_mut("operator")
        .and_then(Value::as_object_mut)
    {
        operator.insert(
            "enum".into(),
            json!(["In", "NotIn", "Exists", "DoesNotExist"]),
        );
    }
    if let Some(key) = requirement.get_mut("key").and_then(Value::as_object_mut) {
        key.insert("maxLength".into(), MAX_SELECTOR_TEXT.into());
    }
    if let Some(values) = requirement.get_mut("values").and_then(Value::as_object_mut) {
        values.insert("maxItems".into(), MAX_SELECTOR_TERMS.into());
        if let Some(items) = values.get_mut("items").and_then(Value::as_object_mut) {
            items.insert("maxLength".into(), MAX_SELECTOR_TEXT.into());
        }
    }
}

/// A name field that must be an RFC 1123 label.
pub(crate) fn dns_label(field: &'static str) -> impl FnMut(&mut Schema) {
    move |schema| {
        set(schema, "minLength", 1);
        set(schema, "maxLength", DNS1123_LABEL_MAX_LENGTH);
        add_rules(
            schema,
            &[Rule::new(
                format!("self.matches({})", cel_str(DNS1123_LABEL_PATTERN)),
                format!(
                    "{field} must be a DNS-1123 label: lower-case letters, digits and '-', \
                     starting and ending with a letter or digit, at most 63 characters"
                ),
            )],
        );
    }
}

/// A name field that must be an RFC 1123 subdomain.
pub(crate) fn dns_subdomain(field: &'static str) -> impl FnMut(&mut Schema) {
    move |schema| {
        set(schema, "minLength", 1);
        set(schema, "maxLength", DNS1123_SUBDOMAIN_MAX_LENGTH);
        add_rules(
            schema,
            &[Rule::new(
                format!("self.matches({})", cel_str(DNS1123_SUBDOMAIN_PATTERN)),
                format!(
                    "{field} must be a DNS-1123 subdomain: lower-case letters, digits, '-' and \
                     '.', starting and ending with a letter or digit, at most 253 characters"
                ),
            )],
        );
    }
}

/// A free-text string bounded to `max` characters.
pub(crate) fn max_length(max: u64) -> impl FnMut(&mut Schema) {
    move |schema| set(schema, "maxLength", max)
}

/// Free text bounded to `max` characters that may span lines but holds no control
/// character or bidirectional override ([`super::text::MULTILINE_TEXT_PATTERN`]).
pub(crate) fn multiline_text(max: u64) -> impl FnMut(&mut Schema) {
    move |schema| {
        set(schema, "maxLength", max);
        set(schema, "pattern", super::text::MULTILINE_TEXT_PATTERN);
    }
}

/// A list bounded to `max` items.
pub(crate) fn max_items(max: u64) -> impl FnMut(&mut Schema) {
    move |schema| set(schema, "maxItems", max)
}

/// A list of `metav1.Condition`: one entry per `type`, merged by type under server-side
/// apply, as in core kinds.
pub(crate) fn conditions_list(schema: &mut Schema) {
    set(schema, "maxItems", 32);
    set(schema, "x-kubernetes-list-type", "map");
    set(schema, "x-kubernetes-list-map-keys", json!(["type"]));
}

/// A list of short strings: at most `max_items` entries of at most `item_max_length`
/// characters, each present once.
pub(crate) fn string_set(max_items: u64, item_max_length: u64) -> impl FnMut(&mut Schema) {
    move |schema| {
        set(schema, "maxItems", max_items);
        set(schema, "x-kubernetes-list-type", "set");
        if let Some(Value::Object(items)) = schema.get_mut("items") {
            items.insert("maxLength".into(), item_max_length.into());
            items.insert("minLength".into(), 1.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cel_string_literals_escape_quotes_and_backslashes() {
        assert_eq!(cel_str("plain"), "'plain'");
        assert_eq!(cel_str(r"a'b\.c"), r"'a\'b\\.c'");
    }

    #[test]
    fn string_sets_bound_their_items() {
        let mut schema: Schema = json!({"type": "array", "items": {"type": "string"}})
            .try_into()
            .unwrap();
        string_set(5, 63)(&mut schema);
        assert_eq!(schema.get("maxItems"), Some(&json!(5)));
        assert_eq!(schema.get("x-kubernetes-list-type"), Some(&json!("set")));
        assert_eq!(
            schema.get("items").and_then(|i| i.get("maxLength")),
            Some(&json!(63))
        );
    }
}
