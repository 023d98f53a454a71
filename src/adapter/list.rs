//! What the list patterns ([`super::Lmove`], [`super::Rpop`]) share: their
//! keys, their enqueue, their read and their clear, and the one [`Adapter`]
//! around them. A [`Pattern`] says what the rest does: a lease, an ack, a
//! fail, an extend and a reap, where the two patterns differ.
//!
//! A pattern's steps see the job id and never the token: neither pattern
//! fences, and the signatures say so.
//!
//! # Design notes
//!
//! `List<P: Pattern>` is the list queue the two patterns share; `lmove` and
//! `rpop` are each a `Wrapper` of `List` over its own steps.

use std::future::Future;
use std::marker::PhantomData;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, Script, ScriptInvocation};

use super::{Adapter, BoxFuture, Capabilities, Read};
use crate::queue::client::EnqueueOptions;
use crate::queue::{Enqueued, Extended, Failed, Keys, Lease, Queue, QueueError, Reaped, Settled};

/// `now` in ms: ARGV `now` when given, else the server clock.
pub(crate) const NOW: &str = r#"
local function now_ms(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"#;

/// KEYS: payloads, pending, max. ARGV: id, payload, max_attempts.
const ENQUEUE: &str = r#"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('LPUSH', KEYS[2], ARGV[1])
return 1
"#;

/// The keys of a list-pattern queue, under the queue's hash tag.
#[derive(Clone, Debug)]
pub(crate) struct ListKeys {
    pub pending: String,
    pub processing: String,
    pub done: String,
    pub dead: String,
    pub payloads: String,
    pub deadlines: String,
    pub deliveries: String,
    pub max: String,
}

impl ListKeys {
    pub(crate) fn new(keys: &Keys, tag: &str) -> ListKeys {
        let base = format!("emq:{{{}}}:{tag}:", keys.name);
        let k = |s: &str| format!("{base}{s}");
        ListKeys {
            pending: k("pending"),
            processing: k("processing"),
            done: k("done"),
            dead: k("dead"),
            payloads: k("payloads"),
            deadlines: k("deadlines"),
            deliveries: k("deliveries"),
            max: k("max"),
        }
    }
}

/// The `now` argument of a script: the logical time, or empty for the
/// server clock.
pub(crate) fn now_arg(now_ms: Option<u64>) -> String {
    now_ms.map(|n| n.to_string()).unwrap_or_default()
}

/// `body` with the [`NOW`] prelude before it.
pub(crate) fn with_now(body: &str) -> Script {
    Script::new(&format!("{NOW}\n{body}"))
}

/// What a list pattern does where the two differ. Each step is one script
/// run (or none), so that the pattern is judged, not the races between its
/// commands.
pub(crate) trait Pattern: Send + Sync + Sized + 'static {
    /// The adapter's name, as `--queue` takes it.
    const NAME: &'static str;
    /// The part of every key after the hash tag, so that two patterns on one
    /// queue never share a key.
    const TAG: &'static str;
    /// What [`Adapter::read`] calls an admitted job found in no list and no
    /// set.
    const NOWHERE: &'static str;

    /// Leases a ready job (see [`Adapter::lease`]).
    fn lease(
        list: &List<Self>,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> impl Future<Output = Result<Option<Lease>, QueueError>> + Send;

    /// Acks job `id` (see [`Adapter::complete`]).
    fn complete(
        list: &List<Self>,
        id: &str,
    ) -> impl Future<Output = Result<Settled, QueueError>> + Send;

    /// Fails job `id` (see [`Adapter::fail`]): the fail script's word,
    /// `dead`, `requeued` or anything else for a job it did not find.
    fn fail(
        list: &List<Self>,
        id: &str,
        now_ms: Option<u64>,
    ) -> impl Future<Output = Result<String, QueueError>> + Send;

    /// Extends job `id`'s lease (see [`Adapter::extend`]).
    fn extend(
        list: &List<Self>,
        id: &str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> impl Future<Output = Result<Extended, QueueError>> + Send;

    /// Takes expired leases back (see [`Adapter::reap`]).
    fn reap(
        list: &List<Self>,
        limit: u64,
        now_ms: Option<u64>,
    ) -> impl Future<Output = Result<Vec<Reaped>, QueueError>> + Send;
}

/// A list-pattern queue on a [`Queue`]'s server, under its hash tag.
pub(crate) struct List<P> {
    queue: Queue,
    /// The pattern's keys.
    pub(crate) k: ListKeys,
    pattern: PhantomData<fn() -> P>,
}

impl<P> Clone for List<P> {
    fn clone(&self) -> Self {
        List {
            queue: self.queue.clone(),
            k: self.k.clone(),
            pattern: PhantomData,
        }
    }
}

impl<P> std::fmt::Debug for List<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("List").field("keys", &self.k).finish()
    }
}

