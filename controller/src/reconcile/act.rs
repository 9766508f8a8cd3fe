//! Carrying out the engine's actions. Each is idempotent on the region side, and all run
//! before the status is written, so a crash in between repeats harmless work rather than
//! losing it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use kube::ResourceExt;

use super::collect::collected_through;
use super::events::EventPublisher;
use super::observe::RegionReads;
use super::{Context, HubError};
use crate::api::{ConfigRollout, Delivery, Region};
use crate::crdt::{Stamp, WriterId};
use crate::engine::collection::Keeping;
use crate::engine::event_fold::{self, RolloutEvent};
use crate::engine::{ActOutcome, Action, EventType, FailedRegion, Grant};
use crate::regions::materialize::{Compaction, KeptKeys};
use crate::regions::publication::RevisionState;
use crate::regions::store::{self, DriftHandling, Snapshot, TargetObject};
use crate::regions::{RegionError, consumers};
use crate::telemetry::metrics::WriteKind;

/// What acting did: writes for the metrics, and what the engine must hear of it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ActReport {
    /// Writes made in regions (each one the region accepted).
    pub region_writes: u32,
    /// Writes in regions refused as conflicts (the object changed since it was read).
    pub region_conflicts: u32,
    /// What the engine settles the status with.
    pub outcome: ActOutcome,
    /// The Events the engine asked for, published folded once the reconcile's rounds
    /// are over ([`publish_events`]).
    pub events: Vec<RolloutEvent>,
}

impl ActReport {
    /// Counts what `other` (a later round of the same reconcile) did too.
    pub fn add(&mut self, other: &ActReport) {
        self.region_writes = self.region_writes.saturating_add(other.region_writes);
        self.region_conflicts = self.region_conflicts.saturating_add(other.region_conflicts);
        self.outcome
            .failed_regions
            .extend(other.outcome.failed_regions.iter().cloned());
        self.events.extend(other.events.iter().cloned());
    }

    /// Region merges that failed.
    pub fn region_failures(&self) -> u32 {
        u32::try_from(self.outcome.failed_regions.len()).unwrap_or(u32::MAX)
    }
}

/// Everything [`act`] needs besides the actions.
pub struct ActInput<'a> {
    /// The rollout.
    pub rollout: &'a ConfigRollout,
    /// The rollout's writer id.
    pub writer: &'a WriterId,
    /// The desired data, for a revision being declared.
    pub desired: &'a BTreeMap<String, String>,
    /// Stored revisions; a declared one is added.
    pub revisions: &'a mut BTreeMap<String, RevisionState>,
    /// Every Region.
    pub regions: &'a [Region],
    /// What this reconcile's observation read in the regions it merges into: each merge
    /// plans its first attempt from it.
    pub first_reads: Mutex<RegionReads>,
    /// What the rollout's namespace may reach: checked again before every region write.
    pub grant: &'a Grant,
}

impl ActInput<'_> {
    /// What this reconcile's observation read of `region`, to the first merge there.
    fn take_first_read(&self, region: &str) -> Option<Snapshot> {
        self.first_reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(region)
    }
}

