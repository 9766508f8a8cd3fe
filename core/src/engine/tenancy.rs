//! What a rollout may reach: the grant a platform admin wrote on the rollout's own hub
//! Namespace, and the check of a spec against it. Pure: the reconcile reads the
//! Namespace's annotations; everything here only decides.
//!
//! The grant lives on the Namespace because a tenant who may create ConfigRollouts in a
//! namespace may not edit that Namespace object (it is cluster-scoped), and because the
//! admission policy (`policies/rollout-tenancy.yaml`) can read the same annotations
//! through `namespaceObject`, so the apiserver and the controller enforce one rule.
//!
//! Without annotations a rollout may write only the namespace of its own name, in every
//! region, and may not adopt a ConfigMap it did not create.

use std::collections::{BTreeMap, BTreeSet};

use configrollout_api::{ConfigRolloutSpec, NotificationTrigger, Subscription};

use super::validate::SpecError;
use crate::gates::scope::{Matchers, ScopeError, scope};
use crate::gates::{TemplateValues, render};

/// Namespace annotation: further namespaces (comma-separated, or `*` for any) that
/// rollouts of the namespace may target in the regions.
pub const ALLOWED_TARGET_NAMESPACES: &str = "configrollout.dev/allowed-target-namespaces";
/// Namespace annotation: the only regions (comma-separated Region names) that rollouts
/// of the namespace may write. Absent: every region.
pub const ALLOWED_REGIONS: &str = "configrollout.dev/allowed-regions";
/// Namespace annotation: `"true"` lets rollouts of the namespace adopt a ConfigMap that
/// exists in a region and is not managed by configrollout, when they set
/// `spec.target.adopt`.
pub const ALLOW_ADOPTION: &str = "configrollout.dev/allow-adoption";
/// Namespace annotation: ClusterConfigSchemas (comma-separated names) that every
/// candidate revision of the namespace's rollouts must satisfy, whatever their
/// `spec.schemas` say.
pub const REQUIRED_SCHEMAS: &str = "configrollout.dev/required-schemas";
/// Namespace annotation: the ClusterNotificationSinks (comma-separated names, or `*` for
/// any) that rollouts of the namespace may subscribe to in `spec.notifications`. Absent:
/// none.
pub const NOTIFICATION_SINKS: &str = "configrollout.dev/notification-sinks";
/// Namespace annotation: subscriptions of every rollout of the namespace, made by the
/// platform admin: comma-separated `sink` (every trigger) or `sink=Trigger|Trigger`,
/// e.g. `audit, oncall=Halted|RolledBack`. A sink named here needs no other grant.
pub const NOTIFY: &str = "configrollout.dev/notify";
/// Namespace annotation: label matchers (comma-separated PromQL matchers, e.g.
/// `namespace="team-a"` or `namespace="team-a", cluster=~"eu-.*"`) that the controller
/// adds to every selector of every gate and activation query of the namespace's rollouts,
/// so that they read only those series of a shared Prometheus (see
/// [`crate::gates::scope`]). A query naming such a label otherwise is refused. Absent:
/// queries are sent as written.
pub const GATE_LABEL_MATCHERS: &str = "configrollout.dev/gate-label-matchers";
/// Annotation on a hub Namespace: `platform` limits its rollouts' gates to
/// ClusterGateTemplates (no inline query, no GateTemplate of its own).
pub const GATE_TEMPLATES: &str = "configrollout.dev/gate-templates";
/// Most entries an allow-list annotation may hold, so a grant stays cheap to check.
const MAX_GRANT_ENTRIES: usize = 256;
/// Most sinks the [`NOTIFY`] annotation may subscribe every rollout to.
const MAX_NAMESPACE_SUBSCRIPTIONS: usize = 8;

/// The target namespaces a grant allows besides the rollout's own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TargetNamespaces {
    /// None: the rollout's own namespace only.
    #[default]
    OwnOnly,
    /// These too.
    Also(BTreeSet<String>),
    /// Any namespace (`*`): a platform team's own namespace.
    Any,
}

