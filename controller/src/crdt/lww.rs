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
use std::collections::{BTreeMap, VecDeque};
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
        let mut merged = Vec::with_capacity(mine.len() + other.len());
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
/// included), and the per-writer frontier of what it has merged.
///
/// Stored as a sorted run (a `Vec`, binary-searched) plus a small ordered overlay for keys
/// added by deltas since the run was last rebuilt. Full-state merge is then a sequential
/// merge-join of sorted memory (what a 50k-key anti-entropy merge needs), while applying a
/// delta updates the run in place or inserts into the overlay, at a cost that grows with
/// the delta. The overlay is folded into the run once it exceeds an eighth of it, so the
/// amortised cost of an insert stays constant. Equality compares content, not layout.
///
/// Each run element carries the first [`PREFIX_LEN`] bytes of its key inline, so that
/// searching and merging compare keys without reading them from the heap (a cache miss
/// per comparison otherwise); only keys that agree on those bytes are read.
///
/// Lookups into a large run first search its fences: the prefix of every
/// [`FENCE_STRIDE`]-th element, a copy small enough to stay in the processor's
/// second-level cache (200 KB at 50k keys). Only the last step, a scan of one stride,
/// touches the run. Fences are rebuilt lazily, by the next delta after the run's layout
/// changed, so a full merge does not pay for them.
#[derive(Clone, Default)]
pub struct Replica {
    /// Sorted by key, keys unique.
    run: Vec<Slot>,
    /// Keys not in `run`.
    overlay: Entries,
    /// `run[i * FENCE_STRIDE].prefix` for every `i`, when `fenced`.
    fences: Vec<KeyPrefix>,
    /// Whether `fences` matches `run`.
    fenced: bool,
    frontiers: BTreeMap<WriterId, Stamp>,
}

/// The overlay is folded into the run when larger than `run.len() / OVERLAY_FRACTION`
/// and than `OVERLAY_MIN` (small replicas do not need the fold at all).
const OVERLAY_FRACTION: usize = 8;
const OVERLAY_MIN: usize = 256;

/// Run elements per fence (see [`Replica`]).
const FENCE_STRIDE: usize = 8;

/// Runs shorter than this are searched directly: they fit the cache anyway.
const FENCES_FROM: usize = 4096;

/// Key bytes kept inline in each run element. Configuration keys are mostly shorter, so
/// most comparisons never read the key itself.
const PREFIX_LEN: usize = 32;

/// The first [`PREFIX_LEN`] bytes of a key, zero-padded, as big-endian words: ordering
/// prefixes orders those bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct KeyPrefix([u64; PREFIX_LEN / 8]);

impl KeyPrefix {
    fn of(key: &str) -> Self {
        // Word by word rather than through a padded copy: a variable-length copy is a
        // library call, and this runs once per incoming key.
        let bytes = key.as_bytes();
        let mut words = [0u64; PREFIX_LEN / 8];
        for (index, word) in words.iter_mut().enumerate() {
            let start = index * 8;
            match bytes.get(start..start + 8) {
                Some(chunk) => *word = <[u8; 8]>::try_from(chunk).map_or(0, u64::from_be_bytes),
                None => {
                    let tail = bytes.get(start..).unwrap_or_default();
                    *word = tail
                        .iter()
                        .zip((0..8).rev())
                        .fold(0, |word, (&byte, shift)| {
                            word | u64::from(byte) << (8 * shift)
                        });
                    break;
                }
            }
        }
        Self(words)
    }
}

/// Key order, from prefixes first. Prefixes that differ order their keys (a zero pad
/// sorts a shorter key first, as a proper prefix sorts first). Equal prefixes mean equal
/// first bytes: if either key ends within them, the shorter is first (or they are the
/// same key); otherwise the rest decides. Lengths come with the pointer, so only that
/// last case reads the keys.
fn cmp_keys(a_prefix: &KeyPrefix, a: &str, b_prefix: &KeyPrefix, b: &str) -> Ordering {
    a_prefix.cmp(b_prefix).then_with(|| {
        if a.len() <= PREFIX_LEN || b.len() <= PREFIX_LEN {
            a.len().cmp(&b.len())
        } else {
            a.as_bytes()[PREFIX_LEN..].cmp(&b.as_bytes()[PREFIX_LEN..])
        }
    })
}

