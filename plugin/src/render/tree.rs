//! The `get` view: the rollout's summary lines, then its revision -> stage -> region and
//! gate tree, drawn with box-drawing branches.

use std::fmt::Write as _;

use kube::ResourceExt;

use configrollout_api::{
    Approval, CONTRACT_STAGE, ConfigRollout, ConfigRolloutStatus, GateStatus, LifecycleMark,
    RegionRolloutStatus, RevisionStep, RolloutPhase, StageState, StageStatus, conditions,
};

use super::tables::render_notifications;
use super::text::{comparison_summary, gate_label, phase_name, printable, time};
use super::waiting::{Waiting, waiting_on};

/// How many of a gate's most recent samples the tree shows.
pub const SAMPLES_SHOWN: usize = 3;

/// One line of a tree and the lines below it.
pub(super) struct Node {
    pub(super) text: String,
    pub(super) children: Vec<Node>,
}

impl Node {
    fn leaf(text: impl Into<String>) -> Node {
        Node {
            text: text.into(),
            children: Vec::new(),
        }
    }
}

fn draw(out: &mut String, nodes: &[Node], prefix: &str) {
    for (index, node) in nodes.iter().enumerate() {
        let last = index + 1 == nodes.len();
        let (branch, next) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        let _ = writeln!(out, "{prefix}{branch}{}", node.text);
        draw(out, &node.children, &format!("{prefix}{next}"));
    }
}

fn mark_text(label: &str, mark: Option<&LifecycleMark>) -> String {
    match mark {
        None => format!("{label} -"),
        Some(mark) => match mark.step {
            Some(step @ (RevisionStep::Expand | RevisionStep::Contract)) => {
                format!("{label} {} ({step:?})", mark.revision)
            }
            _ => format!("{label} {}", mark.revision),
        },
    }
}

/// Without consumers a region is done once materialized: delivered and activated are
/// never marked, and saying `-` for them would suggest something is missing.
fn region_node(region: &RegionRolloutStatus, has_consumers: bool) -> Node {
    let mut text = if has_consumers {
        format!(
            "region {}: {}, {}, {}",
            region.name,
            mark_text("materialized", region.materialized.as_ref()),
            mark_text("delivered", region.delivered.as_ref()),
            mark_text("activated", region.activated.as_ref()),
        )
    } else {
        format!(
            "region {}: {} (no consumers declared)",
            region.name,
            mark_text("materialized", region.materialized.as_ref()),
        )
    };
    if let Some(consumers) = region.consumers {
        let _ = write!(
            text,
            ", consumers {}/{total} delivered, {}/{total} activated",
            consumers.delivered,
            consumers.activated,
            total = consumers.total
        );
    }
    if region.reachable == Some(false) {
        text.push_str(", UNREACHABLE");
    }
    let mut children = Vec::new();
    if let Some(error) = &region.last_error {
        children.push(Node::leaf(format!("last error: {}", printable(error))));
    }
    if !region.drifted_keys.is_empty() {
        children.push(Node::leaf(format!(
            "drifted keys: {}",
            region.drifted_keys.join(", ")
        )));
    }
    if !region.overridden_keys.is_empty() {
        children.push(Node::leaf(format!(
            "overridden keys: {}",
            region.overridden_keys.join(", ")
        )));
    }
    if !region.restored_overrides.is_empty() {
        children.push(Node::leaf(format!(
            "overrides back from a restore (removed since; keep, or drop with KEY-): {}",
            printable(&region.restored_overrides.join(", "))
        )));
    }
    Node { text, children }
}

