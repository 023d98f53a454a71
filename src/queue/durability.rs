//! The durability dial: what a write must reach before the client reports
//! it `ok` (`--durability none|wait:N|waitaof:L:N`).
//!
//! Valkey replicates asynchronously: a primary acknowledges a write before
//! any replica has it, and a failover to a replica that never received it
//! loses it. `WAIT N T` blocks until N replicas acknowledged every write
//! made *on the same connection* (or T ms pass) and answers how many did;
//! `WAITAOF L N T` also waits for the primary's own AOF fsync (L = 1,
//! which needs `appendonly yes`) and the replicas' (N). Valkey documents
//! that neither makes the system strongly consistent: a failover may still
//! promote a replica that did not confirm. They narrow the window.
//!
//! The client confirms every script that writes: enqueues and settles,
//! and leases, extends and reaps too (a lease lost in a failover hands its
//! token out again). It sends the WAIT in the same pipeline as the write, so both go
//! on one connection in order (a WAIT on another connection would answer
//! the replica count at once, confirming nothing). With fewer
//! confirmations than asked, the write's outcome is unknown
//! ([`super::QueueError::Unknown`]: `info` in a history), never `ok`.
//!
//! # Design notes
//!
//! The WAIT or WAITAOF sits between two `INFO replication` reads: a role or
//! `master_replid` that changed across the WAIT (a Valkey Cluster's blocked
//! WAIT outlives a demotion and a full resync) also makes the outcome
//! `Unknown`, never ok.

use std::fmt;
use std::str::FromStr;

use redis::{Cmd, RedisResult, Value};

/// How long a WAIT or WAITAOF waits for its confirmations unless the dial
/// says otherwise (ms). The connection answers nothing else meanwhile.
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 = 500;

/// What a write must reach before it is reported `ok`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// The primary's reply is enough (Valkey's default).
    #[default]
    None,
    /// `WAIT replicas timeout_ms` after every write script.
    Wait {
        /// Replicas that must confirm.
        replicas: u64,
        /// How long to wait for them (ms).
        timeout_ms: u64,
    },
    /// `WAITAOF local replicas timeout_ms` after every write script.
    WaitAof {
        /// 1: the primary's own AOF must be fsynced (needs AOF on).
        local: u64,
        /// Replicas whose AOF must be fsynced.
        replicas: u64,
        /// How long to wait (ms).
        timeout_ms: u64,
    },
}

impl Durability {
    /// True when writes are followed by a WAIT or WAITAOF.
    pub fn waits(&self) -> bool {
        !matches!(self, Durability::None)
    }

    /// The command that follows a write; `None` for [`Durability::None`].
    pub(crate) fn command(&self) -> Option<Cmd> {
        match *self {
            Durability::None => None,
            Durability::Wait {
                replicas,
                timeout_ms,
            } => {
                let mut cmd = redis::cmd("WAIT");
                cmd.arg(replicas).arg(timeout_ms);
                Some(cmd)
            }
            Durability::WaitAof {
                local,
                replicas,
                timeout_ms,
            } => {
                let mut cmd = redis::cmd("WAITAOF");
                cmd.arg(local).arg(replicas).arg(timeout_ms);
                Some(cmd)
            }
        }
    }

