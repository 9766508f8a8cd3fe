//! `Json` and `Yaml` keys: the value read as one document, then (optionally) validated
//! against the key's JSON Schema (draft 2020-12).
//!
//! Bounds: JSON by serde_json's nesting limit (128); YAML by a parse budget ([`yaml_options`]:
//! depth, nodes, anchors, aliases and the events alias replay may inject, so that an alias
//! bomb is refused before it expands); the JSON Schema by a nesting limit at compile and by
//! linear-time patterns (the `regex` engine with a size limit, not the backtracking default);
//! the errors of one document by [`MAX_VIOLATIONS_PER_KEY`].
//!
//! Nothing is fetched: a `$ref` or `$dynamicRef` must be a fragment (`#...`) of the schema
//! itself, which [`compile`](DocumentCheck::compile) checks before the validator is built,
//! and the validator is built offline anyway.
//!
//! What a violation says is built here from the error's kind, never the crate's `Display`
//! (which quotes the instance), and its pointer names only array indices and property
//! names the schema itself spells.

use std::collections::BTreeSet;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{PatternOptions, ValidationError, Validator};
use serde_json::Value;

use super::{
    MAX_SCHEMA_MESSAGE_CHARS, MAX_VIOLATIONS_PER_KEY, PATTERN_SIZE_LIMIT, Violation, truncate,
};

/// Deepest nesting a key's JSON Schema may have (objects and arrays).
pub(super) const MAX_JSON_SCHEMA_DEPTH: usize = 64;

/// How a document key's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Json,
    Yaml,
}

/// A document key's compiled check.
pub(super) struct DocumentCheck {
    format: Format,
    schema: Option<CompiledJsonSchema>,
}

struct CompiledJsonSchema {
    validator: Validator,
    /// Every property name the schema spells (`properties`, `required`, ...): the pointer
    /// segments a violation may show.
    named: BTreeSet<String>,
}

impl DocumentCheck {
    /// Compiles `schema` for `format`, or says (in the schema's own words) why not.
    pub(super) fn compile(format: Format, schema: Option<&Value>) -> Result<Self, String> {
        let Some(schema) = schema else {
            return Ok(DocumentCheck {
                format,
                schema: None,
            });
        };
        let named = scan_schema(schema)?;
        let validator = jsonschema::draft202012::options()
            .offline()
            .with_pattern_options(
                PatternOptions::regex()
                    .size_limit(PATTERN_SIZE_LIMIT)
                    .dfa_size_limit(PATTERN_SIZE_LIMIT),
            )
            .build(schema)
            .map_err(|error| {
                // The instance of a schema error is the schema: the author's own text.
                let at = error.instance_path().as_str();
                let at = if at.is_empty() { "/" } else { at };
                truncate(
                    &format!("not a valid JSON Schema (draft 2020-12) at {at}: {error}"),
                    MAX_SCHEMA_MESSAGE_CHARS,
                )
            })?;
        Ok(DocumentCheck {
            format,
            schema: Some(CompiledJsonSchema { validator, named }),
        })
    }

    /// Adds to `out` why `value` is not a document of this key's format, or the first
    /// [`MAX_VIOLATIONS_PER_KEY`] ways it breaks the key's JSON Schema.
    pub(super) fn check(&self, key: &str, value: &str, out: &mut Vec<Violation>) {
        let document = match self.format {
            Format::Json => serde_json::from_str::<Value>(value).map_err(|error| {
                format!(
                    "not a JSON document ({} at line {}, column {})",
                    json_error_class(&error),
                    error.line(),
                    error.column()
                )
            }),
            Format::Yaml => serde_saphyr::from_str_with_options::<Value>(value, yaml_options())
                .map_err(|error| yaml_error_message(&error)),
        };
        let document = match document {
            Ok(document) => document,
            Err(message) => {
                out.push(Violation::for_key(key, "type", message));
                return;
            }
        };
        let Some(schema) = &self.schema else {
            return;
        };
        for error in schema
            .validator
            .iter_errors(&document)
            .take(MAX_VIOLATIONS_PER_KEY)
        {
            out.push(Violation {
                key: Some(key.to_owned()),
                rule: "jsonSchema".to_owned(),
                pointer: Some(redacted_pointer(
                    &document,
                    error.instance_path().as_str(),
                    &schema.named,
                )),
                message: format!(
                    "{} (schema {})",
                    describe(&error),
                    display_location(error.schema_path().as_str())
                ),
            });
        }
    }
}

/// The budget a `Yaml` value is parsed under: a ConfigMap holds at most 1 MiB, and no
/// configuration document needs more than these.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = 64;
    budget.max_nodes = 200_000;
    budget.max_events = 500_000;
    budget.max_anchors = 1_000;
    budget.max_aliases = 1_000;
    budget.max_documents = 1;
    budget.max_merge_keys = 1_000;
    budget.max_total_scalar_bytes = 2 << 20;
    budget.max_recorded_anchor_events = 100_000;
    budget.max_recorded_anchor_bytes = 2 << 20;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // What aliases may add to the document once expanded: bounds an alias bomb
    // (`a: &a [x, x]`, `b: &b [*a, *a]`, ...) to as many nodes as a plain document.
    options.alias_limits.max_total_replayed_events = 100_000;
    options.alias_limits.max_replay_stack_depth = 16;
    options.alias_limits.max_alias_expansions_per_anchor = 1_000;
    options
}

