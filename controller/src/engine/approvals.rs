//! Approvals: a stage with `approval: Required` (and the contract step when its approval
//! is required) starts only on a StageApproval naming that stage and the current
//! revision. An approval never carries over to another revision.

use crate::api::{Approval, ApprovalRecord};

use super::clock::to_time;
use super::observations::ApprovalObservation;
use super::{EventType, Step};

/// The earliest approval for `stage` of `revision`.
pub(super) fn find<'o>(
    approvals: &'o [ApprovalObservation],
    stage: &str,
    revision: &str,
) -> Option<&'o ApprovalObservation> {
    approvals
        .iter()
        .filter(|approval| approval.stage == stage && approval.revision == revision)
        .min_by(|a, b| a.created_at.cmp(&b.created_at).then(a.name.cmp(&b.name)))
}

/// Whether the stage at `index` may start; records the approval that lets it.
pub(super) fn stage_may_start(step: &mut Step<'_>, index: usize) -> bool {
    if step.spec.stages[index].approval == Approval::None
        || step.status.stages[index].approval.is_some()
    {
        return true;
    }
    let Some(revision) = step.revision().map(str::to_owned) else {
        return false;
    };
    let stage_name = step.spec.stages[index].name.clone();
    let Some(approval) = find(&step.obs.approvals, &stage_name, &revision) else {
        return false;
    };
    let record = ApprovalRecord {
        name: approval.name.clone(),
        approver: approval.approver.clone(),
        reason: approval.reason.clone(),
        approved_at: to_time(approval.created_at),
    };
    let message = format!(
        "stage {stage_name} of {revision} approved by {} ({})",
        record.approver, record.name
    );
    step.status.stages[index].approval = Some(record);
    step.event(EventType::Normal, "StageApproved", message);
    true
}
