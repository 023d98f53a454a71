//! Power loss and clock jumps at the server level (`Server::power_loss`,
//! `Server::jump_clock`), each test asserting what Valkey documents against a
//! real valkey-server with the shim or libfaketime loaded.
//!
//! The writes are `RPUSH log i` one at a time, each acknowledged before the
//! next, so the list a restarted server holds says exactly which
//! acknowledged writes survived, and that they are a prefix of what was
//! written.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ackgap::server::{Instruments, Persistence, ProcessOptions, Server, ServerError, ServerSpec};
use redis::aio::MultiplexedConnection;

use crate::common::{self, redis_binary, unavailable, Backend};

const POWER: Instruments = Instruments {
    power_loss: true,
    clock: false,
};

const CLOCK: Instruments = Instruments {
    power_loss: false,
    clock: true,
};

fn valkey() -> ServerSpec {
    ServerSpec::Process(ProcessOptions { binary: None })
}

async fn start(persistence: Persistence, instruments: Instruments) -> Option<Server> {
    start_spec(&valkey(), persistence, instruments).await
}

/// `spec` started with `instruments`; `None` (unavailable, a failure in
/// CI) without a valkey-server binary.
async fn start_spec(
    spec: &ServerSpec,
    persistence: Persistence,
    instruments: Instruments,
) -> Option<Server> {
    match Server::start_instrumented(spec, persistence, instruments).await {
        Ok(server) => Some(server),
        Err(e @ ServerError::BinaryNotFound { .. }) => unavailable(Backend::Valkey, e),
        Err(e) => panic!("{spec} did not start with {instruments:?}: {e}"),
    }
}

async fn connect(server: &Server) -> MultiplexedConnection {
    server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// `RPUSH log i` for each i in `from..to`, each acknowledged before the next.
async fn push(con: &mut MultiplexedConnection, from: u64, to: u64) {
    for i in from..to {
        let _: u64 = redis::cmd("RPUSH")
            .arg("log")
            .arg(i)
            .query_async(con)
            .await
            .expect("an acknowledged RPUSH");
    }
}

/// The log a (restarted) server holds, checked to be a prefix of `0..written`;
/// returns its length.
async fn surviving_prefix(server: &Server, written: u64) -> u64 {
    let mut con = connect(server).await;
    let log: Vec<u64> = redis::cmd("LRANGE")
        .arg("log")
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await
        .expect("LRANGE");
    let expected: Vec<u64> = (0..log.len() as u64).collect();
    assert_eq!(
        log, expected,
        "what survived is not a prefix of what was written"
    );
    assert!(log.len() as u64 <= written);
    log.len() as u64
}

#[tokio::test]
async fn power_loss_under_aof_always_loses_no_acknowledged_write() {
    let Some(mut server) = start(Persistence::AofAlways, POWER).await else {
        return;
    };
    let mut con = connect(&server).await;
    push(&mut con, 0, 300).await;
    let loss = server.power_loss().await.expect("power loss");
    assert_eq!(surviving_prefix(&server, 300).await, 300, "{loss}");

    // Control: on the same server, writes made under `appendfsync no` are
    // never fsynced by Valkey, and the cut drops every one of them.
    let mut con = connect(&server).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendfsync")
        .arg("no")
        .query_async(&mut con)
        .await
        .expect("CONFIG SET appendfsync no");
    push(&mut con, 300, 400).await;
    let loss = server.power_loss().await.expect("power loss");
    assert_eq!(surviving_prefix(&server, 400).await, 300, "{loss}");
    assert!(loss.dropped_bytes > 0 && loss.files == 1, "{loss:?}");
}

/// Burst `first`, wait past everysec's fsync, burst `last`, then a power
/// loss (or, with `power` false, a kill -9) at once. Returns how many of the
/// last burst survived; asserts the first survived whole, as a prefix.
async fn everysec_round(power: bool, first: u64, last: u64) -> Option<u64> {
    let mut server = start(Persistence::AofEverysec, POWER).await?;
    let mut con = connect(&server).await;
    push(&mut con, 0, first).await;
    // Valkey fsyncs an everysec AOF at most a second after a write, and
    // also when idle: past 2 s the first burst is on disk.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    push(&mut con, first, first + last).await;
    if power {
        server.power_loss().await.expect("power loss");
    } else {
        server.restart().await.expect("kill -9 and restart");
    }
    let survived = surviving_prefix(&server, first + last).await;
    assert!(
        survived >= first,
        "the first burst, acknowledged more than 2 s before the cut, lost {} of {first} writes",
        first - survived
    );
    Some(survived - first)
}

#[tokio::test]
async fn power_loss_under_everysec_loses_only_the_last_seconds_writes() {
    // Three rounds side by side (three servers), bursts of different sizes.
    let rounds = [(200, 50), (100, 200), (300, 400)];
    let (a, b, c) = tokio::join!(
        everysec_round(true, 200, 50),
        everysec_round(true, 100, 200),
        everysec_round(true, 300, 400)
    );
    let mut lost_somewhere = false;
    for ((first, last), kept) in rounds.iter().zip([a, b, c]) {
        let Some(kept) = kept else { return };
        eprintln!(
            "everysec power loss: first burst {first} kept whole; last burst kept {kept} of {last}"
        );
        lost_somewhere |= kept < *last;
    }
    assert!(
        lost_somewhere,
        "no round lost an acknowledged write of the last burst: the cut dropped nothing"
    );
}

#[tokio::test]
async fn kill_9_under_everysec_keeps_a_prefix_and_the_first_burst_the_page_cache_keeps_it() {
    // The control of the test above: the same rounds with kill -9 (the shim
    // loaded, but never signalled). The page cache keeps what Valkey wrote,
    // so the first burst (written and synced 2.5 s before) survives whole
    // and what survives is a prefix (`everysec_round` asserts both). The
    // last burst is not asserted whole: under a busy disk Valkey postpones
    // the AOF write itself behind an fsync still running, up to 2 s, while
    // the replies have gone out (aof.c: "Asynchronous AOF fsync is taking
    // too long"), and a kill -9 then loses what was still in its buffer:
    // CI met this once (1 of 50 kept) with every test running at once.
    let (a, b) = tokio::join!(
        everysec_round(false, 200, 50),
        everysec_round(false, 300, 400)
    );
    for (last, kept) in [(50, a), (400, b)] {
        let Some(kept) = kept else { return };
        eprintln!("everysec kill -9: last burst kept {kept} of {last}");
    }
}

#[tokio::test]
async fn power_loss_without_aof_loses_everything_since_the_last_save() {
    let Some(mut server) = start(Persistence::None, POWER).await else {
        return;
    };
    let mut con = connect(&server).await;
    push(&mut con, 0, 100).await;
    let _: () = redis::cmd("SAVE")
        .query_async(&mut con)
        .await
        .expect("SAVE");
    push(&mut con, 100, 200).await;
    let loss = server.power_loss().await.expect("power loss");
    assert_eq!(surviving_prefix(&server, 200).await, 100, "{loss}");
    // The SAVE fsynced dump.rdb before its rename: nothing of it was cut.
    assert_eq!(loss.dropped_bytes, 0, "{loss:?}");

    // Control: a kill -9 loses the same (nothing but the save was written).
    let mut con = connect(&server).await;
    push(&mut con, 100, 200).await;
    server.restart().await.expect("kill -9 and restart");
    assert_eq!(surviving_prefix(&server, 200).await, 100);
}

#[tokio::test]
async fn a_torn_last_command_still_loads_with_aof_load_truncated() {
    let Some(mut server) = start(Persistence::AofAlways, POWER).await else {
        return;
    };
    let mut con = connect(&server).await;
    push(&mut con, 0, 50).await;
    server.power_cut().await.expect("power cut");
    // Tear the last command: a cut in the middle of its write.
    let dir = server.data_dir().unwrap().join("appendonlydir");
    let incr = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .max()
        .expect("an incr AOF file");
    let len = std::fs::metadata(&incr).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&incr)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    server.restart().await.expect("the torn AOF loads");
    assert_eq!(surviving_prefix(&server, 50).await, 49);
    let log = std::fs::read_to_string(server.data_dir().unwrap().join("server.log")).unwrap();
    assert!(
        log.contains("aof-load-truncated is enabled"),
        "the server did not say it loaded a truncated AOF:\n{log}"
    );
}

