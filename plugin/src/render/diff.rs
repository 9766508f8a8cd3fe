//! `diff`'s rendering: the keys two sets of values differ in, printed with the values
//! masked unless asked for.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How one key differs between two revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyChange {
    /// The key is new, with this value.
    Added(String, String),
    /// The key's value changed from the first to the second.
    Changed(String, String, String),
    /// The key is gone; it held this value.
    Removed(String, String),
}

/// The keys that differ from `from` to `to`, in key order; unchanged keys are left out.
pub fn diff_keys(from: &BTreeMap<String, String>, to: &BTreeMap<String, String>) -> Vec<KeyChange> {
    let mut keys: Vec<&String> = from.keys().chain(to.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|key| match (from.get(key), to.get(key)) {
            (None, Some(new)) => Some(KeyChange::Added(key.clone(), new.clone())),
            (Some(old), None) => Some(KeyChange::Removed(key.clone(), old.clone())),
            (Some(old), Some(new)) if old != new => {
                Some(KeyChange::Changed(key.clone(), old.clone(), new.clone()))
            }
            _ => None,
        })
        .collect()
}

/// What stands for a value that is not shown.
pub const MASK: &str = "***";

/// `diff`'s output: a header naming the two sides, one line per changed key (`+` added,
/// `~` changed, `-` removed) and a count. Values are printed only when `show_values`;
/// otherwise every value is [`MASK`].
pub fn render_diff(from: &str, to: &str, changes: &[KeyChange], show_values: bool) -> String {
    let shown = |value: &str| -> String {
        if show_values {
            format!("{value:?}")
        } else {
            MASK.to_owned()
        }
    };
    let mut out = format!("--- {from}\n+++ {to}\n");
    let (mut added, mut changed, mut removed) = (0, 0, 0);
    for change in changes {
        let _ = match change {
            KeyChange::Added(key, new) => {
                added += 1;
                writeln!(out, "+ {key} = {}", shown(new))
            }
            KeyChange::Changed(key, old, new) => {
                changed += 1;
                writeln!(out, "~ {key}: {} -> {}", shown(old), shown(new))
            }
            KeyChange::Removed(key, old) => {
                removed += 1;
                writeln!(out, "- {key} (was {})", shown(old))
            }
        };
    }
    let _ = writeln!(
        out,
        "{added} added, {changed} changed, {removed} removed{}",
        if show_values || changes.is_empty() {
            ""
        } else {
            " (values masked; --show-values to see them)"
        }
    );
    out
}
