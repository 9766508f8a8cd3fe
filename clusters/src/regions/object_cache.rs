//! A region's target and companion ConfigMaps served from memory while a watch shows they
//! are still what the region holds.
//!
//! Every reconcile observes every region its stages select, and a revision takes several
//! reconciles: reading the target and its companion each time was most of the region
//! requests at scale (about 9 of 11 per region per revision at 1,000 rollouts, `make
//! scale-bench`). A metadata-only watch per region and target namespace keeps the uid and
//! resourceVersion of each ConfigMap there ([`NamespaceVersions`]); the objects last read or
//! written are kept beside it ([`KeptObjects`]) and answer a read while the watch names
//! the same uid and resourceVersion. A write's answer is such an object, so a region that
//! was just published is observed without a read.
//!
//! The watch only ever saves reads. While it has not listed yet, or has failed since its
//! last event, or names another version than the kept object, the region is read. Writes
//! stay conditional on the resourceVersion they were planned from, so a kept object that
//! is stale (the watch lags behind a write by someone else) costs a conflict and a fresh
//! read, never a lost write. Values are held only in the kept objects, bounded in bytes.
//!
//! A region that stops answering ends its watch's connection, so the next read goes to the
//! region and fails there, as before. A silent partition is noticed within
//! [`WATCH_READ_TIMEOUT`]: the apiserver ends each watch after [`WATCH_TIMEOUT_SECS`], so a
//! watch quiet for longer is dead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};

use crate::use_order::UseOrder;

/// Most bytes of kept objects over all regions. Past it the least recently used are
/// dropped and read again when needed. A small target and its companion take about 2 KiB
/// per region, so 10,000 rollouts over three regions fit (at 32 MiB they did not: each
/// revision then read every region's objects again, the second wave of `make
/// scale-bench` at 10,000 x 3 made 1.9 reads per region per rollout and took half again
/// the CPU of the first), while targets near the ConfigMap limit cannot grow the process
/// without bound. Memory holds what is kept, not the bound.
pub const MAX_KEPT_BYTES: usize = 128 * 1024 * 1024;
/// How long the apiserver keeps one region watch open before it ends it (and it is
/// started again from where it was).
pub const WATCH_TIMEOUT_SECS: u32 = 60;
/// How long a region watch may go without a byte before it counts as dead.
pub const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(75);
/// What each kept object costs besides its JSON: the map entry, its key and version.
const ENTRY_OVERHEAD_BYTES: usize = 256;

/// Which version of an object: the uid tells a ConfigMap deleted and created again (or
/// another cluster behind a changed kubeconfig) from the one kept.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ObjectVersion {
    uid: String,
    resource_version: String,
}

impl ObjectVersion {
    fn of(metadata: &ObjectMeta) -> Option<Self> {
        Some(Self {
            uid: metadata.uid.clone()?,
            resource_version: metadata.resource_version.clone()?,
        })
    }
}

/// What is known of one object without asking the region.
#[derive(Debug, Clone, PartialEq)]
pub enum Known {
    /// The watch has no object of that name.
    Absent,
    /// The object as kept, at the version the watch names.
    Present(Box<ConfigMap>),
}

/// The uid and resourceVersion of every ConfigMap of one namespace of one region, as its
/// watch last told them.
#[derive(Debug, Default)]
pub struct NamespaceVersions {
    versions: Mutex<HashMap<String, ObjectVersion>>,
    /// Listed at least once, and no error since the last event.
    current: AtomicBool,
    /// When a reconcile last asked for this namespace: its watch stops once no rollout
    /// has for [`WATCH_IDLE`].
    last_used: Mutex<Option<std::time::Instant>>,
}

impl NamespaceVersions {
    /// The version of `name` the watch names, when the watch is current: `Some(None)` for
    /// an object it does not have.
    fn version(&self, name: &str) -> Option<Option<ObjectVersion>> {
        if !self.is_current() {
            return None;
        }
        Some(lock(&self.versions).get(name).cloned())
    }

