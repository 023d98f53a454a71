//! The Valkey Streams consumer-group pattern (`--queue streams`) on a real
//! Valkey, and the explorer driving a queue that only has the server's
//! clock: the adapter does what its module docs say (XADD, XREADGROUP,
//! XACK, XAUTOCLAIM, dead-lettering by delivery count); a walk on it takes
//! real time and its reaps take expired leases, while the reference queue
//! still runs on logical time; a replayed step the queue does not support
//! is refused before anything runs; and `ackgap explore`, `replay` and
//! `chaos --queue streams` run end to end. Nothing here asserts a verdict
//! about streams: the checkers judge it, and these tests assert only what
//! any correct harness must do.

use crate::common; // the Valkey server and fresh queue names

use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{ackgap, text};
use ackgap::adapter::{
    Adapter, Capabilities, EnqueueOptions, Enqueued, Extended, Failed, JobState, Operation,
    Settled, Streams, Wrapper,
};
use ackgap::consumer::Kind;
use ackgap::explore::driver::{MAX_WAIT_MS, SERVER_LEASE_MS};
use ackgap::explore::{
    explore_on, run_schedule, ExploreError, Schedule, Subject, SwarmConfig, WalkReport,
};
use ackgap::history::{Event, EventKind, F};
use ackgap::queue::Queue;
use ackgap::server::{Persistence, Server};
use common::Backend;

async fn valkey() -> (Server, Queue) {
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    (server, queue)
}

fn options(max_attempts: u64) -> EnqueueOptions {
    EnqueueOptions {
        max_attempts,
        delay_ms: 0,
    }
}

/// The server's clock (ms).
async fn server_ms(queue: &Queue) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut queue.connection())
        .await
        .unwrap();
    secs * 1000 + micros / 1000
}

async fn state(streams: &Streams, job: &str) -> String {
    streams.read().await.unwrap().jobs[job].clone()
}

