//! Building what the engine decides on: the regions some stage selects (read
//! concurrently), who else writes the target there, whether the admission policies are
//! installed, and the gate samples due now. Nothing here writes.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use kube::ResourceExt;

use super::fetch::{Fetched, control};
use super::region_read::{ObservedRegion, QueryScope, Reader, RegionPrometheus, read_region};
use super::{Context, HubError, MAX_CLOCK_DRIFT};
use crate::api::annotations::SPEC_AUTHOR_ANNOTATION;
use crate::api::{ConfigRollout, ConfigRolloutSpec, Region};
use crate::crdt::{WriterId, desired_digest};
use crate::engine::{
    self, ApproverBinding, DesiredRevision, GateSampleObservation, Grant, Observations,
    RevisionAuthors, SourceStamp,
};
use crate::gates::{SampleSource, SeriesAnswer, Span};
use crate::regions::store::Snapshot;

/// The rollout's inputs once validated: who it writes as, and what it declares.
pub struct Validated {
    /// The rollout's writer id.
    pub writer: WriterId,
    /// The desired data (empty when it cannot be had).
    pub desired: BTreeMap<String, String>,
    /// What is wrong with the spec or the grant, reported as `InvalidSpec`.
    pub spec_errors: Vec<String>,
    /// Why the rollout may not write now because another rollout owns some of its keys
    /// (the claim step's answer), reported as `InvalidSpec` (`TargetRefused`).
    pub claim_refusal: Option<String>,
    /// Why the candidate's values are refused (see [`super::value_checks`]).
    pub value_violations: Vec<String>,
    /// The schemas the candidate was checked against.
    pub checked_schemas: Vec<crate::api::SchemaRecord>,
    /// The external validators that accepted the candidate.
    pub accepted_by: Vec<String>,
    /// When to look again because an external validator gave no verdict.
    pub retry_after: Option<std::time::Duration>,
}

/// What was read in each region (by Region name), for merges in the same reconcile.
pub type RegionReads = BTreeMap<String, Snapshot>;

