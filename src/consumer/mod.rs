//! Consumers: what a worker does with a delivered job. The queue delivers a
//! job one or more times; a consumer decides whether its *effect* lands once.
//! The shipped consumers keep their effects in Valkey, under the queue's
//! hash tag, so the checker can count them:
//!
//! | consumer | effect | under redelivery |
//! |---|---|---|
//! | `naive` | `INCR` per delivery | N deliveries → N effects |
//! | `natural` | `SET` to a value derived from the payload | the same value however often |
//! | `marker` | `SET marker NX` and the effect in one script | exactly one effect |
//! | `marker-before` | marker, then effect: two calls | a crash between loses the effect |
//! | `marker-after` | effect, then marker: two calls | a crash between duplicates it |
//!
//! An effect may take several server calls (`parts`); the explorers and the
//! chaos runner can crash a worker between two parts.
//!
//! A shipped consumer honours a durability dial ([`Shipped::with_durability`],
//! the queue's own `--durability` in a chaos run): each of its writes is
//! followed by the dial's `WAIT`/`WAITAOF` in the same pipeline, on the same
//! connection (a WAIT counts only the writes of its own connection), and a
//! write fewer replicas confirmed than asked fails with
//! [`QueueError::Unknown`] (`info` in a history): the effect may be lost in
//! a failover, so the worker does not acknowledge the job on it.
//!
//! # Design notes
//!
//! The matrix reports per cell whether the consumer's writes were confirmed.

use redis::aio::ConnectionManager;
use redis::Script;

pub use crate::future::BoxFuture;
use crate::queue::{Durability, Keys, QueueError};

/// One delivery as a consumer sees it.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    /// The job id (the idempotency key).
    pub id: &'a str,
    /// The fencing token of this delivery's lease.
    pub token: u64,
    /// The job's payload.
    pub payload: &'a [u8],
}

/// A job handler whose effects can be counted.
pub trait Consumer: Send + Sync {
    /// The consumer's name, as `--consumer` takes it.
    fn name(&self) -> &str;

    /// How many separate server calls the effect takes; a crash may fall
    /// between two of them.
    fn parts(&self) -> usize {
        1
    }

    /// Applies part `part` (from 0) of the effect of `delivery`.
    fn apply<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        keys: &'a Keys,
        delivery: Delivery<'a>,
        part: usize,
    ) -> BoxFuture<'a, Result<(), QueueError>>;

    /// How many times the effect of job `id` has landed.
    fn effects<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        keys: &'a Keys,
        id: &'a str,
    ) -> BoxFuture<'a, Result<u64, QueueError>>;

    /// True if the consumer promises exactly one effect per done job (the
    /// effect-once invariant applies to it).
    fn promises_effect_once(&self) -> bool;

    /// How long the consumer's idempotency marker lives (ms) when it
    /// expires, on the server's clock: a chaos report then names a
    /// duplicate effect around a forward jump of that clock as the
    /// consumer's finding. `None` (the default, and every shipped
    /// consumer's): the marker, if any, never expires.
    fn marker_ttl_ms(&self) -> Option<u64> {
        None
    }

    /// The dial the consumer's writes honour: each followed by its WAIT
    /// or WAITAOF, an unconfirmed one failing as unknown. A consumer of
    /// the user's own says [`Durability::None`] unless it does so.
    fn durability(&self) -> Durability {
        Durability::None
    }
}

/// The key holding job `id`'s effect (a counter, or the natural value).
pub fn effect_key(keys: &Keys, id: &str) -> String {
    format!("{}{id}", keys.effect_prefix)
}

/// The key of job `id`'s idempotency marker.
pub fn marker_key(keys: &Keys, id: &str) -> String {
    format!("{}marker:{id}", keys.effect_prefix)
}

fn err(op: &'static str) -> impl Fn(redis::RedisError) -> QueueError {
    move |e| QueueError::from_redis(op, e)
}

