//! Gate samples from a `web` gate: one HTTP request to an endpoint a platform admin
//! named in a ClusterGateTemplate, whose JSON answer a JSONPath turns into the sample
//! ([`JsonPathQuery::evaluate`]).
//!
//! The same bounds as the Prometheus provider's (`crate::prometheus`), for the same
//! reasons: the answer is refused from its `Content-Length` before any byte is read, or
//! read chunk by chunk and abandoned as soon as it passes [`WebLimits::max_bytes`]; the
//! whole exchange (connecting included) ends within the request's timeout; a redirect is
//! never followed (it could lead anywhere, https to http included); and a request given a
//! CA bundle trusts only that bundle's roots.
//!
//! Every problem is a [`QueryResult::Error`], never a panic nor an `Err`, so a broken
//! endpoint can only ever hold a gate closed. Its text lands in a tenant-visible status:
//! it names a status code, a `host:port` and a failure's kind, never the answer's body,
//! the URL's path or query (which may carry a tenant's arguments) nor a header's value
//! (which may come from a Secret). `Debug` of what holds headers shows their names only.

#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use crate::gates::verdict::{Answer, QueryResult};
use crate::gates::web::JsonPathQuery;
use crate::outbound::{self, CaClients, CaTrust, Cause, ClientError, ClientOptions, read_bounded};

/// Most web gate requests one controller has in flight, to all endpoints together, so
/// that many gates across many regions queue rather than open hundreds of connections.
pub const MAX_REQUESTS_IN_FLIGHT: usize = 32;

/// Longest header name quoted in an error, in characters.
const MAX_NAME_CHARS: usize = 64;

/// Headers the controller frames the request with: a template may not set them, since
/// a conflicting value would make the request ambiguous to the server or a proxy.
const RESERVED_HEADERS: [&str; 8] = [
    "connection",
    "content-length",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// How much of an answer the controller accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebLimits {
    /// Largest answer body, in bytes.
    pub max_bytes: usize,
}

impl WebLimits {
    /// Default [`WebLimits::max_bytes`]: 1 MiB.
    pub const DEFAULT_MAX_BYTES: usize = 1024 * 1024;
}

impl Default for WebLimits {
    fn default() -> Self {
        Self {
            max_bytes: Self::DEFAULT_MAX_BYTES,
        }
    }
}

/// The HTTP method of a web gate's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebMethod {
    /// `GET`, without a body.
    Get,
    /// `POST`, with [`WebRequest::body`] as `application/json`.
    Post,
}

/// One web gate sample to take.
#[derive(Clone, Copy)]
pub struct WebRequest<'a> {
    /// The endpoint, fully rendered by the caller; http or https, without credentials.
    pub url: &'a str,
    /// GET or POST.
    pub method: WebMethod,
    /// Headers to send (name, value); values may come from Secrets: never logged, never
    /// shown in an error. A header given here replaces the controller's default of the
    /// same name (`Accept`, `Content-Type`); one given twice is sent twice.
    pub headers: &'a [(String, String)],
    /// The POST body, sent as `application/json` (empty when `None`); not sent with GET.
    pub body: Option<&'a str>,
    /// What picks the sample's value out of the answer.
    pub json_path: &'a JsonPathQuery,
    /// The whole exchange's bound: connecting, sending and reading the answer.
    pub timeout: Duration,
    /// PEM roots: when given, the only ones the server's certificate is checked against.
    pub ca_bundle: Option<&'a [u8]>,
}

impl fmt::Debug for WebRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header names only (cut as an error shows them: a value may have been written
        // into a name), the URL without credentials nor query, the body's length only.
        let names: Vec<String> = self
            .headers
            .iter()
            .map(|(name, _)| shown_name(name).1)
            .collect();
        let url = match reqwest::Url::parse(self.url) {
            Ok(url) => format!("{}://{}{}", url.scheme(), endpoint(&url), url.path()),
            Err(_) => "(not a URL)".to_owned(),
        };
        f.debug_struct("WebRequest")
            .field("url", &url)
            .field("method", &self.method)
            .field("headers", &names)
            .field("body_bytes", &self.body.map(str::len))
            .field("json_path", &self.json_path.as_str())
            .field("timeout", &self.timeout)
            .field("ca_bundle_bytes", &self.ca_bundle.map(<[u8]>::len))
            .finish()
    }
}

