//! Revisions stored in the hub as `ControllerRevision` objects, one per declared
//! revision, owned by their rollout.
//!
//! Status never holds configuration values, yet publishing to a lagging region and
//! rolling back both need them. `ControllerRevision` is the apps/v1 kind StatefulSets and
//! DaemonSets keep their history in: it lives beside the rollout, is readable under the
//! same RBAC as the rollout's own spec, and is garbage-collected with it.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ListParams, PartialObjectMeta, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Serialize};

use super::revision_cache::DecodedRevisions;
use super::{HubError, api_call};
use crate::regions::publication::{RevisionState, encode_revision};
use crate::regions::store::FIELD_MANAGER;
use crate::watch_index::{Named, WatchIndex};
use configrollout_api::ConfigRollout;
use configrollout_core::crdt;

/// Revisions one load fetches and decodes at once.
const REVISIONS_LOADED_AT_ONCE: usize = 4;

/// Label on each ControllerRevision naming its rollout.
pub const ROLLOUT_LABEL: &str = "configrollout.dev/rollout";

/// The rollout a revision belongs to by its label: the key [`RevisionIndex::by_rollout`]
/// indexes revisions by (their owner reference is checked where they are loaded).
pub fn rollout_of_revision(object: &PartialObjectMeta<ControllerRevision>) -> Option<Named> {
    let rollout = object.labels().get(ROLLOUT_LABEL)?;
    Some((object.namespace().unwrap_or_default(), rollout.clone()))
}

#[derive(Serialize, Deserialize)]
struct Stored {
    stamp: String,
    state: String,
    previous: String,
}

/// What lets a store load revisions without a list: the controller's metadata-only watch
/// of ControllerRevisions and the revisions it has decoded ([`super::revision_cache`]).
#[derive(Clone)]
pub struct RevisionIndex {
    /// Every ControllerRevision carrying [`ROLLOUT_LABEL`], metadata only.
    pub objects: Store<PartialObjectMeta<ControllerRevision>>,
    /// The objects in `objects` of each rollout, by [`rollout_of_revision`].
    pub by_rollout: Arc<WatchIndex>,
    /// Decoded states by uid and resourceVersion.
    pub decoded: Arc<DecodedRevisions>,
}

/// The ControllerRevisions of rollouts in one namespace.
pub struct RevisionStore {
    api: Api<ControllerRevision>,
    index: Option<RevisionIndex>,
}

