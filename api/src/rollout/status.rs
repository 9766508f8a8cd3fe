//! `ConfigRollout.status`: what the controller has observed and done, per stage and
//! per region, and the conditions it sets.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{conditions, schema};

/// What the controller has observed and done. Every field may be absent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigRolloutStatus {
    /// The `metadata.generation` this status reflects. Until the controller first writes
    /// the status it reads 0 (the CRD's default), so tools that compare it with
    /// `metadata.generation` (kstatus, Argo CD) see a rollout nobody has looked at yet as
    /// in progress rather than done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Where the rollout is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RolloutPhase>,
    /// The revision being rolled out (or last rolled out), e.g. `r3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Which pass of expand-and-contract is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<RevisionStep>,
    /// The last revision that completed: every region ran it and every gate passed on
    /// it. A rollback restores its values; its stored revision is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,
    /// Regions a revision was published to since the stable revision completed, whatever
    /// the stages select now: a rollback reverts each of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reached: Vec<String>,
    /// The target (`namespace/name`) the revisions were declared for. A rollout's target
    /// cannot change: a spec naming another is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The stage now running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_stage: Option<String>,
    /// What the current stage does, as `StageApproval.spec.stageDigest` must name it to
    /// approve it (for tools that cannot compute it, such as Argo CD's approve action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_stage_digest: Option<String>,
    /// Regions done out of regions selected, e.g. `2/3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// One entry per stage, in spec order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageStatus>,
    /// One entry per selected region.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<RegionRolloutStatus>,
    /// Declared revisions, newest last, at most `spec.revisionHistoryLimit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<RevisionRecord>,
    /// How far the author stamps (the rollout's, and its `fromConfigMap` source's) were
    /// counted when the current revision was declared: everyone they list after that
    /// changed what the next revision declares, and is one of its authors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authors_counted: Option<AuthorsCounted>,
    /// The operator requests (abort, retry) acted on, so each acts once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlRecord>,
    /// The stable point of the target (`<wall_ms>.<logical>@<writer>`): every writer of
    /// the target had delivered everything it wrote up to this stamp to every region when
    /// the latest revision completed. Tombstones at or below it are collected on the next
    /// write to each region, and from the next revision's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collected_through: Option<String>,
    /// Why the target's tombstones are not collected although this rollout is Complete
    /// everywhere: another rollout writing the same target has not reached every region
    /// (it is named when it is in this namespace; the controller's log names it always).
    /// Until it does, removed keys stay in every region's state as tombstones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection_waits_for: Option<String>,
    /// Tombstones the collection through `collectedThrough` keeps: those of the keys that
    /// another writer of the target holds live in a revision it has not delivered to every
    /// region yet (one waiting for an approval, say). Its late write must still lose to a
    /// later removal there (a regional override's, say); every other tombstone is
    /// collected without waiting for it. Keys are named by keyed digests, never in clear:
    /// they may be another team's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collection_keeps: Option<CollectionKeeps>,
    /// The templates the gates use, one entry per template gate, as the windows of
    /// `stage` opened with it: a template changed since applies from the next stage's
    /// windows, which record its new generation here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = gate_template_uses)]
    pub gate_templates: Vec<GateTemplateUse>,
    /// Standard conditions: Progressing, AwaitingApproval, Paused, Halted, RolledBack,
    /// Complete, Drifted, InvalidSpec, AdmissionPolicies, ReconcileFailed; and kstatus's
    /// Ready (True once Complete), Reconciling and Stalled (abnormal-true), which Flux, kpt
    /// and Argo CD's health check read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::conditions_list)]
    pub conditions: Vec<Condition>,
    /// Which shard and which holder of its Lease last wrote this status, when the
    /// controller runs sharded (`--shards` above 1); absent with one shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<ShardWriter>,
    /// Notices due to the subscribed sinks, and how far each sink was delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifications: Option<crate::NotificationStatus>,
}

