//! The rollouts the caller may list, kept current by one watch on the API server (with
//! the caller's credentials). Every change bumps a version that the pages' event streams
//! wait on: no polling.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tracing::warn;

use configrollout_api::ConfigRollout;

/// (namespace, name).
pub type Key = (String, String);

/// What the watch has seen.
#[derive(Debug)]
pub struct Store {
    rollouts: RwLock<BTreeMap<Key, ConfigRollout>>,
    changes: watch::Sender<u64>,
    last_error: Mutex<Option<String>>,
}

impl Store {
    /// An empty store and the task that fills it from `api` until the process ends.
    pub fn spawn(api: Api<ConfigRollout>) -> Arc<Store> {
        let (changes, _) = watch::channel(0);
        let store = Arc::new(Store {
            rollouts: RwLock::new(BTreeMap::new()),
            changes,
            last_error: Mutex::new(None),
        });
        let filling = store.clone();
        tokio::spawn(async move { filling.follow(api).await });
        store
    }

    async fn follow(&self, api: Api<ConfigRollout>) {
        let key =
            |rollout: &ConfigRollout| (rollout.namespace().unwrap_or_default(), rollout.name_any());
        let mut initial: Option<BTreeMap<Key, ConfigRollout>> = None;
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(event) = stream.next().await {
            let changed = match event {
                Ok(watcher::Event::Init) => {
                    initial = Some(BTreeMap::new());
                    false
                }
                Ok(watcher::Event::InitApply(rollout)) => {
                    if let Some(initial) = initial.as_mut() {
                        initial.insert(key(&rollout), rollout);
                    }
                    false
                }
                Ok(watcher::Event::InitDone) => {
                    let listed = initial.take().unwrap_or_default();
                    if let Ok(mut rollouts) = self.rollouts.write() {
                        *rollouts = listed;
                    }
                    true
                }
                Ok(watcher::Event::Apply(rollout)) => {
                    if let Ok(mut rollouts) = self.rollouts.write() {
                        rollouts.insert(key(&rollout), rollout);
                    }
                    true
                }
                Ok(watcher::Event::Delete(rollout)) => {
                    if let Ok(mut rollouts) = self.rollouts.write() {
                        rollouts.remove(&key(&rollout));
                    }
                    true
                }
                Err(error) => {
                    warn!(%error, "watching configrollouts");
                    if let Ok(mut last) = self.last_error.lock() {
                        *last = Some(error.to_string());
                    }
                    self.changes.send_modify(|version| *version += 1);
                    continue;
                }
            };
            if changed {
                if let Ok(mut last) = self.last_error.lock() {
                    *last = None;
                }
                self.changes.send_modify(|version| *version += 1);
            }
        }
    }

    /// A receiver that wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Every rollout, by namespace and name.
    pub fn all(&self) -> Vec<ConfigRollout> {
        self.rollouts
            .read()
            .map(|rollouts| rollouts.values().cloned().collect())
            .unwrap_or_default()
    }

    /// One rollout, if the watch has it.
    pub fn get(&self, namespace: &str, name: &str) -> Option<ConfigRollout> {
        self.rollouts
            .read()
            .ok()?
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Why the watch failed last, while it has not recovered.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok()?.clone()
    }
}
