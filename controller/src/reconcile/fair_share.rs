//! Reconcile capacity shared fairly between namespaces.
//!
//! The controller runs at most [`super::MAX_CONCURRENT_RECONCILES`] reconciles at once,
//! and the runtime hands free slots out in the order rollouts became due. Without a
//! share, a namespace with hundreds of rollouts that keep sampling gates takes every slot
//! and another namespace's single rollout waits behind all of them. With it, a namespace
//! runs at most its share of the slots at once: the capacity divided between the
//! namespaces that asked for a reconcile lately, never less than [`MIN_SHARE`]. A
//! reconcile over its namespace's share is put back ([`DEFERRED_REQUEUE`]) without any
//! read or write, which frees its slot in microseconds for the next due rollout.
//!
//! One busy namespace alone keeps the whole capacity (a platform of one team, or 10,000
//! rollouts in one namespace, loses nothing); the share shrinks as soon as another
//! namespace asks. Memory is one entry per namespace seen within [`ACTIVE_WINDOW`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long after its last request for a reconcile a namespace still counts as asking.
/// Longer than a busy rollout's wait between reconciles, so that a namespace whose
/// rollouts sample every second keeps its claim between samples.
pub const ACTIVE_WINDOW: Duration = Duration::from_secs(10);
/// The fewest reconciles a namespace may always run at once, however many ask.
pub const MIN_SHARE: usize = 2;
/// When a reconcile put back for its namespace's share is tried again.
pub const DEFERRED_REQUEUE: Duration = Duration::from_millis(500);

/// The slots in flight per namespace, and which namespaces asked lately.
#[derive(Debug)]
pub struct NamespaceShares {
    capacity: usize,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    in_flight: HashMap<String, usize>,
    asked: HashMap<String, Instant>,
    pruned: Option<Instant>,
}

/// A slot held by one reconcile of `namespace`; given back when dropped (a panic that
/// unwinds through the reconcile included).
#[derive(Debug)]
pub struct Slot {
    namespace: String,
    state: Arc<Mutex<State>>,
}

impl NamespaceShares {
    /// Shares of `capacity` reconciles at once.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            state: Arc::default(),
        }
    }

    /// A slot for a reconcile of `namespace` at `now`, or `None` when the namespace
    /// already runs its share. Either way the namespace counts as asking.
    pub fn try_enter(&self, namespace: &str, now: Instant) -> Option<Slot> {
        let mut state = lock(&self.state);
        state.prune(now);
        // The namespace's name is copied only the first time it asks or runs.
        match state.asked.get_mut(namespace) {
            Some(asked) => *asked = now,
            None => {
                state.asked.insert(namespace.to_owned(), now);
            }
        }
        let asking = state.asked.len().max(1);
        let share = (self.capacity / asking).max(MIN_SHARE);
        match state.in_flight.get_mut(namespace) {
            Some(running) if *running >= share => return None,
            Some(running) => *running = running.saturating_add(1),
            None => {
                state.in_flight.insert(namespace.to_owned(), 1);
            }
        }
        Some(Slot {
            namespace: namespace.to_owned(),
            state: Arc::clone(&self.state),
        })
    }

    /// Reconciles of `namespace` running now.
    #[cfg(test)]
    fn running(&self, namespace: &str) -> usize {
        lock(&self.state)
            .in_flight
            .get(namespace)
            .copied()
            .unwrap_or(0)
    }
}

impl State {
    /// Forgets namespaces that have not asked within the window and run nothing; at most
    /// once a second, so that a reconcile costs a map lookup, not a scan.
    fn prune(&mut self, now: Instant) {
        if self
            .pruned
            .is_some_and(|pruned| now.saturating_duration_since(pruned) < Duration::from_secs(1))
        {
            return;
        }
        self.pruned = Some(now);
        let in_flight = &self.in_flight;
        self.asked.retain(|namespace, asked| {
            now.saturating_duration_since(*asked) < ACTIVE_WINDOW
                || in_flight.contains_key(namespace)
        });
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if let Some(running) = state.in_flight.get_mut(&self.namespace) {
            *running = running.saturating_sub(1);
            if *running == 0 {
                state.in_flight.remove(&self.namespace);
            }
        }
    }
}

/// The state even after a panic elsewhere poisoned the lock: its counts are updated in
/// one step each, so they are whole.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(shares: &NamespaceShares, namespace: &str, now: Instant) -> Vec<Slot> {
        std::iter::from_fn(|| shares.try_enter(namespace, now)).collect()
    }

    #[test]
    fn one_namespace_alone_keeps_the_whole_capacity() {
        let shares = NamespaceShares::new(32);
        let now = Instant::now();
        assert_eq!(fill(&shares, "busy", now).len(), 32);
    }

    #[test]
    fn a_namespace_that_asks_is_not_starved_by_a_busy_one() {
        let shares = NamespaceShares::new(32);
        let now = Instant::now();
        let mut busy = fill(&shares, "busy", now);
        assert_eq!(busy.len(), 32);
        // The quiet namespace asks: it gets in as soon as the runtime has a slot (one
        // of the busy reconciles ends), and the busy one may no longer take it back.
        let quiet = shares.try_enter("quiet", now);
        assert!(quiet.is_some(), "under its share: admitted");
        drop(busy.drain(..20).collect::<Vec<_>>());
        assert_eq!(shares.running("busy"), 12);
        let again = fill(&shares, "busy", now);
        assert_eq!(again.len(), 4, "busy is held to half the capacity");
        assert_eq!(shares.running("busy"), 16);
        let quiet_more = fill(&shares, "quiet", now);
        assert_eq!(quiet_more.len(), 15, "quiet may use its half too");
    }

    #[test]
    fn a_slot_is_given_back_when_dropped_and_idle_namespaces_are_forgotten() {
        let shares = NamespaceShares::new(4);
        let start = Instant::now();
        let slot = shares.try_enter("team-a", start);
        assert_eq!(shares.running("team-a"), 1);
        drop(slot);
        assert_eq!(shares.running("team-a"), 0);
        // team-b asked once, long ago: team-a has the whole capacity again.
        drop(shares.try_enter("team-b", start));
        let later = start + ACTIVE_WINDOW + Duration::from_secs(1);
        assert_eq!(fill(&shares, "team-a", later).len(), 4);
    }

    #[test]
    fn every_namespace_keeps_a_floor_however_many_ask() {
        let shares = NamespaceShares::new(8);
        let now = Instant::now();
        let _held: Vec<Slot> = (0..20)
            .flat_map(|n| fill(&shares, &format!("ns-{n}"), now))
            .collect();
        assert!((0..20).all(|n| shares.running(&format!("ns-{n}")) >= 1));
        assert_eq!(shares.running("ns-19"), MIN_SHARE);
    }
}
