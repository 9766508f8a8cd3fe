//! The text form of a replica, stored in the companion ConfigMap (whose `data` holds
//! strings), and of a delta.
//!
//! Format version 1, one JSON document:
//!
//! ```text
//! {"v":1,
//!  "writers":["override:alice","rollout:payments/api"],   sorted, unique
//!  "frontiers":[[wall_ms,logical],...],                   one per writer (replica only)
//!  "stamps":[[wall_ms,logical,writer_index],...],          sorted, unique, each used
//!  "entries":[["key","value"|null,stamp_index],...],      sorted by key (byte order)
//!  "horizon":"<wall_ms>.<logical>@<writer>"}               replica only, once collected
//! ```
//!
//! Writers and stamps are tables because the entries of one revision share one stamp:
//! spelling the stamp once instead of on each entry is what lets a 10k-key replica with
//! realistic keys and values fit in one ConfigMap. One set of wire types declares the
//! document for both directions; `serde_json` writes it. Encoding is canonical: the same
//! state always gives the same bytes (sorted tables, no whitespace, `serde_json`'s
//! escapes: `"`, `\`, control characters only), so the ConfigMap is rewritten only when
//! the state changes.
//!
//! Decoding never panics and names what is wrong. It accepts any JSON spelling of the same
//! document (whitespace, `\u` escapes) but refuses what a correct encoder never writes:
//! unsorted or repeated keys, writers or stamps, table entries nothing uses, indexes out
//! of range, two values under one stamp, stamps beyond their writer's frontier, invalid
//! writer ids, unknown fields, unknown versions, oversized input.
//! Error messages carry keys and writer ids, never values.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::lww::{Delta, Entry, Replica};
use super::{CodecError, Stamp, WriterId, quoted};

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u64 = 1;

/// Kubernetes refuses objects larger than 1 MiB.
pub const KUBERNETES_OBJECT_LIMIT: usize = 1024 * 1024;

/// Largest encoding [`encode`] produces: the object limit minus 64 KiB for the
/// ConfigMap's metadata (owner reference, annotations, managed fields).
pub const MAX_ENCODED_BYTES: usize = KUBERNETES_OBJECT_LIMIT - 64 * 1024;

/// Largest text [`decode`] reads: nothing larger can have come from the API server.
pub const MAX_DECODED_BYTES: usize = KUBERNETES_OBJECT_LIMIT;

/// Encodes a replica canonically; fails if the result would not fit in a ConfigMap.
pub fn encode(replica: &Replica) -> Result<String, CodecError> {
    let tables = Tables::new(replica.iter(), replica.frontiers().iter());
    finish(serde_json::to_string(&WireReplica {
        v: FORMAT_VERSION,
        writers: tables.writers(),
        frontiers: tables
            .newest
            .values()
            .map(|stamp| (stamp.wall_ms, stamp.logical))
            .collect(),
        stamps: tables.stamps(),
        entries: tables.entries(replica.iter()),
        horizon: replica.horizon().map(Cow::Borrowed),
    }))
}

/// Encodes a delta canonically; fails if the result would not fit in a ConfigMap.
pub fn encode_delta(delta: &Delta) -> Result<String, CodecError> {
    let tables = Tables::new(delta.iter(), std::iter::empty());
    finish(serde_json::to_string(&WireDelta {
        v: FORMAT_VERSION,
        writers: tables.writers(),
        stamps: tables.stamps(),
        entries: tables.entries(delta.iter()),
    }))
}