impl<P: Pattern> List<P> {
    /// The pattern on `queue`'s server, under its hash tag.
    pub(crate) fn new(queue: &Queue) -> List<P> {
        List {
            k: ListKeys::new(queue.keys(), P::TAG),
            queue: queue.clone(),
            pattern: PhantomData,
        }
    }

    /// Runs `script` on a connection of its own; an error is `op`'s.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        op: &'static str,
        script: &ScriptInvocation<'_>,
    ) -> Result<T, QueueError> {
        super::run_script(self.connection(), op, script).await
    }

    /// Refuses a known id, else pushes it onto `pending`.
    async fn push(
        &self,
        id: &str,
        payload: &[u8],
        max_attempts: u64,
    ) -> Result<Enqueued, QueueError> {
        let k = &self.k;
        let n: i64 = self
            .run(
                "enqueue",
                Script::new(ENQUEUE)
                    .key(&k.payloads)
                    .key(&k.pending)
                    .key(&k.max)
                    .arg(id)
                    .arg(payload)
                    .arg(max_attempts),
            )
            .await?;
        Ok(if n == 1 {
            Enqueued::Enqueued
        } else {
            Enqueued::Duplicate
        })
    }

    /// Each admitted id's state from where it is. An id in no list and no
    /// set is [`Pattern::NOWHERE`]: `vanished` for `lmove`, `taken` for
    /// `rpop`, whose lease takes the job out of the queue by design.
    async fn read_lists(&self) -> Result<Read, QueueError> {
        type Lists = (
            Vec<String>,
            Vec<String>,
            Vec<String>,
            Vec<String>,
            Vec<String>,
        );
        let (ids, pending, processing, done, dead): Lists = redis::pipe()
            .cmd("HKEYS")
            .arg(&self.k.payloads)
            .cmd("LRANGE")
            .arg(&self.k.pending)
            .arg(0)
            .arg(-1)
            .cmd("LRANGE")
            .arg(&self.k.processing)
            .arg(0)
            .arg(-1)
            .cmd("SMEMBERS")
            .arg(&self.k.done)
            .cmd("ZRANGE")
            .arg(&self.k.dead)
            .arg(0)
            .arg(-1)
            .query_async(&mut self.connection())
            .await
            .map_err(|e| QueueError::from_redis("read", e))?;
        let mut out = Read::default();
        for id in &ids {
            let mut places = Vec::new();
            let count = |list: &[String]| list.iter().filter(|x| *x == id).count();
            places.extend(std::iter::repeat_n("pending", count(&pending)));
            places.extend(std::iter::repeat_n("active", count(&processing)));
            if done.contains(id) {
                places.push("done");
            }
            if dead.contains(id) {
                places.push("dead");
            }
            if places.len() > 1 {
                out.problems
                    .push(format!("{id}: in several places [{}]", places.join(", ")));
            }
            out.jobs.insert(
                id.clone(),
                places.first().copied().unwrap_or(P::NOWHERE).to_owned(),
            );
        }
        for entry in pending.iter().chain(&processing).chain(&done).chain(&dead) {
            if !ids.contains(entry) {
                out.problems
                    .push(format!("{entry}: an entry without a payload"));
            }
        }
        out.problems.sort();
        out.problems.dedup();
        Ok(out)
    }
}

impl<P: Pattern> Adapter for List<P> {
    fn name(&self) -> &str {
        P::NAME
    }

    /// Every operation on logical time; the tokens are delivery numbers
    /// no settle checks.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            fences: false,
            ..Capabilities::default()
        }
    }

    fn keys(&self) -> &Keys {
        self.queue.keys()
    }

    fn connection(&self) -> ConnectionManager {
        self.queue.connection()
    }

    fn enqueue<'a>(
        &'a self,
        id: &'a str,
        payload: &'a [u8],
        options: EnqueueOptions,
        _now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Enqueued, QueueError>> {
        Box::pin(self.push(id, payload, options.max_attempts))
    }

    fn lease<'a>(
        &'a self,
        _worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(P::lease(self, lease_ms, now_ms))
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        _token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Box::pin(P::complete(self, id))
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        _token: u64,
        _retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        Box::pin(async move {
            Ok(match P::fail(self, id, now_ms).await?.as_str() {
                "dead" => Failed::Dead,
                // No delays in the list patterns: ready at once.
                "requeued" => Failed::Requeued {
                    ready_at_ms: now_ms.unwrap_or(0),
                },
                _ => Failed::Missing,
            })
        })
    }

    fn extend<'a>(
        &'a self,
        id: &'a str,
        _token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        Box::pin(P::extend(self, id, lease_ms, now_ms))
    }

    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(P::reap(self, limit, now_ms))
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(self.read_lists())
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move { self.queue.clear().await.map(|_| ()) })
    }
}
