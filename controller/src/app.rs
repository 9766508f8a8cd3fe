//! The controller process: options, start-up, the leader-gated controller loop, the Region
//! probe, the probe server, and the stop order on SIGTERM.
//!
//! Stop order: stop taking work (the controller drains the reconcile in flight), stop the
//! Region probe, then cancel the elector, which releases the Lease, so nothing this process
//! does is written after a standby takes over.

mod options;
mod start;
mod work;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use kube::api::{Api, ListParams};
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;

pub use crate::api::CONTROLLER_NAME;
use crate::api::ConfigRollout;
use crate::crdt::{Hlc, LaggingClock, WriterId};
use crate::leader::{LeaderElector, LeaderError, LeaderState, LeaseConfig, ShardElector, Shards};
use crate::prometheus::PrometheusProvider;
use crate::reconcile::events::EventPublisher;
use crate::reconcile::{self, Context, WriteFence, digest_keys};
use crate::regions::clients::{CredentialPolicy, RegionClients};
use crate::shutdown::Signals;
use crate::telemetry::health::{self, Health, ServerLimits};
use crate::telemetry::logging;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::panics;
use digest_keys::DigestKeys;
pub use options::Options;
use start::{ensure_digest_key, hub_clients};
use work::{follow_secret_versions, lead_and_work, probe_regions};

