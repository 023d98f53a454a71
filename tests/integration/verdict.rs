//! A verdict you can trust: the checkers on literal histories written in
//! the style of Jepsen's `checker_test.clj` (each operation spelt out,
//! invoke then ok / fail / info, and the counts asserted), and histories
//! that break the grammar refused, never judged — literal ones, and a real
//! history recorded by `ackgap chaos` on Valkey, reversed or with an index
//! reused.

use std::collections::BTreeMap;

use crate::common::{ackgap, text};
use ackgap::check::{check_all, overall, Report, Verdict};
use ackgap::history::{self, Event, ReadError, Rule};
use serde_json::{json, Value};

/// An event without its index and time (given by its position).
fn event(process: &str, kind: &str, f: &str, job: Option<&str>, token: Option<u64>) -> Value {
    let mut e = json!({"process": process, "type": kind, "f": f});
    if let Some(job) = job {
        e["job"] = job.into();
    }
    if let Some(token) = token {
        e["token"] = token.into();
    }
    e
}

fn invoke(process: &str, f: &str, job: Option<&str>, token: Option<u64>) -> Value {
    event(process, "invoke", f, job, token)
}

fn ok(process: &str, f: &str, job: Option<&str>, token: Option<u64>, value: Value) -> Value {
    let mut e = event(process, "ok", f, job, token);
    e["value"] = value;
    e
}

fn info(process: &str, f: &str, job: Option<&str>, token: Option<u64>) -> Value {
    let mut e = event(process, "info", f, job, token);
    e["error"] = "timed out".into();
    e
}

fn fail(process: &str, f: &str, job: Option<&str>, token: Option<u64>) -> Value {
    let mut e = event(process, "fail", f, job, token);
    e["error"] = "refused".into();
    e
}

/// An enqueue of `job` answered `enqueued`.
fn enqueued(p: &str, job: &str) -> [Value; 2] {
    [
        invoke(p, "enqueue", Some(job), None),
        ok(
            p,
            "enqueue",
            Some(job),
            None,
            json!({"outcome": "enqueued"}),
        ),
    ]
}

/// A lease by `w` granting `job` with `token`.
fn leased(w: &str, job: &str, token: u64) -> [Value; 2] {
    [
        invoke(w, "lease", None, None),
        ok(
            w,
            "lease",
            Some(job),
            Some(token),
            json!({"outcome": "leased"}),
        ),
    ]
}

/// A complete by `w` of `job` with `token`, answered `outcome`.
fn completed(w: &str, job: &str, token: u64, outcome: &str) -> [Value; 2] {
    [
        invoke(w, "complete", Some(job), Some(token)),
        ok(
            w,
            "complete",
            Some(job),
            Some(token),
            json!({ "outcome": outcome }),
        ),
    ]
}

/// The final read of the whole queue: `jobs` maps each job to its state.
fn final_read(jobs: Value) -> [Value; 2] {
    [
        invoke("checker", "read", None, None),
        ok(
            "checker",
            "read",
            None,
            None,
            json!({"jobs": jobs, "problems": []}),
        ),
    ]
}

/// The lines as a JSONL file, index and time by position.
fn jsonl(lines: &[Value]) -> String {
    let mut text = String::new();
    for (i, line) in lines.iter().enumerate() {
        let mut e = line.clone();
        e["index"] = i.into();
        e["time_ms"] = i.into();
        text.push_str(&e.to_string());
        text.push('\n');
    }
    text
}

/// The lines read back as a history, through the reader every command
/// uses.
fn read(lines: &[Value]) -> Result<Vec<Event>, ReadError> {
    history::read(jsonl(lines).as_bytes(), "literal.jsonl")
}

/// The report of `invariant` on `lines`.
fn judge(lines: &[Value], invariant: &str) -> Report {
    let events = read(lines).expect("a well-formed literal history");
    check_all(&events)
        .into_iter()
        .find(|r| r.invariant == invariant)
        .unwrap_or_else(|| panic!("no report for {invariant}"))
}

fn counts(report: &Report, names: &[&str]) -> Vec<u64> {
    names
        .iter()
        .map(|n| *report.counts.get(n).unwrap_or(&u64::MAX))
        .collect()
}

