//! ackgap in a user's own test suite: check *your* consumer, and optionally
//! *your* queue, from `cargo test`.
//!
//! A [`Campaign`] starts an embedded Valkey (or uses `$ACKGAP_SERVER`), runs
//! a bounded number of seeded random walks of the model checker (the same
//! explorer as `ackgap explore`: leases, crashes in the ack gap, lost
//! replies, stale acks, the reaper, time) with your consumer applying every
//! delivery's effect, and judges each walk with the same checkers and
//! verdicts as the command line. The first failing seed is shrunk to a
//! minimal counterexample; [`assert_holds`] (or [`Campaign::check`]) fails
//! the test with it and with the one command that replays it.
//!
//! ```no_run
//! use ackgap::queue::QueueError;
//! use ackgap::testing::{Campaign, Handler, Job, MemoryStore};
//!
//! # async fn demo() {
//! // Your store: one row per credit, keyed by job id. `add_once` is the
//! // marker (a unique key on the job id), checked and written atomically
//! // with the credit.
//! let ledger = MemoryStore::new();
//! let credit = Handler::new("credit", ledger.clone(), move |_conn, job: Job| {
//!     let ledger = ledger.clone();
//!     async move {
//!         ledger.add_once(&job.id);
//!         Ok::<(), QueueError>(())
//!     }
//! });
//! Campaign::new(credit).check().await;
//! # }
//! ```
//!
//! ## Effects outside Valkey
//!
//! ackgap counts a consumer's effects per job at the end of each walk by
//! asking [`Consumer::effects`]. The shipped consumers keep their effects in
//! Valkey; a [`Handler`] asks an [`EffectStore`] instead — your own rows,
//! counted per job id. [`MemoryStore`] is an in-memory one for examples and
//! tests. Every walk starts from an empty queue, so a campaign empties the
//! store before each walk too ([`EffectStore::clear`]).
//!
//! ## Environment
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `ACKGAP_SEEDS` | [`Campaign::seeds`] (16) | walks to run: set it higher in a nightly job, like `PROPTEST_CASES` |
//! | `ACKGAP_STEPS` | [`Campaign::steps`] (40) | random steps per walk, before healing |
//! | `ACKGAP_SEED` | 0 | the first seed (walks use `SEED, SEED+1, ...`) |
//! | `ACKGAP_JOBS` | [`Campaign::jobs`] (the number of cores) | walks in flight at once, each on a queue of its own; 1 with an effect store |
//! | `ACKGAP_REPLAY` | — | a replay line from a failure message: run exactly that schedule instead of seeds |
//! | `ACKGAP_SERVER` | `process` | `process`, `container` or `redis://host:port` |
//! | `ACKGAP_VALKEY_SERVER` | `PATH` | the `valkey-server` binary of the `process` backend |
//!
//! The environment wins over the builder for the seed and step counts, so
//! a CI job can run longer without editing the tests.
//!
//! ## Replaying a failure
//!
//! The failure message ends with a command such as
//!
//! ```text
//! ACKGAP_REPLAY='reference/credit/j1w1l250m3r4/e2.l0.a0' cargo test --test user -- --exact credit_is_applied_once
//! ```
//!
//! which runs the minimal schedule again, alone, against your consumer.
//! The line names the queue and the consumer by name; when both are
//! shipped ones, `ackgap replay LINE` runs it from the command line as well.
//! The counterexample is also written under `target/ackgap/failures/`.
//!
//! ## Limits
//!
//! A campaign runs the explorers, not the chaos runner: faults are the
//! explorer's (crashes before, between and after effect parts, lost ack
//! replies, stale leases), on logical time. Only the reference queue is
//! compared with the model after every step (refinement); your own queue is
//! judged by the history checkers alone. Walks run [`Campaign::jobs`] at a
//! time, each job on a queue of its own (tests that share `$ACKGAP_SERVER`
//! each get queues of their own too), and are judged in seed order, so the
//! report is the same for any number of jobs. A campaign with an
//! [`EffectStore`] walks one seed at a time: the store is one, shared by
//! every walk, and counts effects by job id, which every walk reuses.
//!
//! ## Design notes
//!
//! A `Campaign` runs its walks through `explore_on`, each on a queue of its
//! own, sums the per-invariant counts over the walks, and names the test in
//! its replay command. A `Handler`'s `Consumer::effects` asks its
//! `EffectStore`. The campaign wraps the queue under test in a `Wrapper`
//! that overrides only `clear`, so that clearing the queue before every walk
//! and every shrinker replay empties the stores too. `examples/` and
//! `ci/examples` use this module.

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use redis::aio::ConnectionManager;

