//! Tombstone collection at the causally stable point, never by age.
//!
//! A tombstone is what stops an older value of its key from coming back when a replica
//! that still holds that value is merged. Dropping it after a wall-clock TTL resurrects
//! the key as soon as a replica that was partitioned longer than the TTL returns.
//!
//! # When a tombstone may go
//!
//! The caller passes one frontier per region: a stamp such that the region has merged
//! every write, of every writer of the target, stamped at or below it (a causal cut). [`stable_point`] is their minimum,
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
//! # Where the stable point comes from: every writer of the target
//!
//! A region's own frontier for one rollout is not such a cut when another writer writes
//! the same target (a second rollout sharing the ConfigMap): rollout B removes `k` at `t`
//! and reaches every region, while rollout A's older `k=v`, stamped before `t`, is still
//! on its way to region-1. Collecting at B's point drops the tombstone everywhere, then
//! A's write reaches region-1 and `k` is back there, and nowhere else, for good.
//!
//! So the controller collects at [`collection_point`]: the stamp of the collecting
//! rollout's latest revision, which every region it targets holds in full, lowered to
//! what every *other* rollout writing the same target has delivered everywhere
//! ([`WriterProgress`]). A revision's publication is the rollout's cumulative state, so a
//! region holding revision `r` holds (or has outlived) every write of that rollout stamped
//! at or below `r`'s stamp. Writes not yet declared are stamped later by the controller's
//! clock, after every stamp it has issued or observed, so they are above the point.
//! Overrides and adopted edits are written straight into their region's replica (never on
//! the way), stamped above what the replica holds, its horizon included (see
//! [`stamp_above`]).
//!
//! # What the horizon does
//!
//! [`collect_tombstones`] also raises the replica's horizon
//! ([`Replica::horizon`](super::Replica::horizon)). A delayed or repeated delivery of a
//! write at or below it, for a key the replica no longer holds, is one the replica merged
//! and outlived, and is ignored. A replica restored from a backup has an older horizon:
//! the controller rebases it against the rollout's state before merging (see
//! `regions::materialize`).

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

/// Drops every tombstone stamped at or below `stable`, raises the replica's horizon to it,
/// and returns how many were dropped. Live entries and the replica's frontiers are kept.
pub fn collect_tombstones(replica: &mut Replica, stable: &Stamp) -> usize {
    replica.collect_through(stable)
}

/// [`collect_tombstones`], keeping the tombstones of the keys `pending` names: a region's
/// target that still holds a removed key needs its tombstone until the target is written
/// without it, or a write of the companion that lands without its target's (a conflict,
/// a crash) would leave the key in the target with nothing left to say it goes.
pub fn collect_tombstones_keeping(
    replica: &mut Replica,
    stable: &Stamp,
    pending: impl Fn(&str) -> bool,
) -> usize {
    replica.collect_through_keeping(stable, pending)
}

/// How far another writer of the same target has got, as the collecting rollout reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriterProgress {
    /// Every region it targets holds its latest revision: whatever it writes next is
    /// stamped after every stamp issued so far.
    CaughtUp,
    /// Some of its writes are still on the way. Every region it targets holds all of its
    /// writes stamped at or below `held`; `None` when that is not known for some region.
    Behind {
        /// The newest stamp every region it targets has merged all of its writes up to.
        held: Option<Stamp>,
    },
}

/// The point the tombstones of a target may be collected through, for the rollout whose
/// latest revision `own_latest` every region it targets holds in full: that stamp,
/// lowered to what every other writer of the target has delivered. `None` while some
/// writer's progress is unknown.
pub fn collection_point(own_latest: &Stamp, others: &[WriterProgress]) -> Option<Stamp> {
    let mut point = own_latest;
    for other in others {
        match other {
            WriterProgress::CaughtUp => {}
            WriterProgress::Behind { held: None } => return None,
            WriterProgress::Behind { held: Some(held) } => point = point.min(held),
        }
    }
    Some(point.clone())
}

