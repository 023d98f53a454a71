//! `ackgap chaos`: arguments, output and exit codes of the chaos runner.
//! `src/cli.rs` only routes the subcommand here.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use super::runner::{self, ChaosConfig, ChaosError, ChaosReport, Interrupt, Progress};
use super::schedule::FaultSet;
use crate::check::Verdict;
use crate::cli::{
    EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_UNAVAILABLE, EXIT_UNKNOWN, EXIT_USAGE,
    EXIT_VALID,
};
use crate::consumer;
use crate::server::{Persistence, Server, ServerSpec};

/// The arguments of `ackgap chaos`.
#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// The seed of the fault schedule and the payloads.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Length of the faults phase: `20s`, `1500ms`, `2m` (a bare number is
    /// seconds). Heal, drain and the final read come on top.
    #[arg(long, default_value = "20s", value_parser = parse_duration_ms)]
    duration: u64,
    /// Concurrent workers (each behind its own port of the fault proxy).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// Jobs enqueued over the first 85% of the faults phase.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    jobs: u64,
    /// Lease length (ms, server clock).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    lease_ms: u64,
    /// Enabled faults, comma-separated: `all`, `none`, the groups `worker`,
    /// `network`, `server`, or kinds (crash-before-effect, crash-ack-gap,
    /// crash-after-ack, stale-pause, heartbeat-stop, drop-request,
    /// drop-reply, delay-reply, duplicate-request, reset-connection,
    /// partition, server-pause, server-kill, script-flush); `-NAME` removes.
    #[arg(long, default_value = "all")]
    faults: FaultSet,
    /// Persistence of an embedded server: none, everysec or always. With
    /// `none`, a server kill loses every acknowledged job.
    #[arg(long, default_value = "always")]
    persistence: Persistence,
    /// Where the queue runs: `process`, `container`, or a URL (no server
    /// pause or kill then).
    #[arg(long, default_value = "process", env = "ACKGAP_SERVER")]
    server: ServerSpec,
    /// The queue under test: reference, lmove or rpop.
    #[arg(long, default_value = "reference")]
    queue: String,
    /// The consumer: naive, natural, marker, marker-before, marker-after.
    #[arg(long, default_value = "marker")]
    consumer: consumer::Kind,
    /// The queue's name (its hash tag).
    #[arg(long, default_value = "ackgap-chaos")]
    queue_name: String,
    /// Where to write the history; default
    /// target/ackgap/chaos/chaos-SEED.jsonl.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Print one JSON object instead of tables (and no progress).
    #[arg(long)]
    json: bool,
    /// The durability matrix: the same seed under each persistence mode
    /// (none, everysec, always), server kills added to the faults; prints
    /// which invariants held under which mode. Exits by the `always`
    /// column: 0 if every invariant held there.
    #[arg(long, conflicts_with_all = ["persistence", "history"])]
    matrix: bool,
}

/// Parses `20s`, `1500ms`, `2m` or a bare number of seconds into ms.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, factor) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000)
    } else {
        (s, 1000)
    };
    let n: f64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration: expected e.g. 20s, 1500ms or 2m"))?;
    let ms = n * factor as f64;
    if !(100.0..=86_400_000.0).contains(&ms) {
        return Err(format!("{s:?}: a duration must lie between 100ms and 24h"));
    }
    Ok(ms as u64)
}

fn duration_text(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

impl ChaosArgs {
    fn config(&self) -> ChaosConfig {
        ChaosConfig {
            duration_ms: self.duration,
            workers: self.workers as usize,
            jobs: self.jobs as usize,
            lease_ms: self.lease_ms,
            faults: self.faults.clone(),
            queue: self.queue.clone(),
            consumer: self.consumer,
            queue_name: self.queue_name.clone(),
            ..ChaosConfig::new(self.seed)
        }
    }

    fn replay(&self) -> String {
        let server = match &self.server {
            ServerSpec::Process(_) => "process",
            ServerSpec::Container => "container",
            ServerSpec::Url(_) => "URL",
        };
        format!(
            "ackgap chaos --seed {} --duration {} --workers {} --jobs {} --lease-ms {} --faults {} --persistence {} --server {server} --queue {} --consumer {}",
            self.seed,
            duration_text(self.duration),
            self.workers,
            self.jobs,
            self.lease_ms,
            self.faults,
            self.persistence,
            self.queue,
            self.consumer
        )
    }
}

fn exit_for(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Valid => EXIT_VALID,
        Verdict::Invalid => EXIT_INVALID,
        Verdict::Unknown => EXIT_UNKNOWN,
    }
}

