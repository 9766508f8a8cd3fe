//! `kubectl configrollout` on the lab, run as the lab's real users with their own
//! kubeconfigs: approving as `approver-alice`, refused as `viewer`, `status` exit codes
//! for Complete, Halted and a timeout, and the `get` tree as it changes. One lab for the
//! whole binary; each scenario on its own rollout and target.

use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use configrollout::api::ConfigRollout;
use configrollout_e2e::{HUB, LabOptions, User};
use kube::ResourceExt;
use tokio::io::AsyncReadExt;

mod support;

use support::*;

const PLUGIN: &str = env!("CARGO_BIN_EXE_lab-plugin");
/// The configuration value rolled out: distinctive, so that it is found if it leaks.
const VALUE: &str = "s3cr3t-timeout-250";

fn rollout_yaml(name: &str) -> String {
    format!(
        r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata:
  name: {name}
  namespace: {TEAM}
spec:
  target: {{namespace: {APP}, name: {name}}}
  data:
    timeout_ms: "{VALUE}"
  stages:
    - name: canary
      regions: {{names: [region-1]}}
    - name: prod
      regions: {{names: [region-2, region-3]}}
      maxParallel: 2
      approval: Required
"#
    )
}

/// Runs the plugin as `user` (their kubeconfig, in the team namespace), bounded by
/// `deadline`.
async fn plugin(world: &World, user: User, args: &[&str], deadline: Duration) -> Output {
    let kubeconfig = world.lab.kubeconfig(HUB, user).expect("kubeconfig");
    let run = tokio::process::Command::new(PLUGIN)
        .env("KUBECONFIG", &kubeconfig)
        .args(args)
        .args(["-n", TEAM])
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(deadline, run)
        .await
        .unwrap_or_else(|_| panic!("plugin {args:?}: no exit within {deadline:?}"))
        .expect("the plugin runs")
}

/// A plugin command that runs until stopped (`-w`), as the viewer, its output collected.
struct Watching {
    child: tokio::process::Child,
    output: Arc<Mutex<String>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Watching {
    fn start(world: &World, args: &[&str]) -> Watching {
        let kubeconfig = world.lab.kubeconfig(HUB, User::Viewer).expect("kubeconfig");
        let mut child = tokio::process::Command::new(PLUGIN)
            .env("KUBECONFIG", &kubeconfig)
            .args(args)
            .args(["-n", TEAM])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the plugin starts");
        let output = Arc::new(Mutex::new(String::new()));
        let mut stdout = child.stdout.take().expect("stdout");
        let collected = output.clone();
        let reader = tokio::spawn(async move {
            let mut buffer = [0_u8; 4096];
            while let Ok(read) = stdout.read(&mut buffer).await {
                if read == 0 {
                    break;
                }
                collected
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..read]));
            }
        });
        Watching {
            child,
            output,
            reader,
        }
    }

    async fn wait_for(&self, text: &str) {
        eventually(&format!("the watch prints {text:?}"), CALL, || async {
            self.output.lock().unwrap().contains(text).then_some(())
        })
        .await;
    }

    /// Stops the command and returns all it printed.
    async fn stop(mut self) -> String {
        self.child.start_kill().expect("stop the watch");
        within("the watch ends", self.child.wait()).await;
        within("the watch's output read", self.reader).await;
        self.output.lock().unwrap().clone()
    }
}

