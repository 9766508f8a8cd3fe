//! `ConfigRollout.spec`: what to roll out, where, in which stages, and how. Its
//! derive also makes the `ConfigRollout` kind itself.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};

use super::ConfigRolloutStatus;
use crate::schema::{self, Rule};
use crate::{
    CONTRACT_STAGE, DEADLINE_CEILING, GATE_INTERVAL_CEILING, GATE_INTERVAL_FLOOR, GateTemplateRef,
    INITIAL_DELAY_CEILING, JobCheck, PAUSE_CEILING, WebCheck,
};

/// Most stages a rollout may declare; bounds the cost of the uniqueness rules.
pub const MAX_STAGES: u64 = 20;
/// Most gates a rollout may declare (and a stage may reference).
pub const MAX_GATES: u64 = 20;
/// Most consumers a rollout may declare.
pub const MAX_CONSUMERS: u64 = 20;
/// Most regions a stage may name.
pub const MAX_STAGE_REGIONS: u64 = 100;
/// Most keys `spec.data` may hold.
pub const MAX_DATA_KEYS: u64 = 1000;
/// Longest PromQL query a gate or consumer may carry.
pub const MAX_QUERY_LENGTH: u64 = 4096;
/// Longest gate condition.
pub const MAX_CONDITION_LENGTH: u64 = 1024;
/// Most revisions `status.history` may keep (`revisionHistoryLimit`).
pub const MAX_REVISION_HISTORY_LIMIT: i32 = 100;
/// Most regions a stage updates at once (`maxParallel`).
pub const MAX_PARALLEL: i32 = 1000;
/// Most successful samples a gate may ask for (`count`): at the longest interval that is
/// years of sampling already.
pub const MAX_GATE_COUNT: i32 = 1000;
/// Most failed, inconclusive or erroring samples a gate may tolerate (`failureLimit`,
/// `inconclusiveLimit`, `consecutiveErrorLimit`).
pub const MAX_GATE_LIMIT: i32 = 1000;

/// The desired state of a configuration object across regions, and how to roll it out.
// Several print columns share `type_ = "string"`, which clippy mistakes for a repeated
// attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "ConfigRollout",
    plural = "configrollouts",
    namespaced,
    status = "ConfigRolloutStatus",
    derive = "PartialEq",
    shortname = "crollout",
    category = "configrollout-all",
    // The controller lists the other rollouts of a target by these before collecting its
    // tombstones.
    selectable = ".spec.target.namespace",
    selectable = ".spec.target.name",
    doc = "A ConfigMap rolled out across regional clusters stage by stage, with gates, approvals and rollback.",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Where the rollout is"
    ),
    printcolumn(
        name = "Stage",
        type_ = "string",
        json_path = ".status.currentStage",
        description = "The stage now running"
    ),
    printcolumn(
        name = "Revision",
        type_ = "string",
        json_path = ".status.revision",
        description = "The revision being rolled out"
    ),
    printcolumn(
        name = "Regions",
        type_ = "string",
        json_path = ".status.progress",
        description = "Regions done / regions selected"
    ),
    printcolumn(
        name = "Step",
        type_ = "string",
        json_path = ".status.step",
        priority = 1,
        description = "Expand, Contract or Single pass"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_rules)]
