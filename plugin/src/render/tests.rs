//! Snapshot tests of the renderings: representative statuses, written as the controller
//! writes them, and the exact text a person sees.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::tree::gate_node;
use super::*;
use configrollout_api::{
    CONTRACT_STAGE, ConfigRollout, GateStatus, RolloutPhase, StageState, conditions,
};

/// A rollout of three regions in two stages (prod needs an approval), one gate, with the
/// status given as YAML.
fn rollout(extra_spec: &str, status: &str) -> ConfigRollout {
    let yaml = format!(
        "\
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata:
  name: app
  namespace: team
  uid: 6a1f0f6e-1111-2222-3333-444455556666
  generation: 2
spec:
  target: {{namespace: app, name: app-config}}
  data: {{timeout_ms: \"300\"}}
  stages:
    - name: canary
      regions: {{names: [region-1]}}
      gates: [errors]
      pause: {{duration: 5m}}
    - name: prod
      regions: {{names: [region-2, region-3]}}
      approval: Required
  gates:
    - name: errors
      query: 'sum(rate(errors_total{{region=\"{{{{region}}}}\"}}[1m]))'
      condition: result < 0.01
      interval: 10s
      count: 3
  consumers:
    - {{kind: Deployment, name: app, delivery: Reload}}
{extra_spec}status:
  observedGeneration: 2
{status}"
    );
    serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("fixture parses: {e}\n{yaml}"))
}

const HISTORY: &str = "  history:
    - name: r1
      digest: hmac-sha256:1111
      declaredAt: 2026-12-01T09:00:00Z
      stamp: 1.0
      keysSet: 3
      outcome: Complete
    - name: r2
      digest: hmac-sha256:2222
      declaredAt: 2026-12-03T08:00:00Z
      stamp: 2.0
      keysSet: 1
";

fn mark(revision: &str, at: &str) -> String {
    format!("{{revision: {revision}, digest: hmac-sha256:2222, at: \"2026-12-03T08:{at}Z\"}}")
}

fn awaiting_prod() -> ConfigRollout {
    let status = format!(
        "  phase: AwaitingApproval
  revision: r2
  step: Single
  currentStage: prod
  progress: 1/3
  stages:
    - name: canary
      state: Passed
      startedAt: 2026-12-03T08:00:05Z
      verifiedAt: 2026-12-03T08:01:00Z
      passedAt: 2026-12-03T08:06:30Z
      gates:
        - name: errors
          region: region-1
          verdict: Passed
          successes: 3
          samples:
            - {{at: \"2026-12-03T08:01:10Z\", value: \"0.001\", verdict: Successful}}
            - {{at: \"2026-12-03T08:01:20Z\", value: \"0.002\", verdict: Successful}}
            - {{at: \"2026-12-03T08:01:30Z\", value: \"0\", verdict: Successful}}
            - {{at: \"2026-12-03T08:01:40Z\", value: \"0.001\", verdict: Successful}}
    - name: prod
      state: AwaitingApproval
  regions:
    - name: region-1
      stage: canary
      reachable: true
      materialized: {m1}
      delivered: {m2}
      activated: {m3}
      consumers: {{total: 30, delivered: 30, activated: 27}}
    - name: region-2
      stage: prod
      reachable: true
      materialized: {{revision: r1, at: \"2026-12-01T09:10:00Z\"}}
    - name: region-3
      stage: prod
      reachable: true
  conditions:
    - {{type: Progressing, status: \"True\", reason: RolloutProgressing, message: \"r2 (Single pass) at stage prod: 1/3 regions done\", lastTransitionTime: \"2026-12-03T08:00:05Z\"}}
    - {{type: AwaitingApproval, status: \"True\", reason: StageApprovalRequired, message: \"stage prod of r2 awaits a StageApproval\", lastTransitionTime: \"2026-12-03T08:06:30Z\"}}
    - {{type: Complete, status: \"False\", reason: AwaitingApproval, message: \"\", lastTransitionTime: \"2026-12-03T08:00:05Z\"}}
    - {{type: Ready, status: \"False\", reason: AwaitingApproval, message: \"waiting for an approval: stage prod of r2 awaits a StageApproval\", lastTransitionTime: \"2026-12-03T08:00:05Z\"}}
    - {{type: Reconciling, status: \"True\", reason: AwaitingApproval, message: \"waiting for an approval: stage prod of r2 awaits a StageApproval\", lastTransitionTime: \"2026-12-03T08:00:05Z\"}}
    - {{type: Stalled, status: \"False\", reason: AwaitingApproval, message: \"\", lastTransitionTime: \"2026-12-03T08:00:05Z\"}}
{HISTORY}",
        m1 = mark("r2", "00:10"),
        m2 = mark("r2", "00:40"),
        m3 = mark("r2", "00:55"),
    );
    rollout("", &status)
}

#[test]
fn awaiting_approval_shows_the_tree_and_who_can_approve() {
    let expected = "\
ConfigRollout team/app
  target:     ConfigMap app/app-config in every selected region
  phase:      AwaitingApproval   stage: prod   regions done: 1/3
  paused:     no   on failure: Halt   four-eyes: no
  waiting on: an approval of stage prod of r2 (digest 2222)
  unblocks:   an approver allowed to create stageapprovals in team: kubectl configrollout approve app -n team --stage prod --revision r2 --digest 2222
  condition:  Progressing (RolloutProgressing): r2 (Single pass) at stage prod: 1/3 regions done
  condition:  AwaitingApproval (StageApprovalRequired): stage prod of r2 awaits a StageApproval
revision r2 (Single pass), declared 2026-12-03T08:00:00Z, 1 keys set, 0 removed, digest hmac-sha256:2222
├─ stage canary: Passed (started 2026-12-03T08:00:05Z, verified 2026-12-03T08:01:00Z, passed 2026-12-03T08:06:30Z)
│  ├─ bake time: 5m
│  ├─ region region-1: materialized r2, delivered r2, activated r2, consumers 30/30 delivered, 27/30 activated
│  └─ gate errors (region-1): Passed, 3 successful of 3 needed, 0 failed, 0 inconclusive
│     ├─ sample 2026-12-03T08:01:20Z value 0.002 Successful
│     ├─ sample 2026-12-03T08:01:30Z value 0 Successful
│     └─ sample 2026-12-03T08:01:40Z value 0.001 Successful
└─ stage prod: AwaitingApproval
   ├─ approval: required, awaiting a StageApproval
   ├─ region region-2: materialized r1, delivered -, activated -
   └─ region region-3: materialized -, delivered -, activated -
";
    assert_eq!(render_get(&awaiting_prod()), expected);
}

#[test]
fn four_eyes_names_who_may_not_approve() {
    let mut rollout = awaiting_prod();
    rollout.spec.four_eyes = true;
    rollout.metadata.annotations = Some(
        [(SPEC_AUTHOR_ANNOTATION.to_owned(), "tenant-a".to_owned())]
            .into_iter()
            .collect(),
    );
    assert_eq!(
        waiting_on(&rollout).who,
        "an approver allowed to create stageapprovals in team, other than tenant-a (four-eyes): \
         kubectl configrollout approve app -n team --stage prod --revision r2 --digest 2222"
    );
    assert_eq!(awaiting_approval(&rollout), Some("prod".to_owned()));
    assert_eq!(
        four_eyes_refusal(&rollout, "tenant-a").as_deref(),
        Some(
            "four-eyes: you (tenant-a) changed the spec of configrollout team/app, so \
             someone else must approve it"
        )
    );
    assert_eq!(four_eyes_refusal(&rollout, "approver-alice"), None);
    rollout.spec.four_eyes = false;
    assert_eq!(four_eyes_refusal(&rollout, "tenant-a"), None);
}

#[test]
fn a_template_gate_names_its_template_and_generation() {
    let status = format!(
        "  phase: Progressing
  revision: r2
  step: Single
  currentStage: canary
  stages:
    - name: canary
      state: Verifying
      startedAt: 2026-12-03T08:00:05Z
      verifiedAt: 2026-12-03T08:01:00Z
      gates:
        - {{name: errors, region: region-1, verdict: Running, successes: 1}}
  gateTemplates:
    - gate: errors
      template: \"ClusterGateTemplate error-ratio\"
      generation: 4
      revision: r2
      stage: canary
      check: {{prometheus: {{query: up, condition: result == 1}}}}
{HISTORY}"
    );
    let rendered = render_get(&rollout("", &status));
    assert!(
        rendered.contains(
            "gate errors (region-1): Running, 1 successful of 3 needed, 0 failed, 0 \
             inconclusive, ClusterGateTemplate error-ratio generation 4"
        ),
        "{rendered}"
    );
}

#[test]
fn gate_failing_shows_the_samples_and_the_halt() {
    let status = format!(
        "  phase: Halted
  revision: r2
  step: Single
  currentStage: canary
  progress: 0/3
  stages:
    - name: canary
      state: Failed
      startedAt: 2026-12-03T08:00:05Z
      verifiedAt: 2026-12-03T08:01:00Z
      gates:
        - name: errors
          region: region-1
          verdict: Failed
          successes: 1
          failures: 2
          inconclusives: 1
          samples:
            - {{at: \"2026-12-03T08:01:10Z\", value: \"0.004\", verdict: Successful}}
            - {{at: \"2026-12-03T08:01:20Z\", verdict: Inconclusive, message: no data}}
            - {{at: \"2026-12-03T08:01:30Z\", value: \"0.2\", verdict: Failed, message: \"0.2 < 0.01 is false\"}}
            - {{at: \"2026-12-03T08:01:40Z\", value: \"0.25\", verdict: Failed, message: \"0.25 < 0.01 is false\"}}
    - name: prod
      state: Pending
  regions:
    - name: region-1
      stage: canary
      reachable: true
      materialized: {m1}
      delivered: {m1}
      activated: {m1}
  conditions:
    - {{type: Halted, status: \"True\", reason: GateFailed, message: \"gate errors failed in region-1: 0.25 < 0.01 is false\", lastTransitionTime: \"2026-12-03T08:01:40Z\"}}
{HISTORY}",
        m1 = mark("r2", "00:10"),
    );
    let rollout = rollout("", &status);
    let expected = "\
ConfigRollout team/app
  target:     ConfigMap app/app-config in every selected region
  phase:      Halted   stage: canary   regions done: 0/3
  paused:     no   on failure: Halt   four-eyes: no
  waiting on: an operator: r2 halted (GateFailed: gate errors failed in region-1: 0.25 < 0.01 is false)
  unblocks:   whoever may edit configrollouts in team: kubectl configrollout retry app -n team once the cause is fixed, or abort, or declare a new revision
  condition:  Halted (GateFailed): gate errors failed in region-1: 0.25 < 0.01 is false
revision r2 (Single pass), declared 2026-12-03T08:00:00Z, 1 keys set, 0 removed, digest hmac-sha256:2222
├─ stage canary: Failed (started 2026-12-03T08:00:05Z, verified 2026-12-03T08:01:00Z)
│  ├─ bake time: 5m
│  ├─ region region-1: materialized r2, delivered r2, activated r2
│  └─ gate errors (region-1): Failed, 1 successful of 3 needed, 2 failed, 1 inconclusive
│     ├─ sample 2026-12-03T08:01:20Z value - Inconclusive: no data
│     ├─ sample 2026-12-03T08:01:30Z value 0.2 Failed: 0.2 < 0.01 is false
│     └─ sample 2026-12-03T08:01:40Z value 0.25 Failed: 0.25 < 0.01 is false
└─ stage prod: Pending
   └─ approval: required
";
    assert_eq!(render_get(&rollout), expected);
    assert_eq!(
        outcome(&rollout),
        Some(Outcome::Failed(
            "Halted: r2: GateFailed: gate errors failed in region-1: 0.25 < 0.01 is false"
                .to_owned()
        ))
    );
}

#[test]
fn rolling_back_says_the_controller_is_at_work() {
    let status = format!(
        "  phase: RollingBack
  revision: r2
  step: Single
  currentStage: canary
  progress: 0/3
  stages:
    - name: canary
      state: Failed
      startedAt: 2026-12-03T08:00:05Z
    - name: prod
      state: Pending
  regions:
    - name: region-1
      stage: canary
      reachable: true
      materialized: {{revision: r1, at: \"2026-12-03T08:02:00Z\"}}
      delivered: {m1}
      activated: {m1}
  conditions:
    - {{type: RolledBack, status: \"False\", reason: RollingBack, message: \"\", lastTransitionTime: \"2026-12-03T08:01:40Z\"}}
{HISTORY}",
        m1 = mark("r2", "00:10"),
    );
    let rollout = rollout("  onFailure: Rollback\n", &status);
    let expected = "\
ConfigRollout team/app
  target:     ConfigMap app/app-config in every selected region
  phase:      RollingBack   stage: canary   regions done: 0/3
  paused:     no   on failure: Rollback   four-eyes: no
  waiting on: the controller to finish rolling back r2
  unblocks:   the controller
revision r2 (Single pass), declared 2026-12-03T08:00:00Z, 1 keys set, 0 removed, digest hmac-sha256:2222
├─ stage canary: Failed (started 2026-12-03T08:00:05Z)
│  ├─ bake time: 5m
│  └─ region region-1: materialized r1, delivered r2, activated r2
└─ stage prod: Pending
   └─ approval: required
";
    assert_eq!(render_get(&rollout), expected);
    assert_eq!(outcome(&rollout), None, "still rolling back");
}

#[test]
fn an_unreachable_region_is_what_the_rollout_waits_on() {
    let status = format!(
        "  phase: Progressing
  revision: r2
  step: Single
  currentStage: prod
  progress: 2/3
  stages:
    - name: canary
      state: Passed
      approval: {{name: app-prod-r2-x, approver: approver-alice, reason: dashboards green, approvedAt: \"2026-12-03T08:07:00Z\"}}
    - name: prod
      state: Progressing
      startedAt: 2026-12-03T08:07:05Z
      approval: {{name: app-prod-r2-x, approver: approver-alice, reason: dashboards green, approvedAt: \"2026-12-03T08:07:00Z\"}}
  regions:
    - name: region-2
      stage: prod
      reachable: true
      materialized: {m}
      delivered: {m}
      activated: {m}
      overriddenKeys: [timeout_ms]
    - name: region-3
      stage: prod
      reachable: false
      lastError: \"list configmaps: API server unreachable: connection refused\"
      driftedKeys: [log_level]
{HISTORY}",
        m = mark("r2", "07:30"),
    );
    let mut rollout = rollout("", &status);
    // Only prod's entry keeps the approval; canary's was a copy to exercise the record.
    rollout.status.as_mut().unwrap().stages[0].approval = None;
    let expected = "\
ConfigRollout team/app
  target:     ConfigMap app/app-config in every selected region
  phase:      Progressing   stage: prod   regions done: 2/3
  paused:     no   on failure: Halt   four-eyes: no
  waiting on: unreachable region region-3 (list configmaps: API server unreachable: connection refused) of stage prod
  unblocks:   the region's operators or the network; the controller keeps retrying until the stage's progressDeadline
revision r2 (Single pass), declared 2026-12-03T08:00:00Z, 1 keys set, 0 removed, digest hmac-sha256:2222
├─ stage canary: Passed
│  └─ bake time: 5m
└─ stage prod: Progressing (started 2026-12-03T08:07:05Z)
   ├─ approval: approved by approver-alice at 2026-12-03T08:07:00Z: \"dashboards green\"
   ├─ region region-2: materialized r2, delivered r2, activated r2
   │  └─ overridden keys: timeout_ms
   └─ region region-3: materialized -, delivered -, activated -, UNREACHABLE
      ├─ last error: list configmaps: API server unreachable: connection refused
      └─ drifted keys: log_level
";
    assert_eq!(render_get(&rollout), expected);
}

#[test]
fn expand_contract_shows_the_pass_and_the_contract_step() {
    let expand = |at: &str| {
        format!(
            "{{revision: r2, step: Expand, digest: hmac-sha256:2222, at: \"2026-12-03T08:{at}Z\"}}"
        )
    };
    let status = format!(
        "  phase: AwaitingApproval
  revision: r2
  step: Expand
  currentStage: contract
  progress: 3/3
  stages:
    - name: canary
      state: Passed
    - name: prod
      state: Passed
      approval: {{name: app-prod-r2-abcde, approver: approver-bob, approvedAt: \"2026-12-03T08:02:00Z\"}}
  regions:
    - name: region-1
      stage: canary
      materialized: {a}
      delivered: {a}
      activated: {a}
    - name: region-2
      stage: prod
      materialized: {b}
      delivered: {b}
      activated: {b}
    - name: region-3
      stage: prod
      materialized: {b}
      delivered: {b}
      activated: {b}
  conditions:
    - {{type: AwaitingApproval, status: \"True\", reason: ContractApprovalRequired, message: \"the contract step of r2 awaits a StageApproval for stage contract\", lastTransitionTime: \"2026-12-03T08:20:00Z\"}}
{HISTORY}",
        a = expand("01:00"),
        b = expand("10:00"),
    );
    let mut rollout = rollout(
        "  strategy:\n    expandContract: Auto\n    contract: {approval: Required}\n",
        &status,
    );
    rollout.status.as_mut().unwrap().history[1].keys_removed = 2;
    let expected = "\
ConfigRollout team/app
  target:     ConfigMap app/app-config in every selected region
  phase:      AwaitingApproval   stage: contract   regions done: 3/3
  paused:     no   on failure: Halt   four-eyes: no
  waiting on: an approval of the contract step of r2 (digest 2222)
  unblocks:   an approver allowed to create stageapprovals in team: kubectl configrollout approve app -n team --stage contract --revision r2 --digest 2222
  condition:  AwaitingApproval (ContractApprovalRequired): the contract step of r2 awaits a StageApproval for stage contract
revision r2 (Expand pass), declared 2026-12-03T08:00:00Z, 1 keys set, 2 removed, digest hmac-sha256:2222
├─ stage canary: Passed
│  ├─ bake time: 5m
│  └─ region region-1: materialized r2 (Expand), delivered r2 (Expand), activated r2 (Expand)
├─ stage prod: Passed
│  ├─ approval: approved by approver-bob at 2026-12-03T08:02:00Z
│  ├─ region region-2: materialized r2 (Expand), delivered r2 (Expand), activated r2 (Expand)
│  └─ region region-3: materialized r2 (Expand), delivered r2 (Expand), activated r2 (Expand)
└─ contract step: awaiting a StageApproval for stage contract
   └─ approval: required
";
    assert_eq!(render_get(&rollout), expected);
    assert_eq!(awaiting_approval(&rollout), Some("contract".to_owned()));
    assert!(requires_approval(&rollout, CONTRACT_STAGE));
    assert!(!requires_approval(&rollout, "canary"));
    assert!(requires_approval(&rollout, "prod"));
}

#[test]
fn verifying_and_baking_stages_wait_on_time_not_people() {
    let mut rollout = awaiting_prod();
    let status = rollout.status.as_mut().unwrap();
    status.phase = Some(RolloutPhase::Progressing);
    status.current_stage = Some("canary".to_owned());
    status.stages[0].state = StageState::Verifying;
    status.stages[0].gates[0].verdict = Some(configrollout_api::GateVerdict::Running);
    assert_eq!(
        waiting_on(&rollout),
        Waiting {
            what: "gates of stage canary: errors (region-1)".to_owned(),
            who: "the controller samples them on their interval; nobody needs to act".to_owned(),
        }
    );
    rollout.status.as_mut().unwrap().stages[0].state = StageState::Baking;
    assert_eq!(
        waiting_on(&rollout).what,
        "the bake time (5m) of stage canary"
    );
    let status = rollout.status.as_mut().unwrap();
    status.current_stage = Some("prod".to_owned());
    status.stages[1].state = StageState::Progressing;
    assert_eq!(
        waiting_on(&rollout).what,
        "regions region-2, region-3 of stage prod to activate r2"
    );
}

#[test]
fn without_consumers_a_region_is_done_once_materialized() {
    let mut rollout = awaiting_prod();
    rollout.spec.consumers.clear();
    let status = rollout.status.as_mut().unwrap();
    status.phase = Some(RolloutPhase::Progressing);
    status.stages[1].state = StageState::Progressing;
    status.regions[0].consumers = None;
    status.regions[1].materialized = status.regions[0].materialized.clone();
    let tree = render_get(&rollout);
    for line in [
        "│  ├─ region region-1: materialized r2 (no consumers declared)\n",
        "   ├─ region region-2: materialized r2 (no consumers declared)\n",
        "   └─ region region-3: materialized - (no consumers declared)\n",
    ] {
        assert!(tree.contains(line), "{line:?} in\n{tree}");
    }
    assert_eq!(
        waiting_on(&rollout).what,
        "regions region-3 of stage prod to materialize r2"
    );
}

#[test]
fn outcomes_follow_the_phase_of_a_current_status() {
    let mut rollout = awaiting_prod();
    assert_eq!(outcome(&rollout), None);
    let status = rollout.status.as_mut().unwrap();
    status.phase = Some(RolloutPhase::Complete);
    status.progress = Some("3/3".to_owned());
    assert_eq!(
        outcome(&rollout),
        Some(Outcome::Complete("Complete: r2 in 3/3 regions".to_owned()))
    );
    // A status older than the spec says nothing about the latest change.
    rollout.metadata.generation = Some(3);
    assert_eq!(outcome(&rollout), None);
    assert_eq!(awaiting_approval(&rollout), None);
    rollout.metadata.generation = Some(2);
    let status = rollout.status.as_mut().unwrap();
    status.phase = Some(RolloutPhase::Progressing);
    status.conditions.push(Condition {
        type_: conditions::INVALID_SPEC.to_owned(),
        status: "True".to_owned(),
        reason: "InvalidGate".to_owned(),
        message: "spec.gates[0].condition: unexpected token".to_owned(),
        observed_generation: Some(2),
        last_transition_time: awaiting_prod().status.unwrap().conditions[0]
            .last_transition_time
            .clone(),
    });
    assert_eq!(
        outcome(&rollout),
        Some(Outcome::Failed(
            "InvalidSpec: InvalidGate: spec.gates[0].condition: unexpected token".to_owned()
        ))
    );
    // A candidate its schema refused: what is wrong (never a value) and that the current
    // revision stays.
    let invalid = rollout
        .status
        .as_mut()
        .unwrap()
        .conditions
        .last_mut()
        .unwrap();
    invalid.reason = "InvalidValue".to_owned();
    invalid.message = "ConfigSchema team/limits: key `rate`: maximum: above 1000".to_owned();
    let waiting = waiting_on(&rollout);
    assert_eq!(
        waiting.what,
        "values its schemas accept (ConfigSchema team/limits: key `rate`: maximum: above \
         1000); r2 stays in every region"
    );
    assert!(waiting.who.contains("--schema"), "{waiting:?}");
    let status = rollout.status.as_mut().unwrap();
    status.conditions.pop();
    status.phase = Some(RolloutPhase::RolledBack);
    assert_eq!(
        outcome(&rollout),
        Some(Outcome::Failed(
            "RolledBack: r2: no reason recorded".to_owned()
        ))
    );
}

#[test]
fn list_and_history_tables() {
    let mut other = awaiting_prod();
    other.metadata.name = Some("payments".to_owned());
    other.metadata.namespace = Some("team-b".to_owned());
    other.status = None;
    let expected = "\
NAMESPACE   NAME       PHASE              STAGE   REVISION   REGIONS   WAITING-ON
team        app        AwaitingApproval   prod    r2         1/3       an approval of stage prod of r2 (digest 2222)
team-b      payments   -                  -       -          -         the controller: no status yet
";
    assert_eq!(render_list(&[awaiting_prod(), other], true), expected);
    assert_eq!(render_list(&[], false), "no configrollouts found\n");

    let mut authored = awaiting_prod();
    if let Some(status) = authored.status.as_mut() {
        status.history[0].authors = vec!["tenant-a".to_owned()];
        status.history[1].authors = vec!["tenant-a".to_owned(), "alice".to_owned()];
        status.history[1].authors_unknown = None;
        status.history[1].schemas = vec![
            configrollout_api::SchemaRecord {
                kind: configrollout_api::SchemaKind::ConfigSchema,
                name: "limits".to_owned(),
                generation: 3,
                author: Some("bob".to_owned()),
                carried: false,
            },
            configrollout_api::SchemaRecord {
                kind: configrollout_api::SchemaKind::ClusterConfigSchema,
                name: "org".to_owned(),
                generation: 1,
                author: None,
                carried: false,
            },
        ];
        status.history[1].validated_by = vec!["capacity".to_owned()];
    }
    let expected = "\
REVISION   DECLARED               DIGEST             KEYS-SET   KEYS-REMOVED   OUTCOME    AUTHORS          CHECKED-BY
r1         2026-12-01T09:00:00Z   hmac-sha256:1111   3          0              Complete   tenant-a         -
r2         2026-12-03T08:00:00Z   hmac-sha256:2222   1          0              -          tenant-a,alice   limits@3,cluster:org@1,validator:capacity
";
    assert_eq!(render_history(&authored), expected);
    if let Some(status) = authored.status.as_mut() {
        status.history[1].authors_unknown = Some("the source is not labelled".to_owned());
    }
    assert!(render_history(&authored).contains("tenant-a,alice,unknown"));
}

#[test]
fn renderings_never_show_configuration_values() {
    let mut rollout = awaiting_prod();
    rollout.spec.data = Some(
        [("timeout_ms".to_owned(), "SECRET-VALUE-300".to_owned())]
            .into_iter()
            .collect(),
    );
    for text in [
        render_get(&rollout),
        render_list(std::slice::from_ref(&rollout), true),
        render_history(&rollout),
    ] {
        assert!(!text.contains("SECRET-VALUE"), "{text}");
    }
}

fn keys(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

#[test]
fn diff_lists_added_changed_and_removed_keys_in_order() {
    let from = keys(&[("a", "1"), ("b", "2"), ("c", "3")]);
    let to = keys(&[("b", "2"), ("c", "30"), ("d", "4")]);
    assert_eq!(
        diff_keys(&from, &to),
        vec![
            KeyChange::Removed("a".into(), "1".into()),
            KeyChange::Changed("c".into(), "3".into(), "30".into()),
            KeyChange::Added("d".into(), "4".into()),
        ]
    );
    assert_eq!(diff_keys(&from, &from), vec![]);
    assert_eq!(
        diff_keys(&BTreeMap::new(), &keys(&[("a", "1")])),
        vec![KeyChange::Added("a".into(), "1".into())]
    );
}

#[test]
fn diff_masks_values_unless_asked() {
    let changes = diff_keys(
        &keys(&[("gone", "secret-1"), ("timeout_ms", "secret-2")]),
        &keys(&[("timeout_ms", "secret-3"), ("new", "secret-4")]),
    );
    let masked = render_diff("team/app r1", "team/app r2", &changes, false);
    assert_eq!(
        masked,
        "\
--- team/app r1
+++ team/app r2
- gone (was ***)
+ new = ***
~ timeout_ms: *** -> ***
1 added, 1 changed, 1 removed (values masked; --show-values to see them)
"
    );
    assert!(!masked.contains("secret"), "{masked}");
    let shown = render_diff("team/app r1", "team/app r2", &changes, true);
    assert_eq!(
        shown,
        "\
--- team/app r1
+++ team/app r2
- gone (was \"secret-1\")
+ new = \"secret-4\"
~ timeout_ms: \"secret-2\" -> \"secret-3\"
1 added, 1 changed, 1 removed
"
    );
    assert_eq!(
        render_diff("a", "b", &[], false),
        "--- a\n+++ b\n0 added, 0 changed, 0 removed\n"
    );
}

#[test]
fn a_window_not_open_yet_says_when_it_opens() {
    let gate: GateStatus = serde_saphyr::from_str(
        "{name: errors, region: region-1, verdict: Running, opensAt: \"2026-12-03T08:02:00Z\"}",
    )
    .unwrap();
    let rollout = rollout("", "  phase: Progressing\n");
    assert_eq!(
        gate_node(&rollout, &gate).text,
        "gate errors (region-1): Running, 0 successful of 3 needed, 0 failed, 0 inconclusive, \
         window opens 2026-12-03T08:02:00Z"
    );
    let sampled: GateStatus = serde_saphyr::from_str(
        "{name: errors, verdict: Running, opensAt: \"2026-12-03T08:02:00Z\", successes: 1, \
         samples: [{at: \"2026-12-03T08:02:00Z\", value: \"0\", verdict: Successful}]}",
    )
    .unwrap();
    assert!(!gate_node(&rollout, &sampled).text.contains("opens"));
}

#[test]
fn tenant_text_cannot_drive_a_terminal() {
    // Issue 29: a selector operator echoed into InvalidSpec cleared everyone's screen.
    let mut rollout = awaiting_prod();
    if let Some(status) = rollout.status.as_mut() {
        for condition in &mut status.conditions {
            condition.message = "In\u{1b}[2J\rdata: ALL COMPLETE\r\nnext".to_owned();
        }
    }
    let shown = render_get(&rollout);
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\r'),
        "{shown:?}"
    );
    assert!(shown.contains("In\u{fffd}[2J\u{fffd}data: ALL COMPLETE\u{fffd}\u{fffd}next"));
    assert_eq!(printable("plain text"), "plain text");
}

/// `awaiting_prod` subscribed to three sinks (one with no delivery recorded yet), with
/// a status that still delivers to a fourth it no longer names.
fn notifying() -> ConfigRollout {
    let mut rollout = awaiting_prod();
    rollout.spec.notifications = serde_saphyr::from_str(
        "- {sink: team-slack}
- {sink: pager, triggers: [Halted, GateFailing], remindAfter: 30m}
- {sink: new-hook}
",
    )
    .expect("subscriptions");
    let notifications = serde_saphyr::from_str(
        "sequence: 4
outbox:
  - {sequence: 2, trigger: AwaitingApproval, at: \"2026-12-03T08:06:30Z\"}
  - {sequence: 3, trigger: Halted, at: \"2026-12-03T08:07:00Z\"}
  - {sequence: 4, trigger: StagePassed, at: \"2026-12-03T08:08:00Z\"}
sinks:
  - {sink: team-slack, deliveredThrough: 2, lastResult: Retrying, lastAttemptAt: \"2026-12-03T08:08:10Z\", message: answered HTTP 500, givenUp: 1}
  - {sink: pager, triggers: [Halted, GateFailing], deliveredThrough: 1, lastResult: Delivered, lastAttemptAt: \"2026-12-03T08:06:31Z\"}
  - {sink: old-hook, deliveredThrough: 4, lastResult: GaveUp, lastAttemptAt: \"2026-12-03T08:08:20Z\", message: no answer, givenUp: 3}
",
    )
    .expect("notification status");
    if let Some(status) = rollout.status.as_mut() {
        status.notifications = Some(notifications);
    }
    rollout
}

#[test]
fn notifications_show_each_sinks_subscription_and_last_delivery() {
    let rollout = notifying();
    let expected = "\
notifications:
  SINK                   TRIGGERS             PENDING   LAST        AT                     GIVEN-UP   MESSAGE
  team-slack             all                  2         Retrying    2026-12-03T08:08:10Z   1          answered HTTP 500
  pager                  Halted,GateFailing   1         Delivered   2026-12-03T08:06:31Z   0          -
  new-hook               all                  -         -           -                      -          -
  old-hook (namespace)   all                  0         GaveUp      2026-12-03T08:08:20Z   3          no answer
";
    assert_eq!(render_notifications(&rollout), expected);
    let shown = render_get(&rollout);
    assert!(shown.ends_with(expected), "{shown}");

    // Pending: the outbox notices past what the sink was delivered, that it wants.
    let status = rollout.status.as_ref().expect("status");
    let notifications = status.notifications.as_ref().expect("notifications");
    let pending: Vec<usize> = notifications
        .sinks
        .iter()
        .map(|delivery| pending_notices(notifications, delivery))
        .collect();
    assert_eq!(pending, vec![2, 1, 0]);

    // Subscribed before any revision: the section still shows, all `-`.
    let mut fresh = notifying();
    fresh.status = None;
    assert!(
        render_get(&fresh).ends_with(
            "\
no revision declared yet
notifications:
  SINK         TRIGGERS             PENDING   LAST   AT   GIVEN-UP   MESSAGE
  team-slack   all                  -         -      -    -          -
  pager        Halted,GateFailing   -         -      -    -          -
  new-hook     all                  -         -      -    -          -
"
        ),
        "{}",
        render_get(&fresh)
    );

    // Nothing subscribed and nothing delivered: no section.
    assert_eq!(render_notifications(&awaiting_prod()), "");
    assert!(!render_get(&awaiting_prod()).contains("notifications"));
}

#[test]
fn a_sinks_message_cannot_drive_a_terminal() {
    let mut rollout = notifying();
    if let Some(delivery) = rollout
        .status
        .as_mut()
        .and_then(|status| status.notifications.as_mut())
        .and_then(|notifications| notifications.sinks.first_mut())
    {
        delivery.message = Some("500\u{1b}[2J\r<script>alert(1)</script>\u{202e}ok".to_owned());
        delivery.sink = "team-slack\u{1b}[31m".to_owned();
    }
    let shown = render_get(&rollout);
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\r') && !shown.contains('\u{202e}'),
        "{shown:?}"
    );
    assert!(
        shown.contains("500\u{fffd}[2J\u{fffd}<script>alert(1)</script>\u{fffd}ok"),
        "{shown}"
    );
    assert!(
        shown.contains("team-slack\u{fffd}[31m (namespace)"),
        "{shown}"
    );
}