/// One run element: a key with its inline prefix, and its entry.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    prefix: KeyPrefix,
    key: Arc<str>,
    entry: Entry,
}

impl Slot {
    pub(super) fn new(key: Arc<str>, entry: Entry) -> Self {
        Self {
            prefix: KeyPrefix::of(&key),
            key,
            entry,
        }
    }
}

/// An incoming entry to join, with its key's prefix.
type Incoming<'a> = (KeyPrefix, &'a Arc<str>, &'a Entry);

impl Replica {
    /// An empty replica (a region that has merged nothing yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry for `key`, tombstone included.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        match self.run_position(0, &KeyPrefix::of(key), key) {
            Ok(at) => Some(&self.run[at].entry),
            Err(_) => self.overlay.get(key),
        }
    }

    /// Every entry in key order, tombstones included.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Entry)> + '_ {
        self.sorted().map(|(key, entry)| (&**key, entry))
    }

    /// Number of entries, tombstones included.
    pub fn len(&self) -> usize {
        self.run.len() + self.overlay.len()
    }

    /// Whether the replica holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// Applies a delta. Costs O(d log n) for a delta of d keys into n (amortised: new keys
    /// occasionally fold the overlay into the run, and the first delta after the run's
    /// layout changed rebuilds the fences, one copy per eight keys), so publishing a
    /// small revision does not scale with the size of the configuration. Applying the
    /// same delta again changes nothing (every entry comes back `unchanged` or `lost`).
    pub fn apply(&mut self, delta: &Delta) -> MergeOutcome {
        let by_lookup = lookups_are_cheaper(delta.len(), self.len());
        // A delta's memory is usually cold, and lookups update reference counts, which
        // the processor performs one at a time, keeping later reads from starting early:
        // each key and each count would be a separate wait for memory. Prefetched in
        // the pass that reads the stamps anyway, the waits overlap. (A walk prefetches
        // as it goes.)
        self.advance_frontiers(delta.entries.iter().map(|(key, entry)| {
            if by_lookup {
                prefetch_entry(key, entry);
            }
            &entry.stamp
        }));
        let incoming = delta
            .entries
            .iter()
            .map(|(key, entry)| (KeyPrefix::of(key), key, entry));
        if by_lookup {
            self.build_fences();
            self.join_by_lookup(incoming)
        } else {
            self.join_by_walk(incoming)
        }
    }

    /// Joins another replica's full state into this one (anti-entropy): one sequential
    /// merge-join, linear in the size of both; O(m log n) when `other` is much smaller.
    pub fn merge(&mut self, other: &Replica) -> MergeOutcome {
        for (writer, stamp) in &other.frontiers {
            self.advance_frontier(writer, stamp);
        }
        let plain_run = other.overlay.is_empty();
        let run = other
            .run
            .iter()
            .map(|slot| (slot.prefix, &slot.key, &slot.entry));
        let sorted = || {
            other
                .sorted()
                .map(|(key, entry)| (KeyPrefix::of(key), key, entry))
        };
        match (lookups_are_cheaper(other.len(), self.len()), plain_run) {
            (true, true) => self.join_by_lookup(run),
            (true, false) => self.join_by_lookup(sorted()),
            (false, true) => self.join_by_walk(run),
            (false, false) => self.join_by_walk(sorted()),
        }
    }

    /// Keeps the entries for which `keep` holds; frontiers are not lowered.
    pub(super) fn retain_entries(&mut self, mut keep: impl FnMut(&Entry) -> bool) -> usize {
        let before = self.len();
        self.run.retain(|slot| keep(&slot.entry));
        self.fenced = false;
        self.overlay.retain(|_, entry| keep(entry));
        before - self.len()
    }

    /// A replica from parts the codec has already validated (sorted unique keys, frontiers
    /// covering every entry).
    pub(super) fn from_validated_parts(
        sorted: Vec<Slot>,
        frontiers: BTreeMap<WriterId, Stamp>,
    ) -> Self {
        Self {
            run: sorted,
            overlay: Entries::new(),
            fences: Vec::new(),
            fenced: false,
            frontiers,
        }
    }

    /// Where `key` is (or would go) in the run, searching from `from` on: through the
    /// fences when they are current, then within the stride they leave.
    fn run_position(&self, from: usize, prefix: &KeyPrefix, key: &str) -> Result<usize, usize> {
        let len = self.run.len();
        let (mut low, mut high) = (from.min(len), len);
        if self.fenced {
            // Fence `f` is the prefix of element `f * FENCE_STRIDE`. A fence below the
            // key's prefix puts the key after that element; one above, at or before it.
            // Fences equal to the prefix (keys longer than it that share it) decide
            // nothing, so the range spans them.
            let first = low / FENCE_STRIDE;
            let below = partition(&self.fences, first, |fence| fence < prefix);
            let not_above = if self.fences.get(below) == Some(prefix) {
                partition(&self.fences, below, |fence| fence <= prefix)
            } else {
                below
            };
            if below > 0 {
                low = low.max((below - 1) * FENCE_STRIDE + 1);
            }
            high = high.min(not_above.saturating_mul(FENCE_STRIDE)).max(low);
        }
        let at = partition_range(&self.run, low, high, |slot| {
            cmp_keys(&slot.prefix, &slot.key, prefix, key) == Ordering::Less
        });
        match self.run.get(at) {
            Some(slot) if cmp_keys(&slot.prefix, &slot.key, prefix, key) == Ordering::Equal => {
                Ok(at)
            }
            _ => Err(at),
        }
    }

    /// Makes the fences current, if the run is large enough to need them.
    fn build_fences(&mut self) {
        if self.fenced || self.run.len() < FENCES_FROM {
            return;
        }
        self.fences.clear();
        self.fences.extend(
            self.run
                .iter()
                .step_by(FENCE_STRIDE)
                .map(|slot| slot.prefix),
        );
        self.fenced = true;
    }

    /// Run and overlay as one key-ordered sequence.
    fn sorted(&self) -> impl ExactSizeIterator<Item = (&Arc<str>, &Entry)> + '_ {
        let run = self.run.iter().map(|slot| (&slot.key, &slot.entry));
        SortedUnion::new(run, self.overlay.iter())
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

    fn join_by_lookup<'a>(&mut self, incoming: impl Iterator<Item = Incoming<'a>>) -> MergeOutcome {
        let mut outcome = MergeOutcome::default();
        // Incoming keys are sorted: each search starts where the previous one ended.
        let mut from = 0;
        for (prefix, key, entry) in incoming {
            let local = match self.run_position(from, &prefix, key) {
                Ok(at) => {
                    from = at + 1;
                    Some(&mut self.run[at].entry)
                }
                Err(at) => {
                    from = at;
                    self.overlay.get_mut(&**key)
                }
            };
            match local {
                Some(local) => {
                    if outcome.record(local, entry) {
                        overwrite(local, entry);
                    }
                }
                None => {
                    outcome.won += 1;
                    self.overlay.insert(Arc::clone(key), entry.clone());
                }
            }
        }
        if self.overlay.len() > OVERLAY_MIN
            && self.overlay.len().saturating_mul(OVERLAY_FRACTION) > self.run.len()
        {
            self.fold_overlay();
        }
        outcome
    }

    /// Moves the overlay's keys (none of which is in the run) into the run.
    fn fold_overlay(&mut self) {
        let overlay = std::mem::take(&mut self.overlay);
        let mut added = Vec::with_capacity(overlay.len());
        let mut at = 0;
        for (key, entry) in overlay {
            let slot = Slot::new(key, entry);
            at = match self.run_position(at, &slot.prefix, &slot.key) {
                Ok(at) | Err(at) => at,
            };
            added.push((at, slot));
        }
        insert_sorted(&mut self.run, added, std::convert::identity);
        self.fenced = false;
    }

    /// Merge-join of this replica with `incoming`, in place: keys both hold are updated
    /// where they stand, new keys are set aside with their position and then inserted in
    /// one backward pass. One walk over sorted memory; only the new keys are moved twice,
    /// and the run grows instead of being rebuilt into a fresh buffer.
    fn join_by_walk<'a>(&mut self, incoming: impl Iterator<Item = Incoming<'a>>) -> MergeOutcome {
        let mut outcome = MergeOutcome::default();
        if !self.overlay.is_empty() {
            self.fold_overlay();
        }
        let (incoming_len, _) = incoming.size_hint();
        // New keys are set aside as references (half the size of a slot) and become
        // slots only where they are inserted. Reserved, not touched: only the pages new
        // keys fill are ever faulted in.
        let mut added: Vec<(usize, Incoming<'a>)> = Vec::with_capacity(incoming_len);
        let mut at = 0;
        for (prefix, key, entry) in Lookahead::new(incoming) {
            if let Some(ahead) = self.run.get(at + LOOKAHEAD) {
                prefetch_entry(&ahead.key, &ahead.entry);
            }
            let local = loop {
                match self.run.get_mut(at) {
                    Some(slot) => match cmp_keys(&slot.prefix, &slot.key, &prefix, key) {
                        Ordering::Less => at += 1,
                        Ordering::Equal => break Some(&mut slot.entry),
                        Ordering::Greater => break None,
                    },
                    None => break None,
                }
            };
            match local {
                Some(local) => {
                    if outcome.record(local, entry) {
                        overwrite(local, entry);
                    }
                    at += 1;
                }
                None => {
                    outcome.won += 1;
                    added.push((at, (prefix, key, entry)));
                }
            }
        }
        if !added.is_empty() {
            insert_sorted(&mut self.run, added, |(prefix, key, entry)| Slot {
                prefix,
                key: Arc::clone(key),
                entry: entry.clone(),
            });
            self.fenced = false;
        }
        outcome
    }
}

