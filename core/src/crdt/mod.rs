//! Hybrid logical clock, LWW map, deltas and digests: pure, no IO.
//!
//! A configuration revision is a [`Delta`] of a last-writer-wins map, stamped once with a
//! hybrid logical clock [`Stamp`]. Every region holds a [`Replica`]; publishing a revision
//! merges its delta into the region's replica. Merge is a join (commutative, associative,
//! idempotent), so regions converge whatever order writes reach them in and a retried
//! publish is harmless.
//!
//! Nothing here reads the system clock except [`SystemClock`] (and [`LaggingClock`] through it), does IO, or knows about
//! Kubernetes: the callers (`engine`, `regions`) own time and transport.
//!
//! Module map: [`WriterId`] and [`Stamp`] name a write; [`Hlc`] issues stamps; [`Replica`]
//! and [`Delta`] are the LWW map; [`codec`] turns a replica into the text stored in the
//! companion ConfigMap; [`digest`] is the keyed identity of a live state; [`compaction`]
//! drops causally stable tombstones; [`revision`] builds the deltas the rollout engine
//! publishes.

pub mod codec;
pub mod compaction;
pub mod digest;
mod hlc;
mod lww;
pub mod revision;
mod stamp;
mod writer;

pub use codec::{decode, decode_delta, encode, encode_delta};
pub use compaction::{
    WriterProgress, collect_tombstones, collect_tombstones_keeping, collection_point, stable_point,
    stamp_above,
};
pub use digest::{
    DigestKey, MacCheck, desired_digest, digest_matches, revision_digest, state_mac,
    state_mac_check, state_mac_matches,
};
pub use hlc::{Hlc, LaggingClock, ManualClock, PhysicalClock, SystemClock};
pub use lww::{Delta, Entry, MergeOutcome, Replica};
pub use revision::{compensating_delta, declare_revision, override_delta, split_expand_contract};
pub use stamp::Stamp;
pub use writer::{WriterId, WriterKind};

/// Longest key or writer text quoted in an error message; longer ones are cut, so a hostile
/// input cannot blow up logs.
const MAX_QUOTED_CHARS: usize = 80;

/// Quotes an identifier (a key or writer name, never a value) for an error message.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// A writer id that does not follow `rollout:<namespace>/<name>` or `override:<user>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriterIdError {
    /// The text is longer than [`WriterId::MAX_LEN`].
    #[error("writer id is {len} bytes long, the limit is {limit}")]
    TooLong {
        /// Length of the rejected text in bytes.
        len: usize,
        /// The limit, [`WriterId::MAX_LEN`].
        limit: usize,
    },
    /// Neither `rollout:` nor `override:` prefix.
    #[error("writer id {id:?} must start with \"rollout:\" or \"override:\"")]
    UnknownKind {
        /// The rejected text (shortened).
        id: String,
    },
    /// `rollout:` not followed by `<namespace>/<name>`.
    #[error("rollout writer {id:?} must be rollout:<namespace>/<name>")]
    MissingName {
        /// The rejected text (shortened).
        id: String,
    },
    /// The namespace is not an RFC 1123 label.
    #[error(
        "namespace {namespace:?} in writer id is not a DNS label (lowercase letters, digits, '-', at most 63)"
    )]
    InvalidNamespace {
        /// The rejected namespace (shortened).
        namespace: String,
    },
    /// The rollout name is not an RFC 1123 subdomain.
    #[error(
        "name {name:?} in writer id is not a DNS subdomain (lowercase letters, digits, '-', '.', at most 253)"
    )]
    InvalidName {
        /// The rejected name (shortened).
        name: String,
    },
    /// The user name is empty, too long or holds characters outside the allowed set.
    #[error(
        "user {user:?} in writer id must be 1 to {limit} characters from A-Z a-z 0-9 . _ - @ : + ="
    )]
    InvalidUser {
        /// The rejected user (shortened).
        user: String,
        /// Longest accepted user name.
        limit: usize,
    },
}

/// A stamp string that is not `<wall_ms>.<logical>@<writer>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StampParseError {
    /// No `@` between the clock part and the writer.
    #[error("stamp {stamp:?} must be <wall_ms>.<logical>@<writer>")]
    Shape {
        /// The rejected text (shortened).
        stamp: String,
    },
    /// The wall or logical part is not a canonical decimal number in range.
    #[error("stamp {stamp:?}: {part} is not a decimal number in range without leading zeros")]
    Number {
        /// The rejected text (shortened).
        stamp: String,
        /// `wall_ms` or `logical`.
        part: &'static str,
    },
    /// The writer part is invalid.
    #[error("stamp writer: {0}")]
    Writer(#[from] WriterIdError),
}

/// A remote stamp the clock refuses to observe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    /// The remote stamp is further ahead of local physical time than the drift bound: a
    /// broken clock must not win every later write.
    #[error(
        "stamp from {writer} is {ahead_ms} ms ahead of local time {local_ms} ms; the bound is {max_drift_ms} ms"
    )]
    TooFarAhead {
        /// Writer of the rejected stamp.
        writer: WriterId,
        /// How far its wall time is ahead of local physical time.
        ahead_ms: u64,
        /// Local physical time when it was observed.
        local_ms: u64,
        /// The configured bound.
        max_drift_ms: u64,
    },
}

