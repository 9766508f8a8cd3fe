//! What acting tells the engine. The engine decides before the reconcile acts, so what
//! only acting can find out (a merge a region refused) comes back here before the status
//! is written: the status stays the engine's alone.

use super::Action;
use configrollout_api::ConfigRolloutStatus;

/// What carrying out a decision's actions found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActOutcome {
    /// Regions whose merge failed, with the error (names and HTTP reasons, no values).
    pub failed_regions: Vec<FailedRegion>,
}

/// A region whose merge failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedRegion {
    /// Region name.
    pub region: String,
    /// What failed (no values).
    pub error: String,
}

/// The status to write after acting on `status`'s decision. A region whose merge failed
/// is recorded unreachable, with the error: the engine sends a region its work when it
/// turns reachable, so the next reconcile, observing it reachable again, sends the merge
/// again, while the stage's deadline keeps running.
pub fn settle(mut status: ConfigRolloutStatus, outcome: &ActOutcome) -> ConfigRolloutStatus {
    for failed in &outcome.failed_regions {
        if let Some(region) = status.regions.iter_mut().find(|r| r.name == failed.region) {
            region.reachable = Some(false);
            region.last_error = Some(failed.error.clone());
        }
    }
    status
}

/// Whether the reconcile that carried out `actions` should observe the regions again and
/// decide once more before writing the status: it changed what regions hold (a publish or
/// a rollback, all accepted) and the status moved, so a fresh observation may let the
/// rollout go further now (a stage whose regions all hold the revision passes, the next
/// one opens) instead of one watch round-trip and one status write later. Progress stays
/// the engine's: each round is a plain decision on what the regions were seen to hold.
pub fn observe_again(
    actions: &[Action],
    outcome: &ActOutcome,
    before: &ConfigRolloutStatus,
    after: &ConfigRolloutStatus,
) -> bool {
    let changed_regions = actions
        .iter()
        .any(|action| matches!(action, Action::Publish { .. } | Action::Rollback { .. }));
    changed_regions && outcome.failed_regions.is_empty() && before != after
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Action, DesiredRevision, Grant, Observations, RegionObservation, decide};
    use chrono::Utc;
    use configrollout_api::ConfigRolloutSpec;

    fn spec() -> ConfigRolloutSpec {
        serde_json::from_value(serde_json::json!({
            "target": {"namespace": "app", "name": "limits"},
            "data": {"rate": "1"},
            "stages": [{"name": "only", "regions": {"names": ["region-1"]}}],
        }))
        .unwrap()
    }

    fn observations() -> Observations {
        Observations {
            generation: 1,
            desired: DesiredRevision {
                digest: "d1".into(),
                keys_set: 1,
                keys_removed: 0,
            },
            fresh_stamp: "1000.0@rollout:team/limits".into(),
            regions: vec![RegionObservation {
                name: "region-1".into(),
                reachable: true,
                ..RegionObservation::default()
            }],
            grant: Grant::own_namespace("app"),
            ..Observations::default()
        }
    }

    fn publishes(actions: &[Action]) -> usize {
        actions
            .iter()
            .filter(|action| matches!(action, Action::Publish { .. }))
            .count()
    }

    #[test]
    fn a_reconcile_observes_again_only_after_accepted_region_changes_that_moved_it() {
        let spec = spec();
        let first = decide(
            &spec,
            ConfigRolloutStatus::default(),
            &observations(),
            Utc::now(),
        );
        assert_eq!(publishes(&first.actions), 1);
        let accepted = ActOutcome::default();
        let before = ConfigRolloutStatus::default();
        assert!(observe_again(
            &first.actions,
            &accepted,
            &before,
            &first.status
        ));
        // A refused merge: the region is retried on the next reconcile, with backoff.
        let refused = ActOutcome {
            failed_regions: vec![FailedRegion {
                region: "region-1".into(),
                error: "write target: connection refused".into(),
            }],
        };
        assert!(!observe_again(
            &first.actions,
            &refused,
            &before,
            &first.status
        ));
        // Nothing written in a region, or a status that did not move: nothing new to see.
        let waiting = [Action::Event {
            type_: crate::engine::EventType::Normal,
            reason: "Paused".into(),
            message: "paused".into(),
        }];
        assert!(!observe_again(&waiting, &accepted, &before, &first.status));
        assert!(!observe_again(
            &first.actions,
            &accepted,
            &first.status,
            &first.status
        ));
    }

    #[test]
    fn a_failed_merge_is_sent_again_on_the_next_reconcile() {
        let spec = spec();
        let now = Utc::now();
        let first = decide(&spec, Default::default(), &observations(), now);
        assert_eq!(publishes(&first.actions), 1);

        // The merge failed: recorded, the next reconcile (region still not holding the
        // revision) sends it again.
        let status = settle(
            first.status.clone(),
            &ActOutcome {
                failed_regions: vec![FailedRegion {
                    region: "region-1".into(),
                    error: "write target: 403".into(),
                }],
            },
        );
        let region = &status.regions[0];
        assert_eq!(region.reachable, Some(false));
        assert_eq!(region.last_error.as_deref(), Some("write target: 403"));
        let retried = decide(&spec, status, &observations(), now);
        assert_eq!(publishes(&retried.actions), 1);

        // Without the record, the engine (rightly, for restart safety) sends nothing new.
        let unmarked = decide(&spec, first.status, &observations(), now);
        assert_eq!(publishes(&unmarked.actions), 0);
    }
}
