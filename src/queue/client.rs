//! The typed async client of the reference queue.
//!
//! Every operation is one function call (`FCALL`; the library is loaded
//! when the server does not know the function).
//! Replies are parsed into the typed outcomes of [`super::outcome`]. Errors
//! keep the distinction Jepsen's histories need: a *refusal* (the script ran
//! and wrote nothing, or never ran) is not an *unknown* outcome (a timeout or
//! a dropped connection after the request may have been sent: the script may
//! or may not have run).
//!
//! # Design notes
//!
//! `Queue` runs on a reconnecting multiplexed connection or, when
//! `INFO cluster` says cluster mode, makes its function calls on redis-rs's
//! cluster connection, set to retry nothing: `Queue::call` resends only a
//! call the cluster refused before it ran (after ASK at once to the
//! importing node, each command after an `ASKING`, the slot map left as it
//! is; after MOVED at once to the node named; after TRYAGAIN or CLUSTERDOWN
//! 25 ms later, more each time; a `Redirect` routes the pipeline with
//! redis-rs' `route_pipeline`). There `connection()` and `clear()` go to the
//! primary that owns the queue's slot, re-read every 100 ms by a task that
//! lives as long as a handle, so a failover moves them.
//!
//! `Queue::at(now)` switches to logical time.
//!
//! `Queue::complete_and_lease` settles the job held and leases the next in
//! one round trip and one script run, each half its own answer;
//! `tests/integration/batch.rs` compares it with `complete` then `lease` on
//! a second queue and in the model, case by case and in seeded walks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, RedisError, RedisResult, Value};

use super::durability::{history_changed, replication_identity, Durability};
use super::keys::{BadQueueName, Keys, WIDE_FIELD};
use super::outcome::{Enqueued, Extended, Failed, JobState, Lease, Reaped, Settled};
use super::scripts::Scripts;
use super::state::{JobRow, Snapshot};

/// Why an operation did not return an outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// `EMQKIND`: the id does not carry the `JOB` brand. Nothing was written.
    #[error("{op}: EMQKIND {message}")]
    Kind {
        /// The operation.
        op: &'static str,
        /// The server's message.
        message: String,
    },
    /// `EMQARG`: an argument is missing or out of range. Nothing was written.
    #[error("{op}: EMQARG {message}")]
    BadArgument {
        /// The operation.
        op: &'static str,
        /// The server's message.
        message: String,
    },
    /// The request may have reached the server and run, or not: a timeout
    /// or a connection lost with the request in flight. In a history this is
    /// `info`, never `fail`.
    #[error("{op}: outcome unknown ({reason}); the script may or may not have run")]
    Unknown {
        /// The operation.
        op: &'static str,
        /// What happened.
        reason: String,
    },
    /// The server could not be reached; the request was not sent.
    #[error("{op}: server unavailable: {reason}")]
    Unavailable {
        /// The operation.
        op: &'static str,
        /// What happened.
        reason: String,
    },
    /// The server answered with an error of its own (`WRONGTYPE`, `NOPERM`,
    /// a Lua runtime error, ...).
    #[error("{op}: server error {code}: {message}")]
    Server {
        /// The operation.
        op: &'static str,
        /// The error code (`WRONGTYPE`, `NOPERM`, `ERR`, ...).
        code: String,
        /// The rest of the message.
        message: String,
    },
    /// The script answered something the client does not understand.
    #[error("{op}: unexpected reply {reply}")]
    Protocol {
        /// The operation.
        op: &'static str,
        /// The reply, debug-printed.
        reply: String,
    },
    /// The queue name cannot be used as a hash tag.
    #[error(transparent)]
    QueueName(#[from] BadQueueName),
    /// The adapter behind `--queue exec:` broke the adapter protocol (it
    /// exited or closed its stdout, printed a line that is not a valid
    /// answer, or answered a request it was not asked). This call and
    /// every later one fail with it: the run stops. It is not a verdict
    /// about the queue, and callers must treat it as fatal.
    #[error("{op}: the adapter broke the protocol, the run stops: {message}")]
    Adapter {
        /// The operation.
        op: &'static str,
        /// What went wrong, naming the offending line.
        message: String,
    },
    /// The queue under test does not implement this operation (it is not
    /// among its capabilities); nothing was sent.
    #[error("{op}: the queue under test does not support this operation")]
    Unsupported {
        /// The operation.
        op: &'static str,
    },
}

impl QueueError {
    /// True when the operation may have taken effect on the server although
    /// no answer arrived: a timeout or a lost connection, and a call cut
    /// short by an `exec:` adapter that broke the protocol (it may have run
    /// before the adapter died), which a history records as `info`.
    pub fn is_unknown(&self) -> bool {
        matches!(
            self,
            QueueError::Unknown { .. } | QueueError::Adapter { .. }
        )
    }

    /// True when the run must stop: an `exec:` adapter broke the protocol
    /// ([`QueueError::Adapter`]); every later call fails the same way.
    pub fn is_fatal(&self) -> bool {
        matches!(self, QueueError::Adapter { .. })
    }

    /// The refusal of the environment this error is, if it is one
    /// ([`environment_refusal`](super::refusal::environment_refusal)):
    /// the server cannot run the test as configured, so the command stops
    /// with it instead of judging the queue.
    pub fn refusal(&self) -> Option<super::refusal::Refusal> {
        match self {
            QueueError::Server { code, message, .. } => {
                super::refusal::environment_refusal(code, message)
            }
            _ => None,
        }
    }

    /// Maps a server error reply of operation `op`, its code and the rest of
    /// its message, to its class.
    fn from_code(op: &'static str, code: &str, message: &str) -> QueueError {
        let message = message.to_owned();
        match code {
            "EMQKIND" => QueueError::Kind { op, message },
            "EMQARG" => QueueError::BadArgument { op, message },
            _ => QueueError::Server {
                op,
                code: code.to_owned(),
                message,
            },
        }
    }

    /// Maps a redis error of operation `op` to its class.
    pub fn from_redis(op: &'static str, err: RedisError) -> QueueError {
        if let Some(code) = err.code() {
            return QueueError::from_code(op, code, err.detail().unwrap_or_default());
        }
        if err.is_connection_refusal() {
            QueueError::Unavailable {
                op,
                reason: err.to_string(),
            }
        } else if err.is_timeout() || err.is_io_error() || err.is_connection_dropped() {
            QueueError::Unknown {
                op,
                reason: err.to_string(),
            }
        } else {
            QueueError::Server {
                op,
                code: err.category().to_owned(),
                message: err.to_string(),
            }
        }
    }
}

/// Options of one enqueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnqueueOptions {
    /// Leases allowed before the job goes to the dead set.
    pub max_attempts: u64,
    /// How long after now the job becomes ready (ms).
    pub delay_ms: u64,
}

impl Default for EnqueueOptions {
    fn default() -> Self {
        EnqueueOptions {
            max_attempts: 3,
            delay_ms: 0,
        }
    }
}

/// How the client talks to the server.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// The scripts to call (the reference ones, or a mutant set).
    pub scripts: Scripts,
    /// How long a request may wait for its reply before its outcome is
    /// unknown.
    pub response_timeout: Duration,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// What an enqueue or a settle must reach before it is `ok` (see
    /// [`Durability`]).
    pub durability: Durability,
    /// On a cluster, where to connect for each node address the nodes
    /// announce (`(host, port)` to `(host, port)`; redis-rs's
    /// `node_address_map`): the chaos runner routes each worker to every
    /// node through its own ports of the fault proxy. An address not in
    /// the map is connected to as announced; empty (the default) connects
    /// to every node as announced.
    pub node_addresses: BTreeMap<(String, u16), (String, u16)>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            scripts: Scripts::reference(),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            durability: Durability::None,
            node_addresses: BTreeMap::new(),
        }
    }
}

