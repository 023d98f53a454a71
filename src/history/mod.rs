//! Histories the Jepsen way: every operation is an `invoke` followed by `ok`,
//! `fail` (known not to have happened) or `info` (unknown: a timeout, a lost
//! reply). Histories are written as JSON lines, one event a line, flushed as
//! they go, so a crash of the tool still leaves everything up to the crash.
//!
//! The checkers (the `check` module) read nothing but a history: they
//! judge any queue, not only the reference one. [`record`] is where every
//! run writes its operations.
//!
//! # Design notes
//!
//! An `Event` carries its index, time, process, `EventKind` (invoke, ok,
//! fail, info), operation, job, token, value, error and format version. The
//! `Recorder` appends and flushes every event to a JSONL file as it goes.
//! The reader names the line of any malformed event, and checks the grammar
//! of `wellformed`.

use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub mod fault;
pub mod record;
pub mod wellformed;

pub use fault::{Action, FaultEvent};
pub use record::{Process, Recorded};
pub use wellformed::{validate, IllFormed, Rule};

/// The version of the history format, written in every event.
pub const FORMAT_VERSION: u32 = 1;

/// The type of an event.
///
/// Deliberately exhaustive: Jepsen's four (invoke, then ok, fail or info)
/// are the whole vocabulary of a history, and every checker matches them
/// all. A new kind of event would be a new format version (`v`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The operation was started.
    Invoke,
    /// It happened, with this value.
    Ok,
    /// It did not happen (refused, or never sent).
    Fail,
    /// Unknown: it may or may not have happened.
    Info,
}

/// What an operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum F {
    /// A producer enqueues `job`.
    Enqueue,
    /// A worker asks for a lease.
    Lease,
    /// A worker applies the consumer's effect for `job`.
    Effect,
    /// A worker settles `job` with `token` as done.
    Complete,
    /// A worker settles `job` with `token` as failed.
    Fail,
    /// A worker extends its lease.
    Extend,
    /// The reaper runs.
    Reap,
    /// A worker crashes and forgets its leases.
    Crash,
    /// A fault is injected or healed (by the nemesis).
    Fault,
    /// The queue is read back whole: `value` holds the state of each job
    /// and `problems` any structure violation.
    Read,
}

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The format version ([`FORMAT_VERSION`]).
    #[serde(default = "default_version")]
    pub v: u32,
    /// Position in the history, from 0.
    pub index: u64,
    /// Milliseconds since the history began (wall clock of the tool).
    pub time_ms: u64,
    /// Who acted: `producer`, `w1`, `reaper`, `nemesis`, `checker`.
    pub process: String,
    /// invoke, ok, fail or info.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The operation.
    pub f: F,
    /// The job concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The fencing token carried or granted, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// The outcome (`enqueued`, `duplicate`, `settled`, `fenced`, ...) or
    /// the data of a read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
    /// Why a `fail` or `info` happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Event {
    /// The fault event this is (a `fault` operation of the nemesis, `ok`,
    /// whose value names a kind this build knows), typed; `None` for any
    /// other event, an explorer's tick included.
    pub fn fault(&self) -> Option<FaultEvent> {
        if self.f != F::Fault || self.kind != EventKind::Ok {
            return None;
        }
        FaultEvent::deserialize(self.value.as_ref()?).ok()
    }

    /// An event of a test's history: its time, process, kind and operation,
    /// nothing else.
    #[cfg(test)]
    pub(crate) fn bare(time_ms: u64, process: &str, kind: EventKind, f: F) -> Event {
        Event {
            v: FORMAT_VERSION,
            index: 0,
            time_ms,
            process: process.into(),
            kind,
            f,
            job: None,
            token: None,
            value: None,
            error: None,
        }
    }
}

fn default_version() -> u32 {
    FORMAT_VERSION
}

