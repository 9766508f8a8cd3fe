//! The deltas the rollout engine publishes: revisions, their expand/contract halves,
//! rollbacks and overrides.

use std::collections::BTreeMap;

use super::{Delta, Entry, Replica, RevisionError, Stamp, WriterKind};

/// The delta that takes `previous_desired` to `desired`, all under `stamp`: changed and new
/// keys set, removed keys tombstoned, unchanged keys absent.
pub fn declare_revision(
    previous_desired: &BTreeMap<String, String>,
    desired: &BTreeMap<String, String>,
    stamp: Stamp,
) -> Delta {
    let changed = desired
        .iter()
        .filter(|(key, value)| previous_desired.get(*key) != Some(*value))
        .map(|(key, value)| (key.as_str(), Entry::live(value.as_str(), stamp.clone())));
    let removed = previous_desired
        .keys()
        .filter(|key| !desired.contains_key(*key))
        .map(|key| (key.as_str(), Entry::tombstone(stamp.clone())));
    // Collected, so the two key-ordered runs are sorted together once.
    changed.chain(removed).collect()
}

/// Splits a revision into its expand half (new and changed keys) and its contract half
/// (removals), published in that order when expand/contract is on, so consumers never see
/// a key vanish before every region serves the keys that replace it.
pub fn split_expand_contract(delta: &Delta) -> (Delta, Delta) {
    let mut expand = Delta::new();
    let mut contract = Delta::new();
    for (key, entry) in delta.iter() {
        let half = if entry.is_tombstone() {
            &mut contract
        } else {
            &mut expand
        };
        half.insert(key, entry.clone());
    }
    (expand, contract)
}

/// The delta that undoes `revision` in `replica`, stamped `fresh`: for each key whose
/// winning entry is still exactly the revision's write, the `previous` value (or a
/// tombstone if the key did not exist before). Keys someone else wrote since (an override,
/// a later revision) are left alone: a rollback reverts only what it wrote.
///
/// `fresh` must be after every stamp of the revision (take it from the rollout's
/// [`Hlc`](super::Hlc) after the revision), or the compensation would lose to it.
pub fn compensating_delta(
    replica: &Replica,
    revision: &Delta,
    previous: &BTreeMap<String, String>,
    fresh: Stamp,
) -> Result<Delta, RevisionError> {
    if let Some(newest) = revision.max_stamp()
        && fresh <= *newest
    {
        return Err(RevisionError::StaleStamp {
            fresh,
            revision: newest.clone(),
        });
    }
    let mut compensation = Delta::new();
    for (key, written) in revision.iter() {
        if replica.get(key) != Some(written) {
            continue;
        }
        let restored = match previous.get(key) {
            Some(value) => Entry::live(value.as_str(), fresh.clone()),
            None => Entry::tombstone(fresh.clone()),
        };
        compensation.insert(key, restored);
    }
    Ok(compensation)
}

/// A regional emergency override by an `override:<user>` writer: `Some(value)` sets a key,
/// `None` removes it.
pub fn override_delta<K, V>(
    stamp: Stamp,
    changes: impl IntoIterator<Item = (K, Option<V>)>,
) -> Result<Delta, RevisionError>
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    if stamp.writer.kind() != WriterKind::Override {
        return Err(RevisionError::NotAnOverrideWriter {
            writer: stamp.writer,
        });
    }
    let mut delta = Delta::new();
    for (key, value) in changes {
        let entry = match value {
            Some(value) => Entry::live(value.as_ref(), stamp.clone()),
            None => Entry::tombstone(stamp.clone()),
        };
        delta.insert(key.as_ref(), entry);
    }
    Ok(delta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdt::WriterId;

    fn rollout(wall_ms: u64) -> Stamp {
        Stamp::new(wall_ms, 0, WriterId::rollout("ns", "app").unwrap())
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn revision_holds_only_changes() {
        let before = map(&[("same", "1"), ("changed", "1"), ("removed", "1")]);
        let after = map(&[("same", "1"), ("changed", "2"), ("added", "3")]);
        let delta = declare_revision(&before, &after, rollout(10));
        let keys: Vec<(&str, Option<&str>)> = delta.iter().map(|(k, e)| (k, e.value())).collect();
        assert_eq!(
            keys,
            [
                ("added", Some("3")),
                ("changed", Some("2")),
                ("removed", None)
            ]
        );
        let (expand, contract) = split_expand_contract(&delta);
        assert_eq!(expand.len(), 2);
        assert_eq!(contract.len(), 1);
        assert!(contract.get("removed").unwrap().is_tombstone());
    }

    #[test]
    fn rollback_reverts_only_its_own_writes() {
        let before = map(&[("a", "1"), ("b", "1")]);
        let after = map(&[("a", "2"), ("b", "2"), ("c", "new")]);
        let revision = declare_revision(&before, &after, rollout(10));
        let mut replica = Replica::new();
        replica.apply(&declare_revision(&BTreeMap::new(), &before, rollout(5)));
        replica.apply(&revision);
        let alice = Stamp::new(11, 0, WriterId::override_by("alice").unwrap());
        replica.apply(&override_delta(alice, [("b", Some("override"))]).unwrap());

        let compensation = compensating_delta(&replica, &revision, &before, rollout(20)).unwrap();
        replica.apply(&compensation);
        assert_eq!(
            replica.live(),
            BTreeMap::from([("a", "1"), ("b", "override")])
        );
        assert!(compensation.get("b").is_none());
    }

    #[test]
    fn rollback_needs_a_fresh_stamp_and_overrides_an_override_writer() {
        let revision = declare_revision(&BTreeMap::new(), &map(&[("a", "1")]), rollout(10));
        assert!(matches!(
            compensating_delta(&Replica::new(), &revision, &BTreeMap::new(), rollout(10)),
            Err(RevisionError::StaleStamp { .. })
        ));
        assert!(matches!(
            override_delta(rollout(10), [("a", Some("x"))]),
            Err(RevisionError::NotAnOverrideWriter { .. })
        ));
    }
}
