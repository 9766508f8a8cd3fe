//! The workloads that read a target ConfigMap in one region (`spec.consumers`): how many
//! instances they have, how many run the revision (Delivered), and the rolling restart
//! that delivers it to `Restart` consumers.
//!
//! Delivery is judged from the objects the region's API server holds: the workload's
//! status as its controller reports it (`replicas`, `updatedReplicas`, `readyReplicas`,
//! `observedGeneration`). A `Restart` consumer counts as delivered only once its pod
//! template carries this revision's restart marker and its controller has observed that
//! template, so instances started before the restart never count.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::RegionError;
use super::store::CALL_TIMEOUT;
use crate::api_call;
use configrollout_api::{Consumer, Delivery, RevisionStep, WorkloadKind};
use configrollout_core::engine::label_selector::server_selector;
use configrollout_core::gates::QueryResult;

/// Pod template annotation whose change makes the workload's controller replace its pods
/// (as `kubectl rollout restart` does); its value names the revision and pass delivered.
pub const RESTARTED_FOR_ANNOTATION: &str = "configrollout.dev/restarted-for";

/// The restart marker of one revision and pass, e.g. `r7/Expand`.
pub fn restart_marker(revision: &str, pass: RevisionStep) -> String {
    format!("{revision}/{pass:?}")
}

/// What a workload's status says, whatever its kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadState {
    /// Name, for logs.
    pub name: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `status.observedGeneration`: the template its controller acted on.
    pub observed_generation: Option<i64>,
    /// Instances wanted.
    pub desired: u32,
    /// Instances running the current template.
    pub updated: u32,
    /// Instances ready.
    pub ready: u32,
    /// The restart marker on its pod template, if any.
    pub restart_marker: Option<String>,
    /// Whether its pod template references the target ConfigMap (a volume, a projected
    /// volume, `envFrom` or an `env` value): only such a workload is a consumer. One a
    /// selector matches that does not is never restarted nor counted, only reported.
    pub reads_target: bool,
}

impl WorkloadState {
    /// Instances that run the revision whose restart marker is `marker`.
    pub fn delivered(&self, delivery: Delivery, marker: &str) -> u32 {
        match delivery {
            // The kubelet refreshes a mounted ConfigMap in place: every ready instance
            // sees the materialised revision without being replaced.
            Delivery::Reload => self.ready.min(self.desired),
            Delivery::Restart => {
                let template_current = self.restart_marker.as_deref() == Some(marker);
                let observed = match (self.generation, self.observed_generation) {
                    (Some(generation), Some(observed)) => observed >= generation,
                    _ => false,
                };
                if template_current && observed {
                    self.updated.min(self.ready).min(self.desired)
                } else {
                    0
                }
            }
        }
    }

    /// Whether a `Restart` consumer still needs this revision's restart.
    pub fn restart_pending(&self, marker: &str) -> bool {
        self.restart_marker.as_deref() != Some(marker)
    }
}

/// Counts of one declared consumer in a region.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerCount {
    /// Instances wanted, over every matching workload.
    pub total: u32,
    /// Instances running the revision.
    pub delivered: u32,
    /// Whether some matching workload has not been restarted for the revision yet.
    pub restart_pending: bool,
    /// Workloads it matched that do not read the target: left alone (names).
    pub ignored: Vec<String>,
}

/// Counts `consumer` from the states of the workloads it matches; those that do not read
/// the target are not counted, only named.
pub fn count(consumer: &Consumer, workloads: &[WorkloadState], marker: &str) -> ConsumerCount {
    let mut counted = ConsumerCount::default();
    for workload in workloads {
        if !workload.reads_target {
            counted.ignored.push(workload.name.clone());
            continue;
        }
        counted.total = counted.total.saturating_add(workload.desired);
        counted.delivered = counted
            .delivered
            .saturating_add(workload.delivered(consumer.delivery, marker));
        if consumer.delivery == Delivery::Restart && workload.restart_pending(marker) {
            counted.restart_pending = true;
        }
    }
    counted
}

