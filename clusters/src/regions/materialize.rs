//! Planning a materialisation: what the target and companion ConfigMaps of one region
//! must hold after a delta is merged. Pure: [`super::store`] reads the objects, calls
//! [`plan`], and writes what it returns.
//!
//! # What lives where
//!
//! - The target ConfigMap's `data` holds the live values, so consumers need nothing new.
//!   Keys the replica has never held are not ours: they are left as they are.
//! - The companion ConfigMap holds the replica (stamps, tombstones, frontiers) encoded by
//!   [`configrollout_core::crdt::codec`], and the digest of that replica's live state.
//! - Both carry the digest annotation. The companion is written first, then the target:
//!   when the target's digest differs from the companion's, the second write of an earlier
//!   materialisation did not happen (a crash, a conflict), and the target is brought up to
//!   the companion rather than its differences being reported as drift.
//!
//! # Drift
//!
//! A managed key whose value in `data` is not the replica's live value, while both
//! objects agree on the digest, was edited out of band. `Report` leaves such keys as they
//! are (unless the delta being merged sets them) and names them; `Revert` writes the
//! replica's value back; `Adopt` records the edit as a regional override with a fresh
//! stamp, so the CRDT keeps it until a later-declared revision wins.

use std::collections::BTreeMap;

use configrollout_api::DriftPolicy;
use configrollout_core::crdt::{
    self, Delta, DigestKey, Entry, MergeOutcome, Replica, Stamp, WriterId,
};

use super::RegionError;

/// Annotation on both objects: keyed digest of the replica's live state.
pub const DIGEST_ANNOTATION: &str = "configrollout.dev/digest";
/// Annotation on the target: the revision merged last (a name like `r3`, never a value).
pub const REVISION_ANNOTATION: &str = "configrollout.dev/revision";
/// Annotation on the target: the rollout that manages it (`<namespace>/<name>`).
pub const ROLLOUT_ANNOTATION: &str = "configrollout.dev/rollout";
/// Annotation on the companion: the keyed MAC of its whole encoded state
/// ([`configrollout_core::crdt::state_mac`]), checked on every read.
pub const STATE_MAC_ANNOTATION: &str = "configrollout.dev/state-mac";
/// Annotation on the companion: the id of the key that made its MAC
/// ([`configrollout_core::crdt::DigestKey::id`], public), so that a process holding an older key can
/// tell a rotation it has not read yet from a forgery.
pub const STATE_KEY_ID_ANNOTATION: &str = "configrollout.dev/state-key-id";
/// Key of the companion's `data` holding the encoded replica.
pub const STATE_KEY: &str = "state";
/// Suffix of the companion ConfigMap's name (reserved: no target may end with it).
pub use configrollout_api::COMPANION_SUFFIX;
/// Longest ConfigMap name the API server accepts.
const MAX_CONFIGMAP_NAME: usize = 253;

/// The companion ConfigMap's name for a target.
pub fn companion_name(target: &str) -> Result<String, RegionError> {
    let name = format!("{target}{COMPANION_SUFFIX}");
    if name.len() > MAX_CONFIGMAP_NAME {
        return Err(RegionError::TargetNameTooLong {
            target: target.to_owned(),
            limit: MAX_CONFIGMAP_NAME - COMPANION_SUFFIX.len(),
        });
    }
    Ok(name)
}

/// What [`plan`] needs of the target ConfigMap as read from the region.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetView {
    /// Its `data`.
    pub data: BTreeMap<String, String>,
    /// The digest annotation, when present.
    pub digest: Option<String>,
}

/// What [`plan`] needs of the companion ConfigMap as read from the region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompanionView {
    /// The encoded replica (`data.state`), absent if someone removed it.
    pub state: Option<String>,
    /// The digest annotation, when present.
    pub digest: Option<String>,
    /// The state MAC annotation, when present.
    pub mac: Option<String>,
}

/// How to merge: the delta, the policy for drifted keys, and the stamp under which `Adopt`
/// records drifted values.
#[derive(Debug, Clone, Copy)]
pub struct MergeRequest<'a> {
    /// The delta to merge (a revision, one phase of it, a compensation or an override).
    pub delta: &'a Delta,
    /// What to do with keys edited out of band.
    pub drift_policy: &'a DriftPolicy,
    /// Stamp of an `override:` writer for adopted edits; required by `Adopt`.
    pub adopt_stamp: Option<&'a Stamp>,
    /// Which tombstones to collect, and against what to rebase a replica that missed the
    /// collection.
    pub compaction: Compaction<'a>,
    /// The writer whose keys the drift policy acts on: a key is its own when the delta
    /// writes it or its winning entry is this writer's. Another rollout's key of a shared
    /// target keeps its region value and is never adopted by this one. `None`: every key.
    pub owner: Option<&'a WriterId>,
}

