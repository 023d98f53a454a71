//! The history reader and the checkers, fed anything.
//!
//! Two halves, chosen by the first byte:
//!
//! - **bytes**: the rest is a history file as it might lie on disk (cut
//!   short, binary, half JSON). Reading it never panics; when it is refused,
//!   the error names a line that exists, that line alone is refused too,
//!   and every line before it reads; when it reads, every checker gives a
//!   verdict.
//! - **structured**: the rest drives `arbitrary` to build well-formed events
//!   from the histories' own vocabulary (processes, operations, jobs,
//!   tokens, outcomes, final reads). They are written as JSON lines, must
//!   read back equal, and `check_all` must judge them without a checker
//!   panicking (libFuzzer's panic hook turns a panic inside `check_all`'s
//!   `catch_unwind` into a crash, so a checker panic is a finding).

#![no_main]

use ackgap::check::{check_all, overall};
use ackgap::history::{read, Event, EventKind as Kind, ReadError, F, FORMAT_VERSION};
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

/// Any bytes as a history file.
fn bytes(data: &[u8]) {
    match read(data, PATH) {
        Ok(events) => judge(&events),
        Err(err) => {
            let line = match &err {
                ReadError::Malformed { line, .. } | ReadError::Version { line, .. } => *line,
                other => panic!("reading from memory failed with {other}"),
            };
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
            assert!(
                read(lines[line - 1], PATH).is_err(),
                "line {line} reads on its own"
            );
            let before = lines[..line - 1].join(&b'\n');
            assert!(
                read(before.as_slice(), PATH).is_ok(),
                "a line before {line} is refused"
            );
        }
    }
}

/// Every checker judges `events`; none crashes.
fn judge(events: &[Event]) {
    let reports = check_all(events);
    assert!(!reports.is_empty(), "no checker ran");
    for report in &reports {
        assert_ne!(report.invariant, "checker-crashed", "{report:?}");
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

/// One event's choices, each an index into the vocabularies above.
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
    /// Skip or repeat an index now and then.
    index_skew: Option<u8>,
}

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

/// Well-formed events, written as JSON lines and read back.
fn structured(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(choices) = Vec::<Choice>::arbitrary(&mut u) else {
        return;
    };
    let mut index = 0u64;
    let events: Vec<Event> = choices
        .iter()
        .map(|c| {
            index = match c.index_skew {
                Some(s) => index.wrapping_add(u64::from(s % 3)).wrapping_sub(1),
                None => index,
            };
            let e = Event {
                v: FORMAT_VERSION,
                index,
                time_ms: u64::from(c.time_ms),
                process: pick(&PROCESSES, c.process).to_owned(),
                kind: pick(&KINDS, c.kind),
                f: pick(&FS, c.f),
                job: c.job.map(|j| pick(&JOBS, j).to_owned()),
                token: c.token.map(u64::from),
                value: c.value.json(),
                error: c.error.map(|e| format!("error {e}")),
            };
            index = index.wrapping_add(1);
            e
        })
        .collect();
    let mut text = Vec::new();
    for e in &events {
        serde_json::to_writer(&mut text, e).expect("an event serializes");
        text.push(b'\n');
    }
    let back = read(text.as_slice(), PATH).expect("a written history reads back");
    assert_eq!(back, events, "a history changed on its way through JSON");
    judge(&back);
}
