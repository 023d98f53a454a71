//! `ackgap bench --queue Q,...`: the same rows for any queue ackgap
//! judges, side by side in one run on one server. Each queue is driven
//! through the [`Adapter`] contract (a shipped adapter in process, or an
//! `exec:` adapter over the adapter protocol), so every row pays the same
//! way for the same work:
//!
//! - **server instructions per job** (callgrind, [`super::callgrind`]), for
//!   an enqueue and for a worker's lease + complete, one call at a time on
//!   a second server of the same binary under callgrind: the figure no
//!   load on the machine moves. It counts everything the server did while
//!   the calls ran, a library's own background polls included;
//! - **jobs per second**, enqueue then drain, by `workers` concurrent tasks
//!   (each a worker of its own name), and the **latency** from a lease's
//!   answer to its complete's answer (p50, p99), each as the median and
//!   min–max over the rounds;
//! - the **invariants** of every round, read back through the adapter's
//!   own `read`: every enqueue admitted, every job leased exactly once and
//!   settled exactly once, every job `done` and nothing else in the queue,
//!   no structure problem. A round that breaks one is reported with its
//!   problems and gives no figure.
//!
//! Beside the table, the pipe's own cost: the reference queue in process
//! and the same queue through `ackgap serve-adapter` (`exec:`), per job.
//!
//! # Design notes
//!
//! `resolve` turns the list into adapter specs (a shipped name, an adapter
//! of `adapters/*/adapter.toml` by its name, `exec:COMMAND`); `run` tells a
//! `QueuesObserver` of each row, and `src/cli/bench_queues.rs` prints it.
//! The server under callgrind is `callgrind::Traced`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::callgrind::{CallgrindError, Traced};
use super::{machine, median, BenchError};
use crate::adapter::{self, Adapter, EnqueueOptions, Enqueued, ExecOptions, Settled};
use crate::queue::Queue;
use crate::server::{Persistence, Server, ServerSpec};

/// A lease long enough that no bench lease expires.
const LEASE_MS: u64 = 600_000;
const OPTS: EnqueueOptions = EnqueueOptions {
    max_attempts: 3,
    delay_ms: 0,
};
/// How long a drain waits for a job it is owed when every lease comes back
/// empty (a queue whose jobs become visible late) before it stops and the
/// read-back says what is left.
const STALL_MAX: Duration = Duration::from_secs(30);

/// One queue of the table: the name printed and what opens it.
#[derive(Clone, Debug, Serialize)]
pub struct QueueSpec {
    /// The name as `--queue` gave it (`reference`, `bullmq`, `exec:...`).
    pub name: String,
    /// What [`adapter::open`] takes: a shipped name or `exec:COMMAND`.
    pub open: String,
}

/// Why a `--queue` list could not be turned into queues.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// A name that is neither shipped, nor in `adapters/`, nor `exec:`.
    #[error("--queue: {0}")]
    Unknown(String),
    /// An adapter of `adapters/` whose command is not there.
    #[error("--queue {name}: the adapter's command {command} is not there ({why}); run from the repository's root, after ci/install-adapters")]
    Missing {
        /// The adapter's name.
        name: String,
        /// Its command.
        command: String,
        /// What was looked for.
        why: String,
    },
}

/// The adapters of `root/adapters/*/adapter.toml`: (name, command), by name.
pub fn listed(root: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = crate::adapter::listing::AdapterToml::all(root)
        .into_iter()
        .map(|a| (a.name, a.command))
        .collect();
    out.sort();
    out
}

