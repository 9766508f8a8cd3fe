//! No sequence of specs makes the engine write outside what the rollout's namespace was
//! granted: whatever target namespace, region names, selectors and adoption a tenant
//! writes, and however often the spec changes mid-rollout, every region action names a
//! granted region while the spec's target namespace is granted.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use configrollout_core::engine::tenancy::TargetNamespaces;
use configrollout_core::engine::{Action, Grant};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{World, spec};

const NAMESPACES: [&str; 4] = ["team-a", "app", "kube-system", "other"];
const REGIONS: [&str; 4] = ["region-1", "region-2", "region-3", "region-4"];

#[derive(Debug, Clone)]
struct SpecChoice {
    target: usize,
    adopt: bool,
    /// Per stage: `Ok(names)` or `Err(tier)` for a selector on the tier label.
    stages: Vec<Result<Vec<usize>, bool>>,
    data: u8,
}

fn spec_choice() -> impl Strategy<Value = SpecChoice> {
    let stage = prop_oneof![
        prop::collection::btree_set(0..REGIONS.len(), 1..=REGIONS.len())
            .prop_map(|names| Ok(names.into_iter().collect())),
        any::<bool>().prop_map(Err),
    ];
    (
        0..NAMESPACES.len(),
        any::<bool>(),
        prop::collection::vec(stage, 1..3),
        any::<u8>(),
    )
        .prop_map(|(target, adopt, stages, data)| SpecChoice {
            target,
            adopt,
            stages,
            data,
        })
}

fn grant_choice() -> impl Strategy<Value = Grant> {
    (
        prop::collection::btree_set(0..NAMESPACES.len(), 0..3),
        any::<bool>(),
        proptest::option::of(prop::collection::btree_set(0..REGIONS.len(), 0..4)),
        any::<bool>(),
    )
        .prop_map(|(namespaces, any_namespace, regions, adoption)| Grant {
            namespace: "team-a".to_owned(),
            target_namespaces: if any_namespace {
                TargetNamespaces::Any
            } else {
                TargetNamespaces::Also(
                    namespaces
                        .into_iter()
                        .map(|i| NAMESPACES[i].to_owned())
                        .collect(),
                )
            },
            regions: regions.map(|set| {
                set.into_iter()
                    .map(|i| REGIONS[i].to_owned())
                    .collect::<BTreeSet<_>>()
            }),
            adoption,
            required_schemas: BTreeSet::new(),
            ..Grant::default()
        })
}

fn to_spec(choice: &SpecChoice) -> configrollout_api::ConfigRolloutSpec {
    let stages: Vec<Value> = choice
        .stages
        .iter()
        .enumerate()
        .map(|(index, regions)| {
            let regions = match regions {
                Ok(names) => {
                    json!({"names": names.iter().map(|i| REGIONS[*i]).collect::<Vec<_>>()})
                }
                Err(canary) => json!({"selector": {"matchLabels": {
                    "tier": if *canary { "canary" } else { "production" }
                }}}),
            };
            json!({"name": format!("s{index}"), "regions": regions, "maxParallel": 2})
        })
        .collect();
    spec(json!({
        "target": {"namespace": NAMESPACES[choice.target], "name": "limits", "adopt": choice.adopt},
        "data": {"rate": choice.data.to_string()},
        "stages": stages,
    }))
}

fn region_of(action: &Action) -> Option<&str> {
    match action {
        Action::Publish { region, .. }
        | Action::Rollback { region, .. }
        | Action::RestartConsumers { region, .. } => Some(region),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(support::proptest_cases(200)))]

    #[test]
    fn no_sequence_of_specs_writes_outside_the_grant(
        grant in grant_choice(),
        specs in prop::collection::vec((spec_choice(), 1usize..6), 1..5),
    ) {
        let mut world = World::new(to_spec(&specs[0].0), &REGIONS);
        for (index, region) in REGIONS.iter().enumerate() {
            world.set_label(region, "tier", if index == 0 { "canary" } else { "production" });
        }
        world.grant = grant.clone();
        let mut digests = BTreeMap::new();
        for (generation, (choice, ticks)) in specs.iter().enumerate() {
            world.spec = to_spec(choice);
            world.generation = i64::try_from(generation).unwrap() + 1;
            let next = digests.len();
            let digest = digests.entry(choice.data).or_insert(next);
            world.desired.digest = format!("digest-{digest}");
            for _ in 0..*ticks {
                let target = world.spec.target.namespace.clone();
                let adopt = world.spec.target.adopt;
                world.tick_checked(|observations, _, decision| {
                    for action in &decision.actions {
                        let Some(region) = region_of(action) else { continue };
                        assert!(
                            observations.grant.allows_region(region),
                            "{action:?} outside granted regions {:?}",
                            observations.grant.regions
                        );
                        assert!(
                            observations.grant.allows_target_namespace(&target),
                            "{action:?} for target namespace {target}, not granted"
                        );
                        assert!(
                            !adopt || observations.grant.adoption,
                            "{action:?} for a rollout asking to adopt without the grant"
                        );
                    }
                });
                world.advance(15);
            }
        }
    }
}

#[test]
fn a_selector_only_ever_selects_granted_regions() {
    let mut world = World::new(
        spec(json!({
            "target": {"namespace": "team-a", "name": "limits"},
            "stages": [{"name": "all", "regions": {"selector": {"matchLabels": {"tier": "production"}}}, "maxParallel": 4}],
        })),
        &REGIONS,
    );
    for region in REGIONS {
        world.set_label(region, "tier", "production");
    }
    world.grant = Grant {
        regions: Some(["region-2".to_owned()].into()),
        ..Grant::own_namespace("team-a")
    };
    world.run(10, 15);
    let published: BTreeSet<String> = world.publishes().into_iter().map(|p| p.0).collect();
    assert_eq!(published, BTreeSet::from(["region-2".to_owned()]));
    assert!(
        world.condition_true("Complete"),
        "{:?}",
        world.status.conditions
    );
}

#[test]
fn a_target_outside_the_grant_is_invalid_and_publishes_nothing() {
    let mut world = World::new(
        spec(json!({
            "target": {"namespace": "kube-system", "name": "coredns"},
            "stages": [{"name": "all", "regions": {"names": ["region-1"]}}],
        })),
        &REGIONS,
    );
    world.grant = Grant::own_namespace("team-a");
    world.run(5, 15);
    assert!(world.publishes().is_empty());
    let condition = world.condition("InvalidSpec").expect("InvalidSpec");
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason, "OutsideGrant");
    assert!(
        condition.message.contains("spec.target.namespace"),
        "{}",
        condition.message
    );
}