pub struct ConfigRolloutSpec {
    /// The ConfigMap materialised in every selected region. Its namespace and name cannot
    /// change: create another ConfigRollout for another ConfigMap.
    pub target: TargetRef,
    /// The desired key/values. Changing them declares a new revision. Exactly one of
    /// `data` and `fromConfigMap` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = data_rules)]
    pub data: Option<BTreeMap<String, String>>,
    /// A ConfigMap in this rollout's namespace whose data is the desired key/values.
    /// Exactly one of `data` and `fromConfigMap` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_config_map: Option<LocalObjectName>,
    /// Schemas every candidate revision must satisfy before it is declared (besides the
    /// ClusterConfigSchemas the namespace's grant requires). A schema dropped from this
    /// list still applies to the next revision: a change cannot remove the rule it
    /// breaks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(crate::MAX_ROLLOUT_SCHEMAS))]
    pub schemas: Vec<crate::SchemaRef>,
    /// Platform sinks (ClusterNotificationSinks the namespace's grant allows) told about
    /// this rollout's transitions: approvals awaited, stages passed, halts, rollbacks,
    /// completion. Sink names are unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = notifications_rules)]
    pub notifications: Vec<crate::Subscription>,
    /// The stages, run in order. Stage names are unique.
    #[schemars(length(min = 1), transform = schema::max_items(MAX_STAGES))]
    pub stages: Vec<Stage>,
    /// Metric gates that stages reference by name. Gate names are unique.
    #[serde(default)]
    #[schemars(transform = schema::max_items(MAX_GATES))]
    pub gates: Vec<Gate>,
    /// Workloads in each region that read the target, restarted or reloaded on a new
    /// revision and watched for activation.
    #[serde(default)]
    #[schemars(transform = schema::max_items(MAX_CONSUMERS))]
    pub consumers: Vec<Consumer>,
    /// How a revision that removes keys is rolled out.
    #[serde(default)]
    pub strategy: Strategy,
    /// What to do when a gate fails, a deadline passes or a region stays unreachable:
    /// `Halt` stops where it is; `Rollback` reverts the revision's own writes in every
    /// region it reached, in reverse stage order.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Stops the rollout from starting any new step while true; nothing is undone.
    #[serde(default)]
    pub paused: bool,
    /// Four-eyes: an approval counts only from someone other than the user who last
    /// changed this spec (as the apiserver stamped it in the annotation
    /// `configrollout.dev/spec-author`). The controller's `--four-eyes` makes it the
    /// default for every rollout.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub four_eyes: bool,
    /// What to do when a region's target is edited out of band: `Report` (status and
    /// the `Drifted` condition only), `Revert` (put the declared values back) or `Adopt`
    /// (keep the edit as a regional override).
    #[serde(default)]
    pub drift_policy: DriftPolicy,
    /// How many revisions `status.history` keeps (1 to 100).
    #[serde(default = "default_revision_history_limit")]
    #[schemars(range(min = 1, max = MAX_REVISION_HISTORY_LIMIT))]
    pub revision_history_limit: i32,
    /// How long each stage may take, from start to passed, before `onFailure` applies,
    /// unless the stage sets its own. When neither is set, a stage whose regions are not
    /// all updated within 10m fails (gate sampling then ends on its own schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::duration("spec.progressDeadline", DEADLINE_CEILING))]
    pub progress_deadline: Option<String>,
}

/// The progress deadline of a stage whose regions are still being updated, when neither
/// the stage nor the rollout sets one: no region that never answers holds a rollout
/// forever. (Argo Rollouts' `progressDeadlineSeconds` defaults to 600 too.)
pub const DEFAULT_PROGRESS_DEADLINE: &str = "10m";

impl ConfigRolloutSpec {
    /// Whether some stage, or the contract step, waits for a StageApproval.
    pub fn needs_approvals(&self) -> bool {
        self.stages
            .iter()
            .any(|stage| stage.approval == Approval::Required)
            || self.strategy.contract.approval == Approval::Required
    }
}

fn default_revision_history_limit() -> i32 {
    10
}

fn spec_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[
            Rule::new(
                "has(self.data) != has(self.fromConfigMap)",
                "set exactly one of spec.data or spec.fromConfigMap",
            )
            .reason("FieldValueRequired"),
            Rule::new(
                "self.stages.all(s, self.stages.exists_one(t, t.name == s.name))",
                "spec.stages: stage names must be unique",
            )
            .at(".stages"),
            Rule::new(
                format!(
                    "self.stages.all(s, s.name != {})",
                    schema::cel_str(CONTRACT_STAGE)
                ),
                format!(
                    "spec.stages[].name: {:?} is reserved for approving the contract step",
                    CONTRACT_STAGE
                ),
            )
            .at(".stages"),
            Rule::new(
                "!has(self.gates) || self.gates.all(g, self.gates.exists_one(h, h.name == g.name))",
                "spec.gates: gate names must be unique",
            )
            .at(".gates"),
            Rule::new(
                "self.stages.all(s, !has(s.gates) || s.gates.all(n, \
                 has(self.gates) && self.gates.exists(g, g.name == n)))",
                "spec.stages[].gates: every gate a stage names must be declared in spec.gates",
            )
            .at(".stages"),
        ],
    );
}

