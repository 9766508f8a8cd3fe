//! Leader election on a `coordination.k8s.io/v1` Lease, so that two replicas are safe:
//! only the process holding the Lease patches anything.
//!
//! The decisions are pure and take the clock as an argument ([`lease`]); [`LeaderElector::run`]
//! is the thin IO loop ([`elector`]), and [`LeaderState`] is what the rest of the process
//! reads ([`state`]).
//!
//! Expiry of someone else's Lease is judged the way client-go judges it: by how long *this*
//! process has seen the same record unchanged on its own monotonic clock, never by comparing
//! the holder's `renewTime` with our wall clock. Clock skew between nodes therefore cannot
//! make a standby take over early. Our own leadership ends locally at
//! `last successful renewal (time the request was sent) + renew_deadline`, and
//! `renew_deadline < lease_duration`, so we stop writing before any standby can consider the
//! Lease expired.

pub mod elector;
pub mod lease;
pub mod modes;
pub mod shard;
pub mod shards;
pub mod state;

use crate::api_call::CallError;

pub use elector::LeaderElector;
pub use lease::{DEFAULT_LEASE_DURATION, DEFAULT_LEASE_NAME, LeaseConfig, default_identity};
pub use shard::MAX_SHARDS;
pub use shards::{ShardElector, Shards, WriterIdentity};
pub use state::LeaderState;

/// Why leader election could not proceed. Messages carry HTTP codes and reasons, never the
/// server's free-text message.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The timings do not keep the safety margin leader election relies on.
    #[error("invalid lease timing: {0}")]
    InvalidTiming(&'static str),
    /// The shard count is out of range.
    #[error("the shard count must be between 1 and {max}, not {0}", max = shard::MAX_SHARDS)]
    InvalidShards(u32),
    /// A Lease name cannot be used.
    #[error("invalid lease name: {0}")]
    InvalidName(&'static str),
    /// The identity is empty.
    #[error("the leader election identity must not be empty")]
    EmptyIdentity,
    /// Someone else wrote the Lease between our read and our write (HTTP 409).
    #[error("{operation}: another candidate wrote the Lease first")]
    Conflict {
        /// What was being done.
        operation: &'static str,
    },
    /// A call to the API server failed.
    #[error(transparent)]
    Call(CallError),
}
