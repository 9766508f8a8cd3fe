//! The API calls behind each command, on the caller's kubeconfig. Every request is bounded
//! by `--request-timeout`; waits (`status`, `-w`) are bounded by their own options or run
//! until interrupted.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config, ResourceExt};

use super::approve::Reviewed;
use super::args::{Cli, Command, GlobalArgs, OutputFormat};
use super::render::{self, Outcome};
use super::{CliError, EXIT_COMPLETE, EXIT_FAILED, EXIT_TIMEOUT};
use configrollout_api::annotations::{ABORT_ANNOTATION, RETRY_ANNOTATION};
use configrollout_api::{ConfigRollout, RolloutPhase, conditions};
use configrollout_clusters::hub::HubError;
use configrollout_clusters::hub::revision_store::RevisionStore;
use configrollout_clusters::regions::overrides::write_override;
use configrollout_clusters::regions::publication::RevisionState;
use configrollout_core::crdt::{DigestKey, Stamp, WriterId};
use configrollout_core::engine::validate;
/// Annotation on a region's target: who made the last override, when, and why.
pub const OVERRIDE_REASON_ANNOTATION: &str = "configrollout.dev/override-reason";
/// Longest override reason recorded.
const MAX_OVERRIDE_REASON: usize = 512;

/// How often `status` reads the rollout.
const STATUS_POLL: Duration = Duration::from_secs(2);
/// How long abort and retry wait to show what the controller made of the request.
const CONTROL_WAIT: Duration = Duration::from_secs(10);

/// Runs one command; `Ok` carries the exit code.
pub(super) async fn run(cli: Cli) -> Result<u8, CliError> {
    // reqwest and kube share rustls; use ring, as the controller does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `lint` is offline: only the other commands load the kubeconfig.
    let hub = || Hub::connect(&cli.global);
    match cli.command {
        Command::Lint { file } => lint(&file),
        Command::List {
            all_namespaces,
            watch,
        } => hub().await?.list(all_namespaces, watch).await,
        Command::Get {
            name,
            watch,
            output,
        } => hub().await?.get(&name, watch, output).await,
        Command::Status { name, timeout } => hub().await?.status(&name, timeout).await,
        Command::Approve {
            name,
            stage,
            reason,
            revision,
            digest,
        } => {
            let hub = hub().await?;
            match revision {
                Some(revision) => {
                    let reviewed = Reviewed { revision, digest };
                    hub.approve(&name, stage, reason, &reviewed, &mut print_line)
                        .await
                }
                None => {
                    hub.approve_asking(&name, stage, reason, &mut print_line)
                        .await
                }
            }
        }
        Command::Abort { name } => {
            hub()
                .await?
                .control(&name, ABORT_ANNOTATION, &mut print_line)
                .await
        }
        Command::Retry { name } => {
            hub()
                .await?
                .control(&name, RETRY_ANNOTATION, &mut print_line)
                .await
        }
        Command::Pause { name } => hub().await?.pause(&name, true, &mut print_line).await,
        Command::Resume { name } => hub().await?.pause(&name, false, &mut print_line).await,
        Command::Dashboard { port, address } => {
            let namespaced = cli.global.namespace.is_some();
            super::dashboard::run(hub().await?, namespaced, address, port).await
        }
        Command::Diff {
            name,
            from,
            to,
            show_values,
            region,
            region_kubeconfig,
            region_context,
        } => {
            let region = region
                .zip(region_kubeconfig)
                .map(|(region, kubeconfig)| RegionAccess {
                    region,
                    kubeconfig,
                    context: region_context,
                });
            hub()
                .await?
                .diff(&name, from, to, show_values, region)
                .await
        }
        Command::RepairState {
            name,
            force,
            region,
            region_kubeconfig,
            region_context,
            digest_key_secret,
        } => {
            hub()
                .await?
                .repair_state(
                    &name,
                    force,
                    &region,
                    &region_kubeconfig,
                    region_context,
                    &digest_key_secret,
                )
                .await
        }
        Command::RotateKey {
            force,
            digest_key_secret,
        } => hub().await?.rotate_key(&digest_key_secret, force).await,
        Command::Override {
            name,
            region,
            changes,
            reason,
            region_kubeconfig,
            region_context,
            digest_key_secret,
        } => {
            hub()
                .await?
                .override_keys(
                    &name,
                    &region,
                    changes,
                    reason,
                    &region_kubeconfig,
                    region_context,
                    &digest_key_secret,
                )
                .await
        }
        Command::History { name } => {
            let rollout = hub().await?.rollout(&name).await?;
            print!("{}", render::render_history(&rollout));
            Ok(EXIT_COMPLETE)
        }
    }
}

