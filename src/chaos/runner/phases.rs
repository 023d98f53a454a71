//! A run's phases, in order: faults, heal, drain, read; and the progress
//! line.
//!
//! # Design notes
//!
//! `run_with` takes a `ChaosSubject` instead of the shipped names: the
//! caller's own adapter opener (called once for the direct adapter and once
//! per worker on its proxy URL) and consumer, as a library user's walks take
//! their own `Subject`.

use super::*;

/// Runs one chaos campaign against `server` (which it may pause, kill and
/// restart) and judges its history. The queue is cleared first.
pub async fn run(
    server: &mut Server,
    cfg: ChaosConfig,
    history: Option<PathBuf>,
    progress: Option<Progress>,
) -> Result<ChaosReport, ChaosError> {
    run_until(server, cfg, history, progress, Interrupt::new()).await
}

/// [`run`], stopping early when `interrupt` is raised: the report then
/// judges the history so far and says so in
/// [`ChaosReport::interrupted`]. The server is healed (resumed, restarted)
/// before this returns, so the caller can stop it.
pub async fn run_until(
    server: &mut Server,
    cfg: ChaosConfig,
    history: Option<PathBuf>,
    progress: Option<Progress>,
    interrupt: Interrupt,
) -> Result<ChaosReport, ChaosError> {
    run_with(server, cfg, None, history, progress, interrupt).await
}

/// [`run_until`] on a queue and a consumer of the caller's own
/// (`subject`; `None`: the ones [`ChaosConfig::queue`] and
/// [`ChaosConfig::consumer`] name).
pub async fn run_with(
    server: &mut Server,
    cfg: ChaosConfig,
    subject: Option<ChaosSubject>,
    history: Option<PathBuf>,
    progress: Option<Progress>,
    interrupt: Interrupt,
) -> Result<ChaosReport, ChaosError> {
    check_usage(server, &cfg, subject.is_some())?;
    let schedule = cfg.schedule();
    let rec = recorder(history.as_ref())?;
    // The server's counters before and after: its own account of the run.
    let counters_before = server_counters(&server.node_clients()).await;
    let (proxy, ctx) = start(server, &cfg, &rec, subject).await?;
    let direct = Arc::clone(&ctx.direct);
    // On a cluster the server faults aim at the queue's own primary.
    server.focus(&direct.keys().pending);
    // From here `interrupt` means Ctrl-C or a refusal of the environment
    // (an ACL, a password, a missing command, a read-only replica): either
    // stops the run where it is.
    // A single server (a process, a URL) is pinged too: one that refuses
    // connections outside the run's server faults for longer than its own
    // restarts took (kill -9 by hand) stops the run (`errors::watch_server`).
    let nodes = server.node_clients();
    let watched = (nodes.len() == 1).then(|| nodes[0].clone());
    let (refusals, interrupt) =
        RefusalWatch::start(&rec, &interrupt, cfg.faults.moves_primary(), watched);

    let (tasks, producers) = spawn_clients(&ctx, &cfg);
    let phase_name: Arc<Mutex<&'static str>> = Arc::new(Mutex::new("faults"));
    let _progress = spawn_progress(&ctx, progress, &phase_name);

    // Phases 1 and 2: faults, heal.
    let (faults_ms, heal_ms, mut stopped_in) =
        faults_and_heal(server, &ctx, &proxy, &schedule, &interrupt, &phase_name).await;

    // Phase 3: drain. Producers finish what a fault delayed, then workers
    // go on until nothing is pending or active.
    *lock(&phase_name) = "drain";
    let t = Instant::now();
    if stopped_in.is_none() && interrupt.is_raised() {
        stopped_in = Some(("heal", ctx.now_ms()));
    }
    let drained = drain(&ctx, &direct, &interrupt, producers, &mut stopped_in, t).await;
    let drain_ms = t.elapsed().as_millis() as u64;
    stop(&ctx, tasks, stopped_in.is_some()).await;
    if let Some(refused) = refusals.take() {
        return Err(refused);
    }
    if let Some(why) = lock(&ctx.server_lost).take() {
        return Err(ChaosError::Unavailable(format!(
            "{why}. The run stopped there: the queue cannot be read, so nothing is judged (the \
             history so far is kept)"
        )));
    }

    if let Some((phase, at_ms)) = stopped_in {
        return interrupted_report(InterruptedRun {
            ctx: &ctx,
            cfg,
            schedule,
            history,
            phases: Phases {
                faults_ms,
                heal_ms,
                drain_ms,
                read_ms: 0,
            },
            phase,
            at_ms,
        });
    }

    // Phase 4: the final read with effects, and the checkers.
    *lock(&phase_name) = "read";
    let counters = [
        counters_before,
        server_counters(&server.node_clients()).await,
    ];
    judge(
        &ctx,
        cfg,
        schedule,
        history,
        Phases {
            faults_ms,
            heal_ms,
            drain_ms,
            read_ms: 0,
        },
        &drained,
        &counters,
    )
    .await
}

