//! The controller process: options, start-up, the leader-gated controller loop, the Region
//! probe, the probe server, and the stop order on SIGTERM.
//!
//! Stop order: stop taking work (the controller drains the reconcile in flight), stop the
//! Region probe, then cancel the elector, which releases the Lease, so nothing this process
//! does is written after a standby takes over.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PartialObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config, ResourceExt};
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::api::{ConfigRollout, Region, StageApproval, TargetClaim, conditions};
use crate::crdt::{DigestKey, Hlc, LaggingClock, WriterId};
use crate::leader::{
    LeaderElector, LeaderError, LeaderState, LeaseConfig, MAX_SHARDS, ShardElector, Shards,
    default_identity,
};
use crate::prometheus::{PrometheusProvider, ResponseLimits};
use crate::reconcile::events::EventPublisher;
use crate::reconcile::hub_cache::HubStores;
use crate::reconcile::{
    self, Context, HubError, ReconcileError, WriteFence, digest_keys, region_status,
    revision_store, triggers,
};
use crate::regions::clients::{CredentialPolicy, RegionClients};
use crate::shutdown::Signals;
use crate::telemetry::health::{self, Health, ServerLimits};
use crate::telemetry::logging::{self, LogFormat};
use crate::telemetry::metrics::{Census, Metrics, RegionState};
use crate::telemetry::panics;
use digest_keys::DigestKeys;

pub use crate::api::CONTROLLER_NAME;
/// How often Region reachability is probed.
const REGION_PROBE_INTERVAL: Duration = Duration::from_secs(15);

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

fn duration(text: &str) -> Result<Duration, String> {
    crate::api::parse_duration(text).map_err(|error| error.to_string())
}

/// The longest Lease the controller takes: a standby waits this long for a leader that
/// died, and every renewal time is derived from it.
const MAX_LEASE_DURATION: Duration = Duration::from_secs(3600);

fn lease_duration(text: &str) -> Result<Duration, String> {
    let duration = duration(text)?;
    if duration < Duration::from_secs(1) || duration > MAX_LEASE_DURATION {
        return Err("expected a duration between 1s and 1h".to_owned());
    }
    Ok(duration)
}

/// The longest settle time: as long as the longest `initialDelay` a gate may ask for.
const MAX_GATE_SETTLE_TIME: Duration = Duration::from_secs(24 * 3600);

fn gate_settle_time(text: &str) -> Result<Duration, String> {
    let duration = duration(text)?;
    if duration > MAX_GATE_SETTLE_TIME {
        return Err("expected a duration of at most 24h".to_owned());
    }
    Ok(duration)
}

fn min_gate_interval(text: &str) -> Result<Duration, String> {
    let duration = duration(text)?;
    if duration < crate::api::GATE_INTERVAL_FLOOR || duration > MAX_GATE_SETTLE_TIME {
        return Err("expected a duration of at least 1s and at most 24h".to_owned());
    }
    Ok(duration)
}

fn positive(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(number) if number > 0 => Ok(number),
        _ => Err("expected a positive whole number".to_owned()),
    }
}

fn shard_count(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(count) if (1..=MAX_SHARDS).contains(&count) => Ok(count),
        _ => Err(format!("expected a whole number from 1 to {MAX_SHARDS}")),
    }
}

fn log_format(text: &str) -> Result<LogFormat, String> {
    text.parse()
        .map_err(|error: crate::telemetry::TelemetryError| error.to_string())
}

