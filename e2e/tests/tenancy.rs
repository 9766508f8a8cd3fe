//! Tenant boundaries on real clusters: a team's developer (`tenant-a`, allowed to create
//! ConfigRollouts in the hub namespace `team-a` and nothing else) tries every way out of
//! its namespace, first with only the controller standing guard, then with the shipped
//! admission policy installed, and finally succeeds once a platform admin grants more.
//! A watch on every ConfigMap of every region shows that nothing was written outside the
//! grant at any time. One lab for the whole binary; the scenarios run in order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use configrollout::api::{ConfigRollout, Region, RolloutPhase};
use configrollout::engine::tenancy::{ALLOWED_REGIONS, ALLOWED_TARGET_NAMESPACES};
use configrollout_e2e::{HUB, KUBECONFIG_SECRET_KEY, LabChild, LabOptions, SYSTEM_NAMESPACE, User};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

mod support;

use support::*;

/// The tenant's hub namespace, and the namespace of its own name in the regions.
const TENANT: &str = "team-a";
const REGIONS: [&str; 3] = ["region-1", "region-2", "region-3"];
/// The ClusterRole of `deploy/region-rbac.yaml`, the controller's rights in a region.
const REGION_ROLE: &str = "configrollout-region-writer";
/// A value a kubeconfig could carry that must never be quoted back.
const SECRET_TOKEN: &str = "s3cr3t-t0ken-e1a9";

/// Every ConfigMap written in one region, as `namespace/name`, from a watch over all
/// namespaces started before the first scenario.
struct RegionWrites {
    task: tokio::task::JoinHandle<()>,
    written: Arc<Mutex<BTreeSet<String>>>,
}

impl RegionWrites {
    async fn start(client: Client) -> Self {
        let api: Api<ConfigMap> = Api::all(client);
        let written = Arc::new(Mutex::new(BTreeSet::new()));
        let seen = written.clone();
        let (established, watching) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            use futures::StreamExt;
            let mut established = Some(established);
            let mut listing = true;
            let mut stream =
                std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        listing = false;
                        if let Some(established) = established.take() {
                            let _ = established.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(cm) | watcher::Event::Delete(cm)) if !listing => {
                        let name =
                            format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any());
                        seen.lock().unwrap().insert(name);
                    }
                    _ => {}
                }
            }
        });
        within("establish the region's ConfigMap watch", async {
            watching.await.map_err(|_| "watch ended")
        })
        .await;
        Self { task, written }
    }

    fn written(&self) -> BTreeSet<String> {
        self.written.lock().unwrap().clone()
    }
}

impl Drop for RegionWrites {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Tenancy {
    world: World,
    tenant: Client,
    writes: Vec<(String, RegionWrites)>,
}

impl Tenancy {
    fn rollouts(&self) -> Api<ConfigRollout> {
        Api::namespaced(self.tenant.clone(), TENANT)
    }

    fn admin_rollouts(&self) -> Api<ConfigRollout> {
        Api::namespaced(self.world.hub.clone(), TENANT)
    }

    async fn create(&self, yaml: &str) -> Result<ConfigRollout, kube::Error> {
        let rollout: ConfigRollout = serde_saphyr::from_str(yaml).expect("rollout YAML");
        tokio::time::timeout(
            CALL,
            self.rollouts().create(&PostParams::default(), &rollout),
        )
        .await
        .expect("the hub answers")
    }

    /// A server-side dry run of the creation: admission runs, nothing is stored.
    async fn try_create(&self, yaml: &str) -> Result<ConfigRollout, kube::Error> {
        let rollout: ConfigRollout = serde_saphyr::from_str(yaml).expect("rollout YAML");
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        tokio::time::timeout(CALL, self.rollouts().create(&params, &rollout))
            .await
            .expect("the hub answers")
    }

    async fn condition(&self, name: &str, type_: &str) -> (String, String) {
        eventually(&format!("{name}: condition {type_}"), PROGRESS, || async {
            let rollout = within("read rollout", self.admin_rollouts().get(name)).await;
            rollout
                .status?
                .true_condition(type_)
                .map(|c| (c.reason.clone(), c.message.clone()))
        })
        .await
    }

    /// Every write seen in every region so far, as `region: namespace/name`.
    fn all_writes(&self) -> BTreeSet<String> {
        self.writes
            .iter()
            .flat_map(|(region, writes)| {
                writes
                    .written()
                    .into_iter()
                    .map(move |name| format!("{region}: {name}"))
            })
            .collect()
    }
}

fn rollout(name: &str, target_namespace: &str, target: &str, rest: &str) -> String {
    format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata: {{name: {name}, namespace: {TENANT}}}\nspec:\n  target: {{namespace: {target_namespace}, name: {target}}}\n  data: {{limit: \"10\"}}\n{rest}"
    )
}

const EVERY_REGION: &str = "  stages:\n    - {name: all, regions: {selector: {matchExpressions: [{key: configrollout.dev/region, operator: Exists}]}}, maxParallel: 3}\n";

/// As the platform admin: `tenant-a` may manage ConfigRollouts in `team-a`, nothing else.
async fn grant_tenant_rbac(world: &World) {
    let role = Role {
        metadata: ObjectMeta {
            name: Some("configrollout-author".into()),
            namespace: Some(TENANT.into()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["configrollout.dev".into()]),
            resources: Some(vec!["configrollouts".into()]),
            verbs: [
                "get", "list", "watch", "create", "update", "patch", "delete",
            ]
            .map(String::from)
            .to_vec(),
            ..PolicyRule::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("configrollout-author".into()),
            namespace: Some(TENANT.into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "configrollout-author".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: User::TenantA.name().into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Subject::default()
        }]),
    };
    let params = PostParams::default();
    within(
        "create the tenant's role",
        Api::<Role>::namespaced(world.hub.clone(), TENANT).create(&params, &role),
    )
    .await;
    within(
        "bind the tenant's role",
        Api::<RoleBinding>::namespaced(world.hub.clone(), TENANT).create(&params, &binding),
    )
    .await;
}

async fn create_config_map(client: Client, namespace: &str, name: &str) {
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some(data(&[("limit", "owned-by-someone-else")])),
        ..ConfigMap::default()
    };
    within(
        "create a ConfigMap nobody manages",
        Api::<ConfigMap>::namespaced(client, namespace).create(&PostParams::default(), &config_map),
    )
    .await;
}

