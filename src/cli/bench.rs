//! `ackgap bench`: the flags, and the table printed row by row as the
//! library ([`ackgap::bench`]) measures.

use ackgap::bench::{self, BenchConfig, BenchReport, Observer, Row};
use ackgap::queue::BATCH_MAX;
use ackgap::server::ServerSpec;

use super::{Exit, ExitError};

/// The options of `ackgap bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Where the queue runs: `process` (an embedded valkey-server child),
    /// `container`, or a URL `redis://[user:pass@]host:port`. A URL server
    /// must be one the bench may write to: it writes and deletes keys under
    /// `emq:{bench-*}` and `bench:{*}`.
    #[arg(long, default_value = "process", env = "ACKGAP_SERVER")]
    pub(super) server: ServerSpec,
    /// Concurrent tasks per scenario, sharing one multiplexed connection
    /// (so their calls pipeline).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(super) workers: u64,
    /// Jobs per batch call in the batched rows (1 to 1000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=BATCH_MAX as u64))]
    pub(super) batch: u64,
    /// Jobs per round of each queue scenario (the ceiling rows make five
    /// times as many calls). Default 20,000; 2,000 with --queue.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub(super) jobs: Option<u64>,
    /// Rounds per row: median, min and max are over these.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub(super) rounds: u64,
    /// The seed of the harness rows (model steps, generated history).
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub(super) json: bool,
    /// Run only the rows whose name contains this text (`--only drain`,
    /// `--only ceiling`); every row when absent.
    #[arg(long, conflicts_with = "queue")]
    pub(super) only: Option<String>,
    /// The same rows for each of these queues, side by side (comma
    /// separated): a shipped name (reference, lmove, rpop, streams,
    /// apalis), an adapter of adapters/ by its name (bullmq, celery, rq,
    /// dramatiq, arq, sidekiq, lmove-python: its adapter.toml's command,
    /// run from the repository's root), or exec:COMMAND. Each queue:
    /// server instructions per job (callgrind), enqueue and drain jobs/s
    /// and lease → complete latency over the rounds, every round read
    /// back; then the pipe's cost (the reference queue in process and
    /// through `ackgap serve-adapter`).
    #[arg(long, value_name = "Q,...")]
    pub(super) queue: Option<String>,
    /// With --queue: jobs of each queue's instruction count, one call at a
    /// time on a server under callgrind (0: no instruction counts).
    #[arg(long, default_value_t = 100, requires = "queue", value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub(super) instruction_jobs: u64,
    /// Also draw the rows as bars side by side in this HTML file (the
    /// median, and each row's min–max); an existing file is refused.
    #[arg(long, value_name = "FILE")]
    pub(super) html: Option<std::path::PathBuf>,
}

impl BenchArgs {
    /// The library's settings for these flags.
    fn config(&self) -> BenchConfig {
        BenchConfig {
            server: self.server.clone(),
            workers: self.workers,
            batch: self.batch,
            jobs: self.jobs.unwrap_or(20_000),
            rounds: self.rounds,
            seed: self.seed,
            only: self.only.clone(),
        }
    }
}

/// Runs the bench; exits 0 when every row held its invariants, 1 when one
/// did not.
pub(super) async fn run(args: BenchArgs) -> Result<Exit, ExitError> {
    // Before any server starts: an earlier run's file is never replaced.
    if let Some(html) = args.html.as_deref().filter(|h| h.exists()) {
        return Err(ExitError::new(
            Exit::CantCreate,
            format!(
                "cannot write the bars to {}: the file exists (an earlier run's?); name another file",
                html.display()
            ),
        ));
    }
    // Its folder must take a new file: found out now, not after the work.
    if let Some(html) = args.html.as_deref() {
        super::artifacts::check_writable("bench", Some(html), &[], false)?;
    }
    if let Some(list) = args.queue.clone() {
        return super::bench_queues::run(&args, &list).await;
    }
    let config = args.config();
    let mut printer = Printer {
        json: args.json,
        args: &args,
        failed: None,
    };
    let report = bench::run(config, &mut printer).await?;
    if let Some(failure) = printer.failed {
        return Err(failure);
    }
    if let Some(path) = &args.html {
        write_bars(path, &bench::html::html(&report), args.json)?;
    }
    Ok(if report.valid {
        Exit::Valid
    } else {
        Exit::Invalid
    })
}