use crate::adapter::{Adapter, Reference, Wrapper};
use crate::chaos::fault::Shape;
use crate::chaos::runner::{
    run_with, ChaosConfig, ChaosError, ChaosReport, ChaosSubject, Interrupt, OpenAdapter,
};
use crate::chaos::schedule::FaultSet;
use crate::check::{self, Report, Verdict};
use crate::consumer::{BoxFuture, Consumer, Delivery};
use crate::explore::shrink::{failures_dir, write_failure};
use crate::explore::{
    run_schedule, shrink, walk_seeds, ExploreError, Line, PrintFailures, Seeds, Subject,
    SwarmConfig, WalkObserver, WalkReport,
};
use crate::queue::{Keys, Queue, QueueError};
use crate::server::{Persistence, Server, ServerError, ServerSpec};

/// A store that counts a consumer's effects per job id: rows in your own
/// database, calls to a fake mail server, lines in a file.
pub trait EffectStore: Send + Sync {
    /// How many times the effect of job `id` has landed.
    fn count<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<u64, QueueError>>;

    /// Forgets every effect: a campaign calls it before each walk, when the
    /// queue is cleared.
    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>>;
}

/// An in-memory [`EffectStore`]: a count of rows per job id, shared by its
/// clones.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    rows: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        // A panic elsewhere while holding the lock leaves the map whole:
        // every update is one insert.
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a row for job `id`, and returns how many it has now.
    pub fn add(&self, id: &str) -> u64 {
        let mut rows = self.rows();
        let n = rows.entry(id.to_owned()).or_default();
        *n += 1;
        *n
    }

    /// Appends a row for job `id` unless it has one already (a unique key
    /// on the job id: the idempotency marker and the effect in one atomic
    /// step). True if this call added it.
    pub fn add_once(&self, id: &str) -> bool {
        let mut rows = self.rows();
        let n = rows.entry(id.to_owned()).or_default();
        if *n > 0 {
            return false;
        }
        *n = 1;
        true
    }

    /// How many rows job `id` has.
    pub fn get(&self, id: &str) -> u64 {
        self.rows().get(id).copied().unwrap_or(0)
    }

    /// Every job id with its number of rows.
    pub fn rows_by_id(&self) -> BTreeMap<String, u64> {
        self.rows().clone()
    }
}

impl EffectStore for MemoryStore {
    fn count<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<u64, QueueError>> {
        let n = self.get(id);
        Box::pin(async move { Ok(n) })
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        self.rows().clear();
        Box::pin(async { Ok(()) })
    }
}

/// One delivery as a [`Handler`]'s function receives it: owned, so the
/// function's future may outlive the call.
#[derive(Clone, Debug)]
pub struct Job {
    /// The job id (use it as the idempotency key).
    pub id: String,
    /// The fencing token of this delivery's lease.
    pub token: u64,
    /// The job's payload.
    pub payload: Vec<u8>,
    /// The queue's keys: keep any Valkey state of the effect under
    /// `keys.effect_prefix`, so that clearing the queue clears it.
    pub keys: Keys,
}

type HandlerFn =
    dyn Fn(ConnectionManager, Job) -> BoxFuture<'static, Result<(), QueueError>> + Send + Sync;

/// A [`Consumer`] made of an async function and the [`EffectStore`] it
/// writes its effects to: the usual way to put your own job handler under
/// ackgap. The function receives a connection to the queue's Valkey and
/// the job; its effect counts as applied once the function returns `Ok`.
pub struct Handler {
    name: String,
    store: Arc<dyn EffectStore>,
    apply: Arc<HandlerFn>,
    effect_once: bool,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("name", &self.name)
            .field("effect_once", &self.effect_once)
            .finish()
    }
}

impl Handler {
    /// The consumer `name` (it appears in reports and replay lines: use
    /// letters, digits and `-`), applying `apply` to each delivery and
    /// counting its effects in `store`. It promises effect-once: the
    /// effect-once invariant judges it.
    pub fn new<F, Fut>(name: &str, store: impl EffectStore + 'static, apply: F) -> Handler
    where
        F: Fn(ConnectionManager, Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), QueueError>> + Send + 'static,
    {
        Handler {
            name: name.to_owned(),
            store: Arc::new(store),
            apply: Arc::new(move |conn, job| Box::pin(apply(conn, job))),
            effect_once: true,
        }
    }

    /// Makes no effect-once promise: duplicated or lost effects are
    /// counted and reported, not judged (like the shipped `naive`).
    pub fn without_effect_once(mut self) -> Handler {
        self.effect_once = false;
        self
    }

    /// The store the effects are counted in.
    pub fn store(&self) -> Arc<dyn EffectStore> {
        self.store.clone()
    }
}

impl Consumer for Handler {
    fn name(&self) -> &str {
        &self.name
    }

