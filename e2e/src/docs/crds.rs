//! `docs/reference/crds/*.md`: every field of every CRD, walked from the openAPI schemas
//! of `configrollout_api::crds()` (the same objects `make crds` writes to `crds/`).

use std::fmt::Write as _;

use serde_json::Value;

use super::{Page, cell, generated_header};

/// One row: a field and what its schema says of it.
struct Field {
    path: String,
    type_: String,
    required: bool,
    default: Option<String>,
    bounds: Vec<String>,
    description: String,
}

/// The pages, one per CRD, and the values `status.phase` of a ConfigRollout may take.
pub fn pages() -> Result<(Vec<Page>, Vec<String>), String> {
    let mut pages = Vec::new();
    let mut phases = Vec::new();
    for crd in configrollout::api::crds() {
        let crd = serde_json::to_value(&crd).map_err(|error| format!("CRD as JSON: {error}"))?;
        let kind = crd["spec"]["names"]["kind"]
            .as_str()
            .ok_or("a CRD without spec.names.kind")?
            .to_owned();
        if kind == "ConfigRollout" {
            let phase = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
                ["properties"]["phase"];
            phases = enum_values(phase);
        }
        pages.push(Page {
            path: format!("crds/{}.md", kind.to_lowercase()),
            content: crd_page(&kind, &crd),
        });
    }
    if phases.is_empty() {
        return Err("ConfigRollout's status.phase lists no values".to_owned());
    }
    Ok((pages, phases))
}

/// The values of a schema's `enum` (or of its `anyOf`/`oneOf` branches' enums).
fn enum_values(schema: &Value) -> Vec<String> {
    let mut values: Vec<String> = schema["enum"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|value| value.as_str().map(str::to_owned))
        .collect();
    for branch in ["anyOf", "oneOf"] {
        for alternative in schema[branch].as_array().into_iter().flatten() {
            values.extend(enum_values(alternative));
        }
    }
    values
}

fn crd_page(kind: &str, crd: &Value) -> String {
    let spec = &crd["spec"];
    let mut out = generated_header(kind);
    let _ = writeln!(
        out,
        "`{}/{}`, {} (`{}`{}{}). From `configrollout_api::crds()` (`api/src`), the types \
         `crds/{}.yaml` is generated from.\n",
        spec["group"].as_str().unwrap_or_default(),
        spec["versions"][0]["name"].as_str().unwrap_or_default(),
        match spec["scope"].as_str() {
            Some("Cluster") => "cluster-scoped",
            _ => "namespaced",
        },
        spec["names"]["plural"].as_str().unwrap_or_default(),
        spec["names"]["shortNames"]
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|name| format!(", short name `{name}`"))
                    .collect::<String>()
            })
            .unwrap_or_default(),
        spec["names"]["categories"]
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|name| format!(", category `{name}`"))
                    .collect::<String>()
            })
            .unwrap_or_default(),
        crd["metadata"]["name"].as_str().unwrap_or_default(),
    );
    for version in spec["versions"].as_array().into_iter().flatten() {
        let schema = &version["schema"]["openAPIV3Schema"];
        if let Some(description) = schema["description"].as_str() {
            let _ = writeln!(out, "{}\n", one_line(description));
        }
        if let Some(columns) = version["additionalPrinterColumns"].as_array() {
            out.push_str(
                "`kubectl get` columns:\n\n| column | type | from | what |\n|---|---|---|---|\n",
            );
            for column in columns {
                let _ = writeln!(
                    out,
                    "| {} | {} | `{}` | {} |",
                    column["name"].as_str().unwrap_or_default(),
                    column["type"].as_str().unwrap_or_default(),
                    column["jsonPath"].as_str().unwrap_or_default(),
                    cell(column["description"].as_str().unwrap_or_default())
                );
            }
            out.push('\n');
        }
        if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
            out.push_str("Rules on the whole object:\n\n");
            for rule in rules {
                let _ = writeln!(out, "- {}", rule_text(rule));
            }
            out.push('\n');
        }
        for top in ["spec", "status"] {
            let Some(part) = schema["properties"].get(top) else {
                continue;
            };
            let mut fields = Vec::new();
            walk(top, part, false, &mut fields);
            let _ = writeln!(
                out,
                "## {top}\n\n| field | type | default | bounds and rules | description |\n|---|---|---|---|---|"
            );
            for field in fields {
                let _ = writeln!(
                    out,
                    "| `{}` | {}{} | {} | {} | {} |",
                    field.path,
                    field.type_,
                    if field.required { ", required" } else { "" },
                    field
                        .default
                        .map(|default| format!("`{}`", cell(&default)))
                        .unwrap_or_default(),
                    field.bounds.join("; "),
                    cell(&field.description)
                );
            }
            out.push('\n');
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn rule_text(rule: &Value) -> String {
    let message = rule["message"]
        .as_str()
        .map(one_line)
        .or_else(|| rule["messageExpression"].as_str().map(one_line))
        .unwrap_or_default();
    let text = rule["rule"].as_str().map(one_line).unwrap_or_default();
    if message.is_empty() {
        format!("`{}`", cell(&text).replace('`', "'"))
    } else {
        cell(&message)
    }
}

fn type_of(schema: &Value) -> String {
    if schema["x-kubernetes-int-or-string"] == Value::Bool(true) {
        return "int or string".to_owned();
    }
    let base = schema["type"].as_str().unwrap_or("");
    let format = schema["format"]
        .as_str()
        .map(|format| format!(" ({format})"))
        .unwrap_or_default();
    match base {
        "array" => format!("[]{}", type_of(&schema["items"])),
        "object" if schema["properties"].is_object() => "object".to_owned(),
        "object" if schema["additionalProperties"].is_object() => {
            format!("map[string]{}", type_of(&schema["additionalProperties"]))
        }
        "object" if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) => {
            "object (any fields)".to_owned()
        }
        "" if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) => {
            "any".to_owned()
        }
        "" => "any".to_owned(),
        other => format!("{other}{format}"),
    }
}

