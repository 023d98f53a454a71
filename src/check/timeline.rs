//! The timeline checker's view (as Jepsen's `checker/timeline`): the HTML
//! report of a run, built from its history alone. One self-contained file (inline SVG and
//! CSS, no script, nothing fetched) with a timeline built from the history
//! alone — one lane per job, each lease a bar coloured by its worker from
//! the grant to its settle, the reaper, a newer lease or the holder's crash;
//! accepted settles, refusals and unknown outcomes marked; fault windows
//! shaded — and the violations listed, each linked to its mark on the
//! timeline.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{ops, Op, Report};
use crate::history::{Event, EventKind, F};

const LANE: f64 = 9.0;
const LEFT: f64 = 110.0;
const WIDTH: f64 = 1400.0;
const TOP: f64 = 30.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct Bar {
    job: String,
    worker: String,
    token: u64,
    from_ms: u64,
    to_ms: Option<u64>,
    end: &'static str,
}

/// Where things go on the timeline: the run's length, the job lanes and
/// the workers (for colours).
struct Canvas {
    end_ms: u64,
    lanes: BTreeMap<String, usize>,
    workers: Vec<String>,
}

impl Canvas {
    /// Lanes: every job named by an enqueue, in id order; workers: every
    /// process that asked for a lease.
    fn new(events: &[Event], all: &[Op<'_>]) -> Canvas {
        let end_ms = events.iter().map(|e| e.time_ms).max().unwrap_or(0).max(1);
        let mut lanes: BTreeMap<String, usize> = BTreeMap::new();
        for op in all {
            if op.f() == F::Enqueue {
                if let Some(job) = op.job() {
                    lanes.entry(job.to_owned()).or_default();
                }
            }
        }
        for (i, lane) in lanes.values_mut().enumerate() {
            *lane = i;
        }
        let mut workers: Vec<String> = all
            .iter()
            .filter(|op| op.f() == F::Lease)
            .map(|op| op.invoke.process.clone())
            .collect();
        workers.sort();
        workers.dedup();
        Canvas {
            end_ms,
            lanes,
            workers,
        }
    }

    fn x(&self, ms: u64) -> f64 {
        LEFT + ms as f64 / self.end_ms as f64 * WIDTH
    }

    fn y(&self, job: &str) -> Option<f64> {
        self.lanes.get(job).map(|i| TOP + *i as f64 * LANE)
    }

    fn colour(&self, w: &str) -> String {
        let i = self.workers.iter().position(|x| x == w).unwrap_or(0);
        format!("hsl({},70%,50%)", i * 360 / self.workers.len().max(1))
    }
}

/// Renders the report of a run: `title` heads it, `events` is the history,
/// `invariants` the checkers' reports.
pub fn render(title: &str, events: &[Event], invariants: &[Report]) -> String {
    let all = ops(events);
    let c = Canvas::new(events, &all);
    let bars = bars(&all);
    let height = TOP + c.lanes.len() as f64 * LANE + 20.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        // Scaled to the page's width, so the whole run is in view without
        // scrolling sideways; never narrower than 1000 px.
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {height}" width="100%" style="min-width:1000px" font-family="sans-serif" font-size="8">"#,
        LEFT + WIDTH + 20.0
    );
    let _ = write!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    faults(&c, events, &mut svg);
    lanes_and_bars(&c, &bars, &mut svg);
    settles(&c, &all, &mut svg);
    let listed = violations(&c, events, invariants, &mut svg);
    svg.push_str("</svg>");
    page(title, &c, invariants, listed, &svg)
}