/// A handle on one queue of one server. Cheap to clone; clones share the
/// connection (a multiplexed connection that reconnects after a failure).
#[derive(Clone)]
pub struct Queue {
    /// A connection to the one server, or, on a cluster, to the node that
    /// owned the queue's slot at connect time: [`Queue::connection`]
    /// (consumers' effects) and [`Queue::clear`] use it.
    conn: ConnectionManager,
    /// On a cluster, the cluster connection every script call goes
    /// through (it follows MOVED and ASK and refreshes its slot map).
    cluster: Option<ClusterConnection>,
    /// On a cluster, the primary that owns the queue's slot now, and a
    /// connection to it: [`Queue::connection`] and [`Queue::clear`] use
    /// it. A task re-reads the owner every [`FOLLOW_EVERY`] while a handle
    /// lives, so a failover (the cluster's own, or a takeover) moves it.
    owner: Option<Arc<Owner>>,
    keys: Arc<Keys>,
    scripts: Scripts,
    now_ms: Option<u64>,
    readback: Arc<Readback>,
    durability: Durability,
}

/// What one script call is, which decides what goes in the pipeline
/// around it ([`Queue::call`]). Each call site says it: no list of names
/// to keep in step with the scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Script {
    /// One of the explorers' steps (enqueue, lease, complete, fail,
    /// extend, reap, complete-and-lease): a write, confirmed by the
    /// durability dial, and read back in the same pipeline while the
    /// read-back mode is on.
    Step,
    /// Another write (a batch, a raw call): confirmed, never read back.
    Write,
    /// A read (the snapshot): neither.
    Read,
}

impl Script {
    /// True when a [`Durability`] dial confirms it: every script that
    /// writes. Enqueues and settles, whose loss loses or resurrects a job,
    /// and also leases, extends and reaps: a lease lost in a failover hands
    /// the same token out again (the topology grid found it: with only
    /// enqueues and settles confirmed, `wait:1` through a failover broke
    /// `structure`, "the same token granted twice").
    fn writes(self) -> bool {
        match self {
            Script::Step | Script::Write => true,
            Script::Read => false,
        }
    }

    /// True when the read-back mode reads the queue back after it.
    fn is_step(self) -> bool {
        match self {
            Script::Step => true,
            Script::Write | Script::Read => false,
        }
    }
}

/// The commands sent around one script call, and the pipeline's layout:
/// `[INFO replication] FCALL [WAIT INFO replication] [snapshot]`. The
/// pipeline is built and its replies read here only, so that the two
/// agree on the positions.
struct Around {
    /// The durability dial's WAIT or WAITAOF, when the call is confirmed.
    confirm: Option<Cmd>,
    /// The snapshot script's call, when the call is read back.
    snapshot: Option<Cmd>,
}

/// A pipeline's replies, by name.
struct Replies {
    /// The script's own reply.
    step: RedisResult<Value>,
    /// The durability dial's, when the call was confirmed.
    confirmation: Option<Confirmation>,
    /// The snapshot's, when the call was read back.
    snapshot: Option<RedisResult<Value>>,
}

/// The replies that confirm a write: the node's replication identity
/// before it, the WAIT's count, the identity after.
struct Confirmation {
    before: RedisResult<Value>,
    wait: RedisResult<Value>,
    after: RedisResult<Value>,
}

impl Around {
    /// A bare call: nothing around it, no pipeline.
    fn is_bare(&self) -> bool {
        self.confirm.is_none() && self.snapshot.is_none()
    }

    /// The pipeline: replies kept per command (an error answers its own
    /// command, not the pipeline).
    fn pipeline(&self, cmd: &Cmd) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        if self.confirm.is_some() {
            pipe.add_command(replication_identity());
        }
        pipe.add_command(cmd.clone());
        if let Some(wait) = &self.confirm {
            pipe.add_command(wait.clone());
            pipe.add_command(replication_identity());
        }
        if let Some(snapshot) = &self.snapshot {
            pipe.add_command(snapshot.clone());
        }
        pipe
    }

    /// Where the script's own reply is.
    fn step_at(&self) -> usize {
        usize::from(self.confirm.is_some())
    }

    /// The pipeline's replies by name; an error when there are not as many
    /// as commands.
    fn split(&self, op: &'static str, replies: Vec<RedisResult<Value>>) -> Result<Replies, Sent> {
        let confirmed = self.confirm.is_some();
        let want = 1 + 3 * usize::from(confirmed) + usize::from(self.snapshot.is_some());
        if replies.len() != want {
            return Err(Sent::Queue(QueueError::Protocol {
                op,
                reply: format!(
                    "a pipeline of {want} calls answered {} replies",
                    replies.len()
                ),
            }));
        }
        let mut replies = replies.into_iter();
        let mut next = || replies.next().unwrap_or(Ok(Value::Nil));
        let before = confirmed.then(&mut next);
        let step = next();
        let confirmation = before.map(|before| Confirmation {
            before,
            wait: next(),
            after: next(),
        });
        let snapshot = self.snapshot.is_some().then(next);
        Ok(Replies {
            step,
            confirmation,
            snapshot,
        })
    }
}

/// The read-back mode of a [`Queue`] (off by default): while it is on,
/// each of the six step scripts (enqueue, lease, complete, fail, extend,
/// reap) is sent in one pipeline with the snapshot script, so that the
/// explorers read the whole queue back after a step without a second
/// round trip. The snapshot's raw reply waits here until
/// [`Queue::take_readback`] takes it.
#[derive(Debug, Default)]
struct Readback {
    on: std::sync::atomic::AtomicBool,
    reply: std::sync::Mutex<Option<Value>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.keys.name)
            .field("now_ms", &self.now_ms)
            .finish()
    }
}

impl Queue {
    /// Connects to queue `name` on the server of `client` with the default
    /// configuration (reference scripts, 5 s timeouts).
    pub async fn connect(client: &redis::Client, name: &str) -> Result<Queue, QueueError> {
        Queue::connect_with(client, name, QueueConfig::default()).await
    }

    /// Connects with an explicit configuration.
    pub async fn connect_with(
        client: &redis::Client,
        name: &str,
        config: QueueConfig,
    ) -> Result<Queue, QueueError> {
        let keys = Keys::new(name)?;
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connect_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let unavailable = |e| match QueueError::from_redis("connect", e) {
            QueueError::Unknown { op, reason } => QueueError::Unavailable { op, reason },
            other => other,
        };
        let mut conn = ConnectionManager::new_with_config(client.clone(), manager_config.clone())
            .await
            .map_err(unavailable)?;
        let cluster = if is_cluster(&mut conn).await.map_err(unavailable)? {
            let mut cluster = cluster_connection(client, &config)
                .await
                .map_err(unavailable)?;
            let addr = slot_owner(&mut cluster, &keys.pending)
                .await
                .map_err(unavailable)?;
            let owner_client = redis::Client::open(
                client
                    .get_connection_info()
                    .clone()
                    .set_addr(mapped(&config.node_addresses, &addr)),
            )
            .map_err(unavailable)?;
            conn = ConnectionManager::new_with_config(owner_client, manager_config.clone())
                .await
                .map_err(unavailable)?;
            let owner = Arc::new(Owner {
                now: std::sync::Mutex::new((addr, conn.clone())),
                info: client.get_connection_info().clone(),
                config: manager_config,
                key: keys.pending.clone(),
                addresses: config.node_addresses.clone(),
            });
            tokio::spawn(follow_owner(Arc::downgrade(&owner), cluster.clone()));
            (Some(cluster), Some(owner))
        } else {
            (None, None)
        };
        let (cluster, owner) = cluster;
        Ok(Queue {
            conn,
            cluster,
            owner,
            keys: Arc::new(keys),
            scripts: config.scripts,
            now_ms: None,
            readback: Arc::default(),
            durability: config.durability,
        })
    }

