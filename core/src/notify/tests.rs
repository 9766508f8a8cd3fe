use chrono::{SecondsFormat, TimeDelta};
use configrollout_api::DeliveryResult;
use serde_json::{Value, json};

use super::*;
use crate::engine::tenancy::SinkGrant;

use NotificationTrigger::{
    AwaitingApproval, Complete, DriftDetected, GateFailing, GateInconclusive, Halted,
    RegionUnreachable, RolledBack, RollingBack, SpecRefused, StagePassed, StillAwaitingApproval,
};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-03-01T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn minutes(n: i64) -> TimeDelta {
    TimeDelta::minutes(n)
}

fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A condition as the apiserver stores it.
fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    since: DateTime<Utc>,
) -> Value {
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp(since),
    })
}

fn status(value: Value) -> ConfigRolloutStatus {
    serde_json::from_value(value).expect("a ConfigRolloutStatus")
}

fn progressing(revision: &str, stage: &str) -> ConfigRolloutStatus {
    status(json!({
        "phase": "Progressing",
        "revision": revision,
        "currentStage": stage,
        "progress": "1/3",
        "conditions": [condition(
            conditions::PROGRESSING, true, "RolloutProgressing", "progressing", now() - minutes(60),
        )],
    }))
}

fn awaiting(revision: &str, stage: &str, since: DateTime<Utc>) -> ConfigRolloutStatus {
    status(json!({
        "phase": "AwaitingApproval",
        "revision": revision,
        "currentStage": stage,
        "progress": "1/3",
        "conditions": [condition(
            conditions::AWAITING_APPROVAL,
            true,
            "StageApprovalRequired",
            &format!("stage {stage} of {revision} awaits a StageApproval"),
            since,
        )],
    }))
}

fn halted(revision: &str, reason: &str, message: &str) -> ConfigRolloutStatus {
    status(json!({
        "phase": "Halted",
        "revision": revision,
        "currentStage": "canary",
        "progress": "1/3",
        "conditions": [condition(conditions::HALTED, true, reason, message, now())],
    }))
}

fn subscription(
    sink: &str,
    triggers: &[NotificationTrigger],
    remind_after: Option<&str>,
) -> Subscription {
    Subscription {
        sink: sink.to_owned(),
        triggers: triggers.to_vec(),
        remind_after: remind_after.map(str::to_owned),
    }
}

fn delivery(sink: &str, delivered_through: i64) -> SinkDelivery {
    SinkDelivery {
        sink: sink.to_owned(),
        triggers: Vec::new(),
        delivered_through,
        last_result: None,
        last_attempt_at: None,
        message: None,
        given_up: 0,
    }
}

fn notice(sequence: i64, trigger: NotificationTrigger) -> Notice {
    Notice {
        sequence,
        trigger,
        sinks: Vec::new(),
        revision: Some("r1".to_owned()),
        stage: Some("canary".to_owned()),
        subject: None,
        reason: None,
        message: None,
        progress: None,
        at: to_time(now() - minutes(30)),
    }
}

fn triggers_of(found: &[Transition]) -> Vec<NotificationTrigger> {
    found.iter().map(|transition| transition.trigger).collect()
}

fn book(status: &ConfigRolloutStatus) -> &NotificationStatus {
    status.notifications.as_ref().expect("notifications")
}

fn sequences(notices: &[Notice]) -> Vec<i64> {
    notices.iter().map(|notice| notice.sequence).collect()
}

fn owed_to(status: &ConfigRolloutStatus, sink: &str) -> Vec<(i64, NotificationTrigger)> {
    let book = book(status);
    let delivery = book.sink(sink).expect("the sink's record");
    owed(&book.outbox, delivery)
        .map(|notice| (notice.sequence, notice.trigger))
        .collect()
}

/// `previous` with a notification book of `sequence`, `outbox` and `sinks`.
fn with_book(
    mut previous: ConfigRolloutStatus,
    sequence: i64,
    outbox: Vec<Notice>,
    sinks: Vec<SinkDelivery>,
) -> ConfigRolloutStatus {
    previous.notifications = Some(NotificationStatus {
        sequence,
        outbox,
        sinks,
        approval_wait: None,
    });
    previous
}

/// Raises from `previous` to a copy of `current` (with the stored book, as the controller
/// would copy it) and returns the status to write and the wake.
fn raised(
    previous: &ConfigRolloutStatus,
    current: &ConfigRolloutStatus,
    subscriptions: &[Subscription],
    deliveries: &[SinkDelivery],
    now: DateTime<Utc>,
) -> (ConfigRolloutStatus, Option<Duration>) {
    let mut next = current.clone();
    next.notifications.clone_from(&previous.notifications);
    let wake = raise(previous, &mut next, subscriptions, deliveries, now);
    (next, wake)
}

// ---------------------------------------------------------------------------------------
// transitions()
// ---------------------------------------------------------------------------------------

