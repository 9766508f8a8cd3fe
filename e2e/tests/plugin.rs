//! `kubectl configrollout` on the lab, run as the lab's real users with their own
//! kubeconfigs: approving as `approver-alice`, refused as `viewer`, `status` exit codes
//! for Complete, Halted and a timeout, the `get` tree as it changes (piped, and in a real
//! terminal through tmux), `diff` between revisions and against a region (values only
//! when asked, and only for whoever may read the revisions), and `override` in one region,
//! which status reports and a later revision wins over. One lab for the whole binary;
//! each scenario on its own rollout and target.

use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use configrollout::api::ConfigRollout;
use configrollout::regions::materialize::{
    COMPANION_SUFFIX, DIGEST_ANNOTATION, STATE_KEY, STATE_MAC_ANNOTATION,
};
use configrollout_e2e::{HUB, LabChild, LabOptions, User};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
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

/// A plugin command running in a real pseudo-terminal: a detached tmux session on a
/// private tmux server (its own socket), whose screen `capture` reads. Dropping it kills
/// that server, so a failing test leaves no session behind.
struct Terminal {
    socket: std::path::PathBuf,
}

impl Terminal {
    fn start(world: &World, user: User, args: &[&str]) -> Terminal {
        let kubeconfig = world.lab.kubeconfig(HUB, user).expect("kubeconfig");
        let socket =
            std::env::temp_dir().join(format!("configrollout-plugin-test-{}", std::process::id()));
        let quote = |word: &str| format!("'{}'", word.replace('\'', "'\\''"));
        let mut command = format!(
            "KUBECONFIG={} {}",
            quote(kubeconfig.to_str().expect("UTF-8 path")),
            quote(PLUGIN)
        );
        for arg in args.iter().chain(&["-n", TEAM]) {
            command.push(' ');
            command.push_str(&quote(arg));
        }
        // Keep the pane after the plugin ends, with its exit code, so a failure shows.
        command.push_str("; echo \"plugin exited $?\"; sleep 600");
        let terminal = Terminal { socket };
        let status = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&terminal.socket)
            .args(["-f", "/dev/null"])
            .args(["new-session", "-d", "-s", "plugin", "-x", "200", "-y", "50"])
            .arg(&command)
            .env_remove("TMUX")
            .status()
            .expect("tmux runs (scripts/install-deps installs it)");
        assert!(status.success(), "tmux new-session: {status}");
        terminal
    }

    /// What the terminal shows now.
    fn capture(&self) -> String {
        let output = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["capture-pane", "-p", "-t", "plugin"])
            .output()
            .expect("tmux capture-pane");
        assert!(output.status.success(), "tmux capture-pane: {output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Types `keys` (tmux key names, e.g. `n`, `Enter`) into the terminal.
    fn send_keys(&self, keys: &[&str]) {
        let status = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["send-keys", "-t", "plugin"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success(), "tmux send-keys: {status}");
    }

    /// Waits until the screen shows `text`, and returns the screen.
    async fn wait_for(&self, text: &str) -> String {
        eventually(
            &format!("the terminal shows {text:?}"),
            PROGRESS,
            || async {
                let screen = self.capture();
                screen.contains(text).then_some(screen)
            },
        )
        .await
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .status();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// `kubectl configrollout <command> <rollout> --region <region> --region-kubeconfig
/// <kubeconfig> <rest>` as the admin, as text.
async fn in_region(
    world: &World,
    [command, rollout, region]: [&str; 3],
    kubeconfig: &std::path::Path,
    rest: &[&str],
    deadline: Duration,
) -> (Option<i32>, String, String) {
    let kubeconfig = kubeconfig.to_str().expect("UTF-8 path");
    let mut args = vec![
        command,
        rollout,
        "--region",
        region,
        "--region-kubeconfig",
        kubeconfig,
    ];
    args.extend_from_slice(rest);
    text(&plugin(world, User::Admin, &args, deadline).await)
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

    // Without a terminal to ask in, approve never picks the revision: it names the one
    // to review and the flag that pins it.
    let (code, stdout, stderr) =
        text(&plugin(world, User::ApproverAlice, &["approve", "plugged"], CALL).await);
    assert_eq!(
        code,
        Some(1),
        "approve without --revision: {stdout}{stderr}"
    );
    assert!(
        stderr.contains("name the revision you reviewed")
            && stderr.contains("--stage prod --revision r1 (digest "),
        "{stderr}"
    );

    // The viewer may read but not approve, and is told so.
    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::Viewer,
            &["approve", "plugged", "--revision", "r1"],
            CALL,
        )
        .await,
    );
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
    // And in a real terminal, where each view replaces the last.
    let terminal = Terminal::start(world, User::Viewer, &["get", "plugged", "-w"]);
    let before = terminal.wait_for("  phase:      AwaitingApproval").await;
    assert!(
        before.contains("└─ stage prod: AwaitingApproval"),
        "the tree on screen:\n{before}"
    );

    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::ApproverAlice,
            &[
                "approve",
                "plugged",
                "--revision",
                "r1",
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

    // The terminal now shows the completed rollout, in place of the waiting one: one
    // view on the screen, not a log of them.
    let after = terminal.wait_for("  phase:      Complete").await;
    assert!(
        !after.contains("AwaitingApproval"),
        "redrawn in place:\n{after}"
    );
    assert_eq!(
        after.matches("ConfigRollout team/plugged").count(),
        1,
        "one view on the screen:\n{after}"
    );
    assert!(
        after.contains("approval: approved by approver-alice"),
        "{after}"
    );
    assert!(
        after.starts_with("ConfigRollout team/plugged"),
        "drawn from the top:\n{after}"
    );
    assert!(!after.contains(VALUE), "no configuration value:\n{after}");
    drop(terminal);

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

/// On a rollout whose only stage awaits approval, so that nothing is published before
/// the abort: it halts (an abort after a stage published rolls that back instead).
/// Issue 28: an approval names the revision its approver reviewed. Pinned to r1 once r2
/// is declared, it is refused, naming both, nothing is created and nothing of r2 reaches
/// the approval stage; pinned to r2 with its digest, it goes through.
async fn a_pinned_approval_never_lands_on_a_newer_revision(world: &World) {
    let name = "pinned";
    world.create_rollout(&rollout_yaml(name)).await;
    world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    change_data(world, name, serde_json::json!({"timeout_ms": "r2-value"})).await;
    let waiting = eventually("r2 awaits its approval", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let status = rollout.status.clone()?;
        (status.revision.as_deref() == Some("r2")
            && status.phase.map(|p| format!("{p:?}")).as_deref() == Some("AwaitingApproval"))
        .then_some(rollout)
    })
    .await;
    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::ApproverAlice,
            &["approve", name, "--revision", "r1"],
            CALL,
        )
        .await,
    );
    assert_eq!(code, Some(1), "an approval pinned to r1: {stdout}{stderr}");
    assert!(
        stderr.contains("approval for r1 refused")
            && stderr.contains("has moved on to r2")
            && stderr.contains("nothing was approved"),
        "{stderr}"
    );
    let approvals: Api<configrollout::api::StageApproval> =
        Api::namespaced(world.hub.clone(), TEAM);
    let made = within("list approvals", approvals.list(&Default::default())).await;
    assert!(
        made.items
            .iter()
            .all(|approval| approval.spec.rollout != name),
        "an approval was created: {:?}",
        made.items
    );
    for region in ["region-2", "region-3"] {
        assert_ne!(
            world
                .target_data(region, name)
                .await
                .and_then(|data| data.get("timeout_ms").cloned())
                .as_deref(),
            Some("r2-value"),
            "{region}: r2 reached the approval stage"
        );
    }
    // A digest that is not r2's is refused too; r2's goes through.
    let (code, _, stderr) = text(
        &plugin(
            world,
            User::ApproverAlice,
            &[
                "approve",
                name,
                "--revision",
                "r2",
                "--digest",
                "000000000000",
            ],
            CALL,
        )
        .await,
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("approval for r2 refused: its digest is"),
        "{stderr}"
    );
    // In a terminal, without --revision, approve shows what it would approve and asks;
    // answering no approves nothing.
    {
        let terminal = Terminal::start(world, User::ApproverAlice, &["approve", name]);
        let screen = terminal.wait_for("Approve stage prod of r2 (digest ").await;
        assert!(
            screen.contains("stage prod awaits approval of r2 (digest "),
            "{screen}"
        );
        terminal.send_keys(&["n", "Enter"]);
        let screen = terminal.wait_for("plugin exited 1").await;
        assert!(screen.contains("not approved"), "{screen}");
    }
    let made = within("list approvals", approvals.list(&Default::default())).await;
    assert!(
        made.items
            .iter()
            .all(|approval| approval.spec.rollout != name),
        "answering no created an approval"
    );
    let digest = waiting
        .status
        .as_ref()
        .and_then(|status| status.history.iter().find(|r| r.name == "r2"))
        .and_then(|record| record.digest.clone())
        .expect("r2's digest");
    let (code, stdout, stderr) = text(
        &plugin(
            world,
            User::ApproverAlice,
            &["approve", name, "--revision", "r2", "--digest", &digest],
            CALL,
        )
        .await,
    );
    assert_eq!(code, Some(0), "approve r2: {stdout}{stderr}");
    assert!(
        stdout.contains("approves stage prod of revision r2 of pinned (digest "),
        "{stdout}"
    );
    wait_complete(world, name, "r2").await;
}

