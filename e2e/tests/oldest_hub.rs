//! Issue 37: the install works on the oldest hub configrollout supports, Kubernetes 1.32
//! (the lab's `KubernetesRelease::Oldest`: kube-apiserver v1.32 on etcd 3.5, and kubectl
//! v1.32, built from `e2e/controlplane-1.32`). Hub and regions at 1.32, installed as an
//! adopter does, with that kubectl: `kubectl apply -f crds/` and `kubectl apply -f
//! policies/` succeed (the author stamps, `policies/mutating/`, need 1.36 and are left
//! out), and the Regions are applied by hand. Then the controller completes a two-stage
//! rollout and counts an approval, and under four-eyes it says that nothing stamps the
//! spec's author (condition `AdmissionPolicies`, Event `PoliciesMissing`) and counts no
//! approval (Event `ApprovalRefused`), as `policies/README.md` says.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, conditions};
use configrollout_e2e::gobuild::KubernetesRelease;
use configrollout_e2e::{
    HUB, KUBECONFIG_SECRET_KEY, LabOptions, REGION_LABEL, SYSTEM_NAMESPACE, TIER_LABEL, User,
    repository_root,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;

use support::*;

const REGIONS: [&str; 2] = ["region-1", "region-2"];
/// The MutatingAdmissionPolicy (and binding) a 1.32 hub cannot serve.
const AUTHOR_POLICY: &str = "spec-author.configrollout.dev";
const APPROVER_POLICY: &str = "stageapproval-approver.configrollout.dev";
/// What the shipped `policies/` holds besides `mutating/`: each a policy and its binding.
const VALIDATING: [&str; 4] = [
    "config-schema",
    "region-credentials",
    "rollout-tenancy",
    "stageapproval-approver",
];

/// Runs the lab's kubectl (v1.32 here) as the hub's admin, from the repository's root as
/// an adopter runs the install commands.
async fn kubectl(world: &World, args: &[&str]) -> Output {
    let kubeconfig = world
        .lab
        .kubeconfig(HUB, User::Admin)
        .expect("admin kubeconfig");
    let output = tokio::process::Command::new(world.lab.kubectl())
        .env("KUBECONFIG", &kubeconfig)
        .current_dir(repository_root())
        .args(args)
        .kill_on_drop(true)
        .output();
    within(&format!("kubectl {}", args.join(" ")), output).await
}

/// [`kubectl`], which must succeed; returns its standard output.
async fn kubectl_ok(world: &World, args: &[&str]) -> String {
    let output = kubectl(world, args).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl {}: {}\n{stdout}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A directory without manifests: the lab installs no CRDs, the test does, with kubectl.
fn no_crds_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oldest-hub-no-crds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create an empty directory");
    dir
}

/// Every cluster of the lab serves Kubernetes 1.32, and the lab's kubectl is 1.32 too.
async fn every_cluster_is_1_32(world: &World) {
    for cluster in world.lab.clusters() {
        let client = world.lab.client(&cluster, User::Admin).expect("client");
        let info = within("read /version", client.apiserver_version()).await;
        assert_eq!(
            (info.major.as_str(), info.minor.as_str()),
            ("1", "32"),
            "{cluster}: {}",
            info.git_version
        );
    }
    let client = kubectl_ok(world, &["version", "--client", "-o", "json"]).await;
    let client: serde_json::Value = serde_json::from_str(&client).expect("kubectl version JSON");
    assert_eq!(client["clientVersion"]["minor"], "32", "kubectl: {client}");
}

/// `kubectl apply -f crds/` then `kubectl apply -f policies/`, as the install guide says;
/// `policies/mutating/` is refused by a 1.32 hub, as `policies/README.md` says.
async fn the_install_commands_succeed(world: &World) {
    let crds = kubectl_ok(world, &["apply", "-f", "crds/"]).await;
    let shipped = std::fs::read_dir(repository_root().join("crds"))
        .expect("crds/")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|entry| entry.path().extension().is_some_and(|ext| ext == "yaml"))
        })
        .count();
    assert_eq!(
        crds.matches("customresourcedefinition.apiextensions.k8s.io/")
            .count(),
        shipped,
        "{crds}"
    );
    kubectl_ok(
        world,
        &[
            "wait",
            "--for=condition=Established",
            "customresourcedefinitions",
            "--all",
            "--timeout=60s",
        ],
    )
    .await;

    let policies = kubectl_ok(world, &["apply", "-f", "policies/"]).await;
    for name in VALIDATING {
        for kind in [
            "validatingadmissionpolicy",
            "validatingadmissionpolicybinding",
        ] {
            let line =
                format!("{kind}.admissionregistration.k8s.io/{name}.configrollout.dev created");
            assert!(policies.contains(&line), "no {line:?} in:\n{policies}");
        }
    }
    assert_eq!(policies.lines().count(), 2 * VALIDATING.len(), "{policies}");

    let mutating = kubectl(world, &["apply", "-f", "policies/mutating/"]).await;
    let stderr = String::from_utf8_lossy(&mutating.stderr);
    assert!(!mutating.status.success(), "a 1.32 hub took {stderr}");
    assert!(
        stderr.contains(
            "no matches for kind \"MutatingAdmissionPolicy\" in version \"admissionregistration.k8s.io/v1\""
        ),
        "{stderr}"
    );
}

