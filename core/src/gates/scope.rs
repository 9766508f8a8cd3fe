//! Tenant-scoped gate queries: label matchers a platform admin pins for a hub namespace
//! (`configrollout.dev/gate-label-matchers`), injected into every selector of every query
//! that namespace's rollouts send to the shared Prometheus, the way prom-label-proxy
//! enforces a label.
//!
//! [`scope`] parses a query, adds every enforced matcher to every vector and matrix
//! selector (inside functions, aggregations and their parameters, binary operations,
//! subqueries; `@` and `offset` kept), and prints it back to PromQL. The printed query is
//! parsed again and must be the very query that was scoped, or it is refused: what leaves
//! the controller is exactly what was checked.
//!
//! A query's own matcher on an enforced label: prom-label-proxy replaces it by the
//! enforced one by default (so a query asking for `namespace="team-b"` silently gets
//! `team-a`'s series instead, a gate judging data it did not ask for), or refuses it with
//! `-error-on-replace`. Here a query's matcher that can only narrow the scope is kept beside
//! the enforced one (both hold: `cluster="eu-west"` within `cluster=~"eu-.*"`, or
//! `{{region}}` in a region label), one identical to an enforced matcher is merged into
//! it, and one that can never match together with the enforced matcher (`namespace="team-b"`
//! against `namespace="team-a"`) is refused with [`ScopeError::Conflict`], which names the
//! label. Whatever a query names, it never widens or switches its scope: the enforced
//! matchers are always there.
//!
//! Everything here is pure and bounded: hostile text is an error, never a panic.

use std::borrow::Cow;
use std::fmt;

use promql_parser::label::{MatchOp, Matcher};
use promql_parser::parser::{self, Expr, VectorSelector};

/// Most matchers the annotation may pin.
pub const MAX_MATCHERS: usize = 8;
/// Longest value of a pinned matcher, in characters.
pub const MAX_VALUE_CHARS: usize = 256;
/// Longest label name of a pinned matcher, in characters.
pub const MAX_LABEL_NAME_CHARS: usize = 128;
/// Longest annotation text parsed, in bytes.
const MAX_TEXT_BYTES: usize = 8 * 1024;
/// Longest query scoped, in bytes (a rendered gate query is at most 4096 characters
/// plus its placeholders' values).
pub const MAX_QUERY_BYTES: usize = 16 * 1024;
/// Deepest expression scoped: no gate needs more, and the walk stays well within a stack.
pub const MAX_DEPTH: usize = 128;
/// Longest piece of a query or parser message quoted in an error, in characters.
const MAX_QUOTED_CHARS: usize = 120;
/// The matcher the annotation's matchers are parsed after (and then dropped): a selector
/// needs one that does not match the empty string.
const CARRIER: &str = r#"__configrollout_scope__="1""#;

