//! The house rule of `controller/README.md`: `api`, `crdt`, `engine` and `gates` (but
//! `gates/prometheus.rs`) are pure. They name no network client and import none of the
//! modules that call the network, so a decision can always be tested without one.

use std::path::{Path, PathBuf};

const PURE: &[&str] = &["api", "crdt", "engine", "gates"];
/// The one file of a pure module that talks to a backend, behind the gate provider seam.
const ALLOWED_IO: &[&str] = &["gates/prometheus.rs"];
/// What a pure file may not mention: network clients and the modules that hold them.
const FORBIDDEN: &[&str] = &[
    "kube::Api",
    "kube::Client",
    "kube::api::Api",
    "reqwest",
    "hyper",
    "tokio::net",
    "std::net",
    "std::fs",
    "crate::reconcile",
    "crate::regions",
    "crate::leader",
    "crate::telemetry",
    "crate::app",
    "crate::cli",
];

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
fn pure_modules_call_no_network_and_import_no_module_that_does() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut checked = 0;
    let mut offences = Vec::new();
    for module in PURE {
        let mut files = Vec::new();
        rust_files(&src.join(module), &mut files);
        for file in files {
            let relative = file
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if ALLOWED_IO.contains(&relative.as_str()) {
                continue;
            }
            checked += 1;
            let text = std::fs::read_to_string(&file).unwrap();
            for (number, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for forbidden in FORBIDDEN {
                    if code.contains(forbidden) {
                        offences.push(format!("{relative}:{}: {forbidden}", number + 1));
                    }
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} files checked: is the layout still src/<module>/?"
    );
    assert!(
        offences.is_empty(),
        "pure modules reach the network:\n{}",
        offences.join("\n")
    );
}