/// Carries out `actions` in order, noting in `report` what was done as it goes, so that
/// the writes made before an error are counted too.
pub async fn act(
    ctx: &Context,
    input: ActInput<'_>,
    actions: &[Action],
    report: &mut ActReport,
) -> Result<(), HubError> {
    let rollout = input.rollout;
    let namespace = rollout.namespace().unwrap_or_default();
    let store = ctx.hub_cache.revision_store(ctx.hub.clone(), &namespace);
    let digest_key = ctx.digest_keys.current();
    let keeping = Keeping::of(rollout.status.as_ref(), &digest_key);
    // Keeps named under a key this controller no longer knows: nothing is collected
    // until the collect step works them out again.
    let collected_through = collected_through(rollout).filter(|_| !keeping.is_unknown());
    let kept = |key: &str| keeping.keeps(key);
    let keeping_keys: Option<KeptKeys<'_>> = match keeping {
        Keeping::Keys { .. } => Some(&kept),
        Keeping::Nothing | Keeping::Unknown => None,
    };
    for action in actions {
        match action {
            Action::DeclareRevision {
                name,
                stamp,
                stable,
                ..
            } => {
                if !ctx.fence.permits(rollout, WriteKind::Revision) {
                    return Err(HubError::NotLeader);
                }
                let stamp = parse_stamp(stamp)?;
                let number = revision_number(name);
                let mut previous = latest_before(input.revisions, number).cloned();
                if let (Some(previous), Some(through)) = (&mut previous, &collected_through) {
                    previous.collect_tombstones_keeping(through, &kept);
                }
                let stable = match stable {
                    Some(stable) => Some(input.revisions.get(stable).ok_or_else(|| {
                        HubError::MissingRevision {
                            revision: stable.clone(),
                        }
                    })?),
                    None => None,
                };
                let revision =
                    RevisionState::declare(name, previous.as_ref(), stable, input.desired, stamp);
                store.save(rollout, &revision, number).await?;
                input.revisions.insert(name.clone(), revision);
            }
            Action::Publish {
                region,
                revision,
                step,
            } => {
                let Some(state) = input.revisions.get(revision) else {
                    return Err(HubError::MissingRevision {
                        revision: revision.clone(),
                    });
                };
                let publication = state.publication(*step);
                let compaction = Compaction {
                    through: collected_through.as_ref(),
                    rebase: Some(input.writer),
                    keeping: keeping_keys,
                };
                let result = merge(ctx, &input, report, region, revision, compaction, |_| {
                    Ok(publication.clone())
                })
                .await;
                record(report, region, revision, "publish", result);
            }
            Action::Rollback { region, revision } => {
                let Some(state) = input.revisions.get(revision) else {
                    return Err(HubError::MissingRevision {
                        revision: revision.clone(),
                    });
                };
                let fresh = ctx.fresh_stamp(input.writer);
                let label = format!("{revision}-rollback");
                let compaction = Compaction {
                    through: collected_through.as_ref(),
                    rebase: None,
                    keeping: keeping_keys,
                };
                let result = merge(ctx, &input, report, region, &label, compaction, |replica| {
                    state.rollback(replica, fresh.clone()).map_err(|source| {
                        RegionError::Compensation {
                            reason: source.to_string(),
                        }
                    })
                })
                .await;
                record(report, region, revision, "rollback", result);
            }
            Action::RestartConsumers {
                region,
                revision,
                step,
            } => match restart_consumers(ctx, &input, region, revision, *step).await {
                Ok(restarted) => {
                    report.region_writes += restarted;
                    tracing::info!(region, revision, restarted, "consumers restarted");
                }
                // Not a failed merge: the region holds the revision. The next observation
                // still sees the restart pending and the engine asks again.
                Err(error) => {
                    tracing::warn!(region, revision, %error, "consumer restart failed");
                }
            },
            Action::Event {
                type_,
                reason,
                message,
            } => report.events.push(RolloutEvent {
                type_: *type_,
                reason: reason.clone(),
                message: message.clone(),
            }),
        }
    }
    Ok(())
}

/// Restarts the `Restart` consumers in one region for `revision` at `pass`.
async fn restart_consumers(
    ctx: &Context,
    input: &ActInput<'_>,
    region_name: &str,
    revision: &str,
    pass: crate::api::RevisionStep,
) -> Result<u32, RegionError> {
    let (client, _) = region_client(ctx, input, region_name).await?;
    let marker = consumers::restart_marker(revision, pass);
    let mut restarted = 0;
    for consumer in &input.rollout.spec.consumers {
        if consumer.delivery == Delivery::Restart {
            let target = &input.rollout.spec.target;
            let consumed = consumers::ConsumedTarget {
                namespace: &target.namespace,
                name: &target.name,
            };
            restarted += consumers::restart(&client, consumed, consumer, &marker).await?;
        }
    }
    Ok(restarted)
}

/// The client of a region this rollout is about to write in, and the Region, once the
/// write is known to be within the grant: the engine never asks for more, and this keeps
/// it so.
async fn region_client<'a>(
    ctx: &Context,
    input: &ActInput<'a>,
    region_name: &str,
) -> Result<(kube::Client, &'a Region), RegionError> {
    if !ctx.fence.permits(input.rollout, WriteKind::RegionObject) {
        return Err(RegionError::NotLeader);
    }
    let namespace = &input.rollout.spec.target.namespace;
    if !input.grant.allows_target_namespace(namespace) || !input.grant.allows_region(region_name) {
        return Err(RegionError::OutsideGrant {
            namespace: namespace.clone(),
            region: region_name.to_owned(),
        });
    }
    let region = input
        .regions
        .iter()
        .find(|region| region.name_any() == region_name)
        .ok_or_else(|| RegionError::UnknownRegion {
            region: region_name.to_owned(),
        })?;
    let client = ctx
        .region_clients
        .client(region)
        .await
        .map_err(|source| RegionError::Client {
            reason: source.to_string(),
        })?;
    Ok((client, region))
}

