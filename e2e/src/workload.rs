//! The per-region workload (`lab-workload`): request and error counters for Prometheus,
//! with an error ratio tests turn up and down at run time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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
    pub(crate) fn spawn(programs: &GoPrograms, region: &str, dir: &Path) -> Result<Self, LabError> {
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
            .arg(&ready_file);
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
}
