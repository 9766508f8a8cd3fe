//! Status summary: conditions in the `metav1.Condition` shape (with
//! `observedGeneration`, and `lastTransitionTime` changed only when the status flips),
//! the `progress` column, and events for the flips that no other rule announces.

use configrollout_api::{CONTRACT_STAGE, ConfigRolloutStatus, RolloutPhase, conditions};

use super::clock::to_time;
use super::control::REASON_ABORTED;
use super::kstatus;
use super::regions::region_done;
use super::{Draft, EventType, MAX_CONDITION_MESSAGE};

/// Sets one condition, keeping its transition time unless the status flips.
pub(super) fn set(draft: &mut Draft<'_>, type_: &str, status: bool, reason: &str, message: String) {
    draft.set_condition(type_, status, reason, message);
}

fn was_true(draft: &Draft<'_>, type_: &str) -> bool {
    draft.before.was_true(type_)
}

fn current(draft: &Draft<'_>, type_: &str) -> Option<(String, String)> {
    draft
        .status
        .true_condition(type_)
        .map(|condition| (condition.reason.clone(), condition.message.clone()))
}

/// `InvalidSpec` reason: the spec reaches outside what the namespace's grant allows.
pub(super) const REASON_OUTSIDE_GRANT: &str = "OutsideGrant";
/// `InvalidSpec` reason: a region's target may not be written by this rollout (it exists
/// unmanaged, or another rollout manages one of its keys).
pub(super) const REASON_TARGET_REFUSED: &str = "TargetRefused";
/// `InvalidSpec` reason: the candidate revision's key/values break a ConfigSchema, a
/// ClusterConfigSchema or an external validator; it is not declared.
pub const REASON_INVALID_VALUE: &str = "InvalidValue";
/// `InvalidSpec` reason: anything else the schema cannot check.
pub(super) const REASON_INVALID_SPEC: &str = "InvalidSpec";

/// Reports an invalid spec; nothing else changes and no region is touched.
pub(super) fn invalid_spec(draft: &mut Draft<'_>, errors: &[String], reason: &str) {
    let mut message = errors.join("; ");
    if message.len() > MAX_CONDITION_MESSAGE {
        let cut = (0..=MAX_CONDITION_MESSAGE)
            .rev()
            .find(|&index| message.is_char_boundary(index))
            .unwrap_or(0);
        message.truncate(cut);
        message.push('…');
    }
    if !was_true(draft, conditions::INVALID_SPEC) {
        draft.event(EventType::Warning, reason, message.clone());
    }
    set(
        draft,
        conditions::INVALID_SPEC,
        true,
        reason,
        message.clone(),
    );
    // A refused rollout looks refused wherever its phase is shown, never Progressing.
    draft.status.phase = Some(RolloutPhase::Refused);
    kstatus::apply(
        draft,
        kstatus::Summary::Stalled,
        reason,
        format!("the spec is refused, no region is touched until it is fixed: {message}"),
    );
}

/// Regions done with the current pass, out of regions selected.
fn progress(draft: &Draft<'_>) -> String {
    let total = draft.plan.region_count();
    let Some(revision) = draft.revision() else {
        return format!("0/{total}");
    };
    let has_consumers = !draft.spec.consumers.is_empty();
    let done = draft
        .status
        .regions
        .iter()
        .filter(|region| region_done(region, revision, draft.revision_step(), has_consumers))
        .count();
    format!("{done}/{total}")
}

