//! The text form of a replica, stored in the companion ConfigMap (whose `data` holds
//! strings), and of a delta.
//!
//! Format version 1, one JSON document:
//!
//! ```text
//! {"v":1,"frontiers":[[wall_ms,logical,"writer"],...],"entries":[["key","value"|null,wall_ms,logical,"writer"],...]}
//! ```
//!
//! `frontiers` sorted by writer, `entries` by key (byte order); a delta has no `frontiers`.
//! Encoding is canonical: the same state always gives the same bytes (no whitespace,
//! strings escaped as `serde_json` does: `"`, `\` and control characters only), so the
//! ConfigMap is rewritten only when the state changes.
//!
//! Decoding never panics and names what is wrong. It accepts any JSON spelling of the same
//! document (whitespace, `\u` escapes) but refuses what a correct encoder never writes:
//! unsorted or repeated keys, two values under one stamp, entries beyond their writer's
//! frontier, invalid writer ids, unknown fields, unknown versions, oversized input.
//! Error messages carry keys and writer ids, never values.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Deserialize;

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
    let mut out = String::with_capacity(estimate(replica.len()));
    out.push_str("{\"v\":1,\"frontiers\":[");
    for (index, (writer, stamp)) in replica.frontiers().iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push('[');
        push_number(&mut out, stamp.wall_ms);
        out.push(',');
        push_number(&mut out, u64::from(stamp.logical));
        out.push(',');
        push_string(&mut out, writer.as_str());
        out.push(']');
    }
    out.push_str("],");
    push_entries(&mut out, replica.iter());
    finish(out)
}

/// Encodes a delta canonically; fails if the result would not fit in a ConfigMap.
pub fn encode_delta(delta: &Delta) -> Result<String, CodecError> {
    let mut out = String::with_capacity(estimate(delta.len()));
    out.push_str("{\"v\":1,");
    push_entries(&mut out, delta.iter());
    finish(out)
}

/// Decodes a replica, validating everything [`encode`] guarantees.
pub fn decode(text: &str) -> Result<Replica, CodecError> {
    check_version(text)?;
    let wire: WireReplica<'_> = serde_json::from_str(text).map_err(malformed)?;
    let frontiers = decode_frontiers(&wire.frontiers)?;
    let entries = decode_entries(&wire.entries, Some(&frontiers))?;
    Ok(Replica::from_validated_parts(entries, frontiers))
}

/// Decodes a delta, validating everything [`encode_delta`] guarantees.
pub fn decode_delta(text: &str) -> Result<Delta, CodecError> {
    check_version(text)?;
    let wire: WireDelta<'_> = serde_json::from_str(text).map_err(malformed)?;
    let entries = decode_entries(&wire.entries, None)?;
    Ok(Delta::from_sorted_entries(entries))
}

fn estimate(entries: usize) -> usize {
    64 + entries.saturating_mul(96)
}

fn finish(mut out: String) -> Result<String, CodecError> {
    out.push_str("]}");
    if out.len() > MAX_ENCODED_BYTES {
        return Err(CodecError::TooLarge {
            size: out.len(),
            limit: MAX_ENCODED_BYTES,
        });
    }
    Ok(out)
}

fn push_entries<'a>(out: &mut String, entries: impl Iterator<Item = (&'a str, &'a Entry)>) {
    out.push_str("\"entries\":[");
    for (index, (key, entry)) in entries.enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push('[');
        push_string(out, key);
        out.push(',');
        match entry.value() {
            Some(value) => push_string(out, value),
            None => out.push_str("null"),
        }
        out.push(',');
        push_number(out, entry.stamp.wall_ms);
        out.push(',');
        push_number(out, u64::from(entry.stamp.logical));
        out.push(',');
        push_string(out, entry.stamp.writer.as_str());
        out.push(']');
    }
}

fn push_number(out: &mut String, number: u64) {
    use std::fmt::Write;
    // Writing into a String cannot fail.
    let _ = write!(out, "{number}");
}

