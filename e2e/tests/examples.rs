//! Issue 37: the manifests of `examples/` do on real clusters what their comments and
//! `examples/README.md` say. The files are read as they are in the repository (no copy),
//! every document applied with server-side apply as the lab's admin, with strict field
//! validation, so a field that does not exist fails here; what a comment says the
//! platform admin runs (the grants of shared-namespace.yaml) is run with the lab's
//! kubectl. Only the rollouts' durations are shortened first ([`for_the_lab`]): the
//! examples keep realistic intervals, windows and pauses (minutes), which the lab need
//! not wait through. One lab of two regions
//! (`region-1` the canary, `region-2` production, by their `configrollout.dev/tier`
//! labels), one controller, every example checked at once.
//!
//! Without a lab: every file of `examples/` has a check here, and passes `kubectl
//! configrollout lint` and the conventions the examples promise (hub namespaces, the
//! target namespace `app`, stages chosen by tier).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use configrollout::api::{
    ConfigRollout, GateStatus, GateVerdict, StageApproval, StageApprovalSpec, StageState,
    StageStatus, TargetClaim, claim_name,
};
use configrollout_e2e::{HUB, LabOptions, TIER_LABEL, User};
use k8s_openapi::jiff::SignedDuration;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams};
use kube::discovery::{self, Scope};
use serde_json::{Value, json};

use support::*;

/// Every file of `examples/`, each checked by [`check`]: a file added there without a
/// check fails [`every_example_has_a_check`].
const EXAMPLES: [&str; 7] = [
    "approval-four-eyes.yaml",
    "compare-with-baseline.yaml",
    "feature-flag.yaml",
    "platform-gate-template.yaml",
    "rate-limit-with-gate.yaml",
    "remove-a-key.yaml",
    "shared-namespace.yaml",
];
const REGIONS: [&str; 2] = ["region-1", "region-2"];
/// The field manager of the applies, as `kubectl apply --server-side` has its own.
const FIELD_MANAGER: &str = "examples";
/// The lab's stand-ins for the examples' durations.
const LAB_GATE_INTERVAL: &str = "2s";
const LAB_INITIAL_DELAY: &str = "2s";
const LAB_PAUSE: &str = "5s";
const LAB_PAUSE_SECONDS: i64 = 5;
/// Who last changed a rollout's spec, as the apiserver stamps it
/// (`policies/mutating/spec-author.yaml`).
const SPEC_AUTHOR: &str = "configrollout.dev/spec-author";

fn examples_dir() -> PathBuf {
    configrollout_e2e::repository_root().join("examples")
}

