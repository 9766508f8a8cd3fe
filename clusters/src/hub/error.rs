//! What went wrong talking to the hub or handling what it holds, and the kind of failure
//! it is. Messages carry object names and HTTP reasons, never configuration values.

use crate::api_call::CallError;

/// What kind of failure ended a reconcile, which also decides when it is retried (and is
/// the `category` label of the controller's error metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCategory {
    /// An API call failed or timed out: retried soon.
    Api,
    /// Something stored is malformed or cannot be stored: retried late, or when the
    /// rollout changes.
    Invalid,
    /// This replica stopped holding the Lease mid-reconcile.
    NotLeader,
    /// The reconcile panicked (a bug): the rollout is retried with backoff.
    Panic,
}

/// What went wrong talking to the hub or handling what it holds.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// A call to the hub's API server failed.
    #[error(transparent)]
    Call(#[from] CallError),
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
    /// This replica does not hold the Lease: it must not write.
    #[error("not the leader: not written")]
    NotLeader,
    /// The controller's caches of the hub have not had their first list.
    #[error("the caches of Regions, StageApprovals and Namespaces are not filled yet")]
    CacheNotReady,
    /// An action names a revision that is not stored.
    #[error("revision {revision} is not stored in the hub")]
    MissingRevision {
        /// Revision name.
        revision: String,
    },
    /// A claim object kept changing under this rollout's writes.
    #[error("the claim {claim} changed under every write; retried")]
    TooManyClaimConflicts {
        /// TargetClaim name.
        claim: String,
    },
    /// The rollout's namespace or name cannot form a writer id.
    #[error("rollout cannot form a writer id: {reason}")]
    Writer {
        /// Why.
        reason: String,
    },
}

impl HubError {
    /// The metric label, and the retry policy.
    pub fn category(&self) -> ErrorCategory {
        match self {
            HubError::Call(_)
            | HubError::CacheNotReady
            | HubError::TooManyClaimConflicts { .. } => ErrorCategory::Api,
            HubError::NotLeader => ErrorCategory::NotLeader,
            HubError::MalformedRevision { .. }
            | HubError::RevisionTooLarge { .. }
            | HubError::Encoding { .. }
            | HubError::NameTooLong { .. }
            | HubError::MissingRevision { .. }
            | HubError::Writer { .. } => ErrorCategory::Invalid,
        }
    }

    /// Whether the hub refused a write because the object changed since it was read.
    pub fn is_conflict(&self) -> bool {
        matches!(self, HubError::Call(error) if error.is_conflict())
    }
}
