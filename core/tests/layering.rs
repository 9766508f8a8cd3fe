//! The house rule the crate graph cannot state alone. `configrollout-api` and
//! `configrollout-core` depend on no client runtime (their manifests, checked below), but a
//! workspace build unifies features: `kube::Client` compiles in them whenever the
//! controller is built alongside, and `std::net` and `std::fs` always do. So their
//! sources are also read for what a pure layer must never name.

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
