//! Time conversions between the engine's `DateTime<Utc>`, the API's `Time` and spec
//! duration strings.

use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use configrollout_api::{LONGEST_CEILING, parse_duration};

/// `DateTime<Utc>` as an API `Time`. Out-of-range instants (beyond year 9999) cannot be
/// produced by a real clock; they clamp to the jiff range.
pub fn to_time(at: DateTime<Utc>) -> Time {
    let timestamp = Timestamp::new(at.timestamp(), at.timestamp_subsec_nanos() as i32).unwrap_or(
        if at.timestamp() < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        },
    );
    Time(timestamp)
}

/// An API `Time` as `DateTime<Utc>`.
pub fn from_time(time: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(time.0.as_second(), time.0.subsec_nanosecond().max(0) as u32)
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// A spec duration as a `TimeDelta`; `None` when unparsable or longer than any duration
/// field may be ([`LONGEST_CEILING`]). `validate` refuses such a spec before the rules
/// run; the bound holds here too because some readers (`gates_due`) run before it.
pub fn spec_duration(text: &str) -> Option<TimeDelta> {
    parse_duration(text)
        .ok()
        .filter(|duration| LONGEST_CEILING.admits(*duration))
        .and_then(|duration| TimeDelta::from_std(duration).ok())
}

/// `at` moved by `by`, saturating at the ends of time rather than panicking: every time
/// the engine computes is a time from a status or a clock plus a duration from a spec,
/// and neither is trusted to keep the sum representable. A deadline that saturates is
/// one that never comes, which is what a duration that long asked for.
pub fn after(at: DateTime<Utc>, by: TimeDelta) -> DateTime<Utc> {
    at.checked_add_signed(by)
        .unwrap_or(if by < TimeDelta::zero() {
            DateTime::<Utc>::MIN_UTC
        } else {
            DateTime::<Utc>::MAX_UTC
        })
}

/// How long until `at`, zero if it is past.
pub fn until(now: DateTime<Utc>, at: DateTime<Utc>) -> std::time::Duration {
    at.signed_duration_since(now)
        .to_std()
        .unwrap_or(std::time::Duration::ZERO)
}
