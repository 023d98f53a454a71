//! The adapter protocol (`--queue exec:COMMAND`), its client side: a
//! deliberately broken adapter (`tests/adapters/broken.py`) shows that a
//! slow answer is an unknown outcome and the run goes on, that a garbage
//! line, an exit and an answer never asked for stop the run with an error
//! naming the line (the history kept, no child left), and that answers out
//! of order are matched by id; `ackgap serve-adapter` shows that a queue
//! judged through the protocol is judged as in process; and the CLI classes
//! a bad `--queue` by its exit code.

use crate::common; // the server (`start`) and fresh queue names

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use ackgap::adapter::Settled;
use ackgap::adapter::{open, Adapter, EnqueueOptions, Exec, ExecOptions, OpenError, QueueError};
use ackgap::check::Verdict;
use ackgap::consumer::Kind;
use ackgap::explore::{explore_on, Line, Subject};
use ackgap::history::{Recorded, Recorder};
use ackgap::queue::Queue;
use ackgap::server::{Persistence, Server};
use common::Backend;

const BROKEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/adapters/broken.py");
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

/// The broken adapter in `mode`, misbehaving on `op`, with a short request
/// timeout (the slow mode answers 1.5 s late).
async fn broken(queue: &Queue, server: &Server, mode: &str, op: &str, extra: &str) -> Exec {
    let options = ExecOptions {
        request_timeout: Duration::from_millis(500),
        ..ExecOptions::default()
    };
    let command = format!("python3 {BROKEN} {mode} {op} {extra}");
    Exec::start(&command, queue, &server.url(), options)
        .await
        .expect("the broken adapter says hello")
}