async fn set_up() -> Tenancy {
    let world = World::start(LabOptions::default()).await;
    world
        .lab
        .create_namespace(HUB, TENANT)
        .await
        .expect("tenant namespace");
    grant_tenant_rbac(&world).await;
    for region in REGIONS {
        world
            .lab
            .create_namespace(region, TENANT)
            .await
            .expect("namespace");
        create_config_map(world.region(region), TENANT, "legacy").await;
        create_config_map(world.region(region), "kube-system", "coredns").await;
    }
    let mut writes = Vec::new();
    for region in REGIONS {
        writes.push((
            region.to_owned(),
            RegionWrites::start(world.region(region)).await,
        ));
    }
    let tenant = world.lab.client(HUB, User::TenantA).expect("tenant client");
    Tenancy {
        world,
        tenant,
        writes,
    }
}

/// Without the admission policy, the controller alone refuses every escape, writing
/// nothing, and names the field. Need to know: the refusal reads the same whether the
/// ConfigMap named exists in the regions or not, and no region watch is opened for a
/// namespace outside the grant.
async fn the_controller_refuses_escapes_on_its_own(t: &Tenancy, probe_addr: &str) {
    let watches = || async {
        let metrics = scrape(&format!("http://{probe_addr}/metrics")).await;
        sample(&metrics, "configrollout_region_watches")
    };
    let watches_before = watches().await;
    for (name, namespace, target) in [
        ("escape-app", "app", "limits"),
        ("escape-kube-system", "kube-system", "coredns"),
        ("escape-kube-system-absent", "kube-system", "coredns-absent"),
    ] {
        t.create(&rollout(name, namespace, target, EVERY_REGION))
            .await
            .unwrap_or_else(|e| panic!("{name}: no policy installed yet, admitted: {e}"));
        let (reason, message) = t.condition(name, "InvalidSpec").await;
        assert_eq!(reason, "OutsideGrant", "{name}: {message}");
        assert!(
            message.contains("spec.target.namespace"),
            "{name}: {message}"
        );
        assert!(message.contains(namespace), "{name}: {message}");
    }
    // coredns exists in every region, coredns-absent in none: the two refusals differ
    // in the name only, and say nothing a read of the region would have told.
    let (_, existing) = t.condition("escape-kube-system", "InvalidSpec").await;
    let (_, absent) = t
        .condition("escape-kube-system-absent", "InvalidSpec")
        .await;
    assert_eq!(existing, absent.replace("coredns-absent", "coredns"));
    for name in ["escape-kube-system", "escape-kube-system-absent"] {
        let rollout = within("read rollout", t.admin_rollouts().get(name)).await;
        let status = rollout.status.expect("status");
        assert!(status.regions.is_empty(), "{name}: {:?}", status.regions);
    }
    assert_eq!(
        watches().await,
        watches_before,
        "a region watch was opened for a namespace outside the grant"
    );

    // A ConfigMap of the tenant's own namespace that configrollout did not create.
    t.create(&rollout("adopt-legacy", TENANT, "legacy", EVERY_REGION))
        .await
        .expect("admitted");
    let (reason, message) = t.condition("adopt-legacy", "InvalidSpec").await;
    assert_eq!(reason, "TargetRefused", "{message}");
    assert!(message.contains("team-a/legacy"), "{message}");
    assert!(
        message.contains("not managed by configrollout"),
        "{message}"
    );

    // Asking to adopt it without a grant that allows adoption.
    let adopting = rollout("adopt-legacy-asked", TENANT, "legacy", EVERY_REGION)
        .replace("name: legacy}", "name: legacy, adopt: true}");
    t.create(&adopting).await.expect("admitted");
    let (reason, message) = t.condition("adopt-legacy-asked", "InvalidSpec").await;
    assert_eq!(reason, "OutsideGrant", "{message}");
    assert!(message.contains("spec.target.adopt"), "{message}");

    // Its own namespace, in every region: allowed by default.
    t.create(&rollout("own", TENANT, "limits", EVERY_REGION))
        .await
        .expect("admitted");
    t.condition("own", "Complete").await;
}

/// A region whose admin grants the controller no `list`/`watch` on ConfigMaps (older
/// RBAC, or a stricter platform): its watch of the target namespace fails, the log says
/// so naming the region and the rights, and the controller reads the targets there at
/// each reconcile instead. Rollouts complete there as anywhere else, a second revision
/// too (its merge plans from a fresh read, not from memory).
async fn a_region_without_list_and_watch_is_read_every_time(t: &Tenancy, controller: &LabChild) {
    let region = "region-2";
    let roles: Api<ClusterRole> = Api::all(t.world.region(region));
    let shipped = within("read the region role", roles.get(REGION_ROLE)).await;
    let mut reduced = shipped.clone();
    for rule in reduced.rules.iter_mut().flatten() {
        if rule
            .resources
            .iter()
            .flatten()
            .any(|resource| resource == "configmaps")
        {
            rule.verbs.retain(|verb| verb != "list" && verb != "watch");
        }
    }
    within(
        "take list and watch away",
        roles.replace(REGION_ROLE, &PostParams::default(), &reduced),
    )
    .await;
    let as_controller = t
        .world
        .lab
        .client(region, User::Controller)
        .expect("controller client");
    eventually(
        "the region refuses the controller a list",
        PROGRESS,
        || async {
            let listed = Api::<ConfigMap>::namespaced(as_controller.clone(), TENANT)
                .list(&ListParams::default())
                .await;
            matches!(listed, Err(kube::Error::Api(status)) if status.code == 403).then_some(())
        },
    )
    .await;

    t.create(&rollout("unwatched", TENANT, "unwatched", EVERY_REGION))
        .await
        .expect("admitted");
    t.condition("unwatched", "Complete").await;
    change_data(
        &t.admin_rollouts(),
        "unwatched",
        serde_json::json!({"limit": "11"}),
    )
    .await;
    eventually("r2 Complete", PROGRESS, || async {
        let rollout = within("read unwatched", t.admin_rollouts().get("unwatched")).await;
        let status = rollout.status?;
        (status.revision.as_deref() == Some("r2") && status.true_condition("Complete").is_some())
            .then_some(())
    })
    .await;
    for region in REGIONS {
        let target = within(
            "read the target",
            Api::<ConfigMap>::namespaced(t.world.region(region), TENANT).get("unwatched"),
        )
        .await;
        assert_eq!(target.data, Some(data(&[("limit", "11")])), "{region}");
    }
    let log = controller.log();
    assert!(
        log.lines()
            .any(|line| line.contains("region ConfigMap watch failed")
                && line.contains(region)
                && line.contains("list and watch")),
        "the log names the region whose watch is refused:\n{}",
        controller.log_tail(40)
    );

    let mut current = within("read the region role", roles.get(REGION_ROLE)).await;
    current.rules = shipped.rules;
    within(
        "give list and watch back",
        roles.replace(REGION_ROLE, &PostParams::default(), &current),
    )
    .await;
}

