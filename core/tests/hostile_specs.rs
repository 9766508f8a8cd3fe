//! No spec stops the engine. Specs are drawn from the CRD's own bounds and past them
//! (every duration and count at its floor, at its ceiling, one past it and far past it;
//! the longest names; every selector operator and hostile ones; unicode and control
//! characters), then `validate` and the engine run over simulated hours, days and years,
//! from an ordinary start and from the last second a status can hold. Nothing may panic,
//! and a spec `validate` refuses must never reach a region.
//!
//! `make soak` runs it at 100,000 cases; `make test` at the default below.

mod support;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use configrollout_api::{ConfigRolloutSpec, conditions};
use configrollout_core::engine::{Action, validate};
use configrollout_core::gates::QueryResult;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{World, proptest_cases};

const REGIONS: [&str; 3] = ["r1", "r2", "r3"];

/// Duration texts: ordinary, at each ceiling, just past it, far past what any clock holds,
/// past what a u64 of milliseconds holds, malformed, and arbitrary.
fn duration_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "1ms", "1s", "5s", "1m", "1h30m", "24h", "24h1ms", "8760h", "8760h1ms",
            "525600m", "999999999999h", "2562048h", "18446744073709551615ms",
            "18446744073709551616ms", "99999999999h99999999999h", "0s", "0ms",
        ])
        .prop_map(str::to_owned),
        2 => "[0-9]{1,20}(ms|s|m|h)",
        1 => prop::sample::select(vec!["", "1.5h", "-5m", "30", "5d", "h"]).prop_map(str::to_owned),
        1 => "\\PC{0,32}",
    ]
}

/// Counts: the floors, the ceilings, one past each, the ends of `i32`.
fn count() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => prop::sample::select(vec![
            i64::from(i32::MIN), -1, 0, 1, 2, 3, 1000, 1001, i64::from(i32::MAX),
        ]),
        1 => any::<i32>().prop_map(i64::from),
    ]
}

/// Names: ordinary, the longest a label or subdomain may be, and text a person could be
/// fooled by (control characters, bidirectional overrides, other scripts).
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        // The names of the rollout under way in the replacement property, so that the
        // replacement sometimes keeps its stages and gates (and their windows).
        2 => prop::sample::select(vec!["errors", "canary", "rest"]).prop_map(str::to_owned),
        4 => "[a-z][a-z0-9-]{0,10}",
        1 => Just("a".repeat(63)),
        1 => Just(format!("{}.{}", "b".repeat(126), "c".repeat(126))),
        1 => Just("evil\u{1b}[2J\rname\u{202e}".to_owned()),
        1 => "\\PC{1,70}",
    ]
}

fn operator() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist"]).prop_map(str::to_owned),
        1 => Just("In\u{1b}[2J\rdata: ALL COMPLETE\r".to_owned()),
        1 => "\\PC{0,20}",
    ]
}

fn gate() -> impl Strategy<Value = Value> {
    (
        name(),
        prop_oneof![
            Just("up{region=\"{{region}}\"}".to_owned()),
            Just("sum(rate(errors_total[5m]))".to_owned()),
            "\\PC{1,40}",
        ],
        prop_oneof![
            Just("result < 0.01".to_owned()),
            Just("all(result < 0.5) or any(result >= 1e308)".to_owned()),
            "\\PC{1,40}",
        ],
        duration_text(),
        prop::option::of(duration_text()),
        (count(), count(), count(), count()),
    )
        .prop_map(
            |(
                name,
                query,
                condition,
                interval,
                initial_delay,
                (n, failures, inconclusive, errors),
            )| {
                let mut gate = json!({
                    "name": name, "query": query, "condition": condition, "interval": interval,
                    "count": n, "failureLimit": failures, "inconclusiveLimit": inconclusive,
                    "consecutiveErrorLimit": errors,
                });
                if let Some(delay) = initial_delay {
                    gate["initialDelay"] = json!(delay);
                }
                gate
            },
        )
}

