//! The errors a run met, read from its history: counted by kind for the
//! report ([`ErrorKinds`]), and the ones no run gets past — a refused
//! password, a missing permission — which stop the run with an error
//! instead of becoming a verdict about the queue ([`watch_refusals`]).
//!
//! The history writes each error as its [`QueueError`]'s text (`lease:
//! server error OOM: command not allowed when used memory > 'maxmemory'.`),
//! so the kind is read back from that text: the server's own code where
//! the server answered, else the client's class of the failure.
//!
//! # Design notes
//!
//! The refusals of access are `NOAUTH`, `WRONGPASS` and `NOPERM`; they stop
//! the run with a `ChaosError`. `Stall` stops the drain, with the reason in
//! `ChaosReport::drain_stalled`, once every call of a 5 s stretch was
//! refused for one cause of the server's state: OOM, MISCONF, LOADING,
//! MASTERDOWN, NOREPLICAS, CLUSTERDOWN.

use super::*;
use crate::history::{Event, EventKind, F};
use crate::queue::Refusal;

/// The refusal of the environment (`queue::environment_refusal`, the one
/// classification every command shares) that an error as a history writes
/// it is, if it is one: an ACL failure in or out of a script, a refused
/// password, a missing command, a read-only replica. No queue is judged on
/// a run that met one.
pub(crate) fn refusal_of(error: &str) -> Option<Refusal> {
    let rest = error.split_once(": ").map_or(error, |(_, rest)| rest);
    let server = rest.strip_prefix("server error ")?;
    let (code, message) = server.split_once(": ").unwrap_or((server, ""));
    crate::queue::environment_refusal(code, message)
}

/// The kind of an error as a history writes it: the server's code
/// (`OOM`, `NOPERM`, `WRONGTYPE`, `BUSY`, `ERR`, ...), `EMQKIND` or
/// `EMQARG` (the scripts' refusals), `unknown outcome` (a timeout or a
/// connection lost with the request in flight), `unavailable` (not sent),
/// `unexpected reply`, else `other`.
pub fn error_kind(error: &str) -> String {
    // "{op}: {class}...": the operation first, then the class.
    let rest = error.split_once(": ").map_or(error, |(_, rest)| rest);
    if let Some(server) = rest.strip_prefix("server error ") {
        return server
            .split_once(": ")
            .map_or(server, |(code, _)| code)
            .to_string();
    }
    let kind = if rest.starts_with("EMQKIND") {
        "EMQKIND"
    } else if rest.starts_with("EMQARG") {
        "EMQARG"
    } else if rest.starts_with("outcome unknown") {
        "unknown outcome"
    } else if rest.starts_with("server unavailable") {
        "unavailable"
    } else if rest.starts_with("unexpected reply") {
        "unexpected reply"
    } else {
        "other"
    };
    kind.to_string()
}

/// How often one kind of error came back, and its first example.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCount {
    /// Operations that ended with this kind of error (`fail` or `info`).
    pub count: u64,
    /// The first of them: process, then the error as recorded.
    pub first: String,
    /// How many by operation (`lease`, `enqueue`, `effect`, ...): a
    /// refused lease leaves its job pending, a refused enqueue was never
    /// acknowledged.
    pub by_op: BTreeMap<String, u64>,
}

/// The errors of a run's operations by kind (see [`error_kind`]); the
/// nemesis's own fault events are not counted.
pub type ErrorKinds = BTreeMap<String, ErrorCount>;

/// Counts the errors of `events` by kind.
pub fn count_errors(events: &[Event]) -> ErrorKinds {
    let mut kinds = ErrorKinds::new();
    for e in events {
        let Some(error) = completion_error(e) else {
            continue;
        };
        let entry = kinds.entry(error_kind(error)).or_default();
        if entry.count == 0 {
            entry.first = format!("{}: {error}", e.process);
        }
        entry.count += 1;
        let op = serde_json::to_value(e.f)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        *entry.by_op.entry(op).or_default() += 1;
    }
    kinds
}

/// The error of a completion that failed (`fail` or `info`) of a process
/// other than the nemesis.
fn completion_error(e: &Event) -> Option<&str> {
    let failed = matches!(e.kind, EventKind::Fail | EventKind::Info);
    let error = e.error.as_deref()?;
    (failed && e.process != "nemesis").then_some(error)
}

