//! The bounded decoder of a Prometheus query answer: its envelope is read first, with the
//! result's elements counted without being built, and the result only once it is within
//! the series limit.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};

use super::{MAX_ERROR_CHARS, QueryError, ResponseLimits};
use crate::gates::provider::SeriesAnswer;
use crate::gates::verdict::{Answer, Labels, QueryResult};

/// Longest Prometheus `errorType` (or unknown `resultType`) kept in a reason, in characters.
const MAX_NAME_CHARS: usize = 32;

/// The envelope of an answer, read first: the status, the error, the result type, and
/// the number of result elements, counted without building them.
#[derive(Deserialize)]
struct Outline {
    status: Status,
    #[serde(default)]
    data: Option<OutlineData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    /// Present when the answer may be missing data (Prometheus API `warnings`).
    #[serde(default)]
    warnings: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Success,
    Error,
}

#[derive(Deserialize)]
struct OutlineData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: ElementCount,
}

/// The length of a JSON array, skipping its elements.
struct ElementCount(usize);

impl<'de> Deserialize<'de> for ElementCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Counter;
        impl<'de> Visitor<'de> for Counter {
            type Value = ElementCount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ElementCount, A::Error> {
                let mut count = 0_usize;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    count = count.saturating_add(1);
                }
                Ok(ElementCount(count))
            }
        }
        deserializer.deserialize_seq(Counter)
    }
}

/// A successful answer, read second, once its result is known to be within bounds.
#[derive(Deserialize)]
struct AnswerBody<R> {
    data: AnswerData<R>,
}

#[derive(Deserialize)]
struct AnswerData<R> {
    result: R,
}

/// One element of an instant vector.
#[derive(Deserialize)]
struct Series {
    metric: Labels,
    value: Point,
}

/// `[timestamp, "value"]`.
#[derive(Deserialize)]
struct Point(Timestamp, SampleValue);

/// A sample's timestamp: seconds since the epoch, a JSON number with milliseconds.
struct Timestamp(DateTime<Utc>);

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Seconds;
        impl Visitor<'_> for Seconds {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a timestamp in seconds")
            }
            fn visit_f64<E: de::Error>(self, seconds: f64) -> Result<Timestamp, E> {
                // A saturating conversion: a NaN or a value out of chrono's range is
                // refused below, never wrapped.
                let millis = (seconds * 1000.0).round() as i64;
                if !seconds.is_finite() {
                    return Err(E::custom("a timestamp is not a number"));
                }
                DateTime::from_timestamp_millis(millis)
                    .map(Timestamp)
                    .ok_or_else(|| E::custom("a timestamp is out of range"))
            }
            fn visit_u64<E: de::Error>(self, seconds: u64) -> Result<Timestamp, E> {
                i64::try_from(seconds)
                    .ok()
                    .and_then(|seconds| DateTime::from_timestamp(seconds, 0))
                    .map(Timestamp)
                    .ok_or_else(|| E::custom("a timestamp is out of range"))
            }
            fn visit_i64<E: de::Error>(self, seconds: i64) -> Result<Timestamp, E> {
                DateTime::from_timestamp(seconds, 0)
                    .map(Timestamp)
                    .ok_or_else(|| E::custom("a timestamp is out of range"))
            }
        }
        deserializer.deserialize_any(Seconds)
    }
}

/// A sample value, which Prometheus sends as a string (`"0.5"`, `"NaN"`, `"+Inf"`).
struct SampleValue(f64);

impl<'de> Deserialize<'de> for SampleValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Value;
        impl Visitor<'_> for Value {
            type Value = SampleValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number in a string")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<SampleValue, E> {
                text.parse()
                    .map(SampleValue)
                    .map_err(|_| E::custom("a sample value is not a number"))
            }
        }
        deserializer.deserialize_str(Value)
    }
}

/// The envelope of a successful answer and its data; Prometheus's own error (bounded)
/// otherwise.
fn successful_outline(body: &[u8]) -> Result<(Outline, OutlineData), QueryError> {
    let mut outline: Outline = serde_json::from_slice(body).map_err(malformed)?;
    if let Status::Error = outline.status {
        return Err(QueryError::Prometheus {
            error_type: bounded(
                outline.error_type.as_deref().unwrap_or("unknown"),
                MAX_NAME_CHARS,
            ),
            message: bounded(outline.error.as_deref().unwrap_or(""), MAX_ERROR_CHARS),
        });
    }
    let Some(data) = outline.data.take() else {
        return Err(QueryError::Malformed("no data".to_owned()));
    };
    Ok((outline, data))
}

