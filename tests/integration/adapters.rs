//! Queues under test and consumers, judged by the explorers against a real
//! Valkey: each pattern the seed contrasts with the reference queue is shown
//! to break the invariant it gives up, with a minimal counterexample; the
//! reference queue with the `marker` consumer breaks nothing; and a printed
//! replay line runs again to the same history.

use crate::common; // the server matrix (`start`) and fresh queue names

use std::sync::Arc;

use ackgap::adapter::by_name;
use ackgap::check::Verdict;
use ackgap::consumer::Kind;
use ackgap::explore::{explore_on, run_schedule, shrink, Line, Shrunk, Subject, SwarmConfig};
use ackgap::history::Event;
use ackgap::queue::Queue;
use ackgap::server::{Persistence, Server};
use common::Backend;

/// What a history says, without the wall-clock times.
fn meaning(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {} {:?} {:?} {:?} {:?} {:?} {:?}",
                e.index, e.process, e.kind, e.f, e.job, e.token, e.value, e.error
            )
        })
        .collect()
}

async fn valkey() -> (Server, Queue) {
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    (server, queue)
}

fn subject(queue: &Queue, adapter: &str, consumer: Kind) -> Subject {
    Subject::new(
        by_name(adapter, queue).unwrap(),
        Arc::from(consumer.consumer()),
    )
}

/// Walks seeds from 0 until one finds something on `invariant`, then
/// shrinks it; panics if none of `seeds` does.
async fn find_and_shrink(subject: &Subject, invariant: &str, seeds: u64, steps: usize) -> Shrunk {
    for seed in 0..seeds {
        let report = explore_on(subject, seed, steps)
            .await
            .expect("the walk ran");
        let found = report.findings();
        if !found.iter().any(|(i, _)| *i == invariant) {
            continue;
        }
        // Shrink toward the finding asked for: the first one may be another.
        assert_eq!(found[0].0, invariant, "seed {seed}: {found:?}");
        let line: Line = report.line.parse().unwrap();
        let config = SwarmConfig::from_seed(seed);
        let shrunk = shrink(subject, &config, &line.schedule, 3000)
            .await
            .unwrap()
            .expect("the failure reproduces");
        eprintln!("{}", shrunk.text());
        return shrunk;
    }
    panic!("no seed in 0..{seeds} found {invariant} on {subject:?}");
}

