//! `docs/reference/metrics.md`: every series of the controller's `/metrics`, read from the
//! exposition of its own registry (`configrollout::telemetry::metrics::Metrics`, which
//! exports every series and label value from the start), so names, types, help and label
//! values are what a scrape returns.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use configrollout::leader::Shards;
use configrollout::leader::state::LeaderState;
use configrollout::telemetry::metrics::Metrics;

use super::{Page, cell, generated_header};

#[derive(Default)]
struct Family {
    kind: String,
    help: String,
    /// Label name -> values seen, in the order they are exported.
    labels: Vec<(String, Vec<String>)>,
}

fn families(text: &str) -> Vec<(String, Family)> {
    let mut order: Vec<String> = Vec::new();
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if !families.contains_key(name) {
                order.push(name.to_owned());
            }
            families.entry(name.to_owned()).or_default().help = unescape(help);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if !families.contains_key(name) {
                order.push(name.to_owned());
            }
            families.entry(name.to_owned()).or_default().kind = kind.to_owned();
        } else if !line.starts_with('#') && !line.is_empty() {
            let series = line.rsplit_once(' ').map_or(line, |(series, _)| series);
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let family = order
                .iter()
                .rev()
                .find(|family| {
                    name == family.as_str()
                        || name
                            .strip_prefix(family.as_str())
                            .is_some_and(|rest| ["_bucket", "_sum", "_count"].contains(&rest))
                })
                .cloned();
            let Some(family) = family else { continue };
            let entry = families.entry(family).or_default();
            for pair in labels.trim_end_matches('}').split(',') {
                let Some((label, value)) = pair.split_once('=') else {
                    continue;
                };
                let value = value.trim_matches('"').to_owned();
                match entry.labels.iter_mut().find(|(name, _)| name == label) {
                    Some((_, values)) => {
                        if !values.contains(&value) {
                            values.push(value);
                        }
                    }
                    None => entry.labels.push((label.to_owned(), vec![value])),
                }
            }
        }
    }
    order
        .into_iter()
        .filter_map(|name| families.remove(&name).map(|family| (name, family)))
        .collect()
}

fn unescape(help: &str) -> String {
    help.replace("\\n", " ").replace("\\\\", "\\")
}

/// The page.
pub fn page() -> Page {
    let plain = Metrics::new().render();
    let sharded =
        Metrics::with_shards(Shards::single(LeaderState::always_leading(), "docs")).render();
    let plain_names: Vec<String> = families(&plain).into_iter().map(|(name, _)| name).collect();
    let mut out = generated_header("Metrics");
    out.push_str(
        "The controller's `/metrics` (Prometheus text format 0.0.4, on `--probe-addr`), \
         rendered from its registry at start (`controller/src/telemetry/metrics.rs`): every \
         series is exported from the start, and every label value comes from a closed list \
         but `sink`, a ClusterNotificationSink's name (`unknown` for a name no sink has, \
         `other` past 64 names). Names, types and label names are also pinned by \
         `telemetry::metrics::tests::names_types_and_labels_are_the_published_ones`; \
         what each counts in detail: `controller/README.md`. Alerts on them: \
         [operations](../operations.md#alerts).\n\n\
         | metric | type | labels (values) | help |\n|---|---|---|---|\n",
    );
    for (name, family) in families(&sharded) {
        let labels = family
            .labels
            .iter()
            .map(|(label, values)| {
                if label == "le" {
                    format!(
                        "`le` ({} to {})",
                        values.first().map(String::as_str).unwrap_or_default(),
                        values
                            .iter()
                            .rev()
                            .find(|value| *value != "+Inf")
                            .map(String::as_str)
                            .unwrap_or_default()
                    )
                } else {
                    // Sorted: a family's series may be exported in hash order.
                    let mut values = values.clone();
                    values.sort();
                    format!(
                        "`{label}` ({})",
                        values
                            .iter()
                            .map(|value| format!("`{value}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let only_sharded = if plain_names.contains(&name) {
            ""
        } else {
            " (exported only with `--shards` above 1)"
        };
        let _ = writeln!(
            out,
            "| `{name}` | {} | {} | {}{only_sharded} |",
            family.kind,
            if labels.is_empty() {
                "none".to_owned()
            } else {
                labels
            },
            cell(&family.help)
        );
    }
    Page {
        path: "metrics.md".to_owned(),
        content: out.trim_end().to_owned() + "\n",
    }
}
