//! Hostile input against the real scripts and the client, as properties
//! over a real server: ids that are empty, huge, binary, not UTF-8 or
//! without the `JOB` brand; payloads of 0 bytes to several MB; numeric
//! arguments that are negative, zero, not numbers or huge; a key of the
//! queue's namespace holding the wrong type; a user who may not run scripts.
//! And the access rule: the embedded server is reachable from loopback only.
//!
//! Each claim: the call gets a clear, typed error (or, where the input is
//! acceptable, works), a refused call writes nothing (every key on the
//! server is compared before and after, by `DUMP`), and the queue's
//! structure invariant holds afterwards. Each runs on Valkey 9.1, Redis 7.0
//! and the container (see `common`), with a modest number of cases so the
//! suite stays fast; a failure prints proptest's minimal input.

use crate::common; // the server matrix and the `matrix!` macro

use std::future::Future;

use ackgap::model::Model;
use ackgap::queue::client::{EnqueueOptions, QueueConfig};
use ackgap::queue::scripts::Scripts;
use ackgap::queue::{Enqueued, Queue, QueueError, Settled, Snapshot};
use common::{Backend, Ctx};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis::Value;

matrix!(
    hostile_ids_get_the_error_the_model_gives_and_a_refusal_writes_nothing,
    hostile_numbers_are_refused_exactly_as_the_prelude_says_and_write_nothing,
    payloads_of_0_bytes_to_several_mb_come_back_byte_for_byte,
    a_key_of_the_wrong_type_is_refused_with_wrongtype_before_any_write,
    without_the_type_check_a_wrongtype_leaves_a_row_without_its_index,
    lease_and_complete_refuse_every_wrong_key_and_name_the_first_of_two,
    a_row_whose_attempts_is_not_a_count_is_refused_by_lease_before_any_write,
    a_user_who_may_not_run_scripts_or_touch_the_keys_gets_noperm_and_nothing_changes,
    the_embedded_server_is_reachable_from_loopback_only,
);

