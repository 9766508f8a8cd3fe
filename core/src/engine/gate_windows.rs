//! Gate windows: once every region of a stage is done, each of its gates is sampled every
//! `interval`, from when its window opens. A gate whose query uses `{{region}}` has one
//! window per region, otherwise one for the stage.
//!
//! Gates judge fresh data only. A window opens when the stage was verified (every region
//! Activated, or Materialized where no consumers are declared) plus the gate's
//! `initialDelay`; where being done does not show that a region's consumers loaded the
//! revision (no consumers declared, or a `Reload` consumer without an `activationQuery`:
//! its ready instances are counted, not those that reread the file), it opens no earlier
//! than the controller's settle time after the verification (the longer of the two, not
//! their sum). The opening is kept in the window's status (`opensAt`), so a controller
//! restarted with another settle time keeps it. A sample counts only when it was taken on
//! schedule and the backend evaluated it no earlier than the second it was due (the
//! window's opening for the first; whole seconds, as VictoriaMetrics stamps a query asked
//! for "now"): an answer evaluated before (a cached answer, a lagging store) is a query
//! error that says so, never a verdict on the revision.
//!
//! A window passes with `count` successful samples; it fails (closed) with more than
//! `failureLimit` failed or more than `inconclusiveLimit` inconclusive samples, or with
//! `consecutiveErrorLimit` query errors in a row (errors are not inconclusive samples: a
//! sample the backend answered resets their count). Failure is
//! checked first, so no window passes on a sample that also exceeds a limit. Only
//! samples on the schedule count: one taken before the window opened, or less than
//! `interval` after the previous counted one, is ignored, so a repeated sample never
//! counts twice. The status keeps the last [`MAX_SAMPLES_PER_GATE`] samples of a running
//! or failed window, and only the deciding sample of a passed one.

use chrono::{DateTime, SubsecRound, TimeDelta, Utc};

use crate::gates::compare::{self, Direction, Rules};
use crate::gates::{Condition, QueryResult, Span, TemplateValues, Verdict, evaluate, render};
use configrollout_api::{
    ChangeDirection, ComparisonSide, ConfigRolloutSpec, ConfigRolloutStatus, Delivery, Gate,
    GateComparison, GateSample, GateStatus, GateVerdict, JobCheck, ResolvedProbe, RolloutPhase,
    SampleComparison, SampleVerdict, StageState, WebCheck,
};

use super::gate_templates::samples_per_region;
use crate::gates::job::walk_strings;
use crate::gates::template::{escape_json_string, escape_url_component, render_with};

use super::clock::{after, from_time, spec_duration, to_time};
use super::observations::{ComparisonSample, GateSampleObservation};
use super::{Draft, MAX_SAMPLES_PER_GATE, SampleTally};

/// The settle time of a controller that names none (`--gate-settle-time`), and of a
/// window opened by a controller that did not record its opening. One minute: the
/// kubelet's default sync period, within which a mounted ConfigMap is refreshed, and two
/// scrapes at the 30 s interval of the shipped ServiceMonitor.
pub const DEFAULT_GATE_SETTLE_TIME: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether a region being done shows that its consumers loaded the revision: consumers
/// are declared, and each either reports the revision (`activationQuery`) or was
/// restarted onto it (`Restart`: its new instances read the ConfigMap when they start).
pub fn done_shows_consumers_loaded(spec: &ConfigRolloutSpec) -> bool {
    !spec.consumers.is_empty()
        && spec.consumers.iter().all(|consumer| {
            consumer.activation_query.is_some() || consumer.delivery == Delivery::Restart
        })
}

/// A sample the reconcile should take now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSampleRequest {
    /// Gate name.
    pub gate: String,
    /// Stage name.
    pub stage: String,
    /// Revision name.
    pub revision: String,
    /// Region for per-region gates; `None` for a stage-wide gate (default backend).
    pub region: Option<String>,
    /// The query with placeholders substituted and escaped.
    pub query: String,
    /// For a comparison gate: the spans of both sides. `query` is then the canary's.
    pub comparison: Option<ComparisonRequest>,
    /// When the sample was due: a Job started for it is named after it, so that every
    /// reconcile until its answer is recorded finds the same Job.
    pub due: DateTime<Utc>,
    /// A template gate's web or job check, its placeholders rendered; `None`: `query`.
    pub probe: Option<ProbeRequest>,
}