#[tokio::test]
async fn power_loss_needs_the_shim_loaded_at_start() {
    let Some(mut server) = start(Persistence::AofAlways, Instruments::default()).await else {
        return;
    };
    let err = server.power_loss().await.unwrap_err().to_string();
    assert!(err.contains("power_loss: true"), "{err}");
    let err = server.jump_clock(1000).unwrap_err().to_string();
    assert!(err.contains("clock: true"), "{err}");
    // Where the instruments do not load, they are refused before a start:
    // off a URL (no server of ours).
    for (spec, instruments) in [
        ("redis://127.0.0.1:1/", POWER),
        ("redis://127.0.0.1:1/", CLOCK),
    ] {
        let spec: ServerSpec = spec.parse().unwrap();
        let err = Server::start_instrumented(&spec, Persistence::None, instruments)
            .await
            .unwrap_err();
        assert!(matches!(err, ServerError::Unsupported { .. }), "{err:?}");
    }
}

// ---------------------------------------------------------------------------
// Clock jumps.

/// The server's clock minus ours, in ms, with the uncertainty of the reading
/// (the call's round trip). `script` reads it inside a script.
async fn skew_ms(con: &mut MultiplexedConnection, script: bool) -> (f64, f64) {
    let before = Instant::now();
    let cmd = if script {
        let mut c = redis::cmd("EVAL");
        c.arg("return redis.call('TIME')").arg(0);
        c
    } else {
        redis::cmd("TIME")
    };
    let time: (String, String) = cmd.query_async(con).await.expect("TIME");
    let ours = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let rtt = before.elapsed().as_secs_f64() * 1000.0;
    let theirs = time.0.parse::<f64>().unwrap() * 1000.0 + time.1.parse::<f64>().unwrap() / 1000.0;
    (theirs - ours.as_secs_f64() * 1000.0, rtt)
}

#[tokio::test]
async fn jump_clock_moves_time_and_a_scripts_time_by_the_amount_asked() {
    let Some(mut server) = start(Persistence::None, CLOCK).await else {
        return;
    };
    // The four jumps add up to nothing: the clock is back on time.
    jumps_move_time_by_the_amount_asked(&mut server, &[3_600_000, -7_200_000, 90_500, 3_509_500])
        .await;
}

/// The same on the container backend: libfaketime and its control
/// directory bind-mounted, the host renaming each new offset into it.
#[tokio::test]
async fn a_container_s_time_and_a_script_s_time_jump_by_the_amount_asked() {
    if !common::containers_here() {
        return;
    }
    let Some(mut server) = start_spec(&ServerSpec::Container, Persistence::None, CLOCK).await
    else {
        return;
    };
    jumps_move_time_by_the_amount_asked(&mut server, &[3_600_000, -3_600_000]).await;
    server.stop().await.unwrap();
}

/// Each of `deltas` (adding up to 0), jumped on `server`, moves `TIME` and
/// a script's `TIME` by that much within 10 ms and the calls' round trips;
/// the server's offset is then back to 0.
async fn jumps_move_time_by_the_amount_asked(server: &mut Server, deltas: &[i64]) {
    let mut con = connect(server).await;
    for script in [false, true] {
        for &delta in deltas {
            let (skew0, rtt0) = skew_ms(&mut con, script).await;
            let offset = server.jump_clock(delta).expect("jump");
            // Valkey 9.1 shows a jump within a millisecond (measured 0.1 to
            // 0.8 ms): the 10 ms the claim allows.
            tokio::time::sleep(Duration::from_millis(10)).await;
            let (skew1, rtt1) = skew_ms(&mut con, script).await;
            let error = (skew1 - skew0 - delta as f64).abs();
            assert!(
                error <= 10.0 + rtt0 + rtt1,
                "script {script}: asked {delta} ms, the server's clock moved {} ms",
                skew1 - skew0
            );
            assert_eq!(server.clock_offset_ms(), Some(offset));
        }
    }
    assert_eq!(server.clock_offset_ms(), Some(0));
}

