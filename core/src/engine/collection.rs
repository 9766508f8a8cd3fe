//! When a target's tombstones may be collected, read from status: pure.
//!
//! A rollout that every region it targets has caught up with proposes the stamp of its
//! latest revision ([`proposal`]); the reconcile then reads the other rollouts writing
//! the same target, each as a [`WriterProgress`] ([`progress_of`]), and
//! [`crate::crdt::collection_point`] lowers the proposal to what they have delivered. The
//! result is recorded in `status.collectedThrough` ([`record`]) and acted on at the next
//! write to each region (see [`crate::crdt::compaction`]).

use std::collections::BTreeSet;

use crate::crdt::{DigestKey, Stamp, WriterProgress};
use configrollout_api::{
    CollectionKeeps, ConfigRolloutStatus, MAX_COLLECTION_KEEPS, RevisionStep, RolloutPhase,
};

use super::Observations;

/// The stamp this rollout proposes to collect through: its current revision's, when the
/// rollout is Complete, this reconcile saw every region of it holding that revision in
/// full, there is a tombstone to collect (in its revision state or a region's replica),
/// and the point would move forward. `None` otherwise.
///
/// Without a tombstone there is nothing to collect, so no point is proposed: a proposal
/// costs a list of the target's writers, which the apiserver answers by scanning every
/// rollout of the cluster.
pub fn proposal(status: &ConfigRolloutStatus, observations: &Observations) -> Option<Stamp> {
    if status.phase != Some(RolloutPhase::Complete) || status.regions.is_empty() {
        return None;
    }
    let anything_to_collect = observations.revision_tombstones > 0
        || observations
            .regions
            .iter()
            .any(|region| region.tombstones > 0);
    if !anything_to_collect {
        return None;
    }
    let current = status.revision.as_deref()?;
    let every_region_holds_it = status.regions.iter().all(|region| {
        observations
            .regions
            .iter()
            .find(|seen| seen.name == region.name)
            .is_some_and(|seen| {
                seen.reachable
                    && seen.applied.as_ref().is_some_and(|applied| {
                        applied.revision == current && applied.step != RevisionStep::Expand
                    })
            })
    });
    if !every_region_holds_it {
        return None;
    }
    let stamp = revision_stamp(status, current)?;
    let recorded = recorded(status);
    // At the recorded point while tombstones are kept for a writer still on its way:
    // proposed again, so they are collected once it has arrived.
    let keeping = status.collection_keeps.is_some();
    recorded
        .is_none_or(|recorded| recorded < stamp || (recorded == stamp && keeping))
        .then_some(stamp)
}

/// How far another rollout writing the same target has got, from its status. Its
/// materialised marks say which revision each region holds in full; a revision's
/// publication is the rollout's whole state, so holding it means holding every write of
/// that rollout up to its stamp.
pub fn progress_of(status: Option<&ConfigRolloutStatus>) -> WriterProgress {
    // Not reconciled yet: whatever it declares is stamped after now.
    let Some(status) = status else {
        return WriterProgress::CaughtUp;
    };
    let Some(current) = status.revision.as_deref() else {
        return WriterProgress::CaughtUp;
    };
    let caught_up = !status.regions.is_empty()
        && status
            .regions
            .iter()
            .all(|region| held_revision(region) == Some(current));
    if caught_up {
        return WriterProgress::CaughtUp;
    }
    let held = status
        .regions
        .iter()
        .map(|region| revision_stamp(status, held_revision(region)?))
        .collect::<Option<Vec<Stamp>>>()
        .and_then(|stamps| stamps.into_iter().min());
    WriterProgress::Behind { held }
}

/// The revision a region holds in full according to the status: its materialised mark,
/// unless the mark is only the expand step of a revision.
fn held_revision(region: &configrollout_api::RegionRolloutStatus) -> Option<&str> {
    region
        .materialized
        .as_ref()
        .filter(|mark| mark.step != Some(RevisionStep::Expand))
        .map(|mark| mark.revision.as_str())
}

/// Why another writer of the target holds every collection back, when it does: the
/// first region of its status that holds none of its revisions in full (never published
/// there, or only its expand step), with the revision it waits for. Such a writer stops
/// tombstones of every writer of the target from being collected until it gets there, so
/// the rollout that proposes a point says who it waits for.
pub fn holding_back(status: Option<&ConfigRolloutStatus>) -> Option<String> {
    let WriterProgress::Behind { held: None } = progress_of(status) else {
        return None;
    };
    let status = status?;
    let current = status.revision.as_deref().unwrap_or("its first revision");
    let region = status.regions.iter().find(|region| {
        held_revision(region)
            .and_then(|revision| revision_stamp(status, revision))
            .is_none()
    });
    Some(match region {
        Some(region) => format!(
            "region {} holds none of its revisions yet ({current})",
            region.name
        ),
        None => format!("it has not published {current} anywhere yet"),
    })
}

