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

/// Many small deltas with new keys, inserted all over the replica; it must keep
/// matching a plain map that keeps the greatest entry per key.
#[test]
fn many_small_deltas_keep_the_state() {
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
        let expected: Vec<(&str, &Entry)> = model.iter().map(|(k, e)| (k.as_str(), e)).collect();
        assert_eq!(ours, expected, "round {round}");
    }
    assert!(replica.len() > 512, "the replica must have grown large");
}

/// The insertion must place every item before the run element it names, in order, at
/// the front, between elements, several at one index and at the end.
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
        let mut ours: Vec<String> = run.iter().map(u32::to_string).collect();
        let items = added.iter().map(|&(at, v)| (at, v.to_string())).collect();
        insert_sorted(&mut ours, items);
        let ours: Vec<u32> = ours.iter().map(|v| v.parse().unwrap()).collect();
        assert_eq!(ours, expected, "run {run:?} + {added:?}");
    }
}

/// Lookups find every key of a large replica and miss keys between, before and after
/// them, including long keys that share their first 32 bytes.
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
    check(&replica);
    let mut touch = Delta::new();
    touch.set("k000000", "v", stamp(1, "alice"));
    replica.apply(&touch);
    check(&replica);
}

/// Applying a delta and merging it as a replica agree on a large replica, for present
/// and absent keys, keys before the first and after the last.
#[test]
fn apply_and_merge_agree_on_a_large_replica() {
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
    let mut applied = Replica::new();
    applied.apply(&base);
    let mut merged = applied.clone();
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
        let by_apply = applied.apply(&delta);
        let mut as_replica = Replica::new();
        as_replica.apply(&delta);
        let by_merge = merged.merge(&as_replica);
        assert_eq!(by_apply.won, by_merge.won, "round {round}");
        assert_eq!(applied, merged, "round {round}");
    }
}

#[test]
fn merging_either_way_agrees_with_applying() {
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
    // Merging the big one into the small one inserts most of it; the other way
    // updates a few keys in place.
    small_replica.merge(&big);
    assert_eq!(by_lookup, small_replica);
}
