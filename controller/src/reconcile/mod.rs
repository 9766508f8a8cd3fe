//! Glue: one reconcile of one rollout, as a short pipeline of named steps (see
//! [`reconcile`]). Every hub API call of the controller is in this module; region calls
//! are in [`crate::regions`]; every decision is the engine's.

pub mod act;
pub use configrollout_clusters::hub::{digest_keys, revision_cache, revision_store};
pub mod admission_policies;
mod claims;
mod collect;
mod error;
pub mod events;
pub mod fair_share;
#[cfg(feature = "fault-injection")]
pub mod fault_injection;
pub mod fence;
pub mod fetch;
pub mod held_status;
pub mod hub_cache;
mod notices;
pub mod observe;
mod probes;
mod region_read;
pub mod region_status;
pub mod status_writer;
mod superseded;
pub mod triggers;
pub mod value_checks;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::api::ConfigRollout;
use crate::crdt::{Hlc, LaggingClock, Stamp, WriterId};
use crate::engine;
use crate::gates::GateProvider;
use crate::regions::clients::RegionClients;
use crate::regions::publication::{RevisionState, encode_revision};
use crate::telemetry::metrics::{ErrorCategory, LabelValue, Metrics, ReconcileRecord, WriteKind};
use crate::telemetry::panics;
use act::ActInput;
pub use error::{ERROR_REQUEUE, HubError, INVALID_REQUEUE, ReconcileError, RetryBackoff};
pub use fence::WriteFence;
use fetch::Fetched;
use observe::Validated;
use status_writer::StatusWrite;

/// How long to wait before looking again when nothing asked for an earlier time, unless
/// the rollout is at rest ([`RESTING_REQUEUE`]): this bounds how late drift is noticed in
/// a region whose watch is not current (its RBAC refuses watch, or it is failing).
pub const IDLE_REQUEUE: Duration = Duration::from_secs(60);
/// How long a Complete rollout whose regions are all watched waits for its next look
/// without news: drift, a deleted or restored object, reaches it from the region's watch
/// at once ([`crate::regions::object_cache::RegionChange`]); this look is the safety net
/// for a change the watch missed. At 10,000 rollouts a look every [`IDLE_REQUEUE`] was
/// 167 reconciles a second with nothing to do.
pub const RESTING_REQUEUE: Duration = Duration::from_secs(5 * 60);
/// How soon to look again after a status computed from a stale read was refused.
const STALE_READ_REQUEUE: Duration = Duration::from_secs(1);
/// The shortest wait between two reconciles of one rollout.
const MIN_REQUEUE: Duration = Duration::from_millis(200);
/// Most rounds of observe -> decide -> act in one reconcile: enough for a few stages
/// without a wait, while one reconcile still holds its slot briefly.
const MAX_ROUNDS: u32 = 4;

/// Reconciles running at once (of different rollouts; one rollout is never reconciled
/// twice at once). Each holds its own hub and region requests, and every request in
/// flight holds a connection: unbounded, 1,000 rollouts created at once opened about
/// 3,800 connections and 300 MiB (`make scale-bench`, BENCHMARKS.md). The cost of the
/// bound: while a region's API server is slow to answer, reconciles that read it take
/// their slots for up to its connect or call timeout, and the others wait.
pub const MAX_CONCURRENT_RECONCILES: u16 = 32;

pub use configrollout_clusters::hub::{HUB_CALL_TIMEOUT, api_call};
/// How far ahead of the controller's clock a stamp may be before it is refused by the
/// clock, and reported when a region holds one.
pub const MAX_CLOCK_DRIFT: Duration = Duration::from_secs(60);