    /// Why the reply of [`Durability::command`] does not confirm the
    /// write, or `None` when it does.
    pub(crate) fn shortfall(&self, reply: &Value) -> Option<String> {
        let count = |v: &Value| match v {
            Value::Int(n) => Some(*n),
            _ => None,
        };
        match (*self, reply) {
            (Durability::None, _) => None,
            (
                Durability::Wait {
                    replicas,
                    timeout_ms,
                },
                v,
            ) => match count(v) {
                Some(n) if n >= 0 && n as u64 >= replicas => None,
                Some(n) => Some(format!(
                    "WAIT {replicas} {timeout_ms}: {n} of {replicas} replicas confirmed"
                )),
                None => Some(format!("WAIT {replicas} {timeout_ms}: answered {v:?}")),
            },
            (
                Durability::WaitAof {
                    local,
                    replicas,
                    timeout_ms,
                },
                Value::Array(items),
            ) if items.len() == 2 => match (count(&items[0]), count(&items[1])) {
                (Some(l), Some(r)) if l >= local as i64 && r >= replicas as i64 => None,
                (l, r) => Some(format!(
                    "WAITAOF {local} {replicas} {timeout_ms}: local {} of {local}, {} of {replicas} replicas fsynced",
                    l.unwrap_or(-1),
                    r.unwrap_or(-1)
                )),
            },
            (
                Durability::WaitAof {
                    local,
                    replicas,
                    timeout_ms,
                },
                v,
            ) => Some(format!(
                "WAITAOF {local} {replicas} {timeout_ms}: answered {v:?}"
            )),
        }
    }
}

impl fmt::Display for Durability {
    /// The form [`FromStr`] accepts; the timeout only when it is not the
    /// default.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let timeout = |t: u64| {
            if t == DEFAULT_WAIT_TIMEOUT_MS {
                String::new()
            } else {
                format!(":{t}")
            }
        };
        match *self {
            Durability::None => f.write_str("none"),
            Durability::Wait {
                replicas,
                timeout_ms,
            } => write!(f, "wait:{replicas}{}", timeout(timeout_ms)),
            Durability::WaitAof {
                local,
                replicas,
                timeout_ms,
            } => write!(f, "waitaof:{local}:{replicas}{}", timeout(timeout_ms)),
        }
    }
}

/// A `--durability` that does not parse.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid durability `{0}`: expected `none`, `wait:N[:TIMEOUT_MS]` (N replicas) or \
     `waitaof:L:N[:TIMEOUT_MS]` (L 0 or 1: the primary's AOF; N replicas' AOF)"
)]
pub struct BadDurability(pub String);

impl FromStr for Durability {
    type Err = BadDurability;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadDurability(s.to_string());
        let parts: Vec<&str> = s.split(':').collect();
        let num = |p: &str| p.parse::<u64>().map_err(|_| bad());
        let timeout = |p: Option<&&str>| match p {
            None => Ok(DEFAULT_WAIT_TIMEOUT_MS),
            Some(t) => match num(t)? {
                0 => Err(bad()),
                t => Ok(t),
            },
        };
        match parts.as_slice() {
            ["none"] => Ok(Durability::None),
            ["wait", n, rest @ ..] if rest.len() <= 1 => Ok(Durability::Wait {
                replicas: num(n)?,
                timeout_ms: timeout(rest.first())?,
            }),
            ["waitaof", l, n, rest @ ..] if rest.len() <= 1 => {
                let local = num(l)?;
                if local > 1 {
                    return Err(bad());
                }
                Ok(Durability::WaitAof {
                    local,
                    replicas: num(n)?,
                    timeout_ms: timeout(rest.first())?,
                })
            }
            _ => Err(bad()),
        }
    }
}

/// `INFO replication`: the node's role and replication id, read before a
/// confirmed write and after its WAIT (see [`history_changed`]), in the same
/// pipeline.
pub(crate) fn replication_identity() -> Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("replication");
    cmd
}

