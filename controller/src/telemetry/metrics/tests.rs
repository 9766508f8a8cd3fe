use super::*;

fn consistent<L: LabelValue + PartialEq>() {
    for (position, value) in L::ALL.iter().enumerate() {
        assert_eq!(value.index(), position, "{value:?} out of place in ALL");
    }
    let mut names: Vec<_> = L::ALL.iter().map(|value| value.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), L::ALL.len(), "duplicate label values");
}

#[test]
fn label_sets_are_closed_and_consistent() {
    consistent::<ReconcileResult>();
    consistent::<WriteResult>();
    consistent::<SampleVerdict>();
    consistent::<RolloutPhase>();
    consistent::<ErrorCategory>();
    consistent::<RegionState>();
    consistent::<WriteKind>();
    consistent::<StateRefusal>();
    assert_eq!(RolloutPhase::ALL.len(), 9);
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Awkward {
    Plain,
    Nasty,
}

impl LabelValue for Awkward {
    const LABEL: &'static str = "kind";
    const ALL: &'static [Self] = &[Awkward::Plain, Awkward::Nasty];
    fn as_str(self) -> &'static str {
        match self {
            Awkward::Plain => "plain",
            Awkward::Nasty => "a\\b\"c\nd",
        }
    }
    fn index(self) -> usize {
        match self {
            Awkward::Plain => 0,
            Awkward::Nasty => 1,
        }
    }
}

fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, registry).unwrap();
    out
}

#[test]
fn label_values_are_escaped() {
    let counter = CounterVec::<Awkward>::default();
    counter.inc(Awkward::Nasty);
    let mut registry = Registry::default();
    registry.register(
        counter_name("x_total"),
        help("Help with \\ and\nnewline."),
        counter,
    );
    assert_eq!(
        encode(&registry),
        "# HELP x_total Help with \\\\ and\\nnewline.\n\
             # TYPE x_total counter\n\
             x_total{kind=\"plain\"} 0\n\
             x_total{kind=\"a\\\\b\\\"c\\nd\"} 1\n"
    );
}

#[test]
fn histogram_buckets_are_cumulative_with_inf_sum_and_count() {
    static BOUNDS: &[f64] = &[0.1, 1.0, 2.5];
    let histogram = Histogram::new(BOUNDS);
    histogram.observe(0.05);
    histogram.observe(0.1);
    histogram.observe(2.0);
    histogram.observe_duration(Duration::from_secs(30));
    let mut registry = Registry::default();
    registry.register("d_seconds", help("Durations."), histogram);
    assert_eq!(
        encode(&registry),
        "# HELP d_seconds Durations.\n\
             # TYPE d_seconds histogram\n\
             d_seconds_bucket{le=\"0.1\"} 2\n\
             d_seconds_bucket{le=\"1\"} 2\n\
             d_seconds_bucket{le=\"2.5\"} 3\n\
             d_seconds_bucket{le=\"+Inf\"} 4\n\
             d_seconds_sum 32.15\n\
             d_seconds_count 4\n"
    );
}

/// The exported names, types and label sets: what dashboards and alert rules are
/// written against. Changing this list breaks them.
const CONTRACT: &[(&str, &str, &str)] = &[
    ("configrollout_reconcile_total", "counter", "result"),
    (
        "configrollout_reconcile_errors_total",
        "counter",
        "category",
    ),
    (
        "configrollout_reconcile_duration_seconds",
        "histogram",
        "le",
    ),
    ("configrollout_region_writes_total", "counter", "result"),
    ("configrollout_status_patches_total", "counter", "result"),
    (
        "configrollout_status_patch_duration_seconds",
        "histogram",
        "le",
    ),
    ("configrollout_gate_samples_total", "counter", "verdict"),
    (
        "configrollout_gate_dry_run_samples_total",
        "counter",
        "verdict",
    ),
    ("configrollout_writes_dropped_total", "counter", "write"),
    ("configrollout_leader", "gauge", ""),
    ("configrollout_rollouts", "gauge", "phase"),
    ("configrollout_rollouts_drifted", "gauge", ""),
    ("configrollout_regions", "gauge", "state"),
    ("configrollout_region_watches", "gauge", ""),
    (
        "configrollout_region_state_refused_total",
        "counter",
        "reason",
    ),
    ("configrollout_reconciles_deferred_total", "counter", ""),
    ("configrollout_status_writes_held_total", "counter", ""),
    (
        "configrollout_notifications_total",
        "counter",
        "sink,result",
    ),
    (
        "configrollout_notification_latency_seconds",
        "histogram",
        "le",
    ),
    ("configrollout_notifications_queued", "gauge", ""),
];

