//! A TCP proxy in front of an API server that a test can cut, to play a hub that goes
//! away: refusing connections (a crashed apiserver), or holding them open without
//! answering (a partition, the nastier case: every call runs into its timeout).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forwards every byte both ways.
    Forward,
    /// Closes every connection, open or new.
    Refuse,
    /// Keeps every connection open and forwards nothing.
    Blackhole,
}

/// The running proxy; dropped, it stops.
pub struct TcpProxy {
    address: SocketAddr,
    mode: Arc<watch::Sender<ProxyMode>>,
    accept: JoinHandle<()>,
}

impl TcpProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (mode, _) = watch::channel(ProxyMode::Forward);
        let mode = Arc::new(mode);
        let accept = tokio::spawn(accept_loop(listener, upstream, mode.clone()));
        Ok(TcpProxy {
            address,
            mode,
            accept,
        })
    }

    /// Where clients connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Changes what happens to traffic, for open connections too.
    pub fn set_mode(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Open connections end with the sender: their tasks see the channel close.
        self.mode.send_replace(ProxyMode::Refuse);
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: Arc<watch::Sender<ProxyMode>>,
) {
    while let Ok((client, _)) = listener.accept().await {
        tokio::spawn(connection(client, upstream, mode.subscribe()));
    }
}

async fn connection(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<ProxyMode>,
) {
    let current = *mode.borrow_and_update();
    match current {
        ProxyMode::Refuse => return,
        ProxyMode::Blackhole => return hold(client, mode).await,
        ProxyMode::Forward => {}
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let next = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
        changed = mode.wait_for(|mode| *mode != ProxyMode::Forward) => match changed {
            Ok(mode) => *mode,
            Err(_) => return,
        },
    };
    drop(server);
    if next == ProxyMode::Blackhole {
        hold(client, mode).await;
    }
}

/// Keeps `client` open, unanswered, until the proxy refuses or stops.
async fn hold(client: TcpStream, mut mode: watch::Receiver<ProxyMode>) {
    let _ = mode.wait_for(|mode| *mode == ProxyMode::Refuse).await;
    drop(client);
}
