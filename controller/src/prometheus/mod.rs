//! Gate samples from Prometheus: a region's own server when its `Region` names one,
//! the controller's default otherwise.
//!
//! A gate query is a tenant's own PromQL, so its answer is bounded before it is trusted
//! (see [`ResponseLimits`]): the body is refused from its `Content-Length` before any byte
//! is read, or read chunk by chunk and abandoned as soon as it passes the byte cap; a
//! vector is counted before it is built and refused when it has more series than the
//! series cap. Either is a [`QueryResult::Error`], so a query error, never an
//! out-of-memory in the shared controller.
//!
//! An answer is trusted only whole and as it came: one with `warnings` (a store of Thanos
//! or Cortex, or a remote read, did not answer) is [`QueryResult::Partial`], an
//! Inconclusive sample; every sample's timestamp is kept ([`Answer::evaluated_at`]) so
//! that the engine counts no answer evaluated before its gate window opened; a redirect
//! is never followed (it could lead anywhere, https to http included); and credentials
//! come only from the Region's `spec.prometheus.auth` Secret, over https, never from
//! the URL.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use sha2::{Digest, Sha256};

use crate::gates::provider::{Access, Authorization, GateProvider, SampleFuture, SampleSource};
use crate::gates::verdict::{Answer, Labels, QueryResult};

/// How long one query may take, end to end, before the sample is Inconclusive.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Most gate queries one controller has in flight, to all Prometheus servers together:
/// one tenant's rollout of 20 gates across many regions queues behind this rather than
/// opening hundreds of connections at once (each query still ends within
/// [`QUERY_TIMEOUT`], so a queued one waits a bounded time).
pub const MAX_QUERIES_IN_FLIGHT: usize = 32;

/// Longest Prometheus `error` text kept in a sample's reason, in characters.
pub const MAX_ERROR_CHARS: usize = 200;

/// Longest Prometheus `errorType` (or unknown `resultType`) kept in a reason, in characters.
const MAX_NAME_CHARS: usize = 32;

/// How long connecting to a Prometheus may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Most HTTP clients kept for CA bundles of Regions (one per distinct bundle); past it
/// they are all dropped and built again on use.
const MAX_CA_CLIENTS: usize = 64;

/// How much of a Prometheus answer the controller accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseLimits {
    /// Largest response body, in bytes.
    pub max_bytes: usize,
    /// Most series in an instant vector.
    pub max_series: usize,
}

impl ResponseLimits {
    /// Default [`ResponseLimits::max_bytes`]: 4 MiB.
    pub const DEFAULT_MAX_BYTES: usize = 4 * 1024 * 1024;
    /// Default [`ResponseLimits::max_series`].
    pub const DEFAULT_MAX_SERIES: usize = 1000;
}

impl Default for ResponseLimits {
    fn default() -> Self {
        Self {
            max_bytes: Self::DEFAULT_MAX_BYTES,
            max_series: Self::DEFAULT_MAX_SERIES,
        }
    }
}