/// The server's refusals that say its *state* stops a call before it runs
/// (memory over `maxmemory` under `noeviction`, a failed disk write, a
/// dataset still loading, a primary down, too few replicas, a cluster
/// down): none of them is something the queue did. `BUSY` is not one (the
/// queue's own long script), nor an `ERR` of a script.
const STATE_REFUSALS: [&str; 6] = [
    "OOM",
    "MISCONF",
    "LOADING",
    "MASTERDOWN",
    "NOREPLICAS",
    "CLUSTERDOWN",
];

/// The stretch of the drain a stall is judged over (ms): every call that
/// ended in it refused for one cause stops the drain.
pub const STALL_MS: u64 = 5_000;

/// Fewest calls a stall is judged from: a stretch with fewer says nothing.
pub const STALL_CALLS_MIN: usize = 20;

/// Watches the drain for a stall: a stretch of [`STALL_MS`] in which every
/// call the run's producers, workers and reaper ended (at least
/// [`STALL_CALLS_MIN`] of them) was refused by the server for one cause
/// of its state ([`STATE_REFUSALS`]). Waiting the rest of the bound then
/// says nothing about the queue: the drain stops with the reason.
#[derive(Debug)]
pub(super) struct Stall {
    /// When the drain began (ms into the run): earlier calls are not its.
    since_ms: u64,
    /// Events of the history read so far.
    seen: usize,
    /// The calls ended in the stretch.
    window: VecDeque<Ended>,
}

/// A call the stall watch saw end.
#[derive(Debug)]
struct Ended {
    time_ms: u64,
    /// The refusal of the server's state it met, if it met one.
    cause: Option<String>,
    /// The operation (`lease`, `enqueue`, ...).
    op: String,
    /// Its process and error, as the report shows the first.
    text: String,
}

impl Stall {
    /// A watch of a drain that began `since_ms` into the run.
    pub(super) fn new(since_ms: u64) -> Stall {
        Stall {
            since_ms,
            seen: 0,
            window: VecDeque::new(),
        }
    }

    /// Reads what `rec` recorded since the last look; the reason the drain
    /// stops, if the stretch up to `now_ms` is a stall.
    pub(super) fn check(&mut self, rec: &Recorder, now_ms: u64) -> Option<String> {
        let events = rec.events_from(self.seen);
        self.seen += events.len();
        self.update(&events, now_ms)
    }

    /// [`Stall::check`] on the events recorded since the last call.
    fn update(&mut self, events: &[Event], now_ms: u64) -> Option<String> {
        for e in events {
            let ended = matches!(e.kind, EventKind::Ok | EventKind::Fail | EventKind::Info);
            if !ended || e.time_ms < self.since_ms || e.process == "nemesis" || e.f == F::Read {
                continue;
            }
            let error = completion_error(e).unwrap_or_default();
            let cause = (e.kind == EventKind::Fail)
                .then(|| error_kind(error))
                .filter(|k| STATE_REFUSALS.contains(&k.as_str()));
            let op = serde_json::to_value(e.f)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            self.window.push_back(Ended {
                time_ms: e.time_ms,
                cause,
                op,
                text: format!("{}: {error}", e.process),
            });
        }
        let from_ms = now_ms.saturating_sub(STALL_MS);
        while self.window.front().is_some_and(|c| c.time_ms < from_ms) {
            self.window.pop_front();
        }
        if now_ms < self.since_ms + STALL_MS || self.window.len() < STALL_CALLS_MIN {
            return None;
        }
        let cause = self.window[0].cause.clone()?;
        if self.window.iter().any(|c| c.cause.as_ref() != Some(&cause)) {
            return None;
        }
        let mut by_op: BTreeMap<&str, u64> = BTreeMap::new();
        for c in &self.window {
            *by_op.entry(&c.op).or_default() += 1;
        }
        let by_op: Vec<String> = by_op.iter().map(|(op, n)| format!("{op} {n}")).collect();
        let example = &self.window[0].text;
        Some(format!(
            "the drain stopped {} ms after the heal: every call of its last {} ms ({} calls: {}) was refused by the server with {cause} (the first: {example}); \
             the server's state stops every call, so waiting longer says nothing about the queue",
            now_ms.saturating_sub(self.since_ms),
            STALL_MS,
            self.window.len(),
            by_op.join(", ")
        ))
    }
}