/// The documents of `examples/<file>`, as JSON, in order (empty documents skipped).
fn documents(file: &str) -> Vec<Value> {
    let path = examples_dir().join(file);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

fn kind(document: &Value) -> &str {
    document["kind"].as_str().unwrap_or_default()
}

fn is_rollout(document: &Value) -> bool {
    kind(document) == "ConfigRollout"
}

/// The ConfigRollouts of `examples/<file>`.
fn rollouts_of(file: &str) -> Vec<Value> {
    documents(file).into_iter().filter(is_rollout).collect()
}

/// The one ConfigRollout of `examples/<file>`.
fn the_rollout_of(file: &str) -> Value {
    let mut rollouts = rollouts_of(file);
    assert_eq!(rollouts.len(), 1, "{file}: one ConfigRollout");
    rollouts.remove(0)
}

fn name_of(document: &Value) -> &str {
    document["metadata"]["name"]
        .as_str()
        .expect("metadata.name")
}

fn namespace_of(document: &Value) -> &str {
    document["metadata"]["namespace"]
        .as_str()
        .expect("metadata.namespace")
}

fn target_of(rollout: &Value) -> &str {
    rollout["spec"]["target"]["name"]
        .as_str()
        .expect("spec.target.name")
}

/// `spec.data` of a rollout document.
fn data_of(rollout: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(rollout["spec"]["data"].clone()).expect("spec.data: strings")
}

/// The rollout as the lab runs it: every duration an adopter waits through in minutes
/// shortened to seconds, within what the spec allows (gate intervals of at least 1 s).
/// Gates sample every 2 s after at most 2 s (`initialDelay`; the lab controller's settle
/// time is 4 s), comparisons look at 10 s of 1 s points (at least 8 a side), and pauses,
/// a stage's bake or the contract step's, last 5 s. Everything else is the file's.
fn for_the_lab(mut rollout: Value) -> Value {
    let spec = rollout
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .expect("spec");
    if let Some(gates) = spec.get_mut("gates").and_then(Value::as_array_mut) {
        for gate in gates {
            let gate = gate.as_object_mut().expect("a gate");
            gate.insert("interval".into(), json!(LAB_GATE_INTERVAL));
            if gate.contains_key("initialDelay") {
                gate.insert("initialDelay".into(), json!(LAB_INITIAL_DELAY));
            }
            if let Some(compare) = gate.get_mut("compare").and_then(Value::as_object_mut) {
                compare.insert("window".into(), json!("10s"));
                compare.insert("step".into(), json!("1s"));
                compare.insert("minSamples".into(), json!(8));
            }
        }
    }
    if let Some(stages) = spec.get_mut("stages").and_then(Value::as_array_mut) {
        for stage in stages {
            if let Some(pause) = stage.get_mut("pause") {
                pause["duration"] = json!(LAB_PAUSE);
            }
        }
    }
    if let Some(pause) = spec
        .get_mut("strategy")
        .and_then(|s| s.pointer_mut("/contract/pause"))
    {
        pause["duration"] = json!(LAB_PAUSE);
    }
    rollout
}

// ----------------------------------------------------------------------------------------
// Without a lab.

/// A file added to `examples/` (or one removed) without its check here fails this.
#[test]
fn every_example_has_a_check() {
    let mut found: Vec<String> = std::fs::read_dir(examples_dir())
        .expect("examples/ exists")
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".yml"))
        .collect();
    found.sort();
    assert_eq!(
        found, EXAMPLES,
        "examples/ and the checks of e2e/tests/examples.rs disagree: give a new example its \
         check (and a row in examples/README.md)"
    );
    let readme = std::fs::read_to_string(examples_dir().join("README.md")).expect("README");
    for file in EXAMPLES {
        assert!(
            readme.contains(&format!("[`{file}`]({file})")),
            "examples/README.md says what {file} shows"
        );
    }
}

