//! The chaos runner against a real server: with every fault on, the
//! reference queue and the marker consumer hold every invariant and every
//! fault kind fires; without persistence a server kill loses acknowledged
//! jobs and no-loss names them, while AOF `always` keeps them; the seed
//! fixes the fault schedule; a
//! truncated history is refused with its line number; Ctrl-C leaves the
//! history, a report on it, and no server.
//!
//! Runs against the embedded Valkey (and once against the container, with
//! its pause and restart), not the whole matrix, with short faults phases,
//! to keep the suite's time modest.

// The server matrix; only `start`, `queue_name` and two backends are used here.
use crate::common;

use std::path::Path;
use std::process::Command;

use crate::common::{ackgap, text};
use ackgap::chaos::runner::{self, ChaosConfig, ChaosReport};
use ackgap::chaos::schedule::{FaultKind, FaultSchedule};
use ackgap::check::Verdict;
use ackgap::history::{self, EventKind, F};
use ackgap::server::Persistence;
use common::Backend;

async fn chaos(cfg: ChaosConfig, persistence: Persistence, history: &Path) -> Option<ChaosReport> {
    chaos_on(Backend::Valkey, cfg, persistence, history).await
}

async fn chaos_on(
    backend: Backend,
    cfg: ChaosConfig,
    persistence: Persistence,
    history: &Path,
) -> Option<ChaosReport> {
    let mut server = common::start(backend, persistence).await?;
    let report = runner::run(&mut server, cfg, Some(history.to_path_buf()), None)
        .await
        .expect("the chaos run completes");
    server.stop().await.expect("the server stops");
    Some(report)
}

