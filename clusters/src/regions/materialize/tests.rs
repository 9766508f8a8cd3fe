use super::*;
use configrollout_core::crdt::WriterId;

fn key() -> DigestKey {
    DigestKey::new(b"0123456789abcdef-test-key").unwrap()
}

fn stamp(wall_ms: u64, writer: &str) -> Stamp {
    Stamp::new(wall_ms, 0, WriterId::parse(writer).unwrap())
}

fn rollout_delta(wall_ms: u64, pairs: &[(&str, Option<&str>)]) -> Delta {
    let stamp = stamp(wall_ms, "rollout:team/limits");
    pairs
        .iter()
        .map(|(k, v)| {
            let entry = match v {
                Some(v) => Entry::live(*v, stamp.clone()),
                None => Entry::tombstone(stamp.clone()),
            };
            (*k, entry)
        })
        .collect()
}

fn request<'a>(delta: &'a Delta, policy: &'a DriftPolicy) -> MergeRequest<'a> {
    MergeRequest {
        delta,
        drift_policy: policy,
        adopt_stamp: None,
        compaction: Compaction::default(),
        owner: None,
    }
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The objects a region holds after `plan` was written in full.
fn written(plan: &Plan) -> (TargetView, CompanionView) {
    (
        TargetView {
            data: plan.target_data.clone(),
            digest: Some(plan.digest.clone()),
        },
        CompanionView {
            state: Some(plan.encoded_state.clone()),
            digest: Some(plan.digest.clone()),
            mac: None,
        },
    )
}

#[test]
fn first_merge_into_a_new_region_writes_exactly_the_delta() {
    let delta = rollout_delta(10, &[("rate", Some("100")), ("mode", Some("on"))]);
    let plan = plan(&key(), None, None, request(&delta, &DriftPolicy::Report)).unwrap();
    assert_eq!(plan.target_data, data(&[("mode", "on"), ("rate", "100")]));
    assert!(plan.companion_changed && plan.target_changed);
    assert!(plan.drifted_keys.is_empty());
}

#[test]
fn keys_the_replica_never_held_are_left_alone() {
    let delta = rollout_delta(10, &[("rate", Some("100"))]);
    let existing = TargetView {
        data: data(&[("owned-by-someone-else", "x"), ("rate", "5")]),
        digest: None,
    };
    let plan = plan(
        &key(),
        Some(&existing),
        None,
        request(&delta, &DriftPolicy::Report),
    )
    .unwrap();
    assert_eq!(
        plan.target_data,
        data(&[("owned-by-someone-else", "x"), ("rate", "100")])
    );
}

#[test]
fn merging_the_same_delta_twice_changes_nothing() {
    let delta = rollout_delta(10, &[("rate", Some("100"))]);
    let first = plan(&key(), None, None, request(&delta, &DriftPolicy::Report)).unwrap();
    let (target, companion) = written(&first);
    let again = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&delta, &DriftPolicy::Report),
    )
    .unwrap();
    assert!(!again.companion_changed && !again.target_changed);
    assert_eq!(again.outcome.won, 0);
}

#[test]
fn a_tombstone_removes_the_key_from_data() {
    let first = rollout_delta(10, &[("old", Some("1")), ("new", Some("2"))]);
    let plan1 = plan(&key(), None, None, request(&first, &DriftPolicy::Report)).unwrap();
    let (target, companion) = written(&plan1);
    let removal = rollout_delta(20, &[("old", None)]);
    let plan2 = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&removal, &DriftPolicy::Report),
    )
    .unwrap();
    assert_eq!(plan2.target_data, data(&[("new", "2")]));
}