/// Runs `body` on `cases` values of `strategy`, each on the test's server.
/// The property runner is synchronous; each case blocks on the test's own
/// runtime (the matrix runs on a multi-threaded one).
fn property<S, F, Fut>(cases: u32, strategy: S, body: F)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
    F: Fn(S::Value) -> Fut,
    Fut: Future<Output = ()>,
{
    let handle = tokio::runtime::Handle::current();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    });
    let result = tokio::task::block_in_place(|| {
        runner.run(&strategy, |value| {
            handle.block_on(body(value));
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Snapshots the queue and asserts its structure invariant.
async fn structure_holds(q: &Queue, after: &str) -> Snapshot {
    let s = q
        .snapshot()
        .await
        .unwrap_or_else(|e| panic!("snapshot after {after}: {e}"));
    assert_eq!(
        s.structure_problems(),
        Vec::<String>::new(),
        "structure broken after {after}: {s:#?}"
    );
    s
}

/// The code of a typed refusal (`EMQKIND`, `EMQARG`, or the server's own).
fn code(e: &QueueError) -> String {
    match e {
        QueueError::Kind { .. } => "EMQKIND".into(),
        QueueError::BadArgument { .. } => "EMQARG".into(),
        QueueError::Server { code, .. } => code.clone(),
        other => format!("{other:?}"),
    }
}

/// One job pending (`JOB-a`) and one leased (`JOB-b`, token 1, deadline
/// 1100) at logical time 1000: the state every hostile call meets.
async fn two_jobs(q: &Queue) {
    q.clear().await.unwrap();
    let q = q.at(1_000);
    q.enqueue("JOB-b", b"b", EnqueueOptions::default())
        .await
        .unwrap();
    let lease = q.lease("w1", 100).await.unwrap().unwrap();
    assert_eq!((lease.id.as_str(), lease.token), ("JOB-b", 1));
    q.enqueue("JOB-a", b"a", EnqueueOptions::default())
        .await
        .unwrap();
}

const MB: usize = 1 << 20;

// ---------------------------------------------------------------- ids

/// Ids: empty, unbranded, branded text, binary with and without the brand,
/// around the 512-byte limit, and 1 MB with and without the brand.
fn hostile_id() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        "[ -~]{0,12}".prop_map(String::into_bytes),
        "\\PC{0,12}".prop_map(|s| format!("JOB{s}").into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..16),
        proptest::collection::vec(any::<u8>(), 1..16)
            .prop_map(|b| [b"JOB-".as_slice(), &b].concat()),
        (509usize..=515).prop_map(|n| format!("JOB{}", "x".repeat(n)).into_bytes()),
        Just(format!("JOB{}", "x".repeat(MB)).into_bytes()),
        Just(vec![b'x'; MB]),
    ]
}

/// What the scripts must answer for an id: `None` when it is accepted,
/// else the error's code and, for a UTF-8 id, its whole text. For a UTF-8
/// id the model's own check is the oracle; a binary id lacks the brand
/// (EMQKIND), or has it and is refused as not UTF-8 (EMQARG).
fn expected_for_id(id: &[u8]) -> Option<(&'static str, Option<String>)> {
    match std::str::from_utf8(id) {
        Ok(text) => Model::new()
            .enqueue(text, b"", 3, 0, 1_000)
            .err()
            .map(|e| (e.code, Some(e.message))),
        Err(_) if !id.starts_with(b"JOB") => Some(("EMQKIND", None)),
        Err(_) => Some(("EMQARG", None)),
    }
}

async fn hostile_ids_get_the_error_the_model_gives_and_a_refusal_writes_nothing(c: Ctx) {
    let q = c.queue.clone();
    property(24, (0usize..4, hostile_id()), |(op, id)| {
        let q = q.clone();
        async move {
            two_jobs(&q).await;
            let before = common::keyspace(&q).await;
            let name = ["enqueue", "complete", "fail", "extend"][op];
            let args: Vec<&[u8]> = match name {
                "enqueue" => vec![&id, b"payload", b"3", b"0", b"1000"],
                "complete" => vec![&id, b"1"],
                _ => vec![&id, b"1", b"100", b"1000"],
            };
            let got = q.at(1_000).call_raw(name, &args).await;
            let shown = String::from_utf8_lossy(&id[..id.len().min(40)]).into_owned();
            match (expected_for_id(&id), got) {
                (Some((want, message)), Err(e)) => {
                    assert_eq!(code(&e), want, "{name} {shown:?}: {e}");
                    if let Some(message) = message {
                        assert_eq!(
                            e.to_string(),
                            format!("{name}: {message}"),
                            "the model's words"
                        );
                    }
                    assert!(
                        e.to_string().len() < 400,
                        "the error echoes a huge id: {} bytes",
                        e.to_string().len()
                    );
                    assert_eq!(common::keyspace(&q).await, before, "a refused {name} wrote");
                }
                // An acceptable id of a job that is not there (a generated
                // id may name JOB-a or JOB-b, which are).
                (None, Ok(_)) if id == b"JOB-a" || id == b"JOB-b" => {}
                (None, Ok(reply)) => {
                    let want = match name {
                        "enqueue" => Value::Int(1),
                        _ => Value::BulkString(b"missing".to_vec()),
                    };
                    assert_eq!(reply, want, "{name} {shown:?}");
                }
                (want, got) => panic!("{name} {shown:?}: expected {want:?}, got {got:?}"),
            }
            structure_holds(&q, name).await;
        }
    });
}

// ------------------------------------------------------------ numbers

/// Numeric arguments as a caller might send them: any integer, boundaries,
/// signs, leading zeros, exponents, hex, spaces, a fullwidth digit, empty,
/// binary.
fn hostile_number() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        (0u64..2_000).prop_map(|n| n.to_string().into_bytes()),
        prop::sample::select(vec![
            "0",
            "1",
            "-1",
            "-0",
            "100000",
            "100001",
            "1000000",
            "1000001",
            "1000000000000000",
            "1000000000000001",
            "-1000000000000000",
            "9999999999999999",
            "99999999999999999999",
            "0000000000000001",
            "00000000000000001",
            "",
            "1e3",
            "1.5",
            "0x10",
            " 5",
            "5 ",
            "5\n",
            "+5",
            "\u{ff11}",
            "NaN",
            "inf",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        "[0-9a-z .+eE-]{0,8}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..8),
    ]
}

/// `emq_int` in Rust: at most 16 characters of `-?[0-9]+`, then the range.
fn prelude_accepts(v: &[u8], min: i128, max: i128) -> bool {
    let digits = v.strip_prefix(b"-").unwrap_or(v);
    v.len() <= 16
        && !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<i128>().ok())
            .is_some_and(|n| (min..=max).contains(&n))
}

const MS_MAX: i128 = 1_000_000_000_000_000;

/// Every numeric argument of every script: (script, argument name, its
/// position in ARGV, min, max).
const NUMBERS: [(&str, &str, usize, i128, i128); 14] = [
    ("enqueue", "max_attempts", 2, 1, 1_000_000),
    ("enqueue", "delay_ms", 3, 0, MS_MAX),
    ("enqueue", "now_ms", 4, 0, MS_MAX),
    ("lease", "lease_ms", 1, 1, MS_MAX),
    ("lease", "now_ms", 2, 0, MS_MAX),
    ("complete", "token", 1, 1, MS_MAX),
    ("fail", "token", 1, 1, MS_MAX),
    ("fail", "retry_delay_ms", 2, 0, MS_MAX),
    ("fail", "now_ms", 3, 0, MS_MAX),
    ("extend", "token", 1, 1, MS_MAX),
    ("extend", "lease_ms", 2, 1, MS_MAX),
    ("extend", "now_ms", 3, 0, MS_MAX),
    ("reap", "limit", 0, 1, 100_000),
    ("reap", "now_ms", 1, 0, MS_MAX),
];

async fn hostile_numbers_are_refused_exactly_as_the_prelude_says_and_write_nothing(c: Ctx) {
    let q = c.queue.clone();
    property(
        48,
        (0..NUMBERS.len(), hostile_number()),
        |(which, value)| {
            let q = q.clone();
            async move {
                let (name, arg, at, min, max) = NUMBERS[which];
                two_jobs(&q).await;
                let before = common::keyspace(&q).await;
                let mut args: Vec<&[u8]> = match name {
                    "enqueue" => vec![b"JOB-n", b"p", b"3", b"0", b"1000"],
                    "lease" => vec![b"w1", b"100", b"1000"],
                    "complete" => vec![b"JOB-b", b"1"],
                    "fail" | "extend" => vec![b"JOB-b", b"1", b"100", b"1000"],
                    _ => vec![b"10", b"1000"],
                };
                args[at] = &value;
                let got = q.call_raw(name, &args).await;
                // An empty now means the server clock: accepted.
                let accepted =
                    (arg == "now_ms" && value.is_empty()) || prelude_accepts(&value, min, max);
                let shown = String::from_utf8_lossy(&value).into_owned();
                match (accepted, got) {
                    (true, Ok(_)) => {}
                    (false, Err(e)) => {
                        assert_eq!(code(&e), "EMQARG", "{name} {arg}={shown:?}: {e}");
                        assert!(e.to_string().contains(arg), "the error names {arg}: {e}");
                        assert_eq!(common::keyspace(&q).await, before, "a refused {name} wrote");
                    }
                    (accepted, got) => {
                        panic!("{name} {arg}={shown:?}: accepted should be {accepted}, got {got:?}")
                    }
                }
                structure_holds(&q, name).await;
            }
        },
    );
}

// ----------------------------------------------------------- payloads

async fn payloads_of_0_bytes_to_several_mb_come_back_byte_for_byte(c: Ctx) {
    let q = c.queue.clone();
    let size = prop_oneof![
        Just(0usize),
        1usize..512,
        Just(MB),
        Just(3 * MB),
        Just(6 * MB),
    ];
    property(10, (size, any::<u64>()), |(size, seed)| {
        let q = q.clone();
        async move {
            q.clear().await.unwrap();
            let q = q.at(1_000);
            // Every byte value, NUL and invalid UTF-8 included.
            let mut x = seed | 1;
            let payload: Vec<u8> = (0..size)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let opts = EnqueueOptions::default();
            assert_eq!(
                q.enqueue("JOB-big", &payload, opts).await.unwrap(),
                Enqueued::Enqueued
            );
            let s = structure_holds(&q, "enqueue").await;
            assert!(
                s.rows["JOB-big"].payload == payload,
                "snapshot payload of {size} bytes differs"
            );
            let lease = q.lease("w1", 100).await.unwrap().expect("the job is ready");
            assert!(
                lease.payload == payload,
                "leased payload of {size} bytes differs"
            );
            assert_eq!(
                q.complete("JOB-big", lease.token).await.unwrap(),
                Settled::Settled
            );
            structure_holds(&q, "complete").await;
        }
    });
}

// ----------------------------------------------------------- wrong type

/// The six types a key can hold, and how to make a key of each.
const TYPES: [&str; 6] = ["string", "list", "set", "zset", "hash", "stream"];

async fn plant(q: &Queue, key: &str, kind: &str) {
    let mut conn = q.connection();
    let mut cmd = match kind {
        "string" => redis::cmd("SET"),
        "list" => redis::cmd("RPUSH"),
        "set" => redis::cmd("SADD"),
        "zset" => redis::cmd("ZADD"),
        "hash" => redis::cmd("HSET"),
        _ => redis::cmd("XADD"),
    };
    cmd.arg(key);
    match kind {
        "zset" => cmd.arg(1).arg("x"),
        "hash" => cmd.arg("f").arg("x"),
        "stream" => cmd.arg("*").arg("f").arg("x"),
        _ => cmd.arg("x"),
    };
    let _: Value = cmd.query_async(&mut conn).await.unwrap();
}

async fn a_key_of_the_wrong_type_is_refused_with_wrongtype_before_any_write(c: Ctx) {
    let q = c.queue.clone();
    let k = q.keys().clone();
    // Each key a hostile value can sit on, with its right type.
    let targets: Vec<(String, &str)> = vec![
        (k.pending.clone(), "zset"),
        (k.active.clone(), "zset"),
        (k.dead.clone(), "zset"),
        (k.jobs.clone(), "hash"),
    ];
    // Each operation at time 2000 (JOB-b's lease expired at 1100), with
    // the keys it reads or writes.
    let ops = [
        "enqueue",
        "lease",
        "complete",
        "fail",
        "extend",
        "reap",
        "enqueue_batch",
        "lease_batch",
        "complete_batch",
        "fail_batch",
    ];
    let touched = |op: &str| -> Vec<String> {
        match op {
            "enqueue" | "enqueue_batch" => vec![k.jobs.clone(), k.pending.clone()],
            "lease" | "lease_batch" => vec![k.pending.clone(), k.active.clone(), k.jobs.clone()],
            "complete" | "complete_batch" | "extend" => vec![k.jobs.clone(), k.active.clone()],
            "fail" | "fail_batch" => vec![
                k.jobs.clone(),
                k.active.clone(),
                k.pending.clone(),
                k.dead.clone(),
            ],
            _ => vec![
                k.active.clone(),
                k.pending.clone(),
                k.dead.clone(),
                k.jobs.clone(),
            ],
        }
    };
    let strategy = (0..ops.len(), 0..targets.len(), 0..TYPES.len())
        .prop_filter("a wrong type", |(_, t, ty)| targets[*t].1 != TYPES[*ty]);
    property(48, strategy, |(op, target, ty)| {
        let q = q.clone();
        let (key, _) = targets[target].clone();
        let must_refuse = touched(ops[op]).contains(&key);
        async move {
            let op = ops[op];
            let kind = TYPES[ty];
            two_jobs(&q).await;
            let mut conn = q.connection();
            let original: Option<Vec<u8>> = redis::cmd("DUMP")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            let _: i64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            plant(&q, &key, kind).await;
            let before = common::keyspace(&q).await;
            let t = q.at(2_000);
            let got: Result<(), QueueError> = match op {
                "enqueue" => t
                    .enqueue("JOB-new", b"n", EnqueueOptions::default())
                    .await
                    .map(drop),
                "lease" => t.lease("w2", 100).await.map(drop),
                "complete" => t.complete("JOB-b", 1).await.map(drop),
                "fail" => t.fail("JOB-b", 1, 0).await.map(drop),
                "extend" => t.extend("JOB-b", 1, 100).await.map(drop),
                "reap" => t.reap(10).await.map(drop),
                "enqueue_batch" => t
                    .enqueue_batch(&[("JOB-new", b"n")], EnqueueOptions::default())
                    .await
                    .map(drop),
                "lease_batch" => t.lease_batch("w2", 100, 5).await.map(drop),
                "complete_batch" => t.complete_batch(&[("JOB-b", 1)]).await.map(drop),
                _ => t.fail_batch(&[("JOB-b", 1)], 0).await.map(drop),
            };
            let what = format!("{op} with {key} holding a {kind}");
            match (must_refuse, got) {
                (true, Err(e)) => {
                    assert_eq!(code(&e), "WRONGTYPE", "{what}: {e}");
                    assert!(e.to_string().contains(&key), "the error names the key: {e}");
                    assert_eq!(
                        common::keyspace(&q).await,
                        before,
                        "{what}: a refused call wrote"
                    );
                }
                (false, Ok(())) => {}
                (must_refuse, got) => {
                    panic!("{what}: refusal expected: {must_refuse}, got {got:?}")
                }
            }
            // Put the key back as it was; the queue must be whole.
            let _: i64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            if let Some(dump) = original {
                let _: () = redis::cmd("RESTORE")
                    .arg(&key)
                    .arg(0)
                    .arg(dump)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            structure_holds(&q, &what).await;
        }
    });
}

/// `lease` and `complete` check key types through the reads and the first
/// write they make anyway (redis.pcall, see the prelude), not by `TYPE`
/// up front: so every key each one writes, holding every other type, is
/// tried here (not a sample), and every pair of them holding a string. The
/// refusal is WRONGTYPE, names the first wrong key in the order an up-front
/// check takes them (the order below), and writes nothing.
async fn lease_and_complete_refuse_every_wrong_key_and_name_the_first_of_two(c: Ctx) {
    let q = c.queue.clone();
    let k = q.keys().clone();
    let ops: [(&str, Vec<(String, &str)>); 2] = [
        (
            "lease",
            vec![
                (k.pending.clone(), "zset"),
                (k.active.clone(), "zset"),
                (k.jobs.clone(), "hash"),
            ],
        ),
        (
            "complete",
            vec![(k.jobs.clone(), "hash"), (k.active.clone(), "zset")],
        ),
    ];
    let mut cases = 0;
    for (op, keys) in &ops {
        // (the keys planted, in the op's order; the type planted)
        let mut plans: Vec<(Vec<&String>, &str)> = Vec::new();
        for (key, right) in keys {
            for kind in TYPES.iter().filter(|t| *t != right) {
                plans.push((vec![key], kind));
            }
        }
        for i in 0..keys.len() {
            for j in i + 1..keys.len() {
                plans.push((vec![&keys[i].0, &keys[j].0], "string"));
            }
        }
        for (planted, kind) in plans {
            two_jobs(&q).await;
            let mut conn = q.connection();
            for key in &planted {
                let _: i64 = redis::cmd("DEL")
                    .arg(*key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                plant(&q, key, kind).await;
            }
            let before = common::keyspace(&q).await;
            let t = q.at(2_000);
            let got = match *op {
                "lease" => t.lease("w2", 100).await.map(drop),
                _ => t.complete("JOB-b", 1).await.map(drop),
            };
            let what = format!("{op} with {planted:?} holding a {kind}");
            let e = got.expect_err(&what);
            assert_eq!(code(&e), "WRONGTYPE", "{what}: {e}");
            assert!(
                e.to_string().contains(planted[0].as_str()),
                "{what}: the error names the first wrong key: {e}"
            );
            if let Some(second) = planted.get(1) {
                assert!(
                    !e.to_string().contains(second.as_str()),
                    "{what}: the error names the first wrong key only: {e}"
                );
            }
            assert_eq!(
                common::keyspace(&q).await,
                before,
                "{what}: a refused call wrote"
            );
            cases += 1;
        }
    }
    assert_eq!(
        cases,
        (3 * 5 + 3) + (2 * 5 + 1),
        "every key, every type, every pair"
    );
}

/// A lease makes its token from the job's attempts (the first word of its
/// state entry, `~ID` in the jobs column), read before any write;
/// a value no script writes (only another writer can leave one: not a whole
/// number in [0, 10^15)) is refused by `lease` and `lease_batch` alike,
/// naming the column and the job, and nothing is written.
async fn a_row_whose_attempts_is_not_a_count_is_refused_by_lease_before_any_write(c: Ctx) {
    let q = c.queue.clone();
    for bad in ["x", "1.5", "", "-1", "inf", "nan", "1000000000000000"] {
        for op in ["lease", "lease_batch"] {
            two_jobs(&q).await;
            let _: i64 = redis::cmd("HSET")
                .arg(&q.keys().jobs)
                .arg("~JOB-a")
                .arg(format!("{bad} pending"))
                .query_async(&mut q.connection())
                .await
                .unwrap();
            let before = common::keyspace(&q).await;
            let t = q.at(2_000);
            let got = match op {
                "lease" => t.lease("w2", 100).await.map(drop),
                _ => t.lease_batch("w2", 100, 5).await.map(drop),
            };
            let what = format!("{op} with attempts {bad:?}");
            let e = got.expect_err(&what);
            assert_eq!(code(&e), "ERR", "{what}: {e}");
            assert!(e.to_string().contains("is not a count"), "{what}: {e}");
            assert!(
                e.to_string().contains(&q.keys().jobs) && e.to_string().contains("JOB-a"),
                "{what}: the error names the column and the job: {e}"
            );
            assert_eq!(
                common::keyspace(&q).await,
                before,
                "{what}: a refused call wrote"
            );
        }
    }
}

/// `enqueue.lua` as it was before the key type check.
const ENQUEUE_UNTYPED: &str =
    include_str!(concat!(env!("OUT_DIR"), "/mutants/enqueue_untyped.lua"));

/// Why the check is there: the mutant writes the job, then meets WRONGTYPE
/// on the pending index, and the job stays behind with no index entry.
async fn without_the_type_check_a_wrongtype_leaves_a_row_without_its_index(c: Ctx) {
    let config = QueueConfig {
        scripts: Scripts::with_overrides(&[("enqueue", ENQUEUE_UNTYPED)]),
        ..QueueConfig::default()
    };
    let mutant = Queue::connect_with(&c.server.client(), &c.queue.keys().name, config)
        .await
        .unwrap()
        .at(1_000);
    mutant.clear().await.unwrap();
    plant(&mutant, &mutant.keys().pending, "string").await;
    let e = mutant
        .enqueue("JOB-1", b"p", EnqueueOptions::default())
        .await
        .unwrap_err();
    assert_eq!(code(&e), "WRONGTYPE", "{e}");
    let _: i64 = redis::cmd("DEL")
        .arg(&mutant.keys().pending)
        .query_async(&mut mutant.connection())
        .await
        .unwrap();
    let problems = mutant.snapshot().await.unwrap().structure_problems();
    assert_eq!(problems, ["JOB-1: state pending but in indexes []"]);
}

// --------------------------------------------------------------- ACLs

async fn a_user_who_may_not_run_scripts_or_touch_the_keys_gets_noperm_and_nothing_changes(c: Ctx) {
    let q = c.queue.at(1_000);
    two_jobs(&q).await;
    let mut conn = q.connection();
    // One user may do everything but run scripts; the other may run
    // scripts, but only on keys outside the queue's namespace.
    let users: [(&str, &[&str]); 2] = [
        ("noscripts", &["~*", "+@all", "-@scripting"]),
        ("elsewhere", &["~other:*", "+@all"]),
    ];
    for (user, rules) in users {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("reset")
            .arg("on")
            .arg(">pw")
            .arg(rules)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let before = common::keyspace(&q).await;
    for user in ["noscripts", "elsewhere"] {
        let url = format!("redis://{user}:pw@127.0.0.1:{}/", c.server.port());
        let client = redis::Client::open(url).unwrap();
        let limited = Queue::connect(&client, &q.keys().name)
            .await
            .unwrap_or_else(|e| panic!("{user} connects: {e}"))
            .at(1_000);
        let results: Vec<(&str, Result<(), QueueError>)> = vec![
            (
                "enqueue",
                limited
                    .enqueue("JOB-n", b"n", EnqueueOptions::default())
                    .await
                    .map(drop),
            ),
            ("lease", limited.lease("w2", 100).await.map(drop)),
            ("complete", limited.complete("JOB-b", 1).await.map(drop)),
            ("fail", limited.fail("JOB-b", 1, 0).await.map(drop)),
            ("extend", limited.extend("JOB-b", 1, 100).await.map(drop)),
            ("reap", limited.reap(10).await.map(drop)),
            ("snapshot", limited.snapshot().await.map(drop)),
        ];
        for (op, got) in results {
            let Err(e) = got else {
                panic!("{user} may not {op}, yet it worked");
            };
            assert_eq!(code(&e), "NOPERM", "{user} {op}: {e}");
            assert!(
                e.to_string().starts_with(op),
                "the error names the operation: {e}"
            );
        }
    }
    assert_eq!(common::keyspace(&q).await, before, "a refused call wrote");
    structure_holds(&q, "the refused calls").await;
}

// ------------------------------------------------------------- access

/// `CONFIG GET name` as one string.
async fn config(q: &Queue, name: &str) -> String {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(&mut q.connection())
        .await
        .unwrap();
    pair.get(1).cloned().unwrap_or_default()
}

async fn the_embedded_server_is_reachable_from_loopback_only(c: Ctx) {
    let bind = config(&c.queue, "bind").await;
    let protected = config(&c.queue, "protected-mode").await;
    match c.backend {
        // A process: bound to loopback, and protected mode refuses any
        // other client that would reach it without a password.
        Backend::Valkey | Backend::Redis7 => {
            let addrs: Vec<&str> = bind.split_whitespace().collect();
            assert!(
                !addrs.is_empty()
                    && addrs
                        .iter()
                        .all(|a| matches!(a.trim_start_matches('-'), "127.0.0.1" | "::1")),
                "bind {bind:?}"
            );
            assert_eq!(protected, "yes");
        }
        // A container: open inside its own network namespace (the port must
        // be reachable through Docker's proxy), published on the host's
        // loopback only.
        Backend::Container => {
            let id = c.server.container_id().expect("a container id");
            let out = std::process::Command::new("docker")
                .args(["port", &id])
                .output()
                .unwrap();
            let ports = String::from_utf8_lossy(&out.stdout).into_owned();
            let published: Vec<&str> = ports.lines().filter(|l| !l.trim().is_empty()).collect();
            assert!(!published.is_empty(), "docker port {id}: {ports:?}");
            for line in published {
                let host = line.rsplit_once(" -> ").map(|(_, h)| h).unwrap_or(line);
                assert!(
                    host.starts_with("127.0.0.1:"),
                    "published on {host}: {ports}"
                );
            }
        }
    }
}