/// A sample that is not a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeRequest {
    /// GET or POST the endpoint and read the JSONPath of its answer.
    Web(WebCheck),
    /// Run the Job in the region; its success is the sample.
    Job(JobCheck),
}

/// A comparison gate's sample: the canary region's points over `canary`, against the
/// points of the `baseline` queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComparisonRequest {
    /// The canary's span: the last `window`, never reaching before the window opened.
    pub canary: Span,
    /// The same query in each baseline region over the same span; or, where no baseline
    /// region is left, in the canary region over its window before its stage started.
    pub baseline: Vec<BaselineQuery>,
    /// What the baseline is, in words (`SampleComparison::baseline_source`).
    pub source: String,
}

/// One query of a comparison's baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaselineQuery {
    /// The region asked (its Prometheus answers).
    pub region: String,
    /// The gate's query rendered for it.
    pub query: String,
    /// Its span.
    pub span: Span,
}

/// The combined verdict of a stage's gates.
pub(super) enum StageGates {
    /// Every window passed.
    Passed,
    /// Still sampling.
    Running,
    /// A window failed; the message names the gate, region and last sample.
    Failed(String),
}

/// The samples due at `now`, for the reconcile to take before calling `decide`.
pub fn gates_due(
    spec: &ConfigRolloutSpec,
    status: &ConfigRolloutStatus,
    now: DateTime<Utc>,
) -> Vec<GateSampleRequest> {
    let mut due = Vec::new();
    if spec.paused || status.phase != Some(RolloutPhase::Progressing) {
        return due;
    }
    let Some(revision) = status.revision.as_deref() else {
        return due;
    };
    let legacy_settle = settle_time(spec, DEFAULT_GATE_SETTLE_TIME);
    for (index, stage) in status.stages.iter().enumerate() {
        // A baking stage's gates passed; its dry-run gates go on sampling.
        let baking = stage.state == StageState::Baking;
        if stage.state != StageState::Verifying && !baking {
            continue;
        }
        let Some(verified_at) = stage.verified_at.as_ref().map(from_time) else {
            continue;
        };
        for window in &stage.gates {
            if window.verdict != Some(GateVerdict::Running) || (baking && !window.dry_run) {
                continue;
            }
            let Some(gate) = spec.gates.iter().find(|gate| gate.name == window.name) else {
                continue;
            };
            let schedule = Schedule::of(gate, window, verified_at, legacy_settle);
            if schedule.next_sample_at(window) > now {
                continue;
            }
            let values = TemplateValues {
                region: window.region.as_deref().unwrap_or_default(),
                revision,
                stage: &stage.name,
            };
            let due_at = schedule.next_sample_at(window);
            let probe = match &gate.probe {
                None => None,
                Some(probe) => match render_probe(probe, &values) {
                    Some(probe) => Some(probe),
                    None => continue,
                },
            };
            let query = if probe.is_some() {
                String::new()
            } else {
                let Ok(query) = render(&gate.query, &values) else {
                    continue;
                };
                query
            };
            let comparison = match (&gate.compare, window.region.as_deref()) {
                (None, _) => None,
                (Some(compare), Some(region)) => {
                    comparison_request(gate, compare, status, index, region, &query, &schedule, now)
                }
                // A comparison gate's query uses `{{region}}` (validated): one window per
                // region, never one for the stage.
                (Some(_), None) => continue,
            };
            due.push(GateSampleRequest {
                gate: gate.name.clone(),
                stage: stage.name.clone(),
                revision: revision.to_owned(),
                region: window.region.clone(),
                query,
                comparison,
                due: due_at,
                probe,
            });
        }
    }
    due
}

/// A web or job check with `{{region}}`, `{{revision}}` and `{{stage}}` rendered, each
/// escaped for where it lands; `None` when a placeholder is unknown (refused by
/// validation before any window opens).
fn render_probe(probe: &ResolvedProbe, values: &TemplateValues<'_>) -> Option<ProbeRequest> {
    let as_is = |raw: &str| raw.to_owned();
    match probe {
        ResolvedProbe::Web(web) => {
            let mut web = web.clone();
            web.url = render_with(&web.url, values, escape_url_component).ok()?;
            if let Some(body) = &web.body {
                web.body = Some(render_with(body, values, escape_json_string).ok()?);
            }
            for header in &mut web.headers {
                if let Some(value) = &header.value {
                    header.value = Some(render_with(value, values, as_is).ok()?);
                }
            }
            Some(ProbeRequest::Web(web))
        }
        ResolvedProbe::Job(job) => {
            let mut job = job.clone();
            let mut failed = false;
            walk_strings(
                &mut job.template,
                &mut |text| match render_with(text, values, as_is) {
                    Ok(rendered) => *text = rendered,
                    Err(_) => failed = true,
                },
            );
            (!failed).then_some(ProbeRequest::Job(job))
        }
    }
}

