//! Status writes that carry no transition are rate-limited: a status that differs from
//! the stored one only in gate samples (their counts, the samples kept, the progress in a
//! condition's message) is held in memory and written at most once every
//! [`HOLD_SAMPLES_FOR`] per rollout, with whatever samples came since. A gate sampling
//! every second would otherwise write its rollout's status every second, and every
//! write comes back through the watch as a reconcile, through the hub's apiserver every
//! tenant shares.
//!
//! The held status is the rollout's status for the next reconcile, as long as the rollout
//! has not changed since (its `resourceVersion`): the samples taken are not taken again.
//! Anything else (a verdict, a phase, a stage, a region, a condition's type, status or
//! reason) is a transition and is written at once, with the samples held. A held status
//! lost (a restart, another replica taking the shard) costs the samples of at most one
//! period: they are taken again, on the gate's schedule.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::api::{ConfigRollout, ConfigRolloutStatus};

/// Longest a rollout's sample-only status change waits to be written.
pub const HOLD_SAMPLES_FOR: Duration = Duration::from_secs(10);

/// Entries kept without a held status, past which the idle ones are dropped.
const PRUNE_ABOVE: usize = 4096;

#[derive(Debug)]
struct Entry {
    /// When this replica last wrote the rollout's status.
    written_at: Option<Instant>,
    /// A status not written yet, and the `resourceVersion` it was computed from.
    held: Option<(String, ConfigRolloutStatus)>,
}

/// The statuses held, per rollout UID.
#[derive(Debug, Default)]
pub struct HeldStatuses {
    entries: Mutex<HashMap<String, Entry>>,
}

impl HeldStatuses {
    /// `rollout` with its held status in place of the stored one, when one is held for
    /// the version read; `None` otherwise (and a held status of an older version goes).
    pub fn overlay(&self, rollout: &ConfigRollout) -> Option<ConfigRollout> {
        let uid = rollout.uid()?;
        let version = rollout.resource_version()?;
        let mut entries = self.entries.lock().ok()?;
        let entry = entries.get_mut(&uid)?;
        match &entry.held {
            Some((held_version, status)) if *held_version == version => {
                let mut overlaid = rollout.clone();
                overlaid.status = Some(status.clone());
                Some(overlaid)
            }
            Some(_) => {
                entry.held = None;
                None
            }
            None => None,
        }
    }

    /// Holds `computed` instead of writing it, when it differs from `stored` only in gate
    /// samples and this replica wrote the rollout's status less than [`HOLD_SAMPLES_FOR`]
    /// ago: returns how long until it is written. `None`: write it now.
    pub fn hold(
        &self,
        rollout: &ConfigRollout,
        stored: Option<&ConfigRolloutStatus>,
        computed: &ConfigRolloutStatus,
        now: Instant,
    ) -> Option<Duration> {
        let uid = rollout.uid()?;
        let version = rollout.resource_version()?;
        // The cheap question first, and without the statuses under the lock every
        // reconcile shares: most reconciles come long after this replica's last write.
        let written_at = self.entries.lock().ok()?.get(&uid)?.written_at?;
        let due = written_at.checked_add(HOLD_SAMPLES_FOR)?;
        let wait = due
            .checked_duration_since(now)
            .filter(|wait| !wait.is_zero())?;
        if is_transition(stored, computed) || is_unchanged(stored, computed) {
            return None;
        }
        let mut entries = self.entries.lock().ok()?;
        let entry = entries.get_mut(&uid)?;
        entry.held = Some((version, computed.clone()));
        Some(wait)
    }

    /// Notes that the rollout's status was written now: nothing is held for it.
    pub fn written(&self, rollout: &ConfigRollout, now: Instant) {
        let Some(uid) = rollout.uid() else {
            return;
        };
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries.len() > PRUNE_ABOVE {
            entries.retain(|_, entry| {
                entry.held.is_some()
                    || entry
                        .written_at
                        .is_some_and(|at| now.saturating_duration_since(at) < HOLD_SAMPLES_FOR)
            });
        }
        entries.insert(
            uid,
            Entry {
                written_at: Some(now),
                held: None,
            },
        );
    }
}

/// Whether `computed` differs from `stored` in more than gate samples: their counts and
/// the samples kept, and the words of a condition's message (which counts them).
fn is_transition(stored: Option<&ConfigRolloutStatus>, computed: &ConfigRolloutStatus) -> bool {
    let Some(stored) = stored else {
        return true;
    };
    without_samples(stored) != without_samples(computed)
}

