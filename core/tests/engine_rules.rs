//! One test per rollout rule, each driving the pure engine with a fake clock through the
//! simulated world in `support`.

mod support;

use std::time::Duration;

use configrollout_api::{
    GateVerdict, RevisionStep, RolloutPhase, SampleVerdict, StageState, conditions,
};
use configrollout_core::engine::{Action, MAX_SAMPLES_PER_GATE, decide, validate};
use configrollout_core::gates::QueryResult;
use serde_json::json;
use support::{World, spec};

fn three_stages() -> serde_json::Value {
    json!({
        "stages": [
            {"name": "canary", "regions": {"names": ["c1"]}},
            {"name": "wave1", "regions": {"names": ["w1", "w2"]}, "maxParallel": 2},
            {"name": "wave2", "regions": {"names": ["x1", "x2", "x3"]}},
        ]
    })
}

const ALL: [&str; 6] = ["c1", "w1", "w2", "x1", "x2", "x3"];

fn stage_of(region: &str) -> usize {
    match region {
        "c1" => 0,
        "w1" | "w2" => 1,
        _ => 2,
    }
}

#[test]
fn revisions_are_numbered_from_r1_and_history_is_bounded() {
    let mut value = three_stages();
    value["revisionHistoryLimit"] = json!(2);
    let mut world = World::new(spec(value), &ALL);
    let decision = world.tick();
    assert_eq!(world.status.revision.as_deref(), Some("r1"));
    assert!(decision.actions.iter().any(|action| matches!(
        action,
        Action::DeclareRevision { name, digest, .. } if name == "r1" && digest == "digest-1"
    )));
    for (index, digest) in ["digest-2", "digest-3"].into_iter().enumerate() {
        world.desired.digest = digest.into();
        world.tick();
        assert_eq!(
            world.status.revision.as_deref(),
            Some(format!("r{}", index + 2).as_str())
        );
    }
    let names: Vec<_> = world
        .status
        .history
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, ["r2", "r3"]);
    assert_eq!(
        world.status.history[0].outcome.as_deref(),
        Some("Superseded")
    );
    // The same desired digest declares nothing new.
    let decision = world.tick();
    assert!(
        !decision
            .actions
            .iter()
            .any(|action| matches!(action, Action::DeclareRevision { .. }))
    );
}

#[test]
fn stages_run_in_order_and_the_rollout_completes() {
    let mut world = World::new(spec(three_stages()), &ALL);
    world.run(10, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    assert!(world.condition_true(conditions::COMPLETE));
    let order: Vec<usize> = world
        .publishes()
        .iter()
        .map(|(region, ..)| stage_of(region))
        .collect();
    assert_eq!(order.len(), ALL.len());
    assert!(order.windows(2).all(|pair| pair[0] <= pair[1]), "{order:?}");
    assert_eq!(world.status.progress.as_deref(), Some("6/6"));
    assert_eq!(world.status.history[0].outcome.as_deref(), Some("Complete"));
}

#[test]
fn max_parallel_bounds_regions_in_flight() {
    for (max_parallel, expected_first_batch) in [(1, 1), (2, 2), (5, 3)] {
        let mut world = World::new(
            spec(
                json!({"stages": [{"name": "all", "regions": {"names": ["a", "b", "c"]},
                                     "maxParallel": max_parallel}]}),
            ),
            &["a", "b", "c"],
        );
        for name in ["a", "b", "c"] {
            world.region(name).stuck = true;
        }
        world.run(3, 5);
        assert_eq!(
            world.publishes().len(),
            expected_first_batch,
            "maxParallel {max_parallel}"
        );
        world.region("a").stuck = false;
        // Publish again is needed only for a region the engine thinks is new in the
        // window; unstick by applying directly, as a late read-back would.
        world.apply(&Action::Publish {
            region: "a".into(),
            revision: "r1".into(),
            step: RevisionStep::Single,
        });
        world.tick();
        let published: Vec<_> = world.publishes().into_iter().map(|(r, ..)| r).collect();
        assert_eq!(
            published.len(),
            (expected_first_batch + 1).min(3),
            "maxParallel {max_parallel}: {published:?}"
        );
    }
}

#[test]
fn a_stage_with_consumers_passes_only_when_they_are_activated() {
    let mut value = three_stages();
    value["consumers"] = json!([{"kind": "Deployment", "name": "api"}]);
    let mut world = World::new(spec(value), &ALL);
    for name in ALL {
        world.region(name).consumers = 3;
    }
    world.run(4, 1);
    assert_eq!(world.status.stages[0].state, StageState::Progressing);
    assert!(world.status.regions[0].materialized.is_some());
    assert!(world.status.regions[0].activated.is_none());
    assert!(world.log.iter().any(|(_, action)| matches!(
        action,
        Action::RestartConsumers { region, .. } if region == "c1"
    )));
    for name in ALL {
        world.region(name).activates = true;
    }
    // Counts arrive for c1 (its publish already happened).
    world.region("c1").consumer_state = Some(configrollout_core::engine::ConsumerObservation {
        revision: "r1".into(),
        step: RevisionStep::Single,
        total: 3,
        delivered: 3,
        activated: 3,
        restart_pending: false,
        ignored: Vec::new(),
    });
    world.run(10, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    let counts = world.status.regions[0].consumers.unwrap();
    assert_eq!((counts.total, counts.activated), (3, 3));
}

#[test]
fn a_consumer_restart_that_did_not_land_is_asked_for_again() {
    let mut value = three_stages();
    value["consumers"] = json!([{"kind": "Deployment", "name": "api", "delivery": "Restart"}]);
    let mut world = World::new(spec(value), &ALL);
    world.region("c1").consumers = 3;
    world.run(4, 1);
    let restarts = |world: &World| {
        world
            .log
            .iter()
            .filter(|(_, action)| {
                matches!(action, Action::RestartConsumers { region, .. } if region == "c1")
            })
            .count()
    };
    assert_eq!(restarts(&world), 1);

    // The region still shows the old template: the restart was lost.
    let pending = |restart_pending| configrollout_core::engine::ConsumerObservation {
        revision: "r1".into(),
        step: RevisionStep::Single,
        total: 3,
        delivered: 0,
        activated: 0,
        restart_pending,
        ignored: Vec::new(),
    };
    world.region("c1").consumer_state = Some(pending(true));
    world.run(1, 1);
    assert_eq!(restarts(&world), 2);

    // Once the template carries the marker, nothing more is asked while pods roll.
    world.region("c1").consumer_state = Some(pending(false));
    world.run(3, 1);
    assert_eq!(restarts(&world), 2);
}

fn gated(gate: serde_json::Value) -> serde_json::Value {
    let mut gate = gate;
    gate["name"] = json!("errors");
    gate.as_object_mut()
        .unwrap()
        .entry("query")
        .or_insert(json!("sum(rate(errors{region=\"{{region}}\"}[1m]))"));
    gate.as_object_mut()
        .unwrap()
        .entry("condition")
        .or_insert(json!("result < 0.01"));
    json!({
        "gates": [gate],
        "stages": [
            {"name": "canary", "regions": {"names": ["c1"]}, "gates": ["errors"]},
            {"name": "rest", "regions": {"names": ["r1"]}},
        ]
    })
}

#[test]
fn a_gate_passes_after_count_successes_sampled_every_interval_after_initial_delay() {
    let mut world = World::new(
        spec(gated(
            json!({"interval": "30s", "count": 3, "initialDelay": "1m"}),
        )),
        &["c1", "r1"],
    );
    world.tick(); // declares and publishes c1
    world.tick(); // c1 materialized: verifying
    assert_eq!(world.status.stages[0].state, StageState::Verifying);
    assert_eq!(
        world.last.as_ref().unwrap().requeue_after,
        Some(Duration::from_secs(60))
    );
    // Before the initial delay nothing is sampled.
    world.advance(59);
    world.tick();
    assert!(world.status.stages[0].gates[0].samples.is_empty());
    // Samples at 60s, 90s, 120s; ticks in between do not add samples.
    for _ in 0..4 {
        world.advance(10);
        world.tick();
    }
    let running = &world.status.stages[0].gates[0];
    assert_eq!(running.region.as_deref(), Some("c1"));
    assert_eq!(running.verdict, Some(GateVerdict::Running));
    let times: Vec<_> = running.samples.iter().map(|s| s.at.0.as_second()).collect();
    assert_eq!(times.len(), 2, "{times:?}");
    assert_eq!(times[1] - times[0], 30);
    for _ in 0..3 {
        world.advance(10);
        world.tick();
    }
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.successes, 3);
    assert_eq!(window.verdict, Some(GateVerdict::Passed));
    assert_eq!(
        window.samples.len(),
        1,
        "a passed window keeps its deciding sample"
    );
    assert_eq!(world.status.stages[0].state, StageState::Passed);
    assert!(world.publishes().iter().any(|(region, ..)| region == "r1"));
}

/// When the canary's stage was verified (its window's reference point), after `ticks`
/// ticks one second apart.
fn verify_canary(world: &mut World) -> chrono::DateTime<chrono::Utc> {
    world.tick(); // declares and publishes c1
    world.tick(); // c1 materialized: verifying
    assert_eq!(world.status.stages[0].state, StageState::Verifying);
    world.now
}

fn opens_at(world: &World) -> chrono::DateTime<chrono::Utc> {
    let opens = world.status.stages[0].gates[0]
        .opens_at
        .as_ref()
        .expect("the window records when it opens");
    chrono::DateTime::from_timestamp(opens.0.as_second(), 0).unwrap()
}

#[test]
fn without_consumers_a_gate_waits_the_settle_time_and_judges_what_came_after() {
    // The default gate: one sample, no initialDelay. The region's workload loads
    // the value 30 s after it lands and fails from then on.
    let mut world = World::new(
        spec(gated(json!({"interval": "10s", "count": 1}))),
        &["c1", "r1"],
    );
    world.gate_settle_time = Duration::from_secs(60);
    let verified = verify_canary(&mut world);
    assert_eq!(opens_at(&world), verified + chrono::TimeDelta::seconds(60));
    assert_eq!(
        world.last.as_ref().unwrap().requeue_after,
        Some(Duration::from_secs(60))
    );
    let loads_at = verified + chrono::TimeDelta::seconds(30);
    let clock = std::rc::Rc::new(std::cell::Cell::new(world.now));
    let seen = clock.clone();
    world.metric =
        Box::new(move |_, _| QueryResult::Scalar(if seen.get() >= loads_at { 0.5 } else { 0.0 }));
    for _ in 0..12 {
        world.advance(10);
        clock.set(world.now);
        world.tick();
    }
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Failed), "{window:?}");
    assert!(
        window
            .samples
            .iter()
            .all(|sample| sample.at.0.as_second() >= (verified.timestamp() + 60)),
        "no sample before the window opened: {window:?}"
    );
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    assert!(!world.publishes().iter().any(|(region, ..)| region == "r1"));

    // The same world without a settle time passes on the data from before the load:
    // what the settle time is for.
    let mut blind = World::new(
        spec(gated(json!({"interval": "10s", "count": 1}))),
        &["c1", "r1"],
    );
    verify_canary(&mut blind);
    blind.tick();
    assert_eq!(blind.status.stages[0].state, StageState::Passed);
}