/// Makes `local` equal to the winning `incoming` entry, sharing its text. Successive
/// writes to a key mostly come from one writer, so the writer is replaced only when it
/// differs: comparing the (hot, short) writer text costs less than the two
/// reference-count updates of a clone, and reference counts dominate a merge's cost.
fn overwrite(local: &mut Entry, incoming: &Entry) {
    local.value.clone_from(&incoming.value);
    local.stamp.wall_ms = incoming.stamp.wall_ms;
    local.stamp.logical = incoming.stamp.logical;
    if local.stamp.writer != incoming.stamp.writer {
        local.stamp.writer.clone_from(&incoming.stamp.writer);
    }
}

/// How many entries ahead of a merge-join the reference counts are fetched: enough to
/// cover a memory access at the join's pace.
const LOOKAHEAD: usize = 8;

/// Incoming entries, each yielded [`LOOKAHEAD`] items after its reference counts were
/// prefetched. A join updates reference counts one at a time, each waiting for its
/// cache line; fetched ahead, those lines are present when the update comes.
struct Lookahead<'a, I> {
    inner: I,
    queue: VecDeque<Incoming<'a>>,
}

impl<'a, I: Iterator<Item = Incoming<'a>>> Lookahead<'a, I> {
    fn new(inner: I) -> Self {
        Self {
            inner,
            queue: VecDeque::with_capacity(LOOKAHEAD),
        }
    }
}

