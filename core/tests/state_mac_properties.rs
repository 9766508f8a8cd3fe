//! A region's companion state is authenticated: whoever may edit ConfigMaps in a region
//! cannot change one bit of a signed state, move it to another target, or sign it with a
//! key of their own, and have the controller read it. Issue 42's forgeries (a same-stamp
//! value swap, a far-future horizon) are single edits of the encoding, so they are among
//! the cases here.

use configrollout_core::crdt::{
    Delta, DigestKey, Entry, Replica, Stamp, WriterId, encode, state_mac, state_mac_matches,
};
use proptest::prelude::*;

const NAMESPACE: &str = "app";
const NAME: &str = "limits";

fn key() -> DigestKey {
    DigestKey::new(b"state-mac-property-key-0123456789").unwrap()
}

fn any_replica() -> impl Strategy<Value = Replica> {
    let writers = ["rollout:team/api", "override:alice"];
    prop::collection::vec(
        (
            "[a-d]{1,3}",
            prop::option::of("[ -~]{0,12}"),
            0u64..1_000_000,
            0u32..3,
            0..writers.len(),
        ),
        1..12,
    )
    .prop_map(move |entries| {
        let mut delta = Delta::new();
        for (name, value, wall, logical, writer) in entries {
            let stamp = Stamp::new(wall, logical, WriterId::parse(writers[writer]).unwrap());
            let entry = match value {
                Some(value) => Entry::live(value.as_str(), stamp),
                None => Entry::tombstone(stamp),
            };
            delta.insert(name.as_str(), entry);
        }
        let mut replica = Replica::new();
        replica.apply(&delta);
        replica
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any one bit of the encoded state changed (that still leaves text a ConfigMap can
    /// hold) fails the MAC the controller wrote beside it.
    #[test]
    fn any_changed_bit_is_refused(replica in any_replica(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let encoded = encode(&replica).unwrap();
        let mac = state_mac(&key(), NAMESPACE, NAME, &encoded);
        prop_assert!(state_mac_matches(&key(), NAMESPACE, NAME, &encoded, &mac));
        let mut bytes = encoded.clone().into_bytes();
        let index = at.index(bytes.len());
        bytes[index] ^= 1 << bit;
        if let Ok(changed) = String::from_utf8(bytes) {
            prop_assert!(!state_mac_matches(&key(), NAMESPACE, NAME, &changed, &mac));
        }
    }

    /// A signed state copied to another target (another name, or the same name in
    /// another namespace) does not verify there.
    #[test]
    fn a_state_moved_to_another_target_is_refused(replica in any_replica(), other in "[a-z]{1,8}") {
        let encoded = encode(&replica).unwrap();
        let mac = state_mac(&key(), NAMESPACE, NAME, &encoded);
        prop_assume!(other != NAME && other != NAMESPACE);
        prop_assert!(!state_mac_matches(&key(), NAMESPACE, &other, &encoded, &mac));
        prop_assert!(!state_mac_matches(&key(), &other, NAME, &encoded, &mac));
    }

    /// A state signed with any other key, and any MAC that is not hex of the right
    /// length, is refused.
    #[test]
    fn another_key_or_a_malformed_mac_is_refused(replica in any_replica(), forged in "[0-9a-f]{0,70}") {
        let encoded = encode(&replica).unwrap();
        let theirs = DigestKey::new(b"a-key-someone-else-chose-0123456789").unwrap();
        let mac = state_mac(&theirs, NAMESPACE, NAME, &encoded);
        prop_assert!(!state_mac_matches(&key(), NAMESPACE, NAME, &encoded, &mac));
        prop_assert!(!state_mac_matches(&key(), NAMESPACE, NAME, &encoded, &forged));
    }
}

/// After a rotation, states signed with the key it replaced still verify (until their
/// next write signs them with the new one); the new key alone refuses them.
#[test]
fn a_rotated_key_still_reads_states_signed_before_the_rotation() {
    let old = key();
    let new = DigestKey::new(b"the-key-after-rotation-0123456789").unwrap();
    let encoded = encode(&Replica::new()).unwrap();
    let mac = state_mac(&old, NAMESPACE, NAME, &encoded);
    assert!(!state_mac_matches(&new, NAMESPACE, NAME, &encoded, &mac));
    let rotated = new.clone().with_previous(&old);
    assert!(state_mac_matches(&rotated, NAMESPACE, NAME, &encoded, &mac));
    assert_ne!(old.id(), new.id(), "a key id tells keys apart");
    assert_eq!(rotated.id(), new.id(), "the key id is the current key's");
}