    /// Notes that a reconcile needs this namespace now.
    fn touch(&self) {
        *lock(&self.last_used) = Some(std::time::Instant::now());
    }

    /// Whether no reconcile asked for this namespace in [`WATCH_IDLE`].
    fn is_idle(&self) -> bool {
        lock(&self.last_used).is_none_or(|used| used.elapsed() >= WATCH_IDLE)
    }

    /// Listed at least once, and no error since the last event.
    fn is_current(&self) -> bool {
        self.current.load(Ordering::Acquire)
    }

    /// Takes one watch event in. Returns the names whose version it changed from what
    /// was known: a write of this process whose answer was seen first ([`Self::saw`]) is
    /// not among them. A listing names what differs from the versions before it.
    fn apply(&self, event: WatchEvent) -> Vec<(String, Option<String>)> {
        match event {
            WatchEvent::Listed(listed) => {
                let mut versions = lock(&self.versions);
                let mut changed: Vec<(String, Option<String>)> = listed
                    .iter()
                    .filter(|(name, version)| versions.get(*name) != Some(version))
                    .map(|(name, version)| (name.clone(), Some(version.resource_version.clone())))
                    .collect();
                changed.extend(
                    versions
                        .keys()
                        .filter(|name| !listed.contains_key(*name))
                        .map(|name| (name.clone(), None)),
                );
                *versions = listed;
                drop(versions);
                self.current.store(true, Ordering::Release);
                changed
            }
            WatchEvent::Changed { name, version } => {
                let mut versions = lock(&self.versions);
                let previous = match version.clone() {
                    Some(version) => versions.insert(name.clone(), version),
                    None => versions.remove(&name),
                };
                drop(versions);
                self.current.store(true, Ordering::Release);
                if previous == version {
                    Vec::new()
                } else {
                    vec![(name, version.map(|version| version.resource_version))]
                }
            }
            WatchEvent::Failed => {
                self.current.store(false, Ordering::Release);
                Vec::new()
            }
        }
    }

    /// Notes what a read or a write answer showed of `name`, so that a watch event still
    /// on its way does not cost a read of what this process already holds.
    fn saw(&self, name: &str, version: Option<ObjectVersion>) {
        let mut versions = lock(&self.versions);
        match version {
            Some(version) => versions.insert(name.to_owned(), version),
            None => versions.remove(name),
        };
    }
}

/// One watch event, reduced to what [`NamespaceVersions`] keeps.
#[derive(Debug)]
enum WatchEvent {
    /// A complete listing.
    Listed(HashMap<String, ObjectVersion>),
    /// An object was created, changed (`Some`) or deleted (`None`).
    Changed {
        name: String,
        version: Option<ObjectVersion>,
    },
    /// The watch failed; it is retried with backoff.
    Failed,
}

/// A ConfigMap of a watched region namespace changed, and not by a write of this process
/// whose answer it had already seen: someone edited, deleted or restored it (or the
/// watch's event came before this process's own answer, which costs one more look).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionChange {
    /// The Region's name.
    pub region: String,
    /// The namespace in the region.
    pub namespace: String,
    /// The ConfigMap's name.
    pub name: String,
    /// Its resourceVersion now (`None`: deleted).
    pub resource_version: Option<String>,
}

/// Where region changes are told: every run of the controller subscribes while it runs.
pub type RegionChangeSender = tokio::sync::broadcast::Sender<RegionChange>;

/// The watches of one region, by namespace, through one client: built with the region's
/// client and dropped with it (a changed kubeconfig may reach another cluster).
pub struct RegionWatches {
    region: String,
    client: Client,
    namespaces: Mutex<HashMap<String, Watch>>,
    changes: RegionChangeSender,
}

