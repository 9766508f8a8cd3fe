//! Job gates against a real region: `configrollout::job_gate::sample_job`, called as the
//! controller's identity in the region (bound to `deploy/region-rbac.yaml` and
//! `deploy/region-rbac-job-gates.yaml` only), runs a Job there and turns its outcome
//! into the sample. The lab's upstream job controller runs the Job and KWOK plays the
//! kubelet: a Job's pod succeeds, or fails with exit code 1 when labelled
//! `lab.configrollout.dev/exit: "1"`. Nothing runs in the containers, and nothing reads
//! the pods: the controller's identity may not even get them.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use configrollout::gates::{Answer, QueryResult};
use configrollout::job_gate::{
    DEFAULT_TTL_SECONDS_AFTER_FINISHED, JobOutcome, JobSample, RBAC_FILE, RECHECK_AFTER,
    sample_job, sample_job_fenced,
};
use configrollout_e2e::{Lab, LabOptions, User};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::{eventually, within};

/// The rollout's target namespace in the region.
const NAMESPACE: &str = "app";
/// Bound on a Job reaching its outcome in the lab.
const FINISH: Duration = Duration::from_secs(60);
/// The sample's timeout (the Job's `activeDeadlineSeconds`).
const TIMEOUT: Duration = Duration::from_secs(120);
/// The lab's KWOK stage fails a Job's pod with this label and value.
const EXIT_LABEL: (&str, &str) = ("lab.configrollout.dev/exit", "1");

fn gate_labels(gate: &str) -> BTreeMap<String, String> {
    [
        (
            "configrollout.dev/rollout".to_owned(),
            "checkout".to_owned(),
        ),
        ("configrollout.dev/gate".to_owned(), gate.to_owned()),
    ]
    .into()
}

/// A platform admin's template: a check that prints and exits; `pod_labels` on its pods.
fn template(pod_labels: serde_json::Value) -> JobSpec {
    serde_json::from_value(json!({
        "template": {
            "metadata": { "labels": pod_labels },
            "spec": {
                "containers": [{
                    "name": "check",
                    "image": "registry.invalid/smoke-check:1",
                    "command": ["sh", "-c", "echo checking; exit 0"],
                }],
            },
        },
    }))
    .expect("job template")
}

fn sample<'a>(
    name: &'a str,
    labels: &'a BTreeMap<String, String>,
    template: &'a JobSpec,
) -> JobSample<'a> {
    JobSample {
        name,
        namespace: NAMESPACE,
        labels,
        template,
        timeout: TIMEOUT,
    }
}

/// Samples until the Job finished, as the controller would across reconciles (faster
/// than its recheck, to measure the lab): the first look must create the Job and say
/// Running.
async fn run_to_the_end(client: &kube::Client, sample: &JobSample<'_>) -> Answer {
    let started = Instant::now();
    let first = sample_job(client, sample).await;
    assert_eq!(
        first,
        JobOutcome::Running {
            recheck_after: RECHECK_AFTER
        },
        "the first look creates {} and waits",
        sample.name
    );
    let answer = eventually(&format!("Job {} finishes", sample.name), FINISH, || async {
        match sample_job(client, sample).await {
            JobOutcome::Running { recheck_after } => {
                assert!(recheck_after <= RECHECK_AFTER, "{recheck_after:?}");
                None
            }
            JobOutcome::Finished(answer) => Some(answer),
        }
    })
    .await;
    eprintln!("Job {} finished after {:?}", sample.name, started.elapsed());
    answer
}

fn error_of(outcome: &JobOutcome) -> &str {
    match outcome {
        JobOutcome::Finished(Answer {
            result: QueryResult::Error(reason),
            evaluated_at: None,
        }) => reason,
        other => panic!("an error sample, not {other:?}"),
    }
}

