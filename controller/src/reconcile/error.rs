//! Why a reconcile could not finish: the step that failed ([`ReconcileError`]) around
//! what went wrong in it ([`HubError`], shared with the plugin). Messages carry object names and HTTP reasons,
//! never configuration values.

use std::time::Duration;

pub use configrollout_clusters::hub::{ErrorCategory, HubError};

/// How long to wait before retrying a reconcile that failed on an API call.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(15);
/// How long to wait before retrying a reconcile that failed on something that only a
/// change can fix; a change of the rollout reconciles it at once anyway.
pub const INVALID_REQUEUE: Duration = Duration::from_secs(300);

/// The longest wait between two attempts of a rollout that keeps failing.
pub const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(300);

/// Consecutive failures per rollout, so that one failing again and again (a region
/// refusing every merge, an API server in trouble) is retried less and less often: the
/// first retry after `base`, each next one twice as late, up to [`MAX_RETRY_BACKOFF`]. A
/// reconcile that succeeds starts the count again.
#[derive(Debug, Default)]
pub struct RetryBackoff {
    failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

impl RetryBackoff {
    /// Counts one more failure of `rollout` and returns when to try again.
    pub fn failed(&self, rollout: &str, base: Duration) -> Duration {
        let failures = match self.failures.lock() {
            Ok(mut failures) => {
                let count = failures.entry(rollout.to_owned()).or_default();
                *count = count.saturating_add(1);
                *count
            }
            Err(_) => 1,
        };
        let factor = 2_u32.saturating_pow(failures.saturating_sub(1).min(16));
        base.saturating_mul(factor).min(MAX_RETRY_BACKOFF.max(base))
    }

    /// Forgets `rollout`'s failures.
    pub fn succeeded(&self, rollout: &str) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(rollout);
        }
    }
}

/// A reconcile that failed, by the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading the rollout's inputs from the hub.
    #[error("reading the hub: {0}")]
    Fetch(#[source] HubError),
    /// Checking the inputs before any region is read.
    #[error("validating: {0}")]
    Validate(#[source] HubError),
    /// Reading the regions (and the hub objects region findings name).
    #[error("observing: {0}")]
    Observe(#[source] HubError),
    /// Carrying out the engine's actions.
    #[error("acting: {0}")]
    Act(#[source] HubError),
    /// Writing the rollout's status.
    #[error("writing status: {0}")]
    WriteStatus(#[source] HubError),
    /// Deleting revisions the status no longer names.
    #[error("pruning revisions: {0}")]
    Prune(#[source] HubError),
    /// The reconcile panicked: a bug of the controller, caught so that it stops only this
    /// rollout. Names where, never what it held.
    #[error(
        "internal error: the reconcile panicked at {location}; this rollout is retried with \
         backoff while the others go on (a bug: please report it with the controller's log)"
    )]
    Panicked {
        /// `file:line` of the panic.
        location: String,
    },
}

impl ReconcileError {
    /// What went wrong talking to the hub, whatever the step; `None` for a panic.
    pub fn cause(&self) -> Option<&HubError> {
        match self {
            ReconcileError::Fetch(cause)
            | ReconcileError::Validate(cause)
            | ReconcileError::Observe(cause)
            | ReconcileError::Act(cause)
            | ReconcileError::WriteStatus(cause)
            | ReconcileError::Prune(cause) => Some(cause),
            ReconcileError::Panicked { .. } => None,
        }
    }

    /// The metric label, and the retry policy.
    pub fn category(&self) -> ErrorCategory {
        self.cause()
            .map_or(ErrorCategory::Panic, HubError::category)
    }

    /// The reason of the Event that reports this failure on its rollout.
    pub fn event_reason(&self) -> &'static str {
        match self {
            ReconcileError::Fetch(_) => "FetchFailed",
            ReconcileError::Validate(_) => "ValidateFailed",
            ReconcileError::Observe(_) => "ObserveFailed",
            ReconcileError::Act(_) => "ActFailed",
            ReconcileError::WriteStatus(_) => "StatusWriteFailed",
            ReconcileError::Prune(_) => "PruneFailed",
            ReconcileError::Panicked { .. } => "InternalError",
        }
    }

    /// When to reconcile again.
    pub fn retry_after(&self) -> Duration {
        match self.category() {
            ErrorCategory::Api | ErrorCategory::NotLeader | ErrorCategory::Panic => ERROR_REQUEUE,
            ErrorCategory::Invalid => INVALID_REQUEUE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_failing_again_and_again_is_retried_less_often_up_to_a_cap() {
        let backoff = RetryBackoff::default();
        let waits: Vec<u64> = (0..8)
            .map(|_| backoff.failed("team/limits", ERROR_REQUEUE).as_secs())
            .collect();
        assert_eq!(waits, [15, 30, 60, 120, 240, 300, 300, 300]);
        // Another rollout has its own count; a success starts again.
        assert_eq!(backoff.failed("team/other", ERROR_REQUEUE).as_secs(), 15);
        backoff.succeeded("team/limits");
        assert_eq!(backoff.failed("team/limits", ERROR_REQUEUE).as_secs(), 15);
        // A base past the cap is kept: what only a change can fix waits its 5 minutes.
        assert_eq!(backoff.failed("team/x", INVALID_REQUEUE), INVALID_REQUEUE);
    }

    #[test]
    fn what_only_a_change_can_fix_is_retried_late_and_the_rest_soon() {
        let invalid = ReconcileError::Act(HubError::RevisionTooLarge {
            revision: "r3".into(),
            reason: "1.6 MB".into(),
        });
        assert_eq!(invalid.category(), ErrorCategory::Invalid);
        assert_eq!(invalid.retry_after(), INVALID_REQUEUE);
        assert_eq!(
            invalid.to_string(),
            "acting: revision r3 does not fit in a ControllerRevision: 1.6 MB"
        );

        let deposed = ReconcileError::WriteStatus(HubError::NotLeader);
        assert_eq!(deposed.category(), ErrorCategory::NotLeader);
        assert_eq!(deposed.retry_after(), ERROR_REQUEUE);
    }
}
