//! CEL rules over the whole configuration (`spec.rules`): `self` is the map of key to
//! value, every value a string, e.g. `int(self.burst) >= int(self.rate)`.
//!
//! A rule's cost stays linear in the number of keys: at most one macro (`all`, `exists`,
//! `exists_one`, `map`, `filter`) per rule, counted on the parsed AST (each of those macros
//! expands to one comprehension node; `has` expands to a presence test, not counted), so
//! that no rule nests one loop over the keys in another. The parser bounds the AST's depth
//! (cel's default recursion limit) and the rule's length is bounded, so the walk is too.
//!
//! What a refusal says: the rule (its index, and its message when it has one) and whether
//! it was false or could not be evaluated; for an evaluation error, which function or
//! operator failed, never the error's text, which may quote a value.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr};
use cel::{Context, Env, ExecutionError, Program, Value};
use configrollout_api::{ConfigRule, MAX_SCHEMA_RULE_LENGTH};

use super::{SchemaError, Violation};

/// Most macro calls (comprehensions) one rule may hold.
pub(super) const MAX_MACROS_PER_RULE: usize = 1;
/// Most `+` operations one rule may hold: each may copy the values it joins, and a rule
/// adding a 1 MiB value to itself a few hundred times would allocate gigabytes.
pub(super) const MAX_ADDITIONS_PER_RULE: usize = 16;
/// Functions a rule may not call: `matches` compiles its pattern at every call, with the
/// CEL library's own size limit rather than [`super::PATTERN_SIZE_LIMIT`], once per key
/// inside a macro; a key's `pattern` does the same check, compiled once and bounded.
const REFUSED_FUNCTIONS: &[&str] = &["matches"];

/// Deepest nesting of brackets (`(`, `[`, `{`) a rule may hold: the parser recurses
/// several frames per level, before its own recursion limit, and a rule of 2,048 `(`
/// would overflow any stack (see `stack`). Rules people write nest a handful deep.
pub(super) const MAX_RULE_NESTING: usize = 24;

/// A compiled rule.
pub(super) struct CelRule {
    /// `rules[i]`, with the rule's message in parentheses when it has one.
    label: String,
    program: Program,
}

