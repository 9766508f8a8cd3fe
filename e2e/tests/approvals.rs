//! Approvals, aborts and stamps that cannot be forged or outrun, on real clusters: the
//! shipped admission policies installed in the hub, the controller as its own user, and
//! every request made as the person who would make it (`approver-alice`,
//! `approver-bob`, the admin). Each claim is checked where a user would rely on it: in
//! the regions (nothing published that was not approved), in the rollout's conditions
//! and Events, and in the Lease and the controllers' own logs. One lab for the whole
//! binary; the scenarios run in order, each on its own rollout and target.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use configrollout::api::annotations::{ABORT_ANNOTATION, RETRY_ANNOTATION};
use configrollout::api::author_stamp::AuthorStamp;
use configrollout::api::{ConfigRollout, StageApproval, StageApprovalSpec, StageState, conditions};
use configrollout::crdt::{DigestKey, Stamp, WriterId};
use configrollout::regions::materialize::COMPANION_SUFFIX;
use configrollout::regions::overrides::write_override;
use configrollout_e2e::{HUB, LabChild, LabOptions, SYSTEM_NAMESPACE, User};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

mod support;

use support::*;

const REGIONS: [&str; 3] = ["region-1", "region-2", "region-3"];
/// The regions of the stage that needs an approval.
const PROD: [&str; 2] = ["region-2", "region-3"];
const APPROVER_POLICY: &str = "stageapproval-approver.configrollout.dev";
const AUTHOR_POLICY: &str = "spec-author.configrollout.dev";
/// Who last changed a rollout's spec, as the apiserver stamps it.
const SPEC_AUTHOR: &str = "configrollout.dev/spec-author";
const LEADER: &str = "controller-approvals-a";
const STANDBY: &str = "controller-approvals-b";
/// A digest no revision has: the right length, made up.
const MADE_UP_DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A ConfigRollout `name` in the team namespace targeting `app/<name>` with `pairs`, and
/// `extra` spec lines (indented two spaces) before the stages: a canary (region-1), then
/// `prod` (region-2 and region-3), which needs an approval.
fn staged(name: &str, pairs: &[(&str, &str)], extra: &str) -> String {
    let data: String = pairs
        .iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata:\n  name: {name}\n  namespace: {TEAM}\nspec:\n  target: {{namespace: {APP}, name: {name}}}\n  data:\n{data}{extra}  stages:\n    - {{name: canary, regions: {{names: [region-1]}}}}\n    - {{name: prod, regions: {{names: [region-2, region-3]}}, maxParallel: 2, approval: Required}}\n"
    )
}

/// A rollout whose only stage waits for approval: nothing is published before it, so an
/// abort there halts (an abort after a stage published rolls that back instead).
fn approval_first(name: &str, pairs: &[(&str, &str)]) -> String {
    staged(name, pairs, "").replace("    - {name: canary, regions: {names: [region-1]}}\n", "")
}

fn client(world: &World, user: User) -> Client {
    world.lab.client(HUB, user).expect("hub client")
}

fn condition(rollout: &ConfigRollout, type_: &str) -> Option<Condition> {
    rollout.status.as_ref()?.condition(type_).cloned()
}

fn stage<'a>(rollout: &'a ConfigRollout, name: &str) -> &'a configrollout::api::StageStatus {
    rollout
        .status
        .as_ref()
        .and_then(|status| status.stages.iter().find(|stage| stage.name == name))
        .unwrap_or_else(|| panic!("stage {name} in the status of {}", rollout.name_any()))
}

fn revision_of(rollout: &ConfigRollout) -> Option<&str> {
    rollout.status.as_ref()?.revision.as_deref()
}

/// The keyed digest of `revision`, as `status.history` shows it.
fn digest_of(rollout: &ConfigRollout, revision: &str) -> Option<String> {
    rollout
        .status
        .as_ref()?
        .history
        .iter()
        .rev()
        .find(|record| record.name == revision)?
        .digest
        .clone()
}

/// What a StageApproval must name to approve `stage` of the rollout's current revision,
/// read from the rollout as `kubectl configrollout approve` reads it.
fn approving(rollout: &ConfigRollout, stage: &str, approver: User) -> StageApprovalSpec {
    StageApprovalSpec::for_current_revision(
        rollout,
        stage,
        approver.name(),
        Some("checked the canary dashboards".to_owned()),
    )
    .expect("a declared revision with its digest in history")
}

/// Creates a StageApproval `name` as `user`.
async fn submit(
    world: &World,
    user: User,
    name: &str,
    spec: StageApprovalSpec,
) -> Result<StageApproval, kube::Error> {
    let approval = StageApproval {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec,
    };
    let api: Api<StageApproval> = Api::namespaced(client(world, user), TEAM);
    tokio::time::timeout(CALL, api.create(&PostParams::default(), &approval))
        .await
        .expect("the hub answers")
}

/// `user` approves `stage` of what `rollout` is at now, in their own name.
async fn approve(world: &World, user: User, rollout: &ConfigRollout, stage: &str, name: &str) {
    submit(world, user, name, approving(rollout, stage, user))
        .await
        .unwrap_or_else(|e| panic!("{} approves {name}: {e}", user.name()));
}

/// Waits until `name` awaits an approval of `revision`; returns the rollout and the
/// revision's record in its history.
async fn awaiting_approval_of(
    world: &World,
    name: &str,
    revision: &str,
) -> (ConfigRollout, configrollout::api::RevisionRecord) {
    let waiting = eventually(&format!("{revision} awaits approval"), PROGRESS, || async {
        let rollout = world.rollout(name).await;
        (revision_of(&rollout) == Some(revision)
            && phase_of(&rollout).as_deref() == Some("AwaitingApproval"))
        .then_some(rollout)
    })
    .await;
    let record = waiting
        .status
        .as_ref()
        .and_then(|status| status.history.iter().find(|record| record.name == revision))
        .cloned()
        .unwrap_or_else(|| panic!("{revision} in history"));
    (waiting, record)
}

/// Who made the latest change the rollout's author stamp lists (`None` for nobody).
async fn author_of(world: &World, name: &str) -> Option<String> {
    latest_author(world.rollout(name).await.annotations().get(SPEC_AUTHOR)?)
}

/// The user of the latest change an author stamp lists (`None` for nobody).
fn latest_author(stamp: &str) -> Option<String> {
    AuthorStamp::parse(stamp)
        .latest()
        .filter(|user| !user.is_empty())
        .map(str::to_owned)
}

async fn event(world: &World, name: &str, reason: &str) -> Event {
    eventually(&format!("{name}: Event {reason}"), PROGRESS, || async {
        events(world, name, reason).await.into_iter().next()
    })
    .await
}

/// An operator command's time as `kubectl configrollout abort|retry` writes it: RFC 3339
/// to the second, UTC.
fn plugin_time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Sets operator command annotations (`configrollout.dev/abort`, `.../retry`) to the
/// given RFC 3339 times.
async fn request(world: &World, name: &str, annotations: &[(&str, String)]) {
    let annotations: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(key, at)| ((*key).to_owned(), serde_json::json!(at)))
        .collect();
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    within(
        "annotate the rollout",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
}