fn failing(report: &ChaosReport) -> String {
    let bad: Vec<String> = report
        .invariants
        .iter()
        .filter(|r| r.verdict != Verdict::Valid)
        .map(|r| format!("{}: {:?}", r.invariant, r.violations))
        .collect();
    format!("{bad:#?}\nfired {:?}", report.fired)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_kind_fires_and_the_reference_queue_holds_every_invariant() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.jsonl");
    let cfg = ChaosConfig {
        duration_ms: 6_000,
        jobs: 120,
        queue_name: common::queue_name(),
        ..ChaosConfig::new(11)
    };
    let Some(report) = chaos(cfg.clone(), Persistence::AofAlways, &path).await else {
        return;
    };
    assert_eq!(report.verdict, Verdict::Valid, "{}", failing(&report));
    assert!(
        report.never_fired.is_empty(),
        "never fired: {:?}",
        report.never_fired
    );
    assert_eq!(report.fired.len(), cfg.faults.0.len());
    assert!(report.lost.is_empty());
    assert_eq!(report.effects.duplicated, 0);

    // The history on disk re-judges the same offline.
    let events = history::read_file(&path).unwrap();
    let offline = ackgap::check::check_all(&events);
    for r in &offline {
        // Each answered lease reads the server's time after it, so leases
        // are judged against each other, and against the ready times that
        // requeues announce (none when no handler failed).
        if r.invariant == "lease-exclusive" {
            assert!(r.counts["judged"] > 0, "{r:?}");
        }
        // An invariant this run gave no chance to break says so, rather
        // than a vacuous valid.
        if r.not_exercised() {
            assert_eq!(r.verdict_text(), "not exercised");
            continue;
        }
        assert_eq!(
            r.verdict,
            Verdict::Valid,
            "{}: {:?}",
            r.invariant,
            r.violations
        );
    }
    // The reaper's takes are judged on the server clock (`TIME` around
    // each reap), not left unjudged.
    let lease = offline
        .iter()
        .find(|r| r.invariant == "lease-respected")
        .unwrap();
    assert!(lease.counts["reaped"] > 0, "{lease:?}");
    assert!(lease.counts["judged"] > 0, "{lease:?}");
    // The nemesis followed the schedule the seed draws: every injection in
    // the history is the schedule's, in order.
    let injected: Vec<(String, u64)> = events
        .iter()
        .filter(|e| e.process == "nemesis" && e.kind == EventKind::Ok && e.f == F::Fault)
        .filter_map(|e| {
            let v = e.value.as_ref()?;
            (v["action"] == "inject").then(|| {
                (
                    v["fault"].as_str().unwrap().to_owned(),
                    v["at_ms"].as_u64().unwrap(),
                )
            })
        })
        .collect();
    let scheduled: Vec<(String, u64)> = cfg
        .schedule()
        .faults
        .iter()
        .filter(|f| f.at_ms < cfg.duration_ms)
        .map(|f| (f.kind.name().to_owned(), f.at_ms))
        .collect();
    assert_eq!(injected, scheduled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_kill_without_persistence_loses_acknowledged_jobs_and_no_loss_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kill.jsonl");
    let cfg = ChaosConfig {
        duration_ms: 3_000,
        jobs: 60,
        faults: "server-kill".parse().unwrap(),
        queue_name: common::queue_name(),
        ..ChaosConfig::new(5)
    };
    // The schedule never kills in the first fifth of the phase, and the
    // producers start at once: acknowledged enqueues always precede it.
    let first_kill = cfg.schedule().faults[0].at_ms;
    assert!(first_kill >= cfg.duration_ms / 5, "kill at {first_kill} ms");
    let Some(report) = chaos(cfg, Persistence::None, &path).await else {
        return;
    };
    assert!(report.fired.get(&FaultKind::ServerKill).copied() >= Some(1));
    let no_loss = &report.invariants[0];
    assert_eq!(no_loss.invariant, "no-loss");
    assert_eq!(no_loss.verdict, Verdict::Invalid, "{}", failing(&report));
    assert!(!report.lost.is_empty());
    assert_eq!(no_loss.counts["lost"], report.lost.len() as u64);
    for id in &report.lost {
        assert!(
            no_loss
                .violations
                .iter()
                .any(|v| v.job.as_deref() == Some(id.as_str())),
            "{id} is not named"
        );
    }
    assert_eq!(report.verdict, Verdict::Invalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aof_always_keeps_every_acknowledged_job_through_server_kills() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("always.jsonl");
    let cfg = ChaosConfig {
        duration_ms: 3_000,
        jobs: 60,
        faults: "server-kill".parse().unwrap(),
        queue_name: common::queue_name(),
        ..ChaosConfig::new(5)
    };
    let Some(report) = chaos(cfg, Persistence::AofAlways, &path).await else {
        return;
    };
    assert!(report.fired.get(&FaultKind::ServerKill).copied() >= Some(1));
    assert_eq!(report.verdict, Verdict::Valid, "{}", failing(&report));
    assert!(report.lost.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_is_paused_killed_and_restarted_and_every_invariant_holds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("container.jsonl");
    let cfg = ChaosConfig {
        duration_ms: 4_000,
        jobs: 60,
        faults: "server,crash-ack-gap,drop-reply".parse().unwrap(),
        queue_name: common::queue_name(),
        ..ChaosConfig::new(6)
    };
    let Some(report) = chaos_on(Backend::Container, cfg, Persistence::AofAlways, &path).await
    else {
        return;
    };
    assert_eq!(report.verdict, Verdict::Valid, "{}", failing(&report));
    assert!(
        report.never_fired.is_empty(),
        "never fired: {:?}",
        report.never_fired
    );
}

#[test]
fn the_same_seed_gives_the_same_fault_schedule() {
    let a = ChaosConfig::new(42).schedule();
    let b = ChaosConfig::new(42).schedule();
    assert_eq!(a, b);
    assert_ne!(a, ChaosConfig::new(43).schedule());
    // The settings are part of the draw: more workers, other targets.
    let wider = ChaosConfig {
        workers: 8,
        ..ChaosConfig::new(42)
    };
    assert_eq!(wider.schedule(), wider.schedule());
    let text = serde_json::to_string(&a).unwrap();
    let back: FaultSchedule = serde_json::from_str(&text).unwrap();
    assert_eq!(back, a);
}

#[test]
fn ackgap_chaos_reports_json_and_a_truncated_history_is_refused_with_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cli.jsonl");
    let out = ackgap(&[
        "chaos",
        "--seed",
        "4",
        "--duration",
        "2s",
        "--jobs",
        "40",
        "--faults",
        "worker,script-flush",
        "--json",
        "--history",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["verdict"], "valid");
    assert!(report["replay"].as_str().unwrap().contains("--seed 4"));
    assert!(report["phases"]["drain_ms"].is_u64());

    // Cut the last line in half: `ackgap check` names that line.
    let full = std::fs::read_to_string(&path).unwrap();
    let lines = full.lines().count();
    let cut = full.trim_end().len() - 10;
    std::fs::write(&path, &full[..cut]).unwrap();
    let out = ackgap(&["check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(":{lines}: not a history event")),
        "{}",
        text(&out)
    );

    // An unknown fault is a usage error.
    let out = ackgap(&["chaos", "--faults", "meteor"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(text(&out).contains("unknown fault"), "{}", text(&out));
}

/// The pids of `pid`'s children, from /proc.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

#[test]
fn ctrl_c_during_chaos_leaves_the_history_a_report_and_no_server() {
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("interrupted.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args([
            "chaos",
            "--seed",
            "3",
            "--duration",
            "60s",
            "--history",
            path.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Every server child seen (a server kill restarts it under a new pid).
    let mut servers: std::collections::BTreeSet<u32> = Default::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        servers.extend(children(pid).into_iter().filter(|c| {
            std::fs::read(format!("/proc/{c}/cmdline"))
                .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("ackgap-valkey-"))
        }));
        let lines = std::fs::read_to_string(&path).map_or(0, |h| h.lines().count());
        if lines >= 200 && !servers.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run wrote {lines} history lines in 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Stopping takes the workers' grace, a heal and the server's stop.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ackgap chaos did not stop within 60 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("interrupted"),
        "{}",
        text(&out)
    );
    for server in &servers {
        assert!(
            !Path::new(&format!("/proc/{server}")).exists(),
            "server {server} outlived the tool"
        );
    }

    // The report, judged on the history so far.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path.with_extension("json")).unwrap())
            .unwrap();
    assert!(
        summary["interrupted"]
            .as_str()
            .is_some_and(|n| n.contains("no final read")),
        "{summary:#}"
    );
    let verdict_of = |name: &str| {
        summary["invariants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["invariant"] == name)
            .map(|r| r["verdict"].clone())
    };
    assert_eq!(verdict_of("no-loss"), Some("unknown".into()));
    assert_eq!(verdict_of("liveness"), Some("unknown".into()));
    assert_eq!(summary["verdict"], "unknown", "{summary:#}");
    let txt = std::fs::read_to_string(path.with_extension("txt")).unwrap();
    assert!(txt.contains("interrupted") && txt.contains("rerun: ackgap chaos --seed 3"));
    let html = std::fs::read_to_string(path.with_extension("html")).unwrap();
    assert!(html.contains("interrupted"));

    // The history parses whole, and re-judges the same: unknown, since
    // no final read happened.
    let events = history::read_file(&path).expect("the history parses");
    assert!(events.len() >= 200);
    let out = ackgap(&["check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// `kill -9` of the embedded server in the middle of a chaos run (no
/// server fault in its schedule): the run notices the server is gone and
/// stops with 69 and no verdict, long before its 60 s are up (its history
/// ends within seconds of the kill), never a progress line counting on.
#[test]
fn kill_9_of_the_server_ends_a_chaos_run_with_69_within_seconds_not_at_its_end() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("killed.jsonl");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(["chaos", "--seed", "2", "--duration", "60s", "--jobs", "500"])
        .args(["--faults", "worker", "--history", history.to_str().unwrap()])
        .env_remove("ACKGAP_SERVER")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut header = String::new();
    stdout.read_line(&mut header).unwrap();
    let pid = header
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or_else(|| panic!("no server pid in {header:?}"))
        .to_string();
    // Once jobs flow (the history has events), kill the server.
    while std::fs::read_to_string(&history).map_or(0, |h| h.lines().count()) < 50 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let mut shown = String::new();
    stdout.read_to_string_lossy(&mut shown);
    shown.push_str(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(69), "{shown}");
    assert!(shown.contains("the server stopped answering"), "{shown}");
    assert!(!shown.contains("verdict: "), "{shown}");
    // The last event recorded is seconds after the start, not a minute.
    let last = std::fs::read_to_string(&history).unwrap();
    let last: serde_json::Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    assert!(last["time_ms"].as_u64() < Some(20_000), "{last}");
}

trait ReadLossy {
    fn read_to_string_lossy(&mut self, into: &mut String);
}

impl<R: std::io::Read> ReadLossy for R {
    fn read_to_string_lossy(&mut self, into: &mut String) {
        let mut bytes = Vec::new();
        let _ = self.read_to_end(&mut bytes);
        into.push_str(&String::from_utf8_lossy(&bytes));
    }
}

/// An `exec:` adapter that exits mid-run (adapters/broken `exit:60`): the
/// first call it leaves unanswered stops the run with 69, naming it.
#[test]
fn an_exec_adapter_that_exits_ends_a_chaos_run_with_69_at_once() {
    let adapter = concat!(env!("CARGO_MANIFEST_DIR"), "/adapters/broken/run exit:60");
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("exited.jsonl");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(["chaos", "--seed", "1", "--duration", "60s", "--jobs", "100"])
        .args(["--faults", "worker", "--queue", &format!("exec:{adapter}")])
        .args(["--history", history.to_str().unwrap()])
        .env_remove("ACKGAP_SERVER")
        .output()
        .unwrap();
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(69), "{shown}");
    assert!(shown.contains("the adapter stopped answering"), "{shown}");
    assert!(shown.contains("exited with exit status: 3"), "{shown}");
    assert!(!shown.contains("verdict: "), "{shown}");
    let last = std::fs::read_to_string(&history).unwrap();
    let last: serde_json::Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    assert!(last["time_ms"].as_u64() < Some(20_000), "{last}");
}

/// A stale ack a wall-clock chaos run found is pinned down exactly: the
/// history in tests/histories/ is the one `ackgap chaos --seed 1 --duration
/// 3000ms --jobs 40 --faults worker --queue streams --persistence always`
/// wrote (Streams' XACK names no consumer, so a worker whose entry the
/// reaper claimed away still acks it). `ackgap reduce` reads the
/// violation's job off it as a schedule, shrinks it to at most six steps
/// that break fenced-settlement in 10 runs of 10 on logical time, and the
/// replay line it prints, run alone, breaks it again.
#[test]
fn reduce_pins_a_chaos_stale_ack_down_to_a_replay_of_at_most_six_steps_that_fails_every_run() {
    let history = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/histories/streams-stale-ack.jsonl"
    );
    let out = ackgap(&["reduce", history, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let reduced = &report["reduced"][0];
    assert_eq!(reduced["invariant"], "fenced-settlement", "{report}");
    let steps = reduced["steps"].as_u64().unwrap();
    assert!(steps <= 6, "{steps} steps: {report}");
    assert!(
        steps < reduced["extracted_steps"].as_u64().unwrap(),
        "{report}"
    );
    assert_eq!(reduced["reproduced"], 10, "{report}");
    assert_eq!(reduced["runs"], 10, "{report}");
    assert!(
        report["rerun"]
            .as_str()
            .unwrap()
            .starts_with("ackgap chaos --seed 1"),
        "{report}"
    );
    // The printed line, pasted: `ackgap replay LINE --server process`.
    let replay: Vec<&str> = reduced["replay"].as_str().unwrap().split(' ').collect();
    assert_eq!(replay[..2], ["ackgap", "replay"], "{report}");
    let out = ackgap(&replay[1..]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("broke fenced-settlement"),
        "{}",
        text(&out)
    );
}

/// A history whose violations name no job (or that has none) has nothing
/// to reduce: valid, and said; a history with no summary beside it and no
/// `--queue` is a usage error naming the flag.
#[test]
fn reduce_of_a_history_without_violations_says_so_and_without_a_queue_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.jsonl");
    let full = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/histories/streams-stale-ack.jsonl"
    ))
    .unwrap();
    std::fs::write(&path, &full).unwrap();
    let out = ackgap(&["reduce", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(text(&out).contains("--queue"), "{}", text(&out));
    let out = ackgap(&[
        "reduce",
        path.to_str().unwrap(),
        "--queue",
        "streams",
        "--lease-ms",
        "500",
        "--invariant",
        "no-loss",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("nothing to reduce"), "{}", text(&out));
}