/// Parses rule `index`, refusing a syntax error, an over-long rule or message, and more
/// than [`MAX_MACROS_PER_RULE`] macro calls.
pub(super) fn compile_rule(index: usize, rule: &ConfigRule) -> Result<CelRule, Vec<SchemaError>> {
    let field = format!("spec.rules[{index}]");
    let max = usize::try_from(MAX_SCHEMA_RULE_LENGTH).unwrap_or(usize::MAX);
    let mut errors = Vec::new();
    if rule.rule.trim().is_empty() {
        errors.push(SchemaError::new(format!("{field}.rule"), "empty rule"));
    }
    if rule.rule.chars().count() > max {
        errors.push(SchemaError::new(
            format!("{field}.rule"),
            format!("longer than {max} characters"),
        ));
    }
    if let Some(message) = &rule.message
        && message.chars().count() > max
    {
        errors.push(SchemaError::new(
            format!("{field}.message"),
            format!("longer than {max} characters"),
        ));
    }
    if let Some((index, c)) = configrollout_api::text::first_refused_in_multiline(&rule.rule) {
        errors.push(SchemaError::new(
            format!("{field}.rule"),
            configrollout_api::text::refused_character_message(index, c),
        ));
    }
    if nesting(&rule.rule) > MAX_RULE_NESTING {
        errors.push(SchemaError::new(
            format!("{field}.rule"),
            format!("brackets nested deeper than {MAX_RULE_NESTING}"),
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let program = Program::compile(&rule.rule).map_err(|parse| {
        // The rule is the schema's own text: its parse error may quote it.
        let message = parse
            .errors
            .first()
            .map(|error| {
                let (line, column) = error.pos;
                format!(
                    "not a CEL expression: {} (line {line}, column {column})",
                    error.msg
                )
            })
            .unwrap_or_else(|| "not a CEL expression".to_owned());
        vec![SchemaError::new(format!("{field}.rule"), message)]
    })?;
    let census = census(program.expression());
    if let Some(function) = census.refused_function {
        return Err(vec![SchemaError::new(
            format!("{field}.rule"),
            format!(
                "`{function}` is not available in rules: give the key a `pattern` (checked \
                 with a compiled, bounded regular expression)"
            ),
        )]);
    }
    if census.additions > MAX_ADDITIONS_PER_RULE {
        return Err(vec![SchemaError::new(
            format!("{field}.rule"),
            format!(
                "{} `+` operations; at most {MAX_ADDITIONS_PER_RULE} per rule",
                census.additions
            ),
        )]);
    }
    let macros = census.macros;
    if macros > MAX_MACROS_PER_RULE {
        return Err(vec![SchemaError::new(
            format!("{field}.rule"),
            format!(
                "{macros} macro calls (all, exists, exists_one, map, filter); at most \
                 {MAX_MACROS_PER_RULE} per rule, so that its cost stays linear in the number of keys"
            ),
        )]);
    }
    let label = match &rule.message {
        Some(message) => format!("rules[{index}] ({message:?})"),
        None => format!("rules[{index}]"),
    };
    Ok(CelRule { label, program })
}

/// The deepest nesting of `(`, `[` and `{` in `rule`, brackets inside string literals
/// included: reading quotes right would take CEL's whole string grammar (raw, triple-
/// quoted, escapes), and counting them too can only refuse a rule, never let a deeper one
/// through.
fn nesting(rule: &str) -> usize {
    let mut depth: usize = 0;
    let mut deepest: usize = 0;
    for c in rule.chars() {
        match c {
            '(' | '[' | '{' => {
                depth = depth.saturating_add(1);
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// What a rule's AST holds that bounds its cost.
#[derive(Default)]
struct Census {
    /// Comprehension nodes (one per expanded macro).
    macros: usize,
    /// `+` operations.
    additions: usize,
    /// A call of one of [`REFUSED_FUNCTIONS`], if any.
    refused_function: Option<&'static str>,
}

/// Counts, without recursion, what [`Census`] holds.
fn census(root: &cel::IdedExpr) -> Census {
    let mut census = Census::default();
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        match &node.expr {
            Expr::Comprehension(comprehension) => {
                census.macros = census.macros.saturating_add(1);
                stack.extend([
                    &comprehension.iter_range,
                    &comprehension.accu_init,
                    &comprehension.loop_cond,
                    &comprehension.loop_step,
                    &comprehension.result,
                ]);
            }
            Expr::Call(call) => {
                if call.func_name == cel::common::ast::operators::ADD {
                    census.additions = census.additions.saturating_add(1);
                }
                if let Some(refused) = REFUSED_FUNCTIONS
                    .iter()
                    .find(|refused| **refused == call.func_name)
                {
                    census.refused_function = Some(*refused);
                }
                stack.extend(call.target.as_deref());
                stack.extend(&call.args);
            }
            Expr::List(list) => stack.extend(&list.elements),
            Expr::Map(map) => {
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        stack.extend([&entry.key, &entry.value]);
                    }
                }
            }
            Expr::Struct(object) => {
                for entry in &object.entries {
                    match &entry.expr {
                        EntryExpr::StructField(field) => stack.push(&field.value),
                        EntryExpr::MapEntry(entry) => stack.extend([&entry.key, &entry.value]),
                    }
                }
            }
            Expr::Select(select) => stack.push(&select.operand),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }
    census
}

/// Evaluates every rule with `self` bound to `data`, adding a violation for each that does
/// not evaluate to `true`.
pub(super) fn check_rules(
    rules: &[CelRule],
    data: &BTreeMap<String, String>,
    out: &mut Vec<Violation>,
) {
    let this: HashMap<String, String> = data
        .iter()
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let mut context = Context::with_env(Arc::new(Env::stdlib()));
    context.add_variable_from_value("self", Value::from(this));
    for rule in rules {
        let outcome = match rule.program.execute(&context) {
            Ok(Value::Bool(true)) => continue,
            Ok(Value::Bool(false)) => "false".to_owned(),
            Ok(_) => "not a Boolean".to_owned(),
            Err(error) => format!("could not be evaluated ({})", failure(&error)),
        };
        out.push(Violation {
            key: None,
            rule: rule.label.clone(),
            pointer: None,
            message: outcome,
        });
    }
}

/// What failed, in the rule's terms (a function or operator name, a type name), never the
/// error's message or the values it carries.
fn failure(error: &ExecutionError) -> String {
    match error {
        ExecutionError::FunctionError { function, .. } => format!("function `{function}` failed"),
        ExecutionError::NoSuchOverload(overload) => format!(
            "no overload of `{}` for ({})",
            overload.function(),
            overload.argument_types().join(", ")
        ),
        ExecutionError::UndeclaredReference(name) => format!("undeclared reference `{name}`"),
        // The key may have been computed from a value (`self[self.a]`): no name.
        ExecutionError::NoSuchKey(_) => "no such key".to_owned(),
        ExecutionError::UnexpectedType { got, want } => {
            format!("unexpected type {got}, wanted {want}")
        }
        ExecutionError::InvalidArgumentCount { expected, actual } => {
            format!("{actual} arguments where {expected} were expected")
        }
        ExecutionError::DivisionByZero(_) => "division by zero".to_owned(),
        ExecutionError::RemainderByZero(_) => "remainder by zero".to_owned(),
        ExecutionError::Overflow(operator, ..) => format!("overflow in `{operator}`"),
        ExecutionError::IndexOutOfBounds(_) => "index out of bounds".to_owned(),
        ExecutionError::ValuesNotComparable(..) => "values not comparable".to_owned(),
        ExecutionError::UnsupportedBinaryOperator(operator, ..) => {
            format!("operator `{operator}` not supported on these types")
        }
        ExecutionError::NotSupportedAsMethod { method, .. } => {
            format!("`{method}` not supported as a method here")
        }
        ExecutionError::UnsupportedKeyType(_) => "a map key of an unsupported type".to_owned(),
        ExecutionError::DuplicateKey(_) => "a map literal repeats a key".to_owned(),
        _ => "evaluation error".to_owned(),
    }
}
