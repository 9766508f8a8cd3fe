//! Issue 37: every command block of the quick start (`README.md`, "Quick start on one
//! cluster") and of `docs/install.md` runs on the lab as the pages say, block by block,
//! and does what the page claims.
//!
//! The blocks are read from the Markdown at test time (every ```` ```sh ```` block of those
//! two places, in order; no copy lives here). Each runs with `bash` under
//! `set -euo pipefail`, in a directory that holds the repository as an adopter's checkout
//! (symlinks to its top-level entries, so that the files a block writes stay out of the
//! tree), with `PATH` starting with stand-ins:
//!
//! - `kubectl`: the lab's kubectl (the release of its API servers), with `KUBECONFIG` the
//!   admin's of the cluster the block is for: the page's hub, or its region when the block
//!   starts with `# in the region`;
//! - `helm`: the lab's Helm ([`Helm`], built from Go modules, its own homes);
//! - `kubectl-configrollout`, so also `kubectl configrollout`: the plugin this crate builds
//!   (`lab-plugin`, the same `configrollout_plugin::main`);
//! - `docker`, `kind`, `minikube`, `podman` and `cargo`: record their arguments and exit
//!   0, for what the lab does not do (a Docker daemon, a kind cluster, a release build of
//!   the plugin into `~/.cargo/bin`). Each step checks the calls its block made. The image
//!   itself is built (`scripts/build-image`, the script of `make image`) and run (podman,
//!   kube's in-cluster configuration, the shipped ServiceAccount's token) by
//!   `e2e/tests/incluster.rs`.
//!
//! Where a block installs the controller (`kubectl apply -k deploy/`, `helm install`), the
//! Deployment is stored but nothing runs its pods (KWOK's fake kubelet only marks them
//! Ready, so `kubectl rollout status` ends): the step then runs the lab's controller
//! binary as that pod would, with the Deployment's args and env as the apiserver stored
//! them and a TokenRequest token of its ServiceAccount, so it has exactly the rights the
//! install created, and the next blocks (a Region, a rollout, `kubectl wait`) really
//! depend on it.
//!
//! A block that cannot run on the lab carries `<!-- not run on the lab: REASON -->` on the
//! line before it. Every other block must have its step here, in order: the step names
//! the cluster and checks what the block claims beyond its exit status. A block neither
//! run nor marked, a marker without a reason or not before a block, or a ```` ```bash ````
//! block (which would escape this test) fails [`every_block_is_run_or_marked`], without a
//! lab.
//!
//! The clusters: one lab whose three regions are left unregistered, that is bare
//! clusters. `region-1` is the quick start's one cluster, `region-2` the install page's
//! hub and `region-3` its region `eu-1`; the lab's own hub, which already holds the CRDs
//! and `deploy/rbac.yaml`, takes the page's "without Helm" alternative (the quick start
//! applies the same base to a bare cluster).

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, Region};
use configrollout_e2e::chart::{self, Helm};
use configrollout_e2e::{HUB, LabChild, LabOptions, SYSTEM_NAMESPACE, User, repository_root};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::{self, Scope};
use kube::{Client, Config};
use serde_json::Value;

use support::*;

/// The plugin binary the `kubectl-configrollout` stand-in runs.
const PLUGIN: &str = env!("CARGO_BIN_EXE_lab-plugin");
/// The line before a block that the lab does not run, followed by `: REASON -->`.
const MARKER: &str = "<!-- not run on the lab";
/// Bound on one block (the quick start's rollout waits up to 2 x 2 minutes itself).
const BLOCK: Duration = Duration::from_secs(330);
/// The controller's Deployment and Lease, as `deploy/` and the chart name them.
const CONTROLLER: &str = "configrollout-controller";
/// The stand-ins that record their arguments.
const RECORDED: [&str; 5] = ["docker", "kind", "minikube", "podman", "cargo"];
/// What the install page calls its region.
const EU_1: &str = "eu-1";
/// What the quick start's one cluster runs, as a pod would be named.
const QUICK_START_CLUSTER: &str = "region-1";
const INSTALL_HUB: &str = "region-2";
const INSTALL_REGION: &str = "region-3";

// ----------------------------------------------------------------------------------------
// The pages and their blocks.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Page {
    /// `README.md`, its section "Quick start ...".
    QuickStart,
    /// `docs/install.md`, whole.
    Install,
}

impl Page {
    const ALL: [Page; 2] = [Page::QuickStart, Page::Install];

    fn file(self) -> &'static str {
        match self {
            Page::QuickStart => "README.md",
            Page::Install => "docs/install.md",
        }
    }

    /// Whether a block under the level-2 heading `section` belongs to the page.
    fn holds(self, section: &str) -> bool {
        match self {
            Page::QuickStart => section.starts_with("Quick start"),
            Page::Install => true,
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Page::QuickStart => "quick-start",
            Page::Install => "install",
        }
    }
}

/// One ```` ```sh ```` block of a page.
#[derive(Debug, Clone)]
struct Block {
    file: String,
    /// Line of the opening fence (1-based).
    line: usize,
    /// The level-2 heading it is under.
    section: String,
    /// The nearest heading above it.
    heading: String,
    text: String,
    /// The reason of its `<!-- not run on the lab: REASON -->` marker.
    not_run: Option<String>,
}

impl Block {
    fn place(&self) -> String {
        format!("{}:{} ({})", self.file, self.line, self.heading)
    }

    /// Whether the page says the block runs in the region (its first line).
    fn in_the_region(&self) -> bool {
        self.text
            .lines()
            .find(|line| !line.trim().is_empty())
            .is_some_and(|line| line.trim().to_lowercase().starts_with("# in the region"))
    }
}

/// The level of a Markdown heading line (`## Title` is 2), or 0.
fn heading_level(line: &str) -> usize {
    let hashes = line.chars().take_while(|&c| c == '#').count();
    if hashes > 0 && line[hashes..].starts_with(' ') {
        hashes
    } else {
        0
    }
}

