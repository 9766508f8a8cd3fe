//! What the reconcile read before calling the engine. Everything the engine decides on
//! comes from here, the spec, the previous status and `now`: nothing else.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::gates::QueryResult;
use configrollout_api::author_stamp::{AUTHOR_STAMP_LINES, AuthorStamp, changes_since};
use configrollout_api::{AuthorsCounted, RevisionStep, SourceAuthorsCounted};

/// Everything observed for one reconcile of one rollout.
#[derive(Debug, Clone, Default)]
pub struct Observations {
    /// `metadata.generation` of the rollout, echoed as `observedGeneration`.
    pub generation: i64,
    /// The desired configuration, as a keyed digest and key counts (never values).
    pub desired: DesiredRevision,
    /// A hybrid logical clock stamp minted by the reconcile, rendered. Used only when this
    /// decision declares a revision, so that the engine itself never reads a clock.
    pub fresh_stamp: String,
    /// Every Region object the reconcile knows, with what was read from its cluster.
    pub regions: Vec<RegionObservation>,
    /// Gate samples taken since the last decision (see [`crate::engine::gates_due`]).
    pub gate_samples: Vec<GateSampleObservation>,
    /// StageApprovals naming this rollout.
    pub approvals: Vec<ApprovalObservation>,
    /// Operator commands (`kubectl configrollout abort|retry`).
    pub control: Control,
    /// Problems found outside the engine's own [`crate::engine::validate`], e.g. a
    /// `fromConfigMap` that does not exist. Reported as `InvalidSpec`.
    pub spec_errors: Vec<String>,
    /// What the rollout's namespace may reach (read from its hub Namespace). The default
    /// allows nothing.
    pub grant: super::Grant,
    /// `metadata.uid` of the rollout: approvals must name it.
    pub rollout_uid: String,
    /// Who changed the spec, as the apiserver stamped it (annotation
    /// `configrollout.dev/spec-author`, see [`configrollout_api::author_stamp`]); `None` when
    /// the annotation is missing.
    pub spec_author: Option<String>,
    /// Who changed what a revision declared now would declare (see
    /// [`configrollout_api::RevisionRecord::authors`]).
    pub revision_authors: RevisionAuthors,
    /// Whether the platform requires four-eyes for every rollout (`--four-eyes`).
    pub four_eyes_default: bool,
    /// The admission policies approvals rely on that are not installed and bound (names);
    /// `None` when they were not checked.
    pub missing_policies: Option<Vec<String>>,
    /// Whether the apiserver binds an approval's `spec.approver` to the user who created
    /// it, and since when: approvals count only where it does.
    pub approver_binding: ApproverBinding,
    /// Why the candidate revision's key/values are refused by its schemas or external
    /// validators (key, rule, pointer; never a value). Reported as `InvalidSpec` (reason
    /// `InvalidValue`); the candidate is not declared and nothing is written anywhere.
    pub value_violations: Vec<String>,
    /// The schemas the candidate was validated against: recorded with the revision when
    /// this decision declares it.
    pub checked_schemas: Vec<configrollout_api::SchemaRecord>,
    /// The external validators that accepted the candidate: recorded with the revision.
    pub accepted_by: Vec<String>,
    /// Regions whose target this rollout may not write: an existing ConfigMap that
    /// configrollout does not manage (and no adoption), or keys that another rollout
    /// manages there. Reported as `InvalidSpec` (reason `TargetRefused`); nothing is
    /// written anywhere.
    pub target_refusals: Vec<String>,
    /// Tombstones the rollout's current revision state holds (removed keys not collected
    /// from it yet).
    pub revision_tombstones: u32,
    /// How long gate windows wait after a stage's regions are done when nothing shows
    /// that the region's consumers loaded the revision (the controller's
    /// `--gate-settle-time`; see `gate_windows`).
    pub gate_settle_time: std::time::Duration,
    /// Each template gate's check as its template is now (see `gate_templates`),
    /// recorded in status when the gate's next windows open.
    pub gate_templates: BTreeMap<String, configrollout_api::GateTemplateUse>,
    /// Samples due that were started and have not finished (a job gate's Job still
    /// running): looked at again after [`PENDING_SAMPLE_RECHECK`], not at once.
    pub pending_samples: Vec<PendingSample>,
}

