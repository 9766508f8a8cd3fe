//! Approvals: a stage with `approval: Required` (and the contract step when its approval
//! is required) runs only on a StageApproval that names exactly what it approves: this
//! rollout (its UID, so a rollout deleted and created again under the same name starts
//! without approvals), the stage, the revision by name and keyed digest, created after
//! the revision was declared. With four-eyes, the approver must not be the user who last
//! changed the spec. And only where something binds `spec.approver` to the user who
//! created the approval (the shipped admission policy, or the platform's own, named by
//! `--approver-enforced-externally`): otherwise no approval counts.
//!
//! The StageApproval objects are the evidence; `status.stages[].approval` only reports
//! the one a stage started on. Every decision checks the objects again, so a status written
//! by anyone else approves nothing: a stage whose approval cannot be verified goes back
//! to waiting and no region of it is published to.

use chrono::{DateTime, Utc};

use configrollout_api::author_stamp::{AuthorStamp, changes_since};
use configrollout_api::{
    Approval, ApprovalRecord, AuthorsCounted, ConfigRolloutSpec, ConfigRolloutStatus,
    RevisionRecord, StageState, stage_digest,
};

use super::clock::{from_time, to_time};
use super::observations::{ApprovalObservation, ApproverBinding, Observations};
use super::{Draft, EventType};

/// What an approval must match, for one stage of the status's revision.
struct Wanted<'a> {
    stage: &'a str,
    revision: &'a str,
    digest: &'a str,
    /// What the stage does now: an approval of anything else does not count.
    stage_digest: String,
    declared_at: DateTime<Utc>,
    /// The revision's record, with its authors.
    record: Option<&'a RevisionRecord>,
}

impl<'a> Wanted<'a> {
    fn of(
        spec: &ConfigRolloutSpec,
        status: &'a ConfigRolloutStatus,
        stage: &'a str,
    ) -> Option<Self> {
        let revision = status.revision.as_deref()?;
        let record = status.record(revision)?;
        // creationTimestamp has whole seconds: an approval made in the second the
        // revision was declared counts.
        let declared_at = from_time(&record.declared_at);
        let declared_at = declared_at
            .checked_sub_signed(chrono::TimeDelta::nanoseconds(i64::from(
                declared_at.timestamp_subsec_nanos(),
            )))
            .unwrap_or(declared_at);
        Some(Wanted {
            stage,
            revision,
            digest: record.digest.as_deref()?,
            stage_digest: stage_digest(spec, stage)?,
            declared_at,
            record: Some(record),
        })
    }

    fn names(&self, approval: &ApprovalObservation, obs: &Observations) -> bool {
        self.names_exactly(approval, obs) && binding_refusal(approval, obs).is_none()
    }

    /// Whether `approval` names exactly this stage, revision and rollout, whatever is
    /// known of who made it.
    fn names_exactly(&self, approval: &ApprovalObservation, obs: &Observations) -> bool {
        !obs.rollout_uid.is_empty()
            && approval.rollout_uid == obs.rollout_uid
            && approval.stage == self.stage
            && approval.revision == self.revision
            && approval.revision_digest == self.digest
            && approval.stage_digest == self.stage_digest
            && approval.created_at >= self.declared_at
    }
}

/// Why `approval` does not count because nothing binds its `spec.approver` to the user
/// who created it, if it does not: without the approver policy (and no word that the
/// platform enforces it otherwise) anyone who may create a StageApproval can type any
/// name into it, so no approval counts (fail closed); one created before the policy was
/// installed was admitted without it.
fn binding_refusal(approval: &ApprovalObservation, obs: &Observations) -> Option<String> {
    match &obs.approver_binding {
        ApproverBinding::External => None,
        // creationTimestamp has whole seconds: an approval made in the second the policy
        // was installed may have been made before it, so only a later second counts.
        ApproverBinding::Policy { since }
            if approval.created_at.timestamp() > since.timestamp() =>
        {
            None
        }
        ApproverBinding::Policy { since } => Some(format!(
            "approval {} by {} refused: it was made before the approver policy was \
             installed ({}), so nothing checked that {} made it; approve again",
            approval.name,
            approval.approver,
            since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            approval.approver
        )),
        ApproverBinding::Missing => Some(format!(
            "approval {} by {} not counted: nothing binds spec.approver to the user who \
             created it (install policies/stageapproval-approver.yaml, or start the \
             controller with --approver-enforced-externally if the platform enforces it \
             another way)",
            approval.name, approval.approver
        )),
    }
}

/// Whether four-eyes applies to the rollout.
fn four_eyes(spec: &ConfigRolloutSpec, obs: &Observations) -> bool {
    spec.four_eyes || obs.four_eyes_default
}

/// Why `approval` may not count under four-eyes, if it may not: its approver changed
/// what the approved revision declares (`record`'s authors, as stamped when it was
/// declared), or changed the spec since (its stages, gates: what the stage does), or one
/// of these cannot be known.
fn four_eyes_refusal(
    approval: &ApprovalObservation,
    obs: &Observations,
    record: Option<&RevisionRecord>,
    counted: Option<&AuthorsCounted>,
) -> Option<String> {
    if let Some(record) = record {
        if record
            .authors
            .iter()
            .any(|author| author == &approval.approver)
        {
            return Some(format!(
                "approval {} by {} refused: {} changed what {} declares (authors: {}), and \
                 four-eyes needs a second person",
                approval.name,
                approval.approver,
                approval.approver,
                record.name,
                record.authors.join(", ")
            ));
        }
        if let Some(why) = &record.authors_unknown {
            return Some(format!(
                "approval {} by {} refused: who changed what {} declares is not known \
                 ({why}), so four-eyes cannot be checked",
                approval.name, approval.approver, record.name
            ));
        }
    }
    let Some(stamp) = obs.spec_author.as_deref() else {
        return Some(format!(
            "approval {} by {} refused: who changed the spec is unknown (the \
             annotation configrollout.dev/spec-author is missing; install \
             policies/mutating/spec-author.yaml), so four-eyes cannot be checked",
            approval.name, approval.approver
        ));
    };
    changed_the_spec_since(stamp, counted, &approval.approver).then(|| {
        format!(
            "approval {} by {} refused: {} changed the spec since the revision was \
             declared (what its stages and gates do), and four-eyes needs a second person",
            approval.name, approval.approver, approval.approver
        )
    })
}

