//! `ackgap chaos`'s printing: a run's plan before it starts, its report
//! (phases, faults, invariants, effects, errors) and the persistence
//! matrix's table.

use std::path::Path;

use ackgap::chaos::persistence_matrix::DurabilityMatrix;
use ackgap::chaos::runner::{ChaosConfig, ChaosReport};
use ackgap::chaos::schedule::FaultKind;
use ackgap::check::Verdict;
use ackgap::server::Server;

use super::{duration_text, ChaosArgs};

/// One run's report: phases, faults, invariants, effects, lost jobs,
/// verdict, files and the replay command.
pub(super) fn print_report(report: &ChaosReport, replay: &str, summary: &Path, html: &Path) {
    let p = &report.phases;
    outln!(
        "phases: faults {:.1} s, heal {} ms, drain {} ms, read+check {} ms\n",
        p.faults_ms as f64 / 1000.0,
        p.heal_ms,
        p.drain_ms,
        p.read_ms
    );
    outln!("{:<20} {:>8} {:>6}", "fault", "injected", "fired");
    for kind in &report.config.faults.0 {
        outln!(
            "{:<20} {:>8} {:>6}{}",
            kind.name(),
            report.injected.get(kind).copied().unwrap_or(0),
            report.fired.get(kind).copied().unwrap_or(0),
            if report.fired.contains_key(kind) {
                ""
            } else {
                "  (never fired)"
            }
        );
    }
    for m in &report.migrations {
        outln!("  {}", m.describe());
    }
    outln!(
        "\ndraws: {}\nworkload: {}\n",
        report.draws.describe(),
        report.workload.describe()
    );
    print_invariants(report);
    outln!("liveness bound: {}", report.liveness_bound.derivation);
    if let Some(why) = &report.drain_stalled {
        outln!("drain stopped early: {why}");
    }
    outln!("schedule: {}", report.schedule_slip.describe());
    if let Some(latest) = &report.schedule_slip.latest {
        outln!("  the latest: {latest}");
    }
    print_effects(report);
    print_errors(report);
    if let Some(note) = &report.interrupted {
        outln!("\n{note}");
    }
    outln!(
        "\nverdict: {}  ({} ops, {} events)",
        verdict_line(report),
        report.ops,
        report.events
    );
    outln!(
        "files in {}:",
        super::super::artifacts::dir_of(summary).display()
    );
    outln!(
        "  history {}, summary {}, report {}",
        report
            .history
            .as_ref()
            .map_or("not written".into(), |p| p.display().to_string()),
        summary.display(),
        html.display()
    );
    outln!("rerun: {replay}");
}

/// The verdict, the invariants not exercised, and, when the verdict is not
/// invalid and the schedule slipped, that mark (`valid; schedule slipped:
/// ...`): a finding stands however late it came, a `valid` under load says
/// less.
pub(super) fn verdict_line(report: &ChaosReport) -> String {
    let line = ackgap::check::verdict_with(
        report.verdict,
        &ackgap::check::unexercised(&report.invariants),
    );
    match report.schedule_slip.note() {
        Some(note) if report.verdict != Verdict::Invalid => format!("{line}; {note}"),
        _ => line,
    }
}

/// The invariants, at most ten violations each (a chaos run can have
/// thousands; the summary has them all).
fn print_invariants(report: &ChaosReport) {
    outln!("{:<18} {:<13}  counts", "invariant", "verdict");
    for r in &report.invariants {
        let mut counts: Vec<String> = r.judged_text().into_iter().collect();
        counts.extend(r.counts.iter().map(|(k, v)| format!("{k}={v}")));
        outln!(
            "{:<18} {:<13}  {}",
            r.invariant,
            r.verdict_text(),
            counts.join(" ")
        );
        // An unknown invariant's entries say why it could not be judged:
        // nothing was violated.
        let word = if r.verdict == Verdict::Unknown {
            "not judged"
        } else {
            "violation"
        };
        for v in r.violations.iter().take(10) {
            outln!("    {word}: {v}");
        }
        if r.violations.len() > 10 {
            outln!("    ... and {} more", r.violations.len() - 10);
        }
    }
}