#[test]
fn names_types_and_labels_are_the_published_ones() {
    let metrics = Metrics::new();
    // The one family labelled by sink: the `unknown` sink from the start, a real sink
    // from its first attempt.
    metrics.notifications.count(
        Some("team-slack"),
        crate::telemetry::metrics::DeliveryOutcome::Delivered,
        1,
    );
    let text = metrics.render();
    let families: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|line| line.split_once(' '))
        .collect();
    let expected: Vec<(&str, &str)> = CONTRACT
        .iter()
        .map(|(name, kind, _)| (*name, *kind))
        .collect();
    assert_eq!(families, expected);
    for line in text.lines().filter(|line| line.starts_with("# HELP ")) {
        assert!(!line.ends_with(".."), "{line}");
    }
    for sample in text.lines().filter(|line| !line.starts_with('#')) {
        let (series, _value) = sample.rsplit_once(' ').unwrap();
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let (family, kind, label) = CONTRACT
            .iter()
            .find(|(family, kind, _)| match *kind {
                "histogram" => name
                    .strip_prefix(family)
                    .is_some_and(|rest| ["_bucket", "_sum", "_count"].contains(&rest)),
                _ => name == *family,
            })
            .unwrap_or_else(|| panic!("{sample} belongs to no family"));
        let label_names: Vec<&str> = labels
            .split(',')
            .filter(|pair| !pair.is_empty())
            .filter_map(|pair| pair.split_once('=').map(|(name, _)| name))
            .collect();
        let expected: Vec<&str> = match (*kind, name.ends_with("_bucket")) {
            ("histogram", false) => vec![],
            _ => label.split(',').filter(|l| !l.is_empty()).collect(),
        };
        assert_eq!(label_names, expected, "{sample} ({family})");
    }
    assert!(text.ends_with('\n'));
}

#[test]
fn render_exports_every_series_from_the_start() {
    let metrics = Metrics::new();
    metrics.reconcile_total.inc(ReconcileResult::Ok);
    metrics.reconcile_total.inc(ReconcileResult::Ok);
    metrics.region_writes_total.inc(WriteResult::Conflict);
    metrics
        .gate_samples_total
        .add(SampleVerdict::Inconclusive, 3);
    metrics.leader.set(1);
    let text = metrics.render();
    let mut expected = vec![
        "# TYPE configrollout_reconcile_total counter".to_owned(),
        "configrollout_reconcile_total{result=\"ok\"} 2".to_owned(),
        "configrollout_reconcile_total{result=\"error\"} 0".to_owned(),
        "# TYPE configrollout_reconcile_duration_seconds histogram".to_owned(),
        "configrollout_reconcile_duration_seconds_bucket{le=\"0.005\"} 0".to_owned(),
        "configrollout_reconcile_duration_seconds_bucket{le=\"10\"} 0".to_owned(),
        "configrollout_reconcile_duration_seconds_bucket{le=\"+Inf\"} 0".to_owned(),
        "configrollout_reconcile_duration_seconds_count 0".to_owned(),
        "configrollout_region_writes_total{result=\"conflict\"} 1".to_owned(),
        "configrollout_gate_samples_total{verdict=\"inconclusive\"} 3".to_owned(),
        "# TYPE configrollout_leader gauge".to_owned(),
        "configrollout_leader 1".to_owned(),
    ];
    let every = |name: &str, values: Vec<&str>, label: &str| -> Vec<String> {
        values
            .into_iter()
            .map(|value| format!("{name}{{{label}=\"{value}\"}}"))
            .collect()
    };
    let labelled = [
        every(
            "configrollout_reconcile_errors_total",
            ErrorCategory::ALL.iter().map(|v| v.as_str()).collect(),
            "category",
        ),
        every(
            "configrollout_region_writes_total",
            vec!["ok", "conflict", "error"],
            "result",
        ),
        every(
            "configrollout_status_patches_total",
            vec!["ok", "conflict", "error"],
            "result",
        ),
        every(
            "configrollout_gate_samples_total",
            vec!["successful", "failed", "inconclusive", "error"],
            "verdict",
        ),
        every(
            "configrollout_writes_dropped_total",
            vec![
                "rollout_status",
                "region_status",
                "revision",
                "region_object",
                "event",
            ],
            "write",
        ),
        every(
            "configrollout_rollouts",
            vec![
                "Pending",
                "Progressing",
                "Paused",
                "AwaitingApproval",
                "Halted",
                "RollingBack",
                "RolledBack",
                "Complete",
            ],
            "phase",
        ),
        every(
            "configrollout_regions",
            vec!["reachable", "unreachable", "unknown"],
            "state",
        ),
    ];
    for series in labelled.iter().flatten() {
        assert!(
            text.lines()
                .any(|line| line.starts_with(&format!("{series} "))),
            "missing {series} in\n{text}"
        );
    }
    assert_eq!(
        ErrorCategory::ALL
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>(),
        ["api", "invalid", "not_leader", "panic"]
    );
    expected.retain(|line| !text.lines().any(|candidate| candidate == line));
    assert!(expected.is_empty(), "missing {expected:?} in\n{text}");
}

