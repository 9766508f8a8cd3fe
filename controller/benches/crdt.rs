//! CRDT core benchmarks: full-state merge, delta apply, codec; each beside the `crdts`
//! crate's closest equivalent on the same data.
//!
//! The equivalent is a `BTreeMap<String, crdts::LWWReg<Option<String>, Stamp>>`: one LWW
//! register per key, `None` as tombstone, our `Stamp` as marker, i.e. the same semantics
//! and the same total order. `crdts::Map` is not an equivalent: it is an observed-remove
//! map with per-entry version vectors and reset-remove semantics, and `LWWReg` cannot be
//! its value (it does not implement `ResetRemove`).
//!
//! `production_path` is what the controller runs per region and publish: decode the
//! companion, apply the revision's delta, encode the result. The other cases isolate one
//! step or a path production does not take (a full merge of two large replicas).
//!
//! Run: `CARGO_TARGET_DIR=/work/main/target cargo bench -p configrollout --bench crdt -- --warm-up-time 1 --measurement-time 3`

use std::collections::BTreeMap;
use std::hint::black_box;

use configrollout::crdt::{Delta, Entry, Replica, Stamp, WriterId, decode, encode};
use crdts::{CvRDT, LWWReg};
use criterion::measurement::Measurement;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};

#[path = "support/thread_cpu_time.rs"]
mod thread_cpu_time;
use thread_cpu_time::ThreadCpuTime;

type Registers = BTreeMap<String, LWWReg<Option<String>, Stamp>>;

fn writer() -> WriterId {
    WriterId::rollout("payments", "api-config").expect("valid writer")
}

/// Deterministic pseudo-random numbers (no rand dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// A configuration-looking key: `<service>.<component>.<setting>_<n>`.
fn key(index: usize) -> String {
    const SERVICES: [&str; 6] = ["checkout", "payments", "search", "auth", "ledger", "edge"];
    const PARTS: [&str; 5] = ["http", "db", "cache", "limits", "features"];
    format!(
        "{}.{}.setting_{index:06}",
        SERVICES[index % SERVICES.len()],
        PARTS[(index / 7) % PARTS.len()]
    )
}

/// A value of 20 to 60 bytes.
fn value(rng: &mut Lcg, generation: u64) -> String {
    let len = 20 + (rng.next() % 41) as usize;
    let mut text = format!("g{generation}:https://svc.internal:8443/");
    while text.len() < len {
        text.push(char::from(b'a' + (rng.next() % 26) as u8));
    }
    text.truncate(len);
    text
}

/// Two replicas of `n` keys each, half of the keys shared, the shared ones newer on the
/// right (a region that received a later revision).
fn replica_pair(n: usize) -> (Replica, Replica) {
    let mut rng = Lcg(n as u64);
    let older = Stamp::new(1_764_000_000_000, 0, writer());
    let newer = Stamp::new(1_764_000_600_000, 0, writer());
    let left: Delta = (0..n)
        .map(|i| (key(i), Entry::live(value(&mut rng, 1), older.clone())))
        .collect();
    let right: Delta = (n / 2..n + n / 2)
        .map(|i| (key(i), Entry::live(value(&mut rng, 2), newer.clone())))
        .collect();
    (laid_out_in_key_order(&left), laid_out_in_key_order(&right))
}

/// A replica whose keys and values are allocated in key order, as decoding a companion
/// ConfigMap leaves them, and as `registers` leaves the baseline's: both sides then get
/// the same memory locality.
fn laid_out_in_key_order(delta: &Delta) -> Replica {
    let fresh: Delta = delta
        .iter()
        .map(|(key, entry)| {
            let copy = Entry {
                value: entry.value().map(Into::into),
                stamp: entry.stamp.clone(),
            };
            (key.to_owned(), copy)
        })
        .collect();
    let mut replica = Replica::new();
    replica.apply(&fresh);
    replica
}

fn registers(replica: &Replica) -> Registers {
    replica
        .iter()
        .map(|(key, entry)| {
            let register = LWWReg {
                val: entry.value().map(str::to_owned),
                marker: entry.stamp.clone(),
            };
            (key.to_owned(), register)
        })
        .collect()
}

fn merge_registers(ours: &mut Registers, theirs: &Registers) {
    for (key, register) in theirs {
        match ours.get_mut(key) {
            Some(local) => local.merge(register.clone()),
            None => {
                ours.insert(key.clone(), register.clone());
            }
        }
    }
}

/// `changed` keys spread over an `n`-key replica (a tenth of them removed), all under
/// `stamp`: a revision as the engine publishes it.
fn revision_delta(stamp: &Stamp, n: usize, changed: usize, round: u64) -> Delta {
    let mut rng = Lcg(round);
    let step = n / changed;
    (0..changed)
        .map(|i| {
            let entry = if i % 10 == 9 {
                Entry::tombstone(stamp.clone())
            } else {
                Entry::live(value(&mut rng, round), stamp.clone())
            };
            (key(i * step + 3), entry)
        })
        .collect()
}

/// What the controller does per region and publish: decode the companion ConfigMap's
/// text, apply the revision's delta, encode the result. Sizes: `spec.data`'s bound (1,000
/// keys) and a companion near its size cap (10,000 keys, about 0.8 MB encoded); deltas
/// of 100 keys, and of 1,000 (a whole `spec.data` rewritten) into the large companion.
fn production_path(c: &mut Criterion) {
    production_path_cases(
        c,
        "production_path",
        &[(1_000, 100), (10_000, 100), (10_000, 1_000)],
    );
}