/// What rollouts of one hub namespace may reach. The default allows nothing at all (not
/// even a namespace of its own): a reconcile that did not read the grant writes nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    /// The rollouts' own namespace, always a permitted target.
    pub namespace: String,
    /// Further permitted target namespaces.
    pub target_namespaces: TargetNamespaces,
    /// The permitted regions; `None`: every region.
    pub regions: Option<BTreeSet<String>>,
    /// Whether rollouts may adopt unmanaged ConfigMaps (when they ask to).
    pub adoption: bool,
    /// ClusterConfigSchemas every candidate revision must satisfy.
    pub required_schemas: BTreeSet<String>,
    /// The sinks rollouts may subscribe to themselves.
    pub notification_sinks: SinkGrant,
    /// The subscriptions the admin made for every rollout of the namespace.
    pub namespace_subscriptions: Vec<Subscription>,
    /// The label matchers added to every selector of the rollouts' queries; `None`:
    /// queries are sent as written.
    pub gate_scope: Option<Matchers>,
    /// Whether the rollouts' gates must use the platform's ClusterGateTemplates.
    pub platform_gates_only: bool,
}

/// The ClusterNotificationSinks a grant lets rollouts subscribe to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SinkGrant {
    /// None.
    #[default]
    None,
    /// These.
    Only(BTreeSet<String>),
    /// Any sink (`*`).
    Any,
}

impl SinkGrant {
    /// Whether rollouts may subscribe to `sink`.
    pub fn allows(&self, sink: &str) -> bool {
        match self {
            SinkGrant::None => false,
            SinkGrant::Only(names) => names.contains(sink),
            SinkGrant::Any => true,
        }
    }
}

impl Grant {
    /// The default grant of `namespace`: its own name, every region, no adoption.
    pub fn own_namespace(namespace: &str) -> Self {
        Grant {
            namespace: namespace.to_owned(),
            ..Grant::default()
        }
    }

