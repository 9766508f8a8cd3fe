//! Hybrid logical clock (Kulkarni, Demirbas et al., "Logical Physical Clocks", 2014).
//!
//! Stamps follow physical time closely, never go backwards on one node, and are always
//! after every stamp the node has observed, so "declared later" means "wins" even when
//! physical clocks disagree a little. A remote stamp too far in the future is refused
//! rather than adopted: otherwise one broken clock would win every later write.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{ClockError, Stamp, WriterId};

/// A source of physical time in milliseconds since the Unix epoch.
pub trait PhysicalClock {
    /// Current physical time.
    fn now_ms(&self) -> u64;
}

impl<C: PhysicalClock + ?Sized> PhysicalClock for &C {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

/// The operating system's real-time clock: the only place in `crdt` that reads it.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl PhysicalClock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock set before 1970 reads as 0; the HLC still moves forward logically.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// The system clock read a fixed number of milliseconds behind: a replica on a node whose
/// clock lags. Production runs it at 0; the lab sets a lag to show that regions converge
/// whichever of two clocks stamped a write.
#[derive(Debug, Clone, Copy, Default)]
pub struct LaggingClock {
    behind_ms: u64,
}

impl LaggingClock {
    /// The system clock, `behind_ms` behind.
    pub fn behind(behind_ms: u64) -> Self {
        Self { behind_ms }
    }
}

impl PhysicalClock for LaggingClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms().saturating_sub(self.behind_ms)
    }
}

/// A clock that reads whatever it was last set to. Clones share the reading, so a test can
/// move time under an [`Hlc`] that owns a clone; pure callers that are handed "now" (the
/// rollout engine) use it the same way.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(now_ms)))
    }

    /// Sets the reading (it may go backwards, like a real clock being corrected).
    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::Relaxed);
    }

    /// Moves the reading forward by `delta_ms`.
    pub fn advance(&self, delta_ms: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_add(delta_ms))
            });
    }
}

impl PhysicalClock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A hybrid logical clock for one writer.
///
/// `now` is the send/local-event rule and `observe` the receive rule of the paper. Both
/// return a stamp strictly greater than every stamp this clock returned or observed before
/// (until `wall_ms` saturates at `u64::MAX`, some 584 million years from now). A logical
/// counter that would overflow carries into `wall_ms`.
///
/// After a restart, `observe` the last stamp the writer issued (kept in status) before
/// issuing new ones, so a physical clock that went backwards cannot reissue old stamps.
#[derive(Debug, Clone)]
pub struct Hlc<C: PhysicalClock = SystemClock> {
    writer: WriterId,
    max_drift_ms: u64,
    clock: C,
    wall_ms: u64,
    logical: u32,
}

impl Hlc<SystemClock> {
    /// A clock for `writer` on the system clock, refusing remote stamps more than
    /// `max_drift_ms` ahead of it.
    pub fn new(writer: WriterId, max_drift_ms: u64) -> Self {
        Self::with_clock(writer, max_drift_ms, SystemClock)
    }
}

impl<C: PhysicalClock> Hlc<C> {
    /// A clock for `writer` reading physical time from `clock`.
    pub fn with_clock(writer: WriterId, max_drift_ms: u64, clock: C) -> Self {
        Self {
            writer,
            max_drift_ms,
            clock,
            wall_ms: 0,
            logical: 0,
        }
    }

    /// The writer this clock stamps for.
    pub fn writer(&self) -> &WriterId {
        &self.writer
    }

    /// The drift bound for observed stamps.
    pub fn max_drift_ms(&self) -> u64 {
        self.max_drift_ms
    }

    /// A stamp for a local event (declaring a revision, writing an override).
    pub fn now(&mut self) -> Stamp {
        let physical = self.clock.now_ms();
        if physical > self.wall_ms {
            self.set(physical, 0);
        } else {
            self.set_after(self.wall_ms, self.logical);
        }
        self.stamp()
    }

