//! Builds the lab's Go programs (`e2e/controlplane/cmd/*`) once and caches them in
//! `e2e/.cache/bin`, keyed by a hash of the module's sources and the Go version: a
//! rebuild happens only when those change. A lab of the oldest supported hub release
//! ([`KubernetesRelease::Oldest`]) also builds `e2e/controlplane-1.32` into
//! `e2e/.cache/bin-1.32` the same way.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::LabError;

/// The control plane program: kube-apiserver on embedded etcd.
pub const CONTROLPLANE: &str = "lab-controlplane";
/// The per-region workload that Prometheus scrapes.
pub const WORKLOAD: &str = "lab-workload";
/// Runs a foreign program (Prometheus) so that it stops with the lab.
pub const EXEC: &str = "lab-exec";
/// Upstream kubectl of the same release, so tests can show what a person sees
/// (`kubectl wait`, `kubectl get`); a `tool` of the module, built from the proxy's source.
pub const KUBECTL: &str = "kubectl";
/// Upstream kube-controller-manager of the same release (a `tool` of the module), for
/// regions whose Deployments must get pods.
pub const KUBE_CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// Upstream kube-scheduler of the same release (a `tool` of the module).
pub const KUBE_SCHEDULER: &str = "kube-scheduler";
/// KWOK (`sigs.k8s.io/kwok`, a `tool` of the module): plays the kubelet of fake nodes.
pub const KWOK: &str = "kwok";
/// Writes KWOK's default stages for the `kwok` binary, which has none built in.
pub const KWOK_STAGES: &str = "lab-kwok-stages";

/// The module's `tool`s, built from the proxy's source beside `./cmd/...`.
const TOOL_PACKAGES: [&str; 4] = [
    "k8s.io/kubernetes/cmd/kubectl",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
    "k8s.io/kubernetes/cmd/kube-scheduler",
    "sigs.k8s.io/kwok/cmd/kwok",
];

const PROGRAMS: [&str; 8] = [
    CONTROLPLANE,
    WORKLOAD,
    EXEC,
    KUBECTL,
    KUBE_CONTROLLER_MANAGER,
    KUBE_SCHEDULER,
    KWOK,
    KWOK_STAGES,
];
const STAMP: &str = ".source-hash";

/// The programs of `e2e/controlplane-1.32`: what differs in a lab of
/// [`KubernetesRelease::Oldest`].
const OLDEST_PROGRAMS: [&str; 2] = [CONTROLPLANE, KUBECTL];
/// Its `tool`: kubectl of the same release, as an adopter of that hub would run it.
const OLDEST_TOOL_PACKAGES: [&str; 1] = ["k8s.io/kubernetes/cmd/kubectl"];

/// The Kubernetes release of the lab's control planes and of its kubectl.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KubernetesRelease {
    /// The release `e2e/controlplane/go.mod` pins (v1.36.3), which every other program
    /// of the lab comes from too.
    #[default]
    Current,
    /// The oldest release configrollout supports as a hub, `e2e/controlplane-1.32/go.mod`
    /// (v1.32.13): its kube-apiserver, on the etcd that release requires (3.5, embedded
    /// the same way), and its kubectl. The workloads, KWOK, kube-controller-manager and
    /// kube-scheduler stay [`KubernetesRelease::Current`]'s.
    Oldest,
}

/// Paths of the built Go programs.
#[derive(Debug, Clone)]
pub struct GoPrograms {
    dir: PathBuf,
    /// Where [`OLDEST_PROGRAMS`] come from in a lab of another release than the current.
    release_dir: Option<PathBuf>,
}

impl GoPrograms {
    /// Path of one program.
    pub fn path(&self, name: &str) -> PathBuf {
        match &self.release_dir {
            Some(dir) if OLDEST_PROGRAMS.contains(&name) => dir.join(name),
            _ => self.dir.join(name),
        }
    }

    /// The release of the control planes and kubectl these programs run.
    pub fn release(&self) -> KubernetesRelease {
        if self.release_dir.is_some() {
            KubernetesRelease::Oldest
        } else {
            KubernetesRelease::Current
        }
    }
}

/// The Go module's directory in this checkout.
pub fn module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("controlplane")
}

/// The Go module of the oldest supported hub release ([`KubernetesRelease::Oldest`]): its
/// own module, because a Kubernetes release pins every `k8s.io/*` module and etcd.
pub fn oldest_module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("controlplane-1.32")
}

fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache")
}

