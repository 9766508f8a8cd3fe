//! The rollout loop's promises after any sequence of edits and failures: declarations
//! (including a rejected value declared again, and edits while an expand or contract pass
//! waits), gate failures from a workload that fails only once it loads a bad value,
//! rollbacks, retries, aborts, regions that stop answering or leave the stages, and a
//! retarget. The engine decides; the reconcile's side runs on real parts: revisions are
//! declared and stored as the controller stores them (`RevisionState`), regions are real
//! last-writer-wins replicas merged with what `Publish` and `Rollback` carry, and the
//! evidence the engine reads is read back from those replicas.
//!
//! After every reconcile:
//! - a region the status marks as holding a pass of the current revision holds it:
//!   every value it declares (and, after an expand pass, every key it keeps);
//! - a Complete rollout's regions that answer hold exactly the current revision's data;
//! - a RolledBack rollout's regions that received anything since the stable revision
//!   completed hold exactly its data, never a value that was rolled back;
//! - no publish of a single or expand pass removes a live key, but for a removal that
//!   completed everywhere before (a region that lagged catches up in one write): every
//!   other removal goes through the expand pass first;
//! - a rollout whose target differs from its revisions' writes nothing.
//!
//! `make soak` runs it at 100,000 cases; `make test` at the default below.

#[path = "../../core/tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use configrollout::api::{
    ConfigRolloutSpec, ConfigRolloutStatus, RevisionStep, RolloutPhase, conditions,
};
use configrollout::crdt::{DigestKey, Replica, Stamp, WriterId, desired_digest};
use configrollout::engine::{
    ActOutcome, Action, AppliedRevision, ApprovalObservation, Control, DesiredRevision,
    FailedRegion, GateSampleObservation, Grant, Observations, RegionObservation, decide, gates_due,
    settle,
};
use configrollout::gates::QueryResult;
use configrollout::regions::publication::{RevisionState, evidence};
use proptest::prelude::*;
use serde_json::json;
use support::proptest_cases;

const REGIONS: [&str; 3] = ["canary", "prod-a", "prod-b"];
const KEYS: [&str; 3] = ["timeout", "rate", "mode"];
/// The value the workload refuses: a region whose `timeout` is this fails its gate.
const BAD: &str = "bad";

#[derive(Debug, Clone)]
enum Step {
    /// Time passes, then a reconcile.
    Tick(i64),
    /// The spec's data changes (a new revision).
    Declare(BTreeMap<String, String>),
    /// An operator aborts, or retries.
    Abort,
    Retry,
    /// A region's API server stops answering, or answers again.
    ToggleReachable(usize),
    /// The contract step of the current revision is approved.
    ApproveContract,
    /// `prod-b` leaves the stages (its Region relabelled, or the spec edited), or
    /// comes back.
    ToggleProdB,
    /// `spec.target` names another ConfigMap, or its own again.
    ToggleTarget,
}

fn data() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
        prop::sample::select(vec!["100", "200", BAD]).prop_map(str::to_owned),
        1..=3,
    )
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => prop::sample::select(vec![1i64, 5, 30, 120]).prop_map(Step::Tick),
        4 => data().prop_map(Step::Declare),
        1 => Just(Step::Abort),
        1 => Just(Step::Retry),
        2 => (0..REGIONS.len()).prop_map(Step::ToggleReachable),
        2 => Just(Step::ApproveContract),
        1 => Just(Step::ToggleProdB),
        1 => Just(Step::ToggleTarget),
    ]
}

