//! Properties of the CRDT core that the rollout relies on: merge is a join, replicas
//! converge whatever the delivery, collected tombstones never resurrect, the clock only
//! moves forward, rollbacks revert only their own writes, and the decoder survives hostile
//! input.

use std::collections::BTreeMap;

use configrollout::api::RevisionStep;
use configrollout::crdt::codec::FORMAT_VERSION;
use configrollout::crdt::{
    CodecError, Delta, DigestKey, Entry, Hlc, ManualClock, Replica, Stamp, WriterId,
    WriterProgress, collect_tombstones, collection_point, compensating_delta, declare_revision,
    decode, decode_delta, encode, encode_delta, override_delta, revision_digest, stable_point,
    stamp_above,
};
use configrollout::regions::publication::RevisionState;
use proptest::prelude::*;
use proptest::sample::Index;

const WRITERS: [&str; 4] = [
    "rollout:payments/api",
    "rollout:payments/web",
    "override:alice",
    "override:bob@example.com",
];

fn writer(index: usize) -> WriterId {
    WriterId::parse(WRITERS[index % WRITERS.len()]).unwrap()
}

fn rollout_writer() -> WriterId {
    writer(0)
}

fn digest_key() -> DigestKey {
    DigestKey::new(b"property-test-digest-key").unwrap()
}

fn any_stamp() -> impl Strategy<Value = Stamp> {
    (0u64..40, 0u32..3, 0..WRITERS.len())
        .prop_map(|(wall, logical, w)| Stamp::new(wall, logical, writer(w)))
}

fn any_key() -> impl Strategy<Value = String> {
    (0u32..24).prop_map(|k| format!("key-{k:02}"))
}

/// Values include quotes, backslashes, control characters and non-ASCII for the codec.
fn any_value() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        1 => Just(None),
        4 => "[a-c]{0,3}".prop_map(Some),
        1 => any::<String>().prop_map(Some),
    ]
}

/// Arbitrary entries, including two values under one stamp: merge must stay a join even
/// on input no correct writer produces.
fn any_delta() -> impl Strategy<Value = Delta> {
    prop::collection::vec((any_key(), any_value(), any_stamp()), 0..30).prop_map(|entries| {
        entries
            .into_iter()
            .map(|(key, value, stamp)| {
                (
                    key,
                    Entry {
                        value: value.map(Into::into),
                        stamp,
                    },
                )
            })
            .collect()
    })
}

fn any_replica() -> impl Strategy<Value = Replica> {
    prop::collection::vec(any_delta(), 0..3).prop_map(|deltas| {
        let mut replica = Replica::new();
        for delta in &deltas {
            replica.apply(delta);
        }
        replica
    })
}

fn merged(left: &Replica, right: &Replica) -> Replica {
    let mut out = left.clone();
    out.merge(right);
    out
}