/// The run's recorder: to the file `history`, else in memory.
fn recorder(history: Option<&PathBuf>) -> Result<Recorder, ChaosError> {
    Ok(match history {
        Some(path) => Recorder::to_file(path).map_err(|e| {
            ChaosError::History(format!(
                "cannot write the history to {}: {e}",
                path.display()
            ))
        })?,
        None => Recorder::in_memory(),
    })
}

/// Spawns the progress line when there is one: it runs until the returned
/// guard drops.
fn spawn_progress(
    ctx: &Arc<Ctx>,
    progress: Option<Progress>,
    phase_name: &Arc<Mutex<&'static str>>,
) -> Option<AbortOnDrop> {
    progress.map(|progress| {
        AbortOnDrop(tokio::spawn(report_progress(
            Arc::clone(ctx),
            progress,
            Arc::clone(phase_name),
        )))
    })
}

/// Spawns the producers, the workers and the reaper (when the queue has
/// one): the tasks to stop (workers, reaper) and the producers to wait
/// for.
fn spawn_clients(ctx: &Arc<Ctx>, cfg: &ChaosConfig) -> (JoinSet<()>, JoinSet<()>) {
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut producers: JoinSet<()> = JoinSet::new();
    let jobs: Arc<Vec<JobDraw>> = Arc::new(ctx.draws.jobs(cfg.seed, cfg.jobs));
    for p in 0..cfg.producers {
        producers.spawn(producer(Arc::clone(ctx), p, Arc::clone(&jobs)));
    }
    for w in 0..cfg.workers {
        tasks.spawn(worker(Arc::clone(ctx), w));
    }
    // A queue without a reaper recovers expired leases its own way,
    // inside a lease (Sidekiq's cleanup of dead processes' lists, arq's
    // in-progress key that expires): the workers' leases are its reaper.
    if ctx
        .direct
        .capabilities()
        .supports(crate::adapter::Operation::Reap)
    {
        tasks.spawn(reaper(Arc::clone(ctx)));
    }
    (tasks, producers)
}