/// The effects' histogram and the acknowledged jobs lost.
fn print_effects(report: &ChaosReport) {
    let e = &report.effects;
    let histogram: Vec<String> = e
        .histogram
        .iter()
        .map(|(n, jobs)| format!("{n}:{jobs}"))
        .collect();
    outln!(
        "\neffects: total={} duplicated={} missing={}  (effects:jobs {})",
        e.total,
        e.duplicated,
        e.missing,
        histogram.join(" ")
    );
    if !report.lost.is_empty() {
        let shown: Vec<&str> = report.lost.iter().take(20).map(String::as_str).collect();
        let more = report.lost.len() - shown.len();
        outln!(
            "lost ({}): {}{}",
            report.lost.len(),
            shown.join(" "),
            if more > 0 {
                format!(" ... and {more} more (all in the summary)")
            } else {
                String::new()
            }
        );
        let causes: Vec<String> = report
            .fired
            .iter()
            .filter(|(k, _)| k.can_lose_writes())
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect();
        if !causes.is_empty() {
            outln!(
                "  fired, and can lose acknowledged writes: {}",
                causes.join(", ")
            );
        }
    }
    for finding in &report.consumer_findings {
        outln!("the consumer's finding: {finding}");
    }
    // Stranded apart from absent, as no-loss counts the jobs it was owed.
    if let Some(r) = report.invariants.iter().find(|r| r.invariant == "no-loss") {
        let count = |name: &str| r.counts.get(name).copied().unwrap_or(0);
        if count("lost") > 0 {
            outln!(
                "  of the {} jobs owed and not finished: {} stranded (still pending or active: the queue holds them intact), {} absent (gone from the queue)",
                count("lost"),
                count("stranded"),
                count("absent")
            );
        }
    }
}

/// The errors by kind, and the server's own account and what it explains.
fn print_errors(report: &ChaosReport) {
    if !report.errors.is_empty() {
        outln!("\nerrors by kind:");
        for (kind, e) in &report.errors {
            let by_op: Vec<String> = e.by_op.iter().map(|(op, n)| format!("{op} {n}")).collect();
            outln!("  {kind:<18} {:>7}  ({})", e.count, by_op.join(", "));
            outln!("  {:<18} {:>7}  first: {}", "", "", e.first);
        }
    }
    match (&report.server, &report.server_unread) {
        (Some(s), _) => {
            let replies: Vec<String> = s
                .error_replies
                .iter()
                .map(|(code, n)| format!("{code}={n}"))
                .collect();
            outln!(
                "\nserver: evicted_keys={} expired_keys={} error_replies: {}  (used_memory {}, maxmemory {}, {}){}",
                s.evicted_keys,
                s.expired_keys,
                if replies.is_empty() { "none".to_string() } else { replies.join(" ") },
                s.used_memory,
                if s.maxmemory == 0 { "none".to_string() } else { s.maxmemory.to_string() },
                s.maxmemory_policy,
                if s.whole_run { "" } else { "; counters since a restart" }
            );
            for line in &s.explains {
                outln!("  {line}");
            }
        }
        (None, Some(why)) => outln!("\nserver: its account was not read: {why}"),
        (None, None) => {}
    }
}

/// The matrix as a table: invariants by persistence mode, then each
/// mode's kills and lost jobs.
pub(super) fn print_matrix(matrix: &DurabilityMatrix) {
    let reports = &matrix.reports;
    out!("\n{:<18}", "invariant");
    for (mode, _) in reports {
        out!(" {:<10}", mode.to_string());
    }
    outln!();
    let names: Vec<&str> = reports[0]
        .1
        .invariants
        .iter()
        .map(|r| r.invariant)
        .collect();
    for name in names {
        out!("{name:<18}");
        for (_, r) in reports {
            let v = r
                .invariants
                .iter()
                .find(|i| i.invariant == name)
                .map_or("-".to_string(), |i| i.verdict.to_string());
            out!(" {v:<10}");
        }
        outln!();
    }
    for (mode, r) in reports {
        let kills = r.fired.get(&FaultKind::ServerKill).copied().unwrap_or(0);
        outln!(
            "{mode}: {kills} kills, {} acknowledged jobs lost{}",
            r.lost.len(),
            r.history
                .as_ref()
                .map_or(String::new(), |h| format!("; history {}", h.display()))
        );
    }
    outln!("\nverdict under always: {}", matrix.verdict());
}

/// The run's settings and its fault schedule, before it starts.
pub(super) fn print_plan(args: &ChaosArgs, config: &ChaosConfig, server: &Server, history: &Path) {
    let schedule = config.schedule();
    outln!(
        "ackgap chaos: seed {}, server {}\n  queue {}, consumer {}, {} workers, {} producers, {} jobs, lease {} ms, faults {}\n  draws: {}\n  schedule: {} faults over {}\n  files in {}: history {}\n",
        args.seed,
        server.describe(),
        config.queue,
        config.consumer,
        config.workers,
        config.producers,
        config.jobs,
        config.lease_ms,
        config.faults,
        config.draws().describe(),
        schedule.faults.len(),
        duration_text(config.duration_ms),
        super::super::artifacts::dir_of(history).display(),
        history.display()
    );
}
