//! Whether the admission policies that make approvals truthful are installed and bound in
//! the hub: `policies/stageapproval-approver.yaml` (an approval's approver is the user
//! who created it) and `policies/spec-author.yaml` (who last changed a rollout's spec is
//! stamped by the apiserver). Checked by name, at most every 20 s, and reported on
//! the rollouts that wait for approvals.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use kube::api::Api;

use super::api_call;

/// The ValidatingAdmissionPolicy (and binding) binding `spec.approver` to the requester.
pub const APPROVER_POLICY: &str = "stageapproval-approver.configrollout.dev";
/// The MutatingAdmissionPolicy (and binding) stamping `configrollout.dev/spec-author`.
pub const SPEC_AUTHOR_POLICY: &str = "spec-author.configrollout.dev";
/// How long a check is reused.
const RECHECK_AFTER: Duration = Duration::from_secs(20);

/// Remembers the last check.
#[derive(Default)]
pub struct PolicyCheck {
    last: Mutex<Option<(Instant, Vec<String>)>>,
}

impl PolicyCheck {
    /// The policies or bindings not found (names), from a check at most a minute old. A
    /// read that fails names the object as missing, with why.
    pub async fn missing(&self, hub: &kube::Client) -> Vec<String> {
        if let Ok(last) = self.last.lock()
            && let Some((at, missing)) = last.as_ref()
            && at.elapsed() < RECHECK_AFTER
        {
            return missing.clone();
        }
        let missing = check(hub).await;
        if let Ok(mut last) = self.last.lock() {
            *last = Some((Instant::now(), missing.clone()));
        }
        missing
    }
}

async fn check(hub: &kube::Client) -> Vec<String> {
    let found = [
        missing::<ValidatingAdmissionPolicy>(hub, APPROVER_POLICY).await,
        missing::<ValidatingAdmissionPolicyBinding>(hub, APPROVER_POLICY).await,
        missing::<MutatingAdmissionPolicy>(hub, SPEC_AUTHOR_POLICY).await,
        missing::<MutatingAdmissionPolicyBinding>(hub, SPEC_AUTHOR_POLICY).await,
    ];
    found.into_iter().flatten().collect()
}

/// `<Kind> <name>` when the object is not there (or cannot be read, with why).
async fn missing<K>(hub: &kube::Client, name: &str) -> Option<String>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(hub.clone());
    let kind = K::kind(&());
    match api_call("read admission policy", api.get_opt(name)).await {
        Ok(Some(_)) => None,
        Ok(None) => Some(format!("{kind} {name}")),
        Err(error) => Some(format!("{kind} {name} (cannot be read: {error})")),
    }
}
