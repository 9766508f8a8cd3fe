//! Properties of the rollout engine over random specs and random observation sequences,
//! checked at every step of a simulated world that applies the engine's actions.

mod support;

use std::collections::{BTreeMap, HashMap};

use configrollout_api::{
    Approval, ConfigRolloutSpec, GateVerdict, RevisionStep, RolloutPhase, StageState, conditions,
};
use configrollout_core::crdt::{
    Delta, Replica, Stamp, WriterId, compensating_delta, declare_revision, override_delta,
    split_expand_contract,
};
use configrollout_core::engine::{Action, Decision, Observations, decide};
use configrollout_core::gates::QueryResult;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{World, spec};

#[derive(Debug, Clone)]
struct GateShape {
    per_region: bool,
    interval_s: u32,
    count: u32,
    failure_limit: u32,
    inconclusive_limit: u32,
    initial_delay_s: Option<u32>,
}

#[derive(Debug, Clone)]
struct StageShape {
    regions: usize,
    max_parallel: u32,
    approval: bool,
    pause_s: Option<u32>,
    deadline_s: Option<u32>,
    gates: Vec<usize>,
}

#[derive(Debug, Clone)]
struct SpecShape {
    stages: Vec<StageShape>,
    gates: Vec<GateShape>,
    rollback: bool,
    expand_contract: bool,
    contract_approval: bool,
    consumers: bool,
}

fn gate_shape() -> impl Strategy<Value = GateShape> {
    (
        any::<bool>(),
        5u32..60,
        1u32..4,
        0u32..3,
        0u32..3,
        proptest::option::of(1u32..30),
    )
        .prop_map(
            |(
                per_region,
                interval_s,
                count,
                failure_limit,
                inconclusive_limit,
                initial_delay_s,
            )| {
                GateShape {
                    per_region,
                    interval_s,
                    count,
                    failure_limit,
                    inconclusive_limit,
                    initial_delay_s,
                }
            },
        )
}

fn stage_shape(gates: usize) -> impl Strategy<Value = StageShape> {
    (
        1usize..4,
        1u32..4,
        prop::bool::weighted(0.3),
        proptest::option::of(1u32..120),
        proptest::option::of(30u32..600),
        proptest::sample::subsequence((0..gates).collect::<Vec<_>>(), 0..=gates),
    )
        .prop_map(
            |(regions, max_parallel, approval, pause_s, deadline_s, gates)| StageShape {
                regions,
                max_parallel,
                approval,
                pause_s,
                deadline_s,
                gates,
            },
        )
}

fn spec_shape() -> impl Strategy<Value = SpecShape> {
    prop::collection::vec(gate_shape(), 0..3).prop_flat_map(|gates| {
        let count = gates.len();
        (
            Just(gates),
            prop::collection::vec(stage_shape(count), 1..4),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(gates, stages, rollback, expand_contract, contract_approval, consumers)| {
                    SpecShape {
                        stages,
                        gates,
                        rollback,
                        expand_contract,
                        contract_approval,
                        consumers,
                    }
                },
            )
    })
}

fn region_name(stage: usize, index: usize) -> String {
    format!("s{stage}-r{index}")
}

impl SpecShape {
    fn to_spec(&self) -> ConfigRolloutSpec {
        let gates: Vec<Value> = self
            .gates
            .iter()
            .enumerate()
            .map(|(index, gate)| {
                let query = if gate.per_region {
                    "errors{region=\"{{region}}\",rev=\"{{revision}}\"}"
                } else {
                    "sum(errors{stage=\"{{stage}}\"})"
                };
                let mut value = json!({
                    "name": format!("g{index}"),
                    "query": query,
                    "condition": "result < 0.05",
                    "interval": format!("{}s", gate.interval_s),
                    "count": gate.count,
                    "failureLimit": gate.failure_limit,
                    "inconclusiveLimit": gate.inconclusive_limit,
                });
                if let Some(delay) = gate.initial_delay_s {
                    value["initialDelay"] = json!(format!("{delay}s"));
                }
                value
            })
            .collect();
        let stages: Vec<Value> = self
            .stages
            .iter()
            .enumerate()
            .map(|(index, stage)| {
                let names: Vec<String> =
                    (0..stage.regions).map(|r| region_name(index, r)).collect();
                let mut value = json!({
                    "name": format!("stage{index}"),
                    "regions": {"names": names},
                    "maxParallel": stage.max_parallel,
                    "approval": if stage.approval { "Required" } else { "None" },
                    "gates": stage.gates.iter().map(|g| format!("g{g}")).collect::<Vec<_>>(),
                });
                if let Some(pause) = stage.pause_s {
                    value["pause"] = json!({"duration": format!("{pause}s")});
                }
                if let Some(deadline) = stage.deadline_s {
                    value["progressDeadline"] = json!(format!("{deadline}s"));
                }
                value
            })
            .collect();
        let mut value = json!({
            "stages": stages,
            "gates": gates,
            "onFailure": if self.rollback { "Rollback" } else { "Halt" },
            "strategy": {
                "expandContract": if self.expand_contract { "Auto" } else { "Disabled" },
                "contract": {"approval": if self.contract_approval { "Required" } else { "None" }},
            },
        });
        if self.consumers {
            value["consumers"] = json!([{"kind": "Deployment", "name": "api"}]);
        }
        spec(value)
    }