#[test]
fn an_out_of_band_edit_is_reported_and_kept_under_report() {
    let delta = rollout_delta(10, &[("rate", Some("100")), ("mode", Some("on"))]);
    let plan1 = plan(&key(), None, None, request(&delta, &DriftPolicy::Report)).unwrap();
    let (mut target, companion) = written(&plan1);
    target.data.insert("rate".into(), "999".into());
    let next = rollout_delta(20, &[("mode", Some("off"))]);
    let plan2 = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&next, &DriftPolicy::Report),
    )
    .unwrap();
    assert_eq!(plan2.drifted_keys, vec!["rate".to_owned()]);
    assert_eq!(plan2.target_data, data(&[("mode", "off"), ("rate", "999")]));
}

#[test]
fn revert_puts_the_declared_value_back() {
    let delta = rollout_delta(10, &[("rate", Some("100"))]);
    let plan1 = plan(&key(), None, None, request(&delta, &DriftPolicy::Revert)).unwrap();
    let (mut target, companion) = written(&plan1);
    target.data.remove("rate");
    let plan2 = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&Delta::new(), &DriftPolicy::Revert),
    )
    .unwrap();
    assert!(plan2.drifted_keys.is_empty());
    assert_eq!(plan2.target_data, data(&[("rate", "100")]));
}

#[test]
fn adopt_keeps_the_edit_as_an_override_until_a_later_revision() {
    let delta = rollout_delta(10, &[("rate", Some("100"))]);
    let plan1 = plan(&key(), None, None, request(&delta, &DriftPolicy::Adopt)).unwrap();
    let (mut target, companion) = written(&plan1);
    target.data.insert("rate".into(), "7".into());
    let adopt = stamp(15, "override:drift");
    let stale = rollout_delta(12, &[("rate", Some("100"))]);
    let plan2 = plan(
        &key(),
        Some(&target),
        Some(&companion),
        MergeRequest {
            delta: &stale,
            drift_policy: &DriftPolicy::Adopt,
            adopt_stamp: Some(&adopt),
            compaction: Compaction::default(),
            owner: None,
        },
    )
    .unwrap();
    assert_eq!(plan2.target_data, data(&[("rate", "7")]));
    assert_eq!(plan2.overridden_keys, vec!["rate".to_owned()]);

    let (target, companion) = written(&plan2);
    let later = rollout_delta(30, &[("rate", Some("200"))]);
    let plan3 = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&later, &DriftPolicy::Adopt),
    )
    .unwrap();
    assert_eq!(plan3.target_data, data(&[("rate", "200")]));
    assert!(plan3.overridden_keys.is_empty());
}

#[test]
fn adopt_without_a_stamp_is_refused() {
    let delta = rollout_delta(10, &[("rate", Some("100"))]);
    let plan1 = plan(&key(), None, None, request(&delta, &DriftPolicy::Adopt)).unwrap();
    let (mut target, companion) = written(&plan1);
    target.data.insert("rate".into(), "7".into());
    let err = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&Delta::new(), &DriftPolicy::Adopt),
    )
    .unwrap_err();
    assert!(matches!(err, RegionError::AdoptNeedsStamp));
}

