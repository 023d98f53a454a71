//! The queue's Lua scripts as one Valkey Functions library. The library is
//! the shared prelude (`lua/prelude.lua`), then each script's body as a
//! function registered under `{library}_{op}`, called with `FCALL`: the
//! prelude's helpers are built once, when the library is loaded, not on
//! every call as with `EVALSHA`, and a library replicates and survives a
//! restart and a failover. The library's name is `ackgap_` and the first
//! 12 hex digits of the SHA1 of its code, so a mutant set (other bodies) is
//! another library with other function names: two queues on one server,
//! one with the reference scripts and one with a mutant, never call each
//! other's functions. The client loads the library (`FUNCTION LOAD
//! REPLACE`) when the server answers that a function is not found (a new
//! server, `FUNCTION FLUSH`).
//!
//! # Design notes
//!
//! `lua/` is the protocol's source of truth. `prelude.lua` holds argument
//! validation (`EMQKIND`, `EMQARG`) and the clock (`TIME`, or a logical
//! `now` passed by the harness). Each script validates every argument, and
//! the type of every key it writes, before its first write, because a Lua
//! error does not roll back earlier writes. The type check is `TYPE`
//! (`emq_types`), or, on the lease and complete path, the reads and the
//! first write the script makes anyway (a command checks its key's type
//! before it changes anything; a WRONGTYPE they meet is answered with the
//! refusal the up-front check would give): a lease and a complete make no
//! `TYPE` call, and neither does an enqueue (its second write meets the
//! pending index's type, and its first, the job's field, is taken back
//! before the refusal: a refusal leaves every key as it was).
//!
//! `complete_lease` runs the bodies of `complete.lua` and `lease.lua`,
//! spliced in by `Scripts` as two Lua functions, as its general path, so it
//! answers exactly what the two calls answer and a mutant of either body is
//! a mutant of it too (the library then runs only that path). Its common
//! case, a settle and a lease, takes a one-pass path in `complete_lease.lua`
//! (six calls where the two bodies make nine); anything else before its
//! first write goes the general way. `complete_batch` likewise settles a
//! batch of active holders from its one read and answers their number; other
//! batches take its general path.
//!
//! Four batch scripts, `enqueue_batch.lua`, `lease_batch.lua`,
//! `complete_batch.lua` and `fail_batch.lua`, answer exactly what the same
//! number of successive single calls would, in one round trip: each settle
//! pair is fenced on its own token with its own outcome, and an id twice in
//! one enqueue batch is a duplicate the second time. They check every
//! argument and the type of every key they will write before their first
//! write, so a refusal (`EMQKIND`, `EMQARG`, `WRONGTYPE`) refuses the whole
//! batch and writes nothing; at most `EMQ_BATCH_MAX` (1,000) jobs a call.
//! They touch the same four keys whatever the batch's size (one `HMGET` of
//! the jobs column, one write per key), all passed as `KEYS`, so every key
//! stays under the queue's hash tag.
//!
//! Ids must be UTF-8, and an error shows an argument escaped and cut to 64
//! bytes (`emq_show`), so no reply carries binary or a megabyte.
//! `snapshot.lua` reads a whole queue in one round trip.

use std::sync::Arc;

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

/// The body of `complete_lease`: the two calls (see [`complete_lease_functions`]).
pub(crate) const COMPLETE_LEASE_MAIN: &str = include_str!("../../lua/complete_lease.lua");

/// The two functions `complete_lease` calls, from the bodies of `complete`
/// and `lease`: each spliced in whole as a Lua function whose parameters
/// are named `KEYS` and `ARGV` (so the body reads them as it does alone,
/// and its `return` returns from the function), defined once in the
/// library, beside the prelude. Built from whatever bodies the client runs,
/// so a mutant of `complete` or `lease` is a mutant of `complete_lease` too.
pub(crate) fn complete_lease_functions(complete: &str, lease: &str) -> String {
    format!(
        "local function emq_complete(KEYS, ARGV)\n{complete}\nend\n\
         local function emq_lease(KEYS, ARGV)\n{lease}\nend\n"
    )
}

/// The operations the library registers a function for, in the order of
/// [`REFERENCE`], then `complete_lease`.
pub const OPS: [&str; 12] = [
    "enqueue",
    "lease",
    "complete",
    "fail",
    "extend",
    "reap",
    "snapshot",
    "enqueue_batch",
    "lease_batch",
    "complete_batch",
    "fail_batch",
    "complete_lease",
];

/// The set of scripts one queue client calls: one library. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Scripts {
    inner: Arc<ScriptsInner>,
}