#[test]
fn awaiting_approval_is_announced_once_per_stage_and_revision() {
    let since = now() - minutes(1);
    let before = progressing("r1", "canary");
    let canary = awaiting("r1", "canary", since);

    assert_eq!(
        transitions(&before, &canary),
        [Transition {
            trigger: AwaitingApproval,
            revision: Some("r1".to_owned()),
            stage: Some("canary".to_owned()),
            subject: None,
            reason: Some("StageApprovalRequired".to_owned()),
            message: Some("stage canary of r1 awaits a StageApproval".to_owned()),
        }]
    );
    // Still waiting for the same stage of the same revision: nothing new.
    assert!(transitions(&canary, &canary).is_empty());

    // The next stage waits: announced again.
    let prod = awaiting("r1", "prod", since);
    let found = transitions(&canary, &prod);
    assert_eq!(triggers_of(&found), [AwaitingApproval]);
    assert_eq!(found[0].stage.as_deref(), Some("prod"));

    // A new revision waiting at the same stage: announced again.
    let next_revision = awaiting("r2", "canary", since);
    let found = transitions(&canary, &next_revision);
    assert_eq!(triggers_of(&found), [AwaitingApproval]);
    assert_eq!(found[0].revision.as_deref(), Some("r2"));
}

#[test]
fn halted_rolled_back_and_complete_announce_their_condition_once() {
    for (phase, type_, trigger, reason, message) in [
        (
            "Halted",
            conditions::HALTED,
            Halted,
            "GateFailed",
            "gate errors failed in eu-1",
        ),
        (
            "RolledBack",
            conditions::ROLLED_BACK,
            RolledBack,
            "RolledBack",
            "r2 was reverted in every region it reached, to r1",
        ),
        (
            "Complete",
            conditions::COMPLETE,
            Complete,
            "AllStagesPassed",
            "r2 passed every stage",
        ),
    ] {
        let before = progressing("r2", "prod");
        let entered = status(json!({
            "phase": phase,
            "revision": "r2",
            "currentStage": "prod",
            "conditions": [
                condition(conditions::PROGRESSING, false, phase, "stopped", now()),
                condition(type_, true, reason, message, now()),
            ],
        }));

        assert_eq!(
            transitions(&before, &entered),
            [Transition {
                trigger,
                revision: Some("r2".to_owned()),
                stage: Some("prod".to_owned()),
                subject: None,
                reason: Some(reason.to_owned()),
                message: Some(message.to_owned()),
            }],
            "entering {phase}"
        );
        assert!(
            transitions(&entered, &entered).is_empty(),
            "staying {phase} announces nothing"
        );

        // The same phase reached again by another revision is announced again.
        let mut again = entered.clone();
        again.revision = Some("r3".to_owned());
        assert_eq!(
            triggers_of(&transitions(&entered, &again)),
            [trigger],
            "{phase} on a new revision"
        );
    }
}

/// Rolling back, as the engine writes it (engine/conditions.rs): `Progressing` is
/// *False* with reason `RollingBack`, and `Halted` is True with why it stopped. The
/// notice should say why; it reads the condition only when it is true.
#[test]
fn rolling_back_is_announced_once_with_a_reason() {
    let before = halted("r2", "GateFailed", "gate errors failed in eu-1");
    let rolling_back = status(json!({
        "phase": "RollingBack",
        "revision": "r2",
        "currentStage": "canary",
        "conditions": [
            condition(
                conditions::PROGRESSING,
                false,
                "RollingBack",
                "r2 is RollingBack: 1/3 regions done",
                now(),
            ),
            condition(conditions::HALTED, true, "GateFailed", "gate errors failed in eu-1", now()),
        ],
    }));

    let found = transitions(&before, &rolling_back);
    assert_eq!(triggers_of(&found), [RollingBack]);
    assert!(transitions(&rolling_back, &rolling_back).is_empty());
    assert!(
        found[0].reason.is_some() && found[0].message.is_some(),
        "a RollingBack notice says why: {found:?}"
    );
}

#[test]
fn a_stage_that_passes_is_announced_once() {
    let before = status(json!({
        "phase": "Progressing",
        "revision": "r1",
        "currentStage": "canary",
        "stages": [{"name": "canary", "state": "Baking"}, {"name": "prod", "state": "Pending"}],
    }));
    let passed = status(json!({
        "phase": "Progressing",
        "revision": "r1",
        "currentStage": "prod",
        "stages": [{"name": "canary", "state": "Passed"}, {"name": "prod", "state": "Progressing"}],
    }));

    assert_eq!(
        transitions(&before, &passed),
        [Transition {
            trigger: StagePassed,
            revision: Some("r1".to_owned()),
            stage: Some("canary".to_owned()),
            subject: None,
            reason: Some("StagePassed".to_owned()),
            message: Some("stage canary passed".to_owned()),
        }]
    );
    assert!(transitions(&passed, &passed).is_empty());
}

#[test]
fn a_passed_stage_of_a_new_revision_counts() {
    let old = status(json!({
        "phase": "Complete",
        "revision": "r1",
        "stages": [{"name": "canary", "state": "Passed"}],
    }));
    let new = status(json!({
        "phase": "Progressing",
        "revision": "r2",
        "stages": [{"name": "canary", "state": "Passed"}],
    }));

    let found = transitions(&old, &new);
    assert_eq!(triggers_of(&found), [StagePassed]);
    assert_eq!(found[0].revision.as_deref(), Some("r2"));
}

fn with_gate(revision: &str, gate: Value) -> ConfigRolloutStatus {
    status(json!({
        "phase": "Progressing",
        "revision": revision,
        "currentStage": "canary",
        "stages": [{"name": "canary", "state": "Verifying", "gates": [gate]}],
    }))
}

fn sample(verdict: &str, message: Option<&str>) -> Value {
    json!({"at": stamp(now()), "verdict": verdict, "message": message})
}