    fn apply<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        keys: &'a Keys,
        delivery: Delivery<'a>,
        _part: usize,
    ) -> BoxFuture<'a, Result<(), QueueError>> {
        let job = Job {
            id: delivery.id.to_owned(),
            token: delivery.token,
            payload: delivery.payload.to_vec(),
            keys: keys.clone(),
        };
        (self.apply)(conn.clone(), job)
    }

    fn effects<'a>(
        &'a self,
        _conn: &'a mut ConnectionManager,
        _keys: &'a Keys,
        id: &'a str,
    ) -> BoxFuture<'a, Result<u64, QueueError>> {
        self.store.count(id)
    }

    fn promises_effect_once(&self) -> bool {
        self.effect_once
    }
}

/// Builds the queue under test on the campaign's [`Queue`] (its server
/// connection and hash tag).
type AdapterFactory = Arc<dyn Fn(&Queue) -> Arc<dyn Adapter> + Send + Sync>;

/// A bounded campaign of seeded random walks against a user's consumer,
/// and optionally a user's queue. See the [module docs](self).
pub struct Campaign {
    consumer: Arc<dyn Consumer>,
    stores: Vec<Arc<dyn EffectStore>>,
    adapter: Option<AdapterFactory>,
    seeds: u64,
    steps: usize,
    shrink_runs_max: usize,
    server: Option<ServerSpec>,
    replay: Option<String>,
    test_name: Option<String>,
    chaos: Option<std::time::Duration>,
    jobs: Option<u64>,
}

impl std::fmt::Debug for Campaign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Campaign")
            .field("consumer", &self.consumer.name())
            .field("seeds", &self.seeds)
            .field("steps", &self.steps)
            .finish()
    }
}

impl Campaign {
    /// A campaign for `consumer` on the reference queue: 16 walks of 40
    /// steps by default. A [`Handler`]'s store is emptied before every walk;
    /// a consumer of your own that counts effects outside Valkey registers
    /// its store with [`Campaign::store`].
    pub fn new(consumer: impl Consumer + 'static) -> Campaign {
        let stores = match (&consumer as &dyn Any).downcast_ref::<Handler>() {
            Some(h) => vec![h.store()],
            None => Vec::new(),
        };
        Campaign {
            consumer: Arc::new(consumer),
            stores,
            adapter: None,
            seeds: 16,
            steps: 40,
            shrink_runs_max: 1000,
            server: None,
            replay: None,
            // libtest names each test's thread after the test: the replay
            // command runs that one test.
            test_name: std::thread::current()
                .name()
                .filter(|n| *n != "main")
                .map(str::to_owned),
            chaos: None,
            jobs: None,
        }
    }

    /// Walks in flight at once, each on a queue of its own
    /// (`$ACKGAP_JOBS` wins when set; default: the number of cores). A
    /// campaign with an effect store walks one seed at a time whatever
    /// this says (see the [module docs](self)).
    pub fn jobs(mut self, n: u64) -> Campaign {
        self.jobs = Some(n);
        self
    }

    /// Checks `adapter(queue)` instead of the reference queue: your own
    /// queue behind the [`Adapter`] trait, built on the campaign's queue
    /// (its connection and hash tag; every key it uses should carry the
    /// hash tag so that [`Adapter::clear`] can find it). A queue that is a
    /// shipped one with a difference implements [`Wrapper`] instead and
    /// writes only the difference (`examples/own_queue.rs`).
    pub fn queue(
        mut self,
        adapter: impl Fn(&Queue) -> Arc<dyn Adapter> + Send + Sync + 'static,
    ) -> Campaign {
        self.adapter = Some(Arc::new(adapter));
        self
    }

    /// After the walks (when they held), runs a chaos phase of `duration`
    /// on the wall clock with the same queue and consumer: concurrent
    /// workers, every fault but a kill of the server (the campaign's server
    /// keeps nothing on disk; against a URL the server's pause is left out
    /// too), judged by the same checkers. It sees what
    /// the walks' logical time cannot: anything that expires on the
    /// server's own clock. Its report is [`CampaignReport::chaos`]; the
    /// seed is the campaign's first, and the campaign's verdict is the worse
    /// of the two.
    pub fn chaos(mut self, duration: std::time::Duration) -> Campaign {
        self.chaos = Some(duration);
        self
    }

