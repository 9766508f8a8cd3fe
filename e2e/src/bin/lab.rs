//! `make lab`: brings the lab up for a person, prints how to reach it, and runs until
//! Ctrl-C (or SIGTERM), then stops every process it started.
//!
//! Usage: `lab [--regions N] [--dir DIR] [--keep] [--workload-controllers]`

use std::path::PathBuf;
use std::process::ExitCode;

use configrollout_e2e::{Lab, LabOptions};
use tokio::signal::unix::{SignalKind, signal};

fn parse_args() -> Result<LabOptions, String> {
    let mut options = LabOptions::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--regions" => {
                let value = args.next().ok_or("--regions needs a number")?;
                options.regions = value
                    .parse()
                    .map_err(|_| format!("--regions: not a number: {value}"))?;
            }
            "--dir" => {
                options.root_dir = Some(PathBuf::from(args.next().ok_or("--dir needs a path")?));
                options.keep_dir = true;
            }
            "--keep" => options.keep_dir = true,
            "--workload-controllers" => options.workload_controllers = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("lab: {message}");
            }
            eprintln!("usage: lab [--regions N] [--dir DIR] [--keep] [--workload-controllers]");
            return ExitCode::from(2);
        }
    };
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        eprintln!("lab: cannot listen for SIGTERM");
        return ExitCode::FAILURE;
    };
    eprintln!(
        "starting the lab (hub + {} regions); the first run builds kube-apiserver, which takes minutes",
        options.regions
    );
    let started = std::time::Instant::now();
    // Ctrl-C during the start aborts it; dropping the half-started lab stops its processes.
    let lab = tokio::select! {
        lab = Lab::start(options) => lab,
        _ = tokio::signal::ctrl_c() => return ExitCode::from(130),
        _ = terminate.recv() => return ExitCode::from(143),
    };
    let lab = match lab {
        Ok(lab) => lab,
        Err(e) => {
            eprintln!("lab: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", lab.describe());
    println!(
        "ready in {:.1}s; Ctrl-C stops the lab and every process it started",
        started.elapsed().as_secs_f64()
    );
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("stopping the lab");
    drop(lab);
    ExitCode::SUCCESS
}
