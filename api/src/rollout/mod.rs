//! `ConfigRollout`: one managed configuration object rolled out across regions in stages.
//! The spec (what to roll out and how) and the status (how far it got) live apart.

mod notifications;
mod spec;
mod status;

pub use notifications::*;

pub use spec::*;
pub use status::*;
