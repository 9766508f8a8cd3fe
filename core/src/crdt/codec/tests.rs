use super::*;
use crate::crdt::CodecError;

fn stamp(wall_ms: u64, writer: &str) -> Stamp {
    Stamp::new(wall_ms, 0, WriterId::parse(writer).unwrap())
}

fn sample() -> Replica {
    let mut delta = Delta::new();
    delta.set("b", "line\n\"quoted\"\u{1}é", stamp(10, "rollout:ns/app"));
    delta.set("c", "3", stamp(10, "rollout:ns/app"));
    delta.remove("a", stamp(12, "override:alice"));
    let mut replica = Replica::new();
    replica.apply(&delta);
    let mut older = Delta::new();
    older.set("c", "old", stamp(4, "override:bob"));
    replica.apply(&older);
    replica
}

#[test]
fn encodes_canonically_and_round_trips() {
    let text = encode(&sample()).unwrap();
    assert_eq!(
        text,
        concat!(
            r#"{"v":1,"writers":["override:alice","override:bob","rollout:ns/app"],"#,
            r#""frontiers":[[12,0],[4,0],[10,0]],"stamps":[[10,0,2],[12,0,0]],"#,
            r#""entries":[["a",null,1],["b","line\n\"quoted\"\u0001é",0],["c","3",0]]}"#
        )
    );
    assert_eq!(decode(&text).unwrap(), sample());
    let spaced = text.replace(',', " ,\n ");
    assert_eq!(decode(&spaced).unwrap(), sample());
}

#[test]
fn a_collected_replica_keeps_its_horizon_and_an_older_document_reads_without_one() {
    let mut replica = sample();
    let before = encode(&replica).unwrap();
    assert!(!before.contains("horizon"));
    assert_eq!(decode(&before).unwrap().horizon(), None);
    let through = stamp(11, "rollout:ns/app");
    crate::crdt::collect_tombstones(&mut replica, &through);
    let text = encode(&replica).unwrap();
    assert!(
        text.ends_with(r#","horizon":"11.0@rollout:ns/app"}"#),
        "{text}"
    );
    assert_eq!(decode(&text).unwrap(), replica);
}

#[test]
fn escaping_matches_serde_json() {
    let text: String = (0u8..=0x7f).map(char::from).chain("é€😀".chars()).collect();
    let mut delta = Delta::new();
    delta.set(text.as_str(), text.as_str(), stamp(1, "rollout:ns/app"));
    let mut replica = Replica::new();
    replica.apply(&delta);
    let quoted = serde_json::to_string(&text).unwrap();
    let encoded = encode(&replica).unwrap();
    assert!(
        encoded.contains(&format!("[[{quoted},{quoted},0]]")),
        "{encoded}"
    );
    assert_eq!(decode(&encoded).unwrap(), replica);
}

#[test]
fn delta_round_trips_and_has_no_frontiers() {
    let mut delta = Delta::new();
    delta.set("k", "v", stamp(3, "rollout:ns/app"));
    let text = encode_delta(&delta).unwrap();
    assert_eq!(
        text,
        r#"{"v":1,"writers":["rollout:ns/app"],"stamps":[[3,0,0]],"entries":[["k","v",0]]}"#
    );
    assert_eq!(decode_delta(&text).unwrap(), delta);
    assert!(matches!(decode(&text), Err(CodecError::Malformed { .. })));
}

#[test]
fn refuses_what_a_correct_encoder_never_writes() {
    let doc = |entries: &str| {
        format!(
            r#"{{"v":1,"writers":["override:a","rollout:ns/app"],"frontiers":[[9,0],[9,0]],"stamps":[[1,0,0],[2,0,1]],"entries":[{entries}]}}"#
        )
    };
    let both = r#"["x","1",0],["y","1",1]"#;
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
        (
            r#"{"v":1,"v":1,"writers":[],"frontiers":[],"stamps":[],"entries":[]}"#.into(),
            |e| matches!(e, CodecError::Malformed { .. }),
        ),
        (
            r#"{"v":1,"writers":[],"frontiers":[],"stamps":[],"entries":[],"x":0}"#.into(),
            |e| matches!(e, CodecError::Malformed { .. }),
        ),
        (doc(r#"["y","1",0],["x","1",1]"#), |e| {
            matches!(e, CodecError::KeyOrder { index: 1, .. })
        }),
        (doc(r#"["x","1",0],["x","1",1]"#), |e| {
            matches!(e, CodecError::DuplicateKey { index: 1, .. })
        }),
        (doc(r#"["x","1",0],["x","2",0],["y","1",1]"#), |e| {
            matches!(e, CodecError::StampConflict { index: 1, .. })
        }),
        (doc(r#"["x","1",0],["y","1",2]"#), |e| {
            matches!(
                e,
                CodecError::EntryStampIndex {
                    index: 1,
                    stamp_index: 2,
                    ..
                }
            )
        }),
        (doc(r#"["x","1",0]"#), |e| {
            matches!(e, CodecError::UnusedStamp { index: 1, .. })
        }),
        (doc(both).replace("override:a", "root"), |e| {
            matches!(e, CodecError::InvalidWriter { index: 0, .. })
        }),
        (doc(both).replace("override:a", "rollout:zz/z"), |e| {
            matches!(e, CodecError::WriterOrder { index: 1, .. })
        }),
        (doc(both).replace("[[9,0],[9,0]]", "[[9,0]]"), |e| {
            matches!(
                e,
                CodecError::FrontierCount {
                    writers: 2,
                    frontiers: 1
                }
            )
        }),
        (doc(both).replace("[[9,0],[9,0]]", "[[0,5],[9,0]]"), |e| {
            matches!(e, CodecError::FrontierBehindStamp { index: 0, .. })
        }),
        (
            doc(both).replace("[[1,0,0],[2,0,1]]", "[[2,0,1],[1,0,0]]"),
            |e| matches!(e, CodecError::StampOrder { index: 1, .. }),
        ),
        (
            doc(both).replace("[[1,0,0],[2,0,1]]", "[[1,0,0],[2,0,7]]"),
            |e| {
                matches!(
                    e,
                    CodecError::StampWriterIndex {
                        index: 1,
                        writer_index: 7,
                        ..
                    }
                )
            },
        ),
        (doc(both).replace("[1,0,0]", "[1,4294967296,0]"), |e| {
            matches!(e, CodecError::Malformed { .. })
        }),
        (" ".repeat(MAX_DECODED_BYTES + 1), |e| {
            matches!(e, CodecError::TooLarge { .. })
        }),
    ];
    assert!(
        decode(&doc(both)).is_ok(),
        "the template itself must be valid"
    );
    for (text, expected) in cases {
        let error = decode(&text).unwrap_err();
        assert!(
            expected(&error),
            "{} gave {error}",
            &text[..text.len().min(160)]
        );
    }
    let unused = r#"{"v":1,"writers":["override:a","override:b"],"stamps":[[1,0,0]],"entries":[["x","1",0]]}"#;
    assert!(matches!(
        decode_delta(unused),
        Err(CodecError::UnusedWriter { index: 1, .. })
    ));
}

