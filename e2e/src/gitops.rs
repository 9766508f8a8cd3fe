//! What the GitOps tools make of the lab's objects: kstatus (cli-utils `status.Compute`,
//! what Flux's health checks and kpt run) and the Argo CD health and action scripts of
//! `deploy/argocd`, run as Argo CD runs them, both by `gitops-health` (`e2e/gitops`, built
//! once and cached like Helm). The lab's tests judge their rollouts at the moments they
//! reach each phase, and with `CONFIGROLLOUT_GITOPS_CAPTURE=DIR` keep each judged object in
//! `DIR/<label>.json` (how the Argo CD testdata in `deploy/argocd` was taken).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::LabError;
use crate::gobuild::ensure_gitops_health;

/// Where the judged objects are kept, when set.
pub const CAPTURE_ENV: &str = "CONFIGROLLOUT_GITOPS_CAPTURE";

/// A status and its message, as one tool judged it.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct Judgement {
    /// kstatus: Current, InProgress, Failed, ...; Argo CD: Healthy, Progressing,
    /// Suspended, Degraded, ...
    #[serde(default)]
    pub status: String,
    /// Why.
    #[serde(default)]
    pub message: String,
}

/// What the tools make of one object.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The object's kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// `status.phase`, when it has one.
    #[serde(default)]
    pub phase: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`.
    #[serde(default)]
    pub observed_generation: Option<i64>,
    /// cli-utils' `status.Compute`.
    pub kstatus: Judgement,
    /// The shipped Argo CD `health.lua`.
    #[serde(rename = "argocd")]
    pub argo_cd: Judgement,
    /// The actions the shipped `discovery.lua` offers: name to enabled.
    #[serde(default)]
    pub actions: BTreeMap<String, bool>,
}

impl Verdict {
    /// The actions enabled, sorted.
    pub fn enabled_actions(&self) -> Vec<&str> {
        self.actions
            .iter()
            .filter(|(_, enabled)| **enabled)
            .map(|(name, _)| name.as_str())
            .collect()
    }
}

/// One thing Argo CD would do for an action.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "operation", rename_all = "camelCase")]
pub enum Operation {
    /// Create this object (with Argo CD's credentials).
    Create {
        /// The object.
        resource: serde_json::Value,
    },
    /// Send this JSON merge patch to the object the action ran on.
    Patch {
        /// The patch.
        patch: serde_json::Value,
    },
}

/// The `resource_customizations` directory shipped in `deploy/argocd`.
pub fn customizations_dir() -> PathBuf {
    crate::repository_root()
        .join("deploy")
        .join("argocd")
        .join("resource_customizations")
}

/// Builds `gitops-health` when needed (blocking; seconds on a warm Go cache).
pub fn ensure_built() -> Result<PathBuf, LabError> {
    ensure_gitops_health()
}

fn run(args: &[&str], object: &serde_json::Value) -> Result<Vec<u8>, LabError> {
    let binary = ensure_gitops_health()?;
    let customizations = customizations_dir();
    let mut command = Command::new(&binary);
    command
        .arg(args[0])
        .arg("--customizations")
        .arg(&customizations)
        .args(&args[1..])
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let described = format!("{} {}", binary.display(), args.join(" "));
    let mut child = command
        .spawn()
        .map_err(|e| LabError::io(format!("run {described}"), e))?;
    let input = serde_json::to_vec(object).map_err(|e| LabError::BadResponse {
        context: "encode object for gitops-health".into(),
        detail: e.to_string(),
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&input)
            .map_err(|e| LabError::io(format!("write to {described}"), e))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| LabError::io(format!("wait for {described}"), e))?;
    if !output.status.success() {
        return Err(LabError::Tool {
            command: described,
            status: output.status.to_string(),
            output: String::from_utf8_lossy(&[output.stdout, output.stderr].concat()).into_owned(),
        });
    }
    Ok(output.stdout)
}

fn parse<T: for<'de> Deserialize<'de>>(what: &str, stdout: &[u8]) -> Result<T, LabError> {
    serde_json::from_slice(stdout).map_err(|e| LabError::BadResponse {
        context: format!("gitops-health {what}"),
        detail: format!("{e}: {}", String::from_utf8_lossy(stdout)),
    })
}

/// What kstatus and the shipped Argo CD scripts make of `object` (a ConfigRollout or a
/// Region as the apiserver returned it). Kept as `<label>.json` when capturing.
pub fn judge(label: &str, object: &serde_json::Value) -> Result<Verdict, LabError> {
    if let Some(dir) = std::env::var_os(CAPTURE_ENV).filter(|dir| !dir.is_empty()) {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
        let path = dir.join(format!("{label}.json"));
        let pretty = serde_json::to_vec_pretty(object).map_err(|e| LabError::BadResponse {
            context: "encode captured object".into(),
            detail: e.to_string(),
        })?;
        std::fs::write(&path, pretty)
            .map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    }
    parse("judge", &run(&["judge"], object)?)
}

/// What Argo CD would do for `action` on `object`; `approver` sets the approve action's
/// approver, as a platform does in argocd-cm.
pub fn argo_cd_action(
    object: &serde_json::Value,
    action: &str,
    approver: Option<&str>,
) -> Result<Vec<Operation>, LabError> {
    let mut args = vec!["act", "--action", action];
    if let Some(approver) = approver {
        args.extend(["--approver", approver]);
    }
    #[derive(Deserialize)]
    struct Acted {
        operations: Vec<Operation>,
    }
    let acted: Acted = parse("act", &run(&args, object)?)?;
    Ok(acted.operations)
}