#[test]
fn an_acknowledged_job_pending_at_the_end_is_lost_with_its_count() {
    let lines: Vec<Value> = [
        enqueued("p0", "JOB-1"),
        enqueued("p0", "JOB-2"),
        leased("w1", "JOB-1", 1),
        completed("w1", "JOB-1", 1, "settled"),
        final_read(json!({"JOB-1": "done", "JOB-2": "pending"})),
    ]
    .concat();
    let r = judge(&lines, "no-loss");
    assert_eq!(r.verdict, Verdict::Invalid);
    assert_eq!(
        counts(
            &r,
            &["attempted", "acknowledged", "done", "lost", "recovered"]
        ),
        [2, 2, 1, 1, 0]
    );
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    assert_eq!(
        r.violations[0].job.as_deref(),
        Some("JOB-2"),
        "{:?}",
        r.violations
    );
}

#[test]
fn a_job_delivered_or_read_that_no_enqueue_attempted_is_unexpected() {
    let lines: Vec<Value> = [
        enqueued("p0", "JOB-1"),
        leased("w1", "JOB-1", 1),
        completed("w1", "JOB-1", 1, "settled"),
        // Never enqueued, yet leased and settled...
        leased("w2", "JOB-9", 1),
        completed("w2", "JOB-9", 1, "settled"),
        // ... and one that is only in the final read.
        final_read(json!({"JOB-1": "done", "JOB-9": "done", "JOB-8": "pending"})),
    ]
    .concat();
    let r = judge(&lines, "admission");
    assert_eq!(r.verdict, Verdict::Invalid);
    assert_eq!(counts(&r, &["admitted", "unexpected"]), [1, 2]);
    assert!(
        r.violations
            .iter()
            .any(|v| v.text.starts_with("JOB-9: leased by w2")),
        "{:?}",
        r.violations
    );
    assert!(
        r.violations
            .iter()
            .any(|v| v.text.starts_with("JOB-8: pending")),
        "{:?}",
        r.violations
    );
    // No-loss has nothing to say against them: JOB-9 was settled.
    assert_eq!(judge(&lines, "no-loss").verdict, Verdict::Valid);
}

#[test]
fn a_lease_that_completes_before_its_enqueue_is_invoked_is_unexpected() {
    let lines: Vec<Value> = [
        leased("w1", "JOB-1", 1).to_vec(),
        enqueued("p0", "JOB-1").to_vec(),
        completed("w1", "JOB-1", 1, "settled").to_vec(),
        final_read(json!({"JOB-1": "done"})).to_vec(),
    ]
    .concat();
    let r = judge(&lines, "admission");
    assert_eq!(r.verdict, Verdict::Invalid);
    assert_eq!(counts(&r, &["unexpected"]), [1]);
}

#[test]
fn a_job_delivered_twice_is_duplicated_and_reported_not_failed() {
    let lines: Vec<Value> = [
        enqueued("p0", "JOB-1").to_vec(),
        enqueued("p0", "JOB-2").to_vec(),
        leased("w1", "JOB-1", 1).to_vec(),
        vec![
            invoke("w1", "crash", Some("JOB-1"), Some(1)),
            ok(
                "w1",
                "crash",
                Some("JOB-1"),
                Some(1),
                json!({"outcome": "crashed"}),
            ),
            invoke("reaper", "reap", None, None),
            ok(
                "reaper",
                "reap",
                None,
                None,
                json!({"outcome": "reaped", "reaped": [{"id": "JOB-1", "to": "pending"}]}),
            ),
        ],
        leased("w2", "JOB-1", 2).to_vec(),
        completed("w2", "JOB-1", 2, "settled").to_vec(),
        leased("w2", "JOB-2", 1).to_vec(),
        completed("w2", "JOB-2", 1, "settled").to_vec(),
        final_read(json!({"JOB-1": "done", "JOB-2": "done"})).to_vec(),
    ]
    .concat();
    let events = read(&lines).unwrap();
    let reports = check_all(&events);
    assert_eq!(overall(&reports), Verdict::Valid, "{reports:?}");
    let r = reports
        .iter()
        .find(|r| r.invariant == "settle-once")
        .unwrap();
    assert_eq!(
        counts(r, &["deliveries", "duplicate_deliveries", "duplicated"]),
        [3, 1, 1]
    );
}