/// Command-line options. Each is also read from the `CONFIGROLLOUT_*` variable its help
/// names (the flag's name in capitals, `-` as `_`); a flag given wins over its variable.
#[derive(Debug, Clone, PartialEq, clap::Parser)]
#[command(
    name = CONTROLLER_NAME,
    version,
    about = "Rolls out ConfigRollouts across regional Kubernetes clusters, stage by stage, \
             from the hub cluster of its kubeconfig (or in-cluster configuration)",
    after_help = "Serves /healthz, /readyz and /metrics on --probe-addr. Exit codes: 0 after \
                  SIGTERM or SIGINT, 1 when it cannot start or fails, 2 for a wrong command \
                  line or variable."
)]
pub struct Options {
    /// Namespace of the Lease, the digest key Secret and the Region kubeconfig Secrets.
    #[arg(
        long,
        env = "CONFIGROLLOUT_NAMESPACE",
        hide_env_values = true,
        value_name = "NAMESPACE",
        default_value = "configrollout-system"
    )]
    pub namespace: String,
    /// Name of the leader election Lease.
    #[arg(
        long,
        env = "CONFIGROLLOUT_LEASE_NAME",
        hide_env_values = true,
        value_name = "NAME",
        default_value = CONTROLLER_NAME
    )]
    pub lease_name: String,
    /// Our identity in the Lease [default: $POD_NAME, else <hostname>-<pid>].
    #[arg(
        long,
        env = "CONFIGROLLOUT_IDENTITY",
        hide_env_values = true,
        value_name = "IDENTITY",
        default_value_t = default_identity(),
        hide_default_value = true
    )]
    pub identity: String,
    /// Whether to elect a leader among replicas (false: this process always leads).
    #[arg(
        long,
        env = "CONFIGROLLOUT_LEADER_ELECTION",
        hide_env_values = true,
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_value_t = true,
        default_missing_value = "true"
    )]
    pub leader_election: bool,
    /// How many shards the rollouts are split into, each with its own Lease
    /// (`<lease-name>-shard-<i>`); replicas share the shards fairly. 1: one leader Lease
    /// named `--lease-name`, as without sharding. Above 1 needs leader election.
    #[arg(
        long,
        env = "CONFIGROLLOUT_SHARDS",
        hide_env_values = true,
        value_name = "COUNT",
        default_value_t = 1,
        value_parser = shard_count,
        allow_negative_numbers = true
    )]
    pub shards: u32,
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(
        long,
        env = "CONFIGROLLOUT_PROBE_ADDR",
        hide_env_values = true,
        value_name = "ADDRESS",
        default_value = "0.0.0.0:8080"
    )]
    pub probe_addr: SocketAddr,
    /// Log format: text or json.
    #[arg(
        long,
        env = "CONFIGROLLOUT_LOG_FORMAT",
        hide_env_values = true,
        value_name = "FORMAT",
        default_value = "text",
        value_parser = log_format
    )]
    pub log_format: LogFormat,
    /// Default log filter, in tracing's EnvFilter syntax (RUST_LOG wins when set).
    #[arg(
        long,
        env = "CONFIGROLLOUT_LOG_FILTER",
        hide_env_values = true,
        value_name = "FILTER",
        default_value = "info"
    )]
    pub log_filter: String,
    /// Prometheus for the gates of regions that name none (empty: none).
    #[arg(
        long,
        env = "CONFIGROLLOUT_PROMETHEUS_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub prometheus_url: Option<String>,
    /// Largest Prometheus answer accepted, in bytes; a larger one is an Inconclusive sample.
    #[arg(
        long,
        env = "CONFIGROLLOUT_PROMETHEUS_MAX_RESPONSE_BYTES",
        hide_env_values = true,
        value_name = "BYTES",
        default_value_t = ResponseLimits::DEFAULT_MAX_BYTES,
        value_parser = positive,
        allow_negative_numbers = true
    )]
    pub prometheus_max_response_bytes: usize,
    /// Most series a gate query may return; more is an Inconclusive sample.
    #[arg(
        long,
        env = "CONFIGROLLOUT_PROMETHEUS_MAX_SERIES",
        hide_env_values = true,
        value_name = "COUNT",
        default_value_t = ResponseLimits::DEFAULT_MAX_SERIES,
        value_parser = positive,
        allow_negative_numbers = true
    )]
    pub prometheus_max_series: usize,
    /// How long gate windows wait after a stage's regions are done when nothing shows
    /// that the region's consumers loaded the revision (no consumers declared, or a
    /// `Reload` consumer without an activationQuery): the longer of this and the gate's
    /// initialDelay. 0s: only initialDelay.
    #[arg(
        long,
        env = "CONFIGROLLOUT_GATE_SETTLE_TIME",
        hide_env_values = true,
        value_name = "DURATION",
        default_value = "1m",
        value_parser = gate_settle_time
    )]
    pub gate_settle_time: Duration,
    /// The shortest gate interval this controller samples at: a spec asking for less is
    /// refused (InvalidSpec, naming the gate) and touches no region. The schema's own
    /// floor is 1s; raise it where Prometheus scrapes more slowly or many teams share
    /// one controller.
    #[arg(
        long,
        env = "CONFIGROLLOUT_MIN_GATE_INTERVAL",
        hide_env_values = true,
        value_name = "DURATION",
        default_value = "1s",
        value_parser = min_gate_interval
    )]
    pub min_gate_interval: Duration,
    /// Secret holding the digest key (created with a random key when absent).
    #[arg(
        long,
        env = "CONFIGROLLOUT_DIGEST_KEY_SECRET",
        hide_env_values = true,
        value_name = "NAME",
        default_value = "configrollout-digest-key"
    )]
    pub digest_key_secret: String,
    /// Lease duration (e.g. 15s, 1m).
    #[arg(
        long,
        env = "CONFIGROLLOUT_LEASE_DURATION",
        hide_env_values = true,
        value_name = "DURATION",
        default_value = "15s",
        value_parser = lease_duration
    )]
    pub lease_duration: Duration,
    /// Let Region kubeconfigs run commands, read the controller's files and skip TLS
    /// verification (false: they may not).
    #[arg(
        long,
        env = "CONFIGROLLOUT_ALLOW_UNSAFE_KUBECONFIG",
        hide_env_values = true,
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true"
    )]
    pub allow_unsafe_kubeconfig: bool,
    /// Trust region companion states that carry no MAC (written by a release before
    /// MACs) and sign them as they are read: an upgrade aid, to run once (README, "A
    /// region's state fails its MAC"). A state with a wrong MAC is refused regardless.
    #[arg(
        long,
        env = "CONFIGROLLOUT_ACCEPT_UNSIGNED_STATES",
        hide_env_values = true,
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true"
    )]
    pub accept_unsigned_states: bool,
    /// Require four-eyes approvals on every rollout, whatever its spec.fourEyes.
    #[arg(
        long,
        env = "CONFIGROLLOUT_FOUR_EYES",
        hide_env_values = true,
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true"
    )]
    pub four_eyes: bool,
    /// Count approvals although policies/stageapproval-approver.yaml is not installed:
    /// say so only when the platform binds a StageApproval's spec.approver to the user
    /// who creates it another way (its own admission policy or webhook). Without either,
    /// no approval counts.
    #[arg(
        long,
        env = "CONFIGROLLOUT_APPROVER_ENFORCED_EXTERNALLY",
        hide_env_values = true,
        value_name = "BOOL",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true"
    )]
    pub approver_enforced_externally: bool,
    /// Test aid: read the system clock this many milliseconds behind (at most the 60 s
    /// drift bound), as a replica on a node whose clock lags would. The lab runs
    /// controllers apart this way to show that regions converge across clocks.
    #[arg(
        long,
        env = "CONFIGROLLOUT_CLOCK_BEHIND_MS",
        hide = true,
        value_name = "MS",
        default_value_t = 0,
        value_parser = clap::value_parser!(u64).range(0..=60_000)
    )]
    pub clock_behind_ms: u64,
}