/// The Regions, applied with kubectl as a platform admin writes them (the lab wrote each
/// region's kubeconfig Secret in `configrollout-system`, which `region-credentials`
/// requires).
async fn register_the_regions(world: &World) {
    let mut yaml = String::new();
    for region in REGIONS {
        let secret = world.lab.kubeconfig_secret(region).expect("a lab region");
        let tier = world.lab.tier(region).expect("a lab region");
        yaml.push_str(&format!(
            "---\napiVersion: configrollout.dev/v1alpha1\nkind: Region\nmetadata:\n  name: {region}\n  labels: {{{REGION_LABEL}: {region}, {TIER_LABEL}: {tier}}}\nspec:\n  kubeconfigSecretRef: {{namespace: {SYSTEM_NAMESPACE}, name: {secret}, key: {KUBECONFIG_SECRET_KEY}}}\n  prometheus: {{url: \"{}\"}}\n",
            world.lab.prometheus_url()
        ));
    }
    let path = world.lab.root_dir().join("regions.yaml");
    std::fs::write(&path, yaml).expect("write regions.yaml");
    let path = path.to_string_lossy().into_owned();
    let applied = kubectl_ok(world, &["apply", "-f", &path]).await;
    assert_eq!(
        applied.matches(" created").count(),
        REGIONS.len(),
        "{applied}"
    );
}

/// A rollout of `name`: stage `canary` (region-1), then `prod` (region-2), with `prod`
/// lines added to the prod stage and `extra` spec lines (indented two spaces).
fn two_stages(name: &str, value: &str, prod: &str, extra: &str) -> String {
    rollout_yaml(
        name,
        &format!(
            "  data: {{limit: \"{value}\"}}\n{extra}  stages:\n    - {{name: canary, regions: {{names: [region-1]}}}}\n    - {{name: prod, regions: {{names: [region-2]}}{prod}}}\n"
        ),
    )
}

fn condition(rollout: &ConfigRollout, type_: &str) -> Option<Condition> {
    rollout.status.as_ref()?.condition(type_).cloned()
}

fn revision_of(rollout: &ConfigRollout) -> String {
    rollout
        .status
        .as_ref()
        .and_then(|status| status.revision.clone())
        .expect("a declared revision")
}

/// A two-stage rollout completes: both regions get the data.
async fn a_two_stage_rollout_completes(world: &World) {
    let name = "plain";
    world.create_rollout(&two_stages(name, "10", "", "")).await;
    let done = world.wait_condition(name, "Complete", PROGRESS).await;
    for region in REGIONS {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("limit", "10")])),
            "{region}"
        );
    }
    assert!(
        condition(&done, conditions::ADMISSION_POLICIES).is_none(),
        "a rollout without approvals is not concerned: {:?}",
        condition(&done, conditions::ADMISSION_POLICIES)
    );
}

/// Without four-eyes an approval counts: `stageapproval-approver` binds it to its
/// creator on 1.32 as on any hub.
async fn an_approval_counts(world: &World) {
    let name = "approved";
    world
        .create_rollout(&two_stages(name, "20", ", approval: Required", ""))
        .await;
    let waiting = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    let missing = eventually("AdmissionPolicies reported", PROGRESS, || async {
        condition(&world.rollout(name).await, conditions::ADMISSION_POLICIES)
    })
    .await;
    assert_eq!(missing.reason, "PoliciesMissing", "{}", missing.message);
    assert!(
        !missing.message.contains(APPROVER_POLICY),
        "{}",
        missing.message
    );
    world
        .approve(User::ApproverBob, name, "prod", &revision_of(&waiting))
        .await;
    world.wait_condition(name, "Complete", PROGRESS).await;
    assert_eq!(
        world.target_data("region-2", name).await,
        Some(data(&[("limit", "20")]))
    );
}

