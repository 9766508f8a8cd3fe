//! Writes a rollout's status with server-side apply under one field manager, and only
//! while this replica holds the Lease.

use std::time::Instant;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Context, HubError, api_call};
use crate::api::{ConfigRollout, ConfigRolloutStatus};
use crate::telemetry::metrics::{ReconcileRecord, WriteKind, WriteResult};

/// Field manager of every status write.
pub const STATUS_FIELD_MANAGER: &str = "configrollout-controller";

/// What became of a status write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusWrite {
    /// The status was already what it should be: nothing sent.
    Unchanged,
    /// Written.
    Written,
    /// Refused: the rollout changed since it was read, and the status was computed from
    /// the stale read.
    Stale,
}

/// Applies `status` to `rollout` if it changed and this replica holds the Lease, noting
/// the patch's result and duration in `record`.
pub async fn write_status(
    ctx: &Context,
    rollout: &ConfigRollout,
    status: &ConfigRolloutStatus,
    record: &mut ReconcileRecord,
) -> Result<StatusWrite, HubError> {
    if rollout.status.as_ref() == Some(status) {
        return Ok(StatusWrite::Unchanged);
    }
    if !ctx.fence.permits(WriteKind::RolloutStatus) {
        return Err(HubError::NotLeader);
    }
    let namespace = rollout.namespace().unwrap_or_default();
    let api: Api<ConfigRollout> = Api::namespaced(ctx.hub.clone(), &namespace);
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
    let started = Instant::now();
    let written = api_call(
        "write status",
        api.patch_status(&rollout.name_any(), &params, &Patch::Apply(&patch)),
    )
    .await;
    let result = match &written {
        Ok(_) => WriteResult::Ok,
        Err(error) if error.is_conflict() => WriteResult::Conflict,
        Err(_) => WriteResult::Error,
    };
    record.status_patch = Some((result, started.elapsed()));
    match written {
        Ok(_) => Ok(StatusWrite::Written),
        Err(error) if error.is_conflict() => {
            tracing::debug!(rollout = %rollout.name_any(), "status computed from a stale read; not written");
            Ok(StatusWrite::Stale)
        }
        Err(error) => Err(error),
    }
}
