//! The probe and metrics endpoint: `/healthz`, `/readyz` and `/metrics` over HTTP/1.1.
//!
//! hyper speaks the protocol; this module keeps the routes and the health state. Each
//! connection serves one request (`Connection: close`): probes and scrapes open a
//! connection per request anyway, and it keeps a connection's life bounded by the header
//! read timeout plus the write timeout. Concurrent connections are capped.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::TelemetryError;
use super::metrics::{CONTENT_TYPE, Metrics};
use crate::leader::LeaderState;

/// Limits of the HTTP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Time a client has to send its request head.
    pub read_timeout: Duration,
    /// Time a client has to take the response.
    pub write_timeout: Duration,
    /// Largest request head accepted.
    pub max_request_bytes: usize,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            max_request_bytes: 8 * 1024,
            max_connections: 32,
        }
    }
}

/// hyper refuses (panics on) a read buffer smaller than this; a head that never ends is cut
/// off here, a complete head at `max_request_bytes`.
const HYPER_MIN_BUF_SIZE: usize = 8 * 1024;

/// What the probes report, shared between the loops that set it and the server.
#[derive(Clone, Debug)]
pub struct Health {
    inner: Arc<HealthInner>,
}

#[derive(Debug)]
struct HealthInner {
    leader: LeaderState,
    caches_synced: AtomicBool,
    stopping: AtomicBool,
    /// Why the process can no longer do its work, once it cannot (the first reason wins).
    dead: OnceLock<&'static str>,
}

impl Health {
    /// Not ready until [`Health::mark_caches_synced`]; then ready while `leader` leads or
    /// stands by with the API server in reach.
    pub fn new(leader: LeaderState) -> Self {
        Health {
            inner: Arc::new(HealthInner {
                leader,
                caches_synced: AtomicBool::new(false),
                stopping: AtomicBool::new(false),
                dead: OnceLock::new(),
            }),
        }
    }

    /// The controller's caches (reflector stores) have synced.
    pub fn mark_caches_synced(&self) {
        self.inner.caches_synced.store(true, Ordering::Release);
    }

    /// The process is shutting down: no longer ready, still alive.
    pub fn mark_stopping(&self) {
        self.inner.stopping.store(true, Ordering::Release);
    }

    /// A task the process cannot work without (the controller's work loop, the leader
    /// elector) has ended while the process was not stopping: `/healthz` fails from now
    /// on, with `reason` (a fixed phrase, never a value), so that the kubelet restarts the
    /// pod. The first reason given is kept.
    pub fn mark_dead(&self, reason: &'static str) {
        let _ = self.inner.dead.set(reason);
    }

    /// `Ok` while the process can still do its work; otherwise why not. Stopping is not
    /// dying: a process shutting down stays alive until it exits.
    pub fn liveness(&self) -> Result<(), &'static str> {
        match self.inner.dead.get() {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }

    /// `Ok` when the process can take its share of work; otherwise why not.
    pub fn readiness(&self) -> Result<(), &'static str> {
        self.liveness()?;
        if self.inner.stopping.load(Ordering::Acquire) {
            return Err("shutting down");
        }
        if !self.inner.caches_synced.load(Ordering::Acquire) {
            return Err("caches not synced");
        }
        if !self.inner.leader.is_leading() && !self.inner.leader.is_reachable() {
            return Err("leader election cannot reach the API server");
        }
        Ok(())
    }
}

/// Binds the server's socket.
pub async fn bind(address: SocketAddr) -> Result<TcpListener, TelemetryError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| TelemetryError::Bind { address, source })
}

