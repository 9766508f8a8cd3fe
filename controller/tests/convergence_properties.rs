//! Convergence of a shared target under any interleaving (issue 43): two rollouts writing
//! disjoint keys of one ConfigMap in three regions, declaring on two processes whose clocks
//! differ by up to the drift bound (shards, or a failover), publishing and collecting in
//! any order, with region namespaces saved and restored from those copies at any time, and
//! people overriding keys in regions.
//!
//! Each step runs the code the controller runs: revisions are `RevisionState`s declared
//! through the rollout's recorded collection point, a publication is
//! `regions::materialize::plan` with the rollout's point and its rebase, the point comes
//! from `crdt::collection_point` over the other writer's progress as its (sticky) status
//! marks say (a writer that has delivered nothing to some region does not hold it back;
//! the tombstones of the keys it holds live are kept instead, as the collect step does),
//! and "the region holds the revision" is `publication::evidence` plus the
//! restored-key check the region read makes.
//!
//! After every step: no region reads as holding a rollout's current revision unless its
//! target holds exactly that revision's keys and values (so no rollout can be Complete
//! while a region lacks one of its keys or serves one it removed). At the end, once each
//! rollout has published to every region: every region holds exactly both rollouts' keys
//! (a key a person overrode in a region is theirs there, and not compared).

#[path = "../../core/tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};

use configrollout::api::DriftPolicy;
use configrollout::crdt::{self, DigestKey, Replica, Stamp, WriterId, WriterProgress};
use configrollout::regions::materialize::{
    Compaction, CompanionView, MergeRequest, Plan, TargetView, plan,
};
use configrollout::regions::publication::{RevisionState, evidence, restored_removed_keys};
use proptest::prelude::*;
use support::proptest_cases;

const REGIONS: usize = 3;
const KEYS: [[&str; 3]; 2] = [["a1", "a2", "a3"], ["b1", "b2", "b3"]];
const VALUES: [&str; 3] = ["0", "1", "2"];
/// The clock drift the controller tolerates (`MAX_CLOCK_DRIFT`), in ms.
const MAX_DRIFT_MS: u64 = 60_000;

#[derive(Debug, Clone)]
enum Step {
    /// Time passes.
    Tick(u64),
    /// Rollout `rollout` changes one key (or removes it) and, if that changes what it
    /// declares, declares a revision stamped by process `clock`, which first observed the
    /// regions (as the region read does) or did not get to (a read before another
    /// process's collection reached them).
    Declare {
        rollout: usize,
        clock: usize,
        key: usize,
        value: Option<usize>,
        observe: bool,
    },
    /// The rollout publishes its current revision to a region, and records in its status
    /// whether the region holds it.
    Publish { rollout: usize, region: usize },
    /// The rollout reads a region and records whether it holds its current revision.
    Observe { rollout: usize, region: usize },
    /// The rollout, Complete (every region reads as holding its current revision),
    /// records a collection point.
    Collect { rollout: usize },
    /// A person overrides one of a rollout's keys in a region (sets or removes it), on a
    /// laptop clock up to the drift bound behind, stamped above what the region holds as
    /// `kubectl configrollout override` does.
    Override {
        rollout: usize,
        region: usize,
        key: usize,
        value: Option<usize>,
        behind: u64,
    },
    /// Both rollouts publish to a region at once: `first` plans from what the region holds
    /// and writes its companion; `1 - first` plans from the original target and the
    /// companion `first` wrote, and writes its companion; `first`'s target write lands
    /// (its version is unchanged), the other's conflicts. The other then plans again from
    /// what the region holds and writes in full, or its process stops there.
    Race {
        first: usize,
        region: usize,
        retried: bool,
    },
    /// A copy of a region namespace is saved (a backup).
    Save { region: usize },
    /// A region namespace is replaced by one of its saved copies (a restore).
    Restore { region: usize, copy: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (1..2_000_u64).prop_map(Step::Tick),
        3 => (0..2_usize, 0..2_usize, 0..3_usize, prop::option::of(0..3_usize), any::<bool>())
            .prop_map(|(rollout, clock, key, value, observe)| Step::Declare {
                rollout,
                clock,
                key,
                value,
                observe,
            }),
        5 => (0..2_usize, 0..REGIONS).prop_map(|(rollout, region)| Step::Publish { rollout, region }),
        2 => (0..2_usize, 0..REGIONS).prop_map(|(rollout, region)| Step::Observe { rollout, region }),
        3 => (0..2_usize).prop_map(|rollout| Step::Collect { rollout }),
        1 => (0..2_usize, 0..REGIONS, 0..3_usize, prop::option::of(0..3_usize), 0..=MAX_DRIFT_MS)
            .prop_map(|(rollout, region, key, value, behind)| Step::Override {
                rollout,
                region,
                key,
                value,
                behind,
            }),
        2 => (0..2_usize, 0..REGIONS, any::<bool>())
            .prop_map(|(first, region, retried)| Step::Race { first, region, retried }),
        1 => (0..REGIONS).prop_map(|region| Step::Save { region }),
        1 => (0..REGIONS, 0..8_usize).prop_map(|(region, copy)| Step::Restore { region, copy }),
    ]
}

