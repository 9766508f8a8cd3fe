//! The probe and metrics endpoint: `/healthz`, `/readyz` and `/metrics` over HTTP/1.1.
//!
//! Three GET routes do not justify a web framework: this is a small responder on tokio's
//! `TcpListener`, one request per connection (`Connection: close`), with a bounded request
//! head, a read deadline against slow clients, and a cap on concurrent connections.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
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
    failed: Mutex<Option<&'static str>>,
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
                failed: Mutex::new(None),
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

    /// A loop the process cannot work without has ended: `/healthz` fails from now on so
    /// that the kubelet restarts the container. `why` names the loop, e.g. `"controller"`.
    pub fn mark_failed(&self, why: &'static str) {
        if let Ok(mut failed) = self.inner.failed.lock() {
            failed.get_or_insert(why);
        }
    }

    /// `Ok` while the process runs its loops; otherwise which loop ended.
    pub fn liveness(&self) -> Result<(), String> {
        match self.inner.failed.lock() {
            Ok(failed) => match *failed {
                Some(why) => Err(format!("{why} stopped")),
                None => Ok(()),
            },
            Err(_) => Err("health state poisoned".to_owned()),
        }
    }

    /// `Ok` when the process can take its share of work; otherwise why not.
    pub fn readiness(&self) -> Result<(), String> {
        self.liveness()?;
        if self.inner.stopping.load(Ordering::Acquire) {
            return Err("shutting down".to_owned());
        }
        if !self.inner.caches_synced.load(Ordering::Acquire) {
            return Err("caches not synced".to_owned());
        }
        if !self.inner.leader.is_leading() && !self.inner.leader.is_reachable() {
            return Err("leader election cannot reach the API server".to_owned());
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
                let limits = limits.clone();
                tokio::spawn(async move {
                    if let Err(error) = respond(stream, &health, &metrics, &limits).await {
                        debug!(%peer, %error, "probe connection ended badly");
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

/// An HTTP response, always closing the connection.
#[derive(Debug, PartialEq, Eq)]
struct Response {
    status: u16,
    reason: &'static str,
    content_type: &'static str,
    allow: bool,
    body: String,
}

impl Response {
    fn text(status: u16, reason: &'static str, body: impl Into<String>) -> Self {
        let mut body = body.into();
        body.push('\n');
        Response {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            allow: false,
            body,
        }
    }

    fn to_bytes(&self, with_body: bool) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n",
            self.status,
            self.reason,
            self.content_type,
            self.body.len()
        );
        if self.allow {
            head.push_str("Allow: GET, HEAD\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        if with_body {
            bytes.extend_from_slice(self.body.as_bytes());
        }
        bytes
    }
}

/// How reading the request head ended.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Complete(Vec<u8>),
    TooLarge,
    Closed,
}

async fn respond(
    mut stream: TcpStream,
    health: &Health,
    metrics: &Metrics,
    limits: &ServerLimits,
) -> std::io::Result<()> {
    let head = tokio::time::timeout(
        limits.read_timeout,
        read_head(&mut stream, limits.max_request_bytes),
    )
    .await;
    let (response, with_body) = match head {
        Err(_) => (
            Response::text(408, "Request Timeout", "request timeout"),
            true,
        ),
        Ok(Err(error)) => return Err(error),
        Ok(Ok(Head::Closed)) => return Ok(()),
        Ok(Ok(Head::TooLarge)) => (
            Response::text(431, "Request Header Fields Too Large", "request too large"),
            true,
        ),
        Ok(Ok(Head::Complete(head))) => route(&head, health, metrics),
    };
    let bytes = response.to_bytes(with_body);
    match tokio::time::timeout(limits.write_timeout, async {
        stream.write_all(&bytes).await?;
        stream.shutdown().await
    })
    .await
    {
        Ok(result) => result?,
        Err(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "client did not take the response",
            ));
        }
    }
    // Closing with unread input makes the kernel send a reset, which can destroy the
    // response before the client reads it (a refused oversize request, say). Drain a
    // bounded amount first.
    let _ = tokio::time::timeout(LINGER, async {
        let mut discard = [0_u8; 4096];
        let mut drained = 0_usize;
        while drained < LINGER_BYTES {
            match stream.read(&mut discard).await {
                Ok(0) | Err(_) => break,
                Ok(read) => drained += read,
            }
        }
    })
    .await;
    Ok(())
}

/// How long, and how much, to drain after responding.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;

/// Reads until the blank line that ends the head, refusing more than `max` bytes.
async fn read_head(stream: &mut TcpStream, max: usize) -> std::io::Result<Head> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0_u8; 1024];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(Head::Closed);
        }
        let searched_from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..read]);
        if let Some(end) = find_end_of_head(&head[searched_from..]) {
            head.truncate(searched_from + end);
            return Ok(Head::Complete(head));
        }
        if head.len() > max {
            return Ok(Head::TooLarge);
        }
    }
}

