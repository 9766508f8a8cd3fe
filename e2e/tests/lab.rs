//! The lab itself, on real parts: a hub and three regions (upstream kube-apiserver on
//! etcd each), the workloads and Prometheus. One lab for the whole test binary; the
//! steps run in order on it, and at the end no lab process may be left.

mod support;

use support::{CALL, within};

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use configrollout_e2e::manifests::{is_established, read_documents};
use configrollout_e2e::{
    ConfigLoad, HUB, KUBECONFIG_SECRET_KEY, Lab, LabOptions, REGION_LABEL, SYSTEM_NAMESPACE,
    Sample, TIER_LABEL, User, process_alive, processes_mentioning,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;

/// Bound on waiting for Prometheus to reflect a change (scrapes every 1s, 10s window).
const PROMETHEUS_DEADLINE: Duration = Duration::from_secs(90);

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

async fn every_cluster_answers_version_and_readyz(lab: &Lab) {
    assert_eq!(lab.clusters().len(), 4, "hub + 3 regions");
    for cluster in lab.clusters() {
        let viewer = lab.client(&cluster, User::Viewer).expect("viewer client");
        let version = within(&format!("{cluster} /version"), viewer.apiserver_version()).await;
        assert_eq!(version.major, "1", "{cluster}: {version:?}");
        assert!(
            version.minor.starts_with("36"),
            "{cluster} runs the pinned 1.36 release: {version:?}"
        );

        let admin = lab.client(&cluster, User::Admin).expect("admin client");
        let readyz = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("request");
        let body = within(&format!("{cluster} /readyz"), admin.request_text(readyz)).await;
        assert_eq!(body.trim(), "ok", "{cluster} /readyz");
    }
}

async fn crds_are_established_in_the_hub(lab: &Lab) {
    let crds_dir = configrollout_e2e::repository_root().join("crds");
    let mut expected = BTreeSet::new();
    for file in configrollout_e2e::manifests::manifest_files(&crds_dir).expect("list crds/") {
        for object in read_documents(&file).expect("parse CRD file") {
            if object
                .types
                .as_ref()
                .is_some_and(|t| t.kind == "CustomResourceDefinition")
            {
                expected.insert(object.metadata.name.clone().expect("CRD name"));
            }
        }
    }
    let installed: BTreeSet<String> = lab.installed_crds().iter().cloned().collect();
    assert_eq!(
        installed, expected,
        "the lab installs exactly the CRDs of crds/"
    );

    let crds: Api<CustomResourceDefinition> =
        Api::all(lab.client(HUB, User::Admin).expect("hub admin"));
    for name in &expected {
        let crd = within(&format!("get CRD {name}"), crds.get(name)).await;
        assert!(
            is_established(&crd),
            "CRD {name} is established: {:?}",
            crd.status
        );
    }
    if expected.is_empty() {
        eprintln!("note: crds/ holds no CRD yet; only the (empty) set was checked");
    }
}

/// Every region's kubeconfig Secret in the hub reaches that region, as the controller's
/// identity; and, once the Region CRD is installed, a Region object points at it.
async fn regions_are_registered_in_the_hub(lab: &Lab) {
    let hub = lab.client(HUB, User::Admin).expect("hub admin");
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
    for region in lab.regions() {
        let secret_name = lab.kubeconfig_secret(&region).expect("secret name");
        let secret = within("get kubeconfig Secret", secrets.get(&secret_name)).await;
        let raw = secret
            .data
            .as_ref()
            .and_then(|d| d.get(KUBECONFIG_SECRET_KEY))
            .expect("kubeconfig key");
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&raw.0).expect("utf-8"))
                .expect("kubeconfig parses");
        let config = within(
            "config from Secret",
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            ),
        )
        .await;
        let client = kube::Client::try_from(config).expect("client from Secret");
        // The controller identity may read ConfigMaps in its region (by name, as the
        // controller does: an absent one answers 404, not 403).
        let in_region: Api<ConfigMap> = Api::namespaced(client, "default");
        within(
            &format!("read a ConfigMap in {region} via its Secret"),
            in_region.get_opt("configrollout-lab-probe"),
        )
        .await;
    }

    if lab.regions_registered() {
        let gvk = GroupVersionKind::gvk("configrollout.dev", "v1alpha1", "Region");
        let regions: Api<DynamicObject> = Api::all_with(hub, &ApiResource::from_gvk(&gvk));
        for (index, name) in lab.regions().iter().enumerate() {
            let region = within(&format!("get Region {name}"), regions.get(name)).await;
            let labels = region.metadata.labels.clone().unwrap_or_default();
            assert_eq!(labels.get(REGION_LABEL), Some(name));
            let tier = if index == 0 { "canary" } else { "production" };
            assert_eq!(labels.get(TIER_LABEL).map(String::as_str), Some(tier));
            let reference = &region.data["spec"]["kubeconfigSecretRef"];
            assert_eq!(reference["namespace"], SYSTEM_NAMESPACE);
            assert_eq!(
                reference["name"],
                lab.kubeconfig_secret(name).expect("secret name")
            );
            assert_eq!(reference["key"], KUBECONFIG_SECRET_KEY);
            assert_eq!(
                region.data["spec"]["prometheus"]["url"],
                lab.prometheus_url()
            );
        }
    } else {
        eprintln!("note: no Region CRD in crds/ yet, so no Region objects were checked");
    }
}

