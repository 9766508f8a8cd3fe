//! Issue 32: a candidate its schemas or validators refuse is never declared and never
//! reaches a region, wherever the rollout stands when it arrives (mid-stage, awaiting
//! approval, complete, halted), for any number of reconciles; once accepted, it is
//! declared at the next one.

mod support;

use configrollout_core::engine::Action;
use proptest::prelude::*;
use serde_json::json;
use support::{World, proptest_cases, spec};

const REGIONS: [&str; 4] = ["c1", "p1", "p2", "p3"];

fn world(approval: bool, gate_fails: bool) -> World {
    let approval = if approval { "Required" } else { "None" };
    let mut world = World::new(
        spec(json!({
            "stages": [
                {"name": "canary", "regions": {"names": ["c1"]}, "gates": ["errors"]},
                {"name": "prod", "regions": {"names": ["p1", "p2", "p3"]}, "maxParallel": 2,
                 "approval": approval, "pause": {"duration": "30s"}},
            ],
            "gates": [{"name": "errors", "query": "sum(errors)", "condition": "result < 1",
                       "interval": "10s", "count": 2}],
        })),
        &REGIONS,
    );
    if gate_fails {
        world.metric = Box::new(|_, _| configrollout_core::gates::QueryResult::Scalar(5.0));
    }
    world
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(256)))]

    #[test]
    fn a_refused_candidate_is_never_declared_nor_written(
        approval in any::<bool>(),
        gate_fails in any::<bool>(),
        before in 0usize..12,
        refused_for in 1usize..12,
        step_s in 1i64..40,
    ) {
        let mut world = world(approval, gate_fails);
        world.run(before, step_s);
        let revision = world.status.revision.clone();
        let history = world.status.history.clone();
        let logged = world.log.len();

        world.desired.digest = "digest-2".into();
        world.value_violations =
            vec!["ConfigSchema team/limits: key `rate`: maximum: above 1000".into()];
        for _ in 0..refused_for {
            let decision = world.tick();
            prop_assert!(
                !decision.actions.iter().any(|action| matches!(
                    action,
                    Action::DeclareRevision { .. } | Action::Publish { .. } | Action::Rollback { .. }
                )),
                "a refused candidate acts: {:?}", decision.actions
            );
            let invalid = world.condition("InvalidSpec").expect("InvalidSpec");
            prop_assert_eq!(invalid.reason.as_str(), "InvalidValue");
            prop_assert!(invalid.message.contains("key `rate`"));
            world.advance(step_s);
        }
        prop_assert_eq!(&world.status.revision, &revision);
        prop_assert_eq!(&world.status.history, &history);
        prop_assert!(
            world.log[logged..].iter().all(|(_, action)| !matches!(
                action,
                Action::Publish { .. } | Action::Rollback { .. }
            )),
            "no region write while refused"
        );

        // Accepted: declared at once.
        world.value_violations.clear();
        world.tick();
        prop_assert!(!world.condition_true("InvalidSpec"));
        let declared = world.status.history.last().map(|record| record.digest.clone());
        prop_assert_eq!(declared, Some(Some("digest-2".to_owned())));
    }
}