/// How the commands that act (approve, abort, retry, pause, resume) say what happened:
/// the plugin prints each line, the dashboard collects them for the page.
pub(super) type Say<'a> = dyn FnMut(String) + Send + 'a;

fn print_line(line: String) {
    println!("{line}");
}

/// A region as the caller reaches it: its name and the caller's kubeconfig there.
struct RegionAccess {
    region: String,
    kubeconfig: std::path::PathBuf,
    context: Option<String>,
}

fn api_error(what: &str, error: kube::Error) -> CliError {
    match error {
        kube::Error::Api(status) => CliError::Api {
            what: what.to_owned(),
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        },
        other => CliError::Transport {
            what: what.to_owned(),
            message: other.to_string(),
        },
    }
}

/// A client configuration from `kubeconfig` (or the usual places) and `context`.
async fn load_config(
    kubeconfig: Option<&Path>,
    context: Option<String>,
) -> Result<Config, CliError> {
    let options = KubeConfigOptions {
        context,
        ..KubeConfigOptions::default()
    };
    match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| CliError::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| CliError::Config(e.to_string()))
        }
        None if options.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| CliError::Config(e.to_string())),
        None => Config::infer()
            .await
            .map_err(|e| CliError::Config(e.to_string())),
    }
}

/// The hub as the caller sees it: a client on their kubeconfig and the namespace.
pub(super) struct Hub {
    pub(super) client: Client,
    pub(super) namespace: String,
    pub(super) timeout: Duration,
}

impl Hub {
    /// The same caller in another namespace.
    pub(super) fn in_namespace(&self, namespace: &str) -> Hub {
        Hub {
            client: self.client.clone(),
            namespace: namespace.to_owned(),
            timeout: self.timeout,
        }
    }

