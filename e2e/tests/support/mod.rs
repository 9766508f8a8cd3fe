//! What the end-to-end test binaries share: bounded calls, polling, and a `World` of one
//! lab and the hub's admin client, with the reads every scenario makes.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

pub mod gates;
pub mod loopback;

// Not every binary runs gate scenarios.
#[allow(unused_imports)]
pub use gates::*;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, StageApproval, StageApprovalSpec};
use configrollout::engine::tenancy::ALLOWED_TARGET_NAMESPACES;
use configrollout_e2e::gitops::{self, Operation, Verdict};
use configrollout_e2e::{HUB, Lab, LabChild, LabOptions, User};
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

pub const TEAM: &str = "team";
pub const APP: &str = "app";
/// Bound on each single API call of the test.
pub const CALL: Duration = Duration::from_secs(20);
/// Bound on waiting for the controller to get somewhere.
pub const PROGRESS: Duration = Duration::from_secs(120);
/// Lease duration of the controllers under test: short, so a take-over is quick.
pub const LEASE: &str = "6s";
/// `--gate-settle-time` of the controllers under test, unless a test gives its own: the
/// lab's workloads load a value within a second of its write, and gated tests wait 4 s
/// (`initialDelay`) already.
pub const LAB_GATE_SETTLE_TIME: &str = "4s";
pub async fn within<T, E: std::fmt::Debug>(
    what: &str,
    call: impl Future<Output = Result<T, E>>,
) -> T {
    match tokio::time::timeout(CALL, call).await {
        Ok(Ok(value)) => value,
        Ok(Err(e)) => panic!("{what}: {e:?}"),
        Err(_) => panic!("{what}: no answer within {CALL:?}"),
    }
}

/// Polls `check` until it returns `Some`, or panics after `deadline` with `what`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < deadline,
            "{what}: not within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub struct World {
    pub lab: Lab,
    pub hub: Client,
}

impl World {
    /// Starts a lab with `options`, the `team` namespace in the hub and the `app`
    /// namespace in every region.
    pub async fn start(options: LabOptions) -> World {
        let lab = Lab::start(options).await.expect("lab starts");
        let hub = lab.client(HUB, User::Admin).expect("hub admin");
        lab.create_namespace(HUB, TEAM)
            .await
            .expect("team namespace");
        // As the platform admin: the team's rollouts may write `app` in the regions.
        lab.annotate_namespace(HUB, TEAM, &[(ALLOWED_TARGET_NAMESPACES, APP)])
            .await
            .expect("grant the team namespace app");
        for region in lab.regions() {
            lab.create_namespace(&region, APP)
                .await
                .expect("app namespace");
        }
        World { lab, hub }
    }

    pub fn region(&self, name: &str) -> Client {
        self.lab.client(name, User::Admin).expect("region client")
    }

    pub fn rollouts(&self) -> Api<ConfigRollout> {
        Api::namespaced(self.hub.clone(), TEAM)
    }

    pub fn start_controller(&self, identity: &str) -> LabChild {
        self.start_controller_on(identity, "127.0.0.1:0")
    }

    pub fn start_controller_on(&self, identity: &str, probe_addr: &str) -> LabChild {
        self.start_controller_with(identity, probe_addr, &[])
    }

    /// A controller with `extra` flags after the usual ones.
    pub fn start_controller_with(
        &self,
        identity: &str,
        probe_addr: &str,
        extra: &[&str],
    ) -> LabChild {
        self.start_controller_with_env(identity, probe_addr, extra, &[])
    }