async fn change_data(world: &World, name: &str, data: serde_json::Value) {
    let patch = serde_json::json!({"spec": {"data": data}});
    within(
        "change the rollout's data",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
}

fn ahead(seconds: i64) -> Timestamp {
    Timestamp::now()
        .checked_add(SignedDuration::from_secs(seconds))
        .expect("a representable time")
}

/// Polls `check` for `period`, panicking with its message the first time it fails: for
/// claims that something does not happen.
async fn holds<F, Fut>(what: &str, period: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let until = tokio::time::Instant::now() + period;
    loop {
        if let Err(broken) = check().await {
            panic!("{what}: {broken}");
        }
        if tokio::time::Instant::now() >= until {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn assert_untouched(world: &World, name: &str, counters: &[WriteCounter]) {
    for (region, counter) in PROD.iter().zip(counters) {
        assert_eq!(counter.writes(), 0, "{region}: {name} written");
        assert_eq!(
            world.target_data(region, name).await,
            None,
            "{region}: {name} published"
        );
    }
}

// ----------------------------------------------------------------------------------------
// Set-up: who may do what, and the shipped policies.

/// As the admin: approver-alice may also author ConfigRollouts in the team namespace
/// (create, change; no delete), so that she can approve her own change.
async fn let_alice_author_rollouts(world: &World) {
    let name = "rollout-author-alice";
    let role = Role {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(TEAM.into()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![
            PolicyRule {
                api_groups: Some(vec!["configrollout.dev".into()]),
                resources: Some(vec!["configrollouts".into()]),
                verbs: ["create", "update", "patch", "get"]
                    .map(String::from)
                    .to_vec(),
                ..PolicyRule::default()
            },
            // She may edit ConfigMaps of the team namespace, a rollout's source among
            // them, as a team's members and its CI do.
            PolicyRule {
                api_groups: Some(vec!["".into()]),
                resources: Some(vec!["configmaps".into()]),
                verbs: ["update", "patch", "get"].map(String::from).to_vec(),
                ..PolicyRule::default()
            },
        ]),
    };
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(TEAM.into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: User::ApproverAlice.name().into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Subject::default()
        }]),
    };
    let params = PostParams::default();
    within(
        "create alice's role",
        Api::<Role>::namespaced(world.hub.clone(), TEAM).create(&params, &role),
    )
    .await;
    within(
        "bind alice's role",
        Api::<RoleBinding>::namespaced(world.hub.clone(), TEAM).create(&params, &binding),
    )
    .await;
}

/// Installs both shipped approval policies as the admin and waits until the apiserver
/// enforces them (server-side dry runs, which run admission and store nothing).
async fn install_policies(world: &World) {
    for file in [
        "stageapproval-approver.yaml",
        "mutating/spec-author.yaml",
        "mutating/source-author.yaml",
    ] {
        let path = configrollout_e2e::repository_root()
            .join("policies")
            .join(file);
        world
            .lab
            .apply(HUB, User::Admin, &path)
            .await
            .unwrap_or_else(|e| panic!("install {file}: {e}"));
    }
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let approvals: Api<StageApproval> = Api::namespaced(client(world, User::ApproverAlice), TEAM);
    let in_bobs_name = StageApproval {
        metadata: ObjectMeta {
            name: Some("policy-probe".into()),
            ..ObjectMeta::default()
        },
        spec: StageApprovalSpec {
            rollout: "probe".into(),
            rollout_uid: "00000000-0000-0000-0000-000000000000".into(),
            stage: "prod".into(),
            revision: "r1".into(),
            revision_digest: MADE_UP_DIGEST.into(),
            stage_digest: MADE_UP_DIGEST.into(),
            approver: User::ApproverBob.name().into(),
            reason: None,
        },
    };
    eventually("the approver policy is in force", PROGRESS, || async {
        tokio::time::timeout(CALL, approvals.create(&dry_run, &in_bobs_name))
            .await
            .expect("the hub answers")
            .err()
            .filter(|e| e.to_string().contains("spec.approver"))
    })
    .await;
    let rollouts: Api<ConfigRollout> = Api::namespaced(client(world, User::ApproverAlice), TEAM);
    let probe: ConfigRollout =
        serde_saphyr::from_str(&staged("policy-probe", &[("k", "v")], "")).expect("YAML");
    eventually("the spec-author policy is in force", PROGRESS, || async {
        let admitted = tokio::time::timeout(CALL, rollouts.create(&dry_run, &probe))
            .await
            .expect("the hub answers")
            .expect("alice may create rollouts");
        (admitted.annotations().get(SPEC_AUTHOR).map(String::as_str)
            == Some(&format!("1 {}", User::ApproverAlice.name())))
        .then_some(())
    })
    .await;
    let configmaps: Api<ConfigMap> = Api::namespaced(world.hub.clone(), TEAM);
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("configrollout.dev/source".to_owned(), "true".to_owned());
    let labelled = ConfigMap {
        metadata: ObjectMeta {
            name: Some("source-policy-probe".into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    eventually("the source-author policy is in force", PROGRESS, || async {
        let admitted = tokio::time::timeout(CALL, configmaps.create(&dry_run, &labelled))
            .await
            .expect("the hub answers")
            .expect("the admin may create ConfigMaps");
        (admitted
            .annotations()
            .get("configrollout.dev/data-author")
            .map(String::as_str)
            == Some("1 admin"))
        .then_some(())
    })
    .await;
}

// ----------------------------------------------------------------------------------------
// Scenarios.

/// Before the policies are installed, a rollout that needs approvals says that the hub
/// lacks them, naming both.
async fn a_hub_without_the_policies_says_so(world: &World) {
    world
        .create_rollout(&staged("unguarded", &[("k", "v")], ""))
        .await;
    let missing = eventually("unguarded: AdmissionPolicies False", PROGRESS, || async {
        let c = condition(&world.rollout("unguarded").await, "AdmissionPolicies")?;
        (c.status == "False").then_some(c)
    })
    .await;
    assert_eq!(missing.reason, "PoliciesMissing", "{}", missing.message);
    assert!(
        missing.message.contains(APPROVER_POLICY) && missing.message.contains(AUTHOR_POLICY),
        "names both missing policies: {}",
        missing.message
    );
    assert!(
        missing.message.contains("no StageApproval counts"),
        "{}",
        missing.message
    );
    // Fail closed (issue 28): nothing binds spec.approver to its creator yet, so an
    // approval (here a truthful one) is not counted, and the rollout says why.
    let waiting = world
        .wait_phase("unguarded", "AwaitingApproval", PROGRESS)
        .await;
    approve(
        world,
        User::ApproverAlice,
        &waiting,
        "prod",
        "unguarded-early",
    )
    .await;
    let refused = eventually(
        "unguarded: the approval is not counted",
        PROGRESS,
        || async {
            let c = condition(&world.rollout("unguarded").await, "AwaitingApproval")?;
            (c.reason == "ApprovalRefused").then_some(c)
        },
    )
    .await;
    assert!(
        refused
            .message
            .contains("approval unguarded-early by approver-alice not counted"),
        "{}",
        refused.message
    );
    assert_eq!(
        stage(&world.rollout("unguarded").await, "prod").approval,
        None
    );
    assert!(world.target_data("region-2", "unguarded").await.is_none());
}

/// Once installed, the same rollout reports them present (the controller looks again within
/// seconds while the approver policy is missing), and approvals count from then on.
async fn the_hub_with_the_policies_says_so(world: &World) {
    let deadline = PROGRESS + Duration::from_secs(60);
    let present = eventually("unguarded: AdmissionPolicies True", deadline, || async {
        let c = condition(&world.rollout("unguarded").await, "AdmissionPolicies")?;
        conditions::is_true(&c).then_some(c)
    })
    .await;
    assert!(!present.message.contains("missing"), "{}", present.message);
    // The approval made before the policy was in place still does not count (nothing
    // checked who made it); one made now does.
    let refused = eventually(
        "unguarded: the early approval is refused",
        PROGRESS,
        || async {
            let c = condition(&world.rollout("unguarded").await, "AwaitingApproval")?;
            c.message
                .contains("made before the approver policy was installed")
                .then_some(c)
        },
    )
    .await;
    assert!(
        refused.message.contains("unguarded-early"),
        "{}",
        refused.message
    );
    let waiting = world.rollout("unguarded").await;
    approve(
        world,
        User::ApproverAlice,
        &waiting,
        "prod",
        "unguarded-now",
    )
    .await;
    let done = world.wait_phase("unguarded", "Complete", PROGRESS).await;
    assert_eq!(
        stage(&done, "prod")
            .approval
            .as_ref()
            .map(|a| a.name.as_str()),
        Some("unguarded-now")
    );
}

/// The author annotation is the apiserver's: what alice writes into it herself, on
/// creation or afterwards, is overwritten with who really changed the spec.
async fn the_apiserver_stamps_the_spec_author(world: &World) {
    let name = "authored";
    let alice: Api<ConfigRollout> = Api::namespaced(client(world, User::ApproverAlice), TEAM);
    let mut rollout: ConfigRollout =
        serde_saphyr::from_str(&staged(name, &[("limit", "10")], "")).expect("YAML");
    // A forged author on creation is replaced.
    rollout
        .annotations_mut()
        .insert(SPEC_AUTHOR.into(), User::ApproverBob.name().into());
    let created = within(
        "alice creates a rollout",
        alice.create(&PostParams::default(), &rollout),
    )
    .await;
    assert_eq!(
        created.annotations().get(SPEC_AUTHOR).map(String::as_str),
        Some("1 approver-alice")
    );

    change_data(world, name, serde_json::json!({"limit": "20"})).await;
    let stamp = world
        .rollout(name)
        .await
        .annotations()
        .get(SPEC_AUTHOR)
        .cloned();
    assert_eq!(
        stamp.as_deref(),
        Some("1 approver-alice\n2 admin"),
        "each change is listed"
    );

    // Alice rewrites only the annotation: admitted, and nothing changes.
    let forge = serde_json::json!({"metadata": {"annotations": {SPEC_AUTHOR: "approver-bob"}}});
    within(
        "alice rewrites the author",
        alice.patch(name, &PatchParams::default(), &Patch::Merge(&forge)),
    )
    .await;
    assert_eq!(author_of(world, name).await.as_deref(), Some("admin"));
    // Nor can she remove it.
    let erase = serde_json::json!({"metadata": {"annotations": {SPEC_AUTHOR: null}}});
    within(
        "alice removes the author",
        alice.patch(name, &PatchParams::default(), &Patch::Merge(&erase)),
    )
    .await;
    assert_eq!(author_of(world, name).await.as_deref(), Some("admin"));
    // Pausing and resuming someone else's rollout changes nothing it declares: she does
    // not become the author (so the real author cannot approve behind her).
    for paused in [true, false] {
        let pause = serde_json::json!({"spec": {"paused": paused}});
        within(
            "alice pauses or resumes",
            alice.patch(name, &PatchParams::default(), &Patch::Merge(&pause)),
        )
        .await;
        assert_eq!(author_of(world, name).await.as_deref(), Some("admin"));
    }
    // Changing the spec herself makes her the author again.
    let change = serde_json::json!({"spec": {"data": {"limit": "30"}}});
    within(
        "alice changes the spec",
        alice.patch(name, &PatchParams::default(), &Patch::Merge(&change)),
    )
    .await;
    assert_eq!(
        author_of(world, name).await.as_deref(),
        Some("approver-alice")
    );
}

/// The rollout edited in quick succession above carries on: its latest spec is a
/// revision, published to the canary, waiting for its approval.
async fn the_authored_rollout_carries_on(world: &World) {
    let name = "authored";
    let waiting = eventually(
        "authored: the latest spec awaits approval",
        PROGRESS,
        || async {
            let rollout = world.rollout(name).await;
            (phase_of(&rollout).as_deref() == Some("AwaitingApproval")
                && world.target_data("region-1", name).await == Some(data(&[("limit", "30")])))
            .then_some(rollout)
        },
    )
    .await;
    let revisions: Vec<&str> = waiting
        .status
        .iter()
        .flat_map(|status| &status.history)
        .map(|record| record.name.as_str())
        .collect();
    assert_eq!(revisions.last().copied(), revision_of(&waiting));
}

/// (a) Nobody approves in someone else's name.
async fn an_approval_in_someone_elses_name_is_refused(world: &World) {
    world
        .create_rollout(&staged("impersonated", &[("k", "v")], ""))
        .await;
    let waiting = world
        .wait_phase("impersonated", "AwaitingApproval", PROGRESS)
        .await;
    let mut spec = approving(&waiting, "prod", User::ApproverAlice);
    spec.approver = User::ApproverBob.name().into();
    let error = submit(world, User::ApproverAlice, "impersonated-by-alice", spec)
        .await
        .expect_err("refused at admission");
    let text = error.to_string();
    assert!(text.contains("spec.approver"), "names the field: {text}");
    assert!(
        text.contains("approver-alice") && text.contains("approver-bob"),
        "{text}"
    );
    let stored = within(
        "read the refused approval",
        Api::<StageApproval>::namespaced(world.hub.clone(), TEAM).get_opt("impersonated-by-alice"),
    )
    .await;
    assert!(stored.is_none(), "a refused approval is not stored");
}

/// (b) With four-eyes, the author's own approval does not count, and says why; a second
/// person's does.
async fn four_eyes_refuses_the_authors_own_approval(world: &World) {
    let name = "four-eyes";
    let counters = WriteCounter::start_in(world, &PROD, name).await;
    let alice: Api<ConfigRollout> = Api::namespaced(client(world, User::ApproverAlice), TEAM);
    let rollout: ConfigRollout =
        serde_saphyr::from_str(&staged(name, &[("limit", "10")], "  fourEyes: true\n"))
            .expect("YAML");
    within(
        "alice creates a four-eyes rollout",
        alice.create(&PostParams::default(), &rollout),
    )
    .await;
    assert_eq!(
        author_of(world, name).await.as_deref(),
        Some("approver-alice")
    );
    let waiting = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;

    let own = "four-eyes-prod-by-alice";
    approve(world, User::ApproverAlice, &waiting, "prod", own).await;
    let refused = eventually("alice's approval is refused", PROGRESS, || async {
        let c = condition(&world.rollout(name).await, "AwaitingApproval")?;
        (conditions::is_true(&c) && c.message.contains(own)).then_some(c.message)
    })
    .await;
    assert!(
        refused.matches("approver-alice").count() >= 2,
        "names the approver and the author: {refused}"
    );
    let event = event(world, name, "ApprovalRefused").await;
    let note = event.message.unwrap_or_default();
    assert!(note.contains("approver-alice"), "{note}");
    let still = world.rollout(name).await;
    assert_eq!(phase_of(&still).as_deref(), Some("AwaitingApproval"));
    assert_eq!(stage(&still, "prod").approval, None);
    assert_untouched(world, name, &counters).await;

    approve(
        world,
        User::ApproverBob,
        &waiting,
        "prod",
        "four-eyes-prod-by-bob",
    )
    .await;
    let done = world.wait_condition(name, "Complete", PROGRESS).await;
    let record = stage(&done, "prod").approval.clone().expect("recorded");
    assert_eq!(record.approver, "approver-bob");
    assert_eq!(record.name, "four-eyes-prod-by-bob");
    for region in PROD {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("limit", "10")])),
            "{region}"
        );
    }
}