/// The template a gate's open windows use, as it was when they opened.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateTemplateUse {
    /// The gate (`spec.gates[].name`).
    pub gate: String,
    /// The template: `ClusterGateTemplate error-ratio`, `GateTemplate team-a/latency`.
    pub template: String,
    /// Its `metadata.generation` when the windows opened.
    pub generation: i64,
    /// The revision whose windows opened with it.
    pub revision: String,
    /// The stage whose windows opened with it.
    pub stage: String,
    /// The check as sampled: the template's, its args substituted (the platform's
    /// endpoints and Jobs; never a Secret's value, only its name).
    pub check: crate::GateCheck,
}

fn gate_template_uses(schema: &mut schemars::Schema) {
    schema::set(schema, "maxItems", crate::MAX_GATES);
    schema::set(schema, "x-kubernetes-list-type", "map");
    schema::set(
        schema,
        "x-kubernetes-list-map-keys",
        serde_json::json!(["gate"]),
    );
}

/// The writer of a sharded controller's status write.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardWriter {
    /// The rollout's shard, whose Lease the writer held.
    pub shard: u32,
    /// How many shards the controller runs with.
    pub shards: u32,
    /// The writer's identity, as in the shard Lease's `holderIdentity`.
    pub holder: String,
}

impl ConfigRolloutStatus {
    /// The history record of `revision`, if the history still keeps it.
    pub fn record(&self, revision: &str) -> Option<&RevisionRecord> {
        self.history
            .iter()
            .rev()
            .find(|record| record.name == revision)
    }

    /// The history record of the revision being rolled out now.
    pub fn current_record(&self) -> Option<&RevisionRecord> {
        self.record(self.revision.as_deref()?)
    }

    /// The condition of type `type_` (one of [`conditions`]), whatever its status.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions
            .iter()
            .find(|condition| condition.type_ == type_)
    }

    /// The condition of type `type_`, if it is true.
    pub fn true_condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions
            .iter()
            .find(|condition| condition.type_ == type_ && conditions::is_true(condition))
    }

    /// Whether the condition of type `type_` is true.
    pub fn is_true(&self, type_: &str) -> bool {
        self.true_condition(type_).is_some()
    }
}

/// How far the author stamps were counted (see `authorsCounted`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthorsCounted {
    /// The last change of the rollout's own stamp counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<i64>,
    /// The last change of the source's stamp counted, and which ConfigMap that was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceAuthorsCounted>,
}

/// The source ConfigMap whose author stamp was counted, and how far.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceAuthorsCounted {
    /// Its `metadata.uid`: another ConfigMap (renamed source, or deleted and created
    /// again) starts its own count.
    pub uid: String,
    /// The last change counted.
    pub sequence: i64,
}

/// Most keys whose tombstones a collection keeps for writers that have not delivered
/// everywhere; with more, nothing is collected until they have (and the status says so).
pub const MAX_COLLECTION_KEEPS: u64 = 256;

/// The keys whose tombstones a collection keeps (see `collectionKeeps`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CollectionKeeps {
    /// Id of the digest key the names were digested with; under a key the controller no
    /// longer knows, nothing is collected until the keeps are worked out again.
    pub key_id: String,
    /// Keyed digests of the key names, sorted.
    #[schemars(transform = schema::max_items(MAX_COLLECTION_KEEPS))]
    pub keys: Vec<String>,
}

/// The request times of the last abort and retry acted on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlRecord {
    /// The abort request (its annotation's time) last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_at: Option<Time>,
    /// The retry request (its annotation's time) last acted on, or consumed by an abort
    /// that came after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Time>,
    /// The last retry request refused for being dated ahead of the controller's clock: it
    /// never acts, not even once its time comes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_retry_at: Option<Time>,
}

/// Where a rollout is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RolloutPhase {
    /// Accepted, nothing published yet.
    Pending,
    /// A stage is running.
    Progressing,
    /// `spec.paused` holds the rollout.
    Paused,
    /// Waiting for a StageApproval.
    AwaitingApproval,
    /// Stopped by a failure; resumes by retry, abort or a new revision.
    Halted,
    /// Publishing compensating deltas.
    RollingBack,
    /// Compensating deltas published everywhere.
    RolledBack,
    /// Every stage passed.
    Complete,
    /// Refused before any region write: the spec is invalid, reaches outside its grant,
    /// or names a target or keys it may not write (condition `InvalidSpec` says why).
    /// Nothing moves until it is fixed; then the rollout takes up where it was.
    Refused,
}

