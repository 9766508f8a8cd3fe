//! Stored revisions without a list per reconcile: a metadata-only watch of the
//! ControllerRevisions tells which exist (names, uids, resourceVersions, owners), and
//! their decoded states are kept here, so an unchanged revision is read and decoded once.
//!
//! A list by label per reconcile made the hub filter every ControllerRevision of the
//! namespace each time (its cost grew with the number of rollouts, for each of them), and
//! decoding was most of the controller's CPU. A ControllerRevision's data is immutable:
//! the same uid at the same resourceVersion always decodes to the same state.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::regions::publication::RevisionState;
use crate::use_order::UseOrder;

/// Most bytes of encoded revision state kept decoded. Past it the least recently used
/// are dropped (and read again when needed): real revisions are a few KiB, the largest a
/// ControllerRevision holds about 1.5 MiB, so thousands of rollouts fit in typical use
/// while a few very large ones cannot grow the process without bound.
pub const MAX_DECODED_BYTES: usize = 64 * 1024 * 1024;

/// Decoded revisions by ControllerRevision uid, each valid at one resourceVersion.
#[derive(Default)]
pub struct DecodedRevisions {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    order: UseOrder<String>,
    bytes: usize,
}

struct Entry {
    version: String,
    state: RevisionState,
    bytes: usize,
    last_used: u64,
}

impl DecodedRevisions {
    /// The decoded state of the object `uid` at `version`, if kept.
    pub fn get(&self, uid: &str, version: &str) -> Option<RevisionState> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let entry = inner.entries.get_mut(uid)?;
        if entry.version != version {
            return None;
        }
        entry.last_used = inner.order.used(Some(entry.last_used), uid.to_owned());
        Some(entry.state.clone())
    }

    /// Keeps `state`, decoded from the object `uid` at `version`, whose encoded state took
    /// `bytes`; drops the least recently used past [`MAX_DECODED_BYTES`].
    pub fn insert(&self, uid: &str, version: &str, state: &RevisionState, bytes: usize) {
        let mut inner = self.lock();
        inner.forget(uid);
        let last_used = inner.order.used(None, uid.to_owned());
        let entry = Entry {
            version: version.to_owned(),
            state: state.clone(),
            bytes,
            last_used,
        };
        inner.entries.insert(uid.to_owned(), entry);
        inner.bytes = inner.bytes.saturating_add(bytes);
        while inner.bytes > MAX_DECODED_BYTES {
            let Some(oldest) = inner.order.take_oldest() else {
                break;
            };
            inner.forget(&oldest);
        }
    }

    /// Drops the object `uid` (deleted).
    pub fn remove(&self, uid: &str) {
        self.lock().forget(uid);
    }

    /// How many decoded revisions, and their encoded bytes.
    pub fn size(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.entries.len(), inner.bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(inner) => inner,
            // A panic elsewhere poisoned it; every entry is still a valid decode.
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Inner {
    fn forget(&mut self, uid: &str) {
        if let Some(entry) = self.entries.remove(uid) {
            self.order.forget(entry.last_used);
            self.bytes = self.bytes.saturating_sub(entry.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use configrollout_core::crdt::{Stamp, WriterId};

    fn revision(name: &str) -> RevisionState {
        let writer = WriterId::rollout("team", "limits").unwrap();
        let data = [("rate".to_owned(), "10".to_owned())].into();
        RevisionState::declare(name, None, None, &data, Stamp::new(1_000, 0, writer))
    }

    #[test]
    fn a_revision_is_served_only_at_the_version_it_was_decoded_from() {
        let cache = DecodedRevisions::default();
        cache.insert("uid-1", "10", &revision("r1"), 100);
        assert_eq!(cache.get("uid-1", "10"), Some(revision("r1")));
        // Replaced (deleted and created again under the same uid cannot happen, but a
        // newer version must never be answered with an older decode).
        assert_eq!(cache.get("uid-1", "11"), None);
        assert_eq!(cache.get("uid-2", "10"), None);
        cache.remove("uid-1");
        assert_eq!(cache.get("uid-1", "10"), None);
        assert_eq!(cache.size(), (0, 0));
    }

    #[test]
    fn past_the_byte_bound_the_least_recently_used_go_first() {
        let cache = DecodedRevisions::default();
        let third = MAX_DECODED_BYTES / 3;
        cache.insert("a", "1", &revision("r1"), third);
        cache.insert("b", "1", &revision("r2"), third);
        cache.insert("c", "1", &revision("r3"), third);
        // "a" is used again; "b" is now the least recently used.
        assert!(cache.get("a", "1").is_some());
        cache.insert("d", "1", &revision("r4"), third);
        assert!(cache.get("b", "1").is_none());
        for kept in ["a", "c", "d"] {
            assert!(cache.get(kept, "1").is_some(), "{kept}");
        }
        assert!(cache.size().1 <= MAX_DECODED_BYTES);
        // One larger than the bound is not kept at all.
        cache.insert("huge", "1", &revision("r5"), MAX_DECODED_BYTES + 1);
        assert!(cache.size().1 <= MAX_DECODED_BYTES);
        assert!(cache.get("huge", "1").is_none());
    }
}
