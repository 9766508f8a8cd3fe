//! The safety half on real parts: metric gates read by a real Prometheus from the lab's
//! workloads, which are real consumers (each watches its region's target ConfigMap and
//! fails requests while the configuration it loaded is bad). A bad value is caught in the
//! canary and halted or rolled back before it spreads; a dark Prometheus holds the
//! rollout and then halts it, and a partial answer (with `warnings`) is never taken as
//! whole; a gate waits for a workload that loads a value late and fails on it, never
//! passing on the data from before. The regions run kube-controller-manager,
//! kube-scheduler and KWOK, so consumer Deployments get pods that turn Ready and restart
//! for real. One lab for the whole binary; the scenarios run in order, each on its own
//! rollout and target.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use configrollout::api::{ConfigRollout, GateVerdict, SampleVerdict, StageState};
use configrollout::crdt::{DigestKey, Stamp, WriterId};
use configrollout::regions::overrides::write_override;
use configrollout_e2e::prometheus::Monitoring;
use configrollout_e2e::{KUBECONFIG_SECRET_KEY, LabOptions, SYSTEM_NAMESPACE, User};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

mod support;

use support::*;

const REGIONS: [&str; 3] = ["region-1", "region-2", "region-3"];
/// A value the workload accepts.
const GOOD_TIMEOUT: &str = "250";
/// A value the workload refuses (`timeout_ms` must be 1..=600000): its consumers fail
/// half of their requests while they run it.
const BAD_TIMEOUT: &str = "0";
/// A value distinctive enough to grep for: it must not appear in logs, events, metrics
/// or status.
const BANNER: &str = "s3cr3t-banner-7d1a";
/// Per-region error ratio over the last few scrapes.
const ERROR_RATIO: &str = "sum(rate(configrollout_lab_errors_total{region=\"{{region}}\"}[5s])) / sum(rate(configrollout_lab_requests_total{region=\"{{region}}\"}[5s]))";

/// How a scenario's gate and canary stage are shaped.
struct Shape {
    on_failure: &'static str,
    count: u32,
    inconclusive_limit: u32,
    canary_pause: Option<&'static str>,
}

impl Shape {
    fn failing_fast(on_failure: &'static str) -> Self {
        Self {
            on_failure,
            count: 3,
            inconclusive_limit: 3,
            canary_pause: None,
        }
    }
}

/// A two-stage rollout (canary region-1, then region-2 and region-3) whose stages are
/// gated on the region's error ratio.
fn gated_rollout(name: &str, timeout_ms: &str, shape: &Shape) -> String {
    let pause = shape
        .canary_pause
        .map(|pause| format!("\n      pause: {{duration: {pause}}}"))
        .unwrap_or_default();
    rollout_yaml(
        name,
        &format!(
            r#"
  onFailure: {on_failure}
  data:
    timeout_ms: "{timeout_ms}"
    banner: "{BANNER}"
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      condition: result < 0.1
      interval: 2s
      initialDelay: 4s
      count: {count}
      failureLimit: 0
      inconclusiveLimit: {inconclusive_limit}
  stages:
    - name: canary
      regions: {{names: [region-1]}}
      gates: [errors]{pause}
    - name: prod
      regions: {{names: [region-2, region-3]}}
      maxParallel: 2
      gates: [errors]
"#,
            on_failure = shape.on_failure,
            count = shape.count,
            inconclusive_limit = shape.inconclusive_limit,
        ),
    )
}

impl World {
    /// Points every region's workload at the target `name`.
    async fn consume(&self, name: &str) {
        for region in REGIONS {
            within(
                "point the workload at the target",
                self.lab.watch_config(region, APP, name),
            )
            .await;
        }
    }

    /// Merge-patches the rollout's `spec.data` (a null removes a key), as `kubectl
    /// patch --type merge` would: a new revision.
    async fn change_data(&self, name: &str, data: serde_json::Value) {
        let patch = serde_json::json!({"spec": {"data": data}});
        within(
            "change the rollout's data",
            self.rollouts()
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
    }

    async fn set_timeout(&self, name: &str, timeout_ms: &str) {
        self.change_data(name, serde_json::json!({"timeout_ms": timeout_ms}))
            .await;
    }

    async fn has_event(&self, name: &str, reason: &str) -> bool {
        let events: Api<Event> = Api::namespaced(self.hub.clone(), TEAM);
        let events = within("list events", events.list(&Default::default())).await;
        events.items.iter().any(|event| {
            event.reason.as_deref() == Some(reason)
                && event.involved_object.name.as_deref() == Some(name)
        })
    }

    async fn error_ratio(&self, region: &str) -> Option<f64> {
        let query = ERROR_RATIO.replace("{{region}}", region);
        let samples = self.lab.query_prometheus(&query).await.ok()?;
        samples.first().map(|sample| sample.value)
    }

    async fn assert_good_everywhere(&self, name: &str) {
        for region in REGIONS {
            assert_eq!(
                self.timeout_in(region, name).await.as_deref(),
                Some(GOOD_TIMEOUT),
                "{region}"
            );
        }
    }

    async fn timeout_in(&self, region: &str, name: &str) -> Option<String> {
        self.target_data(region, name)
            .await
            .and_then(|data| data.get("timeout_ms").cloned())
    }
}

fn stage<'a>(rollout: &'a ConfigRollout, name: &str) -> &'a configrollout::api::StageStatus {
    rollout
        .status
        .as_ref()
        .and_then(|status| status.stages.iter().find(|stage| stage.name == name))
        .unwrap_or_else(|| panic!("stage {name} in status"))
}

fn condition<'a>(
    rollout: &'a ConfigRollout,
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    rollout
        .status
        .as_ref()
        .and_then(|status| status.condition(type_))
        .unwrap_or_else(|| panic!("condition {type_} in status"))
}

/// The Halted condition says why: the gate, the region and the sample that failed.
fn assert_canary_gate_failed(rollout: &ConfigRollout) {
    let halted = condition(rollout, "Halted");
    assert_eq!(halted.status, "True");
    assert_eq!(halted.reason, "GateFailed");
    assert!(
        halted.message.contains("gate errors")
            && halted.message.contains("region region-1")
            && halted.message.contains("last sample Failed (value"),
        "the condition names the gate, the region and the sample: {}",
        halted.message
    );
}

/// Declares a good revision and waits until every region holds it.
async fn complete_with_good_value(world: &World, name: &str, shape: &Shape) {
    world.consume(name).await;
    world
        .create_rollout(&gated_rollout(name, GOOD_TIMEOUT, shape))
        .await;
    world.wait_condition(name, "Complete", PROGRESS).await;
    world.assert_good_everywhere(name).await;
}