    async fn connect(global: &GlobalArgs) -> Result<Hub, CliError> {
        let config = load_config(global.kubeconfig.as_deref(), global.context.clone()).await?;
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).map_err(|e| CliError::Config(e.to_string()))?;
        Ok(Hub {
            client,
            namespace,
            timeout: global.request_timeout,
        })
    }

    /// One request, bounded by `--request-timeout`.
    pub(super) async fn call<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, CliError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result.map_err(|error| api_error(what, error)),
            Err(_) => Err(CliError::Timeout {
                what: what.to_owned(),
                after: self.timeout,
            }),
        }
    }

    fn rollouts(&self) -> Api<ConfigRollout> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(super) async fn rollout(&self, name: &str) -> Result<ConfigRollout, CliError> {
        let what = format!("reading configrollout {}/{name}", self.namespace);
        match self.call(&what, self.rollouts().get(name)).await {
            Err(CliError::Api { code: 404, .. }) => Err(CliError::Message(format!(
                "configrollout {name} not found in namespace {}",
                self.namespace
            ))),
            other => other,
        }
    }

    async fn list(&self, all_namespaces: bool, watch: bool) -> Result<u8, CliError> {
        let api: Api<ConfigRollout> = if all_namespaces {
            Api::all(self.client.clone())
        } else {
            self.rollouts()
        };
        if !watch {
            let list = self
                .call("listing configrollouts", api.list(&Default::default()))
                .await?;
            print!("{}", render::render_list(&list.items, all_namespaces));
            return Ok(EXIT_COMPLETE);
        }
        let mut known: BTreeMap<(String, String), ConfigRollout> = BTreeMap::new();
        let mut initial: Option<BTreeMap<(String, String), ConfigRollout>> = None;
        let mut screen = Screen::new();
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = stream.next().await {
            let key = |rollout: &ConfigRollout| {
                (rollout.namespace().unwrap_or_default(), rollout.name_any())
            };
            match event {
                Ok(watcher::Event::Init) => initial = Some(BTreeMap::new()),
                Ok(watcher::Event::InitApply(rollout)) => {
                    if let Some(initial) = initial.as_mut() {
                        initial.insert(key(&rollout), rollout);
                    }
                }
                Ok(watcher::Event::InitDone) => known = initial.take().unwrap_or_default(),
                Ok(watcher::Event::Apply(rollout)) => {
                    known.insert(key(&rollout), rollout);
                }
                Ok(watcher::Event::Delete(rollout)) => {
                    known.remove(&key(&rollout));
                }
                Err(error) => {
                    eprintln!("watch: {error}");
                    continue;
                }
            }
            if initial.is_none() {
                let rollouts: Vec<ConfigRollout> = known.values().cloned().collect();
                screen.show(&render::render_list(&rollouts, all_namespaces));
            }
        }
        Ok(EXIT_COMPLETE)
    }

    async fn get(
        &self,
        name: &str,
        watch: bool,
        output: Option<OutputFormat>,
    ) -> Result<u8, CliError> {
        let show = |rollout: &ConfigRollout| -> Result<String, CliError> {
            match output {
                None => Ok(render::render_get(rollout)),
                Some(OutputFormat::Json) => serde_json::to_string_pretty(rollout)
                    .map(|text| text + "\n")
                    .map_err(|e| CliError::Message(format!("rendering JSON: {e}"))),
                Some(OutputFormat::Yaml) => serde_saphyr::to_string(rollout)
                    .map_err(|e| CliError::Message(format!("rendering YAML: {e}"))),
            }
        };
        // Read once first, so that a missing rollout is an error, not an empty watch.
        let rollout = self.rollout(name).await?;
        if !watch {
            print!("{}", show(&rollout)?);
            return Ok(EXIT_COMPLETE);
        }
        let mut screen = Screen::new();
        screen.show(&show(&rollout)?);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = std::pin::pin!(
            watcher(self.rollouts(), config)
                .default_backoff()
                .applied_objects()
        );
        while let Some(event) = stream.next().await {
            match event {
                Ok(rollout) => screen.show(&show(&rollout)?),
                Err(error) => eprintln!("watch: {error}"),
            }
        }
        Ok(EXIT_COMPLETE)
    }

    async fn status(&self, name: &str, timeout: Duration) -> Result<u8, CliError> {
        let started = Instant::now();
        let mut last_line = String::new();
        loop {
            let rollout = self.rollout(name).await?;
            match render::outcome(&rollout) {
                Some(Outcome::Complete(line)) => {
                    println!("{line}");
                    return Ok(EXIT_COMPLETE);
                }
                Some(Outcome::Failed(line)) => {
                    println!("{line}");
                    return Ok(EXIT_FAILED);
                }
                None => {}
            }
            let waiting = render::waiting_on(&rollout);
            let line = format!("{name}: waiting on {}", waiting.what);
            if line != last_line {
                println!("{line}");
                last_line = line;
            }
            let elapsed = started.elapsed();
            if elapsed >= timeout {
                println!(
                    "timed out after {timeout:?}: {name} is still waiting on {}; unblocks: {}",
                    waiting.what, waiting.who
                );
                return Ok(EXIT_TIMEOUT);
            }
            tokio::time::sleep(STATUS_POLL.min(timeout - elapsed)).await;
        }
    }

    /// The caller's user name, as the hub authenticates them.
    pub(super) async fn whoami(&self) -> Result<String, CliError> {
        self.whoami_on(&self.client, "the API server").await
    }

    /// The caller's user name, as the API server `client` reaches authenticates them.
    /// The controller's digest key, read from its Secret `NAMESPACE/NAME` in the hub;
    /// `why` says, when the caller may not read it, why the command needs it.
    pub(super) async fn digest_key(
        &self,
        digest_key_secret: &str,
        why: &str,
    ) -> Result<DigestKey, CliError> {
        let (secret_namespace, secret_name) =
            digest_key_secret.split_once('/').ok_or_else(|| {
                CliError::Message(format!(
                    "--digest-key-secret {digest_key_secret:?} is not NAMESPACE/NAME"
                ))
            })?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), secret_namespace);
        let secret = match self
            .call("reading the digest key Secret", secrets.get(secret_name))
            .await
        {
            Err(CliError::Api { code: 403, .. }) => {
                return Err(CliError::Message(format!(
                    "you may not read the digest key Secret {digest_key_secret} in the hub: \
                     {why}; nothing was written"
                )));
            }
            other => other?,
        };
        configrollout_clusters::hub::digest_keys::from_secret(&secret)
            .map_err(|e| CliError::Message(format!("Secret {digest_key_secret}: {e}")))
    }

    /// Runs `write` in a region (reads, then writes) within three request timeouts.
    pub(super) async fn region_write<T>(
        &self,
        what: &str,
        write: impl std::future::Future<Output = T>,
    ) -> Result<T, CliError> {
        let bound = self.timeout.saturating_mul(3);
        tokio::time::timeout(bound, write)
            .await
            .map_err(|_| CliError::Timeout {
                what: what.to_owned(),
                after: bound,
            })
    }

    /// A client of `region` from the caller's region kubeconfig, and who the caller is
    /// there.
    pub(super) async fn region_client(
        &self,
        region: &str,
        region_kubeconfig: &Path,
        region_context: Option<String>,
    ) -> Result<(Client, String), CliError> {
        let config = load_config(Some(region_kubeconfig), region_context).await?;
        let client = Client::try_from(config).map_err(|e| CliError::Config(e.to_string()))?;
        let user = self.whoami_on(&client, &format!("region {region}")).await?;
        Ok((client, user))
    }

    async fn whoami_on(&self, client: &Client, server: &str) -> Result<String, CliError> {
        let api: Api<SelfSubjectReview> = Api::all(client.clone());
        let review = SelfSubjectReview::default();
        let answer = self
            .call(
                &format!("asking {server} who you are (SelfSubjectReview)"),
                api.create(&PostParams::default(), &review),
            )
            .await?;
        answer
            .status
            .and_then(|status| status.user_info)
            .and_then(|user| user.username)
            .filter(|name| !name.is_empty())
            .ok_or_else(|| {
                CliError::Message(format!(
                    "{server}'s SelfSubjectReview names no user: cannot act anonymously"
                ))
            })
    }

    /// The rollout's stored revisions (ControllerRevisions), read with the caller's RBAC:
    /// whoever may not read them is told so.
    pub(super) async fn revisions(
        &self,
        rollout: &ConfigRollout,
    ) -> Result<BTreeMap<String, RevisionState>, CliError> {
        let name = rollout.name_any();
        let store = RevisionStore::new(self.client.clone(), &self.namespace);
        let revisions = match tokio::time::timeout(self.timeout, store.load(rollout)).await {
            Err(_) => {
                return Err(CliError::Timeout {
                    what: "reading the revisions (ControllerRevisions)".to_owned(),
                    after: self.timeout,
                });
            }
            Ok(Err(HubError::Call(error))) if error.code() == Some(403) => {
                return Err(CliError::Message(format!(
                    "you may not read the revisions of configrollout {}/{name}: reading \
                     controllerrevisions (apps) in namespace {} is forbidden to you; \
                     ask for get/list on controllerrevisions there. No value was printed.",
                    self.namespace, self.namespace
                )));
            }
            Ok(Err(error)) => {
                return Err(CliError::Message(format!(
                    "reading the revisions of configrollout {}/{name}: {error}",
                    self.namespace
                )));
            }
            Ok(Ok(revisions)) => revisions,
        };
        Ok(revisions)
    }

    /// `diff`: the keys two stored revisions differ in, read with the caller's RBAC.
    async fn diff(
        &self,
        name: &str,
        from: Option<String>,
        to: Option<String>,
        show_values: bool,
        region: Option<RegionAccess>,
    ) -> Result<u8, CliError> {
        let rollout = self.rollout(name).await?;
        let revisions = self.revisions(&rollout).await?;
        let number = |revision: &str| -> Option<u64> {
            revision.strip_prefix('r').unwrap_or(revision).parse().ok()
        };
        let canonical = |revision: String| -> Result<String, CliError> {
            number(&revision).map(|n| format!("r{n}")).ok_or_else(|| {
                CliError::Message(format!("{revision:?} is not a revision (r1, r2, ...)"))
            })
        };
        let current = rollout
            .status
            .as_ref()
            .and_then(|status| status.revision.clone())
            .or_else(|| revisions.keys().max_by_key(|r| number(r)).cloned())
            .ok_or_else(|| {
                CliError::Message(format!(
                    "configrollout {}/{name} has no revision yet: nothing to diff",
                    self.namespace
                ))
            })?;
        let state = |revision: &str| -> Result<BTreeMap<String, String>, CliError> {
            revisions
                .get(revision)
                .map(RevisionState::desired)
                .ok_or_else(|| {
                    CliError::Message(format!(
                        "configrollout {}/{name} keeps no revision {revision} (kept: {})",
                        self.namespace,
                        {
                            let mut kept: Vec<&String> = revisions.keys().collect();
                            kept.sort_by_key(|r| number(r));
                            kept.into_iter().cloned().collect::<Vec<_>>().join(", ")
                        }
                    ))
                })
        };
        if let Some(region) = region {
            let revision = match from {
                Some(from) => canonical(from)?,
                None => current,
            };
            let declared = state(&revision)?;
            // Only the keys this rollout declares: others may share the ConfigMap.
            let managed: std::collections::BTreeSet<String> = revisions
                .values()
                .flat_map(|revision| revision.desired().into_keys())
                .collect();
            let target = &rollout.spec.target;
            let config = load_config(Some(&region.kubeconfig), region.context).await?;
            let client = Client::try_from(config).map_err(|e| CliError::Config(e.to_string()))?;
            let configmaps: Api<ConfigMap> = Api::namespaced(client, &target.namespace);
            let what = format!(
                "reading configmap {}/{} in region {}",
                target.namespace, target.name, region.region
            );
            let held = match self.call(&what, configmaps.get_opt(&target.name)).await {
                Err(CliError::Api { code: 403, .. }) => {
                    return Err(CliError::Message(format!(
                        "you may not read configmap {}/{} in region {} with that kubeconfig. \
                         No value was printed.",
                        target.namespace, target.name, region.region
                    )));
                }
                other => other?,
            };
            let held: BTreeMap<String, String> = held
                .and_then(|configmap| configmap.data)
                .unwrap_or_default()
                .into_iter()
                .filter(|(key, _)| managed.contains(key))
                .collect();
            let changes = render::diff_keys(&declared, &held);
            print!(
                "{}",
                render::render_diff(
                    &format!("{}/{name} {revision}", self.namespace),
                    &format!(
                        "region {} configmap {}/{}",
                        region.region, target.namespace, target.name
                    ),
                    &changes,
                    show_values
                )
            );
            return Ok(EXIT_COMPLETE);
        }
        let (from, to) = match (from, to) {
            (Some(from), Some(to)) => (Some(canonical(from)?), canonical(to)?),
            (Some(from), None) => (Some(canonical(from)?), current),
            (None, _) => {
                // The current revision against the one declared before it, if any.
                let to = current;
                let before = number(&to)
                    .filter(|n| *n > 1)
                    .map(|n| format!("r{}", n - 1));
                (before, to)
            }
        };
        let (from_label, from_keys) = match &from {
            Some(from) => (format!("{}/{name} {from}", self.namespace), state(from)?),
            None => ("(no earlier revision)".to_owned(), BTreeMap::new()),
        };
        let to_keys = state(&to)?;
        let changes = render::diff_keys(&from_keys, &to_keys);
        print!(
            "{}",
            render::render_diff(
                &from_label,
                &format!("{}/{name} {to}", self.namespace),
                &changes,
                show_values
            )
        );
        Ok(EXIT_COMPLETE)
    }

    /// `override`: the regional emergency override, written as the caller in the region.
    #[allow(clippy::too_many_arguments)]
    async fn override_keys(
        &self,
        name: &str,
        region: &str,
        changes: Vec<(String, Option<String>)>,
        reason: Option<String>,
        region_kubeconfig: &Path,
        region_context: Option<String>,
        digest_key_secret: &str,
    ) -> Result<u8, CliError> {
        let rollout = self.rollout(name).await?;
        let target = rollout.spec.target.clone();
        let key = self
            .digest_key(
                digest_key_secret,
                "an override must carry the controller's keyed digest",
            )
            .await?;
        let (region_client, user) = self
            .region_client(region, region_kubeconfig, region_context)
            .await?;
        let writer = WriterId::override_by(&user).map_err(|e| {
            CliError::Message(format!("{user:?} cannot name an override writer: {e}"))
        })?;
        let now_ms = u64::try_from(Utc::now().timestamp_millis()).unwrap_or_default();
        let stamp = Stamp::new(now_ms, 0, writer.clone());
        let changes: BTreeMap<String, Option<String>> = changes.into_iter().collect();
        let written = write_override(
            &region_client,
            &key,
            &target.namespace,
            &target.name,
            stamp,
            &changes,
        );
        let materialized = self
            .region_write(&format!("writing the override in region {region}"), written)
            .await?
            .map_err(|e| {
                CliError::Message(format!(
                    "writing the override in region {region} as {user}: {e}"
                ))
            })?;
        let keys: Vec<String> = changes
            .iter()
            .map(|(key, value)| match value {
                Some(_) => format!("{key} set"),
                None => format!("{key} removed"),
            })
            .collect();
        println!(
            "override written in region {region} to configmap {}/{} as {writer}: {}",
            target.namespace,
            target.name,
            keys.join(", ")
        );
        println!(
            "keys overridden there now: {}; digest {}",
            if materialized.overridden_keys.is_empty() {
                "-".to_owned()
            } else {
                materialized.overridden_keys.join(", ")
            },
            materialized.digest
        );
        if let Some(reason) = reason {
            // Kept beside the values it explains, on the target itself, where whoever
            // looks at the region finds it; the controller keeps annotations it does not
            // own.
            let record = format!(
                "{user} at {}: {}",
                Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true),
                reason.chars().take(MAX_OVERRIDE_REASON).collect::<String>()
            );
            let patch = serde_json::json!({"metadata": {"annotations": {OVERRIDE_REASON_ANNOTATION: record}}});
            let api: Api<ConfigMap> = Api::namespaced(region_client.clone(), &target.namespace);
            let patched = tokio::time::timeout(
                self.timeout,
                api.patch(&target.name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await;
            match patched {
                Ok(Ok(_)) => println!("reason recorded as {OVERRIDE_REASON_ANNOTATION}: {record}"),
                Ok(Err(error)) => println!(
                    "the override is written, but its reason could not be recorded ({error}); \
                     keep it with your records: {reason}"
                ),
                Err(_) => println!(
                    "the override is written, but recording its reason timed out; keep it with \
                     your records: {reason}"
                ),
            }
        }
        println!(
            "a revision of {name} declared from now on wins over this override; an older one \
             arriving later does not"
        );
        Ok(EXIT_COMPLETE)
    }

    /// Abort or retry: sets the annotation to now, then shows what the controller made of
    /// it.
    pub(super) async fn control(
        &self,
        name: &str,
        annotation: &str,
        say: &mut Say<'_>,
    ) -> Result<u8, CliError> {
        if annotation == RETRY_ANNOTATION {
            // A retry resumes only a halt older than the request: refuse what cannot act,
            // and date the request after the halt (the annotation counts in seconds).
            let rollout = self.rollout(name).await?;
            let status = rollout.status.as_ref();
            if status.and_then(|s| s.phase) != Some(RolloutPhase::Halted) {
                return Err(CliError::Message(format!(
                    "retry resumes only a halted rollout: configrollout {}/{name} is {}",
                    self.namespace,
                    status
                        .and_then(|s| s.phase)
                        .map_or_else(|| "without status".to_owned(), |p| format!("{p:?}"))
                )));
            }
            let halted_at = status
                .and_then(|s| s.true_condition(conditions::HALTED))
                .map(|c| c.last_transition_time.0.as_second());
            if let Some(halted_at) = halted_at {
                let wait = halted_at + 1 - Utc::now().timestamp();
                if (1..=2).contains(&wait) {
                    tokio::time::sleep(Duration::from_secs(wait as u64)).await;
                }
            }
        }
        let now = Utc::now();
        let at = now.to_rfc3339_opts(SecondsFormat::Secs, true);
        let patch = serde_json::json!({ "metadata": { "annotations": { annotation: at } } });
        let what = format!("annotating configrollout {}/{name}", self.namespace);
        self.patch(name, &what, &patch).await?;
        let verb = if annotation == ABORT_ANNOTATION {
            "abort"
        } else {
            "retry"
        };
        say(format!(
            "{verb} requested for configrollout {}/{name} at {at} ({annotation})",
            self.namespace
        ));
        let started = Instant::now();
        loop {
            let rollout = self.rollout(name).await?;
            let control = rollout.status.as_ref().and_then(|s| s.control.as_ref());
            let acted = |time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                // The controller records the request's own time: equal means this one.
                time.is_some_and(|time| time.0.as_second() == now.timestamp())
            };
            let refused = annotation == RETRY_ANNOTATION
                && acted(control.and_then(|c| c.refused_retry_at.as_ref()));
            let done = if annotation == ABORT_ANNOTATION {
                acted(control.and_then(|c| c.abort_at.as_ref()))
            } else {
                acted(control.and_then(|c| c.retry_at.as_ref()))
            };
            if refused {
                say("the controller refused the retry (see the ControlRefused event)".to_owned());
                return Ok(EXIT_FAILED);
            }
            if done {
                let waiting = render::waiting_on(&rollout);
                say(format!(
                    "the controller acted on it: {} is {}; waiting on {}",
                    name,
                    rollout
                        .status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .map_or_else(|| "-".to_owned(), |p| format!("{p:?}")),
                    waiting.what
                ));
                return Ok(EXIT_COMPLETE);
            }
            if started.elapsed() >= CONTROL_WAIT {
                say(format!(
                    "the controller has not acted on it within {CONTROL_WAIT:?} \
                     (is it running? a retry dated before the halt, by a clock behind the \
                     controller's, never acts); it is {}",
                    rollout
                        .status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .map_or_else(|| "without status".to_owned(), |p| format!("{p:?}"))
                ));
                return Ok(EXIT_COMPLETE);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub(super) async fn pause(
        &self,
        name: &str,
        paused: bool,
        say: &mut Say<'_>,
    ) -> Result<u8, CliError> {
        let patch = serde_json::json!({ "spec": { "paused": paused } });
        let what = format!(
            "patching spec.paused of configrollout {}/{name}",
            self.namespace
        );
        let rollout = self.patch(name, &what, &patch).await?;
        say(format!(
            "configrollout {}/{name} {}: spec.paused is {}; phase {}",
            self.namespace,
            if paused { "paused" } else { "resumed" },
            rollout.spec.paused,
            rollout
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map_or_else(|| "-".to_owned(), |p| format!("{p:?}")),
        ));
        Ok(EXIT_COMPLETE)
    }

    async fn patch(
        &self,
        name: &str,
        what: &str,
        patch: &serde_json::Value,
    ) -> Result<ConfigRollout, CliError> {
        let api = self.rollouts();
        match self
            .call(
                what,
                api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
            )
            .await
        {
            Err(CliError::Api { code: 404, .. }) => Err(CliError::Message(format!(
                "configrollout {name} not found in namespace {}",
                self.namespace
            ))),
            Err(CliError::Api {
                code: 403, message, ..
            }) => Err(CliError::Message(format!(
                "you may not change configrollouts in namespace {}: {message}",
                self.namespace
            ))),
            other => other,
        }
    }
}

/// Prints successive views: in a terminal each one replaces the last; piped, each is
/// appended after a blank line, without escape codes. A view equal to the last is skipped.
struct Screen {
    terminal: bool,
    last: Option<String>,
}

impl Screen {
    fn new() -> Screen {
        Screen {
            terminal: std::io::stdout().is_terminal(),
            last: None,
        }
    }

    fn show(&mut self, view: &str) {
        if self.last.as_deref() == Some(view) {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = if self.terminal {
            // Home, clear the screen, draw.
            write!(out, "\x1b[H\x1b[2J{view}")
        } else if self.last.is_some() {
            write!(out, "\n{view}")
        } else {
            write!(out, "{view}")
        };
        let _ = out.flush();
        self.last = Some(view.to_owned());
    }
}

/// `lint -f FILE`: every ConfigRollout document of the file, checked offline.
fn lint(file: &Path) -> Result<u8, CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::Message(format!("reading {}: {e}", file.display())))?;
    let report = lint_text(&text);
    for line in &report.lines {
        println!("{}: {line}", file.display());
    }
    Ok(if report.ok {
        EXIT_COMPLETE
    } else {
        EXIT_FAILED
    })
}

/// What `lint` found in a manifest.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct LintReport {
    /// Whether every document is a valid ConfigRollout.
    pub ok: bool,
    /// One line per finding, or per valid rollout.
    pub lines: Vec<String>,
}