/// Why a query gave no usable answer. The text becomes the Inconclusive sample's reason in
/// rollout status, so it is short and carries neither the endpoint URL nor the response
/// body, except Prometheus's own `error` text cut to [`MAX_ERROR_CHARS`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// Neither the region nor the controller names a Prometheus.
    #[error("no Prometheus endpoint configured")]
    NoEndpoint,
    /// The endpoint is not an http(s) base URL.
    #[error("the Prometheus URL is not a valid http(s) URL")]
    BadUrl,
    /// The Region's URL carries a user name or password.
    #[error(
        "spec.prometheus.url carries credentials (user:password@), which are refused: give them \
         in spec.prometheus.auth"
    )]
    CredentialsInUrl,
    /// Credentials would go over plain http.
    #[error(
        "spec.prometheus.auth needs an https spec.prometheus.url: credentials are never sent in clear"
    )]
    CredentialsOverHttp,
    /// The Region's credentials cannot be had or used.
    #[error("Prometheus credentials: {0}")]
    Credentials(String),
    /// Prometheus (or a proxy before it) answered with a redirect, which is not followed.
    #[error("Prometheus answered with a redirect (HTTP {status}), which is not followed")]
    Redirect {
        /// HTTP status code.
        status: u16,
    },
    /// Prometheus (or a proxy before it) refused the request's credentials.
    #[error("Prometheus refused the request (HTTP {status}): check spec.prometheus.auth")]
    Refused {
        /// HTTP status code.
        status: u16,
    },
    /// No complete answer within [`QUERY_TIMEOUT`].
    #[error("no answer within {QUERY_TIMEOUT:?}")]
    Timeout,
    /// The request could not be sent or the answer not read.
    #[error("Prometheus {0}")]
    Transport(&'static str),
    /// The body is larger than [`ResponseLimits::max_bytes`].
    #[error("Prometheus answer larger than the limit of {max_bytes} bytes")]
    TooLarge {
        /// The cap.
        max_bytes: usize,
    },
    /// The vector has more series than [`ResponseLimits::max_series`].
    #[error("Prometheus answer has {series} series, over the limit of {max_series}")]
    TooManySeries {
        /// Series in the answer.
        series: usize,
        /// The cap.
        max_series: usize,
    },
    /// The answer is not JSON (typically a proxy's error page).
    #[error("Prometheus answered HTTP {status} without JSON")]
    NotJson {
        /// HTTP status code.
        status: u16,
    },
    /// The answer is JSON but not a Prometheus query answer.
    #[error("malformed Prometheus answer: {0}")]
    Malformed(String),
    /// Prometheus refused or failed the query (`status: error`).
    #[error("Prometheus error {error_type}: {message}")]
    Prometheus {
        /// `errorType`, bounded.
        error_type: String,
        /// `error`, bounded to [`MAX_ERROR_CHARS`].
        message: String,
    },
    /// A range vector is not a gate's answer.
    #[error("the query returned a range vector; gates need an instant vector or scalar")]
    RangeVector,
    /// Any other result type (`string`, or one this controller does not know).
    #[error("the query returned a {0} result; gates need an instant vector or scalar")]
    UnsupportedType(String),
}

/// The HTTP client gate samples go through: bounded in time, following no redirect, and
/// trusting only `ca_bundle`'s certificates (PEM) when given, else the system's roots.
pub fn http_client(ca_bundle: Option<&[u8]>) -> Result<reqwest::Client, QueryError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(QUERY_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(pem) = ca_bundle {
        let unusable = || QueryError::Credentials("the CA bundle holds no PEM certificate".into());
        let certificates = reqwest::Certificate::from_pem_bundle(pem).map_err(|_| unusable())?;
        if certificates.is_empty() {
            return Err(unusable());
        }
        builder = builder.tls_certs_only(certificates);
    }
    builder
        .build()
        .map_err(|_| QueryError::Credentials("no HTTP client can be built with them".into()))
}

/// Takes gate samples with instant queries over HTTP.
pub struct PrometheusProvider {
    http: reqwest::Client,
    default_url: Option<String>,
    limits: ResponseLimits,
    /// Clients trusting a Region's CA bundle, by the bundle's SHA-256.
    ca_clients: Mutex<HashMap<[u8; 32], reqwest::Client>>,
    /// Permits for [`MAX_QUERIES_IN_FLIGHT`].
    in_flight: tokio::sync::Semaphore,
}

impl PrometheusProvider {
    /// A provider querying through `http` (built by [`http_client`]: every query is also
    /// bounded by [`QUERY_TIMEOUT`]) the URL a sample's region names, or `default_url`,
    /// accepting answers within `limits`.
    pub fn new(http: reqwest::Client, default_url: Option<String>, limits: ResponseLimits) -> Self {
        Self {
            http,
            default_url,
            limits,
            ca_clients: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(MAX_QUERIES_IN_FLIGHT),
        }
    }

    async fn query(&self, source: SampleSource<'_>, query: &str) -> Answer {
        // The semaphore is never closed; were it, the query runs unqueued.
        let _permit = self.in_flight.acquire().await.ok();
        let outcome =
            match tokio::time::timeout(QUERY_TIMEOUT, self.instant_query(source, query)).await {
                Err(_) => Err(QueryError::Timeout),
                Ok(outcome) => outcome,
            };
        outcome.unwrap_or_else(|error| {
            tracing::debug!(region = source.region.unwrap_or(""), %error, "gate sample not answered");
            Answer::from(QueryResult::Error(error.to_string()))
        })
    }