async fn a_bad_value_is_caught_in_the_canary_and_rolled_back(world: &World) {
    let name = "timeouts-rollback";
    complete_with_good_value(world, name, &Shape::failing_fast("Rollback")).await;
    let later_stages = WriteCounter::start_in(world, &["region-2", "region-3"], name).await;

    world.set_timeout(name, BAD_TIMEOUT).await;
    // The canary's consumers load the bad value and really fail requests.
    eventually("the canary's error ratio rises", PROGRESS, || async {
        world
            .error_ratio("region-1")
            .await
            .filter(|ratio| *ratio > 0.2)
    })
    .await;
    let rolled_back = world.wait_phase(name, "RolledBack", PROGRESS).await;

    assert_eq!(
        world.timeout_in("region-1", name).await.as_deref(),
        Some(GOOD_TIMEOUT),
        "the canary holds the previous value again"
    );
    for (region, counter) in ["region-2", "region-3"].iter().zip(&later_stages) {
        assert_eq!(
            world.timeout_in(region, name).await.as_deref(),
            Some(GOOD_TIMEOUT)
        );
        assert_eq!(
            counter.writes(),
            0,
            "{region} never received the bad revision"
        );
    }
    let rolled = condition(&rolled_back, "RolledBack");
    assert_eq!(rolled.status, "True");
    assert_canary_gate_failed(&rolled_back);
    // What Flux and Argo CD make of it: the change failed, whatever the gate's wording.
    let verdict = assert_seen_as(
        "rolled-back-gate",
        &rolled_back,
        "RolledBack",
        "Failed",
        "Degraded",
    );
    assert!(
        verdict.kstatus.message.contains("GateFailed"),
        "{verdict:#?}"
    );
    let canary = stage(&rolled_back, "canary");
    assert_eq!(canary.state, StageState::Failed);
    let failed = canary
        .gates
        .iter()
        .flat_map(|gate| &gate.samples)
        .find(|sample| sample.verdict == SampleVerdict::Failed)
        .expect("the failing sample is in status");
    let value: f64 = failed
        .value
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("the failing sample's value");
    assert!(value >= 0.1, "failed on {value}");
    assert_eq!(stage(&rolled_back, "prod").state, StageState::Pending);

    // The consumers reload the restored value and recover.
    eventually("the canary's error ratio falls", PROGRESS, || async {
        world
            .error_ratio("region-1")
            .await
            .filter(|ratio| *ratio < 0.1)
    })
    .await;
}

async fn a_bad_value_halts_where_it_is(world: &World) {
    let name = "timeouts-halt";
    complete_with_good_value(world, name, &Shape::failing_fast("Halt")).await;
    world.set_timeout(name, BAD_TIMEOUT).await;
    let halted = world.wait_phase(name, "Halted", PROGRESS).await;
    assert_canary_gate_failed(&halted);
    // Halted in its canary: Flux's health check fails and Argo CD says Degraded, where
    // both took it for done before the rollout spoke kstatus.
    let verdict = assert_seen_as("halted-gate", &halted, "Halted", "Failed", "Degraded");
    assert!(
        verdict
            .kstatus
            .message
            .starts_with("r2 halted (GateFailed)"),
        "{verdict:#?}"
    );

    // Halt stops where it is: the canary keeps the bad value, nothing else is written.
    let counters = WriteCounter::start_in(world, &REGIONS, name).await;
    // Time for the controller to do something if it were going to: several reconciles.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        world.timeout_in("region-1", name).await.as_deref(),
        Some(BAD_TIMEOUT)
    );
    for (region, counter) in REGIONS.iter().zip(&counters) {
        // The counter's watch was established before this point: any change is a write.
        assert_eq!(counter.writes(), 0, "{region} was written after the halt");
    }
    for region in ["region-2", "region-3"] {
        assert_eq!(
            world.timeout_in(region, name).await.as_deref(),
            Some(GOOD_TIMEOUT)
        );
    }
    assert_eq!(
        phase_of(&world.rollout(name).await).as_deref(),
        Some("Halted")
    );
}

async fn a_dark_prometheus_holds_the_rollout_then_halts_it(world: &mut World) {
    let name = "timeouts-dark";
    let shape = Shape {
        on_failure: "Halt",
        count: 8,
        inconclusive_limit: 2,
        canary_pause: None,
    };
    world.consume(name).await;
    world
        .create_rollout(&gated_rollout(name, GOOD_TIMEOUT, &shape))
        .await;
    eventually("the canary verifies its gate", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let canary = rollout.status.as_ref()?.stages.first()?.clone();
        (canary.state == StageState::Verifying).then_some(())
    })
    .await;
    world.lab.stop_prometheus();

    let halted = world.wait_phase(name, "Halted", PROGRESS).await;
    world
        .lab
        .start_prometheus()
        .await
        .expect("Prometheus starts again");
    let gate = &stage(&halted, "canary").gates[0];
    // An unreachable Prometheus is a query error, not an inconclusive sample: the gate
    // fails at consecutiveErrorLimit (default 4) errors in a row.
    assert!(
        gate.consecutive_errors >= 4,
        "halted at the consecutive error limit: {gate:?}"
    );
    assert!(
        gate.samples
            .iter()
            .rev()
            .take(4)
            .all(|sample| sample.verdict == SampleVerdict::Error),
        "{gate:?}"
    );
    assert_eq!(condition(&halted, "Halted").reason, "GateFailed");
    for region in ["region-2", "region-3"] {
        assert_eq!(
            world.target_data(region, name).await,
            None,
            "{region} received nothing while the gate could not be read"
        );
    }

    // Prometheus is back: an operator's retry (Argo CD's action) resumes the canary with a
    // fresh window.
    let verdict = judged("halted-dark", &halted);
    assert_eq!(verdict.enabled_actions(), ["pause", "retry"]);
    // Argo CD's retry is dated to the second (Lua's os.date), and a retry resumes only a
    // halt older than it: a person sees the halt before asking, so the second turns.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    world
        .run_argo_cd_action(name, "retry", User::Admin, None)
        .await;
    let done = world.wait_complete(name, "r1").await;
    let gate = &stage(&done, "canary").gates[0];
    // A Prometheus just started has no rate for a few scrapes: those samples are
    // Inconclusive, within the limit, and the window still needs its 8 successes.
    assert_eq!(gate.verdict, Some(GateVerdict::Passed), "{gate:?}");
    assert!(gate.successes >= 8 && gate.inconclusives <= 2, "{gate:?}");
    assert!(world.has_event(name, "Retried").await);
    world.assert_good_everywhere(name).await;
}

/// Whether the lab's Prometheus answers `up` with `warnings` (read raw: the lab's own
/// query helper ignores them, as the controller used to).
async fn prometheus_warns(world: &World) -> bool {
    let url = format!("{}/api/v1/query?query=up", world.lab.prometheus_url());
    let answer: serde_json::Value = within("query Prometheus", async {
        reqwest::get(&url).await?.json::<serde_json::Value>().await
    })
    .await;
    answer["warnings"]
        .as_array()
        .is_some_and(|warnings| !warnings.is_empty())
}

