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
