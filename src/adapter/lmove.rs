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

use redis::Script;

use super::list::{now_arg, with_now, List, Pattern};
use super::{Adapter, Wrapper};
use crate::queue::{Extended, Lease, Queue, QueueError, Reaped, Settled};

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

/// The processing-list pattern (see the module docs).
#[derive(Clone, Debug)]
pub struct Lmove {
    list: List<Steps>,
}

impl Lmove {
    /// The pattern on `queue`'s server, under its hash tag.
    pub fn new(queue: &Queue) -> Lmove {
        Lmove {
            list: List::new(queue),
        }
    }
}

// Every operation is the list queue's; `Steps` below is what makes it lmove.
impl Wrapper for Lmove {
    fn inner(&self) -> &dyn Adapter {
        &self.list
    }
}

/// What lmove does on lease, ack, fail, extend and reap.
#[derive(Clone, Copy, Debug)]
struct Steps;

impl Pattern for Steps {
    const NAME: &'static str = "lmove";
    const TAG: &'static str = "lm";
    const NOWHERE: &'static str = "vanished";

    async fn lease(
        list: &List<Steps>,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> Result<Option<Lease>, QueueError> {
        let k = &list.k;
        let got: Option<(String, u64, u64, Vec<u8>)> = list
            .run(
                "lease",
                with_now(LEASE)
                    .key(&k.pending)
                    .key(&k.processing)
                    .key(&k.deadlines)
                    .key(&k.deliveries)
                    .key(&k.payloads)
                    .arg(now_arg(now_ms))
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

    async fn complete(list: &List<Steps>, id: &str) -> Result<Settled, QueueError> {
        let k = &list.k;
        let n: i64 = list
            .run(
                "complete",
                Script::new(COMPLETE)
                    .key(&k.processing)
                    .key(&k.done)
                    .key(&k.deadlines)
                    .arg(id),
            )
            .await?;
        // LREM found nothing: the classic client cannot tell a retried ack
        // from one that lost the job; it moves on.
        Ok(if n == 1 {
            Settled::Settled
        } else {
            Settled::AlreadySettled
        })
    }

    async fn fail(list: &List<Steps>, id: &str, now_ms: Option<u64>) -> Result<String, QueueError> {
        let k = &list.k;
        list.run(
            "fail",
            with_now(FAIL)
                .key(&k.processing)
                .key(&k.pending)
                .key(&k.dead)
                .key(&k.deadlines)
                .key(&k.deliveries)
                .key(&k.max)
                .arg(id)
                .arg(now_arg(now_ms)),
        )
        .await
    }

    async fn extend(
        list: &List<Steps>,
        id: &str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> Result<Extended, QueueError> {
        let k = &list.k;
        let d: Option<u64> = list
            .run(
                "extend",
                with_now(EXTEND)
                    .key(&k.processing)
                    .key(&k.deadlines)
                    .arg(id)
                    .arg(now_arg(now_ms))
                    .arg(lease_ms),
            )
            .await?;
        Ok(match d {
            Some(deadline_ms) => Extended::Extended { deadline_ms },
            None => Extended::Missing,
        })
    }

    async fn reap(
        list: &List<Steps>,
        limit: u64,
        now_ms: Option<u64>,
    ) -> Result<Vec<Reaped>, QueueError> {
        let k = &list.k;
        let flat: Vec<String> = list
            .run(
                "reap",
                with_now(REAP)
                    .key(&k.processing)
                    .key(&k.deadlines)
                    .key(&k.pending)
                    .key(&k.dead)
                    .key(&k.deliveries)
                    .key(&k.max)
                    .arg(now_arg(now_ms))
                    .arg(limit),
            )
            .await?;
        Ok(super::reaped_pairs(&flat))
    }
}
