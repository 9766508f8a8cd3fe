//! The controller as a platform engineer runs it: the image (`Dockerfile`, packed by
//! `scripts/build-image`, the script of `make image`) run by podman as the shipped
//! ServiceAccount, with kube's in-cluster configuration. The lab's hub gets `deploy/` (the
//! kustomize base: namespace, RBAC, Deployment), a token is minted for the ServiceAccount
//! with the TokenRequest API, and the container gets it where a pod has it
//! (`/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}`), with
//! `KUBERNETES_SERVICE_HOST/PORT` naming the hub, the Deployment's args, env and security
//! context, and the host's network (the lab listens on loopback). Nothing of the lab's
//! own controller identity reaches it: it has exactly the rights `deploy/rbac.yaml`
//! grants its ServiceAccount. Then the scenarios that matter: a stage approved by an
//! approver, and a Prometheus gate failing and rolling the canary back. One lab (hub + 2
//! regions) for the binary.
//!
//! The image packs this crate's debug build of the controller (`lab-controller`, the same
//! `configrollout::app::main`) through the same script, so the test needs no release
//! build; `make image` packs a release build.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, SampleVerdict, StageState};
use configrollout_e2e::{HUB, LabChild, LabOptions, SYSTEM_NAMESPACE, User, repository_root};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Container;
use kube::api::{Api, Patch, PatchParams, PostParams};

mod support;

use support::*;

/// The image the test builds (never the release tag `make image` writes).
const IMAGE: &str = "configrollout-controller:e2e";
/// The ServiceAccount `deploy/rbac.yaml` ships.
const SERVICE_ACCOUNT: &str = "configrollout-controller";
/// Where a pod has its ServiceAccount's credentials.
const SA_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The pod name the container gets through `POD_NAME`, as the Deployment's fieldRef would.
const POD_NAME: &str = "configrollout-controller-5c9d7f-incluster";
/// Bound on building the image (stripping and packing a debug build).
const BUILD: Duration = Duration::from_secs(300);
const REGIONS: [&str; 2] = ["region-1", "region-2"];
/// A value distinctive enough to grep for: it must not appear in logs, events, metrics
/// or status.
const BANNER: &str = "s3cr3t-banner-e41c";
/// A value the workload accepts, and one it refuses (its consumers then fail requests).
const GOOD_TIMEOUT: &str = "250";
const BAD_TIMEOUT: &str = "0";
/// Per-region error ratio over the last few scrapes (as in tests/safety.rs).
const ERROR_RATIO: &str = "sum(rate(configrollout_lab_errors_total{region=\"{{region}}\"}[5s])) / sum(rate(configrollout_lab_requests_total{region=\"{{region}}\"}[5s]))";

fn podman() -> PathBuf {
    repository_root().join("scripts/podman/podman")
}

/// Runs `program` with `args` to the end within `deadline`; its stdout, or a panic with
/// its output.
async fn run(what: &str, program: &Path, args: &[&str], deadline: Duration) -> String {
    let output = tokio::process::Command::new(program)
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(deadline, output)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {deadline:?}"))
        .unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{what}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Builds the image from this crate's controller build, through `make image`'s script.
async fn build_image() {
    let started = Instant::now();
    // INCLUSTER_BINARY packs another build (a release build, for BENCHMARKS.md).
    let binary = std::env::var("INCLUSTER_BINARY")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_lab-controller").to_owned());
    let out = run(
        "scripts/build-image",
        &repository_root().join("scripts/build-image"),
        &["--binary", &binary, "--tag", IMAGE],
        BUILD,
    )
    .await;
    eprintln!(
        "image built in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        out.trim()
    );
}

/// What `kubectl apply -k deploy/` applies: every resource `deploy/kustomization.yaml`
/// lists, in order (the base has no patches or generators), with server-side apply.
async fn apply_deploy(world: &World) {
    let deploy = repository_root().join("deploy");
    let kustomization: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(deploy.join("kustomization.yaml")).expect("kustomization"),
    )
    .expect("kustomization YAML");
    let resources: Vec<&str> = kustomization["resources"]
        .as_array()
        .expect("kustomization resources")
        .iter()
        .map(|r| r.as_str().expect("a resource path"))
        .collect();
    assert!(
        resources.contains(&"rbac.yaml") && resources.contains(&"deployment.yaml"),
        "{resources:?}"
    );
    for resource in resources {
        within(
            &format!("apply deploy/{resource}"),
            world.lab.apply(HUB, User::Admin, &deploy.join(resource)),
        )
        .await;
    }
}