impl Options {
    /// The long names of the flags `--help` shows (hidden test aids, `--help` and
    /// `--version` left out): what a deployment of the controller (the chart) must let
    /// its operator set.
    pub fn documented_flags() -> Vec<String> {
        use clap::CommandFactory;
        Self::command()
            .get_arguments()
            .filter(|argument| !argument.is_hide_set())
            .filter_map(|argument| argument.get_long())
            .filter(|long| !matches!(*long, "help" | "version"))
            .map(str::to_owned)
            .collect()
    }

    /// Parses the command line `args` (the program's name first), falling back to the
    /// `CONFIGROLLOUT_*` variables and then the defaults. An empty `--prometheus-url` is
    /// none. The error prints itself as clap does: usage, and exit code 2 (0 for `--help`
    /// and `--version`).
    pub fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut options = <Options as clap::Parser>::try_parse_from(args)?;
        if options.shards > 1 && !options.leader_election {
            let mut command = <Options as clap::CommandFactory>::command();
            return Err(command.error(
                clap::error::ErrorKind::ArgumentConflict,
                "--shards above 1 needs --leader-election: the shards are Leases",
            ));
        }
        options.prometheus_url = options.prometheus_url.filter(|url| !url.trim().is_empty());
        Ok(options)
    }

    /// Bounds on every Prometheus answer (`--prometheus-max-response-bytes`,
    /// `--prometheus-max-series`); an answer over them is an Inconclusive sample.
    pub fn prometheus_limits(&self) -> ResponseLimits {
        ResponseLimits {
            max_bytes: self.prometheus_max_response_bytes,
            max_series: self.prometheus_max_series,
        }
    }
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
        events: EventPublisher::new(hub.clone(), CONTROLLER_NAME),
        fence: WriteFence::sharded(shards.clone(), metrics.clone()),
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

