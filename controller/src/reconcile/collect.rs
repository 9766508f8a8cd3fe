//! The collect step: after a reconcile that found the rollout Complete everywhere, with a
//! tombstone left to collect, reads the other rollouts writing the same target and records
//! the target's stable point in the status about to be written. The decisions are
//! [`crate::engine::collection`]'s and [`crate::crdt::collection_point`]'s; this step
//! only lists.

use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::{Context, HubError, api_call};
use crate::api::{ConfigRollout, ConfigRolloutStatus};
use crate::crdt::{WriterProgress, collection_point};
use crate::engine::{Observations, collection};

/// Moves `status.collectedThrough` forward when the rollout proposes a point and every
/// other writer of its target allows it. A failed list collects nothing this time; the
/// rollout stays correct, only its tombstones wait.
pub async fn collect(
    ctx: &Context,
    rollout: &ConfigRollout,
    observations: &Observations,
    status: &mut ConfigRolloutStatus,
) {
    let Some(proposal) = collection::proposal(status, observations) else {
        return;
    };
    let others = match other_writers(ctx, rollout).await {
        Ok(others) => others,
        Err(error) => {
            tracing::warn!(%error, "other writers of the target not read; nothing collected");
            return;
        }
    };
    match collection_point(&proposal, &others) {
        Some(point) => {
            if collection::record(status, &point) {
                tracing::debug!(%point, writers = others.len() + 1, "target stable point moved");
            }
        }
        None => tracing::debug!("another writer of the target is behind; nothing collected"),
    }
}

/// The progress of every other rollout whose target is this rollout's, in any namespace
/// (found by the CRD's selectable fields, so only they are read).
async fn other_writers(
    ctx: &Context,
    rollout: &ConfigRollout,
) -> Result<Vec<WriterProgress>, HubError> {
    let target = &rollout.spec.target;
    let selector = format!(
        "spec.target.namespace={},spec.target.name={}",
        target.namespace, target.name
    );
    let api: Api<ConfigRollout> = Api::all(ctx.hub.clone());
    let listed = api_call(
        "list rollouts of a target",
        api.list(&ListParams::default().fields(&selector)),
    )
    .await?;
    let own_uid = rollout.uid();
    Ok(listed
        .items
        .iter()
        .filter(|other| other.uid() != own_uid)
        .map(|other| collection::progress_of(other.status.as_ref()))
        .collect())
}