#[test]
fn the_settle_time_and_the_initial_delay_are_not_added() {
    for (initial_delay, settle, expected) in [
        (Some("20s"), 60, 60),
        (Some("90s"), 60, 90),
        (None, 60, 60),
        (Some("20s"), 0, 20),
    ] {
        let mut gate = json!({"interval": "10s"});
        if let Some(delay) = initial_delay {
            gate["initialDelay"] = json!(delay);
        }
        let mut world = World::new(spec(gated(gate)), &["c1", "r1"]);
        world.gate_settle_time = Duration::from_secs(settle);
        let verified = verify_canary(&mut world);
        assert_eq!(
            opens_at(&world),
            verified + chrono::TimeDelta::seconds(expected),
            "initialDelay {initial_delay:?}, settle {settle}s"
        );
    }
}

#[test]
fn consumers_that_show_they_loaded_the_revision_need_no_settle_time() {
    let reload_reporting = json!([{"kind": "Deployment", "name": "api", "delivery": "Reload",
        "activationQuery": "count(app_config{revision=\"{{revision}}\"})"}]);
    let restarted = json!([{"kind": "Deployment", "name": "api", "delivery": "Restart"}]);
    let reload_unseen = json!([{"kind": "Deployment", "name": "api", "delivery": "Reload"}]);
    let mixed = json!([
        {"kind": "Deployment", "name": "api", "delivery": "Restart"},
        {"kind": "Deployment", "name": "worker", "delivery": "Reload"}
    ]);
    for (consumers, waits) in [
        (reload_reporting, 5),
        (restarted, 5),
        (reload_unseen, 60),
        (mixed, 60),
    ] {
        let mut value = gated(json!({"interval": "10s", "initialDelay": "5s"}));
        value["consumers"] = consumers.clone();
        let mut world = World::new(spec(value), &["c1", "r1"]);
        world.gate_settle_time = Duration::from_secs(60);
        for name in ["c1", "r1"] {
            world.region(name).consumers = 3;
            world.region(name).activates = true;
        }
        world.tick(); // declares and publishes c1, whose consumers activate
        world.tick(); // c1 materialized, delivered, activated: verifying
        assert_eq!(world.status.stages[0].state, StageState::Verifying);
        assert_eq!(
            opens_at(&world),
            world.now + chrono::TimeDelta::seconds(waits),
            "{consumers}"
        );
    }
}

#[test]
fn an_answer_evaluated_before_its_sample_was_due_never_counts() {
    // A store that answers with data 30 s old (a lagging replica, a cached answer): each
    // sample is a query error that says so, and four in a row fail the gate closed.
    let mut world = World::new(
        spec(gated(json!({"interval": "10s", "count": 1}))),
        &["c1", "r1"],
    );
    world.evaluation = Box::new(|at| Some(at - chrono::TimeDelta::seconds(30)));
    world.run(8, 10);
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Failed), "{window:?}");
    assert_eq!(window.successes, 0);
    assert_eq!(window.consecutive_errors, 4);
    let message = window.samples[0].message.as_deref().unwrap_or_default();
    assert!(
        message.starts_with("stale answer: evaluated at ")
            && message.contains("before the sample was due"),
        "{message}"
    );
    assert!(!world.publishes().iter().any(|(region, ..)| region == "r1"));

    // The same answer served again (one evaluation time, after the window opened) counts
    // once: the second sample is due later than that answer was evaluated.
    let mut world = World::new(
        spec(gated(json!({"interval": "10s", "count": 2}))),
        &["c1", "r1"],
    );
    let verified = verify_canary(&mut world);
    let cached = verified + chrono::TimeDelta::seconds(1);
    world.evaluation = Box::new(move |_| Some(cached));
    world.run(6, 10);
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.successes, 1, "{window:?}");
    assert_eq!(window.verdict, Some(GateVerdict::Failed), "{window:?}");

    // An answer evaluated when asked counts.
    let mut world = World::new(
        spec(gated(json!({"interval": "10s", "count": 2}))),
        &["c1", "r1"],
    );
    world.run(6, 10);
    assert_eq!(world.status.stages[0].state, StageState::Passed);
}

#[test]
fn an_answer_stamped_at_the_second_its_sample_was_due_counts() {
    // VictoriaMetrics evaluates a query without `time` at the current second rounded down
    // and stamps its answer so: samples due (and taken) 250 ms into a second are fresh.
    use chrono::SubsecRound;
    let mut world = World::new(
        spec(gated(json!({"interval": "10s", "count": 3}))),
        &["c1", "r1"],
    );
    world.now += chrono::TimeDelta::milliseconds(250);
    world.evaluation = Box::new(|at| Some(at.trunc_subsecs(0)));
    world.run(8, 10);
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Passed), "{window:?}");
    assert_eq!(window.consecutive_errors, 0);
    // A second behind is still stale.
    let mut world = World::new(
        spec(gated(json!({"interval": "10s", "count": 3}))),
        &["c1", "r1"],
    );
    world.now += chrono::TimeDelta::milliseconds(250);
    world.evaluation =
        Box::new(|at| Some(at.trunc_subsecs(0) - chrono::TimeDelta::milliseconds(1)));
    world.run(8, 10);
    assert_eq!(
        world.status.stages[0].gates[0].verdict,
        Some(GateVerdict::Failed)
    );
}

#[test]
fn a_partial_answer_is_inconclusive_and_says_why() {
    let mut world = World::new(
        spec(gated(
            json!({"interval": "10s", "count": 1, "inconclusiveLimit": 1}),
        )),
        &["c1", "r1"],
    );
    world.metric = Box::new(|_, _| {
        QueryResult::Partial(
            "Prometheus warned that the answer may be incomplete: store eu-1 unavailable".into(),
        )
    });
    world.run(6, 10);
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Failed), "{window:?}");
    assert_eq!((window.inconclusives, window.successes), (2, 0));
    assert_eq!(window.samples[0].verdict, SampleVerdict::Inconclusive);
    assert_eq!(
        window.samples[0].message.as_deref(),
        Some("Prometheus warned that the answer may be incomplete: store eu-1 unavailable")
    );
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
}

#[test]
fn a_window_opened_without_a_recorded_opening_waits_the_default_settle_time() {
    // A status written by a controller that did not record openings.
    let mut world = World::new(
        spec(gated(json!({"interval": "10s", "initialDelay": "5s"}))),
        &["c1", "r1"],
    );
    let verified = verify_canary(&mut world);
    world.status.stages[0].gates[0].opens_at = None;
    world.advance(59);
    world.tick();
    assert!(world.status.stages[0].gates[0].samples.is_empty());
    world.advance(1);
    world.tick();
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Passed));
    assert_eq!(
        window.samples[0].at.0.as_second(),
        verified.timestamp()
            + configrollout_core::engine::DEFAULT_GATE_SETTLE_TIME.as_secs() as i64
    );
}

#[test]
fn a_gate_fails_closed_on_inconclusives_beyond_its_limit() {
    let cases: [(&str, QueryResult); 2] = [
        ("no data", QueryResult::Empty),
        ("NaN", QueryResult::Scalar(f64::NAN)),
    ];
    for (label, result) in cases {
        let mut world = World::new(
            spec(gated(
                json!({"interval": "10s", "count": 1, "inconclusiveLimit": 2}),
            )),
            &["c1", "r1"],
        );
        world.metric = Box::new(move |_, _| result.clone());
        world.run(8, 10);
        let window = &world.status.stages[0].gates[0];
        assert_eq!(window.verdict, Some(GateVerdict::Failed), "{label}");
        assert_eq!(window.inconclusives, 3, "{label}");
        assert_eq!(world.status.phase, Some(RolloutPhase::Halted), "{label}");
        assert!(
            !world.publishes().iter().any(|(region, ..)| region == "r1"),
            "{label}"
        );
    }
}

