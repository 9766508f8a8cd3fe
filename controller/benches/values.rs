//! ConfigSchema checks (`configrollout_core::values`), on the largest inputs the bounds
//! admit: (a) `check` of a 1,000-key candidate against 1,000 per-key rules of every type
//! plus 2 CEL rules; (b) `check` of one key holding a ~500 KiB JSON document against a
//! nested JSON Schema; (c) `compile` of the 1,000-key schema. Measured in wall time, not
//! the benchmarking thread's CPU time: both run on a thread of their own (a large stack,
//! see `core/src/values/stack.rs`), whose time that measure would not see.

use std::collections::BTreeMap;
use std::hint::black_box;

use configrollout::api::ConfigSchemaSpec;
use configrollout_core::values::{CompiledSchema, compile};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

const KEYS: usize = 1000;

/// Rule `i` of the 1,000-key schema and a value it accepts.
fn key(i: usize) -> (Value, String) {
    let name = format!("key-{i:04}");
    match i % 8 {
        // A schema holds at most `MAX_PATTERNS` regular expressions: the first string
        // keys have one, the others a length.
        0 if i < 8 * 24 => (
            json!({"name": name, "type": "String", "pattern": "^[a-z0-9-]+$", "maxLength": 64}),
            format!("value-{i}"),
        ),
        0 => (
            json!({"name": name, "type": "String", "maxLength": 64}),
            format!("value-{i}"),
        ),
        1 => (
            json!({"name": name, "type": "Integer", "minimum": 0, "maximum": 1_000_000}),
            format!("{}", i * 7),
        ),
        2 => (
            json!({"name": name, "type": "Number", "minimum": 0, "maximum": 1}),
            "0.25".to_owned(),
        ),
        3 => (json!({"name": name, "type": "Boolean"}), "true".to_owned()),
        4 => (
            json!({"name": name, "type": "Duration", "minimum": 0.1, "maximum": 3600}),
            "1m30s".to_owned(),
        ),
        5 => (
            json!({"name": name, "type": "Enum", "values": ["debug", "info", "warn", "error"]}),
            "info".to_owned(),
        ),
        6 => (
            json!({"name": name, "type": "Json", "jsonSchema": {
                "type": "object", "required": ["enabled"],
                "properties": {"enabled": {"type": "boolean"}, "weight": {"type": "integer", "minimum": 0}}}}),
            r#"{"enabled": true, "weight": 3}"#.to_owned(),
        ),
        _ => (
            json!({"name": name, "type": "Yaml", "jsonSchema": {
                "type": "object", "additionalProperties": {"type": "string"}}}),
            "region: eu-west-1\ntier: gold\n".to_owned(),
        ),
    }
}

fn wide() -> Option<(ConfigSchemaSpec, BTreeMap<String, String>)> {
    let (rules, data): (Vec<Value>, BTreeMap<String, String>) = (0..KEYS)
        .map(|i| {
            let (rule, value) = key(i);
            let name = rule["name"].as_str().unwrap_or_default().to_owned();
            (rule, (name, value))
        })
        .unzip();
    let spec = serde_json::from_value(json!({
        "keys": rules,
        "unknownKeys": "Forbid",
        "rules": [
            {"rule": "int(self['key-0001']) <= int(self['key-0009'])", "message": "ordered"},
            {"rule": "self.all(k, size(self[k]) < 4096)"},
        ],
    }))
    .ok()?;
    Some((spec, data))
}

/// A ~500 KiB document: 2,500 services, each with routes and limits.
fn big_document() -> (Value, String) {
    let schema = json!({
        "type": "object",
        "required": ["services"],
        "properties": {"services": {"type": "array", "items": {
            "type": "object",
            "required": ["name", "routes"],
            "additionalProperties": false,
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "maxLength": 63},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 100},
                "routes": {"type": "array", "maxItems": 16, "items": {
                    "type": "object",
                    "required": ["path", "timeout"],
                    "properties": {
                        "path": {"type": "string"},
                        "timeout": {"type": "integer", "minimum": 1},
                        "methods": {"type": "array", "items": {"enum": ["GET", "POST", "PUT", "DELETE"]}},
                    },
                }},
                "limits": {"type": "object", "additionalProperties": {"type": "number"}},
            },
        }}},
    });
    let services: Vec<Value> = (0..2500)
        .map(|i| {
            json!({
                "name": format!("service-{i}"),
                "replicas": 3,
                "routes": [
                    {"path": format!("/api/v1/items/{i}"), "timeout": 30, "methods": ["GET", "POST"]},
                    {"path": format!("/api/v1/health/{i}"), "timeout": 5, "methods": ["GET"]},
                ],
                "limits": {"cpu": 0.5, "memory": 512},
            })
        })
        .collect();
    (schema, json!({"services": services}).to_string())
}

fn bench_values<M: criterion::measurement::Measurement + 'static>(c: &mut Criterion<M>) {
    let Some((spec, data)) = wide() else {
        eprintln!("the benchmark's schema does not parse");
        return;
    };
    let compiled: CompiledSchema = match compile(&spec) {
        Ok(compiled) => compiled,
        Err(errors) => {
            eprintln!("the benchmark's schema does not compile: {errors:?}");
            return;
        }
    };
    assert!(compiled.check(&data).is_empty(), "the candidate is refused");
    c.bench_function("values_check_1000_keys", |b| {
        b.iter(|| black_box(compiled.check(black_box(&data))))
    });

    let (schema, document) = big_document();
    eprintln!("document: {} bytes", document.len());
    let Ok(doc_spec) = serde_json::from_value::<ConfigSchemaSpec>(
        json!({"keys": [{"name": "services.json", "type": "Json", "jsonSchema": schema}]}),
    ) else {
        return;
    };
    let Ok(doc_schema) = compile(&doc_spec) else {
        return;
    };
    let doc_data = BTreeMap::from([("services.json".to_owned(), document)]);
    assert!(
        doc_schema.check(&doc_data).is_empty(),
        "the document is refused"
    );
    c.bench_function("values_check_500k_json", |b| {
        b.iter(|| black_box(doc_schema.check(black_box(&doc_data))))
    });

    c.bench_function("values_compile_1000_keys", |b| {
        b.iter(|| black_box(compile(black_box(&spec)).is_ok()))
    });
}

criterion_group!(wall_time, bench_values);
criterion_main!(wall_time);