    /// Empties `store` before every walk, as the queue is cleared.
    pub fn store(mut self, store: impl EffectStore + 'static) -> Campaign {
        self.stores.push(Arc::new(store));
        self
    }

    /// How many seeds to walk (`$ACKGAP_SEEDS` wins when set).
    pub fn seeds(mut self, n: u64) -> Campaign {
        self.seeds = n;
        self
    }

    /// Random steps per walk, before healing (`$ACKGAP_STEPS` wins when
    /// set).
    pub fn steps(mut self, n: usize) -> Campaign {
        self.steps = n;
        self
    }

    /// The most replays the shrinker runs on a failure (1000).
    pub fn shrink_runs_max(mut self, n: usize) -> Campaign {
        self.shrink_runs_max = n;
        self
    }

    /// Runs the schedule of replay `line` (from a failure message) instead
    /// of seeds; `$ACKGAP_REPLAY` wins when set.
    pub fn replay(mut self, line: &str) -> Campaign {
        self.replay = Some(line.to_owned());
        self
    }

    /// The server to run against (`$ACKGAP_SERVER`, else `process`).
    pub fn server(mut self, spec: ServerSpec) -> Campaign {
        self.server = Some(spec);
        self
    }

    /// Runs the campaign and fails (panics) unless every invariant held:
    /// the message carries the minimal counterexample and the replay
    /// command. The one call a test needs.
    pub async fn check(self) -> CampaignReport {
        match self.run().await {
            Ok(report) => {
                assert_holds(&report);
                report
            }
            Err(e) => panic!("ackgap: the campaign could not run: {e}"),
        }
    }

    /// Runs the campaign: walks seeds until one finds something, shrinks
    /// that one, and reports. `Err` only when the campaign could not be
    /// judged (no server, a queue that errors, a bad setting).
    pub async fn run(self) -> Result<CampaignReport, CampaignError> {
        let seeds = env_number("ACKGAP_SEEDS")?.unwrap_or(self.seeds);
        let steps = self.steps_setting()?;
        let first_seed = env_number("ACKGAP_SEED")?.unwrap_or(0);
        let replay_line = self.replay_setting()?;
        let spec = self.server_spec()?;
        let mut server = Server::start(&spec, Persistence::None).await?;
        let jobs = match replay_line {
            Some(_) => 1,
            None => self.jobs_setting()?.min(seeds).max(1),
        };
        let mut subjects = Vec::new();
        for _ in 0..jobs {
            subjects.push(Arc::new(self.subject(&server).await?));
        }
        let subject = subjects[0].clone();
        let mut totals = Totals::default();
        let replayed = replay_line.as_ref().map(|l| l.to_string());
        let failure = if let Some(line) = replay_line {
            self.replay_one(&subject, line, &mut totals).await?
        } else {
            self.walk_seeds(&subjects, first_seed, seeds, steps, &mut totals)
                .await?
        };
        // Leave nothing behind on a shared server.
        for subject in &subjects {
            let _ = subject.adapter.clear().await;
        }
        let chaos = match self.chaos {
            Some(duration) if failure.is_none() && replayed.is_none() => {
                Some(self.chaos_phase(&mut server, duration, first_seed).await?)
            }
            _ => None,
        };
        let (invariants, mut verdict) = totals.reports();
        if let Some(chaos) = &chaos {
            verdict = verdict.max(chaos.verdict);
        }
        Ok(CampaignReport {
            queue: subject.adapter.name().to_owned(),
            consumer: subject.consumer.name().to_owned(),
            server: spec.to_string(),
            first_seed,
            replayed,
            walks: totals.walks,
            steps_max: steps,
            steps: totals.steps,
            invariants,
            verdict,
            failure,
            chaos,
        })
    }

