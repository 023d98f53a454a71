//! What the report draws, read from the history once: lease bars, settles,
//! faults, the marks of each violation, and which jobs matter.

use std::collections::{BTreeMap, BTreeSet};

use crate::check::fenced_settlement::accepted;
use crate::check::{Op, Report, Role};
use crate::fault::{Drawing, FaultKind, Target};
use crate::history::{Action, Event, EventKind, F};

/// One lease, from its grant's completion to whatever ended it first.
pub(super) struct Bar {
    pub job: String,
    pub worker: String,
    pub token: u64,
    /// Index of the grant's completion.
    pub grant_event: u64,
    pub from_ms: u64,
    pub to_ms: Option<u64>,
    /// Index of the event that ended it.
    pub end_event: Option<u64>,
    pub end: &'static str,
}

/// A settle (complete, fail) or an extend whose lease had ended.
pub(super) struct Settle {
    pub f: F,
    pub job: String,
    pub process: String,
    pub token: Option<u64>,
    /// The outcome, `unknown` or `failed`.
    pub what: String,
    pub accepted: bool,
    /// Index of its completion.
    pub event: u64,
    /// Index of its invocation.
    pub invoked: u64,
    pub at_ms: u64,
    /// An accepted settle of a lease that had already ended: when it ended,
    /// why, at which event.
    pub stale: Option<(u64, &'static str, u64)>,
}

/// One injected fault.
pub(super) struct Fault {
    pub kind: FaultKind,
    /// The worker it hit (`w3`), or `server`.
    pub target: String,
    /// How it is drawn: its kind's row ([`FaultKind::spec`]).
    pub drawing: Drawing,
    pub from_ms: u64,
    pub to_ms: u64,
    /// When it fired (hit something), if it did.
    pub fired_ms: Vec<u64>,
    /// Jobs it named as hit.
    pub hits: Vec<String>,
}

impl Fault {
    /// `partition w3`, or `server-pause` for the server.
    pub fn label(&self) -> String {
        if self.on_server() {
            self.kind.name().to_owned()
        } else {
            format!("{} {}", self.kind, self.target)
        }
    }

    /// It hits the server (every lease), not one worker.
    pub fn on_server(&self) -> bool {
        self.kind.target() == Target::Server || self.target.is_empty()
    }

    /// It may have lost a job the queue held: the server down or its
    /// primary replaced. A clock that moved, a worker cut off or stalled,
    /// a one-shot fault did not take the queue's data with it.
    pub fn suspect(&self) -> bool {
        match self.drawing {
            Drawing::Down | Drawing::Replication => true,
            Drawing::Clock | Drawing::Partition | Drawing::Window | Drawing::Instant => false,
        }
    }

