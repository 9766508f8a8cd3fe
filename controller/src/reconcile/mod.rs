//! Glue: observe -> the engine decides -> act -> write status. Every API call of the
//! controller's own cluster (the hub) is here; region calls are in [`crate::regions`].

pub mod act;
pub mod admission_policies;
pub mod leader;
pub mod observe;
pub mod region_status;
pub mod revision_store;
pub mod status_writer;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use kube::ResourceExt;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::Recorder;

use crate::api::{ConfigRollout, SampleVerdict};
use crate::api_call::CallError;
use crate::crdt::{DigestKey, Hlc, Stamp, WriterId, desired_digest};
use crate::engine::{self, DesiredRevision, GateSampleObservation, Observations};
use crate::gates::GateProvider;
use crate::regions::clients::RegionClients;
use crate::telemetry::metrics::{Metrics, WriteResult};
use act::ActInput;
use revision_store::RevisionStore;

/// How long to wait before looking again when nothing asked for an earlier time: regions
/// are polled, not watched, so this bounds how late drift is noticed.
pub const IDLE_REQUEUE: Duration = Duration::from_secs(60);
/// How long to wait before retrying a reconcile that failed.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(15);

/// How long one hub API call may take.
pub const HUB_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How far ahead of the controller's clock a stamp may be before it is refused by the
/// clock, and reported when a region holds one.
pub const MAX_CLOCK_DRIFT: Duration = Duration::from_secs(60);

/// Why a reconcile could not finish. Messages carry object names and HTTP reasons, never
/// configuration values.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A call to the hub's API server failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// A stored revision does not decode.
    #[error("stored revision {object} is malformed: {reason}")]
    MalformedRevision {
        /// ControllerRevision name.
        object: String,
        /// What is wrong (no values).
        reason: String,
    },
    /// A revision's state does not fit in one object.
    #[error("revision {revision} does not fit in a ControllerRevision: {reason}")]
    RevisionTooLarge {
        /// Revision name.
        revision: String,
        /// The encoder's error.
        reason: String,
    },
    /// Something could not be serialised.
    #[error("encoding {what}: {reason}")]
    Encoding {
        /// What.
        what: &'static str,
        /// The serializer's error.
        reason: String,
    },
    /// A derived object name exceeds the API server's limit.
    #[error("object name {name:?} is longer than 253 characters")]
    NameTooLong {
        /// The name.
        name: String,
    },
    /// This replica does not hold the Lease: it must not write status.
    #[error("not the leader: status not written")]
    NotLeader,
    /// An action names a revision that is not stored.
    #[error("revision {revision} is not stored in the hub")]
    MissingRevision {
        /// Revision name.
        revision: String,
    },
    /// The rollout's namespace or name cannot form a writer id.
    #[error("rollout cannot form a writer id: {reason}")]
    Writer {
        /// Why.
        reason: String,
    },
}

/// What every reconcile shares.
pub struct Context {
    /// The controller's own cluster.
    pub hub: kube::Client,
    /// Clients of the regions.
    pub region_clients: RegionClients,
    /// Key of every digest.
    pub digest_key: DigestKey,
    /// The hybrid logical clock stamps are minted from (its writer is replaced by the
    /// rollout's or the adopting writer's).
    pub clock: Mutex<Hlc>,
    /// Writer of edits adopted under `driftPolicy: Adopt`.
    pub adopt_writer: WriterId,
    /// Where gate samples are taken.
    pub gates: Arc<dyn GateProvider>,
    /// Events on rollouts.
    pub recorder: Recorder,
    /// Whether this replica holds the Lease now.
    pub leading: Arc<dyn Fn() -> bool + Send + Sync>,
    /// The process's metrics.
    pub metrics: Arc<Metrics>,
    /// Whether every rollout requires four-eyes approvals (`--four-eyes`).
    pub four_eyes_default: bool,
    /// Whether the admission policies approvals rely on are installed.
    pub policies: admission_policies::PolicyCheck,
}