/// Why a request gave no usable answer; its text is the sample's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum WebError {
    #[error("the web gate URL is not an absolute http(s) URL with a host")]
    BadUrl,
    #[error(
        "the web gate URL carries credentials (user:password@), which are refused: give them \
         in a header from a Secret"
    )]
    CredentialsInUrl,
    #[error("a header name is empty")]
    EmptyHeaderName,
    #[error("header name {shown:?} is not a valid HTTP header name (character {position})")]
    BadHeaderName { shown: String, position: usize },
    #[error("the value of header {name} is not a valid HTTP header value")]
    BadHeaderValue { name: String },
    #[error("header {name} is set by the controller and cannot be given")]
    ReservedHeader { name: String },
    #[error("the CA bundle holds no PEM certificate")]
    CaBundle,
    #[error("no HTTP client could be built")]
    Client,
    #[error("timed out after {}s", .0.as_secs_f64())]
    TimedOut(Duration),
    #[error("connection to {0} failed: {1}")]
    Connect(String, &'static str),
    #[error("request to {0} failed: {1}")]
    Transport(String, &'static str),
    #[error("the endpoint answered HTTP {0}, a redirect, which is not followed")]
    Redirect(u16),
    #[error("the endpoint answered HTTP {0}")]
    Status(u16),
    #[error("the answer is larger than the limit of {0} bytes")]
    TooLarge(usize),
}

/// Takes web gate samples. Cheap to share: one connection pool for requests without a
/// CA bundle, one per distinct bundle.
pub struct WebGateClient {
    /// The client trusting the system's roots; `Err` if none could be built, which every
    /// sample then reports.
    http: Result<reqwest::Client, WebError>,
    limits: WebLimits,
    /// Clients trusting only a request's CA bundle, one per distinct bundle.
    ca_clients: CaClients,
    /// Permits for [`MAX_REQUESTS_IN_FLIGHT`].
    in_flight: tokio::sync::Semaphore,
}

impl fmt::Debug for WebGateClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebGateClient")
            .field("limits", &self.limits)
            .field("usable", &self.http.is_ok())
            .finish_non_exhaustive()
    }
}

impl WebGateClient {
    /// A client accepting answers within `limits`.
    pub fn new(limits: WebLimits) -> Self {
        Self {
            http: http_client(None),
            limits,
            ca_clients: CaClients::default(),
            in_flight: tokio::sync::Semaphore::new(MAX_REQUESTS_IN_FLIGHT),
        }
    }

    /// Takes one sample: sends `request` and evaluates its answer. Never fails: every
    /// problem is a [`QueryResult::Error`] (see the module's documentation), and the
    /// exchange ends within `request.timeout` once a permit is had.
    pub async fn sample(&self, request: &WebRequest<'_>) -> Answer {
        // The semaphore is never closed; were it, the request runs unqueued.
        let _permit = self.in_flight.acquire().await.ok();
        let outcome = match tokio::time::timeout(request.timeout, self.fetch(request)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(WebError::TimedOut(request.timeout)),
        };
        let result = match outcome {
            Ok(body) => request.json_path.evaluate(&body),
            Err(error) => {
                tracing::debug!(%error, "web gate sample not answered");
                QueryResult::Error(error.to_string())
            }
        };
        Answer::from(result)
    }