/// Why the controller could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Logging, probe server or signal set-up failed.
    #[error("start-up: {0}")]
    Startup(String),
    /// The hub cluster could not be reached or configured.
    #[error("hub: {0}")]
    Hub(String),
    /// The digest key could not be read or created.
    #[error("digest key Secret {namespace}/{name}: {reason}")]
    DigestKey {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A task the controller cannot work without ended (the work loop, the elector or
    /// the region probe): the process released its Lease and exits so that a standby, or
    /// the restarted pod, takes over at once.
    #[error("{0}: the Lease was released and the process exits")]
    TaskEnded(&'static str),
}

/// The whole program: options from the command line, a runtime, [`run`]; exit code 2 for
/// bad usage (with the usage printed), 1 for a failure.
pub fn main() -> std::process::ExitCode {
    use std::process::ExitCode;
    let options = match Options::parse_args(std::env::args_os()) {
        Ok(options) => options,
        Err(error) => {
            // --help and --version go to stdout and exit 0; mistakes to stderr, exit 2.
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{CONTROLLER_NAME}: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{CONTROLLER_NAME}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the controller until SIGTERM or SIGINT.
pub async fn run(options: Options) -> Result<(), AppError> {
    logging::init(options.log_format, &options.log_filter)
        .map_err(|e| AppError::Startup(e.to_string()))?;
    panics::install_hook();
    // reqwest is built without a bundled TLS provider; use ring, as kube does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut signals = Signals::install().map_err(|e| AppError::Startup(e.to_string()))?;
    let (hub, watch_hub) = hub_clients().await?;
    let digest_key = ensure_digest_key(&hub, &options).await?;
    if options.accept_unsigned_states {
        tracing::warn!(
            "--accept-unsigned-states: region states without a MAC are trusted and signed; \
             turn it off once every region's state is signed"
        );
    }
    tracing::info!(
        key_id = %digest_key.id(),
        previous_key_id = digest_key.previous_id().unwrap_or_default(),
        "digest key read"
    );
    let digest_keys = Arc::new(DigestKeys::new(
        digest_key,
        &options.namespace,
        &options.digest_key_secret,
        options.accept_unsigned_states,
    ));

    let stop_work = CancellationToken::new();
    let stop_election = CancellationToken::new();
    type Election = futures::future::BoxFuture<'static, Result<(), LeaderError>>;
    let (leader, shards, election): (LeaderState, Shards, Option<Election>) = if options.shards > 1
    {
        let config = LeaseConfig::new(&options.namespace, &options.lease_name, &options.identity)
            .with_lease_duration(options.lease_duration);
        let (elector, shards) = ShardElector::new(hub.clone(), config, options.shards)
            .map_err(|e| AppError::Startup(e.to_string()))?;
        let run = elector.run(stop_election.clone()).boxed();
        (shards.any().clone(), shards, Some(run))
    } else if options.leader_election {
        let config = LeaseConfig::new(&options.namespace, &options.lease_name, &options.identity)
            .with_lease_duration(options.lease_duration);
        let (elector, state) = LeaderElector::new(hub.clone(), config)
            .map_err(|e| AppError::Startup(e.to_string()))?;
        let run = elector.run(stop_election.clone()).boxed();
        let shards = Shards::single(state.clone(), options.identity.clone());
        (state, shards, Some(run))
    } else {
        let state = LeaderState::always_leading();
        let shards = Shards::single(state.clone(), options.identity.clone());
        (state, shards, None)
    };
    let metrics = Arc::new(if shards.is_sharded() {
        Metrics::with_shards(shards.clone())
    } else {
        Metrics::new()
    });
    metrics.follow_leader(leader.clone());
    let health = Health::new(leader.clone());
    let listener = health::bind(options.probe_addr)
        .await
        .map_err(|e| AppError::Startup(e.to_string()))?;

    let server = tokio::spawn(health::serve(
        listener,
        health.clone(),
        metrics.clone(),
        ServerLimits::default(),
        stop_election.clone(),
    ));
    let mut tasks = Tasks {
        election: election.map(tokio::spawn),
        work: None,
        probe: None,
    };

    // Bounded in time, and following no redirect: a gate's answer comes from the
    // Prometheus the Region names or from none.
    let http = crate::prometheus::http_client(None)
        .map_err(|e| AppError::Startup(format!("HTTP client: {e}")))?;
    let fence = WriteFence::sharded(shards.clone(), metrics.clone());
    let notifier = crate::notifications::Notifier::new(
        hub.clone(),
        options.namespace.clone(),
        CONTROLLER_NAME.to_owned(),
        fence.clone(),
        metrics.clone(),
        stop_work.clone(),
    );
    let ctx = Arc::new(Context {
        hub: hub.clone(),
        hub_cache: Default::default(),
        region_clients: RegionClients::new(
            hub.clone(),
            watch_hub.clone(),
            CredentialPolicy {
                controller_namespace: options.namespace.clone(),
                allow_unsafe_kubeconfig: options.allow_unsafe_kubeconfig,
            },
        ),
        digest_keys: digest_keys.clone(),
        clock: Mutex::new(Hlc::with_clock(
            WriterId::rollout(&options.namespace, CONTROLLER_NAME)
                .map_err(|e| AppError::Startup(e.to_string()))?,
            u64::try_from(reconcile::MAX_CLOCK_DRIFT.as_millis()).unwrap_or(u64::MAX),
            LaggingClock::behind(options.clock_behind_ms),
        )),
        adopt_writer: WriterId::override_by("drift-adopted")
            .map_err(|e| AppError::Startup(e.to_string()))?,
        gates: Arc::new(PrometheusProvider::new(
            http,
            options.prometheus_url.clone(),
            options.prometheus_limits(),
        )),
        web_gates: crate::web_gate::WebGateClient::new(crate::web_gate::WebLimits::default()),
        events: EventPublisher::new(hub.clone(), CONTROLLER_NAME),
        fence,
        backoff: Default::default(),
        superseded: Default::default(),
        held_statuses: Default::default(),
        metrics: metrics.clone(),
        four_eyes_default: options.four_eyes,
        approver_enforced_externally: options.approver_enforced_externally,
        gate_settle_time: options.gate_settle_time,
        min_gate_interval: options.min_gate_interval,
        policies: Default::default(),
        namespace_shares: reconcile::fair_share::NamespaceShares::new(usize::from(
            reconcile::MAX_CONCURRENT_RECONCILES,
        )),
        value_checks: reconcile::value_checks::ValueChecks::new(options.namespace.clone()),
        notifier,
    });

    // A rotated key reaches this process without a restart. The task ends with the
    // process; a failed read keeps the key held.
    tokio::spawn({
        let hub = hub.clone();
        let stop = stop_work.clone();
        async move { digest_keys.follow(hub, stop).await }
    });
    follow_secret_versions(
        &ctx,
        watch_hub.clone(),
        &options.namespace,
        stop_work.clone(),
    );

    // Caches: the controller's watches need the CRDs served; one list proves it.
    let rollouts: Api<ConfigRollout> = Api::all(hub.clone());
    reconcile::api_call(
        "list rollouts",
        rollouts.list(&ListParams::default().limit(1)),
    )
    .await
    .map_err(|e| AppError::Hub(e.to_string()))?;
    health.mark_caches_synced();

    tasks.probe = Some(tokio::spawn(probe_regions(ctx.clone(), stop_work.clone())));
    let acquisitions = shards.is_sharded().then(|| shards.acquisitions());
    tasks.work = Some(tokio::spawn(lead_and_work(
        ctx,
        watch_hub,
        leader,
        acquisitions,
        stop_work.clone(),
    )));

    // Until a signal, every task runs for good: one that ends has failed, and the process
    // can no longer do its work. It stops as on a signal (the Lease is released below) and
    // exits non-zero: a standby takes the Lease at once, and the kubelet restarts the pod,
    // rather than a leader holding the Lease while nothing is reconciled.
    let ended = tokio::select! {
        signal = signals.recv() => {
            tracing::info!(signal = signal.as_str(), "stopping: no new work");
            None
        }
        reason = tasks.first_to_end() => {
            tracing::error!(reason, "a task the controller needs ended: releasing the Lease and exiting");
            health.mark_dead(reason);
            Some(reason)
        }
    };
    health.mark_stopping();
    stop_work.cancel();
    // Shutdown is one-way and bounded whatever the hub does: the reconciles in flight get
    // WORK_STOP_GRACE (or until a second signal) and are then abandoned, which is safe
    // because every write is idempotent and the Lease is still held until released.
    tokio::select! {
        biased;
        () = async {
            let _ = join(&mut tasks.work).await;
            let _ = join(&mut tasks.probe).await;
        } => {}
        () = tokio::time::sleep(WORK_STOP_GRACE) => {
            tracing::warn!(grace = ?WORK_STOP_GRACE, "reconciles still running: abandoned");
        }
        signal = signals.recv() => {
            tracing::warn!(signal = signal.as_str(), "second signal: reconciles abandoned");
        }
    }
    for task in [&tasks.work, &tasks.probe].into_iter().flatten() {
        task.abort();
    }
    let _ = join(&mut tasks.work).await;
    let _ = join(&mut tasks.probe).await;
    stop_election.cancel();
    if let Some(election) = tasks.election.take() {
        match tokio::time::timeout(RELEASE_GRACE, election).await {
            Err(_) => tracing::warn!(grace = ?RELEASE_GRACE, "Lease not released in time"),
            Ok(Ok(Err(error))) => tracing::warn!(%error, "Lease not released"),
            Ok(Err(error)) => tracing::warn!(%error, "elector task failed"),
            Ok(Ok(Ok(()))) => tracing::info!("Lease released"),
        }
    }
    if tokio::time::timeout(SERVER_STOP_GRACE, server)
        .await
        .is_err()
    {
        tracing::warn!("probe server still answering: stopped");
    }
    tracing::info!("stopped");
    match ended {
        Some(reason) => Err(AppError::TaskEnded(reason)),
        None => Ok(()),
    }
}

/// The long-running tasks of the process. Each runs until the process stops; a slot is
/// emptied once its task has ended (and been joined).
struct Tasks {
    /// [`lead_and_work`].
    work: Option<JoinHandle<()>>,
    /// [`probe_regions`].
    probe: Option<JoinHandle<()>>,
    /// The leader elector, when elections are on.
    election: Option<JoinHandle<Result<(), LeaderError>>>,
}

impl Tasks {
    /// Resolves when one of the tasks ends, with the reason `/healthz` then gives (a
    /// fixed phrase). Never resolves while they all run, or once all have ended. Cancel
    /// safe: a task that has not ended is still there to wait for.
    async fn first_to_end(&mut self) -> &'static str {
        let (reason, outcome) = tokio::select! {
            Some(outcome) = join(&mut self.work) => ("work loop ended", outcome.map(|()| None)),
            Some(outcome) = join(&mut self.election) => (
                "leader election ended",
                outcome.map(|result| result.err().map(|error| error.to_string())),
            ),
            Some(outcome) = join(&mut self.probe) => ("region probe ended", outcome.map(|()| None)),
            else => std::future::pending().await,
        };
        match outcome {
            Ok(None) => tracing::error!(reason, "task returned"),
            Ok(Some(error)) => tracing::error!(reason, %error, "task failed"),
            Err(error) => tracing::error!(reason, %error, "task panicked or was cancelled"),
        }
        reason
    }
}

/// Waits for the task in `slot` to end and empties the slot; `None` at once when it is
/// empty. Cancel safe: the slot keeps a task that has not ended.
async fn join<T>(slot: &mut Option<JoinHandle<T>>) -> Option<Result<T, JoinError>> {
    let handle = slot.as_mut()?;
    let outcome = handle.await;
    *slot = None;
    Some(outcome)
}

/// How long the reconciles in flight may run on after SIGTERM before they are abandoned.
/// With [`RELEASE_GRACE`] and [`SERVER_STOP_GRACE`] this stays within the Deployment's
/// 30 s `terminationGracePeriodSeconds`.
const WORK_STOP_GRACE: Duration = Duration::from_secs(15);
/// How long releasing the Lease may take at shutdown (an unreachable hub cannot take it).
const RELEASE_GRACE: Duration = Duration::from_secs(6);
/// How long the probe server may take to close at shutdown.
const SERVER_STOP_GRACE: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests;
