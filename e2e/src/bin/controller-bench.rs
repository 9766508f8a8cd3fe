//! End-to-end figures of the controller on the lab (hub + 3 regions):
//!
//! - approval latency: from creating a StageApproval to the approved stage's first
//!   region holding the revision (read in the region itself);
//! - API writes per region per revision: resourceVersion changes of the target and its
//!   companion, counted by watches started before the rollout;
//! - rollback latency: a revision with a bad value fails the canary's error-rate gate
//!   (the lab's workloads load it and fail requests); from the first failed sample (its
//!   time in status) to the last canary region holding the previous value again (polled
//!   in the regions);
//! - gate sampling: the latency of one gate query through the controller's Prometheus
//!   provider against the lab's Prometheus.
//!
//! `make controller-bench` (or `cargo run -p configrollout-e2e --bin controller-bench --
//! --runs 5`). Prints a table; BENCHMARKS.md records a run.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, StageApproval, StageApprovalSpec};
use configrollout::engine::tenancy::ALLOWED_TARGET_NAMESPACES;
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
    // As the platform admin: the team's rollouts may write the target namespace.
    lab.annotate_namespace(
        HUB,
        NAMESPACE,
        &[(ALLOWED_TARGET_NAMESPACES, TARGET_NAMESPACE)],
    )
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
    // Approvals count only where the apiserver binds the approver to its creator.
    lab.install_approver_policy()
        .await
        .map_err(|e| e.to_string())?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let controller = lab
        .start_controller(
            &me.with_file_name("lab-controller"),
            "controller",
            &[
                "--probe-addr",
                "127.0.0.1:0",
                "--prometheus-url",
                &lab.prometheus_url(),
                // As long as the gate's initialDelay: the lab's workloads load a value
                // within a second of its write, and the figures stay comparable.
                "--gate-settle-time",
                "2s",
            ]
            .map(OsString::from),
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
        let mut counters = Vec::new();
        for client in regions.values() {
            counters.push(WriteCounter::start(client.clone(), &name).await?);
        }
        let rollout: ConfigRollout =
            serde_saphyr::from_str(&rollout_yaml(&name)).map_err(|e| e.to_string())?;
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
            let current = rollouts.get(&name).await.map_err(|e| e.to_string())?;
            let approved_at = Instant::now();
            approvals
                .create(&PostParams::default(), &approval(&current, revision)?)
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
    let mut rollbacks = Vec::new();
    for run in 0..runs {
        rollbacks.push(rollback_latency(&lab, &rollouts, &regions, run).await?);
    }
    let sampling = sampling_latency(&lab, runs * 20).await;
    controller.stop();
    drop(lab);

    rollbacks.sort();
    println!(
        "first failed gate sample -> rollback written in both canary regions: median {:?}, min {:?}, max {:?} (n={})",
        rollbacks[rollbacks.len() / 2],
        rollbacks.first().copied().unwrap_or_default(),
        rollbacks.last().copied().unwrap_or_default(),
        rollbacks.len()
    );
    let mut sampling = sampling?;
    sampling.sort();
    println!(
        "one gate sample (PromQL instant query via the controller's provider): median {:?}, p90 {:?}, max {:?} (n={})",
        sampling[sampling.len() / 2],
        sampling[sampling.len() * 9 / 10],
        sampling.last().copied().unwrap_or_default(),
        sampling.len()
    );
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

const GOOD_TIMEOUT: &str = "250";
const BAD_TIMEOUT: &str = "0";
const ERROR_RATIO: &str = "sum(rate(configrollout_lab_errors_total{region=\"{{region}}\"}[5s])) / sum(rate(configrollout_lab_requests_total{region=\"{{region}}\"}[5s]))";

/// A rollout whose canary (region-1 and region-2) is gated on the error ratio and rolls
/// back on failure.
fn gated_yaml(name: &str) -> String {
    format!(
        r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  target: {{namespace: {TARGET_NAMESPACE}, name: {name}}}
  onFailure: Rollback
  data: {{timeout_ms: "{GOOD_TIMEOUT}"}}
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      condition: result < 0.1
      interval: 1s
      initialDelay: 2s
      count: 2
  stages:
    - {{name: canary, regions: {{names: [region-1, region-2]}}, maxParallel: 2, gates: [errors]}}
    - {{name: prod, regions: {{names: [region-3]}}}}
"#
    )
}

/// One bad revision caught in the canary: from its first failed sample to the canary
/// regions holding the previous value again.
async fn rollback_latency(
    lab: &Lab,
    rollouts: &Api<ConfigRollout>,
    regions: &BTreeMap<String, Client>,
    run: usize,
) -> BenchResult<Duration> {
    let name = format!("rollback-{run}");
    // The previous run's bad value must have left the gate's rate window, or this run's
    // good revision fails on it.
    settle(lab).await?;
    lab.watch_config_everywhere(TARGET_NAMESPACE, &name)
        .await
        .map_err(|e| e.to_string())?;
    let rollout: ConfigRollout =
        serde_saphyr::from_str(&gated_yaml(&name)).map_err(|e| e.to_string())?;
    rollouts
        .create(&PostParams::default(), &rollout)
        .await
        .map_err(|e| e.to_string())?;
    wait_phase(rollouts, &name, "r1", "Complete").await?;

    let restored: Vec<_> = ["region-1", "region-2"]
        .iter()
        .map(|region| tokio::spawn(restored_at(regions[*region].clone(), name.clone())))
        .collect();
    let patch = serde_json::json!({"spec": {"data": {"timeout_ms": BAD_TIMEOUT}}});
    rollouts
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| e.to_string())?;
    wait_phase(rollouts, &name, "r2", "RolledBack").await?;
    let mut last_restored = std::time::SystemTime::UNIX_EPOCH;
    for task in restored {
        let at = task.await.map_err(|e| e.to_string())??;
        last_restored = last_restored.max(at);
    }

    let rollout = rollouts.get(&name).await.map_err(|e| e.to_string())?;
    let first_failed_ms = rollout
        .status
        .iter()
        .flat_map(|status| &status.stages)
        .flat_map(|stage| &stage.gates)
        .flat_map(|gate| &gate.samples)
        .filter(|sample| sample.verdict == configrollout::api::SampleVerdict::Failed)
        .map(|sample| sample.at.0.as_millisecond())
        .min()
        .ok_or_else(|| format!("{name}: no failed sample in status"))?;
    let restored_ms = last_restored
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_millis();
    let first_failed_ms = u128::try_from(first_failed_ms).map_err(|e| e.to_string())?;
    Ok(Duration::from_millis(
        u64::try_from(restored_ms.saturating_sub(first_failed_ms)).unwrap_or(u64::MAX),
    ))
}