    /// A controller with `extra` flags after the usual ones and `envs` in its environment.
    pub fn start_controller_with_env(
        &self,
        identity: &str,
        probe_addr: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> LabChild {
        let prometheus_url = self.lab.prometheus_url();
        let mut usual = vec![
            "--lease-duration",
            LEASE,
            "--probe-addr",
            probe_addr,
            "--log-format",
            "json",
            "--prometheus-url",
            &prometheus_url,
        ];
        let settle_given = extra
            .iter()
            .any(|arg| arg.starts_with("--gate-settle-time"));
        if !settle_given {
            usual.extend(["--gate-settle-time", LAB_GATE_SETTLE_TIME]);
        }
        let args: Vec<OsString> = usual.iter().chain(extra).map(OsString::from).collect();
        self.lab
            .start_controller_with_env(&lab_controller_binary(), identity, &args, envs)
            .expect("start controller")
    }

    pub async fn create_rollout(&self, yaml: &str) -> ConfigRollout {
        let rollout: ConfigRollout = serde_saphyr::from_str(yaml).expect("rollout YAML");
        within(
            "create rollout",
            self.rollouts().create(&PostParams::default(), &rollout),
        )
        .await
    }

    pub async fn rollout(&self, name: &str) -> ConfigRollout {
        within("read rollout", self.rollouts().get(name)).await
    }

    pub async fn wait_condition(
        &self,
        name: &str,
        type_: &str,
        deadline: Duration,
    ) -> ConfigRollout {
        eventually(&format!("{name}: condition {type_}"), deadline, || async {
            let rollout = self.rollout(name).await;
            condition_true(&rollout, type_).then_some(rollout)
        })
        .await
    }

    pub async fn wait_phase(&self, name: &str, phase: &str, deadline: Duration) -> ConfigRollout {
        eventually(&format!("{name}: phase {phase}"), deadline, || async {
            let rollout = self.rollout(name).await;
            (phase_of(&rollout).as_deref() == Some(phase)).then_some(rollout)
        })
        .await
    }

    /// Deletes rollout `name` and waits until the hub no longer has it.
    pub async fn delete_rollout(&self, name: &str) {
        within(
            &format!("delete rollout {name}"),
            self.rollouts().delete(name, &Default::default()),
        )
        .await;
        eventually(&format!("rollout {name} is gone"), PROGRESS, || async {
            within("read rollout", self.rollouts().get_opt(name))
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }

    /// Both objects of target `name` in `region` (the ConfigMap and its companion), as a
    /// backup of the namespace holds them.
    pub async fn back_up_target(&self, region: &str, name: &str) -> [ConfigMap; 2] {
        let maps: Api<ConfigMap> = Api::namespaced(self.region(region), APP);
        let companion = format!(
            "{name}{}",
            configrollout::regions::materialize::COMPANION_SUFFIX
        );
        [
            within("back up the target", maps.get(name)).await,
            within("back up the companion", maps.get(&companion)).await,
        ]
    }

    /// Puts a backup's objects back over the live ones in `region` (data and
    /// annotations), as a namespace restore does.
    pub async fn restore_target(&self, region: &str, backup: &[ConfigMap; 2]) {
        let maps: Api<ConfigMap> = Api::namespaced(self.region(region), APP);
        for saved in backup {
            let name = saved.metadata.name.clone().expect("named");
            let mut current = within("read for the restore", maps.get(&name)).await;
            current.data.clone_from(&saved.data);
            current
                .metadata
                .annotations
                .clone_from(&saved.metadata.annotations);
            within(
                "restore the backup",
                maps.replace(&name, &PostParams::default(), &current),
            )
            .await;
        }
    }

    pub async fn target_data(&self, region: &str, name: &str) -> Option<BTreeMap<String, String>> {
        let api: Api<ConfigMap> = Api::namespaced(self.region(region), APP);
        within("read target", api.get_opt(name))
            .await
            .map(|cm| cm.data.unwrap_or_default())
    }

    /// Approves `stage` of `revision` as `user`, naming the rollout's UID and the
    /// revision's digest as its status history shows them (as the plugin does).
    pub async fn approve(&self, user: User, rollout: &str, stage: &str, revision: &str) {
        let current = self.rollout(rollout).await;
        let spec = StageApprovalSpec::for_revision(
            &current,
            revision,
            stage,
            user.name(),
            Some("checked the canary dashboards".to_owned()),
        )
        .expect("the rollout's status history names the revision and its digest");
        let client = self.lab.client(HUB, user).expect("approver client");
        let api: Api<StageApproval> = Api::namespaced(client, TEAM);
        let approval = StageApproval {
            metadata: ObjectMeta {
                name: Some(format!("{rollout}-{stage}-{revision}")),
                ..ObjectMeta::default()
            },
            spec,
        };
        within(
            "create approval",
            api.create(&PostParams::default(), &approval),
        )
        .await;
    }
}

/// What Flux (kstatus) and Argo CD (the shipped `health.lua` and `discovery.lua`) make of
/// `object` as the lab's apiserver returned it; kept as `label` when capturing
/// (`CONFIGROLLOUT_GITOPS_CAPTURE`, see `configrollout_e2e::gitops`).
pub fn judged(label: &str, object: &impl serde::Serialize) -> Verdict {
    let value = serde_json::to_value(object).expect("object as JSON");
    gitops::judge(label, &value).unwrap_or_else(|e| panic!("{label}: {e}"))
}

/// Checks that the GitOps tools read `object` as a person would: its `phase` (empty
/// before the controller wrote one), then kstatus's status (what Flux's health checks
/// and kpt act on) and Argo CD's health. Returns the verdict for further checks.
pub fn assert_seen_as(
    label: &str,
    object: &impl serde::Serialize,
    phase: &str,
    kstatus: &str,
    argo_cd: &str,
) -> Verdict {
    let verdict = judged(label, object);
    assert_eq!(
        (
            verdict.phase.as_str(),
            verdict.kstatus.status.as_str(),
            verdict.argo_cd.status.as_str()
        ),
        (phase, kstatus, argo_cd),
        "{label}: {verdict:#?}"
    );
    verdict
}

impl World {
    /// Does what Argo CD does when someone runs `action` on the rollout `name` (the shipped
    /// action, run as Argo CD runs it): creates each object it returns, a server-side dry
    /// run first, and sends the JSON merge patch it computes, all as `actor`, the identity
    /// Argo CD would act as. `approver` is set in the approve action, as a platform sets
    /// it in argocd-cm. Returns what was created.
    pub async fn run_argo_cd_action(
        &self,
        name: &str,
        action: &str,
        actor: User,
        approver: Option<&str>,
    ) -> Vec<serde_json::Value> {
        let live = self.rollout(name).await;
        let value = serde_json::to_value(&live).expect("rollout as JSON");
        let operations = gitops::argo_cd_action(&value, action, approver)
            .unwrap_or_else(|e| panic!("Argo CD action {action} on {name}: {e}"));
        let client = self.lab.client(HUB, actor).expect("actor client");
        let mut created = Vec::new();
        for operation in operations {
            match operation {
                Operation::Create { resource } => {
                    let object: DynamicObject =
                        serde_json::from_value(resource).expect("a Kubernetes object");
                    let types = object.types.clone().expect("apiVersion and kind");
                    let (group, version) =
                        types.api_version.split_once('/').expect("a group/version");
                    let gvk = GroupVersionKind::gvk(group, version, &types.kind);
                    let namespace = object.namespace().unwrap_or_else(|| TEAM.to_owned());
                    let api: Api<DynamicObject> = Api::namespaced_with(
                        client.clone(),
                        &namespace,
                        &ApiResource::from_gvk(&gvk),
                    );
                    let dry_run = PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    };
                    within("create (dry run)", api.create(&dry_run, &object)).await;
                    let made = within("create", api.create(&PostParams::default(), &object)).await;
                    created.push(serde_json::to_value(made).expect("created object as JSON"));
                }
                Operation::Patch { patch } => {
                    let api: Api<ConfigRollout> = Api::namespaced(client.clone(), TEAM);
                    within(
                        "patch",
                        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
                    )
                    .await;
                }
            }
        }
        created
    }
}

/// The controller binary the tests run: `LAB_CONTROLLER_BINARY` when set, else the
/// `lab-controller` cargo built for this test. Worktrees that share one target directory
/// overwrite each other's `target/debug/lab-controller`; pointing the variable at this
/// tree's own `target/debug/deps/lab_controller-<hash>` keeps a long run on its build.
pub fn lab_controller_binary() -> std::path::PathBuf {
    std::env::var_os("LAB_CONTROLLER_BINARY")
        .filter(|path| !path.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_lab-controller").into())
}

pub fn condition_true(rollout: &ConfigRollout, type_: &str) -> bool {
    rollout
        .status
        .as_ref()
        .is_some_and(|status| status.is_true(type_))
}

pub fn phase_of(rollout: &ConfigRollout) -> Option<String> {
    let status = rollout.status.as_ref()?;
    let phase = serde_json::to_value(status.phase.as_ref()?).ok()?;
    phase.as_str().map(str::to_owned)
}

/// A ConfigRollout `name` in the team namespace targeting `app/<name>`, with the rest
/// of its spec (indented two spaces) after `target`.
pub fn rollout_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata:\n  name: {name}\n  namespace: {TEAM}\nspec:\n  target: {{namespace: {APP}, name: {name}}}\n{spec}"
    )
}

/// Changes `spec.data` of the rollout `name` by a JSON merge patch (`null` removes a key).
pub async fn change_data(rollouts: &Api<ConfigRollout>, name: &str, data: serde_json::Value) {
    let patch = serde_json::json!({"spec": {"data": data}});
    within(
        &format!("change the data of {name}"),
        rollouts.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
}

pub fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub fn region_status<'a>(
    rollout: &'a ConfigRollout,
    region: &str,
) -> Option<&'a configrollout::api::RegionRolloutStatus> {
    rollout
        .status
        .as_ref()?
        .regions
        .iter()
        .find(|r| r.name == region)
}

