//! `streams`: the Valkey Streams consumer-group pattern, as new queues on
//! Valkey use it. One stream holds the jobs, one consumer group (`workers`)
//! hands them out, and each worker is a consumer of the group named for
//! it (`w0`, `w1`, ...).
//!
//! - **enqueue** is `XADD stream * job ID payload P max N`. The bare
//!   pattern has no idea of a job id and would add a second entry for the
//!   same id; like most users who need one, this adapter keeps a hash
//!   `entries` (job id -> entry id) and refuses an id it has seen
//!   (`duplicate`). That hash is also how a settle finds the entry from the
//!   job id the harness names (a real worker has the entry id in hand).
//!   The group is created with the stream (`XGROUP CREATE .. 0 MKSTREAM`).
//! - **lease** is `XREADGROUP GROUP workers <worker> COUNT 1 STREAMS stream >`
//!   (no `BLOCK`), except that entries the reaper took back come first (see
//!   reap): the oldest entry of the `reaper` consumer's pending list is
//!   `XCLAIM`ed to the worker, which counts a delivery. The **token** is the
//!   entry's delivery count (the group's times-delivered counter), and the
//!   deadline is the server's time of delivery plus the lease length.
//! - **complete** is `XACK` then `XDEL`, and the job id joins a `done` set
//!   so that read can tell done from vanished. `XACK` takes no token and no
//!   consumer: any worker's ack settles the entry, whoever holds it now.
//!   The pattern does not fence (`fences: false`), and says so.
//! - **reap** is `XAUTOCLAIM stream workers reaper <lease> 0-0 COUNT n
//!   JUSTID`, with the lease length the workers last used (each lease stores
//!   it in `lease_ms`) as the min-idle time. What "back to pending" means
//!   here: an entry in a consumer group is either never delivered or in some
//!   consumer's pending list, and `XAUTOCLAIM` can only move it to another
//!   consumer's list. So the reaper claims it to a consumer of its own,
//!   `reaper`, with `JUSTID` (no delivery counted), and that list is the
//!   pending queue of taken-back jobs, which the next lease drains first.
//!   Entries already in the reaper's list are not reported again (an
//!   `XAUTOCLAIM` claims them anew once they are idle a lease; the reaper
//!   skips them and scans on, so they do not use up its limit).
//!   **Dead-lettering**: a reaped entry whose delivery count (`XPENDING`)
//!   has reached the job's `max` field is `XACK`ed, `XDEL`eted and its id
//!   added to a `dead` set instead.
//! - **fail** puts the lease back the same way (`XCLAIM .. reaper 0 id
//!   JUSTID`), or dead-letters it when its delivery count reached `max`.
//!   Streams have no delayed delivery: the retry delay is ignored and the
//!   job is ready at once (`ready_at_ms` is the server's now).
//! - **extend** is `XCLAIM stream workers <owner> 0 id JUSTID`: the entry's
//!   idle time restarts (no delivery counted). The call names no worker, so
//!   the owner is the entry's current consumer, read with `XPENDING`; like
//!   `XACK`, it does not check who asks.
//! - **read** tells each job's state from where its entry is: `done` or
//!   `dead` set; the reaper's pending list (`pending`); a worker's pending
//!   list (`active`); in the stream, never delivered (`pending`); nowhere
//!   (`vanished`).
//!
//! The pattern has only the server's clock: idle times are the server's.
//! It follows the clock (`follows_clock`): on a server whose clock the
//! explorers own (libfaketime, frozen at `epoch + now_ms` each step) it
//! runs on logical time, each time it answers made logical by taking the
//! epoch off; elsewhere (a server given as a URL, Redis 7.0) the explorers
//! drive it with real waits.
//! Inside a script the server's clock stands still (`TIME` and the delivery
//! time `XREADGROUP` and `XCLAIM` record are the script's start), so the
//! deadline a lease reports is exactly when `XAUTOCLAIM` may take it.
//!
//! Each operation is one small Lua script (as in [`super::lmove`]), so that
//! the pattern is judged, not the races between its commands; `XREADGROUP`
//! without `BLOCK`, `XCLAIM` and `XAUTOCLAIM` run in scripts.
//!
//! # Design notes
//!
//! It is a queue ackgap did not design.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionManager;
use redis::{FromRedisValue, Script, ScriptInvocation};

use super::{Adapter, BoxFuture, Capabilities, Read};
use crate::queue::client::EnqueueOptions;
use crate::queue::{Enqueued, Extended, Failed, Keys, Lease, Queue, QueueError, Reaped, Settled};

