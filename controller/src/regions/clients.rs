//! Clients for regions, built from the kubeconfig Secrets their `Region` objects name,
//! cached, and rebuilt when the Secret changes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::store::CALL_TIMEOUT;
use crate::api::{Region, SecretKeyRef};

/// How long connecting to a region may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a region's client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
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
    /// The key does not hold a usable kubeconfig.
    #[error("Secret {namespace}/{name} key {key:?} is not a usable kubeconfig: {reason}")]
    BadKubeconfig {
        /// Secret namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// The key.
        key: String,
        /// The parser's or client builder's error.
        reason: String,
    },
}

/// A cache of region clients keyed by region name and the Secret's resourceVersion, so a
/// rotated kubeconfig is picked up on the next use and an unchanged one costs one GET.
pub struct RegionClients {
    hub: Client,
    cache: Mutex<HashMap<String, (Option<String>, Client)>>,
}

impl RegionClients {
    /// Clients for regions whose Secrets live in the cluster `hub` reaches.
    pub fn new(hub: Client) -> Self {
        Self {
            hub,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The client for `region`: the hub's own when the Region names no Secret.
    pub async fn client(&self, region: &Region) -> Result<Client, ClientError> {
        let Some(reference) = region.spec.kubeconfig_secret_ref.as_ref() else {
            return Ok(self.hub.clone());
        };
        let name = region.metadata.name.clone().unwrap_or_default();
        let secret = self.read_secret(reference).await?;
        let version = secret.metadata.resource_version.clone();
        if let Some(client) = self.cached(&name, version.as_deref()) {
            return Ok(client);
        }
        let client = build_client(reference, &secret).await?;
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(name, (version, client.clone()));
        }
        Ok(client)
    }

    fn cached(&self, region: &str, version: Option<&str>) -> Option<Client> {
        let cache = self.cache.lock().ok()?;
        let (cached_version, client) = cache.get(region)?;
        (cached_version.as_deref() == version).then(|| client.clone())
    }

    async fn read_secret(&self, reference: &SecretKeyRef) -> Result<Secret, ClientError> {
        let api: Api<Secret> = Api::namespaced(self.hub.clone(), &reference.namespace);
        let unreadable = |reason: String| ClientError::SecretUnreadable {
            namespace: reference.namespace.clone(),
            name: reference.name.clone(),
            reason,
        };
        crate::api_call::timed(
            "read kubeconfig Secret",
            CALL_TIMEOUT,
            api.get(&reference.name),
        )
        .await
        .map_err(|error| unreadable(error.to_string()))
    }
}

async fn build_client(reference: &SecretKeyRef, secret: &Secret) -> Result<Client, ClientError> {
    let bad = |reason: String| ClientError::BadKubeconfig {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
        key: reference.key.clone(),
        reason,
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
    let text = std::str::from_utf8(&bytes.0).map_err(|_| bad("not UTF-8".to_owned()))?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| bad(e.to_string()))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(CALL_TIMEOUT);
    config.write_timeout = Some(CALL_TIMEOUT);
    Client::try_from(config).map_err(|e| bad(e.to_string()))
}
