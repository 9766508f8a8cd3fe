//! `make demo`: the whole product on the local lab. Starts a hub and three regions, the
//! controller, and a two-stage ConfigRollout whose second stage needs an approval;
//! prints its progress as `kubectl get` would, approves as `approver-alice` with the
//! kubectl plugin (`kubectl configrollout approve`, here the `lab-plugin` build), and shows
//! each region's ConfigMap. The team's ConfigSchema refuses a change whose burst is
//! below its rate before any region sees it. Then a second revision carries a value the
//! schema accepts but the workload does not, behind an error-rate gate: the canary's
//! workload loads it and fails requests, Prometheus sees it, the gate fails and the
//! revision is rolled back. `--keep` leaves everything
//! running until Ctrl-C. The dashboard (`kubectl configrollout dashboard`, as
//! approver-alice) runs throughout; its URL is printed at the start.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, ConfigSchema, conditions};
use configrollout::engine::tenancy::ALLOWED_TARGET_NAMESPACES;
use configrollout_e2e::{HUB, Lab, LabOptions, User};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};

const NAMESPACE: &str = "team";
const TARGET_NAMESPACE: &str = "app";
const ROLLOUT: &str = "rate-limits";
const DEADLINE: Duration = Duration::from_secs(180);

const SCHEMA: &str = r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigSchema
metadata: {name: rate-limits, namespace: team}
spec:
  keys:
    - {name: requests-per-second, type: Integer, required: true, minimum: 1, maximum: 10000}
    - {name: burst, type: Integer, required: true, minimum: 1}
    - {name: timeout_ms, type: Integer, minimum: 0, maximum: 60000}
  unknownKeys: Forbid
  rules:
    - rule: "int(self.burst) >= int(self['requests-per-second'])"
      message: burst must be at least requests-per-second
"#;

const EXAMPLE: &str = r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: rate-limits, namespace: team}
spec:
  target: {namespace: app, name: rate-limits}
  schemas: [{name: rate-limits}]
  data: {requests-per-second: "250", burst: "500"}
  stages:
    - name: canary
      regions: {selector: {matchLabels: {configrollout.dev/tier: canary}}}
    - name: production
      regions: {selector: {matchLabels: {configrollout.dev/tier: production}}}
      maxParallel: 2
      approval: Required
"#;

type DemoResult<T> = Result<T, String>;

