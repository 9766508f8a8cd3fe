//! The one check every write of the controller passes, right before it is sent: this
//! replica must hold the Lease of the rollout's shard at that moment (with one shard,
//! the single leader Lease). A deposed holder's reconcile can still be running when a new
//! holder starts; its writes stop here, and are counted.

use std::sync::Arc;

use kube::ResourceExt;

use crate::api::ConfigRollout;
use crate::leader::{LeaderState, Shards, WriterIdentity};
use crate::telemetry::metrics::{Metrics, WriteKind};

/// The shard of cluster-wide work that belongs to no rollout (the Region probe).
pub const CLUSTER_SHARD: u32 = 0;

/// Checks the Lease before each write, and counts the writes it holds back.
#[derive(Clone)]
pub struct WriteFence {
    shards: Shards,
    metrics: Arc<Metrics>,
}

impl WriteFence {
    /// A fence on `leader`'s claim (one shard), counting dropped writes in `metrics`.
    pub fn new(leader: LeaderState, metrics: Arc<Metrics>) -> Self {
        Self::sharded(Shards::single(leader, String::new()), metrics)
    }

    /// A fence on the shard Leases of `shards`.
    pub fn sharded(shards: Shards, metrics: Arc<Metrics>) -> Self {
        Self { shards, metrics }
    }

    /// The shards this fence checks.
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    /// The shard `rollout` belongs to.
    pub fn shard_of(&self, rollout: &ConfigRollout) -> u32 {
        self.shards.shard_of(
            &rollout.namespace().unwrap_or_default(),
            &rollout.name_any(),
        )
    }

    /// Whether this replica holds the shard of `rollout` now.
    pub fn holds(&self, rollout: &ConfigRollout) -> bool {
        self.shards.holds(self.shard_of(rollout))
    }

    /// What a write of `rollout`'s status records as its writer (`None` with one shard).
    pub fn writer(&self, rollout: &ConfigRollout) -> Option<WriterIdentity> {
        self.shards.writer(self.shard_of(rollout))
    }

    /// Whether a write of `kind` for `rollout` may be sent now. A refusal is counted in
    /// `configrollout_writes_dropped_total`.
    pub fn permits(&self, rollout: &ConfigRollout, kind: WriteKind) -> bool {
        self.permits_shard(self.shard_of(rollout), kind)
    }

    /// Whether a write of `kind` that belongs to no rollout (a Region's status) may be
    /// sent now: the holder of [`CLUSTER_SHARD`] does that work.
    pub fn permits_cluster(&self, kind: WriteKind) -> bool {
        self.permits_shard(CLUSTER_SHARD, kind)
    }

    fn permits_shard(&self, shard: u32, kind: WriteKind) -> bool {
        let holds = self.shards.holds(shard);
        if !holds {
            self.metrics.writes_dropped_total.inc(kind);
        }
        holds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::LeaderState;
    use crate::reconcile::tests::rollout;

    fn named(namespace: &str, name: &str) -> ConfigRollout {
        let mut rollout = rollout(None);
        rollout.metadata.namespace = Some(namespace.to_owned());
        rollout.metadata.name = Some(name.to_owned());
        rollout
    }

    #[tokio::test]
    async fn sharded_each_write_needs_the_lease_of_its_rollouts_shard() {
        let metrics = Arc::new(Metrics::new());
        let (held, held_rx) = tokio::sync::watch::channel(true);
        let (other, other_rx) = tokio::sync::watch::channel(false);
        let (_reachable, reachable_rx) = tokio::sync::watch::channel(true);
        let shards = Shards::from_states(
            "replica-a",
            vec![
                LeaderState::from_channels(held_rx, reachable_rx.clone()),
                LeaderState::from_channels(other_rx, reachable_rx),
            ],
        );
        let fence = WriteFence::sharded(shards, metrics.clone());
        // Two rollouts, one in each of the two shards.
        let ours = (0..100)
            .map(|i| named("team", &format!("r-{i}")))
            .find(|r| fence.shard_of(r) == 0)
            .unwrap();
        let theirs = (0..100)
            .map(|i| named("team", &format!("r-{i}")))
            .find(|r| fence.shard_of(r) == 1)
            .unwrap();
        assert!(fence.holds(&ours) && !fence.holds(&theirs));
        assert!(fence.permits(&ours, WriteKind::RolloutStatus));
        assert!(!fence.permits(&theirs, WriteKind::RolloutStatus));
        assert_eq!(
            metrics.writes_dropped_total.get(WriteKind::RolloutStatus),
            1
        );
        assert_eq!(
            fence.writer(&ours),
            Some(WriterIdentity {
                shard: 0,
                shards: 2,
                holder: "replica-a".to_owned()
            })
        );
        // Cluster-wide work follows shard 0.
        assert!(fence.permits_cluster(WriteKind::RegionStatus));
        held.send_replace(false);
        other.send_replace(true);
        assert!(!fence.permits_cluster(WriteKind::RegionStatus));
        assert!(!fence.permits(&ours, WriteKind::Revision));
        assert!(fence.permits(&theirs, WriteKind::Revision));
    }

    #[tokio::test]
    async fn a_replica_that_does_not_lead_sends_nothing_and_counts_it() {
        let metrics = Arc::new(Metrics::new());
        let (leading, leading_rx) = tokio::sync::watch::channel(true);
        let (_reachable, reachable_rx) = tokio::sync::watch::channel(true);
        let fence = WriteFence::new(
            LeaderState::from_channels(leading_rx, reachable_rx),
            metrics.clone(),
        );
        let rollout = rollout(None);
        assert!(fence.permits(&rollout, WriteKind::RolloutStatus));
        assert!(fence.permits_cluster(WriteKind::RegionStatus));
        assert_eq!(fence.writer(&rollout), None, "one shard records no writer");
        assert_eq!(
            metrics.writes_dropped_total.get(WriteKind::RolloutStatus),
            0
        );

        leading.send_replace(false);
        assert!(!fence.permits(&rollout, WriteKind::RolloutStatus));
        assert!(!fence.permits(&rollout, WriteKind::RegionObject));
        assert_eq!(
            metrics.writes_dropped_total.get(WriteKind::RolloutStatus),
            1
        );
        assert_eq!(metrics.writes_dropped_total.get(WriteKind::RegionObject), 1);

        // The elector gone: whatever it last said, nothing is written.
        leading.send_replace(true);
        drop(leading);
        assert!(!fence.permits(&rollout, WriteKind::Event));
    }
}