    /// The connection script calls go through: the cluster's, or the one
    /// server's.
    fn link(&self) -> Link {
        self.link_to(None)
    }

    /// [`Queue::link`], or on a cluster the node a redirect named.
    fn link_to(&self, to: Option<Redirect>) -> Link {
        match (&self.cluster, to) {
            (Some(cluster), Some(to)) => Link::Redirected(cluster.clone(), to),
            (Some(cluster), None) => Link::Cluster(cluster.clone()),
            (None, _) => Link::Single(self.conn.clone()),
        }
    }

    /// True when the queue runs on a Valkey Cluster (its script calls go
    /// through a cluster connection).
    pub fn on_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The same queue with the durability dial set to `durability`: every
    /// later write (enqueue, lease, settle, extend, reap) through the returned handle (and its
    /// clones) is followed by its WAIT or WAITAOF, and is `ok` only when
    /// enough replicas confirmed; with fewer its outcome is
    /// [`QueueError::Unknown`].
    pub fn with_durability(&self, durability: Durability) -> Queue {
        Queue {
            durability,
            ..self.clone()
        }
    }

    /// The durability dial of this handle.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The same queue on logical time: every script receives `now_ms`
    /// instead of reading `TIME`. For deterministic exploration only.
    pub fn at(&self, now_ms: u64) -> Queue {
        Queue {
            now_ms: Some(now_ms),
            ..self.clone()
        }
    }

    /// The same queue on the server clock (the default).
    pub fn on_server_clock(&self) -> Queue {
        Queue {
            now_ms: None,
            ..self.clone()
        }
    }

    /// The same queue with a read-back mode of its own (off): clones of
    /// the returned handle share it, `self` and its other clones do not.
    pub fn with_own_readback(&self) -> Queue {
        Queue {
            readback: Arc::default(),
            ..self.clone()
        }
    }

