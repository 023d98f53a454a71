//! The user's own app (`--app MODULE:ATTR`): each Python adapter loads the
//! user's configured object (a Celery app, a Dramatiq broker, arq
//! `WorkerSettings`, an RQ `@job` function) from the working directory,
//! keeps its settings and says what it overrode. Per library, two sample
//! apps of `tests/adapters/apps/` that differ in one setting, replayed on
//! one schedule on logical time through the real library on a real Valkey,
//! give two verdicts: the setting changes what ackgap finds. Each verdict
//! asserted here is the one `ackgap replay` printed when the pair was
//! first run (the commands and their output are in the commit that added
//! this file); none is what a test expected.

use std::path::Path;
use std::process::Output;

use crate::common;
use crate::common::{ackgap_in, text};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `ackgap replay exec:adapters/DIR/run/LINE --app APP --json`, run in a
/// fresh folder holding the app's module (the user's project), as a user
/// runs it: the report, the run's output for messages, and the folder.
fn replay_with_app(
    dir: &str,
    module: &str,
    attr: &str,
    line: &str,
) -> (serde_json::Value, Output, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let file = format!("{module}.py");
    std::fs::copy(
        Path::new(ROOT).join("tests/adapters/apps").join(&file),
        tmp.path().join(&file),
    )
    .unwrap();
    let spec = format!("exec:{ROOT}/adapters/{dir}/run/{line}");
    let app = format!("{module}:{attr}");
    let out = ackgap_in(tmp.path(), &["replay", &spec, "--app", &app, "--json"]);
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{app}: not one JSON object ({e}): {}", text(&out)));
    (report, out, tmp)
}

/// The verdict of `invariant` in a replay's report.
fn verdict_of<'a>(report: &'a serde_json::Value, invariant: &str) -> &'a str {
    report["invariants"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["invariant"] == invariant))
        .and_then(|r| r["verdict"].as_str())
        .unwrap_or_else(|| panic!("no {invariant} row: {report}"))
}

/// Runs `line` with the app `module:attr` and checks what the tool said:
/// the exit code, the overall verdict, `invariant`'s verdict, that the
/// report names the app and the setting `setting` with `value` as the app
/// sets it, and that the command it prints to run it again carries the app
/// and, pasted, exits the same.
#[allow(clippy::too_many_arguments)] // one row of a table: each is a column
fn judged(
    dir: &str,
    (module, attr): (&str, &str),
    line: &str,
    (setting, value): (&str, &str),
    exit: i32,
    verdict: &str,
    invariant: &str,
    invariant_verdict: &str,
) {
    let (report, out, tmp) = replay_with_app(dir, module, attr, line);
    let app = &report["app"];
    assert_eq!(app["spec"], format!("{module}:{attr}"), "{report}");
    assert_eq!(app["settings"][setting], value, "{report}");
    assert!(
        app["overridden"].as_object().is_some_and(|o| !o.is_empty()),
        "the overrides are named: {report}"
    );
    assert_eq!(out.status.code(), Some(exit), "{module}: {}", text(&out));
    assert_eq!(report["verdict"], verdict, "{module}: {report}");
    assert_eq!(
        verdict_of(&report, invariant),
        invariant_verdict,
        "{module}: {report}"
    );
    // The line the text report prints (`  replay: ...`), pasted.
    let spec = format!("exec:{ROOT}/adapters/{dir}/run/{line}");
    let app = format!("{module}:{attr}");
    let printed = ackgap_in(tmp.path(), &["replay", &spec, "--app", &app]);
    let stdout = String::from_utf8_lossy(&printed.stdout);
    let again = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: "))
        .unwrap_or_else(|| panic!("no replay line: {}", text(&printed)));
    assert!(
        again.starts_with(&format!("ACKGAP_APP={app} ackgap replay ")),
        "{again}"
    );
    let pasted = common::paste(again, tmp.path());
    assert_eq!(
        pasted.status.code(),
        Some(exit),
        "{again}: {}",
        text(&pasted)
    );
}

/// The line each library's pair replays: jobs, workers, lease, attempts
/// and reap limit, then the steps.
mod line {
    /// w0 takes the job and dies holding it; past the visibility timeout
    /// (the apps' 60 s) the reaper runs and w1 leases and completes.
    pub const CRASH_AFTER_LEASE: &str = "marker/j1w2l100m2r1/e0.l0.k0.t60001.r.l1.c1";
    /// Two attempts allowed (max_attempts 2): w0 fails the job twice and
    /// leases a third time.
    pub const FAIL_TWICE: &str = "marker/j1w2l100m2r1/e0.l0.f0.l0.f0.l0";
    /// The job runs and completes, then the producer enqueues its id again
    /// (a retried publish), and w0 leases and completes whatever it gets.
    pub const ENQUEUE_AGAIN_AFTER_DONE: &str = "marker/j1w2l100m2r1/e0.l0.c0.e0.l0.c0";
}

/// Celery's default early ack (task_acks_late=False: acked when the task
/// starts) loses the job of a worker that dies running it: no-loss breaks.
#[test]
fn celery_without_acks_late_loses_the_job_of_a_worker_that_dies_after_the_lease() {
    judged(
        "celery",
        ("celery_early_ack", "app"),
        line::CRASH_AFTER_LEASE,
        ("task_acks_late", "False"),
        1,
        "invalid",
        "no-loss",
        "invalid",
    );
}