/// JSON string with the escapes `serde_json` writes: `"`, `\`, the short forms of
/// backspace, form feed, newline, carriage return and tab, `\u00XX` for other control
/// characters; everything else verbatim.
fn push_string(out: &mut String, text: &str) {
    out.push('"');
    let mut plain_from = 0;
    for (at, byte) in text.bytes().enumerate() {
        let escape: Option<&str> = match byte {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.push_str(&text[plain_from..at]);
        match escape {
            Some(short) => out.push_str(short),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
        }
        plain_from = at + 1;
    }
    out.push_str(&text[plain_from..]);
    out.push('"');
}

#[derive(Deserialize)]
struct VersionProbe {
    v: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireReplica<'a> {
    #[allow(dead_code)] // checked by the probe
    v: u64,
    #[serde(borrow)]
    frontiers: Vec<WireFrontier<'a>>,
    #[serde(borrow)]
    entries: Vec<WireEntry<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireDelta<'a> {
    #[allow(dead_code)] // checked by the probe
    v: u64,
    #[serde(borrow)]
    entries: Vec<WireEntry<'a>>,
}

#[derive(Deserialize)]
struct WireFrontier<'a>(u64, u32, #[serde(borrow)] Cow<'a, str>);

#[derive(Deserialize)]
struct WireEntry<'a>(
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Option<Cow<'a, str>>,
    u64,
    u32,
    #[serde(borrow)] Cow<'a, str>,
);

/// Size first (cheap), then the version alone, so a document of another version is
/// reported as such rather than as a shape error.
fn check_version(text: &str) -> Result<(), CodecError> {
    if text.len() > MAX_DECODED_BYTES {
        return Err(CodecError::TooLarge {
            size: text.len(),
            limit: MAX_DECODED_BYTES,
        });
    }
    let probe: VersionProbe = serde_json::from_str(text).map_err(malformed)?;
    match probe.v {
        None => Err(CodecError::MissingVersion),
        Some(FORMAT_VERSION) => Ok(()),
        Some(found) => Err(CodecError::UnsupportedVersion {
            found,
            supported: FORMAT_VERSION,
        }),
    }
}

