//! Clients for regions, built from the kubeconfig Secrets their `Region` objects name,
//! cached, and rebuilt when the Secret changes.
//!
//! A kubeconfig is not trusted whole: it comes from a Secret only in the controller's own
//! namespace, and by default it may not run commands (`exec`, `auth-provider`), read files
//! of the controller's pod (`tokenFile`, `certificate-authority`, `client-certificate`,
//! `client-key`: a `tokenFile` could name the controller's own service-account token) or
//! turn off server certificate checks. Errors name the entry and field at fault, never the
//! file's text: they end up in `Region.status.lastError` and rollout status, which tenants
//! read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PartialObjectMeta};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Config};

use super::object_cache::{
    self, KeptObjects, RegionChange, RegionChangeSender, RegionObjects, RegionWatches,
};
use super::prometheus_credentials::{CredentialError, endpoint_credentials, secrets_named};
use super::store::CALL_TIMEOUT;
use configrollout_api::{PrometheusEndpoint, Region, SecretKeyRef};
use configrollout_core::gates::Credentials;

mod answer_limit;
mod kubeconfig;

pub use answer_limit::MAX_ANSWER_BYTES;
use answer_limit::bounded_client;
pub use kubeconfig::{
    CredentialPolicy, KubeconfigEntry, KubeconfigProblem, MAX_KUBECONFIG_BYTES, UnsafeField,
};
use kubeconfig::{client_problem, config_problem, yaml_problem};

/// How long connecting to a region may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a region's client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The Region names a Secret outside the controller's namespace; it is not read.
    #[error(
        "spec.kubeconfigSecretRef.namespace must be {required} (the controller's namespace), \
         not {namespace}"
    )]
    SecretOutsideControllerNamespace {
        /// The namespace the Region names.
        namespace: String,
        /// The controller's namespace.
        required: String,
    },
    /// The Secret could not be read from the hub.
    #[error("reading Secret {namespace}/{name}: {reason}")]
    SecretUnreadable {
        /// Secret namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// Why (HTTP reason or transport error).
        reason: String,
    },
    /// The Secret has no such key.
    #[error("Secret {namespace}/{name} has no key {key:?}")]
    MissingKey {
        /// Secret namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The key the Region names.
        key: String,
    },
    /// The key does not hold a usable kubeconfig, or one this controller may not use.
    #[error("Secret {namespace}/{name} key {key:?} is not a usable kubeconfig: {problem}")]
    BadKubeconfig {
        /// Secret namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The key.
        key: String,
        /// What is wrong, in words that quote nothing from the file.
        problem: KubeconfigProblem,
    },
}

/// Who has seen each kubeconfig Secret's resourceVersion: the controller's metadata-only
/// watch of its namespace's Secrets (no Secret data is held by it).
pub type SecretVersions = Store<PartialObjectMeta<Secret>>;

/// Region changes waiting for the controller to take them.
pub const REGION_CHANGES_QUEUED: usize = 4096;

/// A region's client, the Secret (and key) it was built from and that Secret's
/// resourceVersion.
struct CachedClient {
    reference: SecretKeyRef,
    version: Option<String>,
    client: Client,
    /// The region's ConfigMap watches, through this client: rebuilt with it.
    watches: Arc<RegionWatches>,
}

/// A region's Prometheus credentials, what they were read for (the Region's
/// `spec.prometheus`) and the resourceVersion of each Secret read for them, by name.
struct CachedCredentials {
    endpoint: PrometheusEndpoint,
    versions: Vec<(String, Option<String>)>,
    credentials: Arc<Credentials>,
}

