//! Sharded election: one Lease per shard, member Leases to count the live replicas, and
//! the read side every writer consults ([`Shards`]).
//!
//! Each round the [`ShardElector`] lists the group's Leases (one call, by label
//! selector), renews its member Lease, judges every shard Lease with the same pure rules
//! as the single election ([`super::lease::decide`], client-go expiry on our own
//! monotonic clock), applies the fair-share rule ([`super::shard::plan`]), and writes:
//! renewals when due, acquisitions of free shards, hand-overs. A shard's tenure ends
//! locally at `renewal sent + renew_deadline`, exactly as the single Lease's does.
//!
//! A hand-over (over the fair share) first closes the shard's fence, then waits
//! `lease_duration - renew_deadline` (the margin a deposed leader has before anyone may
//! take over after expiry) before releasing the Lease, so that a write which passed the
//! fence just before has landed before the next holder starts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::elector::call;
use super::lease::{LeaseAction, LeaseConfig, Sighting, Tenure, claim, decide, release};
use super::modes::held_by_another;
use super::shard::{
    GROUP_LABEL, MAX_SHARDS, ROLE_LABEL, ROLE_MEMBER, ROLE_SHARD, SHARDS_LABEL, member_lease_name,
    plan, shard_lease_name, shard_of,
};
use super::{LeaderError, LeaderState};

type Deadline = Arc<Mutex<Option<Instant>>>;

/// Who wrote, for the record a sharded install keeps in each rollout's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterIdentity {
    /// The shard the write was fenced on.
    pub shard: u32,
    /// How many shards there are.
    pub shards: u32,
    /// The holder of that shard's Lease (this replica's identity).
    pub holder: String,
}

/// The read side of the election(s), cheap to clone. With one shard it is the single
/// Lease's [`LeaderState`], unchanged.
#[derive(Clone, Debug)]
pub struct Shards {
    count: u32,
    identity: String,
    states: Vec<LeaderState>,
    any: LeaderState,
    acquired: watch::Receiver<u64>,
    _fixed: Option<Arc<watch::Sender<u64>>>,
}

impl Shards {
    /// One shard: the single Lease's (or no election's) state.
    pub fn single(leader: LeaderState, identity: impl Into<String>) -> Self {
        let (sender, acquired) = watch::channel(0);
        Shards {
            count: 1,
            identity: identity.into(),
            states: vec![leader.clone()],
            any: leader,
            acquired,
            _fixed: Some(Arc::new(sender)),
        }
    }

    /// Shards driven by the given states, one per shard (tests of the consumers).
    #[cfg(test)]
    pub(crate) fn from_states(identity: &str, states: Vec<LeaderState>) -> Self {
        let (sender, acquired) = watch::channel(0);
        let any = states
            .first()
            .cloned()
            .unwrap_or_else(LeaderState::always_leading);
        Shards {
            count: u32::try_from(states.len()).unwrap_or(u32::MAX),
            identity: identity.to_owned(),
            states,
            any,
            acquired,
            _fixed: Some(Arc::new(sender)),
        }
    }

    /// How many shards there are.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether there is more than one shard.
    pub fn is_sharded(&self) -> bool {
        self.count > 1
    }

    /// The shard of the rollout `namespace/name`.
    pub fn shard_of(&self, namespace: &str, name: &str) -> u32 {
        shard_of(namespace, name, self.count)
    }

    /// Whether this replica holds `shard` now (its tenure not past its renew deadline).
    pub fn holds(&self, shard: u32) -> bool {
        usize::try_from(shard)
            .ok()
            .and_then(|shard| self.states.get(shard))
            .is_some_and(LeaderState::is_leading)
    }

    /// The state of the whole replica: leading while it holds at least one shard. With
    /// one shard, the single Lease's state itself.
    pub fn any(&self) -> &LeaderState {
        &self.any
    }

    /// How many shards this replica holds now.
    pub fn held_count(&self) -> u32 {
        (0..self.count)
            .filter(|shard| self.holds(*shard))
            .fold(0, |n, _| n + 1)
    }

    /// A receiver whose value changes each time this replica acquires a shard.
    pub fn acquisitions(&self) -> watch::Receiver<u64> {
        self.acquired.clone()
    }