/// The controller container of the shipped Deployment.
fn shipped_container() -> Container {
    let text = std::fs::read_to_string(repository_root().join("deploy/deployment.yaml"))
        .expect("deploy/deployment.yaml");
    let deployment = serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .expect("YAML")
        .into_iter()
        .find(|value| value["kind"] == "Deployment")
        .expect("a Deployment in deploy/deployment.yaml");
    let deployment: Deployment = serde_json::from_value(deployment).expect("a Deployment");
    let pod = deployment
        .spec
        .and_then(|spec| spec.template.spec)
        .expect("pod spec");
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some(SERVICE_ACCOUNT),
        "the Deployment runs as the shipped ServiceAccount"
    );
    assert_eq!(
        pod.security_context.and_then(|s| s.run_as_non_root),
        Some(true)
    );
    pod.containers
        .into_iter()
        .find(|c| c.name == "controller")
        .expect("the controller container")
}

/// Who the hub says a bearer token is (SelfSubjectReview with that token alone).
async fn identity_of(world: &World, token: &str) -> String {
    let path = world
        .lab
        .kubeconfig(HUB, User::Admin)
        .expect("admin kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("hub config");
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..Default::default()
    };
    let client = kube::Client::try_from(config).expect("token client");
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    let review = within(
        "SelfSubjectReview",
        reviews.create(&PostParams::default(), &SelfSubjectReview::default()),
    )
    .await;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .expect("a user name")
}

/// The container: removed (with `podman rm -f`) when dropped, whatever ended the test.
struct RunningContainer {
    name: String,
    child: Option<LabChild>,
}

impl Drop for RunningContainer {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            child.stop();
        }
        let _ = std::process::Command::new(podman())
            .args(["rm", "--force", "--time", "5", &self.name])
            .output();
    }
}

