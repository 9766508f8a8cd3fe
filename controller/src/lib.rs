//! configrollout: roll out configuration revisions across regional clusters, stage by
//! stage, as CRDT deltas. See `DESIGN.md` in the steering repository for the contract.
//!
//! `api`, `crdt`, `engine` and `gates` are pure (no IO, no clock of their own); the
//! module map, the steps of one reconcile and the rule for which module may call the
//! network are in `controller/README.md`.

pub mod app;
pub mod job_gate;
pub mod leader;
pub mod notifications;
mod outbound;
// A Prometheus answer is a tenant's query's answer: every sum on it is checked.
#[cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]
pub mod prometheus;
pub mod reconcile;
pub mod shutdown;
pub mod telemetry;
#[cfg(test)]
mod test_support;
pub mod validators;
pub mod web_gate;

// The layers below, under the names every module here has always used them by.
pub use configrollout_api as api;
pub use configrollout_clusters::{api_call, regions, watch_index};
pub use configrollout_core::{crdt, engine, gates, notify};
