//! The key layout of one queue: three indexes and one queue-wide column of
//! jobs (a hash keyed by job id; see `lua/prelude.lua` for its fields).
//! Every key shares the hash tag `{name}`, so every script touches a single
//! cluster slot, and every key a script touches is passed in its `KEYS`.
//!
//! # Design notes
//!
//! The layout is columns, not rows (the top of `lua/prelude.lua`): the
//! pending, active and dead sorted sets and one queue-wide hash,
//! `emq:{q}:jobs`, holding each job's `max_attempts payload` under its id
//! and its `attempts state [worker]` under `~id` (absent until its first
//! lease); a done job is in no index, its entry says done. A lease reads
//! both in one `HMGET`, a complete makes three calls, and a batch makes the
//! same calls whatever its size.
//!
//! A field with a long value keeps the hash in the hashtable encoding, so a
//! small queue is not searched linearly (a listpack), and a long member
//! scored `+inf` does the same for the pending and active sorted sets (no
//! range up to a time reaches it; the snapshot leaves both out).
//!
//! `Keys::slot` is the specification's CRC16.

/// The keys of the queue called `name`: `emq:{name}:pending`, and so on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// The queue's name (the hash tag).
    pub name: String,
    /// `emq:{name}:jobs`, the column of jobs: id -> `max_attempts payload`,
    /// and `~id` -> `attempts state` (then ` worker` while active) from the
    /// job's first lease on. A done job is in no index: its state entry
    /// alone says done.
    pub jobs: String,
    /// `emq:{name}:pending`, the sorted set of pending jobs by ready-at.
    pub pending: String,
    /// `emq:{name}:active`, the sorted set of leased jobs by deadline.
    pub active: String,
    /// `emq:{name}:dead`, the sorted set of dead jobs by time of death.
    pub dead: String,
    /// `emq:{name}:fx:`, the prefix of the consumers' effect keys.
    pub effect_prefix: String,
}

/// The field the jobs column holds beside its jobs to keep the hash in the
/// hashtable encoding (`EMQ_WIDE_FIELD` in `lua/prelude.lua`): not a job.
pub(crate) const WIDE_FIELD: &str = "emq:wide";

/// Why a queue name was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid queue name {name:?}: use 1 to 64 of A-Z a-z 0-9 _ . - (it becomes a hash tag and a SCAN pattern)")]
pub struct BadQueueName {
    /// The name that was refused.
    pub name: String,
}

impl Keys {
    /// The keys of queue `name`. Names are restricted so that they can be
    /// used as a hash tag and inside a SCAN pattern without escaping.
    pub fn new(name: &str) -> Result<Keys, BadQueueName> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
        if !ok {
            return Err(BadQueueName {
                name: name.to_owned(),
            });
        }
        let base = format!("emq:{{{name}}}:");
        Ok(Keys {
            name: name.to_owned(),
            jobs: format!("{base}jobs"),
            pending: format!("{base}pending"),
            active: format!("{base}active"),
            dead: format!("{base}dead"),
            effect_prefix: format!("{base}fx:"),
        })
    }

    /// The cluster slot every key of the queue lives in: CRC16 (XMODEM)
    /// of the hash tag (the name), modulo 16384.
    pub fn slot(&self) -> u16 {
        slot_of(&self.name)
    }

    /// The SCAN pattern that matches every key of the queue.
    pub(crate) fn all_pattern(&self) -> String {
        format!("emq:{{{}}}:*", self.name)
    }
}

/// The cluster slot of a key whose hash tag is `tag`: CRC16 (XMODEM, as
/// the cluster specification gives it) of `tag`, modulo 16384.
pub fn slot_of(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag.as_bytes() {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_queue_shares_one_hash_tag() {
        let k = Keys::new("orders").unwrap();
        for key in [&k.pending, &k.active, &k.dead, &k.jobs] {
            assert!(key.starts_with("emq:{orders}:"), "{key}");
        }
    }

    #[test]
    fn queue_names_that_would_break_the_hash_tag_or_scan_are_refused() {
        for bad in ["", "a}b", "a*", "a b", "x[1]", &"q".repeat(65)] {
            assert!(Keys::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_slot_is_the_cluster_specification_s_crc16_of_the_hash_tag() {
        // The specification's check value, and the slots `CLUSTER KEYSLOT`
        // gives for foo and bar.
        assert_eq!(super::slot_of("123456789"), 0x31c3);
        assert_eq!(super::slot_of("foo"), 12182);
        assert_eq!(super::slot_of("bar"), 5061);
        assert_eq!(Keys::new("foo").unwrap().slot(), 12182);
    }
}
