//! `lmove`: the classic processing-list pattern. Enqueue pushes the id onto
//! a `pending` list; a lease is `LMOVE pending processing`; an ack is
//! `LREM processing id` (and the id joins a `done` set so the checker can
//! tell done from vanished); a reaper moves entries whose deadline has
//! passed back to `pending`, or to `dead` once they were delivered
//! `max_attempts` times.
//!
//! What it gives up is fencing: the list entry is the bare id, so an ack
//! cannot tell which delivery it settles. Tokens are delivery numbers the
//! adapter counts itself (`HINCRBY deliveries id 1`), handed to the worker
//! and never checked. A worker that stalled past its deadline and acks
//! after the job was reaped and leased again removes the *newer* delivery's
//! entry: `fenced-settlement` names it.
//!
//! Each operation is one small script, so that the pattern is judged, not
//! the races between its commands.

use redis::aio::ConnectionManager;
use redis::Script;

use super::{Adapter, Read};
use crate::future::BoxFuture;
use crate::queue::client::EnqueueOptions;
use crate::queue::{
    Enqueued, Extended, Failed, JobState, Keys, Lease, Queue, QueueError, Reaped, Settled,
};

/// `now` in ms: ARGV `now` when given, else the server clock.
const NOW: &str = r#"
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

/// KEYS: pending, processing, deadlines, deliveries, payloads.
/// ARGV: now, lease_ms.
const LEASE: &str = r#"
local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
if not id then return false end
local n = redis.call('HINCRBY', KEYS[4], id, 1)
local d = now_ms(ARGV[1]) + tonumber(ARGV[2])
redis.call('HSET', KEYS[3], id, d)
return {id, n, d, redis.call('HGET', KEYS[5], id)}
"#;

/// KEYS: processing, done, deadlines. ARGV: id.
const COMPLETE: &str = r#"
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"#;

/// KEYS: processing, pending, dead, deadlines, deliveries, max.
/// ARGV: id, now.
const FAIL: &str = r#"
local id = ARGV[1]
if redis.call('LREM', KEYS[1], 1, id) == 0 then return 'missing' end
redis.call('HDEL', KEYS[4], id)
local n = tonumber(redis.call('HGET', KEYS[5], id) or '0')
local max = tonumber(redis.call('HGET', KEYS[6], id) or '1')
if n >= max then
  redis.call('ZADD', KEYS[3], now_ms(ARGV[2]), id)
  return 'dead'
end
redis.call('RPUSH', KEYS[2], id)
return 'requeued'
"#;

/// KEYS: processing, deadlines. ARGV: id, now, lease_ms.
const EXTEND: &str = r#"
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return false end
local d = now_ms(ARGV[2]) + tonumber(ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], d)
return d
"#;

/// KEYS: processing, deadlines, pending, dead, deliveries, max.
/// ARGV: now, limit. Oldest deliveries first (LMOVE pushes on the left).
const REAP: &str = r#"
local now = now_ms(ARGV[1])
local limit = tonumber(ARGV[2])
local out = {}
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
for i = #ids, 1, -1 do
  if #out >= 2 * limit then break end
  local id = ids[i]
  local d = tonumber(redis.call('HGET', KEYS[2], id) or '0')
  if d <= now then
    redis.call('LREM', KEYS[1], 1, id)
    redis.call('HDEL', KEYS[2], id)
    local n = tonumber(redis.call('HGET', KEYS[5], id) or '0')
    local max = tonumber(redis.call('HGET', KEYS[6], id) or '1')
    if n >= max then
      redis.call('ZADD', KEYS[4], now, id)
      table.insert(out, id); table.insert(out, 'dead')
    else
      redis.call('RPUSH', KEYS[3], id)
      table.insert(out, id); table.insert(out, 'pending')
    end
  end
end
return out
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

pub(crate) fn now_arg(now_ms: Option<u64>) -> String {
    now_ms.map(|n| n.to_string()).unwrap_or_default()
}

fn err(op: &'static str) -> impl Fn(redis::RedisError) -> QueueError {
    move |e| QueueError::from_redis(op, e)
}

fn script(body: &str) -> Script {
    Script::new(&format!("{NOW}\n{body}"))
}

/// The enqueue both list patterns share: refuse a known id, else push it.
pub(crate) async fn enqueue(
    conn: &mut ConnectionManager,
    k: &ListKeys,
    id: &str,
    payload: &[u8],
    max_attempts: u64,
) -> Result<Enqueued, QueueError> {
    let n: i64 = Script::new(ENQUEUE)
        .key(&k.payloads)
        .key(&k.pending)
        .key(&k.max)
        .arg(id)
        .arg(payload)
        .arg(max_attempts)
        .invoke_async(conn)
        .await
        .map_err(err("enqueue"))?;
    Ok(if n == 1 {
        Enqueued::Enqueued
    } else {
        Enqueued::Duplicate
    })
}

