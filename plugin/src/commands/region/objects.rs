//! The pure part of `region add`: the region's RBAC objects (those of
//! `deploy/region-rbac.yaml` and `deploy/region-rbac-namespaced.yaml`), the controller's
//! kubeconfig built from the admin's cluster entry and a token, and the hub's Secret and
//! Region.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::config::Kubeconfig;
use serde_json::json;

use configrollout_api::Region;

/// The field manager of every object the command applies.
pub(crate) const FIELD_MANAGER: &str = "kubectl-configrollout";
/// The region namespace of the controller's ServiceAccount (created by the command, as
/// `deploy/region-rbac.yaml` creates it).
pub(crate) const SERVICE_ACCOUNT_NAMESPACE: &str = "configrollout-system";
/// The controller's ServiceAccount in a region, and the name of its roles and bindings.
pub(crate) const SERVICE_ACCOUNT: &str = "configrollout-region-writer";
/// Key of the kubeconfig in the hub's Secret: the one `spec.kubeconfigSecretRef.key` names.
pub(crate) const KUBECONFIG_KEY: &str = "kubeconfig";
/// Label on the Secret naming its region, as the lab's Secrets have.
pub(crate) const REGION_LABEL: &str = "configrollout.dev/region";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The hub Secret holding region `region`'s kubeconfig.
pub(crate) fn secret_name(region: &str) -> String {
    format!("region-{region}-kubeconfig")
}

/// Where in the region the controller may act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Only these namespaces (`deploy/region-rbac-namespaced.yaml` in each).
    Namespaces(Vec<String>),
    /// Every namespace (`deploy/region-rbac.yaml`).
    ClusterWide,
}

/// The region's objects for the controller, in the order they are applied.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RegionRbac {
    /// `configrollout-system`, home of the ServiceAccount.
    pub(crate) namespace: Namespace,
    /// The controller's identity.
    pub(crate) service_account: ServiceAccount,
    /// With [`Scope::ClusterWide`].
    pub(crate) cluster: Option<(ClusterRole, ClusterRoleBinding)>,
    /// With [`Scope::Namespaces`], one pair per namespace.
    pub(crate) namespaced: Vec<(Role, RoleBinding)>,
}

/// The rules of `deploy/region-rbac.yaml`'s ClusterRole and of
/// `deploy/region-rbac-namespaced.yaml`'s Role (a test holds them equal to the files).
fn rules() -> Vec<PolicyRule> {
    let strings = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    vec![
        PolicyRule {
            api_groups: Some(strings(&[""])),
            resources: Some(strings(&["configmaps"])),
            verbs: strings(&["get", "list", "watch", "create", "update"]),
            ..PolicyRule::default()
        },
        PolicyRule {
            api_groups: Some(strings(&["apps"])),
            resources: Some(strings(&["deployments", "statefulsets", "daemonsets"])),
            verbs: strings(&["get", "list", "patch"]),
            ..PolicyRule::default()
        },
    ]
}

fn named(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

fn subjects() -> Option<Vec<Subject>> {
    Some(vec![Subject {
        kind: "ServiceAccount".to_owned(),
        name: SERVICE_ACCOUNT.to_owned(),
        namespace: Some(SERVICE_ACCOUNT_NAMESPACE.to_owned()),
        api_group: None,
    }])
}

/// The controller's objects in a region for `scope`.
pub(crate) fn region_rbac(scope: &Scope) -> RegionRbac {
    let role_ref = |kind: &str| RoleRef {
        api_group: Some(RBAC_GROUP.to_owned()),
        kind: kind.to_owned(),
        name: SERVICE_ACCOUNT.to_owned(),
    };
    let (cluster, namespaced) = match scope {
        Scope::ClusterWide => (
            Some((
                ClusterRole {
                    metadata: named(SERVICE_ACCOUNT, None),
                    rules: Some(rules()),
                    ..ClusterRole::default()
                },
                ClusterRoleBinding {
                    metadata: named(SERVICE_ACCOUNT, None),
                    role_ref: role_ref("ClusterRole"),
                    subjects: subjects(),
                },
            )),
            Vec::new(),
        ),
        Scope::Namespaces(namespaces) => (
            None,
            namespaces
                .iter()
                .map(|namespace| {
                    (
                        Role {
                            metadata: named(SERVICE_ACCOUNT, Some(namespace)),
                            rules: Some(rules()),
                        },
                        RoleBinding {
                            metadata: named(SERVICE_ACCOUNT, Some(namespace)),
                            role_ref: role_ref("Role"),
                            subjects: subjects(),
                        },
                    )
                })
                .collect(),
        ),
    };
    RegionRbac {
        namespace: Namespace {
            metadata: named(SERVICE_ACCOUNT_NAMESPACE, None),
            ..Namespace::default()
        },
        service_account: ServiceAccount {
            metadata: named(SERVICE_ACCOUNT, Some(SERVICE_ACCOUNT_NAMESPACE)),
            ..ServiceAccount::default()
        },
        cluster,
        namespaced,
    }
}

/// The cluster entry of the region kubeconfig the controller's kubeconfig is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterAccess {
    /// The kubeconfig's cluster entry, for messages.
    pub(crate) cluster: String,
    /// The API server URL.
    pub(crate) server: String,
    /// PEM roots the server is checked against; `None`: the system's.
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// The name the server's certificate is checked for, when not the URL's host.
    pub(crate) tls_server_name: Option<String>,
}