#[derive(Debug)]
struct ScriptsInner {
    library: String,
    code: String,
    functions: Vec<String>,
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
        // The library's code, with `{lib}` where its name goes. With the
        // complete or lease body replaced, complete_lease runs those bodies
        // only (its one-pass path does what the reference bodies do).
        let spliced_only = overrides
            .iter()
            .any(|(n, _)| *n == "complete" || *n == "lease");
        let mut code = format!(
            "{PRELUDE}\n{}{}",
            if spliced_only {
                "EMQ_FAST_LOOP = false\n"
            } else {
                ""
            },
            complete_lease_functions(source("complete"), source("lease"))
        );
        for op in OPS {
            let body = if op == "complete_lease" {
                COMPLETE_LEASE_MAIN
            } else {
                source(op)
            };
            // The snapshot writes nothing: a replica may run it.
            let flags = if op == "snapshot" {
                "{'no-writes'}"
            } else {
                "{}"
            };
            code.push_str(&format!(
                "redis.register_function{{function_name = '{{lib}}_{op}', flags = {flags}, \
                 callback = function(KEYS, ARGV)\n{body}\nend}}\n"
            ));
        }
        let hash = redis::Script::new(&code).get_hash().to_owned();
        let library = format!("ackgap_{}", &hash[..12]);
        let code = format!("#!lua name={library}\n{}", code.replace("{lib}", &library));
        let functions = OPS.iter().map(|op| format!("{library}_{op}")).collect();
        Scripts {
            inner: Arc::new(ScriptsInner {
                library,
                code,
                functions,
            }),
        }
    }

    /// The library's name (`ackgap_` and 12 hex digits of its SHA1).
    pub fn library(&self) -> &str {
        &self.inner.library
    }

    /// The library's code, as `FUNCTION LOAD` takes it.
    pub fn code(&self) -> &str {
        &self.inner.code
    }

    /// The name of the function of operation `op` (one of [`OPS`]).
    pub fn function(&self, op: &str) -> &str {
        let i = OPS
            .iter()
            .position(|o| *o == op)
            .expect("an operation of the library");
        &self.inner.functions[i]
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
            // validation. A script with a one-pass path (complete_batch)
            // validates on its general path only, which the marker starts:
            // the one-pass path settles only pairs whose state entries a
            // lease wrote (see the script), and the refusals it leaves to
            // the general path are tried on a server (tests/integration/hostile.rs).
            let general = src
                .body
                .find("\n-- The general path")
                .map_or(src.body, |i| &src.body[i..]);
            let first_write_in = |text: &str| {
                [
                    "'HSET'",
                    "'HSETNX'",
                    "'ZADD'",
                    "'ZREM'",
                    "'ZREMRANGEBYRANK'",
                    "'ZPOPMIN'",
                    "'SADD'",
                    "'HDEL'",
                    "'HINCRBY'",
                ]
                .iter()
                .filter_map(|w| text.find(w))
                .min()
            };
            let last_check = ["emq_id(", "emq_int(", "emq_worker(", "emq_now("]
                .iter()
                .filter_map(|c| general.rfind(c))
                .max();
            if let (Some(w), Some(c)) = (first_write_in(general), last_check) {
                assert!(c < w, "{}: a write precedes a validation", src.name);
            }
            // So must the check of the keys' types (emq_types, up front or
            // where a read made with redis.pcall met a key of another
            // type): a WRONGTYPE met by a write after the first would leave
            // the writes before it in place. The first write may be that
            // check itself: a command meets its key's type before it writes,
            // so a first write made with redis.pcall whose error is answered
            // by emq_types on the next line checks its key (enqueue takes
            // its first write back when the second meets another type).
            // That every key is covered is checked against a server, key by
            // key (tests/integration/hostile.rs).
            if let Some(w) = first_write_in(src.body) {
                let typed = src.body.find("emq_types(");
                let line_start = src.body[..w].rfind('\n').map_or(0, |i| i + 1);
                let mut lines = src.body[line_start..].lines();
                let write_line = lines.next().unwrap_or_default();
                let next_line = lines.next().unwrap_or_default();
                let checked_by_the_write =
                    write_line.contains("redis.pcall(") && next_line.contains("emq_types(");
                assert!(
                    typed.is_some_and(|t| t < w) || checked_by_the_write,
                    "{}: a write precedes the key type check",
                    src.name
                );
            }
        }
    }

    #[test]
    fn an_override_is_another_library_whose_functions_have_other_names() {
        let a = Scripts::reference();
        let b = Scripts::with_overrides(&[("complete", "return 1")]);
        assert_ne!(a.library(), b.library());
        assert_eq!(a.library(), Scripts::reference().library(), "stable");
        for op in OPS {
            assert!(a.function(op).starts_with(a.library()));
            assert_ne!(a.function(op), b.function(op), "{op}");
        }
        assert!(a
            .code()
            .starts_with(&format!("#!lua name={}\n", a.library())));
        assert!(b.code().contains("\nreturn 1\n"));
    }
}