/// Counts the writes to one ConfigMap in one region, from a watch started before them.
pub struct WriteCounter {
    task: tokio::task::JoinHandle<()>,
    versions: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl WriteCounter {
    /// Starts counting; returns once the watch is established, so that a write made
    /// afterwards is never folded into the watch's initial listing.
    pub async fn start(client: Client, name: &str) -> Self {
        let api: Api<ConfigMap> = Api::namespaced(client, APP);
        let versions = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = versions.clone();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let (established, watching) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            use futures::StreamExt;
            let mut established = Some(established);
            let mut stream = std::pin::pin!(watcher(api, config).default_backoff());
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(established) = established.take() {
                            let _ = established.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(cm)) => {
                        let version = cm.resource_version().unwrap_or_default();
                        let mut seen = seen.lock().unwrap();
                        if !seen.contains(&version) {
                            seen.push(version);
                        }
                    }
                    _ => {}
                }
            }
        });
        within("establish the write counter's watch", async {
            watching.await.map_err(|_| "watch ended")
        })
        .await;
        Self { task, versions }
    }

    /// One counter per region, each established before it returns.
    pub async fn start_in(world: &World, regions: &[&str], name: &str) -> Vec<Self> {
        let mut counters = Vec::new();
        for region in regions {
            counters.push(Self::start(world.region(region), name).await);
        }
        counters
    }

    pub fn writes(&self) -> usize {
        self.versions.lock().unwrap().len()
    }
}

