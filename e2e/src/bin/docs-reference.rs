//! Writes `docs/reference/` from the code (`make docs`): the CRDs' fields, conditions and
//! reasons, labels and annotations, controller flags, plugin commands, metrics and chart
//! values. `tests/docs.rs` fails when the committed pages differ; pages no longer
//! generated are deleted.

use std::process::ExitCode;

use configrollout_e2e::docs;
use configrollout_e2e::repository_root;

fn main() -> ExitCode {
    let root = repository_root();
    let pages = match docs::reference_pages(&root) {
        Ok(pages) => pages,
        Err(error) => {
            eprintln!("docs-reference: {error}");
            return ExitCode::FAILURE;
        }
    };
    for (path, content) in docs::files(&root, &pages) {
        if std::fs::read_to_string(&path).ok().as_deref() == Some(content.as_str()) {
            continue;
        }
        if let Some(dir) = path.parent()
            && let Err(error) = std::fs::create_dir_all(dir)
        {
            eprintln!("docs-reference: create {}: {error}", dir.display());
            return ExitCode::FAILURE;
        }
        if let Err(error) = std::fs::write(&path, content) {
            eprintln!("docs-reference: write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    for file in docs::committed(&root) {
        if pages.iter().any(|page| page.path == file) {
            continue;
        }
        let path = root.join(docs::REFERENCE_DIR).join(&file);
        if let Err(error) = std::fs::remove_file(&path) {
            eprintln!("docs-reference: remove {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
        println!("removed {}", path.display());
    }
    ExitCode::SUCCESS
}
