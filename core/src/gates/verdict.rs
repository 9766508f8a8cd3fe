//! The verdict of one gate sample: a pure function from a query result and a condition
//! to Successful, Failed or Inconclusive.
//!
//! The rule, chosen to fail closed:
//! - a query error, an empty result (no series, or an empty vector) or a partial answer
//!   (the backend warned that it may be missing data) is **Inconclusive**;
//! - `result` in a comparison outside `all(...)`/`any(...)` is the scalar, or the single
//!   element of a one-element vector; applied to a vector of two or more elements it is
//!   ambiguous and therefore **Inconclusive** (write `all(...)` or `any(...)` to say which);
//! - `all(c)` holds when `c` holds for every element, `any(c)` when it holds for at least
//!   one; a scalar counts as a one-element vector;
//! - a NaN value (or infinite value) makes a comparison *unknown*. Unknowns combine with
//!   three-valued (Kleene) logic: `false and unknown` is false, `true or unknown` is true,
//!   anything else involving an unknown stays unknown, `all` is false as soon as one
//!   element is known to fail, and `any` is true as soon as one is known to pass;
//! - a known true is **Successful**, a known false **Failed**, an unknown **Inconclusive**.
//!
//! So an inconclusive sample never counts as a success: only a result whose truth does
//! not depend on the missing data can pass.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::condition::Condition;

/// The labels of one series of a vector result.
pub type Labels = BTreeMap<String, String>;

/// What a metrics query returned, independent of the metrics backend.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryResult {
    /// A single number.
    Scalar(f64),
    /// An instant vector: one value per series.
    Vector(Vec<(Labels, f64)>),
    /// The query matched no series.
    Empty,
    /// The query could not be run (backend error, timeout, unreachable).
    Error(String),
    /// The backend answered but warned that the answer may be missing data (Prometheus
    /// `warnings`: a store of Thanos or Cortex, or a remote read, did not answer). The
    /// text says why, bounded; the data is not used.
    Partial(String),
}

/// A query result with the time the backend evaluated it, by the backend's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// What the query returned.
    pub result: QueryResult,
    /// When the backend evaluated the query (Prometheus: the earliest timestamp of the
    /// answer's samples); `None` when the answer carries no sample (an error, no series)
    /// or the backend gives no time.
    pub evaluated_at: Option<DateTime<Utc>>,
}

impl From<QueryResult> for Answer {
    fn from(result: QueryResult) -> Self {
        Answer {
            result,
            evaluated_at: None,
        }
    }
}

impl QueryResult {
    /// A value to record next to the verdict: the scalar, the single element of a
    /// one-element vector, or the largest finite element of a larger vector.
    pub fn representative_value(&self) -> Option<f64> {
        match self {
            QueryResult::Scalar(value) => Some(*value).filter(|v| v.is_finite()),
            QueryResult::Vector(elements) => elements
                .iter()
                .map(|(_, value)| *value)
                .filter(|v| v.is_finite())
                .reduce(f64::max),
            QueryResult::Empty | QueryResult::Error(_) | QueryResult::Partial(_) => None,
        }
    }
}

/// The verdict of one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The condition holds.
    Successful,
    /// The condition does not hold.
    Failed,
    /// The data does not decide the condition.
    Inconclusive,
}

/// Why a sample was inconclusive, for status messages (never carries query output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InconclusiveReason {
    /// The query failed or the backend was unreachable.
    QueryError,
    /// No series matched.
    NoData,
    /// A value was NaN or infinite and the condition depended on it.
    NotANumber,
    /// A bare `result` comparison met a vector of several series.
    AmbiguousVector,
    /// The backend warned that its answer may be missing data.
    PartialAnswer,
}

impl InconclusiveReason {
    /// A short, stable description.
    pub fn as_str(self) -> &'static str {
        match self {
            InconclusiveReason::QueryError => "query error",
            InconclusiveReason::NoData => "no data",
            InconclusiveReason::NotANumber => "NaN or infinite value",
            InconclusiveReason::AmbiguousVector => {
                "several series for a bare `result` comparison; use all() or any()"
            }
            InconclusiveReason::PartialAnswer => "partial answer",
        }
    }
}

/// The evaluation of one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Successful, Failed or Inconclusive.
    pub verdict: Verdict,
    /// The value to record (see [`QueryResult::representative_value`]).
    pub value: Option<f64>,
    /// Set when the verdict is Inconclusive.
    pub reason: Option<InconclusiveReason>,
}