/// Every ```` ```sh ```` block of `markdown` (the file `file`), with its marker. Errors:
/// a marker without a reason or not right before a ```` ```sh ```` block, a shell block
/// in another fence language, an unclosed fence.
fn blocks(file: &str, markdown: &str) -> Result<Vec<Block>, Vec<String>> {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    let mut section = String::new();
    let mut heading = String::new();
    // (line of the fence, its fence string, whether it is an sh block, its text)
    let mut open: Option<(usize, String, bool, String)> = None;
    // (line, reason) of a marker waiting for its block
    let mut marker: Option<(usize, String)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim();
        if let Some((start, fence, is_sh, text)) = open.as_mut() {
            if trimmed == fence.as_str() {
                if *is_sh {
                    found.push(Block {
                        file: file.to_owned(),
                        line: *start,
                        section: section.clone(),
                        heading: heading.clone(),
                        text: std::mem::take(text),
                        not_run: marker.take().map(|(_, reason)| reason),
                    });
                }
                open = None;
            } else {
                text.push_str(line);
                text.push('\n');
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let fence: String = trimmed
                .chars()
                .take_while(|&c| c == '`' || c == '~')
                .collect();
            let language = trimmed[fence.len()..]
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_lowercase();
            if ["bash", "shell", "console", "zsh", "shell-session"].contains(&language.as_str()) {
                problems.push(format!(
                    "{file}:{number}: a ```{language} block: write commands as ```sh, which \
                     e2e/tests/doc_commands.rs runs"
                ));
            }
            let is_sh = language == "sh";
            if let Some((at, _)) = &marker
                && !is_sh
            {
                problems.push(format!(
                    "{file}:{at}: the marker is not right before a ```sh block"
                ));
                marker = None;
            }
            open = Some((number, fence, is_sh, String::new()));
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix(MARKER) {
            let reason = rest
                .strip_suffix("-->")
                .and_then(|inner| inner.trim().strip_prefix(':'))
                .map(str::trim)
                .unwrap_or_default();
            if reason.is_empty() {
                problems.push(format!(
                    "{file}:{number}: a marker without a reason: write \
                     `{MARKER}: REASON -->` on one line"
                ));
            }
            if let Some((at, _)) = &marker {
                problems.push(format!(
                    "{file}:{at}: the marker is not right before a ```sh block"
                ));
            }
            marker = Some((number, reason.to_owned()));
            continue;
        }
        if trimmed.is_empty() {
            continue;
        }
        if let Some((at, _)) = marker.take() {
            problems.push(format!(
                "{file}:{at}: the marker is not right before a ```sh block"
            ));
        }
        let level = heading_level(line);
        if level > 0 {
            heading = line[level..].trim().to_owned();
            if level <= 2 {
                section = heading.clone();
            }
        }
    }
    if let Some((start, ..)) = open {
        problems.push(format!("{file}:{start}: a fence that is never closed"));
    }
    if let Some((at, _)) = marker {
        problems.push(format!(
            "{file}:{at}: the marker is not right before a ```sh block"
        ));
    }
    if problems.is_empty() {
        Ok(found)
    } else {
        Err(problems)
    }
}

/// The blocks of `page`, read from the repository now.
fn page_blocks(page: Page) -> Result<Vec<Block>, Vec<String>> {
    let path = repository_root().join(page.file());
    let markdown =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    Ok(blocks(page.file(), &markdown)?
        .into_iter()
        .filter(|block| page.holds(&block.section))
        .collect())
}

// ----------------------------------------------------------------------------------------
// The steps: for each block run, in page order, where it runs and what it must have done.

/// Where a block runs: a cluster of the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cluster {
    /// The quick start's one cluster, bare before the first block.
    QuickStart,
    /// The install page's hub, bare before its first block.
    InstallHub,
    /// The install page's region `eu-1`, bare but for the namespaces its teams use.
    InstallRegion,
    /// The "without Helm" alternative of the install: the lab's hub.
    KustomizeHub,
}

impl Cluster {
    fn lab_name(self) -> &'static str {
        match self {
            Cluster::QuickStart => QUICK_START_CLUSTER,
            Cluster::InstallHub => INSTALL_HUB,
            Cluster::InstallRegion => INSTALL_REGION,
            Cluster::KustomizeHub => HUB,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    QuickStartController,
    QuickStartRegion,
    QuickStartRollout,
    QuickStartPlugin,
    HelmInstall,
    KustomizeInstall,
    RegionAdd,
    ByHandInTheRegion,
    ByHandInTheHub,
    PrometheusCredentials,
    HubAsRegion,
    PluginInstall,
    Uninstall,
}

/// A step: the block it runs (by page, order and a string the block contains), where.
struct Expected {
    page: Page,
    contains: &'static str,
    cluster: Cluster,
    step: Step,
}

const STEPS: [Expected; 13] = [
    Expected {
        page: Page::QuickStart,
        contains: "kubectl apply -k deploy/",
        cluster: Cluster::QuickStart,
        step: Step::QuickStartController,
    },
    Expected {
        page: Page::QuickStart,
        contains: "kind: Region",
        cluster: Cluster::QuickStart,
        step: Step::QuickStartRegion,
    },
    Expected {
        page: Page::QuickStart,
        contains: "kind: ConfigRollout",
        cluster: Cluster::QuickStart,
        step: Step::QuickStartRollout,
    },
    Expected {
        page: Page::QuickStart,
        contains: "kubectl configrollout -n demo history",
        cluster: Cluster::QuickStart,
        step: Step::QuickStartPlugin,
    },
    Expected {
        page: Page::Install,
        contains: "helm install configrollout deploy/chart",
        cluster: Cluster::InstallHub,
        step: Step::HelmInstall,
    },
    Expected {
        page: Page::Install,
        contains: "kubectl apply -k deploy/observability/",
        cluster: Cluster::KustomizeHub,
        step: Step::KustomizeInstall,
    },
    Expected {
        page: Page::Install,
        contains: "kubectl configrollout region add eu-1",
        cluster: Cluster::InstallHub,
        step: Step::RegionAdd,
    },
    Expected {
        page: Page::Install,
        contains: "create token configrollout-region-writer",
        cluster: Cluster::InstallRegion,
        step: Step::ByHandInTheRegion,
    },
    Expected {
        page: Page::Install,
        contains: "create secret generic region-eu-1-kubeconfig",
        cluster: Cluster::InstallHub,
        step: Step::ByHandInTheHub,
    },
    Expected {
        page: Page::Install,
        contains: "create secret generic eu-1-prometheus",
        cluster: Cluster::InstallHub,
        step: Step::PrometheusCredentials,
    },
    Expected {
        page: Page::Install,
        contains: "clusterrolebinding configrollout-hub-as-region",
        cluster: Cluster::InstallHub,
        step: Step::HubAsRegion,
    },
    Expected {
        page: Page::Install,
        contains: "cargo install --path plugin --bin kubectl-configrollout",
        cluster: Cluster::InstallHub,
        step: Step::PluginInstall,
    },
    Expected {
        page: Page::Install,
        contains: "helm uninstall configrollout",
        cluster: Cluster::InstallHub,
        step: Step::Uninstall,
    },
];

/// Every block of both pages, in order, each with its step (`None`: marked not run).
/// A block of a page and its step (`None`: marked not run).
type Planned = (Page, Block, Option<&'static Expected>);

fn plan() -> Result<Vec<Planned>, Vec<String>> {
    let mut problems = Vec::new();
    let mut planned = Vec::new();
    for page in Page::ALL {
        let blocks = match page_blocks(page) {
            Ok(blocks) => blocks,
            Err(found) => {
                problems.extend(found);
                continue;
            }
        };
        let mut steps = STEPS.iter().filter(|step| step.page == page);
        for block in blocks {
            if let Some(reason) = &block.not_run {
                assert!(!reason.is_empty());
                planned.push((page, block, None));
                continue;
            }
            let Some(step) = steps.next() else {
                problems.push(format!(
                    "{}: a block neither run nor marked: give it its step in \
                     e2e/tests/doc_commands.rs (where it runs, what it must have done), or, \
                     if the lab cannot run it, `{MARKER}: REASON -->` on the line before it",
                    block.place()
                ));
                continue;
            };
            if !block.text.contains(step.contains) {
                problems.push(format!(
                    "{}: step {:?} expects a block with `{}` here: the page's blocks and the \
                     steps of e2e/tests/doc_commands.rs disagree",
                    block.place(),
                    step.step,
                    step.contains
                ));
            }
            if block.in_the_region() != (step.cluster == Cluster::InstallRegion) {
                problems.push(format!(
                    "{}: step {:?} runs on {:?}, but the block {} say `# in the region`",
                    block.place(),
                    step.step,
                    step.cluster,
                    if block.in_the_region() {
                        "does"
                    } else {
                        "does not"
                    }
                ));
            }
            planned.push((page, block, Some(step)));
        }
        for step in steps {
            problems.push(format!(
                "{}: no block left for step {:?} (a block with `{}`)",
                page.file(),
                step.step,
                step.contains
            ));
        }
    }
    if problems.is_empty() {
        Ok(planned)
    } else {
        Err(problems)
    }
}

// ----------------------------------------------------------------------------------------
// Without a lab.

#[test]
fn every_block_is_run_or_marked() {
    let planned = plan().unwrap_or_else(|problems| panic!("{}", problems.join("\n")));
    let run = planned.iter().filter(|(_, _, step)| step.is_some()).count();
    assert_eq!(run, STEPS.len());
    for (_, block, step) in &planned {
        match step {
            Some(step) => eprintln!("{}: run as {:?}", block.place(), step.step),
            None => eprintln!(
                "{}: not run: {}",
                block.place(),
                block.not_run.as_deref().unwrap_or_default()
            ),
        }
    }
}

#[test]
fn markers_need_a_reason_and_a_block() {
    let marked = "# T\n\n## S\n\n<!-- not run on the lab: needs a managed cluster -->\n```sh\nkubectl get nodes\n```\n";
    let found = blocks("t.md", marked).expect("a marked block");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].not_run.as_deref(), Some("needs a managed cluster"));
    assert_eq!(found[0].line, 6);
    assert_eq!(found[0].section, "S");