/// The queues `list` (comma-separated) names: a shipped adapter of this
/// build, an adapter of `root/adapters/` by its name (its `adapter.toml`'s
/// `command`, which must be there), else one the binary carries
/// (`adapter::shipped`), or `exec:COMMAND`.
pub fn resolve(root: &Path, list: &str) -> Result<Vec<QueueSpec>, ResolveError> {
    let adapters = listed(root);
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name.starts_with("exec:") || adapter::NAMES.contains(&name) {
            adapter::check_name(name).map_err(ResolveError::Unknown)?;
            out.push(QueueSpec {
                name: name.to_owned(),
                open: name.to_owned(),
            });
            continue;
        }
        if let Some((_, command)) = adapters.iter().find(|(n, _)| n == name) {
            let program = command.split_whitespace().next().unwrap_or_default();
            let path = root.join(program);
            if program.contains('/') && !path.exists() {
                return Err(ResolveError::Missing {
                    name: name.to_owned(),
                    command: command.clone(),
                    why: format!("no file {}", path.display()),
                });
            }
            out.push(QueueSpec {
                name: name.to_owned(),
                open: format!("exec:{command}"),
            });
            continue;
        }
        // Outside a checkout: the copy the binary carries, which opening
        // the name writes out and runs in the current environment.
        if adapter::shipped::is_shipped(name) {
            out.push(QueueSpec {
                name: name.to_owned(),
                open: name.to_owned(),
            });
            continue;
        }
        // A name whose cargo feature this build lacks says so.
        adapter::check_name(name).map_err(|e| {
            if e.contains("cargo feature") {
                return ResolveError::Unknown(e);
            }
            let names: Vec<&str> = adapters.iter().map(|(n, _)| n.as_str()).collect();
            let listed = if names.is_empty() {
                String::new()
            } else {
                format!(", an adapter of adapters/ ({})", names.join(", "))
            };
            ResolveError::Unknown(format!(
                "unknown queue {name:?}: expected one of {}{listed}, or exec:COMMAND",
                adapter::NAMES.join(", ")
            ))
        })?;
    }
    if out.is_empty() {
        return Err(ResolveError::Unknown("names no queue".into()));
    }
    Ok(out)
}

/// The settings of `ackgap bench --queue`.
#[derive(Clone, Debug)]
pub struct QueuesConfig {
    /// Where the queues run (the wall-clock rows). A URL server is refused:
    /// the instruction rows start a server of their own under callgrind.
    pub server: ServerSpec,
    /// The queues, in the table's order.
    pub queues: Vec<QueueSpec>,
    /// Concurrent tasks enqueueing, then draining.
    pub workers: u64,
    /// Jobs per round.
    pub jobs: u64,
    /// Rounds per queue.
    pub rounds: u64,
    /// Jobs of the instruction count per queue (0: no instruction rows).
    pub instruction_jobs: u64,
    /// The reference queue through the protocol (`exec:ACKGAP
    /// serve-adapter --queue reference`), measured beside the reference
    /// queue in process for the pipe's cost; `None`: not measured.
    pub pipe: Option<String>,
}

/// A median with its min and max over the rounds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Spread {
    /// The median.
    pub median: f64,
    /// The lowest.
    pub min: f64,
    /// The highest.
    pub max: f64,
    /// Each round's.
    pub rounds: Vec<f64>,
}

impl Spread {
    fn of(values: Vec<f64>) -> Spread {
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        Spread {
            median: median(&sorted),
            min: sorted.first().copied().unwrap_or(0.0),
            max: sorted.last().copied().unwrap_or(0.0),
            rounds: values,
        }
    }
}

/// Instructions the server executed per job, one call at a time: all it
/// executed while the calls ran, as `benches/instructions.rs` counts. Its
/// timers (`serverCron`, `hz` times a second) run meanwhile: a count
/// whose calls come slowly holds more of them, at most
/// [`Instructions::timers_per_job`].
#[derive(Clone, Debug, Serialize)]
pub struct Instructions {
    /// Jobs counted.
    pub jobs: u64,
    /// Per enqueue.
    pub enqueue: f64,
    /// Per job of a worker's lease + complete.
    pub lease_complete: f64,
    /// What the idle server executed per second (measured over a second
    /// before the counts: its timers).
    pub idle_per_second: f64,
    /// The idle rate times the counts' seconds, per job: about how much of
    /// `enqueue` + `lease_complete` the timers may be (more on a loaded
    /// machine, where the calls take longer).
    pub timers_per_job: f64,
    /// Seconds the enqueues took under callgrind.
    pub enqueue_s: f64,
    /// Seconds the leases and completes took under callgrind.
    pub lease_complete_s: f64,
    /// True when the counted round held its invariants.
    pub valid: bool,
    /// What broke, or why nothing could be counted.
    pub problems: Vec<String>,
}

