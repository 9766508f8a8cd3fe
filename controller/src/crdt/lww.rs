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
use std::collections::btree_map;
use std::iter::Peekable;
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
            self.conflicts += 1;
        }
        match order {
            Ordering::Greater => {
                self.won += 1;
                true
            }
            Ordering::Less => {
                self.lost += 1;
                false
            }
            Ordering::Equal => {
                self.unchanged += 1;
                false
            }
        }
    }
}

type Entries = BTreeMap<Arc<str>, Entry>;

/// A set of entries to merge into replicas: a revision, an override, a compensation. Only
/// the keys it changes; a removed key is a tombstone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    entries: Entries,
}

impl Delta {
    /// An empty delta.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry; if the key is already present the greater entry is kept, so deltas
    /// can be combined (e.g. every revision a lagging region missed) without losing writes.
    pub fn insert(&mut self, key: impl Into<Arc<str>>, entry: Entry) {
        match self.entries.entry(key.into()) {
            btree_map::Entry::Vacant(slot) => {
                slot.insert(entry);
            }
            btree_map::Entry::Occupied(mut slot) => {
                if entry.precedence(slot.get()) == Ordering::Greater {
                    slot.insert(entry);
                }
            }
        }
    }

    /// Sets `key` to `value` under `stamp`.
    pub fn set(&mut self, key: impl Into<Arc<str>>, value: impl Into<Arc<str>>, stamp: Stamp) {
        self.insert(key, Entry::live(value, stamp));
    }

    /// Removes `key` under `stamp` (a tombstone).
    pub fn remove(&mut self, key: impl Into<Arc<str>>, stamp: Stamp) {
        self.insert(key, Entry::tombstone(stamp));
    }

    /// Joins another delta into this one.
    pub fn merge(&mut self, other: &Delta) {
        for (key, entry) in &other.entries {
            self.insert(Arc::clone(key), entry.clone());
        }
    }

    /// The entry for `key`.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
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
        self.entries.values().map(|entry| &entry.stamp).max()
    }

    pub(super) fn from_sorted_entries(entries: Entries) -> Self {
        Self { entries }
    }
}

impl<K: Into<Arc<str>>> FromIterator<(K, Entry)> for Delta {
    fn from_iter<I: IntoIterator<Item = (K, Entry)>>(iter: I) -> Self {
        let mut delta = Delta::new();
        for (key, entry) in iter {
            delta.insert(key, entry);
        }
        delta
    }
}

/// One region's state of a configuration: every key with its winning entry (tombstones
/// included), and the per-writer frontier of what it has merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replica {
    entries: Entries,
    frontiers: BTreeMap<WriterId, Stamp>,
}

