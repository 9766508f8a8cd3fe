//! Materialisation in a region: read the target and companion ConfigMaps, plan the merge
//! ([`super::materialize::plan`]), write with optimistic concurrency, and check what the
//! region stored.
//!
//! Every write carries the `resourceVersion` it was planned from. A conflict means
//! someone wrote in between: both objects are read again and the merge planned again,
//! never overwritten. Merging is idempotent, so a retry after a half-done attempt is
//! harmless. Because every write is conditional, the first attempt may plan from the
//! objects an [`inspect`] of the same reconcile read ([`Snapshot`]) instead of reading
//! them again, and what the region stored is the objects its write answers returned:
//! a publish costs its writes, not two reads before and two after.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;

use super::RegionError;
use super::materialize::{
    Compaction, CompanionView, DIGEST_ANNOTATION, STATE_KEY, STATE_KEY_ID_ANNOTATION,
    STATE_MAC_ANNOTATION, TargetView,
};
use super::object_cache::{Known, RegionObjects};
use crate::api_call;
use configrollout_api::DriftPolicy;
use configrollout_core::crdt::{self, DigestKey, MacCheck, Replica, Stamp, WriterId};

mod companion;
mod inspection;
mod write;

pub(super) use companion::signed_companion;
pub use companion::{StateSignature, sign_with_current_key};
pub use inspection::inspect;
pub use write::materialize;

/// How long one API call may take before the region counts as unreachable for this pass.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Field manager of every write the controller makes in a region.
pub const FIELD_MANAGER: &str = "configrollout";

/// The ConfigMap a rollout manages in one region, and who manages it.
#[derive(Clone)]
pub struct TargetObject<'a> {
    /// Namespace of the target ConfigMap.
    pub namespace: &'a str,
    /// Name of the target ConfigMap.
    pub name: &'a str,
    /// `<namespace>/<name>` of the managing rollout, for the annotation; `None` (a
    /// regional override) keeps the annotation as it is.
    pub rollout: Option<&'a str>,
    /// The revision being merged (`r3`), for the annotation; `None` (a regional
    /// override) keeps the annotation as it is.
    pub revision: Option<&'a str>,
    /// Whether a ConfigMap that exists and that configrollout does not manage may be taken
    /// over. Without it such a target is refused and nothing is written.
    pub adopt: bool,
    /// Asked just before every write: a writer that may no longer write (a controller
    /// that lost its Lease) writes nothing more.
    pub may_write: &'a (dyn Fn() -> bool + Send + Sync),
    /// Tombstone collection on this write.
    pub compaction: Compaction<'a>,
    /// Told of every write the region refused because the object changed since it was
    /// read (HTTP 409), whether or not a later attempt succeeds: the controller counts
    /// them.
    pub on_conflict: &'a (dyn Fn() + Send + Sync),
    /// Where what was read and written is noted, for later reads to take from memory.
    pub objects: Option<&'a RegionObjects<'a>>,
}

/// The evidence of one materialisation, read back from the region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Materialized {
    /// Keyed digest of the region's live state, as read back.
    pub digest: String,
    /// Managed keys edited out of band and left as they are (names only).
    pub drifted_keys: Vec<String>,
    /// Managed keys whose winning write is a regional override (names only).
    pub overridden_keys: Vec<String>,
    /// Writes this call made (0 when the region already held the delta).
    pub writes: u32,
}

/// What to do with keys edited out of band, for [`materialize`].
#[derive(Debug, Clone, Copy)]
pub struct DriftHandling<'a> {
    /// The rollout's drift policy.
    pub policy: &'a DriftPolicy,
    /// Stamp of an `override:` writer for adopted edits; required by `Adopt`.
    pub adopt_stamp: Option<&'a Stamp>,
    /// The rollout whose keys the policy acts on (another writer's drifted keys keep
    /// their region value); `None` (a person's override): every key.
    pub owner: Option<&'a WriterId>,
}

/// A region's state as read, without writing.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    /// The replica (empty when the region holds none yet).
    pub replica: Replica,
    /// Keyed digest of the replica's live state.
    pub digest: String,
    /// The digest the target carries, if any.
    pub target_digest: Option<String>,
    /// Managed keys edited out of band (names only).
    pub drifted_keys: Vec<String>,
    /// Managed keys whose winning write is a regional override (names only).
    pub overridden_keys: Vec<String>,
    /// Whether the target exists and who manages it.
    pub ownership: Ownership,
    /// Which key signed the companion's state; one the key still trusts but that is not
    /// its current key's is signed again by [`sign_with_current_key`].
    pub signature: StateSignature,
    /// The objects read, for a [`materialize`] that follows in the same reconcile.
    pub read: Snapshot,
}

/// The target and companion ConfigMaps of one region as one [`inspect`] read them: what
/// a [`materialize`] right after it plans its first attempt from. Held only between
/// the two, since it is the region's whole replica.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot(Pair);

/// Whether a region's target ConfigMap exists and whether configrollout manages it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// No target yet: the first publish creates it.
    Absent,
    /// Created (or adopted) by configrollout: it carries the digest annotation or has a
    /// companion.
    Managed,
    /// It exists, and configrollout never wrote it: someone else's ConfigMap.
    Unmanaged,
    /// An object has the companion's reserved name but is not owned by the target (made
    /// by someone else, or there with no target at all): never read as state.
    ForeignCompanion,
    /// The companion's state does not carry the MAC the controller's key gives it: edited
    /// by someone else (or signed with a key the controller does not hold). Never read as
    /// state, never merged from, none of its values written to the target.
    TamperedCompanion,
}