/// The status to write when a reconcile failed before writing its own: `status` with
/// `ReconcileFailed` true, `reason` naming the step and `message` the cause (names and
/// HTTP reasons, never values). The next reconcile that gets as far as writing its status
/// drops the condition ([`refresh`]).
pub fn reconcile_failed(
    status: &ConfigRolloutStatus,
    generation: i64,
    reason: &str,
    message: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> ConfigRolloutStatus {
    let mut status = status.clone();
    let message: String = message.chars().take(MAX_CONDITION_MESSAGE).collect();
    conditions::set(
        &mut status.conditions,
        conditions::RECONCILE_FAILED,
        true,
        reason,
        message,
        Some(generation),
        to_time(now),
    );
    status
}

/// Sets every condition the engine owns from the phase. `Drifted` belongs to the region
/// layer and is left alone; `ReconcileFailed` is dropped, since this reconcile got as far
/// as computing a status to write.
pub(super) fn refresh(draft: &mut Draft<'_>) {
    draft
        .status
        .conditions
        .retain(|condition| condition.type_ != conditions::RECONCILE_FAILED);
    let phase = draft.status.phase.unwrap_or(RolloutPhase::Pending);
    let revision = draft.revision().unwrap_or("none").to_owned();
    let stage = draft.status.current_stage.clone().unwrap_or_default();
    let pass = draft.revision_step();
    let progress = progress(draft);
    draft.status.progress = Some(progress.clone());
    let phase_name = format!("{phase:?}");

    set(
        draft,
        conditions::INVALID_SPEC,
        false,
        "Valid",
        String::new(),
    );

    let (progressing, reason, message) = match phase {
        RolloutPhase::Pending => (true, "Pending", "waiting for desired data".to_owned()),
        RolloutPhase::Progressing | RolloutPhase::AwaitingApproval => (
            true,
            "RolloutProgressing",
            format!("{revision} ({pass:?} pass) at stage {stage}: {progress} regions done"),
        ),
        other => (
            false,
            phase_name.as_str(),
            format!("{revision} is {other:?}: {progress} regions done"),
        ),
    };
    set(draft, conditions::PROGRESSING, progressing, reason, message);

    let awaiting = phase == RolloutPhase::AwaitingApproval;
    let (reason, message) = if stage == CONTRACT_STAGE {
        (
            "ContractApprovalRequired",
            format!("the contract step of {revision} awaits a StageApproval for stage contract"),
        )
    } else {
        (
            "StageApprovalRequired",
            format!("stage {stage} of {revision} awaits a StageApproval"),
        )
    };
    if awaiting && !was_true(draft, conditions::AWAITING_APPROVAL) {
        draft.event(EventType::Normal, reason, message.clone());
    }
    let (reason, message) = if awaiting && !draft.approval_refusals.is_empty() {
        let previous = current(draft, conditions::AWAITING_APPROVAL)
            .map(|(_, message)| message)
            .unwrap_or_default();
        for refusal in draft.approval_refusals.clone() {
            if !previous.contains(&refusal) {
                draft.event(EventType::Warning, "ApprovalRefused", refusal);
            }
        }
        (
            "ApprovalRefused",
            format!("{message}; {}", draft.approval_refusals.join("; ")),
        )
    } else {
        (reason, message)
    };
    if awaiting {
        set(draft, conditions::AWAITING_APPROVAL, true, reason, message);
    } else {
        set(
            draft,
            conditions::AWAITING_APPROVAL,
            false,
            &phase_name,
            String::new(),
        );
    }

    let paused = draft.spec.paused;
    if paused != was_true(draft, conditions::PAUSED) {
        let (reason, message) = if paused {
            (
                "Paused",
                format!("rollout of {revision} paused by spec.paused"),
            )
        } else {
            ("Resumed", format!("rollout of {revision} resumed"))
        };
        draft.event(EventType::Normal, reason, message);
    }
    if paused {
        set(
            draft,
            conditions::PAUSED,
            true,
            "SpecPaused",
            "spec.paused is true: nothing new is published".to_owned(),
        );
    } else {
        set(draft, conditions::PAUSED, false, "NotPaused", String::new());
    }

    let stopped = matches!(
        phase,
        RolloutPhase::Halted | RolloutPhase::RollingBack | RolloutPhase::RolledBack
    );
    if stopped {
        let (reason, message) = draft
            .halt
            .clone()
            .or_else(|| current(draft, conditions::HALTED))
            .unwrap_or_else(|| (REASON_ABORTED.to_owned(), String::new()));
        set(draft, conditions::HALTED, true, &reason, message);
    } else {
        set(draft, conditions::HALTED, false, &phase_name, String::new());
    }

    let rolled_back = phase == RolloutPhase::RolledBack;
    set(
        draft,
        conditions::ROLLED_BACK,
        rolled_back,
        if rolled_back {
            "RolledBack"
        } else {
            phase_name.as_str()
        },
        if rolled_back {
            format!(
                "{revision} was reverted in every region it reached, to {}",
                super::failure::restored(draft)
            )
        } else {
            String::new()
        },
    );

    let complete = phase == RolloutPhase::Complete;
    set(
        draft,
        conditions::COMPLETE,
        complete,
        if complete {
            "AllStagesPassed"
        } else {
            phase_name.as_str()
        },
        if complete {
            format!("{revision} passed every stage")
        } else {
            String::new()
        },
    );

    drifted(draft);
    admission_policies(draft);
    kstatus::summarize(draft);
}

/// `AdmissionPolicies`, on rollouts that wait for approvals: whether the policies that
/// make an approval's record truthful are installed and bound.
fn admission_policies(draft: &mut Draft<'_>) {
    let needs_approvals = draft.spec.needs_approvals();
    let Some(missing) = draft.obs.missing_policies.clone() else {
        return;
    };
    if !needs_approvals {
        draft
            .status
            .conditions
            .retain(|condition| condition.type_ != conditions::ADMISSION_POLICIES);
        return;
    }
    if missing.is_empty() {
        set(
            draft,
            conditions::ADMISSION_POLICIES,
            true,
            "PoliciesInstalled",
            "the admission policies approvals rely on are installed and bound".to_owned(),
        );
    } else {
        let consequence = match &draft.obs.approver_binding {
            super::ApproverBinding::Missing => {
                "no StageApproval counts until the approver policy is installed and bound \
                 (or the controller runs with --approver-enforced-externally)"
            }
            super::ApproverBinding::External => {
                "approvals count because the controller runs with \
                 --approver-enforced-externally: the platform binds approvers itself"
            }
            super::ApproverBinding::Policy { .. } => {
                "who last changed the spec is not stamped by the apiserver, so four-eyes \
                 approvals are refused"
            }
        };
        let message = format!(
            "not installed or not bound: {} (see policies/README.md); {consequence}",
            missing.join(", ")
        );
        if was_true(draft, conditions::ADMISSION_POLICIES)
            || !draft
                .status
                .conditions
                .iter()
                .any(|condition| condition.type_ == conditions::ADMISSION_POLICIES)
        {
            draft.event(EventType::Warning, "PoliciesMissing", message.clone());
        }
        set(
            draft,
            conditions::ADMISSION_POLICIES,
            false,
            "PoliciesMissing",
            message,
        );
    }
}

/// `Drifted`: managed keys edited out of band in some region (key names, never values).
fn drifted(draft: &mut Draft<'_>) {
    let drifted: Vec<String> = draft
        .status
        .regions
        .iter()
        .filter(|region| !region.drifted_keys.is_empty())
        .map(|region| format!("{} ({})", region.name, region.drifted_keys.join(", ")))
        .collect();
    if drifted.is_empty() {
        set(draft, conditions::DRIFTED, false, "InSync", String::new());
        return;
    }
    let message = format!("keys edited out of band: {}", drifted.join("; "));
    if !was_true(draft, conditions::DRIFTED) {
        draft.event(EventType::Warning, "Drifted", message.clone());
    }
    set(draft, conditions::DRIFTED, true, "OutOfBandEdit", message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_reconcile_sets_one_condition_and_keeps_its_transition_time_while_it_fails() {
        let first = chrono::Utc::now();
        let failed = reconcile_failed(
            &ConfigRolloutStatus::default(),
            3,
            "ActFailed",
            "act: saving revision r2: request entity too large",
            first,
        );
        let condition = failed
            .true_condition(conditions::RECONCILE_FAILED)
            .expect("set");
        assert_eq!(condition.reason, "ActFailed");
        assert_eq!(condition.observed_generation, Some(3));

        let later = first + chrono::Duration::seconds(30);
        let again = reconcile_failed(&failed, 3, "FetchFailed", "fetch: timed out", later);
        assert_eq!(again.conditions.len(), 1);
        let condition = &again.conditions[0];
        assert_eq!(condition.reason, "FetchFailed");
        assert_eq!(condition.last_transition_time, to_time(first));
        let long = "x".repeat(5_000);
        let capped = reconcile_failed(&failed, 3, "ActFailed", &long, later);
        assert_eq!(capped.conditions[0].message.len(), MAX_CONDITION_MESSAGE);
    }
}
