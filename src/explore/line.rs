//! The replay line: one shell-safe token that names everything a failing
//! run needs to run again exactly — the queue under test, the consumer, the
//! configuration and the schedule:
//!
//! ```text
//! reference/marker/j2w2l100m3r1/e0.l1.c1
//! ```
//!
//! The configuration reads `j` jobs, `w` workers, `l` lease (ms), `m`
//! max_attempts, `r` reap limit (`r` may be left out: 1). Steps are in
//! their text form (see [`super::op`]) separated by dots; `-` is the empty
//! schedule. `ackgap replay LINE` runs it, heals and judges like
//! `ackgap explore`.
//!
//! # Design notes
//!
//! A line of a queue on the server clock needs nothing more: its queue gives
//! the capabilities, its logical lease the scale, and its ticks replay as
//! real waits.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::op::{Schedule, Step};

/// The settings a replay line carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LineConfig {
    /// Jobs in play at a time (only the random walk uses it).
    pub jobs: u8,
    /// Workers `w0 ..`.
    pub workers: u8,
    /// The lease length (ms, logical time).
    pub lease_ms: u64,
    /// `max_attempts` of every enqueue.
    pub max_attempts: u64,
    /// The `limit` of every reap.
    pub reap_limit: u64,
}

impl fmt::Display for LineConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "j{}w{}l{}m{}r{}",
            self.jobs, self.workers, self.lease_ms, self.max_attempts, self.reap_limit
        )
    }
}

/// The longest lease, and the latest time, the scripts accept
/// (`EMQ_MAX_MS` in `lua/prelude.lua`), in ms.
pub(crate) const LEASE_MS_MAX: u64 = 1_000_000_000_000_000;
/// The largest `max_attempts` an enqueue accepts (`lua/enqueue.lua`).
pub const MAX_ATTEMPTS_MAX: u64 = 1_000_000;
/// The largest `limit` a reap accepts (`lua/reap.lua`).
pub const REAP_LIMIT_MAX: u64 = 100_000;

impl FromStr for LineConfig {
    type Err = String;

    fn from_str(s: &str) -> Result<LineConfig, String> {
        let mut fields = std::collections::BTreeMap::new();
        let mut rest = s;
        while let Some(letter) = rest.chars().next() {
            let digits = rest[1..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(rest.len(), |i| i + 1);
            let value: u64 = rest[1..digits]
                .parse()
                .map_err(|_| format!("configuration {s:?}: {letter:?} needs a number"))?;
            if !"jwlmr".contains(letter) {
                return Err(format!(
                    "configuration {s:?}: unknown field {letter:?} (j w l m r)"
                ));
            }
            fields.insert(letter, value);
            rest = &rest[digits..];
        }
        let get = |letter: char| {
            fields
                .get(&letter)
                .copied()
                .ok_or_else(|| format!("configuration {s:?}: {letter:?} is missing"))
        };
        let small = |letter: char| -> Result<u8, String> {
            let v = get(letter)?;
            u8::try_from(v)
                .ok()
                .filter(|v| *v >= 1)
                .ok_or_else(|| format!("configuration {s:?}: {letter} must be 1..=255, got {v}"))
        };
        // Every field in the range the queue accepts, checked before the
        // run: out of it, the queue would refuse the arguments and the run
        // would blame the queue for it.
        let within = |letter: char, v: u64, max: u64, what: &str| {
            if (1..=max).contains(&v) {
                Ok(v)
            } else {
                Err(format!(
                    "configuration {s:?}: {letter} ({what}) must be 1..={max}, got {v}"
                ))
            }
        };
        Ok(LineConfig {
            jobs: small('j')?,
            workers: small('w')?,
            lease_ms: within('l', get('l')?, LEASE_MS_MAX, "the lease in ms")?,
            max_attempts: within('m', get('m')?, MAX_ATTEMPTS_MAX, "max_attempts")?,
            reap_limit: within(
                'r',
                fields.get(&'r').copied().unwrap_or(1),
                REAP_LIMIT_MAX,
                "the reap limit",
            )?,
        })
    }
}

/// `word` as one shell word: as is when it holds only characters no shell
/// treats specially (every shipped replay line does), else in single
/// quotes (an `exec:` queue's command), so that a printed command can be
/// pasted as is.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// What a printed command needs, besides its own flags, to run the same
/// thing again where it ran: an environment prefix (`ACKGAP_VALKEY_SERVER=…`,
/// the server binary a process backend ran) and the server's flags
/// (`--server …`, `--persistence …` where it applies). The command line
/// fills it in from its `--server`; empty (the default) in a library run,
/// whose commands then read as before.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rerun {
    /// Put before the command, ending in a space when not empty.
    pub env: String,
    /// Put after the command, starting with a space when not empty.
    pub flags: String,
}