/// Deltas as correct writers make them: every delta has its own stamp, so equal stamps
/// always carry equal values.
fn well_stamped_deltas(max: usize) -> impl Strategy<Value = Vec<Delta>> {
    prop::collection::vec(
        (
            0u64..30,
            0..WRITERS.len(),
            prop::collection::btree_map(any_key(), any_value(), 1..8),
        ),
        1..max,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(sequence, (wall, w, changes))| {
                let stamp = Stamp::new(wall, sequence as u32, writer(w));
                changes
                    .into_iter()
                    .map(|(key, value)| {
                        let entry = Entry {
                            value: value.map(Into::into),
                            stamp: stamp.clone(),
                        };
                        (key, entry)
                    })
                    .collect()
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn merge_is_commutative(a in any_replica(), b in any_replica()) {
        prop_assert_eq!(merged(&a, &b), merged(&b, &a));
    }

    #[test]
    fn merge_is_associative(a in any_replica(), b in any_replica(), c in any_replica()) {
        prop_assert_eq!(merged(&merged(&a, &b), &c), merged(&a, &merged(&b, &c)));
    }

    #[test]
    fn merge_is_idempotent(a in any_replica(), b in any_replica()) {
        prop_assert_eq!(merged(&a, &a), a.clone());
        let once = merged(&a, &b);
        prop_assert_eq!(merged(&once, &b), once.clone());
    }

    #[test]
    fn applying_a_delta_equals_merging_it_as_a_replica(a in any_replica(), d in any_delta()) {
        let mut by_apply = a.clone();
        let first = by_apply.apply(&d);
        let mut as_replica = Replica::new();
        as_replica.apply(&d);
        prop_assert_eq!(&by_apply, &merged(&a, &as_replica));
        prop_assert_eq!(first.won + first.lost + first.unchanged, d.len());
        let settled = by_apply.clone();
        let again = by_apply.apply(&d);
        prop_assert!(again.is_noop());
        prop_assert_eq!(again.won, 0);
        prop_assert_eq!(again.lost + again.unchanged, d.len());
        prop_assert_eq!(by_apply, settled);
    }

    /// Replicas fed the same deltas in different orders, with duplicates and drops, then
    /// repaired by full-state anti-entropy, end identical, with identical digests, and
    /// equal to applying every delta once.
    #[test]
    fn replicas_converge_whatever_the_delivery(
        deltas in well_stamped_deltas(12),
        replicas in 2usize..5,
        deliveries in prop::collection::vec((any::<Index>(), any::<Index>()), 0..60),
        owners in prop::collection::vec(any::<Index>(), 12),
        gossip in prop::collection::vec((any::<Index>(), any::<Index>()), 0..10),
    ) {
        let mut reference = Replica::new();
        for delta in &deltas {
            reference.apply(delta);
        }
        let mut regions = vec![Replica::new(); replicas];
        for (region, delta) in &deliveries {
            regions[region.index(replicas)].apply(&deltas[delta.index(deltas.len())]);
        }
        // Every delta reached at least one replica; the rest were dropped somewhere.
        for (delta, owner) in deltas.iter().zip(&owners) {
            regions[owner.index(replicas)].apply(delta);
        }
        for (into, from) in &gossip {
            let source = regions[from.index(replicas)].clone();
            regions[into.index(replicas)].merge(&source);
        }
        for into in 0..replicas {
            for from in 0..replicas {
                let source = regions[from].clone();
                regions[into].merge(&source);
            }
        }
        let digest = revision_digest(&digest_key(), &reference);
        for region in &regions {
            prop_assert_eq!(region, &reference);
            prop_assert_eq!(revision_digest(&digest_key(), region), digest.clone());
        }
    }

    #[test]
    fn digest_ignores_stamps_and_tombstones(deltas in well_stamped_deltas(8)) {
        let mut replica = Replica::new();
        for delta in &deltas {
            replica.apply(delta);
        }
        let live: BTreeMap<String, String> = replica
            .live_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let restamped = declare_revision(
            &BTreeMap::new(),
            &live,
            Stamp::new(1_000, 0, rollout_writer()),
        );
        let mut fresh = Replica::new();
        fresh.apply(&restamped);
        prop_assert_eq!(
            revision_digest(&digest_key(), &fresh),
            revision_digest(&digest_key(), &replica)
        );
    }
}

/// One step of the compaction scenario.
#[derive(Debug, Clone)]
enum Step {
    /// The region receives the next revision it has not merged (the engine publishes in
    /// order).
    Publish(Index),
    /// Full-state anti-entropy from one participant into a region.
    AntiEntropy { into: Index, from: Index },
    /// A region collects its tombstones at the stable point of every participant.
    Collect(Index),
    /// A copy of a region is kept aside (a cache, a backup) to be merged later; it is a
    /// participant, so its frontier counts.
    Snapshot(Index),
}

fn any_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => any::<Index>().prop_map(Step::Publish),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(into, from)| Step::AntiEntropy { into, from }),
        3 => any::<Index>().prop_map(Step::Collect),
        1 => any::<Index>().prop_map(Step::Snapshot),
    ]
}

/// Revisions of one rollout: each a full desired map over a small key space, so keys come
/// and go and tombstones are common.
fn desired_history() -> impl Strategy<Value = Vec<BTreeMap<String, String>>> {
    prop::collection::vec(
        prop::collection::btree_map(
            (0u32..8).prop_map(|k| format!("key-{k}")),
            "[a-d]{1,2}",
            0..6,
        ),
        1..10,
    )
}

/// The revisions' deltas (each against the previous desired state), stamped by one clock.
fn revision_deltas(history: &[BTreeMap<String, String>]) -> Vec<Delta> {
    let clock = ManualClock::new(1_000);
    let mut hlc = Hlc::with_clock(rollout_writer(), 60_000, clock.clone());
    let mut previous = BTreeMap::new();
    history
        .iter()
        .map(|desired| {
            clock.advance(7);
            let delta = declare_revision(&previous, desired, hlc.now());
            previous = desired.clone();
            delta
        })
        .collect()
}