struct Watch {
    versions: Arc<NamespaceVersions>,
    task: tokio::task::AbortHandle,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A namespace watch nobody asked for in this long stops by itself (the next reconcile
/// that needs it starts it again and reads from the region meanwhile), so namespaces no
/// rollout targets any more are not watched.
const WATCH_IDLE: Duration = Duration::from_secs(15 * 60);
/// How often a watch checks whether it is still needed.
const WATCH_IDLE_CHECK: Duration = Duration::from_secs(60);
/// Most namespaces watched per region at once; past it the least recently used stops.
pub const MAX_WATCHED_NAMESPACES: usize = 64;
/// Namespace watches open in every region, for `configrollout_region_watches`.
static OPEN_WATCHES: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// How many region namespace watches this process keeps open now.
pub fn open_watches() -> i64 {
    OPEN_WATCHES.load(Ordering::Relaxed)
}

impl RegionWatches {
    /// Watches of `region` through `client`, which must allow reads quiet for
    /// [`WATCH_READ_TIMEOUT`].
    /// Changes of the objects there go to `changes` once it is set.
    pub fn new(region: &str, client: Client, changes: RegionChangeSender) -> Self {
        Self {
            region: region.to_owned(),
            client,
            namespaces: Mutex::new(HashMap::new()),
            changes,
        }
    }

    /// The versions of `namespace`, its watch started on first use (so only namespaces
    /// some rollout targets are watched). Outside a Tokio runtime nothing is watched.
    pub fn namespace(&self, namespace: &str) -> Option<Arc<NamespaceVersions>> {
        let mut namespaces = lock(&self.namespaces);
        // Watches that stopped for idleness are forgotten (and started again if needed).
        namespaces.retain(|_, watch| !watch.task.is_finished());
        if let Some(watch) = namespaces.get(namespace) {
            watch.versions.touch();
            return Some(watch.versions.clone());
        }
        while namespaces.len() >= MAX_WATCHED_NAMESPACES {
            let Some(oldest) = namespaces
                .iter()
                .min_by_key(|(_, watch)| *lock(&watch.versions.last_used))
                .map(|(name, _)| name.clone())
            else {
                break;
            };
            namespaces.remove(&oldest);
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let versions = Arc::new(NamespaceVersions::default());
        versions.touch();
        let api: Api<PartialObjectMeta<ConfigMap>> =
            Api::namespaced(self.client.clone(), namespace);
        let task = runtime
            .spawn(follow(
                api,
                self.region.clone(),
                namespace.to_owned(),
                versions.clone(),
                self.changes.clone(),
            ))
            .abort_handle();
        namespaces.insert(
            namespace.to_owned(),
            Watch {
                versions: versions.clone(),
                task,
            },
        );
        Some(versions)
    }
}

/// Keeps `versions` up to date from a metadata-only watch of `api` until aborted.
async fn follow(
    api: Api<PartialObjectMeta<ConfigMap>>,
    region: String,
    namespace: String,
    versions: Arc<NamespaceVersions>,
    changes: RegionChangeSender,
) {
    // Counted while the task lives: stopped for idleness or aborted, it is uncounted.
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            OPEN_WATCHES.fetch_sub(1, Ordering::Relaxed);
        }
    }
    OPEN_WATCHES.fetch_add(1, Ordering::Relaxed);
    let _counted = Counted;
    let config = watcher::Config::default().timeout(WATCH_TIMEOUT_SECS);
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    let mut listing: Option<HashMap<String, ObjectVersion>> = None;
    let mut listed_once = false;
    // Said once per outage: a watch the region's RBAC refuses fails on every retry.
    let mut failing = false;
    let mut idle_check = tokio::time::interval(WATCH_IDLE_CHECK);
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = idle_check.tick() => {
                if versions.is_idle() {
                    tracing::debug!(%region, %namespace, "no rollout needs this namespace: its watch stops");
                    versions.apply(WatchEvent::Failed);
                    return;
                }
                continue;
            }
        };
        let Some(event) = event else { break };
        if event.is_ok() {
            failing = false;
        }
        let reduced = match event {
            Ok(Event::Init) => {
                // Until the listing is complete, a deletion missed meanwhile may hide in
                // the old versions.
                versions.apply(WatchEvent::Failed);
                listing = Some(HashMap::new());
                continue;
            }
            Ok(Event::InitApply(object)) => {
                if let (Some(listing), Some(version)) =
                    (listing.as_mut(), ObjectVersion::of(&object.metadata))
                {
                    listing.insert(object.name_any(), version);
                }
                continue;
            }
            Ok(Event::InitDone) => WatchEvent::Listed(listing.take().unwrap_or_default()),
            Ok(Event::Apply(object)) => WatchEvent::Changed {
                version: ObjectVersion::of(&object.metadata),
                name: object.name_any(),
            },
            Ok(Event::Delete(object)) => WatchEvent::Changed {
                name: object.name_any(),
                version: None,
            },
            Err(error) => {
                if failing {
                    tracing::debug!(%region, %namespace, %error, "region ConfigMap watch failed again");
                } else {
                    tracing::warn!(
                        %region,
                        %namespace,
                        %error,
                        "region ConfigMap watch failed: targets there are read at each \
                         reconcile until it recovers (the region's RBAC needs list and watch \
                         on configmaps, see deploy/region-rbac.yaml)"
                    );
                    failing = true;
                }
                WatchEvent::Failed
            }
        };
        // The first listing is what the reconciles that started the watch read anyway.
        let first_listing = matches!(reduced, WatchEvent::Listed(_)) && !listed_once;
        listed_once |= matches!(reduced, WatchEvent::Listed(_));
        let changed = versions.apply(reduced);
        if first_listing {
            continue;
        }
        for (name, resource_version) in changed {
            // No one listening (no controller runs here now): nothing to wake. A listener
            // that falls behind loses the oldest; the rollout's next resync looks anyway.
            let _ = changes.send(RegionChange {
                region: region.clone(),
                namespace: namespace.clone(),
                name,
                resource_version,
            });
        }
    }
}

