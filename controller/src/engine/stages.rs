//! Stages run in order. A stage waits for its approval (if required), then updates at
//! most `maxParallel` of its regions at a time, then verifies its gates once every region
//! is done, then bakes for `pause`, then passes and the next stage starts. A stage that
//! has not passed `progressDeadline` after it started (or after the rollout was last
//! resumed or retried) fails, unreachable regions included.

use chrono::{DateTime, Utc};

use crate::api::{RolloutPhase, StageState, StageStatus, conditions};

use super::clock::{from_time, spec_duration, to_time};
use super::gate_windows::{self, StageGates};
use super::{EventType, Step, approvals, expand_contract, failure, regions};

/// Runs the stage machine until it blocks; at most two passes (expand, then contract).
pub(super) fn advance(step: &mut Step<'_>) {
    align(step);
    for _ in 0..2 {
        if !run_stages(step) {
            return;
        }
        if !expand_contract::finish_pass(step) {
            return;
        }
    }
}

/// Keeps one stage status per spec stage, in spec order, even if stages were edited.
fn align(step: &mut Step<'_>) {
    let aligned = step
        .status
        .stages
        .iter()
        .map(|stage| stage.name.as_str())
        .eq(step.spec.stages.iter().map(|stage| stage.name.as_str()));
    if aligned {
        return;
    }
    let mut previous = std::mem::take(&mut step.status.stages);
    step.status.stages = step
        .spec
        .stages
        .iter()
        .map(|stage| {
            previous
                .iter()
                .position(|old| old.name == stage.name)
                .map(|position| previous.swap_remove(position))
                .unwrap_or_else(|| StageStatus {
                    name: stage.name.clone(),
                    ..StageStatus::default()
                })
        })
        .collect();
}

/// The regions of the stage, in rollout order, that are not done with the pass.
pub(super) fn pending_regions(step: &Step<'_>, index: usize) -> Vec<String> {
    let Some(revision) = step.revision() else {
        return Vec::new();
    };
    let pass = step.pass();
    let has_consumers = !step.spec.consumers.is_empty();
    step.plan.stages[index]
        .iter()
        .filter(|name| {
            !step
                .status
                .regions
                .iter()
                .find(|region| region.name == **name)
                .is_some_and(|region| regions::region_done(region, revision, pass, has_consumers))
        })
        .map(|name| (*name).to_owned())
        .collect()
}

/// Returns true when every stage of the pass has passed.
fn run_stages(step: &mut Step<'_>) -> bool {
    for index in 0..step.spec.stages.len() {
        loop {
            match step.status.stages[index].state {
                StageState::Passed => break,
                StageState::Failed => {
                    step.status.current_stage = Some(step.spec.stages[index].name.clone());
                    return false;
                }
                StageState::Pending | StageState::AwaitingApproval => {
                    step.status.current_stage = Some(step.spec.stages[index].name.clone());
                    if !approvals::stage_may_start(step, index) {
                        step.status.stages[index].state = StageState::AwaitingApproval;
                        step.status.phase = Some(RolloutPhase::AwaitingApproval);
                        return false;
                    }
                    start(step, index);
                }
                StageState::Progressing => {
                    step.status.current_stage = Some(step.spec.stages[index].name.clone());
                    if !approvals::recheck_running(step, index) {
                        step.status.phase = Some(RolloutPhase::AwaitingApproval);
                        return false;
                    }
                    let pending = pending_regions(step, index);
                    if !pending.is_empty() {
                        step.poll_regions();
                        check_deadline(step, index, &pending);
                        return false;
                    }
                    let stage = &mut step.status.stages[index];
                    stage.state = StageState::Verifying;
                    stage.verified_at = Some(to_time(step.now));
                    gate_windows::open_windows(step, index);
                }
                StageState::Verifying => match gate_windows::judge(step, index) {
                    StageGates::Failed(message) => {
                        failure::fail(step, index, "GateFailed", message);
                        return false;
                    }
                    StageGates::Running => {
                        check_deadline(step, index, &[]);
                        return false;
                    }
                    StageGates::Passed => {
                        if step.spec.stages[index].pause.is_some() {
                            step.status.stages[index].state = StageState::Baking;
                        } else {
                            pass(step, index);
                        }
                    }
                },
                StageState::Baking => {
                    let bake_end = bake_end(step, index);
                    if step.now < bake_end {
                        step.wake_at(bake_end);
                        return false;
                    }
                    pass(step, index);
                }
            }
        }
    }
    true
}