fn stage(gate_names: Vec<String>) -> impl Strategy<Value = Value> {
    (
        name(),
        prop_oneof![
            3 => prop::sample::subsequence(REGIONS.to_vec(), 1..=3)
                .prop_map(|names| json!({"names": names})),
            1 => (operator(), name()).prop_map(|(operator, value)| json!({"selector": {
                "matchExpressions": [{"key": "tier", "operator": operator, "values": [value]}]
            }})),
        ],
        count(),
        any::<bool>(),
        prop::option::of(duration_text()),
        prop::option::of(duration_text()),
        prop::sample::subsequence(gate_names.clone(), 0..=gate_names.len()),
    )
        .prop_map(
            |(name, regions, max_parallel, approval, pause, deadline, gates)| {
                let mut stage = json!({
                    "name": name, "regions": regions, "maxParallel": max_parallel,
                    "approval": if approval { "Required" } else { "None" }, "gates": gates,
                });
                if let Some(pause) = pause {
                    stage["pause"] = json!({"duration": pause});
                }
                if let Some(deadline) = deadline {
                    stage["progressDeadline"] = json!(deadline);
                }
                stage
            },
        )
}

fn hostile_spec() -> impl Strategy<Value = Value> {
    prop::collection::vec(gate(), 0..4).prop_flat_map(|gates| {
        let names: Vec<String> = gates
            .iter()
            .filter_map(|gate| gate["name"].as_str().map(str::to_owned))
            .collect();
        (
            Just(gates),
            prop::collection::vec(stage(names), 1..4),
            prop::option::of(duration_text()),
            prop::option::of(duration_text()),
            count(),
            any::<bool>(),
            prop::collection::btree_map("[a-z]{1,8}", "\\PC{0,16}", 0..4),
        )
            .prop_map(
                |(gates, stages, deadline, contract_pause, history, rollback, data)| {
                    let mut spec = json!({
                        "target": {"namespace": "app", "name": "app-config"},
                        "data": data,
                        "stages": stages,
                        "gates": gates,
                        "onFailure": if rollback { "Rollback" } else { "Halt" },
                        "revisionHistoryLimit": history,
                    });
                    if let Some(deadline) = deadline {
                        spec["progressDeadline"] = json!(deadline);
                    }
                    if let Some(pause) = contract_pause {
                        spec["strategy"] = json!({"contract": {"pause": {"duration": pause}}});
                    }
                    spec
                },
            )
    })
}

/// Steps of the fake clock: a second, a minute, an hour, a month, past a year.
fn clock_steps() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(
        prop::sample::select(vec![1, 59, 3_600, 30 * 86_400, 400 * 86_400]),
        1..25,
    )
}

/// Where the clock starts: an ordinary day, or the last second an API `Time` holds.
fn start() -> impl Strategy<Value = DateTime<Utc>> {
    prop::sample::select(vec![
        support::t0(),
        Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59)
            .single()
            .unwrap(),
    ])
}

fn parse(spec: Value) -> Option<ConfigRolloutSpec> {
    // Values outside the Rust types (a count past i32) never reach the engine: the
    // apiserver refuses them by the schema's format, and the controller's decode too.
    serde_json::from_value(spec).ok()
}

/// Runs the world over `steps`, ticking once per step; the clock saturates at the end of
/// time instead of overflowing in the test itself.
fn run(world: &mut World, steps: &[i64], failing: bool) {
    if failing {
        world.metric = Box::new(|_, _| QueryResult::Scalar(1.0));
    }
    for step in steps {
        world.tick();
        world.now = world
            .now
            .checked_add_signed(TimeDelta::seconds(*step))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
    }
    world.tick();
}

fn region_writes(world: &World) -> usize {
    world
        .log
        .iter()
        .filter(|(_, action)| matches!(action, Action::Publish { .. } | Action::Rollback { .. }))
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(256)))]

    /// Any spec, from any start, over any steps: no panic; a refused spec writes nothing
    /// and says InvalidSpec, naming the field.
    #[test]
    fn no_spec_panics_the_engine_and_a_refused_one_writes_nothing(
        spec in hostile_spec(),
        steps in clock_steps(),
        start in start(),
        failing in any::<bool>(),
    ) {
        let Some(spec) = parse(spec) else { return Ok(()) };
        let errors = validate(&spec);
        let mut world = World::new(spec, &REGIONS);
        world.now = start;
        run(&mut world, &steps, failing);
        if !errors.is_empty() {
            prop_assert_eq!(region_writes(&world), 0, "a refused spec reached a region: {:?}", errors);
            prop_assert!(world.condition_true(conditions::INVALID_SPEC));
            for error in &errors {
                prop_assert!(error.field.starts_with("spec."), "{}", error);
            }
        }
    }

    /// A rollout under way whose durations and counts are then edited to anything (an
    /// edit, or an object stored before the ceilings existed) keeps its stages and gate
    /// windows, and is read, sampled and decided without a panic.
    #[test]
    fn a_rollout_under_way_survives_any_edit_of_its_timings(
        edited in (duration_text(), duration_text(), duration_text(), duration_text(), count(), count()),
        // A few seconds: the edit lands while a gate window is open or a stage bakes.
        before in prop::collection::vec(1i64..3, 1..6),
        after in clock_steps(),
        start in start(),
        failing in any::<bool>(),
    ) {
        let sane = gated(("1s", "1s", "1m", "10m"), 2, 1);
        let (interval, delay, pause, deadline, n, parallel) = edited;
        let Some(edited) = parse(gated_value((&interval, &delay, &pause, &deadline), n, parallel)) else {
            return Ok(());
        };
        let mut world = World::new(sane, &REGIONS);
        world.now = start;
        run(&mut world, &before, failing);
        world.spec = edited;
        world.generation += 1;
        run(&mut world, &after, failing);
    }

    /// The same with any spec at all in place of the edit.
    #[test]
    fn a_rollout_under_way_survives_any_replacement_of_its_spec(
        hostile in hostile_spec(),
        before in prop::collection::vec(1i64..3, 1..6),
        after in clock_steps(),
        start in start(),
        failing in any::<bool>(),
    ) {
        let Some(hostile) = parse(hostile) else { return Ok(()) };
        let mut world = World::new(gated(("1s", "1s", "1m", "10m"), 2, 1), &REGIONS);
        world.now = start;
        run(&mut world, &before, failing);
        world.spec = hostile;
        world.generation += 1;
        run(&mut world, &after, failing);
    }
}

