//! The checks a `ConfigSchema` (or `ClusterConfigSchema`) makes of a candidate revision's
//! key/values, shared by the controller (before it declares a revision) and
//! `kubectl configrollout lint` (before anyone applies one).
//!
//! A schema is compiled once ([`compile`]: regular expressions, JSON Schema validators, CEL
//! programs), refusing a schema that could not be checked with [`SchemaError`]s; the
//! [`CompiledSchema`] then checks any number of candidates ([`CompiledSchema::check`]),
//! each problem a [`Violation`].
//!
//! What a violation says never quotes the candidate: not a value, not a part of one (a
//! JSON property name, a YAML scalar, the text of a CEL error), because violations end up
//! in conditions, Events and CI logs that more people read than the ConfigMap. Key names
//! do appear; within a document, a pointer segment appears only when it is an array index
//! or a property name the key's JSON Schema itself spells.
//!
//! Everything is bounded: patterns by a compiled-size limit (and linear-time matching),
//! JSON by serde_json's nesting limit, YAML by a parse budget ([`documents`]), JSON Schema
//! errors by a per-key cap, CEL rules by one macro each ([`cel_rules`]).

mod cel_rules;
mod documents;
mod go_duration;
mod keys;
mod stack;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use configrollout_api::{
    ConfigSchemaSpec, MAX_SCHEMA_KEYS, MAX_SCHEMA_RULES, MAX_SCHEMA_VALIDATORS, UnknownKeys,
};

use cel_rules::CelRule;
use keys::KeyCheck;

/// Most violations one key's document reports (JSON Schema errors past it are not
/// listed), so that a huge document cannot bloat a status or an Event.
pub const MAX_VIOLATIONS_PER_KEY: usize = 5;

/// Largest compiled form of a regular expression (`pattern`, and JSON Schema patterns), and
/// of its lazy DFA cache, in bytes: far more than a sensible pattern needs (`^[a-z-]+$`
/// takes a few KiB), far less than a hostile one (`(a{1000}){1000}`) would take.
pub const PATTERN_SIZE_LIMIT: usize = 128 << 10;
/// Most regular expressions one schema holds (keys' `pattern`s, and `pattern` and
/// `patternProperties` inside its JSON Schemas), so that a compiled schema stays within
/// `2 * MAX_PATTERNS * PATTERN_SIZE_LIMIT` (8 MiB) however it is written.
pub const MAX_PATTERNS: usize = 32;

/// Longest text of a JSON Schema compile error kept in a [`SchemaError`].
const MAX_SCHEMA_MESSAGE_CHARS: usize = 300;

/// One problem with a schema itself (reported against the schema object, not against a
/// candidate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// Where in the schema, e.g. `spec.keys[3].pattern` or `spec.rules[0].rule`.
    pub field: String,
    /// What is wrong there.
    pub message: String,
}

impl SchemaError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        SchemaError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for SchemaError {}

/// One way a candidate breaks a schema. No field holds a value of the candidate, nor a part
/// of one, so that its [`Display`](fmt::Display) can go anywhere a key name can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The key the violation is about; `None` for a CEL rule over the whole configuration.
    pub key: Option<String>,
    /// Which rule refused: the schema field (`required`, `forbiddenKeys`, `unknownKeys`,
    /// `type`, `pattern`, `minLength`, `maxLength`, `minimum`, `maximum`, `values`,
    /// `jsonSchema`) or the CEL rule (`rules[1]`, with its message in parentheses when it
    /// has one).
    pub rule: String,
    /// Within a `Json`/`Yaml` document, where (a JSON pointer; segments the schema does not
    /// name are written `*`).
    pub pointer: Option<String>,
    /// What is wrong, in words of the schema's (limits, types), never the value's.
    pub message: String,
}