    fn regions(&self) -> Vec<String> {
        self.stages
            .iter()
            .enumerate()
            .flat_map(|(index, stage)| (0..stage.regions).map(move |r| region_name(index, r)))
            .collect()
    }
}

#[derive(Debug, Clone, Copy)]
enum MetricMode {
    Good,
    Bad,
    Empty,
    NotANumber,
}

#[derive(Debug, Clone)]
enum Event {
    Tick(u16),
    Reachable(usize, bool),
    Stuck(usize, bool),
    Approve { stage: usize, right_revision: bool },
    ApproveContract,
    NewRevision { removes_keys: bool },
    Pause(bool),
    Abort,
    Retry,
    Metric(MetricMode),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        8 => (1u16..120).prop_map(Event::Tick),
        1 => (0usize..12, any::<bool>()).prop_map(|(r, b)| Event::Reachable(r, b)),
        1 => (0usize..12, any::<bool>()).prop_map(|(r, b)| Event::Stuck(r, b)),
        2 => (0usize..4, any::<bool>())
            .prop_map(|(stage, right_revision)| Event::Approve { stage, right_revision }),
        1 => Just(Event::ApproveContract),
        1 => any::<bool>().prop_map(|removes_keys| Event::NewRevision { removes_keys }),
        1 => any::<bool>().prop_map(Event::Pause),
        1 => Just(Event::Abort),
        2 => Just(Event::Retry),
        2 => prop_oneof![
            Just(MetricMode::Good),
            Just(MetricMode::Bad),
            Just(MetricMode::Empty),
            Just(MetricMode::NotANumber),
        ]
        .prop_map(Event::Metric),
    ]
}

fn metric(mode: MetricMode) -> support::Metric {
    Box::new(move |_, _| match mode {
        MetricMode::Good => QueryResult::Scalar(0.0),
        MetricMode::Bad => QueryResult::Scalar(1.0),
        MetricMode::Empty => QueryResult::Empty,
        MetricMode::NotANumber => QueryResult::Scalar(f64::NAN),
    })
}

fn world_for(shape: &SpecShape) -> World {
    let regions = shape.regions();
    let names: Vec<&str> = regions.iter().map(String::as_str).collect();
    let mut world = World::new(shape.to_spec(), &names);
    if shape.consumers {
        for region in world.regions.values_mut() {
            region.consumers = 2;
            region.activates = true;
        }
    }
    world
}

/// Applies one event to the world (everything but the clock and the decision).
fn apply_event(world: &mut World, event: &Event, revision_counter: &mut u32) {
    let region_names: Vec<String> = world.regions.keys().cloned().collect();
    let pick = |index: usize| region_names[index % region_names.len()].clone();
    match event {
        Event::Tick(seconds) => world.advance(i64::from(*seconds)),
        Event::Reachable(index, reachable) => world.region(&pick(*index)).reachable = *reachable,
        Event::Stuck(index, stuck) => world.region(&pick(*index)).stuck = *stuck,
        Event::Approve {
            stage,
            right_revision,
        } => {
            let stage_name = format!("stage{}", stage % world.spec.stages.len());
            let revision = match (right_revision, world.status.revision.clone()) {
                (true, Some(revision)) => revision,
                _ => "r999".to_string(),
            };
            let name = format!("approval-{}", world.approvals.len());
            world.approve(&name, &stage_name, &revision);
        }
        Event::ApproveContract => {
            if let Some(revision) = world.status.revision.clone() {
                let name = format!("approval-{}", world.approvals.len());
                world.approve(&name, "contract", &revision);
            }
        }
        Event::NewRevision { removes_keys } => {
            *revision_counter += 1;
            world.desired.digest = format!("digest-{revision_counter}");
            world.desired.keys_removed = u32::from(*removes_keys);
        }
        Event::Pause(paused) => world.spec.paused = *paused,
        Event::Abort => world.control.abort_requested_at = Some(world.now),
        Event::Retry => world.control.retry_requested_at = Some(world.now),
        Event::Metric(mode) => world.metric = metric(*mode),
    }
}

