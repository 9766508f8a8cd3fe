//! Events on rollouts (`events.k8s.io/v1`), with true repeats counted on one Event. (Which
//! transitions of a reconcile share an Event is decided before: `engine::event_fold`.)
//!
//! kube's `Recorder` folds every Event about one object with the same type and reason
//! within six minutes into a series of the first one, keeping the first one's note. A
//! rollout's transitions share reasons (`StageStarted` for each stage, for each revision),
//! so "stage prod of r2 started" showed as a second count of "stage canary of r1 started".
//! Here a repeat is an Event with the same type, reason *and* note about the same object:
//! only those (a failure retried, the same refusal again) are counted on one Event.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::engine::EventType;

/// How long after an Event the same one is counted on it rather than created anew
/// (kube's own window).
const REPEAT_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Past this many remembered Events, those older than [`REPEAT_WINDOW`] are forgotten
/// (and the bound doubles while most are recent, so forgetting stays amortised O(1)).
const FORGET_ABOVE: usize = 4096;

/// Publishes Events as one controller.
pub struct EventPublisher {
    client: kube::Client,
    controller: String,
    remembered: Mutex<Remembered>,
}

struct Remembered {
    sent: HashMap<SentKey, Sent>,
    forget_above: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SentKey {
    regarding: String,
    type_: &'static str,
    reason: String,
    note: String,
}

#[derive(Debug, Clone)]
struct Sent {
    namespace: String,
    name: String,
    count: i32,
    at: Instant,
}

impl EventPublisher {
    /// Events reported by `controller` (as both reporting controller and instance).
    pub fn new(client: kube::Client, controller: &str) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            remembered: Mutex::new(Remembered {
                sent: HashMap::new(),
                forget_above: FORGET_ABOVE,
            }),
        }
    }

    /// Records an Event about `regarding`: a new one, or one more count on the same
    /// Event sent within [`REPEAT_WINDOW`].
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let key = SentKey {
            regarding: regarding
                .uid
                .clone()
                .or_else(|| regarding.name.clone())
                .unwrap_or_default(),
            type_: type_name(type_),
            reason: reason.to_owned(),
            note: note.to_owned(),
        };
        let now = Timestamp::now();
        if let Some(sent) = self.repeat_of(&key) {
            let count = sent.count.saturating_add(1);
            let series = serde_json::json!({
                "series": EventSeries { count, last_observed_time: MicroTime(now) },
            });
            let api: Api<Event> = Api::namespaced(self.client.clone(), &sent.namespace);
            match api
                .patch(&sent.name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Ok(_) => {
                    self.remember(key, Sent { count, ..sent });
                    return Ok(());
                }
                // Expired or deleted meanwhile: sent again as a new Event.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        let event = self.event(regarding, &key, now);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let created = api.create(&PostParams::default(), &event).await?;
        self.remember(
            key,
            Sent {
                namespace,
                name: created.metadata.name.unwrap_or_default(),
                count: 1,
                at: Instant::now(),
            },
        );
        Ok(())
    }

    fn event(&self, regarding: &ObjectReference, key: &SentKey, now: Timestamp) -> Event {
        Event {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            action: Some("Reconcile".to_owned()),
            reason: Some(key.reason.clone()),
            note: Some(key.note.clone()),
            type_: Some(key.type_.to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.controller.clone()),
            ..Event::default()
        }
    }

    fn repeat_of(&self, key: &SentKey) -> Option<Sent> {
        self.lock()
            .sent
            .get(key)
            .filter(|sent| sent.at.elapsed() < REPEAT_WINDOW)
            .cloned()
    }

    fn remember(&self, key: SentKey, sent: Sent) {
        let mut remembered = self.lock();
        if remembered.sent.len() >= remembered.forget_above {
            remembered
                .sent
                .retain(|_, sent| sent.at.elapsed() < REPEAT_WINDOW);
            remembered.forget_above = FORGET_ABOVE.max(remembered.sent.len().saturating_mul(2));
        }
        let sent = Sent {
            at: Instant::now(),
            ..sent
        };
        remembered.sent.insert(key, sent);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        // A panic elsewhere poisoned it; every entry is still a sent Event.
        self.remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn type_name(type_: EventType) -> &'static str {
    match type_ {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publisher() -> EventPublisher {
        // Port 9 (discard) on loopback: nothing here makes a request.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        EventPublisher::new(kube::Client::try_from(config).unwrap(), "configrollout")
    }

    fn key(reason: &str, note: &str) -> SentKey {
        SentKey {
            regarding: "uid-1".to_owned(),
            type_: "Normal",
            reason: reason.to_owned(),
            note: note.to_owned(),
        }
    }

    fn sent(name: &str) -> Sent {
        Sent {
            namespace: "team".to_owned(),
            name: name.to_owned(),
            count: 1,
            at: Instant::now(),
        }
    }

    #[tokio::test]
    async fn only_the_same_reason_and_note_is_a_repeat() {
        let publisher = publisher();
        publisher.remember(key("StageStarted", "stage canary of r1 started"), sent("a"));
        assert_eq!(
            publisher
                .repeat_of(&key("StageStarted", "stage canary of r1 started"))
                .map(|sent| sent.name),
            Some("a".to_owned())
        );
        assert!(
            publisher
                .repeat_of(&key("StageStarted", "stage prod of r1 started"))
                .is_none()
        );
        assert!(
            publisher
                .repeat_of(&key("StagePassed", "stage canary of r1 started"))
                .is_none()
        );
    }

    #[tokio::test]
    async fn an_event_names_its_object_reason_note_and_reporter() {
        let publisher = publisher();
        let regarding = ObjectReference {
            kind: Some("ConfigRollout".to_owned()),
            namespace: Some("team".to_owned()),
            name: Some("limits".to_owned()),
            uid: Some("uid-1".to_owned()),
            ..ObjectReference::default()
        };
        let event = publisher.event(
            &regarding,
            &key("StagePassed", "stage canary of r2 passed"),
            Timestamp::now(),
        );
        assert_eq!(event.metadata.namespace.as_deref(), Some("team"));
        assert!(
            event
                .metadata
                .name
                .as_deref()
                .is_some_and(|name| name.starts_with("limits."))
        );
        assert_eq!(event.reason.as_deref(), Some("StagePassed"));
        assert_eq!(event.note.as_deref(), Some("stage canary of r2 passed"));
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert_eq!(event.regarding, Some(regarding));
        assert_eq!(event.reporting_controller.as_deref(), Some("configrollout"));
        assert!(event.series.is_none());
    }
}