/// What every reconcile shares.
pub struct Context {
    /// The controller's own cluster.
    pub hub: kube::Client,
    /// The Regions, approvals and Namespaces of the hub, from the controller's watches.
    pub hub_cache: hub_cache::HubCache,
    /// Clients of the regions.
    pub region_clients: RegionClients,
    /// Key of every digest and companion MAC, read again when its Secret changes.
    pub digest_keys: Arc<digest_keys::DigestKeys>,
    /// The hybrid logical clock stamps are minted from (its writer is replaced by the
    /// rollout's or the adopting writer's).
    pub clock: Mutex<Hlc<LaggingClock>>,
    /// Writer of edits adopted under `driftPolicy: Adopt`.
    pub adopt_writer: WriterId,
    /// Where gate samples are taken.
    pub gates: Arc<dyn GateProvider>,
    /// Where web gates' samples are taken.
    pub web_gates: crate::web_gate::WebGateClient,
    /// Events on rollouts.
    pub events: events::EventPublisher,
    /// The check every write passes: this replica holds the Lease of the rollout's shard
    /// now.
    pub fence: WriteFence,
    /// Consecutive failures per rollout, for retries that back off.
    pub backoff: RetryBackoff,
    /// Versions of rollouts this replica's status writes replaced: a reconcile handed one
    /// waits for the watch.
    pub superseded: superseded::SupersededVersions,
    /// Status changes of gate samples only, held to be written with the next.
    pub held_statuses: held_status::HeldStatuses,
    /// The process's metrics.
    pub metrics: Arc<Metrics>,
    /// Whether every rollout requires four-eyes approvals (`--four-eyes`).
    pub four_eyes_default: bool,
    /// The shortest gate interval this controller samples at (`--min-gate-interval`).
    pub min_gate_interval: std::time::Duration,
    /// The platform binds a StageApproval's `spec.approver` to its creator some other
    /// way than the shipped policy (`--approver-enforced-externally`): approvals count
    /// without it.
    pub approver_enforced_externally: bool,
    /// How long gate windows wait after a stage's regions are done where nothing shows
    /// that consumers loaded the revision (`--gate-settle-time`).
    pub gate_settle_time: std::time::Duration,
    /// Whether the admission policies approvals rely on are installed.
    pub policies: admission_policies::PolicyCheck,
    /// The reconcile slots each namespace may hold at once.
    pub namespace_shares: fair_share::NamespaceShares,
    /// Compiled schemas and external validators' verdicts on candidates.
    pub value_checks: value_checks::ValueChecks,
    /// Delivers the notices of rollouts' outboxes to their sinks.
    pub notifier: Arc<crate::notifications::Notifier>,
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
    pub(crate) fn observe_stamp(&self, stamp: &Stamp) {
        let result = match self.clock.lock() {
            Ok(mut clock) => clock.observe(stamp),
            Err(poisoned) => poisoned.into_inner().observe(stamp),
        };
        if let Err(error) = result {
            tracing::warn!(%error, "stored revision stamp not observed");
        }
    }
}

/// One reconcile of one rollout, and its metrics.
pub async fn reconcile(
    rollout: Arc<ConfigRollout>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    if ctx.fence.shards().is_sharded() && !ctx.fence.holds(&rollout) {
        // Another replica's shard: no read, no write. When this replica acquires the
        // shard (or renews it after a lapse), the controller restarts and every rollout
        // is reconciled again; the requeue is only a safety net, and costs a hash.
        tracing::debug!(
            rollout = %rollout.name_any(),
            shard = ctx.fence.shard_of(&rollout),
            "shard not held here: skipped"
        );
        return Ok(Action::requeue(IDLE_REQUEUE));
    }
    if ctx.superseded.is_superseded(&rollout) {
        // This replica wrote over this version; the watch brings the write, and with it
        // another reconcile. The requeue is only a safety net.
        tracing::debug!(rollout = %rollout.name_any(), "version already written over: skipped");
        return Ok(Action::requeue(STALE_READ_REQUEUE));
    }
    let started = Instant::now();
    let namespace = rollout.namespace().unwrap_or_default();
    let Some(_slot) = ctx.namespace_shares.try_enter(&namespace, started) else {
        // Its namespace runs its share of the slots: another namespace's rollout gets
        // this one. Nothing was read or written.
        ctx.metrics.reconciles_deferred_total.inc();
        tracing::debug!(rollout = %rollout.name_any(), %namespace, "namespace at its share: deferred");
        return Ok(Action::requeue(fair_share::DEFERRED_REQUEUE));
    };
    let mut record = ReconcileRecord::default();
    // A panic stops this rollout only: kube-runtime would re-raise it in the stream every
    // rollout shares, and end the work loop.
    let result = panics::catch(run_steps(&rollout, &ctx, &mut record))
        .await
        .unwrap_or_else(|caught| {
            Err(ReconcileError::Panicked {
                location: caught.location_or_unknown().to_owned(),
            })
        });
    record.duration = started.elapsed();
    record.error = result.as_ref().err().map(ReconcileError::category);
    ctx.metrics.record_reconcile(&record);
    if let Err(error) = &result {
        tracing::warn!(
            rollout = %rollout.name_any(),
            namespace = %rollout.namespace().unwrap_or_default(),
            category = error.category().as_str(),
            %error,
            "reconcile failed"
        );
        report_failure(&ctx, &rollout, error).await;
    }
    result
}