/// The first refusal of the environment in `events` ([`refusal_of`]),
/// or the first call an `exec:` adapter cut short by breaking the
/// protocol (it exited, say: every later call fails the same way), as the
/// run's error. With `moves_primary` (the run's faults fail the primary
/// over) a `READONLY` is the failover's moment, not a refusal.
pub(super) fn first_refusal(events: &[Event], moves_primary: bool) -> Option<ChaosError> {
    events.iter().find_map(|e| {
        let error = completion_error(e)?;
        // `QueueError::Adapter`'s text, as the history writes it.
        if error.contains(": the adapter broke the protocol, the run stops: ") {
            return Some(ChaosError::Unavailable(format!(
                "the adapter stopped answering: {} got `{error}`. The run stopped without a verdict",
                e.process
            )));
        }
        match refusal_of(error)? {
            Refusal::ReadOnly if moves_primary => None,
            refusal => Some(refused(refusal, &e.process, error)),
        }
    })
}

/// The error of a run stopped because the server refused `process`'s
/// call with `error`, a refusal of the environment.
fn refused(refusal: Refusal, process: &str, error: &str) -> ChaosError {
    let check = match refusal {
        Refusal::Access => {
            "Every connection of the run (the workers through the fault proxy, the producers, \
             the reaper, the final read) uses the user and password of --server: check them, \
             and that the user may run the queue's scripts and every command they call on its \
             keys (e.g. `ACL SETUSER NAME on >PASSWORD ~emq:* +@all`)"
        }
        Refusal::MissingCommand => {
            "The server lacks a command the queue calls: use a server that has it"
        }
        Refusal::ReadOnly => "--server names a read-only replica: point it at the primary",
    };
    ChaosError::Unavailable(format!(
        "the server refused to run the test: {process} got `{error}`. \
         The run stopped without a verdict, since that says nothing about the queue. {check}"
    ))
}

/// Watches a run for a refusal of access, and its server for an end no
/// fault of the run explains, while it lives (its tasks end when it
/// drops).
pub(super) struct RefusalWatch {
    refusal: Arc<Mutex<Option<ChaosError>>>,
    _tasks: [AbortOnDrop; 3],
}

/// The least grace a server that refuses connections gets outside the
/// run's own server faults before the run names it dead (kill -9 by hand,
/// a server gone): a refusal this short may be a restart (a supervisor's,
/// a container's restart policy) coming back.
pub(crate) const SERVER_SILENCE_MS: u64 = 2_000;

/// The grace of a refusing server, in multiples of the slowest of the
/// run's own restarts: the server's restart time on this machine under
/// this load, measured, with room for one as slow again.
pub(crate) const RESTART_GRACE_FACTOR: u64 = 2;

/// How long a server that accepts connections but answers no `PING` may
/// stay silent before the run stops: a stalled server (a long fsync, a
/// loaded machine) is alive, and a gone one refuses at once.
pub(crate) const SERVER_STALL_MS: u64 = 30_000;

impl RefusalWatch {
    /// Watches what `rec` records. Answers the watch and the run's halt:
    /// raised by `interrupt` (Ctrl-C) or by the first refusal, which the
    /// watch then keeps for [`RefusalWatch::take`].
    pub(super) fn start(
        rec: &Recorder,
        interrupt: &Interrupt,
        moves_primary: bool,
        server: Option<redis::Client>,
    ) -> (RefusalWatch, Interrupt) {
        let halt = Interrupt::new();
        let refusal = Arc::new(Mutex::new(None));
        let watch = tokio::spawn(watch_refusals(
            rec.clone(),
            Arc::clone(&refusal),
            halt.clone(),
            moves_primary,
        ));
        let forward = tokio::spawn({
            let (interrupt, halt) = (interrupt.clone(), halt.clone());
            async move {
                interrupt.raised().await;
                halt.raise();
            }
        });
        let pings = tokio::spawn({
            let (rec, refusal, halt) = (rec.clone(), Arc::clone(&refusal), halt.clone());
            async move {
                if let Some(client) = server {
                    watch_server(client, &rec, refusal, halt).await;
                }
            }
        });
        let tasks = [AbortOnDrop(watch), AbortOnDrop(forward), AbortOnDrop(pings)];
        (
            RefusalWatch {
                refusal,
                _tasks: tasks,
            },
            halt,
        )
    }

