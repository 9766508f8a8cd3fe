//! Sharding on the lab: three controller processes share four shard Leases; 200 rollouts
//! are spread over the shards by the hash of their names; the replica holding two shards
//! is killed with SIGKILL mid-rollout. Every rollout completes, every status write was
//! made by the holder of its shard's Lease at that moment (from watches of the Leases and
//! the rollouts, ordered by resourceVersion), no rollout is written by two holders
//! interleaved, and the shards end two by two on the survivors; a SIGTERM then hands a
//! survivor's shards to the other. One lab for the binary.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, ShardWriter};
use configrollout::leader::shard::{
    GROUP_LABEL, ROLE_LABEL, ROLE_SHARD, shard_lease_name, shard_of,
};
use configrollout_e2e::{HUB, LabChild, LabOptions, SYSTEM_NAMESPACE, User, repository_root};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::Resource;
use kube::{Client, ResourceExt};
use support::{TEAM, World, eventually, phase_of, within};

const SHARDS: u32 = 4;
const ROLLOUTS: usize = 200;
const LEASE_NAME: &str = "configrollout-controller";
/// Bound on the shards settling after a start, a kill or a stop.
const SETTLE: Duration = Duration::from_secs(60);
/// Bound on every rollout completing.
const COMPLETE: Duration = Duration::from_secs(180);

fn rollout_name(index: usize) -> String {
    format!("r-{index:03}")
}

fn rollout_yaml(name: &str) -> String {
    // Two stages; the first bakes long enough that the kill lands mid-rollout, even when
    // the 200 creates take a minute beside another lab on two cores (a CI run saw 66 s,
    // past a 25 s bake: every rollout done before the kill).
    format!(
        r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {{name: {name}, namespace: {TEAM}}}
spec:
  target: {{namespace: app, name: {name}}}
  data: {{k: "1"}}
  stages:
    - {{name: canary, regions: {{names: [region-1]}}, pause: {{duration: 90s}}}}
    - {{name: rest, regions: {{names: [region-2]}}}}
"#
    )
}

/// A Lease record as the watch delivered it.
#[derive(Debug, Clone)]
struct LeaseRecord {
    version: u64,
    shard: u32,
    holder: Option<String>,
}

/// A status write as the watch delivered it.
#[derive(Debug, Clone)]
struct StatusRecord {
    version: u64,
    rollout: String,
    writer: Option<ShardWriter>,
}

#[derive(Default)]
struct Seen {
    leases: Vec<LeaseRecord>,
    writes: Vec<StatusRecord>,
    /// The last status seen per rollout, to tell status writes from other changes.
    last_status: BTreeMap<String, serde_json::Value>,
    /// The highest resourceVersion of any rollout event.
    last_version: u64,
    errors: Vec<String>,
}

fn version_of<K: Resource>(object: &K) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|version| version.parse().ok())
        .expect("resourceVersions of one etcd are numbers")
}

fn shard_of_lease(lease: &Lease) -> Option<u32> {
    let name = lease.metadata.name.as_deref()?;
    (0..SHARDS).find(|shard| shard_lease_name(LEASE_NAME, *shard) == name)
}

fn holder_of(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()?
        .holder_identity
        .clone()
        .filter(|holder| !holder.is_empty())
}

/// Follows every event of `api` from `version` on, resuming after each server timeout;
/// `record` sees each object in order.
async fn follow<K, F>(api: Api<K>, params: WatchParams, mut version: String, mut record: F)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: FnMut(&K) + Send,
{
    loop {
        let stream = match api.watch(&params, &version).await {
            Ok(stream) => stream,
            Err(error) => panic!("watch could not start: {error}"),
        };
        let mut stream = stream.boxed();
        while let Some(event) = stream.try_next().await.expect("the watch streams") {
            match event {
                WatchEvent::Added(object)
                | WatchEvent::Modified(object)
                | WatchEvent::Deleted(object) => {
                    version = object.meta().resource_version.clone().unwrap_or(version);
                    record(&object);
                }
                WatchEvent::Bookmark(bookmark) => {
                    version = bookmark.metadata.resource_version;
                }
                WatchEvent::Error(error) => panic!("the watch failed: {error:?}"),
            }
        }
    }
}

