//! The pure core of configrollout: what a rollout decides and what a region converges
//! to, with no network, no clock of its own and no Kubernetes client, so that every rule
//! is tested synchronously.
//!
//! - [`crdt`]: stamps, the hybrid logical clock, the LWW map (`Replica`, `Delta`), the
//!   companion codec, keyed digests, tombstone compaction.
//! - [`engine`]: the rollout state machine (`engine::decide`, `engine::settle`).
//! - [`gates`]: the gate condition grammar, query templates, the verdict of one sample
//!   and the `GateProvider` seam a backend plugs into.
//! - [`notify`]: which transitions are announced to which sinks, and the outbox.
//! - [`values`]: ConfigSchema checks of a candidate's key/values (per-key types, JSON
//!   Schema, CEL rules), compiled once and checked many times.

#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

pub mod crdt;
pub mod engine;
pub mod gates;
pub mod notify;
pub mod values;
