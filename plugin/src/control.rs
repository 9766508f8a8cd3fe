//! `abort`, `retry`, `pause` and `resume`: the commands that steer a rollout by
//! annotating or patching it, run by the plugin and by the dashboard's buttons.

use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};

use super::hub::{Hub, Say};
use super::render;
use super::{CliError, EXIT_COMPLETE, EXIT_FAILED};
use configrollout_api::annotations::{ABORT_ANNOTATION, RETRY_ANNOTATION};
use configrollout_api::{RolloutPhase, conditions};

/// How long abort and retry wait to show what the controller made of the request.
const CONTROL_WAIT: Duration = Duration::from_secs(10);

impl Hub {
    /// Abort or retry: sets the annotation to now, then shows what the controller made of
    /// it.
    pub(super) async fn control(
        &self,
        name: &str,
        annotation: &str,
        say: &mut Say<'_>,
    ) -> Result<u8, CliError> {
        if annotation == RETRY_ANNOTATION {
            // A retry resumes only a halt older than the request: refuse what cannot act,
            // and date the request after the halt (the annotation counts in seconds).
            let rollout = self.rollout(name).await?;
            let status = rollout.status.as_ref();
            if status.and_then(|s| s.phase) != Some(RolloutPhase::Halted) {
                return Err(CliError::Message(format!(
                    "retry resumes only a halted rollout: configrollout {}/{name} is {}",
                    self.namespace,
                    status
                        .and_then(|s| s.phase)
                        .map_or_else(|| "without status".to_owned(), |p| format!("{p:?}"))
                )));
            }
            let halted_at = status
                .and_then(|s| s.true_condition(conditions::HALTED))
                .map(|c| c.last_transition_time.0.as_second());
            if let Some(halted_at) = halted_at {
                let wait = halted_at + 1 - Utc::now().timestamp();
                if (1..=2).contains(&wait) {
                    tokio::time::sleep(Duration::from_secs(wait as u64)).await;
                }
            }
        }
        let now = Utc::now();
        let at = now.to_rfc3339_opts(SecondsFormat::Secs, true);
        let patch = serde_json::json!({ "metadata": { "annotations": { annotation: at } } });
        let what = format!("annotating configrollout {}/{name}", self.namespace);
        self.patch(name, &what, &patch).await?;
        let verb = if annotation == ABORT_ANNOTATION {
            "abort"
        } else {
            "retry"
        };
        say(format!(
            "{verb} requested for configrollout {}/{name} at {at} ({annotation})",
            self.namespace
        ));
        let started = Instant::now();
        loop {
            let rollout = self.rollout(name).await?;
            let control = rollout.status.as_ref().and_then(|s| s.control.as_ref());
            let acted = |time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                // The controller records the request's own time: equal means this one.
                time.is_some_and(|time| time.0.as_second() == now.timestamp())
            };
            let refused = annotation == RETRY_ANNOTATION
                && acted(control.and_then(|c| c.refused_retry_at.as_ref()));
            let done = if annotation == ABORT_ANNOTATION {
                acted(control.and_then(|c| c.abort_at.as_ref()))
            } else {
                acted(control.and_then(|c| c.retry_at.as_ref()))
            };
            if refused {
                say("the controller refused the retry (see the ControlRefused event)".to_owned());
                return Ok(EXIT_FAILED);
            }
            if done {
                let waiting = render::waiting_on(&rollout);
                say(format!(
                    "the controller acted on it: {} is {}; waiting on {}",
                    name,
                    rollout
                        .status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .map_or_else(|| "-".to_owned(), |p| format!("{p:?}")),
                    waiting.what
                ));
                return Ok(EXIT_COMPLETE);
            }
            if started.elapsed() >= CONTROL_WAIT {
                say(format!(
                    "the controller has not acted on it within {CONTROL_WAIT:?} \
                     (is it running? a retry dated before the halt, by a clock behind the \
                     controller's, never acts); it is {}",
                    rollout
                        .status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .map_or_else(|| "without status".to_owned(), |p| format!("{p:?}"))
                ));
                return Ok(EXIT_COMPLETE);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    pub(super) async fn pause(
        &self,
        name: &str,
        paused: bool,
        say: &mut Say<'_>,
    ) -> Result<u8, CliError> {
        let patch = serde_json::json!({ "spec": { "paused": paused } });
        let what = format!(
            "patching spec.paused of configrollout {}/{name}",
            self.namespace
        );
        let rollout = self.patch(name, &what, &patch).await?;
        say(format!(
            "configrollout {}/{name} {}: spec.paused is {}; phase {}",
            self.namespace,
            if paused { "paused" } else { "resumed" },
            rollout.spec.paused,
            rollout
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map_or_else(|| "-".to_owned(), |p| format!("{p:?}")),
        ));
        Ok(EXIT_COMPLETE)
    }
}
