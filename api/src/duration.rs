//! Go-style durations (`500ms`, `30s`, `5m`, `1h30m`) as written in rollout specs.
//!
//! The apiserver checks the same grammar with the CEL regex [`DURATION_PATTERN`], so a
//! string the apiserver admits is one this parser reads, and the other way round.

use std::time::Duration;

/// The grammar of a duration field: one or more `<digits><unit>` groups, unit one of
/// `ms`, `s`, `m`, `h`. No sign, no fraction, no bare number. Anchored, RE2 syntax (the
/// apiserver's CEL `matches`).
pub const DURATION_PATTERN: &str = "^([0-9]+(ms|s|m|h))+$";

/// Longest duration string the schema admits; it bounds the CEL cost of matching
/// [`DURATION_PATTERN`] and no sensible duration comes near it.
pub const DURATION_MAX_LENGTH: u64 = 32;

/// The longest value a duration field of a spec may hold, in whole hours. Every duration a
/// tenant writes is later added to a time; the ceilings keep that sum (and every schedule
/// built from it) far inside what a clock can represent, and refuse at apply what no
/// rollout needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceiling {
    hours: u64,
}

impl Ceiling {
    const fn hours(hours: u64) -> Self {
        Ceiling { hours }
    }

    /// The ceiling in milliseconds.
    pub const fn millis(self) -> u64 {
        self.hours.saturating_mul(3_600_000)
    }

    /// The ceiling as a `Duration`.
    pub const fn duration(self) -> Duration {
        Duration::from_millis(self.millis())
    }

    /// The ceiling as written in a spec, e.g. `8760h`.
    pub fn text(self) -> String {
        format!("{}h", self.hours)
    }

    /// Whether `duration` is within the ceiling.
    pub fn admits(self, duration: Duration) -> bool {
        duration <= self.duration()
    }
}