/// A Prometheus whose remote store does not answer gives partial answers, with
/// `warnings` (as Thanos or Cortex do when a store is down): the gate takes none of them
/// as whole. A good value, which whole answers would pass, is held Inconclusive and
/// halted past the limit; prod is never written.
async fn partial_answers_are_inconclusive(world: &mut World) {
    let name = "timeouts-partial";
    let unanswered = format!("http://{}/api/v1/read", free_local_addr());
    within(
        "give Prometheus a remote store that does not answer",
        world.lab.monitor(&Monitoring {
            remote_read: vec![unanswered],
            ..Monitoring::default()
        }),
    )
    .await;
    eventually("Prometheus answers with warnings", PROGRESS, || async {
        prometheus_warns(world).await.then_some(())
    })
    .await;
    world.consume(name).await;
    let shape = Shape {
        on_failure: "Halt",
        count: 3,
        inconclusive_limit: 1,
        canary_pause: None,
    };
    world
        .create_rollout(&gated_rollout(name, GOOD_TIMEOUT, &shape))
        .await;
    let halted = world.wait_phase(name, "Halted", PROGRESS).await;
    within(
        "Prometheus without the remote store again",
        world.lab.monitor(&Monitoring::default()),
    )
    .await;
    eventually("Prometheus answers whole again", PROGRESS, || async {
        (!prometheus_warns(world).await).then_some(())
    })
    .await;

    let gate = &stage(&halted, "canary").gates[0];
    assert_eq!((gate.successes, gate.inconclusives), (0, 2), "{gate:?}");
    for sample in &gate.samples {
        assert_eq!(sample.verdict, SampleVerdict::Inconclusive, "{gate:?}");
        let message = sample.message.as_deref().unwrap_or_default();
        assert!(
            message.starts_with("Prometheus warned that the answer may be incomplete")
                && message.contains("remote_read"),
            "the sample says why: {message}"
        );
    }
    let halted_condition = condition(&halted, "Halted");
    assert_eq!(halted_condition.reason, "GateFailed");
    assert!(
        halted_condition
            .message
            .contains("2 inconclusive samples, limit 1"),
        "{}",
        halted_condition.message
    );
    for region in ["region-2", "region-3"] {
        assert_eq!(world.target_data(region, name).await, None, "{region}");
    }
}

async fn an_aborted_rollout_is_rolled_back_and_publishes_nothing_more(world: &World) {
    let name = "timeouts-abort";
    world
        .create_rollout(
            &gated_rollout(name, GOOD_TIMEOUT, &Shape::failing_fast("Halt")).replace(
                "      maxParallel: 2\n      gates: [errors]",
                "      maxParallel: 2\n      approval: Required\n      gates: [errors]",
            ),
        )
        .await;
    world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    assert_eq!(
        world.timeout_in("region-1", name).await.as_deref(),
        Some(GOOD_TIMEOUT)
    );
    // Aborted with Argo CD's action. An abort rolls back what was published, whatever
    // onFailure says: r1 was the first revision, so the canary's target loses every key
    // it wrote.
    world
        .run_argo_cd_action(name, "abort", User::Admin, None)
        .await;
    let aborted = world.wait_phase(name, "RolledBack", PROGRESS).await;
    assert_eq!(condition(&aborted, "Halted").reason, "Aborted");
    assert_seen_as(
        "rolledback-aborted",
        &aborted,
        "RolledBack",
        "Failed",
        "Degraded",
    );
    assert!(world.has_event(name, "Aborted").await);
    assert_eq!(world.timeout_in("region-1", name).await, None);

    // An approval arriving after the abort starts nothing.
    world.approve(User::ApproverAlice, name, "prod", "r1").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    for region in ["region-2", "region-3"] {
        assert_eq!(world.target_data(region, name).await, None, "{region}");
    }
    assert_eq!(
        phase_of(&world.rollout(name).await).as_deref(),
        Some("RolledBack")
    );
}

async fn a_passing_gate_opens_the_next_stage_after_its_window_and_pause(world: &World) {
    let name = "timeouts-bake";
    let shape = Shape {
        on_failure: "Halt",
        count: 3,
        inconclusive_limit: 3,
        canary_pause: Some("5s"),
    };
    complete_with_good_value(world, name, &shape).await;
    let done = world.rollout(name).await;
    let canary = stage(&done, "canary");
    let gate = &canary.gates[0];
    assert!(gate.successes >= 3, "{gate:?}");
    let last_sample = gate
        .samples
        .iter()
        .map(|sample| sample.at.0.as_millisecond())
        .max()
        .expect("samples in status");
    let prod_started = stage(&done, "prod")
        .started_at
        .as_ref()
        .expect("prod started")
        .0
        .as_millisecond();
    let passed = canary
        .passed_at
        .as_ref()
        .expect("canary passed")
        .0
        .as_millisecond();
    assert!(passed >= last_sample, "the canary passed after its window");
    let bake_ms = prod_started - last_sample;
    assert!(
        bake_ms >= 5_000,
        "prod started {bake_ms} ms after the canary's last sample; the pause is 5s"
    );
}

fn plain_rollout(name: &str, limit: &str) -> String {
    rollout_yaml(
        name,
        &format!(
            r#"
  data:
    limit: "{limit}"
    banner: "{BANNER}"
  stages:
    - name: canary
      regions: {{names: [region-1]}}
    - name: prod
      regions: {{names: [region-2, region-3]}}
      maxParallel: 2
      progressDeadline: 10m
"#
        ),
    )
}

impl World {
    /// Cuts the hub off from `region` (its apiserver keeps running, so people in the
    /// region can still write): the Region's kubeconfig Secret is pointed at a closed
    /// port. Returns the Secret's original data, for [`World::heal`].
    async fn partition(&self, region: &str) -> BTreeMap<String, ByteString> {
        let secrets: Api<Secret> = Api::namespaced(self.hub.clone(), SYSTEM_NAMESPACE);
        let name = self.lab.kubeconfig_secret(region).expect("secret name");
        let secret = within("read kubeconfig Secret", secrets.get(&name)).await;
        let original = secret.data.clone().expect("Secret data");
        let mut kubeconfig: serde_json::Value =
            serde_saphyr::from_slice(&original[KUBECONFIG_SECRET_KEY].0).expect("kubeconfig");
        for cluster in kubeconfig["clusters"].as_array_mut().expect("clusters") {
            cluster["cluster"]["server"] = "https://127.0.0.1:9".into();
        }
        let cut = serde_saphyr::to_string(&kubeconfig).expect("kubeconfig YAML");
        self.put_kubeconfig(
            &name,
            BTreeMap::from([(
                KUBECONFIG_SECRET_KEY.to_owned(),
                ByteString(cut.into_bytes()),
            )]),
        )
        .await;
        original
    }

