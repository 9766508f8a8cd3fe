//! What a revision publishes to a region, and the evidence, read from the region's
//! replica, of how far it got. Pure.
//!
//! # Why a revision carries the rollout's whole state
//!
//! A revision's own delta holds only the keys it changed. A region that missed a
//! superseded revision (stages restart at the first when a new revision is declared)
//! would then never receive that revision's keys. So each revision keeps the rollout's
//! cumulative state: every key the rollout ever wrote, each under the stamp of the
//! revision that last changed it. Publishing that state is idempotent, brings any lagging
//! region up to date, and re-stamps nothing: a regional override stays ahead of the keys
//! a later revision did not change.

use std::collections::BTreeMap;

use crate::api::RevisionStep;
use crate::crdt::{
    self, Delta, Entry, Replica, RevisionError, Stamp, compensating_delta, declare_revision,
};

/// One declared revision of a rollout, as stored in the hub.
#[derive(Debug, Clone, PartialEq)]
pub struct RevisionState {
    /// `r<N>`.
    pub name: String,
    /// The stamp the revision was declared with.
    pub stamp: Stamp,
    /// The rollout's cumulative state after this revision.
    pub state: Replica,
    /// For each key this revision changed, the entry it replaced (absent: the key was new).
    pub previous: Delta,
}

/// Keys a revision sets and removes, for status (counts, never values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeCounts {
    /// Keys set or changed.
    pub set: u32,
    /// Keys removed.
    pub removed: u32,
}

impl RevisionState {
    /// Declares `name` taking the rollout from `previous` (none for the first revision) to
    /// `desired`, stamped `stamp`.
    pub fn declare(
        name: &str,
        previous: Option<&RevisionState>,
        desired: &BTreeMap<String, String>,
        stamp: Stamp,
    ) -> Self {
        let mut state = previous.map(|p| p.state.clone()).unwrap_or_default();
        let delta = declare_revision(&owned_live(&state), desired, stamp.clone());
        let previous_entries = delta
            .iter()
            .filter_map(|(key, _)| state.get(key).map(|entry| (key, entry.clone())))
            .collect();
        state.apply(&delta);
        Self {
            name: name.to_owned(),
            stamp,
            state,
            previous: previous_entries,
        }
    }

    /// Drops the state's tombstones at or below the target's stable point `through`
    /// (every region has merged them), so the state stays bounded however many keys come
    /// and go; returns how many went.
    pub fn collect_tombstones(&mut self, through: &Stamp) -> usize {
        crdt::collect_tombstones(&mut self.state, through)
    }

    /// What `desired` would change relative to this revision.
    pub fn changes_to(&self, desired: &BTreeMap<String, String>) -> ChangeCounts {
        let live = self.state.live();
        let set = desired
            .iter()
            .filter(|(key, value)| live.get(key.as_str()) != Some(&value.as_str()))
            .count();
        let removed = live
            .keys()
            .filter(|key| !desired.contains_key(**key))
            .count();
        ChangeCounts {
            set: u32::try_from(set).unwrap_or(u32::MAX),
            removed: u32::try_from(removed).unwrap_or(u32::MAX),
        }
    }

    /// The entries this revision wrote itself.
    pub fn own_delta(&self) -> Delta {
        self.state
            .iter()
            .filter(|(_, entry)| entry.stamp == self.stamp)
            .map(|(key, entry)| (key, entry.clone()))
            .collect()
    }

    /// The keys this revision removes.
    pub fn removes_keys(&self) -> bool {
        self.own_delta()
            .iter()
            .any(|(_, entry)| entry.is_tombstone())
    }

    /// The desired key/values of this revision.
    pub fn desired(&self) -> BTreeMap<String, String> {
        owned_live(&self.state)
    }

    /// What to merge into a region for `step`: the whole state, except that the expand
    /// pass keeps, in place of this revision's removals, the entries they replace.
    pub fn publication(&self, step: RevisionStep) -> Delta {
        let mut delta: Delta = self
            .state
            .iter()
            .filter(|(_, entry)| {
                step != RevisionStep::Expand || !(entry.is_tombstone() && entry.stamp == self.stamp)
            })
            .map(|(key, entry)| (key, entry.clone()))
            .collect();
        if step == RevisionStep::Expand {
            let replaced: Delta = self
                .previous
                .iter()
                .filter(|(key, _)| self.state.get(key).is_some_and(Entry::is_tombstone))
                .map(|(key, entry)| (key, entry.clone()))
                .collect();
            delta.merge(&replaced);
        }
        delta
    }

