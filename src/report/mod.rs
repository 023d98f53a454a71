//! The HTML report of a run, the timeline (as Jepsen's
//! `checker/timeline`), drawn from its history and the checkers' reports
//! alone. It sits above `check` and `history`, which it reads: the
//! checkers stay pure functions of a history that draw nothing (a house
//! rule, `check_holds_no_html` in `tests/integration/house.rs`). `ackgap
//! chaos` writes one beside each history (`--matrix`: one per run).
//!
//! One self-contained file (inline SVG and CSS, no script, nothing
//! fetched), in three parts:
//!
//! - the **overview** (`overview.rs`): the run at a glance over time — the
//!   backlog (pending and active jobs), the settles accepted per second,
//!   the faults shaded and labelled, a red tick per violation;
//! - the **lanes of the jobs that matter** (`lanes.rs`): a violation's job
//!   first, then every job a fault touched, or that was leased again,
//!   reaped, refused or never acknowledged. One lane per job, each lease a
//!   bar in its worker's colour from the grant to whatever ended it; a
//!   settle accepted after its lease had ended drawn apart, in the stale
//!   worker's colour; each violation ringed on its own events;
//! - the **other jobs' lanes** behind a `<details>` toggle, so that the
//!   thousands of jobs nothing happened to don't bury the few that matter.
//!
//! Red (`VIOLATION_RED`) is for violations, and pink shading for the
//! server down (paused or killed; replication faults are cyan: the primary
//! the clients reach stays up or is replaced; a clock jump is orange);
//! no worker is drawn in either (`worker_colour`). A fault is drawn as its
//! kind's row says (`crate::fault::Drawing`), in one colour
//! (`fault_fill`) in the overview and the lanes alike. Only an invalid invariant's violations are
//! listed under "Violations"; an unknown one's reasons are listed apart.
//! A lost job gone from the queue shows on its lane where it vanished.
//!
//! Every mark of a violation carries `data-violation`, `data-event` (the
//! history index it marks) and `data-role`: `stale-settle` (the accepted
//! settle of a lease that had ended), `lease-ended` (the event that ended
//! it), `current-lease` (the newer lease it should have lost to), or, for
//! other invariants, `violation` (the event that broke it) and `cited`.
//!
//! # Design notes
//!
//! The report is drawn by `report::render` from the history and the
//! reports alone. Each violation's labels are placed so that none covers
//! another. A lost job gone from the queue is drawn where it vanished: the
//! last event that showed it, the first that showed it gone, and the
//! faults between that may have lost it (the server down, the primary
//! replaced: `facts::Fault::suspect`).

use std::fmt::Write;

use crate::check::{Ops, Report};
use crate::fault::Drawing;
use crate::history::Event;

mod facts;
mod lanes;
mod overview;
#[cfg(test)]
mod rewording;

use facts::Facts;

/// Where the plot starts (labels to its left) and its width, in SVG units.
const LEFT: f64 = 110.0;
const WIDTH: f64 = 1400.0;
/// The colour of a violation, and of nothing else.
const VIOLATION_RED: &str = "#dc2626";

/// The fill of a fault drawn as a window, the same in the overview and
/// the lanes; `None` for a one-shot fault, drawn as a dashed line.
fn fault_fill(drawing: Drawing) -> Option<&'static str> {
    match drawing {
        Drawing::Down => Some("#fca5a5"),
        Drawing::Replication => Some("#a5f3fc"),
        Drawing::Clock => Some("#fed7aa"),
        Drawing::Partition => Some("#fde68a"),
        Drawing::Window => Some("#ddd6fe"),
        Drawing::Instant => None,
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The time axis shared by every plot of the report.
struct Scale {
    end_ms: u64,
}

impl Scale {
    fn new(end_ms: u64) -> Scale {
        Scale {
            end_ms: end_ms.max(1),
        }
    }

    fn x(&self, ms: u64) -> f64 {
        LEFT + ms as f64 / self.end_ms as f64 * WIDTH
    }

    /// Ticks in seconds along `y`, at most about fifteen.
    fn axis(&self, svg: &mut String, y: f64) {
        let steps = [
            100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 60_000, 120_000, 300_000,
            600_000,
        ];
        let step = steps
            .iter()
            .copied()
            .find(|s| self.end_ms / s <= 15)
            .unwrap_or(self.end_ms.div_ceil(15).max(1));
        let mut t = 0;
        while t <= self.end_ms {
            let x = self.x(t);
            let label = if step < 1_000 {
                format!("{:.1}s", t as f64 / 1000.0)
            } else {
                format!("{}s", t / 1000)
            };
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{y:.1}" y2="{:.1}" stroke="#374151"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="9" fill="#374151">{label}</text>"##,
                y + 4.0,
                y + 14.0
            );
            t += step;
        }
    }
}

