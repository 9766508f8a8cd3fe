//! `kubectl configrollout repair-state`: a person replaces a region's untrusted companion
//! state with the rollout's stable revision, as the hub recorded it
//! ([`configrollout_clusters::regions::repair`]).

use std::path::Path;

use super::hub::Hub;
use super::{CliError, EXIT_COMPLETE};
use configrollout_clusters::regions::repair::{Repair, repair_state};
use configrollout_core::crdt::Replica;

impl Hub {
    pub(super) async fn repair_state(
        &self,
        name: &str,
        force: bool,
        region: &str,
        region_kubeconfig: &Path,
        region_context: Option<String>,
        digest_key_secret: &str,
    ) -> Result<u8, CliError> {
        let rollout = self.rollout(name).await?;
        let target = rollout.spec.target.clone();
        let key = self
            .digest_key(
                digest_key_secret,
                "a repaired state must carry the controller's MAC",
            )
            .await?;
        let stable = rollout
            .status
            .as_ref()
            .and_then(|status| status.stable_revision.clone());
        let rebuilt = match &stable {
            Some(revision) => {
                let revisions = self.revisions(&rollout).await?;
                revisions
                    .get(revision)
                    .map(|state| state.state.clone())
                    .ok_or_else(|| {
                        CliError::Message(format!(
                            "configrollout {}/{name} names {revision} stable but the hub keeps \
                             no such revision; nothing was written",
                            self.namespace
                        ))
                    })?
            }
            // Nothing completed yet: the region holds nothing of this rollout's that every
            // region ran, and the next publish writes the whole revision.
            None => Replica::new(),
        };
        let (region_client, user) = self
            .region_client(region, region_kubeconfig, region_context)
            .await?;
        let repaired = repair_state(
            &region_client,
            &key,
            &target.namespace,
            &target.name,
            &rebuilt,
            force,
        );
        let outcome = self
            .region_write(&format!("repairing the state in region {region}"), repaired)
            .await?
            .map_err(|e| {
                CliError::Message(format!(
                    "repairing the state of configmap {}/{} in region {region} as {user}: {e}",
                    target.namespace, target.name
                ))
            })?;
        let place = format!(
            "configmap {}/{} in region {region}",
            target.namespace, target.name
        );
        match outcome {
            Repair::NotNeeded => println!(
                "the state of {place} is intact: nothing was written (--force replaces it anyway)"
            ),
            Repair::NoTarget => println!("{place} does not exist: nothing was written"),
            Repair::Replaced { digest, existed } => {
                println!(
                    "{} the state of {place} as {user} from {}: digest {digest}",
                    if existed { "replaced" } else { "recreated" },
                    stable
                        .as_deref()
                        .unwrap_or("no stable revision (empty state)"),
                );
                println!(
                    "the controller rewrites the target from it at its next write: run \
                     `kubectl configrollout retry {name}`; make any regional override again \
                     with `kubectl configrollout override`"
                );
            }
        }
        Ok(EXIT_COMPLETE)
    }
}
