//! Template gates (issue 34) in the simulated world: a gate names a ClusterGateTemplate
//! or GateTemplate; the engine samples what the template defines, records which
//! generation each stage's windows used, and applies a changed template from the next
//! stage's windows.

mod support;

use configrollout_api::{
    GateTemplateSpec, GateVerdict, RolloutPhase, SampleVerdict, StageState, conditions,
};
use configrollout_core::engine::gate_templates::{TemplateKey, TemplateObject};
use configrollout_core::engine::{Action, ProbeRequest};
use configrollout_core::gates::QueryResult;
use serde_json::json;
use support::{World, spec};

const REGIONS: [&str; 3] = ["c1", "w1", "w2"];

/// Two stages, each guarded by the gate `errors`, which uses `template`.
fn templated(template: serde_json::Value) -> configrollout_api::ConfigRolloutSpec {
    spec(json!({
        "gates": [{
            "name": "errors",
            "template": template,
            "interval": "30s",
            "count": 3,
        }],
        "stages": [
            {"name": "canary", "regions": {"names": ["c1"]}, "gates": ["errors"]},
            {"name": "wave", "regions": {"names": ["w1", "w2"]}, "gates": ["errors"]},
        ]
    }))
}

fn template(generation: i64, spec: serde_json::Value) -> TemplateObject {
    TemplateObject {
        generation,
        spec: serde_json::from_value::<GateTemplateSpec>(spec).unwrap(),
    }
}

/// The platform's error-ratio check, with a threshold arg.
fn error_ratio(generation: i64, condition: &str) -> TemplateObject {
    template(
        generation,
        json!({
            "args": [
                {"name": "service"},
                {"name": "threshold", "type": "Number", "default": "0.05"},
            ],
            "prometheus": {
                "query": "sum(rate(errors{service=\"{{args.service}}\",region=\"{{region}}\"}[5m]))",
                "condition": condition,
            },
        }),
    )
}

fn cluster(world: &mut World, name: &str, object: TemplateObject) {
    world
        .templates
        .insert((TemplateKey::Cluster, name.to_owned()), object);
}

fn gate_template_changed(world: &World) -> Vec<String> {
    world
        .log
        .iter()
        .filter_map(|(_, action)| match action {
            Action::Event {
                reason, message, ..
            } if reason == "GateTemplateChanged" => Some(message.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_template_gate_samples_the_platform_check_and_records_what_it_used() {
    let mut world = World::new(
        templated(json!({"name": "error-ratio", "args": {"service": "checkout"}})),
        &REGIONS,
    );
    cluster(
        &mut world,
        "error-ratio",
        error_ratio(1, "result < {{args.threshold}}"),
    );
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.01));
    world.run(40, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    let used = &world.status.gate_templates;
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0].gate, "errors");
    assert_eq!(used[0].template, "ClusterGateTemplate error-ratio");
    assert_eq!(used[0].generation, 1);
    assert_eq!(used[0].stage, "wave");
    let check = used[0].check.prometheus.as_ref().unwrap();
    assert_eq!(
        check.query, "sum(rate(errors{service=\"checkout\",region=\"{{region}}\"}[5m]))",
        "args substituted, placeholders kept for each sample"
    );
    assert_eq!(check.condition, "result < 0.05", "the default threshold");
    // Per region, as the template's query uses {{region}}.
    assert_eq!(world.status.stages[1].gates.len(), 2);
    assert!(gate_template_changed(&world).is_empty());
}

#[test]
fn a_template_changed_while_its_windows_sample_applies_from_the_next_stage() {
    let mut world = World::new(
        templated(json!({"name": "error-ratio", "args": {"service": "checkout"}})),
        &REGIONS,
    );
    cluster(&mut world, "error-ratio", error_ratio(1, "result < 0.5"));
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.3));
    world.tick();
    world.tick();
    assert_eq!(world.status.stages[0].state, StageState::Verifying);
    // The platform tightens the check while the canary's window samples.
    cluster(&mut world, "error-ratio", error_ratio(2, "result < 0.1"));
    world.run(40, 10);
    // The canary's window kept what it opened with (0.3 < 0.5) and passed; the wave's
    // opened with generation 2, on which 0.3 fails.
    assert_eq!(
        world.status.stages[0].gates[0].verdict,
        Some(GateVerdict::Passed)
    );
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    let wave = &world.status.stages[1].gates[0];
    assert_eq!(wave.verdict, Some(GateVerdict::Failed));
    assert_eq!(wave.samples[0].verdict, SampleVerdict::Failed);
    let used = &world.status.gate_templates[0];
    assert_eq!((used.generation, used.stage.as_str()), (2, "wave"));
    let changes = gate_template_changed(&world);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].contains("generation 2 from stage wave")
            && changes[0].contains("was ClusterGateTemplate error-ratio generation 1"),
        "{}",
        changes[0]
    );
}

