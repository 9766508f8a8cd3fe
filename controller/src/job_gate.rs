//! The `job` gate provider: one sample is one Kubernetes Job, run in the region being
//! checked, in the rollout's target namespace there. The Job's success is the sample
//! `1`, its failure `0`; the template comes from a ClusterGateTemplate, already rendered
//! by the caller.
//!
//! A sample spans reconciles: the first look creates the Job and answers
//! [`JobOutcome::Running`], later looks read it until it finished. The caller keeps the
//! Job's name stable until it recorded the sample, so a controller restart or a lost
//! create answer finds the same Job again instead of starting a second one.
//!
//! Only the Job object is read, never its pods or their logs: what a check prints is the
//! platform's business (and may hold anything), the sample is the Job's verdict alone.
//! Every API call is bounded by the region call timeout, and no answer text of the API
//! server is carried into a sample's reason (see [`crate::api_call::CallError`]).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams, Preconditions, PropagationPolicy};

use crate::api_call::{self, CallError};
use crate::gates::verdict::{Answer, QueryResult};
use crate::regions::store::{CALL_TIMEOUT, FIELD_MANAGER};

/// How soon to look again at a Job that has not finished.
pub const RECHECK_AFTER: Duration = Duration::from_secs(5);

/// `ttlSecondsAfterFinished` when the template sets none: a finished Job (and its pods)
/// is collected by the region's TTL controller an hour later, long after its sample was
/// recorded, so that samples do not pile up Jobs in the tenant's namespace.
pub const DEFAULT_TTL_SECONDS_AFTER_FINISHED: i32 = 3600;

/// The shortest `ttlSecondsAfterFinished` a template may give: ten minutes, so that a
/// controller busy or restarting for a while still reads the finished Job.
pub const MIN_TTL_SECONDS_AFTER_FINISHED: i32 = 600;

/// How long past its timeout an unfinished Job is still waited for. The job controller
/// marks a Job past its `activeDeadlineSeconds` Failed (`DeadlineExceeded`) a moment
/// after the deadline, counted from its start rather than its creation: that answer, a
/// failed sample, must win over ours, which only says that the Job could not be run (no
/// job controller, a suspended Job). It also absorbs some skew between this clock and
/// the region's, which stamped the Job's creation.
pub const FINISH_GRACE: Duration = Duration::from_secs(30);

/// Longest reason of an error sample, in characters.
pub const MAX_REASON_CHARS: usize = 300;

/// The region RBAC that lets the controller's identity run job gates cluster-wide.
pub const RBAC_FILE: &str = "deploy/region-rbac-job-gates.yaml";
/// Its variant for one namespace.
pub const RBAC_FILE_NAMESPACED: &str = "deploy/region-rbac-job-gates-namespaced.yaml";

/// One sample's Job.
#[derive(Debug, Clone, Copy)]
pub struct JobSample<'a> {
    /// The Job's name: deterministic, chosen by the caller (a DNS-1123 label of at most
    /// 63 characters), the same across reconciles until the sample is recorded.
    pub name: &'a str,
    /// The rollout's target namespace in the region.
    pub namespace: &'a str,
    /// Identify the rollout and gate; set on the Job and its pod template. An existing
    /// Job without these labels (and values) is not this gate's.
    pub labels: &'a BTreeMap<String, String>,
    /// The Job's spec, already rendered by the caller.
    pub template: &'a JobSpec,
    /// The Job's `activeDeadlineSeconds` (rounded up), and how long the sample may take
    /// in all.
    pub timeout: Duration,
}

/// Where one sample stands.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome {
    /// Not finished yet: no sample; look again after this long.
    Running {
        /// When to look again.
        recheck_after: Duration,
    },
    /// Finished, or the Job cannot be run: the sample. Succeeded is
    /// `QueryResult::Scalar(1.0)`, failed `Scalar(0.0)`, both evaluated at the time of the
    /// Job's `Complete` or `Failed` condition; a Job that cannot be created or read, or
    /// that is not this gate's, is `QueryResult::Error` with a bounded reason.
    Finished(Answer),
}

