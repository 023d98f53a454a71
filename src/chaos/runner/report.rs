//! Judging a run: the final read, liveness, the effect counts, and the
//! report of an interrupted run.

use super::*;

/// What [`interrupted_report`] judges.
pub(super) struct InterruptedRun<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) cfg: ChaosConfig,
    pub(super) schedule: FaultSchedule,
    pub(super) history: Option<PathBuf>,
    pub(super) phases: Phases,
    /// The phase the interrupt stopped, and when (ms since the start).
    pub(super) phase: &'static str,
    pub(super) at_ms: u64,
}

/// The report of an interrupted run: the checkers on the history so far
/// (without a final read, so no-loss says `unknown`), and liveness
/// `unknown` since no drain ran to its end.
pub(super) fn interrupted_report(run: InterruptedRun<'_>) -> Result<ChaosReport, ChaosError> {
    let ctx = run.ctx;
    let note = format!(
        "interrupted (Ctrl-C) {:.1} s into the run, in the {} phase: no drain ran to its end and no final read happened, so no-loss and liveness are unknown; the other invariants are judged on the history up to the interrupt",
        run.at_ms as f64 / 1000.0,
        run.phase
    );
    let events = ctx.rec.events();
    let mut invariants = check::check_all(&events);
    let mut counts = BTreeMap::new();
    counts.insert("drain_ms", run.phases.drain_ms);
    counts.insert("bound_ms", run.cfg.drain_ms_max);
    invariants.push(Report {
        invariant: "liveness",
        verdict: Verdict::Unknown,
        counts,
        violations: vec![format!(
            "interrupted in the {} phase before the drain ended: cannot tell whether every job would finish",
            run.phase
        )],
    });
    let verdict = check::overall(&invariants);
    if let Some(e) = ctx.rec.write_error() {
        return Err(ChaosError::Internal(format!(
            "writing the history failed: {e}"
        )));
    }
    let fired = lock(&ctx.fired).clone();
    let never_fired = run
        .cfg
        .faults
        .0
        .iter()
        .copied()
        .filter(|k| !fired.contains_key(k))
        .collect();
    Ok(ChaosReport {
        injected: lock(&ctx.injected).clone(),
        fired,
        never_fired,
        phases: run.phases,
        invariants,
        verdict,
        ops: ctx.ops.load(Ordering::Relaxed),
        events: events.len(),
        effects: Effects::default(),
        lost: Vec::new(),
        history: run.history,
        interrupted: Some(note),
        config: run.cfg,
        schedule: run.schedule,
    })
}

/// Reads the whole queue back with every job's effect count, as one `read`
/// event of the `checker`. Answers the effect counts.
pub(super) async fn final_read(ctx: &Ctx) -> Result<BTreeMap<String, u64>, QueueError> {
    ctx.count();
    let acknowledged = lock(&ctx.acknowledged).clone();
    let (_, effects) = ctx
        .recorded(&ctx.direct, "checker")
        .read_with_effects(ctx.consumer.as_ref(), acknowledged)
        .await?;
    Ok(effects)
}

pub(super) fn liveness(unfinished: &[String], drain_ms: u64, bound_ms: u64) -> Report {
    let mut counts = BTreeMap::new();
    counts.insert("drain_ms", drain_ms);
    counts.insert("bound_ms", bound_ms);
    counts.insert("unfinished", unfinished.len() as u64);
    let violations: Vec<String> = unfinished
        .iter()
        .take(20)
        .map(|id| format!("{id}: neither done nor dead {bound_ms} ms after the faults healed"))
        .collect();
    Report {
        invariant: "liveness",
        verdict: if unfinished.is_empty() {
            Verdict::Valid
        } else {
            Verdict::Invalid
        },
        counts,
        violations,
    }
}

pub(super) fn summarize_effects(
    states: &BTreeMap<String, String>,
    effects: &BTreeMap<String, u64>,
) -> Effects {
    let mut out = Effects::default();
    for (id, &n) in effects {
        out.total += n;
        *out.histogram.entry(n).or_default() += 1;
        if n > 1 {
            out.duplicated += 1;
        }
        if n == 0 && states.get(id).map(String::as_str) == Some("done") {
            out.missing += 1;
        }
    }
    out
}