/// Objects last read or written in regions, by region, namespace and name; bounded by
/// [`MAX_KEPT_BYTES`].
#[derive(Default)]
pub struct KeptObjects {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    entries: HashMap<ObjectKey, KeptEntry>,
    order: UseOrder<ObjectKey>,
    bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ObjectKey {
    region: String,
    namespace: String,
    name: String,
}

/// One object kept as the JSON it is sent and received as: about a third of the memory
/// of the decoded object (whose maps allocate whole B-tree nodes), for a decode per use.
struct KeptEntry {
    json: Arc<[u8]>,
    version: ObjectVersion,
    bytes: usize,
    last_used: u64,
}

impl KeptObjects {
    /// Forgets every object of regions not in `existing`.
    pub fn retain(&self, existing: &std::collections::HashSet<&str>) {
        self.forget_where(|key| !existing.contains(key.region.as_str()));
    }

    /// Forgets every object of `region` (its client was rebuilt).
    pub fn forget_region(&self, region: &str) {
        self.forget_where(|key| key.region == region);
    }

    fn forget_where(&self, forget: impl Fn(&ObjectKey) -> bool) {
        let mut kept = self.lock();
        let mut freed = 0;
        let kept = &mut *kept;
        let order = &mut kept.order;
        kept.entries.retain(|key, entry| {
            let gone = forget(key);
            if gone {
                freed += entry.bytes;
                order.forget(entry.last_used);
            }
            !gone
        });
        kept.bytes = kept.bytes.saturating_sub(freed);
    }

    /// Whether the object a change names is kept at the version the change names: this
    /// process wrote (or read) it, and its answer came after the watch's event.
    pub fn holds(&self, change: &RegionChange) -> bool {
        let key = ObjectKey {
            region: change.region.clone(),
            namespace: change.namespace.clone(),
            name: change.name.clone(),
        };
        let kept = self.lock();
        match (kept.entries.get(&key), change.resource_version.as_deref()) {
            (Some(entry), Some(version)) => entry.version.resource_version == version,
            _ => false,
        }
    }

    /// How many objects are kept, and their bytes.
    pub fn size(&self) -> (usize, usize) {
        let kept = self.lock();
        (kept.entries.len(), kept.bytes)
    }