/// Issue 28: two people changed a four-eyes rollout before the controller declared from
/// it: alice's change was refused as invalid (a gate condition that does not parse) and
/// the admin fixed it, so the revision declared carries alice's value. Both are its
/// authors; neither may approve it, and a third person's (bob's) approval goes through.
async fn both_editors_of_a_fixed_change_are_its_authors(world: &World) {
    let name = "two-editors";
    world
        .create_rollout(&staged(name, &[("limit", "10")], "  fourEyes: true\n"))
        .await;
    world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    let alice: Api<ConfigRollout> = Api::namespaced(client(world, User::ApproverAlice), TEAM);
    let broken = serde_json::json!({"spec": {
        "data": {"limit": "99"},
        "gates": [{"name": "errors", "query": "vector(0)", "condition": "result ~ 1",
                   "interval": "10s", "count": 1}],
    }});
    within(
        "alice changes the limit, with a gate that does not parse",
        alice.patch(name, &PatchParams::default(), &Patch::Merge(&broken)),
    )
    .await;
    world.wait_condition(name, "InvalidSpec", PROGRESS).await;
    let fixed = serde_json::json!({"spec": {"gates": null}});
    within(
        "the admin removes the broken gate",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&fixed)),
    )
    .await;
    let (waiting, r2) = awaiting_approval_of(world, name, "r2").await;
    assert_eq!(r2.authors, ["approver-alice", "admin"], "{r2:?}");
    assert_eq!(r2.authors_unknown, None);

    for (user, approval) in [
        (User::ApproverAlice, "two-editors-by-alice"),
        (User::Admin, "two-editors-by-admin"),
    ] {
        approve(world, user, &waiting, "prod", approval).await;
        let refused = eventually("the author's approval is refused", PROGRESS, || async {
            let c = condition(&world.rollout(name).await, "AwaitingApproval")?;
            c.message.contains(approval).then_some(c.message)
        })
        .await;
        assert!(
            refused.contains(&format!("{} changed what r2 declares", user.name())),
            "{refused}"
        );
    }
    for region in PROD {
        assert_eq!(
            world.target_data(region, name).await,
            None,
            "{region}: something reached the approval stage"
        );
    }
    approve(
        world,
        User::ApproverBob,
        &waiting,
        "prod",
        "two-editors-by-bob",
    )
    .await;
    world.wait_condition(name, "Complete", PROGRESS).await;
    for region in PROD {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("limit", "99")])),
            "{region}"
        );
    }
}