#[test]
fn an_unacknowledged_enqueue_that_shows_up_is_recovered_not_unexpected() {
    let lines: Vec<Value> = [
        vec![
            // Timed out, but it landed: delivered and settled.
            invoke("p0", "enqueue", Some("JOB-1"), None),
            info("p0", "enqueue", Some("JOB-1"), None),
            // Timed out, landed, never leased: read at the end, dead. (A
            // job the history proves existed is owed: pending there, it
            // would be lost.)
            invoke("p0", "enqueue", Some("JOB-2"), None),
            info("p0", "enqueue", Some("JOB-2"), None),
            // Timed out and did not land: neither lost nor recovered.
            invoke("p0", "enqueue", Some("JOB-3"), None),
            info("p0", "enqueue", Some("JOB-3"), None),
            // Refused: known not to have happened.
            invoke("p0", "enqueue", Some("JOB-4"), None),
            fail("p0", "enqueue", Some("JOB-4"), None),
        ],
        leased("w1", "JOB-1", 1).to_vec(),
        completed("w1", "JOB-1", 1, "settled").to_vec(),
        final_read(json!({"JOB-1": "done", "JOB-2": "dead"})).to_vec(),
    ]
    .concat();
    let events = read(&lines).unwrap();
    let reports = check_all(&events);
    assert_eq!(overall(&reports), Verdict::Valid, "{reports:?}");
    let r = reports.iter().find(|r| r.invariant == "no-loss").unwrap();
    assert_eq!(
        counts(
            r,
            &[
                "attempted",
                "acknowledged",
                "unacknowledged",
                "recovered",
                "lost"
            ]
        ),
        [4, 0, 3, 2, 0]
    );
    let a = reports.iter().find(|r| r.invariant == "admission").unwrap();
    assert_eq!(counts(a, &["unexpected"]), [0]);
}

#[test]
fn a_job_whose_enqueue_answered_info_but_was_leased_then_vanished_is_lost_and_named() {
    let lines: Vec<Value> = [
        vec![
            invoke("p0", "enqueue", Some("JOB-1"), None),
            info("p0", "enqueue", Some("JOB-1"), None),
        ],
        leased("w1", "JOB-1", 1).to_vec(),
        // Leased, so it existed; absent at the end, never settled.
        final_read(json!({})).to_vec(),
    ]
    .concat();
    let r = judge(&lines, "no-loss");
    assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
    assert_eq!(
        counts(&r, &["acknowledged", "proven", "judged", "lost"]),
        [0, 1, 1, 1]
    );
    assert!(
        r.violations
            .iter()
            .any(|v| v.job.as_deref() == Some("JOB-1") && v.text.contains("(leased)")),
        "{r:?}"
    );
}