/// Sleeps past a lease of `ms` granted before the call.
async fn outlive(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms + 5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_leases_by_xreadgroup_acks_by_xack_and_reaps_by_xautoclaim() {
    let (_server, queue) = valkey().await;
    let streams = Streams::new(&queue);
    let caps = streams.capabilities();
    // It reads the server's clock only: logical time when the explorers
    // own that clock, the server clock here (a subject without one).
    assert!(
        caps.logical_time && caps.follows_clock && !caps.fences,
        "{caps:?}"
    );
    assert!(!caps.logical_with(false), "{caps:?}");
    assert!(caps.missing_required().is_empty());

    let enq = streams.enqueue("JOB-1", b"p1", options(3), None).await;
    assert_eq!(enq.unwrap(), Enqueued::Enqueued);
    let again = streams.enqueue("JOB-1", b"other", options(3), None).await;
    assert_eq!(again.unwrap(), Enqueued::Duplicate);
    assert_eq!(state(&streams, "JOB-1").await, "pending");

    // A lease of a minute: the reaper leaves it, however slow this machine.
    let before = server_ms(&queue).await;
    let lease = streams.lease("w0", 60_000, None).await.unwrap().unwrap();
    let after = server_ms(&queue).await;
    assert_eq!((lease.id.as_str(), lease.token), ("JOB-1", 1));
    assert_eq!(lease.payload, b"p1");
    assert!(
        (before + 60_000..=after + 60_000).contains(&lease.deadline_ms),
        "deadline {} on the server clock between {before} and {after} plus the lease",
        lease.deadline_ms
    );
    assert_eq!(state(&streams, "JOB-1").await, "active");
    assert_eq!(streams.lease("w1", 60_000, None).await.unwrap(), None);
    assert_eq!(streams.reap(10, None).await.unwrap(), vec![]);

    // Extended to 50 ms (the reaper's min-idle is the lease last asked
    // for), then outlived: the reaper takes it back to pending.
    let extended = streams.extend("JOB-1", 1, 50, None).await.unwrap();
    assert!(
        matches!(extended, Extended::Extended { .. }),
        "{extended:?}"
    );
    outlive(50).await;
    let reaped = streams.reap(10, None).await.unwrap();
    assert_eq!(reaped.len(), 1, "{reaped:?}");
    assert_eq!(
        (reaped[0].id.as_str(), reaped[0].to),
        ("JOB-1", JobState::Pending)
    );
    assert_eq!(state(&streams, "JOB-1").await, "pending");
    // In the reaper's list it is not taken again, however long it waits.
    outlive(50).await;
    assert_eq!(streams.reap(10, None).await.unwrap(), vec![]);

    // The next lease claims it back first: a second delivery.
    let second = streams.lease("w1", 50, None).await.unwrap().unwrap();
    assert_eq!((second.id.as_str(), second.token), ("JOB-1", 2));
    let done = streams.complete("JOB-1", 2).await.unwrap();
    assert_eq!(done, Settled::Settled);
    assert_eq!(state(&streams, "JOB-1").await, "done");
    let twice = streams.complete("JOB-1", 2).await.unwrap();
    assert_eq!(twice, Settled::AlreadySettled);
    assert_eq!(
        streams.complete("JOB-9", 1).await.unwrap(),
        Settled::Missing
    );
    assert!(streams.read().await.unwrap().problems.is_empty());

    streams.clear().await.unwrap();
    assert!(streams.read().await.unwrap().jobs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_dead_letters_by_the_delivery_count_xpending_reports() {
    let (_server, queue) = valkey().await;
    let streams = Streams::new(&queue);
    streams
        .enqueue("JOB-2", b"p", options(2), None)
        .await
        .unwrap();
    for delivery in 1..=2 {
        let lease = streams.lease("w0", 30, None).await.unwrap().unwrap();
        assert_eq!(lease.token, delivery);
        outlive(30).await;
        let reaped = streams.reap(10, None).await.unwrap();
        let to = if delivery < 2 {
            JobState::Pending
        } else {
            JobState::Dead
        };
        assert_eq!(reaped.len(), 1);
        assert_eq!(reaped[0].to, to, "delivery {delivery}");
    }
    assert_eq!(state(&streams, "JOB-2").await, "dead");
    assert_eq!(streams.lease("w0", 30, None).await.unwrap(), None);

    // A fail puts the lease back at once, until the count reaches max.
    streams
        .enqueue("JOB-3", b"p", options(2), None)
        .await
        .unwrap();
    let first = streams.lease("w0", 1000, None).await.unwrap().unwrap();
    let extended = streams.extend("JOB-3", first.token, 1000, None).await;
    match extended.unwrap() {
        Extended::Extended { deadline_ms } => assert!(deadline_ms >= first.deadline_ms),
        other => panic!("{other:?}"),
    }
    let failed = streams.fail("JOB-3", first.token, 0, None).await.unwrap();
    assert!(matches!(failed, Failed::Requeued { .. }), "{failed:?}");
    assert_eq!(state(&streams, "JOB-3").await, "pending");
    let second = streams.lease("w1", 1000, None).await.unwrap().unwrap();
    assert_eq!((second.id.as_str(), second.token), ("JOB-3", 2));
    let failed = streams.fail("JOB-3", second.token, 0, None).await.unwrap();
    assert_eq!(failed, Failed::Dead);
    assert_eq!(state(&streams, "JOB-3").await, "dead");
    assert!(streams.read().await.unwrap().problems.is_empty());
}

fn subject(adapter: Arc<dyn Adapter>) -> Subject {
    Subject::new(adapter, Arc::from(Kind::Marker.consumer()))
}

fn ticks(history: &[Event]) -> Vec<&serde_json::Value> {
    history
        .iter()
        .filter(|e| e.f == F::Fault && e.kind == EventKind::Ok)
        .filter_map(|e| e.value.as_ref())
        .filter(|v| v["outcome"] == "tick")
        .collect()
}

fn reaps(history: &[Event]) -> Vec<&serde_json::Value> {
    history
        .iter()
        .filter(|e| e.f == F::Reap && e.kind == EventKind::Ok)
        .filter_map(|e| e.value.as_ref())
        .collect()
}

/// Every invoke is closed once, and a closing event follows its invoke.
fn assert_well_formed(report: &WalkReport) {
    let mut open = std::collections::BTreeMap::new();
    for e in &report.history {
        match e.kind {
            EventKind::Invoke => assert!(open.insert(e.process.clone(), e.index).is_none()),
            _ => assert!(open.remove(&e.process).is_some(), "{e:?} closes nothing"),
        }
    }
    assert!(open.is_empty(), "left open: {open:?}");
    assert!(report.steps > 0 && report.events > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_on_the_server_clock_waits_for_real_and_its_reaps_take_expired_leases() {
    let (_server, queue) = valkey().await;
    let streams = subject(Arc::new(Streams::new(&queue)));
    let mut reaped_some = false;
    for seed in 0..30 {
        let started = Instant::now();
        let report = explore_on(&streams, seed, 60).await.expect("the walk ran");
        let elapsed = started.elapsed();
        assert_well_formed(&report);
        let ticks = ticks(&report.history);
        assert!(!ticks.is_empty(), "seed {seed}: healing waits a lease");
        let lease_ms = report.config.lease_ms;
        let mut waited = 0;
        for t in &ticks {
            // Scaled so that the walk's lease lasts SERVER_LEASE_MS.
            let ms = t["ms"].as_u64().unwrap();
            let expected = (ms * SERVER_LEASE_MS / lease_ms).min(MAX_WAIT_MS);
            assert_eq!(t["waited_ms"].as_u64(), Some(expected), "seed {seed}: {t}");
            waited += expected;
        }
        assert!(
            elapsed >= Duration::from_millis(waited),
            "seed {seed}: {elapsed:?} < {waited} ms waited"
        );
        for v in reaps(&report.history) {
            let (before, now) = (v["before_ms"].as_u64(), v["now_ms"].as_u64());
            let (before, now) = (before.expect("TIME before"), now.expect("TIME after"));
            assert!(before <= now && now > 1_000_000_000_000, "{v}");
            reaped_some |= !v["reaped"].as_array().unwrap().is_empty();
        }
        assert!(
            report
                .invariants
                .iter()
                .all(|r| r.invariant != "refinement"),
            "only the reference queue is compared with the model"
        );
    }
    assert!(reaped_some, "no reap took an expired lease in 30 walks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_written_long_tick_waits_at_most_the_cap() {
    let (_server, queue) = valkey().await;
    let streams = subject(Arc::new(Streams::new(&queue)));
    let config = SwarmConfig::from_seed(1);
    let schedule = Schedule::parse("e0 l0 t3600000 r").unwrap();
    let started = Instant::now();
    let report = run_schedule(&streams, &config, &schedule).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(MAX_WAIT_MS));
    let ticks = ticks(&report.history);
    assert_eq!(ticks[0]["ms"], 3_600_000);
    assert_eq!(ticks[0]["waited_ms"], MAX_WAIT_MS);
    // A second and more past a lease: the reaper took it back.
    let first_reap = reaps(&report.history)[0]["reaped"].clone();
    assert_eq!(first_reap[0]["id"], "JOB-0", "{first_reap}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_queue_still_runs_on_logical_time() {
    let (_server, queue) = valkey().await;
    let reference = Subject::reference(&queue);
    let report = explore_on(&reference, 3, 100).await.unwrap();
    let ticks = ticks(&report.history);
    assert!(!ticks.is_empty());
    assert!(ticks.iter().all(|t| t.get("waited_ms").is_none()));
    for v in reaps(&report.history) {
        assert!(v.get("before_ms").is_none(), "{v}");
        assert!(v["now_ms"].as_u64().unwrap() < 1_000_000, "{v}");
    }
    assert!(report
        .invariants
        .iter()
        .any(|r| r.invariant == "refinement"));
}

/// Streams without extend: a queue that supports less.
struct NoExtend(Streams);

impl Wrapper for NoExtend {
    fn inner(&self) -> &dyn Adapter {
        &self.0
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = self.0.capabilities();
        caps.operations.retain(|op| *op != Operation::Extend);
        caps
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_supported_operations_are_drawn_and_a_replayed_one_is_refused_before_the_walk() {
    let (_server, queue) = valkey().await;
    let narrow = subject(Arc::new(NoExtend(Streams::new(&queue))));
    for seed in 0..6 {
        let report = explore_on(&narrow, seed, 60).await.unwrap();
        assert!(
            !report.schedule.split(' ').any(|s| s.starts_with('x')),
            "seed {seed} drew an extend: {}",
            report.schedule
        );
    }
    // The queue holds a job; a refused replay must not clear it.
    let streams = Streams::new(&queue);
    streams
        .enqueue("KEPT", b"p", options(1), None)
        .await
        .unwrap();
    let schedule = Schedule::parse("e0 l0 x0 c0").unwrap();
    let config = SwarmConfig::from_seed(1);
    let refused = run_schedule(&narrow, &config, &schedule).await;
    match refused {
        Err(e @ ExploreError::Unsupported { step_index: 2, .. }) => {
            assert!(e.to_string().contains("does not support extend"), "{e}");
        }
        other => panic!("{:?}", other.map(|r| r.schedule)),
    }
    assert_eq!(state(&streams, "KEPT").await, "pending");
}

/// 0 valid, 1 invalid: the run was judged, whatever the verdict.
fn judged(out: &Output) -> bool {
    matches!(out.status.code(), Some(0 | 1))
}

#[test]
fn ackgap_explore_and_replay_run_on_streams_end_to_end() {
    let out = ackgap(&[
        "explore",
        "--queue",
        "streams",
        "--seed",
        "4",
        "--steps",
        "60",
        "--shrink-runs",
        "0",
        "--json",
    ]);
    assert!(judged(&out), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["queue"], "streams");
    assert!(report["steps"].as_u64().unwrap() > 0);
    assert!(report["replay"]
        .as_str()
        .unwrap()
        .contains("--queue streams"));
    let line = report["line"].as_str().unwrap();
    assert!(line.starts_with("streams/marker/"), "{line}");

    let out = ackgap(&["replay", line, "--json"]);
    assert!(judged(&out), "{}", text(&out));
    let replayed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(replayed["queue"], "streams");
    assert_eq!(replayed["line"], line);
}

#[test]
fn ackgap_chaos_runs_on_streams_and_its_history_judges_the_same_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("streams.jsonl");
    let history = path.to_str().unwrap();
    let out = ackgap(&[
        "chaos",
        "--queue",
        "streams",
        "--seed",
        "2",
        "--duration",
        "2s",
        "--jobs",
        "40",
        "--faults",
        "worker",
        "--json",
        "--history",
        history,
    ]);
    assert!(judged(&out), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let events = ackgap::history::read_file(&path).expect("a well-formed history");
    let reaps = events
        .iter()
        .filter(|e| e.f == F::Reap && e.kind == EventKind::Ok)
        .count();
    assert!(reaps > 0, "the reaper ran");
    let out = ackgap(&["check", history, "--json"]);
    assert!(judged(&out), "{}", text(&out));
    let checked: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The run's report adds liveness; every checker's verdict is the same
    // judged again from the file.
    let verdicts = |v: &serde_json::Value| -> Vec<(String, String)> {
        v["invariants"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["invariant"] != "liveness")
            .map(|r| (r["invariant"].to_string(), r["verdict"].to_string()))
            .collect()
    };
    assert_eq!(verdicts(&checked), verdicts(&report));
}
