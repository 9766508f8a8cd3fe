//! Properties of approvals, operator requests and stamps that nobody can forge or outrun:
//! an approval-required stage publishes only on a StageApproval that names this rollout's
//! UID, the revision's digest, was created after the revision, and (with four-eyes)
//! comes from someone other than the spec's author, whatever the status says; an abort
//! always stops; a retry from the future never resumes; a region holding stamps from the
//! future never lets the rollout report Complete.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use chrono::TimeDelta;
use configrollout_api::{ApprovalRecord, RolloutPhase, StageState, conditions};
use configrollout_core::engine::{Action, ApprovalObservation, ApproverBinding};
use proptest::prelude::*;
use serde_json::json;
use support::{World, spec};

const REGIONS: [&str; 3] = ["c1", "p1", "p2"];

/// Canary (no approval), then prod (approval required).
fn world(four_eyes: bool) -> World {
    World::new(
        spec(json!({
            "fourEyes": four_eyes,
            "stages": [
                {"name": "canary", "regions": {"names": ["c1"]}},
                {"name": "prod", "regions": {"names": ["p1", "p2"]}, "maxParallel": 2, "approval": "Required"},
            ],
        })),
        &REGIONS,
    )
}

fn prod_publishes(world: &World) -> usize {
    world
        .publishes()
        .iter()
        .filter(|(region, ..)| region != "c1")
        .count()
}

#[derive(Debug, Clone)]
struct Attempt {
    right_uid: bool,
    right_digest: bool,
    before_declaration: bool,
    by_author: bool,
    forge_status: bool,
    other_revision: bool,
}

fn attempt() -> impl Strategy<Value = Attempt> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(
                right_uid,
                right_digest,
                before_declaration,
                by_author,
                forge_status,
                other_revision,
            )| {
                Attempt {
                    right_uid,
                    right_digest,
                    before_declaration,
                    by_author,
                    forge_status,
                    other_revision,
                }
            },
        )
}

fn approval(world: &World, attempt: &Attempt, index: usize) -> ApprovalObservation {
    let created_at = if attempt.before_declaration {
        world.now - TimeDelta::hours(1)
    } else {
        world.now
    };
    ApprovalObservation {
        name: format!("attempt-{index}"),
        rollout_uid: if attempt.right_uid {
            world.rollout_uid.clone()
        } else {
            "uid-of-a-deleted-rollout".into()
        },
        stage: "prod".into(),
        // An approval of another revision, with the digest of the one rolling out.
        revision: if attempt.other_revision {
            "r2".into()
        } else {
            "r1".into()
        },
        revision_digest: if attempt.right_digest {
            world.revision_digest("r1")
        } else {
            "digest-of-something-else".into()
        },
        stage_digest: configrollout_api::stage_digest(&world.spec, "prod").unwrap_or_default(),
        approver: if attempt.by_author {
            world.spec_author.clone().unwrap_or_default()
        } else {
            "second-person".into()
        },
        reason: None,
        created_at,
    }
}

/// What binds an approval's approver to its creator, in the property's worlds.
#[derive(Debug, Clone, Copy)]
enum Binding {
    /// `--approver-enforced-externally`.
    External,
    /// Neither the policy nor the flag.
    Missing,
    /// The policy, installed after the approvals were made.
    PolicyAfter,
    /// The policy, installed before.
    PolicyBefore,
}

fn binding() -> impl Strategy<Value = Binding> {
    prop_oneof![
        Just(Binding::External),
        Just(Binding::Missing),
        Just(Binding::PolicyAfter),
        Just(Binding::PolicyBefore),
    ]
}

fn approver_binding(world: &World, binding: Binding) -> ApproverBinding {
    match binding {
        Binding::External => ApproverBinding::External,
        Binding::Missing => ApproverBinding::Missing,
        Binding::PolicyAfter => ApproverBinding::Policy {
            since: world.now + TimeDelta::hours(2),
        },
        Binding::PolicyBefore => ApproverBinding::Policy {
            since: world.now - TimeDelta::hours(2),
        },
    }
}

