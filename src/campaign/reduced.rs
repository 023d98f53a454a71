//! A wall-clock column's findings pinned down on logical time: the chaos
//! run's history, each broken invariant's first violations naming a job
//! read off it as schedules ([`crate::explore::reduce`]) and run on a
//! server of the explorers' own (its clock ackgap's), shrunk, and run ten
//! times more. What comes back is the exact replay line the findings page
//! shows beside the column's rerun line.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::chaos::matrix::Cell as MatrixCell;
use crate::chaos::schedule::FaultKind;
use crate::check::{Report, Verdict};
use crate::consumer::Kind as ConsumerKind;
use crate::explore::line::Rerun;
use crate::explore::reduce::{self, reduce, NotReduced};
use crate::explore::{OwnedServer, Subject};
use crate::history::Event;
use crate::server::ServerSpec;

use super::battery::BatteryConfig;
use super::findings::cut;
use super::table::Replayed;

/// Violations tried per broken invariant, until one is reduced.
const TRIES: usize = 2;
/// Runs of each shrunk replay.
const CONFIRM: usize = 10;
/// The most replays the shrinker runs for one violation here (a replay
/// with a kill restarts the server: a second or more each).
const SHRINK_RUNS_MAX: usize = 100;

/// What a column's reduction gave: by broken invariant, its exact replay,
/// or why none could be read off the history.
#[derive(Default)]
pub(super) struct Reductions {
    pub(super) replays: BTreeMap<&'static str, Replayed>,
    pub(super) unreduced: BTreeMap<&'static str, String>,
}

/// The most characters of each reason a page shows.
const WHY_MAX: usize = 240;

/// Each invariant `reports` found broken in `events` (a chaos run of
/// `config.queue` with leases of `lease_ms`) reduced to an exact replay,
/// where one could be; where none could, why (a server whose clock the
/// explorers do not own gives none).
pub(super) async fn reduce_column(
    spec: &ServerSpec,
    config: &BatteryConfig,
    rerun: &Rerun,
    (events, reports): (&[Event], &[Report]),
    lease_ms: u64,
) -> anyhow::Result<Reductions> {
    let mut out = Reductions::default();
    let broken: Vec<&Report> = reports
        .iter()
        .filter(|r| r.verdict == Verdict::Invalid)
        .collect();
    let none = |out: &mut Reductions, why: &str| {
        for r in &broken {
            out.unreduced.insert(r.invariant, why.to_owned());
        }
    };
    if broken.is_empty() {
        return Ok(out);
    }
    if matches!(spec, ServerSpec::Url(_)) {
        none(
            &mut out,
            "the server is a URL: its clock is not ackgap's to set",
        );
        return Ok(out);
    }
    let server = reduce::start_server(spec, config.persistence, events).await?;
    if server.logical_clock().is_none() && reduce::server_faults(events) == (false, false) {
        // A server whose clock the explorers do not own: no exact replay.
        server.stop().await?;
        none(
            &mut out,
            "the server's clock is not ackgap's to set (no libfaketime for this server)",
        );
        return Ok(out);
    }
    let queue = crate::queue::Queue::connect(&server.client(), "ackgap-reduce").await?;
    let adapter = crate::adapter::open(&config.queue, &queue, &server.url()).await?;
    let subject = Subject::new(adapter, Arc::from(ConsumerKind::Marker.consumer()))
        .with_clock(server.logical_clock())
        .with_rerun(rerun.clone());
    // A kill or a power loss read off the history is a step on the
    // server, lent to the subject.
    let owned = OwnedServer::new(server, config.persistence);
    let subject = subject.with_server(Some(owned.clone()));
    for r in broken {
        match reduce_invariant(&subject, config, events, r, lease_ms).await? {
            Ok(replayed) => {
                out.replays.insert(r.invariant, replayed);
            }
            Err(why) => {
                out.unreduced.insert(r.invariant, why);
            }
        }
    }
    drop(subject);
    drop(queue);
    let server = owned
        .into_server()
        .map_err(|_| anyhow::anyhow!("the reduction still holds its server"))?;
    server.stop().await?;
    Ok(out)
}