    /// The grant the annotations of the hub Namespace `namespace` give. A malformed
    /// annotation is an error naming it (and grants nothing more than the default).
    pub fn from_annotations(
        namespace: &str,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Self, SpecError> {
        let mut grant = Grant::own_namespace(namespace);
        if let Some(text) = annotations.get(ALLOWED_TARGET_NAMESPACES) {
            let names = list(ALLOWED_TARGET_NAMESPACES, text)?;
            grant.target_namespaces = if names.contains("*") {
                TargetNamespaces::Any
            } else {
                TargetNamespaces::Also(names)
            };
        }
        if let Some(text) = annotations.get(ALLOWED_REGIONS) {
            grant.regions = Some(list(ALLOWED_REGIONS, text)?);
        }
        if let Some(text) = annotations.get(REQUIRED_SCHEMAS) {
            let names = list(REQUIRED_SCHEMAS, text)?;
            if names.contains("*") {
                return Err(annotation_error(
                    REQUIRED_SCHEMAS,
                    "names ClusterConfigSchemas; * is not one",
                ));
            }
            grant.required_schemas = names;
        }
        if let Some(text) = annotations.get(NOTIFICATION_SINKS) {
            let names = list(NOTIFICATION_SINKS, text)?;
            grant.notification_sinks = if names.contains("*") {
                SinkGrant::Any
            } else {
                SinkGrant::Only(names)
            };
        }
        if let Some(text) = annotations.get(NOTIFY) {
            grant.namespace_subscriptions = namespace_subscriptions(text)?;
        }
        if let Some(text) = annotations.get(GATE_LABEL_MATCHERS) {
            grant.gate_scope = Some(
                Matchers::parse(text)
                    .map_err(|error| annotation_error(GATE_LABEL_MATCHERS, &error.to_string()))?,
            );
        }
        if let Some(text) = annotations.get(GATE_TEMPLATES) {
            grant.platform_gates_only = match text.trim() {
                "platform" => true,
                "any" => false,
                _ => {
                    return Err(annotation_error(
                        GATE_TEMPLATES,
                        "must be \"platform\" (gates use ClusterGateTemplates only) or \"any\"",
                    ));
                }
            };
        }
        if let Some(text) = annotations.get(ALLOW_ADOPTION) {
            grant.adoption = match text.trim() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(annotation_error(
                        ALLOW_ADOPTION,
                        "must be \"true\" or \"false\"",
                    ));
                }
            };
        }
        Ok(grant)
    }

    /// Whether rollouts under this grant may write `namespace` in a region.
    pub fn allows_target_namespace(&self, namespace: &str) -> bool {
        if namespace.is_empty() {
            return false;
        }
        namespace == self.namespace
            || match &self.target_namespaces {
                TargetNamespaces::OwnOnly => false,
                TargetNamespaces::Also(names) => names.contains(namespace),
                TargetNamespaces::Any => true,
            }
    }

    /// Whether rollouts under this grant may write in the region `name`.
    pub fn allows_region(&self, name: &str) -> bool {
        self.regions
            .as_ref()
            .is_none_or(|regions| regions.contains(name))
    }

    /// Whether `spec` may be written anywhere: its target namespace, every region a stage
    /// names and adoption are within the grant, and every gate and activation query can
    /// be scoped to the namespace's [`GATE_LABEL_MATCHERS`]. Stages that select regions by
    /// label select only among the granted regions (see [`super::selection::plan`]).
    pub fn check(&self, spec: &ConfigRolloutSpec) -> Vec<SpecError> {
        let mut errors = Vec::new();
        let target = &spec.target.namespace;
        if !self.allows_target_namespace(target) {
            errors.push(SpecError {
                field: "spec.target.namespace".to_owned(),
                message: format!(
                    "namespace {target} is not granted to rollouts of namespace {}: a \
                     platform admin grants it with the annotation {ALLOWED_TARGET_NAMESPACES} \
                     on Namespace {}",
                    self.namespace, self.namespace
                ),
            });
        }
        for (index, stage) in spec.stages.iter().enumerate() {
            let outside: Vec<&str> = stage
                .regions
                .names
                .iter()
                .map(String::as_str)
                .filter(|name| !self.allows_region(name))
                .collect();
            if !outside.is_empty() {
                errors.push(SpecError {
                    field: format!("spec.stages[{index}].regions.names"),
                    message: format!(
                        "region(s) {} not granted to rollouts of namespace {} \
                         (annotation {ALLOWED_REGIONS} on Namespace {})",
                        outside.join(", "),
                        self.namespace,
                        self.namespace
                    ),
                });
            }
        }
        for (index, subscription) in spec.notifications.iter().enumerate() {
            let sink = &subscription.sink;
            let by_admin = self
                .namespace_subscriptions
                .iter()
                .any(|admin| &admin.sink == sink);
            if !self.notification_sinks.allows(sink) && !by_admin {
                errors.push(SpecError {
                    field: format!("spec.notifications[{index}].sink"),
                    message: format!(
                        "sink {sink} is not granted to rollouts of namespace {} \
                         (annotation {NOTIFICATION_SINKS} on Namespace {})",
                        self.namespace, self.namespace
                    ),
                });
            }
        }
        if self.platform_gates_only {
            for (index, gate) in spec.gates.iter().enumerate() {
                let platform = gate.template.as_ref().is_some_and(|template| {
                    template.kind == configrollout_api::GateTemplateKind::ClusterGateTemplate
                });
                if !platform {
                    errors.push(SpecError {
                        field: format!("spec.gates[{index}]"),
                        message: format!(
                            "gates of namespace {} use the platform's ClusterGateTemplates only \
                             (annotation {GATE_TEMPLATES}: platform on Namespace {})",
                            self.namespace, self.namespace
                        ),
                    });
                }
            }
        }
        if let Some(matchers) = &self.gate_scope {
            // A template gate's query is its template's, args substituted: scoped alike.
            // Web and job gates carry no query.
            let gates = spec
                .gates
                .iter()
                .enumerate()
                .filter(|(_, gate)| !gate.query.is_empty())
                .map(|(index, gate)| (format!("spec.gates[{index}].query"), &gate.query));
            let activations = spec
                .consumers
                .iter()
                .enumerate()
                .filter_map(|(index, consumer)| {
                    let query = consumer.activation_query.as_ref()?;
                    Some((format!("spec.consumers[{index}].activationQuery"), query))
                });
            for (field, query) in gates.chain(activations) {
                if let Some(error) = unscopable(query, matchers) {
                    errors.push(SpecError {
                        field,
                        message: format!(
                            "cannot be scoped to the namespace's gate-label-matchers: {error} \
                             (annotation {GATE_LABEL_MATCHERS}: {matchers} on Namespace {})",
                            self.namespace
                        ),
                    });
                }
            }
        }
        if spec.target.adopt && !self.adoption {
            errors.push(SpecError {
                field: "spec.target.adopt".to_owned(),
                message: format!(
                    "adopting existing ConfigMaps is not granted to rollouts of namespace {} \
                     (annotation {ALLOW_ADOPTION}: \"true\" on Namespace {})",
                    self.namespace, self.namespace
                ),
            });
        }
        errors
    }
}

