//! Noisy neighbours on the lab: one namespace with N rollouts whose gates sample every
//! second for as long as the run lasts, against single rollouts of another namespace.
//! Reports the quiet rollouts' time from create to Complete with no neighbours (idle)
//! and under the neighbours, and, while the neighbours run, the controller's CPU
//! seconds per second, status patches, gate samples, reconciles and reconciles deferred
//! for the namespace share per second.
//!
//! With `--frozen N` the neighbours are instead N rollouts of region-2 whose apiserver is
//! frozen (SIGSTOP: it accepts connections and never answers) just before each of them is
//! given a new revision; the quiet rollouts go to region-1, timed once the controller's
//! region probe has found region-2 unreachable.
//!
//! `make noisy-bench NOISY_BENCH_ARGS="--noisy 500"` or `NOISY_BENCH_ARGS="--frozen 40"`
//! (release build; hub + 1 or 2 regions and Prometheus).

use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, Region};
use configrollout_e2e::bench::{arg, run, start_controller, team_namespaces, usage_error};
use configrollout_e2e::procstat::{clock_ticks, cpu_ticks};
use configrollout_e2e::{HUB, Lab, LabOptions, User};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

const NOISY: &str = "noisy";
const QUIET: &str = "quiet";
const TARGET_NAMESPACE: &str = "app";
/// Creates in flight at once.
const WRITERS: usize = 16;

type BenchResult<T> = Result<T, String>;

fn main() -> std::process::ExitCode {
    let parsed = (|| {
        Ok::<_, String>((
            arg("--noisy", 500)?,
            arg("--runs", 5)?,
            arg("--warmup-secs", 30)?,
            arg("--frozen", 0)?,
        ))
    })();
    let (noisy, runs, warmup, frozen) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return usage_error("noisy-bench", &error),
    };
    let neighbours = if frozen > 0 {
        Neighbours::FrozenRegion(frozen)
    } else {
        Neighbours::Sampling(noisy)
    };
    let warmup = Duration::from_secs(warmup as u64);
    run("noisy-bench", bench(neighbours, runs.max(1), warmup))
}

/// What the quiet rollouts compete with.
#[derive(Debug, Clone, Copy)]
enum Neighbours {
    /// This many rollouts whose gates sample every second.
    Sampling(usize),
    /// This many rollouts publishing into a region whose apiserver hangs.
    FrozenRegion(usize),
}

/// Waits until the controller's region probe records `region` as unreachable (it probes
/// every 15 s, each probe waiting out its timeout).
async fn wait_probed_unreachable(hub: &kube::Client, region: &str) -> BenchResult<()> {
    let regions: Api<Region> = Api::all(hub.clone());
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        let unreachable = regions
            .get(region)
            .await
            .map_err(|e| format!("read {region}: {e}"))?
            .status
            .and_then(|status| status.reachable)
            == Some(false);
        if unreachable {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!(
        "the probe did not find {region} unreachable within 90s"
    ))
}

/// The controller's counters at one moment.
struct Counters {
    at: Instant,
    cpu_ticks: u64,
    status_patches: f64,
    gate_samples: f64,
    reconciles: f64,
    deferred: f64,
}