/// Why a `Yaml` value was refused, with where, never what (the parser's own message may
/// quote the text).
fn yaml_error_message(error: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error as E;
    use serde_saphyr::budget::BudgetBreach;
    let mut inner = error;
    // Bounded: each wrapper owns the next in a box, built by the parser a few levels deep.
    while let E::WithSnippet { error, .. } | E::AliasError { error, .. } = inner {
        inner = error;
    }
    let class = match inner {
        E::Budget {
            breach: BudgetBreach::Documents { .. },
            ..
        }
        | E::MultipleDocuments { .. } => "more than one document",
        E::Budget { .. } => "over the parse budget (depth, nodes, anchors or aliases)",
        E::AliasReplayLimitExceeded { .. }
        | E::AliasExpansionLimitExceeded { .. }
        | E::AliasReplayStackDepthExceeded { .. }
        | E::AliasReplayCounterOverflow { .. } => "aliases expand past the budget",
        E::DuplicateMappingKey { .. } => "a duplicate mapping key",
        E::UnknownAnchor { .. } => "an alias to an unknown anchor",
        _ => "invalid",
    };
    match error.location() {
        Some(at) => format!(
            "not a YAML document ({class} at line {}, column {})",
            at.line(),
            at.column()
        ),
        None => format!("not a YAML document ({class})"),
    }
}

fn json_error_class(error: &serde_json::Error) -> &'static str {
    match error.classify() {
        serde_json::error::Category::Eof => "unexpected end",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "unsupported data",
        serde_json::error::Category::Io => "read error",
    }
}

/// What is wrong, from the error's kind: limits and names the schema spells, never the
/// instance (nor, for `additionalProperties`, the names of the extra properties).
fn describe(error: &ValidationError<'_>) -> String {
    use ValidationErrorKind as K;
    let limit = |value: &Value| truncate(&value.to_string(), 64);
    match error.kind() {
        K::Type { kind } => {
            let types: Vec<String> = match kind {
                TypeKind::Single(single) => vec![single.to_string()],
                TypeKind::Multiple(set) => set.iter().map(|ty| ty.to_string()).collect(),
            };
            format!("not of type {}", types.join(" or "))
        }
        K::Enum { .. } => "not one of the values of `enum`".to_owned(),
        K::Constant { .. } => "not the value of `const`".to_owned(),
        K::Pattern { pattern } => format!("does not match `{}`", truncate(pattern, 128)),
        K::BacktrackLimitExceeded { .. } | K::RegexEngineFailure { .. } => {
            "`pattern` could not be evaluated".to_owned()
        }
        K::Minimum { limit: l } => format!("below minimum {}", limit(l)),
        K::Maximum { limit: l } => format!("above maximum {}", limit(l)),
        K::ExclusiveMinimum { limit: l } => format!("not above exclusiveMinimum {}", limit(l)),
        K::ExclusiveMaximum { limit: l } => format!("not below exclusiveMaximum {}", limit(l)),
        K::MultipleOf { multiple_of } => format!("not a multiple of {multiple_of}"),
        K::MinLength { limit } => format!("shorter than {limit} characters"),
        K::MaxLength { limit } => format!("longer than {limit} characters"),
        K::MinItems { limit } => format!("fewer than {limit} items"),
        K::MaxItems { limit } => format!("more than {limit} items"),
        K::MinProperties { limit } => format!("fewer than {limit} properties"),
        K::MaxProperties { limit } => format!("more than {limit} properties"),
        K::UniqueItems => "items are not unique".to_owned(),
        K::Contains => "no item matches `contains`".to_owned(),
        K::Required { property } => match property.as_str() {
            Some(name) => format!("property `{}` is required", truncate(name, 128)),
            None => "a required property is missing".to_owned(),
        },
        K::AdditionalProperties { unexpected } => {
            format!("{} properties not allowed", unexpected.len())
        }
        K::UnevaluatedProperties { unexpected } => {
            format!("{} unevaluated properties not allowed", unexpected.len())
        }
        K::AdditionalItems { .. } => "additional items not allowed".to_owned(),
        K::UnevaluatedItems { unexpected } => {
            format!("{} unevaluated items not allowed", unexpected.len())
        }
        K::PropertyNames { .. } => "a property name is not valid".to_owned(),
        K::AnyOf { .. } => "not valid under any schema of `anyOf`".to_owned(),
        K::OneOfNotValid { .. } => "not valid under any schema of `oneOf`".to_owned(),
        K::OneOfMultipleValid { .. } => "valid under more than one schema of `oneOf`".to_owned(),
        K::Not { .. } => "valid under the schema of `not`".to_owned(),
        K::FalseSchema => "not allowed (schema `false`)".to_owned(),
        K::Format { format } => format!("not a valid `{}`", truncate(format, 64)),
        K::ContentEncoding { .. } | K::FromUtf8 { .. } => "not valid `contentEncoding`".to_owned(),
        K::ContentMediaType { .. } => "not valid `contentMediaType`".to_owned(),
        K::Referencing(_) => "a reference could not be resolved".to_owned(),
        K::Custom { keyword, .. } => format!("refused by `{}`", truncate(keyword, 64)),
    }
}

