//! `docs/reference/chart-values.md`: every value of the Helm chart, from
//! `deploy/chart/values.yaml` (defaults, and the comments above each key) and
//! `deploy/chart/values.schema.json` (types and bounds).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::{Page, cell, generated_header};

/// A key of values.yaml, with the comment above it.
struct Line {
    path: Vec<String>,
    comment: String,
}

/// The keys of a block-style YAML file in order, each with its dotted path (by
/// indentation) and the `#` lines right above it.
fn keys(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    let mut header_done = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            // A blank line ends a comment block: the file's header is no key's.
            header_done = true;
            comment.clear();
            continue;
        }
        if let Some(text) = trimmed.strip_prefix('#') {
            comment.push(text.trim().to_owned());
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            comment.clear();
            continue;
        };
        if key.starts_with('-') || key.contains(' ') || key.is_empty() {
            comment.clear();
            continue;
        }
        while stack.last().is_some_and(|(depth, _)| *depth >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_owned()));
        out.push(Line {
            path: stack.iter().map(|(_, key)| key.clone()).collect(),
            comment: if header_done {
                comment.join(" ")
            } else {
                String::new()
            },
        });
        comment.clear();
    }
    out
}

/// `schema`, or what its `$ref` (`#/definitions/NAME`) points at.
fn resolve<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    schema["$ref"]
        .as_str()
        .and_then(|reference| reference.strip_prefix('#'))
        .and_then(|pointer| root.pointer(pointer))
        .unwrap_or(schema)
}

fn schema_at<'a>(root: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut schema = root;
    for key in path {
        let properties = &resolve(schema, root)["properties"];
        schema = match properties.get(key) {
            Some(child) => child,
            None => {
                let additional = &resolve(schema, root)["additionalProperties"];
                if additional.is_object() {
                    additional
                } else {
                    return None;
                }
            }
        };
    }
    Some(resolve(schema, root))
}

fn type_of(schema: &Value, root: &Value) -> String {
    match &schema["type"] {
        Value::String(type_) if type_ == "array" => {
            format!("[]{}", type_of(resolve(&schema["items"], root), root))
        }
        Value::String(type_) if type_ == "object" && !schema["properties"].is_object() => {
            let values = resolve(&schema["additionalProperties"], root);
            if values.is_object() {
                format!("map[string]{}", type_of(values, root))
            } else {
                "object".to_owned()
            }
        }
        Value::String(type_) => type_.clone(),
        Value::Array(types) => types
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => String::new(),
    }
}

fn bounds_of(schema: &Value) -> Vec<String> {
    let mut bounds = Vec::new();
    match (schema["minimum"].as_i64(), schema["maximum"].as_i64()) {
        (Some(min), Some(max)) => bounds.push(format!("{min} to {max}")),
        (Some(min), None) => bounds.push(format!("at least {min}")),
        (None, Some(max)) => bounds.push(format!("at most {max}")),
        (None, None) => {}
    }
    if let Some(n) = schema["minLength"].as_u64() {
        let unit = if n == 1 { "character" } else { "characters" };
        bounds.push(format!("at least {n} {unit}"));
    }
    if let Some(n) = schema["maxLength"].as_u64() {
        bounds.push(format!("at most {n} characters"));
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        bounds.push(format!("pattern `{}`", cell(pattern)));
    }
    if let Some(values) = schema["enum"].as_array() {
        bounds.push(format!(
            "one of {}",
            values
                .iter()
                .map(|value| format!(
                    "`{}`",
                    value.as_str().map_or(value.to_string(), str::to_owned)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    bounds
}

/// The page.
pub fn page(root: &Path) -> Result<Page, String> {
    let values_path = root.join("deploy/chart/values.yaml");
    let schema_path = root.join("deploy/chart/values.schema.json");
    let values_text = std::fs::read_to_string(&values_path)
        .map_err(|error| format!("read {}: {error}", values_path.display()))?;
    let values: Value = serde_saphyr::from_str(&values_text)
        .map_err(|error| format!("parse {}: {error}", values_path.display()))?;
    let root_schema: Value = serde_json::from_str(
        &std::fs::read_to_string(&schema_path)
            .map_err(|error| format!("read {}: {error}", schema_path.display()))?,
    )
    .map_err(|error| format!("parse {}: {error}", schema_path.display()))?;

    let mut out = generated_header("Helm chart values");
    out.push_str(
        "The values of `deploy/chart` with their defaults and the comments of \
         `deploy/chart/values.yaml`, types and bounds from `values.schema.json` (which \
         refuses unknown keys and wrong types). How to install: [install](../install.md).\n\n\
         | value | type | default | bounds | description |\n|---|---|---|---|---|\n",
    );
    let lines = keys(&values_text);
    for line in &lines {
        let mut default = &values;
        for key in &line.path {
            default = &default[key.as_str()];
        }
        let schema = schema_at(&root_schema, &line.path);
        let leaf = !default.is_object() || default.as_object().is_some_and(|map| map.is_empty());
        let inline = lines.iter().all(|other| {
            other.path.len() <= line.path.len() || other.path[..line.path.len()] != line.path[..]
        });
        let default_text = if leaf || inline {
            format!("`{}`", serde_json::to_string(default).unwrap_or_default())
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            line.path.join("."),
            schema
                .map(|schema| type_of(schema, &root_schema))
                .unwrap_or_default(),
            default_text,
            schema.map(bounds_of).unwrap_or_default().join("; "),
            cell(&line.comment)
        );
    }
    Ok(Page {
        path: "chart-values.md".to_owned(),
        content: out,
    })
}