    /// The chaos phase: [`ChaosConfig::new`]'s settings for `seed` but
    /// `duration` (and jobs in proportion, 20 a second, at least 20), on a
    /// queue name of its own, through [`run_with`] with this campaign's
    /// queue and consumer (its stores emptied as the queue is cleared).
    async fn chaos_phase(
        &self,
        server: &mut Server,
        duration: std::time::Duration,
        seed: u64,
    ) -> Result<ChaosReport, CampaignError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "ackgap-chaos-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        // The campaign's server keeps nothing on disk: a kill would lose
        // every job whatever the consumer does (that is the durability
        // matrix's question, `ackgap chaos --persistence-matrix`), so it is left out;
        // so is what the server does not run (a URL's pause: the tool does
        // not own the server).
        let faults = "all,-server-kill"
            .parse::<FaultSet>()
            .map_err(|e| CampaignError::Chaos(ChaosError::Usage(e.to_string())))?
            .on(&Shape::of(server));
        let make = self.adapter.clone();
        let stores = self.stores.clone();
        let queue_name = name.clone();
        let open: OpenAdapter = Arc::new(move |url: String| {
            let (make, stores, name) = (make.clone(), stores.clone(), queue_name.clone());
            Box::pin(async move {
                let client = redis::Client::open(url).map_err(|e| e.to_string())?;
                let queue = Queue::connect(&client, &name)
                    .await
                    .map_err(|e| e.to_string())?;
                let inner = match &make {
                    Some(make) => make(&queue),
                    None => Arc::new(Reference::new(queue.on_server_clock())),
                };
                Ok(Arc::new(Clearing { inner, stores }) as Arc<dyn Adapter>)
            })
        });
        let cfg = ChaosConfig {
            duration_ms,
            jobs: usize::try_from((duration_ms / 50).max(20)).unwrap_or(20),
            faults,
            queue: "campaign".into(),
            queue_name: name,
            ..ChaosConfig::new(seed)
        };
        let subject = ChaosSubject {
            open,
            consumer: self.consumer.clone(),
        };
        Ok(run_with(server, cfg, Some(subject), None, None, Interrupt::new()).await?)
    }

    /// Random steps per walk: `$ACKGAP_STEPS`, else the builder's.
    fn steps_setting(&self) -> Result<usize, CampaignError> {
        Ok(match env_number("ACKGAP_STEPS")? {
            Some(n) => usize::try_from(n).map_err(|_| CampaignError::Setting {
                name: "ACKGAP_STEPS",
                value: n.to_string(),
                expected: "a step count that fits in usize",
            })?,
            None => self.steps,
        })
    }

    /// The line to replay instead of seeds: `$ACKGAP_REPLAY`, else the
    /// builder's; none when blank.
    fn replay_setting(&self) -> Result<Option<Line>, CampaignError> {
        Ok(
            match std::env::var("ACKGAP_REPLAY").ok().or(self.replay.clone()) {
                Some(s) if !s.trim().is_empty() => Some(s.trim().parse::<Line>().map_err(
                    |why| CampaignError::Setting {
                        name: "ACKGAP_REPLAY",
                        value: why,
                        expected: "a replay line QUEUE/CONSUMER/CONFIG/STEPS",
                    },
                )?),
                _ => None,
            },
        )
    }

    /// The server to run against: the builder's, else `$ACKGAP_SERVER`,
    /// else the default.
    fn server_spec(&self) -> Result<ServerSpec, CampaignError> {
        Ok(match &self.server {
            Some(spec) => spec.clone(),
            None => match std::env::var("ACKGAP_SERVER") {
                Ok(s) if !s.is_empty() => s.parse()?,
                _ => ServerSpec::default(),
            },
        })
    }

    /// What the walks run: the campaign's queue (else the reference one) on
    /// a queue name of its own on `server`, wrapped so that clearing it
    /// empties the stores too, with the consumer.
    async fn subject(&self, server: &Server) -> Result<Subject, CampaignError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "ackgap-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let queue = Queue::connect(&server.client(), &name)
            .await
            .map_err(|source| CampaignError::Queue {
                during: "connecting",
                source,
            })?;
        let inner = match &self.adapter {
            Some(make) => make(&queue),
            None => Arc::new(Reference::new(queue.on_server_clock())),
        };
        let adapter: Arc<dyn Adapter> = Arc::new(Clearing {
            inner,
            stores: self.stores.clone(),
        });
        Ok(Subject::new(adapter, self.consumer.clone()))
    }

    /// Runs the schedule of replay `line` once: its failure, if it finds
    /// one (not shrunk: the line is already the one to look at).
    async fn replay_one(
        &self,
        subject: &Subject,
        line: Line,
        totals: &mut Totals,
    ) -> Result<Option<Failure>, CampaignError> {
        let mut failure = None;
        let (queue_name, consumer_name) = (subject.adapter.name(), subject.consumer.name());
        if line.queue != queue_name || line.consumer != consumer_name {
            return Err(CampaignError::Setting {
                name: "ACKGAP_REPLAY",
                value: line.to_string(),
                expected: "a line of this campaign's queue and consumer",
            });
        }
        let config = SwarmConfig::from_line(&line.config);
        let report = run_schedule(subject, &config, &line.schedule).await?;
        totals.add(&report);
        if let Some((invariant, _)) = report.findings().into_iter().next() {
            failure = Some(Failure {
                seed: None,
                invariant,
                counterexample: cli_free(subject, report.counterexample_text()),
                line: report.line.clone(),
                replay: self.replay_command(&report.line),
                file: None,
            });
        }
        Ok(failure)
    }

    /// Walks `seeds` seeds from `first_seed`, `subjects.len()` at a time,
    /// until one finds something (in seed order): that one's failure,
    /// shrunk.
    async fn walk_seeds(
        &self,
        subjects: &[Arc<Subject>],
        first_seed: u64,
        seeds: u64,
        steps: usize,
        totals: &mut Totals,
    ) -> Result<Option<Failure>, CampaignError> {
        let seeds = Seeds::range(first_seed, seeds).ok_or(CampaignError::Setting {
            name: "ACKGAP_SEEDS",
            value: format!("{seeds} from seed {first_seed}"),
            expected: "seeds that do not run past u64::MAX",
        })?;
        let mut observer = UntilFound(totals);
        let reports = walk_seeds(subjects.to_vec(), seeds, steps, &mut observer)
            .await
            .map_err(|e| e.source)?;
        match reports.last() {
            Some(report) if !report.findings().is_empty() => Ok(Some(
                self.shrunk_failure(&subjects[0], report.seed, report)
                    .await?,
            )),
            _ => Ok(None),
        }
    }

    /// Walks at once: `$ACKGAP_JOBS`, else the builder's, else the number
    /// of cores; 1 with an effect store.
    fn jobs_setting(&self) -> Result<u64, CampaignError> {
        if !self.stores.is_empty() {
            return Ok(1);
        }
        let jobs = match env_number("ACKGAP_JOBS")? {
            Some(n) => n,
            None => self.jobs.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
            }),
        };
        if jobs == 0 {
            return Err(CampaignError::Setting {
                name: "ACKGAP_JOBS",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        Ok(jobs)
    }

    /// The failure of walk `report` (of `seed`), shrunk to a minimal
    /// schedule and written to a file, or whole when shrinking loses it.
    async fn shrunk_failure(
        &self,
        subject: &Subject,
        seed: u64,
        report: &WalkReport,
    ) -> Result<Failure, CampaignError> {
        let line: Line = report.line.parse().map_err(|why| CampaignError::Setting {
            name: "replay line",
            value: why,
            expected: "the walk's own replay line",
        })?;
        let config = SwarmConfig::from_seed(seed);
        let shrunk = shrink(subject, &config, &line.schedule, self.shrink_runs_max).await?;
        Ok(match shrunk {
            Some(shrunk) => {
                let counterexample = cli_free(subject, shrunk.text());
                let replay = self.replay_command(&shrunk.report.line);
                // The file says what the message says: the replay
                // command that runs a user's consumer too.
                let file = write_failure(&failures_dir(), &shrunk)
                    .and_then(|path| {
                        std::fs::write(&path, format!("{counterexample}replay: {replay}\n"))?;
                        Ok(path)
                    })
                    .ok();
                Failure {
                    seed: Some(seed),
                    invariant: shrunk.invariant,
                    counterexample,
                    line: shrunk.report.line.clone(),
                    replay,
                    file,
                }
            }
            // The walk failed but its schedule alone does not: a
            // finding only the drawn configuration shows. Report
            // the walk whole.
            None => Failure {
                seed: Some(seed),
                invariant: report.findings()[0].0,
                counterexample: cli_free(subject, report.counterexample_text()),
                line: report.line.clone(),
                replay: self.replay_command(&report.line),
                file: None,
            },
        })
    }

    /// The command that replays `line` alone, under the test (or example)
    /// this campaign runs in.
    fn replay_command(&self, line: &str) -> String {
        let env = format!("ACKGAP_REPLAY='{line}'");
        let exe = std::env::current_exe().ok();
        let stem = exe
            .as_ref()
            .and_then(|p| p.file_stem())
            .and_then(|s| s.to_str())
            .map(|s| match s.rsplit_once('-') {
                // Cargo names test binaries NAME-HASH.
                Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name,
                _ => s,
            })
            .map(str::to_owned);
        let dir = exe
            .as_ref()
            .and_then(|p| p.parent())
            .and_then(|d| d.file_name())
            .and_then(|d| d.to_str())
            .map(str::to_owned);
        match (dir.as_deref(), stem, &self.test_name) {
            (Some("examples"), Some(stem), _) => format!("{env} cargo run --example {stem}"),
            (_, Some(stem), Some(test)) => {
                let package = std::env::var("CARGO_PKG_NAME")
                    .unwrap_or_default()
                    .replace('-', "_");
                let target = if stem == package {
                    "--lib".to_owned()
                } else {
                    format!("--test {stem}")
                };
                format!("{env} cargo test {target} -- --exact {test}")
            }
            _ => format!("{env} cargo test"),
        }
    }
}

/// `text` without its `ackgap replay LINE` line when the command line
/// cannot run it: it knows only the shipped queues and consumers.
fn cli_free(subject: &Subject, text: String) -> String {
    let shipped = crate::adapter::NAMES.contains(&subject.adapter.name())
        && subject
            .consumer
            .name()
            .parse::<crate::consumer::Kind>()
            .is_ok();
    if shipped {
        return text;
    }
    text.lines()
        .filter(|l| !l.trim_start().starts_with("replay: ackgap replay"))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn env_number(name: &'static str) -> Result<Option<u64>, CampaignError> {
    match std::env::var(name) {
        Ok(s) if !s.trim().is_empty() => {
            s.trim()
                .parse()
                .map(Some)
                .map_err(|_| CampaignError::Setting {
                    name,
                    value: s,
                    expected: "a whole number",
                })
        }
        _ => Ok(None),
    }
}

/// Why a campaign could not be judged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CampaignError {
    /// No server could be started or reached.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// The queue could not be set up.
    #[error("{during} the queue: {source}")]
    Queue {
        /// What the campaign was doing.
        during: &'static str,
        /// The queue's error.
        source: QueueError,
    },
    /// A walk could not be judged (the queue under test or the consumer
    /// returned an error the explorer does not record).
    #[error(transparent)]
    Explore(#[from] ExploreError),
    /// The chaos phase could not run ([`Campaign::chaos`]).
    #[error("the chaos phase: {0}")]
    Chaos(#[from] ChaosError),
    /// An environment variable or setting had a value it cannot take.
    #[error("{name}={value:?}: expected {expected}")]
    Setting {
        /// The variable.
        name: &'static str,
        /// The value given (or why it did not parse).
        value: String,
        /// What it takes.
        expected: &'static str,
    },
}

/// The shrunk failure of a campaign.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The seed whose walk failed (`None` for a replayed line).
    pub seed: Option<u64>,
    /// The invariant broken (the first finding's).
    pub invariant: &'static str,
    /// The minimal counterexample: numbered steps, what broke, the line.
    pub counterexample: String,
    /// The replay line of the minimal schedule.
    pub line: String,
    /// The command that runs the minimal schedule again, alone.
    pub replay: String,
    /// Where the counterexample was written, if it was.
    pub file: Option<PathBuf>,
}

/// What a campaign found: the same per-invariant reports as the command
/// line, summed over its walks.
#[derive(Clone, Debug)]
pub struct CampaignReport {
    /// The queue under test's name.
    pub queue: String,
    /// The consumer's name.
    pub consumer: String,
    /// The server spec (`process`, ...).
    pub server: String,
    /// The first seed walked.
    pub first_seed: u64,
    /// The replay line run instead of seeds, if one was given.
    pub replayed: Option<String>,
    /// Walks run (a failing campaign stops at the first failing seed; the
    /// shrinker's replays are not counted).
    pub walks: u64,
    /// Random steps per walk.
    pub steps_max: usize,
    /// Steps run over every walk, healing included.
    pub steps: usize,
    /// One report per invariant: counts summed over the walks, the worst
    /// verdict, the violations of the failing walk.
    pub invariants: Vec<Report>,
    /// The worst verdict.
    pub verdict: Verdict,
    /// The minimal counterexample, when an invariant broke (or a consumer
    /// without an effect-once promise duplicated or lost an effect).
    pub failure: Option<Failure>,
    /// The chaos phase's report, when [`Campaign::chaos`] asked for one
    /// and the walks held.
    pub chaos: Option<ChaosReport>,
}

impl CampaignReport {
    /// True when every walk was valid and nothing was reported.
    pub fn holds(&self) -> bool {
        self.verdict == Verdict::Valid && self.failure.is_none()
    }
}

impl std::fmt::Display for CampaignReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.replayed {
            Some(line) => format!("replayed {line}, {} steps run", self.steps),
            None => format!(
                "{} walks from seed {}, {} steps each, {} steps run",
                self.walks, self.first_seed, self.steps_max, self.steps
            ),
        };
        writeln!(
            f,
            "ackgap: {} with the {} consumer on {}: {} ({what})",
            self.queue, self.consumer, self.server, self.verdict
        )?;
        for r in &self.invariants {
            let counts: Vec<String> = r.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
            writeln!(
                f,
                "  {:<18} {:<8} {}",
                r.invariant,
                r.verdict.to_string(),
                counts.join(" ")
            )?;
        }
        if self.failure.is_none() {
            // Unknown verdicts (or invalid ones without a shrunk failure):
            // say why, briefly.
            for r in self
                .invariants
                .iter()
                .filter(|r| r.verdict != Verdict::Valid)
            {
                for v in r.violations.iter().take(5) {
                    writeln!(f, "  {}: {v}", r.invariant)?;
                }
            }
        }
        if let Some(failure) = &self.failure {
            if let Some(seed) = failure.seed {
                writeln!(f, "seed {seed} broke {}; shrunk:", failure.invariant)?;
            } else {
                writeln!(f, "the replayed line broke {}:", failure.invariant)?;
            }
            f.write_str(&failure.counterexample)?;
            if let Some(file) = &failure.file {
                writeln!(f, "written to {}", file.display())?;
            }
            writeln!(f, "replay: {}", failure.replay)?;
        }
        if let Some(chaos) = &self.chaos {
            writeln!(
                f,
                "chaos phase (seed {}, {} ms on the wall clock, {} ops): {}",
                chaos.config.seed, chaos.config.duration_ms, chaos.ops, chaos.verdict
            )?;
            for r in &chaos.invariants {
                writeln!(f, "  {:<18} {}", r.invariant, r.verdict)?;
                for v in r.violations.iter().take(3) {
                    writeln!(f, "    {v}")?;
                }
            }
            if chaos.verdict != Verdict::Valid {
                writeln!(
                    f,
                    "  again: ACKGAP_SEED={} with the same test (the seed draws the \
                     fault schedule; the wall clock's interleaving is not replayed)",
                    chaos.config.seed
                )?;
            }
        }
        Ok(())
    }
}

