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