/// Decodes a replica, validating everything [`encode`] guarantees.
pub fn decode(text: &str) -> Result<Replica, CodecError> {
    let wire: WireReplica<'_> = parse(text)?;
    check_version(Some(wire.v))?;
    let writers = decode_writers(&wire.writers)?;
    if wire.frontiers.len() != writers.len() {
        return Err(CodecError::FrontierCount {
            writers: writers.len(),
            frontiers: wire.frontiers.len(),
        });
    }
    let frontiers: BTreeMap<WriterId, Stamp> = writers
        .iter()
        .zip(&wire.frontiers)
        .map(|(writer, &(wall_ms, logical))| {
            (writer.clone(), Stamp::new(wall_ms, logical, writer.clone()))
        })
        .collect();
    let stamps = decode_stamps(&wire.stamps, &writers)?;
    for (index, stamp) in stamps.iter().enumerate() {
        if frontiers
            .get(&stamp.writer)
            .is_none_or(|frontier| frontier < stamp)
        {
            return Err(CodecError::FrontierBehindStamp {
                index,
                stamp: stamp.clone(),
            });
        }
    }
    let entries = decode_entries(&wire.entries, &stamps)?;
    Ok(Replica::from_validated_parts(
        entries,
        frontiers,
        wire.horizon.map(Cow::into_owned),
    ))
}

/// Decodes a delta, validating everything [`encode_delta`] guarantees.
pub fn decode_delta(text: &str) -> Result<Delta, CodecError> {
    let wire: WireDelta<'_> = parse(text)?;
    check_version(Some(wire.v))?;
    let writers = decode_writers(&wire.writers)?;
    let stamps = decode_stamps(&wire.stamps, &writers)?;
    for (index, writer) in writers.iter().enumerate() {
        if !stamps.iter().any(|stamp| stamp.writer == *writer) {
            return Err(CodecError::UnusedWriter {
                index,
                writer: writer.clone(),
            });
        }
    }
    let entries = decode_entries(&wire.entries, &stamps)?;
    Ok(Delta::from_sorted_entries(entries))
}

fn finish(encoded: Result<String, serde_json::Error>) -> Result<String, CodecError> {
    let out = encoded.map_err(|error| CodecError::Unencodable {
        message: redact_quoted(&error.to_string()),
    })?;
    if out.len() > MAX_ENCODED_BYTES {
        return Err(CodecError::TooLarge {
            size: out.len(),
            limit: MAX_ENCODED_BYTES,
        });
    }
    Ok(out)
}

/// The writer and stamp tables of a document, sorted.
struct Tables<'a> {
    /// Every writer of the document with its frontier: the newest of its stamps, or the
    /// replica's frontier for it when that is newer (it may have merged writes that no
    /// entry holds any more).
    newest: BTreeMap<&'a WriterId, &'a Stamp>,
    /// Each distinct stamp of the entries with its position in the stamp table.
    stamp_index: BTreeMap<&'a Stamp, usize>,
}

impl<'a> Tables<'a> {
    fn new(
        entries: impl Iterator<Item = (&'a str, &'a Entry)>,
        frontiers: impl Iterator<Item = (&'a WriterId, &'a Stamp)>,
    ) -> Self {
        let mut stamp_index: BTreeMap<&'a Stamp, usize> = BTreeMap::new();
        for (_, entry) in entries {
            stamp_index.insert(&entry.stamp, 0);
        }
        let mut newest: BTreeMap<&'a WriterId, &'a Stamp> = BTreeMap::new();
        let stamps = stamp_index.keys().map(|stamp| (&stamp.writer, *stamp));
        for (writer, stamp) in frontiers.chain(stamps) {
            let held = newest.entry(writer).or_insert(stamp);
            if stamp > *held {
                *held = stamp;
            }
        }
        for (index, slot) in stamp_index.values_mut().enumerate() {
            *slot = index;
        }
        Self {
            newest,
            stamp_index,
        }
    }