/// Records `point` as the target's stable point, with the tombstones it keeps
/// (`keeps`, worked out with it), never moving the point back. At the point already
/// recorded, the keeps are replaced: they were worked out for the whole range up to it,
/// so the newer ones are as safe as the older. Returns whether the status changed.
pub fn record(
    status: &mut ConfigRolloutStatus,
    point: &Stamp,
    keeps: Option<CollectionKeeps>,
) -> bool {
    match recorded(status) {
        Some(recorded) if recorded > *point => return false,
        Some(recorded) if recorded == *point && status.collection_keeps == keeps => {
            return false;
        }
        _ => {}
    }
    status.collected_through = Some(point.to_string());
    status.collection_keeps = keeps;
    true
}

/// The keeps for `live_keys` (the keys writers still on their way hold live), named by
/// digests under `key`; `None` when there are none. `Err` with their number when there
/// are more than a status may name ([`MAX_COLLECTION_KEEPS`]).
pub fn keeps_for<'k>(
    key: &DigestKey,
    live_keys: impl IntoIterator<Item = &'k str>,
) -> Result<Option<CollectionKeeps>, usize> {
    let keys: BTreeSet<String> = live_keys
        .into_iter()
        .map(|name| key.key_name_digest(name))
        .collect();
    if u64::try_from(keys.len()).map_or(true, |len| len > MAX_COLLECTION_KEEPS) {
        return Err(keys.len());
    }
    Ok((!keys.is_empty()).then(|| CollectionKeeps {
        key_id: key.id(),
        keys: keys.into_iter().collect(),
    }))
}

/// Which tombstones a collection through the recorded point keeps.
pub enum Keeping<'a> {
    /// None: every tombstone at or below the point goes.
    Nothing,
    /// Those of the keys named.
    Keys {
        /// The keeps recorded.
        keeps: &'a CollectionKeeps,
        /// The key they are named under.
        key: &'a DigestKey,
    },
    /// The keeps are named under a key this controller no longer knows (two rotations
    /// since): nothing may be collected until they are worked out again.
    Unknown,
}

impl<'a> Keeping<'a> {
    /// What `status` records, read with `key`.
    pub fn of(status: Option<&'a ConfigRolloutStatus>, key: &'a DigestKey) -> Self {
        match status.and_then(|status| status.collection_keeps.as_ref()) {
            None => Self::Nothing,
            Some(keeps) if key.knows_id(&keeps.key_id) => Self::Keys { keeps, key },
            Some(_) => Self::Unknown,
        }
    }

    /// Whether the tombstone of `name` is kept.
    pub fn keeps(&self, name: &str) -> bool {
        match self {
            Self::Nothing => false,
            Self::Keys { keeps, key } => key
                .key_name_digest_under(&keeps.key_id, name)
                .is_some_and(|digest| keeps.keys.binary_search(&digest).is_ok()),
            Self::Unknown => true,
        }
    }

    /// Whether nothing may be collected at all.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Self::Unknown)
    }
}

/// The stable point already recorded, if it parses.
fn recorded(status: &ConfigRolloutStatus) -> Option<Stamp> {
    status.collected_through.as_deref()?.parse().ok()
}

