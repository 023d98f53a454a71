//! `ackgap bench --html FILE`: the table as bars side by side, one chart
//! per unit (jobs/s, calls/s, ...), so that rows are compared only with
//! rows of the same unit. Each bar is a row's median; a line across it
//! spans the row's min to max over the rounds. The peers, the ceiling and
//! the reference queue have a colour each; a row with a broken round is
//! drawn as INVALID with no bar. One self-contained HTML file (inline SVG,
//! no script, no external resource).

use std::fmt::Write;

use super::{BenchReport, Row};

/// The colour of a row's group.
fn colour(group: &str) -> &'static str {
    match group {
        "ceiling" => "#9e9e9e",
        "peer" => "#f28e2b",
        "reference" => "#4e79a7",
        _ => "#76b7b2",
    }
}

/// `text` with `&`, `<`, `>` and `"` escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `1234567.8` as `1,234,568`.
fn thousands(v: f64) -> String {
    let digits = (v.round().max(0.0) as u64).to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A chart's geometry: the width of the labels' column,
const LABEL: f64 = 430.0;
/// the width of the longest bar,
const BAR: f64 = 460.0;
/// and the height of a row.
const LINE: f64 = 26.0;

/// One chart: the rows of one unit, a bar each, on a scale from 0 to the
/// largest max.
fn chart(out: &mut String, unit: &str, rows: &[&Row]) {
    let width = LABEL + BAR + 170.0;
    let height = LINE * rows.len() as f64 + 40.0;
    let top = rows
        .iter()
        .filter(|r| r.valid)
        .map(|r| r.max.max(r.median))
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let x = |v: f64| LABEL + BAR * v / top;
    let _ = writeln!(out, "<h2>{}</h2>", escape(unit));
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         role=\"img\" aria-label=\"{}\">",
        escape(unit)
    );
    for (i, row) in rows.iter().enumerate() {
        let y = 10.0 + LINE * i as f64;
        let mid = y + LINE / 2.0;
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>",
            LABEL - 8.0,
            mid,
            escape(&row.name)
        );
        if !row.valid {
            let _ = writeln!(
                out,
                "<text x=\"{LABEL:.1}\" y=\"{mid:.1}\" dominant-baseline=\"middle\" fill=\"#c00\">INVALID: an invariant broke, no figure</text>"
            );
            continue;
        }
        bar(out, unit, row, y, &x);
    }
    let _ = writeln!(out, "</svg>");
}

/// A valid row's bar at height `y`: its median, the min-max span over the
/// rounds with end ticks, and the figures after them; `x` is the chart's
/// scale.
fn bar(out: &mut String, unit: &str, row: &Row, y: f64, x: &dyn Fn(f64) -> f64) {
    let mid = y + LINE / 2.0;
    let _ = writeln!(
        out,
        "<rect x=\"{LABEL:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: median {} {}, min {}, max {}</title></rect>",
        y + 4.0,
        (x(row.median) - LABEL).max(0.5),
        LINE - 8.0,
        colour(row.group),
        escape(&row.name),
        thousands(row.median),
        escape(unit),
        thousands(row.min),
        thousands(row.max)
    );
    // The min-max span over the rounds, with end ticks.
    let (lo, hi) = (x(row.min), x(row.max));
    let _ = writeln!(
        out,
        "<path d=\"M{lo:.1} {mid:.1}H{hi:.1}M{lo:.1} {:.1}V{:.1}M{hi:.1} {:.1}V{:.1}\" stroke=\"#222\" stroke-width=\"1.5\"/>",
        mid - 5.0,
        mid + 5.0,
        mid - 5.0,
        mid + 5.0
    );
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{mid:.1}\" dominant-baseline=\"middle\">{} ({}–{})</text>",
        hi.max(x(row.median)) + 6.0,
        thousands(row.median),
        thousands(row.min),
        thousands(row.max)
    );
}

/// The report as one HTML page of bar charts.
pub fn html(report: &BenchReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ackgap bench</title>\n\
         <style>body{{font-family:sans-serif;margin:2em}}svg{{font-size:13px}}\
         .key span{{display:inline-block;width:12px;height:12px;margin:0 4px 0 14px}}</style></head><body>"
    );
    let _ = writeln!(out, "<h1>ackgap bench</h1>");
    let _ = writeln!(
        out,
        "<p>server {}<br>machine {}; {} jobs per round, {} rounds, --workers {}, --batch {}</p>",
        escape(&report.server),
        escape(&report.machine),
        report.jobs,
        report.rounds,
        report.workers,
        report.batch
    );
    let _ = writeln!(
        out,
        "<p class=\"key\">Bars: the median of the rounds; the line across a bar: min to max.\
         <span style=\"background:{}\"></span>ceiling<span style=\"background:{}\"></span>peers\
         <span style=\"background:{}\"></span>reference queue<span style=\"background:{}\"></span>harness</p>",
        colour("ceiling"),
        colour("peer"),
        colour("reference"),
        colour("harness")
    );
    let mut units: Vec<&str> = Vec::new();
    for row in &report.rows {
        if !units.contains(&row.unit) {
            units.push(row.unit);
        }
    }
    for unit in units {
        let rows: Vec<&Row> = report.rows.iter().filter(|r| r.unit == unit).collect();
        chart(&mut out, unit, &rows);
    }
    let _ = writeln!(
        out,
        "<p>{}</p>\n<p>rerun: <code>{}</code></p>\n</body></html>",
        if report.valid {
            "every round held its invariants"
        } else {
            "INVALID: an invariant broke; those rows report no figure"
        },
        escape(&report.reproduce)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, group: &'static str, unit: &'static str, rates: [f64; 3]) -> Row {
        Row {
            name: name.into(),
            group,
            unit,
            workers: 8,
            batch: 1,
            per_round: 100,
            rates: rates.to_vec(),
            median: rates[1],
            min: rates[0],
            max: rates[2],
            server_cpu_us_per_job: None,
            valid: true,
            problems: Vec::new(),
        }
    }

    #[test]
    fn every_row_is_a_bar_with_its_min_max_span_in_the_chart_of_its_unit() {
        let mut broken = row("reference: drain", "reference", "jobs/s", [1.0, 2.0, 3.0]);
        broken.valid = false;
        let report = BenchReport {
            server: "valkey <9.1>".into(),
            machine: "2 cores".into(),
            workers: 8,
            batch: 100,
            jobs: 100,
            rounds: 3,
            seed: 1,
            rows: vec![
                row(
                    "ceiling: EVALSHA INCR",
                    "ceiling",
                    "calls/s",
                    [90.0, 100.0, 120.0],
                ),
                row(
                    "lmove: drain",
                    "peer",
                    "jobs/s",
                    [1_000.0, 2_000.0, 2_500.0],
                ),
                row(
                    "reference: drain, batched",
                    "reference",
                    "jobs/s",
                    [9_000.0, 10_000.0, 12_345.0],
                ),
                broken,
            ],
            valid: false,
            reproduce: "ackgap bench --rounds 3".into(),
        };
        let page = html(&report);
        assert_eq!(page.matches("<svg").count(), 2, "one chart per unit");
        assert_eq!(page.matches("<rect").count(), 3, "a bar per valid row");
        assert!(
            page.contains("10,000 (9,000–12,345)"),
            "median and span shown"
        );
        assert!(page.contains("INVALID: an invariant broke, no figure"));
        assert!(page.contains("valkey &lt;9.1&gt;"), "text is escaped");
        // The largest max of a chart ends at the scale's end.
        assert!(page.contains("H890.0"), "{page}");
    }
}
