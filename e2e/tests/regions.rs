//! `kubectl configrollout region add` on the lab: region-3 starts as a cluster nobody
//! registered (no `configrollout-system`, no product RBAC, no Secret, no Region), and the
//! plugin, run as the hub's and the region's admin, registers it with rights in `app`
//! only. The Region turns reachable, the Secret holds a static token kubeconfig the
//! controller's policy takes, that token may write ConfigMaps in `app` and nowhere else,
//! and a rollout to region-3 completes with its data there. Also: a missing namespace is
//! refused before anything is written, without a controller the command says so and
//! succeeds, a second run rotates the token (a new one in the Secret, the Region
//! unchanged), and a cluster-wide registration left behind is reported by a namespaced
//! one.

use std::process::Output;
use std::time::Duration;

use configrollout::api::Region;
use configrollout::regions::clients::CredentialPolicy;
use configrollout_e2e::{HUB, LabOptions, User};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

mod support;

use support::*;

const PLUGIN: &str = env!("CARGO_BIN_EXE_lab-plugin");
const REGION: &str = "region-3";
const SECRET: &str = "region-region-3-kubeconfig";
const SYSTEM: &str = "configrollout-system";
const WRITER: &str = "configrollout-region-writer";
/// Bound on one run of the plugin (its own wait for the controller is 60 s).
const RUN: Duration = Duration::from_secs(120);

