//! `docs/reference/conditions.md`: the condition types (the constants of
//! `api/src/conditions.rs`, with their doc comments) and every reason the controller sets
//! on them or on its Events.
//!
//! Reasons are string literals spread over the engine and the reconcile steps, so they
//! are catalogued here, each with what it means, and [`unlisted_reasons`] holds the
//! catalogue to the code: every PascalCase literal of a module that sets conditions or
//! Events must be a catalogued reason (or be named in [`NOT_REASONS`] with why), and every
//! catalogued reason must still be in the code. `tests/docs.rs` fails otherwise.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use configrollout::api::conditions;

use super::source::{self, Source};
use super::{Page, cell, generated_header};

/// Where condition and Event reasons are set: the engine (pure) and the reconcile steps.
const REASON_DIRS: [&str; 2] = ["core/src/engine", "controller/src/reconcile"];

/// What in a file's code says it sets conditions or Events.
const REASON_MARKERS: [&str; 8] = [
    "set_condition(",
    "conditions::set(",
    "set(draft,",
    ".event(",
    "fail(draft,",
    "halt = Some(",
    "fn event_reason",
    "const REASON_",
];

/// One reason, where it is set and what it means.
pub struct Reason {
    /// The reason as set.
    pub name: &'static str,
    /// `(condition type, status)` pairs it is set with; empty for an Event-only reason.
    pub conditions: &'static [(&'static str, &'static str)],
    /// The Event type it is also published with, if any.
    pub event: Option<&'static str>,
    /// What it means.
    pub meaning: &'static str,
}

const fn reason(
    name: &'static str,
    conditions: &'static [(&'static str, &'static str)],
    event: Option<&'static str>,
    meaning: &'static str,
) -> Reason {
    Reason {
        name,
        conditions,
        event,
        meaning,
    }
}

const WARNING: Option<&str> = Some("Warning");
const NORMAL: Option<&str> = Some("Normal");

/// The halt reasons: `Halted` True, and the kstatus summary (`Stalled` True, `Ready`
/// False while Halted; `Reconciling` while the revision is rolled back) carries them.
const HALT: &[(&str, &str)] = &[("Halted", "True"), ("Stalled", "True"), ("Ready", "False")];
/// The refusals: `InvalidSpec` True and the kstatus summary (`Stalled`).
const REFUSED: &[(&str, &str)] = &[
    ("InvalidSpec", "True"),
    ("Stalled", "True"),
    ("Ready", "False"),
];
const RECONCILE_FAILED: &[(&str, &str)] = &[("ReconcileFailed", "True")];