#[test]
fn a_history_that_exercises_nothing_is_unknown_and_its_lines_say_why() {
    // The only enqueue was refused: no job is owed, nothing was leased.
    let lines: Vec<Value> = [
        vec![
            invoke("p0", "enqueue", Some("JOB-1"), None),
            fail("p0", "enqueue", Some("JOB-1"), None),
        ],
        final_read(json!({})).to_vec(),
    ]
    .concat();
    let events = read(&lines).unwrap();
    let reports = check_all(&events);
    assert_eq!(overall(&reports), Verdict::Unknown, "{reports:?}");
    let r = reports.iter().find(|r| r.invariant == "no-loss").unwrap();
    assert!(r.not_exercised(), "{r:?}");
    assert_eq!(counts(r, &["judged"]), [0]);
    // The command's lines and its JSON say the same.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing.jsonl");
    std::fs::write(&path, jsonl(&lines)).unwrap();
    let out = ackgap(&["check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let shown = text(&out);
    let line = shown
        .lines()
        .find(|l| l.starts_with("no-loss"))
        .unwrap_or_default();
    assert!(line.contains("not exercised"), "{shown}");
    assert!(line.contains("judged 0 jobs owed"), "{shown}");
    let out = ackgap(&["check", "--json", path.to_str().unwrap()]);
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["verdict"], "unknown", "{json:#}");
    let no_loss = json["invariants"]
        .as_array()
        .and_then(|a| a.iter().find(|i| i["invariant"] == "no-loss"))
        .unwrap_or_else(|| panic!("{json:#}"));
    assert_eq!(no_loss["counts"]["judged"], 0, "{json:#}");
}

#[test]
fn a_job_read_done_that_no_complete_could_have_settled_is_a_phantom_done() {
    let lines: Vec<Value> = [
        enqueued("p0", "JOB-1").to_vec(),
        enqueued("p0", "JOB-2").to_vec(),
        enqueued("p0", "JOB-3").to_vec(),
        enqueued("p0", "JOB-4").to_vec(),
        enqueued("p0", "JOB-5").to_vec(),
        // JOB-1: never leased, never completed.
        // JOB-2: its complete was refused (fail).
        leased("w1", "JOB-2", 1).to_vec(),
        vec![
            invoke("w1", "complete", Some("JOB-2"), Some(1)),
            fail("w1", "complete", Some("JOB-2"), Some(1)),
        ],
        // JOB-3: its complete was fenced.
        leased("w1", "JOB-3", 1).to_vec(),
        completed("w1", "JOB-3", 1, "fenced").to_vec(),
        // JOB-4: the reply of its complete was lost: it could have settled.
        leased("w2", "JOB-4", 1).to_vec(),
        vec![
            invoke("w2", "complete", Some("JOB-4"), Some(1)),
            info("w2", "complete", Some("JOB-4"), Some(1)),
        ],
        // JOB-5: settled.
        leased("w2", "JOB-5", 1).to_vec(),
        completed("w2", "JOB-5", 1, "settled").to_vec(),
        final_read(json!({"JOB-1": "done", "JOB-2": "done", "JOB-3": "done",
                          "JOB-4": "done", "JOB-5": "done"}))
        .to_vec(),
    ]
    .concat();
    let r = judge(&lines, "no-loss");
    assert_eq!(r.verdict, Verdict::Invalid);
    assert_eq!(
        counts(&r, &["acknowledged", "done", "lost", "phantom_done"]),
        [5, 2, 0, 3]
    );
    let phantoms: Vec<&str> = r
        .violations
        .iter()
        .filter_map(|v| v.job.as_deref())
        .collect();
    assert_eq!(phantoms, ["JOB-1", "JOB-2", "JOB-3"], "{:?}", r.violations);
}

/// A stale settle accepted after the reaper took the job back and a new
/// lease was granted: fenced-settlement must say invalid.
fn stale_settle() -> Vec<Value> {
    [
        enqueued("p0", "JOB-1").to_vec(),
        leased("w1", "JOB-1", 1).to_vec(),
        vec![
            invoke("reaper", "reap", None, None),
            ok(
                "reaper",
                "reap",
                None,
                None,
                json!({"outcome": "reaped", "reaped": [{"id": "JOB-1", "to": "pending"}]}),
            ),
        ],
        leased("w2", "JOB-1", 2).to_vec(),
        completed("w1", "JOB-1", 1, "settled").to_vec(),
        final_read(json!({"JOB-1": "done"})).to_vec(),
    ]
    .concat()
}

#[test]
fn a_stale_settle_after_a_reap_is_refused_not_passed_when_an_index_is_reused() {
    let lines = stale_settle();
    let r = judge(&lines, "fenced-settlement");
    assert_eq!(r.verdict, Verdict::Invalid, "{r:?}");
    // The stale complete's invoke (line 9) given the index of the reap's
    // completion (line 6): paired silently, the violation would vanish.
    let mut events = read(&lines).unwrap();
    events[8].index = events[5].index;
    let reports = check_all(&events);
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(
        (reports[0].invariant, reports[0].verdict),
        ("well-formed", Verdict::Unknown)
    );
    let mut text = String::new();
    for e in &events {
        text.push_str(&serde_json::to_string(e).unwrap());
        text.push('\n');
    }
    match history::read(text.as_bytes(), "reused.jsonl") {
        Err(ReadError::IllFormed { line, reason, .. }) => {
            assert_eq!((line, reason.rule), (9, Rule::IndexOrder), "{reason}");
        }
        other => panic!("an index reused is not refused: {other:?}"),
    }
}

#[test]
fn each_rule_of_the_grammar_refuses_a_literal_history_at_its_line() {
    let clean = stale_settle();
    let cases: Vec<(Rule, usize, Vec<Value>)> = vec![
        // A completion with no open invoke: the reaper's ok alone.
        (Rule::CompletionWithoutInvoke, 5, {
            let mut h = clean.clone();
            h.remove(4);
            h
        }),
        // A second invoke while w1's lease is open.
        (Rule::InvokeWhileOpen, 4, {
            let mut h = clean.clone();
            h.insert(3, invoke("w1", "complete", Some("JOB-1"), Some(1)));
            h
        }),
        // A completion of another operation than its process invoked.
        (Rule::CompletionMismatch, 10, {
            let mut h = clean.clone();
            h[9]["token"] = 2.into();
            h
        }),
        // A complete that names no token.
        (Rule::MissingField, 9, {
            let mut h = clean.clone();
            h[8].as_object_mut().unwrap().remove("token");
            h
        }),
        // Something after the final read.
        (Rule::AfterFinalRead, 13, {
            let mut h = clean.clone();
            h.extend(enqueued("p1", "JOB-2"));
            h
        }),
    ];
    for (rule, line, lines) in cases {
        match read(&lines) {
            Err(ReadError::IllFormed {
                line: at, reason, ..
            }) => assert_eq!((reason.rule, at), (rule, line), "{reason}"),
            other => panic!("{rule} is not refused: {other:?}"),
        }
    }
}

/// One job enqueued, leased once and completed, and read back `done`:
/// a history that gives most invariants no chance to break.
fn quiet() -> Vec<Value> {
    [
        enqueued("p0", "JOB-1").to_vec(),
        leased("w1", "JOB-1", 1).to_vec(),
        completed("w1", "JOB-1", 1, "settled").to_vec(),
        final_read(json!({"JOB-1": "done"})).to_vec(),
    ]
    .concat()
}

/// The same job enqueued twice (the second refused), leased with
/// max_attempts 2, its effect applied, leased again to another worker, the
/// first holder's complete fenced, the second's settled, and a final read
/// with one effect: one chance each to break fenced-settlement,
/// settle-once, admission, bounded-retries and effect-once, all taken
/// correctly.
fn busy() -> Vec<Value> {
    let mut enqueue = invoke("p0", "enqueue", Some("JOB-1"), None);
    enqueue["value"] = json!({"max_attempts": 2});
    [
        vec![
            enqueue,
            ok(
                "p0",
                "enqueue",
                Some("JOB-1"),
                None,
                json!({"outcome": "enqueued"}),
            ),
            invoke("p1", "enqueue", Some("JOB-1"), None),
            ok(
                "p1",
                "enqueue",
                Some("JOB-1"),
                None,
                json!({"outcome": "duplicate"}),
            ),
        ],
        leased("w1", "JOB-1", 1).to_vec(),
        vec![
            invoke("w1", "effect", Some("JOB-1"), Some(1)),
            ok("w1", "effect", Some("JOB-1"), Some(1), json!({})),
        ],
        leased("w2", "JOB-1", 2).to_vec(),
        completed("w1", "JOB-1", 1, "fenced").to_vec(),
        completed("w2", "JOB-1", 2, "settled").to_vec(),
        vec![
            invoke("checker", "read", None, None),
            ok(
                "checker",
                "read",
                None,
                None,
                json!({"jobs": {"JOB-1": "done"}, "problems": [], "effects": {"JOB-1": 1},
                       "consumer": "marker", "effect_once": true}),
            ),
        ],
    ]
    .concat()
}

#[test]
fn an_invariant_the_history_gave_no_chance_to_break_is_not_exercised_never_valid() {
    const CHANCES: [&str; 5] = [
        "fenced-settlement",
        "settle-once",
        "admission",
        "bounded-retries",
        "effect-once",
    ];
    let quiet = read(&quiet()).unwrap();
    let reports = check_all(&quiet);
    for name in CHANCES
        .iter()
        .chain(&["lease-respected", "lease-exclusive", "delay-respected"])
    {
        let r = reports.iter().find(|r| r.invariant == *name).unwrap();
        assert_eq!(r.verdict, Verdict::Unknown, "{name}: {r:?}");
        assert!(r.not_exercised(), "{name}: {r:?}");
        assert_eq!(r.verdict_text(), "not exercised", "{name}");
        assert_eq!(r.exercised().map(|(n, _)| n), Some(0), "{name}");
    }
    // The run held where it was tested, and its line names the rest.
    assert_eq!(overall(&reports), Verdict::Valid, "{reports:?}");
    assert_eq!(
        ackgap::check::verdict_line(&reports),
        "valid; not exercised: fenced-settlement, settle-once, admission, effect-once, \
         bounded-retries, lease-respected, lease-exclusive, delay-respected"
    );
    // One chance each, taken correctly: valid, with the chance counted.
    let busy = read(&busy()).unwrap();
    let reports = check_all(&busy);
    for name in CHANCES {
        let r = reports.iter().find(|r| r.invariant == name).unwrap();
        assert_eq!(r.verdict, Verdict::Valid, "{name}: {r:?}");
        assert_eq!(r.exercised().map(|(n, _)| n), Some(1), "{name}: {r:?}");
    }
}

#[test]
fn require_exercised_turns_a_valid_run_with_a_required_invariant_unexercised_into_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quiet.jsonl");
    std::fs::write(&path, jsonl(&quiet())).unwrap();
    let file = path.to_str().unwrap();
    let out = ackgap(&["check", file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("verdict: valid; not exercised: fenced-settlement,"),
        "{}",
        text(&out)
    );
    // Required and exercised (no-loss: one job owed): still valid.
    let out = ackgap(&["check", "--require-exercised", "no-loss,structure", file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for required in ["fenced-settlement", "all"] {
        let out = ackgap(&["check", "--require-exercised", required, file]);
        assert_eq!(out.status.code(), Some(2), "{required}: {}", text(&out));
        assert!(
            text(&out).contains("--require-exercised: not exercised: fenced-settlement"),
            "{}",
            text(&out)
        );
    }
    // A name that is no invariant is a usage error, before anything runs.
    let out = ackgap(&["check", "--require-exercised", "fenced", file]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("\"fenced\" is not an invariant"),
        "{}",
        text(&out)
    );
}

/// A real run on Valkey re-judges valid; the same history reversed, or
/// with one index reused, is refused with exit 64 naming the line and the
/// rule, never judged.
#[test]
fn a_real_history_reversed_or_with_an_index_reused_is_refused_with_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("real.jsonl");
    let out = ackgap(&[
        "chaos",
        "--seed",
        "3",
        "--duration",
        "2s",
        "--jobs",
        "30",
        "--faults",
        "worker",
        "--history",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = ackgap(&["check", "--json", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_name: BTreeMap<&str, &Value> = report["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["invariant"].as_str().unwrap(), &r["counts"]))
        .collect();
    assert_eq!(by_name["admission"]["unexpected"], 0);
    assert_eq!(by_name["no-loss"]["phantom_done"], 0);
    assert_eq!(by_name["no-loss"]["lost"], 0);

    let full = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = full.lines().collect();

    let reversed = dir.path().join("reversed.jsonl");
    let mut back: Vec<&str> = lines.clone();
    back.reverse();
    std::fs::write(&reversed, back.join("\n") + "\n").unwrap();
    let out = ackgap(&["check", reversed.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    let msg = text(&out);
    assert!(
        msg.contains("reversed.jsonl:1: not a well-formed history: completion-without-invoke"),
        "{msg}"
    );
    assert!(
        !msg.contains("verdict"),
        "a refused history is judged: {msg}"
    );

    // Line 11 takes line 10's index.
    let reused = dir.path().join("reused.jsonl");
    let mut events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    events[10]["index"] = events[9]["index"].clone();
    let body: Vec<String> = events.iter().map(Value::to_string).collect();
    std::fs::write(&reused, body.join("\n") + "\n").unwrap();
    let out = ackgap(&["check", reused.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("reused.jsonl:11: not a well-formed history: index-order"),
        "{}",
        text(&out)
    );
}