/// Why a sample is an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum JobGateError {
    #[error(
        "the controller's identity in this region may not {verb} Jobs in {namespace} \
         (apply {RBAC_FILE} in the region, or {RBAC_FILE_NAMESPACED} in {namespace})"
    )]
    Forbidden {
        verb: &'static str,
        namespace: String,
    },
    #[error("namespace {namespace} does not exist in this region")]
    NamespaceMissing { namespace: String },
    #[error("a Job named {name} exists in {namespace} and is not this gate's")]
    NotOurs { name: String, namespace: String },
    #[error(
        "the Job {name} in {namespace} did not finish within {seconds} s \
         (is a job controller running in this region?)"
    )]
    Overdue {
        name: String,
        namespace: String,
        seconds: u64,
    },
    #[error(transparent)]
    Call(CallError),
}

/// Runs, or looks at, one sample's Job in the region `client` reaches.
pub async fn sample_job(client: &kube::Client, sample: &JobSample<'_>) -> JobOutcome {
    sample_job_fenced(client, sample, &|| true).await
}

/// [`sample_job`], asking `may_write` right before each write (the Job's create, the
/// delete of an overdue one), as every region write of the controller does
/// (`reconcile::WriteFence`): a replica that lost the rollout's Lease creates nothing
/// and answers [`JobOutcome::Running`], so no sample.
pub async fn sample_job_fenced(
    client: &kube::Client,
    sample: &JobSample<'_>,
    may_write: &(dyn Fn() -> bool + Send + Sync),
) -> JobOutcome {
    match look(client, sample, may_write).await {
        Ok(outcome) => outcome,
        Err(error) => JobOutcome::Finished(error_answer(&error)),
    }
}

async fn look(
    client: &kube::Client,
    sample: &JobSample<'_>,
    may_write: &(dyn Fn() -> bool + Send + Sync),
) -> Result<JobOutcome, JobGateError> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), sample.namespace);
    let job = match call("read Job", "get", sample, jobs.get_opt(sample.name)).await? {
        Some(job) => job,
        None => {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            let wanted = job_for(sample);
            if !may_write() {
                return Ok(JobOutcome::Running {
                    recheck_after: RECHECK_AFTER,
                });
            }
            match call(
                "create Job",
                "create",
                sample,
                jobs.create(&params, &wanted),
            )
            .await
            {
                Ok(_) => {
                    // The whole timeout and its grace lie ahead: no bound below the usual.
                    return Ok(JobOutcome::Running {
                        recheck_after: RECHECK_AFTER,
                    });
                }
                // Another replica (or a reconcile whose answer was lost) created it in
                // between: judge what is there, which may not be ours.
                Err(JobGateError::Call(error)) if error.is_conflict() => {
                    match call("read Job", "get", sample, jobs.get_opt(sample.name)).await? {
                        Some(job) => job,
                        // Deleted again at once: the next look creates it.
                        None => {
                            return Ok(JobOutcome::Running {
                                recheck_after: RECHECK_AFTER,
                            });
                        }
                    }
                }
                Err(JobGateError::Call(error)) if error.code() == Some(404) => {
                    return Err(JobGateError::NamespaceMissing {
                        namespace: sample.namespace.to_owned(),
                    });
                }
                Err(error) => return Err(error),
            }
        }
    };
    match state_of(&job, sample.labels, sample.timeout, Timestamp::now()) {
        JobState::NotOurs => Err(JobGateError::NotOurs {
            name: sample.name.to_owned(),
            namespace: sample.namespace.to_owned(),
        }),
        JobState::Finished { value, at } => Ok(JobOutcome::Finished(Answer {
            result: QueryResult::Scalar(value),
            evaluated_at: at,
        })),
        JobState::Running { recheck_after } => Ok(JobOutcome::Running { recheck_after }),
        JobState::Overdue => {
            if may_write() {
                remove_overdue(&jobs, &job).await;
            }
            Err(JobGateError::Overdue {
                name: sample.name.to_owned(),
                namespace: sample.namespace.to_owned(),
                seconds: sample.timeout.saturating_add(FINISH_GRACE).as_secs(),
            })
        }
    }
}

/// Deletes a Job that never finished, best effort: no TTL ever collects an unfinished
/// Job, and its sample is recorded now, so nobody would look at it again. Only this very
/// object (its uid) is deleted, with its pods in the background.
async fn remove_overdue(jobs: &Api<Job>, job: &Job) {
    let Some(name) = job.metadata.name.as_deref() else {
        return;
    };
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: job.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    if let Err(error) =
        api_call::timed("delete Job", CALL_TIMEOUT, jobs.delete(name, &params)).await
    {
        tracing::warn!(job = name, %error, "an overdue gate Job could not be deleted");
    }
}

