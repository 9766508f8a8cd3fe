//! Which rollouts a change of another object concerns, so that a Region's status patch or
//! an edit of a `fromConfigMap` source reconciles those rollouts and no others.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::{COMPANION_SUFFIX, ConfigRollout, Region, TargetClaim};
use crate::engine::{self, Grant, RegionObservation};
use crate::regions::object_cache::RegionChange;
use crate::watch_index::{Named, WatchIndex};

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
            // The plan reads the tenant's selectors here, in the stream every rollout
            // shares: should it ever panic, the rollout is taken as concerned, and its
            // own reconcile (which catches panics) reports it.
            listed
                || std::panic::catch_unwind(AssertUnwindSafe(|| {
                    engine::selection::plan(&rollout.spec, &observed, &everywhere)
                        .all_regions()
                        .any(|(_, selected)| selected == name)
                }))
                .unwrap_or(true)
        })
        .map(|rollout| ObjectRef::from_obj(rollout.as_ref()))
        .collect()
}

/// Tells the Region changes that can matter to a rollout from the probe's refresh of
/// `status.lastContactTime` alone, which the controller writes for every healthy region
/// once a minute and which no rollout reads: without this filter each refresh reconciled
/// every rollout of the region, so a minute of N rollouts over R regions cost N x R
/// reconciles (each reading R regions) with nothing to do.
///
/// A change is skipped only when the Region is identical to the last one seen but for
/// its contact time, resourceVersion and managedFields, and the contact time moved. An
/// event identical in everything (a deletion carries the last state; a relist repeats it)
/// still concerns the rollouts.
#[derive(Debug, Default)]
pub struct RegionChanges {
    /// Per Region name: a hash of what rollouts read, and the contact time last seen.
    seen: Mutex<HashMap<String, (u64, Option<Time>)>>,
}

impl RegionChanges {
    /// Whether this version of `region` may change what a rollout decides; remembers it.
    pub fn concerns(&self, region: &Region) -> bool {
        let mut relevant = region.clone();
        relevant.metadata.resource_version = None;
        relevant.metadata.managed_fields = None;
        let contact = relevant
            .status
            .as_mut()
            .and_then(|status| status.last_contact_time.take());
        let mut hasher = DefaultHasher::new();
        // Serialisation failing would be a bug in the types; then it concerns them.
        let Ok(json) = serde_json::to_string(&relevant) else {
            return true;
        };
        json.hash(&mut hasher);
        let fingerprint = hasher.finish();
        let mut seen = match self.seen.lock() {
            Ok(seen) => seen,
            Err(poisoned) => poisoned.into_inner(),
        };
        let previous = seen.insert(region.name_any(), (fingerprint, contact.clone()));
        !matches!(previous, Some((before, before_contact)) if before == fingerprint && before_contact != contact)
    }
}