/// A two-stage rollout gated on `errors` with these timings (interval, initial delay,
/// canary pause, deadline), gate count and maxParallel.
fn gated_value(timings: (&str, &str, &str, &str), count: i64, max_parallel: i64) -> Value {
    let (interval, delay, pause, deadline) = timings;
    json!({
        "target": {"namespace": "app", "name": "app-config"},
        "data": {"k": "v"},
        "gates": [{"name": "errors", "query": "up{region=\"{{region}}\"}",
                   "condition": "result < 0.5", "interval": interval, "initialDelay": delay,
                   "count": count}],
        "stages": [
            {"name": "canary", "regions": {"names": ["r1"]}, "gates": ["errors"],
             "pause": {"duration": pause}, "progressDeadline": deadline},
            {"name": "rest", "regions": {"names": ["r2", "r3"]}, "gates": ["errors"],
             "maxParallel": max_parallel},
        ],
        "progressDeadline": deadline,
        "strategy": {"contract": {"pause": {"duration": pause}}},
        "onFailure": "Rollback",
    })
}

fn gated(timings: (&str, &str, &str, &str), count: i64, max_parallel: i64) -> ConfigRolloutSpec {
    serde_json::from_value(gated_value(timings, count, max_parallel)).unwrap()
}

/// A query, condition or activation query holding a control character or a bidirectional
/// override is refused, naming the field and the code point and never quoting the text,
/// while a multi-line query (tabs, line feeds) is fine.
#[test]
fn tenant_text_with_control_characters_is_refused_without_being_echoed() {
    let ordinary = ("30s", "0s", "0s", "1h");
    let mut multiline = gated_value(ordinary, 3, 1);
    multiline["gates"][0]["query"] = json!("sum(\n\tup{region=\"{{region}}\"}\n)");
    let spec: ConfigRolloutSpec = serde_json::from_value(multiline).unwrap();
    assert_eq!(validate(&spec), Vec::new());

    for (field, pointer, text) in [
        (
            "spec.gates[0].query",
            "/gates/0/query",
            "up\u{1b}[2J\rdata: ALL COMPLETE",
        ),
        (
            "spec.gates[0].condition",
            "/gates/0/condition",
            "result < 0.5\u{202e}",
        ),
        (
            "spec.consumers[0].activationQuery",
            "/consumers/0/activationQuery",
            "count(x)\u{7}",
        ),
    ] {
        let mut value = gated_value(ordinary, 3, 1);
        value["consumers"] = json!([{"kind": "Deployment", "name": "app",
                                     "activationQuery": "count(up)"}]);
        *value.pointer_mut(pointer).unwrap() = json!(text);
        let spec: ConfigRolloutSpec = serde_json::from_value(value).unwrap();
        let errors = validate(&spec);
        assert_eq!(errors.len(), 1, "{field}: {errors:?}");
        assert_eq!(errors[0].field, field);
        assert!(errors[0].message.contains("U+"), "{}", errors[0].message);
        assert!(
            !errors[0]
                .to_string()
                .chars()
                .any(configrollout_api::text::is_unsafe_to_show),
            "{field}: the message quotes the text"
        );
    }
}
