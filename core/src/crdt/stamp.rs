//! A hybrid logical clock reading: the version of one write.

use std::fmt;
use std::str::FromStr;

use super::{StampParseError, WriterId, quoted};

/// One hybrid logical clock event: physical milliseconds, a logical counter for events within
/// the same millisecond, and the writer as last tie-breaker.
///
/// Totally ordered by `(wall_ms, logical, writer)` (field order matters for the derived
/// `Ord`), so two distinct writers never produce equal stamps. Rendered as
/// `<wall_ms>.<logical>@<writer>`, e.g. `1764688800000.3@rollout:payments/api`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp {
    /// Milliseconds since the Unix epoch (the clock's view of physical time).
    pub wall_ms: u64,
    /// Events within the same `wall_ms`.
    pub logical: u32,
    /// Who wrote it.
    pub writer: WriterId,
}

impl Stamp {
    /// A stamp from its parts.
    pub fn new(wall_ms: u64, logical: u32, writer: WriterId) -> Self {
        Self {
            wall_ms,
            logical,
            writer,
        }
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}@{}", self.wall_ms, self.logical, self.writer)
    }
}

impl FromStr for Stamp {
    type Err = StampParseError;

    /// Parses the canonical rendering only (no sign, no leading zeros), so that a stamp has
    /// exactly one text form.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let shape = || StampParseError::Shape {
            stamp: quoted(text),
        };
        let (clock, writer) = text.split_once('@').ok_or_else(shape)?;
        let (wall, logical) = clock.split_once('.').ok_or_else(shape)?;
        let number = |part: &'static str| StampParseError::Number {
            stamp: quoted(text),
            part,
        };
        let wall_ms = canonical_decimal::<u64>(wall).ok_or_else(|| number("wall_ms"))?;
        let logical = canonical_decimal::<u32>(logical).ok_or_else(|| number("logical"))?;
        Ok(Self::new(wall_ms, logical, WriterId::parse(writer)?))
    }
}

fn canonical_decimal<T: FromStr>(text: &str) -> Option<T> {
    let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let no_leading_zero = text == "0" || !text.starts_with('0');
    if digits_only && no_leading_zero {
        text.parse().ok()
    } else {
        None
    }
}

impl serde::Serialize for Stamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Stamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(text: &str) -> WriterId {
        WriterId::parse(text).unwrap()
    }

    #[test]
    fn renders_and_parses_the_compact_form() {
        let stamp = Stamp::new(1_764_688_800_000, 3, writer("override:alice@example.com"));
        let text = stamp.to_string();
        assert_eq!(text, "1764688800000.3@override:alice@example.com");
        assert_eq!(text.parse::<Stamp>().unwrap(), stamp);
    }

    #[test]
    fn rejects_non_canonical_text() {
        for bad in [
            "",
            "12@rollout:a/b",
            "12.3",
            "012.3@rollout:a/b",
            "12.03@rollout:a/b",
            "+12.3@rollout:a/b",
            "12.4294967296@rollout:a/b",
            "18446744073709551616.0@rollout:a/b",
        ] {
            assert!(bad.parse::<Stamp>().is_err(), "{bad:?} parsed");
        }
        assert!(matches!(
            "12.3@rollout:A/b".parse::<Stamp>(),
            Err(StampParseError::Writer(_))
        ));
    }

    #[test]
    fn orders_by_wall_then_logical_then_writer() {
        let a = writer("override:alice");
        let b = writer("override:bob");
        assert!(Stamp::new(1, 9, b.clone()) < Stamp::new(2, 0, a.clone()));
        assert!(Stamp::new(2, 0, b.clone()) < Stamp::new(2, 1, a.clone()));
        assert!(Stamp::new(2, 1, a) < Stamp::new(2, 1, b));
    }
}
