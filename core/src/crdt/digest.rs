//! The identity of a configuration state: a keyed HMAC-SHA256 of the live key/values.
//!
//! Keyed rather than a bare hash because digests are shown in status and annotations, and
//! a bare hash of a low-entropy value (a port, a feature flag) can be guessed by hashing
//! candidates. Only the live state counts: two replicas showing consumers the same data
//! have the same digest whatever their stamps, tombstones or merge history.
//!
//! Input to the MAC: a domain tag, the pair count, then per pair in key order the key and
//! the value, each preceded by its length as a big-endian u64, so no two states share an
//! input.

use std::collections::BTreeMap;
use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{DigestError, Replica};

const DOMAIN: &[u8] = b"configrollout.dev/live-state/v1\0";
/// Domain of the MAC over a companion's whole encoded state.
const STATE_DOMAIN: &[u8] = b"configrollout.dev/companion-state/v1\0";

/// The secret keying revision digests and the MACs of companion states (read from a
/// Secret by the caller). It may carry the key it replaced (a rotation): states signed
/// with that one still verify, and are signed with the new one at their next write.
#[derive(Clone)]
pub struct DigestKey {
    keyed: Hmac<Sha256>,
    previous: Option<Hmac<Sha256>>,
    accept_unsigned: bool,
}

impl DigestKey {
    /// Shortest accepted key, in bytes.
    pub const MIN_LEN: usize = 16;

    /// A digest key from secret bytes, at least [`Self::MIN_LEN`] long.
    pub fn new(secret: &[u8]) -> Result<Self, DigestError> {
        if secret.len() < Self::MIN_LEN {
            return Err(DigestError::KeyTooShort {
                len: secret.len(),
                min: Self::MIN_LEN,
            });
        }
        // HMAC accepts keys of any length; the length check above is ours.
        let keyed = <Hmac<Sha256> as Mac>::new_from_slice(secret).map_err(|_| {
            DigestError::KeyTooShort {
                len: secret.len(),
                min: Self::MIN_LEN,
            }
        })?;
        Ok(Self {
            keyed,
            previous: None,
            accept_unsigned: false,
        })
    }

    /// This key, still accepting MACs made with `previous` (the key it replaced).
    pub fn with_previous(mut self, previous: &DigestKey) -> Self {
        self.previous = Some(previous.keyed.clone());
        self
    }

    /// This key, also trusting a companion state that carries no MAC at all (one a
    /// release before MACs wrote), so that it is signed instead of refused: an upgrade aid,
    /// off by default, since whoever may edit ConfigMaps in a region can strip a MAC too.
    pub fn accepting_unsigned_states(mut self) -> Self {
        self.accept_unsigned = true;
        self
    }

    /// Whether a state without a MAC is trusted (see [`Self::accepting_unsigned_states`]).
    pub fn accepts_unsigned_states(&self) -> bool {
        self.accept_unsigned
    }

    /// A short, public identifier of the key (not of the previous one): the first 8 bytes
    /// of its MAC of a fixed text, in hex. Replicas compare it to tell they hold the same
    /// key without showing it.
    pub fn id(&self) -> String {
        key_id(&self.keyed)
    }

    /// The [`Self::id`] of the key this one replaced, while it is still accepted.
    pub fn previous_id(&self) -> Option<String> {
        self.previous.as_ref().map(key_id)
    }

    /// Whether `id` names this key or the one it replaced.
    pub fn knows_id(&self, id: &str) -> bool {
        self.id() == id || self.previous_id().as_deref() == Some(id)
    }
}

impl DigestKey {
    /// Keyed digest of a key's name (not its value), to name a key in status without
    /// showing it: the first 16 bytes of its MAC, in hex.
    pub fn key_name_digest(&self, name: &str) -> String {
        name_digest(&self.keyed, name)
    }

    /// [`Self::key_name_digest`] under the key whose [`Self::id`] is `id` (this one or
    /// the one it replaced); `None` for a key this one does not know.
    pub fn key_name_digest_under(&self, id: &str, name: &str) -> Option<String> {
        if self.id() == id {
            return Some(name_digest(&self.keyed, name));
        }
        let previous = self.previous.as_ref()?;
        (key_id(previous) == id).then(|| name_digest(previous, name))
    }
}

const KEY_NAME_DOMAIN: &[u8] = b"configrollout.dev/key-name/v1\0";