/// Lease bars: from the grant's completion to whatever ended it first.
fn bars(all: &[Op<'_>]) -> Vec<Bar> {
    let mut bars: Vec<Bar> = Vec::new();
    for op in all {
        if op.f() == F::Lease && op.outcome() == Some("leased") {
            if let (Some(job), Some(token), Some(done)) = (op.job(), op.token(), op.done) {
                bars.push(Bar {
                    job: job.to_owned(),
                    worker: op.invoke.process.clone(),
                    token,
                    from_ms: done.time_ms,
                    to_ms: None,
                    end: "still held at the end",
                });
            }
        }
    }
    for op in all {
        let Some(done) = op.done else { continue };
        let at = done.time_ms;
        let mut close = |pred: &dyn Fn(&Bar) -> bool, why: &'static str| {
            for bar in bars
                .iter_mut()
                .filter(|b| b.to_ms.is_none() && b.from_ms <= at)
            {
                if pred(bar) {
                    bar.to_ms = Some(at);
                    bar.end = why;
                }
            }
        };
        match op.f() {
            F::Complete | F::Fail if done.kind == EventKind::Ok => {
                let (job, token) = (op.job().unwrap_or_default(), op.token());
                close(&|b| b.job == job && Some(b.token) == token, "settled");
            }
            F::Crash => {
                let w = op.invoke.process.as_str();
                close(&|b| b.worker == w, "the worker crashed");
            }
            F::Lease if op.outcome() == Some("leased") => {
                let (job, token) = (op.job().unwrap_or_default(), op.token().unwrap_or(0));
                close(&|b| b.job == job && b.token < token, "a newer lease");
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
                close(&|b| reaped.contains(&b.job), "reaped");
            }
            _ => {}
        }
    }

    bars
}

/// Fault windows (server pause/kill, partitions) and instant faults.
fn faults(c: &Canvas, events: &[Event], svg: &mut String) {
    let mut open: BTreeMap<(String, String), u64> = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e.f == F::Fault && e.kind == EventKind::Ok)
    {
        let Some(v) = e.value.as_ref() else { continue };
        let fault = v["fault"].as_str().unwrap_or("?").to_owned();
        let target = v["target"].as_str().unwrap_or("").to_owned();
        match v["action"].as_str() {
            Some("inject")
                if matches!(fault.as_str(), "server-pause" | "server-kill" | "partition") =>
            {
                open.insert((fault, target), e.time_ms);
            }
            Some("heal") => {
                if let Some(from) = open.remove(&(fault.clone(), target.clone())) {
                    let fill = if fault == "partition" {
                        "#fde68a"
                    } else {
                        "#fca5a5"
                    };
                    let _ = write!(
                        svg,
                        r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="{fill}" opacity="0.45"><title>{} {} {}–{} ms</title></rect><text x="{:.1}" y="{:.1}" fill="#b91c1c">{}</text>"##,
                        c.x(from),
                        (c.x(e.time_ms) - c.x(from)).max(1.0),
                        c.lanes.len() as f64 * LANE,
                        esc(&fault),
                        esc(&target),
                        from,
                        e.time_ms,
                        c.x(from) + 1.0,
                        TOP - 12.0,
                        esc(&format!("{fault} {target}"))
                    );
                }
            }
            Some("fired")
                if !matches!(fault.as_str(), "server-pause" | "server-kill" | "partition") =>
            {
                let _ = write!(
                    svg,
                    r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2:.1}" stroke="#7c3aed" stroke-width="0.6" stroke-dasharray="2,2"><title>{3} {4} at {5} ms</title></line><text x="{0:.1}" y="{6:.1}" fill="#7c3aed" transform="rotate(-30 {0:.1} {6:.1})">{3}</text>"##,
                    c.x(e.time_ms),
                    TOP,
                    TOP + c.lanes.len() as f64 * LANE,
                    esc(&fault),
                    esc(&target),
                    e.time_ms,
                    TOP - 2.0
                );
            }
            _ => {}
        }
    }
}

