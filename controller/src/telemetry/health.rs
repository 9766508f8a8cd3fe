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
mod tests;
