//! The last-writer-wins map: a region's replica and the deltas merged into it.
//!
//! # Merge is a join
//!
//! Each key keeps the greatest entry under the total order `(stamp, value)` with a
//! tombstone below any value. Taking a maximum under a total order is commutative,
//! associative and idempotent, so replicas converge whatever order, grouping and repetition
//! deltas arrive in.
//!
//! A correct system never produces two entries with the same stamp and different values (a
//! stamp is one clock event of one writer). Corrupted or hand-made input can; ordering by the
//! value after the stamp keeps merge a join even then, instead of "first one wins", which
//! would let replicas disagree forever. Such meetings are counted in
//! [`MergeOutcome::conflicts`] and refused by the decoder.
//!
//! # Frontiers
//!
//! A replica remembers, per writer, the greatest stamp it has merged (winning or not, and
//! also for tombstones later collected): its frontier. See [`super::compaction`] for how
//! frontiers make tombstone collection safe.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Stamp, WriterId};

/// The state of one key: a value or a tombstone, and the stamp of the write that set it.
///
/// Keys and values are shared text (`Arc<str>`): merging clones entries between replicas,
/// and a shared clone is a counter increment rather than a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The value, or `None` for a tombstone (the key was removed).
    pub value: Option<Arc<str>>,
    /// The write that set it.
    pub stamp: Stamp,
}

impl Entry {
    /// A key set to `value` by the write `stamp`.
    pub fn live(value: impl Into<Arc<str>>, stamp: Stamp) -> Self {
        Self {
            value: Some(value.into()),
            stamp,
        }
    }

    /// A key removed by the write `stamp`.
    pub fn tombstone(stamp: Stamp) -> Self {
        Self { value: None, stamp }
    }

    /// Whether this entry records a removal.
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }

    /// The value, unless this is a tombstone.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The merge order: by stamp, then by value (tombstone first) so that even corrupted
    /// input with equal stamps merges deterministically.
    pub fn precedence(&self, other: &Self) -> Ordering {
        self.stamp
            .cmp(&other.stamp)
            .then_with(|| self.value.cmp(&other.value))
    }
}

/// What merging did, counted over the incoming entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeOutcome {
    /// Incoming entries that replaced the local one or added a key.
    pub won: usize,
    /// Incoming entries older than the local one (discarded).
    pub lost: usize,
    /// Incoming entries identical to the local one (already merged).
    pub unchanged: usize,
    /// Incoming entries with the local entry's stamp but a different value: corrupted
    /// input, resolved by value order (also counted as won or lost).
    pub conflicts: usize,
}

impl MergeOutcome {
    /// Whether the merge changed no entry.
    pub fn is_noop(&self) -> bool {
        self.won == 0
    }

    fn record(&mut self, local: &Entry, incoming: &Entry) -> bool {
        let order = incoming.precedence(local);
        if order != Ordering::Equal && incoming.stamp == local.stamp {
            self.conflicts = self.conflicts.saturating_add(1);
        }
        match order {
            Ordering::Greater => {
                self.won = self.won.saturating_add(1);
                true
            }
            Ordering::Less => {
                self.lost = self.lost.saturating_add(1);
                false
            }
            Ordering::Equal => {
                self.unchanged = self.unchanged.saturating_add(1);
                false
            }
        }
    }
}

/// A set of entries to merge into replicas: a revision, an override, a compensation. Only
/// the keys it changes; a removed key is a tombstone.
///
/// The entries are one vector sorted by key, so that reading, merging and dropping a
/// delta walk contiguous memory (a delta is built once and read once, usually cold).
/// Inserting in key order, as a delta built from a map is, appends; an insert out of
/// order shifts the entries after it, so large deltas come from [`FromIterator`] or
/// [`Delta::merge`], which sort once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// Sorted by key, keys unique.
    entries: Vec<(Arc<str>, Entry)>,
}

impl Delta {
    /// An empty delta.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry; if the key is already present the greater entry is kept, so deltas
    /// can be combined (e.g. every revision a lagging region missed) without losing writes.
    pub fn insert(&mut self, key: impl Into<Arc<str>>, entry: Entry) {
        let key = key.into();
        let at = match self.entries.last() {
            Some((last, _)) if **last < *key => self.entries.len(),
            None => 0,
            Some(_) => match self.position(&key) {
                Ok(at) => {
                    if let Some((_, kept)) = self.entries.get_mut(at)
                        && entry.precedence(kept) == Ordering::Greater
                    {
                        *kept = entry;
                    }
                    return;
                }
                Err(at) => at,
            },
        };
        self.entries.insert(at, (key, entry));
    }

