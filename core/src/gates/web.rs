//! The `web` gate's answer: an RFC 9535 JSONPath picks the sample's value out of an HTTP
//! endpoint's JSON answer.
//!
//! A platform admin names the endpoint and the JSONPath in a ClusterGateTemplate; the
//! controller fetches the answer (`configrollout::web_gate`) and this module turns its
//! bytes into a [`QueryResult`] that the gate's condition judges like any other sample:
//!
//! - no node matched: [`QueryResult::Empty`] (no data, Inconclusive);
//! - one node: [`QueryResult::Scalar`];
//! - several: [`QueryResult::Vector`], each element labelled [`PATH_LABEL`] with the
//!   node's normalized path, so that `all(...)` and `any(...)` apply; more than
//!   [`MAX_MATCHES`] is an error rather than an unbounded vector;
//! - a JSON number is its value, `true`/`false` are 1/0, and a string that parses as a
//!   finite number (surrounding whitespace ignored) is that number, since many endpoints
//!   quote their figures; anything else (null, an object, an array, another string)
//!   makes the whole sample a [`QueryResult::Error`]: a gate never guesses a number.
//!
//! Error texts land in a tenant-visible status, and an endpoint's answer may hold data the
//! tenant may not see: they name the JSON type and the match's position, never a value
//! nor a key of the answer, and are bounded to [`MAX_ERROR_CHARS`] characters.

use std::fmt;

use configrollout_api::text::is_unsafe_to_show;
use serde_json::Value;
use serde_json_path::JsonPath;

use super::verdict::{Labels, QueryResult};

/// Longest JSONPath accepted, in bytes. A gate's path picks one figure or a handful; a
/// longer one is more likely a mistake than a need.
pub const MAX_QUERY_BYTES: usize = 1024;

/// Deepest nesting of brackets and parentheses a JSONPath may have: the parser is
/// recursive, so an unbounded nesting could exhaust the controller's stack.
pub const MAX_NESTING: usize = 32;

/// Most nodes one answer may match; past it the sample is an error, not a vector.
pub const MAX_MATCHES: usize = 1000;

/// Longest error text, in characters.
pub const MAX_ERROR_CHARS: usize = 200;

/// Longest `path` label kept, in characters (a key of the answer can be arbitrarily
/// long).
pub const MAX_LABEL_CHARS: usize = 256;

/// The label naming each element of a vector answer by its normalized path
/// (`$['pods'][0]['rate']`).
pub const PATH_LABEL: &str = "path";

/// Why a JSONPath cannot be used. The text quotes no more of the path than the parser's
/// message does, cut to [`MAX_ERROR_CHARS`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebGateError {
    /// The JSONPath is empty.
    #[error("the JSONPath is empty")]
    Empty,
    /// The JSONPath is longer than [`MAX_QUERY_BYTES`].
    #[error("the JSONPath is {length} bytes long, over the limit of {MAX_QUERY_BYTES}")]
    TooLong {
        /// Its length in bytes.
        length: usize,
    },
    /// The JSONPath nests deeper than [`MAX_NESTING`].
    #[error("the JSONPath nests brackets or parentheses deeper than {MAX_NESTING} levels")]
    TooDeep,
    /// The JSONPath is not RFC 9535 JSONPath.
    #[error("the JSONPath is not valid RFC 9535 JSONPath: {0}")]
    Invalid(String),
}

/// A parsed RFC 9535 JSONPath, ready to evaluate against answers.
#[derive(Clone)]
pub struct JsonPathQuery {
    source: String,
    path: JsonPath,
}

impl JsonPathQuery {
    /// Parses `source` (e.g. `$.data.errorRate` or `$.pods[*].rate`).
    pub fn parse(source: &str) -> Result<Self, WebGateError> {
        if source.is_empty() {
            return Err(WebGateError::Empty);
        }
        if source.len() > MAX_QUERY_BYTES {
            return Err(WebGateError::TooLong {
                length: source.len(),
            });
        }
        if nesting(source) > MAX_NESTING {
            return Err(WebGateError::TooDeep);
        }
        let path = JsonPath::parse(source)
            .map_err(|error| WebGateError::Invalid(bounded(&error.to_string(), MAX_ERROR_CHARS)))?;
        Ok(Self {
            source: source.to_owned(),
            path,
        })
    }

