//! `StageApproval`: a person's approval for one stage of one revision of a rollout.
//!
//! A kind of its own so that RBAC can grant approving without granting editing
//! rollouts, and so that approvals are kept as records. Immutable once created.

use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::schema::{self, Rule};

/// The stage name a StageApproval uses to approve the contract step of
/// expand-and-contract.
pub const CONTRACT_STAGE: &str = "contract";
/// Grammar of revision names (`r1`, `r2`, ...).
pub const REVISION_NAME_PATTERN: &str = "^r[1-9][0-9]*$";
/// Longest approver name (a Kubernetes user name).
pub const MAX_APPROVER_LENGTH: u64 = 256;
/// Longest approval reason.
pub const MAX_REASON_LENGTH: u64 = 1024;
/// Longest object UID accepted (a UUID is 36 characters).
pub const MAX_UID_LENGTH: u64 = 64;
/// Longest revision digest accepted (HMAC-SHA256 in hex is 64 characters, plus a prefix).
pub const MAX_DIGEST_LENGTH: u64 = 128;

/// Approves one stage of one revision of a ConfigRollout in the same namespace.
// Several print columns share `type_ = "string"`, which clippy mistakes for a repeated
// attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "StageApproval",
    plural = "stageapprovals",
    namespaced,
    derive = "PartialEq",
    shortname = "sapproval",
    category = "configrollout-all",
    doc = "A recorded approval for one stage of one revision of a ConfigRollout.",
    printcolumn(name = "Rollout", type_ = "string", json_path = ".spec.rollout"),
    printcolumn(name = "Stage", type_ = "string", json_path = ".spec.stage"),
    printcolumn(name = "Revision", type_ = "string", json_path = ".spec.revision"),
    printcolumn(name = "Approver", type_ = "string", json_path = ".spec.approver"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = immutable)]
pub struct StageApprovalSpec {
    /// Name of the ConfigRollout, in this namespace.
    #[schemars(transform = schema::dns_subdomain("spec.rollout"))]
    pub rollout: String,
    /// `metadata.uid` of the ConfigRollout approved: an approval never carries over to a
    /// rollout deleted and created again under the same name.
    #[serde(rename = "rolloutUID")]
    #[schemars(length(min = 1), transform = schema::max_length(MAX_UID_LENGTH))]
    pub rollout_uid: String,
    /// Stage approved, or `contract` for the contract step.
    #[schemars(transform = schema::dns_label("spec.stage"))]
    pub stage: String,
    /// Revision approved, e.g. `r3`: an approval never carries over to a later revision.
    #[schemars(transform = revision_rules)]
    pub revision: String,
    /// The revision's keyed digest, as `status.history[].digest` shows it: the approval
    /// is for exactly this content, never for another revision that reuses the name.
    #[schemars(length(min = 1), transform = schema::max_length(MAX_DIGEST_LENGTH))]
    pub revision_digest: String,
    /// What the stage does, as the approver saw it: [`stage_digest`] of the rollout's
    /// spec (the stage's definition, the gates it names, the target; for `contract`, the
    /// contract step). An edit of any of them voids the approval.
    #[schemars(length(min = 1), transform = schema::max_length(MAX_DIGEST_LENGTH))]
    pub stage_digest: String,
    /// Who approves; the shipped admission policy requires it to be the requesting user.
    #[schemars(length(min = 1), transform = schema::max_length(MAX_APPROVER_LENGTH))]
    pub approver: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::multiline_text(MAX_REASON_LENGTH))]
    pub reason: Option<String>,
}

impl StageApprovalSpec {
    /// The approval of `stage` of the revision `rollout` is rolling out now, by
    /// `approver`: it names the rollout's UID and the revision's name and digest as the
    /// rollout's status reports them. `None` while the status names no revision with a
    /// digest (nothing to approve yet).
    pub fn for_current_revision(
        rollout: &super::ConfigRollout,
        stage: &str,
        approver: &str,
        reason: Option<String>,
    ) -> Option<Self> {
        let revision = rollout.status.as_ref()?.revision.as_deref()?;
        Self::for_revision(rollout, revision, stage, approver, reason)
    }

    /// The approval of `stage` of `revision`, one of the revisions `rollout`'s status
    /// keeps in its history (see [`Self::for_current_revision`]).
    pub fn for_revision(
        rollout: &super::ConfigRollout,
        revision: &str,
        stage: &str,
        approver: &str,
        reason: Option<String>,
    ) -> Option<Self> {
        let digest = rollout.status.as_ref()?.record(revision)?.digest.clone()?;
        Some(StageApprovalSpec {
            rollout: rollout.metadata.name.clone()?,
            rollout_uid: rollout.metadata.uid.clone()?,
            stage: stage.to_owned(),
            revision: revision.to_owned(),
            revision_digest: digest,
            stage_digest: stage_digest(&rollout.spec, stage)?,
            approver: approver.to_owned(),
            reason,
        })
    }
}

/// What the stage `stage` of `spec` does, as a SHA-256 in hex: its definition (regions,
/// parallelism, approval, pause, gates, deadline), the definitions of the gates it names,
/// and the target; for [`CONTRACT_STAGE`], the contract step and the target. `None` when
/// the spec has no such stage. Not keyed: it covers the spec, which the approver reads.
pub fn stage_digest(spec: &super::ConfigRolloutSpec, stage: &str) -> Option<String> {
    use sha2::{Digest, Sha256};
    let target = (&spec.target.namespace, &spec.target.name);
    let covered = if stage == CONTRACT_STAGE {
        serde_json::to_vec(&(target, &spec.strategy))
    } else {
        let definition = spec
            .stages
            .iter()
            .find(|candidate| candidate.name == stage)?;
        let gates: Vec<&super::Gate> = definition
            .gates
            .iter()
            .filter_map(|name| spec.gates.iter().find(|gate| &gate.name == name))
            .collect();
        serde_json::to_vec(&(target, definition, gates))
    }
    .ok()?;
    Some(hex::encode(Sha256::digest(covered)))
}

fn immutable(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[Rule::new(
            "self == oldSelf",
            "StageApproval spec is immutable: delete it and create a new one",
        )
        .reason("FieldValueForbidden")],
    );
}

fn revision_rules(schema: &mut Schema) {
    schema::set(schema, "maxLength", 16);
    schema::add_rules(
        schema,
        &[Rule::new(
            format!("self.matches({})", schema::cel_str(REVISION_NAME_PATTERN)),
            "spec.revision must be a revision name such as r3",
        )],
    );
}
