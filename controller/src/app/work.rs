//! Leading and working: the leader-gated controller loop with its watches and caches,
//! the kubeconfig Secret watch, and the Region probe.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::api::{
    ClusterConfigSchema, ClusterConfigValidator, ClusterGateTemplate, ConfigRollout, ConfigSchema,
    GateTemplate, Region, StageApproval, TargetClaim, conditions,
};
use crate::leader::LeaderState;
use crate::reconcile::hub_cache::HubStores;
use crate::reconcile::{self, Context, ReconcileError, region_status, revision_store, triggers};
use crate::telemetry::metrics::{Census, RegionState};
use crate::watch_index::WatchIndex;

/// How often Region reachability is probed.
const REGION_PROBE_INTERVAL: Duration = Duration::from_secs(15);

/// How long the controller may drain once leadership ends before it is dropped (its
/// writes already stopped at the fence).
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Waits to lead, runs the controller while leading, and stops it when leadership is
/// lost or `stop` is cancelled. Returns when `stop` is cancelled, or when the controller
/// ended by itself while still leading (a failure the caller reports). Sharded, `leader`
/// leads while this replica holds at least one shard, and `acquisitions` changes at each
/// shard it acquires (or renews after a lapse): the controller is then restarted, as on a
/// new leadership, so that every rollout of the shard is reconciled afresh whatever its
/// requeue said while the shard was not ours.
pub(super) async fn lead_and_work(
    ctx: Arc<Context>,
    watch_hub: Client,
    leader: LeaderState,
    mut acquisitions: Option<tokio::sync::watch::Receiver<u64>>,
    stop: CancellationToken,
) {
    loop {
        // Stopping is one-way: when both are ready (a stop while still leading), the stop
        // wins; an unbiased select picked one at random and could lead again after SIGTERM.
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            leading = leader.acquired() => if !leading {
                tracing::warn!("leader election ended; not working");
                stop.cancelled().await;
                return;
            }
        }
        tracing::info!("leading: reconciling rollouts");
        if let Some(acquisitions) = acquisitions.as_mut() {
            acquisitions.borrow_and_update();
        }
        let ended = {
            let leader = leader.clone();
            let stop = stop.clone();
            let acquisitions = acquisitions.clone();
            async move {
                let acquired = async move {
                    match acquisitions {
                        Some(mut acquisitions) => {
                            if acquisitions.changed().await.is_err() {
                                std::future::pending::<()>().await;
                            }
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    () = leader.lost() => {},
                    () = stop.cancelled() => {},
                    () = acquired => {},
                }
            }
        }
        .shared();
        // The controller drains gracefully, but not forever: its runner waits for the
        // rollout cache's first list, which a hub that went away never completes.
        let drained = {
            let ended = ended.clone();
            async move {
                ended.await;
                tokio::time::sleep(DRAIN_GRACE).await;
            }
        };
        tokio::select! {
            () = run_controller(ctx.clone(), watch_hub.clone(), ended) => {}
            () = drained => tracing::warn!(grace = ?DRAIN_GRACE, "reconciles still running after leadership ended: abandoned"),
        }
        let shards_changed = acquisitions
            .as_ref()
            .is_some_and(|acquisitions| acquisitions.has_changed().unwrap_or(false));
        if !stop.is_cancelled() && shards_changed {
            tracing::info!("shards acquired: restarting the controller");
            continue;
        }
        if !stop.is_cancelled() && leader.is_leading() {
            // Neither asked to stop nor deposed: the controller's stream ended by itself.
            // The work loop ends with it, and the process is reported dead, rather than
            // holding the Lease while nothing is reconciled.
            tracing::error!("the controller stream ended while leading");
            return;
        }
        tracing::info!("not leading: reconciling stopped");
    }
}

/// Counts, from the controller's caches, what the census metrics export.
fn census_of(
    rollouts: reflector::Store<ConfigRollout>,
    regions: reflector::Store<Region>,
) -> impl Fn() -> Census + Send + Sync + 'static {
    move || {
        let rollouts = rollouts.state();
        Census {
            phases: rollouts
                .iter()
                .map(|rollout| rollout.status.as_ref().and_then(|status| status.phase))
                .collect(),
            drifted: rollouts
                .iter()
                .filter(|rollout| {
                    rollout
                        .status
                        .as_ref()
                        .is_some_and(|status| status.is_true(conditions::DRIFTED))
                })
                .count(),
            regions: regions
                .state()
                .iter()
                .map(|region| {
                    RegionState::from(region.status.as_ref().and_then(|status| status.reachable))
                })
                .collect(),
        }
    }
}