/// A cache of region clients keyed by region name, rebuilt when the Secret's
/// resourceVersion or the Region's reference changes. Region Prometheus credentials are
/// cached beside them, the same way.
///
/// The resourceVersion comes from the watch ([`RegionClients::follow_secret_versions`]):
/// reading each Secret at each use cost one hub request per region per reconcile, the
/// largest share of the hub's requests at scale (`make scale-bench`). Until the watch
/// has seen a Secret (and without a watch) it is read, as before.
///
/// Beside each client it keeps the region's ConfigMap watches and the objects last read or
/// written there ([`object_cache`]), so that observing a region needs no read of what has
/// not changed.
pub struct RegionClients {
    hub: Client,
    /// The watches of regions reached through the hub's own client.
    hub_watches: Arc<RegionWatches>,
    policy: CredentialPolicy,
    cache: Mutex<HashMap<String, CachedClient>>,
    prometheus: Mutex<HashMap<String, CachedCredentials>>,
    secret_versions: OnceLock<SecretVersions>,
    kept: KeptObjects,
    changes: RegionChangeSender,
}

impl RegionClients {
    /// Clients for regions whose Secrets live in the cluster `hub` reaches, in
    /// `policy.controller_namespace`. `watch_hub` reaches the same cluster with a read
    /// timeout a quiet watch outlives, for regions that are the hub itself.
    pub fn new(hub: Client, watch_hub: Client, policy: CredentialPolicy) -> Self {
        let (changes, _) = tokio::sync::broadcast::channel(REGION_CHANGES_QUEUED);
        Self {
            hub,
            hub_watches: Arc::new(RegionWatches::new("hub", watch_hub, changes.clone())),
            policy,
            cache: Mutex::new(HashMap::new()),
            prometheus: Mutex::new(HashMap::new()),
            secret_versions: OnceLock::new(),
            kept: KeptObjects::default(),
            changes,
        }
    }

    /// The changes the region watches see from now on that this process did not make
    /// ([`RegionChange`]). A receiver more than [`REGION_CHANGES_QUEUED`] behind loses the
    /// oldest: the rollouts' next resync finds them.
    pub fn region_changes(&self) -> tokio::sync::broadcast::Receiver<RegionChange> {
        self.changes.subscribe()
    }

    /// Whether `change` is a write of this process after all (its answer came after the
    /// watch's event): the object is kept at the version the change names.
    pub fn made_here(&self, change: &RegionChange) -> bool {
        self.kept.holds(change)
    }

