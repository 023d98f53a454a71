//! The overview plot: the run at a glance, over time. The backlog (jobs
//! pending and jobs active, stacked), the settles accepted per second, the
//! faults shaded and labelled (staggered, never on top of each other), and
//! a red tick at each violation, linked to its ring.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::facts::Facts;
use super::{esc, fault_fill, Scale, LEFT, WIDTH};
use crate::check::fenced_settlement::accepted;
use crate::check::Op;
use crate::history::{EventKind, F};

/// Columns of the plot: one sample per column.
const COLUMNS: usize = 280;
/// Height of the backlog panel and the settles panel.
const BACKLOG_H: f64 = 120.0;
const SETTLES_H: f64 = 60.0;
/// Rows of fault labels above the plot, and one row's height.
const LABEL_ROWS: usize = 6;
const LABEL_ROW_H: f64 = 11.0;
/// Rough width of one character of the labels (font-size 9).
const CHAR_W: f64 = 5.0;

/// The backlog and settle rate, one sample per column.
pub(super) struct Series {
    /// Jobs pending at the end of each column.
    pub pending: Vec<u64>,
    /// Jobs active (leased) at the end of each column.
    pub active: Vec<u64>,
    /// Settles accepted (complete, fail) within each column.
    pub settles: Vec<u64>,
    /// A column's length.
    pub column_ms: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Active,
    Other,
}

/// Replays the history's completions, in order, into each job's state on
/// the server as the replies told it: enqueued is pending, leased is
/// active, a requeue or a reap to pending is pending again, a complete or
/// a death ends it. A column holds the counts after its last completion.
pub(super) fn series<'a>(all: &[Op<'a>], end_ms: u64) -> Series {
    let column_ms = end_ms as f64 / COLUMNS as f64;
    let column = |ms: u64| ((ms as f64 / column_ms) as usize).min(COLUMNS - 1);
    let mut done: Vec<&Op<'a>> = all.iter().filter(|op| op.done.is_some()).collect();
    done.sort_by_key(|op| op.end());
    let mut state: BTreeMap<&'a str, State> = BTreeMap::new();
    let (mut pending, mut active) = (0i64, 0i64);
    let mut out = Series {
        pending: vec![0; COLUMNS],
        active: vec![0; COLUMNS],
        settles: vec![0; COLUMNS],
        column_ms,
    };
    let mut filled = 0;
    let mut set = |state: &mut BTreeMap<&'a str, State>, job: &'a str, to: State| {
        let from = state.insert(job, to);
        for (s, d) in [(from, -1), (Some(to), 1)] {
            match s {
                Some(State::Pending) => pending += d,
                Some(State::Active) => active += d,
                _ => {}
            }
        }
        (pending.max(0) as u64, active.max(0) as u64)
    };
    let (mut p, mut a) = (0, 0);
    for op in done {
        let at = op.done.expect("filtered").time_ms;
        let col = column(at);
        // Columns before this one end with the counts so far.
        while filled < col {
            out.pending[filled] = p;
            out.active[filled] = a;
            filled += 1;
        }
        let job = op.job();
        match (op.f(), op.outcome()) {
            (F::Enqueue, Some("enqueued")) => {
                if let Some(job) = job.filter(|j| !state.contains_key(j)) {
                    (p, a) = set(&mut state, job, State::Pending);
                }
            }
            (F::Lease, Some("leased")) => {
                if let Some(job) = job {
                    (p, a) = set(&mut state, job, State::Active);
                }
            }
            (F::Complete | F::Fail, outcome) if accepted(op) => {
                out.settles[col] += 1;
                if let Some(job) = job {
                    let to = if outcome == Some("requeued") {
                        State::Pending
                    } else {
                        State::Other
                    };
                    (p, a) = set(&mut state, job, to);
                }
            }
            (F::Reap, _) if op.done.is_some_and(|d| d.kind == EventKind::Ok) => {
                let reaped = op
                    .done
                    .and_then(|d| d.value.as_ref()?.get("reaped")?.as_array());
                for r in reaped.into_iter().flatten() {
                    let Some(id) = r.get("id").and_then(|v| v.as_str()) else {
                        continue;
                    };
                    let to = if r.get("to").and_then(|v| v.as_str()) == Some("pending") {
                        State::Pending
                    } else {
                        State::Other
                    };
                    (p, a) = set(&mut state, id, to);
                }
            }
            _ => {}
        }
        out.pending[col] = p;
        out.active[col] = a;
        filled = filled.max(col + 1);
    }
    while filled < COLUMNS {
        out.pending[filled] = p;
        out.active[filled] = a;
        filled += 1;
    }
    out
}

