//! The controller at scale on the lab: N rollouts of 2-3 stages across R regions, each
//! through two revisions, one in ten with a gate on the lab's Prometheus. Reports, per
//! revision and for the run:
//!
//! - controller RSS (sampled from `/proc/<pid>/status` every 200 ms: the peak, and the
//!   steady value 20 s after the last rollout completed) and CPU seconds
//!   (`/proc/<pid>/stat` utime + stime);
//! - time from creating (or changing) the rollouts to all of them Complete;
//! - p50/p99 of "revision declared -> region holds it": each region's
//!   `status.regions[].materialized.at` minus the revision's `status.history[].declaredAt`
//!   (both `metav1.Time`, so whole seconds), for every region and for the first stage's;
//!   and "stage open -> region holds it", from the previous stage's `passedAt` (gates and
//!   pause included) or the declaration for the first stage: the target. The five
//!   slowest rollouts are named on stderr;
//! - API requests per rollout per revision, hub and each region, from the apiservers'
//!   own `apiserver_request_total` (deltas, split by verb; the bench's own creates,
//!   patches and single watch are subtracted from the hub's);
//! - reconciles per second (`configrollout_reconcile_total` of the controller's
//!   `/metrics`);
//! - the largest rollout object and status (JSON bytes, as the watch delivered them).
//!
//! `make scale-bench SCALE_BENCH_ARGS="--rollouts 1000 --regions 3"` (release build).
//! `--profile-hub-secs S` also takes a CPU profile of the hub's apiserver (and its etcd,
//! one process) for the first S seconds of the second revision, written to
//! `target/scale-bench-hub-r2.pprof` (read it with `go tool pprof -top`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use configrollout::api::ConfigRollout;
use configrollout_e2e::bench::{arg, run, start_controller, team_namespaces, usage_error};
use configrollout_e2e::procstat::{clock_ticks, cpu_ticks, rss_kib};
use configrollout_e2e::{HUB, Lab, LabOptions, User};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

const NAMESPACE: &str = "scale";
const TARGET_NAMESPACE: &str = "app";
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
const STEADY_AFTER: Duration = Duration::from_secs(20);
/// Creates and patches in flight at once.
const WRITERS: usize = 16;

type BenchResult<T> = Result<T, String>;

fn main() -> std::process::ExitCode {
    let parsed = (|| {
        Ok::<_, String>((
            arg("--rollouts", 100)?,
            arg("--regions", 3)?,
            arg("--timeout-secs", 1800)?,
            arg("--profile-hub-secs", 0)?,
        ))
    })();
    let (rollouts, regions, timeout, profile_secs) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return usage_error("scale-bench", &error),
    };
    if regions < 3 || rollouts == 0 {
        return usage_error(
            "scale-bench",
            "needs --regions 3 or more and --rollouts 1 or more",
        );
    }
    let timeout = Duration::from_secs(timeout as u64);
    run(
        "scale-bench",
        bench(rollouts, regions, timeout, profile_secs),
    )
}

/// What the watch has seen of each rollout.
#[derive(Default)]
struct Seen {
    /// The latest object of each rollout.
    latest: BTreeMap<String, ConfigRollout>,
    /// When each (rollout, revision) was first seen Complete.
    complete: BTreeMap<(String, String), Instant>,
    /// The object as it was when first seen Complete, per (rollout, revision).
    at_complete: BTreeMap<(String, String), ConfigRollout>,
}

/// Request counts by verb.
type Verbs = BTreeMap<String, f64>;

struct Snapshot {
    at: Instant,
    cpu_ticks: u64,
    reconciles: f64,
    /// Per cluster (hub first), counts by verb.
    requests: Vec<(String, Verbs)>,
}

struct Phase {
    name: &'static str,
    elapsed: Duration,
    rss_peak_kib: u64,
    cpu_seconds: f64,
    reconciles_per_second: f64,
    reconciles: f64,
    /// Per cluster, requests by verb per rollout.
    per_rollout: Vec<(String, Verbs)>,
    all_regions: Vec<f64>,
    first_stage: Vec<f64>,
    /// From the region's stage opening (the previous stage passed) to the region holding
    /// the revision.
    from_open: Vec<f64>,
    largest_object: usize,
    largest_status: usize,
}

