//! Regions: materialisation of revisions into a region's ConfigMaps, and the evidence read
//! back. [`materialize`] decides (pure); [`store`] does the API calls.

pub mod clients;
pub mod consumers;
pub mod materialize;
pub mod object_cache;
pub mod overrides;
pub mod prometheus_credentials;
pub mod publication;
pub mod repair;
pub mod store;

use crate::api_call::CallError;

/// Why a region could not be read or written. Messages name objects, keys and HTTP
/// reasons, never configuration values.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// The companion's state does not decode: reported, never replaced.
    #[error("companion state does not decode: {reason}")]
    MalformedCompanion {
        /// The decoder's error (keys and positions, no values).
        reason: String,
    },
    /// The target carries our digest but its companion is gone, so the stamps that keep
    /// overrides safe are lost: a person must look.
    #[error(
        "the target ConfigMap is managed (it has the digest annotation) but its companion state is missing"
    )]
    CompanionMissing,
    /// The merged state does not fit in a ConfigMap.
    #[error("merged state does not fit in the companion ConfigMap: {reason}")]
    StateTooLarge {
        /// The encoder's error.
        reason: String,
    },
    /// `driftPolicy: Adopt` needs a stamp to record adopted edits under.
    #[error("driftPolicy Adopt found drifted keys but was given no override stamp")]
    AdoptNeedsStamp,
    /// The target name leaves no room for the companion's suffix.
    #[error(
        "target name {target:?} is too long: at most {limit} characters leave room for the companion"
    )]
    TargetNameTooLong {
        /// The target's name.
        target: String,
        /// Longest usable target name.
        limit: usize,
    },
    /// A call to the region's API server failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// Every attempt met a concurrent write.
    #[error("gave up after {attempts} conflicting writes")]
    TooManyConflicts {
        /// Attempts made.
        attempts: u32,
    },
    /// The rollout names a region that has no Region object.
    #[error("region {region} has no Region object")]
    UnknownRegion {
        /// Region name.
        region: String,
    },
    /// The region's client could not be built.
    #[error("region client: {reason}")]
    Client {
        /// Why.
        reason: String,
    },
    /// The compensating delta could not be built.
    #[error("rollback: {reason}")]
    Compensation {
        /// Why.
        reason: String,
    },
    /// A consumer named in the spec does not exist in the region.
    #[error("consumer {kind} {namespace}/{name} does not exist")]
    ConsumerMissing {
        /// Workload kind.
        kind: String,
        /// Namespace looked in.
        namespace: String,
        /// Name looked for.
        name: String,
    },
    /// A consumer's label selector cannot be sent to the API server.
    #[error("consumer {kind} selector.{source}")]
    ConsumerSelector {
        /// Workload kind.
        kind: String,
        /// The field of the selector and what is wrong with it.
        source: configrollout_core::engine::label_selector::SelectorError,
    },
    /// An override's changes do not form an override delta.
    #[error("override: {reason}")]
    Override {
        /// Why.
        reason: String,
    },
    /// The target exists and configrollout does not manage it; adopting it was not asked
    /// for (or not granted).
    #[error(
        "ConfigMap {namespace}/{name} exists and is not managed by configrollout: refused \
         (set spec.target.adopt, with a grant that allows adoption, to take it over)"
    )]
    UnmanagedTarget {
        /// Namespace of the target.
        namespace: String,
        /// Name of the target.
        name: String,
    },
    /// An object with the companion's reserved name is there that configrollout did not
    /// make for this target (it is not owned by the target): never read as state, never
    /// written over.
    #[error(
        "ConfigMap {namespace}/{name} has the reserved name of a configrollout companion but \
         was not made by configrollout for its target: not read, not written; remove or rename it"
    )]
    ForeignCompanion {
        /// Namespace.
        namespace: String,
        /// The companion's name.
        name: String,
    },
    /// The companion's state does not carry the MAC of the controller's key: someone who
    /// may edit ConfigMaps in the region changed it (or it was signed with a key the
    /// controller does not hold). Never read, never merged from, never written over.
    #[error(
        "the state of {namespace}/{name} fails its MAC: it was edited outside configrollout \
         (or signed with another digest key); it is not read, merged from or written over: \
         see README, 'A region's state fails its MAC'"
    )]
    TamperedCompanion {
        /// Namespace.
        namespace: String,
        /// The companion's name.
        name: String,
    },
    /// The target holds a key the delta writes in `binaryData`: the API server refuses a
    /// key in both `data` and `binaryData`, so nothing is written until a person moves it.
    #[error(
        "ConfigMap {namespace}/{name} holds key {key:?} in binaryData, which configrollout \
         writes as text (data): refused, nothing written; remove it from binaryData"
    )]
    BinaryDataKey {
        /// Namespace of the target.
        namespace: String,
        /// Name of the target.
        name: String,
        /// The first such key.
        key: String,
    },
    /// The write would land outside what the rollout's namespace was granted.
    #[error("writing {namespace} in region {region} is outside the rollout's grant: refused")]
    OutsideGrant {
        /// Target namespace.
        namespace: String,
        /// Region.
        region: String,
    },
    /// This controller no longer holds the Lease: it writes nothing more.
    #[error("not the leader any more: nothing written")]
    NotLeader,
    /// After writing, the target's digest is not the digest of the companion's state.
    #[error("read back: the target's digest does not match its companion's state")]
    ReadBackMismatch,
}

impl RegionError {
    /// Whether the region could not be reached at all (as opposed to answering with an
    /// error or holding something we refuse to touch).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Call(call) if call.is_unreachable())
    }
}
