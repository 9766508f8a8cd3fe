//! Reading Rust sources as text, for what the compiled code cannot say by itself: the doc
//! comments of constants, and the string literals a module sets as condition or Event
//! reasons. A small lexer (comments, string and char literals, raw strings) is enough:
//! the sources are the workspace's own, formatted by rustfmt.

use std::path::{Path, PathBuf};

/// One Rust file of the workspace, without its unit tests.
#[derive(Debug, Clone)]
pub struct Source {
    /// Its path from the repository's root, with `/` separators.
    pub path: String,
    /// Its text up to its `#[cfg(test)] mod ...` (the tests stay out).
    pub text: String,
}

/// Every `.rs` file under `dir` (a path from `root`), recursively, in path order, without
/// `tests.rs` files, `tests/` directories and their unit tests.
pub fn sources(root: &Path, dir: &str) -> Result<Vec<Source>, String> {
    let mut files = Vec::new();
    collect(&root.join(dir), &mut files)?;
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|error| format!("read {}: {error}", file.display()))?;
        let path = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .to_string_lossy()
            .replace('\\', "/");
        out.push(Source {
            path,
            text: without_unit_tests(&text).to_owned(),
        });
    }
    Ok(out)
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|error| format!("read {}: {error}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|error| format!("read {}: {error}", dir.display()))?
            .path();
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "tests" && name != "testdata" {
                collect(&path, files)?;
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            files.push(path);
        }
    }
    Ok(())
}

/// The text before the file's unit-test module (`#[cfg(test)]` followed by `mod`).
fn without_unit_tests(text: &str) -> &str {
    let mut offset = 0;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (index, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .get(index + 1)
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            return &text[..offset];
        }
        offset += line.len();
    }
    text
}

/// A string literal of a source, with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Literal {
    /// Its value (escapes left as written; the literals read here have none).
    pub value: String,
    /// The byte offset of its opening quote in the text.
    pub at: usize,
}

/// The text with every comment replaced by spaces (so offsets stay), and the string
/// literals it holds.
pub fn lex(text: &str) -> (String, Vec<Literal>) {
    let bytes = text.as_bytes();
    let mut code = String::with_capacity(text.len());
    let mut literals = Vec::new();
    let mut index = 0;
    let blank = |code: &mut String, slice: &str| {
        for ch in slice.chars() {
            code.push(if ch == '\n' { '\n' } else { ' ' });
        }
    };
    while index < bytes.len() {
        let rest = &text[index..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            blank(&mut code, &rest[..end]);
            index += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |end| end + 2);
            blank(&mut code, &rest[..end]);
            index += end;
        } else if let Some(hashes) = raw_string_start(rest) {
            // r"..." or r#"..."#
            let open = 2 + hashes;
            let close = format!("\"{}", "#".repeat(hashes));
            let end = rest[open..]
                .find(&close)
                .map_or(rest.len(), |end| open + end + close.len());
            literals.push(Literal {
                value: rest[open..end.saturating_sub(close.len()).max(open)].to_owned(),
                at: index,
            });
            code.push_str(&rest[..end]);
            index += end;
        } else if rest.starts_with('"') {
            let mut end = 1;
            let rest_bytes = rest.as_bytes();
            while end < rest_bytes.len() && rest_bytes[end] != b'"' {
                end += if rest_bytes[end] == b'\\' { 2 } else { 1 };
            }
            let end = (end + 1).min(rest.len());
            literals.push(Literal {
                value: rest[1..end.saturating_sub(1).max(1)].to_owned(),
                at: index,
            });
            code.push_str(&rest[..end]);
            index += end;
        } else if let Some(after_quote) = rest.strip_prefix('\'') {
            // A char literal ('x', '\n', '"') or a lifetime ('a).
            let char_end = if let Some(escaped) = after_quote.strip_prefix('\\') {
                escaped.find('\'').map(|end| end + 3)
            } else {
                after_quote
                    .chars()
                    .next()
                    .map(|ch| 1 + ch.len_utf8())
                    .filter(|&after| rest[after..].starts_with('\''))
                    .map(|after| after + 1)
            };
            let end = char_end.unwrap_or(1);
            code.push_str(&rest[..end]);
            index += end;
        } else {
            let ch = rest.chars().next().unwrap_or(' ');
            code.push(ch);
            index += ch.len_utf8();
        }
    }
    (code, literals)
}

