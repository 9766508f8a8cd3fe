//! What configrollout's controller and its kubectl plugin both do in clusters, so that the
//! plugin's overrides, repairs and history run the controller's own code without linking
//! its reconcile loop, leader election or telemetry.
//!
//! - [`regions`]: everything done in a region cluster: clients from kubeconfig Secrets
//!   (hardened), reading and materialising a target and its companion, consumers,
//!   overrides, repair, the credentials of a region's Prometheus.
//! - [`hub`]: the stored revisions (ControllerRevisions) and the keyed-digest key.
//! - [`api_call`]: every API call bounded by a timeout, with its error.

pub mod api_call;
pub mod hub;
pub mod regions;
pub mod use_order;
pub mod watch_index;
