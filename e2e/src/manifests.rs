//! Applies YAML manifests of any kind with server-side apply, and waits for CRDs to be
//! established.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};

use crate::LabError;

/// The field manager of everything the lab itself applies.
pub const FIELD_MANAGER: &str = "configrollout-lab";
const DISCOVERY_DEADLINE: Duration = Duration::from_secs(60);
const ESTABLISHED_DEADLINE: Duration = Duration::from_secs(60);

/// The `.yaml`/`.yml` files of a directory, sorted by name; a file is returned as is.
pub fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, LabError> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(LabError::io(format!("list {}", path.display()), e)),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// Parses every document of a multi-document YAML file (empty documents skipped).
pub fn read_documents(path: &Path) -> Result<Vec<DynamicObject>, LabError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LabError::io(format!("read {}", path.display()), e))?;
    let mut objects = Vec::new();
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| LabError::Manifest {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
    for value in documents {
        if value.is_null() {
            continue;
        }
        let object: DynamicObject =
            serde_json::from_value(value).map_err(|e| LabError::Manifest {
                path: path.to_path_buf(),
                detail: e.to_string(),
            })?;
        objects.push(object);
    }
    Ok(objects)
}

/// Applies every object of the manifests at `path` (a file or a directory of YAML
/// files), in order, and returns them as applied. CRDs among them are awaited until
/// established before later objects are applied.
pub async fn apply_path(
    client: &kube::Client,
    path: &Path,
) -> Result<Vec<DynamicObject>, LabError> {
    let mut applied = Vec::new();
    for file in manifest_files(path)? {
        for object in read_documents(&file)? {
            let result = apply_object(client, &object)
                .await
                .map_err(|e| LabError::Manifest {
                    path: file.clone(),
                    detail: e.to_string(),
                })?;
            if result
                .types
                .as_ref()
                .is_some_and(|t| t.kind == "CustomResourceDefinition")
                && let Some(name) = result.metadata.name.as_deref()
            {
                wait_established(client, name).await?;
            }
            applied.push(result);
        }
    }
    Ok(applied)
}

/// Server-side applies one object of any kind the cluster serves.
pub async fn apply_object(
    client: &kube::Client,
    object: &DynamicObject,
) -> Result<DynamicObject, LabError> {
    let types = object.types.as_ref().ok_or_else(|| LabError::BadResponse {
        context: "apply".into(),
        detail: "object without apiVersion/kind".into(),
    })?;
    let name = object
        .metadata
        .name
        .clone()
        .ok_or_else(|| LabError::BadResponse {
            context: "apply".into(),
            detail: format!("{} without metadata.name", types.kind),
        })?;
    let gvk = GroupVersionKind::try_from(types).map_err(|e| LabError::BadResponse {
        context: "apply".into(),
        detail: e.to_string(),
    })?;
    let (resource, capabilities) = resolve_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let namespace = object.metadata.namespace.as_deref().unwrap_or("default");
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    Ok(api.patch(&name, &params, &Patch::Apply(object)).await?)
}

/// Finds the resource for a kind, retrying while discovery does not list it yet (a CRD
/// just established takes a moment to appear in discovery).
async fn resolve_kind(
    client: &kube::Client,
    gvk: &GroupVersionKind,
) -> Result<(kube::api::ApiResource, discovery::ApiCapabilities), LabError> {
    let started = Instant::now();
    loop {
        match discovery::pinned_kind(client, gvk).await {
            Ok(found) => return Ok(found),
            Err(e) if started.elapsed() < DISCOVERY_DEADLINE => {
                tracing::debug!(kind = %gvk.kind, error = %e, "kind not discoverable yet");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => {
                return Err(LabError::NotReady {
                    what: format!("kind {}/{} {}", gvk.group, gvk.version, gvk.kind),
                    seconds: DISCOVERY_DEADLINE.as_secs(),
                    detail: e.to_string(),
                });
            }
        }
    }
}

/// Whether the CRD reports condition `Established=True`.
pub fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Waits until the named CRD is established.
pub async fn wait_established(client: &kube::Client, name: &str) -> Result<(), LabError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let started = Instant::now();
    loop {
        let last = match api.get(name).await {
            Ok(crd) if is_established(&crd) => return Ok(()),
            Ok(_) => "not established".to_string(),
            Err(e) => e.to_string(),
        };
        if started.elapsed() > ESTABLISHED_DEADLINE {
            return Err(LabError::NotReady {
                what: format!("CRD {name}"),
                seconds: ESTABLISHED_DEADLINE.as_secs(),
                detail: last,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_of_a_multi_document_file_is_read_and_empty_ones_skipped() {
        let dir = std::env::temp_dir().join(format!(
            "configrollout-lab-manifests-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("two.yaml");
        std::fs::write(
            &file,
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: a}\ndata: {k: v}\n",
        )
        .expect("write");
        std::fs::write(dir.join("ignored.txt"), "not yaml").expect("write");
        let files = manifest_files(&dir).expect("list");
        let objects = read_documents(&file).expect("parse");
        std::fs::remove_dir_all(&dir).expect("clean up");

        assert_eq!(files, vec![file]);
        let kinds: Vec<_> = objects
            .iter()
            .map(|o| o.types.as_ref().map(|t| t.kind.clone()))
            .collect();
        assert_eq!(
            kinds,
            vec![Some("Namespace".into()), Some("ConfigMap".into())]
        );
        assert_eq!(objects[1].data["data"]["k"], "v");
    }
}