/// Tells the rollout's owners why it is blocked: a Warning Event on the rollout and the
/// `ReconcileFailed` condition in its status, naming the step and the cause (names and
/// HTTP reasons, never values). The publisher folds repeats into one Event with a count;
/// the condition is written once per cause. A replica that does not lead says nothing.
async fn report_failure(ctx: &Context, rollout: &ConfigRollout, error: &ReconcileError) {
    if error.category() == ErrorCategory::NotLeader {
        return;
    }
    // Events notes are capped by the apiserver (1 KiB); an error is cut well before.
    let message: String = format!("{error} (retried in {:?})", error.retry_after())
        .chars()
        .take(900)
        .collect();
    if ctx.fence.permits(rollout, WriteKind::Event) {
        act::publish_event(
            &ctx.events,
            rollout,
            engine::EventType::Warning,
            error.event_reason(),
            &message,
        )
        .await;
    }
    let previous = rollout.status.clone().unwrap_or_default();
    let generation = rollout.metadata.generation.unwrap_or_default();
    let status = engine::reconcile_failed(
        &previous,
        generation,
        error.event_reason(),
        &error.to_string(),
        Utc::now(),
    );
    // The reason and message stay put while the same cause repeats: an unchanged
    // status is not written again.
    let unchanged_cause = previous
        .true_condition(crate::api::conditions::RECONCILE_FAILED)
        .is_some_and(|condition| condition.reason == error.event_reason());
    if unchanged_cause {
        return;
    }
    let mut record = ReconcileRecord::default();
    if let Err(error) = status_writer::write_status(ctx, rollout, &status, &mut record).await {
        tracing::debug!(%error, "ReconcileFailed condition not written");
    }
}

