//! A tiny simulated world for engine tests: fake regions that apply the engine's
//! actions, a fake clock, fake gate metrics, and the reconcile loop that ties them
//! together (gates_due, then step, then apply actions, then keep the status).

#![allow(dead_code)]

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use configrollout_api::{
    ConfigRolloutSpec, ConfigRolloutStatus, DriftPolicy, RevisionStep, conditions,
};
use configrollout_core::engine::{
    Action, AppliedRevision, ApprovalObservation, ApproverBinding, ComparisonRequest,
    ComparisonSample, ConsumerObservation, Control, Decision, DesiredRevision,
    GateSampleObservation, Grant, Observations, PendingSample, ProbeRequest, RegionObservation,
    RevisionAuthors, SourceStamp, SpecError, decide, gate_templates, gates_due,
};
use configrollout_core::gates::{QueryResult, Span};
use serde_json::{Value, json};

/// A fixed start time for every test.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).single().unwrap()
}

/// A spec from compact JSON, with `target` and `data` filled in.
pub fn spec(mut value: Value) -> ConfigRolloutSpec {
    let object = value.as_object_mut().unwrap();
    object
        .entry("target")
        .or_insert(json!({"namespace": "app", "name": "app-config"}));
    object.entry("data").or_insert(json!({"k": "v"}));
    serde_json::from_value(value).unwrap()
}

/// A region of the fake world.
#[derive(Debug, Clone, Default)]
pub struct FakeRegion {
    pub labels: BTreeMap<String, String>,
    pub reachable: bool,
    /// Publishes are accepted but never read back (a stuck region).
    pub stuck: bool,
    pub applied: Option<AppliedRevision>,
    /// Revisions a Rollback reverted here, in order.
    pub reverted: Vec<String>,
    /// Keys edited out of band in the target; a publish under Revert or Adopt settles
    /// them, as materialising does.
    pub drifted: Vec<String>,
    /// Consumer instances; activated after publish when `activates` is true.
    pub consumers: u32,
    pub activates: bool,
    pub consumer_state: Option<ConsumerObservation>,
    /// Keys of the rollout stamped far ahead in this region.
    pub future_stamped_keys: u32,
    /// The region's companion state fails its MAC (read as unreachable, as the
    /// controller reads it).
    pub tampered: bool,
}

/// What a gate query returns in the fake world.
pub type Metric = Box<dyn Fn(&str, Option<&str>) -> QueryResult>;

/// What a comparison gate's range query returns in the fake world: the points of a region
/// over a span. `None`: the query errs.
pub type Series = Box<dyn Fn(&str, &Span) -> Option<Vec<f64>>>;

/// Whether a web or job sample of (gate, region) is still running.
pub type Pending = Box<dyn Fn(&str, Option<&str>) -> bool>;

/// When the fake Prometheus evaluates a query asked at a time (`None`: no timestamp).
pub type Evaluation = Box<dyn Fn(DateTime<Utc>) -> Option<DateTime<Utc>>>;