/// Which pass of a revision is running.
// Ord: the engine keeps region work, keyed by pass, in sorted lists.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum RevisionStep {
    /// New and changed keys published, removed keys kept.
    Expand,
    /// Removed keys tombstoned.
    Contract,
    /// Everything in one pass (nothing removed, or expand-contract disabled).
    Single,
}

/// Progress of one stage.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageStatus {
    /// Stage name.
    pub name: String,
    /// Where the stage is.
    #[serde(default)]
    pub state: StageState,
    /// When its first region was updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When all its regions were activated and gates started counting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<Time>,
    /// When it passed (gates and bake time included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_at: Option<Time>,
    /// The approval that let it start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
    /// Gate verdicts and samples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateStatus>,
}

/// Where a stage is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum StageState {
    /// Not started.
    #[default]
    Pending,
    /// Waiting for a StageApproval.
    AwaitingApproval,
    /// Regions being updated.
    Progressing,
    /// Gates sampling.
    Verifying,
    /// Passed gates, in its bake time.
    Baking,
    /// Done.
    Passed,
    /// A gate failed or the deadline passed.
    Failed,
}

/// The StageApproval a stage started on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// Name of the StageApproval object.
    pub name: String,
    /// Who approved (the admission policy makes this the requesting user).
    pub approver: String,
    /// Why, as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the approval was created.
    pub approved_at: Time,
}

/// A gate's progress, per region or for the stage as a whole.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateStatus {
    /// Gate name.
    pub name: String,
    /// Region the gate is evaluated for, when per region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Current verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<GateVerdict>,
    /// A dry-run gate's window: its verdict never passes nor fails the stage.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// When the window opens: the stage's regions done, then `initialDelay` or, where
    /// nothing shows that the region's consumers loaded the revision, the controller's
    /// settle time, whichever is longer. No sample taken, or evaluated by Prometheus,
    /// before it counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opens_at: Option<Time>,
    /// Successful samples so far.
    #[serde(default)]
    pub successes: i32,
    /// Failed samples so far.
    #[serde(default)]
    pub failures: i32,
    /// Inconclusive samples so far.
    #[serde(default)]
    pub inconclusives: i32,
    /// Query errors since the last answered sample.
    #[serde(default)]
    pub consecutive_errors: i32,
    /// Recent samples, oldest first (bounded by the controller).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<GateSample>,
}

/// A gate's verdict.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum GateVerdict {
    /// Still sampling.
    Running,
    /// Enough successful samples.
    Passed,
    /// Too many failed or inconclusive samples, or query errors in a row.
    Failed,
}

/// One sample of a gate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateSample {
    /// When the query ran.
    pub at: Time,
    /// The metric value, rendered (a metric, never configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// How the sample counted.
    pub verdict: SampleVerdict,
    /// Why, for failed and inconclusive samples, and for every sample of a comparison
    /// gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Both sides of a comparison gate's sample and the test's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<SampleComparison>,
}

/// A comparison gate's sample: the canary's points against the baseline's, over the same
/// window. Numbers are rendered (4 significant digits); metrics, never configuration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SampleComparison {
    /// The updated region's points.
    pub canary: ComparisonSide,
    /// The points compared against.
    pub baseline: ComparisonSide,
    /// What the baseline is: `regions eu-2, eu-3`, or `eu-1 before 2026-12-07T05:00:00Z`
    /// (the region's own window before its stage started).
    pub baseline_source: String,
    /// The Mann-Whitney U of the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statistic: Option<String>,
    /// The test's p-value, for the gate's direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<String>,
    /// Change of the canary's median against the baseline's, e.g. `+12%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
}

/// One side of a comparison.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComparisonSide {
    /// Finite points in the window.
    pub points: i32,
    /// Their median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median: Option<String>,
    /// Their interquartile range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<String>,
}