/// Whether `user` changed the spec since the current revision was declared (the changes
/// the rollout's stamp lists after what `counted` says that revision counted), or made
/// its latest change.
fn changed_the_spec_since(stamp: &str, counted: Option<&AuthorsCounted>, user: &str) -> bool {
    match AuthorStamp::parse(stamp) {
        AuthorStamp::Single(author) => author == user,
        AuthorStamp::Changes(changes) => {
            let since = counted
                .and_then(|counted| counted.spec)
                .and_then(|sequence| u64::try_from(sequence).ok());
            changes_since(&changes, since).users.contains(&user)
                || changes.last().is_some_and(|(_, latest)| *latest == user)
        }
    }
}

/// The earliest approval that counts for `stage` of the status's revision.
pub(super) fn verified<'o>(
    spec: &ConfigRolloutSpec,
    status: &ConfigRolloutStatus,
    obs: &'o Observations,
    stage: &str,
) -> Option<&'o ApprovalObservation> {
    let wanted = Wanted::of(spec, status, stage)?;
    let strict = four_eyes(spec, obs);
    obs.approvals
        .iter()
        .filter(|approval| wanted.names(approval, obs))
        .filter(|approval| {
            !strict
                || four_eyes_refusal(
                    approval,
                    obs,
                    wanted.record,
                    status.authors_counted.as_ref(),
                )
                .is_none()
        })
        .min_by(|a, b| a.created_at.cmp(&b.created_at).then(a.name.cmp(&b.name)))
}

/// Whether the stage at `index` of the status may publish: no approval needed, or the
/// status records the very approval the StageApproval objects verify. For region work
/// derived from a status: work a status with any other record calls for (a forged one)
/// was never sent, so it is sent once the status carries the verified record.
pub(super) fn stage_approved(
    spec: &ConfigRolloutSpec,
    status: &ConfigRolloutStatus,
    obs: &Observations,
    index: usize,
) -> bool {
    let Some(stage) = spec.stages.get(index) else {
        return false;
    };
    if stage.approval == Approval::None {
        return true;
    }
    let recorded = status.stages.get(index).and_then(|s| s.approval.as_ref());
    match (verified(spec, status, obs, &stage.name), recorded) {
        (Some(approval), Some(record)) => {
            record.name == approval.name && record.approver == approval.approver
        }
        _ => false,
    }
}

/// Whether the stage at `index` may run; records the approval that lets it (replacing
/// any record the status carried), or notes why approvals were refused.
pub(super) fn stage_may_start(draft: &mut Draft<'_>, index: usize) -> bool {
    if draft.spec.stages[index].approval == Approval::None {
        return true;
    }
    let stage_name = draft.spec.stages[index].name.clone();
    approve(draft, &stage_name, index)
}

/// Finds the approval that lets stage `index` run and records it in the stage's status
/// (dropping any record the objects do not verify).
fn approve(draft: &mut Draft<'_>, stage_name: &str, index: usize) -> bool {
    let found =
        verified(draft.spec, &draft.status, draft.obs, stage_name).map(|approval| ApprovalRecord {
            name: approval.name.clone(),
            approver: approval.approver.clone(),
            reason: approval.reason.clone(),
            approved_at: to_time(approval.created_at),
        });
    let Some(record) = found else {
        draft.status.stages[index].approval = None;
        note_refusals(draft, stage_name);
        return false;
    };
    if draft.status.stages[index].approval.as_ref() != Some(&record) {
        let revision = draft.revision().unwrap_or_default().to_owned();
        let message = format!(
            "stage {stage_name} of {revision} approved by {} ({})",
            record.approver, record.name
        );
        draft.event(EventType::Normal, "StageApproved", message);
        draft.status.stages[index].approval = Some(record);
    }
    true
}

/// Notes approvals that name the stage and revision but do not count (nothing binds
/// their approver, or four-eyes), for the `AwaitingApproval` condition and an Event.
pub(super) fn note_refusals(draft: &mut Draft<'_>, stage_name: &str) {
    let Some(wanted) = Wanted::of(draft.spec, &draft.status, stage_name) else {
        return;
    };
    let strict = four_eyes(draft.spec, draft.obs);
    let refusals: Vec<String> = draft
        .obs
        .approvals
        .iter()
        .filter(|approval| wanted.names_exactly(approval, draft.obs))
        .filter_map(|approval| {
            binding_refusal(approval, draft.obs).or_else(|| {
                strict
                    .then(|| {
                        four_eyes_refusal(
                            approval,
                            draft.obs,
                            wanted.record,
                            draft.status.authors_counted.as_ref(),
                        )
                    })
                    .flatten()
            })
        })
        .collect();
    draft.approval_refusals.extend(refusals);
}

/// A stage that claims to be running but whose approval the objects no longer verify
/// (a forged or stale status, or a deleted StageApproval) waits again.
pub(super) fn recheck_running(draft: &mut Draft<'_>, index: usize) -> bool {
    if stage_may_start(draft, index) {
        return true;
    }
    draft.status.stages[index].state = StageState::AwaitingApproval;
    false
}
