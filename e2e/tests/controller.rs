//! The controller on real clusters: a hub and three regions of the lab, the controller
//! process started as its own user, rollouts driven only through the hub's API, and
//! every claim checked in the regions themselves. One lab for the whole binary; the
//! scenarios run in order, each on its own rollout and target.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use configrollout::api::annotations::RETRY_ANNOTATION;
use configrollout::api::{ConfigRollout, Region};
use configrollout::crdt::Replica;
use configrollout::crdt::{DigestKey, Stamp, WriterId};
use configrollout::reconcile::revision_store::ROLLOUT_LABEL;
use configrollout::regions::materialize::{COMPANION_SUFFIX, STATE_KEY, STATE_MAC_ANNOTATION};
use configrollout_e2e::{HUB, LabChild, LabOptions, SYSTEM_NAMESPACE, User};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

#[path = "controller/convergence.rs"]
mod convergence;
mod support;

/// The controller's digest key Secret in the lab (the chart's and deploy/'s default).
const DIGEST_KEY_SECRET: &str = "configrollout-digest-key";

use support::*;

/// Values distinctive enough to grep for: none may appear in logs, events, status or
/// metrics.
const SECRET_VALUES: [(&str, &str); 2] = [
    ("rate-limit", "s3cr3t-rate-4f1c"),
    ("feature-x", "s3cr3t-flag-9b2e"),
];

fn two_stage_rollout(name: &str, target: &str, pairs: &[(&str, &str)]) -> String {
    let data: String = pairs
        .iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    format!(
        r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata:
  name: {name}
  namespace: {TEAM}
spec:
  target: {{namespace: {APP}, name: {target}}}
  data:
{data}  stages:
    - name: canary
      regions: {{names: [region-1]}}
    - name: prod
      regions: {{names: [region-2, region-3]}}
      maxParallel: 2
      approval: Required
"#
    )
}

async fn a_staged_rollout_waits_for_approval_then_completes(world: &World) {
    let desired = SECRET_VALUES;
    let counters =
        WriteCounter::start_in(world, &["region-1", "region-2", "region-3"], "limits").await;
    world
        .create_rollout(&two_stage_rollout("limits", "limits", &desired))
        .await;

    let waiting = world
        .wait_phase("limits", "AwaitingApproval", PROGRESS)
        .await;
    assert_eq!(
        world.target_data("region-1", "limits").await,
        Some(data(&desired)),
        "the canary region holds exactly the declared data"
    );
    for region in ["region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, "limits").await,
            None,
            "{region} must receive nothing before the approval"
        );
    }
    let canary = region_status(&waiting, "region-1").expect("canary region in status");
    let mark = canary.materialized.as_ref().expect("canary materialized");
    assert_eq!(mark.revision, "r1");
    assert!(
        mark.digest.as_deref().is_some_and(|d| d.len() == 64),
        "digest recorded: {mark:?}"
    );
    assert!(condition_true(&waiting, "AwaitingApproval"));

    world
        .approve(User::ApproverAlice, "limits", "prod", "r1")
        .await;
    // What a person runs: kubectl wait, as the read-only viewer.
    let viewer = world
        .lab
        .kubeconfig(HUB, User::Viewer)
        .expect("viewer kubeconfig");
    let waited = tokio::process::Command::new(world.lab.kubectl())
        .env("KUBECONFIG", &viewer)
        .args([
            "wait",
            "--for=condition=Complete",
            "configrollout/limits",
            "-n",
            TEAM,
            "--timeout=120s",
        ])
        .output();
    let waited = tokio::time::timeout(PROGRESS + CALL, waited)
        .await
        .expect("kubectl wait answers")
        .expect("kubectl runs");
    assert!(
        waited.status.success(),
        "kubectl wait: {}{}",
        String::from_utf8_lossy(&waited.stdout),
        String::from_utf8_lossy(&waited.stderr)
    );
    let done = world.wait_condition("limits", "Complete", CALL).await;
    for region in ["region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, "limits").await,
            Some(data(&desired)),
            "{region} holds the data after approval"
        );
    }
    let status = done.status.as_ref().expect("status");
    let prod = status
        .stages
        .iter()
        .find(|s| s.name == "prod")
        .expect("prod stage");
    let record = prod.approval.as_ref().expect("approval recorded");
    assert_eq!(record.approver, "approver-alice");
    for region in ["region-1", "region-2", "region-3"] {
        let mark = region_status(&done, region)
            .and_then(|r| r.materialized.as_ref())
            .unwrap_or_else(|| panic!("{region} materialized in status"));
        assert_eq!(mark.revision, "r1");
    }
    // One revision, one write of the target per region.
    for (region, counter) in ["region-1", "region-2", "region-3"].iter().zip(&counters) {
        assert_eq!(counter.writes(), 1, "{region}: target written once");
    }
    // Each stage's start is its own Event, under its own name: transitions that share a
    // reason are not folded into a count on the first one.
    let started: Vec<String> = events(world, "limits", "StageStarted")
        .await
        .into_iter()
        .filter_map(|event| event.message)
        .collect();
    for stage in ["canary", "prod"] {
        assert!(
            started
                .iter()
                .any(|message| message.starts_with(&format!("stage {stage} of r1 started"))),
            "a StageStarted Event names stage {stage}: {started:?}"
        );
    }

    // An out-of-band edit in one region is reported by key name, and left alone
    // (driftPolicy Report).
    let maps: Api<ConfigMap> = Api::namespaced(world.region("region-2"), APP);
    let edit = serde_json::json!({"data": {"feature-x": "edited-by-hand"}});
    within(
        "edit target by hand",
        maps.patch("limits", &PatchParams::default(), &Patch::Merge(&edit)),
    )
    .await;
    let drifted = world.wait_condition("limits", "Drifted", PROGRESS).await;
    let message = drifted
        .status
        .as_ref()
        .and_then(|s| s.condition("Drifted"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(message.contains("region-2 (feature-x)"), "{message}");
    assert!(
        !message.contains("edited-by-hand"),
        "no value in the condition"
    );
    // Drift reported under Report leaves the revision done: Flux and Argo CD still see it
    // so, and say why it is worth a look.
    let verdict = assert_seen_as(
        "complete-drifted",
        &drifted,
        "Complete",
        "Current",
        "Healthy",
    );
    assert!(
        verdict.argo_cd.message.contains("region-2 (feature-x)"),
        "{verdict:#?}"
    );
    assert_eq!(
        world
            .target_data("region-2", "limits")
            .await
            .and_then(|d| d.get("feature-x").cloned())
            .as_deref(),
        Some("edited-by-hand"),
        "Report leaves the edit in place"
    );
}

async fn a_new_revision_mid_rollout_supersedes_the_old(world: &World) {
    world
        .create_rollout(&two_stage_rollout("flags", "flags", &[("mode", "a")]))
        .await;
    world
        .wait_phase("flags", "AwaitingApproval", PROGRESS)
        .await;
    change_data(&world.rollouts(), "flags", serde_json::json!({"mode": "b"})).await;
    let waiting = eventually("flags: r2 awaits approval", PROGRESS, || async {
        let rollout = world.rollout("flags").await;
        let status = rollout.status.as_ref()?;
        (status.revision.as_deref() == Some("r2")
            && phase_of(&rollout).as_deref() == Some("AwaitingApproval"))
        .then_some(rollout)
    })
    .await;
    let history: Vec<&str> = waiting
        .status
        .as_ref()
        .map(|s| s.history.iter().map(|r| r.name.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(history, vec!["r1", "r2"], "history keeps both revisions");
    assert_eq!(
        world.target_data("region-1", "flags").await,
        Some(data(&[("mode", "b")]))
    );
    assert_eq!(world.target_data("region-2", "flags").await, None);
    // An approval of the superseded revision does not open the stage.
    world
        .approve(User::ApproverBob, "flags", "prod", "r1")
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(world.target_data("region-2", "flags").await, None);
    world
        .approve(User::ApproverBob, "flags", "prod", "r2")
        .await;
    world.wait_condition("flags", "Complete", PROGRESS).await;
    assert_eq!(
        world.target_data("region-3", "flags").await,
        Some(data(&[("mode", "b")]))
    );
}

async fn two_rollouts_on_one_target_converge(world: &World) {
    let a = r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: shared-a, namespace: team}
spec:
  target: {namespace: app, name: shared}
  data: {a1: "1", a2: "2"}
  stages:
    - {name: first, regions: {names: [region-1]}}
    - {name: rest, regions: {names: [region-2, region-3]}, maxParallel: 2}
"#;
    let b = r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: shared-b, namespace: team}
spec:
  target: {namespace: app, name: shared}
  data: {b1: "x"}
  stages:
    - {name: first, regions: {names: [region-3]}}
    - {name: rest, regions: {names: [region-2, region-1]}, maxParallel: 1}
"#;
    world.create_rollout(a).await;
    world.create_rollout(b).await;
    world.wait_condition("shared-a", "Complete", PROGRESS).await;
    world.wait_condition("shared-b", "Complete", PROGRESS).await;
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, "shared").await,
            Some(data(&[("a1", "1"), ("a2", "2"), ("b1", "x")])),
            "{region} holds both rollouts' keys"
        );
    }
    // Nothing was removed, so there is nothing to collect: neither read the other
    // writers nor recorded a stable point.
    for name in ["shared-a", "shared-b"] {
        let status = world.rollout(name).await.status.unwrap_or_default();
        assert_eq!(status.collected_through, None, "{name}");
    }
    // shared-a removes a key: once its r2 is Complete it finds shared-b caught up (read
    // through the CRD's selectable fields) and records r2 as the target's stable point.
    change_data(
        &world.rollouts(),
        "shared-a",
        serde_json::json!({"a2": null}),
    )
    .await;
    eventually(
        "shared-a records r2 as the stable point",
        PROGRESS,
        || async {
            let status = world.rollout("shared-a").await.status?;
            let r2 = status.history.iter().find(|record| record.name == "r2")?;
            (status.collected_through.as_ref() == Some(&r2.stamp)).then_some(())
        },
    )
    .await;
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, "shared").await,
            Some(data(&[("a1", "1"), ("b1", "x")])),
            "{region} holds shared-b's key and what is left of shared-a's"
        );
    }
}

