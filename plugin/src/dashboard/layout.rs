//! The page shell every page shares: head, the embedded assets, the token actions
//! carry, the live region a server-sent event stream replaces, and the outcome box.

use super::html::escape;

/// The stylesheet, embedded in the binary.
pub const CSS: &str = include_str!("assets/dashboard.css");
/// The script (live updates and actions), embedded in the binary.
pub const JS: &str = include_str!("assets/dashboard.js");

/// A whole page: `title`, the navigation crumbs, the `live` part (replaced by each
/// message of the event stream at `stream`), and `rest` below it, which stays.
pub fn page(title: &str, token: &str, stream: &str, live: &str, rest: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="dashboard-token" content="{token}">
<title>{title} · configrollout</title>
<link rel="stylesheet" href="/assets/dashboard.css">
<script src="/assets/dashboard.js" defer></script>
</head>
<body>
<header class="top"><a href="/">configrollout</a> <span class="crumb">{title}</span> <span id="connection" class="connection" title="live updates">connecting</span></header>
<div id="outcome" class="outcome" hidden></div>
<main id="live" data-stream="{stream}">
{live}
</main>
{rest}
</body>
</html>
"#,
        token = escape(token),
        title = escape(title),
        stream = escape(stream),
    )
}

/// A message box for a page that could not be shown (the API server's answer).
pub fn problem(title: &str, message: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} · configrollout</title><link rel="stylesheet" href="/assets/dashboard.css"></head>
<body><header class="top"><a href="/">configrollout</a> <span class="crumb">{title}</span></header>
<p class="refusal">{message}</p></body></html>
"#,
        title = escape(title),
        message = escape(message),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_escapes_what_it_is_given_and_carries_the_token() {
        let page = page("<x>", "abc123", "/stream?a=1&b=2", "<p>live</p>", "");
        assert!(page.contains("<title>&lt;x&gt; · configrollout</title>"));
        assert!(page.contains(r#"<meta name="dashboard-token" content="abc123">"#));
        assert!(page.contains(r#"data-stream="/stream?a=1&amp;b=2""#));
        assert!(page.contains("<p>live</p>"));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "no CDN"
        );
    }

    #[test]
    fn a_problem_is_escaped() {
        let page = problem("t", "forbidden: <b>");
        assert!(page.contains("forbidden: &lt;b&gt;"));
    }
}