/// Waits until the canary regions' error ratio is back to nothing.
async fn settle(lab: &Lab) -> BenchResult<()> {
    let started = Instant::now();
    for region in ["region-1", "region-2"] {
        let query = ERROR_RATIO.replace("{{region}}", region);
        loop {
            let samples = lab
                .query_prometheus(&query)
                .await
                .map_err(|e| e.to_string())?;
            if samples.first().is_some_and(|sample| sample.value < 0.01) {
                break;
            }
            if started.elapsed() > DEADLINE {
                return Err(format!("{region}: error ratio did not settle"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(())
}

/// When the region's target first holds the good value again after holding the bad one.
async fn restored_at(region: Client, name: String) -> BenchResult<std::time::SystemTime> {
    let api: Api<ConfigMap> = Api::namespaced(region, TARGET_NAMESPACE);
    let started = Instant::now();
    let mut saw_bad = false;
    loop {
        let timeout = api
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
            .and_then(|cm| cm.data?.get("timeout_ms").cloned());
        match timeout.as_deref() {
            Some(BAD_TIMEOUT) => saw_bad = true,
            Some(GOOD_TIMEOUT) if saw_bad => return Ok(std::time::SystemTime::now()),
            _ => {}
        }
        if started.elapsed() > DEADLINE {
            return Err(format!("{name}: not restored within {DEADLINE:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Latency of `n` gate samples through the controller's own provider.
async fn sampling_latency(lab: &Lab, n: usize) -> BenchResult<Vec<Duration>> {
    use configrollout::gates::GateProvider;
    use configrollout::gates::SampleSource;
    use configrollout::prometheus::{PrometheusProvider, ResponseLimits};
    let http = configrollout::prometheus::http_client(None).map_err(|e| e.to_string())?;
    let provider =
        PrometheusProvider::new(http, Some(lab.prometheus_url()), ResponseLimits::default());
    let query = ERROR_RATIO.replace("{{region}}", "region-1");
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let result = provider
            .sample(
                SampleSource {
                    region: Some("region-1"),
                    ..SampleSource::default()
                },
                &query,
            )
            .await;
        latencies.push(started.elapsed());
        if let configrollout::gates::QueryResult::Error(error) = result.result {
            return Err(format!("gate sample failed: {error}"));
        }
    }
    Ok(latencies)
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

/// The approval of stage `prod` of the revision `rollout`'s status shows, by alice.
fn approval(rollout: &ConfigRollout, revision: &str) -> BenchResult<StageApproval> {
    let spec =
        StageApprovalSpec::for_current_revision(rollout, "prod", User::ApproverAlice.name(), None)
            .ok_or("the rollout's status names no revision to approve")?;
    Ok(StageApproval {
        metadata: ObjectMeta {
            name: Some(format!("{}-prod-{revision}", spec.rollout)),
            ..ObjectMeta::default()
        },
        spec,
    })
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
    /// Starts counting; returns once the watch is established, so that no write made
    /// afterwards is folded into the watch's initial listing.
    async fn start(client: Client, target: &str) -> BenchResult<Self> {
        let api: Api<ConfigMap> = Api::namespaced(client, TARGET_NAMESPACE);
        let names = [target.to_owned(), format!("{target}.configrollout-state")];
        let versions = Arc::new(Mutex::new(BTreeSet::new()));
        let seen = versions.clone();
        let (established, watching) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut established = Some(established);
            let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(established) = established.take() {
                            let _ = established.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(cm)) if names.contains(&cm.name_any()) => {
                        if let Ok(mut seen) = seen.lock() {
                            seen.insert(cm.resource_version().unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
        });
        tokio::time::timeout(DEADLINE, watching)
            .await
            .map_err(|_| format!("watch of {target} not established within {DEADLINE:?}"))?
            .map_err(|_| format!("watch of {target} ended before it was established"))?;
        Ok(Self { task, versions })
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
