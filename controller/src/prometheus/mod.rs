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
//! the URL. The Region's extra headers (`spec.prometheus.headers`, a tenant's
//! `X-Scope-OrgID`, say) go with every query, those read from a Secret over https only;
//! no error nor `Debug` shows a header's value.

mod answer;

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::api::is_forbidden_prometheus_header;
use crate::gates::provider::{
    Access, Authorization, GateProvider, SampleFuture, SampleSource, SeriesAnswer, SeriesFuture,
    Span,
};
use crate::gates::verdict::{Answer, QueryResult};
use crate::outbound::{
    self, CaClients, CaTrust, ClientError, ClientOptions, read_bounded, tls_failure,
};
use answer::{parse_answer, parse_series};
/// How long one query may take, end to end, before the sample is Inconclusive.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Most gate queries one controller has in flight, to all Prometheus servers together:
/// one tenant's rollout of 20 gates across many regions queues behind this rather than
/// opening hundreds of connections at once (each query still ends within
/// [`QUERY_TIMEOUT`], so a queued one waits a bounded time).
pub const MAX_QUERIES_IN_FLIGHT: usize = 32;

/// Longest Prometheus `error` text kept in a sample's reason, in characters.
pub const MAX_ERROR_CHARS: usize = 200;

/// How long connecting to a Prometheus may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// A header value read from a Secret would go over plain http.
    #[error(
        "spec.prometheus.headers[].valueFrom needs an https spec.prometheus.url: Secret values \
         are never sent in clear"
    )]
    SecretHeadersOverHttp,
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
    /// Prometheus refused or failed a scoped query ([`SampleSource::scoped`]): its
    /// message may quote labels of series outside the namespace's scope (`found duplicate
    /// series for the match group {job="x"}`), so only its kind is kept.
    #[error(
        "Prometheus error {error_type} (its message is not shown: this namespace's gate \
         queries are scoped, and it may quote labels of other series)"
    )]
    ScopedPrometheus {
        /// `errorType`, bounded.
        error_type: String,
    },
    /// A range sample would ask for more than [`MAX_RANGE_POINTS`] points.
    #[error(
        "the comparison window holds more than {MAX_RANGE_POINTS} steps: lengthen compare.step"
    )]
    TooManyPoints,
    /// A range sample answered with several series.
    #[error(
        "the query returned {0} series; a comparison gate needs one per region: aggregate it \
         (sum, max, avg)"
    )]
    SeveralSeries(usize),
    /// A range vector is not a gate's answer.
    #[error("the query returned a range vector; gates need an instant vector or scalar")]
    RangeVector,
    /// Any other result type (`string`, or one this controller does not know).
    #[error("the query returned a {0} result; gates need an instant vector or scalar")]
    UnsupportedType(String),
}

impl QueryError {
    /// The error as the sample from `source` reports it: for a scoped query, Prometheus's
    /// own message is dropped (see [`QueryError::ScopedPrometheus`]).
    pub fn for_source(self, source: SampleSource<'_>) -> QueryError {
        match self {
            QueryError::Prometheus { error_type, .. } if source.scoped => {
                QueryError::ScopedPrometheus { error_type }
            }
            other => other,
        }
    }
}

/// Why an answer to a scoped query with warnings is not used: the warnings' text, which
/// may quote labels of other series, is not passed on.
const SCOPED_PARTIAL: &str = "Prometheus warned that the answer may be incomplete (its \
                              warning is not shown: this namespace's gate queries are scoped)";

/// The HTTP client gate samples go through: bounded in time, following no redirect, and
/// trusting only `ca_bundle`'s certificates (PEM) when given, else the system's roots.
pub fn http_client(ca_bundle: Option<&[u8]>) -> Result<reqwest::Client, QueryError> {
    outbound::http_client(ClientOptions {
        ca_bundle: ca_bundle.map(|pem| (pem, CaTrust::Only)),
        connect_timeout: Some(CONNECT_TIMEOUT),
        timeout: Some(QUERY_TIMEOUT),
    })
    .map_err(|error| {
        QueryError::Credentials(
            match error {
                ClientError::CaBundle => "the CA bundle holds no PEM certificate",
                ClientError::Build => "no HTTP client can be built with them",
            }
            .into(),
        )
    })
}