/// On a target two rollouts share, one's drift policy acts on its own keys only: the
/// other team's drifted key keeps its region value and is never adopted.
#[test]
fn a_rollouts_drift_policy_acts_on_its_own_keys_only() {
    let mine = WriterId::parse("rollout:team/limits").unwrap();
    let theirs = stamp(5, "rollout:other/flags");
    let their_delta: Delta = [("flag", Entry::live("on", theirs))].into_iter().collect();
    let my_delta = rollout_delta(10, &[("rate", Some("100"))]);
    let first = plan(
        &key(),
        None,
        None,
        request(&their_delta, &DriftPolicy::Report),
    )
    .unwrap();
    let (target, companion) = written(&first);
    let second = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&my_delta, &DriftPolicy::Report),
    )
    .unwrap();
    let (mut target, companion) = written(&second);
    // Someone edits both keys in the region.
    target.data = data(&[("rate", "1"), ("flag", "edited")]);
    for policy in [DriftPolicy::Revert, DriftPolicy::Adopt] {
        let adopt = stamp(20, "override:adopted");
        let planned = plan(
            &key(),
            Some(&target),
            Some(&companion),
            MergeRequest {
                adopt_stamp: Some(&adopt),
                owner: Some(&mine),
                ..request(&Delta::new(), &policy)
            },
        )
        .unwrap();
        assert_eq!(
            planned.target_data.get("flag").map(String::as_str),
            Some("edited"),
            "{policy:?}: the other rollout's key keeps its region value"
        );
        assert_eq!(
            planned.replica.get("flag").and_then(Entry::value),
            Some("on"),
            "{policy:?}: the other rollout's key is not adopted"
        );
        assert_eq!(planned.drifted_keys, vec!["flag".to_owned()], "{policy:?}");
        let (rate, expected_writer) = match policy {
            DriftPolicy::Revert => ("100", "rollout:team/limits"),
            _ => ("1", "override:adopted"),
        };
        assert_eq!(
            planned.target_data.get("rate").map(String::as_str),
            Some(rate),
            "{policy:?} acts on the rollout's own key"
        );
        assert_eq!(
            planned
                .replica
                .get("rate")
                .map(|entry| entry.stamp.writer.to_string()),
            Some(expected_writer.to_owned()),
            "{policy:?}"
        );
    }
}

#[test]
fn an_interrupted_write_is_finished_not_reported_as_drift() {
    let delta = rollout_delta(10, &[("rate", Some("100"))]);
    let plan1 = plan(&key(), None, None, request(&delta, &DriftPolicy::Report)).unwrap();
    // The companion was written, the target was not.
    let (_, companion) = written(&plan1);
    let stale_target = TargetView::default();
    let plan2 = plan(
        &key(),
        Some(&stale_target),
        Some(&companion),
        request(&delta, &DriftPolicy::Report),
    )
    .unwrap();
    assert!(plan2.drifted_keys.is_empty());
    assert_eq!(plan2.target_data, data(&[("rate", "100")]));
    assert!(plan2.target_changed && !plan2.companion_changed);
}

#[test]
fn a_malformed_companion_is_reported_not_replaced() {
    let delta = rollout_delta(10, &[("rate", Some("100"))]);
    let companion = CompanionView {
        state: Some("{\"v\":1,\"entries\":[oops".into()),
        digest: None,
        mac: None,
    };
    let err = plan(
        &key(),
        None,
        Some(&companion),
        request(&delta, &DriftPolicy::Revert),
    )
    .unwrap_err();
    assert!(matches!(err, RegionError::MalformedCompanion { .. }));
}

#[test]
fn a_first_publish_interrupted_before_its_companion_is_finished() {
    let delta = rollout_delta(10, &[("rate", Some("100"))]);
    let first = plan(&key(), None, None, request(&delta, &DriftPolicy::Report)).unwrap();
    let (target, _) = written(&first);
    let again = plan(
        &key(),
        Some(&target),
        None,
        request(&delta, &DriftPolicy::Report),
    )
    .unwrap();
    assert!(again.companion_changed && !again.target_changed);
    assert_eq!(again.encoded_state, first.encoded_state);
}

#[test]
fn a_managed_target_without_its_companion_is_reported() {
    let delta = rollout_delta(10, &[("rate", Some("100"))]);
    let target = TargetView {
        data: data(&[("rate", "1")]),
        digest: Some("abc".into()),
    };
    let err = plan(
        &key(),
        Some(&target),
        None,
        request(&delta, &DriftPolicy::Revert),
    )
    .unwrap_err();
    assert!(matches!(err, RegionError::CompanionMissing));
}

#[test]
fn an_earlier_declared_revision_arriving_late_does_not_clobber_an_override() {
    let override_stamp = stamp(50, "override:oncall");
    let overridden = crdt::override_delta(override_stamp, [("rate", Some("1"))]).unwrap();
    let plan1 = plan(
        &key(),
        None,
        None,
        request(&overridden, &DriftPolicy::Report),
    )
    .unwrap();
    let (target, companion) = written(&plan1);
    let stale = rollout_delta(40, &[("rate", Some("100"))]);
    let plan2 = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&stale, &DriftPolicy::Report),
    )
    .unwrap();
    assert_eq!(plan2.target_data, data(&[("rate", "1")]));
    assert_eq!(plan2.overridden_keys, vec!["rate".to_owned()]);
}

