//! Notifications, decided: which transitions of a rollout are announced, to which sinks,
//! and what its outbox keeps. Pure: the controller reads the subscriptions and the
//! sinks' deliveries, and writes the status this computes in the same status write as
//! the transitions it announces.
//!
//! Each notice takes the next number of `status.notifications.sequence`; with the
//! rollout's uid it is the idempotency key of every delivery of it. The number is raised
//! only in the status write that records the transition, so a controller that dies
//! before that write raises the same notice with the same number from the same stored
//! status, and one that dies after it finds the notice in the outbox: none is lost, and
//! none is sent under two keys.

mod transitions;

use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use configrollout_api::{
    ApprovalWait, ConfigRolloutSpec, ConfigRolloutStatus, MAX_NOTICE_MESSAGE_CHARS, MAX_OUTBOX,
    Notice, NotificationStatus, NotificationTrigger, RolloutPhase, SinkDelivery, Subscription,
    conditions, parse_duration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::engine::Grant;
use crate::engine::clock::{from_time, to_time};
pub use transitions::{Transition, transitions};

/// The subscriptions of a rollout: those of its spec that its grant allows, and those
/// the admin made for its whole namespace (annotation `configrollout.dev/notify`). A
/// sink in both is sent the union of their triggers, and is reminded as the spec says.
/// A spec's subscription outside the grant is left out (and the spec refused, by
/// [`Grant::check`]): a refused rollout still tells the admin's sinks that it was.
pub fn subscriptions(spec: &ConfigRolloutSpec, grant: &Grant) -> Vec<Subscription> {
    let mut merged: Vec<Subscription> = Vec::new();
    let granted = spec.notifications.iter().filter(|subscription| {
        grant.notification_sinks.allows(&subscription.sink)
            || grant
                .namespace_subscriptions
                .iter()
                .any(|admin| admin.sink == subscription.sink)
    });
    for subscription in granted.chain(&grant.namespace_subscriptions) {
        match merged
            .iter_mut()
            .find(|known| known.sink == subscription.sink)
        {
            Some(known) => {
                if known.triggers.is_empty() || subscription.triggers.is_empty() {
                    known.triggers.clear();
                } else {
                    for trigger in &subscription.triggers {
                        if !known.triggers.contains(trigger) {
                            known.triggers.push(*trigger);
                        }
                    }
                }
                if known.remind_after.is_none() {
                    known.remind_after.clone_from(&subscription.remind_after);
                }
            }
            None => merged.push(subscription.clone()),
        }
    }
    merged
}

/// `at` as the API stores it: whole seconds. A status holding finer times would differ,
/// at every reconcile, from what the apiserver gives back.
pub fn stamp(at: DateTime<Utc>) -> Time {
    to_time(at.with_nanosecond(0).unwrap_or(at))
}

/// The idempotency key of a notice of the rollout `uid`: the same for every delivery of
/// it, by whichever replica.
pub fn idempotency_key(uid: &str, sequence: i64) -> String {
    format!("{uid}.{sequence}")
}

/// Whether a sink sent `triggers` (empty: every one) is sent `trigger`.
pub fn wants(triggers: &[NotificationTrigger], trigger: NotificationTrigger) -> bool {
    triggers.is_empty() || triggers.contains(&trigger)
}

/// The notices `delivery`'s sink is still owed from `outbox`, oldest first.
pub fn owed<'a>(
    outbox: &'a [Notice],
    delivery: &'a SinkDelivery,
) -> impl Iterator<Item = &'a Notice> + 'a {
    outbox
        .iter()
        .filter(move |notice| owed_one(delivery, notice))
}

/// Whether `sink` is owed `notice`: not delivered yet, for it, and wanted.
pub fn owed_one(sink: &SinkDelivery, notice: &Notice) -> bool {
    notice.sequence > sink.delivered_through
        && (notice.sinks.is_empty() || notice.sinks.contains(&sink.sink))
        && wants(&sink.triggers, notice.trigger)
}

/// Raises the notices of the transitions from `previous` (the status as stored) to
/// `current` (the status about to be written) into `current.notifications`, with
/// `deliveries` (how far each sink was delivered since `previous` was written, as the
/// sender knows it) merged in, delivered notices dropped and the outbox bounded.
///
/// Returns how long until a stage that waits for its approval is due a reminder, if one
/// is.
pub fn raise(
    previous: &ConfigRolloutStatus,
    current: &mut ConfigRolloutStatus,
    subscriptions: &[Subscription],
    deliveries: &[SinkDelivery],
    now: DateTime<Utc>,
) -> Option<Duration> {
    let found = transitions(previous, current);
    raise_found(previous, current, found, subscriptions, deliveries, now)
}

