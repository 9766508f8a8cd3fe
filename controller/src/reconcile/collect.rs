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
        // Nothing to collect, or nothing new: nobody is waited for.
        status.collection_waits_for = None;
        return;
    };
    let others = match other_writers(ctx, rollout).await {
        Ok(others) => others,
        Err(error) => {
            tracing::warn!(%error, "other writers of the target not read; nothing collected");
            return;
        }
    };
    let progress: Vec<WriterProgress> = others
        .iter()
        .map(|other| collection::progress_of(other.status.as_ref()))
        .collect();
    match collection_point(&proposal, &progress) {
        Some(point) => {
            status.collection_waits_for = None;
            if collection::record(status, &point) {
                tracing::debug!(%point, writers = others.len() + 1, "target stable point moved");
            }
        }
        None => {
            // Each writer that holds collection back, with why, worked out once.
            let holding: Vec<(&ConfigRollout, String)> = others
                .iter()
                .filter_map(|other| Some((other, collection::holding_back(other.status.as_ref())?)))
                .collect();
            status.collection_waits_for = waiting_for(rollout, &holding);
            tracing::info!(
                waits_for = ?holding
                    .iter()
                    .map(|(other, _)| format!("{}/{}", other.namespace().unwrap_or_default(), other.name_any()))
                    .collect::<Vec<_>>(),
                "another writer of the target has not reached every region; nothing collected"
            );
        }
    }
}

/// Who holds collection back, in words for the status: the first other writer that
/// has not reached every region (`holding`, with why), named only when it is in the
/// rollout's own namespace (another team's rollout names are none of this status's
/// business).
fn waiting_for(rollout: &ConfigRollout, holding: &[(&ConfigRollout, String)]) -> Option<String> {
    let (other, why) = holding.first()?;
    let who = if other.namespace() == rollout.namespace() {
        format!("rollout {}", other.name_any())
    } else {
        "a rollout in another namespace".to_owned()
    };
    Some(format!(
        "{who} also writes configmap {}/{} and {why}: tombstones wait for it",
        rollout.spec.target.namespace, rollout.spec.target.name
    ))
}

/// Every other rollout whose target is this rollout's, in any namespace (found by the
/// CRD's selectable fields, so only they are read).
async fn other_writers(
    ctx: &Context,
    rollout: &ConfigRollout,
) -> Result<Vec<ConfigRollout>, HubError> {
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
        .into_iter()
        .filter(|other| other.uid() != own_uid)
        .collect())
}
