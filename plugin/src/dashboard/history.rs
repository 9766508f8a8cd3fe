//! Revision history: the revisions the status keeps, each with the keys it added,
//! changed and removed against the one before it. Key names only; values only when the
//! caller asked and could read the stored revisions (which is how the diffs were
//! computed at all), as the plugin's `diff --show-values`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::html::{escape, rollout_href};
use crate::render::{KeyChange, MASK, diff_keys, time};
use configrollout_api::ConfigRollout;

/// The number of a revision name (`r3` -> 3).
fn number(revision: &str) -> Option<u64> {
    revision.strip_prefix('r').unwrap_or(revision).parse().ok()
}

/// Each stored revision's changes against the stored revision numbered one before it
/// (a first revision: everything added). A revision whose predecessor is not kept any
/// more is left out rather than shown against the wrong base.
pub fn history_diffs(
    revisions: &BTreeMap<String, BTreeMap<String, String>>,
) -> BTreeMap<String, Vec<KeyChange>> {
    let empty = BTreeMap::new();
    revisions
        .iter()
        .filter_map(|(name, keys)| {
            let n = number(name)?;
            let before = if n <= 1 {
                Some(&empty)
            } else {
                revisions.get(&format!("r{}", n - 1))
            }?;
            Some((name.clone(), diff_keys(before, keys)))
        })
        .collect()
}

fn change_line(change: &KeyChange, show_values: bool) -> String {
    let shown = |value: &str| {
        if show_values {
            format!(" <code>{}</code>", escape(value))
        } else {
            String::new()
        }
    };
    match change {
        KeyChange::Added(key, new) => format!(
            r#"<li class="added">+ <code>{}</code>{}</li>"#,
            escape(key),
            shown(new)
        ),
        KeyChange::Changed(key, old, new) => {
            let values = if show_values {
                format!("{} →{}", shown(old), shown(new))
            } else {
                String::new()
            };
            format!(
                r#"<li class="changed">~ <code>{}</code>{values}</li>"#,
                escape(key)
            )
        }
        KeyChange::Removed(key, old) => format!(
            r#"<li class="removed">- <code>{}</code>{}</li>"#,
            escape(key),
            shown(old)
        ),
    }
}