/// Issue 28: the author of a change approved it under four-eyes by editing the
/// `fromConfigMap` source of someone else's rollout. The source's editor is stamped by
/// the apiserver (`policies/mutating/source-author.yaml`) and recorded among the authors
/// of the revision it declared; her approval of it is refused, naming both users, and
/// nothing of it reaches the approval stage; a second person's approval goes through.
async fn an_editor_of_the_source_may_not_approve_what_she_changed(world: &World) {
    let name = "sourced";
    let source = "sourced-src";
    let configmaps: Api<ConfigMap> = Api::namespaced(world.hub.clone(), TEAM);
    let mut labels = std::collections::BTreeMap::new();
    labels.insert("configrollout.dev/source".to_owned(), "true".to_owned());
    let created = within(
        "the admin creates the source",
        configmaps.create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some(source.into()),
                    labels: Some(labels),
                    ..ObjectMeta::default()
                },
                data: Some(data(&[("limit", "1")])),
                ..ConfigMap::default()
            },
        ),
    )
    .await;
    assert_eq!(
        created
            .annotations()
            .get("configrollout.dev/data-author")
            .map(String::as_str),
        Some("1 admin"),
        "the apiserver stamps the source's author"
    );
    let yaml = staged(name, &[("unused", "x")], "  fourEyes: true\n").replace(
        "  data:\n    unused: \"x\"\n",
        &format!("  fromConfigMap: {{name: {source}}}\n"),
    );
    world.create_rollout(&yaml).await;
    world.wait_phase(name, "AwaitingApproval", PROGRESS).await;

    // Alice may edit ConfigMaps in the namespace: she changes the source.
    let alice_maps: Api<ConfigMap> = Api::namespaced(client(world, User::ApproverAlice), TEAM);
    let edit = serde_json::json!({"data": {"limit": "2"}});
    let edited = within(
        "alice edits the source",
        alice_maps.patch(source, &PatchParams::default(), &Patch::Merge(&edit)),
    )
    .await;
    assert_eq!(
        edited
            .annotations()
            .get("configrollout.dev/data-author")
            .map(String::as_str),
        Some("1 admin\n2 approver-alice")
    );
    let (waiting, r2) = awaiting_approval_of(world, name, "r2").await;
    // The rollout's own stamp lists no change since r1: only the source's editor.
    assert_eq!(r2.authors, ["approver-alice"], "{r2:?}");

    let own = "sourced-prod-by-alice";
    approve(world, User::ApproverAlice, &waiting, "prod", own).await;
    let refused = eventually("alice's approval is refused", PROGRESS, || async {
        let c = condition(&world.rollout(name).await, "AwaitingApproval")?;
        (conditions::is_true(&c) && c.message.contains(own)).then_some(c.message)
    })
    .await;
    assert!(
        refused.contains("approver-alice changed what r2 declares (authors: approver-alice)"),
        "{refused}"
    );
    let event = event(world, name, "ApprovalRefused").await;
    assert!(
        event.message.unwrap_or_default().contains("approver-alice"),
        "the Event names her"
    );
    for region in PROD {
        assert_eq!(
            world.target_data(region, name).await,
            None,
            "{region}: nothing reached the approval stage"
        );
    }
    approve(
        world,
        User::ApproverBob,
        &waiting,
        "prod",
        "sourced-prod-by-bob",
    )
    .await;
    world.wait_condition(name, "Complete", PROGRESS).await;
    for region in PROD {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("limit", "2")])),
            "{region}"
        );
    }
}