/// Evaluates `condition` against one query result.
pub fn evaluate(condition: &Condition, result: &QueryResult) -> Evaluation {
    let value = result.representative_value();
    let elements: Vec<f64> = match result {
        QueryResult::Error(_) => return inconclusive(value, InconclusiveReason::QueryError),
        QueryResult::Empty => return inconclusive(value, InconclusiveReason::NoData),
        QueryResult::Partial(_) => return inconclusive(value, InconclusiveReason::PartialAnswer),
        QueryResult::Scalar(value) => vec![*value],
        QueryResult::Vector(series) if series.is_empty() => {
            return inconclusive(value, InconclusiveReason::NoData);
        }
        QueryResult::Vector(series) => series.iter().map(|(_, value)| *value).collect(),
    };
    let mut reason = None;
    let truth = truth_over_vector(condition, &elements, &mut reason);
    match truth {
        Truth::True => Evaluation {
            verdict: Verdict::Successful,
            value,
            reason: None,
        },
        Truth::False => Evaluation {
            verdict: Verdict::Failed,
            value,
            reason: None,
        },
        Truth::Unknown => inconclusive(value, reason.unwrap_or(InconclusiveReason::NotANumber)),
    }
}

fn inconclusive(value: Option<f64>, reason: InconclusiveReason) -> Evaluation {
    Evaluation {
        verdict: Verdict::Inconclusive,
        value,
        reason: Some(reason),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    fn and(self, other: Truth) -> Truth {
        match (self, other) {
            (Truth::False, _) | (_, Truth::False) => Truth::False,
            (Truth::True, Truth::True) => Truth::True,
            _ => Truth::Unknown,
        }
    }

    fn or(self, other: Truth) -> Truth {
        match (self, other) {
            (Truth::True, _) | (_, Truth::True) => Truth::True,
            (Truth::False, Truth::False) => Truth::False,
            _ => Truth::Unknown,
        }
    }
}

/// Evaluates at the top level, where `result` is the whole (possibly multi-element) result.
fn truth_over_vector(
    condition: &Condition,
    elements: &[f64],
    reason: &mut Option<InconclusiveReason>,
) -> Truth {
    match condition {
        Condition::Compare { .. } => match elements {
            [single] => truth_of_element(condition, *single, reason),
            _ => {
                reason.get_or_insert(InconclusiveReason::AmbiguousVector);
                Truth::Unknown
            }
        },
        Condition::All(inner) => elements
            .iter()
            .map(|value| truth_of_element(inner, *value, reason))
            .fold(Truth::True, Truth::and),
        Condition::Any(inner) => elements
            .iter()
            .map(|value| truth_of_element(inner, *value, reason))
            .fold(Truth::False, Truth::or),
        Condition::And(left, right) => truth_over_vector(left, elements, reason)
            .and(truth_over_vector(right, elements, reason)),
        Condition::Or(left, right) => {
            truth_over_vector(left, elements, reason).or(truth_over_vector(right, elements, reason))
        }
    }
}

/// Evaluates with `result` bound to one element.
fn truth_of_element(
    condition: &Condition,
    value: f64,
    reason: &mut Option<InconclusiveReason>,
) -> Truth {
    match condition {
        Condition::Compare { op, threshold } => {
            if !value.is_finite() {
                reason.get_or_insert(InconclusiveReason::NotANumber);
                Truth::Unknown
            } else if op.holds(value, *threshold) {
                Truth::True
            } else {
                Truth::False
            }
        }
        // The parser refuses nested quantifiers; a hand-built tree that nests them means
        // the same thing on one element as the inner condition.
        Condition::All(inner) | Condition::Any(inner) => truth_of_element(inner, value, reason),
        Condition::And(left, right) => {
            truth_of_element(left, value, reason).and(truth_of_element(right, value, reason))
        }
        Condition::Or(left, right) => {
            truth_of_element(left, value, reason).or(truth_of_element(right, value, reason))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(condition: &str, result: QueryResult) -> Verdict {
        evaluate(&Condition::parse(condition).unwrap(), &result).verdict
    }

    fn vector(values: &[f64]) -> QueryResult {
        QueryResult::Vector(
            values
                .iter()
                .enumerate()
                .map(|(index, value)| {
                    let labels = Labels::from([("pod".to_string(), format!("p{index}"))]);
                    (labels, *value)
                })
                .collect(),
        )
    }

    #[test]
    fn a_scalar_is_compared_directly() {
        assert_eq!(
            verdict("result < 0.01", QueryResult::Scalar(0.001)),
            Verdict::Successful
        );
        assert_eq!(
            verdict("result < 0.01", QueryResult::Scalar(0.5)),
            Verdict::Failed
        );
    }

    #[test]
    fn no_data_and_errors_are_inconclusive() {
        let empty = evaluate(
            &Condition::parse("result < 1").unwrap(),
            &QueryResult::Empty,
        );
        assert_eq!(empty.verdict, Verdict::Inconclusive);
        assert_eq!(empty.reason, Some(InconclusiveReason::NoData));
        assert_eq!(verdict("result < 1", vector(&[])), Verdict::Inconclusive);
        assert_eq!(
            verdict("all(result < 1)", vector(&[])),
            Verdict::Inconclusive
        );
        let error = evaluate(
            &Condition::parse("result < 1").unwrap(),
            &QueryResult::Error("timeout".into()),
        );
        assert_eq!(error.verdict, Verdict::Inconclusive);
        assert_eq!(error.reason, Some(InconclusiveReason::QueryError));
    }

    #[test]
    fn a_partial_answer_is_inconclusive_whatever_the_condition() {
        let partial = QueryResult::Partial("1 warning: store unavailable".into());
        for condition in ["result < 1", "result >= 0 or result < 0", "all(result < 1)"] {
            let evaluation = evaluate(&Condition::parse(condition).unwrap(), &partial);
            assert_eq!(evaluation.verdict, Verdict::Inconclusive, "{condition}");
            assert_eq!(evaluation.reason, Some(InconclusiveReason::PartialAnswer));
            assert_eq!(evaluation.value, None);
        }
    }

    #[test]
    fn nan_is_inconclusive_not_a_pass() {
        assert_eq!(
            verdict("result < 1", QueryResult::Scalar(f64::NAN)),
            Verdict::Inconclusive
        );
        // `!=` is true for NaN in IEEE arithmetic; the gate must still not pass.
        assert_eq!(
            verdict("result != 5", QueryResult::Scalar(f64::NAN)),
            Verdict::Inconclusive
        );
        assert_eq!(
            verdict("all(result < 1)", vector(&[0.1, f64::NAN])),
            Verdict::Inconclusive
        );
    }

    #[test]
    fn a_bare_comparison_on_several_series_is_inconclusive() {
        let evaluation = evaluate(
            &Condition::parse("result < 1").unwrap(),
            &vector(&[0.1, 0.2]),
        );
        assert_eq!(evaluation.verdict, Verdict::Inconclusive);
        assert_eq!(evaluation.reason, Some(InconclusiveReason::AmbiguousVector));
        assert_eq!(verdict("result < 1", vector(&[0.1])), Verdict::Successful);
    }

    #[test]
    fn all_and_any_quantify_over_the_series() {
        assert_eq!(
            verdict("all(result < 1)", vector(&[0.1, 0.2])),
            Verdict::Successful
        );
        assert_eq!(
            verdict("all(result < 1)", vector(&[0.1, 2.0])),
            Verdict::Failed
        );
        assert_eq!(
            verdict("any(result > 1)", vector(&[0.1, 2.0])),
            Verdict::Successful
        );
        assert_eq!(
            verdict("any(result > 5)", vector(&[0.1, 2.0])),
            Verdict::Failed
        );
        assert_eq!(
            verdict("all(result < 1)", QueryResult::Scalar(0.5)),
            Verdict::Successful
        );
    }

    #[test]
    fn unknowns_follow_three_valued_logic() {
        // One element known to fail decides `all` even when another is NaN.
        assert_eq!(
            verdict("all(result < 1)", vector(&[f64::NAN, 3.0])),
            Verdict::Failed
        );
        // One element known to pass decides `any` even when another is NaN.
        assert_eq!(
            verdict("any(result < 1)", vector(&[f64::NAN, 0.5])),
            Verdict::Successful
        );
        assert_eq!(
            verdict("any(result < 1)", vector(&[f64::NAN, 3.0])),
            Verdict::Inconclusive
        );
        assert_eq!(
            verdict("result > 0 or result < 1", QueryResult::Scalar(f64::NAN)),
            Verdict::Inconclusive
        );
    }

    #[test]
    fn and_or_combine_verdicts_with_precedence() {
        assert_eq!(
            verdict(
                "result < 1 or result > 5 and result < 9",
                QueryResult::Scalar(0.5)
            ),
            Verdict::Successful
        );
        assert_eq!(
            verdict(
                "(result < 1 or result > 5) and result > 0.7",
                QueryResult::Scalar(0.5)
            ),
            Verdict::Failed
        );
    }

    #[test]
    fn the_recorded_value_never_includes_nan() {
        assert_eq!(
            vector(&[0.1, f64::NAN, 0.3]).representative_value(),
            Some(0.3)
        );
        assert_eq!(QueryResult::Scalar(f64::NAN).representative_value(), None);
    }
}
