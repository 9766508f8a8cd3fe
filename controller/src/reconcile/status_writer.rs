//! Writes a rollout's status with server-side apply under one field manager, and only
//! while this replica holds the Lease.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{ReconcileError, api_call};
use crate::api::{ConfigRollout, ConfigRolloutStatus};

/// Field manager of every status write.
pub const STATUS_FIELD_MANAGER: &str = "configrollout-controller";

/// Applies `status` to `rollout` if `leading` says this replica holds the Lease. Skips the
/// write (returns `Ok(false)`) when the status is unchanged.
pub async fn write_status(
    hub: &kube::Client,
    rollout: &ConfigRollout,
    status: &ConfigRolloutStatus,
    leading: bool,
) -> Result<bool, ReconcileError> {
    if rollout.status.as_ref() == Some(status) {
        return Ok(false);
    }
    if !leading {
        return Err(ReconcileError::NotLeader);
    }
    let namespace = rollout.namespace().unwrap_or_default();
    let api: Api<ConfigRollout> = Api::namespaced(hub.clone(), &namespace);
    // The resourceVersion the status was computed from is a precondition: a status
    // computed from a stale read (another writer, a deposed leader) is refused with a
    // conflict instead of overwriting a newer one.
    let patch = json!({
        "apiVersion": "configrollout.dev/v1alpha1",
        "kind": "ConfigRollout",
        "metadata": {"resourceVersion": rollout.resource_version()},
        "status": status,
    });
    let params = PatchParams::apply(STATUS_FIELD_MANAGER).force();
    api_call(
        "write status",
        api.patch_status(&rollout.name_any(), &params, &Patch::Apply(&patch)),
    )
    .await?;
    Ok(true)
}