impl Drop for WriteCounter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Events with `reason` about rollout `name` in the team namespace.
pub async fn events(world: &World, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(world.hub.clone(), TEAM);
    within("list events", api.list(&Default::default()))
        .await
        .items
        .into_iter()
        .filter(|event| {
            event.reason.as_deref() == Some(reason)
                && event.involved_object.name.as_deref() == Some(name)
        })
        .collect()
}

/// A loopback address nothing listens on now, for a controller's probe server.
pub fn free_local_addr() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    probe.local_addr().expect("address").to_string()
}

/// Everything a configuration value must never reach, as (place, text): the controller's
/// `/metrics` at `metrics_url`, every controller log of the lab, the hub's Events in the
/// team namespace and every rollout's status.
pub async fn observable_output(world: &World, metrics_url: &str) -> Vec<(String, String)> {
    let http = reqwest::Client::builder()
        .timeout(CALL)
        .build()
        .expect("http client");
    let metrics = within("scrape /metrics", async {
        http.get(metrics_url).send().await?.text().await
    })
    .await;
    let mut haystacks = vec![("metrics".to_owned(), metrics)];
    for entry in std::fs::read_dir(world.lab.root_dir()).expect("lab dir") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if name.starts_with("controller-") && name.ends_with(".log") {
            let log = std::fs::read_to_string(&path).expect("controller log");
            assert!(log.contains("region merged"), "{name} is a real log");
            haystacks.push((name, log));
        }
    }
    let events: Api<Event> = Api::namespaced(world.hub.clone(), TEAM);
    let events = within("list events", events.list(&Default::default())).await;
    assert!(!events.items.is_empty(), "the controller records events");
    haystacks.push((
        "events".to_owned(),
        serde_json::to_string(&events.items).expect("events JSON"),
    ));
    let rollouts = within("list rollouts", world.rollouts().list(&Default::default())).await;
    for rollout in rollouts.items {
        haystacks.push((
            format!("status of {}", rollout.name_any()),
            serde_json::to_string(&rollout.status).expect("status JSON"),
        ));
    }
    haystacks
}