#[test]
fn a_template_deleted_while_its_windows_sample_is_refused_when_the_next_would_open() {
    let mut world = World::new(
        templated(json!({"name": "error-ratio", "args": {"service": "checkout"}})),
        &REGIONS,
    );
    cluster(&mut world, "error-ratio", error_ratio(1, "result < 0.5"));
    world.tick();
    world.tick();
    world.templates.clear();
    world.run(40, 10);
    assert_eq!(
        world.status.stages[0].gates[0].verdict,
        Some(GateVerdict::Passed),
        "the canary's window sampled what it recorded"
    );
    let invalid = world.condition(conditions::INVALID_SPEC).expect("refused");
    assert!(
        invalid
            .message
            .contains("spec.gates[0].template: ClusterGateTemplate error-ratio not found"),
        "{}",
        invalid.message
    );
    // The canary's gate passed, so the wave was written; its own gate cannot be had,
    // and the rollout never completes without it.
    assert_ne!(world.status.phase, Some(RolloutPhase::Complete));
    assert!(
        world.status.stages[1]
            .gates
            .iter()
            .all(|window| window.verdict != Some(GateVerdict::Passed)),
        "{:?}",
        world.status.stages[1]
    );
}

#[test]
fn a_missing_template_or_a_bad_arg_refuses_the_spec_before_any_region() {
    for (args, templates, expected) in [
        (
            json!({"service": "checkout"}),
            false,
            "spec.gates[0].template: ClusterGateTemplate error-ratio not found",
        ),
        (
            json!({}),
            true,
            "spec.gates[0].template.args: ClusterGateTemplate error-ratio needs arg service",
        ),
        (
            json!({"service": "checkout", "treshold": "1"}),
            true,
            "spec.gates[0].template.args.treshold: ClusterGateTemplate error-ratio declares no \
             arg treshold (it declares: service, threshold)",
        ),
        (
            json!({"service": "checkout", "threshold": "a lot"}),
            true,
            "spec.gates[0].template.args.threshold: is not a finite decimal number",
        ),
    ] {
        let mut world = World::new(
            templated(json!({"name": "error-ratio", "args": args})),
            &REGIONS,
        );
        if templates {
            cluster(
                &mut world,
                "error-ratio",
                error_ratio(1, "result < {{args.threshold}}"),
            );
        }
        world.run(5, 10);
        let invalid = world.condition(conditions::INVALID_SPEC).expect("refused");
        assert!(
            invalid.message.contains(expected),
            "{expected}\n in {}",
            invalid.message
        );
        assert!(world.publishes().is_empty());
    }
}

#[test]
fn a_namespace_template_may_not_define_a_web_or_job_check() {
    let mut world = World::new(
        templated(json!({"kind": "GateTemplate", "name": "probe"})),
        &REGIONS,
    );
    world.templates.insert(
        (TemplateKey::Namespaced, "probe".to_owned()),
        template(
            1,
            json!({"web": {
                "url": "https://status.internal/ok",
                "jsonPath": "$.ok",
                "condition": "result == 1",
            }}),
        ),
    );
    world.run(5, 10);
    let invalid = world.condition(conditions::INVALID_SPEC).expect("refused");
    assert!(
        invalid
            .message
            .contains("GateTemplate app/probe defines a web or job check, which only a ClusterGateTemplate may"),
        "{}",
        invalid.message
    );
    assert!(world.publishes().is_empty());
}