/// The colour of worker `i` of `n`: hues spread by the golden angle over
/// 40°–320°, so that no worker is red (the violations' colour, and the
/// server-down shading's) and neighbours differ.
fn worker_colour(i: usize) -> String {
    let hue = 40.0 + (i as f64 * 0.618_034).fract() * 280.0;
    let lightness = if i.is_multiple_of(2) { 42 } else { 34 };
    format!("hsl({hue:.0},70%,{lightness}%)")
}

impl Facts {
    /// The colour of the worker a process is (`w3`, or its heartbeat
    /// `w3-hb1`).
    fn colour(&self, process: &str) -> String {
        let i = self
            .workers
            .iter()
            .position(|w| w == process)
            .or_else(|| {
                self.workers.iter().position(|w| {
                    process
                        .strip_prefix(w.as_str())
                        .is_some_and(|rest| rest.starts_with('-'))
                })
            })
            .unwrap_or(0);
        worker_colour(i)
    }
}

/// Renders the report of a run: `title` heads it, `events` is the history,
/// `invariants` the checkers' reports.
pub fn render(title: &str, events: &[Event], invariants: &[Report]) -> String {
    render_with(title, &[], events, invariants)
}

/// [`render`] with `lead`: lines under the title (the queue, the server,
/// the command that runs it again), each a paragraph.
pub fn render_with(
    title: &str,
    lead: &[String],
    events: &[Event],
    invariants: &[Report],
) -> String {
    // The op index the checkers judged from, built the same way.
    let ops = Ops::new(events);
    let facts = Facts::new(events, ops.all(), invariants);
    let scale = Scale::new(facts.end_ms);
    let overview = overview::render(&facts, ops.all(), &scale);
    // The jobs that matter: a violation's first, then the others in id
    // order.
    let mut main: Vec<&str> = facts.violation_jobs.iter().map(String::as_str).collect();
    main.extend(
        facts
            .involved
            .keys()
            .map(String::as_str)
            .filter(|j| !facts.violation_jobs.iter().any(|v| v == j)),
    );
    let rest: Vec<&str> = facts
        .jobs
        .iter()
        .map(String::as_str)
        .filter(|j| !facts.involved.contains_key(*j))
        .collect();
    let main_svg = lanes::render(&facts, &main, &scale, "lanes", true);
    let rest_svg = if rest.is_empty() {
        String::new()
    } else {
        lanes::render(&facts, &rest, &scale, "other-lanes", false)
    };
    page(
        (title, lead),
        &facts,
        invariants,
        &overview,
        (&main, &main_svg),
        (&rest, &rest_svg),
    )
}