    fn get(&self, key: &ObjectKey, version: &ObjectVersion) -> Option<ConfigMap> {
        let json = {
            let mut kept = self.lock();
            let kept = &mut *kept;
            let entry = kept.entries.get_mut(key)?;
            if entry.version != *version {
                return None;
            }
            entry.last_used = kept.order.used(Some(entry.last_used), key.clone());
            entry.json.clone()
        };
        // Decoded outside the lock every region read shares.
        serde_json::from_slice(&json).ok()
    }

    fn insert(&self, key: ObjectKey, object: &ConfigMap) {
        let Some(version) = ObjectVersion::of(&object.metadata) else {
            return;
        };
        let mut object = object.clone();
        // Kept only to be read and written back whole: the apiserver keeps managedFields
        // of an update that leaves them out.
        object.metadata.managed_fields = None;
        let Ok(json) = serde_json::to_vec(&object) else {
            return;
        };
        let bytes = ENTRY_OVERHEAD_BYTES + json.len() + key.name.len();
        let mut kept = self.lock();
        kept.remove(&key);
        let last_used = kept.order.used(None, key.clone());
        let entry = KeptEntry {
            json: Arc::from(json),
            version,
            bytes,
            last_used,
        };
        kept.entries.insert(key, entry);
        kept.bytes = kept.bytes.saturating_add(bytes);
        while kept.bytes > MAX_KEPT_BYTES {
            let Some(oldest) = kept.order.take_oldest() else {
                break;
            };
            kept.remove(&oldest);
        }
    }

    fn remove(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    fn lock(&self) -> MutexGuard<'_, Kept> {
        lock(&self.inner)
    }
}

impl Kept {
    fn remove(&mut self, key: &ObjectKey) {
        if let Some(entry) = self.entries.remove(key) {
            self.order.forget(entry.last_used);
            self.bytes = self.bytes.saturating_sub(entry.bytes);
        }
    }
}

/// One namespace of one region: what reads there may take from memory, and where what
/// was read or written is noted.
pub struct RegionObjects<'a> {
    kept: &'a KeptObjects,
    region: &'a str,
    namespace: &'a str,
    versions: Option<Arc<NamespaceVersions>>,
}

impl<'a> RegionObjects<'a> {
    /// Objects of `namespace` in `region`, current while `versions` (the namespace's
    /// watch, if any) says so.
    pub fn new(
        kept: &'a KeptObjects,
        region: &'a str,
        namespace: &'a str,
        versions: Option<Arc<NamespaceVersions>>,
    ) -> Self {
        Self {
            kept,
            region,
            namespace,
            versions,
        }
    }

    /// Whether a watch of this namespace is current: a change there is told as a
    /// [`RegionChange`] rather than found by looking again.
    pub fn is_watched(&self) -> bool {
        self.versions
            .as_ref()
            .is_some_and(|versions| versions.is_current())
    }

    /// The object `name` as the region holds it now, when that is known without a read.
    pub fn current(&self, name: &str) -> Option<Known> {
        let version = self.versions.as_ref()?.version(name)?;
        match version {
            None => Some(Known::Absent),
            Some(version) => self
                .kept
                .get(&self.key(name), &version)
                .map(|object| Known::Present(Box::new(object))),
        }
    }

    /// Notes what a read or a write answer showed of `name` (`None`: it does not exist).
    /// Nothing is kept while the watch is not current (it may never be, where the
    /// region's RBAC refuses it): memory holds only what can answer a read.
    pub fn saw(&self, name: &str, object: Option<&ConfigMap>) {
        let key = self.key(name);
        let Some(versions) = self
            .versions
            .as_ref()
            .filter(|versions| versions.is_current())
        else {
            self.kept.remove(&key);
            return;
        };
        match object {
            Some(object) => self.kept.insert(key, object),
            None => self.kept.remove(&key),
        }
        versions.saw(
            name,
            object.and_then(|object| ObjectVersion::of(&object.metadata)),
        );
    }

    fn key(&self, name: &str) -> ObjectKey {
        ObjectKey {
            region: self.region.to_owned(),
            namespace: self.namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere poisoned it; every entry is still a valid observation.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
