//! The history reader and the checkers, fed anything: every byte string
//! is refused or judged, never a panic.
//!
//! Two halves, chosen by the first byte:
//!
//! - **bytes**: the rest is a history file as it might lie on disk (cut
//!   short, binary, half JSON, shuffled). Reading it never panics; when it
//!   is refused, the error names a line that exists: a line that is not an
//!   event is refused alone too, and every line before it is an event; a
//!   history that breaks the grammar (`history::wellformed`) is refused at
//!   a line that holds an event. When it reads, `check_all` judges it:
//!   every checker gives a verdict, none panics, none refuses it.
//! - **structured**: the rest drives `arbitrary` to build well-formed
//!   histories from their own vocabulary (processes, operations, jobs,
//!   tokens, outcomes, final reads), each completion answering its
//!   process's open invoke, indexes increasing with gaps. They are written
//!   as JSON lines, must read back equal and be judged without a checker
//!   panicking (libFuzzer's panic hook turns a panic inside `check_all`'s
//!   `catch_unwind` into a crash, so a checker panic is a finding). Then
//!   the same history with one index reused, and with two neighbouring
//!   lines swapped, must be refused, never judged.

#![no_main]

use std::collections::BTreeMap;

use ackgap::check::{check_all, overall};
use ackgap::history::{read, Event, EventKind as Kind, ReadError, Rule, F, FORMAT_VERSION};
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;

const PATH: &str = "fuzz.jsonl";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        bytes(rest);
    } else {
        structured(rest);
    }
});

/// True for an error that says a line is not an event.
fn not_an_event<T>(read: &Result<T, ReadError>) -> bool {
    matches!(
        read,
        Err(ReadError::Malformed { .. } | ReadError::Version { .. })
    )
}

/// Any bytes as a history file.
fn bytes(data: &[u8]) {
    let err = match read(data, PATH) {
        Ok(events) => return judge(&events),
        Err(err) => err,
    };
    let line = match &err {
        ReadError::Malformed { line, .. }
        | ReadError::Version { line, .. }
        | ReadError::IllFormed { line, .. } => *line,
        other => panic!("reading from memory failed with {other}"),
    };
    assert_eq!(err.line(), Some(line));
    assert!(
        err.to_string().starts_with(&format!("{PATH}:{line}: ")),
        "the error does not lead with its line: {err}"
    );
    let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    assert!(
        (1..=lines.len()).contains(&line),
        "line {line} of {}",
        lines.len()
    );
    // The line read where it stands: past the first line a byte-order
    // mark is not skipped, so a line after a blank one (blank lines are
    // skipped) is read as the second.
    let alone = match line {
        1 => read(lines[0], PATH),
        _ => read([b"\n", lines[line - 1]].concat().as_slice(), PATH),
    };
    let before = lines[..line - 1].join(&b'\n');
    assert!(
        !not_an_event(&read(before.as_slice(), PATH)),
        "a line before {line} is not an event"
    );
    match err {
        // An event that breaks the grammar is an event.
        ReadError::IllFormed { .. } => assert!(
            !not_an_event(&alone),
            "line {line} breaks the grammar but is not an event"
        ),
        _ => assert!(not_an_event(&alone), "line {line} is an event on its own"),
    }
}

/// Every checker judges `events`; none crashes.
fn judge(events: &[Event]) {
    let reports = check_all(events);
    assert!(!reports.is_empty(), "no checker ran");
    for report in &reports {
        assert_ne!(report.invariant, "checker-crashed", "{report:?}");
        // It read, so it is well formed: judged, not refused.
        assert_ne!(report.invariant, "well-formed", "{report:?}");
    }
    let _ = overall(&reports);
}

const PROCESSES: [&str; 6] = ["producer", "w0", "w1", "w2", "reaper", "checker"];
const JOBS: [&str; 4] = ["JOB-0", "JOB-1", "JOB-2", "job-not-branded"];
const OUTCOMES: [&str; 11] = [
    "enqueued",
    "duplicate",
    "leased",
    "settled",
    "already_settled",
    "fenced",
    "missing",
    "requeued",
    "dead",
    "extended",
    "pending",
];
const STATES: [&str; 6] = ["pending", "active", "done", "dead", "?", ""];
const FS: [F; 10] = [
    F::Enqueue,
    F::Lease,
    F::Effect,
    F::Complete,
    F::Fail,
    F::Extend,
    F::Reap,
    F::Crash,
    F::Fault,
    F::Read,
];
const KINDS: [Kind; 4] = [Kind::Invoke, Kind::Ok, Kind::Fail, Kind::Info];

/// An event's value: nothing, an outcome, a final read, or odd JSON.
#[derive(Arbitrary, Debug)]
enum Value {
    None,
    Outcome(u8),
    Read(Vec<(u8, u8)>, Vec<u8>),
    Number(i64),
    Text(String),
}

impl Value {
    fn json(&self) -> Option<serde_json::Value> {
        use serde_json::json;
        Some(match self {
            Value::None => return None,
            Value::Outcome(o) => json!({ "outcome": pick(&OUTCOMES, *o) }),
            Value::Read(jobs, problems) => {
                let jobs: serde_json::Map<String, serde_json::Value> = jobs
                    .iter()
                    .map(|(j, s)| (pick(&JOBS, *j).to_owned(), json!(pick(&STATES, *s))))
                    .collect();
                let problems: Vec<String> = problems.iter().map(|p| format!("p{p}")).collect();
                json!({ "jobs": jobs, "problems": problems })
            }
            Value::Number(n) => json!(n),
            Value::Text(t) => json!(t),
        })
    }
}

