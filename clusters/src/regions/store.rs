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

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::{Client, Resource, ResourceExt};

use super::RegionError;
use super::materialize::{
    self, Compaction, CompanionView, DIGEST_ANNOTATION, MergeRequest, Plan, REVISION_ANNOTATION,
    ROLLOUT_ANNOTATION, STATE_KEY, STATE_KEY_ID_ANNOTATION, STATE_MAC_ANNOTATION, TargetView,
};
use super::object_cache::{Known, RegionObjects};
use crate::api_call;
use configrollout_api::DriftPolicy;
use configrollout_core::crdt::{self, Delta, DigestKey, MacCheck, Replica, Stamp, WriterId};

/// How long one API call may take before the region counts as unreachable for this pass.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a conflicting write is re-read and re-planned before giving up.
const MAX_ATTEMPTS: u32 = 5;
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

/// Merges the delta `delta_for` builds from the region's current replica (a revision's
/// publication ignores it; a rollback is computed from it, on every attempt, so a write
/// that lands in between is never reverted by a stale computation). Reads back the result.
/// A write refused as a conflict is reported to [`TargetObject::on_conflict`], then both
/// objects are read again.
///
/// `first_read` is what an [`inspect`] of the same target read moments ago: the first
/// attempt plans from it (a stale one only costs a conflict and a fresh read).
pub async fn materialize(
    client: &Client,
    key: &DigestKey,
    target: &TargetObject<'_>,
    drift: DriftHandling<'_>,
    first_read: Option<Snapshot>,
    delta_for: impl Fn(&Replica) -> Result<Delta, RegionError>,
) -> Result<Materialized, RegionError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), target.namespace);
    let companion_name = materialize::companion_name(target.name)?;
    let identity = Identity {
        key,
        namespace: target.namespace,
        name: target.name,
    };
    let mut writes = 0;
    let mut first_read = first_read.map(|snapshot| snapshot.0);
    for _ in 0..MAX_ATTEMPTS {
        // After a conflict the region is read: what memory holds is what was refused.
        let current = match first_read.take() {
            Some(read) => read,
            None => {
                read_pair(
                    &api,
                    target.name,
                    &companion_name,
                    target.objects,
                    ReadFrom::Fresh,
                )
                .await?
            }
        };
        match current.ownership(identity) {
            Ownership::Unmanaged if !target.adopt => {
                return Err(RegionError::UnmanagedTarget {
                    namespace: target.namespace.to_owned(),
                    name: target.name.to_owned(),
                });
            }
            Ownership::ForeignCompanion => {
                return Err(RegionError::ForeignCompanion {
                    namespace: target.namespace.to_owned(),
                    name: companion_name,
                });
            }
            Ownership::TamperedCompanion => {
                return Err(RegionError::TamperedCompanion {
                    namespace: target.namespace.to_owned(),
                    name: companion_name,
                });
            }
            _ => {}
        }
        let replica = match current
            .companion_view
            .as_ref()
            .and_then(|c| c.state.as_deref())
        {
            Some(text) => crdt::decode(text).map_err(|source| RegionError::MalformedCompanion {
                reason: source.to_string(),
            })?,
            None => Replica::new(),
        };
        let delta = delta_for(&replica)?;
        if let Some(key) = binary_key(current.target.as_ref(), &delta) {
            return Err(RegionError::BinaryDataKey {
                namespace: target.namespace.to_owned(),
                name: target.name.to_owned(),
                key,
            });
        }
        let plan = materialize::plan(
            key,
            current.target_view.as_ref(),
            current.companion_view.as_ref(),
            MergeRequest {
                delta: &delta,
                drift_policy: drift.policy,
                adopt_stamp: drift.adopt_stamp,
                compaction: target.compaction,
                owner: drift.owner,
            },
        )?;
        match write_plan(
            &api,
            identity,
            target,
            &companion_name,
            current,
            &plan,
            &mut writes,
        )
        .await
        {
            Ok(stored) => {
                if let Some(objects) = target.objects {
                    objects.saw(target.name, stored.target.as_ref());
                    objects.saw(&companion_name, stored.companion.as_ref());
                }
                let inspection = inspection_of(identity, stored)?;
                if inspection.target_digest.as_deref() != Some(inspection.digest.as_str()) {
                    return Err(RegionError::ReadBackMismatch);
                }
                return Ok(Materialized {
                    digest: inspection.digest,
                    drifted_keys: inspection.drifted_keys,
                    overridden_keys: inspection.overridden_keys,
                    writes,
                });
            }
            Err(RegionError::Call(error)) if error.is_conflict() => {
                (target.on_conflict)();
                tracing::debug!(
                    target = target.name,
                    "conflicting write in region; reading again"
                );
            }
            Err(error) => return Err(error),
        }
    }
    Err(RegionError::TooManyConflicts {
        attempts: MAX_ATTEMPTS,
    })
}

