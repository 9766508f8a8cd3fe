//! What the process tells the outside: logs, metrics and probes.

pub mod health;
pub mod logging;
pub mod metrics;
pub mod panics;

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The probe server's address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address asked for.
        address: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The log filter does not parse.
    #[error("invalid log filter: {0}")]
    LogFilter(String),
    /// A global log subscriber is already installed.
    #[error("logging is already initialised")]
    LoggingAlreadyInitialised,
    /// The log format is neither `text` nor `json`.
    #[error("unknown log format {0:?}: expected text or json")]
    UnknownLogFormat(String),
}
