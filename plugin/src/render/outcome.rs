//! The verdict `status` exits with: how a rollout ended, if it has, judged only from a
//! status written for the current spec.

use configrollout_api::{ConfigRollout, RolloutPhase, conditions};

use super::text::reason_and_message;

/// Whether the status was written for the spec as it is now (a status older than the
/// spec says nothing yet about the latest change).
pub fn status_is_current(rollout: &ConfigRollout) -> bool {
    let observed = rollout
        .status
        .as_ref()
        .and_then(|status| status.observed_generation);
    match (rollout.metadata.generation, observed) {
        (Some(generation), Some(observed)) => observed >= generation,
        (None, _) => true,
        (Some(_), None) => false,
    }
}

/// How a rollout ended, as far as `status` is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every stage of the revision passed: exit 0.
    Complete(String),
    /// Halted, rolled back or an invalid spec: exit 1, with the condition's reason and
    /// message.
    Failed(String),
}

/// The end the rollout has reached, or `None` while it is still under way (or its status
/// predates the current spec).
pub fn outcome(rollout: &ConfigRollout) -> Option<Outcome> {
    let status = rollout.status.as_ref()?;
    if !status_is_current(rollout) {
        return None;
    }
    let revision = status.revision.as_deref().unwrap_or("-");
    if let Some(invalid) = status.true_condition(conditions::INVALID_SPEC) {
        return Some(Outcome::Failed(format!(
            "InvalidSpec: {}",
            reason_and_message(Some(invalid))
        )));
    }
    match status.phase? {
        RolloutPhase::Complete => Some(Outcome::Complete(format!(
            "Complete: {revision} in {} regions",
            status.progress.as_deref().unwrap_or("-")
        ))),
        RolloutPhase::Halted => Some(Outcome::Failed(format!(
            "Halted: {revision}: {}",
            reason_and_message(status.true_condition(conditions::HALTED))
        ))),
        RolloutPhase::RolledBack => Some(Outcome::Failed(format!(
            "RolledBack: {revision}: {}",
            reason_and_message(status.true_condition(conditions::ROLLED_BACK))
        ))),
        _ => None,
    }
}
