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
mod tests;
