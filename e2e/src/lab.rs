//! The lab: a hub and N regional control planes, one workload per region, and a
//! Prometheus scraping the workloads; the hub holds the CRDs, one `Region` object and
//! one kubeconfig Secret per region.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use crate::controlplane::{ControlPlane, ReadyInfo};
use crate::gobuild::{self, GoPrograms, KubernetesRelease};
use crate::manifests::{self, FIELD_MANAGER};
use crate::prometheus::{self, DEFAULT_PROMETHEUS_BINARY, Prometheus, Sample};
use crate::victoria::{DEFAULT_VICTORIA_METRICS_BINARY, VictoriaMetrics};
use crate::workload::{ConfigLoad, ConfigSource, Workload};
use crate::workload_controllers::{self, WorkloadControllers};
use crate::{LabError, User};

/// Name of the hub cluster, where the CRDs, Regions and rollouts live.
pub const HUB: &str = "hub";
/// Namespace in the hub holding the regions' kubeconfig Secrets.
pub const SYSTEM_NAMESPACE: &str = "configrollout-system";
/// Label on each `Region` naming it (for stage selectors).
pub const REGION_LABEL: &str = "configrollout.dev/region";
/// Label on each `Region` giving its tier: the first region is `canary`, the others
/// `production`.
pub const TIER_LABEL: &str = "configrollout.dev/tier";
/// Key of the kubeconfig in each region's Secret.
pub const KUBECONFIG_SECRET_KEY: &str = "kubeconfig";
/// API group and version of the configrollout resources.
pub const API_VERSION: &str = "configrollout.dev/v1alpha1";

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How to start a lab.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// Number of regions besides the hub.
    pub regions: usize,
    /// Directory for all lab state; a fresh temporary directory when `None`.
    pub root_dir: Option<PathBuf>,
    /// Keep the directory (logs, etcd data) after the lab stops.
    pub keep_dir: bool,
    /// CRD manifests to install into the hub (every YAML file there).
    pub crds_dir: PathBuf,
    /// The Prometheus server binary.
    pub prometheus_binary: PathBuf,
    /// Extra kube-apiserver flags for every control plane (they come last and so win
    /// over the lab's own).
    pub apiserver_args: Vec<String>,
    /// Gives every region pods that turn Ready without a kubelet: upstream
    /// kube-controller-manager (workload controllers only) and kube-scheduler beside its
    /// apiserver, and KWOK managing one fake node (`kwok-<region>`). Off by default: it
    /// costs three processes per region and a longer start.
    pub workload_controllers: bool,
    /// Also runs Debian's VictoriaMetrics ([`Lab::victoria_metrics_url`]), scraping the
    /// workloads as Prometheus does: a second backend of the Prometheus query API. Off by
    /// default. `Region` objects still name the lab's Prometheus.
    pub victoria_metrics: bool,
    /// Regions started but left out of the hub, as clusters nobody registered yet: no
    /// `configrollout-system` namespace, no product RBAC (`deploy/region-rbac*.yaml`), no
    /// kubeconfig Secret and no `Region` object; only the lab users' rights
    /// (`manifests/region/10-rbac.yaml`: viewer, workload). A test registers them itself,
    /// e.g. with `kubectl configrollout region add`. Empty by default.
    pub unregistered_regions: Vec<String>,
    /// The Kubernetes release of every control plane (hub and regions) and of
    /// [`Lab::kubectl`]: [`KubernetesRelease::Current`] by default;
    /// [`KubernetesRelease::Oldest`] (1.32) builds `e2e/controlplane-1.32` on first use.
    /// Not with [`LabOptions::workload_controllers`], which are of the current release.
    pub kubernetes: KubernetesRelease,
}

impl Default for LabOptions {
    fn default() -> Self {
        Self {
            regions: 3,
            root_dir: None,
            keep_dir: false,
            crds_dir: repository_root().join("crds"),
            prometheus_binary: PathBuf::from(DEFAULT_PROMETHEUS_BINARY),
            apiserver_args: Vec::new(),
            workload_controllers: false,
            victoria_metrics: false,
            unregistered_regions: Vec::new(),
            kubernetes: KubernetesRelease::Current,
        }
    }
}