impl Replica {
    /// An empty replica (a region that has merged nothing yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry for `key`, tombstone included.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
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
        self.entries.values().filter(|e| e.is_tombstone()).count()
    }

    /// The live key/values (what the target ConfigMap's `data` holds), in key order.
    pub fn live_iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.entries
            .iter()
            .filter_map(|(key, entry)| Some((&**key, entry.value()?)))
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

    /// Applies a delta. Costs O(d log n) for a delta of d keys into n, so publishing a
    /// small revision does not scale with the size of the configuration. Applying the same
    /// delta again changes nothing (everything comes back `unchanged`).
    pub fn apply(&mut self, delta: &Delta) -> MergeOutcome {
        self.advance_frontiers(delta.entries.values().map(|entry| &entry.stamp));
        self.join_entries(&delta.entries)
    }

    /// Joins another replica's full state into this one (anti-entropy). Linear in the size
    /// of both when they are of similar size, O(m log n) when `other` is much smaller.
    pub fn merge(&mut self, other: &Replica) -> MergeOutcome {
        for (writer, stamp) in &other.frontiers {
            self.advance_frontier(writer, stamp);
        }
        self.join_entries(&other.entries)
    }

    /// Keeps the entries for which `keep` holds; frontiers are not lowered.
    pub(super) fn retain_entries(&mut self, mut keep: impl FnMut(&Entry) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, entry| keep(entry));
        before - self.entries.len()
    }

    /// A replica from parts the codec has already validated (sorted, frontiers covering
    /// every entry).
    pub(super) fn from_validated_parts(
        entries: Entries,
        frontiers: BTreeMap<WriterId, Stamp>,
    ) -> Self {
        Self { entries, frontiers }
    }

    fn advance_frontiers<'a>(&mut self, stamps: impl Iterator<Item = &'a Stamp>) {
        // Deltas come from one or a few writers, often in runs: fold them locally first so
        // the per-writer map is touched once per run, not once per key.
        let mut pending: Option<&Stamp> = None;
        for stamp in stamps {
            match pending {
                Some(held) if held.writer == stamp.writer => {
                    if stamp > held {
                        pending = Some(stamp);
                    }
                }
                Some(held) => {
                    self.advance_frontier(&held.writer, held);
                    pending = Some(stamp);
                }
                None => pending = Some(stamp),
            }
        }
        if let Some(held) = pending {
            self.advance_frontier(&held.writer, held);
        }
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

    fn join_entries(&mut self, incoming: &Entries) -> MergeOutcome {
        if self.entries.is_empty() {
            self.entries = incoming.clone();
            return MergeOutcome {
                won: incoming.len(),
                ..MergeOutcome::default()
            };
        }
        if lookups_are_cheaper(incoming.len(), self.entries.len()) {
            self.join_by_lookup(incoming)
        } else {
            self.join_by_walk(incoming)
        }
    }

    fn join_by_lookup(&mut self, incoming: &Entries) -> MergeOutcome {
        let mut outcome = MergeOutcome::default();
        for (key, entry) in incoming {
            match self.entries.get_mut(key) {
                Some(local) => {
                    if outcome.record(local, entry) {
                        *local = entry.clone();
                    }
                }
                None => {
                    outcome.won += 1;
                    self.entries.insert(Arc::clone(key), entry.clone());
                }
            }
        }
        outcome
    }

    /// Merge-join of two sorted maps: updates shared keys in place while walking both, then
    /// adds the missing keys, rebuilding the tree in one sorted pass when there are many.
    fn join_by_walk(&mut self, incoming: &Entries) -> MergeOutcome {
        let mut outcome = MergeOutcome::default();
        let mut missing: Vec<(Arc<str>, Entry)> = Vec::new();
        let mut theirs = incoming.iter().peekable();
        for (key, local) in self.entries.iter_mut() {
            while let Some(&(their_key, their_entry)) = theirs.peek() {
                match their_key.cmp(key) {
                    Ordering::Less => {
                        missing.push((Arc::clone(their_key), their_entry.clone()));
                        theirs.next();
                    }
                    Ordering::Equal => {
                        if outcome.record(local, their_entry) {
                            *local = their_entry.clone();
                        }
                        theirs.next();
                        break;
                    }
                    Ordering::Greater => break,
                }
            }
        }
        missing.extend(theirs.map(|(key, entry)| (Arc::clone(key), entry.clone())));
        outcome.won += missing.len();
        if lookups_are_cheaper(missing.len(), self.entries.len()) {
            self.entries.extend(missing);
        } else {
            let local = std::mem::take(&mut self.entries);
            self.entries = SortedUnion {
                left: local.into_iter().peekable(),
                right: missing.into_iter().peekable(),
            }
            .collect();
        }
        outcome
    }
}

/// Whether m lookups (about log2 n steps each) beat one walk over n + m entries.
fn lookups_are_cheaper(incoming: usize, local: usize) -> bool {
    let depth = (usize::BITS - local.leading_zeros()) as usize;
    incoming.saturating_mul(depth.max(1)) < local
}

/// Union of two key-sorted sequences with disjoint keys, in key order. Feeding sorted input
/// to `BTreeMap::from_iter` lets it build the tree in one pass.
struct SortedUnion<L: Iterator, R: Iterator> {
    left: Peekable<L>,
    right: Peekable<R>,
}

