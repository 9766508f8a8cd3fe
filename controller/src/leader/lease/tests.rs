use super::*;

fn config(identity: &str) -> LeaseConfig {
    LeaseConfig::new("configrollout-system", DEFAULT_LEASE_NAME, identity)
}

fn lease(holder: Option<&str>, transitions: i32) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(DEFAULT_LEASE_NAME.into()),
            namespace: Some("configrollout-system".into()),
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(transitions),
            renew_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            ..LeaseSpec::default()
        }),
    }
}

fn wall() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

fn spec(lease: &Lease) -> &LeaseSpec {
    lease.spec.as_ref().unwrap()
}

#[test]
fn default_timings_keep_the_safety_margin() {
    let config = config("a");
    config.validate().unwrap();
    assert_eq!(config.lease_duration, Duration::from_secs(15));
    assert_eq!(config.renew_interval, Duration::from_secs(5));
    assert_eq!(config.renew_deadline, Duration::from_secs(10));
    assert!(config.renew_deadline < config.lease_duration);
    assert!(config.call_timeout * 2 <= config.renew_deadline);
}

#[test]
fn timings_that_would_let_two_lead_are_refused() {
    let mut bad = config("a");
    bad.renew_deadline = bad.lease_duration;
    assert!(matches!(bad.validate(), Err(LeaderError::InvalidTiming(_))));
    let mut bad = config("a");
    bad.renew_interval = bad.renew_deadline;
    assert!(matches!(bad.validate(), Err(LeaderError::InvalidTiming(_))));
    let mut bad = config("a");
    bad.call_timeout = bad.renew_deadline;
    assert!(matches!(bad.validate(), Err(LeaderError::InvalidTiming(_))));
    assert!(matches!(
        config("").validate(),
        Err(LeaderError::EmptyIdentity)
    ));
    // Short durations used by tests still validate.
    config("a")
        .with_lease_duration(Duration::from_secs(3))
        .validate()
        .unwrap();
}

#[test]
fn missing_lease_is_created_with_us_as_holder() {
    let me = config("a");
    let now = Instant::now();
    let action = decide(None, None, &me, now);
    assert_eq!(action, LeaseAction::Create);
    let created = claim(None, &action, &me, wall()).unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some(DEFAULT_LEASE_NAME));
    assert_eq!(
        created.metadata.namespace.as_deref(),
        Some("configrollout-system")
    );
    assert_eq!(spec(&created).holder_identity.as_deref(), Some("a"));
    assert_eq!(spec(&created).lease_duration_seconds, Some(15));
    assert_eq!(spec(&created).lease_transitions, Some(0));
    assert_eq!(spec(&created).renew_time, Some(MicroTime(wall())));
}

#[test]
fn free_lease_is_acquired_at_once() {
    let me = config("a");
    let now = Instant::now();
    for free in [lease(None, 3), lease(Some(""), 3)] {
        let sighting = Sighting::observe(None, &free, now);
        let action = decide(Some(&free), Some(&sighting), &me, now);
        assert_eq!(action, LeaseAction::Acquire);
        let taken = claim(Some(&free), &action, &me, wall()).unwrap();
        assert_eq!(spec(&taken).holder_identity.as_deref(), Some("a"));
        assert_eq!(spec(&taken).lease_transitions, Some(4));
        // Compare-and-swap: the write carries the version we read.
        assert_eq!(taken.metadata.resource_version.as_deref(), Some("42"));
    }
}

#[test]
fn lease_held_by_another_is_not_taken_before_it_expires_by_our_clock() {
    let me = config("a");
    let held = lease(Some("b"), 1);
    let t0 = Instant::now();
    // Its renewTime is decades old by the wall clock: irrelevant, we have only just
    // seen it.
    let sighting = Sighting::observe(None, &held, t0);
    assert_eq!(
        decide(Some(&held), Some(&sighting), &me, t0),
        LeaseAction::Wait {
            holder: "b".into(),
            expires_in: Duration::from_secs(15)
        }
    );
    let later = t0 + Duration::from_secs(14);
    let sighting = Sighting::observe(Some(&sighting), &held, later);
    assert_eq!(
        decide(Some(&held), Some(&sighting), &me, later),
        LeaseAction::Wait {
            holder: "b".into(),
            expires_in: Duration::from_secs(1)
        }
    );
    assert_eq!(
        claim(
            Some(&held),
            &decide(Some(&held), Some(&sighting), &me, later),
            &me,
            wall()
        ),
        None
    );
}