    /// The JSONPath as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The sample `body` (an endpoint's answer) gives; see the module's documentation.
    /// Never panics, whatever the bytes.
    pub fn evaluate(&self, body: &[u8]) -> QueryResult {
        let document: Value = match serde_json::from_slice(body) {
            Ok(document) => document,
            Err(error) => return QueryResult::Error(not_json(body, &error)),
        };
        // Counted without locations first: building a normalized path per node for an
        // answer that matches far too many would cost what the cap is there to avoid.
        let nodes = self.path.query(&document);
        match nodes.len() {
            0 => QueryResult::Empty,
            1 => match nodes.first().map(number) {
                Some(Ok(value)) => QueryResult::Scalar(value),
                Some(Err(kind)) => {
                    QueryResult::Error(format!("the value the JSONPath matched is {kind}"))
                }
                None => QueryResult::Empty,
            },
            count if count > MAX_MATCHES => QueryResult::Error(format!(
                "the JSONPath matched {count} values, over the limit of {MAX_MATCHES}"
            )),
            count => {
                let mut elements = Vec::with_capacity(count);
                for (index, node) in self.path.query_located(&document).into_iter().enumerate() {
                    match number(node.node()) {
                        Ok(value) => {
                            let path = bounded(&node.location().to_string(), MAX_LABEL_CHARS);
                            elements.push((Labels::from([(PATH_LABEL.to_owned(), path)]), value));
                        }
                        Err(kind) => {
                            return QueryResult::Error(format!(
                                "match {} of the {count} values the JSONPath matched is {kind}",
                                index.saturating_add(1)
                            ));
                        }
                    }
                }
                QueryResult::Vector(elements)
            }
        }
    }
}

impl fmt::Display for JsonPathQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl fmt::Debug for JsonPathQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("JsonPathQuery").field(&self.source).finish()
    }
}

impl PartialEq for JsonPathQuery {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for JsonPathQuery {}

/// A matched node's number, or what it is instead (its JSON type, never its value).
fn number(value: &Value) -> Result<f64, &'static str> {
    match value {
        // Without serde_json's `arbitrary_precision` every number has an f64.
        Value::Number(number) => number.as_f64().ok_or("a number out of range"),
        Value::Bool(true) => Ok(1.0),
        Value::Bool(false) => Ok(0.0),
        Value::String(text) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|value| value.is_finite())
            .ok_or("a string that is not a finite number"),
        Value::Null => Err("null, not a number"),
        Value::Array(_) => Err("an array, not a number"),
        Value::Object(_) => Err("an object, not a number"),
    }
}

/// Why `body` is not JSON, from the parser's category and position only: its messages
/// are fixed texts today, but nothing of the body may reach a status, so none is used.
fn not_json(body: &[u8], error: &serde_json::Error) -> String {
    use serde_json::error::Category;
    if body.iter().all(u8::is_ascii_whitespace) {
        return "the answer is not JSON: it is empty".to_owned();
    }
    let what = match error.classify() {
        Category::Syntax => "invalid syntax",
        Category::Eof => "it ends early",
        Category::Data => "unexpected data",
        Category::Io => "it could not be read",
    };
    format!(
        "the answer is not JSON: {what} at line {}, column {}",
        error.line(),
        error.column()
    )
}

/// How deeply `source` nests brackets and parentheses outside its string literals.
fn nesting(source: &str) -> usize {
    let mut depth: usize = 0;
    let mut deepest: usize = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in source.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(open) if c == open => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '[' | '(' => {
                    depth = depth.saturating_add(1);
                    deepest = deepest.max(depth);
                }
                ']' | ')' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    deepest
}

