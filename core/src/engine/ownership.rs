//! Ownership of the keys of a shared target: one rollout per key, decided once in the hub
//! (`TargetClaim`) and the same for every region, never by which region a write reached
//! first. Pure: the reconcile reads the claim object, asks [`settle_claims`] what it should
//! say now for one rollout, writes it back (conditionally), and refuses the rollout
//! everywhere while another owns one of its keys.
//!
//! The rule: a key's owner is the first rollout that claimed it and still exists; the
//! others wait, in the order they asked. A rollout claims every key it holds (what it
//! declares, what its stable revision holds, what its current revision holds: a key
//! stays claimed until a revision without it completes, so a rollback of a removal never
//! writes a key someone else owns by then) and releases the rest. When the owner releases
//! a key or is deleted, the next in line owns it, without anyone's help. Overrides and
//! adopted edits in a region never make anyone an owner: they are not claims.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

use configrollout_api::{
    Claimant, ClaimedTarget, KeyClaim, MAX_CLAIMANTS_PER_KEY, TargetClaimSpec,
};

use super::clock::to_time;

/// The rollout asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutIdentity {
    /// Namespace of the ConfigRollout.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

impl RolloutIdentity {
    fn is(&self, claimant: &Claimant) -> bool {
        claimant.namespace == self.namespace && claimant.name == self.name
    }

    fn is_exactly(&self, claimant: &Claimant) -> bool {
        self.is(claimant) && claimant.uid == self.uid
    }
}

/// Why the asking rollout may not write a key now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another rollout owns the key; the asking one waits (at `position` in line, 1 next).
    Owned {
        /// The key.
        key: String,
        /// Its owner.
        owner: Claimant,
        /// The asking rollout's place among those waiting.
        position: usize,
    },
    /// So many rollouts wait for the key already that this one was not added.
    Crowded {
        /// The key.
        key: String,
    },
}

/// What the claim object should say after the asking rollout's claims, and what it may
/// not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimOutcome {
    /// The claim object's spec as it should be.
    pub spec: TargetClaimSpec,
    /// Whether it differs from what was read (a write is due).
    pub changed: bool,
    /// The keys the asking rollout holds and does not own, in key order.
    pub refusals: Vec<Refusal>,
}

/// Settles the claims of `rollout`, which holds `keys` of `target`, in what the claim
/// object says now (`existing`, `None` when there is none yet). `alive` says whether a
/// claimant still exists (a rollout of that namespace, name and UID): the claims of a
/// deleted rollout are dropped, so the next in line owns their keys.
pub fn settle_claims(
    existing: Option<&TargetClaimSpec>,
    target: &ClaimedTarget,
    rollout: &RolloutIdentity,
    keys: &BTreeSet<String>,
    alive: impl Fn(&Claimant) -> bool,
    now: DateTime<Utc>,
) -> ClaimOutcome {
    let mut entries: Vec<KeyClaim> = existing.map(|spec| spec.keys.clone()).unwrap_or_default();
    for entry in &mut entries {
        entry.claimants.retain(|claimant| {
            if rollout.is(claimant) {
                // Our own claim stays only for a key we still hold, and only under our
                // UID (a rollout deleted and created again asks again, last in line).
                rollout.is_exactly(claimant) && keys.contains(&entry.key)
            } else {
                alive(claimant)
            }
        });
    }
    let mut refusals = Vec::new();
    for key in keys {
        let position = match entries.binary_search_by(|entry| entry.key.as_str().cmp(key)) {
            Ok(position) => position,
            Err(position) => {
                entries.insert(
                    position,
                    KeyClaim {
                        key: key.clone(),
                        claimants: Vec::new(),
                    },
                );
                position
            }
        };
        let Some(entry) = entries.get_mut(position) else {
            continue;
        };
        let place = match entry
            .claimants
            .iter()
            .position(|claimant| rollout.is_exactly(claimant))
        {
            Some(place) => place,
            None if entry.claimants.len() >= MAX_CLAIMANTS_PER_KEY => {
                refusals.push(Refusal::Crowded { key: key.clone() });
                continue;
            }
            None => {
                entry.claimants.push(Claimant {
                    namespace: rollout.namespace.clone(),
                    name: rollout.name.clone(),
                    uid: rollout.uid.clone(),
                    since: to_time(now),
                });
                entry.claimants.len().saturating_sub(1)
            }
        };
        if place > 0
            && let Some(owner) = entry.claimants.first()
        {
            refusals.push(Refusal::Owned {
                key: key.clone(),
                owner: owner.clone(),
                position: place,
            });
        }
    }
    entries.retain(|entry| !entry.claimants.is_empty());
    let spec = TargetClaimSpec {
        target: target.clone(),
        keys: entries,
    };
    ClaimOutcome {
        changed: existing != Some(&spec),
        spec,
        refusals,
    }
}