    /// Sets `key` to `value` under `stamp`.
    pub fn set(&mut self, key: impl Into<Arc<str>>, value: impl Into<Arc<str>>, stamp: Stamp) {
        self.insert(key, Entry::live(value, stamp));
    }

    /// Removes `key` under `stamp` (a tombstone).
    pub fn remove(&mut self, key: impl Into<Arc<str>>, stamp: Stamp) {
        self.insert(key, Entry::tombstone(stamp));
    }

    /// Joins another delta into this one, in one pass over both.
    pub fn merge(&mut self, other: &Delta) {
        let mine = std::mem::take(&mut self.entries);
        let mut merged = Vec::with_capacity(mine.len().saturating_add(other.len()));
        let mut theirs = other.entries.iter().peekable();
        for (key, entry) in mine {
            while let Some((their_key, their_entry)) = theirs.next_if(|(their, _)| *their < key) {
                merged.push((Arc::clone(their_key), their_entry.clone()));
            }
            match theirs.next_if(|(their, _)| *their == key) {
                Some((_, their_entry)) if their_entry.precedence(&entry) == Ordering::Greater => {
                    merged.push((key, their_entry.clone()));
                }
                _ => merged.push((key, entry)),
            }
        }
        merged.extend(theirs.map(|(key, entry)| (Arc::clone(key), entry.clone())));
        self.entries = merged;
    }

    /// The entry for `key`.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        let at = self.position(key).ok()?;
        self.entries.get(at).map(|(_, entry)| entry)
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Entry)> + '_ {
        self.entries.iter().map(|(key, entry)| (&**key, entry))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the delta changes nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The greatest stamp in the delta.
    pub fn max_stamp(&self) -> Option<&Stamp> {
        self.entries.iter().map(|(_, entry)| &entry.stamp).max()
    }

    /// Entries the codec has already validated: sorted by key, keys unique.
    pub(super) fn from_sorted_entries(entries: Vec<(Arc<str>, Entry)>) -> Self {
        Self { entries }
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|(probe, _)| (**probe).cmp(key))
    }
}

impl<K: Into<Arc<str>>> FromIterator<(K, Entry)> for Delta {
    /// Collects entries in any order: sorted once (in linear time when they come in key
    /// order), and of entries for one key the greatest is kept.
    fn from_iter<I: IntoIterator<Item = (K, Entry)>>(iter: I) -> Self {
        let mut entries: Vec<(Arc<str>, Entry)> = iter
            .into_iter()
            .map(|(key, entry)| (key.into(), entry))
            .collect();
        entries.sort_by(|(a, _), (b, _)| a.cmp(b));
        entries.dedup_by(|later, kept| {
            if later.0 != kept.0 {
                return false;
            }
            if later.1.precedence(&kept.1) == Ordering::Greater {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            true
        });
        Self { entries }
    }
}

/// One region's state of a configuration: every key with its winning entry (tombstones
/// included), the per-writer frontier of what it has merged, and the horizon its
/// tombstones were collected through.
///
/// The horizon is a stable point (see [`super::compaction`]): every write stamped at or
/// below it had been merged when the tombstones at or below it were dropped. An incoming
/// entry at or below the horizon for a key the replica does not hold, from a writer the
/// replica has merged through that entry's stamp, is therefore one it has merged and
/// outlived (its tombstone was collected), and it is ignored rather than resurrecting the
/// key. The writer's frontier is asked too because a horizon is only as stable as the
/// clocks and backups behind it: a write stamped below it by a clock that is behind, or
/// one a restored replica lost, was never merged here, and is taken.
///
/// The entries are one vector sorted by key, the order the codec reads and writes them
/// in: decoding a companion builds it without sorting, encoding walks it. A key is found
/// by binary search. The controller decodes, applies one delta and encodes, so the
/// layout is chosen for that path; applying a delta costs little next to the codec at
/// any size the companion allows (see `BENCHMARKS.md`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replica {
    /// Sorted by key, keys unique.
    entries: Vec<(Arc<str>, Entry)>,
    frontiers: BTreeMap<WriterId, Stamp>,
    horizon: Option<Stamp>,
}

