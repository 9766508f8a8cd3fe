use super::*;
use crate::prometheus::ResponseLimits;
use crate::telemetry::logging::LogFormat;

fn parse(args: &[&str]) -> Result<Options, clap::Error> {
    Options::parse_args(std::iter::once(&CONTROLLER_NAME).chain(args))
}

#[test]
fn the_options_are_well_formed() {
    <Options as clap::CommandFactory>::command().debug_assert();
}

#[test]
fn a_boolean_flag_alone_means_true_and_an_empty_url_none() {
    let options = parse(&["--four-eyes", "--prometheus-url="]).unwrap();
    assert!(options.four_eyes);
    assert!(options.leader_election);
    assert_eq!(options.prometheus_url, None);
    let options = parse(&["--four-eyes", "false", "--leader-election=false"]).unwrap();
    assert!(!options.four_eyes);
    assert!(!options.leader_election);
    assert_eq!(options.lease_duration, Duration::from_secs(15));
}

#[test]
fn a_malformed_duration_or_address_is_refused_naming_the_flag() {
    for args in [
        ["--lease-duration", "soon"],
        ["--lease-duration", "999999999999h"],
        ["--probe-addr", "nowhere"],
    ] {
        let error = parse(&args).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains(args[0]), "{error}");
    }
}

#[test]
fn the_gate_settle_time_is_a_minute_unless_told_and_at_most_a_day() {
    assert_eq!(
        parse(&[]).unwrap().gate_settle_time,
        crate::engine::DEFAULT_GATE_SETTLE_TIME
    );
    assert_eq!(
        parse(&["--gate-settle-time", "0s"])
            .unwrap()
            .gate_settle_time,
        Duration::ZERO
    );
    assert_eq!(
        parse(&["--gate-settle-time=1h30m"])
            .unwrap()
            .gate_settle_time,
        Duration::from_secs(5400)
    );
    for value in ["25h", "soon"] {
        let error = parse(&["--gate-settle-time", value]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("--gate-settle-time"), "{error}");
    }
}

#[test]
fn the_gate_interval_floor_is_a_second_unless_raised_and_never_lowered() {
    assert_eq!(
        parse(&[]).unwrap().min_gate_interval,
        Duration::from_secs(1)
    );
    assert_eq!(
        parse(&["--min-gate-interval=15s"])
            .unwrap()
            .min_gate_interval,
        Duration::from_secs(15)
    );
    for value in ["500ms", "0s", "25h", "often"] {
        let error = parse(&["--min-gate-interval", value]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("--min-gate-interval"), "{error}");
    }
}

fn pending_task<T: Send + 'static>() -> Option<JoinHandle<T>> {
    Some(tokio::spawn(std::future::pending()))
}

#[tokio::test]
async fn a_work_loop_that_panics_is_the_reason_the_process_is_dead() {
    let mut tasks = Tasks {
        work: Some(tokio::spawn(async { panic!("reconcile bug") })),
        probe: pending_task(),
        election: pending_task(),
    };
    assert_eq!(tasks.first_to_end().await, "work loop ended");
    assert!(tasks.work.is_none(), "the ended task is joined");
    assert!(tasks.probe.is_some() && tasks.election.is_some());
}

#[tokio::test]
async fn an_elector_that_returns_is_the_reason_the_process_is_dead() {
    let mut tasks = Tasks {
        work: pending_task(),
        probe: pending_task(),
        election: Some(tokio::spawn(async { Ok(()) })),
    };
    assert_eq!(tasks.first_to_end().await, "leader election ended");
    let mut tasks = Tasks {
        work: pending_task(),
        probe: Some(tokio::spawn(async {})),
        election: None,
    };
    assert_eq!(tasks.first_to_end().await, "region probe ended");
}

#[tokio::test]
async fn tasks_that_run_or_were_all_joined_are_not_an_end() {
    let mut tasks = Tasks {
        work: pending_task(),
        probe: pending_task(),
        election: None,
    };
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(tasks.first_to_end().now_or_never().is_none());
    assert!(
        tasks.work.is_some(),
        "a running task is kept when the wait is dropped"
    );
    let mut none = Tasks {
        work: None,
        probe: None,
        election: None,
    };
    assert!(none.first_to_end().now_or_never().is_none());
}

#[test]
fn flags_override_defaults_in_both_spellings() {
    let options = parse(&[
        "--namespace",
        "ops",
        "--log-format=json",
        "--leader-election",
        "false",
        "--prometheus-url=http://127.0.0.1:9090",
        "--prometheus-max-response-bytes",
        "1048576",
        "--prometheus-max-series=50",
        "--allow-unsafe-kubeconfig=true",
    ])
    .unwrap();
    assert_eq!(options.namespace, "ops");
    assert_eq!(options.log_format, LogFormat::Json);
    assert!(!options.leader_election);
    assert!(options.allow_unsafe_kubeconfig);
    assert_eq!(
        options.prometheus_url.as_deref(),
        Some("http://127.0.0.1:9090")
    );
    assert_eq!(
        options.prometheus_limits(),
        ResponseLimits {
            max_bytes: 1_048_576,
            max_series: 50,
        }
    );
}

#[test]
fn prometheus_answers_are_bounded_by_default() {
    let options = parse(&[]).unwrap();
    assert_eq!(options.prometheus_limits().max_bytes, 4 * 1024 * 1024);
    assert_eq!(options.prometheus_limits().max_series, 1000);
}

#[test]
fn a_zero_or_malformed_prometheus_limit_is_refused() {
    for args in [
        ["--prometheus-max-series", "0"],
        ["--prometheus-max-series", "-1"],
        ["--prometheus-max-response-bytes", "4Mi"],
    ] {
        let error = parse(&args).unwrap_err();
        assert!(error.to_string().contains(args[0]), "{error}");
    }
}

#[test]
fn an_unknown_option_is_named() {
    let error = parse(&["--colour", "blue"]).unwrap_err();
    assert!(error.to_string().contains("--colour"), "{error}");
}

#[test]
fn a_flag_without_value_is_named() {
    let error = parse(&["--namespace"]).unwrap_err();
    assert!(error.to_string().contains("--namespace"), "{error}");
}

#[test]
fn unsafe_kubeconfigs_are_refused_by_default() {
    let options = parse(&[]).unwrap();
    assert!(!options.allow_unsafe_kubeconfig);
}

#[test]
fn shards_default_to_one_and_are_bounded() {
    assert_eq!(parse(&[]).unwrap().shards, 1);
    assert_eq!(parse(&["--shards", "4"]).unwrap().shards, 4);
    assert_eq!(parse(&["--shards=64"]).unwrap().shards, 64);
    for bad in ["0", "65", "-1", "four"] {
        let error = parse(&["--shards", bad]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("--shards"), "{error}");
        assert!(error.to_string().contains("from 1 to 64"), "{error}");
    }
    let error = parse(&["--shards", "4", "--leader-election=false"]).unwrap_err();
    assert_eq!(error.exit_code(), 2);
    assert!(error.to_string().contains("--leader-election"), "{error}");
    assert_eq!(
        parse(&["--shards", "1", "--leader-election=false"])
            .unwrap()
            .shards,
        1
    );
}

#[test]
fn a_malformed_boolean_is_refused() {
    let error = parse(&["--leader-election", "yes"]).unwrap_err();
    assert!(error.to_string().contains("--leader-election"), "{error}");
}
