//! The hub as the caller sees it: [`Hub`], a client on their kubeconfig, with the
//! requests every command shares (reading a rollout, its revisions, the digest key, who
//! the caller is, reaching a region), each bounded by `--request-timeout`.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};

use super::CliError;
use super::args::GlobalArgs;
use configrollout_api::ConfigRollout;
use configrollout_clusters::hub::HubError;
use configrollout_clusters::hub::revision_store::RevisionStore;
use configrollout_clusters::regions::publication::RevisionState;
use configrollout_core::crdt::DigestKey;

/// How the commands that act (approve, abort, retry, pause, resume) say what happened:
/// the plugin prints each line, the dashboard collects them for the page.
pub(super) type Say<'a> = dyn FnMut(String) + Send + 'a;

pub(super) fn api_error(what: &str, error: kube::Error) -> CliError {
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
pub(super) async fn load_config(
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

    pub(super) async fn connect(global: &GlobalArgs) -> Result<Hub, CliError> {
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

    pub(super) fn rollouts(&self) -> Api<ConfigRollout> {
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

    /// The caller's user name, as the hub authenticates them.
    pub(super) async fn whoami(&self) -> Result<String, CliError> {
        self.whoami_on(&self.client, "the API server").await
    }

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

    /// The caller's user name, as the API server `client` reaches authenticates them.
    pub(super) async fn whoami_on(
        &self,
        client: &Client,
        server: &str,
    ) -> Result<String, CliError> {
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

    pub(super) async fn patch(
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