/// The message of a run stopped by Ctrl-C before it had anything to report.
const INTERRUPTED: &str = "interrupted; servers stopped";

/// Runs `ackgap chaos`; answers the exit code, or an error with its code.
///
/// Ctrl-C is handled here rather than by dropping the run (as the other
/// commands do): the run stops its workers and nemesis, heals the server,
/// the report is written on the history so far, the server is stopped,
/// and the exit code is 130.
pub async fn run(args: ChaosArgs) -> Result<u8, (u8, String)> {
    let interrupt = Interrupt::new();
    let listener = {
        let interrupt = interrupt.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupt.raise();
            }
        })
    };
    let result = if args.matrix {
        // The matrix has no partial report: an interrupt drops its servers.
        tokio::select! {
            res = run_matrix(args) => res,
            _ = interrupt.raised() => Err((EXIT_INTERRUPTED, INTERRUPTED.into())),
        }
    } else {
        run_one(args, &interrupt).await
    };
    listener.abort();
    result
}

async fn run_one(args: ChaosArgs, interrupt: &Interrupt) -> Result<u8, (u8, String)> {
    let config = args.config();
    let persistence = match args.server {
        ServerSpec::Url(_) => Persistence::None,
        _ => args.persistence,
    };
    // Dropping a server half started kills its child.
    let mut server = tokio::select! {
        res = Server::start(&args.server, persistence) => {
            res.map_err(|e| (EXIT_UNAVAILABLE, e.to_string()))?
        }
        _ = interrupt.raised() => return Err((EXIT_INTERRUPTED, INTERRUPTED.into())),
    };
    let history = args
        .history
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("target/ackgap/chaos/chaos-{}.jsonl", args.seed)));
    let replay = args.replay();
    let schedule = config.schedule();
    if !args.json {
        println!(
            "ackgap chaos: seed {}, server {}\n  queue {}, consumer {}, {} workers, {} producers, {} jobs, lease {} ms, max_attempts {}, faults {}\n  schedule: {} faults over {}; history {}\n",
            args.seed,
            server.describe(),
            config.queue,
            config.consumer,
            config.workers,
            config.producers,
            config.jobs,
            config.lease_ms,
            config.max_attempts,
            config.faults,
            schedule.faults.len(),
            duration_text(config.duration_ms),
            history.display()
        );
    }
    let progress: Option<Progress> = if args.json {
        None
    } else if std::io::stderr().is_terminal() {
        Some(Arc::new(|line: &str| eprint!("\r{line}   ")))
    } else {
        Some(Arc::new(|line: &str| eprintln!("{line}")))
    };
    let result = runner::run_until(
        &mut server,
        config,
        Some(history.clone()),
        progress,
        interrupt.clone(),
    )
    .await;
    if !args.json && std::io::stderr().is_terminal() {
        eprintln!();
    }
    let stopped = server.stop().await;
    let report = result.map_err(|e| {
        let code = match e {
            ChaosError::Usage(_) => EXIT_USAGE,
            ChaosError::Unavailable(_) => EXIT_UNAVAILABLE,
            ChaosError::Internal(_) => EXIT_INTERNAL,
        };
        (code, format!("chaos run stopped: {e}\nreproduce: {replay}"))
    })?;
    stopped.map_err(|e| (EXIT_INTERNAL, format!("stopping the server: {e}")))?;

    let summary = history.with_extension("json");
    let mut value = serde_json::to_value(&report).map_err(|e| (EXIT_INTERNAL, e.to_string()))?;
    value["replay"] = replay.clone().into();
    value["persistence"] = persistence.to_string().into();
    if let Err(e) = std::fs::write(&summary, format!("{value:#}\n")) {
        eprintln!("ackgap: cannot write {}: {e}", summary.display());
    }
    let html = history.with_extension("html");
    let title = match &report.interrupted {
        None => format!("ackgap chaos seed {}: {}", args.seed, report.verdict),
        Some(note) => format!(
            "ackgap chaos seed {}: {} (interrupted) — {note}",
            args.seed, report.verdict
        ),
    };
    let written = crate::history::read_file(&history)
        .map_err(|e| e.to_string())
        .and_then(|events| {
            std::fs::write(
                &html,
                crate::check::timeline::render(&title, &events, &report.invariants),
            )
            .map_err(|e| e.to_string())
        });
    if let Err(e) = written {
        eprintln!("ackgap: cannot write the report {}: {e}", html.display());
    }
    value["html"] = html.display().to_string().into();
    if report.verdict != Verdict::Valid || report.interrupted.is_some() {
        let path = history.with_extension("txt");
        let mut text = format!("verdict: {}\nreproduce: {replay}\n", report.verdict);
        if let Some(note) = &report.interrupted {
            text.push_str(&format!("{note}\n"));
        }
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("ackgap: cannot write {}: {e}", path.display());
        }
    }
    if args.json {
        value["summary"] = summary.display().to_string().into();
        println!("{value}");
    } else {
        print_report(&report, &replay, &summary, &html);
    }
    if let Some(note) = &report.interrupted {
        eprintln!("ackgap: {note}; server stopped");
        return Ok(EXIT_INTERRUPTED);
    }
    if interrupt.is_raised() {
        // Ctrl-C came during the final read: the report is complete.
        eprintln!("ackgap: interrupted after the run was judged; server stopped");
        return Ok(EXIT_INTERRUPTED);
    }
    Ok(exit_for(report.verdict))
}