fn counts(attempt: &Attempt, four_eyes: bool, binding: Binding) -> bool {
    attempt.right_uid
        && attempt.right_digest
        && !attempt.other_revision
        && !attempt.before_declaration
        && !(four_eyes && attempt.by_author)
        && matches!(binding, Binding::External | Binding::PolicyBefore)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(support::proptest_cases(200)))]

    #[test]
    fn only_a_true_approval_opens_the_stage(
        four_eyes in any::<bool>(),
        binding in binding(),
        attempts in prop::collection::vec(attempt(), 0..4),
    ) {
        let mut world = world(four_eyes);
        world.approver_binding = approver_binding(&world, binding);
        world.run(3, 15);
        prop_assert_eq!(world.status.phase, Some(RolloutPhase::AwaitingApproval));
        for (index, attempt) in attempts.iter().enumerate() {
            let observation = approval(&world, attempt, index);
            if attempt.forge_status {
                // Someone with status write access claims the stage was approved and runs.
                world.status.stages[1].approval = Some(ApprovalRecord {
                    name: observation.name.clone(),
                    approver: "forger".into(),
                    reason: None,
                    approved_at: world.status.history[0].declared_at.clone(),
                });
                world.status.stages[1].state = StageState::Progressing;
                world.status.phase = Some(RolloutPhase::Progressing);
            }
            world.approvals.push(observation);
            world.run(3, 15);
        }
        let approved = attempts.iter().any(|attempt| counts(attempt, four_eyes, binding));
        if approved {
            world.run(6, 15);
            prop_assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
        } else {
            prop_assert_eq!(prod_publishes(&world), 0, "{:?}", world.publishes());
            prop_assert_ne!(world.status.phase, Some(RolloutPhase::Complete));
        }
    }

    #[test]
    fn abort_always_stops_and_a_retry_from_the_future_never_resumes(
        pending_retry_ahead_s in -600i64..86_400,
        retry_ahead_s in prop_oneof![1i64..60, 61i64..86_400],
    ) {
        let mut world = world(false);
        // The canary cannot be reached, so nothing is published before the abort, which
        // therefore halts (an abort after a publish rolls it back: see engine_rules).
        world.region("c1").reachable = false;
        world.run(2, 15);
        // An abort stops the rollout whatever the retry beside it says, and that retry
        // (written before the abort, however dated) never resumes it.
        let pending_retry = world.now + TimeDelta::seconds(pending_retry_ahead_s);
        world.control.retry_requested_at = Some(pending_retry);
        world.control.abort_requested_at = Some(world.now);
        world.tick();
        prop_assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
        let reason = world.halted_reason();
        prop_assert_eq!(reason.as_deref(), Some("Aborted"));
        world.advance(15);
        world.run(8, 15);
        prop_assert_eq!(world.status.phase, Some(RolloutPhase::Halted));

        // A new retry dated beyond the skew is refused, and stays refused as time passes.
        // A request is its time: one dated the very second of the consumed retry would be
        // that retry again (found at 100,000 cases), so a new one is a second apart, on the
        // same side of the skew bound.
        let mut retry = world.now + TimeDelta::seconds(retry_ahead_s);
        if retry.timestamp() == pending_retry.timestamp() {
            retry += TimeDelta::seconds(if retry_ahead_s > 60 { 1 } else { -1 });
        }
        world.control.retry_requested_at = Some(retry);
        world.run(8, 15);
        if retry_ahead_s > 60 {
            prop_assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
            let refused = world.log.iter().any(|(_, action)| {
                matches!(action, Action::Event { reason, .. } if reason == "ControlRefused")
            });
            prop_assert!(refused, "no ControlRefused event");
            // A retry requested now resumes the halt once. The runs above advanced the
            // clock: when "now" lands on the second of the refused retry or of the one
            // pending at the abort, it would be that request again (both found at 100,000
            // cases), so it is a second later, until it is a new request.
            while [retry.timestamp(), pending_retry.timestamp()].contains(&world.now.timestamp()) {
                world.advance(1);
            }
            world.control.retry_requested_at = Some(world.now);
            world.tick();
        }
        prop_assert_ne!(world.status.phase, Some(RolloutPhase::Halted));
    }

    #[test]
    fn a_region_holding_future_stamps_never_lets_the_rollout_complete(
        region in 0usize..3,
        keys in 1u32..5,
    ) {
        let mut world = world(false);
        world.region(REGIONS[region]).future_stamped_keys = keys;
        world.run(3, 15);
        world.approve("ok", "prod", "r1");
        world.run(10, 15);
        prop_assert_ne!(world.status.phase, Some(RolloutPhase::Complete));
        if region == 0 {
            // The canary is selected from the start: halted at once, naming it.
            let halted = world.status.true_condition(conditions::HALTED);
            let named = halted.is_some_and(|c| {
                c.reason == "FutureStamps"
                    && c.message.contains("c1")
                    && c.message.contains(&format!("{keys} keys"))
            });
            prop_assert!(named, "Halted names the region and key count");
        }
    }
}