/// Runs `kubectl configrollout region add region-3 --region-kubeconfig <region-3 admin>
/// ARGS` as the hub's admin.
async fn region_add(world: &World, args: &[&str]) -> Output {
    let hub = world
        .lab
        .kubeconfig(HUB, User::Admin)
        .expect("hub kubeconfig");
    let region = world
        .lab
        .kubeconfig(REGION, User::Admin)
        .expect("region kubeconfig");
    let run = tokio::process::Command::new(PLUGIN)
        .env("KUBECONFIG", &hub)
        .args(["region", "add", REGION, "--region-kubeconfig"])
        .arg(&region)
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(RUN, run)
        .await
        .unwrap_or_else(|_| panic!("region add {args:?}: no exit within {RUN:?}"))
        .expect("the plugin runs");
    eprintln!(
        "---- region add {args:?}: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The kubeconfig the Secret holds, as text.
async fn secret_kubeconfig(world: &World) -> (String, String) {
    let secrets: Api<Secret> = Api::namespaced(world.hub.clone(), SYSTEM);
    let secret = within("read the kubeconfig Secret", secrets.get(SECRET)).await;
    let version = secret.metadata.resource_version.clone().expect("version");
    let bytes = secret
        .data
        .and_then(|data| data.get("kubeconfig").cloned())
        .expect("key kubeconfig");
    (String::from_utf8(bytes.0).expect("UTF-8"), version)
}

fn token_of(kubeconfig: &Kubeconfig) -> String {
    let value = serde_json::to_value(kubeconfig).expect("kubeconfig as JSON");
    value["users"][0]["user"]["token"]
        .as_str()
        .expect("a token")
        .to_owned()
}

/// A client of region-3 as the controller: the Secret's kubeconfig, as the controller
/// builds it.
async fn as_controller(kubeconfig: Kubeconfig) -> Client {
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client config");
    Client::try_from(config).expect("a client")
}

/// Whether `client` may `verb` ConfigMaps in `namespace` (every namespace when `None`).
async fn may(client: &Client, verb: &str, namespace: Option<&str>) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                resource: Some("configmaps".to_owned()),
                namespace: namespace.map(str::to_owned),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    within(
        "SelfSubjectAccessReview",
        api.create(&PostParams::default(), &review),
    )
    .await
    .status
    .is_some_and(|status| status.allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn region_add_registers_a_bare_region_with_namespaced_rights() {
    let world = World::start(LabOptions {
        regions: 3,
        unregistered_regions: vec![REGION.to_owned()],
        ..LabOptions::default()
    })
    .await;
    let regions: Api<Region> = Api::all(world.hub.clone());
    let region_namespaces: Api<Namespace> = Api::all(world.region(REGION));
    assert!(
        within("read Region region-3", regions.get_opt(REGION))
            .await
            .is_none(),
        "the lab left region-3 unregistered"
    );
    assert!(
        within(
            "read configrollout-system in region-3",
            region_namespaces.get_opt(SYSTEM)
        )
        .await
        .is_none(),
        "region-3 has nothing of configrollout"
    );

    // A namespace that does not exist is refused before anything is written.
    let refused = region_add(&world, &["--namespaces", "app,nowhere"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let said = text(&refused);
    assert!(
        said.contains("step 1/7 (checks)")
            && said.contains("namespace nowhere does not exist in region region-3"),
        "{said}"
    );
    assert!(
        within("read Region region-3", regions.get_opt(REGION))
            .await
            .is_none()
    );
    assert!(
        within(
            "read configrollout-system in region-3",
            region_namespaces.get_opt(SYSTEM)
        )
        .await
        .is_none(),
        "nothing was written in the region"
    );

    // Registered with rights in app only, while no controller runs: it says so and
    // succeeds.
    let registration = [
        "--namespaces",
        APP,
        "--labels",
        "configrollout.dev/region=region-3,configrollout.dev/tier=edge",
        "--token-duration",
        "48h",
    ];
    let early: Vec<&str> = registration
        .iter()
        .copied()
        .chain(["--wait-timeout", "3s"])
        .collect();
    let added = region_add(&world, &early).await;
    let said = text(&added);
    assert!(added.status.success(), "{said}");
    for step in 1..=7 {
        assert!(
            said.contains(&format!("step {step}/7 (")),
            "step {step}: {said}"
        );
    }
    assert!(said.contains("Region region-3 created"), "{said}");
    assert!(
        said.contains("no controller reported on Region region-3 within 3s"),
        "{said}"
    );
    let (first_text, first_version) = secret_kubeconfig(&world).await;
    let first_token = token_of(&Kubeconfig::from_yaml(&first_text).expect("a kubeconfig"));
    assert!(!said.contains(&first_token), "the token is never printed");

    // With the controller, the same command again: the token is rotated (a new one in
    // the Secret, the Region unchanged) and the controller reports the region reachable.
    let _controller = world.start_controller("controller-regions");
    let rotated = region_add(&world, &registration).await;
    let said = text(&rotated);
    assert!(rotated.status.success(), "{said}");
    assert!(said.contains("Region region-3 unchanged"), "{said}");
    assert!(
        said.contains("the controller reports Region region-3 reachable"),
        "{said}"
    );
    let region = within("read Region region-3", regions.get(REGION)).await;
    let labels = region.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("configrollout.dev/tier").map(String::as_str),
        Some("edge")
    );
    let reference = region.spec.kubeconfig_secret_ref.clone().expect("a Secret");
    assert_eq!(
        (
            reference.namespace.as_str(),
            reference.name.as_str(),
            reference.key.as_str()
        ),
        (SYSTEM, SECRET, "kubeconfig")
    );
    let status = region.status.clone().expect("status");
    assert_eq!(status.reachable, Some(true), "{status:?}");
    assert_eq!(status.observed_generation, region.metadata.generation);

    // The Secret: a static token, the server and its CA; nothing the controller refuses.
    let (kubeconfig_text, second_version) = secret_kubeconfig(&world).await;
    assert_ne!(first_version, second_version, "the Secret was rewritten");
    assert!(
        !kubeconfig_text.contains("exec") && !kubeconfig_text.contains("auth-provider"),
        "{kubeconfig_text}"
    );
    let kubeconfig = Kubeconfig::from_yaml(&kubeconfig_text).expect("a kubeconfig");
    CredentialPolicy {
        controller_namespace: SYSTEM.to_owned(),
        allow_unsafe_kubeconfig: false,
    }
    .check(&kubeconfig)
    .expect("the controller's default policy takes it");
    let user = kubeconfig.auth_infos[0].auth_info.as_ref().expect("a user");
    assert!(user.exec.is_none() && user.auth_provider.is_none() && user.token_file.is_none());
    let cluster = kubeconfig.clusters[0].cluster.as_ref().expect("a cluster");
    assert!(cluster.certificate_authority_data.is_some(), "CA embedded");
    let second_token = token_of(&kubeconfig);
    assert_ne!(first_token, second_token, "a new token");
    assert!(!said.contains(&second_token), "the token is never printed");

    // Namespaced: the controller's identity writes ConfigMaps in app, nowhere else.
    let controller = as_controller(kubeconfig).await;
    assert!(may(&controller, "create", Some(APP)).await);
    assert!(may(&controller, "update", Some(APP)).await);
    assert!(!may(&controller, "create", Some("kube-system")).await);
    assert!(
        !may(&controller, "list", None).await,
        "no cluster-wide list"
    );
    let elsewhere: Api<ConfigMap> = Api::namespaced(controller.clone(), "kube-system");
    let attempt = ConfigMap {
        metadata: ObjectMeta {
            name: Some("not-allowed".to_owned()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    match elsewhere.create(&PostParams::default(), &attempt).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("creating a ConfigMap in kube-system as the controller: {other:?}"),
    }
    let bindings: Api<ClusterRoleBinding> = Api::all(world.region(REGION));
    assert!(
        within("read the ClusterRoleBinding", bindings.get_opt(WRITER))
            .await
            .is_none(),
        "no cluster-wide binding"
    );

    // A rollout to region-3 completes, its data there.
    let name = "registered";
    world
        .create_rollout(&rollout_yaml(
            name,
            "  data: {timeout_ms: \"250\"}\n  stages:\n    - name: edge\n      regions: {names: [region-3]}\n",
        ))
        .await;
    world.wait_phase(name, "Complete", PROGRESS).await;
    assert_eq!(
        world.target_data(REGION, name).await,
        Some(data(&[("timeout_ms", "250")]))
    );

    // Cluster-wide, then namespaced again: the ClusterRoleBinding left behind is reported.
    let wide = region_add(&world, &["--cluster-wide", "--no-wait"]).await;
    let said = text(&wide);
    assert!(wide.status.success(), "{said}");
    assert!(
        said.contains("ClusterRoleBinding configrollout-region-writer"),
        "{said}"
    );
    assert!(
        said.contains("Region region-3 updated"),
        "its labels went: {said}"
    );
    let (wide_text, _) = secret_kubeconfig(&world).await;
    let wide_client = as_controller(Kubeconfig::from_yaml(&wide_text).expect("a kubeconfig")).await;
    eventually("cluster-wide rights", CALL, || async {
        may(&wide_client, "create", Some("kube-system"))
            .await
            .then_some(())
    })
    .await;
    let narrowed = region_add(&world, &["--namespaces", APP, "--no-wait"]).await;
    let said = text(&narrowed);
    assert!(narrowed.status.success(), "{said}");
    assert!(
        said.contains("warning: ClusterRoleBinding configrollout-region-writer"),
        "{said}"
    );
}
