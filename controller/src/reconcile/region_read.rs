//! Reading one region: what its replica of the target holds of the rollout, who else
//! writes there, and how far its consumers got. Nothing here writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;

use super::Context;
use super::digest_keys::FORCED_RELOAD_INTERVAL;
use crate::api::{ConfigRollout, ExpandContract, Region, RevisionStep, TargetRef};
use crate::crdt::{DigestKey, Stamp};
use crate::engine::{AppliedRevision, ConsumerObservation, RegionObservation};
use crate::gates::scope::{Matchers, scope_if};
use crate::gates::{Access, Credentials, SampleSource, TemplateValues, render};
use crate::regions::consumers::{self, activated_from, restart_marker};
use crate::regions::publication::{RevisionState, evidence, restored_removed_keys};
use crate::regions::store::{self, Ownership, Snapshot, StateSignature};
use crate::telemetry::metrics::{StateRefusal, WriteKind};

/// Who writes what in a region's target, beyond the evidence the engine reads.
#[derive(Debug, Clone, Default)]
pub struct TargetFindings {
    /// The target exists and configrollout does not manage it.
    pub unmanaged: bool,
    /// An object with the companion's reserved name is there that configrollout did not
    /// make for this target.
    pub foreign_companion: bool,
}

/// What one region holds of the rollout.
pub struct ObservedRegion {
    /// What the engine sees.
    pub observation: RegionObservation,
    /// What decides whether the rollout may write there at all.
    pub findings: TargetFindings,
    /// The latest stamp in the region's replica within the drift bound: the clock moves
    /// past it before a revision is stamped, so a new revision is never stamped below
    /// what a region already holds.
    pub latest_stamp: Option<Stamp>,
    /// The objects read, for a merge into this region in the same reconcile.
    pub read: Option<Snapshot>,
}

/// The rollout reading a region: its identity and what it declares.
pub struct Reader<'a> {
    /// The keys it declares now.
    pub declared: &'a BTreeMap<String, String>,
    /// Keys it wrote once and has since removed and collected.
    pub removed: &'a std::collections::BTreeSet<String>,
    /// Its recorded collection point (`status.collectedThrough`).
    pub collected_through: Option<Stamp>,
    /// Stamps after this wall-clock time (ms) are further ahead than the clock's drift
    /// bound allows.
    pub stamp_bound_ms: u64,
}

/// How the gate and activation queries of a rollout leave the controller, from its hub
/// namespace's grant (`configrollout.dev/gate-label-matchers`).
#[derive(Clone, Copy, Debug)]
pub enum QueryScope<'a> {
    /// As written: the namespace pins no label matchers.
    AsWritten,
    /// With the namespace's matchers in every selector; a query that cannot be scoped is
    /// never sent.
    Scoped(&'a Matchers),
    /// Not at all: the namespace's grant could not be read (a malformed annotation), so
    /// whether its queries must be scoped is not known.
    Withheld,
}

impl<'a> QueryScope<'a> {
    /// The scope the grant fetched with the rollout gives.
    pub fn of(fetched: &'a super::fetch::Fetched) -> Self {
        match (&fetched.grant_error, &fetched.grant.gate_scope) {
            (Some(_), _) => QueryScope::Withheld,
            (None, Some(matchers)) => QueryScope::Scoped(matchers),
            (None, None) => QueryScope::AsWritten,
        }
    }

    /// `query` as it may be sent, or why it may not (a query error sample's reason).
    pub fn apply<'q>(self, query: &'q str) -> Result<std::borrow::Cow<'q, str>, String> {
        match self {
            QueryScope::AsWritten => Ok(std::borrow::Cow::Borrowed(query)),
            QueryScope::Scoped(matchers) => scope_if(query, Some(matchers)).map_err(|error| {
                format!(
                    "not sent: the query cannot be scoped to the namespace's \
                     gate-label-matchers: {error}"
                )
            }),
            QueryScope::Withheld => Err(
                "not sent: the namespace's grant annotations cannot be read, so its gate \
                 queries' scope is not known"
                    .to_owned(),
            ),
        }
    }

    /// `source` for a query sent under this scope.
    pub fn source<'s>(self, source: SampleSource<'s>) -> SampleSource<'s> {
        SampleSource {
            scoped: !matches!(self, QueryScope::AsWritten),
            ..source
        }
    }
}