/// [`raise`], with the transitions already found: those of each step between `previous`
/// and `current` (a reconcile that went through several rounds announces what each
/// round did, a rollback begun and finished in one reconcile included).
pub fn raise_found(
    previous: &ConfigRolloutStatus,
    current: &mut ConfigRolloutStatus,
    found: Vec<Transition>,
    subscriptions: &[Subscription],
    deliveries: &[SinkDelivery],
    now: DateTime<Utc>,
) -> Option<Duration> {
    let mut book = previous.notifications.clone().unwrap_or_default();
    if subscriptions.is_empty() {
        // Nobody to tell; the sequence is kept, so that a later subscription never
        // reuses the key of a notice a receiver saw.
        current.notifications = (book.sequence > 0).then(|| NotificationStatus {
            sequence: book.sequence,
            ..NotificationStatus::default()
        });
        return None;
    }
    book.sinks = subscriptions
        .iter()
        .map(|subscription| {
            let stored = book.sink(&subscription.sink);
            let sent = deliveries
                .iter()
                .find(|delivery| delivery.sink == subscription.sink);
            let mut delivery = match (stored, sent) {
                (Some(stored), Some(sent)) => merged(stored, sent),
                (Some(known), None) | (None, Some(known)) => known.clone(),
                // A new subscription is owed what happens from now on.
                (None, None) => SinkDelivery {
                    sink: subscription.sink.clone(),
                    triggers: Vec::new(),
                    delivered_through: book.sequence,
                    last_result: None,
                    last_attempt_at: None,
                    message: None,
                    given_up: 0,
                },
            };
            delivery.triggers.clone_from(&subscription.triggers);
            delivery
        })
        .collect();

    let wanted = |trigger: NotificationTrigger| {
        subscriptions
            .iter()
            .any(|subscription| subscription.wants(trigger))
    };
    let progress = current.progress.clone();
    let push = |book: &mut NotificationStatus, transition: Transition, sinks: Vec<String>| {
        if !wanted(transition.trigger) {
            return;
        }
        book.sequence = book.sequence.saturating_add(1);
        book.outbox.push(Notice {
            sequence: book.sequence,
            trigger: transition.trigger,
            sinks,
            revision: transition.revision,
            stage: transition.stage,
            subject: transition.subject,
            reason: transition.reason,
            message: transition.message.map(|message| cut(&message)),
            progress: progress.clone(),
            at: stamp(now),
        });
    };
    for transition in found {
        push(&mut book, transition, Vec::new());
    }

    let mut wake = None;
    match approval_wait(previous, current, book.approval_wait.take(), now) {
        None => {}
        Some(mut wait) => {
            let since = from_time(&wait.since);
            let waited = now
                .signed_duration_since(since)
                .to_std()
                .unwrap_or(Duration::ZERO);
            // Each sink that asked is reminded once, after its own remindAfter.
            let due: Vec<String> = subscriptions
                .iter()
                .filter(|subscription| {
                    subscription.wants(NotificationTrigger::StillAwaitingApproval)
                        && !wait.reminded.contains(&subscription.sink)
                })
                .filter_map(|subscription| {
                    let after = parse_duration(subscription.remind_after.as_deref()?).ok()?;
                    match after.checked_sub(waited) {
                        Some(left) if !left.is_zero() => {
                            wake = Some(wake.map_or(left, |wake: Duration| wake.min(left)));
                            None
                        }
                        _ => Some(subscription.sink.clone()),
                    }
                })
                .collect();
            if !due.is_empty() {
                wait.reminded.extend(due.iter().cloned());
                push(
                    &mut book,
                    Transition {
                        trigger: NotificationTrigger::StillAwaitingApproval,
                        revision: current.revision.clone(),
                        stage: current.current_stage.clone(),
                        subject: None,
                        reason: Some("StillAwaitingApproval".to_owned()),
                        message: Some(format!(
                            "stage {} still waits for a StageApproval after {}s",
                            current.current_stage.as_deref().unwrap_or_default(),
                            waited.as_secs()
                        )),
                    },
                    due,
                );
            }
            book.approval_wait = Some(wait);
        }
    }

    // A notice stays while a sink that wants it has not been delivered it.
    let sinks = &book.sinks;
    book.outbox
        .retain(|notice| sinks.iter().any(|sink| owed_one(sink, notice)));
    if book.outbox.len() > MAX_OUTBOX {
        // The oldest go: the sender counts each it never delivered as given up.
        let excess = book.outbox.len().saturating_sub(MAX_OUTBOX);
        book.outbox.drain(..excess);
    }
    current.notifications = Some(book);
    wake
}

/// The further of two records of one sink's deliveries.
fn merged(stored: &SinkDelivery, sent: &SinkDelivery) -> SinkDelivery {
    let later_attempt = match (&stored.last_attempt_at, &sent.last_attempt_at) {
        (Some(stored), Some(sent)) => sent.0 >= stored.0,
        (None, _) => true,
        (Some(_), None) => false,
    };
    let mut delivery = if later_attempt {
        sent.clone()
    } else {
        stored.clone()
    };
    delivery.delivered_through = stored.delivered_through.max(sent.delivered_through);
    delivery.given_up = stored.given_up.max(sent.given_up);
    delivery
}

/// The approval `current` waits for: the one `recorded` if it is the same wait, else a
/// new one, begun when its condition turned true or, when the rollout went straight from
/// one wait to another (a new revision stopping at the same stage), now.
fn approval_wait(
    previous: &ConfigRolloutStatus,
    current: &ConfigRolloutStatus,
    recorded: Option<ApprovalWait>,
    now: DateTime<Utc>,
) -> Option<ApprovalWait> {
    if current.phase != Some(RolloutPhase::AwaitingApproval) {
        return None;
    }
    let stage = current.current_stage.as_deref()?;
    let key = format!(
        "{}/{stage}",
        current.revision.as_deref().unwrap_or_default()
    );
    if let Some(recorded) = recorded.filter(|recorded| recorded.wait == key) {
        return Some(recorded);
    }
    let waited_elsewhere = previous.phase == Some(RolloutPhase::AwaitingApproval)
        && (previous.revision != current.revision
            || previous.current_stage != current.current_stage);
    let since = match current.true_condition(conditions::AWAITING_APPROVAL) {
        Some(condition) if !waited_elsewhere => from_time(&condition.last_transition_time),
        _ => now,
    };
    Some(ApprovalWait {
        wait: key,
        since: stamp(since),
        reminded: Vec::new(),
    })
}

fn cut(message: &str) -> String {
    message.chars().take(MAX_NOTICE_MESSAGE_CHARS).collect()
}

#[cfg(test)]
mod tests;