/// One queue's row.
#[derive(Clone, Debug, Serialize)]
pub struct QueueRow {
    /// The queue as `--queue` named it.
    pub queue: String,
    /// What opened it.
    pub open: String,
    /// The adapter's name ([`Adapter::name`]: an `exec:` adapter's is its
    /// command).
    pub adapter: String,
    /// Server instructions per job; `None` when not counted.
    pub instructions: Option<Instructions>,
    /// Enqueue, jobs/s.
    pub enqueue: Spread,
    /// Drain (lease + complete), jobs/s.
    pub drain: Spread,
    /// Lease answered → complete answered, p50, ms.
    pub latency_p50_ms: Spread,
    /// The same, p99, ms.
    pub latency_p99_ms: Spread,
    /// Rounds run, each read back and checked.
    pub rounds_checked: u64,
    /// Rounds that held every invariant (only theirs give figures).
    pub rounds_held: u64,
    /// True when every round (and the counted one) held its invariants.
    pub valid: bool,
    /// The problems of the rounds that did not.
    pub problems: Vec<String>,
}

/// The pipe's cost: the reference queue in process and through
/// `serve-adapter`, per job.
#[derive(Clone, Debug, Serialize)]
pub struct Pipe {
    /// What was run through the pipe.
    pub command: String,
    /// The reference queue through the pipe (its row).
    pub row: QueueRow,
    /// Wall-clock µs per job added by the pipe, enqueue (medians).
    pub enqueue_us_per_job: f64,
    /// The same, drain.
    pub drain_us_per_job: f64,
    /// Latency added at p50, ms.
    pub latency_p50_ms: f64,
}

/// `ackgap bench --queue`'s report, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct QueuesReport {
    /// The server, described.
    pub server: String,
    /// The machine.
    pub machine: String,
    /// `/proc/loadavg` when the run started and when it ended.
    pub load: (String, String),
    /// Concurrent tasks.
    pub workers: u64,
    /// Jobs per round.
    pub jobs: u64,
    /// Rounds per queue.
    pub rounds: u64,
    /// Jobs of each instruction count.
    pub instruction_jobs: u64,
    /// One row a queue, in `--queue`'s order.
    pub queues: Vec<QueueRow>,
    /// The pipe's cost, when measured.
    pub pipe: Option<Pipe>,
    /// True when every row held its invariants.
    pub valid: bool,
}

/// What `ackgap bench --queue` tells its caller as it goes.
pub trait QueuesObserver {
    /// The server is up.
    fn started(&mut self, _server: &str, _machine: &str) {}
    /// A step of a long run began (for a progress line).
    fn progress(&mut self, _what: &str) {}
    /// A queue's row is measured.
    fn row(&mut self, _row: &QueueRow) {}
}

impl QueuesObserver for () {}

/// The machine's load average now (`/proc/loadavg`'s first three fields).
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Runs the table: every queue's rows, then the pipe's cost.
pub async fn run(
    config: QueuesConfig,
    observer: &mut (dyn QueuesObserver + Send),
) -> Result<QueuesReport, BenchError> {
    if matches!(config.server, ServerSpec::Url(_)) && config.instruction_jobs > 0 {
        return Err(BenchError::Usage(
            "--queue counts instructions on a server of its own under callgrind: give \
             --server process, or --instruction-jobs 0 with a URL"
                .into(),
        ));
    }
    let load_before = load();
    let server = Server::start(&config.server, Persistence::None)
        .await
        .map_err(BenchError::Server)?;
    observer.started(&server.describe(), &machine());
    hellos(&config, &server, observer).await?;
    let binary = crate::server::find_valkey_binary().ok();
    let mut rows = Vec::new();
    for (i, spec) in config.queues.iter().enumerate() {
        let row = queue_row(&config, &server, binary.as_deref(), spec, i, observer).await?;
        observer.row(&row);
        rows.push(row);
    }
    let pipe = match &config.pipe {
        Some(command) => {
            let spec = QueueSpec {
                name: "reference, through serve-adapter".into(),
                open: command.clone(),
            };
            let mut quick = config.clone();
            quick.instruction_jobs = 0;
            let row = queue_row(&quick, &server, None, &spec, rows.len(), observer).await?;
            observer.row(&row);
            let inproc = rows.iter().find(|r| r.open == "reference");
            Some(match inproc {
                Some(r) => pipe_of(command, r, row),
                None => {
                    let spec = QueueSpec {
                        name: "reference".into(),
                        open: "reference".into(),
                    };
                    let r =
                        queue_row(&quick, &server, None, &spec, rows.len() + 1, observer).await?;
                    observer.row(&r);
                    pipe_of(command, &r, row)
                }
            })
        }
        None => None,
    };
    let report = QueuesReport {
        server: server.describe(),
        machine: machine(),
        load: (load_before, load()),
        workers: config.workers,
        jobs: config.jobs,
        rounds: config.rounds,
        instruction_jobs: config.instruction_jobs,
        valid: rows.iter().all(|r| r.valid) && pipe.as_ref().is_none_or(|p| p.row.valid),
        queues: rows,
        pipe,
    };
    server.stop().await.map_err(BenchError::Stop)?;
    Ok(report)
}