/// The number of `#` of a raw string starting `text`, if one does.
fn raw_string_start(text: &str) -> Option<usize> {
    let after_r = text.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    after_r[hashes..].starts_with('"').then_some(hashes)
}

/// A `const NAME: &str = "value";` of a source, with its doc comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrConst {
    /// The constant's name.
    pub name: String,
    /// Its value.
    pub value: String,
    /// Its `///` comment, lines joined with spaces.
    pub doc: String,
    /// Whether it is `pub` (in any form).
    pub public: bool,
}

/// Every `&str` constant of `text` (a whole source, comments included, so that the doc
/// comments can be read).
pub fn str_consts(text: &str) -> Vec<StrConst> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let (public, rest) = match trimmed.strip_prefix("pub") {
            Some(rest) => {
                let rest = rest.trim_start();
                let rest = match rest.strip_prefix('(') {
                    Some(scoped) => scoped.split_once(')').map_or("", |(_, rest)| rest),
                    None => rest,
                };
                (true, rest.trim_start())
            }
            None => (false, trimmed),
        };
        let Some(rest) = rest.strip_prefix("const ") else {
            continue;
        };
        let Some((name, rest)) = rest.split_once(':') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix("&str") else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        let Some(value) = rest
            .trim()
            .strip_prefix('"')
            .and_then(|value| value.strip_suffix("\";"))
        else {
            continue;
        };
        out.push(StrConst {
            name: name.trim().to_owned(),
            value: value.to_owned(),
            doc: doc_above(&lines, index),
            public,
        });
    }
    out
}

/// The `///` lines right above line `index` (attributes in between skipped), joined.
pub fn doc_above(lines: &[&str], index: usize) -> String {
    let mut doc = Vec::new();
    let mut at = index;
    while at > 0 {
        at -= 1;
        let line = lines[at].trim();
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim());
        } else if line.starts_with("#[") || line.starts_with("//") && !line.starts_with("///") {
            continue;
        } else {
            break;
        }
    }
    doc.reverse();
    without_intra_doc_links(doc.join(" ").trim())
}

/// Rustdoc's intra-doc links (``[`path`]``) as plain code spans.
fn without_intra_doc_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[`") {
        let after = &rest[start + 2..];
        match after.find("`]") {
            Some(end) if !after[end + 2..].starts_with('(') && !after[..end].contains('`') => {
                out.push_str(&rest[..start]);
                out.push('`');
                out.push_str(&after[..end]);
                out.push('`');
                rest = &after[end + 2..];
            }
            _ => {
                out.push_str(&rest[..start + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_blanked_and_literals_found() {
        let (code, literals) =
            lex("let a = \"One\"; // \"Not\"\nlet b: &'static str = r#\"Two\"#; let c = '\"';");
        assert!(!code.contains("Not"));
        let values: Vec<&str> = literals.iter().map(|l| l.value.as_str()).collect();
        assert_eq!(values, ["One", "Two"]);
    }

    #[test]
    fn consts_carry_their_doc() {
        let consts = str_consts(
            "/// The reason.\n/// Second line.\npub(super) const REASON_X: &str = \"X\";\nconst Y: &str = \"Y\";\n",
        );
        assert_eq!(consts.len(), 2);
        assert_eq!(consts[0].doc, "The reason. Second line.");
        assert_eq!(
            without_intra_doc_links("see [`crate::x`] and [`y`](z)"),
            "see `crate::x` and [`y`](z)"
        );
        assert!(consts[0].public);
        assert!(!consts[1].public);
    }

    #[test]
    fn unit_tests_are_left_out() {
        let text = "fn a() {}\n#[cfg(test)]\npub fn helper() {}\n#[cfg(test)]\nmod tests {\n}\n";
        assert_eq!(
            without_unit_tests(text),
            "fn a() {}\n#[cfg(test)]\npub fn helper() {}\n"
        );
    }
}
