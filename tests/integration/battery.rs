//! `ackgap run --queue Q`'s durability matrix (`campaign::battery`): a
//! column of the verdict table judged on the cells whose documentation
//! promises to keep acknowledged writes, every cell reported with a chaos
//! line that runs it again. Small budgets: the claims are the column's,
//! not the queue's.

use std::process::Command;
use std::sync::Arc;

use ackgap::campaign::battery::{self, BatteryConfig, BatteryReport, Budget};
use ackgap::check::Verdict;
use ackgap::explore::line::Rerun;
use ackgap::server::{Persistence, ProcessOptions, Server, ServerSpec};

/// The battery on `queue` with the CI budget cut down to a few seconds per
/// phase: two short walks, a tiny search, 1.5 s of chaos with 20 jobs
/// (and so 1.5 s per durability cell).
async fn small_battery(queue: &str) -> BatteryReport {
    let spec = ServerSpec::Process(ProcessOptions::default());
    let mut server = Server::start(&spec, Persistence::AofAlways)
        .await
        .expect("valkey-server");
    let client = redis::Client::open(server.url()).expect("URL");
    let q = ackgap::queue::Queue::connect(&client, "battery")
        .await
        .expect("queue");
    let adapter = ackgap::adapter::open(queue, &q, &server.url())
        .await
        .expect("adapter");
    let mut config = BatteryConfig::new(queue, 1, Budget::Ci);
    config.walks = 2;
    config.steps = 10;
    config.exhaust = (1, 1, 2);
    config.chaos_ms = 1_500;
    config.chaos_jobs = 20;
    config.shrink_runs = 10;
    let rerun = Rerun {
        env: String::new(),
        flags: " --server process --persistence always".into(),
    };
    let report = battery::battery(
        &mut server,
        &spec,
        Arc::<dyn ackgap::adapter::Adapter>::clone(&adapter),
        config,
        rerun,
    )
    .await
    .expect("the battery");
    drop(adapter);
    drop(q);
    server.stop().await.expect("stop");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_queue_s_durability_column_judges_kills_under_always_and_a_failover_under_wait_and_holds(
) {
    let report = small_battery("reference").await;
    let labels: Vec<&str> = report.durability.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "process none none server-kill",
            "process everysec none server-kill",
            "process always none server-kill",
            "process everysec none power-loss",
            "process always none power-loss",
            "replicated:2 always wait:1 failover",
        ]
    );
    let judged: Vec<bool> = report.durability.iter().map(|c| c.judged).collect();
    assert_eq!(judged, [false, false, true, false, true, true]);
    for cell in report.durability.iter().filter(|c| c.judged) {
        assert!(cell.fired > 0, "{cell:?}: its fault never fired");
        assert_eq!(cell.lost, 0, "{cell:?}");
        assert_eq!(cell.verdict, Verdict::Valid, "{cell:?}");
    }
    let column = report
        .phases
        .iter()
        .find(|p| p.name == "durability")
        .expect("a durability column");
    assert_eq!(column.runs, 3, "the three judged cells: {column:?}");
    for name in ["no-loss", "settle-once", "fenced-settlement"] {
        let cell = column.cells.get(name).expect(name);
        assert!(held(name, &cell.text()), "{name}: {cell:?}");
        assert_eq!(cell.runs, 3, "{name}");
    }
    // The server clock's column: clock-jump alone on a process under
    // libfaketime, judged like the other chaos phases, and the reference
    // queue holds every invariant through the jumps.
    let clock = report
        .phases
        .iter()
        .find(|p| p.name == "chaos clock-jump")
        .expect("a clock-jump column");
    assert_eq!(clock.runs, 1, "{clock:?}");
    for name in ["no-loss", "settle-once", "fenced-settlement", "liveness"] {
        let cell = clock.cells.get(name).expect(name);
        assert!(held(name, &cell.text()), "{name}: {cell:?}");
    }
    assert_eq!(report.verdict, Verdict::Valid, "{:?}", report.findings);
    assert!(report.findings.is_empty());
    // The findings report shows the matrix: each cell, its verdict and
    // its line.
    let head = ackgap::campaign::findings::Head {
        command: "ackgap run --queue reference".into(),
        version: "test".into(),
        library: None,
        date: "2026-01-01".into(),
        server: "test".into(),
        promises: Vec::new(),
        adapter: None,
        to_root: "../../".into(),
        claims: Default::default(),
        repro: Vec::new(),
    };
    let md = ackgap::campaign::findings::markdown(&report, &head);
    // The reference queue takes logical time: its explorers' columns are
    // exact, every chaos and durability column is one sample.
    let exact: Vec<&str> = report
        .phases
        .iter()
        .filter(|p| p.exact)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(exact, ["exhaust", "walks"]);
    // Each column says whether its cells are exact or one sample.
    assert!(md.contains("| durability (sampled) |"), "{md}");
    assert!(md.contains("| chaos clock-jump (sampled) |"), "{md}");
    assert!(md.contains("| exhaust (exact) |"), "{md}");
    // Nothing broke: the summary, first, says so.
    let summary = md.find("## Summary\n\nNothing broke").expect("a summary");
    assert!(summary < md.find("| invariant |").expect("a table"), "{md}");
    assert!(md.contains("## Durability matrix"), "{md}");
    assert!(
        md.contains("| replicated:2 always wait:1 failover | judged |"),
        "{md}"
    );
    assert!(
        md.contains("ackgap chaos --queue reference --seed 1 --duration 1500ms --jobs 20 --faults failover --server replicated:2 --persistence always --durability wait:1"),
        "{md}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmove_s_durability_cells_are_kills_and_power_losses_their_lines_run_them_again_and_their_losses_replay_exactly(
) {
    let report = small_battery("lmove").await;
    let labels: Vec<&str> = report.durability.iter().map(|c| c.label.as_str()).collect();
    // lmove's client takes no durability dial: no wait cell at this budget.
    assert_eq!(
        labels,
        [
            "process none none server-kill",
            "process everysec none server-kill",
            "process always none server-kill",
            "process everysec none power-loss",
            "process always none power-loss",
        ]
    );
    let always = &report.durability[2];
    assert!(always.judged);
    assert!(always.fired > 0, "{always:?}");
    // Not its verdict: lmove has no fencing, and a kill's restart may
    // outlast a lease (timing). Nothing acknowledged is lost under always.
    assert_eq!(always.lost, 0, "{always:?}");
    let power = &report.durability[4];
    assert!(power.judged && power.fired > 0, "{power:?}");
    assert_eq!(power.lost, 0, "{power:?}");
    assert!(
        report.phases.iter().any(|p| p.name == "durability"),
        "a durability column"
    );
    // The cell's line, pasted, runs the same cell: server kills under
    // always, nothing acknowledged lost.
    let words: Vec<&str> = always.rerun.split_whitespace().collect();
    assert_eq!(&words[..2], ["ackgap", "chaos"], "{}", always.rerun);
    assert!(always.rerun.contains("--persistence always"));
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(&words[1..])
        .arg("--json")
        .current_dir(dir.path())
        .output()
        .expect("run ackgap");
    // Its verdict may differ from the battery's run: lmove has no fencing,
    // and whether a kill's restart outlasts a lease is timing. What the
    // line must give is the cell: kills under always, none of them losing
    // an acknowledged job (exit 0 or 1, a verdict, never 64 or 69).
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(
        json["fired"]["server-kill"].as_u64().unwrap_or(0) > 0,
        "{json}"
    );
    assert_eq!(json["config"]["queue"], "lmove", "{json}");
    assert_eq!(json["lost"].as_array().map(Vec::len), Some(0), "{json}");
    // A cell that lost acknowledged jobs (a kill with no persistence
    // empties the server; a power loss under everysec loses the last
    // second) is read off its history and replayed exactly: its loss, a
    // kill (`K`) or power-loss (`P`) step under the cell's persistence,
    // breaks no-loss on every one of its runs.
    let lost: Vec<_> = report
        .durability
        .iter()
        .filter(|c| c.broken.iter().any(|b| b == "no-loss"))
        .collect();
    // A kill with no persistence restarts an empty server: every job owed
    // at that moment is gone.
    assert!(
        lost.iter()
            .any(|c| c.label == "process none none server-kill"),
        "{:?}",
        report.durability
    );
    for cell in lost {
        let replay = cell.replays.get("no-loss").unwrap_or_else(|| {
            panic!(
                "{}: no exact replay of its loss: {:?}",
                cell.label, cell.unreduced
            )
        });
        assert_eq!(replay.reproduced, replay.runs, "{}: {replay:?}", cell.label);
        assert!(replay.runs >= 10, "{replay:?}");
        let step = match cell.label.ends_with("power-loss") {
            true => ".P",
            false => ".K",
        };
        assert!(
            replay.line.contains(step),
            "{}: {}",
            cell.label,
            replay.line
        );
        let persistence = cell.label.split(' ').nth(1).unwrap();
        assert!(
            replay
                .line
                .ends_with(&format!("--server process --persistence {persistence}")),
            "{}",
            replay.line
        );
        // Pasted, the line breaks no-loss again (exit 1).
        let words = shlex::split(&replay.line).expect("a shell line");
        let out = Command::new(env!("CARGO_BIN_EXE_ackgap"))
            .args(&words[1..])
            .output()
            .expect("run ackgap");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{}: {stdout}", replay.line);
        assert!(stdout.contains("no-loss"), "{stdout}");
    }
}

/// A cell that held: `valid`, or `not exercised` for an invariant its runs
/// may give no chance to break (a kill-only run need not settle a reaped
/// lease); no-loss and liveness always have jobs owed here, so for them
/// only `valid` holds.
fn held(name: &str, text: &str) -> bool {
    match name {
        "no-loss" | "liveness" => text == "valid",
        _ => text == "valid" || text == "not exercised",
    }
}
