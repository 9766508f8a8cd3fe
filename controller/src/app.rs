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

use futures::{FutureExt, StreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PartialObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Config, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::api::{ConfigRollout, Region, StageApproval};
use crate::crdt::{DigestKey, Hlc, WriterId};
use crate::gates::prometheus::{PrometheusProvider, ResponseLimits};
use crate::leader::{LeaderElector, LeaderState, LeaseConfig, default_identity};
use crate::reconcile::{
    self, Context, HubError, ReconcileError, WriteFence, region_status, triggers,
};
use crate::regions::clients::{CredentialPolicy, RegionClients};
use crate::shutdown::Signals;
use crate::telemetry::health::{self, Health, ServerLimits};
use crate::telemetry::logging::{self, LogFormat};
use crate::telemetry::metrics::Metrics;

/// Name the controller reports events and writes as.
pub const CONTROLLER_NAME: &str = "configrollout-controller";
/// Key of the digest key Secret's data.
const DIGEST_KEY_FIELD: &str = "key";
/// How often Region reachability is probed.
const REGION_PROBE_INTERVAL: Duration = Duration::from_secs(15);

/// Why the controller could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A command-line option is wrong.
    #[error("{0}")]
    Usage(String),
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
}

/// Command-line options (each also settable through a `CONFIGROLLOUT_*` variable).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Namespace of the Lease and the digest key Secret.
    pub namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// Our identity in the Lease.
    pub identity: String,
    /// Whether to elect a leader (off: this process always leads).
    pub leader_election: bool,
    /// Address of `/healthz`, `/readyz`, `/metrics`.
    pub probe_addr: SocketAddr,
    /// Log format.
    pub log_format: LogFormat,
    /// Default log filter (`RUST_LOG` wins).
    pub log_filter: String,
    /// Prometheus for regions that name none.
    pub prometheus_url: Option<String>,
    /// Bounds on every Prometheus answer (`--prometheus-max-response-bytes`,
    /// `--prometheus-max-series`); an answer over them is an Inconclusive sample.
    pub prometheus_limits: ResponseLimits,
    /// Secret holding the digest key (created with a random key when absent).
    pub digest_key_secret: String,
    /// Lease duration.
    pub lease_duration: Duration,
    /// Let Region kubeconfigs run commands, read the controller's files and skip TLS
    /// verification (off: they may not; see `CredentialPolicy`).
    pub allow_unsafe_kubeconfig: bool,
    /// Require four-eyes approvals on every rollout, whatever its `spec.fourEyes`.
    pub four_eyes: bool,
}

impl Options {
    /// Parses `--flag value` pairs (and `--flag=value`), falling back to environment
    /// variables and then defaults.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, AppError> {
        let mut given: BTreeMap<String, String> = BTreeMap::new();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let Some(flag) = arg.strip_prefix("--") else {
                return Err(AppError::Usage(format!("unexpected argument {arg:?}")));
            };
            let (name, value) = match flag.split_once('=') {
                Some((name, value)) => (name.to_owned(), value.to_owned()),
                None => {
                    let value = args
                        .next()
                        .ok_or_else(|| AppError::Usage(format!("--{flag} needs a value")))?;
                    (flag.to_owned(), value)
                }
            };
            given.insert(name, value);
        }
        let mut take = |name: &str, default: &str| {
            given.remove(name).unwrap_or_else(|| {
                let variable = format!("CONFIGROLLOUT_{}", name.to_uppercase().replace('-', "_"));
                std::env::var(variable).unwrap_or_else(|_| default.to_owned())
            })
        };
        let namespace = take("namespace", "configrollout-system");
        let lease_name = take("lease-name", CONTROLLER_NAME);
        let identity = take("identity", &default_identity());
        let leader_election = parse_bool("leader-election", &take("leader-election", "true"))?;
        let probe_addr = take("probe-addr", "0.0.0.0:8080")
            .parse()
            .map_err(|e| AppError::Usage(format!("--probe-addr: {e}")))?;
        let log_format = take("log-format", "text")
            .parse()
            .map_err(|e| AppError::Usage(format!("--log-format: {e}")))?;
        let log_filter = take("log-filter", "info");
        let prometheus_url = Some(take("prometheus-url", "")).filter(|url| !url.is_empty());
        let prometheus_limits = ResponseLimits {
            max_bytes: parse_positive(
                "prometheus-max-response-bytes",
                &take(
                    "prometheus-max-response-bytes",
                    &ResponseLimits::DEFAULT_MAX_BYTES.to_string(),
                ),
            )?,
            max_series: parse_positive(
                "prometheus-max-series",
                &take(
                    "prometheus-max-series",
                    &ResponseLimits::DEFAULT_MAX_SERIES.to_string(),
                ),
            )?,
        };
        let digest_key_secret = take("digest-key-secret", "configrollout-digest-key");
        let lease_duration = crate::api::parse_duration(&take("lease-duration", "15s"))
            .map_err(|e| AppError::Usage(format!("--lease-duration: {e}")))?;
        let allow_unsafe_kubeconfig = parse_bool(
            "allow-unsafe-kubeconfig",
            &take("allow-unsafe-kubeconfig", "false"),
        )?;
        let four_eyes = parse_bool("four-eyes", &take("four-eyes", "false"))?;
        if let Some(unknown) = given.keys().next() {
            return Err(AppError::Usage(format!("unknown option --{unknown}")));
        }
        Ok(Options {
            namespace,
            lease_name,
            identity,
            leader_election,
            probe_addr,
            log_format,
            log_filter,
            prometheus_url,
            prometheus_limits,
            digest_key_secret,
            lease_duration,
            allow_unsafe_kubeconfig,
            four_eyes,
        })
    }
}

