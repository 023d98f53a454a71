//! The adapter protocol's messages as types, written once for both sides
//! (`docs/adapter-protocol.md`; the schema is
//! `docs/adapter-protocol.schema.json`): the client, [`super::Exec`],
//! serializes [`Request`]s and reads [`Answer`]s; the server, `ackgap
//! serve-adapter` ([`super::serve`]), reads requests and serializes
//! answers.
//!
//! - A [`Request`] is an id, the worker, and a [`Call`] tagged by `op`.
//!   [`parse_request`] tells the two refusals apart, as the kits do: an
//!   `op` that is not one of the protocol's ([`Op`]) is
//!   [`Unparsed::Unsupported`]; a known `op` whose fields are missing or of
//!   the wrong type is [`Unparsed::Malformed`] (answered `refused`:
//!   nothing was sent, so nothing happened).
//! - An [`Answer`] carries `in_reply_to` and exactly one of `ok` and an
//!   [`Error`] of an [`ErrorKind`]. An `ok`'s shape depends on the request's
//!   op: [`Reply`] reads it by op, and each operation's own type
//!   ([`Granted`], [`Settled`], ...) is what the client parses.
//!
//! Reading ignores fields it does not know (a later version may add some).
//! Beyond that it is lenient only where the client always was: a lease's
//! `deadline_ms` may be left out (`0`, unknown), a read's `problems` too
//! (`[]`), a request's `now_ms` (`null`, the server's clock), an error's
//! `message` (empty). A new optional field is
//! an `Option` with `#[serde(default, skip_serializing_if =
//! "Option::is_none")]`: an adapter that does not send it is unchanged, and
//! the examples round-trip.
//!
//! # Design notes
//!
//! The hello's `ok` is `HelloOk`. The matches on an op or an error kind have
//! no wildcard arm, and a test reads every example of the document through
//! the types and against `docs/adapter-protocol.schema.json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::{Capabilities, Operation, Read, Tokens};
use crate::queue::{Enqueued, Extended, Failed, JobState, Lease, QueueError, Reaped, Settled};

/// The protocol version both sides speak.
pub const PROTOCOL: u64 = 1;

/// A request's `op`: `hello` or one of the nine operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// The first exchange.
    Hello,
    /// [`Call::Enqueue`].
    Enqueue,
    /// [`Call::Lease`].
    Lease,
    /// [`Call::Complete`].
    Complete,
    /// [`Call::Fail`].
    Fail,
    /// [`Call::Extend`].
    Extend,
    /// [`Call::Reap`].
    Reap,
    /// [`Call::Read`].
    Read,
    /// [`Call::Clear`].
    Clear,
    /// [`Call::Crash`].
    Crash,
}

impl Op {
    /// The word the protocol spells it with.
    pub fn name(self) -> &'static str {
        match self {
            Op::Hello => "hello",
            Op::Enqueue => Operation::Enqueue.name(),
            Op::Lease => Operation::Lease.name(),
            Op::Complete => Operation::Complete.name(),
            Op::Fail => Operation::Fail.name(),
            Op::Extend => Operation::Extend.name(),
            Op::Reap => Operation::Reap.name(),
            Op::Read => Operation::Read.name(),
            Op::Clear => Operation::Clear.name(),
            Op::Crash => Operation::Crash.name(),
        }
    }

    /// The [`Operation`] a hello lists it as; `None` for hello itself.
    pub fn operation(self) -> Option<Operation> {
        match self {
            Op::Hello => None,
            Op::Enqueue => Some(Operation::Enqueue),
            Op::Lease => Some(Operation::Lease),
            Op::Complete => Some(Operation::Complete),
            Op::Fail => Some(Operation::Fail),
            Op::Extend => Some(Operation::Extend),
            Op::Reap => Some(Operation::Reap),
            Op::Read => Some(Operation::Read),
            Op::Clear => Some(Operation::Clear),
            Op::Crash => Some(Operation::Crash),
        }
    }
}

impl From<Operation> for Op {
    fn from(operation: Operation) -> Op {
        match operation {
            Operation::Enqueue => Op::Enqueue,
            Operation::Lease => Op::Lease,
            Operation::Complete => Op::Complete,
            Operation::Fail => Op::Fail,
            Operation::Extend => Op::Extend,
            Operation::Reap => Op::Reap,
            Operation::Read => Op::Read,
            Operation::Clear => Op::Clear,
            Operation::Crash => Op::Crash,
        }
    }
}