async fn bench(neighbours: Neighbours, runs: usize, warmup: Duration) -> BenchResult<()> {
    let (count, regions) = match neighbours {
        Neighbours::Sampling(count) => (count, 1),
        Neighbours::FrozenRegion(count) => (count, 2),
    };
    let lab = Lab::start(LabOptions {
        regions,
        ..LabOptions::default()
    })
    .await
    .map_err(|e| e.to_string())?;
    let hub = lab.client(HUB, User::Admin).map_err(|e| e.to_string())?;
    team_namespaces(&lab, &[NOISY, QUIET], TARGET_NAMESPACE).await?;
    let controller = start_controller(&lab, &["--gate-settle-time", "0s"]).await?;
    let (http, metrics_url, pid) = (&controller.http, &controller.metrics_url, controller.pid);

    let quiet: Api<ConfigRollout> = Api::namespaced(hub.clone(), QUIET);
    let idle = time_quiet_rollouts(&quiet, "idle", runs).await?;
    eprintln!("noisy-bench: idle: {idle:?}");

    let noisy: Api<ConfigRollout> = Api::namespaced(hub.clone(), NOISY);
    let names: Vec<String> = (0..count).map(|i| format!("n-{i:05}")).collect();
    let creating = Instant::now();
    let sampling = matches!(neighbours, Neighbours::Sampling(_));
    let region = if sampling { "region-1" } else { "region-2" };
    for_each_neighbour(&names, |name| {
        let noisy = noisy.clone();
        async move {
            let rollout = rollout(NOISY, &name, region, sampling)?;
            noisy
                .create(&PostParams::default(), &rollout)
                .await
                .map_err(|e| format!("create {name}: {e}"))?;
            Ok(())
        }
    })
    .await?;
    eprintln!(
        "noisy-bench: {count} neighbours created in {:.1?}",
        creating.elapsed()
    );
    let frozen = if sampling {
        eprintln!("noisy-bench: {warmup:?} for them to start sampling");
        tokio::time::sleep(warmup).await;
        None
    } else {
        wait_all_complete(&noisy, count).await?;
        let pid = lab
            .region_pid("region-2")
            .map_err(|e| e.to_string())?
            .ok_or("region-2 does not run")?;
        signal(pid, "-STOP")?;
        for_each_neighbour(&names, |name| {
            let noisy = noisy.clone();
            async move {
                let patch = serde_json::json!({"spec": {"data": {"limit": "2"}}});
                noisy
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| format!("patch {name}: {e}"))?;
                Ok(())
            }
        })
        .await?;
        eprintln!("noisy-bench: region-2 frozen; {count} neighbours given a revision for it");
        let probing = Instant::now();
        wait_probed_unreachable(&hub, "region-2").await?;
        eprintln!(
            "noisy-bench: the region probe found region-2 unreachable after {:.1?}",
            probing.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        Some(pid)
    };

    let before = counters(http, metrics_url, pid).await?;
    let busy = time_quiet_rollouts(&quiet, "busy", runs).await;
    let after = counters(http, metrics_url, pid).await?;
    if let Some(pid) = frozen {
        signal(pid, "-CONT")?;
    }
    let busy = busy?;
    eprintln!("noisy-bench: busy: {busy:?}");
    let seconds = after.at.duration_since(before.at).as_secs_f64();
    let rate = |a: f64, b: f64| (a - b) / seconds;
    let idle_median = median(&idle);
    let busy_median = median(&busy);
    println!("| figure | value |");
    println!("| --- | --- |");
    let what = if sampling {
        "1 s gates, sampling"
    } else {
        "publishing into a frozen region"
    };
    println!("| neighbours ({what}) | {count} in `{NOISY}` |");
    println!(
        "| quiet rollout create -> Complete, idle (median of {runs}; max) | {idle_median:.2} s; {:.2} s |",
        max(&idle)
    );
    println!(
        "| quiet rollout create -> Complete, under the neighbours (median of {runs}; max) | {busy_median:.2} s; {:.2} s |",
        max(&busy)
    );
    println!(
        "| busy / idle (medians) | {:.2} |",
        busy_median / idle_median
    );
    println!(
        "| controller CPU while busy | {:.2} s/s |",
        after.cpu_ticks.saturating_sub(before.cpu_ticks) as f64 / clock_ticks() / seconds
    );
    for (figure, after, before) in [
        (
            "status patches while busy",
            after.status_patches,
            before.status_patches,
        ),
        (
            "gate samples while busy",
            after.gate_samples,
            before.gate_samples,
        ),
        ("reconciles while busy", after.reconciles, before.reconciles),
        (
            "reconciles deferred for the namespace share",
            after.deferred,
            before.deferred,
        ),
    ] {
        println!("| {figure} | {:.1}/s |", rate(after, before));
    }
    drop(controller);
    Ok(())
}