/// The spec: a canary, then both prod regions (or only prod-a), each gated on the
/// region's error ratio; `rollback` picks `onFailure`, `contract_approval` whether the
/// contract step waits for a StageApproval.
fn spec_of(
    data: &BTreeMap<String, String>,
    rollback: bool,
    contract_approval: bool,
    with_prod_b: bool,
    target: &str,
) -> ConfigRolloutSpec {
    let prod: Vec<&str> = if with_prod_b {
        vec!["prod-a", "prod-b"]
    } else {
        vec!["prod-a"]
    };
    serde_json::from_value(json!({
        "target": {"namespace": "app", "name": target},
        "data": data,
        "gates": [{"name": "errors", "query": "errors{region=\"{{region}}\"}",
                   "condition": "result < 0.5", "interval": "5s", "count": 1}],
        "stages": [
            {"name": "canary", "regions": {"names": ["canary"]}, "gates": ["errors"]},
            {"name": "prod", "regions": {"names": prod}, "maxParallel": 2, "gates": ["errors"]},
        ],
        "progressDeadline": "5m",
        "onFailure": if rollback { "Rollback" } else { "Halt" },
        "strategy": {"contract": {"approval": if contract_approval { "Required" } else { "None" }}},
    }))
    .unwrap()
}

struct Sim {
    rollback: bool,
    contract_approval: bool,
    with_prod_b: bool,
    target: &'static str,
    desired: BTreeMap<String, String>,
    spec: ConfigRolloutSpec,
    status: ConfigRolloutStatus,
    generation: i64,
    now: DateTime<Utc>,
    clock_ms: u64,
    key: DigestKey,
    writer: WriterId,
    revisions: BTreeMap<String, RevisionState>,
    replicas: BTreeMap<&'static str, Replica>,
    reachable: BTreeMap<&'static str, bool>,
    /// Regions published to since the stable revision completed.
    received: BTreeSet<&'static str>,
    /// Regions whose error ratio is up whatever they run (a regional incident).
    incident: BTreeSet<&'static str>,
    approvals: Vec<ApprovalObservation>,
    control: Control,
}

impl Sim {
    fn new(initial: BTreeMap<String, String>, rollback: bool, contract_approval: bool) -> Self {
        let spec = spec_of(&initial, rollback, contract_approval, true, "limits");
        Sim {
            rollback,
            contract_approval,
            with_prod_b: true,
            target: "limits",
            desired: initial,
            spec,
            status: ConfigRolloutStatus::default(),
            generation: 1,
            now: support::t0(),
            clock_ms: 1_000_000,
            key: DigestKey::new(b"rollout-sequences-digest-key").unwrap(),
            writer: WriterId::rollout("team", "limits").unwrap(),
            revisions: BTreeMap::new(),
            replicas: REGIONS.iter().map(|r| (*r, Replica::new())).collect(),
            reachable: REGIONS.iter().map(|r| (*r, true)).collect(),
            received: BTreeSet::new(),
            incident: BTreeSet::new(),
            approvals: Vec::new(),
            control: Control::default(),
        }
    }

    fn respec(&mut self) {
        self.spec = spec_of(
            &self.desired,
            self.rollback,
            self.contract_approval,
            self.with_prod_b,
            self.target,
        );
        self.generation += 1;
    }

    fn fresh_stamp(&mut self) -> Stamp {
        self.clock_ms += 1;
        Stamp::new(self.clock_ms, 0, self.writer.clone())
    }

    fn current(&self) -> Option<&RevisionState> {
        self.revisions.get(self.status.revision.as_deref()?)
    }

    fn stable(&self) -> Option<&RevisionState> {
        self.revisions.get(self.status.stable_revision.as_deref()?)
    }