/// `$GO`, else `go` from PATH, else the standard install location (a shell without
/// /usr/local/go/bin on PATH, as under some CI runners).
fn go_command() -> String {
    if let Ok(go) = std::env::var("GO") {
        return go;
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join("go").is_file()));
    if !on_path && Path::new("/usr/local/go/bin/go").is_file() {
        return "/usr/local/go/bin/go".to_string();
    }
    "go".to_string()
}

/// Returns the built programs, building them first when the sources changed.
///
/// Blocking (a cold build takes minutes); concurrent callers wait on a file lock, so
/// only one of them builds.
pub fn ensure_built() -> Result<GoPrograms, LabError> {
    let dir = build_module(&module_dir(), "bin", &PROGRAMS, &TOOL_PACKAGES)?;
    Ok(GoPrograms {
        dir,
        release_dir: None,
    })
}

/// [`ensure_built`], with the control plane and kubectl of `release`: for
/// [`KubernetesRelease::Oldest`], `e2e/controlplane-1.32` built too (once, cached in
/// `e2e/.cache/bin-1.32`; about 3 minutes cold on two cores).
pub fn ensure_built_for(release: KubernetesRelease) -> Result<GoPrograms, LabError> {
    let mut programs = ensure_built()?;
    if release == KubernetesRelease::Oldest {
        programs.release_dir = Some(build_module(
            &oldest_module_dir(),
            "bin-1.32",
            &OLDEST_PROGRAMS,
            &OLDEST_TOOL_PACKAGES,
        )?);
    }
    Ok(programs)
}

/// Builds `./cmd/...` and `tools` of `module` into `e2e/.cache/<bin>/` unless the stamp
/// there matches the module's sources, the Go version and the build flags and every one
/// of `programs` is there; returns that directory.
fn build_module(
    module: &Path,
    bin: &str,
    programs: &[&str],
    tools: &[&str],
) -> Result<PathBuf, LabError> {
    let cache = cache_dir();
    fs::create_dir_all(&cache)
        .map_err(|e| LabError::io(format!("create {}", cache.display()), e))?;
    let lock_path = cache.join(if bin == "bin" {
        "build.lock".to_owned()
    } else {
        format!("build-{bin}.lock")
    });
    let lock = File::create(&lock_path)
        .map_err(|e| LabError::io(format!("open {}", lock_path.display()), e))?;
    lock.lock()
        .map_err(|e| LabError::io(format!("lock {}", lock_path.display()), e))?;

    let bin = cache.join(bin);
    let ldflags = version_ldflags(module)?;
    let wanted = source_hash_of(module, &ldflags)?;
    let current = fs::read_to_string(bin.join(STAMP)).unwrap_or_default();
    let complete = programs.iter().all(|p| bin.join(p).is_file());
    if current.trim() == wanted && complete {
        return Ok(bin);
    }

    tracing::info!(module = %module.display(), "building the lab's Go programs (minutes on a cold cache)");
    let staging = cache.join(format!(
        "{}.building-{}",
        bin.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(&staging)
        .map_err(|e| LabError::io(format!("create {}", staging.display()), e))?;
    let mut out_dir = staging.clone().into_os_string();
    out_dir.push("/");
    let output = Command::new(go_command())
        .current_dir(module)
        // The module stands alone: a go.work somewhere above must not change its build.
        .env("GOWORK", "off")
        .args(["build", "-ldflags", &ldflags, "-o"])
        .arg(&out_dir)
        .arg("./cmd/...")
        .args(tools)
        .output()
        .map_err(|e| {
            LabError::io(
                format!(
                    "run {} build (is Go installed? see scripts/install-deps)",
                    go_command()
                ),
                e,
            )
        })?;
    if !output.status.success() {
        let _ = fs::remove_dir_all(&staging);
        return Err(LabError::GoBuild {
            status: output.status.to_string(),
            output: String::from_utf8_lossy(&[output.stdout, output.stderr].concat()).into_owned(),
        });
    }
    fs::write(staging.join(STAMP), &wanted).map_err(|e| LabError::io("write build stamp", e))?;
    let _ = fs::remove_dir_all(&bin);
    fs::rename(&staging, &bin)
        .map_err(|e| LabError::io(format!("move {} into place", staging.display()), e))?;
    Ok(bin)
}

/// `-ldflags` stamping the Kubernetes release of go.mod into the binary, as the upstream
/// build does: without them `/version` reports `v0.0.0-master`.
fn version_ldflags(module: &Path) -> Result<String, LabError> {
    let go_mod = module.join("go.mod");
    let text = fs::read_to_string(&go_mod)
        .map_err(|e| LabError::io(format!("read {}", go_mod.display()), e))?;
    let version = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("k8s.io/kubernetes "))
        .map(str::trim)
        .find(|v| v.starts_with('v'))
        .ok_or_else(|| LabError::GoBuild {
            status: "not started".into(),
            output: format!("no k8s.io/kubernetes requirement in {}", go_mod.display()),
        })?;
    let mut parts = version.trim_start_matches('v').split('.');
    let major = parts.next().unwrap_or_default();
    let minor = parts.next().unwrap_or_default();
    let package = "k8s.io/component-base/version";
    Ok(format!(
        "-X {package}.gitVersion={version} -X {package}.gitMajor={major} -X {package}.gitMinor={minor} \
         -X {package}.gitTreeState=clean -X {package}.buildDate=1970-01-01T00:00:00Z"
    ))
}

/// The Go module that pins Helm (`e2e/tools/helm`): its own module, because Helm's
/// `k8s.io/*` requirements differ from the control plane's.
pub fn helm_module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tools")
        .join("helm")
}

