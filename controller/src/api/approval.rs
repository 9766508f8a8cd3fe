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
    category = "configrollout",
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
    /// Stage approved, or `contract` for the contract step.
    #[schemars(transform = schema::dns_label("spec.stage"))]
    pub stage: String,
    /// Revision approved, e.g. `r3`: an approval never carries over to a later revision.
    #[schemars(transform = revision_rules)]
    pub revision: String,
    /// Who approves; the shipped admission policy requires it to be the requesting user.
    #[schemars(length(min = 1), transform = schema::max_length(MAX_APPROVER_LENGTH))]
    pub approver: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::max_length(MAX_REASON_LENGTH))]
    pub reason: Option<String>,
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