/// Two rollouts may share a ConfigMap but not a key: the second one that declares a key
/// the first manages is refused, naming both, and writes nothing.
async fn a_key_has_one_managing_rollout(t: &Tenancy) {
    let rival = rollout("own-rival", TENANT, "limits", EVERY_REGION)
        .replace("data: {limit: \"10\"}", "data: {limit: \"20\"}");
    t.create(&rival).await.expect("admitted");
    let (reason, message) = t.condition("own-rival", "InvalidSpec").await;
    assert_eq!(reason, "TargetRefused", "{message}");
    assert!(
        message.contains("key limit is owned by ConfigRollout team-a/own"),
        "{message}"
    );
    for region in REGIONS {
        let api: Api<ConfigMap> = Api::namespaced(t.world.region(region), TENANT);
        let data = within("read the shared target", api.get("limits"))
            .await
            .data
            .unwrap_or_default();
        assert_eq!(
            data.get("limit").map(String::as_str),
            Some("10"),
            "{region}"
        );
    }
}

/// An empty consumer selector would restart every workload of the namespace: the schema
/// refuses it, whatever policies are installed.
async fn an_empty_consumer_selector_is_refused(t: &Tenancy) {
    let everything = rollout(
        "restart-everything",
        TENANT,
        "limits",
        &format!("  consumers:\n    - {{kind: DaemonSet, selector: {{}}}}\n{EVERY_REGION}"),
    );
    let error = t.create(&everything).await.expect_err("refused");
    assert!(
        error.to_string().contains("spec.consumers[0].selector"),
        "{error}"
    );
}

/// A Region whose kubeconfig runs a command is never used, and its status says why
/// without quoting the kubeconfig.
async fn a_region_with_an_exec_kubeconfig_is_refused(t: &Tenancy) {
    let marker = t.world.lab.root_dir().join("exec-ran");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:1\"}}\nusers:\n- name: u\n  user:\n    token: {SECRET_TOKEN}\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"touch {}\"]\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        marker.display()
    );
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("exec-kubeconfig".into()),
            namespace: Some(SYSTEM_NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        data: Some(
            [(
                KUBECONFIG_SECRET_KEY.to_owned(),
                ByteString(kubeconfig.into_bytes()),
            )]
            .into(),
        ),
        ..Secret::default()
    };
    within(
        "create the exec kubeconfig Secret",
        Api::<Secret>::namespaced(t.world.hub.clone(), SYSTEM_NAMESPACE)
            .create(&PostParams::default(), &secret),
    )
    .await;
    let region: Region = serde_saphyr::from_str(&format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: Region\nmetadata: {{name: region-exec}}\nspec:\n  kubeconfigSecretRef: {{namespace: {SYSTEM_NAMESPACE}, name: exec-kubeconfig, key: {KUBECONFIG_SECRET_KEY}}}\n"
    ))
    .expect("Region YAML");
    within(
        "create the exec Region",
        Api::<Region>::all(t.world.hub.clone()).create(&PostParams::default(), &region),
    )
    .await;
    t.create(&rollout(
        "via-exec",
        TENANT,
        "via-exec",
        "  stages:\n    - {name: all, regions: {names: [region-exec]}}\n",
    ))
    .await
    .expect("admitted");
    let error = eventually("region-exec reports its error", PROGRESS, || async {
        let region = within(
            "read region-exec",
            Api::<Region>::all(t.world.hub.clone()).get("region-exec"),
        )
        .await;
        region.status?.last_error
    })
    .await;
    assert!(error.contains("exec"), "{error}");
    assert!(
        !error.contains(SECRET_TOKEN),
        "quotes the kubeconfig: {error}"
    );
    let rollout = within("read via-exec", t.admin_rollouts().get("via-exec")).await;
    let status = serde_json::to_string(&rollout.status).expect("status JSON");
    assert!(
        !status.contains(SECRET_TOKEN),
        "quotes the kubeconfig: {status}"
    );
    assert!(!marker.exists(), "the kubeconfig's command was run");
}

/// With the shipped policy installed, `kubectl apply` refuses an escape outright, naming
/// the field.
async fn the_admission_policy_refuses_escapes(t: &Tenancy) {
    let policy = configrollout_e2e::repository_root().join("policies/rollout-tenancy.yaml");
    t.world
        .lab
        .apply(HUB, User::Admin, &policy)
        .await
        .expect("install the tenancy policy");
    // A policy takes effect once the apiserver has compiled it: dry runs until it does.
    eventually("the policy is in force", PROGRESS, || async {
        t.try_create(&rollout("escape-app-2", "app", "limits", EVERY_REGION))
            .await
            .err()
    })
    .await;
    let error = t
        .create(&rollout("escape-app-2", "app", "limits", EVERY_REGION))
        .await
        .expect_err("refused");
    let text = error.to_string();
    assert!(text.contains("spec.target.namespace"), "{text}");
    assert!(text.contains("not granted"), "{text}");

    let error = t
        .create(&rollout(
            "escape-kube-system-2",
            "kube-system",
            "coredns",
            EVERY_REGION,
        ))
        .await
        .expect_err("refused");
    assert!(error.to_string().contains("kube-system"), "{error}");

    let adopting = rollout("adopt-2", TENANT, "legacy", EVERY_REGION)
        .replace("name: legacy}", "name: legacy, adopt: true}");
    let error = t.create(&adopting).await.expect_err("refused");
    assert!(error.to_string().contains("spec.target.adopt"), "{error}");

    t.create(&rollout("own-2", TENANT, "limits-2", EVERY_REGION))
        .await
        .expect("its own namespace is admitted");
}