/// Merges one delta into one region, counting in `report` the writes it refused as
/// conflicts (those it accepted are counted by [`record`], from the outcome).
async fn merge(
    ctx: &Context,
    input: &ActInput<'_>,
    report: &mut ActReport,
    region_name: &str,
    revision: &str,
    compaction: Compaction<'_>,
    delta_for: impl Fn(&crate::crdt::Replica) -> Result<crate::crdt::Delta, RegionError>,
) -> Result<store::Materialized, RegionError> {
    let (client, region) = region_client(ctx, input, region_name).await?;
    let objects = ctx
        .region_clients
        .objects(region, &input.rollout.spec.target.namespace);
    let conflicts = AtomicU32::new(0);
    let rollout_ref = format!(
        "{}/{}",
        input.rollout.namespace().unwrap_or_default(),
        input.rollout.name_any()
    );
    let target = TargetObject {
        namespace: &input.rollout.spec.target.namespace,
        name: &input.rollout.spec.target.name,
        rollout: Some(&rollout_ref),
        revision: Some(revision),
        adopt: input.rollout.spec.target.adopt && input.grant.adoption,
        may_write: &|| ctx.fence.permits(input.rollout, WriteKind::RegionObject),
        compaction,
        on_conflict: &|| {
            conflicts.fetch_add(1, Ordering::Relaxed);
        },
        objects: Some(&objects),
    };
    let adopt_stamp = ctx.fresh_stamp(&ctx.adopt_writer);
    let drift = DriftHandling {
        policy: &input.rollout.spec.drift_policy,
        adopt_stamp: Some(&adopt_stamp),
        owner: Some(input.writer),
    };
    let first_read = input.take_first_read(region_name);
    let result = store::materialize(
        &client,
        &ctx.digest_keys.current(),
        &target,
        drift,
        first_read,
        delta_for,
    )
    .await;
    report.region_conflicts = report
        .region_conflicts
        .saturating_add(conflicts.load(Ordering::Relaxed));
    result
}

fn record(
    report: &mut ActReport,
    region: &str,
    revision: &str,
    operation: &str,
    result: Result<store::Materialized, RegionError>,
) {
    match result {
        Ok(materialized) => {
            report.region_writes += materialized.writes;
            tracing::info!(
                region,
                revision,
                operation,
                writes = materialized.writes,
                digest = %materialized.digest,
                "region merged"
            );
        }
        Err(error) => {
            tracing::warn!(region, revision, operation, %error, "region merge failed");
            report.outcome.failed_regions.push(FailedRegion {
                region: region.to_owned(),
                error: format!("{operation}: {error}"),
            });
        }
    }
}

/// Publishes the Events of one reconcile, in order, each run of progress Events folded
/// ([`event_fold`]): most revisions take two Events rather than one per transition.
pub(super) async fn publish_events(
    ctx: &Context,
    rollout: &ConfigRollout,
    events: Vec<RolloutEvent>,
) {
    for event in event_fold::fold(events) {
        if ctx.fence.permits(rollout, WriteKind::Event) {
            publish_event(
                &ctx.events,
                rollout,
                event.type_,
                &event.reason,
                &event.message,
            )
            .await;
        }
    }
}

pub(super) async fn publish_event(
    events: &EventPublisher,
    rollout: &ConfigRollout,
    type_: EventType,
    reason: &str,
    message: &str,
) {
    let reference = kube::Resource::object_ref(rollout, &());
    let publish = events.publish(&reference, type_, reason, message);
    if let Err(error) =
        crate::api_call::timed("record event", super::HUB_CALL_TIMEOUT, publish).await
    {
        tracing::warn!(reason, %error, "event not recorded");
    }
}

/// The most recent stored revision numbered below `number`: the one a new revision
/// follows. (A revision of the same number may be stored already, from a declaration the
/// status never recorded; it is replaced, not built upon.)
pub fn latest_before(
    revisions: &BTreeMap<String, RevisionState>,
    number: i64,
) -> Option<&RevisionState> {
    revisions
        .values()
        .filter(|revision| revision_number(&revision.name) < number)
        .max_by_key(|revision| revision_number(&revision.name))
}

/// The number of `r<N>`, 0 if the name has another form.
pub fn revision_number(name: &str) -> i64 {
    name.strip_prefix('r')
        .and_then(|number| number.parse().ok())
        .unwrap_or(0)
}

fn parse_stamp(text: &str) -> Result<Stamp, HubError> {
    text.parse::<Stamp>().map_err(|source| HubError::Encoding {
        what: "fresh stamp",
        reason: source.to_string(),
    })
}
