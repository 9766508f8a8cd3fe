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
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::RegionError;
use super::store::CALL_TIMEOUT;
use crate::api::{Consumer, Delivery, RevisionStep, WorkloadKind};
use crate::api_call;
use crate::engine::selection::server_selector;
use crate::gates::QueryResult;

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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerCount {
    /// Instances wanted, over every matching workload.
    pub total: u32,
    /// Instances running the revision.
    pub delivered: u32,
    /// Whether some matching workload has not been restarted for the revision yet.
    pub restart_pending: bool,
}

/// Counts `consumer` from the states of the workloads it matches.
pub fn count(consumer: &Consumer, workloads: &[WorkloadState], marker: &str) -> ConsumerCount {
    let mut counted = ConsumerCount::default();
    for workload in workloads {
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
    fn state(&self) -> WorkloadState;
}

/// Deployments and StatefulSets report replicas the same way, in distinct types.
macro_rules! replicated_workload {
    ($kind:ty) => {
        impl Workload for $kind {
            fn state(&self) -> WorkloadState {
                let spec = self.spec.as_ref();
                let status = self.status.as_ref();
                state_of(
                    self,
                    status.and_then(|s| s.observed_generation),
                    spec.and_then(|s| s.replicas).unwrap_or(1),
                    status.and_then(|s| s.updated_replicas).unwrap_or(0),
                    status.and_then(|s| s.ready_replicas).unwrap_or(0),
                    spec.and_then(|s| s.template.metadata.as_ref()),
                )
            }
        }
    };
}

replicated_workload!(Deployment);
replicated_workload!(StatefulSet);

impl Workload for DaemonSet {
    fn state(&self) -> WorkloadState {
        let status = self.status.as_ref();
        state_of(
            self,
            status.and_then(|s| s.observed_generation),
            status.map_or(0, |s| s.desired_number_scheduled),
            status.and_then(|s| s.updated_number_scheduled).unwrap_or(0),
            status.map_or(0, |s| s.number_ready),
            self.spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref()),
        )
    }
}

/// Reads the workloads `consumer` names or selects in `namespace`.
pub async fn workloads(
    client: &Client,
    namespace: &str,
    consumer: &Consumer,
) -> Result<Vec<WorkloadState>, RegionError> {
    match consumer.kind {
        WorkloadKind::Deployment => matching::<Deployment>(client, namespace, consumer).await,
        WorkloadKind::StatefulSet => matching::<StatefulSet>(client, namespace, consumer).await,
        WorkloadKind::DaemonSet => matching::<DaemonSet>(client, namespace, consumer).await,
    }
}

/// Sets this revision's restart marker on the pod template of every workload `consumer`
/// matches that does not carry it yet. Returns how many workloads were patched.
pub async fn restart(
    client: &Client,
    namespace: &str,
    consumer: &Consumer,
    marker: &str,
) -> Result<u32, RegionError> {
    match consumer.kind {
        WorkloadKind::Deployment => {
            restart_kind::<Deployment>(client, namespace, consumer, marker).await
        }
        WorkloadKind::StatefulSet => {
            restart_kind::<StatefulSet>(client, namespace, consumer, marker).await
        }
        WorkloadKind::DaemonSet => {
            restart_kind::<DaemonSet>(client, namespace, consumer, marker).await
        }
    }
}

async fn restart_kind<K: Workload>(
    client: &Client,
    namespace: &str,
    consumer: &Consumer,
    marker: &str,
) -> Result<u32, RegionError> {
    let pending: Vec<String> = matching::<K>(client, namespace, consumer)
        .await?
        .into_iter()
        .filter(|workload| workload.restart_pending(marker))
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
    namespace: &str,
    consumer: &Consumer,
) -> Result<Vec<WorkloadState>, RegionError> {
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
        return Ok(vec![found.state()]);
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
    Ok(listed.items.iter().map(Workload::state).collect())
}

fn state_of<K: Resource>(
    object: &K,
    observed_generation: Option<i64>,
    desired: i32,
    updated: i32,
    ready: i32,
    template: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
) -> WorkloadState {
    let count = |n: i32| u32::try_from(n).unwrap_or(0);
    let annotations: Option<&BTreeMap<String, String>> =
        template.and_then(|meta| meta.annotations.as_ref());
    WorkloadState {
        name: object.meta().name.clone().unwrap_or_default(),
        generation: object.meta().generation,
        observed_generation,
        desired: count(desired),
        updated: count(updated),
        ready: count(ready),
        restart_marker: annotations.and_then(|a| a.get(RESTARTED_FOR_ANNOTATION).cloned()),
    }
}

