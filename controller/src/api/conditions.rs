//! Condition types set in `status.conditions`, so `kubectl wait --for=condition=X` and
//! every part of the controller spell them the same way, and how to read one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Whether `condition` holds (its status is `True`; `False` and `Unknown` do not).
pub fn is_true(condition: &Condition) -> bool {
    condition.status == "True"
}

/// ConfigRollout: a revision is being rolled out.
pub const PROGRESSING: &str = "Progressing";
/// ConfigRollout: a stage or the contract step waits for a StageApproval.
pub const AWAITING_APPROVAL: &str = "AwaitingApproval";
/// ConfigRollout: `spec.paused` holds the rollout.
pub const PAUSED: &str = "Paused";
/// ConfigRollout: a failure stopped the rollout.
pub const HALTED: &str = "Halted";
/// ConfigRollout: the revision was rolled back everywhere it had reached.
pub const ROLLED_BACK: &str = "RolledBack";
/// ConfigRollout: every stage of the current revision passed.
pub const COMPLETE: &str = "Complete";
/// ConfigRollout: some region's target was edited out of band.
pub const DRIFTED: &str = "Drifted";
/// ConfigRollout: the spec is invalid in a way the schema cannot check (PromQL, gate
/// condition grammar); no region is touched.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// ConfigRollout with approvals: the admission policies approvals rely on (approver is
/// the requesting user; who last changed the spec is stamped by the apiserver) are
/// installed and bound.
pub const ADMISSION_POLICIES: &str = "AdmissionPolicies";

/// ConfigRollout: the last reconcile failed before it could write the status it computed
/// (a revision that could not be saved, the hub or a region refusing a call); the reason
/// names the step, the message the cause. Gone after the next reconcile that succeeds.
pub const RECONCILE_FAILED: &str = "ReconcileFailed";

/// Every ConfigRollout condition type.
pub const ROLLOUT_CONDITION_TYPES: [&str; 10] = [
    PROGRESSING,
    AWAITING_APPROVAL,
    PAUSED,
    HALTED,
    ROLLED_BACK,
    COMPLETE,
    DRIFTED,
    INVALID_SPEC,
    ADMISSION_POLICIES,
    RECONCILE_FAILED,
];