/// One request line: `{"id": N, "op": ..., "worker": ..., ...fields}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The request's number, unique in the run and increasing; its answer
    /// carries it as `in_reply_to`.
    pub id: u64,
    /// Whose connection: `w0`, `producer`, `reaper`, `checker`, ... Absent
    /// on hello.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The instant (ms since the Unix epoch) the server's clock is frozen
    /// at, when the explorers own it: an adapter that follows the clock
    /// makes its library's clock read the same. Absent: real time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_ms: Option<u64>,
    /// The op and its fields.
    #[serde(flatten)]
    pub call: Call,
}

/// A request's op with its fields (the schema's `$defs/<op>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Call {
    /// The first exchange.
    Hello(Hello),
    /// Admit `job` with `payload`, leasable `max_attempts` times in all,
    /// ready `delay_ms` after now.
    Enqueue {
        /// The job id.
        job: String,
        /// The payload (the protocol carries payloads as strings).
        payload: String,
        /// Deliveries allowed in all, retries counted.
        max_attempts: u64,
        /// How long after now the job becomes ready (ms).
        delay_ms: u64,
        /// Logical time, or `None` (`null`) for the server's clock.
        #[serde(default)]
        now_ms: Option<u64>,
    },
    /// The worker takes a ready job for `lease_ms`.
    Lease {
        /// How long the lease lasts (ms).
        lease_ms: u64,
        /// Logical time, or `None` for the server's clock.
        #[serde(default)]
        now_ms: Option<u64>,
    },
    /// The worker acks `job` under lease `token`.
    Complete {
        /// The job id.
        job: String,
        /// The lease's token.
        token: u64,
    },
    /// The worker reports `job` failed under `token`.
    Fail {
        /// The job id.
        job: String,
        /// The lease's token.
        token: u64,
        /// How long after now a retry becomes ready (ms).
        retry_delay_ms: u64,
        /// Logical time, or `None` for the server's clock.
        #[serde(default)]
        now_ms: Option<u64>,
    },
    /// The worker extends its lease on `job` to `lease_ms` from now.
    Extend {
        /// The job id.
        job: String,
        /// The lease's token.
        token: u64,
        /// The new lease's length from now (ms).
        lease_ms: u64,
        /// Logical time, or `None` for the server's clock.
        #[serde(default)]
        now_ms: Option<u64>,
    },
    /// One run of the queue's recovery of expired leases.
    Reap {
        /// At most this many jobs taken back.
        limit: u64,
        /// Logical time, or `None` for the server's clock.
        #[serde(default)]
        now_ms: Option<u64>,
    },
    /// The whole queue read back.
    Read,
    /// Every key of the queue deleted.
    Clear,
    /// The worker died: drop its connection and state.
    Crash,
}

impl Call {
    /// The call's op.
    pub fn op(&self) -> Op {
        match self {
            Call::Hello(_) => Op::Hello,
            Call::Enqueue { .. } => Op::Enqueue,
            Call::Lease { .. } => Op::Lease,
            Call::Complete { .. } => Op::Complete,
            Call::Fail { .. } => Op::Fail,
            Call::Extend { .. } => Op::Extend,
            Call::Reap { .. } => Op::Reap,
            Call::Read => Op::Read,
            Call::Clear => Op::Clear,
            Call::Crash => Op::Crash,
        }
    }
}

/// The hello's fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hello {
    /// The protocol version asked ([`PROTOCOL`]).
    pub protocol: u64,
    /// The server URL (credentials and a database may be in it).
    pub server: String,
    /// The queue's name: the hash tag or prefix of every key.
    pub queue: String,
    /// Worker name → the URL its connection opens instead of `server`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connections: BTreeMap<String, String>,
}

/// Why a request line's object is not a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unparsed {
    /// Its `op` is not one of the protocol's (or there is none): answered
    /// `unsupported`.
    Unsupported(String),
    /// A known op with a field missing or of the wrong type: answered
    /// `refused` (nothing was sent, so nothing happened).
    Malformed(String),
}