async fn call<T>(
    operation: &'static str,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, RegionError> {
    Ok(api_call::timed(operation, CALL_TIMEOUT, request).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer(delivery: Delivery) -> Consumer {
        serde_json::from_value(json!({
            "kind": "Deployment", "name": "api", "delivery": delivery,
        }))
        .unwrap()
    }

    fn deployment(marker: Option<&str>, generation: i64, observed: i64) -> WorkloadState {
        WorkloadState {
            name: "api".into(),
            generation: Some(generation),
            observed_generation: Some(observed),
            desired: 3,
            updated: 2,
            ready: 3,
            restart_marker: marker.map(str::to_owned),
        }
    }

    #[test]
    fn restart_counts_only_instances_of_the_restarted_template() {
        let marker = restart_marker("r2", RevisionStep::Single);
        let restarted = count(
            &consumer(Delivery::Restart),
            &[deployment(Some(&marker), 4, 4)],
            &marker,
        );
        assert_eq!(
            restarted,
            ConsumerCount {
                total: 3,
                delivered: 2,
                restart_pending: false
            }
        );
    }

    #[test]
    fn restart_counts_nothing_before_the_controller_observed_the_template() {
        let marker = restart_marker("r2", RevisionStep::Single);
        let unobserved = count(
            &consumer(Delivery::Restart),
            &[deployment(Some(&marker), 5, 4)],
            &marker,
        );
        assert_eq!(unobserved.delivered, 0);
        let previous = restart_marker("r1", RevisionStep::Single);
        let old_template = count(
            &consumer(Delivery::Restart),
            &[deployment(Some(&previous), 4, 4)],
            &marker,
        );
        assert_eq!(old_template.delivered, 0);
        assert!(old_template.restart_pending);
    }

    #[test]
    fn reload_counts_ready_instances_without_a_restart() {
        let marker = restart_marker("r2", RevisionStep::Expand);
        let reloaded = count(
            &consumer(Delivery::Reload),
            &[deployment(None, 4, 3), deployment(None, 1, 1)],
            &marker,
        );
        assert_eq!(
            reloaded,
            ConsumerCount {
                total: 6,
                delivered: 6,
                restart_pending: false
            }
        );
    }

    #[test]
    fn activation_is_the_count_the_query_reports_bounded_by_the_instances() {
        let series = |value: f64| (crate::gates::Labels::new(), value);
        assert_eq!(activated_from(&QueryResult::Scalar(2.0), 3), Some(2));
        assert_eq!(
            activated_from(&QueryResult::Vector(vec![series(1.0), series(1.0)]), 3),
            Some(2)
        );
        assert_eq!(activated_from(&QueryResult::Scalar(9.0), 3), Some(3));
        assert_eq!(activated_from(&QueryResult::Empty, 3), Some(0));
        assert_eq!(activated_from(&QueryResult::Scalar(f64::NAN), 3), None);
        assert_eq!(activated_from(&QueryResult::Error("down".into()), 3), None);
        assert_eq!(
            activated_from(&QueryResult::Partial("store down".into()), 3),
            None
        );
    }

    /// An API server that answers every request with `body` and records the request
    /// targets (path and query).
    async fn fake_api_server(
        body: serde_json::Value,
    ) -> (Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use hyper::service::service_fn;
        use hyper_util::rt::TokioIo;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = seen.clone();
        let body = body.to_string();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let recorded = recorded.clone();
                let body = body.clone();
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    recorded.lock().unwrap().push(request.uri().to_string());
                    let mut response = hyper::Response::new(http_body_util::Full::new(
                        hyper::body::Bytes::from(body.clone()),
                    ));
                    response.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    async move { Ok::<_, std::convert::Infallible>(response) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        (Client::try_from(config).unwrap(), seen)
    }

    fn selected(selector: serde_json::Value) -> Consumer {
        serde_json::from_value(json!({"kind": "Deployment", "selector": selector})).unwrap()
    }

    #[tokio::test]
    async fn selected_consumers_are_listed_by_the_api_server() {
        let (client, seen) = fake_api_server(json!({
            "apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {},
            "items": [{
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "api", "namespace": "shop", "labels": {"app": "api"}},
                "spec": {"replicas": 2, "selector": {}, "template": {}},
                "status": {"readyReplicas": 2},
            }],
        }))
        .await;
        let consumer = selected(json!({
            "matchLabels": {"app": "api"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["canary"]}],
        }));
        let found = workloads(&client, "shop", &consumer).await.unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].name.as_str(), found[0].desired), ("api", 2));
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(
            seen[0].starts_with("/apis/apps/v1/namespaces/shop/deployments?"),
            "{seen:?}"
        );
        assert!(
            seen[0].contains("labelSelector=app%3Dapi%2Ctier+notin+%28canary%29"),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn an_invalid_consumer_selector_is_an_error_and_lists_nothing() {
        let (client, seen) = fake_api_server(json!({})).await;
        let consumer = selected(json!({
            "matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}],
        }));
        let error = workloads(&client, "shop", &consumer).await.unwrap_err();
        assert!(
            matches!(&error, RegionError::ConsumerSelector { source, .. }
                if source.field == "matchExpressions[0]"),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("consumer Deployment selector.matchExpressions[0]: "),
            "{error}"
        );
        let injected = selected(json!({"matchLabels": {"app": "api,tier!=canary"}}));
        assert!(workloads(&client, "shop", &injected).await.is_err());
        assert!(seen.lock().unwrap().is_empty());
    }

    #[test]
    fn the_marker_names_revision_and_pass() {
        assert_eq!(restart_marker("r7", RevisionStep::Contract), "r7/Contract");
    }
}
