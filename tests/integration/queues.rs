//! The queues people run, through their own libraries: every adapter of
//! the list (`adapters/NAME/adapter.toml`) gets the same tests, generated
//! by `adapters!` the way `matrix!` generates one test per server:
//!
//! - it passes the protocol's conformance scenario on a real Valkey;
//! - a worker killed holding a job (`conformance.py --crash`: the adapter's
//!   `crash`, a real death without the library's shutdown path) shows,
//!   through the library alone, that the job comes back — or that it does
//!   not: whichever `adapter.toml`'s `crash` records is what the library did
//!   when it was last run, and the assertion names the library's version;
//! - `ackgap explore` finishes a few seeds with a verdict, and `ackgap
//!   chaos` a short run with a verdict and a well-formed history.
//!
//! What the checkers find in each queue is the tool's to print (the
//! findings pages, docs/findings/), never these tests' to expect.

use crate::common; // the server and fresh queue names

use std::process::{Command, Output};

use crate::common::{ackgap_in, text};
use ackgap::server::{Persistence, Server};
use common::Backend;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One adapter of the list, as its `adapter.toml` states it.
struct Listed {
    command: String,
    library: String,
    crash: String,
    crash_recover_s: Option<u64>,
}

/// `adapters/DIR/adapter.toml`, read as ackgap reads it
/// ([`ackgap::adapter::listing::AdapterToml`]).
fn listed(dir: &str) -> Listed {
    let a = ackgap::adapter::listing::AdapterToml::read(std::path::Path::new(ROOT), dir)
        .unwrap_or_else(|e| panic!("{e}"));
    let need = |v: Option<String>, name: &str| {
        v.unwrap_or_else(|| panic!("adapters/{dir}/adapter.toml has no {name}"))
    };
    Listed {
        command: format!("{ROOT}/{}", a.command),
        library: need(a.library, "library"),
        crash: need(a.crash, "crash"),
        crash_recover_s: a.crash_recover_s,
    }
}

/// A fresh embedded Valkey without persistence.
pub(crate) async fn valkey() -> Server {
    common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey")
}

/// `adapters/conformance.py ARGS -- COMMAND` on `server`.
fn conformance(server: &Server, args: &[&str], command: &str) -> Output {
    Command::new("python3")
        .arg(format!("{ROOT}/adapters/conformance.py"))
        .args(["--server", &server.url(), "--queue", &common::queue_name()])
        .args(args)
        .args(["--", command])
        .output()
        .expect("run python3")
}

pub async fn passes_the_conformance_scenario(dir: &str) {
    let a = listed(dir);
    let server = valkey().await;
    let out = conformance(&server, &[], &a.command);
    assert_eq!(out.status.code(), Some(0), "{}: {}", a.library, text(&out));
    assert!(text(&out).contains("PASS"), "{}", text(&out));
}

pub async fn a_dead_workers_job_comes_back_or_not_as_the_list_records(dir: &str) {
    let a = listed(dir);
    let server = valkey().await;
    let recover = a.crash_recover_s.unwrap_or(30).to_string();
    let out = conformance(&server, &["--crash", "--recover-s", &recover], &a.command);
    assert_eq!(out.status.code(), Some(0), "{}: {}", a.library, text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("CRASH: "))
        .unwrap_or_else(|| panic!("no CRASH line: {}", text(&out)));
    let recovered = line.starts_with("CRASH: recovered");
    assert_eq!(
        recovered,
        a.crash == "recovered",
        "{}: adapters/{dir}/adapter.toml says crash = {:?}, and the library now prints {line:?}",
        a.library,
        a.crash
    );
}

