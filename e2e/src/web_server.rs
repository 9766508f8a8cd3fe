//! A small real HTTP server for `web` gate tests: it answers each path with the status
//! and JSON a test set (changeable while it runs, so a test can turn a gate's figure up
//! and down) and keeps every request it received, so that a test can assert what the
//! controller sent (method, headers, body). Loopback only, plain HTTP/1.1; dropped, it
//! stops, open connections included.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

use crate::LabError;

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRequest {
    /// `GET`, `POST`...
    pub method: String,
    /// The query string, without its `?`, if any.
    pub query: Option<String>,
    /// Every header in the order received, names in lower case (as HTTP/1 parsing gives
    /// them), values as text (lossily, should one not be UTF-8).
    pub headers: Vec<(String, String)>,
    /// The body, whole.
    pub body: Vec<u8>,
}

impl SeenRequest {
    /// The first value of header `name` (any case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(seen, _)| seen.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The body as text (lossily).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What the server answers and what it has seen, by path.
#[derive(Default)]
struct State {
    answers: HashMap<String, (u16, Bytes)>,
    seen: HashMap<String, Vec<SeenRequest>>,
}

/// The running server; dropped, it stops.
pub struct WebServer {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl WebServer {
    /// Listens on a free loopback port and serves in a background task. Every path
    /// answers 404 until [`WebServer::answer`] sets it.
    pub async fn start() -> Result<WebServer, LabError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| LabError::io("binding the web gate test server", error))?;
        let address = listener
            .local_addr()
            .map_err(|error| LabError::io("reading the web gate test server's address", error))?;
        let state = Arc::new(Mutex::new(State::default()));
        let accept = tokio::spawn(accept_loop(listener, state.clone()));
        Ok(WebServer {
            address,
            state,
            accept,
        })
    }

    /// Where the server listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The URL of `path` (which should start with `/`, and may carry a query).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// From now on, answers requests to `path` (without query) with `status` and
    /// `json_body` as `application/json`. A status HTTP cannot carry (outside 100..=999)
    /// is answered as 500.
    pub fn answer(&self, path: &str, status: u16, json_body: serde_json::Value) {
        let body = Bytes::from(json_body.to_string());
        self.state().answers.insert(path.to_owned(), (status, body));
    }

    /// The requests received on `path` (without query) so far, oldest first.
    pub fn requests(&self, path: &str) -> Vec<SeenRequest> {
        self.state().seen.get(path).cloned().unwrap_or_default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        // The accept task owns the connections' tasks: aborting it drops their set,
        // which aborts them too.
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of descriptors, mostly: wait rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let state = state.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| serve(request, state.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            // Reaps finished connections, so that the set does not grow with them.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve(
    request: Request<Incoming>,
    state: Arc<Mutex<State>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|collected| collected.to_bytes().to_vec())
        .unwrap_or_default();
    let seen = SeenRequest {
        method: parts.method.as_str().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    };
    let path = parts.uri.path().to_owned();
    let answer = {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.seen.entry(path.clone()).or_default().push(seen);
        state.answers.get(&path).cloned()
    };
    let (status, body) = match answer {
        Some((status, body)) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body,
        ),
        None => (
            StatusCode::NOT_FOUND,
            Bytes::from_static(br#"{"error":"no answer set for this path"}"#),
        ),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http() -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::new()
    }

    #[tokio::test]
    async fn answers_what_it_is_told_and_records_what_it_is_sent() {
        let server = WebServer::start().await.unwrap();
        let http = http();

        let missing = http.get(server.url("/rate")).send().await.unwrap();
        assert_eq!(missing.status(), 404);

        server.answer("/rate", 200, serde_json::json!({"errorRate": 0.01}));
        let answer = http
            .post(server.url("/rate?service=checkout"))
            .header("Authorization", "Bearer t0ken")
            .header("Content-Type", "application/json")
            .body(r#"{"region":"eu"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(
            answer.headers()["content-type"],
            "application/json",
            "content type"
        );
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body, serde_json::json!({"errorRate": 0.01}));

        // Changed while running.
        server.answer("/rate", 503, serde_json::json!({"error": "down"}));
        let answer = http.get(server.url("/rate")).send().await.unwrap();
        assert_eq!(answer.status(), 503);

        let seen = server.requests("/rate");
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0].method, "GET");
        assert_eq!(seen[1].method, "POST");
        assert_eq!(seen[1].query.as_deref(), Some("service=checkout"));
        assert_eq!(seen[1].header("authorization"), Some("Bearer t0ken"));
        assert_eq!(seen[1].body_text(), r#"{"region":"eu"}"#);
        assert!(server.requests("/other").is_empty());
    }

    #[tokio::test]
    async fn stops_when_dropped() {
        let server = WebServer::start().await.unwrap();
        server.answer("/", 200, serde_json::json!(1));
        let url = server.url("/");
        let http = http();
        assert_eq!(http.get(&url).send().await.unwrap().status(), 200);
        drop(server);
        // The abort lands at the accept task's next poll.
        let mut refused = false;
        for _ in 0..50 {
            let fresh = reqwest::Client::new();
            if fresh.get(&url).send().await.is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(refused, "the server still answers after drop");
    }
}