/// Asserts that none of a dropped lab's processes (`pids`) runs any more and that no
/// process mentions its directory `root`.
pub fn assert_lab_gone(root: &str, pids: Vec<u32>) {
    let alive: Vec<u32> = pids
        .into_iter()
        .filter(|pid| configrollout_e2e::process_alive(*pid))
        .collect();
    assert!(
        alive.is_empty(),
        "lab processes still running after drop: {alive:?}"
    );
    let leftovers = configrollout_e2e::processes_mentioning(root);
    assert!(
        leftovers.is_empty(),
        "processes still using {root}: {leftovers:?}"
    );
}

/// The controller's `/metrics` at `metrics_url`, as text.
pub async fn scrape(metrics_url: &str) -> String {
    let http = reqwest::Client::builder()
        .timeout(CALL)
        .build()
        .expect("http client");
    within("scrape /metrics", async {
        http.get(metrics_url).send().await?.text().await
    })
    .await
}

/// The value of the one sample `series` (name and labels, as exposed) in `exposition`.
pub fn sample(exposition: &str, series: &str) -> f64 {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in /metrics:\n{exposition}"))
}

impl World {
    /// [`World::start_controller_with`] on a loopback probe port, whose default Prometheus
    /// (`--prometheus-url`, for regions that name none) is `prometheus_url` rather than the
    /// lab's: the controller refuses the flag given twice.
    pub fn start_controller_against(
        &self,
        identity: &str,
        prometheus_url: &str,
        extra: &[&str],
    ) -> LabChild {
        let mut args = vec![
            "--lease-duration",
            LEASE,
            "--probe-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--prometheus-url",
            prometheus_url,
        ];
        if !extra
            .iter()
            .any(|arg| arg.starts_with("--gate-settle-time"))
        {
            args.extend(["--gate-settle-time", LAB_GATE_SETTLE_TIME]);
        }
        let args: Vec<OsString> = args.iter().chain(extra).map(OsString::from).collect();
        self.lab
            .start_controller(&lab_controller_binary(), identity, &args)
            .expect("start controller")
    }
}

/// A token of `account` in `namespace` from the TokenRequest API, as the kubelet mints a
/// pod's projected one (no audiences: the apiserver's own issuer), valid for an hour.
pub async fn mint_token(client: Client, namespace: &str, account: &str) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let minted = within(
        "TokenRequest",
        accounts.create_token_request(account, &kube::api::PostParams::default(), &request),
    )
    .await;
    minted
        .status
        .and_then(|status| status.token)
        .expect("a minted token")
}
