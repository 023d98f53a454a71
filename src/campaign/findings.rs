//! The findings report of `ackgap run --queue Q`: Markdown (for
//! `docs/findings/<queue>.md`, a README or an issue tracker) and HTML,
//! from a [`BatteryReport`]. A head (the command, ackgap's version, the
//! queue and its library, the date, the configuration), the verdict
//! table, then each broken invariant with its minimal counterexample, its
//! replay line, the events of the timeline that show it and the counts,
//! and for each invariant that held, how much was tried.

use std::fmt::Write;

use serde::Serialize;

use super::battery::{BatteryReport, Finding};
use crate::check::Verdict;

/// What the report's head says beyond the battery's own settings.
#[derive(Clone, Debug, Serialize)]
pub struct Head {
    /// The command as run.
    pub command: String,
    /// ackgap's version.
    pub version: String,
    /// The queue's library and version, for an adapter of the list
    /// (`adapters/NAME/adapter.toml`'s `library`).
    pub library: Option<String>,
    /// The date (UTC, `YYYY-MM-DD`).
    pub date: String,
    /// The server, described.
    pub server: String,
    /// What the queue's own documentation promises: each quote and its
    /// link (docs/findings/promises.toml).
    pub promises: Vec<(String, String)>,
    /// The adapter's directory under `adapters/`, for an adapter of the
    /// list: its README says how each operation maps to the library, every
    /// `unknown` answer, and how to reproduce a finding without ackgap.
    pub adapter: Option<String>,
}

/// The directory under `adapters/` of the adapter of the list whose
/// command is `spec`, read from `root`.
pub fn adapter_dir_of(root: &std::path::Path, spec: &str) -> Option<String> {
    adapter_of(root, spec).map(|(dir, _)| dir)
}

/// The quotes of `docs/findings/promises.toml` (read from `root`) for the
/// queue `spec`: a shipped queue by its name, an adapter of the list by
/// its directory's name. The file holds one table per queue with
/// `promise`, `promise_link` and optionally `promise2`, `promise2_link`,
/// each a one-line string without escapes.
pub fn promises_of(root: &std::path::Path, spec: &str) -> Vec<(String, String)> {
    let name = adapter_of(root, spec)
        .map(|(dir, _)| dir)
        .unwrap_or_else(|| spec.to_owned());
    let Ok(text) = std::fs::read_to_string(root.join("docs/findings/promises.toml")) else {
        return Vec::new();
    };
    let mut table = String::new();
    let mut fields = std::collections::BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = t.to_owned();
        } else if let Some((k, v)) = line.split_once(" = ") {
            if table == name {
                fields.insert(k.trim().to_owned(), v.trim().trim_matches('"').to_owned());
            }
        }
    }
    ["promise", "promise2"]
        .iter()
        .filter_map(|k| {
            let quote = fields.get(*k)?;
            let link = fields.get(&format!("{k}_link"))?;
            (quote != "no statement found").then(|| (quote.clone(), link.clone()))
        })
        .collect()
}

/// The adapter of the list whose `command` is `spec` (`exec:` stripped):
/// its directory's name and its `adapter.toml`'s text.
fn adapter_of(root: &std::path::Path, spec: &str) -> Option<(String, String)> {
    let command = spec.strip_prefix("exec:").unwrap_or(spec).trim();
    for entry in std::fs::read_dir(root.join("adapters")).ok()?.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("adapter.toml")) else {
            continue;
        };
        if toml_field(&text, "command").as_deref() == Some(command) {
            return Some((entry.file_name().to_string_lossy().into_owned(), text));
        }
    }
    None
}

/// A `key = "value"` line of an `adapter.toml`.
fn toml_field(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == name).then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// The `library` of the adapter in `adapters/*/adapter.toml` whose
/// `command` is `command` (`exec:` stripped), read from `root`.
pub fn library_of(root: &std::path::Path, command: &str) -> Option<String> {
    let (_, text) = adapter_of(root, command)?;
    toml_field(&text, "library")
}