/// Where events go as they are recorded: memory, and optionally a file.
struct Sink {
    events: Vec<Event>,
    file: Option<std::io::BufWriter<std::fs::File>>,
    write_error: Option<String>,
}

/// Records a history. Cheap to clone; clones append to the same history.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    sink: Arc<Mutex<Sink>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::in_memory()
    }
}

/// A half-open operation: what [`Recorder::invoke`] returns, to be closed
/// with ok, fail or info.
#[derive(Debug)]
pub struct Pending {
    process: String,
    f: F,
    job: Option<String>,
    token: Option<u64>,
}

impl Recorder {
    /// A recorder that keeps events in memory only.
    pub fn in_memory() -> Recorder {
        Recorder {
            start: Instant::now(),
            sink: Arc::new(Mutex::new(Sink {
                events: Vec::new(),
                file: None,
                write_error: None,
            })),
        }
    }

    /// A recorder that also writes every event to `path` as a JSON line,
    /// flushed at once.
    /// An error says what is wrong in words: a file standing where a
    /// directory of the path should be is named, not reported as the
    /// system's "File exists".
    pub fn to_file(path: &Path) -> std::io::Result<Recorder> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| in_the_way(dir, e))?;
        }
        let dir = path.parent().unwrap_or(Path::new(""));
        let file = std::fs::File::create(path).map_err(|e| in_the_way(dir, e))?;
        let rec = Recorder::in_memory();
        rec.sink.lock().expect("history lock").file = Some(std::io::BufWriter::new(file));
        Ok(rec)
    }

    /// Appends one event about operation `op`.
    fn push(
        &self,
        op: &Pending,
        kind: EventKind,
        value: Option<serde_json::Value>,
        error: Option<String>,
    ) {
        let mut sink = self.sink.lock().expect("history lock");
        // Read under the lock, so that time never goes back as the index
        // goes forward.
        let time_ms = self.start.elapsed().as_millis() as u64;
        let event = Event {
            v: FORMAT_VERSION,
            index: sink.events.len() as u64,
            time_ms,
            process: op.process.clone(),
            kind,
            f: op.f,
            job: op.job.clone(),
            token: op.token,
            value,
            error,
        };
        if let Some(file) = sink.file.as_mut() {
            let line = serde_json::to_string(&event).expect("an event serializes");
            let res = writeln!(file, "{line}").and_then(|_| file.flush());
            if let Err(e) = res {
                sink.write_error.get_or_insert_with(|| e.to_string());
            }
        }
        sink.events.push(event);
    }

    /// Records the invocation of an operation.
    pub fn invoke(&self, process: &str, f: F, job: Option<&str>, token: Option<u64>) -> Pending {
        let op = Pending {
            process: process.to_owned(),
            f,
            job: job.map(str::to_owned),
            token,
        };
        self.push(&op, EventKind::Invoke, None, None);
        op
    }

    /// Records the invocation of an operation with its arguments as `value`
    /// (an enqueue's payload).
    pub fn push_invoke_with(
        &self,
        process: &str,
        f: F,
        job: Option<&str>,
        value: serde_json::Value,
    ) -> Pending {
        let op = Pending {
            process: process.to_owned(),
            f,
            job: job.map(str::to_owned),
            token: None,
        };
        self.push(&op, EventKind::Invoke, Some(value), None);
        op
    }

    /// Closes `op` as ok with `value`; `job` and `token` may be filled in
    /// now (a lease learns its job on completion).
    pub fn ok(
        &self,
        mut op: Pending,
        job: Option<&str>,
        token: Option<u64>,
        value: serde_json::Value,
    ) {
        if let Some(job) = job {
            op.job = Some(job.to_owned());
        }
        op.token = token.or(op.token);
        self.push(&op, EventKind::Ok, Some(value), None);
    }

    /// Closes `op` as failed: it did not happen.
    pub fn fail(&self, op: Pending, error: String) {
        self.push(&op, EventKind::Fail, None, Some(error));
    }

    /// Closes `op` as failed with `error`, keeping `value` (a fault event
    /// that did not happen says which it was).
    pub(crate) fn fail_with(&self, op: Pending, value: serde_json::Value, error: String) {
        self.push(&op, EventKind::Fail, Some(value), Some(error));
    }

    /// The index the next event will get: an action that starts after
    /// reading it happened after every event below it was recorded.
    pub(crate) fn next_index(&self) -> u64 {
        self.sink.lock().expect("history lock").events.len() as u64
    }

    /// Closes `op` as unknown: it may have happened.
    pub fn info(&self, op: Pending, error: String) {
        self.push(&op, EventKind::Info, None, Some(error));
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.sink.lock().expect("history lock").events.clone()
    }

    /// A copy of the events from index `from` on (none past the end): a
    /// watcher reads a growing history in steps without copying it whole.
    pub fn events_from(&self, from: usize) -> Vec<Event> {
        let sink = self.sink.lock().expect("history lock");
        sink.events.get(from..).unwrap_or_default().to_vec()
    }

    /// The first error met while writing the file, if any.
    pub fn write_error(&self) -> Option<String> {
        self.sink.lock().expect("history lock").write_error.clone()
    }
}