/// How one sample counted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SampleVerdict {
    /// The condition held.
    Successful,
    /// The condition did not hold.
    Failed,
    /// No data, NaN, or a result the condition cannot decide.
    Inconclusive,
    /// The query could not be answered: Prometheus unreachable, a timeout, an error, an
    /// answer over the controller's bounds.
    Error,
}

/// The revision's progress in one region: the evidence plane.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegionRolloutStatus {
    /// Region name.
    pub name: String,
    /// The stage that covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Whether its API server answered last time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable: Option<bool>,
    /// Replica merged and digest read back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub materialized: Option<LifecycleMark>,
    /// Consumers restarted and ready, or projected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered: Option<LifecycleMark>,
    /// Consumers report the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activated: Option<LifecycleMark>,
    /// Consumer counts (never values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumers: Option<ConsumerCounts>,
    /// Workloads a consumer's name or selector matched whose pod template does not read
    /// the target ConfigMap: never restarted, not counted (at most 20 names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored_workloads: Vec<String>,
    /// Keys whose live value differs from the replica (names only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drifted_keys: Vec<String>,
    /// Keys held by a regional override (names only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overridden_keys: Vec<String>,
    /// Keys the rollout removed (and collected) that a regional override made before the
    /// removal holds again: the region's objects were restored from a backup. Kept until
    /// a person drops them (`kubectl configrollout override NAME --region R KEY-`) or
    /// keeps them (names only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restored_overrides: Vec<String>,
    /// Id of the digest key its state is signed with (public, 16 hex digits): every
    /// region names the key in use once a rotation has reached it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_key_id: Option<String>,
    /// Last error talking to the region (no configuration values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A lifecycle step reached in a region.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleMark {
    /// Revision name, e.g. `r3`.
    pub revision: String,
    /// Pass of the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<RevisionStep>,
    /// Keyed digest of the live state read back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When the step was reached.
    pub at: Time,
}

/// Consumer counts in a region.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerCounts {
    /// Instances of the declared consumers.
    #[serde(default)]
    pub total: i32,
    /// Instances running the revision.
    #[serde(default)]
    pub delivered: i32,
    /// Instances reporting the revision.
    #[serde(default)]
    pub activated: i32,
}

/// A declared revision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRecord {
    /// Revision name, e.g. `r3`.
    pub name: String,
    /// Keyed digest of the declared state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When it was declared.
    pub declared_at: Time,
    /// Its hybrid logical clock stamp, rendered.
    pub stamp: String,
    /// Keys it sets or changes.
    #[serde(default)]
    pub keys_set: i32,
    /// Keys it removes.
    #[serde(default)]
    pub keys_removed: i32,
    /// How it ended: Complete, Superseded, Halted, RolledBack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Who changed what it declares, as the apiserver stamped them: the user who last
    /// changed the rollout's spec and, for `fromConfigMap`, the user who last changed the
    /// source's data. Under four-eyes none of them may approve it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authors: Vec<String>,
    /// Why some author of it cannot be known (a stamp missing): under four-eyes every
    /// approval of it is refused with this reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authors_unknown: Option<String>,
    /// The schemas it was validated against, as they were when it was declared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(crate::MAX_CHECKED_SCHEMAS))]
    pub schemas: Vec<SchemaRecord>,
    /// The ClusterConfigValidators that accepted it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(crate::MAX_CHECKED_SCHEMAS))]
    pub validated_by: Vec<String>,
}

/// A schema a revision was validated against.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaRecord {
    /// `ConfigSchema` or `ClusterConfigSchema`.
    pub kind: crate::SchemaKind,
    /// Its name.
    pub name: String,
    /// Its `metadata.generation` then.
    pub generation: i64,
    /// Who last changed it, as the apiserver stamped it (annotation
    /// `configrollout.dev/schema-author`, `policies/mutating/schema-author.yaml`), when stamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Checked only because the revision before was checked against it: the spec and
    /// the grant no longer name it, and the revision after this one is not checked
    /// against it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub carried: bool,
}
