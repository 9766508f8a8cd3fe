//! Measures the lab: start time of hub + N regions (each run a fresh lab) and the
//! resident memory of each control plane once ready, for `BENCHMARKS.md`.
//!
//! Usage: `lab-bench [--runs 5] [--regions 3]` (build the Go programs first, e.g. by one
//! run of the lab, so that no run includes the build).

use std::process::ExitCode;
use std::time::Instant;

use configrollout_e2e::bench::arg;
use configrollout_e2e::procstat::rss_kib;
use configrollout_e2e::{Lab, LabOptions, gobuild};

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let (runs, regions) = match (arg("--runs", 5), arg("--regions", 3)) {
        (Ok(r), Ok(g)) => (r, g),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("lab-bench: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = tokio::task::spawn_blocking(gobuild::ensure_built)
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
    {
        eprintln!("lab-bench: {e}");
        return ExitCode::FAILURE;
    }
    let mut starts = Vec::new();
    let mut rss = Vec::new();
    for run in 1..=runs {
        let started = Instant::now();
        let lab = match Lab::start(LabOptions {
            regions,
            ..LabOptions::default()
        })
        .await
        {
            Ok(lab) => lab,
            Err(e) => {
                eprintln!("lab-bench: run {run}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let seconds = started.elapsed().as_secs_f64();
        starts.push(seconds);
        let mut line = format!(
            "run {run}: hub + {regions} regions ready in {seconds:.2}s; control plane RSS (MiB):"
        );
        for cluster in lab.clusters() {
            if let Some(kib) = lab.cluster_info(&cluster).ok().and_then(|i| rss_kib(i.pid)) {
                let mib = kib as f64 / 1024.0;
                rss.push(mib);
                line.push_str(&format!(" {cluster}={mib:.0}"));
            }
        }
        println!("{line}");
        drop(lab);
    }
    println!(
        "start: median {:.2}s over {} runs (min {:.2}s, max {:.2}s)",
        median(&mut starts.clone()),
        starts.len(),
        starts.iter().copied().fold(f64::INFINITY, f64::min),
        starts.iter().copied().fold(0.0, f64::max)
    );
    println!(
        "control plane RSS right after ready: median {:.0} MiB over {} samples (min {:.0}, max {:.0})",
        median(&mut rss.clone()),
        rss.len(),
        rss.iter().copied().fold(f64::INFINITY, f64::min),
        rss.iter().copied().fold(0.0, f64::max)
    );
    ExitCode::SUCCESS
}
