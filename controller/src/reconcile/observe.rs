//! Reading everything the engine decides on: the desired data, the stored revisions,
//! approvals, operator commands, and each region's replica. Nothing here writes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::{ReconcileError, api_call};
use crate::api::{
    ConfigRollout, Consumer, ExpandContract, Region, RevisionStep, StageApproval, TargetRef,
};
use crate::crdt::{DigestKey, Stamp, WriterId, WriterKind};
use crate::engine::{
    AppliedRevision, ApprovalObservation, ConsumerObservation, Control, Grant, RegionObservation,
};
use crate::gates::{GateProvider, TemplateValues, render};
use crate::regions::clients::RegionClients;
use crate::regions::consumers::{self, activated_from, restart_marker};
use crate::regions::publication::{RevisionState, evidence};
use crate::regions::store::{self, Ownership};

/// Annotation an operator (or `kubectl configrollout abort`) sets, with an RFC 3339 time.
pub const ABORT_ANNOTATION: &str = "configrollout.dev/abort";
/// Annotation an operator (or `kubectl configrollout retry`) sets, with an RFC 3339 time.
pub const RETRY_ANNOTATION: &str = "configrollout.dev/retry";

/// The desired data of a rollout, or why it cannot be had (reported as `InvalidSpec`).
pub async fn desired_data(
    hub: &Client,
    rollout: &ConfigRollout,
) -> Result<Result<BTreeMap<String, String>, String>, ReconcileError> {
    if let Some(data) = &rollout.spec.data {
        return Ok(Ok(data.clone()));
    }
    let Some(source) = &rollout.spec.from_config_map else {
        return Ok(Err(
            "spec: one of data or fromConfigMap is required".to_owned()
        ));
    };
    let namespace = rollout.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(hub.clone(), &namespace);
    match api_call("read fromConfigMap", api.get_opt(&source.name)).await? {
        Some(config_map) => Ok(Ok(config_map.data.unwrap_or_default())),
        None => Ok(Err(format!(
            "spec.fromConfigMap.name: ConfigMap {namespace}/{} does not exist",
            source.name
        ))),
    }
}

/// The StageApprovals naming `rollout`.
pub async fn approvals(
    hub: &Client,
    rollout: &ConfigRollout,
) -> Result<Vec<ApprovalObservation>, ReconcileError> {
    let namespace = rollout.namespace().unwrap_or_default();
    let api: Api<StageApproval> = Api::namespaced(hub.clone(), &namespace);
    let list = api_call("list approvals", api.list(&ListParams::default())).await?;
    let name = rollout.name_any();
    Ok(list
        .items
        .into_iter()
        .filter(|approval| approval.spec.rollout == name)
        .map(|approval| ApprovalObservation {
            name: approval.name_any(),
            rollout_uid: approval.spec.rollout_uid.clone(),
            stage: approval.spec.stage.clone(),
            revision: approval.spec.revision.clone(),
            revision_digest: approval.spec.revision_digest.clone(),
            approver: approval.spec.approver.clone(),
            reason: approval.spec.reason.clone(),
            created_at: approval
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|time| from_k8s_time(&time.0))
                .unwrap_or_default(),
        })
        .collect())
}

/// Every Region of the hub.
pub async fn regions(hub: &Client) -> Result<Vec<Region>, ReconcileError> {
    let api: Api<Region> = Api::all(hub.clone());
    Ok(api_call("list regions", api.list(&ListParams::default()))
        .await?
        .items)
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

/// Where a region's consumers are counted: the declared consumers, the stage that covers
/// the region (for `{{stage}}` in activation queries) and where queries run.
pub struct ConsumerScope<'a> {
    /// `spec.consumers`.
    pub consumers: &'a [Consumer],
    /// The stage covering the region.
    pub stage: &'a str,
    /// Where activation queries run.
    pub gates: &'a dyn GateProvider,
}