fn display_location(location: &str) -> &str {
    if location.is_empty() { "/" } else { location }
}

/// `pointer` (into `document`) with each object property the schema does not spell written
/// `*`: a property name is part of the value. Array indices are kept.
fn redacted_pointer(document: &Value, pointer: &str, named: &BTreeSet<String>) -> String {
    let mut out = String::new();
    let mut node = Some(document);
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        out.push('/');
        match node {
            Some(Value::Array(items)) => {
                out.push_str(raw);
                node = segment.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            Some(Value::Object(map)) => {
                if named.contains(&segment) {
                    out.push_str(raw);
                } else {
                    out.push('*');
                }
                node = map.get(&segment);
            }
            _ => {
                out.push('*');
                node = None;
            }
        }
    }
    out
}

/// How many regular expressions a JSON Schema asks to compile: each `pattern` string and
/// each entry of a `patternProperties` object, wherever they stand (one in data, under
/// `const` or `enum`, counts too: over-counting only refuses sooner). Without recursion.
pub(super) fn count_patterns(schema: &Value) -> usize {
    let mut count: usize = 0;
    let mut stack = vec![schema];
    while let Some(node) = stack.pop() {
        match node {
            Value::Object(map) => {
                for (name, value) in map {
                    match (name.as_str(), value) {
                        ("pattern", Value::String(_)) => count = count.saturating_add(1),
                        ("patternProperties", Value::Object(entries)) => {
                            count = count.saturating_add(entries.len());
                        }
                        _ => {}
                    }
                    stack.push(value);
                }
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    count
}

/// Walks the schema once, without recursion: refuses one nested deeper than
/// [`MAX_JSON_SCHEMA_DEPTH`] or with a reference outside itself, and collects the property
/// names it spells.
fn scan_schema(schema: &Value) -> Result<BTreeSet<String>, String> {
    /// Keywords whose value is data, not schema: a `$ref` there is not a reference.
    const DATA_KEYWORDS: &[&str] = &["const", "enum", "default", "examples"];
    /// Keywords whose value maps names (or patterns) to schemas.
    const MAP_KEYWORDS: &[&str] = &[
        "properties",
        "patternProperties",
        "dependentSchemas",
        "dependentRequired",
        "$defs",
        "definitions",
    ];
    /// Of those, the ones whose names are property names of the instance.
    const NAMING_KEYWORDS: &[&str] = &["properties", "dependentRequired", "dependentSchemas"];
    #[derive(Clone, Copy, PartialEq)]
    enum Node {
        /// A schema (or a value whose keys are keywords).
        Schema,
        /// The value of a keyword in `MAP_KEYWORDS`: its keys are names, not keywords.
        Names,
    }
    let mut named = BTreeSet::new();
    let mut stack: Vec<(&Value, usize, Node)> = vec![(schema, 0, Node::Schema)];
    while let Some((node, depth, kind)) = stack.pop() {
        if depth > MAX_JSON_SCHEMA_DEPTH {
            return Err(format!("nested deeper than {MAX_JSON_SCHEMA_DEPTH} levels"));
        }
        let child = depth.saturating_add(1);
        match node {
            Value::Object(map) if kind == Node::Names => {
                for value in map.values() {
                    stack.push((value, child, Node::Schema));
                }
            }
            Value::Object(map) => {
                for (name, value) in map {
                    let name = name.as_str();
                    if matches!(name, "$ref" | "$dynamicRef")
                        && let Value::String(reference) = value
                        && !reference.starts_with('#')
                    {
                        return Err(format!(
                            "`{name}` to `{}`: only references inside the schema (`#...`) \
                             are resolved, nothing is fetched",
                            truncate(reference, 128)
                        ));
                    }
                    if name == "required"
                        && let Value::Array(items) = value
                    {
                        named.extend(items.iter().filter_map(Value::as_str).map(str::to_owned));
                    }
                    if NAMING_KEYWORDS.contains(&name)
                        && let Value::Object(names) = value
                    {
                        named.extend(names.keys().cloned());
                    }
                    if MAP_KEYWORDS.contains(&name) {
                        stack.push((value, child, Node::Names));
                    } else if !DATA_KEYWORDS.contains(&name) {
                        stack.push((value, child, Node::Schema));
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    stack.push((item, child, Node::Schema));
                }
            }
            _ => {}
        }
    }
    Ok(named)
}