/// (c) Status is a report: writing an approval into it (even as the admin, even with the
/// stage marked running) publishes nothing.
async fn a_forged_status_approves_nothing(world: &World) {
    let name = "forged";
    let counters = WriteCounter::start_in(world, &PROD, name).await;
    world
        .create_rollout(&staged(name, &[("mode", "a")], ""))
        .await;
    let waiting = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    let status = waiting.status.as_ref().expect("status");
    let prod = status
        .stages
        .iter()
        .position(|s| s.name == "prod")
        .expect("prod stage");
    let mut stages = serde_json::to_value(&status.stages).expect("stages JSON");
    stages[prod]["state"] = serde_json::json!("Progressing");
    stages[prod]["approval"] = serde_json::json!({
        "name": "forged-approval",
        "approver": "approver-bob",
        "reason": "written into status by hand",
        "approvedAt": Timestamp::now().to_string(),
    });
    let forgery = serde_json::json!({"status": {"phase": "Progressing", "stages": stages}});
    let forged = within(
        "forge an approval in status",
        world
            .rollouts()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&forgery)),
    )
    .await;
    assert!(
        stage(&forged, "prod").approval.is_some(),
        "the forgery was stored"
    );

    let corrected = eventually("the controller corrects the status", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let prod = stage(&rollout, "prod");
        (phase_of(&rollout).as_deref() == Some("AwaitingApproval")
            && prod.state == StageState::AwaitingApproval
            && prod.approval.is_none())
        .then_some(rollout)
    })
    .await;
    assert!(condition_true(&corrected, "AwaitingApproval"));
    assert_untouched(world, name, &counters).await;
}

/// (d) An approval made in advance for a revision that does not exist yet, with a digest
/// nobody could know, approves nothing when that revision comes.
async fn an_approval_made_in_advance_approves_nothing(world: &World) {
    // Made in advance for r2, with a digest nobody could know yet.
    let name = "early";
    world
        .create_rollout(&staged(name, &[("mode", "a")], ""))
        .await;
    let r1 = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    let mut advance = approving(&r1, "prod", User::ApproverBob);
    advance.revision = "r2".into();
    advance.revision_digest = MADE_UP_DIGEST.into();
    submit(world, User::ApproverBob, "early-a-r2-in-advance", advance)
        .await
        .expect("admitted: it is in bob's name");
    let counters = WriteCounter::start_in(world, &PROD, name).await;
    change_data(world, name, serde_json::json!({"mode": "b"})).await;
    let r2 = eventually("early: r2 awaits approval", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        (revision_of(&rollout) == Some("r2")
            && phase_of(&rollout).as_deref() == Some("AwaitingApproval"))
        .then_some(rollout)
    })
    .await;
    assert_eq!(stage(&r2, "prod").approval, None);
    assert_untouched(world, name, &counters).await;
    // Named so that it sorts after the one made in advance: if that one counted, it
    // would be the approval recorded.
    approve(world, User::ApproverBob, &r2, "prod", "early-b-r2").await;
    let done = world.wait_condition(name, "Complete", PROGRESS).await;
    assert_eq!(
        stage(&done, "prod")
            .approval
            .as_ref()
            .map(|a| a.name.as_str()),
        Some("early-b-r2"),
        "the approval made in advance counted"
    );
    assert_eq!(revision_of(&done), Some("r2"));
    for region in PROD {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("mode", "b")])),
            "{region}"
        );
    }
}

/// (d) An approval left over from a rollout deleted and created again under the same
/// name approves nothing, even one made afterwards with everything right but the UID.
async fn an_approval_of_a_deleted_rollout_approves_nothing(world: &World) {
    let name = "reborn";
    world
        .create_rollout(&staged(name, &[("mode", "old")], ""))
        .await;
    let old = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    let old_uid = old.uid().expect("uid");
    approve(world, User::ApproverBob, &old, "prod", "reborn-a-old").await;
    world.wait_condition(name, "Complete", PROGRESS).await;
    within(
        "delete the rollout",
        world.rollouts().delete(name, &DeleteParams::default()),
    )
    .await;
    eventually("reborn is gone", PROGRESS, || async {
        within("read reborn", world.rollouts().get_opt(name))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let counters = WriteCounter::start_in(world, &PROD, name).await;
    world
        .create_rollout(&staged(name, &[("mode", "new")], ""))
        .await;
    let new = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    assert_ne!(new.uid().as_deref(), Some(old_uid.as_str()));
    assert_eq!(
        revision_of(&new),
        Some("r1"),
        "the same revision name again"
    );
    // Everything right but the UID, made after the new revision was declared.
    let mut stale = approving(&new, "prod", User::ApproverBob);
    stale.rollout_uid = old_uid;
    submit(world, User::ApproverBob, "reborn-b-old-uid", stale)
        .await
        .expect("admitted: it is in bob's name");
    let still = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    assert_eq!(stage(&still, "prod").approval, None);
    for (region, counter) in PROD.iter().zip(&counters) {
        assert_eq!(counter.writes(), 0, "{region} written");
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("mode", "old")])),
            "{region} still holds what the old rollout published"
        );
    }
    approve(world, User::ApproverBob, &new, "prod", "reborn-c-new").await;
    let done = world.wait_condition(name, "Complete", PROGRESS).await;
    assert_eq!(
        stage(&done, "prod")
            .approval
            .as_ref()
            .map(|a| a.name.as_str()),
        Some("reborn-c-new"),
        "an approval of the deleted rollout counted"
    );
    for region in PROD {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("mode", "new")])),
            "{region}"
        );
    }
}

/// (e) A retry dated an hour ahead is refused and resumes nothing; asked again with the
/// current time, as the refusal says, it resumes.
async fn a_retry_dated_ahead_is_refused(world: &World) {
    let name = "retry-ahead";
    world
        .create_rollout(&approval_first(name, &[("k", "v")]))
        .await;
    world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    request(
        world,
        name,
        &[(ABORT_ANNOTATION, plugin_time(Timestamp::now()))],
    )
    .await;
    let halted = world.wait_phase(name, "Halted", PROGRESS).await;
    let why = condition(&halted, "Halted").expect("Halted condition");
    assert_eq!(why.reason, "Aborted");

    request(world, name, &[(RETRY_ANNOTATION, plugin_time(ahead(3600)))]).await;
    let refused = event(world, name, "ControlRefused").await;
    assert!(
        refused
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("retry"),
        "{refused:?}"
    );
    let after = world.rollout(name).await;
    assert_eq!(phase_of(&after).as_deref(), Some("Halted"));
    assert!(events(world, name, "Retried").await.is_empty());

    // Asked again with the current time, as the refusal says (a second after the halt,
    // so that the request is dated after it even to the second).
    second_after(why.last_transition_time.0).await;
    request(
        world,
        name,
        &[(RETRY_ANNOTATION, plugin_time(Timestamp::now()))],
    )
    .await;
    event(world, name, "Retried").await;
    world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
}