/// Suffix of the companion ConfigMap that keeps a target's state beside it in every
/// region (`<target><suffix>`): no target may be named like one.
pub const COMPANION_SUFFIX: &str = ".configrollout-state";
/// Longest target name: its companion's name must be a valid object name too.
pub const MAX_TARGET_NAME_LENGTH: usize = 253 - COMPANION_SUFFIX.len();

fn reserved_target_name(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[
            Rule::new(
                format!("!self.endsWith({})", schema::cel_str(COMPANION_SUFFIX)),
                format!(
                    "spec.target.name must not end with {COMPANION_SUFFIX}: that suffix is \
                     reserved for the ConfigMaps that keep each target's state"
                ),
            ),
            Rule::new(
                format!("self.size() <= {MAX_TARGET_NAME_LENGTH}"),
                format!(
                    "spec.target.name must be at most {MAX_TARGET_NAME_LENGTH} characters, so \
                     that its state ConfigMap ({COMPANION_SUFFIX}) fits in a name"
                ),
            ),
        ],
    );
}

/// A target field that cannot change once set: the regions hold the rollout's state
/// beside its target.
fn immutable_target(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[Rule::new(
            "self == oldSelf",
            "spec.target is immutable: the regions hold this rollout's state beside its \
             target; create another ConfigRollout for another ConfigMap",
        )
        .reason("FieldValueForbidden")],
    );
}

fn notifications_rules(schema: &mut Schema) {
    schema::set(schema, "maxItems", crate::MAX_SUBSCRIPTIONS);
    schema::add_rules(
        schema,
        &[Rule::new(
            "self.all(a, self.exists_one(b, b.sink == a.sink))",
            "spec.notifications: each sink once",
        )],
    );
}

fn data_rules(schema: &mut Schema) {
    schema::set(schema, "maxProperties", MAX_DATA_KEYS);
    schema::add_rules(
        schema,
        &[Rule::new(
            format!(
                "self.all(k, k.size() <= {} && k.matches({}))",
                schema::CONFIG_MAP_KEY_MAX_LENGTH,
                schema::cel_str(schema::CONFIG_MAP_KEY_PATTERN)
            ),
            "spec.data: keys must be valid ConfigMap keys \
             (letters, digits, '-', '_' and '.', at most 253 characters)",
        )],
    );
}

/// The ConfigMap a rollout manages in each region.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    /// Namespace of the ConfigMap in every region.
    #[schemars(
        transform = schema::dns_label("spec.target.namespace"),
        transform = immutable_target
    )]
    pub namespace: String,
    /// Name of the ConfigMap in every region. Names ending with `.configrollout-state` are
    /// reserved for the companions that keep each target's state, and the companion's
    /// name must fit too: at most 233 characters.
    #[schemars(
        transform = schema::dns_subdomain("spec.target.name"),
        transform = reserved_target_name,
        transform = immutable_target
    )]
    pub name: String,
    /// Take over a ConfigMap that already exists in a region and that configrollout does
    /// not manage (the keys this rollout declares are overwritten). Without it such a
    /// region is refused. Needs a grant that allows adoption (the Namespace annotation
    /// `configrollout.dev/allow-adoption`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
}

/// A reference to an object in the same namespace as the referrer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectName {
    /// Name of the object.
    #[schemars(transform = schema::dns_subdomain("spec.fromConfigMap.name"))]
    pub name: String,
}

/// One step of the rollout: a set of regions updated together, then verified.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    /// Name of the stage, unique in the rollout (a DNS-1123 label).
    #[schemars(transform = schema::dns_label("spec.stages[].name"))]
    pub name: String,
    /// The regions of this stage: by name or by label selector on Region objects.
    pub regions: RegionSelector,
    /// How many of the stage's regions are updated at once (at least 1).
    #[serde(default = "default_one")]
    #[schemars(range(min = 1, max = MAX_PARALLEL))]
    pub max_parallel: i32,
    /// `Required` makes the stage wait for a matching StageApproval before it starts.
    #[serde(default)]
    pub approval: Approval,
    /// Bake time after the stage has passed, before the next stage starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
    /// Names of gates (from `spec.gates`) that must pass for the stage to pass.
    #[serde(default)]
    #[schemars(transform = schema::string_set(MAX_GATES, schema::DNS1123_LABEL_MAX_LENGTH))]
    pub gates: Vec<String>,
    /// How long the stage may take, from start to passed, before `onFailure` applies
    /// (default: `spec.progressDeadline`, else 10m while regions are being updated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::duration("spec.stages[].progressDeadline", DEADLINE_CEILING))]
    pub progress_deadline: Option<String>,
}