async fn pause_resume_and_abort(world: &World) {
    let approval_first = rollout_yaml("steered").replace(
        "    - name: canary\n      regions: {names: [region-1]}\n",
        "",
    );
    assert!(!approval_first.contains("canary"), "{approval_first}");
    world.create_rollout(&approval_first).await;
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
            .contains_key(configrollout::api::annotations::ABORT_ANNOTATION)
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
    for region in ["region-1", "region-2", "region-3"] {
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

/// A rollout to every region at once, with no approval: it completes on its own.
fn open_rollout_yaml(name: &str) -> String {
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
    mode: "{MODE}"
  stages:
    - name: all
      regions: {{names: [region-1, region-2, region-3]}}
      maxParallel: 3
"#
    )
}

/// A second and third value, as distinctive as the first.
const MODE: &str = "s3cr3t-mode-strict";
const VALUE_2: &str = "s3cr3t-timeout-400";
const EMERGENCY: &str = "s3cr3t-timeout-emergency-9000";
const VALUE_3: &str = "s3cr3t-timeout-500";

/// Merges `data` into the rollout's `spec.data` (a null value removes the key): a new
/// revision.
async fn change_data(world: &World, name: &str, data: serde_json::Value) {
    let patch = serde_json::json!({ "spec": { "data": data } });
    within(
        "change the rollout's data",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
}

/// Waits until the rollout's status names `revision` and it is Complete.
async fn wait_complete(world: &World, name: &str, revision: &str) -> ConfigRollout {
    eventually(
        &format!("{name}: {revision} Complete"),
        PROGRESS,
        || async {
            let rollout = world.rollout(name).await;
            let current = rollout.status.as_ref()?.revision.as_deref() == Some(revision);
            (current && condition_true(&rollout, "Complete")).then_some(rollout)
        },
    )
    .await
}

/// `diff` between revisions: key names always, values only with `--show-values` and only
/// for a caller RBAC lets read the revisions; `override` in one region as the caller, which
/// the rollout's status then reports, and which the next declared revision wins over.
async fn diff_and_override(world: &World) {
    let name = "diverted";
    world.create_rollout(&open_rollout_yaml(name)).await;
    wait_complete(world, name, "r1").await;
    change_data(
        world,
        name,
        serde_json::json!({ "timeout_ms": VALUE_2, "mode": null, "banner": "on" }),
    )
    .await;
    wait_complete(world, name, "r2").await;

    // The viewer reads rollouts but not ControllerRevisions: refused, clearly, no value.
    for args in [
        &["diff", name][..],
        &["diff", name, "r1", "r2", "--show-values"][..],
    ] {
        let (code, stdout, stderr) = text(&plugin(world, User::Viewer, args, CALL).await);
        assert_eq!(code, Some(1), "viewer {args:?}: {stdout}{stderr}");
        assert!(
            stderr.contains("you may not read the revisions of configrollout team/diverted"),
            "a clear refusal: {stderr}"
        );
        for value in [VALUE, VALUE_2, MODE] {
            assert!(
                !stdout.contains(value) && !stderr.contains(value),
                "{stdout}{stderr}"
            );
        }
    }

    // The admin may: names and masks by default, values only when asked.
    let (code, masked, stderr) = text(&plugin(world, User::Admin, &["diff", name], CALL).await);
    assert_eq!(code, Some(0), "diff: {stderr}");
    assert_eq!(
        masked,
        "\
--- team/diverted r1
+++ team/diverted r2
+ banner = ***
- mode (was ***)
~ timeout_ms: *** -> ***
1 added, 1 changed, 1 removed (values masked; --show-values to see them)
"
    );
    let (code, shown, stderr) = text(
        &plugin(
            world,
            User::Admin,
            &["diff", name, "r1", "r2", "--show-values"],
            CALL,
        )
        .await,
    );
    assert_eq!(code, Some(0), "diff --show-values: {stderr}");
    assert!(
        shown.contains(&format!("~ timeout_ms: \"{VALUE}\" -> \"{VALUE_2}\"")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("- mode (was \"{MODE}\")")),
        "{shown}"
    );
    let (code, _, stderr) = text(&plugin(world, User::Admin, &["diff", name, "r7"], CALL).await);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("keeps no revision r7 (kept: r1, r2)"),
        "{stderr}"
    );

    // An emergency override in region-2, as the region's admin, with a reason.
    let region_kubeconfig = world
        .lab
        .kubeconfig("region-2", User::Admin)
        .expect("region-2 kubeconfig");
    let (code, stdout, stderr) = in_region(
        world,
        ["override", name, "region-2"],
        &region_kubeconfig,
        &[
            &format!("timeout_ms={EMERGENCY}"),
            "--reason",
            "region-2 database is slow",
        ],
        CALL * 3,
    )
    .await;
    assert_eq!(code, Some(0), "override: {stdout}{stderr}");
    assert!(
        stdout.contains(
            "override written in region region-2 to configmap app/diverted as override:admin: \
             timeout_ms set"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("keys overridden there now: timeout_ms"),
        "{stdout}"
    );
    assert!(
        stdout.contains("reason recorded as configrollout.dev/override-reason: admin at "),
        "{stdout}"
    );
    assert!(!stdout.contains(EMERGENCY), "no value printed: {stdout}");
    let target: Api<ConfigMap> = Api::namespaced(world.region("region-2"), APP);
    let recorded = within("read the overridden target", target.get(name))
        .await
        .annotations()
        .get("configrollout.dev/override-reason")
        .cloned()
        .unwrap_or_default();
    assert!(
        recorded.starts_with("admin at ") && recorded.ends_with(": region-2 database is slow"),
        "the reason is kept on the target: {recorded}"
    );
    let held = world.target_data("region-2", name).await.expect("target");
    assert_eq!(held.get("timeout_ms").map(String::as_str), Some(EMERGENCY));
    assert_eq!(held.get("banner").map(String::as_str), Some("on"));
    for region in ["region-1", "region-3"] {
        assert_eq!(
            world
                .target_data(region, name)
                .await
                .and_then(|data| data.get("timeout_ms").cloned())
                .as_deref(),
            Some(VALUE_2),
            "{region} untouched"
        );
    }

    // The rollout's status reports the override (names only) once the controller looks.
    eventually("status lists the overridden key", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let region = region_status(&rollout, "region-2")?;
        (region.overridden_keys == vec!["timeout_ms".to_owned()]).then_some(())
    })
    .await;
    // The override still holds: r2, declared before it, does not clobber it.
    assert_eq!(
        world
            .target_data("region-2", name)
            .await
            .and_then(|data| data.get("timeout_ms").cloned())
            .as_deref(),
        Some(EMERGENCY)
    );

    // `diff --region` shows where a region's target departs from the current revision.
    let region_1_kubeconfig = world
        .lab
        .kubeconfig("region-1", User::Admin)
        .expect("region-1 kubeconfig");
    let (code, stdout, stderr) = in_region(
        world,
        ["diff", name, "region-2"],
        &region_kubeconfig,
        &[],
        CALL,
    )
    .await;
    assert_eq!(code, Some(0), "diff --region: {stderr}");
    assert_eq!(
        stdout,
        "\
--- team/diverted r2
+++ region region-2 configmap app/diverted
~ timeout_ms: *** -> ***
0 added, 1 changed, 0 removed (values masked; --show-values to see them)
"
    );
    let (code, stdout, stderr) = in_region(
        world,
        ["diff", name, "region-2"],
        &region_kubeconfig,
        &["--show-values"],
        CALL,
    )
    .await;
    assert_eq!(code, Some(0), "diff --region --show-values: {stderr}");
    assert!(
        stdout.contains(&format!("~ timeout_ms: \"{VALUE_2}\" -> \"{EMERGENCY}\"")),
        "{stdout}"
    );
    let (code, stdout, stderr) = in_region(
        world,
        ["diff", name, "region-1"],
        &region_1_kubeconfig,
        &[],
        CALL,
    )
    .await;
    assert_eq!(code, Some(0), "diff --region region-1: {stderr}");
    assert!(
        stdout.ends_with("\n0 added, 0 changed, 0 removed\n"),
        "region-1 holds r2: {stdout}"
    );

    // A revision declared after the override wins over it.
    change_data(world, name, serde_json::json!({ "timeout_ms": VALUE_3 })).await;
    let done = wait_complete(world, name, "r3").await;
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(
            world
                .target_data(region, name)
                .await
                .and_then(|data| data.get("timeout_ms").cloned())
                .as_deref(),
            Some(VALUE_3),
            "{region} holds r3"
        );
    }
    let region_2 = region_status(&done, "region-2").expect("region-2 in status");
    assert!(region_2.overridden_keys.is_empty(), "{region_2:?}");

    // Someone who may not write in the region is refused there, nothing written.
    let viewer_region = world
        .lab
        .kubeconfig("region-2", User::Viewer)
        .expect("region-2 viewer kubeconfig");
    let (code, stdout, stderr) = in_region(
        world,
        ["override", name, "region-2"],
        &viewer_region,
        &["timeout_ms=1"],
        CALL * 3,
    )
    .await;
    assert_eq!(code, Some(1), "viewer override: {stdout}{stderr}");
    assert!(
        stderr.contains("writing the override in region region-2 as viewer: "),
        "{stderr}"
    );
    assert_eq!(
        world
            .target_data("region-2", name)
            .await
            .and_then(|data| data.get("timeout_ms").cloned())
            .as_deref(),
        Some(VALUE_3)
    );
}

