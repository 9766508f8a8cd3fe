//! Issue 43 on the lab: two rollouts writing different keys of one ConfigMap, a failover
//! onto a controller whose clock is 30 s behind, and a region namespace restored from a
//! copy saved before one of the rollouts' revisions reached it, after which the other
//! rollout's collection raises that region's horizon past the lost write.

use std::collections::BTreeMap;

use configrollout_e2e::LabChild;

use crate::support::*;

const REGIONS: [&str; 3] = ["region-1", "region-2", "region-3"];
const TARGET: &str = "skewed";
/// The region whose namespace is restored.
const RESTORED: &str = "region-2";
/// The controller this scenario leaves leading, on a clock 30 s behind.
pub const LAGGING_IDENTITY: &str = "controller-lagging";

fn rollout(name: &str, data: &str) -> String {
    format!(
        r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {{name: {name}, namespace: team}}
spec:
  target: {{namespace: app, name: {TARGET}}}
  data: {data}
  stages:
    - {{name: all, regions: {{names: [region-1, region-2, region-3]}}, maxParallel: 3}}
"#
    )
}

/// Waits until `name` is Complete at `revision`.
async fn complete_at(world: &World, name: &str, revision: &str) {
    eventually(
        &format!("{name} Complete at {revision}"),
        PROGRESS,
        || async {
            let status = world.rollout(name).await.status?;
            (status.is_true("Complete") && status.revision.as_deref() == Some(revision))
                .then_some(())
        },
    )
    .await;
}

/// The keys of `prefix` (one rollout's) in a region's target.
fn own(data: &BTreeMap<String, String>, prefix: &str) -> BTreeMap<String, String> {
    data.iter()
        .filter(|(key, _)| key.starts_with(prefix))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

pub async fn regions_converge_across_a_lagging_clock_and_a_restored_namespace(
    world: &World,
    controller: LabChild,
) -> LabChild {
    world
        .create_rollout(&rollout("skew-a", r#"{a1: "1", a4: "4"}"#))
        .await;
    world
        .create_rollout(&rollout("skew-b", r#"{b1: "1"}"#))
        .await;
    complete_at(world, "skew-a", "r1").await;
    complete_at(world, "skew-b", "r1").await;
    let backup = world.back_up_target(RESTORED, TARGET).await;

    // B adds b4 everywhere; then A removes a4 and, B being caught up, collects.
    let rollouts = world.rollouts();
    change_data(&rollouts, "skew-b", serde_json::json!({"b4": "4"})).await;
    complete_at(world, "skew-b", "r2").await;
    change_data(&rollouts, "skew-a", serde_json::json!({"a4": null})).await;
    complete_at(world, "skew-a", "r2").await;
    eventually("skew-a records a collection point", PROGRESS, || async {
        let status = world.rollout("skew-a").await.status?;
        let r2 = status.history.iter().find(|record| record.name == "r2")?;
        (status.collected_through.as_ref() == Some(&r2.stamp)).then_some(())
    })
    .await;

    // A failover onto a node whose clock is 30 s behind.
    controller.kill();
    let lagging = world.start_controller_with(
        LAGGING_IDENTITY,
        "127.0.0.1:0",
        &["--clock-behind-ms=30000"],
    );

    // Once it leads and is reconciling (A's r3 Complete through it), region-2's namespace
    // comes back from the copy: a4 is back, b4 is gone.
    eventually("the lagging controller leads", PROGRESS, || async {
        (crate::lease_holder(world).await.as_deref() == Some(LAGGING_IDENTITY)).then_some(())
    })
    .await;
    change_data(&rollouts, "skew-a", serde_json::json!({"a1": "2"})).await;
    complete_at(world, "skew-a", "r3").await;
    world.restore_target(RESTORED, &backup).await;
    let restored = world
        .target_data(RESTORED, TARGET)
        .await
        .unwrap_or_default();
    assert_eq!(own(&restored, "a"), data(&[("a1", "1"), ("a4", "4")]));
    assert_eq!(own(&restored, "b"), data(&[("b1", "1")]));

    // A's next revision carries its collection point to every region, region-2's
    // horizon included, which passes B's b4 there; then B declares on the lagging clock.
    change_data(&rollouts, "skew-a", serde_json::json!({"a1": "3"})).await;
    complete_at(world, "skew-a", "r4").await;
    change_data(&rollouts, "skew-b", serde_json::json!({"b5": "5"})).await;

    let want_a = data(&[("a1", "3")]);
    let want_b = data(&[("b1", "1"), ("b4", "4"), ("b5", "5")]);
    eventually(
        "every region holds both rollouts' keys",
        PROGRESS,
        || async {
            let mut complete = 0;
            for (name, prefix, want, latest) in [
                ("skew-a", "a", &want_a, "r4"),
                ("skew-b", "b", &want_b, "r3"),
            ] {
                let status = world.rollout(name).await.status.unwrap_or_default();
                if !(status.is_true("Complete") && status.revision.as_deref() == Some(latest)) {
                    continue;
                }
                // Complete: every region must hold exactly its keys, now and from now on.
                for region in REGIONS {
                    let held = world.target_data(region, TARGET).await.unwrap_or_default();
                    assert_eq!(
                        &own(&held, prefix),
                        want,
                        "{name} says Complete at {latest} while {region} holds other keys"
                    );
                }
                complete += 1;
            }
            (complete == 2).then_some(())
        },
    )
    .await;
    lagging
}