    /// Turns the read-back mode on or off, and drops
    /// any snapshot reply not taken yet. The explorers turn it on for a
    /// step whose result they check.
    pub fn set_readback(&self, on: bool) {
        self.readback
            .on
            .store(on, std::sync::atomic::Ordering::Relaxed);
        self.readback
            .reply
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// The snapshot read in the same pipeline as the last step script
    /// (while read-back is on, each of the six step scripts is sent in one
    /// pipeline with the snapshot script: no second round trip), if
    /// read-back is on and no other call took it since; `None` when
    /// there is none (then read it with [`Queue::snapshot`]).
    pub fn take_readback(&self) -> Option<Result<Snapshot, QueueError>> {
        let reply = self
            .readback
            .reply
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        Some(parse_snapshot(&self.keys, &reply).ok_or_else(|| protocol("snapshot", &reply)))
    }

    /// The snapshot script's call.
    fn snapshot_cmd(&self) -> Cmd {
        let mut cmd = self.fcall("snapshot", 4);
        cmd.arg(&self.keys.pending)
            .arg(&self.keys.active)
            .arg(&self.keys.dead)
            .arg(&self.keys.jobs);
        cmd
    }

    /// `FCALL` of the library's function of `op` with `keys` keys: the
    /// keys, then the arguments, follow as `arg`s.
    fn fcall(&self, op: &str, keys: usize) -> Cmd {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(self.scripts.function(op)).arg(keys);
        cmd
    }

    /// Loads the library (`FUNCTION LOAD REPLACE`).
    async fn load(&self, op: &'static str) -> Result<(), QueueError> {
        let _: Value = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(self.scripts.code())
            .query_async(&mut self.link())
            .await
            .map_err(|e| QueueError::from_redis(op, e))?;
        Ok(())
    }

    /// Runs `cmd`, an `FCALL` of the library: loads the library and sends
    /// it again when the server does not know the function. After a
    /// [`Script::Step`] with the read-back mode on, the snapshot goes in
    /// the same pipeline and its reply is kept; with a durability dial on
    /// a write, its WAIT or WAITAOF follows in the same pipeline, between
    /// two reads of the node's replication identity (see [`Durability`]);
    /// [`Around`] lays the pipeline out and reads its replies by name.
    ///
    /// On a cluster a call the cluster refused before it ran (MOVED, ASK,
    /// TRYAGAIN, CLUSTERDOWN: only the `FCALL` names a key, so only it can
    /// be refused so) is sent again, at most [`REDIRECTS`] times. After
    /// `ASK` (a classic slot migration has moved the call's keys) it goes
    /// at once to the importing node the answer names, after `ASKING`,
    /// and the slot's owner stays as it was. After `MOVED` it goes at once
    /// to the node named, and `connection()` follows the new owner. After
    /// `TRYAGAIN` or `CLUSTERDOWN` it waits 25 ms more each time and goes
    /// where redis-rs' slots say. Nothing else is ever sent twice: the
    /// cluster connection itself retries nothing (`retries(0)`), because
    /// its retry of a pipeline whose connection dropped would run the
    /// write a second time, on whichever node owns the slot by then.
    async fn call(&self, op: &'static str, cmd: &Cmd, script: Script) -> Result<Value, QueueError> {
        let mut redirects = 0;
        let mut to = None;
        loop {
            let redirected = to.is_some();
            match self.call_once(op, cmd, script, to.take()).await {
                // The node a redirect named has no connection of redis-rs'
                // (it connects to the nodes its slot map names): nothing
                // was sent. Sent again where the slots say.
                Err(Sent::Failed(e))
                    if redirected
                        && e.kind() == redis::ErrorKind::ClusterConnectionNotFound
                        && redirects < REDIRECTS =>
                {
                    redirects += 1;
                    let _ = self.follow_owner().await;
                }
                Err(Sent::Refused(e)) if self.cluster.is_some() && redirects < REDIRECTS => {
                    redirects += 1;
                    to = Redirect::of(&e);
                    match &to {
                        Some(Redirect { asking: true, .. }) => {}
                        // The slot moved: `connection()` follows it now,
                        // not at its next 100 ms re-read.
                        Some(_) => {
                            let _ = self.follow_owner().await;
                        }
                        None => {
                            // The slot is moving or its node is down (a
                            // failover, a takeover, a migration that has
                            // moved some of the call's keys): give it, and
                            // the election, a moment.
                            tokio::time::sleep(Duration::from_millis(25 * redirects as u64)).await;
                            let _ = self.follow_owner().await;
                        }
                    }
                }
                Err(Sent::Refused(e)) | Err(Sent::Failed(e)) => {
                    return Err(QueueError::from_redis(op, e))
                }
                Err(Sent::Queue(e)) => return Err(e),
                Ok(v) => return Ok(v),
            }
        }
    }

    /// One send of [`Queue::call`]'s command, alone or in its pipeline.
    async fn call_once(
        &self,
        op: &'static str,
        cmd: &Cmd,
        script: Script,
        to: Option<Redirect>,
    ) -> Result<Value, Sent> {
        let around = self.around(script);
        if around.is_bare() {
            return self.send_bare(op, cmd, to).await;
        }
        let replies = self.send_pipeline(op, cmd, &around, to).await?;
        if let Some(snapshot) = replies.snapshot {
            // A snapshot that failed (the library flushed between the two
            // calls, say) is not kept: the caller reads it again on its
            // own.
            *self
                .readback
                .reply
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = snapshot.ok();
        }
        let value = match replies.step {
            Err(e) if e.is_cluster_error() => return Err(Sent::Refused(e)),
            other => other.map_err(|e| Sent::Queue(QueueError::from_redis(op, e)))?,
        };
        match replies.confirmation {
            None => Ok(value),
            Some(confirmation) => self.confirmed(op, confirmation).map(|()| value),
        }
    }

    /// What goes around a call of `script`: the durability dial's WAIT
    /// goes in the same pipeline as a write (one connection, in order, so
    /// it counts this write), the snapshot after a step while the
    /// read-back mode is on.
    fn around(&self, script: Script) -> Around {
        let reading_back = self.readback.on.load(std::sync::atomic::Ordering::Relaxed);
        Around {
            confirm: script.writes().then(|| self.durability.command()).flatten(),
            snapshot: (script.is_step() && reading_back).then(|| self.snapshot_cmd()),
        }
    }

    /// Sends `cmd` alone; loads the library and sends it again when the
    /// server does not know the function.
    async fn send_bare(
        &self,
        op: &'static str,
        cmd: &Cmd,
        to: Option<Redirect>,
    ) -> Result<Value, Sent> {
        let mut conn = self.link_to(to);
        match cmd.query_async::<Value>(&mut conn).await {
            Err(e) if function_missing(&e) => {
                self.load(op).await.map_err(Sent::Queue)?;
                cmd.query_async(&mut conn).await.map_err(Sent::of)
            }
            other => other.map_err(Sent::of),
        }
    }

    /// Sends `cmd` in its pipeline; when the script's function did not
    /// run for want of the library, loads it and sends the pipeline again.
    async fn send_pipeline(
        &self,
        op: &'static str,
        cmd: &Cmd,
        around: &Around,
        to: Option<Redirect>,
    ) -> Result<Replies, Sent> {
        let mut conn = self.link_to(to);
        let pipe = around.pipeline(cmd);
        let mut replies: Vec<RedisResult<Value>> =
            pipe.query_async(&mut conn).await.map_err(Sent::of)?;
        if matches!(replies.get(around.step_at()), Some(Err(e)) if function_missing(e)) {
            self.load(op).await.map_err(Sent::Queue)?;
            replies = pipe.query_async(&mut conn).await.map_err(Sent::of)?;
        }
        around.split(op, replies)
    }

    /// Whether the durability dial's replies confirm a write that ran:
    /// an unknown outcome when they do not (the write ran, but may be lost).
    fn confirmed(&self, op: &'static str, confirmation: Confirmation) -> Result<(), Sent> {
        let unknown = |reason: String| Sent::Queue(QueueError::Unknown { op, reason });
        let Confirmation {
            before,
            wait,
            after,
        } = confirmation;
        let reply =
            wait.map_err(|e| unknown(format!("the write ran but its confirmation failed: {e}")))?;
        if let Some(reason) = self.durability.shortfall(&reply) {
            return Err(unknown(format!(
                "the write ran but is not confirmed durable: {reason}"
            )));
        }
        match history_changed(Some(before), Some(after)) {
            None => Ok(()),
            Some(reason) => Err(unknown(format!(
                "the write ran, and {} answered {reply:?}, but {reason}: the count is not of \
                 a history that still holds the write",
                self.durability
            ))),
        }
    }

    /// The queue's keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The scripts this handle calls.
    pub fn scripts(&self) -> &Scripts {
        &self.scripts
    }

    /// The shared connection, for consumers that write their effects to the
    /// same server. On a cluster, a connection to the primary that owns the
    /// queue's slot as last seen (re-read every [`FOLLOW_EVERY`]; after a
    /// failover a call may meet the old node until then, and fails).
    pub fn connection(&self) -> ConnectionManager {
        match &self.owner {
            Some(owner) => owner.current(),
            None => self.conn.clone(),
        }
    }

    /// On a cluster, re-reads which primary owns the queue's slot and
    /// points [`Queue::connection`] at it; elsewhere does nothing.
    pub(crate) async fn follow_owner(&self) -> Result<(), QueueError> {
        let (Some(owner), Some(cluster)) = (&self.owner, &self.cluster) else {
            return Ok(());
        };
        owner
            .repoint(cluster.clone())
            .await
            .map_err(|e| QueueError::from_redis("follow the slot's owner", e))
    }

    fn now_arg(&self) -> String {
        self.now_ms.map(|n| n.to_string()).unwrap_or_default()
    }

    /// The logical now as the last argument, or none on the server clock:
    /// for the scripts whose `now_ms` is last and optional (enqueue,
    /// complete_lease), where an argument not sent costs the server nothing.
    fn push_now(&self, cmd: &mut Cmd) {
        if let Some(now) = self.now_ms {
            cmd.arg(now);
        }
    }

    /// Admits job `id` unless a job with that id exists.
    pub async fn enqueue(
        &self,
        id: &str,
        payload: &[u8],
        options: EnqueueOptions,
    ) -> Result<Enqueued, QueueError> {
        const OP: &str = "enqueue";
        let mut cmd = self.fcall("enqueue", 4);
        cmd.arg(&self.keys.jobs)
            .arg(&self.keys.pending)
            .arg(&self.keys.active)
            .arg(&self.keys.dead)
            .arg(id)
            .arg(payload)
            .arg(options.max_attempts)
            .arg(options.delay_ms);
        self.push_now(&mut cmd);
        let reply = self.call(OP, &cmd, Script::Step).await?;
        match reply {
            Value::Int(1) => Ok(Enqueued::Enqueued),
            Value::Int(0) => Ok(Enqueued::Duplicate),
            other => Err(protocol(OP, &other)),
        }
    }

    /// Leases the ready pending job with the lowest score to `worker` for
    /// `lease_ms`; `None` when no job is ready.
    pub async fn lease(&self, worker: &str, lease_ms: u64) -> Result<Option<Lease>, QueueError> {
        const OP: &str = "lease";
        let mut cmd = self.fcall("lease", 3);
        cmd.arg(&self.keys.pending)
            .arg(&self.keys.active)
            .arg(&self.keys.jobs)
            .arg(worker)
            .arg(lease_ms)
            .arg(self.now_arg());
        let reply = self.call(OP, &cmd, Script::Step).await?;
        match &reply {
            Value::Nil => Ok(None),
            other => parse_lease(OP, other).map(Some),
        }
    }

    /// Settles the lease `token` of job `id` as done.
    pub async fn complete(&self, id: &str, token: u64) -> Result<Settled, QueueError> {
        const OP: &str = "complete";
        let mut cmd = self.fcall("complete", 2);
        cmd.arg(&self.keys.jobs)
            .arg(&self.keys.active)
            .arg(id)
            .arg(token);
        let reply = self.call(OP, &cmd, Script::Step).await?;
        parse_settled(OP, &reply)
    }

    /// [`Queue::complete`] of `(id, token)`, then [`Queue::lease`] for
    /// `worker`, in one script run and one round trip: a worker's loop,
    /// settle the job it holds and take the next. Each half answers exactly
    /// what it answers alone, its own refusal included (a refused complete
    /// does not stop the lease, as it would not stop a second call), and no
    /// other call runs between the two. The error of the whole is a
    /// transport error (the outcome of both halves is then unknown) or a
    /// failure of the script itself.
    pub async fn complete_and_lease(
        &self,
        id: &str,
        token: u64,
        worker: &str,
        lease_ms: u64,
    ) -> Result<CompleteAndLease, QueueError> {
        const OP: &str = "complete_lease";
        let mut cmd = self.fcall("complete_lease", 3);
        cmd.arg(&self.keys.jobs)
            .arg(&self.keys.active)
            .arg(&self.keys.pending)
            .arg(id)
            .arg(token)
            .arg(worker)
            .arg(lease_ms);
        self.push_now(&mut cmd);
        let reply = self.call(OP, &cmd, Script::Step).await?;
        // The one-pass path's answers: the complete settled, and the lease
        // is this string, or there was no job ready (0).
        match &reply {
            Value::Int(0) => {
                return Ok(CompleteAndLease {
                    settled: Ok(Settled::Settled),
                    next: Ok(None),
                })
            }
            Value::BulkString(_) => {
                return Ok(CompleteAndLease {
                    settled: Ok(Settled::Settled),
                    next: parse_lease("lease", &reply).map(Some),
                })
            }
            _ => {}
        }
        let (settled, next) = match &reply {
            Value::Array(items) if items.len() == 2 => (&items[0], &items[1]),
            other => return Err(protocol(OP, other)),
        };
        // A half's error reply comes as the string `err CODE message`.
        let half = |op: &'static str, v: &Value| match v {
            Value::BulkString(b) if b.starts_with(b"err ") => {
                let reply = String::from_utf8_lossy(&b[4..]).into_owned();
                let (code, message) = reply.split_once(' ').unwrap_or((reply.as_str(), ""));
                Err(QueueError::from_code(op, code, message))
            }
            other => Ok(other.clone()),
        };
        Ok(CompleteAndLease {
            settled: half("complete", settled).and_then(|v| parse_settled("complete", &v)),
            next: half("lease", next).and_then(|v| match v {
                Value::Nil => Ok(None),
                other => parse_lease("lease", &other).map(Some),
            }),
        })
    }