#[test]
fn a_gate_that_fails_is_announced_once() {
    let running = with_gate(
        "r1",
        json!({"name": "errors", "region": "eu-1", "verdict": "Running", "successes": 3}),
    );
    let failed = with_gate(
        "r1",
        json!({
            "name": "errors", "region": "eu-1", "verdict": "Failed",
            "successes": 3, "failures": 2, "inconclusives": 1,
            "samples": [sample("Failed", Some("0.2 > 0.1"))],
        }),
    );

    assert_eq!(
        transitions(&running, &failed),
        [Transition {
            trigger: GateFailing,
            revision: Some("r1".to_owned()),
            stage: Some("canary".to_owned()),
            subject: Some("errors in eu-1".to_owned()),
            reason: Some("GateFailed".to_owned()),
            message: Some("gate errors failed: 2 failed, 1 inconclusive of 6 samples".to_owned()),
        }]
    );
    assert!(transitions(&failed, &failed).is_empty());

    // A stage-wide gate is named alone; failing on an inconclusive sample is a failure,
    // not also an inconclusive.
    let stage_wide = with_gate(
        "r1",
        json!({
            "name": "latency", "verdict": "Failed", "inconclusives": 3,
            "samples": [sample("Inconclusive", Some("no data"))],
        }),
    );
    let found = transitions(&progressing("r1", "canary"), &stage_wide);
    assert_eq!(triggers_of(&found), [GateFailing]);
    assert_eq!(found[0].subject.as_deref(), Some("latency"));
}

#[test]
fn a_gate_that_cannot_decide_is_announced_once() {
    let running = with_gate(
        "r1",
        json!({"name": "errors", "verdict": "Running", "samples": [sample("Successful", None)]}),
    );
    let inconclusive = with_gate(
        "r1",
        json!({
            "name": "errors", "verdict": "Running",
            "samples": [sample("Successful", None), sample("Inconclusive", Some("no data"))],
        }),
    );

    assert_eq!(
        transitions(&running, &inconclusive),
        [Transition {
            trigger: GateInconclusive,
            revision: Some("r1".to_owned()),
            stage: Some("canary".to_owned()),
            subject: Some("errors".to_owned()),
            reason: Some("GateInconclusive".to_owned()),
            message: Some("no data".to_owned()),
        }]
    );

    // Another undecided sample (a query error now) is the same episode: nothing.
    let error = with_gate(
        "r1",
        json!({
            "name": "errors", "verdict": "Running",
            "samples": [sample("Inconclusive", Some("no data")), sample("Error", None)],
        }),
    );
    assert!(transitions(&inconclusive, &error).is_empty());

    // A query error after a decided sample is announced, with a message of its own when
    // the sample has none.
    let found = transitions(&running, &error);
    assert_eq!(triggers_of(&found), [GateInconclusive]);
    assert_eq!(
        found[0].message.as_deref(),
        Some("gate errors could not decide")
    );
}

#[test]
fn a_region_that_stops_answering_is_announced_once() {
    let reachable = status(json!({
        "phase": "Progressing",
        "revision": "r1",
        "regions": [
            {"name": "eu-1", "stage": "canary", "reachable": true},
            {"name": "us-1", "stage": "prod"},
        ],
    }));
    let unreachable = status(json!({
        "phase": "Progressing",
        "revision": "r1",
        "regions": [
            {"name": "eu-1", "stage": "canary", "reachable": false, "lastError": "connection refused"},
            {"name": "us-1", "stage": "prod"},
        ],
    }));

    assert_eq!(
        transitions(&reachable, &unreachable),
        [Transition {
            trigger: RegionUnreachable,
            revision: Some("r1".to_owned()),
            stage: Some("canary".to_owned()),
            subject: Some("eu-1".to_owned()),
            reason: Some("RegionUnreachable".to_owned()),
            message: Some("connection refused".to_owned()),
        }]
    );
    assert!(transitions(&unreachable, &unreachable).is_empty());
    // Back again: nothing to announce.
    assert!(transitions(&unreachable, &reachable).is_empty());
}

fn with_condition(type_: &str, status_: bool, reason: &str, message: &str) -> ConfigRolloutStatus {
    status(json!({
        "phase": "Complete",
        "revision": "r1",
        "conditions": [condition(type_, status_, reason, message, now())],
    }))
}

#[test]
fn drift_is_announced_when_it_starts() {
    let clean = with_condition(conditions::DRIFTED, false, "NoDrift", "");
    let drifted = with_condition(
        conditions::DRIFTED,
        true,
        "LiveValuesDiffer",
        "2 keys drifted in eu-1",
    );

    assert_eq!(
        transitions(&clean, &drifted),
        [Transition {
            trigger: DriftDetected,
            revision: Some("r1".to_owned()),
            stage: None,
            subject: None,
            reason: Some("LiveValuesDiffer".to_owned()),
            message: Some("2 keys drifted in eu-1".to_owned()),
        }]
    );
    assert!(transitions(&drifted, &drifted).is_empty());
    assert!(transitions(&drifted, &clean).is_empty());
}