/// Most baseline regions a comparison names in its status before "and N more".
const MAX_NAMED_BASELINE_REGIONS: usize = 5;

/// The spans and baseline queries of a comparison gate's sample in `region`, whose stage
/// is `status.stages[stage_index]`; `None` when its step cannot be read (the spec is
/// validated before any window opens).
#[allow(clippy::too_many_arguments)]
fn comparison_request(
    gate: &Gate,
    compare: &GateComparison,
    status: &ConfigRolloutStatus,
    stage_index: usize,
    region: &str,
    canary_query: &str,
    schedule: &Schedule,
    now: DateTime<Utc>,
) -> Option<ComparisonRequest> {
    let step = spec_duration(&compare.step)?.to_std().ok()?;
    let canary = Span {
        start: now
            .checked_sub_signed(schedule.lead)
            .unwrap_or(schedule.opens)
            .max(schedule.opens),
        end: now,
        step,
    };
    let stage = status.stages.get(stage_index)?;
    let updated: Vec<&str> = status
        .stages
        .iter()
        .take(stage_index.saturating_add(1))
        .map(|stage| stage.name.as_str())
        .collect();
    let stage_of = |name: &str| {
        status
            .regions
            .iter()
            .find(|candidate| candidate.name == name)
            .and_then(|candidate| candidate.stage.as_deref())
    };
    let baseline_regions: Vec<&str> = if compare.baseline_regions.is_empty() {
        let later: Vec<&str> = status
            .stages
            .iter()
            .skip(stage_index.saturating_add(1))
            .map(|stage| stage.name.as_str())
            .collect();
        status
            .regions
            .iter()
            .filter(|candidate| {
                candidate
                    .stage
                    .as_deref()
                    .is_some_and(|stage| later.contains(&stage))
            })
            .map(|candidate| candidate.name.as_str())
            .collect()
    } else {
        compare
            .baseline_regions
            .iter()
            .map(String::as_str)
            .filter(|name| *name != region && !stage_of(name).is_some_and(|s| updated.contains(&s)))
            .collect()
    };
    let render_for = |name: &str| {
        render(
            &gate.query,
            &TemplateValues {
                region: name,
                revision: "",
                stage: &stage.name,
            },
        )
        .ok()
    };
    if baseline_regions.is_empty() {
        // No region still holds the previous revision: the canary's own window before its
        // stage started updating it is the baseline.
        let started = stage.started_at.as_ref().map(from_time)?;
        let span = Span {
            start: started.checked_sub_signed(schedule.lead).unwrap_or(started),
            end: started,
            step,
        };
        return Some(ComparisonRequest {
            canary,
            baseline: vec![BaselineQuery {
                region: region.to_owned(),
                query: canary_query.to_owned(),
                span,
            }],
            source: format!(
                "{region} before {}",
                started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        });
    }
    let shown: Vec<&str> = baseline_regions
        .iter()
        .take(MAX_NAMED_BASELINE_REGIONS)
        .copied()
        .collect();
    let more = baseline_regions.len().saturating_sub(shown.len());
    let source = if more == 0 {
        format!("regions {}", shown.join(", "))
    } else {
        format!("regions {} and {more} more", shown.join(", "))
    };
    Some(ComparisonRequest {
        canary,
        baseline: baseline_regions
            .iter()
            .filter_map(|name| {
                Some(BaselineQuery {
                    region: (*name).to_owned(),
                    query: render_for(name)?,
                    span: canary,
                })
            })
            .collect(),
        source,
    })
}

/// When a gate's window opens and how often it samples.
struct Schedule {
    opens: DateTime<Utc>,
    interval: TimeDelta,
    /// How long after the opening the first sample waits: a comparison gate's window, so
    /// that its first sample covers a whole window of data on the new revision.
    lead: TimeDelta,
}

impl Schedule {
    /// The schedule of `window`, opened when its stage was verified at `verified_at`. A
    /// window opened by a controller that did not record openings opens as if this one
    /// had opened it with the default settle time (`legacy_settle`, zero where consumers
    /// show they loaded the revision).
    fn of(
        gate: &Gate,
        window: &GateStatus,
        verified_at: DateTime<Utc>,
        legacy_settle: std::time::Duration,
    ) -> Self {
        Schedule {
            opens: window
                .opens_at
                .as_ref()
                .map_or_else(|| opening(gate, verified_at, legacy_settle), from_time),
            interval: spec_duration(&gate.interval).unwrap_or(TimeDelta::minutes(1)),
            lead: gate
                .compare
                .as_ref()
                .and_then(|compare| spec_duration(&compare.window))
                .unwrap_or_default(),
        }
    }

    /// When the window's next sample is due.
    fn next_sample_at(&self, window: &GateStatus) -> DateTime<Utc> {
        let first = after(self.opens, self.lead);
        match window.samples.last() {
            Some(last) => after(from_time(&last.at), self.interval).max(first),
            None => first,
        }
    }
}

/// The settle time windows of `spec` wait: `configured`, or none where consumers show
/// they loaded the revision.
fn settle_time(spec: &ConfigRolloutSpec, configured: std::time::Duration) -> std::time::Duration {
    if done_shows_consumers_loaded(spec) {
        std::time::Duration::ZERO
    } else {
        configured
    }
}

/// When a window of `gate` opens for a stage verified at `verified_at`: `initialDelay`
/// later, or `settle` later if that is longer.
fn opening(gate: &Gate, verified_at: DateTime<Utc>, settle: std::time::Duration) -> DateTime<Utc> {
    let delay = gate
        .initial_delay
        .as_deref()
        .and_then(spec_duration)
        .unwrap_or_default();
    let settle = TimeDelta::from_std(settle).unwrap_or(TimeDelta::MAX);
    after(verified_at, delay.max(settle))
}

/// One window per gate (and per region for gates that use `{{region}}`), opening as the
/// module says.
pub(super) fn open_windows(draft: &mut Draft<'_>, index: usize) {
    let stage = &draft.spec.stages[index];
    let regions = &draft.plan.stages[index];
    let verified_at = draft.status.stages[index]
        .verified_at
        .as_ref()
        .map_or(draft.now, from_time);
    let settle = settle_time(draft.spec, draft.obs.gate_settle_time);
    let mut windows = Vec::new();
    for gate in stage
        .gates
        .iter()
        .filter_map(|name| draft.spec.gates.iter().find(|gate| &gate.name == name))
    {
        let opens_at = Some(to_time(opening(gate, verified_at, settle)));
        let running = |region: Option<String>| GateStatus {
            name: gate.name.clone(),
            region,
            verdict: Some(GateVerdict::Running),
            dry_run: gate.dry_run,
            opens_at: opens_at.clone(),
            ..GateStatus::default()
        };
        // A template gate's windows are shaped by the check they open with (recorded
        // below), which may differ from the one the previous stage's windows sampled.
        let opening_with = gate
            .template
            .as_ref()
            .and(draft.obs.gate_templates.get(&gate.name))
            .map(|current| super::gate_templates::sampling(gate, &current.check));
        if samples_per_region(opening_with.as_ref().unwrap_or(gate)) {
            windows.extend(
                regions
                    .iter()
                    .map(|region| running(Some((*region).to_owned()))),
            );
        } else {
            windows.push(running(None));
        }
    }
    draft.status.stages[index].gates = windows;
    if let Some(revision) = draft.status.revision.clone() {
        let stage_name = draft.spec.stages[index].name.clone();
        let changes = super::gate_templates::record_uses(
            &mut draft.status,
            &draft.spec.gates,
            &draft.spec.stages[index].gates,
            &draft.obs.gate_templates,
            &revision,
            &stage_name,
        );
        for change in changes {
            draft.event(super::EventType::Normal, "GateTemplateChanged", change);
        }
    }
}

/// Which of a stage's windows a judgement looks at.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Windows {
    /// Every window: the stage verifies.
    All,
    /// Only dry-run windows: the stage bakes, its gates passed.
    DryRun,
}