    /// The delta that reverts this revision in `replica`: the previous values of the keys
    /// whose winning write is still this revision's own, under `fresh`.
    pub fn rollback(&self, replica: &Replica, fresh: Stamp) -> Result<Delta, RevisionError> {
        let previous_values = self
            .previous
            .iter()
            .filter_map(|(key, entry)| Some((key.to_owned(), entry.value()?.to_owned())))
            .collect();
        compensating_delta(replica, &self.own_delta(), &previous_values, fresh)
    }
}

/// How far a revision got in a region, read from the region's replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The furthest pass whose publication the replica holds in full.
    pub applied: Option<RevisionStep>,
    /// None of this revision's own writes wins in the replica (it never arrived, was
    /// rolled back, or was written over since): a rollback has nothing left to do here.
    pub rolled_back: bool,
}

/// Reads the evidence of `revision` in `replica`. `two_pass` says whether the revision
/// runs expand then contract.
/// An entry stamped after `stamp_bound_ms` (further ahead than the clock's drift bound)
/// never counts as holding the revision: it would win every write until its time comes,
/// so the revision has not really reached the region.
pub fn evidence(
    replica: &Replica,
    revision: &RevisionState,
    two_pass: bool,
    stamp_bound_ms: u64,
) -> Evidence {
    let holds = |delta: &Delta| {
        delta.iter().all(|(key, entry)| {
            let future_stamped = replica
                .get(key)
                .is_some_and(|held| held.stamp.wall_ms > stamp_bound_ms);
            !future_stamped && replica.holds(key, entry)
        })
    };
    let applied = if two_pass {
        if holds(&revision.publication(RevisionStep::Contract)) {
            Some(RevisionStep::Contract)
        } else if holds(&revision.publication(RevisionStep::Expand)) {
            Some(RevisionStep::Expand)
        } else {
            None
        }
    } else {
        holds(&revision.publication(RevisionStep::Single)).then_some(RevisionStep::Single)
    };
    // What a rollback reverts are the revision's own writes that still win here; once
    // none does (never arrived, reverted, or written over since), there is nothing left
    // to revert.
    let rolled_back = revision
        .own_delta()
        .iter()
        .all(|(key, written)| replica.get(key) != Some(written));
    Evidence {
        applied,
        rolled_back,
    }
}