    /// The refusal that halted the run, if one did.
    pub(super) fn take(&self) -> Option<ChaosError> {
        lock(&self.refusal).take()
    }
}

/// Until aborted, pings the server on a fresh connection four times a
/// second; when it was silent too long (see below), keeps the error in
/// `refusal` and raises `halt`.
///
/// The silence is counted outside the run's own server faults only: from
/// the nemesis's `fired` of a server fault (kill, pause, ...) to its
/// `heal`, which it records once the server is back (a restart on a loaded
/// machine may take seconds past the fault's scheduled end), the server's
/// silence is the fault's, not a server gone.
///
/// Outside them, slow is told from dead by how the ping failed, never by
/// which timer fired first. A connection refused (or reset, or closed at
/// once) means nothing listens: the server is dead unless it comes back
/// within [`ServerFaults::grace_ms`], what the run's own restarts took to
/// answer again. A connection accepted and left unanswered, or answered
/// with an error (`LOADING`, `BUSY`), means a live server, slow: it gets
/// [`SERVER_STALL_MS`] at least.
async fn watch_server(
    client: redis::Client,
    rec: &Recorder,
    refusal: Arc<Mutex<Option<ChaosError>>>,
    halt: Interrupt,
) {
    let mut answered = Instant::now();
    let mut faults = ServerFaults::default();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if faults.read(rec) {
            answered = Instant::now();
        }
        let ping = tokio::time::timeout(Duration::from_millis(500), async {
            let mut con = client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut con).await
        })
        .await;
        let grace = faults.grace_ms();
        let (why, bound_ms) = match ping {
            Ok(Ok(_)) => {
                answered = Instant::now();
                continue;
            }
            Ok(Err(e)) if nothing_listens(&e) => (e.to_string(), grace),
            // The client's own response timeout (500 ms too) may beat the
            // one above on a loaded machine: still a late answer.
            Ok(Err(e)) => (e.to_string(), grace.max(SERVER_STALL_MS)),
            Err(_) => (
                "no answer within 500 ms".to_string(),
                grace.max(SERVER_STALL_MS),
            ),
        };
        let silent_ms = answered.elapsed().as_millis() as u64;
        if silent_ms >= bound_ms {
            *lock(&refusal) = Some(ChaosError::Unavailable(format!(
                "the server stopped answering for {silent_ms} ms, longer than any fault of the run \
                 explains (killed, or gone?): {why}. {}. The run stopped without a verdict",
                faults.grace_text()
            )));
            halt.raise();
            return;
        }
    }
}

/// Whether a failed ping says that nothing listens on the server's port:
/// the connection refused, reset or closed before an answer (a killed
/// process; a container's proxy with no server behind it), as opposed to
/// an answer that came late or as an error, which a live server gives.
fn nothing_listens(e: &redis::RedisError) -> bool {
    use std::io::ErrorKind as K;
    if e.is_connection_refusal() {
        return true;
    }
    let io = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>());
    io.is_some_and(|io| {
        matches!(
            io.kind(),
            K::ConnectionReset
                | K::ConnectionAborted
                | K::BrokenPipe
                | K::UnexpectedEof
                | K::NotConnected
        )
    })
}

/// The run's server faults in force, read from the nemesis's events, and
/// how long its restarts took.
#[derive(Default)]
struct ServerFaults {
    /// Events read so far.
    seen: usize,
    /// Server faults fired and not yet healed.
    open: usize,
    /// The slowest of the run's own restarts so far (ms): a heal's
    /// `restart_ms`, from the restart's start to the server's first
    /// answer.
    slowest_restart_ms: Option<u64>,
}