/// Issue 42's forgery: someone who may edit ConfigMaps in region-2 keeps an entry's stamp
/// in the companion, makes its value larger (equal stamps are won by the larger value)
/// and changes the digest annotation, so that the target would look like the
/// controller's own interrupted write. The next revision halts at once naming region-2,
/// and the forged value reaches no target; `repair-state` rebuilds the state from the
/// hub's stable revision, and after `retry` every region holds the new revision.
async fn a_forged_state_halts_and_repair_state_mends_it(world: &World) {
    let name = "forged";
    let yaml = format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata: {{name: {name}, namespace: {TEAM}}}\nspec:\n  target: {{namespace: {APP}, name: {name}}}\n  data: {{rate: \"100\"}}\n  stages:\n    - {{name: canary, regions: {{names: [region-1]}}}}\n    - {{name: prod, regions: {{names: [region-2, region-3]}}, maxParallel: 2}}\n"
    );
    world.create_rollout(&yaml).await;
    wait_complete(world, name, "r1").await;

    let maps: Api<ConfigMap> = Api::namespaced(world.region("region-2"), APP);
    let companion = format!("{name}{COMPANION_SUFFIX}");
    let read = within("read the companion", maps.get(&companion)).await;
    let state = read
        .data
        .as_ref()
        .and_then(|data| data.get(STATE_KEY))
        .cloned()
        .expect("the companion holds a state");
    assert!(state.contains("[\"rate\",\"100\","), "{state}");
    let forged = state.replace("[\"rate\",\"100\",", "[\"rate\",\"9999\",");
    let patch = serde_json::json!({
        "metadata": {"annotations": {DIGEST_ANNOTATION: "forged"}},
        "data": {STATE_KEY: forged},
    });
    within(
        "forge the companion",
        maps.patch(&companion, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;

    change_data(world, name, serde_json::json!({"rate": "200"})).await;
    let halted = world.wait_phase(name, "Halted", PROGRESS).await;
    let why = halted
        .status
        .as_ref()
        .and_then(|status| status.condition("Halted"))
        .cloned()
        .expect("Halted condition");
    assert_eq!(why.reason, "TamperedState", "{why:?}");
    assert!(why.message.contains("region-2"), "{}", why.message);
    assert!(!events(world, name, "TamperedState").await.is_empty());
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("rate", "100")])),
            "{region}: nothing written, the forged value nowhere"
        );
    }

    let region_kubeconfig = world
        .lab
        .kubeconfig("region-2", User::Admin)
        .expect("region-2 kubeconfig");
    let (code, stdout, stderr) = in_region(
        world,
        ["repair-state", name, "region-2"],
        &region_kubeconfig,
        &[],
        CALL * 3,
    )
    .await;
    assert_eq!(code, Some(0), "repair-state: {stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "replaced the state of configmap {APP}/{name} in region region-2 as admin from r1"
        )),
        "{stdout}"
    );
    let (code, stdout, stderr) = text(&plugin(world, User::Admin, &["retry", name], CALL).await);
    assert_eq!(code, Some(0), "retry: {stdout}{stderr}");
    wait_complete(world, name, "r2").await;
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("rate", "200")])),
            "{region} holds r2"
        );
    }
    // The state is signed again: a second repair finds nothing to do.
    let (code, stdout, stderr) = in_region(
        world,
        ["repair-state", name, "region-2"],
        &region_kubeconfig,
        &[],
        CALL * 3,
    )
    .await;
    assert_eq!(code, Some(0), "repair-state again: {stdout}{stderr}");
    assert!(
        stdout.contains("is intact: nothing was written"),
        "{stdout}"
    );
}