impl<'a, I: Iterator<Item = Incoming<'a>>> Iterator for Lookahead<'a, I> {
    type Item = Incoming<'a>;

    fn next(&mut self) -> Option<Incoming<'a>> {
        while self.queue.len() < LOOKAHEAD {
            let Some(item) = self.inner.next() else {
                break;
            };
            prefetch_entry(item.1, item.2);
            self.queue.push_back(item);
        }
        self.queue.pop_front()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (low, high) = self.inner.size_hint();
        let queued = self.queue.len();
        (
            low.saturating_add(queued),
            high.and_then(|high| high.checked_add(queued)),
        )
    }
}

/// Prefetches what a join reads and updates for this entry: the key's first bytes and
/// reference counts, and the value's counts. (The writer's text is shared by most
/// entries and already cached.)
fn prefetch_entry(key: &Arc<str>, entry: &Entry) {
    prefetch_counts(key);
    prefetch(Arc::as_ptr(key).cast());
    if let Some(value) = &entry.value {
        prefetch_counts(value);
    }
}

/// Prefetches the cache line holding `text`'s reference counts (they sit just before
/// the text).
fn prefetch_counts(text: &Arc<str>) {
    prefetch(
        Arc::as_ptr(text)
            .cast::<u8>()
            .wrapping_sub(2 * std::mem::size_of::<usize>()),
    );
}