impl ServerFaults {
    /// Reads what the nemesis recorded since the last call; true while a
    /// server fault is in force or when one fired or healed meanwhile.
    fn read(&mut self, rec: &Recorder) -> bool {
        let events = rec.events_from(self.seen);
        self.seen += events.len();
        let mut moved = false;
        for e in &events {
            if e.process != "nemesis" {
                continue;
            }
            let Some(fault) = e.fault() else { continue };
            if fault.fault.target() != Target::Server {
                continue;
            }
            match fault.action {
                Action::Fired => {
                    self.open += 1;
                    moved = true;
                }
                Action::Heal => {
                    self.open = self.open.saturating_sub(1);
                    moved = true;
                    let took = fault.detail.get("restart_ms").and_then(|v| v.as_u64());
                    if let Some(took) = took {
                        self.slowest_restart_ms = self.slowest_restart_ms.max(Some(took));
                    }
                }
                Action::Inject | Action::Disarm => {}
            }
        }
        moved || self.open > 0
    }

    /// How long a server that refuses connections outside the run's
    /// faults may stay so before it is named dead (ms): the slowest of the
    /// run's own restarts, [`RESTART_GRACE_FACTOR`] times, and never less
    /// than [`SERVER_SILENCE_MS`].
    fn grace_ms(&self) -> u64 {
        let measured = self.slowest_restart_ms.unwrap_or(0);
        (measured * RESTART_GRACE_FACTOR).max(SERVER_SILENCE_MS)
    }

    /// Where [`ServerFaults::grace_ms`] came from, for the error.
    fn grace_text(&self) -> String {
        match self.slowest_restart_ms {
            Some(ms) => format!(
                "A refusing server was given {} ms: {RESTART_GRACE_FACTOR} times the slowest of \
                 the run's own restarts ({ms} ms), at least {SERVER_SILENCE_MS} ms",
                self.grace_ms()
            ),
            None => format!(
                "A refusing server was given {SERVER_SILENCE_MS} ms (the run restarted no server \
                 to measure a restart by)"
            ),
        }
    }
}

