//! The HTML report (`report::render`) read as a document: a
//! literal history with a known fenced-settlement violation (written here,
//! with its times, so the document is the same on every run), and the
//! report's elements asserted by their attributes — which event each ring
//! marks, where the stale worker's accepted ack is drawn and in whose
//! colour, that no worker is drawn in the violations' red, that fault
//! labels do not share a place, and that the overview comes first and the
//! lanes are the jobs that matter, the rest behind a toggle.

use ackgap::check::{check_all, Report};
use ackgap::history::{self, Event};
use ackgap::report;
use serde_json::{json, Value};

/// The red the report keeps for violations.
const VIOLATION_RED: &str = "#dc2626";

/// A history from `(time_ms, event)` pairs, indexed by position, read back
/// through the history reader (so it is one the checkers accept).
fn history(lines: Vec<(u64, Value)>) -> Vec<Event> {
    let text: String = lines
        .into_iter()
        .enumerate()
        .map(|(i, (t, mut e))| {
            e["v"] = 1.into();
            e["index"] = i.into();
            e["time_ms"] = t.into();
            format!("{e}\n")
        })
        .collect();
    history::read(text.as_bytes(), "literal").expect("a well-formed history")
}

fn ev(process: &str, kind: &str, f: &str) -> Value {
    json!({"process": process, "type": kind, "f": f})
}

fn with(mut e: Value, job: Option<&str>, token: Option<u64>, value: Option<Value>) -> Value {
    if let Some(job) = job {
        e["job"] = job.into();
    }
    if let Some(token) = token {
        e["token"] = token.into();
    }
    if let Some(value) = value {
        e["value"] = value;
    }
    e
}

/// Enqueue `job` at `t` (two events).
fn enqueue(lines: &mut Vec<(u64, Value)>, t: u64, job: &str) {
    lines.push((
        t,
        with(ev("p0", "invoke", "enqueue"), Some(job), None, None),
    ));
    lines.push((
        t,
        with(
            ev("p0", "ok", "enqueue"),
            Some(job),
            None,
            Some(json!({"outcome": "enqueued"})),
        ),
    ));
}

/// `worker` leases `job` with `token` at `t` (two events).
fn lease(lines: &mut Vec<(u64, Value)>, t: u64, worker: &str, job: &str, token: u64) {
    lines.push((t, ev(worker, "invoke", "lease")));
    lines.push((
        t + 1,
        with(
            ev(worker, "ok", "lease"),
            Some(job),
            Some(token),
            Some(json!({"outcome": "leased"})),
        ),
    ));
}

/// `worker` completes `job` with `token` at `t`, answered `outcome`.
fn complete(
    lines: &mut Vec<(u64, Value)>,
    t: u64,
    worker: &str,
    job: &str,
    token: u64,
    outcome: &str,
) {
    lines.push((
        t,
        with(
            ev(worker, "invoke", "complete"),
            Some(job),
            Some(token),
            None,
        ),
    ));
    lines.push((
        t + 1,
        with(
            ev(worker, "ok", "complete"),
            Some(job),
            Some(token),
            Some(json!({"outcome": outcome})),
        ),
    ));
}

fn read(lines: &mut Vec<(u64, Value)>, t: u64, jobs: Value) {
    lines.push((t, ev("checker", "invoke", "read")));
    lines.push((
        t + 1,
        with(
            ev("checker", "ok", "read"),
            None,
            None,
            Some(json!({"jobs": jobs, "problems": []})),
        ),
    ));
}