#[derive(Debug, Clone, Default)]
struct RegionObjects {
    target: Option<TargetView>,
    companion: Option<CompanionView>,
}

impl RegionObjects {
    fn replica(&self) -> Replica {
        self.companion
            .as_ref()
            .and_then(|c| c.state.as_deref())
            .map(|text| crdt::decode(text).expect("the companion decodes"))
            .unwrap_or_default()
    }

    fn data(&self) -> BTreeMap<String, String> {
        self.target
            .as_ref()
            .map(|t| t.data.clone())
            .unwrap_or_default()
    }
}

/// The objects a region holds once `request` is planned against `objects` and written in
/// full, as the controller's store does.
fn merged(key: &DigestKey, objects: &RegionObjects, request: MergeRequest<'_>) -> RegionObjects {
    let planned = plan(
        key,
        objects.target.as_ref(),
        objects.companion.as_ref(),
        request,
    )
    .expect("a merge plans");
    written(&planned)
}

/// The objects a region holds once `planned` is written in full.
fn written(planned: &Plan) -> RegionObjects {
    RegionObjects {
        target: Some(TargetView {
            data: planned.target_data.clone(),
            digest: Some(planned.digest.clone()),
        }),
        companion: Some(CompanionView {
            state: Some(planned.encoded_state.clone()),
            digest: Some(planned.digest.clone()),
            mac: None,
        }),
    }
}

struct Rollout {
    writer: WriterId,
    desired: BTreeMap<String, String>,
    revisions: Vec<RevisionState>,
    /// Status: the revision it showed last, and per region the revision its sticky
    /// materialised mark names (cleared never, as marks are).
    status_revision: Option<usize>,
    marks: [Option<usize>; REGIONS],
    collected_through: Option<Stamp>,
    /// Keys whose tombstones the collection keeps, as `status.collectionKeeps` names them.
    keeps: BTreeSet<String>,
}

impl Rollout {
    fn current(&self) -> Option<&RevisionState> {
        self.revisions.last()
    }

    /// Its progress as another writer reads it from its status.
    fn progress(&self) -> WriterProgress {
        let Some(shown) = self.status_revision else {
            return WriterProgress::CaughtUp;
        };
        if self.marks.iter().all(|mark| *mark == Some(shown)) {
            return WriterProgress::CaughtUp;
        }
        let held = self
            .marks
            .iter()
            .map(|mark| mark.map(|index| self.revisions[index].stamp.clone()))
            .collect::<Option<Vec<_>>>()
            .and_then(|stamps| stamps.into_iter().min());
        WriterProgress::Behind { held }
    }
}

