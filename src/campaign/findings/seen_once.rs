//! The findings page's wall-clock findings: a cell seen once apart from
//! the findings, and a chaos finding's exact replay before its rerun; the
//! head's user app (`--app`); and the page's HTML twin.

use super::super::battery::{BatteryConfig, BatteryReport, Budget, Finding, RERUNS};
use super::super::table::{Cell, Phase};
use super::{html, markdown, Claim, Head, SEEN_ONCE, UNCLASSIFIED};
use crate::check::Verdict;

fn broken(runs: u64, reruns: u64, again: u64) -> Cell {
    Cell {
        verdict: Verdict::Invalid,
        runs,
        invalid: 1,
        reruns,
        again,
        ..Cell::default()
    }
}

fn finding(invariant: &'static str, phase: &str) -> Finding {
    Finding {
        invariant,
        phase: phase.into(),
        replay: format!("ackgap chaos --queue q --faults {phase}"),
        counterexample: String::new(),
        label: String::new(),
        violations: Vec::new(),
        excerpt: Vec::new(),
    }
}

/// A sampled cell that broke once and in none of its reruns is listed
/// under "Seen once, not reproduced", its cell says so, and it needs
/// no classification (so `ci/findings` does not refuse the page); one
/// that broke again on a rerun is a finding, classified as usual.
/// The head of a test page: `command`, with these claims and repro pages.
fn head(
    command: &str,
    claims: std::collections::BTreeMap<String, Claim>,
    repro: Vec<String>,
) -> Head {
    Head {
        command: command.into(),
        version: "test".into(),
        library: None,
        date: "2026-01-01".into(),
        server: "test".into(),
        promises: Vec::new(),
        adapter: None,
        to_root: "../../".into(),
        claims,
        repro,
    }
}

/// An invalid battery report of queue `q` with these rows, columns and
/// findings.
fn invalid(
    invariants: Vec<&'static str>,
    phases: Vec<Phase>,
    findings: Vec<Finding>,
) -> BatteryReport {
    BatteryReport {
        config: BatteryConfig::new("q", 1, Budget::Ci),
        invariants,
        phases,
        findings,
        durability: Vec::new(),
        skipped: Vec::new(),
        verdict: Verdict::Invalid,
        elapsed_ms: 1,
        app: None,
    }
}

#[test]
fn a_cell_no_rerun_broke_again_is_seen_once_apart_from_the_findings_and_one_that_came_back_is_not()
{
    let mut chaos = Phase::new("chaos server", "one run".into());
    chaos.cells.insert("no-loss", broken(1, RERUNS, 0));
    chaos.cells.insert("structure", broken(1, RERUNS, 1));
    let report = invalid(
        vec!["no-loss", "structure"],
        vec![chaos],
        vec![
            finding("no-loss", "chaos server"),
            finding("structure", "chaos server"),
        ],
    );
    let claim = Claim {
        class: "by-design".into(),
        what: "the queue's own words".into(),
        why: Some("not promised".into()),
        ..Claim::default()
    };
    let head = head(
        "ackgap run --queue q",
        [("structure".to_owned(), claim)].into(),
        vec!["docs/findings/repro/q.md".into()],
    );
    let md = markdown(&report, &head);
    let summary = &md[..md.find("| invariant |").unwrap()];
    let seen = &summary[summary.find(SEEN_ONCE).expect(&md)..];
    assert!(seen.contains("- **no-loss**:"), "{md}");
    assert!(!seen.contains("- **structure**"), "{md}");
    let by_design = &summary[summary.find("### By design").expect(&md)..];
    assert!(by_design.starts_with("### By design"));
    assert!(by_design[..by_design.find(SEEN_ONCE).unwrap()]
        .contains("- **structure**: the queue's own words"));
    assert!(!md.contains(UNCLASSIFIED), "{md}");
    assert!(
        md.contains(&format!("| seen once 1/1, again 0/{RERUNS} |")),
        "{md}"
    );
    assert!(
        md.contains(&format!("| INVALID 1/1, again 1/{RERUNS} |")),
        "{md}"
    );
    assert!(md.contains(&format!(
        "### no-loss (seen once in chaos server, not again in {RERUNS} reruns)"
    )));
    assert!(
        md.contains("[q.md](../../docs/findings/repro/q.md)"),
        "{md}"
    );
}