fn default_one() -> i32 {
    1
}

/// Which regions a stage covers: exactly one of `names` (non-empty) or `selector`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = region_selector_rules)]
pub struct RegionSelector {
    /// Region names, each a Region object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::string_set(MAX_STAGE_REGIONS, schema::DNS1123_SUBDOMAIN_MAX_LENGTH))]
    pub names: Vec<String>,
    /// A label selector over Region objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::label_selector)]
    pub selector: Option<LabelSelector>,
}

fn region_selector_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[Rule::new(
            "(has(self.names) && size(self.names) > 0) != has(self.selector)",
            "spec.stages[].regions: set exactly one of names (non-empty) or selector",
        )
        .reason("FieldValueRequired")],
    );
}

/// Whether a step waits for a human.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Approval {
    /// Wait for a StageApproval naming this rollout, stage and revision.
    Required,
    /// Go ahead without approval.
    #[default]
    None,
}

/// A bake time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pause {
    /// How long to wait, e.g. `10m` or `1h30m`.
    #[schemars(transform = schema::duration("pause.duration", PAUSE_CEILING))]
    pub duration: String,
}

/// A metric gate: a PromQL query sampled on an interval and compared to a condition, or
/// to the same query in the regions not yet updated.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = gate_rules)]
pub struct Gate {
    /// Name of the gate, unique in the rollout, referenced by stages.
    #[schemars(transform = schema::dns_label("spec.gates[].name"))]
    pub name: String,
    /// PromQL; `{{region}}`, `{{revision}}` and `{{stage}}` are replaced before querying.
    /// Set exactly one of `query` and `template`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1), transform = schema::multiline_text(MAX_QUERY_LENGTH))]
    pub query: String,
    /// Use a GateTemplate or ClusterGateTemplate instead of a query: the template says
    /// how a sample is taken and judged, the gate passes its args and keeps the sampling
    /// knobs below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<GateTemplateRef>,
    /// When a sample is successful, e.g. `result < 0.01`, `all(result < 0.01)`. With a
    /// `query`, set exactly one of `condition` and `compare`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1), transform = schema::multiline_text(MAX_CONDITION_LENGTH))]
    pub condition: String,
    /// Judge the query against the same query in regions not yet updated instead of a
    /// fixed condition (a comparison gate; the query must use `{{region}}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<GateComparison>,
    /// Time between samples: at least 1s (or the controller's `--min-gate-interval`), at
    /// most 24h.
    #[serde(default = "default_interval")]
    #[schemars(transform = schema::duration_between(
        "spec.gates[].interval",
        GATE_INTERVAL_FLOOR,
        GATE_INTERVAL_CEILING
    ))]
    pub interval: String,
    /// Successful samples needed for the gate to pass (at least 1).
    #[serde(default = "default_one")]
    #[schemars(range(min = 1, max = MAX_GATE_COUNT))]
    pub count: i32,
    /// Wait before the first sample, so that the metric reflects the new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::duration("spec.gates[].initialDelay", INITIAL_DELAY_CEILING))]
    pub initial_delay: Option<String>,
    /// Failed samples tolerated; one more fails the gate.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_GATE_LIMIT))]
    pub failure_limit: i32,
    /// Inconclusive samples (no data, NaN, Prometheus unreachable) tolerated; one more
    /// fails the gate.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_GATE_LIMIT))]
    pub inconclusive_limit: i32,
    /// Query errors in a row (Prometheus unreachable, a timeout, an answer over the
    /// controller's bounds) that fail the gate. Errors are counted apart from
    /// inconclusive samples, and any answered sample resets the count, so one timeout
    /// never fails a gate.
    #[serde(default = "default_consecutive_error_limit")]
    #[schemars(range(min = 1, max = MAX_GATE_LIMIT))]
    pub consecutive_error_limit: i32,
    /// Sample and judge the gate, keep its samples and count them in metrics apart, but
    /// never let it pass or fail a stage: to try a gate out before it guards anything. It
    /// samples while its stage verifies and bakes (give the stage a `pause` to watch it
    /// longer than its other gates take).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// A template gate's web or job check, resolved by the controller from the
    /// template (never read from the API: only a platform's template defines one).
    #[serde(skip)]
    #[schemars(skip)]
    pub probe: Option<ResolvedProbe>,
}