/// The replica a region's companion holds for `target`.
async fn companion_replica(world: &World, region: &str, target: &str) -> Replica {
    let maps: Api<ConfigMap> = Api::namespaced(world.region(region), APP);
    let companion = within(
        "read the companion",
        maps.get(&format!("{target}{COMPANION_SUFFIX}")),
    )
    .await;
    let state = companion
        .data
        .and_then(|mut data| data.remove(STATE_KEY))
        .expect("the companion holds a state");
    configrollout::crdt::decode(&state).expect("the companion decodes")
}

/// A removed key's tombstone is collected once every region has it, on the next write;
/// then both objects of a region are restored by hand from a backup taken before the
/// removal, and the key is deleted again within one resync and stays deleted.
async fn a_collected_key_stays_deleted_when_a_stale_backup_is_restored(world: &World) {
    world
        .create_rollout(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: collected, namespace: team}
spec:
  target: {namespace: app, name: collected}
  data: {keep: "1", gone: "x"}
  stages:
    - {name: all, regions: {names: [region-1, region-2]}, maxParallel: 2}
"#,
        )
        .await;
    world
        .wait_condition("collected", "Complete", PROGRESS)
        .await;
    let backup = world.back_up_target("region-1", "collected").await;

    let rollouts = world.rollouts();
    change_data(&rollouts, "collected", serde_json::json!({"gone": null})).await;
    let r2_stamp = eventually("r2 Complete and collectable", PROGRESS, || async {
        let status = world.rollout("collected").await.status?;
        let r2 = status.history.iter().find(|record| record.name == "r2")?;
        (status.collected_through.as_ref() == Some(&r2.stamp)).then(|| r2.stamp.clone())
    })
    .await;
    for region in ["region-1", "region-2"] {
        let replica = companion_replica(world, region, "collected").await;
        assert_eq!(
            replica.tombstones(),
            1,
            "{region}: collected on the next write"
        );
    }

    change_data(&rollouts, "collected", serde_json::json!({"keep": "2"})).await;
    eventually("r3 Complete", PROGRESS, || async {
        let status = world.rollout("collected").await.status?;
        let complete = status.is_true("Complete") && status.revision.as_deref() == Some("r3");
        complete.then_some(())
    })
    .await;
    for region in ["region-1", "region-2"] {
        let replica = companion_replica(world, region, "collected").await;
        assert_eq!(replica.tombstones(), 0, "{region}");
        assert_eq!(
            replica.horizon().map(ToString::to_string),
            Some(r2_stamp.clone()),
            "{region}"
        );
        assert_eq!(
            world.target_data(region, "collected").await,
            Some(data(&[("keep", "2")]))
        );
    }

    // The backup, restored by hand over both objects.
    world.restore_target("region-1", &backup).await;
    assert_eq!(
        world.target_data("region-1", "collected").await,
        Some(data(&[("gone", "x"), ("keep", "1")])),
        "the backup is back"
    );
    let restored = std::time::Instant::now();
    eventually(
        "the restored region is rebased",
        IDLE_POLL + PROGRESS,
        || async {
            let data = world.target_data("region-1", "collected").await?;
            (data == self::data(&[("keep", "2")])).then_some(())
        },
    )
    .await;
    eprintln!("restored backup rebased in {:?}", restored.elapsed());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        world.target_data("region-1", "collected").await,
        Some(data(&[("keep", "2")])),
        "the key stays deleted"
    );
    // Deleted in the replica too: a tombstone (kept while the target held the key, so
    // that an interrupted target write is finished; the next write collects it).
    let replica = companion_replica(world, "region-1", "collected").await;
    assert!(
        replica
            .get("gone")
            .is_none_or(configrollout::crdt::Entry::is_tombstone),
        "{:?}",
        replica.get("gone")
    );
    assert_eq!(
        phase_of(&world.rollout("collected").await).as_deref(),
        Some("Complete")
    );
}

/// The reconcile's own poll: a source edit picked up sooner was seen by the watch.
const IDLE_POLL: Duration = Duration::from_secs(60);

/// `binaryData` is never a silent deletion: a source whose key moved there (kubectl does
/// that by itself for a non-UTF-8 file) is refused naming binaryData and touches no
/// region; a target holding a declared key in binaryData is refused naming the key, and
/// left as it is.
async fn binary_data_is_refused_naming_the_key(world: &World) {
    let sources: Api<ConfigMap> = Api::namespaced(world.hub.clone(), TEAM);
    within(
        "create the source",
        sources.create(
            &Default::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("binary-source".to_owned()),
                    ..ObjectMeta::default()
                },
                data: Some(data(&[("rate", "10")])),
                ..Default::default()
            },
        ),
    )
    .await;
    world
        .create_rollout(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: binary-sourced, namespace: team}
spec:
  target: {namespace: app, name: binary-sourced}
  fromConfigMap: {name: binary-source}
  stages:
    - {name: all, regions: {names: [region-1]}}
"#,
        )
        .await;
    world
        .wait_condition("binary-sourced", "Complete", PROGRESS)
        .await;
    // The key `rate` moves to binaryData, as kubectl puts a non-UTF-8 file.
    let moved = serde_json::json!({
        "data": {"rate": null},
        "binaryData": {"rate": "AAEC"},
    });
    within(
        "move the key to binaryData",
        sources.patch(
            "binary-source",
            &PatchParams::default(),
            &Patch::Merge(&moved),
        ),
    )
    .await;
    let refused = eventually("the source is refused", PROGRESS, || async {
        let rollout = world.rollout("binary-sourced").await;
        let condition = rollout.status.as_ref()?.condition("InvalidSpec")?.clone();
        (condition.status == "True").then_some(condition)
    })
    .await;
    assert!(
        refused.message.contains("binaryData") && refused.message.contains("\"rate\""),
        "{}",
        refused.message
    );
    assert_eq!(
        world.target_data("region-1", "binary-sourced").await,
        Some(data(&[("rate", "10")])),
        "the key was not published as a deletion"
    );

    // A target whose declared key is in binaryData.
    let targets: Api<ConfigMap> = Api::namespaced(world.region("region-1"), APP);
    world
        .create_rollout(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: binary-target, namespace: team}
spec:
  target: {namespace: app, name: binary-target}
  data: {rate: "10"}
  stages:
    - {name: all, regions: {names: [region-1]}}
