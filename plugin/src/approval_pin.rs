//! The revision an approval names: the one the rollout is rolling out now, and its digest
//! as `get`, `history` and the dashboard show it. Read by `approve` and `render` alike.

use configrollout_api::{ConfigRollout, RevisionRecord};

/// Shortest digest prefix `--digest` accepts: enough that no two revisions of a rollout
/// share it by chance.
pub const MIN_DIGEST_PREFIX: usize = 12;

/// The revision an approval would name now, as `get` and the dashboard show it: its name
/// and short digest.
pub fn approvable(rollout: &ConfigRollout) -> Option<(String, String)> {
    let record = current_record(rollout)?;
    Some((record.name.clone(), short_digest(record.digest.as_deref()?)))
}

/// The digest as shown: the part after any `algorithm:` prefix, cut to
/// [`MIN_DIGEST_PREFIX`] characters.
pub fn short_digest(digest: &str) -> String {
    let hex = digest.rsplit(':').next().unwrap_or(digest);
    hex.chars().take(MIN_DIGEST_PREFIX).collect()
}

/// The history record of the revision the rollout is rolling out now.
pub(super) fn current_record(rollout: &ConfigRollout) -> Option<&RevisionRecord> {
    rollout.status.as_ref()?.current_record()
}