/// How long the controller may drain once leadership ends before it is dropped (its
/// writes already stopped at the fence).
const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// How long the reconciles in flight may run on after SIGTERM before they are abandoned.
/// With [`RELEASE_GRACE`] and [`SERVER_STOP_GRACE`] this stays within the Deployment's
/// 30 s `terminationGracePeriodSeconds`.
const WORK_STOP_GRACE: Duration = Duration::from_secs(15);
/// How long releasing the Lease may take at shutdown (an unreachable hub cannot take it).
const RELEASE_GRACE: Duration = Duration::from_secs(6);
/// How long the probe server may take to close at shutdown.
const SERVER_STOP_GRACE: Duration = Duration::from_secs(2);

/// How long a watch may go without a byte before it is given up and restarted: past
/// the watcher's own server-side timeout (290 s), so a healthy but quiet watch is never
/// cut, while a dead connection still ends.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(330);

/// Two clients of the hub: one for calls (a read that stalls 30 s fails), one for watches
/// (which stay quiet for minutes by design).
async fn hub_clients() -> Result<(Client, Client), AppError> {
    let mut config = Config::infer()
        .await
        .map_err(|e| AppError::Hub(e.to_string()))?;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(30));
    config.write_timeout = Some(reconcile::HUB_CALL_TIMEOUT);
    let mut watch_config = config.clone();
    watch_config.read_timeout = Some(WATCH_READ_TIMEOUT);
    let client =
        |config: Config| Client::try_from(config).map_err(|e| AppError::Hub(e.to_string()));
    Ok((client(config)?, client(watch_config)?))
}

/// Reads the digest key, creating the Secret with 32 random bytes when absent (another
/// replica creating it first is fine: its key is read back).
async fn ensure_digest_key(hub: &Client, options: &Options) -> Result<DigestKey, AppError> {
    let api: Api<Secret> = Api::namespaced(hub.clone(), &options.namespace);
    let fail = |reason: String| AppError::DigestKey {
        namespace: options.namespace.clone(),
        name: options.digest_key_secret.clone(),
        reason,
    };
    for _ in 0..2 {
        let existing =
            reconcile::api_call("read digest key", api.get_opt(&options.digest_key_secret))
                .await
                .map_err(|e| fail(e.to_string()))?;
        if let Some(secret) = existing {
            return digest_keys::from_secret(&secret).map_err(|e| fail(e.to_string()));
        }
        // A new key verifies no region's companion state and changes every digest: only a
        // hub with no revisions yet gets one.
        if let Some(revisions) = existing_revisions(hub)
            .await
            .map_err(|e| fail(e.to_string()))?
        {
            return Err(fail(format!(
                "the Secret is missing while revisions exist (ControllerRevision {revisions}, \
                 and maybe more): restore it from your backup of {namespace}/{name}. A new \
                 key verifies no region's state: every region would read as tampered until \
                 `kubectl configrollout repair-state` rebuilt it. To start over with a new key \
                 knowingly, create it yourself: kubectl -n {namespace} create secret generic \
                 {name} --from-file=key=<(head -c 32 /dev/urandom)",
                namespace = options.namespace,
                name = options.digest_key_secret,
            )));
        }
        let mut key = vec![0_u8; 32];
        getrandom::fill(&mut key).map_err(|e| fail(format!("no randomness from the OS: {e}")))?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(options.digest_key_secret.clone()),
                namespace: Some(options.namespace.clone()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                digest_keys::KEY_FIELD.to_owned(),
                ByteString(key),
            )])),
            ..Secret::default()
        };
        match reconcile::api_call(
            "create digest key",
            api.create(&PostParams::default(), &secret),
        )
        .await
        {
            Ok(_) => continue,
            Err(HubError::Call(error)) if error.is_conflict() => continue,
            Err(error) => return Err(fail(error.to_string())),
        }
    }
    Err(fail("created but not readable".to_owned()))
}