/// The steps, in order: fetch (hub) -> validate -> observe (regions) -> decide (engine,
/// pure) -> act (regions, hub) -> settle (engine, pure) -> write status (hub) -> prune
/// (hub). Every write passes [`Context::fence`].
async fn run_steps(
    rollout: &ConfigRollout,
    ctx: &Context,
    record: &mut ReconcileRecord,
) -> Result<Action, ReconcileError> {
    #[cfg(feature = "fault-injection")]
    fault_injection::maybe_panic(rollout);
    // The status held back from the last reconcile, if the rollout has not changed since:
    // this reconcile goes on from its samples. `stored` is the rollout as read, whose
    // status a write replaces.
    let stored = rollout;
    let overlaid = ctx.held_statuses.overlay(stored);
    let rollout = overlaid.as_ref().unwrap_or(stored);
    let now = Utc::now();
    let mut fetched = fetch::fetch(ctx, rollout)
        .await
        .map_err(ReconcileError::Fetch)?;
    // From here on the rollout's template gates are what they sample (see
    // `engine::gate_templates`); `stored` keeps the spec as written.
    let resolved = with_effective_gates(rollout, rollout.status.as_ref(), &fetched);
    let template_errors = resolved
        .as_ref()
        .map(|(_, errors)| errors.clone())
        .unwrap_or_default();
    let rollout = resolved.as_ref().map_or(rollout, |(resolved, _)| resolved);
    let mut validated = validate(rollout, &fetched, now, ctx.min_gate_interval)
        .map_err(ReconcileError::Validate)?;
    validated
        .spec_errors
        .extend(template_errors.iter().map(ToString::to_string));
    // A candidate's values are checked once the spec is sound, before anything is
    // claimed or written.
    if validated.spec_errors.is_empty()
        && value_checks::is_candidate(rollout, &fetched, &validated.desired)
    {
        let checked = value_checks::check(ctx, rollout, &fetched, &validated.desired)
            .await
            .map_err(ReconcileError::Validate)?;
        validated.value_violations = checked.violations;
        validated.checked_schemas = checked.schemas;
        validated.accepted_by = checked.accepted_by;
        validated.retry_after = checked.retry_after;
    }
    // Keys are claimed in the hub before any region is read, and only by a rollout the
    // engine will let write: one it refuses declares nothing (and keeps what it holds).
    let claimable = validated.spec_errors.is_empty()
        && validated.value_violations.is_empty()
        && fetched.grant.check(&rollout.spec).is_empty()
        && engine::validate(&rollout.spec).is_empty()
        && rollout.metadata.uid.is_some();
    if claimable {
        validated.claim_refusal = claims::settle(ctx, rollout, &fetched, &validated.desired)
            .await
            .map_err(ReconcileError::Validate)?;
    }
    let mut report = act::ActReport::default();
    // Rounds of observe -> decide -> act -> settle, while a round changed what regions
    // hold and moved the rollout (`engine::observe_again`): the next round sees the
    // regions' answers to those writes (from memory, see regions::object_cache), so
    // stages without a wait pass in one reconcile and one status write.
    let mut observed = std::borrow::Cow::Borrowed(rollout);
    let mut now = now;
    let mut rounds = 1;
    // What each round changed, from the status as stored: the notices of this reconcile.
    // Tracked only for a rollout someone subscribed to (most are not): it costs a status
    // copy per round.
    let subscriptions = crate::notify::subscriptions(&rollout.spec, &fetched.grant);
    let mut announced =
        (!subscriptions.is_empty()).then(|| stored.status.clone().unwrap_or_default());
    let mut transitions = Vec::new();
    let rounds_result = async {
        loop {
            let input = RoundInput {
                rollout,
                observed: &observed,
                validated: &validated,
                now,
            };
            let round = one_round(ctx, input, &mut fetched, record, &mut report).await?;
            if let Some(announced) = announced.as_mut() {
                transitions.extend(crate::notify::transitions(announced, &round.status));
                announced.clone_from(&round.status);
            }
            let again = rounds < MAX_ROUNDS
                && engine::observe_again(
                    &round.actions,
                    &round.outcome,
                    &round.previous,
                    &round.status,
                );
            if !again {
                break Ok::<_, ReconcileError>(round);
            }
            let mut next = with_effective_gates(stored, Some(&round.status), &fetched)
                .map_or_else(|| rollout.clone(), |(next, _)| next);
            next.status = Some(round.status);
            observed = std::borrow::Cow::Owned(next);
            now = Utc::now();
            rounds += 1;
        }
    }
    .await;
    // The Events of every round, also of rounds before one that failed: what they tell
    // happened in the regions.
    act::publish_events(ctx, rollout, std::mem::take(&mut report.events)).await;
    let last = rounds_result?;

    let mut status = last.status;
    collect::collect(ctx, rollout, &last.observations, &mut status).await;
    let remind_in = notices::raise(ctx, stored, &subscriptions, &mut status, transitions, now);
    let held = ctx
        .held_statuses
        .hold(stored, stored.status.as_ref(), &status, Instant::now());
    let written = match held {
        Some(_) => {
            record.status_held = true;
            StatusWrite::Unchanged
        }
        None => status_writer::write_status(ctx, stored, &status, record)
            .await
            .map_err(ReconcileError::WriteStatus)?,
    };
    if written == StatusWrite::Stale {
        // The rollout changed since it was read: its watch brings the new version, and
        // the next reconcile decides from it.
        return Ok(Action::requeue(STALE_READ_REQUEUE));
    }

    // The notices as written (or as stored, when nothing was written) go out now.
    let outbox = match written {
        StatusWrite::Written => status.notifications.as_ref(),
        _ => stored
            .status
            .as_ref()
            .and_then(|status| status.notifications.as_ref()),
    };
    notices::offer(ctx, stored, outbox);

    prune(ctx, rollout, &fetched, &status)
        .await
        .map_err(ReconcileError::Prune)?;
    let key = rollout_key(rollout);
    // Complete, and every region's target namespace watched: a change there wakes the
    // rollout (`RegionChange`), so the look without news can wait longer.
    let idle = if is_resting(ctx, rollout, &fetched, &status) {
        RESTING_REQUEUE
    } else {
        IDLE_REQUEUE
    };
    // Failing merges back off, but never past a timer the engine set: a deadline (a
    // stage's, a rollback's) must fire on time even while a region refuses every write.
    let requeue = if report.region_failures() > 0 {
        let backoff = ctx.backoff.failed(&key, ERROR_REQUEUE);
        last.requeue_after.map_or(backoff, |wake| wake.min(backoff))
    } else {
        ctx.backoff.succeeded(&key);
        last.requeue_after.unwrap_or(idle)
    };
    // A held status is written once its time comes, whatever the engine waits for.
    let requeue = held.map_or(requeue, |wait| requeue.min(wait));
    // A stage waiting for its approval is announced again on time.
    let requeue = remind_in.map_or(requeue, |remind| requeue.min(remind));
    // A validator that gave no verdict is asked again soon.
    let requeue = validated
        .retry_after
        .map_or(requeue, |retry| requeue.min(retry));
    let requeue = requeue.clamp(MIN_REQUEUE, idle);
    Ok(Action::requeue(if requeue == idle {
        spread(idle, &key)
    } else {
        requeue
    }))
}