/// The page around the plots: the verdict table, the violations, the
/// overview, the lanes, the legend.
fn page(
    (title, lead): (&str, &[String]),
    facts: &Facts,
    invariants: &[Report],
    overview: &str,
    (main, main_svg): (&[&str], &str),
    (rest, rest_svg): (&[&str], &str),
) -> String {
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
    let mut listed = String::new();
    for (i, l) in facts.listed.iter().enumerate() {
        let n = i + 1;
        let target = if facts
            .marks
            .iter()
            .any(|m| m.n == n && m.primary() && main.contains(&m.job.as_str()))
        {
            format!("#v{n}")
        } else if main.contains(&l.job.as_str()) {
            format!("#job-{}", esc(&l.job))
        } else {
            String::new()
        };
        let link = if target.is_empty() {
            String::new()
        } else {
            format!(r#" <a href="{target}">on the timeline</a>"#)
        };
        let _ = write!(
            listed,
            r#"<li id="violation-{n}"><b>{}</b>: {}{link}</li>"#,
            l.invariant,
            esc(&l.text)
        );
    }
    if listed.is_empty() {
        listed = "<li>none</li>".into();
    }
    // Unknowns apart: nothing was violated, something could not be judged.
    let unknowns = if facts.unknowns.is_empty() {
        String::new()
    } else {
        let items: String = facts
            .unknowns
            .iter()
            .map(|u| format!("<li><b>{}</b>: {}</li>", u.invariant, esc(&u.text)))
            .collect();
        format!(r#"<h2>Not judged (unknown)</h2><ul id="unknowns">{items}</ul>"#)
    };
    let legend: Vec<String> = facts
        .workers
        .iter()
        .map(|w| {
            format!(
                r#"<span class="worker" data-worker="{0}" style="color:{1}">■ {0}</span>"#,
                esc(w),
                facts.colour(w)
            )
        })
        .collect();
    let rest_part = if rest.is_empty() {
        String::new()
    } else {
        format!(
            r#"<details><summary>The other {} jobs (nothing happened to them: one lease, settled)</summary><div class="timeline">{rest_svg}</div></details>"#,
            rest.len()
        )
    };
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
table {{ border-collapse: collapse; }} td {{ padding: 2px 8px; border-bottom: 1px solid #ddd; }}
tr.invalid td {{ color: {VIOLATION_RED}; font-weight: bold; }} tr.unknown td {{ color: #92400e; }}
.timeline {{ overflow: auto; border: 1px solid #ccc; }}
summary {{ cursor: pointer; margin: 1em 0; }}
circle.violation {{ scroll-margin: 40vh; }} circle.violation:target {{ stroke-width: 4; }}
</style></head><body>
<h1>{title}</h1>
{lead}<table>{table}</table>
<h2>Violations</h2><ol id="violations">{listed}</ol>
{unknowns}
<h2>Overview</h2>
<p>Backlog: jobs pending (light blue) stacked on jobs active, leased to a worker (teal), as the replies told it. Below, settles accepted per second.
Shading: server paused or down (pink), replication faults: replicas lagging, a failover or takeover, a primary cut from its replicas (cyan), the server's clock jumped (orange), a worker partitioned (yellow), other faults with a duration (lilac); dashed lines: one-shot faults. Red ticks: violations (click to go to the ring).</p>
<div class="timeline">{overview}</div>
<h2>The jobs that matter ({n_main} of {n_all})</h2>
<p>The jobs a violation, or a fault, involves, or that were leased again, reaped, refused or never acknowledged (hover a job's name for why), a violation's first.
A bar per lease, coloured by worker ({legend}), from the grant to its settle, reap, newer lease or the worker's crash.
Green dot: settle accepted. Black cross: settle refused (fenced, missing, already settled). Hollow dot: outcome unknown.
A lost job gone from the queue: a dotted line from the last event that showed it there to a larger cross at the first that showed it gone, marked "vanished" (with the faults between that may have lost it, the server down or its primary replaced; hover for the events).
A diamond on the row below the bars, at the end of a dashed bar in a worker's colour: a settle that worker sent for a lease that had already ended, and that the queue ACCEPTED; the dashed bar runs from where the lease ended. "Stale": sent after the lease had ended; "late reply": sent before, answered after (the server may have applied it first).
Red rings, numbered as in the list above: solid on a violation's own event (the stale settle), dashed on the events it rests on (where its lease ended, the lease it should have lost to); a red line runs through every lane at the solid ring. Hover for details.</p>
<div class="timeline">{main_svg}</div>
{rest_part}
</body></html>
"#,
        title = esc(title),
        lead = lead
            .iter()
            .map(|l| format!("<p><code>{}</code></p>\n", esc(l)))
            .collect::<String>(),
        legend = legend.join(" "),
        n_main = main.len(),
        n_all = facts.jobs.len(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::check::check_all;
    use crate::fault::FaultKind;
    use crate::history::{Action, FaultEvent, Process, Recorder, F};

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

    /// A nemesis fault event of `fault` at the server, as the chaos runner
    /// records them.
    fn fault(rec: &Recorder, fault: FaultKind, action: Action) {
        let detail = json!({"duration_ms": 500});
        Process::new(rec, "nemesis").fault(Ok(FaultEvent::new(
            fault,
            action,
            Some("server"),
            detail,
        )));
    }

    /// JOB-1 enqueued and leased by w0; `faults` injected and healed;
    /// the final read holds `final_jobs`.
    fn lost_job(faults: &[FaultKind], final_jobs: serde_json::Value) -> String {
        let rec = Recorder::in_memory();
        let op = rec.push_invoke_with("p0", F::Enqueue, Some("JOB-1"), json!({"payload": "x"}));
        rec.ok(op, None, None, json!({"outcome": "enqueued"}));
        let op = rec.invoke("w0", F::Lease, None, None);
        rec.ok(op, Some("JOB-1"), Some(1), json!({"outcome": "leased"}));
        for &f in faults {
            fault(&rec, f, Action::Inject);
            fault(&rec, f, Action::Heal);
        }
        let op = rec.invoke("checker", F::Read, None, None);
        rec.ok(op, None, None, json!({"jobs": final_jobs, "problems": []}));
        let events = rec.events();
        render("t", &events, &check_all(&events))
    }

    /// The text between `from` and the next `to` in `html`.
    fn between<'a>(html: &'a str, from: &str, to: &str) -> &'a str {
        let start = html
            .find(from)
            .unwrap_or_else(|| panic!("no {from}: {html}"));
        let rest = &html[start..];
        &rest[..rest.find(to).unwrap_or(rest.len())]
    }

    #[test]
    fn a_lost_job_s_lane_shows_where_it_vanished_and_the_fault_between() {
        let html = lost_job(&[FaultKind::ServerKill], json!({}));
        let vanished = between(&html, r#"<g class="vanished" data-job="JOB-1""#, "</g>");
        // Last seen at its lease's reply (event 3), gone by the final read.
        assert!(vanished.contains(r#"data-seen="3""#), "{vanished}");
        assert!(vanished.contains("last seen at"), "{vanished}");
        assert!(vanished.contains("lease by w0 (leased)"), "{vanished}");
        assert!(vanished.contains("server-kill at"), "{vanished}");
        // A stranded job (still pending) did not vanish.
        let html = lost_job(&[FaultKind::ServerKill], json!({"JOB-1": "pending"}));
        assert!(!html.contains(r#"class="vanished""#));
    }

    #[test]
    fn an_unknown_invariant_s_reasons_are_listed_apart_not_under_violations() {
        // No final read: no-loss cannot be judged.
        let rec = Recorder::in_memory();
        let op = rec.push_invoke_with("p0", F::Enqueue, Some("JOB-1"), json!({"payload": "x"}));
        rec.ok(op, None, None, json!({"outcome": "enqueued"}));
        let events = rec.events();
        let reports = check_all(&events);
        assert!(reports
            .iter()
            .any(|r| r.verdict == crate::check::Verdict::Unknown && !r.violations.is_empty()));
        let html = render("t", &events, &reports);
        let violations = between(&html, r#"<ol id="violations">"#, "</ol>");
        assert_eq!(violations, r#"<ol id="violations"><li>none</li>"#);
        let unknowns = between(&html, r#"<ul id="unknowns">"#, "</ul>");
        assert!(unknowns.contains("no final read"), "{unknowns}");
    }

    #[test]
    fn a_lag_failover_is_shaded_as_a_replication_fault_not_as_the_server_down() {
        let html = lost_job(
            &[FaultKind::LagFailover, FaultKind::ServerKill],
            json!({"JOB-1": "done"}),
        );
        let lag = between(&html, r#"data-fault="lag-failover""#, ">");
        assert!(lag.contains("#a5f3fc") && !lag.contains("#fca5a5"), "{lag}");
        let kill = between(&html, r#"data-fault="server-kill""#, ">");
        assert!(kill.contains("#fca5a5"), "{kill}");
    }

    /// The fill of each shape drawn for `kind` (`data-fault="KIND"`), in
    /// the order of the page: the overview's, then the lanes'.
    fn fills(html: &str, kind: FaultKind) -> Vec<&str> {
        let attr = format!(r#"data-fault="{kind}""#);
        html.match_indices(&attr)
            .map(|(at, _)| {
                let tag = &html[at..at + html[at..].find('>').expect("a tag")];
                tag.split(r#"fill=""#)
                    .nth(1)
                    .map_or("none", |rest| &rest[..rest.find('"').expect("a quote")])
            })
            .collect()
    }

    #[test]
    fn a_clock_jump_is_drawn_as_a_clock_jump_not_the_server_down_and_is_no_suspect_of_a_lost_job() {
        let html = lost_job(&[FaultKind::ClockJump], json!({}));
        let fills = fills(&html, FaultKind::ClockJump);
        assert_eq!(fills.len(), 2, "the overview's and the lanes': {html}");
        assert!(fills.iter().all(|f| *f == "#fed7aa"), "{fills:?}");
        // JOB-1 vanished while the clock was off; the jump is not named as
        // what may have lost it (a kill is: see above).
        let vanished = between(&html, r#"<g class="vanished" data-job="JOB-1""#, "</g>");
        assert!(!vanished.contains("clock-jump"), "{vanished}");
        assert!(!vanished.contains("between them"), "{vanished}");
    }

    #[test]
    fn every_kind_is_drawn_in_the_same_colour_in_the_overview_and_the_lanes_as_its_row_says() {
        for kind in FaultKind::all() {
            let html = lost_job(&[kind], json!({}));
            let fills = fills(&html, kind);
            let want = fault_fill(kind.spec().drawing).unwrap_or("none");
            assert_eq!(fills, [want, want], "{kind}");
        }
    }

    #[test]
    fn an_empty_history_renders_an_empty_report() {
        let html = render("empty", &[], &[]);
        assert!(html.contains(r#"<svg id="overview""#));
        assert!(html.contains("The jobs that matter (0 of 0)"));
        assert!(!html.contains("<details>"));
    }

    #[test]
    fn no_worker_is_drawn_in_a_red_hue() {
        for i in 0..64 {
            let c = worker_colour(i);
            let hue: f64 = c[4..c.find(',').expect("hsl")].parse().expect("hue");
            assert!((40.0..=320.0).contains(&hue), "worker {i}: {c}");
        }
    }
}
