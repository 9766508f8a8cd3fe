//! `docs/reference/`, generated from the code (`make docs`, `src/bin/docs-reference.rs`):
//! the CRDs' fields, condition types and reasons, labels and annotations, the
//! controller's flags, the plugin's commands, the metrics and the chart's values.
//! `tests/docs.rs` regenerates them in memory and fails when the committed pages differ.

mod annotations;
mod cli;
pub mod conditions;
mod crds;
mod metrics;
pub mod source;
mod values;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Where the generated pages live, from the repository's root.
pub const REFERENCE_DIR: &str = "docs/reference";

/// One generated page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Its path under [`REFERENCE_DIR`].
    pub path: String,
    /// Its Markdown.
    pub content: String,
}

/// The first lines of every generated page.
fn generated_header(title: &str) -> String {
    format!(
        "# {title}\n\n<!-- Generated from the code by `make docs` (e2e/src/bin/docs-reference.rs): \
         do not edit. e2e/tests/docs.rs fails when this page is stale. -->\n\n"
    )
}

/// `text` for a Markdown table cell: one line, `|` escaped, and `<` outside code spans
/// written as an entity so that `<target>` is not taken for HTML.
fn cell(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line
        .split('`')
        .enumerate()
        .map(|(index, part)| {
            if index % 2 == 0 {
                part.replace('<', "&lt;")
            } else {
                part.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("`")
        .replace('|', "\\|")
}

/// Every page of [`REFERENCE_DIR`], generated from the code of the repository at `root`.
pub fn reference_pages(root: &Path) -> Result<Vec<Page>, String> {
    let (crd_pages, phases) = crds::pages()?;
    let mut pages = vec![
        conditions::page(root, &phases)?,
        annotations::page(root)?,
        cli::controller_page(),
        cli::plugin_page(),
        metrics::page(),
        values::page(root)?,
    ];
    pages.extend(crd_pages);
    for page in &mut pages {
        if !page.content.ends_with('\n') {
            page.content.push('\n');
        }
        while page.content.ends_with("\n\n") {
            page.content.pop();
        }
    }
    pages.insert(0, index(&pages));
    Ok(pages)
}

fn index(pages: &[Page]) -> Page {
    let mut out = generated_header("Reference");
    out.push_str(
        "Generated from the code by `make docs`; `e2e/tests/docs.rs` (run by `make test`) \
         fails when a page differs from what the code says. The guides are one level up: \
         [docs](../README.md).\n\n| page | what |\n|---|---|\n",
    );
    let what = |path: &str| -> String {
        match path {
            "conditions.md" => {
                "condition types, phases, and every condition and Event reason".to_owned()
            }
            "annotations.md" => "`configrollout.dev/` labels and annotations".to_owned(),
            "controller-flags.md" => {
                "`configrollout-controller` flags and their environment variables".to_owned()
            }
            "plugin.md" => "`kubectl configrollout` commands and flags".to_owned(),
            "metrics.md" => "the controller's Prometheus metrics".to_owned(),
            "chart-values.md" => "the Helm chart's values".to_owned(),
            other => other
                .strip_prefix("crds/")
                .and_then(|file| file.strip_suffix(".md"))
                .map(|kind| format!("CRD fields: {kind}"))
                .unwrap_or_default(),
        }
    };
    for page in pages {
        let title = page
            .content
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("# "))
            .unwrap_or(&page.path);
        let _ = writeln!(out, "| [{title}]({}) | {} |", page.path, what(&page.path));
    }
    Page {
        path: "README.md".to_owned(),
        content: out,
    }
}

/// The pages as `(absolute path, content)` under `root`.
pub fn files(root: &Path, pages: &[Page]) -> Vec<(PathBuf, String)> {
    pages
        .iter()
        .map(|page| {
            (
                root.join(REFERENCE_DIR).join(&page.path),
                page.content.clone(),
            )
        })
        .collect()
}

/// The Markdown files under [`REFERENCE_DIR`] now, as paths under it.
pub fn committed(root: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                out.push(
                    path.strip_prefix(base)
                        .unwrap_or(&path)
                        .to_string_lossy()
                        .replace('\\', "/"),
                );
            }
        }
    }
    let base = root.join(REFERENCE_DIR);
    let mut out = Vec::new();
    walk(&base, &base, &mut out);
    out.sort();
    out
}

/// How the committed pages differ from `pages`: each page missing or different, and each
/// Markdown file that no page is. Empty when they agree.
pub fn stale(root: &Path, pages: &[Page]) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, content) in files(root, pages) {
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == content => {}
            Ok(_) => problems.push(format!("{} differs from the code", path.display())),
            Err(error) => problems.push(format!("{} cannot be read: {error}", path.display())),
        }
    }
    for file in committed(root) {
        if !pages.iter().any(|page| page.path == file) {
            problems.push(format!("{REFERENCE_DIR}/{file} is generated by nothing"));
        }
    }
    problems
}