/// Instances an `activationQuery` says report the revision: the scalar, or the sum of the
/// vector's elements (one per reporting series), at most `total`. No series is none
/// activated yet; an error, a partial answer or a non-finite value is unknown (`None`).
pub fn activated_from(result: &QueryResult, total: u32) -> Option<u32> {
    let value = match result {
        QueryResult::Scalar(value) => *value,
        QueryResult::Vector(elements) => elements.iter().map(|(_, value)| *value).sum(),
        QueryResult::Empty => 0.0,
        QueryResult::Error(_) | QueryResult::Partial(_) => return None,
    };
    if !value.is_finite() {
        return None;
    }
    // Saturating float-to-int conversion; negative counts are none.
    let instances = value.floor().max(0.0) as u64;
    Some(u32::try_from(instances).unwrap_or(u32::MAX).min(total))
}

/// A kind of workload a consumer can be, and how its status reads.
trait Workload:
    Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
{
    /// Its state, `target` being the ConfigMap the rollout manages.
    fn state(&self, target: &str) -> WorkloadState;
}

/// Whether a pod template's spec references the ConfigMap `name`: a `configMap` volume, a
/// projected volume's `configMap` source, or a container's (or init container's)
/// `envFrom.configMapRef` or `env.valueFrom.configMapKeyRef`.
pub fn references_config_map(pod: &PodSpec, name: &str) -> bool {
    let volumes = pod.volumes.iter().flatten().any(|volume| {
        volume
            .config_map
            .as_ref()
            .is_some_and(|source| source.name == name)
            || volume.projected.as_ref().is_some_and(|projected| {
                projected.sources.iter().flatten().any(|source| {
                    source
                        .config_map
                        .as_ref()
                        .is_some_and(|config_map| config_map.name == name)
                })
            })
    });
    let containers = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .any(|container| {
            let from = container.env_from.iter().flatten().any(|from| {
                from.config_map_ref
                    .as_ref()
                    .is_some_and(|reference| reference.name == name)
            });
            let values = container.env.iter().flatten().any(|variable| {
                variable
                    .value_from
                    .as_ref()
                    .and_then(|source| source.config_map_key_ref.as_ref())
                    .is_some_and(|reference| reference.name == name)
            });
            from || values
        });
    volumes || containers
}

/// Deployments and StatefulSets report replicas the same way, in distinct types.
macro_rules! replicated_workload {
    ($kind:ty) => {
        impl Workload for $kind {
            fn state(&self, target: &str) -> WorkloadState {
                let spec = self.spec.as_ref();
                let status = self.status.as_ref();
                state_of(
                    self,
                    status.and_then(|s| s.observed_generation),
                    spec.and_then(|s| s.replicas).unwrap_or(1),
                    status.and_then(|s| s.updated_replicas).unwrap_or(0),
                    status.and_then(|s| s.ready_replicas).unwrap_or(0),
                    spec.map(|s| &s.template),
                    target,
                )
            }
        }
    };
}

replicated_workload!(Deployment);
replicated_workload!(StatefulSet);

impl Workload for DaemonSet {
    fn state(&self, target: &str) -> WorkloadState {
        let status = self.status.as_ref();
        state_of(
            self,
            status.and_then(|s| s.observed_generation),
            status.map_or(0, |s| s.desired_number_scheduled),
            status.and_then(|s| s.updated_number_scheduled).unwrap_or(0),
            status.map_or(0, |s| s.number_ready),
            self.spec.as_ref().map(|s| &s.template),
            target,
        )
    }
}

/// The target ConfigMap `name` in `namespace`: where consumers are looked for, and what
/// they must read to be consumers.
#[derive(Debug, Clone, Copy)]
pub struct ConsumedTarget<'a> {
    /// Namespace of the target (and of its consumers).
    pub namespace: &'a str,
    /// Name of the target ConfigMap.
    pub name: &'a str,
}

/// Reads the workloads `consumer` names or selects beside `target`, each marked with
/// whether it reads the target.
pub async fn workloads(
    client: &Client,
    target: ConsumedTarget<'_>,
    consumer: &Consumer,
) -> Result<Vec<WorkloadState>, RegionError> {
    match consumer.kind {
        WorkloadKind::Deployment => matching::<Deployment>(client, target, consumer).await,
        WorkloadKind::StatefulSet => matching::<StatefulSet>(client, target, consumer).await,
        WorkloadKind::DaemonSet => matching::<DaemonSet>(client, target, consumer).await,
    }
}

