//! One Kubernetes control plane of the lab: the `lab-controlplane` Go program
//! (upstream kube-apiserver on embedded etcd), its data directory, and clients for the
//! lab's users.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::Deserialize;

use crate::LabError;
use crate::gobuild::{CONTROLPLANE, GoPrograms};
use crate::process::{LabProcess, STOP_GRACE, log_tail};

/// How often a control plane is started again after losing a port race.
const PORT_RACE_RETRIES: usize = 3;
/// How long a control plane may take from start to a ready `/readyz`. Generous: four of
/// them start at once on a two-core machine.
const READY_DEADLINE: Duration = Duration::from_secs(240);

/// The fixed identities of the lab, each authenticated by a static token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum User {
    /// Cluster administrator (group `system:masters`).
    Admin,
    /// The controller's identity (group `configrollout:controllers`).
    Controller,
    /// An approver (group `configrollout:approvers`).
    ApproverAlice,
    /// A second approver (group `configrollout:approvers`).
    ApproverBob,
    /// Read-only (group `configrollout:viewers`).
    Viewer,
    /// The regions' workloads, consumers of ConfigMaps (group
    /// `configrollout:workloads`): get, list and watch ConfigMaps, nothing else.
    Workload,
    /// A team's developer (group `configrollout:tenants`): no rights of its own; tests
    /// grant it ConfigRollouts in its team's namespace, as a platform admin would.
    TenantA,
}

impl User {
    /// Every lab user.
    pub const ALL: [User; 7] = [
        User::Admin,
        User::Controller,
        User::ApproverAlice,
        User::ApproverBob,
        User::Viewer,
        User::Workload,
        User::TenantA,
    ];

    /// The user name the apiserver authenticates.
    pub fn name(self) -> &'static str {
        match self {
            User::Admin => "admin",
            User::Controller => "configrollout-controller",
            User::ApproverAlice => "approver-alice",
            User::ApproverBob => "approver-bob",
            User::Viewer => "viewer",
            User::Workload => "lab-workload",
            User::TenantA => "tenant-a",
        }
    }
}

impl fmt::Display for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `lab-controlplane` writes to `ready.json` once `/readyz` answers.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadyInfo {
    /// Cluster name.
    pub name: String,
    /// The apiserver's https URL.
    pub url: String,
    /// Pid of the control plane process.
    pub pid: u32,
    /// The CA that signed the serving certificate.
    pub ca_file: PathBuf,
    /// The embedded etcd's client URL.
    pub etcd_url: String,
    /// Kubeconfig path per user name.
    pub kubeconfigs: BTreeMap<String, PathBuf>,
}

/// A control plane: running, or stopped with its data kept.
#[derive(Debug)]
pub(crate) struct ControlPlane {
    name: String,
    dir: PathBuf,
    apiserver_args: Vec<String>,
    process: Option<LabProcess>,
    ready: Option<ReadyInfo>,
}

impl ControlPlane {
    /// Starts the process; [`ControlPlane::wait_ready`] waits for it.
    pub(crate) fn spawn(
        programs: &GoPrograms,
        name: &str,
        dir: &Path,
        apiserver_args: &[String],
    ) -> Result<Self, LabError> {
        let mut plane = Self {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            apiserver_args: apiserver_args.to_vec(),
            process: None,
            ready: None,
        };
        plane.start_process(programs)?;
        Ok(plane)
    }

