//! What a revision publishes to a region, what a rollback restores there, and the
//! evidence, read from the region's replica, of how far it got. Pure.
//!
//! # Why a revision carries the rollout's whole state
//!
//! A revision's own delta holds only the keys it changed. A region that missed a
//! superseded revision (stages restart at the first when a new revision is declared)
//! would then never receive that revision's keys. So each revision keeps the rollout's
//! cumulative state: every key the rollout ever wrote, each under the stamp of the
//! revision that last changed it. Publishing that state is idempotent, brings any lagging
//! region up to date, and re-stamps nothing that is settled: a regional override stays
//! ahead of the keys a later revision did not change.
//!
//! # The stable revision, and what is unsettled
//!
//! The rollout's *stable* revision is the last one that completed: every region ran it
//! and every gate passed on it. A key whose value in the rollout's latest state differs
//! from the stable revision's is *unsettled*: some revision since wrote it, and no gate
//! ever passed on that value everywhere (it was superseded, halted, or rolled back).
//!
//! - A new revision writes every unsettled key again under its own stamp, with the value
//!   it declares (removals included). So a value that was rolled back and is declared
//!   again reaches every region for real, first the canary, instead of losing to the
//!   compensation a region already holds; and removals a superseded revision left
//!   unfinished become the new revision's own, run with an expand pass first.
//! - A rollback restores the stable revision's value of every key the revision wrote,
//!   wherever the rollout's own write still wins: never a value that was itself rolled
//!   back or never verified.
//! - Evidence that a region runs a revision needs each entry the revision stamped
//!   itself, exactly, or a win by another writer (an override): a later write of the
//!   rollout's own (a compensation) is not evidence.

use std::collections::BTreeMap;

use configrollout_api::RevisionStep;
use configrollout_core::crdt::{self, Delta, Entry, Replica, RevisionError, Stamp};

/// One declared revision of a rollout, as stored in the hub.
#[derive(Debug, Clone, PartialEq)]
pub struct RevisionState {
    /// `r<N>`.
    pub name: String,
    /// The stamp the revision was declared with.
    pub stamp: Stamp,
    /// The rollout's cumulative state after this revision.
    pub state: Replica,
    /// For each key this revision wrote, the entry the rollout's stable revision held for
    /// it when this one was declared (absent: the key was not in it). A rollback restores
    /// these; the expand pass keeps them in place of the revision's removals.
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

/// What declaring `desired` after `base` writes, with `stable` the last revision that
/// completed: each key to set (`Some`) or remove (`None`).
///
/// A key is *settled* when the base's entry for it is at or below the stable revision's
/// stamp: it is the stable revision's own, which every region ran. Anything written since
/// is unsettled, whatever its value: a region may still hold another value of it from a
/// revision that was superseded, halted or rolled back. So a declared key is written
/// unless its settled entry already has the declared value; a key the declaration drops
/// is removed unless a settled tombstone already removed it; and a key the stable
/// revision holds live that the base lost entirely is removed again.
fn next_changes<'a>(
    base: &'a Replica,
    stable: Option<&'a RevisionState>,
    desired: &'a BTreeMap<String, String>,
) -> BTreeMap<&'a str, Option<&'a str>> {
    let settled = |entry: &Entry| stable.is_some_and(|stable| entry.stamp <= stable.stamp);
    let mut changes = BTreeMap::new();
    for (key, value) in desired {
        let kept = base
            .get(key)
            .is_some_and(|entry| entry.value() == Some(value.as_str()) && settled(entry));
        if !kept {
            changes.insert(key.as_str(), Some(value.as_str()));
        }
    }
    for (key, entry) in base.iter() {
        let removed_for_good = entry.is_tombstone() && settled(entry);
        if !desired.contains_key(key) && !removed_for_good {
            changes.insert(key, None);
        }
    }
    if let Some(stable) = stable {
        for (key, entry) in stable.state.iter() {
            if !entry.is_tombstone() && base.get(key).is_none() && !desired.contains_key(key) {
                changes.insert(key, None);
            }
        }
    }
    changes
}