pub(super) fn gate_node(rollout: &ConfigRollout, gate: &GateStatus) -> Node {
    let needed = rollout
        .spec
        .gates
        .iter()
        .find(|declared| declared.name == gate.name);
    let verdict = gate
        .verdict
        .map_or_else(|| "Pending".to_owned(), |verdict| format!("{verdict:?}"));
    let mut text = format!(
        "gate {}{}: {verdict}, {} successful",
        gate_label(gate),
        if gate.dry_run {
            " (dry run: never passes nor fails the stage)"
        } else {
            ""
        },
        gate.successes
    );
    if let Some(declared) = needed {
        let _ = write!(text, " of {} needed", declared.count);
    }
    let _ = write!(
        text,
        ", {} failed, {} inconclusive",
        gate.failures, gate.inconclusives
    );
    // A template gate: which template, and which generation its windows sample.
    let used = rollout.status.as_ref().and_then(|status| {
        status
            .gate_templates
            .iter()
            .find(|used| used.gate == gate.name)
    });
    if let Some(used) = used {
        let _ = write!(
            text,
            ", {} generation {}",
            printable(&used.template),
            used.generation
        );
    }
    // Before its first sample, when it will be taken: a window waits for its opening.
    if gate.samples.is_empty()
        && gate.verdict == Some(configrollout_api::GateVerdict::Running)
        && let Some(opens) = &gate.opens_at
    {
        let _ = write!(text, ", window opens {}", time(opens));
    }
    let skip = gate.samples.len().saturating_sub(SAMPLES_SHOWN);
    let children = gate.samples[skip..]
        .iter()
        .map(|sample| {
            let mut line = format!(
                "sample {} value {} {:?}",
                time(&sample.at),
                sample.value.as_deref().unwrap_or("-"),
                sample.verdict
            );
            if let Some(message) = &sample.message {
                let _ = write!(line, ": {}", printable(message));
            }
            match &sample.comparison {
                Some(comparison) => Node {
                    text: line,
                    children: vec![Node::leaf(
                        printable(&comparison_summary(comparison)).into_owned(),
                    )],
                },
                None => Node::leaf(line),
            }
        })
        .collect();
    Node { text, children }
}

fn stage_node(rollout: &ConfigRollout, status: &ConfigRolloutStatus, stage: &StageStatus) -> Node {
    let mut text = format!("stage {}: {:?}", stage.name, stage.state);
    let times = [
        ("started", &stage.started_at),
        ("verified", &stage.verified_at),
        ("passed", &stage.passed_at),
    ];
    let times: Vec<String> = times
        .iter()
        .filter_map(|(label, at)| at.as_ref().map(|at| format!("{label} {}", time(at))))
        .collect();
    if !times.is_empty() {
        let _ = write!(text, " ({})", times.join(", "));
    }
    let declared = rollout.spec.stages.iter().find(|s| s.name == stage.name);
    let mut children = Vec::new();
    match (&stage.approval, declared.map(|s| s.approval)) {
        (Some(record), _) => {
            let mut line = format!(
                "approval: approved by {} at {}",
                record.approver,
                time(&record.approved_at)
            );
            if let Some(reason) = &record.reason {
                let _ = write!(line, ": {reason:?}");
            }
            children.push(Node::leaf(line));
        }
        (None, Some(Approval::Required)) if stage.state == StageState::AwaitingApproval => {
            children.push(Node::leaf("approval: required, awaiting a StageApproval"));
        }
        (None, Some(Approval::Required)) => {
            children.push(Node::leaf("approval: required"));
        }
        _ => {}
    }
    if let Some(pause) = declared.and_then(|s| s.pause.as_ref()) {
        let baking = if stage.state == StageState::Baking {
            ", baking now"
        } else {
            ""
        };
        children.push(Node::leaf(format!("bake time: {}{baking}", pause.duration)));
    }
    children.extend(
        status
            .regions
            .iter()
            .filter(|region| region.stage.as_deref() == Some(stage.name.as_str()))
            .map(|region| region_node(region, !rollout.spec.consumers.is_empty())),
    );
    children.extend(stage.gates.iter().map(|gate| gate_node(rollout, gate)));
    Node { text, children }
}