/// Takes gate samples with instant queries over HTTP.
pub struct PrometheusProvider {
    http: reqwest::Client,
    default_url: Option<String>,
    limits: ResponseLimits,
    /// Clients trusting a Region's CA bundle, one per distinct bundle.
    ca_clients: CaClients,
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
            ca_clients: CaClients::default(),
            in_flight: tokio::sync::Semaphore::new(MAX_QUERIES_IN_FLIGHT),
        }
    }

    async fn query(&self, source: SampleSource<'_>, query: &str) -> Answer {
        let mut answer = self
            .bounded(source, Request::Instant(query))
            .await
            .and_then(|body| parse_answer(&body, self.limits))
            .unwrap_or_else(|error| {
                tracing::debug!(region = source.region.unwrap_or(""), %error, "gate sample not answered");
                Answer::from(QueryResult::Error(error.for_source(source).to_string()))
            });
        if source.scoped && matches!(answer.result, QueryResult::Partial(_)) {
            answer.result = QueryResult::Partial(SCOPED_PARTIAL.to_owned());
        }
        answer
    }

    async fn query_range(&self, source: SampleSource<'_>, query: &str, span: Span) -> SeriesAnswer {
        if range_points(span) > MAX_RANGE_POINTS {
            return SeriesAnswer::Error(QueryError::TooManyPoints.to_string());
        }
        let answer = self
            .bounded(source, Request::Range(query, span))
            .await
            .and_then(|body| parse_series(&body, self.limits))
            .unwrap_or_else(|error| {
                tracing::debug!(region = source.region.unwrap_or(""), %error, "gate range sample not answered");
                SeriesAnswer::Error(error.for_source(source).to_string())
            });
        match answer {
            SeriesAnswer::Partial(_) if source.scoped => {
                SeriesAnswer::Partial(SCOPED_PARTIAL.to_owned())
            }
            answer => answer,
        }
    }

    /// The answer's body, queued behind [`MAX_QUERIES_IN_FLIGHT`] and bounded by
    /// [`QUERY_TIMEOUT`].
    async fn bounded(
        &self,
        source: SampleSource<'_>,
        request: Request<'_>,
    ) -> Result<Vec<u8>, QueryError> {
        // The semaphore is never closed; were it, the query runs unqueued.
        let _permit = self.in_flight.acquire().await.ok();
        match tokio::time::timeout(QUERY_TIMEOUT, self.fetch(source, request)).await {
            Err(_) => Err(QueryError::Timeout),
            Ok(outcome) => outcome,
        }
    }

    /// `GET /api/v1/query` (or `/api/v1/query_range`) with `query` and `timeout`, as
    /// Prometheus's HTTP API defines it.
    async fn fetch(
        &self,
        source: SampleSource<'_>,
        query: Request<'_>,
    ) -> Result<Vec<u8>, QueryError> {
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
        if let Some(credentials) = credentials
            && credentials.need_https()
            && url.scheme() != "https"
        {
            return Err(
                if credentials.authorization.is_some() || credentials.ca_bundle.is_some() {
                    QueryError::CredentialsOverHttp
                } else {
                    QueryError::SecretHeadersOverHttp
                },
            );
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
        if let Some(credentials) = credentials.filter(|c| !c.headers.is_empty()) {
            request = request.headers(extra_headers(&credentials.headers)?);
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
        let max_bytes = self.limits.max_bytes;
        read_bounded(
            &mut response,
            max_bytes,
            || QueryError::TooLarge { max_bytes },
            transport,
        )
        .await
    }

    /// The client trusting `bundle`, built once per distinct bundle.
    fn ca_client(&self, bundle: &[u8]) -> Result<reqwest::Client, QueryError> {
        self.ca_clients
            .get_or_build(bundle, |bundle| http_client(Some(bundle)))
    }
}

impl GateProvider for PrometheusProvider {
    fn sample<'a>(&'a self, source: SampleSource<'a>, query: &'a str) -> SampleFuture<'a> {
        Box::pin(self.query(source, query))
    }

    fn sample_range<'a>(
        &'a self,
        source: SampleSource<'a>,
        query: &'a str,
        span: Span,
    ) -> SeriesFuture<'a> {
        Box::pin(self.query_range(source, query, span))
    }
}

/// Most points one range sample may ask for: Prometheus itself refuses more than 11,000
/// per series; a comparison needs far fewer.
pub const MAX_RANGE_POINTS: u64 = 1000;

/// What one call asks of Prometheus.
#[derive(Clone, Copy, Debug)]
enum Request<'q> {
    /// `query` at the server's now.
    Instant(&'q str),
    /// `query_range` over the span.
    Range(&'q str, Span),
}

/// Points a range query over `span` returns at most.
fn range_points(span: Span) -> u64 {
    let length = span
        .end
        .signed_duration_since(span.start)
        .num_milliseconds()
        .max(0)
        .unsigned_abs();
    let step = u64::try_from(span.step.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    length.checked_div(step).unwrap_or(0).saturating_add(1)
}

/// Seconds since the epoch as Prometheus reads them, to the millisecond.
fn unix_seconds(time: chrono::DateTime<chrono::Utc>) -> String {
    let millis = time.timestamp_millis();
    format!("{}.{:03}", millis.div_euclid(1000), millis.rem_euclid(1000))
}

/// The query URL under `base` (which may carry a path prefix, e.g. behind a proxy).
fn query_url(base: &str, request: Request<'_>) -> Result<reqwest::Url, QueryError> {
    let mut url = reqwest::Url::parse(base).map_err(|_| QueryError::BadUrl)?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(QueryError::BadUrl);
    }
    let endpoint = match request {
        Request::Instant(_) => "query",
        Request::Range(..) => "query_range",
    };
    let path = format!("{}/api/v1/{endpoint}", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url.set_fragment(None);
    {
        let mut pairs = url.query_pairs_mut();
        match request {
            Request::Instant(query) => {
                pairs.append_pair("query", query);
            }
            Request::Range(query, span) => {
                pairs
                    .append_pair("query", query)
                    .append_pair("start", &unix_seconds(span.start))
                    .append_pair("end", &unix_seconds(span.end))
                    .append_pair("step", &format!("{}ms", span.step.as_millis().max(1)));
            }
        }
        pairs.append_pair("timeout", &format!("{}ms", QUERY_TIMEOUT.as_millis()));
    }
    Ok(url)
}

/// The Region's `spec.prometheus.headers`, their values marked sensitive (so that no
/// `Debug` down the stack prints them). The hub's CRD and the Secret reader have checked
/// them; a hub with an older CRD gets the same refusals here. No error quotes a value.
fn extra_headers(headers: &[(String, String)]) -> Result<HeaderMap, QueryError> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let refused = |problem: String| {
            QueryError::Credentials(format!("spec.prometheus.headers: {problem}"))
        };
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| refused("a name is not an HTTP header name".to_owned()))?;
        if is_forbidden_prometheus_header(name.as_str()) {
            return Err(refused(format!("{name} cannot be set")));
        }
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| refused(format!("the value of {name} is not a valid header value")))?;
        value.set_sensitive(true);
        map.append(name, value);
    }
    Ok(map)
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

#[cfg(test)]
mod tests;