async fn a_job_that_succeeds_is_one(controller: &kube::Client, admin: &kube::Client) {
    let labels = gate_labels("smoke");
    let template = template(json!({ "app": "smoke-check" }));
    let sample = sample("checkout-smoke-1", &labels, &template);
    let answer = run_to_the_end(controller, &sample).await;
    assert_eq!(answer.result, QueryResult::Scalar(1.0));
    assert!(answer.evaluated_at.is_some(), "at the Complete condition");

    // The Job as created: the gate's labels on it and its pods, one bounded attempt.
    let job = within(
        "read the Job",
        Api::<Job>::namespaced(admin.clone(), NAMESPACE).get(sample.name),
    )
    .await;
    assert_eq!(job.metadata.labels.as_ref(), Some(&labels));
    let spec = job.spec.expect("spec");
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.active_deadline_seconds, Some(120));
    assert_eq!(
        spec.ttl_seconds_after_finished,
        Some(DEFAULT_TTL_SECONDS_AFTER_FINISHED)
    );
    let pod_labels = spec
        .template
        .metadata
        .and_then(|m| m.labels)
        .unwrap_or_default();
    assert_eq!(
        pod_labels.get("app").map(String::as_str),
        Some("smoke-check")
    );
    for (key, value) in &labels {
        assert_eq!(pod_labels.get(key), Some(value), "pod label {key}");
    }
    assert_eq!(
        spec.template.spec.and_then(|s| s.restart_policy).as_deref(),
        Some("Never")
    );

    // A later look (a reconcile before the sample was recorded) gives the same answer
    // and starts nothing new.
    assert_eq!(
        sample_job(controller, &sample).await,
        JobOutcome::Finished(answer)
    );
    let pods = within(
        "list the Job's pods",
        Api::<Pod>::namespaced(admin.clone(), NAMESPACE)
            .list(&ListParams::default().labels(&format!("job-name={}", sample.name))),
    )
    .await;
    assert_eq!(pods.items.len(), 1, "one attempt, one pod");
    let phase = pods.items[0]
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Succeeded"));
}

async fn a_job_that_fails_is_zero(controller: &kube::Client, admin: &kube::Client) {
    let labels = gate_labels("fails");
    let template = template(json!({ EXIT_LABEL.0: EXIT_LABEL.1 }));
    let sample = sample("checkout-fails-1", &labels, &template);
    let answer = run_to_the_end(controller, &sample).await;
    assert_eq!(answer.result, QueryResult::Scalar(0.0));
    assert!(answer.evaluated_at.is_some(), "at the Failed condition");

    let job = within(
        "read the Job",
        Api::<Job>::namespaced(admin.clone(), NAMESPACE).get(sample.name),
    )
    .await;
    let failed = job
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .expect("a Failed condition");
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    let pods = within(
        "list the Job's pods",
        Api::<Pod>::namespaced(admin.clone(), NAMESPACE)
            .list(&ListParams::default().labels(&format!("job-name={}", sample.name))),
    )
    .await;
    assert_eq!(pods.items.len(), 1, "backoffLimit 0: no retry");
    let exit_code = pods.items[0]
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(exit_code, Some(1));
}