/// Creates `runs` single-stage rollouts in the quiet namespace one after the other, and
/// returns each one's seconds from create to Complete.
async fn time_quiet_rollouts(
    quiet: &Api<ConfigRollout>,
    label: &str,
    runs: usize,
) -> BenchResult<Vec<f64>> {
    let mut times = Vec::new();
    for run in 0..runs {
        let name = format!("q-{label}-{run}");
        let created = Instant::now();
        quiet
            .create(
                &PostParams::default(),
                &rollout(QUIET, &name, "region-1", false)?,
            )
            .await
            .map_err(|e| format!("create {name}: {e}"))?;
        loop {
            let current = quiet.get(&name).await.map_err(|e| e.to_string())?;
            let complete = current
                .status
                .as_ref()
                .is_some_and(|status| status.is_true("Complete"));
            if complete {
                break;
            }
            if created.elapsed() > Duration::from_secs(600) {
                return Err(format!("{name} not Complete after 10 minutes"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        times.push(created.elapsed().as_secs_f64());
    }
    Ok(times)
}

/// Runs `write` for every name, [`WRITERS`] at a time.
async fn for_each_neighbour<F, Fut>(names: &[String], write: F) -> BenchResult<()>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = BenchResult<()>>,
{
    futures::stream::iter(names.iter().cloned().map(write))
        .buffer_unordered(WRITERS)
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}

/// Waits until `count` rollouts of the namespace are Complete.
async fn wait_all_complete(rollouts: &Api<ConfigRollout>, count: usize) -> BenchResult<()> {
    let started = Instant::now();
    loop {
        let list = rollouts
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let complete = list
            .items
            .iter()
            .filter(|r| r.status.as_ref().is_some_and(|s| s.is_true("Complete")))
            .count();
        if complete >= count {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err(format!(
                "{complete} of {count} neighbours Complete after 10 minutes"
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Sends a signal (`-STOP`, `-CONT`) to `pid`.
fn signal(pid: u32, which: &str) -> BenchResult<()> {
    let status = std::process::Command::new("kill")
        .arg(which)
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("kill {which} {pid}: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("kill {which} {pid}: {status}"))
}

/// A one-stage rollout into `region`; a gated one's stage has a gate that samples every
/// second, 1,000 times (the most a spec may ask), passing each time.
fn rollout(namespace: &str, name: &str, region: &str, gated: bool) -> BenchResult<ConfigRollout> {
    let (gates, stage_gates) = if gated {
        (
            "  gates:\n    - {name: busy, query: 'vector(0)', condition: result < 1, interval: 1s, count: 1000}\n",
            ", gates: [busy]",
        )
    } else {
        ("", "")
    };
    let yaml = format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  target: {{namespace: {TARGET_NAMESPACE}, name: {namespace}-{name}}}\n  data: {{limit: \"1\"}}\n{gates}  stages:\n    - {{name: only, regions: {{names: [{region}]}}{stage_gates}}}\n"
    );
    serde_saphyr::from_str(&yaml).map_err(|e| format!("{name}: {e}"))
}

async fn counters(http: &reqwest::Client, url: &str, pid: u32) -> BenchResult<Counters> {
    let text = http
        .get(url)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .text()
        .await
        .map_err(|e| e.to_string())?;
    let sum = |family: &str| -> f64 {
        text.lines()
            .filter(|line| {
                line.strip_prefix(family)
                    .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Ok(Counters {
        at: Instant::now(),
        cpu_ticks: cpu_ticks(pid).unwrap_or_default(),
        status_patches: sum("configrollout_status_patches_total"),
        gate_samples: sum("configrollout_gate_samples_total"),
        reconciles: sum("configrollout_reconcile_total"),
        deferred: sum("configrollout_reconciles_deferred_total"),
    })
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollouts_parse() {
        for gated in [false, true] {
            let parsed = rollout(NOISY, "n-00001", "region-2", gated).unwrap();
            assert_eq!(parsed.spec.gates.len(), usize::from(gated));
        }
    }
}