fn contract_node(rollout: &ConfigRollout, status: &ConfigRolloutStatus) -> Option<Node> {
    let step = status.step?;
    if step == RevisionStep::Single {
        return None;
    }
    let awaiting = status.current_stage.as_deref() == Some(CONTRACT_STAGE)
        && status.phase == Some(RolloutPhase::AwaitingApproval);
    let state = match step {
        RevisionStep::Contract => "running: removed keys are being tombstoned",
        _ if awaiting => "awaiting a StageApproval for stage contract",
        _ => "after the expand pass has been activated everywhere",
    };
    let mut children = Vec::new();
    let contract = &rollout.spec.strategy.contract;
    if contract.approval == Approval::Required {
        children.push(Node::leaf("approval: required"));
    }
    if let Some(pause) = &contract.pause {
        children.push(Node::leaf(format!("bake time: {}", pause.duration)));
    }
    Some(Node {
        text: format!("contract step: {state}"),
        children,
    })
}

/// The `get` view: the rollout, what it waits on, then revision -> stage -> region and
/// gate tree with lifecycle marks, consumer counts, gate samples and approvals, then the
/// notifications table (sinks subscribed and how their last delivery went), if any.
pub fn render_get(rollout: &ConfigRollout) -> String {
    let mut out = String::new();
    let name = rollout.name_any();
    let namespace = rollout.namespace().unwrap_or_default();
    let spec = &rollout.spec;
    let _ = writeln!(out, "ConfigRollout {namespace}/{name}");
    let _ = writeln!(
        out,
        "  target:     ConfigMap {}/{} in every selected region",
        spec.target.namespace, spec.target.name
    );
    let empty = ConfigRolloutStatus::default();
    let status = rollout.status.as_ref().unwrap_or(&empty);
    let _ = writeln!(
        out,
        "  phase:      {}   stage: {}   regions done: {}",
        phase_name(status.phase),
        status.current_stage.as_deref().unwrap_or("-"),
        status.progress.as_deref().unwrap_or("-")
    );
    let _ = writeln!(
        out,
        "  paused:     {}   on failure: {:?}   four-eyes: {}",
        if spec.paused { "yes" } else { "no" },
        spec.on_failure,
        if spec.four_eyes { "yes" } else { "no" }
    );
    let Waiting { what, who } = waiting_on(rollout);
    let _ = writeln!(out, "  waiting on: {what}");
    let _ = writeln!(out, "  unblocks:   {who}");
    for condition in &status.conditions {
        if conditions::is_true(condition) && !conditions::is_kstatus_summary(&condition.type_) {
            let mut line = format!("  condition:  {} ({})", condition.type_, condition.reason);
            if !condition.message.is_empty() {
                let _ = write!(line, ": {}", printable(&condition.message));
            }
            let _ = writeln!(out, "{line}");
        }
    }
    let Some(revision) = status.revision.as_deref() else {
        let _ = writeln!(out, "no revision declared yet");
        out.push_str(&render_notifications(rollout));
        return out;
    };
    let mut text = format!("revision {revision}");
    if let Some(step) = status.step {
        let _ = write!(text, " ({step:?} pass)");
    }
    if let Some(record) = status.history.iter().rev().find(|r| r.name == revision) {
        let _ = write!(
            text,
            ", declared {}, {} keys set, {} removed, digest {}",
            time(&record.declared_at),
            record.keys_set,
            record.keys_removed,
            record.digest.as_deref().unwrap_or("-")
        );
    }
    let _ = writeln!(out, "{text}");
    let mut nodes: Vec<Node> = status
        .stages
        .iter()
        .map(|stage| stage_node(rollout, status, stage))
        .collect();
    if let Some(contract) = contract_node(rollout, status) {
        nodes.push(contract);
    }
    let staged = |region: &&RegionRolloutStatus| {
        region
            .stage
            .as_deref()
            .is_some_and(|stage| status.stages.iter().any(|s| s.name == stage))
    };
    let unstaged: Vec<Node> = status
        .regions
        .iter()
        .filter(|region| !staged(region))
        .map(|region| region_node(region, !spec.consumers.is_empty()))
        .collect();
    if !unstaged.is_empty() {
        nodes.push(Node {
            text: "regions in no stage".to_owned(),
            children: unstaged,
        });
    }
    draw(&mut out, &nodes, "");
    out.push_str(&render_notifications(rollout));
    out
}
