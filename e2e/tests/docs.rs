//! The documentation, without a lab: `docs/reference/` is what the code generates now
//! (`make docs`), every condition reason the code sets is catalogued and has a
//! troubleshooting entry, every alert a runbook entry, every relative link of the guides
//! resolves (file and heading), and the README keeps the newcomer's two commands.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use configrollout_e2e::docs::{self, conditions};
use configrollout_e2e::repository_root;

#[test]
fn the_reference_is_what_the_code_generates() {
    let root = repository_root();
    let pages = docs::reference_pages(&root).expect("the reference pages generate");
    let stale = docs::stale(&root, &pages);
    assert!(
        stale.is_empty(),
        "docs/reference is stale: run `make docs` and commit the result:\n  {}",
        stale.join("\n  ")
    );
}

fn phases(root: &Path) -> Vec<String> {
    let page = std::fs::read_to_string(root.join("docs/reference/conditions.md"))
        .expect("docs/reference/conditions.md (run `make docs`)");
    let line = page
        .lines()
        .find(|line| line.starts_with("`status.phase` is one of "))
        .expect("the phases line");
    let list = line
        .trim_start_matches("`status.phase` is one of ")
        .split(". ")
        .next()
        .unwrap_or_default();
    list.split(", ")
        .map(|phase| phase.trim_matches('`').to_owned())
        .collect()
}

#[test]
fn every_reason_the_code_sets_is_catalogued() {
    let root = repository_root();
    let problems = conditions::unlisted_reasons(&root, &phases(&root)).expect("sources read");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn read(root: &Path, path: &str) -> String {
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// The section of `text` under the heading `title` (any level), to the next heading of
/// the same or a higher level.
fn section<'a>(text: &'a str, title: &str) -> &'a str {
    let mut level = 0;
    let mut start = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes > 0 && line[hashes..].starts_with(' ') {
            if let Some(start) = start {
                if hashes <= level {
                    return &text[start..offset];
                }
            } else if line[hashes..].trim() == title {
                level = hashes;
                start = Some(offset);
            }
        }
        offset += line.len();
    }
    start.map_or("", |start| &text[start..])
}

#[test]
fn operations_has_an_entry_for_every_condition_reason_and_alert() {
    let root = repository_root();
    let operations = read(&root, "docs/operations.md");
    let troubleshooting = section(&operations, "Troubleshooting by condition reason");
    assert!(
        !troubleshooting.is_empty(),
        "docs/operations.md has no \"Troubleshooting by condition reason\" section"
    );
    let missing: Vec<&str> = conditions::condition_reasons()
        .map(|reason| reason.name)
        .filter(|name| !troubleshooting.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operations.md, \"Troubleshooting by condition reason\", says nothing of {missing:?}"
    );

    let rules = read(&root, "deploy/observability/configrollout-rules.yaml");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
        .collect();
    assert!(!alerts.is_empty(), "no alert in configrollout-rules.yaml");
    let headings = anchors(&operations);
    let missing: Vec<&str> = alerts
        .iter()
        .copied()
        .filter(|alert| !headings.contains(&alert.to_lowercase()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operations.md has no runbook heading (### AlertName) for {missing:?}"
    );
}

#[test]
fn the_readme_keeps_the_newcomers_commands() {
    let root = repository_root();
    let readme = read(&root, "README.md");
    let makefile = read(&root, "Makefile");
    for target in ["demo", "test", "docs"] {
        assert!(
            readme.contains(&format!("`make {target}`")),
            "README.md does not show `make {target}`"
        );
        assert!(
            makefile
                .lines()
                .any(|line| line.starts_with(&format!("{target}:"))),
            "the Makefile has no {target} target"
        );
    }
}

/// GitHub's anchor of a heading: lower case, punctuation dropped but `-` and `_`, spaces
/// as `-`; inline code and links read as their text.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // Links: [text](url) -> text.
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](") else {
            break;
        };
        let Some(end) = rest[open + close..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + close]);
        rest = &rest[open + close + end + 1..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor of a Markdown text: its headings' (numbered as GitHub numbers repeats) and
/// explicit `<a id="...">`/`<a name="...">`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let mut candidate = base.clone();
            let mut n = 0;
            while out.contains(&candidate) {
                n += 1;
                candidate = format!("{base}-{n}");
            }
            out.insert(candidate);
        }
        for marker in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(marker) {
                let after = &rest[at + marker.len()..];
                if let Some(end) = after.find('"') {
                    out.insert(after[..end].to_owned());
                }
                rest = after;
            }
        }
    }
    out
}

/// The relative link targets of a Markdown text, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop inline code spans.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(index, _)| index % 2 == 0)
            .map(|(_, part)| part)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            if !target.contains("://") && !target.starts_with("mailto:") && !target.is_empty() {
                out.push(target.to_owned());
            }
            rest = &after[end..];
        }
    }
    out
}

fn markdown_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![
        root.join("README.md"),
        root.join("examples/README.md"),
        root.join("policies/README.md"),
        root.join("SECURITY.md"),
    ];
    walk(&root.join("docs"), &mut files);
    files.sort();
    files
}

#[test]
fn every_relative_link_of_the_guides_resolves() {
    let root = repository_root();
    let mut broken = Vec::new();
    for file in markdown_files(&root) {
        let text = std::fs::read_to_string(&file).expect("read");
        let dir = file.parent().expect("a file has a directory");
        for target in links(&text) {
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            if !resolved.exists() {
                broken.push(format!(
                    "{}: {target}: no such file",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                ));
                continue;
            }
            if let Some(anchor) = anchor
                && resolved.extension().is_some_and(|ext| ext == "md")
            {
                let target_text = std::fs::read_to_string(&resolved).expect("read");
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!(
                        "{}: {target}: no heading with that anchor",
                        file.strip_prefix(&root).unwrap_or(&file).display()
                    ));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug(" Sharding: more than one writing replica"),
        "sharding-more-than-one-writing-replica"
    );
    assert_eq!(
        slug(" `kubectl configrollout` and the [dashboard](x.md)"),
        "kubectl-configrollout-and-the-dashboard"
    );
    assert_eq!(
        slug(" A region's state fails its MAC"),
        "a-regions-state-fails-its-mac"
    );
    let anchors = anchors("# A\n## A\n```\n# B\n```\n<a id=\"x\"></a>\n");
    assert!(anchors.contains("a") && anchors.contains("a-1") && anchors.contains("x"));
    assert!(!anchors.contains("b"));
}
