//! Gate query templates: `{{region}}`, `{{revision}}` and `{{stage}}` placeholders.
//!
//! Values are escaped for a PromQL string literal (double- or single-quoted), which is
//! where they belong: `rate(errors_total{region="{{region}}"}[5m])`. Escaping keeps a
//! region or stage name from closing the literal and rewriting the query. Placeholders in
//! backtick (raw) strings cannot be escaped and are the spec author's responsibility.
//! Whitespace inside the braces is allowed (`{{ region }}`); any other name is an error,
//! so a typo shows up as `InvalidSpec` instead of a query that silently matches nothing.

/// The names a query may use.
pub const PLACEHOLDERS: [&str; 3] = ["region", "revision", "stage"];

/// Values substituted into a query.
#[derive(Debug, Clone, Copy)]
pub struct TemplateValues<'a> {
    /// The region the sample is for.
    pub region: &'a str,
    /// The revision name (`r7`).
    pub revision: &'a str,
    /// The stage name.
    pub stage: &'a str,
}

/// Why a query template is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{name}}` with a name other than region, revision, stage.
    #[error(
        "at byte {position}: unknown placeholder `{{{{{name}}}}}`; expected one of region, revision, stage"
    )]
    UnknownPlaceholder {
        /// Byte offset of the opening braces.
        position: usize,
        /// The name found (trimmed).
        name: String,
    },
    /// `{{args.name}}` naming an arg the template does not declare.
    #[error(
        "at byte {position}: unknown arg `{{{{args.{name}}}}}`: the template declares no such arg"
    )]
    UnknownArg {
        /// Byte offset of the opening braces.
        position: usize,
        /// The arg's name.
        name: String,
    },
    /// `{{` without a matching `}}`.
    #[error("at byte {position}: `{{{{` is not closed by `}}}}`")]
    Unclosed {
        /// Byte offset of the opening braces.
        position: usize,
    },
}

/// Checks that every placeholder in `query` is known and closed.
pub fn check_template(query: &str) -> Result<(), TemplateError> {
    substitute(query, |_| String::new()).map(|_| ())
}

/// Whether `query` uses the placeholder `name` (a gate that uses `{{region}}` is
/// evaluated per region; one that does not, once for the whole stage).
pub fn uses_placeholder(query: &str, name: &str) -> bool {
    let found = std::cell::Cell::new(false);
    let _ = substitute(query, |placeholder| {
        if placeholder == name {
            found.set(true);
        }
        String::new()
    });
    found.get()
}

/// Renders `query` with `values`, each escaped for a PromQL string literal.
pub fn render(query: &str, values: &TemplateValues<'_>) -> Result<String, TemplateError> {
    render_with(query, values, escape_promql_string)
}

/// Renders `text` with `values`, each escaped by `escape` for where it lands (a URL's
/// path, a JSON string, a Job's field).
pub fn render_with(
    text: &str,
    values: &TemplateValues<'_>,
    escape: impl Fn(&str) -> String,
) -> Result<String, TemplateError> {
    substitute(text, |name| {
        let raw = match name {
            "region" => values.region,
            "revision" => values.revision,
            _ => values.stage,
        };
        escape(raw)
    })
}

/// The prefix of a template arg's placeholder: `{{args.threshold}}`.
pub const ARG_PREFIX: &str = "args.";

/// Replaces each `{{args.NAME}}` of a template's `text` with `value_of(NAME)`, and keeps
/// `{{region}}`, `{{revision}}` and `{{stage}}` for each sample. An arg `value_of`
/// does not know, or any other name, is an error.
#[allow(
    clippy::arithmetic_side_effects,
    reason = "offsets within one string, each found by a search of it"
)]
pub fn substitute_args(
    text: &str,
    value_of: impl Fn(&str) -> Option<String>,
) -> Result<String, TemplateError> {
    let mut rendered = String::with_capacity(text.len());
    let mut cursor = 0;
    while let Some(offset) = text[cursor..].find("{{") {
        let open = cursor + offset;
        rendered.push_str(&text[cursor..open]);
        let body_start = open + 2;
        let Some(length) = text[body_start..].find("}}") else {
            return Err(TemplateError::Unclosed { position: open });
        };
        let whole = &text[open..body_start + length + 2];
        let name = text[body_start..body_start + length].trim();
        if PLACEHOLDERS.contains(&name) {
            rendered.push_str(whole);
        } else if let Some(arg) = name.strip_prefix(ARG_PREFIX) {
            let Some(value) = value_of(arg) else {
                return Err(TemplateError::UnknownArg {
                    position: open,
                    name: arg.chars().take(64).collect(),
                });
            };
            rendered.push_str(&value);
        } else {
            return Err(TemplateError::UnknownPlaceholder {
                position: open,
                name: name.chars().take(32).collect(),
            });
        }
        cursor = body_start + length + 2;
    }
    rendered.push_str(&text[cursor..]);
    Ok(rendered)
}

