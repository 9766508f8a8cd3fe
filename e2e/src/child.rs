//! A program the tests start beside the lab (the controller), wrapped in `lab-exec` so it
//! dies with the lab, and which a test can stop gracefully (SIGTERM) or kill outright
//! (SIGKILL, to simulate a crash).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::LabError;
use crate::gobuild::{EXEC, GoPrograms};
use crate::process::{LabProcess, log_tail};

/// How long a graceful stop may take before `lab-exec` kills the program.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// A program started with [`crate::Lab::spawn`].
#[derive(Debug)]
pub struct LabChild {
    process: LabProcess,
    log: PathBuf,
}

impl LabChild {
    pub(crate) fn spawn(
        programs: &GoPrograms,
        what: &str,
        program: &Path,
        args: &[OsString],
        envs: &[(String, OsString)],
        log: &Path,
    ) -> Result<Self, LabError> {
        let mut command = Command::new(programs.path(EXEC));
        command
            .arg(format!("--grace={}s", STOP_GRACE.as_secs()))
            .arg("--")
            .arg(program)
            .args(args)
            .envs(envs.iter().map(|(k, v)| (k, v)));
        Ok(Self {
            process: LabProcess::spawn(what, command, log)?,
            log: log.to_path_buf(),
        })
    }

    /// Pid of the program itself (not of its `lab-exec` wrapper), while it runs.
    pub fn program_pid(&self) -> Option<u32> {
        let wrapper = self.process.pid();
        let children =
            std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Stops the program as Kubernetes would: SIGTERM, then SIGKILL after a grace period.
    pub fn stop(mut self) {
        self.process.stop(STOP_GRACE + Duration::from_secs(5));
    }

    /// Kills the program with SIGKILL, as a crash or an evicted node would, and reaps it.
    pub fn kill(mut self) {
        if let Some(pid) = self.program_pid() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        self.process.stop(STOP_GRACE);
    }

    /// Whether the program still runs.
    pub fn is_running(&mut self) -> bool {
        self.process.check_running().is_ok()
    }

    /// The program's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of the program's log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}
