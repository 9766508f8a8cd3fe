//! `kubectl configrollout dashboard` in a real browser: Debian's headless chromium,
//! driven through chromedriver's WebDriver API, against dashboards run as the lab's
//! real users (`viewer`, `approver-alice`) on their own kubeconfigs, with the controller
//! running a gated rollout. The viewer's page updates itself as the rollout moves (no
//! reload), the viewer's approve button shows the API server's refusal, alice's moves the
//! stage on, and a bad revision's failing gate samples are charted as the revision is
//! rolled back. Screenshots of the run go to `target/dashboard-screenshots/`.
//!
//! One lab for the binary. The `#[ignore]`d test lists 1,000 rollouts (for
//! BENCHMARKS.md): `cargo test -p configrollout-e2e --test dashboard -- --ignored
//! --nocapture`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use configrollout::api::{ConfigRollout, SampleVerdict};
use configrollout_e2e::webdriver::{CHROMEDRIVER, Session};
use configrollout_e2e::{HUB, LabChild, LabOptions, User};
use futures::StreamExt;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod support;

use support::*;

/// The plugin (`lab-plugin` is `kubectl-configrollout` under another name);
/// `CONFIGROLLOUT_LAB_PLUGIN` names another build of it, e.g. a copy taken out of a
/// target directory that other builds share.
fn plugin_binary() -> PathBuf {
    std::env::var_os("CONFIGROLLOUT_LAB_PLUGIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_lab-plugin")),
        PathBuf::from,
    )
}
const NAME: &str = "web-limits";
/// A configuration value distinctive enough to find if a page leaked it.
const VALUE: &str = "s3cr3t-banner-9f2c";
const ERROR_RATIO: &str = "sum(rate(configrollout_lab_errors_total{region=\"{{region}}\"}[5s])) / sum(rate(configrollout_lab_requests_total{region=\"{{region}}\"}[5s]))";

fn rollout_yaml() -> String {
    format!(
        r#"
apiVersion: configrollout.dev/v1alpha1
kind: ConfigRollout
metadata: {{name: {NAME}, namespace: {TEAM}}}
spec:
  target: {{namespace: {APP}, name: {NAME}}}
  onFailure: Rollback
  data:
    timeout_ms: "250"
    banner: "{VALUE}"
  gates:
    - name: errors
      query: '{ERROR_RATIO}'
      condition: result < 0.1
      interval: 2s
      initialDelay: 4s
      count: 3
      inconclusiveLimit: 3
  stages:
    - name: canary
      regions: {{names: [region-1]}}
      gates: [errors]
    - name: prod
      regions: {{names: [region-2, region-3]}}
      maxParallel: 2
      approval: Required
"#
    )
}

/// Where the run's screenshots go: `<target dir>/dashboard-screenshots`.
fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| configrollout_e2e::repository_root().join("target"));
    let dir = target.join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

async fn screenshot(browser: &Session, name: &str) {
    let png = within("screenshot", browser.screenshot()).await;
    let path = screenshot_dir().join(format!("{name}.png"));
    std::fs::write(&path, png).expect("write screenshot");
    eprintln!("screenshot: {}", path.display());
}

/// A dashboard run as `user` beside the lab: its URL, and the login URL it printed.
struct Dashboard {
    child: LabChild,
    url: String,
    login: String,
}