/// Why a replica or delta could not be encoded or decoded. Never carries a configuration
/// value; keys and writer ids are shortened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The encoding is larger than the limit (the Kubernetes object size limit minus
    /// headroom for metadata when encoding).
    #[error("encoded replica is {size} bytes, the limit is {limit} bytes")]
    TooLarge {
        /// Size of the text in bytes.
        size: usize,
        /// The limit that applies.
        limit: usize,
    },
    /// The encoder could not write the document. The document's types always serialise,
    /// so this would be a bug, reported rather than panicking.
    #[error("could not encode the document: {message}")]
    Unencodable {
        /// What the serialiser reported, with quoted input redacted.
        message: String,
    },
    /// Not JSON, or JSON of the wrong shape (missing or unknown field, wrong type or tuple
    /// length). Input fragments are redacted from the message.
    #[error("malformed document at line {line}, column {column}: {message}")]
    Malformed {
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// What the parser expected, with quoted input redacted.
        message: String,
    },
    /// The document has no `v` field.
    #[error("document has no format version field \"v\"")]
    MissingVersion,
    /// The document is of a format version this build does not read.
    #[error("format version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// The version found.
        found: u64,
        /// The version this build reads.
        supported: u64,
    },
    /// Entries are not sorted by key (a canonical document always is).
    #[error("entries[{index}]: key {key:?} is not after the previous key {previous:?}")]
    KeyOrder {
        /// Position in `entries`.
        index: usize,
        /// The out-of-order key (shortened).
        key: String,
        /// The key before it (shortened).
        previous: String,
    },
    /// The same key appears twice.
    #[error("entries[{index}]: key {key:?} appears more than once")]
    DuplicateKey {
        /// Position of the second occurrence.
        index: usize,
        /// The key (shortened).
        key: String,
    },
    /// The same key appears twice with the same stamp and different values: two different
    /// writes claim one clock event, which a correct writer never produces.
    #[error("entries[{index}]: key {key:?} has two different values under stamp {stamp}")]
    StampConflict {
        /// Position of the second occurrence.
        index: usize,
        /// The key (shortened).
        key: String,
        /// The shared stamp.
        stamp: Stamp,
    },
    /// A writer id in `writers` is invalid.
    #[error("writers[{index}]: {source}")]
    InvalidWriter {
        /// Position in `writers`.
        index: usize,
        /// What is wrong with it.
        source: WriterIdError,
    },
    /// `writers` is not strictly sorted (out of order or repeated).
    #[error("writers[{index}]: writer {writer:?} is not after the previous writer")]
    WriterOrder {
        /// Position in `writers`.
        index: usize,
        /// The writer (shortened).
        writer: String,
    },
    /// A delta lists a writer that none of its stamps uses.
    #[error("writers[{index}]: writer {writer} is listed but never used")]
    UnusedWriter {
        /// Position in `writers`.
        index: usize,
        /// The writer.
        writer: WriterId,
    },
    /// A replica must give one frontier per writer.
    #[error("{frontiers} frontiers for {writers} writers")]
    FrontierCount {
        /// Length of `writers`.
        writers: usize,
        /// Length of `frontiers`.
        frontiers: usize,
    },
    /// A stamp refers to a writer that is not listed.
    #[error("stamps[{index}]: writer index {writer_index} is beyond the {writers} writers")]
    StampWriterIndex {
        /// Position in `stamps`.
        index: usize,
        /// The index given.
        writer_index: usize,
        /// Length of `writers`.
        writers: usize,
    },
    /// `stamps` is not strictly increasing.
    #[error("stamps[{index}]: stamp {stamp} is not after the previous stamp")]
    StampOrder {
        /// Position in `stamps`.
        index: usize,
        /// The stamp.
        stamp: Stamp,
    },
    /// A stamp is listed but no entry uses it.
    #[error("stamps[{index}]: stamp {stamp} is listed but never used")]
    UnusedStamp {
        /// Position in `stamps`.
        index: usize,
        /// The stamp.
        stamp: Stamp,
    },
    /// A stamp is beyond its writer's frontier: the document claims to have merged less
    /// than it holds.
    #[error("stamps[{index}]: stamp {stamp} is beyond its writer's frontier")]
    FrontierBehindStamp {
        /// Position in `stamps`.
        index: usize,
        /// The stamp.
        stamp: Stamp,
    },
    /// An entry refers to a stamp that is not listed.
    #[error(
        "entries[{index}]: key {key:?} refers to stamp {stamp_index}, beyond the {stamps} stamps"
    )]
    EntryStampIndex {
        /// Position in `entries`.
        index: usize,
        /// The key (shortened).
        key: String,
        /// The index given.
        stamp_index: usize,
        /// Length of `stamps`.
        stamps: usize,
    },
}

/// A secret unfit to key the revision digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// The key is shorter than [`DigestKey::MIN_LEN`]: a short key lets anyone holding a
    /// digest guess low-entropy values.
    #[error("digest key is {len} bytes, at least {min} are required")]
    KeyTooShort {
        /// Length of the rejected key.
        len: usize,
        /// The minimum, [`DigestKey::MIN_LEN`].
        min: usize,
    },
}

/// A revision-level operation asked for something that would not do what the caller means.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevisionError {
    /// An override delta must be written by an `override:<user>` writer.
    #[error("override deltas must be written by an override:<user> writer, not {writer}")]
    NotAnOverrideWriter {
        /// The writer given.
        writer: WriterId,
    },
    /// The fresh stamp of a compensating delta is not after the revision it undoes, so the
    /// compensation would lose to the very writes it is meant to revert.
    #[error("compensating stamp {fresh} is not after the revision's stamp {revision}")]
    StaleStamp {
        /// The stamp given for the compensation.
        fresh: Stamp,
        /// The newest stamp in the revision.
        revision: Stamp,
    },
}