/// Serves until `shutdown` is cancelled, then waits for the connections in flight (each
/// bounded by `limits`' timeouts).
pub async fn serve(
    listener: TcpListener,
    health: Health,
    metrics: Arc<Metrics>,
    limits: ServerLimits,
    shutdown: CancellationToken,
) {
    let local = listener.local_addr().ok();
    info!(address = ?local, "serving /healthz, /readyz and /metrics");
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout)
        .max_header_size(limits.max_request_bytes)
        .max_buf_size(limits.max_request_bytes.max(HYPER_MIN_BUF_SIZE))
        .keep_alive(false)
        // The head the hand-written server sent, byte for byte: clients and tests that
        // match header names case-sensitively keep working.
        .title_case_headers(true)
        .auto_date_header(false);
    // hyper bounds reading the head, not writing the response: one deadline over the whole
    // (single-request) connection covers both.
    let connection_deadline = limits.read_timeout.saturating_add(limits.write_timeout);
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => break,
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let health = health.clone();
                let metrics = metrics.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    let response = route(&request, &health, &metrics);
                    async move { Ok::<_, Infallible>(response) }
                });
                let connection = http.serve_connection(TokioIo::new(stream), service);
                tokio::spawn(async move {
                    match tokio::time::timeout(connection_deadline, connection).await {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => debug!(%peer, %error, "probe connection ended badly"),
                        Err(_) => debug!(%peer, "probe connection outlived its deadline"),
                    }
                    drop(permit);
                });
            }
            Err(error) => {
                // Typically out of file descriptors: back off instead of spinning.
                warn!(%error, "accepting a probe connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    drop(listener);
    let all = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
    let _ = connections.acquire_many(all).await;
    info!("probe server stopped");
}

type Body = Full<Bytes>;

fn response(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Probe answers go stale at once; no proxy or client may reuse one.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn text(status: StatusCode, body: &str) -> Response<Body> {
    response(status, "text/plain; charset=utf-8", format!("{body}\n"))
}

/// Answers one request. hyper leaves the body out of HEAD answers.
fn route(request: &Request<Incoming>, health: &Health, metrics: &Metrics) -> Response<Body> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut refused = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        refused
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return refused;
    }
    match request.uri().path() {
        // Alive is answering, with the tasks that do the work still running: a process
        // whose runtime is stuck cannot answer, one whose work loop or elector ended
        // answers 503, and the kubelet restarts either.
        "/healthz" => match health.liveness() {
            Ok(()) => text(StatusCode::OK, "ok"),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, why),
        },
        "/readyz" => match health.readiness() {
            Ok(()) => text(StatusCode::OK, "ok"),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, why),
        },
        "/metrics" => response(StatusCode::OK, CONTENT_TYPE, metrics.render()),
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::metrics::ReconcileResult;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::time::Instant;

    struct Server {
        address: SocketAddr,
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    impl Server {
        async fn stop(self) {
            self.shutdown.cancel();
            self.task.await.unwrap();
        }
    }

    async fn start(health: Health, metrics: Arc<Metrics>, limits: ServerLimits) -> Server {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(serve(listener, health, metrics, limits, shutdown.clone()));
        Server {
            address,
            shutdown,
            task,
        }
    }

    async fn start_default() -> Server {
        start(
            Health::new(LeaderState::always_leading()),
            Arc::new(Metrics::new()),
            ServerLimits::default(),
        )
        .await
    }

    /// Sends raw bytes, returns what came back until the server closed the connection. A
    /// reset after the answer (the server closing with request bytes unread) ends it too.
    async fn raw_exchange(address: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut response = Vec::new();
        let mut chunk = [0_u8; 4096];
        while let Ok(read @ 1..) = stream.read(&mut chunk).await {
            response.extend_from_slice(&chunk[..read]);
        }
        String::from_utf8(response).unwrap()
    }

    /// Sends raw bytes, returns (status code, head, body).
    async fn exchange(address: SocketAddr, request: &[u8]) -> (u16, String, String) {
        let response = raw_exchange(address, request).await;
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap();
        (status, head.to_owned(), body.to_owned())
    }

    async fn get(address: SocketAddr, path: &str) -> (u16, String, String) {
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        exchange(address, request.as_bytes()).await
    }

    fn standby_state() -> (
        tokio::sync::watch::Sender<bool>,
        tokio::sync::watch::Sender<bool>,
        LeaderState,
    ) {
        let (leading, leading_rx) = tokio::sync::watch::channel(false);
        let (reachable, reachable_rx) = tokio::sync::watch::channel(false);
        (
            leading,
            reachable,
            LeaderState::from_channels(leading_rx, reachable_rx),
        )
    }

    #[tokio::test]
    async fn healthz_answers_while_the_process_serves() {
        let server = start_default().await;
        let (status, head, body) = get(server.address, "/healthz").await;
        assert_eq!(status, 200);
        assert_eq!(body, "ok\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("Connection: close"), "{head}");
        assert!(
            head.contains("Content-Type: text/plain; charset=utf-8"),
            "{head}"
        );
        assert!(head.contains("Content-Length: 3"), "{head}");
        assert!(head.contains("Cache-Control: no-store"), "{head}");
        server.stop().await;
    }

    #[tokio::test]
    async fn readyz_waits_for_caches_and_a_working_election() {
        let (leading, reachable, state) = standby_state();
        let health = Health::new(state);
        let server = start(
            health.clone(),
            Arc::new(Metrics::new()),
            ServerLimits::default(),
        )
        .await;

        let (status, _, body) = get(server.address, "/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(body, "caches not synced\n");

        health.mark_caches_synced();
        let (status, _, body) = get(server.address, "/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(body, "leader election cannot reach the API server\n");

        // Standing by, knowingly: ready.
        reachable.send_replace(true);
        assert_eq!(get(server.address, "/readyz").await.0, 200);

        // Leading: ready, even if the last renewal attempt failed.
        leading.send_replace(true);
        reachable.send_replace(false);
        assert_eq!(get(server.address, "/readyz").await.0, 200);

        health.mark_stopping();
        let (status, _, body) = get(server.address, "/readyz").await;
        assert_eq!(status, 503);
        assert_eq!(body, "shutting down\n");
        // Still alive while stopping.
        assert_eq!(get(server.address, "/healthz").await.0, 200);

        server.stop().await;
    }

    #[tokio::test]
    async fn healthz_fails_with_the_reason_once_a_task_the_work_needs_died() {
        let health = Health::new(LeaderState::always_leading());
        health.mark_caches_synced();
        let server = start(
            health.clone(),
            Arc::new(Metrics::new()),
            ServerLimits::default(),
        )
        .await;
        assert_eq!(get(server.address, "/healthz").await.0, 200);
        assert_eq!(get(server.address, "/readyz").await.0, 200);

        health.mark_dead("work loop ended");
        let (status, head, body) = get(server.address, "/healthz").await;
        assert_eq!(status, 503);
        assert_eq!(body, "work loop ended\n");
        assert!(head.contains("Cache-Control: no-store"), "{head}");
        // Not ready either: no traffic to a process about to be restarted.
        let (status, _, body) = get(server.address, "/readyz").await;
        assert_eq!((status, body.as_str()), (503, "work loop ended\n"));

        // The first reason is kept; stopping later does not revive it.
        health.mark_dead("leader election ended");
        health.mark_stopping();
        let (status, _, body) = get(server.address, "/healthz").await;
        assert_eq!((status, body.as_str()), (503, "work loop ended\n"));
        server.stop().await;
    }

    #[test]
    fn a_process_that_stops_is_still_alive() {
        let health = Health::new(LeaderState::always_leading());
        assert_eq!(health.liveness(), Ok(()));
        health.mark_stopping();
        assert_eq!(health.liveness(), Ok(()));
        assert_eq!(health.readiness(), Err("shutting down"));
    }

    #[tokio::test]
    async fn metrics_are_served_in_the_text_format() {
        let metrics = Arc::new(Metrics::new());
        metrics.reconcile_total.inc(ReconcileResult::Error);
        let server = start(
            Health::new(LeaderState::always_leading()),
            metrics.clone(),
            ServerLimits::default(),
        )
        .await;
        let (status, head, body) = get(server.address, "/metrics?x=1").await;
        assert_eq!(status, 200);
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
            "{head}"
        );
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert!(body.contains("configrollout_reconcile_total{result=\"error\"} 1\n"));
        assert_eq!(body, metrics.render());

        // HEAD: same head, no body.
        let (status, head, body) =
            exchange(server.address, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert_eq!(status, 200);
        assert!(
            head.contains(&format!("Content-Length: {}", metrics.render().len())),
            "{head}"
        );
        assert_eq!(body, "");

        server.stop().await;
    }

    #[tokio::test]
    async fn unknown_paths_methods_and_garbage_are_refused() {
        let server = start_default().await;
        let (status, _, body) = get(server.address, "/").await;
        assert_eq!((status, body.as_str()), (404, "not found\n"));
        assert_eq!(get(server.address, "/metrics/../healthz").await.0, 404);
        let (status, head, body) = exchange(
            server.address,
            b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert_eq!(status, 405);
        assert!(head.contains("Allow: GET, HEAD"), "{head}");
        assert_eq!(body, "method not allowed\n");
        assert_eq!(exchange(server.address, b"nonsense\r\n\r\n").await.0, 400);
        // hyper reads HTTP/1.0 and HTTP/1.1 only, and refuses any other version as a
        // malformed request.
        assert_eq!(
            exchange(server.address, b"GET /healthz HTTP/2.0\r\n\r\n")
                .await
                .0,
            400
        );
        server.stop().await;
    }

    #[tokio::test]
    async fn oversize_requests_are_refused() {
        let limits = ServerLimits {
            max_request_bytes: 1024,
            ..ServerLimits::default()
        };
        let server = start(
            Health::new(LeaderState::always_leading()),
            Arc::new(Metrics::new()),
            limits,
        )
        .await;
        let mut request = b"GET /healthz HTTP/1.1\r\nX-Padding: ".to_vec();
        request.extend(std::iter::repeat_n(b'a', 4096));
        request.extend_from_slice(b"\r\n\r\n");
        let (status, _, body) = exchange(server.address, &request).await;
        assert_eq!(status, 431);
        assert_eq!(body, "");

        // A head that never ends is cut off once it outgrows hyper's smallest buffer. hyper
        // closes with the rest of the request unread, so the kernel may send a reset that
        // overtakes the 431: either way the client is refused.
        let mut endless = b"GET /healthz HTTP/1.1\r\nX-Padding: ".to_vec();
        endless.extend(std::iter::repeat_n(b'a', 3 * HYPER_MIN_BUF_SIZE));
        let response = raw_exchange(server.address, &endless).await;
        assert!(
            response.is_empty() || response.starts_with("HTTP/1.1 431 "),
            "{response}"
        );
        server.stop().await;
    }

    #[tokio::test]
    async fn a_client_that_never_finishes_its_request_is_cut_off() {
        let limits = ServerLimits {
            read_timeout: Duration::from_millis(200),
            ..ServerLimits::default()
        };
        let server = start(
            Health::new(LeaderState::always_leading()),
            Arc::new(Metrics::new()),
            limits,
        )
        .await;
        let started = Instant::now();
        let response = tokio::time::timeout(
            Duration::from_secs(4),
            raw_exchange(server.address, b"GET /healthz HTTP/1.1\r\n"),
        )
        .await
        .expect("the server closes a slow connection before the client gives up");
        // hyper closes the connection without an answer.
        assert_eq!(response, "");
        assert!(started.elapsed() >= Duration::from_millis(200));
        server.stop().await;
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_for_a_free_slot() {
        let limits = ServerLimits {
            read_timeout: Duration::from_millis(300),
            max_connections: 1,
            ..ServerLimits::default()
        };
        let server = start(
            Health::new(LeaderState::always_leading()),
            Arc::new(Metrics::new()),
            limits,
        )
        .await;
        let mut slow = TcpStream::connect(server.address).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        // Let the server take the slow connection first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        assert_eq!(get(server.address, "/healthz").await.0, 200);
        // Served only once the slow one was cut off at its header read timeout.
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
        drop(slow);
        server.stop().await;
    }

    #[tokio::test]
    async fn stopping_closes_the_listener() {
        let server = start_default().await;
        assert_eq!(get(server.address, "/healthz").await.0, 200);
        let address = server.address;
        server.stop().await;
        assert!(TcpStream::connect(address).await.is_err());
    }
}