#[test]
fn query_errors_fail_a_gate_only_when_consecutive_error_limit_come_in_a_row() {
    // The default limit (4, as in Argo Rollouts); inconclusiveLimit 0 shows errors are
    // not counted as inconclusive samples.
    let gate = json!({"interval": "10s", "count": 3, "inconclusiveLimit": 0});
    let error = || QueryResult::Error("timeout".into());
    let good = || QueryResult::Scalar(0.0);

    // One timeout, then answers: the gate passes.
    let mut world = World::new(spec(gated(gate.clone())), &["c1", "r1"]);
    let answers = std::sync::Mutex::new(vec![good(), good(), good(), error()]);
    world.metric = Box::new(move |_, _| answers.lock().unwrap().pop().unwrap_or_else(good));
    world.run(12, 10);
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Passed), "{window:?}");
    assert_eq!(window.inconclusives, 0);

    // Three errors, an answer, three errors: never four in a row, never failed.
    let mut world = World::new(
        spec(gated(
            json!({"interval": "10s", "count": 20, "inconclusiveLimit": 0}),
        )),
        &["c1", "r1"],
    );
    let answers = std::sync::Mutex::new(vec![
        error(),
        error(),
        error(),
        good(),
        error(),
        error(),
        error(),
    ]);
    world.metric = Box::new(move |_, _| answers.lock().unwrap().pop().unwrap_or_else(good));
    world.run(12, 10);
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Running), "{window:?}");

    // Four in a row: failed, saying so.
    let mut world = World::new(spec(gated(gate)), &["c1", "r1"]);
    world.metric = Box::new(move |_, _| error());
    world.run(8, 10);
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Failed));
    assert_eq!(window.consecutive_errors, 4);
    assert!(
        window
            .samples
            .iter()
            .all(|s| s.verdict == SampleVerdict::Error)
    );
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let halted = world.condition(conditions::HALTED).unwrap();
    assert!(
        halted.message.contains("4 query errors in a row, limit 4"),
        "{}",
        halted.message
    );
    assert!(!world.publishes().iter().any(|(region, ..)| region == "r1"));
}

#[test]
fn an_error_sample_says_why_the_query_failed() {
    let mut world = World::new(
        spec(gated(
            json!({"interval": "10s", "count": 1, "inconclusiveLimit": 0}),
        )),
        &["c1", "r1"],
    );
    world.metric = Box::new(|_, _| {
        QueryResult::Error("Prometheus answer has 3 series, over the limit of 2".into())
    });
    world.run(3, 10);
    let sample = &world.status.stages[0].gates[0].samples[0];
    assert_eq!(sample.verdict, SampleVerdict::Error);
    assert_eq!(
        sample.message.as_deref(),
        Some("query error: Prometheus answer has 3 series, over the limit of 2")
    );
}

#[test]
fn a_failed_gate_halts_and_the_reason_names_gate_region_and_sample() {
    let mut world = World::new(
        spec(gated(
            json!({"interval": "10s", "count": 5, "failureLimit": 1}),
        )),
        &["c1", "r1"],
    );
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.5));
    world.run(6, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    assert_eq!(world.status.stages[0].state, StageState::Failed);
    let halted = world.condition(conditions::HALTED).unwrap();
    assert_eq!(halted.reason, "GateFailed");
    assert!(halted.message.contains("gate errors"), "{}", halted.message);
    assert!(halted.message.contains("region c1"), "{}", halted.message);
    assert!(halted.message.contains("value 0.5"), "{}", halted.message);
    assert_eq!(world.status.stages[0].gates[0].failures, 2);
    // Halted publishes nothing more, whatever time passes.
    let before = world.publishes().len();
    world.run(5, 600);
    assert_eq!(world.publishes().len(), before);
}

#[test]
fn a_stage_wide_gate_is_sampled_once_for_the_stage() {
    let mut world = World::new(
        spec(gated(
            json!({"query": "sum(rate(errors[1m]))", "interval": "10s"}),
        )),
        &["c1", "r1"],
    );
    world.run(4, 10);
    let windows = &world.status.stages[0].gates;
    assert_eq!(windows.len(), 1);
    assert_eq!(windows[0].region, None);
    assert_eq!(windows[0].verdict, Some(GateVerdict::Passed));
}

#[test]
fn gate_samples_kept_in_status_are_bounded() {
    let mut world = World::new(
        spec(gated(
            json!({"interval": "10s", "count": 50, "failureLimit": 100}),
        )),
        &["c1", "r1"],
    );
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.5));
    world.run(40, 10);
    let window = &world.status.stages[0].gates[0];
    assert!(window.failures > MAX_SAMPLES_PER_GATE as i32);
    assert_eq!(window.samples.len(), MAX_SAMPLES_PER_GATE);
    assert!(
        window
            .samples
            .iter()
            .all(|s| s.verdict == SampleVerdict::Failed)
    );
}

#[test]
fn a_pause_bakes_the_stage_before_the_next_one_starts() {
    let mut world = World::new(
        spec(json!({"stages": [
            {"name": "canary", "regions": {"names": ["c1"]}, "pause": {"duration": "5m"}},
            {"name": "rest", "regions": {"names": ["r1"]}},
        ]})),
        &["c1", "r1"],
    );
    world.tick();
    world.tick();
    assert_eq!(world.status.stages[0].state, StageState::Baking);
    assert_eq!(
        world.last.as_ref().unwrap().requeue_after,
        Some(Duration::from_secs(300))
    );
    world.advance(299);
    world.tick();
    assert!(!world.publishes().iter().any(|(region, ..)| region == "r1"));
    world.advance(1);
    world.tick();
    assert_eq!(world.status.stages[0].state, StageState::Passed);
    assert!(world.publishes().iter().any(|(region, ..)| region == "r1"));
}

#[test]
fn a_stage_requiring_approval_waits_for_one_matching_stage_and_revision() {
    let mut value = three_stages();
    value["stages"][1]["approval"] = json!("Required");
    let mut world = World::new(spec(value), &ALL);
    world.run(4, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::AwaitingApproval));
    assert!(world.condition_true(conditions::AWAITING_APPROVAL));
    assert_eq!(world.status.stages[1].state, StageState::AwaitingApproval);
    // Wrong stage, wrong revision: still waiting.
    world.approve("wrong-stage", "wave2", "r1");
    world.approve("wrong-revision", "wave1", "r7");
    world.run(3, 1);
    assert!(
        !world
            .publishes()
            .iter()
            .any(|(region, ..)| stage_of(region) >= 1)
    );
    world.approve("ok", "wave1", "r1");
    world.run(6, 1);
    let record = world.status.stages[1].approval.as_ref().unwrap();
    assert_eq!(
        (record.name.as_str(), record.approver.as_str()),
        ("ok", "alice")
    );
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    assert!(!world.condition_true(conditions::AWAITING_APPROVAL));
}

#[test]
fn spec_paused_publishes_nothing_until_resumed() {
    let mut world = World::new(spec(three_stages()), &ALL);
    world.tick();
    world.spec.paused = true;
    world.run(5, 60);
    assert_eq!(world.status.phase, Some(RolloutPhase::Paused));
    assert!(world.condition_true(conditions::PAUSED));
    assert_eq!(world.publishes().len(), 1);
    world.spec.paused = false;
    world.run(8, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    assert!(!world.condition_true(conditions::PAUSED));
}

/// Runs one stage over `a` and `b` (`b` never answers) and checks it halts exactly
/// `deadline_s` after it started, for the deadline's reason; returns the message.
fn halted_at_the_deadline(stage: serde_json::Value, deadline_s: i64) -> String {
    let mut stage = stage;
    stage["name"] = json!("all");
    stage["regions"] = json!({"names": ["a", "b"]});
    stage["maxParallel"] = json!(2);
    let mut world = World::new(spec(json!({"stages": [stage]})), &["a", "b"]);
    world.region("b").reachable = false;
    world.tick();
    let wait = Duration::from_secs(u64::try_from(deadline_s).unwrap());
    assert!(world.last.as_ref().unwrap().requeue_after <= Some(wait));
    world.advance(deadline_s - 1);
    world.tick();
    assert_eq!(world.status.phase, Some(RolloutPhase::Progressing));
    world.advance(1);
    world.tick();
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let halted = world.condition(conditions::HALTED).unwrap();
    assert_eq!(halted.reason, "ProgressDeadlineExceeded");
    assert!(
        halted.message.contains("b (unreachable)"),
        "{}",
        halted.message
    );
    halted.message.clone()
}

#[test]
fn a_tampered_region_halts_the_rollout_at_once_naming_it() {
    let mut world = World::new(spec(three_stages()), &ALL);
    world.region("w2").tampered = true;
    // Not at a deadline: as soon as the controller reads the tampered state, though w2's
    // stage has not started.
    world.tick();
    world.run(4, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let halted = world.condition(conditions::HALTED).unwrap();
    assert_eq!(halted.reason, "TamperedState");
    assert!(halted.message.contains("w2"), "{}", halted.message);
    assert!(!halted.message.contains("w1"), "{}", halted.message);
    let w2 = world
        .status
        .regions
        .iter()
        .find(|region| region.name == "w2")
        .unwrap();
    assert!(
        w2.last_error
            .as_deref()
            .is_some_and(|error| error.starts_with("TamperedState")),
        "{w2:?}"
    );
    assert!(
        world.publishes().iter().all(|(region, ..)| region != "w2"),
        "nothing is written to a tampered region"
    );
}

#[test]
fn without_a_deadline_a_region_that_never_answers_halts_the_stage_at_the_default() {
    let message = halted_at_the_deadline(json!({}), 600);
    assert!(message.contains("within 10m"), "{message}");
}

#[test]
fn the_rollout_deadline_applies_to_stages_without_their_own() {
    let mut world = World::new(
        spec(json!({
            "progressDeadline": "3m",
            "stages": [
                {"name": "first", "regions": {"names": ["a"]}, "progressDeadline": "1m"},
                {"name": "second", "regions": {"names": ["b"]}},
            ],
        })),
        &["a", "b"],
    );
    world.region("b").reachable = false;
    while world.status.current_stage.as_deref() != Some("second") {
        world.run(1, 1);
    }
    // The loop's last turn already moved the clock 1 s past the stage's start.
    world.advance(178);
    world.tick();
    assert_eq!(world.status.phase, Some(RolloutPhase::Progressing));
    world.advance(1);
    world.tick();
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let halted = world.condition(conditions::HALTED).unwrap();
    assert!(
        halted
            .message
            .contains("stage second did not pass within 3m"),
        "{}",
        halted.message
    );
}

#[test]
fn an_exceeded_progress_deadline_fails_the_stage_naming_unreachable_regions() {
    let message = halted_at_the_deadline(json!({"progressDeadline": "2m"}), 120);
    assert!(message.contains("within 2m"), "{message}");
}

#[test]
fn on_failure_rollback_reverts_reached_regions_last_stage_first() {
    let mut value = three_stages();
    value["onFailure"] = json!("Rollback");
    value["stages"][2]["progressDeadline"] = json!("1m");
    let mut world = World::new(spec(value), &ALL);
    world.region("x3").stuck = true;
    world.run(10, 10);
    assert!(matches!(
        world.status.phase,
        Some(RolloutPhase::RollingBack | RolloutPhase::RolledBack)
    ));
    world.run(5, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::RolledBack));
    assert!(world.condition_true(conditions::ROLLED_BACK));
    let rollbacks = world.rollbacks();
    let mut sorted = rollbacks.clone();
    sorted.sort();
    // x3 never took the revision: it has nothing to revert, and is not waited for.
    assert_eq!(sorted, ["c1", "w1", "w2", "x1", "x2"]);
    let stages: Vec<usize> = rollbacks.iter().map(|region| stage_of(region)).collect();
    assert!(
        stages.windows(2).all(|pair| pair[0] >= pair[1]),
        "{rollbacks:?}"
    );
    assert_eq!(
        world.status.history[0].outcome.as_deref(),
        Some("RolledBack")
    );
}

/// Three stages rolled back on failure; wave1 fails one minute after it starts.
fn rolls_back_when_wave1_is_late() -> World {
    let mut value = three_stages();
    value["onFailure"] = json!("Rollback");
    value["stages"][1]["progressDeadline"] = json!("1m");
    World::new(spec(value), &ALL)
}

#[test]
fn a_rollback_reaches_only_stages_that_started() {
    let mut world = rolls_back_when_wave1_is_late();
    world.region("w2").stuck = true;
    world.run(20, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::RolledBack));
    let mut rollbacks = world.rollbacks();
    rollbacks.sort();
    assert_eq!(rollbacks, ["c1", "w1"]);
}