impl Context {
    /// A fresh stamp for `writer`, after every stamp this process issued or observed.
    pub fn fresh_stamp(&self, writer: &WriterId) -> Stamp {
        let stamp = match self.clock.lock() {
            Ok(mut clock) => clock.now(),
            // A panic elsewhere poisoned the clock; its state is still a valid clock.
            Err(poisoned) => poisoned.into_inner().now(),
        };
        Stamp::new(stamp.wall_ms, stamp.logical, writer.clone())
    }

    /// Moves the clock past `stamp`, so that stamps minted after a restart (or on a
    /// replica whose clock is behind) still follow the stored and published ones. A stamp
    /// too far ahead is refused by the clock, and logged.
    fn observe_stamp(&self, stamp: &Stamp) {
        let result = match self.clock.lock() {
            Ok(mut clock) => clock.observe(stamp),
            Err(poisoned) => poisoned.into_inner().observe(stamp),
        };
        if let Err(error) = result {
            tracing::warn!(%error, "stored revision stamp not observed");
        }
    }
}

/// One reconcile of one rollout: fetch, observe the regions, sample due gates, let the
/// engine decide, act, write status.
pub async fn reconcile(
    rollout: Arc<ConfigRollout>,
    ctx: Arc<Context>,
) -> Result<Requeue, ReconcileError> {
    let now = Utc::now();
    let namespace = rollout.namespace().unwrap_or_default();
    let writer = WriterId::rollout(&namespace, &rollout.name_any()).map_err(|source| {
        ReconcileError::Writer {
            reason: source.to_string(),
        }
    })?;
    let status = rollout.status.clone().unwrap_or_default();

    // Fetch (hub).
    let (grant, grant_error) = observe::grant(&ctx.hub, &namespace).await?;
    let desired = observe::desired_data(&ctx.hub, &rollout).await?;
    let regions = observe::regions(&ctx.hub).await?;
    let approvals = observe::approvals(&ctx.hub, &rollout).await?;
    let store = RevisionStore::new(ctx.hub.clone(), &namespace);
    let mut revisions = store.load(&rollout).await?;
    for revision in revisions.values() {
        ctx.observe_stamp(&revision.stamp);
    }

    // Observe (regions).
    let mut spec_errors: Vec<String> = grant_error.into_iter().collect();
    let desired = desired.unwrap_or_else(|error| {
        spec_errors.push(error);
        BTreeMap::new()
    });
    let current = status
        .revision
        .as_ref()
        .and_then(|name| revisions.get(name));
    // Only the regions some stage selects within the grant are read: the engine's own
    // selection, on labels alone, before any region IO.
    let selected = selected_regions(&rollout.spec, &regions, &grant);
    let observed = futures::future::join_all(regions.iter().filter_map(|region| {
        let stage = selected.get(region.name_any().as_str())?;
        Some(observe::region(
            &ctx.region_clients,
            &ctx.digest_key,
            region,
            &rollout.spec.target,
            observe::Reader {
                writer: &writer,
                declared: &desired,
                stamp_bound_ms: stamp_bound_ms(now),
            },
            current,
            &rollout.spec.strategy.expand_contract,
            observe::ConsumerScope {
                consumers: &rollout.spec.consumers,
                stage,
                gates: ctx.gates.as_ref(),
            },
        ))
    }))
    .await;
    for region in &observed {
        if let Some(stamp) = &region.latest_stamp {
            ctx.observe_stamp(stamp);
        }
    }
    let target_refusals = target_refusals(&ctx.hub, &rollout, &grant, &observed).await?;
    let missing_policies = if rollout.spec.needs_approvals() {
        Some(ctx.policies.missing(&ctx.hub).await)
    } else {
        None
    };
    let region_observations = observed
        .into_iter()
        .map(|region| region.observation)
        .collect();
    let gate_samples = sample_gates(&ctx, &rollout, &status, now).await;
    let changes = current.map(|revision| revision.changes_to(&desired));
    let observations = Observations {
        generation: rollout.metadata.generation.unwrap_or_default(),
        desired: DesiredRevision {
            digest: if spec_errors.is_empty() {
                desired_digest(&ctx.digest_key, &desired)
            } else {
                String::new()
            },
            keys_set: changes.map_or(u32::try_from(desired.len()).unwrap_or(u32::MAX), |c| c.set),
            keys_removed: changes.map_or(0, |c| c.removed),
        },
        fresh_stamp: ctx.fresh_stamp(&writer).to_string(),
        regions: region_observations,
        gate_samples,
        approvals,
        control: observe::control(&rollout),
        spec_errors,
        grant: grant.clone(),
        target_refusals,
        rollout_uid: rollout.metadata.uid.clone().unwrap_or_default(),
        spec_author: rollout
            .annotations()
            .get(admission_policies::SPEC_AUTHOR_ANNOTATION)
            .cloned(),
        four_eyes_default: ctx.four_eyes_default,
        missing_policies,
    };

    // Decide (pure).
    let decision = engine::decide(&rollout.spec, status, &observations, now);

    // Act, then write status: only while leading.
    if !(ctx.leading)() {
        return Err(ReconcileError::NotLeader);
    }
    let regions_by_name = regions
        .into_iter()
        .map(|region| (region.name_any(), region))
        .collect();
    let report = act::act(
        &ctx,
        ActInput {
            rollout: &rollout,
            writer: &writer,
            desired: &desired,
            revisions: &mut revisions,
            regions: &regions_by_name,
            grant: &grant,
        },
        &decision.actions,
    )
    .await?;
    ctx.metrics
        .region_writes_total
        .add(WriteResult::Ok, u64::from(report.region_writes));
    ctx.metrics
        .region_writes_total
        .add(WriteResult::Error, u64::from(report.region_failures));
    let judged = decision.samples_judged;
    for (verdict, count) in [
        (SampleVerdict::Successful, judged.successful),
        (SampleVerdict::Failed, judged.failed),
        (SampleVerdict::Inconclusive, judged.inconclusive),
    ] {
        ctx.metrics
            .gate_samples_total
            .add(verdict, u64::from(count));
    }
    let mut status = decision.status;
    mark_failed_regions(&mut status, &report.failed_regions);
    let patch_started = std::time::Instant::now();
    let written = status_writer::write_status(&ctx.hub, &rollout, &status, (ctx.leading)()).await;
    ctx.metrics
        .status_patch_duration_seconds
        .observe_duration(patch_started.elapsed());
    ctx.metrics.status_patches_total.inc(match &written {
        Ok(_) => WriteResult::Ok,
        Err(ReconcileError::Call(error)) if error.is_conflict() => WriteResult::Conflict,
        Err(_) => WriteResult::Error,
    });
    if let Err(ReconcileError::Call(error)) = &written
        && error.is_conflict()
    {
        // The rollout changed since it was read: its watch brings the new version, and
        // the next reconcile decides from it.
        tracing::debug!(rollout = %rollout.name_any(), "status computed from a stale read; not written");
        return Ok(Requeue::requeue(Duration::from_secs(1)));
    }
    written?;
    let keep: std::collections::BTreeSet<&str> = status
        .history
        .iter()
        .map(|record| record.name.as_str())
        .chain(status.revision.as_deref())
        .collect();
    store
        .prune(&rollout, &revisions, |name| keep.contains(name))
        .await?;

    let requeue = if report.region_failures > 0 {
        ERROR_REQUEUE
    } else {
        decision.requeue_after.unwrap_or(IDLE_REQUEUE)
    };
    Ok(Requeue::requeue(requeue.max(Duration::from_millis(200))))
}