    async fn heal(&self, region: &str, original: BTreeMap<String, ByteString>) {
        let name = self.lab.kubeconfig_secret(region).expect("secret name");
        self.put_kubeconfig(&name, original).await;
    }

    async fn put_kubeconfig(&self, name: &str, data: BTreeMap<String, ByteString>) {
        let secrets: Api<Secret> = Api::namespaced(self.hub.clone(), SYSTEM_NAMESPACE);
        let patch = serde_json::json!({"data": data});
        within(
            "write kubeconfig Secret",
            secrets.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
    }

    async fn digest_key(&self) -> DigestKey {
        let secrets: Api<Secret> = Api::namespaced(self.hub.clone(), SYSTEM_NAMESPACE);
        let secret = within("read digest key", secrets.get("configrollout-digest-key")).await;
        let data = secret.data.expect("digest key data");
        DigestKey::new(&data["key"].0).expect("digest key")
    }

    async fn set_limit(&self, name: &str, limit: &str) {
        self.change_data(name, serde_json::json!({"limit": limit}))
            .await;
    }

    async fn limit_in(&self, region: &str, name: &str) -> Option<String> {
        self.target_data(region, name)
            .await
            .and_then(|data| data.get("limit").cloned())
    }

    /// Waits until the rollout's status names `revision` and says Complete.
    async fn wait_complete(&self, name: &str, revision: &str) -> ConfigRollout {
        eventually(
            &format!("{name}: {revision} Complete"),
            PROGRESS,
            || async {
                let rollout = self.rollout(name).await;
                let current = rollout.status.as_ref()?.revision.as_deref() == Some(revision);
                (current && condition_true(&rollout, "Complete")).then_some(rollout)
            },
        )
        .await
    }
}

async fn an_override_made_during_a_partition_survives_an_older_revision(world: &World) {
    let name = "overrides";
    world.create_rollout(&plain_rollout(name, "100")).await;
    world.wait_complete(name, "r1").await;

    let original = world.partition("region-3").await;
    world.set_limit(name, "200").await;
    eventually("r2 reaches the reachable regions", PROGRESS, || async {
        let reached = world.limit_in("region-2", name).await.as_deref() == Some("200");
        reached.then_some(())
    })
    .await;
    assert_eq!(
        world.limit_in("region-3", name).await.as_deref(),
        Some("100")
    );

    // Someone on call in region-3 sets an emergency value there, after r2 was declared
    // but before it could arrive.
    let key = world.digest_key().await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    let now_ms = u64::try_from(now_ms).expect("milliseconds fit");
    let stamp = Stamp::new(
        now_ms,
        0,
        WriterId::override_by("alice").expect("override writer"),
    );
    let region_3 = world.region("region-3");
    let changes = BTreeMap::from([("limit".to_owned(), Some("999".to_owned()))]);
    let written = write_override(&region_3, &key, APP, name, stamp, &changes);
    within("write the override", written).await;

    world.heal("region-3", original).await;
    let done = world.wait_complete(name, "r2").await;
    assert_eq!(
        world.limit_in("region-3", name).await.as_deref(),
        Some("999"),
        "the earlier-declared r2 arrived later and did not clobber the override"
    );
    let region_3 = region_status(&done, "region-3").expect("region-3 in status");
    assert_eq!(region_3.overridden_keys, vec!["limit".to_owned()]);
    for region in ["region-1", "region-2"] {
        assert_eq!(world.limit_in(region, name).await.as_deref(), Some("200"));
    }

    // A revision declared after the override wins over it.
    world.set_limit(name, "300").await;
    let done = world.wait_complete(name, "r3").await;
    for region in REGIONS {
        assert_eq!(world.limit_in(region, name).await.as_deref(), Some("300"));
    }
    let region_3 = region_status(&done, "region-3").expect("region-3 in status");
    assert!(region_3.overridden_keys.is_empty(), "{region_3:?}");
}

fn renaming_rollout(name: &str, key: &str) -> String {
    rollout_yaml(
        name,
        &format!(
            r#"
  data:
    {key}: "{GOOD_TIMEOUT}"
    banner: "{BANNER}"
  strategy:
    expandContract: Auto
    contract: {{pause: {{duration: 5s}}}}
  stages:
    - name: canary
      regions: {{names: [region-1]}}
    - name: prod
      regions: {{names: [region-2, region-3]}}
      maxParallel: 2
"#
        ),
    )
}

/// When `region`'s workload first loaded a configuration with (`with == true`) or
/// without `key`, after loading one that had it.
async fn first_load(world: &World, region: &str, key: &str, with: bool) -> SystemTime {
    let history = within("config history", world.lab.config_history(region)).await;
    history
        .iter()
        .find(|load| load.present && load.keys.iter().any(|k| k == key) == with)
        .map(|load| load.time)
        .unwrap_or_else(|| {
            panic!(
                "{region}: no load {} {key}: {history:?}",
                if with { "with" } else { "without" }
            )
        })
}

async fn a_renamed_key_disappears_only_after_every_region_has_the_new_one(world: &World) {
    let name = "renamed";
    world.consume(name).await;
    world
        .create_rollout(&renaming_rollout(name, "timeout"))
        .await;
    world.wait_complete(name, "r1").await;

    // r2 renames `timeout` to `timeout_ms`: expand (add timeout_ms) through every stage,
    // the contract pause, then contract (remove timeout) through every stage again.
    world
        .change_data(
            name,
            serde_json::json!({"timeout": null, "timeout_ms": GOOD_TIMEOUT}),
        )
        .await;
    world.wait_complete(name, "r2").await;
    for region in REGIONS {
        let data = world.target_data(region, name).await.expect("target");
        assert!(
            data.contains_key("timeout_ms") && !data.contains_key("timeout"),
            "{region}: {:?}",
            data.keys()
        );
    }

    // Every region's consumers had the new key before any region's lost the old one, and
    // the contract pause lay in between.
    let mut expanded_everywhere = SystemTime::UNIX_EPOCH;
    for region in REGIONS {
        expanded_everywhere =
            expanded_everywhere.max(first_load(world, region, "timeout_ms", true).await);
    }
    for region in REGIONS {
        let history = within("config history", world.lab.config_history(region)).await;
        let contracted = history
            .iter()
            .filter(|load| load.present && load.revision == "r2")
            .find(|load| !load.keys.iter().any(|k| k == "timeout"))
            .map(|load| load.time)
            .unwrap_or_else(|| panic!("{region}: r2 never removed timeout: {history:?}"));
        let waited = contracted
            .duration_since(expanded_everywhere)
            .unwrap_or_else(|_| {
                panic!("{region} lost `timeout` before every region had `timeout_ms`: {history:?}")
            });
        // The pause runs on the controller's clock from when it saw the last region
        // expanded; the workloads see writes a little after they land. A second of
        // slack keeps the check about the pause, not about watch latency.
        assert!(
            waited >= Duration::from_secs(4),
            "{region} lost `timeout` {waited:?} after the last region expanded; the contract pause is 5s"
        );
    }
}

/// Name of the Deployment that consumes the targets in every region.
const CONSUMER: &str = "api";
const INSTANCES: i32 = 3;
const ACTIVATION_QUERY: &str =
    "count(configrollout_lab_consumer_revision{region=\"{{region}}\",revision=\"{{revision}}\"})";

fn consumed_rollout(name: &str, consumer: &str) -> String {
    rollout_yaml(
        name,
        &format!(
            r#"
  data:
    timeout_ms: "{GOOD_TIMEOUT}"
    banner: "{BANNER}"
  consumers:
    - {consumer}
  stages:
    - name: canary
      regions: {{names: [region-1]}}
    - name: prod
      regions: {{names: [region-2, region-3]}}
      maxParallel: 2
"#
        ),
    )
}

impl World {
    fn deployments(&self, region: &str) -> Api<Deployment> {
        Api::namespaced(self.region(region), APP)
    }

