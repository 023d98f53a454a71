//! The findings report of `ackgap run --queue Q`: Markdown (for
//! `docs/findings/<queue>.md`, a README or an issue tracker) and HTML,
//! from a [`BatteryReport`]. A head (the command, ackgap's version, the
//! queue and its library, the date, the configuration), the verdict
//! table, then each broken invariant with its minimal counterexample, its
//! replay line, the events of the timeline that show it and the counts,
//! and for each invariant that held, how much was tried.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use super::battery::{BatteryReport, Finding};
use super::Phase;
use crate::adapter::listing::AdapterToml;
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
    /// The working directory (where `adapters/` and `docs/` are) as a link
    /// from the page's folder: `../../` for `docs/findings/NAME.md`.
    pub to_root: String,
    /// Whether the documentation promised each broken invariant
    /// ([`claims_of`]), by invariant.
    pub claims: BTreeMap<String, Claim>,
    /// The hand-written pages beside the queue's findings, relative to
    /// the working directory ([`repro_of`]): its reproductions with the
    /// library alone and the drafts of its upstream reports.
    pub repro: Vec<String>,
}

/// The hand-written pages of `docs/findings/repro/` (read from `root`)
/// for the queue `spec`: `NAME.md` (the reproductions with the library
/// alone) and `NAME-upstream-report.md` (drafts of the reports to file),
/// those that exist, relative to `root`.
pub fn repro_of(root: &std::path::Path, spec: &str) -> Vec<String> {
    let name = page_name(root, spec);
    [format!("{name}.md"), format!("{name}-upstream-report.md")]
        .into_iter()
        .map(|f| format!("docs/findings/repro/{f}"))
        .filter(|p| root.join(p).is_file())
        .collect()
}

/// The folder the command runs in (`cwd`) as a relative link from the
/// folder of the page at `page` (relative to `cwd`, or absolute under
/// it): `../../` for `docs/findings/x.md`, `../../../` for
/// `target/ackgap/findings/x.md`; a page outside `cwd` gets `cwd` itself,
/// absolute.
pub fn link_to_root(cwd: &std::path::Path, page: &std::path::Path) -> String {
    use std::path::Component;
    let folder = page.parent().unwrap_or(std::path::Path::new(""));
    let folder = if folder.is_absolute() {
        match folder.strip_prefix(cwd) {
            Ok(inside) => inside,
            Err(_) => return format!("{}/", cwd.display()),
        }
    } else {
        folder
    };
    let mut depth = 0;
    for part in folder.components() {
        match part {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            // `..` or a prefix: no short relative link; the absolute one.
            _ => return format!("{}/", cwd.display()),
        }
    }
    "../".repeat(depth)
}

/// The directory under `adapters/` of the adapter of the list whose
/// command is `spec`, read from `root`.
pub fn adapter_dir_of(root: &std::path::Path, spec: &str) -> Option<String> {
    AdapterToml::of_command(root, spec).map(|a| a.dir)
}

/// The page name of the queue `spec` in `docs/findings/`: an adapter of
/// the list by its directory's name, a shipped queue by its own.
fn page_name(root: &std::path::Path, spec: &str) -> String {
    AdapterToml::of_command(root, spec)
        .map(|a| a.dir)
        .unwrap_or_else(|| spec.to_owned())
}

/// `docs/findings/FILE` (read from `root`) as TOML; an absent file is
/// empty, a malformed one is said on stderr and empty (the page then
/// shows its findings unclassified, which `ci/findings` refuses).
fn findings_toml(root: &std::path::Path, file: &str) -> toml::Table {
    let path = root.join("docs/findings").join(file);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return toml::Table::new();
    };
    text.parse::<toml::Table>().unwrap_or_else(|e| {
        eprintln!("ackgap: {} is not valid TOML: {e}", path.display());
        toml::Table::new()
    })
}