impl Dashboard {
    async fn start(world: &World, user: User) -> Dashboard {
        let kubeconfig = world.lab.kubeconfig(HUB, user).expect("kubeconfig");
        let child = world
            .lab
            .spawn(
                &format!("dashboard-{}", user.name()),
                &plugin_binary(),
                &["dashboard", "--port", "0"].map(std::ffi::OsString::from),
                &[("KUBECONFIG".to_owned(), kubeconfig.into_os_string())],
            )
            .expect("the dashboard starts");
        let login = eventually("the dashboard prints its URL", CALL, || async {
            let log = child.log();
            let start = log.find("http://")?;
            let url: String = log[start..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            Some(url)
        })
        .await;
        let url = login
            .split_once('?')
            .map(|(url, _)| url.to_owned())
            .expect("the printed URL carries the login token");
        Dashboard { child, url, login }
    }

    /// Logs `browser` in (the login URL sets the cookie), then opens `path`.
    async fn open(&self, browser: &Session, path: &str) {
        within("log in", browser.open(&self.login)).await;
        within(
            &format!("open {path}"),
            browser.open(&format!("{}{path}", self.url)),
        )
        .await;
    }
}

/// chromedriver beside the lab, and its URL once it is ready.
async fn chromedriver(world: &World) -> (LabChild, String) {
    let address = free_local_addr();
    let port = address.rsplit(':').next().expect("port").to_owned();
    let child = world
        .lab
        .spawn(
            "chromedriver",
            std::path::Path::new(CHROMEDRIVER),
            &[format!("--port={port}")].map(std::ffi::OsString::from),
            &[],
        )
        .expect("chromedriver starts (scripts/install-deps installs chromium-driver)");
    let url = format!("http://{address}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    eventually("chromedriver is ready", CALL, || async {
        let status: Value = http
            .get(format!("{url}/status"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (status["value"]["ready"] == json!(true)).then_some(())
    })
    .await;
    (child, url)
}

async fn browser(world: &World, driver: &str, name: &str) -> Session {
    let profile = world.lab.root_dir().join(format!("chromium-{name}"));
    std::fs::create_dir_all(&profile).expect("profile dir");
    within("a headless chromium", Session::start(driver, &profile)).await
}

/// Runs `script` in the page until it returns something other than null or false.
async fn until(browser: &Session, what: &str, deadline: Duration, script: &str) -> Value {
    eventually(what, deadline, || async {
        let value = browser.run(script, json!([])).await.ok()?;
        (!value.is_null() && value != json!(false)).then_some(value)
    })
    .await
}

async fn js(browser: &Session, script: &str) -> Value {
    within("run a script in the page", browser.run(script, json!([]))).await
}

const STATE_OF: &str = "const cell = document.querySelector('[data-region=\"' + arguments[0] + '\"]'); return cell && cell.dataset.state;";

async fn region_state(browser: &Session, region: &str) -> Value {
    within(
        "read a region's state",
        browser.run(STATE_OF, json!([region])),
    )
    .await
}

/// The page's load figures: bytes transferred (document and assets), first contentful
/// paint, DOM content loaded.
async fn load_figures(browser: &Session) -> Value {
    // Paint timing is reported a moment after the load (a figure, not a requirement).
    for _ in 0..20 {
        let painted = js(
            browser,
            "return performance.getEntriesByType('paint').some(p => p.name === 'first-contentful-paint');",
        )
        .await;
        if painted == json!(true) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    js(
        browser,
        "const nav = performance.getEntriesByType('navigation')[0];
         const resources = performance.getEntriesByType('resource');
         const paint = performance.getEntriesByType('paint').find(p => p.name === 'first-contentful-paint');
         return {
           document_bytes: nav.encodedBodySize,
           asset_bytes: resources.reduce((sum, r) => sum + r.encodedBodySize, 0),
           assets: resources.length,
           first_contentful_paint_ms: paint ? paint.startTime : null,
           dom_content_loaded_ms: nav.domContentLoadedEventEnd,
         };",
    )
    .await
}

/// Issue 29: text from tenants is inert wherever the dashboard shows it. Anyone who may
/// create Events in the rollout's namespace can forge one that reads as the
/// controller's, with escape sequences, a carriage return and a bidirectional override
/// in it: the rollout's page and its event stream show it with each such character
/// replaced, and a bare CR cannot end a line of the stream (browsers end an event-stream
/// line at CR too).
async fn forged_event_text_is_inert(
    world: &World,
    http: &reqwest::Client,
    dashboard: &Dashboard,
    cookie: &str,
) {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event;
    use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kube::ResourceExt;
    use kube::api::{Api, ObjectMeta};
    // The platform lets alice read the namespace's Events, as it would for the timeline.
    let roles: Api<Role> = Api::namespaced(world.hub.clone(), TEAM);
    let reader = Role {
        metadata: ObjectMeta {
            name: Some("events-reader".into()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["events".into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..PolicyRule::default()
        }]),
    };
    within(
        "an events reader role",
        roles.create(&PostParams::default(), &reader),
    )
    .await;
    let bindings: Api<RoleBinding> = Api::namespaced(world.hub.clone(), TEAM);
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("events-reader-alice".into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "events-reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: User::ApproverAlice.name().into(),
            ..Subject::default()
        }]),
    };
    within(
        "alice reads events",
        bindings.create(&PostParams::default(), &binding),
    )
    .await;
    let rollout = world.rollout(NAME).await;
    // As the controller writes its own (events.k8s.io/v1), naming it as the reporter.
    let forged = Event {
        metadata: ObjectMeta {
            name: Some("forged-all-clear".into()),
            namespace: Some(TEAM.into()),
            ..ObjectMeta::default()
        },
        regarding: Some(ObjectReference {
            api_version: Some("configrollout.dev/v1alpha1".into()),
            kind: Some("ConfigRollout".into()),
            name: Some(NAME.into()),
            namespace: Some(TEAM.into()),
            uid: rollout.uid(),
            ..ObjectReference::default()
        }),
        action: Some("Reconcile".into()),
        reason: Some("StagePassed".into()),
        note: Some("canary \u{1b}[2J\rdata: ALL CLEAR \u{202e}exe.txt\u{85}".into()),
        type_: Some("Normal".into()),
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        reporting_controller: Some("configrollout-controller".into()),
        reporting_instance: Some("configrollout-controller".into()),
        ..Event::default()
    };
    let events: Api<Event> = Api::namespaced(world.hub.clone(), TEAM);
    within(
        "forge an Event",
        events.create(&PostParams::default(), &forged),
    )
    .await;
    let unsafe_char = |text: &str| {
        text.chars()
            .find(|c| matches!(c, '\u{1b}' | '\r' | '\u{202e}' | '\u{85}'))
    };
    let page_url = format!("{}r/{TEAM}/{NAME}", dashboard.url);
    let page = eventually("the page shows the forged Event", PROGRESS, || async {
        let answer = within(
            "the rollout page",
            http.get(&page_url).header("Cookie", cookie).send(),
        )
        .await;
        let body = within("read the page", answer.text()).await;
        body.contains("ALL CLEAR").then_some(body)
    })
    .await;
    assert_eq!(unsafe_char(&page), None, "raw in the page");