/// The simulated world.
pub struct World {
    pub spec: ConfigRolloutSpec,
    pub status: ConfigRolloutStatus,
    pub now: DateTime<Utc>,
    pub generation: i64,
    pub desired: DesiredRevision,
    pub regions: BTreeMap<String, FakeRegion>,
    pub approvals: Vec<ApprovalObservation>,
    pub control: Control,
    pub metric: Metric,
    /// What comparison gates' range queries return: by default 20 points of 0.
    pub series: Series,
    /// Every comparison request taken, in order.
    pub comparisons: Vec<(Option<String>, ComparisonRequest)>,
    /// When the fake Prometheus evaluates a query: by default when asked.
    pub evaluation: Evaluation,
    /// The controller's `--gate-settle-time` (zero unless a test sets it).
    pub gate_settle_time: std::time::Duration,
    /// Every action ever returned, with the time of the decision.
    pub log: Vec<(DateTime<Utc>, Action)>,
    pub last: Option<Decision>,
    /// What the rollout's namespace may reach: by default the target's namespace.
    pub grant: Grant,
    /// The rollout's UID.
    pub rollout_uid: String,
    /// The spec's author stamp (the apiserver-stamped annotation).
    pub spec_author: Option<String>,
    /// For a `fromConfigMap` rollout, the source's author stamp (`Err`: why that is
    /// not known); `None` for `data`.
    pub source_author: Option<Result<String, String>>,
    /// The platform's `--four-eyes`.
    pub four_eyes_default: bool,
    /// Admission policies found missing (`None`: not checked).
    pub missing_policies: Option<Vec<String>>,
    /// What binds an approval's approver to its creator.
    pub approver_binding: ApproverBinding,
    /// The gate templates the hub holds (see `engine::gate_templates`).
    pub templates: gate_templates::Templates,
    /// Every web or job sample taken, with its region.
    pub probes: Vec<(Option<String>, ProbeRequest)>,
    /// Whether a web or job sample of (gate, region) is still running now.
    pub pending: Pending,
    /// Samples found running in the last tick.
    pending_samples: Vec<PendingSample>,
    /// Why the candidate's values are refused (the controller's value checks).
    pub value_violations: Vec<String>,
    stamp_counter: u64,
}

impl World {
    /// A world with the given regions (reachable, no consumers), all gates succeeding.
    pub fn new(spec: ConfigRolloutSpec, regions: &[&str]) -> Self {
        let regions = regions
            .iter()
            .map(|name| {
                (
                    name.to_string(),
                    FakeRegion {
                        reachable: true,
                        ..FakeRegion::default()
                    },
                )
            })
            .collect();
        World {
            grant: Grant::own_namespace(&spec.target.namespace),
            rollout_uid: "uid-1".into(),
            spec_author: Some("author".into()),
            source_author: None,
            four_eyes_default: false,
            missing_policies: None,
            approver_binding: ApproverBinding::External,
            value_violations: Vec::new(),
            templates: gate_templates::Templates::new(),
            probes: Vec::new(),
            pending: Box::new(|_, _| false),
            pending_samples: Vec::new(),
            spec,
            status: ConfigRolloutStatus::default(),
            now: t0(),
            generation: 1,
            desired: DesiredRevision {
                digest: "digest-1".into(),
                keys_set: 1,
                keys_removed: 0,
            },
            regions,
            approvals: Vec::new(),
            control: Control::default(),
            metric: Box::new(|_, _| QueryResult::Scalar(0.0)),
            series: Box::new(|_, _| Some(vec![0.0; 20])),
            comparisons: Vec::new(),
            evaluation: Box::new(Some),
            gate_settle_time: std::time::Duration::ZERO,
            log: Vec::new(),
            last: None,
            stamp_counter: 0,
        }
    }

    pub fn region(&mut self, name: &str) -> &mut FakeRegion {
        self.regions.get_mut(name).unwrap()
    }

    pub fn set_label(&mut self, region: &str, key: &str, value: &str) {
        self.region(region)
            .labels
            .insert(key.to_string(), value.to_string());
    }

    /// Samples the gates due now, as the reconcile would.
    pub fn samples(&mut self) -> Vec<GateSampleObservation> {
        let (spec, _) = self.effective();
        let due = gates_due(&spec, &self.status, self.now);
        self.pending_samples.clear();
        for request in &due {
            if let Some(comparison) = &request.comparison {
                self.comparisons
                    .push((request.region.clone(), comparison.clone()));
            }
        }
        let mut answered = Vec::new();
        for request in due {
            if let Some(probe) = &request.probe {
                if (self.pending)(&request.gate, request.region.as_deref()) {
                    self.pending_samples.push(PendingSample {
                        gate: request.gate.clone(),
                        stage: request.stage.clone(),
                        region: request.region.clone(),
                    });
                    continue;
                }
                self.probes.push((request.region.clone(), probe.clone()));
            }
            answered.push(request);
        }
        answered
            .into_iter()
            .map(|request| {
                let (result, comparison) = match &request.comparison {
                    None => (
                        (self.metric)(&request.gate, request.region.as_deref()),
                        None,
                    ),
                    Some(comparison) => self.compare(request.region.as_deref(), comparison),
                };
                GateSampleObservation {
                    result,
                    gate: request.gate,
                    stage: request.stage,
                    revision: request.revision,
                    region: request.region,
                    at: self.now,
                    evaluated_at: match &comparison {
                        Some(_) => None,
                        None => (self.evaluation)(self.now),
                    },
                    comparison,
                }
            })
            .collect()
    }