/// One thing that happens to a four-eyes rollout, by one of three people.
#[derive(Debug, Clone)]
enum Edit {
    /// Changes the spec's data, stamped as the spec-author policy does: a new revision
    /// (declared at once, or only after the next edit when the controller does not get
    /// to it in between: an edit refused as invalid and fixed by someone else, a
    /// controller that was down).
    Spec(usize, bool),
    /// Changes the `fromConfigMap` source, stamped as the source-author policy does.
    Source(usize, bool),
    /// Someone pauses or resumes: declares nothing, makes no one an author (the
    /// spec-author policy leaves the stamp as it was).
    Pause,
    /// Approves prod of the current revision, or of the one before it.
    Approve(usize, bool),
    /// Time passes.
    Wait,
}

const PEOPLE: [&str; 3] = ["ann", "ben", "cat"];

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..3usize, any::<bool>()).prop_map(|(who, seen)| Edit::Spec(who, seen)),
        (0..3usize, any::<bool>()).prop_map(|(who, seen)| Edit::Source(who, seen)),
        Just(Edit::Pause),
        (0..3usize, any::<bool>()).prop_map(|(who, current)| Edit::Approve(who, current)),
        Just(Edit::Wait),
    ]
}

/// Who really changed what each revision declares: everyone who edited between its
/// declaration and the one before, as the test saw them, whatever the stamps say.
#[derive(Default)]
struct TrueAuthors {
    pending: BTreeSet<&'static str>,
    of: BTreeMap<String, BTreeSet<&'static str>>,
}