/// What one region holds of the rollout's current revision. `stage` is the stage that
/// covers the region (for `{{stage}}` in activation queries), whose activation queries
/// are sent under `queries`.
pub async fn read_region(
    ctx: &Context,
    rollout: &ConfigRollout,
    region: &Region,
    stage: &str,
    reader: &Reader<'_>,
    current: Option<&RevisionState>,
    queries: QueryScope<'_>,
) -> ObservedRegion {
    let target = &rollout.spec.target;
    let mut observation = RegionObservation {
        name: region.name_any(),
        labels: region.labels().clone(),
        ..RegionObservation::default()
    };
    let mut findings = TargetFindings::default();
    let mut latest_stamp = None;
    let mut read = None;
    // A region the probe could not reach is not read until the probe reaches it again
    // (every 15 s): each read would wait out its timeout while holding one of the
    // reconcile slots every tenant shares, and find it unreachable anyway.
    if let Some(why) = probed_unreachable(region) {
        observation.last_error = Some(why);
        return ObservedRegion {
            observation,
            findings,
            latest_stamp: None,
            read: None,
        };
    }
    let client = match ctx.region_clients.client(region).await {
        Ok(client) => client,
        Err(error) => {
            observation.last_error = Some(error.to_string());
            return ObservedRegion {
                observation,
                findings,
                latest_stamp: None,
                read: None,
            };
        }
    };
    let objects = ctx.region_clients.objects(region, &target.namespace);
    let (key, inspected) = inspect_with_held_key(ctx, &client, target, &objects).await;
    match inspected {
        Ok(inspection) => {
            observation.state_key_id = inspection.signature.key_id(&key);
            // Signed now: the region holds a state signed with the key in use, and the
            // status says so from this reconcile (a resting rollout's next look may be
            // minutes away).
            if inspection.signature.needs_signing(&key)
                && sign_with_current_key(ctx, &key, rollout, &client, &objects, &observation.name)
                    .await
            {
                observation.state_key_id = Some(key.id());
            }
            observation.reachable = true;
            findings.unmanaged = inspection.ownership == Ownership::Unmanaged;
            findings.foreign_companion = inspection.ownership == Ownership::ForeignCompanion;
            if findings.foreign_companion {
                ctx.metrics.region_state_refused(StateRefusal::Foreign);
            }
            if inspection.ownership == Ownership::TamperedCompanion {
                // Never read, never written: the region is reported, as one the rollout
                // cannot use until a person repairs it (README, "A region's state fails
                // its MAC"); the engine halts a running rollout at once.
                let error = crate::regions::RegionError::TamperedCompanion {
                    namespace: target.namespace.clone(),
                    name: format!(
                        "{}{}",
                        target.name,
                        crate::regions::materialize::COMPANION_SUFFIX
                    ),
                };
                tracing::warn!(region = %observation.name, %error, "region state fails its MAC");
                ctx.metrics.region_state_refused(StateRefusal::Tampered);
                observation.reachable = false;
                observation.tampered = true;
                observation.last_error = Some(format!("TamperedState: {error}"));
                return ObservedRegion {
                    observation,
                    findings,
                    latest_stamp: None,
                    read: None,
                };
            }
            let (latest, future) = stamps(&inspection.replica, reader, current);
            latest_stamp = latest;
            observation.future_stamped_keys = future;
            // A rollout speaks of its own keys only: another team's key names in the same
            // target are none of its status's business.
            let own = |key: &String| {
                reader.declared.contains_key(key)
                    || current.is_some_and(|revision| revision.state.get(key).is_some())
            };
            observation.drifted_keys = inspection
                .drifted_keys
                .iter()
                .filter(|key| own(key))
                .cloned()
                .collect();
            observation.overridden_keys = inspection
                .overridden_keys
                .iter()
                .filter(|key| own(key))
                .cloned()
                .collect();
            observation.restored_overrides =
                restored_overrides(&inspection.replica, reader).collect();
            observation.tombstones =
                u32::try_from(inspection.replica.tombstones()).unwrap_or(u32::MAX);
            if let Some(revision) = current {
                let two_pass = rollout.spec.strategy.expand_contract == ExpandContract::Auto
                    && revision.removes_keys();
                let mut found = evidence(
                    &inspection.replica,
                    revision,
                    two_pass,
                    reader.stamp_bound_ms,
                );
                let collected = reader.collected_through.as_ref();
                if restored_removed_keys(&inspection.replica, revision, collected) > 0 {
                    tracing::info!(
                        region = %observation.name,
                        revision = %revision.name,
                        "region holds keys the rollout removed and collected (a restore?); publishing again"
                    );
                    found.applied = None;
                }
                // A target whose digest is not its companion's has not caught up: the
                // second write of a merge did not happen (a conflict, a crash). The
                // region does not hold the revision yet; the next merge finishes it.
                let caught_up = inspection.target_digest.as_deref().is_some_and(|digest| {
                    crate::crdt::digest_matches(&key, &inspection.replica, digest)
                });
                observation.applied =
                    found
                        .applied
                        .filter(|_| caught_up)
                        .map(|step| AppliedRevision {
                            revision: revision.name.clone(),
                            step,
                            digest: inspection.digest.clone(),
                        });
                observation.rolled_back = found.rolled_back.then(|| revision.name.clone());
                if let Some(pass) = found.applied
                    && !rollout.spec.consumers.is_empty()
                {
                    let prometheus = RegionPrometheus::of(ctx, region).await;
                    let scope = ConsumerScope {
                        ctx,
                        rollout,
                        region: &observation.name,
                        prometheus: &prometheus,
                        stage,
                        queries,
                    };
                    match consumer_counts(&client, &scope, &revision.name, pass).await {
                        Ok(counts) => observation.consumers = Some(counts),
                        Err(error) => observation.last_error = Some(error.to_string()),
                    }
                }
            }
            read = Some(inspection.read);
        }
        Err(error) => {
            observation.reachable = !error.is_unreachable();
            observation.last_error = Some(error.to_string());
        }
    }
    ObservedRegion {
        observation,
        findings,
        latest_stamp,
        read,
    }
}

