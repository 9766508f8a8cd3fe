//! Issue 32 on real clusters: a bad value is caught before any region sees it. A
//! ConfigSchema refuses a `spec.data` change and an edit of a `fromConfigMap` source (the
//! previous revision stays in every region, nothing is declared); a schema tightened
//! after a revision applies from the next one, and one dropped from the spec in the same
//! change still applies; the grant's ClusterConfigSchema cannot be escaped; external
//! validators (real HTTP servers on loopback, HMAC-signed requests) refuse, time out
//! (which refuses) and accept. No refused value reaches status, Events, logs or
//! metrics. One lab for the whole binary; the scenarios run in order.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use configrollout::api::annotations::SCHEMA_AUTHOR_ANNOTATION;
use configrollout::api::{
    ClusterConfigSchema, ClusterConfigValidator, ConfigRollout, ConfigSchema,
};
use configrollout::engine::tenancy::REQUIRED_SCHEMAS;
use configrollout_e2e::{HUB, LabOptions, SYSTEM_NAMESPACE};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use support::*;

/// A refused value carries this; it must never be quoted anywhere.
const SENTINEL: &str = "SENTINEL-b71e";
/// The validators' HMAC key, in a Secret of the controller's namespace.
const HMAC_KEY: &[u8] = b"validator-hmac-key-for-the-lab";

fn stages() -> &'static str {
    "  stages:\n    - {name: canary, regions: {names: [region-1]}}\n    - {name: rest, regions: {names: [region-2]}}\n"
}

/// The team's schema: `rate` an integer up to `max_rate`, `burst` at least `rate`,
/// `mode` one of two, `routes` a JSON document with a schema; nothing else but `note`.
fn limits_schema(name: &str, max_rate: u32, validators: &[&str]) -> ConfigSchema {
    serde_json::from_value(json!({
        "apiVersion": "configrollout.dev/v1alpha1",
        "kind": "ConfigSchema",
        "metadata": {"name": name, "namespace": TEAM},
        "spec": {
            "keys": [
                {"name": "rate", "type": "Integer", "required": true, "minimum": 1, "maximum": max_rate},
                {"name": "burst", "type": "Integer", "required": true},
                {"name": "mode", "type": "Enum", "values": ["fast", "safe"]},
                {"name": "routes", "type": "Json", "jsonSchema": {
                    "type": "object",
                    "properties": {"timeoutMs": {"type": "integer", "minimum": 1}},
                    "required": ["timeoutMs"]
                }},
                {"name": "note", "type": "String"}
            ],
            "unknownKeys": "Forbid",
            "rules": [{"rule": "int(self.burst) >= int(self.rate)", "message": "burst must be at least rate"}],
            "validators": validators,
        }
    }))
    .expect("schema")
}

async fn apply_schema(world: &World, schema: &ConfigSchema) {
    let api: Api<ConfigSchema> = Api::namespaced(world.hub.clone(), TEAM);
    let params = PatchParams::apply("values-test").force();
    within(
        "apply ConfigSchema",
        api.patch(&schema.name_any(), &params, &Patch::Apply(schema)),
    )
    .await;
}

fn good_data() -> serde_json::Value {
    json!({"rate": "100", "burst": "200", "mode": "safe", "routes": "{\"timeoutMs\": 300}", "note": "n"})
}

/// Waits until the rollout reports its candidate refused (`InvalidValue`), and returns
/// the condition's message.
async fn refused(world: &World, name: &str) -> String {
    eventually(
        &format!("{name}: refused (InvalidValue)"),
        PROGRESS,
        || async {
            let rollout = world.rollout(name).await;
            let generation = rollout.metadata.generation;
            let status = rollout.status?;
            let condition = status.true_condition("InvalidSpec")?;
            (condition.reason == "InvalidValue" && condition.observed_generation == generation)
                .then(|| condition.message.clone())
        },
    )
    .await
}