fn find_end_of_head(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map(|position| position + 4)
}

/// Answers one request head; the bool says whether the body is sent (not for HEAD).
fn route(head: &[u8], health: &Health, metrics: &Metrics) -> (Response, bool) {
    let Some(request_line) = head
        .split(|byte| *byte == b'\n')
        .next()
        .and_then(|line| std::str::from_utf8(line).ok())
    else {
        return (Response::text(400, "Bad Request", "bad request"), true);
    };
    let mut parts = request_line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return (Response::text(400, "Bad Request", "bad request"), true);
    };
    if !version.starts_with("HTTP/1.") {
        return (
            Response::text(505, "HTTP Version Not Supported", "HTTP/1.x only"),
            true,
        );
    }
    let with_body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => {
            let mut response = Response::text(405, "Method Not Allowed", "method not allowed");
            response.allow = true;
            return (response, true);
        }
    };
    let path = target.split('?').next().unwrap_or(target);
    let response = match path {
        "/healthz" => match health.liveness() {
            Ok(()) => Response::text(200, "OK", "ok"),
            Err(why) => Response::text(503, "Service Unavailable", why),
        },
        "/readyz" => match health.readiness() {
            Ok(()) => Response::text(200, "OK", "ok"),
            Err(why) => Response::text(503, "Service Unavailable", why),
        },
        "/metrics" => Response {
            status: 200,
            reason: "OK",
            content_type: CONTENT_TYPE,
            allow: false,
            body: metrics.render(),
        },
        _ => Response::text(404, "Not Found", "not found"),
    };
    (response, with_body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::metrics::ReconcileResult;
    use tokio::io::AsyncReadExt;

    struct Server {
        address: SocketAddr,
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<()>,
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

    /// Sends raw bytes, returns (status code, headers, body).
    async fn exchange(address: SocketAddr, request: &[u8]) -> (u16, String, String) {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        let response = String::from_utf8(response).unwrap();
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
    async fn healthz_answers_while_the_loops_run() {
        let health = Health::new(LeaderState::always_leading());
        let server = start(
            health.clone(),
            Arc::new(Metrics::new()),
            ServerLimits::default(),
        )
        .await;
        let (status, head, body) = get(server.address, "/healthz").await;
        assert_eq!(status, 200);
        assert_eq!(body, "ok\n");
        assert!(head.contains("Connection: close"));
        health.mark_failed("controller");
        let (status, _, body) = get(server.address, "/healthz").await;
        assert_eq!(status, 503);
        assert_eq!(body, "controller stopped\n");
        server.shutdown.cancel();
        server.task.await.unwrap();
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

        server.shutdown.cancel();
        server.task.await.unwrap();
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
        assert!(head.contains("Content-Length: "));
        assert_eq!(body, "");

        server.shutdown.cancel();
        server.task.await.unwrap();
    }

    #[tokio::test]
    async fn unknown_paths_methods_and_garbage_are_refused() {
        let server = start(
            Health::new(LeaderState::always_leading()),
            Arc::new(Metrics::new()),
            ServerLimits::default(),
        )
        .await;
        assert_eq!(get(server.address, "/").await.0, 404);
        assert_eq!(get(server.address, "/metrics/../healthz").await.0, 404);
        let (status, head, _) = exchange(
            server.address,
            b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert_eq!(status, 405);
        assert!(head.contains("Allow: GET, HEAD"));
        assert_eq!(exchange(server.address, b"nonsense\r\n\r\n").await.0, 400);
        assert_eq!(
            exchange(server.address, b"GET /healthz HTTP/2.0\r\n\r\n")
                .await
                .0,
            505
        );
        server.shutdown.cancel();
        server.task.await.unwrap();
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
        assert_eq!(body, "request too large\n");
        server.shutdown.cancel();
        server.task.await.unwrap();
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
        let (status, _, _) = exchange(server.address, b"GET /healthz HTTP/1.1\r\n").await;
        assert_eq!(status, 408);
        server.shutdown.cancel();
        server.task.await.unwrap();
    }

    #[tokio::test]
    async fn stopping_closes_the_listener() {
        let server = start(
            Health::new(LeaderState::always_leading()),
            Arc::new(Metrics::new()),
            ServerLimits::default(),
        )
        .await;
        assert_eq!(get(server.address, "/healthz").await.0, 200);
        server.shutdown.cancel();
        server.task.await.unwrap();
        assert!(TcpStream::connect(server.address).await.is_err());
    }
}