/// A state without a MAC (as a release before MACs wrote it) is refused like a forged
/// one; a controller run with `--accept-unsigned-states`, the upgrade aid, trusts it,
/// signs it, and the retried revision completes.
async fn an_unsigned_state_is_refused_unless_the_upgrade_aid_signs_it(
    world: &World,
    controller: LabChild,
) -> LabChild {
    let name = "forged";
    let maps: Api<ConfigMap> = Api::namespaced(world.region("region-2"), APP);
    let companion = format!("{name}{COMPANION_SUFFIX}");
    let strip = serde_json::json!({"metadata": {"annotations": {STATE_MAC_ANNOTATION: null}}});
    within(
        "strip the MAC",
        maps.patch(&companion, &PatchParams::default(), &Patch::Merge(&strip)),
    )
    .await;
    change_data(world, name, serde_json::json!({"rate": "300"})).await;
    let halted = world.wait_phase(name, "Halted", PROGRESS).await;
    let reason = halted
        .status
        .as_ref()
        .and_then(|status| status.condition("Halted"))
        .map(|condition| condition.reason.clone());
    assert_eq!(reason.as_deref(), Some("TamperedState"));

    controller.stop();
    let upgrading = world.start_controller_with(
        "controller-upgrading",
        "127.0.0.1:0",
        &["--accept-unsigned-states"],
    );
    let signed = eventually("the state is signed", PROGRESS, || async {
        let read = within("read the companion", maps.get(&companion)).await;
        read.annotations()
            .contains_key(STATE_MAC_ANNOTATION)
            .then_some(())
    });
    signed.await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (code, stdout, stderr) = text(&plugin(world, User::Admin, &["retry", name], CALL).await);
    assert_eq!(code, Some(0), "retry: {stdout}{stderr}");
    wait_complete(world, name, "r3").await;
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("rate", "300")])),
            "{region} holds r3"
        );
    }
    upgrading
}

