//! The plugin's command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use configrollout_api::parse_duration;

fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|error| error.to_string())
}

/// `KEY=VALUE` (set) or `KEY-` (remove).
fn key_change(text: &str) -> Result<(String, Option<String>), String> {
    if let Some((key, value)) = text.split_once('=') {
        if key.is_empty() {
            return Err("KEY=VALUE needs a key".to_owned());
        }
        return Ok((key.to_owned(), Some(value.to_owned())));
    }
    match text.strip_suffix('-') {
        Some(key) if !key.is_empty() => Ok((key.to_owned(), None)),
        _ => Err(format!("{text:?} is neither KEY=VALUE nor KEY-")),
    }
}

/// `KEY=VALUE`, a Kubernetes label: an optional DNS subdomain prefix and `/`, a name of at
/// most 63 characters, and a value of at most 63 (possibly empty).
pub(crate) fn label(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!(
            "label key {key:?}: the prefix must be a DNS subdomain (lowercase letters, digits, \
             '-' and '.')"
        ));
    }
    if !is_label_value(name) || name.is_empty() {
        return Err(format!(
            "label key {key:?}: the name must be 1 to 63 letters, digits, '-', '_' or '.', \
             beginning and ending with a letter or digit"
        ));
    }
    if !is_label_value(value) {
        return Err(format!(
            "label {key:?}: the value must be at most 63 letters, digits, '-', '_' or '.', \
             beginning and ending with a letter or digit"
        ));
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// A namespace name: a DNS label.
pub(crate) fn namespace_name(text: &str) -> Result<String, String> {
    if is_dns_label(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a namespace name (1 to 63 lowercase letters, digits and '-', \
             beginning and ending with a letter or digit)"
        ))
    }
}

/// A Region name: a DNS label, which its Secret's name `region-NAME-kubeconfig` holds too.
pub(crate) fn region_name(text: &str) -> Result<String, String> {
    if is_dns_label(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a region name (1 to 63 lowercase letters, digits and '-', \
             beginning and ending with a letter or digit)"
        ))
    }
}

/// A ServiceAccount token's lifetime: at least 10 minutes, as the TokenRequest API
/// requires.
fn token_duration(text: &str) -> Result<Duration, String> {
    let duration = duration(text)?;
    if duration < Duration::from_secs(600) {
        return Err(format!(
            "{text:?} is shorter than 10m, the shortest token the API server issues"
        ));
    }
    Ok(duration)
}

fn is_dns_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_dns_label)
}

fn is_label_value(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.is_empty()
        || (bytes.len() <= 63
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric))
}

/// Watch, approve and steer configrollout rollouts.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-configrollout",
    bin_name = "kubectl configrollout",
    version,
    about = "Watch, approve and steer configrollout rollouts, as yourself, on your kubeconfig",
    after_help = "Exit codes: `status` exits 0 Complete, 1 Halted/RolledBack/InvalidSpec, 2 on \
                  --timeout, 3 when it cannot read the rollout; `lint` exits 1 when the file has \
                  errors; other commands exit 1 on any error; a wrong command line exits 3."
)]
pub struct Cli {
    /// Options every command takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes, as kubectl spells them.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then
    /// in-cluster).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace of the rollout (default: the context's namespace).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Bound on each API call, e.g. 20s.
    #[arg(long, global = true, default_value = "20s", value_parser = duration, value_name = "DURATION")]
    pub request_timeout: Duration,
}

/// How `get` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The whole object as JSON.
    Json,
    /// The whole object as YAML.
    Yaml,
}