fn decode_frontiers(wire: &[WireFrontier<'_>]) -> Result<BTreeMap<WriterId, Stamp>, CodecError> {
    let mut frontiers = BTreeMap::new();
    let mut previous: Option<&str> = None;
    for (index, WireFrontier(wall_ms, logical, writer)) in wire.iter().enumerate() {
        if previous.is_some_and(|previous| previous >= writer.as_ref()) {
            return Err(CodecError::FrontierOrder {
                index,
                writer: quoted(writer),
            });
        }
        previous = Some(writer);
        let writer = WriterId::parse(writer).map_err(|source| CodecError::InvalidWriter {
            field: "frontiers",
            index,
            source,
        })?;
        frontiers.insert(writer.clone(), Stamp::new(*wall_ms, *logical, writer));
    }
    Ok(frontiers)
}

fn decode_entries(
    wire: &[WireEntry<'_>],
    frontiers: Option<&BTreeMap<WriterId, Stamp>>,
) -> Result<BTreeMap<Arc<str>, Entry>, CodecError> {
    // One shared writer id per distinct writer, as in a replica built by merging.
    let mut writers: HashMap<&str, WriterId> = frontiers
        .into_iter()
        .flat_map(|frontiers| frontiers.keys())
        .map(|writer| (writer.as_str(), writer.clone()))
        .collect();
    let mut sorted: Vec<(Arc<str>, Entry)> = Vec::with_capacity(wire.len());
    let mut previous: Option<&WireEntry<'_>> = None;
    for (index, current) in wire.iter().enumerate() {
        let WireEntry(key, value, wall_ms, logical, writer_text) = current;
        if let Some(before) = previous {
            check_order(index, before, current)?;
        }
        previous = Some(current);
        let writer = match writers.get(writer_text.as_ref()) {
            Some(writer) => writer.clone(),
            None => {
                let writer =
                    WriterId::parse(writer_text).map_err(|source| CodecError::InvalidWriter {
                        field: "entries",
                        index,
                        source,
                    })?;
                writers.insert(writer_text, writer.clone());
                writer
            }
        };
        let stamp = Stamp::new(*wall_ms, *logical, writer);
        if let Some(frontiers) = frontiers {
            let covered = frontiers
                .get(&stamp.writer)
                .is_some_and(|frontier| *frontier >= stamp);
            if !covered {
                return Err(CodecError::FrontierBehindEntry {
                    index,
                    key: quoted(key),
                    writer: stamp.writer,
                });
            }
        }
        let entry = Entry {
            value: value.as_deref().map(Arc::from),
            stamp,
        };
        sorted.push((Arc::from(key.as_ref()), entry));
    }
    // Already sorted and unique: `from_iter` builds the tree in one pass.
    Ok(sorted.into_iter().collect())
}

fn check_order(
    index: usize,
    before: &WireEntry<'_>,
    current: &WireEntry<'_>,
) -> Result<(), CodecError> {
    let (WireEntry(key, value, wall_ms, logical, writer), WireEntry(previous_key, ..)) =
        (current, before);
    match previous_key.as_ref().cmp(key.as_ref()) {
        std::cmp::Ordering::Less => Ok(()),
        std::cmp::Ordering::Greater => Err(CodecError::KeyOrder {
            index,
            key: quoted(key),
            previous: quoted(previous_key),
        }),
        std::cmp::Ordering::Equal => {
            let WireEntry(_, previous_value, previous_wall, previous_logical, previous_writer) =
                before;
            let same_stamp =
                (previous_wall, previous_logical, previous_writer) == (wall_ms, logical, writer);
            match WriterId::parse(writer) {
                Ok(writer) if same_stamp && previous_value != value => {
                    Err(CodecError::StampConflict {
                        index,
                        key: quoted(key),
                        stamp: Stamp::new(*wall_ms, *logical, writer),
                    })
                }
                _ => Err(CodecError::DuplicateKey {
                    index,
                    key: quoted(key),
                }),
            }
        }
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
mod tests {
    use super::*;
    use crate::crdt::CodecError;

    fn stamp(wall_ms: u64, writer: &str) -> Stamp {
        Stamp::new(wall_ms, 0, WriterId::parse(writer).unwrap())
    }

    fn sample() -> Replica {
        let mut delta = Delta::new();
        delta.set("b", "line\n\"quoted\"\u{1}é", stamp(10, "rollout:ns/app"));
        delta.remove("a", stamp(12, "override:alice"));
        let mut replica = Replica::new();
        replica.apply(&delta);
        replica
    }

    #[test]
    fn encodes_canonically_and_round_trips() {
        let text = encode(&sample()).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"frontiers":[[12,0,"override:alice"],[10,0,"rollout:ns/app"]],"entries":[["a",null,12,0,"override:alice"],["b","line\n\"quoted\"\u0001é",10,0,"rollout:ns/app"]]}"#
        );
        assert_eq!(decode(&text).unwrap(), sample());
        let spaced = text.replace(',', " ,\n ");
        assert_eq!(decode(&spaced).unwrap(), sample());
    }

    #[test]
    fn escaping_matches_serde_json() {
        let text: String = (0u8..=0x7f).map(char::from).chain("é€😀".chars()).collect();
        let mut ours = String::new();
        push_string(&mut ours, &text);
        assert_eq!(ours, serde_json::to_string(&text).unwrap());
    }

    #[test]
    fn delta_round_trips_and_has_no_frontiers() {
        let mut delta = Delta::new();
        delta.set("k", "v", stamp(3, "rollout:ns/app"));
        let text = encode_delta(&delta).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"entries":[["k","v",3,0,"rollout:ns/app"]]}"#
        );
        assert_eq!(decode_delta(&text).unwrap(), delta);
        assert!(matches!(decode(&text), Err(CodecError::Malformed { .. })));
    }

    #[test]
    fn refuses_what_a_correct_encoder_never_writes() {
        let w = "\"rollout:ns/app\"";
        let doc =
            |entries: &str| format!(r#"{{"v":1,"frontiers":[[9,0,{w}]],"entries":[{entries}]}}"#);
        type Expectation = fn(&CodecError) -> bool;
        let cases: Vec<(String, Expectation)> = vec![
            (r#"{"v":2,"entries":[]}"#.into(), |e| {
                matches!(e, CodecError::UnsupportedVersion { found: 2, .. })
            }),
            (r#"{"entries":[]}"#.into(), |e| {
                matches!(e, CodecError::MissingVersion)
            }),
            ("{\"v\":1,".into(), |e| {
                matches!(e, CodecError::Malformed { .. })
            }),
            (r#"{"v":1,"v":1,"frontiers":[],"entries":[]}"#.into(), |e| {
                matches!(e, CodecError::Malformed { .. })
            }),
            (r#"{"v":1,"frontiers":[],"entries":[],"x":0}"#.into(), |e| {
                matches!(e, CodecError::Malformed { .. })
            }),
            (
                doc(&format!(r#"["b","1",1,0,{w}],["a","1",1,0,{w}]"#)),
                |e| matches!(e, CodecError::KeyOrder { index: 1, .. }),
            ),
            (
                doc(&format!(r#"["a","1",1,0,{w}],["a","1",2,0,{w}]"#)),
                |e| matches!(e, CodecError::DuplicateKey { index: 1, .. }),
            ),
            (
                doc(&format!(r#"["a","1",1,0,{w}],["a","2",1,0,{w}]"#)),
                |e| matches!(e, CodecError::StampConflict { index: 1, .. }),
            ),
            (doc(r#"["a","1",1,0,"root"]"#), |e| {
                matches!(
                    e,
                    CodecError::InvalidWriter {
                        field: "entries",
                        index: 0,
                        ..
                    }
                )
            }),
            (doc(&format!(r#"["a","1",10,0,{w}]"#)), |e| {
                matches!(e, CodecError::FrontierBehindEntry { index: 0, .. })
            }),
            (doc(r#"["a","1",1,0,"override:bob"]"#), |e| {
                matches!(e, CodecError::FrontierBehindEntry { index: 0, .. })
            }),
            (
                r#"{"v":1,"frontiers":[[1,0,"override:b"],[1,0,"override:a"]],"entries":[]}"#
                    .into(),
                |e| matches!(e, CodecError::FrontierOrder { index: 1, .. }),
            ),
            (doc(&format!(r#"["a","1",1,4294967296,{w}]"#)), |e| {
                matches!(e, CodecError::Malformed { .. })
            }),
            (" ".repeat(MAX_DECODED_BYTES + 1), |e| {
                matches!(e, CodecError::TooLarge { .. })
            }),
        ];
        for (text, expected) in cases {
            let error = decode(&text).unwrap_err();
            assert!(
                expected(&error),
                "{} gave {error}",
                &text[..text.len().min(120)]
            );
        }
    }

    #[test]
    fn errors_never_quote_values() {
        let text =
            r#"{"v":1,"frontiers":[],"entries":[["k","hunter2","secret-ish",0,"override:a"]]}"#;
        let error = decode(text).unwrap_err().to_string();
        assert!(error.contains("line 1"), "{error}");
        assert!(!error.contains("secret-ish"), "{error}");
        let text = r#"{"v":1,"frontiers":[[1,0,"override:a"]],"entries":[["k","p1",1,0,"override:a"],["k","p2",1,0,"override:a"]]}"#;
        let error = decode(text).unwrap_err().to_string();
        assert!(!error.contains("p1") && !error.contains("p2"), "{error}");
    }

    #[test]
    fn refuses_to_encode_beyond_the_object_limit() {
        let value = "x".repeat(1024);
        let delta: Delta = (0..1024)
            .map(|i| {
                (
                    format!("key-{i:04}"),
                    Entry::live(value.as_str(), stamp(1, "rollout:ns/app")),
                )
            })
            .collect();
        let mut replica = Replica::new();
        replica.apply(&delta);
        match encode(&replica) {
            Err(CodecError::TooLarge { size, limit }) => {
                assert!(size > limit);
                assert_eq!(limit, MAX_ENCODED_BYTES);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }
}