#[test]
fn a_rollback_over_regions_the_revision_never_reached_ends_rolled_back() {
    let mut world = rolls_back_when_wave1_is_late();
    // Neither wave-1 region ever takes the revision.
    world.region("w1").stuck = true;
    world.region("w2").stuck = true;
    world.run(20, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::RolledBack));
    assert_eq!(world.rollbacks(), ["c1"]);
}

#[test]
fn a_rollback_that_cannot_reach_a_region_ends_halted_naming_it() {
    let mut world = rolls_back_when_wave1_is_late();
    world.region("w2").stuck = true;
    // c1 took the revision, then went away for good before the rollback reached it.
    while world.status.current_stage.as_deref() != Some("wave1") {
        world.run(1, 10);
    }
    world.region("c1").reachable = false;
    while world.status.phase != Some(RolloutPhase::RollingBack) {
        world.run(1, 10);
    }
    // The rollback waits for c1 as long as the (default) progress deadline, then stops.
    world.run(58, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::RollingBack));
    world.run(3, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let halted = world.condition(conditions::HALTED).unwrap();
    assert_eq!(halted.reason, "RollbackIncomplete");
    assert!(halted.message.contains("c1"), "{}", halted.message);
    assert!(!halted.message.contains("w1"), "{}", halted.message);
    let settled = world.status.clone();
    world.run(10, 60);
    assert_eq!(world.status.phase, settled.phase, "a terminal state stays");
}