    let unmarked =
        "## S\n\n```sh\n# in the region\nkubectl get nodes\n```\n\n```yaml\nkind: X\n```\n";
    let found = blocks("t.md", unmarked).expect("a block");
    assert_eq!(found.len(), 1, "only sh blocks");
    assert!(found[0].not_run.is_none());
    assert!(found[0].in_the_region());

    for (markdown, problem) in [
        (
            "<!-- not run on the lab -->\n```sh\nls\n```\n",
            "without a reason",
        ),
        (
            "<!-- not run on the lab: -->\n```sh\nls\n```\n",
            "without a reason",
        ),
        (
            "<!-- not run on the lab: a reason -->\nSome prose.\n\n```sh\nls\n```\n",
            "not right before",
        ),
        (
            "<!-- not run on the lab: a reason -->\n```yaml\na: b\n```\n",
            "not right before",
        ),
        ("```bash\nls\n```\n", "write commands as ```sh"),
        ("```sh\nls\n", "never closed"),
    ] {
        let problems = blocks("t.md", markdown).expect_err(markdown);
        assert!(
            problems.iter().any(|p| p.contains(problem)),
            "{markdown:?}: {problems:?}"
        );
    }
}

/// A ```` ``` ```` line inside a ```` ```` ```` fence, and a `## ` comment line inside a
/// block, are text of that block.
#[test]
fn fences_and_headings_inside_blocks() {
    let markdown = "## A\n\n````md\n```sh\nnot a block\n```\n````\n\n```sh\n## not a heading\nls\n```\n\n## B\n";
    let found = blocks("t.md", markdown).expect("blocks");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].text, "## not a heading\nls\n");
    assert_eq!(found[0].section, "A");
}

// ----------------------------------------------------------------------------------------
// On the lab.

/// What a block printed.
struct Ran {
    stdout: String,
    stderr: String,
}

impl Ran {
    fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// The controller as a pod of its Deployment would run it.
struct Pod {
    name: String,
    child: LabChild,
}

struct Docs<'a> {
    world: &'a World,
    /// `<lab>/doc-commands`: checkouts, homes, scripts, outputs, stand-ins.
    root: PathBuf,
    shims: PathBuf,
    calls: PathBuf,
    helm: Helm,
    /// The controller running for each cluster that has one installed.
    pods: BTreeMap<&'static str, Pod>,
}

fn write_executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// `text` quoted for `sh`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

impl<'a> Docs<'a> {
    fn new(world: &'a World) -> Self {
        let root = world.lab.root_dir().join("doc-commands");
        let shims = root.join("bin");
        std::fs::create_dir_all(&shims).expect("the stand-ins' directory");
        let calls = root.join("calls");
        std::fs::write(&calls, "").expect("the calls file");
        let helm = Helm::ensure().expect("helm builds from e2e/tools/helm");

        write_executable(
            &shims.join("kubectl"),
            &format!(
                "#!/bin/sh\nexec {} \"$@\"\n",
                quoted(&world.lab.kubectl().to_string_lossy())
            ),
        );
        // Helm with the lab's homes (never the user's); KUBECONFIG from the block.
        let helm_command = helm.command();
        let mut script = String::from("#!/bin/sh\n");
        for (name, value) in helm_command.get_envs() {
            if let Some(value) = value {
                script.push_str(&format!(
                    "export {}={}\n",
                    name.to_string_lossy(),
                    quoted(&value.to_string_lossy())
                ));
            }
        }
        script.push_str(&format!(
            "exec {} \"$@\"\n",
            quoted(&helm.binary().to_string_lossy())
        ));
        write_executable(&shims.join("helm"), &script);
        std::os::unix::fs::symlink(PLUGIN, shims.join("kubectl-configrollout"))
            .expect("the plugin's link");
        for tool in RECORDED {
            // One call a line: the tool, then each argument, each ended by \037.
            write_executable(
                &shims.join(tool),
                &format!(
                    "#!/bin/sh\n# A stand-in: records its arguments for e2e/tests/doc_commands.rs.\n\
                     {{ printf '%s\\037' {tool}; for a in \"$@\"; do printf '%s\\037' \"$a\"; done; printf '\\n'; }} >> {}\n",
                    quoted(&calls.to_string_lossy())
                ),
            );
        }
        Self {
            world,
            root,
            shims,
            calls,
            helm,
            pods: BTreeMap::new(),
        }
    }