/// Why a WAIT's count between the two `INFO replication` replies
/// `before` and `after` does not confirm the write between them, or `None`
/// when it does: the node was a primary both times, with one replication
/// id.
///
/// A WAIT counts replicas whose acknowledged offset reached the offset of
/// the client's last write. On a Valkey Cluster (9.1 measured) a WAIT
/// blocked on a primary outlives the primary's demotion: when the demoted
/// node resyncs in full from its successor, the write is discarded, and
/// if the node is promoted again before the WAIT times out, its new
/// replicas' offsets — of another history — pass the old one and the WAIT
/// answers them as confirmations of a write no node holds
/// (`tests/integration/cluster.rs`,
/// `valkey_s_wait_confirms_a_write_that_a_full_resync_discarded_and_the_dial_reports_it_unknown`).
/// Every promotion and every resync changes the node's `master_replid`,
/// so an unchanged id and role mean the count is of the history the
/// write went into.
pub(crate) fn history_changed(
    before: Option<RedisResult<Value>>,
    after: Option<RedisResult<Value>>,
) -> Option<String> {
    let identity = |reply: Option<RedisResult<Value>>| -> Result<(String, String), String> {
        let text = match reply {
            Some(Ok(Value::BulkString(b))) => String::from_utf8_lossy(&b).into_owned(),
            Some(Ok(Value::VerbatimString { text, .. })) => text,
            Some(Ok(Value::SimpleString(s))) => s,
            Some(Ok(other)) => return Err(format!("INFO replication answered {other:?}")),
            Some(Err(e)) => return Err(format!("INFO replication failed: {e}")),
            None => return Err("INFO replication was not answered".into()),
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.trim_end().strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or("?")
                .to_owned()
        };
        Ok((field("role"), field("master_replid")))
    };
    match (identity(before), identity(after)) {
        (Err(e), _) | (_, Err(e)) => Some(e),
        (Ok(b), Ok(a)) if b == a && b.0 == "master" => None,
        (Ok((role_b, id_b)), Ok((role_a, id_a))) => Some(format!(
            "the node changed while the write waited (role {role_b}, replication id {id_b} before \
             the write; role {role_a}, replication id {id_a} after the WAIT)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dial_round_trips_through_its_text_and_refuses_nonsense() {
        for text in [
            "none",
            "wait:1",
            "wait:2:100",
            "waitaof:1:0",
            "waitaof:0:1:250",
        ] {
            assert_eq!(text.parse::<Durability>().unwrap().to_string(), text);
        }
        for bad in [
            "",
            "wait",
            "wait:x",
            "wait:1:0",
            "waitaof:2:1",
            "waitaof:1",
            "always",
        ] {
            assert!(bad.parse::<Durability>().is_err(), "{bad}");
        }
    }

    #[test]
    fn fewer_confirmations_than_asked_is_a_shortfall() {
        let wait: Durability = "wait:2".parse().unwrap();
        assert_eq!(wait.shortfall(&Value::Int(2)), None);
        assert!(wait.shortfall(&Value::Int(1)).unwrap().contains("1 of 2"));
        let aof: Durability = "waitaof:1:1".parse().unwrap();
        assert_eq!(
            aof.shortfall(&Value::Array(vec![Value::Int(1), Value::Int(1)])),
            None
        );
        assert!(aof
            .shortfall(&Value::Array(vec![Value::Int(0), Value::Int(1)]))
            .is_some());
        assert!(aof.shortfall(&Value::Nil).is_some());
    }

    fn info(role: &str, id: &str) -> Option<RedisResult<Value>> {
        Some(Ok(Value::BulkString(
            format!("# Replication\r\nrole:{role}\r\nconnected_slaves:1\r\nmaster_replid:{id}\r\nmaster_repl_offset:99\r\n")
                .into_bytes(),
        )))
    }

    #[test]
    fn a_wait_confirms_only_when_the_node_stayed_the_primary_of_one_history() {
        assert_eq!(
            history_changed(info("master", "a"), info("master", "a")),
            None
        );
        // Demoted, resynced and promoted again while the WAIT blocked: a
        // new replication id.
        let changed = history_changed(info("master", "a"), info("master", "c")).unwrap();
        assert!(changed.contains("replication id a before"), "{changed}");
        assert!(changed.contains("replication id c after"), "{changed}");
        // Still demoted when the WAIT answered.
        assert!(history_changed(info("master", "a"), info("slave", "b")).is_some());
        // A replica throughout is no primary's confirmation either.
        assert!(history_changed(info("slave", "a"), info("slave", "a")).is_some());
        // An identity not read confirms nothing.
        assert!(history_changed(None, info("master", "a")).is_some());
        let failed = Some(Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "dropped",
        ))));
        assert!(history_changed(info("master", "a"), failed).is_some());
    }
}