/// Whether the rollout is Complete and a watch of every region's target namespace is
/// current, so that drift there reaches it as a change rather than at its next look.
fn is_resting(
    ctx: &Context,
    rollout: &ConfigRollout,
    fetched: &Fetched,
    status: &crate::api::ConfigRolloutStatus,
) -> bool {
    let namespace = &rollout.spec.target.namespace;
    status.phase == Some(crate::api::RolloutPhase::Complete)
        && !status.regions.is_empty()
        && status.regions.iter().all(|listed| {
            fetched
                .regions
                .iter()
                .find(|region| region.metadata.name.as_deref() == Some(listed.name.as_str()))
                .is_some_and(|region| ctx.region_clients.objects(region, namespace).is_watched())
        })
}

/// `wait`, less a random part of its last fifth: rollouts that completed in the same
/// wave (thousands, at scale) are looked at again spread out rather than all in the
/// same second, and stay spread at every later look.
fn spread(wait: Duration, key: &str) -> Duration {
    use std::hash::BuildHasher;
    let spread_ms = u64::try_from((wait / 5).as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    // A fresh RandomState is seeded anew: a random draw without a dependency.
    let draw = std::collections::hash_map::RandomState::new().hash_one(key);
    wait.saturating_sub(Duration::from_millis(draw % spread_ms))
}

/// What one round decides from: the rollout as fetched, and as this round sees it (its
/// status as the previous round left it).
struct RoundInput<'a> {
    rollout: &'a ConfigRollout,
    observed: &'a ConfigRollout,
    validated: &'a Validated,
    now: chrono::DateTime<Utc>,
}

/// What one round observed, decided and found acting.
struct Round {
    observations: engine::Observations,
    /// The status the round decided from.
    previous: crate::api::ConfigRolloutStatus,
    actions: Vec<engine::Action>,
    outcome: engine::ActOutcome,
    /// The status after acting (settled).
    status: crate::api::ConfigRolloutStatus,
    requeue_after: Option<Duration>,
}