    /// Both sides of a comparison from [`World::series`], as the controller takes them.
    fn compare(
        &self,
        region: Option<&str>,
        request: &ComparisonRequest,
    ) -> (QueryResult, Option<ComparisonSample>) {
        let Some(canary) = (self.series)(region.unwrap_or_default(), &request.canary) else {
            return (QueryResult::Error("canary: unreachable".into()), None);
        };
        let mut baseline = Vec::new();
        for query in &request.baseline {
            match (self.series)(&query.region, &query.span) {
                Some(points) => baseline.extend(points),
                None => {
                    return (
                        QueryResult::Error(format!("baseline {}: unreachable", query.region)),
                        None,
                    );
                }
            }
        }
        (
            QueryResult::Empty,
            Some(ComparisonSample {
                canary,
                baseline,
                baseline_source: request.source.clone(),
            }),
        )
    }

    /// What the reconcile would observe now, with the given samples.
    /// The spec as the engine sees it: template gates resolved with
    /// [`World::templates`] as the controller resolves them, and their errors.
    pub fn effective(&self) -> (ConfigRolloutSpec, Vec<SpecError>) {
        let resolution = gate_templates::resolve(&self.spec, "app", &self.templates);
        gate_templates::effective_spec(&self.spec, &self.status, &resolution)
    }

    pub fn observations(&mut self, gate_samples: Vec<GateSampleObservation>) -> Observations {
        self.stamp_counter += 1;
        let resolution = gate_templates::resolve(&self.spec, "app", &self.templates);
        let (_, template_errors) = self.effective();
        Observations {
            gate_templates: resolution.current,
            pending_samples: self.pending_samples.clone(),
            generation: self.generation,
            desired: self.desired.clone(),
            fresh_stamp: format!("{}-0-rollout:app/demo", self.stamp_counter),
            regions: self
                .regions
                .iter()
                .map(|(name, region)| RegionObservation {
                    name: name.clone(),
                    labels: region.labels.clone(),
                    reachable: region.reachable && !region.tampered,
                    last_error: if region.tampered {
                        Some("TamperedState: the state fails its MAC".to_string())
                    } else {
                        (!region.reachable).then(|| "connection refused".to_string())
                    },
                    applied: (region.reachable && !region.tampered)
                        .then(|| region.applied.clone())
                        .flatten(),
                    // As the real evidence reads it: a readable region where none of the
                    // current revision's writes is in effect (never published, or
                    // reverted) has nothing left to roll back.
                    rolled_back: self.status.revision.clone().filter(|current| {
                        region.reachable
                            && region
                                .applied
                                .as_ref()
                                .is_none_or(|applied| &applied.revision != current)
                    }),
                    consumers: region.consumer_state.clone(),
                    drifted_keys: if region.reachable {
                        region.drifted.clone()
                    } else {
                        Vec::new()
                    },
                    overridden_keys: Vec::new(),
                    restored_overrides: Vec::new(),
                    future_stamped_keys: region.future_stamped_keys,
                    tampered: region.tampered,
                    state_key_id: None,
                    tombstones: 0,
                })
                .collect(),
            gate_samples,
            approvals: self.approvals.clone(),
            control: self.control.clone(),
            spec_errors: template_errors.iter().map(ToString::to_string).collect(),
            grant: self.grant.clone(),
            target_refusals: Vec::new(),
            value_violations: self.value_violations.clone(),
            checked_schemas: Vec::new(),
            accepted_by: Vec::new(),
            rollout_uid: self.rollout_uid.clone(),
            spec_author: self.spec_author.clone(),
            revision_authors: self.revision_authors(),
            four_eyes_default: self.four_eyes_default,
            missing_policies: self.missing_policies.clone(),
            approver_binding: self.approver_binding.clone(),
            revision_tombstones: 0,
            gate_settle_time: self.gate_settle_time,
        }
    }