/// Why a stored history could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not an event.
    #[error("{path}:{line}: not a history event: {reason}")]
    Malformed {
        /// The file.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The history was written by a newer, unknown format version.
    #[error("{path}:{line}: history format version {found} is not supported (this ackgap reads version {FORMAT_VERSION})")]
    Version {
        /// The file.
        path: String,
        /// The line number, from 1.
        line: usize,
        /// The version found.
        found: u32,
    },
    /// Every line is an event, but together they are not a history: one
    /// breaks a rule of the grammar ([`wellformed`]). Refused, never judged.
    #[error("{path}:{line}: not a well-formed history: {reason}")]
    IllFormed {
        /// The file.
        path: String,
        /// The line number, from 1, of the first event that breaks a rule.
        line: usize,
        /// The rule and what breaks it.
        reason: IllFormed,
    },
}

impl ReadError {
    /// The line the error names, from 1 (`None` for an I/O error).
    pub fn line(&self) -> Option<usize> {
        match self {
            ReadError::Io { .. } => None,
            ReadError::Malformed { line, .. }
            | ReadError::Version { line, .. }
            | ReadError::IllFormed { line, .. } => Some(*line),
        }
    }
}

/// Reads a history from JSON lines and checks that it is well formed
/// ([`validate`]). A UTF-8 byte-order mark before the first line (an
/// editor's) is skipped, and so are blank lines; a line that is not an event,
/// or the first event that breaks the grammar, is an error naming its line
/// number.
pub fn read(reader: impl BufRead, path: &str) -> Result<Vec<Event>, ReadError> {
    let mut events = Vec::new();
    // The line of each event, from 1.
    let mut lines = Vec::new();
    for (n, line) in reader.split(b'\n').enumerate() {
        let line = line.map_err(|source| ReadError::Io {
            path: path.to_owned(),
            source,
        })?;
        let line = match n {
            0 => line.strip_prefix(BOM).unwrap_or(&line),
            _ => &line,
        };
        let text = String::from_utf8_lossy(line);
        if text.trim().is_empty() {
            continue;
        }
        let event: Event = serde_json::from_str(&text).map_err(|e| ReadError::Malformed {
            path: path.to_owned(),
            line: n + 1,
            reason: format!("{e}; {EXPECTED_EVENT}"),
        })?;
        if event.v > FORMAT_VERSION {
            return Err(ReadError::Version {
                path: path.to_owned(),
                line: n + 1,
                found: event.v,
            });
        }
        events.push(event);
        lines.push(n + 1);
    }
    validate(&events).map_err(|reason| ReadError::IllFormed {
        path: path.to_owned(),
        line: lines[reason.position],
        reason,
    })?;
    Ok(events)
}

