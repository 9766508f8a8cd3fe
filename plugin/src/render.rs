//! What the plugin prints, as pure functions of the objects read: the `get` tree, the
//! `list` table, `history`, what a rollout waits on and who can unblock it, and the verdict
//! `status` exits with. No IO and no clock, so every rendering has a snapshot test.
//!
//! Status never holds a configuration value, and nothing here reads `spec.data`: the
//! renderings show names, revisions, digests, counts and metric samples only. `diff` is
//! the one rendering given values (read from the revisions, under the caller's RBAC), and
//! it masks them unless asked.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use configrollout_api::{
    Approval, CONTRACT_STAGE, ConfigRollout, ConfigRolloutStatus, GateStatus, LifecycleMark,
    RegionRolloutStatus, RevisionStep, RolloutPhase, StageState, StageStatus, conditions,
};

pub use configrollout_api::annotations::SPEC_AUTHOR_ANNOTATION;
use configrollout_api::author_stamp::AuthorStamp;
/// How many of a gate's most recent samples the tree shows.
pub const SAMPLES_SHOWN: usize = 3;

/// An API time as the plugin prints it: RFC 3339, in seconds, UTC.
pub fn time(at: &Time) -> String {
    at.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn phase_name(phase: Option<RolloutPhase>) -> String {
    phase.map_or_else(|| "-".to_owned(), |phase| format!("{phase:?}"))
}

fn reason_and_message(condition: Option<&Condition>) -> String {
    match condition {
        Some(c) if c.message.is_empty() => c.reason.clone(),
        Some(c) => format!("{}: {}", c.reason, printable(&c.message)),
        None => "no reason recorded".to_owned(),
    }
}

/// `text` safe to print on one line of someone's terminal: status messages echo what
/// tenants wrote (a selector, a query, a region's error), and a control character
/// (ESC, CR, a line break) would let one tenant clear or overwrite the screen of everyone
/// who lists rollouts; a bidirectional override would reorder what follows it. Each is
/// shown as U+FFFD.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    use configrollout_api::text::is_unsafe_to_show;
    if !text.chars().any(is_unsafe_to_show) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| if is_unsafe_to_show(c) { '\u{fffd}' } else { c })
            .collect(),
    )
}

/// Whether the status was written for the spec as it is now (a status older than the
/// spec says nothing yet about the latest change).
pub fn status_is_current(rollout: &ConfigRollout) -> bool {
    let observed = rollout
        .status
        .as_ref()
        .and_then(|status| status.observed_generation);
    match (rollout.metadata.generation, observed) {
        (Some(generation), Some(observed)) => observed >= generation,
        (None, _) => true,
        (Some(_), None) => false,
    }
}

/// How a rollout ended, as far as `status` is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every stage of the revision passed: exit 0.
    Complete(String),
    /// Halted, rolled back or an invalid spec: exit 1, with the condition's reason and
    /// message.
    Failed(String),
}

/// The end the rollout has reached, or `None` while it is still under way (or its status
/// predates the current spec).
pub fn outcome(rollout: &ConfigRollout) -> Option<Outcome> {
    let status = rollout.status.as_ref()?;
    if !status_is_current(rollout) {
        return None;
    }
    let revision = status.revision.as_deref().unwrap_or("-");
    if let Some(invalid) = status.true_condition(conditions::INVALID_SPEC) {
        return Some(Outcome::Failed(format!(
            "InvalidSpec: {}",
            reason_and_message(Some(invalid))
        )));
    }
    match status.phase? {
        RolloutPhase::Complete => Some(Outcome::Complete(format!(
            "Complete: {revision} in {} regions",
            status.progress.as_deref().unwrap_or("-")
        ))),
        RolloutPhase::Halted => Some(Outcome::Failed(format!(
            "Halted: {revision}: {}",
            reason_and_message(status.true_condition(conditions::HALTED))
        ))),
        RolloutPhase::RolledBack => Some(Outcome::Failed(format!(
            "RolledBack: {revision}: {}",
            reason_and_message(status.true_condition(conditions::ROLLED_BACK))
        ))),
        _ => None,
    }
}