impl Violation {
    fn for_key(key: &str, rule: impl Into<String>, message: impl Into<String>) -> Self {
        Violation {
            key: Some(key.to_owned()),
            rule: rule.into(),
            pointer: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    /// `key `rate`: maximum: above 1000`, `key `limits`: jsonSchema at /routes/0/timeout:
    /// not of type integer (schema /properties/routes/items/properties/timeout/type)`,
    /// `rules[1] ("burst must be at least rate"): false`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(key) = &self.key {
            write!(f, "key `{key}`: ")?;
        }
        f.write_str(&self.rule)?;
        if let Some(pointer) = &self.pointer {
            write!(f, " at {}", if pointer.is_empty() { "/" } else { pointer })?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// A schema compiled once (regular expressions, JSON Schema validators, CEL programs) and
/// checked against any number of candidates. `Send + Sync`: share it in an `Arc`.
pub struct CompiledSchema {
    /// Per-key checks, in the schema's order.
    keys: Vec<KeyCheck>,
    /// Index into `keys` by key name.
    by_name: BTreeMap<String, usize>,
    forbidden: BTreeSet<String>,
    unknown_keys: UnknownKeys,
    rules: Vec<CelRule>,
    validators: Vec<String>,
}

/// The controller shares a compiled schema across tokio tasks in an `Arc`.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<CompiledSchema>();
};

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("keys", &self.by_name.keys().collect::<Vec<_>>())
            .field("forbidden", &self.forbidden)
            .field("unknown_keys", &self.unknown_keys)
            .field("rules", &self.rules.len())
            .field("validators", &self.validators)
            .finish()
    }
}

/// Compiles `spec`, or says everything wrong with it (every error found, not only the
/// first). The apiserver enforces most of the bounds too, but a schema read from a file
/// (`lint --schema`) has not been through it.
pub fn compile(spec: &ConfigSchemaSpec) -> Result<CompiledSchema, Vec<SchemaError>> {
    stack::on_large_stack(|| compile_here(spec)).unwrap_or_else(|| {
        Err(vec![SchemaError::new(
            "spec",
            "could not be compiled (an internal error; the schema refuses every candidate)",
        )])
    })
}

fn compile_here(spec: &ConfigSchemaSpec) -> Result<CompiledSchema, Vec<SchemaError>> {
    let mut errors = Vec::new();
    check_count(&mut errors, "spec.keys", spec.keys.len(), MAX_SCHEMA_KEYS);
    check_count(
        &mut errors,
        "spec.forbiddenKeys",
        spec.forbidden_keys.len(),
        MAX_SCHEMA_KEYS,
    );
    check_count(
        &mut errors,
        "spec.rules",
        spec.rules.len(),
        MAX_SCHEMA_RULES,
    );
    check_count(
        &mut errors,
        "spec.validators",
        spec.validators.len(),
        MAX_SCHEMA_VALIDATORS,
    );

    let mut forbidden = BTreeSet::new();
    for (index, name) in spec.forbidden_keys.iter().enumerate() {
        let field = format!("spec.forbiddenKeys[{index}]");
        if let Err(message) = keys::check_key_name(name) {
            errors.push(SchemaError::new(field, message));
        } else if !forbidden.insert(name.clone()) {
            errors.push(SchemaError::new(field, format!("`{name}` is listed twice")));
        }
    }

    let patterns = spec
        .keys
        .iter()
        .map(|key| {
            usize::from(key.pattern.is_some()).saturating_add(
                key.json_schema
                    .as_ref()
                    .map_or(0, documents::count_patterns),
            )
        })
        .fold(0usize, usize::saturating_add);
    if patterns > MAX_PATTERNS {
        errors.push(SchemaError::new(
            "spec.keys",
            format!(
                "{patterns} regular expressions (patterns, and patterns in JSON Schemas); at \
                 most {MAX_PATTERNS} per schema"
            ),
        ));
    }

    let mut compiled_keys = Vec::with_capacity(spec.keys.len());
    let mut by_name = BTreeMap::new();
    for (index, rule) in spec.keys.iter().enumerate() {
        let field = format!("spec.keys[{index}]");
        if by_name.contains_key(&rule.name) {
            errors.push(SchemaError::new(
                format!("{field}.name"),
                format!("key `{}` has a rule already", rule.name),
            ));
            continue;
        }
        if forbidden.contains(&rule.name) {
            errors.push(SchemaError::new(
                format!("{field}.name"),
                format!("key `{}` is also in spec.forbiddenKeys", rule.name),
            ));
        }
        match keys::compile_key(&field, rule) {
            Ok(check) => {
                by_name.insert(rule.name.clone(), compiled_keys.len());
                compiled_keys.push(check);
            }
            Err(mut key_errors) => {
                // Remember the name anyway, so that a duplicate is still reported.
                by_name.insert(rule.name.clone(), usize::MAX);
                errors.append(&mut key_errors);
            }
        }
    }

    let mut rules = Vec::with_capacity(spec.rules.len());
    for (index, rule) in spec.rules.iter().enumerate() {
        match cel_rules::compile_rule(index, rule) {
            Ok(rule) => rules.push(rule),
            Err(mut rule_errors) => errors.append(&mut rule_errors),
        }
    }

    for (index, name) in spec.validators.iter().enumerate() {
        if !is_dns_subdomain(name) {
            errors.push(SchemaError::new(
                format!("spec.validators[{index}]"),
                "not a ClusterConfigValidator name (a DNS-1123 subdomain)",
            ));
        }
    }

    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(CompiledSchema {
        keys: compiled_keys,
        by_name,
        forbidden,
        unknown_keys: spec.unknown_keys,
        rules,
        validators: spec.validators.clone(),
    })
}