/// Stamps after this wall-clock time (ms) are further ahead than the drift bound.
fn stamp_bound_ms(now: chrono::DateTime<Utc>) -> u64 {
    let now_ms = u64::try_from(now.timestamp_millis()).unwrap_or_default();
    let drift_ms = u64::try_from(MAX_CLOCK_DRIFT.as_millis()).unwrap_or(u64::MAX);
    now_ms.saturating_add(drift_ms)
}

/// Most other rollouts looked up per reconcile when they hold keys this one declares.
const MAX_OTHER_ROLLOUTS_CHECKED: usize = 8;

/// Why this rollout may not write some region's target: it exists and configrollout does
/// not manage it (and adoption was not asked for and granted), or another rollout that
/// still exists manages keys this one declares. Keys win by their stamp, so a second
/// rollout on a key would silently flip it (and count its revision as applied where the
/// other's value stands): such a rollout is refused, naming the keys and the other one.
async fn target_refusals(
    hub: &kube::Client,
    rollout: &ConfigRollout,
    grant: &engine::Grant,
    observed: &[observe::ObservedRegion],
) -> Result<Vec<String>, ReconcileError> {
    let target = &rollout.spec.target;
    let adopting = target.adopt && grant.adoption;
    let mut refusals = Vec::new();
    let mut existing: BTreeMap<WriterId, bool> = BTreeMap::new();
    for region in observed {
        let name = &region.observation.name;
        if region.findings.unmanaged && !adopting {
            refusals.push(format!(
                "spec.target: ConfigMap {}/{} exists in region {name} and is not managed by \
                 configrollout (set spec.target.adopt, with a grant that allows adoption, to \
                 take it over)",
                target.namespace, target.name
            ));
        }
        for (other, keys) in &region.findings.keys_of_other_rollouts {
            if !existing.contains_key(other) && existing.len() < MAX_OTHER_ROLLOUTS_CHECKED {
                existing.insert(other.clone(), rollout_exists(hub, other).await?);
            }
            // Past the lookup bound an unchecked writer counts as existing: refusing is safe.
            if existing.get(other).copied().unwrap_or(true) {
                let (other_namespace, other_name) = other.rollout_ref().unwrap_or_default();
                refusals.push(format!(
                    "spec.data: key(s) {} of {}/{} are managed in region {name} by \
                     ConfigRollout {other_namespace}/{other_name}; a key has one managing rollout",
                    keys.join(", "),
                    target.namespace,
                    target.name
                ));
            }
        }
    }
    Ok(refusals)
}