/// Waits until the clock reads a later second than `at`.
async fn second_after(at: Timestamp) {
    let next = at
        .checked_add(SignedDuration::from_secs(1))
        .expect("time")
        .as_second();
    eventually("the clock passes a second", CALL, || async {
        (Timestamp::now().as_second() >= next).then_some(())
    })
    .await;
}

/// (e) RFC 3339 allows fractions of a second, and `kubectl annotate` with `date
/// --rfc-3339=ns` writes them: such a request also acts exactly once. An abort so dated
/// stops the rollout once; a later retry, also so dated, resumes it.
async fn a_request_dated_to_the_nanosecond_acts_once(world: &World) {
    let name = "fractional";
    world
        .create_rollout(&approval_first(name, &[("k", "v")]))
        .await;
    world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    request(
        world,
        name,
        &[(ABORT_ANNOTATION, Timestamp::now().to_string())],
    )
    .await;
    let halted = world.wait_phase(name, "Halted", PROGRESS).await;
    let why = condition(&halted, "Halted").expect("Halted condition");
    assert_eq!(why.reason, "Aborted");
    second_after(why.last_transition_time.0).await;
    request(
        world,
        name,
        &[(RETRY_ANNOTATION, Timestamp::now().to_string())],
    )
    .await;
    event(world, name, "Retried").await;
    world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    assert_eq!(
        events(world, name, "Aborted").await.len(),
        1,
        "the abort acted once"
    );
}

/// (e) An abort stops a progressing rollout (rolling back its canary) and keeps it
/// stopped, although a retry dated later than the abort (within the accepted skew) is
/// pending beside it.
async fn an_abort_outlasts_a_retry_dated_later(world: &World) {
    let name = "abort-wins";
    let counters = WriteCounter::start_in(world, &PROD, name).await;
    // A gate that passes at every sample but needs minutes of them: the canary stays
    // Progressing (Verifying) for the whole scenario.
    let gate = "  gates:\n    - {name: slow, query: 'vector(0)', condition: result < 1, interval: 1s, count: 300}\n";
    let yaml = staged(name, &[("k", "v")], gate).replace(
        "{name: canary, regions: {names: [region-1]}}",
        "{name: canary, regions: {names: [region-1]}, gates: [slow]}",
    );
    world.create_rollout(&yaml).await;
    eventually("abort-wins: the canary verifies", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        (phase_of(&rollout).as_deref() == Some("Progressing")
            && stage(&rollout, "canary").state == StageState::Verifying)
            .then_some(())
    })
    .await;
    let retry_at = ahead(20);
    request(
        world,
        name,
        &[
            (RETRY_ANNOTATION, plugin_time(retry_at)),
            (ABORT_ANNOTATION, plugin_time(Timestamp::now())),
        ],
    )
    .await;
    // The canary was published, so the abort rolls it back; a retry resumes only a
    // Halted rollout, never a rolled-back one.
    let halted = world.wait_phase(name, "RolledBack", PROGRESS).await;
    assert_eq!(
        condition(&halted, "Halted").map(|c| c.reason).as_deref(),
        Some("Aborted")
    );
    // Past the retry's date and a few reconciles more, it is still rolled back.
    let until = retry_at
        .checked_add(SignedDuration::from_secs(10))
        .expect("time");
    let period = Duration::try_from(until.duration_since(Timestamp::now())).unwrap_or_default();
    holds("abort-wins stays aborted", period, || async {
        let rollout = world.rollout(name).await;
        let phase = phase_of(&rollout);
        if phase.as_deref() != Some("RolledBack") {
            return Err(format!("phase {phase:?}, conditions {:?}", rollout.status));
        }
        Ok(())
    })
    .await;
    assert!(
        events(world, name, "Retried").await.is_empty(),
        "the pending retry resumed the aborted rollout"
    );
    assert_untouched(world, name, &counters).await;
}

/// (f) A regional override made from a laptop whose clock runs a year ahead holds a
/// stamp that would win every merge of its key: the rollout halts and says so, instead of
/// reporting the old value as complete. (The override is signed like any the plugin
/// makes: a companion edited by hand is refused as tampered, `controller.rs`.)
async fn a_stamp_from_the_future_halts_the_rollout(world: &World) {
    let name = "stamped";
    let yaml =
        staged(name, &[("limit", "10"), ("mode", "a")], "").replace(", approval: Required", "");
    world.create_rollout(&yaml).await;
    world.wait_condition(name, "Complete", PROGRESS).await;

    let secrets: Api<Secret> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let secret = within(
        "read the digest key",
        secrets.get("configrollout-digest-key"),
    )
    .await;
    let key = DigestKey::new(&secret.data.expect("digest key data")["key"].0).expect("key");
    let now_ms = u64::try_from(Timestamp::now().as_millisecond()).expect("after 1970");
    let year_ahead = now_ms + 365 * 24 * 3600 * 1000;
    let stamp = Stamp::new(
        year_ahead,
        0,
        WriterId::override_by("laptop").expect("writer"),
    );
    let changes = BTreeMap::from([("limit".to_owned(), Some("laptop-7319".to_owned()))]);
    within(
        "override limit from a clock a year ahead",
        write_override(&world.region("region-2"), &key, APP, name, stamp, &changes),
    )
    .await;

    change_data(world, name, serde_json::json!({"limit": "20"})).await;
    let halted = eventually("stamped: r2 halted", PROGRESS, || async {
        let rollout = world.rollout(name).await;
        let r2 = revision_of(&rollout) == Some("r2");
        assert!(
            !(r2 && condition_true(&rollout, "Complete")),
            "reported r2 complete while region-2 holds the old value: {:?}",
            rollout.status
        );
        (r2 && phase_of(&rollout).as_deref() == Some("Halted")).then_some(rollout)
    })
    .await;
    let why = condition(&halted, "Halted").expect("Halted condition");
    assert_eq!(why.status, "True");
    assert_eq!(why.reason, "FutureStamps", "{}", why.message);
    assert!(
        why.message.contains("region-2 (1 key"),
        "names the region and the number of keys: {}",
        why.message
    );
    assert!(!why.message.contains("region-3"), "{}", why.message);
    assert!(
        !why.message.contains("laptop-7319"),
        "no value in the condition: {}",
        why.message
    );
    let region2 = region_status(&halted, "region-2").expect("region-2 in status");
    assert_ne!(
        region2.materialized.as_ref().map(|m| m.revision.as_str()),
        Some("r2"),
        "region-2 reported holding r2"
    );
    assert!(!condition_true(&halted, "Complete"));
}

// ----------------------------------------------------------------------------------------
// Leader failover.

/// Every write of named ConfigMaps in the `app` namespace of some regions, with the time
/// the test saw it, from watches started before them.
struct RegionWrites {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    seen: Arc<Mutex<Vec<RegionWrite>>>,
}

#[derive(Clone, Debug)]
struct RegionWrite {
    region: String,
    name: String,
    resource_version: String,
    seen_at: Timestamp,
}