/// Every region still holds exactly `expected`, and the rollout is still at `revision`.
async fn nothing_moved(
    world: &World,
    name: &str,
    revision: &str,
    expected: &BTreeMap<String, String>,
) {
    for region in ["region-1", "region-2"] {
        let held = world.target_data(region, name).await;
        assert_eq!(held.as_ref(), Some(expected), "{region} keeps {revision}");
    }
    let rollout = world.rollout(name).await;
    let status = rollout.status.expect("status");
    assert_eq!(
        status.revision.as_deref(),
        Some(revision),
        "nothing declared"
    );
    assert_eq!(
        status.history.last().map(|record| record.name.as_str()),
        Some(revision),
        "no revision recorded"
    );
}

fn strings(value: &serde_json::Value) -> BTreeMap<String, String> {
    serde_json::from_value(value.clone()).expect("string map")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn values_are_checked_before_any_region_sees_them() {
    let world = World::start(LabOptions {
        regions: 2,
        ..LabOptions::default()
    })
    .await;
    let probe = free_local_addr();
    let _controller = world.start_controller_on("controller-values", &probe);
    let validators = Validators::start().await;

    a_schema_refuses_spec_data_before_any_region(&world).await;
    a_schema_refuses_an_edit_of_the_source(&world).await;
    a_schema_change_applies_from_the_next_revision(&world).await;
    the_grant_requires_a_platform_schema(&world).await;
    external_validators_refuse_time_out_and_accept(&world, &validators).await;
    lint_reads_the_schemas_from_the_hub(&world).await;
    the_policy_refuses_at_apply_what_cel_can_check(&world).await;

    for (place, text) in observable_output(&world, &format!("http://{probe}/metrics")).await {
        assert!(!text.contains(SENTINEL), "a refused value reached {place}");
    }
}

/// Installs `policies/<file>` in the hub, as the platform admin.
async fn install_policy(world: &World, file: &str) {
    let path = configrollout_e2e::repository_root()
        .join("policies")
        .join(file);
    world
        .lab
        .apply(HUB, configrollout_e2e::User::Admin, &path)
        .await
        .unwrap_or_else(|e| panic!("install {file}: {e}"));
}

/// Installs `policies/mutating/schema-author.yaml` and waits until the apiserver stamps a schema's
/// author itself, whatever the client wrote.
async fn install_schema_author_policy(world: &World) {
    install_policy(world, "mutating/schema-author.yaml").await;
    let mut forged = limits_schema("limits", 1000, &[]);
    forged
        .annotations_mut()
        .insert(SCHEMA_AUTHOR_ANNOTATION.to_owned(), "mallory".to_owned());
    eventually(
        "the schema's author is stamped by the apiserver",
        PROGRESS,
        || async {
            // Created afresh each time: an update that leaves the spec alone keeps what
            // the stored object had, which before the policy was enforced was the forgery.
            let api: Api<ConfigSchema> = Api::namespaced(world.hub.clone(), TEAM);
            let _ = tokio::time::timeout(CALL, api.delete("limits", &Default::default())).await;
            eventually("the schema is gone", PROGRESS, || async {
                within("read schema", api.get_opt("limits"))
                    .await
                    .is_none()
                    .then_some(())
            })
            .await;
            apply_schema(world, &forged).await;
            let stored = within("read schema", api.get("limits")).await;
            (stored
                .annotations()
                .get(SCHEMA_AUTHOR_ANNOTATION)
                .map(String::as_str)
                == Some("admin"))
            .then_some(())
        },
    )
    .await;
}

async fn a_schema_refuses_spec_data_before_any_region(world: &World) {
    install_schema_author_policy(world).await;
    let name = "limited";
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                "  schemas: [{{name: limits}}]\n  data: {}\n{}",
                good_data(),
                stages()
            ),
        ))
        .await;
    world.wait_condition(name, "Complete", PROGRESS).await;
    let r1 = strings(&good_data());
    let declared = world.rollout(name).await.status.expect("status");
    let record = declared.history.last().expect("r1 recorded");
    assert_eq!(record.schemas.len(), 1, "r1 records its schema: {record:?}");
    assert_eq!(record.schemas[0].name, "limits");
    assert_eq!(
        record.schemas[0].author.as_deref(),
        Some("admin"),
        "stamped, not forged"
    );

    // Every kind of rule broken at once, each value carrying the sentinel where the type
    // lets it.
    let bad = json!({
        "rate": format!("12{SENTINEL}"),
        "burst": "1",
        "mode": format!("turbo-{SENTINEL}"),
        "routes": format!("{{\"timeoutMs\": \"{SENTINEL}\"}}"),
        "note": "n",
        "extra": SENTINEL,
    });
    change_data(&world.rollouts(), name, bad).await;
    let message = refused(world, name).await;
    for named in ["`rate`", "`mode`", "`routes`", "/timeoutMs", "`extra`"] {
        assert!(
            message.contains(named),
            "the refusal names {named}: {message}"
        );
    }
    assert!(!message.contains(SENTINEL), "no value quoted: {message}");
    nothing_moved(world, name, "r1", &r1).await;

    // A value that passes the per-key rules but breaks the cross-key rule.
    change_data(
        &world.rollouts(),
        name,
        json!({"rate": "500", "burst": "20", "mode": "safe", "routes": "{\"timeoutMs\": 300}", "extra": null}),
    )
    .await;
    let message = eventually("the CEL rule refuses", PROGRESS, || async {
        let message = refused(world, name).await;
        message
            .contains("burst must be at least rate")
            .then_some(message)
    })
    .await;
    for fine in ["`rate`", "`mode`", "`routes`", "`extra`"] {
        assert!(!message.contains(fine), "{fine} is fine now: {message}");
    }
    nothing_moved(world, name, "r1", &r1).await;

    // Fixed: declared and rolled out.
    change_data(&world.rollouts(), name, json!({"burst": "600"})).await;
    world.wait_phase(name, "Complete", PROGRESS).await;
    let rollout = world.rollout(name).await;
    assert_eq!(
        rollout.status.and_then(|s| s.revision).as_deref(),
        Some("r2")
    );
}

