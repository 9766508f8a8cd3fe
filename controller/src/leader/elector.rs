//! The IO side of leader election: campaigns, renews and releases the Lease.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ListParams, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::lease::{LeaseAction, LeaseConfig, Sighting, Tenure, claim, decide, release};
use super::modes::held_by_another;
use super::shard::{GROUP_LABEL, ROLE_LABEL, ROLE_SHARD};
use super::{LeaderError, LeaderState};

/// The IO side: runs the election until shut down, then releases the Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    sighting: Option<Sighting>,
    /// Sightings of the shard Leases of sharded replicas of the same controller.
    shard_sightings: std::collections::BTreeMap<String, Sighting>,
    leading: watch::Sender<bool>,
    reachable: watch::Sender<bool>,
    valid_until: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
}

/// What one attempt found.
enum Attempt {
    Leading,
    /// We hold the Lease, but sharded replicas still hold shard Leases (a switch between
    /// modes): keep it, and lead once they are released or expire.
    Claimed {
        shards_held: usize,
    },
    Standby {
        holder: String,
    },
}

impl LeaderElector {
    /// An elector on the Lease named by `config`, through `client`, and its read side.
    pub fn new(
        client: kube::Client,
        config: LeaseConfig,
    ) -> Result<(LeaderElector, LeaderState), LeaderError> {
        config.validate()?;
        let (leading, leading_rx) = watch::channel(false);
        let (reachable, reachable_rx) = watch::channel(false);
        let valid_until = std::sync::Arc::new(std::sync::Mutex::new(None));
        let elector = LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            sighting: None,
            shard_sightings: std::collections::BTreeMap::new(),
            leading,
            reachable,
            valid_until: valid_until.clone(),
        };
        Ok((
            elector,
            LeaderState::elected(leading_rx, reachable_rx, valid_until),
        ))
    }

    /// Campaigns, renews and polls until `shutdown` is cancelled; then stops leading and
    /// releases the Lease if we hold it. Cancel `shutdown` only after the writers have
    /// stopped, so that nothing writes after the hand-over. Errors of single attempts are
    /// logged and retried; the only error returned is a failed release.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), LeaderError> {
        let config = self.config.clone();
        let mut tenure: Option<Tenure> = None;
        info!(
            lease = %config.name,
            namespace = %config.namespace,
            identity = %config.identity,
            "leader election started"
        );
        loop {
            let sent = Instant::now();
            let attempt_deadline = match tenure {
                Some(tenure) => tenure.deadline(&config),
                None => sent + config.call_timeout * 2,
            };
            let outcome = tokio::select! {
                () = shutdown.cancelled() => break,
                outcome = tokio::time::timeout_at(attempt_deadline, self.attempt(sent)) => outcome,
            };
            let next = match outcome {
                Ok(Ok(Attempt::Leading)) => {
                    let renewed = Tenure::renewed(sent);
                    tenure = Some(renewed);
                    self.set_valid_until(Some(renewed.deadline(&config)));
                    self.reachable.send_replace(true);
                    self.set_leading(true);
                    sent + config.renew_interval
                }
                Ok(Ok(Attempt::Claimed { shards_held })) => {
                    tenure = Some(Tenure::renewed(sent));
                    self.reachable.send_replace(true);
                    self.set_leading(false);
                    info!(
                        shards_held,
                        "holding the lease; waiting for sharded replicas to release their shard leases"
                    );
                    sent + config.retry_period.min(config.renew_interval)
                }
                Ok(Ok(Attempt::Standby { holder })) => {
                    tenure = None;
                    self.reachable.send_replace(true);
                    self.set_leading(false);
                    debug!(%holder, "standing by");
                    Instant::now() + config.retry_period
                }
                Ok(Err(error)) => {
                    self.reachable.send_replace(false);
                    warn!(%error, leading = tenure.is_some(), "lease attempt failed");
                    Instant::now() + config.retry_period
                }
                Err(_) => {
                    self.reachable.send_replace(false);
                    warn!(leading = tenure.is_some(), "lease attempt timed out");
                    Instant::now() + config.retry_period
                }
            };
            // Sleep until the next attempt, waking at the renew deadline to stop leading
            // before anyone else could consider the Lease expired.
            let wake = match tenure {
                Some(tenure) => next.min(tenure.deadline(&config)),
                None => next,
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(wake) => {}
            }
            if let Some(held) = tenure
                && !held.leading_at(Instant::now(), &config)
            {
                tenure = None;
                warn!("could not renew the lease before the renew deadline; stopped leading");
                self.set_leading(false);
            }
        }
        self.set_leading(false);
        self.release_held().await
    }

    /// One read-decide-write round. `sent` is when it started.
    async fn attempt(&mut self, sent: Instant) -> Result<Attempt, LeaderError> {
        let timeout = self.config.call_timeout;
        let lease = call("read lease", timeout, self.api.get_opt(&self.config.name)).await?;
        self.sighting = lease
            .as_ref()
            .map(|lease| Sighting::observe(self.sighting.as_ref(), lease, sent));
        let action = decide(lease.as_ref(), self.sighting.as_ref(), &self.config, sent);
        let Some(desired) = claim(lease.as_ref(), &action, &self.config, Timestamp::now()) else {
            let holder = match action {
                LeaseAction::Wait { holder, .. } => holder,
                _ => String::new(),
            };
            return Ok(Attempt::Standby { holder });
        };
        let params = PostParams::default();
        let written = match action {
            LeaseAction::Create => {
                call("create lease", timeout, self.api.create(&params, &desired)).await
            }
            _ => {
                call(
                    "write lease",
                    timeout,
                    self.api.replace(&self.config.name, &params, &desired),
                )
                .await
            }
        };
        match written {
            Ok(written) => {
                if action == LeaseAction::Acquire || action == LeaseAction::Create {
                    info!(
                        identity = %self.config.identity,
                        transitions = written.spec.as_ref().and_then(|spec| spec.lease_transitions),
                        "acquired the lease"
                    );
                }
                self.sighting = Some(Sighting::observe(None, &written, sent));
                let shards_held = self.shards_held_by_others(sent).await?;
                if shards_held > 0 {
                    return Ok(Attempt::Claimed { shards_held });
                }
                Ok(Attempt::Leading)
            }
            // Someone else created or took it between our read and write. When we were
            // renewing this is not proof that we lost: the next read tells.
            Err(LeaderError::Conflict { .. }) if action != LeaseAction::Renew => {
                let holder = String::from("another candidate");
                Ok(Attempt::Standby { holder })
            }
            Err(error) => Err(error),
        }
    }

    /// How many shard Leases of this controller's sharded replicas are held by others
    /// and not expired by our observation (see [`super::modes`]).
    async fn shards_held_by_others(&mut self, now: Instant) -> Result<usize, LeaderError> {
        let selector = format!(
            "{GROUP_LABEL}={},{ROLE_LABEL}={ROLE_SHARD}",
            self.config.name
        );
        let listed = call(
            "list shard leases",
            self.config.call_timeout,
            self.api.list(&ListParams::default().labels(&selector)),
        )
        .await?;
        let mut seen = std::collections::BTreeMap::new();
        let mut held = 0;
        for lease in &listed.items {
            let Some(name) = lease.metadata.name.clone() else {
                continue;
            };
            let sighting = Sighting::observe(self.shard_sightings.get(&name), lease, now);
            let config = LeaseConfig {
                name: name.clone(),
                ..self.config.clone()
            };
            if held_by_another(Some(lease), Some(&sighting), &config, now) {
                held += 1;
            }
            seen.insert(name, sighting);
        }
        self.shard_sightings = seen;
        Ok(held)
    }

    /// Hands the Lease over if we hold it.
    async fn release_held(&self) -> Result<(), LeaderError> {
        let timeout = self.config.call_timeout;
        let Some(lease) = call("read lease", timeout, self.api.get_opt(&self.config.name)).await?
        else {
            return Ok(());
        };
        let Some(released) = release(&lease, &self.config, Timestamp::now()) else {
            return Ok(());
        };
        call(
            "release lease",
            timeout,
            self.api
                .replace(&self.config.name, &PostParams::default(), &released),
        )
        .await?;
        info!(identity = %self.config.identity, "released the lease");
        Ok(())
    }

    fn set_valid_until(&self, until: Option<Instant>) {
        if let Ok(mut valid_until) = self.valid_until.lock() {
            *valid_until = until;
        }
    }

    fn set_leading(&self, leading: bool) {
        if !leading {
            self.set_valid_until(None);
        }
        let changed = self.leading.send_if_modified(|current| {
            let changed = *current != leading;
            *current = leading;
            changed
        });
        if changed {
            info!(identity = %self.config.identity, leading, "leadership changed");
        }
    }
}

/// Runs one API call with a timeout; a 409 means another candidate wrote first.
pub(super) async fn call<T>(
    operation: &'static str,
    timeout: Duration,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, LeaderError> {
    crate::api_call::timed(operation, timeout, request)
        .await
        .map_err(|error| {
            if error.is_conflict() {
                LeaderError::Conflict { operation }
            } else {
                LeaderError::Call(error)
            }
        })
}