/// The check of a template gate that is not a query, with its args substituted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolvedProbe {
    /// An HTTP endpoint read with a JSONPath.
    Web(WebCheck),
    /// A Job run in the region.
    Job(JobCheck),
}

fn gate_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[
            Rule::new(
                "has(self.query) != has(self.template)",
                "spec.gates[]: set exactly one of query and template",
            )
            .reason("FieldValueRequired"),
            Rule::new(
                "has(self.template) ? !has(self.condition) && !has(self.compare) : \
                 has(self.condition) != has(self.compare)",
                "spec.gates[]: set exactly one of condition and compare with a query; neither \
                 with a template (its template judges)",
            )
            .reason("FieldValueRequired"),
            Rule::new(
                "!has(self.compare) || !has(self.query) || self.query.contains('{{region}}')",
                "spec.gates[].compare: the query must use {{region}}, so that it can be asked of \
                 the regions not yet updated",
            )
            .at(".query"),
        ],
    );
}

/// Most regions a comparison gate may name as its baseline.
pub const MAX_BASELINE_REGIONS: u64 = 100;
/// Fewest points each side of a comparison may be asked to need.
pub const MIN_COMPARISON_SAMPLES: i32 = 3;
/// Most points one side of one comparison may hold (`window` / `step` per region).
pub const MAX_COMPARISON_POINTS: i32 = 1000;

/// A comparison gate: each sample compares the query's points over the last `window` in
/// an updated region (the canary) with the same query over the same window in regions
/// not yet updated (the baseline), with a Mann-Whitney U test and a tolerance on the
/// change of the median. Where no such region is left (the last stage), the canary
/// region's own window before its stage started is the baseline.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateComparison {
    /// Which change of the canary fails the gate: `Increase` (errors, latency),
    /// `Decrease` (throughput, success ratios) or `Either`.
    #[serde(default)]
    pub fail_on: ChangeDirection,
    /// Change of the canary's median against the baseline's tolerated, in percent of the
    /// baseline's: 20 fails a canary whose errors are significantly more than 20 % higher.
    #[serde(default = "default_tolerance_percent")]
    #[schemars(range(min = 0, max = 10000))]
    pub tolerance_percent: i32,
    /// Confidence of the test, in percent: 95 calls a difference significant at p < 0.05.
    #[serde(default = "default_confidence_percent")]
    #[schemars(range(min = 50, max = 99))]
    pub confidence_percent: i32,
    /// Span each sample compares (the canary's first sample waits for a whole window of
    /// data after the gate's window opened).
    #[serde(default = "default_comparison_window")]
    #[schemars(transform = schema::duration_between(
        "spec.gates[].compare.window",
        GATE_INTERVAL_FLOOR,
        GATE_INTERVAL_CEILING
    ))]
    pub window: String,
    /// Resolution of the points within the window (the range query's step): no shorter
    /// than the scrape interval, or repeated scrapes count as independent points.
    #[serde(default = "default_comparison_step")]
    #[schemars(transform = schema::duration_between(
        "spec.gates[].compare.step",
        GATE_INTERVAL_FLOOR,
        GATE_INTERVAL_CEILING
    ))]
    pub step: String,
    /// Fewest points each side needs; a sample with fewer is Inconclusive, never a pass.
    #[serde(default = "default_min_samples")]
    #[schemars(range(min = MIN_COMPARISON_SAMPLES, max = MAX_COMPARISON_POINTS))]
    pub min_samples: i32,
    /// Regions to compare against. Default: the regions of the later stages. A region of
    /// this stage or an earlier one (already updated) is never a baseline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::string_set(MAX_BASELINE_REGIONS, 253))]
    pub baseline_regions: Vec<String>,
}