"#,
        )
        .await;
    world
        .wait_condition("binary-target", "Complete", PROGRESS)
        .await;
    within(
        "move the target's key to binaryData",
        targets.patch(
            "binary-target",
            &PatchParams::default(),
            &Patch::Merge(&moved),
        ),
    )
    .await;
    change_data(
        &world.rollouts(),
        "binary-target",
        serde_json::json!({"rate": "20"}),
    )
    .await;
    let reported = eventually("region-1 reports the key", PROGRESS, || async {
        let rollout = world.rollout("binary-target").await;
        let error = region_status(&rollout, "region-1")?.last_error.clone()?;
        error.contains("binaryData").then_some(error)
    })
    .await;
    assert!(reported.contains("\"rate\""), "{reported}");
    let target = within("read the target", targets.get("binary-target")).await;
    assert!(
        target
            .binary_data
            .is_some_and(|binary| binary.contains_key("rate")),
        "the target is left as it is"
    );
}

async fn a_from_config_map_edit_starts_a_revision_within_seconds(world: &World) {
    let sources: Api<ConfigMap> = Api::namespaced(world.hub.clone(), TEAM);
    let source = |value: &str| ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("limits-source".to_owned()),
            ..Default::default()
        },
        data: Some(data(&[("rate", value)])),
        ..Default::default()
    };
    within(
        "create the source",
        sources.create(&Default::default(), &source("10")),
    )
    .await;
    world
        .create_rollout(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: sourced, namespace: team}
spec:
  target: {namespace: app, name: sourced}
  fromConfigMap: {name: limits-source}
  stages:
    - {name: all, regions: {names: [region-1]}}
"#,
        )
        .await;
    world.wait_condition("sourced", "Complete", PROGRESS).await;
    assert_eq!(
        world.target_data("region-1", "sourced").await,
        Some(data(&[("rate", "10")]))
    );

    let edited = std::time::Instant::now();
    within(
        "edit the source",
        sources.replace("limits-source", &Default::default(), &{
            let mut current = within("read the source", sources.get("limits-source")).await;
            current.data = Some(data(&[("rate", "20")]));
            current
        }),
    )
    .await;
    eventually("the edit is a new revision", IDLE_POLL / 3, || async {
        let rollout = world.rollout("sourced").await;
        (rollout.status?.revision.as_deref() == Some("r2")).then_some(())
    })
    .await;
    world.wait_condition("sourced", "Complete", PROGRESS).await;
    assert_eq!(
        world.target_data("region-1", "sourced").await,
        Some(data(&[("rate", "20")]))
    );
    eprintln!(
        "fromConfigMap edit to r2 Complete in {:?}",
        edited.elapsed()
    );
}

/// A Complete rollout under `driftPolicy: Revert` puts a hand edit back by itself, within
/// its idle resync (60 s).
async fn drift_is_reverted_while_complete(world: &World) {
    let revert = serde_json::json!({"spec": {"driftPolicy": "Revert"}});
    within(
        "set driftPolicy Revert",
        world
            .rollouts()
            .patch("sourced", &PatchParams::default(), &Patch::Merge(&revert)),
    )
    .await;
    world.wait_condition("sourced", "Complete", PROGRESS).await;
    let maps: Api<ConfigMap> = Api::namespaced(world.region("region-1"), APP);
    let edit = serde_json::json!({"data": {"rate": "edited-by-hand"}});
    within(
        "edit the target by hand",
        maps.patch("sourced", &PatchParams::default(), &Patch::Merge(&edit)),
    )
    .await;
    let edited = std::time::Instant::now();
    eventually("the edit is reverted", IDLE_POLL + PROGRESS, || async {
        let data = world.target_data("region-1", "sourced").await?;
        (data.get("rate").map(String::as_str) == Some("20")).then_some(())
    })
    .await;
    eprintln!("drift reverted in {:?}", edited.elapsed());
    let rollout = world.rollout("sourced").await;
    assert_eq!(phase_of(&rollout).as_deref(), Some("Complete"));
    assert_eq!(
        rollout.status.as_ref().and_then(|s| s.revision.as_deref()),
        Some("r2"),
        "reverting drift declares no revision"
    );
}

/// A companion replica corrupted by hand in one region is reported on that region and
/// left as it is (never overwritten blindly), and the next revision halts at once naming
/// the region, before any region is written: a person must look (`repair-state`, which
/// `plugin.rs` runs).
async fn a_corrupted_companion_is_reported_and_halts_the_next_revision(world: &World) {
    let rollout = |rate: &str| {
        format!(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {{name: mended, namespace: team}}
spec:
  target: {{namespace: app, name: mended}}
  data: {{rate: "{rate}"}}
  stages:
    - {{name: canary, regions: {{names: [region-1]}}}}
    - {{name: prod, regions: {{names: [region-2, region-3]}}, maxParallel: 2, progressDeadline: 30s}}
"#
        )
    };
    world.create_rollout(&rollout("1")).await;
    world.wait_condition("mended", "Complete", PROGRESS).await;

    let companions: Api<ConfigMap> = Api::namespaced(world.region("region-2"), APP);
    let companion = format!("mended{COMPANION_SUFFIX}");
    let garbage = serde_json::json!({"data": {STATE_KEY: "{not a replica"}});
    within(
        "corrupt the companion",
        companions.patch(&companion, &PatchParams::default(), &Patch::Merge(&garbage)),
    )
    .await;
    let update = serde_json::json!({"spec": {"data": {"rate": "2"}}});
    within(
        "declare r2",
        world
            .rollouts()
            .patch("mended", &PatchParams::default(), &Patch::Merge(&update)),
    )
    .await;

    let halted = world.wait_phase("mended", "Halted", PROGRESS).await;
    let message = halted
        .status
        .as_ref()
        .and_then(|status| status.condition("Halted"))
        .map(|condition| condition.message.clone())
        .unwrap_or_default();
    assert!(message.contains("region-2"), "{message}");
    let reported = region_status(&halted, "region-2")
        .and_then(|region| region.last_error.clone())
        .unwrap_or_default();
    assert!(
        reported.starts_with("TamperedState:") && reported.contains("fails its MAC"),
        "region-2 reports its companion as edited outside configrollout: {reported}"
    );
    for region in ["region-1", "region-3"] {
        assert_eq!(
            world.target_data(region, "mended").await,
            Some(data(&[("rate", "1")])),
            "{region} was not written: the rollout halted first"
        );
    }
    let kept = within("read the companion", companions.get(&companion)).await;
    assert_eq!(
        kept.data
            .and_then(|data| data.get(STATE_KEY).cloned())
            .as_deref(),
        Some("{not a replica"),
        "the corrupted replica is left for a person"
    );
    assert_eq!(
        world.target_data("region-2", "mended").await,
        Some(data(&[("rate", "1")])),
        "region-2 keeps what it had"
    );
}

