//! The per-region workload (`lab-workload`): request and error counters for Prometheus,
//! with an error ratio tests turn up and down at run time, and simulated consumers of a
//! ConfigMap in the region (see [`crate::Lab::watch_config`]) that report the revision
//! they activated and fail requests while they run an invalid configuration.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use crate::LabError;
use crate::gobuild::{GoPrograms, WORKLOAD};
use crate::process::{LabProcess, log_tail};

const READY_DEADLINE: Duration = Duration::from_secs(30);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize)]
struct WorkloadReady {
    url: String,
    pid: u32,
}

/// The ConfigMap a workload follows, as `GET /config-source` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ConfigSource {
    /// Namespace of the ConfigMap.
    pub namespace: String,
    /// Name of the ConfigMap.
    pub name: String,
    /// Whether the workload's watch on it is established now (false while the region's
    /// apiserver is stopped, for example).
    pub connected: bool,
}

/// One load of a workload's ConfigMap: an observed change of the object (a new
/// resourceVersion, or its deletion), or the first observation after
/// [`crate::Lab::watch_config`]. Never a value: only key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigLoad {
    /// When the workload observed it (its consumers activate it from then on, consumer
    /// `i` after `i` x 200 ms).
    pub time: SystemTime,
    /// The `configrollout.dev/revision` annotation; empty when absent.
    pub revision: String,
    /// Key names of `data` and `binaryData`, sorted.
    pub keys: Vec<String>,
    /// False when the ConfigMap did not exist (or was deleted): no configuration.
    pub present: bool,
    /// False when `timeout_ms` is present but not a decimal integer in 1..=600000.
    pub valid: bool,
}

#[derive(Debug, Deserialize)]
struct RawConfigLoad {
    time: String,
    revision: String,
    keys: Vec<String>,
    present: bool,
    valid: bool,
}

impl RawConfigLoad {
    fn parse(self) -> Result<ConfigLoad, String> {
        let time = self
            .time
            .parse::<k8s_openapi::jiff::Timestamp>()
            .map_err(|e| format!("time {:?}: {e}", self.time))?;
        Ok(ConfigLoad {
            time: SystemTime::from(time),
            revision: self.revision,
            keys: self.keys,
            present: self.present,
            valid: self.valid,
        })
    }
}

/// One region's workload process.
#[derive(Debug)]
pub(crate) struct Workload {
    region: String,
    process: LabProcess,
    ready_file: PathBuf,
    log: PathBuf,
    url: Option<String>,
}