/// Every reason the controller sets on a ConfigRollout or a Region condition, or on an
/// Event of a rollout, in the order a rollout meets them.
pub const REASONS: &[Reason] = &[
    reason(
        "Pending",
        &[
            ("Progressing", "True"),
            ("Reconciling", "True"),
            ("Ready", "False"),
        ],
        None,
        "No revision is declared yet: the rollout waits for desired data (`spec.data` or its `fromConfigMap` source).",
    ),
    reason(
        "RevisionDeclared",
        &[],
        NORMAL,
        "A revision was declared (its keys set and removed, digest prefix and pass). Told in the note of the stage it opened, or of `RolloutComplete`, when the same reconcile went on ([Events](../operations.md#events)).",
    ),
    reason(
        "RolloutProgressing",
        &[("Progressing", "True")],
        None,
        "A revision is rolling out (phase Progressing or AwaitingApproval); the message names the revision, the pass, the stage and the regions done.",
    ),
    reason(
        "StageStarted",
        &[],
        NORMAL,
        "A stage started updating its regions. A stage opened after another in the same reconcile, with nothing waited on, is told in the note of where that reconcile came to rest ([Events](../operations.md#events)).",
    ),
    reason(
        "StageApprovalRequired",
        &[("AwaitingApproval", "True")],
        NORMAL,
        "A stage with `approval: Required` waits for a StageApproval of the current revision.",
    ),
    reason(
        "ContractApprovalRequired",
        &[("AwaitingApproval", "True")],
        NORMAL,
        "The contract step of an expand-and-contract revision waits for a StageApproval for stage `contract`.",
    ),
    reason(
        "ApprovalRefused",
        &[("AwaitingApproval", "True")],
        WARNING,
        "A StageApproval was not counted (four-eyes, another revision or digest, created before the revision, approver policy missing); the message names who and why.",
    ),
    reason(
        "StageApproved",
        &[],
        NORMAL,
        "A StageApproval was counted for a stage.",
    ),
    reason(
        "StagePassed",
        &[],
        NORMAL,
        "A stage's regions are done and its gates and bake time passed. Told in the note of the next Event when the same reconcile went on ([Events](../operations.md#events)).",
    ),
    reason(
        "ContractApproved",
        &[],
        NORMAL,
        "The contract step of a revision was approved.",
    ),
    reason(
        "ContractStarted",
        &[],
        NORMAL,
        "Every region activated the expand pass: the contract pass (deleting the removed keys) starts.",
    ),
    reason(
        "RolloutComplete",
        &[],
        NORMAL,
        "Every stage of the revision passed; its note tells the transitions of the same reconcile before it ([Events](../operations.md#events)).",
    ),
    reason(
        "AllStagesPassed",
        &[("Complete", "True"), ("Ready", "True")],
        None,
        "The current revision passed every stage.",
    ),
    reason(
        "SpecPaused",
        &[("Paused", "True")],
        None,
        "`spec.paused` is true: nothing new is published.",
    ),
    reason(
        "NotPaused",
        &[("Paused", "False")],
        None,
        "`spec.paused` is false.",
    ),
    reason(
        "Paused",
        &[],
        NORMAL,
        "`spec.paused` turned true (as a condition reason, `Paused` is also the phase of that name).",
    ),
    reason("Resumed", &[], NORMAL, "`spec.paused` turned false."),
    reason(
        "GateFailed",
        HALT,
        WARNING,
        "A gate failed (more failed samples than `failureLimit`, inconclusive ones than `inconclusiveLimit`, or `consecutiveErrorLimit` errors in a row); the message names the gate, region and sample. `onFailure` applies.",
    ),
    reason(
        "ProgressDeadlineExceeded",
        HALT,
        WARNING,
        "A stage did not pass within its `progressDeadline` (default 10m); the message names the regions not done. `onFailure` applies.",
    ),
    reason(
        "FutureStamps",
        HALT,
        WARNING,
        "A selected region holds entries of the rollout's keys (or a horizon or frontier) stamped further ahead than the clock's drift bound (60 s): they would win every later write.",
    ),
    reason(
        "TamperedState",
        HALT,
        WARNING,
        "A selected region's companion state fails its MAC: it was edited outside configrollout (or signed with a key the controller does not hold).",
    ),
    reason(
        "Aborted",
        HALT,
        WARNING,
        "An operator aborted the rollout (`configrollout.dev/abort`): what was published is rolled back.",
    ),
    reason(
        "RollbackStarted",
        &[],
        WARNING,
        "The revision is being reverted in every region it reached, last stage first.",
    ),
    reason(
        "RollbackIncomplete",
        HALT,
        WARNING,
        "A rollback did not finish within the progress deadline: the regions it names may still hold the revision.",
    ),
    reason(
        "RollbackRetried",
        &[("Halted", "True")],
        None,
        "A retry resumed a rollback that had given up (`RollbackIncomplete`); the rollout is RollingBack again.",
    ),
    reason(
        "RolledBack",
        &[("RolledBack", "True")],
        NORMAL,
        "The revision was reverted in every region it reached, to the stable revision (also the phase of that name).",
    ),
    reason(
        "Retried",
        &[],
        NORMAL,
        "An operator's retry (`configrollout.dev/retry`) resumed a halted rollout or rollback.",
    ),
    reason(
        "ControlRefused",
        &[],
        WARNING,
        "A retry dated more than 60 s ahead of the controller's clock was refused.",
    ),
    reason(
        "InSync",
        &[("Drifted", "False")],
        None,
        "No region's target differs from what the rollout wrote.",
    ),
    reason(
        "OutOfBandEdit",
        &[("Drifted", "True")],
        None,
        "Keys of the rollout were edited out of band in some region; the message names the regions and keys.",
    ),
    reason(
        "Drifted",
        &[],
        WARNING,
        "`Drifted` turned True (also the condition's name).",
    ),
    reason(
        "RegionLeftPlan",
        &[],
        WARNING,
        "A region is no longer selected by any stage: it keeps what it holds of the rollout.",
    ),
    reason(
        "GateTemplateChanged",
        &[],
        NORMAL,
        "A gate's template changed generation between stages: the next stage's windows use the new one.",
    ),
    reason(
        "Valid",
        &[("InvalidSpec", "False")],
        None,
        "The spec passed every check the controller makes.",
    ),
    reason(
        "OutsideGrant",
        REFUSED,
        WARNING,
        "The spec reaches outside its namespace's grant (target namespace, region, adoption, notification sink, gate templates, gate label matchers); nothing is written.",
    ),
    reason(
        "TargetRefused",
        REFUSED,
        WARNING,
        "A region's target may not be written by this rollout: it exists and configrollout did not create it (no adoption), another rollout owns one of its keys, or a reserved companion name is taken.",
    ),
    reason(
        "InvalidValue",
        REFUSED,
        WARNING,
        "The candidate revision's values break a ConfigSchema, a ClusterConfigSchema or an external validator: it is not declared, the current revision stays.",
    ),
    reason(
        "InvalidSpec",
        REFUSED,
        WARNING,
        "Anything else the schema cannot check (PromQL, the condition grammar, a missing template, a bound): the message names the field (also the condition's name).",
    ),
    reason(
        "PoliciesInstalled",
        &[("AdmissionPolicies", "True")],
        None,
        "The admission policies approvals rely on are installed and bound.",
    ),
    reason(
        "PoliciesMissing",
        &[("AdmissionPolicies", "False")],
        WARNING,
        "An admission policy approvals rely on is not installed or not bound: no approval counts, or four-eyes approvals are refused, as the message says.",
    ),
    reason(
        "FetchFailed",
        RECONCILE_FAILED,
        WARNING,
        "The reconcile could not read what it needs from the hub (the rollout's revisions, approvals, Regions, schemas, the digest key).",
    ),
    reason(
        "ValidateFailed",
        RECONCILE_FAILED,
        WARNING,
        "The reconcile could not finish checking the spec or the candidate's values (a schema or validator could not be read).",
    ),
    reason(
        "ObserveFailed",
        RECONCILE_FAILED,
        WARNING,
        "The reconcile could not observe the regions (their targets, companions, consumers, gates).",
    ),
    reason(
        "ActFailed",
        RECONCILE_FAILED,
        WARNING,
        "A write the engine decided (a region merge, a revision, a restart) failed.",
    ),
    reason(
        "StatusWriteFailed",
        RECONCILE_FAILED,
        WARNING,
        "The rollout's status could not be written.",
    ),
    reason(
        "PruneFailed",
        RECONCILE_FAILED,
        WARNING,
        "Stored revisions the status no longer names could not be deleted.",
    ),
    reason(
        "InternalError",
        RECONCILE_FAILED,
        WARNING,
        "The reconcile panicked (a bug): only this rollout stops; the message names where.",
    ),
    reason(
        "Reachable",
        &[
            ("Ready", "True (Region)"),
            ("Reconciling", "False (Region)"),
        ],
        None,
        "The Region's API server answered the controller's probe.",
    ),
    reason(
        "Unreachable",
        &[
            ("Ready", "False (Region)"),
            ("Stalled", "True (Region)"),
            ("Reconciling", "False (Region)"),
        ],
        None,
        "The Region's API server did not answer the controller's probe (every 15 s); rollouts wait for it until their progress deadline.",
    ),
];

