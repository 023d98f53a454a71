//! The server's own faults as explorer steps (`K`: kill -9 and a restart,
//! `P`: power loss through the shim and power on), on a real valkey-server
//! the test starts and lends to the explorers (`OwnedServer`): a
//! durability finding replays exactly, every run, and a mode that keeps its
//! promise never breaks.
//!
//! Each claim about a mode replays one fixed replay line ten times on one
//! server (the walks in a row, as the shrinker runs them), and asserts
//! every run.

use std::sync::Arc;

use ackgap::adapter::exec::{Exec, ExecOptions};
use ackgap::check::{Report, Verdict};
use ackgap::consumer::Kind as ConsumerKind;
use ackgap::explore::{run_schedule, ExploreError, Line, OwnedServer, Subject, SwarmConfig};
use ackgap::history::{EventKind, F};
use ackgap::queue::Queue;
use ackgap::server::{Instruments, Persistence, ProcessOptions, Server, ServerError, ServerSpec};

use crate::common::{unavailable, Backend};

/// How many times each fixed replay runs.
const RUNS: usize = 10;

/// A process server with `persistence`, the power-loss shim loaded when
/// `power_loss`; `None` (unavailable, a failure in CI) without a binary.
async fn start(persistence: Persistence, power_loss: bool) -> Option<Server> {
    let spec = ServerSpec::Process(ProcessOptions { binary: None });
    let instruments = Instruments {
        power_loss,
        clock: false,
    };
    match Server::start_instrumented(&spec, persistence, instruments).await {
        Ok(server) => Some(server),
        Err(e @ ServerError::BinaryNotFound { .. }) => unavailable(Backend::Valkey, e),
        Err(e) => panic!("the server did not start: {e}"),
    }
}

/// The reference queue (marker consumer) on `server`, lent to the
/// explorers with its `persistence`.
async fn owned_subject(server: Server, persistence: Persistence) -> (Subject, OwnedServer) {
    let queue = Queue::connect(&server.client(), "ackgap-server-steps")
        .await
        .expect("connect");
    let owned = OwnedServer::new(server, persistence);
    let subject = Subject::reference(&queue).with_server(Some(owned.clone()));
    (subject, owned)
}

fn report<'a>(reports: &'a [Report], invariant: &str) -> &'a Report {
    reports
        .iter()
        .find(|r| r.invariant == invariant)
        .unwrap_or_else(|| panic!("no {invariant} report"))
}

/// Runs `line` `RUNS` times on `subject`; answers, per run, the no-loss
/// report, after asserting that the model accepted what the server came
/// back with (refinement valid: no divergence).
async fn replays(subject: &Subject, line: &str) -> Vec<Report> {
    let line: Line = line.parse().expect("a replay line");
    let config = SwarmConfig::from_line(&line.config);
    let mut out = Vec::new();
    for run in 0..RUNS {
        let walk = run_schedule(subject, &config, &line.schedule)
            .await
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        assert!(
            walk.divergence.is_none(),
            "run {run}: the model refused what the server came back with: {:?}\n{}",
            walk.divergence,
            walk.counterexample_text()
        );
        let faults = walk
            .history
            .iter()
            .filter(|e| e.f == F::Fault && e.kind == EventKind::Ok && e.fault().is_some())
            .count();
        assert_eq!(
            faults, 2,
            "run {run}: the fault's inject and heal are recorded"
        );
        out.push(report(&walk.invariants, "no-loss").clone());
    }
    out
}

fn stop(subject: Subject, owned: OwnedServer) -> Server {
    drop(subject);
    owned.into_server().expect("no walk holds the server")
}

