//! The one check every write of the controller passes, right before it is sent: this
//! replica must hold the Lease at that moment. A deposed leader's reconcile can still be
//! running when a new leader starts; its writes stop here, and are counted.

use std::sync::Arc;

use crate::leader::LeaderState;
use crate::telemetry::metrics::{Metrics, WriteKind};

/// Checks the Lease before each write, and counts the writes it holds back.
#[derive(Clone)]
pub struct WriteFence {
    leader: LeaderState,
    metrics: Arc<Metrics>,
}

impl WriteFence {
    /// A fence on `leader`'s claim, counting dropped writes in `metrics`.
    pub fn new(leader: LeaderState, metrics: Arc<Metrics>) -> Self {
        Self { leader, metrics }
    }

    /// Whether a write of `kind` may be sent now. A refusal is counted in
    /// `configrollout_writes_dropped_total`.
    pub fn permits(&self, kind: WriteKind) -> bool {
        let leading = self.leader.is_leading();
        if !leading {
            self.metrics.writes_dropped_total.inc(kind);
        }
        leading
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::LeaderState;

    #[tokio::test]
    async fn a_replica_that_does_not_lead_sends_nothing_and_counts_it() {
        let metrics = Arc::new(Metrics::new());
        let (leading, leading_rx) = tokio::sync::watch::channel(true);
        let (_reachable, reachable_rx) = tokio::sync::watch::channel(true);
        let fence = WriteFence::new(
            LeaderState::from_channels(leading_rx, reachable_rx),
            metrics.clone(),
        );
        assert!(fence.permits(WriteKind::RolloutStatus));
        assert_eq!(
            metrics.writes_dropped_total.get(WriteKind::RolloutStatus),
            0
        );

        leading.send_replace(false);
        assert!(!fence.permits(WriteKind::RolloutStatus));
        assert!(!fence.permits(WriteKind::RegionObject));
        assert_eq!(
            metrics.writes_dropped_total.get(WriteKind::RolloutStatus),
            1
        );
        assert_eq!(metrics.writes_dropped_total.get(WriteKind::RegionObject), 1);

        // The elector gone: whatever it last said, nothing is written.
        leading.send_replace(true);
        drop(leading);
        assert!(!fence.permits(WriteKind::Event));
    }
}