/// The fenced-settlement violation, event by event:
///
/// ```text
///  0, 1  p0      enqueue JOB-1
///  2, 3  p0      enqueue JOB-2
///  4, 5  w0      lease JOB-1, token 1
///  6, 7  w1      lease JOB-2, token 1
///  8, 9  w1      complete JOB-2 token 1: settled
/// 10,11  reaper  reap: JOB-1 back to pending   (w0's lease ends here)
/// 12,13  w1      lease JOB-1, token 2          (the lease w0 should lose to)
/// 14,15  w0      complete JOB-1 token 1: settled   <- the stale settle, accepted
/// 16,17  w1      complete JOB-1 token 2: already_settled
/// ```
///
/// then `extra` (jobs nothing happens to) and the final read.
fn fenced_violation(extra: usize) -> Vec<Event> {
    let mut l = Vec::new();
    enqueue(&mut l, 0, "JOB-1");
    enqueue(&mut l, 2, "JOB-2");
    lease(&mut l, 10, "w0", "JOB-1", 1);
    lease(&mut l, 12, "w1", "JOB-2", 1);
    complete(&mut l, 20, "w1", "JOB-2", 1, "settled");
    l.push((600, ev("reaper", "invoke", "reap")));
    l.push((
        601,
        ev("reaper", "ok", "reap")
            .as_object()
            .cloned()
            .map(|mut o| {
                o.insert(
                    "value".into(),
                    json!({"outcome": "reaped", "reaped": [{"id": "JOB-1", "to": "pending"}]}),
                );
                Value::Object(o)
            })
            .expect("object"),
    ));
    lease(&mut l, 610, "w1", "JOB-1", 2);
    complete(&mut l, 700, "w0", "JOB-1", 1, "settled");
    complete(&mut l, 800, "w1", "JOB-1", 2, "already_settled");
    let mut jobs = json!({"JOB-1": "done", "JOB-2": "done"});
    for i in 0..extra {
        let job = format!("CLEAN-{i:04}");
        let t = 900 + i as u64 * 4;
        enqueue(&mut l, t, &job);
        lease(&mut l, t + 1, "w1", &job, 1);
        complete(&mut l, t + 2, "w1", &job, 1, "settled");
        jobs[&job] = "done".into();
    }
    let t = l.last().map_or(0, |(t, _)| *t) + 10;
    read(&mut l, t, jobs);
    history(l)
}

/// Every start tag `<NAME ...>` of the document.
fn tags<'a>(html: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name} ");
    html.match_indices(&open)
        .map(|(i, _)| {
            let end = html[i..].find('>').expect("a closed tag");
            &html[i..i + end]
        })
        .collect()
}

/// The value of attribute `name` in a start tag.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let from = tag.find(&key)? + key.len();
    Some(&tag[from..from + tag[from..].find('"')?])
}

fn render(events: &[Event]) -> (String, Vec<Report>) {
    let reports = check_all(events);
    (report::render("t", events, &reports), reports)
}