/// The cluster of `context` (default: the current context) in the region kubeconfig, with
/// `server` instead of its URL when given. Its CA is embedded (read from the file a
/// `certificate-authority` names); a cluster that skips TLS verification is refused, as
/// the controller would refuse the kubeconfig.
pub(crate) fn cluster_access(
    kubeconfig: &Kubeconfig,
    context: Option<&str>,
    server: Option<&str>,
) -> Result<ClusterAccess, String> {
    let context_name = context
        .map(str::to_owned)
        .or_else(|| kubeconfig.current_context.clone())
        .filter(|name| !name.is_empty())
        .ok_or("it has no current context: give --region-context")?;
    let cluster_name = kubeconfig
        .contexts
        .iter()
        .find(|named| named.name == context_name)
        .and_then(|named| named.context.as_ref())
        .map(|context| context.cluster.clone())
        .ok_or_else(|| format!("it has no context {context_name:?}"))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|named| named.name == cluster_name)
        .and_then(|named| named.cluster.as_ref())
        .ok_or_else(|| {
            format!("context {context_name:?} names the cluster {cluster_name:?}, which it lacks")
        })?;
    let server = server
        .map(str::to_owned)
        .or_else(|| cluster.server.clone())
        .filter(|server| !server.is_empty())
        .ok_or_else(|| format!("cluster {cluster_name:?} has no server: give --server"))?;
    if !server.starts_with("https://") {
        return Err(format!(
            "the server {server} is not https: the controller's token would travel in clear"
        ));
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        return Err(format!(
            "cluster {cluster_name:?} skips TLS verification (insecure-skip-tls-verify), which \
             the controller refuses: give a kubeconfig with the cluster's CA"
        ));
    }
    let ca_pem = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => Some(decode_base64(data).map_err(|e| {
            format!("cluster {cluster_name:?}: certificate-authority-data is not base64: {e}")
        })?),
        (None, Some(path)) => Some(std::fs::read(path).map_err(|e| {
            format!("cluster {cluster_name:?}: reading its certificate-authority {path}: {e}")
        })?),
        (None, None) => None,
    };
    if let Some(pem) = &ca_pem
        && !String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----")
    {
        return Err(format!(
            "cluster {cluster_name:?}: its certificate authority holds no PEM certificate"
        ));
    }
    Ok(ClusterAccess {
        cluster: cluster_name,
        server,
        ca_pem,
        tls_server_name: cluster.tls_server_name.clone(),
    })
}

fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    serde_json::from_value::<ByteString>(serde_json::Value::String(compact))
        .map(|bytes| bytes.0)
        .map_err(|e| e.to_string())
}

fn encode_base64(bytes: &[u8]) -> String {
    match serde_json::to_value(ByteString(bytes.to_vec())) {
        Ok(serde_json::Value::String(text)) => text,
        // ByteString always serializes as a string.
        _ => String::new(),
    }
}

/// The controller's kubeconfig for `region`: the server, its CA and a static `token`;
/// nothing that runs a command or reads a file, so the controller's default credential
/// policy takes it.
pub(crate) fn controller_kubeconfig(
    region: &str,
    access: &ClusterAccess,
    token: &str,
) -> Result<String, String> {
    let mut cluster = serde_json::Map::new();
    cluster.insert("server".to_owned(), json!(access.server));
    if let Some(pem) = &access.ca_pem {
        cluster.insert(
            "certificate-authority-data".to_owned(),
            json!(encode_base64(pem)),
        );
    }
    if let Some(name) = &access.tls_server_name {
        cluster.insert("tls-server-name".to_owned(), json!(name));
    }
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": region, "cluster": cluster}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{
            "name": region,
            "context": {"cluster": region, "user": SERVICE_ACCOUNT},
        }],
        "current-context": region,
    });
    serde_saphyr::to_string(&config).map_err(|e| format!("writing the kubeconfig as YAML: {e}"))
}

/// The hub Secret `namespace/region-REGION-kubeconfig` holding `kubeconfig`.
pub(crate) fn kubeconfig_secret(region: &str, namespace: &str, kubeconfig: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(region)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                REGION_LABEL.to_owned(),
                region.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(
            KUBECONFIG_KEY.to_owned(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

/// The Region `name` naming its Secret in `namespace`, with `labels` and, when given, its
/// Prometheus. Built from JSON, so that optional fields the API gains stay unset.
pub(crate) fn region_object(
    name: &str,
    namespace: &str,
    labels: &[(String, String)],
    prometheus_url: Option<&str>,
) -> Result<Region, String> {
    let mut metadata = json!({"name": name});
    if !labels.is_empty() {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(key, value)| (key.clone(), json!(value)))
            .collect();
        metadata["labels"] = serde_json::Value::Object(labels);
    }
    let mut spec = json!({
        "kubeconfigSecretRef": {
            "namespace": namespace,
            "name": secret_name(name),
            "key": KUBECONFIG_KEY,
        },
    });
    if let Some(url) = prometheus_url {
        spec["prometheus"] = json!({"url": url});
    }
    serde_json::from_value(json!({
        "apiVersion": "configrollout.dev/v1alpha1",
        "kind": "Region",
        "metadata": metadata,
        "spec": spec,
    }))
    .map_err(|e| format!("building Region {name}: {e}"))
}
