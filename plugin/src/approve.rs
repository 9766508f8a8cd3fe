//! `kubectl configrollout approve`: an approval approves exactly the revision the approver
//! reviewed. It names that revision (and may name its digest); when the rollout has moved
//! on to another revision the approval is refused, never applied to the newer one. In a
//! terminal, without `--revision`, it shows what it is about to approve and asks; in a
//! script it requires `--revision`. The dashboard's form carries the revision and digest
//! of the page the approver was reading.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};

use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, PostParams};

use super::approval_pin::current_record;
use super::hub::{Hub, Say};
use super::render;
use super::{CliError, EXIT_COMPLETE};
use configrollout_api::{ConfigRollout, StageApproval, StageApprovalSpec};

pub use super::approval_pin::{MIN_DIGEST_PREFIX, approvable, short_digest};

/// Key names listed in a summary, at most.
const MAX_KEYS_SHOWN: usize = 20;

/// What the approver reviewed: a revision by name, and optionally its digest (as `get`,
/// `history` and the dashboard show it, in full or its first [`MIN_DIGEST_PREFIX`]
/// characters or more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewed {
    /// The revision, e.g. `r7`.
    pub revision: String,
    /// Its digest, or a prefix of it.
    pub digest: Option<String>,
}

/// Why an approval of `reviewed` may not be created for the rollout as it is now, if it
/// may not: the rollout has moved on to another revision, or the digest is not the
/// revision's.
pub fn pin_refusal(rollout: &ConfigRollout, reviewed: &Reviewed) -> Option<String> {
    let name = rollout.name_any();
    let namespace = rollout.namespace().unwrap_or_default();
    let Some(record) = current_record(rollout) else {
        return Some(format!(
            "configrollout {namespace}/{name} has no revision with a digest in its status yet: \
             nothing to approve"
        ));
    };
    let digest = record.digest.as_deref().unwrap_or_default();
    if record.name != reviewed.revision {
        return Some(format!(
            "approval for {} refused: configrollout {namespace}/{name} has moved on to {} \
             (digest {}) since; nothing was approved. Review {} (`kubectl configrollout diff \
             {name} -n {namespace} --from {} --to {}`) and approve it by name",
            reviewed.revision,
            record.name,
            short_digest(digest),
            record.name,
            reviewed.revision,
            record.name,
        ));
    }
    if let Some(asked) = &reviewed.digest {
        let asked_hex = asked.rsplit(':').next().unwrap_or(asked);
        let hex = digest.rsplit(':').next().unwrap_or(digest);
        let matches = asked_hex.len() >= MIN_DIGEST_PREFIX && hex.starts_with(asked_hex);
        if !matches {
            return Some(format!(
                "approval for {} refused: its digest is {}, not {}; nothing was approved. \
                 Give the digest `kubectl configrollout get {name} -n {namespace}` shows (at \
                 least {MIN_DIGEST_PREFIX} characters)",
                record.name,
                short_digest(digest),
                short_digest(asked),
            ));
        }
    }
    None
}

/// The keys `current` sets or changes and removes relative to `previous` (names only).
pub fn changed_keys(
    previous: Option<&BTreeMap<String, String>>,
    current: &BTreeMap<String, String>,
) -> (Vec<String>, Vec<String>) {
    let empty = BTreeMap::new();
    let previous = previous.unwrap_or(&empty);
    let set = current
        .iter()
        .filter(|(key, value)| previous.get(*key) != Some(*value))
        .map(|(key, _)| key.clone())
        .collect();
    let removed = previous
        .keys()
        .filter(|key| !current.contains_key(*key))
        .cloned()
        .collect();
    (set, removed)
}

fn listed(keys: &[String]) -> String {
    let mut shown: Vec<&str> = keys
        .iter()
        .take(MAX_KEYS_SHOWN)
        .map(String::as_str)
        .collect();
    let more = keys.len().saturating_sub(MAX_KEYS_SHOWN);
    let more = format!("and {more} more");
    if keys.len() > MAX_KEYS_SHOWN {
        shown.push(&more);
    }
    // Key names are ConfigMap keys (letters, digits, `-`, `_`, `.`): nothing to escape.
    shown.join(", ")
}