/// What the rollout's namespace may reach: the grant on its hub Namespace, or, when an
/// annotation there is malformed, the default grant and the error (reported as
/// `InvalidSpec`, so nothing is written until a platform admin fixes it).
pub async fn grant(
    hub: &Client,
    namespace: &str,
) -> Result<(Grant, Option<String>), ReconcileError> {
    let api: Api<Namespace> = Api::all(hub.clone());
    let object = api_call("read rollout namespace", api.get(namespace)).await?;
    Ok(
        match Grant::from_annotations(namespace, object.annotations()) {
            Ok(grant) => (grant, None),
            Err(error) => (Grant::own_namespace(namespace), Some(error.to_string())),
        },
    )
}

/// Who writes what in a region's target, beyond the evidence the engine reads.
#[derive(Debug, Clone, Default)]
pub struct TargetFindings {
    /// The target exists and configrollout does not manage it.
    pub unmanaged: bool,
    /// Keys this rollout declares whose winning write there is another rollout's, by that
    /// rollout's writer id.
    pub keys_of_other_rollouts: BTreeMap<WriterId, Vec<String>>,
}

/// What one region holds of the rollout.
pub struct ObservedRegion {
    /// What the engine sees.
    pub observation: RegionObservation,
    /// What decides whether the rollout may write there at all.
    pub findings: TargetFindings,
    /// The latest stamp in the region's replica within the drift bound: the clock moves
    /// past it before a revision is stamped, so a new revision is never stamped below
    /// what a region already holds.
    pub latest_stamp: Option<Stamp>,
}

/// The rollout reading a region: its identity and what it declares.
pub struct Reader<'a> {
    /// The rollout's writer id.
    pub writer: &'a WriterId,
    /// The keys it declares now.
    pub declared: &'a BTreeMap<String, String>,
    /// Stamps after this wall-clock time (ms) are further ahead than the clock's drift
    /// bound allows.
    pub stamp_bound_ms: u64,
}

/// What one region holds of the rollout's current revision.
#[allow(clippy::too_many_arguments)]
pub async fn region(
    clients: &RegionClients,
    key: &DigestKey,
    region: &Region,
    target: &TargetRef,
    reader: Reader<'_>,
    current: Option<&RevisionState>,
    expand_contract: &ExpandContract,
    scope: ConsumerScope<'_>,
) -> ObservedRegion {
    let mut observation = RegionObservation {
        name: region.name_any(),
        labels: region.labels().clone(),
        ..RegionObservation::default()
    };
    let mut findings = TargetFindings::default();
    let mut latest_stamp = None;
    let client = match clients.client(region).await {
        Ok(client) => client,
        Err(error) => {
            observation.last_error = Some(error.to_string());
            return ObservedRegion {
                observation,
                findings,
                latest_stamp: None,
            };
        }
    };
    match store::inspect(&client, key, &target.namespace, &target.name).await {
        Ok(inspection) => {
            observation.reachable = true;
            findings.unmanaged = inspection.ownership == Ownership::Unmanaged;
            findings.keys_of_other_rollouts = keys_of_other_rollouts(&inspection.replica, &reader);
            let (latest, future) = stamps(&inspection.replica, &reader, current);
            latest_stamp = latest;
            observation.future_stamped_keys = future;
            observation.drifted_keys = inspection.drifted_keys.clone();
            observation.overridden_keys = inspection.overridden_keys.clone();
            if let Some(revision) = current {
                let two_pass = *expand_contract == ExpandContract::Auto && revision.removes_keys();
                let found = evidence(
                    &inspection.replica,
                    revision,
                    two_pass,
                    reader.stamp_bound_ms,
                );
                observation.applied = found.applied.map(|step| AppliedRevision {
                    revision: revision.name.clone(),
                    step,
                    digest: inspection.digest.clone(),
                });
                observation.rolled_back = found.rolled_back.then(|| revision.name.clone());
                if let Some(pass) = found.applied
                    && !scope.consumers.is_empty()
                {
                    match consumer_counts(
                        &client,
                        &observation.name,
                        target,
                        &revision.name,
                        pass,
                        &scope,
                    )
                    .await
                    {
                        Ok(counts) => observation.consumers = Some(counts),
                        Err(error) => observation.last_error = Some(error.to_string()),
                    }
                }
            }
        }
        Err(error) => {
            observation.reachable = !error.is_unreachable();
            observation.last_error = Some(error.to_string());
        }
    }
    ObservedRegion {
        observation,
        findings,
        latest_stamp,
    }
}

