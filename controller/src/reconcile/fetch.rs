//! Reading a rollout's inputs from the hub: the grant on its Namespace, its desired data,
//! the Regions, its approvals and its stored revisions. Nothing here writes, and nothing
//! here reads a region. The Namespace, the Regions and the approvals come from the
//! controller's watches ([`super::hub_cache`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::hub_cache::HubStores;
use super::revision_store::RevisionStore;
use super::{Context, HubError, api_call};
use crate::api::annotations::{
    ABORT_ANNOTATION, RETRY_ANNOTATION, SOURCE_AUTHOR_ANNOTATION, SOURCE_LABEL,
};
use crate::api::{ConfigRollout, Region};
use crate::engine::{ApprovalObservation, Control, Grant};
use crate::regions::publication::RevisionState;

/// Everything a reconcile reads from the hub.
pub struct Fetched {
    /// What the rollout's namespace may reach.
    pub grant: Grant,
    /// Why the grant annotations could not be read, if so (the default grant applies).
    pub grant_error: Option<String>,
    /// The desired data, or why it cannot be had.
    pub desired: Result<BTreeMap<String, String>, String>,
    /// For a `fromConfigMap` rollout, who last changed the source's data, as
    /// `policies/mutating/source-author.yaml` stamps it, or why that is not known.
    pub source_author: Option<Result<SourceAuthor, String>>,
    /// Every Region.
    pub regions: Vec<Region>,
    /// The StageApprovals naming the rollout.
    pub approvals: Vec<ApprovalObservation>,
    /// Where the rollout's revisions are stored.
    pub store: RevisionStore,
    /// The stored revisions, by name.
    pub revisions: BTreeMap<String, RevisionState>,
    /// The template gates as their templates are now.
    pub gate_templates: crate::engine::gate_templates::Resolution,
}

/// Reads the rollout's inputs, concurrently, and moves the clock past every stored
/// revision's stamp.
pub async fn fetch(ctx: &Context, rollout: &ConfigRollout) -> Result<Fetched, HubError> {
    let namespace = rollout.namespace().unwrap_or_default();
    let cached = ctx.hub_cache.stores().await?;
    let store = ctx.hub_cache.revision_store(ctx.hub.clone(), &namespace);
    let regions = cached.regions();
    let approvals = approvals(&cached, rollout);
    let ((grant, grant_error), (desired, source_author), revisions) = futures::try_join!(
        grant(&ctx.hub, &cached, &namespace),
        desired_data(&ctx.hub, rollout),
        store.load(rollout),
    )?;
    for revision in revisions.values() {
        ctx.observe_stamp(&revision.stamp);
    }
    let templates = cached.gate_templates(&namespace, &rollout.spec).await?;
    let gate_templates =
        crate::engine::gate_templates::resolve(&rollout.spec, &namespace, &templates);
    Ok(Fetched {
        grant,
        grant_error,
        desired,
        source_author,
        regions,
        approvals,
        store,
        revisions,
        gate_templates,
    })
}

/// What a rollout declares now, and who changed its source.
type DesiredData = (
    Result<BTreeMap<String, String>, String>,
    Option<Result<SourceAuthor, String>>,
);

/// The desired data of a rollout, or why it cannot be had (reported as `InvalidSpec`),
/// and, for `fromConfigMap`, who changed the source's data.
async fn desired_data(hub: &Client, rollout: &ConfigRollout) -> Result<DesiredData, HubError> {
    if let Some(data) = &rollout.spec.data {
        return Ok((Ok(data.clone()), None));
    }
    let Some(source) = &rollout.spec.from_config_map else {
        return Ok((
            Err("spec: one of data or fromConfigMap is required".to_owned()),
            None,
        ));
    };
    let namespace = rollout.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(hub.clone(), &namespace);
    match api_call("read fromConfigMap", api.get_opt(&source.name)).await? {
        Some(config_map) => {
            let author = source_author(&namespace, &config_map);
            Ok((
                text_data(&namespace, &source.name, config_map),
                Some(author),
            ))
        }
        None => Ok((
            Err(format!(
                "spec.fromConfigMap.name: ConfigMap {namespace}/{} does not exist",
                source.name
            )),
            None,
        )),
    }
}

/// A source ConfigMap's author stamp, and which ConfigMap carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceAuthor {
    /// The ConfigMap's `metadata.uid`.
    pub uid: String,
    /// Its [`SOURCE_AUTHOR_ANNOTATION`].
    pub stamp: String,
}

