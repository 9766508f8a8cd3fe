//! The `list`, `history` and notifications tables: aligned columns under a header, one
//! row per rollout, per revision or per notification sink.

use std::fmt::Write as _;

use kube::ResourceExt;

use configrollout_api::{ConfigRollout, ConfigRolloutStatus};

use super::notifications::notification_rows;
use super::text::{phase_name, printable, time};
use super::waiting::waiting_on;

fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut text = String::new();
        for (index, cell) in cells.into_iter().enumerate() {
            if index == last {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}   ", width = widths[index]);
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// The `list` table: one row per rollout, with its namespace when `namespaces` is set.
pub fn render_list(rollouts: &[ConfigRollout], namespaces: bool) -> String {
    let mut header = vec![
        "NAME",
        "PHASE",
        "STAGE",
        "REVISION",
        "REGIONS",
        "WAITING-ON",
    ];
    if namespaces {
        header.insert(0, "NAMESPACE");
    }
    let rows: Vec<Vec<String>> = rollouts
        .iter()
        .map(|rollout| {
            let status = rollout.status.as_ref();
            let field = |get: fn(&ConfigRolloutStatus) -> Option<&String>| {
                status.and_then(get).cloned().unwrap_or_else(|| "-".into())
            };
            let mut row = vec![
                rollout.name_any(),
                phase_name(status.and_then(|s| s.phase)),
                field(|s| s.current_stage.as_ref()),
                field(|s| s.revision.as_ref()),
                field(|s| s.progress.as_ref()),
                waiting_on(rollout).what,
            ];
            if namespaces {
                row.insert(0, rollout.namespace().unwrap_or_default());
            }
            row
        })
        .collect();
    if rows.is_empty() {
        return "no configrollouts found\n".to_owned();
    }
    table(&header, &rows)
}

/// The `history` table: the revisions `status.history` keeps, oldest first.
pub fn render_history(rollout: &ConfigRollout) -> String {
    let history = rollout
        .status
        .as_ref()
        .map(|status| status.history.as_slice())
        .unwrap_or_default();
    if history.is_empty() {
        return format!("{}: no revision declared yet\n", rollout.name_any());
    }
    let rows: Vec<Vec<String>> = history
        .iter()
        .map(|record| {
            vec![
                record.name.clone(),
                time(&record.declared_at),
                record.digest.clone().unwrap_or_else(|| "-".into()),
                record.keys_set.to_string(),
                record.keys_removed.to_string(),
                record.outcome.clone().unwrap_or_else(|| "-".into()),
                match (record.authors.is_empty(), &record.authors_unknown) {
                    (_, Some(_)) if record.authors.is_empty() => "unknown".to_owned(),
                    (_, Some(_)) => format!("{},unknown", printable(&record.authors.join(","))),
                    (true, None) => "-".to_owned(),
                    (false, None) => printable(&record.authors.join(",")).into_owned(),
                },
                checked_by(record),
            ]
        })
        .collect();
    table(
        &[
            "REVISION",
            "DECLARED",
            "DIGEST",
            "KEYS-SET",
            "KEYS-REMOVED",
            "OUTCOME",
            "AUTHORS",
            "CHECKED-BY",
        ],
        &rows,
    )
}

/// The `get` view's notifications section: a heading, then one row per subscribed sink
/// (and per sink the status still delivers to that the spec no longer names) with its
/// triggers, the notices pending for it and how its last delivery attempt ended. A
/// subscription the controller has not recorded a delivery for yet shows `-`. Empty
/// when the rollout subscribes to nothing and its status records no delivery.
pub fn render_notifications(rollout: &ConfigRollout) -> String {
    let rows: Vec<Vec<String>> = notification_rows(rollout)
        .into_iter()
        .map(|row| {
            let mut sink = printable(&row.sink).into_owned();
            if !row.subscribed {
                sink.push_str(" (namespace)");
            }
            let mut cells = vec![sink, printable(&row.triggers).into_owned()];
            match row.delivery {
                Some(delivery) => cells.extend([
                    delivery.pending.to_string(),
                    printable(&delivery.last).into_owned(),
                    printable(&delivery.at).into_owned(),
                    delivery.given_up.to_string(),
                    printable(&delivery.message).into_owned(),
                ]),
                None => cells.extend(std::iter::repeat_n("-".to_owned(), 5)),
            }
            cells
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = "notifications:\n".to_owned();
    for line in table(
        &[
            "SINK", "TRIGGERS", "PENDING", "LAST", "AT", "GIVEN-UP", "MESSAGE",
        ],
        &rows,
    )
    .lines()
    {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// The schemas (`name@generation`) and external validators a revision passed, or `-`.
fn checked_by(record: &configrollout_api::RevisionRecord) -> String {
    let schemas = record.schemas.iter().map(|schema| {
        let prefix = match schema.kind {
            configrollout_api::SchemaKind::ConfigSchema => "",
            configrollout_api::SchemaKind::ClusterConfigSchema => "cluster:",
        };
        format!("{prefix}{}@{}", schema.name, schema.generation)
    });
    let validators = record
        .validated_by
        .iter()
        .map(|name| format!("validator:{name}"));
    let all: Vec<String> = schemas.chain(validators).collect();
    if all.is_empty() {
        "-".to_owned()
    } else {
        printable(&all.join(",")).into_owned()
    }
}