fn owned_live(replica: &Replica) -> BTreeMap<String, String> {
    replica
        .live_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// Encodes a revision's state and previous entries for storage in the hub.
pub fn encode_revision(revision: &RevisionState) -> Result<(String, String), crdt::CodecError> {
    Ok((
        crdt::encode(&revision.state)?,
        crdt::encode_delta(&revision.previous)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdt::{WriterId, override_delta};

    fn stamp(wall_ms: u64, writer: &str) -> Stamp {
        Stamp::new(wall_ms, 0, WriterId::parse(writer).unwrap())
    }

    fn rollout(wall_ms: u64) -> Stamp {
        stamp(wall_ms, "rollout:team/limits")
    }

    fn desired(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn merged(deltas: &[&Delta]) -> Replica {
        let mut replica = Replica::new();
        for delta in deltas {
            replica.apply(delta);
        }
        replica
    }

    #[test]
    fn a_region_that_missed_a_superseded_revision_still_gets_its_keys() {
        let r1 = RevisionState::declare("r1", None, &desired(&[("a", "1")]), rollout(10));
        let r2 = RevisionState::declare(
            "r2",
            Some(&r1),
            &desired(&[("a", "1"), ("b", "2")]),
            rollout(20),
        );
        let r3 = RevisionState::declare(
            "r3",
            Some(&r2),
            &desired(&[("a", "1"), ("b", "2"), ("c", "3")]),
            rollout(30),
        );
        let lagging = merged(&[&r1.publication(RevisionStep::Single)]);
        let mut region = lagging.clone();
        region.apply(&r3.publication(RevisionStep::Single));
        let live: BTreeMap<_, _> = region.live().into_iter().collect();
        assert_eq!(live, BTreeMap::from([("a", "1"), ("b", "2"), ("c", "3")]));
        assert_eq!(r3.own_delta().len(), 1);
    }

    #[test]
    fn a_later_revision_does_not_restamp_keys_it_did_not_change() {
        let r1 = RevisionState::declare("r1", None, &desired(&[("a", "1")]), rollout(10));
        let override_stamp = stamp(15, "override:oncall");
        let overridden = crdt::override_delta(override_stamp, [("a", Some("9"))]).unwrap();
        let r2 = RevisionState::declare(
            "r2",
            Some(&r1),
            &desired(&[("a", "1"), ("b", "2")]),
            rollout(20),
        );
        let region = merged(&[
            &r1.publication(RevisionStep::Single),
            &overridden,
            &r2.publication(RevisionStep::Single),
        ]);
        assert_eq!(region.get("a").and_then(Entry::value), Some("9"));
        assert_eq!(region.get("b").and_then(Entry::value), Some("2"));
    }

    #[test]
    fn expand_keeps_removed_keys_and_contract_removes_them() {
        let r1 = RevisionState::declare("r1", None, &desired(&[("old", "1")]), rollout(10));
        let r2 = RevisionState::declare("r2", Some(&r1), &desired(&[("new", "1")]), rollout(20));
        assert!(r2.removes_keys());
        let mut region = merged(&[&r1.publication(RevisionStep::Single)]);
        region.apply(&r2.publication(RevisionStep::Expand));
        let live: BTreeMap<_, _> = region.live().into_iter().collect();
        assert_eq!(live, BTreeMap::from([("new", "1"), ("old", "1")]));
        assert_eq!(
            evidence(&region, &r2, true, u64::MAX).applied,
            Some(RevisionStep::Expand)
        );
        region.apply(&r2.publication(RevisionStep::Contract));
        let live: BTreeMap<_, _> = region.live().into_iter().collect();
        assert_eq!(live, BTreeMap::from([("new", "1")]));
        assert_eq!(
            evidence(&region, &r2, true, u64::MAX).applied,
            Some(RevisionStep::Contract)
        );
    }

    fn evidence_of(replica: &Replica, revision: &RevisionState) -> Evidence {
        evidence(replica, revision, false, u64::MAX)
    }

    #[test]
    fn evidence_says_nothing_applied_before_a_publish_and_nothing_to_revert() {
        let r1 = RevisionState::declare("r1", None, &desired(&[("a", "1")]), rollout(10));
        let evidence = evidence(&Replica::new(), &r1, false, u64::MAX);
        assert_eq!(evidence.applied, None);
        // A region the revision never reached is rolled back by definition: a rollback
        // over it must end, not wait for a compensation that has nothing to compensate.
        assert!(evidence.rolled_back);
        assert!(
            r1.rollback(&Replica::new(), rollout(20))
                .unwrap()
                .is_empty()
        );
        // Once published it is not, until reverted.
        let region = merged(&[&r1.publication(RevisionStep::Single)]);
        assert!(!evidence_of(&region, &r1).rolled_back);
    }

    #[test]
    fn rollback_restores_previous_values_and_is_seen_as_rolled_back() {
        let r1 = RevisionState::declare("r1", None, &desired(&[("a", "1")]), rollout(10));
        let r2 = RevisionState::declare(
            "r2",
            Some(&r1),
            &desired(&[("a", "2"), ("b", "new")]),
            rollout(20),
        );
        let mut region = merged(&[
            &r1.publication(RevisionStep::Single),
            &r2.publication(RevisionStep::Single),
        ]);
        let undo = r2.rollback(&region, rollout(30)).unwrap();
        region.apply(&undo);
        let live: BTreeMap<_, _> = region.live().into_iter().collect();
        assert_eq!(live, BTreeMap::from([("a", "1")]));
        assert!(evidence(&region, &r2, false, u64::MAX).rolled_back);
        // A second rollback finds nothing left to revert.
        assert!(r2.rollback(&region, rollout(40)).unwrap().is_empty());
    }

    #[test]
    fn an_entry_stamped_beyond_the_drift_bound_does_not_hold_the_revision() {
        let r1 = RevisionState::declare("r1", None, &desired(&[("a", "1")]), rollout(10));
        let far = Stamp::new(1_000_000, 0, WriterId::override_by("laptop").unwrap());
        let region = merged(&[&override_delta(far, [("a", Some("x"))]).unwrap()]);
        assert_eq!(
            evidence(&region, &r1, false, u64::MAX).applied,
            Some(RevisionStep::Single)
        );
        assert_eq!(evidence(&region, &r1, false, 999_999).applied, None);
    }

    #[test]
    fn rollback_leaves_keys_someone_else_wrote_since() {
        let r1 = RevisionState::declare("r1", None, &desired(&[("a", "1")]), rollout(10));
        let r2 = RevisionState::declare("r2", Some(&r1), &desired(&[("a", "2")]), rollout(20));
        let overridden =
            crdt::override_delta(stamp(25, "override:oncall"), [("a", Some("7"))]).unwrap();
        let region = merged(&[&r2.publication(RevisionStep::Single), &overridden]);
        assert!(r2.rollback(&region, rollout(30)).unwrap().is_empty());
    }

    #[test]
    fn change_counts_compare_against_the_revision() {
        let r1 =
            RevisionState::declare("r1", None, &desired(&[("a", "1"), ("b", "1")]), rollout(10));
        let counts = r1.changes_to(&desired(&[("a", "2"), ("c", "1")]));
        assert_eq!(counts, ChangeCounts { set: 2, removed: 1 });
    }
}