async fn a_schema_refuses_an_edit_of_the_source(world: &World) {
    let name = "sourced";
    let source = "sourced-src";
    let configmaps: Api<ConfigMap> = Api::namespaced(world.hub.clone(), TEAM);
    let source_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": source, "namespace": TEAM},
        "data": good_data(),
    }))
    .expect("source");
    within(
        "create the source",
        configmaps.create(&PostParams::default(), &source_map),
    )
    .await;
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                "  schemas: [{{name: limits}}]\n  fromConfigMap: {{name: {source}}}\n{}",
                stages()
            ),
        ))
        .await;
    world.wait_condition(name, "Complete", PROGRESS).await;

    let edit = json!({"data": {"rate": format!("{SENTINEL}")}});
    within(
        "edit the source",
        configmaps.patch(source, &PatchParams::default(), &Patch::Merge(&edit)),
    )
    .await;
    let message = refused(world, name).await;
    assert!(message.contains("`rate`"), "{message}");
    assert!(!message.contains(SENTINEL), "{message}");
    nothing_moved(world, name, "r1", &strings(&good_data())).await;

    let fix = json!({"data": {"rate": "150"}});
    within(
        "fix the source",
        configmaps.patch(source, &PatchParams::default(), &Patch::Merge(&fix)),
    )
    .await;
    eventually("the fixed source rolls out", PROGRESS, || async {
        let held = world.target_data("region-2", name).await?;
        (held.get("rate").map(String::as_str) == Some("150")).then_some(())
    })
    .await;
}