/// Runs the image as the Deployment's pod would run it: its args (the probe address moved
/// to a free loopback port, since the host's network is shared), its env, its security
/// context, its memory limit, and the ServiceAccount's token, CA and namespace mounted
/// where kube's in-cluster configuration reads them.
async fn run_in_cluster(
    world: &World,
    token: &str,
    probe_addr: &str,
) -> (RunningContainer, Instant) {
    let container = shipped_container();
    let info = world.lab.cluster_info(HUB).expect("hub info");
    let hub: http::Uri = info.url.parse().expect("hub URL");
    // The lab's serving certificate is for 127.0.0.1 (and localhost): the address the
    // container gets as KUBERNETES_SERVICE_HOST is the one it verifies against ca.crt.
    let host = hub.host().expect("hub host").to_owned();
    assert_eq!(host, "127.0.0.1", "the hub serves on loopback");
    let port = hub.port_u16().expect("hub port").to_string();

    let secrets = world.lab.root_dir().join("serviceaccount");
    std::fs::create_dir_all(&secrets).expect("secrets dir");
    std::fs::write(secrets.join("token"), token).expect("token");
    std::fs::copy(&info.ca_file, secrets.join("ca.crt")).expect("ca.crt");
    std::fs::write(secrets.join("namespace"), SYSTEM_NAMESPACE).expect("namespace");

    let security = container.security_context.clone().expect("securityContext");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        security.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_owned()])
    );
    let memory = container
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .map(|q| q.0.replace("Mi", "m"))
        .expect("a memory limit");

    let name = format!("configrollout-incluster-{}", std::process::id());
    let mount = format!("{}:{SA_MOUNT}:ro", secrets.display());
    let mut args: Vec<String> = [
        "run",
        "--rm",
        "--name",
        &name,
        "--network",
        "host",
        "--read-only",
        "--cap-drop",
        "all",
        "--security-opt",
        "no-new-privileges",
        "--memory",
        &memory,
        "--volume",
        &mount,
        "--env",
        &format!("KUBERNETES_SERVICE_HOST={host}"),
        "--env",
        &format!("KUBERNETES_SERVICE_PORT={port}"),
        // The Deployment's env: POD_NAME from the pod's name.
        "--env",
        &format!("POD_NAME={POD_NAME}"),
        // Beyond the Deployment's: the lab's workloads load a value within a second of
        // its write, so its gates wait what the other lab tests' do, not a minute.
        "--env",
        &format!("CONFIGROLLOUT_GATE_SETTLE_TIME={LAB_GATE_SETTLE_TIME}"),
        IMAGE,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let env: Vec<_> = container.env.clone().unwrap_or_default();
    assert!(
        env.iter().map(|e| e.name.as_str()).eq(["POD_NAME"]),
        "the Deployment's env is POD_NAME only: {env:?}"
    );
    let shipped = container.args.clone().expect("the Deployment's args");
    assert!(
        shipped.iter().any(|a| a.starts_with("--probe-addr=")),
        "{shipped:?}"
    );
    for arg in shipped {
        if arg.starts_with("--probe-addr=") {
            args.push(format!("--probe-addr={probe_addr}"));
        } else {
            args.push(arg);
        }
    }
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    // Nothing of a previous run of this name stays in the way.
    let _ = std::process::Command::new(podman())
        .args(["rm", "--force", &name])
        .output();
    let started = Instant::now();
    let child = world
        .lab
        .spawn("controller-incluster", &podman(), &args, &[])
        .expect("podman run");
    (
        RunningContainer {
            name,
            child: Some(child),
        },
        started,
    )
}

async fn probe(http: &reqwest::Client, url: &str) -> Option<u16> {
    let response = http.get(url).send().await.ok()?;
    Some(response.status().as_u16())
}

/// The probes the kubelet would call answer from the container (host network: the
/// container's listener is the host's), and the process runs as the image's non-root
/// user, not root.
async fn the_container_runs_ready_as_nonroot(
    world: &World,
    container: &RunningContainer,
    started: Instant,
    probe_addr: &str,
) {
    let http = reqwest::Client::builder()
        .timeout(CALL)
        .build()
        .expect("http client");
    let ready = format!("http://{probe_addr}/readyz");
    // Polled every 20 ms (not `eventually`'s 250 ms) for the figure below.
    loop {
        if probe(&http, &ready).await == Some(200) {
            break;
        }
        assert!(
            started.elapsed() < PROGRESS,
            "the container's /readyz did not answer 200 within {PROGRESS:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A figure for BENCHMARKS.md: never asserted.
    eprintln!(
        "podman run to /readyz 200: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        probe(&http, &format!("http://{probe_addr}/healthz")).await,
        Some(200)
    );

    let pid = run(
        "podman inspect",
        &podman(),
        &["inspect", "--format", "{{.State.Pid}}", &container.name],
        CALL,
    )
    .await;
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).expect("the process");
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .expect("Uid line");
    assert!(
        uid.split_whitespace().all(|id| id == "65532"),
        "the controller runs as 65532, not root: Uid {uid}"
    );
    let user = run(
        "podman image inspect",
        &podman(),
        &["image", "inspect", "--format", "{{.Config.User}}", IMAGE],
        CALL,
    )
    .await;
    assert_eq!(user.trim(), "65532:65532", "the image's USER");

    // It leads: the Lease names the pod, so every write below is the container's.
    let leases: Api<Lease> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    eventually("the container holds the Lease", PROGRESS, || async {
        let lease = leases.get_opt("configrollout-controller").await.ok()??;
        (lease.spec?.holder_identity.as_deref() == Some(POD_NAME)).then_some(())
    })
    .await;
}

fn rollout_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata:\n  name: {name}\n  namespace: {TEAM}\nspec:\n  target: {{namespace: {APP}, name: {name}}}\n{spec}"
    )
}