    /// Settles the lease `token` of job `id` as failed: pending again after
    /// `retry_delay_ms`, or dead after its last allowed attempt.
    pub async fn fail(
        &self,
        id: &str,
        token: u64,
        retry_delay_ms: u64,
    ) -> Result<Failed, QueueError> {
        const OP: &str = "fail";
        let mut cmd = self.fcall("fail", 4);
        cmd.arg(&self.keys.jobs)
            .arg(&self.keys.active)
            .arg(&self.keys.pending)
            .arg(&self.keys.dead)
            .arg(id)
            .arg(token)
            .arg(retry_delay_ms)
            .arg(self.now_arg());
        let reply = self.call(OP, &cmd, Script::Step).await?;
        parse_failed(OP, &reply)
    }

    /// Extends the lease `token` of job `id` to now + `lease_ms`.
    pub async fn extend(
        &self,
        id: &str,
        token: u64,
        lease_ms: u64,
    ) -> Result<Extended, QueueError> {
        const OP: &str = "extend";
        let mut cmd = self.fcall("extend", 2);
        cmd.arg(&self.keys.jobs)
            .arg(&self.keys.active)
            .arg(id)
            .arg(token)
            .arg(lease_ms)
            .arg(self.now_arg());
        let reply = self.call(OP, &cmd, Script::Step).await?;
        let (tag, rest) = tagged(OP, &reply)?;
        match (tag.as_str(), rest.as_slice()) {
            ("extended", [deadline]) => Ok(Extended::Extended {
                deadline_ms: number(OP, &reply, deadline)?,
            }),
            ("missing", []) => Ok(Extended::Missing),
            ("fenced", rest) => {
                let (current, state) = fenced(OP, &reply, rest)?;
                Ok(Extended::Fenced { current, state })
            }
            _ => Err(protocol(OP, &reply)),
        }
    }

    /// Returns up to `limit` expired leases to pending, or to dead at
    /// `max_attempts`.
    pub async fn reap(&self, limit: u64) -> Result<Vec<Reaped>, QueueError> {
        const OP: &str = "reap";
        let mut cmd = self.fcall("reap", 4);
        cmd.arg(&self.keys.active)
            .arg(&self.keys.pending)
            .arg(&self.keys.dead)
            .arg(&self.keys.jobs)
            .arg(limit)
            .arg(self.now_arg());
        let reply = self.call(OP, &cmd, Script::Step).await?;
        let Value::Array(items) = &reply else {
            return Err(protocol(OP, &reply));
        };
        if items.len() % 2 != 0 {
            return Err(protocol(OP, &reply));
        }
        items
            .chunks(2)
            .map(|pair| {
                let to = match text(OP, &pair[1])?.as_str() {
                    "pending" => JobState::Pending,
                    "dead" => JobState::Dead,
                    _ => return Err(protocol(OP, &reply)),
                };
                Ok(Reaped {
                    id: text(OP, &pair[0])?,
                    to,
                })
            })
            .collect()
    }

    /// Admits each `(id, payload)` of `jobs` with the same `options`, in
    /// one script call: the answers, in order, are those of
    /// `jobs.len()` successive [`Queue::enqueue`] calls at one instant (an id
    /// already present, or earlier in the same batch, is
    /// [`Enqueued::Duplicate`] and changes nothing). Every argument is
    /// checked before the first write: one bad id refuses the whole batch
    /// (`EMQKIND` / `EMQARG`) and nothing is written. At most
    /// [`BATCH_MAX`] jobs; an empty batch is refused with `EMQARG`.
    pub async fn enqueue_batch<I, P>(
        &self,
        jobs: &[(I, P)],
        options: EnqueueOptions,
    ) -> Result<Vec<Enqueued>, QueueError>
    where
        I: AsRef<str>,
        P: AsRef<[u8]>,
    {
        const OP: &str = "enqueue_batch";
        let mut call = self.fcall("enqueue_batch", 4);
        call.arg(&self.keys.pending)
            .arg(&self.keys.jobs)
            .arg(&self.keys.active)
            .arg(&self.keys.dead)
            .arg(jobs.len())
            .arg(options.max_attempts)
            .arg(options.delay_ms)
            .arg(self.now_arg());
        for (id, payload) in jobs {
            call.arg(id.as_ref()).arg(payload.as_ref());
        }
        let reply = self.call(OP, &call, Script::Write).await?;
        let items = batch_items(OP, &reply, jobs.len())?;
        items
            .iter()
            .map(|v| match v {
                Value::Int(1) => Ok(Enqueued::Enqueued),
                Value::Int(0) => Ok(Enqueued::Duplicate),
                other => Err(protocol(OP, other)),
            })
            .collect()
    }

    /// Leases up to `count` ready jobs to `worker` for `lease_ms` in one
    /// script call: the same leases, in the same order, as `count`
    /// successive [`Queue::lease`] calls at one instant. Fewer (or none)
    /// when fewer are ready. `count` is 1 to [`BATCH_MAX`].
    pub async fn lease_batch(
        &self,
        worker: &str,
        lease_ms: u64,
        count: u64,
    ) -> Result<Vec<Lease>, QueueError> {
        const OP: &str = "lease_batch";
        let mut cmd = self.fcall("lease_batch", 3);
        cmd.arg(&self.keys.pending)
            .arg(&self.keys.active)
            .arg(&self.keys.jobs)
            .arg(worker)
            .arg(lease_ms)
            .arg(count)
            .arg(self.now_arg());
        let reply = self.call(OP, &cmd, Script::Write).await?;
        let Value::Array(items) = &reply else {
            return Err(protocol(OP, &reply));
        };
        if items.len() as u64 > count {
            return Err(protocol(OP, &reply));
        }
        items.iter().map(|v| parse_lease_job(OP, v)).collect()
    }

