//! The Events of one reconcile, told in as few Events as a person reading them needs.
//!
//! A revision of a stage without a wait (no gate, bake, approval or pause) is declared,
//! opens a stage, sees its regions hold the revision, passes it, opens the next, and
//! completes, all within one reconcile: six Events stamped in the same second, each one
//! hub write. At scale they were most of the controller's writes (7 of 9 per rollout per
//! revision, `make scale-bench`). What a person looks for in them is where the revision
//! started reaching regions and where it came to rest; what passed between is a line in
//! the second one's note (and each stage's times are in `status.stages`).
//!
//! So, within each run of consecutive progress Events of one reconcile
//! ([`PROGRESS_REASONS`]):
//! - a revision declared and complete in the run is one `RolloutComplete` Event telling
//!   every transition in its note: nothing in it was waited on;
//! - otherwise the first `StageStarted` is its own Event, telling what came before it in
//!   its note (the declaration), and the last progress Event is its own Event, telling
//!   what came between;
//! - with no `StageStarted`, the last one tells the others.
//!
//! A stage that waits ends the reconcile, so the next stage's start is the first of the
//! next reconcile: every stage a person waited on keeps its own `StageStarted` Event.
//! Every other reason (warnings, approvals, control commands, refusals) is never folded:
//! those are rare, and each one is what someone searches for.

use super::actions::EventType;

/// The transitions every revision goes through, folded as above.
pub const PROGRESS_REASONS: [&str; 4] = [
    "RevisionDeclared",
    "StageStarted",
    "StagePassed",
    "RolloutComplete",
];

/// The apiserver refuses an Event note over 1 KiB; a folded note is cut before.
pub const NOTE_MAX_BYTES: usize = 1000;

/// One Event to publish about a rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// The note: names only, never configuration values.
    pub message: String,
}

impl RolloutEvent {
    fn is_progress(&self) -> bool {
        self.type_ == EventType::Normal && PROGRESS_REASONS.contains(&self.reason.as_str())
    }
}

/// The Events of one reconcile, in order, with each run of progress Events folded.
pub fn fold(events: Vec<RolloutEvent>) -> Vec<RolloutEvent> {
    let mut folded = Vec::with_capacity(events.len());
    let mut run: Vec<RolloutEvent> = Vec::new();
    for event in events {
        if event.is_progress() {
            run.push(event);
        } else {
            fold_run(std::mem::take(&mut run), &mut folded);
            folded.push(event);
        }
    }
    fold_run(run, &mut folded);
    folded
}

fn fold_run(mut run: Vec<RolloutEvent>, into: &mut Vec<RolloutEvent>) {
    if run.len() <= 1 {
        into.extend(run);
        return;
    }
    let Some(mut resting) = run.pop() else {
        return;
    };
    // Declared and complete in one reconcile: nothing in between was waited on.
    let whole_revision = resting.reason == "RolloutComplete"
        && run.iter().any(|event| event.reason == "RevisionDeclared");
    let opening = run
        .iter()
        .position(|event| event.reason == "StageStarted")
        .filter(|_| !whole_revision);
    match opening {
        Some(opening) => {
            let between = run.split_off(opening.saturating_add(1));
            let mut opening_event = run.pop().unwrap_or_else(|| resting.clone());
            opening_event.message = told_with(&opening_event.message, &run);
            resting.message = told_with(&resting.message, &between);
            into.push(opening_event);
            into.push(resting);
        }
        None => {
            resting.message = told_with(&resting.message, &run);
            into.push(resting);
        }
    }
}

/// `message`, then the others' messages, within [`NOTE_MAX_BYTES`].
fn told_with(message: &str, others: &[RolloutEvent]) -> String {
    if others.is_empty() {
        return message.to_owned();
    }
    let also: Vec<&str> = others.iter().map(|event| event.message.as_str()).collect();
    let note = format!("{message} (in the same step: {})", also.join("; "));
    cut(note)
}

