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

mod members;
mod round;
mod writes;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::lease::{LeaseConfig, Sighting, Tenure};
use super::shard::{MAX_SHARDS, member_lease_name, shard_lease_name, shard_of};
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
}