#[tokio::test]
async fn a_px_expiry_follows_a_forward_jump() {
    let Some(mut server) = start(Persistence::None, CLOCK).await else {
        return;
    };
    let mut con = connect(&server).await;
    for (key, ms) in [("short", 60_000), ("long", 600_000)] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("v")
            .arg("PX")
            .arg(ms)
            .query_async(&mut con)
            .await
            .unwrap();
    }
    let exists = |con: &mut MultiplexedConnection, key: &'static str| {
        let mut con = con.clone();
        async move {
            redis::cmd("EXISTS")
                .arg(key)
                .query_async::<u64>(&mut con)
                .await
                .unwrap()
        }
    };
    assert_eq!(exists(&mut con, "short").await, 1);
    server.jump_clock(120_000).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        exists(&mut con, "short").await,
        0,
        "a 60 s key outlived a 120 s jump"
    );
    // Control: a 10 minute key outlives it.
    assert_eq!(exists(&mut con, "long").await, 1);
}

#[tokio::test]
async fn redis7_is_refused_a_jumpable_clock_with_the_reason() {
    if !redis_binary().exists() {
        unavailable(Backend::Redis7, "redis-server not installed");
        return;
    }
    let spec = ServerSpec::Process(ProcessOptions {
        binary: Some(redis_binary()),
    });
    let err = Server::start_instrumented(&spec, Persistence::None, CLOCK)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("hangs at start under") && err.contains("libfaketime"),
        "{err}"
    );
    // Control: the power-loss shim alone is fine on Redis 7.0.
    let mut server = Server::start_instrumented(&spec, Persistence::AofAlways, POWER)
        .await
        .expect("redis 7.0 starts with the power-loss shim");
    let mut con = connect(&server).await;
    push(&mut con, 0, 20).await;
    server.power_loss().await.expect("power loss on redis 7.0");
    assert_eq!(surviving_prefix(&server, 20).await, 20);
}

// The same faults at the chaos level: `ackgap chaos --faults power-loss`
// and `--faults clock-jump` on the reference queue, as a user runs them.

/// `ackgap chaos ARGS` on the process backend for 3 s and 120 jobs (the
/// drain under `always` settles about a hundred a second here), its files
/// in `dir`.
fn chaos(dir: &std::path::Path, seed: u64, args: &[&str]) -> std::process::Output {
    let history = dir.join(format!("chaos-{seed}.jsonl"));
    std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(["chaos", "--duration", "3s", "--jobs", "120", "--seed"])
        .arg(seed.to_string())
        .arg("--history")
        .arg(&history)
        .args(args)
        .current_dir(dir)
        .env_remove("ACKGAP_SERVER")
        .output()
        .expect("run ackgap")
}

fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The JSON report of a `--json` chaos run.
fn report(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", output_text(out)))
}

/// `ackgap chaos --faults power-loss --persistence everysec ARGS` for
/// seeds 1..=`seeds` (each in `dir`), until one loses an acknowledged job:
/// that run exits 1 and names the power loss as what can lose writes.
/// Panics, naming `what`, if no seed loses one.
fn power_loss_loses_for_some_seed(dir: &std::path::Path, args: &[&str], seeds: u64, what: &str) {
    let everysec = ["--faults", "power-loss", "--persistence", "everysec"];
    for seed in 1..=seeds {
        let out = chaos(dir, seed, &[&everysec[..], args].concat());
        let text = output_text(&out);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "seed {seed}: {text}"
        );
        if text.lines().any(|l| l.starts_with("lost (")) {
            assert_eq!(out.status.code(), Some(1), "seed {seed}: {text}");
            assert!(
                text.contains("fired, and can lose acknowledged writes: power-loss ×"),
                "seed {seed}: {text}"
            );
            return;
        }
    }
    panic!("no seed of 1..={seeds} lost an acknowledged job to {what}");
}

/// `ackgap chaos --faults power-loss --persistence always --json ARGS` of
/// `seed`, in a directory of its own: the power went out and no
/// acknowledged job was lost (exit 0).
fn power_loss_under_always_loses_nothing(args: &[&str], seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let always = [
        "--faults",
        "power-loss",
        "--persistence",
        "always",
        "--json",
    ];
    let out = chaos(dir.path(), seed, &[&always[..], args].concat());
    let report = report(&out);
    assert!(
        report["fired"]["power-loss"].as_u64() >= Some(1),
        "seed {seed}: the power never went out: {report:#}"
    );
    assert_eq!(report["lost"], serde_json::json!([]), "seed {seed}");
    assert_eq!(out.status.code(), Some(0), "seed {seed}: {report:#}");
}

#[test]
fn chaos_power_loss_under_everysec_loses_acknowledged_jobs_for_some_seed_naming_the_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    power_loss_loses_for_some_seed(dir.path(), &[], 4, "a power loss under everysec");
}

#[test]
fn chaos_power_loss_under_always_loses_no_acknowledged_job() {
    for seed in 1..=2 {
        power_loss_under_always_loses_nothing(&[], seed);
    }
}