/// A wall-clock finding is printed with the line that reruns its seed
/// as a rerun, not a replay; the exact replay read off its history,
/// when there is one, comes first with how often it broke the
/// invariant, in the summary and under the finding; when there is none,
/// why no schedule read off the history replayed it.
#[test]
fn a_chaos_finding_shows_its_exact_replay_first_and_its_seed_as_a_rerun() {
    use super::super::table::Replayed;
    let mut worker = Phase::new("chaos worker", "one run".into());
    worker.cells.insert("no-loss", broken(1, RERUNS, RERUNS));
    worker.replays.insert(
        "no-loss",
        Replayed {
            line: "ackgap replay rpop/marker/j1w1l500m10r1/e0.l0 --server process".into(),
            read: 8,
            steps: 2,
            reproduced: 10,
            runs: 10,
        },
    );
    let mut network = Phase::new("chaos network", "one run".into());
    network.cells.insert("structure", broken(1, RERUNS, RERUNS));
    network.unreduced.insert(
        "structure",
        "JOB-1: completion: 6 steps, valid: q/marker/j1w2l100m2r1/e0.l0.c0".into(),
    );
    let report = invalid(
        vec!["no-loss", "structure"],
        vec![worker, network],
        vec![
            finding("no-loss", "chaos worker"),
            finding("structure", "chaos network"),
        ],
    );
    let head = head("ackgap run --queue q", Default::default(), Vec::new());
    let md = markdown(&report, &head);
    assert!(
        md.contains("chaos worker (sampled, replayed exactly)"),
        "{md}"
    );
    assert!(
        md.contains("  Replay (exact; 10 of 10 runs broke it): `ackgap replay rpop/marker/j1w1l500m10r1/e0.l0 --server process`\n  Rerun (wall clock): `ackgap chaos --queue q --faults chaos worker`"),
        "{md}"
    );
    assert!(
        md.contains("Replay of chaos worker (exact: read off the run's history (8 steps), shrunk to 2; the replay broke it in 10 of 10 runs):"),
        "{md}"
    );
    // No exact replay of structure: its seed's line, said to be a rerun,
    // and why no schedule read off the history replayed it, in the
    // summary and under the finding.
    assert!(
        md.contains("  Rerun (wall clock, may not break the same way): `ackgap chaos --queue q --faults chaos network`\n  Not replayed exactly (chaos network): JOB-1: completion: 6 steps, valid: q/marker/j1w2l100m2r1/e0.l0.c0"),
        "{md}"
    );
    assert!(
        md.contains("Not replayed exactly from chaos network: JOB-1: completion: 6 steps, valid:"),
        "{md}"
    );
    assert!(
        !md.contains("Not replayed exactly from chaos worker"),
        "{md}"
    );
    assert!(
        md.contains("Rerun (the same seed on the wall clock: it may not break the same way):"),
        "{md}"
    );
    assert!(!md.contains("Reproduce:"), "{md}");
}

/// The head names the user's app (`--app`) the adapter ran with: what
/// it is, its libraries, the settings kept and those overridden; a run
/// without one names none.
#[test]
fn the_head_names_the_user_s_app_its_settings_and_what_was_overridden() {
    let app = crate::adapter::App {
        spec: "myproj.celery:app".into(),
        kind: "Celery app".into(),
        versions: [("celery".to_owned(), "5.7.0".to_owned())].into(),
        settings: [("task_acks_late".to_owned(), "False".to_owned())].into(),
        overridden: [("broker_url".to_owned(), "the server ackgap runs".to_owned())].into(),
    };
    let mut report = BatteryReport {
        config: BatteryConfig::new("exec:adapters/celery/run", 1, Budget::Ci),
        invariants: Vec::new(),
        phases: Vec::new(),
        findings: Vec::new(),
        durability: Vec::new(),
        skipped: Vec::new(),
        verdict: Verdict::Valid,
        elapsed_ms: 1,
        app: Some(app),
    };
    let head = Head {
        library: Some("celery 5.7.0 (PyPI)".into()),
        ..head(
            "ackgap run --queue exec:adapters/celery/run --app myproj.celery:app",
            Default::default(),
            Vec::new(),
        )
    };
    let md = markdown(&report, &head);
    for line in [
        "- library: celery 5.7.0 (PyPI)\n- app: myproj.celery:app (Celery app)\n",
        "- app's libraries: celery 5.7.0\n",
        "- app's settings (kept): task_acks_late = False\n",
        "- overridden by the adapter: broker_url = the server ackgap runs\n",
    ] {
        assert!(md.contains(line), "{line:?} in {md}");
    }
    report.app = None;
    assert!(!markdown(&report, &head).contains("- app"), "{md}");
}

/// The HTML twin renders the page's Markdown: the verdict table is a
/// `<table>`, a link is an `<a href>`, the heading carries the verdict,
/// and raw HTML in a quoted text (a claim's words here) is shown as text,
/// not passed through as markup; the page is not one preformatted block.
#[test]
fn the_html_page_renders_the_verdict_table_and_links_and_keeps_raw_html_as_text() {
    let mut chaos = Phase::new("chaos server", "one run".into());
    chaos.cells.insert("no-loss", broken(1, RERUNS, 1));
    let report = invalid(
        vec!["no-loss"],
        vec![chaos],
        vec![finding("no-loss", "chaos server")],
    );
    let claim = Claim {
        class: "by-design".into(),
        what: "the <b>queue</b> & its words".into(),
        why: Some("not promised".into()),
        ..Claim::default()
    };
    let head = head(
        "ackgap run --queue q",
        [("no-loss".to_owned(), claim)].into(),
        vec!["docs/findings/repro/q.md".into()],
    );
    let page = html(&report, &head);
    assert!(page.starts_with("<!doctype html>"), "{page}");
    assert!(page.contains("<title>ackgap findings: q</title>"), "{page}");
    assert!(
        page.contains("<h1 style=\"color:#c22\">q: invalid</h1>"),
        "{page}"
    );
    let table = &page[page.find("<table>").expect(&page)..];
    let table = &table[..table.find("</table>").expect(&page)];
    assert!(table.contains("<th>invariant</th>"), "{table}");
    assert!(table.contains("<td>no-loss</td>"), "{table}");
    assert!(
        page.contains("<a href=\"../../docs/findings/repro/q.md\">q.md</a>"),
        "{page}"
    );
    assert!(
        page.contains("the &lt;b&gt;queue&lt;/b&gt; &amp; its words"),
        "{page}"
    );
    assert!(!page.contains("<b>queue</b>"), "{page}");
    assert!(
        !page.contains("<pre style=\"white-space:pre-wrap\">"),
        "{page}"
    );
    assert!(!page.contains("| invariant |"), "{page}");
}