fn text(output: &Output) -> (Option<i32>, String, String) {
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn approve_with_the_plugin(world: &World) {
    world.create_rollout(&rollout_yaml("plugged")).await;
    world
        .wait_phase("plugged", "AwaitingApproval", PROGRESS)
        .await;

    // What the viewer sees, piped: the tree, and what the rollout waits on.
    let (code, tree, stderr) = text(&plugin(world, User::Viewer, &["get", "plugged"], CALL).await);
    assert_eq!(code, Some(0), "get: {stderr}");
    for line in [
        "ConfigRollout team/plugged",
        "  phase:      AwaitingApproval   stage: prod",
        "  waiting on: an approval of stage prod of r1",
        "kubectl configrollout approve plugged -n team --stage prod",
        "├─ stage canary: Passed",
        "region region-1: materialized r1 (no consumers declared)",
        "└─ stage prod: AwaitingApproval",
        "   ├─ approval: required, awaiting a StageApproval",
        "region region-2: materialized - (no consumers declared)",
    ] {
        assert!(tree.contains(line), "get shows {line:?}:\n{tree}");
    }
    assert!(
        !tree.contains('\x1b'),
        "no escape codes when piped:\n{tree}"
    );
    assert!(!tree.contains(VALUE), "no configuration value:\n{tree}");

    let (code, list, stderr) = text(&plugin(world, User::Viewer, &["list"], CALL).await);
    assert_eq!(code, Some(0), "list: {stderr}");
    let row = list
        .lines()
        .find(|line| line.starts_with("plugged "))
        .unwrap_or_else(|| panic!("a row for plugged:\n{list}"));
    let cells: Vec<&str> = row.split_whitespace().take(5).collect();
    assert_eq!(
        cells,
        ["plugged", "AwaitingApproval", "prod", "r1", "1/3"],
        "{list}"
    );

    // Waiting on an approval that does not come: the timeout's exit code.
    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::Viewer,
            &["status", "plugged", "--timeout", "3s"],
            CALL,
        )
        .await,
    );
    assert_eq!(code, Some(2), "status times out: {stdout}{stderr}");
    assert!(stdout.contains("timed out after 3s"), "{stdout}");

    // The viewer may read but not approve, and is told so.
    let (code, stdout, stderr) =
        text(&plugin(world, User::Viewer, &["approve", "plugged"], CALL).await);
    assert_eq!(code, Some(1), "viewer refused: {stdout}{stderr}");
    assert!(
        stderr.contains("you (viewer) may not approve in namespace team: ")
            && stderr.contains("forbidden"),
        "a clear refusal: {stderr}"
    );
    assert_eq!(
        world.rollout("plugged").await.status.unwrap().stages[1].approval,
        None
    );

    // `get -w` and `list -w` piped, from before the approval to the end: each change
    // appended, plain.
    let get = Watching::start(world, &["get", "plugged", "-w"]);
    let list = Watching::start(world, &["list", "-w"]);
    get.wait_for("  phase:      AwaitingApproval").await;
    list.wait_for("AwaitingApproval").await;

    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::ApproverAlice,
            &[
                "approve",
                "plugged",
                "--reason",
                "canary dashboards are green",
            ],
            CALL,
        )
        .await,
    );
    assert_eq!(code, Some(0), "alice approves: {stdout}{stderr}");
    assert!(
        stdout.contains("approver-alice approves stage prod of revision r1 of plugged"),
        "{stdout}"
    );

    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::Viewer,
            &["status", "plugged", "--timeout", "120s"],
            PROGRESS + CALL,
        )
        .await,
    );
    assert_eq!(code, Some(0), "status on Complete: {stdout}{stderr}");
    assert!(stdout.contains("Complete: r1 in 3/3 regions"), "{stdout}");

    let done = world.rollout("plugged").await;
    let record = done.status.as_ref().unwrap().stages[1]
        .approval
        .clone()
        .expect("the approval the stage started on");
    assert_eq!(record.approver, "approver-alice");
    assert_eq!(
        record.reason.as_deref(),
        Some("canary dashboards are green")
    );
    for region in ["region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, "plugged").await,
            Some(data(&[("timeout_ms", VALUE)])),
            "{region} holds the revision after the approval"
        );
    }

    // The watches saw the rollout wait, then complete, appended without escape codes.
    get.wait_for("  phase:      Complete").await;
    let watched = get.stop().await;
    let waiting = watched
        .find("  phase:      AwaitingApproval")
        .unwrap_or_else(|| panic!("get -w drew the waiting rollout:\n{watched}"));
    let complete = watched
        .find("  phase:      Complete")
        .unwrap_or_else(|| panic!("get -w drew the completed rollout:\n{watched}"));
    assert!(waiting < complete, "{watched}");
    assert!(!watched.contains('\x1b'), "plain when piped:\n{watched}");
    assert!(
        !watched.contains(VALUE),
        "no configuration value:\n{watched}"
    );
    assert!(
        watched.contains("approval: approved by approver-alice"),
        "{watched}"
    );
    list.wait_for(" Complete ").await;
    let listed = list.stop().await;
    let rows: Vec<&str> = listed
        .lines()
        .filter(|line| line.starts_with("plugged "))
        .collect();
    assert!(
        rows.first()
            .is_some_and(|row| row.contains("AwaitingApproval"))
            && rows.last().is_some_and(|row| row.contains("Complete")),
        "list -w showed the rollout waiting, then complete:\n{listed}"
    );
    assert!(!listed.contains('\x1b'), "plain when piped:\n{listed}");
    assert!(!listed.contains(VALUE), "no configuration value:\n{listed}");

    // Nothing awaits approval any more: said plainly, nothing created.
    let (code, _, stderr) =
        text(&plugin(world, User::ApproverAlice, &["approve", "plugged"], CALL).await);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("nothing awaits approval: configrollout team/plugged is Complete"),
        "{stderr}"
    );

    let (code, history, stderr) =
        text(&plugin(world, User::Viewer, &["history", "plugged"], CALL).await);
    assert_eq!(code, Some(0), "history: {stderr}");
    assert!(history.starts_with("REVISION"), "{history}");
    assert!(
        history.lines().any(|line| line.starts_with("r1 ")),
        "{history}"
    );

    let (code, json, stderr) =
        text(&plugin(world, User::Viewer, &["get", "plugged", "-o", "json"], CALL).await);
    assert_eq!(code, Some(0), "get -o json: {stderr}");
    let parsed: ConfigRollout = serde_json::from_str(&json).expect("get -o json is the object");
    assert_eq!(parsed.status, done.status);
}