/// One round: observe (regions) -> decide (engine, pure) -> act (regions, hub) -> settle
/// (engine, pure). Writes made are added to `report` and `record` before an error.
async fn one_round(
    ctx: &Context,
    input: RoundInput<'_>,
    fetched: &mut Fetched,
    record: &mut ReconcileRecord,
    report: &mut act::ActReport,
) -> Result<Round, ReconcileError> {
    let RoundInput {
        rollout,
        observed,
        validated,
        now,
    } = input;
    let (observations, mut region_reads) = observe::observe(ctx, observed, fetched, validated, now)
        .await
        .map_err(ReconcileError::Observe)?;
    let previous = observed.status.clone().unwrap_or_default();
    // `observed` carries the gates as the windows of its status sample them.
    let decision = engine::decide(&observed.spec, previous.clone(), &observations, now);
    record.samples_judged.add(&decision.samples_judged);
    record
        .dry_run_samples_judged
        .add(&decision.dry_run_samples_judged);
    // A region's whole replica is held only for the merges that plan from it.
    region_reads.retain(|region, _| {
        decision.actions.iter().any(|action| match action {
            engine::Action::Publish { region: to, .. }
            | engine::Action::Rollback { region: to, .. } => to == region,
            _ => false,
        })
    });

    let mut round_report = act::ActReport::default();
    let acted = act::act(
        ctx,
        ActInput {
            rollout,
            writer: &validated.writer,
            desired: &validated.desired,
            revisions: &mut fetched.revisions,
            regions: &fetched.regions,
            grant: &fetched.grant,
            first_reads: std::sync::Mutex::new(region_reads),
        },
        &decision.actions,
        &mut round_report,
    )
    .await;
    report.add(&round_report);
    // Counted before an error is returned: the writes made before it happened.
    record.region_writes = report.region_writes;
    record.region_write_conflicts = report.region_conflicts;
    record.region_write_failures = report.region_failures();
    acted.map_err(ReconcileError::Act)?;

    Ok(Round {
        observations,
        previous,
        actions: decision.actions,
        status: engine::settle(decision.status, &round_report.outcome),
        outcome: round_report.outcome,
        requeue_after: decision.requeue_after,
    })
}

/// `rollout` with its template gates replaced by what they sample as of `status` (the
/// check their sampling windows recorded, or their template's now), and the errors of
/// those that cannot be resolved; `None` for a rollout without template gates.
fn with_effective_gates(
    rollout: &ConfigRollout,
    status: Option<&crate::api::ConfigRolloutStatus>,
    fetched: &Fetched,
) -> Option<(ConfigRollout, Vec<engine::SpecError>)> {
    if rollout
        .spec
        .gates
        .iter()
        .all(|gate| gate.template.is_none())
    {
        return None;
    }
    let mut resolved = rollout.clone();
    let empty = crate::api::ConfigRolloutStatus::default();
    let (spec, errors) = engine::gate_templates::effective_spec(
        &rollout.spec,
        status.unwrap_or(&empty),
        &fetched.gate_templates,
    );
    resolved.spec = spec;
    Some((resolved, errors))
}

/// The key a rollout's retry backoff is counted under.
pub fn rollout_key(rollout: &ConfigRollout) -> String {
    format!(
        "{}/{}",
        rollout.namespace().unwrap_or_default(),
        rollout.name_any()
    )
}