/// Where each fault's label goes: a row (the first one free at its x) and
/// the text, cut with an ellipsis when the next label in its row starts
/// before it ends (the whole text stays in its `<title>`).
pub(super) fn place_labels(xs: &[(f64, String)]) -> Vec<(usize, String)> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|a, b| xs[*a].0.total_cmp(&xs[*b].0));
    let mut row_end = [f64::NEG_INFINITY; LABEL_ROWS];
    // Per row, the labels in it (index into xs), in x order.
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); LABEL_ROWS];
    for i in order {
        let (x, text) = &xs[i];
        let row = (0..LABEL_ROWS)
            .find(|r| row_end[*r] + 4.0 <= *x)
            .unwrap_or_else(|| {
                (0..LABEL_ROWS)
                    .min_by(|a, b| row_end[*a].total_cmp(&row_end[*b]))
                    .expect("rows")
            });
        row_end[row] = x + text.chars().count() as f64 * CHAR_W;
        rows[row].push(i);
    }
    let mut out: Vec<(usize, String)> = xs.iter().map(|(_, t)| (0, t.clone())).collect();
    for (r, members) in rows.iter().enumerate() {
        for (k, i) in members.iter().enumerate() {
            let text = &xs[*i].1;
            let room = members
                .get(k + 1)
                .map(|next| ((xs[*next].0 - xs[*i].0 - 4.0) / CHAR_W).floor().max(1.0) as usize);
            let shown = match room {
                Some(room) if room < text.chars().count() => {
                    let cut: String = text.chars().take(room.saturating_sub(1)).collect();
                    format!("{cut}…")
                }
                _ => text.clone(),
            };
            out[*i] = (r, shown);
        }
    }
    out
}