/// The first key `delta` writes that the target holds in `binaryData`.
fn binary_key(target: Option<&ConfigMap>, delta: &Delta) -> Option<String> {
    let binary = target?.binary_data.as_ref()?;
    delta
        .iter()
        .map(|(key, _)| key)
        .find(|key| binary.contains_key(*key))
        .map(str::to_owned)
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
fn inspection_of(identity: Identity<'_>, current: Pair) -> Result<Inspection, RegionError> {
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

/// Which key signed a companion's state, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateSignature {
    /// Nothing to sign: no companion, or one without a state.
    NoState,
    /// The key in use.
    Current,
    /// The key the one in use replaced (a rotation under way): trusted, and signed again
    /// with the current key at the next read.
    Previous,
    /// No MAC at all: trusted only while the key accepts unsigned states (an upgrade
    /// aid), and then signed at the next read.
    Unsigned,
    /// Neither key: edited outside configrollout, or signed by a key this process does
    /// not hold yet. `claimed_key_id` is the key id the companion names, if any: one the
    /// process does not know is worth a fresh read of the key Secret before calling the
    /// state tampered.
    Mismatch {
        /// The companion's `configrollout.dev/state-key-id`, if it has one.
        claimed_key_id: Option<String>,
    },
}

impl StateSignature {
    /// Whether the state must be signed again with the current key (it is trusted, but
    /// not under that key).
    pub fn needs_signing(&self, key: &DigestKey) -> bool {
        match self {
            StateSignature::Previous => true,
            StateSignature::Unsigned => key.accepts_unsigned_states(),
            _ => false,
        }
    }

    /// The id of the key the state is signed with, when it is one this process holds.
    pub fn key_id(&self, key: &DigestKey) -> Option<String> {
        match self {
            StateSignature::Current => Some(key.id()),
            StateSignature::Previous => key.previous_id(),
            _ => None,
        }
    }
}

/// Signs again, in place, a companion state the key trusts but did not sign with its
/// current key: one signed with the key a rotation replaced, or one without a MAC (a
/// release before MACs wrote it, trusted because the key accepts unsigned states). Reads
/// it fresh, and writes the MAC and key id annotations only if it still needs them and
/// decodes, conditionally on the version read, noting the result in `objects`. Returns
/// whether it wrote. `may_write` is asked just before the write.
pub async fn sign_with_current_key(
    client: &Client,
    key: &DigestKey,
    namespace: &str,
    name: &str,
    may_write: &(dyn Fn() -> bool + Send + Sync),
    objects: Option<&RegionObjects<'_>>,
) -> Result<bool, RegionError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let companion_name = materialize::companion_name(name)?;
    let current = read_pair(&api, name, &companion_name, None, ReadFrom::Fresh).await?;
    let identity = Identity {
        key,
        namespace,
        name,
    };
    if !current.signature(identity).needs_signing(key)
        || current.ownership(identity) != Ownership::Managed
    {
        return Ok(false);
    }
    let Some(mut companion) = current.companion else {
        return Ok(false);
    };
    let Some(state) = companion
        .data
        .as_ref()
        .and_then(|data| data.get(STATE_KEY))
        .cloned()
    else {
        return Ok(false);
    };
    crdt::decode(&state).map_err(|source| RegionError::MalformedCompanion {
        reason: source.to_string(),
    })?;
    sign(&mut companion, identity, &state);
    if !may_write() {
        return Err(RegionError::NotLeader);
    }
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let written = call(
        "sign companion",
        api.replace(&companion_name, &params, &companion),
    )
    .await?;
    // The next read takes the signed version from memory, not the unsigned one.
    if let Some(objects) = objects {
        objects.saw(&companion_name, Some(&written));
    }
    Ok(true)
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

/// Writes the companion, then the target, counting in `writes` each write that the region
/// accepted, and returns both objects as the region stored them (its answers to the
/// writes, or `current` where nothing was written). A new target is created first without the
/// digest (so a crash before its companion exists leaves an unmanaged ConfigMap, not a
/// managed one without state), then the companion owned by it, then the digest.
async fn write_plan(
    api: &Api<ConfigMap>,
    identity: Identity<'_>,
    target: &TargetObject<'_>,
    companion_name: &str,
    current: Pair,
    plan: &Plan,
    writes: &mut u32,
) -> Result<Pair, RegionError> {
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let annotate = |object: &mut ConfigMap| {
        let annotations = object.annotations_mut();
        annotations.insert(DIGEST_ANNOTATION.to_owned(), plan.digest.clone());
        if let Some(revision) = target.revision {
            annotations.insert(REVISION_ANNOTATION.to_owned(), revision.to_owned());
        }
        if let Some(rollout) = target.rollout {
            annotations.insert(ROLLOUT_ANNOTATION.to_owned(), rollout.to_owned());
        }
    };
    // A new target is created whole, so that a first publish writes it once; the
    // companion follows, owned by it (see `plan` for an interrupted creation).
    let Pair {
        target: current_target,
        companion: current_companion,
        ..
    } = current;
    let (target_object, created) = match current_target {
        Some(existing) => (existing, false),
        None => {
            let mut fresh = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(target.name.to_owned()),
                    namespace: Some(target.namespace.to_owned()),
                    ..ObjectMeta::default()
                },
                data: Some(plan.target_data.clone()),
                ..ConfigMap::default()
            };
            annotate(&mut fresh);
            fence(target)?;
            let created = call("create target", api.create(&params, &fresh)).await?;
            *writes += 1;
            (created, true)
        }
    };

    let companion_existed = current_companion.is_some();
    let mut stored_companion = current_companion;
    if plan.companion_changed {
        let companion = signed_companion(
            stored_companion.take(),
            &target_object,
            identity,
            &plan.digest,
            plan.encoded_state.clone(),
        );
        fence(target)?;
        let written = if companion_existed {
            call(
                "write companion",
                api.replace(companion_name, &params, &companion),
            )
            .await?
        } else {
            call("create companion", api.create(&params, &companion)).await?
        };
        *writes += 1;
        stored_companion = Some(written);
    }

    let needs_target_write = !created
        && (plan.target_changed
            || target.revision.is_some_and(|revision| {
                target_object
                    .annotations()
                    .get(REVISION_ANNOTATION)
                    .map(String::as_str)
                    != Some(revision)
            }));
    let stored_target = if needs_target_write {
        let mut updated = target_object;
        updated.data = Some(plan.target_data.clone());
        annotate(&mut updated);
        fence(target)?;
        let written = call("write target", api.replace(target.name, &params, &updated)).await?;
        *writes += 1;
        written
    } else {
        target_object
    };
    Ok(Pair::of(Some(stored_target), stored_companion))
}