async fn a_schema_change_applies_from_the_next_revision(world: &World) {
    let name = "limited";
    let before = world.rollout(name).await.status.expect("status");
    let current = before.revision.clone().expect("a revision");
    let held = world.target_data("region-1", name).await.expect("target");

    // Tightened below what the current revision holds (rate 500): the revision already
    // out is not judged again.
    apply_schema(world, &limits_schema("limits", 200, &[])).await;
    let touch = json!({"metadata": {"labels": {"touched": "after-the-schema-change"}}});
    within(
        "touch the rollout so that it is reconciled",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&touch)),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = world.rollout(name).await;
    assert!(
        !condition_true(&after, "InvalidSpec"),
        "the rollout out is not re-judged"
    );
    assert_eq!(
        after.status.as_ref().and_then(|s| s.revision.clone()),
        Some(current.clone())
    );

    // The next revision is: 300 was fine before the change, not after.
    change_data(
        &world.rollouts(),
        name,
        json!({"rate": "300", "burst": "300"}),
    )
    .await;
    let message = refused(world, name).await;
    assert!(
        message.contains("`rate`") && message.contains("maximum"),
        "{message}"
    );
    nothing_moved(world, name, &current, &held).await;

    // Dropping the schema from the spec in the same change does not escape it.
    let drop = json!({"spec": {"schemas": null}});
    within(
        "drop the schema reference",
        world
            .rollouts()
            .patch(name, &PatchParams::default(), &Patch::Merge(&drop)),
    )
    .await;
    let message = refused(world, name).await;
    assert!(message.contains("ConfigSchema team/limits"), "{message}");
    nothing_moved(world, name, &current, &held).await;

    // Within the new rule: declared, with the schema's new generation on record.
    change_data(
        &world.rollouts(),
        name,
        json!({"rate": "150", "burst": "300"}),
    )
    .await;
    world.wait_phase(name, "Complete", PROGRESS).await;
    let status = world.rollout(name).await.status.expect("status");
    assert_ne!(status.revision, Some(current), "a new revision");
    let record = status.history.last().expect("record");
    let schema: Api<ConfigSchema> = Api::namespaced(world.hub.clone(), TEAM);
    let generation = within("read schema", schema.get("limits"))
        .await
        .metadata
        .generation;
    assert_eq!(
        record.schemas.first().map(|s| s.generation),
        generation,
        "the record names the schema's generation: {record:?}"
    );
}

async fn the_grant_requires_a_platform_schema(world: &World) {
    let platform: ClusterConfigSchema = serde_json::from_value(json!({
        "apiVersion": "configrollout.dev/v1alpha1",
        "kind": "ClusterConfigSchema",
        "metadata": {"name": "platform-rules"},
        "spec": {"forbiddenKeys": ["debug_dump"]},
    }))
    .expect("cluster schema");
    let api: Api<ClusterConfigSchema> = Api::all(world.hub.clone());
    within(
        "create ClusterConfigSchema",
        api.create(&PostParams::default(), &platform),
    )
    .await;
    world
        .lab
        .annotate_namespace(HUB, TEAM, &[(REQUIRED_SCHEMAS, "platform-rules")])
        .await
        .expect("require the platform schema");
    let name = "unschemed";
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                "  data: {{a: \"1\", debug_dump: \"{SENTINEL}\"}}\n{}",
                stages()
            ),
        ))
        .await;
    let message = refused(world, name).await;
    assert!(
        message.contains("ClusterConfigSchema platform-rules") && message.contains("`debug_dump`"),
        "{message}"
    );
    for region in ["region-1", "region-2"] {
        assert_eq!(
            world.target_data(region, name).await,
            None,
            "{region} untouched"
        );
    }
    change_data(&world.rollouts(), name, json!({"debug_dump": null})).await;
    world.wait_condition(name, "Complete", PROGRESS).await;
}