    // The stream's answer runs for as long as it is read: not under `within`'s timeout.
    let stream_client = reqwest::Client::builder().build().expect("client");
    let mut stream = tokio::time::timeout(
        CALL,
        stream_client
            .get(format!("{page_url}/stream"))
            .header("Cookie", cookie)
            .send(),
    )
    .await
    .expect("the dashboard answers")
    .expect("the stream opens");
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.contains("ALL CLEAR") && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), stream.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    assert!(
        seen.contains("ALL CLEAR"),
        "the stream shows the Event: {seen}"
    );
    assert_eq!(unsafe_char(&seen), None, "raw in the stream");
    assert!(
        !seen.lines().any(|line| line.starts_with("data: ALL CLEAR")),
        "the forged text framed a stream line of its own"
    );
    within(
        "remove the forged Event",
        events.delete("forged-all-clear", &Default::default()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dashboard_in_a_real_browser() {
    let world = World::start(LabOptions::default()).await;
    world
        .lab
        .install_approver_policy()
        .await
        .expect("install the approver policy");
    within(
        "the workloads consume the target",
        world.lab.watch_config_everywhere(APP, NAME),
    )
    .await;
    let controller = world.start_controller("controller-dashboard");
    let viewer = Dashboard::start(&world, User::Viewer).await;
    let alice = Dashboard::start(&world, User::ApproverAlice).await;
    let (driver_process, driver) = chromedriver(&world).await;

    // The session: another local client without the cookie gets nothing, not even the
    // page (which holds the action token); a wrong login token is refused; the printed
    // login URL sets an HttpOnly, SameSite=Strict cookie and redirects to the page.
    let http = reqwest::Client::builder()
        .timeout(CALL)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let answer = within("a GET without the cookie", http.get(&alice.url).send()).await;
    assert_eq!(answer.status(), 401, "no cookie, no page");
    let body = within("read the refusal", answer.text()).await;
    assert!(!body.contains("dashboard-token"), "{body}");
    let answer = within(
        "a wrong login token",
        http.get(format!("{}?login=guess", alice.url)).send(),
    )
    .await;
    assert_eq!(answer.status(), 403, "a guessed login token");
    let answer = within("the printed login URL", http.get(&alice.login).send()).await;
    assert_eq!(answer.status(), 303);
    let set_cookie = answer
        .headers()
        .get("set-cookie")
        .and_then(|value| value.to_str().ok())
        .expect("the login sets a cookie")
        .to_owned();
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"),
        "{set_cookie}"
    );
    let cookie = set_cookie.split(';').next().expect("name=value").to_owned();
    let page = within(
        "a GET with the cookie",
        http.get(&alice.url).header("Cookie", &cookie).send(),
    )
    .await;
    assert_eq!(page.status(), 200);
    let answer = within(
        "alice's cookie on the viewer's dashboard",
        http.get(&viewer.url).header("Cookie", &cookie).send(),
    )
    .await;
    assert_eq!(
        answer.status(),
        401,
        "one dashboard's cookie opens no other"
    );

    // The guard: a POST without the page's token, or naming another host, is refused
    // before anything reaches the API server, even with the cookie.
    let action = format!("{}r/{TEAM}/{NAME}/pause", alice.url);
    let answer = within(
        "a POST without token",
        http.post(&action).header("Cookie", &cookie).send(),
    )
    .await;
    assert_eq!(answer.status(), 403, "no token, no action");
    let answer = within(
        "a POST from another site",
        http.post(&action)
            .header("Cookie", &cookie)
            .header("Origin", "https://evil.example")
            .header("X-Dashboard-Token", "guess")
            .send(),
    )
    .await;
    assert_eq!(answer.status(), 403);
    let answer = within(
        "a rebound host name",
        http.get(&viewer.url).header("Host", "evil.example").send(),
    )
    .await;
    assert_eq!(answer.status(), 421, "only its own host names");

    world.create_rollout(&rollout_yaml()).await;
    world.wait_phase(NAME, "AwaitingApproval", PROGRESS).await;
    forged_event_text_is_inert(&world, &http, &alice, &cookie).await;

    // The viewer's rollout page: the canary passed its gate, prod waits for approval.
    let viewing = browser(&world, &driver, "viewer").await;
    let page = format!("r/{TEAM}/{NAME}");
    viewer.open(&viewing, &page).await;
    let first_load = load_figures(&viewing).await;
    eprintln!("rollout page load (viewer): {first_load}");
    // Set once; a reload would lose it.
    js(
        &viewing,
        "window.loadedOnce = 'still the same page'; return true;",
    )
    .await;
    until(
        &viewing,
        "the live stream is connected",
        CALL,
        "return document.getElementById('connection').textContent === 'live';",
    )
    .await;
    assert_eq!(region_state(&viewing, "region-1").await, json!("done"));
    assert_eq!(region_state(&viewing, "region-2").await, json!("pending"));
    // Every successful sample the status keeps for the canary's gate is a green point.
    let kept = world.rollout(NAME).await;
    let successful = kept
        .status
        .as_ref()
        .and_then(|status| status.stages.iter().find(|stage| stage.name == "canary"))
        .map(|stage| {
            stage
                .gates
                .iter()
                .flat_map(|gate| &gate.samples)
                .filter(|sample| sample.verdict == SampleVerdict::Successful)
                .count()
        })
        .unwrap_or_default();
    assert!(successful >= 1, "the canary passed on successful samples");
    let good_samples = until(
        &viewing,
        "the canary's samples are charted",
        CALL,
        "const n = document.querySelectorAll('[data-stage=\"canary\"] svg.gate-chart circle.sample-ok').length; return n > 0 && n;",
    )
    .await;
    assert_eq!(
        good_samples,
        json!(successful),
        "the canary's successful samples are charted"
    );
    let summary = js(
        &viewing,
        "return document.getElementById('waiting-on').textContent;",
    )
    .await;
    let summary = summary.as_str().unwrap_or_default();
    assert!(
        summary.starts_with("an approval of stage prod of r1 (digest ") && summary.len() < 80,
        "{summary}"
    );
    screenshot(&viewing, "1-awaiting-approval").await;

    // The viewer may not approve: the button shows the API server's refusal.
    within(
        "the viewer clicks approve",
        viewing.click("#action-approve"),
    )
    .await;
    let refusal = until(
        &viewing,
        "the refusal is shown",
        CALL,
        "const o = document.getElementById('outcome'); return !o.hidden && o.textContent;",
    )
    .await;
    let refusal = refusal.as_str().unwrap_or_default().to_owned();
    assert!(
        refusal.contains("you (viewer) may not approve in namespace team: ")
            && refusal.contains("forbidden"),
        "the API server's answer: {refusal}"
    );
    assert_eq!(
        js(
            &viewing,
            "return document.getElementById('outcome').className;"
        )
        .await,
        json!("outcome refused")
    );
    screenshot(&viewing, "2-viewer-refused").await;
    assert_eq!(
        world.rollout(NAME).await.status.expect("status").stages[1].approval,
        None,
        "nothing was approved"
    );

    // The viewer puts the cursor in the reason box and leaves it there, typing nothing:
    // the page holds its updates while the box has the cursor, so that neither the box
    // nor the cursor is taken away, and applies the latest once the cursor leaves.
    within(
        "the viewer clicks into the reason box",
        viewing.click("input[name=reason]"),
    )
    .await;
    js(
        &viewing,
        "document.querySelector('input[name=reason]').dataset.held = 'the same box'; return true;",
    )
    .await;
    const UPDATES: &str = "return document.body.dataset.updates || '0';";
    let updates_before = js(&viewing, UPDATES).await;

    // Issue 28: approver-alice reads r1 and starts typing her reason; meanwhile the
    // author declares r2. Her page holds its updates while she types, and says on the
    // form that a newer revision arrived; her approval names r1, which the dashboard
    // refuses: nothing is approved.
    let approving = browser(&world, &driver, "alice").await;
    alice.open(&approving, &format!("r/{TEAM}/{NAME}")).await;
    within(
        "alice starts her reason",
        approving.type_into("input[name=reason]", "r1 looks right"),
    )
    .await;
    let newer = json!({"spec": {"data": {"timeout_ms": "300"}}});
    within(
        "the author declares r2",
        world
            .rollouts()
            .patch(NAME, &PatchParams::default(), &Patch::Merge(&newer)),
    )
    .await;
    let note = until(
        &approving,
        "the form says the rollout moved on",
        PROGRESS,
        "const n = document.querySelector('form.action .stale-note'); return n && !n.hidden && n.textContent;",
    )
    .await;
    assert!(note.as_str().unwrap_or_default().contains("r1"), "{note}");
    screenshot(&approving, "3a-alice-sees-a-newer-revision").await;
    within(
        "alice clicks approve on r1",
        approving.click("#action-approve"),
    )
    .await;
    let refused = until(
        &approving,
        "alice's approval of r1 is answered",
        CALL,
        "const o = document.getElementById('outcome'); return !o.hidden && o.textContent;",
    )
    .await;
    assert!(
        refused
            .as_str()
            .unwrap_or_default()
            .contains("approval for r1 refused"),
        "{refused}"
    );
    let after = world.rollout(NAME).await;
    assert!(
        after
            .status
            .as_ref()
            .and_then(|status| status.stages.iter().find(|stage| stage.name == "prod"))
            .is_none_or(|prod| prod.approval.is_none()),
        "nothing was approved"
    );
    // r2 goes through the canary and awaits its own approval; alice clears her reason,
    // her page catches up and now names r2.
    eventually("r2 awaits approval", PROGRESS, || async {
        let rollout = world.rollout(NAME).await;
        let status = rollout.status?;
        (status.revision.as_deref() == Some("r2")
            && status.phase.map(|p| format!("{p:?}")).as_deref() == Some("AwaitingApproval"))
        .then_some(())
    })
    .await;
    js(
        &approving,
        // As a person does: empties the box (an input event) and leaves it.
        "const i = document.querySelector('input[name=reason]'); i.value = ''; i.blur(); i.dispatchEvent(new Event('input', {bubbles: true})); return true;",
    )
    .await;
    until(
        &approving,
        "alice's form names r2",
        PROGRESS,
        "const i = document.querySelector('form.action input[name=revision]'); return i && i.value === 'r2';",
    )
    .await;

    // The refusal she read is put away, so that the answer below is the new one.
    js(
        &approving,
        "document.getElementById('outcome').hidden = true; return true;",
    )
    .await;

    // approver-alice, in her own browser on her own dashboard, approves with a reason.
    within(
        "alice gives a reason",
        approving.type_into("input[name=reason]", "canary is green in the dashboard"),
    )
    .await;
    within("alice clicks approve", approving.click("#action-approve")).await;
    let approved = until(
        &approving,
        "alice's approval is answered",
        CALL,
        "const o = document.getElementById('outcome'); return !o.hidden && o.textContent;",
    )
    .await;
    assert!(
        approved
            .as_str()
            .unwrap_or_default()
            .contains("approver-alice approves stage prod of revision r2 of web-limits"),
        "{approved}"
    );
    screenshot(&approving, "3-alice-approved").await;

    world.wait_phase(NAME, "Complete", PROGRESS).await;
    // The stream sends a change within its 150 ms of coalescing; this is ample.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        js(
            &viewing,
            "const box = document.activeElement; return (box && box.dataset.held) || null;"
        )
        .await,
        json!("the same box"),
        "the viewer's reason box keeps the cursor"
    );
    assert_eq!(
        js(&viewing, UPDATES).await,
        updates_before,
        "no update replaced the form while it had the cursor"
    );
    within("the viewer clicks elsewhere", viewing.click("h1")).await;

    // The viewer's page, never reloaded, shows prod's regions take the revision.
    for region in ["region-2", "region-3"] {
        until(
            &viewing,
            &format!("{region} turns done on the open page"),
            PROGRESS,
            &format!("return document.querySelector('[data-region=\"{region}\"]').dataset.state === 'done';"),
        )
        .await;
    }
    until(
        &viewing,
        "the page shows Complete",
        PROGRESS,
        "return document.querySelector('h1 .badge').textContent === 'Complete';",
    )
    .await;
    let approval_line = js(
        &viewing,
        "return document.querySelector('[data-stage=\"prod\"] .approval').textContent;",
    )
    .await;
    assert!(
        approval_line
            .as_str()
            .unwrap_or_default()
            .contains("approved by approver-alice"),
        "{approval_line}"
    );
    assert_eq!(
        js(&viewing, "return window.loadedOnce || null;").await,
        json!("still the same page"),
        "updated in place, not reloaded"
    );
    screenshot(&viewing, "4-complete").await;

    // A bad value (the workloads refuse timeout_ms 0) behind the gate: the canary fails
    // it and the revision is rolled back; the open page charts the failing samples.
    let patch = json!({"spec": {"data": {"timeout_ms": "0"}}});
    within(
        "declare a bad revision",
        world
            .rollouts()
            .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await;
    world.wait_phase(NAME, "RolledBack", PROGRESS).await;
    until(
        &viewing,
        "the page shows RolledBack",
        CALL,
        "return document.querySelector('h1 .badge').textContent === 'RolledBack';",
    )
    .await;
    let failing = js(
        &viewing,
        "return Array.from(document.querySelectorAll('[data-stage=\"canary\"] svg.gate-chart circle.sample-failed')).map(c => Number(c.dataset.value));",
    )
    .await;
    let failing: Vec<f64> = failing
        .as_array()
        .expect("values")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert!(
        !failing.is_empty() && failing.iter().all(|value| *value >= 0.1),
        "the failing samples are charted above the threshold: {failing:?}"
    );
    let threshold = js(
        &viewing,
        "return document.querySelector('[data-stage=\"canary\"] svg.gate-chart .threshold-label').textContent;",
    )
    .await;
    assert_eq!(threshold, json!("result < 0.1"));
    let timeline = js(
        &viewing,
        "return Array.from(document.querySelectorAll('.timeline li b')).map(b => b.textContent);",
    )
    .await;
    assert!(
        timeline
            .as_array()
            .is_some_and(|reasons| !reasons.is_empty()),
        "the rollout's Events are on the timeline: {timeline}"
    );
    assert_eq!(
        js(&viewing, "return window.loadedOnce || null;").await,
        json!("still the same page")
    );
    screenshot(&viewing, "5-rolled-back").await;

    // History: the viewer may not read the stored revisions, and is told so; asking for
    // the values shows none, nor anything else on the page.
    within(
        "ask for the values",
        viewing.open(&format!("{}{page}?values=1", viewer.url)),
    )
    .await;
    let history = js(
        &viewing,
        "return document.querySelector('section.history').textContent;",
    )
    .await;
    let history = history.as_str().unwrap_or_default();
    assert!(
        history.contains("you may not read the revisions") && history.contains("r2"),
        "{history}"
    );
    let html = js(&viewing, "return document.documentElement.outerHTML;").await;
    assert!(
        !html.as_str().unwrap_or_default().contains(VALUE),
        "no configuration value on the page"
    );

    // Whoever may read the stored revisions (the admin here) sees the key names, and the
    // values only when asking for them.
    let admin = Dashboard::start(&world, User::Admin).await;
    admin.open(&viewing, &format!("r/{TEAM}/{NAME}")).await;
    let history = js(
        &viewing,
        "return document.querySelector('section.history').innerHTML;",
    )
    .await;
    let history = history.as_str().unwrap_or_default();
    assert!(
        history.contains("<code>timeout_ms</code>") && history.contains("<code>banner</code>"),
        "key names: {history}"
    );
    assert!(!history.contains(VALUE), "no value unless asked: {history}");
    within(
        "the admin clicks show values",
        viewing.click("#show-values"),
    )
    .await;
    let history = until(
        &viewing,
        "the values are shown",
        CALL,
        "const h = document.querySelector('section.history'); return h && h.textContent.includes('Hide them') && h.textContent;",
    )
    .await;
    assert!(
        history.as_str().unwrap_or_default().contains(VALUE),
        "{history}"
    );
    screenshot(&viewing, "6-admin-history-values").await;
    admin.child.stop();

    // The Rollouts page lists it, live.
    within("open the rollouts page", viewing.open(&viewer.url)).await;
    let list_load = load_figures(&viewing).await;
    eprintln!("rollouts page load (viewer): {list_load}");
    let row = until(
        &viewing,
        "the rollouts page lists the rollout",
        CALL,
        &format!("const row = document.querySelector('tr[data-rollout=\"{TEAM}/{NAME}\"]'); return row && row.textContent;"),
    )
    .await;
    assert!(
        row.as_str().unwrap_or_default().contains("RolledBack"),
        "{row}"
    );
    screenshot(&viewing, "7-rollouts").await;
    let html = js(&viewing, "return document.documentElement.outerHTML;").await;
    assert!(!html.as_str().unwrap_or_default().contains(VALUE));

    within("close the viewer's browser", viewing.close()).await;
    within("close alice's browser", approving.close()).await;
    driver_process.stop();
    viewer.child.stop();
    alice.child.stop();
    controller.stop();
}