/// Counts the new samples of the stage's windows and judges them. Dry-run windows are
/// judged and kept but never pass nor fail the stage.
pub(super) fn judge(draft: &mut Draft<'_>, index: usize, which: Windows) -> StageGates {
    let Some(revision) = draft.revision().map(str::to_owned) else {
        return StageGates::Running;
    };
    let stage_name = draft.spec.stages[index].name.clone();
    let Some(verified_at) = draft.status.stages[index]
        .verified_at
        .as_ref()
        .map(from_time)
    else {
        return StageGates::Running;
    };
    let mut failure = None;
    let mut all_passed = true;
    let mut next_due: Option<DateTime<Utc>> = None;
    let legacy_settle = settle_time(draft.spec, DEFAULT_GATE_SETTLE_TIME);
    // Parse each gate once per decision, not once per window and sample.
    let compiled: Vec<(&Gate, Option<Judge>)> = draft.spec.stages[index]
        .gates
        .iter()
        .filter_map(|name| draft.spec.gates.iter().find(|gate| &gate.name == name))
        .map(|gate| (gate, Judge::of(gate)))
        .collect();
    // This stage's samples of this revision, grouped by (gate, region) in time order, so
    // that each window finds its own with a binary search instead of a scan.
    let mut samples: Vec<&GateSampleObservation> = draft
        .obs
        .gate_samples
        .iter()
        .filter(|sample| sample.stage == stage_name && sample.revision == revision)
        .collect();
    samples.sort_by(|a, b| {
        (a.gate.as_str(), a.region.as_deref(), a.at).cmp(&(
            b.gate.as_str(),
            b.region.as_deref(),
            b.at,
        ))
    });
    for window in &mut draft.status.stages[index].gates {
        if which == Windows::DryRun && !window.dry_run {
            continue;
        }
        let Some((gate, condition)) = compiled.iter().find(|(gate, _)| gate.name == window.name)
        else {
            continue;
        };
        let schedule = &Schedule::of(gate, window, verified_at, legacy_settle);
        if window.verdict == Some(GateVerdict::Running)
            && let Some(judge) = condition
        {
            let own = {
                let key = (window.name.as_str(), window.region.as_deref());
                let of_window = |sample: &&GateSampleObservation| {
                    (sample.gate.as_str(), sample.region.as_deref()).cmp(&key)
                };
                let first = samples.partition_point(|sample| of_window(sample).is_lt());
                let last = samples.partition_point(|sample| of_window(sample).is_le());
                samples.get(first..last).unwrap_or_default()
            };
            record_samples(
                own.iter().copied(),
                gate,
                judge,
                schedule,
                window,
                if window.dry_run {
                    &mut draft.dry_run_samples_judged
                } else {
                    &mut draft.samples_judged
                },
            );
            window.verdict = Some(verdict_of(gate, window));
            if window.verdict == Some(GateVerdict::Passed) {
                // A passed window keeps its counts and the sample that passed it; the
                // rest would only grow the object (stages x regions x gates x samples).
                let excess = window.samples.len().saturating_sub(1);
                window.samples.drain(..excess);
            }
        }
        if window.dry_run {
            if window.verdict == Some(GateVerdict::Running) {
                let due = pending_recheck(draft.obs, &stage_name, window, draft.now)
                    .unwrap_or_else(|| schedule.next_sample_at(window));
                next_due = Some(next_due.map_or(due, |current| current.min(due)));
            }
            continue;
        }
        match window.verdict {
            Some(GateVerdict::Passed) => {}
            Some(GateVerdict::Failed) => {
                all_passed = false;
                failure.get_or_insert_with(|| failure_message(gate, window, &stage_name));
            }
            _ => {
                all_passed = false;
                let due = pending_recheck(draft.obs, &stage_name, window, draft.now)
                    .unwrap_or_else(|| schedule.next_sample_at(window));
                next_due = Some(next_due.map_or(due, |current| current.min(due)));
            }
        }
    }
    if let Some(message) = failure {
        return StageGates::Failed(message);
    }
    // Before a pass too: a dry-run window still samples while its stage bakes.
    if let Some(due) = next_due {
        draft.wake_at(due.max(draft.now));
    }
    if all_passed {
        return StageGates::Passed;
    }
    StageGates::Running
}

