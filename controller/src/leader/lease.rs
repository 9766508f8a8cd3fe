//! The pure side of leader election: what to do with the Lease as last seen, and until
//! when our own leadership holds, on the clocks passed in.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::LeaderError;

/// The Lease name the controller uses unless told otherwise.
pub const DEFAULT_LEASE_NAME: &str = "configrollout-controller";

/// Default Lease duration (client-go's default).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);

/// Where the Lease is, who we are, and the timings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// Our `holderIdentity`; unique per process (see [`default_identity`]).
    pub identity: String,
    /// `leaseDurationSeconds` written into the Lease: how long a standby waits, after the
    /// record stops changing, before taking over. Whole seconds.
    pub lease_duration: Duration,
    /// How often the holder renews.
    pub renew_interval: Duration,
    /// How long after the last successful renewal the holder stops leading if it cannot
    /// renew. Must be below `lease_duration`.
    pub renew_deadline: Duration,
    /// How often a standby polls, and how soon a failed renewal is retried.
    pub retry_period: Duration,
    /// Timeout of each API call.
    pub call_timeout: Duration,
}

impl LeaseConfig {
    /// Defaults derived from [`DEFAULT_LEASE_DURATION`]; see [`LeaseConfig::with_lease_duration`].
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        let config = LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_interval: Duration::ZERO,
            renew_deadline: Duration::ZERO,
            retry_period: Duration::ZERO,
            call_timeout: Duration::ZERO,
        };
        config.with_lease_duration(DEFAULT_LEASE_DURATION)
    }

    /// Sets the Lease duration (rounded down to whole seconds, at least one) and derives the
    /// rest from it: renew every third, give up leading after two thirds, poll and retry
    /// every fifth, and let each call take at most a sixth.
    pub fn with_lease_duration(mut self, lease_duration: Duration) -> Self {
        let lease_duration = Duration::from_secs(lease_duration.as_secs().max(1));
        self.lease_duration = lease_duration;
        self.renew_interval = lease_duration / 3;
        self.renew_deadline = lease_duration * 2 / 3;
        self.retry_period = lease_duration / 5;
        self.call_timeout = lease_duration / 6;
        self
    }

    /// Checks the orderings the safety argument relies on.
    pub fn validate(&self) -> Result<(), LeaderError> {
        if self.identity.is_empty() {
            return Err(LeaderError::EmptyIdentity);
        }
        if self.lease_duration.as_secs() < 1 || self.lease_duration.subsec_nanos() != 0 {
            return Err(LeaderError::InvalidTiming(
                "lease_duration must be a whole number of seconds, at least one",
            ));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(LeaderError::InvalidTiming(
                "renew_deadline must be shorter than lease_duration",
            ));
        }
        if self.renew_interval.is_zero() || self.renew_interval >= self.renew_deadline {
            return Err(LeaderError::InvalidTiming(
                "renew_interval must be positive and shorter than renew_deadline",
            ));
        }
        if self.retry_period.is_zero() || self.call_timeout.is_zero() {
            return Err(LeaderError::InvalidTiming(
                "retry_period and call_timeout must be positive",
            ));
        }
        if self.call_timeout * 2 > self.renew_deadline {
            return Err(LeaderError::InvalidTiming(
                "a renewal (read and write) must fit in renew_deadline",
            ));
        }
        Ok(())
    }

    fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// `POD_NAME` when set (the Deployment passes it through the downward API), otherwise
/// `<hostname>-<pid>`, so two processes on one host never share an identity.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.trim().is_empty()
    {
        return pod.trim().to_owned();
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|host| !host.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}-{}", std::process::id())
}

/// The Lease record as this process last saw it, and since when (our monotonic clock) it
/// has been unchanged.
#[derive(Clone, Debug, PartialEq)]
pub struct Sighting {
    spec: LeaseSpec,
    since: Instant,
}

impl Sighting {
    /// Records `lease` as seen at `now`; an unchanged record keeps the earlier `since`.
    pub fn observe(previous: Option<&Sighting>, lease: &Lease, now: Instant) -> Sighting {
        let spec = lease.spec.clone().unwrap_or_default();
        match previous {
            Some(previous) if previous.spec == spec => previous.clone(),
            _ => Sighting { spec, since: now },
        }
    }

    /// Whether the record has gone unchanged for its `leaseDurationSeconds` (falling back to
    /// `fallback` when the record does not say).
    fn expired(&self, now: Instant, fallback: Duration) -> bool {
        self.remaining(now, fallback).is_zero()
    }

    fn remaining(&self, now: Instant, fallback: Duration) -> Duration {
        let duration = self
            .spec
            .lease_duration_seconds
            .and_then(|seconds| u64::try_from(seconds).ok())
            .filter(|seconds| *seconds > 0)
            .map_or(fallback, Duration::from_secs);
        duration.saturating_sub(now.saturating_duration_since(self.since))
    }
}