/// Every `exec:` adapter answers its hello before anything is measured: one
/// not installed stops the run in seconds, not after the queues before it.
async fn hellos(
    config: &QueuesConfig,
    server: &Server,
    observer: &mut (dyn QueuesObserver + Send),
) -> Result<(), BenchError> {
    for (i, spec) in config.queues.iter().enumerate() {
        if spec.open.starts_with("exec:") {
            observer.progress(&format!("{}: hello", spec.name));
            let name = format!("bench-hello{i}");
            let timeout = super::scenarios::RESPONSE_TIMEOUT;
            let (_queue, adapter) =
                open(spec, &server.client(), &server.url(), &name, timeout).await?;
            drop(adapter);
        }
    }
    Ok(())
}

fn pipe_of(command: &str, inproc: &QueueRow, piped: QueueRow) -> Pipe {
    let per_job = |rate: f64| if rate > 0.0 { 1e6 / rate } else { 0.0 };
    Pipe {
        command: command.to_owned(),
        enqueue_us_per_job: per_job(piped.enqueue.median) - per_job(inproc.enqueue.median),
        drain_us_per_job: per_job(piped.drain.median) - per_job(inproc.drain.median),
        latency_p50_ms: piped.latency_p50_ms.median - inproc.latency_p50_ms.median,
        row: piped,
    }
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Unavailable(format!("{what}: {e}"))
}

/// Opens `spec` on `url` under the queue name `name`.
async fn open(
    spec: &QueueSpec,
    client: &redis::Client,
    url: &str,
    name: &str,
    timeout: Duration,
) -> Result<(Queue, Arc<dyn Adapter>), BenchError> {
    let queue = Queue::connect_with(client, name, super::queue_config())
        .await
        .map_err(|e| unavailable(&format!("--queue {}", spec.name), e))?;
    let options = ExecOptions {
        request_timeout: timeout,
        hello_timeout: timeout.max(Duration::from_secs(30)),
        ..ExecOptions::default()
    };
    let adapter = adapter::open_with(&spec.open, &queue, url, options)
        .await
        .map_err(|e| BenchError::Open {
            queue: spec.name.clone(),
            source: e,
        })?;
    Ok((queue, adapter))
}

/// One queue's row: its instruction count, then its rounds.
async fn queue_row(
    config: &QueuesConfig,
    server: &Server,
    binary: Option<&Path>,
    spec: &QueueSpec,
    index: usize,
    observer: &mut (dyn QueuesObserver + Send),
) -> Result<QueueRow, BenchError> {
    let mut problems = Vec::new();
    let instructions =
        row_instructions(config, binary, spec, index, observer, &mut problems).await?;
    let name = format!("bench-q{index}");
    let (_queue, adapter) = open(
        spec,
        &server.client(),
        &server.url(),
        &name,
        super::scenarios::RESPONSE_TIMEOUT,
    )
    .await?;
    let (mut enq, mut drain, mut p50, mut p99) = (vec![], vec![], vec![], vec![]);
    for round in 0..config.rounds {
        observer.progress(&format!(
            "{}: round {}/{}, {} jobs, {} workers",
            spec.name,
            round + 1,
            config.rounds,
            config.jobs,
            config.workers
        ));
        let r = one_round(&adapter, config.jobs, config.workers, round).await?;
        if r.problems.is_empty() {
            enq.push(r.enqueue_rate);
            drain.push(r.drain_rate);
            p50.push(r.p50_ms);
            p99.push(r.p99_ms);
        }
        problems.extend(
            r.problems
                .into_iter()
                .map(|p| format!("round {}: {p}", round + 1)),
        );
    }
    let _ = adapter.clear().await;
    let valid = problems.is_empty();
    let rounds_held = enq.len() as u64;
    Ok(QueueRow {
        queue: spec.name.clone(),
        open: spec.open.clone(),
        adapter: adapter.name().to_owned(),
        instructions,
        enqueue: Spread::of(enq),
        drain: Spread::of(drain),
        latency_p50_ms: Spread::of(p50),
        latency_p99_ms: Spread::of(p99),
        rounds_checked: config.rounds,
        rounds_held,
        valid,
        problems,
    })
}

