//! `--server container-replicated[:N]`: a primary and N replicas as
//! containers of the local image on two private networks of ackgap's own,
//! driven with the `docker` command.
//!
//! - Both networks are `docker network create --internal` with a pinned
//!   `/24` subnet in `10.231.0.0/16` (the first free one), so no traffic
//!   leaves the machine; every container has a fixed `--ip`, and
//!   `REPLICAOF` names IPs, never names (a name lookup blocks a replica
//!   about 10 s per retry during a partition). The host reaches the
//!   containers' IPs directly.
//! - The *replication* network carries the replication links; the
//!   *control* network carries the clients (through the [`Front`], as in
//!   the process topology) and the tool's own commands, so a node cut from
//!   the replication network ([`ContainerSet::hold_links`]: `docker
//!   network disconnect`) still serves clients and still obeys.
//! - Replication needs `--protected-mode no` on the private networks.
//! - Everything carries the label `ackgap.owner=ackgap`, and the set's own
//!   `ackgap.set=TAG` ([`Tagged`], made before anything else). Drop removes
//!   every container and network with that label, after the `docker`
//!   calls still in flight ended, so a start that fails or is dropped at
//!   any moment (Ctrl-C 0.3 s in, with a `docker run` under way) leaves
//!   nothing; the `docker` children are in a process group of their own,
//!   so the terminal's SIGINT does not cut one short. A watchdog (`sh`,
//!   in a session of its own) removes them too once the tool's process is
//!   gone, so a `kill -9` of the tool leaves nothing behind after a second
//!   or so.
//!
//! # Design notes
//!
//! Holding the links disconnects the primary from the replication network. A
//! set's own label is `ackgap.set=PID-N`, and `Tagged` is made before the
//! first network.
//!
//! Power loss: the host's shim is bind-mounted into every container and the
//! cut sent with `docker kill --signal` (`cut_container`, also for the nodes
//! of a container cluster); `ContainerSet::power_on` starts the primary
//! alone first (`REPLICAOF NO ONE`: a container keeps the `--replicaof` it
//! was created with), then the replicas pointed at it.
//!
//! `ContainerCluster` (`--server container-cluster[:PxR]`, in this file) is
//! the cluster as containers on two such networks: the bus network (the
//! cluster bus and replication; each node announces that IP,
//! `--cluster-announce-ip`) and the control network (clients and commands;
//! `--cluster-announce-client-ipv4`, so `CLUSTER SLOTS`, `CLUSTER NODES` and
//! redirections name it). Its faults are the process cluster's (`failover`,
//! `rejoin`, `takeover`, `give_back`, through `cluster.rs`'s `Faults`) and
//! `primary-partition`: `cut_focus` disconnects the focus primary from the
//! bus network and waits until the cluster promoted its replica, clients
//! still reaching the cut node; `reconnect` brings it back with its IP and
//! waits until it settled as its successor's replica. The `docker run`
//! arguments of both container topologies come from one `run_args`.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::clock::{Clock, DIR_IN_CONTAINER, LIB_IN_CONTAINER};
use super::front::Front;
use super::image::image_reference;
use super::powercut::{self, PowerLoss};
use super::replicated::{command_value_at, info_field, Failover};
use super::{Instruments, Persistence, ServerError, CONTAINER_START_DEADLINE};

const LABEL: &str = "ackgap.owner=ackgap";

/// A primary and its replicas as containers.
#[derive(Debug)]
pub(crate) struct ContainerSet {
    ids: Vec<String>,
    /// Each node's IP on the control network (clients, commands).
    control_ips: Vec<Ipv4Addr>,
    /// Each node's IP on the replication network.
    repl_ips: Vec<Ipv4Addr>,
    networks: [String; 2],
    primary: usize,
    down: Option<usize>,
    /// Nodes cut from the replication network.
    cut: Vec<usize>,
    /// The libraries every node was started with (the power-loss shim,
    /// libfaketime).
    instruments: Instruments,
    /// Each node's fake clock, with [`Instruments::clock`].
    clocks: Vec<Option<Clock>>,
    /// The nodes [`ContainerSet::power_cut`] cut, not yet powered on.
    powered_off: Vec<usize>,
    front: Front,
    /// Removes the containers and networks when the set drops.
    _tagged: Tagged,
    pub(crate) image: String,
    pub(crate) started_in: Duration,
}