    async fn ready_instances(&self, region: &str) -> i32 {
        let deployment = within("read consumer", self.deployments(region).get(CONSUMER)).await;
        deployment
            .status
            .and_then(|status| status.ready_replicas)
            .unwrap_or(0)
    }

    async fn consumer_pods(&self, region: &str) -> BTreeSet<String> {
        let pods: Api<Pod> = Api::namespaced(self.region(region), APP);
        let listed = within(
            "list consumer pods",
            pods.list(&ListParams::default().labels(&format!("app={CONSUMER}"))),
        )
        .await;
        listed
            .items
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .map(|pod| pod.name_any())
            .collect()
    }
}

fn consumer_deployment() -> Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": CONSUMER, "namespace": APP},
        "spec": {
            "replicas": INSTANCES,
            "selector": {"matchLabels": {"app": CONSUMER}},
            "template": {
                "metadata": {"labels": {"app": CONSUMER}},
                // It reads the targets of the rollouts that name it: a workload that
                // does not read a rollout's target is never counted nor restarted.
                "spec": {"containers": [{
                    "name": "api",
                    "image": "registry.invalid/api:1",
                    "envFrom": [
                        {"configMapRef": {"name": "consumed-reload", "optional": true}},
                        {"configMapRef": {"name": "consumed-restart", "optional": true}}
                    ]
                }]}
            }
        }
    }))
    .expect("deployment")
}

/// Status shows every region's consumers at N/N for r1, each lifecycle step stamped in
/// order.
fn assert_counted(rollout: &ConfigRollout) {
    for region in REGIONS {
        let status = region_status(rollout, region).expect("region in status");
        let counts = status.consumers.expect("consumer counts");
        assert_eq!(
            (counts.total, counts.delivered, counts.activated),
            (INSTANCES, INSTANCES, INSTANCES),
            "{region}"
        );
        let at = |mark: &Option<configrollout::api::LifecycleMark>| {
            let mark = mark
                .as_ref()
                .unwrap_or_else(|| panic!("{region}: {status:?}"));
            assert_eq!(mark.revision, "r1");
            mark.at.0
        };
        let (materialized, delivered, activated) = (
            at(&status.materialized),
            at(&status.delivered),
            at(&status.activated),
        );
        assert!(
            materialized <= delivered && delivered <= activated,
            "{status:?}"
        );
    }
}

async fn consumers_are_counted_until_every_instance_has_the_revision(world: &World) {
    for region in REGIONS {
        within(
            "create the consumer Deployment",
            world
                .deployments(region)
                .create(&PostParams::default(), &consumer_deployment()),
        )
        .await;
    }
    for region in REGIONS {
        eventually(
            &format!("{region}: consumer pods ready"),
            PROGRESS,
            || async { (world.ready_instances(region).await == INSTANCES).then_some(()) },
        )
        .await;
    }

    // Reload: the instances reread the ConfigMap; the workloads' consumers report the
    // revision they activated, counted by the activation query.
    let name = "consumed-reload";
    world.consume(name).await;
    let reload = format!(
        "{{kind: Deployment, name: {CONSUMER}, delivery: Reload, activationQuery: '{ACTIVATION_QUERY}'}}"
    );
    world.create_rollout(&consumed_rollout(name, &reload)).await;
    let done = world.wait_complete(name, "r1").await;
    assert_counted(&done);

    // Restart: the controller restarts the Deployment for the revision; its controller
    // replaces every pod; delivered counts the new, ready ones.
    let before: BTreeMap<&str, BTreeSet<String>> = {
        let mut pods = BTreeMap::new();
        for region in REGIONS {
            pods.insert(region, world.consumer_pods(region).await);
        }
        pods
    };
    let name = "consumed-restart";
    let restart = format!("{{kind: Deployment, name: {CONSUMER}, delivery: Restart}}");
    world
        .create_rollout(&consumed_rollout(name, &restart))
        .await;
    let done = world.wait_complete(name, "r1").await;
    assert_counted(&done);
    for region in REGIONS {
        let deployment = within("read consumer", world.deployments(region).get(CONSUMER)).await;
        let marker = deployment
            .spec
            .and_then(|spec| spec.template.metadata)
            .and_then(|meta| meta.annotations)
            .and_then(|annotations| annotations.get("configrollout.dev/restarted-for").cloned());
        assert_eq!(marker.as_deref(), Some("r1/Single"), "{region}");
        let replaced = eventually(&format!("{region}: old pods gone"), PROGRESS, || async {
            let now = world.consumer_pods(region).await;
            (now.len() == INSTANCES as usize).then_some(now)
        })
        .await;
        assert!(
            replaced.is_disjoint(&before[region]),
            "{region}: every pod was replaced: before {:?}, after {replaced:?}",
            before[region]
        );
    }

    // A consumer named but absent holds the stage rather than passing it unseen.
    let name = "consumed-missing";
    let missing = "{kind: Deployment, name: not-deployed, delivery: Reload}";
    world.create_rollout(&consumed_rollout(name, missing)).await;
    let held = eventually(
        "the canary reports the missing consumer",
        PROGRESS,
        || async {
            let rollout = world.rollout(name).await;
            let canary = region_status(&rollout, "region-1")?.clone();
            canary
                .last_error
                .as_deref()
                .is_some_and(|error| error.contains("not-deployed"))
                .then_some(rollout)
        },
    )
    .await;
    assert!(region_status(&held, "region-1").is_some_and(|r| r.delivered.is_none()));
    assert_eq!(world.target_data("region-2", name).await, None);
}

/// `--gate-settle-time` of the controller of [`a_gate_waits_for_a_workload_that_loads_the_value_late`]:
/// long enough for its late-loading workload (3 s after the write) to fail requests
/// visibly (two or three scrapes) with room to spare on two busy cores.
const LATE_LOAD_SETTLE_TIME: &str = "15s";
/// How long after the write region-1's workload loads the value in that scenario.
const LATE_LOAD_AFTER: Duration = Duration::from_secs(3);

