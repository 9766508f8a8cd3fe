//! What the reconcile must do after a decision, and the decision itself.

use std::time::Duration;

use configrollout_api::{ConfigRolloutStatus, RevisionStep};

/// One thing the reconcile must do. Every action is idempotent on the region side, and
/// the reconcile executes actions before it writes the status, so a crash in between
/// repeats harmless work instead of losing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Record a new revision: the reconcile stores its delta, stamped with `stamp`.
    DeclareRevision {
        /// `r<N>`.
        name: String,
        /// Keyed digest of the desired state.
        digest: String,
        /// The stamp from [`crate::engine::Observations::fresh_stamp`].
        stamp: String,
        /// The rollout's stable revision (the last that completed), whose values the new
        /// revision's rollback restores; `None` when none has completed.
        stable: Option<String>,
    },
    /// Merge the revision's delta for `step` into the region's replica.
    Publish {
        /// Region name.
        region: String,
        /// Revision name.
        revision: String,
        /// Which part of the delta: expand (sets only), contract (removals) or single.
        step: RevisionStep,
    },
    /// Merge the compensating delta of `revision` into the region (it reverts only keys
    /// whose winning write is still this revision's own).
    Rollback {
        /// Region name.
        region: String,
        /// Revision to revert.
        revision: String,
    },
    /// Restart the `Restart` consumers in the region (keyed on the revision and pass, so
    /// a repeat is a no-op).
    RestartConsumers {
        /// Region name.
        region: String,
        /// Revision name.
        revision: String,
        /// Pass.
        step: RevisionStep,
    },
    /// Emit a Kubernetes event on the rollout.
    Event {
        /// Normal or Warning.
        type_: EventType,
        /// CamelCase reason.
        reason: String,
        /// Human message: names only, never configuration values.
        message: String,
    },
}

/// Kubernetes event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Normal.
    Normal,
    /// Warning.
    Warning,
}

/// The result of one [`crate::engine::decide`].
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The status to write.
    pub status: ConfigRolloutStatus,
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// When to decide again at the latest (the soonest timer), if any.
    pub requeue_after: Option<Duration>,
    /// Gate samples this decision counted, by verdict (for the controller's metrics).
    pub samples_judged: SampleTally,
    /// Dry-run gates' samples this decision counted, by verdict: apart, so that a dry-run
    /// gate failing as expected never fires the alert of a failing gate.
    pub dry_run_samples_judged: SampleTally,
}

/// Gate samples counted, by verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleTally {
    /// The condition held.
    pub successful: u32,
    /// The condition did not hold.
    pub failed: u32,
    /// No data, NaN, or a result the condition cannot decide.
    pub inconclusive: u32,
    /// The backend could not answer.
    pub errors: u32,
}

impl SampleTally {
    /// Counts `other`'s samples too.
    pub fn add(&mut self, other: &SampleTally) {
        self.successful = self.successful.saturating_add(other.successful);
        self.failed = self.failed.saturating_add(other.failed);
        self.inconclusive = self.inconclusive.saturating_add(other.inconclusive);
        self.errors = self.errors.saturating_add(other.errors);
    }
}