/// The `InvalidSpec` message for `refusals` of a rollout in `namespace` on `target`: the
/// owner by name when it is in the same namespace (the reader may see it), otherwise only
/// that another team's rollout owns the key. Key names only, never values.
pub fn refusal_message(namespace: &str, target: &ClaimedTarget, refusals: &[Refusal]) -> String {
    let mut parts = Vec::new();
    for refusal in refusals.iter().take(10) {
        parts.push(match refusal {
            Refusal::Owned {
                key,
                owner,
                position,
            } => {
                let who = if owner.namespace == namespace {
                    format!("ConfigRollout {}/{}", owner.namespace, owner.name)
                } else {
                    "a rollout of another namespace".to_owned()
                };
                format!("key {key} is owned by {who} (this rollout is number {position} in line)")
            }
            Refusal::Crowded { key } => format!(
                "key {key} is claimed by {MAX_CLAIMANTS_PER_KEY} rollouts already; this one \
                 cannot wait for it"
            ),
        });
    }
    if refusals.len() > 10 {
        parts.push(format!(
            "and {} more keys",
            refusals.len().saturating_sub(10)
        ));
    }
    format!(
        "spec.data: {} of ConfigMap {}/{}; a key has one owning rollout, and this one writes \
         nothing until it owns every key it declares (TargetClaim {})",
        parts.join("; "),
        target.namespace,
        target.name,
        configrollout_api::claim_name(&target.namespace, &target.name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout(name: &str) -> RolloutIdentity {
        RolloutIdentity {
            namespace: "team".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn keys(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    fn target() -> ClaimedTarget {
        ClaimedTarget {
            namespace: "shared".into(),
            name: "payments".into(),
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
    }

    fn owner_of(spec: &TargetClaimSpec, key: &str) -> Option<String> {
        spec.keys
            .iter()
            .find(|entry| entry.key == key)
            .and_then(|entry| entry.claimants.first())
            .map(|claimant| claimant.name.clone())
    }

    #[test]
    fn the_first_to_claim_owns_the_key_and_the_next_waits_then_takes_over() {
        let a = settle_claims(
            None,
            &target(),
            &rollout("a"),
            &keys(&["y"]),
            |_| true,
            now(),
        );
        assert!(a.changed && a.refusals.is_empty());
        let b = settle_claims(
            Some(&a.spec),
            &target(),
            &rollout("b"),
            &keys(&["x", "y"]),
            |_| true,
            now(),
        );
        assert_eq!(owner_of(&b.spec, "x").as_deref(), Some("b"));
        assert_eq!(owner_of(&b.spec, "y").as_deref(), Some("a"));
        assert!(matches!(
            &b.refusals[..],
            [Refusal::Owned { key, position: 1, .. }] if key == "y"
        ));
        // Asking again changes nothing.
        let again = settle_claims(
            Some(&b.spec),
            &target(),
            &rollout("b"),
            &keys(&["x", "y"]),
            |_| true,
            now(),
        );
        assert!(!again.changed);
        // a stops holding y: b owns it, on b's next look, with no one's help.
        let released = settle_claims(
            Some(&b.spec),
            &target(),
            &rollout("a"),
            &keys(&[]),
            |_| true,
            now(),
        );
        let b = settle_claims(
            Some(&released.spec),
            &target(),
            &rollout("b"),
            &keys(&["x", "y"]),
            |_| true,
            now(),
        );
        assert!(b.refusals.is_empty());
        assert_eq!(owner_of(&b.spec, "y").as_deref(), Some("b"));
    }

    #[test]
    fn a_deleted_owner_passes_its_keys_to_the_next_in_line() {
        let a = settle_claims(
            None,
            &target(),
            &rollout("a"),
            &keys(&["y"]),
            |_| true,
            now(),
        );
        let b = settle_claims(
            Some(&a.spec),
            &target(),
            &rollout("b"),
            &keys(&["y"]),
            |_| true,
            now(),
        );
        assert!(!b.refusals.is_empty());
        let a_gone = |claimant: &Claimant| claimant.name != "a";
        let b = settle_claims(
            Some(&b.spec),
            &target(),
            &rollout("b"),
            &keys(&["y"]),
            a_gone,
            now(),
        );
        assert!(b.refusals.is_empty());
        assert_eq!(owner_of(&b.spec, "y").as_deref(), Some("b"));
    }

    #[test]
    fn a_rollout_created_again_under_the_same_name_asks_again() {
        let a = settle_claims(
            None,
            &target(),
            &rollout("a"),
            &keys(&["y"]),
            |_| true,
            now(),
        );
        let b = settle_claims(
            Some(&a.spec),
            &target(),
            &rollout("b"),
            &keys(&["y"]),
            |_| true,
            now(),
        );
        let mut again = rollout("a");
        again.uid = "uid-a-2".into();
        let a2 = settle_claims(
            Some(&b.spec),
            &target(),
            &again,
            &keys(&["y"]),
            |_| true,
            now(),
        );
        assert_eq!(owner_of(&a2.spec, "y").as_deref(), Some("b"));
        assert!(!a2.refusals.is_empty());
    }

    #[test]
    fn too_many_claimants_are_refused_without_growing_the_object() {
        let mut spec = None;
        for index in 0..MAX_CLAIMANTS_PER_KEY {
            let outcome = settle_claims(
                spec.as_ref(),
                &target(),
                &rollout(&format!("r{index}")),
                &keys(&["y"]),
                |_| true,
                now(),
            );
            spec = Some(outcome.spec);
        }
        let last = settle_claims(
            spec.as_ref(),
            &target(),
            &rollout("late"),
            &keys(&["y"]),
            |_| true,
            now(),
        );
        assert!(matches!(&last.refusals[..], [Refusal::Crowded { .. }]));
        assert!(!last.changed);
    }

    #[test]
    fn the_message_names_an_owner_only_in_the_same_namespace() {
        let owner = |namespace: &str| Claimant {
            namespace: namespace.into(),
            name: "payments-a".into(),
            uid: "u".into(),
            since: to_time(now()),
        };
        let same = refusal_message(
            "team",
            &target(),
            &[Refusal::Owned {
                key: "rate".into(),
                owner: owner("team"),
                position: 1,
            }],
        );
        assert!(same.contains("ConfigRollout team/payments-a"), "{same}");
        let other = refusal_message(
            "team",
            &target(),
            &[Refusal::Owned {
                key: "rate".into(),
                owner: owner("team-b"),
                position: 1,
            }],
        );
        assert!(
            !other.contains("payments-a") && !other.contains("team-b"),
            "{other}"
        );
        assert!(other.contains("another namespace"), "{other}");
    }
}