/// A durability cell's broken invariants among `reports` (its run of
/// `lease_ms` leases, its history at `history`) reduced as a chaos
/// column's are, on a server like the cell's under the cell's
/// persistence, its kill or power loss a step (`K`, `P`); a cell whose
/// fault no step makes (a failover), or on more than one server, says so.
pub(super) async fn reduce_cell(
    cell: &MatrixCell,
    config: &BatteryConfig,
    rerun: &Rerun,
    (history, reports): (Option<&Path>, &[Report]),
    lease_ms: u64,
) -> anyhow::Result<Reductions> {
    let broken = super::battery::broken_in(reports);
    if broken.is_empty() {
        return Ok(Reductions::default());
    }
    let why = match (cell.fault, &cell.topology, history) {
        (
            FaultKind::ServerKill | FaultKind::PowerLoss,
            ServerSpec::Process(_) | ServerSpec::Container,
            Some(history),
        ) => {
            let events = crate::history::read_file(history).map_err(|e| anyhow::anyhow!(e))?;
            let mut config = config.clone();
            config.persistence = cell.persistence;
            let rerun = Rerun {
                env: rerun.env.clone(),
                flags: format!(
                    " --server {} --persistence {}",
                    cell.topology, cell.persistence
                ),
            };
            return reduce_column(
                &cell.topology,
                &config,
                &rerun,
                (&events, reports),
                lease_ms,
            )
            .await;
        }
        (
            FaultKind::ServerKill | FaultKind::PowerLoss,
            ServerSpec::Process(_) | ServerSpec::Container,
            None,
        ) => "the cell kept no history to read a schedule off".to_owned(),
        (FaultKind::ServerKill | FaultKind::PowerLoss, _, _) => format!(
            "the cell's {} hits more than one server: a step kills or cuts the power of one",
            cell.fault
        ),
        _ => format!(
            "a {} is no explorer step: steps kill (K) or cut the power of (P) one server",
            cell.fault
        ),
    };
    Ok(Reductions {
        replays: BTreeMap::new(),
        unreduced: broken.into_iter().map(|inv| (inv, why.clone())).collect(),
    })
}

/// `r`'s broken invariant reduced: its first violations naming a job
/// ([`TRIES`]) tried in turn until one gives an exact replay; `Err` with
/// why none did.
async fn reduce_invariant(
    subject: &Subject,
    config: &BatteryConfig,
    events: &[Event],
    r: &Report,
    lease_ms: u64,
) -> anyhow::Result<Result<Replayed, String>> {
    let mut why: Vec<String> = Vec::new();
    for v in r.violations.iter().filter(|v| v.job.is_some()).take(TRIES) {
        let runs = config.shrink_runs.clamp(1, SHRINK_RUNS_MAX);
        match reduce(subject, events, v, lease_ms, runs, CONFIRM).await? {
            Ok(reduced) => {
                return Ok(Ok(Replayed {
                    line: reduced.shrunk.report.replay_line_command(),
                    read: reduced.extraction.schedule.len(),
                    steps: reduced.shrunk.line().schedule.len(),
                    reproduced: reduced.reproduced,
                    runs: reduced.confirm,
                }))
            }
            Err(not) => why.push(brief(&not)),
        }
    }
    Ok(Err(match why.is_empty() {
        true => "none of its violations names a job to read a schedule for".to_owned(),
        false => why.join("; "),
    }))
}

/// One violation's failed reduction in a line: its job, then each reason
/// cut to [`WHY_MAX`] characters.
fn brief(not: &NotReduced) -> String {
    let reasons: Vec<String> = not.why.iter().map(|w| cut(w, WHY_MAX)).collect();
    format!(
        "{}: {}",
        not.job.as_deref().unwrap_or("no job"),
        reasons.join("; ")
    )
}