/// Escapes `raw` for a URL's path or query: every byte but the unreserved ones
/// (RFC 3986: letters, digits, `-._~`) percent-encoded, so that no value adds a path
/// segment, a query parameter or a fragment.
pub fn escape_url_component(raw: &str) -> String {
    let mut escaped = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            escaped.push(char::from(byte));
        } else {
            escaped.push_str(&format!("%{byte:02X}"));
        }
    }
    escaped
}

/// Escapes `raw` for the inside of a JSON string.
pub fn escape_json_string(raw: &str) -> String {
    let quoted = serde_json::Value::String(raw.to_owned()).to_string();
    quoted
        .strip_prefix('"')
        .and_then(|inner| inner.strip_suffix('"'))
        .unwrap_or_default()
        .to_owned()
}

#[allow(
    clippy::arithmetic_side_effects,
    reason = "offsets within one string, each found by a search of it"
)]
fn substitute(query: &str, value_of: impl Fn(&str) -> String) -> Result<String, TemplateError> {
    let mut rendered = String::with_capacity(query.len());
    let mut cursor = 0;
    while let Some(offset) = query[cursor..].find("{{") {
        let open = cursor + offset;
        rendered.push_str(&query[cursor..open]);
        let body_start = open + 2;
        let Some(length) = query[body_start..].find("}}") else {
            return Err(TemplateError::Unclosed { position: open });
        };
        let name = query[body_start..body_start + length].trim();
        if !PLACEHOLDERS.contains(&name) {
            return Err(TemplateError::UnknownPlaceholder {
                position: open,
                name: name.chars().take(32).collect(),
            });
        }
        rendered.push_str(&value_of(name));
        cursor = body_start + length + 2;
    }
    rendered.push_str(&query[cursor..]);
    Ok(rendered)
}

/// Escapes `raw` for the inside of a PromQL (Go-syntax) quoted string.
pub fn escape_promql_string(raw: &str) -> String {
    let mut escaped = String::with_capacity(raw.len());
    for character in raw.chars() {
        match character {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\'' => escaped.push_str("\\'"),
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            control if control.is_control() => {
                escaped.push_str(&format!("\\u{:04x}", u32::from(control)));
            }
            other => escaped.push(other),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const VALUES: TemplateValues<'static> = TemplateValues {
        region: "eu-west-1",
        revision: "r7",
        stage: "canary",
    };

    #[test]
    fn substitutes_every_placeholder() {
        let rendered = render(
            r#"sum(rate(errors{region="{{region}}",rev="{{ revision }}",stage="{{stage}}"}[5m]))"#,
            &VALUES,
        )
        .unwrap();
        assert_eq!(
            rendered,
            r#"sum(rate(errors{region="eu-west-1",rev="r7",stage="canary"}[5m]))"#
        );
    }

    #[test]
    fn escapes_values_so_they_cannot_close_the_string_literal() {
        let values = TemplateValues {
            region: r#"a"} or vector(1) #\"#,
            ..VALUES
        };
        let rendered = render(r#"up{region="{{region}}"}"#, &values).unwrap();
        assert_eq!(rendered, r#"up{region="a\"} or vector(1) #\\"}"#);
        assert_eq!(escape_promql_string("it's\n"), r"it\'s\n");
    }

    #[test]
    fn unknown_and_unclosed_placeholders_are_errors_with_position() {
        assert_eq!(
            check_template("up{x=\"{{ regoin }}\"}"),
            Err(TemplateError::UnknownPlaceholder {
                position: 6,
                name: "regoin".into()
            })
        );
        assert_eq!(
            check_template("up{x=\"{{region\"}"),
            Err(TemplateError::Unclosed { position: 6 })
        );
        assert_eq!(check_template("sum(up)"), Ok(()));
    }

    #[test]
    fn detects_which_placeholders_a_query_uses() {
        assert!(uses_placeholder("up{r=\"{{ region }}\"}", "region"));
        assert!(!uses_placeholder("up{s=\"{{stage}}\"}", "region"));
    }

    proptest! {
        #[test]
        fn rendering_never_panics(query in any::<String>(), region in any::<String>()) {
            let values = TemplateValues { region: &region, ..VALUES };
            let _ = render(&query, &values);
        }

        #[test]
        fn an_escaped_value_has_no_unescaped_quote(value in any::<String>()) {
            let escaped = escape_promql_string(&value);
            let mut backslashes = 0usize;
            for character in escaped.chars() {
                if character == '"' || character == '\'' {
                    prop_assert!(backslashes % 2 == 1, "{}", escaped);
                }
                backslashes = if character == '\\' { backslashes + 1 } else { 0 };
            }
            prop_assert!(!escaped.contains('\n'));
        }
    }
}