/// `ackgap chaos --faults clock-jump --json ARGS` of seed 1: the clock
/// jumped and the reference queue broke no safety invariant (exit 0).
/// Answers the jumps the history records, forward (the injects') and back
/// (the heals', or their alignments').
fn clock_jump_holds_every_safety_invariant(args: &[&str]) -> Vec<i64> {
    let dir = tempfile::tempdir().unwrap();
    let jump = ["--faults", "clock-jump", "--persistence", "none", "--json"];
    let out = chaos(dir.path(), 1, &[&jump[..], args].concat());
    let report = report(&out);
    assert!(
        report["fired"]["clock-jump"].as_u64() >= Some(1),
        "the clock never jumped: {report:#}"
    );
    for invariant in report["invariants"].as_array().unwrap() {
        if invariant["invariant"] != "liveness" {
            assert_ne!(invariant["verdict"], "invalid", "{invariant:#}");
        }
        // Every answered lease reads the server's time after it: leases
        // are judged against each other across the jumps, except those
        // whose time a jump or its heal may have skewed.
        if invariant["invariant"] == "lease-exclusive" {
            assert!(
                invariant["counts"]["judged"].as_u64() > Some(0),
                "{invariant:#}"
            );
        }
    }
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let history = std::fs::read_to_string(dir.path().join("chaos-1.jsonl")).unwrap();
    history
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["value"]["fault"] == "clock-jump")
        .flat_map(|e| {
            let v = &e["value"];
            let aligned = v["aligned"].as_array().cloned().unwrap_or_default();
            v["hit"]["jumped_ms"]
                .as_i64()
                .or(v["jumped_ms"].as_i64())
                .into_iter()
                .chain(aligned.iter().filter_map(|a| a["jumped_ms"].as_i64()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn chaos_clock_jump_on_the_reference_queue_holds_every_safety_invariant() {
    // Each jump forward is undone by its heal: the history says by how much.
    let jumps = clock_jump_holds_every_safety_invariant(&[]);
    assert!(jumps.iter().any(|&j| j > 0), "{jumps:?}");
    assert!(jumps.iter().any(|&j| j < 0), "{jumps:?}");
}

/// `--server container --faults clock-jump`: the same on a container.
#[test]
fn chaos_clock_jump_of_a_container_holds_every_safety_invariant_of_the_reference_queue() {
    if !common::containers_here() {
        return;
    }
    let jumps = clock_jump_holds_every_safety_invariant(&["--server", "container"]);
    assert!(jumps.iter().any(|&j| j > 0), "{jumps:?}");
    assert!(jumps.iter().any(|&j| j < 0), "{jumps:?}");
}

/// `--server container-cluster:3x1 --faults clock-jump`: the same on a
/// cluster of containers, libfaketime bind-mounted into every node.
#[test]
fn chaos_clock_jump_of_a_container_cluster_s_primary_holds_every_safety_invariant_of_the_reference_queue(
) {
    if !common::containers_here() {
        return;
    }
    let jumps = clock_jump_holds_every_safety_invariant(&["--server", "container-cluster:3x1"]);
    let forward: i64 = jumps.iter().filter(|&&j| j > 0).sum();
    let back: i64 = jumps.iter().filter(|&&j| j < 0).sum();
    assert!(forward > 0, "{jumps:?}");
    assert_eq!(forward, -back, "{jumps:?}");
}

/// `--server cluster:3x1 --faults clock-jump`: the queue's primary's clock
/// jumps alone and every clock is set back at the heal; the reference
/// queue holds every safety invariant, and each jump back undoes one
/// forward.
#[test]
fn chaos_clock_jump_of_a_cluster_s_primary_holds_every_safety_invariant_of_the_reference_queue() {
    let jumps = clock_jump_holds_every_safety_invariant(&["--server", "cluster:3x1"]);
    let forward: i64 = jumps.iter().filter(|&&j| j > 0).sum();
    let back: i64 = jumps.iter().filter(|&&j| j < 0).sum();
    assert!(forward > 0, "{jumps:?}");
    assert_eq!(forward, -back, "{jumps:?}");
}

/// `ackgap chaos --server replicated:2 --faults power-loss`: every node
/// loses power at once. Under `everysec` the writes `WAIT 1` confirmed
/// (a replica holds them in memory) are lost for some seed, the run
/// naming the power loss; under `always` (the primary fsyncs before it
/// answers) none is.
#[test]
fn chaos_power_loss_of_a_replicated_set_loses_what_wait_confirmed_and_nothing_under_always() {
    let dir = tempfile::tempdir().unwrap();
    let wait = ["--server", "replicated:2", "--durability", "wait:1"];
    power_loss_loses_for_some_seed(
        dir.path(),
        &wait,
        3,
        "a power loss of every node, WAIT 1 confirmed",
    );
    power_loss_under_always_loses_nothing(&["--server", "replicated:2"], 1);
}

/// `ackgap chaos --server cluster:3x0 --faults power-loss`: the second
/// power loss of the run finds nodes that rewrote `nodes.conf` without an
/// fsync; the run stops there (exit 69, nothing judged), naming the fault,
/// the nodes and `nodes.conf`, with a line that reproduces it, and its
/// history so far is kept.
#[test]
fn chaos_power_loss_of_a_cluster_stops_at_the_nodes_that_forgot_the_cluster_judging_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--server",
        "cluster:3x0",
        "--faults",
        "power-loss",
        "--persistence",
        "always",
    ];
    let out = chaos(dir.path(), 1, &args);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(69), "{text}");
    assert!(
        text.contains("fault power-loss (scheduled at")
            && text.contains("came back as new nodes that know only themselves")
            && text.contains("nodes.conf empty")
            && text.contains("nothing is judged"),
        "{text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("valid") || l.starts_with("invalid")),
        "a verdict: {text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("rerun: ") && l.contains("--server cluster:3x0")),
        "{text}"
    );
    let history = std::fs::read_to_string(dir.path().join("chaos-1.jsonl")).unwrap();
    assert!(history.contains("\"fault\":\"power-loss\""), "{history}");
}

/// On the container backend the shim is bind-mounted and the cut goes
/// through `docker kill --signal`: under `everysec` some seed loses
/// acknowledged jobs, naming the power loss; under `always` none is lost.
#[test]
fn chaos_power_loss_on_a_container_loses_under_everysec_and_nothing_under_always() {
    if !common::containers_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let container = ["--server", "container"];
    power_loss_loses_for_some_seed(
        dir.path(),
        &container,
        4,
        "a container's power loss under everysec",
    );
    power_loss_under_always_loses_nothing(&container, 1);
}

/// `--server container-replicated:2`: every container loses power at once
/// (the shim bind-mounted into each). Under `everysec` some seed loses
/// acknowledged jobs, naming the power loss. Under `always` nothing is
/// lost, also when the power goes out after a failover made another node
/// primary (its container was created with `--replicaof` the first one:
/// the power-on must bring it back as the primary, not as that replica).
#[test]
fn chaos_power_loss_of_a_container_replicated_set_loses_under_everysec_and_nothing_under_always_after_a_failover(
) {
    if !common::containers_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let set = ["--server", "container-replicated:2"];
    power_loss_loses_for_some_seed(
        dir.path(),
        &set,
        3,
        "a power loss of every container of a replicated set",
    );
    let dir = tempfile::tempdir().unwrap();
    let out = chaos(
        dir.path(),
        1,
        &[
            &set[..],
            &[
                "--faults",
                "failover,power-loss",
                "--persistence",
                "always",
                "--json",
            ],
        ]
        .concat(),
    );
    let report = report(&out);
    // Seed 1 draws a failover first, then power losses.
    let history = std::fs::read_to_string(dir.path().join("chaos-1.jsonl")).unwrap();
    let fired: Vec<serde_json::Value> = history
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["value"]["action"] == "fired")
        .map(|e| e["value"].clone())
        .collect();
    let failover = fired.iter().position(|v| v["fault"] == "failover");
    let power = fired.iter().rposition(|v| v["fault"] == "power-loss");
    assert!(
        matches!((failover, power), (Some(f), Some(p)) if f < p),
        "no power loss after a failover: {fired:#?}"
    );
    assert_eq!(report["lost"], serde_json::json!([]), "{report:#}");
    assert_eq!(out.status.code(), Some(0), "{report:#}");
}