fn pick<T: Copy>(from: &[T], i: u8) -> T {
    from[usize::from(i) % from.len()]
}

/// One event's choices, each an index into the vocabularies above. A
/// process with an operation open completes it (`kind` picks ok, fail or
/// info); one without invokes `f`.
#[derive(Arbitrary, Debug)]
struct Choice {
    process: u8,
    kind: u8,
    f: u8,
    job: Option<u8>,
    token: Option<u8>,
    value: Value,
    error: Option<u8>,
    time_ms: u16,
    /// Skip an index or two now and then (gaps are allowed).
    index_gap: Option<u8>,
}

/// Whether an operation `f` names a job, and a token, at its invoke.
fn needs(f: F) -> (bool, bool) {
    let job = matches!(
        f,
        F::Enqueue | F::Effect | F::Complete | F::Fail | F::Extend | F::Crash
    );
    (job, job && f != F::Enqueue)
}

/// The completion of `invoke` that choice `c` makes.
fn completion(invoke: Event, c: &Choice, index: u64) -> Event {
    let kind = pick(&KINDS[1..], c.kind);
    let mut e = Event {
        index,
        time_ms: u64::from(c.time_ms),
        kind,
        value: c.value.json(),
        error: c.error.map(|e| format!("error {e}")),
        ..invoke
    };
    if e.f == F::Lease && kind == Kind::Ok {
        // A grant names its job and token; any other answer may.
        let leased = matches!(c.value, Value::Outcome(o) if pick(&OUTCOMES, o) == "leased");
        // What the invoke named already, the completion names alike.
        if e.job.is_none() && (leased || c.job.is_some()) {
            e.job = Some(pick(&JOBS, c.job.unwrap_or(0)).to_owned());
        }
        if e.token.is_none() && (leased || c.token.is_some()) {
            e.token = Some(u64::from(c.token.unwrap_or(1)));
        }
    }
    e
}

/// The invoke of `process` that choice `c` makes.
fn invoke(process: &str, c: &Choice, index: u64) -> Event {
    let f = pick(&FS, c.f);
    let (job, token) = needs(f);
    Event {
        v: FORMAT_VERSION,
        index,
        time_ms: u64::from(c.time_ms),
        process: process.to_owned(),
        kind: Kind::Invoke,
        f,
        job: (job || c.job.is_some()).then(|| pick(&JOBS, c.job.unwrap_or(0)).to_owned()),
        token: (token || c.token.is_some()).then(|| u64::from(c.token.unwrap_or(1))),
        value: c.value.json(),
        error: None,
    }
}

/// A well-formed history built from `choices`.
fn history(choices: &[Choice]) -> Vec<Event> {
    let mut index = 0u64;
    // process -> its open invoke.
    let mut open: BTreeMap<&str, Event> = BTreeMap::new();
    let mut events: Vec<Event> = Vec::new();
    for c in choices {
        let process = pick(&PROCESSES, c.process);
        let e = match open.remove(process) {
            Some(inv) => completion(inv, c, index),
            None => {
                let e = invoke(process, c, index);
                open.insert(process, e.clone());
                e
            }
        };
        events.push(e);
        index += 1 + u64::from(c.index_gap.map_or(0, |g| g % 3));
    }
    // Nothing after the final read: cut what follows the last ok read.
    if let Some(last) = events
        .iter()
        .rposition(|e| e.f == F::Read && e.kind == Kind::Ok)
    {
        events.truncate(last + 1);
    }
    events
}

fn jsonl(events: &[Event]) -> Vec<u8> {
    let mut text = Vec::new();
    for e in events {
        serde_json::to_writer(&mut text, e).expect("an event serializes");
        text.push(b'\n');
    }
    text
}

/// Well-formed histories, written as JSON lines and read back; the same
/// with an index reused or two neighbouring lines swapped is refused.
fn structured(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(choices) = Vec::<Choice>::arbitrary(&mut u) else {
        return;
    };
    let events = history(&choices);
    let back = read(jsonl(&events).as_slice(), PATH).expect("a well-formed history reads back");
    assert_eq!(back, events, "a history changed on its way through JSON");
    judge(&back);
    if events.len() < 2 {
        return;
    }
    let k = 1 + usize::from(u.arbitrary::<u16>().unwrap_or(0)) % (events.len() - 1);
    let mut reused = events.clone();
    reused[k].index = reused[k - 1].index;
    match read(jsonl(&reused).as_slice(), PATH) {
        Err(ReadError::IllFormed { line, reason, .. }) => {
            assert_eq!((line, reason.rule), (k + 1, Rule::IndexOrder), "{reason}")
        }
        other => panic!(
            "an index reused at line {} is not refused: {other:?}",
            k + 1
        ),
    }
    let refused = check_all(&reused);
    assert!(
        refused.len() == 1 && refused[0].invariant == "well-formed",
        "an index reused is judged: {refused:?}"
    );
    let mut swapped = events;
    swapped.swap(k - 1, k);
    match read(jsonl(&swapped).as_slice(), PATH) {
        Err(ReadError::IllFormed { line, .. }) => assert!(
            line == k || line == k + 1,
            "refused at line {line}, swapped {k} and {}",
            k + 1
        ),
        other => panic!("lines {k} and {} swapped are not refused: {other:?}", k + 1),
    }
}
