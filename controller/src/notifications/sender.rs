//! Delivers the notices of rollouts' outboxes to their sinks: one worker per sink, so a
//! slow or failing receiver delays nobody else, and nothing here is awaited by a
//! reconcile (it hands the outbox over with [`Notifier::offer`] and goes on).
//!
//! The outbox in each rollout's status is the durable queue; what is kept here is the
//! work derived from it and how far each sink got, which the next reconcile writes back
//! (`status.notifications.sinks`). A replica sends only for rollouts whose shard it holds
//! (checked before every attempt); a restarted or new holder starts from the stored
//! status, so a notice delivered just before a crash may be delivered again, always under
//! the same idempotency key.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::Stream;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use crate::api::{
    ClusterNotificationSink, ConfigRollout, DeliveryResult, MAX_OUTBOX, Notice, NotificationStatus,
    SinkDelivery,
};
use crate::notify::{idempotency_key, owed, stamp};
use crate::reconcile::{WriteFence, api_call};
use crate::telemetry::metrics::{DeliveryOutcome, Metrics};

use super::format::{self, NoticeContext};
use super::sink::{SinkClient, SinkError};

/// Attempts at one notice before it is given up.
pub const MAX_ATTEMPTS: u32 = 8;
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long an unusable sink (missing, a Secret missing) waits before it is tried again.
const UNUSABLE_RETRY: Duration = Duration::from_secs(10);
/// How long a resolved sink (its spec and Secrets) is used before it is read again: a
/// changed URL, key or header is in use within this.
const SINK_REFRESH: Duration = Duration::from_secs(15);
/// How long a sink found unusable is taken as such before it is read again: one fixed
/// (created, its Secret added) is used at the next retry.
const UNUSABLE_REFRESH: Duration = Duration::from_secs(5);
/// Most rollouts one sink's worker queues; more wait in their outboxes for a later offer.
const MAX_QUEUED_ROLLOUTS: usize = 20_000;
/// How long delivery records of a rollout that is no longer offered are kept.
const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);

/// Sends notifications; share it as `Arc<Notifier>`.
pub struct Notifier {
    hub: kube::Client,
    namespace: String,
    source: String,
    fence: WriteFence,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    workers: Mutex<HashMap<String, Arc<Worker>>>,
    ledger: Mutex<HashMap<String, Ledger>>,
    resolved: Mutex<HashMap<String, Resolved>>,
    wakes: broadcast::Sender<ObjectRef<ConfigRollout>>,
}

/// How far the sinks of one rollout got, as this process knows it.
struct Ledger {
    sinks: BTreeMap<String, SinkDelivery>,
    touched: Instant,
}

#[derive(Clone)]
struct Resolved {
    at: Instant,
    fresh_for: Duration,
    exists: bool,
    client: Result<SinkClient, SinkError>,
}

/// One sink's queue and the task that empties it.
struct Worker {
    sink: String,
    wake: Notify,
    queue: Mutex<BTreeMap<String, Work>>,
}

