//! `Region` status: whether each region's API server answers, its version, the last
//! error and the last contact, probed on a timer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::status_writer::STATUS_FIELD_MANAGER;
use super::{HubError, WriteFence, api_call, fetch};
use crate::api::{Region, RegionStatus};
use crate::regions::clients::RegionClients;
use crate::telemetry::metrics::WriteKind;

/// Probes every Region once and writes each Region's status when it changed, if the
/// fence lets this replica write. Clients of deleted Regions are dropped.
pub async fn probe_all(
    hub: &kube::Client,
    clients: &RegionClients,
    fence: &WriteFence,
) -> Result<(), HubError> {
    let regions = fetch::regions(hub).await?;
    clients.retain(
        regions
            .iter()
            .filter_map(|region| region.metadata.name.as_deref()),
    );
    let probes = regions.iter().map(|region| async move {
        let status = probe(clients, region).await;
        (region, status)
    });
    for (region, status) in futures::future::join_all(probes).await {
        if changed(region.status.as_ref(), &status)
            && fence.permits_cluster(WriteKind::RegionStatus)
        {
            write(hub, region, &status).await?;
        }
    }
    Ok(())
}

async fn probe(clients: &RegionClients, region: &Region) -> RegionStatus {
    let previous = region.status.clone().unwrap_or_default();
    let answer = match clients.client(region).await {
        Err(error) => Err(error.to_string()),
        Ok(client) => crate::api_call::timed(
            "read version",
            crate::regions::store::CALL_TIMEOUT,
            client.apiserver_version(),
        )
        .await
        .map(|info| info.git_version)
        .map_err(|error| error.to_string()),
    };
    match answer {
        Ok(version) => RegionStatus {
            reachable: Some(true),
            server_version: Some(version),
            last_error: None,
            last_contact_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            conditions: previous.conditions,
        },
        Err(error) => RegionStatus {
            reachable: Some(false),
            last_error: Some(error),
            ..previous
        },
    }
}

/// Whether the status differs in more than the contact time, so a healthy region is not
/// rewritten on every probe; the contact time is refreshed when anything else changes
/// or it is older than a minute.
fn changed(before: Option<&RegionStatus>, after: &RegionStatus) -> bool {
    let Some(before) = before else {
        return true;
    };
    let stale_contact = match (&before.last_contact_time, &after.last_contact_time) {
        (Some(old), Some(new)) => new.0.as_second() - old.0.as_second() >= 60,
        (None, Some(_)) => true,
        _ => false,
    };
    before.reachable != after.reachable
        || before.server_version != after.server_version
        || before.last_error != after.last_error
        || stale_contact
}

async fn write(hub: &kube::Client, region: &Region, status: &RegionStatus) -> Result<(), HubError> {
    let api: Api<Region> = Api::all(hub.clone());
    let patch = json!({
        "apiVersion": "configrollout.dev/v1alpha1",
        "kind": "Region",
        "status": status,
    });
    let params = PatchParams::apply(STATUS_FIELD_MANAGER).force();
    api_call(
        "write region status",
        api.patch_status(&region.name_any(), &params, &Patch::Apply(&patch)),
    )
    .await?;
    Ok(())
}
