//! Escaping: every text that reaches a page (names, messages, reasons, samples) goes
//! through [`escape`], in element content and in quoted attribute values alike.

/// `text` safe inside HTML element content and double- or single-quoted attributes. A
/// control character (but tab and line feed) or a bidirectional override, which would
/// let a tenant's text reorder what follows it on the page, is shown as U+FFFD.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\t' | '\n' => out.push(c),
            unsafe_to_show if configrollout_api::text::is_unsafe_to_show(unsafe_to_show) => {
                out.push('\u{fffd}');
            }
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// A path segment for a link (names are DNS labels, but a page must not trust that).
pub use configrollout_api::text::path_segment;

/// The link to one rollout's page.
pub fn rollout_href(namespace: &str, name: &str) -> String {
    format!("/r/{}/{}", path_segment(namespace), path_segment(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(escape("plain-name.1"), "plain-name.1");
    }

    #[test]
    fn control_characters_and_bidirectional_overrides_are_replaced() {
        assert_eq!(
            escape("ok\u{1b}[2J\rdone\u{202e}txt.exe\n\tnext"),
            "ok\u{fffd}[2J\u{fffd}done\u{fffd}txt.exe\n\tnext"
        );
    }

    #[test]
    fn links_encode_what_is_not_a_name() {
        assert_eq!(rollout_href("team", "app-1"), "/r/team/app-1");
        assert_eq!(rollout_href("t/../x", "a b"), "/r/t%2F..%2Fx/a%20b");
    }
}
