//! End-to-end figures of the controller on the lab (hub + 3 regions):
//!
//! - approval latency: from creating a StageApproval to the approved stage's first
//!   region holding the revision (read in the region itself);
//! - API writes per region per revision: resourceVersion changes of the target and its
//!   companion, counted by watches started before the rollout.
//!
//! `make controller-bench` (or `cargo run -p configrollout-e2e --bin controller-bench --
//! --runs 5`). Prints a table; BENCHMARKS.md records a run.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, StageApproval, StageApprovalSpec};
use configrollout_e2e::{HUB, Lab, LabOptions, User};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

const NAMESPACE: &str = "bench";
const TARGET_NAMESPACE: &str = "app";
const DEADLINE: Duration = Duration::from_secs(120);

type BenchResult<T> = Result<T, String>;

fn main() -> std::process::ExitCode {
    let runs = std::env::args()
        .skip_while(|arg| arg != "--runs")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(5_usize);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("controller-bench: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(runs)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("controller-bench failed: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn bench(runs: usize) -> BenchResult<()> {
    let lab = Lab::start(LabOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let hub = lab.client(HUB, User::Admin).map_err(|e| e.to_string())?;
    lab.create_namespace(HUB, NAMESPACE)
        .await
        .map_err(|e| e.to_string())?;
    let mut regions = BTreeMap::new();
    for region in lab.regions() {
        lab.create_namespace(&region, TARGET_NAMESPACE)
            .await
            .map_err(|e| e.to_string())?;
        let client = lab
            .client(&region, User::Admin)
            .map_err(|e| e.to_string())?;
        regions.insert(region, client);
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let controller = lab
        .start_controller(
            &me.with_file_name("lab-controller"),
            "controller",
            &["--probe-addr", "127.0.0.1:0"].map(OsString::from),
        )
        .map_err(|e| e.to_string())?;
    let rollouts: Api<ConfigRollout> = Api::namespaced(hub.clone(), NAMESPACE);
    let approvals: Api<StageApproval> = Api::namespaced(
        lab.client(HUB, User::ApproverAlice)
            .map_err(|e| e.to_string())?,
        NAMESPACE,
    );

    let mut latencies = Vec::new();
    let mut writes_first = Vec::new();
    let mut writes_next = Vec::new();
    for run in 0..runs {
        let name = format!("bench-{run}");
        let counters: Vec<WriteCounter> = regions
            .values()
            .map(|client| WriteCounter::start(client.clone(), &name))
            .collect();
        let rollout: ConfigRollout =
            serde_yaml::from_str(&rollout_yaml(&name)).map_err(|e| e.to_string())?;
        rollouts
            .create(&PostParams::default(), &rollout)
            .await
            .map_err(|e| e.to_string())?;
        for revision in ["r1", "r2"] {
            if revision == "r2" {
                let patch = serde_json::json!({"spec": {"data": {"limit": "2", "extra": "y"}}});
                rollouts
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            wait_phase(&rollouts, &name, revision, "AwaitingApproval").await?;
            let approved_at = Instant::now();
            approvals
                .create(&PostParams::default(), &approval(&name, revision))
                .await
                .map_err(|e| e.to_string())?;
            wait_materialized(&regions["region-2"], &name, revision).await?;
            latencies.push(approved_at.elapsed());
            wait_phase(&rollouts, &name, revision, "Complete").await?;
            // Let the watches catch the last events.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let total: usize = counters.iter().map(WriteCounter::take).sum();
            let per_region = total as f64 / counters.len() as f64;
            if revision == "r1" {
                writes_first.push(per_region);
            } else {
                writes_next.push(per_region);
            }
        }
    }
    controller.stop();
    drop(lab);

    latencies.sort();
    let median = latencies[latencies.len() / 2];
    println!("runs: {runs} rollouts x 2 revisions, hub + 3 regions");
    println!(
        "approval -> first region of the approved stage materialised: median {:?}, min {:?}, max {:?} (n={})",
        median,
        latencies.first().copied().unwrap_or_default(),
        latencies.last().copied().unwrap_or_default(),
        latencies.len()
    );
    println!(
        "API writes per region, first revision (target + companion created): {:?}",
        writes_first
    );
    println!(
        "API writes per region, later revision (companion + target replaced): {:?}",
        writes_next
    );
    Ok(())
}

fn rollout_yaml(name: &str) -> String {
    format!(
        r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  target: {{namespace: {TARGET_NAMESPACE}, name: {name}}}
  data: {{limit: "1"}}
  stages:
    - {{name: canary, regions: {{names: [region-1]}}}}
    - {{name: prod, regions: {{names: [region-2, region-3]}}, maxParallel: 2, approval: Required}}
"#
    )
}

fn approval(rollout: &str, revision: &str) -> StageApproval {
    StageApproval {
        metadata: ObjectMeta {
            name: Some(format!("{rollout}-prod-{revision}")),
            ..ObjectMeta::default()
        },
        spec: StageApprovalSpec {
            rollout: rollout.to_owned(),
            stage: "prod".to_owned(),
            revision: revision.to_owned(),
            approver: User::ApproverAlice.name().to_owned(),
            reason: None,
        },
    }
}

async fn wait_phase(
    rollouts: &Api<ConfigRollout>,
    name: &str,
    revision: &str,
    phase: &str,
) -> BenchResult<()> {
    let started = Instant::now();
    loop {
        let rollout = rollouts.get(name).await.map_err(|e| e.to_string())?;
        let status = rollout.status.unwrap_or_default();
        let current = status
            .phase
            .as_ref()
            .and_then(|p| serde_json::to_value(p).ok())
            .and_then(|v| v.as_str().map(str::to_owned));
        if status.revision.as_deref() == Some(revision) && current.as_deref() == Some(phase) {
            return Ok(());
        }
        if started.elapsed() > DEADLINE {
            return Err(format!(
                "{name} {revision}: not {phase} within {DEADLINE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_materialized(region: &Client, name: &str, revision: &str) -> BenchResult<()> {
    let api: Api<ConfigMap> = Api::namespaced(region.clone(), TARGET_NAMESPACE);
    let started = Instant::now();
    loop {
        let holds = api
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?
            .is_some_and(|cm| {
                cm.annotations()
                    .get("configrollout.dev/revision")
                    .map(String::as_str)
                    == Some(revision)
            });
        if holds {
            return Ok(());
        }
        if started.elapsed() > DEADLINE {
            return Err(format!("{name} {revision}: region-2 not materialised"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Counts distinct resourceVersions of a target and its companion in one region.
struct WriteCounter {
    task: tokio::task::JoinHandle<()>,
    versions: Arc<Mutex<BTreeSet<String>>>,
}

impl WriteCounter {
    fn start(client: Client, target: &str) -> Self {
        let api: Api<ConfigMap> = Api::namespaced(client, TARGET_NAMESPACE);
        let names = [target.to_owned(), format!("{target}.configrollout-state")];
        let versions = Arc::new(Mutex::new(BTreeSet::new()));
        let seen = versions.clone();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(cm)) = event
                    && names.contains(&cm.name_any())
                    && let Ok(mut seen) = seen.lock()
                {
                    seen.insert(cm.resource_version().unwrap_or_default());
                }
            }
        });
        Self { task, versions }
    }

    /// Writes seen since the last call.
    fn take(&self) -> usize {
        self.versions
            .lock()
            .map(|mut versions| std::mem::take(&mut *versions).len())
            .unwrap_or_default()
    }
}

impl Drop for WriteCounter {
    fn drop(&mut self) {
        self.task.abort();
    }
}