/// A stamp for `writer` no earlier than `wall_ms` and after everything `replica` holds
/// (every frontier and its horizon). A write straight into a replica (an override, from a
/// person's clock) must not land at or below the horizon, where it would be taken for a
/// write the replica had already outlived.
pub fn stamp_above(replica: &Replica, wall_ms: u64, writer: super::WriterId) -> Stamp {
    let floor = replica
        .frontier()
        .into_iter()
        .chain(replica.horizon())
        .max();
    match floor {
        // The next reading after the floor, carrying into the wall time as the clock
        // does when the counter is full (a decoded companion may hold any counter).
        Some(floor) if floor.wall_ms >= wall_ms => match floor.logical.checked_add(1) {
            Some(logical) => Stamp::new(floor.wall_ms, logical, writer),
            None => Stamp::new(floor.wall_ms.saturating_add(1), 0, writer),
        },
        _ => Stamp::new(wall_ms, 0, writer),
    }
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

    fn writer_stamp(wall_ms: u64, writer: &str) -> Stamp {
        Stamp::new(wall_ms, 0, WriterId::parse(writer).unwrap())
    }

    /// The case: two rollouts on one target. B removes `k` at 20 and reaches both
    /// regions; A's `k=v`, stamped 10, has not reached region-1 yet.
    #[test]
    fn another_writers_late_write_keeps_the_tombstone_until_it_has_landed() {
        let a_set: Delta = [(
            "k",
            crate::crdt::Entry::live("v", writer_stamp(10, "rollout:team/a")),
        )]
        .into_iter()
        .collect();
        let b_remove: Delta = [(
            "k",
            crate::crdt::Entry::tombstone(writer_stamp(20, "rollout:team/b")),
        )]
        .into_iter()
        .collect();
        let mut region_0 = Replica::new();
        region_0.apply(&a_set);
        region_0.apply(&b_remove);
        let mut region_1 = Replica::new();
        region_1.apply(&b_remove);

        // Region-1 holds nothing of A: its progress is unknown, nothing is collected.
        let a = WriterProgress::Behind { held: None };
        let b_latest = writer_stamp(20, "rollout:team/b");
        assert_eq!(collection_point(&b_latest, std::slice::from_ref(&a)), None);

        // Had B collected at its own point, region-1 would drop B's tombstone before A's
        // write lands; A's write is one region-1 never merged, so it is taken, and `k` is
        // back in region-1 and nowhere else, for good.
        let mut naive = region_1.clone();
        collect_tombstones(&mut naive, &b_latest);
        naive.apply(&a_set);
        assert_eq!(
            naive.live().get("k"),
            Some(&"v"),
            "the resurrection this prevents"
        );

        // Once A has landed everywhere (held through 10), the point is 10: B's tombstone
        // at 20 stays until A passes it.
        let a = WriterProgress::Behind {
            held: Some(writer_stamp(10, "rollout:team/a")),
        };
        let point = collection_point(&b_latest, &[a]).unwrap();
        region_1.apply(&a_set);
        for region in [&mut region_0, &mut region_1] {
            assert_eq!(collect_tombstones(region, &point), 0);
            region.apply(&a_set);
            assert!(region.live().is_empty());
        }
        // A caught up: B's point stands, the tombstone goes, and A's write delivered again
        // is taken for what it is, a write the region has outlived.
        let point = collection_point(&b_latest, &[WriterProgress::CaughtUp]).unwrap();
        for region in [&mut region_0, &mut region_1] {
            assert_eq!(collect_tombstones(region, &point), 1);
            assert_eq!(region.horizon(), Some(&b_latest));
            region.apply(&a_set);
            assert!(region.live().is_empty());
            assert!(region.holds("k", a_set.get("k").unwrap()));
        }
    }

    /// Issue 43, trace 1: A's revision removes its key k4 and A collects through that
    /// removal (T = 1_000) everywhere. B, reconciled by a process whose clock is 26 ms
    /// behind, declares k1 at T - 26. Every region must take it: it is a write none of them
    /// has merged, whatever the horizon says.
    #[test]
    fn a_write_stamped_below_the_horizon_by_a_clock_behind_still_lands() {
        let a = |wall| writer_stamp(wall, "rollout:team/a");
        let b = |wall| writer_stamp(wall, "rollout:team/b");
        let b_first: Delta = [("k2", crate::crdt::Entry::live("2", b(100)))]
            .into_iter()
            .collect();
        let a_first: Delta = [("k4", crate::crdt::Entry::live("4", a(200)))]
            .into_iter()
            .collect();
        let a_removal: Delta = [("k4", crate::crdt::Entry::tombstone(a(1_000)))]
            .into_iter()
            .collect();
        let mut b_second = b_first.clone();
        b_second.set("k1", "1", b(974));

        let mut regions: Vec<Replica> = (0..3).map(|_| Replica::new()).collect();
        for region in &mut regions {
            region.apply(&b_first);
            region.apply(&a_first);
            region.apply(&a_removal);
            assert_eq!(collect_tombstones(region, &a(1_000)), 1);
            assert!(
                !region.holds("k1", b_second.get("k1").unwrap()),
                "before it lands, no region reads as holding B's new key"
            );
            region.apply(&b_second);
            assert_eq!(
                region.live(),
                [("k1", "1"), ("k2", "2")].into_iter().collect(),
                "B's key lands though stamped below the horizon"
            );
            // Delivered again, it is still held, and A's removed key stays removed.
            region.apply(&b_second);
            region.apply(&a_first);
            assert_eq!(region.live().len(), 2);
            assert!(region.holds("k4", a_first.get("k4").unwrap()));
        }
    }

    /// Issue 43, trace 2: region-1's namespace is restored from a backup taken before B
    /// published k4 there; A then collects through a point above B's k4 stamp. B's next
    /// publication must bring k4 back, and until it has, the region must not read as
    /// holding it.
    #[test]
    fn a_restored_replica_takes_back_the_writes_it_lost_above_a_raised_horizon() {
        let a = |wall| writer_stamp(wall, "rollout:team/a");
        let b = |wall| writer_stamp(wall, "rollout:team/b");
        let a_state: Delta = [("k1", crate::crdt::Entry::live("1", a(10)))]
            .into_iter()
            .collect();
        let b_state: Delta = [("k4", crate::crdt::Entry::live("4", b(20)))]
            .into_iter()
            .collect();
        let mut region = Replica::new();
        region.apply(&a_state);
        let backup = region.clone();
        region.apply(&b_state);
        assert_eq!(region.live().len(), 2);

        let mut restored = backup;
        let mut a_later = a_state.clone();
        a_later.remove("k0", a(30));
        restored.apply(&a_later);
        collect_tombstones(&mut restored, &a(30));
        assert_eq!(restored.horizon(), Some(&a(30)));
        let k4 = b_state.get("k4").unwrap();
        assert!(
            !restored.holds("k4", k4),
            "a key the restore lost is not read as merged and outlived"
        );
        restored.apply(&b_state);
        assert_eq!(
            restored.live(),
            [("k1", "1"), ("k4", "4")].into_iter().collect()
        );
    }

    #[test]
    fn a_person_s_write_is_stamped_above_everything_the_replica_holds() {
        let alice = WriterId::override_by("alice").unwrap();
        let mut replica = Replica::new();
        assert_eq!(
            stamp_above(&replica, 7, alice.clone()),
            Stamp::new(7, 0, alice.clone())
        );
        replica.apply(
            &[("k", crate::crdt::Entry::live("v", stamp(50)))]
                .into_iter()
                .collect(),
        );
        // A clock behind the replica still wins.
        assert!(stamp_above(&replica, 7, alice.clone()) > stamp(50));
        collect_tombstones(&mut replica, &stamp(90));
        let behind = stamp_above(&replica, 7, alice.clone());
        assert!(behind > stamp(90), "{behind}");
        assert_eq!(
            stamp_above(&replica, 1_000, alice.clone()),
            Stamp::new(1_000, 0, alice)
        );
    }
}