fn name_digest(keyed: &Hmac<Sha256>, name: &str) -> String {
    let mut mac = keyed.clone();
    mac.update(KEY_NAME_DOMAIN);
    mac.update(name.as_bytes());
    let bytes = mac.finalize().into_bytes();
    hex::encode(bytes.get(..16).unwrap_or_default())
}

fn key_id(keyed: &Hmac<Sha256>) -> String {
    let mut mac = keyed.clone();
    mac.update(b"configrollout.dev/key-id/v1");
    let bytes = mac.finalize().into_bytes();
    hex::encode(bytes.get(..8).unwrap_or_default())
}

/// Which key, if any, a companion state's MAC was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacCheck {
    /// The key in use.
    Current,
    /// The key it replaced (a rotation under way): trusted, and signed again with the
    /// current one.
    Previous,
    /// Neither: the state was not written by configrollout with this key.
    Mismatch,
}

impl fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DigestKey(<redacted>)")
    }
}

/// Hex digest of a replica's live state.
pub fn revision_digest(key: &DigestKey, replica: &Replica) -> String {
    live_state_digest(key, replica.live_iter().count(), replica.live_iter())
}

/// Hex digest of a desired key/value map; equals [`revision_digest`] of any replica whose
/// live state is that map.
pub fn desired_digest(key: &DigestKey, desired: &BTreeMap<String, String>) -> String {
    live_state_digest(
        key,
        desired.len(),
        desired.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )
}

/// Whether `digest` is [`revision_digest`] of `replica` under the key or the one it
/// replaced: a digest annotation written before a rotation still names the state it
/// names (annotations are rewritten with the new key at the next write).
pub fn digest_matches(key: &DigestKey, replica: &Replica, digest: &str) -> bool {
    std::iter::once(&key.keyed)
        .chain(key.previous.as_ref())
        .any(|keyed| {
            live_state_mac(keyed, replica.live_iter().count(), replica.live_iter()) == digest
        })
}

fn live_state_digest<'a>(
    key: &DigestKey,
    count: usize,
    sorted_pairs: impl Iterator<Item = (&'a str, &'a str)>,
) -> String {
    live_state_mac(&key.keyed, count, sorted_pairs)
}

fn live_state_mac<'a>(
    keyed: &Hmac<Sha256>,
    count: usize,
    sorted_pairs: impl Iterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut mac = keyed.clone();
    mac.update(DOMAIN);
    mac.update(&length_prefix(count));
    for (name, value) in sorted_pairs {
        mac.update(&length_prefix(name.len()));
        mac.update(name.as_bytes());
        mac.update(&length_prefix(value.len()));
        mac.update(value.as_bytes());
    }
    hex::encode(mac.finalize().into_bytes())
}

/// The MAC of a companion's whole encoded state (entries, stamps, writers, frontiers and
/// horizon, as the codec wrote them) for the target `namespace/name`: whoever may edit
/// ConfigMaps in a region cannot forge a state the controller will read, nor move one
/// from another target. Hex HMAC-SHA256.
pub fn state_mac(key: &DigestKey, namespace: &str, name: &str, encoded_state: &str) -> String {
    let mac = state_input(key.keyed.clone(), namespace, name, encoded_state);
    hex::encode(mac.finalize().into_bytes())
}

/// Whether `mac` is the MAC of the state for the target, under the key or the one it
/// replaced. Compared in constant time.
pub fn state_mac_matches(
    key: &DigestKey,
    namespace: &str,
    name: &str,
    encoded_state: &str,
    mac: &str,
) -> bool {
    state_mac_check(key, namespace, name, encoded_state, mac) != MacCheck::Mismatch
}

/// Which of the key's two keys made `mac`, the MAC of the state for the target. Compared
/// in constant time.
pub fn state_mac_check(
    key: &DigestKey,
    namespace: &str,
    name: &str,
    encoded_state: &str,
    mac: &str,
) -> MacCheck {
    let Ok(expected) = hex::decode(mac) else {
        return MacCheck::Mismatch;
    };
    let made_with = |keyed: &Hmac<Sha256>| {
        state_input(keyed.clone(), namespace, name, encoded_state)
            .verify_slice(&expected)
            .is_ok()
    };
    if made_with(&key.keyed) {
        MacCheck::Current
    } else if key.previous.as_ref().is_some_and(made_with) {
        MacCheck::Previous
    } else {
        MacCheck::Mismatch
    }
}