fn production_path_cases<M: Measurement>(
    c: &mut Criterion<M>,
    name: &str,
    cases: &[(usize, usize)],
) {
    let mut group = c.benchmark_group(name);
    for &(n, changed) in cases {
        let (replica, _) = replica_pair(n);
        let text = encode(&replica).expect("fits");
        let stamp = Stamp::new(1_765_000_000_000, 0, writer());
        let delta = revision_delta(&stamp, n, changed, 7);
        group.bench_function(
            format!("decode_apply_encode/{n}_keys/{changed}_changed"),
            |b| {
                b.iter(|| {
                    let mut state = decode(black_box(&text)).expect("decodes");
                    state.apply(black_box(&delta));
                    encode(&state).expect("fits")
                })
            },
        );
    }
    group.finish();
}

fn full_merge(c: &mut Criterion) {
    full_merge_sizes(c, "full_merge", &[1_000, 10_000, 50_000]);
}

fn full_merge_sizes<M: Measurement>(c: &mut Criterion<M>, name: &str, sizes: &[usize]) {
    let mut group = c.benchmark_group(name);
    for &n in sizes {
        let (left, right) = replica_pair(n);
        group.bench_function(format!("ours/{n}"), |b| {
            b.iter_batched(
                || left.clone(),
                |mut merged| {
                    merged.merge(black_box(&right));
                    merged
                },
                BatchSize::LargeInput,
            )
        });
        let (left_registers, right_registers) = (registers(&left), registers(&right));
        group.bench_function(format!("crdts/{n}"), |b| {
            b.iter_batched(
                || left_registers.clone(),
                |mut merged| {
                    merge_registers(&mut merged, black_box(&right_registers));
                    merged
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

/// The replica persists across iterations and every iteration's delta carries a newer
/// stamp, so every entry wins (the costly case) and the state stays at 50k keys.
fn delta_apply(c: &mut Criterion) {
    delta_apply_named(c, "apply_delta_100_into_50k");
}

fn delta_apply_named<M: Measurement>(c: &mut Criterion<M>, name: &str) {
    const N: usize = 50_000;
    let mut group = c.benchmark_group(name);
    let (base, _) = replica_pair(N);
    let mut replica = base.clone();
    let mut round = 10u64;
    group.bench_function("ours", |b| {
        b.iter_batched(
            || {
                round += 1;
                revision_delta(
                    &Stamp::new(1_765_000_000_000 + round, 0, writer()),
                    N,
                    100,
                    round,
                )
            },
            |delta| replica.apply(black_box(&delta)),
            BatchSize::SmallInput,
        )
    });
    let mut ours = registers(&base);
    let mut round = 10u64;
    group.bench_function("crdts", |b| {
        b.iter_batched(
            || {
                round += 1;
                let stamp = Stamp::new(1_765_000_000_000 + round, 0, writer());
                let mut single = Replica::new();
                single.apply(&revision_delta(&stamp, N, 100, round));
                registers(&single)
            },
            |delta| merge_registers(&mut ours, black_box(&delta)),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("codec_10k");
    let (replica, _) = replica_pair(10_000);
    let text = encode(&replica).expect("fits");
    group.bench_function("encode/ours", |b| b.iter(|| encode(black_box(&replica))));
    group.bench_function("decode/ours", |b| b.iter(|| decode(black_box(&text))));
    // Every read of a companion checks its MAC over the whole encoded state.
    let key = configrollout::crdt::DigestKey::new(b"bench-key-0123456789abcdef").expect("key");
    let mac = configrollout::crdt::state_mac(&key, "app", "limits", &text);
    group.bench_function("state_mac_check/ours", |b| {
        b.iter(|| {
            configrollout::crdt::state_mac_matches(&key, "app", "limits", black_box(&text), &mac)
        })
    });
    let regs = registers(&replica);
    let json = serde_json::to_string(&regs).expect("serialises");
    group.bench_function("encode/crdts_serde_json", |b| {
        b.iter(|| serde_json::to_string(black_box(&regs)))
    });
    group.bench_function("decode/crdts_serde_json", |b| {
        b.iter(|| serde_json::from_str::<Registers>(black_box(&json)))
    });
    group.finish();
}

/// A companion with one key per writer (a target many rollouts and people have written
/// over its life: frontiers keep every writer). Encoding must grow with the writers, not
/// with their square.
fn codec_many_writers(c: &mut Criterion) {
    let mut group = c.benchmark_group("codec_writers");
    for writers in [1_000_usize, 10_000] {
        let delta: Delta = (0..writers)
            .map(|index| {
                let writer =
                    WriterId::rollout("team", &format!("writer-{index:05}")).expect("valid writer");
                (
                    key(index),
                    Entry::live("v", Stamp::new(1_765_000_000_000, 0, writer)),
                )
            })
            .collect();
        let mut replica = Replica::new();
        replica.apply(&delta);
        group.bench_function(format!("encode/{writers}"), |b| {
            b.iter(|| encode(black_box(&replica)))
        });
    }
    group.finish();
}

fn cpu_time_cases(c: &mut Criterion<ThreadCpuTime>) {
    production_path_cases(
        c,
        "production_path_cpu_time",
        &[(1_000, 100), (10_000, 100), (10_000, 1_000)],
    );
    full_merge_sizes(c, "full_merge_cpu_time", &[50_000]);
    delta_apply_named(c, "apply_delta_100_into_50k_cpu_time");
}

criterion_group!(
    benches,
    production_path,
    full_merge,
    delta_apply,
    codec,
    codec_many_writers
);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpuTime::new());
    targets = cpu_time_cases
}
criterion_main!(benches, cpu_time);