/// Whether `computed` is `stored` but for who wrote it: nothing to write or hold.
fn is_unchanged(stored: Option<&ConfigRolloutStatus>, computed: &ConfigRolloutStatus) -> bool {
    stored.is_some_and(|stored| {
        let mut computed = computed.clone();
        computed.written_by.clone_from(&stored.written_by);
        *stored == computed
    })
}

fn without_samples(status: &ConfigRolloutStatus) -> ConfigRolloutStatus {
    let mut status = status.clone();
    for stage in &mut status.stages {
        for gate in &mut stage.gates {
            gate.successes = 0;
            gate.failures = 0;
            gate.inconclusives = 0;
            gate.consecutive_errors = 0;
            gate.samples.clear();
        }
    }
    for condition in &mut status.conditions {
        condition.message.clear();
    }
    status.written_by = None;
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{GateStatus, GateVerdict, RolloutPhase, StageStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn rollout(version: &str) -> ConfigRollout {
        let spec = serde_json::from_value(serde_json::json!({
            "target": {"namespace": "app", "name": "limits"},
            "data": {"rate": "1"},
            "stages": [{"name": "only", "regions": {"names": ["region-1"]}}],
        }))
        .unwrap();
        let mut rollout = ConfigRollout::new("limits", spec);
        rollout.metadata = ObjectMeta {
            name: Some("limits".into()),
            namespace: Some("team".into()),
            uid: Some("uid-1".into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        };
        rollout
    }

    fn verifying(successes: i32, verdict: GateVerdict) -> ConfigRolloutStatus {
        ConfigRolloutStatus {
            phase: Some(RolloutPhase::Progressing),
            stages: vec![StageStatus {
                name: "canary".into(),
                gates: vec![GateStatus {
                    name: "errors".into(),
                    verdict: Some(verdict),
                    successes,
                    ..GateStatus::default()
                }],
                ..StageStatus::default()
            }],
            ..ConfigRolloutStatus::default()
        }
    }

    #[test]
    fn a_sample_is_held_after_a_write_and_a_verdict_is_not() {
        let held = HeldStatuses::default();
        let start = Instant::now();
        let stored = verifying(1, GateVerdict::Running);
        let sampled = verifying(2, GateVerdict::Running);
        let r1 = rollout("1");
        // Never written by this replica: written at once.
        assert_eq!(held.hold(&r1, Some(&stored), &sampled, start), None);
        held.written(&r1, start);
        let later = start + Duration::from_secs(3);
        assert_eq!(
            held.hold(&r1, Some(&stored), &sampled, later),
            Some(HOLD_SAMPLES_FOR - Duration::from_secs(3))
        );
        let overlaid = held.overlay(&r1).expect("held for this version");
        assert_eq!(overlaid.status, Some(sampled.clone()));
        // A verdict is a transition: written at once, samples and all.
        let passed = verifying(3, GateVerdict::Passed);
        assert_eq!(held.hold(&r1, Some(&stored), &passed, later), None);
        // Once the period is over, samples are written too.
        let due = start + HOLD_SAMPLES_FOR;
        assert_eq!(held.hold(&r1, Some(&stored), &sampled, due), None);
        // Nothing stored yet is a transition; nothing changed is nothing to hold.
        assert_eq!(held.hold(&r1, None, &sampled, later), None);
        assert_eq!(held.hold(&r1, Some(&stored), &stored, later), None);
    }

    #[test]
    fn a_held_status_is_dropped_when_the_rollout_changes_or_is_written() {
        let held = HeldStatuses::default();
        let start = Instant::now();
        let r1 = rollout("1");
        held.written(&r1, start);
        let stored = verifying(1, GateVerdict::Running);
        let sampled = verifying(2, GateVerdict::Running);
        assert!(held.hold(&r1, Some(&stored), &sampled, start).is_some());
        assert!(
            held.overlay(&rollout("2")).is_none(),
            "the spec changed since"
        );
        assert!(held.overlay(&r1).is_none(), "and the held status is gone");
        assert!(held.hold(&r1, Some(&stored), &sampled, start).is_some());
        held.written(&r1, start);
        assert!(held.overlay(&r1).is_none());
    }

    #[test]
    fn only_samples_and_messages_are_no_transition() {
        let stored = verifying(1, GateVerdict::Running);
        assert!(!is_transition(
            Some(&stored),
            &verifying(5, GateVerdict::Running)
        ));
        let mut phase = verifying(1, GateVerdict::Running);
        phase.phase = Some(RolloutPhase::Halted);
        assert!(is_transition(Some(&stored), &phase));
        let mut revision = verifying(1, GateVerdict::Running);
        revision.revision = Some("r2".into());
        assert!(is_transition(Some(&stored), &revision));
    }
}