/// Asks the processor to fetch the cache line holding `address`, so that a later access
/// does not wait for memory. A hint only: it changes no state, and where there is no such
/// instruction it does nothing.
fn prefetch(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch never dereferences its address architecturally (it cannot
        // fault and reads nothing into the program), so any address is sound; `sse` is
        // part of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(address.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// Inserts `added` into the sorted `run`: each item with the index in `run` before which
/// it goes, items in key order (so indexes never decrease), made into a run element by
/// `make` where it lands. Each run element moves once. With room to spare the run grows
/// in place, in one backward pass that moves each element by the number of items
/// inserted before it; otherwise the two are merged into a new buffer (growing the old
/// one would copy every element, then move it again).
fn insert_sorted<S, T>(run: &mut Vec<T>, added: Vec<(usize, S)>, mut make: impl FnMut(S) -> T) {
    let old_len = run.len();
    let count = added.len();
    if count == 0 {
        return;
    }
    debug_assert!(
        added.windows(2).all(|pair| pair[0].0 <= pair[1].0)
            && added.last().is_some_and(|(at, _)| *at <= old_len)
    );
    if run.capacity() - old_len < count {
        let mut merged = Vec::with_capacity(old_len + count);
        let mut old = std::mem::take(run).into_iter();
        let mut taken = 0;
        for (at, staged) in added {
            let at = at.clamp(taken, old_len);
            merged.extend(old.by_ref().take(at - taken));
            merged.push(make(staged));
            taken = at;
        }
        merged.extend(old);
        *run = merged;
        return;
    }
    let untouched = added
        .iter()
        .map(|(at, _)| *at)
        .min()
        .unwrap_or(old_len)
        .min(old_len);
    // SAFETY: shortening a vector only stops it dropping the elements past the new
    // length. While the pass below moves them they may be duplicated bitwise, so if
    // `make` panicked they must leak (safe), not be dropped twice.
    unsafe {
        run.set_len(untouched);
    }
    let base = run.as_mut_ptr();
    let mut end = old_len;
    for (index, (at, staged)) in added.into_iter().enumerate().rev() {
        let item = make(staged);
        // Clamped so that a broken caller can only misorder, never write out of bounds.
        let at = at.min(end);
        // SAFETY: the capacity holds `old_len + count` elements. Elements `at..end` are
        // initialised (indexes of the original run not yet moved; `at <= end <=
        // old_len`); they move to `at + index + 1..end + index + 1`, which ends at or
        // before `old_len + count` since `index < count`, and the freed slot `at + index`
        // (uninitialised, or the source of a completed bitwise move) receives `item`.
        // Nothing in this block can panic, so no element is observed twice or dropped
        // twice.
        unsafe {
            std::ptr::copy(base.add(at), base.add(at + index + 1), end - at);
            std::ptr::write(base.add(at + index), item);
        }
        end = at;
    }
    // SAFETY: every slot below `old_len + count` now holds exactly one element: slots
    // that held run elements either kept them (below the first insertion) or received
    // a moved element or an inserted item.
    unsafe {
        run.set_len(old_len + count);
    }
}

impl PartialEq for Replica {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self.frontiers == other.frontiers
            && self.iter().eq(other.iter())
    }
}

impl Eq for Replica {}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Listed<'a>(&'a Replica);
        impl std::fmt::Debug for Listed<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_map().entries(self.0.iter()).finish()
            }
        }
        f.debug_struct("Replica")
            .field("entries", &Listed(self))
            .field("frontiers", &self.frontiers)
            .finish()
    }
}