async fn external_validators_refuse_time_out_and_accept(world: &World, validators: &Validators) {
    let secrets: Api<Secret> = Api::namespaced(world.hub.clone(), SYSTEM_NAMESPACE);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("validator-hmac".into()),
            ..ObjectMeta::default()
        },
        data: Some([("key".to_owned(), ByteString(HMAC_KEY.to_vec()))].into()),
        ..Secret::default()
    };
    within(
        "create the HMAC Secret",
        secrets.create(&PostParams::default(), &secret),
    )
    .await;
    let api: Api<ClusterConfigValidator> = Api::all(world.hub.clone());
    for (name, path) in [
        ("refuser", "refuse"),
        ("hanger", "hang"),
        ("accepter", "accept"),
    ] {
        let validator: ClusterConfigValidator = serde_json::from_value(json!({
            "apiVersion": "configrollout.dev/v1alpha1",
            "kind": "ClusterConfigValidator",
            "metadata": {"name": name},
            "spec": {
                "url": format!("http://{}/{path}", validators.addr),
                "timeoutSeconds": 2,
                "hmacSecret": {"name": "validator-hmac", "key": "key"},
            },
        }))
        .expect("validator");
        within(
            "create validator",
            api.create(&PostParams::default(), &validator),
        )
        .await;
    }

    let name = "validated";
    apply_schema(
        world,
        &limits_schema("validated-limits", 1000, &["refuser"]),
    )
    .await;
    world
        .create_rollout(&rollout_yaml(
            name,
            &format!(
                "  schemas: [{{name: validated-limits}}]\n  data: {}\n{}",
                good_data(),
                stages()
            ),
        ))
        .await;
    let message = refused(world, name).await;
    assert!(
        message.contains("ClusterConfigValidator refuser refused it: rate too high for the fleet"),
        "{message}"
    );
    for region in ["region-1", "region-2"] {
        assert_eq!(
            world.target_data(region, name).await,
            None,
            "{region} untouched"
        );
    }

    apply_schema(world, &limits_schema("validated-limits", 1000, &["hanger"])).await;
    let message = eventually("the hanging validator fails closed", PROGRESS, || async {
        let message = refused(world, name).await;
        message
            .contains("hanger gave no verdict")
            .then_some(message)
    })
    .await;
    assert!(message.contains("timed out"), "{message}");
    for region in ["region-1", "region-2"] {
        assert_eq!(
            world.target_data(region, name).await,
            None,
            "{region} untouched"
        );
    }

    apply_schema(
        world,
        &limits_schema("validated-limits", 1000, &["accepter"]),
    )
    .await;
    let complete = world.wait_condition(name, "Complete", PROGRESS).await;
    let record = complete
        .status
        .as_ref()
        .and_then(|status| status.history.last())
        .expect("a revision");
    assert_eq!(
        record.validated_by,
        ["accepter"],
        "the verdict is recorded: {record:?}"
    );
    let seen = validators.seen.lock().unwrap().clone();
    let accepted: Vec<&Seen> = seen.iter().filter(|s| s.path == "/accept").collect();
    assert!(!accepted.is_empty(), "the accepting validator was asked");
    for request in &seen {
        assert!(
            request.signature_valid,
            "every request is signed with the key: {request:?}"
        );
    }
    let body: serde_json::Value = serde_json::from_slice(&accepted[0].body).expect("JSON body");
    assert_eq!(body["kind"], "ValidationRequest");
    assert_eq!(body["rollout"]["name"], name);
    assert_eq!(
        body["data"]["rate"], "100",
        "the candidate's values are sent: {body}"
    );
}

/// What one validator request carried.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    body: Vec<u8>,
    signature_valid: bool,
}

/// Three external validators behind one loopback HTTP server: `/accept`, `/refuse`
/// (with a reason) and `/hang` (never answers).
struct Validators {
    addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Validators {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Validators {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(serve(stream, recorded.clone()));
            }
        });
        Validators { addr, seen, task }
    }
}

/// Answers one HTTP/1.1 request (the controller sends one per connection or reuses it;
/// both work as each request is read whole before the answer).
async fn serve(mut stream: tokio::net::TcpStream, seen: Arc<Mutex<Vec<Seen>>>) {
    while let Some(request) = loopback::read_request(&mut stream).await {
        seen.lock().unwrap().push(Seen {
            path: request.path.clone(),
            body: request.body.clone(),
            signature_valid: request.signed_with(HMAC_KEY),
        });
        let answer = match request.path.as_str() {
            "/accept" => json!({"allowed": true, "reason": ""}),
            "/refuse" => json!({"allowed": false, "reason": "rate too high for the fleet"}),
            _ => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
        };
        if !loopback::answer(&mut stream, 200, &answer.to_string()).await {
            return;
        }
    }
}