/// The companion of `target` holding `encoded_state`, with its digest and its MAC for
/// `identity`: `existing` updated (keeping its resourceVersion, so that a replace is
/// conditional), or a new one owned by the target.
pub(super) fn signed_companion(
    existing: Option<ConfigMap>,
    target: &ConfigMap,
    identity: Identity<'_>,
    digest: &str,
    encoded_state: String,
) -> ConfigMap {
    let mut companion = existing.unwrap_or_else(|| ConfigMap {
        metadata: ObjectMeta {
            name: materialize::companion_name(identity.name).ok(),
            namespace: Some(identity.namespace.to_owned()),
            owner_references: owner_of(target).map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    companion
        .annotations_mut()
        .insert(DIGEST_ANNOTATION.to_owned(), digest.to_owned());
    sign(&mut companion, identity, &encoded_state);
    companion.data = Some(BTreeMap::from([(STATE_KEY.to_owned(), encoded_state)]));
    companion
}

/// Puts the MAC of `encoded_state` for `identity`'s target on `companion`, and the id of
/// the key that made it (public: it tells a process that has not read a rotated key yet
/// from a forgery).
fn sign(companion: &mut ConfigMap, identity: Identity<'_>, encoded_state: &str) {
    let annotations = companion.annotations_mut();
    annotations.insert(
        STATE_MAC_ANNOTATION.to_owned(),
        crdt::state_mac(
            identity.key,
            identity.namespace,
            identity.name,
            encoded_state,
        ),
    );
    annotations.insert(STATE_KEY_ID_ANNOTATION.to_owned(), identity.key.id());
}

fn fence(target: &TargetObject<'_>) -> Result<(), RegionError> {
    if (target.may_write)() {
        Ok(())
    } else {
        Err(RegionError::NotLeader)
    }
}

fn owner_of(target: &ConfigMap) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: ConfigMap::api_version(&()).into_owned(),
        kind: ConfigMap::kind(&()).into_owned(),
        name: target.metadata.name.clone()?,
        uid: target.metadata.uid.clone()?,
        controller: Some(false),
        block_owner_deletion: None,
    })
}

/// Runs one region API call with [`CALL_TIMEOUT`].
pub(super) async fn call<T>(
    operation: &'static str,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, RegionError> {
    Ok(api_call::timed(operation, CALL_TIMEOUT, request).await?)
}