/// One ControllerRevision of a rollout anywhere in the hub (`namespace/name`), if any:
/// revisions made under a key the controller no longer has.
async fn existing_revisions(hub: &Client) -> Result<Option<String>, HubError> {
    let api: Api<ControllerRevision> = Api::all(hub.clone());
    let params = ListParams::default()
        .labels(reconcile::revision_store::ROLLOUT_LABEL)
        .limit(1);
    let list = reconcile::api_call("list revisions", api.list_metadata(&params)).await?;
    Ok(list.items.first().map(|revision| {
        format!(
            "{}/{}",
            revision.namespace().unwrap_or_default(),
            revision.name_any()
        )
    }))
}

/// Waits to lead, runs the controller while leading, and stops it when leadership is
/// lost or `stop` is cancelled. Returns when `stop` is cancelled, or when the controller
/// ended by itself while still leading (a failure the caller reports). Sharded, `leader`
/// leads while this replica holds at least one shard, and `acquisitions` changes at each
/// shard it acquires (or renews after a lapse): the controller is then restarted, as on a
/// new leadership, so that every rollout of the shard is reconciled afresh whatever its
/// requeue said while the shard was not ours.
async fn lead_and_work(
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
    let sources: Api<PartialObjectMeta<ConfigMap>> = Api::all(watch_hub);
    let controller = Controller::new(rollouts, watcher::Config::default()).with_config(
        kube::runtime::controller::Config::default()
            .concurrency(reconcile::MAX_CONCURRENT_RECONCILES),
    );
    let cache = controller.store();
    let region_cache = cache.clone();
    let region_changes = triggers::RegionChanges::default();
    // The reconciles read Regions, approvals and Namespaces from these stores; each is
    // updated before its event triggers a reconcile.
    let (region_store, region_writer) = reflector::store();
    let (approval_store, approval_writer) = reflector::store();
    let (namespace_store, namespace_writer) = reflector::store();
    let (revision_store, revision_writer) = reflector::store();
    let (claim_store, claim_writer) = reflector::store();
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
        claims: claim_store,
        rollouts: cache.clone(),
    });
    // A change of a claim (an owner released a key, or was deleted) wakes every rollout
    // that waits for one of its keys.
    let claims = cached_watch(claim_writer, claims, watcher::Config::default());
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
        .watches_stream(namespaces, |_| Vec::new())
        .watches_stream(claims, |claim| triggers::rollouts_claiming(&claim))
        .watches_stream(revisions, |_| Vec::new())
        // A rotated key: every rollout reads its regions now, signing their states with
        // it, rather than at its next idle requeue.
        .reconcile_all_on(ctx.digest_keys.changes())
        .watches(sources, watcher::Config::default(), move |source| {
            let namespace = source.namespace().unwrap_or_default();
            triggers::rollouts_for_source(&cache.state(), &namespace, &source.name_any())
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

/// Follows the resourceVersions of the Secrets in the controller's namespace (metadata
/// only), so that a region's client is rebuilt when its kubeconfig changes without a read
/// of the Secret per use. Should the watch end, clients read their Secret at each use.
fn follow_secret_versions(
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

async fn probe_regions(ctx: Arc<Context>, stop: CancellationToken) {
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

#[cfg(test)]
mod tests;
