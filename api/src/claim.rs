//! `TargetClaim`: who owns each key of one target ConfigMap, across every rollout that
//! declares keys of it.
//!
//! Several teams may be granted one region namespace, and two rollouts may declare the same
//! key of the same ConfigMap. Which one owns the key is decided here, once, in the hub,
//! the same for every region: the first rollout that declared it and still does, then the
//! others in the order they asked. Only the owner writes the key; the others are refused
//! before any region is written. Written by the controller only (tenants may not write
//! it); `kubectl get targetclaims` answers "who owns `rate` of `shared-config/payments`?".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;

/// Most rollouts that may wait for one key at once (the owner included): a bound on the
/// object's size, far above any sane sharing of one key.
pub const MAX_CLAIMANTS_PER_KEY: usize = 16;

/// The claims on the keys of one target ConfigMap (the same in every region).
// Several print columns share `type_ = "string"`, which clippy mistakes for a repeated
// attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "configrollout.dev",
    version = "v1alpha1",
    kind = "TargetClaim",
    plural = "targetclaims",
    derive = "PartialEq",
    shortname = "tclaim",
    category = "configrollout-all",
    doc = "Which ConfigRollout owns each key of one target ConfigMap. Written by the controller.",
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".spec.target.namespace",
        description = "Namespace of the target in every region"
    ),
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.target.name",
        description = "Name of the target ConfigMap"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TargetClaimSpec {
    /// The target ConfigMap.
    pub target: ClaimedTarget,
    /// One entry per claimed key, in key order.
    #[serde(default)]
    pub keys: Vec<KeyClaim>,
}

/// The target a claim object is for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedTarget {
    /// Namespace of the ConfigMap in every region.
    #[schemars(transform = schema::max_length(schema::DNS1123_LABEL_MAX_LENGTH))]
    pub namespace: String,
    /// Name of the ConfigMap in every region.
    #[schemars(transform = schema::max_length(schema::DNS1123_SUBDOMAIN_MAX_LENGTH))]
    pub name: String,
}

/// Who claims one key: the owner first, then the rollouts waiting for it, in the order
/// they asked.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyClaim {
    /// The ConfigMap key.
    #[schemars(transform = schema::max_length(schema::CONFIG_MAP_KEY_MAX_LENGTH))]
    pub key: String,
    /// The owner, then the waiting rollouts.
    #[serde(default)]
    pub claimants: Vec<Claimant>,
}

/// A rollout that claims a key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Claimant {
    /// Namespace of the ConfigRollout.
    pub namespace: String,
    /// Name of the ConfigRollout.
    pub name: String,
    /// Its `metadata.uid`: a rollout deleted and created again under the same name asks
    /// again.
    pub uid: String,
    /// When it first claimed the key.
    pub since: Time,
}

/// The name of the claim object of the target `namespace/name`: `<namespace>.<name>`
/// (a namespace has no dot, so the first dot splits it), or a digest of both when that
/// is longer than a name may be.
pub fn claim_name(namespace: &str, name: &str) -> String {
    let plain = format!("{namespace}.{name}");
    if plain.len() <= 253 {
        return plain;
    }
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(plain.as_bytes());
    format!("target-{}", hex::encode(&digest[..16]))
}