fn stage_index_of(spec: &ConfigRolloutSpec) -> HashMap<String, usize> {
    spec.stages
        .iter()
        .enumerate()
        .flat_map(|(index, stage)| {
            stage
                .regions
                .names
                .iter()
                .map(move |name| (name.clone(), index))
        })
        .collect()
}

fn region_work(decision: &Decision) -> Vec<&Action> {
    decision
        .actions
        .iter()
        .filter(|action| matches!(action, Action::Publish { .. } | Action::Rollback { .. }))
        .collect()
}

/// Every safety property, checked on one decision. Returns the violations found.
fn check_decision(
    spec: &ConfigRolloutSpec,
    obs: &Observations,
    before: &configrollout_api::ConfigRolloutStatus,
    decision: &Decision,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<String> {
    let mut violations = Vec::new();
    let stages = stage_index_of(spec);
    let after = &decision.status;
    let revision = after.revision.clone().unwrap_or_default();

    for action in &decision.actions {
        if let Action::Publish { region, .. } = action {
            let stage = stages[region];
            // Stage order: every earlier stage of this pass has passed.
            for earlier in 0..stage {
                if after.stages[earlier].state != StageState::Passed {
                    violations.push(format!(
                        "publish to {region} (stage {stage}) while stage {earlier} is {:?}",
                        after.stages[earlier].state
                    ));
                }
            }
            // Approval: a stage that needs one has a matching StageApproval.
            if spec.stages[stage].approval == Approval::Required {
                let digest = after
                    .history
                    .iter()
                    .find(|record| record.name == revision)
                    .and_then(|record| record.digest.as_deref());
                let approved = obs.approvals.iter().any(|approval| {
                    approval.stage == spec.stages[stage].name
                        && approval.revision == revision
                        && Some(approval.revision_digest.as_str()) == digest
                        && approval.rollout_uid == obs.rollout_uid
                });
                if !approved {
                    violations.push(format!("publish to {region} without approval"));
                }
            }
        }
    }

    // Paused or halted: no region work at all.
    if spec.paused && !region_work(decision).is_empty() {
        violations.push(format!("paused but acted: {:?}", region_work(decision)));
    }
    if before.phase == Some(RolloutPhase::Halted)
        && after.phase == Some(RolloutPhase::Halted)
        && !region_work(decision).is_empty()
    {
        violations.push(format!("halted but acted: {:?}", region_work(decision)));
    }

    // A stage that needs approval only leaves Pending with a matching approval recorded.
    for (index, stage) in spec.stages.iter().enumerate() {
        let state = after.stages.get(index).map(|s| s.state);
        let started = !matches!(
            state,
            None | Some(StageState::Pending | StageState::AwaitingApproval)
        );
        if stage.approval == Approval::Required && started {
            let record = after.stages[index].approval.as_ref();
            let matching = record.is_some_and(|record| {
                obs.approvals.iter().any(|approval| {
                    approval.name == record.name
                        && approval.stage == stage.name
                        && approval.revision == revision
                })
            });
            if !matching {
                violations.push(format!("stage {} started without its approval", stage.name));
            }
        }
    }

    // Gates fail closed: a passed window never exceeds a limit.
    for stage in &after.stages {
        for window in &stage.gates {
            if window.verdict != Some(GateVerdict::Passed) {
                continue;
            }
            let Some(gate) = spec.gates.iter().find(|gate| gate.name == window.name) else {
                continue;
            };
            if window.inconclusives > gate.inconclusive_limit
                || window.failures > gate.failure_limit
                || window.successes < gate.count
            {
                violations.push(format!("gate passed beyond its limits: {window:?}"));
            }
        }
    }

    // Restart safety: the same observations against the returned status add no work.
    let again = decide(spec, after.clone(), obs, now);
    if !region_work(&again).is_empty() {
        violations.push(format!("restart re-emitted {:?}", region_work(&again)));
    }
    violations
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(support::proptest_cases(200)))]

    /// No region of stage k+1 receives a publish before stage k passed; a halted or paused
    /// rollout publishes nothing; a stage needing approval starts only after a matching
    /// StageApproval for that stage and revision; a status fed back with the same
    /// observations produces no new publish; a gate never passes beyond its limits.
    #[test]
    fn the_engine_keeps_its_safety_rules_over_random_runs(
        shape in spec_shape(),
        events in prop::collection::vec(event(), 1..80),
    ) {
        let mut world = world_for(&shape);
        let mut revision_counter = 1;
        let mut violations = Vec::new();
        for event in &events {
            apply_event(&mut world, event, &mut revision_counter);
            let spec = world.spec.clone();
            let now = world.now;
            world.tick_checked(|obs, before, decision| {
                violations.extend(check_decision(&spec, obs, before, decision, now));
            });
            prop_assert!(violations.is_empty(), "after {:?}: {:?}", event, violations);
        }
    }

    /// No state waits without a deadline or a person: after any run, left alone while
    /// time passes (whatever the regions and the metric are doing then), every rollout
    /// ends Complete, Halted or RolledBack, or waits for a person (an approval, or
    /// `spec.paused`), within its deadlines. Nothing is still Progressing, RollingBack or
    /// Pending at the end of a horizon far past every deadline, pause and gate window.
    #[test]
    fn every_run_ends_or_waits_for_a_person(
        shape in spec_shape(),
        events in prop::collection::vec(event(), 1..60),
    ) {
        let mut world = world_for(&shape);
        let mut revision_counter = 1;
        for event in &events {
            apply_event(&mut world, event, &mut revision_counter);
            world.tick();
        }
        // Left alone: six simulated hours, looked at as often as the engine asks (at
        // least every 10 minutes, as the idle resync does).
        let horizon = world.now + chrono::TimeDelta::hours(6);
        while world.now < horizon {
            let decision = world.tick();
            let wait = decision
                .requeue_after
                .map_or(600, |after| after.as_secs().clamp(1, 600));
            world.advance(i64::try_from(wait).unwrap_or(600));
        }
        let phase = world.status.phase;
        let waits_for_a_person = matches!(
            phase,
            Some(RolloutPhase::AwaitingApproval) | Some(RolloutPhase::Paused)
        ) || world.spec.paused
            || world.condition_true(conditions::INVALID_SPEC);
        let ended = matches!(
            phase,
            Some(RolloutPhase::Complete | RolloutPhase::Halted | RolloutPhase::RolledBack)
        );
        prop_assert!(
            ended || waits_for_a_person,
            "still {:?} six hours after {:?}; stages {:?}",
            phase,
            events,
            world.status.stages.iter().map(|stage| stage.state).collect::<Vec<_>>()
        );
    }

    /// Progress is possible: with healthy metrics, reachable regions, approvals given and
    /// time passing, every random rollout completes.
    #[test]
    fn a_healthy_rollout_always_completes(shape in spec_shape()) {
        let mut shape = shape;
        // Deadlines shorter than a gate window would fail a healthy rollout by design.
        for stage in &mut shape.stages {
            stage.deadline_s = None;
        }
        let mut world = world_for(&shape);
        // The first reconcile declares r1; approvers then name it, as status shows it.
        world.tick();
        for stage in 0..shape.stages.len() {
            world.approve(&format!("a{stage}"), &format!("stage{stage}"), "r1");
        }
        world.approve("contract", "contract", "r1");
        for _ in 0..400 {
            world.tick();
            if world.status.phase == Some(RolloutPhase::Complete) {
                break;
            }
            world.advance(15);
        }
        prop_assert_eq!(world.status.phase, Some(RolloutPhase::Complete), "{:?}", world.status);
    }
}