/// Each example passes the controller's own validation offline, as the README tells an
/// adopter to check a file before applying it.
#[test]
fn every_example_passes_lint() {
    for file in EXAMPLES {
        let path = examples_dir().join(file);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_lab-plugin"))
            .arg("lint")
            .arg("-f")
            .arg(&path)
            .env_remove("KUBECONFIG")
            .output()
            .expect("the plugin runs");
        assert!(
            output.status.success(),
            "lint -f {file}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// What every example promises an adopter: a rollout in a team namespace of the hub,
/// writing the region namespace `app`, in stages chosen by the tier label only (so it
/// runs on any fleet labelled so), with realistic durations the lab has to shorten.
#[test]
fn every_example_follows_the_conventions() {
    let mut rollouts = 0;
    for file in EXAMPLES {
        for document in documents(file) {
            // A platform's check a team's rollout uses is shipped beside it, for `lint`
            // to resolve and the admin to apply; anything else an admin does goes in a
            // comment.
            assert!(
                is_rollout(&document) || kind(&document) == "ClusterGateTemplate",
                "{file}: ConfigRollouts only, which a team applies (and `lint` reads), and the \
                 ClusterGateTemplates they use; what a platform admin does goes in a comment: {}",
                kind(&document)
            );
        }
        for rollout in rollouts_of(file) {
            rollouts += 1;
            let name = name_of(&rollout);
            assert!(
                ["team", "payments"].contains(&namespace_of(&rollout)),
                "{file}: {name} in a team namespace"
            );
            assert_eq!(
                rollout["spec"]["target"]["namespace"], "app",
                "{file}: {name} writes app"
            );
            let stages = rollout["spec"]["stages"].as_array().expect("stages");
            let tiers: Vec<&str> = stages
                .iter()
                .map(|stage| {
                    let regions = &stage["regions"];
                    assert!(
                        regions.get("names").is_none(),
                        "{file}: {name}: no region names"
                    );
                    regions["selector"]["matchLabels"][TIER_LABEL]
                        .as_str()
                        .unwrap_or_else(|| panic!("{file}: {name}: stages by {TIER_LABEL}"))
                })
                .collect();
            assert_eq!(tiers, ["canary", "production"], "{file}: {name}");
            if let Some(gates) = rollout["spec"]["gates"].as_array() {
                for gate in gates {
                    let interval = gate["interval"].as_str().unwrap_or("1m");
                    assert!(
                        interval.ends_with('m') || interval.ends_with('h'),
                        "{file}: {name}: a realistic gate interval, not {interval}"
                    );
                }
            }
        }
    }
    assert_eq!(rollouts, 8, "seven examples, one with two rollouts");
    let grants = admin_commands("shared-namespace.yaml");
    for namespace in ["team", "payments"] {
        assert!(
            grants.iter().any(|command| command.starts_with(&format!(
                "kubectl annotate namespace {namespace} --overwrite \
                 configrollout.dev/allowed-target-namespaces=app"
            ))),
            "shared-namespace.yaml: the admin grants {namespace} the region namespace: {grants:?}"
        );
    }
}

// ----------------------------------------------------------------------------------------
// On the lab.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_examples_do_what_they_say_on_the_lab() {
    let world = World::start(LabOptions {
        regions: 2,
        ..LabOptions::default()
    })
    .await;
    for (region, tier) in REGIONS.iter().zip(["canary", "production"]) {
        assert_eq!(world.lab.tier(region).expect("a lab region"), tier);
    }
    install_approval_policies(&world).await;
    // The platform admin's commands an example's comment gives (the grants of
    // shared-namespace.yaml) go first, before the controller starts: a Namespace's change
    // wakes no rollout, so a rollout looked at before its grant was seen would wait for
    // its next look.
    for file in EXAMPLES {
        for command in admin_commands(file) {
            run_kubectl(&world, file, &command).await;
        }
    }
    // The lab's controller runs without --four-eyes: the four-eyes checked here is the
    // example's own `spec.fourEyes`.
    let _controller = world.start_controller("controller-examples");
    let started = Instant::now();
    futures::future::join_all(EXAMPLES.map(|file| check(&world, file))).await;
    eprintln!("every example checked in {:?}", started.elapsed());
}

/// Applies the ConfigRollouts of `file` and checks what the example promises.
async fn check(world: &World, file: &'static str) {
    let started = Instant::now();
    match file {
        "feature-flag.yaml" => a_flag_reaches_production_after_the_canary_baked(world, file).await,
        "rate-limit-with-gate.yaml" => limits_pass_their_gate_in_every_region(world, file).await,
        "compare-with-baseline.yaml" => the_canary_is_compared_with_production(world, file).await,
        "remove-a-key.yaml" => {
            a_renamed_key_goes_only_after_the_new_one_is_everywhere(world, file).await
        }
        "approval-four-eyes.yaml" => production_waits_for_a_second_person(world, file).await,
        "shared-namespace.yaml" => two_teams_share_one_config_map(world, file).await,
        "platform-gate-template.yaml" => a_team_gate_uses_the_platform_check(world, file).await,
        other => panic!("no check for examples/{other}"),
    }
    eprintln!("examples/{file}: checked in {:?}", started.elapsed());
}

/// The commands of the platform admin that a comment of `examples/<file>` gives (creating
/// or annotating a Namespace), one per line, as written after the `#`.
fn admin_commands(file: &str) -> Vec<String> {
    let path = examples_dir().join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(str::trim)
        .filter(|command| {
            command.starts_with("kubectl create namespace ")
                || command.starts_with("kubectl annotate namespace ")
        })
        .map(str::to_owned)
        .collect()
}

/// Runs `command` (a `kubectl ...` line of an example's comment) with the lab's kubectl,
/// as the hub's admin.
async fn run_kubectl(world: &World, file: &str, command: &str) {
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let kubeconfig = world.lab.kubeconfig(HUB, User::Admin).expect("kubeconfig");
    let output = tokio::process::Command::new(world.lab.kubectl())
        .env("KUBECONFIG", &kubeconfig)
        .args(&args)
        .kill_on_drop(true)
        .output();
    let output = within(&format!("{file}: {command}"), output).await;
    assert!(
        output.status.success(),
        "{file}: {command}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Applies `document` as the lab's admin, as `kubectl apply --server-side` does; a field
/// the API does not have is refused (strict field validation), not dropped.
async fn apply(world: &World, document: &Value) -> DynamicObject {
    let object: DynamicObject =
        serde_json::from_value(document.clone()).expect("a Kubernetes object");
    let types = object.types.clone().expect("apiVersion and kind");
    let name = object.name_any();
    let what = format!("apply {} {name}", types.kind);
    let gvk = GroupVersionKind::try_from(&types).expect("an apiVersion");
    let (resource, capabilities) = within(&what, discovery::pinned_kind(&world.hub, &gvk)).await;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Cluster => Api::all_with(world.hub.clone(), &resource),
        Scope::Namespaced => Api::namespaced_with(
            world.hub.clone(),
            object
                .namespace()
                .as_deref()
                .expect("a namespaced object names its namespace"),
            &resource,
        ),
    };
    let params = PatchParams::apply(FIELD_MANAGER)
        .force()
        .validation_strict();
    within(&what, api.patch(&name, &params, &Patch::Apply(&object))).await
}

/// Installs the approval policies (`kubectl apply -f policies/ -f policies/mutating/`
/// installs them all, on a 1.36+ hub): the apiserver binds a StageApproval to its creator
/// and stamps who changed a rollout's spec, which four-eyes reads. Waits until the stamp is made, so that the rollouts
/// applied later carry their author.
async fn install_approval_policies(world: &World) {
    for file in ["stageapproval-approver.yaml", "mutating/spec-author.yaml"] {
        let path = configrollout_e2e::repository_root()
            .join("policies")
            .join(file);
        world
            .lab
            .apply(HUB, User::Admin, &path)
            .await
            .unwrap_or_else(|e| panic!("install {file}: {e}"));
    }
    let probe: ConfigRollout = serde_saphyr::from_str(&rollout_yaml(
        "policy-probe",
        "  data: {k: v}\n  stages:\n    - {name: only, regions: {names: [region-1]}}\n",
    ))
    .expect("rollout YAML");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let rollouts = world.rollouts();
    let (rollouts, probe, dry_run) = (&rollouts, &probe, &dry_run);
    eventually(
        "the spec-author policy is in force",
        PROGRESS,
        || async move {
            let admitted = within("dry-run a rollout", rollouts.create(dry_run, probe)).await;
            (admitted.annotations().get(SPEC_AUTHOR).map(String::as_str) == Some("1 admin"))
                .then_some(())
        },
    )
    .await;
}

fn rollouts_in(world: &World, namespace: &str) -> Api<ConfigRollout> {
    Api::namespaced(world.hub.clone(), namespace)
}

/// Waits until `namespace/name` has finished `revision` one way or another, and checks
/// that it completed; otherwise fails showing its conditions and stages (metrics and
/// names, never values).
async fn completes(world: &World, namespace: &str, name: &str, revision: &str) -> ConfigRollout {
    let api = rollouts_in(world, namespace);
    let deadline = Instant::now() + PROGRESS;
    let rollout = loop {
        let rollout = within("read the rollout", api.get(name)).await;
        let finished = matches!(
            phase_of(&rollout).as_deref(),
            Some("Complete" | "Halted" | "RolledBack" | "Refused")
        );
        let status = rollout.status.as_ref();
        if finished && status.and_then(|status| status.revision.as_deref()) == Some(revision) {
            break rollout;
        }
        // Not finished in time: what it was doing (metrics and names, never values).
        assert!(
            Instant::now() < deadline,
            "{namespace}/{name} finishes {revision}: not within {PROGRESS:?}; phase {:?}, \
             conditions {:?}, stages {}",
            phase_of(&rollout),
            status.map(|status| &status.conditions),
            serde_json::to_string_pretty(&status.map(|status| &status.stages)).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let status = rollout.status.as_ref();
    assert_eq!(
        phase_of(&rollout).as_deref(),
        Some("Complete"),
        "{namespace}/{name}: conditions {:?}, stages {}",
        status.map(|status| &status.conditions),
        serde_json::to_string_pretty(&status.map(|status| &status.stages)).unwrap_or_default()
    );
    rollout
}

fn stage<'a>(rollout: &'a ConfigRollout, name: &str) -> &'a StageStatus {
    rollout
        .status
        .as_ref()
        .and_then(|status| status.stages.iter().find(|stage| stage.name == name))
        .unwrap_or_else(|| panic!("stage {name} in the status of {}", rollout.name_any()))
}

/// The window of `gate` in `region` in `stage`.
fn window<'a>(stage: &'a StageStatus, gate: &str, region: &str) -> &'a GateStatus {
    stage
        .gates
        .iter()
        .find(|window| window.name == gate && window.region.as_deref() == Some(region))
        .unwrap_or_else(|| panic!("no window of {gate} in {region} in stage {}", stage.name))
}

fn at(
    time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    what: &str,
) -> k8s_openapi::jiff::Timestamp {
    time.unwrap_or_else(|| panic!("{what} is recorded")).0
}

/// Checks that every lab region's target `name` holds exactly `expected`.
async fn every_region_holds(
    world: &World,
    file: &str,
    name: &str,
    expected: &BTreeMap<String, String>,
) {
    for region in REGIONS {
        assert_eq!(
            world.target_data(region, name).await.as_ref(),
            Some(expected),
            "{file}: app/{name} in {region}"
        );
    }
}

/// feature-flag.yaml: the flag reaches the canary, the canary bakes for its pause, then
/// production gets the flag; the rollout completes.
async fn a_flag_reaches_production_after_the_canary_baked(world: &World, file: &str) {
    let rollout = the_rollout_of(file);
    apply(world, &for_the_lab(rollout.clone())).await;
    let done = completes(world, namespace_of(&rollout), name_of(&rollout), "r1").await;
    every_region_holds(world, file, target_of(&rollout), &data_of(&rollout)).await;
    let canary = stage(&done, "canary");
    let production = stage(&done, "production");
    let baked = at(canary.passed_at.as_ref(), "canary passed")
        .duration_since(at(canary.verified_at.as_ref(), "canary verified"));
    assert!(
        baked >= SignedDuration::from_secs(LAB_PAUSE_SECONDS - 1),
        "{file}: the canary baked {baked:?}, its pause is {LAB_PAUSE}"
    );
    assert!(
        at(production.started_at.as_ref(), "production started")
            >= at(canary.passed_at.as_ref(), "canary passed"),
        "{file}: production started before the canary's pause ended: {:?}",
        done.status.as_ref().map(|status| &status.stages)
    );
}

/// rate-limit-with-gate.yaml: the error-ratio gate samples each region after its stage
/// is updated and passes with the count it asks for (the lab's workloads fail no
/// request); the limits reach every region. On failure it would roll back.
async fn limits_pass_their_gate_in_every_region(world: &World, file: &str) {
    let rollout = the_rollout_of(file);
    assert_eq!(rollout["spec"]["onFailure"], "Rollback", "{file}");
    let gate = &rollout["spec"]["gates"][0];
    let (gate_name, count) = (
        gate["name"].as_str().expect("gate name"),
        gate["count"].as_i64().expect("gate count"),
    );
    assert!(
        gate["query"]
            .as_str()
            .expect("query")
            .contains("{{region}}"),
        "{file}: one query for every region"
    );
    apply(world, &for_the_lab(rollout.clone())).await;
    let done = completes(world, namespace_of(&rollout), name_of(&rollout), "r1").await;
    every_region_holds(world, file, target_of(&rollout), &data_of(&rollout)).await;
    for (stage_name, region) in [("canary", "region-1"), ("production", "region-2")] {
        let window = window(stage(&done, stage_name), gate_name, region);
        assert_eq!(
            window.verdict,
            Some(GateVerdict::Passed),
            "{file}: {window:?}"
        );
        assert!(
            i64::from(window.successes) >= count,
            "{file}: {count} successful samples in {region}: {window:?}"
        );
    }
}

/// platform-gate-template.yaml: the platform's ClusterGateTemplate is applied first; the
/// team's gate samples it with the team's threshold in each region, the rollout
/// completes, and its status records the template and generation its windows used.
async fn a_team_gate_uses_the_platform_check(world: &World, file: &str) {
    let documents = documents(file);
    let template = documents
        .iter()
        .find(|document| kind(document) == "ClusterGateTemplate")
        .expect("the platform's template");
    apply(world, template).await;
    let rollout = the_rollout_of(file);
    let gate = &rollout["spec"]["gates"][0];
    assert_eq!(gate["template"]["name"], name_of(template), "{file}");
    apply(world, &for_the_lab(rollout.clone())).await;
    let done = completes(world, namespace_of(&rollout), name_of(&rollout), "r1").await;
    every_region_holds(world, file, target_of(&rollout), &data_of(&rollout)).await;
    let gate_name = gate["name"].as_str().expect("gate name");
    for (stage_name, region) in [("canary", "region-1"), ("production", "region-2")] {
        let window = window(stage(&done, stage_name), gate_name, region);
        assert_eq!(
            window.verdict,
            Some(GateVerdict::Passed),
            "{file}: {window:?}"
        );
    }
    let used = &done.status.as_ref().expect("status").gate_templates;
    assert_eq!(used.len(), 1, "{file}: {used:?}");
    assert_eq!(used[0].template, "ClusterGateTemplate error-ratio");
    let check = used[0].check.prometheus.as_ref().expect("a query check");
    assert_eq!(
        check.condition, "result < 0.02",
        "{file}: the team's threshold"
    );
    assert!(
        check.query.contains("[5m]") && check.query.contains("{{region}}"),
        "{file}: the default window, the region filled in per sample: {}",
        check.query
    );
}

/// compare-with-baseline.yaml: in the canary stage the comparison gate judges region-1
/// against region-2, not yet updated; in production, region-2 against its own window
/// before the change; the dry-run gate beside it is sampled and kept; it completes.
async fn the_canary_is_compared_with_production(world: &World, file: &str) {
    let rollout = the_rollout_of(file);
    let gates = rollout["spec"]["gates"].as_array().expect("gates");
    let compared = gates
        .iter()
        .find(|gate| gate.get("compare").is_some())
        .and_then(|gate| gate["name"].as_str())
        .expect("a comparison gate");
    let dry_run = gates
        .iter()
        .find(|gate| gate["dryRun"] == true)
        .and_then(|gate| gate["name"].as_str())
        .expect("a dry-run gate");
    apply(world, &for_the_lab(rollout.clone())).await;
    let done = completes(world, namespace_of(&rollout), name_of(&rollout), "r1").await;
    every_region_holds(world, file, target_of(&rollout), &data_of(&rollout)).await;

    let canary = stage(&done, "canary");
    let judged = window(canary, compared, "region-1");
    assert_eq!(
        judged.verdict,
        Some(GateVerdict::Passed),
        "{file}: {judged:?}"
    );
    let comparison = judged
        .samples
        .last()
        .and_then(|sample| sample.comparison.as_ref())
        .expect("both sides shown");
    assert_eq!(
        comparison.baseline_source, "regions region-2",
        "{file}: the canary against production, not yet updated"
    );
    assert!(
        comparison.canary.points >= 8 && comparison.baseline.points >= 8,
        "{file}: a whole window on each side: {comparison:?}"
    );
    let trial = window(canary, dry_run, "region-1");
    assert!(trial.dry_run, "{file}: {trial:?}");
    assert!(
        !trial.samples.is_empty(),
        "{file}: the dry run is sampled and kept: {trial:?}"
    );

    let judged = window(stage(&done, "production"), compared, "region-2");
    assert_eq!(
        judged.verdict,
        Some(GateVerdict::Passed),
        "{file}: {judged:?}"
    );
    let comparison = judged
        .samples
        .last()
        .and_then(|sample| sample.comparison.as_ref())
        .expect("both sides shown");
    assert!(
        comparison.baseline_source.starts_with("region-2 before "),
        "{file}: the last stage against its own past: {comparison:?}"
    );
}

/// remove-a-key.yaml: from the rollout before the rename (as the file's comment gives
/// it), the file's revision adds `timeout_ms` in every region before any region loses
/// `timeout_seconds`, the contract pause in between, and ends with the old key gone
/// everywhere.
async fn a_renamed_key_goes_only_after_the_new_one_is_everywhere(world: &World, file: &str) {
    const OLD: &str = "timeout_seconds";
    const NEW: &str = "timeout_ms";
    let after = the_rollout_of(file);
    let (namespace, name, target) = (namespace_of(&after), name_of(&after), target_of(&after));
    let renamed = data_of(&after);
    assert!(
        renamed.contains_key(NEW) && !renamed.contains_key(OLD),
        "{file} is the rollout after the rename: {:?}",
        renamed.keys()
    );
    let mut previous = renamed.clone();
    previous.remove(NEW);
    previous.insert(OLD.to_owned(), "3".to_owned());
    let mut before = for_the_lab(after.clone());
    before["spec"]["data"] = json!(previous);
    // Every region's workload follows the target: its loads show when each key came and
    // went.
    world
        .lab
        .watch_config_everywhere(APP, target)
        .await
        .expect("the workloads follow the target");
    apply(world, &before).await;
    completes(world, namespace, name, "r1").await;
    every_region_holds(world, file, target, &previous).await;

    apply(world, &for_the_lab(after.clone())).await;
    completes(world, namespace, name, "r2").await;
    every_region_holds(world, file, target, &renamed).await;

    let mut expanded_everywhere = SystemTime::UNIX_EPOCH;
    let mut histories = Vec::new();
    for region in REGIONS {
        let history = within("config history", world.lab.config_history(region)).await;
        let expanded = history
            .iter()
            .find(|load| load.present && load.keys.iter().any(|k| k == NEW))
            .map(|load| load.time)
            .unwrap_or_else(|| panic!("{file}: {region} never loaded {NEW}: {history:?}"));
        expanded_everywhere = expanded_everywhere.max(expanded);
        histories.push((region, history));
    }
    for (region, history) in histories {
        let contracted = history
            .iter()
            .filter(|load| load.present && load.revision == "r2")
            .find(|load| !load.keys.iter().any(|k| k == OLD))
            .map(|load| load.time)
            .unwrap_or_else(|| panic!("{file}: r2 never removed {OLD} in {region}: {history:?}"));
        let waited = contracted
            .duration_since(expanded_everywhere)
            .unwrap_or_else(|_| {
                panic!("{file}: {region} lost {OLD} before every region had {NEW}: {history:?}")
            });
        // The pause runs on the controller's clock from when it saw the last region
        // expanded; the workloads see writes a little after they land.
        assert!(
            waited >= Duration::from_secs(u64::try_from(LAB_PAUSE_SECONDS - 1).expect("positive")),
            "{file}: {region} lost {OLD} {waited:?} after the last region had {NEW}; the \
             contract pause is {LAB_PAUSE}"
        );
    }
}

/// approval-four-eyes.yaml: the canary is updated and bakes, then the rollout waits in
/// AwaitingApproval at production with production untouched; the approval of the admin
/// who applied it is refused (four-eyes), a second person's lets production go ahead.
async fn production_waits_for_a_second_person(world: &World, file: &str) {
    let rollout = the_rollout_of(file);
    assert_eq!(rollout["spec"]["fourEyes"], true, "{file}");
    let (namespace, name, target) = (
        namespace_of(&rollout),
        name_of(&rollout),
        target_of(&rollout),
    );
    assert_eq!(
        namespace, TEAM,
        "{file}: World::approve approves in the team namespace"
    );
    let expected = data_of(&rollout);
    apply(world, &for_the_lab(rollout.clone())).await;
    let waiting = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    let status = waiting.status.as_ref().expect("status");
    assert_eq!(
        status.current_stage.as_deref(),
        Some("production"),
        "{file}"
    );
    assert_eq!(
        stage(&waiting, "production").state,
        StageState::AwaitingApproval
    );
    assert_eq!(stage(&waiting, "canary").state, StageState::Passed);
    assert_eq!(
        world.target_data("region-1", target).await.as_ref(),
        Some(&expected)
    );
    assert_eq!(
        world.target_data("region-2", target).await,
        None,
        "{file}: production waits"
    );
    assert_eq!(
        waiting.annotations().get(SPEC_AUTHOR).map(String::as_str),
        Some("1 admin"),
        "{file}: the apiserver stamped who applied it"
    );

    // Its author approves it: refused, and said so.
    let own = format!("{name}-production-by-its-author");
    let spec = StageApprovalSpec::for_current_revision(
        &waiting,
        "production",
        User::Admin.name(),
        Some("my own change".to_owned()),
    )
    .expect("a declared revision with its digest in history");
    let approval = StageApproval {
        metadata: ObjectMeta {
            name: Some(own.clone()),
            ..ObjectMeta::default()
        },
        spec,
    };
    within(
        "the author approves",
        Api::<StageApproval>::namespaced(world.hub.clone(), TEAM)
            .create(&PostParams::default(), &approval),
    )
    .await;
    let own = own.as_str();
    eventually(
        &format!("{file}: the author's approval is refused"),
        PROGRESS,
        || async move {
            let rollout = world.rollout(name).await;
            let condition = rollout
                .status
                .as_ref()?
                .condition("AwaitingApproval")?
                .clone();
            (condition.status == "True" && condition.message.contains(own)).then_some(())
        },
    )
    .await;
    let still = world.rollout(name).await;
    assert_eq!(
        phase_of(&still).as_deref(),
        Some("AwaitingApproval"),
        "{file}"
    );
    assert_eq!(stage(&still, "production").approval, None, "{file}");
    assert_eq!(
        world.target_data("region-2", target).await,
        None,
        "{file}: production waits"
    );

    // A second person's approval counts.
    world
        .approve(User::ApproverAlice, name, "production", "r1")
        .await;
    let done = completes(world, namespace, name, "r1").await;
    let record = stage(&done, "production")
        .approval
        .clone()
        .expect("the approval is recorded");
    assert_eq!(record.approver, User::ApproverAlice.name(), "{file}");
    every_region_holds(world, file, target, &expected).await;
}

/// shared-namespace.yaml: two teams' rollouts, in two hub namespaces granted `app`,
/// write different keys of one ConfigMap: both complete, every region's ConfigMap holds
/// both teams' keys, and the TargetClaim names each key's rollout as its owner.
async fn two_teams_share_one_config_map(world: &World, file: &str) {
    let rollouts = rollouts_of(file);
    assert_eq!(rollouts.len(), 2, "{file}: two teams' rollouts");
    let namespaces: BTreeSet<&str> = rollouts.iter().map(namespace_of).collect();
    assert_eq!(namespaces.len(), 2, "{file}: in two hub namespaces");
    let target = target_of(&rollouts[0]);
    let mut both = BTreeMap::new();
    for rollout in &rollouts {
        assert_eq!(target_of(rollout), target, "{file}: one ConfigMap");
        for (key, value) in data_of(rollout) {
            assert!(
                both.insert(key.clone(), value).is_none(),
                "{file}: {key} is declared by both teams"
            );
        }
    }
    for rollout in &rollouts {
        apply(world, &for_the_lab(rollout.clone())).await;
    }
    for rollout in &rollouts {
        completes(world, namespace_of(rollout), name_of(rollout), "r1").await;
    }
    every_region_holds(world, file, target, &both).await;

    let claims: Api<TargetClaim> = Api::all(world.hub.clone());
    let claim = within(
        "read the target's claim",
        claims.get(&claim_name(APP, target)),
    )
    .await;
    for rollout in &rollouts {
        for key in data_of(rollout).keys() {
            let owner = claim
                .spec
                .keys
                .iter()
                .find(|entry| &entry.key == key)
                .and_then(|entry| entry.claimants.first())
                .unwrap_or_else(|| panic!("{file}: {key} is claimed: {:?}", claim.spec));
            assert_eq!(
                (owner.namespace.as_str(), owner.name.as_str()),
                (namespace_of(rollout), name_of(rollout)),
                "{file}: the owner of {key}"
            );
        }
    }
}