fn main() -> ExitCode {
    let keep = std::env::args().any(|arg| arg == "--keep");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("demo: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(demo(keep)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo failed: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn demo(keep: bool) -> DemoResult<()> {
    println!(
        "Starting the lab: a hub and three regions (kube-apiserver + etcd each), Prometheus..."
    );
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
    for region in lab.regions() {
        lab.create_namespace(&region, TARGET_NAMESPACE)
            .await
            .map_err(|e| e.to_string())?;
    }

    // Each region's workload consumes the target: a bad value really fails requests.
    lab.watch_config_everywhere(TARGET_NAMESPACE, ROLLOUT)
        .await
        .map_err(|e| e.to_string())?;

    // As the platform admin: the policy that makes an approval's approver its creator.
    // Without it the controller counts no approval.
    println!("kubectl apply -f policies/stageapproval-approver.yaml");
    lab.install_approver_policy()
        .await
        .map_err(|e| e.to_string())?;

    println!("Starting configrollout-controller as its own user...");
    let controller = lab
        .start_controller(
            &sibling("lab-controller")?,
            "controller",
            &[
                "--probe-addr",
                "127.0.0.1:0",
                "--prometheus-url",
                &lab.prometheus_url(),
                // The lab's workloads load a value within a second of its write (they
                // watch it): the demo's gates need not wait the default minute.
                "--gate-settle-time",
                "4s",
            ]
            .map(OsString::from),
        )
        .map_err(|e| e.to_string())?;

    // The dashboard, as people run it: the plugin on approver-alice's own kubeconfig.
    let (dashboard, dashboard_url) = start_dashboard(&lab).await?;
    println!(
        "\nkubectl configrollout dashboard (as approver-alice): {dashboard_url}\n\
         open it to watch the rollout region by region while the demo runs\n"
    );

    println!("\nkubectl apply -f - <<EOF{SCHEMA}EOF\n");
    let schemas: Api<ConfigSchema> = Api::namespaced(hub.clone(), NAMESPACE);
    let schema: ConfigSchema = serde_saphyr::from_str(SCHEMA).map_err(|e| e.to_string())?;
    schemas
        .create(&PostParams::default(), &schema)
        .await
        .map_err(|e| e.to_string())?;

    println!("\nkubectl apply -f - <<EOF{EXAMPLE}EOF\n");
    let rollouts: Api<ConfigRollout> = Api::namespaced(hub.clone(), NAMESPACE);
    let rollout: ConfigRollout = serde_saphyr::from_str(EXAMPLE).map_err(|e| e.to_string())?;
    rollouts
        .create(&PostParams::default(), &rollout)
        .await
        .map_err(|e| e.to_string())?;

    println!(
        "{:<14} {:<18} {:<12} {:<9} REGIONS",
        "NAME", "PHASE", "STAGE", "REVISION"
    );
    watch_until(&rollouts, "AwaitingApproval").await?;

    // The approval as people give it: the kubectl plugin, on approver-alice's own
    // kubeconfig, naming the revision she reviewed (as `get` prints it).
    let revision = rollouts
        .get(ROLLOUT)
        .await
        .map_err(|e| e.to_string())?
        .status
        .and_then(|status| status.revision)
        .ok_or_else(|| "the rollout names no revision".to_owned())?;
    println!(
        "\napprover-alice approves the production stage of {revision} with the plugin:\n\n\
         kubectl configrollout approve {ROLLOUT} -n {NAMESPACE} --revision {revision} --reason 'canary looks healthy'"
    );
    let kubeconfig = lab
        .kubeconfig(HUB, User::ApproverAlice)
        .map_err(|e| e.to_string())?;
    let approved = tokio::process::Command::new(sibling("lab-plugin")?)
        .env("KUBECONFIG", &kubeconfig)
        .args(["approve", ROLLOUT, "-n", NAMESPACE, "--revision", &revision])
        .args(["--reason", "canary looks healthy"])
        .kill_on_drop(true)
        .output();
    let approved = tokio::time::timeout(Duration::from_secs(60), approved)
        .await
        .map_err(|_| "kubectl configrollout approve: no exit within 60s".to_owned())?
        .map_err(|e| format!("kubectl configrollout approve: {e}"))?;
    print!("{}", String::from_utf8_lossy(&approved.stdout));
    eprint!("{}", String::from_utf8_lossy(&approved.stderr));
    if !approved.status.success() {
        return Err(format!(
            "kubectl configrollout approve failed: {}",
            approved.status
        ));
    }
    println!();
    watch_until(&rollouts, "Complete").await?;
    show_regions(&lab).await?;

    println!("\nkubectl patch configrollout rate-limits --type merge -p '{REFUSED_REVISION}'\n");
    println!("(the schema wants burst >= requests-per-second: refused before any region)\n");
    let patch: serde_json::Value =
        serde_json::from_str(REFUSED_REVISION).map_err(|e| e.to_string())?;
    rollouts
        .patch(ROLLOUT, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| e.to_string())?;
    let message = refusal(&rollouts).await?;
    println!("  InvalidSpec (InvalidValue): {message}");
    show_regions(&lab).await?;

    println!("\nkubectl patch configrollout rate-limits --type merge -p '{BAD_REVISION}'\n");
    println!("(r2 sets timeout_ms to 0, which the workloads refuse, behind an error-rate gate)\n");
    let patch: serde_json::Value = serde_json::from_str(BAD_REVISION).map_err(|e| e.to_string())?;
    rollouts
        .patch(ROLLOUT, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "{:<14} {:<18} {:<12} {:<9} REGIONS",
        "NAME", "PHASE", "STAGE", "REVISION"
    );
    watch_until(&rollouts, "RolledBack").await?;
    let rollout = rollouts.get(ROLLOUT).await.map_err(|e| e.to_string())?;
    for condition in rollout.status.iter().flat_map(|status| &status.conditions) {
        if conditions::is_true(condition)
            && ["Halted", "RolledBack"].contains(&condition.type_.as_str())
        {
            println!(
                "  {} ({}): {}",
                condition.type_, condition.reason, condition.message
            );
        }
    }
    show_regions(&lab).await?;

    if keep {
        println!("\n{}", lab.describe());
        println!("Dashboard (as approver-alice): {dashboard_url}");
        println!("Everything keeps running; Ctrl-C stops it.");
        let _ = tokio::signal::ctrl_c().await;
    }
    dashboard.stop();
    controller.stop();
    drop(lab);
    println!("\nDone: the lab and the controller are stopped.");
    Ok(())
}

/// Passes every per-key rule, breaks the cross-key one.
const REFUSED_REVISION: &str =
    r#"{"spec": {"data": {"requests-per-second": "2500", "burst": "1000"}}}"#;

/// Passes the schema; the workloads refuse a zero timeout.
const BAD_REVISION: &str = r#"{"spec": {"data": {"requests-per-second": "250", "burst": "500", "timeout_ms": "0"}, "onFailure": "Rollback", "gates": [{"name": "errors", "query": "sum(rate(configrollout_lab_errors_total{region=\"{{region}}\"}[5s])) / sum(rate(configrollout_lab_requests_total{region=\"{{region}}\"}[5s]))", "condition": "result < 0.1", "interval": "2s", "initialDelay": "4s", "count": 3}], "stages": [{"name": "canary", "regions": {"selector": {"matchLabels": {"configrollout.dev/tier": "canary"}}}, "gates": ["errors"]}, {"name": "production", "regions": {"selector": {"matchLabels": {"configrollout.dev/tier": "production"}}}, "maxParallel": 2, "approval": "Required", "gates": ["errors"]}]}}"#;

async fn show_regions(lab: &Lab) -> DemoResult<()> {
    println!("\nWhat each region holds now (app/rate-limits):");
    for region in lab.regions() {
        let client = lab
            .client(&region, User::Admin)
            .map_err(|e| e.to_string())?;
        let maps: Api<ConfigMap> = Api::namespaced(client, TARGET_NAMESPACE);
        let data = maps
            .get(ROLLOUT)
            .await
            .map_err(|e| e.to_string())?
            .data
            .unwrap_or_default();
        println!("  {region}: {data:?}");
    }
    Ok(())
}

/// Prints the rollout's columns whenever they change, until `phase`.
/// Waits for the schema's refusal of the rollout's candidate, and returns its message.
async fn refusal(rollouts: &Api<ConfigRollout>) -> DemoResult<String> {
    let started = Instant::now();
    loop {
        let rollout = rollouts.get(ROLLOUT).await.map_err(|e| e.to_string())?;
        let generation = rollout.metadata.generation;
        let refused = rollout.status.as_ref().and_then(|status| {
            status
                .true_condition(conditions::INVALID_SPEC)
                .filter(|c| c.reason == "InvalidValue" && c.observed_generation == generation)
                .map(|c| c.message.clone())
        });
        if let Some(message) = refused {
            return Ok(message);
        }
        if started.elapsed() > DEADLINE {
            return Err(format!(
                "the schema did not refuse the change within {DEADLINE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn watch_until(rollouts: &Api<ConfigRollout>, phase: &str) -> DemoResult<()> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let rollout = rollouts.get(ROLLOUT).await.map_err(|e| e.to_string())?;
        let status = rollout.status.unwrap_or_default();
        let current_phase = status
            .phase
            .as_ref()
            .and_then(|p| serde_json::to_value(p).ok())
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let line = format!(
            "{:<14} {:<18} {:<12} {:<9} {}",
            ROLLOUT,
            current_phase,
            status.current_stage.unwrap_or_default(),
            status.revision.unwrap_or_default(),
            status.progress.unwrap_or_default()
        );
        if line != last {
            println!("{line}");
            last = line;
        }
        if current_phase == phase {
            return Ok(());
        }
        if started.elapsed() > DEADLINE {
            return Err(format!(
                "the rollout did not reach {phase} within {DEADLINE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `kubectl configrollout dashboard --port 0` as approver-alice beside the lab (it dies
/// with the lab), and the URL it prints.
async fn start_dashboard(lab: &Lab) -> DemoResult<(configrollout_e2e::LabChild, String)> {
    let kubeconfig = lab
        .kubeconfig(HUB, User::ApproverAlice)
        .map_err(|e| e.to_string())?;
    let child = lab
        .spawn(
            "dashboard",
            &sibling("lab-plugin")?,
            &["dashboard", "--port", "0"].map(OsString::from),
            &[("KUBECONFIG".to_owned(), kubeconfig.into_os_string())],
        )
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    loop {
        let log = child.log();
        if let Some(start) = log.find("http://") {
            let url: String = log[start..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            return Ok((child, url));
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "the dashboard printed no URL within 30s: {}",
                child.log_tail(10)
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A binary built beside this one (`make demo` builds the e2e crate's binaries).
fn sibling(name: &str) -> DemoResult<PathBuf> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = me.with_file_name(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: build it with `cargo build -p configrollout-e2e --bins`",
            path.display()
        ))
    }
}