/// The latest stamp of `replica` within the drift bound, and how many of the rollout's
/// keys (declared now, or held by its current revision) carry a stamp beyond it.
/// Inspects the region's replica with the key this process holds. A state signed with a
/// key id the process does not know may be a rotation another replica read first: the
/// key Secret is read again (at most every [`FORCED_RELOAD_INTERVAL`]) and, if the key
/// changed, the region is inspected again before anyone calls its state tampered.
async fn inspect_with_held_key(
    ctx: &Context,
    client: &kube::Client,
    target: &TargetRef,
    objects: &crate::regions::object_cache::RegionObjects<'_>,
) -> (
    DigestKey,
    Result<store::Inspection, crate::regions::RegionError>,
) {
    let key = ctx.digest_keys.current();
    let inspected =
        store::inspect(client, &key, &target.namespace, &target.name, Some(objects)).await;
    let unknown_key = match &inspected {
        Ok(inspection) => match &inspection.signature {
            StateSignature::Mismatch {
                claimed_key_id: Some(id),
            } => !key.knows_id(id),
            _ => false,
        },
        Err(_) => false,
    };
    if !unknown_key {
        return (key, inspected);
    }
    match ctx
        .digest_keys
        .reload(&ctx.hub, FORCED_RELOAD_INTERVAL)
        .await
    {
        Ok(true) => {}
        Ok(false) => return (key, inspected),
        Err(error) => {
            tracing::warn!(%error, "digest key Secret not read again");
            return (key, inspected);
        }
    }
    let key = ctx.digest_keys.current();
    let inspected =
        store::inspect(client, &key, &target.namespace, &target.name, Some(objects)).await;
    (key, inspected)
}