/// The report as Markdown.
pub fn markdown(report: &BatteryReport, head: &Head) -> String {
    let mut md = String::new();
    let c = &report.config;
    let _ = writeln!(md, "# Findings: `{}`\n", c.queue);
    let _ = writeln!(md, "- command: `{}`", head.command);
    let _ = writeln!(md, "- ackgap: {}", head.version);
    let _ = writeln!(md, "- queue: `{}`", c.queue);
    if let Some(lib) = &head.library {
        let _ = writeln!(md, "- library: {lib}");
    }
    if let Some(dir) = &head.adapter {
        let _ = writeln!(
            md,
            "- adapter: [adapters/{dir}/README.md](../../adapters/{dir}/README.md) (the library's configuration, the call behind each operation, every answer `unknown` because the library does not say, and how to reproduce a finding with the library alone)"
        );
    }
    let _ = writeln!(md, "- date: {}", head.date);
    let _ = writeln!(md, "- server: {}", head.server);
    let _ = writeln!(
        md,
        "- configuration: budget {}, seed {}, persistence {}, {} walks of {} steps, exhaust {} jobs {} workers depth {}, chaos {} ms and {} jobs per fault group, consumer marker",
        c.budget, c.seed, c.persistence, c.walks, c.steps, c.exhaust.0, c.exhaust.1, c.exhaust.2, c.chaos_ms, c.chaos_jobs
    );
    let _ = writeln!(
        md,
        "- verdict: **{}** ({:.1} s)\n",
        report.verdict,
        report.elapsed_ms as f64 / 1000.0
    );
    if !head.promises.is_empty() {
        let _ = writeln!(md, "What the queue's own documentation promises:\n");
        for (quote, link) in &head.promises {
            let _ = writeln!(md, "> {quote}\n>\n> — [{link}]({link})\n");
        }
    }
    md.push_str(&table(report));
    for s in &report.skipped {
        let _ = writeln!(md, "\nNot run: {s}");
    }
    durability_md(&mut md, report);
    let _ = writeln!(md, "\n## Broken\n");
    if report.findings.is_empty() {
        let _ = writeln!(md, "Nothing broke.");
    }
    for f in &report.findings {
        finding_md(&mut md, report, f);
    }
    let _ = writeln!(md, "\n## Held\n");
    for inv in &report.invariants {
        if report.findings.iter().any(|f| f.invariant == *inv) {
            continue;
        }
        let tried: Vec<String> = report
            .phases
            .iter()
            .filter_map(|p| {
                let cell = p.cells.get(inv)?;
                let chances = match cell.exercised() {
                    Some(n) if n > 0 => format!(", exercised {n}"),
                    _ => String::new(),
                };
                (cell.runs > 0)
                    .then(|| format!("{} ({}: {}{chances})", p.name, cell.text(), runs(cell.runs)))
            })
            .collect();
        let _ = writeln!(md, "- **{inv}**: {}", tried.join("; "));
    }
    md
}

/// The durability matrix: one row per cell, its verdict, what it lost,
/// what Valkey documents for it, and the line that runs it again.
fn durability_md(md: &mut String, report: &BatteryReport) {
    if report.durability.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n## Durability matrix\n\nEach cell one chaos run of its fault alone on a fresh server. A cell is judged (its invariants make the `durability` column) where Valkey documents that acknowledged writes survive its fault; the others are reported: what they lose is what Valkey documents.\n"
    );
    let _ = writeln!(
        md,
        "| topology persistence durability fault | judged | fired | lost | broken | verdict | Valkey documents |\n|---|---|---|---|---|---|---|"
    );
    for c in &report.durability {
        let broken = if c.broken.is_empty() {
            "-".to_string()
        } else {
            c.broken.join(", ")
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {broken} | {} | {} |",
            c.label,
            if c.judged { "judged" } else { "reported" },
            c.fired,
            c.lost,
            c.verdict,
            c.promise
        );
    }
    let _ = writeln!(md, "\nReplay lines (pasteable):\n\n```");
    for c in &report.durability {
        let _ = writeln!(md, "# {}: {}\n{}", c.label, c.verdict, c.replay);
    }
    let _ = writeln!(md, "```");
}

