//! `--server replicated[:N]`: a primary and N replicas as child processes,
//! wired with `REPLICAOF`, behind a [`Front`] (the stable address clients
//! use).
//!
//! Each node has an uplink of its own, another [`Front`] pointed at the
//! current primary, and a replica's `REPLICAOF` names its uplink: so a
//! replication link can be held and cut like a network link, and a
//! failover repoints the uplinks (the replicas reconnect to the new
//! primary and resync partially).
//!
//! Every node is a [`ProcessServer`] (so each dies with the tool) started
//! with `--repl-diskless-sync-delay 0` (a replica's first sync takes 0.1 s
//! instead of 7), `--repl-timeout 2` and `--repl-ping-replica-period 1`.
//! The start returns once the primary reports every replica `online`.
//!
//! The faults a replicated topology adds (see `src/chaos/`):
//!
//! - [`ReplicaSet::lag`] / [`ReplicaSet::unlag`]: SIGSTOP / SIGCONT every
//!   replica. The primary goes on acknowledging writes the replicas do not
//!   have yet; on loopback they reach the replicas' sockets all the same,
//!   and a resumed replica reads them.
//! - [`ReplicaSet::hold_links`]: every replication link stops carrying the
//!   primary's stream (the replicas stay up and connected); the stream waits
//!   unread in the uplinks, and a failover drops it.
//! - [`ReplicaSet::failover`]: kill -9 of the primary, then the promotion
//!   of the replica with the largest replication offset (the lowest index
//!   among equals), as Sentinel chooses: the uplinks cut (a held stream is
//!   lost with them), any paused replica resumed, `REPLICAOF NO ONE` on the
//!   chosen one, the uplinks and the front repointed to it.
//! - [`ReplicaSet::rejoin`]: the old primary restarts on its own directory
//!   and port as a replica of the new one; the full sync discards whatever
//!   it had that was never replicated.
//! - [`ReplicaSet::power_cut`] / [`ReplicaSet::power_on`]: every running
//!   node loses power at once (a rack or a zone: each truncated to what it
//!   fsynced, through the power-loss shim every node was started with),
//!   then each starts again on its own data, the primary first; the
//!   replicas resync from what the primary kept. A write only a replica's
//!   memory held, or that no node fsynced, is gone: `WAIT` does not keep
//!   it, `WAITAOF` with a local fsync does.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::fault::FaultKind;

use super::front::Front;
use super::powercut::PowerLoss;
use super::process::ProcessServer;
use super::topology::{elsewhere, loaded, FAKETIME, SHIM};
use super::{probe_config, Instruments, Persistence, ProcessOptions, ServerError, START_DEADLINE};