/// Panics, with the report (the minimal counterexample and the replay
/// command included), unless the campaign held.
#[track_caller]
pub fn assert_holds(report: &CampaignReport) {
    if !report.holds() {
        panic!("{report}");
    }
}

/// Sums the walks' reports per invariant.
#[derive(Default)]
struct Totals {
    walks: u64,
    steps: usize,
    by_invariant: Vec<Report>,
}

impl Totals {
    fn add(&mut self, walk: &WalkReport) {
        self.walks += 1;
        self.steps += walk.steps;
        for r in &walk.invariants {
            match self
                .by_invariant
                .iter_mut()
                .find(|t| t.invariant == r.invariant)
            {
                Some(t) => {
                    // A walk that did not exercise it leaves the
                    // verdict of those that did.
                    if !r.not_exercised() {
                        t.verdict = if t.not_exercised() {
                            r.verdict
                        } else {
                            t.verdict.max(r.verdict)
                        };
                    }
                    for (k, v) in &r.counts {
                        *t.counts.entry(k).or_default() += v;
                    }
                    t.violations.extend(r.violations.iter().cloned());
                }
                None => self.by_invariant.push(r.clone()),
            }
        }
    }

    fn reports(&self) -> (Vec<Report>, Verdict) {
        let verdict = check::overall(&self.by_invariant);
        (self.by_invariant.clone(), verdict)
    }
}