/// Why matchers cannot be pinned, or a query cannot be scoped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// The annotation names no matcher.
    #[error("names no label matcher (e.g. namespace=\"team-a\")")]
    NoMatchers,
    /// The annotation names more than [`MAX_MATCHERS`].
    #[error("names more than {MAX_MATCHERS} label matchers")]
    TooManyMatchers,
    /// The annotation is longer than anything [`MAX_MATCHERS`] matchers need.
    #[error("is longer than {MAX_TEXT_BYTES} bytes")]
    TextTooLong,
    /// The annotation is not a comma-separated list of PromQL label matchers.
    #[error(
        "is not a comma-separated list of PromQL label matchers such as \
         namespace=\"team-a\", cluster=~\"eu-.*\": {0}"
    )]
    NotMatchers(String),
    /// A label name that is not a Prometheus label name.
    #[error(
        "{0:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, at most \
         {MAX_LABEL_NAME_CHARS} characters)"
    )]
    LabelName(String),
    /// `__name__` or another reserved label.
    #[error(
        "label {0} is reserved (names beginning with __, the metric name among them, cannot \
         scope a namespace)"
    )]
    ReservedLabel(String),
    /// A matcher's value is longer than [`MAX_VALUE_CHARS`].
    #[error("the value of label {0} is longer than {MAX_VALUE_CHARS} characters")]
    ValueTooLong(String),
    /// Two pinned matchers on one label that no value satisfies together.
    #[error("{0} and {1} can never both match: the scope would select nothing")]
    Contradiction(String, String),
    /// The query is longer than [`MAX_QUERY_BYTES`].
    #[error("the query is longer than {MAX_QUERY_BYTES} bytes")]
    QueryTooLong,
    /// The query is not PromQL.
    #[error("not valid PromQL: {0}")]
    Unparsable(String),
    /// The query nests deeper than [`MAX_DEPTH`].
    #[error("the query nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// A selector with `or` between its matchers (not Prometheus PromQL).
    #[error("a selector with `or` between its label matchers cannot be scoped")]
    OrMatchers,
    /// A function that reads series no selector names.
    #[error("{0}() reads series that no selector of the query names, so it cannot be scoped")]
    Function(&'static str),
    /// A query's own matcher on an enforced label can never match with the enforced one.
    #[error(
        "the query's matcher {query} on label {label} can never match the scope's {enforced}: \
         a query may narrow label {label} within its scope, never leave it"
    )]
    Conflict {
        /// The label.
        label: String,
        /// The query's matcher, bounded.
        query: String,
        /// The enforced matcher.
        enforced: String,
    },
    /// The scoped query does not print back to itself (a printer limitation, such as an
    /// `@` time before 1970 or finer than a millisecond).
    #[error(
        "the scoped query cannot be printed back to PromQL faithfully (an `@` time before \
         1970 or finer than a millisecond?)"
    )]
    NotFaithful,
}

/// A validated set of label matchers pinned for a namespace (the annotation's text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matchers(Vec<Matcher>);

impl Matchers {
    /// Parses the annotation's text: comma-separated PromQL label matchers
    /// (`namespace="team-a", cluster=~"eu-.*"`), at most [`MAX_MATCHERS`], each on a
    /// Prometheus label name other than a reserved one (`__name__`...), each value at most
    /// [`MAX_VALUE_CHARS`], each regex compiling. Matchers on one label that no value
    /// satisfies together are refused.
    pub fn parse(text: &str) -> Result<Matchers, ScopeError> {
        if text.len() > MAX_TEXT_BYTES {
            return Err(ScopeError::TextTooLong);
        }
        if text.trim().trim_matches(',').trim().is_empty() {
            return Err(ScopeError::NoMatchers);
        }
        // Parsed as the matchers of a selector, so quoting, escapes and regexes are read
        // exactly as in a query. Text that closes the braces early (`a="b"} or x{`) no
        // longer parses as one plain selector and is refused below.
        let selector = match parser::parse(&format!("{{{CARRIER},{text}}}")) {
            Ok(Expr::VectorSelector(selector)) => selector,
            Ok(_) => {
                return Err(ScopeError::NotMatchers(
                    "it does not read as label matchers alone".to_owned(),
                ));
            }
            Err(error) => return Err(ScopeError::NotMatchers(quoted(&error))),
        };
        let VectorSelector {
            name,
            matchers,
            offset,
            at,
        } = selector;
        let mut own = matchers.matchers.into_iter();
        let carried = own.next().map(|carrier| carrier.to_string());
        if name.is_some() || offset.is_some() || at.is_some() || carried.as_deref() != Some(CARRIER)
        {
            return Err(ScopeError::NotMatchers(
                "it does not read as label matchers alone".to_owned(),
            ));
        }
        if !matchers.or_matchers.is_empty() {
            return Err(ScopeError::NotMatchers(
                "`or` between matchers is not PromQL".to_owned(),
            ));
        }
        if own.len() > MAX_MATCHERS {
            return Err(ScopeError::TooManyMatchers);
        }
        let mut pinned: Vec<Matcher> = Vec::with_capacity(own.len());
        for matcher in own {
            if matcher.name.starts_with("__") {
                return Err(ScopeError::ReservedLabel(bounded(&matcher.name)));
            }
            if !is_label_name(&matcher.name) {
                return Err(ScopeError::LabelName(bounded(&matcher.name)));
            }
            if matcher.value.chars().nth(MAX_VALUE_CHARS).is_some() {
                return Err(ScopeError::ValueTooLong(matcher.name));
            }
            if let Some(other) = pinned
                .iter()
                .find(|other| other.name == matcher.name && disjoint(other, &matcher))
            {
                return Err(ScopeError::Contradiction(
                    other.to_string(),
                    matcher.to_string(),
                ));
            }
            if !pinned.contains(&matcher) {
                pinned.push(matcher);
            }
        }
        if pinned.is_empty() {
            return Err(ScopeError::NoMatchers);
        }
        Ok(Matchers(pinned))
    }

