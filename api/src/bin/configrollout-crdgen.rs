//! Writes the CRDs generated from the Rust types.
//!
//! `configrollout-crdgen <dir>` writes one YAML file per CRD into `<dir>` (`make crds`
//! passes `crds`); without an argument, prints them all to stdout as one YAML stream.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let dir = args.next();
    if args.next().is_some() {
        eprintln!("usage: configrollout-crdgen [DIR]");
        return ExitCode::from(2);
    }
    let files = match configrollout_api::crds_yaml() {
        Ok(files) => files,
        Err(err) => {
            eprintln!("configrollout-crdgen: {err}");
            return ExitCode::FAILURE;
        }
    };
    match dir {
        None => {
            let stream: Vec<&str> = files.iter().map(|(_, yaml)| yaml.as_str()).collect();
            print!("{}", stream.join("---\n"));
            ExitCode::SUCCESS
        }
        Some(dir) => match write_all(Path::new(&dir), &files) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("configrollout-crdgen: {err}");
                ExitCode::FAILURE
            }
        },
    }
}

fn write_all(dir: &Path, files: &[(String, String)]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, yaml) in files {
        let path = dir.join(name);
        std::fs::write(&path, yaml)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
