//! The gate condition grammar.
//!
//! ```text
//! condition  := or_expr
//! or_expr    := and_expr ( "or" and_expr )*
//! and_expr   := primary ( "and" primary )*
//! primary    := "(" or_expr ")"
//!             | ("all" | "any") "(" or_expr ")"
//!             | "result" op number
//! op         := "<" | "<=" | ">" | ">=" | "==" | "!="
//! number     := ["-" | "+"] digits ["." digits] [("e" | "E") ["-" | "+"] digits]
//! ```
//!
//! `and` binds tighter than `or`; both associate to the left. `all(...)` and `any(...)`
//! quantify over the elements of a vector result and cannot be nested in one another
//! (inside them `result` already names one element). Keywords are lower case. Nesting is
//! bounded by [`MAX_DEPTH`] so that a hostile spec cannot exhaust the controller's stack.

use std::fmt;

/// Deepest nesting of parentheses and quantifiers a condition may have.
pub const MAX_DEPTH: usize = 32;

/// A comparison operator between `result` and a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl Comparison {
    /// Whether `value <op> threshold` holds. NaN never reaches here: the evaluator
    /// treats it as unknown first.
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Comparison::Lt => value < threshold,
            Comparison::Le => value <= threshold,
            Comparison::Gt => value > threshold,
            Comparison::Ge => value >= threshold,
            Comparison::Eq => value == threshold,
            Comparison::Ne => value != threshold,
        }
    }

    /// How the grammar spells it (`<`, `>=`, ...).
    pub fn symbol(self) -> &'static str {
        match self {
            Comparison::Lt => "<",
            Comparison::Le => "<=",
            Comparison::Gt => ">",
            Comparison::Ge => ">=",
            Comparison::Eq => "==",
            Comparison::Ne => "!=",
        }
    }
}

/// A parsed gate condition. `Display` prints a form that parses back to the same tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `result <op> threshold`
    Compare {
        /// The operator.
        op: Comparison,
        /// The number on the right-hand side; always finite.
        threshold: f64,
    },
    /// `all(inner)`: every element of the vector satisfies `inner`.
    All(Box<Condition>),
    /// `any(inner)`: at least one element of the vector satisfies `inner`.
    Any(Box<Condition>),
    /// `left and right`
    And(Box<Condition>, Box<Condition>),
    /// `left or right`
    Or(Box<Condition>, Box<Condition>),
}

impl Condition {
    /// Parses a condition, reporting the byte position of the first error.
    pub fn parse(input: &str) -> Result<Condition, ConditionError> {
        let mut parser = Parser {
            input,
            position: 0,
            depth: 0,
            in_quantifier: false,
        };
        let condition = parser.or_expr()?;
        parser.skip_whitespace();
        if parser.position < input.len() {
            return Err(parser.error("`and`, `or` or the end of the condition"));
        }
        Ok(condition)
    }

    /// Whether the condition quantifies over vectors with `all(...)` or `any(...)`.
    pub fn has_quantifier(&self) -> bool {
        match self {
            Condition::Compare { .. } => false,
            Condition::All(_) | Condition::Any(_) => true,
            Condition::And(left, right) | Condition::Or(left, right) => {
                left.has_quantifier() || right.has_quantifier()
            }
        }
    }
}

impl std::str::FromStr for Condition {
    type Err = ConditionError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        Condition::parse(input)
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::Compare { op, threshold } => {
                write!(f, "result {} {}", op.symbol(), threshold)
            }
            Condition::All(inner) => write!(f, "all({inner})"),
            Condition::Any(inner) => write!(f, "any({inner})"),
            // Left associativity: a right operand of the same operator needs parentheses
            // to keep its shape; an `or` under an `and` always does.
            Condition::Or(left, right) => {
                write!(f, "{left} or ")?;
                match right.as_ref() {
                    Condition::Or(..) => write!(f, "({right})"),
                    _ => write!(f, "{right}"),
                }
            }
            Condition::And(left, right) => {
                match left.as_ref() {
                    Condition::Or(..) => write!(f, "({left})")?,
                    _ => write!(f, "{left}")?,
                }
                f.write_str(" and ")?;
                match right.as_ref() {
                    Condition::Or(..) | Condition::And(..) => write!(f, "({right})"),
                    _ => write!(f, "{right}"),
                }
            }
        }
    }
}