    /// Whether `selector` (of a scoped query) carries every pinned matcher.
    #[cfg(test)]
    fn carried_by(&self, selector: &VectorSelector) -> bool {
        self.0
            .iter()
            .all(|pinned| selector.matchers.matchers.contains(pinned))
    }
}

impl fmt::Display for Matchers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, matcher) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{matcher}")?;
        }
        Ok(())
    }
}

/// `query` with every matcher of `matchers` in every selector, printed back to PromQL.
/// See the module's documentation for a query's own matchers on an enforced label.
pub fn scope(query: &str, matchers: &Matchers) -> Result<String, ScopeError> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(ScopeError::QueryTooLong);
    }
    let mut expression =
        parser::parse(query).map_err(|error| ScopeError::Unparsable(quoted(&error)))?;
    inject(&mut expression, matchers, 0)?;
    let printed = expression.to_string();
    match parser::parse(&printed) {
        Ok(again) if again == expression => Ok(printed),
        _ => Err(ScopeError::NotFaithful),
    }
}

/// `query` scoped when the namespace pins matchers, as it is otherwise.
pub fn scope_if<'q>(
    query: &'q str,
    matchers: Option<&Matchers>,
) -> Result<Cow<'q, str>, ScopeError> {
    match matchers {
        None => Ok(Cow::Borrowed(query)),
        Some(matchers) => scope(query, matchers).map(Cow::Owned),
    }
}

/// Adds the pinned matchers to every selector under `expression`.
fn inject(expression: &mut Expr, matchers: &Matchers, depth: usize) -> Result<(), ScopeError> {
    let depth = depth.saturating_add(1);
    if depth > MAX_DEPTH {
        return Err(ScopeError::TooDeep);
    }
    match expression {
        Expr::Aggregate(aggregate) => {
            // A parameter is an expression too: `topk(scalar(other), x)`.
            if let Some(parameter) = aggregate.param.as_deref_mut() {
                inject(parameter, matchers, depth)?;
            }
            inject(&mut aggregate.expr, matchers, depth)
        }
        Expr::Unary(unary) => inject(&mut unary.expr, matchers, depth),
        Expr::Binary(binary) => {
            inject(&mut binary.lhs, matchers, depth)?;
            inject(&mut binary.rhs, matchers, depth)
        }
        Expr::Paren(paren) => inject(&mut paren.expr, matchers, depth),
        Expr::Subquery(subquery) => inject(&mut subquery.expr, matchers, depth),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Ok(()),
        Expr::VectorSelector(selector) => enforce(selector, matchers),
        Expr::MatrixSelector(range) => enforce(&mut range.vs, matchers),
        Expr::Call(call) => {
            // info() joins series (target_info) that its arguments do not select.
            if call.func.name == "info" {
                return Err(ScopeError::Function("info"));
            }
            for argument in &mut call.args.args {
                inject(argument, matchers, depth)?;
            }
            Ok(())
        }
        // The parser never makes one; nothing unknown leaves unscoped.
        Expr::Extension(_) => Err(ScopeError::Unparsable(
            "an expression this controller does not know".to_owned(),
        )),
    }
}

