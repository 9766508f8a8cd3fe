//! What acting tells the engine. The engine decides before the reconcile acts, so what
//! only acting can find out (a merge a region refused) comes back here before the status
//! is written: the status stays the engine's alone.

use crate::api::ConfigRolloutStatus;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConfigRolloutSpec;
    use crate::engine::{Action, DesiredRevision, Grant, Observations, RegionObservation, decide};
    use chrono::Utc;

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