/// Who the target is, for the MAC of its companion's state.
#[derive(Debug, Clone, Copy)]
pub(super) struct Identity<'a> {
    pub(super) key: &'a DigestKey,
    pub(super) namespace: &'a str,
    pub(super) name: &'a str,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Pair {
    pub(super) target: Option<ConfigMap>,
    pub(super) companion: Option<ConfigMap>,
    target_view: Option<TargetView>,
    companion_view: Option<CompanionView>,
}

impl Pair {
    pub(super) fn ownership(&self, identity: Identity<'_>) -> Ownership {
        if self.companion_is_foreign() {
            return Ownership::ForeignCompanion;
        }
        if self.companion_is_tampered(identity) {
            return Ownership::TamperedCompanion;
        }
        match (&self.target_view, &self.companion) {
            (None, _) => Ownership::Absent,
            (Some(target), None) if target.digest.is_none() => Ownership::Unmanaged,
            (Some(_), _) => Ownership::Managed,
        }
    }

    /// Whether the companion (if any) is not one configrollout made for this target: the
    /// controller creates it owned by the target, so one without that owner reference (or
    /// with no target at all) is someone else's object under a reserved name.
    fn companion_is_foreign(&self) -> bool {
        let Some(companion) = &self.companion else {
            return false;
        };
        let target_uid = self
            .target
            .as_ref()
            .and_then(|target| target.metadata.uid.as_deref());
        !target_uid.is_some_and(|uid| {
            companion
                .owner_references()
                .iter()
                .any(|owner| owner.uid == uid && owner.kind == "ConfigMap")
        })
    }

    /// Whether the companion's state lacks the MAC the key gives it for this target. An
    /// empty companion (no state) has nothing to forge; any state must be signed.
    fn companion_is_tampered(&self, identity: Identity<'_>) -> bool {
        match self.signature(identity) {
            StateSignature::Mismatch { .. } => true,
            StateSignature::Unsigned => !identity.key.accepts_unsigned_states(),
            StateSignature::NoState | StateSignature::Current | StateSignature::Previous => false,
        }
    }

    /// Which key signed the companion's state.
    fn signature(&self, identity: Identity<'_>) -> StateSignature {
        let Some(view) = &self.companion_view else {
            return StateSignature::NoState;
        };
        let Some(state) = view.state.as_deref() else {
            return StateSignature::NoState;
        };
        let Some(mac) = view.mac.as_deref() else {
            return StateSignature::Unsigned;
        };
        match crdt::state_mac_check(identity.key, identity.namespace, identity.name, state, mac) {
            MacCheck::Current => StateSignature::Current,
            MacCheck::Previous => StateSignature::Previous,
            MacCheck::Mismatch => StateSignature::Mismatch {
                claimed_key_id: self
                    .companion
                    .as_ref()
                    .and_then(|cm| cm.annotations().get(STATE_KEY_ID_ANNOTATION))
                    .map(|id| id.chars().take(64).collect()),
            },
        }
    }
}

/// Whether a read may be answered from memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadFrom {
    /// What `objects` knows to be current answers without a request.
    FromMemory,
    /// The region answers.
    Fresh,
}

async fn read_pair(
    api: &Api<ConfigMap>,
    target: &str,
    companion: &str,
    objects: Option<&RegionObjects<'_>>,
    from: ReadFrom,
) -> Result<Pair, RegionError> {
    let target = read_one(api, "read target", target, objects, from).await?;
    let companion = read_one(api, "read companion", companion, objects, from).await?;
    Ok(Pair::of(target, companion))
}

async fn read_one(
    api: &Api<ConfigMap>,
    operation: &'static str,
    name: &str,
    objects: Option<&RegionObjects<'_>>,
    from: ReadFrom,
) -> Result<Option<ConfigMap>, RegionError> {
    if from == ReadFrom::FromMemory
        && let Some(known) = objects.and_then(|objects| objects.current(name))
    {
        return Ok(match known {
            Known::Absent => None,
            Known::Present(object) => Some(*object),
        });
    }
    let read = call(operation, api.get_opt(name)).await?;
    if let Some(objects) = objects {
        objects.saw(name, read.as_ref());
    }
    Ok(read)
}

impl Pair {
    pub(super) fn of(target: Option<ConfigMap>, companion: Option<ConfigMap>) -> Pair {
        let target_view = target.as_ref().map(|cm| TargetView {
            data: cm.data.clone().unwrap_or_default(),
            digest: cm.annotations().get(DIGEST_ANNOTATION).cloned(),
        });
        let companion_view = companion.as_ref().map(|cm| CompanionView {
            state: cm.data.as_ref().and_then(|d| d.get(STATE_KEY)).cloned(),
            digest: cm.annotations().get(DIGEST_ANNOTATION).cloned(),
            mac: cm.annotations().get(STATE_MAC_ANNOTATION).cloned(),
        });
        Pair {
            target,
            companion,
            target_view,
            companion_view,
        }
    }
}

/// Runs one region API call with [`CALL_TIMEOUT`].
pub(super) async fn call<T>(
    operation: &'static str,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, RegionError> {
    Ok(api_call::timed(operation, CALL_TIMEOUT, request).await?)
}
