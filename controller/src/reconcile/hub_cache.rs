//! The hub objects every reconcile reads (Regions, StageApprovals, the grant annotations
//! of Namespaces, which ControllerRevisions exist), served from the controller's own
//! watches instead of a request per reconcile. At 1,000 rollouts over 3 regions these reads were three of every five hub
//! requests (`make scale-bench`, BENCHMARKS.md).
//!
//! The caches are fed by the same watch streams that trigger reconciles, and a store is
//! updated before the event passes on to the trigger: a reconcile started by an approval
//! or a Region change finds that change in the cache.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use super::HubError;
use super::revision_cache::DecodedRevisions;
use super::revision_store::{RevisionIndex, RevisionStore};
use crate::api::{
    ClusterGateTemplate, ConfigRollout, GateTemplate, Region, StageApproval, TargetClaim,
};
use crate::engine::gate_templates::{TemplateKey, TemplateObject, Templates};
use crate::watch_index::WatchIndex;

/// How long a reconcile waits for the caches' first list before it fails (and is retried).
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The caches of one run of the controller.
#[derive(Clone)]
pub struct HubStores {
    /// Every Region.
    pub regions: Store<Region>,
    /// Every StageApproval.
    pub approvals: Store<StageApproval>,
    /// The metadata of every Namespace (its annotations carry the grant).
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The metadata of every rollout's ControllerRevision.
    pub revisions: Store<PartialObjectMeta<ControllerRevision>>,
    /// The objects in `revisions` of each rollout.
    pub revisions_by_rollout: Arc<WatchIndex>,
    /// Every TargetClaim (who owns the keys of each shared target).
    pub claims: Store<TargetClaim>,
    /// Every ConfigRollout (the controller's own cache): whether a claimant still exists.
    pub rollouts: Store<ConfigRollout>,
    /// Every GateTemplate.
    pub gate_templates: Store<GateTemplate>,
    /// Every ClusterGateTemplate.
    pub cluster_gate_templates: Store<ClusterGateTemplate>,
}

impl HubStores {
    /// Resolves once every store has had its first list.
    async fn ready(&self) -> bool {
        let (regions, approvals, namespaces, revisions, claims, rollouts) = futures::join!(
            self.regions.wait_until_ready(),
            self.approvals.wait_until_ready(),
            self.namespaces.wait_until_ready(),
            self.revisions.wait_until_ready(),
            self.claims.wait_until_ready(),
            self.rollouts.wait_until_ready(),
        );
        regions.is_ok()
            && approvals.is_ok()
            && namespaces.is_ok()
            && revisions.is_ok()
            && claims.is_ok()
            && rollouts.is_ok()
    }

    /// The templates `spec` names (a GateTemplate in `namespace`), as the watches have
    /// them: waits for their first list only here, so that a hub without the template
    /// CRDs (an upgrade that skipped them) stops only the rollouts that use templates.
    pub async fn gate_templates(
        &self,
        namespace: &str,
        spec: &crate::api::ConfigRolloutSpec,
    ) -> Result<Templates, HubError> {
        let named = crate::engine::gate_templates::named_templates(spec);
        let mut templates = Templates::new();
        if named.is_empty() {
            return Ok(templates);
        }
        let ready = async {
            let (namespaced, cluster) = futures::join!(
                self.gate_templates.wait_until_ready(),
                self.cluster_gate_templates.wait_until_ready(),
            );
            namespaced.is_ok() && cluster.is_ok()
        };
        if !matches!(tokio::time::timeout(READY_TIMEOUT, ready).await, Ok(true)) {
            return Err(HubError::CacheNotReady);
        }
        for (key, name) in named {
            let found = match key {
                TemplateKey::Namespaced => self
                    .gate_templates
                    .get(&ObjectRef::new(&name).within(namespace))
                    .map(|template| (template.metadata.generation, template.spec.clone())),
                TemplateKey::Cluster => self
                    .cluster_gate_templates
                    .get(&ObjectRef::new(&name))
                    .map(|template| (template.metadata.generation, template.spec.template.clone())),
            };
            if let Some((generation, spec)) = found {
                templates.insert(
                    (key, name),
                    TemplateObject {
                        generation: generation.unwrap_or_default(),
                        spec,
                    },
                );
            }
        }
        Ok(templates)
    }

    /// The StageApprovals of `namespace` naming the rollout `rollout`.
    pub fn approvals_of(&self, namespace: &str, rollout: &str) -> Vec<Arc<StageApproval>> {
        self.approvals.state_filter(|approval| {
            approval.metadata.namespace.as_deref() == Some(namespace)
                && approval.spec.rollout == rollout
        })
    }

    /// Every Region, by name.
    pub fn regions(&self) -> Vec<Region> {
        let mut regions: Vec<Region> = self
            .regions
            .state()
            .iter()
            .map(|region| region.as_ref().clone())
            .collect();
        regions.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        regions
    }

    /// The cached metadata of `namespace`, if the watch has seen it.
    pub fn namespace(&self, namespace: &str) -> Option<Arc<PartialObjectMeta<Namespace>>> {
        self.namespaces.get(&ObjectRef::new(namespace))
    }
}

/// Where reconciles find the caches of the controller run in progress (empty while the
/// controller does not run: a standby replica reconciles nothing), and the revisions
/// decoded so far, which outlive a run.
#[derive(Clone, Default)]
pub struct HubCache {
    current: Arc<RwLock<Option<HubStores>>>,
    decoded: Arc<DecodedRevisions>,
}

impl HubCache {
    /// Serves `stores` from now on (a new run of the controller).
    pub fn install(&self, stores: HubStores) {
        let mut current = match self.current.write() {
            Ok(current) => current,
            Err(poisoned) => poisoned.into_inner(),
        };
        *current = Some(stores);
    }

    /// The decoded revisions, to forget those deleted.
    pub fn decoded_revisions(&self) -> &DecodedRevisions {
        &self.decoded
    }

    /// The revision store of `namespace`, loading through the watch when one runs.
    pub fn revision_store(&self, hub: kube::Client, namespace: &str) -> RevisionStore {
        let index = self.current().map(|stores| RevisionIndex {
            objects: stores.revisions,
            by_rollout: stores.revisions_by_rollout,
            decoded: self.decoded.clone(),
        });
        RevisionStore::new(hub, namespace).with_index(index)
    }

    fn current(&self) -> Option<HubStores> {
        match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The stores, once their first list is in; an error when the controller does not run
    /// or the lists do not come within [`READY_TIMEOUT`].
    pub async fn stores(&self) -> Result<HubStores, HubError> {
        let stores = self.current().ok_or(HubError::CacheNotReady)?;
        match tokio::time::timeout(READY_TIMEOUT, stores.ready()).await {
            Ok(true) => Ok(stores),
            _ => Err(HubError::CacheNotReady),
        }
    }
}