/// The same app with task_acks_late=True: the unacked message is restored
/// past the visibility timeout and runs again; every invariant holds.
#[test]
fn celery_with_acks_late_redelivers_the_job_of_a_worker_that_dies_after_the_lease() {
    judged(
        "celery",
        ("celery_late_ack", "app"),
        line::CRASH_AFTER_LEASE,
        ("task_acks_late", "True"),
        0,
        "valid",
        "no-loss",
        "valid",
    );
}

/// Dramatiq's default Retries honours the message's max_retries (ackgap's
/// max_attempts - 1): the second failure is dead, no third lease.
#[test]
fn dramatiq_s_default_retries_stop_at_the_message_s_max_retries() {
    judged(
        "dramatiq",
        ("dramatiq_default", "broker"),
        line::FAIL_TWICE,
        (
            "Retries",
            "max_retries 20, min_backoff 15000 ms, max_backoff 604800000 ms, retry_when None",
        ),
        0,
        "valid",
        "bounded-retries",
        "valid",
    );
}

/// Retries(retry_when=...) ignores max_retries, the message's included: a
/// job of two attempts is leased a third time, bounded-retries breaks.
#[test]
fn dramatiq_s_retry_when_retries_past_the_message_s_max_retries() {
    judged(
        "dramatiq",
        ("dramatiq_retry_when", "broker"),
        line::FAIL_TWICE,
        (
            "Retries",
            "max_retries 20, min_backoff 15000 ms, max_backoff 604800000 ms, retry_when should_retry",
        ),
        1,
        "invalid",
        "bounded-retries",
        "invalid",
    );
}

/// arq refuses a job id whose result it keeps (keep_result, 3600 s by
/// default): the second enqueue is a duplicate.
#[test]
fn arq_keeping_results_refuses_a_done_job_s_id_again() {
    judged(
        "arq",
        ("arq_default", "WorkerSettings"),
        line::ENQUEUE_AGAIN_AFTER_DONE,
        ("keep_result", "3600 (arq's default)"),
        0,
        "valid",
        "admission",
        "valid",
    );
}

/// With keep_result = 0 nothing of a done job is left: its id is admitted
/// again and the job runs twice (admission and settle-once break).
#[test]
fn arq_without_results_admits_a_done_job_s_id_again_and_runs_it_twice() {
    judged(
        "arq",
        ("arq_no_result", "WorkerSettings"),
        line::ENQUEUE_AGAIN_AFTER_DONE,
        ("keep_result", "0"),
        1,
        "invalid",
        "admission",
        "invalid",
    );
}

/// RQ's `unique=True` enqueue refuses the id of a finished job it keeps
/// (result_ttl, 500 s by default).
#[test]
fn rq_keeping_finished_jobs_refuses_a_done_job_s_id_again() {
    judged(
        "rq",
        ("rq_default", "send_email"),
        line::ENQUEUE_AGAIN_AFTER_DONE,
        ("result_ttl", "500"),
        0,
        "valid",
        "admission",
        "valid",
    );
}

/// `@job(..., result_ttl=0)`: RQ deletes the finished job at once, its id
/// is admitted again and the job runs twice.
#[test]
fn rq_with_result_ttl_0_admits_a_done_job_s_id_again_and_runs_it_twice() {
    judged(
        "rq",
        ("rq_no_result", "send_email"),
        line::ENQUEUE_AGAIN_AFTER_DONE,
        ("result_ttl", "0"),
        1,
        "invalid",
        "settle-once",
        "invalid",
    );
}

/// An app that does not import is the adapter's refused hello, naming the
/// module; ackgap stops before any step (exit 78, the adapter's fault).
#[test]
fn an_app_that_does_not_import_stops_the_run_naming_the_module() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = format!(
        "exec:{ROOT}/adapters/celery/run/{}",
        line::CRASH_AFTER_LEASE
    );
    let out = ackgap_in(tmp.path(), &["replay", &spec, "--app", "nosuch_module:app"]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(78), "{all}");
    assert!(
        all.contains("hello refused") && all.contains("cannot import module 'nosuch_module'"),
        "{all}"
    );
}

/// An adapter that does not load apps (serve-adapter's lmove) is refused
/// when an app is asked for: it would judge its own configuration under
/// the user's name.
#[test]
fn an_adapter_that_ignores_the_app_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = format!(
        "exec:{} serve-adapter --queue lmove/marker/j1w1l100m2r1/e0.l0.c0",
        env!("CARGO_BIN_EXE_ackgap")
    );
    let out = ackgap_in(tmp.path(), &["replay", &spec, "--app", "myproj.celery:app"]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(78), "{all}");
    assert!(all.contains("has no `app`"), "{all}");
}

/// `--app` beside a queue that is not behind the protocol is a usage error,
/// before any server starts; so is an app that is not MODULE:ATTR.
#[test]
fn app_needs_an_exec_queue_and_a_module_and_an_attribute() {
    let tmp = tempfile::tempdir().unwrap();
    let out = ackgap_in(
        tmp.path(),
        &["explore", "--queue", "lmove", "--app", "myproj:app"],
    );
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(text(&out).contains("needs a queue behind the adapter protocol"));
    let out = ackgap_in(
        tmp.path(),
        &["explore", "--queue", "exec:true", "--app", "myproj"],
    );
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(text(&out).contains("is not MODULE:ATTR"), "{}", text(&out));
}
