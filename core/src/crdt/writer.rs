//! Who wrote an entry: the last component of a stamp, and its tie-breaker.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::{WriterIdError, quoted};

const ROLLOUT_PREFIX: &str = "rollout:";
const OVERRIDE_PREFIX: &str = "override:";
const MAX_NAMESPACE_LEN: usize = 63;
const MAX_NAME_LEN: usize = 253;
const MAX_USER_LEN: usize = 128;

/// What kind of writer a [`WriterId`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriterKind {
    /// A `ConfigRollout` declaring revisions: `rollout:<namespace>/<name>`.
    Rollout,
    /// A person's regional emergency override: `override:<user>`.
    Override,
}

/// A validated writer id: `rollout:<namespace>/<name>` or `override:<user>`.
///
/// Cheap to clone (shared text): every entry of a replica carries one, and the entries of
/// one revision share it. Ordered by its text, which is the last tie-breaker of a
/// [`Stamp`](super::Stamp).
#[derive(Clone, Eq)]
pub struct WriterId(Arc<str>);

impl WriterId {
    /// Longest accepted writer id, in bytes.
    pub const MAX_LEN: usize = ROLLOUT_PREFIX.len() + MAX_NAMESPACE_LEN + 1 + MAX_NAME_LEN;

    /// Parses and validates a writer id.
    pub fn parse(text: &str) -> Result<Self, WriterIdError> {
        validate(text)?;
        Ok(Self(Arc::from(text)))
    }

    /// The writer of the revisions of rollout `namespace/name`.
    pub fn rollout(namespace: &str, name: &str) -> Result<Self, WriterIdError> {
        Self::parse(&format!("{ROLLOUT_PREFIX}{namespace}/{name}"))
    }

    /// The writer of overrides made by `user`.
    pub fn override_by(user: &str) -> Result<Self, WriterIdError> {
        Self::parse(&format!("{OVERRIDE_PREFIX}{user}"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The `(namespace, name)` of the rollout a `rollout:` writer names.
    pub fn rollout_ref(&self) -> Option<(&str, &str)> {
        self.0.strip_prefix(ROLLOUT_PREFIX)?.split_once('/')
    }

    /// Whether this is a rollout or an override writer.
    pub fn kind(&self) -> WriterKind {
        if self.0.starts_with(ROLLOUT_PREFIX) {
            WriterKind::Rollout
        } else {
            WriterKind::Override
        }
    }
}

fn validate(text: &str) -> Result<(), WriterIdError> {
    if text.len() > WriterId::MAX_LEN {
        return Err(WriterIdError::TooLong {
            len: text.len(),
            limit: WriterId::MAX_LEN,
        });
    }
    if let Some(rest) = text.strip_prefix(ROLLOUT_PREFIX) {
        let Some((namespace, name)) = rest.split_once('/') else {
            return Err(WriterIdError::MissingName { id: quoted(text) });
        };
        if !is_dns_label(namespace) {
            return Err(WriterIdError::InvalidNamespace {
                namespace: quoted(namespace),
            });
        }
        if !is_dns_subdomain(name) {
            return Err(WriterIdError::InvalidName { name: quoted(name) });
        }
        Ok(())
    } else if let Some(user) = text.strip_prefix(OVERRIDE_PREFIX) {
        if is_user_name(user) {
            Ok(())
        } else {
            Err(WriterIdError::InvalidUser {
                user: quoted(user),
                limit: MAX_USER_LEN,
            })
        }
    } else {
        Err(WriterIdError::UnknownKind { id: quoted(text) })
    }
}

fn is_dns_label(text: &str) -> bool {
    text.len() <= MAX_NAMESPACE_LEN && is_dns_run(text, |b| b == b'-')
}

fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= MAX_NAME_LEN && is_dns_run(text, |b| b == b'-' || b == b'.')
}

/// Lowercase alphanumerics plus `inner` punctuation, starting and ending alphanumeric.
fn is_dns_run(text: &str, inner: impl Fn(u8) -> bool) -> bool {
    let bytes = text.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|&b| alnum(b) || inner(b))
        }
        _ => false,
    }
}

/// Kubernetes user names (`alice`, `alice@example.com`, `system:serviceaccount:ns:sa`,
/// `oidc:alice`) without whitespace, quotes or separators that would make stamps ambiguous.
fn is_user_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_USER_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-@:+=".contains(&b))
}

impl PartialEq for WriterId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl std::hash::Hash for WriterId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Ord for WriterId {
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            Ordering::Equal
        } else {
            self.0.cmp(&other.0)
        }
    }
}

impl PartialOrd for WriterId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for WriterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for WriterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriterId({:?})", &*self.0)
    }
}

impl FromStr for WriterId {
    type Err = WriterIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl AsRef<str> for WriterId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for WriterId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for WriterId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_rollout_and_override_writers() {
        let rollout = WriterId::rollout("payments", "api-config.v2").unwrap();
        assert_eq!(rollout.as_str(), "rollout:payments/api-config.v2");
        assert_eq!(rollout.kind(), WriterKind::Rollout);
        for user in [
            "alice",
            "alice@example.com",
            "system:serviceaccount:ops:bot",
        ] {
            let writer = WriterId::override_by(user).unwrap();
            assert_eq!(writer.kind(), WriterKind::Override);
            assert_eq!(writer.as_str(), format!("override:{user}"));
        }
    }

    #[test]
    fn rejects_malformed_writers_with_the_reason() {
        assert!(matches!(
            WriterId::parse("admin:alice"),
            Err(WriterIdError::UnknownKind { .. })
        ));
        assert!(matches!(
            WriterId::parse("rollout:payments"),
            Err(WriterIdError::MissingName { .. })
        ));
        assert!(matches!(
            WriterId::rollout("Payments", "api"),
            Err(WriterIdError::InvalidNamespace { .. })
        ));
        assert!(matches!(
            WriterId::rollout("payments", "api/x"),
            Err(WriterIdError::InvalidName { .. })
        ));
        assert!(matches!(
            WriterId::rollout("payments", "-api"),
            Err(WriterIdError::InvalidName { .. })
        ));
        assert!(matches!(
            WriterId::override_by("alice smith"),
            Err(WriterIdError::InvalidUser { .. })
        ));
        assert!(matches!(
            WriterId::override_by(""),
            Err(WriterIdError::InvalidUser { .. })
        ));
        assert!(matches!(
            WriterId::override_by(&"a".repeat(WriterId::MAX_LEN)),
            Err(WriterIdError::TooLong { .. })
        ));
    }

    #[test]
    fn orders_by_text() {
        let a = WriterId::override_by("alice").unwrap();
        let b = WriterId::override_by("bob").unwrap();
        assert!(a < b);
        assert_eq!(a, WriterId::parse("override:alice").unwrap());
    }
}