/// The Go module that pins controller-gen and the prometheus-operator API
/// (`e2e/tools/monitoring`).
pub fn monitoring_module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tools")
        .join("monitoring")
}

/// Returns Helm (`helm.sh/helm/v4/cmd/helm`, the version `e2e/tools/helm/go.mod`
/// requires), building it first into `e2e/.cache/helm/` when the module or Go changed.
/// Blocking; concurrent callers wait on a file lock.
pub fn ensure_helm() -> Result<PathBuf, LabError> {
    let module = helm_module_dir();
    let version = required_version(&module, "helm.sh/helm/v4")?;
    // What `helm version` reports, as the upstream release build stamps it.
    let ldflags = format!("-X helm.sh/helm/v4/internal/version.version={version}");
    ensure_tool(&module, "helm.sh/helm/v4/cmd/helm", "helm", &ldflags)
}

/// The Go module that pins Helm 3 (`e2e/tools/helm3`), the chart's other supported
/// major: the chart tests lint and render with it too.
pub fn helm3_module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tools")
        .join("helm3")
}

/// Returns Helm 3 (`helm.sh/helm/v3/cmd/helm`, the version `e2e/tools/helm3/go.mod`
/// requires), built into `e2e/.cache/helm3/` like [`ensure_helm`].
pub fn ensure_helm3() -> Result<PathBuf, LabError> {
    let module = helm3_module_dir();
    let version = required_version(&module, "helm.sh/helm/v3")?;
    // As Helm 3's release build stamps them: without the Kubernetes version of its
    // client-go, `helm template` and `helm lint` take the cluster for v1.20.0 and refuse
    // any chart requiring more.
    let client_go = required_version(&module, "k8s.io/client-go")?;
    let minor = client_go
        .trim_start_matches("v0.")
        .split('.')
        .next()
        .unwrap_or_default();
    let mut ldflags = format!("-X helm.sh/helm/v3/internal/version.version={version}");
    for package in ["pkg/lint/rules", "pkg/chartutil"] {
        ldflags.push_str(&format!(
            " -X helm.sh/helm/v3/{package}.k8sVersionMajor=1 \
             -X helm.sh/helm/v3/{package}.k8sVersionMinor={minor}"
        ));
    }
    ensure_tool(&module, "helm.sh/helm/v3/cmd/helm", "helm3", &ldflags)
}

/// Returns controller-gen (`sigs.k8s.io/controller-tools`, a `tool` of
/// `e2e/tools/monitoring`), built into `e2e/.cache/controller-gen/` like [`ensure_helm`].
pub fn ensure_controller_gen() -> Result<PathBuf, LabError> {
    ensure_tool(
        &monitoring_module_dir(),
        "sigs.k8s.io/controller-tools/cmd/controller-gen",
        "controller-gen",
        "",
    )
}

/// The Go module that judges objects as the GitOps tools do (`e2e/gitops`: cli-utils
/// kstatus, the shipped Argo CD Lua scripts through gopher-lua).
pub fn gitops_module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("gitops")
}

/// Returns `gitops-health` (`e2e/gitops/cmd/gitops-health`), built like [`ensure_helm`]
/// into `e2e/.cache/gitops-health/`.
pub fn ensure_gitops_health() -> Result<PathBuf, LabError> {
    ensure_tool(
        &gitops_module_dir(),
        "configrollout.dev/e2e/gitops/cmd/gitops-health",
        "gitops-health",
        "",
    )
}