/// PascalCase literals of the scanned modules that are not reasons, and why.
pub const NOT_REASONS: &[(&str, &str)] = &[
    ("Normal", "an Event type"),
    ("Warning", "an Event type"),
    ("True", "a condition status"),
    ("False", "a condition status"),
    (
        "Superseded",
        "a revision's outcome in `status.history` (with Complete, Halted, Aborted, RolledBack)",
    ),
    ("Region", "a kind"),
    ("ConfigRollout", "a kind"),
    ("Reconcile", "a log field"),
];

/// The reasons catalogued in [`REASONS`] that are set on conditions (not Events only).
pub fn condition_reasons() -> impl Iterator<Item = &'static Reason> {
    REASONS
        .iter()
        .filter(|reason| !reason.conditions.is_empty())
}

/// The files that set conditions or Events, without their unit tests.
fn reason_sources(root: &Path) -> Result<Vec<Source>, String> {
    let mut out = Vec::new();
    for dir in REASON_DIRS {
        for source in source::sources(root, dir)? {
            let (code, _) = source::lex(&source.text);
            if REASON_MARKERS.iter().any(|marker| code.contains(marker)) {
                out.push(source);
            }
        }
    }
    Ok(out)
}

fn pascal_case(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|first| first.is_ascii_uppercase())
        && text.len() > 1
        && chars.all(|ch| ch.is_ascii_alphanumeric())
        && text.chars().any(|ch| ch.is_ascii_lowercase())
}

