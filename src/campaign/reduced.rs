//! A wall-clock column's findings pinned down on logical time: the chaos
//! run's history, each broken invariant's first violations naming a job
//! read off it as schedules ([`crate::explore::reduce`]) and run on a
//! server of the explorers' own (its clock ackgap's), shrunk, and run ten
//! times more. What comes back is the exact replay line the findings page
//! shows beside the column's rerun line.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::check::{Report, Verdict};
use crate::consumer::Kind as ConsumerKind;
use crate::explore::line::Rerun;
use crate::explore::reduce::{self, reduce};
use crate::explore::{OwnedServer, Subject};
use crate::history::Event;
use crate::server::ServerSpec;

use super::battery::BatteryConfig;
use super::table::Replayed;

/// Violations tried per broken invariant, until one is reduced.
const TRIES: usize = 2;
/// Runs of each shrunk replay.
const CONFIRM: usize = 10;
/// The most replays the shrinker runs for one violation here (a replay
/// with a kill restarts the server: a second or more each).
const SHRINK_RUNS_MAX: usize = 100;

/// Each invariant `reports` found broken in `events` (a chaos run of
/// `config.queue` with leases of `lease_ms`) reduced to an exact replay,
/// where one could be; none when the explorers' server does not give
/// ackgap its clock (a URL).
pub(super) async fn reduce_column(
    spec: &ServerSpec,
    config: &BatteryConfig,
    rerun: &Rerun,
    (events, reports): (&[Event], &[Report]),
    lease_ms: u64,
) -> anyhow::Result<BTreeMap<&'static str, Replayed>> {
    let mut out = BTreeMap::new();
    let broken: Vec<&Report> = reports
        .iter()
        .filter(|r| r.verdict == Verdict::Invalid)
        .collect();
    if broken.is_empty() || matches!(spec, ServerSpec::Url(_)) {
        return Ok(out);
    }
    let server = reduce::start_server(spec, config.persistence, events).await?;
    if server.logical_clock().is_none() && reduce::server_faults(events) == (false, false) {
        // A server whose clock the explorers do not own: no exact replay.
        server.stop().await?;
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
        for v in r.violations.iter().filter(|v| v.job.is_some()).take(TRIES) {
            let runs = config.shrink_runs.clamp(1, SHRINK_RUNS_MAX);
            if let Ok(reduced) = reduce(&subject, events, v, lease_ms, runs, CONFIRM).await? {
                out.insert(
                    r.invariant,
                    Replayed {
                        line: reduced.shrunk.report.replay_line_command(),
                        read: reduced.extraction.schedule.len(),
                        steps: reduced.shrunk.line().schedule.len(),
                        reproduced: reduced.reproduced,
                        runs: reduced.confirm,
                    },
                );
                break;
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