/// A row's instruction count, when `binary` is there and
/// `--instruction-jobs` is not 0, its problems added to `problems`.
async fn row_instructions(
    config: &QueuesConfig,
    binary: Option<&Path>,
    spec: &QueueSpec,
    index: usize,
    observer: &mut (dyn QueuesObserver + Send),
    problems: &mut Vec<String>,
) -> Result<Option<Instructions>, BenchError> {
    Ok(match binary.filter(|_| config.instruction_jobs > 0) {
        Some(binary) => {
            observer.progress(&format!(
                "{}: server instructions, {} jobs under callgrind",
                spec.name, config.instruction_jobs
            ));
            let i = count(spec, binary, config.instruction_jobs, index).await?;
            problems.extend(i.problems.iter().map(|p| format!("instructions: {p}")));
            Some(i)
        }
        None => None,
    })
}

/// One round's figures and what its read-back found.
struct QueueRound {
    enqueue_rate: f64,
    drain_rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    problems: Vec<String>,
}

fn job_id(round: u64, i: u64) -> String {
    format!("JOB-r{round}-{i:08}")
}

/// What a drain's workers were answered.
#[derive(Default)]
struct Drained {
    /// Every lease's job, in order.
    leased: Vec<String>,
    /// Jobs whose complete answered settled.
    settled: Vec<String>,
    /// Completes answered otherwise.
    not_settled: Vec<String>,
    /// Lease answered → complete answered, µs.
    latencies_us: Vec<u64>,
}

/// Enqueues `jobs` jobs by `workers` tasks, then drains them by as many.
async fn phases(
    adapter: &Arc<dyn Adapter>,
    jobs: u64,
    workers: u64,
    round: u64,
) -> Result<(Duration, u64, Duration, Drained), BenchError> {
    let w = workers.max(1);
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for t in 0..w {
        let adapter = Arc::clone(adapter);
        let range = (jobs * t / w)..(jobs * (t + 1) / w);
        set.spawn(async move {
            let mut admitted = 0u64;
            for i in range {
                let id = job_id(round, i);
                if adapter.enqueue(&id, b"p", OPTS, None).await? == Enqueued::Enqueued {
                    admitted += 1;
                }
            }
            Ok::<u64, crate::queue::QueueError>(admitted)
        });
    }
    let mut admitted = 0;
    for r in set.join_all().await {
        admitted += r.map_err(|e| unavailable("enqueue", e))?;
    }
    let enqueue_elapsed = started.elapsed();

    let started = Instant::now();
    let drained = drain(adapter, w, admitted).await?;
    Ok((enqueue_elapsed, admitted, started.elapsed(), drained))
}

