//! `Region` status: whether each region's API server answers, its version, the last
//! error and the last contact, probed on a timer.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::status_writer::STATUS_FIELD_MANAGER;
use super::{HubError, WriteFence, api_call, fetch};
use crate::api::{Region, RegionStatus, conditions};
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
    probed(region, answer, Time(k8s_openapi::jiff::Timestamp::now()))
}

/// Reason of `Ready` and `Stalled` when the region's API server answered nothing.
pub const REASON_UNREACHABLE: &str = "Unreachable";
/// Reason of `Ready` when it answered.
pub const REASON_REACHABLE: &str = "Reachable";

/// The status one probe makes of `region`: the server's version (`Ok`) or the error
/// (`Err`, no secrets in it), the contact time `now` when it answered, and the kstatus
/// conditions of the Region's current generation, so that a Region applied from Git reads
/// Current once its API server answers and Failed while it does not.
fn probed(region: &Region, answer: Result<String, String>, now: Time) -> RegionStatus {
    let previous = region.status.clone().unwrap_or_default();
    let generation = region.metadata.generation;
    let mut status = match answer {
        Ok(version) => RegionStatus {
            observed_generation: generation,
            reachable: Some(true),
            server_version: Some(version),
            last_error: None,
            last_contact_time: Some(now.clone()),
            conditions: previous.conditions,
        },
        Err(error) => RegionStatus {
            observed_generation: generation,
            reachable: Some(false),
            last_error: Some(error),
            ..previous
        },
    };
    let (reachable, reason, message) = if status.reachable == Some(true) {
        (
            true,
            REASON_REACHABLE,
            format!(
                "the API server answered ({})",
                status
                    .server_version
                    .as_deref()
                    .unwrap_or("unknown version")
            ),
        )
    } else {
        (
            false,
            REASON_UNREACHABLE,
            format!(
                "the API server did not answer: {}; rollouts wait for it until their \
                 progressDeadline",
                status.last_error.as_deref().unwrap_or("no answer")
            ),
        )
    };
    let stalled_message = if reachable {
        String::new()
    } else {
        message.clone()
    };
    let list = &mut status.conditions;
    conditions::set(
        list,
        conditions::READY,
        reachable,
        reason,
        message,
        generation,
        now.clone(),
    );
    // A probe decides at once: there is never a reconcile of a Region in flight to wait for.
    conditions::set(
        list,
        conditions::RECONCILING,
        false,
        reason,
        String::new(),
        generation,
        now.clone(),
    );
    conditions::set(
        list,
        conditions::STALLED,
        !reachable,
        reason,
        stalled_message,
        generation,
        now,
    );
    status
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
        || before.observed_generation != after.observed_generation
        || before.conditions != after.conditions
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
    }

    fn region(generation: i64, status: Option<RegionStatus>) -> Region {
        let mut region = Region::new("eu-1", Default::default());
        region.metadata.generation = Some(generation);
        region.status = status;
        region
    }

    fn reasons(status: &RegionStatus) -> Vec<(String, String, String)> {
        conditions::KSTATUS_CONDITION_TYPES
            .iter()
            .map(|type_| {
                let condition = status
                    .conditions
                    .iter()
                    .find(|condition| condition.type_ == *type_)
                    .expect(type_);
                assert_eq!(condition.observed_generation, status.observed_generation);
                (
                    condition.type_.clone(),
                    condition.status.clone(),
                    condition.reason.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn a_probe_makes_a_region_ready_or_stalled_as_of_its_generation() {
        let answered = probed(&region(1, None), Ok("v1.36.3".into()), at(100));
        assert_eq!(answered.observed_generation, Some(1));
        assert_eq!(
            reasons(&answered),
            [
                ("Ready".into(), "True".into(), "Reachable".into()),
                ("Reconciling".into(), "False".into(), "Reachable".into()),
                ("Stalled".into(), "False".into(), "Reachable".into()),
            ]
        );

        // The kubeconfig changed (generation 2) and the region stopped answering.
        let silent = probed(
            &region(2, Some(answered.clone())),
            Err("connection refused".into()),
            at(160),
        );
        assert_eq!(silent.observed_generation, Some(2));
        assert_eq!(
            reasons(&silent),
            [
                ("Ready".into(), "False".into(), "Unreachable".into()),
                ("Reconciling".into(), "False".into(), "Unreachable".into()),
                ("Stalled".into(), "True".into(), "Unreachable".into()),
            ]
        );
        let stalled = silent
            .conditions
            .iter()
            .find(|condition| condition.type_ == "Stalled")
            .unwrap();
        assert!(
            stalled.message.contains("connection refused"),
            "{stalled:?}"
        );
        assert_eq!(stalled.last_transition_time, at(160));
        assert!(changed(Some(&answered), &silent));

        // Still silent later: nothing flips, nothing to write.
        let still = probed(
            &region(2, Some(silent.clone())),
            Err("connection refused".into()),
            at(175),
        );
        assert_eq!(still, silent);
        assert!(!changed(Some(&silent), &still));
    }

    #[test]
    fn a_new_generation_alone_is_written_at_the_next_probe() {
        let first = probed(&region(1, None), Ok("v1.36.3".into()), at(100));
        let next = probed(
            &region(2, Some(first.clone())),
            Ok("v1.36.3".into()),
            at(110),
        );
        assert!(changed(Some(&first), &next), "observedGeneration 1 -> 2");
        let same = probed(
            &region(2, Some(next.clone())),
            Ok("v1.36.3".into()),
            at(120),
        );
        assert!(!changed(Some(&next), &same), "nothing new within a minute");
    }
}