    /// Settles each `(id, token)` of `leases` as done in one script call,
    /// each fenced on its own token: the answers, in order, are those of
    /// successive [`Queue::complete`] calls (so one id twice answers
    /// `Settled`, then `AlreadySettled`). Every pair is checked before the
    /// first write: one bad pair refuses the whole batch, writing nothing.
    /// 1 to [`BATCH_MAX`] pairs.
    pub async fn complete_batch<I: AsRef<str>>(
        &self,
        leases: &[(I, u64)],
    ) -> Result<Vec<Settled>, QueueError> {
        const OP: &str = "complete_batch";
        let mut call = self.fcall("complete_batch", 2);
        call.arg(&self.keys.jobs)
            .arg(&self.keys.active)
            .arg(leases.len());
        for (id, token) in leases {
            call.arg(id.as_ref()).arg(*token);
        }
        let reply = self.call(OP, &call, Script::Write).await?;
        // Every pair settled: the script answers their number alone.
        if let Value::Int(n) = reply {
            return match usize::try_from(n) {
                Ok(n) if n == leases.len() => Ok(vec![Settled::Settled; n]),
                _ => Err(protocol(OP, &reply)),
            };
        }
        batch_items(OP, &reply, leases.len())?
            .iter()
            .map(|v| parse_settled(OP, v))
            .collect()
    }

    /// Settles each `(id, token)` of `leases` as failed in one script call
    /// (pending again after `retry_delay_ms`, or dead after its last allowed
    /// attempt), each fenced on its own token: the answers, in order, are
    /// those of successive [`Queue::fail`] calls at one instant. Checked
    /// whole before the first write, like [`Queue::complete_batch`].
    pub async fn fail_batch<I: AsRef<str>>(
        &self,
        leases: &[(I, u64)],
        retry_delay_ms: u64,
    ) -> Result<Vec<Failed>, QueueError> {
        const OP: &str = "fail_batch";
        let mut call = self.fcall("fail_batch", 4);
        call.arg(&self.keys.jobs)
            .arg(&self.keys.active)
            .arg(&self.keys.pending)
            .arg(&self.keys.dead)
            .arg(leases.len())
            .arg(retry_delay_ms)
            .arg(self.now_arg());
        for (id, token) in leases {
            call.arg(id.as_ref()).arg(*token);
        }
        let reply = self.call(OP, &call, Script::Write).await?;
        batch_items(OP, &reply, leases.len())?
            .iter()
            .map(|v| parse_failed(OP, v))
            .collect()
    }

    /// Reads the whole queue in one round trip.
    pub async fn snapshot(&self) -> Result<Snapshot, QueueError> {
        const OP: &str = "snapshot";
        let reply = self.call(OP, &self.snapshot_cmd(), Script::Read).await?;
        parse_snapshot(&self.keys, &reply).ok_or_else(|| protocol(OP, &reply))
    }

    /// Calls script `op` with the keys the client would pass and raw
    /// arguments, bypassing the typed API: for tests of what the scripts do
    /// with malformed input.
    pub async fn call_raw(&self, op: &'static str, args: &[&[u8]]) -> Result<Value, QueueError> {
        let k = &self.keys;
        let keys: Vec<&String> = match op {
            "enqueue" => vec![&k.jobs, &k.pending, &k.active, &k.dead],
            "lease" => vec![&k.pending, &k.active, &k.jobs],
            "complete" | "extend" => vec![&k.jobs, &k.active],
            "fail" => vec![&k.jobs, &k.active, &k.pending, &k.dead],
            "reap" => vec![&k.active, &k.pending, &k.dead, &k.jobs],
            _ => {
                return Err(QueueError::Protocol {
                    op,
                    reply: "no such script".into(),
                })
            }
        };
        let mut cmd = self.fcall(op, keys.len());
        cmd.arg(keys);
        for arg in args {
            cmd.arg(*arg);
        }
        self.call(op, &cmd, Script::Write).await
    }

    /// Deletes every key of this queue (rows, indexes, effects).
    pub async fn clear(&self) -> Result<u64, QueueError> {
        const OP: &str = "clear";
        self.follow_owner().await?;
        let mut conn = self.connection();
        let mut keys: Vec<String> = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(self.keys.all_pattern())
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| QueueError::from_redis(OP, e))?;
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let mut removed = 0;
        for chunk in keys.chunks(500) {
            let n: u64 = redis::cmd("DEL")
                .arg(chunk)
                .query_async(&mut conn)
                .await
                .map_err(|e| QueueError::from_redis(OP, e))?;
            removed += n;
        }
        Ok(removed)
    }

    /// The server clock in milliseconds (`TIME`).
    pub async fn server_time_ms(&self) -> Result<u64, QueueError> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.link())
            .await
            .map_err(|e| QueueError::from_redis("time", e))?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// `PING`: true when the server answers.
    pub async fn ping(&self) -> Result<(), QueueError> {
        let _: String = redis::cmd("PING")
            .query_async(&mut self.link())
            .await
            .map_err(|e| QueueError::from_redis("ping", e))?;
        Ok(())
    }
}

/// What [`Queue::complete_and_lease`] answers: each half's own answer, as
/// [`Queue::complete`] and [`Queue::lease`] would have given it.
#[derive(Debug)]
pub struct CompleteAndLease {
    /// The complete of the job the worker held.
    pub settled: Result<Settled, QueueError>,
    /// The next lease: `None` when no job was ready.
    pub next: Result<Option<Lease>, QueueError>,
}

/// True when the server does not know the function called: the library
/// is not loaded (a new server, `FUNCTION FLUSH`).
fn function_missing(e: &RedisError) -> bool {
    e.code() == Some("ERR")
        && e.detail()
            .is_some_and(|d| d.starts_with("Function not found"))
}

/// How many times [`Queue::call`] sends again a call the cluster refused
/// before it ran (MOVED, ASK, TRYAGAIN, CLUSTERDOWN), waiting 25 ms more
/// before each: about 1 s in all, the time a takeover or a forced
/// failover takes to settle.
const REDIRECTS: u32 = 8;

/// How one send of [`Queue::call`] ended short of a value.
enum Sent {
    /// The cluster refused the call before it ran: it may be sent again.
    Refused(RedisError),
    /// The call failed; whether it ran is for [`QueueError::from_redis`].
    Failed(RedisError),
    /// Already classified.
    Queue(QueueError),
}

impl Sent {
    /// A send that failed: refused by the cluster (it may be sent again),
    /// or failed.
    fn of(e: RedisError) -> Sent {
        if e.is_cluster_error() {
            Sent::Refused(e)
        } else {
            Sent::Failed(e)
        }
    }
}

/// The largest batch the `*_batch` scripts take (`EMQ_BATCH_MAX` in the
/// prelude).
pub const BATCH_MAX: usize = 1000;

/// The reply of a batch script: an array of exactly `n` answers.
fn batch_items<'a>(op: &'static str, v: &'a Value, n: usize) -> Result<&'a [Value], QueueError> {
    match v {
        Value::Array(items) if items.len() == n => Ok(items),
        other => Err(protocol(op, other)),
    }
}