impl<L, R> Iterator for SortedUnion<L, R>
where
    L: Iterator<Item = (Arc<str>, Entry)>,
    R: Iterator<Item = (Arc<str>, Entry)>,
{
    type Item = (Arc<str>, Entry);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.left.peek(), self.right.peek()) {
            (Some((left, _)), Some((right, _))) if right < left => self.right.next(),
            (Some(_), _) => self.left.next(),
            (None, _) => self.right.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (left_low, left_high) = self.left.size_hint();
        let (right_low, right_high) = self.right.size_hint();
        let high = left_high
            .zip(right_high)
            .and_then(|(l, r)| l.checked_add(r));
        (left_low.saturating_add(right_low), high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(wall_ms: u64, user: &str) -> Stamp {
        Stamp::new(wall_ms, 0, WriterId::override_by(user).unwrap())
    }

    #[test]
    fn later_stamp_wins_and_tombstones_hide_keys() {
        let mut replica = Replica::new();
        let mut first = Delta::new();
        first.set("a", "1", stamp(10, "alice"));
        first.set("b", "2", stamp(10, "alice"));
        replica.apply(&first);
        let mut second = Delta::new();
        second.remove("a", stamp(20, "bob"));
        second.set("b", "old", stamp(5, "bob"));
        let outcome = replica.apply(&second);
        assert_eq!((outcome.won, outcome.lost, outcome.unchanged), (1, 1, 0));
        assert_eq!(replica.live(), BTreeMap::from([("b", "2")]));
        assert!(replica.get("a").unwrap().is_tombstone());
        assert_eq!(replica.tombstones(), 1);
    }

    #[test]
    fn applying_twice_changes_nothing() {
        let mut replica = Replica::new();
        let mut delta = Delta::new();
        delta.set("a", "1", stamp(10, "alice"));
        delta.remove("b", stamp(10, "alice"));
        replica.apply(&delta);
        let snapshot = replica.clone();
        let again = replica.apply(&delta);
        assert_eq!(replica, snapshot);
        assert!(again.is_noop());
        assert_eq!(again.unchanged, 2);
    }

    #[test]
    fn equal_stamps_resolve_by_value_and_are_reported() {
        let mut left = Delta::new();
        left.set("k", "x", stamp(10, "alice"));
        let mut right = Delta::new();
        right.set("k", "y", stamp(10, "alice"));
        let mut a = Replica::new();
        a.apply(&left);
        let outcome = a.apply(&right);
        let mut b = Replica::new();
        b.apply(&right);
        b.apply(&left);
        assert_eq!(a, b);
        assert_eq!(a.get("k").unwrap().value(), Some("y"));
        assert_eq!(outcome.conflicts, 1);
    }

    #[test]
    fn frontiers_include_losing_writes() {
        let mut replica = Replica::new();
        let mut newer = Delta::new();
        newer.set("k", "new", stamp(20, "alice"));
        replica.apply(&newer);
        let mut older = Delta::new();
        older.set("k", "old", stamp(10, "bob"));
        replica.apply(&older);
        let bob = WriterId::override_by("bob").unwrap();
        assert_eq!(replica.frontier_of(&bob), Some(&stamp(10, "bob")));
        assert_eq!(replica.frontier(), Some(&stamp(20, "alice")));
    }

    #[test]
    fn walk_and_lookup_paths_agree() {
        let mut big = Replica::new();
        let base: Delta = (0..200)
            .map(|i| (format!("k{i:03}"), Entry::live("v", stamp(10, "alice"))))
            .collect();
        big.apply(&base);
        let small: Delta = (0..5)
            .map(|i| {
                (
                    format!("k{:03}", i * 70 + 1),
                    Entry::live("w", stamp(20, "bob")),
                )
            })
            .chain([("zz".to_owned(), Entry::live("w", stamp(20, "bob")))])
            .collect();
        let mut by_lookup = big.clone();
        by_lookup.apply(&small);
        let mut small_replica = Replica::new();
        small_replica.apply(&small);
        // Merging the big one into the small one walks; the other way looks up.
        small_replica.merge(&big);
        assert_eq!(by_lookup, small_replica);
    }
}