/// Every PascalCase literal of the modules that set reasons, with the files it is in.
fn literals_in_code(root: &Path) -> Result<Vec<(String, BTreeSet<String>)>, String> {
    let mut found: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for source in reason_sources(root)? {
        let (_, literals) = source::lex(&source.text);
        for literal in literals {
            if pascal_case(&literal.value) {
                found
                    .entry(literal.value)
                    .or_default()
                    .insert(source.path.clone());
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// What disagrees between [`REASONS`] and the code: literals of the reason-setting
/// modules that are neither a catalogued reason, a phase nor in [`NOT_REASONS`], and
/// catalogued reasons no such module holds. Empty when they agree.
pub fn unlisted_reasons(root: &Path, phases: &[String]) -> Result<Vec<String>, String> {
    let found = literals_in_code(root)?;
    let mut problems = Vec::new();
    for (literal, files) in &found {
        let known = REASONS.iter().any(|reason| reason.name == literal)
            || NOT_REASONS.iter().any(|(name, _)| name == literal)
            || phases.iter().any(|phase| phase == literal);
        if !known {
            problems.push(format!(
                "\"{literal}\" ({}) is set by the code but not catalogued: add it to REASONS \
                 (or NOT_REASONS) in e2e/src/docs/conditions.rs",
                files.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    for reason in REASONS {
        if !found.iter().any(|(literal, _)| literal == reason.name) {
            problems.push(format!(
                "reason {} is catalogued in e2e/src/docs/conditions.rs but no longer in {}",
                reason.name,
                REASON_DIRS.join(" or ")
            ));
        }
    }
    Ok(problems)
}

/// The doc comment of the constant of `api/src/conditions.rs` whose value is `type_`.
fn type_doc(consts: &[source::StrConst], type_: &str) -> String {
    consts
        .iter()
        .find(|constant| constant.value == type_)
        .map(|constant| constant.doc.clone())
        .unwrap_or_default()
}

/// The page.
pub fn page(root: &Path, phases: &[String]) -> Result<Page, String> {
    let conditions_rs = std::fs::read_to_string(root.join("api/src/conditions.rs"))
        .map_err(|error| format!("read api/src/conditions.rs: {error}"))?;
    let consts = source::str_consts(&conditions_rs);
    let found = literals_in_code(root)?;
    let mut out = generated_header("Conditions and reasons");
    out.push_str(
        "Condition types of `status.conditions` (the standard `metav1.Condition` shape, with \
         `observedGeneration`), from `api/src/conditions.rs`, and every reason the controller \
         sets on them or on the Events of a rollout, from the catalogue in \
         `e2e/src/docs/conditions.rs` that `e2e/tests/docs.rs` holds to the code of \
         `core/src/engine` and `controller/src/reconcile`. What to do about each: \
         [operations](../operations.md#troubleshooting-by-condition-reason).\n\n",
    );
    out.push_str(
        "## ConfigRollout condition types\n\n| type | kstatus | what it says |\n|---|---|---|\n",
    );
    for type_ in conditions::ROLLOUT_CONDITION_TYPES {
        let kstatus = if conditions::is_kstatus_summary(type_) {
            "yes"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "| `{type_}` | {kstatus} | {} |",
            cell(&type_doc(&consts, type_))
        );
    }
    out.push_str(
        "\n## Region condition types\n\nA Region carries the kstatus conditions only: \
         `Ready`, `Reconciling` (always False: a probe decides at once) and `Stalled`, set \
         by the controller's probe.\n\n",
    );
    let _ = writeln!(
        out,
        "## Phases\n\n`status.phase` is one of {}. A condition that is False (`Progressing`, \
         `AwaitingApproval`, `Halted`, `RolledBack`, `Complete`) carries the phase as its \
         reason, and so do `Reconciling` and `Ready` while the rollout is Pending, \
         Progressing, Paused, AwaitingApproval or RollingBack, and `Stalled` when it is \
         RolledBack or Refused.\n",
        phases
            .iter()
            .map(|phase| format!("`{phase}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push_str(
        "## Reasons\n\n| reason | conditions (status) | Event | set in | what it means |\n|---|---|---|---|---|\n",
    );
    for reason in REASONS {
        let conditions = reason
            .conditions
            .iter()
            .map(|(type_, status)| format!("`{type_}` {status}"))
            .collect::<Vec<_>>()
            .join(", ");
        let files = found
            .iter()
            .find(|(literal, _)| literal == reason.name)
            .map(|(_, files)| {
                files
                    .iter()
                    .map(|file| format!("`{file}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            reason.name,
            if conditions.is_empty() {
                "(Event only)".to_owned()
            } else {
                conditions
            },
            reason.event.unwrap_or(""),
            files,
            cell(reason.meaning)
        );
    }
    Ok(Page {
        path: "conditions.md".to_owned(),
        content: out,
    })
}
