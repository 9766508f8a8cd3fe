//! Tombstone collection at the causally stable point, never by age.
//!
//! A tombstone is what stops an older value of its key from coming back when a replica
//! that still holds that value is merged. Dropping it after a wall-clock TTL resurrects
//! the key as soon as a replica that was partitioned longer than the TTL returns.
//!
//! # When a tombstone may go
//!
//! The caller passes one frontier per region: a stamp such that the region has merged
//! every write stamped at or below it (a causal cut). [`stable_point`] is their minimum,
//! and [`collect_tombstones`] drops tombstones stamped at or below it.
//!
//! Why a later merge cannot resurrect a collected key `k` whose tombstone has stamp `t`:
//! every region's frontier was `>= t`, so every region had merged the tombstone, and from
//! then on each holds for `k` either that tombstone, something newer, or nothing (it
//! collected it too). No region holds an entry for `k` older than `t` any more, so no
//! merge can bring one back. A region that had *not* merged the tombstone would have had a
//! frontier below `t`, the minimum would have been below `t`, and the tombstone would have
//! stayed. Likewise a region whose frontier is unknown makes the stable point unknown.
//!
//! # Where the frontiers come from
//!
//! [`Replica::frontier_of`](super::Replica::frontier_of) for the rollout's writer is such
//! a cut when the rollout's deltas reach the region in stamp order without gaps, which is
//! how the engine publishes: a region that missed a superseded revision is sent the
//! combined delta ([`Delta::merge`](super::Delta::merge)) of every revision it has not
//! merged, never a later revision alone. Full-state merges between replicas keep the
//! property (the union of two prefixes is a prefix). Overrides are local to one region
//! and are not sent elsewhere, so they do not enter the other regions' frontiers.
//!
//! Every replica that may ever be merged again must be among the frontiers: a restored
//! backup of a companion ConfigMap is a replica with an old frontier.

use super::{Replica, Stamp};

/// The causally stable point of a set of regions: the minimum of their frontiers. `None`
/// when there is no region or any region's frontier is unknown (nothing is stable then).
pub fn stable_point(frontiers: &[Option<Stamp>]) -> Option<Stamp> {
    let mut minimum: Option<&Stamp> = None;
    for frontier in frontiers {
        let frontier = frontier.as_ref()?;
        if minimum.is_none_or(|current| frontier < current) {
            minimum = Some(frontier);
        }
    }
    minimum.cloned()
}

/// Drops every tombstone stamped at or below `stable` and returns how many were dropped.
/// Live entries and the replica's frontiers are kept.
pub fn collect_tombstones(replica: &mut Replica, stable: &Stamp) -> usize {
    replica.retain_entries(|entry| !(entry.is_tombstone() && entry.stamp <= *stable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdt::{Delta, WriterId};

    fn stamp(wall_ms: u64) -> Stamp {
        Stamp::new(wall_ms, 0, WriterId::rollout("ns", "app").unwrap())
    }

    #[test]
    fn stable_point_is_the_minimum_and_unknown_if_any_region_is() {
        assert_eq!(stable_point(&[]), None);
        assert_eq!(
            stable_point(&[Some(stamp(5)), Some(stamp(3)), Some(stamp(9))]),
            Some(stamp(3))
        );
        assert_eq!(stable_point(&[Some(stamp(5)), None]), None);
    }

    #[test]
    fn collects_only_tombstones_at_or_below_the_stable_point() {
        let mut delta = Delta::new();
        delta.remove("old", stamp(3));
        delta.remove("edge", stamp(5));
        delta.remove("new", stamp(7));
        delta.set("live", "v", stamp(1));
        let mut replica = Replica::new();
        replica.apply(&delta);
        let frontier = replica.frontier().cloned();
        assert_eq!(collect_tombstones(&mut replica, &stamp(5)), 2);
        let keys: Vec<&str> = replica.iter().map(|(key, _)| key).collect();
        assert_eq!(keys, ["live", "new"]);
        assert_eq!(replica.frontier().cloned(), frontier);
    }

    #[test]
    fn a_lagging_region_keeps_the_tombstone() {
        let mut set = Delta::new();
        set.set("k", "v", stamp(1));
        let mut remove = Delta::new();
        remove.remove("k", stamp(2));
        let writer = WriterId::rollout("ns", "app").unwrap();

        let mut ahead = Replica::new();
        ahead.apply(&set);
        ahead.apply(&remove);
        let mut lagging = Replica::new();
        lagging.apply(&set);

        let frontiers = [
            ahead.frontier_of(&writer).cloned(),
            lagging.frontier_of(&writer).cloned(),
        ];
        let stable = stable_point(&frontiers).unwrap();
        assert_eq!(collect_tombstones(&mut ahead, &stable), 0);
        ahead.merge(&lagging);
        assert!(ahead.live().is_empty());
    }
}