#[tokio::test]
async fn a_power_loss_step_under_everysec_loses_an_acknowledged_enqueue_on_10_of_10_replays() {
    let Some(server) = start(Persistence::AofEverysec, true).await else {
        return;
    };
    let (subject, owned) = owned_subject(server, Persistence::AofEverysec).await;
    // JOB-0 enqueued and acknowledged, then the power goes within the
    // second: the AOF's next fsync never came.
    let reports = replays(&subject, "reference/marker/j1w1l100m3r1/e0.P").await;
    let broke = reports
        .iter()
        .filter(|r| {
            r.verdict == Verdict::Invalid
                && r.counts.get("lost") == Some(&1)
                && r.violations.iter().any(|v| {
                    v.text
                        .starts_with("JOB-0: enqueue acknowledged, but at the end it is")
                })
        })
        .count();
    eprintln!("everysec, power loss: no-loss broken on {broke} of {RUNS} replays");
    assert_eq!(broke, RUNS, "{reports:#?}");
    stop(subject, owned).stop().await.unwrap();
}

#[tokio::test]
async fn a_power_loss_step_under_always_loses_nothing_on_10_of_10_replays() {
    let Some(server) = start(Persistence::AofAlways, true).await else {
        return;
    };
    let (subject, owned) = owned_subject(server, Persistence::AofAlways).await;
    let reports = replays(&subject, "reference/marker/j1w1l100m3r1/e0.P").await;
    let held = reports
        .iter()
        .filter(|r| {
            r.verdict == Verdict::Valid
                && r.counts.get("acknowledged") == Some(&1)
                && r.counts.get("lost") == Some(&0)
        })
        .count();
    eprintln!("always, power loss: no-loss held on {held} of {RUNS} replays");
    assert_eq!(held, RUNS, "{reports:#?}");
    stop(subject, owned).stop().await.unwrap();
}

#[tokio::test]
async fn a_kill_step_under_always_loses_nothing_and_under_no_persistence_loses_the_job() {
    for (persistence, lost) in [(Persistence::AofAlways, 0), (Persistence::None, 2)] {
        let Some(server) = start(persistence, false).await else {
            return;
        };
        let (subject, owned) = owned_subject(server, persistence).await;
        // w0 holds JOB-0 across the kill and acks it after the restart.
        let reports = replays(&subject, "reference/marker/j2w1l100m3r1/e0.e1.l0.K.c0").await;
        for (run, r) in reports.iter().enumerate() {
            assert_eq!(r.counts.get("acknowledged"), Some(&2), "run {run}: {r:?}");
            assert_eq!(
                r.counts.get("lost"),
                Some(&lost),
                "{persistence}, run {run}: {r:?}"
            );
        }
        eprintln!(
            "{persistence}, kill: {lost} of 2 acknowledged jobs lost on each of {RUNS} replays"
        );
        stop(subject, owned).stop().await.unwrap();
    }
}

/// `adapters/NAME/run` on `server`, lent to the explorers with its
/// `persistence`.
async fn exec_subject(
    name: &str,
    server: Server,
    persistence: Persistence,
) -> (Subject, OwnedServer) {
    let queue = Queue::connect(&server.client(), "ackgap-server-steps-exec")
        .await
        .expect("connect");
    let options = ExecOptions::default();
    let command = format!("adapters/{name}/run");
    let exec = Exec::start(&command, &queue, &server.url(), options)
        .await
        .expect("the adapter says hello");
    let owned = OwnedServer::new(server, persistence);
    let marker = Arc::from(ConsumerKind::Marker.consumer());
    let subject = Subject::new(Arc::new(exec), marker).with_server(Some(owned.clone()));
    (subject, owned)
}

