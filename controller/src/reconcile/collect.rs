//! The collect step: after a reconcile that found the rollout Complete everywhere, with a
//! tombstone left to collect, reads the other rollouts writing the same target and records
//! the target's stable point in the status about to be written. The decisions are
//! [`crate::engine::collection`]'s and [`crate::crdt::collection_point`]'s; this step
//! only lists.

use std::collections::BTreeSet;

use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::{Context, HubError, api_call};
use crate::api::{ConfigRollout, ConfigRolloutStatus};
use crate::crdt::{Stamp, WriterProgress, collection_point};
use crate::engine::{Observations, collection};

/// Moves `status.collectedThrough` forward when the rollout proposes a point and every
/// other writer of its target allows it. A failed list collects nothing this time; the
/// rollout stays correct, only its tombstones wait.
///
/// A writer that has not delivered any of its revisions to some region (one waiting for
/// an approval nobody gives, say) does not hold the point back: its late write there can
/// only resurrect a key it holds live whose tombstone was collected, so the tombstones of
/// exactly those keys are kept (`status.collectionKeeps`) and every other one goes. The
/// rollout's status still says who it waits for.
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
    let mut progress = Vec::with_capacity(others.len());
    let mut live_keys: BTreeSet<String> = BTreeSet::new();
    for other in &others {
        let other_progress = collection::progress_of(other.status.as_ref());
        if other_progress != (WriterProgress::Behind { held: None }) {
            progress.push(other_progress);
            continue;
        }
        match keys_held_live(ctx, other).await {
            Ok(keys) => live_keys.extend(keys),
            Err(error) => {
                tracing::warn!(%error, "revisions of a writer still on its way not read; nothing collected");
                progress.push(other_progress);
            }
        }
    }
    let key = ctx.digest_keys.current();
    let keeps = match collection::keeps_for(&key, live_keys.iter().map(String::as_str)) {
        Ok(keeps) => keeps,
        Err(count) => {
            tracing::info!(
                keys = count,
                "writers still on their way hold too many keys to keep one by one; nothing collected"
            );
            progress.push(WriterProgress::Behind { held: None });
            None
        }
    };
    // Each writer that holds collection back, with why, worked out once.
    let holding: Vec<(&ConfigRollout, String)> = others
        .iter()
        .filter_map(|other| Some((other, collection::holding_back(other.status.as_ref())?)))
        .collect();
    let kept = keeps.as_ref().map_or(0, |keeps| keeps.keys.len());
    match collection_point(&proposal, &progress) {
        Some(point) => {
            status.collection_waits_for = (kept > 0)
                .then(|| waiting_for(rollout, &holding, Some(kept)))
                .flatten();
            if collection::record(status, &point, keeps) {
                tracing::debug!(%point, writers = others.len() + 1, kept, "target stable point moved");
            }
        }
        None => {
            status.collection_waits_for = waiting_for(rollout, &holding, None);
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

/// Every key `writer` holds live in any of its stored revisions: what it may still
/// publish with a stamp issued so far (a revision's publication is its whole state; a
/// rollback writes fresh stamps). `Err` when its current revision is not among them.
async fn keys_held_live(
    ctx: &Context,
    writer: &ConfigRollout,
) -> Result<BTreeSet<String>, HubError> {
    let namespace = writer.namespace().unwrap_or_default();
    let revisions = ctx
        .hub_cache
        .revision_store(ctx.hub.clone(), &namespace)
        .load(writer)
        .await?;
    let current = writer
        .status
        .as_ref()
        .and_then(|status| status.revision.as_deref());
    if let Some(current) = current
        && !revisions.contains_key(current)
    {
        return Err(HubError::MissingRevision {
            revision: current.to_owned(),
        });
    }
    Ok(revisions
        .values()
        .flat_map(|revision| revision.state.live_iter().map(|(key, _)| key.to_owned()))
        .collect())
}

/// Who holds collection back, in words for the status: the first other writer that
/// has not reached every region (`holding`, with why), named only when it is in the
/// rollout's own namespace (another team's rollout names are none of this status's
/// business).
fn waiting_for(
    rollout: &ConfigRollout,
    holding: &[(&ConfigRollout, String)],
    kept: Option<usize>,
) -> Option<String> {
    let (other, why) = holding.first()?;
    let who = if other.namespace() == rollout.namespace() {
        format!("rollout {}", other.name_any())
    } else {
        "a rollout in another namespace".to_owned()
    };
    let waiting = match kept {
        Some(kept) => format!("the tombstones of {kept} keys it holds wait for it"),
        None => "tombstones wait for it".to_owned(),
    };
    Some(format!(
        "{who} also writes configmap {}/{} and {why}: {waiting}",
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

/// The target's stable point recorded in status. Only the controller writes status; a
/// value that does not parse collects nothing.
pub(super) fn collected_through(rollout: &ConfigRollout) -> Option<Stamp> {
    let text = rollout.status.as_ref()?.collected_through.as_deref()?;
    match text.parse() {
        Ok(stamp) => Some(stamp),
        Err(error) => {
            tracing::warn!(%error, "status.collectedThrough does not parse; nothing collected");
            None
        }
    }
}
