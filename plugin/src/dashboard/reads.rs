//! The reads a rollout page makes besides the watched rollout, with the caller's
//! credentials: its Events, and its stored revisions for the history's key diffs. A
//! refusal is returned as the API server's answer, for the page to show.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::history::history_diffs;
use super::timeline::EventLine;
use crate::hub::Hub;
use crate::render::KeyChange;
use configrollout_api::CONTROLLER_NAME;
use configrollout_api::ConfigRollout;

/// Events recorded about the rollout, at most this many (the newest are kept).
const MAX_EVENTS: usize = 200;

/// The rollout's Events: this object's (by UID, so a deleted namesake's history is not
/// shown as its own), as recorded by the configrollout controller.
pub async fn events(hub: &Hub, rollout: &ConfigRollout) -> Result<Vec<EventLine>, String> {
    let namespace = rollout.namespace().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(hub.client.clone(), &namespace);
    let uid = rollout.uid().unwrap_or_default();
    let params = ListParams::default().fields(&format!(
        "involvedObject.kind=ConfigRollout,involvedObject.name={},involvedObject.uid={uid}",
        rollout.name_any()
    ));
    let what = format!(
        "listing the events of configrollout {namespace}/{}",
        rollout.name_any()
    );
    let list = hub
        .call(&what, api.list(&params))
        .await
        .map_err(|error| error.to_string())?;
    let mut lines: Vec<EventLine> = list
        .items
        .iter()
        .filter(|event| event.reporting_component.as_deref() == Some(CONTROLLER_NAME))
        .map(EventLine::from_event)
        .collect();
    lines.sort_by(|a, b| b.at.cmp(&a.at));
    lines.truncate(MAX_EVENTS);
    Ok(lines)
}

/// Each stored revision's key changes against the one before it.
pub async fn diffs(
    hub: &Hub,
    rollout: &ConfigRollout,
) -> Result<BTreeMap<String, Vec<KeyChange>>, String> {
    let namespace = rollout.namespace().unwrap_or_default();
    let revisions = hub
        .in_namespace(&namespace)
        .revisions(rollout)
        .await
        .map_err(|error| error.to_string())?;
    let desired: BTreeMap<String, BTreeMap<String, String>> = revisions
        .iter()
        .map(|(name, state)| (name.clone(), state.desired()))
        .collect();
    Ok(history_diffs(&desired))
}
