//! Termination signals. The process stops taking work on the first SIGTERM or SIGINT,
//! finishes or abandons the reconcile in flight, and releases the Lease.
//!
//! The order matters, so that nothing writes after the hand-over:
//! 1. [`Signals::recv`] resolves: mark `/readyz` failing
//!    (`telemetry::health::Health::mark_stopping`);
//! 2. stop the controller and let the reconcile in flight finish (kube-runtime's
//!    `Controller::graceful_shutdown_on`) for at most 15 s, or until a second signal,
//!    then abandon it (every write is idempotent, and the Lease is still ours);
//! 3. cancel the elector's token and await `LeaderElector::run`: it stops leading, then
//!    releases the Lease so the standby takes over at its next poll;
//! 4. cancel the probe server's token last, so probes answer until the end.
//!
//! Steps 3 and 4 are bounded too (6 s and 2 s), so the process exits within the
//! Deployment's 30 s grace period whatever the hub does, and never leads again once
//! stopping (`app::work::lead_and_work` lets a stop win over leadership).

use tokio::signal::unix::{Signal as SignalStream, SignalKind, signal};

/// Which signal asked us to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: the kubelet stopping the pod.
    Terminate,
    /// SIGINT: Ctrl-C.
    Interrupt,
}

impl Signal {
    /// The signal's name, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Terminate => "SIGTERM",
            Signal::Interrupt => "SIGINT",
        }
    }
}

/// The signal handlers could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the {signal} handler: {source}")]
pub struct ShutdownError {
    signal: &'static str,
    source: std::io::Error,
}

/// Installed handlers for SIGTERM and SIGINT. From [`Signals::install`] on, these signals
/// no longer kill the process: they are delivered to [`Signals::recv`].
#[derive(Debug)]
pub struct Signals {
    terminate: SignalStream,
    interrupt: SignalStream,
}

impl Signals {
    /// Installs the handlers. Call early in start-up, inside the tokio runtime, so that a
    /// signal arriving during start-up is not lost.
    pub fn install() -> Result<Self, ShutdownError> {
        let terminate = signal(SignalKind::terminate()).map_err(|source| ShutdownError {
            signal: "SIGTERM",
            source,
        })?;
        let interrupt = signal(SignalKind::interrupt()).map_err(|source| ShutdownError {
            signal: "SIGINT",
            source,
        })?;
        Ok(Signals {
            terminate,
            interrupt,
        })
    }

    /// Resolves on the next SIGTERM or SIGINT. Call again to wait for a second one (for
    /// example to give up a graceful stop).
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.terminate.recv() => Signal::Terminate,
            Some(()) = self.interrupt.recv() => Signal::Interrupt,
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sigterm_is_delivered_instead_of_killing_the_process() {
        let mut signals = Signals::install().unwrap();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(signals.recv().await, Signal::Terminate);
    }
}