/// `token deadline_ms id_len id..payload`: three decimal numbers and a
/// space after each, then the id (`id_len` bytes) and the payload joined.
pub(crate) fn parse_lease(op: &'static str, v: &Value) -> Result<Lease, QueueError> {
    let Value::BulkString(b) = v else {
        return Err(protocol(op, v));
    };
    let bad = || protocol(op, v);
    let mut rest = b.as_slice();
    let mut numbers = [0u64; 3];
    for n in &mut numbers {
        let space = rest.iter().position(|&c| c == b' ').ok_or_else(bad)?;
        *n = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        rest = &rest[space + 1..];
    }
    let [token, deadline_ms, id_len] = numbers;
    let id_len = usize::try_from(id_len).map_err(|_| bad())?;
    if rest.len() < id_len {
        return Err(bad());
    }
    let (id, payload) = rest.split_at(id_len);
    Ok(Lease {
        id: String::from_utf8(id.to_vec()).map_err(|_| bad())?,
        token,
        deadline_ms,
        payload: payload.to_vec(),
    })
}

/// A lease of `lease_batch`: as [`parse_lease`], with the job's whole field
/// (`max_attempts payload`) after the id; the payload is what follows its
/// first space (nothing when it has none, as the scripts cut it).
fn parse_lease_job(op: &'static str, v: &Value) -> Result<Lease, QueueError> {
    let mut lease = parse_lease(op, v)?;
    lease.payload = match lease.payload.iter().position(|&c| c == b' ') {
        Some(space) => lease.payload.split_off(space + 1),
        None => Vec::new(),
    };
    Ok(lease)
}

fn parse_settled(op: &'static str, reply: &Value) -> Result<Settled, QueueError> {
    let (tag, rest) = tagged(op, reply)?;
    match (tag.as_str(), rest.as_slice()) {
        ("settled", []) => Ok(Settled::Settled),
        ("already_settled", []) => Ok(Settled::AlreadySettled),
        ("missing", []) => Ok(Settled::Missing),
        ("fenced", rest) => {
            let (current, state) = fenced(op, reply, rest)?;
            Ok(Settled::Fenced { current, state })
        }
        _ => Err(protocol(op, reply)),
    }
}

fn parse_failed(op: &'static str, reply: &Value) -> Result<Failed, QueueError> {
    let (tag, rest) = tagged(op, reply)?;
    match (tag.as_str(), rest.as_slice()) {
        ("requeued", [ready_at]) => Ok(Failed::Requeued {
            ready_at_ms: number(op, reply, ready_at)?,
        }),
        ("dead", []) => Ok(Failed::Dead),
        ("missing", []) => Ok(Failed::Missing),
        ("fenced", rest) => {
            let (current, state) = fenced(op, reply, rest)?;
            Ok(Failed::Fenced { current, state })
        }
        _ => Err(protocol(op, reply)),
    }
}

fn protocol(op: &'static str, reply: &Value) -> QueueError {
    QueueError::Protocol {
        op,
        reply: format!("{reply:?}"),
    }
}

fn bytes(op: &'static str, v: &Value) -> Result<Vec<u8>, QueueError> {
    match v {
        Value::BulkString(b) => Ok(b.clone()),
        Value::SimpleString(s) => Ok(s.clone().into_bytes()),
        other => Err(protocol(op, other)),
    }
}

fn text(op: &'static str, v: &Value) -> Result<String, QueueError> {
    String::from_utf8(bytes(op, v)?).map_err(|_| protocol(op, v))
}

/// An answer of the form `tag word word...` (one string, words separated by
/// single spaces): the tag and the words after it.
fn tagged<'a>(op: &'static str, v: &'a Value) -> Result<(String, Vec<&'a str>), QueueError> {
    let Value::BulkString(b) = v else {
        return Err(protocol(op, v));
    };
    let text = std::str::from_utf8(b).map_err(|_| protocol(op, v))?;
    let mut words = text.split(' ');
    let tag = words.next().unwrap_or_default().to_owned();
    Ok((tag, words.collect()))
}

/// A decimal word of the answer `reply`.
fn number(op: &'static str, reply: &Value, word: &str) -> Result<u64, QueueError> {
    word.parse().map_err(|_| protocol(op, reply))
}

/// The words after `fenced`: the current attempts and the state.
fn fenced(op: &'static str, reply: &Value, rest: &[&str]) -> Result<(u64, JobState), QueueError> {
    match rest {
        [current, state] => {
            let state = JobState::parse(state).ok_or_else(|| protocol(op, reply))?;
            Ok((number(op, reply, current)?, state))
        }
        _ => Err(protocol(op, reply)),
    }
}

fn parse_snapshot(keys: &Keys, reply: &Value) -> Option<Snapshot> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let [pending, active, dead, jobs] = parts.as_slice() else {
        return None;
    };
    let scored = |v: &Value| -> Option<std::collections::BTreeMap<String, u64>> {
        let Value::Array(items) = v else { return None };
        items
            .chunks(2)
            .map(|pair| {
                let id = text("snapshot", &pair[0]).ok()?;
                let score = match &pair[1] {
                    Value::Double(d) => *d as u64,
                    other => {
                        let s = text("snapshot", other).ok()?;
                        s.parse::<f64>().ok()? as u64
                    }
                };
                Some((id, score))
            })
            .collect()
    };
    let mut snap = Snapshot {
        pending: scored(pending)?,
        active: scored(active)?,
        dead: scored(dead)?,
        ..Snapshot::default()
    };
    // The column as {field, value, ...}, or {type} when its key is no hash.
    let Value::Array(items) = jobs else {
        return None;
    };
    if let [kind] = items.as_slice() {
        snap.foreign
            .push((keys.jobs.clone(), text("snapshot", kind).ok()?));
        return Some(snap);
    }
    let mut states = Vec::new();
    for pair in items.chunks(2) {
        let [field, value] = pair else { return None };
        let field = text("snapshot", field).ok()?;
        let value = bytes("snapshot", value).ok()?;
        if field == WIDE_FIELD {
            continue;
        }
        if let Some(id) = field.strip_prefix('~') {
            states.push((id.to_owned(), value));
            continue;
        }
        // `max_attempts payload`
        let (max, payload) = match value.iter().position(|&c| c == b' ') {
            Some(at) => (&value[..at], value[at + 1..].to_vec()),
            None => (value.as_slice(), Vec::new()),
        };
        let max_attempts = std::str::from_utf8(max)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let row = JobRow {
            state: Some(JobState::Pending),
            attempts: 0,
            max_attempts,
            payload,
            worker: None,
            deadline_ms: None,
        };
        snap.rows.insert(field, row);
    }
    for (id, value) in states {
        let Some(row) = snap.rows.get_mut(&id) else {
            snap.strays.push(id);
            continue;
        };
        // `attempts state`, then ` worker` while active.
        let text = String::from_utf8_lossy(&value);
        let mut words = text.splitn(3, ' ');
        let attempts = words.next().and_then(|a| a.parse().ok());
        let state = words.next().and_then(JobState::parse);
        row.attempts = attempts.unwrap_or(0);
        row.state = attempts.and(state);
        row.worker = words.next().map(str::to_owned);
        match row.state {
            Some(JobState::Active) => row.deadline_ms = snap.active.get(&id).copied(),
            // A done job is in no index: its state entry is its place.
            Some(JobState::Done) => {
                snap.done.insert(id);
            }
            _ => {}
        }
    }
    Some(snap)
}

/// The connection a script call goes through.
enum Link {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    /// The cluster's connection to the node a redirect named.
    Redirected(ClusterConnection, Redirect),
}

/// Where a cluster redirected a call: the node its `ASK` or `MOVED`
/// answer named (the address the node announces), and whether the call
/// goes there after `ASKING` (an `ASK`: the node is importing the slot,
/// and serves it to a client that says so).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Redirect {
    host: String,
    port: u16,
    asking: bool,
}