#[test]
fn a_refused_spec_is_announced_and_again_when_the_refusal_changes() {
    let valid = with_condition(conditions::INVALID_SPEC, false, "Valid", "");
    let refused = with_condition(
        conditions::INVALID_SPEC,
        true,
        "InvalidSpec",
        "spec.stages[0].regions: empty",
    );

    assert_eq!(
        transitions(&valid, &refused),
        [Transition {
            trigger: SpecRefused,
            revision: Some("r1".to_owned()),
            stage: None,
            subject: None,
            reason: Some("InvalidSpec".to_owned()),
            message: Some("spec.stages[0].regions: empty".to_owned()),
        }]
    );
    assert!(transitions(&refused, &refused).is_empty());

    let refused_otherwise = with_condition(
        conditions::INVALID_SPEC,
        true,
        "InvalidSpec",
        "spec.target.name: may not change",
    );
    let found = transitions(&refused, &refused_otherwise);
    assert_eq!(triggers_of(&found), [SpecRefused]);
    assert_eq!(
        found[0].message.as_deref(),
        Some("spec.target.name: may not change")
    );
}

#[test]
fn transitions_come_in_a_stable_order() {
    let before = status(json!({
        "phase": "Progressing",
        "revision": "r1",
        "stages": [{"name": "canary", "state": "Baking", "gates": [{"name": "errors", "verdict": "Running"}]}],
        "regions": [{"name": "eu-1", "reachable": true}],
    }));
    let after = status(json!({
        "phase": "Halted",
        "revision": "r1",
        "stages": [{"name": "canary", "state": "Passed", "gates": [{"name": "errors", "verdict": "Failed"}]}],
        "regions": [{"name": "eu-1", "reachable": false}],
        "conditions": [
            condition(conditions::HALTED, true, "GateFailed", "gate errors failed", now()),
            condition(conditions::DRIFTED, true, "LiveValuesDiffer", "drift", now()),
            condition(conditions::INVALID_SPEC, true, "InvalidSpec", "bad", now()),
        ],
    }));

    assert_eq!(
        triggers_of(&transitions(&before, &after)),
        [
            Halted,
            StagePassed,
            GateFailing,
            RegionUnreachable,
            DriftDetected,
            SpecRefused
        ]
    );
}

// ---------------------------------------------------------------------------------------
// raise()
// ---------------------------------------------------------------------------------------

#[test]
fn without_subscriptions_nothing_is_kept_but_the_sequence() {
    let halt = halted("r1", "GateFailed", "gate errors failed");

    let (next, wake) = raised(&progressing("r1", "canary"), &halt, &[], &[], now());
    assert_eq!(next.notifications, None);
    assert_eq!(wake, None);

    // Once notices were numbered, the number is kept (and nothing else), so that a later
    // subscription never reuses a key a receiver saw.
    let previous = with_book(
        progressing("r1", "canary"),
        4,
        vec![notice(4, StagePassed)],
        vec![delivery("team-slack", 3)],
    );
    let (next, _) = raised(&previous, &halt, &[], &[], now());
    assert_eq!(
        next.notifications,
        Some(NotificationStatus {
            sequence: 4,
            ..NotificationStatus::default()
        })
    );

    // Subscribed again later: the next notice takes 5, not 1.
    let (next, _) = raised(
        &next,
        &halted("r2", "GateFailed", "again"),
        &[subscription("team-slack", &[], None)],
        &[],
        now(),
    );
    assert_eq!(sequences(&book(&next).outbox), [5]);
}

#[test]
fn a_new_subscription_is_owed_only_what_happens_from_now_on() {
    let previous = with_book(
        progressing("r1", "canary"),
        7,
        vec![notice(6, StagePassed), notice(7, GateFailing)],
        vec![delivery("old", 5)],
    );
    let subscriptions = [
        subscription("old", &[], None),
        subscription("new", &[], None),
    ];

    let (next, _) = raised(&previous, &previous, &subscriptions, &[], now());
    let book = book(&next);
    assert_eq!(book.sink("new").map(|sink| sink.delivered_through), Some(7));
    assert_eq!(owed_to(&next, "new"), []);
    assert_eq!(owed_to(&next, "old"), [(6, StagePassed), (7, GateFailing)]);

    // What happens in the very write that subscribes it is owed to it.
    let (next, _) = raised(
        &previous,
        &halted("r1", "GateFailed", "gate errors failed"),
        &subscriptions,
        &[],
        now(),
    );
    assert_eq!(owed_to(&next, "new"), [(8, Halted)]);
}

#[test]
fn notices_take_the_next_numbers_in_order() {
    let previous = with_book(
        status(json!({
            "phase": "Progressing",
            "revision": "r1",
            "currentStage": "canary",
            "stages": [{"name": "canary", "state": "Baking"}],
            "regions": [{"name": "eu-1", "stage": "canary", "reachable": true}],
        })),
        3,
        Vec::new(),
        vec![delivery("team-slack", 3)],
    );
    let current = status(json!({
        "phase": "Halted",
        "revision": "r1",
        "currentStage": "canary",
        "progress": "1/3",
        "stages": [{"name": "canary", "state": "Passed"}],
        "regions": [{"name": "eu-1", "stage": "canary", "reachable": false}],
        "conditions": [condition(conditions::HALTED, true, "RegionFailed", "eu-1 failed", now())],
    }));

    let (next, wake) = raised(
        &previous,
        &current,
        &[subscription("team-slack", &[], None)],
        &[],
        now(),
    );
    assert_eq!(wake, None);
    let book = book(&next);
    assert_eq!(book.sequence, 6);
    let outbox: Vec<_> = book
        .outbox
        .iter()
        .map(|notice| (notice.sequence, notice.trigger))
        .collect();
    assert_eq!(
        outbox,
        [(4, Halted), (5, StagePassed), (6, RegionUnreachable)]
    );
    let halt = &book.outbox[0];
    assert_eq!(halt.revision.as_deref(), Some("r1"));
    assert_eq!(halt.stage.as_deref(), Some("canary"));
    assert_eq!(halt.reason.as_deref(), Some("RegionFailed"));
    assert_eq!(halt.message.as_deref(), Some("eu-1 failed"));
    assert_eq!(halt.progress.as_deref(), Some("1/3"));
    assert_eq!(halt.at, to_time(now()));
}