/// The issue's default gate (one sample, no initialDelay) on the canary of a rollout
/// that declares no consumers; prod is not gated.
fn late_loading_rollout(name: &str, timeout_ms: &str) -> String {
    rollout_yaml(
        name,
        &format!(
            r#"
  onFailure: Rollback
  data:
    timeout_ms: "{timeout_ms}"
    banner: "{BANNER}"
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      condition: result < 0.1
      interval: 2s
  stages:
    - name: canary
      regions: {{names: [region-1]}}
      gates: [errors]
    - name: prod
      regions: {{names: [region-2, region-3]}}
      maxParallel: 2
"#
        ),
    )
}

/// A gate against a workload that fails only once it loads the value, and loads it
/// seconds after the write (as one rereading a mounted file would): the window opens
/// only after the settle time, so its sample sees the failures and the canary is rolled
/// back, prod never written; then every region runs the value status says.
async fn a_gate_waits_for_a_workload_that_loads_the_value_late(world: &World) {
    let name = "late-load";
    world.consume(name).await;
    world
        .create_rollout(&late_loading_rollout(name, GOOD_TIMEOUT))
        .await;
    let r1 = world.wait_complete(name, "r1").await;
    world.assert_good_everywhere(name).await;
    let canary = &stage(&r1, "canary").gates[0];
    let opens = canary.opens_at.as_ref().expect("opensAt").0.as_second();
    let verified = stage(&r1, "canary")
        .verified_at
        .as_ref()
        .expect("verifiedAt")
        .0
        .as_second();
    assert!(
        opens - verified >= 14,
        "r1's window opened {}s after the canary was verified, not the settle time",
        opens - verified
    );

    // region-1's workload looks elsewhere for now: it will load r2 late.
    within(
        "point region-1's workload away",
        world
            .lab
            .watch_config("region-1", APP, "late-load-elsewhere"),
    )
    .await;
    let prod = WriteCounter::start_in(world, &["region-2", "region-3"], name).await;
    world.set_timeout(name, BAD_TIMEOUT).await;
    eventually("region-1 holds r2", PROGRESS, || async {
        (world.timeout_in("region-1", name).await.as_deref() == Some(BAD_TIMEOUT)).then_some(())
    })
    .await;
    tokio::time::sleep(LATE_LOAD_AFTER).await;
    // The canary is still verifying, its gate having judged nothing yet.
    let before_load = world.rollout(name).await;
    let canary = stage(&before_load, "canary");
    assert!(
        matches!(
            canary.state,
            StageState::Progressing | StageState::Verifying
        ) && canary.gates.iter().all(|gate| gate.samples.is_empty()),
        "the gate judged before the workload loaded the value: {canary:?}"
    );
    let loaded_at = k8s_openapi::jiff::Timestamp::now().as_second();
    within(
        "region-1's workload loads the target",
        world.lab.watch_config("region-1", APP, name),
    )
    .await;

    let rolled_back = world.wait_phase(name, "RolledBack", PROGRESS).await;
    assert_canary_gate_failed(&rolled_back);
    let window = &stage(&rolled_back, "canary").gates[0];
    let opens = window.opens_at.as_ref().expect("opensAt").0.as_second();
    assert!(
        opens >= loaded_at,
        "the window opened before the load: {window:?}"
    );
    let failed = window
        .samples
        .iter()
        .find(|sample| sample.verdict == SampleVerdict::Failed)
        .expect("the failing sample is in status");
    assert!(failed.at.0.as_second() >= opens, "{window:?}");
    assert_eq!(
        (window.successes, window.failures),
        (0, 1),
        "the first sample judged the loaded value: {window:?}"
    );
    for (region, counter) in ["region-2", "region-3"].iter().zip(&prod) {
        assert_eq!(counter.writes(), 0, "{region} never received r2");
    }

    // Every region runs what status says is live: r1's value, whose keyed digest the
    // history records, in the target its workload loaded last.
    let r1_digest = rolled_back
        .status
        .as_ref()
        .and_then(|status| status.history.iter().find(|record| record.name == "r1"))
        .and_then(|record| record.digest.clone())
        .expect("r1's digest in history");
    for region in REGIONS {
        let (target_digest, target_revision) = eventually(
            &format!("{region}: the workload runs what the region holds"),
            PROGRESS,
            || async {
                let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
                    Api::namespaced(world.region(region), APP);
                let target = within("read target", api.get(name)).await;
                let annotations = target.metadata.annotations.unwrap_or_default();
                let revision = annotations.get("configrollout.dev/revision")?.clone();
                let digest = annotations.get("configrollout.dev/digest")?.clone();
                let history = within("config history", world.lab.config_history(region)).await;
                let last = history.last()?;
                (last.present && last.valid && last.revision == revision)
                    .then_some((digest, revision))
            },
        )
        .await;
        assert_eq!(
            target_digest, r1_digest,
            "{region} ({target_revision}) holds r1's value, as status says"
        );
        assert_eq!(
            world.timeout_in(region, name).await.as_deref(),
            Some(GOOD_TIMEOUT),
            "{region}"
        );
    }
    eventually("the canary's error ratio falls", PROGRESS, || async {
        world
            .error_ratio("region-1")
            .await
            .filter(|ratio| *ratio < 0.1)
    })
    .await;
}

async fn no_value_leaves_the_regions(world: &World, metrics_url: &str) {
    let haystacks = observable_output(world, metrics_url).await;
    assert!(
        haystacks[0].1.contains("configrollout_gate_samples_total"),
        "the controller's real metrics:\n{}",
        haystacks[0].1
    );
    assert!(
        haystacks
            .iter()
            .any(|(place, text)| place == "events" && text.contains("GateFailed")),
        "gate failures are recorded as events"
    );
    for (place, text) in &haystacks {
        assert!(
            !text.contains(BANNER),
            "a configuration value leaked into {place}"
        );
    }
}

impl World {
    /// Waits until the rollout's status names `revision` in `phase`.
    async fn wait_revision_phase(&self, name: &str, revision: &str, phase: &str) -> ConfigRollout {
        eventually(&format!("{name}: {revision} {phase}"), PROGRESS, || async {
            let rollout = self.rollout(name).await;
            let current = rollout.status.as_ref()?.revision.as_deref() == Some(revision);
            (current && phase_of(&rollout).as_deref() == Some(phase)).then_some(rollout)
        })
        .await
    }

    async fn assert_timeout_everywhere(&self, name: &str, timeout_ms: &str) {
        for region in REGIONS {
            assert_eq!(
                self.timeout_in(region, name).await.as_deref(),
                Some(timeout_ms),
                "{region}"
            );
        }
    }

    /// Waits until `region`'s error ratio (over the last seconds) is below `ratio`: a
    /// gate sampled right after a bad spell still sees it.
    async fn wait_error_ratio_below(&self, region: &str, ratio: f64) {
        eventually(
            &format!("{region}'s error ratio falls"),
            PROGRESS,
            || async {
                self.error_ratio(region)
                    .await
                    .filter(|current| *current < ratio)
            },
        )
        .await;
    }