/// Phases 1 and 2: the nemesis runs `schedule`'s faults, then heals them
/// all. Their lengths (ms), and where an interrupt stopped the run if one
/// did in the faults.
async fn faults_and_heal(
    server: &mut Server,
    ctx: &Arc<Ctx>,
    proxy: &Proxy,
    schedule: &FaultSchedule,
    interrupt: &Interrupt,
    phase_name: &Mutex<&'static str>,
) -> (u64, u64, Option<(&'static str, u64)>) {
    // Phase 1: faults.
    let mut nemesis = Nemesis {
        ctx: Arc::clone(ctx),
        proxy,
        schedule,
        active: BTreeSet::new(),
        interrupt: interrupt.clone(),
    };
    nemesis.run(server).await;
    let faults_ms = ctx.now_ms();
    // Where an interrupt stopped the run, if one did.
    let stopped_in: Option<(&'static str, u64)> =
        interrupt.is_raised().then(|| ("faults", ctx.now_ms()));

    // Phase 2: heal.
    *lock(phase_name) = "heal";
    let t = Instant::now();
    nemesis.heal_all(server).await;
    let heal_ms = t.elapsed().as_millis() as u64;
    (faults_ms, heal_ms, stopped_in)
}

/// Refuses settings a run cannot honour.
fn check_usage(server: &Server, cfg: &ChaosConfig, own: bool) -> Result<(), ChaosError> {
    if cfg.workers == 0 || cfg.producers == 0 || cfg.jobs == 0 {
        return Err(ChaosError::Usage(
            "--workers, producers and --jobs must be at least 1".into(),
        ));
    }
    if !own && !crate::adapter::is_known(&cfg.queue) {
        return Err(ChaosError::Usage(format!(
            "unknown queue {:?}: expected one of {}, or exec:COMMAND",
            cfg.queue,
            crate::adapter::NAMES.join(", ")
        )));
    }
    // Each kind's own requirements (`chaos/fault.rs`), with the reason.
    cfg.faults
        .check(&Shape::of(server))
        .map_err(ChaosError::Usage)?;
    Ok(())
}

/// Starts the fault proxy and builds the run's context.
async fn start(
    server: &Server,
    cfg: &ChaosConfig,
    rec: &Recorder,
    subject: Option<ChaosSubject>,
) -> Result<(Proxy, Arc<Ctx>), ChaosError> {
    // The proxy, one port per worker; fired faults are noted through a
    // hook that reaches the context once it exists.
    let names: Vec<String> = (0..cfg.workers).map(|w| format!("w{w}")).collect();
    let hook_ctx: Arc<Mutex<Option<std::sync::Weak<Ctx>>>> = Arc::new(Mutex::new(None));
    let hook = {
        let hook_ctx = Arc::clone(&hook_ctx);
        Arc::new(move |kind: FaultKind, client: &str, cmd: &str| {
            let ctx = lock(&hook_ctx).as_ref().and_then(|w| w.upgrade());
            if let Some(ctx) = ctx {
                ctx.fire(kind, client, json!(cmd));
            }
        })
    };
    let (proxy, urls, addresses) = start_proxy(server, &names, hook).await?;
    let own = subject.as_ref().map(|s| &s.open);
    let (direct, adapters) = connect_run(cfg, &server.url(), &urls, &addresses, own).await?;
    let slots = names
        .iter()
        .zip(adapters)
        .map(|(name, adapter)| Slot {
            name: name.clone(),
            adapter,
            armed: Mutex::new(VecDeque::new()),
            silent_until_ms: AtomicU64::new(0),
        })
        .collect();
    let ctx = Arc::new(Ctx {
        consumer: subject.map_or_else(
            || Arc::from(cfg.consumer.consumer_with(cfg.durability)),
            |s| s.consumer,
        ),
        cfg: cfg.clone(),
        rec: rec.clone(),
        start: Instant::now(),
        slots,
        direct,
        stop_workers: AtomicBool::new(false),
        ops: AtomicU64::new(0),
        nemesis: Mutex::new(()),
        injected: Mutex::new(BTreeMap::new()),
        fired: Mutex::new(BTreeMap::new()),
        acknowledged: Mutex::new(BTreeSet::new()),
        draws: cfg.draws(),
        pools: Mutex::new(Pools::default()),
        deliveries: Mutex::new(HashMap::new()),
        workload: Mutex::new(Workload::default()),
        server_lost: Mutex::new(None),
        slip: SlipLog::default(),
    });
    *lock(&hook_ctx) = Some(Arc::downgrade(&ctx));
    Ok((proxy, ctx))
}

/// The fault proxy, one port per worker (on a cluster, per worker and
/// node: each worker's cluster client reaches every node through it), and
/// each worker's URL and, on a cluster, its node addresses.
async fn start_proxy(
    server: &Server,
    names: &[String],
    hook: crate::chaos::proxy::FiredHook,
) -> Result<
    (
        Proxy,
        Vec<(String, String)>,
        BTreeMap<String, NodeAddresses>,
    ),
    ChaosError,
> {
    let nodes = announced_nodes(server).await?;
    let proxy = Proxy::start(&server.url(), names, &nodes, hook)
        .await
        .map_err(|e| ChaosError::Internal(format!("cannot start the fault proxy: {e}")))?;
    let urls = names
        .iter()
        .map(|name| (name.clone(), proxy.url(name).expect("a port per worker")))
        .collect();
    let addresses = if nodes.is_empty() {
        BTreeMap::new()
    } else {
        names
            .iter()
            .map(|name| (name.clone(), proxy.addresses(name)))
            .collect()
    };
    Ok((proxy, urls, addresses))
}

/// What the drain left: the jobs unfinished, the bound it waited for, and
/// why it stopped short of both, if it did (a stall: [`Stall`]).
pub(super) struct Drained {
    unfinished: Vec<String>,
    bound: LivenessBound,
    stalled: Option<String>,
}

/// Phase 3: the liveness bound is set (`--drain-ms-max`, or derived from
/// the backlog at the heal and the rate measured before the faults);
/// producers finish what a fault delayed, then the workers go on until
/// nothing is pending or active, the bound passes (from `t`), the server
/// refuses every call of a stretch for one cause of its state ([`Stall`]),
/// or an interrupt stops it.
async fn drain(
    ctx: &Ctx,
    direct: &Arc<dyn Adapter>,
    interrupt: &Interrupt,
    mut producers: JoinSet<()>,
    stopped_in: &mut Option<(&'static str, u64)>,
    t: Instant,
) -> Drained {
    let cfg = &ctx.cfg;
    let liveness_bound = match cfg.drain_ms_max {
        Some(ms) => LivenessBound::given(ms),
        None => {
            let backlog = backlog(cfg, direct).await;
            LivenessBound::derive(
                &ctx.rec.events(),
                backlog,
                cfg.lease_ms,
                direct.capabilities().recovery_ms,
            )
        }
    };
    let bound = Duration::from_millis(liveness_bound.wait_ms);
    let mut stall = Stall::new(ctx.now_ms());
    let mut stalled: Option<String> = None;
    if stopped_in.is_none() {
        // Bounded too: producers whose enqueues the server keeps refusing
        // (OOM) retry each job, and would hold the drain for ever.
        let watch = async {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Some(why) = stall.check(&ctx.rec, ctx.now_ms()) {
                    return why;
                }
            }
        };
        tokio::select! {
            _ = async { while producers.join_next().await.is_some() {} } => {}
            _ = tokio::time::sleep_until((t + bound).into()) => {}
            why = watch => stalled = Some(why),
            _ = interrupt.raised() => *stopped_in = Some(("drain", ctx.now_ms())),
        }
    }
    producers.abort_all();
    let mut unfinished: Vec<String> = Vec::new();
    while stopped_in.is_none() {
        unfinished = match direct.read().await {
            Ok(read) => read
                .jobs
                .iter()
                .filter(|(_, s)| !matches!(s.as_str(), "done" | "dead"))
                .map(|(id, _)| id.clone())
                .collect(),
            Err(e) => vec![format!("(the queue could not be read: {e})")],
        };
        if unfinished.is_empty() || t.elapsed() >= bound || stalled.is_some() {
            break;
        }
        stalled = stall.check(&ctx.rec, ctx.now_ms());
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = interrupt.raised() => *stopped_in = Some(("drain", ctx.now_ms())),
        }
    }
    Drained {
        unfinished,
        bound: liveness_bound,
        stalled,
    }
}

/// The jobs of the run not done or dead yet (enqueued or not), as the
/// queue reads at the heal. A read is free of effects, so one that got no
/// answer is tried again, up to three times, 100 ms apart: a client's first
/// call after the server's restart may fail on the connection the restart
/// closed (redis-py's without retries does), and the heal has just healed
/// that.
async fn backlog(cfg: &ChaosConfig, direct: &Arc<dyn Adapter>) -> Result<u64, String> {
    let mut tries = 0;
    let read = loop {
        tries += 1;
        match direct.read().await {
            Ok(read) => break read,
            Err(QueueError::Unknown { .. } | QueueError::Unavailable { .. }) if tries < 3 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("the queue could not be read at the heal: {e}")),
        }
    };
    let finished = read
        .jobs
        .values()
        .filter(|s| matches!(s.as_str(), "done" | "dead"))
        .count() as u64;
    Ok((cfg.jobs as u64).saturating_sub(finished))
}