/// Values a query template is rendered with to be checked (those of
/// `validate::promql_problem`), and a second set: an error that depends on a placeholder's
/// value (`cluster="{{region}}"` within `cluster=~"eu-.*"`) is not the template's, and is
/// decided sample by sample, where an unscopable query is a query error.
const SAMPLE_VALUES: [TemplateValues<'static>; 2] = [
    TemplateValues {
        region: "region-1",
        revision: "r1",
        stage: "canary",
    },
    TemplateValues {
        region: "region-2",
        revision: "r2",
        stage: "stage-2",
    },
];

/// Why the query template `template` cannot be scoped to `matchers` whatever its
/// placeholders' values, if so. A template that does not render or parse is not reported
/// here: the spec's own validation names it.
fn unscopable(template: &str, matchers: &Matchers) -> Option<ScopeError> {
    let [first, second] = &SAMPLE_VALUES;
    let error = scope(&render(template, first).ok()?, matchers).err()?;
    if matches!(error, ScopeError::Unparsable(_)) {
        return None;
    }
    let again = scope(&render(template, second).ok()?, matchers).err();
    (again.as_ref() == Some(&error)).then_some(error)
}

/// The subscriptions of a [`NOTIFY`] annotation.
fn namespace_subscriptions(text: &str) -> Result<Vec<Subscription>, SpecError> {
    let mut subscriptions: Vec<Subscription> = Vec::new();
    for entry in text
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        if subscriptions.len() >= MAX_NAMESPACE_SUBSCRIPTIONS {
            return Err(annotation_error(
                NOTIFY,
                &format!("lists more than {MAX_NAMESPACE_SUBSCRIPTIONS} sinks"),
            ));
        }
        let (sink, triggers) = match entry.split_once('=') {
            Some((sink, triggers)) => (sink.trim(), Some(triggers)),
            None => (entry, None),
        };
        if sink == "*" || !is_grant_entry(sink) {
            return Err(annotation_error(
                NOTIFY,
                &format!("{sink:?} is not a sink name (DNS-1123)"),
            ));
        }
        if subscriptions.iter().any(|known| known.sink == sink) {
            return Err(annotation_error(NOTIFY, &format!("names {sink} twice")));
        }
        let mut wanted = Vec::new();
        for name in triggers.into_iter().flat_map(|text| text.split('|')) {
            let name = name.trim();
            let trigger = NotificationTrigger::parse(name).ok_or_else(|| {
                annotation_error(
                    NOTIFY,
                    &format!("{name:?} is not a trigger (one of {})", trigger_names()),
                )
            })?;
            if !wanted.contains(&trigger) {
                wanted.push(trigger);
            }
        }
        if triggers.is_some() && wanted.is_empty() {
            return Err(annotation_error(
                NOTIFY,
                &format!("{sink}= names no trigger"),
            ));
        }
        subscriptions.push(Subscription {
            sink: sink.to_owned(),
            triggers: wanted,
            remind_after: None,
        });
    }
    Ok(subscriptions)
}

fn trigger_names() -> String {
    NotificationTrigger::ALL
        .iter()
        .map(|trigger| trigger.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn list(annotation: &str, text: &str) -> Result<BTreeSet<String>, SpecError> {
    let names: BTreeSet<String> = text
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    if names.len() > MAX_GRANT_ENTRIES {
        return Err(annotation_error(
            annotation,
            &format!("lists more than {MAX_GRANT_ENTRIES} entries"),
        ));
    }
    if let Some(bad) = names.iter().find(|name| !is_grant_entry(name)) {
        return Err(annotation_error(
            annotation,
            &format!("{bad:?} is not a name (DNS-1123) or *"),
        ));
    }
    Ok(names)
}

fn is_grant_entry(name: &str) -> bool {
    name == "*"
        || (name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && name
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric())
            && name
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_alphanumeric()))
}

