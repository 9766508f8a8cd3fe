//! `ConfigSchema` (namespaced, the service team's) and `ClusterConfigSchema` (the
//! platform's): what a candidate revision's key/values must satisfy before the controller
//! declares it. A rollout names the schemas it follows in `spec.schemas`; the grant of
//! its namespace can require ClusterConfigSchemas it cannot drop.
//!
//! The types only describe the rules; the checks live in `configrollout-core`'s
//! `values` module, so that the controller and `kubectl configrollout lint` run one code.

use kube::CustomResource;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::schema::{self, Rule};

/// Most per-key rules a schema holds (as many as a ConfigMap has keys).
pub const MAX_SCHEMA_KEYS: u64 = 1000;
/// Most CEL rules a schema holds.
pub const MAX_SCHEMA_RULES: u64 = 32;
/// Longest CEL rule, and longest message of one.
pub const MAX_SCHEMA_RULE_LENGTH: u64 = 2048;
/// Longest regular expression a key rule may hold.
pub const MAX_PATTERN_LENGTH: u64 = 1024;
/// Most values an `Enum` key may list.
pub const MAX_ENUM_VALUES: u64 = 256;
/// Longest value an `Enum` key may list.
pub const MAX_ENUM_VALUE_LENGTH: u64 = 1024;
/// Most external validators a schema names.
pub const MAX_SCHEMA_VALIDATORS: u64 = 8;
/// Most schemas a rollout names.
pub const MAX_ROLLOUT_SCHEMAS: u64 = 8;
/// Most schemas a revision records: the rollout's, the ones it dropped, the grant's.
pub const MAX_CHECKED_SCHEMAS: u64 = 32;

/// What a namespace's service team requires of the configuration its rollouts declare.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "ConfigSchema",
    plural = "configschemas",
    namespaced,
    derive = "PartialEq",
    shortname = "cfgschema",
    category = "configrollout-all",
    doc = "Rules a candidate revision's key/values must satisfy before it is declared: \
           per-key types, JSON Schema for documents, CEL across keys, external validators.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSchemaSpec {
    /// Rules per key, one entry per key name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = key_rules_list)]
    pub keys: Vec<KeyRule>,
    /// Keys not listed in `keys`: `Allow` (default) or `Forbid`.
    #[serde(default)]
    pub unknown_keys: UnknownKeys,
    /// Keys that must not be present (e.g. a setting being retired).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::string_set(MAX_SCHEMA_KEYS, schema::CONFIG_MAP_KEY_MAX_LENGTH))]
    pub forbidden_keys: Vec<String>,
    /// CEL rules over the whole configuration: `self` is the map of key to value (all
    /// strings), e.g. `int(self.burst) >= int(self.rate)`. A rule that does not evaluate
    /// to `true` (false, an error, a missing key) refuses the candidate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::max_items(MAX_SCHEMA_RULES))]
    pub rules: Vec<ConfigRule>,
    /// ClusterConfigValidators (by name) that must accept the candidate. A validator that
    /// does not answer in time refuses it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = validator_names)]
    pub validators: Vec<String>,
}

/// The platform's schema: the same rules, cluster-scoped, so that only a platform admin
/// edits them. A rollout names one in `spec.schemas` with `kind: ClusterConfigSchema`,
/// or its namespace's grant requires it (annotation `configrollout.dev/required-schemas`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "ClusterConfigSchema",
    plural = "clusterconfigschemas",
    derive = "PartialEq",
    shortname = "ccfgschema",
    category = "configrollout-all",
    doc = "The platform's rules for candidate revisions (cluster-scoped ConfigSchema).",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfigSchemaSpec {
    /// The rules, as a ConfigSchema holds them.
    #[serde(flatten)]
    pub rules: ConfigSchemaSpec,
}

/// Whether keys a schema does not list are accepted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum UnknownKeys {
    /// Keys not listed are accepted without checks.
    #[default]
    Allow,
    /// Keys not listed refuse the candidate.
    Forbid,
}