struct World {
    key: DigestKey,
    /// Keys a person has overridden in a region (region, key), ever: what the region
    /// holds of those is the person's, not the rollout's, so the checks skip them.
    overridden: std::collections::BTreeSet<(usize, String)>,
    rollouts: Vec<Rollout>,
    regions: Vec<RegionObjects>,
    copies: Vec<Vec<RegionObjects>>,
    now: u64,
    /// How far each process's clock is behind the true time.
    behind: [u64; 2],
    /// The greatest stamp each process's clock has issued or observed.
    seen: [Option<Stamp>; 2],
}

impl World {
    fn tick_stamp(&mut self, clock: usize, writer: &WriterId, floor: Option<&Stamp>) -> Stamp {
        let wall = self.now.saturating_sub(self.behind[clock]);
        let latest = [self.seen[clock].as_ref(), floor]
            .into_iter()
            .flatten()
            .max();
        let stamp = match latest {
            Some(latest) if latest.wall_ms >= wall => {
                Stamp::new(latest.wall_ms, latest.logical + 1, writer.clone())
            }
            _ => Stamp::new(wall, 0, writer.clone()),
        };
        self.seen[clock] = Some(stamp.clone());
        stamp
    }

    fn observe_regions(&mut self, clock: usize) {
        for region in &self.regions {
            let replica = region.replica();
            let stamps = replica
                .iter()
                .map(|(_, entry)| &entry.stamp)
                .chain(replica.horizon())
                .chain(replica.frontiers().values());
            for stamp in stamps {
                if self.seen[clock].as_ref().is_none_or(|seen| stamp > seen) {
                    self.seen[clock] = Some(stamp.clone());
                }
            }
        }
    }

    fn declare(
        &mut self,
        index: usize,
        clock: usize,
        key: usize,
        value: Option<usize>,
        observe: bool,
    ) {
        let key = KEYS[index][key].to_owned();
        let rollout = &mut self.rollouts[index];
        match value {
            Some(value) => rollout.desired.insert(key, VALUES[value].to_owned()),
            None => rollout.desired.remove(&key),
        };
        if rollout
            .current()
            .is_some_and(|current| current.declares(&rollout.desired))
        {
            return;
        }
        if observe {
            self.observe_regions(clock);
        }
        let rollout = &self.rollouts[index];
        let writer = rollout.writer.clone();
        let previous_stamp = rollout.current().map(|current| current.stamp.clone());
        let stamp = self.tick_stamp(clock, &writer, previous_stamp.as_ref());
        let rollout = &mut self.rollouts[index];
        let mut base = rollout.current().cloned();
        if let (Some(base), Some(through)) = (&mut base, &rollout.collected_through) {
            let keeps = rollout.keeps.clone();
            base.collect_tombstones_keeping(through, &move |key| keeps.contains(key));
        }
        let name = format!("r{}", rollout.revisions.len() + 1);
        let revision = RevisionState::declare(&name, base.as_ref(), None, &rollout.desired, stamp);
        rollout.revisions.push(revision);
    }

    /// Whether `region` reads as holding rollout `index`'s current revision.
    fn holds(&self, index: usize, region: usize) -> bool {
        let rollout = &self.rollouts[index];
        let Some(current) = rollout.current() else {
            return false;
        };
        let objects = &self.regions[region];
        let replica = objects.replica();
        // As the region read does: a target whose digest is not its companion's has not
        // caught up.
        let caught_up = objects
            .target
            .as_ref()
            .and_then(|target| target.digest.as_deref())
            .is_some_and(|digest| crdt::digest_matches(&self.key, &replica, digest));
        caught_up
            && evidence(&replica, current, false, u64::MAX)
                .applied
                .is_some()
            && restored_removed_keys(&replica, current, rollout.collected_through.as_ref()) == 0
    }

    fn record(&mut self, index: usize, region: usize) {
        let holds = self.holds(index, region);
        let rollout = &mut self.rollouts[index];
        let Some(current) = rollout.revisions.len().checked_sub(1) else {
            return;
        };
        rollout.status_revision = Some(current);
        if holds {
            rollout.marks[region] = Some(current);
        }
    }

