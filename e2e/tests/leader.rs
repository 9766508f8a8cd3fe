//! Leader election on the lab's real hub kube-apiserver: one Lease, several electors with
//! distinct identities, under the controller's own RBAC. One lab for the test binary; the
//! steps run in order on it.

use std::time::Duration;

use configrollout::leader::{LeaderElector, LeaderState, LeaseConfig};
use configrollout_e2e::proxy::{ProxyMode, TcpProxy};
use configrollout_e2e::{HUB, Lab, LabChild, LabOptions, SYSTEM_NAMESPACE, User, process_alive};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The production default: renew every 5 s, stop leading after 10 s without renewal, each
/// call at most 2.5 s (a loaded machine must not cost the leader its Lease).
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// Bound on waiting for an election outcome.
const ELECTION_DEADLINE: Duration = Duration::from_secs(60);
/// Bound on a single API call of the test itself.
const CALL: Duration = Duration::from_secs(20);

struct Candidate {
    identity: String,
    state: LeaderState,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), configrollout::leader::LeaderError>>,
}

fn candidate(lab: &Lab, lease: &str, identity: &str) -> Candidate {
    let client = lab
        .client(HUB, User::Controller)
        .expect("controller client");
    candidate_on(client, SYSTEM_NAMESPACE, lease, identity)
}

fn candidate_on(client: kube::Client, namespace: &str, lease: &str, identity: &str) -> Candidate {
    let config = LeaseConfig::new(namespace, lease, identity).with_lease_duration(LEASE_DURATION);
    let (elector, state) = LeaderElector::new(client, config).expect("valid lease config");
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(elector.run(shutdown.clone()));
    Candidate {
        identity: identity.to_owned(),
        state,
        shutdown,
        task,
    }
}

async fn read_lease(lab: &Lab, name: &str) -> Lease {
    read_lease_in(lab, HUB, SYSTEM_NAMESPACE, name).await
}

async fn read_lease_in(lab: &Lab, cluster: &str, namespace: &str, name: &str) -> Lease {
    let api: Api<Lease> = Api::namespaced(
        lab.client(cluster, User::Admin).expect("admin client"),
        namespace,
    );
    tokio::time::timeout(CALL, api.get(name))
        .await
        .expect("the lease read answers in time")
        .expect("the lease exists")
}

fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

fn transitions(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.lease_transitions)
        .unwrap_or(0)
}