    fn writers(&self) -> Vec<Cow<'a, str>> {
        self.newest
            .keys()
            .map(|writer| Cow::Borrowed(writer.as_str()))
            .collect()
    }

    fn stamps(&self) -> Vec<(u64, u32, usize)> {
        // Every stamp's writer is in the table, at its position in key order. One lookup
        // per stamp: counting the writers before it each time made encoding quadratic in
        // the number of writers, which a companion does not bound (only its bytes do).
        let writer_index: BTreeMap<&WriterId, usize> = self
            .newest
            .keys()
            .enumerate()
            .map(|(index, writer)| (*writer, index))
            .collect();
        self.stamp_index
            .keys()
            .map(|stamp| {
                let index = writer_index.get(&stamp.writer).copied().unwrap_or_default();
                (stamp.wall_ms, stamp.logical, index)
            })
            .collect()
    }

    fn entries<'e>(
        &self,
        entries: impl Iterator<Item = (&'e str, &'e Entry)>,
    ) -> Vec<WireEntry<'e>> {
        entries
            .map(|(key, entry)| {
                // The table was built from these entries, so the lookup always succeeds.
                let stamp_index = self
                    .stamp_index
                    .get(&entry.stamp)
                    .copied()
                    .unwrap_or_default();
                WireEntry(
                    Cow::Borrowed(key),
                    entry.value().map(Cow::Borrowed),
                    stamp_index,
                )
            })
            .collect()
    }
}

#[derive(Deserialize)]
struct VersionProbe {
    v: Option<u64>,
}

/// The document of a replica: what [`encode`] writes and [`decode`] reads, borrowing its
/// text from the replica or from the input.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireReplica<'a> {
    v: u64,
    #[serde(borrow)]
    writers: Vec<Cow<'a, str>>,
    frontiers: Vec<(u64, u32)>,
    stamps: Vec<(u64, u32, usize)>,
    #[serde(borrow)]
    entries: Vec<WireEntry<'a>>,
    /// Absent until tombstones are first collected, so older documents read unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    horizon: Option<Cow<'a, Stamp>>,
}

/// The document of a delta: a replica's without frontiers.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireDelta<'a> {
    v: u64,
    #[serde(borrow)]
    writers: Vec<Cow<'a, str>>,
    stamps: Vec<(u64, u32, usize)>,
    #[serde(borrow)]
    entries: Vec<WireEntry<'a>>,
}

/// `[key, value or null, stamp index]`.
#[derive(Serialize, Deserialize)]
struct WireEntry<'a>(
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Option<Cow<'a, str>>,
    usize,
);

/// Parses a document after checking its size (cheap). Only when the shape is refused is
/// the version read alone, so that a document of another version is reported as such
/// rather than as a shape error: probing every document first parsed it twice, about a
/// seventh of the controller's work per region write (BENCHMARKS.md).
fn parse<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, CodecError> {
    if text.len() > MAX_DECODED_BYTES {
        return Err(CodecError::TooLarge {
            size: text.len(),
            limit: MAX_DECODED_BYTES,
        });
    }
    serde_json::from_str(text).map_err(|error| {
        match serde_json::from_str::<VersionProbe>(text) {
            Ok(probe) => check_version(probe.v).err(),
            Err(_) => None,
        }
        .unwrap_or_else(|| malformed(error))
    })
}

fn check_version(found: Option<u64>) -> Result<(), CodecError> {
    match found {
        None => Err(CodecError::MissingVersion),
        Some(FORMAT_VERSION) => Ok(()),
        Some(found) => Err(CodecError::UnsupportedVersion {
            found,
            supported: FORMAT_VERSION,
        }),
    }
}