    /// Rollout `index`'s plan for its current revision against `objects`, if it has one.
    fn plan_publication(&self, index: usize, objects: &RegionObjects) -> Option<Plan> {
        let rollout = &self.rollouts[index];
        let delta = rollout
            .current()?
            .publication(configrollout::api::RevisionStep::Single);
        let kept = |key: &str| rollout.keeps.contains(key);
        let request = MergeRequest {
            delta: &delta,
            drift_policy: &DriftPolicy::Report,
            adopt_stamp: None,
            compaction: Compaction {
                through: rollout.collected_through.as_ref(),
                rebase: Some(&rollout.writer),
                keeping: Some(&kept),
            },
            owner: Some(&rollout.writer),
        };
        Some(
            plan(
                &self.key,
                objects.target.as_ref(),
                objects.companion.as_ref(),
                request,
            )
            .expect("a merge plans"),
        )
    }

    fn publish(&mut self, index: usize, region: usize) {
        let Some(planned) = self.plan_publication(index, &self.regions[region]) else {
            return;
        };
        self.regions[region] = written(&planned);
        self.record(index, region);
    }

    /// See [`Step::Race`].
    fn race(&mut self, first: usize, region: usize, retried: bool) {
        let second = 1 - first;
        let before = self.regions[region].clone();
        let Some(first_plan) = self.plan_publication(first, &before) else {
            return;
        };
        let after_first = written(&first_plan);
        let between = RegionObjects {
            target: before.target.clone(),
            companion: after_first.companion.clone(),
        };
        let Some(second_plan) = self.plan_publication(second, &between) else {
            self.regions[region] = after_first;
            return;
        };
        self.regions[region] = RegionObjects {
            target: after_first.target,
            companion: written(&second_plan).companion,
        };
        self.record(first, region);
        if retried {
            self.publish(second, region);
        }
    }

    fn collect(&mut self, index: usize) {
        if !(0..REGIONS).all(|region| self.holds(index, region)) {
            return;
        }
        // As the collect step does: a writer that has delivered nothing to some region
        // does not hold the point back; the tombstones of every key it holds live in any
        // of its revisions are kept instead.
        let other = &self.rollouts[1 - index];
        let (others, keeps) = match other.progress() {
            WriterProgress::Behind { held: None } => (
                Vec::new(),
                other
                    .revisions
                    .iter()
                    .flat_map(|revision| revision.state.live_iter().map(|(key, _)| key.to_owned()))
                    .collect(),
            ),
            progress => (vec![progress], BTreeSet::new()),
        };
        let rollout = &mut self.rollouts[index];
        let Some(current) = rollout.current() else {
            return;
        };
        let Some(point) = crdt::collection_point(&current.stamp, &others) else {
            return;
        };
        let forward = rollout
            .collected_through
            .as_ref()
            .is_none_or(|recorded| *recorded < point);
        let refreshed = rollout.collected_through.as_ref() == Some(&point);
        if forward || refreshed {
            rollout.collected_through = Some(point);
            rollout.keeps = keeps;
        }
    }