/// Builds `package` of `module` into `e2e/.cache/<name>/<name>` unless the stamp beside
/// it matches the module's sources, the Go version and `ldflags`.
fn ensure_tool(
    module: &Path,
    package: &str,
    name: &str,
    ldflags: &str,
) -> Result<PathBuf, LabError> {
    let cache = cache_dir().join(name);
    fs::create_dir_all(&cache)
        .map_err(|e| LabError::io(format!("create {}", cache.display()), e))?;
    let lock_path = cache.join("build.lock");
    let lock = File::create(&lock_path)
        .map_err(|e| LabError::io(format!("open {}", lock_path.display()), e))?;
    lock.lock()
        .map_err(|e| LabError::io(format!("lock {}", lock_path.display()), e))?;
    let binary = cache.join(name);
    let stamp = cache.join(STAMP);
    let wanted = source_hash_of(module, ldflags)?;
    let current = fs::read_to_string(&stamp).unwrap_or_default();
    if current.trim() == wanted && binary.is_file() {
        return Ok(binary);
    }
    tracing::info!(module = %module.display(), package, "building a Go tool (minutes on a cold cache)");
    let staging = cache.join(format!("{name}.building-{}", std::process::id()));
    let output = Command::new(go_command())
        .current_dir(module)
        .env("GOWORK", "off")
        .args(["build", "-ldflags", ldflags, "-o"])
        .arg(&staging)
        .arg(package)
        .output()
        .map_err(|e| LabError::io(format!("run {} build", go_command()), e))?;
    if !output.status.success() {
        let _ = fs::remove_file(&staging);
        return Err(LabError::GoBuild {
            status: output.status.to_string(),
            output: String::from_utf8_lossy(&[output.stdout, output.stderr].concat()).into_owned(),
        });
    }
    fs::rename(&staging, &binary)
        .map_err(|e| LabError::io(format!("move {} into place", staging.display()), e))?;
    fs::write(&stamp, &wanted).map_err(|e| LabError::io("write build stamp", e))?;
    Ok(binary)
}

/// The version of `path` that `module`'s go.mod requires.
fn required_version(module: &Path, path: &str) -> Result<String, LabError> {
    let go_mod = module.join("go.mod");
    let text = fs::read_to_string(&go_mod)
        .map_err(|e| LabError::io(format!("read {}", go_mod.display()), e))?;
    let prefix = format!("{path} ");
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            line.strip_prefix(&prefix)
                .or_else(|| line.strip_prefix("require ")?.strip_prefix(&prefix))
        })
        .map(|rest| {
            rest.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .find(|v| v.starts_with('v'))
        .ok_or_else(|| LabError::GoBuild {
            status: "not started".into(),
            output: format!("no {path} requirement in {}", go_mod.display()),
        })
}

/// Hash of every source file of the module at `root` (path and content, a link's target's
/// content), the Go version and the build flags.
fn source_hash_of(root: &Path, ldflags: &str) -> Result<String, LabError> {
    let root = root.to_path_buf();
    let mut files = Vec::new();
    collect_sources(&root, &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    hasher.update(ldflags.as_bytes());
    hasher.update([0]);
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap_or(file);
        hasher.update(relative.to_string_lossy().as_bytes());
        hasher.update([0]);
        let content =
            fs::read(file).map_err(|e| LabError::io(format!("read {}", file.display()), e))?;
        hasher.update((content.len() as u64).to_le_bytes());
        hasher.update(&content);
    }
    let version = Command::new(go_command())
        .arg("version")
        .output()
        .map_err(|e| {
            LabError::io(
                format!(
                    "run {} version (is Go installed? see scripts/install-deps)",
                    go_command()
                ),
                e,
            )
        })?;
    hasher.update(&version.stdout);
    Ok(hex::encode(hasher.finalize()))
}

fn collect_sources(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), LabError> {
    let entries =
        fs::read_dir(dir).map_err(|e| LabError::io(format!("list {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| LabError::io(format!("list {}", dir.display()), e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| LabError::io(format!("stat {}", path.display()), e))?;
        if kind.is_dir() {
            collect_sources(&path, files)?;
        } else if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".go") || n == "go.mod" || n == "go.sum")
        {
            files.push(path);
        }
    }
    Ok(())
}