fn decode_writers(wire: &[Cow<'_, str>]) -> Result<Vec<WriterId>, CodecError> {
    let mut writers: Vec<WriterId> = Vec::with_capacity(wire.len());
    for (index, text) in wire.iter().enumerate() {
        let previous = index.checked_sub(1).and_then(|previous| wire.get(previous));
        if previous.is_some_and(|previous| previous.as_ref() >= text.as_ref()) {
            return Err(CodecError::WriterOrder {
                index,
                writer: quoted(text),
            });
        }
        let writer =
            WriterId::parse(text).map_err(|source| CodecError::InvalidWriter { index, source })?;
        writers.push(writer);
    }
    Ok(writers)
}

fn decode_stamps(
    wire: &[(u64, u32, usize)],
    writers: &[WriterId],
) -> Result<Vec<Stamp>, CodecError> {
    let mut stamps: Vec<Stamp> = Vec::with_capacity(wire.len());
    for (index, &(wall_ms, logical, writer_index)) in wire.iter().enumerate() {
        let writer = writers
            .get(writer_index)
            .ok_or(CodecError::StampWriterIndex {
                index,
                writer_index,
                writers: writers.len(),
            })?;
        let stamp = Stamp::new(wall_ms, logical, writer.clone());
        if stamps.last().is_some_and(|previous| *previous >= stamp) {
            return Err(CodecError::StampOrder { index, stamp });
        }
        stamps.push(stamp);
    }
    Ok(stamps)
}

/// The entries, validated, sorted by key as replicas and deltas store them.
fn decode_entries(
    wire: &[WireEntry<'_>],
    stamps: &[Stamp],
) -> Result<Vec<(Arc<str>, Entry)>, CodecError> {
    let mut used = vec![false; stamps.len()];
    let mut sorted: Vec<(Arc<str>, Entry)> = Vec::with_capacity(wire.len());
    for (index, current) in wire.iter().enumerate() {
        let WireEntry(key, value, stamp_index) = current;
        let stamp = stamps
            .get(*stamp_index)
            .ok_or_else(|| CodecError::EntryStampIndex {
                index,
                key: quoted(key),
                stamp_index: *stamp_index,
                stamps: stamps.len(),
            })?;
        if let Some(before) = index.checked_sub(1).and_then(|at| wire.get(at)) {
            check_order(index, before, current, stamp)?;
        }
        used[*stamp_index] = true;
        let entry = Entry {
            value: value.as_deref().map(Arc::from),
            stamp: stamp.clone(),
        };
        sorted.push((Arc::from(key.as_ref()), entry));
    }
    if let Some(index) = used.iter().position(|used| !used) {
        return Err(CodecError::UnusedStamp {
            index,
            stamp: stamps[index].clone(),
        });
    }
    Ok(sorted)
}

fn check_order(
    index: usize,
    before: &WireEntry<'_>,
    current: &WireEntry<'_>,
    stamp: &Stamp,
) -> Result<(), CodecError> {
    let (
        WireEntry(key, value, stamp_index),
        WireEntry(previous_key, previous_value, previous_stamp),
    ) = (current, before);
    match previous_key.as_ref().cmp(key.as_ref()) {
        std::cmp::Ordering::Less => Ok(()),
        std::cmp::Ordering::Greater => Err(CodecError::KeyOrder {
            index,
            key: quoted(key),
            previous: quoted(previous_key),
        }),
        std::cmp::Ordering::Equal if previous_stamp == stamp_index && previous_value != value => {
            Err(CodecError::StampConflict {
                index,
                key: quoted(key),
                stamp: stamp.clone(),
            })
        }
        std::cmp::Ordering::Equal => Err(CodecError::DuplicateKey {
            index,
            key: quoted(key),
        }),
    }
}

/// A parser error without the input fragments `serde_json` quotes in some messages (a
/// misplaced value would otherwise end up in a log).
fn malformed(error: serde_json::Error) -> CodecError {
    CodecError::Malformed {
        line: error.line(),
        column: error.column(),
        message: redact_quoted(&error.to_string()),
    }
}

fn redact_quoted(message: &str) -> String {
    // serde_json appends " at line L column C"; the position is reported separately.
    let message = message
        .rfind(" at line ")
        .map_or(message, |cut| &message[..cut]);
    let mut out = String::with_capacity(message.len());
    let mut inside = false;
    for piece in message.split('"') {
        if inside {
            out.push_str("\"…\"");
        } else {
            out.push_str(piece);
        }
        inside = !inside;
    }
    out
}

#[cfg(test)]
mod tests;
