//! One owner per key of a shared target, over any sequence: rollouts with overlapping keys
//! created in any order, reconciled in any order (as replicas and shards would), their
//! writes delivered to regions in any order, overrides made by people in regions, and
//! rollouts deleted. Ownership is decided by `engine::ownership::settle_claims` on one
//! claim object (the hub's), and only a rollout that owns every key it declares writes
//! (with a stamp from one clock, as every replica's clock observes the regions before
//! stamping); regions are real last-writer-wins replicas.
//!
//! At the end, once every live rollout has been reconciled and every write delivered:
//! - every key a live rollout owns holds its owner's value in every region, unless a
//!   person overrode it there after the owner's write (so, without overrides, every
//!   region holds the same value of it, whatever order anything happened in);
//! - every live rollout either owns every key it declares, or is refused because another
//!   live rollout owns one of them (a deleted owner's keys pass on by themselves): none is
//!   left in between.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeZone, Utc};
use configrollout_api::{ClaimedTarget, TargetClaimSpec};
use configrollout_core::crdt::{Delta, Entry, Replica, Stamp, WriterId};
use configrollout_core::engine::ownership::{RolloutIdentity, settle_claims};
use proptest::prelude::*;
use support::proptest_cases;

const REGIONS: usize = 3;
const KEYS: [&str; 3] = ["rate", "mode", "timeout"];

#[derive(Debug, Clone)]
enum Step {
    /// Rollout `i` is reconciled: it settles its claims and, owning every key it
    /// declares, writes them (stamped now) once.
    Reconcile(usize),
    /// Rollout `i`'s writes reach region `r` (late, out of order, or twice).
    Deliver(usize, usize),
    /// A person overrides key `k` in region `r`.
    Override(usize, usize),
    /// Rollout `i` is deleted.
    Delete(usize),
}

fn step(rollouts: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..rollouts).prop_map(Step::Reconcile),
        4 => (0..rollouts, 0..REGIONS).prop_map(|(i, r)| Step::Deliver(i, r)),
        1 => (0..KEYS.len(), 0..REGIONS).prop_map(|(k, r)| Step::Override(k, r)),
        1 => (0..rollouts).prop_map(Step::Delete),
    ]
}

struct Rollout {
    identity: RolloutIdentity,
    keys: BTreeSet<String>,
    alive: bool,
    /// What it wrote, once it owned every key it declares.
    written: Option<Delta>,
    refused: bool,
}

struct World {
    rollouts: Vec<Rollout>,
    claims: Option<TargetClaimSpec>,
    regions: Vec<Replica>,
    /// Per region and key, the stamp of the last override made there.
    overrides: BTreeMap<(usize, String), Stamp>,
    clock: u64,
}

fn target() -> ClaimedTarget {
    ClaimedTarget {
        namespace: "shared".into(),
        name: "payments".into(),
    }
}

fn now(clock: u64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + i64::try_from(clock).unwrap_or(0), 0)
        .single()
        .unwrap()
}

impl World {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn reconcile(&mut self, index: usize) {
        if !self.rollouts[index].alive {
            return;
        }
        let alive: BTreeSet<(String, String)> = self
            .rollouts
            .iter()
            .filter(|r| r.alive)
            .map(|r| (r.identity.name.clone(), r.identity.uid.clone()))
            .collect();
        let clock = self.tick();
        let rollout = &self.rollouts[index];
        let outcome = settle_claims(
            self.claims.as_ref(),
            &target(),
            &rollout.identity,
            &rollout.keys,
            |claimant| alive.contains(&(claimant.name.clone(), claimant.uid.clone())),
            now(clock),
        );
        self.claims = Some(outcome.spec);
        let refused = !outcome.refusals.is_empty();
        let rollout = &mut self.rollouts[index];
        rollout.refused = refused;
        if !refused && rollout.written.is_none() {
            let stamp = Stamp::new(
                clock,
                0,
                WriterId::rollout("team", &rollout.identity.name).unwrap(),
            );
            rollout.written = Some(
                rollout
                    .keys
                    .iter()
                    .map(|key| {
                        let value = format!("{}-{key}", rollout.identity.name);
                        (key.as_str(), Entry::live(value.as_str(), stamp.clone()))
                    })
                    .collect(),
            );
        }
    }

