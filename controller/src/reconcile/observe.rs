//! Reading everything the engine decides on: the desired data, the stored revisions,
//! approvals, operator commands, and each region's replica. Nothing here writes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::{ReconcileError, api_call};
use crate::api::{ConfigRollout, ExpandContract, Region, StageApproval, TargetRef};
use crate::crdt::DigestKey;
use crate::engine::{AppliedRevision, ApprovalObservation, Control, RegionObservation};
use crate::regions::clients::RegionClients;
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

/// What one region holds of the rollout's current revision.
pub async fn region(
    clients: &RegionClients,
    key: &DigestKey,
    region: &Region,
    target: &TargetRef,
    current: Option<&RevisionState>,
    expand_contract: &ExpandContract,
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
            }
        }
        Err(error) => {
            observation.reachable = !error.is_unreachable();
            observation.last_error = Some(error.to_string());
        }
    }
    observation
}

pub(super) fn from_k8s_time(time: &k8s_openapi::jiff::Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.as_millisecond()).unwrap_or_default()
}