#[test]
fn a_revision_removing_keys_expands_then_contracts_through_every_stage() {
    let mut world = World::new(spec(three_stages()), &ALL);
    world.desired.keys_removed = 2;
    world.run(20, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    let steps: Vec<RevisionStep> = world.publishes().into_iter().map(|(.., s)| s).collect();
    assert_eq!(steps.len(), 12);
    assert!(steps[..6].iter().all(|s| *s == RevisionStep::Expand));
    assert!(steps[6..].iter().all(|s| *s == RevisionStep::Contract));
}

#[test]
fn the_contract_step_waits_for_its_approval_and_pause() {
    let mut value = three_stages();
    value["strategy"] = json!({"contract": {"approval": "Required", "pause": {"duration": "10m"}}});
    let mut world = World::new(spec(value), &ALL);
    world.desired.keys_removed = 1;
    world.run(10, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::AwaitingApproval));
    assert_eq!(world.status.current_stage.as_deref(), Some("contract"));
    assert_eq!(
        world
            .condition(conditions::AWAITING_APPROVAL)
            .unwrap()
            .reason,
        "ContractApprovalRequired"
    );
    world.approve("contract-ok", "contract", "r1");
    world.run(3, 1);
    assert_eq!(
        world.status.step,
        Some(RevisionStep::Expand),
        "pause not over yet"
    );
    world.advance(600);
    world.run(10, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    assert_eq!(world.status.step, Some(RevisionStep::Contract));
}

#[test]
fn without_expand_contract_a_removal_goes_in_one_pass() {
    let mut value = three_stages();
    value["strategy"] = json!({"expandContract": "Disabled"});
    let mut world = World::new(spec(value), &ALL);
    world.desired.keys_removed = 1;
    world.run(10, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    assert!(
        world
            .publishes()
            .iter()
            .all(|(.., s)| *s == RevisionStep::Single)
    );
}

#[test]
fn a_new_revision_mid_rollout_supersedes_and_starts_at_the_first_stage() {
    let mut value = three_stages();
    value["stages"][2]["approval"] = json!("Required");
    let mut world = World::new(spec(value), &ALL);
    world.run(5, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::AwaitingApproval));
    world.desired.digest = "digest-2".into();
    let decision = world.tick();
    assert_eq!(world.status.revision.as_deref(), Some("r2"));
    assert_eq!(world.status.current_stage.as_deref(), Some("canary"));
    let published: Vec<_> = decision
        .actions
        .iter()
        .filter_map(|action| match action {
            Action::Publish {
                region, revision, ..
            } => Some((region.as_str(), revision.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(published, [("c1", "r2")]);
    assert_eq!(
        world.status.history[0].outcome.as_deref(),
        Some("Superseded")
    );
    assert!(
        world
            .status
            .stages
            .iter()
            .skip(1)
            .all(|s| s.state == StageState::Pending)
    );
}

/// An abort rolls back what was published, whatever `onFailure` says (here Halt), and
/// publishes nothing more: not even once the stage it waited on is approved.
#[test]
fn abort_rolls_back_what_was_published_and_publishes_nothing_more() {
    let mut value = three_stages();
    value["stages"][1]["approval"] = json!("Required");
    let mut world = World::new(spec(value), &ALL);
    world.run(3, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::AwaitingApproval));
    world.control.abort_requested_at = Some(world.now);
    world.run(3, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::RolledBack));
    assert_eq!(world.halted_reason().as_deref(), Some("Aborted"));
    assert_eq!(world.rollbacks(), ["c1"]);
    world.approve("ok", "wave1", "r1");
    world.run(3, 1);
    assert_eq!(
        world.publishes().len(),
        1,
        "an aborted rollout publishes nothing"
    );
    // A retry does not bring a rolled-back revision back: a new revision does.
    world.control.retry_requested_at = Some(world.now);
    world.run(3, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::RolledBack));
    assert_eq!(world.publishes().len(), 1);
}

/// An abort before anything was published halts (there is nothing to roll back), and a
/// later retry resumes it.
#[test]
fn abort_before_any_publish_halts_and_a_later_retry_resumes() {
    let mut world = World::new(spec(three_stages()), &ALL);
    world.region("c1").reachable = false;
    world.run(2, 1);
    world.control.abort_requested_at = Some(world.now);
    world.run(2, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    assert_eq!(world.halted_reason().as_deref(), Some("Aborted"));
    world.region("c1").reachable = true;
    world.run(3, 1);
    assert!(
        world.publishes().is_empty(),
        "a halted rollout publishes nothing"
    );
    world.control.retry_requested_at = Some(world.now);
    world.run(8, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
}

#[test]
fn retry_resumes_a_halted_rollout_from_its_failed_stage_once() {
    let mut world = World::new(
        spec(gated(
            json!({"interval": "10s", "count": 1, "failureLimit": 0}),
        )),
        &["c1", "r1"],
    );
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.5));
    world.run(4, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    // Retry while the metric is still bad: resumes, fails again, and the same retry
    // request does not resume it a second time.
    world.control.retry_requested_at = Some(world.now);
    world.run(4, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let retried = world
        .log
        .iter()
        .filter(|(_, action)| matches!(action, Action::Event { reason, .. } if reason == "Retried"))
        .count();
    assert_eq!(retried, 1);
    // Metric healthy, new retry: the failed stage passes and the rollout completes,
    // without publishing the canary region again.
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.0));
    world.control.retry_requested_at = Some(world.now);
    world.run(5, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    let canary = world.publishes().iter().filter(|(r, ..)| r == "c1").count();
    assert_eq!(canary, 1);
}

#[test]
fn an_invalid_spec_is_reported_and_touches_no_region() {
    let cases = [
        ("condition", json!({"condition": "result <"})),
        ("placeholder", json!({"query": "up{r=\"{{regoin}}\"}"})),
        ("interval", json!({"interval": "0s"})),
    ];
    for (label, gate) in cases {
        let mut world = World::new(spec(gated(gate)), &["c1", "r1"]);
        world.run(3, 1);
        assert!(world.condition_true(conditions::INVALID_SPEC), "{label}");
        assert!(world.publishes().is_empty(), "{label}");
        assert!(!validate(&world.spec).is_empty(), "{label}");
        let message = &world.condition(conditions::INVALID_SPEC).unwrap().message;
        assert!(message.contains("spec.gates[0]"), "{label}: {message}");
    }
}

#[test]
fn a_consumer_selector_a_region_would_read_differently_is_an_invalid_spec() {
    let mut value = three_stages();
    value["consumers"] = json!([{
        "kind": "Deployment",
        "selector": {"matchLabels": {"app": "api,tier!=canary"}},
    }]);
    let mut world = World::new(spec(value), &ALL);
    world.run(3, 1);
    assert!(world.condition_true(conditions::INVALID_SPEC));
    assert!(world.publishes().is_empty());
    let message = &world.condition(conditions::INVALID_SPEC).unwrap().message;
    assert!(
        message.contains("spec.consumers[0].selector.matchLabels.app"),
        "{message}"
    );
}

#[test]
fn fixing_an_invalid_spec_resumes_with_a_fresh_deadline() {
    let mut value = three_stages();
    value["stages"][0]["progressDeadline"] = json!("1m");
    let mut world = World::new(spec(value.clone()), &ALL);
    world.region("c1").stuck = true;
    world.tick();
    let mut broken = value.clone();
    broken["gates"] = json!([{"name": "g", "query": "up", "condition": "result <"}]);
    world.spec = spec(broken);
    world.run(10, 30);
    assert!(world.condition_true(conditions::INVALID_SPEC));
    // A refused rollout looks refused, never Progressing.
    assert_eq!(world.status.phase, Some(RolloutPhase::Refused));
    world.spec = spec(value);
    world.region("c1").stuck = false;
    world.region("c1").reachable = false;
    world.tick();
    assert!(!world.condition_true(conditions::INVALID_SPEC));
    assert_eq!(
        world.status.phase,
        Some(RolloutPhase::Progressing),
        "not failed at once"
    );
    world.region("c1").reachable = true;
    world.run(10, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
}

#[test]
fn conditions_carry_observed_generation_and_keep_transition_time_until_they_flip() {
    let mut value = three_stages();
    value["stages"][1]["approval"] = json!("Required");
    let mut world = World::new(spec(value), &ALL);
    world.tick();
    let first = world.condition(conditions::PROGRESSING).unwrap().clone();
    assert_eq!(first.status, "True");
    world.generation = 2;
    world.advance(30);
    world.run(3, 30);
    let later = world.condition(conditions::PROGRESSING).unwrap();
    assert_eq!(later.last_transition_time, first.last_transition_time);
    assert_eq!(later.observed_generation, Some(2));
    assert_eq!(world.status.observed_generation, Some(2));
    let awaiting = world
        .condition(conditions::AWAITING_APPROVAL)
        .unwrap()
        .clone();
    assert_eq!(awaiting.status, "True");
    assert!(awaiting.last_transition_time > first.last_transition_time);
    // Drifted is the region layer's; AdmissionPolicies is set once the reconcile has
    // checked the policies (see `the_policies_approvals_rely_on_are_reported`);
    // ReconcileFailed only by a reconcile that failed.
    let not_the_engines = [
        conditions::DRIFTED,
        conditions::ADMISSION_POLICIES,
        conditions::RECONCILE_FAILED,
    ];
    for type_ in conditions::ROLLOUT_CONDITION_TYPES {
        if !not_the_engines.contains(&type_) {
            assert!(world.condition(type_).is_some(), "{type_}");
        }
    }
}

#[test]
fn stage_selectors_pick_regions_by_labels() {
    let mut world = World::new(
        spec(json!({"stages": [
            {"name": "eu", "regions": {"selector": {"matchLabels": {"geo": "eu"}}}, "maxParallel": 5},
            {"name": "rest", "regions": {"selector": {"matchExpressions": [
                {"key": "geo", "operator": "NotIn", "values": ["eu"]}]}}, "maxParallel": 5},
        ]})),
        &["eu-1", "eu-2", "us-1"],
    );
    world.set_label("eu-1", "geo", "eu");
    world.set_label("eu-2", "geo", "eu");
    world.set_label("us-1", "geo", "us");
    world.tick();
    let published: Vec<_> = world.publishes().into_iter().map(|(r, ..)| r).collect();
    assert_eq!(published, ["eu-1", "eu-2"]);
    world.run(4, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    assert_eq!(world.status.regions.len(), 3);
    assert_eq!(world.status.regions[2].stage.as_deref(), Some("rest"));
}

#[test]
fn feeding_the_status_back_with_the_same_observations_publishes_nothing_new() {
    let mut world = World::new(spec(three_stages()), &ALL);
    for _ in 0..8 {
        let observations = world.observations(Vec::new());
        let first = decide(&world.spec, world.status.clone(), &observations, world.now);
        let again = decide(&world.spec, first.status.clone(), &observations, world.now);
        let publishes = again
            .actions
            .iter()
            .filter(|action| matches!(action, Action::Publish { .. } | Action::Rollback { .. }))
            .count();
        assert_eq!(publishes, 0, "{:?}", again.actions);
        world.tick();
        world.advance(1);
    }
}

#[test]
fn requeue_after_is_the_soonest_timer() {
    let mut value = gated(json!({"interval": "45s", "count": 2}));
    value["stages"][0]["progressDeadline"] = json!("30s");
    let mut world = World::new(spec(value), &["c1", "r1"]);
    world.region("c1").stuck = true;
    let decision = world.tick();
    // Waiting on a region: poll, bounded by the deadline.
    assert_eq!(decision.requeue_after, Some(Duration::from_secs(10)));
    world.advance(25);
    let decision = world.tick();
    assert_eq!(decision.requeue_after, Some(Duration::from_secs(5)));
}

#[test]
fn every_sample_a_step_counts_is_tallied_once_by_verdict() {
    let mut world = World::new(
        spec(gated(
            json!({"interval": "10s", "count": 3, "inconclusiveLimit": 5}),
        )),
        &["c1", "r1"],
    );
    let mut tally = configrollout_core::engine::SampleTally::default();
    let mut add = |decision: configrollout_core::engine::Decision| {
        tally.successful += decision.samples_judged.successful;
        tally.failed += decision.samples_judged.failed;
        tally.inconclusive += decision.samples_judged.inconclusive;
    };
    world.metric = Box::new(|_, _| QueryResult::Empty);
    for _ in 0..4 {
        add(world.tick());
        // A second tick at the same instant re-reads nothing new: no double count.
        add(world.tick());
        world.advance(10);
    }
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.0));
    for _ in 0..6 {
        add(world.tick());
        world.advance(10);
    }
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Passed));
    assert!(window.inconclusives > 0);
    assert_eq!(
        (tally.successful, tally.failed, tally.inconclusive),
        (
            u32::try_from(window.successes).unwrap(),
            0,
            u32::try_from(window.inconclusives).unwrap()
        )
    );
}

#[test]
fn out_of_band_edits_are_reported_by_key_name() {
    let mut world = World::new(spec(three_stages()), &ALL);
    world.run(10, 10);
    world.region("w1").drifted = vec!["rate".into()];
    world.tick();
    let condition = world
        .condition(conditions::DRIFTED)
        .expect("Drifted condition");
    assert_eq!(condition.status, "True");
    assert!(
        condition.message.contains("w1 (rate)"),
        "{}",
        condition.message
    );
    let w1 = world
        .status
        .regions
        .iter()
        .find(|r| r.name == "w1")
        .unwrap();
    assert_eq!(w1.drifted_keys, vec!["rate".to_owned()]);

    world.region("w1").drifted.clear();
    world.tick();
    assert!(!world.condition_true(conditions::DRIFTED));
}

/// `ReconcileFailed`, written when a reconcile failed before its status write, is gone
/// after the next reconcile that gets that far.
#[test]
fn a_reconcile_that_succeeds_clears_reconcile_failed() {
    let mut world = World::new(spec(three_stages()), &ALL);
    world.run(1, 1);
    world.status = configrollout_core::engine::reconcile_failed(
        &world.status,
        1,
        "ActFailed",
        "act: saving revision r1: timed out",
        chrono::Utc::now(),
    );
    assert!(world.condition_true(conditions::RECONCILE_FAILED));
    world.run(1, 1);
    assert!(
        !world
            .status
            .conditions
            .iter()
            .any(|condition| condition.type_ == conditions::RECONCILE_FAILED)
    );
}

/// A region of a Complete rollout that lost the revision (its companion restored from a
/// backup taken before it) gets the revision again, once, under every drift policy; the
/// rollout stays Complete.
#[test]
fn a_region_that_lost_the_revision_while_complete_gets_it_again_once() {
    for policy in ["Revert", "Adopt", "Report"] {
        let mut value = three_stages();
        value["driftPolicy"] = json!(policy);
        let mut world = World::new(spec(value), &ALL);
        world.run(10, 10);
        assert_eq!(world.status.phase, Some(RolloutPhase::Complete), "{policy}");
        let held = world.region("w2").applied.clone();
        assert!(held.is_some(), "{policy}");
        let published = world.publishes().len();

        world.region("w2").applied = None;
        world.run(3, 60);
        let again: Vec<_> = world.publishes()[published..].to_vec();
        assert_eq!(
            again.len(),
            1,
            "{policy}: one republish, not one per reconcile"
        );
        assert_eq!(again[0].0, "w2", "{policy}");
        assert_eq!(world.region("w2").applied, held, "{policy}");
        assert_eq!(world.status.phase, Some(RolloutPhase::Complete), "{policy}");
        let w2 = world
            .status
            .regions
            .iter()
            .find(|region| region.name == "w2")
            .expect("w2 in status");
        assert!(w2.materialized.is_some(), "{policy}: the mark is back");

        // Nothing lost: nothing published.
        let published = world.publishes().len();
        world.run(3, 60);
        assert_eq!(world.publishes().len(), published, "{policy}");
    }
}

#[test]
fn drift_is_reverted_or_adopted_while_complete_and_only_reported_under_report() {
    for (policy, acts) in [("Revert", true), ("Adopt", true), ("Report", false)] {
        let mut value = three_stages();
        value["driftPolicy"] = json!(policy);
        let mut world = World::new(spec(value), &ALL);
        world.run(10, 10);
        assert_eq!(world.status.phase, Some(RolloutPhase::Complete), "{policy}");
        let published = world.publishes().len();

        world.region("w2").drifted = vec!["k".to_owned()];
        world.run(3, 60);
        let again: Vec<_> = world.publishes()[published..].to_vec();
        if acts {
            assert_eq!(
                again.len(),
                1,
                "{policy}: one repair, not one per reconcile"
            );
            assert_eq!(again[0].0, "w2", "{policy}");
            assert!(world.region("w2").drifted.is_empty(), "{policy}");
            assert!(!world.condition_true(conditions::DRIFTED), "{policy}");
        } else {
            assert!(again.is_empty(), "{policy}: Report changes nothing");
            assert!(world.condition_true(conditions::DRIFTED), "{policy}");
        }
        assert_eq!(world.status.phase, Some(RolloutPhase::Complete), "{policy}");

        // Unreachable while drifted: repaired once it is back.
        if acts {
            world.region("x1").drifted = vec!["k".to_owned()];
            world.region("x1").reachable = false;
            world.run(3, 60);
            world.region("x1").reachable = true;
            world.run(3, 60);
            assert!(world.region("x1").drifted.is_empty(), "{policy}");
        }
    }
}

/// Durations a clock cannot hold (`999999999999h` is 114 million years) are refused by
/// `validate`, naming each field, and nothing reaches a region.
#[test]
fn a_duration_past_its_ceiling_is_invalid_spec_naming_the_field() {
    let huge = "999999999999h";
    let cases = [
        ("spec.progressDeadline", json!({"progressDeadline": huge})),
        (
            "spec.stages[0].progressDeadline",
            json!({"stages": [{"name": "canary", "regions": {"names": ["c1"]}, "progressDeadline": huge}]}),
        ),
        (
            "spec.stages[0].pause.duration",
            json!({"stages": [{"name": "canary", "regions": {"names": ["c1"]}, "pause": {"duration": huge}}]}),
        ),
        (
            "spec.gates[0].interval",
            json!({"gates": [{"name": "g", "query": "up", "condition": "result > 0", "interval": huge}]}),
        ),
        (
            "spec.gates[0].initialDelay",
            json!({"gates": [{"name": "g", "query": "up", "condition": "result > 0", "initialDelay": huge}]}),
        ),
        (
            "spec.strategy.contract.pause.duration",
            json!({"strategy": {"contract": {"pause": {"duration": huge}}}}),
        ),
        (
            "spec.gates[0].count",
            json!({"gates": [{"name": "g", "query": "up", "condition": "result > 0", "count": 2_000_000_000}]}),
        ),
    ];
    for (field, edit) in cases {
        let mut value = json!({
            "stages": [{"name": "canary", "regions": {"names": ["c1"]}}],
        });
        for (key, part) in edit.as_object().unwrap() {
            value[key] = part.clone();
        }
        let spec = spec(value);
        let errors = validate(&spec);
        assert!(
            errors.iter().any(|error| error.field == field),
            "{field}: {errors:?}"
        );
        let mut world = World::new(spec, &["c1"]);
        world.run(5, 3_600);
        assert!(world.publishes().is_empty(), "{field}: published");
        let message = world
            .condition(conditions::INVALID_SPEC)
            .map(|condition| condition.message.clone())
            .unwrap_or_default();
        assert!(message.contains(field), "{field}: {message}");
    }
}

/// A gate sampling more often than once a second (issue 29: `interval: 1ms` drove dozens
/// of status writes a second through capacity every team shares) is refused, naming the
/// field, and reaches no region; a second is fine.
#[test]
fn a_gate_interval_below_a_second_is_invalid_spec_naming_the_field() {
    let gated = |interval: &str| {
        spec(json!({
            "gates": [{"name": "g", "query": "up", "condition": "result > 0",
                       "interval": interval}],
            "stages": [{"name": "canary", "regions": {"names": ["c1"]}}],
        }))
    };
    for interval in ["1ms", "999ms", "0s"] {
        let spec = gated(interval);
        let errors = validate(&spec);
        assert!(
            errors
                .iter()
                .any(|error| error.field == "spec.gates[0].interval"),
            "{interval}: {errors:?}"
        );
        let mut world = World::new(spec, &["c1"]);
        world.run(5, 60);
        assert!(world.publishes().is_empty(), "{interval}: published");
    }
    for interval in ["1s", "1000ms", "1m"] {
        assert_eq!(validate(&gated(interval)), Vec::new(), "{interval}");
    }
}

/// A rollout whose gate is being sampled when its spec changes to durations no clock can
/// hold (an object stored before the ceilings, or a cluster without the schema's rules)
/// is sampled and decided without a panic: refused, with nothing more published.
#[test]
fn a_rollout_under_way_edited_to_huge_durations_stops_without_a_panic() {
    let gated = |interval: &str, delay: &str, pause: &str, deadline: &str| {
        spec(json!({
            "gates": [{"name": "errors", "query": "up{region=\"{{region}}\"}",
                       "condition": "result < 0.5", "interval": interval,
                       "initialDelay": delay, "count": 3}],
            "stages": [
                {"name": "canary", "regions": {"names": ["c1"]}, "gates": ["errors"],
                 "pause": {"duration": pause}, "progressDeadline": deadline},
                {"name": "rest", "regions": {"names": ["w1"]}},
            ],
            "progressDeadline": deadline,
        }))
    };
    let mut world = World::new(gated("1s", "1s", "1s", "10m"), &["c1", "w1"]);
    world.run(3, 1);
    assert_eq!(world.status.stages[0].state, StageState::Verifying);
    let huge = "999999999999h";
    world.spec = gated(huge, huge, huge, huge);
    world.generation += 1;
    let published = world.publishes().len();
    world.run(5, 3_600);
    assert!(world.condition_true(conditions::INVALID_SPEC));
    assert_eq!(world.publishes().len(), published);
}

/// An approval names what the stage does: once the stage's regions, parallelism or gates
/// are edited, the approval given for it no longer counts, and the stage waits again.
#[test]
fn an_approval_is_void_once_its_stage_is_edited() {
    let mut value = three_stages();
    value["stages"][1]["approval"] = json!("Required");
    let mut world = World::new(spec(value.clone()), &ALL);
    world.run(3, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::AwaitingApproval));
    world.approve("ok", "wave1", "r1");
    // Before the stage starts, someone widens it: the approval was for one region at a
    // time over w1 and w2, not for this.
    value["stages"][1]["maxParallel"] = json!(1);
    value["stages"][1]["regions"] = json!({"names": ["w1", "w2", "x1"]});
    value["stages"][2]["regions"] = json!({"names": ["x2", "x3"]});
    world.spec = spec(value.clone());
    world.generation += 1;
    world.run(3, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::AwaitingApproval));
    assert!(
        world.publishes().iter().all(|(region, ..)| region == "c1"),
        "{:?}",
        world.publishes()
    );
    // An approval of the stage as it is now counts.
    world.approve("again", "wave1", "r1");
    world.run(10, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
}