/// `text` cut to `max` characters (the last one `…` when cut), each control character or
/// bidirectional override replaced by U+FFFD.
fn bounded(text: &str, max: usize) -> String {
    let cut = text.chars().nth(max).is_some();
    let keep = if cut { max.saturating_sub(1) } else { max };
    let mut shown: String = text
        .chars()
        .take(keep)
        .map(|c| if is_unsafe_to_show(c) { '\u{fffd}' } else { c })
        .collect();
    if cut {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECRET: &str = "s3cr3t-v4lue";

    fn query(path: &str) -> JsonPathQuery {
        JsonPathQuery::parse(path).unwrap()
    }

    fn eval(path: &str, body: &str) -> QueryResult {
        query(path).evaluate(body.as_bytes())
    }

    fn error_text(result: QueryResult) -> String {
        match result {
            QueryResult::Error(text) => text,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn a_number_is_a_scalar() {
        assert_eq!(
            eval("$.errorRate", r#"{"errorRate": 0.004}"#),
            QueryResult::Scalar(0.004)
        );
        assert_eq!(eval("$", "-12"), QueryResult::Scalar(-12.0));
        assert_eq!(
            eval("$.big", r#"{"big": 18446744073709551615}"#),
            QueryResult::Scalar(18_446_744_073_709_551_615.0)
        );
    }

    #[test]
    fn a_nested_path_and_a_filter_pick_one_value() {
        let body = r#"{"data": {"regions": [
            {"name": "eu-west", "stats": {"errors": 0.02}},
            {"name": "us-east", "stats": {"errors": 0.001}}
        ]}}"#;
        assert_eq!(
            eval("$.data.regions[1].stats.errors", body),
            QueryResult::Scalar(0.001)
        );
        assert_eq!(
            eval("$.data.regions[?@.name == 'eu-west'].stats.errors", body),
            QueryResult::Scalar(0.02)
        );
        assert_eq!(
            eval("$.data.regions[?match(@.name, 'us-.*')].stats.errors", body),
            QueryResult::Scalar(0.001)
        );
    }

    #[test]
    fn booleans_are_one_and_zero() {
        assert_eq!(eval("$.ok", r#"{"ok": true}"#), QueryResult::Scalar(1.0));
        assert_eq!(eval("$.ok", r#"{"ok": false}"#), QueryResult::Scalar(0.0));
    }

    #[test]
    fn a_numeric_string_is_its_number() {
        assert_eq!(eval("$.v", r#"{"v": " 0.25 "}"#), QueryResult::Scalar(0.25));
        assert_eq!(eval("$.v", r#"{"v": "1e-3"}"#), QueryResult::Scalar(0.001));
    }

    #[test]
    fn other_values_are_errors_naming_the_type_never_the_value() {
        for (body, kind) in [
            (format!(r#"{{"v": "{SECRET}"}}"#), "a string"),
            (r#"{"v": "NaN"}"#.to_owned(), "a string"),
            (r#"{"v": "inf"}"#.to_owned(), "a string"),
            (r#"{"v": ""}"#.to_owned(), "a string"),
            (r#"{"v": null}"#.to_owned(), "null"),
            (format!(r#"{{"v": ["{SECRET}"]}}"#), "an array"),
            (format!(r#"{{"v": {{"{SECRET}": 1}}}}"#), "an object"),
        ] {
            let text = error_text(eval("$.v", &body));
            assert!(text.contains(kind), "{body}: {text}");
            assert!(!text.contains(SECRET), "{text}");
            assert!(text.chars().count() <= MAX_ERROR_CHARS, "{text}");
        }
    }

    #[test]
    fn no_match_is_empty() {
        assert_eq!(eval("$.missing", r#"{"v": 1}"#), QueryResult::Empty);
        assert_eq!(eval("$.v[*]", r#"{"v": []}"#), QueryResult::Empty);
        assert_eq!(eval("$.v[?@ > 5]", r#"{"v": [1, 2]}"#), QueryResult::Empty);
    }

    #[test]
    fn several_matches_are_a_vector_labelled_by_path() {
        let result = eval(
            "$.pods[*].rate",
            r#"{"pods": [{"rate": 0.1}, {"rate": "0.2"}, {"rate": true}]}"#,
        );
        let expected: Vec<(Labels, f64)> = [
            ("$['pods'][0]['rate']", 0.1),
            ("$['pods'][1]['rate']", 0.2),
            ("$['pods'][2]['rate']", 1.0),
        ]
        .into_iter()
        .map(|(path, value)| {
            (
                Labels::from([(PATH_LABEL.to_owned(), path.to_owned())]),
                value,
            )
        })
        .collect();
        assert_eq!(result, QueryResult::Vector(expected));
    }

    #[test]
    fn one_bad_element_makes_the_vector_an_error() {
        let text = error_text(eval(
            "$.pods[*].rate",
            &format!(r#"{{"pods": [{{"rate": 0.1}}, {{"rate": "{SECRET}"}}]}}"#),
        ));
        assert_eq!(
            text,
            "match 2 of the 2 values the JSONPath matched is a string that is not a finite number"
        );
    }

    #[test]
    fn path_labels_are_bounded_and_sanitized() {
        let long_key = "k".repeat(1000);
        let body = format!(r#"{{"{long_key}": 1, "a\u001bb": 2}}"#);
        let QueryResult::Vector(elements) = eval("$.*", &body) else {
            panic!("expected a vector");
        };
        assert_eq!(elements.len(), 2);
        for (labels, _) in elements {
            let path = &labels[PATH_LABEL];
            assert!(path.chars().count() <= MAX_LABEL_CHARS, "{path}");
            assert!(!path.chars().any(is_unsafe_to_show), "{path:?}");
        }
    }

    #[test]
    fn too_many_matches_are_an_error() {
        let body = serde_json::to_string(&vec![1; MAX_MATCHES + 1]).unwrap();
        let text = error_text(eval("$[*]", &body));
        assert!(text.contains("1001") && text.contains("1000"), "{text}");
        let body = serde_json::to_string(&vec![1; MAX_MATCHES]).unwrap();
        assert!(matches!(eval("$[*]", &body), QueryResult::Vector(v) if v.len() == MAX_MATCHES));
    }

    #[test]
    fn a_body_that_is_not_json_is_an_error_without_the_body() {
        for body in [
            format!("<html>{SECRET}</html>"),
            format!(r#"{{"v": "{SECRET}"#),
            format!(r#"{{"v": 1}} {SECRET}"#),
            String::new(),
            "   ".to_owned(),
        ] {
            let text = error_text(eval("$.v", &body));
            assert!(text.starts_with("the answer is not JSON: "), "{text}");
            assert!(!text.contains(SECRET), "{text}");
            assert!(text.chars().count() <= MAX_ERROR_CHARS, "{text}");
        }
        let text = error_text(query("$").evaluate(&[0xff, 0xfe, b'{']));
        assert!(text.starts_with("the answer is not JSON: "), "{text}");
    }

    #[test]
    fn deeply_nested_answers_are_refused_not_overflowed() {
        let body = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let text = error_text(eval("$..*", &body));
        assert!(text.starts_with("the answer is not JSON: "), "{text}");
    }

    #[test]
    fn parse_refuses_bad_paths_with_a_bounded_reason() {
        assert_eq!(JsonPathQuery::parse(""), Err(WebGateError::Empty));
        for bad in [
            "data.rate",
            "$.",
            "$[",
            "$.a[?@.b ==]",
            "$.a[?foo(@)]",
            " $.a",
        ] {
            let error = JsonPathQuery::parse(bad).unwrap_err();
            assert!(
                matches!(error, WebGateError::Invalid(_)),
                "{bad}: {error:?}"
            );
            let text = error.to_string();
            assert!(
                text.starts_with("the JSONPath is not valid RFC 9535 JSONPath: "),
                "{text}"
            );
            assert!(
                text.chars().count() <= MAX_ERROR_CHARS + 60,
                "{}",
                text.len()
            );
        }
        let long = format!("$.{}", "a".repeat(MAX_QUERY_BYTES));
        assert!(matches!(
            JsonPathQuery::parse(&long),
            Err(WebGateError::TooLong { .. })
        ));
    }

    #[test]
    fn deep_nesting_is_refused_before_the_recursive_parser() {
        let deep = format!(
            "$[?{}@.a == 1{}]",
            "(".repeat(MAX_NESTING + 5),
            ")".repeat(MAX_NESTING + 5)
        );
        assert_eq!(JsonPathQuery::parse(&deep), Err(WebGateError::TooDeep));
        // Brackets inside string literals do not count.
        let quoted = format!("$['{}']", "(".repeat(MAX_NESTING + 5));
        assert!(JsonPathQuery::parse(&quoted).is_ok());
        // The deepest allowed parses (the filter's `[` is one level).
        let shallow = format!(
            "$[?{}@.a == 1{}]",
            "(".repeat(MAX_NESTING - 1),
            ")".repeat(MAX_NESTING - 1)
        );
        assert!(JsonPathQuery::parse(&shallow).is_ok());
    }

    #[test]
    fn display_is_the_source() {
        let source = "$.data['error rate']";
        let parsed = query(source);
        assert_eq!(parsed.to_string(), source);
        assert_eq!(parsed.as_str(), source);
        assert_eq!(format!("{parsed:?}"), format!("JsonPathQuery({source:?})"));
        assert_eq!(parsed, query(source));
    }

    proptest! {
        #[test]
        fn evaluate_never_panics_on_arbitrary_bytes(
            body in proptest::collection::vec(any::<u8>(), 0..512),
            path in prop::sample::select(vec!["$", "$..*", "$.a", "$[*]", "$..a[0]", "$[?@ > 1]"]),
        ) {
            let _ = query(path).evaluate(&body);
        }

        #[test]
        fn evaluate_never_panics_on_json_like_text(
            body in r#"[\[\]{}",:0-9a-z .eE+\-\\ntruefalsenull]{0,200}"#,
            path in prop::sample::select(vec!["$", "$..*", "$.a", "$[*]", "$..a[0]"]),
        ) {
            let _ = query(path).evaluate(body.as_bytes());
        }

        #[test]
        fn parse_never_panics(source in "\\PC{0,80}") {
            let _ = JsonPathQuery::parse(&source);
        }
    }
}
