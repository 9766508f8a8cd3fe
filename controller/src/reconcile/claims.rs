//! The claim step: before any region is read, the rollout claims the keys it holds in
//! the target's `TargetClaim` and learns which of them another rollout owns (see
//! `engine::ownership` for the rule). The claim object is read from the controller's
//! watch and written with its `resourceVersion`: two replicas claiming at once conflict,
//! and the loser reads again and settles on what the winner wrote, so every replica and
//! every region see one owner per key.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;

use super::fetch::Fetched;
use super::{Context, HubError, api_call};
use crate::api::{ClaimedTarget, ConfigRollout, TargetClaim, claim_name};
use crate::engine::ownership::{self, RolloutIdentity};
use crate::regions::publication::RevisionState;
use crate::telemetry::metrics::WriteKind;

/// How many times a conflicting claim write is read and settled again.
const MAX_ATTEMPTS: u32 = 5;

/// Claims the keys `rollout` holds (what it declares, and what its stable and current
/// revisions hold) and returns the `InvalidSpec` message for those another rollout owns,
/// if any. Nothing is claimed for a rollout the engine will refuse anyway (`skip`): it
/// declares nothing, and keeps the claims it had.
pub async fn settle(
    ctx: &Context,
    rollout: &ConfigRollout,
    fetched: &Fetched,
    desired: &BTreeMap<String, String>,
) -> Result<Option<String>, HubError> {
    let namespace = rollout.namespace().unwrap_or_default();
    let identity = RolloutIdentity {
        namespace: namespace.clone(),
        name: rollout.name_any(),
        uid: rollout.metadata.uid.clone().unwrap_or_default(),
    };
    let target = ClaimedTarget {
        namespace: rollout.spec.target.namespace.clone(),
        name: rollout.spec.target.name.clone(),
    };
    let keys = held_keys(rollout, fetched, desired);
    let stores = ctx.hub_cache.stores().await?;
    let name = claim_name(&target.namespace, &target.name);
    let api: Api<TargetClaim> = Api::all(ctx.hub.clone());
    let alive = |claimant: &crate::api::Claimant| {
        stores
            .rollouts
            .get(&ObjectRef::new(&claimant.name).within(&claimant.namespace))
            .is_some_and(|other| other.metadata.uid.as_deref() == Some(claimant.uid.as_str()))
    };
    let mut current = stores
        .claims
        .get(&ObjectRef::new(&name))
        .map(|claim| (*claim).clone());
    for _ in 0..MAX_ATTEMPTS {
        let outcome = ownership::settle_claims(
            current.as_ref().map(|claim| &claim.spec),
            &target,
            &identity,
            &keys,
            alive,
            chrono::Utc::now(),
        );
        let message = (!outcome.refusals.is_empty())
            .then(|| ownership::refusal_message(&namespace, &target, &outcome.refusals));
        if !outcome.changed {
            return Ok(message);
        }
        if !ctx.fence.permits(rollout, WriteKind::Claim) {
            return Err(HubError::NotLeader);
        }
        let written = match &current {
            Some(existing) => {
                let mut replaced = existing.clone();
                replaced.spec = outcome.spec;
                api_call(
                    "write claim",
                    api.replace(&name, &PostParams::default(), &replaced),
                )
                .await
            }
            None => {
                let claim = TargetClaim {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: outcome.spec,
                };
                api_call("create claim", api.create(&PostParams::default(), &claim)).await
            }
        };
        match written {
            Ok(_) => return Ok(message),
            Err(error) if error.is_conflict() => {
                // Someone claimed in between: settle again on what they wrote.
                current = api_call("read claim", api.get_opt(&name)).await?;
            }
            Err(error) => return Err(error),
        }
    }
    Err(HubError::TooManyClaimConflicts { claim: name })
}

/// The keys `rollout` holds: what it declares now, and what its stable and current
/// revisions hold (a key stays the rollout's until a revision without it completes, so
/// that a rollback never writes a key someone else owns by then).
fn held_keys(
    rollout: &ConfigRollout,
    fetched: &Fetched,
    desired: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let status = rollout.status.as_ref();
    let revision = |name: Option<&String>| name.and_then(|name| fetched.revisions.get(name));
    let stable = revision(status.and_then(|status| status.stable_revision.as_ref()));
    let current = revision(status.and_then(|status| status.revision.as_ref()));
    let mut keys: BTreeSet<String> = desired.keys().cloned().collect();
    for held in [stable, current].into_iter().flatten() {
        keys.extend(live_keys(held));
    }
    keys
}

fn live_keys(revision: &RevisionState) -> impl Iterator<Item = String> + '_ {
    revision.state.live_iter().map(|(key, _)| key.to_owned())
}