impl RevisionState {
    /// Declares `name` taking the rollout from `base` (the latest stored revision; none
    /// for the first) to `desired`, stamped `stamp`, with `stable` the last revision that
    /// completed (none when none has).
    pub fn declare(
        name: &str,
        base: Option<&RevisionState>,
        stable: Option<&RevisionState>,
        desired: &BTreeMap<String, String>,
        stamp: Stamp,
    ) -> Self {
        let mut state = base.map(|base| base.state.clone()).unwrap_or_default();
        let delta: Delta = next_changes(&state, stable, desired)
            .into_iter()
            .map(|(key, value)| {
                let entry = match value {
                    Some(value) => Entry::live(value, stamp.clone()),
                    None => Entry::tombstone(stamp.clone()),
                };
                (key, entry)
            })
            .collect();
        let previous = delta
            .iter()
            .filter_map(|(key, _)| {
                let held = stable?.state.get(key)?;
                Some((key, held.clone()))
            })
            .collect();
        state.apply(&delta);
        Self {
            name: name.to_owned(),
            stamp,
            state,
            previous,
        }
    }

    /// What declaring `desired` after this revision would set and remove, with `stable`
    /// the last revision that completed: the counts [`RevisionState::declare`] would
    /// write.
    pub fn changes_to(
        &self,
        desired: &BTreeMap<String, String>,
        stable: Option<&RevisionState>,
    ) -> ChangeCounts {
        let changes = next_changes(&self.state, stable, desired);
        let set = changes.values().filter(|value| value.is_some()).count();
        let removed = changes.len().saturating_sub(set);
        ChangeCounts {
            set: u32::try_from(set).unwrap_or(u32::MAX),
            removed: u32::try_from(removed).unwrap_or(u32::MAX),
        }
    }

    /// Drops the state's tombstones at or below the target's stable point `through`
    /// (every region has merged them), so the state stays bounded however many keys come
    /// and go; returns how many went.
    pub fn collect_tombstones(&mut self, through: &Stamp) -> usize {
        crdt::collect_tombstones(&mut self.state, through)
    }

    /// [`Self::collect_tombstones`], keeping the tombstones of the keys `kept` names (see
    /// `status.collectionKeeps`).
    pub fn collect_tombstones_keeping(
        &mut self,
        through: &Stamp,
        kept: &dyn Fn(&str) -> bool,
    ) -> usize {
        crdt::collect_tombstones_keeping(&mut self.state, through, kept)
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

    /// Whether this revision's live key/values are exactly `desired`.
    pub fn declares(&self, desired: &BTreeMap<String, String>) -> bool {
        self.state.live_iter().count() == desired.len()
            && self
                .state
                .live_iter()
                .zip(desired)
                .all(|((key, value), (want_key, want_value))| {
                    key == want_key && value == want_value
                })
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
                .filter(|(key, _)| {
                    self.state
                        .get(key)
                        .is_some_and(|entry| entry.is_tombstone() && entry.stamp == self.stamp)
                })
                .map(|(key, entry)| (key, entry.clone()))
                .collect();
            delta.merge(&replaced);
        }
        delta
    }

    /// The keys this revision wrote whose winning entry in `replica` is still one of the
    /// rollout's own writes with a value other than the stable revision's: what a
    /// rollback must revert there, each with the stable value (`None`: remove the key).
    /// Keys another writer won since (an override) are left alone.
    fn to_revert<'a>(
        &'a self,
        replica: &'a Replica,
    ) -> impl Iterator<Item = (&'a str, &'a Entry, Option<&'a str>)> + 'a {
        let writer = &self.stamp.writer;
        self.state
            .iter()
            .filter(|(_, entry)| entry.stamp == self.stamp)
            .filter_map(move |(key, _)| {
                let held = replica.get(key)?;
                let stable = self.previous.get(key).and_then(Entry::value);
                (held.stamp.writer == *writer && held.value() != stable)
                    .then_some((key, held, stable))
            })
    }

    /// The delta that reverts this revision in `replica`: the stable revision's value of
    /// every key [`RevisionState::to_revert`] finds, under `fresh`. Refused when `fresh`
    /// is not after the writes it must win over.
    pub fn rollback(&self, replica: &Replica, fresh: Stamp) -> Result<Delta, RevisionError> {
        let mut compensation = Delta::new();
        for (key, held, stable) in self.to_revert(replica) {
            if fresh <= held.stamp || fresh <= self.stamp {
                return Err(RevisionError::StaleStamp {
                    fresh,
                    revision: held.stamp.clone().max(self.stamp.clone()),
                });
            }
            let restored = match stable {
                Some(value) => Entry::live(value, fresh.clone()),
                None => Entry::tombstone(fresh.clone()),
            };
            compensation.insert(key, restored);
        }
        Ok(compensation)
    }

    /// Whether nothing is left to revert in `replica`: the revision never reached it,
    /// was reverted there, or another writer won every key it wrote.
    pub fn is_reverted_in(&self, replica: &Replica) -> bool {
        self.to_revert(replica).next().is_none()
    }
}