#[test]
fn chaos_refuses_clock_jump_on_a_container_set_and_on_redis7_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = chaos(
        dir.path(),
        1,
        &[
            "--faults",
            "clock-jump",
            "--server",
            "container-replicated:1",
        ],
    );
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(64), "{text}");
    assert!(
        text.contains("libfaketime") && text.contains("use --server process, container, cluster"),
        "{text}"
    );
    if !redis_binary().exists() {
        unavailable(Backend::Redis7, "redis-server not installed");
        return;
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(["chaos", "--duration", "1s", "--jobs", "10"])
        .args(["--faults", "clock-jump", "--persistence", "none"])
        .current_dir(dir.path())
        .env_remove("ACKGAP_SERVER")
        .env("ACKGAP_VALKEY_SERVER", redis_binary())
        .output()
        .expect("run ackgap");
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(69), "{text}");
    assert!(text.contains("hangs at start under it"), "{text}");
    // Refused before a run directory (or `latest`) was made.
    let made: Vec<_> = std::fs::read_dir(dir.path().join("target/ackgap/chaos"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(made.is_empty(), "{made:?}: {text}");
}

/// `RPUSH log i` then `WAITAOF 1 0 1000` on the same connection: the
/// number of local fsyncs `WAITAOF` confirmed (0 or 1).
async fn push_waitaof(con: &mut MultiplexedConnection, i: u64) -> u64 {
    let _: u64 = redis::cmd("RPUSH")
        .arg("log")
        .arg(i)
        .query_async(con)
        .await
        .expect("an acknowledged RPUSH");
    let acks: (u64, u64) = redis::cmd("WAITAOF")
        .arg(1)
        .arg(0)
        .arg(1000)
        .query_async(con)
        .await
        .expect("WAITAOF");
    acks.0
}

/// A finding about the server, not the queue: `WAITAOF 1 0` promises that
/// the client's writes "are acknowledged as having been fsynced to the AOF
/// of the local" server, but under `appendfsync everysec` Valkey 9.1.2
/// answers 1 for a write that no fsync has reached (its fsync runs once a
/// second, after the answer; the bug redis/redis#13793 fixed in Redis).
/// Write 0 comes after a second of quiet, so its own fsync is due; write 1
/// comes at once, a second before the next fsync may run, and the power
/// loss right after it drops the write `WAITAOF` confirmed. (A round whose
/// cut came more than half a second after write 1's answer proves nothing
/// and is run again, three at most.)
#[tokio::test]
async fn valkey_9_1_s_waitaof_under_everysec_confirms_a_local_fsync_that_a_power_loss_then_drops() {
    for round in 0..3 {
        let Some(mut server) = start(Persistence::AofEverysec, POWER).await else {
            return;
        };
        let mut con = connect(&server).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(push_waitaof(&mut con, 0).await, 1, "write 0 confirmed");
        assert_eq!(push_waitaof(&mut con, 1).await, 1, "write 1 confirmed");
        let confirmed = Instant::now();
        let loss = server.power_cut().await.expect("power cut");
        let took = confirmed.elapsed();
        server.power_on().await.expect("power on");
        let kept = surviving_prefix(&server, 2).await;
        server.stop().await.unwrap();
        if took > Duration::from_millis(500) {
            eprintln!("round {round}: the cut came {took:?} after the answer; again");
            continue;
        }
        assert!(
            kept < 2,
            "WAITAOF 1 0 confirmed both writes and both survived the cut ({loss}): \
             the server fsyncs before it confirms; this finding no longer holds"
        );
        return;
    }
    panic!("no round cut the power within 500 ms of WAITAOF's answer");
}

/// The replicated topology of processes, each node with the shim.
async fn start_replicated(persistence: Persistence) -> Option<Server> {
    start_spec(&"replicated:1".parse().unwrap(), persistence, POWER).await
}

#[tokio::test]
async fn power_loss_of_every_node_of_a_replicated_set_under_always_loses_no_acknowledged_write() {
    let Some(mut server) = start_replicated(Persistence::AofAlways).await else {
        return;
    };
    let mut con = connect(&server).await;
    push(&mut con, 0, 200).await;
    let loss = server.power_loss().await.expect("power loss of every node");
    assert_eq!(surviving_prefix(&server, 200).await, 200, "{loss}");
    // Control: writes the primary never fsyncs (`appendfsync no`) are
    // dropped by the cut, though the replica fsynced them under `always`:
    // it resyncs from what the primary kept.
    let mut con = connect(&server).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendfsync")
        .arg("no")
        .query_async(&mut con)
        .await
        .expect("CONFIG SET appendfsync no");
    push(&mut con, 200, 300).await;
    let loss = server.power_loss().await.expect("power loss of every node");
    assert!(loss.dropped_bytes > 0, "{loss:?}");
    assert_eq!(surviving_prefix(&server, 300).await, 200, "{loss}");
    // The replica resynced from the primary: it holds the same log.
    let replica = *server.node_ports().last().expect("a replica");
    let mut rcon = redis::Client::open(format!("redis://127.0.0.1:{replica}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("the replica answers");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let len: u64 = redis::cmd("LLEN")
            .arg("log")
            .query_async(&mut rcon)
            .await
            .unwrap();
        if len == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the replica holds {len} of 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await.unwrap();
}

/// A cluster of processes with the power-loss shim in every node.
async fn start_cluster(persistence: Persistence) -> Option<Server> {
    start_spec(&"cluster:3x0".parse().unwrap(), persistence, POWER).await
}

/// A connection to the node that serves the key `log` (the others answer
/// `MOVED`).
async fn owner_of_log(server: &Server) -> MultiplexedConnection {
    for client in server.node_clients() {
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .expect("a node answers");
        let owns: redis::RedisResult<u64> =
            redis::cmd("LLEN").arg("log").query_async(&mut con).await;
        if owns.is_ok() {
            return con;
        }
    }
    panic!("no node serves the key log");
}

/// Writes 0..200 to `log` on the node that serves it, cuts the power of
/// every node and starts them again, and asserts every write came back.
async fn power_loss_keeps_every_acknowledged_write(server: &mut Server) {
    let mut con = owner_of_log(server).await;
    push(&mut con, 0, 200).await;
    let loss = server.power_loss().await.expect("power loss of every node");
    let mut con = owner_of_log(server).await;
    let log: Vec<u64> = redis::cmd("LRANGE")
        .arg("log")
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await
        .expect("LRANGE");
    assert_eq!(log, (0..200).collect::<Vec<u64>>(), "{loss}");
}

/// A power loss that must find nodes that came back as new ones: its
/// error names `nodes.conf`, and names the first node exactly when that
/// node knows only itself.
async fn power_loss_names_the_nodes_that_forgot_the_cluster(server: &mut Server) {
    let e = server
        .power_loss()
        .await
        .expect_err("every node kept its nodes.conf through the power loss");
    let text = e.to_string();
    assert!(
        text.contains("came back as new nodes") && text.contains("nodes.conf empty"),
        "{text}"
    );
    let first = server.node_clients()[0].clone();
    let named = text.contains(&first.get_connection_info().addr().to_string());
    let mut con = first.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut con)
        .await
        .unwrap();
    let alone = info.contains("cluster_known_nodes:1");
    assert_eq!(named, alone, "{text}\n{info}");
}

/// Every node of a cluster loses power at once under `always`: every
/// acknowledged write survives on the node that serves it, and every node
/// comes back as itself (the cut found each `nodes.conf` as the cluster's
/// build fsynced it).
#[tokio::test]
async fn power_loss_of_every_node_of_a_cluster_under_always_loses_no_acknowledged_write() {
    let Some(mut server) = start_cluster(Persistence::AofAlways).await else {
        return;
    };
    power_loss_keeps_every_acknowledged_write(&mut server).await;
    server.stop().await.unwrap();
}

/// What a second power loss finds: a restarted node rewrites its
/// `nodes.conf` as it hears from the others, without an fsync
/// (`clusterSaveConfig(0)`), so the cut leaves it empty and the node
/// comes back as a new node knowing only itself. The power-on says so,
/// naming the nodes and `nodes.conf`, instead of answering that the
/// cluster is back.
#[tokio::test]
async fn a_cluster_node_whose_nodes_conf_a_power_loss_emptied_is_named_not_counted_as_back() {
    let Some(mut server) = start_cluster(Persistence::AofAlways).await else {
        return;
    };
    server.power_loss().await.expect("the first power loss");
    power_loss_names_the_nodes_that_forgot_the_cluster(&mut server).await;
    server.stop().await.unwrap();
}

/// `container-cluster:3x0`, the shim bind-mounted into every node and each
/// cut through `docker kill --signal`: under `always` every acknowledged
/// write survives a power loss of every container and each node comes
/// back as itself; a second power loss finds the `nodes.conf` the
/// restarted nodes rewrote without an fsync, and names the nodes that
/// came back as new ones, as on processes.
#[tokio::test]
async fn power_loss_of_every_container_of_a_cluster_keeps_what_always_acknowledged_and_names_the_nodes_that_forgot_the_cluster(
) {
    if !common::containers_here() {
        return;
    }
    let spec: ServerSpec = "container-cluster:3x0".parse().unwrap();
    let mut server = Server::start_instrumented(&spec, Persistence::AofAlways, POWER)
        .await
        .expect("a cluster of containers starts with the shim");
    power_loss_keeps_every_acknowledged_write(&mut server).await;
    power_loss_names_the_nodes_that_forgot_the_cluster(&mut server).await;
    server.stop().await.unwrap();
}

/// On a replicated set started with libfaketime in every node, a jump of
/// the replicas' clocks moves each replica's `TIME` by the amount asked and
/// leaves the primary's alone; aligning puts every clock back.
#[tokio::test]
async fn a_replica_s_clock_jumps_apart_from_its_primary_s_and_aligns_back() {
    let replicated = "replicated:1".parse().unwrap();
    let Some(mut server) = start_spec(&replicated, Persistence::None, CLOCK).await else {
        return;
    };
    let ports = server.node_ports();
    let mut nodes = Vec::new();
    for port in &ports {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        nodes.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    let delta = 5_000_i64;
    let mut before = Vec::new();
    for con in &mut nodes {
        before.push(skew_ms(con, false).await);
    }
    let jumped = server
        .jump_replica_clocks(delta)
        .await
        .expect("jump the replica");
    assert_eq!(jumped.len(), 1, "{jumped:?}");
    assert_eq!(jumped[0].1, delta, "{jumped:?}");
    tokio::time::sleep(Duration::from_millis(10)).await;
    for (i, con) in nodes.iter_mut().enumerate() {
        let (skew, rtt) = skew_ms(con, false).await;
        let moved = skew - before[i].0;
        let expected = if i == 0 { 0.0 } else { delta as f64 };
        assert!(
            (moved - expected).abs() <= 10.0 + rtt + before[i].1,
            "node {} (primary first): moved {moved} ms, expected {expected}",
            ports[i]
        );
    }
    let aligned = server.align_clocks().expect("align");
    assert_eq!(aligned.len(), 1, "{aligned:?}");
    assert_eq!(aligned[0].1, -delta, "{aligned:?}");
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (skew, rtt) = skew_ms(&mut nodes[1], false).await;
    assert!(
        (skew - before[1].0).abs() <= 10.0 + rtt + before[1].1,
        "the replica is {} ms off after the alignment",
        skew - before[1].0
    );
    server.stop().await.unwrap();
}

/// On a cluster started with libfaketime in every node, a jump of the
/// queue's primary's clock moves the `TIME` of the node that serves the
/// focus key by the amount asked and no other node's; aligning puts it
/// back.
#[tokio::test]
async fn a_cluster_primary_s_clock_jumps_alone_and_aligns_back() {
    let cluster = "cluster:3x0".parse().unwrap();
    let Some(mut server) = start_spec(&cluster, Persistence::None, CLOCK).await else {
        return;
    };
    server.focus("log");
    let clients = server.node_clients();
    let mut nodes = Vec::new();
    let mut before = Vec::new();
    for client in &clients {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        before.push(skew_ms(&mut con, false).await);
        nodes.push(con);
    }
    let delta = 5_000_i64;
    let (jumped, offset) = server.jump_primary_clock(delta).await.expect("jump");
    assert_eq!(offset, delta);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut hit = 0;
    for (i, con) in nodes.iter_mut().enumerate() {
        let addr = clients[i].get_connection_info().addr().to_string();
        let (skew, rtt) = skew_ms(con, false).await;
        let moved = skew - before[i].0;
        let serves: redis::RedisResult<u64> = redis::cmd("LLEN").arg("log").query_async(con).await;
        let expected = if addr == jumped {
            hit += 1;
            assert!(serves.is_ok(), "{addr} was jumped but does not serve log");
            delta as f64
        } else {
            0.0
        };
        assert!(
            (moved - expected).abs() <= 10.0 + rtt + before[i].1,
            "node {addr}: moved {moved} ms, expected {expected} (jumped: {jumped})"
        );
    }
    assert_eq!(hit, 1, "{jumped} is none of the nodes");
    let aligned = server.align_clocks().expect("align");
    assert_eq!(aligned, vec![(jumped.clone(), -delta)]);
    server.stop().await.unwrap();
}

/// `ackgap chaos --server replicated:1 --faults skew-failover`: the replica
/// whose clock ran ahead is promoted, the leases the old primary granted
/// expire at once on the new one, and the reference queue (each write
/// confirmed by the replica: `--durability wait:1`) holds every invariant.
#[test]
fn chaos_skew_failover_holds_every_invariant_of_the_reference_queue() {
    skew_failover_holds_every_invariant(&["--server", "replicated:1"]);
}

/// The same on `--server cluster:3x1`: the replicas of the queue's
/// primary are skewed and the cluster's own failover promotes one.
#[test]
fn chaos_skew_failover_of_a_cluster_s_primary_holds_every_invariant_of_the_reference_queue() {
    skew_failover_holds_every_invariant(&["--server", "cluster:3x1"]);
}

/// The same on `--server container-replicated:1`, libfaketime
/// bind-mounted into every container.
#[test]
fn chaos_skew_failover_of_a_container_replicated_set_holds_every_invariant_of_the_reference_queue()
{
    if !common::containers_here() {
        return;
    }
    skew_failover_holds_every_invariant(&["--server", "container-replicated:1"]);
}

/// The same on `--server container-cluster:3x1`, libfaketime bind-mounted
/// into every node.
#[test]
fn chaos_skew_failover_of_a_container_cluster_s_primary_holds_every_invariant_of_the_reference_queue(
) {
    if !common::containers_here() {
        return;
    }
    skew_failover_holds_every_invariant(&["--server", "container-cluster:3x1"]);
}

/// `ackgap chaos --faults skew-failover --durability wait:1 --json ARGS`
/// of seed 1: it fired, the replica promoted is the one skewed (its
/// offset the jump), and the reference queue held every invariant.
fn skew_failover_holds_every_invariant(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let skew = [
        "--faults",
        "skew-failover",
        "--durability",
        "wait:1",
        "--json",
    ];
    let out = chaos(dir.path(), 1, &[&skew[..], args].concat());
    let report = report(&out);
    assert!(
        report["fired"]["skew-failover"].as_u64() >= Some(1),
        "never fired: {report:#}"
    );
    let history = std::fs::read_to_string(dir.path().join("chaos-1.jsonl")).unwrap();
    let skewed: Vec<serde_json::Value> = history
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["value"]["fault"] == "skew-failover" && e["value"]["action"] == "fired")
        .collect();
    assert!(!skewed.is_empty(), "no fired event in the history");
    for e in &skewed {
        let hit = &e["value"]["hit"];
        assert!(hit["jumped_ms"].as_i64() > Some(0), "{e}");
        assert!(hit["promoted"].is_string(), "{e}");
        assert_eq!(
            hit["skewed"][0]["offset_ms"], hit["jumped_ms"],
            "the replica's offset is the jump: {e}"
        );
        assert_eq!(
            hit["skewed"][0]["node"], hit["promoted"],
            "the replica promoted is the one skewed: {e}"
        );
    }
    assert_eq!(out.status.code(), Some(0), "{report:#}");
}

/// A consumer whose idempotency marker expires (1,000 ms on the server's
/// clock, two leases of the run) under `clock-jump` and `crash-ack-gap`: a
/// worker that crashed after its effect leaves the job to a redelivery a
/// lease later, which the marker outlives unless a forward jump of the
/// server's clock falls between the two. For some seed one does, the
/// effect lands twice, and the report names each such duplicate the
/// consumer's finding, naming the jump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_effect_of_a_marker_a_forward_clock_jump_expired_is_named_the_consumer_s_finding(
) {
    use ackgap::adapter::{Adapter, Reference};
    use ackgap::chaos::runner::{run_with, ChaosConfig, ChaosSubject, Interrupt, OpenAdapter};
    use ackgap::mutants::consumers::MarkerTtl;
    use ackgap::queue::Queue;
    use std::sync::Arc;
    let mut tried = Vec::new();
    // Seed 7 was the first of 1 to 7 to name one here (2026-12-06); the
    // run is on the wall clock, so the others follow if it does not.
    for seed in (7..=12).chain(1..=6) {
        let Some(mut server) = start(Persistence::None, CLOCK).await else {
            return;
        };
        let cfg = ChaosConfig {
            duration_ms: 3_000,
            jobs: 60,
            faults: "clock-jump,crash-ack-gap".parse().unwrap(),
            queue_name: common::queue_name(),
            ..ChaosConfig::new(seed)
        };
        let name = cfg.queue_name.clone();
        let open: OpenAdapter = Arc::new(move |url: String| {
            let name = name.clone();
            Box::pin(async move {
                let client = redis::Client::open(url).map_err(|e| e.to_string())?;
                let queue = Queue::connect(&client, &name)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Arc::new(Reference::new(queue)) as Arc<dyn Adapter>)
            })
        });
        let subject = ChaosSubject {
            open,
            consumer: Arc::new(MarkerTtl::with_ttl_ms(1_000)),
        };
        let report = run_with(
            &mut server,
            cfg,
            Some(subject),
            None,
            None,
            Interrupt::new(),
        )
        .await
        .expect("the chaos run completes");
        server.stop().await.unwrap();
        tried.push((
            seed,
            report.effects.duplicated,
            report.consumer_findings.len(),
        ));
        if report.consumer_findings.is_empty() {
            continue;
        }
        let effect_once = report
            .invariants
            .iter()
            .find(|r| r.invariant == "effect-once")
            .unwrap();
        assert_eq!(effect_once.verdict, ackgap::check::Verdict::Invalid);
        for finding in &report.consumer_findings {
            assert!(
                finding.contains("clock-jump of +") && finding.contains("lives 1000 ms"),
                "{finding}"
            );
        }
        return;
    }
    panic!("no seed of 1 to 12 named a duplicate the consumer's finding (seed, duplicated, named): {tried:?}");
}