    /// One reconcile: sample due gates, decide, apply the actions, keep the status.
    pub fn tick(&mut self) -> Decision {
        self.tick_checked(|_, _, _| {})
    }

    /// A reconcile that lets the caller inspect (observations, input status, decision)
    /// before the actions are applied.
    pub fn tick_checked(
        &mut self,
        check: impl FnOnce(&Observations, &ConfigRolloutStatus, &Decision),
    ) -> Decision {
        let samples = self.samples();
        let observations = self.observations(samples);
        let (spec, _) = self.effective();
        let decision = decide(&spec, self.status.clone(), &observations, self.now);
        check(&observations, &self.status, &decision);
        for action in &decision.actions {
            self.log.push((self.now, action.clone()));
            self.apply(action);
        }
        self.status = decision.status.clone();
        self.last = Some(decision.clone());
        decision
    }

    /// Applies one action to the fake regions.
    pub fn apply(&mut self, action: &Action) {
        match action {
            Action::Publish {
                region,
                revision,
                step,
            } => {
                let Some(fake) = self.regions.get_mut(region) else {
                    return;
                };
                if !fake.reachable || fake.stuck {
                    return;
                }
                if self.spec.drift_policy != DriftPolicy::Report {
                    fake.drifted.clear();
                }
                fake.applied = Some(AppliedRevision {
                    revision: revision.clone(),
                    step: *step,
                    digest: format!("live-{revision}-{step:?}"),
                });
                if fake.activates {
                    fake.consumer_state = Some(ConsumerObservation {
                        revision: revision.clone(),
                        step: *step,
                        total: fake.consumers,
                        delivered: fake.consumers,
                        activated: fake.consumers,
                        restart_pending: false,
                        ignored: Vec::new(),
                    });
                }
            }
            Action::Rollback { region, revision } => {
                if let Some(fake) = self.regions.get_mut(region)
                    && fake.reachable
                    && !fake.stuck
                    && fake
                        .applied
                        .as_ref()
                        .is_some_and(|applied| &applied.revision == revision)
                {
                    // The compensation wins over the revision's writes: it no longer holds.
                    fake.applied = None;
                    fake.reverted.push(revision.clone());
                }
            }
            _ => {}
        }
    }

    /// Advances the fake clock.
    pub fn advance(&mut self, seconds: i64) {
        self.now += TimeDelta::seconds(seconds);
    }

    /// Ticks, then advances the clock, `times` times.
    pub fn run(&mut self, times: usize, seconds: i64) {
        for _ in 0..times {
            self.tick();
            self.advance(seconds);
        }
    }

    /// Publishes ever logged, as (region, revision, step).
    pub fn publishes(&self) -> Vec<(String, String, RevisionStep)> {
        self.log
            .iter()
            .filter_map(|(_, action)| match action {
                Action::Publish {
                    region,
                    revision,
                    step,
                } => Some((region.clone(), revision.clone(), *step)),
                _ => None,
            })
            .collect()
    }