    /// When it was on, from and to (ms): the instant it fired (or was
    /// injected) for a one-shot fault, its window for the others.
    pub fn on_span(&self) -> (u64, u64) {
        match self.drawing {
            Drawing::Instant => {
                let at = self.fired_ms.first().copied().unwrap_or(self.from_ms);
                (at, at)
            }
            Drawing::Down
            | Drawing::Replication
            | Drawing::Clock
            | Drawing::Partition
            | Drawing::Window => (self.from_ms, self.to_ms),
        }
    }
}

/// A ring on the timeline: one event a violation rests on.
pub(super) struct Mark {
    /// The violation's number in the list (from 1).
    pub n: usize,
    pub job: String,
    pub event: u64,
    pub at_ms: u64,
    /// `stale-settle`, `lease-ended`, `current-lease`, `violation`, `cited`.
    pub role: &'static str,
    pub title: String,
}

impl Mark {
    /// The violation's own event (a solid ring), not one it cites.
    pub fn primary(&self) -> bool {
        matches!(self.role, "stale-settle" | "violation")
    }
}

/// Why an invariant is unknown, as its report says: listed apart from
/// the violations (nothing was violated; something could not be judged).
pub(super) struct Unknown {
    pub invariant: &'static str,
    pub text: String,
}

/// A job owed and gone from the queue (no-loss's `absent`): when the
/// history last showed it, and the first event after that shows it gone.
pub(super) struct Vanished {
    pub job: String,
    /// The last completion that showed it in the queue: when, which event,
    /// what it was.
    pub seen_ms: u64,
    pub seen_event: u64,
    pub seen_what: String,
    /// The first event after that showing it gone (a settle answered
    /// `missing`, a read without it): when, which event, what it was.
    pub gone_ms: u64,
    pub gone_event: u64,
    pub gone_what: String,
    /// The faults in force or injected between the two that may have lost
    /// it ([`Fault::suspect`]), as labelled.
    pub suspects: Vec<String>,
}

/// A violation as listed: its invariant, words, and where it is drawn.
pub(super) struct Listed {
    pub invariant: &'static str,
    pub text: String,
    pub job: String,
}

/// Everything the report draws.
pub(super) struct Facts {
    pub end_ms: u64,
    /// Every job named by an enqueue or a lease, in id order.
    pub jobs: BTreeSet<String>,
    /// Processes that asked for a lease, sorted: the workers.
    pub workers: Vec<String>,
    pub bars: Vec<Bar>,
    pub settles: Vec<Settle>,
    pub faults: Vec<Fault>,
    pub marks: Vec<Mark>,
    pub listed: Vec<Listed>,
    /// Why each unknown invariant could not be judged.
    pub unknowns: Vec<Unknown>,
    /// The jobs no-loss found gone, and where they vanished.
    pub vanished: Vec<Vanished>,
    /// The jobs that matter, with why: violations first, then the jobs a
    /// fault touched or that were leased again, reaped or refused.
    pub involved: BTreeMap<String, Vec<String>>,
    /// Violation jobs, in the order of their first violation.
    pub violation_jobs: Vec<String>,
}

impl Facts {
    pub fn new(events: &[Event], all: &[Op<'_>], invariants: &[Report]) -> Facts {
        let end_ms = events.iter().map(|e| e.time_ms).max().unwrap_or(0).max(1);
        let mut jobs = BTreeSet::new();
        for op in all {
            if matches!(op.f(), F::Enqueue | F::Lease) {
                if let Some(job) = op.job() {
                    jobs.insert(job.to_owned());
                }
            }
        }
        let mut workers: Vec<String> = all
            .iter()
            .filter(|op| op.f() == F::Lease)
            .map(|op| op.invoke.process.clone())
            .collect();
        workers.sort();
        workers.dedup();
        let bars = bars(all);
        let settles = settles(all, &bars);
        let faults = faults(events);
        let (marks, listed, unknowns) = marks(events, invariants);
        let lost: BTreeSet<&str> = invariants
            .iter()
            .filter(|r| r.invariant == "no-loss")
            .flat_map(|r| r.violations.iter().filter_map(|v| v.job.as_deref()))
            .collect();
        let vanished = vanished(all, &lost, &faults);
        let mut facts = Facts {
            end_ms,
            jobs,
            workers,
            bars,
            settles,
            faults,
            marks,
            listed,
            unknowns,
            vanished,
            involved: BTreeMap::new(),
            violation_jobs: Vec::new(),
        };
        facts.involve(all);
        facts
    }

    /// Fills `involved` and `violation_jobs`.
    fn involve(&mut self, all: &[Op<'_>]) {
        let add = |involved: &mut BTreeMap<String, Vec<String>>, job: &str, why: String| {
            let reasons = involved.entry(job.to_owned()).or_default();
            if !reasons.contains(&why) {
                reasons.push(why);
            }
        };
        let mut involved = BTreeMap::new();
        for (n, l) in self.listed.iter().enumerate() {
            if self.jobs.contains(&l.job) {
                add(&mut involved, &l.job, format!("violation {}", n + 1));
                if !self.violation_jobs.contains(&l.job) {
                    self.violation_jobs.push(l.job.clone());
                }
            }
        }
        for f in &self.faults {
            for job in &f.hits {
                add(&mut involved, job, format!("hit by {}", f.label()));
            }
            // The leases held while the fault was on (or when it fired):
            // every one for a server fault, the target's for a worker's.
            let (from, to) = f.on_span();
            for b in &self.bars {
                let held = b.from_ms <= to && b.to_ms.unwrap_or(self.end_ms) >= from;
                if held && (f.on_server() || worker_of(&f.target, &b.worker)) {
                    add(&mut involved, &b.job, format!("held during {}", f.label()));
                }
            }
        }
        let mut leases: BTreeMap<&str, usize> = BTreeMap::new();
        for b in &self.bars {
            *leases.entry(b.job.as_str()).or_default() += 1;
            if b.end == "reaped" {
                add(&mut involved, &b.job, "reaped".into());
            }
        }
        for (job, n) in leases {
            if n > 1 {
                add(&mut involved, job, format!("leased {n} times"));
            }
        }
        for s in &self.settles {
            if !s.accepted {
                add(
                    &mut involved,
                    &s.job,
                    format!("{:?} {}", s.f, s.what).to_lowercase(),
                );
            }
        }
        for op in all {
            if op.f() == F::Enqueue && op.done.is_none_or(|d| d.kind != EventKind::Ok) {
                if let Some(job) = op.job() {
                    add(&mut involved, job, "enqueue not acknowledged".into());
                }
            }
        }
        involved.retain(|job, _| self.jobs.contains(job));
        self.involved = involved;
    }

    /// Time of an event, by its index.
    pub(crate) fn time_of(events: &[Event]) -> BTreeMap<u64, u64> {
        events.iter().map(|e| (e.index, e.time_ms)).collect()
    }
}

/// True when lease process `holder` is worker `target` (`w3` holds for
/// `w3`, and its heartbeat `w3-hb1` is w3's too).
fn worker_of(target: &str, holder: &str) -> bool {
    holder == target
        || holder
            .strip_prefix(target)
            .is_some_and(|rest| rest.starts_with('-'))
}

/// Operations in the order of their completions (what ends a lease, ends
/// it when its reply arrived).
fn by_completion<'a, 'b>(all: &'b [Op<'a>]) -> Vec<(&'b Op<'a>, &'a Event)> {
    let mut done: Vec<(&Op<'_>, &Event)> =
        all.iter().filter_map(|op| Some((op, op.done?))).collect();
    done.sort_by_key(|(_, e)| e.index);
    done
}

/// Lease bars: from the grant's completion to whatever ended it first
/// (its settle, the reaper, a newer lease, the holder's crash).
fn bars(all: &[Op<'_>]) -> Vec<Bar> {
    let mut bars: Vec<Bar> = Vec::new();
    for (op, done) in by_completion(all) {
        let at = done.time_ms;
        let mut close = |pred: &dyn Fn(&Bar) -> bool, why: &'static str| {
            for bar in bars
                .iter_mut()
                .filter(|b| b.to_ms.is_none() && b.grant_event < done.index)
            {
                if pred(bar) {
                    bar.to_ms = Some(at);
                    bar.end_event = Some(done.index);
                    bar.end = why;
                }
            }
        };
        match op.f() {
            F::Lease if op.outcome() == Some("leased") => {
                let (Some(job), Some(token)) = (op.job(), op.token()) else {
                    continue;
                };
                close(&|b| b.job == job && b.token < token, "a newer lease");
                bars.push(Bar {
                    job: job.to_owned(),
                    worker: op.invoke.process.clone(),
                    token,
                    grant_event: done.index,
                    from_ms: at,
                    to_ms: None,
                    end_event: None,
                    end: "still held at the end",
                });
            }
            F::Complete | F::Fail if accepted(op) => {
                // Its own lease ends; and the job has left the active
                // set, so a lease of it under another token (the one a
                // stale settle beat) ends there too.
                let (job, token) = (op.job().unwrap_or_default(), op.token());
                close(&|b| b.job == job && Some(b.token) == token, "settled");
                close(&|b| b.job == job, "the job was settled under another token");
            }
            F::Complete | F::Fail
                if matches!(op.outcome(), Some("fenced" | "missing" | "already_settled")) =>
            {
                // The queue says this lease is gone: it ended by then at
                // the latest.
                let (job, token) = (op.job().unwrap_or_default(), op.token());
                close(
                    &|b| b.job == job && Some(b.token) == token,
                    "its settle was refused",
                );
            }
            F::Crash => {
                let w = op.invoke.process.as_str();
                close(&|b| b.worker == w, "the worker crashed");
            }
            F::Reap if done.kind == EventKind::Ok => {
                let reaped: Vec<String> = done
                    .value
                    .as_ref()
                    .and_then(|v| v.get("reaped")?.as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|r| Some(r.get("id")?.as_str()?.to_owned()))
                    .collect();
                // As the checker reads it: the reaper takes leases
                // granted before it was invoked; one granted while it ran
                // may not be the one it took.
                let invoked = op.invoke.index;
                close(
                    &|b| reaped.contains(&b.job) && b.grant_event < invoked,
                    "reaped",
                );
            }
            _ => {}
        }
    }
    bars
}

/// Settles (complete, fail) and accepted extends of a lease that had
/// ended; a settle accepted after its lease ended is `stale`.
fn settles(all: &[Op<'_>], bars: &[Bar]) -> Vec<Settle> {
    let mut out = Vec::new();
    for op in all {
        if !matches!(op.f(), F::Complete | F::Fail | F::Extend) {
            continue;
        }
        let (Some(job), Some(done)) = (op.job(), op.done) else {
            continue;
        };
        let token = op.token();
        let ok = accepted(op);
        let bar = bars
            .iter()
            .find(|b| b.job == job && Some(b.token) == token && b.grant_event < done.index);
        let stale = bar.filter(|_| ok).and_then(|b| {
            let end_event = b.end_event.filter(|e| *e < done.index)?;
            Some((b.to_ms?, b.end, end_event))
        });
        if op.f() == F::Extend && stale.is_none() {
            continue;
        }
        let what = op
            .outcome()
            .unwrap_or(match done.kind {
                EventKind::Info => "unknown",
                _ => "failed",
            })
            .to_owned();
        out.push(Settle {
            f: op.f(),
            job: job.to_owned(),
            process: op.invoke.process.clone(),
            token,
            what,
            accepted: ok,
            event: done.index,
            invoked: op.invoke.index,
            at_ms: done.time_ms,
            stale,
        });
    }
    out
}

/// Faults, from the nemesis's inject, fired and heal events, each drawn
/// as its kind's row says.
fn faults(events: &[Event]) -> Vec<Fault> {
    let mut out: Vec<Fault> = Vec::new();
    // (kind, target) -> the open one's position in `out`.
    let mut open: BTreeMap<(FaultKind, String), usize> = BTreeMap::new();
    for (e, fault) in events.iter().filter_map(|e| Some((e, e.fault()?))) {
        let target = fault.target.clone().unwrap_or_default();
        let key = (fault.fault, target.clone());
        match fault.action {
            Action::Inject => {
                open.insert(key, out.len());
                out.push(Fault {
                    kind: fault.fault,
                    target,
                    drawing: fault.fault.spec().drawing,
                    from_ms: e.time_ms,
                    // Until healed (or for its stated duration).
                    to_ms: e.time_ms + fault.duration_ms(),
                    fired_ms: Vec::new(),
                    hits: Vec::new(),
                });
            }
            Action::Fired => {
                if let Some(f) = open.get(&key).map(|i| &mut out[*i]) {
                    f.fired_ms.push(e.time_ms);
                    if let Some(job) = fault.hit().and_then(|h| h.get("job")?.as_str()) {
                        f.hits.push(job.to_owned());
                    }
                }
            }
            Action::Heal => {
                if let Some(i) = open.remove(&key) {
                    out[i].to_ms = e.time_ms.max(out[i].from_ms);
                }
            }
            // Armed and never fired: drawn for its window as injected.
            Action::Disarm => {}
        }
    }
    out
}

/// The rings of every violation, and the list, read from the
/// violations' fields ([`crate::check::Violation`]), never from their
/// words: each event a violation cites is ringed with its role, solid for
/// the violation's own event ([`Role::primary`]: the stale settle, the
/// second of two settles, the final read that lost a job, the event that
/// broke the invariant), dashed for the events it rests on. Only an
/// invalid invariant's are violations: an unknown one's say why it could
/// not be judged, listed apart.
fn marks(events: &[Event], invariants: &[Report]) -> (Vec<Mark>, Vec<Listed>, Vec<Unknown>) {
    let time_of = Facts::time_of(events);
    let mut marks = Vec::new();
    let mut listed = Vec::new();
    let mut unknowns = Vec::new();
    for r in invariants {
        if r.verdict == crate::check::Verdict::Unknown {
            unknowns.extend(r.violations.iter().map(|v| Unknown {
                invariant: r.invariant,
                text: v.text.clone(),
            }));
            continue;
        }
        for v in &r.violations {
            let n = listed.len() + 1;
            let job = v.job.clone().unwrap_or_default();
            listed.push(Listed {
                invariant: r.invariant,
                text: v.text.clone(),
                job: job.clone(),
            });
            for c in &v.events {
                let Some(at_ms) = time_of.get(&c.event).copied() else {
                    continue;
                };
                marks.push(Mark {
                    n,
                    job: job.clone(),
                    event: c.event,
                    at_ms,
                    role: ring_role(c.role),
                    title: format!("violation {n}: {}, at event {}", c.role.describe(), c.event),
                });
            }
        }
    }
    (marks, listed, unknowns)
}

/// Where each job of `lost` that the queue no longer holds vanished: the
/// last completion that showed it there (its enqueue acknowledged, a
/// lease, a settle or an extend accepted, a read that listed it), then
/// the first after it that showed it gone (a settle or an extend answered
/// `missing`, a read that did not list it or named it `vanished` or
/// `taken`). A job the last read still holds (stranded) did not vanish.
fn vanished(all: &[Op<'_>], lost: &BTreeSet<&str>, faults: &[Fault]) -> Vec<Vanished> {
    let mut out = Vec::new();
    let done = by_completion(all);
    for job in lost {
        let mut seen: Option<(u64, u64, String)> = None;
        let mut gone: Option<(u64, u64, String)> = None;
        for (op, e) in &done {
            let read = (op.f() == F::Read && e.kind == EventKind::Ok).then(|| {
                e.value
                    .as_ref()
                    .and_then(|v| v.get("jobs")?.get(*job)?.as_str().map(str::to_owned))
            });
            let shows = match &read {
                Some(Some(state)) => !matches!(state.as_str(), "vanished" | "taken"),
                Some(None) => false,
                None => {
                    op.job() == Some(*job)
                        && e.kind == EventKind::Ok
                        && matches!(
                            op.outcome(),
                            Some(
                                "enqueued"
                                    | "leased"
                                    | "settled"
                                    | "requeued"
                                    | "dead"
                                    | "extended"
                            )
                        )
                }
            };
            let hides = match read {
                Some(state) => !shows && state.as_deref() != Some("done"),
                None => op.job() == Some(*job) && op.outcome() == Some("missing"),
            };
            let what = || {
                let f = format!("{:?}", op.f()).to_lowercase();
                match op.outcome() {
                    Some(outcome) => format!("{f} by {} ({outcome})", op.invoke.process),
                    None => format!("{f} by {}", op.invoke.process),
                }
            };
            if shows {
                seen = Some((e.time_ms, e.index, what()));
                gone = None;
            } else if hides && seen.is_some() && gone.is_none() {
                gone = Some((e.time_ms, e.index, what()));
            }
        }
        let (Some((seen_ms, seen_event, seen_what)), Some((gone_ms, gone_event, gone_what))) =
            (seen, gone)
        else {
            continue;
        };
        let suspects = faults
            .iter()
            .filter(|f| f.suspect())
            .filter(|f| f.from_ms <= gone_ms && f.to_ms >= seen_ms)
            .map(|f| format!("{} at {} ms", f.label(), f.from_ms))
            .collect();
        out.push(Vanished {
            job: (*job).to_owned(),
            seen_ms,
            seen_event,
            seen_what,
            gone_ms,
            gone_event,
            gone_what,
            suspects,
        });
    }
    out
}

/// A role as the timeline's `data-role` names it: fenced-settlement's
/// three by name, and for every other invariant `violation` (its own
/// event) or `cited`.
fn ring_role(role: Role) -> &'static str {
    match role {
        Role::StaleSettle => "stale-settle",
        Role::LeaseEnded => "lease-ended",
        Role::CurrentLease => "current-lease",
        _ if role.primary() => "violation",
        _ => "cited",
    }
}