async fn a_configmap_stays_in_its_region(lab: &Lab) {
    let regions = lab.regions();
    let writer: Api<ConfigMap> =
        Api::default_namespaced(lab.client(&regions[0], User::Admin).expect("client"));
    within(
        "create ConfigMap in region-1",
        writer.create(
            &PostParams::default(),
            &config_map("only-in-region-1", &[("k", "v")]),
        ),
    )
    .await;
    let read_back = within("get it back", writer.get("only-in-region-1")).await;
    assert_eq!(
        read_back.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("v")
    );

    for other in lab.clusters().iter().filter(|c| **c != regions[0]) {
        let api: Api<ConfigMap> =
            Api::default_namespaced(lab.client(other, User::Admin).expect("client"));
        let found = within(&format!("look in {other}"), api.get_opt("only-in-region-1")).await;
        assert!(
            found.is_none(),
            "a ConfigMap written in {} is visible in {other}",
            regions[0]
        );
    }
}

fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

async fn the_viewer_reads_but_may_not_write(lab: &Lab) {
    let region = &lab.regions()[0];
    let viewer: Api<ConfigMap> =
        Api::default_namespaced(lab.client(region, User::Viewer).expect("viewer"));
    let read = within("viewer reads a ConfigMap", viewer.get("only-in-region-1")).await;
    assert_eq!(read.metadata.name.as_deref(), Some("only-in-region-1"));
    within("viewer lists ConfigMaps", viewer.list(&Default::default())).await;

    let refused = tokio::time::timeout(
        CALL,
        viewer.create(
            &PostParams::default(),
            &config_map("viewer-write", &[("k", "v")]),
        ),
    )
    .await
    .expect("answer within the bound");
    let error = refused.expect_err("the viewer must not create a ConfigMap");
    assert_eq!(
        status_code(&error),
        Some(403),
        "refused as forbidden: {error:?}"
    );

    let hub_secrets: Api<Secret> = Api::namespaced(
        lab.client(HUB, User::Viewer).expect("viewer"),
        SYSTEM_NAMESPACE,
    );
    let secret = lab.kubeconfig_secret(region).expect("secret name");
    let refused = tokio::time::timeout(CALL, hub_secrets.get(&secret))
        .await
        .expect("answer within the bound");
    let error = refused.expect_err("the viewer must not read the regions' credentials");
    assert_eq!(
        status_code(&error),
        Some(403),
        "refused as forbidden: {error:?}"
    );
}

async fn a_restarted_region_keeps_its_configmaps(lab: &mut Lab) {
    let region = lab.regions()[1].clone();
    let api: Api<ConfigMap> =
        Api::default_namespaced(lab.client(&region, User::Admin).expect("client"));
    within(
        "create ConfigMap before the restart",
        api.create(
            &PostParams::default(),
            &config_map("survives-restart", &[("colour", "blue")]),
        ),
    )
    .await;

    lab.stop_region(&region).expect("stop region");
    assert!(!lab.region_running(&region).expect("known region"));
    assert!(
        lab.client(&region, User::Admin).is_err(),
        "a stopped region hands out no client"
    );
    let unreachable = tokio::time::timeout(CALL, api.get("survives-restart")).await;
    assert!(
        matches!(unreachable, Ok(Err(_))),
        "the stopped region's apiserver must not answer: {unreachable:?}"
    );

    lab.start_region(&region).await.expect("start region again");
    assert!(lab.region_running(&region).expect("known region"));
    let api: Api<ConfigMap> =
        Api::default_namespaced(lab.client(&region, User::Admin).expect("client"));
    let kept = within(
        "get ConfigMap after the restart",
        api.get("survives-restart"),
    )
    .await;
    let data: BTreeMap<String, String> = kept.data.unwrap_or_default();
    assert_eq!(data.get("colour").map(String::as_str), Some("blue"));
}