/// The repository this crate was built from.
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn lab_manifests(cluster_kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("manifests")
        .join(cluster_kind)
}

/// A file of the product's `deploy/`: the lab's controller user is bound to the roles the
/// product ships (`deploy/rbac.yaml` in the hub, `deploy/region-rbac.yaml` and
/// `deploy/region-rbac-job-gates.yaml` in each region), never to broader lab-only ones,
/// so the lab proves that they suffice.
fn deploy_manifest(file: &str) -> PathBuf {
    repository_root().join("deploy").join(file)
}

/// Name of the `i`-th region (0-based): `region-1`, `region-2`, ...
pub fn region_name(index: usize) -> String {
    format!("region-{}", index + 1)
}

fn tier(index: usize) -> &'static str {
    if index == 0 { "canary" } else { "production" }
}

#[derive(Debug)]
struct RegionSlot {
    name: String,
    tier: &'static str,
    plane: ControlPlane,
    workload: Workload,
    /// Present when the lab was started with [`LabOptions::workload_controllers`].
    controllers: Option<WorkloadControllers>,
    /// Whether the lab registered it in the hub (not one of
    /// [`LabOptions::unregistered_regions`]).
    registered: bool,
}

/// A running lab. Dropping it stops every process it started (gracefully, then by
/// SIGKILL) and removes its directory unless asked to keep it.
#[derive(Debug)]
pub struct Lab {
    root: PathBuf,
    keep_dir: bool,
    programs: GoPrograms,
    http: reqwest::Client,
    hub: ControlPlane,
    regions: Vec<RegionSlot>,
    prometheus: Option<Prometheus>,
    victoria_metrics: Option<VictoriaMetrics>,
    crds: Vec<String>,
    regions_registered: bool,
}

