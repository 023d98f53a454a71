//! What a hello promises decides what the harness sends. A fixture copy of
//! the stdlib LMOVE adapter (`tests/adapters/lmove-options`, on a real
//! Valkey) that promises less: `ACKGAP_FIXTURE_DEDUP=none` makes a second
//! enqueue of an id a second message (Celery's and Dramatiq's way) and its
//! hello says `dedup: false`; `ACKGAP_FIXTURE_WITHOUT=extend,reap,fail`
//! leaves those operations out of its hello (Sidekiq and arq have no
//! extend, no reap), and its lease takes expired leases back itself.
//!
//! The claims: the walks, the exhaustive search and the chaos producers
//! never enqueue an id twice on a queue that does not refuse duplicates,
//! while the same queue whose hello does not say so is caught admitting
//! one twice (so the capability, not luck, is what keeps them apart); a
//! replay line of such a walk replays its enqueues exactly, and a schedule
//! that enqueues an id twice is refused before the queue is touched; admission
//! says it did not judge the refusal; and the chaos runner makes no extend,
//! reap or fail call the hello did not list.

use crate::common; // the server (`start`) and fresh queue names

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;

use ackgap::adapter::{Exec, ExecOptions};
use ackgap::check::Verdict;
use ackgap::consumer::Kind;
use ackgap::explore::{
    exhaust, explore_on, run_schedule, ExhaustConfig, ExploreError, Line, Subject, SwarmConfig,
};
use ackgap::history::{Event, EventKind, F};
use ackgap::queue::Queue;
use ackgap::server::{Persistence, Server};
use common::Backend;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/adapters/lmove-options");
const ACKGAP: &str = env!("CARGO_BIN_EXE_ackgap");

async fn valkey() -> (Server, Queue) {
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    (server, queue)
}

/// The fixture with `env` (`NAME=value ...`), with the marker consumer.
async fn fixture(server: &Server, queue: &Queue, env: &str) -> Subject {
    let command = format!("{env} {FIXTURE}");
    let exec = Exec::start(&command, queue, &server.url(), ExecOptions::default())
        .await
        .expect("the fixture says hello");
    Subject::new(Arc::new(exec), Arc::from(Kind::Marker.consumer()))
}

/// How often each job's enqueue was invoked in `events`.
fn enqueues(events: &[Event]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in events {
        if e.f == F::Enqueue && e.kind == EventKind::Invoke {
            *out.entry(e.job.clone().unwrap_or_default()).or_default() += 1;
        }
    }
    out
}

const SEEDS: u64 = 12;
const STEPS: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walks_never_enqueue_an_id_twice_on_a_queue_without_dedup_and_admission_says_it_did_not_judge_the_refusal(
) {
    let (server, queue) = valkey().await;
    let subject = fixture(&server, &queue, "ACKGAP_FIXTURE_DEDUP=none").await;
    let mut enqueued = 0;
    for seed in 0..SEEDS {
        let report = explore_on(&subject, seed, STEPS).await.expect("judged");
        let twice: Vec<_> = enqueues(&report.history)
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .collect();
        assert!(
            twice.is_empty(),
            "seed {seed}: {twice:?}: {}",
            report.schedule
        );
        enqueued += enqueues(&report.history).len();
        let admission = report
            .invariants
            .iter()
            .find(|r| r.invariant == "admission")
            .unwrap();
        assert_eq!(
            admission.verdict,
            Verdict::Valid,
            "seed {seed}: {admission:?}"
        );
        assert_eq!(admission.counts.get("dedup_promised"), Some(&0));
        assert_eq!(admission.counts.get("duplicate_refusal_judged"), Some(&0));
    }
    assert!(enqueued > SEEDS as usize, "the walks enqueued: {enqueued}");

    // The control: the same queue, its hello silent, so ackgap takes it
    // for one that refuses duplicates and sends some; it admits them.
    let silent = fixture(&server, &queue, "ACKGAP_FIXTURE_DEDUP=none-unsaid").await;
    let mut caught = 0;
    for seed in 0..SEEDS {
        let report = explore_on(&silent, seed, STEPS).await.expect("judged");
        let admission = report
            .invariants
            .iter()
            .find(|r| r.invariant == "admission")
            .unwrap();
        if admission.verdict == Verdict::Invalid
            && admission
                .violations
                .iter()
                .any(|v| v.text.contains("admitted twice"))
        {
            caught += 1;
        }
    }
    assert!(caught > 0, "no seed of 0..{SEEDS} enqueued an id twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_without_dedup_replays_its_enqueues_exactly_and_a_second_enqueue_is_refused_before_it_runs(
) {
    let (server, queue) = valkey().await;
    let subject = fixture(&server, &queue, "ACKGAP_FIXTURE_DEDUP=none").await;
    let walk = explore_on(&subject, 3, STEPS).await.expect("judged");
    let line: Line = walk.line.parse().expect("a replay line");
    let replayed = run_schedule(
        &subject,
        &SwarmConfig::from_line(&line.config),
        &line.schedule,
    )
    .await
    .expect("judged");
    let order = |events: &[Event]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.f == F::Enqueue && e.kind == EventKind::Invoke)
            .map(|e| e.job.clone().unwrap_or_default())
            .collect()
    };
    assert!(!order(&walk.history).is_empty());
    assert_eq!(order(&replayed.history), order(&walk.history));
    assert_eq!(replayed.schedule, walk.schedule);

    let before = subject.adapter.read().await.unwrap();
    let twice: Line = format!("{}/marker/j1w1l100m3r1/e0.l0.c0.e0", walk.queue)
        .parse()
        .unwrap();
    let refused = run_schedule(
        &subject,
        &SwarmConfig::from_line(&twice.config),
        &twice.schedule,
    )
    .await;
    match refused {
        Err(ExploreError::Unsupported {
            step_index: 3,
            operation,
            ..
        }) => assert!(operation.contains("dedup: false"), "{operation}"),
        other => panic!("a second enqueue must be refused: {other:?}"),
    }
    let after = subject.adapter.read().await.unwrap();
    assert_eq!(
        after, before,
        "refused before the queue was touched (not even cleared)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exhaustive_search_enqueues_an_id_once_per_path_on_a_queue_without_dedup() {
    let (server, queue) = valkey().await;
    let config = ExhaustConfig {
        judge: true,
        ..ExhaustConfig::new(1, 1, 3)
    };
    let subject = fixture(&server, &queue, "ACKGAP_FIXTURE_DEDUP=none").await;
    let report = exhaust(&subject, config).await.expect("searched");
    assert_eq!(report.failure, None, "{report:?}");
    assert_eq!(report.judged["admission"].tally.verdict, Verdict::Valid);
    // The control: the silent hello gets a path that enqueues JOB-0 twice
    // (`e0 e0` reads as `e0` does, and is merged; `e0 l0 e0` is not), and
    // its second message is caught.
    let silent = fixture(&server, &queue, "ACKGAP_FIXTURE_DEDUP=none-unsaid").await;
    let report = exhaust(&silent, config).await.expect("searched");
    let line = report.line.clone().unwrap_or_default();
    let steps = line.rsplit('/').next().unwrap_or_default();
    assert_eq!(
        steps.split('.').filter(|s| *s == "e0").count(),
        2,
        "{report:?}"
    );
}