    /// `GET /api/v1/query` with `query` and `timeout`, as Prometheus's HTTP API defines it.
    async fn instant_query(
        &self,
        source: SampleSource<'_>,
        query: &str,
    ) -> Result<Answer, QueryError> {
        let credentials = match source.access {
            Access::Anonymous => None,
            Access::With(credentials) => Some(credentials),
            Access::Unusable(why) => return Err(QueryError::Credentials(why.to_owned())),
        };
        let url = match source.url {
            Some(region_url) => {
                let url = query_url(region_url, query)?;
                if !url.username().is_empty() || url.password().is_some() {
                    return Err(QueryError::CredentialsInUrl);
                }
                url
            }
            None => query_url(
                self.default_url.as_deref().ok_or(QueryError::NoEndpoint)?,
                query,
            )?,
        };
        if credentials.is_some() && url.scheme() != "https" {
            return Err(QueryError::CredentialsOverHttp);
        }
        let http = match credentials.and_then(|c| c.ca_bundle.as_deref()) {
            Some(bundle) => self.ca_client(bundle)?,
            None => self.http.clone(),
        };
        let mut request = http
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json");
        match credentials.and_then(|c| c.authorization.as_ref()) {
            Some(Authorization::Bearer(token)) => request = request.bearer_auth(token),
            Some(Authorization::Basic { username, password }) => {
                request = request.basic_auth(username, Some(password));
            }
            None => {}
        }
        let mut response = request.send().await.map_err(transport)?;
        let status = response.status();
        if status.is_redirection() {
            return Err(QueryError::Redirect {
                status: status.as_u16(),
            });
        }
        if matches!(status.as_u16(), 401 | 403 | 407) {
            return Err(QueryError::Refused {
                status: status.as_u16(),
            });
        }
        if !is_json(response.headers()) {
            return Err(QueryError::NotJson {
                status: status.as_u16(),
            });
        }
        let body = read_bounded(&mut response, self.limits.max_bytes).await?;
        parse_answer(&body, self.limits)
    }

    /// The client trusting `bundle`, built once per distinct bundle.
    fn ca_client(&self, bundle: &[u8]) -> Result<reqwest::Client, QueryError> {
        let key: [u8; 32] = Sha256::digest(bundle).into();
        if let Some(client) = self
            .ca_clients
            .lock()
            .ok()
            .and_then(|clients| clients.get(&key).cloned())
        {
            return Ok(client);
        }
        let client = http_client(Some(bundle))?;
        if let Ok(mut clients) = self.ca_clients.lock() {
            if clients.len() >= MAX_CA_CLIENTS {
                clients.clear();
            }
            clients.insert(key, client.clone());
        }
        Ok(client)
    }
}

impl GateProvider for PrometheusProvider {
    fn sample<'a>(&'a self, source: SampleSource<'a>, query: &'a str) -> SampleFuture<'a> {
        Box::pin(self.query(source, query))
    }
}

/// The instant-query URL under `base` (which may carry a path prefix, e.g. behind a proxy).
fn query_url(base: &str, query: &str) -> Result<reqwest::Url, QueryError> {
    let mut url = reqwest::Url::parse(base).map_err(|_| QueryError::BadUrl)?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(QueryError::BadUrl);
    }
    let path = format!("{}/api/v1/query", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url.set_fragment(None);
    url.query_pairs_mut()
        .append_pair("query", query)
        .append_pair("timeout", &format!("{}ms", QUERY_TIMEOUT.as_millis()));
    Ok(url)
}

