//! Debian's single-node VictoriaMetrics beside the lab's Prometheus: a second server of
//! the Prometheus query API, scraping the same workloads every second (issue 34).
//!
//! It runs with the flags a platform running VictoriaMetrics behind configrollout must
//! set ([`GATE_FLAGS`]); the README's "Prometheus-API backends" says why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::LabError;
use crate::gobuild::{EXEC, GoPrograms};
use crate::process::{LabProcess, STOP_GRACE, log_tail};
use crate::prometheus::{free_port, quoted_list};

/// Where Debian's package installs the server.
pub const DEFAULT_VICTORIA_METRICS_BINARY: &str = "/usr/bin/victoria-metrics";

/// What gates need of VictoriaMetrics. By default (`-search.latencyOffset=30s`) it
/// answers an instant query at "now" with the data of 30 s before, stamped "now" (the
/// controller cannot tell: a one-sample gate passed a canary failing half its requests),
/// and a range query over the last 30 s with no points at all.
///
/// No flag changes the other difference with Prometheus: without a `time` argument, an
/// instant query is evaluated at the current second rounded down, so a sample taken in
/// the second it was due reads as a stale answer to the controller.
pub const GATE_FLAGS: &[&str] = &["-search.latencyOffset=0s"];

/// The scrape job of the workloads, as the lab's Prometheus names it.
const WORKLOAD_JOB: &str = "configrollout-lab-workload";
const READY_DEADLINE: Duration = Duration::from_secs(60);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the server is started again after losing a port race.
const PORT_RACE_RETRIES: usize = 3;

/// The lab's VictoriaMetrics server.
#[derive(Debug)]
pub(crate) struct VictoriaMetrics {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    process: Option<LabProcess>,
    /// How many workloads it scrapes: it is ready once each has been scraped.
    targets: usize,
}

impl VictoriaMetrics {
    /// Writes the scrape configuration for `targets` (`host:port` of each workload) and
    /// starts the server on a free loopback port, its data under `dir`.
    pub(crate) fn spawn(
        programs: &GoPrograms,
        binary: &Path,
        dir: &Path,
        targets: &[&str],
    ) -> Result<Self, LabError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
        std::fs::write(dir.join("scrape.yml"), scrape_config(targets))
            .map_err(|e| LabError::io("write scrape.yml", e))?;
        let mut server = Self {
            binary: binary.to_path_buf(),
            dir: dir.to_path_buf(),
            port: free_port()?,
            process: None,
            targets: targets.len(),
        };
        server.start_process(programs)?;
        Ok(server)
    }

    fn start_process(&mut self, programs: &GoPrograms) -> Result<(), LabError> {
        let mut command = Command::new(programs.path(EXEC));
        command
            .arg("--")
            .arg(&self.binary)
            .arg(format!(
                "-promscrape.config={}",
                self.dir.join("scrape.yml").display()
            ))
            .arg(format!(
                "-storageDataPath={}",
                self.dir.join("data").display()
            ))
            .arg(format!("-httpListenAddr=127.0.0.1:{}", self.port))
            .arg("-retentionPeriod=1d")
            .args(GATE_FLAGS);
        self.process = Some(LabProcess::spawn(
            "victoria-metrics",
            command,
            &self.dir.join("victoria-metrics.log"),
        )?);
        Ok(())
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(LabProcess::pid)
    }

    /// [`VictoriaMetrics::wait_ready`], starting the server again on another port when
    /// the one picked as free was taken before the server bound it.
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
                        "victoria-metrics lost its port before binding it; starting again"
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

    /// Waits until `/health` answers OK and a query finds every workload scraped.
    pub(crate) async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<(), LabError> {
        let started = Instant::now();
        loop {
            let process = self
                .process
                .as_mut()
                .ok_or_else(|| LabError::ClusterStopped("victoria-metrics".into()))?;
            process.check_running()?;
            let last = match self.scraped_targets(http).await {
                Ok(scraped) if scraped >= self.targets => return Ok(()),
                Ok(scraped) => format!("{scraped} of {} workloads scraped", self.targets),
                Err(why) => why,
            };
            if started.elapsed() > READY_DEADLINE {
                return Err(LabError::NotReady {
                    what: "victoria-metrics".into(),
                    seconds: READY_DEADLINE.as_secs(),
                    detail: format!(
                        "{last}\n{}",
                        log_tail(&self.dir.join("victoria-metrics.log"), 20)
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// How many workloads have a successful scrape that queries can see, once `/health`
    /// says OK. `nocache=1` reads the newest data whatever the server's latency offset.
    async fn scraped_targets(&self, http: &reqwest::Client) -> Result<usize, String> {
        let health = http
            .get(format!("{}/health", self.url()))
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !health.status().is_success() {
            return Err(format!("/health: {}", health.status()));
        }
        let query = format!("count(up{{job=\"{WORKLOAD_JOB}\"}} == 1)");
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", self.url()),
            [("query", query.as_str()), ("nocache", "1")],
        )
        .map_err(|e| e.to_string())?;
        let body: serde_json::Value = http
            .get(url)
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        let count = match body.pointer("/data/result/0/value/1") {
            None => 0.0,
            Some(value) => value
                .as_str()
                .and_then(|text| text.parse::<f64>().ok())
                .ok_or_else(|| format!("unexpected answer: {body}"))?,
        };
        // A count of workloads: a small whole number.
        Ok(count.max(0.0).round() as usize)
    }

    pub(crate) fn request_stop(&mut self) {
        if let Some(process) = self.process.as_mut() {
            process.request_stop();
        }
    }

    pub(crate) fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop(STOP_GRACE);
        }
    }
}

/// The Prometheus-style scrape configuration `-promscrape.config` reads: the workloads,
/// every second, in the job the lab's Prometheus uses.
fn scrape_config(targets: &[&str]) -> String {
    format!(
        "# Written by the configrollout lab.\n\
         global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
         scrape_configs:\n  - job_name: {WORKLOAD_JOB}\n    static_configs:\n      - targets: [{}]\n",
        quoted_list(targets.iter().copied())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrape_config_scrapes_every_workload_each_second() {
        let config: serde_json::Value =
            serde_saphyr::from_str(&scrape_config(&["127.0.0.1:1", "127.0.0.1:2"]))
                .expect("valid YAML");
        assert_eq!(config["global"]["scrape_interval"], "1s");
        let job = &config["scrape_configs"][0];
        assert_eq!(job["job_name"], WORKLOAD_JOB);
        let targets = &job["static_configs"][0]["targets"];
        assert_eq!(targets[0], "127.0.0.1:1");
        assert_eq!(targets[1], "127.0.0.1:2");
    }
}
