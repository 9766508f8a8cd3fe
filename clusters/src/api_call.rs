//! One Kubernetes API call with a timeout, and how it failed. Shared by every module that
//! talks to an API server (hub or region), so that each has the same timeout handling and
//! none carries the server's free-text message, which can quote submitted values.

use std::time::Duration;

/// How one API call failed: the HTTP code and reason, a transport error, or no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The API server answered with an error status.
    #[error("{operation}: API server answered {code} {reason}")]
    Api {
        /// What was being done.
        operation: &'static str,
        /// HTTP status code.
        code: u16,
        /// The status reason (e.g. `Conflict`, `Forbidden`).
        reason: String,
    },
    /// The API server could not be reached.
    #[error("{operation}: API server unreachable: {reason}")]
    Unreachable {
        /// What was being done.
        operation: &'static str,
        /// The transport error.
        reason: String,
    },
    /// The API server did not answer in time.
    #[error("{operation}: no answer within {after:?}")]
    Timeout {
        /// What was being done.
        operation: &'static str,
        /// The timeout.
        after: Duration,
    },
}

impl CallError {
    /// The HTTP status code, when the server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            Self::Api { code, .. } => Some(*code),
            Self::Unreachable { .. } | Self::Timeout { .. } => None,
        }
    }

    /// Whether someone else wrote in between (optimistic concurrency, HTTP 409).
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// Whether the server could not be reached at all.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Timeout { .. })
    }
}

/// Runs `request` with `timeout`, naming the call `operation` in any error.
pub async fn timed<T>(
    operation: &'static str,
    timeout: Duration,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(timeout, request).await {
        Err(_) => Err(CallError::Timeout {
            operation,
            after: timeout,
        }),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(kube::Error::Api(status))) => Err(CallError::Api {
            operation,
            code: status.code,
            reason: status.reason.clone(),
        }),
        Ok(Err(other)) => Err(CallError::Unreachable {
            operation,
            reason: other.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_that_does_not_answer_times_out_naming_the_operation() {
        let never = std::future::pending::<kube::Result<()>>();
        let error = timed("read target", Duration::from_millis(10), never)
            .await
            .unwrap_err();
        assert!(error.is_unreachable());
        assert!(
            error.to_string().starts_with("read target: no answer"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn an_error_status_keeps_code_and_reason_but_not_the_message() {
        let status =
            kube::core::Status::failure("data[rate]: s3cr3t is invalid", "Invalid").with_code(422);
        let failing = async { Err::<(), _>(kube::Error::Api(Box::new(status))) };
        let error = timed("write target", Duration::from_secs(1), failing)
            .await
            .unwrap_err();
        assert_eq!(error.code(), Some(422));
        assert!(!error.to_string().contains("s3cr3t"), "{error}");
    }
}
