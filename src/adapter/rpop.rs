//! `rpop`: at-most-once. A lease is `RPOP pending`: the job leaves the
//! queue before the work, so there is nothing to reap, and a worker that
//! crashes holding it loses it for good (`no-loss` names it). An ack adds
//! the id to a `done` set; a fail pushes it back. Tokens are delivery
//! numbers the adapter counts itself.

use redis::Script;

use super::list::{now_arg, List, Pattern};
use super::{Adapter, Wrapper};
use crate::queue::{Extended, Lease, Queue, QueueError, Reaped, Settled};

/// KEYS: pending, deliveries, payloads.
const LEASE: &str = r#"
local id = redis.call('RPOP', KEYS[1])
if not id then return false end
local n = redis.call('HINCRBY', KEYS[2], id, 1)
return {id, n, redis.call('HGET', KEYS[3], id)}
"#;

/// KEYS: done, payloads. ARGV: id.
const COMPLETE: &str = r#"
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return -1 end
return redis.call('SADD', KEYS[1], ARGV[1])
"#;

/// KEYS: pending, dead, deliveries, max, done. ARGV: id, now.
const FAIL: &str = r#"
local id = ARGV[1]
if redis.call('SISMEMBER', KEYS[5], id) == 1 then return 'missing' end
local n = tonumber(redis.call('HGET', KEYS[3], id) or '0')
local max = tonumber(redis.call('HGET', KEYS[4], id) or '1')
if n >= max then
  redis.call('ZADD', KEYS[2], tonumber(ARGV[2]) or 0, id)
  return 'dead'
end
redis.call('RPUSH', KEYS[1], id)
return 'requeued'
"#;

/// The at-most-once pattern (see the module docs).
#[derive(Clone, Debug)]
pub struct Rpop {
    list: List<Steps>,
}

impl Rpop {
    /// The pattern on `queue`'s server, under its hash tag.
    pub fn new(queue: &Queue) -> Rpop {
        Rpop {
            list: List::new(queue),
        }
    }
}

// Every operation is the list queue's; `Steps` below is what makes it rpop.
impl Wrapper for Rpop {
    fn inner(&self) -> &dyn Adapter {
        &self.list
    }
}

/// What rpop does on lease, ack, fail, extend and reap. Its scripts read
/// no clock: nothing here ever expires.
#[derive(Clone, Copy, Debug)]
struct Steps;

impl Pattern for Steps {
    const NAME: &'static str = "rpop";
    const TAG: &'static str = "rp";
    const NOWHERE: &'static str = "taken";

    async fn lease(
        list: &List<Steps>,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> Result<Option<Lease>, QueueError> {
        let k = &list.k;
        let got: Option<(String, u64, Vec<u8>)> = list
            .run(
                "lease",
                Script::new(LEASE)
                    .key(&k.pending)
                    .key(&k.deliveries)
                    .key(&k.payloads),
            )
            .await?;
        // Nothing will ever take the job back: the deadline is only what
        // the worker is told.
        Ok(got.map(|(id, token, payload)| Lease {
            id,
            token,
            deadline_ms: now_ms.unwrap_or(0) + lease_ms,
            payload,
        }))
    }

    async fn complete(list: &List<Steps>, id: &str) -> Result<Settled, QueueError> {
        let k = &list.k;
        let n: i64 = list
            .run(
                "complete",
                Script::new(COMPLETE).key(&k.done).key(&k.payloads).arg(id),
            )
            .await?;
        Ok(match n {
            1 => Settled::Settled,
            0 => Settled::AlreadySettled,
            _ => Settled::Missing,
        })
    }

    async fn fail(list: &List<Steps>, id: &str, now_ms: Option<u64>) -> Result<String, QueueError> {
        let k = &list.k;
        list.run(
            "fail",
            Script::new(FAIL)
                .key(&k.pending)
                .key(&k.dead)
                .key(&k.deliveries)
                .key(&k.max)
                .key(&k.done)
                .arg(id)
                .arg(now_arg(now_ms)),
        )
        .await
    }

    // Nothing to extend: no lease is kept.
    async fn extend(
        _list: &List<Steps>,
        _id: &str,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> Result<Extended, QueueError> {
        Ok(Extended::Extended {
            deadline_ms: now_ms.unwrap_or(0) + lease_ms,
        })
    }

    async fn reap(
        _list: &List<Steps>,
        _limit: u64,
        _now_ms: Option<u64>,
    ) -> Result<Vec<Reaped>, QueueError> {
        Ok(Vec::new())
    }
}
