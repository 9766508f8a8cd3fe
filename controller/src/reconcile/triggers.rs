//! Which rollouts a change of another object concerns, so that a Region's status patch or
//! an edit of a `fromConfigMap` source reconciles those rollouts and no others.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::{ConfigRollout, Region};
use crate::engine::{self, Grant, RegionObservation};

/// The rollouts some stage selects `region` for (by name or labels, before any grant:
/// a wider set only costs a reconcile), and those whose status lists it (it may have left
/// their selection, or been deleted).
pub fn rollouts_for_region(
    rollouts: &[Arc<ConfigRollout>],
    region: &Region,
) -> Vec<ObjectRef<ConfigRollout>> {
    let name = region.name_any();
    let observed = [RegionObservation {
        name: name.clone(),
        labels: region.labels().clone(),
        ..RegionObservation::default()
    }];
    let everywhere = Grant::default();
    rollouts
        .iter()
        .filter(|rollout| {
            let listed = rollout
                .status
                .as_ref()
                .is_some_and(|status| status.regions.iter().any(|r| r.name == name));
            listed
                || engine::selection::plan(&rollout.spec, &observed, &everywhere)
                    .all_regions()
                    .any(|(_, selected)| selected == name)
        })
        .map(|rollout| ObjectRef::from_obj(rollout.as_ref()))
        .collect()
}

/// The rollouts that read the ConfigMap `namespace/name` as their `spec.fromConfigMap`.
pub fn rollouts_for_source(
    rollouts: &[Arc<ConfigRollout>],
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<ConfigRollout>> {
    rollouts
        .iter()
        .filter(|rollout| {
            rollout.namespace().as_deref() == Some(namespace)
                && rollout
                    .spec
                    .from_config_map
                    .as_ref()
                    .is_some_and(|source| source.name == name)
        })
        .map(|rollout| ObjectRef::from_obj(rollout.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RegionRolloutStatus;
    use crate::reconcile::tests::region;

    fn rollout(namespace: &str, name: &str, spec: serde_json::Value) -> Arc<ConfigRollout> {
        let mut rollout = ConfigRollout::new(name, serde_json::from_value(spec).unwrap());
        rollout.metadata.namespace = Some(namespace.to_owned());
        Arc::new(rollout)
    }

    fn names(refs: Vec<ObjectRef<ConfigRollout>>) -> Vec<String> {
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn a_region_change_concerns_the_rollouts_that_select_or_list_it() {
        let by_name = rollout(
            "team",
            "by-name",
            serde_json::json!({
                "target": {"namespace": "team", "name": "limits"},
                "data": {"k": "v"},
                "stages": [{"name": "canary", "regions": {"names": ["eu-1"]}}],
            }),
        );
        let by_label = rollout(
            "team",
            "by-label",
            serde_json::json!({
                "target": {"namespace": "team", "name": "limits"},
                "data": {"k": "v"},
                "stages": [{"name": "prod", "regions": {"selector": {"matchLabels": {"tier": "prod"}}}}],
            }),
        );
        let elsewhere = rollout(
            "team",
            "elsewhere",
            serde_json::json!({
                "target": {"namespace": "team", "name": "limits"},
                "data": {"k": "v"},
                "stages": [{"name": "us", "regions": {"names": ["us-1"]}}],
            }),
        );
        let mut listed = (*elsewhere).clone();
        listed.metadata.name = Some("listed".to_owned());
        listed.status = Some(crate::api::ConfigRolloutStatus {
            regions: vec![RegionRolloutStatus {
                name: "eu-1".to_owned(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let rollouts = [by_name, by_label, elsewhere, Arc::new(listed)];

        assert_eq!(
            names(rollouts_for_region(&rollouts, &region("eu-1", "prod"))),
            ["by-name", "by-label", "listed"]
        );
        assert_eq!(
            names(rollouts_for_region(&rollouts, &region("ap-1", "staging"))),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_source_change_concerns_the_rollouts_reading_it_in_its_namespace() {
        let spec = |source: &str| {
            serde_json::json!({
                "target": {"namespace": "team", "name": "limits"},
                "fromConfigMap": {"name": source},
                "stages": [{"name": "all", "regions": {"names": ["eu-1"]}}],
            })
        };
        let rollouts = [
            rollout("team", "reads", spec("limits-source")),
            rollout("other", "same-name-elsewhere", spec("limits-source")),
            rollout("team", "reads-another", spec("timeouts-source")),
        ];
        assert_eq!(
            names(rollouts_for_source(&rollouts, "team", "limits-source")),
            ["reads"]
        );
    }
}