/// How soon a sample still running is looked at again.
pub const PENDING_SAMPLE_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// A window's sample that was started and has no answer yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSample {
    /// Gate name.
    pub gate: String,
    /// Stage name.
    pub stage: String,
    /// Region, for a per-region window.
    pub region: Option<String>,
}

/// The desired configuration, identified without its values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredRevision {
    /// Keyed digest of the desired key/values.
    pub digest: String,
    /// Keys the new revision would set or change, relative to the current one.
    pub keys_set: u32,
    /// Keys the new revision would remove, relative to the current one.
    pub keys_removed: u32,
}

/// Who changed what the rollout declares now, as stamped by the apiserver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevisionAuthors {
    /// The users known to have changed it (no duplicates).
    pub known: Vec<String>,
    /// Why some author cannot be known, if one cannot.
    pub unknown: Option<String>,
    /// How far the stamps were read: recorded with a revision declared now, so that the
    /// next one counts only the changes made after.
    pub counted: AuthorsCounted,
}

/// A `fromConfigMap` source's author stamp, with which ConfigMap carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceStamp<'a> {
    /// The ConfigMap's `metadata.uid`.
    pub uid: &'a str,
    /// Its `configrollout.dev/data-author` annotation.
    pub stamp: &'a str,
}

impl RevisionAuthors {
    /// The authors from the stamps (see [`configrollout_api::author_stamp`]): everyone the
    /// rollout's stamp (`None`: not stamped) and, for `fromConfigMap`, the source's
    /// (`Err`: why it cannot be known) list after what `counted` says the current
    /// revision counted. A stamp that dropped some of those changes, or lists none of
    /// them at all while something new is declared, makes the authors unknown. A stamp a
    /// relay copied from a change's annotation is a tenant's text: one that is no user
    /// name (empty, longer than [`configrollout_api::MAX_APPROVER_LENGTH`], or holding control
    /// characters, which would reach terminals through status and Events) makes the
    /// author unknown.
    pub fn stamped(
        spec_stamp: Option<&str>,
        source: Option<Result<SourceStamp<'_>, &str>>,
        counted: Option<&AuthorsCounted>,
    ) -> Self {
        let mut authors = RevisionAuthors::default();
        let mut unknown = Vec::new();
        let mut listed_any = false;
        match spec_stamp {
            None => unknown.push(format!(
                "the rollout carries no {} (policies/mutating/spec-author.yaml)",
                configrollout_api::annotations::SPEC_AUTHOR_ANNOTATION
            )),
            Some(stamp) => {
                let since = counted.and_then(|counted| counted.spec);
                let read = authors.read(stamp, since.and_then(|s| u64::try_from(s).ok()));
                listed_any |= read.listed_any;
                unknown.extend(
                    read.unknown
                        .map(|why| format!("the rollout's stamp: {why}")),
                );
                authors.counted.spec = read.through.and_then(|t| i64::try_from(t).ok());
            }
        }
        match source {
            None => {}
            Some(Err(why)) => unknown.push(why.to_owned()),
            Some(Ok(source)) => {
                let since = counted
                    .and_then(|counted| counted.source.as_ref())
                    .filter(|counted| counted.uid == source.uid)
                    .and_then(|counted| u64::try_from(counted.sequence).ok());
                let read = authors.read(source.stamp, since);
                listed_any |= read.listed_any;
                unknown.extend(read.unknown.map(|why| format!("the source's stamp: {why}")));
                authors.counted.source = read.through.and_then(|through| {
                    Some(SourceAuthorsCounted {
                        uid: source.uid.to_owned(),
                        sequence: i64::try_from(through).ok()?,
                    })
                });
            }
        }
        if !listed_any && unknown.is_empty() {
            unknown.push("no stamp lists a change since the previous revision".to_owned());
        }
        if !unknown.is_empty() {
            authors.unknown = Some(unknown.join("; "));
        }
        authors
    }

