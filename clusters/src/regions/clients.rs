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

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PartialObjectMeta};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Config};

use super::object_cache::{self, KeptObjects, RegionObjects, RegionWatches};
use super::prometheus_credentials::{CredentialError, credentials_from};
use super::store::CALL_TIMEOUT;
use configrollout_api::{PrometheusAuth, Region, SecretKeyRef};
use configrollout_core::gates::Credentials;

/// How long connecting to a region may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest kubeconfig read from a Secret. Real ones are a few KiB; the bound keeps a
/// hostile or mistaken Secret from costing the parser more than that.
pub const MAX_KUBECONFIG_BYTES: usize = 1024 * 1024;
/// Most bytes one answer of a region's API server may carry (a call's; a watch is a
/// stream): a ConfigMap is at most 1 MiB, and the largest answer read is the list of a
/// namespace's workloads a consumer's selector matches.
pub const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;
/// Longest user or cluster name quoted in an error, so a refusal stays short in status.
const MAX_QUOTED_NAME_CHARS: usize = 63;

/// What a Region's kubeconfig Secret may be and what the kubeconfig may ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialPolicy {
    /// The only namespace kubeconfig Secrets are read from: the controller's own, where
    /// tenants cannot write.
    pub controller_namespace: String,
    /// Permit `exec`, `auth-provider`, `tokenFile`, file paths and
    /// `insecure-skip-tls-verify: true` (`--allow-unsafe-kubeconfig`).
    pub allow_unsafe_kubeconfig: bool,
}

impl CredentialPolicy {
    /// Refuses the first user or cluster asking for what this policy does not allow.
    ///
    /// Every entry is checked, not only those of the current context: which entries kube
    /// uses depends on its context selection rules, and a file that is safe whatever
    /// they are needs no reasoning about them.
    pub fn check(&self, kubeconfig: &Kubeconfig) -> Result<(), KubeconfigProblem> {
        if self.allow_unsafe_kubeconfig {
            return Ok(());
        }
        for (index, named) in kubeconfig.auth_infos.iter().enumerate() {
            let Some(user) = named.auth_info.as_ref() else {
                continue;
            };
            let refused = [
                (user.exec.is_some(), UnsafeField::Exec),
                (user.auth_provider.is_some(), UnsafeField::AuthProvider),
                (user.token_file.is_some(), UnsafeField::TokenFile),
                (
                    user.client_certificate.is_some(),
                    UnsafeField::ClientCertificate,
                ),
                (user.client_key.is_some(), UnsafeField::ClientKey),
            ];
            if let Some((_, field)) = refused.into_iter().find(|(present, _)| *present) {
                return Err(KubeconfigProblem::NotAllowed {
                    entry: KubeconfigEntry::new("users", index, &named.name),
                    field,
                });
            }
        }
        for (index, named) in kubeconfig.clusters.iter().enumerate() {
            let Some(cluster) = named.cluster.as_ref() else {
                continue;
            };
            let refused = [
                (
                    cluster.insecure_skip_tls_verify == Some(true),
                    UnsafeField::InsecureSkipTlsVerify,
                ),
                (
                    cluster.certificate_authority.is_some(),
                    UnsafeField::CertificateAuthority,
                ),
            ];
            if let Some((_, field)) = refused.into_iter().find(|(present, _)| *present) {
                return Err(KubeconfigProblem::NotAllowed {
                    entry: KubeconfigEntry::new("clusters", index, &named.name),
                    field,
                });
            }
        }
        Ok(())
    }
}

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

/// What is wrong with a kubeconfig. No variant holds text from the file other than an
/// entry's (shortened) name, so neither `Display` nor `Debug` can leak a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigProblem {
    /// Larger than [`MAX_KUBECONFIG_BYTES`]; not parsed.
    #[error("it is {size} bytes, more than the {MAX_KUBECONFIG_BYTES} allowed")]
    TooLarge {
        /// Its size in bytes.
        size: usize,
    },
    /// Not UTF-8 text.
    #[error("not UTF-8")]
    NotUtf8,
    /// The parser refused it at a known place.
    #[error("invalid YAML or a wrong field type at line {line} column {column}")]
    InvalidYamlAt {
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
    },
    /// The parser refused it without saying where.
    #[error("invalid YAML or a wrong field type")]
    InvalidYaml,
    /// An entry asks for something the [`CredentialPolicy`] does not allow.
    #[error(
        "{entry}: {field} is not allowed (start the controller with \
         --allow-unsafe-kubeconfig to permit it)"
    )]
    NotAllowed {
        /// The user or cluster entry.
        entry: KubeconfigEntry,
        /// The field it sets.
        field: UnsafeField,
    },
    /// It parses and is allowed, but kube cannot build a client from it. The reason is a
    /// fixed text: kube's own messages may quote the file (a server or proxy URL with
    /// credentials, bytes of a base64 key) or name files of the controller's pod.
    #[error("{reason}")]
    Unusable {
        /// A fixed description.
        reason: &'static str,
    },
}