async fn rollout_exists(hub: &kube::Client, writer: &WriterId) -> Result<bool, ReconcileError> {
    let Some((namespace, name)) = writer.rollout_ref() else {
        return Ok(false);
    };
    let api: kube::Api<ConfigRollout> = kube::Api::namespaced(hub.clone(), namespace);
    Ok(api_call("read other rollout", api.get_opt(name))
        .await?
        .is_some())
}

/// The Regions the spec's stages select (by name or by label) within the grant, each
/// with the name of the stage that covers it.
fn selected_regions(
    spec: &crate::api::ConfigRolloutSpec,
    regions: &[crate::api::Region],
    grant: &engine::Grant,
) -> BTreeMap<String, String> {
    let labelled: Vec<engine::RegionObservation> = regions
        .iter()
        .map(|region| engine::RegionObservation {
            name: region.name_any(),
            labels: region.labels().clone(),
            ..engine::RegionObservation::default()
        })
        .collect();
    engine::selection::plan(spec, &labelled, grant)
        .all_regions()
        .filter_map(|(stage, name)| Some((name.to_owned(), spec.stages.get(stage)?.name.clone())))
        .collect()
}

/// Records regions whose merge failed as unreachable, with the error. The engine sends a
/// region its work when the region turns reachable, so the next reconcile, observing it
/// reachable again, sends the merge again; the stage's deadline keeps running meanwhile.
fn mark_failed_regions(status: &mut crate::api::ConfigRolloutStatus, failed: &[(String, String)]) {
    for (name, error) in failed {
        if let Some(region) = status.regions.iter_mut().find(|r| &r.name == name) {
            region.reachable = Some(false);
            region.last_error = Some(error.clone());
        }
    }
}