    /// Adds the users `stamp` lists after `since` to the known authors.
    fn read(&mut self, stamp: &str, since: Option<u64>) -> StampRead {
        let mut read = StampRead::default();
        let users = match AuthorStamp::parse(stamp) {
            AuthorStamp::Single(user) => vec![user],
            AuthorStamp::Changes(changes) => {
                let changes = changes_since(&changes, since);
                read.through = changes.through;
                if changes.incomplete {
                    read.unknown = Some(format!(
                        "it keeps the last {AUTHOR_STAMP_LINES} changes, and some made since \
                         the previous revision are gone"
                    ));
                }
                changes.users
            }
        };
        for user in users {
            read.listed_any = true;
            if !is_user_name(user) {
                read.unknown = Some(
                    "an author is not a user name (none, too long, or with control characters)"
                        .to_owned(),
                );
            } else if !self.known.iter().any(|known| known == user) {
                self.known.push(user.to_owned());
            }
        }
        read
    }
}

/// What reading one stamp found.
#[derive(Debug, Default)]
struct StampRead {
    listed_any: bool,
    through: Option<u64>,
    unknown: Option<String>,
}

/// Whether `name` can be a user name: bounded like an approver, no control characters.
fn is_user_name(name: &str) -> bool {
    !name.is_empty()
        && u64::try_from(name.len()).is_ok_and(|len| len <= configrollout_api::MAX_APPROVER_LENGTH)
        && !name.chars().any(char::is_control)
}

/// Whether an approval's `spec.approver` is known to be the user who created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApproverBinding {
    /// The shipped policy (`policies/stageapproval-approver.yaml`) is installed and bound,
    /// since this time: approvals created since then count; older ones were admitted
    /// without it and do not.
    Policy {
        /// When the later of the policy and its binding was created.
        since: DateTime<Utc>,
    },
    /// The controller was started with `--approver-enforced-externally`: the platform
    /// binds the approver another way (its own policy or webhook).
    External,
    /// Neither: `spec.approver` is whatever the client wrote, and no approval counts.
    Missing,
}

impl Default for ApproverBinding {
    /// What tests of the engine assume unless they say otherwise; the controller always
    /// sets it from what it found in the hub.
    fn default() -> Self {
        ApproverBinding::External
    }
}

/// One region as observed.
#[derive(Debug, Clone, Default)]
pub struct RegionObservation {
    /// Region object name.
    pub name: String,
    /// Region object labels, for stage selectors.
    pub labels: BTreeMap<String, String>,
    /// Whether the region's API server answered this time.
    pub reachable: bool,
    /// The last error talking to it (no configuration values).
    pub last_error: Option<String>,
    /// The revision the region's target carries, read back from its annotations.
    pub applied: Option<AppliedRevision>,
    /// The revision whose compensating delta the region holds, if any.
    pub rolled_back: Option<String>,
    /// Consumer counts for the revision and pass the status names.
    pub consumers: Option<ConsumerObservation>,
    /// Keys this rollout manages whose value in the region was edited out of band.
    pub drifted_keys: Vec<String>,
    /// Keys whose winning write in the region is a regional override.
    pub overridden_keys: Vec<String>,
    /// Keys the rollout removed and collected that an override older than the removal
    /// holds again in the region (restored from a backup).
    pub restored_overrides: Vec<String>,
    /// Keys of the rollout whose entry in the region is stamped further ahead of the
    /// controller's clock than the drift bound: they would win every later write.
    pub future_stamped_keys: u32,
    /// The region's companion state fails its MAC: edited outside configrollout. Nothing
    /// of it is read or written over; the region is also unreachable, with the reason in
    /// `last_error`.
    pub tampered: bool,
    /// The id of the digest key the region's state is signed with (public), when it is
    /// one this process holds: after a rotation, the old key's until the state is signed
    /// again.
    pub state_key_id: Option<String>,
    /// Tombstones in the region's replica of the target, any writer's (removed keys not
    /// collected there yet).
    pub tombstones: u32,
}