async fn enqueue(exec: &Exec, job: &str) {
    let options = EnqueueOptions::default();
    exec.enqueue(job, b"p", options, Some(0)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_answer_is_an_unknown_outcome_and_the_run_goes_on() {
    let (server, queue) = valkey().await;
    let exec = broken(&queue, &server, "slow", "complete", "").await;
    enqueue(&exec, "JOB-1").await;
    let lease = exec.lease("w0", 100, Some(0)).await.unwrap().unwrap();
    let slow = exec.complete(&lease.id, lease.token).await;
    assert!(
        matches!(slow, Err(QueueError::Unknown { .. })),
        "a late answer is unknown (info): {slow:?}"
    );
    // The late answer arrives while the next requests are in flight: it is
    // dropped, and they are answered.
    enqueue(&exec, "JOB-2").await;
    let next = exec.lease("w0", 100, Some(0)).await.unwrap().unwrap();
    assert_eq!(next.id, "JOB-2");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let read = exec
        .read()
        .await
        .expect("the run goes on past the late answer");
    assert_eq!(read.jobs["JOB-1"], "done");
    assert_eq!(read.jobs["JOB-2"], "active");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_line_stops_the_run_with_an_error_naming_the_line() {
    let (server, queue) = valkey().await;
    let exec = broken(&queue, &server, "garbage", "lease", "").await;
    enqueue(&exec, "JOB-1").await;
    let garbage = exec.lease("w0", 100, Some(0)).await;
    let Err(QueueError::Adapter { message, .. }) = &garbage else {
        panic!("a garbage line is a protocol error: {garbage:?}");
    };
    assert!(
        message.contains("is not JSON") && message.contains("this is not JSON <2>"),
        "{message}"
    );
    let later = exec.read().await;
    assert!(
        matches!(&later, Err(e @ QueueError::Adapter { message: m, .. }) if e.is_fatal() && m == message),
        "every later call fails the same way: {later:?}"
    );
}

/// True when process `pid` no longer runs (gone, or a zombie nobody has
/// reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_that_exits_mid_run_is_an_error_with_the_history_kept_and_no_child_left() {
    let (server, queue) = valkey().await;
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let extra = format!("--pidfile {}", pidfile.display());
    let exec = broken(&queue, &server, "exit", "lease", &extra).await;
    let sh = exec.pid().expect("the child's pid");
    let python: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let rec = Recorder::in_memory();
    let recorded = Recorded::new(Arc::new(exec.clone()), &rec, "w0");
    recorded
        .enqueue("JOB-1", b"p", EnqueueOptions::default(), Some(0))
        .await
        .unwrap();
    let exited = recorded.lease("w0", 100, Some(0)).await;
    let Err(e @ QueueError::Adapter { message, .. }) = &exited else {
        panic!("an exit is a protocol error: {exited:?}");
    };
    assert!(e.is_fatal());
    assert!(
        message.contains("closed its stdout") && message.contains("exit status: 3"),
        "{message}"
    );
    assert!(exec.read().await.unwrap_err().is_fatal());
    // The history so far is kept: the enqueue's ok, the lease as info.
    let events = rec.events();
    let kinds: Vec<String> = events
        .iter()
        .map(|e| format!("{:?} {:?}", e.kind, e.f))
        .collect();
    assert_eq!(
        kinds,
        ["Invoke Enqueue", "Ok Enqueue", "Invoke Lease", "Info Lease"],
        "{events:?}"
    );
    assert!(gone(python), "the adapter {python} is gone");
    assert!(gone(sh), "its sh {sh} is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_requests_in_flight_answered_out_of_order_are_matched_by_id() {
    let (server, queue) = valkey().await;
    let exec = broken(&queue, &server, "reorder", "complete", "").await;
    enqueue(&exec, "JOB-1").await;
    let lease = exec.lease("w0", 100, Some(0)).await.unwrap().unwrap();
    // The adapter holds the first complete until the second arrives, then
    // answers the second first.
    let (first, second) = tokio::join!(
        exec.complete(&lease.id, lease.token),
        exec.complete("JOB-404", 1)
    );
    assert_eq!(first.unwrap(), Settled::Settled);
    assert_eq!(second.unwrap(), Settled::Missing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_to_a_request_never_asked_stops_the_run() {
    let (server, queue) = valkey().await;
    let exec = broken(&queue, &server, "unasked", "lease", "").await;
    let unasked = exec.lease("w0", 100, Some(0)).await;
    let Err(QueueError::Adapter { message, .. }) = &unasked else {
        panic!("an answer never asked for is a protocol error: {unasked:?}");
    };
    assert!(
        message.contains("never asked (id 1001)") && message.contains("in_reply_to"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_without_a_required_operation_is_refused_by_name() {
    let (server, queue) = valkey().await;
    let command = format!("exec:python3 {BROKEN} refuse -");
    let refused = open(&command, &queue, &server.url()).await;
    let Err(e @ OpenError::Exec(_)) = &refused else {
        panic!(
            "a hello without complete is refused: {:?}",
            refused.map(|a| a.name().to_owned())
        );
    };
    assert!(
        e.to_string()
            .contains("required operations missing: complete"),
        "{e}"
    );
}

/// Each invariant's verdict, per seed.
type Verdicts = Vec<(u64, Vec<(&'static str, Verdict)>)>;

async fn verdicts(subject: &Subject, seeds: std::ops::Range<u64>) -> Verdicts {
    let mut all = Vec::new();
    for seed in seeds {
        let report = explore_on(subject, seed, 100).await.expect("the walk ran");
        let each = report
            .invariants
            .iter()
            .map(|r| (r.invariant, r.verdict))
            .collect();
        all.push((seed, each));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmove_through_serve_adapter_is_judged_as_in_process_fenced_settlement_included() {
    let (server, queue) = valkey().await;
    let consumer = || Arc::from(Kind::Marker.consumer());
    let in_process = Subject::new(
        ackgap::adapter::by_name("lmove", &queue).unwrap(),
        consumer(),
    );
    let command = format!("exec:{ACKGAP} serve-adapter --queue lmove");
    let piped = Subject::new(
        open(&command, &queue, &server.url()).await.unwrap(),
        consumer(),
    );
    assert!(!piped.adapter.capabilities().fences);
    // Seeds 0..40 of 100 steps: lmove's stale LREM shows in some of them.
    let seeds = 0..40;
    let direct = verdicts(&in_process, seeds.clone()).await;
    let through = verdicts(&piped, seeds).await;
    assert_eq!(direct, through, "the same verdicts through the protocol");
    let fenced = through
        .iter()
        .filter(|(_, each)| each.contains(&("fenced-settlement", Verdict::Invalid)))
        .count();
    assert!(
        fenced > 0,
        "lmove's fenced-settlement finding shows through the protocol"
    );
}

#[test]
fn an_exec_replay_line_keeps_a_command_with_slashes() {
    let text = "exec:adapters/bullmq/run --x 1/marker/j2w2l100m3r1/e0.l1.c1";
    let line: Line = text.parse().unwrap();
    assert_eq!(line.queue, "exec:adapters/bullmq/run --x 1");
    assert_eq!(line.to_string(), text);
    assert_eq!(
        ackgap::explore::line::shell_word(text),
        format!("'{text}'"),
        "a printed replay command quotes it"
    );
    assert_eq!(
        ackgap::explore::line::shell_word("lmove/marker/j2w2l100m3r1/e0"),
        "lmove/marker/j2w2l100m3r1/e0"
    );
}

/// `ackgap explore --queue QUEUE` with one short walk: its exit code and
/// stderr.
fn explore_cli(queue: &str) -> (Option<i32>, String) {
    let out = Command::new(ACKGAP)
        .args(["explore", "--steps", "5", "--queue", queue])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unknown_queue_is_a_usage_error() {
    let (code, stderr) = explore_cli("nope");
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("unknown queue \"nope\"") && stderr.contains("exec:COMMAND"),
        "{stderr}"
    );
}

#[test]
fn an_explore_walk_stopped_by_an_adapter_exit_keeps_its_history_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let queue = format!("exec:python3 {BROKEN} exit lease");
    let out = Command::new(ACKGAP)
        .args(["explore", "--steps", "30", "--queue", &queue])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains("exit status: 3"),
        "the error names the exit: {stderr}"
    );
    let path = stderr
        .split("the history so far is in ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("the error names the kept history: {stderr}"));
    let events = ackgap::history::read_file(&dir.path().join(path))
        .expect("the kept history is a well-formed history");
    assert!(
        events
            .iter()
            .any(|e| e.f == ackgap::history::F::Lease && e.kind == ackgap::history::EventKind::Info),
        "it ends with the lease the adapter never answered: {events:?}"
    );
}

#[test]
fn an_exec_command_not_found_could_not_start_exits_78_and_says_so() {
    let (code, stderr) = explore_cli("exec:ackgap-no-such-adapter");
    assert_eq!(code, Some(78), "{stderr}");
    assert!(
        stderr.contains("no answer to hello") && stderr.contains("exit status: 127"),
        "{stderr}"
    );
}

/// An adapter's stderr goes to the run's log, not the terminal, and its
/// last lines are quoted when it dies before its hello (exit 78); with
/// `--verbose` the terminal has it as written, and no log is made.
#[test]
fn an_adapter_s_stderr_goes_to_its_log_and_its_last_lines_are_quoted_when_it_dies() {
    let dir = tempfile::tempdir().unwrap();
    // Fifteen lines, then one that is not UTF-8.
    let queue = "exec:for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do echo library-log-$i >&2; done; printf 'bad-\\377-byte\\n' >&2; exit 3";
    let run = |verbose: bool| {
        let mut cmd = Command::new(ACKGAP);
        cmd.args(["explore", "--steps", "5", "--queue", queue])
            .current_dir(dir.path());
        if verbose {
            cmd.arg("--verbose");
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(false);
    assert_eq!(code, Some(78), "{stderr}");
    let log = dir.path().join("target/ackgap/explore/adapter.log");
    assert!(
        stderr.contains(
            "the last 12 lines of its stderr (all of it is in target/ackgap/explore/adapter.log):\n  | library-log-5\n"
        ) && stderr.contains("  | library-log-15\n  | bad-\u{FFFD}-byte"),
        "{stderr}"
    );
    // Only the quoted tail reached the terminal, each line once.
    assert!(!stderr.contains("library-log-4\n"), "{stderr}");
    assert_eq!(stderr.matches("library-log-15").count(), 1, "{stderr}");
    let logged = std::fs::read(&log).expect("the adapter's log");
    // The log holds the bytes as written.
    assert!(logged.ends_with(b"bad-\xff-byte\n"));
    let logged = String::from_utf8_lossy(&logged);
    assert!(logged.starts_with("== exec:for i in"), "{logged}");
    assert_eq!(
        logged
            .lines()
            .filter(|l| l.starts_with("library-log-"))
            .count(),
        15
    );
    std::fs::remove_file(&log).unwrap();
    let (code, stderr) = run(true);
    assert_eq!(code, Some(78), "{stderr}");
    assert!(stderr.contains("library-log-1\n"), "{stderr}");
    assert!(!log.exists(), "--verbose makes no log");
}

#[test]
fn an_exec_hello_refused_could_not_start_exits_78_and_says_why() {
    let (code, stderr) = explore_cli(&format!("exec:python3 {BROKEN} refuse -"));
    assert_eq!(code, Some(78), "{stderr}");
    assert!(
        stderr.contains("hello refused: required operations missing: complete"),
        "{stderr}"
    );
}

#[test]
fn explore_through_serve_adapter_passes_and_prints_a_pasteable_reproduce_line() {
    let queue = format!("exec:{ACKGAP} serve-adapter --queue reference");
    let out = Command::new(ACKGAP)
        .args(["explore", "--steps", "50", "--queue", &queue])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(&format!("--queue '{queue}'")), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_through_serve_adapter_cuts_each_worker_through_its_own_proxy_port_and_the_reference_queue_holds(
) {
    use ackgap::chaos::runner::{self, ChaosConfig};
    let dir = tempfile::tempdir().unwrap();
    let mut server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let cfg = ChaosConfig {
        duration_ms: 3_000,
        jobs: 60,
        faults: "drop-reply,reset-connection,partition,crash-ack-gap"
            .parse()
            .unwrap(),
        queue: format!("exec:{ACKGAP} serve-adapter --queue reference"),
        queue_name: common::queue_name(),
        ..ChaosConfig::new(7)
    };
    let history = dir.path().join("exec.jsonl");
    let report = runner::run(&mut server, cfg, Some(history), None)
        .await
        .expect("the chaos run completes");
    server.stop().await.unwrap();
    // The network faults hit the workers' connections only through their
    // proxy ports: firing, they show the hello's `connections` were used.
    assert!(
        report.never_fired.is_empty(),
        "never fired: {:?}",
        report.never_fired
    );
    let bad: Vec<_> = report
        .invariants
        .iter()
        .filter(|r| r.verdict != Verdict::Valid)
        .map(|r| (r.invariant, &r.violations))
        .collect();
    assert_eq!(report.verdict, Verdict::Valid, "{bad:?}");
}

/// A user's own queue: the reference queue under another name.
struct Mine(ackgap::adapter::Reference);

impl ackgap::adapter::Wrapper for Mine {
    fn inner(&self) -> &dyn Adapter {
        &self.0
    }

    fn name(&self) -> &str {
        "mine"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_runs_a_users_own_queue_and_consumer_one_connection_per_worker() {
    use ackgap::chaos::runner::{self, ChaosConfig, ChaosSubject, Interrupt, OpenAdapter};
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let cfg = ChaosConfig {
        duration_ms: 2_000,
        jobs: 40,
        faults: "drop-reply,partition,crash-ack-gap".parse().unwrap(),
        queue: "mine".into(),
        queue_name: common::queue_name(),
        ..ChaosConfig::new(3)
    };
    let opened = Arc::new(AtomicU64::new(0));
    let open: OpenAdapter = {
        let (opened, name) = (Arc::clone(&opened), cfg.queue_name.clone());
        Arc::new(move |url: String| {
            let (opened, name) = (Arc::clone(&opened), name.clone());
            Box::pin(async move {
                opened.fetch_add(1, Ordering::SeqCst);
                let client = redis::Client::open(url).map_err(|e| e.to_string())?;
                let queue = Queue::connect(&client, &name)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Arc::new(Mine(ackgap::adapter::Reference::new(queue))) as Arc<dyn Adapter>)
            })
        })
    };
    let subject = ChaosSubject {
        open,
        consumer: Arc::from(Kind::Marker.consumer()),
    };
    let workers = cfg.workers as u64;
    let report = runner::run_with(
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
    assert_eq!(
        opened.load(Ordering::SeqCst),
        workers + 1,
        "one per worker, one direct"
    );
    assert!(
        report.never_fired.is_empty(),
        "never fired: {:?}",
        report.never_fired
    );
    assert_eq!(report.verdict, Verdict::Valid, "{:?}", report.invariants);
}

/// A queue whose workers ignore the fault proxy's URL and reach the server
/// directly (as an `exec:` adapter's cluster client does): a partition or a
/// connection reset of a worker touches nothing, and the report says they
/// never fired, never that they did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_and_a_reset_that_touched_no_connection_are_reported_never_fired() {
    use ackgap::chaos::fault::FaultKind;
    use ackgap::chaos::runner::{self, ChaosConfig, ChaosSubject, Interrupt, OpenAdapter};
    let mut server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let cfg = ChaosConfig {
        duration_ms: 2_000,
        jobs: 20,
        faults: "partition,reset-connection".parse().unwrap(),
        queue: "mine".into(),
        queue_name: common::queue_name(),
        ..ChaosConfig::new(3)
    };
    let open: OpenAdapter = {
        let (direct, name) = (server.url(), cfg.queue_name.clone());
        Arc::new(move |_proxied: String| {
            let (direct, name) = (direct.clone(), name.clone());
            Box::pin(async move {
                let client = redis::Client::open(direct).map_err(|e| e.to_string())?;
                let queue = Queue::connect(&client, &name)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Arc::new(Mine(ackgap::adapter::Reference::new(queue))) as Arc<dyn Adapter>)
            })
        })
    };
    let subject = ChaosSubject {
        open,
        consumer: Arc::from(Kind::Marker.consumer()),
    };
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("past-the-proxy.jsonl");
    let report = runner::run_with(
        &mut server,
        cfg,
        Some(subject),
        Some(history.clone()),
        None,
        Interrupt::new(),
    )
    .await
    .expect("the chaos run completes");
    server.stop().await.unwrap();
    for kind in [FaultKind::Partition, FaultKind::ResetConnection] {
        assert!(
            report.injected.get(&kind).copied().unwrap_or(0) > 0,
            "seed 3 injects {kind}: injected {:?}",
            report.injected
        );
        assert!(
            report.never_fired.contains(&kind) && !report.fired.contains_key(&kind),
            "{kind} touched no connection yet counted as fired: fired {:?}, never fired {:?}",
            report.fired,
            report.never_fired
        );
    }
    let text = std::fs::read_to_string(&history).unwrap();
    assert!(
        text.contains("touched nothing: w"),
        "the reset's inject names what it touched"
    );
    assert!(
        text.contains("opened none while cut off (not fired)"),
        "the partition's heal names what it touched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_walks_replay_line_carries_its_command_and_replays_to_the_same_finding() {
    let (server, queue) = valkey().await;
    let command = format!("exec:{ACKGAP} serve-adapter --queue lmove");
    let piped = Subject::new(
        open(&command, &queue, &server.url()).await.unwrap(),
        Arc::from(Kind::Marker.consumer()),
    );
    let mut found = None;
    for seed in 0..100 {
        let report = explore_on(&piped, seed, 100).await.expect("the walk ran");
        if report
            .findings()
            .iter()
            .any(|(i, _)| *i == "fenced-settlement")
        {
            found = Some(report);
            break;
        }
    }
    let report = found.expect("a seed of 0..100 shows lmove's stale LREM");
    let line: Line = report.line.parse().unwrap();
    assert_eq!(line.queue, command);
    assert!(
        report.replay.contains(&format!("--queue '{command}'")),
        "{}",
        report.replay
    );
    let out = Command::new(ACKGAP)
        .args(["replay", "--json", &report.line])
        .output()
        .unwrap();
    let replayed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{replayed}");
    let fenced = replayed["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["invariant"] == "fenced-settlement")
        .unwrap();
    assert_eq!(fenced["verdict"], "invalid", "{fenced}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_names_its_worker_by_role_and_a_settle_goes_out_as_its_lessee() {
    let (server, queue) = valkey().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let extra = format!("--log {}", log.display());
    let exec = broken(&queue, &server, "ok", "-", &extra).await;
    enqueue(&exec, "JOB-1").await;
    let lease = exec.lease("w1", 100, Some(0)).await.unwrap().unwrap();
    exec.complete(&lease.id, lease.token).await.unwrap();
    exec.read().await.unwrap();
    let w3 = exec.for_worker("w3");
    w3.read().await.unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "hello -",
            "enqueue producer",
            "lease w1",
            "complete w1",
            "read checker",
            "read w3"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_adapter_passes_the_conformance_scenario_and_answers_the_three_shared_cases_like_the_kits(
) {
    // The conformance scenario checks a second hello (refused), a malformed
    // request (refused) and an unknown op (unsupported): the Rust side of
    // the protocol answers them as the Python and Ruby kits do.
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/adapters/conformance.py"
        ))
        .args(["--server", &server.url(), "--queue", &common::queue_name()])
        .args(["--", ACKGAP, "serve-adapter", "--queue", "reference"])
        .output()
        .expect("run python3");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("PASS"), "{text}");
}

/// The requests `broken.py --log` logged, one `op worker` a line.
fn logged(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_sends_crash_exactly_when_a_worker_crashes_and_the_history_records_the_crash_as_before(
) {
    let (server, queue) = valkey().await;
    let dir = tempfile::tempdir().unwrap();
    // e0 l0 k0: w0 crashes holding JOB-0; the second k0 holds nothing (no
    // crash); s0: the crashed worker acks its stale lease.
    let schedule = ackgap::explore::op::Schedule::parse("e0 l0 k0 k0 s0").unwrap();
    for listed in [true, false] {
        let log = dir.path().join(format!("log-{listed}"));
        let flag = if listed { "--crash" } else { "" };
        let command = format!("exec:python3 {BROKEN} ok - --log {} {flag}", log.display());
        let subject = Subject::new(
            open(&command, &queue, &server.url()).await.unwrap(),
            Arc::from(Kind::Marker.consumer()),
        );
        let report = ackgap::explore::walk::replay_on(&subject, 0, &schedule)
            .await
            .expect("the walk ran");
        let crashes: Vec<&ackgap::history::Event> = report
            .history
            .iter()
            .filter(|e| e.f == ackgap::history::F::Crash)
            .collect();
        // One crash, invoke and ok, by w0 holding JOB-0's lease 1: as before.
        assert_eq!(crashes.len(), 2, "{crashes:?}");
        assert!(crashes
            .iter()
            .all(|e| e.process == "w0" && e.job.as_deref() == Some("JOB-0") && e.token == Some(1)));
        drop(subject);
        let lines = logged(&log);
        let sent: Vec<&String> = lines.iter().filter(|l| l.starts_with("crash")).collect();
        if listed {
            assert_eq!(sent, ["crash w0"], "{lines:?}");
            let at = lines.iter().position(|l| l == "crash w0").unwrap();
            assert_eq!(lines[at - 1], "lease w0", "{lines:?}");
        } else {
            assert!(sent.is_empty(), "crash sent unlisted: {lines:?}");
        }
    }
}

const FENCED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/adapters/fenced.py");

/// `ackgap VERB --queue exec:python3 fenced.py FLAGS ARGS...`: its exit code
/// and output.
fn fenced_cli(verb: &str, flags: &str, args: &[&str]) -> (Option<i32>, String) {
    let queue = format!("exec:python3 {FENCED} {flags}");
    let out = Command::new(ACKGAP)
        .args([verb, "--queue", &queue])
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_queue_with_random_tokens_is_valid_in_explore_and_a_stale_ack_it_accepts_is_caught(
) {
    let (server, queue) = valkey().await;
    let consumer = || Arc::from(Kind::Marker.consumer());
    let correct = Subject::new(
        open(&format!("exec:python3 {FENCED}"), &queue, &server.url())
            .await
            .unwrap(),
        consumer(),
    );
    assert_eq!(
        correct.adapter.capabilities().tokens,
        ackgap::adapter::Tokens::Opaque
    );
    // Before tokens were ordered by the history, half of these walks were
    // structure-invalid ("attempts decreased").
    for seed in 0..20 {
        let report = explore_on(&correct, seed, 60).await.expect("the walk ran");
        assert_eq!(report.verdict, Verdict::Valid, "{}", report.failure_text());
    }
    drop(correct);
    let broken = Subject::new(
        open(
            &format!("exec:python3 {FENCED} --stale-complete"),
            &queue,
            &server.url(),
        )
        .await
        .unwrap(),
        consumer(),
    );
    // w0 crashes holding JOB-0, the reaper takes it back, w0 leases it
    // again, and acks the stale lease: the broken queue accepts it.
    let schedule = ackgap::explore::op::Schedule::parse("e0 l0 k0 t1000 r l0 s0").unwrap();
    let report = ackgap::explore::walk::replay_on(&broken, 0, &schedule)
        .await
        .expect("the walk ran");
    let fenced = report
        .invariants
        .iter()
        .find(|r| r.invariant == "fenced-settlement")
        .unwrap();
    assert_eq!(
        fenced.verdict,
        Verdict::Invalid,
        "{}",
        report.failure_text()
    );
    let structure = report
        .invariants
        .iter()
        .find(|r| r.invariant == "structure")
        .unwrap();
    assert_eq!(structure.verdict, Verdict::Valid, "{structure:?}");
}

#[test]
fn a_fenced_queue_with_random_tokens_is_valid_in_exhaust_and_chaos() {
    let (code, text) = fenced_cli("exhaust", "", &["--depth", "4", "--jobs", "1"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("verdict: valid"), "{text}");
    let (code, text) = fenced_cli("chaos", "", &["--duration", "2s", "--jobs", "30"]);
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn a_queue_whose_leases_expire_strictly_after_their_deadline_is_valid_in_explore_exhaust_and_chaos()
{
    // Before the heal moved past the deadline, seed 22 of these was
    // no-loss invalid ("at the end it is active").
    let (code, text) = fenced_cli("explore", "--strict", &["--seeds", "30", "--steps", "60"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = fenced_cli("exhaust", "--strict", &["--depth", "4", "--jobs", "1"]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = fenced_cli("chaos", "--strict", &["--duration", "2s", "--jobs", "30"]);
    assert_eq!(code, Some(0), "{text}");
}

/// The first seed whose workload draws for a chaos run of `jobs` jobs
/// (default leases) satisfy `want`.
fn seed_drawing(jobs: usize, want: impl Fn(&ackgap::chaos::draws::Draws, u64) -> bool) -> u64 {
    use ackgap::chaos::runner::ChaosConfig;
    (0..10_000)
        .find(|seed| {
            let cfg = ChaosConfig {
                jobs,
                ..ChaosConfig::new(*seed)
            };
            want(&cfg.draws(), *seed)
        })
        .expect("some seed draws it")
}

/// `ackgap chaos --json` on `fenced.py FLAGS` with `seed`, `jobs` jobs,
/// `duration` and no fault: its exit code and JSON report.
fn fenced_chaos(
    flags: &str,
    seed: u64,
    jobs: usize,
    duration: &str,
) -> (Option<i32>, serde_json::Value) {
    let queue = format!("exec:python3 {FENCED} {flags}");
    let (seed, jobs) = (seed.to_string(), jobs.to_string());
    let out = Command::new(ACKGAP)
        .args(["chaos", "--queue", &queue, "--seed", &seed, "--jobs", &jobs])
        .args(["--duration", duration, "--faults", "none", "--json"])
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

/// [`fenced_chaos`] on `fenced.py BROKEN` and on the correct `fenced.py`
/// with the same seed (the same draws), side by side.
#[allow(clippy::type_complexity)]
fn fenced_chaos_pair(
    broken: &str,
    seed: u64,
    jobs: usize,
    duration: &str,
) -> (
    (Option<i32>, serde_json::Value),
    (Option<i32>, serde_json::Value),
) {
    std::thread::scope(|scope| {
        let correct = scope.spawn(|| fenced_chaos("", seed, jobs, duration));
        let broken = fenced_chaos(broken, seed, jobs, duration);
        (broken, correct.join().unwrap())
    })
}

/// The report of `invariant` in a chaos JSON report.
fn invariant<'a>(report: &'a serde_json::Value, invariant: &str) -> &'a serde_json::Value {
    report["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["invariant"] == invariant)
        .unwrap()
}

#[test]
fn chaos_catches_a_dead_letter_one_attempt_late_through_its_drawn_low_attempts_and_failing_handlers(
) {
    // Before the draws every job had 10 attempts and no handler failed:
    // no job came near an eleventh delivery, and this queue passed.
    // A seed whose handlers fail every allowed delivery of at least three
    // jobs (each of which the broken queue then delivers once more).
    let seed = seed_drawing(30, |d, seed| {
        let exhausted = d
            .jobs(seed, 30)
            .iter()
            .filter(|j| (1..=j.max_attempts).all(|k| d.fails(seed, &j.id, k)))
            .count();
        exhausted >= 3
    });
    let ((code, report), correct) = fenced_chaos_pair("--dead-letter-late", seed, 30, "1s");
    assert_eq!(code, Some(1), "{report:#}");
    let bounded = invariant(&report, "bounded-retries");
    assert_eq!(bounded["verdict"], "invalid", "{bounded:#}");
    assert!(
        bounded["violations"][0]["text"]
            .as_str()
            .unwrap()
            .contains("beyond max_attempts"),
        "{bounded:#}"
    );
    // The run's draws are the seed's, shown in the report, and its
    // reproduce line names the seed that draws them.
    let cfg = ackgap::chaos::runner::ChaosConfig {
        jobs: 30,
        ..ackgap::chaos::runner::ChaosConfig::new(seed)
    };
    assert_eq!(report["draws"], serde_json::to_value(cfg.draws()).unwrap());
    assert!(
        report["replay"]
            .as_str()
            .unwrap()
            .contains(&format!("--seed {seed} ")),
        "{}",
        report["replay"]
    );
    assert!(report["workload"]["fails"]["requeued"].as_u64() > Some(0));
    // The same draws on the correct queue: valid.
    assert_eq!(correct.0, Some(0), "{:#}", correct.1);
}

#[test]
fn chaos_catches_a_done_id_admitted_again_through_its_drawn_duplicate_enqueues() {
    // Each producer's duplicates, as the seed draws them: at least three
    // aimed at a finished id once the first jobs are done. Before the
    // draws only a retried enqueue sent an id again.
    use ackgap::chaos::draws::Seen;
    let seed = seed_drawing(40, |d, seed| {
        let late_finished = |p| {
            d.duplicates(seed, p, 20)
                .iter()
                .skip(6)
                .flatten()
                .filter(|dup| dup.class == Seen::Finished)
                .count()
        };
        d.fail_per_mille == 0 && late_finished(0) + late_finished(1) >= 3
    });
    let ((code, report), correct) = fenced_chaos_pair("--readmit-done", seed, 40, "2s");
    assert_eq!(code, Some(1), "{report:#}");
    let admission = invariant(&report, "admission");
    assert_eq!(admission["verdict"], "invalid", "{admission:#}");
    assert!(
        admission["violations"][0]["text"]
            .as_str()
            .unwrap()
            .contains("admitted twice"),
        "{admission:#}"
    );
    assert!(
        report["workload"]["duplicates"]["finished"].as_u64() > Some(0),
        "{:#}",
        report["workload"]
    );
    assert_eq!(correct.0, Some(0), "{:#}", correct.1);
}

#[test]
fn chaos_catches_a_fail_that_requeues_before_the_ready_time_it_announced_by_timing_each_lease() {
    // Before each chaos lease was followed by the server's `TIME`, chaos
    // judged no lease against a ready time (a 10 s run announced 127 and
    // judged none) and this queue passed. A seed whose handlers fail often
    // with a retry delay of at least 100 ms.
    let seed = seed_drawing(30, |d, _| {
        d.fail_per_mille >= 250 && d.retry_delay_ms >= 100
    });
    let ((code, report), (correct_code, correct)) =
        fenced_chaos_pair("--fail-ignores-delay", seed, 30, "2s");
    assert_eq!(code, Some(1), "{report:#}");
    let delay = invariant(&report, "delay-respected");
    assert_eq!(delay["verdict"], "invalid", "{delay:#}");
    assert!(
        delay["violations"][0]["text"]
            .as_str()
            .unwrap()
            .contains("the ready time its fail answered"),
        "{delay:#}"
    );
    // The same draws on the correct queue: valid, with leases judged
    // against a ready time and against each other.
    assert_eq!(correct_code, Some(0), "{correct:#}");
    for name in ["delay-respected", "lease-exclusive"] {
        let r = invariant(&correct, name);
        assert_eq!(r["verdict"], "valid", "{r:#}");
        assert!(r["counts"]["judged"].as_u64() > Some(0), "{r:#}");
    }
}

/// `ackgap exhaust` and `ackgap explore` on the fenced.py mutant `flag`,
/// each killing it by one of `expected`: exhaust with `exhaust_args` on
/// top of its defaults, explore with `explore_args` on top of its (100
/// steps a walk): the seeds up to the first that kills it, which the seed
/// fixes (its configuration and every step).
fn killed_by_exhaust_and_explore(
    flag: &str,
    expected: &[&str],
    exhaust_args: &[&str],
    explore_args: &[&str],
) {
    let (code, text) = fenced_cli("exhaust", flag, exhaust_args);
    assert_eq!(code, Some(1), "exhaust {flag}: {text}");
    assert!(
        expected
            .iter()
            .any(|i| text.contains(&format!("broke: {i}\n"))),
        "exhaust {flag}: expected one of {expected:?}: {text}"
    );
    let (code, text) = fenced_cli("explore", flag, explore_args);
    assert_eq!(code, Some(1), "explore {flag}: {text}");
    assert!(
        expected.iter().any(|i| text.contains(&format!("{i}: "))),
        "explore {flag}: expected one of {expected:?}: {text}"
    );
}

#[test]
fn a_complete_that_checks_the_token_but_not_the_state_is_killed_by_exhaust_and_explore() {
    // e0 l0 t100 r c0: the reaped holder's token is still the job's last,
    // and complete settles the job, pending again. The queue ends `done`,
    // as after a complete refused; only the path's history tells them
    // apart, so exhaust must judge it although its state was seen. One job:
    // the default two take 40 s to reach it here.
    killed_by_exhaust_and_explore(
        "--complete-ignores-state",
        &["fenced-settlement", "settle-once", "structure"],
        &["--jobs", "1"],
        &["--seeds", "23"],
    );
}

#[test]
fn an_extend_that_checks_the_token_only_before_the_deadline_is_killed_by_exhaust_and_explore() {
    // A late stale holder: e0 l0 t100 r l1 t100 x0, 7 steps, one past
    // exhaust's default depth: one job to depth 7. The walks build it
    // rarely: seed 134 is the first of 1,000 that does.
    killed_by_exhaust_and_explore(
        "--extend-late-unfenced",
        &["fenced-settlement"],
        &["--jobs", "1", "--depth", "7"],
        &["--seed", "134"],
    );
}

#[test]
fn a_fail_that_requeues_but_keeps_the_job_active_is_killed_by_exhaust_and_explore() {
    // e0 l0 f0 and a read: the job in pending and active. Only a read made
    // before the drain sees it: every read is judged. Both at their
    // defaults (explore: seed 1).
    killed_by_exhaust_and_explore("--fail-keeps-active", &["structure"], &[], &[]);
}

#[test]
fn a_dead_letter_one_attempt_late_is_killed_by_exhaust_and_explore() {
    // e0 l0 f0 l0 and the heal's lease: a third delivery at max_attempts
    // 2. The first fail's state (pending, nothing held) is the enqueue's
    // too: only the deliveries the history told keep them apart.
    killed_by_exhaust_and_explore(
        "--dead-letter-late",
        &["bounded-retries"],
        &[],
        &["--seeds", "3"],
    );
}

#[test]
fn exhaust_counts_the_same_states_on_every_run_of_a_queue_with_random_tokens() {
    // Each replay of a path draws new tokens; the search names each lease
    // by its delivery, so a state is the same state on every replay.
    let states = || {
        let (code, text) = fenced_cli("exhaust", "", &["--depth", "5", "--jobs", "1"]);
        assert_eq!(code, Some(0), "{text}");
        text.lines()
            .find(|l| l.starts_with("states "))
            .unwrap()
            .to_owned()
    };
    assert_eq!(states(), states());
}

#[test]
fn ackgap_mutants_kills_the_exec_mutants_of_fenced_py_in_its_exhaustive_phase() {
    // The two that die in a few seconds; the other two take a minute or
    // more each at the matrix's budget (every merged path healed and
    // judged too) and have their own tests above.
    let names = ["fenced-fail-keeps-active", "fenced-dead-letter-late"];
    let mut args = vec![
        "mutants",
        "--json",
        "--chaos-ms",
        "0",
        "--budget-seeds",
        "0",
    ];
    for name in names {
        assert!(ackgap::mutants::exec::EXEC.iter().any(|m| m.name == name));
        args.extend(["--only", name]);
    }
    let out = Command::new(ACKGAP).args(&args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&text).expect("one JSON object");
    let kills = report["kills"].as_array().unwrap();
    assert_eq!(kills.len(), names.len());
    for k in kills {
        assert_eq!(k["killed"], true, "{k}");
        assert_eq!(k["as_expected"], true, "{k}");
        assert_eq!(k["phase"], "exhaust", "{k}");
    }
}

/// `ackgap explore` and `ackgap exhaust` at the battery's budget (`run
/// --budget ci`: 30 walks of 40 steps; 1 job, 2 workers, depth 7) on
/// fenced.py in `mode`: both exit 1 naming `invariant`.
fn killed_by_explore_and_exhaust(mode: &str, invariant: &str) {
    let (code, text) = fenced_cli("explore", mode, &["--seeds", "30", "--steps", "40"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains(invariant), "explore: {text}");
    let (code, text) = fenced_cli(
        "exhaust",
        mode,
        &["--jobs", "1", "--workers", "2", "--depth", "7"],
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("broke: {invariant}")),
        "exhaust: {text}"
    );
}

#[test]
fn a_fail_that_ignores_its_retry_delay_is_killed_by_explore_and_exhaust_as_delay_respected() {
    killed_by_explore_and_exhaust("--fail-ignores-delay", "delay-respected");
}

#[test]
fn a_duplicate_that_overwrites_a_done_jobs_payload_is_killed_by_explore_and_exhaust_as_admission() {
    killed_by_explore_and_exhaust("--overwrite-done-payload", "admission");
}