/// Run after run on one adapter child, as a reduction runs them, a kill
/// replays alike on lmove-python (its connections meet the restart's error
/// on their next call, and it does not list `crash`: it is started again): its heal and the next run's calls reach the restarted
/// server (`Adapter::reopen`), and a worker's call that meets the
/// connection the restart closed is that step's answer (unknown), not the
/// end of the walk.
#[tokio::test]
async fn an_exec_queue_replays_a_kill_10_times_on_one_adapter_losing_the_job_only_without_persistence(
) {
    for (persistence, lost) in [(Persistence::None, 1), (Persistence::AofAlways, 0)] {
        let Some(server) = start(persistence, false).await else {
            return;
        };
        let (subject, owned) = exec_subject("lmove-python", server, persistence).await;
        for line in ["e0.K", "e0.l0.K.c0"] {
            let line = format!("exec:adapters/lmove-python/run/marker/j1w1l500m2r1/{line}");
            for (run, r) in replays(&subject, &line).await.iter().enumerate() {
                let says = format!("{persistence}, {line}, run {run}: {r:?}");
                assert_eq!(r.counts.get("acknowledged"), Some(&1), "{says}");
                assert_eq!(r.counts.get("lost"), Some(&lost), "{says}");
            }
        }
        // The ack after the kill met the closed connection: unknown.
        let line: Line = "exec:adapters/lmove-python/run/marker/j1w1l500m2r1/e0.l0.K.c0"
            .parse()
            .unwrap();
        let config = SwarmConfig::from_line(&line.config);
        let walk = run_schedule(&subject, &config, &line.schedule)
            .await
            .unwrap();
        assert!(
            walk.log[3].contains("acks -> no answer: complete: outcome unknown"),
            "{:#?}",
            walk.log
        );
        eprintln!("{persistence}, kill on exec:lmove-python: {lost} of 1 lost on each replay");
        stop(subject, owned).stop().await.unwrap();
    }
}

/// BullMQ's adapter counts its tokens in its own process and lists
/// `crash`: reopened after a kill by crashing its sessions, not by a new
/// process, it never grants a token twice (a new process would start
/// counting at 1 again, and structure would report a false reuse).
#[tokio::test]
async fn a_kit_adapter_reopened_after_a_kill_keeps_counting_its_tokens() {
    let Some(server) = start(Persistence::AofAlways, false).await else {
        return;
    };
    let (subject, owned) = exec_subject("bullmq", server, Persistence::AofAlways).await;
    let line: Line = "exec:adapters/bullmq/run/marker/j1w1l500m2r1/e0.l0.K.c0"
        .parse()
        .unwrap();
    let config = SwarmConfig::from_line(&line.config);
    for run in 0..3 {
        let walk = run_schedule(&subject, &config, &line.schedule)
            .await
            .unwrap();
        let bad: Vec<_> = walk
            .invariants
            .iter()
            .filter(|r| r.verdict == Verdict::Invalid)
            .collect();
        assert!(bad.is_empty(), "run {run}: {bad:#?}\n{:#?}", walk.log);
        assert_eq!(
            report(&walk.invariants, "no-loss").counts.get("lost"),
            Some(&0)
        );
    }
    stop(subject, owned).stop().await.unwrap();
}

#[tokio::test]
async fn a_server_step_is_refused_before_it_runs_on_a_server_the_explorers_cannot_fault() {
    let Some(server) = start(Persistence::None, false).await else {
        return;
    };
    let queue = Queue::connect(&server.client(), "ackgap-server-steps")
        .await
        .expect("connect");
    let line: Line = "reference/marker/j1w1l100m3r1/e0.P".parse().unwrap();
    let config = SwarmConfig::from_line(&line.config);
    // Not lent to the explorers: neither K nor P.
    let alone = Subject::reference(&queue);
    let refused = run_schedule(&alone, &config, &line.schedule).await;
    assert!(
        matches!(
            refused,
            Err(ExploreError::Unsupported { step_index: 1, .. })
        ),
        "{refused:?}"
    );
    // Lent, but started without the shim: no P.
    let (subject, owned) = owned_subject(server, Persistence::None).await;
    let refused = run_schedule(&subject, &config, &line.schedule).await;
    let text = format!("{:?}", refused.as_ref().err());
    assert!(text.contains("power-loss shim"), "{text}");
    stop(subject, owned).stop().await.unwrap();
}

