//! Queues ackgap did not write, through the adapter protocol
//! (`--queue exec:COMMAND`, docs/adapter-protocol.md): BullMQ 3.4.4 through
//! its own Python package (`adapters/bullmq/run`, in the venv
//! `ci/install-adapters` builds), and `adapters/lmove-python/run`, a
//! standard-library adapter written from the protocol's document alone.
//!
//! What is asserted is what must hold for any correct harness: the adapters
//! pass the protocol's conformance scenario on a real Valkey, the document's
//! examples match its schema, the explorers and the chaos runner finish on
//! BullMQ with a verdict and a well-formed history, and a queue judged
//! through the protocol is judged as the same queue in process. What the
//! checkers find in BullMQ is the tool's to print (README: "What ackgap
//! finds in queues it did not write"), never a test's to expect.

use crate::common; // the server (`start`) and fresh queue names

use std::path::Path;
use std::process::{Command, Output};

use ackgap::server::{Persistence, Server};
use common::Backend;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const ACKGAP: &str = env!("CARGO_BIN_EXE_ackgap");

fn adapter(name: &str) -> String {
    format!("{ROOT}/adapters/{name}/run")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn valkey() -> Server {
    common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey")
}

/// `adapters/conformance.py` against `command` on `server`.
fn conformance(server: &Server, command: &str) -> Output {
    Command::new("python3")
        .arg(format!("{ROOT}/adapters/conformance.py"))
        .args(["--server", &server.url(), "--queue", &common::queue_name()])
        .args(["--", command])
        .output()
        .expect("run python3")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bullmq_adapter_passes_the_protocol_conformance_scenario_on_valkey() {
    let server = valkey().await;
    let out = conformance(&server, &adapter("bullmq"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("PASS"),
        "{}",
        text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stdlib_lmove_adapter_passes_the_protocol_conformance_scenario_on_valkey() {
    let server = valkey().await;
    let out = conformance(&server, &adapter("lmove-python"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("PASS"),
        "{}",
        text(&out)
    );
}

#[test]
fn every_example_of_the_protocol_document_is_a_valid_message() {
    let out = Command::new("python3")
        .arg(format!("{ROOT}/adapters/conformance.py"))
        .arg("--check-doc")
        .output()
        .expect("run python3");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

fn ackgap(dir: &Path, args: &[&str]) -> Output {
    Command::new(ACKGAP)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run ackgap")
}

#[test]
fn ackgap_chaos_on_bullmq_through_the_protocol_finishes_with_a_verdict_and_a_well_formed_history() {
    // The chaos runner starts a server of its own: every fault group,
    // server faults included, needs a server the tool owns.
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("bullmq.jsonl");
    let queue = format!("exec:{}", adapter("bullmq"));
    let out = ackgap(
        dir.path(),
        &[
            "chaos",
            "--queue",
            &queue,
            "--duration",
            "2s",
            "--jobs",
            "40",
            "--json",
            "--history",
            history.to_str().unwrap(),
        ],
    );
    let code = out.status.code();
    assert!(matches!(code, Some(0..=2)), "{code:?}: {}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let verdict = report["verdict"].as_str().unwrap_or_default();
    assert!(
        ["valid", "invalid", "unknown"].contains(&verdict),
        "{report}"
    );
    // The history is well formed (read refuses one that is not) and holds
    // the adapter's answers: leases were granted through the pipe.
    let events = ackgap::history::read_file(&history).expect("a well-formed history");
    let leased = events
        .iter()
        .filter(|e| e.f == ackgap::history::F::Lease && e.kind == ackgap::history::EventKind::Ok)
        .count();
    assert!(leased > 0, "no lease was granted through the protocol");
    let again = ackgap(dir.path(), &["check", history.to_str().unwrap()]);
    assert_eq!(
        again.status.code(),
        code,
        "the file alone is judged as the run was: {}",
        text(&again)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ackgap_explore_on_bullmq_through_the_protocol_finishes_three_walks_with_a_verdict() {
    let server = valkey().await;
    let dir = tempfile::tempdir().unwrap();
    let queue = format!("exec:{}", adapter("bullmq"));
    let out = ackgap(
        dir.path(),
        &[
            "explore",
            "--queue",
            &queue,
            "--seeds",
            "3",
            "--steps",
            "40",
            "--shrink-runs",
            "0",
            "--server",
            &server.url(),
        ],
    );
    let code = out.status.code();
    assert!(matches!(code, Some(0..=1)), "{code:?}: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("3 seeds,") && stdout.contains("verdict:"),
        "{}",
        text(&out)
    );
}

/// The per-seed lines of an explore run with the queue's name taken out
/// (`seed 3: invalid: fenced-settlement`), and its summary's step count.
fn verdicts(out: &Output) -> (Vec<String>, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seeds = stdout
        .lines()
        .filter(|l| l.starts_with("seed "))
        .map(|l| l.split("; reproduce").next().unwrap_or(l).to_owned())
        .collect();
    let steps = stdout
        .lines()
        .find(|l| l.contains(" seeds, "))
        .and_then(|l| l.split("; ").nth(1))
        .and_then(|l| l.split(" steps").next())
        .unwrap_or_default()
        .to_owned();
    (seeds, steps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmove_written_from_the_protocol_document_is_judged_seed_for_seed_as_lmove_in_process() {
    let server = valkey().await;
    let dir = tempfile::tempdir().unwrap();
    let run = |queue: &str| {
        ackgap(
            dir.path(),
            &[
                "explore",
                "--queue",
                queue,
                "--seeds",
                "40",
                "--shrink-runs",
                "0",
                "--server",
                &server.url(),
            ],
        )
    };
    let in_process = run("lmove");
    let piped = run(&format!("exec:{}", adapter("lmove-python")));
    assert!(
        matches!(in_process.status.code(), Some(0..=1)),
        "{}",
        text(&in_process)
    );
    assert_eq!(
        in_process.status.code(),
        piped.status.code(),
        "{}\n---\n{}",
        text(&in_process),
        text(&piped)
    );
    let (a, a_steps) = verdicts(&in_process);
    let (b, b_steps) = verdicts(&piped);
    assert_eq!(a, b, "the same seeds fail, with the same invariants");
    assert!(!a_steps.is_empty(), "{}", text(&in_process));
    assert_eq!(a_steps, b_steps, "the same steps were run");
}