    pub fn rollbacks(&self) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|(_, action)| match action {
                Action::Rollback { region, .. } => Some(region.clone()),
                _ => None,
            })
            .collect()
    }

    /// Approves `stage` of `revision` as `alice`, naming the rollout's UID and the
    /// revision's digest as status reports them (as the plugin does).
    pub fn approve(&mut self, name: &str, stage: &str, revision: &str) {
        self.approve_as("alice", name, stage, revision);
    }

    /// The digest `status.history` reports for `revision`.
    pub fn revision_digest(&self, revision: &str) -> String {
        self.status
            .history
            .iter()
            .find(|record| record.name == revision)
            .and_then(|record| record.digest.clone())
            .unwrap_or_else(|| format!("no digest for {revision} yet"))
    }

    /// Who changed what the rollout declares now, as the controller reads it.
    fn revision_authors(&self) -> RevisionAuthors {
        RevisionAuthors::stamped(
            self.spec_author.as_deref(),
            self.source_author.as_ref().map(|author| {
                author
                    .as_deref()
                    .map(|stamp| SourceStamp {
                        uid: "source-uid",
                        stamp,
                    })
                    .map_err(String::as_str)
            }),
            self.status.authors_counted.as_ref(),
        )
    }

    /// `who` changes the spec: stamped as `policies/mutating/spec-author.yaml` does.
    pub fn spec_changed_by(&mut self, who: &str) {
        self.spec_author = Some(policy_stamp(self.spec_author.as_deref(), who));
    }

    /// `who` changes the `fromConfigMap` source: stamped as
    /// `policies/mutating/source-author.yaml` does.
    pub fn source_changed_by(&mut self, who: &str) {
        let previous = self
            .source_author
            .as_ref()
            .and_then(|author| author.as_deref().ok());
        self.source_author = Some(Ok(policy_stamp(previous, who)));
    }

    /// Approves as `approver`.
    pub fn approve_as(&mut self, approver: &str, name: &str, stage: &str, revision: &str) {
        let approval = ApprovalObservation {
            name: name.to_string(),
            rollout_uid: self.rollout_uid.clone(),
            stage: stage.to_string(),
            revision: revision.to_string(),
            revision_digest: self.revision_digest(revision),
            stage_digest: configrollout_api::stage_digest(&self.spec, stage)
                .unwrap_or_else(|| format!("no stage {stage}")),
            approver: approver.to_string(),
            reason: Some("looks good".to_string()),
            created_at: self.now,
        };
        self.approvals.push(approval);
    }

    pub fn condition(
        &self,
        type_: &str,
    ) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        self.status.condition(type_)
    }

    pub fn condition_true(&self, type_: &str) -> bool {
        self.status.is_true(type_)
    }

    pub fn halted_reason(&self) -> Option<String> {
        self.status
            .true_condition(conditions::HALTED)
            .map(|condition| condition.reason.clone())
    }
}

/// Proptest cases: `PROPTEST_CASES` when set (`make soak` sets 100,000), else `default`.
#[allow(dead_code)]
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}

/// What the author policies write for a change by `who` after `previous`: a line
/// `<sequence> <who>` appended, the last 8 kept; a value not in that shape starts the
/// list again.
pub fn policy_stamp(previous: Option<&str>, who: &str) -> String {
    let lines: Vec<&str> = previous
        .map(|p| p.split('\n').collect())
        .unwrap_or_default();
    let sequenced = lines.iter().all(|line| {
        line.split_once(' ').is_some_and(|(sequence, _)| {
            !sequence.is_empty()
                && sequence.len() <= 18
                && sequence.bytes().all(|b| b.is_ascii_digit())
        })
    });
    let sequence_of = |line: &str| -> i64 {
        line.split(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    let last = if sequenced {
        lines.last().map_or(0, |line| sequence_of(line))
    } else {
        0
    };
    let mut kept: Vec<String> = if sequenced {
        lines
            .iter()
            .filter(|line| sequence_of(line) > last - 7)
            .map(|line| (*line).to_owned())
            .collect()
    } else {
        Vec::new()
    };
    kept.push(format!("{} {who}", last + 1));
    kept.join("\n")
}