fn bounds_of(schema: &Value) -> Vec<String> {
    let mut bounds = Vec::new();
    let number = |key: &str| schema[key].as_f64().map(format_number);
    if let (Some(min), Some(max)) = (number("minimum"), number("maximum")) {
        bounds.push(format!("{min} to {max}"));
    } else if let Some(min) = number("minimum") {
        bounds.push(format!("at least {min}"));
    } else if let Some(max) = number("maximum") {
        bounds.push(format!("at most {max}"));
    }
    for (key, what) in [
        ("minLength", "characters, at least"),
        ("maxLength", "characters, at most"),
        ("minItems", "items, at least"),
        ("maxItems", "items, at most"),
        ("minProperties", "entries, at least"),
        ("maxProperties", "entries, at most"),
    ] {
        if let Some(n) = schema[key].as_u64() {
            let (unit, bound) = what.split_once(", ").unwrap_or((what, ""));
            let unit = if n == 1 {
                unit.strip_suffix('s').unwrap_or(unit)
            } else {
                unit
            };
            let unit = if unit == "entrie" { "entry" } else { unit };
            bounds.push(format!("{bound} {n} {unit}"));
        }
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        bounds.push(format!("pattern `{}`", cell(pattern).replace('`', "'")));
    }
    let values = enum_values(schema);
    if !values.is_empty() {
        bounds.push(format!(
            "one of {}",
            values
                .iter()
                .map(|value| format!("`{value}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(list_type) = schema["x-kubernetes-list-type"].as_str() {
        let keys = schema["x-kubernetes-list-map-keys"]
            .as_array()
            .map(|keys| {
                format!(
                    " (keys {})",
                    keys.iter()
                        .filter_map(Value::as_str)
                        .map(|key| format!("`{key}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .unwrap_or_default();
        bounds.push(format!("list type `{list_type}`{keys}"));
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        bounds.push(rule_text(rule));
    }
    bounds
}

fn format_number(number: f64) -> String {
    if number.fract() == 0.0 && number.abs() < 1e15 {
        format!("{}", number as i64)
    } else {
        format!("{number}")
    }
}

fn walk(path: &str, schema: &Value, required: bool, out: &mut Vec<Field>) {
    let mut bounds = bounds_of(schema);
    // An array's element rules belong to the array's row: its fields follow as `path[].x`.
    if schema["type"] == "array" {
        bounds.extend(
            bounds_of(&schema["items"])
                .into_iter()
                .map(|bound| format!("each: {bound}")),
        );
    }
    out.push(Field {
        path: path.to_owned(),
        type_: type_of(schema),
        required,
        default: schema
            .get("default")
            .map(|default| serde_json::to_string(default).unwrap_or_default()),
        bounds,
        description: one_line(schema["description"].as_str().unwrap_or_default()),
    });
    children(path, schema, out);
}

/// The rows of the fields under `schema` (an object's properties, an array's elements',
/// a map's values').
fn children(path: &str, schema: &Value, out: &mut Vec<Field>) {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(properties) = schema["properties"].as_object() {
        let mut names: Vec<&String> = properties.keys().collect();
        names.sort();
        for name in names {
            walk(
                &format!("{path}.{name}"),
                &properties[name.as_str()],
                required.contains(&name.as_str()),
                out,
            );
        }
    }
    if schema["type"] == "array" {
        children(&format!("{path}[]"), &schema["items"], out);
    }
    if schema["additionalProperties"].is_object() {
        children(&format!("{path}.*"), &schema["additionalProperties"], out);
    }
}