/// Plans `delta` with tombstones collected through `through`, rebasing this rollout.
fn collecting(
    target: Option<&TargetView>,
    companion: Option<&CompanionView>,
    delta: &Delta,
    through: &Stamp,
) -> Plan {
    let writer = WriterId::parse("rollout:team/limits").unwrap();
    let policy = DriftPolicy::Report;
    let request = MergeRequest {
        compaction: Compaction {
            through: Some(through),
            rebase: Some(&writer),
            keeping: None,
        },
        ..request(delta, &policy)
    };
    plan(&key(), target, companion, request).unwrap()
}

/// A co-writer `w` that never reached this region (it waits for an approval) holds
/// `flag` live from before a person's override removed `flag` here. Another rollout's
/// collection keeps that tombstone (`w`'s key) and collects its own, so `w`'s late
/// publication still loses to the later removal. Without the keep, the removal would
/// be undone by a stale staged rollout.
#[test]
fn a_kept_tombstone_outlives_a_late_co_writer_while_the_others_go() {
    let policy = DriftPolicy::Report;
    let a = WriterId::parse("rollout:team/limits").unwrap();
    let w = WriterId::parse("rollout:other/w").unwrap();
    let w_state: Delta = [("flag", Entry::live("on", Stamp::new(10, 0, w.clone())))]
        .into_iter()
        .collect();
    let a_first = rollout_delta(5, &[("rate", Some("1")), ("old", Some("x"))]);
    let first = plan(&key(), None, None, request(&a_first, &policy)).unwrap();
    let (target, companion) = written(&first);
    let mut a_state = a_first.clone();
    a_state.merge(&rollout_delta(20, &[("old", None)]));
    let removed = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&a_state, &policy),
    )
    .unwrap();
    let (target, companion) = written(&removed);
    let removal = configrollout_core::crdt::override_delta(
        stamp(30, "override:alice"),
        [("flag", None::<&str>)],
    )
    .unwrap();
    let overridden = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&removal, &policy),
    )
    .unwrap();
    let (target, companion) = written(&overridden);
    let through = stamp(40, "rollout:team/limits");
    let keep_flag = |key: &str| key == "flag";
    let keeps: [(Option<KeptKeys<'_>>, bool); 2] = [(Some(&keep_flag), false), (None, true)];
    for (keeping, flag_comes_back) in keeps {
        let request_a = MergeRequest {
            compaction: Compaction {
                through: Some(&through),
                rebase: Some(&a),
                keeping,
            },
            owner: Some(&a),
            ..request(&a_state, &policy)
        };
        let collected = plan(&key(), Some(&target), Some(&companion), request_a).unwrap();
        assert!(
            collected.replica.get("old").is_none(),
            "A's own tombstone goes"
        );
        assert_eq!(
            collected.replica.get("flag").is_some(),
            keeping.is_some(),
            "the override's tombstone of w's key is kept only when asked"
        );
        let (target, companion) = written(&collected);
        let late = MergeRequest {
            owner: Some(&w),
            ..request(&w_state, &policy)
        };
        let late = plan(&key(), Some(&target), Some(&companion), late).unwrap();
        assert_eq!(late.target_data.contains_key("flag"), flag_comes_back);
        assert_eq!(late.target_data.get("rate").map(String::as_str), Some("1"));
    }
}

#[test]
fn collection_drops_stable_tombstones_and_keeps_the_data_and_digest() {
    let mut state = rollout_delta(10, &[("rate", Some("100")), ("old", Some("x"))]);
    let first = plan(&key(), None, None, request(&state, &DriftPolicy::Report)).unwrap();
    let (target, companion) = written(&first);
    state.merge(&rollout_delta(20, &[("old", None)]));
    let removed = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&state, &DriftPolicy::Report),
    )
    .unwrap();
    assert_eq!(removed.replica.tombstones(), 1);
    let (target, companion) = written(&removed);

    let collected = collecting(
        Some(&target),
        Some(&companion),
        &state,
        &stamp(20, "rollout:team/limits"),
    );
    assert_eq!(collected.replica.tombstones(), 0);
    assert_eq!(
        collected.replica.horizon(),
        Some(&stamp(20, "rollout:team/limits"))
    );
    assert_eq!(collected.target_data, data(&[("rate", "100")]));
    assert_eq!(
        collected.digest, removed.digest,
        "the live state is unchanged"
    );
    assert!(collected.companion_changed && !collected.target_changed);

    // The tombstone's revision delivered again (a retry, a late publish) changes nothing.
    let (target, companion) = written(&collected);
    let again = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&state, &DriftPolicy::Report),
    )
    .unwrap();
    assert_eq!(again.target_data, data(&[("rate", "100")]));
    assert!(!again.companion_changed && !again.target_changed);
    // An older write of the removed key arriving late does not bring it back.
    let late = rollout_delta(15, &[("old", Some("x"))]);
    let late = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&late, &DriftPolicy::Report),
    )
    .unwrap();
    assert_eq!(late.target_data, data(&[("rate", "100")]));
}

