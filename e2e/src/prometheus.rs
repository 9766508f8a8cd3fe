//! Debian's Prometheus server scraping the lab's workloads every second, and a small
//! instant-query client for tests.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::LabError;
use crate::gobuild::{EXEC, GoPrograms};
use crate::process::{LabProcess, STOP_GRACE, log_tail};

/// Where Debian's package installs the server.
pub const DEFAULT_PROMETHEUS_BINARY: &str = "/usr/bin/prometheus";
const READY_DEADLINE: Duration = Duration::from_secs(60);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the server is started again after losing a port race.
const PORT_RACE_RETRIES: usize = 3;

/// One series of an instant query result.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series labels.
    pub labels: BTreeMap<String, String>,
    /// The value (may be NaN, for example 0/0).
    pub value: f64,
}

/// The Prometheus server of the lab.
#[derive(Debug)]
pub(crate) struct Prometheus {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    process: Option<LabProcess>,
    /// The workloads' `host:port`.
    targets: Vec<String>,
}

impl Prometheus {
    /// Writes the scrape configuration for `targets` (`host:port` of each workload) and
    /// starts the server on a free loopback port.
    pub(crate) fn spawn(
        programs: &GoPrograms,
        binary: &Path,
        dir: &Path,
        targets: &[&str],
    ) -> Result<Self, LabError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
        std::fs::write(
            dir.join("prometheus.yml"),
            scrape_config(targets, &Monitoring::default()),
        )
        .map_err(|e| LabError::io("write prometheus.yml", e))?;
        let port = free_port()?;
        let mut prometheus = Self {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            port,
            process: None,
            targets: targets.iter().map(|t| (*t).to_owned()).collect(),
        };
        prometheus.start_process(programs)?;
        Ok(prometheus)
    }

    fn start_process(&mut self, programs: &GoPrograms) -> Result<(), LabError> {
        let mut command = Command::new(programs.path(EXEC));
        command
            .arg("--")
            .arg(&self.binary)
            .arg(format!(
                "--config.file={}",
                self.dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                self.dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .arg("--storage.tsdb.retention.time=1d")
            .arg("--web.enable-lifecycle")
            .arg("--log.level=warn");
        self.process = Some(LabProcess::spawn(
            "prometheus",
            command,
            &self.dir.join("prometheus.log"),
        )?);
        Ok(())
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(LabProcess::pid)
    }

    /// [`Prometheus::wait_ready`] for a first start, starting the server again on another
    /// port when the one picked as free was taken before the server bound it (the control
    /// planes starting at the same time pick ports too).
    pub(crate) async fn wait_ready_retrying(
        &mut self,
        programs: &GoPrograms,
        http: &reqwest::Client,
    ) -> Result<(), LabError> {
        for _ in 0..PORT_RACE_RETRIES {
            match self.wait_ready(http).await {
                Err(LabError::ProcessExited { log_tail, .. })
                    if log_tail.contains("address already in use") =>
                {
                    tracing::warn!(
                        port = self.port,
                        "prometheus lost its port before binding it; starting again"
                    );
                    self.process = None;
                    self.port = free_port()?;
                    self.start_process(programs)?;
                }
                other => return other,
            }
        }
        self.wait_ready(http).await
    }

    /// Waits until `/-/ready` answers.
    pub(crate) async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<(), LabError> {
        let started = Instant::now();
        loop {
            let process = self
                .process
                .as_mut()
                .ok_or_else(|| LabError::ClusterStopped("prometheus".into()))?;
            process.check_running()?;
            let last = match http
                .get(format!("{}/-/ready", self.url()))
                .timeout(CALL_TIMEOUT)
                .send()
                .await
            {
                Ok(response) if response.status().is_success() => return Ok(()),
                Ok(response) => response.status().to_string(),
                Err(e) => e.to_string(),
            };
            if started.elapsed() > READY_DEADLINE {
                return Err(LabError::NotReady {
                    what: "prometheus".into(),
                    seconds: READY_DEADLINE.as_secs(),
                    detail: format!("{last}\n{}", log_tail(&self.dir.join("prometheus.log"), 20)),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Rewrites the configuration with `monitoring` added to the workloads' scrape job,
    /// and has the running server load it (`/-/reload`).
    pub(crate) async fn monitor(
        &mut self,
        http: &reqwest::Client,
        monitoring: &Monitoring,
    ) -> Result<(), LabError> {
        let targets: Vec<&str> = self.targets.iter().map(String::as_str).collect();
        std::fs::write(
            self.dir.join("prometheus.yml"),
            scrape_config(&targets, monitoring),
        )
        .map_err(|e| LabError::io("write prometheus.yml", e))?;
        let context = "prometheus reload";
        let response = http
            .post(format!("{}/-/reload", self.url()))
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| LabError::http(context, e))?;
        if !response.status().is_success() {
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            return Err(LabError::BadResponse {
                context: context.into(),
                detail: format!("{status}: {body}"),
            });
        }
        Ok(())
    }

    pub(crate) fn request_stop(&mut self) {
        if let Some(process) = self.process.as_mut() {
            process.request_stop();
        }
    }

    /// Stops the server, keeping its data and port for [`Prometheus::restart`].
    pub(crate) fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop(STOP_GRACE);
        }
    }

    pub(crate) async fn restart(
        &mut self,
        programs: &GoPrograms,
        http: &reqwest::Client,
    ) -> Result<(), LabError> {
        if self.process.is_none() {
            self.start_process(programs)?;
        }
        self.wait_ready(http).await
    }
}

/// What the lab's Prometheus watches besides the workloads: controllers' `/metrics` and
/// alerting rule files, as an operator's Prometheus would with the shipped
/// ServiceMonitor and rules.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Monitoring {
    /// `host:port` of each controller's probe server (job `configrollout-controller`).
    pub controllers: Vec<String>,
    /// Rule files to load (`rule_files:`).
    pub rule_files: Vec<PathBuf>,
    /// Remote-read endpoints queried for recent data too (`remote_read:` with
    /// `read_recent: true`). One that does not answer makes every query answer with
    /// `warnings`, as a Thanos or Cortex store that is down does.
    pub remote_read: Vec<String>,
}

/// `"a", "b"`: items quoted for a YAML flow list.
pub(crate) fn quoted_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    items
        .into_iter()
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn scrape_config(targets: &[&str], monitoring: &Monitoring) -> String {
    let mut config = format!(
        "# Written by the configrollout lab.\n\
         global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         scrape_configs:\n  - job_name: configrollout-lab-workload\n    static_configs:\n      - targets: [{}]\n",
        quoted_list(targets.iter().copied())
    );
    if !monitoring.controllers.is_empty() {
        config.push_str(&format!(
            "  - job_name: configrollout-controller\n    metrics_path: /metrics\n    static_configs:\n      - targets: [{}]\n",
            quoted_list(monitoring.controllers.iter().map(String::as_str))
        ));
    }
    if !monitoring.remote_read.is_empty() {
        config.push_str("remote_read:\n");
        for url in &monitoring.remote_read {
            config.push_str(&format!("  - url: {url:?}\n    read_recent: true\n"));
        }
    }
    if !monitoring.rule_files.is_empty() {
        let files: Vec<String> = monitoring
            .rule_files
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        config.push_str(&format!(
            "rule_files: [{}]\n",
            quoted_list(files.iter().map(String::as_str))
        ));
    }
    config
}

/// A loopback port free now (a server started on it may still lose it: see the callers'
/// port-race retries).
pub(crate) fn free_port() -> Result<u16, LabError> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| LabError::io("find a free port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| LabError::io("find a free port", e))?
        .port();
    Ok(port)
}

#[derive(Debug, Deserialize)]
struct QueryResponse {
    status: String,
    #[serde(default)]
    data: Option<QueryData>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueryData {
    result_type: String,
    result: Vec<VectorSample>,
}

#[derive(Debug, Deserialize)]
struct VectorSample {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// Runs an instant PromQL query whose result is a vector.
pub async fn instant_query(
    http: &reqwest::Client,
    base_url: &str,
    query: &str,
) -> Result<Vec<Sample>, LabError> {
    let context = "prometheus query".to_string();
    let url =
        reqwest::Url::parse_with_params(&format!("{base_url}/api/v1/query"), [("query", query)])
            .map_err(|e| LabError::BadResponse {
                context: context.clone(),
                detail: format!("URL {base_url}: {e}"),
            })?;
    let response = http
        .get(url)
        .timeout(CALL_TIMEOUT)
        .send()
        .await
        .map_err(|e| LabError::http(&context, e))?;
    let body: QueryResponse = response
        .json()
        .await
        .map_err(|e| LabError::http(&context, e))?;
    if body.status != "success" {
        return Err(LabError::BadResponse {
            context,
            detail: body.error.unwrap_or(body.status),
        });
    }
    let data = body.data.ok_or_else(|| LabError::BadResponse {
        context: context.clone(),
        detail: "no data".into(),
    })?;
    if data.result_type != "vector" {
        return Err(LabError::BadResponse {
            context,
            detail: format!("expected a vector, got {}", data.result_type),
        });
    }
    data.result
        .into_iter()
        .map(|s| {
            let value = parse_value(&s.value.1).ok_or_else(|| LabError::BadResponse {
                context: context.clone(),
                detail: format!("value {:?}", s.value.1),
            })?;
            Ok(Sample {
                labels: s.metric,
                value,
            })
        })
        .collect()
}

fn parse_value(raw: &str) -> Option<f64> {
    match raw {
        "NaN" => Some(f64::NAN),
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        other => other.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrape_config_scrapes_every_workload_each_second() {
        let config: serde_json::Value = serde_saphyr::from_str(&scrape_config(
            &["127.0.0.1:1", "127.0.0.1:2"],
            &Monitoring::default(),
        ))
        .expect("valid YAML");
        assert_eq!(config["global"]["scrape_interval"], "1s");
        let targets = &config["scrape_configs"][0]["static_configs"][0]["targets"];
        assert_eq!(targets[0], "127.0.0.1:1");
        assert_eq!(targets[1], "127.0.0.1:2");
        assert!(config.get("rule_files").is_none());
    }

    #[test]
    fn monitoring_adds_the_controllers_job_and_rule_files() {
        let monitoring = Monitoring {
            controllers: vec!["127.0.0.1:3".into()],
            rule_files: vec![PathBuf::from("/lab/rules.yaml")],
            remote_read: vec!["http://127.0.0.1:9/api/v1/read".into()],
        };
        let config: serde_json::Value =
            serde_saphyr::from_str(&scrape_config(&["127.0.0.1:1"], &monitoring))
                .expect("valid YAML");
        assert_eq!(
            config["scrape_configs"][0]["static_configs"][0]["targets"][0],
            "127.0.0.1:1"
        );
        let job = &config["scrape_configs"][1];
        assert_eq!(job["job_name"], "configrollout-controller");
        assert_eq!(job["static_configs"][0]["targets"][0], "127.0.0.1:3");
        assert_eq!(config["rule_files"][0], "/lab/rules.yaml");
        assert_eq!(
            config["remote_read"][0]["url"],
            "http://127.0.0.1:9/api/v1/read"
        );
        assert_eq!(config["remote_read"][0]["read_recent"], true);
    }

    #[test]
    fn special_sample_values_parse() {
        assert!(parse_value("NaN").is_some_and(f64::is_nan));
        assert_eq!(parse_value("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_value("0.25"), Some(0.25));
        assert_eq!(parse_value("x"), None);
    }
}