fn cut(mut note: String) -> String {
    if note.len() <= NOTE_MAX_BYTES {
        return note;
    }
    let ellipsis = "…";
    let mut end = NOTE_MAX_BYTES.saturating_sub(ellipsis.len());
    while !note.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    note.truncate(end);
    note.push_str(ellipsis);
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(reason: &str, message: &str) -> RolloutEvent {
        RolloutEvent {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    fn reasons(events: &[RolloutEvent]) -> Vec<&str> {
        events.iter().map(|event| event.reason.as_str()).collect()
    }

    /// A revision whose stages wait for nothing: one Event, telling every transition.
    #[test]
    fn a_revision_without_a_wait_is_one_event() {
        let folded = fold(vec![
            normal("RevisionDeclared", "declared r2"),
            normal("StageStarted", "stage canary of r2 started"),
            normal("StagePassed", "stage canary of r2 passed"),
            normal("StageStarted", "stage prod of r2 started"),
            normal("StagePassed", "stage prod of r2 passed"),
            normal("RolloutComplete", "r2 rolled out to every stage"),
        ]);
        assert_eq!(reasons(&folded), ["RolloutComplete"]);
        assert_eq!(
            folded[0].message,
            "r2 rolled out to every stage (in the same step: declared r2; stage canary of r2 \
             started; stage canary of r2 passed; stage prod of r2 started; stage prod of r2 \
             passed)"
        );
    }

    /// A gate's sample ended the first reconcile; the next passes the rest: where it
    /// started reaching regions again, and where it came to rest, each naming what it
    /// folded.
    #[test]
    fn the_reconcile_after_a_wait_keeps_its_first_stage_and_its_end() {
        let waited = fold(vec![
            normal("RevisionDeclared", "declared r2"),
            normal("StageStarted", "stage canary of r2 started"),
        ]);
        assert_eq!(reasons(&waited), ["StageStarted"]);
        assert_eq!(
            waited[0].message,
            "stage canary of r2 started (in the same step: declared r2)"
        );
        let folded = fold(vec![
            normal("StagePassed", "stage canary of r2 passed"),
            normal("StageStarted", "stage prod of r2 started"),
            normal("StagePassed", "stage prod of r2 passed"),
            normal("RolloutComplete", "r2 rolled out to every stage"),
        ]);
        assert_eq!(reasons(&folded), ["StageStarted", "RolloutComplete"]);
        assert_eq!(
            folded[0].message,
            "stage prod of r2 started (in the same step: stage canary of r2 passed)"
        );
        assert_eq!(
            folded[1].message,
            "r2 rolled out to every stage (in the same step: stage prod of r2 passed)"
        );
    }

    /// The reconcile that ends waiting on an approval: the stage it opened keeps its
    /// Event, and the approval request is never folded.
    #[test]
    fn a_stage_that_opened_keeps_its_event_before_a_wait() {
        let folded = fold(vec![
            normal("RevisionDeclared", "declared r1"),
            normal("StageStarted", "stage canary of r1 started"),
            normal("StagePassed", "stage canary of r1 passed"),
            normal(
                "StageApprovalRequired",
                "stage prod of r1 awaits a StageApproval",
            ),
        ]);
        assert_eq!(
            reasons(&folded),
            ["StageStarted", "StagePassed", "StageApprovalRequired"]
        );
        assert!(folded[0].message.starts_with("stage canary of r1 started"));
    }

    #[test]
    fn the_reconcile_after_an_approval_keeps_the_approval_and_the_stage() {
        let folded = fold(vec![
            normal("StageApproved", "stage prod of r1 approved by alice"),
            normal("StageStarted", "stage prod of r1 started"),
            normal("StagePassed", "stage prod of r1 passed"),
            normal("RolloutComplete", "r1 rolled out to every stage"),
        ]);
        assert_eq!(
            reasons(&folded),
            ["StageApproved", "StageStarted", "RolloutComplete"]
        );
        assert_eq!(folded[1].message, "stage prod of r1 started");
    }

    #[test]
    fn without_a_stage_start_the_last_tells_the_rest() {
        let folded = fold(vec![
            normal("StagePassed", "stage prod of r1 passed"),
            normal("RolloutComplete", "r1 rolled out to every stage"),
        ]);
        assert_eq!(reasons(&folded), ["RolloutComplete"]);
        assert!(
            folded[0]
                .message
                .ends_with("(in the same step: stage prod of r1 passed)")
        );
    }

    #[test]
    fn lone_events_and_warnings_are_untouched() {
        let declared = vec![normal("RevisionDeclared", "declared r3")];
        assert_eq!(fold(declared.clone()), declared);
        let warning = RolloutEvent {
            type_: EventType::Warning,
            reason: "StageStarted".to_owned(),
            message: "not a progress Event: a Warning".to_owned(),
        };
        let events = vec![
            normal("StagePassed", "stage a of r1 passed"),
            warning.clone(),
            normal("StagePassed", "stage b of r1 passed"),
        ];
        assert_eq!(fold(events.clone()), events);
    }

    #[test]
    fn a_long_fold_is_cut_within_the_note_bound_on_a_char_boundary() {
        let mut events = vec![normal("StageStarted", "stage s0 of r1 started")];
        for index in 1..60 {
            events.push(normal(
                "StagePassed",
                &format!("stage s{index}é of r1 passed"),
            ));
        }
        events.push(normal("RolloutComplete", "r1 rolled out to every stage"));
        let folded = fold(events);
        assert_eq!(reasons(&folded), ["StageStarted", "RolloutComplete"]);
        assert!(folded[1].message.len() <= NOTE_MAX_BYTES);
        assert!(
            folded[1]
                .message
                .starts_with("r1 rolled out to every stage")
        );
        assert!(folded[1].message.ends_with('…'));
    }
}