impl Unparsed {
    /// The error answer the server gives.
    pub fn error(self) -> Error {
        match self {
            Unparsed::Unsupported(message) => Error::new(ErrorKind::Unsupported, message),
            Unparsed::Malformed(message) => Error::new(ErrorKind::Refused, message),
        }
    }
}

/// Reads one request object: an unknown op is told apart from a malformed
/// request of a known op (see [`Unparsed`]).
pub(crate) fn parse_request(value: Value) -> Result<Request, Unparsed> {
    let word = value.get("op").cloned().unwrap_or(Value::Null);
    let Ok(op) = serde_json::from_value::<Op>(word.clone()) else {
        return Err(Unparsed::Unsupported(format!("no operation {word}")));
    };
    serde_json::from_value(value).map_err(|e| Unparsed::Malformed(format!("{}: {e}", op.name())))
}

/// An error answer's kind: it decides how the history records the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The call may or may not have taken effect: `info`.
    Unknown,
    /// The call was certainly not sent: `fail`.
    Unavailable,
    /// Refused before any write (a malformed request among them): `fail`.
    Refused,
    /// The server answered an error; the message starts with its code:
    /// `fail`.
    Server,
    /// The adapter does not implement the op: `fail`.
    Unsupported,
}

impl ErrorKind {
    /// The word the protocol spells it with.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Unknown => "unknown",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Refused => "refused",
            ErrorKind::Server => "server",
            ErrorKind::Unsupported => "unsupported",
        }
    }
}

/// An error answer's `error`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    /// Its kind.
    pub kind: ErrorKind,
    /// What happened, for people (`server`: starts with the server's code).
    #[serde(default)]
    pub message: String,
}

impl Error {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }
}

/// One answer line: `{"in_reply_to": N, "ok": ...}` or `{"in_reply_to": N,
/// "error": {...}}`, exactly one of the two.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "AnswerLine", into = "AnswerLine")]
pub(crate) struct Answer {
    /// The request's id.
    pub in_reply_to: u64,
    /// `ok`'s value (its shape is the op's: [`Reply`]), or the error.
    pub result: Result<Value, Error>,
}

/// [`Answer`] as the line spells it.
#[derive(Serialize, Deserialize)]
struct AnswerLine {
    in_reply_to: u64,
    /// Present (`Some`, `null` included) or absent (`None`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    ok: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<Error>,
}

/// A field that is there, whatever its value (`null` included).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl TryFrom<AnswerLine> for Answer {
    type Error = &'static str;

    fn try_from(line: AnswerLine) -> Result<Answer, &'static str> {
        let result = match (line.ok, line.error) {
            (Some(ok), None) => Ok(ok),
            (None, Some(error)) => Err(error),
            (Some(_), Some(_)) => return Err("both ok and error (exactly one is required)"),
            (None, None) => return Err("neither ok nor error (exactly one is required)"),
        };
        Ok(Answer {
            in_reply_to: line.in_reply_to,
            result,
        })
    }
}

impl From<Answer> for AnswerLine {
    fn from(answer: Answer) -> AnswerLine {
        let (ok, error) = match answer.result {
            Ok(ok) => (Some(ok), None),
            Err(error) => (None, Some(error)),
        };
        AnswerLine {
            in_reply_to: answer.in_reply_to,
            ok,
            error,
        }
    }
}

/// Hello's `ok`: the adapter's name and what it can do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HelloOk {
    /// The queue's name in reports.
    pub name: String,
    /// The protocol it speaks, when it says ([`PROTOCOL`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u64>,
    /// What it can do.
    pub capabilities: Offered,
    /// The user's app it loaded (`$ACKGAP_APP`); absent: its own
    /// configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<super::App>,
}

/// Hello's `capabilities`, as the line spells them ([`Offered::capabilities`]
/// reads them as [`Capabilities`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Offered {
    /// The operations it supports: words this side does not know are kept
    /// here and ignored (a newer adapter may offer more).
    pub operations: Vec<String>,
    /// Every time-dependent operation honours a numeric `now_ms`.
    pub logical_time: bool,
    /// ... only when each request also carries `clock_ms`; absent: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follows_clock: bool,
    /// Settles and extends check the token and refuse a stale one.
    pub fences: bool,
    /// Whether tokens rise with deliveries; absent: `opaque`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
    /// Whether a second enqueue of an id is refused; absent: `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<bool>,
    /// How long past a lease's end the library may take to recover a
    /// delivery it lost track of (ms); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_ms: Option<u64>,
}

