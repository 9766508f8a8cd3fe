//! Writing a region: [`materialize`] plans the merge from the target and companion as
//! read and writes them, each write conditional on what was read, reading again and
//! planning again after a conflict.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

use super::inspection::inspection_of;
use super::{
    DriftHandling, FIELD_MANAGER, Identity, Materialized, Ownership, Pair, ReadFrom, Snapshot,
    TargetObject, call, read_pair, signed_companion,
};
use crate::regions::RegionError;
use crate::regions::materialize::{
    self, DIGEST_ANNOTATION, MergeRequest, Plan, REVISION_ANNOTATION, ROLLOUT_ANNOTATION,
};
use configrollout_core::crdt::{self, Delta, DigestKey, Replica};

/// How many times a conflicting write is re-read and re-planned before giving up.
const MAX_ATTEMPTS: u32 = 5;

/// Merges the delta `delta_for` builds from the region's current replica (a revision's
/// publication ignores it; a rollback is computed from it, on every attempt, so a write
/// that lands in between is never reverted by a stale computation). Reads back the result.
/// A write refused as a conflict is reported to [`TargetObject::on_conflict`], then both
/// objects are read again.
///
/// `first_read` is what an [`inspect`] of the same target read moments ago: the first
/// attempt plans from it (a stale one only costs a conflict and a fresh read).
///
/// [`inspect`]: super::inspect
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

fn fence(target: &TargetObject<'_>) -> Result<(), RegionError> {
    if (target.may_write)() {
        Ok(())
    } else {
        Err(RegionError::NotLeader)
    }
}