#[test]
fn a_fenced_settlement_violation_rings_the_stale_settle_its_ending_and_the_lease_it_should_have_lost_to(
) {
    let events = fenced_violation(0);
    let (html, reports) = render(&events);
    let fenced = reports
        .iter()
        .find(|r| r.invariant == "fenced-settlement")
        .expect("the checker ran");
    let words: Vec<&str> = fenced.violations.iter().map(|v| v.text.as_str()).collect();
    assert_eq!(
        words,
        vec![
            "JOB-1: Complete with token 1 by w0 accepted at event 15, but that lease had ended at event 11 (the reaper)"
        ]
    );
    let mut rings: Vec<(String, String, String)> = tags(&html, "circle")
        .into_iter()
        .filter(|t| attr(t, "data-violation").is_some())
        .map(|t| {
            (
                attr(t, "data-violation").unwrap().to_owned(),
                attr(t, "data-role").unwrap().to_owned(),
                attr(t, "data-event").unwrap().to_owned(),
            )
        })
        .collect();
    rings.sort();
    let want = |r: &str, e: &str| ("1".to_owned(), r.to_owned(), e.to_owned());
    assert_eq!(
        rings,
        vec![
            want("current-lease", "13"),
            want("lease-ended", "11"),
            want("stale-settle", "15"),
        ]
    );
    // The solid ring, the one the list links to, is the stale settle's.
    let solid: Vec<&str> = tags(&html, "circle")
        .into_iter()
        .filter(|t| attr(t, "class") == Some("violation"))
        .collect();
    assert_eq!(solid.len(), 1);
    assert_eq!(attr(solid[0], "id"), Some("v1"));
    assert_eq!(attr(solid[0], "data-event"), Some("15"));
    assert!(html.contains(r##"<a href="#v1">on the timeline</a>"##));
}

#[test]
fn the_stale_workers_accepted_ack_is_drawn_apart_in_its_own_colour_not_as_a_plain_green_dot() {
    let events = fenced_violation(0);
    let (html, _) = render(&events);
    // No plain accepted-settle dot for event 15...
    assert!(tags(&html, "circle")
        .iter()
        .all(|t| !(attr(t, "class") == Some("settle") && attr(t, "data-event") == Some("15"))));
    // ...but a stale-settle group of w0's, whose ghost bar and diamond are
    // in w0's colour, as the legend gives it (w1 holds the bar it sits on).
    let stale: Vec<&str> = tags(&html, "g")
        .into_iter()
        .filter(|t| attr(t, "class") == Some("stale-settle"))
        .collect();
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert_eq!(attr(stale[0], "data-event"), Some("15"));
    assert_eq!(attr(stale[0], "data-worker"), Some("w0"));
    let legend = |w: &str| {
        tags(&html, "span")
            .into_iter()
            .find(|t| attr(t, "data-worker") == Some(w))
            .and_then(|t| attr(t, "style"))
            .and_then(|s| s.strip_prefix("color:"))
            .expect("a legend entry")
            .to_owned()
    };
    let (w0, w1) = (legend("w0"), legend("w1"));
    assert_ne!(w0, w1);
    let at = html
        .find(r#"<g class="stale-settle" data-event="15""#)
        .expect("drawn");
    let group = &html[at..at + html[at..].find("</g>").expect("closed")];
    let fills: Vec<&str> = ["rect", "path"]
        .iter()
        .flat_map(|t| tags(group, t))
        .filter_map(|t| attr(t, "fill"))
        .collect();
    assert_eq!(fills, vec![w0.as_str(), w0.as_str()]);
    // w1's lease of token 2, the one w0 should have lost to, is w1's colour.
    let newer = tags(&html, "rect")
        .into_iter()
        .find(|t| attr(t, "class") == Some("lease") && attr(t, "data-event") == Some("13"))
        .expect("the lease bar of event 13");
    assert_eq!(attr(newer, "fill"), Some(w1.as_str()));
    // And it ends where the stale settle took the job, not at the end of
    // the run (w1's own settle was refused: already settled).
    assert!(
        html.contains("token 2 by w1: 611–701 ms, granted at event 13, ended: the job was settled under another token"),
        "{html}"
    );
}

#[test]
fn no_worker_is_drawn_in_the_violations_red() {
    // 24 workers, each leasing and settling one job.
    let mut l = Vec::new();
    let mut jobs = json!({});
    for i in 0..24u64 {
        let job = format!("JOB-{i}");
        enqueue(&mut l, i * 10, &job);
        lease(&mut l, i * 10 + 2, &format!("w{i}"), &job, 1);
        complete(&mut l, i * 10 + 5, &format!("w{i}"), &job, 1, "settled");
        jobs[&job] = "done".into();
    }
    read(&mut l, 300, jobs);
    let events = history(l);
    let (html, _) = render(&events);
    let colours: Vec<&str> = tags(&html, "span")
        .into_iter()
        .filter(|t| attr(t, "class") == Some("worker"))
        .filter_map(|t| attr(t, "style")?.strip_prefix("color:"))
        .collect();
    assert_eq!(colours.len(), 24);
    for c in &colours {
        assert_ne!(*c, VIOLATION_RED);
        // hsl(H,S%,L%): a hue at least 40° from red's 0°.
        let hue: f64 = c
            .strip_prefix("hsl(")
            .and_then(|r| r.split(',').next())
            .and_then(|h| h.parse().ok())
            .unwrap_or_else(|| panic!("not an hsl colour: {c}"));
        assert!((40.0..=320.0).contains(&hue), "{c} is too close to red");
    }
    for bar in tags(&html, "rect")
        .into_iter()
        .filter(|t| attr(t, "class") == Some("lease"))
    {
        assert!(colours.contains(&attr(bar, "fill").expect("filled")));
    }
}

#[test]
fn fault_labels_injected_together_do_not_share_a_place() {
    let mut l = Vec::new();
    enqueue(&mut l, 0, "JOB-1");
    for (t, fault, target) in [
        (100, "server-pause", "server"),
        (101, "partition", "w0"),
        (102, "reset-connection", "w1"),
    ] {
        l.push((t, ev("nemesis", "invoke", "fault")));
        l.push((
            t,
            with(
                ev("nemesis", "ok", "fault"),
                None,
                None,
                Some(json!({"action": "inject", "fault": fault, "target": target, "duration_ms": 50})),
            ),
        ));
    }
    for (t, fault, target) in [(150, "server-pause", "server"), (151, "partition", "w0")] {
        l.push((t, ev("nemesis", "invoke", "fault")));
        l.push((
            t,
            with(
                ev("nemesis", "ok", "fault"),
                None,
                None,
                Some(json!({"action": "heal", "fault": fault, "target": target})),
            ),
        ));
    }
    lease(&mut l, 200, "w0", "JOB-1", 1);
    complete(&mut l, 210, "w0", "JOB-1", 1, "settled");
    read(&mut l, 300, json!({"JOB-1": "done"}));
    let (html, _) = render(&history(l));
    let labels: Vec<(&str, &str)> = tags(&html, "text")
        .into_iter()
        .filter(|t| attr(t, "class") == Some("fault-label"))
        .map(|t| (attr(t, "x").unwrap(), attr(t, "y").unwrap()))
        .collect();
    assert_eq!(labels.len(), 3, "{labels:?}");
    let mut ys: Vec<&str> = labels.iter().map(|(_, y)| *y).collect();
    ys.sort();
    ys.dedup();
    assert_eq!(ys.len(), 3, "labels on the same row: {labels:?}");
}

#[test]
fn the_report_opens_with_the_overview_then_lanes_only_for_the_jobs_that_matter() {
    let events = fenced_violation(300);
    let (html, _) = render(&events);
    let overview = html.find(r#"<svg id="overview""#).expect("an overview");
    let lanes = html
        .find(r#"<svg id="lanes""#)
        .expect("the lanes that matter");
    let toggle = html.find("<details>").expect("the rest behind a toggle");
    let others = html
        .find(r#"<svg id="other-lanes""#)
        .expect("the other lanes");
    assert!(overview < lanes && lanes < toggle && toggle < others);
    assert!(html[toggle..].contains("The other 301 jobs"));
    let jobs_in = |part: &str| -> Vec<String> {
        tags(part, "g")
            .into_iter()
            .filter(|t| attr(t, "class") == Some("lane"))
            .map(|t| attr(t, "data-job").unwrap().to_owned())
            .collect()
    };
    // JOB-1 (the violation's, leased twice, reaped) and nothing else:
    // JOB-2 and the clean jobs had one lease each, settled.
    assert_eq!(jobs_in(&html[lanes..toggle]), vec!["JOB-1"]);
    let rest = jobs_in(&html[others..]);
    assert_eq!(rest.len(), 301);
    assert!(rest.contains(&"JOB-2".to_owned()));
    // The overview's backlog and settle-rate series are drawn from the
    // history: one active area, one pending area, a column of settles.
    let part = &html[overview..lanes];
    assert_eq!(
        tags(part, "path")
            .iter()
            .filter(|t| attr(t, "class") == Some("active"))
            .count(),
        1
    );
    assert_eq!(
        tags(part, "path")
            .iter()
            .filter(|t| attr(t, "class") == Some("pending"))
            .count(),
        1
    );
    assert!(tags(part, "rect")
        .iter()
        .any(|t| attr(t, "class") == Some("settles")));
    // And a red tick at the violation, linked to its ring.
    assert!(part.contains(r##"<a href="#v1"><path class="violation-tick" data-violation="1""##));
}

/// A real run's report, on an embedded Valkey: `ackgap chaos` with worker
/// and server faults writes the report beside its history, and the report
/// accounts for that history: every job in exactly one lane, every fault
/// injected labelled in the overview, every lease bar a grant the history
/// holds, in its worker's legend colour, and every violation ringed on
/// the event its words name.
#[test]
fn a_real_chaos_runs_report_accounts_for_every_job_fault_and_lease_of_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real.jsonl");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args([
            "chaos",
            "--seed",
            "3",
            "--duration",
            "3s",
            "--jobs",
            "60",
            "--faults",
            "worker,partition,server-pause",
            "--json",
            "--history",
            path.to_str().unwrap(),
        ])
        .output()
        .expect("run ackgap");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "one JSON object: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let events = history::read_file(&path).expect("the run's history");
    let html = std::fs::read_to_string(path.with_extension("html")).expect("the report");

    let mut lanes: Vec<&str> = tags(&html, "g")
        .into_iter()
        .filter(|t| attr(t, "class") == Some("lane"))
        .map(|t| attr(t, "data-job").unwrap())
        .collect();
    lanes.sort();
    let mut jobs: Vec<&str> = events
        .iter()
        .filter(|e| e.f == history::F::Enqueue)
        .filter_map(|e| e.job.as_deref())
        .collect();
    jobs.sort();
    jobs.dedup();
    assert_eq!(jobs.len(), 60);
    assert_eq!(lanes, jobs, "each job in exactly one lane");

    let injected = events
        .iter()
        .filter(|e| {
            e.f == history::F::Fault && e.value.as_ref().is_some_and(|v| v["action"] == "inject")
        })
        .count();
    assert!(injected > 0, "the schedule injected no fault");
    let labels = tags(&html, "text")
        .into_iter()
        .filter(|t| attr(t, "class") == Some("fault-label"))
        .count();
    assert_eq!(labels, injected);

    let legend = |w: &str| {
        tags(&html, "span")
            .into_iter()
            .find(|t| attr(t, "data-worker") == Some(w))
            .and_then(|t| attr(t, "style")?.strip_prefix("color:"))
            .map(str::to_owned)
    };
    let bars: Vec<&str> = tags(&html, "rect")
        .into_iter()
        .filter(|t| attr(t, "class") == Some("lease"))
        .collect();
    assert!(!bars.is_empty());
    for bar in bars {
        let at: usize = attr(bar, "data-event").unwrap().parse().unwrap();
        let grant = &events[at];
        assert_eq!(grant.f, history::F::Lease, "{bar}");
        assert_eq!(grant.value.as_ref().unwrap()["outcome"], "leased");
        assert_eq!(attr(bar, "data-worker"), Some(grant.process.as_str()));
        assert_eq!(legend(&grant.process).as_deref(), attr(bar, "fill"));
    }

    // Violations, if this queue had any: each solid ring on the stale
    // settle the JSON's violation names.
    let mut n = 0;
    for inv in report["invariants"].as_array().expect("invariants") {
        for v in inv["violations"].as_array().into_iter().flatten() {
            n += 1;
            let ring = tags(&html, "circle")
                .into_iter()
                .find(|t| attr(t, "id") == Some(&format!("v{n}")));
            let stale = v["events"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["role"] == "stale-settle");
            if let Some(at) = stale {
                let at = at["event"].to_string();
                assert_eq!(
                    ring.and_then(|r| attr(r, "data-event")),
                    Some(at.as_str()),
                    "{v}"
                );
            }
        }
    }
}

/// A reap invoked before a grant and answered after it took the older
/// lease (as fenced-settlement reads it): the new holder's ack is drawn as
/// a plain accepted settle on its own bar, not as a stale one.
#[test]
fn a_reap_concurrent_with_a_grant_does_not_end_the_new_lease_in_the_drawing() {
    let mut l = Vec::new();
    enqueue(&mut l, 0, "JOB-1");
    lease(&mut l, 10, "w0", "JOB-1", 1);
    l.push((600, ev("reaper", "invoke", "reap")));
    l.push((601, ev("w1", "invoke", "lease")));
    l.push((
        602,
        with(
            ev("w1", "ok", "lease"),
            Some("JOB-1"),
            Some(2),
            Some(json!({"outcome": "leased"})),
        ),
    ));
    l.push((
        603,
        with(
            ev("reaper", "ok", "reap"),
            None,
            None,
            Some(json!({"outcome": "reaped", "reaped": [{"id": "JOB-1", "to": "pending"}]})),
        ),
    ));
    complete(&mut l, 700, "w1", "JOB-1", 2, "settled");
    read(&mut l, 800, json!({"JOB-1": "done"}));
    let (html, reports) = render(&history(l));
    assert!(
        reports.iter().all(|r| r.violations.is_empty()),
        "{reports:?}"
    );
    assert!(!html.contains("stale-settle"));
    assert!(tags(&html, "circle")
        .iter()
        .any(|t| attr(t, "class") == Some("settle") && attr(t, "data-event") == Some("9")));
    assert!(html.contains("token 2 by w1: 602–701 ms, granted at event 6, ended: settled"));
}

/// For the other invariants, the solid ring is on the event the words
/// name as breaking it: the lease after done (not the done it cites), the
/// second of two settles (not the first).
#[test]
fn a_settle_once_violation_rings_the_event_that_broke_it_and_dashes_the_one_it_cites() {
    let mut l = Vec::new();
    enqueue(&mut l, 0, "JOB-1");
    lease(&mut l, 10, "w0", "JOB-1", 1);
    complete(&mut l, 20, "w0", "JOB-1", 1, "settled");
    lease(&mut l, 30, "w1", "JOB-1", 2);
    complete(&mut l, 40, "w1", "JOB-1", 2, "settled");
    read(&mut l, 50, json!({"JOB-1": "done"}));
    let (html, reports) = render(&history(l));
    let once = reports
        .iter()
        .find(|r| r.invariant == "settle-once")
        .expect("ran");
    let mut words: Vec<String> = once.violations.iter().map(|v| v.text.clone()).collect();
    words.sort();
    assert_eq!(
        words,
        vec![
            "JOB-1: leased to w1 at event 7 after it was settled as done at event 5".to_owned(),
            "JOB-1: settled as done twice (events 5 and 9)".to_owned(),
        ]
    );
    let rings = |role: &str| {
        let mut at: Vec<&str> = tags(&html, "circle")
            .into_iter()
            .filter(|t| attr(t, "data-role") == Some(role))
            .map(|t| attr(t, "data-event").unwrap())
            .collect();
        at.sort();
        at
    };
    assert_eq!(rings("violation"), vec!["7", "9"]);
    assert_eq!(rings("cited"), vec!["5", "5"]);
}
