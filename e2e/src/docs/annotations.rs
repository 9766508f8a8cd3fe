//! `docs/reference/annotations.md`: every `configrollout.dev/` label and annotation key the
//! code names as a constant (with the constant's doc comment), and the keys the shipped
//! admission policies read that no constant names.

use std::fmt::Write as _;
use std::path::Path;

use super::source;
use super::{Page, cell, generated_header};

/// The crates whose constants are read. Test aids (`fault_injection.rs`) are left out.
const DIRS: [&str; 5] = [
    "api/src",
    "core/src",
    "clusters/src",
    "controller/src",
    "plugin/src",
];
const SKIPPED_FILES: [&str; 1] = ["fault_injection.rs"];
const PREFIX: &str = "configrollout.dev/";

struct Key {
    key: String,
    constant: String,
    file: String,
    doc: String,
}

fn is_version(key: &str) -> bool {
    key.strip_prefix(PREFIX).is_some_and(|rest| {
        rest.starts_with('v') && rest[1..].starts_with(|c: char| c.is_ascii_digit())
    })
}

/// The page.
pub fn page(root: &Path) -> Result<Page, String> {
    let mut keys: Vec<Key> = Vec::new();
    for dir in DIRS {
        for file in source::sources(root, dir)? {
            if SKIPPED_FILES
                .iter()
                .any(|skipped| file.path.ends_with(skipped))
            {
                continue;
            }
            for constant in source::str_consts(&file.text) {
                if !constant.public
                    || !constant.value.starts_with(PREFIX)
                    || is_version(&constant.value)
                {
                    continue;
                }
                keys.push(Key {
                    key: constant.value,
                    constant: constant.name,
                    file: file.path.clone(),
                    doc: constant.doc,
                });
            }
        }
    }
    keys.sort_by(|a, b| a.key.cmp(&b.key).then(a.file.cmp(&b.file)));
    // Keys only the admission policies name.
    let mut policy_keys: Vec<(String, Vec<String>)> = Vec::new();
    // `policies/` and `policies/mutating/` (the MutatingAdmissionPolicies, 1.36+).
    let mut files: Vec<(String, std::path::PathBuf)> = Vec::new();
    for directory in ["policies", "policies/mutating"] {
        let path = root.join(directory);
        let found = std::fs::read_dir(&path)
            .map_err(|error| format!("read {}: {error}", path.display()))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .map(|file| {
                let name = format!(
                    "{directory}/{}",
                    file.file_name().unwrap_or_default().to_string_lossy()
                );
                (name, file)
            });
        files.extend(found);
    }
    files.sort();
    for (name, file) in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|error| format!("read {}: {error}", file.display()))?;
        let mut rest = text.as_str();
        while let Some(at) = rest.find(PREFIX) {
            let after = &rest[at + PREFIX.len()..];
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(after.len());
            let key = format!("{PREFIX}{}", &after[..end]);
            rest = &after[end..];
            if is_version(&key) || keys.iter().any(|known| known.key == key) {
                continue;
            }
            match policy_keys.iter_mut().find(|(known, _)| *known == key) {
                Some((_, files)) => {
                    if !files.contains(&name) {
                        files.push(name.clone());
                    }
                }
                None => policy_keys.push((key, vec![name.clone()])),
            }
        }
    }
    policy_keys.sort();

    let mut out = generated_header("Labels and annotations");
    out.push_str(
        "Every `configrollout.dev/` key the code names, from the public constants of \
         `api/src`, `core/src`, `clusters/src`, `controller/src` and `plugin/src` and their \
         doc comments. Keys a platform admin sets on a team's hub Namespace are the grant \
         ([multi-team platforms](../features/multi-team.md)); keys the controller or the \
         apiserver stamps are for reading, never for setting by hand.\n\n\
         | key | constant | defined in | what |\n|---|---|---|---|\n",
    );
    for key in &keys {
        let _ = writeln!(
            out,
            "| `{}` | `{}` | `{}` | {} |",
            key.key,
            key.constant,
            key.file,
            cell(&key.doc)
        );
    }
    if !policy_keys.is_empty() {
        out.push_str(
            "\nKeys only the shipped admission policies (`policies/`) read:\n\n\
             | key | read by |\n|---|---|\n",
        );
        for (key, files) in &policy_keys {
            let _ = writeln!(
                out,
                "| `{key}` | {} |",
                files
                    .iter()
                    .map(|file| format!("`{file}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    Ok(Page {
        path: "annotations.md".to_owned(),
        content: out,
    })
}
