//! The house rule the crate graph cannot state alone. `configrollout-api` and
//! `configrollout-core` depend on no client runtime (their manifests, checked below), but a
//! workspace build unifies features: `kube::Client` compiles in them whenever the
//! controller is built alongside, and `std::net` and `std::fs` always do. So their
//! sources are also read for what a pure layer must never name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The pure layers, by their directory in the workspace.
const PURE_CRATES: &[&str] = &["api", "core"];
/// What a pure file may not mention: network clients, the filesystem, a clock of its own.
const FORBIDDEN: &[&str] = &[
    "kube::Api",
    "kube::Client",
    "kube::api::Api",
    "kube::runtime",
    "reqwest",
    "hyper",
    "tokio",
    "std::net",
    "std::fs",
    "Utc::now",
    "SystemTime::now",
    "Instant::now",
];
/// The one place a pure crate reads a clock: `SystemClock`, the production side of the
/// `PhysicalClock` seam every decision takes its time through.
const ALLOWED: &[(&str, &str)] = &[("core/src/crdt/hlc.rs", "SystemTime::now")];
/// Crates a pure layer may not depend on, directly or through a kube feature.
const FORBIDDEN_DEPENDENCIES: &[&str] = &[
    "tokio",
    "hyper",
    "reqwest",
    "futures",
    "tower",
    "configrollout\"",
    "\"client\"",
    "\"runtime\"",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn pure_crates_call_no_network_touch_no_file_and_read_no_clock() {
    let mut checked = 0;
    let mut offences = Vec::new();
    for krate in PURE_CRATES {
        let src = workspace().join(krate).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let relative = file
                .strip_prefix(workspace())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            // The CRD printer writes `crds/`: a binary of the API crate, not its library.
            if relative.contains("/bin/") {
                continue;
            }
            checked += 1;
            let text = std::fs::read_to_string(&file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (number, line) in code.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for forbidden in FORBIDDEN {
                    if code.contains(forbidden)
                        && !ALLOWED.contains(&(relative.as_str(), *forbidden))
                    {
                        offences.push(format!("{relative}:{}: {forbidden}", number + 1));
                    }
                }
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} files checked: are the pure crates still api/src and core/src?"
    );
    assert!(
        offences.is_empty(),
        "pure crates reach the network, the disk or a clock:\n{}",
        offences.join("\n")
    );
}

#[test]
fn pure_crates_depend_on_no_runtime() {
    for krate in PURE_CRATES {
        let manifest = std::fs::read_to_string(workspace().join(krate).join("Cargo.toml")).unwrap();
        let dependencies = manifest
            .split("[dependencies]")
            .nth(1)
            .expect("a [dependencies] table")
            .split("\n[")
            .next()
            .unwrap_or_default();
        for line in dependencies.lines() {
            let line = line.split('#').next().unwrap_or_default();
            for forbidden in FORBIDDEN_DEPENDENCIES {
                assert!(
                    !line.contains(forbidden),
                    "{krate}/Cargo.toml depends on {forbidden}: {line}"
                );
            }
        }
    }
}

/// The crates whose modules may not import each other in a circle.
const CRATES: &[&str] = &["api", "core", "clusters", "controller", "plugin"];

/// A module's path within its crate, from its file (`a/b.rs` and `a/b/mod.rs` are `a::b`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
        path.pop();
    }
    path
}

fn ident_at(text: &str, at: usize) -> Option<&str> {
    let rest = &text[at..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0 && !rest.starts_with(|c: char| c.is_ascii_digit())).then(|| &rest[..end])
}

