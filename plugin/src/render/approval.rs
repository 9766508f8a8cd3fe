//! Whether a rollout waits for an approval, whether a stage requires one, and why
//! four-eyes would refuse a given approver.

use kube::ResourceExt;

use configrollout_api::annotations::SPEC_AUTHOR_ANNOTATION;
use configrollout_api::author_stamp::AuthorStamp;
use configrollout_api::{Approval, CONTRACT_STAGE, ConfigRollout, RolloutPhase};

use super::outcome::status_is_current;
use super::text::printable;

/// The stage (or `contract`) that waits for an approval now, if any.
pub fn awaiting_approval(rollout: &ConfigRollout) -> Option<String> {
    let status = rollout.status.as_ref()?;
    if status.phase != Some(RolloutPhase::AwaitingApproval) || !status_is_current(rollout) {
        return None;
    }
    status.current_stage.clone()
}

/// Whether `stage` (or `contract`) of the rollout's spec requires an approval.
pub fn requires_approval(rollout: &ConfigRollout, stage: &str) -> bool {
    if stage == CONTRACT_STAGE {
        return rollout.spec.strategy.contract.approval == Approval::Required;
    }
    rollout
        .spec
        .stages
        .iter()
        .any(|declared| declared.name == stage && declared.approval == Approval::Required)
}

/// Why `approver` may not approve `rollout` under four-eyes (they last changed its spec,
/// as the apiserver stamped it), if that is so. The controller would refuse such an
/// approval; saying so before creating it spares a record that approves nothing.
pub fn four_eyes_refusal(rollout: &ConfigRollout, approver: &str) -> Option<String> {
    if !rollout.spec.four_eyes {
        return None;
    }
    let namespace = rollout.namespace().unwrap_or_default();
    let name = rollout.name_any();
    if let Some(record) = crate::approval_pin::current_record(rollout)
        && record.authors.iter().any(|author| author == approver)
    {
        return Some(format!(
            "four-eyes: you ({approver}) changed what {} of configrollout {namespace}/{name} \
             declares (authors: {}), so someone else must approve it",
            record.name,
            printable(&record.authors.join(", "))
        ));
    }
    // No revision records its authors yet: the spec's stamp lists who changed it.
    let stamp = rollout.annotations().get(SPEC_AUTHOR_ANNOTATION)?;
    let changed_it = match AuthorStamp::parse(stamp) {
        AuthorStamp::Changes(changes) => changes.iter().any(|(_, user)| *user == approver),
        AuthorStamp::Single(user) => user == approver,
    };
    changed_it.then(|| {
        format!(
            "four-eyes: you ({approver}) changed the spec of configrollout {}/{}, so \
             someone else must approve it",
            rollout.namespace().unwrap_or_default(),
            rollout.name_any()
        )
    })
}