/// Whether a key's tombstone is kept below the stable point (see [`Compaction::keeping`]).
pub type KeptKeys<'a> = &'a (dyn Fn(&str) -> bool + Sync);

/// Tombstone collection on a write (see [`configrollout_core::crdt::compaction`]).
#[derive(Clone, Copy, Default)]
pub struct Compaction<'a> {
    /// The stable point of the target: tombstones at or below it are dropped and the
    /// replica's horizon is raised to it.
    pub through: Option<&'a Stamp>,
    /// Set when the delta is the whole state of this rollout writer (a revision's
    /// publication). A replica that missed the collection (a companion restored from a
    /// backup, say) may hold this writer's entries that a collected tombstone had outlived
    /// everywhere else. Those entries, at or below `through` and absent from the state,
    /// are dropped, so a deleted key stays deleted; whatever the replica's horizon, which
    /// another writer's collection may have raised since the restore.
    pub rebase: Option<&'a WriterId>,
    /// Keys whose tombstones stay at or below `through`: another writer still on its way
    /// holds them live (see `status.collectionKeeps`).
    pub keeping: Option<KeptKeys<'a>>,
}

impl std::fmt::Debug for Compaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compaction")
            .field("through", &self.through)
            .field("rebase", &self.rebase)
            .field("keeping", &self.keeping.is_some())
            .finish()
    }
}

/// What to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The replica after the merge.
    pub replica: Replica,
    /// Its canonical encoding, for the companion.
    pub encoded_state: String,
    /// Keyed digest of its live state, for both annotations.
    pub digest: String,
    /// The target's `data` to write.
    pub target_data: BTreeMap<String, String>,
    /// Managed keys whose value in the region differs from the replica's (names only).
    pub drifted_keys: Vec<String>,
    /// Managed keys whose winning write is a regional override (names only).
    pub overridden_keys: Vec<String>,
    /// Counts of what the merge did.
    pub outcome: MergeOutcome,
    /// Whether the companion must be written (its state or digest changes).
    pub companion_changed: bool,
    /// Whether the target must be written (its data or digest changes).
    pub target_changed: bool,
}

