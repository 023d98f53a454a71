//! Job lanes: one lane per job, each lease a bar in its worker's colour
//! from the grant to whatever ended it; settles marked on it; a settle
//! accepted after its lease had ended drawn on a row of its own below the
//! bars (a dashed "ghost" of the lease, in the stale worker's colour, from
//! where the lease ended to a diamond at the settle), so that it never
//! reads as a plain ack at the end of another worker's bar; and the rings
//! of each violation.

use std::fmt::Write;

use super::facts::Facts;
use super::{esc, fault_fill, Scale, LEFT, VIOLATION_RED, WIDTH};
use crate::history::F;

/// A lane's height: the bars in the upper row, stale settles in the lower.
const LANE: f64 = 15.0;
const BAR_Y: f64 = 2.0;
const BAR_H: f64 = 6.0;
const GHOST_Y: f64 = 10.0;
const GHOST_H: f64 = 3.5;
/// Room above the lanes for the violations' labels (two rows, so that two
/// violations at about the same time keep both labels).
const TOP: f64 = 26.0;

/// Renders the lanes of `jobs` (in this order) as one SVG; `id` names it;
/// `rings` draws the violations' marks (only the lanes that hold them).
pub(super) fn render(facts: &Facts, jobs: &[&str], scale: &Scale, id: &str, rings: bool) -> String {
    let lane_of = |job: &str| jobs.iter().position(|j| *j == job);
    let y_of = |job: &str| lane_of(job).map(|i| TOP + i as f64 * LANE);
    let bottom = TOP + jobs.len() as f64 * LANE;
    let height = bottom + 22.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg id="{id}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {height}" width="100%" style="min-width:1000px" font-family="sans-serif" font-size="8">"#,
        LEFT + WIDTH + 40.0
    );
    let _ = write!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);

    // Faults: shaded windows, dashed lines for one-shot faults (their
    // labels are in the overview; here, hover).
    for f in &facts.faults {
        let title = esc(&format!("{} {}–{} ms", f.label(), f.from_ms, f.to_ms));
        match fault_fill(f.drawing) {
            None => {
                let at = f.fired_ms.first().copied().unwrap_or(f.from_ms);
                let _ = write!(
                    svg,
                    r##"<line data-fault="{1}" x1="{0:.1}" x2="{0:.1}" y1="{TOP}" y2="{bottom:.1}" stroke="#7c3aed" stroke-width="0.6" stroke-dasharray="2,2"><title>{title}</title></line>"##,
                    scale.x(at),
                    f.kind
                );
            }
            Some(fill) => {
                let _ = write!(
                    svg,
                    r##"<rect data-fault="{}" x="{:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="{fill}" opacity="0.45"><title>{title}</title></rect>"##,
                    f.kind,
                    scale.x(f.from_ms),
                    (scale.x(f.to_ms) - scale.x(f.from_ms)).max(1.0),
                    bottom - TOP
                );
            }
        }
    }

    // Lanes and their labels (why the job is here, on hover).
    for (i, job) in jobs.iter().enumerate() {
        let ly = TOP + i as f64 * LANE;
        let why = facts
            .involved
            .get(*job)
            .map(|r| r.join("; "))
            .unwrap_or_else(|| "nothing happened to it".into());
        let _ = write!(
            svg,
            r##"<g id="job-{0}" class="lane" data-job="{0}"><text x="2" y="{1:.1}"><title>{2}</title>{0}</text><line x1="{LEFT}" x2="{3}" y1="{4:.1}" y2="{4:.1}" stroke="#e5e7eb"/></g>"##,
            esc(job),
            ly + BAR_Y + BAR_H,
            esc(&why),
            LEFT + WIDTH,
            ly + BAR_Y + BAR_H / 2.0
        );
    }

    // Lease bars.
    for bar in &facts.bars {
        let Some(ly) = y_of(&bar.job) else { continue };
        let to = bar.to_ms.unwrap_or(facts.end_ms);
        let _ = write!(
            svg,
            r#"<rect class="lease" data-worker="{}" data-event="{}" x="{:.1}" y="{:.1}" width="{:.1}" height="{BAR_H}" fill="{}" rx="1"><title>{} token {} by {}: {}–{} ms, granted at event {}, ended: {}</title></rect>"#,
            esc(&bar.worker),
            bar.grant_event,
            scale.x(bar.from_ms),
            ly + BAR_Y,
            (scale.x(to) - scale.x(bar.from_ms)).max(1.5),
            facts.colour(&bar.worker),
            esc(&bar.job),
            bar.token,
            esc(&bar.worker),
            bar.from_ms,
            to,
            bar.grant_event,
            bar.end
        );
    }

    // Settles.
    for s in &facts.settles {
        let Some(ly) = y_of(&s.job) else { continue };
        let cx = scale.x(s.at_ms);
        let cy = ly + BAR_Y + BAR_H / 2.0;
        let token = s.token.map_or("?".into(), |t| t.to_string());
        let title = format!(
            "{:?} {} token {token} by {}: {} (event {})",
            s.f, s.job, s.process, s.what, s.event
        );
        if let Some((ended_ms, why, ended_event)) = s.stale {
            // The stale worker's own row: its lease's ghost from where it
            // ended to the accepted settle, in its colour.
            let colour = facts.colour(&s.process);
            let gy = ly + GHOST_Y;
            let x0 = scale.x(ended_ms);
            // Sent after the end was known: stale (the checker's
            // violation); sent before: a late reply, which the server may
            // have applied before the lease ended.
            let late = s.invoked < ended_event;
            let title = format!(
                "{title}; ACCEPTED, but lease {token} had ended at event {ended_event} ({why}) at {ended_ms} ms{}",
                if late {
                    "; it was sent before that, so the server may have applied it first: not a violation"
                } else {
                    ""
                }
            );
            // Words for a settle (after the ring's number); a heartbeat's
            // stale extend is only drawn, to keep the lane readable.
            let words = if s.f == F::Extend {
                String::new()
            } else {
                format!(
                    r##"<text x="{:.1}" y="{:.1}" fill="#111827" font-size="7">{} {:?} by {}, token {token}, accepted{}</text>"##,
                    cx + 19.0,
                    gy + GHOST_H + 1.5,
                    if late { "late reply:" } else { "stale" },
                    s.f,
                    esc(&s.process),
                    if late {
                        " (sent before its lease ended)"
                    } else {
                        ""
                    }
                )
            };
            let _ = write!(
                svg,
                r##"<g class="{8}" data-event="{0}" data-worker="{1}"><rect x="{2:.1}" y="{gy:.1}" width="{3:.1}" height="{GHOST_H}" fill="{4}" fill-opacity="0.25" stroke="{4}" stroke-width="0.8" stroke-dasharray="2,1"/><path d="M{cx:.1} {5:.1} l3.5 3.5 l-3.5 3.5 l-3.5 -3.5 z" fill="{4}" stroke="#111827" stroke-width="0.8"/>{6}<title>{7}</title></g>"##,
                s.event,
                esc(&s.process),
                x0,
                (cx - x0).max(1.0),
                colour,
                gy + GHOST_H / 2.0 - 3.5,
                words,
                esc(&title),
                if late { "late-settle" } else { "stale-settle" },
            );
            continue;
        }
        let shape = match (s.accepted, s.what.as_str()) {
            (true, _) => format!(
                r##"<circle class="settle" data-event="{}" cx="{cx:.1}" cy="{cy:.1}" r="2.4" fill="#16a34a" stroke="white" stroke-width="0.7"><title>{}</title></circle>"##,
                s.event,
                esc(&title)
            ),
            (false, "fenced" | "missing" | "already_settled") => format!(
                r##"<path class="refused" data-event="{}" d="M{:.1} {:.1} l4 4 m0 -4 l-4 4" stroke="#111827" stroke-width="1.3"><title>{}</title></path>"##,
                s.event,
                cx - 2.0,
                cy - 2.0,
                esc(&title)
            ),
            _ => format!(
                r##"<circle class="unknown" data-event="{}" cx="{cx:.1}" cy="{cy:.1}" r="2.2" fill="white" stroke="#6b7280"><title>{}</title></circle>"##,
                s.event,
                esc(&title)
            ),
        };
        svg.push_str(&shape);
    }

    // Where a lost job vanished: a dotted line from the last event that
    // showed it in the queue to the first that showed it gone, a cross
    // there, and the words on hover (with the server faults between).
    for v in &facts.vanished {
        let Some(ly) = y_of(&v.job) else { continue };
        let cy = ly + BAR_Y + BAR_H / 2.0;
        let (x0, x1) = (scale.x(v.seen_ms), scale.x(v.gone_ms));
        let title = format!(
            "{} vanished: last seen at {} ms (event {}: {}), gone by {} ms (event {}: {}){}",
            v.job,
            v.seen_ms,
            v.seen_event,
            v.seen_what,
            v.gone_ms,
            v.gone_event,
            v.gone_what,
            if v.suspects.is_empty() {
                String::new()
            } else {
                format!("; between them: {}", v.suspects.join(", "))
            }
        );
        let _ = write!(
            svg,
            r##"<g class="vanished" data-job="{job}" data-seen="{se}" data-gone="{ge}"><line x1="{x0:.1}" x2="{x1:.1}" y1="{cy:.1}" y2="{cy:.1}" stroke="#111827" stroke-width="1" stroke-dasharray="1,2"/><path d="M{a:.1} {b:.1} l5 5 m0 -5 l-5 5" stroke="#111827" stroke-width="1.6"/><text x="{tx:.1}" y="{ty:.1}" fill="#111827" font-size="7">vanished{since}</text><title>{title}</title></g>"##,
            job = esc(&v.job),
            se = v.seen_event,
            ge = v.gone_event,
            a = x1 - 2.5,
            b = cy - 2.5,
            tx = x0 + 2.0,
            ty = ly + GHOST_Y + GHOST_H + 1.5,
            since = if v.suspects.is_empty() {
                String::new()
            } else {
                format!(" (during {})", esc(&v.suspects.join(", ")))
            },
            title = esc(&title),
        );
    }

    if rings {
        draw_rings(facts, scale, &y_of, bottom, &mut svg);
    }
    scale.axis(&mut svg, bottom);
    svg.push_str("</svg>");
    svg
}