/// Sends the effect's write `cmd` on `conn`, followed in the same
/// pipeline by `durability`'s WAIT or WAITAOF (none: alone), the two
/// bracketed by `INFO replication` as the queue's own writes are
/// ([`crate::queue::durability::history_changed`]); answers the write's
/// reply, or [`QueueError::Unknown`] when fewer replicas confirmed than
/// the dial asks or the node's role or replication id changed across the
/// WAIT.
async fn write(
    conn: &mut ConnectionManager,
    durability: Durability,
    cmd: redis::Cmd,
) -> Result<redis::Value, QueueError> {
    use crate::queue::durability::{history_changed, replication_identity};
    let Some(wait) = durability.command() else {
        return cmd.query_async(conn).await.map_err(err("effect"));
    };
    let replies: Vec<redis::RedisResult<redis::Value>> = redis::pipe()
        .ignore_errors()
        .add_command(replication_identity())
        .add_command(cmd)
        .add_command(wait)
        .add_command(replication_identity())
        .query_async(conn)
        .await
        .map_err(err("effect"))?;
    let mut replies = replies.into_iter();
    let before = replies.next();
    let reply = replies
        .next()
        .unwrap_or(Ok(redis::Value::Nil))
        .map_err(err("effect"))?;
    let confirmed = replies.next();
    let after = replies.next();
    let unknown = |reason: String| QueueError::Unknown {
        op: "effect",
        reason,
    };
    match confirmed {
        Some(Ok(c)) => match durability.shortfall(&c) {
            Some(reason) => Err(unknown(format!(
                "the effect's write is unconfirmed: {reason}"
            ))),
            None => match history_changed(before, after) {
                Some(reason) => Err(unknown(format!(
                    "the effect's write is unconfirmed: {reason}"
                ))),
                None => Ok(reply),
            },
        },
        Some(Err(e)) => Err(unknown(format!(
            "the effect's write ran but its confirmation failed: {e}"
        ))),
        None => Err(unknown(
            "the effect's write got no confirmation reply".into(),
        )),
    }
}

async fn incr(
    conn: &mut ConnectionManager,
    durability: Durability,
    key: String,
) -> Result<(), QueueError> {
    let mut cmd = redis::cmd("INCR");
    cmd.arg(key);
    write(conn, durability, cmd).await.map(|_| ())
}

async fn counter(conn: &mut ConnectionManager, key: String) -> Result<u64, QueueError> {
    let n: Option<u64> = redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .map_err(err("effects"))?;
    Ok(n.unwrap_or(0))
}

/// Which shipped consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Kind {
    /// `INCR` per delivery.
    Naive,
    /// `SET` to a value derived from the payload.
    Natural,
    /// Marker and effect in one script.
    Marker,
    /// Marker, then effect, in two calls.
    MarkerBefore,
    /// Effect, then marker, in two calls.
    MarkerAfter,
}

impl Kind {
    /// Every shipped consumer.
    pub const ALL: [Kind; 5] = [
        Kind::Naive,
        Kind::Natural,
        Kind::Marker,
        Kind::MarkerBefore,
        Kind::MarkerAfter,
    ];