/// What a history's line is, said when a line is not an event.
const EXPECTED_EVENT: &str = "a history is JSON lines, one event a line, as `ackgap run` and `ackgap chaos` write it (`*.jsonl`: {\"index\":0,\"time_ms\":0,\"process\":\"w0\",\"type\":\"invoke\",\"f\":\"lease\",...})";

/// The file's whole text when it is a run's summary (the `.json` beside
/// a history, or a `--json` report: one JSON object, on one line or many,
/// with a `verdict`) rather than a history: why, and the history it
/// names when it does.
fn summary_instead(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    // A summary is small; a large file is not read twice.
    if meta.len() > 64 << 20 {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    if v.get("verdict").is_none() || v.get("type").is_some() {
        return None;
    }
    let history = ["history", "file"]
        .iter()
        .find_map(|k| v[*k].as_str())
        .map(|h| format!(": its history is {h}"))
        .unwrap_or_default();
    Some(format!(
        "this is a run's summary (one JSON object with a verdict), not a history{history}; {EXPECTED_EVENT}"
    ))
}

/// The UTF-8 byte-order mark, U+FEFF: some editors start a file with it.
const BOM: &[u8] = "\u{feff}".as_bytes();

/// Reads a history file.
pub fn read_file(path: &Path) -> Result<Vec<Event>, ReadError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| ReadError::Io {
        path: shown.clone(),
        source,
    })?;
    match read(std::io::BufReader::new(file), &shown) {
        Err(ReadError::Malformed {
            path: p,
            line,
            reason,
        }) => Err(ReadError::Malformed {
            reason: summary_instead(path).unwrap_or(reason),
            path: p,
            line,
        }),
        other => other,
    }
}

/// `e`, met creating a file in directory `dir`, in words when a file
/// stands where `dir` or one of its parents should be (the system says
/// only "File exists" or "Not a directory").
pub fn in_the_way(dir: &Path, e: std::io::Error) -> std::io::Error {
    match dir.ancestors().find(|a| a.is_file()) {
        Some(file) => std::io::Error::new(
            e.kind(),
            format!("{} is a file, not a directory", file.display()),
        ),
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_history_reads_back_equal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        let rec = Recorder::to_file(&path).unwrap();
        let op = rec.invoke("w1", F::Lease, None, None);
        rec.ok(op, Some("JOB-1"), Some(1), serde_json::json!("leased"));
        let op = rec.invoke("w1", F::Complete, Some("JOB-1"), Some(1));
        rec.info(op, "timeout".into());
        let back = read_file(&path).unwrap();
        assert_eq!(back, rec.events());
    }

    #[test]
    fn a_byte_order_mark_before_the_first_line_is_skipped_and_before_a_later_one_is_malformed() {
        let line =
            "{\"index\":0,\"time_ms\":0,\"process\":\"p\",\"type\":\"invoke\",\"f\":\"reap\"}\n";
        let plain = read(line.as_bytes(), "h.jsonl").unwrap();
        let marked = read(format!("\u{feff}{line}").as_bytes(), "h.jsonl").unwrap();
        assert_eq!(marked, plain);
        assert_eq!(plain.len(), 1);
        // Only there: before a later line it is a line that is not an
        // event (found by fuzz/history, whose oracle read the line alone).
        let later = read(format!("{line}\u{feff}{line}").as_bytes(), "h.jsonl").unwrap_err();
        assert!(
            matches!(later, ReadError::Malformed { line: 2, .. }),
            "{later}"
        );
    }

    #[test]
    fn a_truncated_last_line_is_an_error_with_its_line_number() {
        let text = "{\"index\":0,\"time_ms\":0,\"process\":\"p\",\"type\":\"invoke\",\"f\":\"reap\"}\n{\"index\":1,\"ti";
        let err = read(text.as_bytes(), "h.jsonl").unwrap_err();
        assert!(err.to_string().starts_with("h.jsonl:2:"), "{err}");
    }
}