/// The first index at or after `from` whose item is not `below`, in `items` ordered so
/// that every `below` item comes first. See [`partition_range`].
fn partition<T>(items: &[T], from: usize, below: impl Fn(&T) -> bool) -> usize {
    partition_range(items, from, items.len(), below)
}

/// The first index in `low..high` whose item is not `below` (or `high`).
///
/// An 8-way search: each round tests seven evenly spaced items and keeps the eighth of
/// the range the boundary falls in, down to a short scan. The seven reads do not depend
/// on each other, so the processor overlaps their cache misses; a binary search waits
/// for each miss in turn. (Branching on each test, rather than counting, lets the
/// processor start the next round's reads before the tests resolve: measured faster.)
fn partition_range<T>(items: &[T], low: usize, high: usize, below: impl Fn(&T) -> bool) -> usize {
    const WAYS: usize = 8;
    let (mut low, mut high) = (low.min(items.len()), high.min(items.len()));
    while high.saturating_sub(low) > 2 * WAYS {
        let step = (high - low) / WAYS;
        let mut passed = 0;
        for probe in 1..WAYS {
            if items.get(low + probe * step).is_some_and(&below) {
                passed = probe;
            }
        }
        // Items up to probe `passed` are below; the next probe's is not.
        if passed + 1 < WAYS {
            high = low + (passed + 1) * step;
        }
        low += passed * step + usize::from(passed > 0);
    }
    let tail = items.get(low..high).unwrap_or_default();
    low + tail.iter().take_while(|item| below(item)).count()
}

/// Whether m lookups (about log2 n steps each) beat one walk over n + m entries.
fn lookups_are_cheaper(incoming: usize, local: usize) -> bool {
    let depth = (usize::BITS - local.leading_zeros()) as usize;
    incoming.saturating_mul(depth.max(1)) < local
}

/// Union of two key-sorted sequences with disjoint keys, in key order.
struct SortedUnion<L: Iterator, R: Iterator> {
    left: Peekable<L>,
    right: Peekable<R>,
}

impl<L: Iterator, R: Iterator> SortedUnion<L, R> {
    fn new(left: L, right: R) -> Self {
        Self {
            left: left.peekable(),
            right: right.peekable(),
        }
    }
}

/// A borrowed `(key, entry)` pair, whose key orders the union.
trait Keyed {
    fn key(&self) -> &str;
}

impl Keyed for (&Arc<str>, &Entry) {
    fn key(&self) -> &str {
        self.0
    }
}