/// Checks what was fetched before any region is read: a rollout that cannot name itself
/// as a writer is an error; a bad grant or missing data is reported in status
/// (`InvalidSpec`) by the engine, with nothing written.
fn validate(
    rollout: &ConfigRollout,
    fetched: &Fetched,
    now: chrono::DateTime<Utc>,
    min_gate_interval: std::time::Duration,
) -> Result<Validated, HubError> {
    let namespace = rollout.namespace().unwrap_or_default();
    let writer =
        WriterId::rollout(&namespace, &rollout.name_any()).map_err(|source| HubError::Writer {
            reason: source.to_string(),
        })?;
    let mut spec_errors: Vec<String> = fetched.grant_error.iter().cloned().collect();
    let desired = match &fetched.desired {
        Ok(desired) => desired.clone(),
        Err(error) => {
            spec_errors.push(error.clone());
            Default::default()
        }
    };
    // The schema's floor (1s) is the engine's to report; a platform's higher one is this
    // controller's.
    for (index, gate) in rollout.spec.gates.iter().enumerate() {
        let below_platform_floor =
            crate::api::parse_duration(&gate.interval).is_ok_and(|interval| {
                interval >= crate::api::GATE_INTERVAL_FLOOR && interval < min_gate_interval
            });
        if below_platform_floor {
            spec_errors.push(format!(
                "spec.gates[{index}].interval: must be at least {} on this controller \
                 (--min-gate-interval)",
                crate::api::schema::floor_text(min_gate_interval)
            ));
        }
    }
    if spec_errors.is_empty()
        && let Some(error) = oversized_revision(rollout, &fetched.revisions, &desired, &writer, now)
    {
        spec_errors.push(error);
    }
    Ok(Validated {
        writer,
        desired,
        spec_errors,
        claim_refusal: None,
        value_violations: Vec::new(),
        checked_schemas: Vec::new(),
        accepted_by: Vec::new(),
        retry_after: None,
    })
}

/// Why the revision `desired` would declare cannot be stored, if so: its state and the
/// values it replaces (both kept in one ControllerRevision) over the object size limit.
/// Checked before anything is written, so the rollout reports InvalidSpec and touches no
/// region, instead of failing to save on every reconcile.
fn oversized_revision(
    rollout: &ConfigRollout,
    revisions: &std::collections::BTreeMap<String, RevisionState>,
    desired: &std::collections::BTreeMap<String, String>,
    writer: &WriterId,
    now: chrono::DateTime<Utc>,
) -> Option<String> {
    let status = rollout.status.as_ref();
    let current = status
        .and_then(|status| status.revision.as_ref())
        .and_then(|name| revisions.get(name));
    if current.is_some_and(|current| current.desired() == *desired) {
        return None;
    }
    let stable = status
        .and_then(|status| status.stable_revision.as_ref())
        .and_then(|name| revisions.get(name));
    let latest = act::latest_before(revisions, i64::MAX);
    let now_ms = u64::try_from(now.timestamp_millis()).unwrap_or_default();
    let candidate = RevisionState::declare(
        "next",
        latest,
        stable,
        desired,
        Stamp::new(now_ms, 0, writer.clone()),
    );
    let limit = crate::crdt::codec::MAX_ENCODED_BYTES;
    let size = match encode_revision(&candidate) {
        Ok((state, previous)) => state.len().saturating_add(previous.len()),
        Err(_) => usize::MAX,
    };
    (size > limit).then(|| {
        let size = if size == usize::MAX {
            "more than that".to_owned()
        } else {
            format!("{size} bytes")
        };
        format!(
            "spec.data: the next revision cannot be stored: its state and the values it \
             replaces need {size} in one ControllerRevision, over the limit of {limit} \
             bytes; remove keys or shorten values"
        )
    })
}

/// Deletes the stored revisions that neither the status nor its history names.
async fn prune(
    ctx: &Context,
    rollout: &ConfigRollout,
    fetched: &Fetched,
    status: &crate::api::ConfigRolloutStatus,
) -> Result<(), HubError> {
    let keep: BTreeSet<&str> = status
        .history
        .iter()
        .map(|record| record.name.as_str())
        .chain(status.revision.as_deref())
        .collect();
    if fetched
        .revisions
        .keys()
        .all(|name| keep.contains(name.as_str()))
    {
        return Ok(());
    }
    if !ctx.fence.permits(rollout, WriteKind::Revision) {
        return Err(HubError::NotLeader);
    }
    fetched
        .store
        .prune(rollout, &fetched.revisions, |name| keep.contains(name))
        .await
}

#[cfg(test)]
pub(crate) mod tests;