/// The stage (or `contract`) that waits for an approval now, if any.
pub fn awaiting_approval(rollout: &ConfigRollout) -> Option<String> {
    let status = rollout.status.as_ref()?;
    if status.phase != Some(RolloutPhase::AwaitingApproval) || !status_is_current(rollout) {
        return None;
    }
    status.current_stage.clone()
}

/// Whether `stage` (or `contract`) of the rollout's spec requires an approval.
pub fn requires_approval(rollout: &ConfigRollout, stage: &str) -> bool {
    if stage == CONTRACT_STAGE {
        return rollout.spec.strategy.contract.approval == Approval::Required;
    }
    rollout
        .spec
        .stages
        .iter()
        .any(|declared| declared.name == stage && declared.approval == Approval::Required)
}

/// Why `approver` may not approve `rollout` under four-eyes (they last changed its spec,
/// as the apiserver stamped it), if that is so. The controller would refuse such an
/// approval; saying so before creating it spares a record that approves nothing.
pub fn four_eyes_refusal(rollout: &ConfigRollout, approver: &str) -> Option<String> {
    if !rollout.spec.four_eyes {
        return None;
    }
    let namespace = rollout.namespace().unwrap_or_default();
    let name = rollout.name_any();
    if let Some(record) = super::approve::current_record(rollout)
        && record.authors.iter().any(|author| author == approver)
    {
        return Some(format!(
            "four-eyes: you ({approver}) changed what {} of configrollout {namespace}/{name} \
             declares (authors: {}), so someone else must approve it",
            record.name,
            printable(&record.authors.join(", "))
        ));
    }
    // No revision records its authors yet: the spec's stamp lists who changed it.
    let stamp = rollout.annotations().get(SPEC_AUTHOR_ANNOTATION)?;
    let changed_it = match AuthorStamp::parse(stamp) {
        AuthorStamp::Changes(changes) => changes.iter().any(|(_, user)| *user == approver),
        AuthorStamp::Single(user) => user == approver,
    };
    changed_it.then(|| {
        format!(
            "four-eyes: you ({approver}) changed the spec of configrollout {}/{}, so \
             someone else must approve it",
            rollout.namespace().unwrap_or_default(),
            rollout.name_any()
        )
    })
}

/// What a rollout waits on, and who can unblock it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// What blocks the rollout (or `nothing`).
    pub what: String,
    /// Who can unblock it, and how.
    pub who: String,
}

fn waiting(what: impl Into<String>, who: impl Into<String>) -> Waiting {
    Waiting {
        what: what.into(),
        who: who.into(),
    }
}