/// A user or cluster of a kubeconfig, as an error names it: `users[0] "ci"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeconfigEntry {
    /// `users` or `clusters`.
    pub list: &'static str,
    /// Position in that list.
    pub index: usize,
    /// Its name, shortened to a bounded length.
    pub name: String,
}

impl KubeconfigEntry {
    fn new(list: &'static str, index: usize, name: &str) -> Self {
        Self {
            list,
            index,
            name: name.chars().take(MAX_QUOTED_NAME_CHARS).collect(),
        }
    }
}

impl fmt::Display for KubeconfigEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}] {:?}", self.list, self.index, self.name)
    }
}

/// A kubeconfig field the controller refuses unless `--allow-unsafe-kubeconfig` is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsafeField {
    /// `users[].user.exec`: runs a command in the controller's pod.
    Exec,
    /// `users[].user.auth-provider`: provider plugins may run commands (`cmd-path`).
    AuthProvider,
    /// `users[].user.tokenFile`: reads a file of the controller's pod as the token.
    TokenFile,
    /// `users[].user.client-certificate`: a file path.
    ClientCertificate,
    /// `users[].user.client-key`: a file path.
    ClientKey,
    /// `clusters[].cluster.insecure-skip-tls-verify: true`: any server is believed.
    InsecureSkipTlsVerify,
    /// `clusters[].cluster.certificate-authority`: a file path.
    CertificateAuthority,
}

impl fmt::Display for UnsafeField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exec => "exec",
            Self::AuthProvider => "auth-provider",
            Self::TokenFile => "tokenFile",
            Self::ClientCertificate => "client-certificate",
            Self::ClientKey => "client-key",
            Self::InsecureSkipTlsVerify => "insecure-skip-tls-verify",
            Self::CertificateAuthority => "certificate-authority",
        })
    }
}

/// Who has seen each kubeconfig Secret's resourceVersion: the controller's metadata-only
/// watch of its namespace's Secrets (no Secret data is held by it).
pub type SecretVersions = Store<PartialObjectMeta<Secret>>;

/// A region's client, the Secret (and key) it was built from and that Secret's
/// resourceVersion.
struct CachedClient {
    reference: SecretKeyRef,
    version: Option<String>,
    client: Client,
    /// The region's ConfigMap watches, through this client: rebuilt with it.
    watches: Arc<RegionWatches>,
}

/// A region's Prometheus credentials, what they were read for (the Region's `auth`) and
/// the Secret's resourceVersion.
struct CachedCredentials {
    auth: PrometheusAuth,
    version: Option<String>,
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
}