    fn live(&self, region: &str) -> BTreeMap<String, String> {
        self.replicas[region]
            .live()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn region_observation(&self, name: &'static str) -> RegionObservation {
        let reachable = self.reachable[name];
        let mut observation = RegionObservation {
            name: name.to_owned(),
            reachable,
            last_error: (!reachable).then(|| "connection refused".to_owned()),
            ..RegionObservation::default()
        };
        if let (true, Some(current)) = (reachable, self.current()) {
            let two_pass = current.removes_keys();
            let found = evidence(&self.replicas[name], current, two_pass, u64::MAX);
            observation.applied = found.applied.map(|step| AppliedRevision {
                revision: current.name.clone(),
                step,
                digest: format!("live-{name}"),
            });
            observation.rolled_back = found.rolled_back.then(|| current.name.clone());
        }
        observation
    }

    fn observations(&mut self) -> Observations {
        let samples: Vec<GateSampleObservation> = gates_due(&self.spec, &self.status, self.now)
            .into_iter()
            .map(|request| {
                let region = request.region.clone().unwrap_or_default();
                let bad = self
                    .replicas
                    .get(region.as_str())
                    .and_then(|replica| replica.get("timeout").and_then(|e| e.value()))
                    == Some(BAD)
                    || self.incident.contains(region.as_str());
                GateSampleObservation {
                    gate: request.gate,
                    stage: request.stage,
                    revision: request.revision,
                    region: request.region,
                    at: self.now,
                    evaluated_at: Some(self.now),
                    result: QueryResult::Scalar(if bad { 1.0 } else { 0.0 }),
                    comparison: None,
                }
            })
            .collect();
        let counts = self
            .current()
            .map(|current| current.changes_to(&self.desired, self.stable()));
        let fresh = self.fresh_stamp();
        Observations {
            generation: self.generation,
            desired: DesiredRevision {
                digest: desired_digest(&self.key, &self.desired),
                keys_set: counts.map_or(self.desired.len() as u32, |c| c.set),
                keys_removed: counts.map_or(0, |c| c.removed),
            },
            fresh_stamp: fresh.to_string(),
            regions: REGIONS
                .iter()
                .map(|name| self.region_observation(name))
                .collect(),
            gate_samples: samples,
            approvals: self.approvals.clone(),
            control: self.control.clone(),
            grant: Grant::own_namespace("app"),
            rollout_uid: "uid-1".into(),
            spec_author: Some("author".into()),
            ..Observations::default()
        }
    }

    /// Carries out the actions as the reconcile does, on the replicas and the store.
    fn act(&mut self, actions: &[Action]) -> Result<ActOutcome, TestCaseError> {
        let mut outcome = ActOutcome::default();
        for action in actions {
            match action {
                Action::DeclareRevision {
                    name,
                    stamp,
                    stable,
                    ..
                } => {
                    let number: u64 = name[1..].parse().unwrap();
                    let base = self
                        .revisions
                        .values()
                        .filter(|r| r.name[1..].parse::<u64>().unwrap() < number)
                        .max_by_key(|r| r.name[1..].parse::<u64>().unwrap())
                        .cloned();
                    let stable = stable.as_ref().map(|name| self.revisions[name].clone());
                    let revision = RevisionState::declare(
                        name,
                        base.as_ref(),
                        stable.as_ref(),
                        &self.desired,
                        stamp.parse().unwrap(),
                    );
                    self.revisions.insert(name.clone(), revision);
                }
                Action::Publish {
                    region,
                    revision,
                    step,
                } => {
                    let name = REGIONS.iter().find(|r| *r == region).copied().unwrap();
                    if !self.reachable[name] {
                        outcome.failed_regions.push(FailedRegion {
                            region: region.clone(),
                            error: "unreachable".into(),
                        });
                        continue;
                    }
                    let before = self.live(name);
                    let publication = self.revisions[revision].publication(*step);
                    self.replicas.get_mut(name).unwrap().apply(&publication);
                    self.received.insert(name);
                    if *step != RevisionStep::Contract {
                        // Only a removal that completed everywhere (at or before the
                        // stable revision) may reach a region that lagged, in one write
                        // with what replaced it; any other goes through expand first.
                        let settled_through = self.stable().map(|stable| stable.stamp.clone());
                        let after = self.live(name);
                        for key in before.keys().filter(|key| !after.contains_key(*key)) {
                            let settled = publication.get(key).is_some_and(|entry| {
                                settled_through
                                    .as_ref()
                                    .is_some_and(|through| entry.stamp <= *through)
                            });
                            prop_assert!(
                                settled,
                                "{step:?} publish of {revision} removed {key} in {name}"
                            );
                        }
                    }
                }
                Action::Rollback { region, revision } => {
                    let name = REGIONS.iter().find(|r| *r == region).copied().unwrap();
                    if !self.reachable[name] {
                        outcome.failed_regions.push(FailedRegion {
                            region: region.clone(),
                            error: "unreachable".into(),
                        });
                        continue;
                    }
                    let fresh = self.fresh_stamp();
                    let undo = self.revisions[revision]
                        .rollback(&self.replicas[name], fresh)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    self.replicas.get_mut(name).unwrap().apply(&undo);
                }
                _ => {}
            }
        }
        Ok(outcome)
    }

    fn tick(&mut self) -> Result<(), TestCaseError> {
        let observations = self.observations();
        let retargeted = self
            .status
            .target
            .as_deref()
            .is_some_and(|target| target != format!("app/{}", self.target));
        let decision = decide(&self.spec, self.status.clone(), &observations, self.now);
        if retargeted {
            let writes = decision.actions.iter().any(|action| {
                matches!(
                    action,
                    Action::Publish { .. }
                        | Action::Rollback { .. }
                        | Action::DeclareRevision { .. }
                )
            });
            prop_assert!(
                !writes,
                "a retargeted rollout wrote: {:?}",
                decision.actions
            );
            prop_assert!(decision.status.is_true(conditions::INVALID_SPEC));
        }
        let outcome = self.act(&decision.actions)?;
        let stable_before = self.status.stable_revision.clone();
        self.status = settle(decision.status, &outcome);
        if self.status.stable_revision != stable_before {
            // Every region of the plan runs the new stable revision.
            self.received.clear();
        }
        self.check()
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let Some(current) = self.current() else {
            return Ok(());
        };
        let revision = current.name.as_str();
        let desired = current.desired();
        // What the status marks, the region holds.
        for region in &self.status.regions {
            let Some(mark) = &region.materialized else {
                continue;
            };
            if mark.revision != revision {
                continue;
            }
            let name = REGIONS.iter().find(|r| **r == region.name).unwrap();
            let live = self.live(name);
            for (key, value) in &desired {
                prop_assert_eq!(
                    live.get(key),
                    Some(value),
                    "{} is marked {:?} of {} but holds {:?}",
                    name,
                    mark.step,
                    revision,
                    live
                );
            }
            if mark.step != Some(RevisionStep::Expand) {
                prop_assert_eq!(
                    &live,
                    &desired,
                    "{} marked {:?} of {}",
                    name,
                    mark.step,
                    revision
                );
            }
        }
        let invalid = self.status.is_true(conditions::INVALID_SPEC);
        match self.status.phase {
            Some(RolloutPhase::Complete) if !invalid => {
                // A region that does not answer is not known to hold anything (one that
                // joins a complete rollout gets its revision once it answers); the marks
                // above say what the status claims of it.
                for name in self
                    .planned()
                    .into_iter()
                    .filter(|name| self.reachable[name])
                {
                    prop_assert_eq!(
                        &self.live(name),
                        &desired,
                        "Complete, but {} does not hold {}",
                        name,
                        revision
                    );
                }
            }
            Some(RolloutPhase::RolledBack) => {
                let stable = self
                    .stable()
                    .map(RevisionState::desired)
                    .unwrap_or_default();
                // A region no revision reached since the stable one keeps what it held.
                for name in &self.received {
                    prop_assert_eq!(
                        &self.live(name),
                        &stable,
                        "RolledBack {}, but {} does not hold the stable revision {:?}",
                        revision,
                        name,
                        self.status.stable_revision
                    );
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn planned(&self) -> Vec<&'static str> {
        REGIONS
            .iter()
            .copied()
            .filter(|name| self.with_prod_b || *name != "prod-b")
            .collect()
    }

    fn apply(&mut self, step: &Step) -> Result<(), TestCaseError> {
        match step {
            Step::Tick(seconds) => {
                self.now += TimeDelta::seconds(*seconds);
                self.tick()?;
            }
            Step::Declare(data) => {
                self.desired = data.clone();
                self.respec();
                self.tick()?;
            }
            Step::Abort => {
                self.control.abort_requested_at = Some(self.now);
                self.tick()?;
            }
            Step::Retry => {
                self.control.retry_requested_at = Some(self.now);
                self.tick()?;
            }
            Step::ToggleReachable(index) => {
                let name = REGIONS[*index];
                let reachable = self.reachable.get_mut(name).unwrap();
                *reachable = !*reachable;
            }
            Step::ApproveContract => {
                let Some(revision) = self.status.revision.clone() else {
                    return Ok(());
                };
                let Some(digest) = self
                    .status
                    .history
                    .iter()
                    .find(|record| record.name == revision)
                    .and_then(|record| record.digest.clone())
                else {
                    return Ok(());
                };
                self.approvals.push(ApprovalObservation {
                    name: format!("contract-{revision}"),
                    rollout_uid: "uid-1".into(),
                    stage: "contract".into(),
                    revision,
                    revision_digest: digest,
                    stage_digest: configrollout::api::stage_digest(&self.spec, "contract").unwrap(),
                    approver: "approver".into(),
                    reason: None,
                    created_at: self.now,
                });
            }
            Step::ToggleProdB => {
                self.with_prod_b = !self.with_prod_b;
                self.respec();
            }
            Step::ToggleTarget => {
                self.target = if self.target == "limits" {
                    "other-limits"
                } else {
                    "limits"
                };
                self.respec();
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(300)))]

    #[test]
    fn the_loop_keeps_its_promises_over_any_sequence(
        initial in data(),
        rollback in any::<bool>(),
        contract_approval in any::<bool>(),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let mut sim = Sim::new(initial, rollback, contract_approval);
        sim.tick()?;
        for step in &steps {
            sim.apply(step)?;
        }
    }
}

/// The first trace, step by step: r1 `100` Complete; r2 `bad` fails at the
/// canary and is rolled back; r3 `200` passes the canary and fails in prod (prod-a's
/// workload turned bad by hand, as a regional incident would). Its rollback restores
/// `100` everywhere, never r2's rejected value.
#[test]
fn a_rollback_after_a_rollback_restores_the_last_complete_value() {
    let pairs = |value: &str| BTreeMap::from([("timeout".to_owned(), value.to_owned())]);
    let mut sim = Sim::new(pairs("100"), true, false);
    for _ in 0..8 {
        sim.apply(&Step::Tick(5)).unwrap();
    }
    assert_eq!(sim.status.phase, Some(RolloutPhase::Complete));
    sim.apply(&Step::Declare(pairs(BAD))).unwrap();
    for _ in 0..8 {
        sim.apply(&Step::Tick(5)).unwrap();
    }
    assert_eq!(sim.status.phase, Some(RolloutPhase::RolledBack));
    for name in REGIONS {
        assert_eq!(sim.live(name), pairs("100"), "{name}");
    }
    sim.apply(&Step::Declare(pairs("200"))).unwrap();
    while sim.status.current_stage.as_deref() != Some("prod") {
        sim.apply(&Step::Tick(5)).unwrap();
    }
    // A regional incident: prod-a's error ratio goes up whatever it runs.
    sim.incident.insert("prod-a");
    for _ in 0..10 {
        sim.apply(&Step::Tick(5)).unwrap();
    }
    assert_eq!(sim.status.phase, Some(RolloutPhase::RolledBack));
    for name in REGIONS {
        assert_eq!(sim.live(name), pairs("100"), "{name}");
    }
}
