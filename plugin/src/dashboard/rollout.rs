//! One rollout's live view: its summary (phase, what it waits on, pause and approval
//! state, true conditions), the actions that apply to it now, its stages as columns with
//! a cell per region coloured by state (with materialised / delivered / activated marks
//! and consumer counts), each gate window's chart, its notification sinks and how their
//! last delivery went, and its Events. Status holds no
//! configuration value, and nothing here reads `spec.data`.

use std::fmt::Write as _;

use kube::ResourceExt;

use super::chart::gate_chart;
use super::html::{escape, rollout_href};
use super::list::phase_badge;
use super::timeline::{EventLine, timeline};
use crate::approve::approvable;
use crate::render::{awaiting_approval, notification_rows, time, waiting_on};
use configrollout_api::{
    Approval, ConfigRollout, ConfigRolloutStatus, GateVerdict, LifecycleMark, RegionRolloutStatus,
    RolloutPhase, StageState, StageStatus, conditions,
};

/// Where a region is with the current revision, as the cell's class and label.
pub fn region_state(
    region: &RegionRolloutStatus,
    revision: Option<&str>,
    consumers: bool,
) -> &'static str {
    let at = |mark: &Option<LifecycleMark>| {
        mark.as_ref()
            .is_some_and(|mark| revision.is_none_or(|revision| mark.revision == revision))
    };
    if region.reachable == Some(false) {
        "unreachable"
    } else if region.last_error.is_some() {
        "error"
    } else if consumers && at(&region.activated) {
        "activated"
    } else if consumers && at(&region.delivered) {
        "delivered"
    } else if at(&region.materialized) {
        if consumers { "materialized" } else { "done" }
    } else {
        "pending"
    }
}

