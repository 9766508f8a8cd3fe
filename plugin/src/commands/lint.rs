//! `lint -f FILE`: every ConfigRollout document of a manifest, checked offline against
//! the same validation the controller applies.

use std::path::Path;

use crate::{CliError, EXIT_COMPLETE, EXIT_FAILED};
use configrollout_api::ConfigRollout;
use configrollout_core::engine::validate;

/// `lint -f FILE`: every ConfigRollout document of the file, checked offline.
pub(super) fn lint(file: &Path) -> Result<u8, CliError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| CliError::Message(format!("reading {}: {e}", file.display())))?;
    let report = lint_text(&text);
    for line in &report.lines {
        println!("{}: {line}", file.display());
    }
    Ok(if report.ok {
        EXIT_COMPLETE
    } else {
        EXIT_FAILED
    })
}

/// What `lint` found in a manifest.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct LintReport {
    /// Whether every document is a valid ConfigRollout.
    pub ok: bool,
    /// One line per finding, or per valid rollout.
    pub lines: Vec<String>,
}

pub(super) fn lint_text(text: &str) -> LintReport {
    let mut lines = Vec::new();
    let mut ok = true;
    let mut documents = 0;
    let parsed: Vec<serde_json::Value> = match serde_saphyr::from_multiple(text) {
        Ok(parsed) => parsed,
        Err(error) => {
            return LintReport {
                ok: false,
                lines: vec![format!("not YAML: {error}")],
            };
        }
    };
    for (index, value) in parsed.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        documents += 1;
        let kind = value.get("kind").and_then(serde_json::Value::as_str);
        let api_version = value.get("apiVersion").and_then(serde_json::Value::as_str);
        let expected_version = format!(
            "{}/{}",
            configrollout_api::GROUP,
            configrollout_api::VERSION
        );
        if kind != Some("ConfigRollout") || api_version != Some(expected_version.as_str()) {
            ok = false;
            lines.push(format!(
                "document {}: kind {} apiVersion {} is not a ConfigRollout ({expected_version})",
                index + 1,
                kind.unwrap_or("-"),
                api_version.unwrap_or("-")
            ));
            continue;
        }
        let rollout: ConfigRollout = match serde_json::from_value(value) {
            Ok(rollout) => rollout,
            Err(error) => {
                ok = false;
                lines.push(format!("document {}: {error}", index + 1));
                continue;
            }
        };
        let name = rollout
            .metadata
            .name
            .clone()
            .unwrap_or_else(|| format!("document {}", index + 1));
        let mut errors: Vec<String> = Vec::new();
        if rollout.spec.data.is_some() == rollout.spec.from_config_map.is_some() {
            errors.push("spec: set exactly one of spec.data or spec.fromConfigMap".to_owned());
        }
        if rollout.spec.stages.is_empty() {
            errors.push("spec.stages: at least one stage is required".to_owned());
        }
        errors.extend(validate(&rollout.spec).iter().map(ToString::to_string));
        if errors.is_empty() {
            lines.push(format!("configrollout {name}: valid"));
        } else {
            ok = false;
            lines.extend(
                errors
                    .into_iter()
                    .map(|error| format!("configrollout {name}: {error}")),
            );
        }
    }
    if documents == 0 {
        ok = false;
        lines.push("no ConfigRollout in the file".to_owned());
    }
    LintReport { ok, lines }
}
