//! One key's rule: compiled from a `KeyRule`, then checked against the key's value.
//! `Json` and `Yaml` values are handed to [`super::documents`].

use std::collections::BTreeSet;

use configrollout_api::{
    KeyRule, MAX_ENUM_VALUE_LENGTH, MAX_ENUM_VALUES, MAX_PATTERN_LENGTH, ValueType,
};
use regex::{Regex, RegexBuilder};

use super::documents::{DocumentCheck, Format};
use super::{PATTERN_SIZE_LIMIT, SchemaError, Violation, go_duration};

/// A key's compiled rule.
pub(super) struct KeyCheck {
    pub(super) name: String,
    pub(super) required: bool,
    kind: Kind,
}

enum Kind {
    String {
        pattern: Option<Regex>,
        min_length: Option<u32>,
        max_length: Option<u32>,
    },
    Integer(Bounds),
    Number(Bounds),
    Boolean,
    Duration(Bounds),
    Enum(BTreeSet<String>),
    Document(DocumentCheck),
}

/// `minimum` and `maximum`, finite, `minimum <= maximum`.
#[derive(Clone, Copy)]
struct Bounds {
    minimum: Option<f64>,
    maximum: Option<f64>,
}

/// Whether `name` can be a ConfigMap key (`[-._a-zA-Z0-9]+`, at most 253 characters).
pub(super) fn check_key_name(name: &str) -> Result<(), String> {
    let max =
        usize::try_from(configrollout_api::schema::CONFIG_MAP_KEY_MAX_LENGTH).unwrap_or(usize::MAX);
    if name.is_empty() {
        return Err("empty key name".to_owned());
    }
    if name.len() > max {
        return Err(format!("key name longer than {max} characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(format!(
            "`{name}` is not a ConfigMap key (letters, digits, `-`, `.`, `_`)"
        ));
    }
    Ok(())
}

/// Compiles the rule at `field` (`spec.keys[i]`), or says all that is wrong with it.
pub(super) fn compile_key(field: &str, rule: &KeyRule) -> Result<KeyCheck, Vec<SchemaError>> {
    let mut errors = Vec::new();
    let mut error = |at: &str, message: String| {
        errors.push(SchemaError::new(format!("{field}.{at}"), message));
    };
    if let Err(message) = check_key_name(&rule.name) {
        error("name", message);
    }
    let ty = rule.value_type;
    // The apiserver's rules on a KeyRule, for a schema that has not been through it.
    if ty != ValueType::String {
        for (at, set) in [
            ("pattern", rule.pattern.is_some()),
            ("minLength", rule.min_length.is_some()),
            ("maxLength", rule.max_length.is_some()),
        ] {
            if set {
                error(at, "applies to type String only".to_owned());
            }
        }
    }
    if !matches!(
        ty,
        ValueType::Integer | ValueType::Number | ValueType::Duration
    ) {
        for (at, set) in [
            ("minimum", rule.minimum.is_some()),
            ("maximum", rule.maximum.is_some()),
        ] {
            if set {
                error(
                    at,
                    "applies to types Integer, Number and Duration only".to_owned(),
                );
            }
        }
    }
    if ty != ValueType::Enum && !rule.values.is_empty() {
        error("values", "applies to type Enum only".to_owned());
    }
    if !matches!(ty, ValueType::Json | ValueType::Yaml) && rule.json_schema.is_some() {
        error(
            "jsonSchema",
            "applies to types Json and Yaml only".to_owned(),
        );
    }
    if let (Some(min), Some(max)) = (rule.min_length, rule.max_length)
        && min > max
    {
        error("minLength", format!("{min} is above maxLength {max}"));
    }
    for (at, bound) in [("minimum", rule.minimum), ("maximum", rule.maximum)] {
        if bound.is_some_and(|bound| !bound.is_finite()) {
            error(at, "not a finite number".to_owned());
        }
    }
    if let (Some(min), Some(max)) = (rule.minimum, rule.maximum)
        && min > max
    {
        error("minimum", format!("{min} is above maximum {max}"));
    }

    let pattern = match &rule.pattern {
        None => None,
        Some(pattern) => match compile_pattern(pattern) {
            Ok(regex) => Some(regex),
            Err(message) => {
                error("pattern", message);
                None
            }
        },
    };

    let bounds = Bounds {
        minimum: rule.minimum,
        maximum: rule.maximum,
    };
    let kind = match ty {
        ValueType::String => Kind::String {
            pattern,
            min_length: rule.min_length,
            max_length: rule.max_length,
        },
        ValueType::Integer => Kind::Integer(bounds),
        ValueType::Number => Kind::Number(bounds),
        ValueType::Boolean => Kind::Boolean,
        ValueType::Duration => Kind::Duration(bounds),
        ValueType::Enum => {
            check_enum_values(&rule.values, &mut error);
            Kind::Enum(rule.values.iter().cloned().collect())
        }
        ValueType::Json | ValueType::Yaml => {
            let format = if ty == ValueType::Json {
                Format::Json
            } else {
                Format::Yaml
            };
            match DocumentCheck::compile(format, rule.json_schema.as_ref()) {
                Ok(check) => Kind::Document(check),
                Err(message) => {
                    error("jsonSchema", message);
                    Kind::Boolean
                }
            }
        }
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(KeyCheck {
        name: rule.name.clone(),
        required: rule.required,
        kind,
    })
}

fn compile_pattern(pattern: &str) -> Result<Regex, String> {
    let max = usize::try_from(MAX_PATTERN_LENGTH).unwrap_or(usize::MAX);
    if pattern.chars().count() > max {
        return Err(format!("longer than {max} characters"));
    }
    // A pattern is quoted in every refusal it makes: no terminal control in it.
    if let Some((index, c)) = configrollout_api::text::first_refused_in_multiline(pattern) {
        return Err(configrollout_api::text::refused_character_message(index, c));
    }
    RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|error| match error {
            regex::Error::CompiledTooBig(_) => {
                format!("compiles to more than {PATTERN_SIZE_LIMIT} bytes")
            }
            // The pattern is the schema's own text: its syntax error may quote it.
            error => format!("not a regular expression: {error}"),
        })
}