#[test]
fn a_companion_restored_from_before_a_collection_is_rebased_so_the_key_stays_deleted() {
    // The backup: both objects as they were before `old` was removed.
    let before = rollout_delta(10, &[("rate", Some("100")), ("old", Some("x"))]);
    let backup = plan(&key(), None, None, request(&before, &DriftPolicy::Report)).unwrap();
    let (target, companion) = written(&backup);
    // The rollout's state after the removal and the collection: `old` is gone from it
    // altogether; a later revision changes `rate`.
    let mut state = rollout_delta(10, &[("rate", Some("100"))]);
    state.merge(&rollout_delta(30, &[("rate", Some("200"))]));
    let through = stamp(20, "rollout:team/limits");

    let rebased = collecting(Some(&target), Some(&companion), &state, &through);
    assert_eq!(rebased.target_data, data(&[("rate", "200")]));
    assert!(
        rebased.replica.get("old").is_some_and(Entry::is_tombstone),
        "kept as a tombstone until the target is written without it"
    );
    assert_eq!(rebased.replica.horizon(), Some(&through));
    let (written_target, written_companion) = written(&rebased);
    let settled = collecting(
        Some(&written_target),
        Some(&written_companion),
        &state,
        &through,
    );
    assert!(settled.replica.get("old").is_none(), "then collected");
    assert_eq!(settled.target_data, data(&[("rate", "200")]));

    // Another writer's entries and keys the replica never held are not this rollout's
    // to drop.
    let mut target = target;
    target.data.insert("foreign".into(), "kept".into());
    let override_stamp = stamp(5, "override:alice");
    let mut with_override =
        configrollout_core::crdt::decode(companion.state.as_deref().unwrap()).unwrap();
    with_override.apply(
        &[("pinned", Entry::live("1", override_stamp))]
            .into_iter()
            .collect(),
    );
    target.data.insert("pinned".into(), "1".into());
    let companion = CompanionView {
        state: Some(configrollout_core::crdt::encode(&with_override).unwrap()),
        digest: Some(configrollout_core::crdt::revision_digest(
            &key(),
            &with_override,
        )),
        mac: None,
    };
    target.digest.clone_from(&companion.digest);
    let rebased = collecting(Some(&target), Some(&companion), &state, &through);
    assert_eq!(
        rebased.target_data,
        data(&[("foreign", "kept"), ("pinned", "1"), ("rate", "200")])
    );
}