async fn run_controller(
    ctx: Arc<Context>,
    watch_hub: Client,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let rollouts: Api<ConfigRollout> = Api::all(watch_hub.clone());
    let approvals: Api<StageApproval> = Api::all(watch_hub.clone());
    let regions: Api<Region> = Api::all(watch_hub.clone());
    let namespaces: Api<PartialObjectMeta<Namespace>> = Api::all(watch_hub.clone());
    let revisions: Api<PartialObjectMeta<ControllerRevision>> = Api::all(watch_hub.clone());
    let claims: Api<TargetClaim> = Api::all(watch_hub.clone());
    // Metadata is all a source's trigger needs: the data is read by the reconcile, and
    // is never held here.
    let sources: Api<PartialObjectMeta<ConfigMap>> = Api::all(watch_hub.clone());
    // A schema or validator changed: the candidates it refused are judged again now
    // rather than at their next idle requeue.
    let schemas: Api<PartialObjectMeta<ConfigSchema>> = Api::all(watch_hub.clone());
    let cluster_schemas: Api<PartialObjectMeta<ClusterConfigSchema>> = Api::all(watch_hub.clone());
    let gate_templates: Api<GateTemplate> = Api::all(watch_hub.clone());
    let cluster_gate_templates: Api<ClusterGateTemplate> = Api::all(watch_hub.clone());
    let validators: Api<PartialObjectMeta<ClusterConfigValidator>> = Api::all(watch_hub);
    // The rollouts as the reconciles read them, without managedFields: nothing here reads
    // them, and at 10,000 rollouts they were a large share of the controller's memory.
    let (cache, rollout_writer) = reflector::store();
    // The rollouts by the target they write: who a change in a region concerns.
    let rollouts_by_target = Arc::new(WatchIndex::default());
    let rollout_changes = reflector::reflector(
        rollout_writer,
        watcher(rollouts, watcher::Config::default())
            .default_backoff()
            .modify(drop_managed_fields),
    )
    .inspect_ok({
        let rollouts_by_target = rollouts_by_target.clone();
        move |event| rollouts_by_target.apply(event, triggers::target_of)
    })
    .applied_objects();
    let controller = Controller::for_stream(rollout_changes, cache.clone()).with_config(
        kube::runtime::controller::Config::default()
            .concurrency(reconcile::MAX_CONCURRENT_RECONCILES),
    );
    let region_cache = cache.clone();
    let region_changes = triggers::RegionChanges::default();
    // The reconciles read Regions, approvals and Namespaces from these stores; each is
    // updated before its event triggers a reconcile.
    let (region_store, region_writer) = reflector::store();
    let (approval_store, approval_writer) = reflector::store();
    let (namespace_store, namespace_writer) = reflector::store();
    let (revision_store, revision_writer) = reflector::store();
    let revisions_by_rollout = Arc::new(WatchIndex::default());
    let (claim_store, claim_writer) = reflector::store();
    let (gate_template_store, gate_template_writer) = reflector::store();
    let (cluster_gate_template_store, cluster_gate_template_writer) = reflector::store();
    // The census metrics count these caches at each scrape, while the controller runs:
    // a deleted rollout or Region leaves them with the watch's delete.
    let _census = ctx
        .metrics
        .take_census_from(census_of(cache.clone(), region_store.clone()));
    ctx.hub_cache.install(HubStores {
        regions: region_store,
        approvals: approval_store,
        namespaces: namespace_store,
        revisions: revision_store,
        revisions_by_rollout: revisions_by_rollout.clone(),
        claims: claim_store,
        rollouts: cache.clone(),
        gate_templates: gate_template_store,
        cluster_gate_templates: cluster_gate_template_store,
    });
    // A change of a claim (an owner released a key, or was deleted) wakes every rollout
    // that waits for one of its keys.
    let claims = cached_watch(claim_writer, claims, watcher::Config::default());
    // A template a refused rollout names appeared or changed: it is resolved again now.
    // Rollouts that sample one read it at their next reconcile (a change applies from
    // their next gate windows), so nothing else is woken.
    let gate_templates = cached_watch(
        gate_template_writer,
        gate_templates,
        watcher::Config::default(),
    );
    let cluster_gate_templates = cached_watch(
        cluster_gate_template_writer,
        cluster_gate_templates,
        watcher::Config::default(),
    );
    let approvals = cached_watch(approval_writer, approvals, watcher::Config::default());
    let regions = cached_watch(region_writer, regions, watcher::Config::default());
    // Namespaces trigger nothing: a grant is read at the rollout's next reconcile, as
    // it was when it was read by a request.
    let namespaces = cached_watch(namespace_writer, namespaces, watcher::Config::default());
    // Which revisions exist (metadata only: their values are read once each, by name,
    // and kept decoded until deleted).
    let decoded_ctx = ctx.clone();
    let revisions = reflector::reflector(
        revision_writer,
        watcher(
            revisions,
            watcher::Config::default().labels(revision_store::ROLLOUT_LABEL),
        )
        .default_backoff()
        .modify(drop_managed_fields),
    )
    .inspect_ok(move |event| {
        revisions_by_rollout.apply(event, revision_store::rollout_of_revision);
        if let watcher::Event::Delete(object) = event
            && let Some(uid) = object.metadata.uid.as_deref()
        {
            decoded_ctx.hub_cache.decoded_revisions().remove(uid);
        }
    })
    .touched_objects();
    controller
        .watches_stream(approvals, |approval| {
            let namespace = approval.namespace()?;
            Some(ObjectRef::<ConfigRollout>::new(&approval.spec.rollout).within(&namespace))
        })
        .watches_stream(regions, move |region| {
            if !region_changes.concerns(&region) {
                return Vec::new();
            }
            triggers::rollouts_for_region(&region_cache.state(), &region)
        })
        // A grant changed: the namespace's rollouts read it now, not at their resync.
        .watches_stream(namespaces, {
            let cache = cache.clone();
            move |namespace| triggers::rollouts_in_namespace(&cache.state(), &namespace.name_any())
        })
        .watches_stream(claims, |claim| triggers::rollouts_claiming(&claim))
        .watches_stream(gate_templates, {
            let cache = cache.clone();
            move |template| {
                let namespace = template.namespace().unwrap_or_default();
                triggers::rollouts_refused_for_template(
                    &cache.state(),
                    Some(&namespace),
                    &template.name_any(),
                )
            }
        })
        .watches_stream(cluster_gate_templates, {
            let cache = cache.clone();
            move |template| {
                triggers::rollouts_refused_for_template(&cache.state(), None, &template.name_any())
            }
        })
        .watches_stream(revisions, |_| Vec::new())
        // A rotated key: every rollout reads its regions now, signing their states with
        // it, rather than at its next idle requeue.
        .reconcile_all_on(ctx.digest_keys.changes())
        // A notice delivered (or failing): the rollout's status records it.
        .reconcile_on(ctx.notifier.reconcile_requests())
        // Someone edited, deleted or restored a target or its companion in a region: the
        // rollouts that write it look now (drift, a lost key), not at their resync.
        .reconcile_on(rollouts_for_region_changes(&ctx, rollouts_by_target))
        .watches(sources, watcher::Config::default(), {
            let cache = cache.clone();
            move |source| {
                let namespace = source.namespace().unwrap_or_default();
                triggers::rollouts_for_source(&cache.state(), &namespace, &source.name_any())
            }
        })
        .watches(schemas, watcher::Config::default(), {
            let cache = cache.clone();
            move |schema| {
                let namespace = schema.namespace().unwrap_or_default();
                triggers::rollouts_refused_by_values(&cache.state(), Some(&namespace))
            }
        })
        .watches(cluster_schemas, watcher::Config::default(), {
            let cache = cache.clone();
            move |_| triggers::rollouts_refused_by_values(&cache.state(), None)
        })
        .watches(validators, watcher::Config::default(), move |_| {
            triggers::rollouts_refused_by_values(&cache.state(), None)
        })
        .graceful_shutdown_on(stop)
        .run(reconcile::reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller event");
            }
        })
        .await;
}