/// Lanes, labels, bars.
fn lanes_and_bars(c: &Canvas, bars: &[Bar], svg: &mut String) {
    for (job, i) in &c.lanes {
        let ly = TOP + *i as f64 * LANE;
        let _ = write!(
            svg,
            r##"<g id="job-{0}"><text x="2" y="{1:.1}">{0}</text><line x1="{2}" x2="{3}" y1="{4:.1}" y2="{4:.1}" stroke="#e5e7eb"/></g>"##,
            esc(job),
            ly + LANE - 2.0,
            LEFT,
            LEFT + WIDTH,
            ly + LANE / 2.0
        );
    }
    for bar in bars {
        let Some(by) = c.y(&bar.job) else { continue };
        let to = bar.to_ms.unwrap_or(c.end_ms);
        let _ = write!(
            svg,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}" rx="1"><title>{} token {} by {}: {}–{} ms, {}</title></rect>"#,
            c.x(bar.from_ms),
            by + 1.5,
            (c.x(to) - c.x(bar.from_ms)).max(1.5),
            LANE - 3.0,
            c.colour(&bar.worker),
            esc(&bar.job),
            bar.token,
            esc(&bar.worker),
            bar.from_ms,
            to,
            bar.end
        );
    }
}

/// Settles: accepted (green), refused (red cross), unknown (grey).
fn settles(c: &Canvas, all: &[Op<'_>], svg: &mut String) {
    for op in all {
        if !matches!(op.f(), F::Complete | F::Fail) {
            continue;
        }
        let (Some(job), Some(done)) = (op.job(), op.done) else {
            continue;
        };
        let Some(sy) = c.y(job) else { continue };
        let cx = c.x(done.time_ms);
        let cy = sy + LANE / 2.0;
        let what = op.outcome().unwrap_or(match done.kind {
            EventKind::Info => "unknown",
            _ => "failed",
        });
        let title = format!(
            "{:?} {job} token {} by {}: {what} (event {})",
            op.f(),
            op.token().unwrap_or(0),
            op.invoke.process,
            done.index
        );
        let shape = match what {
            "settled" | "requeued" | "dead" => format!(
                r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="2.2" fill="#16a34a"><title>{}</title></circle>"##,
                esc(&title)
            ),
            "fenced" | "missing" | "already_settled" => format!(
                r##"<path d="M{:.1} {:.1} l4 4 m0 -4 l-4 4" stroke="#dc2626" stroke-width="1.4"><title>{}</title></path>"##,
                cx - 2.0,
                cy - 2.0,
                esc(&title)
            ),
            _ => format!(
                r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="2.2" fill="none" stroke="#6b7280"><title>{}</title></circle>"##,
                esc(&title)
            ),
        };
        svg.push_str(&shape);
    }
}

/// Violations: a ring on the lane at the event the violation names.
/// Answers the list of violations, each linked to its mark.
fn violations(c: &Canvas, events: &[Event], invariants: &[Report], svg: &mut String) -> String {
    let time_of: BTreeMap<u64, u64> = events.iter().map(|e| (e.index, e.time_ms)).collect();
    let mut listed = String::new();
    let mut n = 0;
    for r in invariants {
        for v in &r.violations {
            n += 1;
            let job = v.split(':').next().unwrap_or("").trim();
            let event = v
                .split("event ")
                .filter_map(|rest| {
                    rest.split(|c: char| !c.is_ascii_digit())
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .last();
            let at = event.and_then(|i| time_of.get(&i).copied());
            let target = match (c.y(job), at) {
                (Some(vy), Some(at)) => {
                    // The ring alone is lost among 200 lanes when the whole
                    // timeline is in view: a red line through every lane
                    // and the violation's number beside the ring find it.
                    let _ = write!(
                        svg,
                        r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="#dc2626" stroke-width="1" opacity="0.5"/><circle id="v{n}" class="violation" cx="{0:.1}" cy="{3:.1}" r="6" fill="none" stroke="#dc2626" stroke-width="2"><title>{4}</title></circle><text x="{5:.1}" y="{6:.1}" fill="#dc2626" font-size="11" font-weight="bold">{n}</text><a href="#v{n}"><text x="{7:.1}" y="10" fill="#dc2626" font-size="10" font-weight="bold">violation {n}</text></a>"##,
                        c.x(at),
                        TOP,
                        TOP + c.lanes.len() as f64 * LANE,
                        vy + LANE / 2.0,
                        esc(v),
                        c.x(at) + 8.0,
                        vy + LANE / 2.0 + 4.0,
                        c.x(at) + 2.0
                    );
                    format!("#v{n}")
                }
                (Some(_), None) => format!("#job-{}", esc(job)),
                _ => String::new(),
            };
            let link = if target.is_empty() {
                String::new()
            } else {
                format!(r#" <a href="{target}">on the timeline</a>"#)
            };
            let _ = write!(listed, "<li><b>{}</b>: {}{link}</li>", r.invariant, esc(v));
        }
    }
    listed
}

/// The page around the timeline: the verdict table, the violations, the
/// legend.
fn page(title: &str, c: &Canvas, invariants: &[Report], mut listed: String, svg: &str) -> String {
    let mut table = String::new();
    for r in invariants {
        let counts: Vec<String> = r.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = write!(
            table,
            r#"<tr class="{0}"><td>{1}</td><td>{0}</td><td>{2}</td></tr>"#,
            r.verdict,
            r.invariant,
            counts.join(" ")
        );
    }
    let legend: Vec<String> = c
        .workers
        .iter()
        .map(|w| format!(r#"<span style="color:{}">■ {}</span>"#, c.colour(w), esc(w)))
        .collect();
    if listed.is_empty() {
        listed = "<li>none</li>".into();
    }
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
table {{ border-collapse: collapse; }} td {{ padding: 2px 8px; border-bottom: 1px solid #ddd; }}
tr.invalid td {{ color: #b91c1c; font-weight: bold; }} tr.unknown td {{ color: #92400e; }}
.timeline {{ overflow: auto; border: 1px solid #ccc; }}
circle.violation {{ scroll-margin: 40vh; }} circle.violation:target {{ stroke-width: 4; }}
</style></head><body>
<h1>{title}</h1>
<table>{table}</table>
<h2>Violations</h2><ol>{listed}</ol>
<h2>Timeline</h2>
<p>One lane per job; a bar per lease, coloured by worker ({legend}), from the grant to its settle, reap, newer lease or the worker's crash.
Green dot: settle accepted. Red cross: refused (fenced, missing, already settled). Hollow dot: outcome unknown.
Red shading: server paused or down; yellow: a worker partitioned; dashed purple lines: one-shot faults. Red rings: violations, numbered as in the list above, each on a red line through every lane. Hover for details.</p>
<div class="timeline">{svg}</div>
</body></html>
"#,
        title = esc(title),
        legend = legend.join(" "),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::check::check_all;
    use crate::history::Recorder;

    #[test]
    fn a_violation_is_marked_on_its_job_lane_and_linked() {
        let rec = Recorder::in_memory();
        let op = rec.push_invoke_with("p0", F::Enqueue, Some("JOB-1"), json!({"payload": "x"}));
        rec.ok(op, None, None, json!({"outcome": "enqueued"}));
        let op = rec.invoke("w0", F::Lease, None, None);
        rec.ok(op, Some("JOB-1"), Some(1), json!({"outcome": "leased"}));
        let op = rec.invoke("reaper", F::Reap, None, None);
        rec.ok(
            op,
            None,
            None,
            json!({"outcome": "reaped", "reaped": [{"id": "JOB-1", "to": "pending"}]}),
        );
        let op = rec.invoke("w0", F::Complete, Some("JOB-1"), Some(1));
        rec.ok(op, None, None, json!({"outcome": "settled"}));
        let op = rec.invoke("checker", F::Read, None, None);
        rec.ok(
            op,
            None,
            None,
            json!({"jobs": {"JOB-1": "done"}, "problems": []}),
        );
        let events = rec.events();
        let html = render("t", &events, &check_all(&events));
        assert!(html.contains(r#"id="v1""#), "{html}");
        assert!(html.contains(r##"href="#v1""##));
        assert!(html.contains(r#"id="job-JOB-1""#));
        assert!(html.contains("reaped"));
    }
}