/// Every `crate::a::b` and `super::a` path in `text`, with `{a, b::c}` groups expanded to
/// their first segments.
fn imported_paths(text: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for root in ["crate::", "super::"] {
        for (start, _) in text.match_indices(root) {
            let boundary = text[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'));
            if !boundary {
                continue;
            }
            let mut segments = vec![root.trim_end_matches(':').to_owned()];
            let mut at = start + root.len();
            while let Some(ident) = ident_at(text, at) {
                segments.push(ident.to_owned());
                at += ident.len();
                if text[at..].starts_with("::") {
                    at += 2;
                } else {
                    break;
                }
            }
            if text[at..].starts_with('{') {
                let mut depth = 0;
                let mut item_start = at + 1;
                for (offset, c) in text[at..].char_indices() {
                    let here = at + offset;
                    match c {
                        '{' => depth += 1,
                        '}' | ',' if depth == 1 => {
                            let item = text[item_start..here].trim();
                            let mut grouped = segments.clone();
                            grouped.extend(
                                item.split("::")
                                    .map(|part| part.split_whitespace().next().unwrap_or(""))
                                    .take_while(|part| ident_at(part, 0) == Some(*part))
                                    .map(str::to_owned),
                            );
                            paths.push(grouped);
                            item_start = here + 1;
                            if c == '}' {
                                break;
                            }
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
            } else {
                paths.push(segments);
            }
        }
    }
    paths
}

/// Which sibling modules each module imports, by module path.
fn module_imports(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|file| {
        !file.ends_with("tests.rs") && !file.strip_prefix(src).unwrap().starts_with("bin")
    });
    let modules: BTreeMap<Vec<String>, &PathBuf> = files
        .iter()
        .map(|file| (module_path(src, file), file))
        .collect();
    let mut imports = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or_default()
            .lines()
            .map(|line| line.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let mut targets = BTreeSet::new();
        for path in imported_paths(&code) {
            let (mut base, rest) = match path[0].as_str() {
                "crate" => (Vec::new(), &path[1..]),
                _ => {
                    let mut base = module.clone();
                    base.pop();
                    let mut rest = &path[1..];
                    while rest.first().map(String::as_str) == Some("super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    (base, rest)
                }
            };
            for segment in rest {
                base.push(segment.clone());
                if !modules.contains_key(&base) {
                    base.pop();
                    break;
                }
            }
            // A module's own ancestors are where it is declared, not a sibling it uses.
            if modules.contains_key(&base) && !module.starts_with(&base) {
                targets.insert(base);
            }
        }
        imports.insert(module.clone(), targets);
    }
    imports
}

/// A circle through `start`, if one of its imports leads back to it.
fn circle_through(
    imports: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    start: &Vec<String>,
) -> Option<Vec<String>> {
    let mut stack = vec![(start.clone(), vec![start.join("::")])];
    let mut seen = BTreeSet::new();
    while let Some((module, trail)) = stack.pop() {
        for next in imports.get(&module).into_iter().flatten() {
            if next == start {
                let mut circle = trail.clone();
                circle.push(start.join("::"));
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = trail.clone();
                longer.push(next.join("::"));
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut circles = Vec::new();
    let mut modules = 0;
    for krate in CRATES {
        let imports = module_imports(&workspace().join(krate).join("src"));
        modules += imports.len();
        for module in imports.keys() {
            if let Some(circle) = circle_through(&imports, module) {
                circles.push(format!("{krate}: {}", circle.join(" -> ")));
            }
        }
    }
    assert!(modules > 100, "only {modules} modules read");
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn a_circle_is_found_through_grouped_and_super_imports() {
    let paths = imported_paths("use super::{tenancy::Grant, validate};\nuse crate::a::b::C;");
    assert!(paths.contains(&vec!["super".into(), "tenancy".into(), "Grant".into()]));
    assert!(paths.contains(&vec!["super".into(), "validate".into()]));
    assert!(paths.contains(&vec!["crate".into(), "a".into(), "b".into(), "C".into()]));
    let imports = BTreeMap::from([
        (vec!["a".to_owned()], BTreeSet::from([vec!["b".to_owned()]])),
        (vec!["b".to_owned()], BTreeSet::from([vec!["a".to_owned()]])),
    ]);
    assert_eq!(
        circle_through(&imports, &vec!["a".to_owned()]),
        Some(vec!["a".to_owned(), "b".to_owned(), "a".to_owned()])
    );
}
