//! Versions of rollouts this controller has written over.
//!
//! Each status write is conditional on the resourceVersion it was computed from, and
//! replaces that version. A reconcile can still be handed the replaced version: a timer
//! or a Region change fires before the watch has delivered the write. Deciding from it
//! would act on a status that no longer holds (declare the same revision again, publish
//! to a region again) before its own status write is refused as stale. Such a reconcile
//! waits for the watch instead.
//!
//! A resourceVersion is opaque, but an object never goes back to one it has left, so
//! "the version this controller wrote over" is known stale without ordering versions.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::api::ConfigRollout;

/// Past this many remembered rollouts (deleted ones are never seen again), all are
/// forgotten: only the early skip is lost, the write precondition still holds.
const FORGET_ABOVE: usize = 65_536;

/// The version each rollout had when this controller last wrote its status, by uid, until
/// a reconcile sees a newer one.
#[derive(Debug, Default)]
pub struct SupersededVersions {
    written_over: Mutex<HashMap<String, String>>,
}

impl SupersededVersions {
    /// Notes that a write conditional on `rollout`'s version replaced it.
    pub fn wrote_over(&self, rollout: &ConfigRollout) {
        if let (Some(uid), Some(version)) = (rollout.uid(), rollout.resource_version()) {
            self.wrote_over_version(&uid, &version);
        }
    }

    /// Whether `rollout` is a version this controller has written over.
    pub fn is_superseded(&self, rollout: &ConfigRollout) -> bool {
        match (rollout.uid(), rollout.resource_version()) {
            (Some(uid), Some(version)) => self.is_superseded_version(&uid, &version),
            _ => false,
        }
    }

    fn wrote_over_version(&self, uid: &str, resource_version: &str) {
        if let Ok(mut written_over) = self.written_over.lock() {
            if written_over.len() >= FORGET_ABOVE && !written_over.contains_key(uid) {
                written_over.clear();
            }
            written_over.insert(uid.to_owned(), resource_version.to_owned());
        }
    }

    /// Whether `resource_version` of the rollout `uid` is one this controller has written
    /// over. Any other version is at least as new as the write, and forgets it.
    fn is_superseded_version(&self, uid: &str, resource_version: &str) -> bool {
        let Ok(mut written_over) = self.written_over.lock() else {
            return false;
        };
        match written_over.get(uid) {
            Some(replaced) if replaced == resource_version => true,
            Some(_) => {
                written_over.remove(uid);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_version_written_over_is_stale_until_a_newer_one_is_seen() {
        let versions = SupersededVersions::default();
        assert!(!versions.is_superseded_version("u1", "10"));
        versions.wrote_over_version("u1", "10");
        assert!(versions.is_superseded_version("u1", "10"));
        assert!(
            versions.is_superseded_version("u1", "10"),
            "asked again, still stale"
        );
        assert!(
            !versions.is_superseded_version("u2", "10"),
            "another rollout"
        );
        assert!(
            !versions.is_superseded_version("u1", "11"),
            "the written version"
        );
        assert!(
            !versions.is_superseded_version("u1", "10"),
            "forgotten once passed"
        );
    }

    #[test]
    fn remembering_is_bounded() {
        let versions = SupersededVersions::default();
        for uid in 0..FORGET_ABOVE + 10 {
            versions.wrote_over_version(&uid.to_string(), "1");
        }
        let remembered = versions.written_over.lock().unwrap().len();
        assert!(remembered <= FORGET_ABOVE, "{remembered}");
        let last = (FORGET_ABOVE + 9).to_string();
        assert!(versions.is_superseded_version(&last, "1"));
    }
}