/// A platform admin grants `app` in region-1 and region-2: the rollout refused before now
/// completes there, and region-3 is still never written.
async fn a_grant_opens_exactly_what_it_names(t: &Tenancy) {
    t.world
        .lab
        .annotate_namespace(
            HUB,
            TENANT,
            &[
                (ALLOWED_TARGET_NAMESPACES, "app"),
                (ALLOWED_REGIONS, "region-1, region-2"),
            ],
        )
        .await
        .expect("grant");
    t.condition("escape-app", "Complete").await;
    for region in ["region-1", "region-2"] {
        assert_eq!(
            t.world.target_data(region, "limits").await,
            Some(data(&[("limit", "10")])),
            "{region}"
        );
    }
    assert_eq!(t.world.target_data("region-3", "limits").await, None);

    let error = eventually("the policy sees the grant", PROGRESS, || async {
        t.try_create(&rollout(
            "named-region-3",
            "app",
            "named",
            "  stages:\n    - {name: all, regions: {names: [region-1, region-3]}}\n",
        ))
        .await
        .err()
        .filter(|e| e.to_string().contains("regions.names"))
    })
    .await;
    assert!(error.to_string().contains("region-3"), "{error}");
    assert!(!error.to_string().contains("region-1,"), "{error}");
}

/// A gate query is the tenant's own PromQL: an answer with more series than the
/// controller accepts is an Inconclusive sample that says so, read from the real
/// Prometheus (one series per region: three, over the controller's cap of two).
async fn an_oversized_prometheus_answer_is_inconclusive(t: &Tenancy) {
    t.create(&rollout(
        "greedy-gate",
        TENANT,
        "greedy-gate",
        "  gates:\n    - {name: everything, query: 'configrollout_lab_requests_total', condition: 'all(result >= 0)', interval: 1s, count: 3, inconclusiveLimit: 0}\n  stages:\n    - {name: canary, regions: {names: [region-1]}, gates: [everything]}\n",
    ))
    .await
    .expect("admitted");
    let (reason, message) = t.condition("greedy-gate", "Halted").await;
    assert_eq!(reason, "GateFailed", "{message}");
    let rollout = within("read greedy-gate", t.admin_rollouts().get("greedy-gate")).await;
    let samples: Vec<String> = rollout
        .status
        .iter()
        .flat_map(|status| &status.stages)
        .flat_map(|stage| &stage.gates)
        .flat_map(|gate| &gate.samples)
        .filter_map(|sample| sample.message.clone())
        .collect();
    assert!(
        samples
            .iter()
            .any(|m| m.contains("3 series") && m.contains("limit of 2")),
        "{samples:?}"
    );
}

fn assert_nothing_written_outside_the_grant(t: &Tenancy) {
    let allowed = |write: &str| {
        let (region, name) = write.split_once(": ").expect("region: name");
        let (namespace, config_map) = name.split_once('/').expect("namespace/name");
        let target = config_map.trim_end_matches(".configrollout-state");
        match namespace {
            TENANT => target != "legacy",
            "app" => {
                (region != "region-3" && target == "limits") || OTHER_TEAM_TARGETS.contains(&target)
            }
            _ => false,
        }
    };
    let writes = t.all_writes();
    assert!(
        !writes.is_empty(),
        "the watches saw the tenant's own writes"
    );
    let outside: Vec<&String> = writes.iter().filter(|w| !allowed(w)).collect();
    assert!(outside.is_empty(), "written outside the grant: {outside:?}");
}

/// The region namespace two teams share (`team-a`, tenant-a's, and `team`, standing for a
/// second team), as platform teams grant a `config` or `shared` namespace.
const SHARED: &str = "shared-config";

/// A rollout of `hub_namespace` on `SHARED/target` with `data` (a YAML flow mapping) and
/// its stages.
fn shared_rollout(
    hub_namespace: &str,
    name: &str,
    target: &str,
    data: &str,
    stages: &str,
) -> String {
    format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata: {{name: {name}, namespace: {hub_namespace}}}\nspec:\n  target: {{namespace: {SHARED}, name: {target}}}\n  data: {data}\n  stages:\n{stages}"
    )
}

/// Canary region-1, then the others.
const FROM_REGION_1: &str = "    - {name: first, regions: {names: [region-1]}}\n    - {name: rest, regions: {names: [region-2, region-3]}, maxParallel: 2}\n";
/// Canary region-3, then the others.
const FROM_REGION_3: &str = "    - {name: first, regions: {names: [region-3]}}\n    - {name: rest, regions: {names: [region-1, region-2]}, maxParallel: 2}\n";

impl Tenancy {
    async fn shared_data(&self, region: &str, target: &str) -> Option<BTreeMap<String, String>> {
        let api: Api<ConfigMap> = Api::namespaced(self.world.region(region), SHARED);
        within("read a shared target", api.get_opt(target))
            .await
            .map(|config_map| config_map.data.unwrap_or_default())
    }

    /// The replica the companion of `SHARED/target` in `region` holds, if any.
    async fn replica_in(&self, region: &str, target: &str) -> Option<configrollout::crdt::Replica> {
        let api: Api<ConfigMap> = Api::namespaced(self.world.region(region), SHARED);
        let companion = within(
            "read the companion",
            api.get_opt(&format!(
                "{target}{}",
                configrollout::regions::materialize::COMPANION_SUFFIX
            )),
        )
        .await;
        let state = companion
            .and_then(|c| c.data)
            .and_then(|d| d.get("state").cloned())?;
        Some(configrollout::crdt::decode(&state).expect("the companion decodes"))
    }