fn replica_of(deltas: &[Delta]) -> Replica {
    let mut replica = Replica::new();
    for delta in deltas {
        replica.apply(delta);
    }
    replica
}

/// How many revisions a replica has merged, read from its frontier.
fn merged_prefix(replica: &Replica, deltas: &[Delta]) -> usize {
    match replica.frontier_of(&rollout_writer()) {
        None => deltas.iter().take_while(|delta| delta.is_empty()).count(),
        Some(frontier) => deltas
            .iter()
            .take_while(|delta| delta.max_stamp().is_none_or(|stamp| stamp <= frontier))
            .count(),
    }
}

proptest! {
    /// Tombstones collected at the stable point of the regions' frontiers never let a
    /// deleted key come back, whatever stale replica is merged afterwards: at every step
    /// each region shows exactly the live state of the revisions it has merged.
    #[test]
    fn collected_keys_never_come_back(
        history in desired_history(),
        regions in 2usize..4,
        steps in prop::collection::vec(any_step(), 0..60),
    ) {
        let deltas = revision_deltas(&history);
        let mut participants: Vec<Replica> = vec![Replica::new(); regions];
        let check = |participants: &[Replica]| -> Result<(), TestCaseError> {
            for replica in participants {
                let prefix = merged_prefix(replica, &deltas);
                let expected = replica_of(&deltas[..prefix]);
                prop_assert_eq!(replica.live(), expected.live());
            }
            Ok(())
        };
        for step in &steps {
            match step {
                Step::Publish(region) => {
                    let region = region.index(regions);
                    let next = merged_prefix(&participants[region], &deltas);
                    if let Some(delta) = deltas.get(next) {
                        participants[region].apply(delta);
                    }
                }
                Step::AntiEntropy { into, from } => {
                    let source = participants[from.index(participants.len())].clone();
                    participants[into.index(regions)].merge(&source);
                }
                Step::Collect(region) => {
                    let frontiers: Vec<Option<Stamp>> = participants
                        .iter()
                        .map(|p| p.frontier_of(&rollout_writer()).cloned())
                        .collect();
                    if let Some(stable) = stable_point(&frontiers) {
                        collect_tombstones(&mut participants[region.index(regions)], &stable);
                    }
                }
                Step::Snapshot(region) => {
                    let copy = participants[region.index(regions)].clone();
                    participants.push(copy);
                }
            }
            check(&participants)?;
        }
        // Finish the rollout everywhere; bring every participant, stale copies included,
        // up to date by anti-entropy; then everything is stable and every tombstone goes.
        for region in participants.iter_mut().take(regions) {
            for delta in &deltas[merged_prefix(region, &deltas)..] {
                region.apply(delta);
            }
        }
        for _ in 0..2 {
            for into in 0..participants.len() {
                for from in 0..regions {
                    let source = participants[from].clone();
                    participants[into].merge(&source);
                }
            }
        }
        let frontiers: Vec<Option<Stamp>> = participants
            .iter()
            .map(|p| p.frontier_of(&rollout_writer()).cloned())
            .collect();
        let stable = stable_point(&frontiers);
        let last_desired = history.last().cloned().unwrap_or_default();
        for region in participants.iter_mut().take(regions) {
            if let Some(stable) = &stable {
                collect_tombstones(region, stable);
            }
            prop_assert_eq!(region.tombstones(), 0);
            let live: BTreeMap<String, String> = region
                .live_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            prop_assert_eq!(&live, &last_desired);
        }
    }
}

#[derive(Debug, Clone)]
enum ClockStep {
    Now,
    Tick(u64),
    SetBack(u64),
    ObserveWithin {
        ahead_ms: u64,
        logical: u32,
        writer: usize,
    },
    ObserveBeyond {
        beyond_ms: u64,
        logical: u32,
    },
}

fn any_clock_step() -> impl Strategy<Value = ClockStep> {
    prop_oneof![
        4 => Just(ClockStep::Now),
        2 => (0u64..5).prop_map(ClockStep::Tick),
        1 => (0u64..50).prop_map(ClockStep::SetBack),
        2 => (0u64..=100, any::<u32>(), 0..WRITERS.len())
            .prop_map(|(ahead_ms, logical, writer)| ClockStep::ObserveWithin { ahead_ms, logical, writer }),
        1 => (1u64..1_000, any::<u32>()).prop_map(|(beyond_ms, logical)| ClockStep::ObserveBeyond { beyond_ms, logical }),
    ]
}

