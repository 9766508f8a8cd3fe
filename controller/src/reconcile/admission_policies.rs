//! Whether the admission policies that make approvals truthful are installed and bound in
//! the hub: `policies/stageapproval-approver.yaml` (an approval's approver is the user
//! who created it) and `policies/mutating/spec-author.yaml` (who last changed a rollout's spec is
//! stamped by the apiserver). Checked by name, at most every 20 s (3 s while the approver
//! policy is missing, when no approval counts), and reported on
//! the rollouts that wait for approvals.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
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
/// How long a check that found the approver policy missing is reused: no approval counts
/// meanwhile, so one installed is noticed soon.
const RECHECK_WHILE_UNBOUND: Duration = Duration::from_secs(3);

/// What a check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyReport {
    /// The policies or bindings not found (names); a read that fails names the object
    /// as missing, with why.
    pub missing: Vec<String>,
    /// When the approver policy and its binding were both in place (the later creation
    /// time); `None` while either is missing.
    pub approver_bound_since: Option<DateTime<Utc>>,
}

/// Remembers the last check.
#[derive(Default)]
pub struct PolicyCheck {
    last: Mutex<Option<(Instant, PolicyReport)>>,
}

impl PolicyCheck {
    /// The policies found and not found, from a check at most [`RECHECK_AFTER`] old.
    pub async fn report(&self, hub: &kube::Client) -> PolicyReport {
        if let Ok(last) = self.last.lock()
            && let Some((at, report)) = last.as_ref()
            && at.elapsed()
                < if report.approver_bound_since.is_some() {
                    RECHECK_AFTER
                } else {
                    RECHECK_WHILE_UNBOUND
                }
        {
            return report.clone();
        }
        let report = check(hub).await;
        if let Ok(mut last) = self.last.lock() {
            *last = Some((Instant::now(), report.clone()));
        }
        report
    }
}

async fn check(hub: &kube::Client) -> PolicyReport {
    let approver = [
        created::<ValidatingAdmissionPolicy>(hub, APPROVER_POLICY).await,
        created::<ValidatingAdmissionPolicyBinding>(hub, APPROVER_POLICY).await,
    ];
    let author = [
        created::<MutatingAdmissionPolicy>(hub, SPEC_AUTHOR_POLICY).await,
        created::<MutatingAdmissionPolicyBinding>(hub, SPEC_AUTHOR_POLICY).await,
    ];
    let approver_bound_since = approver
        .iter()
        .map(|found| found.as_ref().ok().copied())
        .collect::<Option<Vec<DateTime<Utc>>>>()
        .and_then(|times| times.into_iter().max());
    let missing = approver
        .into_iter()
        .chain(author)
        .filter_map(Result::err)
        .collect();
    PolicyReport {
        missing,
        approver_bound_since,
    }
}

/// When the object named `name` was created, or `<Kind> <name>` when it is not there
/// (or cannot be read, with why).
async fn created<K>(hub: &kube::Client, name: &str) -> Result<DateTime<Utc>, String>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(hub.clone());
    let kind = K::kind(&());
    match api_call("read admission policy", api.get_opt(name)).await {
        Ok(Some(object)) => Ok(object
            .meta()
            .creation_timestamp
            .as_ref()
            .and_then(|time| DateTime::from_timestamp(time.0.as_second(), 0))
            .unwrap_or(DateTime::<Utc>::MIN_UTC)),
        Ok(None) => Err(format!("{kind} {name}")),
        Err(error) => Err(format!("{kind} {name} (cannot be read: {error})")),
    }
}
