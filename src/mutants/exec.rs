//! The mutants of a queue ackgap did not write: each a mode of
//! `tests/adapters/fenced.py` (a correct leased, fenced queue with opaque
//! tokens, its own Lua, over the adapter protocol), run as
//! `exec:python3 fenced.py --MODE`. No model describes such a queue, so
//! only the history checkers judge it: these rows show what they catch on
//! a queue whose every answer the refinement check cannot see.
//!
//! A new mode is one line of [`EXEC`] (and its flag in fenced.py's
//! `MUTANTS` list): its row's name, the flag, what it breaks and the
//! invariants expected to catch it.
//!
//! The script is compiled into the binary and written once per process to
//! the temporary directory, named by a hash of its bytes, so an installed
//! `ackgap mutants` runs it without the source tree (python3 on `PATH` is
//! the one requirement).
//!
//! # Design notes
//!
//! Each row runs on the same server as the others, and is searched by the
//! blind exhaustive search and the walks.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::{Mutant, Mutation};

/// The correct adapter whose modes are the mutants.
pub const FENCED: &str = include_str!("../../tests/adapters/fenced.py");

/// A mutant of fenced.py: `name`, the `flag` that turns it on, what it
/// `breaks`, the invariants `expected` to catch it.
pub const fn fenced(
    name: &'static str,
    flag: &'static str,
    breaks: &'static str,
    expected: &'static [&'static str],
) -> Mutant {
    Mutant {
        name,
        breaks,
        expected,
        kind: Mutation::Exec(flag),
    }
}

/// Every `exec:` mutant, in the matrix's order (after the others).
#[rustfmt::skip]
pub const EXEC: &[Mutant] = &[
    fenced("fenced-complete-ignores-state", "--complete-ignores-state", "complete checks the token but not that the job is active", &["fenced-settlement", "settle-once", "structure"]),
    fenced("fenced-extend-late-unfenced", "--extend-late-unfenced", "extend checks the token only before the deadline", &["fenced-settlement"]),
    fenced("fenced-fail-keeps-active", "--fail-keeps-active", "a requeueing fail leaves the job in active too (two indexes)", &["structure", "settle-once"]),
    fenced("fenced-dead-letter-late", "--dead-letter-late", "the dead letter one attempt late (a delivery past max_attempts)", &["bounded-retries"]),
    fenced("fenced-fail-ignores-delay", "--fail-ignores-delay", "a fail requeues at once though its ready_at_ms says later", &["delay-respected"]),
    fenced("fenced-overwrite-done-payload", "--overwrite-done-payload", "a duplicate enqueue overwrites a done job's payload and answers duplicate", &["admission"]),
];

/// The `--queue` of a mode: `exec:python3 FENCED.py FLAG`, the script
/// written to the temporary directory first (see the module docs).
pub fn spec(flag: &str) -> Result<String, String> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let path = PATH.get_or_init(write_script).clone()?;
    Ok(format!("exec:python3 {} {flag}", path.display()))
}

fn write_script() -> Result<PathBuf, String> {
    // FNV-1a: a name, not a security boundary.
    let hash = FENCED.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let dir = std::env::temp_dir();
    let path = dir.join(format!("ackgap-fenced-{hash:016x}.py"));
    if std::fs::read(&path).is_ok_and(|bytes| bytes == FENCED.as_bytes()) {
        return Ok(path);
    }
    let mut file = tempfile::Builder::new()
        .prefix("ackgap-fenced-")
        .tempfile_in(&dir)
        .map_err(|e| format!("creating a file in {}: {e}", dir.display()))?;
    std::io::Write::write_all(&mut file, FENCED.as_bytes())
        .map_err(|e| format!("writing {}: {e}", file.path().display()))?;
    file.persist(&path)
        .map_err(|e| format!("renaming to {}: {e}", path.display()))?;
    Ok(path)
}

/// The URL of the server `client` connects to, for an adapter's hello:
/// `redis://[user:password@]host:port/db` (`rediss://` over TLS).
pub(crate) fn url_of(client: &redis::Client) -> Result<String, String> {
    let info = client.get_connection_info();
    let (scheme, host, port) = match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => ("redis", host, port),
        redis::ConnectionAddr::TcpTls { host, port, .. } => ("rediss", host, port),
        other => return Err(format!("an exec: mutant needs a TCP server, not {other:?}")),
    };
    let settings = info.redis_settings();
    let auth = match (settings.username(), settings.password()) {
        (Some(user), Some(password)) => format!("{}:{}@", escape(user), escape(password)),
        (None, Some(password)) => format!(":{}@", escape(password)),
        (Some(user), None) => format!("{}@", escape(user)),
        (None, None) => String::new(),
    };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    Ok(format!("{scheme}://{auth}{host}:{port}/{}", settings.db()))
}

/// `s` percent-encoded but for the URL's unreserved characters.
fn escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_of_a_client_carries_its_credentials_escaped_and_its_database() {
        let client = redis::Client::open("redis://u%40x:p%3Aw@127.0.0.1:6390/3").unwrap();
        assert_eq!(
            url_of(&client).unwrap(),
            "redis://u%40x:p%3Aw@127.0.0.1:6390/3"
        );
    }

    #[test]
    fn every_exec_mutant_names_a_mode_fenced_py_knows() {
        for m in EXEC {
            let Mutation::Exec(flag) = m.kind else {
                panic!("{} is not an exec mutant", m.name);
            };
            assert!(FENCED.contains(&format!("\"{flag}\"")), "{flag}");
        }
    }
}