/// The stamp a revision was declared with, from the history.
fn revision_stamp(status: &ConfigRolloutStatus, revision: &str) -> Option<Stamp> {
    status.record(revision)?.stamp.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdt::WriterId;
    use crate::engine::{AppliedRevision, RegionObservation};
    use configrollout_api::{LifecycleMark, RegionRolloutStatus, RevisionRecord};

    fn stamp(wall_ms: u64) -> Stamp {
        Stamp::new(wall_ms, 0, WriterId::rollout("team", "limits").unwrap())
    }

    fn mark(revision: &str, step: RevisionStep) -> LifecycleMark {
        LifecycleMark {
            revision: revision.to_owned(),
            step: Some(step),
            digest: None,
            at: crate::engine::clock::to_time(chrono::Utc::now()),
        }
    }

    fn status(
        phase: RolloutPhase,
        current: &str,
        marks: &[(&str, Option<LifecycleMark>)],
    ) -> ConfigRolloutStatus {
        ConfigRolloutStatus {
            phase: Some(phase),
            revision: Some(current.to_owned()),
            regions: marks
                .iter()
                .map(|(name, mark)| RegionRolloutStatus {
                    name: (*name).to_owned(),
                    materialized: mark.clone(),
                    ..Default::default()
                })
                .collect(),
            history: [("r1", 10), ("r2", 20), ("r3", 30)]
                .into_iter()
                .map(|(name, wall)| RevisionRecord {
                    name: name.to_owned(),
                    digest: None,
                    declared_at: crate::engine::clock::to_time(chrono::Utc::now()),
                    stamp: stamp(wall).to_string(),
                    keys_set: 0,
                    keys_removed: 0,
                    outcome: None,
                    authors: Vec::new(),
                    authors_unknown: None,
                    schemas: Vec::new(),
                    validated_by: Vec::new(),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// A region holding one tombstone: there is something to collect.
    fn seen(name: &str, applied: Option<(&str, RevisionStep)>) -> RegionObservation {
        RegionObservation {
            name: name.to_owned(),
            reachable: true,
            tombstones: 1,
            applied: applied.map(|(revision, step)| AppliedRevision {
                revision: revision.to_owned(),
                step,
                digest: String::new(),
            }),
            ..RegionObservation::default()
        }
    }

    fn observations(regions: Vec<RegionObservation>) -> Observations {
        Observations {
            regions,
            ..Observations::default()
        }
    }

    #[test]
    fn a_complete_rollout_every_region_holds_proposes_its_revision_once() {
        let mut status = status(
            RolloutPhase::Complete,
            "r2",
            &[("eu-1", None), ("us-1", None)],
        );
        let all = observations(vec![
            seen("eu-1", Some(("r2", RevisionStep::Single))),
            seen("us-1", Some(("r2", RevisionStep::Contract))),
        ]);
        assert_eq!(proposal(&status, &all), Some(stamp(20)));
        assert!(record(&mut status, &stamp(20), None));
        assert_eq!(proposal(&status, &all), None, "nothing new to propose");
        assert!(!record(&mut status, &stamp(10), None), "never moves back");
        assert_eq!(status.collected_through, Some(stamp(20).to_string()));
    }

    #[test]
    fn a_point_that_keeps_tombstones_is_proposed_again_until_they_may_go() {
        let mut status = status(RolloutPhase::Complete, "r2", &[("eu-1", None)]);
        let all = observations(vec![seen("eu-1", Some(("r2", RevisionStep::Single)))]);
        let key = DigestKey::new(b"0123456789abcdef-collection").unwrap();
        let keeps = keeps_for(&key, ["flag"]).unwrap();
        assert!(record(&mut status, &stamp(20), keeps.clone()));
        assert_eq!(proposal(&status, &all), Some(stamp(20)), "asked again");
        assert!(!record(&mut status, &stamp(20), keeps), "the same keeps");
        // The writer on its way arrived: nothing is kept any more.
        assert!(record(&mut status, &stamp(20), None));
        assert_eq!(status.collection_keeps, None);
        assert_eq!(proposal(&status, &all), None, "nothing new to propose");
    }

    #[test]
    fn keeps_name_keys_by_digest_under_a_key_and_its_predecessor_only() {
        let key = DigestKey::new(b"0123456789abcdef-first").unwrap();
        let keeps = keeps_for(&key, ["flag", "rate", "flag"]).unwrap().unwrap();
        assert_eq!(keeps.keys.len(), 2);
        assert!(keeps.keys.iter().all(|digest| !digest.contains("flag")));
        let status = ConfigRolloutStatus {
            collection_keeps: Some(keeps),
            ..Default::default()
        };
        let keeping = Keeping::of(Some(&status), &key);
        assert!(keeping.keeps("flag") && keeping.keeps("rate"));
        assert!(!keeping.keeps("old"));
        let rotated = DigestKey::new(b"0123456789abcdef-second")
            .unwrap()
            .with_previous(&key);
        let after_rotation = Keeping::of(Some(&status), &rotated);
        assert!(after_rotation.keeps("flag") && !after_rotation.keeps("old"));
        // Two rotations on, the names cannot be checked: everything is kept.
        let twice = DigestKey::new(b"0123456789abcdef-third")
            .unwrap()
            .with_previous(&rotated);
        let unknown = Keeping::of(Some(&status), &twice);
        assert!(unknown.is_unknown() && unknown.keeps("old"));
        assert!(!Keeping::of(None, &key).keeps("flag"));

        assert_eq!(keeps_for(&key, std::iter::empty()), Ok(None));
        let many: Vec<String> = (0..=MAX_COLLECTION_KEEPS)
            .map(|i| format!("k{i}"))
            .collect();
        assert_eq!(
            keeps_for(&key, many.iter().map(String::as_str)),
            Err(many.len())
        );
    }

    #[test]
    fn a_writer_missing_from_a_region_is_named_as_what_collection_waits_for() {
        let stuck = status(
            RolloutPhase::Halted,
            "r2",
            &[
                ("eu-1", Some(mark("r2", RevisionStep::Single))),
                ("us-1", None),
            ],
        );
        assert_eq!(
            holding_back(Some(&stuck)).as_deref(),
            Some("region us-1 holds none of its revisions yet (r2)")
        );
        // Only its expand step in a region is not holding a revision in full.
        let expanding = status(
            RolloutPhase::Progressing,
            "r2",
            &[("eu-1", Some(mark("r2", RevisionStep::Expand)))],
        );
        assert!(holding_back(Some(&expanding)).is_some());
        // Behind but holding something everywhere lowers the point, holds nothing back.
        let behind = status(
            RolloutPhase::Progressing,
            "r2",
            &[
                ("eu-1", Some(mark("r1", RevisionStep::Single))),
                ("us-1", Some(mark("r2", RevisionStep::Single))),
            ],
        );
        assert_eq!(holding_back(Some(&behind)), None);
        let caught_up = status(
            RolloutPhase::Complete,
            "r2",
            &[("eu-1", Some(mark("r2", RevisionStep::Single)))],
        );
        assert_eq!(holding_back(Some(&caught_up)), None);
        assert_eq!(holding_back(None), None);
    }

    #[test]
    fn no_proposal_without_a_tombstone_to_collect() {
        let status = status(
            RolloutPhase::Complete,
            "r2",
            &[("eu-1", None), ("us-1", None)],
        );
        let without_tombstones = |revision_tombstones| {
            let mut seen = observations(vec![
                seen("eu-1", Some(("r2", RevisionStep::Single))),
                seen("us-1", Some(("r2", RevisionStep::Single))),
            ]);
            for region in &mut seen.regions {
                region.tombstones = 0;
            }
            seen.revision_tombstones = revision_tombstones;
            seen
        };
        assert_eq!(proposal(&status, &without_tombstones(0)), None);
        // One left in the rollout's own revision state, none in the regions.
        assert_eq!(proposal(&status, &without_tombstones(2)), Some(stamp(20)));
        // One in a single region's replica (another writer's, say).
        let mut one_region = without_tombstones(0);
        one_region.regions[1].tombstones = 1;
        assert_eq!(proposal(&status, &one_region), Some(stamp(20)));
    }

    #[test]
    fn no_proposal_while_a_region_lacks_the_revision_or_only_has_its_expand_pass() {
        let status = status(
            RolloutPhase::Complete,
            "r2",
            &[("eu-1", None), ("us-1", None)],
        );
        for us in [
            None,
            Some(("r1", RevisionStep::Single)),
            Some(("r2", RevisionStep::Expand)),
        ] {
            let seen = observations(vec![
                seen("eu-1", Some(("r2", RevisionStep::Single))),
                seen("us-1", us),
            ]);
            assert_eq!(proposal(&status, &seen), None, "{us:?}");
        }
        let mut unreachable = seen("us-1", Some(("r2", RevisionStep::Single)));
        unreachable.reachable = false;
        let seen = observations(vec![
            seen("eu-1", Some(("r2", RevisionStep::Single))),
            unreachable,
        ]);
        assert_eq!(proposal(&status, &seen), None);
        let progressing = self::status(RolloutPhase::Progressing, "r2", &[("eu-1", None)]);
        let seen = observations(vec![self::seen("eu-1", Some(("r2", RevisionStep::Single)))]);
        assert_eq!(proposal(&progressing, &seen), None);
    }

    #[test]
    fn another_writer_is_behind_at_the_oldest_revision_its_regions_hold() {
        let caught_up = status(
            RolloutPhase::Complete,
            "r3",
            &[
                ("eu-1", Some(mark("r3", RevisionStep::Single))),
                ("us-1", Some(mark("r3", RevisionStep::Contract))),
            ],
        );
        assert_eq!(progress_of(Some(&caught_up)), WriterProgress::CaughtUp);
        assert_eq!(progress_of(None), WriterProgress::CaughtUp);

        let behind = status(
            RolloutPhase::AwaitingApproval,
            "r3",
            &[
                ("eu-1", Some(mark("r3", RevisionStep::Single))),
                ("us-1", Some(mark("r1", RevisionStep::Single))),
            ],
        );
        assert_eq!(
            progress_of(Some(&behind)),
            WriterProgress::Behind {
                held: Some(stamp(10))
            }
        );

        // A region that holds nothing of it, or only an expand pass: nothing is known.
        for us in [None, Some(mark("r2", RevisionStep::Expand))] {
            let unknown = status(
                RolloutPhase::Progressing,
                "r3",
                &[
                    ("eu-1", Some(mark("r3", RevisionStep::Single))),
                    ("us-1", us),
                ],
            );
            assert_eq!(
                progress_of(Some(&unknown)),
                WriterProgress::Behind { held: None }
            );
        }
    }
}