    /// The page's checkout: every top-level entry of the repository, linked.
    fn checkout(&self, page: Page) -> PathBuf {
        let dir = self.root.join(page.slug());
        if dir.exists() {
            return dir;
        }
        std::fs::create_dir_all(&dir).expect("the checkout");
        let repository = repository_root();
        for entry in std::fs::read_dir(&repository).expect("the repository") {
            let entry = entry.expect("an entry");
            let name = entry.file_name();
            if name == "target" || name == ".git" {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), dir.join(&name)).expect("a link");
        }
        dir
    }

    fn client(&self, cluster: &str) -> Client {
        self.world
            .lab
            .client(cluster, User::Admin)
            .expect("admin client")
    }

    /// The calls the recording stand-ins got since the last look, each as its tool and
    /// arguments.
    fn take_calls(&self) -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(&self.calls).expect("the calls file");
        std::fs::write(&self.calls, "").expect("clear the calls file");
        text.lines()
            .map(|line| {
                line.strip_suffix('\u{1f}')
                    .unwrap_or(line)
                    .split('\u{1f}')
                    .map(str::to_owned)
                    .collect()
            })
            .collect()
    }

    fn assert_calls(&self, step: Step, expected: &[&[&str]]) {
        let calls = self.take_calls();
        let expected: Vec<Vec<String>> = expected
            .iter()
            .map(|call| call.iter().map(|arg| (*arg).to_owned()).collect())
            .collect();
        assert_eq!(calls, expected, "{step:?}: the stand-ins' calls");
    }

    /// Runs `block` with bash on `cluster`, from the page's checkout; panics unless it
    /// exits 0.
    async fn run(&self, page: Page, block: &Block, cluster: Cluster) -> Ran {
        let name = cluster.lab_name();
        let dir = self.checkout(page);
        let home = self.root.join(format!("home-{}", page.slug()));
        std::fs::create_dir_all(&home).expect("a home");
        // The admin's kubeconfig, copied once per cluster: what a block changes in it
        // stays for the next block, as in a person's shell.
        let kubeconfig = self.root.join(format!("kubeconfig-{name}.yaml"));
        if !kubeconfig.exists() {
            std::fs::copy(
                self.world
                    .lab
                    .kubeconfig(name, User::Admin)
                    .expect("admin kubeconfig"),
                &kubeconfig,
            )
            .expect("copy the kubeconfig");
        }
        let stem = format!("{}-{}", page.slug(), block.line);
        let scripts = self.root.join("blocks");
        std::fs::create_dir_all(&scripts).expect("the blocks' directory");
        let script = scripts.join(format!("{stem}.sh"));
        std::fs::write(&script, format!("set -euo pipefail\n{}", block.text)).expect("script");
        let stdout_path = scripts.join(format!("{stem}.stdout"));
        let stderr_path = scripts.join(format!("{stem}.stderr"));
        let path = format!(
            "{}:{}",
            self.shims.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut command = std::process::Command::new("bash");
        command
            .arg("--noprofile")
            .arg("--norc")
            .arg(&script)
            .current_dir(&dir)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &home)
            .env("KUBECONFIG", &kubeconfig)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
            // Its own process group, so that a block over time is killed whole.
            .process_group(0);
        let started = Instant::now();
        let mut child = tokio::process::Command::from(command)
            .spawn()
            .expect("bash runs");
        let pid = child.id().expect("a pid");
        let status = match tokio::time::timeout(BLOCK, child.wait()).await {
            Ok(status) => status.expect("bash ends"),
            Err(_) => {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", "--", &format!("-{pid}")])
                    .status();
                let _ = child.wait().await;
                panic!(
                    "{}: not done within {BLOCK:?}\n{}{}",
                    block.place(),
                    std::fs::read_to_string(&stdout_path).unwrap_or_default(),
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
        };
        let ran = Ran {
            stdout: std::fs::read_to_string(&stdout_path).unwrap_or_default(),
            stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
        };
        eprintln!(
            "---- {} on {name}: {status} in {:.1} s\n{}-- stdout:\n{}-- stderr:\n{}",
            block.place(),
            started.elapsed().as_secs_f64(),
            block.text,
            ran.stdout,
            ran.stderr
        );
        assert!(
            status.success(),
            "{}: {status}\n{}",
            block.place(),
            ran.all()
        );
        ran
    }

    async fn before(&mut self, page: Page, step: Step) {
        match step {
            Step::HelmInstall => self.install_monitoring_crds(INSTALL_HUB).await,
            Step::KustomizeInstall => self.install_monitoring_crds(HUB).await,
            Step::RegionAdd => {
                // What the page assumes: the region's admin kubeconfig as the person has
                // it, and the namespaces the teams use there, which the command grants
                // but never creates.
                std::fs::copy(
                    self.world
                        .lab
                        .kubeconfig(INSTALL_REGION, User::Admin)
                        .expect("region kubeconfig"),
                    self.checkout(page).join("eu-1-admin.yaml"),
                )
                .expect("eu-1-admin.yaml");
                for namespace in ["team-a-config", "team-b-config"] {
                    within(
                        "a team's namespace in the region",
                        self.world.lab.create_namespace(INSTALL_REGION, namespace),
                    )
                    .await;
                }
            }
            Step::ByHandInTheRegion => {
                // By hand is the other way to the same objects: the command's Secret and
                // Region go first, as nobody runs both.
                let hub = self.client(INSTALL_HUB);
                let secrets: Api<Secret> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
                within(
                    "delete the command's Secret",
                    secrets.delete("region-eu-1-kubeconfig", &Default::default()),
                )
                .await;
                let regions: Api<Region> = Api::all(hub);
                within(
                    "delete the command's Region",
                    regions.delete(EU_1, &Default::default()),
                )
                .await;
                eventually("the command's Region is gone", PROGRESS, || async {
                    within("read the Region", regions.get_opt(EU_1))
                        .await
                        .is_none()
                        .then_some(())
                })
                .await;
            }
            Step::PrometheusCredentials => {
                // The person's files: a reader token and the CA of their Prometheus.
                let dir = self.checkout(page);
                std::fs::write(dir.join("eu-1-reader.token"), "eu-1-reader-token-7f3a\n")
                    .expect("the token file");
                let ca = &self
                    .world
                    .lab
                    .cluster_info(INSTALL_REGION)
                    .expect("region info")
                    .ca_file;
                std::fs::copy(ca, dir.join("eu-1-prometheus-ca.pem")).expect("the CA file");
            }
            Step::Uninstall => {
                // `helm uninstall` deletes the Deployment, whose pods then stop: the lab's
                // stand-in for them stops here.
                self.stop_pod(INSTALL_HUB);
            }
            _ => {}
        }
    }

    async fn after(&mut self, page: Page, step: Step, ran: &Ran) {
        match step {
            Step::QuickStartController => self.quick_start_controller().await,
            Step::QuickStartRegion => self.quick_start_region(ran).await,
            Step::QuickStartRollout => self.quick_start_rollout(ran).await,
            Step::QuickStartPlugin => {
                self.plugin_was_installed(step);
                let out = ran.all();
                for expected in ["app-config", "r1", "r2", "Complete"] {
                    assert!(out.contains(expected), "{step:?}: {expected}: {out}");
                }
            }
            Step::HelmInstall => self.helm_install().await,
            Step::KustomizeInstall => self.kustomize_install().await,
            Step::RegionAdd => self.region_add(ran).await,
            Step::ByHandInTheRegion => self.by_hand_in_the_region(page).await,
            Step::ByHandInTheHub => self.by_hand_in_the_hub(page).await,
            Step::PrometheusCredentials => self.prometheus_credentials(page).await,
            Step::HubAsRegion => {
                self.assert_calls(step, &[]);
                let region = self.reachable_region(INSTALL_HUB, "hub").await;
                assert_eq!(
                    region.metadata.labels.unwrap_or_default().get(TIER),
                    Some(&"canary".to_owned())
                );
                self.hub_is_bound_as_region(INSTALL_HUB).await;
            }
            Step::PluginInstall => self.plugin_was_installed(step),
            Step::Uninstall => self.uninstall().await,
        }
    }

    async fn install_monitoring_crds(&self, cluster: &str) {
        // The page's "(prometheus-operator)": the operator's CRDs, generated from its API
        // types as its release generates them (tests/install.rs does the same).
        let out = self.root.join(format!("monitoring-crds-{cluster}"));
        let crds = chart::monitoring_crds(&out).expect("controller-gen writes the CRDs");
        for crd in &crds {
            within(
                "apply a monitoring CRD",
                self.world.lab.apply(cluster, User::Admin, crd),
            )
            .await;
        }
    }

    // ---- The quick start.

    async fn quick_start_controller(&mut self) {
        // The image built is the image loaded into the nodes is the image the base runs.
        // (The image itself is built and run by tests/incluster.rs, with podman.)
        let calls = self.take_calls();
        let tag = "configrollout-controller:0.1.0";
        assert_eq!(
            calls,
            [
                vec!["docker", "build", "-t", tag, "."],
                vec!["kind", "load", "docker-image", tag],
            ],
            "the quick start's docker and kind calls"
        );
        assert!(
            repository_root().join("Dockerfile").is_file(),
            "docker build . needs the Dockerfile"
        );
        let client = self.client(QUICK_START_CLUSTER);
        let deployment = self.deployment(QUICK_START_CLUSTER).await;
        let image = deployment
            .spec
            .as_ref()
            .and_then(|spec| spec.template.spec.as_ref())
            .map(|pod| pod.containers[0].image.clone().unwrap_or_default());
        assert_eq!(image.as_deref(), Some(tag), "the base runs the image built");
        // `rollout status` ended: KWOK's fake kubelet made both replicas Ready.
        let status = deployment.status.expect("Deployment status");
        assert_eq!(status.ready_replicas, Some(2), "{status:?}");
        // Every CRD of crds/ is served.
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        for name in crd_names() {
            assert!(
                within("read a CRD", crds.get_opt(&name)).await.is_some(),
                "{name}"
            );
        }
        self.run_pod(QUICK_START_CLUSTER).await;
    }

    async fn quick_start_region(&mut self, ran: &Ran) {
        self.assert_calls(Step::QuickStartRegion, &[]);
        let region = self.reachable_region(QUICK_START_CLUSTER, "hub").await;
        assert!(
            region.spec.kubeconfig_secret_ref.is_none(),
            "the controller's own cluster"
        );
        self.hub_is_bound_as_region(QUICK_START_CLUSTER).await;
        // `kubectl get regions` shows it reachable.
        let line = ran
            .stdout
            .lines()
            .find(|line| line.starts_with("hub "))
            .unwrap_or_else(|| panic!("no row of Region hub: {}", ran.stdout));
        assert!(line.contains("true"), "{}", ran.stdout);
    }

    async fn quick_start_rollout(&mut self, ran: &Ran) {
        self.assert_calls(Step::QuickStartRollout, &[]);
        let client = self.client(QUICK_START_CLUSTER);
        // Between the steps the block printed r1 Complete and its ConfigMap: the first
        // `kubectl wait` waited for r1.
        let row = ran
            .stdout
            .lines()
            .find(|line| line.starts_with("app-config "))
            .unwrap_or_else(|| panic!("no row of app-config: {}", ran.stdout));
        assert!(
            row.contains("Complete") && row.contains("r1"),
            "r1 Complete before the change: {row}"
        );
        assert!(
            ran.stdout.contains("timeout_ms: \"500\""),
            "r1's ConfigMap: {}",
            ran.stdout
        );
        // The second `kubectl wait` waited for r2, not r1's Complete.
        let rollouts: Api<ConfigRollout> = Api::namespaced(client.clone(), "demo");
        let rollout = within("read the rollout", rollouts.get("app-config")).await;
        let status = rollout.status.clone().expect("status");
        assert_eq!(status.revision.as_deref(), Some("r2"), "{status:?}");
        assert!(condition_true(&rollout, "Complete"), "{status:?}");
        assert_eq!(phase_of(&rollout).as_deref(), Some("Complete"));
        let history: Vec<&str> = status.history.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(history, ["r1", "r2"]);
        let maps: Api<ConfigMap> = Api::namespaced(client, "demo");
        let map = within("read the ConfigMap", maps.get("app-config")).await;
        assert_eq!(
            map.data.unwrap_or_default(),
            data(&[("log_level", "info"), ("timeout_ms", "800")]),
            "the ConfigMap holds r2"
        );
    }

    fn plugin_was_installed(&self, step: Step) {
        // A release build of the plugin takes minutes and writes into ~/.cargo/bin: the
        // stand-in records the call, the crate must build a binary of that name, and the
        // plugin the blocks run is this crate's build of the same main.
        self.assert_calls(
            step,
            &[&[
                "cargo",
                "install",
                "--path",
                "plugin",
                "--bin",
                "kubectl-configrollout",
            ]],
        );
        let manifest = std::fs::read_to_string(repository_root().join("plugin/Cargo.toml"))
            .expect("plugin/Cargo.toml");
        assert!(
            manifest.contains("[[bin]]\nname = \"kubectl-configrollout\""),
            "plugin/Cargo.toml builds kubectl-configrollout"
        );
    }

    // ---- The install page.

    async fn helm_install(&mut self) {
        self.assert_calls(Step::HelmInstall, &[]);
        let (releases, listed) = self.helm_list(INSTALL_HUB);
        assert_eq!(releases[0]["name"], chart::RELEASE, "{listed}");
        assert_eq!(releases[0]["status"], "deployed", "{listed}");

        let container = self.container(INSTALL_HUB).await;
        assert_eq!(
            container.image.as_deref(),
            Some("registry.example/configrollout-controller:0.1.0")
        );
        assert!(
            container
                .args
                .unwrap_or_default()
                .contains(&"--prometheus-url=http://prometheus.monitoring:9090".to_owned()),
            "prometheusUrl reaches the controller"
        );
        let client = self.client(INSTALL_HUB);
        self.base_objects_stored(&client).await;
        for (api_version, kind, name) in [
            ("monitoring.coreos.com/v1", "ServiceMonitor", CONTROLLER),
            ("monitoring.coreos.com/v1", "PrometheusRule", CONTROLLER),
            ("v1", "ConfigMap", "configrollout-controller-dashboard"),
        ] {
            assert!(
                stored(&client, api_version, kind, Some(SYSTEM_NAMESPACE), name)
                    .await
                    .is_some(),
                "{kind} {name}"
            );
        }
        self.policies_stored(&client, true).await;
        self.run_pod(INSTALL_HUB).await;
    }

    async fn kustomize_install(&mut self) {
        self.assert_calls(Step::KustomizeInstall, &[]);
        let client = self.client(HUB);
        self.base_objects_stored(&client).await;
        let container = self.container(HUB).await;
        assert_eq!(
            container.image.as_deref(),
            Some("configrollout-controller:0.1.0")
        );
        for file in ["servicemonitor.yaml", "prometheusrule.yaml"] {
            for object in objects_in(&chart::observability_dir().join(file)) {
                assert!(
                    stored_object(&client, &object).await.is_some(),
                    "{file}: {}",
                    chart::object_key(&object)
                );
            }
        }
        self.policies_stored(&client, true).await;
    }

    async fn region_add(&mut self, ran: &Ran) {
        self.assert_calls(Step::RegionAdd, &[]);
        let out = ran.all();
        assert!(
            out.contains("the controller reports Region eu-1 reachable"),
            "the command waited for the controller: {out}"
        );
        let hub = self.client(INSTALL_HUB);
        let secrets: Api<Secret> = Api::namespaced(hub.clone(), SYSTEM_NAMESPACE);
        assert!(
            within("read the Secret", secrets.get_opt("region-eu-1-kubeconfig"))
                .await
                .is_some()
        );
        let region = self.reachable_region(INSTALL_HUB, EU_1).await;
        let value = serde_json::to_value(&region).expect("Region JSON");
        assert_eq!(value["metadata"]["labels"]["tier"], "canary", "{value}");
        assert_eq!(
            value["spec"]["prometheus"]["url"], "https://prometheus.eu-1.example:9090",
            "{value}"
        );
        // The writer's rights in the teams' namespaces only.
        let region_client = self.client(INSTALL_REGION);
        for namespace in ["team-a-config", "team-b-config"] {
            let bindings: Api<RoleBinding> = Api::namespaced(region_client.clone(), namespace);
            let bindings = within("list RoleBindings", bindings.list(&Default::default())).await;
            assert!(
                bindings.items.iter().any(|binding| binding
                    .subjects
                    .iter()
                    .flatten()
                    .any(|subject| subject.name == "configrollout-region-writer")),
                "{namespace}: the writer is bound"
            );
        }
    }

    async fn by_hand_in_the_region(&mut self, page: Page) {
        self.assert_calls(Step::ByHandInTheRegion, &[]);
        let dir = self.checkout(page);
        let info = self
            .world
            .lab
            .cluster_info(INSTALL_REGION)
            .expect("region info");
        assert_eq!(
            std::fs::read(dir.join("eu-1-ca.crt")).expect("eu-1-ca.crt"),
            std::fs::read(&info.ca_file).expect("the region's CA"),
            "eu-1-ca.crt is the region's CA"
        );
        let path = dir.join("eu-1.kubeconfig");
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("eu-1.kubeconfig");
        assert_eq!(kubeconfig.current_context.as_deref(), Some(EU_1));
        let value = serde_json::to_value(&kubeconfig).expect("kubeconfig JSON");
        assert_eq!(value["clusters"][0]["cluster"]["server"], info.url.as_str());
        assert_eq!(
            identity(&path).await,
            "system:serviceaccount:configrollout-system:configrollout-region-writer",
            "eu-1.kubeconfig is the region writer's"
        );
    }

    async fn by_hand_in_the_hub(&mut self, page: Page) {
        self.assert_calls(Step::ByHandInTheHub, &[]);
        let secrets: Api<Secret> = Api::namespaced(self.client(INSTALL_HUB), SYSTEM_NAMESPACE);
        let secret = within("read the Secret", secrets.get("region-eu-1-kubeconfig")).await;
        let held = secret
            .data
            .and_then(|data| data.get("kubeconfig").cloned())
            .expect("key kubeconfig");
        assert_eq!(
            held.0,
            std::fs::read(self.checkout(page).join("eu-1.kubeconfig")).expect("the file")
        );
        // The controller takes the kubeconfig written by hand.
        let region = self.reachable_region(INSTALL_HUB, EU_1).await;
        assert_eq!(
            region.metadata.labels.unwrap_or_default().get("tier"),
            Some(&"canary".to_owned())
        );
    }

    async fn prometheus_credentials(&mut self, page: Page) {
        self.assert_calls(Step::PrometheusCredentials, &[]);
        let dir = self.checkout(page);
        let secrets: Api<Secret> = Api::namespaced(self.client(INSTALL_HUB), SYSTEM_NAMESPACE);
        let secret = within("read the Secret", secrets.get("eu-1-prometheus")).await;
        let data = secret.data.unwrap_or_default();
        for (key, file) in [
            ("token", "eu-1-reader.token"),
            ("ca.crt", "eu-1-prometheus-ca.pem"),
        ] {
            assert_eq!(
                data.get(key).map(|bytes| bytes.0.clone()),
                Some(std::fs::read(dir.join(file)).expect("the file")),
                "{key}"
            );
        }
    }

    async fn uninstall(&mut self) {
        self.assert_calls(Step::Uninstall, &[]);
        let client = self.client(INSTALL_HUB);
        let (releases, _) = self.helm_list(INSTALL_HUB);
        assert_eq!(releases, Value::Array(Vec::new()), "no release left");
        for (kind, name) in [("Deployment", CONTROLLER), ("ServiceAccount", CONTROLLER)] {
            let api_version = if kind == "Deployment" {
                "apps/v1"
            } else {
                "v1"
            };
            assert!(
                stored(&client, api_version, kind, Some(SYSTEM_NAMESPACE), name)
                    .await
                    .is_none(),
                "{kind} {name} removed"
            );
        }
        for kind in ["ServiceMonitor", "PrometheusRule"] {
            assert!(
                stored(
                    &client,
                    "monitoring.coreos.com/v1",
                    kind,
                    Some(SYSTEM_NAMESPACE),
                    CONTROLLER
                )
                .await
                .is_none(),
                "{kind} removed"
            );
        }
        self.policies_stored(&client, false).await;
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        for name in crd_names() {
            assert!(
                within("read a CRD", crds.get_opt(&name)).await.is_none(),
                "{name} deleted"
            );
        }
        // "Nothing configrollout wrote in a region is removed by removing configrollout."
        let accounts: Api<ServiceAccount> =
            Api::namespaced(self.client(INSTALL_REGION), SYSTEM_NAMESPACE);
        assert!(
            within(
                "read the writer",
                accounts.get_opt("configrollout-region-writer")
            )
            .await
            .is_some(),
            "the region's writer stays until removed there"
        );
    }

    // ---- Shared checks.

    /// `helm list` of `configrollout-system` in `cluster`, as JSON and as printed.
    fn helm_list(&self, cluster: &str) -> (Value, String) {
        let kubeconfig = self
            .world
            .lab
            .kubeconfig(cluster, User::Admin)
            .expect("kubeconfig");
        let args: Vec<std::ffi::OsString> = vec![
            "list".into(),
            "--namespace".into(),
            SYSTEM_NAMESPACE.into(),
            "-o".into(),
            "json".into(),
            "--kubeconfig".into(),
            kubeconfig.into_os_string(),
        ];
        let listed = self.helm.run(args).expect("helm list");
        let releases = serde_json::from_str(&listed).expect("helm list JSON");
        (releases, listed)
    }

    async fn deployment(&self, cluster: &str) -> Deployment {
        let deployments: Api<Deployment> = Api::namespaced(self.client(cluster), SYSTEM_NAMESPACE);
        within("read the Deployment", deployments.get(CONTROLLER)).await
    }

    async fn container(&self, cluster: &str) -> k8s_openapi::api::core::v1::Container {
        self.deployment(cluster)
            .await
            .spec
            .and_then(|spec| spec.template.spec)
            .and_then(|pod| pod.containers.into_iter().find(|c| c.name == "controller"))
            .expect("the controller container")
    }

    /// Every object of `deploy/` (the kustomize base, which the chart renders too).
    async fn base_objects_stored(&self, client: &Client) {
        let objects = chart::kustomize_objects().expect("the kustomize base");
        for (key, object) in &objects {
            assert!(stored_object(client, object).await.is_some(), "{key}");
        }
    }

    /// Whether every object of `policies/` is stored (`true`) or none is (`false`).
    async fn policies_stored(&self, client: &Client, expected: bool) {
        let mut files: Vec<PathBuf> = std::fs::read_dir(repository_root().join("policies"))
            .expect("policies/")
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        assert!(!files.is_empty());
        for file in files {
            for object in objects_in(&file) {
                assert_eq!(
                    stored_object(client, &object).await.is_some(),
                    expected,
                    "{}: {}",
                    file.display(),
                    chart::object_key(&object)
                );
            }
        }
    }

    /// The Region `name` of `cluster`, once the controller reports it reachable.
    async fn reachable_region(&self, cluster: &str, name: &str) -> Region {
        let regions: Api<Region> = Api::all(self.client(cluster));
        eventually(&format!("Region {name} reachable"), PROGRESS, || async {
            let region = within("read the Region", regions.get_opt(name)).await?;
            let value = serde_json::to_value(&region).ok()?;
            let ready = value["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (ready && value["status"]["reachable"] == true).then_some(region)
        })
        .await
    }

    async fn hub_is_bound_as_region(&self, cluster: &str) {
        let bindings: Api<ClusterRoleBinding> = Api::all(self.client(cluster));
        let binding = within(
            "read the binding",
            bindings.get("configrollout-hub-as-region"),
        )
        .await;
        assert_eq!(binding.role_ref.name, "configrollout-region-writer");
        let subject = &binding.subjects.unwrap_or_default()[0];
        assert_eq!(
            (subject.name.as_str(), subject.namespace.as_deref()),
            (CONTROLLER, Some(SYSTEM_NAMESPACE))
        );
    }

    // ---- The controller's pod.

    /// Runs the lab's controller as a pod of the Deployment stored in `cluster`: its args
    /// (the probe address moved to a free loopback port) and env, as its ServiceAccount
    /// (a TokenRequest token), until it leads.
    async fn run_pod(&mut self, cluster: &'static str) {
        let deployment = self.deployment(cluster).await;
        let pod = deployment
            .spec
            .and_then(|spec| spec.template.spec)
            .expect("pod spec");
        let account = pod.service_account_name.clone().expect("a ServiceAccount");
        let container = pod
            .containers
            .into_iter()
            .find(|c| c.name == "controller")
            .expect("the controller container");

        let token = mint_token(self.client(cluster), SYSTEM_NAMESPACE, &account).await;
        let info = self.world.lab.cluster_info(cluster).expect("cluster info");
        let kubeconfig = self.root.join(format!("pod-{cluster}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: {cluster}\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: {account}\n  user:\n    token: {token}\ncontexts:\n- name: pod\n  context: {{cluster: {cluster}, user: {account}}}\ncurrent-context: pod\n",
                info.url,
                info.ca_file.display()
            ),
        )
        .expect("the pod's kubeconfig");
        assert_eq!(
            identity(&kubeconfig).await,
            format!("system:serviceaccount:{SYSTEM_NAMESPACE}:{account}")
        );

        let name = format!("{CONTROLLER}-7d4b9c-{cluster}");
        let probe_addr = free_local_addr();
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        for arg in container.args.clone().unwrap_or_default() {
            if arg.starts_with("--probe-addr=") {
                args.push(format!("--probe-addr={probe_addr}").into());
            } else {
                args.push(arg.into());
            }
        }
        let mut envs: Vec<(String, std::ffi::OsString)> =
            vec![("KUBECONFIG".into(), kubeconfig.into_os_string())];
        for var in container.env.clone().unwrap_or_default() {
            let value = match (&var.value, &var.value_from) {
                (Some(value), _) => value.clone(),
                (None, Some(from))
                    if from.field_ref.as_ref().map(|f| f.field_path.as_str())
                        == Some("metadata.name") =>
                {
                    name.clone()
                }
                _ => panic!("an env the lab cannot give a pod: {var:?}"),
            };
            envs.push((var.name.clone(), value.into()));
        }
        let child = self
            .world
            .lab
            .spawn(
                &format!("controller-{cluster}"),
                &lab_controller_binary(),
                &args,
                &envs,
            )
            .expect("the controller starts");

        let http = reqwest::Client::builder()
            .timeout(CALL)
            .build()
            .expect("http client");
        let ready = format!("http://{probe_addr}/readyz");
        eventually("the pod's /readyz", PROGRESS, || async {
            let response = http.get(&ready).send().await.ok()?;
            (response.status() == 200).then_some(())
        })
        .await;
        let leases: Api<Lease> = Api::namespaced(self.client(cluster), SYSTEM_NAMESPACE);
        eventually("the pod holds the Lease", PROGRESS, || async {
            let lease = leases.get_opt(CONTROLLER).await.ok()??;
            (lease.spec?.holder_identity.as_deref() == Some(name.as_str())).then_some(())
        })
        .await;
        eprintln!("---- the controller runs as {name} in {cluster}");
        self.pods.insert(cluster, Pod { name, child });
    }

    /// Stops the pod of `cluster`; its log shows no call its ServiceAccount was refused.
    fn stop_pod(&mut self, cluster: &str) {
        let pod = self
            .pods
            .remove(cluster)
            .unwrap_or_else(|| panic!("no controller runs in {cluster}"));
        let log = pod.child.log();
        pod.child.stop();
        let forbidden: Vec<&str> = log
            .lines()
            .filter(|line| line.to_lowercase().contains("forbidden"))
            .collect();
        assert!(
            forbidden.is_empty(),
            "{} ({cluster}): calls its ServiceAccount may not make:\n{}",
            pod.name,
            forbidden.join("\n")
        );
    }

    fn stop_all(&mut self) {
        let clusters: Vec<&'static str> = self.pods.keys().copied().collect();
        for cluster in clusters {
            self.stop_pod(cluster);
        }
    }
}

const TIER: &str = "configrollout.dev/tier";

/// The names of the CRDs of `crds/`.
fn crd_names() -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(repository_root().join("crds")).expect("crds/") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            for object in objects_in(&path) {
                names.push(
                    object["metadata"]["name"]
                        .as_str()
                        .expect("a name")
                        .to_owned(),
                );
            }
        }
    }
    assert!(!names.is_empty());
    names
}