/// Issue 43, trace 3: A removed k2 and collected it everywhere; region-2 is then
/// restored from a backup that still holds k2. B publishes there first, raising the
/// horizon past A's point; A's publication must still drop k2.
#[test]
fn a_restored_key_stays_deleted_when_another_writer_raised_the_horizon_first() {
    let policy = DriftPolicy::Report;
    let a = WriterId::parse("rollout:team/a").unwrap();
    let b = WriterId::parse("rollout:team/b").unwrap();
    let a_stamp = |wall| Stamp::new(wall, 0, a.clone());
    let b_stamp = |wall| Stamp::new(wall, 0, b.clone());
    let publish = |target: &TargetView,
                   companion: &CompanionView,
                   state: &Delta,
                   writer: &WriterId,
                   through: &Stamp| {
        let request = MergeRequest {
            compaction: Compaction {
                through: Some(through),
                rebase: Some(writer),
                keeping: None,
            },
            owner: Some(writer),
            ..request(state, &policy)
        };
        plan(&key(), Some(target), Some(companion), request).unwrap()
    };
    // The backup: A's k2 and k3, B's k5, nothing collected yet.
    let a_before: Delta = [
        ("k2", Entry::live("old", a_stamp(10))),
        ("k3", Entry::live("3", a_stamp(10))),
    ]
    .into_iter()
    .collect();
    let b_state: Delta = [("k5", Entry::live("5", b_stamp(15)))]
        .into_iter()
        .collect();
    let first = plan(&key(), None, None, request(&a_before, &policy)).unwrap();
    let (target, companion) = written(&first);
    let backup = plan(
        &key(),
        Some(&target),
        Some(&companion),
        request(&b_state, &policy),
    )
    .unwrap();
    let (target, companion) = written(&backup);

    // Since: A removed k2 at 20 and the target collected through 40; A's state no
    // longer has k2 at all. B declared again at 50.
    let a_state: Delta = [("k3", Entry::live("3", a_stamp(10)))]
        .into_iter()
        .collect();
    let mut b_later = b_state.clone();
    b_later.set("k6", "6", b_stamp(50));
    let through = a_stamp(40);

    let after_b = publish(&target, &companion, &b_later, &b, &through);
    assert_eq!(after_b.replica.horizon(), Some(&through));
    assert_eq!(
        after_b.target_data.get("k2").map(String::as_str),
        Some("old"),
        "not B's key to drop"
    );
    let (target, companion) = written(&after_b);
    let after_a = publish(&target, &companion, &a_state, &a, &through);
    assert_eq!(
        after_a.target_data,
        data(&[("k3", "3"), ("k5", "5"), ("k6", "6")]),
        "the key A deleted stays deleted"
    );
    assert!(after_a.replica.get("k2").is_some_and(Entry::is_tombstone));

    // A's companion is written, but its target write does not land: B wrote the target
    // in between (planned from B's companion, so it keeps k2), or the process stopped.
    // Whoever writes next finishes the removal, and the tombstone goes once it has.
    let (_, a_companion) = written(&after_a);
    let (b_target, _) = written(&after_b);
    for (writer, state) in [(&b, &b_later), (&a, &a_state)] {
        let next = publish(&b_target, &a_companion, state, writer, &through);
        assert_eq!(
            next.target_data,
            data(&[("k3", "3"), ("k5", "5"), ("k6", "6")]),
            "the removal is finished by {writer}'s write"
        );
        let (target, companion) = written(&next);
        let settled = publish(&target, &companion, state, writer, &through);
        assert!(settled.replica.get("k2").is_none());
        assert_eq!(settled.target_data, next.target_data);
    }
}

#[test]
fn companion_names_fit_the_configmap_limit_or_fail_clearly() {
    assert_eq!(
        companion_name("limits").unwrap(),
        "limits.configrollout-state"
    );
    let long = "a".repeat(240);
    assert!(matches!(
        companion_name(&long),
        Err(RegionError::TargetNameTooLong { .. })
    ));
}