/// A companion whose horizon is far in the future, signed with the controller's key (a
/// controller or a laptop with a clock a year ahead, or whoever holds the key): every
/// absent key would read as merged and outlived, so the next revision's new key would be
/// counted as held in region-3 without being there. The rollout halts naming region-3
/// instead, and says Complete nowhere.
async fn a_horizon_from_the_future_halts_instead_of_counting_keys_as_held(world: &World) {
    let name = "horizon";
    let rollout = |pairs: &str| {
        format!(
            "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata: {{name: {name}, namespace: team}}\nspec:\n  target: {{namespace: app, name: {name}}}\n  data: {{{pairs}}}\n  stages:\n    - {{name: all, regions: {{names: [region-1, region-2, region-3]}}, maxParallel: 3}}\n"
        )
    };
    world.create_rollout(&rollout("a: \"1\"")).await;
    world.wait_condition(name, "Complete", PROGRESS).await;

    let secrets: Api<Secret> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let secret = within("read the digest key", secrets.get(DIGEST_KEY_SECRET)).await;
    let key = DigestKey::new(&secret.data.expect("digest key data")["key"].0).expect("key");
    let maps: Api<ConfigMap> = Api::namespaced(world.region("region-3"), APP);
    let companion = format!("{name}{COMPANION_SUFFIX}");
    let read = within("read the companion", maps.get(&companion)).await;
    let mut replica = configrollout::crdt::decode(&read.data.expect("data")[STATE_KEY])
        .expect("the companion decodes");
    let held_before = replica.clone();
    let year_ahead = u64::try_from(Timestamp::now().as_millisecond()).expect("after 1970")
        + 365 * 24 * 3600 * 1000;
    let writer = WriterId::parse("rollout:team/horizon").expect("writer");
    configrollout::crdt::collect_tombstones(&mut replica, &Stamp::new(year_ahead, 0, writer));
    let state = configrollout::crdt::encode(&replica).expect("encode");
    let mac = configrollout::crdt::state_mac(&key, APP, name, &state);
    let patch = serde_json::json!({
        "metadata": {"annotations": {STATE_MAC_ANNOTATION: mac}},
        "data": {STATE_KEY: state},
    });
    within(
        "raise the horizon a year ahead",
        maps.patch(&companion, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;

    let declared = serde_json::json!({"spec": {"data": {"b": "2"}}});
    within(
        "declare r2 adding b",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&declared)),
    )
    .await;
    let halted = eventually("horizon: r2 halted", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let r2 = rollout.status.as_ref()?.revision.as_deref() == Some("r2");
        assert!(
            !(r2 && condition_true(&rollout, "Complete")),
            "reported r2 complete while region-3's horizon hides b: {:?}",
            rollout.status
        );
        (r2 && phase_of(&rollout).as_deref() == Some("Halted")).then_some(rollout)
    })
    .await;
    let why = halted
        .status
        .as_ref()
        .and_then(|status| status.condition("Halted"))
        .cloned()
        .expect("Halted condition");
    assert_eq!(why.reason, "FutureStamps", "{}", why.message);
    assert!(why.message.contains("region-3"), "{}", why.message);
    let region3 = region_status(&halted, "region-3").expect("region-3 in status");
    assert_ne!(
        region3.materialized.as_ref().map(|m| m.revision.as_str()),
        Some("r2"),
        "region-3 reported holding r2"
    );

    // A person rebuilds region-3's state (`repair-state --force`: its MAC is valid) from
    // what it held before, and retries: every region gets b.
    let repaired = configrollout::regions::repair::repair_state(
        &world.region("region-3"),
        &key,
        APP,
        name,
        &held_before,
        true,
    )
    .await
    .expect("repair");
    assert!(
        matches!(
            repaired,
            configrollout::regions::repair::Repair::Replaced { existed: true, .. }
        ),
        "{repaired:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let retry = serde_json::json!({"metadata": {"annotations": {
        RETRY_ANNOTATION: Timestamp::now().to_string(),
    }}});
    within(
        "retry",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&retry)),
    )
    .await;
    eventually("horizon: r2 complete", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let r2 = rollout.status.as_ref()?.revision.as_deref() == Some("r2");
        (r2 && condition_true(&rollout, "Complete")).then_some(())
    })
    .await;
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("a", "1"), ("b", "2")])),
            "{region}"
        );
    }
}

async fn a_spec_only_the_controller_can_judge_is_invalid_and_touches_nothing(world: &World) {
    let bad = r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: bad-gate, namespace: team}
spec:
  target: {namespace: app, name: bad-gate}
  data: {k: "v"}
  gates:
    - {name: errors, query: "rate(errors[1m])", condition: "result <<< 0.01"}
  stages:
    - {name: canary, regions: {names: [region-1]}, gates: [errors]}
"#;
    world.create_rollout(bad).await;
    let rollout = world
        .wait_condition("bad-gate", "InvalidSpec", PROGRESS)
        .await;
    let message = rollout
        .status
        .as_ref()
        .and_then(|s| s.condition("InvalidSpec"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("spec.gates[0].condition"),
        "names the field: {message}"
    );
    // Refused: Flux fails the Kustomization and Argo CD marks it Degraded, naming the field.
    let verdict = assert_seen_as("invalid-spec", &rollout, "Refused", "Failed", "Degraded");
    assert!(
        verdict.kstatus.message.contains("spec.gates[0].condition"),
        "{verdict:#?}"
    );
    for region in ["region-1", "region-2", "region-3"] {
        assert_eq!(world.target_data(region, "bad-gate").await, None);
    }
}

/// A revision too large for a ControllerRevision (about 1.1 MB of values: the hub
/// accepts the rollout, but its revision's state could not be stored in one object) is
/// refused before anything is written: `InvalidSpec` names the field and the sizes, never
/// a value, and no region is written.
async fn an_oversized_revision_is_reported_and_touches_no_region(world: &World) {
    let value = "0123456789abcdef".repeat(6_250);
    let mut rollout: ConfigRollout = serde_saphyr::from_str(&rollout_yaml(
        "oversized",
        "  stages:\n    - {name: canary, regions: {names: [region-1]}}\n",
    ))
    .expect("YAML");
    rollout.spec.data = Some(
        (0..11)
            .map(|index| (format!("blob-{index}"), value.clone()))
            .collect(),
    );
    within(
        "create the oversized rollout",
        world.rollouts().create(&PostParams::default(), &rollout),
    )
    .await;
    let refused = world
        .wait_condition("oversized", "InvalidSpec", PROGRESS)
        .await;
    let condition = refused
        .status
        .as_ref()
        .and_then(|status| status.condition("InvalidSpec"))
        .expect("the condition")
        .clone();
    assert!(
        condition
            .message
            .contains("spec.data: the next revision cannot be stored"),
        "{condition:?}"
    );
    assert!(
        refused
            .status
            .as_ref()
            .is_some_and(|status| status.revision.is_none()),
        "no revision declared: {:?}",
        refused.status
    );
    assert!(
        !condition.message.contains(&value[..32]),
        "no value in the condition"
    );
    assert_eq!(world.target_data("region-1", "oversized").await, None);
    within(
        "delete the oversized rollout",
        world.rollouts().delete("oversized", &Default::default()),
    )
    .await;
}

async fn a_spec_the_schema_refuses_never_exists(world: &World) {
    let refused = r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: refused, namespace: team}
spec:
  target: {namespace: app, name: refused}
  data: {k: "v"}
  stages:
    - {name: canary, regions: {names: [region-1]}, maxParallel: 0}
"#;
    let error = refused_at_create(world, refused).await;
    assert!(error.contains("maxParallel"), "{error}");
    assert!(
        within("read refused", world.rollouts().get_opt("refused"))
            .await
            .is_none()
    );

    // A gate that would sample every millisecond: a query and a status write each time,
    // through capacity every team shares.
    let too_often = r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: too-often, namespace: team}
spec:
  target: {namespace: app, name: too-often}
  data: {k: "v"}
  gates:
    - {name: errors, query: "up", condition: "result > 0", interval: 1ms, count: 1000}
  stages:
    - {name: canary, regions: {names: [region-1]}, gates: [errors]}
"#;
    let error = refused_at_create(world, too_often).await;
    assert!(
        error.contains("spec.gates[].interval must be at least 1s"),
        "{error}"
    );
}

/// The apiserver's refusal of creating the rollout `yaml`, as text.
async fn refused_at_create(world: &World, yaml: &str) -> String {
    let rollout: ConfigRollout = serde_saphyr::from_str(yaml).expect("YAML");
    tokio::time::timeout(
        CALL,
        world.rollouts().create(&PostParams::default(), &rollout),
    )
    .await
    .expect("answer")
    .expect_err("the apiserver refuses the rollout")
    .to_string()
}