proptest! {
    /// Stamps from one clock strictly increase, each is after every stamp it observed, and
    /// a stamp beyond the drift bound is refused without moving the clock.
    #[test]
    fn hlc_stamps_only_move_forward(steps in prop::collection::vec(any_clock_step(), 1..80)) {
        const DRIFT: u64 = 100;
        let clock = ManualClock::new(10_000);
        let mut hlc = Hlc::with_clock(writer(0), DRIFT, clock.clone());
        let mut last: Option<Stamp> = None;
        for step in steps {
            let issued = match step {
                ClockStep::Now => Some(hlc.now()),
                ClockStep::Tick(ms) => { clock.advance(ms); None }
                ClockStep::SetBack(ms) => { clock.set(clock_now(&clock).saturating_sub(ms)); None }
                ClockStep::ObserveWithin { ahead_ms, logical, writer: w } => {
                    let remote = Stamp::new(clock_now(&clock) + ahead_ms, logical, writer(w));
                    let stamp = hlc.observe(&remote).unwrap();
                    prop_assert!(stamp > remote);
                    Some(stamp)
                }
                ClockStep::ObserveBeyond { beyond_ms, logical } => {
                    let remote = Stamp::new(clock_now(&clock) + DRIFT + beyond_ms, logical, writer(2));
                    let untouched = hlc.clone();
                    prop_assert!(hlc.observe(&remote).is_err());
                    prop_assert_eq!(hlc.clone().now(), untouched.clone().now());
                    None
                }
            };
            if let Some(stamp) = issued {
                if let Some(previous) = &last {
                    prop_assert!(stamp > *previous, "{} after {}", stamp, previous);
                }
                prop_assert_eq!(&stamp.writer, &writer(0));
                last = Some(stamp);
            }
        }
    }
}

fn clock_now(clock: &ManualClock) -> u64 {
    use configrollout::crdt::PhysicalClock;
    clock.now_ms()
}