#[test]
fn a_notice_nobody_wants_is_not_raised_and_takes_no_number() {
    let subscriptions = [subscription("pager", &[Halted], None)];
    let previous = with_book(
        status(json!({
            "phase": "Progressing",
            "revision": "r1",
            "stages": [{"name": "canary", "state": "Baking"}],
        })),
        3,
        Vec::new(),
        vec![delivery("pager", 3)],
    );
    let passed = status(json!({
        "phase": "Progressing",
        "revision": "r1",
        "stages": [{"name": "canary", "state": "Passed"}],
    }));

    let (next, _) = raised(&previous, &passed, &subscriptions, &[], now());
    assert_eq!(book(&next).sequence, 3);
    assert!(book(&next).outbox.is_empty());

    let mut passed_and_halted = passed.clone();
    passed_and_halted.phase = Some(RolloutPhase::Halted);
    let (next, _) = raised(&previous, &passed_and_halted, &subscriptions, &[], now());
    assert_eq!(book(&next).sequence, 4);
    assert_eq!(owed_to(&next, "pager"), [(4, Halted)]);
}

#[test]
fn each_sink_is_owed_the_triggers_it_subscribed_to() {
    let previous = with_book(
        status(json!({
            "phase": "Progressing",
            "revision": "r1",
            "stages": [{"name": "canary", "state": "Baking"}],
        })),
        0,
        Vec::new(),
        vec![
            delivery("pager", 0),
            SinkDelivery {
                triggers: vec![Complete],
                ..delivery("chat", 0)
            },
        ],
    );
    let current = status(json!({
        "phase": "Halted",
        "revision": "r1",
        "stages": [{"name": "canary", "state": "Passed"}],
    }));
    // chat's subscription changed since the last write: its record follows it.
    let subscriptions = [
        subscription("pager", &[Halted], None),
        subscription("chat", &[StagePassed], None),
    ];

    let (next, _) = raised(&previous, &current, &subscriptions, &[], now());
    assert_eq!(owed_to(&next, "pager"), [(1, Halted)]);
    assert_eq!(owed_to(&next, "chat"), [(2, StagePassed)]);
    assert_eq!(
        book(&next).sink("chat").map(|sink| sink.triggers.clone()),
        Some(vec![StagePassed])
    );
}

#[test]
fn deliveries_are_merged_by_the_furthest_and_the_latest_attempt() {
    let earlier = Some(to_time(now() - minutes(2)));
    let later = Some(to_time(now() - minutes(1)));
    let stored = SinkDelivery {
        last_result: Some(DeliveryResult::Retrying),
        last_attempt_at: later,
        message: Some("timeout".to_owned()),
        given_up: 2,
        ..delivery("chat", 5)
    };
    let outbox: Vec<_> = (3..=8)
        .map(|sequence| notice(sequence, StagePassed))
        .collect();
    let previous = with_book(progressing("r1", "canary"), 8, outbox, vec![stored]);
    let subscriptions = [subscription("chat", &[], None)];

    // An older report from the sender (it delivered through 4 at the earlier attempt):
    // the stored record is further and later.
    let stale = SinkDelivery {
        last_result: Some(DeliveryResult::Delivered),
        last_attempt_at: earlier,
        ..delivery("chat", 4)
    };
    let (next, _) = raised(&previous, &previous, &subscriptions, &[stale], now());
    let chat = book(&next).sink("chat").unwrap();
    assert_eq!(chat.delivered_through, 5);
    assert_eq!(chat.last_result, Some(DeliveryResult::Retrying));
    assert_eq!(chat.message.as_deref(), Some("timeout"));
    assert_eq!(chat.given_up, 2);
    assert_eq!(sequences(&book(&next).outbox), [6, 7, 8]);

    // A later attempt: its result wins, and how far it got.
    let fresh = SinkDelivery {
        last_result: Some(DeliveryResult::Delivered),
        last_attempt_at: Some(to_time(now())),
        ..delivery("chat", 7)
    };
    let (next, _) = raised(&previous, &previous, &subscriptions, &[fresh], now());
    let chat = book(&next).sink("chat").unwrap();
    assert_eq!(chat.delivered_through, 7);
    assert_eq!(chat.last_result, Some(DeliveryResult::Delivered));
    assert_eq!(chat.message, None);
    assert_eq!(chat.given_up, 2, "given up counts never go back");
    assert_eq!(sequences(&book(&next).outbox), [8]);

    // A later attempt that got less far (a reordered report) never takes back delivery.
    let behind = SinkDelivery {
        last_result: Some(DeliveryResult::GaveUp),
        last_attempt_at: Some(to_time(now())),
        given_up: 3,
        ..delivery("chat", 1)
    };
    let (next, _) = raised(&previous, &previous, &subscriptions, &[behind], now());
    let chat = book(&next).sink("chat").unwrap();
    assert_eq!(chat.delivered_through, 5);
    assert_eq!(chat.last_result, Some(DeliveryResult::GaveUp));
    assert_eq!(chat.given_up, 3);
}

