//! The kstatus summary: `Ready`, and the abnormal-true `Reconciling` and `Stalled`, as
//! the cli-utils kstatus library defines them, so that Flux's health checks, kpt and the
//! shipped Argo CD health check judge a rollout as a person would:
//!
//! | phase | Ready | Reconciling | Stalled | kstatus |
//! |---|---|---|---|---|
//! | Complete | True | False | False | Current |
//! | Pending, Progressing, Paused, AwaitingApproval, RollingBack | False | True | False | InProgress |
//! | Halted, RolledBack, any phase with `InvalidSpec` | False | False | True | Failed |
//!
//! `status.observedGeneration` (set by every decision) completes it: a spec the
//! controller has not decided on yet reads InProgress whatever these say. `Ready`
//! carries the reason and message of whichever of the other two is true, so a tool that
//! only reads `Ready` (kstatus falls back on it, and so does `kubectl wait`) still learns
//! what the rollout waits on or why it stopped.

use configrollout_api::{CONTRACT_STAGE, GateVerdict, RolloutPhase, StageState, conditions};

use super::Draft;
use super::stages::pending_regions;

/// Which of the three the rollout is, with the reason and message to show.
pub(super) enum Summary {
    /// The current revision is Complete.
    Ready,
    /// The controller is getting on with it; the message says what it waits on.
    Reconciling,
    /// Nothing moves until a person acts; the message says why.
    Stalled,
}

/// Sets `Ready`, `Reconciling` and `Stalled`: the one `summary` names true, the others
/// false. `Ready` always carries `reason` and `message`; the other two only while true.
pub(super) fn apply(draft: &mut Draft<'_>, summary: Summary, reason: &str, message: String) {
    let (ready, reconciling, stalled) = match summary {
        Summary::Ready => (true, false, false),
        Summary::Reconciling => (false, true, false),
        Summary::Stalled => (false, false, true),
    };
    let only_if = |on: bool| if on { message.clone() } else { String::new() };
    let (reconciling_message, stalled_message) = (only_if(reconciling), only_if(stalled));
    draft.set_condition(conditions::READY, ready, reason, message);
    draft.set_condition(
        conditions::RECONCILING,
        reconciling,
        reason,
        reconciling_message,
    );
    draft.set_condition(conditions::STALLED, stalled, reason, stalled_message);
}

/// The summary of a rollout whose spec is valid, from its phase and the conditions
/// [`super::conditions::refresh`] has just set (`Halted`, `AwaitingApproval`, `Drifted`).
pub(super) fn summarize(draft: &mut Draft<'_>) {
    let phase = draft.status.phase.unwrap_or(RolloutPhase::Pending);
    let revision = draft.revision().unwrap_or("none").to_owned();
    let progress = draft.status.progress.clone().unwrap_or_default();
    let phase_name = format!("{phase:?}");
    // Where the revision is: "r2 at stage prod", or "r2" before its first stage started.
    let at = match draft.status.current_stage.as_deref() {
        Some(stage) => format!("{revision} at stage {stage}"),
        None => revision.clone(),
    };
    // Set by `refresh` whenever the phase is one a failure leads to; the phase's name
    // stands in should it ever be missing, since a condition's reason may not be empty.
    let halted = draft
        .status
        .true_condition(conditions::HALTED)
        .map(|condition| (condition.reason.clone(), condition.message.clone()))
        .unwrap_or_else(|| (phase_name.clone(), String::new()));
    let (summary, reason, message) = match phase {
        RolloutPhase::Complete => {
            let drift = draft
                .status
                .true_condition(conditions::DRIFTED)
                .map(|drifted| format!("; {}", drifted.message))
                .unwrap_or_default();
            let paused = if draft.spec.paused {
                "; spec.paused holds the next revision"
            } else {
                ""
            };
            (
                Summary::Ready,
                "AllStagesPassed".to_owned(),
                format!("{revision} passed every stage ({progress} regions done){drift}{paused}"),
            )
        }
        RolloutPhase::Pending => (
            Summary::Reconciling,
            phase_name,
            "waiting for the first revision to be declared".to_owned(),
        ),
        RolloutPhase::Progressing => (
            Summary::Reconciling,
            phase_name,
            format!(
                "{at}: waiting for {}; {progress} regions done",
                progressing_wait(draft, &revision)
            ),
        ),
        RolloutPhase::Paused => (
            Summary::Reconciling,
            phase_name,
            format!(
                "{at}: paused by spec.paused, nothing new is published; waiting for \
                 spec.paused to be false (kubectl configrollout resume); {progress} regions \
                 done"
            ),
        ),
        RolloutPhase::AwaitingApproval => {
            let awaiting = draft
                .status
                .true_condition(conditions::AWAITING_APPROVAL)
                .map(|condition| condition.message.clone())
                .unwrap_or_else(|| format!("{revision} awaits a StageApproval"));
            (
                Summary::Reconciling,
                phase_name,
                format!(
                    "waiting for an approval: {awaiting} (kubectl configrollout approve); \
                     {progress} regions done"
                ),
            )
        }
        RolloutPhase::RollingBack => {
            let (why, detail) = halted;
            let paused = if draft.spec.paused {
                "; paused by spec.paused, nothing is reverted until it is false"
            } else {
                ""
            };
            (
                Summary::Reconciling,
                phase_name,
                format!(
                    "rolling back {revision} after {why} ({detail}): waiting for every region \
                     it reached to be reverted, last stage first{paused}"
                ),
            )
        }
        RolloutPhase::Halted => {
            let (why, detail) = halted;
            (
                Summary::Stalled,
                why.clone(),
                format!(
                    "{revision} halted ({why}): {detail}; it resumes only by retry, abort or \
                     a new revision"
                ),
            )
        }
        RolloutPhase::RolledBack => {
            let (why, detail) = halted;
            (
                Summary::Stalled,
                phase_name,
                format!(
                    "{revision} was rolled back in every region it reached after {why} \
                     ({detail}); a new revision starts again"
                ),
            )
        }
        // Set with the InvalidSpec condition, which says why (see `invalid_spec`).
        RolloutPhase::Refused => {
            let refused = draft
                .status
                .true_condition(conditions::INVALID_SPEC)
                .map(|condition| condition.message.clone())
                .unwrap_or_default();
            (
                Summary::Stalled,
                phase_name,
                format!("the spec is refused, no region is touched until it is fixed: {refused}"),
            )
        }
    };
    apply(draft, summary, &reason, message);
}