#[test]
fn one_record_moves_every_metric_a_reconcile_moves() {
    let metrics = Metrics::new();
    metrics.record_reconcile(&ReconcileRecord {
        duration: Duration::from_millis(40),
        error: Some(ErrorCategory::Invalid),
        region_writes: 3,
        region_write_conflicts: 2,
        region_write_failures: 1,
        samples_judged: SampleTally {
            successful: 2,
            failed: 1,
            inconclusive: 0,
            errors: 1,
        },
        dry_run_samples_judged: SampleTally {
            failed: 4,
            ..SampleTally::default()
        },
        status_patch: Some((WriteResult::Conflict, Duration::from_millis(5))),
        status_held: true,
    });
    assert_eq!(metrics.reconcile_total.get(ReconcileResult::Error), 1);
    assert_eq!(
        metrics.reconcile_errors_total.get(ErrorCategory::Invalid),
        1
    );
    assert_eq!(metrics.region_writes_total.get(WriteResult::Ok), 3);
    assert_eq!(metrics.region_writes_total.get(WriteResult::Conflict), 2);
    assert_eq!(metrics.region_writes_total.get(WriteResult::Error), 1);
    assert_eq!(metrics.gate_samples_total.get(SampleVerdict::Successful), 2);
    assert_eq!(metrics.gate_samples_total.get(SampleVerdict::Failed), 1);
    assert_eq!(metrics.gate_samples_total.get(SampleVerdict::Error), 1);
    assert_eq!(
        metrics
            .gate_dry_run_samples_total
            .get(SampleVerdict::Failed),
        4,
        "a dry run's samples are counted apart from the gates' the alerts read"
    );
    assert_eq!(metrics.status_patches_total.get(WriteResult::Conflict), 1);
    let text = metrics.render();
    assert!(text.contains("configrollout_region_writes_total{result=\"conflict\"} 2\n"));
    assert!(text.contains("configrollout_reconcile_errors_total{category=\"invalid\"} 1\n"));
    assert!(text.contains("configrollout_reconcile_duration_seconds_count 1\n"));
    assert!(text.contains("configrollout_status_patch_duration_seconds_count 1\n"));
    assert!(text.contains("configrollout_status_writes_held_total 1\n"));
}

