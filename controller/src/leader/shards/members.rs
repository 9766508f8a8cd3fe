//! The group's member Leases, one per replica: renewing ours, counting the live replicas
//! of our shard count (and the shard Leases of another count), and deleting the member
//! Leases of replicas gone without a goodbye.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::DeleteParams;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::ShardElector;
use crate::leader::elector::call;
use crate::leader::lease::{LeaseAction, LeaseConfig, decide};
use crate::leader::shard::{ROLE_LABEL, ROLE_MEMBER, ROLE_SHARD, SHARDS_LABEL};

impl ShardElector {
    /// Creates or renews our member Lease when due. Failures are logged: the round
    /// carries on, and others see us as live until it expires.
    pub(super) async fn renew_member(&mut self, by_name: &BTreeMap<String, Lease>, sent: Instant) {
        let config = self.member_config();
        let lease = by_name.get(&config.name);
        let due = lease.is_none()
            || self
                .member_renewed
                .is_none_or(|renewed| sent >= renewed + self.base.renew_interval);
        if !due {
            return;
        }
        let action = if lease.is_some() {
            LeaseAction::Renew
        } else {
            LeaseAction::Create
        };
        match self.write(lease, &action, &config).await {
            Ok(()) => self.member_renewed = Some(sent),
            Err(error) => warn!(%error, "member lease renewal failed"),
        }
    }

    /// The replicas of our shard count whose member Leases are live by our observation
    /// (and us).
    pub(super) fn live_members(
        &self,
        by_name: &BTreeMap<String, Lease>,
        now: Instant,
    ) -> BTreeSet<String> {
        let mut members = BTreeSet::from([self.base.identity.clone()]);
        for (name, lease) in by_name {
            if label(lease, ROLE_LABEL) != Some(ROLE_MEMBER) || !self.same_count(lease) {
                continue;
            }
            let config = LeaseConfig {
                name: name.clone(),
                ..self.base.clone()
            };
            if let LeaseAction::Wait { holder, .. } =
                decide(Some(lease), self.sightings.get(name), &config, now)
            {
                members.insert(holder);
            }
        }
        members
    }

    fn same_count(&self, lease: &Lease) -> bool {
        label(lease, SHARDS_LABEL) == Some(self.count.to_string().as_str())
    }

    /// How many shard Leases written by replicas of another shard count are held, live,
    /// by someone else.
    pub(super) fn foreign_shards_held(
        &self,
        by_name: &BTreeMap<String, Lease>,
        now: Instant,
    ) -> usize {
        by_name
            .iter()
            .filter(|(_, lease)| label(lease, ROLE_LABEL) == Some(ROLE_SHARD))
            .filter(|(_, lease)| !self.same_count(lease))
            .filter(|(name, lease)| {
                let config = LeaseConfig {
                    name: (*name).clone(),
                    ..self.base.clone()
                };
                matches!(
                    decide(Some(lease), self.sightings.get(*name), &config, now),
                    LeaseAction::Wait { .. }
                )
            })
            .count()
    }

    /// Deletes expired member Leases of others (by our observation), each only in the
    /// version we judged.
    pub(super) async fn collect_members(&self, by_name: &BTreeMap<String, Lease>, now: Instant) {
        let mine = self.member_config().name;
        for (name, lease) in by_name {
            if label(lease, ROLE_LABEL) != Some(ROLE_MEMBER) || *name == mine {
                continue;
            }
            let config = LeaseConfig {
                name: name.clone(),
                ..self.base.clone()
            };
            if decide(Some(lease), self.sightings.get(name), &config, now) != LeaseAction::Acquire {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    resource_version: lease.metadata.resource_version.clone(),
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            match call(
                "delete member lease",
                self.base.call_timeout,
                self.api.delete(name, &params),
            )
            .await
            {
                Ok(_) => info!(lease = %name, "deleted the member lease of a replica gone"),
                Err(error) => debug!(lease = %name, %error, "expired member lease not deleted"),
            }
        }
    }
}

/// The value of the label `key` of `lease`.
fn label<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .map(String::as_str)
}