    /// What reads of `namespace` in `region` may take from memory: call after
    /// [`Self::client`] succeeded for it (a region without a cached client has no watch,
    /// and every read goes to the region).
    pub fn objects<'a>(&'a self, region: &'a Region, namespace: &'a str) -> RegionObjects<'a> {
        let name = region.metadata.name.as_deref().unwrap_or_default();
        let watches = match region.spec.kubeconfig_secret_ref.as_ref() {
            None => Some(self.hub_watches.clone()),
            Some(_) => self
                .cache
                .lock()
                .ok()
                .and_then(|cache| cache.get(name).map(|cached| cached.watches.clone())),
        };
        let versions = watches.and_then(|watches| watches.namespace(namespace));
        RegionObjects::new(&self.kept, name, namespace, versions)
    }

    /// Takes Secrets' resourceVersions from `versions` from now on (set once).
    pub fn follow_secret_versions(&self, versions: SecretVersions) {
        let _ = self.secret_versions.set(versions);
    }

    /// Forgets the clients of regions not in `existing` (deleted Regions), so that the
    /// cache holds no more than the hub's Regions.
    pub fn retain<'a>(&self, existing: impl IntoIterator<Item = &'a str>) {
        let existing: std::collections::HashSet<&str> = existing.into_iter().collect();
        if let Ok(mut cache) = self.cache.lock() {
            cache.retain(|name, _| existing.contains(name.as_str()));
        }
        if let Ok(mut cache) = self.prometheus.lock() {
            cache.retain(|name, _| existing.contains(name.as_str()));
        }
        self.kept.retain(&existing);
    }

    /// How many region clients are cached.
    pub fn cached_count(&self) -> usize {
        self.cache.lock().map_or(0, |cache| cache.len())
    }

    /// The client for `region`: the hub's own when the Region names no Secret.
    pub async fn client(&self, region: &Region) -> Result<Client, ClientError> {
        let Some(reference) = region.spec.kubeconfig_secret_ref.as_ref() else {
            return Ok(self.hub.clone());
        };
        // Checked before reading: the controller may read Secrets in other namespaces
        // (for other reasons or other tenants), and a Region must not borrow that.
        if reference.namespace != self.policy.controller_namespace {
            return Err(ClientError::SecretOutsideControllerNamespace {
                namespace: reference.namespace.clone(),
                required: self.policy.controller_namespace.clone(),
            });
        }
        let name = region.metadata.name.clone().unwrap_or_default();
        if let Some(watched) = self.watched_version(&reference.namespace, &reference.name)
            && let Some(client) = self.cached(&name, reference, watched.as_deref())
        {
            return Ok(client);
        }
        let secret = self
            .read_secret(
                &reference.namespace,
                &reference.name,
                "read kubeconfig Secret",
            )
            .await
            .map_err(|reason| ClientError::SecretUnreadable {
                namespace: reference.namespace.clone(),
                name: reference.name.clone(),
                reason,
            })?;
        let version = secret.metadata.resource_version.clone();
        if let Some(client) = self.cached(&name, reference, version.as_deref()) {
            return Ok(client);
        }
        let (client, watch_client) = build_client(reference, &secret, &self.policy).await?;
        let watches = Arc::new(RegionWatches::new(
            &name,
            watch_client,
            self.changes.clone(),
        ));
        // Another kubeconfig may reach another cluster: nothing kept of the old one is
        // an answer there.
        self.kept.forget_region(&name);
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(
                name,
                CachedClient {
                    reference: reference.clone(),
                    version,
                    client: client.clone(),
                    watches,
                },
            );
        }
        Ok(client)
    }

    /// The credentials of `region`'s Prometheus (`spec.prometheus.auth`) and the headers
    /// its queries carry (`spec.prometheus.headers`), from the Secrets they name in the
    /// controller's namespace, read again only when the watch sees one of them change;
    /// `None` when the Region names neither.
    pub async fn prometheus_credentials(
        &self,
        region: &Region,
    ) -> Option<Result<Arc<Credentials>, CredentialError>> {
        let prometheus = region.spec.prometheus.as_ref()?;
        if prometheus.auth.is_none() && prometheus.headers.is_empty() {
            return None;
        }
        Some(self.read_prometheus_credentials(region, prometheus).await)
    }

    async fn read_prometheus_credentials(
        &self,
        region: &Region,
        prometheus: &PrometheusEndpoint,
    ) -> Result<Arc<Credentials>, CredentialError> {
        let namespace = self.policy.controller_namespace.as_str();
        // Checked before reading, as for kubeconfigs. Headers' Secrets name no namespace:
        // they are always read from the controller's.
        if let Some(auth) = &prometheus.auth
            && auth.secret_ref.namespace != namespace
        {
            return Err(CredentialError::OutsideControllerNamespace {
                namespace: auth.secret_ref.namespace.clone(),
                required: namespace.to_owned(),
            });
        }
        let name = region.metadata.name.clone().unwrap_or_default();
        let secret_names = secrets_named(prometheus);
        let watched: Option<Vec<(String, Option<String>)>> = secret_names
            .iter()
            .map(|secret| {
                self.watched_version(namespace, secret)
                    .map(|version| ((*secret).to_owned(), version))
            })
            .collect();
        if let Some(versions) = watched
            && let Some(credentials) = self.cached_credentials(&name, prometheus, &versions)
        {
            return Ok(credentials);
        }
        let mut secrets = BTreeMap::new();
        for secret_name in secret_names {
            let secret = self
                .read_secret(namespace, secret_name, "read Prometheus credentials Secret")
                .await
                .map_err(|reason| CredentialError::Unreadable {
                    namespace: namespace.to_owned(),
                    name: secret_name.to_owned(),
                    reason,
                })?;
            secrets.insert(secret_name.to_owned(), secret);
        }
        let versions: Vec<(String, Option<String>)> = secrets
            .iter()
            .map(|(secret_name, secret)| {
                (
                    secret_name.clone(),
                    secret.metadata.resource_version.clone(),
                )
            })
            .collect();
        if let Some(credentials) = self.cached_credentials(&name, prometheus, &versions) {
            return Ok(credentials);
        }
        let credentials = Arc::new(endpoint_credentials(prometheus, namespace, &secrets)?);
        if let Ok(mut cache) = self.prometheus.lock() {
            cache.insert(
                name,
                CachedCredentials {
                    endpoint: prometheus.clone(),
                    versions,
                    credentials: credentials.clone(),
                },
            );
        }
        Ok(credentials)
    }

    /// The cached credentials of `region` when they were read for `prometheus` from the
    /// Secrets at `versions`.
    fn cached_credentials(
        &self,
        region: &str,
        prometheus: &PrometheusEndpoint,
        versions: &[(String, Option<String>)],
    ) -> Option<Arc<Credentials>> {
        let cache = self.prometheus.lock().ok()?;
        let cached = cache.get(region)?;
        (cached.endpoint == *prometheus && cached.versions == versions)
            .then(|| cached.credentials.clone())
    }

    /// The resourceVersion the watch last saw of the Secret `namespace/name`; `None`
    /// when there is no watch or it has not seen that Secret.
    fn watched_version(&self, namespace: &str, name: &str) -> Option<Option<String>> {
        let key = ObjectRef::new(name).within(namespace);
        let secret = self.secret_versions.get()?.get(&key)?;
        Some(secret.metadata.resource_version.clone())
    }

    /// The cached client of `region` when it was built from `reference` at `version`.
    fn cached(
        &self,
        region: &str,
        reference: &SecretKeyRef,
        version: Option<&str>,
    ) -> Option<Client> {
        let cache = self.cache.lock().ok()?;
        let cached = cache.get(region)?;
        (cached.reference == *reference && cached.version.as_deref() == version)
            .then(|| cached.client.clone())
    }

    /// Reads the Secret `namespace/name` from the hub; the error is why, in words.
    async fn read_secret(
        &self,
        namespace: &str,
        name: &str,
        what: &'static str,
    ) -> Result<Secret, String> {
        let api: Api<Secret> = Api::namespaced(self.hub.clone(), namespace);
        crate::api_call::timed(what, CALL_TIMEOUT, api.get(name))
            .await
            .map_err(|error| error.to_string())
    }
}