proptest! {
    /// Two values under one stamp never survive decoding, and merging them is
    /// deterministic whatever the order.
    #[test]
    fn equal_stamps_with_two_values_are_refused_and_merge_deterministically(
        key in any_key(),
        stamp in any_stamp(),
        first in "[a-z]{1,4}",
        second in "[a-z]{1,4}",
    ) {
        prop_assume!(first != second);
        let text = format!(
            "{{\"v\":{FORMAT_VERSION},\"writers\":[\"{w}\"],\"frontiers\":[[{wall},{logical}]],\"stamps\":[[{wall},{logical},0]],\"entries\":[[\"{key}\",\"{first}\",0],[\"{key}\",\"{second}\",0]]}}",
            w = stamp.writer,
            wall = stamp.wall_ms,
            logical = stamp.logical,
        );
        let is_conflict = matches!(decode(&text), Err(CodecError::StampConflict { .. }));
        prop_assert!(is_conflict);

        let one = |value: &str| {
            let mut replica = Replica::new();
            replica.apply(&[(key.clone(), Entry::live(value, stamp.clone()))].into_iter().collect());
            replica
        };
        let (a, b) = (one(&first), one(&second));
        let ab = merged(&a, &b);
        prop_assert_eq!(&ab, &merged(&b, &a));
        let winner = first.clone().max(second.clone());
        prop_assert_eq!(ab.get(&key).and_then(Entry::value), Some(winner.as_str()));
    }

    /// A rollback's compensation never touches a key whose winner is someone else's write,
    /// and restores the previous value (or absence) wherever the revision still wins.
    #[test]
    fn compensation_reverts_only_the_revisions_own_writes(
        previous in prop::collection::btree_map(any_key(), "[a-c]{1,2}", 0..10),
        desired in prop::collection::btree_map(any_key(), "[a-c]{1,2}", 0..10),
        later in prop::collection::vec((any_key(), any_value(), 0..WRITERS.len(), -3i64..4), 0..8),
    ) {
        let rollout = rollout_writer();
        let base = declare_revision(&BTreeMap::new(), &previous, Stamp::new(5, 0, rollout.clone()));
        let revision = declare_revision(&previous, &desired, Stamp::new(10, 0, rollout.clone()));
        let mut replica = replica_of(&[base, revision.clone()]);
        // Other writes around the revision's time: some after it (they win), some before
        // (they lose), from other writers.
        for (index, (key, value, w, offset)) in later.into_iter().enumerate() {
            let stamp = Stamp::new((10 + offset) as u64, index as u32 + 1, writer(1 + w % 3));
            let mut delta = Delta::new();
            delta.insert(key, Entry { value: value.map(Into::into), stamp });
            replica.apply(&delta);
        }
        let before = replica.clone();
        let compensation =
            compensating_delta(&replica, &revision, &previous, Stamp::new(20, 0, rollout)).unwrap();
        replica.apply(&compensation);
        for (key, written) in revision.iter() {
            let still_ours = before.get(key) == Some(written);
            prop_assert_eq!(compensation.get(key).is_some(), still_ours);
            if still_ours {
                prop_assert_eq!(
                    replica.get(key).and_then(Entry::value),
                    previous.get(key).map(String::as_str)
                );
            } else {
                prop_assert_eq!(replica.get(key), before.get(key));
            }
        }
        for (key, _) in compensation.iter() {
            prop_assert!(revision.get(key).is_some());
        }
    }

    /// An override written after a revision beats it; a revision declared after the
    /// override (the engine observed the region first) beats the override, whatever order
    /// the three deltas reach the region in and however the two clocks are skewed.
    #[test]
    fn overrides_and_later_revisions_win_by_declaration_order(
        skew in -500i64..500,
        order in Just(vec![0usize, 1, 2]).prop_shuffle(),
        r1 in prop::collection::btree_map(any_key(), "[a-c]{1,2}", 1..6),
        overridden in prop::collection::btree_map(any_key(), "[x-z]{1,2}", 1..4),
        r2_keys in prop::collection::btree_set(any_key(), 0..6),
    ) {
        let controller_clock = ManualClock::new(1_000_000);
        let plugin_clock = ManualClock::new((1_000_000 + skew) as u64);
        let mut controller = Hlc::with_clock(rollout_writer(), 1_000, controller_clock.clone());
        let mut plugin =
            Hlc::with_clock(WriterId::override_by("alice").unwrap(), 1_000, plugin_clock.clone());

        let first = declare_revision(&BTreeMap::new(), &r1, controller.now());
        // The plugin reads the region (which has the first revision) before writing.
        let region_frontier = first.max_stamp().cloned().unwrap();
        plugin.observe(&region_frontier).unwrap();
        let over = override_delta(
            plugin.now(),
            overridden.iter().map(|(k, v)| (k.as_str(), Some(v.as_str()))),
        )
        .unwrap();
        // The engine reads the region (override included) before declaring.
        controller.observe(over.max_stamp().unwrap()).unwrap();
        let mut r2 = r1.clone();
        for key in &r2_keys {
            r2.insert(key.clone(), "r2".to_owned());
        }
        let second = declare_revision(&r1, &r2, controller.now());

        let deltas = [first, over, second];
        let mut region = Replica::new();
        for index in order {
            region.apply(&deltas[index]);
        }
        for key in &r2_keys {
            prop_assert_eq!(region.get(key).and_then(Entry::value), Some("r2"));
        }
        for (key, value) in &overridden {
            if !r2_keys.contains(key) {
                prop_assert_eq!(region.get(key).and_then(Entry::value), Some(value.as_str()));
            }
        }
    }

    /// decode(encode(x)) == x, and equal states encode to the same bytes.
    #[test]
    fn codec_round_trips_canonically(a in any_replica(), b in any_replica()) {
        let text = encode(&a).unwrap();
        let back = decode(&text).unwrap();
        prop_assert_eq!(&back, &a);
        prop_assert_eq!(encode(&back).unwrap(), text);
        prop_assert_eq!(encode(&merged(&a, &b)).unwrap(), encode(&merged(&b, &a)).unwrap());
    }

    #[test]
    fn delta_codec_round_trips(deltas in well_stamped_deltas(4)) {
        for delta in &deltas {
            let text = encode_delta(delta).unwrap();
            prop_assert_eq!(&decode_delta(&text).unwrap(), delta);
        }
    }

    /// The decoder never panics on arbitrary text.
    #[test]
    fn decoder_survives_arbitrary_text(text in any::<String>()) {
        let _ = decode(&text);
        let _ = decode_delta(&text);
    }

    /// ... nor on arbitrary bytes read as text.
    #[test]
    fn decoder_survives_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = decode(&text);
        let _ = decode_delta(&text);
    }

    /// ... nor on near-valid documents (the interesting hostile input), and whatever it
    /// accepts is a valid state that re-encodes canonically.
    #[test]
    fn decoder_survives_mutated_documents(
        replica in any_replica(),
        edits in prop::collection::vec((any::<Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut bytes = encode(&replica).unwrap().into_bytes();
        for (at, byte, kind) in edits {
            if bytes.is_empty() {
                break;
            }
            let at = at.index(bytes.len());
            match kind {
                0 => bytes[at] = byte,
                1 => bytes.insert(at, byte),
                _ => { bytes.remove(at); }
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(decoded) = decode(&text) {
            let again = encode(&decoded).unwrap();
            prop_assert_eq!(decode(&again).unwrap(), decoded);
        }
    }
}

/// One step of the several-writers scenario: rollouts on one target, published the way
/// the controller publishes (each revision's publication is the rollout's whole state),
/// in any order, late and twice, beside people's overrides, with collection whenever a
/// rollout finds itself caught up.
#[derive(Debug, Clone)]
enum SharedStep {
    /// A rollout declares a revision with this desired data.
    Declare(Index, BTreeMap<String, String>),
    /// A region receives one of a rollout's revisions (usually the latest; an older one is
    /// a late or repeated delivery).
    Publish {
        rollout: Index,
        region: Index,
        late: Option<Index>,
    },
    /// A person overrides a key in one region, from a clock `behind` ms slow.
    Override {
        region: Index,
        key: u32,
        value: Option<String>,
        behind: u64,
    },
    /// A rollout that every region holds proposes its point; the other rollouts' progress
    /// lowers it; it is recorded.
    Complete(Index),
    /// A rollout's next write to a region collects through its recorded point.
    CollectIn { rollout: Index, region: Index },
}

fn shared_key() -> impl Strategy<Value = String> {
    (0u32..6).prop_map(|k| format!("key-{k}"))
}

fn any_shared_step() -> impl Strategy<Value = SharedStep> {
    prop_oneof![
        2 => (any::<Index>(), prop::collection::btree_map(shared_key(), "[a-c]", 0..5))
            .prop_map(|(rollout, desired)| SharedStep::Declare(rollout, desired)),
        5 => (any::<Index>(), any::<Index>(), prop::option::weighted(0.3, any::<Index>()))
            .prop_map(|(rollout, region, late)| SharedStep::Publish { rollout, region, late }),
        1 => (any::<Index>(), 0u32..6, prop::option::of("[x-z]"), 0u64..50)
            .prop_map(|(region, key, value, behind)| SharedStep::Override { region, key, value, behind }),
        2 => any::<Index>().prop_map(SharedStep::Complete),
        2 => (any::<Index>(), any::<Index>())
            .prop_map(|(rollout, region)| SharedStep::CollectIn { rollout, region }),
    ]
}

/// A rollout as the controller keeps it: its revisions and its recorded stable point.
struct SharedRollout {
    writer: WriterId,
    revisions: Vec<RevisionState>,
    collected_through: Option<Stamp>,
}

impl SharedRollout {
    /// Whether `region` holds revision `index`, as the controller reads it.
    fn holds(&self, region: &Replica, index: usize) -> bool {
        configrollout::regions::publication::evidence(
            region,
            &self.revisions[index],
            false,
            u64::MAX,
        )
        .applied
        .is_some()
    }

    /// Its progress as another writer sees it: caught up when every region holds its
    /// latest revision, else the oldest of the newest revisions each region holds.
    fn progress(&self, regions: &[Replica]) -> WriterProgress {
        let Some(latest) = self.revisions.len().checked_sub(1) else {
            return WriterProgress::CaughtUp;
        };
        if regions.iter().all(|region| self.holds(region, latest)) {
            return WriterProgress::CaughtUp;
        }
        let held = regions
            .iter()
            .map(|region| {
                (0..self.revisions.len())
                    .rev()
                    .find(|&index| self.holds(region, index))
                    .map(|index| self.revisions[index].stamp.clone())
            })
            .collect::<Option<Vec<Stamp>>>()
            .and_then(|stamps| stamps.into_iter().min());
        WriterProgress::Behind { held }
    }
}

/// What the rollout `index` reads of every other rollout of the target.
fn progress_of_others(
    writers: &[SharedRollout],
    index: usize,
    regions: &[Replica],
) -> Vec<WriterProgress> {
    writers
        .iter()
        .enumerate()
        .filter(|(other, _)| *other != index)
        .map(|(_, other)| other.progress(regions))
        .collect()
}

fn live_owned(replica: &Replica) -> BTreeMap<String, String> {
    replica
        .live_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

proptest! {
    /// Several rollouts and people write one target. Whatever the delivery order, late and
    /// repeated deliveries and when collection happens, collecting is invisible: every
    /// region always shows the live state of the writes it was sent, as a replica that
    /// never collected would, and once everything is delivered every region shows the
    /// last-writer-wins state of every write ever made. With no override, every tombstone
    /// is gone at the end.
    #[test]
    fn collection_with_several_writers_is_invisible(
        rollouts in 2usize..4,
        regions in 2usize..4,
        steps in prop::collection::vec(any_shared_step(), 0..80),
    ) {
        let clock = ManualClock::new(1_000);
        let mut hlc = Hlc::with_clock(rollout_writer(), 60_000, clock.clone());
        let mut writers: Vec<SharedRollout> = (0..rollouts)
            .map(|index| SharedRollout {
                writer: WriterId::rollout("team", &format!("r{index}")).unwrap(),
                revisions: Vec::new(),
                collected_through: None,
            })
            .collect();
        let mut replicas = vec![Replica::new(); regions];
        // What each region would hold had nothing ever been collected.
        let mut uncollected = vec![Replica::new(); regions];
        // Every write ever made: all rollouts' own writes, and each region's overrides.
        let mut every_rollout_write = Replica::new();
        let mut overrides = vec![Replica::new(); regions];
        let mut any_override = false;

        for step in &steps {
            clock.advance(3);
            match step {
                SharedStep::Declare(rollout, desired) => {
                    let rollout = &mut writers[rollout.index(rollouts)];
                    let stamp = hlc.now();
                    let stamp = Stamp::new(stamp.wall_ms, stamp.logical, rollout.writer.clone());
                    let mut previous = rollout.revisions.last().cloned();
                    if let (Some(previous), Some(through)) = (&mut previous, &rollout.collected_through) {
                        previous.collect_tombstones(through);
                    }
                    let name = format!("r{}", rollout.revisions.len() + 1);
                    // Each revision here completes before the next: its predecessor is the
                    // stable one, so nothing is re-stamped that did not change.
                    let revision = RevisionState::declare(
                        &name,
                        previous.as_ref(),
                        previous.as_ref(),
                        desired,
                        stamp,
                    );
                    every_rollout_write.apply(&revision.own_delta());
                    rollout.revisions.push(revision);
                }
                SharedStep::Publish { rollout, region, late } => {
                    let rollout = &writers[rollout.index(rollouts)];
                    let Some(latest) = rollout.revisions.len().checked_sub(1) else { continue };
                    let index = late.map_or(latest, |late| late.index(latest + 1));
                    let publication = rollout.revisions[index].publication(RevisionStep::Single);
                    let region = region.index(regions);
                    replicas[region].apply(&publication);
                    if let Some(through) = &rollout.collected_through {
                        collect_tombstones(&mut replicas[region], through);
                    }
                    uncollected[region].apply(&publication);
                }
                SharedStep::Override { region, key, value, behind } => {
                    let region = region.index(regions);
                    let wall = hlc.now().wall_ms.saturating_sub(*behind);
                    let stamp = stamp_above(&replicas[region], wall, writer(2));
                    let key = format!("key-{key}");
                    let delta = override_delta(stamp, [(key, value.clone())]).unwrap();
                    replicas[region].apply(&delta);
                    uncollected[region].apply(&delta);
                    overrides[region].apply(&delta);
                    any_override = true;
                }
                SharedStep::Complete(rollout) => {
                    let index = rollout.index(rollouts);
                    let Some(latest) = writers[index].revisions.len().checked_sub(1) else { continue };
                    if !replicas.iter().all(|region| writers[index].holds(region, latest)) {
                        continue;
                    }
                    let others = progress_of_others(&writers, index, &replicas);
                    let own = writers[index].revisions[latest].stamp.clone();
                    if let Some(point) = collection_point(&own, &others) {
                        let recorded = &mut writers[index].collected_through;
                        if recorded.as_ref().is_none_or(|recorded| *recorded < point) {
                            *recorded = Some(point);
                        }
                    }
                }
                SharedStep::CollectIn { rollout, region } => {
                    if let Some(through) = &writers[rollout.index(rollouts)].collected_through {
                        collect_tombstones(&mut replicas[region.index(regions)], through);
                    }
                }
            }
            for (region, replica) in replicas.iter().enumerate() {
                prop_assert_eq!(replica.live(), uncollected[region].live(), "region {}", region);
            }
        }

        // Deliver every rollout's latest revision everywhere, twice, then let each find
        // itself caught up and collect.
        for _ in 0..2 {
            for rollout in &writers {
                let Some(latest) = rollout.revisions.last() else { continue };
                for region in &mut replicas {
                    region.apply(&latest.publication(RevisionStep::Single));
                    if let Some(through) = &rollout.collected_through {
                        collect_tombstones(region, through);
                    }
                }
            }
        }
        for index in 0..rollouts {
            let Some(latest) = writers[index].revisions.last() else { continue };
            let others = progress_of_others(&writers, index, &replicas);
            prop_assert!(others.iter().all(|other| *other == WriterProgress::CaughtUp));
            let point = collection_point(&latest.stamp, &others);
            prop_assert_eq!(point.as_ref(), Some(&latest.stamp));
            for region in &mut replicas {
                collect_tombstones(region, &latest.stamp);
            }
        }
        for (region, replica) in replicas.iter().enumerate() {
            let mut expected = every_rollout_write.clone();
            expected.merge(&overrides[region]);
            prop_assert_eq!(live_owned(replica), live_owned(&expected), "region {}", region);
            if !any_override {
                prop_assert_eq!(replica.tombstones(), 0, "region {}", region);
            }
        }
    }
}

/// Stamps at the ends of their ranges: what a hostile companion or stored revision can
/// carry once the decoder has accepted it.
fn extreme_stamp() -> impl Strategy<Value = Stamp> {
    (
        prop::sample::select(vec![0u64, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX]),
        prop::sample::select(vec![0u32, 1, u32::MAX - 1, u32::MAX]),
        0..WRITERS.len(),
    )
        .prop_map(|(wall, logical, w)| Stamp::new(wall, logical, writer(w)))
}

fn extreme_delta() -> impl Strategy<Value = Delta> {
    prop::collection::vec((any_key(), any_value(), extreme_stamp()), 0..12).prop_map(|entries| {
        entries
            .into_iter()
            .map(|(key, value, stamp)| {
                let entry = Entry {
                    value: value.map(Into::into),
                    stamp,
                };
                (key, entry)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(support_cases()))]

    /// A replica or delta with stamps at the ends of their ranges survives the codec and
    /// every operation the controller runs on what it decoded (merge, a clock observing
    /// its stamps, stamping above it, rollback, collection, digest) without a panic; the
    /// clock refuses what is too far ahead rather than jumping to it.
    #[test]
    fn decoded_stamps_at_the_ends_of_their_ranges_never_panic(
        deltas in prop::collection::vec(extreme_delta(), 1..4),
        local_ms in prop::sample::select(vec![0u64, 1_700_000_000_000]),
    ) {
        let mut replica = Replica::new();
        for delta in &deltas {
            let text = encode_delta(delta).unwrap();
            let Ok(decoded) = decode_delta(&text) else { continue };
            replica.apply(&decoded);
        }
        let text = encode(&replica).unwrap();
        let decoded = decode(&text).unwrap();
        let mut merged_into = Replica::new();
        merged_into.merge(&decoded);
        prop_assert_eq!(&merged_into, &decoded);

        let clock = ManualClock::new(local_ms);
        let mut hlc = Hlc::with_clock(rollout_writer(), 60_000, clock);
        for (_, entry) in decoded.iter() {
            match hlc.observe(&entry.stamp) {
                Ok(after) => prop_assert!(after >= entry.stamp),
                Err(_) => prop_assert!(entry.stamp.wall_ms > local_ms.saturating_add(60_000)),
            }
        }
        let fresh = stamp_above(&decoded, local_ms, rollout_writer());
        let ceiling = decoded.frontier().into_iter().chain(decoded.horizon()).max();
        if let Some(ceiling) = ceiling.filter(|ceiling| ceiling.wall_ms < u64::MAX) {
            prop_assert!(fresh > *ceiling, "{:?} not above {:?}", fresh, ceiling);
        }
        if let Some(revision) = deltas.first() {
            let _ = compensating_delta(&decoded, revision, &BTreeMap::new(), fresh.clone());
        }
        if let Some(point) = stable_point(&[decoded.frontier().cloned()]) {
            let mut collected = decoded.clone();
            collect_tombstones(&mut collected, &point);
        }
        let _ = revision_digest(&digest_key(), &decoded);
    }
}

fn support_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256)
}