/// Helpers every script starts with: the server's clock, an entry's
/// fields, an entry's delivery count.
const PRELUDE: &str = r#"
local GROUP = 'workers'
local REAPER = 'reaper'
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fields(entry)
  local f = {}
  for i = 1, #entry[2], 2 do f[entry[2][i]] = entry[2][i + 1] end
  return f
end
local function field_of(stream, eid)
  local e = redis.call('XRANGE', stream, eid, eid)
  if #e == 0 then return nil end
  return fields(e[1])
end
local function pel_row(stream, eid)
  local p = redis.call('XPENDING', stream, GROUP, eid, eid, 1)
  if #p == 0 then return nil end
  return p[1]
end
local function bury(stream, dead, eid, job)
  redis.call('XACK', stream, GROUP, eid)
  redis.call('XDEL', stream, eid)
  redis.call('SADD', dead, job)
end
"#;

/// KEYS: stream, entries. ARGV: id, payload, max_attempts.
const ENQUEUE: &str = r#"
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], GROUP, '0', 'MKSTREAM')
end
local eid = redis.call('XADD', KEYS[1], '*', 'job', ARGV[1], 'payload', ARGV[2], 'max', ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], eid)
return 1
"#;

/// KEYS: stream, lease_ms. ARGV: worker, lease_ms.
const LEASE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('SET', KEYS[2], ARGV[2])
local entry
local back = redis.call('XPENDING', KEYS[1], GROUP, '-', '+', 1, REAPER)
if #back > 0 then
  entry = redis.call('XCLAIM', KEYS[1], GROUP, ARGV[1], 0, back[1][1])[1]
else
  local got = redis.call('XREADGROUP', 'GROUP', GROUP, ARGV[1], 'COUNT', 1, 'STREAMS', KEYS[1], '>')
  if not got then return false end
  entry = got[1][2][1]
end
local f = fields(entry)
local row = pel_row(KEYS[1], entry[1])
return {f['job'], row[4], now_ms() + tonumber(ARGV[2]), f['payload']}
"#;

/// KEYS: stream, entries, done. ARGV: id.
const COMPLETE: &str = r#"
local eid = redis.call('HGET', KEYS[2], ARGV[1])
if not eid then return 'missing' end
if redis.call('XACK', KEYS[1], GROUP, eid) == 1 then
  redis.call('XDEL', KEYS[1], eid)
  redis.call('SADD', KEYS[3], ARGV[1])
  return 'settled'
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return 'already_settled' end
return 'missing'
"#;

/// KEYS: stream, entries, dead. ARGV: id.
const FAIL: &str = r#"
local eid = redis.call('HGET', KEYS[2], ARGV[1])
if not eid or redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', 0} end
local row = pel_row(KEYS[1], eid)
if not row then return {'missing', 0} end
local f = field_of(KEYS[1], eid)
if row[4] >= tonumber(f['max']) then
  bury(KEYS[1], KEYS[3], eid, ARGV[1])
  return {'dead', now_ms()}
end
redis.call('XCLAIM', KEYS[1], GROUP, REAPER, 0, eid, 'JUSTID')
return {'requeued', now_ms()}
"#;

/// KEYS: stream, entries, lease_ms. ARGV: id, lease_ms.
const EXTEND: &str = r#"
local eid = redis.call('HGET', KEYS[2], ARGV[1])
if not eid or redis.call('EXISTS', KEYS[1]) == 0 then return false end
local row = pel_row(KEYS[1], eid)
if not row then return false end
redis.call('SET', KEYS[3], ARGV[2])
redis.call('XCLAIM', KEYS[1], GROUP, row[2], 0, eid, 'JUSTID')
return now_ms() + tonumber(ARGV[2])
"#;