fn sample(text: &str, series: &str) -> i64 {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

fn phase_count(text: &str, phase: &str) -> i64 {
    sample(
        text,
        &format!("configrollout_rollouts{{phase=\"{phase}\"}}"),
    )
}

fn region_count(text: &str, state: &str) -> i64 {
    sample(text, &format!("configrollout_regions{{state=\"{state}\"}}"))
}

#[test]
fn the_rollouts_gauge_counts_what_the_census_holds_at_each_scrape() {
    let metrics = Arc::new(Metrics::new());
    // Nothing watched yet (a standby): every phase 0.
    assert_eq!(phase_count(&metrics.render(), "Complete"), 0);

    let known = Arc::new(Mutex::new(Census {
        phases: vec![
            Some(RolloutPhase::Complete),
            Some(RolloutPhase::Complete),
            Some(RolloutPhase::Halted),
            None,
        ],
        drifted: 1,
        regions: vec![
            RegionState::Reachable,
            RegionState::Unreachable,
            RegionState::Reachable,
            RegionState::Unknown,
        ],
    }));
    let census = {
        let known = known.clone();
        move || known.lock().unwrap().clone()
    };
    let guard = metrics.take_census_from(census);
    let text = metrics.render();
    assert_eq!(phase_count(&text, "Complete"), 2);
    assert_eq!(phase_count(&text, "Halted"), 1);
    assert_eq!(phase_count(&text, "Pending"), 1, "no status yet is Pending");
    assert_eq!(phase_count(&text, "Progressing"), 0);
    assert_eq!(sample(&text, "configrollout_rollouts_drifted"), 1);
    assert_eq!(region_count(&text, "reachable"), 2);
    assert_eq!(region_count(&text, "unreachable"), 1);
    assert_eq!(region_count(&text, "unknown"), 1);

    // A rollout deleted, a region back: the counts follow at the next scrape.
    {
        let mut known = known.lock().unwrap();
        known.phases.remove(0);
        known.regions[1] = RegionState::Reachable;
    }
    let text = metrics.render();
    assert_eq!(phase_count(&text, "Complete"), 1);
    assert_eq!(region_count(&text, "unreachable"), 0);
    assert_eq!(region_count(&text, "reachable"), 3);
    *known.lock().unwrap() = Census::default();
    let text = metrics.render();
    for phase in RolloutPhase::ALL {
        assert_eq!(phase_count(&text, phase.as_str()), 0, "{phase:?}");
    }
    assert_eq!(sample(&text, "configrollout_rollouts_drifted"), 0);

    // Stopped leading: the census goes, and so do the counts.
    {
        let mut known = known.lock().unwrap();
        known.phases.push(Some(RolloutPhase::Paused));
        known.drifted = 1;
        known.regions.push(RegionState::Unreachable);
    }
    assert_eq!(phase_count(&metrics.render(), "Paused"), 1);
    drop(guard);
    let text = metrics.render();
    assert_eq!(phase_count(&text, "Paused"), 0);
    assert_eq!(sample(&text, "configrollout_rollouts_drifted"), 0);
    assert_eq!(region_count(&text, "unreachable"), 0);
}

#[test]
fn only_a_sharded_controller_exposes_the_shards_it_holds() {
    assert!(
        !Metrics::new()
            .render()
            .contains("configrollout_shards_held")
    );
    let (_leading, leading_rx) = tokio::sync::watch::channel(true);
    let (_reachable, reachable_rx) = tokio::sync::watch::channel(true);
    let single = Shards::single(LeaderState::from_channels(leading_rx, reachable_rx), "a");
    let text = Metrics::with_shards(single).render();
    assert!(
        text.contains("# TYPE configrollout_shards_held gauge"),
        "{text}"
    );
    assert!(text.contains("\nconfigrollout_shards_held 1\n"), "{text}");
}

#[test]
fn the_leader_gauge_follows_the_election_at_each_scrape() {
    let metrics = Metrics::new();
    let (leading, leading_rx) = tokio::sync::watch::channel(false);
    let (_reachable, reachable_rx) = tokio::sync::watch::channel(true);
    metrics.follow_leader(LeaderState::from_channels(leading_rx, reachable_rx));
    assert!(metrics.render().contains("\nconfigrollout_leader 0\n"));
    leading.send_replace(true);
    assert!(metrics.render().contains("\nconfigrollout_leader 1\n"));
    // The elector gone: not leading, whatever it said last.
    drop(leading);
    assert!(metrics.render().contains("\nconfigrollout_leader 0\n"));
}

#[test]
fn every_label_value_sits_at_its_index() {
    fn indexes_follow_all(all: &[impl LabelValue]) {
        for (position, label) in all.iter().enumerate() {
            assert_eq!(label.index(), position, "{}", label.as_str());
        }
    }
    indexes_follow_all(ReconcileResult::ALL);
    indexes_follow_all(WriteResult::ALL);
    indexes_follow_all(SampleVerdict::ALL);
    indexes_follow_all(RolloutPhase::ALL);
    indexes_follow_all(ErrorCategory::ALL);
    indexes_follow_all(WriteKind::ALL);
    indexes_follow_all(RegionState::ALL);
}