/// Reads a list-pattern queue: each admitted id's state from where it is.
/// An id in no list and no set is `vanished` (`taken` for `rpop`, whose
/// lease takes the job out of the queue by design).
pub(crate) async fn read(
    conn: &mut ConnectionManager,
    k: &ListKeys,
    nowhere: &str,
) -> Result<Read, QueueError> {
    type Lists = (
        Vec<String>,
        Vec<String>,
        Vec<String>,
        Vec<String>,
        Vec<String>,
    );
    let (ids, pending, processing, done, dead): Lists = redis::pipe()
        .cmd("HKEYS")
        .arg(&k.payloads)
        .cmd("LRANGE")
        .arg(&k.pending)
        .arg(0)
        .arg(-1)
        .cmd("LRANGE")
        .arg(&k.processing)
        .arg(0)
        .arg(-1)
        .cmd("SMEMBERS")
        .arg(&k.done)
        .cmd("ZRANGE")
        .arg(&k.dead)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .map_err(err("read"))?;
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
            places.first().copied().unwrap_or(nowhere).to_owned(),
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

/// The processing-list pattern (see the module docs).
#[derive(Clone)]
pub struct Lmove {
    queue: Queue,
    k: ListKeys,
}

impl std::fmt::Debug for Lmove {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lmove").field("keys", &self.k).finish()
    }
}

impl Lmove {
    /// The pattern on `queue`'s server, under its hash tag.
    pub fn new(queue: &Queue) -> Lmove {
        Lmove {
            k: ListKeys::new(queue.keys(), "lm"),
            queue: queue.clone(),
        }
    }
}

impl Adapter for Lmove {
    fn name(&self) -> &str {
        "lmove"
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
        Box::pin(async move {
            enqueue(
                &mut self.connection(),
                &self.k,
                id,
                payload,
                options.max_attempts,
            )
            .await
        })
    }

    fn lease<'a>(
        &'a self,
        _worker: &'a str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<Lease>, QueueError>> {
        Box::pin(async move {
            let k = &self.k;
            let got: Option<(String, u64, u64, Vec<u8>)> = script(LEASE)
                .key(&k.pending)
                .key(&k.processing)
                .key(&k.deadlines)
                .key(&k.deliveries)
                .key(&k.payloads)
                .arg(now_arg(now_ms))
                .arg(lease_ms)
                .invoke_async(&mut self.connection())
                .await
                .map_err(err("lease"))?;
            Ok(got.map(|(id, token, deadline_ms, payload)| Lease {
                id,
                token,
                deadline_ms,
                payload,
            }))
        })
    }

    fn complete<'a>(
        &'a self,
        id: &'a str,
        _token: u64,
    ) -> BoxFuture<'a, Result<Settled, QueueError>> {
        Box::pin(async move {
            let k = &self.k;
            let n: i64 = Script::new(COMPLETE)
                .key(&k.processing)
                .key(&k.done)
                .key(&k.deadlines)
                .arg(id)
                .invoke_async(&mut self.connection())
                .await
                .map_err(err("complete"))?;
            // LREM found nothing: the classic client cannot tell a retried
            // ack from one that lost the job; it moves on.
            Ok(if n == 1 {
                Settled::Settled
            } else {
                Settled::AlreadySettled
            })
        })
    }

    fn fail<'a>(
        &'a self,
        id: &'a str,
        _token: u64,
        _retry_delay_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Failed, QueueError>> {
        Box::pin(async move {
            let k = &self.k;
            let answer: String = script(FAIL)
                .key(&k.processing)
                .key(&k.pending)
                .key(&k.dead)
                .key(&k.deadlines)
                .key(&k.deliveries)
                .key(&k.max)
                .arg(id)
                .arg(now_arg(now_ms))
                .invoke_async(&mut self.connection())
                .await
                .map_err(err("fail"))?;
            Ok(match answer.as_str() {
                "dead" => Failed::Dead,
                // No delays in the list pattern: ready at once.
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
        Box::pin(async move {
            let k = &self.k;
            let d: Option<u64> = script(EXTEND)
                .key(&k.processing)
                .key(&k.deadlines)
                .arg(id)
                .arg(now_arg(now_ms))
                .arg(lease_ms)
                .invoke_async(&mut self.connection())
                .await
                .map_err(err("extend"))?;
            Ok(match d {
                Some(deadline_ms) => Extended::Extended { deadline_ms },
                None => Extended::Missing,
            })
        })
    }

    fn reap(
        &self,
        limit: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(async move {
            let k = &self.k;
            let flat: Vec<String> = script(REAP)
                .key(&k.processing)
                .key(&k.deadlines)
                .key(&k.pending)
                .key(&k.dead)
                .key(&k.deliveries)
                .key(&k.max)
                .arg(now_arg(now_ms))
                .arg(limit)
                .invoke_async(&mut self.connection())
                .await
                .map_err(err("reap"))?;
            Ok(flat
                .chunks(2)
                .map(|pair| Reaped {
                    id: pair[0].clone(),
                    to: if pair.get(1).map(String::as_str) == Some("dead") {
                        JobState::Dead
                    } else {
                        JobState::Pending
                    },
                })
                .collect())
        })
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(async move { read(&mut self.connection(), &self.k, "vanished").await })
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move { self.queue.clear().await.map(|_| ()) })
    }
}