#[test]
fn delivered_notices_leave_the_outbox() {
    let previous = with_book(
        progressing("r1", "canary"),
        3,
        vec![
            notice(1, StagePassed),
            notice(2, Halted),
            notice(3, StagePassed),
        ],
        vec![
            delivery("chat", 0),
            SinkDelivery {
                triggers: vec![Halted],
                ..delivery("pager", 0)
            },
        ],
    );
    let subscriptions = [
        subscription("chat", &[], None),
        subscription("pager", &[Halted], None),
    ];

    // chat has everything; pager still waits for 2. Notice 3 is for chat only.
    let (next, _) = raised(
        &previous,
        &previous,
        &subscriptions,
        &[delivery("chat", 3), delivery("pager", 1)],
        now(),
    );
    assert_eq!(sequences(&book(&next).outbox), [2]);
    assert_eq!(book(&next).sequence, 3);

    let (next, _) = raised(&next, &next, &subscriptions, &[delivery("pager", 3)], now());
    assert!(book(&next).outbox.is_empty());
    assert_eq!(book(&next).sequence, 3);

    // An unsubscribed sink is owed nothing any more.
    let (next, _) = raised(
        &previous,
        &previous,
        &[subscription("chat", &[], None)],
        &[delivery("chat", 3)],
        now(),
    );
    assert!(book(&next).outbox.is_empty());
    assert!(book(&next).sink("pager").is_none());
}

#[test]
fn the_outbox_keeps_the_newest_notices() {
    let outbox: Vec<_> = (1..=MAX_OUTBOX as i64)
        .map(|sequence| notice(sequence, StagePassed))
        .collect();
    let previous = with_book(
        progressing("r1", "canary"),
        MAX_OUTBOX as i64,
        outbox,
        vec![delivery("chat", 0)],
    );
    let current = status(json!({
        "phase": "Halted",
        "revision": "r1",
        "conditions": [
            condition(conditions::HALTED, true, "GateFailed", "failed", now()),
            condition(conditions::DRIFTED, true, "LiveValuesDiffer", "drift", now()),
        ],
    }));

    let (next, _) = raised(
        &previous,
        &current,
        &[subscription("chat", &[], None)],
        &[],
        now(),
    );
    let book = book(&next);
    assert_eq!(book.outbox.len(), MAX_OUTBOX);
    assert_eq!(book.sequence, MAX_OUTBOX as i64 + 2);
    assert_eq!(book.outbox[0].sequence, 3, "the two oldest are dropped");
    assert_eq!(
        sequences(&book.outbox[MAX_OUTBOX - 2..]),
        [MAX_OUTBOX as i64 + 1, MAX_OUTBOX as i64 + 2]
    );
}

#[test]
fn transitions_found_step_by_step_are_each_raised() {
    // A reconcile that began and finished a rollback: each step's transitions, in order.
    let before = halted("r2", "GateFailed", "gate errors failed");
    let rolled_back = status(json!({
        "phase": "RolledBack",
        "revision": "r2",
        "currentStage": "canary",
        "conditions": [condition(conditions::ROLLED_BACK, true, "RolledBack", "reverted", now())],
    }));
    let step = |trigger| Transition {
        trigger,
        revision: Some("r2".to_owned()),
        stage: Some("canary".to_owned()),
        subject: None,
        reason: None,
        message: None,
    };
    let mut next = rolled_back.clone();
    let previous = with_book(before, 2, Vec::new(), vec![delivery("chat", 2)]);
    raise_found(
        &previous,
        &mut next,
        vec![step(RollingBack), step(RolledBack)],
        &[subscription("chat", &[], None)],
        &[],
        now(),
    );
    assert_eq!(owed_to(&next, "chat"), [(3, RollingBack), (4, RolledBack)]);
}

#[test]
fn a_long_message_is_cut() {
    let long = "é".repeat(MAX_NOTICE_MESSAGE_CHARS + 100);
    let (next, _) = raised(
        &progressing("r1", "canary"),
        &halted("r1", "GateFailed", &long),
        &[subscription("chat", &[], None)],
        &[],
        now(),
    );
    let message = book(&next).outbox[0].message.clone().unwrap();
    assert_eq!(message.chars().count(), MAX_NOTICE_MESSAGE_CHARS);
    assert!(long.starts_with(&message));
}

#[test]
fn a_long_wait_for_approval_is_announced_again_once() {
    let wait = awaiting("r1", "prod", now() - minutes(10));
    let previous = with_book(wait.clone(), 4, Vec::new(), vec![delivery("chat", 4)]);
    let subscriptions = [subscription("chat", &[], Some("5m"))];

    let (next, wake) = raised(&previous, &wait, &subscriptions, &[], now());
    assert_eq!(wake, None);
    let written = book(&next);
    assert_eq!(owed_to(&next, "chat"), [(5, StillAwaitingApproval)]);
    let reminder = &written.outbox[0];
    assert_eq!(reminder.revision.as_deref(), Some("r1"));
    assert_eq!(reminder.stage.as_deref(), Some("prod"));
    assert_eq!(reminder.reason.as_deref(), Some("StillAwaitingApproval"));
    assert!(
        reminder
            .message
            .as_deref()
            .is_some_and(|m| m.contains("prod")),
        "{reminder:?}"
    );

    // The next writes, from the status just written: not again.
    let (later, wake) = raised(&next, &wait, &subscriptions, &[], now() + minutes(1));
    assert_eq!(wake, None);
    assert_eq!(book(&later).sequence, 5);
    let (later, _) = raised(&later, &wait, &subscriptions, &[], now() + minutes(60));
    assert_eq!(book(&later).sequence, 5);
}

