//! Where an `exec:` child's stderr goes ([`log_stderr_to`]): a log file
//! each child appends to under a header naming it, and its last
//! [`STDERR_TAIL`] lines kept for the error that quotes them when the child
//! dies or refuses its hello.

use std::sync::Mutex;

use tokio::io::BufReader;

use super::{lock, stderr_log, Link, STDERR_TAIL};

/// A child's stderr, captured ([`log_stderr_to`]).
pub(super) struct StderrLog {
    pub(super) path: std::path::PathBuf,
    pub(super) tail: Mutex<std::collections::VecDeque<String>>,
    pub(super) ended: tokio::sync::watch::Sender<bool>,
}

impl StderrLog {
    /// The last lines, each `  | LINE`, after a line naming the log; empty
    /// when the child wrote nothing there.
    pub(super) fn quoted(&self) -> String {
        let tail = lock(&self.tail);
        if tail.is_empty() {
            return format!(" (its stderr, empty, is logged in {})", self.path.display());
        }
        let mut out = format!(
            "; the last {} of its stderr (all of it is in {}):",
            match tail.len() {
                1 => "line".to_owned(),
                n => format!("{n} lines"),
            },
            self.path.display()
        );
        for line in tail.iter() {
            out.push_str("\n  | ");
            out.push_str(line);
        }
        out
    }
}

/// The log file of a child started now ([`log_stderr_to`]), opened for
/// appending; `None` (the terminal) when there is none or it cannot be
/// opened (said once on stderr).
pub(super) fn open_stderr_log() -> Option<(std::path::PathBuf, std::fs::File)> {
    let path = stderr_log()?;
    let opened = (|| {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
    })();
    match opened {
        Ok(file) => Some((path, file)),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!(
                    "ackgap: cannot write the adapter's log {} ({e}): its stderr stays on the terminal",
                    path.display()
                );
            });
            None
        }
    }
}

/// The stderr task: each line of the child's stderr appended to its log
/// and kept among the last [`STDERR_TAIL`]; at EOF the log says it ended.
pub(super) async fn copy_stderr(
    link: std::sync::Weak<Link>,
    stderr: tokio::process::ChildStderr,
    mut file: std::fs::File,
) {
    use std::io::Write as _;
    use tokio::io::AsyncBufReadExt as _;
    let mut reader = BufReader::new(stderr);
    let mut bytes = Vec::new();
    // Bytes, not text: a line that is not UTF-8 is kept (lossily in the
    // tail), and the pipe is read to its end, so the child never blocks
    // on a full stderr.
    loop {
        bytes.clear();
        match reader.read_until(b'\n', &mut bytes).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // A log that cannot be written loses lines, never the run.
        let _ = file.write_all(&bytes);
        if !bytes.ends_with(b"\n") {
            let _ = file.write_all(b"\n");
        }
        let line = String::from_utf8_lossy(&bytes)
            .trim_end_matches(['\n', '\r'])
            .to_owned();
        let Some(link) = link.upgrade() else { return };
        if let Some(log) = &link.stderr {
            let mut tail = lock(&log.tail);
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
    if let Some(log) = link.upgrade().as_ref().and_then(|l| l.stderr.as_ref()) {
        log.ended.send_replace(true);
    }
}
