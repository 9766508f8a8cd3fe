//! The Rollouts page's table: one row per rollout the caller may list, with phase,
//! stage, revision, regions done/total and what it waits on (the plugin's `list`, as
//! HTML).

use std::fmt::Write as _;

use kube::ResourceExt;

use super::html::{escape, rollout_href};
use crate::render::waiting_on;
use configrollout_api::{ConfigRollout, RolloutPhase};

/// The CSS class of a phase.
pub fn phase_class(phase: Option<RolloutPhase>) -> &'static str {
    match phase {
        None | Some(RolloutPhase::Pending) => "phase-pending",
        Some(RolloutPhase::Progressing) => "phase-progressing",
        Some(RolloutPhase::Paused) => "phase-paused",
        Some(RolloutPhase::AwaitingApproval) => "phase-awaiting",
        Some(RolloutPhase::Halted) => "phase-halted",
        Some(RolloutPhase::RollingBack) => "phase-rollingback",
        Some(RolloutPhase::RolledBack) => "phase-rolledback",
        Some(RolloutPhase::Complete) => "phase-complete",
        Some(RolloutPhase::Refused) => "phase-refused",
    }
}

/// A phase as a badge.
pub fn phase_badge(phase: Option<RolloutPhase>) -> String {
    let name = phase.map_or_else(|| "-".to_owned(), |phase| format!("{phase:?}"));
    format!(
        r#"<span class="badge {}">{}</span>"#,
        phase_class(phase),
        escape(&name)
    )
}

/// The table of `rollouts` (in the order given), and what `scope` they were listed in.
pub fn rollouts_table(rollouts: &[&ConfigRollout], scope: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<h1>Rollouts <span class="count">{} in {}</span></h1>"#,
        rollouts.len(),
        escape(scope)
    );
    if rollouts.is_empty() {
        out.push_str(r#"<p class="empty">no configrollouts found</p>"#);
        return out;
    }
    out.push_str(
        r#"<table class="rollouts"><thead><tr><th>Namespace</th><th>Name</th><th>Phase</th><th>Stage</th><th>Revision</th><th>Regions</th><th>Waiting on</th></tr></thead><tbody>"#,
    );
    for rollout in rollouts {
        let namespace = rollout.namespace().unwrap_or_default();
        let name = rollout.name_any();
        let status = rollout.status.as_ref();
        let text = |value: Option<&String>| escape(value.map_or("-", String::as_str));
        let _ = write!(
            out,
            r#"<tr data-rollout="{ns}/{n}"><td>{ns}</td><td><a href="{href}">{n}</a></td><td>{phase}</td><td>{stage}</td><td>{revision}</td><td>{progress}</td><td>{waiting}</td></tr>"#,
            ns = escape(&namespace),
            n = escape(&name),
            href = escape(&rollout_href(&namespace, &name)),
            phase = phase_badge(status.and_then(|s| s.phase)),
            stage = text(status.and_then(|s| s.current_stage.as_ref())),
            revision = text(status.and_then(|s| s.revision.as_ref())),
            progress = text(status.and_then(|s| s.progress.as_ref())),
            waiting = escape(&waiting_on(rollout).what),
        );
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use configrollout_api::ConfigRolloutStatus;

    pub(crate) fn rollout(namespace: &str, name: &str) -> ConfigRollout {
        let mut rollout: ConfigRollout = serde_saphyr::from_str(&format!(
            "apiVersion: configrollout.dev/v1alpha1\nkind: ConfigRollout\nmetadata: {{name: {name:?}, namespace: {namespace}}}\nspec:\n  target: {{namespace: app, name: app}}\n  data: {{timeout_ms: \"s3cr3t-value\"}}\n  stages:\n    - name: canary\n      regions: {{names: [region-1]}}\n"
        ))
        .expect("rollout");
        rollout.status = Some(ConfigRolloutStatus {
            phase: Some(RolloutPhase::Progressing),
            revision: Some("r2".to_owned()),
            current_stage: Some("canary".to_owned()),
            progress: Some("0/1".to_owned()),
            ..ConfigRolloutStatus::default()
        });
        rollout
    }

    #[test]
    fn each_rollout_is_a_row_with_a_link_and_no_value() {
        let first = rollout("team", "app");
        let second = rollout("team", "<img src=x onerror=alert(1)>");
        let table = rollouts_table(&[&first, &second], "all namespaces");
        assert!(table.contains("2 in all namespaces"), "{table}");
        assert!(
            table.contains(r#"<a href="/r/team/app">app</a>"#),
            "{table}"
        );
        assert!(
            table.contains(r#"<span class="badge phase-progressing">Progressing</span>"#),
            "{table}"
        );
        assert!(table.contains("<td>r2</td><td>0/1</td>"), "{table}");
        assert!(!table.contains("<img"), "names are escaped: {table}");
        assert!(
            table.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{table}"
        );
        assert!(!table.contains("s3cr3t-value"), "no configuration value");
    }

    #[test]
    fn an_empty_list_says_so() {
        assert!(rollouts_table(&[], "namespace team").contains("no configrollouts found"));
    }
}