/// Runs one region call; a 403 names the RBAC file that grants it.
async fn call<T>(
    operation: &'static str,
    verb: &'static str,
    sample: &JobSample<'_>,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, JobGateError> {
    api_call::timed(operation, CALL_TIMEOUT, request)
        .await
        .map_err(|error| match error.code() {
            Some(403) => JobGateError::Forbidden {
                verb,
                namespace: sample.namespace.to_owned(),
            },
            _ => JobGateError::Call(error),
        })
}

fn error_answer(error: &JobGateError) -> Answer {
    Answer::from(QueryResult::Error(bounded(&error.to_string())))
}

/// At most [`MAX_REASON_CHARS`] characters, control characters blanked, `…` when cut: a
/// transport error's text is not ours to trust in length or content.
fn bounded(text: &str) -> String {
    let mut kept: String = text
        .chars()
        .take(MAX_REASON_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(MAX_REASON_CHARS).is_some() {
        kept.push('…');
    }
    kept
}

/// The Job to create for `sample`: the template with the gate's labels on the Job and
/// its pods, and the defaults that make one run one bounded, collected attempt.
pub fn job_for(sample: &JobSample<'_>) -> Job {
    let mut spec = sample.template.clone();
    // A retry would be a second sample inside this one; a template may still ask for it.
    spec.backoff_limit.get_or_insert(0);
    let deadline = deadline_seconds(sample.timeout);
    spec.active_deadline_seconds = Some(
        spec.active_deadline_seconds
            .map_or(deadline, |own| own.min(deadline)),
    );
    // A finished Job must outlive the controller's next looks at it (every
    // `RECHECK_AFTER`): collected before its sample is recorded, it would be created and
    // run again, and the sample never taken. A template's shorter TTL is raised.
    spec.ttl_seconds_after_finished = Some(
        spec.ttl_seconds_after_finished
            .map_or(DEFAULT_TTL_SECONDS_AFTER_FINISHED, |own| {
                own.max(MIN_TTL_SECONDS_AFTER_FINISHED)
            }),
    );
    let template_meta = spec
        .template
        .metadata
        .get_or_insert_with(ObjectMeta::default);
    // The gate's labels win over the template's: they are how the Job is known again.
    template_meta
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(sample.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(pod_spec) = spec.template.spec.as_mut() {
        // Kubernetes' default (Always) is refused for Jobs.
        pod_spec
            .restart_policy
            .get_or_insert_with(|| "Never".to_owned());
    }
    Job {
        metadata: ObjectMeta {
            name: Some(sample.name.to_owned()),
            namespace: Some(sample.namespace.to_owned()),
            labels: Some(sample.labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// `timeout` in whole seconds, rounded up, and at least 1 (the API refuses 0).
fn deadline_seconds(timeout: Duration) -> i64 {
    let whole = timeout
        .as_secs()
        .saturating_add(u64::from(timeout.subsec_nanos() > 0));
    i64::try_from(whole).unwrap_or(i64::MAX).max(1)
}

/// Whether `job` carries every one of the gate's labels with its value. Labels others
/// add (an admission policy's, say) do not make it foreign; a missing or different one
/// does, since the name alone could be anyone's.
fn is_ours(job: &Job, labels: &BTreeMap<String, String>) -> bool {
    let own = job.metadata.labels.as_ref();
    labels
        .iter()
        .all(|(key, value)| own.and_then(|l| l.get(key)) == Some(value))
}

/// Where an existing Job stands, judged at `now`.
#[derive(Debug, Clone, PartialEq)]
enum JobState {
    /// Not the gate's Job.
    NotOurs,
    /// Finished: `1.0` succeeded, `0.0` failed, at the condition's time.
    Finished {
        /// The sample's value.
        value: f64,
        /// When the Job's terminal condition was set.
        at: Option<DateTime<Utc>>,
    },
    /// Still running; look again after this long.
    Running {
        /// When to look again.
        recheck_after: Duration,
    },
    /// Unfinished past its timeout and [`FINISH_GRACE`].
    Overdue,
}

/// Judges `job` from its labels, its `Complete` and `Failed` conditions and its age.
/// Only those two terminal conditions count: `SuccessCriteriaMet` and `FailureTarget`
/// come first, while pods may still be terminating.
fn state_of(
    job: &Job,
    labels: &BTreeMap<String, String>,
    timeout: Duration,
    now: Timestamp,
) -> JobState {
    if !is_ours(job, labels) {
        return JobState::NotOurs;
    }
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    for condition in conditions.iter().filter(|c| c.status == "True") {
        let value = match condition.type_.as_str() {
            "Complete" => 1.0,
            "Failed" => 0.0,
            _ => continue,
        };
        return JobState::Finished {
            value,
            at: condition
                .last_transition_time
                .as_ref()
                .map(|t| chrono_time(&t.0)),
        };
    }
    let allowed = timeout.saturating_add(FINISH_GRACE);
    let age = job
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|created| Duration::try_from(now.duration_since(created.0)).ok())
        .unwrap_or_default();
    match allowed.checked_sub(age) {
        Some(remaining) if !remaining.is_zero() => JobState::Running {
            recheck_after: RECHECK_AFTER.min(remaining),
        },
        _ => JobState::Overdue,
    }
}

fn chrono_time(time: &Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(time.as_millisecond()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn labels() -> BTreeMap<String, String> {
        [
            ("configrollout.dev/rollout".to_owned(), "web".to_owned()),
            ("configrollout.dev/gate".to_owned(), "smoke".to_owned()),
        ]
        .into()
    }

    fn template() -> JobSpec {
        JobSpec {
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "check".into(),
                        image: Some("registry.example/check:1".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }
    }

    fn sample<'a>(
        labels: &'a BTreeMap<String, String>,
        template: &'a JobSpec,
        timeout: Duration,
    ) -> JobSample<'a> {
        JobSample {
            name: "web-smoke-3f2a",
            namespace: "team-a",
            labels,
            template,
            timeout,
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn job_with(created: i64, conditions: &[(&str, &str, i64)]) -> Job {
        let mut job = job_for(&sample(&labels(), &template(), Duration::from_secs(60)));
        job.metadata.creation_timestamp = Some(Time(at(created)));
        job.status = Some(JobStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(type_, status, when)| JobCondition {
                        type_: (*type_).into(),
                        status: (*status).into(),
                        last_transition_time: Some(Time(at(*when))),
                        reason: Some("BackoffLimitExceeded".into()),
                        ..JobCondition::default()
                    })
                    .collect(),
            ),
            ..JobStatus::default()
        });
        job
    }

    #[test]
    fn an_unset_template_gets_one_attempt_the_timeout_as_deadline_and_a_ttl() {
        let labels = labels();
        let template = template();
        let job = job_for(&sample(&labels, &template, Duration::from_millis(90_500)));
        assert_eq!(job.metadata.name.as_deref(), Some("web-smoke-3f2a"));
        assert_eq!(job.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(job.metadata.labels.as_ref(), Some(&labels));
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(91), "rounded up");
        assert_eq!(
            spec.ttl_seconds_after_finished,
            Some(DEFAULT_TTL_SECONDS_AFTER_FINISHED)
        );
        assert_eq!(
            spec.template.metadata.unwrap().labels.as_ref(),
            Some(&labels)
        );
        assert_eq!(
            spec.template.spec.unwrap().restart_policy.as_deref(),
            Some("Never")
        );
    }

    #[test]
    fn what_the_template_sets_is_kept_except_a_deadline_past_the_timeout() {
        let labels = labels();
        let mut template = template();
        template.backoff_limit = Some(2);
        template.active_deadline_seconds = Some(600);
        template.ttl_seconds_after_finished = Some(7200);
        template.template.metadata = Some(ObjectMeta {
            labels: Some(
                [
                    ("app".to_owned(), "check".to_owned()),
                    ("configrollout.dev/gate".to_owned(), "forged".to_owned()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        });
        if let Some(pod) = template.template.spec.as_mut() {
            pod.restart_policy = Some("OnFailure".into());
        }
        let spec = job_for(&sample(&labels, &template, Duration::from_secs(120)))
            .spec
            .unwrap();
        assert_eq!(spec.backoff_limit, Some(2));
        assert_eq!(spec.active_deadline_seconds, Some(120));
        assert_eq!(spec.ttl_seconds_after_finished, Some(7200));
        // One shorter than the controller's looks at it is raised.
        template.ttl_seconds_after_finished = Some(0);
        let raised = job_for(&sample(&labels, &template, Duration::from_secs(120)))
            .spec
            .unwrap();
        assert_eq!(
            raised.ttl_seconds_after_finished,
            Some(MIN_TTL_SECONDS_AFTER_FINISHED)
        );
        assert_eq!(
            spec.template.spec.unwrap().restart_policy.as_deref(),
            Some("OnFailure")
        );
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        assert_eq!(pod_labels["app"], "check");
        assert_eq!(
            pod_labels["configrollout.dev/gate"], "smoke",
            "the gate's win"
        );

        template.active_deadline_seconds = Some(30);
        let spec = job_for(&sample(&labels, &template, Duration::from_secs(120)))
            .spec
            .unwrap();
        assert_eq!(
            spec.active_deadline_seconds,
            Some(30),
            "a shorter own deadline"
        );
    }

    #[test]
    fn a_deadline_is_whole_positive_seconds() {
        assert_eq!(deadline_seconds(Duration::ZERO), 1);
        assert_eq!(deadline_seconds(Duration::from_millis(1)), 1);
        assert_eq!(deadline_seconds(Duration::from_secs(5)), 5);
        assert_eq!(deadline_seconds(Duration::from_nanos(5_000_000_001)), 6);
        assert_eq!(deadline_seconds(Duration::MAX), i64::MAX);
    }

    #[test]
    fn a_job_is_ours_only_with_every_label_and_value() {
        let labels = labels();
        let mut job = job_with(0, &[]);
        assert!(is_ours(&job, &labels));
        job.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("policy.example/added".into(), "yes".into());
        assert!(is_ours(&job, &labels), "a label others add is fine");
        job.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("configrollout.dev/gate".into(), "other".into());
        assert!(!is_ours(&job, &labels));
        job.metadata.labels = None;
        assert!(!is_ours(&job, &labels));
        assert_eq!(
            state_of(&job, &labels, Duration::from_secs(60), at(10)),
            JobState::NotOurs
        );
    }

    #[test]
    fn complete_is_one_and_failed_is_zero_at_the_condition_time() {
        let labels = labels();
        let timeout = Duration::from_secs(60);
        let complete = job_with(
            0,
            &[("SuccessCriteriaMet", "True", 7), ("Complete", "True", 8)],
        );
        assert_eq!(
            state_of(&complete, &labels, timeout, at(10)),
            JobState::Finished {
                value: 1.0,
                at: DateTime::from_timestamp(8, 0)
            }
        );
        let failed = job_with(0, &[("FailureTarget", "True", 8), ("Failed", "True", 9)]);
        assert_eq!(
            state_of(&failed, &labels, timeout, at(1_000)),
            JobState::Finished {
                value: 0.0,
                at: DateTime::from_timestamp(9, 0)
            },
            "a finished Job is its answer even past the timeout"
        );
    }

    #[test]
    fn a_job_before_its_terminal_condition_is_running_until_overdue() {
        let labels = labels();
        let timeout = Duration::from_secs(60);
        for pending in [
            job_with(100, &[]),
            job_with(100, &[("FailureTarget", "True", 101)]),
            job_with(100, &[("SuccessCriteriaMet", "True", 101)]),
            job_with(100, &[("Complete", "False", 101)]),
        ] {
            assert_eq!(
                state_of(&pending, &labels, timeout, at(110)),
                JobState::Running {
                    recheck_after: RECHECK_AFTER
                }
            );
        }
        let pending = job_with(100, &[]);
        assert_eq!(
            state_of(&pending, &labels, timeout, at(188)),
            JobState::Running {
                recheck_after: Duration::from_secs(2)
            },
            "bounded by the time left"
        );
        assert_eq!(
            state_of(&pending, &labels, timeout, at(190)),
            JobState::Overdue
        );
        assert_eq!(
            state_of(&pending, &labels, timeout, at(50)),
            JobState::Running {
                recheck_after: RECHECK_AFTER
            },
            "a creation time ahead of this clock is no age"
        );
    }

    #[test]
    fn an_error_names_the_rbac_file_and_is_bounded() {
        let forbidden = JobGateError::Forbidden {
            verb: "create",
            namespace: "team-a".into(),
        };
        let QueryResult::Error(reason) = error_answer(&forbidden).result else {
            panic!("an error sample");
        };
        assert!(reason.contains("may not create Jobs in team-a"), "{reason}");
        assert!(reason.contains(RBAC_FILE), "{reason}");
        let long = JobGateError::Call(CallError::Unreachable {
            operation: "read Job",
            reason: "x\n".repeat(1_000),
        });
        let QueryResult::Error(reason) = error_answer(&long).result else {
            panic!("an error sample");
        };
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS + 1);
        assert!(!reason.contains('\n'));
    }
}