impl<T, L, R> Iterator for SortedUnion<L, R>
where
    T: Keyed,
    L: Iterator<Item = T>,
    R: Iterator<Item = T>,
{
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match (self.left.peek(), self.right.peek()) {
            (Some(left), Some(right)) if right.key() < left.key() => self.right.next(),
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

impl<T, L, R> ExactSizeIterator for SortedUnion<L, R>
where
    T: Keyed,
    L: ExactSizeIterator<Item = T>,
    R: ExactSizeIterator<Item = T>,
{
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
    fn deltas_built_in_any_order_or_by_merging_agree() {
        // Keys out of order, repeated with older and newer stamps.
        let writes: Vec<(String, Entry)> = (0..300u64)
            .map(|i| {
                let key = format!("k{:03}", (i * 37) % 101);
                (key, Entry::live(format!("v{i}"), stamp(i % 50, "alice")))
            })
            .collect();
        let mut inserted = Delta::new();
        for (key, entry) in &writes {
            inserted.insert(key.as_str(), entry.clone());
        }
        let collected: Delta = writes.iter().cloned().collect();
        let (first, second) = writes.split_at(120);
        let mut merged: Delta = first.iter().cloned().collect();
        merged.merge(&second.iter().cloned().collect());
        assert_eq!(inserted, collected);
        assert_eq!(inserted, merged);
        assert_eq!(inserted.len(), 101);
        let keys: Vec<&str> = inserted.iter().map(|(key, _)| key).collect();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]));
        // Each key keeps its greatest write.
        for (key, entry) in inserted.iter() {
            let greatest = writes
                .iter()
                .filter(|(written, _)| written == key)
                .map(|(_, entry)| entry)
                .max_by(|a, b| a.precedence(b));
            assert_eq!(Some(entry), greatest, "{key}");
            assert_eq!(inserted.get(key), Some(entry));
        }
        assert!(inserted.get("k999").is_none());
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

    /// Many small deltas with new keys grow the overlay past its fold point; the replica
    /// must keep matching a plain map that keeps the greatest entry per key.
    #[test]
    fn overlay_folds_keep_the_state() {
        let mut replica = Replica::new();
        let mut model: BTreeMap<String, Entry> = BTreeMap::new();
        let mut seed = 7u64;
        let mut next = move |bound: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % bound
        };
        for round in 0..400u64 {
            let mut delta = Delta::new();
            for _ in 0..1 + next(12) {
                let key = format!("k{:05}", next(3_000));
                let stamp = stamp(next(500), if next(2) == 0 { "alice" } else { "bob" });
                let entry = if next(5) == 0 {
                    Entry::tombstone(stamp)
                } else {
                    Entry::live(format!("v{round}"), stamp)
                };
                delta.insert(key, entry);
            }
            if round % 97 == 96 {
                let mut as_replica = Replica::new();
                as_replica.apply(&delta);
                replica.merge(&as_replica);
            } else {
                replica.apply(&delta);
            }
            for (key, entry) in delta.iter() {
                let slot = model.entry(key.to_owned()).or_insert_with(|| entry.clone());
                if entry.precedence(slot) == Ordering::Greater {
                    *slot = entry.clone();
                }
            }
            let ours: Vec<(&str, &Entry)> = replica.iter().collect();
            let expected: Vec<(&str, &Entry)> =
                model.iter().map(|(k, e)| (k.as_str(), e)).collect();
            assert_eq!(ours, expected, "round {round}");
        }
        assert!(
            replica.len() > 2 * OVERLAY_MIN,
            "the overlay must have folded at least once"
        );
    }

    #[test]
    fn insert_sorted_leaks_rather_than_double_drops_when_making_an_item_panics() {
        let mut run: Vec<String> = ["a", "c", "e", "g"].map(str::to_owned).to_vec();
        run.reserve_exact(3);
        let added = vec![(1, "b"), (2, "d"), (3, "f")];
        let mut made = 0;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            insert_sorted(&mut run, added, |text| {
                made += 1;
                assert!(made < 2, "second item refused");
                text.to_owned()
            });
        }));
        assert!(outcome.is_err());
        // Only the elements before the first insertion remain owned by the vector;
        // dropping it (and the owned strings it still holds) must not double free.
        assert_eq!(run, ["a"]);
        drop(run);
    }

    /// The backward insertion must place every item before the run element it names,
    /// in order, at the front, between elements, several at one index and at the end.
    #[test]
    fn insert_sorted_places_items_before_their_index() {
        // (run, items with the index they go before)
        type Case = (&'static [u32], &'static [(usize, u32)]);
        let cases: [Case; 5] = [
            (&[], &[(0, 1), (0, 2)]),
            (&[10, 20, 30], &[(0, 5)]),
            (&[10, 20, 30], &[(3, 35), (3, 40)]),
            (&[10, 20, 30], &[(0, 1), (1, 11), (1, 12), (2, 25), (3, 31)]),
            (&[10, 20, 30], &[]),
        ];
        for (run, added) in cases {
            let mut expected: Vec<u32> = run
                .iter()
                .chain(added.iter().map(|(_, v)| v))
                .copied()
                .collect();
            expected.sort_unstable();
            // Owned values, so that a double drop or a leak would show under Miri or ASan.
            // Without spare capacity (merged into a new buffer) and with (moved in place).
            for spare in [0, added.len()] {
                let mut ours: Vec<String> = run.iter().map(u32::to_string).collect();
                ours.reserve_exact(spare);
                let items = added.iter().map(|&(at, v)| (at, v.to_string())).collect();
                insert_sorted(&mut ours, items, std::convert::identity);
                let ours: Vec<u32> = ours.iter().map(|v| v.parse().unwrap()).collect();
                assert_eq!(ours, expected, "run {run:?} + {added:?}, spare {spare}");
            }
        }
    }

    /// Lookups find every key of a replica large enough for the multi-way search rounds,
    /// and miss keys between, before and after them, including long keys that share the
    /// inline prefix.
    #[test]
    fn lookups_find_present_keys_and_miss_absent_ones() {
        let long = "a-configuration-key-longer-than-the-inline-prefix";
        let mut delta = Delta::new();
        for i in 0..3_000u32 {
            delta.set(format!("k{:06}", i * 2), "v", stamp(1, "alice"));
            delta.set(format!("{long}.{:06}", i * 2), "w", stamp(1, "alice"));
        }
        let mut replica = Replica::new();
        replica.apply(&delta);
        let check = |replica: &Replica| {
            for i in 0..3_000u32 {
                assert_eq!(
                    replica
                        .get(&format!("k{:06}", i * 2))
                        .and_then(Entry::value),
                    Some("v")
                );
                assert_eq!(
                    replica
                        .get(&format!("{long}.{:06}", i * 2))
                        .and_then(Entry::value),
                    Some("w")
                );
                assert!(replica.get(&format!("k{:06}", i * 2 + 1)).is_none());
                assert!(replica.get(&format!("{long}.{:06}", i * 2 + 1)).is_none());
            }
            for absent in ["", "a", "k", "k0000001", "zzz", long] {
                assert!(replica.get(absent).is_none(), "{absent}");
            }
        };
        assert!(!replica.fenced);
        check(&replica);
        // A small delta searches, and so builds the fences; the long keys share their
        // inline prefix, so many fences are equal.
        let mut touch = Delta::new();
        touch.set("k000000", "v", stamp(1, "alice"));
        replica.apply(&touch);
        assert!(replica.fenced);
        check(&replica);
    }

    #[test]
    fn fenced_and_unfenced_lookups_agree_on_a_large_replica() {
        let long = "a-configuration-key-longer-than-the-inline-prefix";
        let key = |i: u32| {
            if i.is_multiple_of(3) {
                format!("{long}.{i:06}")
            } else {
                format!("k{i:06}")
            }
        };
        let base: Delta = (0..10_000u32)
            .map(|i| (key(i * 2), Entry::live("v", stamp(10, "alice"))))
            .collect();
        let mut fenced = Replica::new();
        fenced.apply(&base);
        fenced.apply(&Delta::new());
        assert!(fenced.fenced);
        let mut unfenced = fenced.clone();
        unfenced.fenced = false;
        // Present keys, absent keys, keys before the first and after the last.
        for round in 0..20u32 {
            let delta: Delta = (0..40u32)
                .map(|i| (i * 499 + round * 7) % 20_003)
                .map(|i| {
                    (
                        key(i),
                        Entry::live("w", stamp(20 + u64::from(round), "bob")),
                    )
                })
                .chain([
                    (String::new(), Entry::live("first", stamp(30, "bob"))),
                    ("zz".to_owned(), Entry::live("last", stamp(30, "bob"))),
                ])
                .collect();
            let looked_up = fenced.apply(&delta);
            let mut as_replica = Replica::new();
            as_replica.apply(&delta);
            // Merging a replica looks up too, but never builds fences.
            let unfenced_outcome = unfenced.merge(&as_replica);
            assert!(!unfenced.fenced);
            assert_eq!(looked_up.won, unfenced_outcome.won, "round {round}");
            assert_eq!(fenced, unfenced, "round {round}");
        }
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