/// What a Progressing rollout waits on at its current stage.
fn progressing_wait(draft: &Draft<'_>, revision: &str) -> String {
    let Some(stage) = draft.status.current_stage.clone() else {
        return "the first stage to start".to_owned();
    };
    if stage == CONTRACT_STAGE {
        return "the contract step's pause to end before removed keys are deleted".to_owned();
    }
    let Some(index) = draft.spec.stages.iter().position(|s| s.name == stage) else {
        return format!("stage {stage}");
    };
    let Some(stage_status) = draft.status.stages.get(index) else {
        return format!("stage {stage} to start");
    };
    match stage_status.state {
        StageState::Verifying => {
            let running: Vec<String> = stage_status
                .gates
                .iter()
                .filter(|gate| !gate.dry_run && gate.verdict != Some(GateVerdict::Passed))
                .map(|gate| {
                    let count = draft
                        .spec
                        .gates
                        .iter()
                        .find(|spec| spec.name == gate.name)
                        .map_or(1, |spec| spec.count);
                    let place = gate
                        .region
                        .as_deref()
                        .map(|region| format!(" in {region}"))
                        .unwrap_or_default();
                    format!(
                        "{}{place} ({}/{count} successful samples)",
                        gate.name, gate.successes
                    )
                })
                .collect();
            if running.is_empty() {
                "its gates to be judged".to_owned()
            } else {
                format!("gates to pass: {}", running.join(", "))
            }
        }
        StageState::Baking => {
            let duration = draft.spec.stages[index]
                .pause
                .as_ref()
                .map_or("-", |pause| pause.duration.as_str());
            format!("its bake time ({duration}) to end")
        }
        StageState::Passed | StageState::Failed => "the next stage to start".to_owned(),
        StageState::Pending | StageState::AwaitingApproval | StageState::Progressing => {
            let verb = if draft.spec.consumers.is_empty() {
                "materialize"
            } else {
                "activate"
            };
            let pending: Vec<String> = pending_regions(draft, index)
                .into_iter()
                .take(10)
                .map(|name| {
                    let unreachable = draft
                        .status
                        .regions
                        .iter()
                        .find(|region| region.name == name)
                        .is_some_and(|region| region.reachable == Some(false));
                    if unreachable {
                        format!("{name} (unreachable)")
                    } else {
                        name
                    }
                })
                .collect();
            if pending.is_empty() {
                format!("stage {stage} to be verified")
            } else {
                format!("regions {} to {verb} {revision}", pending.join(", "))
            }
        }
    }
}
