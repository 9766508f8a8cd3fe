//! Which transitions lie between two statuses of a rollout.

use configrollout_api::{
    ConfigRolloutStatus, GateStatus, NotificationTrigger, RolloutPhase, SampleVerdict, StageState,
    conditions,
};

/// A transition worth announcing, with what a notice says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// What happened.
    pub trigger: NotificationTrigger,
    /// The revision it happened to.
    pub revision: Option<String>,
    /// The stage it happened in.
    pub stage: Option<String>,
    /// The region or gate it is about.
    pub subject: Option<String>,
    /// The condition's reason.
    pub reason: Option<String>,
    /// The condition's message (names and counts, never a value).
    pub message: Option<String>,
}

/// The transitions from `previous` to `current`, in a stable order: the phase's first,
/// then stages passed, gates, regions, drift and refusals.
pub fn transitions(
    previous: &ConfigRolloutStatus,
    current: &ConfigRolloutStatus,
) -> Vec<Transition> {
    let mut found = Vec::new();
    let same_revision = previous.revision == current.revision;
    let at = |trigger, stage: Option<&String>, subject: Option<String>, condition: &str| {
        // The condition as it is, true or not: rolling back, Progressing is False with
        // the reason.
        let condition = current.condition(condition);
        Transition {
            trigger,
            revision: current.revision.clone(),
            stage: stage.cloned(),
            subject,
            reason: condition.map(|condition| condition.reason.clone()),
            message: condition.map(|condition| condition.message.clone()),
        }
    };

    let entered = |phase: RolloutPhase| {
        current.phase == Some(phase) && (previous.phase != Some(phase) || !same_revision)
    };
    let stage = current.current_stage.as_ref();
    if current.phase == Some(RolloutPhase::AwaitingApproval)
        && !(previous.phase == Some(RolloutPhase::AwaitingApproval)
            && same_revision
            && previous.current_stage == current.current_stage)
    {
        found.push(at(
            NotificationTrigger::AwaitingApproval,
            stage,
            None,
            conditions::AWAITING_APPROVAL,
        ));
    }
    for (trigger, phase, condition) in [
        (
            NotificationTrigger::Halted,
            RolloutPhase::Halted,
            conditions::HALTED,
        ),
        (
            NotificationTrigger::RollingBack,
            RolloutPhase::RollingBack,
            conditions::PROGRESSING,
        ),
        (
            NotificationTrigger::RolledBack,
            RolloutPhase::RolledBack,
            conditions::ROLLED_BACK,
        ),
        (
            NotificationTrigger::Complete,
            RolloutPhase::Complete,
            conditions::COMPLETE,
        ),
    ] {
        if entered(phase) {
            found.push(at(trigger, stage, None, condition));
        }
    }

    for stage in &current.stages {
        let before = same_revision
            .then(|| previous.stages.iter().find(|old| old.name == stage.name))
            .flatten();
        if stage.state == StageState::Passed
            && before.is_none_or(|before| before.state != StageState::Passed)
        {
            found.push(Transition {
                trigger: NotificationTrigger::StagePassed,
                revision: current.revision.clone(),
                stage: Some(stage.name.clone()),
                subject: None,
                reason: Some("StagePassed".to_owned()),
                message: Some(format!("stage {} passed", stage.name)),
            });
        }
        // A dry-run gate failing is what it is there to show, not news anyone must act on.
        for gate in stage.gates.iter().filter(|gate| !gate.dry_run) {
            let old = before.and_then(|before| {
                before
                    .gates
                    .iter()
                    .find(|old| old.name == gate.name && old.region == gate.region)
            });
            let subject = Some(match &gate.region {
                Some(region) => format!("{} in {region}", gate.name),
                None => gate.name.clone(),
            });
            if failed(gate) && !old.is_some_and(failed) {
                found.push(Transition {
                    trigger: NotificationTrigger::GateFailing,
                    revision: current.revision.clone(),
                    stage: Some(stage.name.clone()),
                    subject,
                    reason: Some("GateFailed".to_owned()),
                    message: Some(format!(
                        "gate {} failed: {} failed, {} inconclusive of {} samples",
                        gate.name,
                        gate.failures,
                        gate.inconclusives,
                        gate.successes
                            .saturating_add(gate.failures)
                            .saturating_add(gate.inconclusives)
                    )),
                });
            } else if !failed(gate) && undecided(gate) && !old.is_some_and(undecided) {
                found.push(Transition {
                    trigger: NotificationTrigger::GateInconclusive,
                    revision: current.revision.clone(),
                    stage: Some(stage.name.clone()),
                    subject,
                    reason: Some("GateInconclusive".to_owned()),
                    message: gate
                        .samples
                        .last()
                        .and_then(|sample| sample.message.clone())
                        .or_else(|| Some(format!("gate {} could not decide", gate.name))),
                });
            }
        }
    }

    for region in &current.regions {
        let was_unreachable = previous
            .regions
            .iter()
            .any(|old| old.name == region.name && old.reachable == Some(false));
        if region.reachable == Some(false) && !was_unreachable {
            found.push(Transition {
                trigger: NotificationTrigger::RegionUnreachable,
                revision: current.revision.clone(),
                stage: region.stage.clone(),
                subject: Some(region.name.clone()),
                reason: Some("RegionUnreachable".to_owned()),
                message: region.last_error.clone(),
            });
        }
    }

    if current.is_true(conditions::DRIFTED) && !previous.is_true(conditions::DRIFTED) {
        let drifted: Vec<&str> = current
            .regions
            .iter()
            .filter(|region| !region.drifted_keys.is_empty())
            .map(|region| region.name.as_str())
            .collect();
        let subject = (!drifted.is_empty()).then(|| match drifted.len() {
            1..=3 => drifted.join(", "),
            more => format!(
                "{} and {} more",
                drifted[..3].join(", "),
                more.saturating_sub(3)
            ),
        });
        found.push(at(
            NotificationTrigger::DriftDetected,
            None,
            subject,
            conditions::DRIFTED,
        ));
    }
    let refusal = |status: &ConfigRolloutStatus| {
        status
            .true_condition(conditions::INVALID_SPEC)
            .map(|condition| (condition.reason.clone(), condition.message.clone()))
    };
    if let Some(now) = refusal(current)
        && refusal(previous).as_ref() != Some(&now)
    {
        found.push(at(
            NotificationTrigger::SpecRefused,
            None,
            None,
            conditions::INVALID_SPEC,
        ));
    }
    found
}

fn failed(gate: &GateStatus) -> bool {
    gate.verdict == Some(configrollout_api::GateVerdict::Failed)
}

/// Whether a gate's latest sample could not be judged.
fn undecided(gate: &GateStatus) -> bool {
    gate.samples.last().is_some_and(|sample| {
        matches!(
            sample.verdict,
            SampleVerdict::Inconclusive | SampleVerdict::Error
        )
    })
}