async fn a_job_of_that_name_that_is_not_ours_is_an_error(
    controller: &kube::Client,
    admin: &kube::Client,
) {
    let name = "checkout-taken-1";
    let jobs = Api::<Job>::namespaced(admin.clone(), NAMESPACE);
    let mut foreign = Job {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                [
                    ("configrollout.dev/rollout".to_owned(), "other".to_owned()),
                    ("configrollout.dev/gate".to_owned(), "taken".to_owned()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(template(json!({ "app": "someone-else" }))),
        status: None,
    };
    if let Some(pod) = foreign.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        pod.restart_policy = Some("Never".into());
    }
    let created = within(
        "create someone else's Job",
        jobs.create(&PostParams::default(), &foreign),
    )
    .await;

    let labels = gate_labels("taken");
    let template = template(json!({}));
    let outcome = sample_job(controller, &sample(name, &labels, &template)).await;
    let reason = error_of(&outcome);
    assert_eq!(
        reason,
        format!("a Job named {name} exists in {NAMESPACE} and is not this gate's")
    );
    let after = within("read someone else's Job", jobs.get(name)).await;
    assert_eq!(after.metadata.uid, created.metadata.uid, "left alone");
    assert_eq!(after.metadata.labels, created.metadata.labels);
}

async fn an_identity_without_the_job_rbac_is_told_which_file_to_apply(lab: &Lab, region: &str) {
    // The workloads' identity may read ConfigMaps and nothing else.
    let workload = lab.client(region, User::Workload).expect("workload client");
    let labels = gate_labels("forbidden");
    let template = template(json!({}));
    let outcome = sample_job(
        &workload,
        &sample("checkout-forbidden-1", &labels, &template),
    )
    .await;
    let reason = error_of(&outcome);
    assert!(
        reason.contains(&format!("may not get Jobs in {NAMESPACE}")),
        "{reason}"
    );
    assert!(reason.contains(RBAC_FILE), "{reason}");
}

async fn a_missing_namespace_is_an_error(controller: &kube::Client) {
    let labels = gate_labels("nowhere");
    let template = template(json!({}));
    let sample = JobSample {
        namespace: "not-created",
        ..sample("checkout-nowhere-1", &labels, &template)
    };
    let outcome = sample_job(controller, &sample).await;
    assert_eq!(
        error_of(&outcome),
        "namespace not-created does not exist in this region"
    );
}

/// A replica whose fence refuses (it lost the rollout's Lease) creates no Job and takes
/// no sample.
async fn a_fenced_replica_creates_nothing(controller: &kube::Client, admin: &kube::Client) {
    let labels = gate_labels("fenced");
    let template = template(json!({}));
    let sample = sample("checkout-fenced-1", &labels, &template);
    assert_eq!(
        sample_job_fenced(controller, &sample, &|| false).await,
        JobOutcome::Running {
            recheck_after: RECHECK_AFTER
        }
    );
    let job = within(
        "look for the Job",
        Api::<Job>::namespaced(admin.clone(), NAMESPACE).get_opt(sample.name),
    )
    .await;
    assert!(job.is_none(), "no Job was created");
}

/// The samples never needed the pods, let alone their output: the controller's identity
/// may not read either.
async fn the_controller_may_not_read_pods_or_logs(controller: &kube::Client) {
    let pods = Api::<Pod>::namespaced(controller.clone(), NAMESPACE);
    let listed = tokio::time::timeout(support::CALL, pods.list(&ListParams::default()))
        .await
        .expect("an answer");
    assert!(
        matches!(&listed, Err(kube::Error::Api(status)) if status.code == 403),
        "{listed:?}"
    );
}

/// The namespaced variant of the job-gate RBAC is accepted by the region's apiserver.
async fn the_namespaced_rbac_is_valid(lab: &Lab, region: &str) {
    let file = configrollout_e2e::repository_root()
        .join("deploy")
        .join("region-rbac-job-gates-namespaced.yaml");
    let output = tokio::process::Command::new(lab.kubectl())
        .env(
            "KUBECONFIG",
            lab.kubeconfig(region, User::Admin)
                .expect("admin kubeconfig"),
        )
        .args(["apply", "--dry-run=server", "-n", NAMESPACE, "-f"])
        .arg(&file)
        .output();
    let output = tokio::time::timeout(support::CALL, output)
        .await
        .expect("kubectl apply answers")
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl apply --dry-run=server -f {}: {}{}",
        file.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn job_gates_run_a_job_per_sample() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (root, pids) = runtime.block_on(async {
        let started = Instant::now();
        let lab = Lab::start(LabOptions {
            regions: 1,
            workload_controllers: true,
            ..LabOptions::default()
        })
        .await
        .expect("the lab starts");
        eprintln!(
            "lab with workload controllers up after {:?}",
            started.elapsed()
        );
        let region = lab.regions()[0].clone();
        lab.create_namespace(&region, NAMESPACE)
            .await
            .expect("the target namespace");
        let admin = lab.client(&region, User::Admin).expect("admin client");
        let controller = lab
            .client(&region, User::Controller)
            .expect("controller client");
        // Pods are refused until the namespace's `default` ServiceAccount exists.
        let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), NAMESPACE);
        eventually("the default ServiceAccount", FINISH, || async {
            accounts.get_opt("default").await.ok().flatten()
        })
        .await;

        let scenarios = Instant::now();
        a_job_that_succeeds_is_one(&controller, &admin).await;
        a_job_that_fails_is_zero(&controller, &admin).await;
        a_job_of_that_name_that_is_not_ours_is_an_error(&controller, &admin).await;
        an_identity_without_the_job_rbac_is_told_which_file_to_apply(&lab, &region).await;
        a_missing_namespace_is_an_error(&controller).await;
        a_fenced_replica_creates_nothing(&controller, &admin).await;
        the_controller_may_not_read_pods_or_logs(&controller).await;
        the_namespaced_rbac_is_valid(&lab, &region).await;
        eprintln!("job gate scenarios took {:?}", scenarios.elapsed());

        let root = lab.root_dir().to_string_lossy().into_owned();
        let pids = lab.pids();
        drop(lab);
        (root, pids)
    });
    support::assert_lab_gone(&root, pids);
}