    async fn set_error_rate(&self, region: &str, ratio: f64) {
        within(
            "set the workload's error rate",
            self.lab.set_error_rate(region, ratio),
        )
        .await;
    }

    /// Sets the tier label of a Region, as a platform admin relabelling it would.
    async fn relabel(&self, region: &str, tier: &str) {
        let regions: Api<configrollout::api::Region> = Api::all(self.hub.clone());
        let patch =
            serde_json::json!({"metadata": {"labels": {configrollout_e2e::TIER_LABEL: tier}}});
        within(
            "relabel the Region",
            regions.patch(region, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
    }
}

/// A bad week on one target (the first two traces of the issue): r1 good; r2 bad,
/// caught in the canary and rolled back; r3, a fix, passes the canary and fails in prod
/// (region-2's error ratio raised by hand, a regional incident), and its rollback
/// restores r1's value everywhere, never r2's rejected one; r4 declares the rejected
/// value again with a new key: the canary really gets it, its gate fails on it, and prod
/// never sees it.
async fn a_rollback_after_a_rollback_restores_the_last_complete_value(world: &World) {
    let name = "timeouts-week";
    complete_with_good_value(world, name, &Shape::failing_fast("Rollback")).await;

    world.set_timeout(name, BAD_TIMEOUT).await;
    world.wait_revision_phase(name, "r2", "RolledBack").await;
    world.assert_timeout_everywhere(name, GOOD_TIMEOUT).await;
    world.wait_error_ratio_below("region-1", 0.1).await;

    world.set_timeout(name, "300").await;
    world.set_error_rate("region-2", 0.5).await;
    let rolled_back = world.wait_revision_phase(name, "r3", "RolledBack").await;
    world.set_error_rate("region-2", 0.0).await;
    world.wait_error_ratio_below("region-2", 0.1).await;
    assert_eq!(stage(&rolled_back, "canary").state, StageState::Passed);
    assert_eq!(stage(&rolled_back, "prod").state, StageState::Failed);
    world.assert_timeout_everywhere(name, GOOD_TIMEOUT).await;
    let rolled = condition(&rolled_back, "RolledBack");
    assert!(
        rolled.message.contains("to the values of r1"),
        "{}",
        rolled.message
    );

    let later_stages = WriteCounter::start_in(world, &["region-2", "region-3"], name).await;
    world
        .change_data(
            name,
            serde_json::json!({"timeout_ms": BAD_TIMEOUT, "extra": "1"}),
        )
        .await;
    eventually(
        "the canary runs the rejected value again",
        PROGRESS,
        || async {
            let data = world.target_data("region-1", name).await?;
            (data.get("timeout_ms").map(String::as_str) == Some(BAD_TIMEOUT)).then_some(())
        },
    )
    .await;
    let rolled_back = world.wait_revision_phase(name, "r4", "RolledBack").await;
    assert_canary_gate_failed(&rolled_back);
    for (region, counter) in ["region-2", "region-3"].iter().zip(&later_stages) {
        assert_eq!(counter.writes(), 0, "{region} received r4");
    }
    for region in REGIONS {
        let data = world.target_data(region, name).await.expect("target");
        assert_eq!(
            data.get("timeout_ms").map(String::as_str),
            Some(GOOD_TIMEOUT),
            "{region}"
        );
        assert!(!data.contains_key("extra"), "{region}: {:?}", data.keys());
    }
}

/// A rollback that cannot finish (region-3's API server stops after it took the
/// revision) ends Halted `RollbackIncomplete`, naming the region. A retry resumes the
/// rollback, never the forward pass (nothing is published, and it gives up again while
/// the region stays down); once the region is back, an abort resumes it too, and it ends
/// RolledBack with every region on the last complete value.
async fn retry_and_abort_resume_a_rollback_that_could_not_finish(world: &mut World) {
    let name = "timeouts-stuck";
    let shape = Shape::failing_fast("Rollback");
    world.consume(name).await;
    let yaml = gated_rollout(name, GOOD_TIMEOUT, &shape).replace(
        "  onFailure: Rollback",
        "  onFailure: Rollback\n  progressDeadline: 20s",
    );
    world.create_rollout(&yaml).await;
    world.wait_complete(name, "r1").await;
    // Prod samples a minute from now on: time for region-3 to stop after it took r2,
    // and for region-2's incident to fail the gate, in that order.
    let gate = |name: &str, count: u32| {
        serde_json::json!({"name": name, "query": ERROR_RATIO, "condition": "result < 0.1",
            "interval": "2s", "initialDelay": "4s", "count": count, "failureLimit": 0,
            "inconclusiveLimit": 3})
    };
    let patch = serde_json::json!({"spec": {
        "gates": [gate("errors", shape.count), gate("soak", 30)],
        "stages": [
            {"name": "canary", "regions": {"names": ["region-1"]}, "gates": ["errors"]},
            {"name": "prod", "regions": {"names": ["region-2", "region-3"]}, "maxParallel": 2,
             "gates": ["soak"]},
        ],
    }});
    within(
        "soak prod for a minute",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;

    world.set_timeout(name, "300").await;
    eventually("region-3 takes r2", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let region = region_status(&rollout, "region-3")?;
        (region.materialized.as_ref()?.revision == "r2").then_some(())
    })
    .await;
    world.lab.stop_region("region-3").expect("region-3 stops");
    world.set_error_rate("region-2", 0.5).await;
    let halted = world.wait_revision_phase(name, "r2", "Halted").await;
    world.set_error_rate("region-2", 0.0).await;
    world.wait_error_ratio_below("region-2", 0.1).await;
    let reason = condition(&halted, "Halted");
    assert_eq!(reason.reason, "RollbackIncomplete", "{}", reason.message);
    assert!(reason.message.contains("region-3"), "{}", reason.message);
    assert_eq!(
        world.timeout_in("region-2", name).await.as_deref(),
        Some(GOOD_TIMEOUT)
    );

    let region_2 = WriteCounter::start_in(world, &["region-2"], name).await;
    world
        .run_argo_cd_action(name, "retry", User::Admin, None)
        .await;
    world.wait_revision_phase(name, "r2", "RollingBack").await;
    let halted = world.wait_revision_phase(name, "r2", "Halted").await;
    assert_eq!(condition(&halted, "Halted").reason, "RollbackIncomplete");
    assert_eq!(region_2[0].writes(), 0, "the retry rolled nothing forward");
    assert!(world.has_event(name, "Retried").await);

    world
        .lab
        .start_region("region-3")
        .await
        .expect("region-3 starts again");
    world
        .run_argo_cd_action(name, "abort", User::Admin, None)
        .await;
    world.wait_revision_phase(name, "r2", "RolledBack").await;
    world.assert_timeout_everywhere(name, GOOD_TIMEOUT).await;
}

/// An edit while a removal waits for its contract approval: r2 renames `old_key` to
/// `new_key` and waits, expanded everywhere; r3 changes another key. r3 inherits the
/// removal: `old_key` stays in every region through r3's expand pass, r3's history
/// counts it, and the contract waits for an approval of r3.
async fn an_edit_during_a_contract_wait_keeps_the_removal_and_its_approval(world: &World) {
    let name = "renames-week";
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                r#"
  data:
    old_key: "a"
    timeout_ms: "{GOOD_TIMEOUT}"
  strategy:
    contract: {{approval: Required}}
  stages:
    - name: canary
      regions: {{names: [region-1]}}
    - name: prod
      regions: {{names: [region-2, region-3]}}
      maxParallel: 2
"#
            ),
        ))
        .await;
    world.wait_complete(name, "r1").await;
    world
        .change_data(name, serde_json::json!({"old_key": null, "new_key": "a"}))
        .await;
    world
        .wait_revision_phase(name, "r2", "AwaitingApproval")
        .await;
    world.set_timeout(name, "300").await;
    let waiting = world
        .wait_revision_phase(name, "r3", "AwaitingApproval")
        .await;
    let status = waiting.status.as_ref().expect("status");
    assert_eq!(status.current_stage.as_deref(), Some("contract"));
    let r3 = status
        .history
        .iter()
        .find(|record| record.name == "r3")
        .expect("r3");
    assert_eq!(r3.keys_removed, 1, "r3 counts the removal it inherited");
    for region in REGIONS {
        let data = world.target_data(region, name).await.expect("target");
        assert_eq!(
            data.get("old_key").map(String::as_str),
            Some("a"),
            "{region}"
        );
        assert_eq!(
            data.get("new_key").map(String::as_str),
            Some("a"),
            "{region}"
        );
        assert_eq!(
            data.get("timeout_ms").map(String::as_str),
            Some("300"),
            "{region}"
        );
    }
    world
        .approve(User::ApproverAlice, name, "contract", "r3")
        .await;
    world.wait_complete(name, "r3").await;
    for region in REGIONS {
        let data = world.target_data(region, name).await.expect("target");
        assert!(!data.contains_key("old_key"), "{region}: {:?}", data.keys());
    }
}

