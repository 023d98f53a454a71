//! The durability matrix's column of `ackgap run --queue Q`: each cell of
//! [`super::battery::durability_cells`] run once on a fresh server
//! ([`matrix::run`]), the cells whose documentation promises to keep
//! acknowledged writes judged (a break run again and made a finding), every
//! cell reported with its rerun line, and what a cell broke read off its
//! history as an exact replay ([`super::reduced::reduce_cell`]).

use std::path::Path;
use std::time::Instant;

use super::battery::{
    add_finding, broken_in, record_reruns, BatteryConfig, DurabilityCell, Finding, RERUNS,
};
use super::table::Phase;
use crate::chaos::matrix::{self, Cell as MatrixCell};
use crate::chaos::runner::ChaosConfig;
use crate::check::{Report, Verdict};
use crate::explore::line::Rerun;

/// The durability matrix's column: each of `cells` run once (seed
/// `config.seed`, the chaos phases' duration and jobs, the cell's fault
/// alone) on a fresh server, through [`matrix::run`]. Only the cells whose
/// documentation promises to keep acknowledged writes
/// ([`matrix::promised`]) make the column's verdicts; every cell is listed
/// in `out`, with its replay line. A cell whose fault never fired proves
/// nothing: its invariants are unknown, not valid.
pub(super) async fn durability_phase(
    config: &BatteryConfig,
    cells: &[MatrixCell],
    rerun: &Rerun,
    (out, findings): (&mut Vec<DurabilityCell>, &mut Vec<Finding>),
) -> anyhow::Result<Phase> {
    let t = Instant::now();
    let cfg = config.chaos_config();
    let judged = cells.iter().filter(|c| matrix::promised(c)).count();
    let mut phase = Phase::new(
        "durability",
        format!(
            "{} cells of {} s, {} jobs, seed {}, each on a fresh server; the {judged} whose documentation promises to keep acknowledged writes judged, the others reported (marker)",
            cells.len(),
            cfg.duration_ms / 1000,
            cfg.jobs,
            cfg.seed
        ),
    );
    let dir = tempfile::Builder::new()
        .prefix("ackgap-durability-")
        .tempdir()?;
    // The cells' own files (histories, reports) go to a directory dropped
    // at the end; the battery prints each cell's line itself, below.
    let matrix = matrix::run(
        dir.path(),
        cfg.clone(),
        1,
        cells,
        |_| true,
        |_, _| String::new(),
        |_, _, _, _| {},
    )
    .await?;
    for result in &matrix.cells {
        let judged = durability_cell(
            config,
            (&cfg, dir.path()),
            result,
            rerun,
            (&mut phase, findings),
        )
        .await?;
        out.push(judged);
    }
    phase.elapsed_ms = t.elapsed().as_millis() as u64;
    Ok(phase)
}

/// One durability cell's run judged: its rerun line; where it is
/// judged (its documentation promises to keep acknowledged writes), its
/// invariants added to `phase`, a break run again [`RERUNS`] times on a
/// fresh server and recorded as a finding; where it broke, its broken
/// invariants read off its history as exact replays
/// ([`super::reduced::reduce_cell`]): every one a judged cell broke, and
/// no-loss, the loss the documentation concedes, for a cell reported.
async fn durability_cell(
    config: &BatteryConfig,
    (cfg, dir): (&ChaosConfig, &std::path::Path),
    result: &matrix::CellResult,
    rerun: &Rerun,
    (phase, findings): (&mut Phase, &mut Vec<Finding>),
) -> anyhow::Result<DurabilityCell> {
    let cell = &result.cell;
    let replay = rerun_line(config, cfg, cell, rerun);
    let promised = matrix::promised(cell);
    let mut reports = result.invariant_reports.clone();
    if result.fired == 0 {
        for r in &mut reports {
            r.verdict = r.verdict.max(Verdict::Unknown);
        }
    }
    // An invariant not exercised (delay-respected in a run without
    // delays) does not make the cell unknown: `overall`.
    let verdict = crate::check::overall(&reports);
    if promised {
        let run = (result.runs as u64, verdict);
        judge(
            (cfg, dir),
            cell,
            (&replay, &reports, run),
            (phase, findings),
        )
        .await?;
    }
    let reduce: Vec<Report> = reports
        .iter()
        .filter(|r| promised || r.invariant == "no-loss")
        .cloned()
        .collect();
    let reduced = super::reduced::reduce_cell(
        cell,
        config,
        rerun,
        (result.histories.first().map(|h| h.as_path()), &reduce),
        cfg.lease_ms,
    )
    .await?;
    if promised {
        // The column's replay of an invariant is its first cell's.
        for (inv, r) in &reduced.replays {
            phase.replays.entry(inv).or_insert_with(|| r.clone());
        }
        for (inv, why) in &reduced.unreduced {
            if !phase.replays.contains_key(inv) {
                phase
                    .unreduced
                    .entry(inv)
                    .or_insert_with(|| format!("{}: {why}", cell.label()));
            }
        }
    }
    Ok(DurabilityCell {
        label: cell.label(),
        promise: result.promise,
        judged: promised,
        fired: result.fired,
        lost: result.lost,
        broken: result.broken.clone(),
        verdict,
        rerun: replay,
        replays: reduced.replays,
        unreduced: reduced.unreduced,
    })
}

/// The `ackgap chaos` line that runs `cell` again on the wall clock.
fn rerun_line(
    config: &BatteryConfig,
    cfg: &ChaosConfig,
    cell: &MatrixCell,
    rerun: &Rerun,
) -> String {
    let bare = format!(
        "ackgap chaos --queue {} --seed {} --duration {}ms --jobs {} --faults {} --server {} --persistence {}{}",
        crate::explore::line::shell_word(&config.queue),
        cfg.seed,
        cfg.duration_ms,
        cfg.jobs,
        cell.fault,
        cell.topology,
        cell.persistence,
        if cell.durability.waits() {
            format!(" --durability {}", cell.durability)
        } else {
            String::new()
        }
    );
    format!("{}{bare}", rerun.env)
}

/// A judged cell's invariants added to `phase`; a break run again
/// [`RERUNS`] times on a fresh server and recorded as a finding.
async fn judge(
    (cfg, dir): (&ChaosConfig, &Path),
    cell: &MatrixCell,
    (replay, reports, (runs, verdict)): (&str, &[Report], (u64, Verdict)),
    (phase, findings): (&mut Phase, &mut Vec<Finding>),
) -> anyhow::Result<()> {
    phase.add(reports, true);
    phase.runs += runs;
    if verdict != Verdict::Valid {
        phase.failures.push(replay.to_owned());
    }
    // The cell broke: run again on a fresh server, same seed.
    let broken = broken_in(reports);
    if !broken.is_empty() {
        for _ in 0..RERUNS {
            let again = matrix::run(
                dir,
                cfg.clone(),
                1,
                std::slice::from_ref(cell),
                |_| true,
                |_, _| String::new(),
                |_, _, _, _| {},
            )
            .await?;
            let reports = again
                .cells
                .first()
                .map(|c| c.invariant_reports.clone())
                .unwrap_or_default();
            record_reruns(phase, &broken, &reports);
        }
    }
    for r in reports.iter().filter(|r| r.verdict == Verdict::Invalid) {
        add_finding(
            findings,
            &format!("durability {}", cell.label()),
            r,
            replay.to_owned(),
            Default::default(),
            &[],
        );
    }
    Ok(())
}