impl Redirect {
    /// The redirect an `ASK` or `MOVED` error names; `None` for every other
    /// error.
    fn of(e: &RedisError) -> Option<Redirect> {
        use redis::{ErrorKind, ServerErrorKind};
        let asking = match e.kind() {
            ErrorKind::Server(ServerErrorKind::Ask) => true,
            ErrorKind::Server(ServerErrorKind::Moved) => false,
            _ => return None,
        };
        let (addr, _slot) = e.redirect_node()?;
        let (host, port) = addr.rsplit_once(':')?;
        Some(Redirect {
            host: host.to_owned(),
            port: port.parse().ok()?,
            asking,
        })
    }

    /// `pipeline`'s commands, each after an `ASKING` when this redirect
    /// asks (the flag lasts one command), sent to the named node through
    /// `cluster`; the replies of `pipeline`'s commands alone, all of them.
    async fn send(
        &self,
        cluster: &mut ClusterConnection,
        pipeline: &redis::Pipeline,
    ) -> RedisResult<Vec<Value>> {
        let mut sent = redis::pipe();
        for cmd in pipeline.cmd_iter() {
            if self.asking {
                sent.cmd("ASKING");
            }
            sent.add_command(cmd.clone());
        }
        let count = sent.cmd_iter().count();
        let route = redis::cluster_routing::SingleNodeRoutingInfo::ByAddress {
            host: self.host.clone(),
            port: self.port,
        };
        let replies = cluster.route_pipeline(sent, 0, count, route).await?;
        Ok(if self.asking {
            replies.into_iter().skip(1).step_by(2).collect()
        } else {
            replies
        })
    }
}

impl redis::aio::ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Link::Single(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
            Link::Redirected(c, to) => Box::pin(async move {
                let mut pipe = redis::pipe();
                pipe.add_command(cmd.clone());
                let mut replies = to.send(c, &pipe).await?;
                replies
                    .pop()
                    .ok_or_else(|| RedisError::from((redis::ErrorKind::Parse, "no reply")))
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Redirected(c, to) => Box::pin(async move {
                let replies = to.send(c, pipeline).await?;
                Ok(replies.into_iter().skip(offset).take(count).collect())
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(c) => c.get_db(),
            Link::Cluster(c) | Link::Redirected(c, _) => c.get_db(),
        }
    }
}

/// How often a cluster queue re-reads its slot's owner.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(100);

/// On a cluster, the primary that owns a queue's slot, followed.
struct Owner {
    /// Its address and a connection to it.
    now: std::sync::Mutex<(redis::ConnectionAddr, ConnectionManager)>,
    /// How to connect (the seed's settings, another address).
    info: redis::ConnectionInfo,
    config: ConnectionManagerConfig,
    /// A key of the queue (its slot is the queue's).
    key: String,
    /// Where to connect for each announced address
    /// ([`QueueConfig::node_addresses`]).
    addresses: BTreeMap<(String, u16), (String, u16)>,
}

impl Owner {
    fn current(&self) -> ConnectionManager {
        self.now.lock().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    /// Reads the owner of the queue's slot through `cluster` and, when it
    /// moved, connects to the new one.
    /// The read is tried three times: the cluster connection itself
    /// retries nothing (see [`Queue::call`]), and a node it asks may be
    /// the one a failover just took down.
    async fn repoint(&self, mut cluster: ClusterConnection) -> RedisResult<()> {
        let mut tries = 0;
        let addr = loop {
            match slot_owner(&mut cluster, &self.key).await {
                Ok(addr) => break addr,
                Err(e) if tries >= 2 => return Err(e),
                Err(_) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(30)).await;
                }
            }
        };
        if self.now.lock().unwrap_or_else(|e| e.into_inner()).0 == addr {
            return Ok(());
        }
        let client =
            redis::Client::open(self.info.clone().set_addr(mapped(&self.addresses, &addr)))?;
        let conn = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = (addr, conn);
        Ok(())
    }
}

/// While a handle of the queue lives (`owner` upgrades), re-reads the
/// owner of the queue's slot every [`FOLLOW_EVERY`].
async fn follow_owner(owner: std::sync::Weak<Owner>, cluster: ClusterConnection) {
    loop {
        tokio::time::sleep(FOLLOW_EVERY).await;
        let Some(owner) = owner.upgrade() else { return };
        // A failed read (a node down mid-failover) is retried next time.
        let _ = owner.repoint(cluster.clone()).await;
    }
}

/// The cluster connection every script call of a queue on a cluster goes
/// through, seeded with `client`'s address and reaching each node where
/// [`QueueConfig::node_addresses`] says.
async fn cluster_connection(
    client: &redis::Client,
    config: &QueueConfig,
) -> RedisResult<ClusterConnection> {
    let map = config
        .node_addresses
        .iter()
        .map(|((h, p), (to_h, to_p))| {
            (
                redis::cluster::NodeAddress::new(h.as_str(), *p),
                redis::cluster::NodeAddress::new(to_h.as_str(), *to_p),
            )
        })
        .collect();
    redis::cluster::ClusterClient::builder(vec![client.get_connection_info().clone()])
        .connection_timeout(config.connect_timeout)
        .response_timeout(config.response_timeout)
        .node_address_map(map)
        // Nothing is sent twice by the library: see `Queue::call`.
        .retries(0)
        .build()?
        .get_async_connection()
        .await
}

/// Where to connect for `addr`, an address a node announces: its entry in
/// `addresses` ([`QueueConfig::node_addresses`]), or itself.
fn mapped(
    addresses: &BTreeMap<(String, u16), (String, u16)>,
    addr: &redis::ConnectionAddr,
) -> redis::ConnectionAddr {
    match addr {
        redis::ConnectionAddr::Tcp(host, port) => match addresses.get(&(host.clone(), *port)) {
            Some((to_host, to_port)) => redis::ConnectionAddr::Tcp(to_host.clone(), *to_port),
            None => addr.clone(),
        },
        other => other.clone(),
    }
}

/// Whether the server behind `conn` runs in cluster mode (`INFO cluster`).
async fn is_cluster(conn: &mut ConnectionManager) -> RedisResult<bool> {
    match redis::cmd("INFO")
        .arg("cluster")
        .query_async::<String>(conn)
        .await
    {
        Ok(info) => Ok(info.lines().any(|l| l.trim_end() == "cluster_enabled:1")),
        // A user whose ACL refuses INFO is on a server we did not start:
        // not a cluster of ours.
        Err(e) if e.code().is_some() => Ok(false),
        Err(e) => Err(e),
    }
}

/// The address of the primary that owns `key`'s slot (`CLUSTER KEYSLOT`,
/// `CLUSTER SLOTS`).
async fn slot_owner(
    cluster: &mut ClusterConnection,
    key: &str,
) -> RedisResult<redis::ConnectionAddr> {
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(cluster)
        .await?;
    let ranges: Vec<Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(cluster)
        .await?;
    for range in &ranges {
        let Value::Array(parts) = range else { continue };
        let (Some(Value::Int(from)), Some(Value::Int(to)), Some(Value::Array(primary))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        if (*from..=*to).contains(&slot) {
            if let (Some(host), Some(Value::Int(port))) = (primary.first(), primary.get(1)) {
                let host = match host {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    Value::SimpleString(s) => s.clone(),
                    _ => continue,
                };
                return Ok(redis::ConnectionAddr::Tcp(host, *port as u16));
            }
        }
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::Client,
        "no primary owns the queue's slot",
        format!("slot {slot}"),
    )))
}