    fn run(&mut self, step: &Step) {
        match *step {
            Step::Tick(ms) => self.now += ms,
            Step::Declare {
                rollout,
                clock,
                key,
                value,
                observe,
            } => {
                self.declare(rollout, clock, key, value, observe);
            }
            Step::Publish { rollout, region } => self.publish(rollout, region),
            Step::Observe { rollout, region } => self.record(rollout, region),
            Step::Collect { rollout } => self.collect(rollout),
            Step::Override {
                rollout,
                region,
                key,
                value,
                behind,
            } => {
                let key = KEYS[rollout][key];
                let person = WriterId::override_by("alice").unwrap();
                let replica = self.regions[region].replica();
                let stamp = crdt::stamp_above(&replica, self.now.saturating_sub(behind), person);
                let delta = crdt::override_delta(stamp, [(key, value.map(|v| VALUES[v]))])
                    .expect("an override delta");
                let request = MergeRequest {
                    delta: &delta,
                    drift_policy: &DriftPolicy::Report,
                    adopt_stamp: None,
                    compaction: Compaction::default(),
                    owner: None,
                };
                let next = merged(&self.key, &self.regions[region], request);
                self.regions[region] = next;
                self.overridden.insert((region, key.to_owned()));
            }
            Step::Race {
                first,
                region,
                retried,
            } => self.race(first, region, retried),
            Step::Save { region } => {
                let copy = self.regions[region].clone();
                self.copies[region].push(copy);
            }
            Step::Restore { region, copy } => {
                let copies = &self.copies[region];
                if !copies.is_empty() {
                    self.regions[region] = copies[copy % copies.len()].clone();
                }
            }
        }
    }

    /// The target's keys of rollout `index` in `region`, but those a person overrode there.
    fn keys_of(&self, index: usize, region: usize) -> BTreeMap<String, String> {
        self.regions[region]
            .data()
            .into_iter()
            .filter(|(key, _)| KEYS[index].contains(&key.as_str()))
            .filter(|(key, _)| !self.overridden.contains(&(region, key.clone())))
            .collect()
    }

    /// What rollout `index`'s current revision declares, but the keys a person overrode
    /// in `region`.
    fn wanted(&self, index: usize, region: usize) -> BTreeMap<String, String> {
        self.rollouts[index]
            .current()
            .map(RevisionState::desired)
            .unwrap_or_default()
            .into_iter()
            .filter(|(key, _)| !self.overridden.contains(&(region, key.clone())))
            .collect()
    }

    fn check_no_false_holding(&self, after: &Step) -> Result<(), TestCaseError> {
        for index in 0..2 {
            let Some(current) = self.rollouts[index].current() else {
                continue;
            };
            for region in 0..REGIONS {
                if self.holds(index, region) {
                    prop_assert_eq!(
                        self.keys_of(index, region),
                        self.wanted(index, region),
                        "after {:?}: region {} reads as holding {} of rollout {} but its \
                         target differs",
                        after,
                        region,
                        current.name.clone(),
                        index
                    );
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(300)))]

    #[test]
    fn every_region_converges_and_none_reads_as_holding_what_it_lacks(
        behind in 0..=MAX_DRIFT_MS,
        steps in prop::collection::vec(step(), 0..80),
    ) {
        let mut world = World {
            key: DigestKey::new(b"0123456789abcdef-convergence").unwrap(),
            overridden: Default::default(),
            rollouts: ["a", "b"]
                .into_iter()
                .map(|name| Rollout {
                    writer: WriterId::rollout("team", name).unwrap(),
                    desired: BTreeMap::new(),
                    revisions: Vec::new(),
                    status_revision: None,
                    marks: [None; REGIONS],
                    collected_through: None,
                    keeps: BTreeSet::new(),
                })
                .collect(),
            regions: vec![RegionObjects::default(); REGIONS],
            copies: vec![Vec::new(); REGIONS],
            now: 1_000_000,
            behind: [0, behind],
            seen: [None, None],
        };
        for step in &steps {
            world.run(step);
            world.check_no_false_holding(step)?;
        }
        // Every rollout publishes to every region until it holds its revision; twice
        // round, so that a publication that rebased a region is followed by the other's.
        for _ in 0..2 {
            for index in 0..2 {
                for region in 0..REGIONS {
                    world.publish(index, region);
                }
            }
        }
        for region in 0..REGIONS {
            for index in 0..2 {
                let want = world.wanted(index, region);
                prop_assert_eq!(
                    world.keys_of(index, region),
                    want,
                    "region {} after every rollout published there, rollout {}",
                    region,
                    index
                );
                if world.rollouts[index].current().is_some() {
                    prop_assert!(world.holds(index, region));
                }
            }
        }
    }
}