/// Adds the pinned matchers to one selector: its own matchers identical to a pinned one
/// are merged into it, those that only narrow are kept, those that can never match with
/// a pinned one are refused.
fn enforce(selector: &mut VectorSelector, matchers: &Matchers) -> Result<(), ScopeError> {
    if !selector.matchers.or_matchers.is_empty() {
        return Err(ScopeError::OrMatchers);
    }
    let own = &mut selector.matchers.matchers;
    own.retain(|matcher| !matchers.0.contains(matcher));
    for matcher in own.iter() {
        if let Some(pinned) = matchers
            .0
            .iter()
            .find(|pinned| pinned.name == matcher.name && disjoint(matcher, pinned))
        {
            return Err(ScopeError::Conflict {
                label: pinned.name.clone(),
                query: bounded(&matcher.to_string()),
                enforced: pinned.to_string(),
            });
        }
    }
    own.extend(matchers.0.iter().cloned());
    // In the order they are printed in (sorted), so that the query parsed back from the
    // printed text is this one, matcher for matcher.
    own.sort_by_cached_key(ToString::to_string);
    Ok(())
}

/// Whether two matchers on one label are seen never to match one value together: one is
/// an equality whose value the other refuses. (Two regexes or negations are never judged
/// here: both are kept, and their intersection, possibly empty, is what is selected.)
fn disjoint(a: &Matcher, b: &Matcher) -> bool {
    match (&a.op, &b.op) {
        (_, MatchOp::Equal) => !a.is_match(&b.value),
        (MatchOp::Equal, _) => !b.is_match(&a.value),
        _ => false,
    }
}