/// The overview's SVG.
pub(super) fn render(facts: &Facts, all: &[Op<'_>], scale: &Scale) -> String {
    let s = series(all, facts.end_ms);
    let top = LABEL_ROWS as f64 * LABEL_ROW_H + 16.0;
    let backlog_y = top;
    let settles_y = backlog_y + BACKLOG_H + 14.0;
    let bottom = settles_y + SETTLES_H;
    let height = bottom + 22.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg id="overview" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {height}" width="100%" style="min-width:1000px" font-family="sans-serif" font-size="9">"#,
        LEFT + WIDTH + 40.0
    );
    let _ = write!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);

    // Faults first, under the curves: shading through both panels.
    let mut labels: Vec<(f64, String)> = Vec::new();
    for f in &facts.faults {
        let x0 = scale.x(f.from_ms);
        let title = format!(
            "{} {}–{} ms{}",
            f.label(),
            f.from_ms,
            f.to_ms,
            if f.hits.is_empty() {
                String::new()
            } else {
                format!(", hit {}", f.hits.join(", "))
            }
        );
        match fault_fill(f.drawing) {
            None => {
                let at = f.fired_ms.first().copied().unwrap_or(f.from_ms);
                let _ = write!(
                    svg,
                    r##"<line class="fault" data-fault="{2}" x1="{0:.1}" x2="{0:.1}" y1="{backlog_y}" y2="{bottom}" stroke="#7c3aed" stroke-width="0.7" stroke-dasharray="2,2"><title>{1}</title></line>"##,
                    scale.x(at),
                    esc(&title),
                    f.kind
                );
                labels.push((scale.x(at), f.label()));
            }
            Some(fill) => {
                let _ = write!(
                    svg,
                    r##"<rect class="fault" data-fault="{}" x="{x0:.1}" y="{backlog_y}" width="{:.1}" height="{:.1}" fill="{fill}" opacity="0.55"><title>{}</title></rect>"##,
                    f.kind,
                    (scale.x(f.to_ms) - x0).max(1.0),
                    bottom - backlog_y,
                    esc(&title)
                );
                labels.push((x0, f.label()));
            }
        }
    }
    for ((row, shown), (x, full)) in place_labels(&labels).into_iter().zip(&labels) {
        let y = 12.0 + row as f64 * LABEL_ROW_H;
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{backlog_y}" stroke="#a78bfa" stroke-width="0.4"/><text class="fault-label" x="{:.1}" y="{y:.1}" fill="#5b21b6"><title>{}</title>{}</text>"##,
            y + 2.0,
            x + 1.5,
            esc(full),
            esc(&shown)
        );
    }

    // The backlog: active at the bottom, pending stacked on it.
    let peak = (0..s.pending.len())
        .map(|i| s.pending[i] + s.active[i])
        .max()
        .unwrap_or(0)
        .max(1);
    let col_x = |i: usize| LEFT + i as f64 * WIDTH / s.pending.len() as f64;
    let by = |v: u64| backlog_y + BACKLOG_H - v as f64 / peak as f64 * BACKLOG_H;
    let area = |lower: &dyn Fn(usize) -> u64, upper: &dyn Fn(usize) -> u64| {
        let n = s.pending.len();
        let mut d = String::new();
        for i in 0..n {
            let _ = write!(
                d,
                "{}{:.1} {:.1} H{:.1} ",
                if i == 0 { "M" } else { "L" },
                col_x(i),
                by(upper(i)),
                col_x(i + 1)
            );
        }
        for i in (0..n).rev() {
            let _ = write!(
                d,
                "L{:.1} {:.1} H{:.1} ",
                col_x(i + 1),
                by(lower(i)),
                col_x(i)
            );
        }
        d.push('Z');
        d
    };
    let _ = write!(
        svg,
        r##"<path class="active" d="{}" fill="#0f766e" opacity="0.85"><title>active (leased) jobs</title></path><path class="pending" d="{}" fill="#93c5fd" opacity="0.9"><title>pending jobs</title></path>"##,
        area(&|_| 0, &|i| s.active[i]),
        area(&|i| s.active[i], &|i| s.active[i] + s.pending[i]),
    );
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" x2="{LEFT}" y1="{backlog_y}" y2="{0}" stroke="#374151"/><line x1="{LEFT}" x2="{1}" y1="{0}" y2="{0}" stroke="#374151"/><text x="{2}" y="{3:.1}" text-anchor="end">{peak}</text><text x="{2}" y="{0}" text-anchor="end">0</text><text x="4" y="{4:.1}" font-weight="bold">backlog</text><text x="4" y="{5:.1}" fill="#0f766e">■ active</text><text x="4" y="{6:.1}" fill="#3b82f6">■ pending</text>"##,
        backlog_y + BACKLOG_H,
        LEFT + WIDTH,
        LEFT - 4.0,
        backlog_y + 8.0,
        backlog_y + 30.0,
        backlog_y + 44.0,
        backlog_y + 56.0,
    );

    // Settles per second.
    let per_s: Vec<f64> = s
        .settles
        .iter()
        .map(|n| *n as f64 * 1000.0 / s.column_ms.max(1e-9))
        .collect();
    let rate_peak = per_s.iter().copied().fold(0.0, f64::max).max(1.0);
    for (i, r) in per_s.iter().enumerate().filter(|(_, r)| **r > 0.0) {
        let h = r / rate_peak * SETTLES_H;
        let _ = write!(
            svg,
            r##"<rect class="settles" x="{:.1}" y="{:.1}" width="{:.2}" height="{h:.1}" fill="#16a34a"><title>{:.0} settles/s at {:.0} ms</title></rect>"##,
            col_x(i),
            settles_y + SETTLES_H - h,
            WIDTH / s.settles.len() as f64,
            r,
            i as f64 * s.column_ms
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" x2="{LEFT}" y1="{settles_y}" y2="{bottom}" stroke="#374151"/><line x1="{LEFT}" x2="{0}" y1="{bottom}" y2="{bottom}" stroke="#374151"/><text x="{1}" y="{2:.1}" text-anchor="end">{rate_peak:.0}/s</text><text x="{1}" y="{bottom}" text-anchor="end">0</text><text x="4" y="{3:.1}" font-weight="bold">settles/s</text>"##,
        LEFT + WIDTH,
        LEFT - 4.0,
        settles_y + 8.0,
        settles_y + 30.0,
    );
    scale.axis(&mut svg, bottom);

    // A red tick per violation, above the backlog, linked to its ring.
    for m in facts.marks.iter().filter(|m| m.primary()) {
        let x = scale.x(m.at_ms);
        let _ = write!(
            svg,
            r##"<a href="#v{n}"><path class="violation-tick" data-violation="{n}" d="M{x:.1} {0:.1} l-4 -7 h8 z" fill="#dc2626"><title>{1}</title></path><line x1="{x:.1}" x2="{x:.1}" y1="{0:.1}" y2="{bottom}" stroke="#dc2626" stroke-width="0.8" opacity="0.6"/></a>"##,
            backlog_y,
            esc(&m.title),
            n = m.n
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_that_would_overlap_go_to_other_rows() {
        let xs = vec![
            (100.0, "server-pause".to_owned()),
            (102.0, "partition w3".to_owned()),
            (104.0, "stale-pause w1".to_owned()),
        ];
        let placed = place_labels(&xs);
        let rows: Vec<usize> = placed.iter().map(|(r, _)| *r).collect();
        assert_eq!(rows, vec![0, 1, 2]);
        assert!(placed.iter().zip(&xs).all(|((_, s), (_, t))| s == t));
    }

    #[test]
    fn labels_beyond_the_rows_are_cut_to_fit_before_the_next() {
        let xs: Vec<(f64, String)> = (0..LABEL_ROWS + 1)
            .map(|i| (100.0 + i as f64, "reset-connection w0".to_owned()))
            .collect();
        let placed = place_labels(&xs);
        // The sixth shares row 0 with the first, which is cut short.
        assert_eq!(placed[LABEL_ROWS].0, 0);
        assert!(placed[0].1.ends_with('…'), "{:?}", placed[0]);
        assert!(placed[0].1.chars().count() as f64 * CHAR_W <= 5.0 * CHAR_W);
    }
}