/// Issue 42's key continuity: `rotate-key` puts a new key in the Secret and keeps the old
/// one as `previous`. The running controller reads it without a restart and signs every
/// region's state with it, and nothing re-runs: no revision declared, no target written.
/// A second rotation (which drops the oldest key) is refused while a region is still
/// signed with the key it would drop, and allowed once every region is signed again.
async fn rotating_the_key_reruns_nothing(world: &World) {
    let name = "forged";
    let before = world.rollout(name).await;
    let status = before.status.clone().expect("status");
    let revision = status.revision.clone().expect("a revision");
    let mut targets_before = Vec::new();
    for region in ["region-1", "region-2", "region-3"] {
        let maps: Api<ConfigMap> = Api::namespaced(world.region(region), APP);
        let target = within("read the target", maps.get(name)).await;
        targets_before.push((region, target.resource_version()));
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(world.hub.clone(), "configrollout-system");
    let key_of = |secret: &k8s_openapi::api::core::v1::Secret| {
        configrollout::reconcile::digest_keys::from_secret(secret).expect("a digest key")
    };
    let old = key_of(&within("read the key", secrets.get("configrollout-digest-key")).await);

    let (code, stdout, stderr) = text(&plugin(world, User::Admin, &["rotate-key"], CALL).await);
    assert_eq!(code, Some(0), "rotate-key: {stdout}{stderr}");
    let rotated = key_of(&within("read the key", secrets.get("configrollout-digest-key")).await);
    assert_ne!(rotated.id(), old.id());
    assert_eq!(rotated.previous_id(), Some(old.id()));
    assert!(stdout.contains(&rotated.id()), "{stdout}");

    // At once, before the controller has signed anything with the new key: a second
    // rotation would drop the key every region is signed with.
    let (code, stdout, stderr) = text(&plugin(world, User::Admin, &["rotate-key"], CALL).await);
    assert_ne!(code, Some(0), "a second rotation went through: {stdout}");
    assert!(stderr.contains("not rotated"), "{stderr}");
    assert!(
        stderr.contains(&format!("{TEAM}/{name} region")),
        "{stderr}"
    );

    let signed = eventually("every region signed with the new key", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let regions = rollout.status?.regions;
        (regions.len() == 3
            && regions
                .iter()
                .all(|region| region.state_key_id.as_deref() == Some(rotated.id().as_str())))
        .then_some(())
    });
    signed.await;
    let after = world.rollout(name).await;
    let after_status = after.status.expect("status");
    assert_eq!(after_status.revision.as_deref(), Some(revision.as_str()));
    assert_eq!(
        after_status.history.len(),
        status.history.len(),
        "a revision was declared"
    );
    assert!(condition_true(&world.rollout(name).await, "Complete"));
    let only_new = configrollout::crdt::DigestKey::new(&{
        let secret = within("read the key", secrets.get("configrollout-digest-key")).await;
        secret.data.expect("data")["key"].0.clone()
    })
    .expect("the new key");
    for (region, version) in &targets_before {
        let maps: Api<ConfigMap> = Api::namespaced(world.region(region), APP);
        let target = within("read the target", maps.get(name)).await;
        assert_eq!(
            &target.resource_version(),
            version,
            "{region}: the target was written"
        );
        let companion = within(
            "read the companion",
            maps.get(&format!("{name}{COMPANION_SUFFIX}")),
        )
        .await;
        let state = companion.data.as_ref().expect("data")[STATE_KEY].clone();
        let mac = companion.annotations()[STATE_MAC_ANNOTATION].clone();
        assert!(
            configrollout::crdt::state_mac_matches(&only_new, APP, name, &state, &mac),
            "{region}: the state is not signed with the new key"
        );
    }

    // Once every region of every rollout is signed with it, the next rotation is allowed.
    let again = eventually("a second rotation is allowed", PROGRESS * 2, || async {
        let (code, _, _) = text(&plugin(world, User::Admin, &["rotate-key"], CALL).await);
        (code == Some(0)).then_some(())
    });
    again.await;
    change_data(world, name, serde_json::json!({"rate": "400"})).await;
    wait_complete(world, name, "r4").await;
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("rate", "400")])),
            "{region} holds r4"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_plugin_on_the_lab() {
    let world = World::start(LabOptions::default()).await;
    world
        .lab
        .install_approver_policy()
        .await
        .expect("install the approver policy");
    let controller = world.start_controller("controller-a");
    approve_with_the_plugin(&world).await;
    a_pinned_approval_never_lands_on_a_newer_revision(&world).await;
    pause_resume_and_abort(&world).await;
    a_query_typo_is_caught_before_any_region(&world).await;
    diff_and_override(&world).await;
    a_forged_state_halts_and_repair_state_mends_it(&world).await;
    let controller =
        an_unsigned_state_is_refused_unless_the_upgrade_aid_signs_it(&world, controller).await;
    rotating_the_key_reruns_nothing(&world).await;
    controller.stop();
    text_in_status_prints_inert(&world).await;
}

