//! Go's `time.ParseDuration` grammar, for `Duration` keys: what the programs reading these
//! ConfigMaps accept (`300ms`, `1m30s`, `1.5h`, `-2s`, `0`).
//!
//! `configrollout_api::parse_duration` reads a narrower grammar on purpose (no fraction,
//! sign, `ns`/`us`, bare `0`: a rollout's own timings), so it is not reused here.

/// Nanoseconds per unit, longest spelling first where one is a prefix of another.
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Most fraction digits read; later ones cannot change a result held in nanoseconds by
/// more than a nanosecond, and Go drops them too.
const MAX_FRACTION_DIGITS: u32 = 18;

const MALFORMED: &str = "not a Duration (e.g. `300ms`, `1m30s`, `1.5h`; units ns, us, ms, s, m, h)";
const OUT_OF_RANGE: &str = "a Duration out of range (about 292 years)";

/// The duration `text` spells, in seconds (negative for a leading `-`), or why it does not
/// spell one. Like Go, the total must fit in 64-bit nanoseconds.
pub(super) fn parse_seconds(text: &str) -> Result<f64, &'static str> {
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, text.get(1..).unwrap_or_default()),
        Some(b'+') => (false, text.get(1..).unwrap_or_default()),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0.0);
    }
    if rest.is_empty() {
        return Err(MALFORMED);
    }
    let limit = u128::from(i64::MAX.unsigned_abs()).saturating_add(u128::from(negative));
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (whole, after_whole) = split_digits(rest);
        let (fraction, after_fraction) = match after_whole.strip_prefix('.') {
            Some(after_dot) => split_digits(after_dot),
            None => ("", after_whole),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(MALFORMED);
        }
        let Some(&(unit, unit_ns)) = UNITS
            .iter()
            .find(|(unit, _)| after_fraction.starts_with(unit))
        else {
            return Err(MALFORMED);
        };
        rest = after_fraction.get(unit.len()..).unwrap_or_default();
        let group = group_nanos(whole, fraction, unit_ns).ok_or(OUT_OF_RANGE)?;
        total = total
            .checked_add(group)
            .filter(|total| *total <= limit)
            .ok_or(OUT_OF_RANGE)?;
    }
    // At most 2^63 nanoseconds: exact enough as an f64 number of seconds.
    #[allow(clippy::cast_precision_loss)]
    let seconds = total as f64 / 1e9;
    Ok(if negative { -seconds } else { seconds })
}

fn split_digits(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    (
        text.get(..end).unwrap_or_default(),
        text.get(end..).unwrap_or_default(),
    )
}

/// `whole.fraction` units in nanoseconds (fraction truncated), `None` past `u128`.
fn group_nanos(whole: &str, fraction: &str, unit_ns: u128) -> Option<u128> {
    let mut whole_value: u128 = 0;
    for digit in whole.bytes() {
        whole_value = whole_value
            .checked_mul(10)?
            .checked_add(u128::from(digit.checked_sub(b'0')?))?;
        // Past 2^64 units the total is out of range whatever the unit: stop early.
        if whole_value > u128::from(u64::MAX) {
            return None;
        }
    }
    let mut fraction_value: u128 = 0;
    let mut scale: u128 = 1;
    for digit in fraction.bytes().take(MAX_FRACTION_DIGITS as usize) {
        fraction_value = fraction_value
            .checked_mul(10)?
            .checked_add(u128::from(digit.checked_sub(b'0')?))?;
        scale = scale.checked_mul(10)?;
    }
    let fraction_ns = fraction_value.checked_mul(unit_ns)?.checked_div(scale)?;
    whole_value.checked_mul(unit_ns)?.checked_add(fraction_ns)
}