/// What one rollout is owed by one sink.
#[derive(Clone)]
struct Work {
    rollout: Arc<ConfigRollout>,
    notices: Vec<Notice>,
    /// When each notice was first handed over, right after the status write that raised
    /// it: the start of its delivery latency.
    queued: BTreeMap<i64, Instant>,
    attempts: u32,
    next_attempt: Instant,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        // A panic elsewhere poisoned it; its data is still consistent (each critical
        // section leaves it whole).
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Notifier {
    /// A notifier reading sinks and their Secrets (in the controller's `namespace`)
    /// through `hub`, sending only what `fence` permits, naming itself `source`
    /// (CloudEvents), until `stop`.
    pub fn new(
        hub: kube::Client,
        namespace: String,
        source: String,
        fence: WriteFence,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let (wakes, _) = broadcast::channel(1024);
        Arc::new(Self {
            hub,
            namespace,
            source,
            fence,
            metrics,
            stop,
            workers: Mutex::default(),
            ledger: Mutex::default(),
            resolved: Mutex::default(),
            wakes,
        })
    }

    /// The rollouts whose delivery records changed, to be reconciled so that their
    /// status records it. Each call is a new subscriber (one per controller run).
    pub fn reconcile_requests(
        &self,
    ) -> impl Stream<Item = ObjectRef<ConfigRollout>> + Send + use<> {
        futures::stream::unfold(self.wakes.subscribe(), |mut receiver| async move {
            loop {
                match receiver.recv().await {
                    Ok(rollout) => return Some((rollout, receiver)),
                    // Missed requests cost only a later status write: each rollout is
                    // reconciled again at its next requeue anyway.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }

    /// How far each sink of the rollout `uid` got since its status was last written.
    pub fn deliveries(&self, uid: &str) -> Vec<SinkDelivery> {
        lock(&self.ledger)
            .get(uid)
            .map(|ledger| ledger.sinks.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Takes up the notices `status` (as written) holds for `rollout`: each sink's worker
    /// is handed what it is owed, and wakes. Returns at once.
    pub fn offer(self: &Arc<Self>, rollout: &ConfigRollout, status: Option<&NotificationStatus>) {
        let Some(uid) = rollout.uid() else {
            return;
        };
        let Some(status) = status.filter(|status| !status.sinks.is_empty()) else {
            // Nothing subscribed (most rollouts): whatever was queued for it goes.
            if lock(&self.ledger).remove(&uid).is_some() {
                for worker in lock(&self.workers).values() {
                    lock(&worker.queue).remove(&uid);
                }
                self.update_queued();
            }
            return;
        };
        let now = Instant::now();
        // Copied for the workers only when some sink is owed a notice.
        let mut shared: Option<Arc<ConfigRollout>> = None;
        let mut owed_by_sink = Vec::with_capacity(status.sinks.len());
        {
            let mut ledger = lock(&self.ledger);
            if ledger.len() > 1024 {
                ledger.retain(|_, entry| now.duration_since(entry.touched) < FORGET_AFTER);
            }
            let entry = ledger.entry(uid.clone()).or_insert_with(|| Ledger {
                sinks: BTreeMap::new(),
                touched: now,
            });
            entry.touched = now;
            entry
                .sinks
                .retain(|sink, _| status.sinks.iter().any(|stored| &stored.sink == sink));
            for stored in &status.sinks {
                let known = entry
                    .sinks
                    .entry(stored.sink.clone())
                    .or_insert_with(|| stored.clone());
                known.triggers.clone_from(&stored.triggers);
                if stored.delivered_through > known.delivered_through {
                    known.delivered_through = stored.delivered_through;
                }
                known.given_up = known.given_up.max(stored.given_up);
                // Notices dropped from a full outbox before this sink got them.
                if status.outbox.len() >= MAX_OUTBOX
                    && let Some(first) = status.outbox.first()
                {
                    let dropped = first
                        .sequence
                        .saturating_sub(known.delivered_through)
                        .saturating_sub(1);
                    if dropped > 0 {
                        known.delivered_through = first.sequence.saturating_sub(1);
                        known.given_up = known.given_up.saturating_add(dropped);
                        known.last_result = Some(DeliveryResult::GaveUp);
                        known.message =
                            Some(format!("{dropped} notice(s) dropped from a full outbox"));
                        known.last_attempt_at = Some(stamp(Utc::now()));
                        self.metrics.notifications.count(
                            Some(&stored.sink),
                            DeliveryOutcome::Dropped,
                            u64::try_from(dropped).unwrap_or(0),
                        );
                    }
                }
                let notices: Vec<Notice> = owed(&status.outbox, known).cloned().collect();
                owed_by_sink.push((stored.sink.clone(), notices));
            }
        }
        // Sinks no longer subscribed forget the rollout.
        for (sink, worker) in lock(&self.workers).iter() {
            if !owed_by_sink.iter().any(|(owed, _)| owed == sink) {
                lock(&worker.queue).remove(&uid);
            }
        }
        for (sink, notices) in owed_by_sink {
            let worker = self.worker(&sink);
            let mut queue = lock(&worker.queue);
            if notices.is_empty() {
                queue.remove(&uid);
                continue;
            }
            let room = queue.len() < MAX_QUEUED_ROLLOUTS;
            match queue.get_mut(&uid) {
                Some(work) => {
                    // The same notice first: its attempts and backoff go on.
                    if work.notices.first().map(|n| n.sequence)
                        != notices.first().map(|n| n.sequence)
                    {
                        work.attempts = 0;
                        work.next_attempt = now;
                    }
                    let mut queued = std::mem::take(&mut work.queued);
                    work.queued = notices
                        .iter()
                        .map(|notice| {
                            let at = queued.remove(&notice.sequence).unwrap_or(now);
                            (notice.sequence, at)
                        })
                        .collect();
                    work.notices = notices;
                    work.rollout = shared
                        .get_or_insert_with(|| Arc::new(rollout.clone()))
                        .clone();
                }
                None if room => {
                    queue.insert(
                        uid.clone(),
                        Work {
                            rollout: shared
                                .get_or_insert_with(|| Arc::new(rollout.clone()))
                                .clone(),
                            queued: notices
                                .iter()
                                .map(|notice| (notice.sequence, now))
                                .collect(),
                            notices,
                            attempts: 0,
                            next_attempt: now,
                        },
                    );
                }
                None => continue,
            }
            drop(queue);
            worker.wake.notify_one();
        }
        self.update_queued();
    }

    fn update_queued(&self) {
        let queued: usize = lock(&self.workers)
            .values()
            .map(|worker| {
                lock(&worker.queue)
                    .values()
                    .map(|work| work.notices.len())
                    .sum::<usize>()
            })
            .sum();
        self.metrics.notifications.set_queued(queued);
    }

    /// The worker of `sink`, started on first use.
    fn worker(self: &Arc<Self>, sink: &str) -> Arc<Worker> {
        let mut workers = lock(&self.workers);
        if let Some(worker) = workers.get(sink) {
            return worker.clone();
        }
        let worker = Arc::new(Worker {
            sink: sink.to_owned(),
            wake: Notify::new(),
            queue: Mutex::default(),
        });
        workers.insert(sink.to_owned(), worker.clone());
        let notifier = self.clone();
        let running = worker.clone();
        tokio::spawn(async move { notifier.run(running).await });
        worker
    }

    /// One sink's loop: the rollout whose next attempt is due first, one notice at a
    /// time, in order per rollout.
    async fn run(self: Arc<Self>, worker: Arc<Worker>) {
        loop {
            let next = lock(&worker.queue)
                .iter()
                .min_by_key(|(_, work)| work.next_attempt)
                .map(|(uid, work)| (uid.clone(), work.next_attempt));
            let due = match next {
                None => None,
                Some((uid, at)) if at <= Instant::now() => Some(uid),
                Some((_, at)) => {
                    tokio::select! {
                        () = self.stop.cancelled() => return,
                        () = worker.wake.notified() => {}
                        () = tokio::time::sleep_until(at.into()) => {}
                    }
                    continue;
                }
            };
            let Some(uid) = due else {
                tokio::select! {
                    () = self.stop.cancelled() => return,
                    () = worker.wake.notified() => {}
                }
                continue;
            };
            if self.stop.is_cancelled() {
                return;
            }
            self.attempt(&worker, &uid).await;
        }
    }

    /// One attempt at the first notice `uid` is owed by `worker`'s sink.
    async fn attempt(&self, worker: &Worker, uid: &str) {
        let Some(work) = lock(&worker.queue).get(uid).cloned() else {
            return;
        };
        let Some(notice) = work.notices.first().cloned() else {
            lock(&worker.queue).remove(uid);
            return;
        };
        if !self.fence.holds(&work.rollout) {
            // Another replica holds the shard now; it delivers from the stored outbox.
            lock(&worker.queue).remove(uid);
            return;
        }
        let resolved = self.resolve(&worker.sink).await;
        let sink_label = resolved.exists.then_some(worker.sink.as_str());
        let client = match &resolved.client {
            Ok(client) => client,
            Err(error) => {
                self.metrics
                    .notifications
                    .count(sink_label, DeliveryOutcome::Unusable, 1);
                tracing::warn!(sink = %worker.sink, rollout = %work.rollout.name_any(), %error, "notification sink unusable");
                self.record(worker, uid, &work, |delivery| {
                    delivery.last_result = Some(DeliveryResult::Unusable);
                    delivery.message = Some(error.to_string());
                });
                self.reschedule(worker, uid, notice.sequence, 0, UNUSABLE_RETRY);
                return;
            }
        };
        let namespace = work.rollout.namespace().unwrap_or_default();
        let name = work.rollout.name_any();
        let key = idempotency_key(uid, notice.sequence);
        let context = NoticeContext {
            namespace: &namespace,
            name: &name,
            uid,
            notice: &notice,
            idempotency_key: &key,
            dashboard_url: client.dashboard_url(),
            source: &self.source,
        };
        let rendered = format::render(client.type_(), &context);
        let sent = client.send(&rendered, &key, Utc::now().timestamp()).await;
        match sent {
            Ok(()) => {
                self.metrics
                    .notifications
                    .count(sink_label, DeliveryOutcome::Delivered, 1);
                // From the status write that raised it (the transition) to the answer;
                // a notice taken over from another replica, from when this one got it.
                let waited = work
                    .queued
                    .get(&notice.sequence)
                    .map_or(Duration::ZERO, |queued| queued.elapsed());
                self.metrics
                    .notifications
                    .delivered_after(waited.as_secs_f64());
                tracing::info!(sink = %worker.sink, rollout = %format!("{namespace}/{name}"), trigger = notice.trigger.as_str(), %key, "notification delivered");
                self.record(worker, uid, &work, |delivery| {
                    delivery.delivered_through = delivery.delivered_through.max(notice.sequence);
                    delivery.last_result = Some(DeliveryResult::Delivered);
                    delivery.message = None;
                });
                self.advance(worker, uid, notice.sequence);
            }
            Err(why) => {
                let attempts = work.attempts.saturating_add(1);
                if attempts >= MAX_ATTEMPTS {
                    self.metrics
                        .notifications
                        .count(sink_label, DeliveryOutcome::GaveUp, 1);
                    tracing::warn!(sink = %worker.sink, rollout = %format!("{namespace}/{name}"), trigger = notice.trigger.as_str(), %key, %why, attempts, "notification given up");
                    self.record(worker, uid, &work, |delivery| {
                        delivery.delivered_through =
                            delivery.delivered_through.max(notice.sequence);
                        delivery.given_up = delivery.given_up.saturating_add(1);
                        delivery.last_result = Some(DeliveryResult::GaveUp);
                        delivery.message = Some(format!("{why} ({attempts} attempts)"));
                    });
                    self.advance(worker, uid, notice.sequence);
                } else {
                    self.metrics
                        .notifications
                        .count(sink_label, DeliveryOutcome::Failed, 1);
                    tracing::info!(sink = %worker.sink, rollout = %format!("{namespace}/{name}"), trigger = notice.trigger.as_str(), %key, %why, attempts, "notification failed; retried");
                    self.record(worker, uid, &work, |delivery| {
                        delivery.last_result = Some(DeliveryResult::Retrying);
                        delivery.message = Some(why.clone());
                    });
                    self.reschedule(worker, uid, notice.sequence, attempts, backoff(attempts));
                }
            }
        }
        self.update_queued();
    }

    /// Updates the delivery record of `uid` at `worker`'s sink, and asks for the
    /// rollout's reconcile so that its status records it.
    fn record(
        &self,
        worker: &Worker,
        uid: &str,
        work: &Work,
        change: impl FnOnce(&mut SinkDelivery),
    ) {
        let changed = {
            let mut ledger = lock(&self.ledger);
            let Some(delivery) = ledger
                .get_mut(uid)
                .and_then(|entry| entry.sinks.get_mut(&worker.sink))
            else {
                return;
            };
            let before = delivery.clone();
            change(delivery);
            let changed = *delivery != before;
            // The same failure again is no news: its time stays that of the first, and
            // the rollout's status is not written for it (a sink down for an hour under
            // a thousand rollouts must not cost a status write per retry).
            if changed {
                delivery.last_attempt_at = Some(stamp(Utc::now()));
            }
            changed
        };
        if changed {
            // Nobody listening (between two controller runs) loses nothing: the next
            // reconcile writes the record.
            let _ = self.wakes.send(ObjectRef::from_obj(work.rollout.as_ref()));
        }
    }

    /// Drops the notice `sequence` from `uid`'s work, done with.
    fn advance(&self, worker: &Worker, uid: &str, sequence: i64) {
        let mut queue = lock(&worker.queue);
        if let Some(work) = queue.get_mut(uid) {
            work.notices.retain(|notice| notice.sequence > sequence);
            work.queued.retain(|number, _| *number > sequence);
            work.attempts = 0;
            work.next_attempt = Instant::now();
            if work.notices.is_empty() {
                queue.remove(uid);
            }
        }
    }

    /// Tries the notice `sequence` of `uid` again after `wait`.
    fn reschedule(&self, worker: &Worker, uid: &str, sequence: i64, attempts: u32, wait: Duration) {
        let mut queue = lock(&worker.queue);
        if let Some(work) = queue.get_mut(uid)
            && work.notices.first().map(|notice| notice.sequence) == Some(sequence)
        {
            work.attempts = attempts;
            work.next_attempt = Instant::now() + wait;
        }
    }

    /// The client of `sink`, read again after [`SINK_REFRESH`].
    async fn resolve(&self, sink: &str) -> Resolved {
        if let Some(resolved) = lock(&self.resolved).get(sink)
            && resolved.at.elapsed() < resolved.fresh_for
        {
            return resolved.clone();
        }
        let api: Api<ClusterNotificationSink> = Api::all(self.hub.clone());
        let resolved = match api_call("read ClusterNotificationSink", api.get_opt(sink)).await {
            Ok(Some(object)) => {
                let client = SinkClient::resolve(&self.hub, &self.namespace, &object).await;
                Resolved {
                    at: Instant::now(),
                    fresh_for: if client.is_ok() {
                        SINK_REFRESH
                    } else {
                        UNUSABLE_REFRESH
                    },
                    exists: true,
                    client,
                }
            }
            Ok(None) => Resolved {
                at: Instant::now(),
                fresh_for: UNUSABLE_REFRESH,
                exists: false,
                client: Err(SinkError::Missing(sink.to_owned())),
            },
            Err(_) => Resolved {
                // Not kept: asked again at the next attempt.
                at: Instant::now(),
                fresh_for: Duration::ZERO,
                exists: false,
                client: Err(SinkError::Hub(format!("ClusterNotificationSink {sink}"))),
            },
        };
        lock(&self.resolved).insert(sink.to_owned(), resolved.clone());
        resolved
    }
}

/// The wait after `attempts` failed attempts: 1 s, 2 s, 4 s, ... at most a minute.
pub fn backoff(attempts: u32) -> Duration {
    let exponent = attempts.saturating_sub(1).min(6);
    Duration::from_secs(1_u64 << exponent).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_a_minute() {
        let waits: Vec<u64> = (1..=MAX_ATTEMPTS).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