impl RegionWrites {
    async fn start(world: &World, regions: &[&str], names: &[String]) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for region in regions {
            let api: Api<ConfigMap> = Api::namespaced(world.region(region), APP);
            let (established, watching) = tokio::sync::oneshot::channel();
            let (region, names, seen) = (region.to_string(), names.to_vec(), seen.clone());
            tasks.push(tokio::spawn(async move {
                use futures::StreamExt;
                let mut established = Some(established);
                let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(watcher::Event::InitDone) => {
                            if let Some(established) = established.take() {
                                let _ = established.send(());
                            }
                        }
                        Ok(watcher::Event::Apply(cm)) if names.contains(&cm.name_any()) => {
                            let write = RegionWrite {
                                region: region.clone(),
                                name: cm.name_any(),
                                resource_version: cm.resource_version().unwrap_or_default(),
                                seen_at: Timestamp::now(),
                            };
                            let mut seen = seen.lock().unwrap();
                            if !seen.iter().any(|w: &RegionWrite| {
                                w.region == write.region
                                    && w.resource_version == write.resource_version
                            }) {
                                seen.push(write);
                            }
                        }
                        _ => {}
                    }
                }
            }));
            within("establish the region watch", async {
                watching.await.map_err(|_| "watch ended")
            })
            .await;
        }
        Self { tasks, seen }
    }

    fn writes(&self) -> Vec<RegionWrite> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for RegionWrites {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One "region merged" line of a controller's JSON log.
#[derive(Debug)]
struct Merge {
    at: Timestamp,
    region: String,
    writes: u64,
    /// The region's digest after the merge.
    digest: String,
}

fn field<'a>(line: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    line.get(name)
        .or_else(|| line.get("fields").and_then(|f| f.get(name)))
}

/// `(time, message)` of every JSON line of a controller log.
fn log_lines(log: &str) -> Vec<(Timestamp, String, serde_json::Value)> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|line| {
            let at = field(&line, "timestamp")?.as_str()?.parse().ok()?;
            let message = field(&line, "message")?.as_str()?.to_owned();
            Some((at, message, line))
        })
        .collect()
}

/// Region merges that wrote something.
fn merges(log: &str) -> Vec<Merge> {
    log_lines(log)
        .into_iter()
        .filter(|(_, message, _)| message == "region merged")
        .filter_map(|(at, _, line)| {
            Some(Merge {
                at,
                region: field(&line, "region")?.as_str()?.to_owned(),
                writes: field(&line, "writes")?.as_u64()?,
                digest: field(&line, "digest")?.as_str()?.to_owned(),
            })
        })
        .filter(|merge| merge.writes > 0)
        .collect()
}

/// A process stopped with SIGSTOP, continued with SIGCONT when thawed or dropped (so a
/// failing assertion never leaves a frozen controller behind).
struct Frozen(Option<u32>);

impl Frozen {
    fn freeze(pid: u32) -> Self {
        signal(pid, "-STOP");
        Self(Some(pid))
    }

    fn thaw(mut self) {
        if let Some(pid) = self.0.take() {
            signal(pid, "-CONT");
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            signal(pid, "-CONT");
        }
    }
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid}: {status}");
}

async fn lease(world: &World) -> Option<Lease> {
    let api: Api<Lease> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    within("read the Lease", api.get_opt("configrollout-controller")).await
}

fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

/// (g) The leader is frozen in the middle of a three-stage rollout; once the standby
/// holds the Lease the old leader is continued, and writes nothing more: every region
/// write after the hand-over is the new leader's, and the rollout completes with each
/// target written once.
async fn a_frozen_leader_writes_nothing_after_losing_the_lease(
    world: &World,
    mut leader: LabChild,
) -> LabChild {
    let name = "failover";
    let held = eventually("a leader", PROGRESS, || async { lease(world).await }).await;
    assert_eq!(holder(&held), Some(LEADER));
    let probe = free_local_addr();
    let mut standby = world.start_controller_on(STANDBY, &probe);
    let http = reqwest::Client::builder()
        .timeout(CALL)
        .build()
        .expect("http client");
    eventually("the standby is ready", PROGRESS, || async {
        let ready = http
            .get(format!("http://{probe}/readyz"))
            .send()
            .await
            .ok()?;
        ready.status().is_success().then_some(())
    })
    .await;

    let names = vec![name.to_owned(), format!("{name}{COMPANION_SUFFIX}")];
    let writes = RegionWrites::start(world, &REGIONS, &names).await;
    let yaml = format!(
        "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata: {{name: {name}, namespace: {TEAM}}}\nspec:\n  target: {{namespace: {APP}, name: {name}}}\n  data: {{pool: \"8\", mode: \"a\"}}\n  stages:\n    - {{name: one, regions: {{names: [region-1]}}, pause: {{duration: 3s}}}}\n    - {{name: two, regions: {{names: [region-2]}}, pause: {{duration: 3s}}}}\n    - {{name: three, regions: {{names: [region-3]}}}}\n"
    );
    world.create_rollout(&yaml).await;
    let digest = eventually("failover: r1 declared", PROGRESS, || async {
        digest_of(&world.rollout(name).await, "r1")
    })
    .await;
    // Frozen once it has merged the first region and said so: what it does next, it
    // does only after the freeze.
    eventually("the leader merges region-1", PROGRESS, || async {
        merges(&leader.log())
            .iter()
            .any(|merge| merge.region == "region-1" && merge.digest == digest)
            .then_some(())
    })
    .await;
    let frozen = Frozen::freeze(leader.program_pid().expect("leader pid"));
    let frozen_at = Timestamp::now();

    let taken = eventually("the standby takes the Lease", PROGRESS, || async {
        let lease = lease(world).await?;
        (holder(&lease) == Some(STANDBY)).then_some(lease)
    })
    .await;
    // Taken before the signal: the leader may log before `kill` returns.
    let thawed_at = Timestamp::now();
    frozen.thaw();
    let handed_over_at = taken
        .spec
        .as_ref()
        .and_then(|spec| spec.acquire_time.as_ref())
        .map(|time| time.0)
        .expect("acquireTime");
    assert!(
        handed_over_at > frozen_at,
        "taken over while the leader ran"
    );

    let done = world.wait_condition(name, "Complete", PROGRESS).await;
    // The old leader ran again and noticed it no longer leads (or ended).
    let started = tokio::time::Instant::now();
    loop {
        let stepped_down = log_lines(&leader.log())
            .iter()
            .any(|(at, message, _)| *at > thawed_at && message.contains("not leading"));
        if stepped_down || !leader.is_running() {
            break;
        }
        assert!(
            started.elapsed() < PROGRESS,
            "the old leader did not step down:\n{}",
            leader.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        lease(world).await.as_ref().and_then(holder),
        Some(STANDBY),
        "the old leader took the Lease back"
    );

    // The old leader's own account: no write after the freeze.
    let late: Vec<Merge> = merges(&leader.log())
        .into_iter()
        .filter(|merge| merge.at > frozen_at)
        .collect();
    assert!(
        late.is_empty(),
        "the old leader wrote after it was frozen (Lease handed over at {handed_over_at}, \
         thawed at {thawed_at}): {late:?}"
    );

    // The regions' account.
    let seen = writes.writes();
    let margin = SignedDuration::from_millis(500);
    let frozen_window: Vec<&RegionWrite> = seen
        .iter()
        .filter(|w| w.seen_at > frozen_at + margin && w.seen_at < handed_over_at)
        .collect();
    assert!(
        frozen_window.is_empty(),
        "written while the leader was frozen and before the standby led: {frozen_window:?}"
    );
    let standby_merges = merges(&standby.log());
    for region in REGIONS {
        let after: Vec<&RegionWrite> = seen
            .iter()
            .filter(|w| w.region == region && w.seen_at >= handed_over_at)
            .collect();
        let by_standby: u64 = standby_merges
            .iter()
            .filter(|merge| merge.region == region && merge.at >= handed_over_at)
            .map(|merge| merge.writes)
            .sum();
        assert!(
            after.len() as u64 <= by_standby,
            "{region}: {} writes after the hand-over, {by_standby} of them the new \
             leader's: {after:?}",
            after.len()
        );
        let target_writes = seen
            .iter()
            .filter(|w| w.region == region && w.name == name)
            .count();
        assert_eq!(target_writes, 1, "{region}: target written once: {seen:?}");
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("pool", "8"), ("mode", "a")])),
            "{region}"
        );
    }
    let stages: Vec<&str> = done
        .status
        .iter()
        .flat_map(|status| &status.stages)
        .filter(|stage| stage.passed_at.is_some())
        .map(|stage| stage.name.as_str())
        .collect();
    assert_eq!(stages, vec!["one", "two", "three"], "no stage skipped");
    assert!(standby.is_running());
    leader.stop();
    standby
}