impl CompiledSchema {
    /// Every way `data` breaks the schema, in a stable order: required keys that are
    /// missing (in the schema's order), then each key of `data` in order (forbidden,
    /// unknown, its own rule), then the CEL rules in order. Empty when `data` passes.
    pub fn check(&self, data: &BTreeMap<String, String>) -> Vec<Violation> {
        stack::on_large_stack(|| self.check_here(data)).unwrap_or_else(|| {
            vec![Violation {
                key: None,
                rule: "spec".to_owned(),
                pointer: None,
                message: "could not be checked (an internal error): refused".to_owned(),
            }]
        })
    }

    fn check_here(&self, data: &BTreeMap<String, String>) -> Vec<Violation> {
        let mut violations = Vec::new();
        for key in &self.keys {
            if key.required && !data.contains_key(&key.name) {
                violations.push(Violation::for_key(&key.name, "required", "missing"));
            }
        }
        for (name, value) in data {
            if self.forbidden.contains(name) {
                violations.push(Violation::for_key(name, "forbiddenKeys", "forbidden"));
                continue;
            }
            match self
                .by_name
                .get(name)
                .and_then(|index| self.keys.get(*index))
            {
                Some(key) => key.check(value, &mut violations),
                None if self.unknown_keys == UnknownKeys::Forbid => {
                    violations.push(Violation::for_key(
                        name,
                        "unknownKeys",
                        "not in the schema (unknownKeys: Forbid)",
                    ));
                }
                None => {}
            }
        }
        if !self.rules.is_empty() {
            cel_rules::check_rules(&self.rules, data, &mut violations);
        }
        violations
    }

    /// The ClusterConfigValidators (by name) the schema requires (`spec.validators`); the
    /// controller calls them, this module does not.
    pub fn validators(&self) -> &[String] {
        &self.validators
    }
}

fn check_count(errors: &mut Vec<SchemaError>, field: &str, count: usize, max: u64) {
    if u64::try_from(count).map_or(true, |count| count > max) {
        errors.push(SchemaError::new(
            field,
            format!("{count} entries, more than the {max} allowed"),
        ));
    }
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated labels of lowercase
/// alphanumerics and `-`, each starting and ending with an alphanumeric.
fn is_dns_subdomain(name: &str) -> bool {
    let max = usize::try_from(configrollout_api::schema::DNS1123_SUBDOMAIN_MAX_LENGTH)
        .unwrap_or(usize::MAX);
    !name.is_empty()
        && name.len() <= max
        && name.split('.').all(|label| {
            let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
            label.starts_with(alnum)
                && label.ends_with(alnum)
                && label.chars().all(|c| alnum(c) || c == '-')
        })
}

/// `text` cut to at most `max` characters (with `…` when cut): a compile error of a
/// schema's own text can be long.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", text.get(..at).unwrap_or_default()),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod schema_error_tests;

#[cfg(test)]
mod sentinel_tests;

#[cfg(test)]
mod depth_tests;
