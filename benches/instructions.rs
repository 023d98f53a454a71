//! Instructions the server executes per job for each reference script, per
//! server, counted by callgrind: a figure that does not move with the
//! machine's load, where the wall-clock figures of `ackgap bench` on a
//! shared 2-core machine move by 2× from one day to the next. Beside them,
//! the same count for the peers of `ackgap bench`: a plain command, the
//! trivial script of the ceiling, and the `LMOVE` + `LREM` list pattern.
//!
//! Each server (Valkey 9.1 found as the tool finds it, Redis 7.0 as the test
//! matrix finds it) runs under `valgrind --tool=callgrind`; for each row the
//! counters are zeroed (`callgrind_control -z`), the calls are made one at a
//! time over one connection on the server clock, and the counters are
//! dumped (`callgrind_control -d`) (`ackgap::bench::callgrind::Traced`;
//! `ACKGAP_CALLGRIND_KEEP=DIR` keeps the dumps). A count covers everything the server did
//! for those calls: reading the request, the script, writing the reply.
//!
//! `cargo bench --bench instructions`: each row at a small queue (100 jobs:
//! the sorted sets and a hash below their listpack limits) and a large one
//! (10,000 jobs), batches of 100, on Valkey and Redis (`-- --sizes
//! 100,1000 --valkey-only` for a quicker run). Under `cargo test --benches` or nextest
//! `--all-targets`, a smoke run on Valkey (100 jobs per row, batches of 20)
//! that checks three claims: every batched script costs the server fewer
//! instructions per job than its single-job script; `complete_and_lease`
//! costs less than a lease and a complete; and the commands a batched
//! script runs per call do not grow with the batch (counted with `INFO
//! commandstats` at batches of 5 and 20). Needs valgrind: without it the
//! run fails when `CI=true` and is skipped with a message elsewhere.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ackgap::bench::callgrind::Traced;
use ackgap::queue::client::{EnqueueOptions, QueueConfig};
use ackgap::queue::scripts::PRELUDE;
use ackgap::queue::{Lease, Queue};

const OPTS: EnqueueOptions = EnqueueOptions {
    max_attempts: 1_000_000,
    delay_ms: 0,
};
const LEASE_MS: u64 = 600_000;
const NAME: &str = "instructions_per_job";