/// Until aborted, reads the events `rec` records and, at the first
/// refusal of access, keeps it in `refusal` and raises `halt`, which stops
/// the run where it is. Checks ten times a second.
async fn watch_refusals(
    rec: Recorder,
    refusal: Arc<Mutex<Option<ChaosError>>>,
    halt: Interrupt,
    moves_primary: bool,
) {
    let mut seen = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let events = rec.events_from(seen);
        seen += events.len();
        if let Some(e) = first_refusal(&events, moves_primary) {
            *lock(&refusal) = Some(e);
            halt.raise();
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_watch_counts_no_silence_from_a_server_fault_firing_to_its_heal() {
        let rec = Recorder::in_memory();
        let nemesis = Process::new(&rec, "nemesis");
        let note = |fault: FaultKind, action: Action| {
            nemesis.fault(Ok(FaultEvent::new(
                fault,
                action,
                Some("server"),
                json!({}),
            )));
        };
        let mut faults = ServerFaults::default();
        assert!(!faults.read(&rec), "no fault yet: silence counts");
        note(FaultKind::Partition, Action::Fired);
        assert!(
            !faults.read(&rec),
            "a network fault does not silence the server"
        );
        note(FaultKind::ServerKill, Action::Fired);
        assert!(faults.read(&rec), "the kill fired");
        assert!(
            faults.read(&rec),
            "still killed: a slow restart is the fault's"
        );
        note(FaultKind::ServerKill, Action::Heal);
        assert!(
            faults.read(&rec),
            "healed meanwhile: counting starts again from here"
        );
        assert!(!faults.read(&rec), "healed: silence counts again");
    }

    #[test]
    fn a_refusing_server_s_grace_is_twice_the_run_s_slowest_restart_and_at_least_2_s() {
        let rec = Recorder::in_memory();
        let nemesis = Process::new(&rec, "nemesis");
        let heal = |restart_ms: u64| {
            let value = json!({ "restart_ms": restart_ms });
            nemesis.fault(Ok(FaultEvent::new(
                FaultKind::ServerKill,
                Action::Heal,
                Some("server"),
                value,
            )));
        };
        let mut faults = ServerFaults::default();
        faults.read(&rec);
        assert_eq!(faults.grace_ms(), SERVER_SILENCE_MS, "no restart yet");
        heal(300);
        faults.read(&rec);
        assert_eq!(faults.grace_ms(), SERVER_SILENCE_MS, "a fast restart");
        heal(3_100);
        heal(1_000);
        faults.read(&rec);
        assert_eq!(faults.grace_ms(), 6_200, "twice the slowest");
        assert!(faults.grace_text().contains("(3100 ms)"));
    }

    #[tokio::test]
    async fn a_port_nobody_listens_on_is_told_from_a_late_answer() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // The listener is dropped: nothing listens there now.
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let e = client.get_multiplexed_async_connection().await.unwrap_err();
        assert!(nothing_listens(&e), "{e}");
        let late = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(!nothing_listens(&late), "{late}");
    }

    #[test]
    fn an_error_s_kind_is_the_server_s_code_or_the_client_s_class() {
        let cases = [
            (
                "lease: server error OOM: command not allowed when used memory > 'maxmemory'.",
                "OOM",
            ),
            (
                "lease: server error NOAUTH: Authentication required.",
                "NOAUTH",
            ),
            (
                "connect: server error authentication failed: WRONGPASS bad",
                "authentication failed",
            ),
            ("enqueue: EMQKIND id must start with JOB", "EMQKIND"),
            (
                "complete: outcome unknown (timed out); the script may or may not have run",
                "unknown outcome",
            ),
            ("reap: server unavailable: refused", "unavailable"),
            ("read: unexpected reply Nil", "unexpected reply"),
            (
                "the worker crashed after sending the ack; its reply was never read",
                "other",
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(error_kind(error), kind, "{error}");
        }
    }

    fn ended(time_ms: u64, f: F, kind: EventKind, error: Option<&str>) -> Event {
        Event {
            v: crate::history::FORMAT_VERSION,
            index: 0,
            time_ms,
            process: "w0".into(),
            kind,
            f,
            job: None,
            token: None,
            value: None,
            error: error.map(str::to_string),
        }
    }

    const OOM: &str =
        "lease: server error OOM: command not allowed when used memory > 'maxmemory'.";

    /// A call every 100 ms from `from_ms` until `until_ms`, each `f` ending
    /// as `kind` with `error`.
    fn calls(
        from_ms: u64,
        until_ms: u64,
        f: F,
        kind: EventKind,
        error: Option<&str>,
    ) -> Vec<Event> {
        (from_ms..until_ms)
            .step_by(100)
            .map(|t| ended(t, f, kind, error))
            .collect()
    }

    #[test]
    fn a_drain_stalls_when_every_call_of_a_stretch_is_refused_for_one_cause_of_the_server_s_state()
    {
        let mut stall = Stall::new(1_000);
        let events = calls(1_000, 7_000, F::Lease, EventKind::Fail, Some(OOM));
        // Not before a whole stretch of the drain has passed.
        assert_eq!(stall.update(&events[..30], 4_000), None);
        let why = stall.update(&events[30..], 7_000).expect("a stall");
        assert!(why.contains("refused by the server with OOM"), "{why}");
        assert!(why.contains("(50 calls: lease 50)"), "{why}");
        assert!(
            why.starts_with("the drain stopped 6000 ms after the heal"),
            "{why}"
        );
    }

    #[test]
    fn a_stretch_with_one_call_answered_or_another_cause_or_a_queue_s_own_error_is_no_stall() {
        let mix = |other: Event| {
            let mut events = calls(0, 6_000, F::Lease, EventKind::Fail, Some(OOM));
            events.insert(40, other);
            Stall::new(0).update(&events, 6_000)
        };
        assert_eq!(mix(ended(4_050, F::Lease, EventKind::Ok, None)), None);
        assert_eq!(
            mix(ended(
                4_050,
                F::Complete,
                EventKind::Fail,
                Some("complete: server error MISCONF: disk")
            )),
            None
        );
        assert_eq!(
            mix(ended(
                4_050,
                F::Lease,
                EventKind::Info,
                Some("lease: outcome unknown (timed out)")
            )),
            None
        );
        // A script's own error is the queue's, never a stall.
        let mut stall = Stall::new(0);
        let script = "lease: server error ERR: Error running script: attempt to compare nil";
        let events = calls(0, 6_000, F::Lease, EventKind::Fail, Some(script));
        assert_eq!(stall.update(&events, 6_000), None);
        // Too few calls in the stretch say nothing.
        let mut stall = Stall::new(0);
        let events: Vec<Event> = calls(0, 6_000, F::Lease, EventKind::Fail, Some(OOM))
            .into_iter()
            .step_by(4)
            .collect();
        assert_eq!(stall.update(&events, 6_000), None);
    }
}
