//! Writing the group's Leases: creating, renewing and taking them with the group's
//! labels, and releasing them (one at a hand-over, all of them at shutdown).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PostParams};
use tracing::{info, warn};

use super::ShardElector;
use crate::leader::LeaderError;
use crate::leader::elector::call;
use crate::leader::lease::{LeaseAction, LeaseConfig, claim, release};
use crate::leader::shard::{GROUP_LABEL, ROLE_LABEL, ROLE_MEMBER, ROLE_SHARD, SHARDS_LABEL};

impl ShardElector {
    /// Writes the Lease for `action` (with the group's labels when creating).
    pub(super) async fn write(
        &self,
        lease: Option<&Lease>,
        action: &LeaseAction,
        config: &LeaseConfig,
    ) -> Result<(), LeaderError> {
        let timeout = self.base.call_timeout;
        let Some(mut desired) = claim(lease, action, config, Timestamp::now()) else {
            return Ok(());
        };
        let role = if config.name == self.member_config().name {
            ROLE_MEMBER
        } else {
            ROLE_SHARD
        };
        let labels = desired.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(GROUP_LABEL.to_owned(), self.base.name.clone());
        labels.insert(ROLE_LABEL.to_owned(), role.to_owned());
        labels.insert(SHARDS_LABEL.to_owned(), self.count.to_string());
        let params = PostParams::default();
        match (action, lease) {
            (LeaseAction::Create, _) | (_, None) => {
                call("create lease", timeout, self.api.create(&params, &desired)).await?;
            }
            _ => {
                call(
                    "write lease",
                    timeout,
                    self.api.replace(&config.name, &params, &desired),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Hands the Lease of `config` over if we hold it.
    pub(super) async fn release_one(&self, config: &LeaseConfig) -> Result<(), LeaderError> {
        let timeout = self.base.call_timeout;
        let Some(lease) = call("read lease", timeout, self.api.get_opt(&config.name)).await? else {
            return Ok(());
        };
        let Some(released) = release(&lease, config, Timestamp::now()) else {
            return Ok(());
        };
        call(
            "release lease",
            timeout,
            self.api
                .replace(&config.name, &PostParams::default(), &released),
        )
        .await?;
        Ok(())
    }

    /// At shutdown: releases every shard Lease we hold and deletes our member Lease, so
    /// the others rebalance at once. One list finds ours; every one is tried, and the
    /// first error is returned.
    pub(super) async fn release_all(&self) -> Result<(), LeaderError> {
        let timeout = self.base.call_timeout;
        let selector = format!("{GROUP_LABEL}={},{ROLE_LABEL}={ROLE_SHARD}", self.base.name);
        let listed = call(
            "list leases",
            timeout,
            self.api.list(&ListParams::default().labels(&selector)),
        )
        .await?;
        let mut first_error = None;
        for lease in listed.items {
            let Some(name) = lease.metadata.name.clone() else {
                continue;
            };
            let config = LeaseConfig {
                name: name.clone(),
                ..self.base.clone()
            };
            let Some(released) = release(&lease, &config, Timestamp::now()) else {
                continue;
            };
            match call(
                "release lease",
                timeout,
                self.api.replace(&name, &PostParams::default(), &released),
            )
            .await
            {
                Ok(_) => info!(lease = %name, "released shard"),
                Err(error) => {
                    warn!(lease = %name, %error, "shard lease not released; it will expire");
                    first_error.get_or_insert(error);
                }
            }
        }
        let member = self.member_config().name;
        match call(
            "delete member lease",
            timeout,
            self.api.delete(&member, &DeleteParams::default()),
        )
        .await
        {
            Ok(_) => {}
            Err(LeaderError::Call(error)) if error.code() == Some(404) => {}
            Err(error) => warn!(%error, "member lease not deleted; it will expire"),
        }
        info!(identity = %self.base.identity, "released the shard leases");
        first_error.map_or(Ok(()), Err)
    }
}
