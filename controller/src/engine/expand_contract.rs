//! Expand and contract: a revision that removes keys (with `expandContract: Auto`) first
//! runs an Expand pass through every stage (new and changed keys, removed keys kept).
//! When every region has activated it, and the contract step is approved (a
//! StageApproval for stage `contract`) or its pause has passed, the Contract pass
//! (tombstones) runs through every stage again, with the same gates and approvals.

use chrono::{DateTime, Utc};

use crate::api::{Approval, CONTRACT_STAGE, RevisionStep, RolloutPhase};

use super::clock::{from_time, spec_duration};
use super::revisions::{OUTCOME_COMPLETE, fresh_stages, set_outcome};
use super::{EventType, Step, approvals};

/// Called when every stage of the current pass has passed. Returns true when the
/// contract pass has just begun (the caller runs the stages again).
pub(super) fn finish_pass(step: &mut Step<'_>) -> bool {
    if step.pass() != RevisionStep::Expand {
        complete(step);
        return false;
    }
    let revision = step.revision().unwrap_or_default().to_owned();
    let contract = &step.spec.strategy.contract;
    if contract.approval == Approval::Required {
        match approvals::verified(step.spec, &step.status, step.obs, CONTRACT_STAGE) {
            Some(approval) => {
                let message = format!(
                    "contract step of {revision} approved by {} ({})",
                    approval.approver, approval.name
                );
                step.event(EventType::Normal, "ContractApproved", message);
            }
            None => {
                approvals::note_refusals(step, CONTRACT_STAGE);
                step.status.current_stage = Some(CONTRACT_STAGE.to_owned());
                step.status.phase = Some(RolloutPhase::AwaitingApproval);
                return false;
            }
        }
    }
    if let Some(pause) = contract
        .pause
        .as_ref()
        .and_then(|p| spec_duration(&p.duration))
    {
        let ends = expand_finished_at(step) + pause;
        if step.now < ends {
            step.status.current_stage = Some(CONTRACT_STAGE.to_owned());
            step.wake_at(ends);
            return false;
        }
    }
    step.status.step = Some(RevisionStep::Contract);
    step.status.stages = fresh_stages(step);
    step.event(
        EventType::Normal,
        "ContractStarted",
        format!("every region activated the expand pass of {revision}; removing keys"),
    );
    true
}

/// When the last stage of the expand pass passed.
fn expand_finished_at(step: &Step<'_>) -> DateTime<Utc> {
    step.status
        .stages
        .iter()
        .filter_map(|stage| stage.passed_at.as_ref().map(from_time))
        .max()
        .unwrap_or(step.now)
}

fn complete(step: &mut Step<'_>) {
    let was_complete = step.before.phase == Some(RolloutPhase::Complete)
        && step.before.revision == step.status.revision;
    step.status.phase = Some(RolloutPhase::Complete);
    step.status.current_stage = step.spec.stages.last().map(|stage| stage.name.clone());
    if !was_complete {
        set_outcome(step, Some(OUTCOME_COMPLETE));
        let message = format!(
            "{} rolled out to every stage",
            step.revision().unwrap_or_default()
        );
        step.event(EventType::Normal, "RolloutComplete", message);
    }
}