/// Parses a query answer within `limits`; a range vector is not a gate's answer, and an
/// answer with warnings is [`QueryResult::Partial`].
pub(super) fn parse_answer(body: &[u8], limits: ResponseLimits) -> Result<Answer, QueryError> {
    let (outline, data) = successful_outline(body)?;
    let answer = match data.result_type.as_str() {
        "vector" => {
            let series = data.result.0;
            if series > limits.max_series {
                return Err(QueryError::TooManySeries {
                    series,
                    max_series: limits.max_series,
                });
            }
            let answer: AnswerBody<Vec<Series>> =
                serde_json::from_slice(body).map_err(malformed)?;
            let elements = answer.data.result;
            let evaluated_at = elements.iter().map(|series| series.value.0.0).min();
            let result = if elements.is_empty() {
                QueryResult::Empty
            } else {
                QueryResult::Vector(
                    elements
                        .into_iter()
                        .map(|series| (series.metric, series.value.1.0))
                        .collect(),
                )
            };
            Answer {
                result,
                evaluated_at,
            }
        }
        "scalar" => {
            let answer: AnswerBody<Point> = serde_json::from_slice(body).map_err(malformed)?;
            let Point(Timestamp(at), SampleValue(value)) = answer.data.result;
            Answer {
                result: QueryResult::Scalar(value),
                evaluated_at: Some(at),
            }
        }
        "matrix" => return Err(QueryError::RangeVector),
        other => {
            return Err(QueryError::UnsupportedType(bounded(other, MAX_NAME_CHARS)));
        }
    };
    match outline.warnings.as_deref() {
        Some([first, rest @ ..]) => Ok(Answer {
            result: QueryResult::Partial(partial_reason(first, rest.len())),
            evaluated_at: answer.evaluated_at,
        }),
        _ => Ok(answer),
    }
}

/// One series of a range answer; its labels are not needed.
#[derive(Deserialize)]
struct RangeSeries {
    values: Vec<Point>,
}

/// Parses a range query answer within `limits`: the values of its one series, oldest
/// first; none when no series matched.
pub(super) fn parse_series(
    body: &[u8],
    limits: ResponseLimits,
) -> Result<SeriesAnswer, QueryError> {
    let (outline, data) = successful_outline(body)?;
    if data.result_type != "matrix" {
        return Err(QueryError::UnsupportedType(bounded(
            &data.result_type,
            MAX_NAME_CHARS,
        )));
    }
    match data.result.0 {
        0 => {}
        1 => {}
        series if series > limits.max_series => {
            return Err(QueryError::TooManySeries {
                series,
                max_series: limits.max_series,
            });
        }
        series => return Err(QueryError::SeveralSeries(series)),
    }
    if let Some([first, rest @ ..]) = outline.warnings.as_deref() {
        return Ok(SeriesAnswer::Partial(partial_reason(first, rest.len())));
    }
    let answer: AnswerBody<Vec<RangeSeries>> = serde_json::from_slice(body).map_err(malformed)?;
    Ok(SeriesAnswer::Points(
        answer
            .data
            .result
            .into_iter()
            .flat_map(|series| series.values)
            .map(|Point(_, SampleValue(value))| value)
            .collect(),
    ))
}

/// Why an answer with warnings is not used: how many, and the first, bounded.
fn partial_reason(first: &str, more: usize) -> String {
    let first = bounded(first, MAX_ERROR_CHARS);
    if more == 0 {
        format!("Prometheus warned that the answer may be incomplete: {first}")
    } else {
        format!(
            "Prometheus warned that the answer may be incomplete ({} warnings): {first}",
            more.saturating_add(1)
        )
    }
}

/// Where and how the JSON was wrong, never what it said.
fn malformed(error: serde_json::Error) -> QueryError {
    use serde_json::error::Category;
    let what = match error.classify() {
        Category::Syntax => "not JSON",
        Category::Eof => "truncated",
        Category::Data => "unexpected shape",
        Category::Io => "unreadable",
    };
    QueryError::Malformed(format!(
        "{what} at line {}, column {}",
        error.line(),
        error.column()
    ))
}

/// At most `max_chars` characters of `text`, control characters blanked, `…` when cut.
fn bounded(text: &str, max_chars: usize) -> String {
    let mut kept: String = text
        .chars()
        .take(max_chars)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(max_chars).is_some() {
        kept.push('…');
    }
    kept
}