/// What the rollout waits on now and who can unblock it, from its status.
pub fn waiting_on(rollout: &ConfigRollout) -> Waiting {
    let name = rollout.name_any();
    let namespace = rollout.namespace().unwrap_or_default();
    let editors = format!("whoever may edit configrollouts in {namespace}");
    let Some(status) = rollout.status.as_ref() else {
        return waiting(
            "the controller: no status yet",
            "the controller (is it running?)",
        );
    };
    if !status_is_current(rollout) {
        return waiting(
            "the controller to observe the latest spec",
            "the controller (is it running?)",
        );
    }
    let revision = status.revision.as_deref().unwrap_or("-");
    if let Some(invalid) = status.true_condition(conditions::INVALID_SPEC) {
        return waiting(
            format!(
                "a valid spec ({}); no region is written",
                reason_and_message(Some(invalid))
            ),
            format!("{editors}: fix the spec (`kubectl configrollout lint -f FILE` checks it)"),
        );
    }
    match status.phase {
        None | Some(RolloutPhase::Pending) => waiting(
            "the controller to declare the first revision",
            "the controller",
        ),
        Some(RolloutPhase::Paused) => waiting(
            "spec.paused: nothing new starts",
            format!("{editors}: kubectl configrollout resume {name} -n {namespace}"),
        ),
        Some(RolloutPhase::AwaitingApproval) => {
            let stage = status.current_stage.as_deref().unwrap_or("-");
            // The short digest an approval would name, so that what was read is what is
            // approved (issue 28).
            let digest = super::approve::approvable(rollout)
                .map(|(_, digest)| format!(" (digest {digest})"))
                .unwrap_or_default();
            let mut what = if stage == CONTRACT_STAGE {
                format!("an approval of the contract step of {revision}{digest}")
            } else {
                format!("an approval of stage {stage} of {revision}{digest}")
            };
            if let Some(refused) = status
                .true_condition(conditions::AWAITING_APPROVAL)
                .filter(|condition| condition.reason == "ApprovalRefused")
            {
                let _ = write!(what, " ({})", printable(&refused.message));
            }
            let other_than = if rollout.spec.four_eyes {
                let latest = rollout
                    .annotations()
                    .get(SPEC_AUTHOR_ANNOTATION)
                    .and_then(|stamp| AuthorStamp::parse(stamp).latest());
                match latest {
                    Some(author) => format!(", other than {} (four-eyes)", printable(author)),
                    None => ", other than the spec's author (four-eyes)".to_owned(),
                }
            } else {
                String::new()
            };
            // The command names the revision (and digest) an approval would name, so
            // that it approves what was read here and nothing declared since.
            let pinned = match super::approve::approvable(rollout) {
                Some((revision, digest)) => format!(" --revision {revision} --digest {digest}"),
                None => String::new(),
            };
            waiting(
                what,
                format!(
                    "an approver allowed to create stageapprovals in {namespace}{other_than}: \
                     kubectl configrollout approve {name} -n {namespace} --stage {stage}{pinned}"
                ),
            )
        }
        Some(RolloutPhase::Halted) => waiting(
            format!(
                "an operator: {revision} halted ({})",
                reason_and_message(status.true_condition(conditions::HALTED))
            ),
            format!(
                "{editors}: kubectl configrollout retry {name} -n {namespace} once the cause \
                 is fixed, or abort, or declare a new revision"
            ),
        ),
        Some(RolloutPhase::RollingBack) => waiting(
            format!("the controller to finish rolling back {revision}"),
            "the controller",
        ),
        Some(RolloutPhase::RolledBack) => waiting(
            format!(
                "nothing: {revision} was rolled back ({})",
                reason_and_message(status.true_condition(conditions::ROLLED_BACK))
            ),
            format!("{editors}: declare a new revision"),
        ),
        Some(RolloutPhase::Complete) => waiting(
            format!("nothing: {revision} is complete"),
            "nobody needs to",
        ),
        Some(RolloutPhase::Progressing) => progressing(rollout, status, revision),
        // A refusal is said above, from its condition; a phase left without it (a status
        // written by an older controller) waits on the controller.
        Some(RolloutPhase::Refused) => waiting(
            "the controller to say why the spec is refused",
            "the controller",
        ),
    }
}

fn mark_is(mark: Option<&LifecycleMark>, revision: &str, step: Option<RevisionStep>) -> bool {
    mark.is_some_and(|mark| {
        mark.revision == revision && (mark.step.is_none() || step.is_none() || mark.step == step)
    })
}