/// The history section: the status's records, newest first, with `diffs` (or why they
/// could not be read). Values appear only when `show_values`.
pub fn history(
    rollout: &ConfigRollout,
    diffs: &Result<BTreeMap<String, Vec<KeyChange>>, String>,
    show_values: bool,
) -> String {
    let namespace = kube::ResourceExt::namespace(rollout).unwrap_or_default();
    let name = kube::ResourceExt::name_any(rollout);
    let href = rollout_href(&namespace, &name);
    let mut out = String::from(r#"<section class="history"><h2>Revision history</h2>"#);
    let records = rollout
        .status
        .as_ref()
        .map(|status| status.history.as_slice())
        .unwrap_or_default();
    if records.is_empty() {
        out.push_str(r#"<p class="empty">no revision declared yet</p></section>"#);
        return out;
    }
    match diffs {
        Err(why) => {
            let _ = write!(out, r#"<p class="refusal">{}</p>"#, escape(why));
        }
        Ok(_) if show_values => {
            let _ = write!(
                out,
                r#"<p class="note">Values shown, as you asked. <a href="{}">Hide them</a></p>"#,
                escape(&href)
            );
        }
        Ok(_) => {
            let _ = write!(
                out,
                r#"<p class="note">Key names only; values are masked ({MASK}). <a href="{}?values=1" id="show-values">Show values</a> (read with your credentials)</p>"#,
                escape(&href)
            );
        }
    }
    out.push_str(
        r#"<table class="revisions"><thead><tr><th>Revision</th><th>Declared</th><th>Digest</th><th>Keys set</th><th>Keys removed</th><th>Outcome</th><th>Changes against the one before</th></tr></thead><tbody>"#,
    );
    for record in records.iter().rev() {
        let changes = match diffs {
            Ok(diffs) => match diffs.get(&record.name) {
                Some(changes) if changes.is_empty() => "no key changed".to_owned(),
                Some(changes) => {
                    let lines: String = changes
                        .iter()
                        .map(|change| change_line(change, show_values))
                        .collect();
                    format!(r#"<ul class="diff">{lines}</ul>"#)
                }
                None => "not kept".to_owned(),
            },
            Err(_) => "-".to_owned(),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{changes}</td></tr>",
            escape(&record.name),
            escape(&time(&record.declared_at)),
            escape(record.digest.as_deref().unwrap_or("-")),
            record.keys_set,
            record.keys_removed,
            escape(record.outcome.as_deref().unwrap_or("-")),
        );
    }
    out.push_str("</tbody></table></section>");
    out
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use configrollout_api::{ConfigRolloutStatus, RevisionRecord};

    fn keys(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn rollout_with_history() -> ConfigRollout {
        let mut rollout = super::super::list::tests::rollout("team", "app");
        let record = |name: &str| RevisionRecord {
            name: name.to_owned(),
            digest: Some("d1g3st".to_owned()),
            declared_at: Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).expect("t")),
            stamp: String::new(),
            keys_set: 2,
            keys_removed: 0,
            outcome: None,
            authors: Vec::new(),
            authors_unknown: None,
            schemas: Vec::new(),
            validated_by: Vec::new(),
        };
        rollout.status = Some(ConfigRolloutStatus {
            history: vec![record("r1"), record("r2")],
            ..ConfigRolloutStatus::default()
        });
        rollout
    }

    fn diffs() -> BTreeMap<String, Vec<KeyChange>> {
        let mut revisions = BTreeMap::new();
        revisions.insert(
            "r1".to_owned(),
            keys(&[("timeout_ms", "s3cr3t-250"), ("old", "gone-value")]),
        );
        revisions.insert(
            "r2".to_owned(),
            keys(&[("timeout_ms", "s3cr3t-0"), ("burst", "s3cr3t-500")]),
        );
        history_diffs(&revisions)
    }

    #[test]
    fn each_revision_is_diffed_against_the_one_before() {
        let diffs = diffs();
        assert_eq!(diffs["r1"].len(), 2);
        assert_eq!(
            diffs["r2"],
            vec![
                KeyChange::Added("burst".to_owned(), "s3cr3t-500".to_owned()),
                KeyChange::Removed("old".to_owned(), "gone-value".to_owned()),
                KeyChange::Changed(
                    "timeout_ms".to_owned(),
                    "s3cr3t-250".to_owned(),
                    "s3cr3t-0".to_owned()
                ),
            ]
        );
        let mut gap = BTreeMap::new();
        gap.insert("r3".to_owned(), keys(&[("a", "1")]));
        assert!(history_diffs(&gap).is_empty(), "no base, no diff");
    }

    #[test]
    fn names_only_unless_values_were_asked_for() {
        let rollout = rollout_with_history();
        let masked = history(&rollout, &Ok(diffs()), false);
        for key in ["burst", "old", "timeout_ms"] {
            assert!(masked.contains(&format!("<code>{key}</code>")), "{masked}");
        }
        assert!(
            !masked.contains("s3cr3t") && !masked.contains("gone-value"),
            "{masked}"
        );
        assert!(
            masked.contains(r#"href="/r/team/app?values=1""#),
            "{masked}"
        );

        let shown = history(&rollout, &Ok(diffs()), true);
        assert!(shown.contains("<code>s3cr3t-0</code>"), "{shown}");
        assert!(shown.contains("Hide them"), "{shown}");
    }

    #[test]
    fn a_refused_read_says_so_and_shows_no_diff() {
        let html = history(
            &rollout_with_history(),
            &Err("you may not read the revisions".to_owned()),
            true,
        );
        assert!(html.contains("you may not read the revisions"), "{html}");
        assert!(!html.contains("Show values"), "{html}");
        assert!(html.contains("<td>r2</td>"), "{html}");
    }
}