/// A region's client for calls and one for watches (quiet for minutes by design).
async fn build_client(
    reference: &SecretKeyRef,
    secret: &Secret,
    policy: &CredentialPolicy,
) -> Result<(Client, Client), ClientError> {
    let bad = |problem: KubeconfigProblem| ClientError::BadKubeconfig {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        key: reference.key.clone(),
        problem,
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|data| data.get(&reference.key))
        .ok_or_else(|| ClientError::MissingKey {
            namespace: reference.namespace.clone(),
            name: reference.name.clone(),
            key: reference.key.clone(),
        })?;
    let kubeconfig = parse_kubeconfig(&bytes.0, policy).map_err(bad)?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|error| bad(config_problem(&error)))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(CALL_TIMEOUT);
    config.write_timeout = Some(CALL_TIMEOUT);
    let mut watch_config = config.clone();
    watch_config.read_timeout = Some(object_cache::WATCH_READ_TIMEOUT);
    let calls = bounded_client(config).map_err(|error| bad(client_problem(&error)))?;
    let watches = Client::try_from(watch_config).map_err(|error| bad(client_problem(&error)))?;
    Ok((calls, watches))
}

/// Bounds, parses and checks a kubeconfig against `policy`.
fn parse_kubeconfig(
    bytes: &[u8],
    policy: &CredentialPolicy,
) -> Result<Kubeconfig, KubeconfigProblem> {
    if bytes.len() > MAX_KUBECONFIG_BYTES {
        return Err(KubeconfigProblem::TooLarge { size: bytes.len() });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| KubeconfigProblem::NotUtf8)?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|error| yaml_problem(&error))?;
    policy.check(&kubeconfig)?;
    Ok(kubeconfig)
}

#[cfg(test)]
mod tests;