#[test]
fn a_wait_shorter_than_remind_after_is_woken_for() {
    let wait = awaiting("r1", "prod", now() - minutes(10));
    let previous = with_book(wait.clone(), 4, Vec::new(), vec![delivery("chat", 4)]);
    let subscriptions = [subscription("chat", &[], Some("30m"))];

    let (next, wake) = raised(&previous, &wait, &subscriptions, &[], now());
    assert_eq!(book(&next).sequence, 4);
    assert!(book(&next).outbox.is_empty());
    assert_eq!(wake, Some(Duration::from_secs(20 * 60)));

    // Woken when due: the reminder.
    let (next, wake) = raised(&next, &wait, &subscriptions, &[], now() + minutes(20));
    assert_eq!(wake, None);
    assert_eq!(owed_to(&next, "chat"), [(5, StillAwaitingApproval)]);
}

#[test]
fn the_reminder_is_rearmed_once_the_wait_ends() {
    let subscriptions = [subscription("chat", &[], Some("5m"))];
    let wait = awaiting("r1", "prod", now() - minutes(10));
    let previous = with_book(wait.clone(), 0, Vec::new(), vec![delivery("chat", 0)]);
    let (reminded, _) = raised(&previous, &wait, &subscriptions, &[], now());
    let wait_record = book(&reminded).approval_wait.clone().unwrap();
    assert_eq!(wait_record.wait, "r1/prod");
    assert_eq!(wait_record.reminded, ["chat"]);

    // Approved, then its approval withdrawn: the same stage waits again.
    let (moving, _) = raised(
        &reminded,
        &progressing("r1", "prod"),
        &subscriptions,
        &[delivery("chat", 1)],
        now() + minutes(1),
    );
    assert_eq!(book(&moving).approval_wait, None);

    let again = awaiting("r1", "prod", now() + minutes(2));
    let (waiting, wake) = raised(&moving, &again, &subscriptions, &[], now() + minutes(2));
    assert_eq!(owed_to(&waiting, "chat"), [(2, AwaitingApproval)]);
    assert_eq!(wake, Some(Duration::from_secs(5 * 60)));
    let (waiting, _) = raised(&waiting, &again, &subscriptions, &[], now() + minutes(8));
    assert_eq!(
        owed_to(&waiting, "chat"),
        [(2, AwaitingApproval), (3, StillAwaitingApproval)]
    );
}

/// A new revision that waits at once at the stage its predecessor waited at: the engine
/// declares it and stops at the stage in one decision, so `AwaitingApproval` stays True
/// and keeps its `lastTransitionTime` (conditions are stamped only when their status
/// flips). Its own wait has only begun: it is announced, not reminded yet.
#[test]
fn a_new_revision_waiting_where_the_last_one_waited_is_not_reminded_at_once() {
    let subscriptions = [subscription("chat", &[], Some("30m"))];
    let r1 = awaiting("r1", "canary", now() - minutes(60));
    let previous = with_book(r1.clone(), 0, Vec::new(), vec![delivery("chat", 0)]);
    let (reminded, _) = raised(&previous, &r1, &subscriptions, &[], now());
    assert_eq!(owed_to(&reminded, "chat"), [(1, StillAwaitingApproval)]);

    let r2 = awaiting("r2", "canary", now() - minutes(60));
    let (next, wake) = raised(
        &reminded,
        &r2,
        &subscriptions,
        &[delivery("chat", 1)],
        now() + minutes(1),
    );
    assert_eq!(
        owed_to(&next, "chat"),
        [(2, AwaitingApproval)],
        "r2 has only begun to wait, it has not waited an hour"
    );
    // Its wait began when the reconcile that declared it saw it stop there.
    assert_eq!(wake, Some(Duration::from_secs(30 * 60)));
}

/// `Subscription.remind_after`: "absent: never again". A sink subscribed to every trigger
/// without `remindAfter` must not be reminded because another sink asked to be.
#[test]
fn a_sink_without_remind_after_is_never_reminded() {
    let wait = awaiting("r1", "prod", now() - minutes(10));
    let previous = with_book(
        wait.clone(),
        4,
        Vec::new(),
        vec![delivery("chat", 4), delivery("pager", 4)],
    );
    let subscriptions = [
        subscription("chat", &[], Some("5m")),
        subscription("pager", &[], None),
    ];

    let (next, _) = raised(&previous, &wait, &subscriptions, &[], now());
    assert_eq!(owed_to(&next, "chat"), [(5, StillAwaitingApproval)]);
    assert_eq!(
        owed_to(&next, "pager"),
        [],
        "pager never asked to be reminded"
    );
}

// ---------------------------------------------------------------------------------------
// Idempotency
// ---------------------------------------------------------------------------------------