    /// The writers whose entries the companion of `SHARED/target` in `region` holds.
    async fn writers_in(&self, region: &str, target: &str) -> BTreeSet<String> {
        self.replica_in(region, target)
            .await
            .map(|replica| {
                replica
                    .iter()
                    .map(|(_, entry)| entry.stamp.writer.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Overrides `changes` of `SHARED/target` in `region` as the on-call engineer does
    /// with `kubectl configrollout override`: stamped now, signed with the hub's key.
    async fn override_keys(
        &self,
        region: &str,
        target: &str,
        changes: &BTreeMap<String, Option<String>>,
    ) {
        let secrets: Api<Secret> = Api::namespaced(self.world.hub.clone(), SYSTEM_NAMESPACE);
        let secret = within(
            "read the digest key",
            secrets.get("configrollout-digest-key"),
        )
        .await;
        let key = configrollout::crdt::DigestKey::new(&secret.data.expect("key data")["key"].0)
            .expect("key");
        let now_ms = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_millis(),
        )
        .expect("fits");
        let stamp = configrollout::crdt::Stamp::new(
            now_ms,
            0,
            configrollout::crdt::WriterId::override_by("oncall").expect("writer"),
        );
        within(
            "override in a region",
            configrollout::regions::overrides::write_override(
                &self.world.region(region),
                &key,
                SHARED,
                target,
                stamp,
                changes,
            ),
        )
        .await;
    }

    fn team_rollouts(&self) -> Api<ConfigRollout> {
        Api::namespaced(self.world.hub.clone(), "team")
    }
}

/// Two teams granted one region namespace declare the same key of one ConfigMap, with
/// stages in opposite orders, at the same moment. The hub decides one owner: it
/// completes everywhere, the other is Refused everywhere, naming the key, and writes
/// nothing in any region; every region holds the same data. Once the owner is deleted
/// the other takes the key over on its own and completes.
async fn two_teams_on_one_key_converge_on_its_owner(t: &Tenancy) {
    let a = shared_rollout(
        TENANT,
        "payments-a",
        "payments",
        "{y: \"from-a\", a_only: \"1\"}",
        FROM_REGION_1,
    );
    let b = shared_rollout(
        "team",
        "payments-b",
        "payments",
        "{y: \"from-b\", b_only: \"1\"}",
        FROM_REGION_3,
    );
    let b: ConfigRollout = serde_saphyr::from_str(&b).expect("rollout YAML");
    let team = t.team_rollouts();
    let params = PostParams::default();
    let (created_a, created_b) = tokio::join!(t.create(&a), team.create(&params, &b));
    created_a.expect("team-a's rollout is admitted");
    created_b.expect("team's rollout is admitted");
    let decided = eventually("one owner is decided", PROGRESS, || async {
        let a = within("read a", t.admin_rollouts().get("payments-a")).await;
        let b = within("read b", t.team_rollouts().get("payments-b")).await;
        match (phase_of(&a).as_deref(), phase_of(&b).as_deref()) {
            (Some("Complete"), Some("Refused")) => Some(("payments-a", "payments-b", a, b)),
            (Some("Refused"), Some("Complete")) => Some(("payments-b", "payments-a", b, a)),
            _ => None,
        }
    })
    .await;
    let (owner, refused, _, refused_rollout) = decided;
    let invalid = refused_rollout
        .status
        .as_ref()
        .and_then(|status| status.true_condition("InvalidSpec"))
        .expect("the refusal says why");
    assert_eq!(invalid.reason, "TargetRefused", "{}", invalid.message);
    assert!(
        invalid.message.contains("key y is owned by"),
        "{}",
        invalid.message
    );
    // The owner is in another namespace: not named to the refused rollout's readers.
    assert!(!invalid.message.contains(owner), "{}", invalid.message);
    let owner_writer = if owner == "payments-a" {
        "rollout:team-a/payments-a"
    } else {
        "rollout:team/payments-b"
    };
    let expected = if owner == "payments-a" {
        data(&[("y", "from-a"), ("a_only", "1")])
    } else {
        data(&[("y", "from-b"), ("b_only", "1")])
    };
    for region in REGIONS {
        assert_eq!(
            t.shared_data(region, "payments").await,
            Some(expected.clone()),
            "{region}"
        );
        assert_eq!(
            t.writers_in(region, "payments").await,
            BTreeSet::from([owner_writer.to_owned()]),
            "{region}: the refused rollout wrote nothing"
        );
    }
    let claims: Api<configrollout::api::TargetClaim> = Api::all(t.world.hub.clone());
    let claim = within("read the claim", claims.get(&format!("{SHARED}.payments"))).await;
    let y = claim
        .spec
        .keys
        .iter()
        .find(|entry| entry.key == "y")
        .expect("y is claimed");
    assert_eq!(y.claimants.first().map(|c| c.name.as_str()), Some(owner));
    assert_eq!(y.claimants.get(1).map(|c| c.name.as_str()), Some(refused));

    // The owner goes: the next in line takes the key over by itself.
    match owner {
        "payments-a" => {
            within(
                "delete a",
                t.admin_rollouts().delete("payments-a", &Default::default()),
            )
            .await
        }
        _ => {
            within(
                "delete b",
                t.team_rollouts().delete("payments-b", &Default::default()),
            )
            .await
        }
    };
    eventually("the next in line completes", PROGRESS, || async {
        let api = if refused == "payments-a" {
            t.admin_rollouts()
        } else {
            t.team_rollouts()
        };
        let rollout = within("read", api.get(refused)).await;
        (phase_of(&rollout).as_deref() == Some("Complete")).then_some(())
    })
    .await;
    let y_now = if refused == "payments-a" {
        "from-a"
    } else {
        "from-b"
    };
    for region in REGIONS {
        let data = t.shared_data(region, "payments").await.expect("target");
        assert_eq!(data.get("y").map(String::as_str), Some(y_now), "{region}");
    }
}

/// A target named like another target's companion is refused at apply; an object planted
/// in a region under the companion name of a target is never read as its state: the
/// rollout is refused there, naming it, and nothing is written.
async fn a_companion_name_cannot_be_squatted(t: &Tenancy) {
    let squat = shared_rollout(
        TENANT,
        "squatter",
        "payments.configrollout-state",
        "{k: v}",
        FROM_REGION_1,
    );
    let error = t
        .create(&squat)
        .await
        .expect_err("a reserved name is refused");
    assert!(
        error
            .to_string()
            .contains("must not end with .configrollout-state"),
        "{error}"
    );

    let planted = ConfigMap {
        metadata: ObjectMeta {
            name: Some("orders.configrollout-state".into()),
            ..ObjectMeta::default()
        },
        data: Some(data(&[("state", "{\"v\":1,\"made\":\"up\"}")])),
        ..ConfigMap::default()
    };
    within(
        "plant an object under a companion's name",
        Api::<ConfigMap>::namespaced(t.world.region("region-1"), SHARED)
            .create(&PostParams::default(), &planted),
    )
    .await;
    t.create(&shared_rollout(
        TENANT,
        "orders",
        "orders",
        "{k: v}",
        FROM_REGION_1,
    ))
    .await
    .expect("admitted");
    let (reason, message) = t.condition("orders", "InvalidSpec").await;
    assert_eq!(reason, "TargetRefused", "{message}");
    assert!(
        message.contains("orders.configrollout-state") && message.contains("region-1"),
        "{message}"
    );
    for region in REGIONS {
        assert_eq!(t.shared_data(region, "orders").await, None, "{region}");
    }
}

/// An emergency override of the owner's key makes no one else its owner: a rollout of
/// another team declaring it is refused, and the override stands.
async fn an_override_transfers_no_ownership(t: &Tenancy) {
    t.create(&shared_rollout(
        TENANT,
        "rates-a",
        "rates",
        "{rate: \"10\"}",
        FROM_REGION_1,
    ))
    .await
    .expect("admitted");
    t.condition("rates-a", "Complete").await;
    let changes = BTreeMap::from([("rate".to_owned(), Some("99".to_owned()))]);
    t.override_keys("region-1", "rates", &changes).await;
    let b: ConfigRollout = serde_saphyr::from_str(&shared_rollout(
        "team",
        "rates-b",
        "rates",
        "{rate: \"1\"}",
        FROM_REGION_1,
    ))
    .expect("YAML");
    within(
        "create rates-b",
        t.team_rollouts().create(&PostParams::default(), &b),
    )
    .await;
    eventually("rates-b is refused", PROGRESS, || async {
        let rollout = within("read", t.team_rollouts().get("rates-b")).await;
        (phase_of(&rollout).as_deref() == Some("Refused")).then_some(())
    })
    .await;
    assert_eq!(
        t.shared_data("region-1", "rates")
            .await
            .and_then(|d| d.get("rate").cloned())
            .as_deref(),
        Some("99")
    );
    for region in ["region-2", "region-3"] {
        assert_eq!(
            t.shared_data(region, "rates")
                .await
                .and_then(|d| d.get("rate").cloned())
                .as_deref(),
            Some("10"),
            "{region}"
        );
    }
    let rollout = within("read rates-a", t.admin_rollouts().get("rates-a")).await;
    let region_1 = region_status(&rollout, "region-1").expect("region-1");
    assert_eq!(region_1.overridden_keys, ["rate"]);
}

/// A consumer selector matches only what reads the target: a Deployment the selector
/// matches that mounts nothing of the target is never restarted, and status names it.
async fn only_workloads_that_read_the_target_are_restarted(t: &Tenancy) {
    let deployment = |name: &str, mounts: bool| -> k8s_openapi::api::apps::v1::Deployment {
        let volumes = if mounts {
            serde_json::json!([{"name": "config", "configMap": {"name": "svc-config"}}])
        } else {
            serde_json::json!([])
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"app": "svc"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"name": name}},
                "template": {
                    "metadata": {"labels": {"name": name, "app": "svc"}},
                    "spec": {"containers": [{"name": "app", "image": "app"}], "volumes": volumes},
                },
            },
        }))
        .expect("deployment")
    };
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(t.world.region("region-1"), SHARED);
    for (name, mounts) in [("reader", true), ("bystander", false)] {
        within(
            "create a deployment",
            deployments.create(&PostParams::default(), &deployment(name, mounts)),
        )
        .await;
    }
    let everything = shared_rollout(
        TENANT,
        "svc-nope",
        "svc-config",
        "{k: v}",
        "    - {name: first, regions: {names: [region-1]}}\n",
    )
    .replace(
        "  stages:",
        "  consumers:\n    - {kind: Deployment, selector: {matchExpressions: [{key: nope, operator: DoesNotExist}]}}\n  stages:",
    );
    let error = t.create(&everything).await.expect_err("refused");
    assert!(
        error.to_string().contains("must name a label it requires"),
        "{error}"
    );

    let selected = shared_rollout(
        TENANT,
        "svc",
        "svc-config",
        "{k: v}",
        "    - {name: first, regions: {names: [region-1]}}\n",
    )
    .replace(
        "  stages:",
        "  consumers:\n    - {kind: Deployment, selector: {matchLabels: {app: svc}}}\n  stages:",
    );
    t.create(&selected).await.expect("admitted");
    eventually("the reader is restarted", PROGRESS, || async {
        let reader = within("read reader", deployments.get("reader")).await;
        let marker = reader
            .spec?
            .template
            .metadata?
            .annotations?
            .get(configrollout::regions::consumers::RESTARTED_FOR_ANNOTATION)
            .cloned();
        marker.map(|_| ())
    })
    .await;
    let rollout = eventually("status names the bystander", PROGRESS, || async {
        let rollout = within("read svc", t.admin_rollouts().get("svc")).await;
        let region = region_status(&rollout, "region-1")?;
        (region.ignored_workloads == ["bystander"]).then_some(rollout)
    })
    .await;
    assert!(rollout.status.is_some());
    let bystander = within("read bystander", deployments.get("bystander")).await;
    let annotations = bystander
        .spec
        .and_then(|spec| spec.template.metadata)
        .and_then(|meta| meta.annotations)
        .unwrap_or_default();
    assert!(
        !annotations.contains_key(configrollout::regions::consumers::RESTARTED_FOR_ANNOTATION),
        "the bystander was restarted: {annotations:?}"
    );
}