    /// The name `--consumer` takes.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Naive => "naive",
            Kind::Natural => "natural",
            Kind::Marker => "marker",
            Kind::MarkerBefore => "marker-before",
            Kind::MarkerAfter => "marker-after",
        }
    }

    /// The consumer itself.
    pub fn consumer(self) -> Box<dyn Consumer> {
        Box::new(Shipped::new(self))
    }

    /// The consumer itself, its writes confirmed as `durability` asks
    /// ([`Shipped::with_durability`]).
    pub fn consumer_with(self, durability: Durability) -> Box<dyn Consumer> {
        Box::new(Shipped::new(self).with_durability(durability))
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown consumer {s:?}: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// The marker consumer's script: claim the marker and apply the effect in
/// one atomic step, so a redelivery finds the marker and skips.
const MARKER_SCRIPT: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  redis.call('INCR', KEYS[2])
  return 1
end
return 0
"#;

/// The shipped consumers.
pub struct Shipped {
    kind: Kind,
    marker: Script,
    durability: Durability,
}

impl Shipped {
    /// The consumer of `kind`, its writes unconfirmed.
    pub fn new(kind: Kind) -> Shipped {
        Shipped {
            kind,
            marker: Script::new(MARKER_SCRIPT),
            durability: Durability::None,
        }
    }

    /// The same consumer with every write followed by `durability`'s WAIT
    /// or WAITAOF (in the same pipeline, on the same connection); a write
    /// fewer replicas confirmed than asked fails as unknown.
    pub fn with_durability(self, durability: Durability) -> Shipped {
        Shipped { durability, ..self }
    }
}

impl Consumer for Shipped {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn parts(&self) -> usize {
        match self.kind {
            Kind::MarkerBefore | Kind::MarkerAfter => 2,
            _ => 1,
        }
    }

    fn promises_effect_once(&self) -> bool {
        matches!(self.kind, Kind::Marker | Kind::Natural)
    }

    fn durability(&self) -> Durability {
        self.durability
    }

    fn apply<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        keys: &'a Keys,
        d: Delivery<'a>,
        part: usize,
    ) -> BoxFuture<'a, Result<(), QueueError>> {
        Box::pin(async move {
            let fx = effect_key(keys, d.id);
            let marker = marker_key(keys, d.id);
            let dial = self.durability;
            match (self.kind, part) {
                (Kind::Naive, _) => incr(conn, dial, fx).await,
                (Kind::Natural, _) => {
                    // The value depends only on the payload: idempotent.
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(fx).arg(d.payload);
                    write(conn, dial, cmd).await.map(|_| ())
                }
                (Kind::Marker, _) if dial.waits() => {
                    // EVAL, not EVALSHA: a pipeline cannot reload a
                    // flushed script cache, and the WAIT must follow this
                    // very write.
                    let mut cmd = redis::cmd("EVAL");
                    cmd.arg(MARKER_SCRIPT)
                        .arg(2)
                        .arg(marker)
                        .arg(fx)
                        .arg(d.token);
                    write(conn, dial, cmd).await.map(|_| ())
                }
                (Kind::Marker, _) => {
                    let _: i64 = self
                        .marker
                        .key(marker)
                        .key(fx)
                        .arg(d.token)
                        .invoke_async(conn)
                        .await
                        .map_err(err("effect"))?;
                    Ok(())
                }
                // marker-before, part 0: claim the marker. Part 1: apply the
                // effect only if this delivery claimed it. A crash between
                // the two leaves the marker claimed and the effect never
                // applied: every redelivery skips.
                (Kind::MarkerBefore, 0) => {
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(marker).arg(d.token).arg("NX");
                    write(conn, dial, cmd).await.map(|_| ())
                }
                (Kind::MarkerBefore, _) => {
                    let owner: Option<u64> = redis::cmd("GET")
                        .arg(marker)
                        .query_async(conn)
                        .await
                        .map_err(err("effect"))?;
                    if owner == Some(d.token) {
                        incr(conn, dial, fx).await?;
                    }
                    Ok(())
                }
                // marker-after, part 0: apply the effect unless the marker
                // is there. Part 1: set the marker. A crash between the two
                // leaves the effect applied and no marker: a redelivery
                // applies it again.
                (Kind::MarkerAfter, 0) => {
                    let seen: bool = redis::cmd("EXISTS")
                        .arg(&marker)
                        .query_async(conn)
                        .await
                        .map_err(err("effect"))?;
                    if !seen {
                        incr(conn, dial, fx).await?;
                    }
                    Ok(())
                }
                (Kind::MarkerAfter, _) => {
                    let mut cmd = redis::cmd("SET");
                    cmd.arg(marker).arg(d.token);
                    write(conn, dial, cmd).await.map(|_| ())
                }
            }
        })
    }

    fn effects<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        keys: &'a Keys,
        id: &'a str,
    ) -> BoxFuture<'a, Result<u64, QueueError>> {
        Box::pin(async move {
            let fx = effect_key(keys, id);
            match self.kind {
                Kind::Natural => {
                    let n: u64 = redis::cmd("EXISTS")
                        .arg(fx)
                        .query_async(conn)
                        .await
                        .map_err(err("effects"))?;
                    Ok(n)
                }
                _ => counter(conn, fx).await,
            }
        })
    }
}
