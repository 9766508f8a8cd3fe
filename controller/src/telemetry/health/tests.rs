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
    let (status, head, body) = exchange(server.address, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
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
