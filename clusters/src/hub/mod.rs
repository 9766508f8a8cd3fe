//! What the controller and the plugin both keep in the hub besides the rollouts: the
//! stored revisions (ControllerRevisions), the keyed-digest key, and what can go wrong
//! reading or writing them.

pub mod digest_keys;
mod error;
pub mod revision_cache;
pub mod revision_store;

pub use error::{ErrorCategory, HubError};

use std::time::Duration;

/// How long one hub API call may take.
pub const HUB_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one hub API call with [`HUB_CALL_TIMEOUT`].
pub async fn api_call<T>(
    operation: &'static str,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, HubError> {
    Ok(crate::api_call::timed(operation, HUB_CALL_TIMEOUT, request).await?)
}