#[test]
fn a_web_gate_renders_its_url_per_region_escaping_every_value() {
    let mut world = World::new(
        templated(json!({"name": "status", "args": {"service": "check out/../admin?x=1"}})),
        &REGIONS,
    );
    cluster(
        &mut world,
        "status",
        template(
            1,
            json!({
                "args": [{"name": "service"}],
                "web": {
                    "url": "https://status.internal/v1/{{args.service}}?region={{region}}",
                    "method": "POST",
                    "body": "{\"service\": \"{{args.service}}\", \"stage\": \"{{stage}}\"}",
                    "jsonPath": "$.errorRatio",
                    "condition": "result < 0.1",
                },
            }),
        ),
    );
    world.run(40, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    let (region, ProbeRequest::Web(web)) = &world.probes[0] else {
        panic!("a web sample: {:?}", world.probes[0]);
    };
    assert_eq!(region.as_deref(), Some("c1"));
    assert_eq!(
        web.url,
        "https://status.internal/v1/check%20out%2F..%2Fadmin%3Fx%3D1?region=c1"
    );
    assert_eq!(
        web.body.as_deref(),
        Some("{\"service\": \"check out/../admin?x=1\", \"stage\": \"canary\"}")
    );
}

#[test]
fn a_web_template_with_a_placeholder_in_its_host_is_refused() {
    let mut world = World::new(
        templated(json!({"name": "status", "args": {"host": "evil.example"}})),
        &REGIONS,
    );
    cluster(
        &mut world,
        "status",
        template(
            1,
            json!({
                "args": [{"name": "host"}],
                "web": {
                    "url": "https://{{args.host}}/status",
                    "jsonPath": "$.ok",
                    "condition": "result == 1",
                },
            }),
        ),
    );
    world.run(5, 10);
    let invalid = world.condition(conditions::INVALID_SPEC).expect("refused");
    assert!(
        invalid
            .message
            .contains("placeholders may appear in the path and query only"),
        "{}",
        invalid.message
    );
}

/// The platform's smoke test, run as a Job in each region.
fn smoke_test(world: &mut World) {
    cluster(
        world,
        "smoke",
        template(
            1,
            json!({
                "args": [{"name": "endpoint"}],
                "job": {"template": {"template": {"spec": {
                    "containers": [{
                        "name": "smoke",
                        "image": "registry.internal/smoke:1",
                        "args": ["--endpoint", "{{args.endpoint}}", "--region", "{{region}}"],
                    }],
                    "restartPolicy": "Never",
                }}}},
            }),
        ),
    );
}

#[test]
fn a_job_gate_waits_for_its_job_and_a_failed_job_halts_the_stage() {
    let mut world = World::new(
        templated(json!({"name": "smoke", "args": {"endpoint": "http://checkout"}})),
        &REGIONS,
    );
    smoke_test(&mut world);
    world.tick();
    world.tick();
    // The Job runs for a while: no sample, and the controller looks again in seconds.
    world.pending = Box::new(|_, _| true);
    let decision = world.tick();
    assert_eq!(world.status.stages[0].gates[0].samples.len(), 0);
    assert_eq!(
        decision.requeue_after,
        Some(std::time::Duration::from_secs(5)),
        "rechecked soon, not at once"
    );
    assert!(world.probes.is_empty(), "a running Job is no sample");
    // The Job failed: the sample is 0, which fails `result == 1`.
    world.pending = Box::new(|_, _| false);
    world.metric = Box::new(|_, _| QueryResult::Scalar(0.0));
    world.tick();
    let (region, ProbeRequest::Job(job)) = world.probes[0].clone() else {
        panic!("a job sample");
    };
    assert_eq!(region.as_deref(), Some("c1"));
    assert_eq!(
        job.template["template"]["spec"]["containers"][0]["args"],
        json!(["--endpoint", "http://checkout", "--region", "c1"])
    );
    world.run(10, 30);
    assert_eq!(world.status.phase, Some(RolloutPhase::Halted));
    assert_eq!(
        world.status.stages[0].gates[0].samples[0].verdict,
        SampleVerdict::Failed
    );
    assert!(world.publishes().iter().all(|(region, ..)| region == "c1"));
}

#[test]
fn a_job_gate_that_succeeds_passes_each_region() {
    let mut world = World::new(
        templated(json!({"name": "smoke", "args": {"endpoint": "http://checkout"}})),
        &REGIONS,
    );
    smoke_test(&mut world);
    world.metric = Box::new(|_, _| QueryResult::Scalar(1.0));
    world.run(60, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    assert_eq!(
        world.status.stages[1].gates.len(),
        2,
        "a job runs in each region"
    );
}

#[test]
fn a_grant_limited_to_platform_templates_refuses_inline_and_namespace_gates() {
    for gate in [
        json!({"name": "errors", "query": "up", "condition": "result == 1"}),
        json!({"name": "errors", "template": {"kind": "GateTemplate", "name": "mine"}}),
    ] {
        let mut world = World::new(
            spec(json!({
                "gates": [gate],
                "stages": [{"name": "canary", "regions": {"names": ["c1"]}, "gates": ["errors"]}],
            })),
            &REGIONS,
        );
        world.grant.platform_gates_only = true;
        world.run(3, 10);
        let invalid = world.condition(conditions::INVALID_SPEC).expect("refused");
        assert!(
            invalid
                .message
                .contains("use the platform's ClusterGateTemplates only"),
            "{}",
            invalid.message
        );
        assert!(world.publishes().is_empty());
    }
}

#[test]
fn windows_take_the_shape_of_the_check_they_open_with() {
    // The canary's windows sample a stage-wide query; the platform turns the template into
    // a job check, which runs in each region: the wave's windows open one per region.
    let mut world = World::new(
        templated(json!({"name": "smoke", "args": {"endpoint": "http://checkout"}})),
        &REGIONS,
    );
    cluster(
        &mut world,
        "smoke",
        template(
            1,
            json!({
                "args": [{"name": "endpoint"}],
                "prometheus": {"query": "sum(up)", "condition": "result >= 0"},
            }),
        ),
    );
    world.tick();
    world.tick();
    assert_eq!(world.status.stages[0].gates.len(), 1);
    assert_eq!(world.status.stages[0].gates[0].region, None, "stage-wide");
    smoke_test(&mut world);
    world.metric = Box::new(|_, _| QueryResult::Scalar(1.0));
    world.run(60, 10);
    assert_eq!(world.status.phase, Some(RolloutPhase::Complete));
    let wave: Vec<Option<&str>> = world.status.stages[1]
        .gates
        .iter()
        .map(|window| window.region.as_deref())
        .collect();
    assert_eq!(wave, [Some("w1"), Some("w2")], "one window per region");
}