/// Two teams granted one region namespace: one owner per key, decided in the hub;
/// reserved companion names; consumers only what reads the target.
async fn teams_share_a_region_namespace(t: &Tenancy) {
    t.world
        .lab
        .annotate_namespace(
            HUB,
            TENANT,
            &[
                (ALLOWED_TARGET_NAMESPACES, SHARED),
                (ALLOWED_REGIONS, "region-1, region-2, region-3"),
            ],
        )
        .await
        .expect("grant team-a the shared namespace");
    t.world
        .lab
        .annotate_namespace(HUB, "team", &[(ALLOWED_TARGET_NAMESPACES, SHARED)])
        .await
        .expect("grant team the shared namespace");
    for region in REGIONS {
        t.world
            .lab
            .create_namespace(region, SHARED)
            .await
            .expect("namespace");
    }
    // The admission policy reads the grant too: wait until it lets team-a in.
    eventually("the policy sees the grant", PROGRESS, || async {
        t.try_create(&shared_rollout(
            TENANT,
            "probe",
            "probe",
            "{k: v}",
            FROM_REGION_1,
        ))
        .await
        .ok()
    })
    .await;
    two_teams_on_one_key_converge_on_its_owner(t).await;
    a_companion_name_cannot_be_squatted(t).await;
    an_override_transfers_no_ownership(t).await;
    only_workloads_that_read_the_target_are_restarted(t).await;
    a_stalled_co_writer_holds_back_only_its_own_keys(t).await;
}