async fn sample_gates(
    ctx: &Context,
    rollout: &ConfigRollout,
    status: &crate::api::ConfigRolloutStatus,
    now: chrono::DateTime<Utc>,
) -> Vec<GateSampleObservation> {
    let due = engine::gates_due(&rollout.spec, status, now);
    futures::future::join_all(due.into_iter().map(|request| async move {
        let result = ctx
            .gates
            .sample(request.region.as_deref(), &request.query)
            .await;
        GateSampleObservation {
            gate: request.gate,
            stage: request.stage,
            revision: request.revision,
            region: request.region,
            at: now,
            result,
        }
    }))
    .await
}

/// Runs one hub API call with [`HUB_CALL_TIMEOUT`].
pub(crate) async fn api_call<T>(
    operation: &'static str,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, ReconcileError> {
    Ok(crate::api_call::timed(operation, HUB_CALL_TIMEOUT, request).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConfigRolloutSpec;
    use crate::engine::{Action, RegionObservation};

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
            grant: engine::Grant::own_namespace("app"),
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
    fn only_regions_a_stage_selects_are_read() {
        let region = |name: &str, tier: &str| crate::api::Region {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some([("tier".to_owned(), tier.to_owned())].into()),
                ..Default::default()
            },
            spec: Default::default(),
            status: None,
        };
        let spec: ConfigRolloutSpec = serde_json::from_value(serde_json::json!({
            "target": {"namespace": "app", "name": "limits"},
            "data": {"rate": "1"},
            "stages": [
                {"name": "canary", "regions": {"names": ["region-1"]}},
                {"name": "prod", "regions": {"selector": {"matchLabels": {"tier": "prod"}}}},
            ],
        }))
        .unwrap();
        let regions = [
            region("region-1", "canary"),
            region("region-2", "prod"),
            region("region-3", "staging"),
        ];
        let selected = selected_regions(&spec, &regions, &engine::Grant::default());
        assert_eq!(
            selected.into_iter().collect::<Vec<_>>(),
            vec![
                ("region-1".to_owned(), "canary".to_owned()),
                ("region-2".to_owned(), "prod".to_owned())
            ]
        );
    }

    #[test]
    fn out_of_band_edits_are_reported_by_key_name() {
        let spec = spec();
        let now = Utc::now();
        let first = engine::decide(&spec, Default::default(), &observations(), now);
        let mut drifted = observations();
        drifted.regions[0].drifted_keys = vec!["rate".into()];
        let decision = engine::decide(&spec, first.status, &drifted, now);
        let condition = decision
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Drifted")
            .expect("Drifted condition");
        assert_eq!(condition.status, "True");
        assert!(
            condition.message.contains("region-1 (rate)"),
            "{}",
            condition.message
        );
        assert_eq!(
            decision.status.regions[0].drifted_keys,
            vec!["rate".to_owned()]
        );

        let healed = engine::decide(&spec, decision.status.clone(), &observations(), now);
        let condition = healed
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Drifted")
            .expect("Drifted condition");
        assert_eq!(condition.status, "False");
    }

    #[test]
    fn a_failed_merge_is_sent_again_on_the_next_reconcile() {
        let spec = spec();
        let now = Utc::now();
        let first = engine::decide(&spec, Default::default(), &observations(), now);
        assert_eq!(publishes(&first.actions), 1);

        // The merge failed: recorded, the next reconcile (region still not holding the
        // revision) sends it again.
        let mut status = first.status.clone();
        mark_failed_regions(
            &mut status,
            &[("region-1".into(), "write target: 403".into())],
        );
        let retried = engine::decide(&spec, status, &observations(), now);
        assert_eq!(publishes(&retried.actions), 1);

        // Without the record, the engine (rightly, for restart safety) sends nothing new.
        let unmarked = engine::decide(&spec, first.status, &observations(), now);
        assert_eq!(publishes(&unmarked.actions), 0);
    }
}