fn counts(shrunk: &Shrunk, invariant: &str) -> std::collections::BTreeMap<&'static str, u64> {
    shrunk
        .report
        .invariants
        .iter()
        .find(|r| r.invariant == invariant)
        .unwrap()
        .counts
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmove_does_not_fence_a_stale_lrem_removes_the_newer_deliverys_entry() {
    let (_server, queue) = valkey().await;
    let s = subject(&queue, "lmove", Kind::Marker);
    let shrunk = find_and_shrink(&s, "fenced-settlement", 300, 100).await;
    assert_eq!(shrunk.invariant, "fenced-settlement");
    let line = shrunk.line();
    // Minimal: enqueue, lease, the reaper takes it back after time passes,
    // another lease, then the first worker's stale ack: of the lease it
    // still holds (`c`), or of the one it held before a crash (`s`).
    assert!(line.schedule.len() <= 8, "{line}");
    let text = line.schedule.to_string();
    let last = text.split(' ').next_back().unwrap_or_default();
    assert!(
        text.contains(" r") && (last.starts_with('c') || last.starts_with('s')),
        "{text}"
    );
    assert_eq!(shrunk.report.verdict, Verdict::Invalid);

    // The hand-written counterexample: w0's stale LREM settles w1's delivery.
    let hand: Line = "lmove/marker/j1w2l50m3r1/e0.l0.k0.t50.r.l1.s0"
        .parse()
        .unwrap();
    let report = run_schedule(&s, &SwarmConfig::from_line(&hand.config), &hand.schedule)
        .await
        .unwrap();
    let fenced = report
        .invariants
        .iter()
        .find(|r| r.invariant == "fenced-settlement")
        .unwrap();
    assert_eq!(fenced.verdict, Verdict::Invalid, "{fenced:?}");
    assert!(
        fenced.violations[0].text.contains("token 1 by w0"),
        "{fenced:?}"
    );
    // The same schedule on the reference queue is refused and passes.
    let reference = subject(&queue, "reference", Kind::Marker);
    let fixed = run_schedule(
        &reference,
        &SwarmConfig::from_line(&hand.config),
        &hand.schedule,
    )
    .await
    .unwrap();
    assert_eq!(fixed.verdict, Verdict::Valid, "{}", fixed.failure_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpop_loses_a_job_whose_worker_crashed() {
    let (_server, queue) = valkey().await;
    let s = subject(&queue, "rpop", Kind::Marker);
    let shrunk = find_and_shrink(&s, "no-loss", 50, 60).await;
    // Enqueue and lease are enough: the job left the queue with the lease.
    assert_eq!(shrunk.line().schedule.len(), 2, "{}", shrunk.line());
    assert_eq!(counts(&shrunk, "no-loss").get("lost"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_applies_an_effect_twice_under_redelivery() {
    let (_server, queue) = valkey().await;
    let s = subject(&queue, "reference", Kind::Naive);
    let shrunk = find_and_shrink(&s, "effect-once", 100, 60).await;
    assert_eq!(counts(&shrunk, "effect-once").get("duplicated"), Some(&1));
    assert!(shrunk.line().schedule.len() <= 6, "{}", shrunk.line());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marker_before_loses_an_effect_when_a_crash_falls_between_its_parts() {
    let (_server, queue) = valkey().await;
    let s = subject(&queue, "reference", Kind::MarkerBefore);
    let shrunk = find_and_shrink(&s, "effect-once", 100, 60).await;
    assert_eq!(counts(&shrunk, "effect-once").get("lost"), Some(&1));
    assert!(shrunk.text().contains("between-parts"), "{}", shrunk.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marker_after_duplicates_an_effect_when_a_crash_falls_between_its_parts() {
    let (_server, queue) = valkey().await;
    let s = subject(&queue, "reference", Kind::MarkerAfter);
    let shrunk = find_and_shrink(&s, "effect-once", 100, 60).await;
    assert_eq!(counts(&shrunk, "effect-once").get("duplicated"), Some(&1));
    assert!(shrunk.text().contains("between-parts"), "{}", shrunk.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_queue_with_the_marker_consumer_passes_200_seeds() {
    let (_server, queue) = valkey().await;
    for consumer in [Kind::Marker, Kind::Natural] {
        let s = subject(&queue, "reference", consumer);
        for seed in 0..200 {
            let report = explore_on(&s, seed, 60).await.unwrap();
            assert!(
                report.findings().is_empty(),
                "{consumer} seed {seed}: {}",
                report.failure_text()
            );
            let once = report
                .invariants
                .iter()
                .find(|r| r.invariant == "effect-once")
                .unwrap();
            assert_eq!(once.counts.get("promised"), Some(&1));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_ack_reply_is_info_and_the_retried_ack_is_already_settled() {
    let (_server, queue) = valkey().await;
    let s = subject(&queue, "reference", Kind::Marker);
    let line: Line = "reference/marker/j1w1l100m3r1/e0.l0.d0.c0".parse().unwrap();
    let report = run_schedule(&s, &SwarmConfig::from_line(&line.config), &line.schedule)
        .await
        .unwrap();
    assert_eq!(report.verdict, Verdict::Valid, "{}", report.failure_text());
    let completes: Vec<&Event> = report
        .history
        .iter()
        .filter(|e| {
            e.f == ackgap::history::F::Complete && e.kind != ackgap::history::EventKind::Invoke
        })
        .collect();
    assert_eq!(completes[0].kind, ackgap::history::EventKind::Info);
    assert_eq!(
        completes[1].value.as_ref().unwrap()["outcome"],
        "already_settled"
    );
}

#[test]
fn a_printed_replay_line_runs_again_to_the_same_history() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (line, history) = runtime.block_on(async {
        let (_server, queue) = valkey().await;
        let s = subject(&queue, "lmove", Kind::MarkerAfter);
        let shrunk = find_and_shrink(&s, "fenced-settlement", 300, 100).await;
        // The line as printed in the counterexample text.
        let text = shrunk.text();
        let printed = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("replay: ackgap replay "))
            .expect("a replay line is printed")
            .to_owned();
        assert_eq!(printed, shrunk.report.line);
        (printed, shrunk.report.history.clone())
    });
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(["replay", &line, "--json"])
        .output()
        .expect("run ackgap");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let replayed: Vec<Event> = serde_json::from_value(value["history"].clone()).unwrap();
    assert_eq!(meaning(&replayed), meaning(&history));
    assert_eq!(value["line"], line.as_str());
}