#[test]
fn errors_never_quote_values() {
    let text = r#"{"v":1,"writers":[],"frontiers":[],"stamps":[],"entries":[["k","hunter2","secret-ish"]]}"#;
    let error = decode(text).unwrap_err().to_string();
    assert!(error.contains("line 1"), "{error}");
    assert!(!error.contains("secret-ish"), "{error}");
    let text = r#"{"v":1,"writers":["override:a"],"frontiers":[[1,0]],"stamps":[[1,0,0]],"entries":[["k","p1",0],["k","p2",0]]}"#;
    let error = decode(text).unwrap_err().to_string();
    assert!(!error.contains("p1") && !error.contains("p2"), "{error}");
}

#[test]
fn ten_thousand_realistic_keys_fit_but_not_a_mebibyte_of_values() {
    let realistic: Delta = (0..10_000)
        .map(|i| {
            let key = format!("checkout.http.setting_{i:06}");
            let value = format!("https://svc.internal:8443/{i:08}/abcdefgh");
            (
                key,
                Entry::live(value, stamp(1_764_000_000_000, "rollout:ns/app")),
            )
        })
        .collect();
    let mut replica = Replica::new();
    replica.apply(&realistic);
    assert!(encode(&replica).is_ok());

    let value = "x".repeat(1024);
    let huge: Delta = (0..1024)
        .map(|i| {
            (
                format!("key-{i:04}"),
                Entry::live(value.as_str(), stamp(1, "rollout:ns/app")),
            )
        })
        .collect();
    let mut replica = Replica::new();
    replica.apply(&huge);
    match encode(&replica) {
        Err(CodecError::TooLarge { size, limit }) => {
            assert!(size > limit);
            assert_eq!(limit, MAX_ENCODED_BYTES);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}
