//! Revisions: a change of the desired data declares `r<N+1>`, which supersedes whatever
//! was in flight and starts again at the first stage. History is bounded by
//! `spec.revisionHistoryLimit`, oldest dropped first; the current revision is always kept.

use crate::api::{ExpandContract, RevisionRecord, RevisionStep, RolloutPhase, StageStatus};

use super::clock::to_time;
use super::{Action, EventType, Step};

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
pub(super) fn ensure_current(step: &mut Step<'_>) {
    let desired = &step.obs.desired;
    if desired.digest.is_empty() {
        return;
    }
    let current_digest = step
        .status
        .history
        .last()
        .filter(|record| Some(&record.name) == step.status.revision.as_ref())
        .and_then(|record| record.digest.as_deref());
    if current_digest == Some(desired.digest.as_str()) {
        return;
    }

    let highest = step
        .status
        .history
        .iter()
        .map(|record| record.name.as_str())
        .chain(step.status.revision.as_deref())
        .filter_map(revision_number)
        .max()
        .unwrap_or(0);
    let name = format!("r{}", highest + 1);
    if let Some(previous) = step.status.history.last_mut()
        && previous.outcome.is_none()
    {
        previous.outcome = Some(OUTCOME_SUPERSEDED.to_owned());
    }
    step.status.history.push(RevisionRecord {
        name: name.clone(),
        digest: Some(desired.digest.clone()),
        declared_at: to_time(step.now),
        stamp: step.obs.fresh_stamp.clone(),
        keys_set: i32::try_from(desired.keys_set).unwrap_or(i32::MAX),
        keys_removed: i32::try_from(desired.keys_removed).unwrap_or(i32::MAX),
        outcome: None,
    });
    let limit = usize::try_from(step.spec.revision_history_limit.clamp(1, 100)).unwrap_or(1);
    let excess = step.status.history.len().saturating_sub(limit);
    step.status.history.drain(..excess);

    let pass =
        if desired.keys_removed > 0 && step.spec.strategy.expand_contract == ExpandContract::Auto {
            RevisionStep::Expand
        } else {
            RevisionStep::Single
        };
    step.status.revision = Some(name.clone());
    step.status.step = Some(pass);
    step.status.current_stage = None;
    step.status.phase = Some(RolloutPhase::Progressing);
    step.status.stages = fresh_stages(step);
    step.actions.push(Action::DeclareRevision {
        name: name.clone(),
        digest: desired.digest.clone(),
        stamp: step.obs.fresh_stamp.clone(),
    });
    let digest_prefix: String = desired.digest.chars().take(12).collect();
    step.event(
        EventType::Normal,
        "RevisionDeclared",
        format!(
            "declared {name} ({} keys set, {} removed, digest {digest_prefix}, {pass:?} pass)",
            desired.keys_set, desired.keys_removed
        ),
    );
}

/// One pending stage status per spec stage.
pub(super) fn fresh_stages(step: &Step<'_>) -> Vec<StageStatus> {
    step.spec
        .stages
        .iter()
        .map(|stage| StageStatus {
            name: stage.name.clone(),
            ..StageStatus::default()
        })
        .collect()
}

/// Records how the current revision ended.
pub(super) fn set_outcome(step: &mut Step<'_>, outcome: Option<&str>) {
    let revision = step.status.revision.clone();
    if let Some(record) = step
        .status
        .history
        .iter_mut()
        .rev()
        .find(|record| Some(&record.name) == revision.as_ref())
    {
        record.outcome = outcome.map(str::to_owned);
    }
}
