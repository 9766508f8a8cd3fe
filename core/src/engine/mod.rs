//! The rollout state machine: pure, no IO, deterministic clock.
//!
//! [`decide`] takes the spec, the previous status, what the reconcile observed and `now`,
//! and returns the next status, the actions to take and when to run again. All progress
//! lives in the status, so a restarted controller continues where it was.
//!
//! The previous status is taken by value and turned into the next one in place: a status
//! is hundreds of small allocations, and copying it cost more than the rest of a decision.
//! What the rules need from the status as it was (its phase, revision, which conditions
//! were true, the region work it called for) is noted before anything changes.
//!
//! One rule area per file: [`revisions`] (r1, r2, ... and history), [`selection`]
//! (which regions a stage covers), `regions` (the per-region lifecycle), `gate_windows`
//! (gate sampling and verdicts), `approvals`, `stages` (stage order, parallelism, pauses,
//! deadlines), `expand_contract`, `failure` (halt and rollback), `control` (abort and
//! retry), `dispatch` (which publishes and rollbacks are new), `conditions` (phase,
//! conditions, progress), `kstatus` (`Ready`, `Reconciling`, `Stalled` for GitOps tools)
//! and [`validate`].
//!
//! Gate samples: the reconcile calls [`gates_due`] before [`decide`], takes those samples
//! and passes them in [`Observations::gate_samples`]. A sample is thereby judged in the
//! same reconcile that took it (no round trip through an action), and a sample that is
//! taken but lost to a crash before the status is written is simply taken again: the
//! engine only counts samples that fall on the gate's schedule, so a repeat never counts
//! twice.

mod actions;
mod approvals;
pub mod clock;
pub mod collection;
mod conditions;
mod control;
mod control_record;
mod dispatch;
pub mod event_fold;
mod expand_contract;
mod failure;
pub mod gate_templates;
mod gate_windows;
mod kstatus;
pub mod label_selector;
mod observations;
pub mod ownership;
mod regions;
pub mod revisions;
pub mod selection;
mod settle;
mod stages;
pub mod tenancy;
pub mod validate;

use std::time::Duration;

use chrono::{DateTime, Utc};

use configrollout_api::conditions::ROLLOUT_CONDITION_TYPES;
use configrollout_api::{ConfigRolloutSpec, ConfigRolloutStatus, RevisionStep, RolloutPhase};

pub use actions::{Action, Decision, EventType, SampleTally};
pub use conditions::REASON_INVALID_VALUE;
pub use conditions::reconcile_failed;
pub use gate_windows::{
    BaselineQuery, ComparisonRequest, DEFAULT_GATE_SETTLE_TIME, GateSampleRequest, ProbeRequest,
    done_shows_consumers_loaded, gates_due,
};
pub use observations::{
    AppliedRevision, ApprovalObservation, ApproverBinding, ComparisonSample, ConsumerObservation,
    Control, DesiredRevision, GateSampleObservation, Observations, PENDING_SAMPLE_RECHECK,
    PendingSample, RegionObservation, RevisionAuthors, SourceStamp,
};
pub use settle::{ActOutcome, FailedRegion, observe_again, settle};
pub use tenancy::Grant;
pub use validate::{SpecError, validate};

/// Samples kept per gate window in the status (oldest dropped first).
pub const MAX_SAMPLES_PER_GATE: usize = 10;
/// How often to look again while regions are being updated or rolled back: region
/// clusters are polled, not watched.
pub const REGION_POLL_INTERVAL: Duration = Duration::from_secs(10);
/// Longest `InvalidSpec` message, so that a spec with many errors cannot bloat status.
const MAX_CONDITION_MESSAGE: usize = 1024;

/// Decides the next status and actions for one rollout. Pure: the same inputs always
/// give the same decision. `status` is the previous status; a caller that still needs it
/// afterwards passes a clone.
pub fn decide(
    spec: &ConfigRolloutSpec,
    status: ConfigRolloutStatus,
    obs: &Observations,
    now: DateTime<Utc>,
) -> Decision {
    let mut draft = Draft::new(spec, status, obs, now);
    draft.run();
    draft.finish()
}

/// A decision being drafted: the previous status, turned into the next one in place by
/// the rules, with the actions and timers they add. [`Draft::finish`] makes it a
/// [`Decision`]. Every rule area takes one as `draft`.
pub(crate) struct Draft<'a> {
    spec: &'a ConfigRolloutSpec,
    before: Before<'a>,
    obs: &'a Observations,
    now: DateTime<Utc>,
    plan: selection::StagePlan<'a>,
    status: ConfigRolloutStatus,
    actions: Vec<Action>,
    wake_at: Option<DateTime<Utc>>,
    /// Set when this decision stops the rollout: (reason, message) for the Halted condition.
    halt: Option<(String, String)>,
    /// Set when this decision resumes the rollout (unpaused or retried): deadlines restart.
    resumed_now: bool,
    /// Gate samples counted in this decision, by verdict.
    samples_judged: SampleTally,
    /// Dry-run gates' samples counted in this decision, by verdict.
    dry_run_samples_judged: SampleTally,
    /// Approvals that named what is awaited but did not count (four-eyes), as messages.
    approval_refusals: Vec<String>,
}

/// The facts the rules need from the status a decision started from.
pub(crate) struct Before<'a> {
    phase: Option<RolloutPhase>,
    revision: Option<String>,
    /// Per entry of [`ROLLOUT_CONDITION_TYPES`], whether that condition was true.
    true_conditions: [bool; ROLLOUT_CONDITION_TYPES.len()],
    /// The region work the status called for (see `dispatch`).
    work: Vec<dispatch::Work<'a>>,
}