/// Runs `docker ARGS` to its end. The child is in a process group of its
/// own, so a Ctrl-C at the terminal (SIGINT to the foreground group) does
/// not cut it short: a `docker run` cut short may have created a container
/// whose id it never printed; finished, it is one the set knows, and its
/// label finds it in any case.
fn docker(args: &[&str]) -> Result<String, ServerError> {
    use std::os::unix::process::CommandExt;
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .map_err(|e| ServerError::Docker {
            reason: format!("running docker {}: {e}", args.join(" ")),
        })?;
    if !out.status.success() {
        return Err(ServerError::Docker {
            reason: format!(
                "docker {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `docker` calls running on the blocking pool. A future of
/// [`docker_async`] dropped (Ctrl-C during a start) leaves its call
/// running to its end; a set's removal waits for them first, so that a
/// container being created then is removed too ([`Tagged`]).
static IN_FLIGHT: (std::sync::Mutex<usize>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

/// Counts one `docker` call in flight while it lives.
struct InFlight;

impl InFlight {
    fn new() -> InFlight {
        *IN_FLIGHT.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *IN_FLIGHT.0.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        IN_FLIGHT.1.notify_all();
    }
}

/// Waits until no `docker` call is in flight, `deadline` at most.
fn wait_in_flight(deadline: Duration) {
    let guard = IN_FLIGHT.0.lock().unwrap_or_else(|e| e.into_inner());
    let _ = IN_FLIGHT.1.wait_timeout_while(guard, deadline, |n| *n > 0);
}

async fn docker_async(args: Vec<String>) -> Result<String, ServerError> {
    let counted = InFlight::new();
    tokio::task::spawn_blocking(move || {
        let _counted = counted;
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&refs)
    })
    .await
    .map_err(|e| ServerError::Docker {
        reason: format!("docker task: {e}"),
    })?
}

impl ContainerSet {
    /// Every node's libfaketime control file on the host (none without the
    /// clock).
    pub(crate) fn clock_files(&self) -> Vec<std::path::PathBuf> {
        self.clocks.iter().flatten().map(Clock::file).collect()
    }

    /// With [`Instruments::power_loss`] every node runs with the host's
    /// power-loss shim bind-mounted read-only and preloaded.
    pub(crate) async fn start(
        persistence: Persistence,
        replicas: usize,
        instruments: Instruments,
    ) -> Result<ContainerSet, ServerError> {
        let began = Instant::now();
        let (name, tag) = image_reference();
        let image = format!("{name}:{tag}");
        if docker(&["image", "inspect", &image]).is_err() {
            return Err(ServerError::ImageMissing { image });
        }
        // Made first: whatever fails or is dropped from here on, everything
        // the set made is removed.
        let tagged = Tagged::new();
        let networks = create_networks(&tagged, &["repl", "ctl"])?;
        let tag = tagged.tag.clone();
        let repl_third = networks[0].1;
        let ctl_third = networks[1].1;
        let count = 1 + replicas;
        let repl_ips: Vec<Ipv4Addr> = (0..count)
            .map(|i| Ipv4Addr::new(10, 231, repl_third, 10 + i as u8))
            .collect();
        let control_ips: Vec<Ipv4Addr> = (0..count)
            .map(|i| Ipv4Addr::new(10, 231, ctl_third, 10 + i as u8))
            .collect();
        let front = Front::start_to(SocketAddr::from((control_ips[0], 6379))).await?;
        let mut set = ContainerSet {
            ids: Vec::new(),
            control_ips,
            repl_ips,
            networks: [networks[0].0.clone(), networks[1].0.clone()],
            primary: 0,
            down: None,
            cut: Vec::new(),
            instruments,
            clocks: (0..count)
                .map(|_| instruments.clock.then(Clock::for_container).transpose())
                .collect::<Result<_, _>>()?,
            powered_off: Vec::new(),
            front,
            _tagged: tagged,
            image: image.clone(),
            started_in: Duration::ZERO,
        };
        for i in 0..count {
            let options = instrument_options(instruments, set.clocks[i].as_ref())?;
            let mut args = run_args(
                (&image, &options),
                &tag,
                (&set.networks[0], set.repl_ips[i]),
                persistence,
                &["--repl-timeout", "2", "--repl-ping-replica-period", "1"],
            );
            if i > 0 {
                args.extend([
                    "--replicaof".to_string(),
                    set.repl_ips[0].to_string(),
                    "6379".to_string(),
                ]);
            }
            let id = docker_async(args).await?;
            set.ids.push(id.clone());
            docker_async(vec![
                "network".into(),
                "connect".into(),
                "--ip".into(),
                set.control_ips[i].to_string(),
                set.networks[1].clone(),
                id,
            ])
            .await?;
        }
        for i in 0..count {
            set.wait(i, "finish loading its data", loaded).await?;
        }
        for i in 1..count {
            set.wait(i, "link up", |info| {
                info.and_then(|i| info_field(i, "master_link_status"))
                    .is_some_and(|s| s == "up")
            })
            .await?;
        }
        set.started_in = began.elapsed();
        Ok(set)
    }

    fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from((self.control_ips[i], 6379))
    }

    /// Polls node `i`'s `INFO` (its default sections: persistence's
    /// `loading` and replication's link among them) until `ready` says so.
    async fn wait(
        &self,
        i: usize,
        what: &str,
        ready: impl Fn(Option<&str>) -> bool,
    ) -> Result<(), ServerError> {
        let start = Instant::now();
        loop {
            let info: Option<String> = command_value_at(self.addr(i), &["INFO"]).await.ok();
            if ready(info.as_deref()) {
                return Ok(());
            }
            if start.elapsed() >= CONTAINER_START_DEADLINE {
                return Err(ServerError::Start {
                    what: format!("container {} at {}", short(&self.ids[i]), self.addr(i)),
                    reason: format!(
                        "did not {what} within {} ms",
                        CONTAINER_START_DEADLINE.as_millis()
                    ),
                    log_tail: String::new(),
                });
            }
            // The poll interval of a readiness wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.front.port()
    }

    pub(crate) fn replicas(&self) -> usize {
        self.ids.len() - 1
    }

    pub(crate) fn describe_nodes(&self) -> String {
        (0..self.ids.len())
            .map(|i| format!("{} {}", short(&self.ids[i]), self.control_ips[i]))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(crate) fn node_ports(&self) -> Vec<u16> {
        vec![self.front.port()]
    }

    fn replica_indexes(&self) -> Vec<usize> {
        (0..self.ids.len()).filter(|&i| i != self.primary).collect()
    }

    pub(crate) async fn pause_node(&mut self, i: usize, pause: bool) -> Result<(), ServerError> {
        let verb = if pause { "pause" } else { "unpause" };
        docker_async(vec![verb.into(), self.ids[i].clone()])
            .await
            .map(|_| ())
    }

    pub(crate) async fn pause(&mut self) -> Result<(), ServerError> {
        self.pause_node(self.primary, true).await
    }

    pub(crate) async fn resume(&mut self) -> Result<(), ServerError> {
        self.pause_node(self.primary, false).await
    }

    pub(crate) async fn kill(&mut self) -> Result<(), ServerError> {
        docker_async(vec!["kill".into(), self.ids[self.primary].clone()]).await?;
        self.front.reset();
        Ok(())
    }

    pub(crate) async fn restart(&mut self) -> Result<(), ServerError> {
        let _ = docker_async(vec!["kill".into(), self.ids[self.primary].clone()]).await;
        docker_async(vec!["start".into(), self.ids[self.primary].clone()]).await?;
        self.wait(self.primary, "finish loading its data", loaded)
            .await
    }

    pub(crate) async fn lag(&mut self) -> Result<(), ServerError> {
        for i in self.replica_indexes() {
            if Some(i) != self.down {
                self.pause_node(i, true).await?;
            }
        }
        Ok(())
    }

    pub(crate) async fn unlag(&mut self) -> Result<(), ServerError> {
        for i in self.replica_indexes() {
            if Some(i) != self.down {
                // Unpausing a running container fails: ignore that.
                let _ = self.pause_node(i, false).await;
            }
        }
        Ok(())
    }

    /// Cuts the primary from the replication network: the replicas see
    /// the link down after `--repl-timeout`; clients still reach it.
    pub(crate) async fn hold_links(&mut self) -> Result<(), ServerError> {
        let p = self.primary;
        docker_async(vec![
            "network".into(),
            "disconnect".into(),
            self.networks[0].clone(),
            self.ids[p].clone(),
        ])
        .await?;
        self.cut.push(p);
        Ok(())
    }

    /// Reconnects every cut node to the replication network with its IP.
    pub(crate) async fn release_links(&mut self) -> Result<(), ServerError> {
        for i in std::mem::take(&mut self.cut) {
            docker_async(vec![
                "network".into(),
                "connect".into(),
                "--ip".into(),
                self.repl_ips[i].to_string(),
                self.networks[0].clone(),
                self.ids[i].clone(),
            ])
            .await?;
        }
        Ok(())
    }

    pub(crate) async fn failover(&mut self) -> Result<Failover, ServerError> {
        if self.down.is_some() {
            return Err(ServerError::Docker {
                reason: "fail over: the old primary has not rejoined yet".into(),
            });
        }
        let old = self.primary;
        let primary_offset = command_value_at::<String>(self.addr(old), &["INFO", "replication"])
            .await
            .ok()
            .and_then(|i| info_field(&i, "master_repl_offset"))
            .and_then(|v| v.parse::<u64>().ok());
        docker_async(vec!["kill".into(), self.ids[old].clone()]).await?;
        self.front.reset();
        self.unlag().await?;
        let mut offsets = Vec::new();
        let mut best: Option<(u64, usize)> = None;
        for i in self.replica_indexes() {
            let offset = command_value_at::<String>(self.addr(i), &["INFO", "replication"])
                .await
                .ok()
                .and_then(|info| info_field(&info, "slave_repl_offset"))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            offsets.push((self.control_ips[i].to_string(), offset));
            if best.is_none_or(|(b, _)| offset > b) {
                best = Some((offset, i));
            }
        }
        let Some((promoted_offset, new)) = best else {
            return Err(ServerError::Docker {
                reason: "fail over: no replica to promote".into(),
            });
        };
        command_value_at::<redis::Value>(self.addr(new), &["REPLICAOF", "NO", "ONE"])
            .await
            .map_err(|reason| ServerError::Docker { reason })?;
        let mut repointed = Vec::new();
        for i in self.replica_indexes() {
            if i == new {
                continue;
            }
            command_value_at::<redis::Value>(
                self.addr(i),
                &["REPLICAOF", &self.repl_ips[new].to_string(), "6379"],
            )
            .await
            .map_err(|reason| ServerError::Docker { reason })?;
            repointed.push(self.control_ips[i].to_string());
        }
        self.primary = new;
        self.down = Some(old);
        self.front.repoint_to(self.addr(new));
        Ok(Failover {
            killed: self.control_ips[old].to_string(),
            promoted: self.control_ips[new].to_string(),
            offsets,
            repointed,
            unreplicated_bytes: primary_offset.map(|p| p.saturating_sub(promoted_offset)),
            took_ms: None,
            killed_id: None,
            promoted_id: None,
        })
    }

    pub(crate) async fn rejoin(&mut self) -> Result<Option<String>, ServerError> {
        let Some(old) = self.down.take() else {
            return Ok(None);
        };
        self.release_links().await?;
        docker_async(vec!["start".into(), self.ids[old].clone()]).await?;
        self.wait(old, "finish loading its data", loaded).await?;
        command_value_at::<redis::Value>(
            self.addr(old),
            &[
                "REPLICAOF",
                &self.repl_ips[self.primary].to_string(),
                "6379",
            ],
        )
        .await
        .map_err(|reason| ServerError::Docker { reason })?;
        self.wait(old, "link up", |info| {
            info.and_then(|i| info_field(i, "master_link_status"))
                .is_some_and(|s| s == "up")
        })
        .await?;
        Ok(Some(self.control_ips[old].to_string()))
    }

    /// The libraries every node was started with.
    pub(crate) fn instruments(&self) -> Instruments {
        self.instruments
    }

    /// Jumps the clock of every replica by `delta_ms` (the primary's
    /// stays); answers each replica's control IP (as its failover names
    /// nodes) and new offset. Needs [`Instruments::clock`].
    pub(crate) fn jump_replica_clocks(
        &mut self,
        delta_ms: i64,
    ) -> Result<Vec<(String, i64)>, ServerError> {
        let mut out = Vec::new();
        for i in self.replica_indexes() {
            let what = format!("container {} at {}", short(&self.ids[i]), self.addr(i));
            let offset = Clock::jump_of(self.clocks[i].as_mut(), what, delta_ms)?;
            out.push((self.control_ips[i].to_string(), offset));
        }
        Ok(out)
    }

    /// Moves every node's clock back to the real one; answers each moved
    /// node's address and the jump (the negated offset it had).
    pub(crate) fn align_clocks(&mut self) -> Result<Vec<(String, i64)>, ServerError> {
        let mut out = Vec::new();
        for i in 0..self.ids.len() {
            let Some(clock) = self.clocks[i].as_mut() else {
                continue;
            };
            let offset = clock.offset_ms();
            if offset != 0 {
                clock.jump(-offset)?;
                out.push((self.control_ips[i].to_string(), -offset));
            }
        }
        Ok(out)
    }

    /// Power loss of every running node at once, the primary first: the
    /// shim's cut signal through `docker kill --signal`, each container's
    /// exit awaited and checked (status [`powercut::STATUS_CUT`] and the
    /// shim's line in its log). The containers stay stopped, each `/data`
    /// cut, until [`ContainerSet::power_on`]. Answers what the cut
    /// dropped, summed over the nodes.
    pub(crate) async fn power_cut(&mut self) -> Result<PowerLoss, ServerError> {
        const OP: &str = "cut the power of";
        if !self.instruments.power_loss {
            return Err(self.fault_error(OP, powercut::NOT_LOADED.into()));
        }
        let mut order = vec![self.primary];
        order.extend(self.replica_indexes());
        order.retain(|&i| Some(i) != self.down);
        let mut total = PowerLoss::default();
        for &i in &order {
            total += self.cut_node(i).await?;
            self.powered_off.push(i);
        }
        self.front.reset();
        Ok(total)
    }

    /// Node `i` cut ([`cut_container`]).
    async fn cut_node(&self, i: usize) -> Result<PowerLoss, ServerError> {
        cut_container(&self.ids[i])
            .await
            .map_err(|why| self.fault_error("cut the power of", why))
    }

    /// Every node [`ContainerSet::power_cut`] cut started again on its own
    /// `/data`. The primary first and alone, then told `REPLICAOF NO ONE`:
    /// a container's command line keeps the `--replicaof` it was created
    /// with, so after a failover the primary would otherwise start as a
    /// replica of a node that is no longer primary. Then each replica,
    /// pointed at the primary (it resyncs from it); returns once every
    /// replica's link is up.
    pub(crate) async fn power_on(&mut self) -> Result<(), ServerError> {
        let off = std::mem::take(&mut self.powered_off);
        if off.is_empty() {
            return Err(self.fault_error("power on", "no power cut to undo".into()));
        }
        let primary = self.primary;
        let replicas: Vec<usize> = off.iter().copied().filter(|&i| i != primary).collect();
        if off.contains(&primary) {
            docker_async(vec!["start".into(), self.ids[primary].clone()]).await?;
            self.wait(primary, "finish loading its data", loaded)
                .await?;
            command_value_at::<redis::Value>(self.addr(primary), &["REPLICAOF", "NO", "ONE"])
                .await
                .map_err(|reason| ServerError::Docker { reason })?;
        }
        let to = self.repl_ips[primary].to_string();
        for &i in &replicas {
            docker_async(vec!["start".into(), self.ids[i].clone()]).await?;
            self.wait(i, "finish loading its data", loaded).await?;
            command_value_at::<redis::Value>(self.addr(i), &["REPLICAOF", &to, "6379"])
                .await
                .map_err(|reason| ServerError::Docker { reason })?;
        }
        for &i in &replicas {
            self.wait(i, "link up", |info| {
                info.and_then(|i| info_field(i, "master_link_status"))
                    .is_some_and(|s| s == "up")
            })
            .await?;
        }
        Ok(())
    }

    fn fault_error(&self, op: &'static str, reason: String) -> ServerError {
        ServerError::Fault {
            what: format!("the container-replicated set ({})", self.describe_nodes()),
            op,
            reason,
        }
    }

    pub(crate) async fn stop(self) -> Result<(), ServerError> {
        // Dropping `tagged` removes everything.
        Ok(())
    }
}

/// Whether an `INFO` answer says the node has its data loaded: `INFO` is
/// answered while a node loads its AOF or RDB, but every command a heal or a
/// client sends then gets `LOADING`, so a node that merely answers is not
/// ready.
fn loaded(info: Option<&str>) -> bool {
    info.and_then(|i| info_field(i, "loading"))
        .is_some_and(|l| l == "0")
}

/// The `docker run` options that load what `instruments` asks for: with
/// [`Instruments::power_loss`], the host's power-loss shim bind-mounted
/// read-only and preloaded, cutting under `/data`; with `clock` (the
/// node's own, for [`Instruments::clock`]), the host's libfaketime and the
/// clock's control directory, bind-mounted read-only, the library
/// preloaded too.
fn instrument_options(
    instruments: Instruments,
    clock: Option<&Clock>,
) -> Result<Vec<String>, ServerError> {
    let mut options = Vec::new();
    let mut preload = Vec::new();
    if instruments.power_loss {
        let path = powercut::shim_path()?;
        options.extend([
            "--volume".to_string(),
            format!("{}:{}:ro", path.display(), powercut::SHIM_IN_CONTAINER),
            "--env".to_string(),
            "ACKGAP_POWERCUT_DIR=/data".to_string(),
        ]);
        preload.push(powercut::SHIM_IN_CONTAINER);
    }
    if let Some(clock) = clock {
        options.extend([
            "--volume".to_string(),
            format!("{}:{}:ro", clock.library().display(), LIB_IN_CONTAINER),
            "--volume".to_string(),
            format!("{}:{}:ro", clock.dir().display(), DIR_IN_CONTAINER),
        ]);
        for (name, value) in clock.container_env() {
            options.extend(["--env".to_string(), format!("{name}={value}")]);
        }
        preload.push(LIB_IN_CONTAINER);
    }
    if !preload.is_empty() {
        options.extend([
            "--env".to_string(),
            format!("LD_PRELOAD={}", preload.join(":")),
        ]);
    }
    Ok(options)
}

/// How long a container may take to exit after the cut signal.
const CUT_DEADLINE: Duration = Duration::from_secs(10);

/// Container `id` cut by the power-loss shim: its cut signal through
/// `docker kill --signal`, its exit within [`CUT_DEADLINE`] (else killed,
/// and an error), its status and its log's account of the cut
/// ([`powercut::read_cut`]). The container stays stopped, its `/data` cut,
/// until `docker start`.
async fn cut_container(id: &str) -> Result<PowerLoss, String> {
    let id = id.to_string();
    let signal = powercut::cut_signal().to_string();
    docker_async(vec!["kill".into(), "--signal".into(), signal, id.clone()])
        .await
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let status = loop {
        let state = docker_async(vec![
            "inspect".into(),
            "--format".into(),
            "{{.State.Running}} {{.State.ExitCode}}".into(),
            id.clone(),
        ])
        .await
        .map_err(|e| e.to_string())?;
        match state.split_once(' ') {
            Some(("false", code)) => break code.parse::<i32>().ok(),
            _ if start.elapsed() >= CUT_DEADLINE => {
                let _ = docker_async(vec!["kill".into(), id.clone()]).await;
                return Err(format!(
                    "{} still ran {} ms after the cut signal; killed it",
                    short(&id),
                    CUT_DEADLINE.as_millis()
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    let tail = docker_logs(&id).await;
    powercut::read_cut(status, &tail).map_err(|why| {
        format!(
            "{}: {why} (exit status {status:?}); the log ends:\n{tail}",
            short(&id)
        )
    })
}

/// The last 40 lines a container wrote, stdout and stderr (the server logs
/// to stdout, the shim to stderr), or why they could not be read.
async fn docker_logs(id: &str) -> String {
    let id = id.to_string();
    tokio::task::spawn_blocking(move || {
        match Command::new("docker")
            .args(["logs", "--tail", "40", &id])
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("(docker logs {id}: {e})"),
        }
    })
    .await
    .unwrap_or_else(|e| format!("(docker logs task: {e})"))
}

/// Creates one `--internal` network per role, each on the first free /24
/// of `10.231.0.0/16`: `(name, third octet)`.
fn create_networks(tagged: &Tagged, roles: &[&str]) -> Result<Vec<(String, u8)>, ServerError> {
    let (tag, set_label) = (&tagged.tag, tagged.label());
    let mut networks: Vec<(String, u8)> = Vec::new();
    for role in roles {
        let net = format!("ackgap-{role}-{tag}");
        let mut made = None;
        for third in 0..=255u8 {
            if networks.iter().any(|(_, t)| *t == third) {
                continue;
            }
            let subnet = format!("10.231.{third}.0/24");
            if docker(&[
                "network",
                "create",
                "--internal",
                "--subnet",
                &subnet,
                "--label",
                LABEL,
                "--label",
                &set_label,
                &net,
            ])
            .is_ok()
            {
                made = Some(third);
                break;
            }
        }
        let Some(third) = made else {
            // The networks made so far go with `tagged`.
            return Err(ServerError::Docker {
                reason: format!("no free /24 in 10.231.0.0/16 for network {net}"),
            });
        };
        networks.push((net, third));
    }
    Ok(networks)
}

/// `docker run -d` of one node of set `tag` on `network` at its IP: the
/// labels, the image, and the server arguments every container node runs
/// with (port 6379 on every interface, no protected mode, no RDB, data in
/// `/data`, diskless replication at once), then `persistence`'s and
/// `extra`.
/// `docker run` of `image` with the docker options `options` before it.
fn run_args(
    (image, options): (&str, &[String]),
    tag: &str,
    (network, ip): (&str, Ipv4Addr),
    persistence: Persistence,
    extra: &[&str],
) -> Vec<String> {
    let set = format!("ackgap.set={tag}");
    let ip = ip.to_string();
    let mut args: Vec<String> = [
        "run",
        "-d",
        "--label",
        LABEL,
        "--label",
        &set,
        "--network",
        network,
        "--ip",
        &ip,
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(options.iter().cloned())
    .collect();
    args.extend(
        [
            image,
            "--port",
            "6379",
            "--bind",
            "0.0.0.0",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--dir",
            "/data",
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args.extend(persistence.server_args().iter().map(|s| s.to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `container-cluster[:PxR]`: a Valkey Cluster as containers on two
/// `--internal` networks of its own (pinned subnets, fixed IPs), built
/// from the client side like the process cluster. The *bus* network
/// carries the cluster bus and the replication links (each node
/// announces its bus IP, `--cluster-announce-ip`); the *control* network
/// carries the clients and the tool's commands (each node announces its
/// control IP to clients, `--cluster-announce-client-ipv4`, in `CLUSTER
/// SLOTS`, `CLUSTER NODES` and redirections). So a primary cut from the
/// bus network ([`ContainerCluster::cut_focus`]) is failed over by the
/// cluster while clients still reach it. Removed on drop, and by the
/// watchdog after a `kill -9`.
#[derive(Debug)]
pub(crate) struct ContainerCluster {
    nodes: ContainerNodes,
    bus_ips: Vec<Ipv4Addr>,
    /// The bus network, then the control network.
    networks: [String; 2],
    /// Removes the containers and networks when the cluster drops.
    _tagged: Tagged,
    /// The node cut from the bus network, not yet reconnected, and
    /// whether the cluster promoted a replica in its place.
    cut: Option<(usize, bool)>,
    faults: super::cluster::Faults,
    /// What every node was started with.
    instruments: Instruments,
    pub(crate) shape: (usize, usize),
    pub(crate) image: String,
    pub(crate) started_in: Duration,
}

/// A container cluster's nodes as its faults see them: killed with
/// `docker kill` (SIGKILL), started again with `docker start` (the
/// container keeps its `/data`, so its `nodes.conf`, and its IPs).
#[derive(Debug)]
struct ContainerNodes {
    ids: Vec<String>,
    /// Each node's IP on the control network.
    ips: Vec<Ipv4Addr>,
    /// Nodes killed and not started again.
    stopped: Vec<bool>,
    /// Each node's fake clock, with [`Instruments::clock`].
    clocks: Vec<Option<Clock>>,
}

impl super::cluster::Nodes for ContainerNodes {
    fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from((self.ips[i], 6379))
    }

    fn count(&self) -> usize {
        self.ids.len()
    }

    fn is_up(&self, i: usize) -> bool {
        !self.stopped[i]
    }

    async fn kill(&mut self, i: usize) -> Result<(), ServerError> {
        docker_async(vec!["kill".into(), self.ids[i].clone()]).await?;
        self.stopped[i] = true;
        Ok(())
    }

    async fn restart(&mut self, i: usize) -> Result<(), ServerError> {
        // Killing a stopped container fails: ignore that.
        let _ = docker_async(vec!["kill".into(), self.ids[i].clone()]).await;
        docker_async(vec!["start".into(), self.ids[i].clone()]).await?;
        self.stopped[i] = false;
        wait_for_ping_at(self.addr(i)).await
    }

    async fn power_cut(&mut self, i: usize) -> Result<PowerLoss, ServerError> {
        // Down from here on, whatever the cut answers: the power-on kills
        // it first if it still runs.
        self.stopped[i] = true;
        cut_container(&self.ids[i])
            .await
            .map_err(|reason| ServerError::Fault {
                what: format!("the cluster container at {}", self.addr(i)),
                op: "cut the power of",
                reason,
            })
    }

    fn jump_clock(&mut self, i: usize, delta_ms: i64) -> Result<i64, ServerError> {
        let what = format!("the cluster container at {}", self.addr(i));
        Clock::jump_of(self.clocks[i].as_mut(), what, delta_ms)
    }

    fn clock_offset_ms(&self, i: usize) -> Option<i64> {
        self.clocks[i].as_ref().map(Clock::offset_ms)
    }
}

/// Polls PING at `addr` until it answers, past [`CONTAINER_START_DEADLINE`]
/// an error.
async fn wait_for_ping_at(addr: SocketAddr) -> Result<(), ServerError> {
    let start = Instant::now();
    while command_value_at::<String>(addr, &["PING"]).await.is_err() {
        if start.elapsed() >= CONTAINER_START_DEADLINE {
            return Err(ServerError::Start {
                what: format!("a cluster container at {addr}"),
                reason: format!(
                    "did not answer PING within {} ms",
                    CONTAINER_START_DEADLINE.as_millis()
                ),
                log_tail: String::new(),
            });
        }
        // The poll interval of a readiness wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

impl ContainerCluster {
    /// Every node's libfaketime control file on the host (none without the
    /// clock).
    pub(crate) fn clock_files(&self) -> Vec<std::path::PathBuf> {
        self.nodes
            .clocks
            .iter()
            .flatten()
            .map(Clock::file)
            .collect()
    }

    /// With [`Instruments::power_loss`] every node runs with the host's
    /// power-loss shim bind-mounted read-only and preloaded.
    pub(crate) async fn start(
        persistence: Persistence,
        primaries: usize,
        replicas: usize,
        instruments: Instruments,
    ) -> Result<ContainerCluster, ServerError> {
        let began = Instant::now();
        let (name, tag) = image_reference();
        let image = format!("{name}:{tag}");
        if docker(&["image", "inspect", &image]).is_err() {
            return Err(ServerError::ImageMissing { image });
        }
        let tagged = Tagged::new();
        let networks = create_networks(&tagged, &["bus", "ctl"])?;
        let tag = tagged.tag.clone();
        let count = primaries * (1 + replicas);
        let ips = |third: u8| -> Vec<Ipv4Addr> {
            (0..count)
                .map(|i| Ipv4Addr::new(10, 231, third, 10 + i as u8))
                .collect()
        };
        let networks_named = [networks[0].0.clone(), networks[1].0.clone()];
        let mut set = ContainerCluster {
            nodes: ContainerNodes {
                ids: Vec::new(),
                ips: ips(networks[1].1),
                stopped: vec![false; count],
                clocks: (0..count)
                    .map(|_| instruments.clock.then(Clock::for_container).transpose())
                    .collect::<Result<_, _>>()?,
            },
            bus_ips: ips(networks[0].1),
            _tagged: tagged,
            networks: networks_named,
            cut: None,
            faults: super::cluster::Faults::new(
                primaries,
                replicas,
                format!(
                    "the cluster of {primaries}x{replicas} containers on {}",
                    networks[0].0
                ),
            ),
            instruments,
            shape: (primaries, replicas),
            image: image.clone(),
            started_in: Duration::ZERO,
        };
        for i in 0..count {
            let bus_ip = set.bus_ips[i].to_string();
            let ctl_ip = set.nodes.ips[i].to_string();
            let options = instrument_options(instruments, set.nodes.clocks[i].as_ref())?;
            let args = run_args(
                (&image, &options),
                &tag,
                (&set.networks[0], set.bus_ips[i]),
                persistence,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "/data/nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    "--cluster-announce-ip",
                    &bus_ip,
                    "--cluster-announce-client-ipv4",
                    &ctl_ip,
                ],
            );
            let id = docker_async(args).await?;
            set.nodes.ids.push(id.clone());
            docker_async(vec![
                "network".into(),
                "connect".into(),
                "--ip".into(),
                ctl_ip,
                set.networks[1].clone(),
                id,
            ])
            .await?;
        }
        use super::cluster::Nodes as _;
        let nodes: Vec<super::cluster::Node> = (0..count)
            .map(|i| super::cluster::Node {
                addr: set.nodes.addr(i),
                meet_ip: set.bus_ips[i].into(),
                bus: 16379,
            })
            .collect();
        for node in &nodes {
            wait_for_ping_at(node.addr).await?;
        }
        super::cluster::build_cluster(&nodes, primaries, replicas)
            .await
            .map_err(|reason| ServerError::Start {
                what: format!(
                    "a cluster of {primaries}x{replicas} containers on {}",
                    set.networks[0]
                ),
                reason,
                log_tail: String::new(),
            })?;
        set.started_in = began.elapsed();
        Ok(set)
    }

    /// The first node's address on the control network: the cluster
    /// client's seed.
    pub(crate) fn addr(&self) -> SocketAddr {
        use super::cluster::Nodes as _;
        self.nodes.addr(0)
    }

    /// Every node's address on the control network, the primaries first.
    pub(crate) fn addrs(&self) -> Vec<SocketAddr> {
        use super::cluster::Nodes as _;
        (0..self.nodes.count())
            .map(|i| self.nodes.addr(i))
            .collect()
    }

    pub(crate) fn describe_nodes(&self) -> String {
        self.nodes
            .ids
            .iter()
            .zip(&self.nodes.ips)
            .map(|(id, ip)| format!("{} {ip}", short(id)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Aims the faults at the primary of `key`'s slot.
    pub(crate) fn focus(&mut self, key: &str) {
        self.faults.focus(key);
    }

    /// The libraries every node was started with.
    pub(crate) fn instruments(&self) -> Instruments {
        self.instruments
    }

    /// Power loss of every running node at once, each through the shim's
    /// cut signal (`docker kill --signal`); see
    /// [`super::cluster::Faults::power_cut`].
    pub(crate) async fn power_cut(&mut self) -> Result<PowerLoss, ServerError> {
        if !self.instruments.power_loss {
            return Err(ServerError::Fault {
                what: format!("the container cluster ({})", self.describe_nodes()),
                op: "cut the power of",
                reason: powercut::NOT_LOADED.into(),
            });
        }
        self.faults.power_cut(&mut self.nodes).await
    }

    /// Every node [`ContainerCluster::power_cut`] cut started again
    /// (`docker start`, its `/data` as the cut left it); see
    /// [`super::cluster::Faults::power_on`].
    pub(crate) async fn power_on(&mut self) -> Result<(), ServerError> {
        self.faults.power_on(&mut self.nodes).await
    }

    /// `docker kill` of the focus slot's primary, then a wait for the
    /// cluster's own failover (see [`super::cluster::Faults::failover`]).
    pub(crate) async fn failover(&mut self) -> Result<Failover, ServerError> {
        self.faults.failover(&mut self.nodes).await
    }

    /// `docker start` of the killed primary: it comes back on its own
    /// `nodes.conf` as a replica of the node promoted in its place.
    pub(crate) async fn rejoin(&mut self) -> Result<Option<String>, ServerError> {
        self.faults.rejoin(&mut self.nodes).await
    }

    /// `CLUSTER FAILOVER TAKEOVER` on a replica of the focus slot's
    /// primary.
    pub(crate) async fn takeover(&mut self) -> Result<super::cluster::Takeover, ServerError> {
        self.faults.takeover(&self.nodes).await
    }

    /// See [`super::cluster::Faults::jump_primary_clock`].
    pub(crate) async fn jump_primary_clock(
        &mut self,
        delta_ms: i64,
    ) -> Result<(String, i64), ServerError> {
        self.faults
            .jump_primary_clock(&mut self.nodes, delta_ms)
            .await
    }

    /// See [`super::cluster::Faults::jump_replica_clocks`].
    pub(crate) async fn jump_replica_clocks(
        &mut self,
        delta_ms: i64,
    ) -> Result<Vec<(String, i64)>, ServerError> {
        self.faults
            .jump_replica_clocks(&mut self.nodes, delta_ms)
            .await
    }

    /// See [`super::cluster::Faults::align_clocks`].
    pub(crate) fn align_clocks(&mut self) -> Result<Vec<(String, i64)>, ServerError> {
        self.faults.align_clocks(&mut self.nodes)
    }

    /// See [`super::cluster::Faults::migrate_slot`].
    pub(crate) async fn migrate_slot(
        &mut self,
        kind: super::cluster::MigrationKind,
    ) -> Result<super::cluster::Migration, ServerError> {
        self.faults.migrate_slot(&self.nodes, kind).await
    }

    /// Undoes [`ContainerCluster::takeover`].
    pub(crate) async fn give_back(&mut self) -> Result<Option<String>, ServerError> {
        self.faults.give_back(&self.nodes).await
    }

    /// Cuts the focus slot's primary from the bus network (`docker
    /// network disconnect`) and waits until the cluster promoted one of
    /// its replicas (the others stop hearing it; after
    /// `cluster-node-timeout` a replica is elected). Clients still reach
    /// the cut node on the control network, and it acknowledges their
    /// writes until it notices it lost the majority: those writes are on
    /// no replica. Without a promotion in time the node is reconnected
    /// and the cut fails.
    pub(crate) async fn cut_focus(&mut self) -> Result<Cut, ServerError> {
        use super::cluster::Nodes as _;
        if self.cut.is_some() {
            return Err(ServerError::Docker {
                reason: "cut the primary from the bus: an earlier cut is not healed yet".into(),
            });
        }
        let (index, replicas) = self.faults.focus_primary(&self.nodes).await?;
        if replicas.is_empty() {
            return Err(ServerError::Docker {
                reason: format!(
                    "cut the primary from the bus: {} has no replica",
                    self.nodes.addr(index)
                ),
            });
        }
        let began = Instant::now();
        docker_async(vec![
            "network".into(),
            "disconnect".into(),
            self.networks[0].clone(),
            self.nodes.ids[index].clone(),
        ])
        .await?;
        self.cut = Some((index, false));
        match self.faults.promoted(&replicas).await {
            Ok(promoted) => {
                self.cut = Some((index, true));
                Ok(Cut {
                    node: self.nodes.addr(index).to_string(),
                    promoted: promoted.to_string(),
                    took_ms: began.elapsed().as_millis() as u64,
                })
            }
            Err(e) => {
                self.reconnect().await?;
                Err(e)
            }
        }
    }

    /// Reconnects the node [`ContainerCluster::cut_focus`] cut, with its
    /// bus IP, and waits until it settled: a replica of the node promoted
    /// meanwhile (its writes since the cut discarded by the sync), or the
    /// primary still. `None` when no node is cut.
    pub(crate) async fn reconnect(&mut self) -> Result<Option<Reconnected>, ServerError> {
        use super::cluster::Nodes as _;
        let Some((index, replaced)) = self.cut.take() else {
            return Ok(None);
        };
        docker_async(vec![
            "network".into(),
            "connect".into(),
            "--ip".into(),
            self.bus_ips[index].to_string(),
            self.networks[0].clone(),
            self.nodes.ids[index].clone(),
        ])
        .await?;
        let addr = self.nodes.addr(index);
        let (role, primary_id) = self.faults.settled(addr, replaced).await?;
        Ok(Some(Reconnected {
            node: addr.to_string(),
            role,
            primary_id,
        }))
    }
}

/// What cutting a cluster's primary from its bus network did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    /// The cut primary's address on the control network.
    pub node: String,
    /// The replica the cluster promoted in its place.
    pub promoted: String,
    /// How long from the cut until the replica reported itself primary.
    pub took_ms: u64,
}

/// A node cut from a cluster's bus network and reconnected: how it came
/// back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reconnected {
    /// Its address on the control network.
    pub node: String,
    /// `slave` (the cluster promoted another node while it was cut) or
    /// `master` (none was).
    pub role: String,
    /// A replica's primary's cluster node id.
    pub primary_id: Option<String>,
}

/// Everything one set makes carries the label `ackgap.set=TAG`: its
/// containers and its networks. Made before the first of them, so a start
/// that fails or is dropped (Ctrl-C) at any point removes what it made:
/// dropped, it waits for the `docker` calls still in flight (a `docker
/// run` whose future was dropped goes on to create its container), then
/// removes every container and network with the label, then stops the
/// watchdog, which does the same after a `kill -9` of the tool.
#[derive(Debug)]
struct Tagged {
    tag: String,
    watchdog: Option<std::process::Child>,
}

impl Tagged {
    fn new() -> Tagged {
        let tag = format!("{}-{}", std::process::id(), next_id());
        let watchdog = spawn_watchdog(&tag);
        Tagged { tag, watchdog }
    }

    /// The label of this set's containers and networks.
    fn label(&self) -> String {
        format!("ackgap.set={}", self.tag)
    }
}

impl Drop for Tagged {
    fn drop(&mut self) {
        // A `docker run` takes well under this; one still running past it
        // is left to the watchdog.
        wait_in_flight(Duration::from_secs(30));
        remove_tagged(&self.label());
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// Removes the containers labelled `label`, then its networks.
fn remove_tagged(label: &str) {
    let filter = format!("label={label}");
    let names: Vec<String> = docker(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"])
        .map(|out| {
            out.lines()
                .map(|l| l.trim().to_owned())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if let Ok(ids) = docker(&["ps", "-aq", "--filter", &filter]) {
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f", "-v"];
            args.extend(ids);
            let _ = docker(&args);
        }
    }
    if let Ok(networks) = docker(&["network", "ls", "-q", "--filter", &filter]) {
        for net in networks.split_whitespace() {
            remove_network(net, &names);
        }
    }
}

/// `docker network rm` of `net`, tried for up to 3 s. Docker 20.10 can keep
/// a removed container's endpoint on a network ("has active endpoints",
/// with no container listed; a test run left a cluster's bus network so,
/// until the engine restarted): between tries, the set's containers
/// (`names`, removed or not) are disconnected from it by force, which
/// clears such an endpoint.
fn remove_network(net: &str, names: &[String]) {
    for _ in 0..15 {
        if docker(&["network", "rm", net]).is_ok() || docker(&["network", "inspect", net]).is_err()
        {
            return;
        }
        for name in names {
            let _ = docker(&["network", "disconnect", "-f", net, name]);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A `sh` in a session of its own that waits for this process to end, then
/// removes the set's containers and networks (by the label
/// `ackgap.set=TAG`): the cleanup a `kill -9` of the tool skips.
fn spawn_watchdog(tag: &str) -> Option<std::process::Child> {
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; \
         ids=$(docker ps -aq --filter label=ackgap.set={tag}); \
         names=$(docker ps -a --filter label=ackgap.set={tag} --format '{{{{.Names}}}}'); \
         [ -n \"$ids\" ] && docker rm -f -v $ids >/dev/null 2>&1; \
         for n in $(docker network ls -q --filter label=ackgap.set={tag}); do \
           for i in 1 2 3 4 5 6 7 8 9 10; do \
           docker network rm $n >/dev/null 2>&1 && break; \
           docker network inspect $n >/dev/null 2>&1 || break; \
           for c in $names; do docker network disconnect -f $n $c >/dev/null 2>&1; done; \
           sleep 0.3; done; done; exit 0",
        pid = std::process::id(),
    );
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()
}
