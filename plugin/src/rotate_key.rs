//! `kubectl configrollout rotate-key`: a new digest key, the old one kept as `previous`
//! so that every region state it signed is still trusted until the controller signs it
//! again (see [`configrollout_clusters::hub::digest_keys`]). Nothing is re-run: no revision is
//! declared, no target written, no workload restarted.
//!
//! A rotation drops the key before the current one. Regions whose state is still signed
//! with it would read as tampered, so the command refuses while any rollout's status
//! names a region not yet signed with the current key (`--force` overrides).

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};

use super::hub::Hub;
use super::{CliError, EXIT_COMPLETE};
use configrollout_api::ConfigRollout;
use configrollout_clusters::hub::digest_keys::{self, KEY_FIELD, PREVIOUS_KEY_FIELD};

/// Bytes of a new key.
const NEW_KEY_BYTES: usize = 32;
/// Regions named in a refusal, at most.
const MAX_NAMED: usize = 10;

impl Hub {
    pub(super) async fn rotate_key(
        &self,
        digest_key_secret: &str,
        force: bool,
    ) -> Result<u8, CliError> {
        let (namespace, name) = digest_key_secret.split_once('/').ok_or_else(|| {
            CliError::Message(format!(
                "--digest-key-secret {digest_key_secret:?} is not NAMESPACE/NAME"
            ))
        })?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let mut secret = self
            .call("reading the digest key Secret", secrets.get(name))
            .await?;
        let key = digest_keys::from_secret(&secret)
            .map_err(|e| CliError::Message(format!("Secret {digest_key_secret}: {e}")))?;
        if key.previous_id().is_some() && !force {
            let rollouts: Api<ConfigRollout> = Api::all(self.client.clone());
            let listed = self
                .call(
                    "listing rollouts in every namespace",
                    rollouts.list(&ListParams::default()),
                )
                .await?;
            let behind = regions_behind(&listed.items, &key.id());
            if !behind.is_empty() {
                let shown: Vec<&str> = behind.iter().take(MAX_NAMED).map(String::as_str).collect();
                let more = behind.len().saturating_sub(MAX_NAMED);
                return Err(CliError::Message(format!(
                    "not rotated: a rotation drops the key before the current one, and these \
                     regions are not yet signed with the current key {id}: {list}{more}. The \
                     controller signs each region's state again when it next reads it; wait \
                     until status.regions[].stateKeyId shows {id} (`kubectl get configrollouts \
                     -A -o yaml`), or rotate with --force and repair what is left with \
                     `kubectl configrollout repair-state`",
                    id = key.id(),
                    list = shown.join(", "),
                    more = if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    },
                )));
            }
        }
        let mut new_key = vec![0_u8; NEW_KEY_BYTES];
        getrandom::fill(&mut new_key)
            .map_err(|e| CliError::Message(format!("no randomness from the OS: {e}")))?;
        let current = secret
            .data
            .as_ref()
            .and_then(|data| data.get(KEY_FIELD))
            .cloned()
            .ok_or_else(|| CliError::Message(format!("Secret {digest_key_secret} has no key")))?;
        let data = secret.data.get_or_insert_with(Default::default);
        data.insert(PREVIOUS_KEY_FIELD.to_owned(), current);
        data.insert(KEY_FIELD.to_owned(), ByteString(new_key));
        let rotated = digest_keys::from_secret(&secret)
            .map_err(|e| CliError::Message(format!("the new key: {e}")))?;
        // Conditional on the version read: two rotations at once cannot both land.
        self.call(
            "writing the digest key Secret",
            secrets.replace(&secret.name_any(), &PostParams::default(), &secret),
        )
        .await?;
        println!(
            "digest key rotated in Secret {digest_key_secret}: key id {new} (was {old}, kept as \
             previous). The controller reads it within a minute and signs each region's state \
             with it when it next reads it; no revision is declared and no target is written.",
            new = rotated.id(),
            old = key.id(),
        );
        Ok(EXIT_COMPLETE)
    }
}

/// `namespace/rollout region REGION (key id)` for every region a rollout's status says
/// holds a state of it whose key is not `current_id`: a region with a materialised mark
/// and a key id that is not the current one (or none, from a status written before key
/// ids were reported).
fn regions_behind(rollouts: &[ConfigRollout], current_id: &str) -> Vec<String> {
    rollouts
        .iter()
        .flat_map(|rollout| {
            let name = format!(
                "{}/{}",
                rollout.namespace().unwrap_or_default(),
                rollout.name_any()
            );
            rollout
                .status
                .iter()
                .flat_map(|status| status.regions.iter())
                .filter(|region| {
                    region.materialized.is_some()
                        && region.state_key_id.as_deref() != Some(current_id)
                })
                .map(move |region| {
                    format!(
                        "{name} region {} (key id {})",
                        region.name,
                        region.state_key_id.as_deref().unwrap_or("unknown")
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use configrollout_api::{ConfigRolloutStatus, LifecycleMark, RegionRolloutStatus};

    fn rollout(name: &str, regions: &[(&str, bool, Option<&str>)]) -> ConfigRollout {
        let mut rollout: ConfigRollout = serde_json::from_value(serde_json::json!({
            "apiVersion": "configrollout.dev/v1alpha1",
            "kind": "ConfigRollout",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {
                "target": {"namespace": "team", "name": "limits"},
                "data": {"a": "1"},
                "stages": [{"name": "all", "regions": {"names": ["r"]}}]
            }
        }))
        .expect("a rollout");
        rollout.status = Some(ConfigRolloutStatus {
            regions: regions
                .iter()
                .map(|(region, materialized, key_id)| RegionRolloutStatus {
                    name: (*region).to_owned(),
                    materialized: materialized.then(|| LifecycleMark {
                        revision: "r1".to_owned(),
                        step: None,
                        digest: None,
                        at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                        ),
                    }),
                    state_key_id: key_id.map(str::to_owned),
                    ..RegionRolloutStatus::default()
                })
                .collect(),
            ..ConfigRolloutStatus::default()
        });
        rollout
    }

    #[test]
    fn regions_not_yet_signed_with_the_current_key_hold_a_rotation_back() {
        let rollouts = [
            rollout(
                "done",
                &[("region-1", true, Some("new")), ("region-2", false, None)],
            ),
            rollout(
                "lagging",
                &[("region-1", true, Some("old")), ("region-2", true, None)],
            ),
        ];
        assert_eq!(
            regions_behind(&rollouts, "new"),
            [
                "team/lagging region region-1 (key id old)",
                "team/lagging region region-2 (key id unknown)"
            ]
        );
        assert!(regions_behind(&rollouts[..1], "new").is_empty());
    }
}