// The explorers' clock: a server started for them (`start_for_explorers`)
// runs under libfaketime frozen at the instant each step sets.

/// TIME reads the walk's instant, stands still between steps, and a key
/// set with `PX 100` is there at +100 ms and gone at +101 ms (Valkey
/// expires a key once its clock is past the deadline); the clock never
/// moves back.
#[tokio::test]
async fn the_servers_time_and_a_px_expiry_follow_the_walks_clock() {
    let (server, real_time) = Server::start_for_explorers(&valkey(), Persistence::None)
        .await
        .expect("a valkey-server for the explorers");
    assert_eq!(real_time, None, "valkey-server runs under libfaketime");
    let clock = server.logical_clock().expect("the explorers own its clock");
    let epoch = clock.next_epoch_ms().await;
    assert_eq!(epoch, ackgap::server::LOGICAL_EPOCH_MS);
    let mut con = connect(&server).await;
    let time = |con: &mut MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
            s * 1_000 + us / 1_000
        }
    };
    clock.set(epoch + 1_000).await.unwrap();
    assert_eq!(time(&mut con).await, epoch + 1_000);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("PX")
        .arg(100)
        .query_async(&mut con)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        time(&mut con).await,
        epoch + 1_000,
        "frozen: real time passing does not move it"
    );
    let get = |con: &mut MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            let v: Option<String> = redis::cmd("GET")
                .arg("k")
                .query_async(&mut con)
                .await
                .unwrap();
            v
        }
    };
    assert_eq!(get(&mut con).await.as_deref(), Some("v"));
    clock.set(epoch + 1_100).await.unwrap();
    assert_eq!(get(&mut con).await.as_deref(), Some("v"), "at the deadline");
    clock.set(epoch + 1_101).await.unwrap();
    assert_eq!(get(&mut con).await, None, "past the deadline");
    assert_eq!(time(&mut con).await, epoch + 1_101);
    assert!(clock.set(epoch + 1_000).await.is_err(), "never back");
    assert!(clock.next_epoch_ms().await > epoch + 1_101);
    server.stop().await.unwrap();
}

/// A server given as a URL keeps its own clock: the explorers say so and
/// own nothing.
#[tokio::test]
async fn a_server_given_as_a_url_keeps_real_time_and_says_why() {
    let Some(server) = start(Persistence::None, Instruments::default()).await else {
        return;
    };
    let spec: ServerSpec = server.url().parse().expect("a URL spec");
    let (url_server, real_time) = Server::start_for_explorers(&spec, Persistence::None)
        .await
        .expect("reached");
    assert!(url_server.logical_clock().is_none());
    let why = real_time.expect("a reason");
    assert!(why.contains("URL"), "{why}");
}
