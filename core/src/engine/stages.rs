//! Stages run in order. A stage waits for its approval (if required), then updates at
//! most `maxParallel` of its regions at a time, then verifies its gates once every region
//! is done, then bakes for `pause`, then passes and the next stage starts. A stage that
//! has not passed `progressDeadline` after it started (or after the rollout was last
//! resumed or retried) fails, unreachable regions included.

use chrono::{DateTime, Utc};

use configrollout_api::{
    DEFAULT_PROGRESS_DEADLINE, RolloutPhase, StageState, StageStatus, conditions,
};

use super::clock::{after, from_time, spec_duration, to_time};
use super::gate_windows::{self, StageGates, Windows};
use super::{Draft, EventType, approvals, expand_contract, failure, regions};

/// Runs the stage machine until it blocks; at most two passes (expand, then contract).
pub(super) fn advance(draft: &mut Draft<'_>) {
    align(draft);
    for _ in 0..2 {
        if !run_stages(draft) {
            return;
        }
        if !expand_contract::finish_pass(draft) {
            return;
        }
    }
}

/// Keeps one stage status per spec stage, in spec order, even if stages were edited.
fn align(draft: &mut Draft<'_>) {
    let aligned = draft
        .status
        .stages
        .iter()
        .map(|stage| stage.name.as_str())
        .eq(draft.spec.stages.iter().map(|stage| stage.name.as_str()));
    if aligned {
        return;
    }
    let mut previous = std::mem::take(&mut draft.status.stages);
    draft.status.stages = draft
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
pub(super) fn pending_regions(draft: &Draft<'_>, index: usize) -> Vec<String> {
    let Some(revision) = draft.revision() else {
        return Vec::new();
    };
    let pass = draft.revision_step();
    let has_consumers = !draft.spec.consumers.is_empty();
    draft.plan.stages[index]
        .iter()
        .filter(|name| {
            !draft
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
fn run_stages(draft: &mut Draft<'_>) -> bool {
    for index in 0..draft.spec.stages.len() {
        loop {
            match draft.status.stages[index].state {
                StageState::Passed => break,
                StageState::Failed => {
                    draft.status.current_stage = Some(draft.spec.stages[index].name.clone());
                    return false;
                }
                StageState::Pending | StageState::AwaitingApproval => {
                    draft.status.current_stage = Some(draft.spec.stages[index].name.clone());
                    if !approvals::stage_may_start(draft, index) {
                        draft.status.stages[index].state = StageState::AwaitingApproval;
                        draft.status.phase = Some(RolloutPhase::AwaitingApproval);
                        return false;
                    }
                    start(draft, index);
                }
                StageState::Progressing => {
                    draft.status.current_stage = Some(draft.spec.stages[index].name.clone());
                    if !approvals::recheck_running(draft, index) {
                        draft.status.phase = Some(RolloutPhase::AwaitingApproval);
                        return false;
                    }
                    let pending = pending_regions(draft, index);
                    if !pending.is_empty() {
                        draft.poll_regions();
                        check_deadline(draft, index, &pending);
                        return false;
                    }
                    let stage = &mut draft.status.stages[index];
                    stage.state = StageState::Verifying;
                    stage.verified_at = Some(to_time(draft.now));
                    gate_windows::open_windows(draft, index);
                }
                StageState::Verifying => match gate_windows::judge(draft, index, Windows::All) {
                    StageGates::Failed(message) => {
                        failure::fail(draft, index, "GateFailed", message);
                        return false;
                    }
                    StageGates::Running => {
                        check_deadline(draft, index, &[]);
                        return false;
                    }
                    StageGates::Passed => {
                        if draft.spec.stages[index].pause.is_some() {
                            draft.status.stages[index].state = StageState::Baking;
                        } else {
                            pass(draft, index);
                        }
                    }
                },
                StageState::Baking => {
                    // Its dry-run gates go on sampling; they never end the bake.
                    gate_windows::judge(draft, index, Windows::DryRun);
                    let bake_end = bake_end(draft, index);
                    if draft.now < bake_end {
                        draft.wake_at(bake_end);
                        return false;
                    }
                    pass(draft, index);
                }
            }
        }
    }
    true
}

fn start(draft: &mut Draft<'_>, index: usize) {
    let stage = &mut draft.status.stages[index];
    stage.state = StageState::Progressing;
    stage.started_at = Some(to_time(draft.now));
    let message = format!(
        "stage {} of {} started ({:?} pass, {} regions, at most {} at once)",
        draft.spec.stages[index].name,
        draft.revision().unwrap_or_default(),
        draft.revision_step(),
        draft.plan.stages[index].len(),
        draft.spec.stages[index].max_parallel.max(1),
    );
    draft.event(EventType::Normal, "StageStarted", message);
}

fn pass(draft: &mut Draft<'_>, index: usize) {
    let stage = &mut draft.status.stages[index];
    stage.state = StageState::Passed;
    stage.passed_at = Some(to_time(draft.now));
    let message = format!(
        "stage {} of {} passed ({:?} pass)",
        draft.spec.stages[index].name,
        draft.revision().unwrap_or_default(),
        draft.revision_step(),
    );
    draft.event(EventType::Normal, "StagePassed", message);
}

/// The bake starts when the gates passed (the latest counted sample), or when the stage
/// was verified if it has no gates.
fn bake_end(draft: &Draft<'_>, index: usize) -> DateTime<Utc> {
    let stage = &draft.status.stages[index];
    let verified_at = stage
        .verified_at
        .as_ref()
        .map(from_time)
        .unwrap_or(draft.now);
    let gates_passed_at = stage
        .gates
        .iter()
        .filter(|window| !window.dry_run)
        .filter_map(|window| window.samples.last())
        .map(|sample| from_time(&sample.at))
        .max()
        .unwrap_or(verified_at)
        .max(verified_at);
    let pause = draft.spec.stages[index]
        .pause
        .as_ref()
        .and_then(|pause| spec_duration(&pause.duration))
        .unwrap_or_default();
    after(gates_passed_at, pause)
}

/// When the stage's deadline clock started: its start, or the last resume from a pause,
/// a retry after a halt or a fix of an invalid spec, whichever is later (a rollout that
/// could not move is not late).
fn deadline_clock_start(draft: &Draft<'_>, index: usize) -> Option<DateTime<Utc>> {
    let started = draft.status.stages[index]
        .started_at
        .as_ref()
        .map(from_time)?;
    if draft.resumed_now {
        return Some(draft.now.max(started));
    }
    let resumed = draft
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

/// The stage's deadline as written: its own, the rollout's, or (only while regions are
/// pending: gate windows end on their own schedule) the default.
fn deadline_of<'a>(draft: &Draft<'a>, index: usize, regions_pending: bool) -> Option<&'a str> {
    let spec = draft.spec;
    spec.stages[index]
        .progress_deadline
        .as_deref()
        .or(spec.progress_deadline.as_deref())
        .or(regions_pending.then_some(DEFAULT_PROGRESS_DEADLINE))
}

fn check_deadline(draft: &mut Draft<'_>, index: usize, pending: &[String]) {
    let Some(written) = deadline_of(draft, index, !pending.is_empty()) else {
        return;
    };
    let Some(deadline) = spec_duration(written) else {
        return;
    };
    let Some(clock_start) = deadline_clock_start(draft, index) else {
        return;
    };
    let expires = after(clock_start, deadline);
    if draft.now < expires {
        draft.wake_at(expires);
        return;
    }
    let stage = &draft.spec.stages[index];
    let waiting = if pending.is_empty() {
        "gates still sampling".to_owned()
    } else {
        let described: Vec<String> = pending
            .iter()
            .take(10)
            .map(|name| {
                let unreachable = draft
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
        "stage {} did not pass within {written}: {waiting}",
        stage.name
    );
    failure::fail(draft, index, "ProgressDeadlineExceeded", message);
}