/// When to look again at a window whose sample is still running (a job gate's Job):
/// soon, but not at once.
fn pending_recheck(
    obs: &super::Observations,
    stage: &str,
    window: &GateStatus,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    obs.pending_samples
        .iter()
        .any(|pending| {
            pending.gate == window.name && pending.stage == stage && pending.region == window.region
        })
        .then(|| {
            let recheck = TimeDelta::from_std(super::observations::PENDING_SAMPLE_RECHECK)
                .unwrap_or(TimeDelta::seconds(5));
            after(now, recheck)
        })
}

/// The window's verdict from its counts: failure limits first, so it fails closed.
pub fn verdict_of(gate: &Gate, window: &GateStatus) -> GateVerdict {
    if window.failures > gate.failure_limit
        || window.inconclusives > gate.inconclusive_limit
        || window.consecutive_errors >= gate.consecutive_error_limit.max(1)
    {
        GateVerdict::Failed
    } else if window.successes >= gate.count.max(1) {
        GateVerdict::Passed
    } else {
        GateVerdict::Running
    }
}

/// How a gate's samples are judged.
enum Judge {
    /// Against its condition.
    Condition(Condition),
    /// Against its baseline.
    Compare(Rules),
}

impl Judge {
    /// `None` for a gate whose condition does not parse (refused by validation).
    fn of(gate: &Gate) -> Option<Self> {
        match &gate.compare {
            Some(compare) => Some(Judge::Compare(rules_of(compare))),
            None => Condition::parse(&gate.condition).ok().map(Judge::Condition),
        }
    }
}