fn mark(label: &str, mark: Option<&LifecycleMark>) -> String {
    match mark {
        Some(mark) => format!(
            r#"<span class="mark" title="{} at {}">{label} {}</span>"#,
            escape(label),
            escape(&time(&mark.at)),
            escape(&mark.revision)
        ),
        None => format!(r#"<span class="mark none">{label} -</span>"#),
    }
}

fn region_cell(region: &RegionRolloutStatus, revision: Option<&str>, consumers: bool) -> String {
    let state = region_state(region, revision, consumers);
    let mut out = format!(
        r#"<div class="region state-{state}" data-region="{name}" data-state="{state}"><div class="region-name">{name} <span class="state">{state}</span></div>"#,
        name = escape(&region.name)
    );
    out.push_str(&mark("materialized", region.materialized.as_ref()));
    if consumers {
        out.push_str(&mark("delivered", region.delivered.as_ref()));
        out.push_str(&mark("activated", region.activated.as_ref()));
    }
    if let Some(counts) = region.consumers {
        let _ = write!(
            out,
            r#"<div class="counts">consumers {}/{t} delivered, {}/{t} activated</div>"#,
            counts.delivered,
            counts.activated,
            t = counts.total
        );
    }
    if let Some(error) = &region.last_error {
        let _ = write!(out, r#"<div class="error">{}</div>"#, escape(error));
    }
    for (label, keys) in [
        ("drifted", &region.drifted_keys),
        ("overridden", &region.overridden_keys),
        (
            "overrides back from a restore (removed since: keep, or drop with KEY-)",
            &region.restored_overrides,
        ),
    ] {
        if !keys.is_empty() {
            let _ = write!(
                out,
                r#"<div class="keys">{label}: {}</div>"#,
                escape(&keys.join(", "))
            );
        }
    }
    out.push_str("</div>");
    out
}

fn stage_column(
    rollout: &ConfigRollout,
    status: &ConfigRolloutStatus,
    stage: &StageStatus,
) -> String {
    let declared = rollout.spec.stages.iter().find(|s| s.name == stage.name);
    let revision = status.revision.as_deref();
    let consumers = !rollout.spec.consumers.is_empty();
    let state = format!("{:?}", stage.state);
    let mut out = format!(
        r#"<section class="stage stage-{}" data-stage="{}"><h3>{} <span class="badge">{}</span></h3>"#,
        escape(&state.to_lowercase()),
        escape(&stage.name),
        escape(&stage.name),
        escape(&state)
    );
    match (&stage.approval, declared.map(|s| s.approval)) {
        (Some(record), _) => {
            let _ = write!(
                out,
                r#"<p class="approval approved">approved by <b>{}</b> at {}{}</p>"#,
                escape(&record.approver),
                escape(&time(&record.approved_at)),
                record
                    .reason
                    .as_deref()
                    .map(|reason| format!(": “{}”", escape(reason)))
                    .unwrap_or_default()
            );
        }
        (None, Some(Approval::Required)) if stage.state == StageState::AwaitingApproval => {
            out.push_str(
                r#"<p class="approval awaiting">approval required: awaiting a StageApproval</p>"#,
            );
        }
        (None, Some(Approval::Required)) => {
            out.push_str(r#"<p class="approval">approval required</p>"#);
        }
        _ => {}
    }
    if let Some(pause) = declared.and_then(|s| s.pause.as_ref()) {
        let _ = write!(
            out,
            r#"<p class="bake">bake time {}{}</p>"#,
            escape(&pause.duration),
            if stage.state == StageState::Baking {
                ", baking now"
            } else {
                ""
            }
        );
    }
    for (label, at) in [
        ("started", &stage.started_at),
        ("verified", &stage.verified_at),
        ("passed", &stage.passed_at),
    ] {
        if let Some(at) = at {
            let _ = write!(out, r#"<p class="when">{label} {}</p>"#, escape(&time(at)));
        }
    }
    out.push_str(r#"<div class="regions">"#);
    for region in status
        .regions
        .iter()
        .filter(|region| region.stage.as_deref() == Some(stage.name.as_str()))
    {
        out.push_str(&region_cell(region, revision, consumers));
    }
    out.push_str("</div>");
    for gate in &stage.gates {
        let declared = rollout
            .spec
            .gates
            .iter()
            .find(|declared| declared.name == gate.name);
        let condition = declared
            .filter(|declared| declared.compare.is_none())
            .map(|declared| declared.condition.as_str());
        let judged_by = match declared.and_then(|declared| declared.compare.as_ref()) {
            Some(compare) => format!(
                " · compared with its baseline: fails on a significant {:?} beyond {}% \
                 ({}% confidence, {} windows)",
                compare.fail_on,
                compare.tolerance_percent,
                compare.confidence_percent,
                escape(&compare.window)
            ),
            None => condition
                .map(|condition| format!(" · <code>{}</code>", escape(condition)))
                .unwrap_or_default(),
        };
        let verdict = gate
            .verdict
            .map_or_else(|| "Pending".to_owned(), |verdict| format!("{verdict:?}"));
        let class = match gate.verdict {
            Some(GateVerdict::Passed) => "passed",
            Some(GateVerdict::Failed) => "failed",
            _ => "running",
        };
        let _ = write!(
            out,
            r#"<figure class="gate gate-{class}" data-gate="{}"><figcaption>gate <b>{}</b>{}{} <span class="badge">{}</span> {} ok, {} failed, {} inconclusive{}</figcaption>{}</figure>"#,
            escape(&gate.name),
            escape(&gate.name),
            gate.region
                .as_deref()
                .map(|region| format!(" in {}", escape(region)))
                .unwrap_or_default(),
            if gate.dry_run {
                r#" <span class="badge dry-run" title="sampled and kept; never passes nor fails the stage">dry run</span>"#
            } else {
                ""
            },
            escape(&verdict),
            gate.successes,
            gate.failures,
            gate.inconclusives,
            judged_by,
            gate_chart(gate, condition)
        );
        out.push_str(&comparison_table(gate));
    }
    out.push_str("</section>");
    out
}

/// A comparison gate's samples: both sides, the test, and why each counted as it did.
fn comparison_table(gate: &configrollout_api::GateStatus) -> String {
    let compared: Vec<_> = gate
        .samples
        .iter()
        .filter_map(|sample| Some((sample, sample.comparison.as_ref()?)))
        .collect();
    if compared.is_empty() {
        return String::new();
    }
    let mut out = format!(
        r#"<table class="comparison" data-gate="{}"><thead><tr><th>sample</th><th>verdict</th><th>canary median (IQR, points)</th><th>baseline median (IQR, points)</th><th>baseline</th><th>U</th><th>p</th><th>change</th><th>why</th></tr></thead><tbody>"#,
        escape(&gate.name)
    );
    let side = |side: &configrollout_api::ComparisonSide| {
        format!(
            "{} ({}, {})",
            escape(side.median.as_deref().unwrap_or("-")),
            escape(side.spread.as_deref().unwrap_or("-")),
            side.points
        )
    };
    for (sample, comparison) in compared {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{:?}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&time(&sample.at)),
            sample.verdict,
            side(&comparison.canary),
            side(&comparison.baseline),
            escape(&comparison.baseline_source),
            escape(comparison.statistic.as_deref().unwrap_or("-")),
            escape(comparison.p_value.as_deref().unwrap_or("-")),
            escape(comparison.change.as_deref().unwrap_or("-")),
            escape(sample.message.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The stages as columns: from the status, or the spec's stages before any status.
fn stage_grid(rollout: &ConfigRollout, status: &ConfigRolloutStatus) -> String {
    let mut out = String::from(r#"<div class="stages">"#);
    let declared: Vec<StageStatus>;
    let stages: &[StageStatus] = if status.stages.is_empty() {
        declared = rollout
            .spec
            .stages
            .iter()
            .map(|stage| StageStatus {
                name: stage.name.clone(),
                ..StageStatus::default()
            })
            .collect();
        &declared
    } else {
        &status.stages
    };
    for stage in stages {
        out.push_str(&stage_column(rollout, status, stage));
    }
    let unstaged: Vec<&RegionRolloutStatus> = status
        .regions
        .iter()
        .filter(|region| {
            !region
                .stage
                .as_deref()
                .is_some_and(|name| stages.iter().any(|stage| stage.name == name))
        })
        .collect();
    if !unstaged.is_empty() {
        out.push_str(r#"<section class="stage"><h3>regions in no stage</h3><div class="regions">"#);
        for region in unstaged {
            out.push_str(&region_cell(
                region,
                status.revision.as_deref(),
                !rollout.spec.consumers.is_empty(),
            ));
        }
        out.push_str("</div></section>");
    }
    out.push_str("</div>");
    out
}

/// The Notifications section: one row per subscribed sink (and per sink the status
/// still delivers to that the spec no longer names) with its triggers, the notices
/// pending for it and how its last delivery attempt ended; `-` for a subscription the
/// controller has not recorded a delivery for yet. Empty when the rollout subscribes to
/// nothing and its status records no delivery.
pub fn notifications(rollout: &ConfigRollout) -> String {
    let rows = notification_rows(rollout);
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        r#"<section class="notifications"><h2>Notifications</h2><table class="notifications"><thead><tr><th>Sink</th><th>Triggers</th><th>Pending</th><th>Last</th><th>At</th><th>Given up</th><th>Message</th></tr></thead><tbody>"#,
    );
    for row in rows {
        let _ = write!(
            out,
            r#"<tr data-sink="{sink}"><td>{sink}{unsubscribed}</td><td>{triggers}</td>"#,
            sink = escape(&row.sink),
            unsubscribed = if row.subscribed { "" } else { " (namespace)" },
            triggers = escape(&row.triggers),
        );
        match row.delivery {
            Some(delivery) => {
                let _ = write!(
                    out,
                    r#"<td class="pending">{}</td><td class="last last-{}">{}</td><td>{}</td><td class="given-up">{}</td><td class="message">{}</td></tr>"#,
                    delivery.pending,
                    escape(&delivery.last.to_lowercase()),
                    escape(&delivery.last),
                    escape(&delivery.at),
                    delivery.given_up,
                    escape(&delivery.message),
                );
            }
            None => out.push_str(
                r#"<td class="pending">-</td><td class="last">-</td><td>-</td><td class="given-up">-</td><td class="message">-</td></tr>"#,
            ),
        }
    }
    out.push_str("</tbody></table></section>");
    out
}

/// One action button, as a form the page's script posts with the token.
fn action(rollout: &ConfigRollout, verb: &str, label: &str, fields: &str) -> String {
    let href = rollout_href(
        &rollout.namespace().unwrap_or_default(),
        &rollout.name_any(),
    );
    format!(
        r#"<form class="action" method="post" action="{}/{verb}">{fields}<button type="submit" id="action-{verb}">{}</button></form>"#,
        escape(&href),
        escape(label)
    )
}

/// The actions that apply to the rollout now; the API server decides whether the caller
/// may, and a refusal is shown as it answers.
pub fn actions(rollout: &ConfigRollout) -> String {
    let phase = rollout.status.as_ref().and_then(|status| status.phase);
    let mut out = String::from(r#"<div class="actions">"#);
    // The approval names the revision and digest this page shows: one that arrives
    // while the approver types is never what their approval approves.
    if let Some(stage) = awaiting_approval(rollout)
        && let Some((revision, digest)) = approvable(rollout)
    {
        let fields = format!(
            r#"<input type="hidden" name="stage" value="{}"><input type="hidden" name="revision" value="{}"><input type="hidden" name="digest" value="{}"><input type="text" name="reason" placeholder="reason (kept in the approval)" maxlength="512"><span class="stale-note" hidden></span>"#,
            escape(&stage),
            escape(&revision),
            escape(&digest),
        );
        out.push_str(&action(
            rollout,
            "approve",
            &format!("Approve stage {stage} of {revision} ({digest})"),
            &fields,
        ));
    }
    if phase == Some(RolloutPhase::Halted) {
        out.push_str(&action(rollout, "retry", "Retry", ""));
    }
    if !matches!(
        phase,
        Some(RolloutPhase::Complete | RolloutPhase::RolledBack | RolloutPhase::Halted)
    ) {
        out.push_str(&action(rollout, "abort", "Abort", ""));
    }
    if rollout.spec.paused {
        out.push_str(&action(rollout, "resume", "Resume", ""));
    } else {
        out.push_str(&action(rollout, "pause", "Pause", ""));
    }
    out.push_str("</div>");
    out
}

/// The part of the rollout page that the event stream replaces on every change.
pub fn rollout_live(rollout: &ConfigRollout, events: &Result<Vec<EventLine>, String>) -> String {
    let empty = ConfigRolloutStatus::default();
    let status = rollout.status.as_ref().unwrap_or(&empty);
    let spec = &rollout.spec;
    let waiting = waiting_on(rollout);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<h1>{}/{} {}</h1>"#,
        escape(&rollout.namespace().unwrap_or_default()),
        escape(&rollout.name_any()),
        phase_badge(status.phase)
    );
    let revision = match (status.revision.as_deref(), status.step) {
        (Some(revision), Some(step)) => format!("{revision} ({step:?} pass)"),
        (Some(revision), None) => revision.to_owned(),
        (None, _) => "-".to_owned(),
    };
    let _ = write!(
        out,
        r#"<dl class="summary"><dt>target</dt><dd>ConfigMap {}/{} in every selected region</dd><dt>stage</dt><dd id="current-stage">{}</dd><dt>revision</dt><dd>{}</dd><dt>regions done</dt><dd id="progress">{}</dd><dt>paused</dt><dd>{}</dd><dt>on failure</dt><dd>{:?}</dd><dt>four-eyes</dt><dd>{}</dd><dt>waiting on</dt><dd id="waiting-on">{}</dd><dt>unblocks</dt><dd>{}</dd></dl>"#,
        escape(&spec.target.namespace),
        escape(&spec.target.name),
        escape(status.current_stage.as_deref().unwrap_or("-")),
        escape(&revision),
        escape(status.progress.as_deref().unwrap_or("-")),
        if spec.paused {
            "yes (spec.paused)"
        } else {
            "no"
        },
        spec.on_failure,
        if spec.four_eyes { "yes" } else { "no" },
        escape(&waiting.what),
        escape(&waiting.who),
    );
    let true_conditions: Vec<_> = status
        .conditions
        .iter()
        .filter(|condition| {
            conditions::is_true(condition) && !conditions::is_kstatus_summary(&condition.type_)
        })
        .collect();
    if !true_conditions.is_empty() {
        out.push_str(r#"<ul class="conditions">"#);
        for condition in true_conditions {
            let _ = write!(
                out,
                r#"<li class="condition condition-{}"><b>{}</b> ({}){}</li>"#,
                escape(&condition.type_.to_lowercase()),
                escape(&condition.type_),
                escape(&condition.reason),
                if condition.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", escape(&condition.message))
                }
            );
        }
        out.push_str("</ul>");
    }
    out.push_str(&actions(rollout));
    out.push_str(&stage_grid(rollout, status));
    out.push_str(&notifications(rollout));
    out.push_str(&timeline(events));
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use configrollout_api::{GateSample, GateStatus, SampleVerdict};

    fn at() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).expect("t"))
    }

    fn mark(revision: &str) -> Option<LifecycleMark> {
        Some(LifecycleMark {
            revision: revision.to_owned(),
            step: None,
            digest: None,
            at: at(),
        })
    }

    fn gated() -> ConfigRollout {
        let mut rollout: ConfigRollout = serde_saphyr::from_str(
            r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {name: app, namespace: team}
spec:
  target: {namespace: app, name: app}
  data: {timeout_ms: "s3cr3t-value"}
  gates:
    - {name: errors, query: "sum(x)", condition: "result < 0.1"}
  stages:
    - name: canary
      regions: {names: [region-1]}
      gates: [errors]
    - name: prod
      regions: {names: [region-2]}
      approval: Required
"#,
        )
        .expect("rollout");
        rollout.status = Some(ConfigRolloutStatus {
            phase: Some(RolloutPhase::AwaitingApproval),
            revision: Some("r2".to_owned()),
            history: vec![configrollout_api::RevisionRecord {
                name: "r2".to_owned(),
                digest: Some("hmac-sha256:0123456789abcdef0123".to_owned()),
                declared_at: at(),
                stamp: "1.0@rollout:team/app".to_owned(),
                keys_set: 1,
                keys_removed: 0,
                outcome: None,
                authors: Vec::new(),
                authors_unknown: None,
                schemas: Vec::new(),
                validated_by: Vec::new(),
            }],
            current_stage: Some("prod".to_owned()),
            progress: Some("1/2".to_owned()),
            stages: vec![
                StageStatus {
                    name: "canary".to_owned(),
                    state: StageState::Passed,
                    gates: vec![GateStatus {
                        name: "errors".to_owned(),
                        region: Some("region-1".to_owned()),
                        verdict: Some(GateVerdict::Passed),
                        successes: 1,
                        samples: vec![GateSample {
                            at: at(),
                            value: Some("0.01".to_owned()),
                            verdict: SampleVerdict::Successful,
                            message: None,
                            comparison: None,
                        }],
                        ..GateStatus::default()
                    }],
                    ..StageStatus::default()
                },
                StageStatus {
                    name: "prod".to_owned(),
                    state: StageState::AwaitingApproval,
                    ..StageStatus::default()
                },
            ],
            regions: vec![
                RegionRolloutStatus {
                    name: "region-1".to_owned(),
                    stage: Some("canary".to_owned()),
                    materialized: mark("r2"),
                    ..RegionRolloutStatus::default()
                },
                RegionRolloutStatus {
                    name: "region-2".to_owned(),
                    stage: Some("prod".to_owned()),
                    materialized: mark("r1"),
                    last_error: Some("<dial> refused".to_owned()),
                    ..RegionRolloutStatus::default()
                },
            ],
            ..ConfigRolloutStatus::default()
        });
        rollout
    }

    #[test]
    fn region_states_follow_the_current_revisions_marks() {
        let mut region = RegionRolloutStatus {
            name: "r".to_owned(),
            ..RegionRolloutStatus::default()
        };
        assert_eq!(region_state(&region, Some("r2"), true), "pending");
        region.materialized = mark("r1");
        assert_eq!(region_state(&region, Some("r2"), true), "pending");
        region.materialized = mark("r2");
        assert_eq!(region_state(&region, Some("r2"), false), "done");
        assert_eq!(region_state(&region, Some("r2"), true), "materialized");
        region.delivered = mark("r2");
        assert_eq!(region_state(&region, Some("r2"), true), "delivered");
        region.activated = mark("r2");
        assert_eq!(region_state(&region, Some("r2"), true), "activated");
        region.reachable = Some(false);
        assert_eq!(region_state(&region, Some("r2"), true), "unreachable");
    }

    #[test]
    fn stages_are_columns_of_region_cells_with_gate_charts() {
        let html = rollout_live(&gated(), &Ok(Vec::new()));
        let canary = html.find(r#"data-stage="canary""#).expect("canary column");
        let prod = html.find(r#"data-stage="prod""#).expect("prod column");
        assert!(canary < prod, "in order");
        assert!(
            html.contains(
                r#"<div class="region state-done" data-region="region-1" data-state="done">"#
            ),
            "{html}"
        );
        assert!(
            html.contains(r#"data-region="region-2" data-state="error""#),
            "{html}"
        );
        assert!(html.contains("&lt;dial&gt; refused"), "escaped: {html}");
        assert!(html.contains(r#"<svg class="gate-chart""#), "{html}");
        assert!(
            html.contains("approval required: awaiting a StageApproval"),
            "{html}"
        );
        assert!(html.contains("an approval of stage prod of r2"), "{html}");
        assert!(
            !html.contains("s3cr3t-value"),
            "no configuration value: {html}"
        );
    }

    #[test]
    fn a_dry_run_gate_is_badged_as_one() {
        let mut rollout = gated();
        let html = rollout_live(&rollout, &Ok(Vec::new()));
        assert!(!html.contains(r#"class="badge dry-run""#), "{html}");
        rollout.status.as_mut().expect("status").stages[0].gates[0].dry_run = true;
        let html = rollout_live(&rollout, &Ok(Vec::new()));
        assert!(
            html.contains(r#"gate <b>errors</b> in region-1 <span class="badge dry-run""#),
            "{html}"
        );
    }

    #[test]
    fn a_comparison_gate_shows_both_sides_of_each_sample_escaped() {
        let mut rollout = gated();
        let status = rollout.status.as_mut().expect("status");
        let sample = &mut status.stages[0].gates[0].samples[0];
        sample.verdict = SampleVerdict::Failed;
        sample.message = Some("significantly <higher>".to_owned());
        sample.comparison = Some(configrollout_api::SampleComparison {
            canary: configrollout_api::ComparisonSide {
                points: 10,
                median: Some("0.5".to_owned()),
                spread: Some("0.01".to_owned()),
            },
            baseline: configrollout_api::ComparisonSide {
                points: 20,
                median: Some("0".to_owned()),
                spread: Some("0".to_owned()),
            },
            baseline_source: "regions <script>".to_owned(),
            statistic: Some("200".to_owned()),
            p_value: Some("3.2e-9".to_owned()),
            change: Some("+inf%".to_owned()),
        });
        let html = rollout_live(&rollout, &Ok(Vec::new()));
        assert!(
            html.contains(r#"<table class="comparison" data-gate="errors">"#),
            "{html}"
        );
        assert!(
            html.contains("<td>0.5 (0.01, 10)</td><td>0 (0, 20)</td><td>regions &lt;script&gt;</td><td>200</td><td>3.2e-9</td><td>+inf%</td><td>significantly &lt;higher&gt;</td>"),
            "{html}"
        );
    }

    #[test]
    fn the_kstatus_summary_is_left_to_tools_and_the_conditions_it_sums_up_are_shown() {
        let mut rollout = gated();
        let status = rollout.status.as_mut().expect("status");
        for (type_, message) in [
            (
                "AwaitingApproval",
                "stage prod of r2 awaits a StageApproval",
            ),
            (
                "Reconciling",
                "waiting for an approval: stage prod of r2 awaits a StageApproval",
            ),
        ] {
            configrollout_api::conditions::set(
                &mut status.conditions,
                type_,
                true,
                "AwaitingApproval",
                message.to_owned(),
                Some(1),
                at(),
            );
        }
        let html = rollout_live(&rollout, &Ok(Vec::new()));
        assert!(html.contains("condition-awaitingapproval"), "{html}");
        assert!(!html.contains("condition-reconciling"), "{html}");
    }

    #[test]
    fn notifications_show_each_sink_with_its_pending_count_and_last_delivery() {
        use configrollout_api::{
            DeliveryResult, Notice, NotificationStatus, NotificationTrigger, SinkDelivery,
            Subscription,
        };
        let mut rollout = gated();
        assert!(
            !rollout_live(&rollout, &Ok(Vec::new())).contains("Notifications"),
            "no subscription, no section"
        );
        let subscription = |sink: &str, triggers: Vec<NotificationTrigger>| Subscription {
            sink: sink.to_owned(),
            triggers,
            remind_after: None,
        };
        rollout.spec.notifications = vec![
            subscription("team-slack", Vec::new()),
            subscription("pager", vec![NotificationTrigger::Halted]),
            subscription("new-hook", Vec::new()),
        ];
        let notice = |sequence: i64, trigger: NotificationTrigger| Notice {
            sequence,
            trigger,
            sinks: Vec::new(),
            revision: Some("r2".to_owned()),
            stage: None,
            subject: None,
            reason: None,
            message: None,
            progress: None,
            at: at(),
        };
        let delivery =
            |sink: &str, triggers: Vec<NotificationTrigger>, through: i64| SinkDelivery {
                sink: sink.to_owned(),
                triggers,
                delivered_through: through,
                last_result: Some(DeliveryResult::Delivered),
                last_attempt_at: Some(at()),
                message: None,
                given_up: 0,
            };
        let mut slack = delivery("team-slack", Vec::new(), 1);
        slack.last_result = Some(DeliveryResult::Retrying);
        slack.message = Some("<script>alert(1)</script>\u{1b}[2J\r\u{202e}done".to_owned());
        slack.given_up = 2;
        if let Some(status) = rollout.status.as_mut() {
            status.notifications = Some(NotificationStatus {
                sequence: 3,
                outbox: vec![
                    notice(2, NotificationTrigger::AwaitingApproval),
                    notice(3, NotificationTrigger::StagePassed),
                ],
                sinks: vec![
                    slack,
                    delivery("pager", vec![NotificationTrigger::Halted], 0),
                    delivery("<b>old</b>", Vec::new(), 3),
                ],
                approval_wait: None,
            });
        }
        let html = rollout_live(&rollout, &Ok(Vec::new()));
        let section = notifications(&rollout);
        assert!(html.contains(&section), "{html}");
        assert!(section.starts_with(r#"<section class="notifications"><h2>Notifications</h2>"#));
        assert!(
            section.contains(
                r#"<th>Sink</th><th>Triggers</th><th>Pending</th><th>Last</th><th>At</th><th>Given up</th><th>Message</th>"#
            ),
            "{section}"
        );
        assert!(
            section.contains(
                "<tr data-sink=\"team-slack\"><td>team-slack</td><td>all</td><td class=\"pending\">2</td><td class=\"last last-retrying\">Retrying</td><td>2023-11-14T22:13:20Z</td><td class=\"given-up\">2</td><td class=\"message\">&lt;script&gt;alert(1)&lt;/script&gt;\u{fffd}[2J\u{fffd}\u{fffd}done</td></tr>"
            ),
            "{section}"
        );
        // The pager wants Halted only: nothing in the outbox is for it.
        assert!(
            section.contains(
                r#"<tr data-sink="pager"><td>pager</td><td>Halted</td><td class="pending">0</td><td class="last last-delivered">Delivered</td>"#
            ),
            "{section}"
        );
        assert!(
            section.contains(
                r#"<tr data-sink="new-hook"><td>new-hook</td><td>all</td><td class="pending">-</td><td class="last">-</td><td>-</td><td class="given-up">-</td><td class="message">-</td></tr>"#
            ),
            "{section}"
        );
        assert!(
            section.contains(
                r#"<tr data-sink="&lt;b&gt;old&lt;/b&gt;"><td>&lt;b&gt;old&lt;/b&gt; (namespace)</td><td>all</td><td class="pending">0</td>"#
            ),
            "{section}"
        );
        assert!(
            !section.contains("<script") && !section.contains("<b>"),
            "{section}"
        );
        assert!(
            !section.contains('\u{1b}') && !section.contains('\r') && !section.contains('\u{202e}'),
            "{section:?}"
        );
        let stages = html.find(r#"class="stages""#).expect("stages");
        let notified = html
            .find(r#"class="notifications""#)
            .expect("notifications");
        assert!(stages < notified, "after the stages");
    }

    #[test]
    fn the_actions_that_apply_now_are_offered() {
        let rollout = gated();
        let html = actions(&rollout);
        assert!(html.contains(r#"action="/r/team/app/approve""#), "{html}");
        assert!(html.contains(r#"name="stage" value="prod""#), "{html}");
        assert!(
            html.contains("Approve stage prod of r2 (0123456789ab)"),
            "{html}"
        );
        // The form names what the page shows: an approval never lands on a revision
        // declared while the approver typed.
        assert!(html.contains(r#"name="revision" value="r2""#), "{html}");
        assert!(
            html.contains(r#"name="digest" value="0123456789ab""#),
            "{html}"
        );
        assert!(
            html.contains("action-abort") && html.contains("action-pause"),
            "{html}"
        );
        assert!(!html.contains("action-retry") && !html.contains("action-resume"));

        let mut halted = gated();
        if let Some(status) = halted.status.as_mut() {
            status.phase = Some(RolloutPhase::Halted);
        }
        halted.spec.paused = true;
        let html = actions(&halted);
        assert!(
            html.contains("action-retry") && html.contains("action-resume"),
            "{html}"
        );
        assert!(!html.contains("action-approve") && !html.contains("action-abort"));
    }
}