/// (row, instructions per job) for one server.
async fn measure(binary: &Path, jobs: usize, batch: usize) -> Vec<(&'static str, f64)> {
    let mut server = Traced::start(binary).expect("valgrind starts the server");
    let client = redis::Client::open(server.url()).expect("a client");
    // No response timeout: a server under callgrind on a loaded machine
    // takes seconds for a 10,000-element RPUSH.
    let mut conn = server
        .connect()
        .await
        .expect("the server under valgrind answers");
    let config = QueueConfig {
        response_timeout: Duration::from_secs(600),
        ..QueueConfig::default()
    };
    let queue = Queue::connect_with(&client, "instructions", config)
        .await
        .expect("the queue");
    // Loads the scripts (a library the first call loads), outside the counts.
    queue.snapshot().await.expect("a snapshot");
    let ids: Vec<(String, Vec<u8>)> = (0..jobs)
        .map(|i| (format!("JOB-{i:08}"), b"payload-16-bytes".to_vec()))
        .collect();
    let per_job = |n: u64| n as f64 / jobs as f64;
    let mut rows = Vec::new();

    let n = server
        .count(async {
            for _ in 0..jobs {
                let _: i64 = redis::cmd("INCR")
                    .arg("plain")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        })
        .await
        .expect("callgrind counts");
    rows.push(("plain INCR", per_job(n)));

    let incr = redis::Script::new("return redis.call('INCR', KEYS[1])");
    let _: i64 = incr.key("ceiling").invoke_async(&mut conn).await.unwrap();
    let n = server
        .count(async {
            for _ in 0..jobs {
                let _: i64 = incr.key("ceiling").invoke_async(&mut conn).await.unwrap();
            }
        })
        .await
        .expect("callgrind counts");
    rows.push(("ceiling: EVALSHA INCR", per_job(n)));

    let ids_only: Vec<&str> = ids.iter().map(|(id, _)| id.as_str()).collect();
    let _: i64 = redis::cmd("RPUSH")
        .arg("list:pending")
        .arg(&ids_only)
        .query_async(&mut conn)
        .await
        .unwrap();
    let n = server
        .count(async {
            for _ in 0..jobs {
                let id: String = redis::cmd("LMOVE")
                    .arg(&["list:pending", "list:processing", "LEFT", "RIGHT"])
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let _: i64 = redis::cmd("LREM")
                    .arg("list:processing")
                    .arg(1)
                    .arg(&id)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        })
        .await
        .expect("callgrind counts");
    rows.push(("lmove: LMOVE + LREM", per_job(n)));

    // The single-job scripts: enqueue, lease, complete, then the worker's
    // one-call loop on a second fill.
    let n = server
        .count(async {
            for (id, payload) in &ids {
                queue.enqueue(id, payload, OPTS).await.unwrap();
            }
        })
        .await
        .expect("callgrind counts");
    rows.push(("reference: enqueue", per_job(n)));
    let mut held: Vec<Lease> = Vec::new();
    let n = server
        .count(async {
            for _ in 0..jobs {
                held.push(queue.lease("w1", LEASE_MS).await.unwrap().unwrap());
            }
        })
        .await
        .expect("callgrind counts");
    rows.push(("reference: lease", per_job(n)));
    let n = server
        .count(async {
            for lease in &held {
                queue.complete(&lease.id, lease.token).await.unwrap();
            }
        })
        .await
        .expect("callgrind counts");
    rows.push(("reference: complete", per_job(n)));
    queue.clear().await.unwrap();
    for chunk in ids.chunks(1_000) {
        queue.enqueue_batch(chunk, OPTS).await.unwrap();
    }
    let mut next = queue.lease("w1", LEASE_MS).await.unwrap();
    let n = server
        .count(async {
            while let Some(lease) = next.take() {
                let answer = queue
                    .complete_and_lease(&lease.id, lease.token, "w1", LEASE_MS)
                    .await
                    .unwrap();
                answer.settled.unwrap();
                next = answer.next.unwrap();
            }
        })
        .await
        .expect("callgrind counts");
    // One lease was made before counting: jobs - 1 calls settled jobs - 1
    // jobs and leased jobs - 1 (the last call found none).
    rows.push((
        "reference: complete_and_lease",
        n as f64 / (jobs as f64 - 1.0),
    ));

    // The batched scripts.
    queue.clear().await.unwrap();
    let n = server
        .count(async {
            for chunk in ids.chunks(batch) {
                queue.enqueue_batch(chunk, OPTS).await.unwrap();
            }
        })
        .await
        .expect("callgrind counts");
    rows.push(("reference: enqueue_batch", per_job(n)));
    let mut held: Vec<Lease> = Vec::new();
    let n = server
        .count(async {
            for _ in 0..jobs.div_ceil(batch) {
                held.extend(
                    queue
                        .lease_batch("w1", LEASE_MS, batch as u64)
                        .await
                        .unwrap(),
                );
            }
        })
        .await
        .expect("callgrind counts");
    assert_eq!(held.len(), jobs, "every job leased");
    rows.push(("reference: lease_batch", per_job(n)));
    let pairs: Vec<(&str, u64)> = held.iter().map(|l| (l.id.as_str(), l.token)).collect();
    let n = server
        .count(async {
            for chunk in pairs.chunks(batch) {
                queue.complete_batch(chunk).await.unwrap();
            }
        })
        .await
        .expect("callgrind counts");
    rows.push(("reference: complete_batch", per_job(n)));
    let leased_and_completed = rows[rows.len() - 2].1 + rows[rows.len() - 1].1;
    rows.push((
        "reference: lease_batch + complete_batch",
        leased_and_completed,
    ));

    // Where a script's instructions go: an empty script, the prelude every
    // script starts with, and one redis.call, one argument check and one
    // number formatting inside a script (each: ten of them in one run, less
    // the run without them, over ten).
    let _: i64 = redis::cmd("HSET")
        .arg(&["row", "f", "v"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let with_prelude = |body: &str| format!("{PRELUDE}\n{body}");
    let empty = per_run(&mut server, &mut conn, "return 1", jobs).await;
    rows.push(("script: return 1", empty));
    let prelude = per_run(&mut server, &mut conn, &with_prelude("return 1"), jobs).await;
    rows.push(("script: the prelude, then return 1", prelude));
    for (row, base, body) in [
        (
            "script: one redis.call (HGET)",
            empty,
            "for i = 1, 10 do redis.call('HGET', KEYS[1], 'f') end return 1".to_string(),
        ),
        (
            "script: one emq_int (a 13-digit time)",
            prelude,
            with_prelude(
                "for i = 1, 10 do emq_int('1764420000000', 'now_ms', 0, EMQ_MAX_MS) end return 1",
            ),
        ),
        (
            "script: one emq_id (JOB-00000001)",
            prelude,
            with_prelude("for i = 1, 10 do emq_id('JOB-00000001') end return 1"),
        ),
        (
            "script: one emq_num (string.format)",
            prelude,
            with_prelude("for i = 1, 10 do emq_num(1764420000000 + i) end return 1"),
        ),
    ] {
        let n = per_run(&mut server, &mut conn, &body, jobs).await;
        rows.push((row, (n - base) / 10.0));
    }
    rows
}

/// Instructions per run of a one-key script (its key: `row`).
async fn per_run(
    server: &mut Traced,
    conn: &mut redis::aio::MultiplexedConnection,
    body: &str,
    runs: usize,
) -> f64 {
    let script = redis::Script::new(body);
    let _: i64 = script.key("row").invoke_async(conn).await.unwrap();
    let n = server
        .count(async {
            for _ in 0..runs {
                let _: i64 = script.key("row").invoke_async(conn).await.unwrap();
            }
        })
        .await
        .expect("callgrind counts");
    n as f64 / runs as f64
}

fn redis7_binary() -> PathBuf {
    std::env::var_os("ACKGAP_REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/redis-server"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        // The libtest listing nextest asks for: one benchmark, not ignored.
        if !args.iter().any(|a| a == "--ignored") {
            println!("{NAME}: benchmark");
        }
        return;
    }
    let full = args.iter().any(|a| a == "--bench");
    let has_valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_valgrind {
        if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
            panic!("valgrind is not installed (ci/install-valkey installs it)");
        }
        eprintln!("SKIPPED: valgrind is not installed");
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let valkey = ackgap::server::find_valkey_binary().expect("valkey-server");
    if !full {
        smoke(&runtime, &valkey);
        return;
    }
    let batch = 100;
    // `--sizes 100,1000` and `--valkey-only` make a quicker run (a server
    // under callgrind runs some 50 times slower).
    let sizes: Vec<usize> = args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
        .map(|list| {
            list.split(',')
                .map(|n| n.parse().expect("--sizes takes numbers, comma-separated"))
                .collect()
        })
        .unwrap_or_else(|| vec![100, 10_000]);
    let mut servers = vec![("Valkey 9.1", valkey), ("Redis 7.0", redis7_binary())];
    if args.iter().any(|a| a == "--valkey-only") {
        servers.truncate(1);
    }
    let mut columns = Vec::new();
    let mut names = Vec::new();
    for (name, binary) in &servers {
        for &jobs in &sizes {
            eprintln!(
                "{NAME}: {name} ({}) under callgrind, {jobs} jobs...",
                binary.display()
            );
            columns.push(runtime.block_on(measure(binary, jobs, batch)));
            names.push(format!("{name}, {jobs}"));
        }
    }
    println!(
        "server instructions per job (callgrind; one call at a time, batches of {batch}; \
         each column: server, jobs per row)\n"
    );
    print!("{:<44}", "row");
    for name in &names {
        print!("{name:>18}");
    }
    println!();
    for (i, (row, _)) in columns[0].iter().enumerate() {
        print!("{row:<44}");
        for column in &columns {
            print!("{:>18.0}", column[i].1);
        }
        println!();
    }
}

/// The three claims of the smoke run (see the module docs), on Valkey.
fn smoke(runtime: &tokio::runtime::Runtime, valkey: &Path) {
    let rows = runtime.block_on(measure(valkey, 100, 20));
    for (row, n) in &rows {
        eprintln!("{row:<44}{n:>12.0}");
    }
    let get = |name: &str| rows.iter().find(|(n, _)| *n == name).unwrap().1;
    for (single, batched) in [
        ("reference: enqueue", "reference: enqueue_batch"),
        ("reference: lease", "reference: lease_batch"),
        ("reference: complete", "reference: complete_batch"),
    ] {
        let (s, b) = (get(single), get(batched));
        assert!(
            b < s,
            "{batched} costs the server {b:.0} instructions per job, {single} {s:.0}: \
             batching should cost less per job"
        );
    }
    let (fused, two) = (
        get("reference: complete_and_lease"),
        get("reference: lease") + get("reference: complete"),
    );
    assert!(
        fused < two,
        "complete_and_lease costs the server {fused:.0} instructions per job, a lease and a \
         complete {two:.0}: one call should cost less than two"
    );
    let small = runtime.block_on(commands_per_call(valkey, 5));
    let large = runtime.block_on(commands_per_call(valkey, 20));
    assert_eq!(
        small, large,
        "commands per batched call at batches of 5 and of 20 (INFO commandstats): a batched \
         script's calls should not grow with the batch"
    );
    println!(
        "{NAME}: smoke run on Valkey, 100 jobs per row: batched rows cost less per job, \
         complete_and_lease less than lease + complete, and each batched script runs the same \
         commands per call at batches of 5 and 20: {small:?}"
    );
}

/// The commands (`INFO commandstats`, the `FCALL` itself left out) that
/// each batched script runs per call, at batches of `batch`: 40 jobs
/// enqueued, leased and completed in batches, on a server of its own.
async fn commands_per_call(binary: &Path, batch: usize) -> Vec<(&'static str, u64)> {
    let spec = ackgap::server::ServerSpec::Process(ackgap::server::ProcessOptions {
        binary: Some(binary.to_path_buf()),
    });
    let server = ackgap::server::Server::start(&spec, ackgap::server::Persistence::None)
        .await
        .expect("a server");
    let client = server.client();
    let queue = Queue::connect(&client, "commandstats")
        .await
        .expect("the queue");
    let mut conn = queue.connection();
    let jobs = 40;
    let ids: Vec<(String, Vec<u8>)> = (0..jobs)
        .map(|i| (format!("JOB-{i:08}"), b"payload".to_vec()))
        .collect();
    // Loads the library: its FUNCTION LOAD is not counted. And makes the
    // queue, with a job far in the future that no lease takes: a queue's
    // first enqueue also adds the placeholder of its active and dead
    // indexes (`emq_keep`, lua/prelude.lua), once in the queue's life.
    queue.snapshot().await.expect("a snapshot");
    let later = EnqueueOptions {
        max_attempts: 1,
        delay_ms: 3_600_000,
    };
    queue
        .enqueue("JOB-later", b"", later)
        .await
        .expect("the queue's first enqueue");
    let mut out = Vec::new();
    let mut held: Vec<Lease> = Vec::new();
    for op in ["enqueue_batch", "lease_batch", "complete_batch"] {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await
            .expect("CONFIG RESETSTAT");
        let mut calls = 0;
        match op {
            "enqueue_batch" => {
                for chunk in ids.chunks(batch) {
                    queue.enqueue_batch(chunk, OPTS).await.unwrap();
                    calls += 1;
                }
            }
            "lease_batch" => {
                for _ in 0..jobs / batch {
                    held.extend(
                        queue
                            .lease_batch("w1", LEASE_MS, batch as u64)
                            .await
                            .unwrap(),
                    );
                    calls += 1;
                }
                assert_eq!(held.len(), jobs, "every job leased");
            }
            _ => {
                let pairs: Vec<(&str, u64)> =
                    held.iter().map(|l| (l.id.as_str(), l.token)).collect();
                for chunk in pairs.chunks(batch) {
                    queue.complete_batch(chunk).await.unwrap();
                    calls += 1;
                }
            }
        }
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO commandstats");
        let inner: u64 = info
            .lines()
            .filter_map(|l| l.strip_prefix("cmdstat_"))
            .filter(|l| {
                !["fcall:", "config", "info:"]
                    .iter()
                    .any(|c| l.starts_with(c))
            })
            .filter_map(|l| {
                l.split([':', ','])
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .sum();
        out.push((op, inner / calls));
    }
    server.stop().await.expect("the server stops");
    out
}