/// The rings: solid on the violation's own event (with a red line through
/// every lane and its number), dashed on the events it cites.
fn draw_rings(
    facts: &Facts,
    scale: &Scale,
    y_of: &dyn Fn(&str) -> Option<f64>,
    bottom: f64,
    svg: &mut String,
) {
    let mut first = std::collections::BTreeSet::new();
    let labels = place_violation_labels(
        &facts
            .marks
            .iter()
            .filter(|m| m.primary() && y_of(&m.job).is_some())
            .map(|m| (scale.x(m.at_ms), m.n))
            .collect::<Vec<_>>(),
        LEFT + WIDTH + 40.0,
    );
    for l in &labels {
        let _ = write!(
            svg,
            r##"<a href="#v{first}"><text class="violation-label" x="{x:.1}" y="{y:.1}" fill="{VIOLATION_RED}" font-size="10" font-weight="bold">{text}</text></a>"##,
            first = l.numbers[0],
            x = l.x,
            y = 10.0 + l.row as f64 * 10.0,
            text = l.text(),
        );
    }
    for m in &facts.marks {
        let Some(ly) = y_of(&m.job) else { continue };
        let cx = scale.x(m.at_ms);
        // A stale settle sits on the lower row; everything else on the bar.
        let on_ghost = m.role == "stale-settle"
            && facts
                .settles
                .iter()
                .any(|s| s.event == m.event && s.stale.is_some());
        let cy = if on_ghost {
            ly + GHOST_Y + GHOST_H / 2.0
        } else {
            ly + BAR_Y + BAR_H / 2.0
        };
        let id = if m.primary() && first.insert(m.n) {
            format!(r#" id="v{}""#, m.n)
        } else {
            String::new()
        };
        if m.primary() {
            let _ = write!(
                svg,
                r##"<line x1="{cx:.1}" x2="{cx:.1}" y1="{TOP}" y2="{bottom:.1}" stroke="{VIOLATION_RED}" stroke-width="1" opacity="0.5"/><circle{id} class="violation" data-violation="{n}" data-event="{ev}" data-role="{role}" cx="{cx:.1}" cy="{cy:.1}" r="7" fill="none" stroke="{VIOLATION_RED}" stroke-width="2.2"><title>{title}</title></circle><text x="{tx:.1}" y="{ty:.1}" fill="{VIOLATION_RED}" font-size="11" font-weight="bold">{n}</text>"##,
                n = m.n,
                ev = m.event,
                role = m.role,
                title = esc(&m.title),
                tx = cx + 9.0,
                ty = cy + 4.0,
            );
        } else {
            let _ = write!(
                svg,
                r##"<circle class="violation-cited" data-violation="{n}" data-event="{ev}" data-role="{role}" cx="{cx:.1}" cy="{cy:.1}" r="6" fill="none" stroke="{VIOLATION_RED}" stroke-width="1.4" stroke-dasharray="2.5,1.5"><title>{title}</title></circle>"##,
                n = m.n,
                ev = m.event,
                role = m.role,
                title = esc(&m.title),
            );
        }
    }
}

/// Rough width of one character of a violation's label (font-size 10,
/// bold), in SVG units.
const LABEL_CHAR_W: f64 = 6.5;

/// One label above the lanes: the violations it names (numbers, in
/// order), where it starts and its row.
#[derive(Debug, PartialEq)]
pub(super) struct Label {
    pub x: f64,
    pub row: usize,
    pub numbers: Vec<usize>,
}

impl Label {
    /// `violation 3`, `violations 3, 5`, `violations 3–20` (a run of
    /// consecutive numbers), `violations 3 … 40 (12)`.
    pub fn text(&self) -> String {
        let mut n = self.numbers.clone();
        n.sort_unstable();
        match n.as_slice() {
            [one] => format!("violation {one}"),
            [first, .., last] if n.windows(2).all(|w| w[1] == w[0] + 1) => {
                format!("violations {first}–{last}")
            }
            [a, b] => format!("violations {a}, {b}"),
            [a, b, c] => format!("violations {a}, {b}, {c}"),
            [a, .., last] => format!("violations {a} … {last} ({})", n.len()),
            [] => String::new(),
        }
    }

    fn end(&self) -> f64 {
        self.x + self.text().chars().count() as f64 * LABEL_CHAR_W
    }
}

/// The widest a label gets: `violations 1000 … 9999 (9000)`.
const LABEL_W_MAX: f64 = 28.0 * LABEL_CHAR_W;

/// Places the violations' labels (`(x, number)` of each violation's own
/// ring) in the two rows above the lanes, never one over another and
/// never past `limit` (the drawing's right edge: a label near it starts
/// further left): a label goes in the first row free where it starts;
/// when neither is, its number joins the label last placed (which then
/// names a few).
pub(super) fn place_violation_labels(marks: &[(f64, usize)], limit: f64) -> Vec<Label> {
    let mut marks = marks.to_vec();
    marks.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    marks.dedup_by_key(|m| m.1);
    let mut labels: Vec<Label> = Vec::new();
    let mut row_end = [f64::NEG_INFINITY; 2];
    for (x, n) in marks {
        let x = (x + 2.0).min(limit - LABEL_W_MAX);
        let alone = Label {
            x,
            row: 0,
            numbers: vec![n],
        };
        match (0..2).find(|r| row_end[*r] + 4.0 <= x) {
            Some(row) => {
                let label = Label { row, ..alone };
                row_end[row] = label.end();
                labels.push(label);
            }
            None => {
                let last = labels.last_mut().expect("a row is taken only by a label");
                last.numbers.push(n);
                row_end[last.row] = last.end();
            }
        }
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The labels' boxes (start, end, row) overlap nowhere.
    fn no_overlap(labels: &[Label]) {
        for (i, a) in labels.iter().enumerate() {
            for b in &labels[i + 1..] {
                assert!(
                    a.row != b.row || a.end() <= b.x || b.end() <= a.x,
                    "{a:?} ({}) over {b:?} ({})",
                    a.text(),
                    b.text()
                );
            }
        }
    }

    #[test]
    fn violation_labels_at_one_moment_share_one_label_and_never_overlap() {
        // Twenty lost jobs, each ringed on the one final read.
        let marks: Vec<(f64, usize)> = (1..=20).map(|n| (800.0, n)).collect();
        let labels = place_violation_labels(&marks, 1_550.0);
        no_overlap(&labels);
        let texts: Vec<String> = labels.iter().map(Label::text).collect();
        assert_eq!(texts, ["violation 1", "violations 2–20"]);
        // Spread a little: still none over another, every number named.
        let marks: Vec<(f64, usize)> = (1..=30).map(|n| (100.0 + n as f64 * 9.0, n)).collect();
        let labels = place_violation_labels(&marks, 1_550.0);
        no_overlap(&labels);
        let mut named: Vec<usize> = labels.iter().flat_map(|l| l.numbers.clone()).collect();
        named.sort();
        assert_eq!(named, (1..=30).collect::<Vec<_>>());
        assert_eq!(
            Label {
                x: 0.0,
                row: 0,
                numbers: vec![40, 3, 7, 5]
            }
            .text(),
            "violations 3 … 40 (4)"
        );
        // At the right edge (the final read that lost them all): within it.
        let marks: Vec<(f64, usize)> = (1..=2_000).map(|n| (1_510.0, n)).collect();
        let labels = place_violation_labels(&marks, 1_550.0);
        no_overlap(&labels);
        assert!(labels.iter().all(|l| l.end() <= 1_550.0), "{labels:?}");
    }
}
