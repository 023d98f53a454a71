//! `ackgap bench --queue Q,...`: one row a queue, printed as each is
//! measured (progress on stderr), then the pipe's cost; `--json` prints one
//! object at the end instead, `--html` draws the rows as bars.

use ackgap::bench::queues::{self, Pipe, QueueRow, QueuesConfig, QueuesObserver, QueuesReport};
use ackgap::bench::{self, BenchReport, Row};
use ackgap::explore::line::shell_word;

use super::bench::{thousands, BenchArgs};
use super::{Exit, ExitError};

/// Jobs per round with --queue when --jobs is not given.
const JOBS: u64 = 2_000;

/// Runs the table for the queues `list` names.
pub(super) async fn run(args: &BenchArgs, list: &str) -> Result<Exit, ExitError> {
    let root = std::env::current_dir().unwrap_or_default();
    let specs = queues::resolve(&root, list).map_err(|e| {
        let exit = match e {
            queues::ResolveError::Missing { .. } => Exit::AdapterUnavailable,
            _ => Exit::Usage,
        };
        ExitError::new(exit, e)
    })?;
    let exe = std::env::current_exe()
        .map_err(|e| ExitError::new(Exit::Internal, format!("the ackgap binary's path: {e}")))?;
    let pipe = format!(
        "exec:{} serve-adapter --queue reference",
        shell_word(&exe.display().to_string())
    );
    let config = QueuesConfig {
        server: args.server.clone(),
        queues: specs,
        workers: args.workers,
        jobs: args.jobs.unwrap_or(JOBS),
        rounds: args.rounds,
        instruction_jobs: args.instruction_jobs,
        pipe: Some(pipe),
    };
    let mut printer = Printer {
        json: args.json,
        config: &config,
    };
    let report = queues::run(config.clone(), &mut printer).await?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string(&Json {
                report: &report,
                reproduce: reproduce(args, list)
            })?
        );
    } else {
        print_end(&report, &reproduce(args, list));
    }
    if let Some(path) = &args.html {
        let html = bench::html::html(&as_bench_report(&report));
        super::bench::write_bars(path, &html, args.json)?;
    }
    Ok(if report.valid {
        Exit::Valid
    } else {
        Exit::Invalid
    })
}

/// The report and the command that runs it again.
#[derive(serde::Serialize)]
struct Json<'a> {
    #[serde(flatten)]
    report: &'a QueuesReport,
    reproduce: String,
}

fn reproduce(args: &BenchArgs, list: &str) -> String {
    let rerun = super::rerun(&args.server, Default::default(), None);
    format!(
        "{}ackgap bench --queue {} --workers {} --jobs {} --rounds {} --instruction-jobs {} --server {}",
        rerun.env,
        shell_word(list),
        args.workers,
        args.jobs.unwrap_or(JOBS),
        args.rounds,
        args.instruction_jobs,
        args.server.redacted()
    )
}

struct Printer<'a> {
    json: bool,
    config: &'a QueuesConfig,
}

impl QueuesObserver for Printer<'_> {
    fn started(&mut self, server: &str, machine: &str) {
        if self.json {
            return;
        }
        let c = self.config;
        let instructions = if c.instruction_jobs == 0 {
            "no instruction counts".to_owned()
        } else {
            format!(
                "instructions: {} jobs one call at a time under callgrind",
                c.instruction_jobs
            )
        };
        outln!(
            "ackgap bench --queue: server {server}\n  machine {machine}, load {}; {} jobs per round, {} rounds, --workers {}; {instructions}\n",
            queues::load(),
            c.jobs,
            c.rounds,
            c.workers,
        );
        outln!(
            "{:<34} {:>12} {:>12} {:>26} {:>26} {:>20} {:>20} {:>7}",
            "queue",
            "instr/enq",
            "instr/l+c",
            "enqueue jobs/s (min–max)",
            "drain jobs/s (min–max)",
            "p50 ms (min–max)",
            "p99 ms (min–max)",
            "rounds"
        );
    }

    fn progress(&mut self, what: &str) {
        errln!("bench: {what}");
    }

    fn row(&mut self, row: &QueueRow) {
        if !self.json {
            print_row(row);
        }
    }
}

/// `median (min–max)` of a rate.
fn rate(s: &queues::Spread) -> String {
    format!(
        "{} ({}–{})",
        thousands(s.median),
        thousands(s.min),
        thousands(s.max)
    )
}

