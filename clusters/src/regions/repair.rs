//! A person's repair of a region whose companion state cannot be trusted: one that fails
//! its MAC (edited outside configrollout) or one that is gone while its target still says
//! it is managed (a restored or hand-cleaned namespace).
//!
//! The controller never does this itself: it cannot tell a forger from a colleague, and
//! it never writes over a state it does not trust. A person who has looked replaces the
//! companion's state with one rebuilt from the hub's own record (the rollout's stable
//! revision, which every region ran and the hub keeps in its ControllerRevisions). The
//! target is left as it is: its digest then differs from the companion's, which the
//! controller takes for its own interrupted write and finishes from the rebuilt state at
//! its next write, so no value of the untrusted state reaches the target through
//! configrollout. Regional overrides the untrusted state held are not kept (their stamps
//! came from it): they are made again with `kubectl configrollout override`.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

use super::RegionError;
use super::materialize::{self, DIGEST_ANNOTATION};
use super::store::{FIELD_MANAGER, Identity, Ownership, Pair, call, signed_companion};
use configrollout_core::crdt::{self, DigestKey, Replica};

/// What a repair found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// The companion's state is signed by the key: nothing to repair, nothing written.
    NotNeeded,
    /// The target does not exist: nothing to repair, nothing written.
    NoTarget,
    /// The companion was replaced (or, when it was missing, created) with the rebuilt
    /// state, whose keyed digest is given.
    Replaced {
        /// Keyed digest of the rebuilt state's live values.
        digest: String,
        /// Whether a companion existed (tampered) or was created (missing).
        existed: bool,
    },
}

/// Replaces the untrusted companion of the target `namespace/name` with `rebuilt`, signed
/// with `key`; with `force`, also one that carries a valid MAC (a state holding entries,
/// a horizon or a frontier stamped ahead of the drift bound: `FutureStamps`). Reads both objects from the region (never from memory); writes the
/// companion only, conditionally on the version read, so a write in between fails with a
/// conflict rather than being overwritten. An object under the companion's name that the
/// target does not own is someone else's and is refused, as everywhere.
pub async fn repair_state(
    client: &Client,
    key: &DigestKey,
    namespace: &str,
    name: &str,
    rebuilt: &Replica,
    force: bool,
) -> Result<Repair, RegionError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let companion_name = materialize::companion_name(name)?;
    let target = call("read target", api.get_opt(name)).await?;
    let companion = call("read companion", api.get_opt(&companion_name)).await?;
    let pair = Pair::of(target, companion);
    let identity = Identity {
        key,
        namespace,
        name,
    };
    let ownership = pair.ownership(identity);
    let Some(target) = pair.target else {
        return match ownership {
            Ownership::ForeignCompanion => Err(RegionError::ForeignCompanion {
                namespace: namespace.to_owned(),
                name: companion_name,
            }),
            _ => Ok(Repair::NoTarget),
        };
    };
    let missing = pair.companion.is_none()
        && target.annotations().contains_key(DIGEST_ANNOTATION)
        && ownership == Ownership::Managed;
    match ownership {
        Ownership::ForeignCompanion => {
            return Err(RegionError::ForeignCompanion {
                namespace: namespace.to_owned(),
                name: companion_name,
            });
        }
        Ownership::TamperedCompanion => {}
        _ if missing => {}
        Ownership::Managed if force && pair.companion.is_some() => {}
        _ => return Ok(Repair::NotNeeded),
    }
    let encoded = crdt::encode(rebuilt).map_err(|source| RegionError::StateTooLarge {
        reason: source.to_string(),
    })?;
    let digest = crdt::revision_digest(key, rebuilt);
    let existed = pair.companion.is_some();
    let companion = signed_companion(pair.companion, &target, identity, &digest, encoded);
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    if existed {
        // The object read carries its resourceVersion: the replace is conditional.
        call(
            "replace companion",
            api.replace(&companion_name, &params, &companion),
        )
        .await?;
    } else {
        call("create companion", api.create(&params, &companion)).await?;
    }
    Ok(Repair::Replaced { digest, existed })
}