/// Issue 29: whatever puts a control character or a bidirectional override into a
/// rollout's status (a tenant's text echoed in a message, a region's error), `list`,
/// `get` and their `-w` forms print it replaced, never raw: an ESC sequence cannot clear
/// the screen of everyone who lists rollouts, nor a CR overwrite a line. Written here
/// by the admin with the controller stopped, so that it stays as written.
async fn text_in_status_prints_inert(world: &World) {
    let hostile = "gate errors: \u{1b}[2J\u{1b}[H\rALL CLEAR \u{202e}exe.txt\u{9b}31m";
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = serde_json::json!({"status": {"phase": "Halted", "conditions": [{
        "type": "Halted",
        "status": "True",
        "reason": "GateFailed",
        "message": hostile,
        "lastTransitionTime": now,
    }]}});
    let get = Watching::start(world, &["get", "plugged", "-w"]);
    let list = Watching::start(world, &["list", "-w"]);
    within(
        "write hostile text into a status",
        world
            .rollouts()
            .patch_status("plugged", &PatchParams::default(), &Patch::Merge(&status)),
    )
    .await;
    get.wait_for("ALL CLEAR").await;
    let raw = |text: &str| {
        text.chars()
            .find(|c| matches!(c, '\u{1b}' | '\r' | '\u{202e}' | '\u{9b}'))
    };
    let (_, once, _) = text(&plugin(world, User::Viewer, &["get", "plugged"], CALL).await);
    assert!(once.contains("ALL CLEAR"), "{once}");
    assert_eq!(raw(&once), None, "get printed it raw");
    let (_, listed, _) = text(&plugin(world, User::Viewer, &["list"], CALL).await);
    assert!(listed.contains("ALL CLEAR"), "{listed}");
    assert_eq!(raw(&listed), None, "list printed it raw");
    for (what, watched) in [("get -w", get.stop().await), ("list -w", list.stop().await)] {
        assert_eq!(raw(&watched), None, "{what} printed it raw");
    }
}