/// The plugin's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Rollouts with phase, stage, revision, regions done/total and what each waits on.
    List {
        /// List rollouts of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Keep listing as rollouts change.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// One rollout as a tree: revision -> stage -> regions and gates, approvals, and what
    /// it waits on.
    Get {
        /// The rollout.
        name: String,
        /// Redraw whenever the rollout changes (in place in a terminal, appended when
        /// piped).
        #[arg(short = 'w', long)]
        watch: bool,
        /// Print the object as JSON or YAML instead of the tree.
        #[arg(short = 'o', long, value_enum)]
        output: Option<OutputFormat>,
    },
    /// Wait for the rollout to end: exit 0 Complete, 1 Halted/RolledBack/InvalidSpec, 2
    /// on timeout.
    Status {
        /// The rollout.
        name: String,
        /// How long to wait, e.g. 10m or 30s.
        #[arg(long, default_value = "10m", value_parser = duration, value_name = "DURATION")]
        timeout: Duration,
    },
    /// Approve the stage awaiting approval (or --stage), as yourself.
    Approve {
        /// The rollout.
        name: String,
        /// The stage to approve (`contract` for the contract step); default: the one
        /// awaiting approval now.
        #[arg(long, value_name = "STAGE")]
        stage: Option<String>,
        /// Why, kept in the approval record.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// The revision you reviewed (e.g. r7): refused if the rollout has moved on to
        /// another. Required without a terminal; in one, approve shows the current
        /// revision and asks.
        #[arg(long, value_name = "REVISION")]
        revision: Option<String>,
        /// The revision's digest as `get` shows it (at least 12 characters), to approve
        /// exactly that content.
        #[arg(long, value_name = "DIGEST", requires = "revision")]
        digest: Option<String>,
    },
    /// Abort the rollout: it halts where it is (annotation configrollout.dev/abort).
    Abort {
        /// The rollout.
        name: String,
    },
    /// Resume a halted rollout (annotation configrollout.dev/retry).
    Retry {
        /// The rollout.
        name: String,
    },
    /// Pause the rollout: nothing new starts (spec.paused: true).
    Pause {
        /// The rollout.
        name: String,
    },
    /// Resume a paused rollout (spec.paused: false).
    Resume {
        /// The rollout.
        name: String,
    },
    /// The revisions the rollout's status keeps: declared, digest, keys, outcome.
    History {
        /// The rollout.
        name: String,
    },
    /// Keys added, changed and removed between two revisions (default: the current
    /// revision and the one before it; one revision given: from it to the current one),
    /// or, with --region, between a revision (default: the current one) and what the
    /// region's target holds. Values are masked unless --show-values.
    #[command(
        after_help = "The revisions are read from the hub's ControllerRevisions with your own \
                      credentials: whoever may not read them (RBAC) is told so, and no value is \
                      printed without --show-values. With --region, the region's target \
                      ConfigMap is read with --region-kubeconfig, and only the keys the \
                      rollout's kept revisions declare are compared (a ConfigMap can be shared)."
    )]
    Diff {
        /// The rollout.
        name: String,
        /// The revision to diff from, e.g. r1 (with --region: the revision compared with
        /// the region; default: the current one).
        from: Option<String>,
        /// The revision to diff to, e.g. r2 (default: the current revision).
        #[arg(conflicts_with = "region")]
        to: Option<String>,
        /// Print the values instead of masking them as ***.
        #[arg(long)]
        show_values: bool,
        /// Diff the revision against what this region holds.
        #[arg(long, value_name = "REGION", requires = "region_kubeconfig")]
        region: Option<String>,
        /// Kubeconfig of the region's cluster, with your credentials there (with --region).
        #[arg(long, value_name = "FILE", requires = "region")]
        region_kubeconfig: Option<PathBuf>,
        /// The context of --region-kubeconfig to use (default: its current context).
        #[arg(long, value_name = "NAME", requires = "region")]
        region_context: Option<String>,
    },
    /// Write an emergency override into one region, as yourself: KEY=VALUE sets a key,
    /// KEY- removes it. A revision declared later wins over it; an older one does not.
    #[command(
        after_help = "The override is written with your region kubeconfig (--region-kubeconfig, \
                      --region-context) under the writer override:<your user name in the region>. \
                      The hub kubeconfig must be allowed to read the rollout and the controller's \
                      digest key Secret (--digest-key-secret). --reason is recorded, with \
                      your user name and the time, in the target's annotation \
                      configrollout.dev/override-reason."
    )]
    Override {
        /// The rollout whose target is overridden.
        name: String,
        /// The region to write in.
        #[arg(long, value_name = "REGION")]
        region: String,
        /// KEY=VALUE to set a key, KEY- to remove it.
        #[arg(required = true, value_name = "KEY=VALUE", value_parser = key_change)]
        changes: Vec<(String, Option<String>)>,
        /// Why (printed with the result; not stored in the region).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        /// Kubeconfig of the region's cluster, with your credentials there.
        #[arg(long, value_name = "FILE")]
        region_kubeconfig: PathBuf,
        /// The context of --region-kubeconfig to use (default: its current context).
        #[arg(long, value_name = "NAME")]
        region_context: Option<String>,
        /// The controller's digest key Secret in the hub, as NAMESPACE/NAME.
        #[arg(
            long,
            default_value = "configrollout-system/configrollout-digest-key",
            value_name = "NAMESPACE/NAME"
        )]
        digest_key_secret: String,
    },
    /// Replace a region's companion state that configrollout no longer trusts (it fails
    /// its MAC, or it is gone while the target says it is managed) with the rollout's
    /// stable revision from the hub. Writes the companion only.
    #[command(
        name = "repair-state",
        after_help = "Run it after you have looked at why the state changed: the rollout's Halted \
                      condition (reason TamperedState) names the region. The target ConfigMap is \
                      left as it is; the controller rewrites it from the repaired state at its \
                      next write, so run `kubectl configrollout retry NAME` after the repair. \
                      Overrides the old state held are not kept: make them again with \
                      `kubectl configrollout override`. Needs the same access as override: the \
                      rollout, its ControllerRevisions and the digest key Secret in the hub, and \
                      ConfigMaps of the target's namespace in the region."
    )]
    RepairState {
        /// The rollout whose target's state is repaired.
        name: String,
        /// Replace the state even though its MAC is valid: for a region whose state holds
        /// entries, a horizon or a frontier stamped ahead (the rollout halted with
        /// FutureStamps).
        #[arg(long)]
        force: bool,
        /// The region to repair.
        #[arg(long, value_name = "REGION")]
        region: String,
        /// Kubeconfig of the region's cluster, with your credentials there.
        #[arg(long, value_name = "FILE")]
        region_kubeconfig: PathBuf,
        /// The context of --region-kubeconfig to use (default: its current context).
        #[arg(long, value_name = "NAME")]
        region_context: Option<String>,
        /// The controller's digest key Secret in the hub, as NAMESPACE/NAME.
        #[arg(
            long,
            default_value = "configrollout-system/configrollout-digest-key",
            value_name = "NAMESPACE/NAME"
        )]
        digest_key_secret: String,
    },
    /// Replace the controller's digest key with a new random one, keeping the old one as
    /// `previous` so that every region state it signed is still trusted. Re-runs nothing.
    #[command(
        name = "rotate-key",
        after_help = "Needs update on the digest key Secret in the hub and list on configrollouts \
                      in every namespace. The controller reads the new key within a minute, makes \
                      every new digest and MAC with it, and signs each region's state with it when \
                      it next reads it (status.regions[].stateKeyId shows the key id). A second \
                      rotation drops the oldest key, so it is refused while any region is not yet \
                      signed with the current key, unless --force."
    )]
    RotateKey {
        /// Rotate even though some regions are still signed with the key this rotation
        /// drops (they then read as tampered until repaired with `repair-state`).
        #[arg(long)]
        force: bool,
        /// The controller's digest key Secret in the hub, as NAMESPACE/NAME.
        #[arg(
            long,
            default_value = "configrollout-system/configrollout-digest-key",
            value_name = "NAMESPACE/NAME"
        )]
        digest_key_secret: String,
    },
    /// A local web dashboard of the rollouts, live, with approve, abort, retry, pause and
    /// resume: it acts with your kubeconfig only, and listens on loopback by default.
    #[command(
        after_help = "Without -n it shows every namespace you may list rollouts in (or, when you \
                      may not list them cluster-wide, your context's namespace). Every page and \
                      action is an API call made with your own credentials: the dashboard can show \
                      and do exactly what you may. Actions need the token of a page it served \
                      and a loopback Host, so that another website cannot drive it."
    )]
    Dashboard {
        /// The port to listen on (0: any free port; the URL is printed).
        #[arg(long, default_value_t = 3100)]
        port: u16,
        /// The address to listen on. Anything but loopback lets others on the network use
        /// the dashboard with your credentials.
        #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
        address: std::net::IpAddr,
    },
    /// Regions of the hub: `region add` registers a cluster in one command.
    Region {
        /// What to do.
        #[command(subcommand)]
        command: RegionCommand,
    },
    /// Check a ConfigRollout manifest offline with the controller's own validation.
    Lint {
        /// The YAML file (one or more documents).
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        file: PathBuf,
        /// A file of ConfigSchema or ClusterConfigSchema documents the rollouts' values
        /// are checked against (repeatable). ConfigSchemas apply to the rollouts that
        /// name them in spec.schemas, ClusterConfigSchemas to every rollout, as a grant
        /// requiring them would. Schemas in the linted file itself count too.
        #[arg(long = "schema", value_name = "FILE")]
        schemas: Vec<PathBuf>,
        /// Also read from the hub (your kubeconfig) the schemas the rollouts name and the
        /// ClusterConfigSchemas their namespace's grant requires.
        #[arg(long = "from-hub")]
        from_hub: bool,
    },
}

