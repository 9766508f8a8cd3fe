//! The pure side of sharding: which shard a rollout belongs to, what the Leases of a
//! sharded install are called, and the fair-share rule that decides which shards a
//! replica takes or hands over. No IO, no clock.
//!
//! With `--shards N` (N > 1) every shard has its own Lease, `<lease-name>-shard-<i>`, and
//! every replica announces itself with a member Lease, `<lease-name>-member-<hash>`,
//! renewed like a shard Lease. Both carry [`GROUP_LABEL`], so one list by label selector
//! shows a replica every shard's holder and every live member. With one shard nothing
//! here is used: the single Lease keeps its old name.

use std::collections::{BTreeMap, BTreeSet};

/// Most shards `--shards` accepts.
pub const MAX_SHARDS: u32 = 64;

/// Label on every shard and member Lease, valued with the base Lease name, so that one
/// list by label selector finds the whole group.
pub const GROUP_LABEL: &str = "configrollout.dev/lease-group";
/// Label telling shard Leases ([`ROLE_SHARD`]) from member Leases ([`ROLE_MEMBER`]).
pub const ROLE_LABEL: &str = "configrollout.dev/lease-role";
/// Label with the shard count of the replica that wrote the Lease: replicas started with
/// another `--shards` (a change of N in progress) are not counted as members, and while a
/// shard Lease of another N is held, no shard is taken (the two N map rollouts to shards
/// differently).
pub const SHARDS_LABEL: &str = "configrollout.dev/shards";
/// [`ROLE_LABEL`] of a shard Lease.
pub const ROLE_SHARD: &str = "shard";
/// [`ROLE_LABEL`] of a member Lease.
pub const ROLE_MEMBER: &str = "member";

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits: small, stable across releases and platforms (unlike std's hasher,
/// which is seeded), and good enough to spread names over at most 64 shards.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash = FNV_OFFSET;
    for byte in parts.iter().flat_map(|part| part.iter()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// The shard of the rollout `namespace/name` among `shards` (0 when there is one shard,
/// or none). Stable: the same name maps to the same shard in every release, so an
/// upgrade never moves rollouts between holders.
pub fn shard_of(namespace: &str, name: &str, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    let hash = fnv1a(&[namespace.as_bytes(), b"/", name.as_bytes()]);
    // The remainder is below `shards`, itself a u32.
    u32::try_from(hash % u64::from(shards)).unwrap_or(0)
}

/// The Lease of shard `shard`.
pub fn shard_lease_name(lease_name: &str, shard: u32) -> String {
    format!("{lease_name}-shard-{shard}")
}

/// The member Lease of the replica `identity`: a hash, so any identity gives a valid
/// object name of fixed length.
pub fn member_lease_name(lease_name: &str, identity: &str) -> String {
    format!("{lease_name}-member-{:016x}", fnv1a(&[identity.as_bytes()]))
}

/// What a replica should do with the shards, from what it last saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Shards it holds and should hand over (highest first).
    pub release: Vec<u32>,
    /// Free shards it should try to take, in order.
    pub acquire: Vec<u32>,
}

/// The fair-share rule. `holders[i]` is the live holder of shard `i` (`None`: no Lease,
/// no holder, or expired by our observation); `members` are the replicas whose member
/// Leases are live (`me` counts whatever the list says). With M members and N shards
/// every member ends with `floor(N/M)` or `ceil(N/M)` shards:
///
/// - over `ceil`: hand over the extra shards;
/// - some member below `floor`, no shard free, and I hold more than `floor`: if I hold
///   the most (ties: the smallest identity), hand one over, so a replica that joins gets
///   its share (while a shard is free, the needy take that one instead);
/// - below my allowance (`floor` while someone else is below `floor`, else `ceil`): take
///   free shards, starting at a place that depends on my identity, so replicas that
///   campaign at once seldom race for the same Lease.
///
/// Only one of the three applies per round, so a replica never releases and takes in one
/// go, and a replica that just handed over does not take the shard back while the one
/// it was meant for is still below `floor`.
pub fn plan(me: &str, members: &BTreeSet<String>, holders: &[Option<String>]) -> Plan {
    let shards = holders.len();
    let mut counts: BTreeMap<&str, usize> = members.iter().map(|m| (m.as_str(), 0)).collect();
    counts.entry(me).or_insert(0);
    let live = counts.len();
    for holder in holders.iter().flatten() {
        if let Some(count) = counts.get_mut(holder.as_str()) {
            *count += 1;
        }
    }
    let floor = shards / live;
    let ceil = shards.div_ceil(live);
    let mine: Vec<u32> = holders
        .iter()
        .enumerate()
        .filter(|(_, holder)| holder.as_deref() == Some(me))
        .filter_map(|(shard, _)| u32::try_from(shard).ok())
        .collect();

    if mine.len() > ceil {
        let release = mine.iter().rev().take(mine.len() - ceil).copied().collect();
        return Plan {
            release,
            acquire: Vec::new(),
        };
    }
    let someone_else_needs = counts
        .iter()
        .any(|(member, count)| *member != me && *count < floor);
    let free = holders.iter().filter(|holder| holder.is_none()).count();
    if someone_else_needs && free == 0 && mine.len() > floor {
        // The richest member hands one over; ties go to the smallest identity, so two
        // equally rich members do not both give one up.
        let richest = counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(member, _)| *member);
        if richest == Some(me) {
            return Plan {
                release: mine.iter().rev().take(1).copied().collect(),
                acquire: Vec::new(),
            };
        }
        return Plan::default();
    }
    let allowance = if someone_else_needs { floor } else { ceil };
    let wanted = allowance.saturating_sub(mine.len());
    if wanted == 0 || shards == 0 {
        return Plan::default();
    }
    let start = usize::try_from(fnv1a(&[me.as_bytes()]) % shards as u64).unwrap_or(0);
    let acquire = (0..shards)
        .map(|offset| (start + offset) % shards)
        .filter(|shard| holders[*shard].is_none())
        .take(wanted)
        .filter_map(|shard| u32::try_from(shard).ok())
        .collect();
    Plan {
        release: Vec::new(),
        acquire,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    fn holders(names: &[Option<&str>]) -> Vec<Option<String>> {
        names.iter().map(|name| name.map(str::to_owned)).collect()
    }

    #[test]
    fn the_shard_of_a_rollout_is_pinned() {
        // Pinned: a change of hash or input spelling would move live rollouts between
        // holders on upgrade. FNV-1a 64 of "namespace/name", modulo the shard count.
        assert_eq!(fnv1a(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(&[b"team", b"/", b"limits"]), fnv1a(&[b"team/limits"]));
        let pinned = [
            ("team", "limits", 4, 1),
            ("team", "flags", 4, 0),
            ("default", "app-config", 4, 3),
            ("shard-test", "r-000", 4, 2),
            ("shard-test", "r-001", 4, 1),
            ("team", "limits", 64, 1),
        ];
        for (namespace, name, shards, expected) in pinned {
            assert_eq!(
                shard_of(namespace, name, shards),
                expected,
                "{namespace}/{name} of {shards}"
            );
        }
    }

    #[test]
    fn one_shard_holds_everything_and_names_spread() {
        assert_eq!(shard_of("team", "limits", 1), 0);
        assert_eq!(shard_of("team", "limits", 0), 0);
        let mut per_shard = [0_u32; 4];
        for index in 0..400 {
            let shard = shard_of("team", &format!("rollout-{index}"), 4);
            per_shard[usize::try_from(shard).unwrap()] += 1;
        }
        for count in per_shard {
            assert!((60..=140).contains(&count), "{per_shard:?}");
        }
        // The namespace matters: "a/bc" and "ab/c" are different rollouts.
        assert_ne!(fnv1a(&[b"a", b"/", b"bc"]), fnv1a(&[b"ab", b"/", b"c"]));
    }

    #[test]
    fn lease_names_are_fixed_and_valid() {
        assert_eq!(
            shard_lease_name("configrollout-controller", 3),
            "configrollout-controller-shard-3"
        );
        let member = member_lease_name("configrollout-controller", "pod-7f9c/ünïcode");
        assert!(member.starts_with("configrollout-controller-member-"));
        assert_eq!(member.len(), "configrollout-controller-member-".len() + 16);
        assert!(
            member
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_ne!(
            member,
            member_lease_name("configrollout-controller", "pod-7f9d")
        );
    }

    #[test]
    fn a_lone_replica_takes_every_free_shard() {
        let plan = plan("a", &members(&["a"]), &holders(&[None, None, None, None]));
        assert!(plan.release.is_empty());
        let mut taken = plan.acquire.clone();
        taken.sort_unstable();
        assert_eq!(taken, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_replica_over_its_share_hands_the_extra_shards_over() {
        let all_a = holders(&[Some("a"), Some("a"), Some("a"), Some("a")]);
        let plan_a = plan("a", &members(&["a", "b"]), &all_a);
        assert_eq!(plan_a.release, vec![3, 2]);
        assert!(plan_a.acquire.is_empty());
        // b waits for them to be free; it never takes a held shard.
        assert_eq!(plan("b", &members(&["a", "b"]), &all_a), Plan::default());
        let released = holders(&[Some("a"), Some("a"), None, None]);
        let mut taken = plan("b", &members(&["a", "b"]), &released).acquire;
        taken.sort_unstable();
        assert_eq!(taken, vec![2, 3]);
        assert_eq!(plan("a", &members(&["a", "b"]), &released), Plan::default());
    }

    #[test]
    fn a_replica_that_joins_gets_a_shard_from_the_richest() {
        // 4 shards over 3 replicas: 2, 2, 0 is not fair; the richest (ties: smallest
        // identity) hands one over, the other keeps its two.
        let held = holders(&[Some("a"), Some("a"), Some("b"), Some("b")]);
        let all = members(&["a", "b", "c"]);
        assert_eq!(
            plan("a", &all, &held),
            Plan {
                release: vec![1],
                acquire: vec![]
            }
        );
        assert_eq!(plan("b", &all, &held), Plan::default());
        assert_eq!(plan("c", &all, &held), Plan::default());
        // Once it is free, the newcomer takes it and the giver does not take it back.
        let freed = holders(&[Some("a"), None, Some("b"), Some("b")]);
        assert_eq!(plan("a", &all, &freed), Plan::default());
        assert_eq!(plan("b", &all, &freed), Plan::default());
        assert_eq!(plan("c", &all, &freed).acquire, vec![1]);
        // 1, 2, 1 is fair: nobody moves.
        let fair = holders(&[Some("a"), Some("c"), Some("b"), Some("b")]);
        for me in ["a", "b", "c"] {
            assert_eq!(plan(me, &all, &fair), Plan::default(), "{me}");
        }
    }

    #[test]
    fn survivors_split_the_shards_of_a_replica_that_died() {
        // c held two shards and died: its Leases expired (free), its member Lease too.
        let held = holders(&[Some("a"), None, Some("b"), None]);
        let survivors = members(&["a", "b"]);
        let a = plan("a", &survivors, &held);
        let b = plan("b", &survivors, &held);
        assert_eq!(a.acquire.len(), 1);
        assert_eq!(b.acquire.len(), 1);
        // While c's member Lease still looks live, c counts with zero shards: nobody
        // takes more than floor, so the shards wait for the member count to settle.
        let still_three = members(&["a", "b", "c"]);
        assert_eq!(plan("a", &still_three, &held), Plan::default());
        // Held by a replica that is not a member (yet, or any more): not free.
        let by_stranger = holders(&[Some("a"), Some("x"), Some("b"), Some("x")]);
        assert_eq!(plan("a", &survivors, &by_stranger), Plan::default());
    }

    #[test]
    fn every_replica_converges_to_a_fair_split() {
        // Round by round, each replica applies its plan to the same picture; releases
        // and acquisitions take effect at once; no race (that is the Lease's job).
        for replicas in 1..=5_usize {
            for shards in 1..=9_usize {
                let names: Vec<String> = (0..replicas).map(|r| format!("r{r}")).collect();
                let all: BTreeSet<String> = names.iter().cloned().collect();
                let mut held: Vec<Option<String>> = vec![None; shards];
                for _ in 0..20 {
                    for me in &names {
                        let step = plan(me, &all, &held);
                        for shard in step.release {
                            held[usize::try_from(shard).unwrap()] = None;
                        }
                        for shard in step.acquire {
                            let slot = &mut held[usize::try_from(shard).unwrap()];
                            assert!(slot.is_none());
                            *slot = Some(me.clone());
                        }
                    }
                }
                let floor = shards / replicas;
                let ceil = shards.div_ceil(replicas);
                assert!(held.iter().all(Option::is_some), "{held:?}");
                for me in &names {
                    let count = held.iter().filter(|h| h.as_deref() == Some(me)).count();
                    assert!(
                        (floor..=ceil).contains(&count),
                        "{replicas} replicas, {shards} shards: {held:?}"
                    );
                }
                // And it stays there.
                for me in &names {
                    assert_eq!(plan(me, &all, &held), Plan::default());
                }
            }
        }
    }
}
