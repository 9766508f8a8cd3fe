//! Text a tenant writes and a person later reads (a query, a condition, an approval's
//! reason): which characters it may not hold. A control character (ESC, CR, BEL) or a
//! bidirectional override would let one tenant rewrite or reorder what everyone who lists
//! rollouts sees. Refused at apply by the schema's `pattern` and again by the controller;
//! printers replace whatever older objects still hold.

/// The schema `pattern` of free text that may span lines: tabs and line feeds are fine
/// (a PromQL query in a YAML block), every other C0 control, DEL, C1 controls and the
/// bidirectional embeddings, overrides and isolates are not. RE2 syntax, as the apiserver
/// evaluates patterns.
pub const MULTILINE_TEXT_PATTERN: &str =
    r"^[^\x00-\x08\x0B-\x1F\x7F-\x9F\x{202A}-\x{202E}\x{2066}-\x{2069}]*$";

/// Whether `c` may not be shown raw on someone's terminal or page: a control character
/// (line breaks included) or a bidirectional embedding, override or isolate.
pub fn is_unsafe_to_show(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// The first character [`MULTILINE_TEXT_PATTERN`] refuses in `text`, with its character
/// index, if any.
pub fn first_refused_in_multiline(text: &str) -> Option<(usize, char)> {
    text.chars()
        .enumerate()
        .find(|(_, c)| *c != '\t' && *c != '\n' && is_unsafe_to_show(*c))
}

/// What to say about a refused character: its code point and where, never the text.
pub fn refused_character_message(index: usize, c: char) -> String {
    format!(
        "holds U+{:04X} at character {index}: control characters (but tab and line feed) and \
         bidirectional overrides are not allowed",
        u32::from(c)
    )
}

/// `text` as one URL path segment: percent-encoded but for ASCII letters, digits, `-`,
/// `.` and `_` (names are DNS labels, but a link must not trust that). The dashboard's
/// links and the notifications' links to it are built the same way.
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiline_text_keeps_tabs_and_line_feeds_and_refuses_the_rest() {
        assert_eq!(first_refused_in_multiline("sum(rate(x[5m]))\n\t/ 2"), None);
        for (text, at) in [
            ("In\u{1b}[2J", 2),
            ("a\rb", 1),
            ("\u{7}", 0),
            ("x\u{85}", 1),
            ("evil\u{202E}txt", 4),
            ("\u{2066}", 0),
        ] {
            let (index, _) = first_refused_in_multiline(text).expect(text);
            assert_eq!(index, at, "{text:?}");
        }
    }

    #[test]
    fn the_message_names_the_code_point_not_the_text() {
        let (index, c) = first_refused_in_multiline("ok\u{1b}[2J").unwrap();
        let message = refused_character_message(index, c);
        assert!(message.contains("U+001B at character 2"), "{message}");
        assert!(!message.contains('\u{1b}'));
    }
}