/// A Prometheus label name (the classic charset, which every Prometheus reads).
fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_LABEL_NAME_CHARS
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `text` cut to [`MAX_QUOTED_CHARS`], control characters blanked.
fn bounded(text: &str) -> String {
    let mut kept: String = text
        .chars()
        .take(MAX_QUOTED_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(MAX_QUOTED_CHARS).is_some() {
        kept.push('…');
    }
    kept
}

/// A parser message, bounded.
fn quoted(message: &str) -> String {
    bounded(message)
}

/// Every selector of `expression` (for tests: each carries the pinned matchers).
#[cfg(test)]
fn selectors(expression: &Expr, found: &mut Vec<VectorSelector>) {
    match expression {
        Expr::Aggregate(aggregate) => {
            if let Some(parameter) = aggregate.param.as_deref() {
                selectors(parameter, found);
            }
            selectors(&aggregate.expr, found);
        }
        Expr::Unary(unary) => selectors(&unary.expr, found),
        Expr::Binary(binary) => {
            selectors(&binary.lhs, found);
            selectors(&binary.rhs, found);
        }
        Expr::Paren(paren) => selectors(&paren.expr, found),
        Expr::Subquery(subquery) => selectors(&subquery.expr, found),
        Expr::VectorSelector(selector) => found.push(selector.clone()),
        Expr::MatrixSelector(range) => found.push(range.vs.clone()),
        Expr::Call(call) => {
            for argument in &call.args.args {
                selectors(argument, found);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tenant_a() -> Matchers {
        Matchers::parse(r#"namespace="tenant-a""#).unwrap()
    }

    fn scoped(query: &str) -> String {
        scope(query, &tenant_a()).unwrap()
    }

    /// Every selector of the scoped `query` carries `matchers`; the selectors found.
    fn assert_carried(query: &str, matchers: &Matchers) -> usize {
        let expression = parser::parse(query).unwrap();
        let mut found = Vec::new();
        selectors(&expression, &mut found);
        for selector in &found {
            assert!(matchers.carried_by(selector), "{selector} in {query}");
        }
        found.len()
    }

    #[test]
    fn the_issue_example_is_scoped_on_both_sides() {
        let query = scoped("up * on(job) group_left up");
        assert_eq!(
            query,
            r#"up{namespace="tenant-a"} * on (job) group_left () up{namespace="tenant-a"}"#
        );
        assert_eq!(assert_carried(&query, &tenant_a()), 2);
    }

    #[test]
    fn subqueries_keep_their_range_step_at_and_offset() {
        let query =
            scoped("max_over_time(rate(http_requests_total[5m])[1h:1m] @ start() offset 5m)");
        assert_eq!(
            query,
            r#"max_over_time(rate(http_requests_total{namespace="tenant-a"}[5m])[1h:1m] @ start() offset 5m)"#
        );
        let at = scoped("sum(errors @ end()) / sum(errors offset 1h)");
        assert_eq!(
            at,
            r#"sum(errors{namespace="tenant-a"} @ end()) / sum(errors{namespace="tenant-a"} offset 1h)"#
        );
        let matrix = scoped("rate(x[5m] @ start())");
        assert_eq!(matrix, r#"rate(x{namespace="tenant-a"}[5m] @ start())"#);
    }

    #[test]
    fn absent_and_label_replace_are_scoped() {
        assert_eq!(
            scoped(r#"absent(up{job="api"})"#),
            r#"absent(up{job="api",namespace="tenant-a"})"#
        );
        let replaced = scoped(r#"label_replace(up, "namespace", "tenant-b", "job", "(.*)") > 0"#);
        assert_eq!(
            replaced,
            r#"label_replace(up{namespace="tenant-a"}, "namespace", "tenant-b", "job", "(.*)") > 0"#
        );
    }

    #[test]
    fn aggregation_parameters_are_scoped_too() {
        let query = scoped("topk(scalar(count(other)), errors)");
        assert_eq!(assert_carried(&query, &tenant_a()), 2, "{query}");
        let quantile = scoped("quantile by (job) (scalar(max(q)), latency)");
        assert_eq!(assert_carried(&quantile, &tenant_a()), 2, "{quantile}");
    }

    #[test]
    fn selectors_without_a_metric_name_are_scoped() {
        let query = scoped(r#"count({__name__=~"configrollout_.+"})"#);
        assert_eq!(
            query,
            r#"count({__name__=~"configrollout_.+",namespace="tenant-a"})"#
        );
    }

    #[test]
    fn a_query_that_already_names_the_label() {
        // The same matcher: merged.
        assert_eq!(
            scoped(r#"sum(load{namespace="tenant-a"})"#),
            r#"sum(load{namespace="tenant-a"})"#
        );
        // Another namespace: refused, naming the label; never switched to, never widened.
        let error = scope(r#"sum(load{namespace="tenant-b"})"#, &tenant_a()).unwrap_err();
        assert!(
            matches!(&error, ScopeError::Conflict { label, .. } if label == "namespace"),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(text.contains(r#"namespace="tenant-b""#), "{text}");
        assert!(text.contains("label namespace"), "{text}");
        for other in [
            r#"load{namespace=~"tenant-b|tenant-c"}"#,
            r#"load{namespace!="tenant-a"}"#,
            r#"load{namespace=""}"#,
            r#"rate(load{namespace=~"b.*"}[5m])"#,
        ] {
            assert!(
                matches!(scope(other, &tenant_a()), Err(ScopeError::Conflict { .. })),
                "{other}"
            );
        }
        // A matcher that only narrows (or repeats) the scope is kept beside it.
        assert_eq!(
            scoped(r#"load{namespace=~"tenant-.*"}"#),
            r#"load{namespace="tenant-a",namespace=~"tenant-.*"}"#
        );
        assert_eq!(
            scoped(r#"load{namespace!="tenant-b"}"#),
            r#"load{namespace!="tenant-b",namespace="tenant-a"}"#
        );
    }

    #[test]
    fn a_regex_scope_keeps_a_narrower_equality_and_refuses_one_outside() {
        let eu = Matchers::parse(r#"cluster=~"eu-.*", namespace="team-a""#).unwrap();
        assert_eq!(
            scope(r#"x{cluster="eu-west"}"#, &eu).unwrap(),
            r#"x{cluster="eu-west",cluster=~"eu-.*",namespace="team-a"}"#
        );
        let error = scope(r#"x{cluster="us-east"}"#, &eu).unwrap_err();
        assert!(
            matches!(&error, ScopeError::Conflict { label, .. } if label == "cluster"),
            "{error:?}"
        );
        // Two regexes cannot be judged: both hold, the intersection is what is selected.
        assert_eq!(
            scope(r#"x{cluster=~"us-.*"}"#, &eu).unwrap(),
            r#"x{cluster=~"eu-.*",cluster=~"us-.*",namespace="team-a"}"#
        );
    }

    #[test]
    fn functions_reading_unselected_series_and_or_selectors_are_refused() {
        assert_eq!(
            scope("info(up)", &tenant_a()),
            Err(ScopeError::Function("info"))
        );
        assert_eq!(
            scope(r#"x{a="1" or b="2"}"#, &tenant_a()),
            Err(ScopeError::OrMatchers)
        );
        assert!(matches!(
            scope("sum(", &tenant_a()),
            Err(ScopeError::Unparsable(_))
        ));
    }

    #[test]
    fn literals_and_time_need_no_scope() {
        assert_eq!(scoped("1 + 2"), "1 + 2");
        assert_eq!(scoped("vector(time())"), "vector(time())");
    }

    #[test]
    fn unprintable_at_times_are_refused_not_sent_differently() {
        assert_eq!(scope("x @ -100", &tenant_a()), Err(ScopeError::NotFaithful));
        assert!(scope("x @ 1700000000.5", &tenant_a()).is_ok());
    }

    #[test]
    fn nesting_and_length_are_bounded() {
        let deep = format!("{}x{}", "(".repeat(200), ")".repeat(200));
        assert_eq!(scope(&deep, &tenant_a()), Err(ScopeError::TooDeep));
        let chain = vec!["x"; 300].join(" + ");
        assert_eq!(scope(&chain, &tenant_a()), Err(ScopeError::TooDeep));
        let long = "x".repeat(MAX_QUERY_BYTES + 1);
        assert_eq!(scope(&long, &tenant_a()), Err(ScopeError::QueryTooLong));
    }

    #[test]
    fn scope_if_leaves_an_unscoped_namespace_alone() {
        assert_eq!(scope_if("up", None).unwrap(), "up");
        assert_eq!(
            scope_if("up", Some(&tenant_a())).unwrap(),
            r#"up{namespace="tenant-a"}"#
        );
    }

    #[test]
    fn the_annotation_parses_matchers_and_refuses_the_rest() {
        let parsed = Matchers::parse(r#" namespace="team-a", cluster=~"eu-.*" ,"#).unwrap();
        assert_eq!(
            parsed.to_string(),
            r#"namespace="team-a", cluster=~"eu-.*""#
        );
        let commas = Matchers::parse(r#"team="a,b""#).unwrap();
        assert_eq!(commas.to_string(), r#"team="a,b""#);
        // Repeated matchers are one.
        assert_eq!(
            Matchers::parse(r#"a="1",a="1""#).unwrap().to_string(),
            r#"a="1""#
        );
        let nine = (0..9)
            .map(|i| format!(r#"l{i}="v""#))
            .collect::<Vec<_>>()
            .join(",");
        let long_value = format!(r#"a="{}""#, "v".repeat(MAX_VALUE_CHARS + 1));
        let long_name = format!(r#"{}="v""#, "l".repeat(MAX_LABEL_NAME_CHARS + 1));
        for (text, expected) in [
            ("", ScopeError::NoMatchers),
            (" , ", ScopeError::NoMatchers),
            (nine.as_str(), ScopeError::TooManyMatchers),
            (
                r#"__name__="up""#,
                ScopeError::ReservedLabel("__name__".to_owned()),
            ),
            (
                r#"__tenant__="a""#,
                ScopeError::ReservedLabel("__tenant__".to_owned()),
            ),
            (
                r#""service.name"="a""#,
                ScopeError::LabelName("service.name".to_owned()),
            ),
            (
                long_value.as_str(),
                ScopeError::ValueTooLong("a".to_owned()),
            ),
            (
                r#"a="1", a="2""#,
                ScopeError::Contradiction(r#"a="1""#.to_owned(), r#"a="2""#.to_owned()),
            ),
        ] {
            assert_eq!(Matchers::parse(text), Err(expected), "{text:?}");
        }
        for text in [
            r#"a=~"(""#,
            r#"a="b"} or other{x="y""#,
            r#"a="b"}[5m"#,
            r#"a="b"} offset 5m #"#,
            r#"a="b" or c="d""#,
            "a",
            r#"a="b""#.repeat(2000).as_str(),
        ] {
            assert!(Matchers::parse(text).is_err(), "{text:?}");
        }
        assert!(matches!(
            Matchers::parse(&long_name),
            Err(ScopeError::LabelName(name)) if name.ends_with('…')
        ));
        assert_eq!(
            Matchers::parse(&"a".repeat(MAX_TEXT_BYTES + 1)),
            Err(ScopeError::TextTooLong)
        );
    }

    /// Queries built from PromQL's parts, with the enforced label sometimes named.
    fn query() -> impl Strategy<Value = String> {
        let metric = prop::sample::select(vec!["up", "load", "http_requests_total"]);
        let label = prop::sample::select(vec!["job", "namespace", "cluster"]);
        let value = prop::sample::select(vec!["tenant-a", "tenant-b", "api", "eu-1", ""]);
        let op = prop::sample::select(vec!["=", "!=", "=~", "!~"]);
        let matcher = (label, op, value).prop_map(|(l, o, v)| format!(r#"{l}{o}"{v}""#));
        let selector = (metric, prop::collection::vec(matcher, 0..3)).prop_map(|(m, ms)| {
            if ms.is_empty() {
                m.to_owned()
            } else {
                format!("{m}{{{}}}", ms.join(","))
            }
        });
        let leaf = prop_oneof![
            4 => selector.clone(),
            1 => (selector.clone(), prop::sample::select(vec!["5m", "1h"]))
                .prop_map(|(s, r)| format!("rate({s}[{r}])")),
            1 => (selector, prop::sample::select(vec!["@ start()", "offset 5m", "@ 1700000000"]))
                .prop_map(|(s, m)| format!("{s} {m}")),
            1 => (0_u32..1000).prop_map(|n| format!("vector({n})")),
        ];
        leaf.prop_recursive(4, 24, 3, |inner| {
            prop_oneof![
                (
                    inner.clone(),
                    prop::sample::select(vec!["sum", "max", "count"])
                )
                    .prop_map(|(e, a)| format!("{a}({e})")),
                (
                    inner.clone(),
                    inner.clone(),
                    prop::sample::select(vec![
                        " + ",
                        " * on(job) group_left ",
                        " / ignoring(pod) ",
                        " and ",
                        " > bool "
                    ])
                )
                    .prop_map(|(a, b, o)| format!("({a}){o}({b})")),
                inner.clone().prop_map(|e| format!("absent({e})")),
                inner
                    .clone()
                    .prop_map(|e| format!("max_over_time(({e})[10m:1m])")),
                inner.clone().prop_map(|e| format!("topk(3, {e})")),
                inner
                    .clone()
                    .prop_map(|e| format!(r#"label_replace({e}, "namespace", "x", "", "")"#)),
                inner.prop_map(|e| format!("-({e})")),
            ]
        })
    }

    proptest! {
        #[test]
        fn a_scoped_query_parses_carries_every_matcher_and_is_a_fixed_point(query in query()) {
            let matchers = Matchers::parse(r#"namespace="tenant-a", cluster=~"eu-.*""#).unwrap();
            // Parsable by construction, or a type error the parser refuses (`1 and 2`).
            prop_assume!(parser::parse(&query).is_ok());
            match scope(&query, &matchers) {
                Ok(scoped) => {
                    prop_assert!(parser::parse(&scoped).is_ok(), "{scoped}");
                    assert_carried(&scoped, &matchers);
                    prop_assert_eq!(scope(&scoped, &matchers), Ok(scoped.clone()));
                }
                Err(ScopeError::Conflict { label, .. }) => {
                    prop_assert!(label == "namespace" || label == "cluster");
                }
                Err(other) => prop_assert!(false, "{query}: {other}"),
            }
        }

        #[test]
        fn hostile_queries_never_panic(query in "\\PC{0,200}") {
            let _ = scope(&query, &tenant_a());
        }

        #[test]
        fn hostile_promql_shaped_text_never_panics(
            query in "[a-z_(){}\\[\\]\"=~!,.:@+*/^<> 0-9-]{0,120}"
        ) {
            if let Ok(scoped) = scope(&query, &tenant_a()) {
                prop_assert!(parser::parse(&scoped).is_ok());
                assert_carried(&scoped, &tenant_a());
            }
        }

        #[test]
        fn hostile_annotations_never_panic(text in "\\PC{0,200}") {
            if let Ok(matchers) = Matchers::parse(&text) {
                prop_assert!(Matchers::parse(&matchers.to_string()).is_ok());
            }
        }
    }
}