/// Reads the regions and assembles the engine's observations, with what was read.
pub async fn observe(
    ctx: &Context,
    rollout: &ConfigRollout,
    fetched: &Fetched,
    validated: &Validated,
    now: DateTime<Utc>,
) -> Result<(Observations, RegionReads), HubError> {
    let status = rollout.status.clone().unwrap_or_default();
    let current = status
        .revision
        .as_ref()
        .and_then(|name| fetched.revisions.get(name));
    let collected_through = super::collect::collected_through(rollout);
    // Only a rollout that has collected can have an override outlive one of its keys.
    let removed = match collected_through {
        Some(_) => removed_keys(fetched.revisions.values(), current),
        None => Default::default(),
    };
    let reader = Reader {
        declared: &validated.desired,
        removed: &removed,
        collected_through,
        stamp_bound_ms: stamp_bound_ms(now),
    };
    // Only the regions some stage selects within the grant are read: the engine's own
    // selection, on labels alone, before any region IO. And those a revision reached
    // since the stable one that no stage selects any more (relabelled, or dropped from
    // the spec), still within the grant: a rollback must find them.
    let mut selected = selected_regions(&rollout.spec, &fetched.regions, &fetched.grant);
    for name in &status.reached {
        if fetched.grant.allows_region(name) && !selected.contains_key(name) {
            selected.insert(name.clone(), String::new());
        }
    }
    // Need to know: a spec outside its grant reads no region at all (no read, no watch,
    // no lookup), so its refusal reads the same whether the object it names exists or not.
    let outside_grant = !fetched.grant.check(&rollout.spec).is_empty();
    if outside_grant {
        selected.clear();
    }
    // Every query of the rollout leaves scoped to its namespace's gate-label-matchers.
    let queries = QueryScope::of(fetched);
    let observed = futures::future::join_all(fetched.regions.iter().filter_map(|region| {
        let stage = selected.get(region.name_any().as_str())?;
        Some(read_region(
            ctx, rollout, region, stage, &reader, current, queries,
        ))
    }))
    .await;
    for region in &observed {
        if let Some(stamp) = &region.latest_stamp {
            ctx.observe_stamp(stamp);
        }
    }
    let target_refusals = target_refusals(
        rollout,
        &fetched.grant,
        &observed,
        validated.claim_refusal.as_ref(),
    );
    let policies = if rollout.spec.needs_approvals() {
        Some(ctx.policies.report(&ctx.hub).await)
    } else {
        None
    };
    let approver_binding = if ctx.approver_enforced_externally {
        ApproverBinding::External
    } else {
        match policies
            .as_ref()
            .and_then(|report| report.approver_bound_since)
        {
            Some(since) => ApproverBinding::Policy { since },
            None => ApproverBinding::Missing,
        }
    };
    let missing_policies = policies.map(|report| report.missing);
    // A refused spec samples nothing either: a job gate's Job is a write in the region,
    // in the namespace the spec names now, and a web gate a call the spec asks for.
    let (gate_samples, pending_samples) = if outside_grant || !validated.spec_errors.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        sample_gates(ctx, rollout, &status, fetched, now, queries).await
    };
    let desired = &validated.desired;
    let stable = status
        .stable_revision
        .as_ref()
        .and_then(|name| fetched.revisions.get(name));
    let changes = current.map(|revision| revision.changes_to(desired, stable));
    let mut reads = RegionReads::new();
    let regions = observed
        .into_iter()
        .map(|region| {
            if let Some(read) = region.read {
                reads.insert(region.observation.name.clone(), read);
            }
            region.observation
        })
        .collect();
    let observations = Observations {
        generation: rollout.metadata.generation.unwrap_or_default(),
        desired: DesiredRevision {
            digest: if !validated.spec_errors.is_empty() || !validated.value_violations.is_empty() {
                String::new()
            } else if let Some(recorded) = current
                .filter(|revision| revision.declares(desired))
                .and_then(|revision| recorded_digest(&status, &revision.name))
            {
                // The same content as the current revision is that revision, whatever
                // digest the key gives it now (a restored or rotated key): declaring it
                // again would re-run every stage, gate and approval.
                recorded
            } else {
                desired_digest(&ctx.digest_keys.current(), desired)
            },
            keys_set: changes.map_or(u32::try_from(desired.len()).unwrap_or(u32::MAX), |c| c.set),
            keys_removed: changes.map_or(0, |c| c.removed),
        },
        fresh_stamp: ctx.fresh_stamp(&validated.writer).to_string(),
        regions,
        gate_samples,
        pending_samples,
        gate_templates: fetched.gate_templates.current.clone(),
        approvals: fetched.approvals.clone(),
        control: control(rollout),
        spec_errors: validated.spec_errors.clone(),
        grant: fetched.grant.clone(),
        target_refusals,
        value_violations: validated.value_violations.clone(),
        checked_schemas: validated.checked_schemas.clone(),
        accepted_by: validated.accepted_by.clone(),
        rollout_uid: rollout.metadata.uid.clone().unwrap_or_default(),
        spec_author: rollout.annotations().get(SPEC_AUTHOR_ANNOTATION).cloned(),
        revision_authors: RevisionAuthors::stamped(
            rollout
                .annotations()
                .get(SPEC_AUTHOR_ANNOTATION)
                .map(String::as_str),
            fetched.source_author.as_ref().map(|author| {
                author
                    .as_ref()
                    .map(|author| SourceStamp {
                        uid: &author.uid,
                        stamp: &author.stamp,
                    })
                    .map_err(String::as_str)
            }),
            status.authors_counted.as_ref(),
        ),
        four_eyes_default: ctx.four_eyes_default,
        gate_settle_time: ctx.gate_settle_time,
        missing_policies,
        approver_binding,
        revision_tombstones: current.map_or(0, |revision| {
            u32::try_from(revision.state.tombstones()).unwrap_or(u32::MAX)
        }),
    };
    Ok((observations, reads))
}

/// Stamps after this wall-clock time (ms) are further ahead than the drift bound.
fn stamp_bound_ms(now: DateTime<Utc>) -> u64 {
    let now_ms = u64::try_from(now.timestamp_millis()).unwrap_or_default();
    let drift_ms = u64::try_from(MAX_CLOCK_DRIFT.as_millis()).unwrap_or(u64::MAX);
    now_ms.saturating_add(drift_ms)
}

/// Why this rollout may not write some region's target: it exists and configrollout does
/// not manage it (and adoption was not asked for and granted), or an object with the
/// reserved name of its companion is there that configrollout did not make; or another
/// rollout owns keys this one declares (the claim step's answer, the same in every
/// region). Nothing is written anywhere while any holds.
fn target_refusals(
    rollout: &ConfigRollout,
    grant: &Grant,
    observed: &[ObservedRegion],
    claim_refusal: Option<&String>,
) -> Vec<String> {
    let target = &rollout.spec.target;
    let adopting = target.adopt && grant.adoption;
    let mut refusals: Vec<String> = claim_refusal.into_iter().cloned().collect();
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
        if region.findings.foreign_companion {
            refusals.push(format!(
                "spec.target: a ConfigMap named {}/{}{} exists in region {name} and was not \
                 made by configrollout for this target: that name is reserved for the target's \
                 state; it is never read as state, and nothing is written until it is gone",
                target.namespace,
                target.name,
                crate::regions::materialize::COMPANION_SUFFIX
            ));
        }
    }
    refusals
}