impl Hub {
    /// Creates the StageApproval of `stage` (default: the stage awaiting approval now) of
    /// the revision `reviewed` names, refusing when the rollout has moved on.
    pub(super) async fn approve(
        &self,
        name: &str,
        stage: Option<String>,
        reason: Option<String>,
        reviewed: &Reviewed,
        say: &mut Say<'_>,
    ) -> Result<u8, CliError> {
        let rollout = self.rollout(name).await?;
        let stage = self.stage_to_approve(&rollout, stage)?;
        if let Some(refusal) = pin_refusal(&rollout, reviewed) {
            return Err(CliError::Message(refusal));
        }
        let approver = self.whoami().await?;
        if let Some(refusal) = render::four_eyes_refusal(&rollout, &approver) {
            return Err(CliError::Message(refusal));
        }
        let spec = StageApprovalSpec::for_revision(
            &rollout,
            &reviewed.revision,
            &stage,
            &approver,
            reason,
        )
        .ok_or_else(|| {
            CliError::Message(format!(
                "configrollout {}/{name} has no revision {} with a digest in its \
                         status: nothing to approve",
                self.namespace, reviewed.revision
            ))
        })?;
        let approval = StageApproval {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}-{stage}-{}-", spec.revision)),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec,
        };
        let api: Api<StageApproval> = Api::namespaced(self.client.clone(), &self.namespace);
        let created = match self
            .call(
                "creating the StageApproval",
                api.create(&PostParams::default(), &approval),
            )
            .await
        {
            Err(CliError::Api {
                code: 403 | 422,
                message,
                ..
            }) => {
                return Err(CliError::Message(format!(
                    "you ({approver}) may not approve in namespace {}: {message}",
                    self.namespace
                )));
            }
            other => other?,
        };
        say(format!(
            "stageapproval {}/{} created: {approver} approves stage {stage} of revision {} \
             of {name} (digest {})",
            self.namespace,
            created.name_any(),
            created.spec.revision,
            short_digest(&created.spec.revision_digest),
        ));
        Ok(EXIT_COMPLETE)
    }

    /// `approve` without `--revision`: in a terminal, shows what would be approved and
    /// asks, pinning the answer to what was shown; in a script, refuses.
    pub(super) async fn approve_asking(
        &self,
        name: &str,
        stage: Option<String>,
        reason: Option<String>,
        say: &mut Say<'_>,
    ) -> Result<u8, CliError> {
        let rollout = self.rollout(name).await?;
        let stage = self.stage_to_approve(&rollout, stage)?;
        let Some((revision, digest)) = approvable(&rollout) else {
            return Err(CliError::Message(format!(
                "configrollout {}/{name} has no revision with a digest in its status yet: \
                 nothing to approve",
                self.namespace
            )));
        };
        if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
            return Err(CliError::Message(format!(
                "name the revision you reviewed: kubectl configrollout approve {name} -n {} \
                 --stage {stage} --revision {revision} (digest {digest}). Without a terminal to \
                 ask in, approve never picks the revision for you",
                self.namespace
            )));
        }
        println!("{}", self.approval_summary(&rollout, &stage).await);
        print!("Approve stage {stage} of {revision} (digest {digest})? [y/N] ");
        std::io::stdout()
            .flush()
            .map_err(|e| CliError::Message(e.to_string()))?;
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| CliError::Message(e.to_string()))?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(CliError::Message("not approved".to_owned()));
        }
        let reviewed = Reviewed {
            revision,
            digest: Some(digest),
        };
        self.approve(name, Some(stage), reason, &reviewed, say)
            .await
    }

    /// What an approval of `stage` would approve, in words: the revision, its digest, and
    /// the keys it changes (names only; counts when the caller may not read revisions).
    async fn approval_summary(&self, rollout: &ConfigRollout, stage: &str) -> String {
        let Some(record) = current_record(rollout) else {
            return String::new();
        };
        let head = format!(
            "configrollout {}/{}: stage {stage} awaits approval of {} (digest {})",
            self.namespace,
            rollout.name_any(),
            record.name,
            short_digest(record.digest.as_deref().unwrap_or_default()),
        );
        let counts = format!(
            "{head}, which sets {} keys and removes {}",
            record.keys_set, record.keys_removed
        );
        let Ok(revisions) = self.revisions(rollout).await else {
            return format!("{counts} (key names: you may not read its revisions)");
        };
        let Some(current) = revisions.get(&record.name) else {
            return counts;
        };
        let previous = rollout.status.as_ref().and_then(|status| {
            let position = status
                .history
                .iter()
                .position(|entry| entry.name == record.name)?;
            let before = status.history.get(position.checked_sub(1)?)?;
            revisions.get(&before.name)
        });
        let (set, removed) = changed_keys(
            previous.map(|revision| revision.desired()).as_ref(),
            &current.desired(),
        );
        let mut out = format!("{head}\n  sets or changes: {}", listed(&set));
        if !removed.is_empty() {
            out.push_str(&format!("\n  removes: {}", listed(&removed)));
        }
        out
    }

    /// The stage an approval is for: the one named (which must require an approval), or
    /// the one awaiting approval now.
    fn stage_to_approve(
        &self,
        rollout: &ConfigRollout,
        stage: Option<String>,
    ) -> Result<String, CliError> {
        let name = rollout.name_any();
        match (stage, render::awaiting_approval(rollout)) {
            (Some(stage), _) if render::requires_approval(rollout, &stage) => Ok(stage),
            (Some(stage), _) => Err(CliError::Message(format!(
                "stage {stage} of configrollout {}/{name} does not require an approval",
                self.namespace
            ))),
            (None, Some(stage)) => Ok(stage),
            (None, None) => {
                let status = rollout.status.as_ref();
                Err(CliError::Message(format!(
                    "nothing awaits approval: configrollout {}/{name} is {} (stage {}); \
                     it waits on {}",
                    self.namespace,
                    status
                        .and_then(|s| s.phase)
                        .map_or_else(|| "without status".to_owned(), |p| format!("{p:?}")),
                    status
                        .and_then(|s| s.current_stage.as_deref())
                        .unwrap_or("-"),
                    render::waiting_on(rollout).what
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout(current: &str, history: &[(&str, &str)]) -> ConfigRollout {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "configrollout.dev/v1alpha1",
            "kind": "ConfigRollout",
            "metadata": {"name": "app", "namespace": "team", "uid": "u-1"},
            "spec": {
                "target": {"namespace": "team", "name": "limits"},
                "data": {"a": "1"},
                "stages": [{"name": "prod", "regions": {"names": ["r"]}, "approval": "Required"}]
            },
            "status": {
                "revision": current,
                "history": history.iter().map(|(name, digest)| serde_json::json!({
                    "name": name,
                    "digest": digest,
                    "declaredAt": "2026-12-06T08:00:00Z",
                    "stamp": "1.0@rollout:team/app",
                    "keysSet": 1,
                    "keysRemoved": 0
                })).collect::<Vec<_>>()
            }
        }))
        .expect("a rollout")
    }

    const R7: &str = "hmac-sha256:7777777777777777aaaa";
    const R8: &str = "hmac-sha256:8888888888888888bbbb";

    fn reviewed(revision: &str, digest: Option<&str>) -> Reviewed {
        Reviewed {
            revision: revision.to_owned(),
            digest: digest.map(str::to_owned),
        }
    }

    #[test]
    fn an_approval_for_a_revision_the_rollout_moved_on_from_is_refused() {
        let moved = rollout("r8", &[("r7", R7), ("r8", R8)]);
        let refusal = pin_refusal(&moved, &reviewed("r7", None)).expect("refused");
        assert!(refusal.contains("approval for r7 refused"), "{refusal}");
        assert!(
            refusal.contains("moved on to r8 (digest 888888888888)"),
            "{refusal}"
        );
        assert!(refusal.contains("nothing was approved"), "{refusal}");
        assert_eq!(pin_refusal(&moved, &reviewed("r8", None)), None);
    }

    #[test]
    fn a_digest_must_be_the_revisions_and_long_enough() {
        let at_r8 = rollout("r8", &[("r7", R7), ("r8", R8)]);
        assert_eq!(pin_refusal(&at_r8, &reviewed("r8", Some(R8))), None);
        assert_eq!(
            pin_refusal(&at_r8, &reviewed("r8", Some("888888888888"))),
            None
        );
        // r7's digest on r8's name: a revision reused under a name is not approved.
        assert!(pin_refusal(&at_r8, &reviewed("r8", Some("777777777777"))).is_some());
        // Too short to name one revision.
        assert!(pin_refusal(&at_r8, &reviewed("r8", Some("8888"))).is_some());
    }

    #[test]
    fn nothing_to_approve_without_a_revision() {
        let fresh = rollout("r1", &[]);
        assert!(pin_refusal(&fresh, &reviewed("r1", None)).is_some());
        assert_eq!(approvable(&fresh), None);
        let at_r8 = rollout("r8", &[("r7", R7), ("r8", R8)]);
        assert_eq!(
            approvable(&at_r8),
            Some(("r8".to_owned(), "888888888888".to_owned()))
        );
    }

    #[test]
    fn changed_keys_name_sets_and_removals_only() {
        let before = BTreeMap::from([
            ("same".to_owned(), "1".to_owned()),
            ("changed".to_owned(), "1".to_owned()),
            ("gone".to_owned(), "1".to_owned()),
        ]);
        let after = BTreeMap::from([
            ("same".to_owned(), "1".to_owned()),
            ("changed".to_owned(), "2".to_owned()),
            ("new".to_owned(), "1".to_owned()),
        ]);
        assert_eq!(
            changed_keys(Some(&before), &after),
            (
                vec!["changed".to_owned(), "new".to_owned()],
                vec!["gone".to_owned()]
            )
        );
        assert_eq!(changed_keys(None, &after).0.len(), 3);
    }
}
