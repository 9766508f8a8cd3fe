//! Issue 33 on real clusters: the people who must act are told. Real HTTP receivers on
//! loopback stand for a Slack channel, a Teams workflow, an audit webhook (HMAC-signed)
//! and a CloudEvents broker that fails twice before it recovers; one more never answers.
//! An awaited approval is announced at once, to every subscribed sink, while the hanging
//! one delays nobody; a failing gate is announced with the halt, the rollback and its
//! end; a controller killed with SIGKILL mid-rollout loses no notice and never sends one
//! under two keys; a tenant cannot subscribe to a sink its grant does not allow, neither
//! at apply nor past the controller; no configuration value is in any body. One lab for
//! the whole binary; the scenarios run in order.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use configrollout::api::{ClusterNotificationSink, ConfigRollout, DeliveryResult};
use configrollout::engine::tenancy::{NOTIFICATION_SINKS, NOTIFY};
use configrollout_e2e::{HUB, LabOptions, SYSTEM_NAMESPACE, User};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use support::*;

/// A configuration value: it must never be in a notification.
const SENTINEL: &str = "SENTINEL-5c0d";
/// The sinks' HMAC key, in a Secret of the controller's namespace.
const HMAC_KEY: &[u8] = b"notification-hmac-key-for-the-lab";
/// The audit webhook's token, sent as a header whose value a Secret holds.
const AUDIT_TOKEN: &str = "Bearer lab-audit-token";
/// How many times the CloudEvents broker answers 500 before it recovers.
const BROKER_FAILURES: usize = 2;
/// Per-region error ratio, as the safety scenarios gate on it.
const ERROR_RATIO: &str = "sum(rate(configrollout_lab_errors_total{region=\"{{region}}\"}[5s])) / sum(rate(configrollout_lab_requests_total{region=\"{{region}}\"}[5s]))";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_people_who_must_act_are_told() {
    let world = World::start(LabOptions {
        regions: 2,
        ..LabOptions::default()
    })
    .await;
    world
        .lab
        .install_approver_policy()
        .await
        .expect("approver policy");
    let receivers = Receivers::start().await;
    set_up_sinks(&world, &receivers).await;
    let probe = free_local_addr();
    let first = world.start_controller_on("controller-notify-a", &probe);

    an_awaited_approval_is_announced_at_once(&world, &receivers).await;
    a_failing_gate_is_announced_until_rolled_back(&world, &receivers).await;
    // For BENCHMARKS.md: how long deliveries took, from the status write that raised
    // each notice to the receiver's answer (printed, never asserted).
    let exposition = scrape(&format!("http://{probe}/metrics")).await;
    for line in exposition
        .lines()
        .filter(|line| line.starts_with("configrollout_notification_latency_seconds"))
    {
        println!("{line}");
    }
    let probe = free_local_addr();
    let second =
        a_killed_controller_loses_and_renames_no_notice(&world, &receivers, first, &probe).await;
    a_sink_outside_the_grant_is_refused(&world, &receivers).await;

    for seen in receivers.all() {
        assert!(
            !String::from_utf8_lossy(&seen.body).contains(SENTINEL),
            "a configuration value reached {}",
            seen.path
        );
    }
    for (place, text) in observable_output(&world, &format!("http://{probe}/metrics")).await {
        assert!(
            !text.contains(SENTINEL),
            "a configuration value reached {place}"
        );
    }
    drop(second);
}

