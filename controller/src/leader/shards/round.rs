//! One round of the sharded election: list the group's Leases, renew what is ours, judge
//! every shard, apply the fair-share plan (hand-overs, acquisitions), and release the
//! shards whose hand-over grace has passed.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::ShardElector;
use crate::leader::LeaderError;
use crate::leader::elector::call;
use crate::leader::lease::{LeaseAction, LeaseConfig, Sighting, Tenure, decide};
use crate::leader::modes::held_by_another;
use crate::leader::shard::{GROUP_LABEL, plan};

impl ShardElector {
    /// One round: list, renew the member Lease, judge, plan, write.
    pub(super) async fn round(&mut self, sent: Instant) -> Result<(), LeaderError> {
        let timeout = self.base.call_timeout;
        let selector = format!("{GROUP_LABEL}={}", self.base.name);
        let listed = call(
            "list leases",
            timeout,
            self.api.list(&ListParams::default().labels(&selector)),
        )
        .await?;
        let by_name: BTreeMap<String, Lease> = listed
            .items
            .into_iter()
            .filter_map(|lease| Some((lease.metadata.name.clone()?, lease)))
            .collect();
        let single_name = self.base.name.clone();
        self.sightings
            .retain(|name, _| by_name.contains_key(name) || *name == single_name);
        for (name, lease) in &by_name {
            let sighting = Sighting::observe(self.sightings.get(name), lease, sent);
            self.sightings.insert(name.clone(), sighting);
        }
        // A single-mode replica of the same controller holds its Lease (a switch between
        // modes): it wins, so we hold no shard (see `super::modes`).
        let single = call("read lease", timeout, self.api.get_opt(&single_name)).await?;
        match &single {
            Some(lease) => {
                let sighting = Sighting::observe(self.sightings.get(&single_name), lease, sent);
                self.sightings.insert(single_name.clone(), sighting);
            }
            None => {
                self.sightings.remove(&single_name);
            }
        }
        if held_by_another(
            single.as_ref(),
            self.sightings.get(&single_name),
            &self.base,
            sent,
        ) {
            self.yield_to_single().await;
            return Ok(());
        }

        // Renewals first (the tenure's clock runs from `sent`), all at once, and only of
        // Leases the list shows are still ours.
        let due: Vec<(u32, LeaseConfig)> = self
            .held()
            .into_iter()
            .filter(|shard| {
                self.slot(*shard)
                    .and_then(|slot| slot.tenure)
                    .is_some_and(|tenure| tenure.renewal_due(sent, &self.base))
            })
            .map(|shard| (shard, self.shard_config(shard)))
            .filter(|(_, config)| {
                decide(
                    by_name.get(&config.name),
                    self.sightings.get(&config.name),
                    config,
                    sent,
                ) == LeaseAction::Renew
            })
            .collect();
        let renewals =
            futures::future::join_all(due.iter().map(|(_, config)| {
                self.write(by_name.get(&config.name), &LeaseAction::Renew, config)
            }))
            .await;
        let renewed_at = Instant::now();
        let mut reacquired = false;
        for ((shard, _), renewal) in due.iter().zip(renewals) {
            match renewal {
                Ok(()) => {
                    let config = self.base.clone();
                    let Some(slot) = self.slot_mut(*shard) else {
                        continue;
                    };
                    let lapsed = slot
                        .tenure
                        .is_some_and(|tenure| !tenure.leading_at(renewed_at, &config));
                    slot.tenure = Some(Tenure::renewed(sent));
                    if lapsed {
                        // Its writes were refused for a moment, and the rollouts that
                        // were skipped then wait for nothing: reconcile them again.
                        warn!(
                            shard,
                            "renewed the shard lease after its renew deadline; reconciling its rollouts again"
                        );
                        self.acquired.send_modify(|count| *count += 1);
                    }
                }
                Err(error) => warn!(shard, %error, "shard lease renewal failed"),
            }
        }

        self.renew_member(&by_name, sent).await;
        let members = self.live_members(&by_name, sent);
        let foreign = self.foreign_shards_held(&by_name, sent);
        if foreign > 0 {
            warn!(
                leases = foreign,
                shards = self.count,
                "shard leases of another shard count are held: taking no shard until they are released or expire"
            );
        }

        // Who holds each shard, by our observation.
        let mut holders: Vec<Option<String>> = Vec::new();
        let mut actions = Vec::new();
        for shard in 0..self.count {
            let config = self.shard_config(shard);
            let lease = by_name.get(&config.name);
            let action = decide(lease, self.sightings.get(&config.name), &config, sent);
            let ours = self.slot(shard).is_some_and(|slot| slot.tenure.is_some());
            let holder = match &action {
                // Ours by the record but not by a tenure of this process (a restart with
                // the same identity): free for us to take back.
                LeaseAction::Renew if !ours => None,
                LeaseAction::Renew => Some(self.base.identity.clone()),
                LeaseAction::Wait { holder, .. } => Some(holder.clone()),
                LeaseAction::Create | LeaseAction::Acquire => None,
            };
            if action != LeaseAction::Renew
                && let Some(slot) = self.slot_mut(shard)
                && slot.tenure.take().is_some()
            {
                warn!(
                    shard,
                    "the shard lease is no longer ours; stopped writing its rollouts"
                );
            }
            // A shard being handed over is already given up: it counts for nobody.
            let holder = if self.handovers.contains_key(&shard) {
                None
            } else {
                holder
            };
            holders.push(holder);
            actions.push(action);
        }
        self.publish();

        // One hand-over at a time: the picture settles before the next.
        let step = plan(&self.base.identity, &members, &holders);
        if self.handovers.is_empty() {
            for shard in &step.release {
                if let Some(slot) = self.slot_mut(*shard) {
                    slot.tenure = None;
                }
                let at = Instant::now() + self.handover_grace();
                self.handovers.insert(*shard, at);
                info!(
                    shard,
                    live_members = members.len(),
                    "over the fair share: handing the shard over"
                );
            }
            self.publish();
        }

        // Acquisitions (never while handing over, never beyond the plan, never while
        // replicas of another shard count hold shards).
        if self.handovers.is_empty() && foreign == 0 {
            for shard in step.acquire {
                let Some(action) = usize::try_from(shard)
                    .ok()
                    .and_then(|index| actions.get(index))
                    .cloned()
                else {
                    continue;
                };
                let config = self.shard_config(shard);
                match self
                    .write(by_name.get(&config.name), &action, &config)
                    .await
                {
                    Ok(()) => {
                        if let Some(slot) = self.slot_mut(shard) {
                            slot.tenure = Some(Tenure::renewed(sent));
                        }
                        reacquired = true;
                    }
                    Err(LeaderError::Conflict { .. }) => {
                        debug!(shard, "another replica took the shard first");
                    }
                    Err(error) => warn!(shard, %error, "shard lease acquisition failed"),
                }
            }
        }
        // Published first: the rollouts reconciled on this signal must find the new
        // tenure, not the lapsed one.
        self.publish();
        if reacquired {
            self.acquired.send_modify(|count| *count += 1);
        }

        // The holder of shard 0 deletes the member Leases of replicas gone without a
        // goodbye (killed), once expired; a precondition keeps a renewed one.
        if self.slot(0).is_some_and(|slot| slot.tenure.is_some()) {
            self.collect_members(&by_name, sent).await;
        }

        // Hand-overs whose grace has passed.
        let now = Instant::now();
        let due: Vec<u32> = self
            .handovers
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(shard, _)| *shard)
            .collect();
        for shard in due {
            self.handovers.remove(&shard);
            let config = self.shard_config(shard);
            if let Err(error) = self.release_one(&config).await {
                warn!(shard, %error, "shard lease not released; it will expire");
            } else {
                info!(shard, identity = %self.base.identity, "released shard");
            }
        }
        Ok(())
    }

    /// Stops writing every shard and releases their Leases, for a single-mode replica
    /// that holds the controller's Lease.
    async fn yield_to_single(&mut self) {
        let held = self.held();
        self.handovers.clear();
        for shard in &held {
            if let Some(slot) = self.slot_mut(*shard) {
                slot.tenure = None;
            }
        }
        self.publish();
        if !held.is_empty() {
            warn!(
                shards = held.len(),
                "a single-mode replica holds the controller's lease: released our shards"
            );
        } else {
            debug!("a single-mode replica holds the controller's lease: taking no shard");
        }
        for shard in held {
            let config = self.shard_config(shard);
            if let Err(error) = self.release_one(&config).await {
                warn!(shard, %error, "shard lease not released; it will expire");
            }
        }
    }
}