/// tests/controller.rs's staged rollout: the canary, then `prod`, which needs an
/// approval; an approver approves it, and only then does prod receive anything.
async fn an_approval_gated_stage_completes_once_approved(world: &World) {
    let name = "limits";
    let counters = WriteCounter::start_in(world, &REGIONS, name).await;
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                "  data:\n    rate-limit: \"{BANNER}\"\n  stages:\n    - {{name: canary, regions: {{names: [region-1]}}}}\n    - {{name: prod, regions: {{names: [region-2]}}, approval: Required}}\n"
            ),
        ))
        .await;
    let waiting = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    assert!(condition_true(&waiting, "AwaitingApproval"));
    assert_eq!(
        world.target_data("region-1", name).await,
        Some(data(&[("rate-limit", BANNER)])),
        "the canary holds exactly the declared data"
    );
    assert_eq!(
        world.target_data("region-2", name).await,
        None,
        "prod receives nothing before the approval"
    );

    world.approve(User::ApproverAlice, name, "prod", "r1").await;
    let done = world.wait_condition(name, "Complete", PROGRESS).await;
    assert_eq!(
        world.target_data("region-2", name).await,
        Some(data(&[("rate-limit", BANNER)])),
        "prod holds the data after the approval"
    );
    let prod = done
        .status
        .as_ref()
        .and_then(|s| s.stages.iter().find(|s| s.name == "prod"))
        .expect("prod stage");
    assert_eq!(
        prod.approval.as_ref().map(|a| a.approver.as_str()),
        Some("approver-alice")
    );
    for (region, counter) in REGIONS.iter().zip(&counters) {
        assert_eq!(counter.writes(), 1, "{region}: target written once");
    }
}

fn gated_rollout(name: &str, timeout_ms: &str) -> String {
    rollout_yaml(
        name,
        &format!(
            r#"
  onFailure: Rollback
  data:
    timeout_ms: "{timeout_ms}"
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      condition: result < 0.1
      interval: 2s
      initialDelay: 4s
      count: 3
      failureLimit: 0
      inconclusiveLimit: 3
  stages:
    - name: canary
      regions: {{names: [region-1]}}
      gates: [errors]
    - name: prod
      regions: {{names: [region-2]}}
      gates: [errors]
"#
        ),
    )
}

async fn error_ratio(world: &World, region: &str) -> Option<f64> {
    let query = ERROR_RATIO.replace("{{region}}", region);
    let samples = world.lab.query_prometheus(&query).await.ok()?;
    samples.first().map(|sample| sample.value)
}

async fn timeout_in(world: &World, region: &str, name: &str) -> Option<String> {
    world
        .target_data(region, name)
        .await
        .and_then(|data| data.get("timeout_ms").cloned())
}

