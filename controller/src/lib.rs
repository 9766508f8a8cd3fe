//! configrollout: roll out configuration revisions across regional clusters, stage by
//! stage, as CRDT deltas. See `DESIGN.md` in the steering repository for the contract.
//!
//! `api`, `crdt`, `engine` and `gates` are pure (no IO, no clock of their own); the
//! module map, the steps of one reconcile and the rule for which module may call the
//! network are in `controller/README.md`.

#[cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]
pub mod api;
pub mod api_call;
pub mod app;
pub mod cli;
#[cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]
pub mod crdt;
#[cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]
pub mod engine;
#[cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]
pub mod gates;
pub mod leader;
pub mod reconcile;
pub mod regions;
pub mod shutdown;
pub mod telemetry;
