//! The digest key this process holds, read from its Secret in the hub, and read again
//! while the process runs so that a rotation (`kubectl configrollout rotate-key`) reaches
//! every replica without a restart.
//!
//! The Secret holds `key` (the key in use: digests and companion MACs are made with it)
//! and, after a rotation, `previous` (the key it replaced: companion states it signed are
//! still trusted, and signed again with `key` at their next read). A rotation changes no
//! revision and writes no target: evidence is read from stamps, not digests, and a
//! revision whose content is unchanged keeps the digest it was declared with.
//!
//! A process that reads a companion signed with a key id it does not know reads the
//! Secret again before calling the state tampered (at most every
//! [`FORCED_RELOAD_INTERVAL`]): another replica may have read a rotation first.

use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::{HubError, api_call};
use configrollout_core::crdt::DigestKey;

/// Field of the Secret holding the key in use.
pub const KEY_FIELD: &str = "key";
/// Field of the Secret holding the key a rotation replaced, still trusted.
pub const PREVIOUS_KEY_FIELD: &str = "previous";
/// How often a running process reads the Secret again.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(15);
/// The shortest time between two reads asked for by an unknown key id.
pub const FORCED_RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// Why the digest key Secret gave no usable key.
#[derive(Debug, thiserror::Error)]
pub enum DigestKeyError {
    /// No `key` field.
    #[error("the Secret has no field {KEY_FIELD:?}")]
    NoKey,
    /// A field holds a key too short to be one.
    #[error("field {field:?}: {reason}")]
    BadKey {
        /// `key` or `previous`.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The hub did not answer.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The Secret is gone.
    #[error("the Secret is missing")]
    Missing,
}

/// The digest key a Secret holds: `key`, still trusting `previous` when present.
pub fn from_secret(secret: &Secret) -> Result<DigestKey, DigestKeyError> {
    let data = secret.data.as_ref();
    let field = |name: &'static str| data.and_then(|data| data.get(name));
    let parse = |name: &'static str, bytes: &[u8]| {
        DigestKey::new(bytes).map_err(|error| DigestKeyError::BadKey {
            field: name,
            reason: error.to_string(),
        })
    };
    let key = parse(KEY_FIELD, &field(KEY_FIELD).ok_or(DigestKeyError::NoKey)?.0)?;
    match field(PREVIOUS_KEY_FIELD) {
        Some(previous) => Ok(key.with_previous(&parse(PREVIOUS_KEY_FIELD, &previous.0)?)),
        None => Ok(key),
    }
}

/// The key the process holds now, replaced when the Secret changes.
pub struct DigestKeys {
    key: RwLock<DigestKey>,
    namespace: String,
    name: String,
    accept_unsigned_states: bool,
    last_read: Mutex<Instant>,
    /// Counts key changes, so that every rollout is reconciled (and its regions' states
    /// signed with the new key) at once rather than at its next idle requeue.
    changed: tokio::sync::watch::Sender<u64>,
}

impl DigestKeys {
    /// Holds `key`, read from the Secret `namespace/name`; `accept_unsigned_states` is
    /// kept across reloads (see [`DigestKey::accepting_unsigned_states`]).
    pub fn new(key: DigestKey, namespace: &str, name: &str, accept_unsigned_states: bool) -> Self {
        let key = if accept_unsigned_states {
            key.accepting_unsigned_states()
        } else {
            key
        };
        Self {
            key: RwLock::new(key),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            accept_unsigned_states,
            last_read: Mutex::new(Instant::now()),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }

    /// One item each time the key changes (see [`Self::reload`]).
    pub fn changes(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.changed.subscribe(), |mut receiver| async move {
            receiver.changed().await.ok()?;
            Some(((), receiver))
        })
    }

    /// The key in use now (a clone: a reconcile uses one key from start to end).
    pub fn current(&self) -> DigestKey {
        match self.key.read() {
            Ok(key) => key.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads the Secret again unless it was read less than `min_interval` ago, and takes
    /// its key if it changed. Returns whether the key changed. A Secret that is missing
    /// or holds no usable key leaves the key as it is (a process never drops the key its
    /// regions are signed with), and is returned as an error to log.
    pub async fn reload(
        &self,
        hub: &kube::Client,
        min_interval: Duration,
    ) -> Result<bool, DigestKeyError> {
        {
            let mut last_read = match self.last_read.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
            if last_read.elapsed() < min_interval {
                return Ok(false);
            }
            *last_read = Instant::now();
        }
        let api: Api<Secret> = Api::namespaced(hub.clone(), &self.namespace);
        let secret = api_call("read digest key", api.get_opt(&self.name))
            .await?
            .ok_or(DigestKeyError::Missing)?;
        let mut read = from_secret(&secret)?;
        if self.accept_unsigned_states {
            read = read.accepting_unsigned_states();
        }
        let held = self.current();
        if held.id() == read.id() && held.previous_id() == read.previous_id() {
            return Ok(false);
        }
        tracing::info!(
            key_id = %read.id(),
            previous_key_id = read.previous_id().unwrap_or_default(),
            replaced_key_id = %held.id(),
            "digest key changed in its Secret; using it"
        );
        match self.key.write() {
            Ok(mut key) => *key = read,
            Err(poisoned) => *poisoned.into_inner() = read,
        }
        self.changed
            .send_modify(|count| *count = count.wrapping_add(1));
        Ok(true)
    }

    /// Reads the Secret every [`RELOAD_INTERVAL`] until `stop`.
    pub async fn follow(&self, hub: kube::Client, stop: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(RELOAD_INTERVAL) => {}
            }
            if let Err(error) = self.reload(&hub, Duration::ZERO).await {
                tracing::warn!(
                    %error,
                    secret = format!("{}/{}", self.namespace, self.name),
                    "digest key Secret not read again; keeping the key held"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(fields: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                fields
                    .iter()
                    .map(|(name, bytes)| ((*name).to_owned(), ByteString(bytes.to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    const OLD: &[u8] = b"the-old-key-0123456789";
    const NEW: &[u8] = b"the-new-key-9876543210";

    #[test]
    fn a_rotated_secret_holds_the_new_key_and_trusts_the_old() {
        let old = DigestKey::new(OLD).unwrap();
        let key = from_secret(&secret(&[(KEY_FIELD, NEW), (PREVIOUS_KEY_FIELD, OLD)])).unwrap();
        assert_eq!(key.id(), DigestKey::new(NEW).unwrap().id());
        assert_eq!(key.previous_id(), Some(old.id()));
        let plain = from_secret(&secret(&[(KEY_FIELD, OLD)])).unwrap();
        assert_eq!(plain.id(), old.id());
        assert_eq!(plain.previous_id(), None);
    }

    #[test]
    fn a_secret_without_a_usable_key_names_the_field() {
        assert!(matches!(
            from_secret(&secret(&[(PREVIOUS_KEY_FIELD, OLD)])).unwrap_err(),
            DigestKeyError::NoKey
        ));
        let error =
            from_secret(&secret(&[(KEY_FIELD, NEW), (PREVIOUS_KEY_FIELD, b"short")])).unwrap_err();
        assert!(
            matches!(
                error,
                DigestKeyError::BadKey {
                    field: "previous",
                    ..
                }
            ),
            "{error}"
        );
    }
}