/// The YAML documents of a file.
fn objects_in(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    chart::documents(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The object `kind/name` of `api_version` as `client`'s cluster stores it.
async fn stored(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> Option<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = within(
        &format!("discover {api_version} {kind}"),
        discovery::pinned_kind(client, &gvk),
    )
    .await;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            Api::namespaced_with(client.clone(), namespace.unwrap_or("default"), &resource)
        }
    };
    within(&format!("read {kind} {name}"), api.get_opt(name)).await
}

/// A manifest's object as the cluster stores it.
async fn stored_object(client: &Client, object: &Value) -> Option<DynamicObject> {
    stored(
        client,
        object["apiVersion"].as_str().expect("apiVersion"),
        object["kind"].as_str().expect("kind"),
        object["metadata"]["namespace"].as_str(),
        object["metadata"]["name"].as_str().expect("a name"),
    )
    .await
}

/// Who the kubeconfig at `path` is, as its cluster says (SelfSubjectReview).
async fn identity(path: &Path) -> String {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("a kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a client config");
    let client = Client::try_from(config).expect("a client");
    let reviews: Api<SelfSubjectReview> = Api::all(client);
    within(
        "SelfSubjectReview",
        reviews.create(&PostParams::default(), &SelfSubjectReview::default()),
    )
    .await
    .status
    .and_then(|status| status.user_info)
    .and_then(|user| user.username)
    .expect("a user name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_quick_start_and_install_commands_run_on_the_lab() {
    let planned = plan().unwrap_or_else(|problems| panic!("{}", problems.join("\n")));
    let started = Instant::now();
    let world = World::start(LabOptions {
        regions: 3,
        unregistered_regions: vec![
            QUICK_START_CLUSTER.to_owned(),
            INSTALL_HUB.to_owned(),
            INSTALL_REGION.to_owned(),
        ],
        // `kubectl rollout status` in the quick start needs Ready pods.
        workload_controllers: true,
        ..LabOptions::default()
    })
    .await;
    eprintln!("---- lab up in {:.1} s", started.elapsed().as_secs_f64());
    let mut docs = Docs::new(&world);
    let mut not_run = Vec::new();
    for (page, block, expected) in &planned {
        let Some(expected) = expected else {
            let reason = block.not_run.clone().unwrap_or_default();
            eprintln!("---- {}: not run on the lab: {reason}", block.place());
            not_run.push(format!("{}: {reason}", block.place()));
            continue;
        };
        docs.before(*page, expected.step).await;
        let ran = docs.run(*page, block, expected.cluster).await;
        docs.after(*page, expected.step, &ran).await;
    }
    docs.stop_all();
    assert!(docs.take_calls().is_empty());
    eprintln!(
        "---- {} blocks run, {} not run{} in {:.0} s",
        planned.len() - not_run.len(),
        not_run.len(),
        not_run
            .iter()
            .map(|line| format!("\n  {line}"))
            .collect::<String>(),
        started.elapsed().as_secs_f64()
    );
}