/// `--matrix`: one run per persistence mode, then a table of verdicts.
async fn run_matrix(args: ChaosArgs) -> Result<u8, (u8, String)> {
    if matches!(args.server, ServerSpec::Url(_)) {
        return Err((
            EXIT_USAGE,
            "--matrix kills and restarts the server: use --server process or container".into(),
        ));
    }
    let modes = [
        Persistence::None,
        Persistence::AofEverysec,
        Persistence::AofAlways,
    ];
    let mut config = args.config();
    config
        .faults
        .0
        .insert(super::schedule::FaultKind::ServerKill);
    let mut reports: Vec<(Persistence, ChaosReport)> = Vec::new();
    for mode in modes {
        let mut server = Server::start(&args.server, mode)
            .await
            .map_err(|e| (EXIT_UNAVAILABLE, e.to_string()))?;
        let history = PathBuf::from(format!(
            "target/ackgap/chaos/chaos-{}-{mode}.jsonl",
            args.seed
        ));
        if !args.json {
            eprintln!(
                "matrix: seed {}, persistence {mode}: {}",
                args.seed,
                server.describe()
            );
        }
        let result = runner::run(&mut server, config.clone(), Some(history), None).await;
        let stopped = server.stop().await;
        let report = result.map_err(|e| (EXIT_UNAVAILABLE, format!("persistence {mode}: {e}")))?;
        stopped.map_err(|e| (EXIT_INTERNAL, format!("stopping the server: {e}")))?;
        reports.push((mode, report));
    }
    let always = reports
        .iter()
        .find(|(m, _)| *m == Persistence::AofAlways)
        .map_or(Verdict::Unknown, |(_, r)| r.verdict);
    if args.json {
        let rows: Vec<serde_json::Value> = reports
            .iter()
            .map(|(mode, r)| {
                serde_json::json!({"persistence": mode.to_string(), "verdict": r.verdict,
                    "lost": r.lost, "invariants": r.invariants, "history": r.history,
                    "fired": r.fired})
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"seed": args.seed, "config": config, "modes": rows, "verdict": always})
        );
    } else {
        print!("\n{:<18}", "invariant");
        for (mode, _) in &reports {
            print!(" {:<10}", mode.to_string());
        }
        println!();
        let names: Vec<&str> = reports[0]
            .1
            .invariants
            .iter()
            .map(|r| r.invariant)
            .collect();
        for name in names {
            print!("{name:<18}");
            for (_, r) in &reports {
                let v = r
                    .invariants
                    .iter()
                    .find(|i| i.invariant == name)
                    .map_or("-".to_string(), |i| i.verdict.to_string());
                print!(" {v:<10}");
            }
            println!();
        }
        for (mode, r) in &reports {
            let kills = r
                .fired
                .get(&super::schedule::FaultKind::ServerKill)
                .copied()
                .unwrap_or(0);
            println!(
                "{mode}: {kills} kills, {} acknowledged jobs lost{}",
                r.lost.len(),
                r.history
                    .as_ref()
                    .map_or(String::new(), |h| format!("; history {}", h.display()))
            );
        }
        println!("\nverdict under always: {always}");
    }
    Ok(exit_for(always))
}