/// Sets this revision's restart marker on the pod template of every workload `consumer`
/// matches that reads `target` and does not carry the marker yet. Returns how many
/// workloads were patched. A workload that does not read the target is never touched.
pub async fn restart(
    client: &Client,
    target: ConsumedTarget<'_>,
    consumer: &Consumer,
    marker: &str,
) -> Result<u32, RegionError> {
    match consumer.kind {
        WorkloadKind::Deployment => {
            restart_kind::<Deployment>(client, target, consumer, marker).await
        }
        WorkloadKind::StatefulSet => {
            restart_kind::<StatefulSet>(client, target, consumer, marker).await
        }
        WorkloadKind::DaemonSet => {
            restart_kind::<DaemonSet>(client, target, consumer, marker).await
        }
    }
}

async fn restart_kind<K: Workload>(
    client: &Client,
    target: ConsumedTarget<'_>,
    consumer: &Consumer,
    marker: &str,
) -> Result<u32, RegionError> {
    let namespace = target.namespace;
    let pending: Vec<String> = matching::<K>(client, target, consumer)
        .await?
        .into_iter()
        .filter(|workload| workload.reads_target && workload.restart_pending(marker))
        .map(|workload| workload.name)
        .collect();
    let patch = Patch::Merge(json!({
        "spec": {"template": {"metadata": {"annotations": {RESTARTED_FOR_ANNOTATION: marker}}}}
    }));
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    for name in &pending {
        call(
            "restart consumer",
            api.patch(name, &PatchParams::default(), &patch),
        )
        .await?;
    }
    Ok(u32::try_from(pending.len()).unwrap_or(u32::MAX))
}

async fn matching<K: Workload>(
    client: &Client,
    target: ConsumedTarget<'_>,
    consumer: &Consumer,
) -> Result<Vec<WorkloadState>, RegionError> {
    let namespace = target.namespace;
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    if let Some(name) = &consumer.name {
        // A named consumer that does not exist is an error, not zero instances: a typo
        // must hold the stage (and halt it at its deadline), never let it pass unseen.
        let found = call("read consumer", api.get_opt(name))
            .await?
            .ok_or_else(|| RegionError::ConsumerMissing {
                kind: K::kind(&()).into_owned(),
                namespace: namespace.to_owned(),
                name: name.clone(),
            })?;
        return Ok(vec![found.state(target.name)]);
    }
    let Some(selector) = &consumer.selector else {
        return Ok(Vec::new());
    };
    // Selected by the API server: only the matching workloads cross the network, not every
    // workload of the namespace.
    let selector = server_selector(selector).map_err(|source| RegionError::ConsumerSelector {
        kind: K::kind(&()).into_owned(),
        source,
    })?;
    let listed = call(
        "list consumers",
        api.list(&ListParams::default().labels_from(&selector)),
    )
    .await?;
    Ok(listed
        .items
        .iter()
        .map(|workload| workload.state(target.name))
        .collect())
}

fn state_of<K: Resource>(
    object: &K,
    observed_generation: Option<i64>,
    desired: i32,
    updated: i32,
    ready: i32,
    template: Option<&PodTemplateSpec>,
    target: &str,
) -> WorkloadState {
    let count = |n: i32| u32::try_from(n).unwrap_or(0);
    let annotations: Option<&BTreeMap<String, String>> = template
        .and_then(|template| template.metadata.as_ref())
        .and_then(|meta| meta.annotations.as_ref());
    let reads_target = template
        .and_then(|template| template.spec.as_ref())
        .is_some_and(|pod| references_config_map(pod, target));
    WorkloadState {
        name: object.meta().name.clone().unwrap_or_default(),
        generation: object.meta().generation,
        observed_generation,
        desired: count(desired),
        updated: count(updated),
        ready: count(ready),
        restart_marker: annotations.and_then(|a| a.get(RESTARTED_FOR_ANNOTATION).cloned()),
        reads_target,
    }
}

async fn call<T>(
    operation: &'static str,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, RegionError> {
    Ok(api_call::timed(operation, CALL_TIMEOUT, request).await?)
}

#[cfg(test)]
mod tests;