/// Why a condition does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {position}: expected {expected}, found {found}")]
pub struct ConditionError {
    /// Byte offset into the condition where the parser stopped.
    pub position: usize,
    /// What the grammar allows at that position.
    pub expected: String,
    /// What is there instead (a short excerpt, or "end of input").
    pub found: String,
}

struct Parser<'a> {
    input: &'a str,
    position: usize,
    depth: usize,
    in_quantifier: bool,
}

// Positions are byte offsets into the condition (at most MAX_CONDITION_LENGTH bytes) plus
// lengths of its own parts, and the depth is bounded by MAX_DEPTH: no sum here can
// overflow, and every index is checked by the slice it takes.
#[allow(
    clippy::arithmetic_side_effects,
    reason = "offsets within one bounded string"
)]
impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.input[self.position..]
    }

    fn skip_whitespace(&mut self) {
        let trimmed = self.rest().trim_start();
        self.position = self.input.len() - trimmed.len();
    }

    fn error(&self, expected: &str) -> ConditionError {
        let found = match self.rest().split_whitespace().next() {
            None => "end of input".to_string(),
            Some(word) => {
                let excerpt: String = word.chars().take(16).collect();
                format!("`{excerpt}`")
            }
        };
        ConditionError {
            position: self.position,
            expected: expected.to_string(),
            found,
        }
    }

    /// The identifier at the cursor, without consuming it.
    fn peek_word(&self) -> &str {
        let rest = self.rest();
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        &rest[..end]
    }

    fn eat_keyword(&mut self, keyword: &str) -> bool {
        self.skip_whitespace();
        if self.peek_word() == keyword {
            self.position += keyword.len();
            true
        } else {
            false
        }
    }

    fn eat_symbol(&mut self, symbol: &str) -> bool {
        self.skip_whitespace();
        if self.rest().starts_with(symbol) {
            self.position += symbol.len();
            true
        } else {
            false
        }
    }

    fn or_expr(&mut self) -> Result<Condition, ConditionError> {
        let mut left = self.and_expr()?;
        while self.eat_keyword("or") {
            let right = self.and_expr()?;
            left = Condition::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and_expr(&mut self) -> Result<Condition, ConditionError> {
        let mut left = self.primary()?;
        while self.eat_keyword("and") {
            let right = self.primary()?;
            left = Condition::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn nested(
        &mut self,
        build: fn(Box<Condition>) -> Condition,
        quantifier: bool,
    ) -> Result<Condition, ConditionError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error(&format!("at most {MAX_DEPTH} levels of nesting")));
        }
        self.depth += 1;
        let outer_quantifier = self.in_quantifier;
        self.in_quantifier |= quantifier;
        let inner = self.or_expr()?;
        self.in_quantifier = outer_quantifier;
        self.depth -= 1;
        if !self.eat_symbol(")") {
            return Err(self.error("`)`"));
        }
        Ok(build(Box::new(inner)))
    }

    fn primary(&mut self) -> Result<Condition, ConditionError> {
        self.skip_whitespace();
        if self.eat_symbol("(") {
            return self.nested(|inner| *inner, false);
        }
        let word_start = self.position;
        for (keyword, build) in [
            ("all", Condition::All as fn(Box<Condition>) -> Condition),
            ("any", Condition::Any),
        ] {
            if self.eat_keyword(keyword) {
                if self.in_quantifier {
                    self.position = word_start;
                    return Err(self.error("`result` or `(` (all/any cannot be nested)"));
                }
                if !self.eat_symbol("(") {
                    return Err(self.error("`(` after the quantifier"));
                }
                return self.nested(build, true);
            }
        }
        if self.eat_keyword("result") {
            let op = self.comparison()?;
            let threshold = self.number()?;
            return Ok(Condition::Compare { op, threshold });
        }
        Err(self.error("`result`, `all(`, `any(` or `(`"))
    }

    fn comparison(&mut self) -> Result<Comparison, ConditionError> {
        // Two-character operators first so that `<=` is not read as `<` then `=`.
        for (symbol, op) in [
            ("<=", Comparison::Le),
            (">=", Comparison::Ge),
            ("==", Comparison::Eq),
            ("!=", Comparison::Ne),
            ("<", Comparison::Lt),
            (">", Comparison::Gt),
        ] {
            if self.eat_symbol(symbol) {
                return Ok(op);
            }
        }
        Err(self.error("a comparison (`<`, `<=`, `>`, `>=`, `==`, `!=`)"))
    }

    fn number(&mut self) -> Result<f64, ConditionError> {
        self.skip_whitespace();
        let bytes = self.rest().as_bytes();
        let mut end = 0;
        let digits = |from: usize| {
            bytes[from..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count()
        };
        if matches!(bytes.first(), Some(b'-' | b'+')) {
            end += 1;
        }
        let integer_digits = digits(end);
        if integer_digits == 0 {
            return Err(self.error("a number"));
        }
        end += integer_digits;
        if bytes.get(end) == Some(&b'.') {
            let fraction_digits = digits(end + 1);
            if fraction_digits == 0 {
                self.position += end + 1;
                return Err(self.error("digits after the decimal point"));
            }
            end += 1 + fraction_digits;
        }
        if matches!(bytes.get(end), Some(b'e' | b'E')) {
            let mut exponent = end + 1;
            if matches!(bytes.get(exponent), Some(b'-' | b'+')) {
                exponent += 1;
            }
            let exponent_digits = digits(exponent);
            if exponent_digits == 0 {
                self.position += exponent;
                return Err(self.error("digits in the exponent"));
            }
            end = exponent + exponent_digits;
        }
        let text = &self.rest()[..end];
        match text.parse::<f64>() {
            Ok(value) if value.is_finite() => {
                self.position += end;
                Ok(value)
            }
            _ => Err(self.error("a finite number")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cmp(op: Comparison, threshold: f64) -> Condition {
        Condition::Compare { op, threshold }
    }

    #[test]
    fn parses_every_comparison_operator() {
        for (text, op) in [
            ("result < 1", Comparison::Lt),
            ("result <= 1", Comparison::Le),
            ("result > 1", Comparison::Gt),
            ("result >= 1", Comparison::Ge),
            ("result == 1", Comparison::Eq),
            ("result != 1", Comparison::Ne),
        ] {
            assert_eq!(Condition::parse(text), Ok(cmp(op, 1.0)), "{text}");
        }
    }

    #[test]
    fn parses_numbers_with_sign_fraction_and_exponent() {
        assert_eq!(
            Condition::parse("result<0.01"),
            Ok(cmp(Comparison::Lt, 0.01))
        );
        assert_eq!(
            Condition::parse("result >= -2.5e-3"),
            Ok(cmp(Comparison::Ge, -2.5e-3))
        );
        assert_eq!(
            Condition::parse("result == +3E2"),
            Ok(cmp(Comparison::Eq, 300.0))
        );
    }

    #[test]
    fn and_binds_tighter_than_or() {
        let parsed = Condition::parse("result < 1 or result > 5 and result < 9").unwrap();
        assert_eq!(
            parsed,
            Condition::Or(
                Box::new(cmp(Comparison::Lt, 1.0)),
                Box::new(Condition::And(
                    Box::new(cmp(Comparison::Gt, 5.0)),
                    Box::new(cmp(Comparison::Lt, 9.0)),
                )),
            )
        );
    }

    #[test]
    fn parentheses_override_precedence() {
        let parsed = Condition::parse("(result < 1 or result > 5) and result < 9").unwrap();
        assert_eq!(
            parsed,
            Condition::And(
                Box::new(Condition::Or(
                    Box::new(cmp(Comparison::Lt, 1.0)),
                    Box::new(cmp(Comparison::Gt, 5.0)),
                )),
                Box::new(cmp(Comparison::Lt, 9.0)),
            )
        );
    }

    #[test]
    fn operators_associate_to_the_left() {
        let parsed = Condition::parse("result < 1 or result < 2 or result < 3").unwrap();
        assert_eq!(
            parsed,
            Condition::Or(
                Box::new(Condition::Or(
                    Box::new(cmp(Comparison::Lt, 1.0)),
                    Box::new(cmp(Comparison::Lt, 2.0)),
                )),
                Box::new(cmp(Comparison::Lt, 3.0)),
            )
        );
    }

    #[test]
    fn quantifiers_wrap_a_condition() {
        let parsed = Condition::parse("all(result < 0.01) and any(result > 0)").unwrap();
        assert_eq!(
            parsed,
            Condition::And(
                Box::new(Condition::All(Box::new(cmp(Comparison::Lt, 0.01)))),
                Box::new(Condition::Any(Box::new(cmp(Comparison::Gt, 0.0)))),
            )
        );
        assert!(parsed.has_quantifier());
    }

    #[test]
    fn errors_name_the_position_and_what_was_expected() {
        let error = Condition::parse("result < ").unwrap_err();
        assert_eq!(error.position, 9);
        assert_eq!(error.expected, "a number");
        assert_eq!(error.found, "end of input");

        let error = Condition::parse("result ~ 1").unwrap_err();
        assert_eq!(error.position, 7);
        assert!(error.expected.contains("comparison"), "{error}");

        let error = Condition::parse("result < 1 xor result > 2").unwrap_err();
        assert_eq!(error.position, 11);
        assert_eq!(error.found, "`xor`");

        let error = Condition::parse("(result < 1").unwrap_err();
        assert_eq!(error.position, 11);
        assert_eq!(error.expected, "`)`");

        let error = Condition::parse("value < 1").unwrap_err();
        assert_eq!(error.position, 0);
    }

    #[test]
    fn rejects_nested_quantifiers_and_keywords_glued_to_words() {
        let error = Condition::parse("all(any(result < 1))").unwrap_err();
        assert_eq!(error.position, 4);
        assert!(Condition::parse("resultx < 1").is_err());
        assert!(Condition::parse("result < 1 andresult < 2").is_err());
        assert!(Condition::parse("result < 1.").is_err());
        assert!(Condition::parse("result < 1e").is_err());
        assert!(Condition::parse("result < 1e999").is_err());
        assert!(Condition::parse("").is_err());
    }

    #[test]
    fn bounds_nesting_depth_instead_of_overflowing_the_stack() {
        let deep = format!("{}result < 1{}", "(".repeat(10_000), ")".repeat(10_000));
        let error = Condition::parse(&deep).unwrap_err();
        assert!(error.expected.contains("nesting"), "{error}");
        let fine = format!("{}result < 1{}", "(".repeat(8), ")".repeat(8));
        assert!(Condition::parse(&fine).is_ok());
    }

    fn arbitrary_condition() -> impl Strategy<Value = Condition> {
        let op = prop_oneof![
            Just(Comparison::Lt),
            Just(Comparison::Le),
            Just(Comparison::Gt),
            Just(Comparison::Ge),
            Just(Comparison::Eq),
            Just(Comparison::Ne),
        ];
        let threshold = prop_oneof![
            -1e6f64..1e6,
            Just(0.0),
            Just(1e-12),
            Just(-4.5e300),
            any::<i32>().prop_map(f64::from),
        ];
        let comparison = (op, threshold).prop_map(|(op, threshold)| cmp(op, threshold));
        let unquantified = comparison.prop_recursive(4, 16, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone())
                    .prop_map(|(l, r)| Condition::And(Box::new(l), Box::new(r))),
                (inner.clone(), inner).prop_map(|(l, r)| Condition::Or(Box::new(l), Box::new(r))),
            ]
        });
        let quantified = prop_oneof![
            2 => unquantified.clone(),
            1 => unquantified.clone().prop_map(|c| Condition::All(Box::new(c))),
            1 => unquantified.prop_map(|c| Condition::Any(Box::new(c))),
        ];
        quantified.prop_recursive(3, 16, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone())
                    .prop_map(|(l, r)| Condition::And(Box::new(l), Box::new(r))),
                (inner.clone(), inner).prop_map(|(l, r)| Condition::Or(Box::new(l), Box::new(r))),
            ]
        })
    }

    proptest! {
        #[test]
        fn parser_never_panics_on_arbitrary_strings(input in any::<String>()) {
            let _ = Condition::parse(&input);
        }

        #[test]
        fn parser_never_panics_on_grammar_shaped_noise(
            input in "[ ()a-z<>=!.0-9eE+-]{0,64}"
        ) {
            if let Err(error) = Condition::parse(&input) {
                prop_assert!(error.position <= input.len());
            }
        }

        #[test]
        fn display_then_parse_gives_back_the_same_condition(condition in arbitrary_condition()) {
            let printed = condition.to_string();
            prop_assert_eq!(Condition::parse(&printed), Ok(condition), "{}", printed);
        }
    }
}