#[test]
fn a_renewal_by_the_holder_restarts_the_wait() {
    let me = config("a");
    let t0 = Instant::now();
    let held = lease(Some("b"), 1);
    let first = Sighting::observe(None, &held, t0);
    let mut renewed = held.clone();
    renewed.spec.as_mut().unwrap().renew_time = Some(MicroTime(wall()));
    let t1 = t0 + Duration::from_secs(10);
    let second = Sighting::observe(Some(&first), &renewed, t1);
    let t2 = t0 + Duration::from_secs(16);
    let third = Sighting::observe(Some(&second), &renewed, t2);
    assert!(matches!(
        decide(Some(&renewed), Some(&third), &me, t2),
        LeaseAction::Wait { .. }
    ));
}

#[test]
fn expired_lease_is_taken_over_with_one_more_transition() {
    let me = config("a");
    let held = lease(Some("b"), 7);
    let t0 = Instant::now();
    let first = Sighting::observe(None, &held, t0);
    let t1 = t0 + Duration::from_secs(15);
    let unchanged = Sighting::observe(Some(&first), &held, t1);
    let action = decide(Some(&held), Some(&unchanged), &me, t1);
    assert_eq!(action, LeaseAction::Acquire);
    let taken = claim(Some(&held), &action, &me, wall()).unwrap();
    assert_eq!(spec(&taken).holder_identity.as_deref(), Some("a"));
    assert_eq!(spec(&taken).lease_transitions, Some(8));
    assert_eq!(spec(&taken).acquire_time, Some(MicroTime(wall())));
    assert_eq!(spec(&taken).renew_time, Some(MicroTime(wall())));
    assert_eq!(taken.metadata.resource_version.as_deref(), Some("42"));
}

#[test]
fn expiry_follows_the_duration_the_lease_declares() {
    let me = config("a");
    let mut held = lease(Some("b"), 0);
    held.spec.as_mut().unwrap().lease_duration_seconds = Some(60);
    let t0 = Instant::now();
    let first = Sighting::observe(None, &held, t0);
    let t1 = t0 + Duration::from_secs(30);
    let again = Sighting::observe(Some(&first), &held, t1);
    assert!(matches!(
        decide(Some(&held), Some(&again), &me, t1),
        LeaseAction::Wait { .. }
    ));
}

#[test]
fn own_lease_is_renewed_keeping_transitions_and_acquire_time() {
    let me = config("a");
    let mut mine = lease(Some("a"), 2);
    mine.spec.as_mut().unwrap().acquire_time = Some(MicroTime(Timestamp::UNIX_EPOCH));
    let now = Instant::now();
    let sighting = Sighting::observe(None, &mine, now);
    let action = decide(Some(&mine), Some(&sighting), &me, now);
    assert_eq!(action, LeaseAction::Renew);
    let renewed = claim(Some(&mine), &action, &me, wall()).unwrap();
    assert_eq!(spec(&renewed).holder_identity.as_deref(), Some("a"));
    assert_eq!(spec(&renewed).lease_transitions, Some(2));
    assert_eq!(
        spec(&renewed).acquire_time,
        Some(MicroTime(Timestamp::UNIX_EPOCH))
    );
    assert_eq!(spec(&renewed).renew_time, Some(MicroTime(wall())));
    assert_eq!(renewed.metadata.resource_version.as_deref(), Some("42"));
}

#[test]
fn renew_deadline_ends_leadership_before_others_may_take_over() {
    let me = config("a");
    let sent = Instant::now();
    let tenure = Tenure::renewed(sent);
    assert!(tenure.leading_at(sent, &me));
    assert!(tenure.leading_at(sent + Duration::from_secs(9), &me));
    assert!(!tenure.leading_at(sent + me.renew_deadline, &me));

    // A standby that saw our renewal no earlier than we sent it cannot take over
    // while we still consider ourselves leading.
    let ours = lease(Some("a"), 0);
    let standby = config("b");
    let seen = Sighting::observe(None, &ours, sent);
    let mut t = sent;
    while tenure.leading_at(t, &me) {
        assert!(matches!(
            decide(Some(&ours), Some(&seen), &standby, t),
            LeaseAction::Wait { .. }
        ));
        t += Duration::from_millis(250);
    }
}

#[test]
fn release_hands_over_only_our_own_lease() {
    let me = config("a");
    let released = release(&lease(Some("a"), 5), &me, wall()).unwrap();
    assert_eq!(spec(&released).holder_identity, None);
    assert_eq!(spec(&released).lease_transitions, Some(5));
    assert_eq!(released.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(release(&lease(Some("b"), 5), &me, wall()), None);

    // The standby acquires the released Lease without waiting.
    let standby = config("b");
    let now = Instant::now();
    let sighting = Sighting::observe(None, &released, now);
    assert_eq!(
        decide(Some(&released), Some(&sighting), &standby, now),
        LeaseAction::Acquire
    );
}