/// Issue 28: under GitOps every change is applied by the sync's identity. A platform
/// names it as a relay in the spec-author policy (here the admin plays Argo CD's
/// ServiceAccount): its change is stamped with the person in its
/// `configrollout.dev/change-author` annotation, so four-eyes applies to that person;
/// a relayed change naming nobody is stamped with nobody, and every approval of it is
/// refused rather than counted.
async fn a_gitops_relay_stamps_the_person_it_relays(world: &World) {
    let shipped = configrollout_e2e::repository_root().join("policies/mutating/spec-author.yaml");
    let text = std::fs::read_to_string(&shipped).expect("the shipped policy");
    assert!(
        text.contains("expression: \"[]\""),
        "the relay list is empty as shipped"
    );
    let relaying = text.replace("expression: \"[]\"", "expression: \"['admin']\"");
    let path = std::env::temp_dir().join(format!("spec-author-relay-{}.yaml", std::process::id()));
    std::fs::write(&path, relaying).expect("write the platform's copy");
    world
        .lab
        .apply(HUB, User::Admin, &path)
        .await
        .expect("the platform names its relay");
    let with_person = |name: &str, person: Option<&str>, pairs: &[(&str, &str)]| {
        let mut rollout: ConfigRollout =
            serde_saphyr::from_str(&staged(name, pairs, "  fourEyes: true\n")).expect("YAML");
        if let Some(person) = person {
            rollout
                .annotations_mut()
                .insert("configrollout.dev/change-author".into(), person.into());
        }
        rollout
    };
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let probe = with_person("relay-probe", Some("approver-bob"), &[("k", "v")]);
    eventually("the relay is in force", PROGRESS, || async {
        let admitted = within(
            "dry-run as the relay",
            world.rollouts().create(&dry_run, &probe),
        )
        .await;
        let author = admitted
            .annotations()
            .get(SPEC_AUTHOR)
            .and_then(|s| latest_author(s));
        (author.as_deref() == Some("approver-bob")).then_some(())
    })
    .await;

    let name = "relayed";
    within(
        "the relay applies alice's change",
        world.rollouts().create(
            &PostParams::default(),
            &with_person(name, Some("approver-alice"), &[("limit", "1")]),
        ),
    )
    .await;
    assert_eq!(
        author_of(world, name).await.as_deref(),
        Some("approver-alice")
    );
    let waiting = world.wait_phase(name, "AwaitingApproval", PROGRESS).await;
    approve(
        world,
        User::ApproverAlice,
        &waiting,
        "prod",
        "relayed-by-alice",
    )
    .await;
    let refused = eventually(
        "alice's approval of her own change is refused",
        PROGRESS,
        || async {
            let c = condition(&world.rollout(name).await, "AwaitingApproval")?;
            c.message.contains("relayed-by-alice").then_some(c.message)
        },
    )
    .await;
    assert!(refused.contains("approver-alice refused"), "{refused}");
    approve(world, User::ApproverBob, &waiting, "prod", "relayed-by-bob").await;
    world.wait_condition(name, "Complete", PROGRESS).await;

    // The relay applies a change that names nobody: nobody is its author, and four-eyes
    // counts no approval of it.
    let anonymous = serde_json::json!({
        "metadata": {"annotations": {"configrollout.dev/change-author": null}},
        "spec": {"data": {"limit": "2"}},
    });
    within(
        "the relay applies a change naming nobody",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&anonymous)),
    )
    .await;
    assert_eq!(author_of(world, name).await, None);
    let (r2, _) = awaiting_approval_of(world, name, "r2").await;
    approve(world, User::ApproverBob, &r2, "prod", "relayed-r2-by-bob").await;
    let refused = eventually("bob's approval is not counted", PROGRESS, || async {
        let c = condition(&world.rollout(name).await, "AwaitingApproval")?;
        c.message.contains("relayed-r2-by-bob").then_some(c.message)
    })
    .await;
    assert!(refused.contains("is not known"), "{refused}");
    for region in PROD {
        assert_eq!(
            world.target_data(region, name).await,
            Some(data(&[("limit", "1")])),
            "{region}: r2 reached the approval stage"
        );
    }
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvals_aborts_and_stamps_cannot_be_forged_or_outrun() {
    let world = World::start(LabOptions::default()).await;
    let_alice_author_rollouts(&world).await;
    let leader = world.start_controller(LEADER);
    a_hub_without_the_policies_says_so(&world).await;
    install_policies(&world).await;
    the_hub_with_the_policies_says_so(&world).await;
    the_apiserver_stamps_the_spec_author(&world).await;
    an_approval_in_someone_elses_name_is_refused(&world).await;
    four_eyes_refuses_the_authors_own_approval(&world).await;
    an_editor_of_the_source_may_not_approve_what_she_changed(&world).await;
    both_editors_of_a_fixed_change_are_its_authors(&world).await;
    a_forged_status_approves_nothing(&world).await;
    an_approval_made_in_advance_approves_nothing(&world).await;
    let controller = a_frozen_leader_writes_nothing_after_losing_the_lease(&world, leader).await;
    a_retry_dated_ahead_is_refused(&world).await;
    an_abort_outlasts_a_retry_dated_later(&world).await;
    the_authored_rollout_carries_on(&world).await;
    an_approval_of_a_deleted_rollout_approves_nothing(&world).await;
    a_request_dated_to_the_nanosecond_acts_once(&world).await;
    a_stamp_from_the_future_halts_the_rollout(&world).await;
    a_gitops_relay_stamps_the_person_it_relays(&world).await;
    controller.stop();
}