/// Stops the workers, the heartbeats and the reaper.
async fn stop(ctx: &Ctx, mut tasks: JoinSet<()>, interrupted: bool) {
    ctx.stop_workers.store(true, Ordering::SeqCst);
    // Interrupted, the workers get less time: whatever they still have in
    // flight stays an invoke without a completion (the same as info).
    let grace = Duration::from_secs(if interrupted { 2 } else { 5 });
    let stopping =
        tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} });
    if stopping.await.is_err() {
        tasks.abort_all();
    }
    while tasks.join_next().await.is_some() {}
}

/// Phase 4: the final read with effects, and the checkers.
async fn judge(
    ctx: &Ctx,
    cfg: ChaosConfig,
    schedule: FaultSchedule,
    history: Option<PathBuf>,
    mut phases: Phases,
    drained: &Drained,
    counters: &[Result<ServerCounters, String>; 2],
) -> Result<ChaosReport, ChaosError> {
    let rec = &ctx.rec;
    let t = Instant::now();
    let effects_by_job = final_read(ctx)
        .await
        .map_err(|e| ChaosError::Unavailable(format!("the final read failed: {e}")))?;
    let events = rec.events();
    if let Some(refused) = first_refusal(&events, cfg.faults.moves_primary()) {
        return Err(refused);
    }
    let mut invariants = check::check_all(&events);
    invariants.push(liveness(
        &drained.unfinished,
        phases.drain_ms,
        &drained.bound,
        drained.stalled.as_deref(),
    ));
    let states = check::final_read(&events).unwrap_or_default();
    let effects = summarize_effects(&states, &effects_by_job);
    let consumer_findings =
        marker_ttl::findings(&events, &effects_by_job, ctx.consumer.marker_ttl_ms());
    let verdict = check::overall(&invariants);
    phases.read_ms = t.elapsed().as_millis() as u64;
    if let Some(e) = rec.write_error() {
        return Err(ChaosError::History(format!(
            "writing the history failed: {e}"
        )));
    }
    let acknowledged = lock(&ctx.acknowledged).clone();
    let lost: Vec<String> = acknowledged
        .iter()
        .filter(|id| !matches!(states.get(*id).map(String::as_str), Some("done" | "dead")))
        .cloned()
        .collect();
    let (server, server_unread) = match server_account(&counters[0], &counters[1], lost.len()) {
        Ok(account) => (Some(account), None),
        Err(why) => (None, Some(why)),
    };
    let fired = lock(&ctx.fired).clone();
    let never_fired = cfg
        .faults
        .0
        .iter()
        .copied()
        .filter(|k| !fired.contains_key(k))
        .collect();
    Ok(ChaosReport {
        config: cfg,
        schedule,
        draws: ctx.draws.clone(),
        workload: lock(&ctx.workload).clone(),
        injected: lock(&ctx.injected).clone(),
        fired,
        never_fired,
        phases,
        invariants,
        verdict,
        ops: ctx.ops.load(Ordering::Relaxed),
        events: events.len(),
        effects,
        lost,
        liveness_bound: drained.bound.clone(),
        drain_stalled: drained.stalled.clone(),
        errors: count_errors(&events),
        migrations: migration_windows(&events),
        consumer_findings,
        server,
        server_unread,
        history,
        schedule_slip: ctx.slip.account(ctx.cfg.lease_ms, &events),
        interrupted: None,
    })
}

pub(super) async fn report_progress(
    ctx: Arc<Ctx>,
    progress: Progress,
    phase: Arc<Mutex<&'static str>>,
) {
    let mut last_ops = 0;
    let mut last = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ops = ctx.ops.load(Ordering::Relaxed);
        let rate = (ops - last_ops) as f64 / last.elapsed().as_secs_f64().max(1e-3);
        last_ops = ops;
        last = Instant::now();
        let fired: u64 = lock(&ctx.fired).values().sum();
        let line = format!(
            "{:>5.1} s  {:<6}  {ops} ops  {rate:.0} ops/s  {fired} faults fired",
            ctx.start.elapsed().as_secs_f64(),
            *lock(&phase),
        );
        progress(&line);
    }
}

/// How long the heal phase waits for armed worker faults to fire.
pub(super) const ARMED_GRACE: Duration = Duration::from_secs(5);