/// tests/safety.rs's rollback: a bad value makes the canary's consumers fail requests,
/// its gate fails on the lab's Prometheus, and the canary is restored; prod never
/// receives the bad revision.
async fn a_failing_gate_rolls_the_canary_back(world: &World) {
    let name = "timeouts";
    for region in REGIONS {
        within(
            "point the workload at the target",
            world.lab.watch_config(region, APP, name),
        )
        .await;
    }
    world
        .create_rollout(&gated_rollout(name, GOOD_TIMEOUT))
        .await;
    world.wait_condition(name, "Complete", PROGRESS).await;
    for region in REGIONS {
        assert_eq!(
            timeout_in(world, region, name).await.as_deref(),
            Some(GOOD_TIMEOUT)
        );
    }
    let prod = WriteCounter::start(world.region("region-2"), name).await;

    let patch = serde_json::json!({"spec": {"data": {"timeout_ms": BAD_TIMEOUT}}});
    within(
        "declare the bad value",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
    eventually("the canary's error ratio rises", PROGRESS, || async {
        error_ratio(world, "region-1")
            .await
            .filter(|ratio| *ratio > 0.2)
    })
    .await;
    let rolled_back: ConfigRollout = world.wait_phase(name, "RolledBack", PROGRESS).await;
    assert_eq!(
        timeout_in(world, "region-1", name).await.as_deref(),
        Some(GOOD_TIMEOUT),
        "the canary holds the previous value again"
    );
    assert_eq!(
        timeout_in(world, "region-2", name).await.as_deref(),
        Some(GOOD_TIMEOUT)
    );
    assert_eq!(prod.writes(), 0, "prod never received the bad revision");
    let status = rolled_back.status.as_ref().expect("status");
    let halted = status.condition("Halted").expect("Halted condition");
    assert_eq!(halted.reason, "GateFailed");
    assert!(
        halted.message.contains("gate errors") && halted.message.contains("region region-1"),
        "{}",
        halted.message
    );
    let canary = status
        .stages
        .iter()
        .find(|s| s.name == "canary")
        .expect("canary stage");
    assert_eq!(canary.state, StageState::Failed);
    assert!(
        canary
            .gates
            .iter()
            .flat_map(|gate| &gate.samples)
            .any(|sample| sample.verdict == SampleVerdict::Failed),
        "the failing sample is in status"
    );
}

/// Nothing of the configuration leaves the regions: not in the container's log, its
/// `/metrics`, the Events or the status.
async fn no_value_leaves_the_regions(world: &World, probe_addr: &str) {
    let haystacks = observable_output(world, &format!("http://{probe_addr}/metrics")).await;
    assert!(
        haystacks
            .iter()
            .any(|(place, _)| place == "controller-incluster.log"),
        "the container's log is among them"
    );
    for (place, text) in &haystacks {
        assert!(
            !text.contains(BANNER),
            "a configuration value leaked into {place}"
        );
    }
}

/// The shipped RBAC suffices: the hub refused none of the container's calls.
fn nothing_was_forbidden(world: &World) {
    let log = std::fs::read_to_string(world.lab.root_dir().join("controller-incluster.log"))
        .expect("the container's log");
    let forbidden: Vec<&str> = log
        .lines()
        .filter(|line| line.to_lowercase().contains("forbidden"))
        .collect();
    assert!(
        forbidden.is_empty(),
        "calls the ServiceAccount may not make:\n{}",
        forbidden.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_image_runs_in_cluster_as_the_shipped_service_account() {
    build_image().await;
    let world = World::start(LabOptions {
        regions: REGIONS.len(),
        ..LabOptions::default()
    })
    .await;
    world
        .lab
        .install_approver_policy()
        .await
        .expect("install the approver policy");
    apply_deploy(&world).await;
    let token = mint_token(world.hub.clone(), SYSTEM_NAMESPACE, SERVICE_ACCOUNT).await;
    assert_eq!(
        identity_of(&world, &token).await,
        format!("system:serviceaccount:{SYSTEM_NAMESPACE}:{SERVICE_ACCOUNT}"),
        "the token is the shipped ServiceAccount's"
    );
    let probe_addr = free_local_addr();
    let (container, started) = run_in_cluster(&world, &token, &probe_addr).await;
    the_container_runs_ready_as_nonroot(&world, &container, started, &probe_addr).await;

    an_approval_gated_stage_completes_once_approved(&world).await;
    a_failing_gate_rolls_the_canary_back(&world).await;
    nothing_was_forbidden(&world);
    no_value_leaves_the_regions(&world, &probe_addr).await;
    drop(container);
}
