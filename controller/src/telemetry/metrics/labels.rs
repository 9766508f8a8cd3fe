//! The label types: every label value a metric carries is one of these closed enums,
//! spelled by hand, so that no rollout, region or configuration data can reach a label.

use configrollout_clusters::hub::ErrorCategory;

use crate::api::{RolloutPhase, SampleVerdict};

/// A closed set of label values.
pub trait LabelValue: Copy + std::fmt::Debug + Send + Sync + 'static {
    /// The label's name.
    const LABEL: &'static str;
    /// Every value, in the order of [`LabelValue::index`].
    const ALL: &'static [Self];
    /// The value as exported.
    fn as_str(self) -> &'static str;
    /// Position in [`LabelValue::ALL`].
    fn index(self) -> usize;
}

/// Outcome of a reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Finished without error.
    Ok,
    /// Returned an error (and will be retried).
    Error,
}

impl LabelValue for ReconcileResult {
    const LABEL: &'static str = "result";
    const ALL: &'static [Self] = &[ReconcileResult::Ok, ReconcileResult::Error];
    fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Ok => "ok",
            ReconcileResult::Error => "error",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Outcome of a write (a region object, or a status patch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteResult {
    /// Written.
    Ok,
    /// Refused by optimistic concurrency or a field-manager conflict (HTTP 409).
    Conflict,
    /// Any other failure.
    Error,
}

impl LabelValue for WriteResult {
    const LABEL: &'static str = "result";
    const ALL: &'static [Self] = &[WriteResult::Ok, WriteResult::Conflict, WriteResult::Error];
    fn as_str(self) -> &'static str {
        match self {
            WriteResult::Ok => "ok",
            WriteResult::Conflict => "conflict",
            WriteResult::Error => "error",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// What a Region's last probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionState {
    /// Its apiserver answered.
    Reachable,
    /// It could not be reached (no kubeconfig, refused, timed out).
    Unreachable,
    /// Not probed yet.
    Unknown,
}

impl LabelValue for RegionState {
    const LABEL: &'static str = "state";
    const ALL: &'static [Self] = &[
        RegionState::Reachable,
        RegionState::Unreachable,
        RegionState::Unknown,
    ];
    fn as_str(self) -> &'static str {
        match self {
            RegionState::Reachable => "reachable",
            RegionState::Unreachable => "unreachable",
            RegionState::Unknown => "unknown",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

impl From<Option<bool>> for RegionState {
    /// From a Region's `status.reachable`.
    fn from(reachable: Option<bool>) -> Self {
        match reachable {
            Some(true) => RegionState::Reachable,
            Some(false) => RegionState::Unreachable,
            None => RegionState::Unknown,
        }
    }
}

impl LabelValue for ErrorCategory {
    const LABEL: &'static str = "category";
    const ALL: &'static [Self] = &[
        ErrorCategory::Api,
        ErrorCategory::Invalid,
        ErrorCategory::NotLeader,
        ErrorCategory::Panic,
    ];
    fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::Api => "api",
            ErrorCategory::Invalid => "invalid",
            ErrorCategory::NotLeader => "not_leader",
            ErrorCategory::Panic => "panic",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Why a region's state (its companion ConfigMap) was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRefusal {
    /// Its state fails the MAC of the controller's key: edited outside configrollout.
    Tampered,
    /// An object under the companion's reserved name that the target does not own.
    Foreign,
}

impl LabelValue for StateRefusal {
    const LABEL: &'static str = "reason";
    const ALL: &'static [Self] = &[StateRefusal::Tampered, StateRefusal::Foreign];
    fn as_str(self) -> &'static str {
        match self {
            StateRefusal::Tampered => "tampered",
            StateRefusal::Foreign => "foreign",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// What a write was about to change, for writes dropped because this replica did not hold
/// the Lease at that moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// A ConfigRollout's status.
    RolloutStatus,
    /// A Region's status.
    RegionStatus,
    /// A stored revision (ControllerRevision).
    Revision,
    /// A target ConfigMap or a consumer workload in a region.
    RegionObject,
    /// An Event on a rollout.
    Event,
    /// A TargetClaim (who owns the keys of a shared target).
    Claim,
}

impl LabelValue for WriteKind {
    const LABEL: &'static str = "write";
    const ALL: &'static [Self] = &[
        WriteKind::RolloutStatus,
        WriteKind::RegionStatus,
        WriteKind::Revision,
        WriteKind::RegionObject,
        WriteKind::Event,
        WriteKind::Claim,
    ];
    fn as_str(self) -> &'static str {
        match self {
            WriteKind::RolloutStatus => "rollout_status",
            WriteKind::RegionStatus => "region_status",
            WriteKind::Revision => "revision",
            WriteKind::RegionObject => "region_object",
            WriteKind::Event => "event",
            WriteKind::Claim => "claim",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

impl LabelValue for SampleVerdict {
    const LABEL: &'static str = "verdict";
    const ALL: &'static [Self] = &[
        SampleVerdict::Successful,
        SampleVerdict::Failed,
        SampleVerdict::Inconclusive,
        SampleVerdict::Error,
    ];
    fn as_str(self) -> &'static str {
        match self {
            SampleVerdict::Successful => "successful",
            SampleVerdict::Failed => "failed",
            SampleVerdict::Inconclusive => "inconclusive",
            SampleVerdict::Error => "error",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Phases are exported spelled as in `status.phase`, so they match `kubectl get`.
impl LabelValue for RolloutPhase {
    const LABEL: &'static str = "phase";
    const ALL: &'static [Self] = &[
        RolloutPhase::Pending,
        RolloutPhase::Progressing,
        RolloutPhase::Paused,
        RolloutPhase::AwaitingApproval,
        RolloutPhase::Halted,
        RolloutPhase::RollingBack,
        RolloutPhase::RolledBack,
        RolloutPhase::Complete,
        RolloutPhase::Refused,
    ];
    fn as_str(self) -> &'static str {
        match self {
            RolloutPhase::Pending => "Pending",
            RolloutPhase::Progressing => "Progressing",
            RolloutPhase::Paused => "Paused",
            RolloutPhase::AwaitingApproval => "AwaitingApproval",
            RolloutPhase::Halted => "Halted",
            RolloutPhase::RollingBack => "RollingBack",
            RolloutPhase::RolledBack => "RolledBack",
            RolloutPhase::Complete => "Complete",
            RolloutPhase::Refused => "Refused",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}