async fn pause_resume_and_abort(world: &World) {
    world.create_rollout(&rollout_yaml("steered")).await;
    world
        .wait_phase("steered", "AwaitingApproval", PROGRESS)
        .await;

    let (code, stdout, stderr) =
        text(&plugin(world, User::Admin, &["pause", "steered"], CALL).await);
    assert_eq!(code, Some(0), "pause: {stderr}");
    assert!(
        stdout.contains("configrollout team/steered paused: spec.paused is true"),
        "{stdout}"
    );
    world.wait_phase("steered", "Paused", PROGRESS).await;

    let (code, stdout, stderr) =
        text(&plugin(world, User::Admin, &["resume", "steered"], CALL).await);
    assert_eq!(code, Some(0), "resume: {stderr}");
    assert!(stdout.contains("spec.paused is false"), "{stdout}");
    world
        .wait_phase("steered", "AwaitingApproval", PROGRESS)
        .await;

    // The viewer may not abort.
    let (code, _, stderr) = text(&plugin(world, User::Viewer, &["abort", "steered"], CALL).await);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("you may not change configrollouts in namespace team: "),
        "{stderr}"
    );

    let (code, stdout, stderr) =
        text(&plugin(world, User::Admin, &["abort", "steered"], CALL).await);
    assert_eq!(code, Some(0), "abort: {stdout}{stderr}");
    assert!(
        stdout.contains("abort requested for configrollout team/steered at "),
        "{stdout}"
    );
    assert!(
        stdout.contains("the controller acted on it: steered is Halted"),
        "{stdout}"
    );
    let rollout = world.rollout("steered").await;
    assert!(
        rollout
            .annotations()
            .contains_key(configrollout::reconcile::observe::ABORT_ANNOTATION)
    );

    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::Viewer,
            &["status", "steered", "--timeout", "60s"],
            PROGRESS,
        )
        .await,
    );
    assert_eq!(code, Some(1), "status on Halted: {stdout}{stderr}");
    assert!(stdout.contains("Halted: r1: Aborted"), "{stdout}");
    for region in ["region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, "steered").await,
            None,
            "{region}: nothing published past the abort"
        );
    }

    // Retry resumes the aborted rollout from where it stopped: prod awaits approval again.
    let (code, stdout, stderr) =
        text(&plugin(world, User::Admin, &["retry", "steered"], CALL).await);
    assert_eq!(code, Some(0), "retry: {stdout}{stderr}");
    assert!(
        stdout.contains("the controller acted on it: steered is"),
        "{stdout}"
    );
    world
        .wait_phase("steered", "AwaitingApproval", PROGRESS)
        .await;
    let (code, _, stderr) = text(&plugin(world, User::Admin, &["retry", "steered"], CALL).await);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(
            "retry resumes only a halted rollout: configrollout team/steered is AwaitingApproval"
        ),
        "{stderr}"
    );

    let (code, list, stderr) = text(&plugin(world, User::Viewer, &["list", "-A"], CALL).await);
    assert_eq!(code, Some(0), "list -A: {stderr}");
    assert!(list.starts_with("NAMESPACE "), "{list}");
    for name in ["plugged", "steered"] {
        assert!(
            list.lines()
                .any(|line| line.starts_with(&format!("{TEAM} ")) && line.contains(name)),
            "{name} listed:\n{list}"
        );
    }

    let (code, _, stderr) = text(&plugin(world, User::Viewer, &["status", "missing"], CALL).await);
    assert_eq!(
        code,
        Some(3),
        "status of a rollout that does not exist: {stderr}"
    );
    assert!(
        stderr.contains("configrollout missing not found in namespace team"),
        "{stderr}"
    );
}

/// A typo in a gate query: `lint` says so offline, and the controller refuses the
/// rollout (InvalidSpec) before any region is written, which `status` reports with 1.
async fn a_query_typo_is_caught_before_any_region(world: &World) {
    let yaml = format!(
        "{}  gates:\n    - {{name: errors, query: 'sum(rate(errors_total[1m])', condition: result < 0.01}}\n",
        rollout_yaml("typo").replace(
            "      regions: {names: [region-1]}\n",
            "      regions: {names: [region-1]}\n      gates: [errors]\n"
        )
    );
    let file = world.lab.root_dir().join("typo.yaml");
    std::fs::write(&file, &yaml).expect("write the manifest");
    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::Viewer,
            &["lint", "-f", file.to_str().expect("UTF-8 path")],
            CALL,
        )
        .await,
    );
    assert_eq!(code, Some(1), "lint: {stdout}{stderr}");
    assert!(
        stdout.contains("configrollout typo: spec.gates[0].query: not valid PromQL"),
        "{stdout}"
    );

    world.create_rollout(&yaml).await;
    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::Viewer,
            &["status", "typo", "--timeout", "60s"],
            PROGRESS,
        )
        .await,
    );
    assert_eq!(code, Some(1), "status on InvalidSpec: {stdout}{stderr}");
    assert!(stdout.contains("InvalidSpec: "), "{stdout}");
    assert!(stdout.contains("spec.gates[0].query"), "{stdout}");
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(world.target_data(region, "typo").await, None, "{region}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_plugin_on_the_lab() {
    let world = World::start(LabOptions::default()).await;
    let controller = world.start_controller("controller-a");
    approve_with_the_plugin(&world).await;
    pause_resume_and_abort(&world).await;
    a_query_typo_is_caught_before_any_region(&world).await;
    controller.stop();
}