/// The Regions the spec's stages select (by name or by label) within the grant, each
/// with the name of the stage that covers it.
fn selected_regions(
    spec: &ConfigRolloutSpec,
    regions: &[Region],
    grant: &Grant,
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

/// Takes the gate samples due now, each from the Prometheus its region names in the
/// Regions read by this same reconcile, with the credentials it names, each query scoped
/// as `queries` says (one that cannot be is a query error, never sent unscoped).
async fn sample_gates(
    ctx: &Context,
    rollout: &ConfigRollout,
    status: &crate::api::ConfigRolloutStatus,
    fetched: &Fetched,
    now: DateTime<Utc>,
    queries: QueryScope<'_>,
) -> (Vec<GateSampleObservation>, Vec<engine::PendingSample>) {
    let regions = fetched.regions.as_slice();
    let due = engine::gates_due(&rollout.spec, status, now);
    if due.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // Each region's Prometheus once, however many of its gates (or comparisons) are due.
    let mut targets: BTreeMap<&str, RegionPrometheus<'_>> = BTreeMap::new();
    let baselines = due
        .iter()
        .filter_map(|request| request.comparison.as_ref())
        .flat_map(|comparison| comparison.baseline.iter())
        .map(|baseline| baseline.region.as_str());
    for name in due
        .iter()
        .filter_map(|request| request.region.as_deref())
        .chain(baselines)
    {
        if targets.contains_key(name) {
            continue;
        }
        if let Some(region) = regions.iter().find(|region| region.name_any() == name) {
            targets.insert(name, RegionPrometheus::of(ctx, region).await);
        }
    }
    let targets = &targets;
    // A few at a time: one rollout's samples do not take every query slot of the
    // controller (`prometheus::MAX_QUERIES_IN_FLIGHT`) from the others.
    let slots = &tokio::sync::Semaphore::new(GATE_QUERIES_PER_RECONCILE);
    let baselines = &sample_baselines(ctx, targets, &due, queries, slots).await;
    // Ok: the sample; Err: a sample started that has no answer yet.
    let samples = futures::future::join_all(due.iter().map(|request| async move {
        // Never closed; were it, the sample runs unqueued.
        let _slot = slots.acquire().await.ok();
        let source = queries.source(source_in(targets, request.region.as_deref()));
        let (answer, comparison) = match (&request.probe, &request.comparison) {
            (Some(probe), _) => {
                match super::probes::take(ctx, rollout, fetched, request, probe).await {
                    super::probes::ProbeAnswer::Answered(answer) => (answer, None),
                    super::probes::ProbeAnswer::Pending => {
                        return Err(engine::PendingSample {
                            gate: request.gate.clone(),
                            stage: request.stage.clone(),
                            region: request.region.clone(),
                        });
                    }
                }
            }
            (None, None) => match queries.apply(&request.query) {
                Ok(query) => (ctx.gates.sample(source, &query).await, None),
                Err(why) => (crate::gates::QueryResult::Error(why).into(), None),
            },
            (None, Some(comparison)) => {
                take_comparison(ctx, source, &request.query, comparison, queries, baselines).await
            }
        };
        Ok(GateSampleObservation {
            gate: request.gate.clone(),
            stage: request.stage.clone(),
            revision: request.revision.clone(),
            region: request.region.clone(),
            at: now,
            evaluated_at: answer.evaluated_at,
            result: answer.result,
            comparison,
        })
    }))
    .await;
    let mut answered = Vec::new();
    let mut pending = Vec::new();
    for sample in samples {
        match sample {
            Ok(sample) => answered.push(sample),
            Err(running) => pending.push(running),
        }
    }
    (answered, pending)
}

/// Where a sample of `region` (the default backend for none) is taken.
fn source_in<'a>(
    targets: &'a BTreeMap<&str, RegionPrometheus<'_>>,
    region: Option<&'a str>,
) -> SampleSource<'a> {
    match region {
        Some(name) => targets
            .get(name)
            .map(|target| target.source(name))
            .unwrap_or(SampleSource {
                region: Some(name),
                ..SampleSource::default()
            }),
        None => SampleSource::default(),
    }
}

/// A baseline side's answer, by the region, rendered query and span it was asked for.
type BaselineAnswers<'r> = HashMap<(&'r str, &'r str, Span), SeriesAnswer>;

