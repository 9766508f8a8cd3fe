//! Pods without a kubelet, for one region: upstream kube-controller-manager (only the
//! workload controllers and the job controller) and kube-scheduler of the apiserver's
//! release, and KWOK, which plays the kubelet of one fake Node so that scheduled pods
//! turn Running and Ready, and a Job's pods complete (or fail, see `lab-kwok-stages`).
//!
//! All three run through `lab-exec`, so they stop with the lab like Prometheus; they talk
//! to the region only through its admin kubeconfig and serve nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::LabError;
use crate::gobuild::{
    EXEC, GoPrograms, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK, KWOK_STAGES,
};
use crate::manifests::FIELD_MANAGER;
use crate::process::{LabProcess, STOP_GRACE, log_tail};

/// The controllers kube-controller-manager runs: what Deployments, StatefulSets and
/// DaemonSets need to get pods, `job-controller` for the Jobs of job gates (KWOK's
/// stages complete their pods), and `serviceaccount-controller` because the apiserver's
/// ServiceAccount admission refuses pods while their namespace has no `default`
/// ServiceAccount. No garbage collector: deleting a Deployment leaves its ReplicaSets.
/// No `ttl-after-finished-controller` either: a finished Job stays (its foreground
/// delete would wait for the garbage collector anyway).
pub const CONTROLLERS: &str = "deployment-controller,replicaset-controller,statefulset-controller,daemonset-controller,job-controller,serviceaccount-controller";

/// Annotation (and value) of the nodes KWOK manages; it touches no other node.
pub const KWOK_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// How long the fake node and the `default` ServiceAccount may take to appear. Generous:
/// three Go programs start at once beside the apiservers on two cores.
const READY_DEADLINE: Duration = Duration::from_secs(120);

/// Name of the one fake node of a region: `kwok-<region>`.
pub fn fake_node_name(region: &str) -> String {
    format!("kwok-{region}")
}

/// The three processes of one region, running or stopped.
#[derive(Debug)]
pub(crate) struct WorkloadControllers {
    region: String,
    dir: PathBuf,
    processes: Vec<LabProcess>,
}

impl WorkloadControllers {
    /// A stopped set for `region`; logs and KWOK's stages go to `dir` (the region's).
    pub(crate) fn new(region: &str, dir: &Path) -> Self {
        Self {
            region: region.to_string(),
            dir: dir.to_path_buf(),
            processes: Vec::new(),
        }
    }

    /// Starts the three processes against `kubeconfig` (the region must be up: its
    /// kubeconfig is written once it is ready).
    pub(crate) fn start(
        &mut self,
        programs: &GoPrograms,
        kubeconfig: &Path,
    ) -> Result<(), LabError> {
        if !self.processes.is_empty() {
            return Ok(());
        }
        let stages = self.dir.join("kwok-stages.yaml");
        let output = Command::new(programs.path(KWOK_STAGES))
            .arg(&stages)
            .output()
            .map_err(|e| LabError::io("run lab-kwok-stages", e))?;
        if !output.status.success() {
            return Err(LabError::BadResponse {
                context: "write KWOK's stages".into(),
                detail: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        let kubeconfig_flag = format!("--kubeconfig={}", kubeconfig.display());
        let controller_manager = [
            kubeconfig_flag.clone(),
            format!("--controllers={CONTROLLERS}"),
            "--leader-elect=false".into(),
            // Nothing scrapes or probes it; a port would only be one more to collide.
            "--secure-port=0".into(),
            "--use-service-account-credentials=false".into(),
            "--v=1".into(),
        ];
        let scheduler = [
            kubeconfig_flag.clone(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--v=1".into(),
        ];
        let kwok = [
            kubeconfig_flag,
            format!("--config={}", stages.display()),
            format!(
                "--manage-nodes-with-annotation-selector={}={}",
                KWOK_NODE_ANNOTATION.0, KWOK_NODE_ANNOTATION.1
            ),
            // Node and pod IPs are only written into status, but nobody following one
            // must ever reach past loopback.
            "--node-ip=127.0.0.1".into(),
            "--cidr=127.1.0.0/16".into(),
        ];
        let started: Result<Vec<LabProcess>, LabError> = [
            (KUBE_CONTROLLER_MANAGER, &controller_manager[..]),
            (KUBE_SCHEDULER, &scheduler[..]),
            (KWOK, &kwok[..]),
        ]
        .into_iter()
        .map(|(program, args)| {
            let mut command = Command::new(programs.path(EXEC));
            command.arg("--").arg(programs.path(program)).args(args);
            LabProcess::spawn(
                format!("{program} of {}", self.region),
                command,
                &self.dir.join(format!("{program}.log")),
            )
        })
        .collect();
        // On a failed spawn the ones already started are dropped, which stops them.
        self.processes = started?;
        Ok(())
    }

    /// Creates the region's fake node (idempotent) and waits until KWOK reports it
    /// Ready and kube-controller-manager has made the `default` ServiceAccount.
    pub(crate) async fn wait_ready(&mut self, client: &kube::Client) -> Result<(), LabError> {
        let nodes: Api<Node> = Api::all(client.clone());
        let name = fake_node_name(&self.region);
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {
                    KWOK_NODE_ANNOTATION.0: KWOK_NODE_ANNOTATION.1,
                    "node.alpha.kubernetes.io/ttl": "0",
                },
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
        }))
        .map_err(|e| LabError::BadResponse {
            context: "build the fake Node".into(),
            detail: e.to_string(),
        })?;
        nodes
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&node),
            )
            .await?;
        // The TaintNodesByCondition admission gives every new node the not-ready taint,
        // and only the node lifecycle controller (not run: it would want heartbeats KWOK
        // sends only every 20-45 s) takes it away. Pods of users tolerate no taint.
        nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "taints": null } })),
            )
            .await?;

        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let started = Instant::now();
        loop {
            for process in &mut self.processes {
                process.check_running()?;
            }
            let node_ready = nodes.get_opt(&name).await?.is_some_and(|n| {
                n.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            let account = accounts.get_opt("default").await?.is_some();
            if node_ready && account {
                return Ok(());
            }
            if started.elapsed() > READY_DEADLINE {
                return Err(LabError::NotReady {
                    what: format!("workload controllers of {}", self.region),
                    seconds: READY_DEADLINE.as_secs(),
                    detail: format!(
                        "node {name} ready: {node_ready}, default ServiceAccount: {account}\n\
                         kwok:\n{}\nkube-controller-manager:\n{}",
                        log_tail(&self.dir.join(format!("{KWOK}.log")), 10),
                        log_tail(&self.dir.join(format!("{KUBE_CONTROLLER_MANAGER}.log")), 10),
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Asks every process to stop without waiting.
    pub(crate) fn request_stop(&mut self) {
        for process in &mut self.processes {
            process.request_stop();
        }
    }

    /// Stops and reaps every process.
    pub(crate) fn stop(&mut self) {
        self.request_stop();
        for mut process in self.processes.drain(..) {
            process.stop(STOP_GRACE);
        }
    }

    /// Pids of the running processes (their `lab-exec` wrappers).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(LabProcess::pid).collect()
    }

    /// Log files of the three programs, by program name.
    pub(crate) fn logs(&self) -> Vec<(&'static str, PathBuf)> {
        [KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK]
            .into_iter()
            .map(|program| (program, self.dir.join(format!("{program}.log"))))
            .collect()
    }
}
