//! Pods without a kubelet: a lab region with upstream kube-controller-manager,
//! kube-scheduler and KWOK ([`LabOptions::workload_controllers`]). A Deployment gets
//! pods that turn Ready on the region's fake node, a restart (the pod-template
//! annotation `kubectl rollout restart` writes) replaces them all, the same works after
//! the region was stopped and started, and the lab leaves no process behind.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use configrollout_e2e::{Lab, LabOptions, User, process_alive};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{eventually, within};

const NAMESPACE: &str = "default";
const NAME: &str = "web";
const REPLICAS: i32 = 3;
/// Bound on a Deployment reaching the state asked for (scheduling, KWOK, rollout steps).
const ROLLOUT: Duration = Duration::from_secs(180);
/// What `kubectl rollout restart` writes into the pod template.
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": NAME, "namespace": NAMESPACE },
        "spec": {
            "replicas": REPLICAS,
            "selector": { "matchLabels": { "app": NAME } },
            "template": {
                "metadata": { "labels": { "app": NAME } },
                // As our users write them: no nodeName, no toleration; the image is never
                // pulled (KWOK runs nothing).
                "spec": { "containers": [ { "name": "web", "image": "registry.invalid/web:1" } ] }
            }
        }
    }))
    .expect("deployment")
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Deployment's pods that are not being deleted, by name.
async fn live_pods(pods: &Api<Pod>) -> BTreeMap<String, Pod> {
    within(
        "list pods",
        pods.list(&ListParams::default().labels(&format!("app={NAME}"))),
    )
    .await
    .items
    .into_iter()
    .filter(|p| p.metadata.deletion_timestamp.is_none())
    .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
    .collect()
}

/// Waits until the Deployment's status says every replica runs the current template and
/// is ready, for the current generation, and returns its live pods then.
async fn rolled_out(
    deployments: &Api<Deployment>,
    pods: &Api<Pod>,
    what: &str,
) -> BTreeMap<String, Pod> {
    eventually(what, ROLLOUT, || async {
        let deployment = within("get deployment", deployments.get(NAME)).await;
        let generation = deployment.metadata.generation;
        let status = deployment.status.unwrap_or_default();
        let done = status.observed_generation == generation
            && status.replicas == Some(REPLICAS)
            && status.updated_replicas == Some(REPLICAS)
            && status.ready_replicas == Some(REPLICAS)
            && status.available_replicas == Some(REPLICAS);
        if !done {
            return None;
        }
        let live = live_pods(pods).await;
        (live.len() == REPLICAS as usize).then_some(live)
    })
    .await
}

async fn restart(deployments: &Api<Deployment>, at: &str) {
    let patch = json!({
        "spec": { "template": { "metadata": { "annotations": { RESTARTED_AT: at } } } }
    });
    within(
        "restart the deployment",
        deployments.patch(NAME, &PatchParams::default(), &Patch::Strategic(patch)),
    )
    .await;
}

/// Every pod is Ready, on the fake node, and carries the template's restart stamp.
fn assert_pods(pods: &BTreeMap<String, Pod>, node: &str, restarted_at: Option<&str>) {
    for (name, pod) in pods {
        assert!(pod_ready(pod), "{name} is Ready: {:?}", pod.status);
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some(node),
            "{name} was scheduled onto the fake node"
        );
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running"),
            "{name} runs"
        );
        let stamp = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RESTARTED_AT))
            .map(String::as_str);
        assert_eq!(stamp, restarted_at, "{name} is of the current template");
    }
}

async fn scenario(lab: &mut Lab) {
    let region = lab.regions()[0].clone();
    let node_name = lab
        .fake_node(&region)
        .expect("region")
        .expect("the lab runs workload controllers");
    assert_eq!(node_name, format!("kwok-{region}"));
    let client = lab.client(&region, User::Admin).expect("admin client");

    let node = within(
        "get the fake node",
        Api::<Node>::all(client.clone()).get(&node_name),
    )
    .await;
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    assert!(ready, "KWOK made {node_name} Ready");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let started = Instant::now();
    within(
        "create the deployment",
        deployments.create(&PostParams::default(), &deployment()),
    )
    .await;
    let first = rolled_out(&deployments, &pods, "3 of 3 pods ready").await;
    eprintln!("3/3 ready after {:?}", started.elapsed());
    assert_pods(&first, &node_name, None);

    let started = Instant::now();
    restart(&deployments, "2026-12-02T00:00:00Z").await;
    let second = rolled_out(&deployments, &pods, "3 of 3 restarted pods ready").await;
    eprintln!("restart rolled out after {:?}", started.elapsed());
    assert_pods(&second, &node_name, Some("2026-12-02T00:00:00Z"));
    let before: BTreeSet<&String> = first.keys().collect();
    let after: BTreeSet<&String> = second.keys().collect();
    assert!(
        before.is_disjoint(&after),
        "every pod was replaced: before {before:?}, after {after:?}"
    );
    let generation = within("get deployment", deployments.get(NAME))
        .await
        .metadata
        .generation;
    assert_eq!(generation, Some(2), "one template change after the create");

    // The controllers, scheduler and KWOK stop and start with their region.
    lab.stop_region(&region).expect("stop the region");
    lab.start_region(&region).await.expect("start the region");
    let client = lab.client(&region, User::Admin).expect("admin client");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let started = Instant::now();
    restart(&deployments, "2026-12-02T01:00:00Z").await;
    let third = rolled_out(&deployments, &pods, "restart after the region restarted").await;
    eprintln!(
        "restart after a region restart rolled out after {:?}",
        started.elapsed()
    );
    assert_pods(&third, &node_name, Some("2026-12-02T01:00:00Z"));
    let after_restart: BTreeSet<&String> = third.keys().collect();
    assert!(
        after.is_disjoint(&after_restart),
        "every pod was replaced again: before {after:?}, after {after_restart:?}"
    );
}

#[test]
fn deployments_get_pods_that_turn_ready_and_restart() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (root, pids) = runtime.block_on(async {
        let started = Instant::now();
        let mut lab = Lab::start(LabOptions {
            regions: 1,
            workload_controllers: true,
            ..LabOptions::default()
        })
        .await
        .expect("the lab starts");
        eprintln!(
            "lab with workload controllers up after {:?}",
            started.elapsed()
        );
        let root = lab.root_dir().to_string_lossy().into_owned();

        scenario(&mut lab).await;

        let pids = lab.pids();
        assert_eq!(
            pids.len(),
            2 + 1 + 1 + 3,
            "hub and region, workload, Prometheus, controller-manager, scheduler, KWOK"
        );
        assert!(pids.iter().all(|pid| process_alive(*pid)));
        drop(lab);
        (root, pids)
    });

    support::assert_lab_gone(&root, pids);
}
