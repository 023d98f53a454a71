//! The queue's Lua scripts as values. Each script is the shared prelude
//! (`lua/prelude.lua`) followed by its body; each is hashed once and called
//! with `EVALSHA`, loaded again when the server answers `NOSCRIPT` (after a
//! `SCRIPT FLUSH` or a restart). `redis::Script` does the hashing and the
//! reload.

use std::sync::Arc;

use redis::Script;

/// The prelude every script starts with: argument validation and the clock.
pub const PRELUDE: &str = include_str!("../../lua/prelude.lua");

/// One script's name and body (without the prelude).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// The operation: `enqueue`, `lease`, ...
    pub name: &'static str,
    /// The Lua body, without the prelude.
    pub body: &'static str,
}

/// The reference scripts, in the order of [`Scripts`]'s fields. The four
/// `*_batch` scripts answer exactly what the same number of successive
/// single calls would, in one round trip and one script run.
pub const REFERENCE: [Source; 11] = [
    Source {
        name: "enqueue",
        body: include_str!("../../lua/enqueue.lua"),
    },
    Source {
        name: "lease",
        body: include_str!("../../lua/lease.lua"),
    },
    Source {
        name: "complete",
        body: include_str!("../../lua/complete.lua"),
    },
    Source {
        name: "fail",
        body: include_str!("../../lua/fail.lua"),
    },
    Source {
        name: "extend",
        body: include_str!("../../lua/extend.lua"),
    },
    Source {
        name: "reap",
        body: include_str!("../../lua/reap.lua"),
    },
    Source {
        name: "snapshot",
        body: include_str!("../../lua/snapshot.lua"),
    },
    Source {
        name: "enqueue_batch",
        body: include_str!("../../lua/enqueue_batch.lua"),
    },
    Source {
        name: "lease_batch",
        body: include_str!("../../lua/lease_batch.lua"),
    },
    Source {
        name: "complete_batch",
        body: include_str!("../../lua/complete_batch.lua"),
    },
    Source {
        name: "fail_batch",
        body: include_str!("../../lua/fail_batch.lua"),
    },
];

/// The full text of a script: the prelude, then the body.
pub fn full_text(body: &str) -> String {
    format!("{PRELUDE}\n{body}")
}

/// The last lines of `complete_lease`: the two calls (see [`complete_lease_text`]).
pub const COMPLETE_LEASE_MAIN: &str = include_str!("../../lua/complete_lease.lua");

/// The full text of `complete_lease` from the bodies of `complete` and
/// `lease`: the prelude, each body spliced in whole as a Lua function whose
/// parameters are named `KEYS` and `ARGV` (so the body reads them as it does
/// alone, and its `return` returns from the function), then the two calls.
/// Built from whatever bodies the client runs, so a mutant of `complete` or
/// `lease` is a mutant of `complete_lease` too.
pub fn complete_lease_text(complete: &str, lease: &str) -> String {
    format!(
        "{PRELUDE}\nlocal function emq_complete(KEYS, ARGV)\n{complete}\nend\n\
         local function emq_lease(KEYS, ARGV)\n{lease}\nend\n{COMPLETE_LEASE_MAIN}"
    )
}

/// The set of scripts one queue client calls. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Scripts {
    inner: Arc<ScriptsInner>,
}

#[derive(Debug)]
struct ScriptsInner {
    enqueue: Script,
    lease: Script,
    complete: Script,
    fail: Script,
    extend: Script,
    reap: Script,
    snapshot: Script,
    enqueue_batch: Script,
    lease_batch: Script,
    complete_batch: Script,
    fail_batch: Script,
    complete_lease: Script,
}

impl Scripts {
    /// The reference scripts from `lua/`.
    pub fn reference() -> Scripts {
        Scripts::with_overrides(&[])
    }