/// How far a revision got in a region, read from the region's replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The furthest pass whose publication the replica holds in full.
    pub applied: Option<RevisionStep>,
    /// Nothing is left to revert (it never arrived, was rolled back, or was written over
    /// by others since): a rollback has nothing left to do here.
    pub rolled_back: bool,
}

/// How many keys `replica` holds live under `revision`'s writer, stamped at or below
/// `collected` (the writer's recorded collection point), that the revision's state no
/// longer has: keys the rollout removed and collected, back in a region restored from a
/// backup taken before the removal. Such a region does not hold the revision, whatever
/// the keys the revision does have say: publishing it again rebases the region (see
/// `regions::materialize`), which drops them.
pub fn restored_removed_keys(
    replica: &Replica,
    revision: &RevisionState,
    collected: Option<&Stamp>,
) -> usize {
    let Some(collected) = collected else {
        return 0;
    };
    let writer = &revision.stamp.writer;
    replica
        .iter()
        .filter(|(key, entry)| {
            !entry.is_tombstone()
                && entry.stamp.writer == *writer
                && entry.stamp <= *collected
                && revision.state.get(key).is_none()
        })
        .count()
}

/// Reads the evidence of `revision` in `replica`. `two_pass` says whether the revision
/// runs expand then contract.
///
/// An entry the revision stamped itself is held only when the replica holds exactly it,
/// or another writer's entry that wins over it (an override made since); the rollout's
/// own later entry (a compensation) is not the revision. An entry inherited from an
/// earlier revision is held when the replica's entry wins or ties. An entry stamped
/// after `stamp_bound_ms` (further ahead than the clock's drift bound) never counts as
/// holding the revision: it would win every write until its time comes, so the revision
/// has not really reached the region.
pub fn evidence(
    replica: &Replica,
    revision: &RevisionState,
    two_pass: bool,
    stamp_bound_ms: u64,
) -> Evidence {
    let writer = &revision.stamp.writer;
    let holds = |delta: &Delta| {
        // The region has merged this publication, not only come to hold entries that win
        // over it (an override made before it arrived): the writer's frontier there is
        // what says which of its writes the region has merged, and a horizon counts an
        // absent key as outlived only up to that frontier (see `crdt::Replica`). A region
        // that holds the keys but not the frontier is published to once more, which
        // changes no value and moves the frontier.
        let merged_through = delta
            .iter()
            .map(|(_, entry)| &entry.stamp)
            .filter(|stamp| stamp.writer == *writer)
            .max();
        if merged_through.is_some_and(|needed| {
            replica
                .frontier_of(writer)
                .is_none_or(|frontier| frontier < needed)
        }) {
            return false;
        }
        delta.iter().all(|(key, entry)| {
            let held = replica.get(key);
            if held.is_some_and(|held| held.stamp.wall_ms > stamp_bound_ms) {
                return false;
            }
            // An absent key below the horizon reads as merged and outlived; a horizon
            // beyond the bound would make every absent key read so.
            if held.is_none()
                && replica
                    .horizon()
                    .is_some_and(|horizon| horizon.wall_ms > stamp_bound_ms)
            {
                return false;
            }
            match held {
                Some(held) if entry.stamp == revision.stamp => {
                    held == entry
                        || (held.stamp.writer != entry.stamp.writer
                            && held.precedence(entry).is_ge())
                }
                _ => replica.holds(key, entry),
            }
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
    Evidence {
        applied,
        rolled_back: revision.is_reverted_in(replica),
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
    use configrollout_core::crdt::{WriterId, override_delta};

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

    fn live(replica: &Replica) -> BTreeMap<&str, &str> {
        replica.live().into_iter().collect()
    }

    /// Declares `name` after `base` with `stable` the last complete revision.
    fn next(
        name: &str,
        base: &RevisionState,
        stable: Option<&RevisionState>,
        pairs: &[(&str, &str)],
        at: u64,
    ) -> RevisionState {
        RevisionState::declare(name, Some(base), stable, &desired(pairs), rollout(at))
    }

    fn first(pairs: &[(&str, &str)]) -> RevisionState {
        RevisionState::declare("r1", None, None, &desired(pairs), rollout(10))
    }

    fn publish(region: &mut Replica, revision: &RevisionState) {
        region.apply(&revision.publication(RevisionStep::Single));
    }

    fn roll_back(region: &mut Replica, revision: &RevisionState, at: u64) {
        let undo = revision.rollback(region, rollout(at)).unwrap();
        region.apply(&undo);
    }

    #[test]
    fn a_region_that_missed_a_superseded_revision_still_gets_its_keys() {
        let r1 = first(&[("a", "1")]);
        let r2 = next("r2", &r1, Some(&r1), &[("a", "1"), ("b", "2")], 20);
        let r3 = next(
            "r3",
            &r2,
            Some(&r1),
            &[("a", "1"), ("b", "2"), ("c", "3")],
            30,
        );
        let mut region = merged(&[&r1.publication(RevisionStep::Single)]);
        publish(&mut region, &r3);
        assert_eq!(
            live(&region),
            desired_ref(&[("a", "1"), ("b", "2"), ("c", "3")])
        );
        // r2 never completed: its key is unsettled, so r3 writes it again as its own.
        let own_delta = r3.own_delta();
        let own: Vec<&str> = own_delta.iter().map(|(key, _)| key).collect();
        assert_eq!(own, ["b", "c"]);
    }

    fn desired_ref<'a>(pairs: &[(&'a str, &'a str)]) -> BTreeMap<&'a str, &'a str> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn a_revision_declares_exactly_its_live_content() {
        let r1 = first(&[("a", "1"), ("b", "2")]);
        let want = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert!(r1.declares(&want(&[("a", "1"), ("b", "2")])));
        assert!(!r1.declares(&want(&[("a", "1")])));
        assert!(!r1.declares(&want(&[("a", "1"), ("b", "3")])));
        assert!(!r1.declares(&want(&[("a", "1"), ("c", "2")])));
        assert!(!r1.declares(&want(&[("a", "1"), ("b", "2"), ("c", "3")])));
        // A removed key is a tombstone, not content.
        let r2 = next("r2", &r1, Some(&r1), &[("a", "1")], 20);
        assert!(r2.declares(&want(&[("a", "1")])));
        assert!(!r2.declares(&want(&[("a", "1"), ("b", "2")])));
    }

    #[test]
    fn a_later_revision_does_not_restamp_keys_that_are_settled() {
        let r1 = first(&[("a", "1")]);
        let override_stamp = stamp(15, "override:oncall");
        let overridden = override_delta(override_stamp, [("a", Some("9"))]).unwrap();
        let r2 = next("r2", &r1, Some(&r1), &[("a", "1"), ("b", "2")], 20);
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
        let r1 = first(&[("old", "1")]);
        let r2 = next("r2", &r1, Some(&r1), &[("new", "1")], 20);
        assert!(r2.removes_keys());
        let mut region = merged(&[&r1.publication(RevisionStep::Single)]);
        region.apply(&r2.publication(RevisionStep::Expand));
        assert_eq!(live(&region), desired_ref(&[("new", "1"), ("old", "1")]));
        assert_eq!(
            evidence(&region, &r2, true, u64::MAX).applied,
            Some(RevisionStep::Expand)
        );
        region.apply(&r2.publication(RevisionStep::Contract));
        assert_eq!(live(&region), desired_ref(&[("new", "1")]));
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
        let r1 = first(&[("a", "1")]);
        let evidence = evidence_of(&Replica::new(), &r1);
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
    fn rollback_restores_the_stable_values_and_is_seen_as_rolled_back() {
        let r1 = first(&[("a", "1")]);
        let r2 = next("r2", &r1, Some(&r1), &[("a", "2"), ("b", "new")], 20);
        let mut region = merged(&[&r1.publication(RevisionStep::Single)]);
        publish(&mut region, &r2);
        roll_back(&mut region, &r2, 30);
        assert_eq!(live(&region), desired_ref(&[("a", "1")]));
        let seen = evidence_of(&region, &r2);
        assert!(seen.rolled_back);
        // The compensation is the rollout's own later write: not evidence of r2.
        assert_eq!(seen.applied, None);
        // A second rollback finds nothing left to revert.
        assert!(r2.rollback(&region, rollout(40)).unwrap().is_empty());
    }

    /// The first trace of the issue: r1 `100` Complete; r2 `abc` rolled back at the
    /// canary; r3 `200` passes the canary, fails in prod, and is rolled back. The rollback
    /// restores `100` everywhere, never r2's rejected `abc`.
    #[test]
    fn a_rollback_after_a_rollback_restores_the_stable_value_not_the_rejected_one() {
        let r1 = first(&[("timeout_ms", "100")]);
        let mut canary = Replica::new();
        let mut prod = Replica::new();
        publish(&mut canary, &r1);
        publish(&mut prod, &r1);

        let r2 = next("r2", &r1, Some(&r1), &[("timeout_ms", "abc")], 20);
        publish(&mut canary, &r2);
        roll_back(&mut canary, &r2, 25);
        assert_eq!(live(&canary), desired_ref(&[("timeout_ms", "100")]));

        let r3 = next("r3", &r2, Some(&r1), &[("timeout_ms", "200")], 30);
        publish(&mut canary, &r3);
        assert_eq!(
            evidence_of(&canary, &r3).applied,
            Some(RevisionStep::Single)
        );
        publish(&mut prod, &r3);
        roll_back(&mut prod, &r3, 35);
        roll_back(&mut canary, &r3, 36);
        assert_eq!(live(&canary), desired_ref(&[("timeout_ms", "100")]));
        assert_eq!(live(&prod), desired_ref(&[("timeout_ms", "100")]));
    }

    /// The second trace: r2 `abc` rolled back at the canary; r3 declares `abc` again with
    /// a new key. The canary must get `abc` (so that its gate judges it), not keep the
    /// compensation's `100` while counting as holding r3.
    #[test]
    fn a_rejected_value_declared_again_reaches_the_canary_for_real() {
        let r1 = first(&[("timeout_ms", "100")]);
        let mut canary = merged(&[&r1.publication(RevisionStep::Single)]);
        let r2 = next("r2", &r1, Some(&r1), &[("timeout_ms", "abc")], 20);
        publish(&mut canary, &r2);
        roll_back(&mut canary, &r2, 25);

        let r3 = next(
            "r3",
            &r2,
            Some(&r1),
            &[("timeout_ms", "abc"), ("new", "1")],
            30,
        );
        assert_eq!(evidence_of(&canary, &r3).applied, None);
        publish(&mut canary, &r3);
        assert_eq!(
            live(&canary),
            desired_ref(&[("new", "1"), ("timeout_ms", "abc")])
        );
        assert_eq!(
            evidence_of(&canary, &r3).applied,
            Some(RevisionStep::Single)
        );
        // And its rollback restores r1's value, the last one that completed.
        roll_back(&mut canary, &r3, 35);
        assert_eq!(live(&canary), desired_ref(&[("timeout_ms", "100")]));
    }

    /// A revision declared while another's removal is unfinished (its contract pass waits
    /// for approval) removes the key again as its own: an expand pass first, then the
    /// contract, counted in its changes.
    #[test]
    fn unfinished_removals_carry_over_to_the_next_revision() {
        let r1 = first(&[("old_key", "1"), ("other", "1")]);
        let r2 = next(
            "r2",
            &r1,
            Some(&r1),
            &[("new_key", "1"), ("other", "1")],
            20,
        );
        assert!(r2.removes_keys());
        let mut region = merged(&[&r1.publication(RevisionStep::Single)]);
        region.apply(&r2.publication(RevisionStep::Expand));

        let wanted = desired(&[("new_key", "1"), ("other", "2")]);
        let counts = r2.changes_to(&wanted, Some(&r1));
        assert_eq!(counts, ChangeCounts { set: 2, removed: 1 });
        let r3 = RevisionState::declare("r3", Some(&r2), Some(&r1), &wanted, rollout(30));
        assert!(r3.removes_keys(), "r3 removes old_key as its own");
        region.apply(&r3.publication(RevisionStep::Expand));
        assert_eq!(
            live(&region),
            desired_ref(&[("new_key", "1"), ("old_key", "1"), ("other", "2")])
        );
        region.apply(&r3.publication(RevisionStep::Contract));
        assert_eq!(
            live(&region),
            desired_ref(&[("new_key", "1"), ("other", "2")])
        );
    }

    #[test]
    fn an_entry_stamped_beyond_the_drift_bound_does_not_hold_the_revision() {
        let r1 = first(&[("a", "1")]);
        let far = Stamp::new(1_000_000, 0, WriterId::override_by("laptop").unwrap());
        let overridden = override_delta(far, [("a", Some("x"))]).unwrap();
        // Overridden before the revision got there: the region does not hold it until it
        // has merged it (a publication that changes no value).
        let region = merged(&[&overridden]);
        assert_eq!(evidence(&region, &r1, false, u64::MAX).applied, None);
        let region = merged(&[&overridden, &r1.publication(RevisionStep::Single)]);
        assert_eq!(live(&region), desired_ref(&[("a", "x")]));
        assert_eq!(
            evidence(&region, &r1, false, u64::MAX).applied,
            Some(RevisionStep::Single)
        );
        assert_eq!(evidence(&region, &r1, false, 999_999).applied, None);
    }

    #[test]
    fn a_horizon_beyond_the_drift_bound_holds_no_absent_key() {
        let r1 = first(&[("a", "1")]);
        let mut region = Replica::new();
        let far = Stamp::new(
            1_000_000,
            0,
            WriterId::parse("rollout:team/limits").unwrap(),
        );
        crdt::collect_tombstones(&mut region, &far);
        // A horizon alone says nothing of a writer the region never merged.
        assert_eq!(evidence(&region, &r1, false, u64::MAX).applied, None);
        // With the writer merged through it too, the absent key reads as merged and
        // outlived...
        region.apply(&[("b", Entry::tombstone(far.clone()))].into_iter().collect());
        crdt::collect_tombstones(&mut region, &far);
        assert_eq!(
            evidence(&region, &r1, false, u64::MAX).applied,
            Some(RevisionStep::Single)
        );
        // ...which a horizon ahead of the clock cannot be trusted to say.
        assert_eq!(evidence(&region, &r1, false, 999_999).applied, None);
    }

    #[test]
    fn rollback_leaves_keys_someone_else_wrote_since() {
        let r1 = first(&[("a", "1")]);
        let r2 = next("r2", &r1, Some(&r1), &[("a", "2")], 20);
        let overridden = override_delta(stamp(25, "override:oncall"), [("a", Some("7"))]).unwrap();
        let region = merged(&[&r2.publication(RevisionStep::Single), &overridden]);
        assert!(r2.rollback(&region, rollout(30)).unwrap().is_empty());
        assert!(evidence_of(&region, &r2).rolled_back);
    }

    #[test]
    fn a_compensation_must_be_stamped_after_what_it_reverts() {
        let r1 = first(&[("a", "1")]);
        let r2 = next("r2", &r1, Some(&r1), &[("a", "2")], 20);
        let region = merged(&[&r2.publication(RevisionStep::Single)]);
        assert!(r2.rollback(&region, rollout(20)).is_err());
    }

    #[test]
    fn change_counts_compare_against_the_revision_and_the_stable_one() {
        let r1 = first(&[("a", "1"), ("b", "1")]);
        let counts = r1.changes_to(&desired(&[("a", "2"), ("c", "1")]), Some(&r1));
        assert_eq!(counts, ChangeCounts { set: 2, removed: 1 });
        // Nothing complete yet: every declared key is unsettled.
        let counts = r1.changes_to(&desired(&[("a", "1"), ("b", "1")]), None);
        assert_eq!(counts, ChangeCounts { set: 2, removed: 0 });
    }
}