/// `policies/config-schema.yaml`: with it installed, `kubectl apply` of a rollout whose
/// spec.data breaks a per-key rule of a ConfigSchema it names is refused at once, naming
/// the schema and the keys, never the value. What CEL does not check there (patterns,
/// documents, CEL rules) is left to the controller, and a rollout naming no schema is not
/// concerned.
async fn the_policy_refuses_at_apply_what_cel_can_check(world: &World) {
    install_policy(world, "config-schema.yaml").await;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let try_create = |data: serde_json::Value, schemas: &str| {
        let yaml = rollout_yaml(
            "admitted",
            &format!("{schemas}  data: {data}\n{}", stages()),
        );
        let rollout: ConfigRollout = serde_saphyr::from_str(&yaml).expect("rollout YAML");
        let rollouts = world.rollouts();
        let params = dry_run.clone();
        async move {
            tokio::time::timeout(CALL, rollouts.create(&params, &rollout))
                .await
                .expect("the hub answers")
        }
    };
    let named = "  schemas: [{name: limits}]\n";
    // limits allows rate up to 200 now, mode fast or safe, and nothing unlisted.
    let bad = json!({"rate": format!("9{SENTINEL}"), "burst": "10", "mode": "turbo"});
    let message = eventually("the policy refuses at apply", PROGRESS, || async {
        match try_create(bad.clone(), named).await {
            Err(kube::Error::Api(status)) => Some(status.message),
            _ => None,
        }
    })
    .await;
    assert!(
        message.contains("ConfigSchema limits refuses the value of key(s) rate, mode"),
        "{message}"
    );
    assert!(!message.contains(SENTINEL), "{message}");

    let missing = json!({"burst": "10", "legacy": "x"});
    let Err(kube::Error::Api(status)) = try_create(missing, named).await else {
        panic!("a missing required key is admitted");
    };
    assert!(
        status.message.contains("requires key(s) rate"),
        "{}",
        status.message
    );

    // Within the per-key rules the policy checks; the controller judges the rest.
    let fine = json!({"rate": "150", "burst": "10", "mode": "safe"});
    try_create(fine, named).await.expect("admitted");
    // A rollout that names no schema is not the policy's business.
    try_create(bad, "").await.expect("admitted without schemas");
}

/// `kubectl configrollout lint -f FILE --from-hub`, as the admin: the ConfigSchema the
/// rollout names and the ClusterConfigSchema the grant requires are read from the hub,
/// and their refusals printed before anything is applied, without the value.
async fn lint_reads_the_schemas_from_the_hub(world: &World) {
    let file = world.lab.root_dir().join("lint-me.yaml");
    let bad = json!({"rate": format!("5{SENTINEL}"), "burst": "10", "debug_dump": "x"});
    let yaml = rollout_yaml(
        "linted",
        &format!("  schemas: [{{name: limits}}]\n  data: {bad}\n{}", stages()),
    );
    std::fs::write(&file, yaml).expect("write the manifest");
    let kubeconfig = world
        .lab
        .kubeconfig(HUB, configrollout_e2e::User::Admin)
        .expect("kubeconfig");
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_lab-plugin"))
        .env("KUBECONFIG", &kubeconfig)
        .args(["lint", "--from-hub", "-n", TEAM, "-f"])
        .arg(&file)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PROGRESS, run)
        .await
        .expect("lint exits")
        .expect("the plugin runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "refused: {stdout}");
    assert!(
        stdout.contains("ConfigSchema limits: key `rate`"),
        "the rollout's schema, from the hub: {stdout}"
    );
    assert!(
        stdout.contains("ClusterConfigSchema platform-rules: key `debug_dump`"),
        "the grant's schema, from the hub: {stdout}"
    );
    assert!(!stdout.contains(SENTINEL), "{stdout}");
}
