//! Regional emergency overrides: a person's writes into one region's replica under the
//! writer `override:<user>`, merged like any other delta. A revision declared after the
//! override wins over it; one declared before it that arrives later does not, so a stale
//! staged rollout never clobbers an emergency fix. The plugin's `override` command is a
//! front end to [`write_override`].

use std::collections::BTreeMap;

use kube::Client;

use super::RegionError;
use super::materialize::Compaction;
use super::store::{self, DriftHandling, Materialized, TargetObject};
use configrollout_api::DriftPolicy;
use configrollout_core::crdt::{DigestKey, Stamp, override_delta, stamp_above};

/// Merges `changes` (`Some(value)` sets a key, `None` removes it) into the target
/// `namespace/name` of the region `client` reaches, under `stamp`, whose writer must be an
/// `override:` writer. The target's rollout and revision annotations are kept; edits made
/// out of band are reported, never adopted or reverted, by an override.
pub async fn write_override(
    client: &Client,
    key: &DigestKey,
    namespace: &str,
    name: &str,
    stamp: Stamp,
    changes: &BTreeMap<String, Option<String>>,
) -> Result<Materialized, RegionError> {
    let changes: Vec<(&String, Option<&str>)> = changes
        .iter()
        .map(|(key, value)| (key, value.as_deref()))
        .collect();
    // A person's clock may be behind what the region holds: the override is stamped
    // after it, so it wins over the writes it was meant to override and is never taken
    // for one the replica has outlived.
    let delta_for = |replica: &configrollout_core::crdt::Replica| {
        let stamp = stamp_above(replica, stamp.wall_ms, stamp.writer.clone());
        override_delta(stamp, changes.iter().copied()).map_err(|source| RegionError::Override {
            reason: source.to_string(),
        })
    };
    let target = TargetObject {
        namespace,
        name,
        rollout: None,
        revision: None,
        adopt: false,
        // A person's override, not a controller's: no Lease to hold.
        may_write: &|| true,
        compaction: Compaction::default(),
        // A person retries by hand; nothing counts conflicts here.
        on_conflict: &|| {},
        // A person's override reads the region as it is.
        objects: None,
    };
    let drift = DriftHandling {
        policy: &DriftPolicy::Report,
        adopt_stamp: None,
        owner: None,
    };
    store::materialize(client, key, &target, drift, None, delta_for).await
}
