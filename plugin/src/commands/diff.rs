//! `diff`: the keys two stored revisions differ in, or a revision and what a region's
//! ConfigMap holds, read with the caller's RBAC.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;

use crate::hub::{Hub, load_config};
use crate::render;
use crate::{CliError, EXIT_COMPLETE};
use configrollout_clusters::regions::publication::RevisionState;

/// A region as the caller reaches it: its name and the caller's kubeconfig there.
pub(super) struct RegionAccess {
    pub(super) region: String,
    pub(super) kubeconfig: std::path::PathBuf,
    pub(super) context: Option<String>,
}

impl Hub {
    /// `diff`: the keys two stored revisions differ in, read with the caller's RBAC.
    pub(super) async fn diff(
        &self,
        name: &str,
        from: Option<String>,
        to: Option<String>,
        show_values: bool,
        region: Option<RegionAccess>,
    ) -> Result<u8, CliError> {
        let rollout = self.rollout(name).await?;
        let revisions = self.revisions(&rollout).await?;
        let number = |revision: &str| -> Option<u64> {
            revision.strip_prefix('r').unwrap_or(revision).parse().ok()
        };
        let canonical = |revision: String| -> Result<String, CliError> {
            number(&revision).map(|n| format!("r{n}")).ok_or_else(|| {
                CliError::Message(format!("{revision:?} is not a revision (r1, r2, ...)"))
            })
        };
        let current = rollout
            .status
            .as_ref()
            .and_then(|status| status.revision.clone())
            .or_else(|| revisions.keys().max_by_key(|r| number(r)).cloned())
            .ok_or_else(|| {
                CliError::Message(format!(
                    "configrollout {}/{name} has no revision yet: nothing to diff",
                    self.namespace
                ))
            })?;
        let state = |revision: &str| -> Result<BTreeMap<String, String>, CliError> {
            revisions
                .get(revision)
                .map(RevisionState::desired)
                .ok_or_else(|| {
                    CliError::Message(format!(
                        "configrollout {}/{name} keeps no revision {revision} (kept: {})",
                        self.namespace,
                        {
                            let mut kept: Vec<&String> = revisions.keys().collect();
                            kept.sort_by_key(|r| number(r));
                            kept.into_iter().cloned().collect::<Vec<_>>().join(", ")
                        }
                    ))
                })
        };
        if let Some(region) = region {
            let revision = match from {
                Some(from) => canonical(from)?,
                None => current,
            };
            let declared = state(&revision)?;
            // Only the keys this rollout declares: others may share the ConfigMap.
            let managed: std::collections::BTreeSet<String> = revisions
                .values()
                .flat_map(|revision| revision.desired().into_keys())
                .collect();
            let target = &rollout.spec.target;
            let config = load_config(Some(&region.kubeconfig), region.context).await?;
            let client = Client::try_from(config).map_err(|e| CliError::Config(e.to_string()))?;
            let configmaps: Api<ConfigMap> = Api::namespaced(client, &target.namespace);
            let what = format!(
                "reading configmap {}/{} in region {}",
                target.namespace, target.name, region.region
            );
            let held = match self.call(&what, configmaps.get_opt(&target.name)).await {
                Err(CliError::Api { code: 403, .. }) => {
                    return Err(CliError::Message(format!(
                        "you may not read configmap {}/{} in region {} with that kubeconfig. \
                         No value was printed.",
                        target.namespace, target.name, region.region
                    )));
                }
                other => other?,
            };
            let held: BTreeMap<String, String> = held
                .and_then(|configmap| configmap.data)
                .unwrap_or_default()
                .into_iter()
                .filter(|(key, _)| managed.contains(key))
                .collect();
            let changes = render::diff_keys(&declared, &held);
            print!(
                "{}",
                render::render_diff(
                    &format!("{}/{name} {revision}", self.namespace),
                    &format!(
                        "region {} configmap {}/{}",
                        region.region, target.namespace, target.name
                    ),
                    &changes,
                    show_values
                )
            );
            return Ok(EXIT_COMPLETE);
        }
        let (from, to) = match (from, to) {
            (Some(from), Some(to)) => (Some(canonical(from)?), canonical(to)?),
            (Some(from), None) => (Some(canonical(from)?), current),
            (None, _) => {
                // The current revision against the one declared before it, if any.
                let to = current;
                let before = number(&to)
                    .filter(|n| *n > 1)
                    .map(|n| format!("r{}", n - 1));
                (before, to)
            }
        };
        let (from_label, from_keys) = match &from {
            Some(from) => (format!("{}/{name} {from}", self.namespace), state(from)?),
            None => ("(no earlier revision)".to_owned(), BTreeMap::new()),
        };
        let to_keys = state(&to)?;
        let changes = render::diff_keys(&from_keys, &to_keys);
        print!(
            "{}",
            render::render_diff(
                &from_label,
                &format!("{}/{name} {to}", self.namespace),
                &changes,
                show_values
            )
        );
        Ok(EXIT_COMPLETE)
    }
}
