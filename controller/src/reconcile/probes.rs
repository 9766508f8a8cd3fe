//! Samples of template gates that are not queries: a `web` check (an endpoint the
//! platform defined, read with a JSONPath) and a `job` check (a Job run in the region).
//! Both come only from a ClusterGateTemplate (see `api::gate_template`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use sha2::{Digest, Sha256};

use super::fetch::Fetched;
use super::{Context, api_call};
use crate::api::{
    ConfigRollout, DEFAULT_JOB_TIMEOUT_SECONDS, DEFAULT_WEB_TIMEOUT_SECONDS, JobCheck, WebCheck,
};
use crate::engine::{GateSampleRequest, ProbeRequest};
use crate::gates::{Answer, JsonPathQuery, QueryResult};
use crate::job_gate::{JobOutcome, JobSample, sample_job_fenced};
use crate::telemetry::metrics::WriteKind;
use crate::web_gate::{WebMethod, WebRequest};

/// Label of every Job a job gate starts: the sample it is for (a digest of the rollout,
/// revision, stage, gate, region and due time), so that a Job of that name that is not
/// this sample's is never taken for it.
pub const JOB_SAMPLE_LABEL: &str = "configrollout.dev/gate-sample";
/// Label naming the gate a Job samples, for people listing them.
pub const JOB_GATE_LABEL: &str = "configrollout.dev/gate";

/// What a probe gave.
pub enum ProbeAnswer {
    /// The sample.
    Answered(Answer),
    /// Started and not finished (a Job still running): no sample yet.
    Pending,
}

/// Takes `request`'s web or job sample.
pub async fn take(
    ctx: &Context,
    rollout: &ConfigRollout,
    fetched: &Fetched,
    request: &GateSampleRequest,
    probe: &ProbeRequest,
) -> ProbeAnswer {
    match probe {
        ProbeRequest::Web(web) => ProbeAnswer::Answered(web_sample(ctx, web).await),
        ProbeRequest::Job(job) => job_sample(ctx, rollout, fetched, request, job).await,
    }
}

async fn web_sample(ctx: &Context, web: &WebCheck) -> Answer {
    let json_path = match JsonPathQuery::parse(&web.json_path) {
        Ok(path) => path,
        Err(error) => return QueryResult::Error(format!("web.jsonPath: {error}")).into(),
    };
    let mut headers = Vec::with_capacity(web.headers.len());
    for header in &web.headers {
        let value = match (&header.value, &header.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(reference)) => match secret_value(ctx, reference).await {
                Ok(value) => value,
                Err(why) => {
                    return QueryResult::Error(format!("header {}: {why}", header.name)).into();
                }
            },
            (None, None) => String::new(),
        };
        headers.push((header.name.clone(), value));
    }
    let request = WebRequest {
        url: &web.url,
        method: match web.method {
            crate::api::WebMethod::Get => WebMethod::Get,
            crate::api::WebMethod::Post => WebMethod::Post,
        },
        headers: &headers,
        body: web.body.as_deref(),
        json_path: &json_path,
        timeout: Duration::from_secs(u64::from(
            web.timeout_seconds.unwrap_or(DEFAULT_WEB_TIMEOUT_SECONDS),
        )),
        ca_bundle: web.ca_bundle.as_deref().map(str::as_bytes),
    };
    ctx.web_gates.sample(&request).await
}

/// A header's value from a Secret key of the controller's namespace; the error names the
/// Secret and key, never a value.
async fn secret_value(
    ctx: &Context,
    reference: &crate::api::LocalSecretKey,
) -> Result<String, String> {
    let namespace = &ctx.value_checks.controller_namespace;
    let secrets: Api<Secret> = Api::namespaced(ctx.hub.clone(), namespace);
    let unreadable = || {
        format!(
            "Secret {namespace}/{} key {} cannot be read",
            reference.name, reference.key
        )
    };
    let secret = api_call("read web gate Secret", secrets.get_opt(&reference.name))
        .await
        .map_err(|_| unreadable())?;
    let bytes = secret
        .and_then(|secret| secret.data)
        .and_then(|mut data| data.remove(&reference.key))
        .ok_or_else(unreadable)?;
    String::from_utf8(bytes.0)
        .map(|value| value.trim_end_matches(['\r', '\n']).to_owned())
        .map_err(|_| unreadable())
}

async fn job_sample(
    ctx: &Context,
    rollout: &ConfigRollout,
    fetched: &Fetched,
    request: &GateSampleRequest,
    job: &JobCheck,
) -> ProbeAnswer {
    let error = |why: String| ProbeAnswer::Answered(QueryResult::Error(why).into());
    let Some(region_name) = request.region.as_deref() else {
        return error("a job gate runs in a region; this window has none".to_owned());
    };
    // Checked again here, whatever the caller did: a Job is only ever created where the
    // rollout may write.
    let namespace = &rollout.spec.target.namespace;
    if !fetched.grant.allows_target_namespace(namespace)
        || !fetched.grant.allows_region(region_name)
    {
        return error(format!(
            "namespace {namespace} of region {region_name} is outside the rollout's grant: \
             no Job runs there"
        ));
    }
    let regions = fetched.regions.as_slice();
    let Some(region) = regions
        .iter()
        .find(|region| region.name_any() == region_name)
    else {
        return error(format!("Region {region_name} not found"));
    };
    let client = match ctx.region_clients.client(region).await {
        Ok(client) => client,
        Err(why) => return error(format!("region {region_name}: {why}")),
    };
    let spec: k8s_openapi::api::batch::v1::JobSpec =
        match serde_json::from_value(job.template.clone()) {
            Ok(spec) => spec,
            Err(why) => return error(format!("job.template: not a batch/v1 JobSpec: {why}")),
        };
    let sample = sample_digest(rollout, request);
    let name = format!(
        "configrollout-gate-{}",
        sample.get(..20).unwrap_or_default()
    );
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "configrollout".to_owned(),
        ),
        (JOB_GATE_LABEL.to_owned(), request.gate.clone()),
        (
            JOB_SAMPLE_LABEL.to_owned(),
            sample.get(..40).unwrap_or_default().to_owned(),
        ),
    ]);
    let timeout = Duration::from_secs(u64::from(
        job.timeout_seconds.unwrap_or(DEFAULT_JOB_TIMEOUT_SECONDS),
    ));
    // A Job is a write in the region: only while this replica holds the rollout's shard.
    let may_write = || ctx.fence.permits(rollout, WriteKind::RegionObject);
    let outcome = sample_job_fenced(
        &client,
        &JobSample {
            name: &name,
            namespace: &rollout.spec.target.namespace,
            labels: &labels,
            template: &spec,
            timeout,
        },
        &may_write,
    )
    .await;
    match outcome {
        JobOutcome::Running { .. } => ProbeAnswer::Pending,
        JobOutcome::Finished(answer) => ProbeAnswer::Answered(answer),
    }
}

/// The sample a Job is for, as hex: the rollout (by uid), revision, stage, gate, region
/// and the time the sample was due. The same until the sample is recorded, another for
/// the next one.
fn sample_digest(rollout: &ConfigRollout, request: &GateSampleRequest) -> String {
    let mut hasher = Sha256::new();
    for part in [
        rollout.uid().unwrap_or_default().as_str(),
        &request.revision,
        &request.stage,
        &request.gate,
        request.region.as_deref().unwrap_or_default(),
        &request.due.timestamp_millis().to_string(),
    ] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}
