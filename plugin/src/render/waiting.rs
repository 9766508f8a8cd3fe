//! What a rollout waits on now and who can unblock it, for every phase, down to the
//! gates, bake time or regions of a progressing stage.

use std::fmt::Write as _;

use kube::ResourceExt;

use configrollout_api::annotations::SPEC_AUTHOR_ANNOTATION;
use configrollout_api::author_stamp::AuthorStamp;
use configrollout_api::{
    CONTRACT_STAGE, ConfigRollout, ConfigRolloutStatus, LifecycleMark, RegionRolloutStatus,
    RevisionStep, RolloutPhase, StageState, conditions,
};

use super::outcome::status_is_current;
use super::text::{gate_label, printable, reason_and_message};

/// The `InvalidSpec` reason of a candidate refused by its schemas or validators.
const INVALID_VALUE: &str = "InvalidValue";

/// What a rollout waits on, and who can unblock it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// What blocks the rollout (or `nothing`).
    pub what: String,
    /// Who can unblock it, and how.
    pub who: String,
}

fn waiting(what: impl Into<String>, who: impl Into<String>) -> Waiting {
    Waiting {
        what: what.into(),
        who: who.into(),
    }
}

/// What the rollout waits on now and who can unblock it, from its status.
pub fn waiting_on(rollout: &ConfigRollout) -> Waiting {
    let name = rollout.name_any();
    let namespace = rollout.namespace().unwrap_or_default();
    let editors = format!("whoever may edit configrollouts in {namespace}");
    let Some(status) = rollout.status.as_ref() else {
        return waiting(
            "the controller: no status yet",
            "the controller (is it running?)",
        );
    };
    if !status_is_current(rollout) {
        return waiting(
            "the controller to observe the latest spec",
            "the controller (is it running?)",
        );
    }
    let revision = status.revision.as_deref().unwrap_or("-");
    if let Some(invalid) = status
        .true_condition(conditions::INVALID_SPEC)
        .filter(|invalid| invalid.reason == INVALID_VALUE)
    {
        return waiting(
            format!(
                "values its schemas accept ({}); {revision} stays in every region",
                printable(&invalid.message)
            ),
            "whoever changed the values (spec.data or its fromConfigMap source): fix them \
             (`kubectl configrollout lint -f FILE --schema SCHEMAS` checks them), or the \
             schema's owners",
        );
    }
    if let Some(invalid) = status.true_condition(conditions::INVALID_SPEC) {
        return waiting(
            format!(
                "a valid spec ({}); no region is written",
                reason_and_message(Some(invalid))
            ),
            format!("{editors}: fix the spec (`kubectl configrollout lint -f FILE` checks it)"),
        );
    }
    match status.phase {
        None | Some(RolloutPhase::Pending) => waiting(
            "the controller to declare the first revision",
            "the controller",
        ),
        Some(RolloutPhase::Paused) => waiting(
            "spec.paused: nothing new starts",
            format!("{editors}: kubectl configrollout resume {name} -n {namespace}"),
        ),
        Some(RolloutPhase::AwaitingApproval) => {
            let stage = status.current_stage.as_deref().unwrap_or("-");
            // The short digest an approval would name, so that what was read is what is
            // approved (issue 28).
            let digest = crate::approval_pin::approvable(rollout)
                .map(|(_, digest)| format!(" (digest {digest})"))
                .unwrap_or_default();
            let mut what = if stage == CONTRACT_STAGE {
                format!("an approval of the contract step of {revision}{digest}")
            } else {
                format!("an approval of stage {stage} of {revision}{digest}")
            };
            if let Some(refused) = status
                .true_condition(conditions::AWAITING_APPROVAL)
                .filter(|condition| condition.reason == "ApprovalRefused")
            {
                let _ = write!(what, " ({})", printable(&refused.message));
            }
            let other_than = if rollout.spec.four_eyes {
                let latest = rollout
                    .annotations()
                    .get(SPEC_AUTHOR_ANNOTATION)
                    .and_then(|stamp| AuthorStamp::parse(stamp).latest());
                match latest {
                    Some(author) => format!(", other than {} (four-eyes)", printable(author)),
                    None => ", other than the spec's author (four-eyes)".to_owned(),
                }
            } else {
                String::new()
            };
            // The command names the revision (and digest) an approval would name, so
            // that it approves what was read here and nothing declared since.
            let pinned = match crate::approval_pin::approvable(rollout) {
                Some((revision, digest)) => format!(" --revision {revision} --digest {digest}"),
                None => String::new(),
            };
            waiting(
                what,
                format!(
                    "an approver allowed to create stageapprovals in {namespace}{other_than}: \
                     kubectl configrollout approve {name} -n {namespace} --stage {stage}{pinned}"
                ),
            )
        }
        Some(RolloutPhase::Halted) => waiting(
            format!(
                "an operator: {revision} halted ({})",
                reason_and_message(status.true_condition(conditions::HALTED))
            ),
            format!(
                "{editors}: kubectl configrollout retry {name} -n {namespace} once the cause \
                 is fixed, or abort, or declare a new revision"
            ),
        ),
        Some(RolloutPhase::RollingBack) => waiting(
            format!("the controller to finish rolling back {revision}"),
            "the controller",
        ),
        Some(RolloutPhase::RolledBack) => waiting(
            format!(
                "nothing: {revision} was rolled back ({})",
                reason_and_message(status.true_condition(conditions::ROLLED_BACK))
            ),
            format!("{editors}: declare a new revision"),
        ),
        Some(RolloutPhase::Complete) => waiting(
            format!("nothing: {revision} is complete"),
            "nobody needs to",
        ),
        Some(RolloutPhase::Progressing) => progressing(rollout, status, revision),
        // A refusal is said above, from its condition; a phase left without it (a status
        // written by an older controller) waits on the controller.
        Some(RolloutPhase::Refused) => waiting(
            "the controller to say why the spec is refused",
            "the controller",
        ),
    }
}

