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

/// The secret keying revision digests (read from a Secret by the caller).
#[derive(Clone)]
pub struct DigestKey {
    keyed: Hmac<Sha256>,
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
        Ok(Self { keyed })
    }
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

fn live_state_digest<'a>(
    key: &DigestKey,
    count: usize,
    sorted_pairs: impl Iterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut mac = key.keyed.clone();
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
    fn refuses_short_keys() {
        assert_eq!(
            DigestKey::new(b"short").unwrap_err(),
            DigestError::KeyTooShort { len: 5, min: 16 }
        );
        assert_eq!(format!("{:?}", key()), "DigestKey(<redacted>)");
    }
}