/// Which change fails a comparison gate.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ChangeDirection {
    /// A canary significantly higher than its baseline, beyond the tolerance.
    #[default]
    Increase,
    /// A canary significantly lower.
    Decrease,
    /// Either.
    Either,
}

fn default_tolerance_percent() -> i32 {
    20
}

fn default_confidence_percent() -> i32 {
    95
}

fn default_comparison_window() -> String {
    "5m".to_owned()
}

fn default_comparison_step() -> String {
    "30s".to_owned()
}

fn default_min_samples() -> i32 {
    10
}

/// Argo Rollouts' default for the same knob.
fn default_consecutive_error_limit() -> i32 {
    4
}

fn default_interval() -> String {
    "1m".to_owned()
}

/// Workloads in a region that read the target ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = consumer_rules)]
pub struct Consumer {
    /// Kind of the workload.
    pub kind: WorkloadKind,
    /// Name of the workload, in the target's namespace. Exactly one of `name` and
    /// `selector` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::dns_subdomain("spec.consumers[].name"))]
    pub name: Option<String>,
    /// Label selector over workloads of `kind` in the target's namespace. Only workloads
    /// whose pod template reads the target are consumers: others it matches are reported,
    /// never restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::label_selector)]
    pub selector: Option<LabelSelector>,
    /// How a new revision reaches the workload: `Restart` (rolling restart) or `Reload`
    /// (the workload rereads the mounted ConfigMap itself).
    #[serde(default)]
    pub delivery: Delivery,
    /// PromQL counting the workload's instances that report the revision (placeholders as
    /// in gate queries); without it, delivered means activated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::multiline_text(MAX_QUERY_LENGTH))]
    pub activation_query: Option<String>,
}

fn consumer_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[
            Rule::new(
                "has(self.name) != has(self.selector)",
                "spec.consumers[]: set exactly one of name or selector",
            )
            .reason("FieldValueRequired"),
            Rule::new(
                "!has(self.selector) || \
                 (has(self.selector.matchLabels) && size(self.selector.matchLabels) > 0) || \
                 (has(self.selector.matchExpressions) && \
                  self.selector.matchExpressions.exists(e, e.operator == 'In' || e.operator == 'Exists'))",
                "spec.consumers[].selector must name a label it requires (matchLabels, or an In \
                 or Exists expression): one of only NotIn or DoesNotExist, like an empty one, \
                 matches every workload of the namespace",
            )
            .at(".selector"),
        ],
    );
}

/// Kinds of workload a consumer can be.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum WorkloadKind {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
}

/// How a revision reaches a consumer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Delivery {
    /// Rolling restart of the workload (pod template annotation).
    #[default]
    Restart,
    /// The workload reloads the projected ConfigMap itself; nothing is restarted.
    Reload,
}

/// How revisions are rolled out.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// `Auto`: a revision that removes keys first publishes new and changed keys
    /// everywhere (expand), and removes keys in a second pass (contract). `Disabled`:
    /// one pass.
    #[serde(default)]
    pub expand_contract: ExpandContract,
    /// What must happen between the expand and contract passes.
    #[serde(default)]
    pub contract: ContractStep,
}

/// Whether removals wait for a second pass.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ExpandContract {
    /// Removals go in a second (contract) pass.
    #[default]
    Auto,
    /// One pass, removals included.
    Disabled,
}

/// The gate between the expand and contract passes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractStep {
    /// `Required` waits for a StageApproval whose stage is `contract`.
    #[serde(default)]
    pub approval: Approval,
    /// Wait after every region has activated the expand pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
}

/// What a failure does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum OnFailure {
    /// Stop where it is; resume by retry, abort or a new revision.
    #[default]
    Halt,
    /// Publish compensating deltas in every region that received the revision, in
    /// reverse stage order.
    Rollback,
}

/// What out-of-band edits of a region's target do.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum DriftPolicy {
    /// Report drifted keys in status and the `Drifted` condition; change nothing.
    #[default]
    Report,
    /// Put the declared values back.
    Revert,
    /// Keep the edit as a regional override.
    Adopt,
}