/// A ControllerRevision already under the name a declaration needs (left by a
/// declaration whose status was never written) is replaced, that object exactly: the
/// create meets 409, the leftover is deleted, the revision stored owned by the rollout,
/// and the rollout completes.
async fn a_leftover_revision_object_is_replaced_when_the_revision_is_declared(world: &World) {
    let revisions: Api<ControllerRevision> = Api::namespaced(world.hub.clone(), TEAM);
    let leftover = ControllerRevision {
        metadata: ObjectMeta {
            name: Some("leftover-r1".to_owned()),
            labels: Some(BTreeMap::from([(
                ROLLOUT_LABEL.to_owned(),
                "leftover".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(serde_json::json!({
            "stamp": "1.0@rollout:team/leftover",
            "state": "",
            "previous": "",
        }))),
        revision: 1,
    };
    let left = within(
        "create a leftover revision",
        revisions.create(&PostParams::default(), &leftover),
    )
    .await;
    let rollout = world
        .create_rollout(&rollout_yaml(
            "leftover",
            r#"  data: {k: "v"}
  stages:
    - {name: only, regions: {names: [region-1]}}
"#,
        ))
        .await;
    world.wait_condition("leftover", "Complete", PROGRESS).await;
    let stored = within("read the revision", revisions.get("leftover-r1")).await;
    assert_ne!(
        stored.metadata.uid, left.metadata.uid,
        "the leftover was replaced"
    );
    assert!(
        stored
            .owner_references()
            .iter()
            .any(|owner| Some(&owner.uid) == rollout.metadata.uid.as_ref()),
        "the stored revision is the rollout's"
    );
    assert_eq!(
        world.target_data("region-1", "leftover").await,
        Some(data(&[("k", "v")]))
    );
}

async fn a_restarted_controller_continues_where_it_was(
    world: &World,
    controller: LabChild,
) -> LabChild {
    let counters =
        WriteCounter::start_in(world, &["region-1", "region-2", "region-3"], "restart").await;
    world
        .create_rollout(&two_stage_rollout(
            "restart",
            "restart",
            &[("timeout", "5s")],
        ))
        .await;
    world
        .wait_phase("restart", "AwaitingApproval", PROGRESS)
        .await;
    controller.kill();
    let restarted = world.start_controller("controller-a2");
    world
        .approve(User::ApproverAlice, "restart", "prod", "r1")
        .await;
    let done = world.wait_condition("restart", "Complete", PROGRESS).await;
    let stages: Vec<String> = done
        .status
        .as_ref()
        .map(|s| {
            s.stages
                .iter()
                .filter(|stage| stage.passed_at.is_some())
                .map(|stage| stage.name.clone())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(stages, vec!["canary", "prod"], "no stage skipped");
    for (region, counter) in ["region-1", "region-2", "region-3"].iter().zip(&counters) {
        assert_eq!(
            counter.writes(),
            1,
            "{region}: the revision reached the target exactly once"
        );
    }
    restarted
}

pub(crate) async fn lease_holder(world: &World) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    within("read lease", api.get_opt("configrollout-controller"))
        .await?
        .spec?
        .holder_identity
}

/// `leader` runs as `leader_identity`.
async fn only_the_lease_holder_writes_and_a_standby_takes_over(
    world: &World,
    leader: LabChild,
    leader_identity: &str,
) {
    let holder = eventually("a leader", PROGRESS, || async { lease_holder(world).await }).await;
    assert_eq!(holder, leader_identity);
    let mut standby = world.start_controller("controller-b");
    world
        .create_rollout(&two_stage_rollout("failover", "failover", &[("pool", "8")]))
        .await;
    world
        .wait_phase("failover", "AwaitingApproval", PROGRESS)
        .await;
    assert!(
        !standby.log().contains("region merged"),
        "the standby wrote to a region:\n{}",
        standby.log_tail(20)
    );
    leader.kill();
    world
        .approve(User::ApproverBob, "failover", "prod", "r1")
        .await;
    world.wait_condition("failover", "Complete", PROGRESS).await;
    assert_eq!(lease_holder(world).await.as_deref(), Some("controller-b"));
    assert!(standby.is_running());
    assert!(
        standby.log().contains("region merged"),
        "the new leader finished the rollout"
    );
    standby.stop();
}

async fn an_unreachable_region_halts_at_the_deadline_or_completes_when_back(
    world: &mut World,
    metrics_url: &str,
) {
    let rollout = |name: &str, deadline: &str| {
        format!(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {{name: {name}, namespace: team}}
spec:
  target: {{namespace: app, name: {name}}}
  data: {{k: "v"}}
  stages:
    - {{name: only, regions: {{names: [region-1, region-3]}}, maxParallel: 2, progressDeadline: {deadline}}}
"#
        )
    };
    world.lab.stop_region("region-3").expect("stop region-3");
    let regions: Api<Region> = Api::all(world.hub.clone());
    let unreachable = eventually("Region region-3 reported unreachable", PROGRESS, || async {
        let region = within("read region", regions.get("region-3")).await;
        let status = region.status.as_ref()?;
        (status.reachable == Some(false) && status.last_error.is_some()).then_some(region)
    })
    .await;
    let verdict = assert_seen_as("region-unreachable", &unreachable, "", "Failed", "Degraded");
    assert!(
        verdict.kstatus.message.contains("did not answer"),
        "{verdict:#?}"
    );
    // What the ConfigRolloutRegionUnreachable alert reads.
    let unreachable_regions = || async {
        sample(
            &scrape(metrics_url).await,
            "configrollout_regions{state=\"unreachable\"}",
        )
    };
    eventually(
        "the regions gauge counts region-3 unreachable",
        PROGRESS,
        || async { (unreachable_regions().await == 1.0).then_some(()) },
    )
    .await;
    world
        .create_rollout(&rollout("partition-halt", "20s"))
        .await;
    // The same failure with onFailure Rollback: region-1 is reverted at once, and the
    // rollback waits (up to the rollout's progressDeadline) for region-3, which never
    // got the revision.
    world
        .create_rollout(&rollout_yaml(
            "partition-rollback",
            r#"  data: {k: "v"}
  onFailure: Rollback
  progressDeadline: 10m
  stages:
    - {name: only, regions: {names: [region-1, region-3]}, maxParallel: 2, progressDeadline: 20s}
"#,
        ))
        .await;
    let halted = world.wait_phase("partition-halt", "Halted", PROGRESS).await;
    let verdict = assert_seen_as("halted-deadline", &halted, "Halted", "Failed", "Degraded");
    assert!(
        verdict
            .kstatus
            .message
            .starts_with("r1 halted (ProgressDeadlineExceeded)"),
        "{verdict:#?}"
    );
    assert_eq!(verdict.enabled_actions(), ["pause", "retry"]);
    let region3 = region_status(&halted, "region-3").expect("region-3 in status");
    assert!(region3.materialized.is_none());
    assert!(
        region3.last_error.is_some() || region3.reachable == Some(false),
        "region-3 reported unreachable: {region3:?}"
    );
    // Issue 29: once the probe has found it unreachable, reconciles do not wait on it.
    assert!(
        region3.last_error.as_deref().is_some_and(
            |error| error.starts_with("not read: the last region probe could not reach it")
        ),
        "region-3 not read while the probe finds it unreachable: {region3:?}"
    );
    assert_eq!(
        world.target_data("region-1", "partition-halt").await,
        Some(data(&[("k", "v")])),
        "the reachable region keeps what it received"
    );
    let rolling_back = world
        .wait_phase("partition-rollback", "RollingBack", PROGRESS)
        .await;
    // Still the controller's work (kstatus InProgress), but the revision failed: Argo CD
    // says Degraded at once rather than waiting for the rollback to end.
    assert_seen_as(
        "rolling-back",
        &rolling_back,
        "RollingBack",
        "InProgress",
        "Degraded",
    );
    eventually(
        "region-1 reverted while region-3 is down",
        PROGRESS,
        || async {
            let data = world.target_data("region-1", "partition-rollback").await;
            (!data.is_some_and(|data| data.contains_key("k"))).then_some(())
        },
    )
    .await;
    let waiting = world.rollout("partition-rollback").await;
    assert_eq!(
        phase_of(&waiting).as_deref(),
        Some("RollingBack"),
        "the rollback waits for the unreachable region, it does not claim it"
    );

    world
        .create_rollout(&rollout("partition-heal", "180s"))
        .await;
    let waiting = eventually("partition-heal waits for region-3", PROGRESS, || async {
        let rollout = world.rollout("partition-heal").await;
        let canary_done =
            region_status(&rollout, "region-1").is_some_and(|region| region.materialized.is_some());
        (phase_of(&rollout).as_deref() == Some("Progressing") && canary_done).then_some(rollout)
    })
    .await;
    let verdict = assert_seen_as(
        "progressing",
        &waiting,
        "Progressing",
        "InProgress",
        "Progressing",
    );
    assert!(
        verdict
            .argo_cd
            .message
            .contains("waiting for regions region-3 (unreachable) to materialize r1"),
        "says what it waits on: {verdict:#?}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    world
        .lab
        .start_region("region-3")
        .await
        .expect("start region-3");
    world
        .wait_condition("partition-heal", "Complete", PROGRESS)
        .await;
    // region-3 is back and never got partition-rollback's revision: nothing to revert
    // there, so the rollback ends RolledBack instead of spinning.
    let rolled_back = world
        .wait_phase("partition-rollback", "RolledBack", PROGRESS)
        .await;
    assert_seen_as(
        "rolled-back",
        &rolled_back,
        "RolledBack",
        "Failed",
        "Degraded",
    );
    assert!(
        rolled_back
            .status
            .as_ref()
            .is_some_and(|status| status.is_true("RolledBack")),
        "{:?}",
        rolled_back.status
    );
    assert!(
        !world
            .target_data("region-3", "partition-rollback")
            .await
            .is_some_and(|data| data.contains_key("k")),
        "region-3 never received the revision"
    );
    let back = eventually("Region region-3 reachable again", PROGRESS, || async {
        let region = within("read region", regions.get("region-3")).await;
        let status = region.status.as_ref()?;
        (status.reachable == Some(true)).then_some(region)
    })
    .await;
    assert_seen_as("region-reachable", &back, "", "Current", "Healthy");
    let back = back.status.expect("status");
    assert!(
        back.server_version
            .as_deref()
            .is_some_and(|v| v.starts_with("v1.36")),
        "{back:?}"
    );
    assert!(back.last_contact_time.is_some());
    eventually(
        "the regions gauge counts none unreachable",
        PROGRESS,
        || async { (unreachable_regions().await == 0.0).then_some(()) },
    )
    .await;
    let all_regions = within("list regions", regions.list(&Default::default()))
        .await
        .items
        .len();
    let reachable = sample(
        &scrape(metrics_url).await,
        "configrollout_regions{state=\"reachable\"}",
    );
    assert_eq!(
        reachable as usize, all_regions,
        "every Region counted reachable"
    );
    assert_eq!(
        world.target_data("region-3", "partition-heal").await,
        Some(data(&[("k", "v")]))
    );
    assert_eq!(
        world.target_data("region-3", "limits").await,
        Some(data(&SECRET_VALUES)),
        "nothing lost in region-3 across the outage"
    );
}

/// A rollout steered only through Argo CD's shipped actions, judged by kstatus (Flux, kpt)
/// and Argo CD's shipped health check at every step: created paused, resumed, approved,
/// complete. Then paused again: a new generation that declares nothing new, which the
/// first status write after it observes, so the rollout reads as unfinished only until
/// that one reconcile.
async fn the_gitops_tools_see_a_rollout_as_a_person_would(world: &World) {
    let created = world
        .create_rollout(&rollout_yaml(
            "steered",
            r#"  data: {k: "v"}
  paused: true
  stages:
    - {name: canary, regions: {names: [region-1]}}
    - {name: prod, regions: {names: [region-2]}, approval: Required}
"#,
        ))
        .await;
    // Nobody has looked at it yet: generation 1 against the CRD's default of 0.
    let verdict = assert_seen_as("unobserved", &created, "", "InProgress", "Progressing");
    assert_eq!(
        verdict.kstatus.message,
        "ConfigRollout generation is 1, but latest observed generation is 0"
    );

    let paused = world.wait_phase("steered", "Paused", PROGRESS).await;
    let verdict = assert_seen_as("paused", &paused, "Paused", "InProgress", "Suspended");
    assert!(
        verdict.argo_cd.message.contains("paused by spec.paused"),
        "{verdict:#?}"
    );
    assert_eq!(verdict.enabled_actions(), ["abort", "resume"]);

    world
        .run_argo_cd_action("steered", "resume", User::Admin, None)
        .await;
    let waiting = world
        .wait_phase("steered", "AwaitingApproval", PROGRESS)
        .await;
    let verdict = assert_seen_as(
        "awaiting-approval",
        &waiting,
        "AwaitingApproval",
        "InProgress",
        "Suspended",
    );
    assert!(
        verdict
            .argo_cd
            .message
            .contains("stage prod of r1 awaits a StageApproval"),
        "{verdict:#?}"
    );
    assert_eq!(verdict.enabled_actions(), ["abort", "approve", "pause"]);

    // Argo CD creates the approval as its own identity for the hub, which the platform
    // sets as the action's approver: approver-alice plays it here.
    let approvals = world
        .run_argo_cd_action(
            "steered",
            "approve",
            User::ApproverAlice,
            Some("approver-alice"),
        )
        .await;
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    let done = world.wait_condition("steered", "Ready", PROGRESS).await;
    let verdict = assert_seen_as("complete", &done, "Complete", "Current", "Healthy");
    assert_eq!(verdict.enabled_actions(), ["pause"]);
    let status = done.status.as_ref().expect("status");
    let prod = status
        .stages
        .iter()
        .find(|s| s.name == "prod")
        .expect("prod");
    assert_eq!(
        prod.approval.as_ref().map(|a| a.approver.as_str()),
        Some("approver-alice")
    );
    // What a person (or a CI job) runs, as the read-only viewer.
    let viewer = world
        .lab
        .kubeconfig(HUB, User::Viewer)
        .expect("viewer kubeconfig");
    let waited = tokio::process::Command::new(world.lab.kubectl())
        .env("KUBECONFIG", &viewer)
        .args([
            "wait",
            "--for=condition=Ready",
            "configrollout/steered",
            "-n",
            TEAM,
            "--timeout=30s",
        ])
        .output();
    let waited = tokio::time::timeout(CALL + CALL, waited)
        .await
        .expect("kubectl wait answers")
        .expect("kubectl runs");
    assert!(
        waited.status.success(),
        "kubectl wait --for=condition=Ready: {}{}",
        String::from_utf8_lossy(&waited.stdout),
        String::from_utf8_lossy(&waited.stderr)
    );

    // Paused once complete: a new generation that declares nothing new. Every status
    // written after it is of the new generation, and complete.
    let ready_since = status
        .condition("Ready")
        .expect("Ready")
        .last_transition_time
        .clone();
    let before = done.status.clone();
    let mut changes = watcher(
        world.rollouts(),
        watcher::Config::default().fields("metadata.name=steered"),
    )
    .applied_objects()
    .boxed();
    world
        .run_argo_cd_action("steered", "pause", User::Admin, None)
        .await;
    let generation = world.rollout("steered").await.metadata.generation;
    let first_written = tokio::time::timeout(PROGRESS, async {
        while let Some(Ok(rollout)) = changes.next().await {
            if rollout.metadata.generation == generation && rollout.status != before {
                return rollout;
            }
        }
        panic!("the watch of steered ended");
    })
    .await
    .expect("a status write after the pause");
    let written = first_written.status.as_ref().expect("status");
    assert_eq!(
        written.observed_generation, generation,
        "the first status written after the pause observed it"
    );
    let verdict = assert_seen_as(
        "complete-paused",
        &first_written,
        "Complete",
        "Current",
        "Healthy",
    );
    assert_eq!(verdict.enabled_actions(), ["resume"]);
    assert_eq!(
        written.condition("Ready").map(|c| &c.last_transition_time),
        Some(&ready_since),
        "Ready never flipped"
    );
    assert!(written.is_true("Paused"));
    world
        .run_argo_cd_action("steered", "resume", User::Admin, None)
        .await;
}

/// Every phase the controller exports, as `status.phase` spells it.
const PHASES: [&str; 9] = [
    "Pending",
    "Progressing",
    "Paused",
    "AwaitingApproval",
    "Halted",
    "RollingBack",
    "RolledBack",
    "Complete",
    "Refused",
];

/// Rollouts per phase as the hub holds them (no status yet counts as Pending).
async fn phases_in_the_hub(world: &World) -> BTreeMap<String, i64> {
    let mut counts: BTreeMap<String, i64> = PHASES
        .iter()
        .map(|phase| ((*phase).to_owned(), 0))
        .collect();
    let all: Api<ConfigRollout> = Api::all(world.hub.clone());
    for rollout in within("list rollouts", all.list(&Default::default()))
        .await
        .items
    {
        let phase = phase_of(&rollout).unwrap_or_else(|| "Pending".to_owned());
        *counts.entry(phase).or_default() += 1;
    }
    counts
}

/// `configrollout_rollouts{phase}` as the controller exports it.
fn phases_in_metrics(exposition: &str) -> BTreeMap<String, i64> {
    PHASES
        .iter()
        .map(|phase| {
            let value = sample(
                exposition,
                &format!("configrollout_rollouts{{phase=\"{phase}\"}}"),
            );
            ((*phase).to_owned(), value as i64)
        })
        .collect()
}

/// The rollouts gauge is the hub's count per phase: a rollout that completes is counted
/// Complete, and once deleted it leaves the count.
async fn the_rollouts_gauge_counts_what_the_hub_holds_per_phase(world: &World, metrics_url: &str) {
    let settled = eventually("the gauge matches the hub", PROGRESS, || async {
        let exported = phases_in_metrics(&scrape(metrics_url).await);
        (exported == phases_in_the_hub(world).await).then_some(exported)
    })
    .await;
    assert!(
        settled.values().sum::<i64>() >= 10,
        "every rollout of this test counted: {settled:?}"
    );

    world
        .create_rollout(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: counted, namespace: team}
spec:
  target: {namespace: app, name: counted}
  data: {k: "v"}
  stages:
    - {name: only, regions: {names: [region-1]}}
"#,
        )
        .await;
    world.wait_condition("counted", "Complete", PROGRESS).await;
    let complete = eventually("the gauge counts the new rollout", PROGRESS, || async {
        let exported = phases_in_metrics(&scrape(metrics_url).await);
        let expected = phases_in_the_hub(world).await;
        (exported == expected).then_some(exported["Complete"])
    })
    .await;
    assert_eq!(
        complete,
        settled["Complete"] + 1,
        "the completed rollout is counted Complete: {settled:?}"
    );

    world.delete_rollout("counted").await;
    let after = eventually("the deleted rollout leaves the gauge", PROGRESS, || async {
        let exported = phases_in_metrics(&scrape(metrics_url).await);
        (exported["Complete"] == complete - 1).then_some(exported)
    })
    .await;
    assert_eq!(after, phases_in_the_hub(world).await);
    assert_eq!(after, settled, "back to the counts before it");
}

/// Rollouts whose Drifted condition is true, as the hub holds them.
async fn drifted_in_the_hub(world: &World) -> f64 {
    let all: Api<ConfigRollout> = Api::all(world.hub.clone());
    within("list rollouts", all.list(&Default::default()))
        .await
        .items
        .iter()
        .filter(|rollout| {
            rollout
                .status
                .as_ref()
                .is_some_and(|status| status.is_true("Drifted"))
        })
        .count() as f64
}

/// `configrollout_rollouts_drifted` (what the ConfigRolloutDrift alert reads) is the
/// hub's count of rollouts with `Drifted=True`: one more when a target is edited by hand
/// under driftPolicy Report, one less when that rollout is deleted.
async fn the_drift_gauge_counts_the_rollouts_reporting_drift(world: &World, metrics_url: &str) {
    let exported =
        || async { sample(&scrape(metrics_url).await, "configrollout_rollouts_drifted") };
    let before = eventually("the drift gauge matches the hub", PROGRESS, || async {
        let hub = drifted_in_the_hub(world).await;
        (exported().await == hub).then_some(hub)
    })
    .await;
    world
        .create_rollout(&rollout_yaml(
            "drift-counted",
            r#"  data: {k: "v"}
  driftPolicy: Report
  stages:
    - {name: only, regions: {names: [region-1]}}
"#,
        ))
        .await;
    world
        .wait_condition("drift-counted", "Complete", PROGRESS)
        .await;
    let maps: Api<ConfigMap> = Api::namespaced(world.region("region-1"), APP);
    let edit = serde_json::json!({"data": {"k": "edited-by-hand"}});
    within(
        "edit the target by hand",
        maps.patch(
            "drift-counted",
            &PatchParams::default(),
            &Patch::Merge(&edit),
        ),
    )
    .await;
    world
        .wait_condition("drift-counted", "Drifted", IDLE_POLL + PROGRESS)
        .await;
    eventually(
        "the drift gauge counts the edited rollout",
        PROGRESS,
        || async { (exported().await == before + 1.0).then_some(()) },
    )
    .await;
    assert_eq!(drifted_in_the_hub(world).await, before + 1.0);

    within(
        "delete the rollout",
        world
            .rollouts()
            .delete("drift-counted", &Default::default()),
    )
    .await;
    eventually(
        "the deleted rollout leaves the drift gauge",
        PROGRESS,
        || async { (exported().await == before).then_some(()) },
    )
    .await;
}

/// Other writers racing the controller on a region's ConfigMaps: the controller's writes
/// carry the resourceVersion they were planned from, so the region refuses them (409),
/// the controller reads again, counts each in
/// `configrollout_region_writes_total{result="conflict"}`, and the revision still lands.
async fn a_region_write_that_meets_a_conflict_is_counted_and_read_again(
    world: &World,
    controller: &LabChild,
    metrics_url: &str,
) {
    let rollout = |value: &str| {
        format!(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {{name: contended, namespace: team}}
spec:
  target: {{namespace: app, name: contended}}
  data: {{k: "{value}"}}
  stages:
    - {{name: only, regions: {{names: [region-1]}}}}
"#
        )
    };
    world.create_rollout(&rollout("1")).await;
    world
        .wait_condition("contended", "Complete", PROGRESS)
        .await;
    let conflicts = "configrollout_region_writes_total{result=\"conflict\"}";
    let before = sample(&scrape(metrics_url).await, conflicts);

    // Writers bump the resourceVersions of the companion and the target every few
    // milliseconds (a label only: state and data are untouched), until the controller has
    // met them. A conflict on the target, the second write of a merge, leaves the
    // companion ahead of it: the revision must still reach the target. Not faster: a
    // saturated apiserver answers the controller's reads late.
    let stop = Arc::new(AtomicBool::new(false));
    let pokes = Arc::new(AtomicU64::new(0));
    let companion = format!("contended{COMPANION_SUFFIX}");
    let racers: Vec<_> = (0..3)
        .map(|racer| {
            let (stop, pokes) = (stop.clone(), pokes.clone());
            let companion = companion.clone();
            let maps: Api<ConfigMap> = Api::namespaced(world.region("region-1"), APP);
            tokio::spawn(async move {
                let mut writes = 0_u64;
                while !stop.load(Ordering::Relaxed) && writes < 100_000 {
                    let poke = serde_json::json!({
                        "metadata": {"labels": {"lab-poke": format!("{racer}-{writes}")}}
                    });
                    // The lab may go away under a racer when the test fails elsewhere.
                    let object = if writes.is_multiple_of(2) {
                        companion.as_str()
                    } else {
                        "contended"
                    };
                    let poked = tokio::time::timeout(
                        CALL,
                        maps.patch(object, &PatchParams::default(), &Patch::Merge(&poke)),
                    )
                    .await;
                    if !matches!(poked, Ok(Ok(_))) {
                        break;
                    }
                    writes += 1;
                    pokes.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            })
        })
        .collect();
    eventually("the racers write", PROGRESS, || async {
        (pokes.load(Ordering::Relaxed) >= 30).then_some(())
    })
    .await;

    // Each new revision is one more race between the controller's read and its write;
    // most are lost by the controller, and one is enough.
    let mut revision = 1;
    let after = loop {
        revision += 1;
        if revision > 20 {
            let exposition = scrape(metrics_url).await;
            let writes: Vec<&str> = exposition
                .lines()
                .filter(|line| line.starts_with("configrollout_region_writes_total{"))
                .collect();
            panic!(
                "no conflict counted in 19 revisions ({} competing writes, {writes:?}, \
                 {before} before); controller log:\n{}",
                pokes.load(Ordering::Relaxed),
                controller.log_tail(30)
            );
        }
        let update = serde_json::json!({"spec": {"data": {"k": revision.to_string()}}});
        within(
            "declare a revision",
            world
                .rollouts()
                .patch("contended", &PatchParams::default(), &Patch::Merge(&update)),
        )
        .await;
        let name = format!("r{revision}");
        let started = std::time::Instant::now();
        let counted = eventually(
            &format!("contended: {name} Complete or a conflict"),
            PROGRESS,
            || async {
                assert!(
                    started.elapsed() < PROGRESS - Duration::from_secs(1),
                    "contended: {name} neither Complete nor a conflict counted; controller \
                     log:\n{}",
                    controller.log_tail(30)
                );
                let value = sample(&scrape(metrics_url).await, conflicts);
                if value > before {
                    return Some(Some(value));
                }
                let rollout = world.rollout("contended").await;
                let status = rollout.status.as_ref()?;
                (status.revision.as_deref() == Some(name.as_str())
                    && condition_true(&rollout, "Complete"))
                .then_some(None)
            },
        )
        .await;
        if let Some(value) = counted {
            break value;
        }
    };
    stop.store(true, Ordering::Relaxed);
    for racer in racers {
        racer.await.expect("racer");
    }
    eprintln!(
        "region write conflicts counted: {} (revision r{revision}, {} competing writes)",
        after - before,
        pokes.load(Ordering::Relaxed)
    );

    let name = format!("r{revision}");
    let done = eventually(&format!("contended: {name} Complete"), PROGRESS, || async {
        let rollout = world.rollout("contended").await;
        let status = rollout.status.as_ref()?;
        (status.revision.as_deref() == Some(name.as_str()) && condition_true(&rollout, "Complete"))
            .then_some(rollout)
    })
    .await;
    assert_eq!(
        region_status(&done, "region-1")
            .and_then(|region| region.materialized.as_ref())
            .map(|mark| mark.revision.as_str()),
        Some(name.as_str())
    );
    assert_eq!(
        world.target_data("region-1", "contended").await,
        Some(data(&[("k", &revision.to_string())])),
        "the revision landed after the conflicts"
    );
}

/// Serves `/metrics` with bounded labels, and no value ever reaches logs, events,
/// status or metrics.
async fn no_value_leaves_the_regions(world: &World, metrics_url: &str) {
    let haystacks = observable_output(world, metrics_url).await;
    let metrics = &haystacks[0].1;
    let reconciles: f64 = metrics
        .lines()
        .find(|line| line.starts_with("configrollout_reconcile_total{result=\"ok\"}"))
        .and_then(|line| line.split_whitespace().last())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("reconcile counter in /metrics:\n{metrics}"));
    assert!(reconciles > 0.0, "reconciles counted");
    for (_, value) in SECRET_VALUES {
        for (place, text) in &haystacks {
            assert!(
                !text.contains(value),
                "a configuration value leaked into {place}"
            );
        }
    }
}

/// The shipped manifests (deploy/) are accepted by a real apiserver.
async fn the_deploy_manifests_are_valid(world: &World) {
    let admin = world
        .lab
        .kubeconfig(HUB, User::Admin)
        .expect("admin kubeconfig");
    let deploy = configrollout_e2e::repository_root().join("deploy");
    let output = tokio::process::Command::new(world.lab.kubectl())
        .env("KUBECONFIG", &admin)
        .arg("apply")
        .arg("--dry-run=server")
        .arg("-k")
        .arg(&deploy)
        .output();
    let output = tokio::time::timeout(CALL, output)
        .await
        .expect("kubectl apply answers")
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl apply --dry-run=server -k deploy: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_on_the_lab() {
    configrollout_e2e::gitops::ensure_built().expect("gitops-health builds");
    let mut world = World::start(LabOptions::default()).await;
    world
        .lab
        .install_approver_policy()
        .await
        .expect("install the approver policy");
    the_deploy_manifests_are_valid(&world).await;
    // No controller has probed the lab's Regions yet: in progress, not current.
    let regions: Api<Region> = Api::all(world.hub.clone());
    let unprobed = within("read region", regions.get("region-1")).await;
    assert_seen_as(
        "region-unobserved",
        &unprobed,
        "",
        "InProgress",
        "Progressing",
    );
    let controller = world.start_controller("controller-a");

    a_staged_rollout_waits_for_approval_then_completes(&world).await;
    a_new_revision_mid_rollout_supersedes_the_old(&world).await;
    two_rollouts_on_one_target_converge(&world).await;
    a_collected_key_stays_deleted_when_a_stale_backup_is_restored(&world).await;
    a_from_config_map_edit_starts_a_revision_within_seconds(&world).await;
    binary_data_is_refused_naming_the_key(&world).await;
    drift_is_reverted_while_complete(&world).await;
    a_corrupted_companion_is_reported_and_halts_the_next_revision(&world).await;
    a_horizon_from_the_future_halts_instead_of_counting_keys_as_held(&world).await;
    a_spec_only_the_controller_can_judge_is_invalid_and_touches_nothing(&world).await;
    a_spec_the_schema_refuses_never_exists(&world).await;
    an_oversized_revision_is_reported_and_touches_no_region(&world).await;
    a_leftover_revision_object_is_replaced_when_the_revision_is_declared(&world).await;
    the_gitops_tools_see_a_rollout_as_a_person_would(&world).await;
    let controller = a_restarted_controller_continues_where_it_was(&world, controller).await;
    let controller = convergence::regions_converge_across_a_lagging_clock_and_a_restored_namespace(
        &world, controller,
    )
    .await;
    only_the_lease_holder_writes_and_a_standby_takes_over(
        &world,
        controller,
        convergence::LAGGING_IDENTITY,
    )
    .await;
    let probe_addr = free_local_addr();
    // A platform that samples gates no more often than every 5 s.
    let controller =
        world.start_controller_with("controller-c", &probe_addr, &["--min-gate-interval=5s"]);
    let metrics_url = format!("http://{probe_addr}/metrics");
    an_unreachable_region_halts_at_the_deadline_or_completes_when_back(&mut world, &metrics_url)
        .await;
    a_region_write_that_meets_a_conflict_is_counted_and_read_again(
        &world,
        &controller,
        &metrics_url,
    )
    .await;
    the_rollouts_gauge_counts_what_the_hub_holds_per_phase(&world, &metrics_url).await;
    the_drift_gauge_counts_the_rollouts_reporting_drift(&world, &metrics_url).await;
    no_value_leaves_the_regions(&world, &metrics_url).await;
    a_gate_faster_than_the_platform_floor_is_refused_naming_it(&world).await;
    a_lost_digest_key_stops_a_starting_controller_and_mints_none(&world, controller).await;
}

/// The schema allows a gate interval of 1s; a controller run with a higher
/// `--min-gate-interval` refuses a faster gate as InvalidSpec, naming the field and the
/// flag, and writes nothing to any region.
async fn a_gate_faster_than_the_platform_floor_is_refused_naming_it(world: &World) {
    world
        .create_rollout(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: hasty, namespace: team}
spec:
  target: {namespace: app, name: hasty}
  data: {k: "v"}
  gates:
    - {name: errors, query: "up", condition: "result > 0", interval: 2s}
  stages:
    - {name: canary, regions: {names: [region-1]}, gates: [errors]}
"#,
        )
        .await;
    let refused = world.wait_condition("hasty", "InvalidSpec", PROGRESS).await;
    let message = refused
        .status
        .as_ref()
        .and_then(|status| {
            status
                .conditions
                .iter()
                .find(|condition| condition.type_ == "InvalidSpec")
        })
        .map(|condition| condition.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("spec.gates[0].interval") && message.contains("--min-gate-interval"),
        "{message}"
    );
    assert_eq!(world.target_data("region-1", "hasty").await, None);
    // Valid on a controller with the default floor: not left for the next one to declare.
    world.delete_rollout("hasty").await;
}

/// The digest key Secret deleted (a namespace recreated on reinstall, a hub restored
/// without Secrets) while revisions exist: a starting controller refuses to mint a new
/// key, which would verify no region's state, and exits saying what to restore; restored,
/// the controller runs and declares nothing again.
async fn a_lost_digest_key_stops_a_starting_controller_and_mints_none(
    world: &World,
    controller: LabChild,
) {
    controller.stop();
    let secrets: Api<Secret> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let kept = within("read the digest key", secrets.get(DIGEST_KEY_SECRET)).await;
    let revisions: Api<ControllerRevision> = Api::all(world.hub.clone());
    let count = || async {
        within(
            "list revisions",
            revisions.list_metadata(&ListParams::default().labels(ROLLOUT_LABEL)),
        )
        .await
        .items
        .len()
    };
    let before = count().await;
    assert!(before > 0, "the lab's rollouts declared revisions");
    within(
        "delete the digest key",
        secrets.delete(DIGEST_KEY_SECRET, &DeleteParams::default()),
    )
    .await;
    let mut keyless = world.start_controller("controller-keyless");
    eventually("the keyless controller exits", PROGRESS, || {
        let running = keyless.is_running();
        async move { (!running).then_some(()) }
    })
    .await;
    let log = keyless.log();
    assert!(
        log.contains("the Secret is missing while revisions exist")
            && log.contains("restore it from your backup"),
        "{log}"
    );
    assert!(
        within("read the digest key", secrets.get_opt(DIGEST_KEY_SECRET))
            .await
            .is_none(),
        "no key was minted"
    );

    let restored = Secret {
        metadata: ObjectMeta {
            name: Some(DIGEST_KEY_SECRET.to_owned()),
            namespace: Some(SYSTEM_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        data: kept.data,
        ..Secret::default()
    };
    within(
        "restore the digest key",
        secrets.create(&PostParams::default(), &restored),
    )
    .await;
    let mut controller = world.start_controller("controller-restored");
    // A few reconciles of every rollout: it keeps running and declares nothing.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(controller.is_running(), "{}", controller.log_tail(40));
    assert_eq!(count().await, before, "no revision declared again");
    controller.stop();
}
