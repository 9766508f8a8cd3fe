//! `list`, `get` and `status`: the commands that read rollouts and print them, once or
//! as they change.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::args::OutputFormat;
use crate::hub::Hub;
use crate::render::{self, Outcome};
use crate::{CliError, EXIT_COMPLETE, EXIT_FAILED, EXIT_TIMEOUT};
use configrollout_api::ConfigRollout;

/// How often `status` reads the rollout.
const STATUS_POLL: Duration = Duration::from_secs(2);

impl Hub {
    pub(super) async fn list(&self, all_namespaces: bool, watch: bool) -> Result<u8, CliError> {
        let api: Api<ConfigRollout> = if all_namespaces {
            Api::all(self.client.clone())
        } else {
            self.rollouts()
        };
        if !watch {
            let list = self
                .call("listing configrollouts", api.list(&Default::default()))
                .await?;
            print!("{}", render::render_list(&list.items, all_namespaces));
            return Ok(EXIT_COMPLETE);
        }
        let mut known: BTreeMap<(String, String), ConfigRollout> = BTreeMap::new();
        let mut initial: Option<BTreeMap<(String, String), ConfigRollout>> = None;
        let mut screen = Screen::new();
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = stream.next().await {
            let key = |rollout: &ConfigRollout| {
                (rollout.namespace().unwrap_or_default(), rollout.name_any())
            };
            match event {
                Ok(watcher::Event::Init) => initial = Some(BTreeMap::new()),
                Ok(watcher::Event::InitApply(rollout)) => {
                    if let Some(initial) = initial.as_mut() {
                        initial.insert(key(&rollout), rollout);
                    }
                }
                Ok(watcher::Event::InitDone) => known = initial.take().unwrap_or_default(),
                Ok(watcher::Event::Apply(rollout)) => {
                    known.insert(key(&rollout), rollout);
                }
                Ok(watcher::Event::Delete(rollout)) => {
                    known.remove(&key(&rollout));
                }
                Err(error) => {
                    eprintln!("watch: {error}");
                    continue;
                }
            }
            if initial.is_none() {
                let rollouts: Vec<ConfigRollout> = known.values().cloned().collect();
                screen.show(&render::render_list(&rollouts, all_namespaces));
            }
        }
        Ok(EXIT_COMPLETE)
    }

    pub(super) async fn get(
        &self,
        name: &str,
        watch: bool,
        output: Option<OutputFormat>,
    ) -> Result<u8, CliError> {
        let show = |rollout: &ConfigRollout| -> Result<String, CliError> {
            match output {
                None => Ok(render::render_get(rollout)),
                Some(OutputFormat::Json) => serde_json::to_string_pretty(rollout)
                    .map(|text| text + "\n")
                    .map_err(|e| CliError::Message(format!("rendering JSON: {e}"))),
                Some(OutputFormat::Yaml) => configrollout_api::to_yaml(rollout)
                    .map_err(|e| CliError::Message(format!("rendering YAML: {e}"))),
            }
        };
        // Read once first, so that a missing rollout is an error, not an empty watch.
        let rollout = self.rollout(name).await?;
        if !watch {
            print!("{}", show(&rollout)?);
            return Ok(EXIT_COMPLETE);
        }
        let mut screen = Screen::new();
        screen.show(&show(&rollout)?);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut stream = std::pin::pin!(
            watcher(self.rollouts(), config)
                .default_backoff()
                .applied_objects()
        );
        while let Some(event) = stream.next().await {
            match event {
                Ok(rollout) => screen.show(&show(&rollout)?),
                Err(error) => eprintln!("watch: {error}"),
            }
        }
        Ok(EXIT_COMPLETE)
    }

    pub(super) async fn status(&self, name: &str, timeout: Duration) -> Result<u8, CliError> {
        let started = Instant::now();
        let mut last_line = String::new();
        loop {
            let rollout = self.rollout(name).await?;
            match render::outcome(&rollout) {
                Some(Outcome::Complete(line)) => {
                    println!("{line}");
                    return Ok(EXIT_COMPLETE);
                }
                Some(Outcome::Failed(line)) => {
                    println!("{line}");
                    return Ok(EXIT_FAILED);
                }
                None => {}
            }
            let waiting = render::waiting_on(&rollout);
            let line = format!("{name}: waiting on {}", waiting.what);
            if line != last_line {
                println!("{line}");
                last_line = line;
            }
            let elapsed = started.elapsed();
            if elapsed >= timeout {
                println!(
                    "timed out after {timeout:?}: {name} is still waiting on {}; unblocks: {}",
                    waiting.what, waiting.who
                );
                return Ok(EXIT_TIMEOUT);
            }
            tokio::time::sleep(STATUS_POLL.min(timeout - elapsed)).await;
        }
    }
}

/// Prints successive views: in a terminal each one replaces the last; piped, each is
/// appended after a blank line, without escape codes. A view equal to the last is skipped.
struct Screen {
    terminal: bool,
    last: Option<String>,
}

impl Screen {
    fn new() -> Screen {
        Screen {
            terminal: std::io::stdout().is_terminal(),
            last: None,
        }
    }

    fn show(&mut self, view: &str) {
        if self.last.as_deref() == Some(view) {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = if self.terminal {
            // Home, clear the screen, draw.
            write!(out, "\x1b[H\x1b[2J{view}")
        } else if self.last.is_some() {
            write!(out, "\n{view}")
        } else {
            write!(out, "{view}")
        };
        let _ = out.flush();
        self.last = Some(view.to_owned());
    }
}