#[tokio::test]
async fn a_walk_draws_server_steps_only_when_its_owner_asks() {
    let Some(server) = start(Persistence::AofAlways, true).await else {
        return;
    };
    let (subject, owned) = owned_subject(server, Persistence::AofAlways).await;
    let seed = 7;
    let plain = ackgap::explore::explore_quiet(&subject, seed, 40)
        .await
        .unwrap();
    assert!(
        !plain.schedule.contains('K') && !plain.schedule.contains('P'),
        "{}",
        plain.schedule
    );
    let asking = subject
        .clone()
        .with_server(Some(owned.clone().drawing(15, 15)));
    let faulted = ackgap::explore::explore_quiet(&asking, seed, 40)
        .await
        .unwrap();
    assert!(
        faulted.schedule.contains('K') || faulted.schedule.contains('P'),
        "{}",
        faulted.schedule
    );
    // Under always nothing acknowledged is lost, whatever the walk did.
    assert_eq!(
        report(&faulted.invariants, "no-loss").verdict,
        Verdict::Valid
    );
    drop(asking);
    // Not lent at all, the seed walks as it did on the lent server.
    let queue = Queue::connect(&owned.lock().await.client(), "ackgap-server-steps")
        .await
        .unwrap();
    let alone = ackgap::explore::explore_quiet(&Subject::reference(&queue), seed, 40)
        .await
        .unwrap();
    assert_eq!(alone.schedule, plain.schedule);
    drop(queue);
    stop(subject, owned).stop().await.unwrap();
}