/// The target of a rollout cannot change: its revisions live beside the target in every
/// region. A spec naming another target is refused, naming the field, and nothing is
/// written; naming the old one again lets the rollout go on.
#[test]
fn a_rollout_cannot_change_its_target() {
    let value = three_stages();
    let mut world = World::new(spec(value.clone()), &ALL);
    world.run(2, 1);
    let published = world.publishes().len();
    let mut moved = value.clone();
    moved["target"] = json!({"namespace": "app", "name": "other-config"});
    world.spec = spec(moved);
    world.generation += 1;
    world.run(5, 1);
    assert_eq!(world.publishes().len(), published);
    let invalid = world.condition(conditions::INVALID_SPEC).unwrap();
    assert_eq!(invalid.status, "True");
    assert!(
        invalid.message.contains("spec.target") && invalid.message.contains("app/app-config"),
        "{}",
        invalid.message
    );
    world.spec = spec(value);
    world.generation += 1;
    world.run(10, 1);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
}

/// The kstatus conditions as (Ready, Reconciling, Stalled), each `Some(reason)` when true.
fn kstatus(world: &World) -> (Option<String>, Option<String>, Option<String>) {
    let true_reason = |type_: &str| {
        world
            .status
            .true_condition(type_)
            .map(|condition| condition.reason.clone())
    };
    (
        true_reason(conditions::READY),
        true_reason(conditions::RECONCILING),
        true_reason(conditions::STALLED),
    )
}