/// What to do with the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseAction {
    /// There is no Lease: create it with us as holder.
    Create,
    /// We hold it: renew it.
    Renew,
    /// It is free or expired: take it over (`leaseTransitions` + 1).
    Acquire,
    /// Someone else holds it and it has not expired by our observation.
    Wait {
        /// The current holder.
        holder: String,
        /// How long until it would expire if it stays unchanged.
        expires_in: Duration,
    },
}

/// Decides what to do with `lease` (absent = not created yet). `sighting` must be the result
/// of [`Sighting::observe`] for this same `lease` at `now`.
pub fn decide(
    lease: Option<&Lease>,
    sighting: Option<&Sighting>,
    config: &LeaseConfig,
    now: Instant,
) -> LeaseAction {
    let Some(lease) = lease else {
        return LeaseAction::Create;
    };
    let holder = lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .filter(|holder| !holder.is_empty());
    match holder {
        None => LeaseAction::Acquire,
        Some(holder) if holder == config.identity => LeaseAction::Renew,
        Some(holder) => {
            let current = sighting.filter(|sighting| Some(&sighting.spec) == lease.spec.as_ref());
            match current {
                Some(sighting) if sighting.expired(now, config.lease_duration) => {
                    LeaseAction::Acquire
                }
                Some(sighting) => LeaseAction::Wait {
                    holder: holder.to_owned(),
                    expires_in: sighting.remaining(now, config.lease_duration),
                },
                // Never seen this record before: it is fresh for us, however old its
                // renewTime claims to be.
                None => LeaseAction::Wait {
                    holder: holder.to_owned(),
                    expires_in: config.lease_duration,
                },
            }
        }
    }
}

/// The Lease to write for `action` (`Create`, `Renew` or `Acquire`; `None` for `Wait`), at
/// wall-clock time `wall_now`. The result keeps `lease`'s `resourceVersion`, so the write
/// is a compare-and-swap.
pub fn claim(
    lease: Option<&Lease>,
    action: &LeaseAction,
    config: &LeaseConfig,
    wall_now: Timestamp,
) -> Option<Lease> {
    let now = MicroTime(wall_now);
    match (action, lease) {
        (LeaseAction::Wait { .. }, _) => None,
        (LeaseAction::Create, _) | (_, None) => Some(Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(config.lease_duration_seconds()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }),
        (LeaseAction::Renew, Some(lease)) => {
            let mut lease = lease.clone();
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = Some(config.identity.clone());
            spec.lease_duration_seconds = Some(config.lease_duration_seconds());
            if spec.acquire_time.is_none() {
                spec.acquire_time = Some(now.clone());
            }
            spec.renew_time = Some(now);
            Some(lease)
        }
        (LeaseAction::Acquire, Some(lease)) => {
            let mut lease = lease.clone();
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = Some(config.identity.clone());
            spec.lease_duration_seconds = Some(config.lease_duration_seconds());
            spec.acquire_time = Some(now.clone());
            spec.renew_time = Some(now);
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            Some(lease)
        }
    }
}

/// The Lease to write to hand it over at once: no holder, so a standby acquires it on its
/// next poll instead of waiting out the duration. `None` when we do not hold it.
pub fn release(lease: &Lease, config: &LeaseConfig, wall_now: Timestamp) -> Option<Lease> {
    let spec = lease.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return None;
    }
    let mut lease = lease.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(wall_now));
    Some(lease)
}

/// Our leadership, measured on the monotonic clock from the moment the last successful
/// renewal was *sent* (others can only have seen it later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tenure {
    renewal_sent: Instant,
}

impl Tenure {
    /// Leadership confirmed by a renewal sent at `renewal_sent`.
    pub fn renewed(renewal_sent: Instant) -> Self {
        Tenure { renewal_sent }
    }

    /// When we must stop leading unless renewed again.
    pub fn deadline(&self, config: &LeaseConfig) -> Instant {
        self.renewal_sent + config.renew_deadline
    }

    /// When the next renewal is due (every `renew_interval`).
    pub fn renewal_due_at(&self, config: &LeaseConfig) -> Instant {
        self.renewal_sent + config.renew_interval
    }

    /// Whether the next renewal is due at `now`.
    pub fn renewal_due(&self, now: Instant, config: &LeaseConfig) -> bool {
        now >= self.renewal_due_at(config)
    }

    /// Whether we may still act as leader at `now`.
    pub fn leading_at(&self, now: Instant, config: &LeaseConfig) -> bool {
        now < self.deadline(config)
    }
}

#[cfg(test)]
mod tests;