/// Signs a region's state with the key in use: one signed with the key a rotation
/// replaced, or one written before MACs (trusted under `--accept-unsigned-states`), so
/// that it verifies once that key or flag is gone. Returns whether it was signed; a
/// failure is logged: the next read tries again.
async fn sign_with_current_key(
    ctx: &Context,
    key: &DigestKey,
    rollout: &ConfigRollout,
    client: &kube::Client,
    objects: &crate::regions::object_cache::RegionObjects<'_>,
    region: &str,
) -> bool {
    let target = &rollout.spec.target;
    let may_write = || ctx.fence.permits(rollout, WriteKind::RegionObject);
    match store::sign_with_current_key(
        client,
        key,
        &target.namespace,
        &target.name,
        &may_write,
        Some(objects),
    )
    .await
    {
        Ok(true) => {
            tracing::info!(region, key_id = %key.id(), "signed a region state with the key in use");
            true
        }
        Ok(false) => false,
        Err(error) => {
            tracing::warn!(region, %error, "could not sign a region state");
            false
        }
    }
}

/// Why `region` is not read, when its last probe found it unreachable.
fn probed_unreachable(region: &Region) -> Option<String> {
    let status = region.status.as_ref()?;
    (status.reachable == Some(false)).then(|| {
        format!(
            "not read: the last region probe could not reach it ({})",
            status.last_error.as_deref().unwrap_or("no answer")
        )
    })
}

/// Keys the rollout removed and collected that a regional override holds with a stamp at
/// or below the collection point: the override was made before the removal, which had
/// outlived it everywhere; it is back because the region's objects were restored from a
/// backup taken before the removal. Nothing can tell whether the person still wants it,
/// so it is reported for them to keep or drop (`override <name> --region R KEY-`), never
/// removed by the controller.
fn restored_overrides<'r>(
    replica: &'r crate::crdt::Replica,
    reader: &'r Reader<'_>,
) -> impl Iterator<Item = String> + 'r {
    replica.iter().filter_map(move |(key, entry)| {
        let collected = reader.collected_through.as_ref()?;
        let restored = entry.value().is_some()
            && entry.stamp.writer.kind() == crate::crdt::WriterKind::Override
            && entry.stamp <= *collected
            && reader.removed.contains(key)
            && !reader.declared.contains_key(key);
        restored.then(|| key.to_owned())
    })
}

fn stamps(
    replica: &crate::crdt::Replica,
    reader: &Reader<'_>,
    current: Option<&RevisionState>,
) -> (Option<Stamp>, u32) {
    let mut latest: Option<&Stamp> = None;
    let mut future = 0_u32;
    for (key, entry) in replica.iter() {
        if entry.stamp.wall_ms > reader.stamp_bound_ms {
            let ours = reader.declared.contains_key(key)
                || current.is_some_and(|revision| revision.state.get(key).is_some());
            if ours {
                future = future.saturating_add(1);
            }
        } else if latest.is_none_or(|latest| entry.stamp > *latest) {
            latest = Some(&entry.stamp);
        }
    }
    // A horizon ahead hides every absent key as one the region merged and outlived; a
    // frontier ahead makes that writer's next stamp (an override's) win over every later
    // revision. Either is as bad as an entry stamped ahead.
    let ahead = |stamp: &Stamp| stamp.wall_ms > reader.stamp_bound_ms;
    if replica.horizon().is_some_and(ahead) {
        let hidden = reader
            .declared
            .keys()
            .filter(|key| replica.get(key).is_none())
            .count();
        future = future.saturating_add(u32::try_from(hidden.max(1)).unwrap_or(u32::MAX));
    } else if future == 0 && replica.frontiers().values().any(ahead) {
        future = 1;
    }
    // The horizon and frontiers too: a collection another process made (on its own clock)
    // leaves no entry at its point, only the horizon, and a revision stamped below it
    // would be stamped among writes the region takes as merged.
    for stamp in replica
        .horizon()
        .into_iter()
        .chain(replica.frontiers().values())
    {
        if !ahead(stamp) && latest.is_none_or(|latest| stamp > latest) {
            latest = Some(stamp);
        }
    }
    (latest.cloned(), future)
}