impl Offered {
    /// What an in-process adapter's [`Capabilities`] say on the line.
    pub fn of(caps: &Capabilities) -> Offered {
        Offered {
            operations: caps.operations.iter().map(|o| o.name().into()).collect(),
            logical_time: caps.logical_time,
            follows_clock: caps.follows_clock,
            fences: caps.fences,
            tokens: Some(caps.tokens),
            dedup: Some(caps.dedup),
            recovery_ms: caps.recovery_ms,
        }
    }

    /// The capabilities they promise, with the document's defaults (tokens
    /// opaque, dedup true); the operations this side knows, in
    /// [`Operation::ALL`]'s order.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            operations: Operation::ALL
                .into_iter()
                .filter(|op| self.operations.iter().any(|w| w == op.name()))
                .collect(),
            dedup: self.dedup.unwrap_or(true),
            logical_time: self.logical_time,
            follows_clock: self.follows_clock,
            fences: self.fences,
            tokens: self.tokens.unwrap_or(Tokens::Opaque),
            recovery_ms: self.recovery_ms,
        }
    }
}

/// A granted lease, lease's `ok` (`null` when nothing is ready).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Granted {
    /// The job id.
    pub job: String,
    /// The token naming this delivery.
    pub token: u64,
    /// When the lease expires (ms); `0`, or left out, when unknown.
    #[serde(default)]
    pub deadline_ms: u64,
    /// The job's payload.
    pub payload: String,
}

impl From<Lease> for Granted {
    fn from(lease: Lease) -> Granted {
        Granted {
            job: lease.id,
            token: lease.token,
            deadline_ms: lease.deadline_ms,
            payload: String::from_utf8_lossy(&lease.payload).into_owned(),
        }
    }
}

impl From<Granted> for Lease {
    fn from(granted: Granted) -> Lease {
        Lease {
            id: granted.job,
            token: granted.token,
            deadline_ms: granted.deadline_ms,
            payload: granted.payload.into_bytes(),
        }
    }
}

/// One job the reaper moved: an item of reap's `ok`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReapedJob {
    /// The job id.
    pub job: String,
    /// `pending` (another attempt allowed) or `dead`.
    pub to: JobState,
}

impl From<Reaped> for ReapedJob {
    fn from(r: Reaped) -> ReapedJob {
        ReapedJob {
            job: r.id,
            to: r.to,
        }
    }
}

impl From<ReapedJob> for Reaped {
    fn from(r: ReapedJob) -> Reaped {
        Reaped {
            id: r.job,
            to: r.to,
        }
    }
}

/// The `ok` of each op, typed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(crate) enum Reply {
    /// [`HelloOk`].
    Hello(HelloOk),
    /// `"enqueued"` or `"duplicate"`.
    Enqueue(Enqueued),
    /// `null`, or the lease granted.
    Lease(Option<Granted>),
    /// Complete's outcome.
    Complete(Settled),
    /// Fail's outcome.
    Fail(Failed),
    /// Extend's outcome.
    Extend(Extended),
    /// The jobs the reaper moved.
    Reap(Vec<ReapedJob>),
    /// The queue read back.
    Read(Read),
    /// `null`.
    Clear,
    /// `null`.
    Crash,
}

impl Reply {
    /// Reads `ok` as the answer to a request of `op` (the client reads
    /// each op's own type where it waits for it; the document's examples
    /// are read by op).
    #[cfg(test)]
    pub fn parse(op: Op, ok: Value) -> Result<Reply, serde_json::Error> {
        use serde_json::from_value as of;
        Ok(match op {
            Op::Hello => Reply::Hello(of(ok)?),
            Op::Enqueue => Reply::Enqueue(of(ok)?),
            Op::Lease => Reply::Lease(of(ok)?),
            Op::Complete => Reply::Complete(of(ok)?),
            Op::Fail => Reply::Fail(of(ok)?),
            Op::Extend => Reply::Extend(of(ok)?),
            Op::Reap => Reply::Reap(of(ok)?),
            Op::Read => Reply::Read(of(ok)?),
            Op::Clear => of::<()>(ok).map(|()| Reply::Clear)?,
            Op::Crash => of::<()>(ok).map(|()| Reply::Crash)?,
        })
    }
}