fn mark_is(mark: Option<&LifecycleMark>, revision: &str, step: Option<RevisionStep>) -> bool {
    mark.is_some_and(|mark| {
        mark.revision == revision && (mark.step.is_none() || step.is_none() || mark.step == step)
    })
}

fn progressing(rollout: &ConfigRollout, status: &ConfigRolloutStatus, revision: &str) -> Waiting {
    let stage = status.current_stage.as_deref().unwrap_or("-");
    let regions: Vec<&RegionRolloutStatus> = status
        .regions
        .iter()
        .filter(|region| region.stage.as_deref() == Some(stage))
        .collect();
    let unreachable: Vec<&RegionRolloutStatus> = regions
        .iter()
        .copied()
        .filter(|region| region.reachable == Some(false))
        .collect();
    if !unreachable.is_empty() {
        let list = unreachable
            .iter()
            .map(|region| match &region.last_error {
                Some(error) => format!("{} ({})", region.name, printable(error)),
                None => region.name.clone(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        return waiting(
            format!("unreachable region {list} of stage {stage}"),
            "the region's operators or the network; the controller keeps retrying until \
             the stage's progressDeadline",
        );
    }
    let stage_status = status.stages.iter().find(|s| s.name == stage);
    match stage_status.map(|s| s.state) {
        Some(StageState::Verifying) => {
            let running: Vec<String> = stage_status
                .into_iter()
                .flat_map(|s| &s.gates)
                .filter(|gate| gate.verdict != Some(configrollout_api::GateVerdict::Passed))
                .map(gate_label)
                .collect();
            waiting(
                format!("gates of stage {stage}: {}", running.join(", ")),
                "the controller samples them on their interval; nobody needs to act",
            )
        }
        Some(StageState::Baking) => {
            let duration = rollout
                .spec
                .stages
                .iter()
                .find(|s| s.name == stage)
                .and_then(|s| s.pause.as_ref())
                .map_or("-", |pause| pause.duration.as_str());
            waiting(
                format!("the bake time ({duration}) of stage {stage}"),
                "time; nobody needs to act",
            )
        }
        _ => {
            // Done means activated with consumers, materialized without (as the engine
            // judges it).
            let (verb, done): (&str, fn(&RegionRolloutStatus) -> Option<&LifecycleMark>) =
                if rollout.spec.consumers.is_empty() {
                    ("materialize", |region| region.materialized.as_ref())
                } else {
                    ("activate", |region| region.activated.as_ref())
                };
            let pending: Vec<&str> = regions
                .iter()
                .filter(|region| !mark_is(done(region), revision, status.step))
                .map(|region| region.name.as_str())
                .collect();
            if pending.is_empty() {
                waiting(
                    format!("the controller to advance stage {stage}"),
                    "the controller",
                )
            } else {
                waiting(
                    format!(
                        "regions {} of stage {stage} to {verb} {revision}",
                        pending.join(", ")
                    ),
                    "the controller and the regions' consumers; nobody needs to act",
                )
            }
        }
    }
}
