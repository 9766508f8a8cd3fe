//! Writes the files generated from the Helm chart (`make chart`): the chart's copy of
//! `crds/` and `deploy/observability/` (rule file, PrometheusRule, ServiceMonitor,
//! dashboard). `tests/chart.rs` fails when the committed files differ.

use std::process::ExitCode;

use configrollout_e2e::chart::{Helm, generated_files};

fn main() -> ExitCode {
    let result = Helm::ensure().and_then(|helm| generated_files(&helm));
    let files = match result {
        Ok(files) => files,
        Err(error) => {
            eprintln!("chart-files: {error}");
            return ExitCode::FAILURE;
        }
    };
    for (path, content) in files {
        if std::fs::read_to_string(&path).ok().as_deref() == Some(content.as_str()) {
            continue;
        }
        if let Some(dir) = path.parent()
            && let Err(error) = std::fs::create_dir_all(dir)
        {
            eprintln!("chart-files: create {}: {error}", dir.display());
            return ExitCode::FAILURE;
        }
        if let Err(error) = std::fs::write(&path, content) {
            eprintln!("chart-files: write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
