//! Reading a region without writing: [`inspect`] reads the target and companion and
//! reports the replica they hold, its digest, drift and overrides.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;

use super::{Identity, Inspection, Ownership, Pair, ReadFrom, Snapshot, read_pair};
use crate::regions::RegionError;
use crate::regions::materialize::{self, Compaction, MergeRequest};
use crate::regions::object_cache::RegionObjects;
use configrollout_api::DriftPolicy;
use configrollout_core::crdt::{self, Delta, DigestKey, Replica};

/// Reads the region's replica for the target `namespace/name`: the evidence of what it
/// holds. Writes nothing. What `objects` knows to be current is not read again.
pub async fn inspect(
    client: &Client,
    key: &DigestKey,
    namespace: &str,
    name: &str,
    objects: Option<&RegionObjects<'_>>,
) -> Result<Inspection, RegionError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let companion_name = materialize::companion_name(name)?;
    let current = read_pair(&api, name, &companion_name, objects, ReadFrom::FromMemory).await?;
    inspection_of(
        Identity {
            key,
            namespace,
            name,
        },
        current,
    )
}

/// What `current` holds: the replica, its digest, drift and overrides. A companion that
/// is not trusted (foreign or tampered) is read as no state at all, and said so.
pub(super) fn inspection_of(
    identity: Identity<'_>,
    current: Pair,
) -> Result<Inspection, RegionError> {
    let key = identity.key;
    let ownership = current.ownership(identity);
    let trusted = !matches!(
        ownership,
        Ownership::ForeignCompanion | Ownership::TamperedCompanion
    );
    let target_digest = current
        .target_view
        .as_ref()
        .and_then(|view| view.digest.clone());
    if !trusted {
        // No state at all: nothing of it is read, not even to find drift.
        let replica = Replica::new();
        return Ok(Inspection {
            digest: crdt::revision_digest(key, &replica),
            replica,
            target_digest,
            drifted_keys: Vec::new(),
            overridden_keys: Vec::new(),
            ownership,
            signature: current.signature(identity),
            read: Snapshot(current),
        });
    }
    let plan = materialize::plan(
        key,
        current.target_view.as_ref(),
        current.companion_view.as_ref(),
        MergeRequest {
            delta: &Delta::new(),
            drift_policy: &DriftPolicy::Report,
            adopt_stamp: None,
            compaction: Compaction::default(),
            owner: None,
        },
    )?;
    Ok(Inspection {
        replica: plan.replica,
        digest: plan.digest,
        target_digest,
        drifted_keys: plan.drifted_keys,
        overridden_keys: plan.overridden_keys,
        ownership,
        signature: current.signature(identity),
        read: Snapshot(current),
    })
}
