//! The lab's one error type.

use std::path::PathBuf;

/// Everything that can go wrong while building, starting, using or stopping the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A file or directory operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the lab was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `go build` of the lab's Go programs failed.
    #[error("building the lab's Go programs failed ({status}); output:\n{output}")]
    GoBuild {
        /// Exit status of `go build`.
        status: String,
        /// What `go build` printed.
        output: String,
    },
    /// A lab process exited while it was expected to run.
    #[error("{what} exited ({status}); last lines of {log}:\n{log_tail}")]
    ProcessExited {
        /// Which process.
        what: String,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The end of its log.
        log_tail: String,
    },
    /// Something did not become ready before its deadline.
    #[error("{what} was not ready within {seconds}s: {detail}")]
    NotReady {
        /// What was awaited.
        what: String,
        /// The deadline in seconds.
        seconds: u64,
        /// The last observation.
        detail: String,
    },
    /// No cluster of that name is in the lab.
    #[error("no cluster named {0:?} in the lab")]
    UnknownCluster(String),
    /// A region is stopped, so it has no address to talk to.
    #[error("cluster {0:?} is stopped")]
    ClusterStopped(String),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A kubeconfig could not be read or used.
    #[error("kubeconfig {path}: {detail}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// A manifest could not be parsed or applied.
    #[error("manifest {path}: {detail}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// An HTTP call to the workload or Prometheus failed.
    #[error("{context}: {source}")]
    Http {
        /// What the lab was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: reqwest::Error,
    },
    /// An answer could not be understood.
    #[error("{context}: {detail}")]
    BadResponse {
        /// What the lab was doing.
        context: String,
        /// What was wrong.
        detail: String,
    },
    /// An argument was out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A command-line tool (helm, promtool) refused or failed.
    #[error("{command} failed ({status}):\n{output}")]
    Tool {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed.
        output: String,
    },
}

impl LabError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn http(context: impl Into<String>, source: reqwest::Error) -> Self {
        Self::Http {
            context: context.into(),
            source,
        }
    }
}