impl<'a> Before<'a> {
    fn of(
        spec: &ConfigRolloutSpec,
        plan: &selection::StagePlan<'a>,
        obs: &'a Observations,
        status: &ConfigRolloutStatus,
    ) -> Self {
        let true_conditions = ROLLOUT_CONDITION_TYPES.map(|type_| status.is_true(type_));
        Before {
            phase: status.phase,
            revision: status.revision.clone(),
            true_conditions,
            work: dispatch::work_of(spec, plan, obs, status),
        }
    }

    /// Whether the condition `type_` (one of [`ROLLOUT_CONDITION_TYPES`]) was true.
    fn was_true(&self, type_: &str) -> bool {
        ROLLOUT_CONDITION_TYPES
            .iter()
            .zip(self.true_conditions)
            .any(|(known, was_true)| was_true && *known == type_)
    }
}

impl<'a> Draft<'a> {
    /// Sets one condition, keeping its transition time unless the status flips.
    fn set_condition(&mut self, type_: &str, status: bool, reason: &str, message: String) {
        configrollout_api::conditions::set(
            &mut self.status.conditions,
            type_,
            status,
            reason,
            message,
            Some(self.obs.generation),
            clock::to_time(self.now),
        );
    }

    fn new(
        spec: &'a ConfigRolloutSpec,
        mut status: ConfigRolloutStatus,
        obs: &'a Observations,
        now: DateTime<Utc>,
    ) -> Self {
        let plan = selection::plan(spec, &obs.regions, &obs.grant);
        let before = Before::of(spec, &plan, obs, &status);
        status.observed_generation = Some(obs.generation);
        Draft {
            spec,
            before,
            obs,
            now,
            plan,
            status,
            actions: Vec::new(),
            wake_at: None,
            halt: None,
            resumed_now: false,
            samples_judged: SampleTally::default(),
            dry_run_samples_judged: SampleTally::default(),
            approval_refusals: Vec::new(),
        }
    }

    fn run(&mut self) {
        let outside_grant: Vec<String> = self
            .obs
            .grant
            .check(self.spec)
            .iter()
            .map(ToString::to_string)
            .collect();
        let errors: Vec<String> = outside_grant
            .iter()
            .cloned()
            .chain(validate(self.spec).iter().map(ToString::to_string))
            .chain(revisions::retarget_error(self))
            .chain(self.obs.spec_errors.iter().cloned())
            .chain(self.obs.target_refusals.iter().cloned())
            .chain(self.obs.value_violations.iter().cloned())
            .collect();
        if !errors.is_empty() {
            let only_values = errors.len() == self.obs.value_violations.len();
            let reason = if !outside_grant.is_empty() {
                conditions::REASON_OUTSIDE_GRANT
            } else if only_values {
                conditions::REASON_INVALID_VALUE
            } else if !self.obs.target_refusals.is_empty() && self.obs.spec_errors.is_empty() {
                conditions::REASON_TARGET_REFUSED
            } else {
                conditions::REASON_INVALID_SPEC
            };
            conditions::invalid_spec(self, &errors, reason);
            return;
        }
        if self
            .status
            .is_true(configrollout_api::conditions::INVALID_SPEC)
        {
            // Nothing moved while the spec was invalid: deadlines start again.
            self.resumed_now = true;
        }
        revisions::leave_refused(self);
        revisions::ensure_current(self);
        if self.revision().is_none() {
            self.status.phase = Some(RolloutPhase::Pending);
            conditions::refresh(self);
            return;
        }
        regions::sync(self);
        control::apply(self);
        failure::halt_on_tampered_state(self);
        failure::halt_on_future_stamps(self);
        match self.status.phase {
            Some(RolloutPhase::Halted | RolloutPhase::RolledBack) => {}
            Some(RolloutPhase::RollingBack) => {
                if !self.spec.paused {
                    failure::continue_rollback(self);
                }
            }
            Some(RolloutPhase::Complete) if self.spec.paused => {}
            _ if self.spec.paused => self.status.phase = Some(RolloutPhase::Paused),
            _ => {
                if self.status.phase == Some(RolloutPhase::Paused) {
                    self.resumed_now = true;
                }
                self.status.phase = Some(RolloutPhase::Progressing);
                stages::advance(self);
            }
        }
        regions::forget_lost(self);
        conditions::refresh(self);
    }

    fn finish(mut self) -> Decision {
        dispatch::emit_new(&mut self);
        self.status.current_stage_digest = self
            .status
            .current_stage
            .as_deref()
            .and_then(|stage| configrollout_api::stage_digest(self.spec, stage));
        let requeue_after = self.wake_at.map(|at| clock::until(self.now, at));
        Decision {
            status: self.status,
            actions: self.actions,
            requeue_after,
            samples_judged: self.samples_judged,
            dry_run_samples_judged: self.dry_run_samples_judged,
        }
    }

    /// The revision being rolled out.
    fn revision(&self) -> Option<&str> {
        self.status.revision.as_deref()
    }

    /// The step (pass) of the revision being rolled out.
    fn revision_step(&self) -> RevisionStep {
        self.status.step.unwrap_or(RevisionStep::Single)
    }

    /// Asks to run again no later than `at`.
    fn wake_at(&mut self, at: DateTime<Utc>) {
        self.wake_at = Some(self.wake_at.map_or(at, |current| current.min(at)));
    }

    /// Asks to look at the regions again soon.
    fn poll_regions(&mut self) {
        let poll = chrono::TimeDelta::from_std(REGION_POLL_INTERVAL).unwrap_or_default();
        self.wake_at(clock::after(self.now, poll));
    }

    fn event(&mut self, type_: EventType, reason: &str, message: String) {
        self.actions.push(Action::Event {
            type_,
            reason: reason.to_owned(),
            message,
        });
    }
}