/// Checks the rollout reads as kstatus wants `phase` read: Complete is Ready; waiting is
/// Reconciling (with `reason`); halted, rolled back or refused is Stalled (with
/// `reason`). Never two at once, every one of the three present, every one as of the
/// current generation, and `Ready`'s message says what the true one says. Returns that
/// message.
fn assert_reads(world: &World, phase: RolloutPhase, reason: &str) -> String {
    assert_eq!(world.status.phase, Some(phase), "{:?}", world.status);
    let expected = match phase {
        RolloutPhase::Complete => (Some(reason.to_owned()), None, None),
        RolloutPhase::Halted | RolloutPhase::RolledBack | RolloutPhase::Refused => {
            (None, None, Some(reason.to_owned()))
        }
        _ if world.condition_true(conditions::INVALID_SPEC) => {
            (None, None, Some(reason.to_owned()))
        }
        _ => (None, Some(reason.to_owned()), None),
    };
    assert_eq!(kstatus(world), expected, "{phase:?}");
    for type_ in conditions::KSTATUS_CONDITION_TYPES {
        let condition = world.condition(type_).expect(type_);
        assert_eq!(
            condition.observed_generation,
            Some(world.generation),
            "{type_}"
        );
    }
    assert_eq!(world.status.observed_generation, Some(world.generation));
    let ready = world.condition(conditions::READY).unwrap();
    for type_ in [conditions::RECONCILING, conditions::STALLED] {
        let condition = world.condition(type_).unwrap();
        if condition.status == "True" {
            assert_eq!(condition.message, ready.message, "{type_}");
        } else {
            assert!(
                condition.message.is_empty(),
                "{type_}: {}",
                condition.message
            );
        }
    }
    ready.message.clone()
}

#[test]
fn a_rollout_reads_as_kstatus_defines_it_in_every_phase() {
    // Progressing while the canary is being updated: what it waits on is named.
    let mut value = three_stages();
    value["stages"][1]["approval"] = json!("Required");
    value["stages"][1]["pause"] = json!({"duration": "5m"});
    let mut world = World::new(spec(value), &ALL);
    world.region("c1").stuck = true;
    world.tick();
    let message = assert_reads(&world, RolloutPhase::Progressing, "Progressing");
    assert!(
        message.contains("r1 at stage canary: waiting for regions c1 to materialize r1"),
        "{message}"
    );
    assert!(message.contains("0/6 regions done"), "{message}");
    world.region("c1").reachable = false;
    world.tick();
    let message = assert_reads(&world, RolloutPhase::Progressing, "Progressing");
    assert!(message.contains("c1 (unreachable)"), "{message}");

    // Waiting for an approval, naming the stage and the revision.
    world.region("c1").stuck = false;
    world.region("c1").reachable = true;
    world.run(3, 1);
    let message = assert_reads(&world, RolloutPhase::AwaitingApproval, "AwaitingApproval");
    assert!(
        message.contains("stage wave1 of r1 awaits a StageApproval"),
        "{message}"
    );

    // Baking after the approval: waiting on time.
    world.approve("ok", "wave1", "r1");
    world.run(3, 1);
    let message = assert_reads(&world, RolloutPhase::Progressing, "Progressing");
    assert!(message.contains("its bake time (5m) to end"), "{message}");

    // Paused before the first stage started, then at a stage.
    let mut early = World::new(spec(three_stages()), &ALL);
    early.spec.paused = true;
    early.tick();
    let message = assert_reads(&early, RolloutPhase::Paused, "Paused");
    assert!(
        message.starts_with("r1: paused by spec.paused"),
        "{message}"
    );
    world.spec.paused = true;
    world.generation = 2;
    world.tick();
    let message = assert_reads(&world, RolloutPhase::Paused, "Paused");
    assert!(message.contains("paused by spec.paused"), "{message}");

    // Complete: Ready, and nothing else.
    world.spec.paused = false;
    world.generation = 3;
    world.advance(600);
    world.run(6, 1);
    let message = assert_reads(&world, RolloutPhase::Complete, "AllStagesPassed");
    assert_eq!(message, "r1 passed every stage (6/6 regions done)");

    // A new revision that nobody has decided on yet: the first one to be declared.
    let mut pending = World::new(spec(three_stages()), &ALL);
    pending.desired.digest = String::new();
    pending.tick();
    let message = assert_reads(&pending, RolloutPhase::Pending, "Pending");
    assert!(message.contains("first revision"), "{message}");
}

#[test]
fn halted_rolled_back_and_refused_rollouts_are_stalled_and_a_rollback_in_flight_is_not() {
    // A failed gate halts: Stalled, for the gate's reason, naming the gate.
    let mut world = World::new(
        spec(gated(json!({"interval": "10s", "count": 5}))),
        &["c1", "r1"],
    );
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.5));
    world.run(4, 10);
    let message = assert_reads(&world, RolloutPhase::Halted, "GateFailed");
    assert!(message.starts_with("r1 halted (GateFailed): "), "{message}");
    assert!(message.contains("gate errors"), "{message}");
    // A retry makes it move again: no longer stalled.
    world.control.retry_requested_at = Some(world.now);
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.0));
    world.advance(1);
    world.tick();
    assert_reads(&world, RolloutPhase::Progressing, "Progressing");

    // Rolling back is still the controller's work (InProgress); rolled back is final.
    let mut world = rolls_back_when_wave1_is_late();
    world.region("w2").stuck = true;
    world.region("w1").reachable = false;
    while world.status.phase != Some(RolloutPhase::RollingBack) {
        world.run(1, 10);
    }
    let message = assert_reads(&world, RolloutPhase::RollingBack, "RollingBack");
    assert!(
        message.starts_with("rolling back r1 after ProgressDeadlineExceeded"),
        "{message}"
    );
    world.spec.paused = true;
    world.tick();
    let message = assert_reads(&world, RolloutPhase::RollingBack, "RollingBack");
    assert!(message.contains("paused by spec.paused"), "{message}");
    world.spec.paused = false;
    world.region("w1").reachable = true;
    world.run(10, 10);
    let message = assert_reads(&world, RolloutPhase::RolledBack, "RolledBack");
    assert!(message.contains("was rolled back"), "{message}");

    // An invalid spec is refused before anything is written: Stalled, whatever the phase.
    let mut world = World::new(spec(gated(json!({"condition": "result <"}))), &["c1", "r1"]);
    world.tick();
    let message = assert_reads(&world, RolloutPhase::Refused, "InvalidSpec");
    assert!(message.contains("spec.gates[0]"), "{message}");
    // Fixed: the summary follows at once.
    world.spec = spec(gated(json!({})));
    world.generation = 2;
    world.tick();
    assert_reads(&world, RolloutPhase::Progressing, "Progressing");
}