/// Counts the region's consumers of `revision` at `pass`: instances from the workloads'
/// status, delivered from their template and status, activated from each consumer's
/// `activationQuery` (delivered, for a consumer that has none). An activation query that
/// cannot be answered counts nobody activated: the stage waits rather than passes.
async fn consumer_counts(
    client: &kube::Client,
    scope: &ConsumerScope<'_>,
    revision: &str,
    pass: RevisionStep,
) -> Result<ConsumerObservation, crate::regions::RegionError> {
    let target: &TargetRef = &scope.rollout.spec.target;
    let marker = restart_marker(revision, pass);
    let mut observed = ConsumerObservation {
        revision: revision.to_owned(),
        step: pass,
        total: 0,
        delivered: 0,
        activated: 0,
        restart_pending: false,
        ignored: Vec::new(),
    };
    let consumed = consumers::ConsumedTarget {
        namespace: &target.namespace,
        name: &target.name,
    };
    for consumer in &scope.rollout.spec.consumers {
        let workloads = consumers::workloads(client, consumed, consumer).await?;
        let counted = consumers::count(consumer, &workloads, &marker);
        let activated = match &consumer.activation_query {
            None => counted.delivered,
            Some(template) => {
                let values = TemplateValues {
                    region: scope.region,
                    revision,
                    stage: scope.stage,
                };
                // The template was checked when the spec was validated; a query that may
                // not be sent (unscopable) counts nobody activated.
                let rendered = render(template, &values).ok();
                match rendered.as_deref().map(|query| scope.queries.apply(query)) {
                    Some(Ok(query)) => {
                        let answer = scope.ctx.gates.sample(scope.source(), &query).await;
                        activated_from(&answer.result, counted.total).unwrap_or(0)
                    }
                    Some(Err(why)) => {
                        tracing::debug!(region = scope.region, %why, "activation query not sent");
                        0
                    }
                    None => 0,
                }
            }
        };
        observed.total = observed.total.saturating_add(counted.total);
        observed.delivered = observed.delivered.saturating_add(counted.delivered);
        observed.activated = observed.activated.saturating_add(activated);
        observed.restart_pending |= counted.restart_pending;
        observed.ignored.extend(counted.ignored);
    }
    observed.ignored.sort();
    observed.ignored.dedup();
    Ok(observed)
}

/// Where a region's consumers are counted, and where their activation queries run.
struct ConsumerScope<'a> {
    ctx: &'a Context,
    rollout: &'a ConfigRollout,
    /// The region's name.
    region: &'a str,
    /// The Prometheus the region names, if any.
    prometheus: &'a RegionPrometheus<'a>,
    /// The stage covering the region.
    stage: &'a str,
    /// How its activation queries are sent.
    queries: QueryScope<'a>,
}

impl ConsumerScope<'_> {
    fn source(&self) -> SampleSource<'_> {
        self.queries.source(self.prometheus.source(self.region))
    }
}

/// Where a region's gate and activation queries go: the Prometheus its Region names
/// (`spec.prometheus.url`, else the controller's default) with the credentials its
/// `spec.prometheus.auth` Secret holds.
pub struct RegionPrometheus<'r> {
    url: Option<&'r str>,
    credentials: Option<Result<Arc<Credentials>, String>>,
}

impl<'r> RegionPrometheus<'r> {
    /// What `region` names, its credentials read (or taken from the cache).
    pub async fn of(ctx: &Context, region: &'r Region) -> Self {
        let credentials = ctx
            .region_clients
            .prometheus_credentials(region)
            .await
            .map(|read| read.map_err(|error| error.to_string()));
        RegionPrometheus {
            url: region
                .spec
                .prometheus
                .as_ref()
                .map(|prometheus| prometheus.url.as_str()),
            credentials,
        }
    }