fn progressing(rollout: &ConfigRollout, status: &ConfigRolloutStatus, revision: &str) -> Waiting {
    let stage = status.current_stage.as_deref().unwrap_or("-");
    let regions: Vec<&RegionRolloutStatus> = status
        .regions
        .iter()
        .filter(|region| region.stage.as_deref() == Some(stage))
        .collect();
    let unreachable: Vec<&RegionRolloutStatus> = regions
        .iter()
        .copied()
        .filter(|region| region.reachable == Some(false))
        .collect();
    if !unreachable.is_empty() {
        let list = unreachable
            .iter()
            .map(|region| match &region.last_error {
                Some(error) => format!("{} ({})", region.name, printable(error)),
                None => region.name.clone(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        return waiting(
            format!("unreachable region {list} of stage {stage}"),
            "the region's operators or the network; the controller keeps retrying until \
             the stage's progressDeadline",
        );
    }
    let stage_status = status.stages.iter().find(|s| s.name == stage);
    match stage_status.map(|s| s.state) {
        Some(StageState::Verifying) => {
            let running: Vec<String> = stage_status
                .into_iter()
                .flat_map(|s| &s.gates)
                .filter(|gate| gate.verdict != Some(configrollout_api::GateVerdict::Passed))
                .map(gate_label)
                .collect();
            waiting(
                format!("gates of stage {stage}: {}", running.join(", ")),
                "the controller samples them on their interval; nobody needs to act",
            )
        }
        Some(StageState::Baking) => {
            let duration = rollout
                .spec
                .stages
                .iter()
                .find(|s| s.name == stage)
                .and_then(|s| s.pause.as_ref())
                .map_or("-", |pause| pause.duration.as_str());
            waiting(
                format!("the bake time ({duration}) of stage {stage}"),
                "time; nobody needs to act",
            )
        }
        _ => {
            // Done means activated with consumers, materialized without (as the engine
            // judges it).
            let (verb, done): (&str, fn(&RegionRolloutStatus) -> Option<&LifecycleMark>) =
                if rollout.spec.consumers.is_empty() {
                    ("materialize", |region| region.materialized.as_ref())
                } else {
                    ("activate", |region| region.activated.as_ref())
                };
            let pending: Vec<&str> = regions
                .iter()
                .filter(|region| !mark_is(done(region), revision, status.step))
                .map(|region| region.name.as_str())
                .collect();
            if pending.is_empty() {
                waiting(
                    format!("the controller to advance stage {stage}"),
                    "the controller",
                )
            } else {
                waiting(
                    format!(
                        "regions {} of stage {stage} to {verb} {revision}",
                        pending.join(", ")
                    ),
                    "the controller and the regions' consumers; nobody needs to act",
                )
            }
        }
    }
}

fn gate_label(gate: &GateStatus) -> String {
    match &gate.region {
        Some(region) => format!("{} ({region})", gate.name),
        None => gate.name.clone(),
    }
}

/// One line of a tree and the lines below it.
struct Node {
    text: String,
    children: Vec<Node>,
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

fn gate_node(rollout: &ConfigRollout, gate: &GateStatus) -> Node {
    let needed = rollout
        .spec
        .gates
        .iter()
        .find(|declared| declared.name == gate.name);
    let verdict = gate
        .verdict
        .map_or_else(|| "Pending".to_owned(), |verdict| format!("{verdict:?}"));
    let mut text = format!(
        "gate {}: {verdict}, {} successful",
        gate_label(gate),
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
            Node::leaf(line)
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
/// gate tree with lifecycle marks, consumer counts, gate samples and approvals.
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
    out
}

fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut text = String::new();
        for (index, cell) in cells.into_iter().enumerate() {
            if index == last {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}   ", width = widths[index]);
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// The `list` table: one row per rollout, with its namespace when `namespaces` is set.
pub fn render_list(rollouts: &[ConfigRollout], namespaces: bool) -> String {
    let mut header = vec![
        "NAME",
        "PHASE",
        "STAGE",
        "REVISION",
        "REGIONS",
        "WAITING-ON",
    ];
    if namespaces {
        header.insert(0, "NAMESPACE");
    }
    let rows: Vec<Vec<String>> = rollouts
        .iter()
        .map(|rollout| {
            let status = rollout.status.as_ref();
            let field = |get: fn(&ConfigRolloutStatus) -> Option<&String>| {
                status.and_then(get).cloned().unwrap_or_else(|| "-".into())
            };
            let mut row = vec![
                rollout.name_any(),
                phase_name(status.and_then(|s| s.phase)),
                field(|s| s.current_stage.as_ref()),
                field(|s| s.revision.as_ref()),
                field(|s| s.progress.as_ref()),
                waiting_on(rollout).what,
            ];
            if namespaces {
                row.insert(0, rollout.namespace().unwrap_or_default());
            }
            row
        })
        .collect();
    if rows.is_empty() {
        return "no configrollouts found\n".to_owned();
    }
    table(&header, &rows)
}

/// The `history` table: the revisions `status.history` keeps, oldest first.
pub fn render_history(rollout: &ConfigRollout) -> String {
    let history = rollout
        .status
        .as_ref()
        .map(|status| status.history.as_slice())
        .unwrap_or_default();
    if history.is_empty() {
        return format!("{}: no revision declared yet\n", rollout.name_any());
    }
    let rows: Vec<Vec<String>> = history
        .iter()
        .map(|record| {
            vec![
                record.name.clone(),
                time(&record.declared_at),
                record.digest.clone().unwrap_or_else(|| "-".into()),
                record.keys_set.to_string(),
                record.keys_removed.to_string(),
                record.outcome.clone().unwrap_or_else(|| "-".into()),
                match (record.authors.is_empty(), &record.authors_unknown) {
                    (_, Some(_)) if record.authors.is_empty() => "unknown".to_owned(),
                    (_, Some(_)) => format!("{},unknown", printable(&record.authors.join(","))),
                    (true, None) => "-".to_owned(),
                    (false, None) => printable(&record.authors.join(",")).into_owned(),
                },
            ]
        })
        .collect();
    table(
        &[
            "REVISION",
            "DECLARED",
            "DIGEST",
            "KEYS-SET",
            "KEYS-REMOVED",
            "OUTCOME",
            "AUTHORS",
        ],
        &rows,
    )
}

/// How one key differs between two revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyChange {
    /// The key is new, with this value.
    Added(String, String),
    /// The key's value changed from the first to the second.
    Changed(String, String, String),
    /// The key is gone; it held this value.
    Removed(String, String),
}

/// The keys that differ from `from` to `to`, in key order; unchanged keys are left out.
pub fn diff_keys(from: &BTreeMap<String, String>, to: &BTreeMap<String, String>) -> Vec<KeyChange> {
    let mut keys: Vec<&String> = from.keys().chain(to.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|key| match (from.get(key), to.get(key)) {
            (None, Some(new)) => Some(KeyChange::Added(key.clone(), new.clone())),
            (Some(old), None) => Some(KeyChange::Removed(key.clone(), old.clone())),
            (Some(old), Some(new)) if old != new => {
                Some(KeyChange::Changed(key.clone(), old.clone(), new.clone()))
            }
            _ => None,
        })
        .collect()
}

/// What stands for a value that is not shown.
pub const MASK: &str = "***";

/// `diff`'s output: a header naming the two sides, one line per changed key (`+` added,
/// `~` changed, `-` removed) and a count. Values are printed only when `show_values`;
/// otherwise every value is [`MASK`].
pub fn render_diff(from: &str, to: &str, changes: &[KeyChange], show_values: bool) -> String {
    let shown = |value: &str| -> String {
        if show_values {
            format!("{value:?}")
        } else {
            MASK.to_owned()
        }
    };
    let mut out = format!("--- {from}\n+++ {to}\n");
    let (mut added, mut changed, mut removed) = (0, 0, 0);
    for change in changes {
        let _ = match change {
            KeyChange::Added(key, new) => {
                added += 1;
                writeln!(out, "+ {key} = {}", shown(new))
            }
            KeyChange::Changed(key, old, new) => {
                changed += 1;
                writeln!(out, "~ {key}: {} -> {}", shown(old), shown(new))
            }
            KeyChange::Removed(key, old) => {
                removed += 1;
                writeln!(out, "- {key} (was {})", shown(old))
            }
        };
    }
    let _ = writeln!(
        out,
        "{added} added, {changed} changed, {removed} removed{}",
        if show_values || changes.is_empty() {
            ""
        } else {
            " (values masked; --show-values to see them)"
        }
    );
    out
}

#[cfg(test)]
mod tests;