/// `ackgap chaos` on the fixture with `env`: the history's events.
fn chaos(env: &[(&str, &str)]) -> (Vec<Event>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.jsonl");
    let out = Command::new(ACKGAP)
        .args(["chaos", "--queue", &format!("exec:{FIXTURE}")])
        .args(["--duration", "2s", "--jobs", "30", "--seed", "5", "--json"])
        .args(["--history", history.to_str().unwrap()])
        .envs(env.iter().copied())
        .current_dir(dir.path())
        .output()
        .expect("run ackgap");
    assert!(
        matches!(out.status.code(), Some(0..=2)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let events = std::fs::read_to_string(&history)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (events, report)
}

#[test]
fn chaos_retries_an_enqueue_only_after_a_certain_failure_on_a_queue_without_dedup() {
    let (events, _) = chaos(&[("ACKGAP_FIXTURE_DEDUP", "none")]);
    // A producer retries an enqueue only when it certainly did not happen
    // (`fail`); one that was admitted or may have been (`ok`, `info`) is
    // the id's last.
    let mut outcomes: BTreeMap<String, Vec<EventKind>> = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e.f == F::Enqueue && e.kind != EventKind::Invoke)
    {
        outcomes
            .entry(e.job.clone().unwrap_or_default())
            .or_default()
            .push(e.kind);
    }
    assert!(!outcomes.is_empty());
    for (job, kinds) in &outcomes {
        let retried = &kinds[..kinds.len() - 1];
        assert!(
            retried.iter().all(|k| *k == EventKind::Fail),
            "{job}: {kinds:?}"
        );
    }
    assert_eq!(
        outcomes.values().map(Vec::len).sum::<usize>(),
        enqueues(&events).values().sum::<usize>(),
        "every enqueue invoked was answered"
    );
}

/// The operations invoked in `events`, and how often.
fn invoked(events: &[Event]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in events.iter().filter(|e| e.kind == EventKind::Invoke) {
        *out.entry(format!("{:?}", e.f).to_lowercase()).or_default() += 1;
    }
    out
}

#[test]
fn chaos_calls_no_extend_reap_or_fail_the_hello_did_not_list() {
    let (events, report) = chaos(&[("ACKGAP_FIXTURE_WITHOUT", "extend,reap,fail")]);
    let ops = invoked(&events);
    for op in ["extend", "reap", "fail"] {
        assert_eq!(ops.get(op), None, "{op} was called: {ops:?}");
    }
    assert!(ops["lease"] > 0 && ops["complete"] > 0, "{ops:?}");
    // The noise the runner made before: no error of a call it never makes.
    for (kind, count) in report["errors"].as_object().unwrap() {
        for op in ["extend", "reap", "fail"] {
            assert_eq!(count["by_op"].get(op), None, "{kind}: {count}");
        }
    }
    // The control: the full fixture gets its heartbeats and its reaper.
    let (events, _) = chaos(&[]);
    let ops = invoked(&events);
    assert!(
        ops.contains_key("extend") && ops.contains_key("reap"),
        "{ops:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walks_on_a_queue_that_recovers_inside_lease_call_no_extend_reap_or_fail_and_their_heal_drains_it(
) {
    let (server, queue) = valkey().await;
    let subject = fixture(&server, &queue, "ACKGAP_FIXTURE_WITHOUT=extend,reap,fail").await;
    let mut drained = 0;
    for seed in 0..SEEDS {
        let report = explore_on(&subject, seed, STEPS).await.expect("judged");
        let ops = invoked(&report.history);
        for op in ["extend", "reap", "fail"] {
            assert_eq!(ops.get(op), None, "seed {seed}: {op}: {}", report.schedule);
        }
        // No reaper: the heal passes time and the drain's leases take the
        // expired leases back; nothing is left unfinished.
        let liveness = report
            .invariants
            .iter()
            .find(|r| r.invariant == "liveness")
            .unwrap();
        assert_eq!(
            liveness.verdict,
            Verdict::Valid,
            "seed {seed}: {liveness:?}"
        );
        drained += liveness.counts["drain_leases"];
    }
    assert!(drained > SEEDS, "the drains leased: {drained}");
}
