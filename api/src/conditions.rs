//! Condition types set in `status.conditions`, so `kubectl wait --for=condition=X` and
//! every part of the controller spell them the same way, and how to read one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Whether `condition` holds (its status is `True`; `False` and `Unknown` do not).
pub fn is_true(condition: &Condition) -> bool {
    condition.status == "True"
}

/// Sets the condition `type_` in `list` to `status` with `reason` and `message`, as of
/// `generation`: its `lastTransitionTime` becomes `now` only when it is new or its status
/// flips, so the time says since when it holds.
pub fn set(
    list: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Time,
) {
    let status_text = if status { "True" } else { "False" };
    match list.iter_mut().find(|condition| condition.type_ == type_) {
        Some(condition) => {
            if condition.status != status_text {
                status_text.clone_into(&mut condition.status);
                condition.last_transition_time = now;
            }
            reason.clone_into(&mut condition.reason);
            condition.message = message;
            condition.observed_generation = generation;
        }
        None => list.push(Condition {
            type_: type_.to_owned(),
            status: status_text.to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
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

/// kstatus (ConfigRollout and Region): the object is where its spec asks it to be. A
/// ConfigRollout is Ready once its current revision is Complete; a Region once its API
/// server answers. While it is False, its reason and message say what the object waits
/// on or why it stopped, so `kubectl wait --for=condition=Ready` works and tools that
/// only know `Ready` still read something true.
pub const READY: &str = "Ready";
/// kstatus, abnormal-true (ConfigRollout and Region): the controller is still working
/// towards the spec and needs nobody to act for it to go on (a revision rolling out or
/// rolling back, a stage waiting for an approval, `spec.paused`). Never true together
/// with [`STALLED`].
pub const RECONCILING: &str = "Reconciling";
/// kstatus, abnormal-true (ConfigRollout and Region): the controller cannot get further
/// without a change from a person: a halted or rolled-back revision, an invalid or
/// refused spec, an unreachable region. Never true together with [`RECONCILING`].
pub const STALLED: &str = "Stalled";

/// The conditions every tool built on kstatus reads (Flux's health checks, kpt, the
/// cli-utils `status.Compute`), set beside `status.observedGeneration`.
pub const KSTATUS_CONDITION_TYPES: [&str; 3] = [READY, RECONCILING, STALLED];

/// Whether `type_` is one of [`KSTATUS_CONDITION_TYPES`]: a summary of the others for
/// tools, which views made for people (the plugin's `get`, the dashboard) leave out since
/// they already say what the rollout waits on.
pub fn is_kstatus_summary(type_: &str) -> bool {
    KSTATUS_CONDITION_TYPES.contains(&type_)
}

/// Every ConfigRollout condition type.
pub const ROLLOUT_CONDITION_TYPES: [&str; 13] = [
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
    READY,
    RECONCILING,
    STALLED,
];