impl Lab {
    /// Builds the Go programs if needed, starts the hub and the regions in parallel,
    /// then Prometheus, installs the CRDs and RBAC, and registers every region in the
    /// hub. On error, everything already started is stopped again.
    pub async fn start(options: LabOptions) -> Result<Lab, LabError> {
        // kube and reqwest build rustls clients; both must use ring, the one provider
        // compiled in. An earlier install (by the caller) is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        if options.kubernetes != KubernetesRelease::Current && options.workload_controllers {
            // kube-controller-manager and kube-scheduler newer than their apiserver are
            // outside Kubernetes' version skew policy.
            return Err(LabError::InvalidArgument(format!(
                "workload_controllers are of the current Kubernetes release, not {:?}",
                options.kubernetes
            )));
        }
        let release = options.kubernetes;
        let programs = tokio::task::spawn_blocking(move || gobuild::ensure_built_for(release))
            .await
            .map_err(|e| LabError::io("build the lab's Go programs", std::io::Error::other(e)))??;
        let root = match &options.root_dir {
            Some(dir) => dir.clone(),
            None => fresh_temp_dir(),
        };
        std::fs::create_dir_all(&root)
            .map_err(|e| LabError::io(format!("create {}", root.display()), e))?;
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| LabError::http("build the HTTP client", e))?;

        // Everything starts at once; the waits below overlap with each other's start.
        let hub = ControlPlane::spawn(&programs, HUB, &root.join(HUB), &options.apiserver_args)?;
        let mut lab = Lab {
            root: root.clone(),
            keep_dir: options.keep_dir,
            programs,
            http,
            hub,
            regions: Vec::new(),
            prometheus: None,
            victoria_metrics: None,
            crds: Vec::new(),
            regions_registered: false,
        };
        for index in 0..options.regions {
            let name = region_name(index);
            let plane = ControlPlane::spawn(
                &lab.programs,
                &name,
                &root.join(&name),
                &options.apiserver_args,
            )?;
            let workload = Workload::spawn(
                &lab.programs,
                &name,
                &root.join("workloads"),
                &plane.kubeconfig(User::Workload),
            )?;
            let controllers = options
                .workload_controllers
                .then(|| WorkloadControllers::new(&name, &root.join(&name)));
            let registered = !options.unregistered_regions.contains(&name);
            lab.regions.push(RegionSlot {
                name,
                tier: tier(index),
                plane,
                workload,
                controllers,
                registered,
            });
        }
        if let Err(e) = lab.bring_up(&options).await {
            // The logs explain a failed start better than any message: keep them.
            lab.keep_dir = true;
            tracing::error!(dir = %lab.root.display(), error = %e, "the lab did not start; its logs are kept");
            return Err(e);
        }
        Ok(lab)
    }

    async fn bring_up(&mut self, options: &LabOptions) -> Result<(), LabError> {
        for slot in &mut self.regions {
            slot.workload.wait_ready().await?;
        }
        let targets = self
            .regions
            .iter()
            .map(|slot| slot.workload.scrape_target())
            .collect::<Result<Vec<_>, _>>()?;
        let mut prometheus = Prometheus::spawn(
            &self.programs,
            &options.prometheus_binary,
            &self.root.join("prometheus"),
            &targets,
        )?;
        if options.victoria_metrics {
            self.victoria_metrics = Some(VictoriaMetrics::spawn(
                &self.programs,
                Path::new(DEFAULT_VICTORIA_METRICS_BINARY),
                &self.root.join("victoria-metrics"),
                &targets,
            )?);
        }
        self.hub.wait_ready_retrying(&self.programs).await?;
        for slot in &mut self.regions {
            slot.plane.wait_ready_retrying(&self.programs).await?;
            // They need the region's kubeconfig, written once it is ready; they start
            // while the rest comes up and are awaited last.
            if let Some(controllers) = slot.controllers.as_mut() {
                controllers.start(&self.programs, &slot.plane.kubeconfig(User::Admin))?;
            }
        }
        prometheus
            .wait_ready_retrying(&self.programs, &self.http)
            .await?;
        self.prometheus = Some(prometheus);
        if let Some(victoria_metrics) = self.victoria_metrics.as_mut() {
            victoria_metrics
                .wait_ready_retrying(&self.programs, &self.http)
                .await?;
        }

        let hub = self.hub.client(User::Admin)?;
        manifests::apply_path(&hub, &lab_manifests("hub")).await?;
        manifests::apply_path(&hub, &deploy_manifest("rbac.yaml")).await?;
        let applied = manifests::apply_path(&hub, &options.crds_dir).await?;
        self.crds = applied
            .iter()
            .filter(|o| {
                o.types
                    .as_ref()
                    .is_some_and(|t| t.kind == "CustomResourceDefinition")
            })
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        self.regions_registered = applied.iter().any(defines_region_kind);
        if !self.regions_registered {
            tracing::warn!(
                crds = %options.crds_dir.display(),
                "no Region CRD among the installed CRDs: regions get kubeconfig Secrets but no Region objects"
            );
        }
        let names: Vec<(String, bool)> = self
            .regions
            .iter()
            .map(|s| (s.name.clone(), s.registered))
            .collect();
        for (name, registered) in &names {
            let client = self.client(name, User::Admin)?;
            if !registered {
                // Only the lab users' rights: the region is as a platform hands it over.
                manifests::apply_path(&client, &lab_manifests("region").join("10-rbac.yaml"))
                    .await?;
                continue;
            }
            manifests::apply_path(&client, &lab_manifests("region")).await?;
            manifests::apply_path(&client, &deploy_manifest("region-rbac.yaml")).await?;
            // Opt-in in the product, applied in every lab region: job gates run there.
            manifests::apply_path(&client, &deploy_manifest("region-rbac-job-gates.yaml")).await?;
            self.register_region(name).await?;
        }
        for slot in &mut self.regions {
            if let Some(controllers) = slot.controllers.as_mut() {
                controllers
                    .wait_ready(&slot.plane.client(User::Admin)?)
                    .await?;
            }
        }
        Ok(())
    }

    /// Writes (or rewrites) a region's kubeconfig Secret and `Region` object in the hub.
    async fn register_region(&self, name: &str) -> Result<(), LabError> {
        let slot = self.slot(name)?;
        let kubeconfig_path = slot.plane.kubeconfig(User::Controller);
        let kubeconfig = std::fs::read(&kubeconfig_path)
            .map_err(|e| LabError::io(format!("read {}", kubeconfig_path.display()), e))?;
        let hub = self.hub.client(User::Admin)?;
        let secret_name = kubeconfig_secret_name(name);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(secret_name.clone()),
                namespace: Some(SYSTEM_NAMESPACE.to_string()),
                labels: Some([(REGION_LABEL.to_string(), name.to_string())].into()),
                ..ObjectMeta::default()
            },
            data: Some([(KUBECONFIG_SECRET_KEY.to_string(), ByteString(kubeconfig))].into()),
            ..Secret::default()
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        Api::<Secret>::namespaced(hub.clone(), SYSTEM_NAMESPACE)
            .patch(&secret_name, &params, &Patch::Apply(&secret))
            .await?;
        if self.regions_registered {
            let region: DynamicObject = serde_json::from_value(json!({
                "apiVersion": API_VERSION,
                "kind": "Region",
                "metadata": {
                    "name": name,
                    "labels": { REGION_LABEL: name, TIER_LABEL: slot.tier },
                },
                "spec": {
                    "kubeconfigSecretRef": {
                        "namespace": SYSTEM_NAMESPACE,
                        "name": secret_name,
                        "key": KUBECONFIG_SECRET_KEY,
                    },
                    "prometheus": { "url": self.prometheus_url() },
                },
            }))
            .map_err(|e| LabError::BadResponse {
                context: "build Region object".into(),
                detail: e.to_string(),
            })?;
            manifests::apply_object(&hub, &region).await?;
        }
        Ok(())
    }

    fn slot(&self, name: &str) -> Result<&RegionSlot, LabError> {
        self.regions
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| LabError::UnknownCluster(name.to_string()))
    }

    fn slot_mut(&mut self, name: &str) -> Result<&mut RegionSlot, LabError> {
        self.regions
            .iter_mut()
            .find(|s| s.name == name)
            .ok_or_else(|| LabError::UnknownCluster(name.to_string()))
    }

    fn plane(&self, cluster: &str) -> Result<&ControlPlane, LabError> {
        if cluster == HUB {
            Ok(&self.hub)
        } else {
            Ok(&self.slot(cluster)?.plane)
        }
    }

    /// The lab's directory: one subdirectory per cluster (data, logs, kubeconfigs),
    /// `workloads/` and `prometheus/`.
    pub fn root_dir(&self) -> &Path {
        &self.root
    }

    /// Region names, in order (`region-1` first).
    pub fn regions(&self) -> Vec<String> {
        self.regions.iter().map(|s| s.name.clone()).collect()
    }

    /// The hub followed by every region.
    pub fn clusters(&self) -> Vec<String> {
        std::iter::once(HUB.to_string())
            .chain(self.regions())
            .collect()
    }

    /// The tier label value of a region (`canary` or `production`).
    pub fn tier(&self, region: &str) -> Result<&'static str, LabError> {
        Ok(self.slot(region)?.tier)
    }

    /// Names of the CRDs installed into the hub (all established).
    pub fn installed_crds(&self) -> &[String] {
        &self.crds
    }

    /// Whether `Region` objects were created (the Region CRD was among `crds/`).
    pub fn regions_registered(&self) -> bool {
        self.regions_registered
    }

    /// A client for `user` on `cluster` (`HUB` or a region name).
    pub fn client(&self, cluster: &str, user: User) -> Result<kube::Client, LabError> {
        self.plane(cluster)?.client(user)
    }

    /// The kubeconfig file of `user` on `cluster`.
    pub fn kubeconfig(&self, cluster: &str, user: User) -> Result<PathBuf, LabError> {
        Ok(self.plane(cluster)?.kubeconfig(user))
    }

    /// What the cluster's control plane announced when it became ready.
    pub fn cluster_info(&self, cluster: &str) -> Result<&ReadyInfo, LabError> {
        self.plane(cluster)?.ready()
    }

    /// The `controlplane.log` of a cluster.
    pub fn cluster_log(&self, cluster: &str) -> Result<PathBuf, LabError> {
        Ok(self.plane(cluster)?.log())
    }

    /// Name of the Secret in [`SYSTEM_NAMESPACE`] holding a region's kubeconfig.
    pub fn kubeconfig_secret(&self, region: &str) -> Result<String, LabError> {
        self.slot(region)?;
        Ok(kubeconfig_secret_name(region))
    }

    /// Stops a region's control plane (apiserver, then etcd), keeping its data. Its
    /// workload keeps running, its consumers on the configuration they have; its watch
    /// retries until the region is started again. Blocks until the process has exited.
    pub fn stop_region(&mut self, name: &str) -> Result<(), LabError> {
        let slot = self.slot_mut(name)?;
        // A region is one machine room: its controllers, scheduler and KWOK stop with
        // it, first, so they do not log a storm of refused connections.
        if let Some(controllers) = slot.controllers.as_mut() {
            controllers.stop();
        }
        slot.plane.stop();
        Ok(())
    }

    /// Starts a stopped region again on the same data directory (and the same port when
    /// it is still free; otherwise the Secret the lab wrote in the hub is rewritten: not
    /// for [`LabOptions::unregistered_regions`], whose registration is the test's).
    pub async fn start_region(&mut self, name: &str) -> Result<(), LabError> {
        let programs = self.programs.clone();
        let slot = self.slot_mut(name)?;
        let previous_url = slot.plane.ready().ok().map(|r| r.url.clone());
        let url = slot.plane.restart(&programs).await?.url.clone();
        if let Some(controllers) = slot.controllers.as_mut() {
            // Started afresh: the kubeconfig may name a new port.
            controllers.start(&programs, &slot.plane.kubeconfig(User::Admin))?;
            controllers
                .wait_ready(&slot.plane.client(User::Admin)?)
                .await?;
        }
        if previous_url.as_deref() != Some(url.as_str()) && self.slot(name)?.registered {
            self.register_region(name).await?;
        }
        Ok(())
    }

    /// The fake node whose pods KWOK makes Running and Ready (`kwok-<region>`), when the
    /// lab runs [`LabOptions::workload_controllers`].
    pub fn fake_node(&self, region: &str) -> Result<Option<String>, LabError> {
        Ok(self
            .slot(region)?
            .controllers
            .as_ref()
            .map(|_| workload_controllers::fake_node_name(region)))
    }

    /// Logs of a region's kube-controller-manager, kube-scheduler and KWOK (by program
    /// name), empty without [`LabOptions::workload_controllers`].
    pub fn workload_controller_logs(
        &self,
        region: &str,
    ) -> Result<Vec<(&'static str, PathBuf)>, LabError> {
        Ok(self
            .slot(region)?
            .controllers
            .as_ref()
            .map(WorkloadControllers::logs)
            .unwrap_or_default())
    }

    /// Whether a region's control plane is running.
    pub fn region_running(&self, name: &str) -> Result<bool, LabError> {
        Ok(self.slot(name)?.plane.is_running())
    }

    /// Sets the share (0..=1) of a region's workload requests that fail.
    pub async fn set_error_rate(&self, region: &str, ratio: f64) -> Result<(), LabError> {
        self.slot(region)?
            .workload
            .set_error_rate(&self.http, ratio)
            .await
    }

    /// Makes a region's workload follow the ConfigMap `namespace/name` in that region
    /// (through the region's apiserver, as [`User::Workload`]), replacing any earlier
    /// source. It returns at once; the workload lists and watches the object in the
    /// background, retrying while the region is stopped or the object is missing.
    ///
    /// Each change of the object is a load ([`Lab::config_history`]); its 3 consumers
    /// activate it one after another, consumer `i` after `i` x 200 ms, and then report
    /// `configrollout_lab_consumer_revision{region,consumer,revision} 1` (one series per
    /// consumer, for the `configrollout.dev/revision` annotation of what it runs), so
    /// `count(configrollout_lab_consumer_revision{region="{{region}}",revision="{{revision}}"})`
    /// is an activation query. A consumer running a `timeout_ms` that is not a decimal
    /// integer in 1..=600000 fails half its share of requests: the region's error ratio
    /// becomes `max(set_error_rate, 0.5 x consumers on the bad config / 3)`.
    pub async fn watch_config(
        &self,
        region: &str,
        namespace: &str,
        name: &str,
    ) -> Result<(), LabError> {
        self.slot(region)?
            .workload
            .watch_config(&self.http, namespace, name)
            .await
    }

    /// [`Lab::watch_config`] in every region.
    pub async fn watch_config_everywhere(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(), LabError> {
        for slot in &self.regions {
            slot.workload
                .watch_config(&self.http, namespace, name)
                .await?;
        }
        Ok(())
    }

    /// The ConfigMap a region's workload follows, and whether its watch is up now.
    pub async fn config_source(&self, region: &str) -> Result<Option<ConfigSource>, LabError> {
        self.slot(region)?.workload.config_source(&self.http).await
    }

    /// Every load of a region's workload, oldest first (its last 1000): when, which
    /// revision, which key names. Shows, for example, that a key was still present in
    /// every load before some time (expand and contract).
    pub async fn config_history(&self, region: &str) -> Result<Vec<ConfigLoad>, LabError> {
        self.slot(region)?.workload.config_history(&self.http).await
    }

    /// The base URL of a region's workload (`/metrics`, `/error-rate`, `/config-source`,
    /// `/config-history`).
    pub fn workload_url(&self, region: &str) -> Result<String, LabError> {
        Ok(self.slot(region)?.workload.url()?.to_string())
    }

    /// The Prometheus server's base URL.
    pub fn prometheus_url(&self) -> String {
        self.prometheus
            .as_ref()
            .map(Prometheus::url)
            .unwrap_or_default()
    }

    /// The VictoriaMetrics server's base URL, when the lab runs one
    /// ([`LabOptions::victoria_metrics`]).
    pub fn victoria_metrics_url(&self) -> Option<String> {
        self.victoria_metrics.as_ref().map(VictoriaMetrics::url)
    }

    /// Runs an instant PromQL query against the lab's Prometheus.
    pub async fn query_prometheus(&self, query: &str) -> Result<Vec<Sample>, LabError> {
        prometheus::instant_query(&self.http, &self.prometheus_url(), query).await
    }

    /// Has the lab's Prometheus also scrape controllers and evaluate rule files
    /// ([`Monitoring`](crate::prometheus::Monitoring)), replacing what an earlier call set;
    /// the workloads stay scraped. Returns once the server accepted the new configuration.
    pub async fn monitor(
        &mut self,
        monitoring: &crate::prometheus::Monitoring,
    ) -> Result<(), LabError> {
        match self.prometheus.as_mut() {
            Some(p) => p.monitor(&self.http, monitoring).await,
            None => Err(LabError::ClusterStopped("prometheus".into())),
        }
    }

    /// Stops Prometheus (to test gates without data), keeping its data and port.
    pub fn stop_prometheus(&mut self) {
        if let Some(p) = self.prometheus.as_mut() {
            p.stop();
        }
    }

    /// Starts Prometheus again after [`Lab::stop_prometheus`].
    pub async fn start_prometheus(&mut self) -> Result<(), LabError> {
        match self.prometheus.as_mut() {
            Some(p) => p.restart(&self.programs, &self.http).await,
            None => Err(LabError::ClusterStopped("prometheus".into())),
        }
    }

    /// Applies the manifests at `path` (a YAML file or a directory of them) to `cluster`
    /// as `user`, with server-side apply.
    pub async fn apply(
        &self,
        cluster: &str,
        user: User,
        path: &Path,
    ) -> Result<Vec<DynamicObject>, LabError> {
        manifests::apply_path(&self.client(cluster, user)?, path).await
    }

    /// Installs `policies/stageapproval-approver.yaml` in the hub, as a platform does:
    /// the apiserver then binds a StageApproval's `spec.approver` to its creator, and
    /// without it the controller counts no approval. Before the controller starts, so that
    /// its first look finds it.
    pub async fn install_approver_policy(&self) -> Result<(), LabError> {
        let path = repository_root().join("policies/stageapproval-approver.yaml");
        self.apply(HUB, User::Admin, &path).await.map(|_| ())
    }

    /// Starts `program` beside the lab (wrapped so that it dies with the lab), its output
    /// in `<lab>/<what>.log`.
    pub fn spawn(
        &self,
        what: &str,
        program: &Path,
        args: &[std::ffi::OsString],
        envs: &[(String, std::ffi::OsString)],
    ) -> Result<crate::LabChild, LabError> {
        let log = self.root.join(format!("{what}.log"));
        crate::LabChild::spawn(&self.programs, what, program, args, envs, &log)
    }

    /// Creates a namespace in `cluster`, as the admin.
    pub async fn create_namespace(&self, cluster: &str, name: &str) -> Result<(), LabError> {
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(self.client(cluster, User::Admin)?);
        let namespace = k8s_openapi::api::core::v1::Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        tokio::time::timeout(CALL_TIMEOUT, api.create(&Default::default(), &namespace))
            .await
            .map_err(|_| LabError::NotReady {
                what: format!("namespace {name} in {cluster}"),
                seconds: CALL_TIMEOUT.as_secs(),
                detail: "no answer".to_owned(),
            })??;
        Ok(())
    }

    /// Sets annotations on a namespace of `cluster`, as the admin: in the hub, this is how
    /// a platform admin grants a team's rollouts more than their own namespace
    /// (`configrollout::engine::tenancy`).
    pub async fn annotate_namespace(
        &self,
        cluster: &str,
        name: &str,
        annotations: &[(&str, &str)],
    ) -> Result<(), LabError> {
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(self.client(cluster, User::Admin)?);
        let annotations: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(key, value)| ((*key).to_owned(), json!(value)))
            .collect();
        let patch = json!({"metadata": {"annotations": annotations}});
        tokio::time::timeout(
            CALL_TIMEOUT,
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        .map_err(|_| LabError::NotReady {
            what: format!("annotations of namespace {name} in {cluster}"),
            seconds: CALL_TIMEOUT.as_secs(),
            detail: "no answer".to_owned(),
        })??;
        Ok(())
    }

    /// Starts a controller `binary` beside the lab, as the hub's controller user, with its
    /// own namespace and `args`; its log is `<lab>/<identity>.log`.
    pub fn start_controller(
        &self,
        binary: &Path,
        identity: &str,
        args: &[std::ffi::OsString],
    ) -> Result<crate::LabChild, LabError> {
        self.start_controller_with_env(binary, identity, args, &[])
    }

    /// [`Lab::start_controller`] with more environment variables (for example the one
    /// that arms the test build's fault injection).
    pub fn start_controller_with_env(
        &self,
        binary: &Path,
        identity: &str,
        args: &[std::ffi::OsString],
        extra_envs: &[(&str, &str)],
    ) -> Result<crate::LabChild, LabError> {
        let mut all: Vec<std::ffi::OsString> =
            ["--namespace", SYSTEM_NAMESPACE, "--identity", identity]
                .iter()
                .map(std::ffi::OsString::from)
                .collect();
        all.extend(args.iter().cloned());
        let mut envs = vec![(
            "KUBECONFIG".to_owned(),
            self.kubeconfig(HUB, User::Controller)?.into_os_string(),
        )];
        envs.extend(
            extra_envs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), std::ffi::OsString::from(value))),
        );
        self.spawn(identity, binary, &all, &envs)
    }

    /// The lab's kubectl (same release as its API servers).
    pub fn kubectl(&self) -> PathBuf {
        self.programs.path(crate::gobuild::KUBECTL)
    }

    /// Pid of a region's control plane (its apiserver and etcd, one process), while it
    /// runs: what a benchmark freezes (SIGSTOP) to make the region hang rather than refuse.
    pub fn region_pid(&self, name: &str) -> Result<Option<u32>, LabError> {
        Ok(self.slot(name)?.plane.pid())
    }

    /// Pids of every process the lab runs now.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.hub.pid().into_iter().collect();
        for slot in &self.regions {
            pids.extend(slot.plane.pid());
            pids.push(slot.workload.pid());
            if let Some(controllers) = &slot.controllers {
                pids.extend(controllers.pids());
            }
        }
        pids.extend(self.prometheus.as_ref().and_then(Prometheus::pid));
        pids.extend(
            self.victoria_metrics
                .as_ref()
                .and_then(VictoriaMetrics::pid),
        );
        pids
    }

    /// A person's guide to the running lab: kubeconfigs, export lines, Prometheus.
    pub fn describe(&self) -> String {
        let mut out = format!("configrollout lab in {}\n\n", self.root.display());
        for cluster in self.clusters() {
            let url = self
                .cluster_info(&cluster)
                .map(|r| r.url.clone())
                .unwrap_or_else(|_| "(stopped)".into());
            out.push_str(&format!("{cluster}: {url}\n"));
            for user in User::ALL {
                if let Ok(path) = self.kubeconfig(&cluster, user) {
                    out.push_str(&format!("  {:<26} {}\n", user.name(), path.display()));
                }
            }
        }
        out.push_str(
            "\nworkloads (POST /error-rate?value=0.2 to change the error ratio, \
             POST /config-source?namespace=NS&name=NAME to consume a ConfigMap):\n",
        );
        for slot in &self.regions {
            out.push_str(&format!(
                "  {:<10} {}\n",
                slot.name,
                slot.workload.url().unwrap_or("(not ready)")
            ));
        }
        if self.regions.iter().any(|slot| slot.controllers.is_some()) {
            out.push_str(
                "\npods turn Ready without a kubelet (kube-controller-manager, kube-scheduler, \
                 KWOK; logs in each region's directory) on the fake nodes:\n",
            );
            for slot in self
                .regions
                .iter()
                .filter(|slot| slot.controllers.is_some())
            {
                out.push_str(&format!(
                    "  {:<10} {}\n",
                    slot.name,
                    workload_controllers::fake_node_name(&slot.name)
                ));
            }
        }
        out.push_str(&format!("\nPrometheus: {}\n", self.prometheus_url()));
        if let Some(url) = self.victoria_metrics_url() {
            out.push_str(&format!("VictoriaMetrics: {url}\n"));
        }
        out.push('\n');
        if let Ok(path) = self.kubeconfig(HUB, User::Admin) {
            out.push_str(&format!("export KUBECONFIG={}\n", path.display()));
        }
        for slot in &self.regions {
            let var = slot.name.to_uppercase().replace('-', "_");
            out.push_str(&format!(
                "export KUBECONFIG_{var}={}\n",
                slot.plane.kubeconfig(User::Admin).display()
            ));
        }
        out.push_str(&format!(
            "export PROMETHEUS_URL={}\n",
            self.prometheus_url()
        ));
        out
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Ask everyone first so they stop in parallel, then reap each.
        self.hub.request_stop();
        for slot in &mut self.regions {
            if let Some(controllers) = slot.controllers.as_mut() {
                controllers.request_stop();
            }
            slot.plane.request_stop();
            slot.workload.request_stop();
        }
        if let Some(p) = self.prometheus.as_mut() {
            p.request_stop();
        }
        if let Some(v) = self.victoria_metrics.as_mut() {
            v.request_stop();
        }
        self.hub.stop();
        for slot in &mut self.regions {
            slot.plane.stop();
        }
        if let Some(p) = self.prometheus.as_mut() {
            p.stop();
        }
        if let Some(v) = self.victoria_metrics.as_mut() {
            v.stop();
        }
        // Workloads were asked above; dropping their slots reaps them.
        self.regions.clear();
        if std::thread::panicking() {
            // A failing test: its clusters' logs are the evidence.
            eprintln!(
                "lab stopped during a panic; logs kept in {}",
                self.root.display()
            );
            return;
        }
        if !self.keep_dir
            && let Err(e) = std::fs::remove_dir_all(&self.root)
        {
            tracing::warn!(dir = %self.root.display(), error = %e, "could not remove the lab directory");
        }
    }
}

fn kubeconfig_secret_name(region: &str) -> String {
    format!("{region}-kubeconfig")
}

fn defines_region_kind(object: &DynamicObject) -> bool {
    object
        .types
        .as_ref()
        .is_some_and(|t| t.kind == "CustomResourceDefinition")
        && object.data.pointer("/spec/group").and_then(|g| g.as_str()) == Some("configrollout.dev")
        && object
            .data
            .pointer("/spec/names/kind")
            .and_then(|k| k.as_str())
            == Some("Region")
}

fn fresh_temp_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    std::env::temp_dir().join(format!(
        "configrollout-lab-{}-{nanos:09}",
        std::process::id()
    ))
}
