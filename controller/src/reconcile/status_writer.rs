//! Writes a rollout's status with server-side apply under one field manager, and only
//! while this replica holds the Lease.

use std::time::Instant;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Context, HubError, api_call};
use crate::api::{ConfigRollout, ConfigRolloutStatus, ShardWriter};
use crate::telemetry::metrics::{ReconcileRecord, WriteKind, WriteResult};

/// The status to write, if any: `computed` with `writer` recorded in `writtenBy`, or
/// `None` when it differs from `previous` in nothing but who wrote it (a new holder does
/// not rewrite a status only to sign it).
fn to_write(
    previous: Option<&ConfigRolloutStatus>,
    computed: &ConfigRolloutStatus,
    writer: Option<ShardWriter>,
) -> Option<ConfigRolloutStatus> {
    let mut status = computed.clone();
    status.written_by = previous.and_then(|previous| previous.written_by.clone());
    if previous == Some(&status) {
        return None;
    }
    status.written_by = writer;
    Some(status)
}

/// Field manager of every status write.
pub const STATUS_FIELD_MANAGER: &str = "configrollout-controller";

/// What became of a status write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusWrite {
    /// The status was already what it should be: nothing sent.
    Unchanged,
    /// Written.
    Written,
    /// Refused: the rollout changed since it was read, and the status was computed from
    /// the stale read.
    Stale,
}

/// Applies `status` to `rollout` if it changed and this replica holds the Lease of the
/// rollout's shard, noting the patch's result and duration in `record`. A sharded
/// controller records itself in `status.writtenBy` on each write; a change of writer alone
/// is not a reason to write.
///
/// `rollout` is the rollout as read (its stored status is what a write replaces, its
/// `resourceVersion` the write's precondition).
pub async fn write_status(
    ctx: &Context,
    rollout: &ConfigRollout,
    status: &ConfigRolloutStatus,
    record: &mut ReconcileRecord,
) -> Result<StatusWrite, HubError> {
    let writer = ctx.fence.writer(rollout).map(|writer| ShardWriter {
        shard: writer.shard,
        shards: writer.shards,
        holder: writer.holder,
    });
    let Some(status) = to_write(rollout.status.as_ref(), status, writer) else {
        return Ok(StatusWrite::Unchanged);
    };
    if !ctx.fence.permits(rollout, WriteKind::RolloutStatus) {
        return Err(HubError::NotLeader);
    }
    let namespace = rollout.namespace().unwrap_or_default();
    let api: Api<ConfigRollout> = Api::namespaced(ctx.hub.clone(), &namespace);
    // The resourceVersion the status was computed from is a precondition: a status
    // computed from a stale read (another writer, a deposed leader) is refused with a
    // conflict instead of overwriting a newer one.
    let patch = json!({
        "apiVersion": "configrollout.dev/v1alpha1",
        "kind": "ConfigRollout",
        "metadata": {"resourceVersion": rollout.resource_version()},
        "status": &status,
    });
    let params = PatchParams::apply(STATUS_FIELD_MANAGER).force();
    let started = Instant::now();
    let written = api_call(
        "write status",
        api.patch_status(&rollout.name_any(), &params, &Patch::Apply(&patch)),
    )
    .await;
    let result = match &written {
        Ok(_) => WriteResult::Ok,
        Err(error) if error.is_conflict() => WriteResult::Conflict,
        Err(_) => WriteResult::Error,
    };
    record.status_patch = Some((result, started.elapsed()));
    match written {
        Ok(stored) => {
            // An apply the apiserver found identical to what it holds (a time that differs
            // only below the second it is stored at, say) makes no new version: no watch
            // event will bring one, and the version read must not wait for it.
            if stored.resource_version() != rollout.resource_version() {
                ctx.superseded.wrote_over(rollout);
            }
            ctx.held_statuses.written(rollout, Instant::now());
            Ok(StatusWrite::Written)
        }
        Err(error) if error.is_conflict() => {
            tracing::debug!(rollout = %rollout.name_any(), "status computed from a stale read; not written");
            Ok(StatusWrite::Stale)
        }
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RolloutPhase;

    fn writer(holder: &str) -> Option<ShardWriter> {
        Some(ShardWriter {
            shard: 2,
            shards: 4,
            holder: holder.to_owned(),
        })
    }

    #[test]
    fn a_changed_status_is_signed_by_its_writer_and_an_unchanged_one_is_not_rewritten() {
        let previous = ConfigRolloutStatus {
            phase: Some(RolloutPhase::Progressing),
            written_by: writer("a"),
            ..Default::default()
        };
        // The engine's status, without (or with a stale) writtenBy: nothing else changed.
        let same = ConfigRolloutStatus {
            phase: Some(RolloutPhase::Progressing),
            ..Default::default()
        };
        assert_eq!(to_write(Some(&previous), &same, writer("b")), None);
        assert_eq!(to_write(Some(&previous), &previous, writer("b")), None);

        let changed = ConfigRolloutStatus {
            phase: Some(RolloutPhase::Complete),
            ..Default::default()
        };
        let written = to_write(Some(&previous), &changed, writer("b")).unwrap();
        assert_eq!(written.phase, Some(RolloutPhase::Complete));
        assert_eq!(written.written_by, writer("b"));
        // First status of a rollout.
        assert_eq!(
            to_write(None, &same, writer("b")).unwrap().written_by,
            writer("b")
        );
    }

    #[test]
    fn one_shard_writes_exactly_what_it_wrote_before() {
        let previous = ConfigRolloutStatus {
            phase: Some(RolloutPhase::Progressing),
            ..Default::default()
        };
        let changed = ConfigRolloutStatus {
            phase: Some(RolloutPhase::Complete),
            ..Default::default()
        };
        assert_eq!(
            to_write(Some(&previous), &changed, None),
            Some(changed.clone())
        );
        assert_eq!(to_write(Some(&changed), &changed, None), None);
        let json = serde_json::to_value(&changed).unwrap();
        assert!(json.get("writtenBy").is_none(), "{json}");
    }
}