    /// What a write fenced on `shard` records as its writer; `None` with one shard, so
    /// an install that does not shard writes exactly what it wrote before.
    pub fn writer(&self, shard: u32) -> Option<WriterIdentity> {
        self.is_sharded().then(|| WriterIdentity {
            shard,
            shards: self.count,
            holder: self.identity.clone(),
        })
    }
}

struct Slot {
    leading: watch::Sender<bool>,
    valid_until: Deadline,
    tenure: Option<Tenure>,
}

/// The IO side of a sharded election. Runs until shut down, then releases every shard
/// it holds and deletes its member Lease.
pub struct ShardElector {
    api: Api<Lease>,
    base: LeaseConfig,
    count: u32,
    sightings: BTreeMap<String, Sighting>,
    slots: Vec<Slot>,
    any_leading: watch::Sender<bool>,
    any_until: Deadline,
    reachable: watch::Sender<bool>,
    acquired: watch::Sender<u64>,
    handovers: BTreeMap<u32, Instant>,
    member_renewed: Option<Instant>,
}

impl ShardElector {
    /// An elector for `count` shards whose Leases are named after `base.name`, and its
    /// read side.
    pub fn new(
        client: kube::Client,
        base: LeaseConfig,
        count: u32,
    ) -> Result<(ShardElector, Shards), LeaderError> {
        base.validate()?;
        if !(2..=MAX_SHARDS).contains(&count) {
            return Err(LeaderError::InvalidShards(count));
        }
        // The group label's value is the Lease name: at most 63 characters.
        if base.name.len() > 63 {
            return Err(LeaderError::InvalidName(
                "a sharded Lease name must be at most 63 characters (it labels the group)",
            ));
        }
        let (reachable, reachable_rx) = watch::channel(false);
        let mut slots = Vec::new();
        let mut states = Vec::new();
        for _ in 0..count {
            let (leading, leading_rx) = watch::channel(false);
            let valid_until: Deadline = Arc::new(Mutex::new(None));
            states.push(LeaderState::elected(
                leading_rx,
                reachable_rx.clone(),
                valid_until.clone(),
            ));
            slots.push(Slot {
                leading,
                valid_until,
                tenure: None,
            });
        }
        let (any_leading, any_rx) = watch::channel(false);
        let any_until: Deadline = Arc::new(Mutex::new(None));
        let (acquired, acquired_rx) = watch::channel(0);
        let shards = Shards {
            count,
            identity: base.identity.clone(),
            states,
            any: LeaderState::elected(any_rx, reachable_rx, any_until.clone()),
            acquired: acquired_rx,
            _fixed: None,
        };
        let elector = ShardElector {
            api: Api::namespaced(client, &base.namespace),
            base,
            count,
            sightings: BTreeMap::new(),
            slots,
            any_leading,
            any_until,
            reachable,
            acquired,
            handovers: BTreeMap::new(),
            member_renewed: None,
        };
        Ok((elector, shards))
    }

    fn shard_config(&self, shard: u32) -> LeaseConfig {
        LeaseConfig {
            name: shard_lease_name(&self.base.name, shard),
            ..self.base.clone()
        }
    }

    fn member_config(&self) -> LeaseConfig {
        LeaseConfig {
            name: member_lease_name(&self.base.name, &self.base.identity),
            ..self.base.clone()
        }
    }

    /// How long a hand-over waits between closing the fence and releasing the Lease.
    fn handover_grace(&self) -> Duration {
        self.base
            .lease_duration
            .saturating_sub(self.base.renew_deadline)
    }

