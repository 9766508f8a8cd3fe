//! The API types as users and the apiserver see them: YAML that users write, defaults,
//! the JSON the controller writes back, and the schema the CRDs carry.

use std::path::PathBuf;

use configrollout_api as api;
use configrollout_api::{
    Approval, ConfigRollout, ConfigRolloutSpec, ConfigRolloutStatus, Delivery, DriftPolicy,
    ExpandContract, Gate, GateSample, GateStatus, GateVerdict, LifecycleMark, OnFailure, Region,
    RegionRolloutStatus, RevisionRecord, RevisionStep, RolloutPhase, SampleVerdict, StageApproval,
    StageState, StageStatus, WorkloadKind,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml_value(name: &str) -> Value {
    serde_saphyr::from_str(&fixture(name)).expect("fixture is YAML")
}

/// Every field of `subset` is in `superset` with the same value.
fn assert_contains(superset: &Value, subset: &Value, path: &str) {
    match (superset, subset) {
        (Value::Object(sup), Value::Object(sub)) => {
            for (k, v) in sub {
                let here = format!("{path}.{k}");
                let got = sup.get(k).unwrap_or_else(|| panic!("{here} missing"));
                assert_contains(got, v, &here);
            }
        }
        (Value::Array(sup), Value::Array(sub)) => {
            assert_eq!(sup.len(), sub.len(), "{path}");
            for (i, (a, b)) in sup.iter().zip(sub).enumerate() {
                assert_contains(a, b, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(superset, subset, "{path}"),
    }
}

fn time(s: &str) -> Time {
    Time(s.parse::<Timestamp>().expect("timestamp"))
}

#[test]
fn full_spec_reads_every_field_and_writes_it_back_unchanged() {
    let rollout: ConfigRollout = serde_saphyr::from_str(&fixture("rollout-full.yaml")).unwrap();
    let spec = &rollout.spec;
    assert_eq!(spec.target.name, "checkout-flags.v2");
    assert_eq!(
        spec.from_config_map.as_ref().map(|c| c.name.as_str()),
        Some("checkout-flags-source")
    );
    assert!(spec.data.is_none());
    assert_eq!(spec.stages.len(), 2);
    let europe = &spec.stages[1];
    assert_eq!(europe.approval, Approval::Required);
    assert_eq!(europe.max_parallel, 3);
    assert_eq!(
        europe.pause.as_ref().map(|p| p.duration.as_str()),
        Some("1h30m")
    );
    assert_eq!(europe.gates, ["error-rate", "latency"]);
    assert!(europe.regions.names.is_empty());
    assert!(europe.regions.selector.is_some());
    assert_eq!(spec.gates[0].count, 5);
    assert_eq!(spec.gates[0].initial_delay.as_deref(), Some("2m"));
    assert_eq!(spec.consumers[1].kind, WorkloadKind::DaemonSet);
    assert_eq!(spec.consumers[1].delivery, Delivery::Reload);
    assert_eq!(spec.strategy.expand_contract, ExpandContract::Disabled);
    assert_eq!(spec.strategy.contract.approval, Approval::Required);
    assert_eq!(spec.on_failure, OnFailure::Rollback);
    assert!(spec.paused);
    assert_eq!(spec.drift_policy, DriftPolicy::Revert);
    assert_eq!(spec.revision_history_limit, 25);

    // Nothing the user wrote is dropped or renamed on the way back out (defaults of the
    // fields they left out are written too).
    let written = serde_json::to_value(&rollout).unwrap();
    assert_contains(&written, &yaml_value("rollout-full.yaml"), "");
    assert_eq!(written["spec"]["gates"][1]["interval"], "1m");
    let reread: ConfigRollout = serde_json::from_value(written).unwrap();
    assert_eq!(reread, rollout);
}

#[test]
fn absent_fields_take_their_documented_defaults() {
    let rollout: ConfigRollout = serde_saphyr::from_str(&fixture("rollout-basic.yaml")).unwrap();
    let spec = &rollout.spec;
    assert_eq!(spec.data.as_ref().map(|d| d.len()), Some(2));
    assert!(spec.gates.is_empty());
    assert!(spec.consumers.is_empty());
    assert_eq!(spec.strategy.expand_contract, ExpandContract::Auto);
    assert_eq!(spec.strategy.contract.approval, Approval::None);
    assert!(spec.strategy.contract.pause.is_none());
    assert_eq!(spec.on_failure, OnFailure::Halt);
    assert!(!spec.paused);
    assert_eq!(spec.drift_policy, DriftPolicy::Report);
    assert_eq!(spec.revision_history_limit, 10);
    let canary = &spec.stages[0];
    assert_eq!(canary.max_parallel, 1);
    assert_eq!(canary.approval, Approval::None);
    assert!(canary.pause.is_none());
    assert!(canary.gates.is_empty());
    assert!(canary.progress_deadline.is_none());
    assert!(rollout.status.is_none());

    let gate: Gate = serde_json::from_value(json!({
        "name": "errors", "query": "up", "condition": "result > 0"
    }))
    .unwrap();
    assert_eq!(gate.interval, "1m");
    assert_eq!(gate.count, 1);
    assert_eq!(gate.failure_limit, 0);
    assert_eq!(gate.inconclusive_limit, 0);
    assert!(gate.initial_delay.is_none());
}

#[test]
fn absent_options_are_omitted_not_written_as_null() {
    // The controller patches status with server-side apply: a null would claim and clear
    // the field instead of leaving it alone.
    let rollout: ConfigRollout = serde_saphyr::from_str(&fixture("rollout-basic.yaml")).unwrap();
    let text = serde_json::to_string(&rollout).unwrap();
    assert!(!text.contains("null"), "{text}");
    let status = serde_json::to_string(&ConfigRolloutStatus::default()).unwrap();
    assert_eq!(status, "{}");
}

#[test]
fn other_kinds_read_their_examples() {
    let region: Region = serde_saphyr::from_str(&fixture("region.yaml")).unwrap();
    let secret = region.spec.kubeconfig_secret_ref.as_ref().unwrap();
    assert_eq!(
        (
            secret.namespace.as_str(),
            secret.name.as_str(),
            secret.key.as_str()
        ),
        ("configrollout-system", "region-eu-west-1", "kubeconfig")
    );
    assert_eq!(
        serde_json::to_value(&region).unwrap(),
        yaml_value("region.yaml")
    );

    let with_auth: Region =
        serde_saphyr::from_str(&fixture("region-prometheus-auth.yaml")).unwrap();
    let auth = with_auth
        .spec
        .prometheus
        .as_ref()
        .and_then(|prometheus| prometheus.auth.as_ref())
        .unwrap();
    assert_eq!(auth.secret_ref.name, "us-east-1-prometheus");
    assert_eq!(
        (
            auth.bearer_token_key.as_deref(),
            auth.username_key.as_deref(),
            auth.password_key.as_deref(),
            auth.ca_key.as_deref()
        ),
        (None, Some("username"), Some("password"), Some("ca.crt"))
    );
    assert_eq!(
        serde_json::to_value(&with_auth).unwrap(),
        yaml_value("region-prometheus-auth.yaml")
    );

    let approval: StageApproval = serde_saphyr::from_str(&fixture("stageapproval.yaml")).unwrap();
    assert_eq!(approval.spec.revision, "r3");
    assert_eq!(
        serde_json::to_value(&approval).unwrap(),
        yaml_value("stageapproval.yaml")
    );
}

#[test]
fn empty_and_partial_status_deserialise() {
    let empty: ConfigRolloutStatus = serde_json::from_value(json!({})).unwrap();
    assert_eq!(empty, ConfigRolloutStatus::default());
    let partial: ConfigRolloutStatus = serde_json::from_value(json!({
        "phase": "Progressing",
        "stages": [{"name": "canary"}],
        "regions": [{"name": "eu-west-1"}]
    }))
    .unwrap();
    assert_eq!(partial.phase, Some(RolloutPhase::Progressing));
    assert_eq!(partial.stages[0].state, StageState::Pending);
    assert!(partial.regions[0].materialized.is_none());
}

#[test]
fn full_status_round_trips() {
    let at = time("2026-12-02T15:00:00Z");
    let status = ConfigRolloutStatus {
        observed_generation: Some(4),
        phase: Some(RolloutPhase::AwaitingApproval),
        revision: Some("r3".into()),
        step: Some(RevisionStep::Expand),
        stable_revision: Some("r2".into()),
        reached: vec!["eu-west-1".into()],
        target: Some("checkout/checkout-flags".into()),
        current_stage: Some("europe".into()),
        current_stage_digest: Some("5d41402abc4b2a76b9719d911017c592".into()),
        progress: Some("1/3".into()),
        control: Some(configrollout_api::ControlRecord {
            abort_at: None,
            retry_at: Some(at.clone()),
            refused_retry_at: None,
        }),
        collected_through: Some("1764687600000.0@rollout:payments/limits".into()),
        collection_waits_for: None,
        collection_keeps: None,
        authors_counted: None,
        gate_templates: vec![configrollout_api::GateTemplateUse {
            gate: "errors".into(),
            template: "ClusterGateTemplate error-ratio".into(),
            generation: 3,
            revision: "r3".into(),
            stage: "europe".into(),
            check: configrollout_api::GateCheck {
                prometheus: Some(configrollout_api::PrometheusCheck {
                    query: "sum(rate(errors{region=\"{{region}}\"}[5m]))".into(),
                    condition: "result < 0.01".into(),
                    compare: None,
                }),
                ..Default::default()
            },
        }],
        written_by: Some(configrollout_api::ShardWriter {
            shard: 2,
            shards: 4,
            holder: "configrollout-controller-7d9f-x2".into(),
        }),
        notifications: Some(configrollout_api::NotificationStatus {
            sequence: 3,
            outbox: vec![configrollout_api::Notice {
                sequence: 3,
                trigger: configrollout_api::NotificationTrigger::AwaitingApproval,
                sinks: vec![],
                revision: Some("r3".into()),
                stage: Some("europe".into()),
                subject: None,
                reason: Some("AwaitingApproval".into()),
                message: Some("stage europe waits for a StageApproval".into()),
                progress: Some("1/3".into()),
                at: at.clone(),
            }],
            sinks: vec![configrollout_api::SinkDelivery {
                sink: "team-slack".into(),
                triggers: vec![],
                delivered_through: 2,
                last_result: Some(configrollout_api::DeliveryResult::Retrying),
                last_attempt_at: Some(at.clone()),
                message: Some("answered HTTP 500".into()),
                given_up: 0,
            }],
            approval_wait: None,
        }),
        stages: vec![StageStatus {
            name: "canary".into(),
            state: StageState::Passed,
            started_at: Some(at.clone()),
            verified_at: Some(at.clone()),
            passed_at: Some(at.clone()),
            approval: None,
            gates: vec![GateStatus {
                name: "error-rate".into(),
                region: Some("eu-west-1".into()),
                verdict: Some(GateVerdict::Passed),
                dry_run: false,
                opens_at: Some(at.clone()),
                successes: 5,
                failures: 1,
                inconclusives: 0,
                consecutive_errors: 0,
                samples: vec![GateSample {
                    at: at.clone(),
                    value: Some("0.002".into()),
                    verdict: SampleVerdict::Successful,
                    message: None,
                    comparison: None,
                }],
            }],
        }],
        regions: vec![RegionRolloutStatus {
            name: "eu-west-1".into(),
            stage: Some("canary".into()),
            reachable: Some(true),
            materialized: Some(LifecycleMark {
                revision: "r3".into(),
                step: Some(RevisionStep::Expand),
                digest: Some("hmac-sha256:ab12".into()),
                at: at.clone(),
            }),
            drifted_keys: vec!["timeout_ms".into()],
            ..Default::default()
        }],
        history: vec![RevisionRecord {
            name: "r3".into(),
            digest: Some("hmac-sha256:ab12".into()),
            declared_at: at.clone(),
            stamp: "1764687600000.0.rollout:payments/checkout-flags".into(),
            keys_set: 2,
            keys_removed: 1,
            outcome: None,
            authors: Vec::new(),
            authors_unknown: None,
            schemas: Vec::new(),
            validated_by: Vec::new(),
        }],
        conditions: vec![Condition {
            type_: api::conditions::AWAITING_APPROVAL.into(),
            status: "True".into(),
            reason: "StageRequiresApproval".into(),
            message: "stage europe of r3 waits for a StageApproval".into(),
            last_transition_time: at,
            observed_generation: Some(4),
        }],
    };
    let value = serde_json::to_value(&status).unwrap();
    assert_eq!(
        value["stages"][0]["gates"][0]["samples"][0]["verdict"],
        "Successful"
    );
    assert_eq!(
        value["regions"][0]["materialized"]["at"],
        "2026-12-02T15:00:00Z"
    );
    assert_eq!(value["history"][0]["keysRemoved"], 1);
    assert_eq!(value["conditions"][0]["type"], "AwaitingApproval");
    let back: ConfigRolloutStatus = serde_json::from_value(value).unwrap();
    assert_eq!(back, status);
}

// ---- the schema the CRDs carry ----

fn crd(kind: &str) -> CustomResourceDefinition {
    api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

fn root_schema(kind: &str) -> JSONSchemaProps {
    crd(kind).spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.clone())
        .expect("schema")
}

/// The schema node at a dotted path of property names; `[]` steps into list items.
fn node(root: &JSONSchemaProps, path: &str) -> JSONSchemaProps {
    let mut at = root.clone();
    for step in path.split('.') {
        at = if step == "[]" {
            match at.items {
                Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(s)) => *s,
                other => panic!("{path}: no items schema at {step}: {other:?}"),
            }
        } else {
            at.properties
                .as_ref()
                .and_then(|p| p.get(step).cloned())
                .unwrap_or_else(|| panic!("{path}: no property {step}"))
        };
    }
    at
}

fn rules(schema: &JSONSchemaProps) -> Vec<(String, String)> {
    schema
        .x_kubernetes_validations
        .iter()
        .flatten()
        .map(|r| (r.rule.clone(), r.message.clone().unwrap_or_default()))
        .collect()
}

fn has_rule(schema: &JSONSchemaProps, rule_part: &str, message_part: &str) -> bool {
    rules(schema)
        .iter()
        .any(|(r, m)| r.contains(rule_part) && m.contains(message_part))
}

#[test]
fn crds_identify_the_kinds() {
    for (kind, plural, namespaced, short) in [
        ("ConfigRollout", "configrollouts", true, "crollout"),
        ("Region", "regions", false, "cregion"),
        ("StageApproval", "stageapprovals", true, "sapproval"),
    ] {
        let crd = crd(kind);
        assert_eq!(crd.spec.group, api::GROUP);
        assert_eq!(crd.spec.versions.len(), 1);
        assert_eq!(crd.spec.versions[0].name, api::VERSION);
        assert_eq!(crd.spec.names.plural, plural);
        assert_eq!(crd.spec.scope == "Namespaced", namespaced, "{kind}");
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&[short.to_owned()][..])
        );
        // Not `configrollout`: kubectl resolves a category before a singular resource name,
        // and `kubectl get configrollout NAME` would then ask every kind for NAME.
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["configrollout-all".to_owned()][..])
        );
        assert_ne!(
            crd.spec.names.categories,
            Some(vec![crd.spec.names.singular.clone().unwrap_or_default()])
        );
    }
    let columns = |kind: &str| -> Vec<(String, String)> {
        crd(kind).spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), c.json_path.clone()))
            .collect()
    };
    let rollout = columns("ConfigRollout");
    for (name, path) in [
        ("Phase", ".status.phase"),
        ("Stage", ".status.currentStage"),
        ("Revision", ".status.revision"),
        ("Regions", ".status.progress"),
        ("Age", ".metadata.creationTimestamp"),
    ] {
        assert!(rollout.contains(&(name.into(), path.into())), "{name}");
    }
    assert!(columns("Region").contains(&("Reachable".into(), ".status.reachable".into())));
    assert!(columns("StageApproval").contains(&("Approver".into(), ".spec.approver".into())));
    // status is a subresource, so users cannot write it with the spec and the controller
    // cannot clobber the spec while writing status.
    assert!(
        crd("ConfigRollout").spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    assert!(
        crd("Region").spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
}

#[test]
fn rollout_spec_carries_the_cross_field_rules() {
    let root = root_schema("ConfigRollout");
    let spec = node(&root, "spec");
    assert!(has_rule(
        &spec,
        "self.stages.exists_one(t, t.name == s.name)",
        "stage names must be unique"
    ));
    assert!(has_rule(
        &spec,
        "self.gates.exists_one(h, h.name == g.name)",
        "gate names must be unique"
    ));
    assert!(has_rule(
        &spec,
        "self.gates.exists(g, g.name == n)",
        "spec.gates"
    ));
    assert!(has_rule(
        &spec,
        "has(self.data) != has(self.fromConfigMap)",
        "exactly one of spec.data or spec.fromConfigMap"
    ));
    assert_eq!(
        spec.required.as_deref(),
        Some(&["stages".to_owned(), "target".to_owned()][..])
    );

    let stages = node(&root, "spec.stages");
    assert_eq!((stages.min_items, stages.max_items), (Some(1), Some(20)));
    assert!(has_rule(
        &node(&root, "spec.stages.[].regions"),
        "has(self.selector)",
        "exactly one of names (non-empty) or selector"
    ));
    assert!(has_rule(
        &node(&root, "spec.consumers.[]"),
        "has(self.name) != has(self.selector)",
        "exactly one of name or selector"
    ));
    assert!(has_rule(
        &node(&root, "spec.data"),
        "k.matches('^[-._a-zA-Z0-9]+$')",
        "spec.data"
    ));
    assert!(has_rule(
        &node(&root, "spec.target.name"),
        "self.matches(",
        "spec.target.name"
    ));
    assert!(has_rule(
        &node(&root, "spec.target.namespace"),
        "self.matches(",
        "spec.target.namespace"
    ));
    assert_eq!(node(&root, "spec.target.namespace").max_length, Some(63));
    assert_eq!(node(&root, "spec.target.name").max_length, Some(253));

    let limit = node(&root, "spec.revisionHistoryLimit");
    assert_eq!((limit.minimum, limit.maximum), (Some(1.0), Some(100.0)));
    assert_eq!(node(&root, "spec.stages.[].maxParallel").minimum, Some(1.0));
    assert_eq!(node(&root, "spec.gates.[].count").minimum, Some(1.0));
    assert_eq!(node(&root, "spec.gates.[].failureLimit").minimum, Some(0.0));
    assert_eq!(
        node(&root, "spec.gates.[].inconclusiveLimit").minimum,
        Some(0.0)
    );
}

#[test]
fn every_duration_field_uses_the_parsers_grammar() {
    let root = root_schema("ConfigRollout");
    let pattern_rule = format!("self.matches('{}')", api::DURATION_PATTERN);
    for path in [
        "spec.stages.[].pause.duration",
        "spec.stages.[].progressDeadline",
        "spec.gates.[].interval",
        "spec.gates.[].initialDelay",
        "spec.strategy.contract.pause.duration",
    ] {
        let field = node(&root, path);
        assert!(
            rules(&field).iter().any(|(r, _)| *r == pattern_rule),
            "{path}: {:?}",
            rules(&field)
        );
        assert!(
            field.max_length.is_some(),
            "{path} needs maxLength to bound CEL cost"
        );
    }
}

#[test]
fn enums_are_string_enums_with_their_defaults() {
    let root = root_schema("ConfigRollout");
    let values = |p: &str| -> Vec<String> {
        node(&root, p)
            .enum_
            .iter()
            .flatten()
            .filter_map(|v| v.0.as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(values("spec.onFailure"), ["Halt", "Rollback"]);
    assert_eq!(values("spec.driftPolicy"), ["Report", "Revert", "Adopt"]);
    assert_eq!(values("spec.stages.[].approval"), ["Required", "None"]);
    assert_eq!(
        values("spec.consumers.[].kind"),
        ["Deployment", "StatefulSet", "DaemonSet"]
    );
    assert_eq!(
        values("status.phase"),
        [
            "Pending",
            "Progressing",
            "Paused",
            "AwaitingApproval",
            "Halted",
            "RollingBack",
            "RolledBack",
            "Complete",
            "Refused"
        ]
    );
    assert_eq!(
        node(&root, "spec.onFailure").type_.as_deref(),
        Some("string")
    );
    // The apiserver fills in what serde fills in: one set of defaults, not two.
    let default = |p: &str| node(&root, p).default.map(|d| d.0);
    assert_eq!(default("spec.onFailure"), Some(json!("Halt")));
    assert_eq!(default("spec.driftPolicy"), Some(json!("Report")));
    assert_eq!(default("spec.revisionHistoryLimit"), Some(json!(10)));
    assert_eq!(default("spec.gates.[].interval"), Some(json!("1m")));
    assert_eq!(default("spec.gates.[].count"), Some(json!(1)));
    assert_eq!(default("spec.stages.[].maxParallel"), Some(json!(1)));
    assert_eq!(
        default("spec.strategy"),
        Some(serde_json::to_value(api::Strategy::default()).unwrap())
    );
}

#[test]
fn conditions_are_a_list_map_keyed_by_type() {
    for kind in ["ConfigRollout", "Region"] {
        let conditions = node(&root_schema(kind), "status.conditions");
        assert_eq!(
            conditions.x_kubernetes_list_type.as_deref(),
            Some("map"),
            "{kind}"
        );
        assert_eq!(
            conditions.x_kubernetes_list_map_keys.as_deref(),
            Some(&["type".to_owned()][..]),
            "{kind}"
        );
    }
}

#[test]
fn stage_approval_spec_is_immutable() {
    let spec = node(&root_schema("StageApproval"), "spec");
    assert!(has_rule(&spec, "self == oldSelf", "immutable"));
}

/// Field docs become `kubectl explain` text: every property of ours has one.
#[test]
fn every_property_is_described() {
    fn walk(at: &JSONSchemaProps, path: &str, missing: &mut Vec<String>) {
        for (name, child) in at.properties.iter().flatten() {
            let here = format!("{path}.{name}");
            if child.description.as_deref().unwrap_or("").is_empty() {
                missing.push(here.clone());
            }
            // LabelSelector and Condition are k8s-openapi's, documented upstream.
            if name != "selector" && name != "conditions" {
                walk(child, &here, missing);
            }
        }
        if let Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(items)) = &at.items {
            walk(items, &format!("{path}[]"), missing);
        }
    }
    for kind in ["ConfigRollout", "Region", "StageApproval"] {
        let root = root_schema(kind);
        let mut missing = Vec::new();
        for part in ["spec", "status"] {
            if let Some(node) = root.properties.as_ref().and_then(|p| p.get(part)) {
                walk(node, part, &mut missing);
            }
        }
        assert!(missing.is_empty(), "{kind}: undocumented {missing:?}");
    }
}

#[test]
fn spec_round_trips_through_the_yaml_crdgen_writes() {
    // The YAML printer must not mangle the CEL rules' quotes and backslashes.
    for (file, yaml) in api::crds_yaml().unwrap() {
        let parsed: CustomResourceDefinition = serde_saphyr::from_str(&yaml).unwrap();
        let original = api::crds()
            .into_iter()
            .find(|c| file.starts_with(c.metadata.name.as_deref().unwrap_or("?")))
            .unwrap();
        assert_eq!(parsed, original, "{file}");
    }
}

#[allow(dead_code)]
fn _spec_type_is_public(_: ConfigRolloutSpec) {}

/// `policies/mutating/spec-author.yaml` makes an author of whoever changes any spec field but
/// `paused`: it compares the fields one by one, so a field added to the spec must be
/// added there too, or changing it would make no one an author.
#[test]
fn the_spec_author_policy_compares_every_spec_field_but_paused() {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(configrollout_api::ConfigRollout::crd()).unwrap();
    let fields: Vec<String> = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        ["spec"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|field| field.as_str() != "paused")
        .cloned()
        .collect();
    assert!(fields.len() > 10, "{fields:?}");
    let policy = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../policies/mutating/spec-author.yaml"),
    )
    .unwrap();
    for field in &fields {
        let compared = format!("object.spec.?{field} != oldObject.spec.?{field}");
        assert!(
            policy.contains(&compared),
            "the policy does not compare spec.{field}"
        );
    }
    assert!(
        !policy.contains("spec.?paused"),
        "a pause must make no one an author"
    );
}