/// The rollouts a claim object names: every owner and every rollout waiting for a key.
/// A change of it (a key released, a claimant gone) may let one of them go on.
pub fn rollouts_claiming(claim: &TargetClaim) -> Vec<ObjectRef<ConfigRollout>> {
    let mut refs: Vec<ObjectRef<ConfigRollout>> = claim
        .spec
        .keys
        .iter()
        .flat_map(|entry| entry.claimants.iter())
        .map(|claimant| ObjectRef::new(&claimant.name).within(&claimant.namespace))
        .collect();
    refs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    refs.dedup();
    refs
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

/// The target a rollout writes: the key [`rollouts_for_region_change`] looks rollouts up by.
pub fn target_of(rollout: &ConfigRollout) -> Option<Named> {
    let target = &rollout.spec.target;
    Some((target.namespace.clone(), target.name.clone()))
}

/// The rollouts that write the region object a [`RegionChange`] names: its target, or
/// the target's companion, from `by_target` (rollouts indexed by [`target_of`]). Every
/// region the change may be in is looked at again by their reconcile (a region reached
/// through the hub's own client is told as `hub`), so no region filter is applied here.
pub fn rollouts_for_region_change(
    by_target: &WatchIndex,
    change: &RegionChange,
) -> Vec<ObjectRef<ConfigRollout>> {
    let target = change
        .name
        .strip_suffix(COMPANION_SUFFIX)
        .unwrap_or(&change.name);
    by_target
        .objects(&change.namespace, target)
        .into_iter()
        .map(|(namespace, name)| ObjectRef::new(&name).within(&namespace))
        .collect()
}

/// The shortest time between two wakes of one rollout by region changes.
pub const REGION_WAKE_SPACING: std::time::Duration = std::time::Duration::from_secs(5);
/// Past this many remembered rollouts, those woken longer ago than the spacing are
/// forgotten.
const WAKES_REMEMBERED: usize = 4096;

/// Spaces the wakes of each rollout by region changes at least [`REGION_WAKE_SPACING`]
/// apart. Another writer that puts a target back as soon as the rollout reverts it (two
/// controllers fighting over one ConfigMap, with `driftPolicy: Revert`) would otherwise
/// make both write as fast as the region answers; Argo CD's self-heal waits the same
/// way. Changes that arrive while a wake is pending join it.
#[derive(Debug, Default)]
pub struct WakeSpacing {
    woken: Mutex<HashMap<ObjectRef<ConfigRollout>, std::time::Instant>>,
}

impl WakeSpacing {
    /// When to wake `rollout` for a change seen at `now`: `Some(wait)`, or `None` when a
    /// wake still to come covers it.
    pub fn plan(
        &self,
        rollout: &ObjectRef<ConfigRollout>,
        now: std::time::Instant,
    ) -> Option<std::time::Duration> {
        let mut woken = self
            .woken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if woken.len() >= WAKES_REMEMBERED {
            woken.retain(|_, at| now.saturating_duration_since(*at) < REGION_WAKE_SPACING);
        }
        let wake_at = match woken.get(rollout) {
            Some(last) if *last > now => return None,
            Some(last) => (*last + REGION_WAKE_SPACING).max(now),
            None => now,
        };
        woken.insert(rollout.clone(), wake_at);
        Some(wake_at.saturating_duration_since(now))
    }
}

/// The rollouts of hub `namespace`: its grant annotations changed.
pub fn rollouts_in_namespace(
    rollouts: &[Arc<ConfigRollout>],
    namespace: &str,
) -> Vec<ObjectRef<ConfigRollout>> {
    rollouts
        .iter()
        .filter(|rollout| rollout.namespace().as_deref() == Some(namespace))
        .map(|rollout| ObjectRef::from_obj(rollout.as_ref()))
        .collect()
}

/// The rollouts whose candidate revision is refused by its values (`InvalidSpec` with
/// reason `InvalidValue`), in `namespace` or, for a cluster-scoped schema or validator
/// (`None`), anywhere: a change of a schema or validator can only matter to a candidate
/// not yet declared, as a declared revision is never judged again.
pub fn rollouts_refused_by_values(
    rollouts: &[Arc<ConfigRollout>],
    namespace: Option<&str>,
) -> Vec<ObjectRef<ConfigRollout>> {
    rollouts
        .iter()
        .filter(|rollout| {
            namespace.is_none_or(|namespace| rollout.namespace().as_deref() == Some(namespace))
                && rollout.status.as_ref().is_some_and(|status| {
                    status
                        .true_condition(crate::api::conditions::INVALID_SPEC)
                        .is_some_and(|condition| condition.reason == engine::REASON_INVALID_VALUE)
                })
        })
        .map(|rollout| ObjectRef::from_obj(rollout.as_ref()))
        .collect()
}

/// The rollouts refused (`InvalidSpec`) that name the template `name`: a
/// ClusterGateTemplate (`namespace` None) or a GateTemplate of `namespace`.
pub fn rollouts_refused_for_template(
    rollouts: &[Arc<ConfigRollout>],
    namespace: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<ConfigRollout>> {
    let kind = match namespace {
        Some(_) => crate::api::GateTemplateKind::GateTemplate,
        None => crate::api::GateTemplateKind::ClusterGateTemplate,
    };
    rollouts
        .iter()
        .filter(|rollout| {
            namespace.is_none_or(|namespace| rollout.namespace().as_deref() == Some(namespace))
                && rollout.spec.gates.iter().any(|gate| {
                    gate.template
                        .as_ref()
                        .is_some_and(|template| template.kind == kind && template.name == name)
                })
                && rollout.status.as_ref().is_some_and(|status| {
                    status
                        .true_condition(crate::api::conditions::INVALID_SPEC)
                        .is_some()
                })
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
    fn only_a_contact_time_refresh_of_a_region_concerns_no_rollout() {
        let changes = RegionChanges::default();
        let at = |second: i64| Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap());
        let mut eu = region("eu-1", "prod");
        eu.metadata.resource_version = Some("1".to_owned());
        eu.status = Some(crate::api::RegionStatus {
            reachable: Some(true),
            last_contact_time: Some(at(1_000)),
            ..Default::default()
        });
        assert!(changes.concerns(&eu), "first sight");

        // The probe refreshes the contact time: nothing a rollout reads changed.
        let mut refreshed = eu.clone();
        refreshed.metadata.resource_version = Some("2".to_owned());
        refreshed.status.as_mut().unwrap().last_contact_time = Some(at(1_060));
        assert!(!changes.concerns(&refreshed));

        // The same object again (its deletion, or a relist): concerns them.
        let mut deleted = refreshed.clone();
        deleted.metadata.resource_version = Some("3".to_owned());
        assert!(changes.concerns(&deleted));

        // Unreachable, with a newer contact time too: concerns them.
        let mut unreachable = refreshed.clone();
        let status = unreachable.status.as_mut().unwrap();
        status.reachable = Some(false);
        status.last_contact_time = Some(at(1_120));
        assert!(changes.concerns(&unreachable));

        // A label change: concerns them.
        let mut relabelled = unreachable.clone();
        relabelled.metadata.labels = Some([("tier".to_owned(), "canary".to_owned())].into());
        assert!(changes.concerns(&relabelled));

        // Another region is remembered apart.
        let mut us = region("us-1", "prod");
        us.status = eu.status.clone();
        assert!(changes.concerns(&us));
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

    #[test]
    fn a_changed_target_or_companion_wakes_the_rollouts_that_write_it() {
        let spec = |namespace: &str, target: &str| {
            serde_json::json!({
                "target": {"namespace": namespace, "name": target},
                "data": {"k": "v"},
                "stages": [{"name": "all", "regions": {"names": ["eu-1"]}}],
            })
        };
        let rollouts = vec![
            rollout("team-a", "limits", spec("app", "limits")),
            rollout("team-b", "shares-limits", spec("app", "limits")),
            rollout("team-a", "quotas", spec("app", "quotas")),
            rollout("team-a", "elsewhere", spec("other", "limits")),
        ];
        let by_target = WatchIndex::default();
        for rollout in &rollouts {
            by_target.apply(
                &kube::runtime::watcher::Event::Apply(rollout.as_ref().clone()),
                target_of,
            );
        }
        let change = |name: &str| RegionChange {
            region: "eu-1".to_owned(),
            namespace: "app".to_owned(),
            name: name.to_owned(),
            resource_version: Some("7".to_owned()),
        };
        assert_eq!(
            names(rollouts_for_region_change(&by_target, &change("limits"))),
            ["limits", "shares-limits"]
        );
        assert_eq!(
            names(rollouts_for_region_change(
                &by_target,
                &change(&format!("quotas{COMPANION_SUFFIX}"))
            )),
            ["quotas"]
        );
        assert!(rollouts_for_region_change(&by_target, &change("unrelated")).is_empty());
        assert_eq!(
            names(rollouts_in_namespace(&rollouts, "team-b")),
            ["shares-limits"]
        );
    }

    #[test]
    fn region_change_wakes_of_one_rollout_are_spaced_and_joined() {
        let spacing = WakeSpacing::default();
        let limits = ObjectRef::<ConfigRollout>::new("limits").within("team");
        let quotas = ObjectRef::<ConfigRollout>::new("quotas").within("team");
        let start = std::time::Instant::now();
        // The first change wakes at once; another rollout is not held back by it.
        assert_eq!(
            spacing.plan(&limits, start),
            Some(std::time::Duration::ZERO)
        );
        assert_eq!(
            spacing.plan(&quotas, start),
            Some(std::time::Duration::ZERO)
        );
        // A second change a second later waits out the spacing...
        let second = start + std::time::Duration::from_secs(1);
        assert_eq!(
            spacing.plan(&limits, second),
            Some(REGION_WAKE_SPACING - std::time::Duration::from_secs(1))
        );
        // ...and a third, before that wake, joins it.
        assert_eq!(
            spacing.plan(&limits, start + std::time::Duration::from_secs(2)),
            None
        );
        // Once the spacing has passed since the last wake, at once again.
        let later = start + REGION_WAKE_SPACING * 3;
        assert_eq!(
            spacing.plan(&limits, later),
            Some(std::time::Duration::ZERO)
        );
    }
}
