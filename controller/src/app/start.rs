//! Start-up against the hub: its two clients (one for calls, one for watches) and the
//! digest key, created on the first start of a hub that has no revisions yet.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Config, ResourceExt};

use super::{AppError, Options};
use crate::crdt::DigestKey;
use crate::reconcile::{self, HubError, digest_keys};

/// How long a watch may go without a byte before it is given up and restarted: past
/// the watcher's own server-side timeout (290 s), so a healthy but quiet watch is never
/// cut, while a dead connection still ends.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(330);

/// Two clients of the hub: one for calls (a read that stalls 30 s fails), one for watches
/// (which stay quiet for minutes by design).
pub(super) async fn hub_clients() -> Result<(Client, Client), AppError> {
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
pub(super) async fn ensure_digest_key(
    hub: &Client,
    options: &Options,
) -> Result<DigestKey, AppError> {
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