/// Plans the merge of `request.delta` into a region whose objects read as given.
///
/// A companion that does not decode is an error: the region is reported, never
/// overwritten, since its stamps are what keep overrides and later revisions safe.
pub fn plan(
    key: &DigestKey,
    target: Option<&TargetView>,
    companion: Option<&CompanionView>,
    request: MergeRequest<'_>,
) -> Result<Plan, RegionError> {
    let mut replica = match companion.and_then(|c| c.state.as_deref()) {
        Some(text) => crdt::decode(text).map_err(|source| RegionError::MalformedCompanion {
            reason: source.to_string(),
        })?,
        // A new target is created before its companion (so that the companion can be
        // owned by it). If the companion's creation did not happen, the target holds
        // exactly this delta: recognisable by its digest, and safe to finish.
        None if target.and_then(|t| t.digest.as_ref()).is_some() => {
            let mut candidate = Replica::new();
            candidate.apply(request.delta);
            if !target
                .and_then(|t| t.digest.as_deref())
                .is_some_and(|digest| crdt::digest_matches(key, &candidate, digest))
            {
                return Err(RegionError::CompanionMissing);
            }
            Replica::new()
        }
        None => Replica::new(),
    };
    let empty = TargetView::default();
    let target = target.unwrap_or(&empty);

    // The target's digest differs from the companion's only when our own second write did
    // not happen; its differences are then ours to finish, not drift.
    let interrupted = companion.and_then(|c| c.digest.as_ref()) != target.digest.as_ref();
    let drifted_keys: Vec<String> = if interrupted {
        Vec::new()
    } else {
        replica
            .iter()
            .filter(|(key, entry)| target.data.get(*key).map(String::as_str) != entry.value())
            .map(|(key, _)| key.to_owned())
            .collect()
    };

    // Drifted keys this merge's policy does not act on: another writer's.
    let foreign_drift: Vec<String> = drifted_keys
        .iter()
        .filter(|key| {
            request.owner.is_some_and(|owner| {
                request.delta.get(key.as_str()).is_none()
                    && replica
                        .get(key.as_str())
                        .is_none_or(|entry| &entry.stamp.writer != owner)
            })
        })
        .cloned()
        .collect();
    if matches!(request.drift_policy, DriftPolicy::Adopt)
        && drifted_keys.len() > foreign_drift.len()
    {
        let stamp = request.adopt_stamp.ok_or(RegionError::AdoptNeedsStamp)?;
        let adopted: Delta = drifted_keys
            .iter()
            .filter(|key| !foreign_drift.contains(key))
            .map(|key| {
                let entry = match target.data.get(key) {
                    Some(value) => Entry::live(value.as_str(), stamp.clone()),
                    None => Entry::tombstone(stamp.clone()),
                };
                (key.as_str(), entry)
            })
            .collect();
        replica.apply(&adopted);
    }
    // Whatever the horizon says: it may have been raised by another writer's collection
    // after a restore brought back this writer's collected keys (one horizon for all
    // writers cannot say whose collection a replica missed).
    if let (Some(writer), Some(through)) = (request.compaction.rebase, request.compaction.through) {
        rebase(&mut replica, writer, through, request.delta);
    }
    let outcome = replica.apply(request.delta);

    let keep_region_value = |key: &str| {
        request.delta.get(key).is_none()
            && drifted_keys.iter().any(|drifted| drifted == key)
            && (matches!(request.drift_policy, DriftPolicy::Report)
                || foreign_drift.iter().any(|foreign| foreign == key))
    };
    let mut target_data = target.data.clone();
    for (key, entry) in replica.iter() {
        if keep_region_value(key) {
            continue;
        }
        match entry.value() {
            Some(value) => {
                target_data.insert(key.to_owned(), value.to_owned());
            }
            None => {
                target_data.remove(key);
            }
        }
    }

    // After the target's data is worked out from the tombstones, which say which keys go.
    // A tombstone whose key the target holds (as read, or still after this write) is kept:
    // the companion is written first, and if the target's write then does not land (a
    // conflict with another rollout's write, a crash), the next plan must still know the
    // key goes. It is collected by the first write that finds the target without it.
    if let Some(through) = request.compaction.through {
        let kept = request.compaction.keeping;
        crdt::collect_tombstones_keeping(&mut replica, through, |key| {
            target.data.contains_key(key)
                || target_data.contains_key(key)
                || kept.is_some_and(|kept| kept(key))
        });
    }

    let encoded_state = crdt::encode(&replica).map_err(|source| RegionError::StateTooLarge {
        reason: source.to_string(),
    })?;
    let digest = crdt::revision_digest(key, &replica);
    let overridden_keys = replica
        .iter()
        .filter(|(_, entry)| entry.stamp.writer.kind() == crdt::WriterKind::Override)
        .map(|(key, _)| key.to_owned())
        .collect();
    let companion_changed = companion.is_none_or(|c| {
        c.state.as_deref() != Some(encoded_state.as_str()) || c.digest.as_ref() != Some(&digest)
    });
    let target_changed = target_data != target.data || target.digest.as_ref() != Some(&digest);
    // Keys still drifted after this write: under Report, those the delta did not set.
    let still_drifted = drifted_keys
        .iter()
        .filter(|key| keep_region_value(key))
        .cloned()
        .collect();
    Ok(Plan {
        replica,
        encoded_state,
        digest,
        target_data,
        drifted_keys: still_drifted,
        overridden_keys,
        outcome,
        companion_changed,
        target_changed,
    })
}

/// Turns into tombstones `writer`'s live entries at or below `through` that `state` (the
/// writer's whole state) does not hold: the writer removed those keys and its tombstones
/// were collected where this replica was not. The tombstones take the keys out of the
/// target like any removal, and are collected with the others.
fn rebase(replica: &mut Replica, writer: &WriterId, through: &Stamp, state: &Delta) {
    let outlived: Vec<String> = replica
        .iter()
        .filter(|(key, entry)| {
            entry.stamp.writer == *writer
                && !entry.is_tombstone()
                && entry.stamp <= *through
                && state.get(key).is_none()
        })
        .map(|(key, _)| key.to_owned())
        .collect();
    replica.bury_keys(&outlived);
}

#[cfg(test)]
mod tests;