fn start_watches(world: &World, seen: &Arc<Mutex<Seen>>) -> Vec<tokio::task::JoinHandle<()>> {
    let leases: Api<Lease> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let rollouts: Api<ConfigRollout> = Api::namespaced(world.hub.clone(), TEAM);
    let lease_seen = seen.clone();
    let rollout_seen = seen.clone();
    let selector = format!("{GROUP_LABEL}={LEASE_NAME},{ROLE_LABEL}={ROLE_SHARD}");
    vec![
        tokio::spawn(follow(
            leases,
            WatchParams::default().labels(&selector).timeout(240),
            "0".to_owned(),
            move |lease: &Lease| {
                let Some(shard) = shard_of_lease(lease) else {
                    return;
                };
                let record = LeaseRecord {
                    version: version_of(lease),
                    shard,
                    holder: holder_of(lease),
                };
                lease_seen.lock().unwrap().leases.push(record);
            },
        )),
        tokio::spawn(follow(
            rollouts,
            WatchParams::default().timeout(240),
            "0".to_owned(),
            move |rollout: &ConfigRollout| {
                let name = rollout.name_any();
                let status = serde_json::to_value(&rollout.status).unwrap();
                let mut seen = rollout_seen.lock().unwrap();
                seen.last_version = seen.last_version.max(version_of(rollout));
                // The CRD's default status (set by the apiserver at creation, before any
                // controller looked) is nobody's write.
                let defaulted = rollout.status
                    == Some(configrollout::api::ConfigRolloutStatus {
                        observed_generation: Some(0),
                        ..Default::default()
                    });
                if status.is_null() || defaulted || seen.last_status.get(&name) == Some(&status) {
                    return;
                }
                seen.last_status.insert(name.clone(), status);
                let writer = rollout.status.as_ref().and_then(|s| s.written_by.clone());
                if writer.is_none() {
                    seen.errors
                        .push(format!("{name}: a status write without writtenBy"));
                }
                seen.writes.push(StatusRecord {
                    version: version_of(rollout),
                    rollout: name,
                    writer,
                });
            },
        )),
    ]
}

/// Holders of the shard Leases now, read from the API (absent or empty: `None`).
async fn holders(hub: &Client) -> Vec<Option<String>> {
    let api: Api<Lease> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    let selector = format!("{GROUP_LABEL}={LEASE_NAME},{ROLE_LABEL}={ROLE_SHARD}");
    let listed = within(
        "list leases",
        api.list(&ListParams::default().labels(&selector)),
    )
    .await;
    let mut holders = vec![None; SHARDS as usize];
    for lease in &listed.items {
        if let Some(shard) = shard_of_lease(lease) {
            holders[shard as usize] = holder_of(lease);
        }
    }
    holders
}

fn counts(holders: &[Option<String>]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for holder in holders.iter().flatten() {
        *counts.entry(holder.clone()).or_insert(0) += 1;
    }
    counts
}

