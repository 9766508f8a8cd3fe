//! Gate windows: once every region of a stage is done, each of its gates is sampled every
//! `interval`, starting `initialDelay` after the stage was verified. A gate whose query
//! uses `{{region}}` has one window per region, otherwise one for the stage.
//!
//! A window passes with `count` successful samples; it fails (closed) with more than
//! `failureLimit` failed or more than `inconclusiveLimit` inconclusive samples. Failure is
//! checked first, so no window passes on a sample that also exceeds a limit. Only
//! samples on the schedule count: one taken before the window opened, or less than
//! `interval` after the previous counted one, is ignored, so a repeated sample never
//! counts twice.

use chrono::{DateTime, TimeDelta, Utc};

use crate::api::{
    ConfigRolloutSpec, ConfigRolloutStatus, Gate, GateSample, GateStatus, GateVerdict,
    RolloutPhase, SampleVerdict, StageState,
};
use crate::gates::{Condition, TemplateValues, Verdict, evaluate, render, uses_placeholder};

use super::clock::{from_time, spec_duration, to_time};
use super::{MAX_SAMPLES_PER_GATE, Step};

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

/// The samples due at `now`, for the reconcile to take before calling `step`.
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
    for stage in &status.stages {
        if stage.state != StageState::Verifying {
            continue;
        }
        let Some(verified_at) = stage.verified_at.as_ref().map(from_time) else {
            continue;
        };
        for window in &stage.gates {
            if window.verdict != Some(GateVerdict::Running) {
                continue;
            }
            let Some(gate) = spec.gates.iter().find(|gate| gate.name == window.name) else {
                continue;
            };
            if next_sample_at(gate, window, verified_at) > now {
                continue;
            }
            let values = TemplateValues {
                region: window.region.as_deref().unwrap_or_default(),
                revision,
                stage: &stage.name,
            };
            if let Ok(query) = render(&gate.query, &values) {
                due.push(GateSampleRequest {
                    gate: gate.name.clone(),
                    stage: stage.name.clone(),
                    revision: revision.to_owned(),
                    region: window.region.clone(),
                    query,
                });
            }
        }
    }
    due
}

fn interval(gate: &Gate) -> TimeDelta {
    spec_duration(&gate.interval).unwrap_or(TimeDelta::minutes(1))
}

fn window_opens_at(gate: &Gate, verified_at: DateTime<Utc>) -> DateTime<Utc> {
    let delay = gate
        .initial_delay
        .as_deref()
        .and_then(spec_duration)
        .unwrap_or_default();
    verified_at + delay
}

/// When the window's next sample is due.
fn next_sample_at(gate: &Gate, window: &GateStatus, verified_at: DateTime<Utc>) -> DateTime<Utc> {
    let opens = window_opens_at(gate, verified_at);
    match window.samples.last() {
        Some(last) => (from_time(&last.at) + interval(gate)).max(opens),
        None => opens,
    }
}

/// One window per gate (and per region for gates that use `{{region}}`).
pub(super) fn open_windows(step: &mut Step<'_>, index: usize) {
    let stage = &step.spec.stages[index];
    let regions = &step.plan.stages[index];
    let mut windows = Vec::new();
    for gate in stage
        .gates
        .iter()
        .filter_map(|name| step.spec.gates.iter().find(|gate| &gate.name == name))
    {
        let running = |region: Option<String>| GateStatus {
            name: gate.name.clone(),
            region,
            verdict: Some(GateVerdict::Running),
            ..GateStatus::default()
        };
        if uses_placeholder(&gate.query, "region") {
            windows.extend(regions.iter().map(|region| running(Some(region.clone()))));
        } else {
            windows.push(running(None));
        }
    }
    step.status.stages[index].gates = windows;
}

/// Counts the new samples of the stage's windows and judges them.
pub(super) fn judge(step: &mut Step<'_>, index: usize) -> StageGates {
    let Some(revision) = step.revision().map(str::to_owned) else {
        return StageGates::Running;
    };
    let stage_name = step.spec.stages[index].name.clone();
    let Some(verified_at) = step.status.stages[index]
        .verified_at
        .as_ref()
        .map(from_time)
    else {
        return StageGates::Running;
    };
    let mut failure = None;
    let mut all_passed = true;
    let mut next_due: Option<DateTime<Utc>> = None;
    for window in &mut step.status.stages[index].gates {
        let Some(gate) = step.spec.gates.iter().find(|gate| gate.name == window.name) else {
            continue;
        };
        if window.verdict == Some(GateVerdict::Running) {
            record_samples(step.obs, gate, window, &stage_name, &revision, verified_at);
            window.verdict = Some(verdict_of(gate, window));
        }
        match window.verdict {
            Some(GateVerdict::Passed) => {}
            Some(GateVerdict::Failed) => {
                all_passed = false;
                failure.get_or_insert_with(|| failure_message(gate, window, &stage_name));
            }
            _ => {
                all_passed = false;
                let due = next_sample_at(gate, window, verified_at);
                next_due = Some(next_due.map_or(due, |current| current.min(due)));
            }
        }
    }
    if let Some(message) = failure {
        return StageGates::Failed(message);
    }
    if all_passed {
        return StageGates::Passed;
    }
    if let Some(due) = next_due {
        step.wake_at(due.max(step.now));
    }
    StageGates::Running
}

/// The window's verdict from its counts: failure limits first, so it fails closed.
pub fn verdict_of(gate: &Gate, window: &GateStatus) -> GateVerdict {
    if window.failures > gate.failure_limit || window.inconclusives > gate.inconclusive_limit {
        GateVerdict::Failed
    } else if window.successes >= gate.count.max(1) {
        GateVerdict::Passed
    } else {
        GateVerdict::Running
    }
}

fn record_samples(
    obs: &super::Observations,
    gate: &Gate,
    window: &mut GateStatus,
    stage: &str,
    revision: &str,
    verified_at: DateTime<Utc>,
) {
    let Ok(condition) = Condition::parse(&gate.condition) else {
        return;
    };
    let mut samples: Vec<_> = obs
        .gate_samples
        .iter()
        .filter(|sample| {
            sample.gate == gate.name
                && sample.stage == stage
                && sample.revision == revision
                && sample.region == window.region
        })
        .collect();
    samples.sort_by_key(|sample| sample.at);
    for sample in samples {
        if sample.at < next_sample_at(gate, window, verified_at) {
            continue;
        }
        let evaluation = evaluate(&condition, &sample.result);
        let (verdict, message) = match evaluation.verdict {
            Verdict::Successful => {
                window.successes += 1;
                (SampleVerdict::Successful, None)
            }
            Verdict::Failed => {
                window.failures += 1;
                (SampleVerdict::Failed, Some("condition not met".to_owned()))
            }
            Verdict::Inconclusive => {
                window.inconclusives += 1;
                let reason = evaluation
                    .reason
                    .map_or("inconclusive", |reason| reason.as_str());
                (SampleVerdict::Inconclusive, Some(reason.to_owned()))
            }
        };
        window.samples.push(GateSample {
            at: to_time(sample.at),
            value: evaluation.value.map(|value| value.to_string()),
            verdict,
            message,
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