/// `kubectl configrollout region ...`.
#[derive(Debug, Subcommand)]
pub enum RegionCommand {
    /// Register a cluster as Region NAME: the controller's RBAC in it, a ServiceAccount
    /// token, its kubeconfig Secret and the Region in the hub. Run it again to rotate the
    /// token.
    #[command(
        after_help = "Steps, each printed as it is done: (1) check that the hub lets you write \
                      Secrets in the controller's namespace and Regions, and, with \
                      --region-kubeconfig (your credentials there, exec plugins included), that \
                      every --namespaces namespace exists: nothing is written otherwise; (2) \
                      apply there, server-side (field manager kubectl-configrollout), the \
                      Namespace configrollout-system, the ServiceAccount \
                      configrollout-region-writer in it, and the rights of \
                      deploy/region-rbac-namespaced.yaml in each --namespaces namespace, or of \
                      deploy/region-rbac.yaml with --cluster-wide; (3) mint a token for that \
                      ServiceAccount (TokenRequest, --token-duration; the API server may cap it: \
                      the expiry it gave is printed); (4) list ConfigMaps with that token, as \
                      the controller will; (5) write a kubeconfig of the server, its CA and the \
                      token (nothing runs a command, nothing reads a file) as the Secret \
                      region-NAME-kubeconfig, key kubeconfig, in the controller's namespace of \
                      the hub (your kubeconfig); (6) create or update the Region NAME naming it; \
                      (7) wait until the controller reports the Region reachable (--no-wait to \
                      skip). The token is never printed. Running it again mints a new token and \
                      rewrites the Secret: that is how the token is rotated (give the same \
                      flags: labels and --prometheus-url it set before and not given again are \
                      removed from the Region)."
    )]
    Add(Box<RegionAdd>),
}