/// The [`QueueError`] of an error answer to `op`.
pub(crate) fn remote_error(op: &'static str, r: Error) -> QueueError {
    let Error { kind, message } = r;
    match kind {
        ErrorKind::Unknown => QueueError::Unknown {
            op,
            reason: message,
        },
        ErrorKind::Unavailable => QueueError::Unavailable {
            op,
            reason: message,
        },
        ErrorKind::Refused if message.starts_with("EMQKIND") => QueueError::Kind { op, message },
        ErrorKind::Refused => QueueError::BadArgument { op, message },
        ErrorKind::Unsupported => QueueError::Unsupported { op },
        ErrorKind::Server => {
            let (code, rest) = message.split_once(' ').unwrap_or((&message, ""));
            QueueError::Server {
                op,
                code: code.to_owned(),
                message: rest.to_owned(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use serde_json::json;

    use super::*;

    const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/adapter-protocol.md");
    const SCHEMA: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/adapter-protocol.schema.json"
    );

    /// The document's example blocks (fenced ```jsonl or ```json), each a
    /// list of its lines.
    fn examples() -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(DOC).expect("docs/adapter-protocol.md");
        let mut blocks = Vec::new();
        let mut block: Option<Vec<String>> = None;
        for line in text.lines() {
            match (&mut block, line.trim_end()) {
                (None, "```jsonl" | "```json") => block = Some(Vec::new()),
                (Some(_), "```") => blocks.extend(block.take()),
                (Some(lines), line) if !line.trim().is_empty() => lines.push(line.to_owned()),
                _ => {}
            }
        }
        assert!(block.is_none(), "an example block is not closed");
        blocks
    }

    /// A validator of `$defs/NAME` of the schema (the whole schema when
    /// `None`).
    fn validator(schema: &Value, def: Option<&str>) -> jsonschema::Validator {
        let schema = match def {
            None => schema.clone(),
            Some(def) => json!({"$schema": schema["$schema"], "$defs": schema["$defs"],
                "$ref": format!("#/$defs/{def}")}),
        };
        jsonschema::draft202012::new(&schema).expect("the schema compiles")
    }

    fn valid(validator: &jsonschema::Validator, value: &Value, what: &str) {
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{what} breaks the schema: {errors:?}");
    }

    /// Every example line of the document is a message of the schema, reads
    /// as a request or an answer (an answer's `ok` by the op of the
    /// request with its id in the block), and writes back as the same JSON
    /// value; every op appears as a request and as an `ok`, and an error
    /// answer appears too.
    #[test]
    fn every_example_of_the_document_round_trips_through_the_types_and_meets_the_schema() {
        let schema: Value =
            serde_json::from_str(&std::fs::read_to_string(SCHEMA).expect("the schema")).unwrap();
        let message = validator(&schema, None);
        let (mut asked_ops, mut answered_ops, mut errors) = (BTreeSet::new(), BTreeSet::new(), 0);
        let blocks = examples();
        assert!(blocks.len() >= 10, "{} example blocks", blocks.len());
        for block in blocks {
            let mut asked: HashMap<u64, Op> = HashMap::new();
            for line in block {
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                valid(&message, &value, &line);
                if value.get("in_reply_to").is_none() {
                    let request = parse_request(value.clone())
                        .unwrap_or_else(|e| panic!("not a request ({e:?}): {line}"));
                    assert_eq!(serde_json::to_value(&request).unwrap(), value, "{line}");
                    asked.insert(request.id, request.call.op());
                    asked_ops.insert(request.call.op().name());
                    continue;
                }
                let answer: Answer = serde_json::from_value(value.clone())
                    .unwrap_or_else(|e| panic!("not an answer ({e}): {line}"));
                assert_eq!(serde_json::to_value(&answer).unwrap(), value, "{line}");
                let Ok(ok) = answer.result else {
                    errors += 1;
                    continue;
                };
                let op = asked[&answer.in_reply_to];
                let reply = Reply::parse(op, ok.clone())
                    .unwrap_or_else(|e| panic!("not a {} ok ({e}): {line}", op.name()));
                assert_eq!(serde_json::to_value(&reply).unwrap(), ok, "{line}");
                valid(
                    &validator(&schema, Some(&format!("ok_{}", op.name()))),
                    &ok,
                    &line,
                );
                answered_ops.insert(op.name());
            }
        }
        let every: BTreeSet<&str> = std::iter::once(Op::Hello)
            .chain(Operation::ALL.map(Op::from))
            .map(Op::name)
            .collect();
        assert_eq!(asked_ops, every, "an op without an example request");
        assert_eq!(answered_ops, every, "an op without an example ok");
        assert!(errors > 0, "no example of an error answer");
    }

    /// What the server answers a request it cannot run: an op the protocol
    /// does not name (or none) is unsupported; a known op with a field
    /// missing or of the wrong type is malformed (refused).
    #[test]
    fn an_unknown_op_is_unsupported_and_a_malformed_request_is_refused() {
        let kind = |v: Value| parse_request(v).map(|_| ()).map_err(|e| e.error().kind);
        assert_eq!(
            kind(json!({"id": 1, "op": "teleport", "worker": "w0"})),
            Err(ErrorKind::Unsupported)
        );
        assert_eq!(
            kind(json!({"id": 1, "worker": "w0"})),
            Err(ErrorKind::Unsupported)
        );
        assert_eq!(kind(json!({"id": 1, "op": 7})), Err(ErrorKind::Unsupported));
        let enqueue = json!({"id": 1, "op": "enqueue", "worker": "producer", "job": "JOB-1",
            "payload": "p", "max_attempts": 3, "delay_ms": 0, "now_ms": null});
        assert_eq!(kind(enqueue.clone()), Ok(()));
        for (field, bad) in [
            ("max_attempts", Value::Null),
            ("max_attempts", json!(-1)),
            ("delay_ms", json!("0")),
            ("job", json!(1)),
            ("now_ms", json!("soon")),
            ("worker", json!(3)),
        ] {
            let mut request = enqueue.clone();
            request[field] = bad.clone();
            assert_eq!(kind(request), Err(ErrorKind::Refused), "{field}: {bad}");
        }
        for field in ["max_attempts", "delay_ms", "job", "payload"] {
            let mut request = enqueue.clone();
            request.as_object_mut().unwrap().remove(field);
            assert_eq!(kind(request), Err(ErrorKind::Refused), "without {field}");
        }
        // Unknown fields are ignored; `now_ms` may be left out (`null`).
        let mut request = enqueue;
        request["later"] = json!(true);
        request.as_object_mut().unwrap().remove("now_ms");
        assert_eq!(kind(request), Ok(()));
        assert_eq!(
            kind(json!({"id": 2, "op": "hello", "protocol": 1})),
            Err(ErrorKind::Refused)
        );
    }

    #[test]
    fn an_answer_is_exactly_one_of_ok_and_error_and_a_null_ok_is_an_ok() {
        let answer = |v: Value| serde_json::from_value::<Answer>(v);
        assert_eq!(
            answer(json!({"in_reply_to": 1, "ok": null}))
                .unwrap()
                .result,
            Ok(Value::Null)
        );
        assert!(answer(json!({"in_reply_to": 1})).is_err());
        assert!(answer(json!({"in_reply_to": 1, "ok": 1, "error": {"kind": "unknown"}})).is_err());
        assert!(answer(json!({"in_reply_to": 1, "error": {"kind": "teapot"}})).is_err());
        let error = answer(json!({"in_reply_to": 1, "error": {"kind": "server"}})).unwrap();
        assert_eq!(error.result, Err(Error::new(ErrorKind::Server, "")));
    }

    #[test]
    fn a_hello_without_tokens_or_dedup_offers_opaque_tokens_and_dedup() {
        let ok: HelloOk = serde_json::from_value(json!({"name": "q", "capabilities": {
            "operations": ["enqueue", "lease", "complete", "read", "clear", "teleport"],
            "logical_time": false, "fences": true}}))
        .unwrap();
        let caps = ok.capabilities.capabilities();
        assert_eq!(caps.tokens, Tokens::Opaque);
        assert!(caps.dedup);
        assert_eq!(caps.operations, Operation::REQUIRED.to_vec());
        let back = Offered::of(&caps).capabilities();
        assert_eq!(back, caps, "what serve-adapter offers reads back the same");
    }
}