/// How long a region change waits before it is looked at (see below).
const OWN_WRITE_ANSWER_WAIT: Duration = Duration::from_millis(500);
/// Region changes waiting at once (each only a timer).
const REGION_CHANGES_AT_ONCE: usize = 4096;

/// The rollouts each region change concerns, for as long as this run lasts.
fn rollouts_for_region_changes(
    ctx: &Arc<Context>,
    rollouts_by_target: Arc<WatchIndex>,
) -> impl futures::Stream<Item = ObjectRef<ConfigRollout>> + Send + 'static {
    let changes = ctx.region_clients.region_changes();
    let ctx = ctx.clone();
    let spacing = triggers::WakeSpacing::default();
    futures::stream::unfold(changes, |mut changes| async move {
        loop {
            match changes.recv().await {
                Ok(change) => return Some((change, changes)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "region changes missed: found at the next resync");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    // Looked at a moment later: the watch's event of a write of this process often comes
    // before the write's own answer, which then shows the change was made here.
    .map(|change| async move {
        tokio::time::sleep(OWN_WRITE_ANSWER_WAIT).await;
        change
    })
    .buffer_unordered(REGION_CHANGES_AT_ONCE)
    .flat_map(move |change| {
        let concerned = if ctx.region_clients.made_here(&change) {
            Vec::new()
        } else {
            triggers::rollouts_for_region_change(&rollouts_by_target, &change)
        };
        futures::stream::iter(concerned)
    })
    .map(move |rollout| {
        let wait = spacing.plan(&rollout, std::time::Instant::now());
        async move {
            let wait = wait?;
            tokio::time::sleep(wait).await;
            Some(rollout)
        }
    })
    .buffer_unordered(REGION_CHANGES_AT_ONCE)
    .filter_map(futures::future::ready)
}

/// Follows the resourceVersions of the Secrets in the controller's namespace (metadata
/// only), so that a region's client is rebuilt when its kubeconfig changes without a read
/// of the Secret per use. Should the watch end, clients read their Secret at each use.
pub(super) fn follow_secret_versions(
    ctx: &Context,
    watch_hub: Client,
    namespace: &str,
    stop: CancellationToken,
) {
    let (store, writer) = reflector::store();
    ctx.region_clients.follow_secret_versions(store);
    let secrets: Api<PartialObjectMeta<Secret>> = Api::namespaced(watch_hub, namespace);
    let events = reflector::reflector(
        writer,
        watcher(secrets, watcher::Config::default())
            .default_backoff()
            .modify(drop_managed_fields),
    )
    .for_each(|event| {
        if let Err(error) = event {
            tracing::debug!(%error, "kubeconfig Secret watch");
        }
        std::future::ready(())
    });
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            () = events => {}
        }
    });
}

/// A watch of `api` that keeps `writer`'s store up to date before passing each touched
/// object on (to trigger reconciles).
fn cached_watch<K>(
    writer: reflector::store::Writer<K>,
    api: Api<K>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    reflector::reflector(
        writer,
        watcher(api, config)
            .default_backoff()
            .modify(drop_managed_fields),
    )
    .touched_objects()
}

/// The cached copies need no record of who wrote which field.
fn drop_managed_fields<K: ResourceExt>(object: &mut K) {
    object.managed_fields_mut().clear();
}

fn error_policy(rollout: Arc<ConfigRollout>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let key = reconcile::rollout_key(&rollout);
    Action::requeue(ctx.backoff.failed(&key, error.retry_after()))
}

pub(super) async fn probe_regions(ctx: Arc<Context>, stop: CancellationToken) {
    loop {
        if let Err(error) =
            region_status::probe_all(&ctx.hub, &ctx.region_clients, &ctx.fence).await
        {
            tracing::warn!(%error, "region probe failed");
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(REGION_PROBE_INTERVAL) => {}
        }
    }
}
