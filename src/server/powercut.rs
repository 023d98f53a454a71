//! Power loss for a process server: the shim `powercut.c`, built by
//! `build.rs` and embedded here, is loaded with `LD_PRELOAD` into the server
//! when [`Instruments::power_loss`](super::Instruments) asks for it.
//!
//! A kill -9 keeps the operating system's page cache, so everything the
//! server wrote survives it whether or not it was fsynced, and `appendfsync
//! everysec` looks as safe as `always`. The shim remembers each data file's
//! length at its last successful fsync/fdatasync and, on [`cut_signal`],
//! truncates every file to that length and exits with [`STATUS_CUT`]: what is
//! left is what a power loss at that instant would have left. Its header
//! comment says how lengths are followed across renames and unlinks, and what
//! it does not model.
//!
//! Why a shim and not a FUSE filesystem that drops unsynced writes (Jepsen's
//! lazyfs): FUSE puts every write through a user-space daemon and cut the
//! server's write rate by about 3× here, which changes the interleavings a
//! run sees; the shim costs a `fstat` per fsync and nothing per write. It
//! needs no privileges, no `/dev/fuse` and no daemon to manage, and works the
//! same inside a container (`docker kill --signal`).
//!
//! # Design notes
//!
//! `build.rs` compiles `powercut.c` with the `cc` crate; this module embeds
//! it and writes it once to the temp dir, named by its hash. The shim keys
//! each file by inode, in a shared mapping so that the fork children's
//! fsyncs count. The cut signal is `SIGRTMIN+7`; the exit status is 86.

use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

use super::ServerError;

/// The shim, compiled by `build.rs` (empty off Linux).
const SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libackgap_powercut.so"));

/// Where a container backend mounts the power-loss shim.
pub(crate) const SHIM_IN_CONTAINER: &str = "/ackgap/powercut.so";

/// Why a server started without the shim cannot lose power.
pub(crate) const NOT_LOADED: &str =
    "it was started without the power-loss shim (Instruments { power_loss: true, .. })";

/// The exit status of a server the shim cut.
pub(crate) const STATUS_CUT: i32 = 86;
/// The shim's length table overflowed: nothing was cut.
pub(crate) const STATUS_OVERFLOW: i32 = 87;
/// A file could not be truncated.
pub(crate) const STATUS_FAILED: i32 = 88;

/// The prefix of the line the shim writes to the server's stderr (its log).
const LINE_PREFIX: &str = "ackgap-powercut: ";

/// The signal that makes the shim cut: `SIGRTMIN + 7` (`ACKGAP_POWERCUT_RT`
/// in powercut.c), a real-time signal, which Valkey and Redis never use.
pub(crate) fn cut_signal() -> libc::c_int {
    libc::SIGRTMIN() + 7
}

/// What a power loss did: the files it shortened and the unsynced bytes it
/// dropped from them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerLoss {
    /// Files truncated to their synced length.
    pub files: u64,
    /// Bytes written but never fsynced, now gone.
    pub dropped_bytes: u64,
}

/// Power losses of several nodes, summed.
impl std::ops::AddAssign for PowerLoss {
    fn add_assign(&mut self, other: PowerLoss) {
        self.files += other.files;
        self.dropped_bytes += other.dropped_bytes;
    }
}

impl fmt::Display for PowerLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "power loss: dropped {} unsynced bytes from {} files",
            self.dropped_bytes, self.files
        )
    }
}

/// What a server cut with the shim's signal did, from its exit status and
/// the end of its log: the shim's account, or why there is none.
pub(crate) fn read_cut(status: Option<i32>, log_tail: &str) -> Result<PowerLoss, &'static str> {
    match status {
        Some(STATUS_CUT) => parse_cut_line(log_tail).ok_or("the shim's line is not in the log"),
        Some(STATUS_OVERFLOW) => Err("the shim's length table overflowed; nothing cut"),
        Some(STATUS_FAILED) => Err("the shim could not truncate every file"),
        _ => Err("it did not exit through the shim"),
    }
}

/// The last `ackgap-powercut: cut N files, dropped B bytes` line in `log`.
pub(crate) fn parse_cut_line(log: &str) -> Option<PowerLoss> {
    let line = log
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(LINE_PREFIX))?;
    let mut words = line.split(' ');
    let files = words.nth(1)?.parse().ok()?;
    let dropped_bytes = words.nth(2)?.parse().ok()?;
    Some(PowerLoss {
        files,
        dropped_bytes,
    })
}

/// The environment a server loads the shim with.
pub(crate) fn env(dir: &std::path::Path, spare: &str) -> [(&'static str, String); 2] {
    [
        ("ACKGAP_POWERCUT_DIR", dir.display().to_string()),
        ("ACKGAP_POWERCUT_SPARE", spare.to_string()),
    ]
}

/// The shim as a file: written once per process to the temporary directory,
/// named by a hash of its bytes (so builds never overwrite each other's), by
/// a rename (so a reader never sees half of it).
pub(crate) fn shim_path() -> Result<PathBuf, ServerError> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(write_shim)
        .clone()
        .map_err(|reason| ServerError::Fault {
            what: "the power-loss shim".to_string(),
            op: "install",
            reason,
        })
}

fn write_shim() -> Result<PathBuf, String> {
    if SHIM.is_empty() {
        return Err("power loss needs Linux (LD_PRELOAD and real-time signals)".to_string());
    }
    // FNV-1a: a name, not a security boundary.
    let hash = SHIM.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    let dir = std::env::temp_dir();
    let path = dir.join(format!("ackgap-powercut-{hash:016x}.so"));
    if std::fs::read(&path).is_ok_and(|bytes| bytes == SHIM) {
        return Ok(path);
    }
    let mut file = tempfile::Builder::new()
        .prefix("ackgap-powercut-")
        .tempfile_in(&dir)
        .map_err(|e| format!("creating a file in {}: {e}", dir.display()))?;
    std::io::Write::write_all(&mut file, SHIM)
        .map_err(|e| format!("writing {}: {e}", file.path().display()))?;
    file.persist(&path)
        .map_err(|e| format!("renaming to {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cut_line_is_read_from_the_end_of_the_log() {
        let log = "ackgap-powercut: cut 9 files, dropped 9 bytes\n\
                   1:M * Ready to accept connections\n\
                   ackgap-powercut: cut 1 files, dropped 2862 bytes\n";
        assert_eq!(
            parse_cut_line(log),
            Some(PowerLoss {
                files: 1,
                dropped_bytes: 2862
            })
        );
        assert_eq!(parse_cut_line("no such line\n"), None);
    }

    #[test]
    fn the_shim_is_embedded_on_linux() {
        assert_eq!(SHIM.is_empty(), !cfg!(target_os = "linux"));
    }
}
