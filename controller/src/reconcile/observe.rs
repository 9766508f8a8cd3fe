//! Reading everything the engine decides on: the desired data, the stored revisions,
//! approvals, operator commands, and each region's replica. Nothing here writes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::{ReconcileError, api_call};
use crate::api::{
    ConfigRollout, Consumer, ExpandContract, Region, RevisionStep, StageApproval, TargetRef,
};
use crate::crdt::DigestKey;
use crate::engine::{
    AppliedRevision, ApprovalObservation, ConsumerObservation, Control, RegionObservation,
};
use crate::gates::{GateProvider, TemplateValues, render};
use crate::regions::clients::RegionClients;
use crate::regions::consumers::{self, activated_from, restart_marker};
use crate::regions::publication::{RevisionState, evidence};
use crate::regions::store;

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
            stage: approval.spec.stage.clone(),
            revision: approval.spec.revision.clone(),
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

/// What one region holds of the rollout's current revision.
pub async fn region(
    clients: &RegionClients,
    key: &DigestKey,
    region: &Region,
    target: &TargetRef,
    current: Option<&RevisionState>,
    expand_contract: &ExpandContract,
    scope: ConsumerScope<'_>,
) -> RegionObservation {
    let mut observation = RegionObservation {
        name: region.name_any(),
        labels: region.labels().clone(),
        ..RegionObservation::default()
    };
    let client = match clients.client(region).await {
        Ok(client) => client,
        Err(error) => {
            observation.last_error = Some(error.to_string());
            return observation;
        }
    };
    match store::inspect(&client, key, &target.namespace, &target.name).await {
        Ok(inspection) => {
            observation.reachable = true;
            observation.drifted_keys = inspection.drifted_keys.clone();
            observation.overridden_keys = inspection.overridden_keys.clone();
            if let Some(revision) = current {
                let two_pass = *expand_contract == ExpandContract::Auto && revision.removes_keys();
                let found = evidence(&inspection.replica, revision, two_pass);
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
    observation
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