/// For BENCHMARKS.md: the Rollouts page with 1,000 rollouts listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark: creates 1,000 rollouts; run with --ignored --nocapture"]
async fn a_thousand_rollouts_stay_responsive() {
    const COUNT: usize = 1000;
    let world = World::start(LabOptions::default()).await;
    let template: ConfigRollout = serde_saphyr::from_str(&rollout_yaml()).expect("rollout");
    let started = Instant::now();
    let creates = (0..COUNT).map(|index| {
        let mut rollout = template.clone();
        rollout.metadata.name = Some(format!("bench-{index:04}"));
        let api = world.rollouts();
        async move {
            api.create(&PostParams::default(), &rollout)
                .await
                .map(|_| ())
        }
    });
    let results: Vec<Result<(), kube::Error>> = futures::stream::iter(creates)
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(results.iter().all(Result::is_ok), "every rollout created");
    eprintln!("created {COUNT} rollouts in {:?}", started.elapsed());

    let admin = Dashboard::start(&world, User::Admin).await;
    let (driver_process, driver) = chromedriver(&world).await;
    let browsing = browser(&world, &driver, "bench").await;
    let opened = Instant::now();
    within("log in", browsing.open(&admin.login)).await;
    within("open the rollouts page", browsing.open(&admin.url)).await;
    let loaded = opened.elapsed();
    let rows = js(
        &browsing,
        "return document.querySelectorAll('tbody tr').length;",
    )
    .await;
    assert_eq!(rows, json!(COUNT), "every rollout is listed");
    let figures = load_figures(&browsing).await;
    until(
        &browsing,
        "the live stream is connected",
        CALL,
        "return document.getElementById('connection').textContent === 'live';",
    )
    .await;
    // One more rollout: how long until the open page lists it (watch -> render -> SSE
    // -> the browser's DOM).
    let mut extra = template.clone();
    extra.metadata.name = Some("bench-extra".to_owned());
    let created = Instant::now();
    within(
        "create one more",
        world.rollouts().create(&PostParams::default(), &extra),
    )
    .await;
    until(
        &browsing,
        "the new rollout appears",
        CALL,
        "return !!document.querySelector('tr[data-rollout=\"team/bench-extra\"]');",
    )
    .await;
    let appeared = created.elapsed();
    // The browser's cost of one update: replacing the table and laying it out.
    let rerender = js(
        &browsing,
        "const live = document.getElementById('live'); const html = live.innerHTML;
         const t = performance.now(); live.innerHTML = html; document.body.offsetHeight;
         return performance.now() - t;",
    )
    .await;
    let bytes = js(
        &browsing,
        "return document.getElementById('live').innerHTML.length;",
    )
    .await;
    eprintln!(
        "1,000 rollouts: page opened in {loaded:?} (WebDriver navigation), {figures}; \
         a new rollout listed on the open page after {appeared:?}; one update re-rendered \
         in {rerender} ms; live table {bytes} bytes"
    );
    screenshot(&browsing, "bench-1000-rollouts").await;
    within("close the browser", browsing.close()).await;
    driver_process.stop();
    admin.child.stop();
}