fn print_report(
    report: &ChaosReport,
    replay: &str,
    summary: &std::path::Path,
    html: &std::path::Path,
) {
    let p = &report.phases;
    println!(
        "phases: faults {:.1} s, heal {} ms, drain {} ms, read+check {} ms\n",
        p.faults_ms as f64 / 1000.0,
        p.heal_ms,
        p.drain_ms,
        p.read_ms
    );
    println!("{:<20} {:>8} {:>6}", "fault", "injected", "fired");
    for kind in &report.config.faults.0 {
        println!(
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
    println!();
    println!("{:<18} {:<8}  counts", "invariant", "verdict");
    for r in &report.invariants {
        let counts: Vec<String> = r.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("{:<18} {:<8}  {}", r.invariant, r.verdict, counts.join(" "));
        for v in r.violations.iter().take(10) {
            println!("    violation: {v}");
        }
        if r.violations.len() > 10 {
            println!("    ... and {} more", r.violations.len() - 10);
        }
    }
    let e = &report.effects;
    let histogram: Vec<String> = e
        .histogram
        .iter()
        .map(|(n, jobs)| format!("{n}:{jobs}"))
        .collect();
    println!(
        "\neffects: total={} duplicated={} missing={}  (effects:jobs {})",
        e.total,
        e.duplicated,
        e.missing,
        histogram.join(" ")
    );
    if !report.lost.is_empty() {
        let shown: Vec<&str> = report.lost.iter().take(20).map(String::as_str).collect();
        let more = report.lost.len() - shown.len();
        println!(
            "lost ({}): {}{}",
            report.lost.len(),
            shown.join(" "),
            if more > 0 {
                format!(" ... and {more} more (all in the summary)")
            } else {
                String::new()
            }
        );
    }
    if let Some(note) = &report.interrupted {
        println!("\n{note}");
    }
    println!(
        "\nverdict: {}  ({} ops, {} events)",
        report.verdict, report.ops, report.events
    );
    println!(
        "files: history {}, summary {}, report {}",
        report
            .history
            .as_ref()
            .map_or("not written".into(), |p| p.display().to_string()),
        summary.display(),
        html.display()
    );
    println!("reproduce: {replay}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_seconds_milliseconds_and_minutes() {
        assert_eq!(parse_duration_ms("20s"), Ok(20_000));
        assert_eq!(parse_duration_ms("1500ms"), Ok(1500));
        assert_eq!(parse_duration_ms("2m"), Ok(120_000));
        assert_eq!(parse_duration_ms("3"), Ok(3000));
        assert!(parse_duration_ms("soon").is_err());
        assert!(parse_duration_ms("0s").is_err());
        assert_eq!(duration_text(20_000), "20s");
    }
}