async fn bench(
    n: usize,
    region_count: usize,
    timeout: Duration,
    profile_secs: usize,
) -> BenchResult<()> {
    let apiserver_args = if profile_secs > 0 {
        vec!["--profiling=true".to_owned()]
    } else {
        Vec::new()
    };
    let lab = Lab::start(LabOptions {
        regions: region_count,
        apiserver_args,
        ..LabOptions::default()
    })
    .await
    .map_err(|e| e.to_string())?;
    let hub = lab.client(HUB, User::Admin).map_err(|e| e.to_string())?;
    team_namespaces(&lab, &[NAMESPACE], TARGET_NAMESPACE).await?;
    let mut clusters = vec![(HUB.to_owned(), hub.clone())];
    for region in lab.regions() {
        let client = lab
            .client(&region, User::Admin)
            .map_err(|e| e.to_string())?;
        clusters.push((region, client));
    }
    let lab_rss: u64 = lab.pids().iter().filter_map(|pid| rss_kib(*pid)).sum();

    // The figures are the controller's work; its gates wait no settle time, as before it
    // had one, so that runs stay comparable.
    let controller = start_controller(&lab, &["--gate-settle-time", "0s"]).await?;
    let (http, metrics_url, pid) = (&controller.http, &controller.metrics_url, controller.pid);
    let idle_rss = rss_kib(pid).unwrap_or_default();

    // RSS sampler: the peak since the last reset.
    let peak = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let peak = peak.clone();
        let sampling = sampling.clone();
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                if let Some(kib) = rss_kib(pid) {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
        })
    };

    // One watch of the rollouts, for completion times and statuses.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let rollouts: Api<ConfigRollout> = Api::namespaced(hub.clone(), NAMESPACE);
    let watch = {
        let seen = seen.clone();
        let rollouts = rollouts.clone();
        tokio::spawn(async move {
            let stream = watcher(rollouts, watcher::Config::default()).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Ok(Some(event)) = stream.try_next().await {
                let objects = match event {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => vec![o],
                    _ => vec![],
                };
                let Ok(mut seen) = seen.lock() else { return };
                for rollout in objects {
                    let status = rollout.status.clone().unwrap_or_default();
                    let complete = status.phase.as_ref().is_some_and(|p| {
                        serde_json::to_value(p)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            == Some("Complete".to_owned())
                    });
                    if complete && let Some(revision) = status.revision.clone() {
                        let key = (rollout.name_any(), revision);
                        if !seen.complete.contains_key(&key) {
                            seen.complete.insert(key.clone(), Instant::now());
                            seen.at_complete.insert(key, rollout.clone());
                        }
                    }
                    seen.latest.insert(rollout.name_any(), rollout);
                }
            }
        })
    };

    let names: Vec<String> = (0..n).map(|i| format!("s-{i:05}")).collect();
    let mut phases = Vec::new();
    for revision in ["r1", "r2"] {
        peak.store(rss_kib(pid).unwrap_or_default(), Ordering::Relaxed);
        let before = snapshot(&clusters, http, metrics_url, pid).await?;
        let phase_start = Instant::now();
        let profile = (revision == "r2" && profile_secs > 0)
            .then(|| profile_hub(&lab, profile_secs))
            .transpose()?;
        let writes = futures::stream::iter(names.iter().enumerate().map(|(i, name)| {
            let rollouts = rollouts.clone();
            async move {
                if revision == "r1" {
                    let rollout: ConfigRollout =
                        serde_saphyr::from_str(&rollout_yaml(name, i, region_count))
                            .map_err(|e| e.to_string())?;
                    rollouts
                        .create(&PostParams::default(), &rollout)
                        .await
                        .map_err(|e| format!("create {name}: {e}"))?;
                } else {
                    let patch = serde_json::json!({"spec": {"data": {"limit": "2", "extra": "y"}}});
                    rollouts
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(|e| format!("patch {name}: {e}"))?;
                }
                Ok::<_, String>(())
            }
        }))
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>();
        writes.await?;
        let writes_done = phase_start.elapsed();
        // Wait for every rollout to complete this revision.
        let mut reported = Instant::now();
        let done_at = loop {
            let (done, last) = {
                let seen = seen.lock().map_err(|e| e.to_string())?;
                let times: Vec<Instant> = names
                    .iter()
                    .filter_map(|name| {
                        seen.complete
                            .get(&(name.clone(), revision.to_owned()))
                            .copied()
                    })
                    .collect();
                (times.len(), times.into_iter().max())
            };
            if done == n {
                break last.unwrap_or_else(Instant::now);
            }
            if reported.elapsed() > Duration::from_secs(15) {
                reported = Instant::now();
                eprintln!(
                    "scale-bench: {revision}: {done} of {n} Complete after {:.0?}, controller RSS {} KiB",
                    phase_start.elapsed(),
                    rss_kib(pid).unwrap_or_default()
                );
            }
            if phase_start.elapsed() > timeout {
                sampling.store(false, Ordering::Relaxed);
                return Err(format!(
                    "{revision}: only {done} of {n} rollouts Complete after {timeout:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        if let Some(profile) = profile {
            let path = profile.await?;
            eprintln!("scale-bench: hub CPU profile in {}", path.display());
        }
        // Let the last status writes and reads land before counting.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = snapshot(&clusters, http, metrics_url, pid).await?;
        let elapsed = done_at.saturating_duration_since(phase_start);
        eprintln!(
            "scale-bench: {revision}: {n} rollouts written in {writes_done:.1?}, all Complete after {elapsed:.1?}"
        );
        let (all_regions, first_stage, from_open, largest_object, largest_status) = {
            let seen = seen.lock().map_err(|e| e.to_string())?;
            let mut all = Vec::new();
            let mut first = Vec::new();
            let mut open = Vec::new();
            let mut slowest = Vec::new();
            for name in &names {
                if let Some(rollout) = seen.at_complete.get(&(name.clone(), revision.to_owned())) {
                    let before = all.len();
                    declared_to_held(rollout, revision, &mut all, &mut first, &mut open);
                    let worst = all[before..].iter().copied().fold(0.0, f64::max);
                    slowest.push((worst, name.as_str()));
                }
            }
            slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
            let slowest: Vec<String> = slowest
                .iter()
                .take(5)
                .map(|(seconds, name)| format!("{name} {seconds} s"))
                .collect();
            eprintln!(
                "scale-bench: {revision}: slowest declared -> held: {}",
                slowest.join(", ")
            );
            let mut largest_object = 0;
            let mut largest_status = 0;
            for rollout in seen.latest.values() {
                largest_object =
                    largest_object.max(serde_json::to_vec(rollout).map_or(0, |v| v.len()));
                largest_status =
                    largest_status.max(serde_json::to_vec(&rollout.status).map_or(0, |v| v.len()));
            }
            (all, first, open, largest_object, largest_status)
        };
        // The bench's own writes, not the controller's.
        let own = if revision == "r1" { "POST" } else { "PATCH" };
        let per_rollout = after
            .requests
            .iter()
            .zip(&before.requests)
            .map(|((cluster, after), (_, before))| {
                let mut verbs = Verbs::new();
                for (verb, count) in after {
                    let mut delta = count - before.get(verb).copied().unwrap_or_default();
                    if cluster == HUB && verb == own {
                        delta -= n as f64;
                    }
                    if delta > 0.0 {
                        verbs.insert(verb.clone(), delta / n as f64);
                    }
                }
                (cluster.clone(), verbs)
            })
            .collect();
        let seconds = after.at.duration_since(before.at).as_secs_f64();
        phases.push(Phase {
            name: revision,
            elapsed,
            rss_peak_kib: peak.load(Ordering::Relaxed),
            cpu_seconds: (after.cpu_ticks - before.cpu_ticks) as f64 / clock_ticks(),
            reconciles: after.reconciles - before.reconciles,
            reconciles_per_second: (after.reconciles - before.reconciles) / seconds,
            per_rollout,
            all_regions,
            first_stage,
            from_open,
            largest_object,
            largest_status,
        });
    }
    tokio::time::sleep(STEADY_AFTER).await;
    let steady_rss = rss_kib(pid).unwrap_or_default();
    let end = snapshot(&clusters, http, metrics_url, pid).await?;
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    watch.abort();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    controller.child.stop();
    drop(lab);

    print_report(
        n,
        region_count,
        idle_rss,
        steady_rss,
        end.cpu_ticks as f64 / clock_ticks(),
        lab_rss,
        &phases,
        load.trim(),
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn print_report(
    n: usize,
    region_count: usize,
    idle_rss: u64,
    steady_rss: u64,
    total_cpu: f64,
    lab_rss: u64,
    phases: &[Phase],
    load: &str,
) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!();
    println!(
        "scale-bench: {n} rollouts x {region_count} regions (hub + {region_count} control planes, {:.0} MiB before the controller started)",
        mib(lab_rss)
    );
    println!(
        "controller RSS: idle {:.1} MiB, steady {:.1} MiB ({STEADY_AFTER:?} after the last Complete), CPU {total_cpu:.1} s over the whole process life",
        mib(idle_rss),
        mib(steady_rss)
    );
    println!("load average at the end: {load}");
    println!();
    println!(
        "| revision | all Complete after | RSS peak | per rollout (peak - idle) | CPU s | reconciles | reconciles/s | declared -> held p50 / p99 (all regions) | p50 / p99 (first stage) | stage open -> held p50 / p99 | largest object / status |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for phase in phases {
        let (p50, p99) = percentiles(&phase.all_regions);
        let (f50, f99) = percentiles(&phase.first_stage);
        let (o50, o99) = percentiles(&phase.from_open);
        println!(
            "| {} | {:.1} s | {:.1} MiB | {:.1} KiB | {:.1} | {:.0} | {:.1} | {p50:.0} s / {p99:.0} s (n={}) | {f50:.0} s / {f99:.0} s (n={}) | {o50:.0} s / {o99:.0} s | {} / {} B |",
            phase.name,
            phase.elapsed.as_secs_f64(),
            mib(phase.rss_peak_kib),
            phase.rss_peak_kib.saturating_sub(idle_rss) as f64 / n as f64,
            phase.cpu_seconds,
            phase.reconciles,
            phase.reconciles_per_second,
            phase.all_regions.len(),
            phase.first_stage.len(),
            phase.largest_object,
            phase.largest_status,
        );
    }
    println!();
    println!("API requests per rollout (apiserver_request_total deltas, by verb):");
    println!();
    println!("| revision | cluster | total | by verb |");
    println!("|---|---|---:|---|");
    for phase in phases {
        let mut region_totals = Vec::new();
        for (cluster, verbs) in &phase.per_rollout {
            let total: f64 = verbs.values().sum();
            if cluster != HUB {
                region_totals.push(total);
            }
            let detail: Vec<String> = verbs
                .iter()
                .map(|(verb, count)| format!("{verb} {count:.2}"))
                .collect();
            println!(
                "| {} | {cluster} | {total:.2} | {} |",
                phase.name,
                detail.join(", ")
            );
        }
        let mean = region_totals.iter().sum::<f64>() / region_totals.len().max(1) as f64;
        println!("| {} | mean per region | {mean:.2} | |", phase.name);
    }
}

fn percentiles(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Seconds from the revision's declaration to each region's materialised mark.
/// Adds, for each region holding `revision`, the seconds from its declaration to `all`
/// (and to `first` for the first stage's regions), and from its stage's opening to
/// `from_open`. A stage opens when the previous one passed (its gates and pause
/// included); the first one when the revision is declared.
fn declared_to_held(
    rollout: &ConfigRollout,
    revision: &str,
    all: &mut Vec<f64>,
    first: &mut Vec<f64>,
    from_open: &mut Vec<f64>,
) {
    let Some(status) = &rollout.status else {
        return;
    };
    let Some(declared) = status
        .history
        .iter()
        .find(|record| record.name == revision)
        .map(|record| record.declared_at.0.as_millisecond())
    else {
        return;
    };
    let stages = &rollout.spec.stages;
    let first_stage = stages.first().map(|stage| stage.name.clone());
    let opened = |stage: &str| {
        let index = stages.iter().position(|s| s.name == stage)?;
        if index == 0 {
            return Some(declared);
        }
        let previous = &stages[index - 1].name;
        let passed = status
            .stages
            .iter()
            .find(|s| &s.name == previous)?
            .passed_at
            .as_ref()?;
        Some(passed.0.as_millisecond())
    };
    for region in &status.regions {
        let Some(mark) = &region.materialized else {
            continue;
        };
        if mark.revision != revision {
            continue;
        }
        let held = mark.at.0.as_millisecond();
        let seconds = (held - declared) as f64 / 1000.0;
        all.push(seconds);
        if region.stage.is_some() && region.stage == first_stage {
            first.push(seconds);
        }
        if let Some(open) = region.stage.as_deref().and_then(opened) {
            from_open.push((held - open).max(0) as f64 / 1000.0);
        }
    }
}

async fn snapshot(
    clusters: &[(String, Client)],
    http: &reqwest::Client,
    metrics_url: &str,
    pid: u32,
) -> BenchResult<Snapshot> {
    let mut requests = Vec::new();
    for (cluster, client) in clusters {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let text = client
            .request_text(request)
            .await
            .map_err(|e| format!("{cluster} /metrics: {e}"))?;
        requests.push((cluster.clone(), request_counts(&text)));
    }
    let text = http
        .get(metrics_url)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    let reconciles = text
        .lines()
        .filter(|line| line.starts_with("configrollout_reconcile_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    Ok(Snapshot {
        at: Instant::now(),
        cpu_ticks: cpu_ticks(pid).unwrap_or_default(),
        reconciles,
        requests,
    })
}

/// `apiserver_request_total` summed by verb, for requests on resources (not `/metrics`,
/// `/version` or health checks).
fn request_counts(text: &str) -> Verbs {
    let mut verbs = Verbs::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split("\",")
                .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
        };
        if label("resource").unwrap_or_default().is_empty() {
            continue;
        }
        let (Some(verb), Ok(value)) = (label("verb"), value.trim().parse::<f64>()) else {
            continue;
        };
        *verbs.entry(verb).or_default() += value;
    }
    verbs
}

/// Rollout `i`: two stages (canary region-1, then the rest) when `i` is even, three
/// (region-1, region-2, the rest) when odd; every tenth gated on the lab's Prometheus.
/// Starts a CPU profile of the hub's control plane for `secs` seconds; the file it is
/// written to once done.
fn profile_hub(
    lab: &Lab,
    secs: usize,
) -> BenchResult<impl Future<Output = BenchResult<std::path::PathBuf>>> {
    let kubeconfig = lab
        .kubeconfig(HUB, User::Admin)
        .map_err(|e| e.to_string())?;
    let path = configrollout_e2e::repository_root()
        .join("target")
        .join("scale-bench-hub-r2.pprof");
    let out = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut child = tokio::process::Command::new(lab.kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("get")
        .arg("--raw")
        .arg(format!("/debug/pprof/profile?seconds={secs}"))
        .arg(format!("--request-timeout={}s", secs + 30))
        .stdout(out)
        .spawn()
        .map_err(|e| format!("kubectl: {e}"))?;
    Ok(async move {
        let status = child.wait().await.map_err(|e| format!("kubectl: {e}"))?;
        if !status.success() {
            return Err(format!("hub profile: kubectl exited {status}"));
        }
        Ok(path)
    })
}

fn rollout_yaml(name: &str, i: usize, region_count: usize) -> String {
    let region = |k: usize| format!("region-{k}");
    let rest = |from: usize| {
        (from..=region_count)
            .map(region)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let gated = i.is_multiple_of(10);
    let canary_gates = if gated { ", gates: [healthy]" } else { "" };
    let gates = if gated {
        "  gates:\n    - {name: healthy, query: 'vector(0)', condition: result < 1, interval: 1s, count: 1}\n"
    } else {
        ""
    };
    let stages = if i.is_multiple_of(2) {
        format!(
            "    - {{name: canary, regions: {{names: [region-1]}}{canary_gates}}}\n    - {{name: prod, regions: {{names: [{}]}}, maxParallel: {}}}\n",
            rest(2),
            region_count - 1
        )
    } else {
        format!(
            "    - {{name: canary, regions: {{names: [region-1]}}{canary_gates}}}\n    - {{name: early, regions: {{names: [region-2]}}}}\n    - {{name: prod, regions: {{names: [{}]}}, maxParallel: {}}}\n",
            rest(3),
            region_count - 2
        )
    };
    format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata: {{name: {name}, namespace: {NAMESPACE}}}\nspec:\n  target: {{namespace: {TARGET_NAMESPACE}, name: {name}}}\n  data: {{limit: \"1\", timeout_ms: \"250\", mode: fast}}\n{gates}  stages:\n{stages}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollouts_parse() {
        for i in 0..4 {
            let _: ConfigRollout = serde_saphyr::from_str(&rollout_yaml("s-1", i * 5, 10)).unwrap();
        }
    }

    #[test]
    fn request_counts_sum_resource_requests_by_verb() {
        let text = "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1\"} 3\napiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"\",scope=\"\",subresource=\"/metrics\",verb=\"GET\",version=\"\"} 7\napiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"configmaps\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1\"} 2\n";
        assert_eq!(request_counts(text), Verbs::from([("GET".to_owned(), 5.0)]));
    }
}