/// The walks of a campaign, each added to the totals and a failing one
/// printed, until the first that finds something.
struct UntilFound<'a>(&'a mut Totals);

impl WalkObserver for UntilFound<'_> {
    fn walk(&mut self, report: &WalkReport) -> ControlFlow<()> {
        let _ = PrintFailures.walk(report);
        self.0.add(report);
        if report.findings().is_empty() {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    }
}

/// The queue under test, which also empties the effect stores whenever the
/// queue is cleared (before every walk and every shrinker replay).
struct Clearing {
    inner: Arc<dyn Adapter>,
    stores: Vec<Arc<dyn EffectStore>>,
}

// Only `clear` changes; every other call, the read-back switch included,
// goes to the queue under test as it is.
impl Wrapper for Clearing {
    fn inner(&self) -> &dyn Adapter {
        &*self.inner
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move {
            self.inner.clear().await?;
            for store in &self.stores {
                store.clear().await?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_once_is_a_unique_key_and_add_appends() {
        let store = MemoryStore::new();
        assert!(store.add_once("JOB-1"));
        assert!(!store.add_once("JOB-1"));
        assert_eq!(store.add("JOB-2"), 1);
        assert_eq!(store.add("JOB-2"), 2);
        assert_eq!(store.get("JOB-1"), 1);
        assert_eq!(store.get("JOB-3"), 0);
    }

    #[test]
    fn a_handler_brings_its_store_to_the_campaign() {
        let store = MemoryStore::new();
        let handler = Handler::new("h", store, |_conn, _job| async { Ok(()) });
        assert_eq!(Campaign::new(handler).stores.len(), 1);
    }
}
