//! `lint -f FILE [--schema FILE]...`: every ConfigRollout document of a manifest, checked
//! offline against the same validation the controller applies: the spec, and the values
//! of a `spec.data` rollout against the schemas given (ConfigSchemas the rollout names,
//! every ClusterConfigSchema), from `--schema` files, the linted file itself and, with
//! `--from-hub`, the hub (the schemas the rollouts name, the ClusterConfigSchemas their
//! grants require). External validators are the platform's and are not called by
//! `lint`; it says which ones the controller will ask.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt};

use crate::hub::Hub;
use crate::render::printable;
use crate::{CliError, EXIT_COMPLETE, EXIT_FAILED};
use configrollout_api::{
    ClusterConfigSchema, ClusterGateTemplate, ConfigRollout, ConfigSchema, ConfigSchemaSpec,
    GateTemplate, GateTemplateSpec, SchemaKind,
};
use configrollout_core::engine::gate_templates::{self, TemplateKey, TemplateObject, Templates};
use configrollout_core::engine::tenancy::REQUIRED_SCHEMAS;
use configrollout_core::engine::validate;
use configrollout_core::values;

/// `lint -f FILE`: every ConfigRollout document of the file, checked offline, with the
/// schemas of `schema_files` and, given `hub`, those read from it.
pub(super) async fn lint(
    file: &Path,
    schema_files: &[PathBuf],
    hub: Option<&Hub>,
) -> Result<u8, CliError> {
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|e| CliError::Message(format!("reading {}: {e}", path.display())))
    };
    let text = read(file)?;
    let mut schemas = Schemas::default();
    let mut schema_errors = Vec::new();
    for path in schema_files {
        for problem in schemas.add_file(&read(path)?) {
            schema_errors.push(format!("{}: {problem}", path.display()));
        }
    }
    if let Some(hub) = hub {
        schemas.read_from_hub(hub, &text).await?;
    }
    // Schema errors and violations quote the schemas' own text (a pattern, a rule),
    // which whoever may write a ConfigSchema wrote: shown as text, never as terminal
    // control sequences.
    for line in &schema_errors {
        println!("{}", printable(line));
    }
    let report = lint_with(&text, schemas);
    for line in &report.lines {
        println!("{}: {}", file.display(), printable(line));
    }
    Ok(if report.ok && schema_errors.is_empty() {
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

/// The schemas lint checks values against, by kind and name, and the gate templates
/// it resolves template gates with.
#[derive(Default)]
pub(super) struct Schemas {
    by_name: BTreeMap<(bool, String), ConfigSchemaSpec>,
    templates: Templates,
}

impl Schemas {
    /// Adds the ConfigSchema and ClusterConfigSchema documents of a YAML stream; returns
    /// what could not be read.
    pub(super) fn add_file(&mut self, text: &str) -> Vec<String> {
        let parsed: Vec<serde_json::Value> = match serde_saphyr::from_multiple(text) {
            Ok(parsed) => parsed,
            Err(error) => return vec![format!("not YAML: {error}")],
        };
        let mut problems = Vec::new();
        for (index, value) in parsed.into_iter().enumerate() {
            if value.is_null() {
                continue;
            }
            match self.add(value) {
                Some(Ok(())) => {}
                Some(Err(problem)) => problems.push(format!("document {}: {problem}", index + 1)),
                None => problems.push(format!(
                    "document {}: not a ConfigSchema, ClusterConfigSchema, GateTemplate or \
                     ClusterGateTemplate",
                    index + 1
                )),
            }
        }
        problems
    }

    /// Reads from the hub the schemas the rollouts of `text` name (ConfigSchemas in the
    /// rollout's namespace, or the hub's default one) and the ClusterConfigSchemas their
    /// namespaces' grants require, unless the files gave them already. A grant the
    /// caller may not read is skipped, and said.
    pub(super) async fn read_from_hub(&mut self, hub: &Hub, text: &str) -> Result<(), CliError> {
        let documents: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(text).unwrap_or_default();
        let rollouts: Vec<ConfigRollout> = documents
            .into_iter()
            .filter(|value| {
                value.get("kind").and_then(serde_json::Value::as_str) == Some("ConfigRollout")
            })
            .filter_map(|value| serde_json::from_value(value).ok())
            .collect();
        let mut wanted: BTreeSet<(bool, String, String)> = BTreeSet::new();
        let mut namespaces = BTreeSet::new();
        let mut templates = BTreeSet::new();
        for rollout in &rollouts {
            let namespace = rollout
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| hub.namespace.clone());
            for (key, name) in gate_templates::named_templates(&rollout.spec) {
                templates.insert((key, namespace.clone(), name));
            }
            for reference in &rollout.spec.schemas {
                let cluster = reference.kind == SchemaKind::ClusterConfigSchema;
                wanted.insert((cluster, namespace.clone(), reference.name.clone()));
            }
            namespaces.insert(namespace);
        }
        // Schemas are looked up by name: one namespace's, so that a rollout is never
        // checked against another namespace's schema of the same name.
        if namespaces.len() > 1 {
            return Err(CliError::Message(format!(
                "lint --from-hub reads one namespace's schemas; the file holds rollouts of \
                 {}: lint them one namespace at a time",
                namespaces.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
        for namespace in namespaces {
            let api: Api<Namespace> = Api::all(hub.client.clone());
            let what = format!("reading the grant on namespace {namespace}");
            match hub.call(&what, api.get(&namespace)).await {
                Ok(object) => {
                    let required = object
                        .annotations()
                        .get(REQUIRED_SCHEMAS)
                        .map(|names| {
                            names
                                .split(',')
                                .map(str::trim)
                                .filter(|n| !n.is_empty())
                                .map(str::to_owned)
                                .collect::<Vec<_>>()
                        })
                        .unwrap_or_default();
                    for name in required {
                        wanted.insert((true, String::new(), name));
                    }
                }
                Err(CliError::Api {
                    code: 403 | 404, ..
                }) => println!(
                    "note: the grant on namespace {namespace} cannot be read with your \
                     credentials: the ClusterConfigSchemas it requires are not checked"
                ),
                Err(error) => return Err(error),
            }
        }
        for (key, namespace, name) in templates {
            if self.templates.contains_key(&(key, name.clone())) {
                continue;
            }
            let found = match key {
                TemplateKey::Cluster => {
                    let api: Api<ClusterGateTemplate> = Api::all(hub.client.clone());
                    let what = format!("reading ClusterGateTemplate {name}");
                    hub.call(&what, api.get_opt(&name))
                        .await?
                        .map(|template| (template.metadata.generation, template.spec.template))
                }
                TemplateKey::Namespaced => {
                    let api: Api<GateTemplate> = Api::namespaced(hub.client.clone(), &namespace);
                    let what = format!("reading GateTemplate {namespace}/{name}");
                    hub.call(&what, api.get_opt(&name))
                        .await?
                        .map(|template| (template.metadata.generation, template.spec))
                }
            };
            if let Some((generation, spec)) = found {
                self.templates.insert(
                    (key, name),
                    TemplateObject {
                        generation: generation.unwrap_or_default(),
                        spec,
                    },
                );
            }
        }
        for (cluster, namespace, name) in wanted {
            if self.by_name.contains_key(&(cluster, name.clone())) {
                continue;
            }
            let spec = if cluster {
                let api: Api<ClusterConfigSchema> = Api::all(hub.client.clone());
                let what = format!("reading ClusterConfigSchema {name}");
                hub.call(&what, api.get_opt(&name))
                    .await?
                    .map(|schema| schema.spec.rules)
            } else {
                let api: Api<ConfigSchema> = Api::namespaced(hub.client.clone(), &namespace);
                let what = format!("reading ConfigSchema {namespace}/{name}");
                hub.call(&what, api.get_opt(&name))
                    .await?
                    .map(|schema| schema.spec)
            };
            if let Some(spec) = spec {
                self.by_name.insert((cluster, name), spec);
            }
        }
        Ok(())
    }

    /// Adds `value` if it is a schema document (`None` if it is not one).
    fn add(&mut self, value: serde_json::Value) -> Option<Result<(), String>> {
        let kind = value
            .get("kind")
            .and_then(serde_json::Value::as_str)?
            .to_owned();
        let kind = kind.as_str();
        let cluster = match kind {
            "ConfigSchema" => false,
            "ClusterConfigSchema" => true,
            "GateTemplate" | "ClusterGateTemplate" => return Some(self.add_template(kind, value)),
            _ => return None,
        };
        if value.get("apiVersion").and_then(serde_json::Value::as_str) != Some(&api_version()) {
            return Some(Err(format!("{kind} is not {}", api_version())));
        }
        let name = value
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let spec = value.get("spec").cloned().unwrap_or_default();
        Some(match serde_json::from_value::<ConfigSchemaSpec>(spec) {
            Ok(spec) => {
                self.by_name.insert((cluster, name), spec);
                Ok(())
            }
            Err(error) => Err(format!("{kind} {name}: {error}")),
        })
    }

    /// Adds a GateTemplate or ClusterGateTemplate document.
    fn add_template(&mut self, kind: &str, value: serde_json::Value) -> Result<(), String> {
        if value.get("apiVersion").and_then(serde_json::Value::as_str) != Some(&api_version()) {
            return Err(format!("{kind} is not {}", api_version()));
        }
        let name = value
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let key = if kind == "GateTemplate" {
            TemplateKey::Namespaced
        } else {
            TemplateKey::Cluster
        };
        let spec = value.get("spec").cloned().unwrap_or_default();
        let spec = serde_json::from_value::<GateTemplateSpec>(spec)
            .map_err(|error| format!("{kind} {name}: {error}"))?;
        self.templates.insert(
            (key, name),
            TemplateObject {
                generation: 1,
                spec,
            },
        );
        Ok(())
    }

    /// The schemas that apply to `rollout`, labelled, or why one cannot be had.
    fn applicable(
        &self,
        rollout: &ConfigRollout,
    ) -> Vec<(String, Result<&ConfigSchemaSpec, String>)> {
        let mut list = Vec::new();
        for (index, reference) in rollout.spec.schemas.iter().enumerate() {
            let cluster = reference.kind == SchemaKind::ClusterConfigSchema;
            let label = schema_label(cluster, &reference.name);
            let found = self
                .by_name
                .get(&(cluster, reference.name.clone()))
                .ok_or_else(|| {
                    format!(
                        "spec.schemas[{index}]: {label} is not in the file nor in a --schema file"
                    )
                });
            list.push((label, found));
        }
        for ((cluster, name), spec) in &self.by_name {
            let named = rollout.spec.schemas.iter().any(|reference| {
                (reference.kind == SchemaKind::ClusterConfigSchema) == *cluster
                    && reference.name == *name
            });
            if *cluster && !named {
                list.push((schema_label(true, name), Ok(spec)));
            }
        }
        list
    }
}

fn schema_label(cluster: bool, name: &str) -> String {
    if cluster {
        format!("ClusterConfigSchema {name}")
    } else {
        format!("ConfigSchema {name}")
    }
}

fn api_version() -> String {
    format!(
        "{}/{}",
        configrollout_api::GROUP,
        configrollout_api::VERSION
    )
}

/// The findings of the schema checks of `rollout`'s values.
fn value_findings(rollout: &ConfigRollout, schemas: &Schemas) -> (Vec<String>, Vec<String>) {
    let mut errors = Vec::new();
    let mut notes = Vec::new();
    let applicable = schemas.applicable(rollout);
    let Some(data) = &rollout.spec.data else {
        if !applicable.is_empty() {
            notes.push("values not checked offline: they come from spec.fromConfigMap".to_owned());
        }
        return (errors, notes);
    };
    let mut validators = std::collections::BTreeSet::new();
    for (label, spec) in applicable {
        let spec = match spec {
            Ok(spec) => spec,
            Err(missing) => {
                errors.push(missing);
                continue;
            }
        };
        match values::compile(spec) {
            Err(problems) => errors.push(format!(
                "{label} is invalid: {}",
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
            Ok(compiled) => {
                errors.extend(
                    compiled
                        .check(data)
                        .iter()
                        .map(|violation| format!("{label}: {violation}")),
                );
                validators.extend(compiled.validators().iter().cloned());
            }
        }
    }
    if !validators.is_empty() {
        notes.push(format!(
            "not called offline: ClusterConfigValidator {}",
            validators.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    (errors, notes)
}

/// Lints a manifest with no schema but those it holds.
#[cfg(test)]
pub(super) fn lint_text(text: &str) -> LintReport {
    lint_with(text, Schemas::default())
}

/// Lints a manifest: its ConfigSchema documents join `schemas`.
pub(super) fn lint_with(text: &str, mut schemas: Schemas) -> LintReport {
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
    let mut rollouts = Vec::new();
    for (index, value) in parsed.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        match schemas.add(value.clone()) {
            Some(Ok(())) => continue,
            Some(Err(problem)) => {
                ok = false;
                lines.push(format!("document {}: {problem}", index + 1));
                continue;
            }
            None => rollouts.push((index, value)),
        }
    }
    for (index, value) in rollouts {
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
        // Template gates are checked as they resolve: the template's check, args in.
        let namespace = rollout.metadata.namespace.clone().unwrap_or_default();
        let resolution = gate_templates::resolve(&rollout.spec, &namespace, &schemas.templates);
        let (effective, template_errors) =
            gate_templates::effective_spec(&rollout.spec, &Default::default(), &resolution);
        errors.extend(template_errors.iter().map(|error| {
            let text = error.to_string();
            if text.ends_with("not found") {
                format!("{text} (not in the file, a --schema file, nor read with --from-hub)")
            } else {
                text
            }
        }));
        errors.extend(validate(&effective).iter().map(ToString::to_string));
        let (value_errors, notes) = value_findings(&rollout, &schemas);
        errors.extend(value_errors);
        lines.extend(
            notes
                .iter()
                .map(|note| format!("configrollout {name}: {note}")),
        );
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
