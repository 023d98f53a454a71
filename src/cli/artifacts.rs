//! Where a command's files go, and the order that keeps a failed command
//! from touching an earlier run's.
//!
//! Every run of `ackgap run` and `ackgap chaos` gets a directory of its own,
//! `target/ackgap/COMMAND/TIME-seedSEED[-TAG]/` (TIME in UTC,
//! `2026-12-01T17-20-05`; a second run in the same second gets `-2`), and
//! `target/ackgap/COMMAND/latest` is a symlink to the newest. The directory
//! is created only after the arguments were checked and the server was
//! reached, so a command that fails before its run leaves no directory and
//! moves no `latest`.
//!
//! `--history FILE` is an explicit path: a file the run would write (the
//! history, and for `chaos` the `.json`, `.html` and `.txt` beside it) that
//! already exists is refused (exit 73) unless `--force` is given.
//!
//! # Design notes
//!
//! The directories are `target/ackgap/chaos/`, `target/ackgap/runs/` and
//! `target/ackgap/explore/`; the tag is the queue's name.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use ackgap::campaign::HistoryWriteError;

use super::{Exit, ExitError};

/// The folder of `command`'s runs: `target/ackgap/COMMAND`.
pub(super) fn command_dir(command: &str) -> PathBuf {
    Path::new("target/ackgap").join(command)
}

/// The folder `file` is in (`.` for a bare file name).
pub(super) fn dir_of(file: &Path) -> &Path {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// An error writing the history at `path`: exit 73.
fn cant_create(path: &Path, reason: impl std::fmt::Display) -> ExitError {
    ExitError::new(
        Exit::CantCreate,
        HistoryWriteError {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        },
    )
}

/// Checks, before any server starts, that the history can be written
/// where the run will write it, and touches no existing file.
///
/// With an explicit `history`: each of `files` (the history and the
/// files written beside it) must not be a regular file unless `force` (a
/// device such as `/dev/null` is written to), must not be a
/// directory, and its folder must take a new file (probed with a file
/// created and removed again). Without one: the folder of the command's
/// runs must exist or be creatable.
pub(super) fn check_writable(
    command: &str,
    history: Option<&Path>,
    files: &[PathBuf],
    force: bool,
) -> Result<(), ExitError> {
    let Some(history) = history else {
        let dir = command_dir(command);
        return std::fs::create_dir_all(&dir).map_err(|e| cant_create(&dir, e));
    };
    if history.is_dir() {
        return Err(cant_create(history, "it is a directory"));
    }
    for file in files {
        if file.is_dir() {
            return Err(cant_create(file, "it is a directory"));
        }
        // Only a regular file can be an earlier run's: a device or a pipe
        // (`/dev/null`, `/dev/stdout`) is written to as asked.
        if file.is_file() && !force {
            return Err(cant_create(
                file,
                "the file exists (an earlier run's?); pass --force to replace it, or name another file",
            ));
        }
    }
    if history.exists() {
        // --force, or not a regular file: it must open for writing
        // (without truncating it yet).
        return std::fs::OpenOptions::new()
            .append(true)
            .open(history)
            .map(drop)
            .map_err(|e| cant_create(history, e));
    }
    if let Some(parent) = history.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| cant_create(history, ackgap::history::in_the_way(parent, e)))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(history)
        .map_err(|e| cant_create(history, e))?;
    std::fs::remove_file(history).map_err(|e| cant_create(history, e))
}

/// Creates a new directory for one run of `command` with seed `seed`
/// (`tag`, if not empty, names the subject), points the command's
/// `latest` at it, and returns its path.
pub(super) fn run_dir(command: &str, seed: u64, tag: &str) -> Result<PathBuf, ExitError> {
    let base = command_dir(command);
    std::fs::create_dir_all(&base).map_err(|e| cant_create(&base, e))?;
    let tag = slug(tag);
    let stem = format!(
        "{}-seed{seed}{}{tag}",
        utc_stamp(SystemTime::now()),
        if tag.is_empty() { "" } else { "-" }
    );
    let mut n = 1;
    let dir = loop {
        let name = if n == 1 {
            stem.clone()
        } else {
            format!("{stem}-{n}")
        };
        let dir = base.join(&name);
        match std::fs::create_dir(&dir) {
            Ok(()) => break dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(cant_create(&dir, e)),
        }
    };
    if let Err(e) = point_latest(&base, &dir) {
        errln!(
            "ackgap: cannot point {} at {}: {e}",
            base.join("latest").display(),
            dir.display()
        );
    }
    Ok(dir)
}

/// Points `base/latest` at `dir` (a relative symlink, replaced atomically).
#[cfg(unix)]
fn point_latest(base: &Path, dir: &Path) -> std::io::Result<()> {
    let name = dir.file_name().unwrap_or_default();
    let tmp = base.join(format!(".latest-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(name, &tmp)?;
    std::fs::rename(&tmp, base.join("latest"))
}

/// No symlinks here: `latest` is not kept.
#[cfg(not(unix))]
fn point_latest(_base: &Path, _dir: &Path) -> std::io::Result<()> {
    Ok(())
}

/// `tag` as part of a directory name: letters, digits, `.` and `_` kept,
/// runs of anything else one `-`, at most 40 bytes.
fn slug(tag: &str) -> String {
    let mut out = String::new();
    for c in tag.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    out.trim_end_matches('-').to_string()
}

/// `t` in UTC as `2026-12-01T17-20-05` (no colons: a file name).
fn utc_stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stamps_are_utc_dates_without_colons() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "1970-01-01T00-00-00");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_145_605);
        assert_eq!(utc_stamp(t), "2026-12-01T17-20-05");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(utc_stamp(leap), "2000-02-29T00-00-00");
    }

    #[test]
    fn tags_become_one_safe_word() {
        assert_eq!(slug("lmove"), "lmove");
        assert_eq!(
            slug("exec:python3 adapters/x.py"),
            "exec-python3-adapters-x.py"
        );
        assert_eq!(slug(""), "");
    }
}