impl RegionClients {
    /// Clients for regions whose Secrets live in the cluster `hub` reaches, in
    /// `policy.controller_namespace`. `watch_hub` reaches the same cluster with a read
    /// timeout a quiet watch outlives, for regions that are the hub itself.
    pub fn new(hub: Client, watch_hub: Client, policy: CredentialPolicy) -> Self {
        Self {
            hub,
            hub_watches: Arc::new(RegionWatches::new("hub", watch_hub)),
            policy,
            cache: Mutex::new(HashMap::new()),
            prometheus: Mutex::new(HashMap::new()),
            secret_versions: OnceLock::new(),
            kept: KeptObjects::default(),
        }
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
        let watches = Arc::new(RegionWatches::new(&name, watch_client));
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

    /// The credentials of `region`'s Prometheus (`spec.prometheus.auth`), from the
    /// Secret it names in the controller's namespace, read again only when the watch sees
    /// the Secret change; `None` when the Region names none.
    pub async fn prometheus_credentials(
        &self,
        region: &Region,
    ) -> Option<Result<Arc<Credentials>, CredentialError>> {
        let auth = region.spec.prometheus.as_ref()?.auth.as_ref()?;
        Some(self.read_prometheus_credentials(region, auth).await)
    }

    async fn read_prometheus_credentials(
        &self,
        region: &Region,
        auth: &PrometheusAuth,
    ) -> Result<Arc<Credentials>, CredentialError> {
        let reference = &auth.secret_ref;
        // Checked before reading, as for kubeconfigs.
        if reference.namespace != self.policy.controller_namespace {
            return Err(CredentialError::OutsideControllerNamespace {
                namespace: reference.namespace.clone(),
                required: self.policy.controller_namespace.clone(),
            });
        }
        let name = region.metadata.name.clone().unwrap_or_default();
        if let Some(watched) = self.watched_version(&reference.namespace, &reference.name)
            && let Some(credentials) = self.cached_credentials(&name, auth, watched.as_deref())
        {
            return Ok(credentials);
        }
        let secret = self
            .read_secret(
                &reference.namespace,
                &reference.name,
                "read Prometheus credentials Secret",
            )
            .await
            .map_err(|reason| CredentialError::Unreadable {
                namespace: reference.namespace.clone(),
                name: reference.name.clone(),
                reason,
            })?;
        let version = secret.metadata.resource_version.clone();
        if let Some(credentials) = self.cached_credentials(&name, auth, version.as_deref()) {
            return Ok(credentials);
        }
        let credentials = Arc::new(credentials_from(auth, &secret)?);
        if let Ok(mut cache) = self.prometheus.lock() {
            cache.insert(
                name,
                CachedCredentials {
                    auth: auth.clone(),
                    version,
                    credentials: credentials.clone(),
                },
            );
        }
        Ok(credentials)
    }

    /// The cached credentials of `region` when they were read for `auth` at `version`.
    fn cached_credentials(
        &self,
        region: &str,
        auth: &PrometheusAuth,
        version: Option<&str>,
    ) -> Option<Arc<Credentials>> {
        let cache = self.prometheus.lock().ok()?;
        let cached = cache.get(region)?;
        (cached.auth == *auth && cached.version.as_deref() == version)
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

/// A client whose every answer carries at most [`MAX_ANSWER_BYTES`]: a broken or
/// hostile region's API server cannot make the controller buffer more (one that never
/// ends its answer is cut at the read timeout). Not for watches, whose answer is a
/// stream that lasts minutes.
fn bounded_client(config: Config) -> Result<Client, kube::Error> {
    let layer = tower::util::MapResponseLayer::new(limit_answer);
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

fn limit_answer(
    answer: hyper::Response<Box<kube::client::DynBody>>,
) -> hyper::Response<http_body_util::Limited<Box<kube::client::DynBody>>> {
    answer.map(|body| http_body_util::Limited::new(body, MAX_ANSWER_BYTES))
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

/// Only the position of a parse error: the parser's message quotes the offending text,
/// which may be a token.
fn yaml_problem(error: &KubeconfigError) -> KubeconfigProblem {
    match error {
        KubeconfigError::Parse(parse) => match parse.location() {
            Some(at) if at.line() > 0 => KubeconfigProblem::InvalidYamlAt {
                line: at.line(),
                column: at.column(),
            },
            _ => KubeconfigProblem::InvalidYaml,
        },
        KubeconfigError::KindMismatch | KubeconfigError::ApiVersionMismatch => {
            KubeconfigProblem::Unusable {
                reason: "its YAML documents disagree on kind or apiVersion",
            }
        }
        _ => KubeconfigProblem::InvalidYaml,
    }
}

/// A fixed text per kube configuration error: several of them carry names, URLs, paths
/// or decoding details taken from the file.
fn config_problem(error: &KubeconfigError) -> KubeconfigProblem {
    let reason = match error {
        KubeconfigError::CurrentContextNotSet => "it sets no current-context",
        KubeconfigError::LoadContext(_) => "its current-context names no context in the file",
        KubeconfigError::LoadClusterOfContext(_) => {
            "the current context names no cluster in the file"
        }
        KubeconfigError::MissingClusterUrl => "the current context's cluster has no server",
        KubeconfigError::ParseClusterUrl(_) => {
            "the current context's cluster server is not a valid URL"
        }
        KubeconfigError::ParseProxyUrl(_) => "the current context's proxy-url is not a valid URL",
        KubeconfigError::LoadCertificateAuthority(_) => {
            "the certificate authority cannot be loaded (certificate-authority-data must be base64)"
        }
        KubeconfigError::ParseCertificates(_) => {
            "the certificate authority is not PEM-encoded certificates"
        }
        KubeconfigError::LoadClientCertificate(_) => {
            "the client certificate cannot be loaded (client-certificate-data must be base64, \
             and given with client-key-data)"
        }
        KubeconfigError::LoadClientKey(_) => {
            "the client key cannot be loaded (client-key-data must be base64, and given with \
             client-certificate-data)"
        }
        _ => "no client configuration can be built from it",
    };
    KubeconfigProblem::Unusable { reason }
}

/// A fixed text per client build error: kube's messages may quote the proxy URL (which
/// can hold credentials), TLS material errors or credential plugin output.
fn client_problem(error: &kube::Error) -> KubeconfigProblem {
    let reason = match error {
        kube::Error::InferKubeconfig(error) => return config_problem(error),
        kube::Error::RustlsTls(_) => {
            "its TLS material is not usable (certificate authority, client certificate or key)"
        }
        kube::Error::Auth(_) => "its credentials are not usable",
        kube::Error::ProxyProtocolUnsupported { .. }
        | kube::Error::ProxyProtocolDisabled { .. } => {
            "its proxy-url uses a protocol this controller does not support"
        }
        _ => "no client can be built from it",
    };
    KubeconfigProblem::Unusable { reason }
}

#[cfg(test)]
mod tests;