impl Replica {
    /// An empty replica (a region that has merged nothing yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry for `key`, tombstone included.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        let at = self.position(key).ok()?;
        self.entries.get(at).map(|(_, entry)| entry)
    }

    /// Every entry in key order, tombstones included.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Entry)> + '_ {
        self.entries.iter().map(|(key, entry)| (&**key, entry))
    }

    /// Number of entries, tombstones included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the replica holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of tombstones.
    pub fn tombstones(&self) -> usize {
        self.iter()
            .filter(|(_, entry)| entry.is_tombstone())
            .count()
    }

    /// The live key/values (what the target ConfigMap's `data` holds), in key order.
    pub fn live_iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.iter()
            .filter_map(|(key, entry)| Some((key, entry.value()?)))
    }

    /// The live key/values as a map.
    pub fn live(&self) -> BTreeMap<&str, &str> {
        self.live_iter().collect()
    }

    /// The greatest stamp merged from any writer.
    pub fn frontier(&self) -> Option<&Stamp> {
        self.frontiers.values().max()
    }

    /// The greatest stamp merged from `writer`.
    pub fn frontier_of(&self, writer: &WriterId) -> Option<&Stamp> {
        self.frontiers.get(writer)
    }

    /// The greatest stamp merged, per writer.
    pub fn frontiers(&self) -> &BTreeMap<WriterId, Stamp> {
        &self.frontiers
    }

    /// The stable point tombstones were collected through, if they ever were.
    pub fn horizon(&self) -> Option<&Stamp> {
        self.horizon.as_ref()
    }

    /// Whether `entry` for `key` is held here or was outlived, so that applying it would
    /// change nothing: the replica holds an entry for the key that wins or ties, or none
    /// at all while the entry is at or below the horizon (merged, then outlived by a
    /// tombstone that was collected).
    pub fn holds(&self, key: &str, entry: &Entry) -> bool {
        match self.get(key) {
            Some(held) => held.precedence(entry).is_ge(),
            None => self.has_outlived(entry),
        }
    }

    /// Whether an entry for a key this replica does not hold is one it merged and then
    /// outlived: at or below the horizon, *and* at or below what the replica has merged
    /// from the entry's writer. The second half is what keeps a write the replica never
    /// saw from being taken for one it outlived when the horizon got ahead of it: a
    /// writer on a clock behind the one that collected (its stamps land below the
    /// horizon), or a replica restored from a backup taken before the write whose
    /// horizon another writer's collection then raised. When the horizon is a true
    /// stable point both halves hold for every write at or below it, so nothing changes.
    fn has_outlived(&self, entry: &Entry) -> bool {
        self.is_below_horizon(&entry.stamp)
            && self
                .frontier_of(&entry.stamp.writer)
                .is_some_and(|merged| entry.stamp <= *merged)
    }

    fn is_below_horizon(&self, stamp: &Stamp) -> bool {
        self.horizon
            .as_ref()
            .is_some_and(|horizon| stamp <= horizon)
    }

    /// Applies a delta: O(d log n) for a delta of d keys into n when the delta only
    /// changes existing keys, plus one pass over the entries when it adds keys. Applying
    /// the same delta again changes nothing (every entry comes back `unchanged` or
    /// `lost`).
    pub fn apply(&mut self, delta: &Delta) -> MergeOutcome {
        // Joined against the frontiers from before this delta: what it brings is not
        // something the replica had merged already.
        let outcome = self.join(delta.entries.iter());
        for (_, entry) in delta.iter() {
            self.advance_frontier(&entry.stamp.writer, &entry.stamp);
        }
        outcome
    }

    /// Joins another replica's full state into this one, frontiers included. The
    /// controller never calls this (a region only ever receives deltas); it is the
    /// full-state join the convergence and compaction properties are stated with, and
    /// costs what applying `other`'s entries as one delta costs. The higher horizon wins,
    /// and tombstones at or below it are dropped.
    pub fn merge(&mut self, other: &Replica) -> MergeOutcome {
        let outcome = self.join(other.entries.iter());
        for (writer, stamp) in &other.frontiers {
            self.advance_frontier(writer, stamp);
        }
        if let Some(horizon) = &other.horizon {
            self.collect_through(horizon);
        }
        outcome
    }

    /// Raises the horizon to `stable` (never lowers it) and drops every tombstone at or
    /// below the horizon; returns how many were dropped. Live entries and frontiers are
    /// kept. `stable` must be a stable point: see [`super::compaction`].
    pub(super) fn collect_through(&mut self, stable: &Stamp) -> usize {
        self.collect_through_keeping(stable, |_| false)
    }

    /// [`Self::collect_through`], except for the tombstones of the keys `pending` names:
    /// those are kept (below the horizon) until the caller says otherwise.
    pub(super) fn collect_through_keeping(
        &mut self,
        stable: &Stamp,
        pending: impl Fn(&str) -> bool,
    ) -> usize {
        if !self.is_below_horizon(stable) {
            self.horizon = Some(stable.clone());
        }
        let Some(horizon) = self.horizon.clone() else {
            return 0;
        };
        self.retain_entries(|key, entry| {
            !(entry.is_tombstone() && entry.stamp <= horizon) || pending(key)
        })
    }

    /// Turns the entries of `keys` into tombstones under their own stamps (a rebase: see
    /// `regions::materialize`); frontiers and the horizon are kept. A tombstone, not a
    /// removal, so that the replica still says the key goes until whatever holds it is
    /// written; it is collected like any other.
    pub fn bury_keys(&mut self, keys: &[String]) {
        for key in keys {
            // Replaced in place: a tombstone loses a tie with a value under `insert`.
            if let Ok(at) = self.position(key)
                && let Some((_, entry)) = self.entries.get_mut(at)
            {
                *entry = Entry::tombstone(entry.stamp.clone());
            }
        }
    }

    /// Keeps the entries for which `keep` holds; frontiers are not lowered.
    pub(super) fn retain_entries(&mut self, mut keep: impl FnMut(&str, &Entry) -> bool) -> usize {
        let before = self.len();
        self.entries.retain(|(key, entry)| keep(key, entry));
        before.saturating_sub(self.len())
    }

    /// A replica from parts the codec has already validated (sorted unique keys, frontiers
    /// covering every entry).
    pub(super) fn from_validated_parts(
        entries: Vec<(Arc<str>, Entry)>,
        frontiers: BTreeMap<WriterId, Stamp>,
        horizon: Option<Stamp>,
    ) -> Self {
        Self {
            entries,
            frontiers,
            horizon,
        }
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|(probe, _)| (**probe).cmp(key))
    }

    fn advance_frontier(&mut self, writer: &WriterId, stamp: &Stamp) {
        match self.frontiers.get_mut(writer) {
            Some(current) if *current >= *stamp => {}
            Some(current) => *current = stamp.clone(),
            None => {
                self.frontiers.insert(writer.clone(), stamp.clone());
            }
        }
    }

    /// Joins key-sorted incoming entries: keys already held are updated where they stand;
    /// new keys are set aside with their position and inserted in one pass at the end, so
    /// that each existing entry moves at most once however many keys arrive.
    fn join<'a>(&mut self, incoming: impl Iterator<Item = &'a (Arc<str>, Entry)>) -> MergeOutcome {
        let mut outcome = MergeOutcome::default();
        let mut added: Vec<(usize, (Arc<str>, Entry))> = Vec::new();
        for (key, entry) in incoming {
            match self.position(key) {
                Ok(at) => {
                    if let Some((_, local)) = self.entries.get_mut(at)
                        && outcome.record(local, entry)
                    {
                        local.clone_from(entry);
                    }
                }
                // Merged before and outlived: its tombstone was collected.
                Err(_) if self.has_outlived(entry) => outcome.lost = outcome.lost.saturating_add(1),
                Err(at) => {
                    outcome.won = outcome.won.saturating_add(1);
                    added.push((at, (Arc::clone(key), entry.clone())));
                }
            }
        }
        insert_sorted(&mut self.entries, added);
        outcome
    }
}

/// Inserts `added` into the sorted `run`: each item with the index in `run` before which
/// it goes, items in key order (so indexes never decrease). One pass into a new buffer:
/// each element of `run` moves once.
fn insert_sorted<T>(run: &mut Vec<T>, added: Vec<(usize, T)>) {
    if added.is_empty() {
        return;
    }
    let old = std::mem::take(run);
    let old_len = old.len();
    let mut merged = Vec::with_capacity(old_len.saturating_add(added.len()));
    let mut old = old.into_iter();
    let mut taken = 0;
    for (at, item) in added {
        // Clamped so that a misordered caller misorders the run rather than losing items.
        let at = at.clamp(taken, old_len);
        merged.extend(old.by_ref().take(at.saturating_sub(taken)));
        merged.push(item);
        taken = at;
    }
    merged.extend(old);
    *run = merged;
}

#[cfg(test)]
mod tests;