fn parse_bool(flag: &str, value: &str) -> Result<bool, AppError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(AppError::Usage(format!(
            "--{flag}: expected true or false, got {other:?}"
        ))),
    }
}

fn parse_positive(flag: &str, value: &str) -> Result<usize, AppError> {
    match value.parse::<usize>() {
        Ok(number) if number > 0 => Ok(number),
        _ => Err(AppError::Usage(format!(
            "--{flag}: expected a positive whole number, got {value:?}"
        ))),
    }
}

/// The whole program: options from the command line, a runtime, [`run`]; exit code 2 for
/// bad usage, 1 for a failure.
pub fn main() -> std::process::ExitCode {
    use std::process::ExitCode;
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("{CONTROLLER_NAME}: {error}");
            return ExitCode::from(2);
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
    // reqwest is built without a bundled TLS provider; use ring, as kube does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut signals = Signals::install().map_err(|e| AppError::Startup(e.to_string()))?;
    let (hub, watch_hub) = hub_clients().await?;
    let digest_key = ensure_digest_key(&hub, &options).await?;

    let (leader, elector) = if options.leader_election {
        let config = LeaseConfig::new(&options.namespace, &options.lease_name, &options.identity)
            .with_lease_duration(options.lease_duration);
        let (elector, state) = LeaderElector::new(hub.clone(), config)
            .map_err(|e| AppError::Startup(e.to_string()))?;
        (state, Some(elector))
    } else {
        (LeaderState::always_leading(), None)
    };
    let metrics = Arc::new(Metrics::new());
    let health = Health::new(leader.clone());
    let listener = health::bind(options.probe_addr)
        .await
        .map_err(|e| AppError::Startup(e.to_string()))?;

    let stop_work = CancellationToken::new();
    let stop_election = CancellationToken::new();
    let server = tokio::spawn(health::serve(
        listener,
        health.clone(),
        metrics.clone(),
        ServerLimits::default(),
        stop_election.clone(),
    ));
    let election = elector.map(|elector| tokio::spawn(elector.run(stop_election.clone())));

    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(crate::gates::prometheus::QUERY_TIMEOUT)
        .build()
        .map_err(|e| AppError::Startup(format!("HTTP client: {e}")))?;
    let ctx = Arc::new(Context {
        hub: hub.clone(),
        region_clients: RegionClients::new(
            hub.clone(),
            CredentialPolicy {
                controller_namespace: options.namespace.clone(),
                allow_unsafe_kubeconfig: options.allow_unsafe_kubeconfig,
            },
        ),
        digest_key,
        clock: Mutex::new(Hlc::new(
            WriterId::rollout(&options.namespace, CONTROLLER_NAME)
                .map_err(|e| AppError::Startup(e.to_string()))?,
            u64::try_from(reconcile::MAX_CLOCK_DRIFT.as_millis()).unwrap_or(u64::MAX),
        )),
        adopt_writer: WriterId::override_by("drift-adopted")
            .map_err(|e| AppError::Startup(e.to_string()))?,
        gates: Arc::new(PrometheusProvider::new(
            http,
            options.prometheus_url.clone(),
            options.prometheus_limits,
        )),
        recorder: Recorder::new(hub.clone(), Reporter::from(CONTROLLER_NAME)),
        fence: WriteFence::new(leader.clone(), metrics.clone()),
        backoff: Default::default(),
        metrics: metrics.clone(),
        four_eyes_default: options.four_eyes,
        policies: Default::default(),
    });

    // Caches: the controller's watches need the CRDs served; one list proves it.
    let rollouts: Api<ConfigRollout> = Api::all(hub.clone());
    reconcile::api_call(
        "list rollouts",
        rollouts.list(&ListParams::default().limit(1)),
    )
    .await
    .map_err(|e| AppError::Hub(e.to_string()))?;
    health.mark_caches_synced();

    let mut probe = tokio::spawn(probe_regions(ctx.clone(), stop_work.clone()));
    let mut work = tokio::spawn(lead_and_work(ctx, watch_hub, leader, stop_work.clone()));

    let signal = signals.recv().await;
    tracing::info!(signal = signal.as_str(), "stopping: no new work");
    health.mark_stopping();
    stop_work.cancel();
    // Shutdown is one-way and bounded whatever the hub does: the reconciles in flight get
    // WORK_STOP_GRACE (or until a second signal) and are then abandoned, which is safe
    // because every write is idempotent and the Lease is still held until released.
    tokio::select! {
        biased;
        () = async {
            let _ = (&mut work).await;
            let _ = (&mut probe).await;
        } => {}
        () = tokio::time::sleep(WORK_STOP_GRACE) => {
            tracing::warn!(grace = ?WORK_STOP_GRACE, "reconciles still running: abandoned");
        }
        signal = signals.recv() => {
            tracing::warn!(signal = signal.as_str(), "second signal: reconciles abandoned");
        }
    }
    work.abort();
    probe.abort();
    let _ = work.await;
    let _ = probe.await;
    stop_election.cancel();
    if let Some(election) = election {
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
    Ok(())
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
            let bytes = secret
                .data
                .as_ref()
                .and_then(|data| data.get(DIGEST_KEY_FIELD))
                .ok_or_else(|| fail(format!("no key {DIGEST_KEY_FIELD:?}")))?;
            return DigestKey::new(&bytes.0).map_err(|e| fail(e.to_string()));
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
                DIGEST_KEY_FIELD.to_owned(),
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

/// Waits to lead, runs the controller while leading, and stops it when leadership is
/// lost or `stop` is cancelled.
async fn lead_and_work(
    ctx: Arc<Context>,
    watch_hub: Client,
    leader: LeaderState,
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
        ctx.metrics.leader.set(1);
        tracing::info!("leading: reconciling rollouts");
        let ended = {
            let leader = leader.clone();
            let stop = stop.clone();
            async move {
                tokio::select! {
                    () = leader.lost() => {},
                    () = stop.cancelled() => {},
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
        ctx.metrics.leader.set(0);
        tracing::info!("not leading: reconciling stopped");
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
    controller
        .watches(approvals, watcher::Config::default(), |approval| {
            let namespace = approval.namespace()?;
            Some(ObjectRef::<ConfigRollout>::new(&approval.spec.rollout).within(&namespace))
        })
        .watches(regions, watcher::Config::default(), move |region| {
            if !region_changes.concerns(&region) {
                return Vec::new();
            }
            triggers::rollouts_for_region(&region_cache.state(), &region)
        })
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
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, AppError> {
        Options::parse(args.iter().map(|arg| (*arg).to_owned()))
    }

    #[test]
    fn flags_override_defaults_in_both_spellings() {
        let options = parse(&[
            "--namespace",
            "ops",
            "--log-format=json",
            "--leader-election",
            "false",
            "--prometheus-url=http://127.0.0.1:9090",
            "--prometheus-max-response-bytes",
            "1048576",
            "--prometheus-max-series=50",
            "--allow-unsafe-kubeconfig=true",
        ])
        .unwrap();
        assert_eq!(options.namespace, "ops");
        assert_eq!(options.log_format, LogFormat::Json);
        assert!(!options.leader_election);
        assert!(options.allow_unsafe_kubeconfig);
        assert_eq!(
            options.prometheus_url.as_deref(),
            Some("http://127.0.0.1:9090")
        );
        assert_eq!(
            options.prometheus_limits,
            ResponseLimits {
                max_bytes: 1_048_576,
                max_series: 50,
            }
        );
    }

    #[test]
    fn prometheus_answers_are_bounded_by_default() {
        let options = parse(&[]).unwrap();
        assert_eq!(options.prometheus_limits.max_bytes, 4 * 1024 * 1024);
        assert_eq!(options.prometheus_limits.max_series, 1000);
    }

    #[test]
    fn a_zero_or_malformed_prometheus_limit_is_refused() {
        for args in [
            ["--prometheus-max-series", "0"],
            ["--prometheus-max-series", "-1"],
            ["--prometheus-max-response-bytes", "4Mi"],
        ] {
            let error = parse(&args).unwrap_err();
            assert!(error.to_string().contains(args[0]), "{error}");
        }
    }

    #[test]
    fn an_unknown_option_is_named() {
        let error = parse(&["--colour", "blue"]).unwrap_err();
        assert!(error.to_string().contains("--colour"), "{error}");
    }

    #[test]
    fn a_flag_without_value_is_named() {
        let error = parse(&["--namespace"]).unwrap_err();
        assert!(error.to_string().contains("--namespace"), "{error}");
    }

    #[test]
    fn unsafe_kubeconfigs_are_refused_by_default() {
        let options = parse(&[]).unwrap();
        assert!(!options.allow_unsafe_kubeconfig);
    }

    #[test]
    fn a_malformed_boolean_is_refused() {
        let error = parse(&["--leader-election", "yes"]).unwrap_err();
        assert!(error.to_string().contains("--leader-election"), "{error}");
    }
}