/// The quotes of `docs/findings/promises.toml` (read from `root`) for the
/// queue `spec` (by its page's name: an adapter of the list by its
/// directory's, a shipped queue by its own). The file holds one table per queue with
/// `promise`, `promise_link` and optionally `promise2`, `promise2_link`.
pub fn promises_of(root: &std::path::Path, spec: &str) -> Vec<(String, String)> {
    let file = findings_toml(root, "promises.toml");
    let Some(fields) = file.get(&page_name(root, spec)).and_then(|t| t.as_table()) else {
        return Vec::new();
    };
    ["promise", "promise2"]
        .iter()
        .filter_map(|k| {
            let quote = fields.get(*k)?.as_str()?;
            let link = fields.get(&format!("{k}_link"))?.as_str()?;
            (quote != "no statement found").then(|| (quote.to_owned(), link.to_owned()))
        })
        .collect()
}

/// Whether the queue's documentation promised an invariant it broke
/// (`docs/findings/invariants.toml`, one table `[QUEUE.INVARIANT]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, Serialize)]
pub struct Claim {
    /// `promised` (the documentation promises or implies it) or
    /// `by-design` (it does not, or says otherwise).
    pub class: String,
    /// What happened, in the library's terms: which call accepted what.
    pub what: String,
    /// The documentation's words, verbatim.
    #[serde(default)]
    pub quote: Option<String>,
    /// Where they are.
    #[serde(default)]
    pub link: Option<String>,
    /// For `by-design`: what the documentation says instead.
    #[serde(default)]
    pub why: Option<String>,
}

impl Claim {
    /// True when the documentation promised it: a broken promise, not a
    /// design the page lists apart.
    pub fn promised(&self) -> bool {
        self.class == "promised"
    }
}

/// Each broken invariant's [`Claim`] for the queue `spec`, by invariant,
/// from `docs/findings/invariants.toml` read from `root`.
pub fn claims_of(root: &std::path::Path, spec: &str) -> BTreeMap<String, Claim> {
    let file = findings_toml(root, "invariants.toml");
    let Some(queue) = file.get(&page_name(root, spec)).and_then(|t| t.as_table()) else {
        return BTreeMap::new();
    };
    queue
        .iter()
        .filter_map(|(invariant, table)| {
            match table.clone().try_into::<Claim>() {
                Ok(claim) if claim.class == "promised" || claim.class == "by-design" => {
                    Some((invariant.clone(), claim))
                }
                Ok(claim) => {
                    eprintln!(
                        "ackgap: docs/findings/invariants.toml [{}.{invariant}]: class {:?}: expected promised or by-design",
                        page_name(root, spec),
                        claim.class
                    );
                    None
                }
                Err(e) => {
                    eprintln!(
                        "ackgap: docs/findings/invariants.toml [{}.{invariant}]: {e}",
                        page_name(root, spec)
                    );
                    None
                }
            }
        })
        .collect()
}

/// The `library` of the adapter in `adapters/*/adapter.toml` whose
/// `command` is `command` (`exec:` stripped), read from `root`.
pub fn library_of(root: &std::path::Path, command: &str) -> Option<String> {
    AdapterToml::of_command(root, command)?.library
}

/// The head's library lines: the adapter's library, and the user's app
/// (`--app`) with its versions, the settings kept and those overridden.
fn library_md(md: &mut String, report: &BatteryReport, head: &Head) {
    if let Some(lib) = &head.library {
        let _ = writeln!(md, "- library: {lib}");
    }
    for line in report.app.iter().flat_map(crate::adapter::App::lines) {
        let _ = writeln!(md, "- {line}");
    }
}