/// The judgement rules a comparison gate's spec asks for.
pub fn rules_of(compare: &GateComparison) -> Rules {
    Rules {
        direction: match compare.fail_on {
            ChangeDirection::Increase => Direction::Increase,
            ChangeDirection::Decrease => Direction::Decrease,
            ChangeDirection::Either => Direction::Either,
        },
        tolerance: f64::from(compare.tolerance_percent.max(0)) / 100.0,
        alpha: 1.0 - f64::from(compare.confidence_percent.clamp(50, 99)) / 100.0,
        min_samples: usize::try_from(compare.min_samples.max(1)).unwrap_or(1),
    }
}

/// A counted sample's verdict and what the status shows of it.
struct Judged {
    verdict: Verdict,
    value: Option<String>,
    message: Option<String>,
    comparison: Option<SampleComparison>,
}

/// Judges one answered sample (not a query error).
fn judge_sample(judge: &Judge, sample: &GateSampleObservation) -> Judged {
    let inconclusive = |why: String| Judged {
        verdict: Verdict::Inconclusive,
        value: None,
        message: Some(why),
        comparison: None,
    };
    match (judge, &sample.result, &sample.comparison) {
        (_, QueryResult::Partial(why), _) => inconclusive(bounded(why)),
        (Judge::Compare(rules), _, Some(points)) => judge_comparison(points, rules),
        (Judge::Compare(_), _, None) => inconclusive("no comparison was taken".to_owned()),
        (Judge::Condition(condition), result, _) => {
            let evaluation = evaluate(condition, result);
            let message = match evaluation.verdict {
                Verdict::Successful => None,
                Verdict::Failed => Some("condition not met".to_owned()),
                Verdict::Inconclusive => Some(
                    evaluation
                        .reason
                        .map_or("inconclusive", |reason| reason.as_str())
                        .to_owned(),
                ),
            };
            Judged {
                verdict: evaluation.verdict,
                value: evaluation.value.map(|value| value.to_string()),
                message,
                comparison: None,
            }
        }
    }
}

/// A comparison's verdict, its words, and both sides as the status shows them.
fn judge_comparison(points: &ComparisonSample, rules: &Rules) -> Judged {
    let judged = compare::compare(&points.canary, &points.baseline, rules);
    let side = |side: Option<compare::Side>| ComparisonSide {
        points: side
            .map(|side| i32::try_from(side.points).unwrap_or(i32::MAX))
            .unwrap_or(0),
        median: side.map(|side| compare::number(side.median)),
        spread: side.map(|side| compare::number(side.spread)),
    };
    Judged {
        verdict: judged.verdict,
        value: judged.canary.map(|side| compare::number(side.median)),
        message: Some(bounded(&judged.explanation)),
        comparison: Some(SampleComparison {
            canary: side(judged.canary),
            baseline: side(judged.baseline),
            baseline_source: bounded(&points.baseline_source),
            statistic: judged.statistic.map(compare::number),
            p_value: judged.p_value.map(compare::p_value),
            change: judged.change.map(compare::percent),
        }),
    }
}