/// Every distinct baseline side of the comparisons due, asked once: the windows of a
/// stage's regions, due together, share their baseline regions and span, and would
/// otherwise ask each baseline region once per canary region. Each query is scoped as
/// `queries` says; one that cannot be is never sent, and is its side's error.
async fn sample_baselines<'r>(
    ctx: &Context,
    targets: &BTreeMap<&str, RegionPrometheus<'_>>,
    due: &'r [engine::GateSampleRequest],
    queries: QueryScope<'_>,
    slots: &tokio::sync::Semaphore,
) -> BaselineAnswers<'r> {
    let mut seen = HashSet::new();
    let distinct: Vec<&engine::BaselineQuery> = due
        .iter()
        .filter_map(|request| request.comparison.as_ref())
        .flat_map(|comparison| &comparison.baseline)
        .filter(|baseline| seen.insert((&baseline.region, &baseline.query, baseline.span)))
        .collect();
    futures::future::join_all(distinct.into_iter().map(|baseline| async move {
        // Never closed; were it, the sample runs unqueued.
        let _slot = slots.acquire().await.ok();
        let answer = match queries.apply(&baseline.query) {
            Ok(query) => {
                let source = queries.source(source_in(targets, Some(&baseline.region)));
                ctx.gates.sample_range(source, &query, baseline.span).await
            }
            Err(why) => SeriesAnswer::Error(why),
        };
        (
            (
                baseline.region.as_str(),
                baseline.query.as_str(),
                baseline.span,
            ),
            answer,
        )
    }))
    .await
    .into_iter()
    .collect()
}

/// Both sides of a comparison gate's sample: the canary's range from its region's
/// Prometheus, each baseline's from `baselines` (asked of its own region's). Every query
/// is scoped as `queries` says; any side that errs or warns (or cannot be scoped, and is
/// not sent) makes the sample a query error or a partial answer, naming the side.
async fn take_comparison(
    ctx: &Context,
    canary_source: SampleSource<'_>,
    canary_query: &str,
    comparison: &engine::ComparisonRequest,
    queries: QueryScope<'_>,
    baselines: &BaselineAnswers<'_>,
) -> (crate::gates::Answer, Option<engine::ComparisonSample>) {
    use crate::gates::QueryResult;
    let canary_region = canary_source.region.unwrap_or_default();
    let canary = match queries.apply(canary_query) {
        Ok(query) => {
            ctx.gates
                .sample_range(canary_source, &query, comparison.canary)
                .await
        }
        Err(why) => SeriesAnswer::Error(why),
    };
    let missing = || SeriesAnswer::Error("not asked".to_owned());
    let sides = std::iter::once((format!("canary {canary_region}"), canary)).chain(
        comparison.baseline.iter().map(|baseline| {
            let key = (
                baseline.region.as_str(),
                baseline.query.as_str(),
                baseline.span,
            );
            let answer = baselines.get(&key).cloned().unwrap_or_else(missing);
            (format!("baseline {}", baseline.region), answer)
        }),
    );
    let mut points = engine::ComparisonSample {
        baseline_source: comparison.source.clone(),
        ..engine::ComparisonSample::default()
    };
    for (index, (side, answer)) in sides.enumerate() {
        match answer {
            SeriesAnswer::Points(values) if index == 0 => points.canary = values,
            SeriesAnswer::Points(values) => points.baseline.extend(values),
            SeriesAnswer::Error(why) => {
                return (QueryResult::Error(format!("{side}: {why}")).into(), None);
            }
            SeriesAnswer::Partial(why) => {
                return (QueryResult::Partial(format!("{side}: {why}")).into(), None);
            }
        }
    }
    (QueryResult::Empty.into(), Some(points))
}

/// Most gate queries one reconcile has in flight.
const GATE_QUERIES_PER_RECONCILE: usize = 4;

/// Keys some stored revision of the rollout wrote that its current revision's state no
/// longer has at all: keys it removed and collected. Its own, so naming them in its
/// status tells no other team anything.
fn removed_keys<'a>(
    revisions: impl Iterator<Item = &'a crate::regions::publication::RevisionState>,
    current: Option<&crate::regions::publication::RevisionState>,
) -> std::collections::BTreeSet<String> {
    let Some(current) = current else {
        return Default::default();
    };
    revisions
        .flat_map(|revision| revision.state.iter())
        .filter(|(key, _)| current.state.get(key).is_none())
        .map(|(key, _)| key.to_owned())
        .collect()
}

/// The digest `status.history` recorded for `revision`.
fn recorded_digest(status: &crate::api::ConfigRolloutStatus, revision: &str) -> Option<String> {
    status.record(revision)?.digest.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::tests::region;

    #[test]
    fn only_regions_a_stage_selects_are_read() {
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
        let selected = selected_regions(&spec, &regions, &Grant::default());
        assert_eq!(
            selected.into_iter().collect::<Vec<_>>(),
            vec![
                ("region-1".to_owned(), "canary".to_owned()),
                ("region-2".to_owned(), "prod".to_owned())
            ]
        );
    }
}