/// KEYS: stream, dead, lease_ms. ARGV: limit.
const REAP: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local lease = redis.call('GET', KEYS[3])
if not lease then return {} end
local limit = tonumber(ARGV[1])
local mine = {}
local backlog = redis.call('XPENDING', KEYS[1], GROUP, '-', '+', redis.call('XLEN', KEYS[1]) + 1, REAPER)
for _, row in ipairs(backlog) do mine[row[1]] = true end
local out = {}
local cursor = '0-0'
repeat
  local r = redis.call('XAUTOCLAIM', KEYS[1], GROUP, REAPER, lease, cursor, 'COUNT', limit - #out / 2, 'JUSTID')
  cursor = r[1]
  for _, eid in ipairs(r[2]) do
    if not mine[eid] then
      local f = field_of(KEYS[1], eid)
      local row = pel_row(KEYS[1], eid)
      if row[4] >= tonumber(f['max']) then
        bury(KEYS[1], KEYS[2], eid, f['job'])
        table.insert(out, f['job']); table.insert(out, 'dead')
      else
        table.insert(out, f['job']); table.insert(out, 'pending')
      end
    end
  end
until cursor == '0-0' or #out >= 2 * limit
return out
"#;

/// KEYS: stream, entries, done, dead. Answers {job, state, ...} and the
/// structure problems.
const READ: &str = r#"
local owner = {}
if redis.call('EXISTS', KEYS[1]) == 1 then
  local rows = redis.call('XPENDING', KEYS[1], GROUP, '-', '+', redis.call('XLEN', KEYS[1]) + 1)
  for _, row in ipairs(rows) do owner[row[1]] = row[2] end
end
local jobs, problems = {}, {}
local ids = redis.call('HGETALL', KEYS[2])
for i = 1, #ids, 2 do
  local job, eid = ids[i], ids[i + 1]
  local places = {}
  if redis.call('SISMEMBER', KEYS[3], job) == 1 then table.insert(places, 'done') end
  if redis.call('SISMEMBER', KEYS[4], job) == 1 then table.insert(places, 'dead') end
  local o = owner[eid]
  if o == REAPER then
    table.insert(places, 'pending')
  elseif o then
    table.insert(places, 'active')
  elseif redis.call('EXISTS', KEYS[1]) == 1 and #redis.call('XRANGE', KEYS[1], eid, eid) > 0 then
    table.insert(places, 'pending')
  end
  if #places > 1 then
    table.insert(problems, job .. ': in several places [' .. table.concat(places, ', ') .. ']')
  end
  table.insert(jobs, job)
  table.insert(jobs, places[1] or 'vanished')
end
return {jobs, problems}
"#;

/// The keys of a streams queue, under the queue's hash tag.
#[derive(Clone, Debug)]
struct StreamKeys {
    stream: String,
    entries: String,
    done: String,
    dead: String,
    lease_ms: String,
}

impl StreamKeys {
    fn new(keys: &Keys) -> StreamKeys {
        let k = |s: &str| format!("emq:{{{}}}:st:{s}", keys.name);
        StreamKeys {
            stream: k("stream"),
            entries: k("entries"),
            done: k("done"),
            dead: k("dead"),
            lease_ms: k("lease_ms"),
        }
    }
}

/// The Streams consumer-group pattern (see the module docs).
#[derive(Clone, Debug)]
pub struct Streams {
    queue: Queue,
    k: StreamKeys,
    /// The instant the explorers froze the server's clock at
    /// ([`Adapter::set_clock`]); [`NO_CLOCK`]: real time.
    clock_ms: Arc<AtomicU64>,
}

/// [`Streams::clock_ms`] when no instant is set.
const NO_CLOCK: u64 = u64::MAX;

/// `body` with the [`PRELUDE`] before it.
fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

impl Streams {
    /// The pattern on `queue`'s server, under its hash tag.
    pub fn new(queue: &Queue) -> Streams {
        Streams {
            k: StreamKeys::new(queue.keys()),
            queue: queue.clone(),
            clock_ms: Arc::new(AtomicU64::new(NO_CLOCK)),
        }
    }

    /// A time the server answered (ms since the epoch on its clock) as
    /// the caller's: logical when the call carried `now_ms` and the
    /// explorers froze the server's clock at `epoch + now_ms`, else as
    /// it is.
    fn told(&self, server_ms: u64, now_ms: Option<u64>) -> u64 {
        match (now_ms, self.clock_ms.load(Ordering::SeqCst)) {
            (Some(now), clock) if clock != NO_CLOCK => {
                server_ms.saturating_sub(clock.saturating_sub(now))
            }
            _ => server_ms,
        }
    }

    /// Runs `script` on the queue's connection; an error is `op`'s.
    async fn run<T: FromRedisValue>(
        &self,
        op: &'static str,
        script: &ScriptInvocation<'_>,
    ) -> Result<T, QueueError> {
        super::run_script(self.connection(), op, script).await
    }

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
                script(ENQUEUE)
                    .key(&k.stream)
                    .key(&k.entries)
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

    async fn take(&self, worker: &str, lease_ms: u64) -> Result<Option<Lease>, QueueError> {
        let k = &self.k;
        let got: Option<(String, u64, u64, Vec<u8>)> = self
            .run(
                "lease",
                script(LEASE)
                    .key(&k.stream)
                    .key(&k.lease_ms)
                    .arg(worker)
                    .arg(lease_ms),
            )
            .await?;
        Ok(got.map(|(id, token, deadline_ms, payload)| Lease {
            id,
            token,
            deadline_ms,
            payload,
        }))
    }

    async fn ack(&self, id: &str) -> Result<Settled, QueueError> {
        let k = &self.k;
        let word: String = self
            .run(
                "complete",
                script(COMPLETE)
                    .key(&k.stream)
                    .key(&k.entries)
                    .key(&k.done)
                    .arg(id),
            )
            .await?;
        Ok(match word.as_str() {
            "settled" => Settled::Settled,
            "already_settled" => Settled::AlreadySettled,
            _ => Settled::Missing,
        })
    }

    async fn nack(&self, id: &str) -> Result<Failed, QueueError> {
        let k = &self.k;
        let (word, now_ms): (String, u64) = self
            .run(
                "fail",
                script(FAIL)
                    .key(&k.stream)
                    .key(&k.entries)
                    .key(&k.dead)
                    .arg(id),
            )
            .await?;
        Ok(match word.as_str() {
            "dead" => Failed::Dead,
            "requeued" => Failed::Requeued {
                ready_at_ms: now_ms,
            },
            _ => Failed::Missing,
        })
    }

    async fn keep(&self, id: &str, lease_ms: u64) -> Result<Extended, QueueError> {
        let k = &self.k;
        let deadline: Option<u64> = self
            .run(
                "extend",
                script(EXTEND)
                    .key(&k.stream)
                    .key(&k.entries)
                    .key(&k.lease_ms)
                    .arg(id)
                    .arg(lease_ms),
            )
            .await?;
        Ok(match deadline {
            Some(deadline_ms) => Extended::Extended { deadline_ms },
            None => Extended::Missing,
        })
    }

    async fn claim_back(&self, limit: u64) -> Result<Vec<Reaped>, QueueError> {
        let k = &self.k;
        let flat: Vec<String> = self
            .run(
                "reap",
                script(REAP)
                    .key(&k.stream)
                    .key(&k.dead)
                    .key(&k.lease_ms)
                    .arg(limit.max(1)),
            )
            .await?;
        Ok(super::reaped_pairs(&flat))
    }

    async fn read_entries(&self) -> Result<Read, QueueError> {
        let k = &self.k;
        let (flat, problems): (Vec<String>, Vec<String>) = self
            .run(
                "read",
                script(READ)
                    .key(&k.stream)
                    .key(&k.entries)
                    .key(&k.done)
                    .key(&k.dead),
            )
            .await?;
        let mut out = Read {
            problems,
            ..Read::default()
        };
        for pair in flat.chunks(2) {
            if let [job, state] = pair {
                out.jobs.insert(job.clone(), state.clone());
            }
        }
        out.problems.sort();
        Ok(out)
    }
}

impl Adapter for Streams {
    fn name(&self) -> &str {
        "streams"
    }

    /// Every operation, on the server's clock (idle times are the
    /// server's): logical time when the explorers own that clock; tokens
    /// are delivery counts no ack checks.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            logical_time: true,
            follows_clock: true,
            fences: false,
            ..Capabilities::default()
        }
    }

    fn set_clock(&self, clock_ms: Option<u64>) {
        self.clock_ms
            .store(clock_ms.unwrap_or(NO_CLOCK), Ordering::SeqCst);
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
        worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move {
            let lease = self.take(worker, lease_ms).await?;
            Ok(lease.map(|lease| Lease {
                deadline_ms: self.told(lease.deadline_ms, now_ms),
                ..lease
            }))
        })
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        _token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Box::pin(self.ack(id))
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        _token: u64,
        _retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        Box::pin(async move {
            Ok(match self.nack(id).await? {
                Failed::Requeued { ready_at_ms } => Failed::Requeued {
                    ready_at_ms: self.told(ready_at_ms, now_ms),
                },
                other => other,
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
        Box::pin(async move {
            Ok(match self.keep(id, lease_ms).await? {
                Extended::Extended { deadline_ms } => Extended::Extended {
                    deadline_ms: self.told(deadline_ms, now_ms),
                },
                other => other,
            })
        })
    }

    fn reap(
        &self,
        limit: u64,
        _now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(self.claim_back(limit))
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(self.read_entries())
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move { self.queue.clear().await.map(|_| ()) })
    }
}
