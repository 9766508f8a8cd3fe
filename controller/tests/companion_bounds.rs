//! The companion stays bounded over thousands of revisions that add and remove keys: the
//! production path (declare a revision from the previous state collected through the
//! recorded stable point, publish it to every region through `materialize::plan` with
//! the same compaction, record the new stable point once every region holds it), with
//! the sizes of the encoded companion. Without collection the same run grows with every
//! removed key, which is what shows the bound is collection's doing.
//!
//! `cargo test --release -p configrollout --test companion_bounds -- --nocapture` prints
//! the figures quoted in BENCHMARKS.md.

use std::collections::BTreeMap;

use configrollout::api::{DriftPolicy, RevisionStep};
use configrollout::crdt::{DigestKey, Stamp, WriterId, collection_point};
use configrollout::regions::materialize::{
    Compaction, CompanionView, MergeRequest, TargetView, plan,
};
use configrollout::regions::publication::RevisionState;

const REVISIONS: usize = 2_000;
const REGIONS: usize = 3;
const STABLE_KEYS: usize = 20;
const ROTATING_KEYS: usize = 10;

/// Revision `n`'s data: fixed keys whose values change, and a window of keys that moves
/// by one each revision (one key added, one removed).
fn desired(n: usize) -> BTreeMap<String, String> {
    let stable = (0..STABLE_KEYS).map(|k| (format!("stable-{k:02}"), format!("{n:032}")));
    let rotating = (n..n + ROTATING_KEYS).map(|k| (format!("rotating-{k:05}"), "on".repeat(16)));
    stable.chain(rotating).collect()
}

struct Run {
    /// Encoded companion size after each revision reached every region (region 0).
    sizes: Vec<usize>,
    /// Tombstones in region 0's replica after each revision.
    tombstones: Vec<usize>,
    /// Tombstones in the stored revision state after each revision.
    state_tombstones: Vec<usize>,
}

fn run(collect: bool) -> Run {
    let key = DigestKey::new(b"companion-bounds-digest-key").unwrap();
    let writer = WriterId::rollout("team", "limits").unwrap();
    let mut regions: Vec<(Option<TargetView>, Option<CompanionView>)> = vec![(None, None); REGIONS];
    let mut latest: Option<RevisionState> = None;
    let mut collected_through: Option<Stamp> = None;
    let mut run = Run {
        sizes: Vec::new(),
        tombstones: Vec::new(),
        state_tombstones: Vec::new(),
    };
    for n in 0..REVISIONS {
        let stamp = Stamp::new(1_000 + n as u64 * 10, 0, writer.clone());
        let mut previous = latest.clone();
        if let (Some(previous), Some(through)) = (&mut previous, &collected_through) {
            previous.collect_tombstones(through);
        }
        // Each revision completes before the next: its predecessor is the stable one.
        let revision = RevisionState::declare(
            &format!("r{}", n + 1),
            previous.as_ref(),
            previous.as_ref(),
            &desired(n),
            stamp,
        );
        let publication = revision.publication(RevisionStep::Single);
        for (index, (target, companion)) in regions.iter_mut().enumerate() {
            let request = MergeRequest {
                delta: &publication,
                drift_policy: &DriftPolicy::Report,
                adopt_stamp: None,
                compaction: Compaction {
                    through: collected_through.as_ref(),
                    rebase: Some(&writer),
                    keeping: None,
                },
                owner: Some(&writer),
            };
            let planned = plan(&key, target.as_ref(), companion.as_ref(), request).unwrap();
            assert_eq!(
                planned.target_data,
                desired(n),
                "region {index} holds revision {n}"
            );
            if index == 0 {
                run.sizes.push(planned.encoded_state.len());
                run.tombstones.push(planned.replica.tombstones());
            }
            *target = Some(TargetView {
                data: planned.target_data,
                digest: Some(planned.digest.clone()),
            });
            *companion = Some(CompanionView {
                state: Some(planned.encoded_state),
                digest: Some(planned.digest),
                mac: None,
            });
        }
        run.state_tombstones.push(revision.state.tombstones());
        // Complete in every region, and the only writer of its target.
        if collect {
            collected_through = collection_point(&revision.stamp, &[]);
        }
        latest = Some(revision);
    }
    run
}

#[test]
fn two_thousand_revisions_keep_the_companion_bounded() {
    let collected = run(true);
    let uncollected = run(false);
    let steady = collected.sizes[100];
    let largest = collected.sizes[100..].iter().copied().max().unwrap();
    println!(
        "{REVISIONS} revisions, {} live keys, one added and one removed per revision:",
        STABLE_KEYS + ROTATING_KEYS
    );
    println!(
        "  collected:   companion {} B after r1, {steady} B after r101, at most {largest} B after; \
         at most {} tombstones in a region, {} in the stored state",
        collected.sizes[0],
        collected.tombstones.iter().max().unwrap(),
        collected.state_tombstones.iter().max().unwrap(),
    );
    println!(
        "  uncollected: companion {} B after r101, {} B after r{REVISIONS}; {} tombstones",
        uncollected.sizes[100],
        uncollected.sizes[REVISIONS - 1],
        uncollected.tombstones[REVISIONS - 1],
    );
    // Each revision's removal is collected by the next one: never more than the keys the
    // last two revisions removed stay as tombstones, in a region or in the hub's state.
    assert!(collected.tombstones.iter().all(|&count| count <= 2));
    assert!(collected.state_tombstones.iter().all(|&count| count <= 2));
    assert!(largest <= steady + steady / 10, "{largest} vs {steady}");
    // Without collection the same run keeps every removed key.
    assert_eq!(uncollected.tombstones[REVISIONS - 1], REVISIONS - 1);
    assert!(uncollected.sizes[REVISIONS - 1] > 3 * steady);
}