/// The platform's sinks and the team's grant: the team may use chat, teams, broker and
/// hang; the admin subscribed the whole namespace to audit; `forbidden` exists but is
/// not granted.
async fn set_up_sinks(world: &World, receivers: &Receivers) {
    let secrets: Api<Secret> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("notify-hmac".into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "key".to_owned(),
            ByteString(HMAC_KEY.to_vec()),
        )])),
        ..Secret::default()
    };
    within(
        "create the HMAC Secret",
        secrets.create(&PostParams::default(), &secret),
    )
    .await;
    let token = Secret {
        metadata: ObjectMeta {
            name: Some("notify-token".into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "header".to_owned(),
            ByteString(AUDIT_TOKEN.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    within(
        "create the token Secret",
        secrets.create(&PostParams::default(), &token),
    )
    .await;
    let url = |path: &str| format!("http://{}/{path}", receivers.addr);
    let hmac = json!({"name": "notify-hmac", "key": "key"});
    for (name, spec) in [
        ("chat", json!({"type": "Slack", "url": url("chat")})),
        ("teams", json!({"type": "Teams", "url": url("teams")})),
        (
            "audit",
            json!({"type": "Webhook", "url": url("audit"), "hmacSecret": hmac,
                   "headers": [{"name": "Authorization",
                                "valueFrom": {"name": "notify-token", "key": "header"}}],
                   "dashboardUrl": "https://configrollout.example"}),
        ),
        (
            "broker",
            json!({"type": "CloudEvents", "url": url("broker"), "hmacSecret": hmac}),
        ),
        (
            "hang",
            json!({"type": "Webhook", "url": url("hang"), "timeoutSeconds": 2}),
        ),
        (
            "forbidden",
            json!({"type": "Webhook", "url": url("forbidden")}),
        ),
    ] {
        let sink: ClusterNotificationSink = serde_json::from_value(json!({
            "apiVersion": "configrollout.dev/v1alpha1",
            "kind": "ClusterNotificationSink",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .expect("sink");
        let api: Api<ClusterNotificationSink> = Api::all(world.hub.clone());
        within(
            "create sink",
            api.patch(
                name,
                &PatchParams::apply("notifications-test").force(),
                &Patch::Apply(&sink),
            ),
        )
        .await;
    }
    world
        .lab
        .annotate_namespace(
            HUB,
            TEAM,
            &[
                (NOTIFICATION_SINKS, "chat, teams, broker, hang"),
                (NOTIFY, "audit"),
            ],
        )
        .await
        .expect("grant the sinks");
}

/// A stage that waits for its approval is announced to the chat, the Teams workflow and
/// the audit webhook (signed) as soon as it waits, each with the exact command to
/// approve it; the sink that never answers delays neither them nor the rollout.
async fn an_awaited_approval_is_announced_at_once(world: &World, receivers: &Receivers) {
    let name = "approvals";
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                r#"  data: {{rate: "100", banner: "{SENTINEL}"}}
  notifications:
    - {{sink: chat, triggers: [AwaitingApproval, Complete]}}
    - {{sink: teams, triggers: [AwaitingApproval, StillAwaitingApproval], remindAfter: 2s}}
    - {{sink: hang}}
  stages:
    - {{name: canary, regions: {{names: [region-1]}}, approval: Required}}
    - {{name: rest, regions: {{names: [region-2]}}}}
"#
            ),
        ))
        .await;
    let waiting = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    let seen_waiting = Instant::now();
    let uid = waiting.uid().expect("uid");

    let chat = receivers
        .wait_for("chat", PROGRESS, |seen| {
            seen.text()
                .contains("approve approvals -n team --stage canary --revision r1")
        })
        .await;
    println!(
        "AwaitingApproval reached the chat {:?} after the test saw the phase",
        chat.arrived.saturating_duration_since(seen_waiting)
    );
    let slack = chat.json();
    assert!(
        slack["text"]
            .as_str()
            .is_some_and(|text| text.contains("team/approvals")),
        "{slack}"
    );
    assert!(slack["blocks"].is_array(), "a Slack message: {slack}");

    let audit = receivers
        .wait_for("audit", PROGRESS, |seen| {
            seen.json()["rollout"]["name"] == name && seen.json()["trigger"] == "AwaitingApproval"
        })
        .await;
    assert!(
        audit.signature_valid,
        "the audit webhook is signed with the sink's key"
    );
    assert_eq!(
        audit.authorization.as_deref(),
        Some(AUDIT_TOKEN),
        "the sink's header, its value from a Secret"
    );
    let body = audit.json();
    assert_eq!(body["kind"], "RolloutNotification");
    assert_eq!(body["stage"], "canary");
    assert_eq!(body["revision"], "r1");
    assert_eq!(
        audit.idempotency_key.as_deref(),
        body["id"].as_str(),
        "the header and the body carry one key"
    );
    assert!(
        audit
            .idempotency_key
            .as_deref()
            .is_some_and(|key| key.starts_with(&format!("{uid}."))),
        "the key is the rollout's uid and the notice's number"
    );
    assert!(
        body["link"]
            .as_str()
            .is_some_and(|link| link.starts_with("https://configrollout.example/")),
        "{body}"
    );

    let teams = receivers
        .wait_for("teams", PROGRESS, |seen| seen.text().contains("approvals"))
        .await;
    assert_eq!(
        teams.json()["attachments"][0]["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    // The hanging sink was asked too, and its silence held nobody up.
    receivers.wait_for("hang", PROGRESS, |_| true).await;
    // Teams asked to be reminded after 2 s; the chat did not ask.
    receivers
        .wait_for("teams", PROGRESS, |seen| {
            seen.text().contains("still awaits approval")
        })
        .await;
    assert!(
        !receivers
            .at("chat")
            .iter()
            .any(|seen| seen.text().contains("still awaits")),
        "only a subscription with remindAfter is reminded"
    );

    world
        .approve(User::ApproverAlice, name, "canary", "r1")
        .await;
    let started = Instant::now();
    while phase_of(&world.rollout(name).await).as_deref() != Some("Complete") {
        if started.elapsed() > PROGRESS {
            let rollout = world.rollout(name).await;
            panic!(
                "approvals: not Complete: {}",
                serde_json::to_string_pretty(&rollout.status).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    receivers
        .wait_for("chat", PROGRESS, |seen| {
            seen.text().contains("team/approvals") && seen.text().contains("complete")
        })
        .await;
    // The hanging sink is retried, and says so in the status; the others delivered.
    let rollout = eventually("the hanging sink is retried", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let sinks = &rollout.status.as_ref()?.notifications.as_ref()?.sinks;
        let hang = sinks.iter().find(|sink| sink.sink == "hang")?;
        (hang.last_result == Some(DeliveryResult::Retrying)).then_some(rollout)
    })
    .await;
    let book = rollout
        .status
        .and_then(|status| status.notifications)
        .expect("notifications");
    let chat = book.sink("chat").expect("chat subscribed");
    assert_eq!(chat.last_result, Some(DeliveryResult::Delivered));
    let hang = book.sink("hang").expect("hang subscribed");
    assert!(
        hang.message
            .as_deref()
            .is_some_and(|m| m.contains("timed out")),
        "{hang:?}"
    );
    assert!(
        !book.outbox.is_empty(),
        "what the hanging sink is owed stays in the outbox"
    );
}

/// A gate fails in the canary: the namespace's audit sink hears the gate fail, the
/// rollback begin and end, and the broker (which answers 500 twice first) gets the
/// rolled-back CloudEvent once it recovers, under the key it was first tried with. A
/// rollout that halts instead is announced as halted, with the reason.
async fn a_failing_gate_is_announced_until_rolled_back(world: &World, receivers: &Receivers) {
    world
        .lab
        .set_error_rate("region-1", 0.5)
        .await
        .expect("turn the errors up");
    for (name, on_failure) in [("bad-gate", "Rollback"), ("halting", "Halt")] {
        world
            .create_rollout(&rollout_yaml(
                name,
                &format!(
                    r#"  onFailure: {on_failure}
  data: {{rate: "7", banner: "{SENTINEL}"}}
  notifications:
    - {{sink: broker, triggers: [RolledBack, Halted]}}
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      condition: result < 0.1
      interval: 2s
      initialDelay: 2s
      count: 3
      failureLimit: 0
  stages:
    - {{name: canary, regions: {{names: [region-1]}}, gates: [errors]}}
    - {{name: rest, regions: {{names: [region-2]}}}}
"#
                ),
            ))
            .await;
    }
    world.wait_phase("bad-gate", "RolledBack", PROGRESS).await;
    world.wait_phase("halting", "Halted", PROGRESS).await;
    world
        .lab
        .set_error_rate("region-1", 0.0)
        .await
        .expect("turn the errors down");

    let about = |name: &'static str, trigger: &'static str| {
        move |seen: &Seen| {
            seen.json()["rollout"]["name"] == name && seen.json()["trigger"] == trigger
        }
    };
    receivers
        .wait_for("audit", PROGRESS, about("bad-gate", "GateFailing"))
        .await;
    receivers
        .wait_for("audit", PROGRESS, about("bad-gate", "RollingBack"))
        .await;
    receivers
        .wait_for("audit", PROGRESS, about("bad-gate", "RolledBack"))
        .await;
    let halted = receivers
        .wait_for("audit", PROGRESS, about("halting", "Halted"))
        .await;
    assert!(
        halted.json()["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "a halt says why: {}",
        halted.json()
    );
    assert!(
        halted
            .text()
            .contains("kubectl configrollout retry halting -n team"),
        "a halt says how to go on: {}",
        halted.json()
    );

    // The broker: two 500s, then the CloudEvents, each under one key on every attempt.
    let delivered = receivers
        .wait_for("broker", PROGRESS, |seen| {
            seen.answered_ok && seen.json()["type"] == "dev.configrollout.rollout.rolled-back"
        })
        .await;
    let event = delivered.json();
    assert_eq!(event["specversion"], "1.0");
    assert_eq!(event["subject"], "team/bad-gate");
    assert_eq!(event["data"]["trigger"], "RolledBack");
    assert!(delivered.signature_valid);
    // Both notices delivered (the one the broker refused may still wait for its retry)
    // before the refused ones are looked up among the delivered.
    receivers
        .wait_for("broker", PROGRESS, |seen| {
            seen.answered_ok && seen.json()["type"] == "dev.configrollout.rollout.halted"
        })
        .await;
    let broker = receivers.at("broker");
    assert!(
        broker
            .iter()
            .take(BROKER_FAILURES)
            .all(|seen| !seen.answered_ok),
        "the broker failed first"
    );
    for failed in broker.iter().filter(|seen| !seen.answered_ok) {
        let id = failed.json()["id"].clone();
        assert!(
            broker
                .iter()
                .any(|seen| seen.answered_ok && seen.json()["id"] == id),
            "the notice the broker refused ({id}) was delivered once it recovered"
        );
        assert_eq!(failed.idempotency_key.as_deref(), id.as_str());
    }
}

/// The controller is killed with SIGKILL while a rollout is between two stages, and
/// another takes over: the audit sink ends up with every notice of the rollout (each
/// number from the first to the last), and no key ever named two different notices.
async fn a_killed_controller_loses_and_renames_no_notice(
    world: &World,
    receivers: &Receivers,
    controller: configrollout_e2e::LabChild,
    probe: &str,
) -> configrollout_e2e::LabChild {
    let name = "survivor";
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                r#"  data: {{rate: "3", banner: "{SENTINEL}"}}
  stages:
    - {{name: first, regions: {{names: [region-1]}}, pause: {{duration: 4s}}}}
    - {{name: second, regions: {{names: [region-2]}}, pause: {{duration: 4s}}}}
"#
            ),
        ))
        .await;
    // Killed while the first stage bakes: its region holds the revision, the second's
    // does not yet.
    eventually("region-1 holds the revision", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let status = rollout.status?;
        let region = status.regions.iter().find(|r| r.name == "region-1")?;
        region.materialized.as_ref().map(|_| ())
    })
    .await;
    let before = world.rollout(name).await;
    assert_ne!(
        phase_of(&before).as_deref(),
        Some("Complete"),
        "killed mid-rollout"
    );
    controller.kill();
    assert_eq!(
        world.target_data("region-2", name).await,
        None,
        "the second stage had not started"
    );
    let second = world.start_controller_on("controller-notify-b", probe);

    let done = world.wait_phase(name, "Complete", PROGRESS).await;
    receivers
        .wait_for("audit", PROGRESS, |seen| {
            seen.json()["rollout"]["name"] == name && seen.json()["trigger"] == "Complete"
        })
        .await;
    let uid = done.uid().expect("uid");
    let last = eventually("the outbox is delivered", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let book = rollout.status?.notifications?;
        let audit = book.sink("audit")?;
        (audit.delivered_through == book.sequence).then_some(book.sequence)
    })
    .await;
    let mut bodies: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for seen in receivers.at("audit") {
        let body = seen.json();
        let Some(key) = body["id"].as_str() else {
            continue;
        };
        let Some(number) = key.strip_prefix(&format!("{uid}.")) else {
            continue;
        };
        let number: i64 = number.parse().expect("a notice number");
        let mut notice = body.clone();
        // The delivery's own link and hint may be rendered again; the notice is the rest.
        notice.as_object_mut().map(|object| object.remove("action"));
        bodies.entry(number).or_default().insert(notice.to_string());
    }
    assert_eq!(
        bodies.keys().copied().collect::<Vec<_>>(),
        (1..=last).collect::<Vec<_>>(),
        "every notice of the rollout reached the audit sink"
    );
    for (number, versions) in &bodies {
        assert_eq!(
            versions.len(),
            1,
            "notice {number} was sent as different notices: {versions:?}"
        );
    }
    let triggers: Vec<String> = bodies
        .values()
        .filter_map(|versions| versions.iter().next())
        .map(|text| {
            let body: Value = serde_json::from_str(text).expect("json");
            format!(
                "{} {}",
                body["trigger"].as_str().unwrap_or_default(),
                body["stage"].as_str().unwrap_or_default()
            )
        })
        .collect();
    for expected in ["StagePassed first", "StagePassed second"] {
        assert!(
            triggers.iter().any(|trigger| trigger == expected),
            "{expected} in {triggers:?}"
        );
    }
    assert!(
        triggers.iter().any(|t| t.starts_with("Complete")),
        "{triggers:?}"
    );
    second
}

/// A tenant names a sink its grant does not allow: the controller refuses the spec
/// (nothing is written, the sink hears nothing, the admin's audit sink hears of the
/// refusal), and once the shipped policy is installed `kubectl apply` refuses it
/// outright, naming the field.
async fn a_sink_outside_the_grant_is_refused(world: &World, receivers: &Receivers) {
    let name = "sneaky";
    let yaml = rollout_yaml(
        name,
        &format!(
            r#"  data: {{rate: "1", banner: "{SENTINEL}"}}
  notifications:
    - {{sink: forbidden}}
  stages:
    - {{name: only, regions: {{names: [region-1]}}}}
"#
        ),
    );
    world.create_rollout(&yaml).await;
    let refused = world.wait_condition(name, "InvalidSpec", PROGRESS).await;
    let condition = refused
        .status
        .as_ref()
        .and_then(|status| status.true_condition("InvalidSpec"))
        .expect("refused");
    assert!(
        condition.message.contains("spec.notifications[0].sink")
            && condition.message.contains(NOTIFICATION_SINKS),
        "{}",
        condition.message
    );
    assert_eq!(
        world.target_data("region-1", name).await,
        None,
        "nothing written"
    );
    receivers
        .wait_for("audit", PROGRESS, |seen| {
            seen.json()["rollout"]["name"] == name && seen.json()["trigger"] == "SpecRefused"
        })
        .await;
    assert!(
        receivers.at("forbidden").is_empty(),
        "the forbidden sink heard nothing"
    );

    let policy = configrollout_e2e::repository_root().join("policies/rollout-tenancy.yaml");
    world
        .lab
        .apply(HUB, User::Admin, &policy)
        .await
        .expect("install the tenancy policy");
    let mut again: ConfigRollout = serde_saphyr::from_str(&yaml).expect("rollout YAML");
    again.metadata.name = Some("sneaky-2".into());
    let error = eventually("the policy refuses the subscription", PROGRESS, || async {
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        tokio::time::timeout(CALL, world.rollouts().create(&dry_run, &again))
            .await
            .expect("the hub answers")
            .err()
    })
    .await;
    let text = error.to_string();
    assert!(
        text.contains("spec.notifications[].sink") && text.contains("forbidden"),
        "{text}"
    );
    // A granted sink is still admitted.
    let mut granted = again.clone();
    granted.spec.notifications[0].sink = "chat".into();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    within(
        "a granted subscription is admitted",
        world.rollouts().create(&dry_run, &granted),
    )
    .await;
}

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    body: Vec<u8>,
    idempotency_key: Option<String>,
    authorization: Option<String>,
    signature_valid: bool,
    answered_ok: bool,
    arrived: Instant,
}

impl Seen {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// The receivers, behind one loopback HTTP server: `/chat`, `/teams`, `/audit`,
/// `/forbidden` answer 200; `/broker` answers 500 [`BROKER_FAILURES`] times, then 200;
/// `/hang` never answers.
struct Receivers {
    addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receivers {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receivers {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(serve(stream, recorded.clone()));
            }
        });
        Receivers { addr, seen, task }
    }

    fn all(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn at(&self, path: &str) -> Vec<Seen> {
        let path = format!("/{path}");
        self.all()
            .into_iter()
            .filter(|seen| seen.path == path)
            .collect()
    }

    /// The first request to `/path` that `accept` takes, waiting up to `deadline`.
    async fn wait_for(
        &self,
        path: &str,
        deadline: Duration,
        accept: impl Fn(&Seen) -> bool,
    ) -> Seen {
        let accept = &accept;
        eventually(
            &format!("a notification at /{path}"),
            deadline,
            || async move { self.at(path).into_iter().find(|seen| accept(seen)) },
        )
        .await
    }
}

/// Reads each HTTP/1.1 request whole and answers it as its path says.
async fn serve(mut stream: tokio::net::TcpStream, seen: Arc<Mutex<Vec<Seen>>>) {
    while let Some(request) = loopback::read_request(&mut stream).await {
        let status = {
            let mut seen = seen.lock().unwrap();
            let earlier = seen.iter().filter(|s| s.path == request.path).count();
            let status = match request.path.as_str() {
                "/broker" if earlier < BROKER_FAILURES => 500,
                _ => 200,
            };
            seen.push(Seen {
                path: request.path.clone(),
                idempotency_key: request.header("idempotency-key"),
                authorization: request.header("authorization"),
                signature_valid: request.signed_with(HMAC_KEY),
                answered_ok: status == 200 && request.path != "/hang",
                arrived: Instant::now(),
                body: request.body.clone(),
            });
            status
        };
        if request.path == "/hang" {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        if !loopback::answer(&mut stream, status, "{}").await {
            return;
        }
    }
}