    /// The reference scripts with some bodies replaced, by name: how a
    /// mutant of one script is run with the others unchanged (and
    /// `complete_lease`, built from `complete` and `lease`, takes the
    /// replaced body too). Unknown names are ignored.
    pub fn with_overrides(overrides: &[(&str, &str)]) -> Scripts {
        let source = |name: &str| -> &str {
            overrides
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, b)| *b)
                .or_else(|| REFERENCE.iter().find(|s| s.name == name).map(|s| s.body))
                .expect("every reference script has a source")
        };
        let body = |name: &str| full_text(source(name));
        Scripts {
            inner: Arc::new(ScriptsInner {
                enqueue: Script::new(&body("enqueue")),
                lease: Script::new(&body("lease")),
                complete: Script::new(&body("complete")),
                fail: Script::new(&body("fail")),
                extend: Script::new(&body("extend")),
                reap: Script::new(&body("reap")),
                snapshot: Script::new(&body("snapshot")),
                enqueue_batch: Script::new(&body("enqueue_batch")),
                lease_batch: Script::new(&body("lease_batch")),
                complete_batch: Script::new(&body("complete_batch")),
                fail_batch: Script::new(&body("fail_batch")),
                complete_lease: Script::new(&complete_lease_text(
                    source("complete"),
                    source("lease"),
                )),
            }),
        }
    }

    pub(crate) fn enqueue(&self) -> &Script {
        &self.inner.enqueue
    }
    pub(crate) fn lease(&self) -> &Script {
        &self.inner.lease
    }
    pub(crate) fn complete(&self) -> &Script {
        &self.inner.complete
    }
    pub(crate) fn fail(&self) -> &Script {
        &self.inner.fail
    }
    pub(crate) fn extend(&self) -> &Script {
        &self.inner.extend
    }
    pub(crate) fn reap(&self) -> &Script {
        &self.inner.reap
    }
    pub(crate) fn snapshot(&self) -> &Script {
        &self.inner.snapshot
    }
    pub(crate) fn enqueue_batch(&self) -> &Script {
        &self.inner.enqueue_batch
    }
    pub(crate) fn lease_batch(&self) -> &Script {
        &self.inner.lease_batch
    }
    pub(crate) fn complete_batch(&self) -> &Script {
        &self.inner.complete_batch
    }
    pub(crate) fn fail_batch(&self) -> &Script {
        &self.inner.fail_batch
    }
    pub(crate) fn complete_lease(&self) -> &Script {
        &self.inner.complete_lease
    }

    /// The SHA1 of each script, by name, as `EVALSHA` sends it.
    pub fn hashes(&self) -> Vec<(&'static str, String)> {
        let i = &self.inner;
        [
            ("enqueue", &i.enqueue),
            ("lease", &i.lease),
            ("complete", &i.complete),
            ("fail", &i.fail),
            ("extend", &i.extend),
            ("reap", &i.reap),
            ("snapshot", &i.snapshot),
            ("enqueue_batch", &i.enqueue_batch),
            ("lease_batch", &i.lease_batch),
            ("complete_batch", &i.complete_batch),
            ("fail_batch", &i.fail_batch),
            ("complete_lease", &i.complete_lease),
        ]
        .into_iter()
        .map(|(n, s)| (n, s.get_hash().to_owned()))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_starts_with_the_prelude_and_validates_before_writing() {
        for src in REFERENCE {
            let text = full_text(src.body);
            assert!(text.starts_with(PRELUDE));
            // The first write command must come after the last argument
            // validation.
            let first_write = [
                "'HSET'",
                "'ZADD'",
                "'ZREM'",
                "'SADD'",
                "'HDEL'",
                "'HINCRBY'",
            ]
            .iter()
            .filter_map(|w| src.body.find(w))
            .min();
            let last_check = ["emq_id(", "emq_int(", "emq_worker(", "emq_now("]
                .iter()
                .filter_map(|c| src.body.rfind(c))
                .max();
            if let (Some(w), Some(c)) = (first_write, last_check) {
                assert!(c < w, "{}: a write precedes a validation", src.name);
            }
            // So must the check of the keys' types (emq_types, up front or
            // where a read made with redis.pcall met a key of another
            // type): a WRONGTYPE met by a write after the first would leave
            // the writes before it in place. That every key is covered is
            // checked against a server, key by key (tests/integration/hostile.rs).
            if let Some(w) = first_write {
                let typed = src.body.find("emq_types(");
                assert!(
                    typed.is_some_and(|t| t < w),
                    "{}: a write precedes the key type check",
                    src.name
                );
            }
        }
    }

    #[test]
    fn an_override_changes_only_the_named_script_and_the_scripts_built_from_it() {
        let a = Scripts::reference().hashes();
        let b = Scripts::with_overrides(&[("complete", "return 1")]).hashes();
        for ((na, ha), (nb, hb)) in a.iter().zip(b.iter()) {
            assert_eq!(na, nb);
            let changed = ["complete", "complete_lease"].contains(na);
            assert_eq!(ha == hb, !changed, "{na}");
        }
    }
}