fn state_input(
    mut mac: Hmac<Sha256>,
    namespace: &str,
    name: &str,
    encoded_state: &str,
) -> Hmac<Sha256> {
    mac.update(STATE_DOMAIN);
    for part in [namespace, name, encoded_state] {
        mac.update(&length_prefix(part.len()));
        mac.update(part.as_bytes());
    }
    mac
}

fn length_prefix(len: usize) -> [u8; 8] {
    // usize is at most 64 bits on every target Rust supports.
    (len as u64).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crdt::{Delta, Stamp, WriterId};

    fn key() -> DigestKey {
        DigestKey::new(b"0123456789abcdef-test-key").unwrap()
    }

    fn stamp(wall_ms: u64) -> Stamp {
        Stamp::new(wall_ms, 0, WriterId::rollout("ns", "app").unwrap())
    }

    #[test]
    fn same_live_state_same_digest_whatever_the_history() {
        let mut direct = Delta::new();
        direct.set("a", "1", stamp(5));
        let mut one = Replica::new();
        one.apply(&direct);

        let mut winding = Delta::new();
        winding.set("a", "1", stamp(9));
        winding.remove("gone", stamp(9));
        let mut two = Replica::new();
        two.apply(&winding);

        assert_eq!(revision_digest(&key(), &one), revision_digest(&key(), &two));
        let desired = BTreeMap::from([("a".to_owned(), "1".to_owned())]);
        assert_eq!(
            desired_digest(&key(), &desired),
            revision_digest(&key(), &one)
        );
    }

    #[test]
    fn length_prefixes_keep_boundaries_apart() {
        let ab = BTreeMap::from([("ab".to_owned(), "c".to_owned())]);
        let a_bc = BTreeMap::from([("a".to_owned(), "bc".to_owned())]);
        assert_ne!(desired_digest(&key(), &ab), desired_digest(&key(), &a_bc));
    }

    #[test]
    fn digest_depends_on_the_key_and_is_hex_sha256() {
        let desired = BTreeMap::from([("port".to_owned(), "8080".to_owned())]);
        let other = DigestKey::new(b"another-secret-key-bytes").unwrap();
        let digest = desired_digest(&key(), &desired);
        assert_eq!(digest.len(), 64);
        assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(digest, desired_digest(&other, &desired));
    }

    #[test]
    fn a_rotated_key_still_verifies_states_of_the_one_it_replaced() {
        let old = key();
        let new = DigestKey::new(b"a-rotated-key-of-32-bytes-or-so!").unwrap();
        let rotated = new.clone().with_previous(&old);
        let state = "encoded";
        let by_old = state_mac(&old, "ns", "limits", state);
        let by_new = state_mac(&rotated, "ns", "limits", state);
        assert_eq!(by_new, state_mac(&new, "ns", "limits", state));
        let check = |key: &DigestKey, mac: &str| state_mac_check(key, "ns", "limits", state, mac);
        assert_eq!(check(&rotated, &by_new), MacCheck::Current);
        assert_eq!(check(&rotated, &by_old), MacCheck::Previous);
        // Before the rotation, the new key's MAC is unknown; after the previous key is
        // dropped, so is the old one's.
        assert_eq!(check(&old, &by_new), MacCheck::Mismatch);
        assert_eq!(check(&new, &by_old), MacCheck::Mismatch);
        // Another target's state does not verify under either key.
        assert_eq!(
            state_mac_check(&rotated, "ns", "other", state, &by_old),
            MacCheck::Mismatch
        );
        let mut replica = Replica::new();
        let mut delta = Delta::new();
        delta.set("a", "1", stamp(5));
        replica.apply(&delta);
        let old_digest = revision_digest(&old, &replica);
        assert!(digest_matches(&rotated, &replica, &old_digest));
        assert!(digest_matches(
            &rotated,
            &replica,
            &revision_digest(&new, &replica)
        ));
        assert!(!digest_matches(&new, &replica, &old_digest));
        assert_eq!(rotated.id(), new.id());
        assert_eq!(rotated.previous_id(), Some(old.id()));
        assert!(rotated.knows_id(&old.id()) && rotated.knows_id(&new.id()));
        assert!(!new.knows_id(&old.id()));
        assert_ne!(old.id(), new.id());
        assert_eq!(old.id().len(), 16);
    }

    #[test]
    fn refuses_short_keys() {
        assert_eq!(
            DigestKey::new(b"short").unwrap_err(),
            DigestError::KeyTooShort { len: 5, min: 16 }
        );
        assert_eq!(format!("{:?}", key()), "DigestKey(<redacted>)");
    }
}