/// Progress deadlines (`spec.progressDeadline`, `spec.stages[].progressDeadline`): a year.
/// A stage that has not passed in a year has failed; a longer deadline only hides it.
pub const DEADLINE_CEILING: Ceiling = Ceiling::hours(8760);
/// Bake times (`spec.stages[].pause`, `spec.strategy.contract.pause`): a year, for the
/// same reason.
pub const PAUSE_CEILING: Ceiling = Ceiling::hours(8760);
/// Time between two samples of a gate (`spec.gates[].interval`): a day. Samples further
/// apart than that do not watch a change; they poll a dashboard.
pub const GATE_INTERVAL_CEILING: Ceiling = Ceiling::hours(24);
/// Shortest time between two samples of a gate (`spec.gates[].interval`): a second. Each
/// sample is a Prometheus query and a status write through reconcile capacity every team
/// shares, and Prometheus scrapes no faster than that in most installations anyway. A
/// controller may raise it (`--min-gate-interval`).
pub const GATE_INTERVAL_FLOOR: Duration = Duration::from_secs(1);
/// Wait before a gate's first sample (`spec.gates[].initialDelay`): a day, as the interval.
pub const INITIAL_DELAY_CEILING: Ceiling = Ceiling::hours(24);
/// The longest any duration field may be: what the engine ever adds to a time.
pub const LONGEST_CEILING: Ceiling = DEADLINE_CEILING;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty.
    #[error("empty duration: write e.g. 30s, 5m or 1h30m")]
    Empty,
    /// A number is not followed by a unit (e.g. `30` or `1h30`).
    #[error("duration {0:?} has a number without a unit (ms, s, m or h)")]
    MissingUnit(String),
    /// A unit is not preceded by a number, or a character outside the grammar appears
    /// (sign, fraction, space, unknown unit).
    #[error("duration {0:?} is not of the form 30s, 5m, 1h30m (units ms, s, m, h)")]
    Malformed(String),
    /// The total does not fit in a `Duration` of whole milliseconds held in a `u64`.
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Parses a Go-style duration of the grammar [`DURATION_PATTERN`].
///
/// Groups add up (`1h30m` is 90 minutes), may repeat and come in any order, as in Go's
/// `time.ParseDuration`; unlike Go, fractions, signs, `ns`/`us` units and a bare `0` are
/// refused, because a rollout's timings are never below a millisecond and the apiserver
/// refuses them too.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let overflow = || DurationError::Overflow(s.to_owned());
    let bytes = s.as_bytes();
    let mut total_ms: u64 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let digits_start = i;
        let mut value: u64 = 0;
        while let Some(digit) = bytes.get(i).and_then(|byte| char::from(*byte).to_digit(10)) {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(digit)))
                .ok_or_else(overflow)?;
            i = i.saturating_add(1);
        }
        if i == digits_start {
            return Err(DurationError::Malformed(s.to_owned()));
        }
        let (unit_ms, unit_len) = match (bytes.get(i), bytes.get(i.saturating_add(1))) {
            (Some(b'm'), Some(b's')) => (1, 2),
            (Some(b's'), _) => (1_000, 1),
            (Some(b'm'), _) => (60_000, 1),
            (Some(b'h'), _) => (3_600_000, 1),
            (None, _) => return Err(DurationError::MissingUnit(s.to_owned())),
            (Some(_), _) => return Err(DurationError::Malformed(s.to_owned())),
        };
        i = i.saturating_add(unit_len);
        let group_ms = value.checked_mul(unit_ms).ok_or_else(overflow)?;
        total_ms = total_ms.checked_add(group_ms).ok_or_else(overflow)?;
    }
    Ok(Duration::from_millis(total_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn reads_single_units() {
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("30s"), Ok(ms(30_000)));
        assert_eq!(parse_duration("5m"), Ok(ms(300_000)));
        assert_eq!(parse_duration("2h"), Ok(ms(7_200_000)));
        assert_eq!(parse_duration("0s"), Ok(ms(0)));
    }

    #[test]
    fn adds_groups_up() {
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("1m30s500ms"), Ok(ms(90_500)));
        // Go accepts repeats and any order; so do we (and so does the CEL pattern).
        assert_eq!(parse_duration("30s1m"), Ok(ms(90_000)));
        assert_eq!(parse_duration("1m1m"), Ok(ms(120_000)));
    }

    #[test]
    fn ms_is_not_minutes_then_seconds() {
        assert_eq!(parse_duration("5ms"), Ok(ms(5)));
        assert_eq!(parse_duration("5m5s"), Ok(ms(305_000)));
    }

    #[test]
    fn refuses_empty_unitless_negative_fractional_and_unknown() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert!(matches!(
            parse_duration("30"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("1h30"),
            Err(DurationError::MissingUnit(_))
        ));
        for bad in [
            "-5m", "+5m", "1.5h", "5 m", " 5m", "5m ", "h", "m5", "5d", "5ns", "5us", "5M", "5S",
            "5mm", "5hs", "ms",
        ] {
            assert!(
                matches!(parse_duration(bad), Err(DurationError::Malformed(_))),
                "{bad:?} should be malformed, got {:?}",
                parse_duration(bad)
            );
        }
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let max_ms = u64::MAX;
        assert_eq!(parse_duration(&format!("{max_ms}ms")), Ok(ms(max_ms)));
        assert!(matches!(
            parse_duration("18446744073709551616ms"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_duration(&format!("{}h", u64::MAX / 3_600_000 + 1)),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_duration(&format!("{max_ms}ms1ms")),
            Err(DurationError::Overflow(_))
        ));
    }

    /// An independent reading of [`DURATION_PATTERN`] (the regex engine the CEL library
    /// would use), so the parser and the schema cannot drift apart silently.
    fn pattern_matches(s: &str) -> bool {
        regex::Regex::new(DURATION_PATTERN)
            .map(|re| re.is_match(s))
            .unwrap_or(false)
    }

    #[test]
    fn the_pattern_compiles() {
        assert!(regex::Regex::new(DURATION_PATTERN).is_ok());
    }

    proptest! {
        #[test]
        fn groups_sum_to_their_total(
            groups in prop::collection::vec((0u64..100_000, prop::sample::select(vec!["ms", "s", "m", "h"])), 1..6)
        ) {
            let text: String = groups.iter().map(|(n, u)| format!("{n}{u}")).collect();
            let expected: u64 = groups
                .iter()
                .map(|(n, u)| n * match *u { "ms" => 1, "s" => 1_000, "m" => 60_000, _ => 3_600_000 })
                .sum();
            prop_assert_eq!(parse_duration(&text), Ok(ms(expected)));
            prop_assert!(pattern_matches(&text));
        }

        #[test]
        fn parser_and_pattern_agree(s in "[0-9hms.+ -]{0,12}") {
            let parsed = parse_duration(&s);
            let overflowed = matches!(parsed, Err(DurationError::Overflow(_)));
            prop_assert_eq!(parsed.is_ok() || overflowed, pattern_matches(&s), "input {:?}", s);
        }

        #[test]
        fn never_panics_on_any_input(s in "\\PC{0,40}") {
            let _ = parse_duration(&s);
        }
    }
}