/// What each invariant counts as a chance to break, for a table's legend
/// ([`crate::check::exercises`]).
pub(crate) fn chances(invariants: &[&'static str]) -> String {
    invariants
        .iter()
        .filter_map(|inv| Some(format!("{inv}, {}", crate::check::exercises(inv)?)))
        .collect::<Vec<_>>()
        .join("; ")
}

fn runs(n: u64) -> String {
    if n == 1 {
        "1 run".into()
    } else {
        format!("{n} runs")
    }
}

/// The verdict table: rows the invariants, columns the phases.
fn table(report: &BatteryReport) -> String {
    let mut md = String::from("| invariant |");
    for p in &report.phases {
        let _ = write!(md, " {} |", p.name);
    }
    md.push_str("\n|---|");
    md.push_str(&"---|".repeat(report.phases.len()));
    md.push('\n');
    for inv in &report.invariants {
        let _ = write!(md, "| {inv} |");
        for p in &report.phases {
            let cell = p.cells.get(inv).map_or("-".into(), |c| c.text_with_count());
            let _ = write!(md, " {cell} |");
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "\nBeside each verdict, how many times the runs gave the invariant a chance to break; `not exercised`: none did. The chances: {}.",
        chances(&report.invariants)
    );
    for p in &report.phases {
        let _ = writeln!(
            md,
            "\n{}: {}; {} runs, {} steps in {:.1} s.",
            p.name,
            p.what,
            p.runs,
            p.steps,
            p.elapsed_ms as f64 / 1000.0
        );
    }
    md
}

fn finding_md(md: &mut String, report: &BatteryReport, f: &Finding) {
    let _ = writeln!(md, "### {} (broken in {})\n", f.invariant, f.phase);
    let _ = writeln!(md, "Replay (pasteable):\n\n```\n{}\n```\n", f.replay);
    // A finding may name hundreds of jobs (a kill without persistence): the
    // first ten, and how many more.
    const SHOWN: usize = 10;
    for v in f.violations.iter().take(SHOWN) {
        let _ = writeln!(md, "- {v}");
        if !v.events.is_empty() {
            let _ = writeln!(md, "  ({})", v.cites());
        }
    }
    if f.violations.len() > SHOWN {
        let _ = writeln!(md, "- … and {} more", f.violations.len() - SHOWN);
    }
    let counts: Vec<String> = report
        .phases
        .iter()
        .filter_map(|p| {
            let cell = p.cells.get(f.invariant)?;
            let counts: Vec<String> = cell
                .counts
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            Some(format!(
                "{}: {} ({})",
                p.name,
                cell.text(),
                counts.join(" ")
            ))
        })
        .collect();
    let _ = writeln!(md, "\nCounts: {}\n", counts.join("; "));
    if !f.counterexample.is_empty() {
        let _ = writeln!(
            md,
            "Minimal counterexample:\n\n```\n{}\n```\n",
            f.counterexample.trim_end()
        );
    }
    if !f.excerpt.is_empty() {
        let _ = writeln!(md, "The timeline's events that show it:\n\n```");
        for e in &f.excerpt {
            let role = f
                .violations
                .iter()
                .flat_map(|v| &v.events)
                .find(|c| c.event == e.index)
                .map(|c| format!("   <- {}", c.role))
                .unwrap_or_default();
            let line = serde_json::to_string(e).unwrap_or_default();
            let _ = writeln!(md, "{line}{role}");
        }
        let _ = writeln!(md, "```\n");
    }
}

/// The report as one HTML page: the Markdown's content, escaped, in a
/// page of its own (no script, no external resource).
pub fn html(report: &BatteryReport, head: &Head) -> String {
    let md = markdown(report, head);
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let colour = match report.verdict {
        Verdict::Valid => "#2a7",
        Verdict::Unknown => "#c80",
        Verdict::Invalid => "#c22",
    };
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>ackgap findings: {}</title></head><body style=\"font-family:sans-serif;max-width:70em;margin:auto\"><h1 style=\"color:{colour}\">{}: {}</h1><pre style=\"white-space:pre-wrap\">{}</pre></body></html>\n",
        esc(&report.config.queue),
        esc(&report.config.queue),
        report.verdict,
        esc(&md)
    )
}