/// Drains the queue by `workers` tasks, until the `admitted` jobs are
/// settled or the queue has answered no lease for `STALL_MAX`.
async fn drain(
    adapter: &Arc<dyn Adapter>,
    workers: u64,
    admitted: u64,
) -> Result<Drained, BenchError> {
    let done = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    for t in 0..workers {
        let (adapter, done) = (Arc::clone(adapter), Arc::clone(&done));
        set.spawn(async move {
            let worker = format!("bench-w{t}");
            let mut out = Drained::default();
            let mut idle_since: Option<Instant> = None;
            loop {
                let Some(lease) = adapter.lease(&worker, LEASE_MS, None).await? else {
                    // Stop when every job is settled, or after a stall.
                    if done.load(Ordering::SeqCst) >= admitted {
                        return Ok::<Drained, crate::queue::QueueError>(out);
                    }
                    let since = *idle_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > STALL_MAX {
                        return Ok(out);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                };
                idle_since = None;
                let leased = Instant::now();
                out.leased.push(lease.id.clone());
                let settled = adapter.complete(&lease.id, lease.token).await?;
                out.latencies_us.push(leased.elapsed().as_micros() as u64);
                if settled == Settled::Settled {
                    done.fetch_add(1, Ordering::SeqCst);
                    out.settled.push(lease.id);
                } else {
                    out.not_settled.push(format!("{} ({settled:?})", lease.id));
                }
            }
        });
    }
    let mut drained = Drained::default();
    for r in set.join_all().await {
        let d = r.map_err(|e: crate::queue::QueueError| unavailable("drain", e))?;
        drained.leased.extend(d.leased);
        drained.settled.extend(d.settled);
        drained.not_settled.extend(d.not_settled);
        drained.latencies_us.extend(d.latencies_us);
    }
    Ok(drained)
}

/// The invariants of a round that enqueued `jobs` jobs of `round`,
/// `admitted` of them admitted, and drained them as `drained` says; `read`
/// is the queue read back after.
fn problems_of(
    jobs: u64,
    round: u64,
    admitted: u64,
    drained: &Drained,
    read: &adapter::Read,
) -> Vec<String> {
    let mut problems: Vec<String> = read.problems.iter().take(5).cloned().collect();
    if admitted != jobs {
        problems.push(format!("{admitted} of {jobs} enqueues admitted"));
    }
    let leased: BTreeSet<&String> = drained.leased.iter().collect();
    if leased.len() != drained.leased.len() {
        problems.push(format!(
            "{} leases of {} distinct jobs (a job delivered twice)",
            drained.leased.len(),
            leased.len()
        ));
    }
    let settled: BTreeSet<&String> = drained.settled.iter().collect();
    if settled.len() != drained.settled.len() || settled.len() as u64 != jobs {
        problems.push(format!(
            "{} settles of {} distinct jobs for {jobs} jobs",
            drained.settled.len(),
            settled.len()
        ));
    }
    if !drained.not_settled.is_empty() {
        problems.push(format!(
            "{} completes not accepted (first: {})",
            drained.not_settled.len(),
            drained.not_settled[0]
        ));
    }
    let mut by_state: BTreeMap<&str, u64> = BTreeMap::new();
    let mut missing = 0u64;
    for i in 0..jobs {
        match read.jobs.get(&job_id(round, i)) {
            Some(state) => *by_state.entry(state.as_str()).or_default() += 1,
            None => missing += 1,
        }
    }
    let not_done: u64 = by_state
        .iter()
        .filter(|(s, _)| **s != "done")
        .map(|(_, n)| n)
        .sum();
    if not_done > 0 || missing > 0 {
        problems.push(format!(
            "read back: {} of {jobs} jobs done, {missing} absent, others {:?}",
            by_state.get("done").copied().unwrap_or(0),
            by_state
                .iter()
                .filter(|(s, _)| **s != "done")
                .collect::<Vec<_>>()
        ));
    }
    let extra = (read.jobs.len() as u64).saturating_sub(jobs - missing);
    if extra > 0 {
        problems.push(format!("read back: {extra} jobs the round never enqueued"));
    }
    problems
}

/// One round: clear, enqueue, drain, read back.
async fn one_round(
    adapter: &Arc<dyn Adapter>,
    jobs: u64,
    workers: u64,
    round: u64,
) -> Result<QueueRound, BenchError> {
    adapter.clear().await.map_err(|e| unavailable("clear", e))?;
    let (enqueue_elapsed, admitted, drain_elapsed, mut drained) =
        phases(adapter, jobs, workers, round).await?;
    let read = adapter.read().await.map_err(|e| unavailable("read", e))?;
    let problems = problems_of(jobs, round, admitted, &drained, &read);
    adapter.clear().await.map_err(|e| unavailable("clear", e))?;
    drained.latencies_us.sort_unstable();
    let pct = |p: f64| {
        let l = &drained.latencies_us;
        if l.is_empty() {
            return 0.0;
        }
        let i = ((l.len() as f64 * p).ceil() as usize).clamp(1, l.len()) - 1;
        l[i] as f64 / 1000.0
    };
    let rate = |elapsed: Duration| jobs as f64 / elapsed.as_secs_f64().max(1e-9);
    Ok(QueueRound {
        enqueue_rate: rate(enqueue_elapsed),
        drain_rate: rate(drain_elapsed),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        problems,
    })
}

/// The instructions a server (`binary` under callgrind, a server of its
/// own) executes per job of `spec`: `jobs` enqueues one at a time, then
/// one worker's lease + complete of each, one call at a time; the round is
/// read back as every round is.
async fn count(
    spec: &QueueSpec,
    binary: &Path,
    jobs: u64,
    index: usize,
) -> Result<Instructions, BenchError> {
    let traced_error = |e: CallgrindError| BenchError::Unavailable(e.to_string());
    let mut server = Traced::start(binary).map_err(traced_error)?;
    // Answers once the server is up.
    let _ = server.connect().await.map_err(traced_error)?;
    let client =
        redis::Client::open(server.url()).map_err(|e| unavailable("the traced server", e))?;
    // A server under callgrind runs some 50 times slower.
    let (_queue, adapter) = open(
        spec,
        &client,
        &server.url(),
        &format!("bench-i{index}"),
        Duration::from_secs(600),
    )
    .await?;
    // One job through every call first: a library's scripts are loaded
    // (and its connections made) outside the counts.
    let warm = async {
        adapter.clear().await?;
        adapter.enqueue("JOB-warm-up", b"p", OPTS, None).await?;
        if let Some(l) = adapter.lease("bench-w0", LEASE_MS, None).await? {
            adapter.complete(&l.id, l.token).await?;
        }
        adapter.read().await?;
        adapter.clear().await
    };
    warm.await.map_err(|e| unavailable("warm-up", e))?;
    let idle = server
        .idle_per_second(Duration::from_secs(1))
        .await
        .map_err(traced_error)?;
    let mut admitted = 0u64;
    let mut failure: Option<String> = None;
    let (enqueue, enqueue_s) = server
        .count_timed(async {
            for i in 0..jobs {
                match adapter.enqueue(&job_id(0, i), b"p", OPTS, None).await {
                    Ok(Enqueued::Enqueued) => admitted += 1,
                    Ok(_) => {}
                    Err(e) => {
                        failure = Some(format!("enqueue: {e}"));
                        return;
                    }
                }
            }
        })
        .await
        .map_err(traced_error)?;
    let mut drained = Drained::default();
    let (lease_complete, lease_complete_s) = server
        .count_timed(async {
            let mut empty = 0;
            while (drained.settled.len() as u64) < admitted && failure.is_none() {
                match adapter.lease("bench-w0", LEASE_MS, None).await {
                    Ok(Some(l)) => {
                        drained.leased.push(l.id.clone());
                        match adapter.complete(&l.id, l.token).await {
                            Ok(Settled::Settled) => drained.settled.push(l.id),
                            Ok(other) => drained.not_settled.push(format!("{} ({other:?})", l.id)),
                            Err(e) => failure = Some(format!("complete: {e}")),
                        }
                    }
                    Ok(None) => {
                        empty += 1;
                        if empty > 1_000 {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => failure = Some(format!("lease: {e}")),
                }
            }
        })
        .await
        .map_err(traced_error)?;
    let read = adapter.read().await.map_err(|e| unavailable("read", e))?;
    let mut problems = problems_of(jobs, 0, admitted, &drained, &read);
    problems.extend(failure);
    let _ = adapter.clear().await;
    drop(adapter);
    let per_job = |n: f64| n / jobs.max(1) as f64;
    Ok(Instructions {
        jobs,
        enqueue: per_job(enqueue as f64),
        lease_complete: per_job(lease_complete as f64),
        idle_per_second: idle,
        timers_per_job: per_job(idle * (enqueue_s + lease_complete_s).as_secs_f64()),
        enqueue_s: enqueue_s.as_secs_f64(),
        lease_complete_s: lease_complete_s.as_secs_f64(),
        valid: problems.is_empty(),
        problems,
    })
}