    /// The answer's body, unbounded in time (the caller bounds it).
    async fn fetch(&self, request: &WebRequest<'_>) -> Result<Vec<u8>, WebError> {
        let url = checked_url(request.url)?;
        let headers = headers(request)?;
        let http = match request.ca_bundle {
            Some(bundle) => self.ca_client(bundle)?,
            None => self.http.clone()?,
        };
        let endpoint = endpoint(&url);
        let outgoing = match request.method {
            WebMethod::Get => http.get(url),
            WebMethod::Post => http.post(url).body(request.body.unwrap_or("").to_owned()),
        };
        let mut response = outgoing
            .headers(headers)
            .send()
            .await
            .map_err(|error| transport(error, &endpoint, request.timeout))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(WebError::Redirect(status.as_u16()));
        }
        if !status.is_success() {
            return Err(WebError::Status(status.as_u16()));
        }
        let max_bytes = self.limits.max_bytes;
        read_bounded(
            &mut response,
            max_bytes,
            || WebError::TooLarge(max_bytes),
            |error| transport(error, &endpoint, request.timeout),
        )
        .await
    }

    /// The client trusting only `bundle`, built once per distinct bundle.
    fn ca_client(&self, bundle: &[u8]) -> Result<reqwest::Client, WebError> {
        self.ca_clients
            .get_or_build(bundle, |bundle| http_client(Some(bundle)))
    }
}

/// A client following no redirect, trusting only `ca_bundle`'s certificates (PEM) when
/// given, else the system's roots. Not bounded in time itself: each request has its own
/// timeout, enforced around the whole exchange.
fn http_client(ca_bundle: Option<&[u8]>) -> Result<reqwest::Client, WebError> {
    outbound::http_client(ClientOptions {
        ca_bundle: ca_bundle.map(|pem| (pem, CaTrust::Only)),
        ..ClientOptions::default()
    })
    .map_err(|error| match error {
        ClientError::CaBundle => WebError::CaBundle,
        ClientError::Build => WebError::Client,
    })
}

/// `raw` if it is an absolute http(s) URL with a host and without credentials.
fn checked_url(raw: &str) -> Result<reqwest::Url, WebError> {
    let mut url = reqwest::Url::parse(raw).map_err(|_| WebError::BadUrl)?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(WebError::BadUrl);
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(WebError::BadUrl);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(WebError::CredentialsInUrl);
    }
    url.set_fragment(None);
    Ok(url)
}