#[test]
fn a_spec_change_that_declares_nothing_new_leaves_a_complete_rollout_ready_in_one_reconcile() {
    let mut world = World::new(spec(three_stages()), &ALL);
    world.run(10, 1);
    assert_reads(&world, RolloutPhase::Complete, "AllStagesPassed");
    let publishes = world.publishes().len();
    let ready_since = world
        .condition(conditions::READY)
        .unwrap()
        .last_transition_time
        .clone();

    // Operator fields: paused, then resumed, then a bake time edited; each a new
    // generation the very next decision records, still Complete and Ready.
    /// A spec edit that declares nothing new, named.
    type Edit = (&'static str, fn(&mut World));
    let edits: [Edit; 3] = [
        ("paused", |world| world.spec.paused = true),
        ("resumed", |world| world.spec.paused = false),
        ("bake time", |world| {
            world.spec.stages[1].pause =
                Some(serde_json::from_value(json!({"duration": "1m"})).unwrap())
        }),
    ];
    for (what, edit) in edits {
        edit(&mut world);
        world.generation += 1;
        world.advance(5);
        world.tick();
        let message = assert_reads(&world, RolloutPhase::Complete, "AllStagesPassed");
        assert_eq!(
            message.ends_with("spec.paused holds the next revision"),
            world.spec.paused,
            "{what}: {message}"
        );
        for condition in &world.status.conditions {
            assert_eq!(
                condition.observed_generation,
                Some(world.generation),
                "{what}: {}",
                condition.type_
            );
        }
        assert_eq!(
            world
                .condition(conditions::READY)
                .unwrap()
                .last_transition_time,
            ready_since,
            "{what}: Ready never flipped"
        );
    }
    assert_eq!(
        world.publishes().len(),
        publishes,
        "nothing published again"
    );
}

/// A comparison gate (issue 35) on the canary and on the last stage of three.
fn compared(compare: serde_json::Value) -> serde_json::Value {
    let mut gate = json!({
        "name": "errors",
        "query": "sum(rate(errors{region=\"{{region}}\"}[1m]))",
        "interval": "30s",
        "count": 2,
        "compare": {"window": "5m", "step": "30s", "minSamples": 8},
    });
    for (key, value) in compare.as_object().unwrap() {
        gate["compare"][key] = value.clone();
    }
    json!({
        "gates": [gate],
        "stages": [
            {"name": "canary", "regions": {"names": ["c1"]}, "gates": ["errors"]},
            {"name": "wave1", "regions": {"names": ["w1", "w2"]}, "maxParallel": 2},
            {"name": "last", "regions": {"names": ["x1"]}, "gates": ["errors"]},
        ]
    })
}

/// Eleven points around `level` (a window of 5m every 30s), slightly apart.
fn points_around(level: f64) -> Vec<f64> {
    (0..11)
        .map(|i| level * (1.0 + f64::from(i % 3) / 100.0))
        .collect()
}

#[test]
fn a_comparison_gate_compares_the_canary_with_the_regions_of_later_stages_then_its_past() {
    let mut world = World::new(spec(compared(json!({}))), &["c1", "w1", "w2", "x1"]);
    world.series = Box::new(|_, _| Some(points_around(0.01)));
    let verified = verify_canary(&mut world);
    // The first sample waits for a whole window of data after the opening.
    world.advance(299);
    world.tick();
    assert!(
        world.comparisons.is_empty(),
        "sampled before a whole window"
    );
    world.advance(1);
    world.tick();
    let (region, first) = world.comparisons[0].clone();
    assert_eq!(region.as_deref(), Some("c1"));
    assert_eq!(first.canary.start, verified, "from the window's opening");
    assert_eq!(first.canary.end, world.now);
    assert_eq!(first.canary.step, Duration::from_secs(30));
    let baseline: Vec<&str> = first.baseline.iter().map(|b| b.region.as_str()).collect();
    assert_eq!(baseline, ["w1", "w2", "x1"], "every region not yet updated");
    assert!(
        first.baseline.iter().all(|b| b.span == first.canary
            && b.query == format!("sum(rate(errors{{region=\"{}\"}}[1m]))", b.region)),
        "the same query over the same span: {first:?}"
    );
    assert_eq!(first.source, "regions w1, w2, x1");

    world.run(200, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    let last_started = world.status.stages[2].started_at.clone().unwrap();
    let last_started = chrono::DateTime::from_timestamp(last_started.0.as_second(), 0).unwrap();
    let (region, last) = world
        .comparisons
        .iter()
        .rev()
        .find(|(region, _)| region.as_deref() == Some("x1"))
        .cloned()
        .expect("the last stage compared");
    assert_eq!(region.as_deref(), Some("x1"));
    assert_eq!(last.baseline.len(), 1);
    assert_eq!(
        last.baseline[0].region, "x1",
        "no region left: its own past"
    );
    assert_eq!(last.baseline[0].span.end, last_started);
    assert_eq!(
        last.baseline[0].span.start,
        last_started - chrono::TimeDelta::minutes(5)
    );
    assert!(last.source.starts_with("x1 before "), "{}", last.source);
    let window = &world.status.stages[2].gates[0];
    assert_eq!(window.verdict, Some(GateVerdict::Passed));
    let shown = window.samples[0].comparison.as_ref().unwrap();
    assert_eq!(shown.canary.points, 11);
    assert_eq!(shown.baseline.points, 11);
    assert!(
        shown.p_value.is_some() && shown.change.is_some(),
        "{shown:?}"
    );
}

#[test]
fn a_canary_worse_than_its_baseline_fails_and_halts_naming_both_sides() {
    let mut world = World::new(
        spec(compared(json!({"tolerancePercent": 20}))),
        &["c1", "w1", "w2", "x1"],
    );
    world.series =
        Box::new(|region, _| Some(points_around(if region == "c1" { 0.05 } else { 0.01 })));
    world.run(40, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let halted = world.condition(conditions::HALTED).unwrap();
    assert_eq!(halted.reason, "GateFailed");
    assert!(halted.message.contains("region c1"), "{}", halted.message);
    let sample = &world.status.stages[0].gates[0].samples[0];
    assert_eq!(sample.verdict, SampleVerdict::Failed);
    let message = sample.message.as_deref().unwrap();
    assert!(message.contains("higher"), "{message}");
    let shown = sample.comparison.as_ref().unwrap();
    assert_eq!(shown.baseline.points, 33, "three baseline regions pooled");
    assert_eq!(shown.canary.median.as_deref(), Some("0.0505"));
    assert!(world.publishes().iter().all(|(region, ..)| region == "c1"));
}

#[test]
fn a_fleet_wide_rise_passes_a_comparison_and_a_rise_within_tolerance_too() {
    for (canary, baseline) in [(0.3, 0.3), (0.011, 0.01)] {
        let mut world = World::new(
            spec(compared(json!({"tolerancePercent": 20}))),
            &["c1", "w1", "w2", "x1"],
        );
        world.series = Box::new(move |region, _| {
            Some(points_around(if region == "c1" {
                canary
            } else {
                baseline
            }))
        });
        world.run(200, 10);
        assert_eq!(
            world.status.phase,
            Some(RolloutPhase::Complete),
            "{canary} against {baseline}"
        );
    }
}

#[test]
fn a_comparison_without_enough_baseline_is_inconclusive_never_a_pass() {
    let mut world = World::new(spec(compared(json!({}))), &["c1", "w1", "w2", "x1"]);
    // The baseline regions have no data (a new region, a metric not yet exported).
    world.series = Box::new(|region, _| {
        Some(if region == "c1" {
            points_around(0.01)
        } else {
            Vec::new()
        })
    });
    world.run(40, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let window = &world.status.stages[0].gates[0];
    assert_eq!(window.successes, 0);
    assert_eq!(window.samples[0].verdict, SampleVerdict::Inconclusive);
    let message = window.samples[0].message.as_deref().unwrap();
    assert!(message.contains("baseline has 0 points"), "{message}");
    // A baseline region that errs is a query error naming it, not a verdict.
    let mut world = World::new(spec(compared(json!({}))), &["c1", "w1", "w2", "x1"]);
    world.series = Box::new(|region, _| (region != "w2").then(|| points_around(0.01)));
    world.run(40, 10);
    let sample = &world.status.stages[0].gates[0].samples[0];
    assert_eq!(sample.verdict, SampleVerdict::Error);
    assert!(
        sample.message.as_deref().unwrap().contains("baseline w2"),
        "{sample:?}"
    );
}

#[test]
fn a_comparison_gate_that_could_not_compare_is_invalid_naming_the_field() {
    let with = |gate: serde_json::Value| {
        let mut value = compared(json!({}));
        for (key, field) in gate.as_object().unwrap() {
            value["gates"][0][key] = field.clone();
        }
        validate(&spec(value))
    };
    let fields = |errors: Vec<configrollout_core::engine::SpecError>| {
        errors
            .into_iter()
            .map(|error| error.field)
            .collect::<Vec<_>>()
    };
    assert_eq!(validate(&spec(compared(json!({})))), Vec::new());
    assert_eq!(
        fields(with(json!({"query": "sum(rate(errors[1m]))"}))),
        ["spec.gates[0].query"],
        "no {{region}}: nothing to ask the baseline"
    );
    assert_eq!(
        fields(with(
            json!({"query": "sum(x{region=\"{{region}}\",revision=\"{{revision}}\"})"})
        )),
        ["spec.gates[0].query"]
    );
    assert_eq!(
        fields(with(json!({"condition": "result < 1"}))),
        ["spec.gates[0].condition"]
    );
    assert_eq!(
        fields(with(json!({"compare": {"window": "1m", "step": "30s"}}))),
        ["spec.gates[0].compare.window"],
        "3 points a side cannot reach minSamples 10"
    );
    assert_eq!(
        fields(with(json!({"compare": {"window": "24h", "step": "1s"}}))),
        ["spec.gates[0].compare.step"]
    );
    assert_eq!(
        fields(with(json!({"compare": {"confidencePercent": 100}}))),
        ["spec.gates[0].compare.confidencePercent"]
    );
}

/// A real gate and a dry-run gate on the canary, which bakes a minute.
fn with_dry_run(stage_gates: serde_json::Value, shadow: serde_json::Value) -> serde_json::Value {
    let mut shadow_gate = json!({
        "name": "shadow",
        "query": "sum(rate(latency{region=\"{{region}}\"}[1m]))",
        "condition": "result < 0.01",
        "interval": "10s",
        "dryRun": true,
    });
    for (key, value) in shadow.as_object().unwrap() {
        shadow_gate[key] = value.clone();
    }
    json!({
        "gates": [
            {"name": "errors", "query": "sum(rate(errors{region=\"{{region}}\"}[1m]))",
             "condition": "result < 0.01", "interval": "10s", "count": 2},
            shadow_gate,
        ],
        "stages": [
            {"name": "canary", "regions": {"names": ["c1"]}, "gates": stage_gates,
             "pause": {"duration": "1m"}},
            {"name": "rest", "regions": {"names": ["r1"]}},
        ]
    })
}

#[test]
fn a_failing_dry_run_gate_is_kept_and_counted_apart_but_never_holds_the_rollout() {
    let mut world = World::new(
        spec(with_dry_run(json!(["errors", "shadow"]), json!({}))),
        &["c1", "r1"],
    );
    world.metric =
        Box::new(|gate, _| QueryResult::Scalar(if gate == "shadow" { 0.5 } else { 0.0 }));
    let mut dry_run_failed = 0;
    let mut failed = 0;
    for _ in 0..40 {
        let decision = world.tick();
        dry_run_failed += decision.dry_run_samples_judged.failed;
        failed += decision.samples_judged.failed;
        world.advance(10);
    }
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    assert!(
        world
            .condition(conditions::HALTED)
            .is_none_or(|c| c.status != "True")
    );
    let shadow = world.status.stages[0]
        .gates
        .iter()
        .find(|window| window.name == "shadow")
        .unwrap();
    assert!(shadow.dry_run);
    assert_eq!(shadow.verdict, Some(GateVerdict::Failed));
    assert_eq!(
        shadow.samples[0].verdict,
        SampleVerdict::Failed,
        "kept, visible"
    );
    assert_eq!(shadow.samples[0].value.as_deref(), Some("0.5"));
    assert_eq!((dry_run_failed, failed), (1, 0), "counted apart");
    assert!(world.publishes().iter().any(|(region, ..)| region == "r1"));
}

#[test]
fn a_dry_run_gate_samples_while_its_stage_bakes_and_never_ends_the_bake() {
    // The stage's only gate is a dry run: it passes at once into its bake, where the dry
    // run is sampled; a dry run that would need 1000 samples delays nothing.
    let mut world = World::new(
        spec(with_dry_run(json!(["shadow"]), json!({"count": 1000}))),
        &["c1", "r1"],
    );
    world.tick(); // declares and publishes c1
    world.tick(); // verifying, then baking: no real gate to wait for
    assert_eq!(world.status.stages[0].state, StageState::Baking);
    for _ in 0..5 {
        world.advance(10);
        world.tick();
    }
    let shadow = &world.status.stages[0].gates[0];
    assert!(
        shadow.samples.len() >= 4,
        "sampled during the bake: {shadow:?}"
    );
    assert_eq!(shadow.verdict, Some(GateVerdict::Running));
    world.run(10, 10);
    assert_ne!(
        world.status.stages[0].state,
        StageState::Baking,
        "the bake ended"
    );
    assert!(world.publishes().iter().any(|(region, ..)| region == "r1"));
}