    fn deliver(&mut self, index: usize, region: usize) {
        if let Some(written) = &self.rollouts[index].written {
            self.regions[region].apply(written);
        }
    }

    fn owner_of(&self, key: &str) -> Option<&Rollout> {
        let entry = self
            .claims
            .as_ref()?
            .keys
            .iter()
            .find(|entry| entry.key == key)?;
        let owner = entry.claimants.first()?;
        self.rollouts
            .iter()
            .find(|r| r.alive && r.identity.name == owner.name && r.identity.uid == owner.uid)
    }
}

fn key_sets() -> impl Strategy<Value = Vec<BTreeSet<String>>> {
    prop::collection::vec(
        prop::sample::subsequence(KEYS.to_vec(), 1..=KEYS.len())
            .prop_map(|keys| keys.into_iter().map(str::to_owned).collect()),
        2..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(500)))]

    #[test]
    fn every_region_ends_with_each_keys_owner_or_a_later_override(
        (keys, steps) in key_sets().prop_flat_map(|keys| {
            let rollouts = keys.len();
            (Just(keys), prop::collection::vec(step(rollouts), 0..60))
        }),
    ) {
        let mut world = World {
            rollouts: keys
                .into_iter()
                .enumerate()
                .map(|(index, keys)| Rollout {
                    identity: RolloutIdentity {
                        namespace: "team".into(),
                        name: format!("r{index}"),
                        uid: format!("uid-{index}"),
                    },
                    keys,
                    alive: true,
                    written: None,
                    refused: false,
                })
                .collect(),
            claims: None,
            regions: vec![Replica::new(); REGIONS],
            overrides: BTreeMap::new(),
            clock: 0,
        };
        for step in &steps {
            match step {
                Step::Reconcile(index) => world.reconcile(*index),
                Step::Deliver(index, region) => world.deliver(*index, *region),
                Step::Override(key, region) => {
                    let clock = world.tick();
                    let stamp = Stamp::new(clock, 0, WriterId::override_by("oncall").unwrap());
                    let key = KEYS[*key].to_owned();
                    let delta: Delta =
                        [(key.as_str(), Entry::live("override", stamp.clone()))].into_iter().collect();
                    world.regions[*region].apply(&delta);
                    world.overrides.insert((*region, key), stamp);
                }
                Step::Delete(index) => world.rollouts[*index].alive = false,
            }
        }
        // Quiesce: every live rollout reconciled until nothing changes, every write
        // delivered everywhere.
        for _ in 0..world.rollouts.len() + 1 {
            for index in 0..world.rollouts.len() {
                world.reconcile(index);
            }
        }
        for index in 0..world.rollouts.len() {
            if !world.rollouts[index].alive {
                continue;
            }
            for region in 0..REGIONS {
                world.deliver(index, region);
            }
        }

        for rollout in world.rollouts.iter().filter(|r| r.alive) {
            let owns_all = rollout
                .keys
                .iter()
                .all(|key| world.owner_of(key).is_some_and(|owner| owner.identity == rollout.identity));
            // Refused only while another live rollout owns one of its keys: a deleted
            // owner's keys pass to the next in line without anyone's help.
            let waits_for_a_live_owner = rollout.keys.iter().any(|key| {
                world
                    .owner_of(key)
                    .is_some_and(|owner| owner.identity != rollout.identity)
            });
            prop_assert_eq!(rollout.refused, waits_for_a_live_owner, "{}", rollout.identity.name);
            prop_assert!(
                owns_all != rollout.refused,
                "{} owns all its keys: {}, refused: {}",
                rollout.identity.name,
                owns_all,
                rollout.refused
            );
        }
        for key in KEYS {
            let Some(owner) = world.owner_of(key) else { continue };
            let Some(written) = owner.written.as_ref().and_then(|w| w.get(key)) else { continue };
            for (region, replica) in world.regions.iter().enumerate() {
                let held = replica.get(key).expect("delivered");
                let overridden_later = world
                    .overrides
                    .get(&(region, key.to_owned()))
                    .is_some_and(|stamp| *stamp > written.stamp);
                if !overridden_later {
                    prop_assert_eq!(held, written, "region {} key {}", region, key);
                }
            }
        }
    }
}