/// Under four-eyes: the missing author stamp is reported (condition and Event
/// `PoliciesMissing`), and an approval, by someone who did not write the rollout, is
/// refused because who did cannot be known; nothing reaches the approval stage.
async fn four_eyes_refuses_without_the_author_stamp(world: &World) {
    let name = "four-eyes";
    world
        .create_rollout(&two_stages(
            name,
            "30",
            ", approval: Required",
            "  fourEyes: true\n",
        ))
        .await;
    let waiting = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    assert!(
        !waiting
            .annotations()
            .contains_key("configrollout.dev/spec-author"),
        "nothing stamps the author on 1.32"
    );
    let missing = eventually("AdmissionPolicies False", PROGRESS, || async {
        let c = condition(&world.rollout(name).await, conditions::ADMISSION_POLICIES)?;
        (c.status == "False").then_some(c)
    })
    .await;
    assert_eq!(missing.reason, "PoliciesMissing", "{}", missing.message);
    for expected in [
        format!("MutatingAdmissionPolicy {AUTHOR_POLICY}"),
        format!("MutatingAdmissionPolicyBinding {AUTHOR_POLICY}"),
        "four-eyes approvals are refused".to_owned(),
    ] {
        assert!(missing.message.contains(&expected), "{}", missing.message);
    }
    assert!(
        !missing.message.contains(APPROVER_POLICY),
        "{}",
        missing.message
    );
    let event = eventually("Event PoliciesMissing", PROGRESS, || async {
        events(world, name, "PoliciesMissing")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.message.as_deref(), Some(missing.message.as_str()));
    eprintln!("AdmissionPolicies on a 1.32 hub: {}", missing.message);

    let revision = revision_of(&waiting);
    world
        .approve(User::ApproverBob, name, "prod", &revision)
        .await;
    let approval = format!("{name}-prod-{revision}");
    let refused = eventually("the approval is refused", PROGRESS, || async {
        let c = condition(&world.rollout(name).await, conditions::AWAITING_APPROVAL)?;
        (c.reason == "ApprovalRefused" && c.message.contains(&approval)).then_some(c.message)
    })
    .await;
    assert!(
        refused.contains("the rollout carries no configrollout.dev/spec-author")
            && refused.contains("four-eyes cannot be checked"),
        "{refused}"
    );
    let event = eventually("Event ApprovalRefused", PROGRESS, || async {
        events(world, name, "ApprovalRefused")
            .await
            .into_iter()
            .next()
    })
    .await;
    let note = event.message.unwrap_or_default();
    assert!(
        note.contains(&approval) && note.contains("approver-bob"),
        "{note}"
    );
    eprintln!("ApprovalRefused on a 1.32 hub: {note}");
    // Still refused a while later: the approval never counts.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let still = world.rollout(name).await;
    assert_eq!(phase_of(&still).as_deref(), Some("AwaitingApproval"));
    let prod = still
        .status
        .as_ref()
        .and_then(|status| status.stages.iter().find(|stage| stage.name == "prod"))
        .expect("stage prod in the status");
    assert_eq!(prod.approval, None);
    assert_eq!(world.target_data("region-2", name).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_install_works_on_a_1_32_hub() {
    let started = Instant::now();
    let crds_dir = no_crds_dir();
    let world = World::start(LabOptions {
        regions: REGIONS.len(),
        crds_dir: crds_dir.clone(),
        kubernetes: KubernetesRelease::Oldest,
        ..LabOptions::default()
    })
    .await;
    eprintln!("lab of 1.32 up in {:?}", started.elapsed());
    let _ = std::fs::remove_dir(&crds_dir);
    assert!(world.lab.installed_crds().is_empty());
    every_cluster_is_1_32(&world).await;
    the_install_commands_succeed(&world).await;
    register_the_regions(&world).await;
    let _controller = world.start_controller("controller-oldest-hub");
    a_two_stage_rollout_completes(&world).await;
    an_approval_counts(&world).await;
    four_eyes_refuses_without_the_author_stamp(&world).await;
    eprintln!("oldest hub checked in {:?}", started.elapsed());
}

#[test]
fn policies_holds_only_what_every_supported_hub_serves() {
    // `kubectl apply -f policies/` reads the directory's own files, not mutating/.
    let dir = repository_root().join("policies");
    let kinds = |dir: &Path| -> Vec<String> {
        let mut kinds: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .flat_map(|path| {
                let text = std::fs::read_to_string(&path).expect("read");
                text.lines()
                    .filter_map(|line| line.strip_prefix("kind: ").map(str::to_owned))
                    .collect::<Vec<_>>()
            })
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    };
    assert_eq!(
        kinds(&dir),
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ],
        "policies/*.yaml must apply on Kubernetes 1.32"
    );
    assert_eq!(
        kinds(&dir.join("mutating")),
        ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    );
}