impl RevisionStore {
    /// The store for rollouts in `namespace` of the hub.
    pub fn new(hub: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(hub, namespace),
            index: None,
        }
    }

    /// The same, loading through `index` where it can.
    pub fn with_index(mut self, index: Option<RevisionIndex>) -> Self {
        self.index = index;
        self
    }

    /// Every stored revision of `rollout`, by name (`r1`, `r2`, ...): from the index when
    /// it has every revision the rollout's status names, else by a list.
    pub async fn load(
        &self,
        rollout: &ConfigRollout,
    ) -> Result<BTreeMap<String, RevisionState>, HubError> {
        if let Some(index) = &self.index
            && let Some(revisions) = self.load_indexed(rollout, index).await?
        {
            return Ok(revisions);
        }
        self.list(rollout).await
    }

    /// The revisions the index knows, each decoded once; `None` when the index lacks a
    /// revision the status names (its watch has not delivered it yet).
    async fn load_indexed(
        &self,
        rollout: &ConfigRollout,
        index: &RevisionIndex,
    ) -> Result<Option<BTreeMap<String, RevisionState>>, HubError> {
        let namespace = rollout.namespace().unwrap_or_default();
        let name = rollout.name_any();
        let uid = rollout.metadata.uid.as_deref();
        let objects: Vec<_> = index
            .by_rollout
            .objects(&namespace, &name)
            .into_iter()
            .filter_map(|(namespace, object)| {
                index
                    .objects
                    .get(&ObjectRef::new(&object).within(&namespace))
            })
            .filter(|object| {
                object.labels().get(ROLLOUT_LABEL) == Some(&name)
                    && object
                        .owner_references()
                        .iter()
                        .any(|owner| Some(owner.uid.as_str()) == uid)
            })
            .collect();
        let status = rollout.status.as_ref();
        let named = status
            .and_then(|status| status.revision.as_deref())
            .into_iter()
            .chain(
                status
                    .into_iter()
                    .flat_map(|status| status.history.iter().map(|record| record.name.as_str())),
            );
        for revision in named {
            let object = object_name(rollout, revision)?;
            if !objects.iter().any(|known| known.name_any() == object) {
                return Ok(None);
            }
        }
        // A few at a time: a cold cache would otherwise fetch and decode every kept
        // revision (up to 100 of up to ~1.4 MiB) at once, for each rollout reconciled.
        let loads: Vec<_> = objects
            .iter()
            .map(|object| async move {
                let uid = object.metadata.uid.as_deref().unwrap_or_default();
                let version = object.resource_version().unwrap_or_default();
                if let Some(state) = index.decoded.get(uid, &version) {
                    return Ok(Some(state));
                }
                let Some(full) =
                    api_call("read revision", self.api.get_opt(&object.name_any())).await?
                else {
                    // Deleted since the watch saw it.
                    return Ok(None);
                };
                if !owned_by(&full, rollout) {
                    return Ok(None);
                }
                let (state, bytes) = decode(&full)?;
                index.decoded.insert(
                    full.metadata.uid.as_deref().unwrap_or_default(),
                    &full.resource_version().unwrap_or_default(),
                    &state,
                    bytes,
                );
                Ok::<_, HubError>(Some(state))
            })
            .collect();
        let loaded: Vec<Option<RevisionState>> = futures::stream::iter(loads)
            .buffered(REVISIONS_LOADED_AT_ONCE)
            .try_collect()
            .await?;
        Ok(Some(
            loaded
                .into_iter()
                .flatten()
                .map(|state| (state.name.clone(), state))
                .collect(),
        ))
    }

    async fn list(
        &self,
        rollout: &ConfigRollout,
    ) -> Result<BTreeMap<String, RevisionState>, HubError> {
        let selector = format!("{ROLLOUT_LABEL}={}", rollout.name_any());
        let list = api_call(
            "list revisions",
            self.api.list(&ListParams::default().labels(&selector)),
        )
        .await?;
        let mut revisions = BTreeMap::new();
        for object in list.items {
            if !owned_by(&object, rollout) {
                continue;
            }
            let (revision, _) = decode(&object)?;
            revisions.insert(revision.name.clone(), revision);
        }
        Ok(revisions)
    }

    /// Stores `revision`, in place of an object of the same name: a revision declared again
    /// after a crash (the status never recorded the first declaration) gets the new stamp.
    pub async fn save(
        &self,
        rollout: &ConfigRollout,
        revision: &RevisionState,
        number: i64,
    ) -> Result<(), HubError> {
        let name = object_name(rollout, &revision.name)?;
        let (state, previous) =
            encode_revision(revision).map_err(|source| HubError::RevisionTooLarge {
                revision: revision.name.clone(),
                reason: source.to_string(),
            })?;
        let stored = Stored {
            stamp: revision.stamp.to_string(),
            state,
            previous,
        };
        let data = serde_json::to_value(&stored).map_err(|source| HubError::Encoding {
            what: "revision",
            reason: source.to_string(),
        })?;
        let object = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: rollout.namespace(),
                labels: Some(BTreeMap::from([(
                    ROLLOUT_LABEL.to_owned(),
                    rollout.name_any(),
                )])),
                owner_references: rollout.controller_owner_ref(&()).map(|owner| vec![owner]),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(data)),
            revision: number,
        };
        let params = PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.to_owned()),
        };
        // A ControllerRevision's data is immutable: one left by a declaration the status
        // never recorded (a crash, or a status write refused as stale) is deleted, exactly
        // that object, and the revision created again with its new stamp. That is rare, so
        // the create is tried first: a name taken answers 409, and only then is it read.
        let created = match api_call("create revision", self.api.create(&params, &object)).await {
            Err(error) if error.is_conflict() => {
                if let Some(existing) = api_call("read revision", self.api.get_opt(&name)).await? {
                    let delete = DeleteParams {
                        preconditions: Some(Preconditions {
                            resource_version: existing.metadata.resource_version,
                            uid: existing.metadata.uid,
                        }),
                        ..DeleteParams::default()
                    };
                    api_call("delete stale revision", self.api.delete(&name, &delete)).await?;
                }
                api_call("create revision", self.api.create(&params, &object)).await?
            }
            other => other?,
        };
        if let Some(index) = &self.index {
            let bytes = stored.state.len().saturating_add(stored.previous.len());
            index.decoded.insert(
                created.metadata.uid.as_deref().unwrap_or_default(),
                &created.resource_version().unwrap_or_default(),
                revision,
                bytes,
            );
        }
        Ok(())
    }

    /// Deletes stored revisions of `rollout` that `keep` does not name.
    pub async fn prune(
        &self,
        rollout: &ConfigRollout,
        stored: &BTreeMap<String, RevisionState>,
        keep: impl Fn(&str) -> bool,
    ) -> Result<(), HubError> {
        for name in stored.keys().filter(|name| !keep(name)) {
            let object = object_name(rollout, name)?;
            api_call(
                "delete revision",
                self.api.delete(&object, &Default::default()),
            )
            .await?;
        }
        Ok(())
    }
}

fn object_name(rollout: &ConfigRollout, revision: &str) -> Result<String, HubError> {
    let name = format!("{}-{revision}", rollout.name_any());
    if name.len() > 253 {
        return Err(HubError::NameTooLong { name });
    }
    Ok(name)
}

fn owned_by(object: &ControllerRevision, rollout: &ConfigRollout) -> bool {
    let uid = rollout.metadata.uid.as_deref();
    object
        .owner_references()
        .iter()
        .any(|owner| Some(owner.uid.as_str()) == uid)
}

/// The revision `object` holds, and the bytes of its encoded state.
fn decode(object: &ControllerRevision) -> Result<(RevisionState, usize), HubError> {
    let object_name = object.name_any();
    let bad = |reason: String| HubError::MalformedRevision {
        object: object_name.clone(),
        reason,
    };
    let data = object
        .data
        .as_ref()
        .ok_or_else(|| bad("no data".to_owned()))?;
    let stored: Stored = serde_json::from_value(data.0.clone()).map_err(|e| bad(e.to_string()))?;
    let stamp = stored
        .stamp
        .parse::<crdt::Stamp>()
        .map_err(|e| bad(format!("stamp: {e}")))?;
    let state = crdt::decode(&stored.state).map_err(|e| bad(format!("state: {e}")))?;
    let previous =
        crdt::decode_delta(&stored.previous).map_err(|e| bad(format!("previous: {e}")))?;
    let rollout = object
        .labels()
        .get(ROLLOUT_LABEL)
        .cloned()
        .unwrap_or_default();
    let name = object_name
        .strip_prefix(&format!("{rollout}-"))
        .ok_or_else(|| bad("name does not start with its rollout's".to_owned()))?
        .to_owned();
    let bytes = stored.state.len().saturating_add(stored.previous.len());
    Ok((
        RevisionState {
            name,
            stamp,
            state,
            previous,
        },
        bytes,
    ))
}