const ERROR_RATIO: &str = "sum by (region) (rate(configrollout_lab_errors_total[10s])) \
     / sum by (region) (rate(configrollout_lab_requests_total[10s]))";

/// Polls the error-ratio query until `accept` holds for the per-region values, or fails
/// after the deadline with the last values seen.
async fn poll_error_ratio(lab: &Lab, what: &str, accept: impl Fn(&BTreeMap<String, f64>) -> bool) {
    let started = Instant::now();
    let mut last = BTreeMap::new();
    while started.elapsed() < PROMETHEUS_DEADLINE {
        if let Ok(Ok(samples)) = tokio::time::timeout(CALL, lab.query_prometheus(ERROR_RATIO)).await
        {
            last = samples
                .iter()
                .filter_map(|s| s.labels.get("region").map(|r| (r.clone(), s.value)))
                .collect();
            if accept(&last) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("{what}: not seen within {PROMETHEUS_DEADLINE:?}; last values {last:?}");
}

async fn prometheus_sees_each_region_error_rate_and_its_change(lab: &Lab) {
    let regions = lab.regions();
    let all: BTreeSet<String> = regions.iter().cloned().collect();
    for region in &regions {
        lab.set_error_rate(region, 0.0)
            .await
            .expect("set error rate");
    }
    poll_error_ratio(lab, "one zero series per region", |values| {
        values.keys().cloned().collect::<BTreeSet<_>>() == all && values.values().all(|v| *v == 0.0)
    })
    .await;

    let noisy = &regions[2];
    lab.set_error_rate(noisy, 0.5)
        .await
        .expect("set error rate");
    poll_error_ratio(
        lab,
        "the noisy region at 50% errors, the others at 0",
        |values| {
            values.keys().cloned().collect::<BTreeSet<_>>() == all
                && values.iter().all(|(region, v)| {
                    if region == noisy {
                        (*v - 0.5).abs() < 0.05
                    } else {
                        *v == 0.0
                    }
                })
        },
    )
    .await;

    lab.set_error_rate(noisy, 0.0)
        .await
        .expect("set error rate");
    poll_error_ratio(lab, "the noisy region back at 0", |values| {
        values.get(noisy).is_some_and(|v| *v == 0.0)
    })
    .await;

    assert!(
        lab.set_error_rate(noisy, 1.5).await.is_err(),
        "a ratio above 1 is refused"
    );
}

/// Gates must see Prometheus disappear (issue: gates fail closed); the lab stops and
/// restarts it on the same port with its data.
async fn prometheus_stops_and_starts_again_with_its_data(lab: &mut Lab) {
    let before_stop = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();
    lab.stop_prometheus();
    let refused = tokio::time::timeout(CALL, lab.query_prometheus("up")).await;
    assert!(
        matches!(refused, Ok(Err(_))),
        "a stopped Prometheus must not answer: {refused:?}"
    );
    lab.start_prometheus()
        .await
        .expect("Prometheus starts again");
    // Evaluated at a time before the stop, so only data stored before it can answer.
    let older = within(
        "query data from before the restart",
        lab.query_prometheus(&format!(
            "configrollout_lab_requests_total @ {before_stop:.3}"
        )),
    )
    .await;
    assert_eq!(
        older.len(),
        3,
        "one series per region survives the restart: {older:?}"
    );
    let all: BTreeSet<String> = lab.regions().into_iter().collect();
    poll_error_ratio(lab, "scraping again after the restart", |values| {
        values.keys().cloned().collect::<BTreeSet<_>>() == all
    })
    .await;
}

/// Polls an instant query until `accept` holds for its result, or fails after the
/// deadline with the last result seen.
async fn poll_query(lab: &Lab, what: &str, query: &str, mut accept: impl FnMut(&[Sample]) -> bool) {
    let started = Instant::now();
    let mut last = Vec::new();
    while started.elapsed() < PROMETHEUS_DEADLINE {
        if let Ok(Ok(samples)) = tokio::time::timeout(CALL, lab.query_prometheus(query)).await {
            if accept(&samples) {
                return;
            }
            last = samples;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("{what}: not seen within {PROMETHEUS_DEADLINE:?}; `{query}` last gave {last:?}");
}

/// The single value of an instant query's result, if it has exactly one series.
fn single(samples: &[Sample]) -> Option<f64> {
    match samples {
        [only] => Some(only.value),
        _ => None,
    }
}

const CONSUMED_NAMESPACE: &str = "consumed";
const CONSUMED_NAME: &str = "service-config";
/// Consumers per workload (`lab-workload --consumers`, the lab's default).
const CONSUMERS: f64 = 3.0;

fn revision_config_map(revision: &str, data: &[(&str, &str)]) -> ConfigMap {
    let mut map = config_map(CONSUMED_NAME, data);
    map.metadata.namespace = Some(CONSUMED_NAMESPACE.to_string());
    map.metadata.annotations = Some(
        [(
            "configrollout.dev/revision".to_string(),
            revision.to_string(),
        )]
        .into(),
    );
    map
}

/// Replaces the consumed ConfigMap's data and revision, keeping everything else.
async fn publish(api: &Api<ConfigMap>, revision: &str, data: &[(&str, &str)]) {
    let mut current = within("get the consumed ConfigMap", api.get(CONSUMED_NAME)).await;
    let wanted = revision_config_map(revision, data);
    current.data = wanted.data;
    current.metadata.annotations = wanted.metadata.annotations;
    within(
        &format!("publish {revision}"),
        api.replace(CONSUMED_NAME, &PostParams::default(), &current),
    )
    .await;
}

fn consumers_on(region: &str, revision: &str) -> String {
    format!(
        "count(configrollout_lab_consumer_revision{{region=\"{region}\",revision=\"{revision}\"}})"
    )
}

fn error_ratio(region: &str) -> String {
    format!(
        "rate(configrollout_lab_errors_total{{region=\"{region}\"}}[5s]) \
         / rate(configrollout_lab_requests_total{{region=\"{region}\"}}[5s])"
    )
}

/// The workload of a region consumes a ConfigMap through that region's apiserver: its
/// consumers report the revision they activated, an invalid `timeout_ms` really raises
/// the error ratio the gates read, every load is in the history, and the watch survives
/// a restart of the region.
async fn the_workload_consumes_its_regions_configmap(lab: &mut Lab) {
    let region = lab.regions()[0].clone();
    lab.create_namespace(&region, CONSUMED_NAMESPACE)
        .await
        .expect("create the consumed namespace");
    let api: Api<ConfigMap> = Api::namespaced(
        lab.client(&region, User::Admin).expect("admin client"),
        CONSUMED_NAMESPACE,
    );
    within(
        "create r1",
        api.create(
            &PostParams::default(),
            &revision_config_map("r1", &[("timeout_ms", "250"), ("greeting", "hello")]),
        ),
    )
    .await;

    lab.watch_config(&region, CONSUMED_NAMESPACE, CONSUMED_NAME)
        .await
        .expect("watch the ConfigMap");
    let source = lab
        .config_source(&region)
        .await
        .expect("config source")
        .expect("a source is set");
    assert_eq!(
        (source.namespace.as_str(), source.name.as_str()),
        (CONSUMED_NAMESPACE, CONSUMED_NAME)
    );
    poll_query(
        lab,
        "3 consumers on r1",
        &consumers_on(&region, "r1"),
        |s| single(s) == Some(CONSUMERS),
    )
    .await;
    poll_query(
        lab,
        "every consumer's r1 is valid",
        &format!("sum(configrollout_lab_consumer_config_valid{{region=\"{region}\"}})"),
        |s| single(s) == Some(CONSUMERS),
    )
    .await;
    // Low, and staying low: several consecutive samples once all consumers run r1.
    let mut low_in_a_row = 0;
    poll_query(lab, "a low error ratio on r1", &error_ratio(&region), |s| {
        match single(s) {
            Some(ratio) if ratio < 0.05 => low_in_a_row += 1,
            _ => low_in_a_row = 0,
        }
        low_in_a_row >= 5
    })
    .await;
    // Only the region that was told to watch reports consumers.
    poll_query(
        lab,
        "consumer series in the watching region only",
        "count by (region) (configrollout_lab_consumer_revision)",
        |s| s.len() == 1 && s[0].labels.get("region") == Some(&region),
    )
    .await;

    publish(&api, "r2", &[("timeout_ms", "0"), ("greeting", "hello")]).await;
    poll_query(
        lab,
        "3 consumers on r2",
        &consumers_on(&region, "r2"),
        |s| single(s) == Some(CONSUMERS),
    )
    .await;
    poll_query(
        lab,
        "no consumer reports r1 any more",
        &consumers_on(&region, "r1"),
        <[Sample]>::is_empty,
    )
    .await;
    poll_query(
        lab,
        "every consumer's r2 is invalid",
        &format!("sum(configrollout_lab_consumer_config_valid{{region=\"{region}\"}})"),
        |s| single(s) == Some(0.0),
    )
    .await;
    poll_query(
        lab,
        "the bad timeout_ms raises the error ratio",
        &error_ratio(&region),
        |s| single(s).is_some_and(|ratio| ratio > 0.2),
    )
    .await;

    let history = within("config history", lab.config_history(&region)).await;
    let keys = vec!["greeting".to_string(), "timeout_ms".to_string()];
    let summary: Vec<(&str, &[String], bool, bool)> = history
        .iter()
        .map(|l: &ConfigLoad| (l.revision.as_str(), l.keys.as_slice(), l.present, l.valid))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("r1", keys.as_slice(), true, true),
            ("r2", keys.as_slice(), true, false)
        ],
        "one load per change, oldest first, key names only"
    );
    assert!(history[0].time <= history[1].time, "{history:?}");

    // The watch outlives its apiserver: stopped, started again, it picks up a new
    // revision through the same region.
    lab.stop_region(&region).expect("stop the region");
    let started = Instant::now();
    while lab
        .config_source(&region)
        .await
        .expect("config source")
        .is_some_and(|s| s.connected)
    {
        assert!(
            started.elapsed() < PROMETHEUS_DEADLINE,
            "the workload still claims a watch on a stopped apiserver"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    lab.start_region(&region).await.expect("start the region");
    let api: Api<ConfigMap> = Api::namespaced(
        lab.client(&region, User::Admin).expect("admin client"),
        CONSUMED_NAMESPACE,
    );
    publish(&api, "r3", &[("timeout_ms", "250"), ("greeting", "hello")]).await;
    poll_query(
        lab,
        "3 consumers on r3 after the restart",
        &consumers_on(&region, "r3"),
        |s| single(s) == Some(CONSUMERS),
    )
    .await;
    poll_query(
        lab,
        "the error ratio falls back once the bad value is gone",
        &error_ratio(&region),
        |s| single(s).is_some_and(|ratio| ratio < 0.05),
    )
    .await;
    let revisions: Vec<String> = within("config history", lab.config_history(&region))
        .await
        .into_iter()
        .map(|l| l.revision)
        .collect();
    assert_eq!(revisions, ["r1", "r2", "r3"], "a reconnect is not a load");
}

#[test]
fn the_lab_runs_real_clusters_and_prometheus_and_leaves_nothing_behind() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (root, pids) = runtime.block_on(async {
        let mut lab = Lab::start(LabOptions {
            regions: 3,
            ..LabOptions::default()
        })
        .await
        .expect("the lab starts");
        let root = lab.root_dir().to_string_lossy().into_owned();

        every_cluster_answers_version_and_readyz(&lab).await;
        crds_are_established_in_the_hub(&lab).await;
        regions_are_registered_in_the_hub(&lab).await;
        a_configmap_stays_in_its_region(&lab).await;
        the_viewer_reads_but_may_not_write(&lab).await;
        a_restarted_region_keeps_its_configmaps(&mut lab).await;
        prometheus_sees_each_region_error_rate_and_its_change(&lab).await;
        prometheus_stops_and_starts_again_with_its_data(&mut lab).await;
        the_workload_consumes_its_regions_configmap(&mut lab).await;

        let pids = lab.pids();
        assert_eq!(
            pids.len(),
            4 + 3 + 1,
            "4 control planes, 3 workloads, Prometheus"
        );
        assert!(pids.iter().all(|pid| process_alive(*pid)));
        assert!(
            !processes_mentioning(&root).is_empty(),
            "the /proc scan finds the running lab"
        );
        drop(lab);
        (root, pids)
    });

    support::assert_lab_gone(&root, pids);
    assert!(
        !std::path::Path::new(&root).exists(),
        "the lab directory is removed"
    );
}