/// The command line: a schedule with `K` or `P` (or `--faults`) on a server
/// the explorer does not start as a process is bad input, refused before
/// any server starts (exit 64); on a process server the replay line of a
/// power loss under everysec fails (exit 1) and names its line to paste.
#[test]
fn the_command_line_refuses_server_steps_off_a_process_server_and_replays_a_power_loss() {
    let ackgap = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
            .args(args)
            .env_remove("ACKGAP_SERVER")
            .output()
            .expect("run ackgap")
    };
    for args in [
        &["explore", "--server", "container", "--schedule", "e0 K"][..],
        &[
            "explore",
            "--server",
            "replicated",
            "--faults",
            "power-loss",
        ],
        &[
            "replay",
            "reference/marker/j1w1l100m3r1/e0.P",
            "--server",
            "redis://127.0.0.1:1",
        ],
    ] {
        let out = ackgap(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(
            err.contains("need a server the explorer starts and can kill"),
            "{err}"
        );
    }
    let line = "reference/marker/j1w1l100m3r1/e0.P";
    let out = ackgap(&[
        "replay",
        line,
        "--server",
        "process",
        "--persistence",
        "everysec",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(69) {
        unavailable(Backend::Valkey, &stdout);
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("broke no-loss: JOB-0: enqueue acknowledged"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "replay: ackgap replay {line} --server process --persistence everysec"
        )),
        "{stdout}"
    );
}

/// Parallel steps (`l0+l1`) beside the server's faults: a kill between
/// two parallel steps under `always` loses nothing, and the model follows
/// the queue through the race and the restart, on every replay.
#[tokio::test]
async fn a_kill_between_parallel_steps_under_always_loses_nothing_and_never_diverges_on_10_of_10_replays(
) {
    let Some(server) = start(Persistence::AofAlways, false).await else {
        return;
    };
    let (subject, owned) = owned_subject(server, Persistence::AofAlways).await;
    // Two jobs, leased together, the server killed while both are held,
    // both acked together after the restart.
    let line = "reference/marker/j2w2l100m3r1/e0.e1.l0+l1.K.c0+c1";
    for (run, r) in replays(&subject, line).await.iter().enumerate() {
        assert_eq!(r.verdict, Verdict::Valid, "run {run}: {r:?}");
        assert_eq!(r.counts.get("acknowledged"), Some(&2), "run {run}: {r:?}");
        assert_eq!(r.counts.get("lost"), Some(&0), "run {run}: {r:?}");
    }
    // Both held leases survived the kill: both acks settle.
    let parsed: Line = line.parse().unwrap();
    let config = SwarmConfig::from_line(&parsed.config);
    let walk = run_schedule(&subject, &config, &parsed.schedule)
        .await
        .unwrap();
    let acks = walk
        .log
        .iter()
        .find(|l| l.starts_with("together: w0 applies its effect and acks"))
        .unwrap_or_else(|| panic!("no c0+c1 in the log:\n{}", walk.log.join("\n")));
    assert_eq!(acks.matches("Settled").count(), 2, "{acks}");
    assert_eq!(
        walk.verdict,
        Verdict::Valid,
        "{}",
        walk.counterexample_text()
    );
    stop(subject, owned).stop().await.unwrap();
}

/// A power loss after parallel steps under `everysec`: whatever the AOF
/// kept (up to the cut, or up to a fsync that fell between two members'
/// scripts), the queue comes back in a state the model allows on every
/// replay; what was lost is no-loss's to say.
#[tokio::test]
async fn a_power_loss_after_parallel_steps_under_everysec_comes_back_in_a_state_the_model_allows_on_10_of_10_replays(
) {
    let Some(server) = start(Persistence::AofEverysec, true).await else {
        return;
    };
    let (subject, owned) = owned_subject(server, Persistence::AofEverysec).await;
    // `replays` asserts no divergence on each run.
    // JOB-1 enqueued while w0 leases JOB-0, then the power cut.
    let reports = replays(&subject, "reference/marker/j2w2l100m3r1/e0.e1+l0.P").await;
    let lost: Vec<Option<u64>> = reports
        .iter()
        .map(|r| r.counts.get("lost").copied())
        .collect();
    eprintln!("everysec, power loss after e0 e1+l0: jobs lost per replay {lost:?}");
    for (run, r) in reports.iter().enumerate() {
        assert_eq!(r.counts.get("acknowledged"), Some(&2), "run {run}: {r:?}");
    }
    stop(subject, owned).stop().await.unwrap();
}

/// Walks that draw both parallel steps and the server's faults on one
/// server under `always`: nothing acknowledged is lost and the model never
/// diverges; some walk holds both kinds of step.
#[tokio::test]
async fn walks_drawing_parallel_steps_and_server_faults_under_always_lose_nothing_and_never_diverge(
) {
    let Some(server) = start(Persistence::AofAlways, true).await else {
        return;
    };
    let (subject, owned) = owned_subject(server, Persistence::AofAlways).await;
    let both = subject
        .clone()
        .with_server(Some(owned.clone().drawing(8, 8)))
        .with_parallel(30);
    let mut mixed = Vec::new();
    for seed in 1..=4 {
        let walk = ackgap::explore::explore_quiet(&both, seed, 40)
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(
            walk.divergence.is_none(),
            "seed {seed}: {:?}\n{}",
            walk.divergence,
            walk.counterexample_text()
        );
        assert_eq!(
            report(&walk.invariants, "no-loss").verdict,
            Verdict::Valid,
            "seed {seed}: {}",
            walk.counterexample_text()
        );
        let faulted = walk.schedule.contains('K') || walk.schedule.contains('P');
        if faulted && walk.schedule.contains('+') {
            mixed.push(walk.schedule.clone());
        }
    }
    assert!(
        !mixed.is_empty(),
        "no walk held a parallel step and a fault"
    );
    eprintln!("walks with both: {mixed:?}");
    drop(both);
    stop(subject, owned).stop().await.unwrap();
}

/// The command line: a server fault inside a parallel step is bad input
/// (exit 64, the reason named, before any server starts); one beside
/// parallel steps replays on a process server.
#[test]
fn the_command_line_refuses_a_server_fault_inside_a_parallel_step_and_replays_one_beside_it() {
    let ackgap = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
            .args(args)
            .env_remove("ACKGAP_SERVER")
            .output()
            .expect("run ackgap")
    };
    for args in [
        &["explore", "--server", "process", "--schedule", "e0 l0+K"][..],
        &[
            "replay",
            "reference/marker/j1w2l100m3r1/e0.P+l1",
            "--server",
            "process",
        ],
    ] {
        let out = ackgap(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains("is a server fault"), "{args:?}: {err}");
    }
    let line = "reference/marker/j2w2l100m3r1/e0.e1.l0+l1.K.c0+c1";
    let out = ackgap(&[
        "replay",
        line,
        "--server",
        "process",
        "--persistence",
        "always",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(69) {
        unavailable(Backend::Valkey, &stdout);
        return;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
}
