//! The server's own faults as explorer steps (`K`: kill -9 and a restart,
//! `P`: power loss through the shim and power on), on a real valkey-server
//! the test starts and lends to the explorers (`OwnedServer`): a
//! durability finding replays exactly, every run, and a mode that keeps its
//! promise never breaks.
//!
//! Each claim about a mode replays one fixed replay line ten times on one
//! server (the walks in a row, as the shrinker runs them), and asserts
//! every run.

use ackgap::check::{Report, Verdict};
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