/// On the server ackgap starts (its clock the walk's, for a queue that
/// follows it).
pub async fn explore_finishes_three_seeds_with_a_verdict(dir: &str) {
    let a = listed(dir);
    let tmp = tempfile::tempdir().unwrap();
    let queue = format!("exec:{}", a.command);
    let out = ackgap_in(
        tmp.path(),
        &[
            "explore",
            "--queue",
            &queue,
            "--seeds",
            "3",
            "--steps",
            "30",
            "--shrink-runs",
            "0",
        ],
    );
    // 0 valid, 1 invalid, 2 unknown: a verdict; never a usage or an
    // environment error.
    let code = out.status.code();
    assert!(
        matches!(code, Some(0..=2)),
        "{}: {code:?}: {}",
        a.library,
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("3 seeds,"),
        "{}",
        text(&out)
    );
}

pub fn chaos_finishes_with_a_verdict_and_a_well_formed_history(dir: &str) {
    let a = listed(dir);
    let tmp = tempfile::tempdir().unwrap();
    let history = tmp.path().join("chaos.jsonl");
    let queue = format!("exec:{}", a.command);
    let out = ackgap_in(
        tmp.path(),
        &[
            "chaos",
            "--queue",
            &queue,
            "--duration",
            "2s",
            "--jobs",
            "30",
            "--json",
            // Its claim is the run's verdict and history; an exact replay
            // of what it broke is reduce's (tests/integration/chaos.rs).
            "--no-reduce",
            "--history",
            history.to_str().unwrap(),
        ],
    );
    let code = out.status.code();
    assert!(
        matches!(code, Some(0..=2)),
        "{}: {code:?}: {}",
        a.library,
        text(&out)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(
        ["valid", "invalid", "unknown"].contains(&report["verdict"].as_str().unwrap_or("")),
        "{report}"
    );
    // The history is well formed (read refuses one that is not), and leases
    // were granted through the library.
    let events = ackgap::history::read_file(&history).expect("a well-formed history");
    let leased = events
        .iter()
        .filter(|e| e.f == ackgap::history::F::Lease && e.kind == ackgap::history::EventKind::Ok)
        .count();
    assert!(leased > 0, "{}: no lease was granted", a.library);
}

/// The adapters' tests, one module per adapter directory.
macro_rules! adapters {
    ($($name:ident => $dir:literal),* $(,)?) => {
        $(mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn passes_the_conformance_scenario() {
                super::passes_the_conformance_scenario($dir).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_dead_workers_job_comes_back_or_not_as_the_list_records() {
                super::a_dead_workers_job_comes_back_or_not_as_the_list_records($dir).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn explore_finishes_three_seeds_with_a_verdict() {
                super::explore_finishes_three_seeds_with_a_verdict($dir).await
            }
            #[test]
            fn chaos_finishes_with_a_verdict_and_a_well_formed_history() {
                super::chaos_finishes_with_a_verdict_and_a_well_formed_history($dir)
            }
        })*
        /// The directories the macro names.
        const LISTED: &[&str] = &[$($dir),*];
    };
}

adapters!(
    lmove_python => "lmove-python",
    bullmq => "bullmq",
    celery => "celery",
    rq => "rq",
    dramatiq => "dramatiq",
    arq => "arq",
    sidekiq => "sidekiq",
);

#[test]
fn every_adapter_directory_with_an_adapter_toml_has_its_tests_here() {
    let mut on_disk: Vec<String> = std::fs::read_dir(format!("{ROOT}/adapters"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("adapter.toml").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut here: Vec<String> = LISTED.iter().map(|s| s.to_string()).collect();
    here.sort();
    assert_eq!(
        on_disk, here,
        "tests/integration/queues.rs's adapters! rows"
    );
}

/// `ackgap replay LINE --json` on a fresh Valkey, for adapter `dir`: the
/// report, and the history's events of `job`.
async fn replayed(dir: &str, line: &str) -> (serde_json::Value, Vec<serde_json::Value>) {
    let server = valkey().await;
    let tmp = tempfile::tempdir().unwrap();
    let spec = format!("exec:{}/{line}", listed(dir).command);
    let out = ackgap_in(
        tmp.path(),
        &["replay", &spec, "--server", &server.url(), "--json"],
    );
    assert!(matches!(out.status.code(), Some(0..=2)), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let history = report["history"].as_array().cloned().unwrap_or_default();
    (report, history)
}

/// The calls RQ's own worker makes, and only those (the two schedules
/// that once printed false findings, docs/findings/repro/rq.md).
mod rq_worker_calls {
    use super::*;

    /// w0 completes, the reply is lost, then w0 fails the same delivery:
    /// RQ's worker never handles a failure of an execution whose success it
    /// handled, so the adapter answers `fenced` (state done) and sends RQ
    /// nothing (before, it sent `handle_job_failure`, leaving the job in
    /// both the finished and the failed registry).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fail_after_its_own_success_is_fenced_and_not_sent_to_rq() {
        let library = listed("rq").library;
        let (_, history) = replayed("rq", "marker/j1w2l50m1r1/e4.l0.d0.f0:25").await;
        let fail = history
            .iter()
            .find(|e| e["f"] == "fail" && e["type"] != "invoke")
            .unwrap_or_else(|| panic!("{library}: no fail answered: {history:?}"));
        assert_eq!(fail["type"], "ok", "{library}: {fail}");
        assert_eq!(fail["value"]["outcome"], "fenced", "{library}: {fail}");
        assert_eq!(fail["value"]["state"], "done", "{library}: {fail}");
    }

    /// w0 leases, crashes, then its stale complete arrives: the adapter
    /// sends it with the delivery's `Execution`, as a stalled RQ worker
    /// holds it, so the success removes the execution's StartedJobRegistry
    /// entry and nothing requeues the finished job: one lease in the whole
    /// run, the drain's included (without the Execution, RQ's cleanup
    /// requeued it and the job ran twice).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stale_success_after_a_crash_leaves_nothing_for_cleanup_to_requeue() {
        let library = listed("rq").library;
        let (report, history) = replayed("rq", "marker/j2w2l50m2r3/e1.l0.k0.s0").await;
        let leases: Vec<_> = history
            .iter()
            .filter(|e| e["f"] == "lease" && e["type"] == "ok" && e["value"]["outcome"] == "leased")
            .collect();
        assert_eq!(leases.len(), 1, "{library}: {leases:?}");
        let settled = history.iter().any(|e| {
            e["f"] == "complete" && e["type"] == "ok" && e["value"]["outcome"] == "settled"
        });
        assert!(
            settled,
            "{library}: the stale complete was not settled: {history:?}"
        );
        assert_eq!(report["verdict"], "valid", "{library}: {report}");
    }
}

/// `conformance.py --clock`: the scenario with the server under libfaketime
/// and the library's clock frozen at each request's `clock_ms`; it checks
/// that every deadline is logical, that each `read`'s `clock_ms` (the
/// library's own `time.time()` or `Time.now`) equals the request's, and
/// that a reap one ms short of a deadline takes nothing and one ms past it
/// takes the job back.
fn conformance_on_the_walks_clock(dir: &str) {
    let a = listed(dir);
    let out = Command::new("python3")
        .arg(format!("{ROOT}/adapters/conformance.py"))
        .args([
            "--queue",
            &common::queue_name(),
            "--clock",
            "--",
            &a.command,
        ])
        .output()
        .expect("run python3");
    assert_eq!(out.status.code(), Some(0), "{}: {}", a.library, text(&out));
    assert!(text(&out).contains("PASS"), "{}", text(&out));
}

/// The history of a report, each event without its wall-clock fields: what
/// an exact replay gives again event for event.
fn events_sans_time(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["history"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            serde_json::json!({
                "index": e["index"], "process": e["process"], "type": e["type"],
                "f": e["f"], "value": e["value"],
            })
        })
        .collect()
}

/// `ackgap replay LINE --json` three times on the server ackgap starts:
/// each breaks `invariant`, and the three histories are one, event for
/// event (timestamps aside).
fn replays_exactly(dir: &str, line: &str, invariant: &str) {
    let a = listed(dir);
    let tmp = tempfile::tempdir().unwrap();
    let spec = format!("exec:{}/{line}", a.command);
    let mut first: Option<Vec<serde_json::Value>> = None;
    for run in 1..=3 {
        let out = ackgap_in(tmp.path(), &["replay", &spec, "--json"]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}: run {run}: {}",
            a.library,
            text(&out)
        );
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("one JSON object");
        let broke = report["invariants"].as_array().is_some_and(|rows| {
            rows.iter()
                .any(|r| r["invariant"] == invariant && r["verdict"] == "invalid")
        });
        assert!(
            broke,
            "{}: run {run} did not break {invariant}: {report}",
            a.library
        );
        let events = events_sans_time(&report);
        assert!(events.len() > 4, "{}: {report}", a.library);
        match &first {
            None => first = Some(events),
            Some(first) => assert_eq!(
                first, &events,
                "{}: run {run} of {line} gave another history",
                a.library
            ),
        }
    }
}

/// The queues that follow the walks' clock (their hello says
/// `follows_clock`), each with a replay line that breaks an invariant on
/// logical time (found by `ackgap exhaust --queue exec:adapters/Q/run`)
/// and that invariant.
macro_rules! on_the_walks_clock {
    ($($name:ident => $dir:literal, $line:literal, $invariant:literal);* $(;)?) => {
        mod walks_clock {
            $(mod $name {
                #[test]
                fn passes_the_conformance_scenario_with_its_library_on_the_walks_clock() {
                    super::super::conformance_on_the_walks_clock($dir)
                }
                #[test]
                fn a_replay_that_breaks_an_invariant_gives_one_history_three_times() {
                    super::super::replays_exactly($dir, $line, $invariant)
                }
            })*
        }
        /// The directories the macro names.
        const ON_THE_WALKS_CLOCK: &[&str] = &[$($dir),*];
    };
}

on_the_walks_clock!(
    rq => "rq", "marker/j1w2l100m2r1/e0.l0.t2000.r.c0", "fenced-settlement";
    celery => "celery", "marker/j1w2l100m2r1/e0.l0.t100.r.f0", "fenced-settlement";
    dramatiq => "dramatiq", "marker/j1w2l100m2r1/e0.l0.t100.r.f0", "fenced-settlement";
    arq => "arq", "marker/j1w2l100m2r1/e0.l0.t101.l0.s0", "fenced-settlement";
    bullmq => "bullmq", "marker/j1w2l100m2r1/e0.l0.f0.l0", "bounded-retries";
    sidekiq => "sidekiq", "marker/j1w2l100m2r1/e0.l0.f0.l0", "bounded-retries";
);

/// arq's stale Retry (issue 40): w0's in-progress key expired and w1
/// claimed the job; w0's Retry deleted w1's in-progress key, and w0
/// claimed the job again at once, before w1's lease's deadline. The
/// exhaust does not extend a path past its first break (the stale Retry
/// accepted: fenced-settlement), so this line is written by hand.
#[test]
fn arq_s_stale_retry_frees_a_live_lease_and_a_third_run_starts_before_its_deadline() {
    replays_exactly(
        "arq",
        "marker/j1w2l100m3r1/e0.l0.t101.l1.f0.l0",
        "lease-exclusive",
    )
}

#[test]
fn every_adapter_but_lmove_python_follows_the_walks_clock() {
    let mut following: Vec<&str> = ON_THE_WALKS_CLOCK.to_vec();
    following.push("lmove-python");
    following.sort();
    let mut listed = LISTED.to_vec();
    listed.sort();
    assert_eq!(
        following, listed,
        "tests/integration/queues.rs's on_the_walks_clock! rows"
    );
}
