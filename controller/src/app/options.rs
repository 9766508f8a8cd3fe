//! The controller's command line: the flags (each also read from its `CONFIGROLLOUT_*`
//! variable) and the checks that refuse a wrong value before anything starts.

use std::net::SocketAddr;
use std::time::Duration;

use crate::api::CONTROLLER_NAME;
use crate::leader::{MAX_SHARDS, default_identity};
use crate::prometheus::ResponseLimits;
use crate::telemetry::logging::LogFormat;

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
    /// MACs) and sign them as they are read: an upgrade aid, to run once (docs/operations.md, "A
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
