//! `kubectl configrollout`: the kubectl plugin people use to watch, approve and steer
//! rollouts, on the caller's own kubeconfig and identity.
//!
//! `args` is the command line, `commands` the API calls each command makes (every one
//! bounded by `--request-timeout`) on `hub`, the caller's client, `render` what they
//! print, as pure functions, and `dashboard` the local web UI
//! (`kubectl configrollout dashboard`).

mod approval_pin;
mod approve;
mod args;
mod commands;
mod control;
pub mod dashboard;
mod hub;
pub mod render;
mod repair;
mod rotate_key;

pub use args::{Cli, Command, GlobalArgs, OutputFormat, RegionAdd, RegionCommand};
pub use render::{Outcome, Waiting, outcome, render_get, render_history, render_list, waiting_on};

use std::process::ExitCode;

use clap::Parser;

/// Exit code of `status` when the rollout completed.
pub const EXIT_COMPLETE: u8 = 0;
/// Exit code of `status` when the rollout halted, rolled back or has an invalid spec; also
/// of `lint` when the file has errors, and of any other command that fails.
pub const EXIT_FAILED: u8 = 1;
/// Exit code of `status` when `--timeout` passed first.
pub const EXIT_TIMEOUT: u8 = 2;
/// Exit code of `status` when it could not find out (the rollout or the API server could
/// not be read), so that 1 always means the rollout itself failed.
pub const EXIT_STATUS_ERROR: u8 = 3;

/// Exit code when the command line is wrong.
pub const EXIT_USAGE: u8 = 3;

/// Why a command failed, in words for the person who ran it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The kubeconfig could not be loaded or a client not built.
    #[error("kubeconfig: {0}")]
    Config(String),
    /// The API server refused or failed a request.
    #[error("{what}: the API server answered {code} {reason}: {message}")]
    Api {
        /// What was being done.
        what: String,
        /// HTTP status code.
        code: u16,
        /// Status reason, e.g. `Forbidden`.
        reason: String,
        /// The API server's message.
        message: String,
    },
    /// The API server could not be reached.
    #[error("{what}: {message}")]
    Transport {
        /// What was being done.
        what: String,
        /// The client's error.
        message: String,
    },
    /// The API server did not answer within `--request-timeout`.
    #[error("{what}: no answer within {after:?}")]
    Timeout {
        /// What was being done.
        what: String,
        /// The bound.
        after: std::time::Duration,
    },
    /// Anything else, said in full.
    #[error("{0}")]
    Message(String),
}

/// Runs the plugin with the process's arguments and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            // Help and version are not errors; a wrong command line must not look like a
            // status (1 failed, 2 timed out) to a CI script.
            return ExitCode::from(if error.use_stderr() {
                EXIT_USAGE
            } else {
                EXIT_COMPLETE
            });
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("kubectl-configrollout: cannot start the runtime: {error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let is_status = matches!(cli.command, Command::Status { .. });
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(if is_status {
                EXIT_STATUS_ERROR
            } else {
                EXIT_FAILED
            })
        }
    }
}
