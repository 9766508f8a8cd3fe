//! Expand and contract: a revision that removes keys (with `expandContract: Auto`) first
//! runs an Expand pass through every stage (new and changed keys, removed keys kept).
//! When every region has activated it, and the contract step is approved (a
//! StageApproval for stage `contract`) or its pause has passed, the Contract pass
//! (tombstones) runs through every stage again, with the same gates and approvals.

use chrono::{DateTime, Utc};

use configrollout_api::{Approval, CONTRACT_STAGE, RevisionStep, RolloutPhase};

use super::clock::{after, from_time, spec_duration};
use super::revisions::{OUTCOME_COMPLETE, fresh_stages, set_outcome};
use super::{Draft, EventType, approvals};

/// Called when every stage of the current pass has passed. Returns true when the
/// contract pass has just begun (the caller runs the stages again).
pub(super) fn finish_pass(draft: &mut Draft<'_>) -> bool {
    if draft.revision_step() != RevisionStep::Expand {
        complete(draft);
        return false;
    }
    let revision = draft.revision().unwrap_or_default().to_owned();
    let contract = &draft.spec.strategy.contract;
    if contract.approval == Approval::Required {
        match approvals::verified(draft.spec, &draft.status, draft.obs, CONTRACT_STAGE) {
            Some(approval) => {
                let message = format!(
                    "contract step of {revision} approved by {} ({})",
                    approval.approver, approval.name
                );
                draft.event(EventType::Normal, "ContractApproved", message);
            }
            None => {
                approvals::note_refusals(draft, CONTRACT_STAGE);
                draft.status.current_stage = Some(CONTRACT_STAGE.to_owned());
                draft.status.phase = Some(RolloutPhase::AwaitingApproval);
                return false;
            }
        }
    }
    if let Some(pause) = contract
        .pause
        .as_ref()
        .and_then(|p| spec_duration(&p.duration))
    {
        let ends = after(expand_finished_at(draft), pause);
        if draft.now < ends {
            draft.status.current_stage = Some(CONTRACT_STAGE.to_owned());
            draft.wake_at(ends);
            return false;
        }
    }
    draft.status.step = Some(RevisionStep::Contract);
    draft.status.stages = fresh_stages(draft);
    draft.event(
        EventType::Normal,
        "ContractStarted",
        format!("every region activated the expand pass of {revision}; removing keys"),
    );
    true
}

/// When the last stage of the expand pass passed.
fn expand_finished_at(draft: &Draft<'_>) -> DateTime<Utc> {
    draft
        .status
        .stages
        .iter()
        .filter_map(|stage| stage.passed_at.as_ref().map(from_time))
        .max()
        .unwrap_or(draft.now)
}

fn complete(draft: &mut Draft<'_>) {
    let was_complete = draft.before.phase == Some(RolloutPhase::Complete)
        && draft.before.revision == draft.status.revision;
    draft.status.phase = Some(RolloutPhase::Complete);
    draft.status.current_stage = draft.spec.stages.last().map(|stage| stage.name.clone());
    // Every region runs it now and every gate passed on it: it is what a later
    // rollback restores, and nothing since an earlier stable revision is left to revert.
    if draft.status.stable_revision != draft.status.revision {
        draft
            .status
            .stable_revision
            .clone_from(&draft.status.revision);
    }
    draft.status.reached.clear();
    if !was_complete {
        set_outcome(draft, Some(OUTCOME_COMPLETE));
        let message = format!(
            "{} rolled out to every stage",
            draft.revision().unwrap_or_default()
        );
        draft.event(EventType::Normal, "RolloutComplete", message);
    }
}