    /// Campaigns, renews and rebalances until `shutdown` is cancelled; then stops writing
    /// and releases everything. Cancel `shutdown` only after the writers have stopped.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), LeaderError> {
        info!(
            lease = %self.base.name,
            namespace = %self.base.namespace,
            identity = %self.base.identity,
            shards = self.count,
            "sharded leader election started"
        );
        loop {
            let sent = Instant::now();
            tokio::select! {
                () = shutdown.cancelled() => break,
                outcome = self.round(sent) => match outcome {
                    Ok(()) => {
                        self.reachable.send_replace(true);
                    }
                    Err(error) => {
                        self.reachable.send_replace(false);
                        warn!(%error, held = self.held().len(), "shard lease round failed");
                    }
                },
            }
            self.publish();
            let mut wake = Instant::now() + self.base.retry_period;
            // Wake when a renewal is due, not at the next poll after it: a renewal late
            // by a poll and a slow round misses the renew deadline.
            // A renewal that failed is retried soon, not in a tight loop.
            let soonest = Instant::now() + self.base.retry_period / 4;
            for slot in &self.slots {
                if let Some(tenure) = slot.tenure {
                    wake = wake.min(tenure.renewal_due_at(&self.base).max(soonest));
                }
            }
            if let Some(renewed) = self.member_renewed {
                wake = wake.min((renewed + self.base.renew_interval).max(soonest));
            }
            for at in self.handovers.values() {
                wake = wake.min(*at);
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(wake) => {}
            }
            self.expire_tenures();
        }
        for slot in &mut self.slots {
            slot.tenure = None;
        }
        self.publish();
        self.release_all().await
    }

    fn held(&self) -> Vec<u32> {
        (0..self.count)
            .filter(|shard| self.slot(*shard).is_some_and(|slot| slot.tenure.is_some()))
            .collect()
    }

    fn slot(&self, shard: u32) -> Option<&Slot> {
        self.slots.get(usize::try_from(shard).ok()?)
    }

    fn slot_mut(&mut self, shard: u32) -> Option<&mut Slot> {
        self.slots.get_mut(usize::try_from(shard).ok()?)
    }

    /// Ends every tenure past its renew deadline.
    fn expire_tenures(&mut self) {
        let now = Instant::now();
        let config = self.base.clone();
        let mut lost = Vec::new();
        for (shard, slot) in self.slots.iter_mut().enumerate() {
            if let Some(tenure) = slot.tenure
                && !tenure.leading_at(now, &config)
            {
                slot.tenure = None;
                lost.push(shard);
            }
        }
        for shard in lost {
            warn!(
                shard,
                "could not renew the shard lease before the renew deadline; stopped writing its rollouts"
            );
        }
        self.publish();
    }

    /// Tells the read side what is held now.
    fn publish(&mut self) {
        let mut latest: Option<Instant> = None;
        for (shard, slot) in self.slots.iter().enumerate() {
            let until = slot.tenure.map(|tenure| tenure.deadline(&self.base));
            if let Ok(mut valid_until) = slot.valid_until.lock() {
                *valid_until = until;
            }
            let leading = until.is_some();
            let changed = slot.leading.send_if_modified(|current| {
                let changed = *current != leading;
                *current = leading;
                changed
            });
            if changed {
                if leading {
                    info!(shard, identity = %self.base.identity, "acquired shard");
                } else {
                    info!(shard, identity = %self.base.identity, "stopped writing shard");
                }
            }
            if let Some(until) = until {
                latest = Some(latest.map_or(until, |latest| latest.max(until)));
            }
        }
        if let Ok(mut any_until) = self.any_until.lock() {
            *any_until = latest;
        }
        let any = latest.is_some();
        self.any_leading.send_if_modified(|current| {
            let changed = *current != any;
            *current = any;
            changed
        });
    }

    /// One round: list, renew the member Lease, judge, plan, write.
    async fn round(&mut self, sent: Instant) -> Result<(), LeaderError> {
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

    /// Creates or renews our member Lease when due. Failures are logged: the round
    /// carries on, and others see us as live until it expires.
    async fn renew_member(&mut self, by_name: &BTreeMap<String, Lease>, sent: Instant) {
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
    fn live_members(&self, by_name: &BTreeMap<String, Lease>, now: Instant) -> BTreeSet<String> {
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
    fn foreign_shards_held(&self, by_name: &BTreeMap<String, Lease>, now: Instant) -> usize {
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
    async fn collect_members(&self, by_name: &BTreeMap<String, Lease>, now: Instant) {
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

    /// Writes the Lease for `action` (with the group's labels when creating).
    async fn write(
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
    async fn release_one(&self, config: &LeaseConfig) -> Result<(), LeaderError> {
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
    async fn release_all(&self) -> Result<(), LeaderError> {
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

/// The value of the label `key` of `lease`.
fn label<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .map(String::as_str)
}