impl TrueAuthors {
    /// Gives the edits made since the last declaration to any revision declared since.
    fn after_run(&mut self, world: &World) {
        for record in &world.status.history {
            if !self.of.contains_key(&record.name) {
                self.of
                    .insert(record.name.clone(), std::mem::take(&mut self.pending));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(support::proptest_cases(200)))]

    /// Issue 28: whatever sequence of spec edits, source edits (several before the
    /// controller declares, too), pauses and approvals, a four-eyes rollout publishes a
    /// revision to the approval stage only on an approval of that very revision by
    /// someone who changed nothing it declares.
    #[test]
    fn no_author_ever_opens_the_stage_of_what_they_changed(
        edits in prop::collection::vec(edit(), 1..25),
    ) {
        let mut world = world(true);
        let mut truth = TrueAuthors::default();
        world.spec_author = None;
        world.spec_changed_by(PEOPLE[0]);
        world.source_changed_by(PEOPLE[0]);
        truth.pending.insert(PEOPLE[0]);
        world.run(2, 15);
        truth.after_run(&world);
        let mut digests = 0;
        let mut approvals = 0;
        for edit in &edits {
            let seen = match edit {
                Edit::Spec(who, seen) => {
                    world.spec_changed_by(PEOPLE[*who]);
                    truth.pending.insert(PEOPLE[*who]);
                    digests += 1;
                    world.desired.digest = format!("spec-{digests}");
                    *seen
                }
                Edit::Source(who, seen) => {
                    world.source_changed_by(PEOPLE[*who]);
                    truth.pending.insert(PEOPLE[*who]);
                    digests += 1;
                    world.desired.digest = format!("source-{digests}");
                    *seen
                }
                Edit::Pause => {
                    world.spec.paused = !world.spec.paused;
                    true
                }
                Edit::Approve(who, current) => {
                    let revisions: Vec<String> =
                        world.status.history.iter().map(|r| r.name.clone()).collect();
                    let target = if *current {
                        revisions.last()
                    } else {
                        revisions.iter().rev().nth(1)
                    };
                    if let Some(revision) = target.cloned() {
                        approvals += 1;
                        world.approve_as(PEOPLE[*who], &format!("a{approvals}"), "prod", &revision);
                    }
                    true
                }
                Edit::Wait => true,
            };
            if seen {
                world.run(1, 15);
                truth.after_run(&world);
            }
        }
        world.spec.paused = false;
        world.run(4, 15);
        truth.after_run(&world);
        for record in &world.status.history {
            let authors = truth.of.get(&record.name).cloned().unwrap_or_default();
            let recorded: BTreeSet<&str> = record.authors.iter().map(String::as_str).collect();
            prop_assert!(
                record.authors_unknown.is_some() || authors.is_subset(&recorded),
                "{} records authors {:?}, but {:?} changed it",
                record.name,
                record.authors,
                authors
            );
        }
        for (region, revision, _) in world.publishes() {
            if region == "c1" {
                continue;
            }
            let authors = truth.of.get(&revision).cloned().unwrap_or_default();
            let opened_by_someone_else = world.approvals.iter().any(|approval| {
                approval.revision == revision && !authors.contains(approval.approver.as_str())
            });
            prop_assert!(
                opened_by_someone_else,
                "{revision} reached {region} without an approval by a non-author: authors {:?}, approvals {:?}",
                authors,
                world.approvals.iter().map(|a| (&a.revision, &a.approver)).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn an_approval_by_the_author_under_four_eyes_is_refused_and_said_so() {
    let mut world = world(true);
    world.run(3, 15);
    world.approve_as("author", "self-approval", "prod", "r1");
    world.run(2, 15);
    assert_eq!(prod_publishes(&world), 0);
    let awaiting = world.condition(conditions::AWAITING_APPROVAL).unwrap();
    assert_eq!(awaiting.reason, "ApprovalRefused");
    assert!(
        awaiting
            .message
            .contains("by author refused: author changed what r1 declares (authors: author)"),
        "{}",
        awaiting.message
    );
    let refusals = world
        .log
        .iter()
        .filter(|(_, action)| {
            matches!(action, Action::Event { reason, .. } if reason == "ApprovalRefused")
        })
        .count();
    assert_eq!(refusals, 1, "one Event per refused approval");
    world.approve_as("bob", "second-person", "prod", "r1");
    world.run(6, 15);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    assert_eq!(
        world.status.stages[1]
            .approval
            .as_ref()
            .map(|a| a.approver.as_str()),
        Some("bob")
    );
}

/// Issue 28: whoever changed a `fromConfigMap` source is an author of the revision it
/// declared, as much as the spec's author: under four-eyes neither may approve it.
#[test]
fn an_editor_of_the_source_may_not_approve_the_revision_it_declared() {
    let mut world = world(true);
    world.source_author = Some(Ok("alice".into()));
    world.run(3, 15);
    assert_eq!(world.status.history[0].authors, ["author", "alice"]);
    world.approve_as("alice", "alice-approves-her-edit", "prod", "r1");
    world.run(3, 15);
    assert_eq!(prod_publishes(&world), 0);
    let awaiting = world.condition(conditions::AWAITING_APPROVAL).unwrap();
    assert!(
        awaiting.message.contains(
            "approval alice-approves-her-edit by alice refused: alice changed what r1 \
             declares (authors: author, alice)"
        ),
        "{}",
        awaiting.message
    );
    world.approve_as("bob", "bobs", "prod", "r1");
    world.run(6, 15);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
}

/// A source whose editors nothing stamps: under four-eyes no approval counts, and the
/// reason is said.
#[test]
fn a_source_nobody_stamps_fails_four_eyes_closed() {
    let mut world = world(true);
    world.source_author = Some(Err("the source ConfigMap team/src is not labelled".into()));
    world.run(3, 15);
    world.approve_as("bob", "bobs", "prod", "r1");
    world.run(4, 15);
    assert_eq!(prod_publishes(&world), 0);
    let awaiting = world.condition(conditions::AWAITING_APPROVAL).unwrap();
    assert!(
        awaiting
            .message
            .contains("who changed what r1 declares is not known (the source ConfigMap team/src is not labelled)"),
        "{}",
        awaiting.message
    );
    // Without four-eyes, who changed it does not matter.
    let mut relaxed = World::new(world.spec.clone(), &REGIONS);
    relaxed.spec.four_eyes = false;
    relaxed.source_author = world.source_author.clone();
    relaxed.run(3, 15);
    relaxed.approve_as("bob", "bobs", "prod", "r1");
    relaxed.run(6, 15);
    assert_eq!(relaxed.status.phase, Some(RolloutPhase::Complete));
}

#[test]
fn four_eyes_without_a_known_author_fails_closed() {
    let mut world = world(false);
    world.four_eyes_default = true;
    world.spec_author = None;
    world.run(3, 15);
    world.approve_as("bob", "any", "prod", "r1");
    world.run(4, 15);
    assert_eq!(prod_publishes(&world), 0);
    let awaiting = world.condition(conditions::AWAITING_APPROVAL).unwrap();
    assert!(
        awaiting.message.contains("spec-author"),
        "{}",
        awaiting.message
    );
}

#[test]
fn without_the_approver_policy_no_approval_counts_and_the_condition_says_why() {
    let mut world = world(false);
    world.approver_binding = ApproverBinding::Missing;
    world.run(3, 15);
    world.approve_as("bob", "bobs-approval", "prod", "r1");
    world.run(4, 15);
    assert_eq!(prod_publishes(&world), 0);
    let awaiting = world.condition(conditions::AWAITING_APPROVAL).unwrap();
    assert_eq!(awaiting.reason, "ApprovalRefused");
    assert!(
        awaiting
            .message
            .contains("approval bobs-approval by bob not counted: nothing binds spec.approver")
            && awaiting.message.contains("--approver-enforced-externally"),
        "{}",
        awaiting.message
    );
    // Installed since before the approval was made: it counts.
    world.approver_binding = ApproverBinding::Policy {
        since: world.now - TimeDelta::hours(1),
    };
    world.run(6, 15);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
}

#[test]
fn an_approval_made_before_the_policy_was_installed_does_not_count() {
    let mut world = world(false);
    world.run(3, 15);
    world.approve_as("bob", "early", "prod", "r1");
    world.approver_binding = ApproverBinding::Policy {
        since: world.now + TimeDelta::minutes(5),
    };
    world.run(4, 15);
    assert_eq!(prod_publishes(&world), 0);
    let awaiting = world.condition(conditions::AWAITING_APPROVAL).unwrap();
    assert!(
        awaiting
            .message
            .contains("approval early by bob refused: it was made before the approver policy"),
        "{}",
        awaiting.message
    );
}

#[test]
fn the_policies_approvals_rely_on_are_reported() {
    let mut world = world(false);
    world.missing_policies = Some(vec![
        "MutatingAdmissionPolicy spec-author.configrollout.dev".into(),
    ]);
    world.tick();
    let condition = world.condition(conditions::ADMISSION_POLICIES).unwrap();
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason, "PoliciesMissing");
    assert!(condition.message.contains("spec-author.configrollout.dev"));
    world.missing_policies = Some(Vec::new());
    world.tick();
    let condition = world.condition(conditions::ADMISSION_POLICIES).unwrap();
    assert_eq!(condition.status, "True");
}

#[test]
fn requests_written_with_fractions_of_a_second_act_once() {
    let mut world = world(false);
    // Nothing published before the abort: it halts (see the property above).
    world.region("c1").reachable = false;
    world.run(2, 15);
    world.control.abort_requested_at = Some(world.now + TimeDelta::milliseconds(641));
    world.run(3, 15);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let aborts = world
        .log
        .iter()
        .filter(|(_, action)| matches!(action, Action::Event { reason, .. } if reason == "Aborted"))
        .count();
    assert_eq!(aborts, 1, "the abort acts once");
    world.control.retry_requested_at = Some(world.now + TimeDelta::milliseconds(198));
    world.tick();
    assert_ne!(
        world.status.phase,
        Some(RolloutPhase::Halted),
        "the retry resumes"
    );
    world.run(3, 15);
    assert_ne!(
        world.status.phase,
        Some(RolloutPhase::Halted),
        "and the abort stays settled"
    );
}

/// An approval made in the very second the policy was installed (creation times have
/// whole seconds) may have been made before it: it does not count.
#[test]
fn an_approval_in_the_second_the_policy_was_installed_does_not_count() {
    let mut world = world(false);
    world.approver_binding = ApproverBinding::Missing;
    world.run(3, 15);
    world.approve_as("alice", "same-second", "prod", "r1");
    world.run(1, 15);
    world.approver_binding = ApproverBinding::Policy {
        since: world.now - TimeDelta::seconds(15),
    };
    world.run(4, 15);
    assert_eq!(prod_publishes(&world), 0);
    let awaiting = world.condition(conditions::AWAITING_APPROVAL).unwrap();
    assert!(
        awaiting.message.contains(
            "same-second by alice refused: it was made before the approver policy was installed"
        ),
        "{}",
        awaiting.message
    );
}