fn annotation_error(annotation: &str, message: &str) -> SpecError {
    SpecError {
        field: format!("Namespace annotation {annotation}"),
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(target_namespace: &str, regions: &[&str], adopt: bool) -> ConfigRolloutSpec {
        serde_json::from_value(serde_json::json!({
            "target": {"namespace": target_namespace, "name": "limits", "adopt": adopt},
            "data": {"rate": "1"},
            "stages": [{"name": "only", "regions": {"names": regions}}],
        }))
        .unwrap()
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn by_default_only_the_own_namespace_in_every_region() {
        let grant = Grant::from_annotations("team-a", &BTreeMap::new()).unwrap();
        assert!(
            grant
                .check(&spec("team-a", &["region-9"], false))
                .is_empty()
        );
        let errors = grant.check(&spec("kube-system", &["region-1"], false));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.target.namespace");
        assert!(errors[0].message.contains("kube-system"), "{}", errors[0]);
        assert!(errors[0].message.contains(ALLOWED_TARGET_NAMESPACES));
    }

    #[test]
    fn the_default_grant_value_allows_nothing() {
        let grant = Grant::default();
        assert!(!grant.allows_target_namespace(""));
        assert!(!grant.allows_target_namespace("team-a"));
    }

    #[test]
    fn annotations_widen_namespaces_and_narrow_regions() {
        let grant = Grant::from_annotations(
            "team-a",
            &annotations(&[
                (ALLOWED_TARGET_NAMESPACES, "app, shared-config"),
                (ALLOWED_REGIONS, "region-1,region-2"),
            ]),
        )
        .unwrap();
        assert!(grant.check(&spec("app", &["region-1"], false)).is_empty());
        assert!(grant.allows_target_namespace("team-a"));
        assert!(!grant.allows_target_namespace("kube-system"));
        let errors = grant.check(&spec("shared-config", &["region-1", "region-3"], false));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.stages[0].regions.names");
        assert!(errors[0].message.contains("region-3"), "{}", errors[0]);
        assert!(!errors[0].message.contains("region-1"), "{}", errors[0]);
    }

    #[test]
    fn a_star_grants_every_namespace() {
        let grant = Grant::from_annotations(
            "platform",
            &annotations(&[(ALLOWED_TARGET_NAMESPACES, "*")]),
        )
        .unwrap();
        assert!(grant.allows_target_namespace("kube-system"));
    }

    #[test]
    fn adoption_needs_the_grant_and_the_request() {
        let plain = Grant::own_namespace("team-a");
        let errors = plain.check(&spec("team-a", &["region-1"], true));
        assert_eq!(errors[0].field, "spec.target.adopt");
        let adopting =
            Grant::from_annotations("team-a", &annotations(&[(ALLOW_ADOPTION, "true")])).unwrap();
        assert!(
            adopting
                .check(&spec("team-a", &["region-1"], true))
                .is_empty()
        );
    }

    #[test]
    fn a_malformed_annotation_is_named() {
        for (annotation, value) in [
            (ALLOWED_TARGET_NAMESPACES, "app,Kube System"),
            (ALLOWED_REGIONS, "-region"),
            (ALLOW_ADOPTION, "yes"),
            (NOTIFICATION_SINKS, "Slack"),
            (NOTIFY, "audit=Sometimes"),
            (NOTIFY, "audit=,x"),
            (NOTIFY, "audit, audit"),
            (NOTIFY, "*"),
            (GATE_LABEL_MATCHERS, r#"__name__="up""#),
            (GATE_LABEL_MATCHERS, r#"namespace=~"(""#),
            (GATE_LABEL_MATCHERS, ""),
        ] {
            let error = Grant::from_annotations("team-a", &annotations(&[(annotation, value)]))
                .unwrap_err();
            assert!(error.field.contains(annotation), "{error}");
        }
    }

    fn subscribing(sinks: &[&str]) -> ConfigRolloutSpec {
        let mut spec = spec("team-a", &["region-1"], false);
        spec.notifications = sinks
            .iter()
            .map(|sink| Subscription {
                sink: (*sink).to_owned(),
                triggers: Vec::new(),
                remind_after: None,
            })
            .collect();
        spec
    }

    #[test]
    fn a_rollout_subscribes_only_to_granted_sinks() {
        let plain = Grant::own_namespace("team-a");
        let errors = plain.check(&subscribing(&["team-slack"]));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.notifications[0].sink");
        assert!(
            errors[0].message.contains(NOTIFICATION_SINKS),
            "{}",
            errors[0]
        );

        let granted = Grant::from_annotations(
            "team-a",
            &annotations(&[(NOTIFICATION_SINKS, "team-slack, audit")]),
        )
        .unwrap();
        assert!(
            granted
                .check(&subscribing(&["team-slack", "audit"]))
                .is_empty()
        );
        let errors = granted.check(&subscribing(&["audit", "platform-pager"]));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.notifications[1].sink");

        let any =
            Grant::from_annotations("team-a", &annotations(&[(NOTIFICATION_SINKS, "*")])).unwrap();
        assert!(any.check(&subscribing(&["whatever"])).is_empty());
    }

    #[test]
    fn the_admin_subscribes_a_whole_namespace() {
        let grant = Grant::from_annotations(
            "team-a",
            &annotations(&[(NOTIFY, "audit, oncall=Halted|RolledBack")]),
        )
        .unwrap();
        assert_eq!(grant.namespace_subscriptions.len(), 2);
        assert!(grant.namespace_subscriptions[0].triggers.is_empty());
        assert_eq!(
            grant.namespace_subscriptions[1].triggers,
            vec![NotificationTrigger::Halted, NotificationTrigger::RolledBack]
        );
        // A sink the admin subscribed the namespace to may be named by its rollouts too
        // (for other triggers, say); others still may not.
        assert!(grant.check(&subscribing(&["oncall"])).is_empty());
        assert_eq!(grant.check(&subscribing(&["team-slack"])).len(), 1);
    }

    fn querying(gates: &[&str], activation: Option<&str>) -> ConfigRolloutSpec {
        let gates: Vec<serde_json::Value> = gates
            .iter()
            .enumerate()
            .map(|(index, query)| {
                serde_json::json!({
                    "name": format!("g{index}"), "query": query, "condition": "result < 1",
                })
            })
            .collect();
        let mut consumers = Vec::new();
        if let Some(query) = activation {
            consumers.push(serde_json::json!({
                "kind": "Deployment", "name": "api", "activationQuery": query,
            }));
        }
        serde_json::from_value(serde_json::json!({
            "target": {"namespace": "team-a", "name": "limits"},
            "data": {"rate": "1"},
            "stages": [{"name": "only", "regions": {"names": ["region-1"]}}],
            "gates": gates,
            "consumers": consumers,
        }))
        .unwrap()
    }

    fn scoped_grant(matchers: &str) -> Grant {
        Grant::from_annotations("team-a", &annotations(&[(GATE_LABEL_MATCHERS, matchers)])).unwrap()
    }

    #[test]
    fn the_admin_pins_label_matchers_for_gate_queries() {
        let grant = scoped_grant(r#"namespace="team-a", cluster=~"eu-.*""#);
        let pinned = grant.gate_scope.as_ref().unwrap();
        assert_eq!(
            pinned.to_string(),
            r#"namespace="team-a", cluster=~"eu-.*""#
        );
        assert_eq!(Grant::own_namespace("team-a").gate_scope, None);
        // Queries that can be scoped (narrowing, placeholders, no label at all) pass.
        let spec = querying(
            &[
                "sum(rate(errors[5m])) / sum(rate(requests[5m]))",
                r#"max(load{namespace="team-a", cluster="{{region}}"})"#,
                "up * on(job) group_left up",
            ],
            Some(r#"sum(active{revision="{{revision}}"})"#),
        );
        assert!(grant.check(&spec).is_empty(), "{:?}", grant.check(&spec));
    }

    #[test]
    fn a_query_that_cannot_be_scoped_is_refused_naming_its_field() {
        let grant = scoped_grant(r#"namespace="team-a""#);
        let spec = querying(
            &["sum(up)", r#"sum(load{namespace="team-b"})"#],
            Some("info(up)"),
        );
        let errors = grant.check(&spec);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(errors[0].field, "spec.gates[1].query");
        assert!(
            errors[0].to_string().starts_with(
                "spec.gates[1].query: cannot be scoped to the namespace's gate-label-matchers: "
            ),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].message.contains("label namespace"),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].message.contains(GATE_LABEL_MATCHERS),
            "{}",
            errors[0]
        );
        assert_eq!(errors[1].field, "spec.consumers[0].activationQuery");
        // Without the annotation the same spec is within the grant.
        assert!(Grant::own_namespace("team-a").check(&spec).is_empty());
    }

    #[test]
    fn an_unparsable_query_is_left_to_validation() {
        let grant = scoped_grant(r#"namespace="team-a""#);
        assert!(grant.check(&querying(&["sum("], None)).is_empty());
        assert!(grant.check(&querying(&["{{nope}}"], None)).is_empty());
    }
}