/// The options of `region add`.
#[derive(Debug, Args)]
pub struct RegionAdd {
    /// The Region's name in the hub.
    #[arg(value_parser = region_name)]
    pub name: String,
    /// Kubeconfig of the region's cluster, with your (admin) credentials there: used for
    /// the RBAC and the token; exec plugins are fine.
    #[arg(long, value_name = "FILE")]
    pub region_kubeconfig: PathBuf,
    /// The context of --region-kubeconfig to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub region_context: Option<String>,
    /// The namespaces of the region the controller may write ConfigMaps in (and read and
    /// restart workloads in), comma-separated; each must exist.
    #[arg(
        long,
        value_name = "NS,...",
        value_delimiter = ',',
        value_parser = namespace_name,
        required_unless_present = "cluster_wide"
    )]
    pub namespaces: Vec<String>,
    /// Grant the controller every namespace of the region (deploy/region-rbac.yaml)
    /// instead of --namespaces.
    #[arg(long)]
    pub cluster_wide: bool,
    /// Labels of the Region (what stage selectors match), comma-separated KEY=VALUE.
    #[arg(long, value_name = "KEY=VALUE,...", value_delimiter = ',', value_parser = label)]
    pub labels: Vec<(String, String)>,
    /// Lifetime asked for the controller's token, e.g. 8760h (one year); at least 10m.
    #[arg(long, default_value = "8760h", value_parser = token_duration, value_name = "DURATION")]
    pub token_duration: Duration,
    /// The API server URL the controller uses (default: the server of the context's
    /// cluster in --region-kubeconfig).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The Region's Prometheus (spec.prometheus.url), for its gates.
    #[arg(long, value_name = "URL")]
    pub prometheus_url: Option<String>,
    /// The controller's namespace in the hub, where the Secret is written.
    #[arg(long, default_value = "configrollout-system", value_name = "NAMESPACE", value_parser = namespace_name)]
    pub controller_namespace: String,
    /// Do not wait for the controller to report the Region reachable.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the controller to report the Region reachable.
    #[arg(long, default_value = "60s", value_parser = duration, value_name = "DURATION", conflicts_with = "no_wait")]
    pub wait_timeout: Duration,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_go_anywhere() {
        let cli = Cli::try_parse_from([
            "kubectl-configrollout",
            "approve",
            "app",
            "-n",
            "team",
            "--context",
            "hub",
            "--stage",
            "prod",
            "--request-timeout",
            "5s",
        ])
        .expect("parses");
        assert_eq!(cli.global.namespace.as_deref(), Some("team"));
        assert_eq!(cli.global.context.as_deref(), Some("hub"));
        assert_eq!(cli.global.request_timeout, Duration::from_secs(5));
        match cli.command {
            Command::Approve {
                name,
                stage,
                reason,
                ..
            } => {
                assert_eq!(name, "app");
                assert_eq!(stage.as_deref(), Some("prod"));
                assert_eq!(reason, None);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn status_timeout_defaults_to_ten_minutes_and_parses_durations() {
        let parse = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).expect("parses");
            match cli.command {
                Command::Status { timeout, .. } => timeout,
                other => panic!("parsed as {other:?}"),
            }
        };
        assert_eq!(
            parse(&["kubectl-configrollout", "status", "app"]),
            Duration::from_secs(600)
        );
        assert_eq!(
            parse(&["kubectl-configrollout", "status", "app", "--timeout", "3s"]),
            Duration::from_secs(3)
        );
        let error = Cli::try_parse_from([
            "kubectl-configrollout",
            "status",
            "app",
            "--timeout",
            "soon",
        ])
        .expect_err("not a duration");
        assert!(error.to_string().contains("--timeout"), "{error}");
    }

    #[test]
    fn diff_and_override_parse() {
        let cli =
            Cli::try_parse_from(["kubectl-configrollout", "diff", "app", "r1"]).expect("parses");
        assert!(matches!(
            cli.command,
            Command::Diff { ref from, to: None, show_values: false, .. } if from.as_deref() == Some("r1")
        ));
        let cli = Cli::try_parse_from([
            "kubectl-configrollout",
            "override",
            "app",
            "--region",
            "region-2",
            "--region-kubeconfig",
            "/tmp/k",
            "limit=9=9",
            "old-",
        ])
        .expect("parses");
        match cli.command {
            Command::Override {
                region, changes, ..
            } => {
                assert_eq!(region, "region-2");
                assert_eq!(
                    changes,
                    vec![
                        ("limit".to_owned(), Some("9=9".to_owned())),
                        ("old".to_owned(), None)
                    ]
                );
            }
            other => panic!("parsed as {other:?}"),
        }
        for bad in ["limit", "=1", "-"] {
            assert!(
                Cli::try_parse_from([
                    "kubectl-configrollout",
                    "override",
                    "app",
                    "--region",
                    "r",
                    "--region-kubeconfig",
                    "/tmp/k",
                    bad,
                ])
                .is_err(),
                "{bad}"
            );
        }
    }

    fn region_add(args: &[&str]) -> Result<RegionAdd, clap::Error> {
        let all = ["kubectl-configrollout", "region", "add"]
            .iter()
            .chain(args)
            .copied();
        Cli::try_parse_from(all).map(|cli| match cli.command {
            Command::Region {
                command: RegionCommand::Add(add),
            } => *add,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn region_add_parses_its_flags_and_defaults() {
        let add = region_add(&[
            "eu-1",
            "--region-kubeconfig",
            "/tmp/eu-1.yaml",
            "--namespaces",
            "app,team-b",
            "--labels",
            "tier=canary,configrollout.dev/zone=eu",
            "--labels",
            "empty=",
        ])
        .expect("parses");
        assert_eq!(add.name, "eu-1");
        assert_eq!(add.region_kubeconfig, PathBuf::from("/tmp/eu-1.yaml"));
        assert_eq!(add.namespaces, ["app", "team-b"]);
        assert!(!add.cluster_wide);
        assert_eq!(
            add.labels,
            [
                ("tier".to_owned(), "canary".to_owned()),
                ("configrollout.dev/zone".to_owned(), "eu".to_owned()),
                ("empty".to_owned(), String::new()),
            ]
        );
        assert_eq!(add.token_duration, Duration::from_secs(8760 * 3600));
        assert_eq!(add.wait_timeout, Duration::from_secs(60));
        assert_eq!(add.controller_namespace, "configrollout-system");
        assert_eq!(
            (add.server, add.region_context, add.no_wait),
            (None, None, false)
        );

        let add = region_add(&[
            "eu-1",
            "--region-kubeconfig",
            "k",
            "--cluster-wide",
            "--token-duration",
            "24h",
            "--server",
            "https://eu-1.example:6443",
            "--no-wait",
        ])
        .expect("cluster-wide needs no namespaces");
        assert!(add.cluster_wide && add.no_wait && add.namespaces.is_empty());
        assert_eq!(add.token_duration, Duration::from_secs(24 * 3600));
        assert_eq!(add.server.as_deref(), Some("https://eu-1.example:6443"));
    }

    #[test]
    fn region_add_refuses_what_cannot_be_registered() {
        let refused = |args: &[&str], says: &str| {
            let error = region_add(args).expect_err("refused").to_string();
            assert!(error.contains(says), "{args:?}: {error}");
        };
        refused(&["eu-1", "--region-kubeconfig", "k"], "--namespaces");
        refused(&["eu-1", "--namespaces", "app"], "--region-kubeconfig");
        refused(
            &["EU_1", "--region-kubeconfig", "k", "--namespaces", "app"],
            "not a region name",
        );
        refused(
            &[
                "eu-1",
                "--region-kubeconfig",
                "k",
                "--namespaces",
                "app,Bad",
            ],
            "not a namespace name",
        );
        refused(
            &[
                "eu-1",
                "--region-kubeconfig",
                "k",
                "--namespaces",
                "app",
                "--labels",
                "tier",
            ],
            "is not KEY=VALUE",
        );
        refused(
            &[
                "eu-1",
                "--region-kubeconfig",
                "k",
                "--namespaces",
                "app",
                "--labels",
                "Bad_/x=y",
            ],
            "prefix",
        );
        refused(
            &[
                "eu-1",
                "--region-kubeconfig",
                "k",
                "--namespaces",
                "app",
                "--labels",
                "t=-x",
            ],
            "value",
        );
        refused(
            &[
                "eu-1",
                "--region-kubeconfig",
                "k",
                "--namespaces",
                "app",
                "--token-duration",
                "5m",
            ],
            "shorter than 10m",
        );
        refused(
            &[
                "eu-1",
                "--region-kubeconfig",
                "k",
                "--namespaces",
                "app",
                "--no-wait",
                "--wait-timeout",
                "5s",
            ],
            "cannot be used with",
        );
    }

    #[test]
    fn list_takes_all_namespaces_and_get_takes_an_output_format() {
        let cli = Cli::try_parse_from(["kubectl-configrollout", "list", "-A"]).expect("parses");
        assert!(matches!(
            cli.command,
            Command::List {
                all_namespaces: true,
                watch: false
            }
        ));
        let cli = Cli::try_parse_from(["kubectl-configrollout", "get", "app", "-o", "yaml"])
            .expect("parses");
        assert!(matches!(
            cli.command,
            Command::Get {
                output: Some(OutputFormat::Yaml),
                watch: false,
                ..
            }
        ));
        assert!(
            Cli::try_parse_from(["kubectl-configrollout", "get", "app", "-o", "wide"]).is_err()
        );
    }
}
