//! `rpop`: at-most-once. A lease is `RPOP pending`: the job leaves the
//! queue before the work, so there is nothing to reap, and a worker that
//! crashes holding it loses it for good (`no-loss` names it). An ack adds
//! the id to a `done` set; a fail pushes it back. Tokens are delivery
//! numbers the adapter counts itself.

use redis::aio::ConnectionManager;
use redis::Script;

use super::lmove::{enqueue, now_arg, read, ListKeys};
use super::{Adapter, Read};
use crate::future::BoxFuture;
use crate::queue::client::EnqueueOptions;
use crate::queue::{Enqueued, Extended, Failed, Keys, Lease, Queue, QueueError, Reaped, Settled};

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

fn err(op: &'static str) -> impl Fn(redis::RedisError) -> QueueError {
    move |e| QueueError::from_redis(op, e)
}

/// The at-most-once pattern (see the module docs).
#[derive(Clone)]
pub struct Rpop {
    queue: Queue,
    k: ListKeys,
}

impl std::fmt::Debug for Rpop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rpop").field("keys", &self.k).finish()
    }
}

impl Rpop {
    /// The pattern on `queue`'s server, under its hash tag.
    pub fn new(queue: &Queue) -> Rpop {
        Rpop {
            k: ListKeys::new(queue.keys(), "rp"),
            queue: queue.clone(),
        }
    }
}

impl Adapter for Rpop {
    fn name(&self) -> &str {
        "rpop"
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
            let got: Option<(String, u64, Vec<u8>)> = Script::new(LEASE)
                .key(&k.pending)
                .key(&k.deliveries)
                .key(&k.payloads)
                .invoke_async(&mut self.connection())
                .await
                .map_err(err("lease"))?;
            // Nothing will ever take the job back: the deadline is only
            // what the worker is told.
            Ok(got.map(|(id, token, payload)| Lease {
                id,
                token,
                deadline_ms: now_ms.unwrap_or(0) + lease_ms,
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
                .key(&k.done)
                .key(&k.payloads)
                .arg(id)
                .invoke_async(&mut self.connection())
                .await
                .map_err(err("complete"))?;
            Ok(match n {
                1 => Settled::Settled,
                0 => Settled::AlreadySettled,
                _ => Settled::Missing,
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
            let answer: String = Script::new(FAIL)
                .key(&k.pending)
                .key(&k.dead)
                .key(&k.deliveries)
                .key(&k.max)
                .key(&k.done)
                .arg(id)
                .arg(now_arg(now_ms))
                .invoke_async(&mut self.connection())
                .await
                .map_err(err("fail"))?;
            Ok(match answer.as_str() {
                "dead" => Failed::Dead,
                "requeued" => Failed::Requeued {
                    ready_at_ms: now_ms.unwrap_or(0),
                },
                _ => Failed::Missing,
            })
        })
    }

    fn extend<'a>(
        &'a self,
        _id: &'a str,
        _token: u64,
        lease_ms: u64,
        now_ms: Option<u64>,
    ) -> BoxFuture<'a, Result<Extended, QueueError>> {
        // Nothing to extend: no lease is kept.
        Box::pin(async move {
            Ok(Extended::Extended {
                deadline_ms: now_ms.unwrap_or(0) + lease_ms,
            })
        })
    }

    fn reap(
        &self,
        _limit: u64,
        _now_ms: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<Reaped>, QueueError>> {
        Box::pin(async move { Ok(Vec::new()) })
    }

    fn read(&self) -> BoxFuture<'_, Result<Read, QueueError>> {
        Box::pin(async move { read(&mut self.connection(), &self.k, "taken").await })
    }

    fn clear(&self) -> BoxFuture<'_, Result<(), QueueError>> {
        Box::pin(async move { self.queue.clear().await.map(|_| ()) })
    }
}