/// The report as Markdown.
pub fn markdown(report: &BatteryReport, head: &Head) -> String {
    let mut md = String::new();
    let c = &report.config;
    let _ = writeln!(md, "# Findings: `{}`\n", c.queue);
    let _ = writeln!(md, "- command: `{}`", head.command);
    let _ = writeln!(md, "- ackgap: {}", head.version);
    let _ = writeln!(md, "- queue: `{}`", c.queue);
    library_md(&mut md, report, head);
    if let Some(dir) = &head.adapter {
        let _ = writeln!(
            md,
            "- adapter: [adapters/{dir}/README.md]({}adapters/{dir}/README.md) (the library's configuration, the call behind each operation, every answer `unknown` because the library does not say, and how to reproduce a finding with the library alone)",
            head.to_root
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
    summary_md(&mut md, report, head);
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
    for (i, f) in report.findings.iter().enumerate() {
        // One run that broke several invariants is shown once.
        let same = report.findings[..i]
            .iter()
            .find(|e| !f.counterexample.is_empty() && e.counterexample == f.counterexample);
        finding_md(&mut md, report, f, same.map(|e| e.invariant));
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
    durability_replays_md(md, report);
    let _ = writeln!(md, "\nRerun lines (pasteable; each cell one wall-clock run: a rerun may not break the same way):\n\n```");
    for c in &report.durability {
        let _ = writeln!(md, "# {}: {}\n{}", c.label, c.verdict, c.rerun);
    }
    let _ = writeln!(md, "```");
}

/// The durability cells' breaks read off their histories: each exact
/// replay (a judged cell's every broken invariant, a reported cell's
/// no-loss), then each that none replayed, with why.
fn durability_replays_md(md: &mut String, report: &BatteryReport) {
    let replays: Vec<String> = report
        .durability
        .iter()
        .flat_map(|c| {
            c.replays.iter().map(move |(inv, r)| {
                let without = match fault_step(&r.line) {
                    true => "",
                    false => " (no kill, power loss or lost reply in it: the queue breaks it without the cell's fault)",
                };
                format!("# {}: {inv}: {}{without}\n{}", c.label, r.describe(), r.line)
            })
        })
        .collect();
    if !replays.is_empty() {
        let _ = writeln!(
            md,
            "\nExact replays read off the cells' histories (on logical time; the kill or power loss a step; pasteable):\n\n```\n{}\n```",
            replays.join("\n")
        );
    }
    for c in &report.durability {
        for (inv, why) in &c.unreduced {
            let _ = writeln!(
                md,
                "\nNot replayed exactly ({}, {inv}): {}",
                c.label,
                cut(why, 600)
            );
        }
    }
}

/// True when the replay `line` (`ackgap replay Q/C/CONFIG/STEPS …`) has
/// a step a server fault makes: a kill (`K`), a power loss (`P`), a
/// reply lost (`u0`, `d0`).
fn fault_step(line: &str) -> bool {
    let steps = line
        .split_whitespace()
        .find(|w| w.matches('/').count() >= 3)
        .and_then(|w| w.trim_matches('\'').rsplit('/').next())
        .unwrap_or("");
    steps.split(['.', '+']).any(|step| {
        matches!(step, "K" | "P")
            || (step.len() > 1
                && (step.starts_with('u') || step.starts_with('d'))
                && step[1..].bytes().all(|b| b.is_ascii_digit()))
    })
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

/// Whether a column's verdicts are exact (an explorer on logical time:
/// every run replays to the same history) or one wall-clock sample (a
/// chaos run, or an explorer on a queue that keeps real time: a second
/// run may differ): [`Phase::exact`].
pub fn exactness(phase: &Phase) -> &'static str {
    if phase.exact {
        "exact"
    } else {
        "sampled"
    }
}

/// The heading of the summary's findings no `docs/findings/invariants.toml`
/// entry classifies: `ci/findings` refuses a page that has one.
pub const UNCLASSIFIED: &str = "### Not classified";

/// The heading of the summary's findings that broke in one wall-clock run
/// and in none of its reruns ([`super::table::Cell::seen_once`]): listed
/// apart, never among the findings, and not classified.
pub const SEEN_ONCE: &str = "### Seen once, not reproduced";

/// True when every column in which `invariant` broke is a wall-clock
/// sample that broke once and not again when rerun: nothing showed it a
/// second time.
fn seen_once(report: &BatteryReport, invariant: &str) -> bool {
    let broken: Vec<&super::table::Cell> = report
        .phases
        .iter()
        .filter_map(|p| p.cells.get(invariant))
        .filter(|c| c.verdict == Verdict::Invalid)
        .collect();
    !broken.is_empty() && broken.iter().all(|c| c.seen_once())
}

/// The summary a maintainer reads first: per broken invariant, what
/// happened in the library's terms, whether its documentation promised it
/// (quoted) or it is by design (listed apart), the checker's words, where
/// it broke (each column exact or sampled) and the line that shows it.
fn summary_md(md: &mut String, report: &BatteryReport, head: &Head) {
    let _ = writeln!(md, "## Summary\n");
    if report.findings.is_empty() {
        let _ = writeln!(
            md,
            "Nothing broke: every invariant judged held in every column (the table says which were exercised, and how often).\n"
        );
        return;
    }
    let claim = |f: &Finding| head.claims.get(f.invariant);
    // Each finding's group: a broken promise, by design, seen once (no
    // rerun broke it again: not attributed), or unclassified.
    let group = |f: &Finding| match claim(f) {
        _ if seen_once(report, f.invariant) => 2,
        Some(c) if c.promised() => 0,
        Some(_) => 1,
        None => 3,
    };
    let seen_once_heading = format!(
        "{SEEN_ONCE}\n\nBroken in one wall-clock run and in none of its {} reruns with the same seed: the checker's verdict on that run's history stands, but no rerun showed it again, so its cause is not traced. Not a finding to report until a run shows it again.",
        super::battery::RERUNS
    );
    let headings = [
        "### Broken promises\n\nThe queue's documentation promises what broke:",
        "### By design\n\nThe documentation does not promise it (or says otherwise): what a user should know, not a bug to report.",
        seen_once_heading.as_str(),
        "### Not classified\n\nNo entry in docs/findings/invariants.toml says whether the documentation promises it.",
    ];
    for (g, heading) in headings.iter().enumerate() {
        let members: Vec<&Finding> = report.findings.iter().filter(|f| group(f) == g).collect();
        if members.is_empty() {
            continue;
        }
        let _ = writeln!(md, "{heading}\n");
        for f in members {
            let claim = if g == 2 { None } else { claim(f) };
            finding_summary(md, report, f, claim);
        }
    }
    if !head.repro.is_empty() {
        let links: Vec<String> = head
            .repro
            .iter()
            .map(|p| {
                let name = p.rsplit('/').next().unwrap_or(p);
                let what = if name.ends_with("-upstream-report.md") {
                    "drafts of the upstream reports"
                } else {
                    "the findings reproduced with the library alone"
                };
                format!("{what}: [{name}]({}{p})", head.to_root)
            })
            .collect();
        let _ = writeln!(md, "By hand, beside this page: {}.\n", links.join("; "));
    }
    let _ = writeln!(
        md,
        "What each invariant means: [docs/invariants.md]({}docs/invariants.md). Each broken invariant is shown once below (## Broken), with its counterexample and the timeline's events.\n",
        head.to_root
    );
}

/// One broken invariant's paragraph of the summary.
fn finding_summary(md: &mut String, report: &BatteryReport, f: &Finding, claim: Option<&Claim>) {
    let phases: Vec<String> = report
        .phases
        .iter()
        .filter(|p| {
            p.cells
                .get(f.invariant)
                .is_some_and(|c| c.verdict == Verdict::Invalid)
        })
        .map(|p| {
            let cell = &p.cells[f.invariant];
            if cell.seen_once() {
                format!(
                    "{} ({}, seen once: not again in {} reruns)",
                    p.name,
                    exactness(p),
                    cell.reruns
                )
            } else if p.replays.contains_key(f.invariant) {
                format!("{} ({}, replayed exactly)", p.name, exactness(p))
            } else {
                format!("{} ({})", p.name, exactness(p))
            }
        })
        .collect();
    let what = claim.map_or(String::new(), |c| format!(" {}", c.what.trim()));
    let _ = writeln!(
        md,
        "- **{}**:{what} Broken in {}.",
        f.invariant,
        if phases.is_empty() {
            f.phase.clone()
        } else {
            phases.join(", ")
        }
    );
    if let Some(why) = claim.and_then(|c| c.why.as_deref()) {
        let _ = writeln!(md, "  {}", why.trim());
    }
    if let Some(c) = claim {
        if let (Some(quote), Some(link)) = (&c.quote, &c.link) {
            let _ = writeln!(
                md,
                "  The documentation: “{}” ([source]({link}))",
                quote.trim()
            );
        }
    }
    if let Some(v) = f.violations.first() {
        let _ = writeln!(md, "  The checker: {}", cut(&v.to_string(), 400));
    }
    let _ = writeln!(md, "{}\n", summary_replay(report, f));
}

/// True when `f`'s own run is exact (an explorer on logical time).
fn exact_finding(report: &BatteryReport, f: &Finding) -> bool {
    report.phases.iter().any(|p| p.name == f.phase && p.exact)
}

/// The summary's line that runs a finding again: its replay when its run
/// was exact; else the first wall-clock column's exact replay, if one was
/// read off its history, and the rerun.
fn summary_replay(report: &BatteryReport, f: &Finding) -> String {
    let replayed = report
        .phases
        .iter()
        .find_map(|p| p.replays.get(f.invariant));
    match (exact_finding(report, f), replayed) {
        (true, _) => format!("  Replay: `{}`", f.replay),
        (false, Some(r)) => format!(
            "  Replay (exact; {} of {} runs broke it): `{}`\n  Rerun (wall clock): `{}`",
            r.reproduced, r.runs, r.line, f.replay
        ),
        (false, None) => {
            let mut text = format!(
                "  Rerun (wall clock, may not break the same way): `{}`",
                f.replay
            );
            if let Some((phase, why)) = unreduced(report, f).next() {
                let _ = write!(text, "\n  Not replayed exactly ({phase}): {why}");
            }
            text
        }
    }
}

/// Each wall-clock column that broke `f`'s invariant and could not read
/// an exact replay of it off its history, with why.
fn unreduced<'a>(
    report: &'a BatteryReport,
    f: &'a Finding,
) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
    report.phases.iter().filter_map(|p| {
        let why = p.unreduced.get(f.invariant)?;
        Some((p.name.as_str(), why.as_str()))
    })
}

/// `text` cut to about `max` bytes at a char boundary, with `…`.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The verdict table: rows the invariants, columns the phases.
fn table(report: &BatteryReport) -> String {
    let mut md = String::from("| invariant |");
    for p in &report.phases {
        let _ = write!(md, " {} ({}) |", p.name, exactness(p));
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
    let _ = writeln!(
        md,
        "\n(exact): an explorer on logical time: each run replays to the same history, so a second run gives the same cell. (sampled): one wall-clock run (chaos, or an explorer on a queue that keeps real time): a second run may give another cell."
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

/// A finding's lines that run it again: `Replay` when its run is exact
/// (an explorer on logical time), `Rerun` when it was one wall-clock
/// sample (same seed, may not break the same way); then each wall-clock
/// column's exact replay of the invariant, read off its history.
fn replay_lines(md: &mut String, report: &BatteryReport, f: &Finding) {
    let heading = match exact_finding(report, f) {
        true => "Replay (exact, pasteable)",
        false => "Rerun (the same seed on the wall clock: it may not break the same way)",
    };
    let _ = writeln!(md, "{heading}:\n\n```\n{}\n```\n", f.replay);
    for p in &report.phases {
        if let Some(r) = p.replays.get(f.invariant) {
            let _ = writeln!(
                md,
                "Replay of {} (exact: {}):\n\n```\n{}\n```\n",
                p.name,
                r.describe(),
                r.line
            );
        }
    }
    for (phase, why) in unreduced(report, f) {
        let _ = writeln!(md, "Not replayed exactly from {phase}: {why}\n");
    }
}

fn finding_md(md: &mut String, report: &BatteryReport, f: &Finding, same: Option<&str>) {
    if seen_once(report, f.invariant) {
        let _ = writeln!(
            md,
            "### {} (seen once in {}, not again in {} reruns)\n",
            f.invariant,
            f.phase,
            super::battery::RERUNS
        );
    } else {
        let _ = writeln!(md, "### {} (broken in {})\n", f.invariant, f.phase);
    }
    replay_lines(md, report, f);
    // A finding may name hundreds of jobs (a kill without persistence): the
    // first five, and how many more.
    const SHOWN: usize = 5;
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
    if let Some(first) = same {
        let _ = writeln!(
            md,
            "Counterexample: the same run as **{first}**'s above ({}).\n",
            f.label
        );
    } else if !f.counterexample.is_empty() {
        let _ = writeln!(
            md,
            "Counterexample ({}):\n\n```\n{}\n```\n",
            f.label,
            steps_of(&f.counterexample, f.invariant).trim_end()
        );
    }
    if !f.excerpt.is_empty() {
        // The events the violations cite, and as many of their jobs' other
        // events as keep the excerpt short; the replay shows the rest. A
        // counterexample's numbered steps already tell the story: then the
        // cited events alone.
        let excerpt_max: usize = if f.counterexample.is_empty() { 14 } else { 0 };
        let cited = |index: u64| {
            f.violations
                .iter()
                .flat_map(|v| &v.events)
                .any(|c| c.event == index)
        };
        let n_cited = f.excerpt.iter().filter(|e| cited(e.index)).count();
        let mut others = excerpt_max.saturating_sub(n_cited);
        let shown: Vec<&crate::history::Event> = f
            .excerpt
            .iter()
            .filter(|e| {
                cited(e.index) || {
                    let keep = others > 0;
                    others = others.saturating_sub(1);
                    keep
                }
            })
            .collect();
        let _ = writeln!(md, "The timeline's events that show it:\n\n```");
        for e in shown.iter().copied() {
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
        if shown.len() < f.excerpt.len() {
            let _ = writeln!(
                md,
                "… and {} more events of these jobs (the replay line runs them all)",
                f.excerpt.len() - shown.len()
            );
        }
        let _ = writeln!(md, "```\n");
    }
}

/// A walk's counterexample as a page shows it: its numbered steps (from
/// `counterexample on …`) and what they broke of `invariant`; the head that
/// lists every violation, and the replay lines the page prints above, left
/// out. A text without numbered steps (an exhaustive search's path, one
/// line) is kept whole.
fn steps_of(text: &str, invariant: &str) -> String {
    let Some(start) = text.find("counterexample on ") else {
        return text.to_owned();
    };
    let own = format!("  broke {invariant}:");
    text[start..]
        .lines()
        .filter(|l| !l.starts_with("  broke ") || l.starts_with(&own))
        .filter(|l| !l.starts_with("  replay: "))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The report as one HTML page: its Markdown rendered (tables on) under a
/// heading in the verdict's colour, in a page of its own (no script, no
/// external resource).
pub fn html(report: &BatteryReport, head: &Head) -> String {
    page_html(
        &report.config.queue,
        report.verdict,
        &markdown(report, head),
    )
}

/// A findings page's Markdown `md` as HTML. Each line break the page
/// writes inside a paragraph or list item (a finding's "The checker:",
/// "Replay:" lines) stays a line break. Raw HTML in the Markdown (an
/// adapter's message or a quote that holds a `<`) is shown as text, never
/// passed through as markup.
fn page_html(queue: &str, verdict: Verdict, md: &str) -> String {
    use pulldown_cmark::{html::push_html, Event, Options, Parser};
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let colour = match verdict {
        Verdict::Valid => "#2a7",
        Verdict::Unknown => "#c80",
        Verdict::Invalid => "#c22",
    };
    let events = Parser::new_ext(md, Options::ENABLE_TABLES).map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        Event::SoftBreak => Event::HardBreak,
        other => other,
    });
    let mut body = String::new();
    push_html(&mut body, events);
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>ackgap findings: {q}</title><style>{PAGE_CSS}</style></head><body><h1 style=\"color:{colour}\">{q}: {verdict}</h1>\n{body}</body></html>\n",
        q = esc(queue),
    )
}

/// The findings page's style: readable width, bordered tables, code
/// wrapped rather than overflowing.
const PAGE_CSS: &str =
    "body{font-family:sans-serif;max-width:70em;margin:auto;padding:0 1em;line-height:1.4}\
table{border-collapse:collapse;margin:1em 0}\
th,td{border:1px solid #bbb;padding:0.25em 0.6em;text-align:left;vertical-align:top}\
th{background:#eee}\
td:first-child{white-space:nowrap}\
code{background:#f4f4f4;padding:0 0.2em;overflow-wrap:anywhere}\
pre{background:#f4f4f4;padding:0.5em;white-space:pre-wrap}\
blockquote{border-left:3px solid #ccc;margin-left:0;padding-left:1em;color:#444}";

#[cfg(test)]
mod tests {
    use super::link_to_root;
    use std::path::Path;

    /// The adapter's README is linked from wherever the page is written:
    /// the committed pages (`docs/findings/`), the default folder
    /// (`target/ackgap/findings/`), an absolute path inside the working
    /// directory, and one outside it.
    #[test]
    fn the_link_to_the_repository_root_holds_from_every_page_folder() {
        let cwd = Path::new("/repo");
        assert_eq!(
            link_to_root(cwd, Path::new("docs/findings/rq.md")),
            "../../"
        );
        assert_eq!(
            link_to_root(cwd, Path::new("target/ackgap/findings/rq.md")),
            "../../../"
        );
        assert_eq!(link_to_root(cwd, Path::new("rq.md")), "");
        assert_eq!(link_to_root(cwd, Path::new("/repo/out/rq.md")), "../");
        assert_eq!(link_to_root(cwd, Path::new("/tmp/x/rq.md")), "/repo/");
        assert_eq!(link_to_root(cwd, Path::new("../up/rq.md")), "/repo/");
    }
}

#[cfg(test)]
mod claims {
    use super::{claims_of, Claim};
    use std::path::Path;

    /// A queue's claims are read by its page's name (an adapter of the list
    /// by its directory, a shipped queue by its own), and an entry of
    /// another class than promised or by-design is left out (its finding
    /// then shows unclassified).
    #[test]
    fn claims_are_read_by_the_page_s_name_and_a_bad_class_is_left_out() {
        let root = tempfile::tempdir().unwrap();
        let adapters = root.path().join("adapters/q");
        std::fs::create_dir_all(&adapters).unwrap();
        std::fs::write(
            adapters.join("adapter.toml"),
            "name = \"q\"\ncommand = \"adapters/q/run\"\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.path().join("docs/findings")).unwrap();
        std::fs::write(
            root.path().join("docs/findings/invariants.toml"),
            "[q.no-loss]\nclass = \"promised\"\nwhat = \"w\"\nquote = \"says \\\"kept\\\"\"\nlink = \"https://x\"\n\n[q.liveness]\nclass = \"maybe\"\nwhat = \"w\"\n\n[lmove.fenced-settlement]\nclass = \"by-design\"\nwhat = \"w\"\nwhy = \"y\"\n",
        )
        .unwrap();
        let q = claims_of(root.path(), "exec:adapters/q/run");
        assert_eq!(q.keys().collect::<Vec<_>>(), ["no-loss"]);
        assert_eq!(q["no-loss"].quote.as_deref(), Some("says \"kept\""));
        assert!(q["no-loss"].promised());
        let lmove = claims_of(root.path(), "lmove");
        assert!(!lmove["fenced-settlement"].promised());
        assert!(claims_of(root.path(), "rpop").is_empty());
    }

    /// Every entry of the committed docs/findings/invariants.toml is a
    /// claim a page can print: a known class, what happened, and for a
    /// promise the documentation's words and where they are.
    #[test]
    fn every_committed_claim_is_complete() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/findings/invariants.toml");
        let file: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        let mut n = 0;
        for (queue, table) in &file {
            for (invariant, entry) in table.as_table().unwrap() {
                let at = format!("[{queue}.{invariant}]");
                assert!(
                    crate::check::CHECKERS.iter().any(|(c, _)| c == invariant)
                        || invariant == "liveness",
                    "{at}: no such invariant"
                );
                let claim: Claim = entry
                    .clone()
                    .try_into()
                    .unwrap_or_else(|e| panic!("{at}: {e}"));
                assert!(!claim.what.trim().is_empty(), "{at}: no what");
                match claim.class.as_str() {
                    "promised" => assert!(
                        claim.quote.is_some() && claim.link.is_some(),
                        "{at}: a promise without its quote and link"
                    ),
                    "by-design" => assert!(claim.why.is_some(), "{at}: by design, but why?"),
                    other => panic!("{at}: class {other:?}"),
                }
                n += 1;
            }
        }
        assert!(n > 0);
    }
}

#[cfg(test)]
mod seen_once;

#[cfg(test)]
mod steps {
    use super::{fault_step, steps_of};

    /// A walk's counterexample on a page is its numbered steps and what
    /// they broke of the finding's invariant; the head listing every
    /// violation and the replay line (printed above it) are left out; a
    /// one-line path is kept whole.
    #[test]
    fn a_durability_replay_says_when_it_has_no_step_of_the_cell_s_fault() {
        assert!(fault_step(
            "ackgap replay rpop/marker/j1w1l500m2r1/e0.K --server process --persistence none"
        ));
        assert!(fault_step(
            "ackgap replay reference/marker/j1w1l500m2r1/e0.P"
        ));
        assert!(fault_step(
            "ackgap replay 'exec:adapters/x/run/marker/j1w3l500m10r1/e0.u1+l0'"
        ));
        assert!(!fault_step(
            "ackgap replay rpop/marker/j1w1l500m2r1/e0.l0 --server process --persistence everysec"
        ));
        // `d` and `u` only with a worker: a step named otherwise is not one.
        assert!(!fault_step("ackgap replay q/marker/c/e0.l0.c0.t10"));
    }

    #[test]
    fn a_walk_s_counterexample_keeps_its_steps_and_its_own_invariant_s_breaks() {
        let text = "ackgap explore: seed 3 is invalid after 2 steps\n  fenced-settlement: x\n  replay: ackgap explore --seed 3\ncounterexample on q with the marker consumer:\n    1. producer enqueues JOB-0 -> enqueued\n    2. w0 leases -> JOB-0 token 1\n  broke fenced-settlement: JOB-0: late\n  broke settle-once: JOB-0: twice\n  replay: ackgap replay q/e0.l0\n";
        assert_eq!(
            steps_of(text, "settle-once"),
            "counterexample on q with the marker consumer:\n    1. producer enqueues JOB-0 -> enqueued\n    2. w0 leases -> JOB-0 token 1\n  broke settle-once: JOB-0: twice\n"
        );
        assert_eq!(steps_of("e0 l0 r c0: x", "x"), "e0 l0 r c0: x");
    }
}