/// Counts `samples` (this window's, in time order) that fall on the window's schedule and
/// were evaluated no earlier than they were due.
fn record_samples<'o>(
    samples: impl Iterator<Item = &'o GateSampleObservation>,
    gate: &Gate,
    judge: &Judge,
    schedule: &Schedule,
    window: &mut GateStatus,
    tally: &mut SampleTally,
) {
    for sample in samples {
        let due = schedule.next_sample_at(window);
        if sample.at < due {
            continue;
        }
        // Whole seconds: a backend asked for "now" may evaluate at the current second
        // rounded down (VictoriaMetrics does, to align with Grafana), and a sample taken in
        // the second it was due is fresh; a backend a second or more behind is not.
        let due_second = due.trunc_subsecs(0);
        let stale = sample
            .evaluated_at
            .filter(|evaluated| *evaluated < due_second);
        let error = match (&sample.result, stale) {
            (QueryResult::Error(why), _) => Some(format!("query error: {why}")),
            (_, Some(evaluated)) => Some(format!(
                "stale answer: evaluated at {}, before the sample was due at {} (window \
                 opened {}); it says nothing of the revision",
                evaluated.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                due.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                schedule
                    .opens
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            )),
            _ => None,
        };
        if let Some(message) = error {
            window.consecutive_errors = window.consecutive_errors.saturating_add(1);
            tally.errors = tally.errors.saturating_add(1);
            window.samples.push(GateSample {
                at: to_time(sample.at),
                value: None,
                verdict: SampleVerdict::Error,
                message: Some(bounded(&message)),
                comparison: None,
            });
            let excess = window.samples.len().saturating_sub(MAX_SAMPLES_PER_GATE);
            window.samples.drain(..excess);
            if verdict_of(gate, window) != GateVerdict::Running {
                break;
            }
            continue;
        }
        window.consecutive_errors = 0;
        let judged = judge_sample(judge, sample);
        let verdict = match judged.verdict {
            Verdict::Successful => {
                window.successes = window.successes.saturating_add(1);
                tally.successful = tally.successful.saturating_add(1);
                SampleVerdict::Successful
            }
            Verdict::Failed => {
                window.failures = window.failures.saturating_add(1);
                tally.failed = tally.failed.saturating_add(1);
                SampleVerdict::Failed
            }
            Verdict::Inconclusive => {
                window.inconclusives = window.inconclusives.saturating_add(1);
                tally.inconclusive = tally.inconclusive.saturating_add(1);
                SampleVerdict::Inconclusive
            }
        };
        window.samples.push(GateSample {
            at: to_time(sample.at),
            value: judged.value,
            verdict,
            message: judged.message,
            comparison: judged.comparison,
        });
        let excess = window.samples.len().saturating_sub(MAX_SAMPLES_PER_GATE);
        window.samples.drain(..excess);
        if verdict_of(gate, window) != GateVerdict::Running {
            break;
        }
    }
}

fn failure_message(gate: &Gate, window: &GateStatus, stage: &str) -> String {
    let place = match &window.region {
        Some(region) => format!("region {region} of stage {stage}"),
        None => format!("stage {stage}"),
    };
    let counts = if window.failures > gate.failure_limit {
        format!(
            "{} failed samples, limit {}",
            window.failures, gate.failure_limit
        )
    } else if window.consecutive_errors >= gate.consecutive_error_limit.max(1) {
        format!(
            "{} query errors in a row, limit {}",
            window.consecutive_errors, gate.consecutive_error_limit
        )
    } else {
        format!(
            "{} inconclusive samples, limit {}",
            window.inconclusives, gate.inconclusive_limit
        )
    };
    let last = window
        .samples
        .last()
        .map(|sample| {
            format!(
                "; last sample {:?} (value {}{})",
                sample.verdict,
                sample.value.as_deref().unwrap_or("none"),
                sample
                    .message
                    .as_deref()
                    .map(|message| format!(", {message}"))
                    .unwrap_or_default()
            )
        })
        .unwrap_or_default();
    format!("gate {} failed in {place}: {counts}{last}", gate.name)
}

/// Longest sample message kept in status.
const MAX_SAMPLE_MESSAGE: usize = 256;

fn bounded(message: &str) -> String {
    match message.char_indices().nth(MAX_SAMPLE_MESSAGE) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message.to_owned(),
    }
}