/// `host:port` of `url`, all that an error says of where the request went.
fn endpoint(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// The headers to send: the controller's defaults (`Accept`, and `Content-Type` for a
/// POST), each replaced by the request's header of the same name, then the request's.
/// Every value is marked sensitive, so that no `Debug` down the stack prints it.
fn headers(request: &WebRequest<'_>) -> Result<HeaderMap, WebError> {
    let mut map = HeaderMap::new();
    map.insert(ACCEPT, HeaderValue::from_static("application/json"));
    if request.method == WebMethod::Post {
        map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    let mut given: HashSet<HeaderName> = HashSet::new();
    for (name, value) in request.headers {
        let name = header_name(name)?;
        if RESERVED_HEADERS.contains(&name.as_str()) {
            return Err(WebError::ReservedHeader {
                name: name.as_str().to_owned(),
            });
        }
        let mut value = HeaderValue::from_str(value).map_err(|_| WebError::BadHeaderValue {
            name: name.as_str().to_owned(),
        })?;
        value.set_sensitive(true);
        if given.insert(name.clone()) {
            map.insert(name, value);
        } else {
            map.append(name, value);
        }
    }
    Ok(map)
}

/// `raw` as a header name. When it is not one, the error shows only its part before the
/// first character that may not be in a name: whoever wrote `Authorization: Bearer ...`
/// as a name must not find the token in a status.
fn header_name(raw: &str) -> Result<HeaderName, WebError> {
    if raw.is_empty() {
        return Err(WebError::EmptyHeaderName);
    }
    HeaderName::from_bytes(raw.as_bytes()).map_err(|_| {
        let (position, shown) = shown_name(raw);
        WebError::BadHeaderName {
            shown,
            position: position.saturating_add(1),
        }
    })
}

/// What may be shown of a header name: its part before the first character that may not
/// be in a name, cut to [`MAX_NAME_CHARS`]; with that character's index (the name's
/// length when there is none).
fn shown_name(raw: &str) -> (usize, String) {
    let (position, valid) = raw
        .char_indices()
        .find(|(_, c)| !is_token_char(*c))
        .map_or((raw.chars().count(), raw), |(index, _)| {
            (raw[..index].chars().count(), &raw[..index])
        });
    let mut shown: String = valid.chars().take(MAX_NAME_CHARS).collect();
    if valid.chars().nth(MAX_NAME_CHARS).is_some() {
        shown.push('…');
    }
    (position, shown)
}

/// Whether `c` may be in an HTTP header name (RFC 9110 `tchar`).
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// A reqwest failure as a class (the error's own text names the URL, query included).
fn transport(error: reqwest::Error, endpoint: &str, timeout: Duration) -> WebError {
    let error = error.without_url();
    let cause = Cause::of(&error);
    if error.is_timeout() || cause == Cause::TimedOut {
        return WebError::TimedOut(timeout);
    }
    if error.is_connect() {
        return WebError::Connect(
            endpoint.to_owned(),
            match cause {
                Cause::Tls => TLS_FAILURE,
                Cause::Refused => "connection refused",
                Cause::TimedOut | Cause::Other => "unreachable",
            },
        );
    }
    WebError::Transport(
        endpoint.to_owned(),
        if cause == Cause::Tls {
            TLS_FAILURE
        } else if error.is_body() || error.is_decode() {
            "answer cut off"
        } else {
            "request failed"
        },
    )
}

const TLS_FAILURE: &str =
    "TLS handshake failed (the certificate is not trusted or not valid for the host)";

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Instant;

    use hyper::StatusCode;
    use tokio::net::TcpListener;

    use crate::test_support::{
        CA_PEM, OTHER_CA_PEM, Seen, endless, redirect, respond, serve, serve_fixed, serve_tls,
        trickle,
    };

    const SECRET: &str = "s3cr3t-t0ken-9f2e";

    fn client() -> WebGateClient {
        WebGateClient::new(WebLimits::default())
    }

    fn get<'a>(url: &'a str, path: &'a JsonPathQuery) -> WebRequest<'a> {
        WebRequest {
            url,
            method: WebMethod::Get,
            headers: &[],
            body: None,
            json_path: path,
            timeout: Duration::from_secs(5),
            ca_bundle: None,
        }
    }

    fn path(source: &str) -> JsonPathQuery {
        JsonPathQuery::parse(source).unwrap()
    }

    fn error_text(answer: Answer) -> String {
        assert_eq!(answer.evaluated_at, None);
        match answer.result {
            QueryResult::Error(text) => text,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_number_answer_is_a_scalar_and_accept_is_json() {
        let (base, mut seen) = serve_fixed(StatusCode::OK, r#"{"errorRate": 0.004}"#).await;
        let url = format!("{base}/rate?service=checkout");
        let json_path = path("$.errorRate");
        let answer = client().sample(&get(&url, &json_path)).await;
        assert_eq!(answer, Answer::from(QueryResult::Scalar(0.004)));
        let request = seen.recv().await.unwrap();
        assert_eq!(request.method, hyper::Method::GET);
        assert_eq!(request.uri.to_string(), "/rate?service=checkout");
        assert_eq!(request.headers["accept"], "application/json");
        assert!(request.headers.get("content-type").is_none());
        assert!(request.body.is_empty());
    }

    #[tokio::test]
    async fn a_nested_json_path_picks_its_value() {
        let (base, _) = serve_fixed(
            StatusCode::OK,
            r#"{"data": {"regions": [{"name": "eu", "slo": {"burn": "1.5"}},
                                     {"name": "us", "slo": {"burn": 0.2}}]}}"#,
        )
        .await;
        let client = client();
        let one = path("$.data.regions[?@.name == 'eu'].slo.burn");
        assert_eq!(
            client.sample(&get(&base, &one)).await.result,
            QueryResult::Scalar(1.5)
        );
        let all = path("$.data.regions[*].slo.burn");
        let QueryResult::Vector(elements) = client.sample(&get(&base, &all)).await.result else {
            panic!("expected a vector");
        };
        let values: Vec<f64> = elements.iter().map(|(_, value)| *value).collect();
        assert_eq!(values, [1.5, 0.2]);
        let none = path("$.data.missing");
        assert_eq!(
            client.sample(&get(&base, &none)).await.result,
            QueryResult::Empty
        );
    }

    #[tokio::test]
    async fn a_server_error_names_its_status_only() {
        let (base, _) = serve_fixed(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"error": "stack trace with s3cr3t"}"#,
        )
        .await;
        let json_path = path("$.error");
        let text = error_text(client().sample(&get(&base, &json_path)).await);
        assert_eq!(text, "the endpoint answered HTTP 500");
        let (base, _) = serve_fixed(StatusCode::NOT_FOUND, "{}").await;
        let text = error_text(client().sample(&get(&base, &json_path)).await);
        assert_eq!(text, "the endpoint answered HTTP 404");
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        let (elsewhere, mut followed) = serve_fixed(StatusCode::OK, r#"{"v": 1}"#).await;
        for status in [StatusCode::FOUND, StatusCode::PERMANENT_REDIRECT] {
            let location = format!("{elsewhere}/v");
            let (base, mut requests) = serve(move |_| {
                let location = location.clone();
                async move { redirect(status, &location) }
            })
            .await;
            let json_path = path("$.v");
            let text = error_text(client().sample(&get(&base, &json_path)).await);
            assert_eq!(
                text,
                format!(
                    "the endpoint answered HTTP {}, a redirect, which is not followed",
                    status.as_u16()
                )
            );
            assert!(requests.recv().await.is_some());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(followed.try_recv().is_err(), "the redirect was followed");
    }

    #[tokio::test]
    async fn an_oversize_answer_is_refused() {
        let limits = WebLimits { max_bytes: 1024 };
        let client = WebGateClient::new(limits);
        let json_path = path("$.v");
        // Announced too large: refused before its body is read.
        let (base, _) = serve(|_| async {
            respond(StatusCode::OK, format!(r#"{{"v": 1}}{}"#, " ".repeat(2000)))
        })
        .await;
        assert_eq!(
            error_text(client.sample(&get(&base, &json_path)).await),
            "the answer is larger than the limit of 1024 bytes"
        );
        // Chunked and endless: abandoned as soon as it passes the cap (were it buffered
        // whole first, this would time out instead).
        let (base, _) = serve(|_| async { endless(512) }).await;
        assert_eq!(
            error_text(client.sample(&get(&base, &json_path)).await),
            "the answer is larger than the limit of 1024 bytes"
        );
        // At the cap exactly is read.
        let (base, _) = serve(|_| async {
            let answer = r#"{"v": 7}"#;
            respond(
                StatusCode::OK,
                format!("{answer}{}", " ".repeat(1024 - answer.len())),
            )
        })
        .await;
        assert_eq!(
            client.sample(&get(&base, &json_path)).await.result,
            QueryResult::Scalar(7.0)
        );
    }

    #[tokio::test]
    async fn a_slow_server_times_out() {
        let (base, _) = serve(|_| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            respond(StatusCode::OK, r#"{"v": 1}"#)
        })
        .await;
        let json_path = path("$.v");
        let mut request = get(&base, &json_path);
        request.timeout = Duration::from_millis(300);
        let started = Instant::now();
        assert_eq!(
            error_text(client().sample(&request).await),
            "timed out after 0.3s"
        );
        assert!(started.elapsed() < Duration::from_secs(3));

        // A head at once and then a trickle: the timeout covers reading the body too.
        let (base, _) = serve(|_| async { trickle(Duration::from_millis(100)) }).await;
        let mut request = get(&base, &json_path);
        request.timeout = Duration::from_secs(1);
        assert_eq!(
            error_text(client().sample(&request).await),
            "timed out after 1s"
        );
    }

    #[tokio::test]
    async fn a_post_sends_its_body_and_headers() {
        let (base, mut seen) = serve_fixed(StatusCode::OK, r#"{"result": {"ok": true}}"#).await;
        let url = format!("{base}/api/check");
        let headers = [
            ("Authorization".to_owned(), format!("Bearer {SECRET}")),
            ("X-Tenant".to_owned(), "team-a".to_owned()),
            ("X-Tenant".to_owned(), "team-b".to_owned()),
        ];
        let json_path = path("$.result.ok");
        let body = r#"{"region": "eu-west", "revision": "abc"}"#;
        let request = WebRequest {
            url: &url,
            method: WebMethod::Post,
            headers: &headers,
            body: Some(body),
            json_path: &json_path,
            timeout: Duration::from_secs(5),
            ca_bundle: None,
        };
        assert_eq!(
            client().sample(&request).await.result,
            QueryResult::Scalar(1.0)
        );
        let received = seen.recv().await.unwrap();
        assert_eq!(received.method, hyper::Method::POST);
        assert_eq!(received.uri.path(), "/api/check");
        assert_eq!(received.body, body.as_bytes());
        assert_eq!(received.headers["content-type"], "application/json");
        assert_eq!(received.headers["accept"], "application/json");
        assert_eq!(
            received.headers["authorization"],
            format!("Bearer {SECRET}").as_str()
        );
        let tenants: Vec<_> = received.headers.get_all("x-tenant").iter().collect();
        assert_eq!(tenants, ["team-a", "team-b"]);

        // A header of the request replaces the controller's default of the same name.
        let headers = [("Accept".to_owned(), "application/vnd.x+json".to_owned())];
        let request = WebRequest {
            headers: &headers,
            ..get(&url, &json_path)
        };
        client().sample(&request).await;
        let received = seen.recv().await.unwrap();
        let accepts: Vec<_> = received.headers.get_all("accept").iter().collect();
        assert_eq!(accepts, ["application/vnd.x+json"]);
    }

    /// Whatever goes wrong, no error text (nor `Debug` of the request) carries a header's
    /// value or the URL's query.
    #[tokio::test]
    async fn no_error_text_carries_a_header_value_or_the_query() {
        let closed = {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap()
        };
        let (echo, _) = serve(|seen: Seen| async move {
            // An endpoint echoing the request's headers in an error page.
            let echoed = format!("{:?}", seen.headers);
            respond(StatusCode::UNAUTHORIZED, echoed)
        })
        .await;
        let (not_json, _) = serve(|seen: Seen| async move {
            respond(StatusCode::OK, format!("<html>{:?}</html>", seen.headers))
        })
        .await;
        let (slow, _) = serve(|_| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            respond(StatusCode::OK, "{}")
        })
        .await;
        let urls = [
            format!("http://{closed}/x?tenant={SECRET}"),
            format!("{echo}/x?tenant={SECRET}"),
            format!("{not_json}/x?tenant={SECRET}"),
            format!("{slow}/x?tenant={SECRET}"),
            format!("ftp://127.0.0.1/x?tenant={SECRET}"),
            format!("http://user:{SECRET}@127.0.0.1/x"),
            format!("not a url {SECRET}"),
        ];
        let header_sets = [
            vec![("Authorization".to_owned(), format!("Bearer {SECRET}"))],
            vec![("X-Bad".to_owned(), format!("{SECRET}\nInjected: 1"))],
            vec![(format!("Authorization: Bearer {SECRET}"), "x".to_owned())],
            vec![("Content-Length".to_owned(), SECRET.to_owned())],
        ];
        let json_path = path("$.v");
        let client = client();
        for url in &urls {
            for headers in &header_sets {
                let request = WebRequest {
                    headers,
                    timeout: Duration::from_millis(300),
                    ..get(url, &json_path)
                };
                let text = error_text(client.sample(&request).await);
                assert!(!text.contains(SECRET), "{url} {headers:?}: {text}");
                assert!(text.chars().count() <= 200, "{text}");
                let debug = format!("{request:?}");
                assert!(!debug.contains(SECRET), "{debug}");
            }
        }
    }

    #[tokio::test]
    async fn refusals_say_what_is_wrong() {
        let json_path = path("$.v");
        let client = client();
        type Headers = Vec<(String, String)>;
        let cases: [(&str, Headers, &str); 7] = [
            (
                "ftp://127.0.0.1/x",
                vec![],
                "the web gate URL is not an absolute http(s) URL with a host",
            ),
            (
                "http://user:pw@127.0.0.1/x",
                vec![],
                "the web gate URL carries credentials (user:password@), which are refused: give \
                 them in a header from a Secret",
            ),
            (
                "http://127.0.0.1:1/",
                vec![("X-Key".into(), "a\nb".into())],
                "the value of header x-key is not a valid HTTP header value",
            ),
            (
                "http://127.0.0.1:1/",
                vec![("Authorization: Bearer t".into(), "x".into())],
                "header name \"Authorization\" is not a valid HTTP header name (character 14)",
            ),
            (
                "http://127.0.0.1:1/",
                vec![(String::new(), "x".into())],
                "a header name is empty",
            ),
            (
                "http://127.0.0.1:1/",
                vec![("Transfer-Encoding".into(), "chunked".into())],
                "header transfer-encoding is set by the controller and cannot be given",
            ),
            (
                "http://127.0.0.1:1/",
                vec![],
                "connection to 127.0.0.1:1 failed: connection refused",
            ),
        ];
        for (url, headers, expected) in cases {
            let request = WebRequest {
                headers: &headers,
                ..get(url, &json_path)
            };
            assert_eq!(error_text(client.sample(&request).await), expected, "{url}");
        }
        let request = WebRequest {
            ca_bundle: Some(b"not a certificate"),
            ..get("https://127.0.0.1:1/", &json_path)
        };
        assert_eq!(
            error_text(client.sample(&request).await),
            "the CA bundle holds no PEM certificate"
        );
    }

    #[tokio::test]
    async fn a_body_that_is_not_json_is_an_error() {
        let (base, _) = serve_fixed(StatusCode::OK, "<html>bad gateway</html>").await;
        let json_path = path("$.v");
        let text = error_text(client().sample(&get(&base, &json_path)).await);
        assert!(text.starts_with("the answer is not JSON: "), "{text}");
        assert!(!text.contains("gateway"), "{text}");
    }

    #[tokio::test]
    async fn https_trusts_only_the_given_ca_bundle() {
        let (url, _) = serve_tls(|_| async { respond(StatusCode::OK, r#"{"v": 3}"#) }).await;
        let json_path = path("$.v");
        let client = client();
        let trusting = WebRequest {
            ca_bundle: Some(CA_PEM),
            ..get(&url, &json_path)
        };
        assert_eq!(
            client.sample(&trusting).await.result,
            QueryResult::Scalar(3.0)
        );
        let other = WebRequest {
            ca_bundle: Some(OTHER_CA_PEM),
            ..get(&url, &json_path)
        };
        let text = error_text(client.sample(&other).await);
        assert!(text.contains("TLS handshake failed"), "{text}");
        assert!(text.starts_with("connection to 127.0.0.1:"), "{text}");
    }

    #[test]
    fn debug_shows_header_names_only() {
        let headers = [("Authorization".to_owned(), format!("Bearer {SECRET}"))];
        let json_path = path("$.v");
        let url = format!("https://example.test/check?key={SECRET}");
        let request = WebRequest {
            url: &url,
            method: WebMethod::Post,
            headers: &headers,
            body: Some(SECRET),
            json_path: &json_path,
            timeout: Duration::from_secs(1),
            ca_bundle: None,
        };
        let debug = format!("{request:?} {:?}", client());
        assert!(!debug.contains(SECRET), "{debug}");
        assert!(debug.contains("Authorization"), "{debug}");
    }
}