fn check_enum_values(values: &[String], error: &mut impl FnMut(&str, String)) {
    let max_values = usize::try_from(MAX_ENUM_VALUES).unwrap_or(usize::MAX);
    let max_length = usize::try_from(MAX_ENUM_VALUE_LENGTH).unwrap_or(usize::MAX);
    if values.is_empty() {
        error("values", "type Enum needs at least one value".to_owned());
    }
    if values.len() > max_values {
        error("values", format!("more than {max_values} values"));
    }
    for (index, value) in values.iter().enumerate() {
        if value.chars().count() > max_length {
            error(
                &format!("values[{index}]"),
                format!("longer than {max_length} characters"),
            );
        }
    }
}

impl KeyCheck {
    /// Adds to `out` each way `value` breaks this key's rule.
    pub(super) fn check(&self, value: &str, out: &mut Vec<Violation>) {
        let key = self.name.as_str();
        let mut refuse = |rule: &str, message: String| {
            out.push(Violation::for_key(key, rule, message));
        };
        match &self.kind {
            Kind::String {
                pattern,
                min_length,
                max_length,
            } => {
                if min_length.is_some() || max_length.is_some() {
                    let length = value.chars().count();
                    if let Some(min) = min_length
                        && u64::try_from(length).is_ok_and(|length| length < u64::from(*min))
                    {
                        refuse("minLength", format!("shorter than {min} characters"));
                    }
                    if let Some(max) = max_length
                        && u64::try_from(length).map_or(true, |length| length > u64::from(*max))
                    {
                        refuse("maxLength", format!("longer than {max} characters"));
                    }
                }
                if let Some(pattern) = pattern
                    && !pattern.is_match(value)
                {
                    refuse("pattern", format!("does not match `{}`", pattern.as_str()));
                }
            }
            Kind::Integer(bounds) => match parse_integer(value) {
                Ok(number) => bounds.check_integer(number, &mut refuse),
                Err(message) => refuse("type", message.to_owned()),
            },
            Kind::Number(bounds) => match parse_number(value) {
                Ok(number) => bounds.check_float(number, "", &mut refuse),
                Err(message) => refuse("type", message.to_owned()),
            },
            Kind::Boolean => {
                if value != "true" && value != "false" {
                    refuse("type", "not a Boolean (`true` or `false`)".to_owned());
                }
            }
            Kind::Duration(bounds) => match go_duration::parse_seconds(value) {
                Ok(seconds) => bounds.check_float(seconds, "s", &mut refuse),
                Err(message) => refuse("type", message.to_owned()),
            },
            Kind::Enum(values) => {
                if !values.contains(value) {
                    refuse(
                        "values",
                        format!("not one of the {} values the schema lists", values.len()),
                    );
                }
            }
            Kind::Document(document) => document.check(key, value, out),
        }
    }
}