/// The arguments every node of a replicated topology runs with.
fn replication_args() -> Vec<String> {
    [
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
        "--repl-timeout",
        "2",
        "--repl-ping-replica-period",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A replica's arguments: it replicates from its uplink's port.
fn replica_args(uplink_port: u16) -> Vec<String> {
    let mut args = replication_args();
    args.extend([
        "--replicaof".to_string(),
        "127.0.0.1".to_string(),
        uplink_port.to_string(),
    ]);
    args
}

/// What a failover did, for the history. Nodes are named by address
/// (`127.0.0.1:PORT`, or a container's IP on its control network).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failover {
    /// The primary that was killed.
    pub killed: String,
    /// The replica promoted.
    pub promoted: String,
    /// Each replica's replication offset when the choice was made.
    pub offsets: Vec<(String, u64)>,
    /// The replicas repointed to the new primary.
    pub repointed: Vec<String>,
    /// Bytes of the primary's stream that the held links never delivered
    /// (the writes lost with them): the killed primary's offset minus the
    /// promoted replica's, when the primary's offset was read before the
    /// kill.
    pub unreplicated_bytes: Option<u64>,
    /// On a cluster, how long from the kill until a replica promoted
    /// itself (the cluster's own failover after `cluster-node-timeout`).
    pub took_ms: Option<u64>,
    /// On a cluster, the killed primary's cluster node id (`CLUSTER
    /// MYID`); it keeps it when it rejoins.
    pub killed_id: Option<String>,
    /// On a cluster, the promoted replica's cluster node id.
    pub promoted_id: Option<String>,
}

/// A primary and its replicas behind a front.
#[derive(Debug)]
pub(crate) struct ReplicaSet {
    /// Every node; `nodes[primary]` is the primary.
    nodes: Vec<ProcessServer>,
    /// Each node's uplink (same index), pointed at the current primary.
    uplinks: Vec<Front>,
    primary: usize,
    /// A primary killed by [`ReplicaSet::failover`] and not yet rejoined.
    down: Option<usize>,
    front: Front,
    /// How long the start took, until every replica was online.
    pub(crate) started_in: Duration,
}

impl ReplicaSet {
    /// Every node's libfaketime control file (none without the clock).
    pub(crate) fn clock_files(&self) -> Vec<std::path::PathBuf> {
        self.nodes
            .iter()
            .filter_map(ProcessServer::clock_file)
            .collect()
    }

    pub(crate) async fn start(
        options: &ProcessOptions,
        persistence: Persistence,
        replicas: usize,
        instruments: Instruments,
    ) -> Result<ReplicaSet, ServerError> {
        let began = Instant::now();
        let primary = ProcessServer::start_instrumented(
            options,
            persistence,
            replication_args(),
            instruments,
        )
        .await?;
        let primary_port = primary.port();
        let mut nodes = vec![primary];
        let mut uplinks = vec![Front::start(primary_port).await?];
        for _ in 0..replicas {
            let uplink = Front::start(primary_port).await?;
            nodes.push(
                ProcessServer::start_instrumented(
                    options,
                    persistence,
                    replica_args(uplink.port()),
                    instruments,
                )
                .await?,
            );
            uplinks.push(uplink);
        }
        let front = Front::start(primary_port).await?;
        let mut set = ReplicaSet {
            nodes,
            uplinks,
            primary: 0,
            down: None,
            front,
            started_in: Duration::ZERO,
        };
        set.wait_replicas_online(replicas).await?;
        set.started_in = began.elapsed();
        Ok(set)
    }

    /// The front's port: the address clients use.
    pub(crate) fn port(&self) -> u16 {
        self.front.port()
    }

    pub(crate) fn primary(&self) -> &ProcessServer {
        &self.nodes[self.primary]
    }

    pub(crate) fn primary_mut(&mut self) -> &mut ProcessServer {
        &mut self.nodes[self.primary]
    }

    /// The number of replicas (the nodes besides the primary, a killed old
    /// primary included).
    pub(crate) fn replicas(&self) -> usize {
        self.nodes.len() - 1
    }

    /// Every node's port, the primary first.
    pub(crate) fn ports(&self) -> Vec<u16> {
        let mut ports = vec![self.primary().port()];
        ports.extend(self.replica_indexes().map(|i| self.nodes[i].port()));
        ports
    }

    fn replica_indexes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(move |&i| i != self.primary)
    }

    /// Closes every connection through the front (after a kill of the
    /// primary, so that no client waits on a dead connection).
    pub(crate) fn reset_front(&self) {
        self.front.reset();
    }

    /// Waits until the primary reports `want` replicas online and each
    /// replica reports its link up (the primary says `online` once it has
    /// sent the snapshot, before the replica has loaded it).
    async fn wait_replicas_online(&self, want: usize) -> Result<(), ServerError> {
        let port = self.primary().port();
        // A primary killed by a failover and not yet rejoined has no link.
        let replicas: Vec<u16> = self
            .replica_indexes()
            .filter(|&i| Some(i) != self.down)
            .map(|i| self.nodes[i].port())
            .collect();
        let start = Instant::now();
        loop {
            let last = match info_replication(port).await {
                Ok(info) => {
                    let online = info
                        .lines()
                        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                        .count();
                    let mut up = 0;
                    for &replica in &replicas {
                        if link_up(replica).await {
                            up += 1;
                        }
                    }
                    if online >= want && up == replicas.len() {
                        return Ok(());
                    }
                    format!(
                        "{online} of {want} replicas online, {up} of {} links up",
                        replicas.len()
                    )
                }
                Err(e) => e.to_string(),
            };
            if start.elapsed() >= START_DEADLINE {
                return Err(ServerError::Start {
                    what: format!("a replicated topology with primary on 127.0.0.1:{port}"),
                    reason: format!(
                        "the replicas did not come online within {} ms ({last})",
                        START_DEADLINE.as_millis()
                    ),
                    log_tail: String::new(),
                });
            }
            // The poll interval of a readiness wait.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Jumps the clock of every replica (every node but the primary) by
    /// `delta_ms`; answers each one's address and new offset.
    pub(crate) fn jump_replica_clocks(
        &mut self,
        delta_ms: i64,
    ) -> Result<Vec<(String, i64)>, ServerError> {
        let replicas: Vec<usize> = self.replica_indexes().collect();
        let mut out = Vec::new();
        for i in replicas {
            let offset = self.nodes[i].jump_clock(delta_ms)?;
            out.push((node(self.nodes[i].port()), offset));
        }
        Ok(out)
    }

    /// Moves every node's clock back to the real one; answers each moved
    /// node's address and the jump (the negated offset it had).
    pub(crate) fn align_clocks(&mut self) -> Result<Vec<(String, i64)>, ServerError> {
        let mut out = Vec::new();
        for n in &mut self.nodes {
            if let Some(offset) = n.clock_offset_ms().filter(|&o| o != 0) {
                n.jump_clock(-offset)?;
                out.push((node(n.port()), -offset));
            }
        }
        Ok(out)
    }

    /// The libraries every node was started with.
    pub(crate) fn instruments(&self) -> Instruments {
        self.primary().instruments()
    }

    /// Power loss of every running node at once, the primary first: each
    /// keeps only what it fsynced and stays down until
    /// [`ReplicaSet::power_on`]. Answers what the cut dropped, summed
    /// over the nodes.
    pub(crate) async fn power_cut(&mut self) -> Result<PowerLoss, ServerError> {
        let mut order = vec![self.primary];
        order.extend(self.replica_indexes());
        let mut total = PowerLoss::default();
        for i in order {
            if Some(i) == self.down {
                continue;
            }
            total += self.nodes[i].power_cut().await?;
        }
        self.front.reset();
        Ok(total)
    }

    /// Every node cut by [`ReplicaSet::power_cut`] started again on its own
    /// data, the primary first; returns once each replica's link is up.
    pub(crate) async fn power_on(&mut self) -> Result<(), ServerError> {
        let mut order = vec![self.primary];
        order.extend(self.replica_indexes());
        let mut running = 0;
        for i in order {
            if Some(i) == self.down {
                continue;
            }
            self.nodes[i].restart().await?;
            running += 1;
        }
        self.wait_replicas_online(running - 1).await
    }

    /// The fault kinds a primary with `replicas` replicas runs (its faults
    /// follow; a set of containers runs the same), with `instruments` in
    /// every node; the others as [`super::topology::elsewhere`].
    pub(crate) fn supports(
        kind: FaultKind,
        replicas: usize,
        instruments: Instruments,
    ) -> Result<(), String> {
        match kind {
            // The primary's.
            FaultKind::ServerPause | FaultKind::ServerKill => Ok(()),
            FaultKind::ReplicaLag
            | FaultKind::LagFailover
            | FaultKind::Failover
            | FaultKind::PrimaryPartition
                if replicas > 0 =>
            {
                Ok(())
            }
            FaultKind::PowerLoss => loaded(kind, instruments.power_loss, SHIM, "every node"),
            // `jump_replica_clocks` moves the replicas' alone.
            FaultKind::ClockJump => Err(format!(
                "needs {FAKETIME} loaded into the server, which a replicated set does not take \
                 for now: use --server process, container, cluster[:PxR] or \
                 container-cluster[:PxR]"
            )),
            FaultKind::SkewFailover if replicas > 0 => {
                loaded(kind, instruments.clock, "libfaketime", "every node")
            }
            other => elsewhere(other),
        }
    }

    /// SIGSTOP every running replica.
    pub(crate) async fn lag(&mut self) -> Result<(), ServerError> {
        let replicas: Vec<usize> = self.replica_indexes().collect();
        for i in replicas {
            if Some(i) != self.down && !self.nodes[i].is_paused() {
                self.nodes[i].pause().await?;
            }
        }
        Ok(())
    }

    /// SIGCONT every paused replica.
    pub(crate) async fn unlag(&mut self) -> Result<(), ServerError> {
        let replicas: Vec<usize> = self.replica_indexes().collect();
        for i in replicas {
            if Some(i) != self.down && self.nodes[i].is_paused() {
                self.nodes[i].resume().await?;
            }
        }
        Ok(())
    }

    /// Holds every replication link: the primary's stream stops reaching
    /// the replicas, which stay up and connected.
    pub(crate) fn hold_links(&self) {
        for uplink in &self.uplinks {
            uplink.hold(true);
        }
    }

    /// Releases held links: the replicas catch up.
    pub(crate) fn release_links(&self) {
        for uplink in &self.uplinks {
            uplink.hold(false);
        }
    }

    /// Kills the primary and promotes the replica with the largest offset.
    pub(crate) async fn failover(&mut self) -> Result<Failover, ServerError> {
        if self.down.is_some() {
            return Err(self.fault(
                "fail over",
                "the old primary has not rejoined yet".to_string(),
            ));
        }
        let old = self.primary;
        let killed = self.nodes[old].port();
        let primary_offset = info_replication(killed)
            .await
            .ok()
            .and_then(|info| info_field(&info, "master_repl_offset"))
            .and_then(|v| v.parse::<u64>().ok());
        self.nodes[old].kill().await?;
        self.front.reset();
        // The links go down with the primary, and whatever they held with
        // them.
        for uplink in &self.uplinks {
            uplink.reset();
        }
        self.unlag().await?;
        let mut offsets = Vec::new();
        let mut best: Option<(u64, usize)> = None;
        let candidates: Vec<usize> = self.replica_indexes().collect();
        for &i in &candidates {
            let port = self.nodes[i].port();
            let offset = info_replication(port)
                .await
                .ok()
                .and_then(|info| info_field(&info, "slave_repl_offset"))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            offsets.push((node(port), offset));
            if best.is_none_or(|(b, _)| offset > b) {
                best = Some((offset, i));
            }
        }
        let Some((_, new)) = best else {
            return Err(self.fault("fail over", "there is no replica to promote".to_string()));
        };
        let promoted = self.nodes[new].port();
        command(promoted, &["REPLICAOF", "NO", "ONE"])
            .await
            .map_err(|e| self.fault("promote", e))?;
        self.nodes[new].set_extra(replication_args());
        // Every uplink now leads to the new primary: the other replicas
        // reconnect through theirs and resync from it.
        for uplink in &self.uplinks {
            uplink.repoint(promoted);
        }
        let repointed = candidates
            .iter()
            .filter(|&&i| i != new)
            .map(|&i| node(self.nodes[i].port()))
            .collect();
        self.primary = new;
        self.down = Some(old);
        self.front.repoint(promoted);
        let promoted_offset = offsets
            .iter()
            .find(|(name, _)| *name == node(promoted))
            .map_or(0, |(_, o)| *o);
        Ok(Failover {
            killed: node(killed),
            promoted: node(promoted),
            offsets,
            repointed,
            unreplicated_bytes: primary_offset.map(|p| p.saturating_sub(promoted_offset)),
            took_ms: None,
            killed_id: None,
            promoted_id: None,
        })
    }

    /// Restarts the primary a failover killed as a replica of the new one,
    /// and waits until its link is up (its own writes then replaced by the
    /// new primary's data). Returns its port, or `None` if none was down.
    pub(crate) async fn rejoin(&mut self) -> Result<Option<String>, ServerError> {
        let Some(old) = self.down.take() else {
            return Ok(None);
        };
        let primary_port = self.primary().port();
        self.nodes[old].set_extra(replica_args(self.uplinks[old].port()));
        self.nodes[old].restart().await?;
        let port = self.nodes[old].port();
        let start = Instant::now();
        loop {
            if link_up(port).await {
                return Ok(Some(node(port)));
            }
            if start.elapsed() >= START_DEADLINE {
                return Err(self.fault(
                    "rejoin the old primary",
                    format!(
                        "127.0.0.1:{port} did not sync with 127.0.0.1:{primary_port} within {} ms",
                        START_DEADLINE.as_millis()
                    ),
                ));
            }
            // The poll interval of a readiness wait.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn fault(&self, op: &'static str, reason: String) -> ServerError {
        ServerError::Fault {
            what: format!(
                "the replicated topology behind 127.0.0.1:{}",
                self.front.port()
            ),
            op,
            reason,
        }
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

/// Whether the replica on `port` reports `master_link_status:up`.
async fn link_up(port: u16) -> bool {
    info_replication(port)
        .await
        .ok()
        .and_then(|info| info_field(&info, "master_link_status"))
        .is_some_and(|s| s == "up")
}

/// `INFO replication` of the node on `port`.
async fn info_replication(port: u16) -> Result<String, String> {
    command_value(port, &["INFO", "replication"]).await
}

/// The value of `field` in an INFO text.
pub(super) fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::to_string)
    })
}

pub(super) async fn command(port: u16, args: &[&str]) -> Result<(), String> {
    command_value::<redis::Value>(port, args).await.map(|_| ())
}

/// A node's name in a [`Failover`].
fn node(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// One command on a fresh short-lived connection to the node on `port`.
pub(super) async fn command_value<T: redis::FromRedisValue>(
    port: u16,
    args: &[&str],
) -> Result<T, String> {
    command_value_at(SocketAddr::from((Ipv4Addr::LOCALHOST, port)), args).await
}

/// One command on a fresh short-lived connection to the node at `addr`.
pub(super) async fn command_value_at<T: redis::FromRedisValue>(
    addr: SocketAddr,
    args: &[&str],
) -> Result<T, String> {
    let client = redis::Client::open(format!("redis://{addr}/")).map_err(|e| e.to_string())?;
    let mut con = client
        .get_multiplexed_async_connection_with_config(&probe_config(Duration::from_secs(2)))
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async::<T>(&mut con)
        .await
        .map_err(|e| format!("{addr} {}: {e}", args.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_field_reads_one_value() {
        let info =
            "# Replication\r\nrole:slave\r\nmaster_link_status:up\r\nslave_repl_offset:42\r\n";
        assert_eq!(info_field(info, "slave_repl_offset").as_deref(), Some("42"));
        assert_eq!(
            info_field(info, "master_link_status").as_deref(),
            Some("up")
        );
        assert_eq!(info_field(info, "nothing"), None);
    }
}
