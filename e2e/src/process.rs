//! A child process of the lab: its stdin is the lifeline (closing it asks the child to
//! stop, and a lab that dies closes it too), its output goes to a log file, and it is
//! stopped, at the latest by SIGKILL, when dropped.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::LabError;

/// How long a child may take to stop after its stdin closed before it is killed.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(30);

/// A running child process of the lab.
#[derive(Debug)]
pub(crate) struct LabProcess {
    what: String,
    child: Child,
    lifeline: Option<ChildStdin>,
    log: PathBuf,
}

impl LabProcess {
    /// Starts `command` with stdin piped (the lifeline) and stdout and stderr appended to
    /// `log`.
    pub(crate) fn spawn(
        what: impl Into<String>,
        mut command: Command,
        log: &Path,
    ) -> Result<Self, LabError> {
        let what = what.into();
        let out = open_log(log)?;
        let err = out
            .try_clone()
            .map_err(|e| LabError::io(format!("open {}", log.display()), e))?;
        command.stdin(Stdio::piped()).stdout(out).stderr(err);
        let mut child = command
            .spawn()
            .map_err(|e| LabError::io(format!("start {what} ({:?})", command.get_program()), e))?;
        let lifeline = child.stdin.take();
        tracing::debug!(%what, pid = child.id(), log = %log.display(), "started");
        Ok(Self {
            what,
            child,
            lifeline,
            log: log.to_path_buf(),
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the process has exited, with the end of its log.
    pub(crate) fn check_running(&mut self) -> Result<(), LabError> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(self.exited(status)),
            Err(e) => Err(LabError::io(format!("wait for {}", self.what), e)),
        }
    }

    fn exited(&self, status: ExitStatus) -> LabError {
        LabError::ProcessExited {
            what: self.what.clone(),
            status: status.to_string(),
            log: self.log.clone(),
            log_tail: log_tail(&self.log, 40),
        }
    }

    /// Asks the process to stop (closes its stdin) without waiting.
    pub(crate) fn request_stop(&mut self) {
        self.lifeline.take();
    }

    /// Stops the process: closes its stdin, waits up to `grace`, then kills it. Always
    /// reaps it, so no zombie or orphan is left.
    pub(crate) fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.request_stop();
        let deadline = Instant::now() + grace;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
                _ => break,
            }
        }
        tracing::warn!(what = %self.what, pid = self.pid(), "did not stop in time, killing it");
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for LabProcess {
    fn drop(&mut self) {
        self.stop(STOP_GRACE);
    }
}

fn open_log(path: &Path) -> Result<File, LabError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| LabError::io(format!("open {}", path.display()), e))
}

/// The last `lines` lines of a log file (at most 64 KiB are read).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::from("(no log)");
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Pids of processes whose command line mentions `needle` (for example a lab's
/// directory), read from /proc. Zombies are not counted: they run nothing.
pub fn processes_mentioning(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let own = std::process::id();
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.is_empty() {
            // Zombies and kernel threads have an empty command line.
            continue;
        }
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

/// Whether a process with this pid is still running (not gone, not a zombie).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}
