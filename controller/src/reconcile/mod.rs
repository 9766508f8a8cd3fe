//! Glue: observe -> the engine decides -> act -> write status. Every API call of the
//! controller's own cluster (the hub) is here; region calls are in [`crate::regions`].

pub mod revision_store;
pub mod status_writer;

use std::time::Duration;

/// How long one hub API call may take.
pub const HUB_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a reconcile could not finish. Messages carry object names and HTTP reasons, never
/// configuration values.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The hub's API server answered with an error status.
    #[error("{operation}: API server answered {code} {reason}")]
    Api {
        /// What was being done.
        operation: &'static str,
        /// HTTP status code.
        code: u16,
        /// The status reason.
        reason: String,
    },
    /// The hub's API server could not be reached or did not answer in time.
    #[error("{operation}: {reason}")]
    Unreachable {
        /// What was being done.
        operation: &'static str,
        /// Transport error or timeout.
        reason: String,
    },
    /// A stored revision does not decode.
    #[error("stored revision {object} is malformed: {reason}")]
    MalformedRevision {
        /// ControllerRevision name.
        object: String,
        /// What is wrong (no values).
        reason: String,
    },
    /// A revision's state does not fit in one object.
    #[error("revision {revision} does not fit in a ControllerRevision: {reason}")]
    RevisionTooLarge {
        /// Revision name.
        revision: String,
        /// The encoder's error.
        reason: String,
    },
    /// Something could not be serialised.
    #[error("encoding {what}: {reason}")]
    Encoding {
        /// What.
        what: &'static str,
        /// The serializer's error.
        reason: String,
    },
    /// A derived object name exceeds the API server's limit.
    #[error("object name {name:?} is longer than 253 characters")]
    NameTooLong {
        /// The name.
        name: String,
    },
    /// This replica does not hold the Lease: it must not write status.
    #[error("not the leader: status not written")]
    NotLeader,
}

/// Runs one hub API call with [`HUB_CALL_TIMEOUT`], keeping the HTTP code and reason but
/// not the server's message (which can quote submitted values).
pub(crate) async fn api_call<T>(
    operation: &'static str,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, ReconcileError> {
    match tokio::time::timeout(HUB_CALL_TIMEOUT, request).await {
        Err(_) => Err(ReconcileError::Unreachable {
            operation,
            reason: format!("no answer within {HUB_CALL_TIMEOUT:?}"),
        }),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(kube::Error::Api(status))) => Err(ReconcileError::Api {
            operation,
            code: status.code,
            reason: status.reason.clone(),
        }),
        Ok(Err(other)) => Err(ReconcileError::Unreachable {
            operation,
            reason: other.to_string(),
        }),
    }
}