/// A region relabelled out of a stage's selector after a revision reached it is still
/// rolled back: the rollback covers every region the revision reached.
async fn a_region_that_left_the_stages_is_rolled_back_too(world: &World) {
    let name = "timeouts-relabel";
    world.consume(name).await;
    let stages = |pause: &str| {
        format!(
            r#"
  stages:
    - name: canary
      regions: {{names: [region-1]}}
    - name: prod
      regions: {{selector: {{matchLabels: {{{}: production}}}}}}
      maxParallel: 2{pause}
"#,
            configrollout_e2e::TIER_LABEL
        )
    };
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                "  data:\n    timeout_ms: \"{GOOD_TIMEOUT}\"\n{}",
                stages("")
            ),
        ))
        .await;
    world.wait_complete(name, "r1").await;
    // r2 bakes a minute in prod: time to relabel region-3 and abort.
    let patch = serde_json::json!({"spec": {
        "data": {"timeout_ms": "300"},
        "stages": [
            {"name": "canary", "regions": {"names": ["region-1"]}},
            {"name": "prod", "regions": {"selector": {"matchLabels": {configrollout_e2e::TIER_LABEL: "production"}}},
             "maxParallel": 2, "pause": {"duration": "1m"}},
        ],
    }});
    within(
        "change data and bake time",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
    eventually("prod bakes r2", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let current = rollout.status.as_ref()?.revision.as_deref() == Some("r2");
        (current && stage(&rollout, "prod").state == StageState::Baking).then_some(())
    })
    .await;
    world.relabel("region-3", "retired").await;
    eventually("region-3 leaves the plan", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        region_status(&rollout, "region-3").is_none().then_some(())
    })
    .await;
    assert!(world.has_event(name, "RegionLeftPlan").await);
    world
        .run_argo_cd_action(name, "abort", User::Admin, None)
        .await;
    world.wait_revision_phase(name, "r2", "RolledBack").await;
    world.relabel("region-3", "production").await;
    world.assert_timeout_everywhere(name, GOOD_TIMEOUT).await;
}

/// A rollout's target cannot change: the apiserver refuses it, naming the field.
async fn a_retarget_is_refused_at_apply(world: &World) {
    let patch = serde_json::json!({"spec": {"target": {"name": "somewhere-else"}}});
    let refused = tokio::time::timeout(
        CALL,
        world.rollouts().patch(
            "timeouts-week",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        ),
    )
    .await
    .expect("the hub answers")
    .expect_err("a new target is refused");
    assert!(
        refused.to_string().contains("spec.target is immutable"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gates_on_the_lab() {
    configrollout_e2e::gitops::ensure_built().expect("gitops-health builds");
    let mut world = World::start(LabOptions {
        workload_controllers: true,
        ..LabOptions::default()
    })
    .await;
    world
        .lab
        .install_approver_policy()
        .await
        .expect("install the approver policy");
    let probe_addr = free_local_addr();
    let controller = world.start_controller_on("controller-gates", &probe_addr);

    a_bad_value_is_caught_in_the_canary_and_rolled_back(&world).await;
    a_bad_value_halts_where_it_is(&world).await;
    a_dark_prometheus_holds_the_rollout_then_halts_it(&mut world).await;
    partial_answers_are_inconclusive(&mut world).await;
    a_passing_gate_opens_the_next_stage_after_its_window_and_pause(&world).await;
    an_aborted_rollout_is_rolled_back_and_publishes_nothing_more(&world).await;
    an_override_made_during_a_partition_survives_an_older_revision(&world).await;
    a_renamed_key_disappears_only_after_every_region_has_the_new_one(&world).await;
    consumers_are_counted_until_every_instance_has_the_revision(&world).await;
    a_rollback_after_a_rollback_restores_the_last_complete_value(&world).await;
    a_retarget_is_refused_at_apply(&world).await;
    an_edit_during_a_contract_wait_keeps_the_removal_and_its_approval(&world).await;
    a_region_that_left_the_stages_is_rolled_back_too(&world).await;
    retry_and_abort_resume_a_rollback_that_could_not_finish(&mut world).await;
    // A controller with a settle time long enough to tell a late load from none.
    controller.stop();
    let probe_addr = free_local_addr();
    let controller = world.start_controller_with(
        "controller-settle",
        &probe_addr,
        &["--gate-settle-time", LATE_LOAD_SETTLE_TIME],
    );
    a_gate_waits_for_a_workload_that_loads_the_value_late(&world).await;
    no_value_leaves_the_regions(&world, &format!("http://{probe_addr}/metrics")).await;
    controller.stop();
}