impl Rerun {
    /// `command` (an `ackgap …` line) with the environment and the flags.
    pub fn command(&self, command: &str) -> String {
        format!("{}{command}{}", self.env, self.flags)
    }
}

/// A run named by one token: `QUEUE/CONSUMER/CONFIG/STEPS`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Line {
    /// The queue under test (`reference`, `lmove`, `rpop`).
    pub queue: String,
    /// The consumer (`marker`, `naive`, ...).
    pub consumer: String,
    /// The settings.
    pub config: LineConfig,
    /// The steps before healing.
    pub schedule: Schedule,
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}/", self.queue, self.consumer, self.config)?;
        if self.schedule.is_empty() {
            return f.write_str("-");
        }
        for (i, step) in self.schedule.steps().iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{step}")?;
        }
        Ok(())
    }
}

impl FromStr for Line {
    type Err = String;

    fn from_str(s: &str) -> Result<Line, String> {
        // A byte-order mark (a line pasted from a file an editor saved)
        // is not part of the queue's name.
        let s = s.trim().strip_prefix('\u{feff}').unwrap_or(s.trim());
        // From the right: an `exec:` queue's command may hold slashes,
        // the other three parts never do.
        let parts: Vec<&str> = s.trim().rsplitn(4, '/').collect();
        let [steps, config, consumer, queue] = parts[..] else {
            return Err(format!(
                "replay line {s:?}: expected QUEUE/CONSUMER/CONFIG/STEPS"
            ));
        };
        let steps = if steps == "-" {
            Vec::new()
        } else {
            steps
                .split('.')
                .enumerate()
                .map(|(i, token)| {
                    Step::parse(token)
                        .map_err(|e| format!("replay line step {i} {token:?}: {}", e.reason))
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        Ok(Line {
            queue: queue.to_owned(),
            consumer: consumer.to_owned(),
            config: config.parse()?,
            schedule: Schedule(steps),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_line_round_trips_through_its_text_form() {
        let text = "lmove/naive/j2w2l100m3r2/e0.l1.a1.f1:25.c1";
        let line: Line = text.parse().unwrap();
        assert_eq!(line.config.lease_ms, 100);
        assert_eq!(line.schedule.len(), 5);
        assert_eq!(line.to_string(), text);
        let empty: Line = "rpop/marker/j1w1l50m1r1/-".parse().unwrap();
        assert!(empty.schedule.is_empty());
        assert_eq!(empty.to_string(), "rpop/marker/j1w1l50m1r1/-");
    }

    #[test]
    fn a_replay_line_with_server_faults_round_trips() {
        let text = "reference/marker/j1w1l100m3r1/e0.w50.e1.P.l0.K.c0";
        let line: Line = text.parse().unwrap();
        assert_eq!(line.schedule.steps()[3], Step::PowerLoss);
        assert_eq!(line.schedule.steps()[5], Step::ServerKill);
        assert_eq!(line.to_string(), text);
    }

    #[test]
    fn a_replay_line_after_a_byte_order_mark_parses_as_without_it() {
        let text = "lmove/naive/j2w2l100m3r2/e0.l1.a1.f1:25.c1";
        let marked: Line = format!("\u{feff}{text}\n").parse().unwrap();
        assert_eq!(marked.to_string(), text);
    }

    #[test]
    fn the_reap_limit_may_be_left_out_and_bad_lines_are_refused() {
        let line: Line = "reference/marker/j2w2l100m3/e0.l1.c1".parse().unwrap();
        assert_eq!(line.config.reap_limit, 1);
        for bad in [
            "reference/marker/j2w2l100m3",
            "reference/marker/j2w0l100m3/e0",
            "reference/marker/j2w2l100/e0",
            "reference/marker/j2w2l100m3q1/e0",
            "reference/marker/j2w2l100m3/e0.q1",
        ] {
            assert!(bad.parse::<Line>().is_err(), "{bad} parsed");
        }
    }
}