/// The latest stamp of `replica` within the drift bound, and how many of the rollout's
/// keys (declared now, or held by its current revision) carry a stamp beyond it.
fn stamps(
    replica: &crate::crdt::Replica,
    reader: &Reader<'_>,
    current: Option<&RevisionState>,
) -> (Option<Stamp>, u32) {
    let mut latest: Option<&Stamp> = None;
    let mut future = 0_u32;
    for (key, entry) in replica.iter() {
        if entry.stamp.wall_ms > reader.stamp_bound_ms {
            let ours = reader.declared.contains_key(key)
                || current.is_some_and(|revision| revision.state.get(key).is_some());
            if ours {
                future = future.saturating_add(1);
            }
        } else if latest.is_none_or(|latest| entry.stamp > *latest) {
            latest = Some(&entry.stamp);
        }
    }
    (latest.cloned(), future)
}

/// The keys `reader` declares whose live winning entry in `replica` is another rollout's.
fn keys_of_other_rollouts(
    replica: &crate::crdt::Replica,
    reader: &Reader<'_>,
) -> BTreeMap<WriterId, Vec<String>> {
    let mut found: BTreeMap<WriterId, Vec<String>> = BTreeMap::new();
    for key in reader.declared.keys() {
        if let Some(entry) = replica.get(key)
            && !entry.is_tombstone()
            && entry.stamp.writer.kind() == WriterKind::Rollout
            && &entry.stamp.writer != reader.writer
        {
            found
                .entry(entry.stamp.writer.clone())
                .or_default()
                .push(key.clone());
        }
    }
    found
}

/// Counts the region's consumers of `revision` at `pass`: instances from the workloads'
/// status, delivered from their template and status, activated from each consumer's
/// `activationQuery` (delivered, for a consumer that has none). An activation query that
/// cannot be answered counts nobody activated: the stage waits rather than passes.
async fn consumer_counts(
    client: &kube::Client,
    region: &str,
    target: &TargetRef,
    revision: &str,
    pass: RevisionStep,
    scope: &ConsumerScope<'_>,
) -> Result<ConsumerObservation, crate::regions::RegionError> {
    let marker = restart_marker(revision, pass);
    let mut observed = ConsumerObservation {
        revision: revision.to_owned(),
        step: pass,
        total: 0,
        delivered: 0,
        activated: 0,
        restart_pending: false,
    };
    for consumer in scope.consumers {
        let workloads = consumers::workloads(client, &target.namespace, consumer).await?;
        let counted = consumers::count(consumer, &workloads, &marker);
        let activated = match &consumer.activation_query {
            None => counted.delivered,
            Some(template) => {
                let values = TemplateValues {
                    region,
                    revision,
                    stage: scope.stage,
                };
                // The template was checked when the spec was validated.
                match render(template, &values) {
                    Ok(query) => {
                        let result = scope.gates.sample(Some(region), &query).await;
                        activated_from(&result, counted.total).unwrap_or(0)
                    }
                    Err(_) => 0,
                }
            }
        };
        observed.total = observed.total.saturating_add(counted.total);
        observed.delivered = observed.delivered.saturating_add(counted.delivered);
        observed.activated = observed.activated.saturating_add(activated);
        observed.restart_pending |= counted.restart_pending;
    }
    Ok(observed)
}

pub(super) fn from_k8s_time(time: &k8s_openapi::jiff::Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.as_millisecond()).unwrap_or_default()
}
