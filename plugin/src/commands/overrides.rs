//! `override`: the regional emergency override, written as the caller in the region,
//! with its reason recorded on the region's target.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{SecondsFormat, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

use crate::hub::Hub;
use crate::{CliError, EXIT_COMPLETE};
use configrollout_clusters::regions::overrides::write_override;
use configrollout_core::crdt::{Stamp, WriterId};

/// Annotation on a region's target: who made the last override, when, and why.
pub const OVERRIDE_REASON_ANNOTATION: &str = "configrollout.dev/override-reason";
/// Longest override reason recorded.
const MAX_OVERRIDE_REASON: usize = 512;

impl Hub {
    /// `override`: the regional emergency override, written as the caller in the region.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn override_keys(
        &self,
        name: &str,
        region: &str,
        changes: Vec<(String, Option<String>)>,
        reason: Option<String>,
        region_kubeconfig: &Path,
        region_context: Option<String>,
        digest_key_secret: &str,
    ) -> Result<u8, CliError> {
        let rollout = self.rollout(name).await?;
        let target = rollout.spec.target.clone();
        let key = self
            .digest_key(
                digest_key_secret,
                "an override must carry the controller's keyed digest",
            )
            .await?;
        let (region_client, user) = self
            .region_client(region, region_kubeconfig, region_context)
            .await?;
        let writer = WriterId::override_by(&user).map_err(|e| {
            CliError::Message(format!("{user:?} cannot name an override writer: {e}"))
        })?;
        let now_ms = u64::try_from(Utc::now().timestamp_millis()).unwrap_or_default();
        let stamp = Stamp::new(now_ms, 0, writer.clone());
        let changes: BTreeMap<String, Option<String>> = changes.into_iter().collect();
        let written = write_override(
            &region_client,
            &key,
            &target.namespace,
            &target.name,
            stamp,
            &changes,
        );
        let materialized = self
            .region_write(&format!("writing the override in region {region}"), written)
            .await?
            .map_err(|e| {
                CliError::Message(format!(
                    "writing the override in region {region} as {user}: {e}"
                ))
            })?;
        let keys: Vec<String> = changes
            .iter()
            .map(|(key, value)| match value {
                Some(_) => format!("{key} set"),
                None => format!("{key} removed"),
            })
            .collect();
        println!(
            "override written in region {region} to configmap {}/{} as {writer}: {}",
            target.namespace,
            target.name,
            keys.join(", ")
        );
        println!(
            "keys overridden there now: {}; digest {}",
            if materialized.overridden_keys.is_empty() {
                "-".to_owned()
            } else {
                materialized.overridden_keys.join(", ")
            },
            materialized.digest
        );
        if let Some(reason) = reason {
            // Kept beside the values it explains, on the target itself, where whoever
            // looks at the region finds it; the controller keeps annotations it does not
            // own.
            let record = format!(
                "{user} at {}: {}",
                Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true),
                reason.chars().take(MAX_OVERRIDE_REASON).collect::<String>()
            );
            let patch = serde_json::json!({"metadata": {"annotations": {OVERRIDE_REASON_ANNOTATION: record}}});
            let api: Api<ConfigMap> = Api::namespaced(region_client.clone(), &target.namespace);
            let patched = tokio::time::timeout(
                self.timeout,
                api.patch(&target.name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await;
            match patched {
                Ok(Ok(_)) => println!("reason recorded as {OVERRIDE_REASON_ANNOTATION}: {record}"),
                Ok(Err(error)) => println!(
                    "the override is written, but its reason could not be recorded ({error}); \
                     keep it with your records: {reason}"
                ),
                Err(_) => println!(
                    "the override is written, but recording its reason timed out; keep it with \
                     your records: {reason}"
                ),
            }
        }
        println!(
            "a revision of {name} declared from now on wins over this override; an older one \
             arriving later does not"
        );
        Ok(EXIT_COMPLETE)
    }
}