/// What one key's value must be.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = key_rule_rules)]
pub struct KeyRule {
    /// The key (a ConfigMap data key).
    #[schemars(length(min = 1), transform = key_name)]
    pub name: String,
    /// The key must be present.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// How the value is read.
    #[serde(rename = "type")]
    pub value_type: ValueType,
    /// `String`: a regular expression (Rust `regex` syntax, linear time) the whole value
    /// must match; anchor it yourself with `^...$`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::multiline_text(MAX_PATTERN_LENGTH))]
    pub pattern: Option<String>,
    /// `String`: fewest characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_length: Option<u32>,
    /// `String`: most characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_length: Option<u32>,
    /// `Integer`, `Number`: smallest value; `Duration`: shortest, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<f64>,
    /// `Integer`, `Number`: largest value; `Duration`: longest, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<f64>,
    /// `Enum`: the accepted values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::string_set(MAX_ENUM_VALUES, MAX_ENUM_VALUE_LENGTH))]
    pub values: Vec<String>,
    /// `Json`, `Yaml`: a JSON Schema (draft 2020-12) the document must satisfy. Only
    /// references inside the schema itself are resolved: nothing is fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = any_object)]
    pub json_schema: Option<serde_json::Value>,
}

/// How a key's value (always a string in a ConfigMap) is read.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ValueType {
    /// Any text; `pattern`, `minLength` and `maxLength` apply.
    #[default]
    String,
    /// A base-10 integer (`-12`, `300`); `minimum` and `maximum` apply.
    Integer,
    /// A decimal or scientific number (`0.25`, `1e3`); `minimum` and `maximum` apply.
    Number,
    /// `true` or `false`.
    Boolean,
    /// A Go-style duration (`300ms`, `1m30s`); `minimum` and `maximum` in seconds apply.
    Duration,
    /// One of `values`.
    Enum,
    /// A JSON document; `jsonSchema` applies.
    Json,
    /// A YAML document (one); `jsonSchema` applies to it read as JSON.
    Yaml,
}

/// One CEL rule over the whole configuration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigRule {
    /// The expression; it must evaluate to `true`. At most one macro (`all`, `exists`,
    /// `exists_one`, `map`, `filter`) per rule, so that a rule's cost stays linear in the
    /// number of keys.
    #[schemars(length(min = 1), transform = schema::multiline_text(MAX_SCHEMA_RULE_LENGTH))]
    pub rule: String,
    /// What the refusal says (never the value). Default: the rule's position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::multiline_text(MAX_SCHEMA_RULE_LENGTH))]
    pub message: Option<String>,
}

/// Which kind a rollout's schema reference names.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum SchemaKind {
    /// A ConfigSchema in the rollout's namespace.
    #[default]
    ConfigSchema,
    /// A ClusterConfigSchema.
    ClusterConfigSchema,
}

/// A schema a rollout follows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaRef {
    /// `ConfigSchema` (default; in the rollout's namespace) or `ClusterConfigSchema`.
    #[serde(default)]
    pub kind: SchemaKind,
    /// Name of the schema.
    #[schemars(transform = schema::dns_subdomain("spec.schemas[].name"))]
    pub name: String,
}

fn key_name(schema: &mut Schema) {
    schema::set(schema, "maxLength", schema::CONFIG_MAP_KEY_MAX_LENGTH);
    schema::set(schema, "pattern", schema::CONFIG_MAP_KEY_PATTERN);
}

fn key_rules_list(schema: &mut Schema) {
    schema::set(schema, "maxItems", MAX_SCHEMA_KEYS);
    schema::set(schema, "x-kubernetes-list-type", "map");
    schema::set(schema, "x-kubernetes-list-map-keys", json!(["name"]));
}

fn validator_names(schema: &mut Schema) {
    schema::string_set(MAX_SCHEMA_VALIDATORS, schema::DNS1123_SUBDOMAIN_MAX_LENGTH)(schema);
}

/// A free-form object kept as written (a JSON Schema).
fn any_object(schema: &mut Schema) {
    *schema = Schema::from(
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
}

/// Per-type fields only where they mean something, so that a typo is refused at apply.
fn key_rule_rules(schema: &mut Schema) {
    schema::add_rules(
        schema,
        &[
            Rule::new(
                "!has(self.pattern) && !has(self.minLength) && !has(self.maxLength) || \
                 self.type == 'String'",
                "pattern, minLength and maxLength apply to type String only",
            ),
            Rule::new(
                "!has(self.minimum) && !has(self.maximum) || \
                 self.type in ['Integer', 'Number', 'Duration']",
                "minimum and maximum apply to types Integer, Number and Duration only",
            ),
            Rule::new(
                "(self.type == 'Enum') == (has(self.values) && size(self.values) > 0)",
                "type Enum needs values, and only type Enum takes them",
            ),
            Rule::new(
                "!has(self.jsonSchema) || self.type in ['Json', 'Yaml']",
                "jsonSchema applies to types Json and Yaml only",
            ),
        ],
    );
}