/// Waits until one of `candidates` leads and returns its index, asserting at every look that at
/// most one of them leads.
async fn leader_among(candidates: &[&Candidate]) -> usize {
    let deadline = tokio::time::Instant::now() + ELECTION_DEADLINE;
    loop {
        let leading: Vec<usize> = candidates
            .iter()
            .enumerate()
            .filter(|(_, candidate)| candidate.state.is_leading())
            .map(|(index, _)| index)
            .collect();
        assert!(
            leading.len() <= 1,
            "two candidates lead at once: {leading:?}"
        );
        if let Some(index) = leading.first() {
            return *index;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nobody led within {ELECTION_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Watches `candidates` for `period`, asserting that exactly `leader` leads throughout.
async fn leadership_holds(candidates: &[&Candidate], leader: usize, period: Duration) {
    let until = tokio::time::Instant::now() + period;
    while tokio::time::Instant::now() < until {
        for (index, candidate) in candidates.iter().enumerate() {
            assert_eq!(
                candidate.state.is_leading(),
                index == leader,
                "{} leading={} while {} should be the only leader",
                candidate.identity,
                candidate.state.is_leading(),
                candidates[leader].identity
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn two_candidates_elect_exactly_one_and_a_release_hands_over(lab: &Lab) {
    let lease = "configrollout-controller";
    let a = candidate(lab, lease, "e2e-a");
    let b = candidate(lab, lease, "e2e-b");
    let first = leader_among(&[&a, &b]).await;
    let (leader, standby) = if first == 0 { (a, b) } else { (b, a) };
    let both = [&leader, &standby];

    // Several renewals later it still leads alone, and the Lease names it.
    leadership_holds(&both, 0, LEASE_DURATION).await;
    let held = read_lease(lab, lease).await;
    assert_eq!(holder(&held), Some(leader.identity.as_str()));
    let before = transitions(&held);
    assert!(standby.state.is_reachable(), "the standby sees the Lease");

    // Graceful stop: leadership ends locally, then the Lease is released (not left to
    // expire), and the standby takes it.
    leader.shutdown.cancel();
    leader
        .task
        .await
        .expect("the elector task ends")
        .expect("the release succeeds");
    assert!(!leader.state.is_leading());
    let released = read_lease(lab, lease).await;
    assert_ne!(
        holder(&released),
        Some(leader.identity.as_str()),
        "the stopped leader released the Lease"
    );

    assert_eq!(leader_among(&[&standby]).await, 0);
    let taken = read_lease(lab, lease).await;
    assert_eq!(holder(&taken), Some(standby.identity.as_str()));
    assert_eq!(transitions(&taken), before + 1);

    standby.shutdown.cancel();
    standby
        .task
        .await
        .expect("the elector task ends")
        .expect("the release succeeds");
    assert_eq!(holder(&read_lease(lab, lease).await), None);
}

async fn a_leader_that_stops_renewing_is_replaced_after_expiry(lab: &Lab) {
    let lease = "configrollout-controller";
    let a = candidate(lab, lease, "e2e-c");
    assert_eq!(leader_among(&[&a]).await, 0);
    let b = candidate(lab, lease, "e2e-d");
    // The newcomer stands by while the holder renews.
    leadership_holds(&[&a, &b], 0, LEASE_DURATION).await;
    let before = transitions(&read_lease(lab, lease).await);

    // The holder dies without releasing: its state reads "not leading" at once, and the
    // standby takes over once it has seen the Lease unchanged for a full duration.
    a.task.abort();
    assert!(a.task.await.is_err_and(|error| error.is_cancelled()));
    assert!(!a.state.is_leading());

    assert_eq!(leader_among(&[&b]).await, 0);
    let taken = read_lease(lab, lease).await;
    assert_eq!(holder(&taken), Some(b.identity.as_str()));
    assert_eq!(transitions(&taken), before + 1);

    b.shutdown.cancel();
    b.task
        .await
        .expect("the elector task ends")
        .expect("the release succeeds");
}

/// Waits until `candidate` no longer leads.
async fn stops_leading(candidate: &Candidate) {
    tokio::time::timeout(ELECTION_DEADLINE, candidate.state.lost())
        .await
        .expect("leadership ends within the deadline");
}

async fn a_leader_cut_off_from_its_api_server_stops_leading(lab: &mut Lab) {
    // A region's apiserver stands in for the hub here, because the lab can stop it.
    let region = lab.regions()[0].clone();
    let (namespace, lease) = ("default", "leader-e2e-partition");
    let client = lab.client(&region, User::Admin).expect("admin client");
    let cut_off = candidate_on(client, namespace, lease, "e2e-e");
    assert_eq!(leader_among(&[&cut_off]).await, 0);
    let before = transitions(&read_lease_in(lab, &region, namespace, lease).await);

    // Renewals fail: leadership ends at the renew deadline although the process lives on.
    lab.stop_region(&region).expect("the region stops");
    stops_leading(&cut_off).await;
    assert!(!cut_off.state.is_reachable());
    assert!(!cut_off.task.is_finished(), "the elector keeps trying");
    // Stopping now cannot release the Lease, and says so.
    cut_off.shutdown.cancel();
    assert!(
        cut_off.task.await.expect("the elector task ends").is_err(),
        "an unreachable API server fails the release"
    );

    // Restarted with the same identity (a container restart keeps the pod name), it
    // renews its own Lease instead of taking it over.
    lab.start_region(&region)
        .await
        .expect("the region restarts");
    let client = lab.client(&region, User::Admin).expect("admin client");
    let restarted = candidate_on(client, namespace, lease, "e2e-e");
    assert_eq!(leader_among(&[&restarted]).await, 0);
    let renewed = read_lease_in(lab, &region, namespace, lease).await;
    assert_eq!(holder(&renewed), Some("e2e-e"));
    assert_eq!(transitions(&renewed), before);
    restarted.shutdown.cancel();
    restarted
        .task
        .await
        .expect("the elector task ends")
        .expect("the release succeeds");
}

/// The Deployment's `terminationGracePeriodSeconds`: the kubelet's SIGKILL comes after it.
const TERMINATION_GRACE: Duration = Duration::from_secs(30);

/// How the hub goes away in one SIGTERM trial, and when the signal comes.
struct Trial {
    mode: ProxyMode,
    /// Wait until the controller has noticed it no longer leads before the signal.
    after_leadership_lost: bool,
    /// Bring the hub back right after the signal, as a hub that flaps would.
    hub_returns: bool,
}

/// The controller, leading through a proxy to the hub, gets SIGTERM while the proxy
/// refuses or swallows its traffic: it exits within the grace period every time, and
/// never leads again after the signal.
async fn a_leading_controller_exits_within_its_grace_period_whatever_the_hub_does(lab: &Lab) {
    let hub = lab.cluster_info(HUB).expect("hub info");
    let upstream = hub
        .url
        .trim_start_matches("https://")
        .parse()
        .expect("hub address");
    let kubeconfig = std::fs::read_to_string(lab.kubeconfig(HUB, User::Controller).unwrap())
        .expect("controller kubeconfig");
    let trials = [
        (ProxyMode::Refuse, false, false),
        (ProxyMode::Blackhole, false, false),
        (ProxyMode::Refuse, true, false),
        (ProxyMode::Blackhole, true, false),
        (ProxyMode::Refuse, false, true),
        (ProxyMode::Blackhole, true, true),
    ]
    .map(|(mode, after_leadership_lost, hub_returns)| Trial {
        mode,
        after_leadership_lost,
        hub_returns,
    });
    for (index, trial) in trials.iter().enumerate() {
        let proxy = TcpProxy::start(upstream).await.expect("proxy");
        let path = lab.root_dir().join(format!("sigterm-{index}.kubeconfig"));
        let through_proxy = kubeconfig.replace(&hub.url, &format!("https://{}", proxy.address()));
        assert_ne!(
            through_proxy, kubeconfig,
            "the kubeconfig names the hub's URL"
        );
        std::fs::write(&path, through_proxy).expect("kubeconfig written");
        let identity = format!("sigterm-{index}");
        let controller = start_controller_with(lab, &identity, &path);
        wait_for_log(&controller, "leading: reconciling rollouts", &identity).await;

        proxy.set_mode(trial.mode);
        if trial.after_leadership_lost {
            wait_for_log(&controller, "not leading: reconciling stopped", &identity).await;
        }
        let pid = controller.program_pid().expect("controller pid");
        let signalled = std::time::Instant::now();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "SIGTERM sent");
        if trial.hub_returns {
            proxy.set_mode(ProxyMode::Forward);
        }
        while process_alive(pid) && signalled.elapsed() < TERMINATION_GRACE + CALL {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let took = signalled.elapsed();
        let log = controller.log();
        assert!(
            !process_alive(pid) && took < TERMINATION_GRACE,
            "trial {index} ({:?}): still running {took:?} after SIGTERM; log:\n{}",
            trial.mode,
            controller.log_tail(40)
        );
        let after_signal = log
            .split("stopping: no new work")
            .nth(1)
            .unwrap_or_default();
        assert!(
            !after_signal.contains("leading: reconciling rollouts"),
            "trial {index}: led again after SIGTERM:\n{after_signal}"
        );
        controller.stop();
        drop(proxy);
    }
}

fn start_controller_with(lab: &Lab, identity: &str, kubeconfig: &std::path::Path) -> LabChild {
    let args: Vec<std::ffi::OsString> = [
        "--namespace",
        SYSTEM_NAMESPACE,
        "--identity",
        // One identity for every trial: a Lease left unreleased by a cut-off trial is
        // renewed by the next one instead of waited out.
        "sigterm-controller",
        "--probe-addr",
        "127.0.0.1:0",
    ]
    .iter()
    .map(std::ffi::OsString::from)
    .collect();
    let envs = [("KUBECONFIG".to_owned(), kubeconfig.as_os_str().to_owned())];
    lab.spawn(
        identity,
        std::path::Path::new(env!("CARGO_BIN_EXE_lab-controller")),
        &args,
        &envs,
    )
    .expect("controller starts")
}

async fn wait_for_log(controller: &LabChild, line: &str, identity: &str) {
    let deadline = std::time::Instant::now() + ELECTION_DEADLINE;
    while !controller.log().contains(line) {
        assert!(
            std::time::Instant::now() < deadline,
            "{identity}: no {line:?} within {ELECTION_DEADLINE:?}; log:\n{}",
            controller.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn leader_election_on_a_real_apiserver() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let mut lab = Lab::start(LabOptions {
            regions: 1,
            ..LabOptions::default()
        })
        .await
        .expect("the lab starts");
        two_candidates_elect_exactly_one_and_a_release_hands_over(&lab).await;
        a_leader_that_stops_renewing_is_replaced_after_expiry(&lab).await;
        a_leader_cut_off_from_its_api_server_stops_leading(&mut lab).await;
        a_leading_controller_exits_within_its_grace_period_whatever_the_hub_does(&lab).await;
    });
}
