use super::*;

fn consumer(delivery: Delivery) -> Consumer {
    serde_json::from_value(json!({
        "kind": "Deployment", "name": "api", "delivery": delivery,
    }))
    .unwrap()
}

fn deployment(marker: Option<&str>, generation: i64, observed: i64) -> WorkloadState {
    WorkloadState {
        name: "api".into(),
        generation: Some(generation),
        observed_generation: Some(observed),
        desired: 3,
        updated: 2,
        ready: 3,
        restart_marker: marker.map(str::to_owned),
        reads_target: true,
    }
}

#[test]
fn restart_counts_only_instances_of_the_restarted_template() {
    let marker = restart_marker("r2", RevisionStep::Single);
    let restarted = count(
        &consumer(Delivery::Restart),
        &[deployment(Some(&marker), 4, 4)],
        &marker,
    );
    assert_eq!(
        restarted,
        ConsumerCount {
            total: 3,
            delivered: 2,
            restart_pending: false,
            ignored: Vec::new(),
        }
    );
}

#[test]
fn restart_counts_nothing_before_the_controller_observed_the_template() {
    let marker = restart_marker("r2", RevisionStep::Single);
    let unobserved = count(
        &consumer(Delivery::Restart),
        &[deployment(Some(&marker), 5, 4)],
        &marker,
    );
    assert_eq!(unobserved.delivered, 0);
    let previous = restart_marker("r1", RevisionStep::Single);
    let old_template = count(
        &consumer(Delivery::Restart),
        &[deployment(Some(&previous), 4, 4)],
        &marker,
    );
    assert_eq!(old_template.delivered, 0);
    assert!(old_template.restart_pending);
}

#[test]
fn reload_counts_ready_instances_without_a_restart() {
    let marker = restart_marker("r2", RevisionStep::Expand);
    let reloaded = count(
        &consumer(Delivery::Reload),
        &[deployment(None, 4, 3), deployment(None, 1, 1)],
        &marker,
    );
    assert_eq!(
        reloaded,
        ConsumerCount {
            total: 6,
            delivered: 6,
            restart_pending: false,
            ignored: Vec::new(),
        }
    );
}

#[test]
fn activation_is_the_count_the_query_reports_bounded_by_the_instances() {
    let series = |value: f64| (configrollout_core::gates::Labels::new(), value);
    assert_eq!(activated_from(&QueryResult::Scalar(2.0), 3), Some(2));
    assert_eq!(
        activated_from(&QueryResult::Vector(vec![series(1.0), series(1.0)]), 3),
        Some(2)
    );
    assert_eq!(activated_from(&QueryResult::Scalar(9.0), 3), Some(3));
    assert_eq!(activated_from(&QueryResult::Empty, 3), Some(0));
    assert_eq!(activated_from(&QueryResult::Scalar(f64::NAN), 3), None);
    assert_eq!(activated_from(&QueryResult::Error("down".into()), 3), None);
    assert_eq!(
        activated_from(&QueryResult::Partial("store down".into()), 3),
        None
    );
}

/// An API server that answers every request with `body` and records the request
/// targets (path and query).
async fn fake_api_server(
    body: serde_json::Value,
) -> (Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let body = body.to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let recorded = recorded.clone();
            let body = body.clone();
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                recorded.lock().unwrap().push(request.uri().to_string());
                let mut response = hyper::Response::new(http_body_util::Full::new(
                    hyper::body::Bytes::from(body.clone()),
                ));
                response.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("application/json"),
                );
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    let config = kube::Config::new(format!("http://{address}").parse().unwrap());
    (Client::try_from(config).unwrap(), seen)
}

fn selected(selector: serde_json::Value) -> Consumer {
    serde_json::from_value(json!({"kind": "Deployment", "selector": selector})).unwrap()
}

#[tokio::test]
async fn selected_consumers_are_listed_by_the_api_server() {
    let (client, seen) = fake_api_server(json!({
        "apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {},
        "items": [{
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "namespace": "shop", "labels": {"app": "api"}},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {"readyReplicas": 2},
        }],
    }))
    .await;
    let consumer = selected(json!({
        "matchLabels": {"app": "api"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["canary"]}],
    }));
    let found = workloads(&client, SHOP, &consumer).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].name.as_str(), found[0].desired), ("api", 2));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with("/apis/apps/v1/namespaces/shop/deployments?"),
        "{seen:?}"
    );
    assert!(
        seen[0].contains("labelSelector=app%3Dapi%2Ctier+notin+%28canary%29"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn an_invalid_consumer_selector_is_an_error_and_lists_nothing() {
    let (client, seen) = fake_api_server(json!({})).await;
    let consumer = selected(json!({
        "matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}],
    }));
    let error = workloads(&client, SHOP, &consumer).await.unwrap_err();
    assert!(
        matches!(&error, RegionError::ConsumerSelector { source, .. }
                if source.field == "matchExpressions[0]"),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with("consumer Deployment selector.matchExpressions[0]: "),
        "{error}"
    );
    let injected = selected(json!({"matchLabels": {"app": "api,tier!=canary"}}));
    assert!(workloads(&client, SHOP, &injected).await.is_err());
    assert!(seen.lock().unwrap().is_empty());
}

const SHOP: ConsumedTarget<'static> = ConsumedTarget {
    namespace: "shop",
    name: "limits",
};

fn pod(spec: serde_json::Value) -> PodSpec {
    serde_json::from_value(spec).unwrap()
}

#[test]
fn a_workload_reads_the_target_through_a_volume_a_projection_or_its_environment() {
    let container = |extra: serde_json::Value| {
        let mut container = json!({"name": "app", "image": "app"});
        if let (Some(container), Some(extra)) = (container.as_object_mut(), extra.as_object()) {
            container.extend(extra.clone());
        }
        container
    };
    let reading = [
        json!({"containers": [container(json!({}))],
                   "volumes": [{"name": "c", "configMap": {"name": "limits"}}]}),
        json!({"containers": [container(json!({}))],
                   "volumes": [{"name": "c", "projected": {"sources": [{"configMap": {"name": "limits"}}]}}]}),
        json!({"containers": [container(json!({"envFrom": [{"configMapRef": {"name": "limits"}}]}))]}),
        json!({"containers": [container(json!({"env": [{"name": "T", "valueFrom": {"configMapKeyRef": {"name": "limits", "key": "t"}}}]}))]}),
        json!({"containers": [container(json!({}))],
                   "initContainers": [container(json!({"envFrom": [{"configMapRef": {"name": "limits"}}]}))]}),
    ];
    for spec in reading {
        assert!(
            references_config_map(&pod(spec.clone()), "limits"),
            "{spec}"
        );
    }
    let other = json!({"containers": [container(json!({"envFrom": [{"configMapRef": {"name": "other"}}]}))],
                           "volumes": [{"name": "c", "configMap": {"name": "limits-old"}}]});
    assert!(!references_config_map(&pod(other), "limits"));
}

#[test]
fn a_matched_workload_that_does_not_read_the_target_is_neither_counted_nor_restarted() {
    let marker = restart_marker("r2", RevisionStep::Single);
    let mut unrelated = deployment(None, 1, 1);
    unrelated.name = "billing".into();
    unrelated.reads_target = false;
    let counted = count(
        &consumer(Delivery::Restart),
        &[deployment(None, 1, 1), unrelated],
        &marker,
    );
    assert_eq!(counted.total, 3);
    assert_eq!(counted.ignored, ["billing"]);
}

#[test]
fn the_marker_names_revision_and_pass() {
    assert_eq!(restart_marker("r7", RevisionStep::Contract), "r7/Contract");
}