/// `median (min–max)` of a latency in ms.
fn ms(s: &queues::Spread) -> String {
    format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max)
}

fn print_row(row: &QueueRow) {
    let (ie, il) = match &row.instructions {
        Some(i) if i.valid => (thousands(i.enqueue), thousands(i.lease_complete)),
        Some(_) => ("INVALID".into(), "INVALID".into()),
        None => ("-".into(), "-".into()),
    };
    let checked = format!("{}/{}", row.rounds_held, row.rounds_checked);
    if row.enqueue.rounds.is_empty() {
        outln!(
            "{:<34} {:>12} {:>12} {:>26} {:>26} {:>20} {:>20} {:>7}",
            row.queue,
            ie,
            il,
            "INVALID",
            "INVALID",
            "-",
            "-",
            checked
        );
    } else {
        outln!(
            "{:<34} {:>12} {:>12} {:>26} {:>26} {:>20} {:>20} {:>7}",
            row.queue,
            ie,
            il,
            rate(&row.enqueue),
            rate(&row.drain),
            ms(&row.latency_p50_ms),
            ms(&row.latency_p99_ms),
            checked
        );
    }
}

fn print_pipe(pipe: &Pipe) {
    outln!(
        "\nthe pipe's own cost (the reference queue in process, and through {}):\n  \
         enqueue {:+.1} µs/job, drain (lease + complete) {:+.1} µs/job, lease → complete p50 {:+.2} ms\n  \
         (a row of an exec: adapter pays this on top of its queue's own cost; in-process rows do not)",
        pipe.command.trim_start_matches("exec:"),
        pipe.enqueue_us_per_job,
        pipe.drain_us_per_job,
        pipe.latency_p50_ms
    );
}

fn print_end(report: &QueuesReport, reproduce: &str) {
    let timers: Vec<String> = report
        .queues
        .iter()
        .filter_map(|q| {
            let i = q.instructions.as_ref()?;
            Some(format!("{} {}", q.queue, thousands(i.timers_per_job)))
        })
        .collect();
    if !timers.is_empty() {
        outln!(
            "\ninstructions: everything the server executed while the calls ran, its timers included \
             (the idle server's rate times the counts' seconds, per job: {})",
            timers.join(", ")
        );
    }
    if let Some(pipe) = &report.pipe {
        print_pipe(pipe);
    }
    let rows = report
        .queues
        .iter()
        .chain(report.pipe.as_ref().map(|p| &p.row));
    for row in rows.clone().filter(|r| !r.valid) {
        for p in row.problems.iter().take(10) {
            outln!("INVALID {}: {p}", row.queue);
        }
    }
    outln!(
        "\nload average {} at the start, {} at the end (wall-clock figures compare only within one run)\n{}\nrerun: {reproduce}",
        report.load.0,
        report.load.1,
        if report.valid {
            "every round of every queue was read back and held its invariants"
        } else {
            "INVALID: an invariant broke; those rounds report no figure"
        }
    );
}

/// The rows as `ackgap bench`'s, for the bars of `--html`: enqueue and
/// drain jobs/s of each queue.
fn as_bench_report(report: &QueuesReport) -> BenchReport {
    let mut rows = Vec::new();
    let all = report
        .queues
        .iter()
        .chain(report.pipe.as_ref().map(|p| &p.row));
    for q in all {
        for (what, s) in [("enqueue", &q.enqueue), ("drain", &q.drain)] {
            rows.push(Row {
                name: format!("{}: {what}", q.queue),
                group: if q.open == "reference" {
                    "reference"
                } else {
                    "peer"
                },
                unit: "jobs/s",
                workers: report.workers,
                batch: 1,
                per_round: report.jobs,
                rates: s.rounds.clone(),
                median: s.median,
                min: s.min,
                max: s.max,
                server_cpu_us_per_job: None,
                valid: q.valid,
                problems: q.problems.clone(),
            });
        }
    }
    BenchReport {
        server: report.server.clone(),
        machine: report.machine.clone(),
        workers: report.workers,
        batch: 1,
        jobs: report.jobs,
        rounds: report.rounds,
        seed: 0,
        rows,
        valid: report.valid,
        reproduce: String::new(),
    }
}