fn start(step: &mut Step<'_>, index: usize) {
    let stage = &mut step.status.stages[index];
    stage.state = StageState::Progressing;
    stage.started_at = Some(to_time(step.now));
    let message = format!(
        "stage {} of {} started ({:?} pass, {} regions, at most {} at once)",
        step.spec.stages[index].name,
        step.revision().unwrap_or_default(),
        step.pass(),
        step.plan.stages[index].len(),
        step.spec.stages[index].max_parallel.max(1),
    );
    step.event(EventType::Normal, "StageStarted", message);
}

fn pass(step: &mut Step<'_>, index: usize) {
    let stage = &mut step.status.stages[index];
    stage.state = StageState::Passed;
    stage.passed_at = Some(to_time(step.now));
    let message = format!(
        "stage {} of {} passed ({:?} pass)",
        step.spec.stages[index].name,
        step.revision().unwrap_or_default(),
        step.pass(),
    );
    step.event(EventType::Normal, "StagePassed", message);
}

/// The bake starts when the gates passed (the latest counted sample), or when the stage
/// was verified if it has no gates.
fn bake_end(step: &Step<'_>, index: usize) -> DateTime<Utc> {
    let stage = &step.status.stages[index];
    let verified_at = stage
        .verified_at
        .as_ref()
        .map(from_time)
        .unwrap_or(step.now);
    let gates_passed_at = stage
        .gates
        .iter()
        .filter_map(|window| window.samples.last())
        .map(|sample| from_time(&sample.at))
        .max()
        .unwrap_or(verified_at)
        .max(verified_at);
    let pause = step.spec.stages[index]
        .pause
        .as_ref()
        .and_then(|pause| spec_duration(&pause.duration))
        .unwrap_or_default();
    gates_passed_at + pause
}

/// When the stage's deadline clock started: its start, or the last resume from a pause,
/// a retry after a halt or a fix of an invalid spec, whichever is later (a rollout that
/// could not move is not late).
fn deadline_clock_start(step: &Step<'_>, index: usize) -> Option<DateTime<Utc>> {
    let started = step.status.stages[index]
        .started_at
        .as_ref()
        .map(from_time)?;
    if step.resumed_now {
        return Some(step.now.max(started));
    }
    let resumed = step
        .status
        .conditions
        .iter()
        .filter(|condition| {
            [
                conditions::PAUSED,
                conditions::HALTED,
                conditions::INVALID_SPEC,
            ]
            .contains(&condition.type_.as_str())
                && condition.status == "False"
        })
        .map(|condition| from_time(&condition.last_transition_time))
        .max();
    Some(resumed.map_or(started, |resumed| resumed.max(started)))
}

fn check_deadline(step: &mut Step<'_>, index: usize, pending: &[String]) {
    let Some(deadline) = step.spec.stages[index]
        .progress_deadline
        .as_deref()
        .and_then(spec_duration)
    else {
        return;
    };
    let Some(clock_start) = deadline_clock_start(step, index) else {
        return;
    };
    let expires = clock_start + deadline;
    if step.now < expires {
        step.wake_at(expires);
        return;
    }
    let stage = &step.spec.stages[index];
    let waiting = if pending.is_empty() {
        "gates still sampling".to_owned()
    } else {
        let described: Vec<String> = pending
            .iter()
            .take(10)
            .map(|name| {
                let unreachable = step
                    .status
                    .regions
                    .iter()
                    .find(|region| &region.name == name)
                    .is_some_and(|region| region.reachable != Some(true));
                if unreachable {
                    format!("{name} (unreachable)")
                } else {
                    name.clone()
                }
            })
            .collect();
        format!("regions not done: {}", described.join(", "))
    };
    let message = format!(
        "stage {} did not pass within {}: {waiting}",
        stage.name,
        stage.progress_deadline.as_deref().unwrap_or_default()
    );
    failure::fail(step, index, "ProgressDeadlineExceeded", message);
}