/// A revision as read back from a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedRevision {
    /// Revision name.
    pub revision: String,
    /// Pass applied.
    pub step: RevisionStep,
    /// Keyed digest of the region's live state.
    pub digest: String,
}

/// Consumer instance counts in a region, for one revision and pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerObservation {
    /// The revision counted.
    pub revision: String,
    /// The pass counted.
    pub step: RevisionStep,
    /// Instances of the declared consumers.
    pub total: u32,
    /// Instances restarted and ready on the revision (or projected, for `Reload`).
    pub delivered: u32,
    /// Instances that report the revision.
    pub activated: u32,
    /// Whether a `Restart` consumer has not been restarted for this revision and pass
    /// yet (its restart was lost or has not been asked for).
    pub restart_pending: bool,
    /// Workloads a consumer matched that do not read the target: not restarted, not
    /// counted (names).
    pub ignored: Vec<String>,
}

/// One gate sample the reconcile took.
#[derive(Debug, Clone)]
pub struct GateSampleObservation {
    /// Gate name.
    pub gate: String,
    /// Stage the sample was taken for.
    pub stage: String,
    /// Revision the sample was taken for.
    pub revision: String,
    /// Region, for gates evaluated per region.
    pub region: Option<String>,
    /// When the query ran, by the controller's clock.
    pub at: DateTime<Utc>,
    /// When the backend evaluated it, by the backend's clock (see
    /// [`crate::gates::Answer::evaluated_at`]); `None` when the answer carries no time.
    pub evaluated_at: Option<DateTime<Utc>>,
    /// What it returned. For a comparison gate: an error or a partial answer of either
    /// side, or, when both sides answered, `Empty` and the points in `comparison`.
    pub result: QueryResult,
    /// Both sides of a comparison gate's sample, when both answered.
    pub comparison: Option<ComparisonSample>,
}

/// The points of a comparison gate's sample (see [`crate::engine::ComparisonRequest`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ComparisonSample {
    /// The canary region's points.
    pub canary: Vec<f64>,
    /// The baseline's points, every baseline query's together.
    pub baseline: Vec<f64>,
    /// What the baseline was (`SampleComparison::baseline_source`).
    pub baseline_source: String,
}

/// One StageApproval.
#[derive(Debug, Clone)]
pub struct ApprovalObservation {
    /// Object name.
    pub name: String,
    /// UID of the rollout it names.
    pub rollout_uid: String,
    /// Stage approved (or `contract`).
    pub stage: String,
    /// Revision approved.
    pub revision: String,
    /// Keyed digest of the revision approved.
    pub revision_digest: String,
    /// What the stage did when it was approved (`api::stage_digest`).
    pub stage_digest: String,
    /// Who approved.
    pub approver: String,
    /// Why.
    pub reason: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// Operator commands. Each is the time it was requested, so that a command is acted on
/// once: the latest command wins, and a retry only resumes a halt that happened before it.
#[derive(Debug, Clone, Default)]
pub struct Control {
    /// When an abort was requested.
    pub abort_requested_at: Option<DateTime<Utc>>,
    /// When a retry was requested.
    pub retry_requested_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(stamp: &str) -> Option<Result<SourceStamp<'_>, &str>> {
        Some(Ok(SourceStamp { uid: "u1", stamp }))
    }

