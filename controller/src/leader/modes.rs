//! Single and sharded replicas of one controller never write together. They meet during a
//! switch between modes (a Helm upgrade from one replica to shards, or a rollback of it),
//! when old and new pods run side by side, each mode with its own Leases: the single
//! Lease (`<lease>`) and the shard Leases (`<lease>-shard-<n>`). Fewer shards wins:
//!
//! - a single-mode replica claims its Lease as always, but leads only once no shard
//!   Lease is held by someone else (released, or expired by its own observation);
//! - a sharded replica takes and keeps no shard while the single Lease is held by someone
//!   else: it releases the shards it holds and waits.
//!
//! So the single replica waits for the shards to be handed back, and the sharded ones hand
//! them back as soon as they see its claim: at no moment do both lead. Expiry is judged as
//! everywhere ([`super::lease::decide`]): by this process's own sightings, never by
//! comparing another node's `renewTime` with our clock.

use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::Instant;

use super::lease::{LeaseAction, LeaseConfig, Sighting, decide};

/// Whether `lease` is held by someone other than `config.identity` and has not expired
/// by our observation (`sighting` must be that of this same record).
pub fn held_by_another(
    lease: Option<&Lease>,
    sighting: Option<&Sighting>,
    config: &LeaseConfig,
    now: Instant,
) -> bool {
    matches!(
        decide(lease, sighting, config, now),
        LeaseAction::Wait { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use std::time::Duration;

    fn lease(holder: Option<&str>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_lease_counts_as_held_by_another_until_it_expires_by_our_sighting() {
        let config = LeaseConfig::new("ns", "configrollout-controller", "me");
        let start = Instant::now();
        let theirs = lease(Some("other"));
        let seen = Sighting::observe(None, &theirs, start);
        assert!(held_by_another(Some(&theirs), Some(&seen), &config, start));
        // Unchanged for longer than its duration: expired, no longer a writer.
        let later = start + Duration::from_secs(16);
        let still = Sighting::observe(Some(&seen), &theirs, later);
        assert!(!held_by_another(
            Some(&theirs),
            Some(&still),
            &config,
            later
        ));
        // Ours, released, or absent: nobody else writes.
        let mine = lease(Some("me"));
        assert!(!held_by_another(Some(&mine), None, &config, start));
        let released = lease(None);
        assert!(!held_by_another(Some(&released), None, &config, start));
        assert!(!held_by_another(None, None, &config, start));
    }
}