fn is_json(headers: &reqwest::header::HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// A reqwest failure as a reason: its kind only (the error's text names the URL).
fn transport(error: reqwest::Error) -> QueryError {
    let error = error.without_url();
    if error.is_timeout() {
        return QueryError::Timeout;
    }
    tracing::debug!(error = %ErrorChain(&error), "Prometheus request failed");
    QueryError::Transport(if tls_failure(&error) {
        "TLS handshake failed: its certificate is not trusted (spec.prometheus.auth.caKey) \
         or not valid for its host"
    } else if error.is_connect() {
        "unreachable"
    } else if error.is_body() || error.is_decode() {
        "answer cut off"
    } else {
        "request failed"
    })
}

/// Whether TLS refused the server (its certificate, mostly) somewhere down `error`'s
/// sources.
fn tls_failure(error: &(dyn std::error::Error + 'static)) -> bool {
    /// How deep into an error's sources (and I/O errors' wrapped errors) to look.
    const MAX_DEPTH: usize = 16;
    let mut next = Some(error);
    for _ in 0..MAX_DEPTH {
        let Some(error) = next else {
            return false;
        };
        if error.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        // An I/O error's `source` skips the error it wraps: look into it instead.
        next = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    false
}

/// Displays an error with its sources, for logs.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

/// Reads the body chunk by chunk, giving up as soon as it passes `max_bytes` (or at once
/// when its announced length does).
async fn read_bounded(
    response: &mut reqwest::Response,
    max_bytes: usize,
) -> Result<Vec<u8>, QueryError> {
    let too_large = QueryError::TooLarge { max_bytes };
    let announced = response.content_length();
    if announced.is_some_and(|length| length > u64::try_from(max_bytes).unwrap_or(u64::MAX)) {
        return Err(too_large);
    }
    let capacity = announced
        .and_then(|length| usize::try_from(length).ok())
        .unwrap_or(0)
        .min(max_bytes);
    let mut body = Vec::with_capacity(capacity);
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if chunk.len() > max_bytes.saturating_sub(body.len()) {
            return Err(too_large);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

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

/// Parses a query answer within `limits`; a range vector is not a gate's answer, and an
/// answer with warnings is [`QueryResult::Partial`].
fn parse_answer(body: &[u8], limits: ResponseLimits) -> Result<Answer, QueryError> {
    let outline: Outline = serde_json::from_slice(body).map_err(malformed)?;
    if let Status::Error = outline.status {
        return Err(QueryError::Prometheus {
            error_type: bounded(
                outline.error_type.as_deref().unwrap_or("unknown"),
                MAX_NAME_CHARS,
            ),
            message: bounded(outline.error.as_deref().unwrap_or(""), MAX_ERROR_CHARS),
        });
    }
    let Some(data) = outline.data else {
        return Err(QueryError::Malformed("no data".to_owned()));
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::Credentials;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    fn limits(max_bytes: usize, max_series: usize) -> ResponseLimits {
        ResponseLimits {
            max_bytes,
            max_series,
        }
    }

    fn parse(body: &str) -> Result<QueryResult, QueryError> {
        parse_answer(body.as_bytes(), ResponseLimits::default()).map(|answer| answer.result)
    }

    fn vector_answer(series: usize) -> String {
        let elements: Vec<String> = (0..series)
            .map(|i| format!(r#"{{"metric":{{"pod":"p{i}"}},"value":[1700000000.5,"{i}"]}}"#))
            .collect();
        format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
            elements.join(",")
        )
    }

    /// What the canned server sends after the response head.
    enum Body {
        Bytes(&'static str),
        /// Spaces until the client hangs up.
        Endless,
        /// Nothing, with the connection held open.
        Never,
    }

    /// Serves `head` then `body` to every connection on 127.0.0.1; returns the base URL
    /// and the request heads received.
    async fn serve(head: String, body: Body) -> (String, mpsc::UnboundedReceiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (seen, requests) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buffer = [0_u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = seen.send(String::from_utf8_lossy(&request).into_owned());
                if stream.write_all(head.as_bytes()).await.is_err() {
                    continue;
                }
                match body {
                    Body::Bytes(bytes) => {
                        let _ = stream.write_all(bytes.as_bytes()).await;
                    }
                    Body::Endless => {
                        let chunk = vec![b' '; 64 * 1024];
                        while stream.write_all(&chunk).await.is_ok() {}
                    }
                    Body::Never => tokio::time::sleep(Duration::from_secs(60)).await,
                }
                let _ = stream.shutdown().await;
            }
        });
        (format!("http://{address}"), requests)
    }

    fn json_head(content_length: Option<u64>) -> String {
        let length = content_length
            .map(|length| format!("Content-Length: {length}\r\n"))
            .unwrap_or_default();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}Connection: close\r\n\r\n"
        )
    }

    fn provider(base: &str, limits: ResponseLimits) -> PrometheusProvider {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = http_client(None).unwrap();
        PrometheusProvider::new(http, Some(base.to_owned()), limits)
    }

    fn error_text(answer: Answer) -> String {
        match answer.result {
            QueryResult::Error(text) => text,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    /// However many samples are asked for at once, the server never sees more than
    /// [`MAX_QUERIES_IN_FLIGHT`] queries open; every sample is still answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queries_in_flight_are_capped_for_the_whole_controller() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let open = std::sync::Arc::new(AtomicUsize::new(0));
        let most = std::sync::Arc::new(AtomicUsize::new(0));
        let (server_open, server_most) = (open.clone(), most.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (open, most) = (server_open.clone(), server_most.clone());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0_u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let now_open = open.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now_open, Ordering::SeqCst);
                    // Held a while, so that an uncapped controller would pile up here.
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    let body = SCALAR;
                    let head = json_head(Some(body.len() as u64));
                    open.fetch_sub(1, Ordering::SeqCst);
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(body.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        let provider = std::sync::Arc::new(provider(&base, ResponseLimits::default()));
        let samples = (0..3 * MAX_QUERIES_IN_FLIGHT).map(|_| {
            let provider = provider.clone();
            tokio::spawn(async move { provider.sample(SampleSource::default(), "up").await })
        });
        for answer in futures::future::join_all(samples).await {
            let answer = answer.unwrap();
            assert!(
                !matches!(answer.result, QueryResult::Error(_)),
                "{:?}",
                answer.result
            );
        }
        let most = most.load(Ordering::SeqCst);
        assert!(
            (1..=MAX_QUERIES_IN_FLIGHT).contains(&most),
            "{most} queries were open at once"
        );
    }

    #[tokio::test]
    async fn a_vector_answer_comes_from_an_instant_query() {
        let body: &'static str = vector_answer(2).leak();
        let (base, mut requests) =
            serve(json_head(Some(body.len() as u64)), Body::Bytes(body)).await;
        let provider = provider(&format!("{base}/prom/"), ResponseLimits::default());
        let result = provider
            .sample(SampleSource::default(), "sum(up{job=\"a b\"})")
            .await;
        let expected = QueryResult::Vector(vec![
            (Labels::from([("pod".to_owned(), "p0".to_owned())]), 0.0),
            (Labels::from([("pod".to_owned(), "p1".to_owned())]), 1.0),
        ]);
        assert_eq!(result.result, expected);
        assert_eq!(
            result.evaluated_at,
            DateTime::from_timestamp_millis(1_700_000_000_500)
        );
        let request = requests.recv().await.unwrap();
        let line = request.lines().next().unwrap();
        assert_eq!(
            line,
            "GET /prom/api/v1/query?query=sum%28up%7Bjob%3D%22a+b%22%7D%29&timeout=10000ms HTTP/1.1"
        );
    }

    #[tokio::test]
    async fn a_body_over_the_byte_cap_is_abandoned_unread() {
        let (base, _requests) = serve(json_head(None), Body::Endless).await;
        let provider = provider(&base, limits(64 * 1024, 1000));
        let started = std::time::Instant::now();
        let reason = error_text(
            provider
                .sample(
                    SampleSource {
                        region: Some("any"),
                        ..SampleSource::default()
                    },
                    "up",
                )
                .await,
        );
        assert_eq!(
            reason,
            "Prometheus answer larger than the limit of 65536 bytes"
        );
        assert!(started.elapsed() < QUERY_TIMEOUT, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn an_announced_length_over_the_byte_cap_is_refused_before_reading() {
        let (base, _requests) = serve(json_head(Some(1 << 40)), Body::Never).await;
        let provider = provider(&base, ResponseLimits::default());
        let started = std::time::Instant::now();
        let reason = error_text(provider.sample(SampleSource::default(), "up").await);
        assert_eq!(
            reason,
            "Prometheus answer larger than the limit of 4194304 bytes"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_non_json_answer_is_refused_without_its_body() {
        let head = "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: 20\r\nConnection: close\r\n\r\n";
        let (base, _requests) = serve(head.to_owned(), Body::Bytes("<h1>secret page</h1>")).await;
        let reason = error_text(
            provider(&base, ResponseLimits::default())
                .sample(SampleSource::default(), "up")
                .await,
        );
        assert_eq!(reason, "Prometheus answered HTTP 502 without JSON");
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_does_not_name_its_url() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let base = format!("http://user:password@{address}/");
        let reason = error_text(
            provider(&base, ResponseLimits::default())
                .sample(SampleSource::default(), "up")
                .await,
        );
        assert_eq!(reason, "Prometheus unreachable");
        let no_url = error_text(
            provider("not a url", ResponseLimits::default())
                .sample(SampleSource::default(), "up")
                .await,
        );
        assert_eq!(no_url, "the Prometheus URL is not a valid http(s) URL");
    }

    #[tokio::test]
    async fn no_endpoint_is_an_error() {
        // Run alone, no other test has installed the provider reqwest needs.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let provider = PrometheusProvider::new(http, None, ResponseLimits::default());
        assert_eq!(
            provider
                .sample(
                    SampleSource {
                        region: Some("r"),
                        ..SampleSource::default()
                    },
                    "up"
                )
                .await,
            Answer::from(QueryResult::Error(
                "no Prometheus endpoint configured".to_owned()
            ))
        );
    }

    #[test]
    fn more_series_than_the_cap_are_refused_naming_it() {
        let body = vector_answer(3);
        assert_eq!(
            parse_answer(body.as_bytes(), limits(1 << 20, 2))
                .unwrap_err()
                .to_string(),
            "Prometheus answer has 3 series, over the limit of 2"
        );
        assert!(matches!(
            parse_answer(body.as_bytes(), limits(1 << 20, 3)).map(|answer| answer.result),
            Ok(QueryResult::Vector(series)) if series.len() == 3
        ));
    }

    #[test]
    fn scalar_and_empty_answers_keep_their_meaning() {
        assert_eq!(
            parse(
                r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.25"]}}"#
            ),
            Ok(QueryResult::Scalar(0.25))
        );
        assert_eq!(
            parse(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#),
            Ok(QueryResult::Empty)
        );
    }

    #[test]
    fn special_values_parse_as_floats() {
        let value = |text: &str| {
            let body = format!(
                r#"{{"status":"success","data":{{"resultType":"scalar","result":[1,"{text}"]}}}}"#
            );
            match parse(&body) {
                Ok(QueryResult::Scalar(value)) => value,
                other => panic!("{text}: {other:?}"),
            }
        };
        assert!(value("NaN").is_nan());
        assert_eq!(value("+Inf"), f64::INFINITY);
        assert_eq!(value("-Inf"), f64::NEG_INFINITY);
        assert_eq!(value("1e-3"), 0.001);
    }

    #[test]
    fn a_prometheus_error_keeps_only_a_bounded_text() {
        assert_eq!(
            parse(
                r#"{"status":"error","errorType":"bad_data","error":"parse error: unexpected\nend"}"#
            ),
            Err(QueryError::Prometheus {
                error_type: "bad_data".to_owned(),
                message: "parse error: unexpected end".to_owned(),
            })
        );
        let long = format!(
            r#"{{"status":"error","errorType":"{}","error":"{}"}}"#,
            "t".repeat(100),
            "é".repeat(10_000)
        );
        let reason = parse(&long).unwrap_err().to_string();
        assert!(reason.chars().count() < 300, "{}", reason.len());
        assert!(reason.ends_with('…'));
    }

    #[test]
    fn range_vectors_and_strings_are_refused() {
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"],[2,"2"]]}]}}"#;
        assert_eq!(parse(matrix), Err(QueryError::RangeVector));
        let string = r#"{"status":"success","data":{"resultType":"string","result":[1,"hello"]}}"#;
        assert_eq!(
            parse(string).unwrap_err().to_string(),
            "the query returned a string result; gates need an instant vector or scalar"
        );
    }

    #[test]
    fn a_malformed_answer_is_located_not_quoted() {
        let reason = parse(
            r#"{"status":"success","data":{"resultType":"scalar","result":[1,"secret-value"]}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            reason.starts_with("malformed Prometheus answer: unexpected shape at line 1"),
            "{reason}"
        );
        assert!(!reason.contains("secret"), "{reason}");
        let reason = parse("<html>secret</html>").unwrap_err().to_string();
        assert!(
            reason.starts_with("malformed Prometheus answer: not JSON"),
            "{reason}"
        );
        assert!(!reason.contains("secret"), "{reason}");
        assert_eq!(
            parse(r#"{"status":"success"}"#),
            Err(QueryError::Malformed("no data".to_owned()))
        );
    }

    #[test]
    fn an_answer_with_warnings_is_partial_whatever_its_data() {
        let with = |warnings: &str, data: &str| {
            parse(&format!(
                r#"{{"status":"success","data":{data},"warnings":{warnings}}}"#
            ))
        };
        let scalar = r#"{"resultType":"scalar","result":[1700000000,"0"]}"#;
        let empty = r#"{"resultType":"vector","result":[]}"#;
        assert_eq!(
            with(r#"["store eu-1 unavailable"]"#, scalar),
            Ok(QueryResult::Partial(
                "Prometheus warned that the answer may be incomplete: store eu-1 unavailable"
                    .into()
            ))
        );
        let many = format!(r#"["{}", "second"]"#, "x".repeat(10_000));
        match with(&many, empty) {
            Ok(QueryResult::Partial(reason)) => {
                assert!(reason.contains("(2 warnings)"), "{reason}");
                assert!(
                    reason.chars().count() < 300 && reason.ends_with('…'),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        // No warnings, or an empty or null list: the answer is whole.
        assert_eq!(with("[]", scalar), Ok(QueryResult::Scalar(0.0)));
        assert_eq!(with("null", scalar), Ok(QueryResult::Scalar(0.0)));
        // A refusal of the query's shape still says what is wrong with the query.
        let matrix = r#"{"resultType":"matrix","result":[]}"#;
        assert_eq!(with(r#"["w"]"#, matrix), Err(QueryError::RangeVector));
    }

    #[test]
    fn every_answer_keeps_the_time_it_was_evaluated_at() {
        let vector = r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"pod":"a"},"value":[1700000002.25,"1"]},
            {"metric":{"pod":"b"},"value":[1700000001.5,"2"]}]}}"#;
        let answer = parse_answer(vector.as_bytes(), ResponseLimits::default()).unwrap();
        assert_eq!(
            answer.evaluated_at,
            DateTime::from_timestamp_millis(1_700_000_001_500),
            "the oldest sample's time"
        );
        let scalar =
            r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}}"#;
        assert_eq!(
            parse_answer(scalar.as_bytes(), ResponseLimits::default())
                .unwrap()
                .evaluated_at,
            DateTime::from_timestamp(1_700_000_000, 0)
        );
        let partial = r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]},"warnings":["w"]}"#;
        assert!(
            parse_answer(partial.as_bytes(), ResponseLimits::default())
                .unwrap()
                .evaluated_at
                .is_some()
        );
        // A timestamp that is no time is a malformed answer, never a time of 0 or now.
        for bad in [r#""1700000000""#, "1e300", "-1e300", "null"] {
            let body = format!(
                r#"{{"status":"success","data":{{"resultType":"scalar","result":[{bad},"1"]}}}}"#
            );
            assert!(
                matches!(parse(&body), Err(QueryError::Malformed(_))),
                "{bad}: {:?}",
                parse(&body)
            );
        }
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        let (elsewhere, mut followed) =
            serve(json_head(None), Body::Bytes(r#"{"status":"success"}"#)).await;
        for status in [
            "301 Moved Permanently",
            "302 Found",
            "307 Temporary Redirect",
        ] {
            let head = format!(
                "HTTP/1.1 {status}\r\nLocation: {elsewhere}/api/v1/query?query=vector(0)\r\n\
                 Content-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let (base, _requests) = serve(head, Body::Bytes("")).await;
            let reason = error_text(
                provider(&base, ResponseLimits::default())
                    .sample(SampleSource::default(), "up")
                    .await,
            );
            let code = &status[..3];
            assert_eq!(
                reason,
                format!("Prometheus answered with a redirect (HTTP {code}), which is not followed")
            );
        }
        assert!(followed.try_recv().is_err(), "the redirect was followed");
    }

    /// An https server on 127.0.0.1 with `testdata/server.crt` (signed by
    /// `testdata/ca.crt`), answering every request with `body`; returns its base URL and
    /// the request heads it received.
    async fn serve_tls(body: &'static str) -> (String, mpsc::UnboundedReceiver<String>) {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let certificates =
            CertificateDer::pem_slice_iter(include_bytes!("testdata/server.crt").as_slice())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(include_bytes!("testdata/server.key")).unwrap();
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certificates, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (seen, requests) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let Ok(mut stream) = acceptor.accept(stream).await else {
                    continue;
                };
                let mut request = Vec::new();
                let mut buffer = [0_u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = seen.send(String::from_utf8_lossy(&request).into_owned());
                let head = json_head(Some(body.len() as u64));
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        (format!("https://127.0.0.1:{}", address.port()), requests)
    }

    const SCALAR: &str =
        r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.5"]}}"#;

    /// Samples `query` from `url`, as a region naming that URL and `access`.
    async fn sample_as_region(url: &str, access: Access<'_>) -> Answer {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let provider =
            PrometheusProvider::new(http_client(None).unwrap(), None, ResponseLimits::default());
        provider
            .sample(
                SampleSource {
                    region: Some("eu-1"),
                    url: Some(url),
                    access,
                },
                "up",
            )
            .await
    }

    fn header<'a>(request: &'a str, name: &str) -> Option<&'a str> {
        request.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    #[tokio::test]
    async fn a_regions_ca_bundle_is_the_only_trust_for_its_server() {
        let (base, mut requests) = serve_tls(SCALAR).await;
        let trusting = |bundle: &[u8]| Credentials {
            authorization: None,
            ca_bundle: Some(bundle.to_vec()),
        };
        let ours = trusting(include_bytes!("testdata/ca.crt"));
        let answer = sample_as_region(&base, Access::With(&ours)).await;
        assert_eq!(answer.result, QueryResult::Scalar(0.5));
        assert!(requests.recv().await.is_some());

        // The system's roots do not know the lab's CA, and another CA is not it.
        let untrusted = "Prometheus TLS handshake failed: its certificate is not trusted \
                         (spec.prometheus.auth.caKey) or not valid for its host";
        let unknown = sample_as_region(&base, Access::Anonymous).await;
        assert_eq!(error_text(unknown), untrusted);
        let other = trusting(include_bytes!("testdata/other-ca.crt"));
        let refused = sample_as_region(&base, Access::With(&other)).await;
        assert_eq!(error_text(refused), untrusted);
        let not_pem = trusting(b"not a certificate");
        assert_eq!(
            error_text(sample_as_region(&base, Access::With(&not_pem)).await),
            "Prometheus credentials: the CA bundle holds no PEM certificate"
        );
        assert!(
            requests.try_recv().is_err(),
            "no request reached the server"
        );
    }

    #[tokio::test]
    async fn credentials_go_in_the_authorization_header_over_https_only() {
        let (base, mut requests) = serve_tls(SCALAR).await;
        let ca = include_bytes!("testdata/ca.crt").to_vec();
        let bearer = Credentials {
            authorization: Some(Authorization::Bearer("t0ken-s3cr3t".into())),
            ca_bundle: Some(ca.clone()),
        };
        let answer = sample_as_region(&base, Access::With(&bearer)).await;
        assert_eq!(answer.result, QueryResult::Scalar(0.5));
        let request = requests.recv().await.unwrap();
        assert_eq!(
            header(&request, "authorization"),
            Some("Bearer t0ken-s3cr3t")
        );

        let basic = Credentials {
            authorization: Some(Authorization::Basic {
                username: "prom-reader".into(),
                password: "pa55:word".into(),
            }),
            ca_bundle: Some(ca),
        };
        let answer = sample_as_region(&format!("{base}/prefix/"), Access::With(&basic)).await;
        assert_eq!(answer.result, QueryResult::Scalar(0.5));
        let request = requests.recv().await.unwrap();
        // base64("prom-reader:pa55:word")
        assert_eq!(
            header(&request, "authorization"),
            Some("Basic cHJvbS1yZWFkZXI6cGE1NTp3b3Jk")
        );
        assert!(
            request.starts_with("GET /prefix/api/v1/query?"),
            "{request}"
        );

        // Never over plain http, never from the URL, never without the Secret's.
        let (plain, mut plain_requests) =
            serve(json_head(Some(SCALAR.len() as u64)), Body::Bytes(SCALAR)).await;
        assert_eq!(
            error_text(sample_as_region(&plain, Access::With(&bearer)).await),
            "spec.prometheus.auth needs an https spec.prometheus.url: credentials are never sent in clear"
        );
        let with_userinfo = plain.replace("http://", "http://reader:s3cr3t@");
        assert_eq!(
            error_text(sample_as_region(&with_userinfo, Access::Anonymous).await),
            "spec.prometheus.url carries credentials (user:password@), which are refused: give them in spec.prometheus.auth"
        );
        assert_eq!(
            error_text(
                sample_as_region(
                    &plain,
                    Access::Unusable("Secret configrollout-system/p has no key token")
                )
                .await
            ),
            "Prometheus credentials: Secret configrollout-system/p has no key token"
        );
        assert!(plain_requests.try_recv().is_err(), "a request went out");
        assert!(requests.try_recv().is_err(), "a request went out");
    }

    #[tokio::test]
    async fn a_refusal_of_the_credentials_says_so() {
        for status in ["401 Unauthorized", "403 Forbidden"] {
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: 6\r\nConnection: close\r\n\r\n"
            );
            let (base, _requests) = serve(head, Body::Bytes("denied")).await;
            let reason = error_text(
                provider(&base, ResponseLimits::default())
                    .sample(SampleSource::default(), "up")
                    .await,
            );
            assert_eq!(
                reason,
                format!(
                    "Prometheus refused the request (HTTP {}): check spec.prometheus.auth",
                    &status[..3]
                )
            );
        }
    }
}