// --- Rollback with real CRDT replicas ------------------------------------------------

#[derive(Debug, Clone)]
struct OverrideShape {
    region: usize,
    key: usize,
    /// Written before (false) or after (true) the revision's stamp.
    after_revision: bool,
    /// Step after which the override reaches the region.
    at_step: usize,
    removes: bool,
}

fn override_shape() -> impl Strategy<Value = OverrideShape> {
    (
        0usize..12,
        0usize..6,
        any::<bool>(),
        0usize..20,
        any::<bool>(),
    )
        .prop_map(
            |(region, key, after_revision, at_step, removes)| OverrideShape {
                region,
                key,
                after_revision,
                at_step,
                removes,
            },
        )
}

fn data(pairs: &[(usize, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| (format!("k{key}"), (*value).to_string()))
        .collect()
}

fn stamp(wall_ms: u64, writer: &WriterId) -> Stamp {
    Stamp::new(wall_ms, 0, writer.clone())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(support::proptest_cases(100)))]

    /// Whatever overrides reach a region and whenever, the compensating delta the engine's
    /// Rollback asks for never changes a key whose winning write is not the revision's.
    #[test]
    fn a_rollback_never_reverts_a_key_whose_winning_write_is_not_this_revisions(
        shape in spec_shape(),
        overrides in prop::collection::vec(override_shape(), 0..12),
        failing_stage in 0usize..4,
    ) {
        let mut shape = shape;
        shape.rollback = true;
        for stage in &mut shape.stages {
            stage.approval = false;
            stage.deadline_s = Some(60);
            stage.gates.clear();
        }
        let mut world = world_for(&shape);
        // Make one region never materialize so its stage fails and the rollout rolls back.
        let stuck = region_name(failing_stage % shape.stages.len(), 0);
        world.region(&stuck).stuck = true;
        world.desired.keys_removed = 1;

        let rollout = WriterId::rollout("app", "demo").unwrap();
        let operator = WriterId::override_by("oncall").unwrap();
        let base = data(&[(0, "a"), (1, "b"), (2, "c"), (3, "d")]);
        let desired = data(&[(0, "A"), (1, "b"), (2, "C"), (4, "e")]);
        let base_delta = declare_revision(&BTreeMap::new(), &base, stamp(1_000, &rollout));
        let revision = declare_revision(&base, &desired, stamp(2_000, &rollout));
        let (expand, contract) = split_expand_contract(&revision);
        let region_names: Vec<String> = world.regions.keys().cloned().collect();
        let mut replicas: BTreeMap<String, Replica> = region_names
            .iter()
            .map(|name| {
                let mut replica = Replica::new();
                replica.apply(&base_delta);
                (name.clone(), replica)
            })
            .collect();
        let mut fresh_ms = 3_000;

        for step_index in 0..30 {
            for shape in overrides.iter().filter(|o| o.at_step == step_index) {
                let region = &region_names[shape.region % region_names.len()];
                let wall = if shape.after_revision { 2_500 } else { 1_500 } + step_index as u64;
                let value = (!shape.removes).then(|| format!("override-{step_index}"));
                let delta = override_delta(
                    stamp(wall, &operator),
                    [(format!("k{}", shape.key), value)],
                )
                .unwrap();
                replicas.get_mut(region).unwrap().apply(&delta);
            }
            let decision = world.tick();
            for action in &decision.actions {
                match action {
                    Action::Publish { region, step, .. } => {
                        if world.regions[region].stuck || !world.regions[region].reachable {
                            continue;
                        }
                        let delta: &Delta = match step {
                            RevisionStep::Expand => &expand,
                            RevisionStep::Contract => &contract,
                            RevisionStep::Single => &revision,
                        };
                        replicas.get_mut(region).unwrap().apply(delta);
                    }
                    Action::Rollback { region, .. } => {
                        let replica = replicas.get_mut(region).unwrap();
                        fresh_ms += 1;
                        let compensation =
                            compensating_delta(replica, &revision, &base, stamp(fresh_ms, &rollout))
                                .unwrap();
                        let before = replica.clone();
                        replica.apply(&compensation);
                        for (key, entry) in before.iter() {
                            let own_write = revision.get(key) == Some(entry);
                            if !own_write {
                                prop_assert_eq!(
                                    replica.get(key), Some(entry),
                                    "rollback in {} changed {} written by someone else", region, key
                                );
                            }
                        }
                        for (key, written) in revision.iter() {
                            if before.get(key) == Some(written) {
                                prop_assert_eq!(
                                    replica.get(key).and_then(|e| e.value()),
                                    base.get(key).map(String::as_str),
                                    "rollback in {} did not restore {}", region, key
                                );
                            }
                        }
                    }
                    _ => {}
                }
            }
            world.advance(20);
        }
        prop_assert!(
            matches!(world.status.phase, Some(RolloutPhase::RollingBack | RolloutPhase::RolledBack)),
            "{:?}", world.status.phase
        );
    }
}