/// Waits until every shard is held by `expected` replicas with `sizes` shards each (in
/// any order), and the picture holds still for a few seconds.
async fn shards_settle(hub: &Client, expected: &BTreeSet<&str>, sizes: &[usize]) -> Vec<String> {
    let started = Instant::now();
    let mut stable_since: Option<(Vec<Option<String>>, Instant)> = None;
    loop {
        let now = holders(hub).await;
        let by = counts(&now);
        let mut got: Vec<usize> = by.values().copied().collect();
        got.sort_unstable();
        let mut want = sizes.to_vec();
        want.sort_unstable();
        let settled = now.iter().all(Option::is_some)
            && by.keys().all(|holder| expected.contains(holder.as_str()))
            && got == want;
        match &stable_since {
            Some((before, since)) if settled && *before == now => {
                if since.elapsed() >= Duration::from_secs(4) {
                    return now.into_iter().flatten().collect();
                }
            }
            _ => stable_since = settled.then(|| (now.clone(), Instant::now())),
        }
        assert!(
            started.elapsed() < SETTLE,
            "the shards did not settle on {expected:?} as {sizes:?} within {SETTLE:?}: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn all_complete(world: &World) -> BTreeMap<String, ConfigRollout> {
    eventually("every rollout completes", COMPLETE, || async {
        let listed = within(
            "list rollouts",
            world.rollouts().list(&ListParams::default()),
        )
        .await;
        let done = listed
            .items
            .iter()
            .filter(|rollout| phase_of(rollout).as_deref() == Some("Complete"))
            .count();
        (done == ROLLOUTS).then(|| {
            listed
                .items
                .into_iter()
                .map(|rollout| (rollout.name_any(), rollout))
                .collect()
        })
    })
    .await
}

/// The holder of `shard`'s Lease at `version`: the last Lease record before it.
fn holder_at(leases: &[LeaseRecord], shard: u32, version: u64) -> Option<&str> {
    leases
        .iter()
        .filter(|lease| lease.shard == shard && lease.version < version)
        .max_by_key(|lease| lease.version)
        .and_then(|lease| lease.holder.as_deref())
}

fn start(world: &World, identity: &str) -> LabChild {
    // A 10 s Lease (the lab's usual 6 s is tight for a hub taking 200 creations at once
    // on two cores: renewals then miss their deadline and writes pause).
    let args: Vec<std::ffi::OsString> = [
        "--shards",
        "4",
        "--lease-duration",
        "10s",
        "--probe-addr",
        "127.0.0.1:0",
        "--log-format",
        "json",
        "--prometheus-url",
        &world.lab.prometheus_url(),
    ]
    .iter()
    .map(std::ffi::OsString::from)
    .collect();
    world
        .lab
        .start_controller(&support::lab_controller_binary(), identity, &args)
        .expect("start controller")
}

async fn three_replicas_four_shards_and_a_kill(world: &World) {
    // As the platform admin: the opt-in RBAC a sharded install needs, bound (as the
    // lab binds the shipped Role) to the lab's controller user's group.
    world
        .lab
        .apply(
            HUB,
            User::Admin,
            &repository_root().join("deploy/rbac-sharding.yaml"),
        )
        .await
        .expect("sharding RBAC applied");
    let binding: RoleBinding = serde_saphyr::from_str(&format!(
        r#"
metadata: {{name: configrollout-lab:controller-sharding, namespace: {SYSTEM_NAMESPACE}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: configrollout-controller-sharding}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "configrollout:controllers"}}]
"#
    ))
    .expect("binding YAML");
    within(
        "bind the sharding Role",
        Api::<RoleBinding>::namespaced(world.hub.clone(), SYSTEM_NAMESPACE)
            .create(&PostParams::default(), &binding),
    )
    .await;

    let seen = Arc::new(Mutex::new(Seen::default()));
    let watches = start_watches(world, &seen);
    let identities = ["shard-a", "shard-b", "shard-c"];
    let mut replicas: BTreeMap<&str, LabChild> = identities
        .iter()
        .map(|identity| (*identity, start(world, identity)))
        .collect();
    let all: BTreeSet<&str> = identities.into_iter().collect();
    let started = Instant::now();
    shards_settle(&world.hub, &all, &[2, 1, 1]).await;
    eprintln!("shards settled 2/1/1 after {:?}", started.elapsed());

    // 200 rollouts at once.
    let created = Instant::now();
    let rollouts = world.rollouts();
    futures::stream::iter(0..ROLLOUTS)
        .map(|index| {
            let rollouts = rollouts.clone();
            async move {
                let rollout: ConfigRollout =
                    serde_saphyr::from_str(&rollout_yaml(&rollout_name(index))).unwrap();
                within(
                    "create rollout",
                    rollouts.create(&PostParams::default(), &rollout),
                )
                .await;
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;

    // Mid-rollout: every rollout has been picked up (a phase in status); the first stage
    // bakes for 90 s, so none is done yet (checked below for the victim's).
    eventually("every rollout has started", COMPLETE, || async {
        let listed = within("list rollouts", rollouts.list(&ListParams::default())).await;
        let started = listed
            .items
            .iter()
            .filter(|rollout| phase_of(rollout).is_some())
            .count();
        (started == ROLLOUTS).then_some(())
    })
    .await;
    eprintln!("all {ROLLOUTS} started after {:?}", created.elapsed());

    // Kill -9 the replica that holds two shards.
    let before = holders(&world.hub).await;
    let by = counts(&before);
    let victim = by
        .iter()
        .find(|(_, count)| **count == 2)
        .map(|(holder, _)| holder.clone())
        .expect("one replica holds two shards");
    let victim_shards: BTreeSet<u32> = (0..SHARDS)
        .filter(|shard| before[*shard as usize].as_deref() == Some(victim.as_str()))
        .collect();
    let victim_rollouts: BTreeSet<String> = (0..ROLLOUTS)
        .map(rollout_name)
        .filter(|name| victim_shards.contains(&shard_of(TEAM, name, SHARDS)))
        .collect();
    let listed = within("list rollouts", rollouts.list(&ListParams::default())).await;
    let unfinished = listed
        .items
        .iter()
        .filter(|rollout| victim_rollouts.contains(&rollout.name_any()))
        .filter(|rollout| phase_of(rollout).as_deref() != Some("Complete"))
        .count();
    assert!(
        unfinished > 0 && victim_rollouts.len() > 20,
        "the kill lands mid-rollout: {unfinished} of {} of the victim's rollouts unfinished",
        victim_rollouts.len()
    );
    let killed = Instant::now();
    let victim_child = replicas
        .remove(victim.as_str())
        .expect("the victim is one of ours");
    victim_child.kill();
    eprintln!(
        "killed {victim} (shards {victim_shards:?}) with {unfinished} of its rollouts unfinished"
    );

    // Every rollout completes; the shards end two by two on the survivors.
    let done = all_complete(world).await;
    eprintln!(
        "all complete {:?} after the kill, {:?} after creation",
        killed.elapsed(),
        created.elapsed()
    );
    let survivors: BTreeSet<&str> = all
        .iter()
        .copied()
        .filter(|identity| *identity != victim)
        .collect();
    let settled = shards_settle(&world.hub, &survivors, &[2, 2]).await;
    assert!(settled.iter().all(|holder| holder != &victim));

    // Let the watches catch up with the last writes, then judge every write.
    let last_version = done.values().map(version_of).max().unwrap_or(0);
    eventually(
        "the watch has seen the last writes",
        Duration::from_secs(30),
        || async { (seen.lock().unwrap().last_version >= last_version).then_some(()) },
    )
    .await;
    {
        let seen = seen.lock().unwrap();
        assert!(seen.errors.is_empty(), "{:?}", seen.errors);
        let mut by_rollout: BTreeMap<&str, Vec<&StatusRecord>> = BTreeMap::new();
        for write in &seen.writes {
            by_rollout.entry(&write.rollout).or_default().push(write);
        }
        assert_eq!(by_rollout.len(), ROLLOUTS, "every rollout was written");
        let mut moved = 0;
        for (rollout, writes) in &mut by_rollout {
            writes.sort_by_key(|write| write.version);
            let shard = shard_of(TEAM, rollout, SHARDS);
            let mut holders_in_order: Vec<&str> = Vec::new();
            for write in writes.iter() {
                let writer = write.writer.as_ref().expect("checked above");
                assert_eq!(
                    writer.shard, shard,
                    "{rollout}: written under the wrong shard"
                );
                assert_eq!(writer.shards, SHARDS);
                let holder = holder_at(&seen.leases, shard, write.version);
                assert_eq!(
                    holder,
                    Some(writer.holder.as_str()),
                    "{rollout}: written at resourceVersion {} by {} while shard {shard}'s \
                     Lease named {holder:?}",
                    write.version,
                    writer.holder
                );
                if holders_in_order.last() != Some(&writer.holder.as_str()) {
                    assert!(
                        !holders_in_order.contains(&writer.holder.as_str()),
                        "{rollout}: written by {} again after {holders_in_order:?}",
                        writer.holder
                    );
                    holders_in_order.push(&writer.holder);
                }
            }
            if holders_in_order.len() > 1 {
                assert!(
                    victim_rollouts.contains(*rollout),
                    "{rollout} moved: {holders_in_order:?}"
                );
                assert_eq!(
                    holders_in_order[0], victim,
                    "{rollout}: {holders_in_order:?}"
                );
                moved += 1;
            }
        }
        assert!(
            moved > 0,
            "some of the victim's rollouts were continued by a survivor"
        );
        eprintln!(
            "{} status writes judged; {moved} rollouts changed holder once",
            seen.writes.len()
        );
    }
    for (identity, replica) in &replicas {
        assert!(
            replica.log().contains("acquired shard"),
            "{identity} logs its acquisitions"
        );
    }

    // SIGTERM: a survivor hands its shards over at once, and the other takes all four.
    let (stopping, child) = replicas.pop_first().expect("two survivors");
    let stopped = Instant::now();
    child.stop();
    let last: BTreeSet<&str> = survivors
        .iter()
        .copied()
        .filter(|identity| *identity != stopping)
        .collect();
    shards_settle(&world.hub, &last, &[4]).await;
    eprintln!(
        "after SIGTERM of {stopping}: all shards on {last:?} in {:?}",
        stopped.elapsed()
    );
    for watch in watches {
        watch.abort();
    }
    let (_, survivor) = replicas.pop_first().expect("one survivor");
    a_single_mode_replica_and_a_sharded_one_never_lead_together(world, &survivor, &last).await;
    survivor.stop();
}

/// A switch between modes (a Helm upgrade or rollback between one replica and shards)
/// runs old and new pods side by side. Fewer shards wins: a single-mode replica started
/// beside the sharded survivor claims the controller's Lease, the survivor hands every
/// shard back, and only then does the single one lead; stopped, it releases the Lease
/// and the survivor takes every shard again. A rollout created meanwhile completes.
async fn a_single_mode_replica_and_a_sharded_one_never_lead_together(
    world: &World,
    survivor: &LabChild,
    last: &BTreeSet<&str>,
) {
    let single = world.start_controller("single-mode");
    eventually(
        "the sharded survivor hands every shard back",
        COMPLETE,
        || async {
            holders(&world.hub)
                .await
                .iter()
                .all(Option::is_none)
                .then_some(())
        },
    )
    .await;
    eventually("the single-mode replica leads", COMPLETE, || async {
        single
            .log()
            .contains("leading: reconciling rollouts")
            .then_some(())
    })
    .await;
    let log = survivor.log();
    assert!(
        log.contains("a single-mode replica holds the controller's lease: released our shards"),
        "{}",
        survivor.log_tail(20)
    );
    // The single one waited for the shards: it says so, unless the survivor was quicker
    // than its first claim.
    let single_log = single.log();
    let waited = single_log.contains("waiting for sharded replicas to release their shard leases");
    eprintln!("single-mode replica waited for the shards: {waited}");
    assert!(
        holders(&world.hub).await.iter().all(Option::is_none),
        "no shard taken while the single-mode replica holds the Lease"
    );
    world.create_rollout(&rollout_yaml("switched")).await;
    world.wait_condition("switched", "Complete", COMPLETE).await;

    single.stop();
    shards_settle(&world.hub, last, &[4]).await;
}

#[test]
fn sharding_on_the_lab() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let world = World::start(LabOptions {
            regions: 2,
            // SHARD_LAB_DIR keeps the lab's directory (controller logs) for a post-mortem.
            root_dir: std::env::var_os("SHARD_LAB_DIR").map(Into::into),
            keep_dir: std::env::var_os("SHARD_LAB_DIR").is_some(),
            ..LabOptions::default()
        })
        .await;
        three_replicas_four_shards_and_a_kill(&world).await;
    });
}