impl Workload {
    /// Starts the workload. `kubeconfig` is the region's [`crate::User::Workload`]
    /// kubeconfig; it need not exist yet: the workload reads it at every (re)connect,
    /// which also makes it follow a restarted apiserver to a new port.
    pub(crate) fn spawn(
        programs: &GoPrograms,
        region: &str,
        dir: &Path,
        kubeconfig: &Path,
    ) -> Result<Self, LabError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
        let ready_file = dir.join(format!("workload-{region}.json"));
        let log = dir.join(format!("workload-{region}.log"));
        let mut command = Command::new(programs.path(WORKLOAD));
        command
            .arg("--region")
            .arg(region)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--ready-file")
            .arg(&ready_file)
            .arg("--kubeconfig")
            .arg(kubeconfig);
        let process = LabProcess::spawn(format!("workload {region}"), command, &log)?;
        Ok(Self {
            region: region.to_string(),
            process,
            ready_file,
            log,
            url: None,
        })
    }

    pub(crate) async fn wait_ready(&mut self) -> Result<&str, LabError> {
        let started = Instant::now();
        loop {
            self.process.check_running()?;
            if let Ok(raw) = std::fs::read(&self.ready_file)
                && let Ok(ready) = serde_json::from_slice::<WorkloadReady>(&raw)
                && ready.pid == self.process.pid()
            {
                return Ok(self.url.insert(ready.url));
            }
            if started.elapsed() > READY_DEADLINE {
                return Err(LabError::NotReady {
                    what: format!("workload {}", self.region),
                    seconds: READY_DEADLINE.as_secs(),
                    detail: log_tail(&self.log, 20),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn url(&self) -> Result<&str, LabError> {
        self.url.as_deref().ok_or_else(|| LabError::NotReady {
            what: format!("workload {}", self.region),
            seconds: 0,
            detail: "not started".into(),
        })
    }

    /// `host:port` for the scrape config.
    pub(crate) fn scrape_target(&self) -> Result<&str, LabError> {
        let url = self.url()?;
        Ok(url.strip_prefix("http://").unwrap_or(url))
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub(crate) fn request_stop(&mut self) {
        self.process.request_stop();
    }

    /// Sets the share of requests that fail (0..=1).
    pub(crate) async fn set_error_rate(
        &self,
        http: &reqwest::Client,
        ratio: f64,
    ) -> Result<(), LabError> {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(LabError::InvalidArgument(format!(
                "error rate {ratio} is outside 0..=1"
            )));
        }
        let context = format!("set error rate of workload {}", self.region);
        let url = reqwest::Url::parse_with_params(
            &format!("{}/error-rate", self.url()?),
            [("value", ratio.to_string())],
        )
        .map_err(|e| LabError::BadResponse {
            context: context.clone(),
            detail: e.to_string(),
        })?;
        let response = http
            .post(url)
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| LabError::http(&context, e))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(LabError::BadResponse {
                context,
                detail: format!("{status}: {body}"),
            });
        }
        Ok(())
    }

    /// Makes the workload follow the ConfigMap `namespace/name` in its region, replacing
    /// any earlier source.
    pub(crate) async fn watch_config(
        &self,
        http: &reqwest::Client,
        namespace: &str,
        name: &str,
    ) -> Result<(), LabError> {
        let context = format!("set the config source of workload {}", self.region);
        let url = reqwest::Url::parse_with_params(
            &format!("{}/config-source", self.url()?),
            [("namespace", namespace), ("name", name)],
        )
        .map_err(|e| LabError::BadResponse {
            context: context.clone(),
            detail: e.to_string(),
        })?;
        let request = http.post(url);
        send(request, &context).await?;
        Ok(())
    }

    /// The ConfigMap the workload follows, if any.
    pub(crate) async fn config_source(
        &self,
        http: &reqwest::Client,
    ) -> Result<Option<ConfigSource>, LabError> {
        let context = format!("get the config source of workload {}", self.region);
        let request = http.get(format!("{}/config-source", self.url()?));
        let body = send(request, &context).await?;
        serde_json::from_str(&body).map_err(|e| LabError::BadResponse {
            context,
            detail: e.to_string(),
        })
    }

    /// Every load the workload made, oldest first (its last 1000).
    pub(crate) async fn config_history(
        &self,
        http: &reqwest::Client,
    ) -> Result<Vec<ConfigLoad>, LabError> {
        let context = format!("get the config history of workload {}", self.region);
        let request = http.get(format!("{}/config-history", self.url()?));
        let body = send(request, &context).await?;
        let raw: Vec<RawConfigLoad> =
            serde_json::from_str(&body).map_err(|e| LabError::BadResponse {
                context: context.clone(),
                detail: e.to_string(),
            })?;
        raw.into_iter()
            .map(RawConfigLoad::parse)
            .collect::<Result<_, _>>()
            .map_err(|detail| LabError::BadResponse { context, detail })
    }
}

/// Sends a control request and returns the body of a successful answer.
async fn send(request: reqwest::RequestBuilder, context: &str) -> Result<String, LabError> {
    let response = request
        .timeout(CALL_TIMEOUT)
        .send()
        .await
        .map_err(|e| LabError::http(context, e))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| LabError::http(context, e))?;
    if !status.is_success() {
        return Err(LabError::BadResponse {
            context: context.to_string(),
            detail: format!("{status}: {body}"),
        });
    }
    Ok(body)
}