pub(super) fn lint_text(text: &str) -> LintReport {
    let mut lines = Vec::new();
    let mut ok = true;
    let mut documents = 0;
    let parsed: Vec<serde_json::Value> = match serde_saphyr::from_multiple(text) {
        Ok(parsed) => parsed,
        Err(error) => {
            return LintReport {
                ok: false,
                lines: vec![format!("not YAML: {error}")],
            };
        }
    };
    for (index, value) in parsed.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        documents += 1;
        let kind = value.get("kind").and_then(serde_json::Value::as_str);
        let api_version = value.get("apiVersion").and_then(serde_json::Value::as_str);
        let expected_version = format!(
            "{}/{}",
            configrollout_api::GROUP,
            configrollout_api::VERSION
        );
        if kind != Some("ConfigRollout") || api_version != Some(expected_version.as_str()) {
            ok = false;
            lines.push(format!(
                "document {}: kind {} apiVersion {} is not a ConfigRollout ({expected_version})",
                index + 1,
                kind.unwrap_or("-"),
                api_version.unwrap_or("-")
            ));
            continue;
        }
        let rollout: ConfigRollout = match serde_json::from_value(value) {
            Ok(rollout) => rollout,
            Err(error) => {
                ok = false;
                lines.push(format!("document {}: {error}", index + 1));
                continue;
            }
        };
        let name = rollout
            .metadata
            .name
            .clone()
            .unwrap_or_else(|| format!("document {}", index + 1));
        let mut errors: Vec<String> = Vec::new();
        if rollout.spec.data.is_some() == rollout.spec.from_config_map.is_some() {
            errors.push("spec: set exactly one of spec.data or spec.fromConfigMap".to_owned());
        }
        if rollout.spec.stages.is_empty() {
            errors.push("spec.stages: at least one stage is required".to_owned());
        }
        errors.extend(validate(&rollout.spec).iter().map(ToString::to_string));
        if errors.is_empty() {
            lines.push(format!("configrollout {name}: valid"));
        } else {
            ok = false;
            lines.extend(
                errors
                    .into_iter()
                    .map(|error| format!("configrollout {name}: {error}")),
            );
        }
    }
    if documents == 0 {
        ok = false;
        lines.push("no ConfigRollout in the file".to_owned());
    }
    LintReport { ok, lines }
}

#[cfg(test)]
mod tests;