#[test]
fn a_retried_write_raises_the_same_notices_under_the_same_numbers() {
    let previous = with_book(
        status(json!({
            "phase": "Progressing",
            "revision": "r2",
            "currentStage": "canary",
            "stages": [{"name": "canary", "state": "Baking"}],
        })),
        9,
        vec![notice(9, StagePassed)],
        vec![delivery("chat", 8), delivery("pager", 9)],
    );
    let current = status(json!({
        "phase": "Halted",
        "revision": "r2",
        "currentStage": "canary",
        "progress": "1/3",
        "stages": [{"name": "canary", "state": "Passed"}],
        "conditions": [condition(conditions::HALTED, true, "GateFailed", "gate errors failed", now())],
    }));
    let subscriptions = [
        subscription("chat", &[], None),
        subscription("pager", &[Halted], None),
    ];

    // The controller raises, dies before its status write, and raises again from the
    // same stored status.
    let (first, first_wake) = raised(&previous, &current, &subscriptions, &[], now());
    let (retry, retry_wake) = raised(&previous, &current, &subscriptions, &[], now());
    assert_eq!(first.notifications, retry.notifications);
    assert_eq!(first_wake, retry_wake);
    assert_eq!(sequences(&book(&first).outbox), [9, 10, 11]);

    // Retried later: the same transitions under the same numbers (hence the same keys).
    let (later, _) = raised(&previous, &current, &subscriptions, &[], now() + minutes(3));
    let strip = |status: &ConfigRolloutStatus| -> Vec<Notice> {
        book(status)
            .outbox
            .iter()
            .map(|notice| Notice {
                at: to_time(now()),
                ..notice.clone()
            })
            .collect()
    };
    assert_eq!(strip(&first), strip(&later));
    assert_eq!(
        idempotency_key("uid-1", book(&later).outbox[1].sequence),
        "uid-1.10"
    );

    // Died after the write instead: the next reconcile finds the notices in the outbox
    // and raises none again.
    let (after, _) = raised(&first, &current, &subscriptions, &[], now() + minutes(3));
    assert_eq!(after.notifications, first.notifications);
}

// ---------------------------------------------------------------------------------------
// subscriptions() and owed()
// ---------------------------------------------------------------------------------------

fn spec_subscribing(subscriptions: Vec<Subscription>) -> ConfigRolloutSpec {
    let mut spec: ConfigRolloutSpec = serde_json::from_value(json!({
        "target": {"namespace": "team-a", "name": "limits"},
        "data": {"rate": "1"},
        "stages": [{"name": "only", "regions": {"names": ["region-1"]}}],
    }))
    .expect("a ConfigRolloutSpec");
    spec.notifications = subscriptions;
    spec
}

#[test]
fn spec_and_namespace_subscriptions_merge_by_sink() {
    let spec = spec_subscribing(vec![
        subscription("chat", &[Halted], None),
        subscription("pager", &[Halted], Some("30m")),
        subscription("audit", &[Complete], None),
    ]);
    let grant = Grant {
        notification_sinks: SinkGrant::Only(["chat", "audit"].map(str::to_owned).into()),
        namespace_subscriptions: vec![
            subscription("chat", &[Complete, Halted], Some("10m")),
            subscription("pager", &[], Some("5m")),
            subscription("ops", &[RegionUnreachable], None),
        ],
        ..Grant::default()
    };

    assert_eq!(
        subscriptions(&spec, &grant),
        [
            subscription("chat", &[Halted, Complete], Some("10m")),
            // Not in the grant's sinks, but the admin subscribed it: every trigger,
            // reminded as the spec says.
            subscription("pager", &[], Some("30m")),
            subscription("audit", &[Complete], None),
            subscription("ops", &[RegionUnreachable], None),
        ]
    );

    // Nothing in the spec: the namespace's.
    assert_eq!(
        subscriptions(&spec_subscribing(Vec::new()), &grant),
        grant.namespace_subscriptions
    );
    // No namespace subscriptions, every sink granted: the spec's, as written.
    let any = Grant {
        notification_sinks: SinkGrant::Any,
        ..Grant::default()
    };
    assert_eq!(subscriptions(&spec, &any), spec.notifications);
}

#[test]
fn a_spec_subscription_outside_the_grant_is_left_out() {
    let spec = spec_subscribing(vec![
        subscription("chat", &[], None),
        subscription("elsewhere", &[], None),
    ]);
    let grant = Grant {
        notification_sinks: SinkGrant::Only(["chat".to_owned()].into()),
        namespace_subscriptions: vec![subscription("ops", &[SpecRefused], None)],
        ..Grant::default()
    };
    assert_eq!(
        subscriptions(&spec, &grant),
        [
            subscription("chat", &[], None),
            subscription("ops", &[SpecRefused], None),
        ]
    );

    // A grant that reads nothing allows nothing of the spec's.
    assert_eq!(subscriptions(&spec, &Grant::default()), []);
}

#[test]
fn a_sink_is_owed_what_it_wants_past_its_delivery() {
    let outbox = [
        notice(3, StagePassed),
        notice(4, Halted),
        notice(5, GateFailing),
        notice(6, Halted),
        notice(7, Complete),
    ];
    let of = |delivery: &SinkDelivery| -> Vec<i64> {
        owed(&outbox, delivery)
            .map(|notice| notice.sequence)
            .collect()
    };

    assert_eq!(of(&delivery("chat", 0)), [3, 4, 5, 6, 7]);
    assert_eq!(of(&delivery("chat", 5)), [6, 7]);
    assert_eq!(of(&delivery("chat", 7)), Vec::<i64>::new());
    let pager = SinkDelivery {
        triggers: vec![Halted, Complete],
        ..delivery("pager", 4)
    };
    assert_eq!(of(&pager), [6, 7]);
}