/// Who changed a source ConfigMap's data, as `policies/mutating/source-author.yaml` stamps it on
/// ConfigMaps labelled [`SOURCE_LABEL`]; without the label the stamp may have been
/// written by anyone, so the author is not known.
fn source_author(namespace: &str, source: &ConfigMap) -> Result<SourceAuthor, String> {
    let name = source.name_any();
    if source.labels().get(SOURCE_LABEL).map(String::as_str) != Some("true") {
        return Err(format!(
            "the source ConfigMap {namespace}/{name} is not labelled {SOURCE_LABEL}=true, so \
             nothing stamps who edits it (policies/mutating/source-author.yaml)"
        ));
    }
    let stamp = source
        .annotations()
        .get(SOURCE_AUTHOR_ANNOTATION)
        .cloned()
        .ok_or_else(|| {
            format!(
                "the source ConfigMap {namespace}/{name} carries no \
                 {SOURCE_AUTHOR_ANNOTATION} (install policies/mutating/source-author.yaml, then \
                 change it once)"
            )
        })?;
    Ok(SourceAuthor {
        uid: source.uid().unwrap_or_default(),
        stamp,
    })
}

/// A source's `data`, or why it cannot be published: configrollout carries text only, and
/// a key in `binaryData` (kubectl puts any non-UTF-8 file there by itself) would otherwise
/// be published as a deletion of that key.
fn text_data(
    namespace: &str,
    name: &str,
    source: ConfigMap,
) -> Result<BTreeMap<String, String>, String> {
    let binary: Vec<&String> = source
        .binary_data
        .as_ref()
        .map(|binary| binary.keys().collect())
        .unwrap_or_default();
    if let Some(first) = binary.first() {
        return Err(format!(
            "spec.fromConfigMap.name: ConfigMap {namespace}/{name} holds {} key(s) in \
             binaryData (first: {first:?}): configrollout rolls out text (data) only; move \
             them to data as UTF-8 or remove them. Nothing was published",
            binary.len()
        ));
    }
    Ok(source.data.unwrap_or_default())
}

/// The StageApprovals naming `rollout`.
fn approvals(cached: &HubStores, rollout: &ConfigRollout) -> Vec<ApprovalObservation> {
    let namespace = rollout.namespace().unwrap_or_default();
    cached
        .approvals_of(&namespace, &rollout.name_any())
        .into_iter()
        .map(|approval| ApprovalObservation {
            name: approval.name_any(),
            rollout_uid: approval.spec.rollout_uid.clone(),
            stage: approval.spec.stage.clone(),
            revision: approval.spec.revision.clone(),
            revision_digest: approval.spec.revision_digest.clone(),
            stage_digest: approval.spec.stage_digest.clone(),
            approver: approval.spec.approver.clone(),
            reason: approval.spec.reason.clone(),
            created_at: approval
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|time| from_k8s_time(&time.0))
                .unwrap_or_default(),
        })
        .collect()
}

/// Every Region of the hub.
pub async fn regions(hub: &Client) -> Result<Vec<Region>, HubError> {
    let api: Api<Region> = Api::all(hub.clone());
    Ok(api_call("list regions", api.list(&ListParams::default()))
        .await?
        .items)
}

/// What the rollout's namespace may reach: the grant on its hub Namespace, or, when an
/// annotation there is malformed, the default grant and the error (reported as
/// `InvalidSpec`, so nothing is written until a platform admin fixes it). A Namespace the
/// watch has not delivered yet (created a moment ago) is read.
async fn grant(
    hub: &Client,
    cached: &HubStores,
    namespace: &str,
) -> Result<(Grant, Option<String>), HubError> {
    let annotations = match cached.namespace(namespace) {
        Some(object) => object.annotations().clone(),
        None => {
            let api: Api<Namespace> = Api::all(hub.clone());
            let object = api_call("read rollout namespace", api.get(namespace)).await?;
            object.annotations().clone()
        }
    };
    Ok(match Grant::from_annotations(namespace, &annotations) {
        Ok(grant) => (grant, None),
        Err(error) => (Grant::own_namespace(namespace), Some(error.to_string())),
    })
}

/// The operator commands on a rollout's annotations. An unparsable time is ignored (and
/// logged): acting on a command nobody can date would break "acted on once".
pub fn control(rollout: &ConfigRollout) -> Control {
    let requested_at = |annotation: &str| {
        let text = rollout.annotations().get(annotation)?;
        match DateTime::parse_from_rfc3339(text) {
            Ok(at) => Some(at.with_timezone(&Utc)),
            Err(_) => {
                tracing::warn!(
                    annotation,
                    "ignoring operator command whose time is not RFC 3339"
                );
                None
            }
        }
    };
    Control {
        abort_requested_at: requested_at(ABORT_ANNOTATION),
        retry_requested_at: requested_at(RETRY_ANNOTATION),
    }
}

fn from_k8s_time(time: &k8s_openapi::jiff::Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.as_millisecond()).unwrap_or_default()
}