    fn start_process(&mut self, programs: &GoPrograms) -> Result<(), LabError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| LabError::io(format!("create {}", self.dir.display()), e))?;
        // The Go side removes it too, but a stale one must not be read before it does.
        let ready_file = self.ready_file();
        match std::fs::remove_file(&ready_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LabError::io(format!("remove {}", ready_file.display()), e)),
        }
        let mut command = Command::new(programs.path(CONTROLPLANE));
        command
            .arg("--data-dir")
            .arg(&self.dir)
            .arg("--name")
            .arg(&self.name);
        if !self.apiserver_args.is_empty() {
            command.arg("--").args(&self.apiserver_args);
        }
        let process =
            LabProcess::spawn(format!("control plane {}", self.name), command, &self.log())?;
        self.process = Some(process);
        self.ready = None;
        Ok(())
    }

    fn ready_file(&self) -> PathBuf {
        self.dir.join("ready.json")
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.dir.join("controlplane.log")
    }

    /// Waits until the control plane announced itself ready.
    pub(crate) async fn wait_ready(&mut self) -> Result<&ReadyInfo, LabError> {
        let started = Instant::now();
        let ready_file = self.ready_file();
        loop {
            let process = self
                .process
                .as_mut()
                .ok_or_else(|| LabError::ClusterStopped(self.name.clone()))?;
            process.check_running()?;
            if let Ok(raw) = std::fs::read(&ready_file) {
                let info: ReadyInfo =
                    serde_json::from_slice(&raw).map_err(|e| LabError::BadResponse {
                        context: format!("read {}", ready_file.display()),
                        detail: e.to_string(),
                    })?;
                if info.pid == process.pid() {
                    return Ok(self.ready.insert(info));
                }
            }
            if started.elapsed() > READY_DEADLINE {
                return Err(LabError::NotReady {
                    what: format!("control plane {}", self.name),
                    seconds: READY_DEADLINE.as_secs(),
                    detail: log_tail(&self.log(), 20),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// [`ControlPlane::wait_ready`], starting the process again when it died because a
    /// port it had picked as free was taken before it could bind it (another lab process
    /// or an outgoing connection can take it in between); the Go side then picks others.
    pub(crate) async fn wait_ready_retrying(
        &mut self,
        programs: &GoPrograms,
    ) -> Result<&ReadyInfo, LabError> {
        for _ in 0..PORT_RACE_RETRIES {
            match self.wait_ready().await.map(|_| ()) {
                Err(LabError::ProcessExited { log_tail, .. })
                    if log_tail.contains("address already in use") =>
                {
                    tracing::warn!(cluster = %self.name, "a port was taken before it was bound; starting again");
                    self.process = None;
                    self.start_process(programs)?;
                }
                Err(error) => return Err(error),
                Ok(()) => break,
            }
        }
        self.wait_ready().await
    }

    /// Stops the process (apiserver, then etcd) and keeps the data directory.
    pub(crate) fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop(STOP_GRACE);
        }
        self.ready = None;
    }

    /// Asks the process to stop without waiting (the lab stops all at once).
    pub(crate) fn request_stop(&mut self) {
        if let Some(process) = self.process.as_mut() {
            process.request_stop();
        }
    }

    /// Starts the process again on the same data directory.
    pub(crate) async fn restart(&mut self, programs: &GoPrograms) -> Result<&ReadyInfo, LabError> {
        if self.process.is_none() {
            self.start_process(programs)?;
        }
        self.wait_ready_retrying(programs).await
    }

    pub(crate) fn is_running(&self) -> bool {
        self.process.is_some()
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(LabProcess::pid)
    }

    pub(crate) fn ready(&self) -> Result<&ReadyInfo, LabError> {
        self.ready
            .as_ref()
            .ok_or_else(|| LabError::ClusterStopped(self.name.clone()))
    }

    /// The kubeconfig file of `user`. It stays in the data directory while stopped.
    pub(crate) fn kubeconfig(&self, user: User) -> PathBuf {
        self.dir.join(format!("kubeconfig-{}.yaml", user.name()))
    }

    /// A client for `user`, built from its kubeconfig.
    pub(crate) fn client(&self, user: User) -> Result<kube::Client, LabError> {
        let ready = self.ready()?;
        let config = client_config(&ready.url, &ready.ca_file, &self.kubeconfig(user), user)?;
        Ok(kube::Client::try_from(config)?)
    }
}

/// A kube client config for `user`: the lab's URL, the serving CA file and the user's
/// token from its kubeconfig.
fn client_config(
    url: &str,
    ca_file: &Path,
    kubeconfig: &Path,
    user: User,
) -> Result<kube::Config, LabError> {
    let bad = |detail: String| LabError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        detail,
    };
    let file = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let auth = file
        .auth_infos
        .into_iter()
        .find(|a| a.name == user.name())
        .and_then(|a| a.auth_info)
        .ok_or_else(|| bad(format!("no user {}", user.name())))?;
    let uri = url
        .parse()
        .map_err(|e| bad(format!("server URL {url}: {e}")))?;
    let roots = CertificateDer::pem_file_iter(ca_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad(format!("CA {}: {e}", ca_file.display())))?;
    let mut config = kube::Config::new(uri);
    config.root_cert = Some(roots.into_iter().map(|c| c.to_vec()).collect());
    config.auth_info = auth;
    Ok(config)
}
