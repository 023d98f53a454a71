//! Consumer mutants whose mistake needs the server's own clock to show: an
//! effect guard that expires. The explorers on logical time never see one
//! expire (a walk takes tens of ms of real time); a walk with real-time
//! steps (`w`, see [`crate::explore::op`]) does.

use redis::aio::ConnectionManager;
use redis::Script;

use crate::consumer::{effect_key, marker_key, BoxFuture, Consumer, Delivery};
use crate::queue::{Keys, QueueError};

/// How long the [`MarkerTtl`] consumer's marker lives (ms): less than a
/// real-time walk can wait between an effect and its redelivery (a `w` of
/// up to a lease, 50 to 100 ms, and a heal that waits up to a lease on real
/// time), and well above what a few dozen steps on logical time take on a
/// loaded machine (30 ms was not: a logical walk killed it there).
pub const MARKER_TTL_MS: u64 = 80;

/// The marker consumer's one script, with the marker set to expire: the
/// guard of "don't apply twice" outlives the delivery, not the job.
const MARKER_TTL_SCRIPT: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('INCR', KEYS[2])
  return 1
end
return 0
"#;

/// `marker-ttl`: the `marker` consumer, marker and effect in one script,
/// but the marker is set with a TTL ([`MARKER_TTL_MS`]), as if it were a
/// lock: a redelivery later than the TTL applies the effect again. It
/// promises effect-once, as `marker` does.
pub struct MarkerTtl {
    script: Script,
    ttl_ms: u64,
}

impl MarkerTtl {
    /// The consumer, its marker living [`MARKER_TTL_MS`].
    pub fn new() -> MarkerTtl {
        MarkerTtl::with_ttl_ms(MARKER_TTL_MS)
    }

    /// The consumer, its marker living `ttl_ms`.
    pub fn with_ttl_ms(ttl_ms: u64) -> MarkerTtl {
        MarkerTtl {
            script: Script::new(MARKER_TTL_SCRIPT),
            ttl_ms,
        }
    }
}

impl Default for MarkerTtl {
    fn default() -> MarkerTtl {
        MarkerTtl::new()
    }
}

impl Consumer for MarkerTtl {
    fn name(&self) -> &str {
        "marker-ttl"
    }

    fn promises_effect_once(&self) -> bool {
        true
    }

    fn marker_ttl_ms(&self) -> Option<u64> {
        Some(self.ttl_ms)
    }

    fn apply<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        keys: &'a Keys,
        d: Delivery<'a>,
        _part: usize,
    ) -> BoxFuture<'a, Result<(), QueueError>> {
        Box::pin(async move {
            let _: i64 = self
                .script
                .key(marker_key(keys, d.id))
                .key(effect_key(keys, d.id))
                .arg(d.token)
                .arg(self.ttl_ms)
                .invoke_async(conn)
                .await
                .map_err(|e| QueueError::from_redis("effect", e))?;
            Ok(())
        })
    }

    fn effects<'a>(
        &'a self,
        conn: &'a mut ConnectionManager,
        keys: &'a Keys,
        id: &'a str,
    ) -> BoxFuture<'a, Result<u64, QueueError>> {
        Box::pin(async move {
            let n: Option<u64> = redis::cmd("GET")
                .arg(effect_key(keys, id))
                .query_async(conn)
                .await
                .map_err(|e| QueueError::from_redis("effects", e))?;
            Ok(n.unwrap_or(0))
        })
    }
}