    /// The source of a sample of region `name`.
    pub fn source<'a>(&'a self, name: &'a str) -> SampleSource<'a> {
        SampleSource {
            region: Some(name),
            url: self.url,
            access: match &self.credentials {
                None => Access::Anonymous,
                Some(Ok(credentials)) => Access::With(credentials),
                Some(Err(why)) => Access::Unusable(why),
            },
            scoped: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdt::{Delta, Entry, Replica, WriterId};

    fn stamp(wall_ms: u64, writer: &str) -> Stamp {
        Stamp::new(wall_ms, 0, WriterId::parse(writer).expect("writer"))
    }

    fn replica(entries: &[(&str, u64, &str)]) -> Replica {
        let delta: Delta = entries
            .iter()
            .map(|(key, at, writer)| (*key, Entry::live("v", stamp(*at, writer))))
            .collect();
        let mut replica = Replica::new();
        replica.apply(&delta);
        replica
    }

    #[test]
    fn entries_frontiers_and_horizons_ahead_of_the_bound_are_counted() {
        let declared: BTreeMap<String, String> = [("a", "v"), ("b", "v")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let removed = Default::default();
        let reader = Reader {
            declared: &declared,
            removed: &removed,
            collected_through: None,
            stamp_bound_ms: 1_000,
        };
        let fine = replica(&[("a", 10, "rollout:team/r")]);
        assert_eq!(
            stamps(&fine, &reader, None),
            (Some(stamp(10, "rollout:team/r")), 0)
        );

        let entry_ahead = replica(&[("a", 5_000, "rollout:team/r")]);
        assert_eq!(stamps(&entry_ahead, &reader, None).1, 1);

        // Another writer's key, stamped ahead: not this rollout's key, but that writer's
        // frontier is ahead.
        let frontier_ahead = replica(&[("a", 10, "rollout:team/r"), ("x", 9_000, "override:bob")]);
        assert_eq!(stamps(&frontier_ahead, &reader, None).1, 1);

        // A horizon ahead hides both declared keys (neither is held).
        let mut horizon_ahead = Replica::new();
        crate::crdt::collect_tombstones(&mut horizon_ahead, &stamp(7_000, "rollout:team/r"));
        assert!(horizon_ahead.horizon().is_some(), "the horizon was raised");
        assert_eq!(stamps(&horizon_ahead, &reader, None).1, 2);
    }

    /// Issue 43, "say what a restore can't know": `gone` was overridden by a person in
    /// the region at 5, then removed by the rollout (at 8) and collected (through 9).
    /// A restore brings the override back: reported, once the rollout has collected past
    /// it, and only for keys the rollout itself removed.
    #[test]
    fn an_override_back_from_a_restore_is_reported_by_name() {
        let declared: BTreeMap<String, String> = [("kept", "v")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let removed: std::collections::BTreeSet<String> = ["gone".to_owned()].into();
        let restored = replica(&[
            ("kept", 3, "rollout:team/r"),
            ("gone", 5, "override:alice"),
            ("pinned", 12, "override:alice"),
            ("other-team", 4, "override:bob"),
        ]);
        let reader = |collected: Option<u64>| Reader {
            declared: &declared,
            removed: &removed,
            collected_through: collected.map(|wall| stamp(wall, "rollout:team/r")),
            stamp_bound_ms: u64::MAX,
        };
        let reported =
            |collected| restored_overrides(&restored, &reader(collected)).collect::<Vec<_>>();
        assert_eq!(reported(Some(9)), ["gone"]);
        assert!(
            reported(None).is_empty(),
            "nothing collected, nothing outlived"
        );
        assert!(
            reported(Some(4)).is_empty(),
            "made after the collection point"
        );
    }

    #[test]
    fn queries_leave_scoped_or_not_at_all() {
        let matchers = Matchers::parse(r#"namespace="tenant-a""#).expect("matchers");
        let scoped = QueryScope::Scoped(&matchers);
        assert_eq!(
            scoped.apply("max(load)").as_deref(),
            Ok(r#"max(load{namespace="tenant-a"})"#)
        );
        let refused = scoped
            .apply(r#"max(load{namespace="tenant-b"})"#)
            .expect_err("another tenant's namespace");
        assert!(refused.starts_with("not sent: "), "{refused}");
        assert!(refused.contains("label namespace"), "{refused}");
        assert!(scoped.source(SampleSource::default()).scoped);

        assert_eq!(
            QueryScope::AsWritten.apply("max(load)").as_deref(),
            Ok("max(load)")
        );
        assert!(!QueryScope::AsWritten.source(SampleSource::default()).scoped);
        // A grant that cannot be read sends nothing: it may have pinned matchers.
        assert!(QueryScope::Withheld.apply("max(load)").is_err());
    }
}