    /// Observes a stamp received from elsewhere and returns a local stamp after it.
    ///
    /// Refuses, leaving the clock unchanged, a stamp whose wall time is more than
    /// `max_drift_ms` ahead of local physical time.
    pub fn observe(&mut self, remote: &Stamp) -> Result<Stamp, ClockError> {
        let physical = self.clock.now_ms();
        if remote.wall_ms > physical.saturating_add(self.max_drift_ms) {
            return Err(ClockError::TooFarAhead {
                writer: remote.writer.clone(),
                ahead_ms: remote.wall_ms.saturating_sub(physical),
                local_ms: physical,
                max_drift_ms: self.max_drift_ms,
            });
        }
        let wall = self.wall_ms.max(remote.wall_ms).max(physical);
        let local_wall = self.wall_ms;
        match (wall == local_wall, wall == remote.wall_ms) {
            (true, true) => self.set_after(wall, self.logical.max(remote.logical)),
            (true, false) => self.set_after(wall, self.logical),
            (false, true) => self.set_after(wall, remote.logical),
            (false, false) => self.set(wall, 0),
        }
        Ok(self.stamp())
    }

    fn stamp(&self) -> Stamp {
        Stamp::new(self.wall_ms, self.logical, self.writer.clone())
    }

    fn set(&mut self, wall_ms: u64, logical: u32) {
        self.wall_ms = wall_ms;
        self.logical = logical;
    }

    /// The next reading after `(wall_ms, logical)`: counter + 1, carrying into the wall
    /// time on overflow so the order is kept.
    fn set_after(&mut self, wall_ms: u64, logical: u32) {
        match logical.checked_add(1) {
            Some(next) => self.set(wall_ms, next),
            None => self.set(wall_ms.saturating_add(1), 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hlc(user: &str, clock: &ManualClock) -> Hlc<ManualClock> {
        Hlc::with_clock(WriterId::override_by(user).unwrap(), 1_000, clock.clone())
    }

    #[test]
    fn follows_physical_time_and_counts_within_a_millisecond() {
        let clock = ManualClock::new(5_000);
        let mut hlc = hlc("alice", &clock);
        let first = hlc.now();
        assert_eq!((first.wall_ms, first.logical), (5_000, 0));
        let second = hlc.now();
        assert_eq!((second.wall_ms, second.logical), (5_000, 1));
        clock.advance(1);
        let third = hlc.now();
        assert_eq!((third.wall_ms, third.logical), (5_001, 0));
    }

    #[test]
    fn keeps_increasing_when_the_physical_clock_goes_back() {
        let clock = ManualClock::new(5_000);
        let mut hlc = hlc("alice", &clock);
        let before = hlc.now();
        clock.set(1_000);
        let after = hlc.now();
        assert!(after > before);
        assert_eq!(after.wall_ms, 5_000);
    }

    #[test]
    fn observed_stamps_are_followed_by_greater_local_stamps() {
        let clock = ManualClock::new(5_000);
        let mut hlc = hlc("zed", &clock);
        let remote = Stamp::new(5_500, 7, WriterId::override_by("alice").unwrap());
        let received = hlc.observe(&remote).unwrap();
        assert_eq!((received.wall_ms, received.logical), (5_500, 8));
        assert!(hlc.now() > remote);
    }

    #[test]
    fn refuses_a_stamp_beyond_the_drift_bound_without_moving() {
        let clock = ManualClock::new(5_000);
        let mut hlc = hlc("alice", &clock);
        let before = hlc.now();
        let remote = Stamp::new(6_001, 0, WriterId::override_by("bob").unwrap());
        let refused = hlc.observe(&remote);
        assert!(matches!(
            refused,
            Err(ClockError::TooFarAhead {
                ahead_ms: 1_001,
                max_drift_ms: 1_000,
                ..
            })
        ));
        let after = hlc.now();
        assert_eq!((after.wall_ms, after.logical), (5_000, before.logical + 1));
        let at_bound = Stamp::new(6_000, 0, WriterId::override_by("bob").unwrap());
        assert!(hlc.observe(&at_bound).is_ok());
    }

    #[test]
    fn logical_overflow_carries_into_wall_time() {
        let clock = ManualClock::new(10);
        let mut hlc = hlc("alice", &clock);
        let remote = Stamp::new(10, u32::MAX, WriterId::override_by("bob").unwrap());
        let next = hlc.observe(&remote).unwrap();
        assert!(next > remote);
        assert_eq!((next.wall_ms, next.logical), (11, 0));
    }

    #[test]
    fn system_clock_reads_a_plausible_time() {
        // After 2020-01-01 and before 2200-01-01.
        let now = SystemClock.now_ms();
        assert!((1_577_836_800_000..7_258_118_400_000).contains(&now));
    }
}
