//! Revisions: a change of the desired data declares `r<N+1>`, which supersedes whatever
//! was in flight and starts again at the first stage. History is bounded by
//! `spec.revisionHistoryLimit`, oldest dropped first; the current revision is always kept.

use configrollout_api::{
    ConfigRolloutSpec, ExpandContract, RevisionRecord, RevisionStep, RolloutPhase, StageStatus,
};

use super::clock::to_time;
use super::{Action, Draft, EventType};

/// Outcome recorded on a revision replaced before it finished.
pub const OUTCOME_SUPERSEDED: &str = "Superseded";
/// Outcome of a revision whose every stage passed.
pub const OUTCOME_COMPLETE: &str = "Complete";
/// Outcome of a revision stopped by a failure.
pub const OUTCOME_HALTED: &str = "Halted";
/// Outcome of a revision stopped by an operator.
pub const OUTCOME_ABORTED: &str = "Aborted";
/// Outcome of a revision reverted everywhere it reached.
pub const OUTCOME_ROLLED_BACK: &str = "RolledBack";

/// The number in a revision name (`r12` -> 12).
pub fn revision_number(name: &str) -> Option<u64> {
    name.strip_prefix('r')?.parse().ok()
}

/// Declares a new revision when the desired digest differs from the current one.
pub(super) fn ensure_current(draft: &mut Draft<'_>) {
    let desired = &draft.obs.desired;
    if desired.digest.is_empty() {
        return;
    }
    let current_digest = draft
        .status
        .history
        .last()
        .filter(|record| Some(&record.name) == draft.status.revision.as_ref())
        .and_then(|record| record.digest.as_deref());
    if current_digest == Some(desired.digest.as_str()) {
        return;
    }

    let highest = draft
        .status
        .history
        .iter()
        .map(|record| record.name.as_str())
        .chain(draft.status.revision.as_deref())
        .filter_map(revision_number)
        .max()
        .unwrap_or(0);
    // Revision numbers are read back from the status, which is not counted on to stay
    // below the end of the range: saturate rather than panic.
    let name = format!("r{}", highest.saturating_add(1));
    if let Some(previous) = draft.status.history.last_mut()
        && previous.outcome.is_none()
    {
        previous.outcome = Some(OUTCOME_SUPERSEDED.to_owned());
    }
    draft.status.history.push(RevisionRecord {
        name: name.clone(),
        digest: Some(desired.digest.clone()),
        declared_at: to_time(draft.now),
        stamp: draft.obs.fresh_stamp.clone(),
        keys_set: i32::try_from(desired.keys_set).unwrap_or(i32::MAX),
        keys_removed: i32::try_from(desired.keys_removed).unwrap_or(i32::MAX),
        outcome: None,
        authors: draft.obs.revision_authors.known.clone(),
        authors_unknown: draft.obs.revision_authors.unknown.clone(),
        schemas: draft.obs.checked_schemas.clone(),
        validated_by: draft.obs.accepted_by.clone(),
    });
    // The changes counted into this revision's authors: the next one counts those after.
    draft.status.authors_counted = Some(draft.obs.revision_authors.counted.clone());
    let limit = usize::try_from(draft.spec.revision_history_limit.clamp(1, 100)).unwrap_or(1);
    let excess = draft.status.history.len().saturating_sub(limit);
    draft.status.history.drain(..excess);

    let pass = if desired.keys_removed > 0
        && draft.spec.strategy.expand_contract == ExpandContract::Auto
    {
        RevisionStep::Expand
    } else {
        RevisionStep::Single
    };
    draft.status.revision = Some(name.clone());
    draft.status.target = Some(target_of(draft.spec));
    draft.status.step = Some(pass);
    draft.status.current_stage = None;
    draft.status.phase = Some(RolloutPhase::Progressing);
    draft.status.stages = fresh_stages(draft);
    draft.actions.push(Action::DeclareRevision {
        name: name.clone(),
        digest: desired.digest.clone(),
        stamp: draft.obs.fresh_stamp.clone(),
        stable: draft.status.stable_revision.clone(),
    });
    let digest_prefix: String = desired.digest.chars().take(12).collect();
    draft.event(
        EventType::Normal,
        "RevisionDeclared",
        format!(
            "declared {name} ({} keys set, {} removed, digest {digest_prefix}, {pass:?} pass)",
            desired.keys_set, desired.keys_removed
        ),
    );
}

/// The target as `status.target` records it.
pub(super) fn target_of(spec: &ConfigRolloutSpec) -> String {
    format!("{}/{}", spec.target.namespace, spec.target.name)
}

/// Why the spec may not be acted on because its target is not the one the revisions were
/// declared for: a rollout's regions hold its state beside that target, and moving it
/// would leave the old one behind, unmanaged, and write the new one everywhere at once.
pub(super) fn retarget_error(draft: &Draft<'_>) -> Option<String> {
    let recorded = draft.status.target.as_deref()?;
    let now = target_of(draft.spec);
    (recorded != now).then(|| {
        format!(
            "spec.target: the revisions of this rollout were declared for {recorded}, not \
             {now}; a rollout's target cannot change (create another ConfigRollout for \
             {now}, and delete this one when you are done with {recorded})"
        )
    })
}

/// The phase a rollout takes up again once its refusal is fixed: what its current
/// revision's outcome and conditions say it was (a refusal changes nothing else).
pub(super) fn leave_refused(draft: &mut Draft<'_>) {
    if draft.status.phase != Some(RolloutPhase::Refused) {
        return;
    }
    let outcome = draft
        .status
        .history
        .iter()
        .rev()
        .find(|record| Some(&record.name) == draft.status.revision.as_ref())
        .and_then(|record| record.outcome.as_deref());
    let halted = draft.status.is_true(configrollout_api::conditions::HALTED);
    draft.status.phase = Some(match outcome {
        _ if draft.status.revision.is_none() => RolloutPhase::Pending,
        Some(OUTCOME_COMPLETE) => RolloutPhase::Complete,
        Some(OUTCOME_ROLLED_BACK) => RolloutPhase::RolledBack,
        Some(OUTCOME_HALTED | OUTCOME_ABORTED) => RolloutPhase::Halted,
        // Stopped without an outcome: a rollback under way.
        _ if halted => RolloutPhase::RollingBack,
        _ => RolloutPhase::Progressing,
    });
}

/// One pending stage status per spec stage.
pub(super) fn fresh_stages(draft: &Draft<'_>) -> Vec<StageStatus> {
    draft
        .spec
        .stages
        .iter()
        .map(|stage| StageStatus {
            name: stage.name.clone(),
            ..StageStatus::default()
        })
        .collect()
}

/// Records how the current revision ended.
pub(super) fn set_outcome(draft: &mut Draft<'_>, outcome: Option<&str>) {
    let revision = draft.status.revision.clone();
    if let Some(record) = draft
        .status
        .history
        .iter_mut()
        .rev()
        .find(|record| Some(&record.name) == revision.as_ref())
    {
        record.outcome = outcome.map(str::to_owned);
    }
}