    #[test]
    fn authors_are_the_stamps_and_a_stamp_that_is_no_user_name_is_unknown() {
        let both = RevisionAuthors::stamped(Some("1 ann"), source("1 ben"), None);
        assert_eq!(both.known, ["ann", "ben"]);
        assert_eq!(both.unknown, None);
        assert_eq!(
            RevisionAuthors::stamped(Some("1 ann"), source("4 ann"), None).known,
            ["ann"]
        );
        // What policies before sequences wrote: one user.
        assert_eq!(
            RevisionAuthors::stamped(Some("ann"), None, None).known,
            ["ann"]
        );
        let unstamped = RevisionAuthors::stamped(None, Some(Err("not labelled")), None);
        assert!(unstamped.known.is_empty());
        let why = unstamped.unknown.unwrap_or_default();
        assert!(
            why.contains("spec-author") && why.contains("not labelled"),
            "{why}"
        );
        // A relayed change-author is a tenant's text; a relay's change naming nobody is
        // listed with no user.
        for forged in [
            "1 ann\u{1b}[2J",
            &format!("1 {}", "x".repeat(257)),
            "1 ",
            "1 ann\r",
        ] {
            let authors = RevisionAuthors::stamped(Some(forged), None, None);
            assert!(authors.known.is_empty(), "{forged:?}");
            assert!(authors.unknown.is_some());
        }
    }

    /// Issue 28: two people changed the rollout before the controller declared from it
    /// (the first edit was refused as invalid, the second fixed it): both are authors.
    /// The next revision counts only the changes made after this one.
    #[test]
    fn everyone_who_changed_it_since_the_previous_revision_is_an_author() {
        let first = RevisionAuthors::stamped(Some("1 admin"), None, None);
        assert_eq!(first.known, ["admin"]);
        let counted = first.counted;
        assert_eq!(counted.spec, Some(1));

        let two = RevisionAuthors::stamped(Some("1 admin\n2 alice\n3 bob"), None, Some(&counted));
        assert_eq!(
            (two.known.as_slice(), two.unknown),
            (&["alice".to_owned(), "bob".to_owned()][..], None)
        );
        assert_eq!(two.counted.spec, Some(3));

        // A source change only: the rollout's stamp lists nothing new, the source's does.
        let counted = two.counted;
        let sourced = RevisionAuthors::stamped(
            Some("1 admin\n2 alice\n3 bob"),
            source("7 carol"),
            Some(&counted),
        );
        assert_eq!(sourced.known, ["carol"]);
        let counted = sourced.counted;
        assert_eq!(
            counted.source,
            Some(SourceAuthorsCounted {
                uid: "u1".into(),
                sequence: 7
            })
        );
        // Another source ConfigMap starts its own count.
        let other = RevisionAuthors::stamped(
            Some("1 admin\n2 alice\n3 bob"),
            Some(Ok(SourceStamp {
                uid: "u2",
                stamp: "2 dan",
            })),
            Some(&counted),
        );
        assert_eq!(other.known, ["dan"]);
    }

    #[test]
    fn dropped_changes_or_none_at_all_make_the_authors_unknown() {
        let counted = AuthorsCounted {
            spec: Some(2),
            source: None,
        };
        let dropped = RevisionAuthors::stamped(
            Some("4 a\n5 b\n6 c\n7 d\n8 e\n9 f\n10 g\n11 h"),
            None,
            Some(&counted),
        );
        assert!(
            dropped
                .unknown
                .is_some_and(|why| why.contains("some made since"))
        );
        let went_back = RevisionAuthors::stamped(Some("1 a"), None, Some(&counted));
        assert!(went_back.unknown.is_some());
        let nothing_new = RevisionAuthors::stamped(Some("1 a\n2 b"), None, Some(&counted));
        assert!(nothing_new.known.is_empty());
        assert!(
            nothing_new
                .unknown
                .is_some_and(|why| why.contains("no stamp lists"))
        );
    }
}
