//! The adapter protocol's document and its proof (`--queue exec:COMMAND`,
//! docs/adapter-protocol.md): the document's examples match its schema, and
//! `adapters/lmove-python/run`, a standard-library adapter written from the
//! document alone, is judged seed for seed as the same queue in process.
//! Every adapter's conformance, crash, explore and chaos tests are
//! generated from the list in `queues` (tests/integration/queues.rs).

use crate::common::{ackgap_in, text};
use crate::queues::valkey; // the helpers every adapter test shares

use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn adapter(name: &str) -> String {
    format!("{ROOT}/adapters/{name}/run")
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

/// The per-seed lines of an explore run with the queue's name taken out
/// (`seed 3: invalid: fenced-settlement`), and its summary's step count.
fn verdicts(out: &Output) -> (Vec<String>, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seeds = stdout
        .lines()
        .filter(|l| l.starts_with("seed "))
        .map(|l| l.split("; replay").next().unwrap_or(l).to_owned())
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
        ackgap_in(
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