/// Issue 42: a co-writer of a shared target that has not reached every region (here,
/// waiting for an approval nobody gives) does not hold back the collection of the other
/// writers' tombstones: only the tombstones of the keys it holds are kept, so that its
/// late write still loses to a later removal (an on-call override's) where it never got
/// to. The rollout whose tombstones wait for it says so in its status, without naming the
/// other team's rollout.
async fn a_stalled_co_writer_holds_back_only_its_own_keys(t: &Tenancy) {
    let waiting_stages = "    - {name: first, regions: {names: [region-1]}}\n    - {name: rest, regions: {names: [region-2, region-3]}, maxParallel: 2, approval: Required}\n";
    let stuck = shared_rollout("team", "stalled-b", "stalled", "{b: \"1\"}", waiting_stages);
    let stuck: ConfigRollout = serde_saphyr::from_str(&stuck).expect("rollout YAML");
    within(
        "create stalled-b",
        t.team_rollouts().create(&PostParams::default(), &stuck),
    )
    .await;
    eventually("stalled-b waits for its approval", PROGRESS, || async {
        let b = within("read b", t.team_rollouts().get("stalled-b")).await;
        (phase_of(&b).as_deref() == Some("AwaitingApproval")).then_some(())
    })
    .await;
    t.create(&shared_rollout(
        TENANT,
        "stalled-a",
        "stalled",
        "{a: \"1\", gone: \"x\"}",
        FROM_REGION_1,
    ))
    .await
    .expect("admitted");
    t.condition("stalled-a", "Complete").await;
    // On call removes b in region-2, where stalled-b has not been yet: a later removal
    // than stalled-b's declaration, which must win when stalled-b gets there.
    t.override_keys(
        "region-2",
        "stalled",
        &BTreeMap::from([("b".to_owned(), None)]),
    )
    .await;
    // Removing a key leaves a tombstone to collect.
    let patch = serde_json::json!({"spec": {"data": {"a": "1", "gone": null}}});
    within(
        "remove a key",
        t.admin_rollouts()
            .patch("stalled-a", &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
    let status = eventually("stalled-a collects without stalled-b", PROGRESS, || async {
        let a = within("read a", t.admin_rollouts().get("stalled-a")).await;
        let status = a.status?;
        (status.revision.as_deref() == Some("r2") && status.collected_through.is_some())
            .then_some(status)
    })
    .await;
    let waits = status.collection_waits_for.expect("says what it waits for");
    assert!(waits.contains("a rollout in another namespace"), "{waits}");
    assert!(waits.contains("region-2"), "{waits}");
    assert!(
        !waits.contains("stalled-b") && !waits.contains("\"b\""),
        "names another team's rollout or key: {waits}"
    );
    let keeps = status.collection_keeps.expect("stalled-b's key is kept");
    assert_eq!(keeps.keys.len(), 1, "only stalled-b's one key: {keeps:?}");
    assert!(
        !keeps.keys.iter().any(|digest| digest == "b"),
        "a digest, not the name"
    );

    // The point is acted on at the next write to each region: a third revision.
    let patch = serde_json::json!({"spec": {"data": {"a": "2"}}});
    within(
        "change a",
        t.admin_rollouts()
            .patch("stalled-a", &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
    eventually("stalled-a completes r3", PROGRESS, || async {
        let a = within("read a", t.admin_rollouts().get("stalled-a")).await;
        let status = a.status?;
        (status.revision.as_deref() == Some("r3") && status.phase == Some(RolloutPhase::Complete))
            .then_some(())
    })
    .await;
    for region in REGIONS {
        let replica = t.replica_in(region, "stalled").await.expect("a companion");
        assert!(
            replica.get("gone").is_none(),
            "{region}: stalled-a's tombstone was not collected"
        );
    }
    let region_2 = t
        .replica_in("region-2", "stalled")
        .await
        .expect("a companion");
    let b = region_2
        .get("b")
        .expect("the override's tombstone of b is kept");
    assert!(b.is_tombstone(), "{b:?}");

    // stalled-b goes on (its approval dropped, its revision the same): region-3 gets b,
    // region-2 keeps the later removal.
    let stages = serde_json::json!({"spec": {"stages": [
        {"name": "first", "regions": {"names": ["region-1"]}},
        {"name": "rest", "regions": {"names": ["region-2", "region-3"]}, "maxParallel": 2},
    ]}});
    within(
        "drop stalled-b's approval",
        t.team_rollouts()
            .patch("stalled-b", &PatchParams::default(), &Patch::Merge(&stages)),
    )
    .await;
    eventually("stalled-b reaches region-3", PROGRESS, || async {
        let data = t.shared_data("region-3", "stalled").await?;
        (data.get("b").map(String::as_str) == Some("1")).then_some(())
    })
    .await;
    let stalled_b = "rollout:team/stalled-b";
    eventually("stalled-b's write reaches region-2", PROGRESS, || async {
        let replica = t.replica_in("region-2", "stalled").await?;
        replica
            .frontiers()
            .keys()
            .any(|writer| writer.to_string() == stalled_b)
            .then_some(())
    })
    .await;
    let data = t.shared_data("region-2", "stalled").await.expect("target");
    assert_eq!(
        data.get("b"),
        None,
        "the late write undid the override's removal"
    );
    assert_eq!(data.get("a").map(String::as_str), Some("2"));

    within(
        "delete stalled-b",
        t.team_rollouts()
            .delete("stalled-b", &kube::api::DeleteParams::default()),
    )
    .await;
}

/// Targets of the other team's rollouts (hub namespace `team`, granted `app`), which the
/// controller keeps serving while tenant-a's specs try to stop it.
const OTHER_TEAM_TARGETS: [&str; 3] = [
    "after-huge-durations",
    "beside-the-panic",
    "after-the-panic",
];

/// A tenant's durations that no clock can hold (issue: one tenant's `999999999999h`
/// stopped the controller for every team) are refused at apply, naming the field, and
/// the controller goes on: another team's rollout completes within its idle time.
async fn no_tenant_duration_stops_the_controller(t: &Tenancy, probe_addr: &str) {
    let huge = "999999999999h";
    let one_stage = |extra: &str| {
        format!("  stages:\n    - {{name: all, regions: {{names: [region-1]}}{extra}}}\n")
    };
    let gate = |field: &str| {
        format!(
            "  gates:\n    - {{name: errors, query: up, condition: result > 0, {field}: {huge}}}\n"
        )
    };
    let variants = [
        (
            "huge-stage-deadline",
            one_stage(&format!(", progressDeadline: {huge}")),
            "spec.stages[].progressDeadline must be at most 8760h",
        ),
        (
            "huge-pause",
            one_stage(&format!(", pause: {{duration: {huge}}}")),
            "pause.duration must be at most 8760h",
        ),
        (
            "huge-gate-interval",
            format!("{}{}", gate("interval"), one_stage(", gates: [errors]")),
            "spec.gates[].interval must be at most 24h",
        ),
        (
            "huge-rollout-deadline",
            format!("  progressDeadline: {huge}\n{}", one_stage("")),
            "spec.progressDeadline must be at most 8760h",
        ),
    ];
    for (name, rest, message) in &variants {
        let refused = t
            .create(&rollout(name, TENANT, name, rest))
            .await
            .expect_err("a duration past its ceiling is refused at apply");
        assert!(refused.to_string().contains(message), "{name}: {refused}");
    }

    // Another team's plain rollout completes within the controller's idle requeue.
    t.world
        .create_rollout(&rollout_yaml(
            "after-huge-durations",
            "  data: {limit: \"5\"}\n  stages:\n    - {name: all, regions: {names: [region-1]}}\n",
        ))
        .await;
    t.world
        .wait_condition(
            "after-huge-durations",
            "Complete",
            configrollout::reconcile::IDLE_REQUEUE,
        )
        .await;
    assert_healthy(probe_addr).await;
}

/// A reconcile that panics (a bug, injected by the test build's annotation) stops only
/// its own rollout: it says ReconcileFailed with reason InternalError and where, the
/// panic is counted, the controller stays healthy and every other rollout completes,
/// before and after.
async fn a_panic_stays_in_its_rollout(t: &Tenancy, probe_addr: &str) {
    let plain = |name: &str| {
        rollout_yaml(
            name,
            "  data: {limit: \"7\"}\n  stages:\n    - {name: all, regions: {names: [region-1, region-2]}, maxParallel: 2}\n",
        )
    };
    let panicking = plain("panicking").replace(
        "  name: panicking\n",
        &format!(
            "  name: panicking\n  annotations: {{{}: \"true\"}}\n",
            configrollout::reconcile::fault_injection::PANIC_ANNOTATION
        ),
    );
    t.world.create_rollout(&panicking).await;
    t.world.create_rollout(&plain("beside-the-panic")).await;
    let failed = t
        .world
        .wait_condition("panicking", "ReconcileFailed", PROGRESS)
        .await;
    let condition = failed
        .status
        .as_ref()
        .and_then(|status| status.true_condition("ReconcileFailed"))
        .expect("the condition is true");
    assert_eq!(condition.reason, "InternalError", "{}", condition.message);
    assert!(
        condition
            .message
            .contains("controller/src/reconcile/fault_injection.rs:"),
        "{}",
        condition.message
    );
    t.world
        .wait_condition("beside-the-panic", "Complete", PROGRESS)
        .await;
    // The loop is still taking new work, and still retrying the panicking rollout.
    t.world.create_rollout(&plain("after-the-panic")).await;
    t.world
        .wait_condition("after-the-panic", "Complete", PROGRESS)
        .await;
    for region in ["region-1", "region-2"] {
        assert!(t.world.target_data(region, "panicking").await.is_none());
    }
    let metrics = scrape(&format!("http://{probe_addr}/metrics")).await;
    assert!(
        sample(
            &metrics,
            "configrollout_reconcile_errors_total{category=\"panic\"}"
        ) >= 1.0,
        "{metrics}"
    );
    assert_healthy(probe_addr).await;
}

async fn assert_healthy(probe_addr: &str) {
    let http = reqwest::Client::builder()
        .timeout(CALL)
        .build()
        .expect("http client");
    let (status, body) = within("ask /healthz", async {
        let answer = http
            .get(format!("http://{probe_addr}/healthz"))
            .send()
            .await?;
        let status = answer.status();
        answer.text().await.map(|body| (status, body))
    })
    .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenants_stay_inside_their_grant() {
    let t = set_up().await;
    let probe_addr = free_local_addr();
    let controller = t.world.start_controller_with_env(
        "controller-tenancy",
        &probe_addr,
        &["--prometheus-max-series", "2"],
        &[(configrollout::reconcile::fault_injection::ARM_VARIABLE, "1")],
    );
    no_tenant_duration_stops_the_controller(&t, &probe_addr).await;
    a_panic_stays_in_its_rollout(&t, &probe_addr).await;
    an_empty_consumer_selector_is_refused(&t).await;
    a_region_without_list_and_watch_is_read_every_time(&t, &controller).await;
    the_controller_refuses_escapes_on_its_own(&t, &probe_addr).await;
    a_key_has_one_managing_rollout(&t).await;
    a_region_with_an_exec_kubeconfig_is_refused(&t).await;
    an_oversized_prometheus_answer_is_inconclusive(&t).await;
    the_admission_policy_refuses_escapes(&t).await;
    a_grant_opens_exactly_what_it_names(&t).await;
    assert_nothing_written_outside_the_grant(&t);
    teams_share_a_region_namespace(&t).await;
    controller.stop();
}
