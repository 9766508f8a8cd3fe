//! Annotations on a ConfigRollout that operators (or `kubectl configrollout`) set to steer
//! it, each an RFC 3339 time so that a command is acted on once.

/// Abort the rollout (roll back what was published), set at this time.
pub const ABORT_ANNOTATION: &str = "configrollout.dev/abort";
/// Retry a halted or rolled-back rollout, set at this time.
pub const RETRY_ANNOTATION: &str = "configrollout.dev/retry";