impl Bounds {
    /// `number` against the bounds, exactly: an integer is below a bound `b` when it is
    /// below `ceil(b)`, above it when above `floor(b)`.
    fn check_integer(self, number: i64, refuse: &mut impl FnMut(&str, String)) {
        if let Some(min) = self.minimum
            && integer_below(number, min)
        {
            refuse("minimum", format!("below {min}"));
        }
        if let Some(max) = self.maximum
            && integer_above(number, max)
        {
            refuse("maximum", format!("above {max}"));
        }
    }

    fn check_float(self, number: f64, unit: &str, refuse: &mut impl FnMut(&str, String)) {
        if let Some(min) = self.minimum
            && number < min
        {
            refuse("minimum", format!("below {min}{unit}"));
        }
        if let Some(max) = self.maximum
            && number > max
        {
            refuse("maximum", format!("above {max}{unit}"));
        }
    }
}

/// 2^63 as an `f64` (exact): every `i64` is below it.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// `number < bound`, without rounding `number` to an `f64`.
fn integer_below(number: i64, bound: f64) -> bool {
    let bound = bound.ceil();
    if bound >= TWO_POW_63 {
        return true;
    }
    if bound < -TWO_POW_63 {
        return false;
    }
    // In range and integral: the conversion is exact.
    #[allow(clippy::cast_possible_truncation)]
    let bound = bound as i64;
    number < bound
}

/// `number > bound`, without rounding `number` to an `f64`.
fn integer_above(number: i64, bound: f64) -> bool {
    let bound = bound.floor();
    if bound >= TWO_POW_63 {
        return false;
    }
    if bound < -TWO_POW_63 {
        return true;
    }
    #[allow(clippy::cast_possible_truncation)]
    let bound = bound as i64;
    number > bound
}

/// A base-10 integer as written: an optional `-`, then digits only (no `+`, no spaces, no
/// `_`), within 64 bits.
pub(super) fn parse_integer(text: &str) -> Result<i64, &'static str> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not an Integer (optional `-`, then digits)");
    }
    text.parse::<i64>()
        .map_err(|_| "an Integer out of the 64-bit range")
}

/// A decimal or scientific number: optional sign, digits with an optional fraction (at
/// least one digit), optional exponent; finite (`NaN`, `inf` and overflows refused).
pub(super) fn parse_number(text: &str) -> Result<f64, &'static str> {
    const MALFORMED: &str = "not a Number (e.g. `0.25`, `-3`, `1e3`)";
    let bytes = text.as_bytes();
    let mut at = usize::from(matches!(bytes.first(), Some(b'-' | b'+')));
    let digits = |at: &mut usize| {
        let start = *at;
        while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
            *at = at.saturating_add(1);
        }
        at.saturating_sub(start)
    };
    let mut mantissa = digits(&mut at);
    if bytes.get(at) == Some(&b'.') {
        at = at.saturating_add(1);
        mantissa = mantissa.saturating_add(digits(&mut at));
    }
    if mantissa == 0 {
        return Err(MALFORMED);
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at = at.saturating_add(1);
        if matches!(bytes.get(at), Some(b'-' | b'+')) {
            at = at.saturating_add(1);
        }
        if digits(&mut at) == 0 {
            return Err(MALFORMED);
        }
    }
    if at != bytes.len() {
        return Err(MALFORMED);
    }
    match text.parse::<f64>() {
        Ok(number) if number.is_finite() => Ok(number),
        _ => Err("a Number out of the 64-bit floating-point range"),
    }
}
