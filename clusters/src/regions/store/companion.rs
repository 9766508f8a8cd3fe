//! The MAC on a companion's state: which key signed it ([`StateSignature`]), building a
//! signed companion for a target, and signing a trusted state again with the current key.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use kube::{Client, Resource, ResourceExt};

use super::{FIELD_MANAGER, Identity, Ownership, ReadFrom, call, read_pair};
use crate::regions::RegionError;
use crate::regions::materialize::{
    self, DIGEST_ANNOTATION, STATE_KEY, STATE_KEY_ID_ANNOTATION, STATE_MAC_ANNOTATION,
};
use crate::regions::object_cache::RegionObjects;
use configrollout_core::crdt::{self, DigestKey};

/// Which key signed a companion's state, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateSignature {
    /// Nothing to sign: no companion, or one without a state.
    NoState,
    /// The key in use.
    Current,
    /// The key the one in use replaced (a rotation under way): trusted, and signed again
    /// with the current key at the next read.
    Previous,
    /// No MAC at all: trusted only while the key accepts unsigned states (an upgrade
    /// aid), and then signed at the next read.
    Unsigned,
    /// Neither key: edited outside configrollout, or signed by a key this process does
    /// not hold yet. `claimed_key_id` is the key id the companion names, if any: one the
    /// process does not know is worth a fresh read of the key Secret before calling the
    /// state tampered.
    Mismatch {
        /// The companion's `configrollout.dev/state-key-id`, if it has one.
        claimed_key_id: Option<String>,
    },
}

impl StateSignature {
    /// Whether the state must be signed again with the current key (it is trusted, but
    /// not under that key).
    pub fn needs_signing(&self, key: &DigestKey) -> bool {
        match self {
            StateSignature::Previous => true,
            StateSignature::Unsigned => key.accepts_unsigned_states(),
            _ => false,
        }
    }

    /// The id of the key the state is signed with, when it is one this process holds.
    pub fn key_id(&self, key: &DigestKey) -> Option<String> {
        match self {
            StateSignature::Current => Some(key.id()),
            StateSignature::Previous => key.previous_id(),
            _ => None,
        }
    }
}

/// Signs again, in place, a companion state the key trusts but did not sign with its
/// current key: one signed with the key a rotation replaced, or one without a MAC (a
/// release before MACs wrote it, trusted because the key accepts unsigned states). Reads
/// it fresh, and writes the MAC and key id annotations only if it still needs them and
/// decodes, conditionally on the version read, noting the result in `objects`. Returns
/// whether it wrote. `may_write` is asked just before the write.
pub async fn sign_with_current_key(
    client: &Client,
    key: &DigestKey,
    namespace: &str,
    name: &str,
    may_write: &(dyn Fn() -> bool + Send + Sync),
    objects: Option<&RegionObjects<'_>>,
) -> Result<bool, RegionError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let companion_name = materialize::companion_name(name)?;
    let current = read_pair(&api, name, &companion_name, None, ReadFrom::Fresh).await?;
    let identity = Identity {
        key,
        namespace,
        name,
    };
    if !current.signature(identity).needs_signing(key)
        || current.ownership(identity) != Ownership::Managed
    {
        return Ok(false);
    }
    let Some(mut companion) = current.companion else {
        return Ok(false);
    };
    let Some(state) = companion
        .data
        .as_ref()
        .and_then(|data| data.get(STATE_KEY))
        .cloned()
    else {
        return Ok(false);
    };
    crdt::decode(&state).map_err(|source| RegionError::MalformedCompanion {
        reason: source.to_string(),
    })?;
    sign(&mut companion, identity, &state);
    if !may_write() {
        return Err(RegionError::NotLeader);
    }
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let written = call(
        "sign companion",
        api.replace(&companion_name, &params, &companion),
    )
    .await?;
    // The next read takes the signed version from memory, not the unsigned one.
    if let Some(objects) = objects {
        objects.saw(&companion_name, Some(&written));
    }
    Ok(true)
}

/// The companion of `target` holding `encoded_state`, with its digest and its MAC for
/// `identity`: `existing` updated (keeping its resourceVersion, so that a replace is
/// conditional), or a new one owned by the target.
pub(in crate::regions) fn signed_companion(
    existing: Option<ConfigMap>,
    target: &ConfigMap,
    identity: Identity<'_>,
    digest: &str,
    encoded_state: String,
) -> ConfigMap {
    let mut companion = existing.unwrap_or_else(|| ConfigMap {
        metadata: ObjectMeta {
            name: materialize::companion_name(identity.name).ok(),
            namespace: Some(identity.namespace.to_owned()),
            owner_references: owner_of(target).map(|owner| vec![owner]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    companion
        .annotations_mut()
        .insert(DIGEST_ANNOTATION.to_owned(), digest.to_owned());
    sign(&mut companion, identity, &encoded_state);
    companion.data = Some(BTreeMap::from([(STATE_KEY.to_owned(), encoded_state)]));
    companion
}

/// Puts the MAC of `encoded_state` for `identity`'s target on `companion`, and the id of
/// the key that made it (public: it tells a process that has not read a rotated key yet
/// from a forgery).
fn sign(companion: &mut ConfigMap, identity: Identity<'_>, encoded_state: &str) {
    let annotations = companion.annotations_mut();
    annotations.insert(
        STATE_MAC_ANNOTATION.to_owned(),
        crdt::state_mac(
            identity.key,
            identity.namespace,
            identity.name,
            encoded_state,
        ),
    );
    annotations.insert(STATE_KEY_ID_ANNOTATION.to_owned(), identity.key.id());
}

fn owner_of(target: &ConfigMap) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: ConfigMap::api_version(&()).into_owned(),
        kind: ConfigMap::kind(&()).into_owned(),
        name: target.metadata.name.clone()?,
        uid: target.metadata.uid.clone()?,
        controller: Some(false),
        block_owner_deletion: None,
    })
}