/// Prints the table as the rows come, or the JSON report at the end.
struct Printer<'a> {
    /// One JSON object instead of the table.
    json: bool,
    /// The flags, for the table's heading.
    args: &'a BenchArgs,
    /// The report could not be written as JSON.
    failed: Option<ExitError>,
}

impl Observer for Printer<'_> {
    fn started(&mut self, server: &str, machine: &str) {
        if self.json {
            return;
        }
        let &BenchArgs {
            rounds,
            workers,
            batch,
            ..
        } = self.args;
        let jobs = self.args.jobs.unwrap_or(20_000);
        outln!(
            "ackgap bench: server {server}\n  machine {machine}; {jobs} jobs per round, {rounds} rounds, --workers {workers}, --batch {batch}\n"
        );
        print_header();
    }

    fn row(&mut self, row: &Row) {
        if !self.json {
            print_row(row);
        }
    }

    fn finished(&mut self, report: &BenchReport) {
        if self.json {
            match serde_json::to_string(report) {
                Ok(text) => outln!("{text}"),
                Err(e) => self.failed = Some(e.into()),
            }
        } else {
            // The library names the server; the binary it ran, if any, is
            // ours to put in front.
            let rerun = super::rerun(&self.args.server, Default::default(), None);
            print_verdict(report, &rerun.env);
        }
    }
}

/// The broken rounds' problems, the verdict and the replay command.
fn print_verdict(report: &BenchReport, env: &str) {
    for row in report.rows.iter().filter(|r| !r.valid) {
        for p in row.problems.iter().take(10) {
            outln!("INVALID {}: {p}", row.name);
        }
    }
    outln!(
        "\n{}\nrerun: {env}{}",
        if report.valid {
            "every round held its invariants"
        } else {
            "INVALID: an invariant broke; those rows report no figure"
        },
        report.reproduce
    );
}

/// The table's header.
fn print_header() {
    outln!(
        "{:<58} {:>7} {:>5} {:>12} {:>12} {:>12} {:>10}",
        "row",
        "workers",
        "batch",
        "median",
        "min",
        "max",
        "cpu µs/job"
    );
}

/// One measured row; a row with a broken round shows no figure.
fn print_row(row: &Row) {
    let cpu = row
        .server_cpu_us_per_job
        .map_or("-".into(), |c| format!("{c:.2}"));
    if row.valid {
        outln!(
            "{:<58} {:>7} {:>5} {:>12} {:>12} {:>12} {:>10}  {}",
            row.name,
            row.workers,
            row.batch,
            thousands(row.median),
            thousands(row.min),
            thousands(row.max),
            cpu,
            row.unit
        );
    } else {
        outln!(
            "{:<58} {:>7} {:>5} {:>12} {:>12} {:>12} {:>10}",
            row.name,
            row.workers,
            row.batch,
            "INVALID",
            "-",
            "-",
            "-"
        );
    }
}

/// `1234567.8` as `1,234,568`.
pub(super) fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Writes the bench's bars (`--html`) to `path`, and names it unless the
/// output is `--json`.
pub(super) fn write_bars(path: &std::path::Path, html: &str, json: bool) -> Result<(), ExitError> {
    std::fs::write(path, html).map_err(|e| {
        ExitError::new(
            Exit::CantCreate,
            format!("cannot write the bars to {}: {e}", path.display()),
        )
    })?;
    if !json {
        outln!("bars: {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_234_567.8), "1,234,568");
    }
}
