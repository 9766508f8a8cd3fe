//! What the lab's benchmark programs share: their command line, a team namespace allowed
//! to write a target namespace in every region, and the controller started as its own
//! user with its `/metrics` served.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use configrollout::engine::tenancy::ALLOWED_TARGET_NAMESPACES;

use crate::{HUB, Lab, LabChild};

/// Runs a benchmark's `work` on a new runtime: exit 0 when it succeeds, 1 with the error
/// on stderr (after `program`) when it fails or no runtime starts.
pub fn run(program: &str, work: impl Future<Output = Result<(), String>>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{program}: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{program} failed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// A wrong command line: said on stderr (after `program`), exit 2.
pub fn usage_error(program: &str, error: &str) -> ExitCode {
    eprintln!("{program}: {error}");
    ExitCode::from(2)
}

/// The number after `name` on the command line, or `default` without one.
pub fn arg(name: &str, default: usize) -> Result<usize, String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a number")),
        None => Ok(default),
    }
}

/// Creates each of `teams` in the hub, allowed (as the platform admin allows it) to write
/// `target` in the regions, and `target` in every region.
pub async fn team_namespaces(lab: &Lab, teams: &[&str], target: &str) -> Result<(), String> {
    for team in teams {
        lab.create_namespace(HUB, team)
            .await
            .map_err(|e| e.to_string())?;
        lab.annotate_namespace(HUB, team, &[(ALLOWED_TARGET_NAMESPACES, target)])
            .await
            .map_err(|e| e.to_string())?;
    }
    for region in lab.regions() {
        lab.create_namespace(&region, target)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The controller a benchmark measures.
pub struct BenchController {
    /// The process (stopped when dropped).
    pub child: LabChild,
    /// Its pid, for `/proc`.
    pub pid: u32,
    /// Its `/metrics`.
    pub metrics_url: String,
    /// A client for `/metrics` (10 s timeout).
    pub http: reqwest::Client,
}

/// Starts `lab-controller` (the one next to this program) as the controller's user, with
/// the lab's Prometheus, `--log-filter warn` and `extra` arguments, and waits until it
/// serves `/metrics`, then 5 s more for leader election and the first probe of the
/// regions.
pub async fn start_controller(lab: &Lab, extra: &[&str]) -> Result<BenchController, String> {
    let port = crate::procstat::free_port()?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut args: Vec<OsString> = [
        "--probe-addr".to_owned(),
        format!("127.0.0.1:{port}"),
        "--prometheus-url".to_owned(),
        lab.prometheus_url(),
        "--log-filter".to_owned(),
        "warn".to_owned(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    args.extend(extra.iter().map(OsString::from));
    let child = lab
        .start_controller(&me.with_file_name("lab-controller"), "controller", &args)
        .map_err(|e| e.to_string())?;
    let metrics_url = format!("http://127.0.0.1:{port}/metrics");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let pid = loop {
        if let Some(pid) = child.program_pid()
            && http.get(&metrics_url).send().await.is_ok()
        {
            break pid;
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "controller did not serve /metrics: {}",
                child.log_tail(20)
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(BenchController {
        child,
        pid,
        metrics_url,
        http,
    })
}
