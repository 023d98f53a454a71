//! Parallel steps (`l0+l1`): the members' calls sent together on a real
//! server, the history's invocations overlapping, the reference queue
//! accepted in whichever order the server ran them, and a non-atomic lease
//! (tests/adapters/fenced.py --non-atomic-lease, a real race over the
//! adapter protocol) found and shrunk, which sequential walks never find.

use crate::common; // the server (`start`) and fresh queue names

use std::process::Command;
use std::sync::Arc;

use ackgap::adapter::open;
use ackgap::check::Verdict;
use ackgap::consumer::Kind;
use ackgap::explore::{
    explore_on, run_schedule, shrink, Line, Schedule, Subject, SwarmConfig, WalkReport,
};
use ackgap::history::{Event, EventKind, F};
use ackgap::queue::Queue;
use ackgap::server::{Persistence, Server};
use common::Backend;

const FENCED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/adapters/fenced.py");
const ACKGAP: &str = env!("CARGO_BIN_EXE_ackgap");

/// `ackgap ARGS`: its exit code and what it printed (stdout, then stderr).
fn exit_and_text(args: &[&str]) -> (Option<i32>, String) {
    let out = crate::common::ackgap(args);
    (out.status.code(), crate::common::text(&out))
}

/// The first replay line `text` prints (`replay: ackgap replay 'LINE'`),
/// and that it breaks an invariant again when replayed as printed.
fn replay_line_fails_again(text: &str) -> String {
    let quoted = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: ackgap replay '"))
        .unwrap_or_else(|| panic!("no replay line: {text}"));
    let line = &quoted[..quoted.find('\'').expect("the closing quote")];
    let (code, replayed) = exit_and_text(&["replay", line]);
    assert_eq!(code, Some(1), "{replayed}");
    line.to_owned()
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

fn assert_valid(report: &WalkReport) {
    assert_eq!(
        report.verdict,
        Verdict::Valid,
        "{}\n{}\n{:#?}",
        report.failure_text(),
        report.log.join("\n"),
        report.invariants
    );
}

/// Runs the replay line `line` on `subject`.
async fn run_line(subject: &Subject, line: &str) -> WalkReport {
    let line: Line = line.parse().unwrap();
    run_schedule(
        subject,
        &SwarmConfig::from_line(&line.config),
        &line.schedule,
    )
    .await
    .expect("the run was judged")
}

/// The (invoke, completion) indexes of each lease call, by process.
fn lease_calls(events: &[Event]) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for invoke in events
        .iter()
        .filter(|e| e.f == F::Lease && e.kind == EventKind::Invoke)
    {
        let done = events
            .iter()
            .find(|e| {
                e.f == F::Lease
                    && e.kind != EventKind::Invoke
                    && e.process == invoke.process
                    && e.index > invoke.index
            })
            .expect("every lease answered");
        out.push((invoke.process.clone(), invoke.index, done.index));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_leases_sent_together_give_one_job_to_one_worker_in_either_order_and_the_reference_queue_stays_valid(
) {
    let (_server, queue) = valkey().await;
    let reference = Subject::reference(&queue);
    let mut winners = std::collections::BTreeMap::new();
    for _ in 0..10 {
        // One job, two workers leasing together: one gets it, the other
        // nothing, in whichever order the server ran them; then both ack
        // together (one has nothing to ack).
        let report = run_line(&reference, "reference/marker/j1w2l100m3r1/e0.l0+l1.c0+c1").await;
        assert_valid(&report);
        let together = &report.log[1];
        assert!(
            together.contains("JOB-0 token 1") && together.contains("nothing ready"),
            "{together}"
        );
        let winner = match together.starts_with("together: w0 leases -> JOB-0") {
            true => "w0",
            false => "w1",
        };
        // When w1 won, only the order other than the written one gives
        // these answers: the model took it.
        assert_eq!(
            together.ends_with("(as if l1 then l0)"),
            winner == "w1",
            "{together}"
        );
        *winners.entry(winner).or_insert(0) += 1;
        // Both calls were invoked before either answer was recorded.
        let calls = lease_calls(&report.history);
        let (w0, w1) = (&calls[0], &calls[1]);
        assert_eq!((w0.0.as_str(), w1.0.as_str()), ("w0", "w1"), "{calls:?}");
        assert!(w1.1 < w0.2 && w0.1 < w1.2, "not overlapping: {calls:?}");
    }
    eprintln!("who won the race, of 10: {winners:?}");

    // Two jobs: both leases granted, each a different job; both acks settle.
    let report = run_line(
        &reference,
        "reference/marker/j2w2l100m3r1/e0.e1.l0+l1.c0+c1",
    )
    .await;
    assert_valid(&report);
    assert!(
        report.log[2].contains("JOB-0 token 1") && report.log[2].contains("JOB-1 token 1"),
        "{}",
        report.log[2]
    );
    assert!(
        report.log[3].matches("Settled").count() == 2,
        "{}",
        report.log[3]
    );

    // Three together: a lease, a complete and the reaper racing an expired
    // lease; a fail and an extend racing the reaper.
    for line in [
        "reference/marker/j2w3l100m3r1/e0.e1.l0.t100.l1+c0+r",
        "reference/marker/j2w3l100m3r1/e0.e1.l0.l1.t100.f0+x1+r.l2",
        "reference/marker/j1w2l100m1r1/e0.l0.k0.t100.r+l1.s0+l1",
    ] {
        assert_valid(&run_line(&reference, line).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walks_with_parallel_steps_on_the_reference_queue_are_valid_and_race_leases() {
    let (_server, queue) = valkey().await;
    let reference = Subject::reference(&queue).with_parallel(30);
    let (mut parallel, mut lease_races) = (0, 0);
    for seed in 0..60 {
        let report = explore_on(&reference, seed, 50)
            .await
            .expect("the walk ran");
        assert_valid(&report);
        let schedule = Schedule::parse(&report.schedule).unwrap();
        for step in schedule.steps().iter().filter(|s| s.members().len() > 1) {
            parallel += 1;
            let text = step.to_string();
            lease_races += usize::from(text.matches('l').count() == 2);
        }
        assert!(
            report.replay.ends_with("--parallel 30"),
            "{}",
            report.replay
        );
    }
    eprintln!("60 walks of 50 steps: {parallel} parallel steps, {lease_races} two leases together");
    assert!(parallel >= 100, "{parallel} parallel steps");
    assert!(lease_races >= 10, "{lease_races} lease races");
}

/// The non-atomic lease mutant on `queue`.
async fn non_atomic(server: &Server, queue: &Queue) -> Subject {
    let spec = format!("exec:python3 {FENCED} --non-atomic-lease");
    let adapter = open(&spec, queue, &server.url()).await.unwrap();
    Subject::new(adapter, Arc::from(Kind::Marker.consumer()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_atomic_lease_is_found_by_parallel_steps_and_shrunk_and_sequential_walks_never_find_it(
) {
    let (server, queue) = valkey().await;
    let mutant = non_atomic(&server, &queue).await;
    // Sequential walks: one lease at a time, the mutant is a correct queue.
    for seed in 0..30 {
        let report = explore_on(&mutant, seed, 60).await.expect("the walk ran");
        assert_valid(&report);
    }
    // The hand-written race: two workers, one job, both lease it.
    let report = run_line(&mutant, "exec:x/marker/j1w2l100m3r1/e0.l0+l1").await;
    assert_eq!(
        report.verdict,
        Verdict::Invalid,
        "{}",
        report.failure_text()
    );
    let exclusive = report
        .invariants
        .iter()
        .find(|r| r.invariant == "lease-exclusive")
        .unwrap();
    assert_eq!(exclusive.verdict, Verdict::Invalid, "{exclusive:?}");
    assert!(
        exclusive.violations[0].text.contains("in flight together"),
        "{exclusive:?}"
    );
    // The same race on the reference queue is valid.
    let reference = Subject::reference(&queue);
    assert_valid(&run_line(&reference, "reference/marker/j1w2l100m3r1/e0.l0+l1").await);

    // Walks with parallel steps find it; the first seed that does is shrunk.
    let racing = mutant.clone().with_parallel(30);
    let mut walked = 0;
    for seed in 0..30 {
        walked += 1;
        let report = explore_on(&racing, seed, 60).await.expect("the walk ran");
        let Some((invariant, _)) = report.findings().first().cloned() else {
            continue;
        };
        let line: Line = report.line.parse().unwrap();
        let config = SwarmConfig::from_seed(seed);
        let shrunk = shrink(&racing, &config, &line.schedule, 500)
            .await
            .unwrap()
            .expect("the failure reproduces");
        eprintln!(
            "seed {seed} ({walked} walks) broke {invariant}:\n{}",
            shrunk.text()
        );
        let steps = shrunk.line().schedule;
        assert!(steps.len() <= 4, "{steps}");
        assert!(
            steps
                .steps()
                .iter()
                .any(|s| s.to_string().matches('l').count() == 2),
            "{steps}"
        );
        return;
    }
    panic!("no seed of 0..30 with parallel steps found the non-atomic lease");
}

#[test]
fn explore_with_parallel_steps_kills_the_non_atomic_lease_and_without_them_does_not() {
    let queue = format!("exec:python3 {FENCED} --non-atomic-lease");
    let explore = |parallel: &str| {
        exit_and_text(&[
            "explore",
            "--queue",
            &queue,
            "--seeds",
            "20",
            "--steps",
            "60",
            "--parallel",
            parallel,
            "--shrink-runs",
            "300",
        ])
    };
    let (code, text) = explore("0");
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = explore("30");
    assert_eq!(code, Some(1), "{text}");
    // The shrunk replay line holds the race as one step, `l0+l1`, and
    // fails again when replayed.
    let line = replay_line_fails_again(&text);
    assert!(line.contains('+'), "{line}");
    let steps = line.rsplit('/').next().unwrap_or_default();
    assert!(steps.split('.').count() <= 4, "{line}");
}

#[test]
fn a_parallel_step_replays_from_its_line_and_a_member_repeated_or_local_is_refused_as_usage() {
    let run = exit_and_text;
    let (code, text) = run(&["replay", "reference/marker/j1w2l100m3r1/e0.l0+l1.c0+c1"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("together: w0 leases -> "), "{text}");
    let (code, text) = run(&["explore", "--seed", "1", "--schedule", "e0 l0+l0"]);
    assert_eq!(code, Some(64), "{text}");
    assert!(text.contains("different callers"), "{text}");
    let (code, text) = run(&["explore", "--seed", "1", "--schedule", "e0 l0+k1"]);
    assert_eq!(code, Some(64), "{text}");
    assert!(text.contains("cannot run in parallel"), "{text}");
}

/// `ackgap exhaust ARGS`: its exit code and what it printed.
fn exhaust(args: &[&str]) -> (Option<i32>, String) {
    exit_and_text(&[&["exhaust"], args].concat())
}

#[test]
fn exhaust_with_parallel_leaves_finds_the_non_atomic_lease_at_depth_two_and_without_them_does_not()
{
    let queue = format!("exec:python3 {FENCED} --non-atomic-lease");
    let search = ["--queue", &queue, "--jobs", "1", "--workers", "2"];
    let (code, text) = exhaust(&[&search[..], &["--depth", "3"]].concat());
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("ending in a parallel step"), "{text}");
    let (code, text) = exhaust(&[&search[..], &["--depth", "3", "--parallel"]].concat());
    assert_eq!(code, Some(1), "{text}");
    // The shortest path that broke it, the enqueue then the race, breaks
    // it again when replayed.
    let line = replay_line_fails_again(&text);
    assert!(line.ends_with("/e0.l0+l1"), "{line}\n{text}");
}

#[test]
fn exhaust_with_parallel_leaves_on_the_reference_queue_judges_them_and_stays_valid() {
    let (code, text) = exhaust(&[
        "--jobs",
        "1",
        "--workers",
        "2",
        "--depth",
        "4",
        "--parallel",
    ]);
    assert_eq!(code, Some(0), "{text}");
    let paths: u64 = text
        .split("ending in a parallel step ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of parallel paths: {text}"));
    assert!(
        paths >= 10,
        "{paths} paths ending in a parallel step\n{text}"
    );
    // Those leaves are judged: their tallies are printed.
    assert!(text.contains("judged: "), "{text}");
    let (code, text) = exhaust(&["--model-only", "--parallel"]);
    assert_eq!(code, Some(64), "{text}");
}

/// A chaos history of the non-atomic lease (`ackgap chaos --queue
/// 'exec:python3 tests/adapters/fenced.py --non-atomic-lease' --seed 1
/// --duration 3s --jobs 10 --faults worker`, kept in tests/histories/):
/// four workers' leases overlapped on the wire. In order of completion or
/// of invocation they are sequential and break nothing; sent together
/// they break `structure` (one token granted twice), and the reduction
/// shrinks that to the enqueue and one parallel step, every run.
#[test]
fn reduce_sends_a_chaos_run_s_overlapping_leases_together_and_pins_the_non_atomic_lease_in_two_steps(
) {
    let history = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/histories/non-atomic-lease.jsonl"
    );
    let queue = format!("exec:python3 {FENCED} --non-atomic-lease");
    let out = Command::new(ACKGAP)
        .args(["reduce", history, "--queue", &queue, "--lease-ms", "500"])
        .args(["--invariant", "structure", "--json"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let reduced = &report["reduced"][0];
    assert_eq!(reduced["invariant"], "structure", "{report}");
    assert_eq!(reduced["order"], "together", "{report}");
    assert!(reduced["steps"].as_u64().unwrap() <= 2, "{report}");
    assert_eq!(reduced["reproduced"], 10, "{report}");
    assert_eq!(reduced["runs"], 10, "{report}");
    let replay = reduced["replay"].as_str().unwrap();
    let line = replay
        .split('\'')
        .nth(1)
        .unwrap_or_else(|| panic!("a quoted line: {replay}"));
    let steps = line.rsplit('/').next().unwrap_or_default();
    assert!(steps.starts_with("e0.l") && steps.contains('+'), "{line}");
}

/// `u0`, a lease whose reply is lost (the unknown answer a partition or a
/// dropped reply gives): on the reference queue the job is held by no one
/// until the reaper takes it back, then done; on `rpop`, whose lease is a
/// bare pop, the job is gone.
#[test]
fn a_lease_whose_reply_is_lost_is_reaped_back_on_the_reference_queue_and_loses_the_job_on_rpop() {
    let replay = |line: &str| exit_and_text(&["replay", line]);
    let (code, text) = replay("reference/marker/j1w2l100m2r1/e0.u0.t100.r.l1.c1");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("w0 leases; the reply is lost"), "{text}");
    let (code, text) = replay("rpop/marker/j1w2l100m2r1/e0.u0");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("broke no-loss"), "{text}");
}
