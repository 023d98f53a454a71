//! The fault kinds as the chaos runner uses them: which servers run each
//! (and, where one does not, why), how long its window is drawn, and the
//! `--faults` lists. The kinds themselves, what each hits and its row
//! (heals, kills, loses writes, how it is drawn) live on the ground floor,
//! `crate::fault`, re-exported here. The nemesis (`runner/nemesis.rs`)
//! holds each kind's inject and heal, in matches without a wildcard arm: a
//! kind added there does not compile until it has both.
//!
//! The groups `--faults` takes, and what `all` means, are derived from the
//! kinds' own requirements on the server at hand ([`Shape`]): `all` is
//! every kind the server supports, `worker`, `network` and `server` the
//! supported kinds of that target, `replication` and `cluster` the
//! supported kinds a single server does not run. Nothing lists the kinds by
//! hand: [`FaultKind::all`] enumerates the variants (strum).
//!
//! # Design notes
//!
//! A `Shape` is the server's topology and the libraries loaded into it:
//! what a server is before it starts, and [`Shape::supports`] asks its
//! backend whether it runs a kind ([`Topology::supports`]). `--faults` parses into a `FaultSpec` (the list
//! as written) that `resolve`s on the server's `Shape` before it starts.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Serialize};

pub use crate::fault::{FaultKind, FaultKindIter, Target};
pub use crate::server::Topology;
use crate::server::{Instruments, Server, ServerSpec};

/// What a server is, as far as the faults care: what the tool may do to it
/// and how many nodes stand behind its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Its nodes.
    pub topology: Topology,
    /// The libraries loaded into it at start.
    pub instruments: Instruments,
}

impl Shape {
    /// A single process server with nothing loaded: what a library caller
    /// that names no server means.
    pub const PROCESS: Shape = Shape {
        topology: Topology::Single { container: false },
        instruments: Instruments {
            power_loss: false,
            clock: false,
        },
    };

    /// The shape `spec` starts, with `instruments` loaded.
    pub fn of_spec(spec: &ServerSpec, instruments: Instruments) -> Shape {
        let topology = match spec {
            ServerSpec::Process(_) => Topology::Single { container: false },
            ServerSpec::Container => Topology::Single { container: true },
            ServerSpec::Replicated { replicas, .. } => Topology::Replicated {
                replicas: *replicas,
                containers: false,
            },
            ServerSpec::ContainerReplicated { replicas } => Topology::Replicated {
                replicas: *replicas,
                containers: true,
            },
            ServerSpec::Cluster {
                primaries,
                replicas,
                ..
            } => Topology::Cluster {
                primaries: *primaries,
                replicas: *replicas,
                containers: false,
            },
            ServerSpec::ContainerCluster {
                primaries,
                replicas,
            } => Topology::Cluster {
                primaries: *primaries,
                replicas: *replicas,
                containers: true,
            },
            ServerSpec::Url(_) => Topology::Url { cluster: false },
        };
        Shape {
            topology,
            instruments,
        }
    }

    /// The shape of a running server: its topology as the server tells
    /// it ([`Server::topology`]), and what it loaded.
    pub fn of(server: &Server) -> Shape {
        Shape {
            topology: server.topology(),
            instruments: server.instruments(),
        }
    }

    /// How a message names it: `a single process`, `--server
    /// replicated:2`, …
    pub fn describe(&self) -> String {
        match self.topology {
            Topology::Single { container: false } => "--server process".into(),
            Topology::Single { container: true } => "--server container".into(),
            Topology::Replicated {
                replicas,
                containers,
            } => format!(
                "--server {}replicated:{replicas}",
                if containers { "container-" } else { "" }
            ),
            Topology::Cluster {
                primaries,
                replicas,
                containers,
            } => format!(
                "--server {}cluster:{primaries}x{replicas}",
                if containers { "container-" } else { "" }
            ),
            Topology::Url { cluster: false } => "a server given as a URL".into(),
            Topology::Url { cluster: true } => "a cluster given as a URL".into(),
        }
    }

    /// Whether this server runs fault `kind`; if not, why (a phrase that
    /// follows "fault NAME"): the backend's own answer
    /// ([`Topology::supports`]).
    pub fn supports(&self, kind: FaultKind) -> Result<(), String> {
        self.topology.supports(kind, self.instruments)
    }

    fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster { .. })
    }

    fn is_replicated(&self) -> bool {
        matches!(self.topology, Topology::Replicated { .. })
    }
}

/// How long a kind's window is drawn: the chaos runner's side of
/// [`FaultKind`] (its row is `crate::fault`'s, whether a server runs it
/// the server's: [`Shape::supports`]).
impl FaultKind {
    /// The length of one fault's window (ms), drawn for leases of
    /// `lease_ms`: a pause, a partition, a server's downtime, a delay; 0
    /// for instant faults.
    pub(crate) fn draw_window_ms(self, rng: &mut impl Rng, lease_ms: u64) -> u64 {
        let lease = lease_ms;
        match self {
            // Past the deadline and the reaper, into the next holder's
            // work: a stale ack then meets a live newer lease.
            FaultKind::StalePause | FaultKind::HeartbeatStop => lease + lease / 2,
            FaultKind::DelayReply => lease + lease / 2,
            FaultKind::Partition => rng.random_range(lease..=lease * 3),
            FaultKind::ServerPause => rng.random_range(lease..=lease * 2),
            FaultKind::ServerKill | FaultKind::PowerLoss => rng.random_range(50..=lease),
            // Past every lease in force: a forward jump expires them all.
            FaultKind::ClockJump | FaultKind::SkewFailover => {
                rng.random_range(lease * 2..=lease * 4)
            }
            // The lag outlasts a lease, so writes pile up unreplicated.
            FaultKind::ReplicaLag | FaultKind::LagFailover | FaultKind::PrimaryPartition => {
                rng.random_range(lease..=lease * 3)
            }
            // The old primary's downtime before it rejoins.
            FaultKind::Failover => rng.random_range(50..=lease),
            // How long the replica keeps the slots.
            FaultKind::Takeover => rng.random_range(lease..=lease * 2),
            FaultKind::CrashBeforeEffect
            | FaultKind::CrashAckGap
            | FaultKind::CrashAfterAck
            | FaultKind::DropRequest
            | FaultKind::DropReply
            | FaultKind::DuplicateRequest
            | FaultKind::ResetConnection
            | FaultKind::ScriptFlush
            | FaultKind::Reshard
            | FaultKind::ReshardClassic => 0,
        }
    }
}

/// A set of enabled fault kinds, resolved for a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSet(pub BTreeSet<FaultKind>);

impl FaultSet {
    /// Every kind `shape` supports: what `--faults all` means there.
    pub fn all_on(shape: &Shape) -> FaultSet {
        FaultSet(
            FaultKind::all()
                .filter(|&k| shape.supports(k).is_ok())
                .collect(),
        )
    }

    /// Every kind a single process server supports ([`Shape::PROCESS`]).
    pub fn all() -> FaultSet {
        FaultSet::all_on(&Shape::PROCESS)
    }

    /// The kinds of the set that `shape` runs: a library caller's list
    /// (resolved as on a single process) on the server at hand.
    pub fn on(mut self, shape: &Shape) -> FaultSet {
        self.0.retain(|&k| shape.supports(k).is_ok());
        self
    }

    /// True if `kind` is enabled.
    pub fn contains(&self, kind: FaultKind) -> bool {
        self.0.contains(&kind)
    }

    /// True when a fault of the set fails the primary over to a replica
    /// (or a cluster's takeover): for a moment the old primary may answer
    /// `READONLY`.
    pub(crate) fn moves_primary(&self) -> bool {
        self.0.iter().any(|k| k.moves_primary())
    }

    /// The libraries a server must be started with for the set's kinds:
    /// the power-loss shim for `power-loss`, libfaketime for a kind that moves
    /// the clock (`clock-jump`, `skew-failover`).
    pub fn instruments(&self) -> Instruments {
        Instruments {
            power_loss: self.contains(FaultKind::PowerLoss),
            clock: self.0.iter().any(|k| k.spec().moves_clock),
        }
    }

    /// The first kind of the set `shape` does not run, as a refusal.
    pub fn check(&self, shape: &Shape) -> Result<(), String> {
        for &k in &self.0 {
            shape
                .supports(k)
                .map_err(|why| format!("fault {k} {why} (on {})", shape.describe()))?;
        }
        Ok(())
    }
}

impl fmt::Display for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let names: Vec<&str> = self.0.iter().map(|k| k.name()).collect();
        f.write_str(&names.join(","))
    }
}

/// A library caller's list, resolved as on a single process server
/// ([`Shape::PROCESS`]) with every kind named kept: `"worker,failover"`.
/// The runner refuses a kind its server does not run.
impl FromStr for FaultSet {
    type Err = String;

    fn from_str(s: &str) -> Result<FaultSet, String> {
        s.parse::<FaultSpec>()?.resolve_named(&Shape::PROCESS)
    }
}

/// One item of a `--faults` list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Item {
    /// `all`: every kind the server supports.
    All,
    /// `none`.
    None,
    /// `worker`, `network`, `server`: the server's kinds of that target.
    Target(Target),
    /// `replication`: the kinds a replicated set runs and a single server
    /// does not.
    Replication,
    /// `cluster`: the kinds a cluster runs and a single server does not.
    Cluster,
    /// One kind, by name.
    Kind(FaultKind),
}

impl Item {
    fn name(self) -> &'static str {
        match self {
            Item::All => "all",
            Item::None => "none",
            Item::Target(t) => t.name(),
            Item::Replication => "replication",
            Item::Cluster => "cluster",
            Item::Kind(k) => k.name(),
        }
    }

    /// The kinds the item selects on `shape`; a group that cannot select
    /// anything there is refused.
    fn select(self, shape: &Shape) -> Result<Vec<FaultKind>, String> {
        let supported = || FaultKind::all().filter(|&k| shape.supports(k).is_ok());
        // The kinds a single server does not run: the topology's own.
        let multi_node = || supported().filter(|&k| Shape::PROCESS.supports(k).is_err());
        let kinds: Vec<FaultKind> = match self {
            Item::All => supported().collect(),
            Item::None => Vec::new(),
            Item::Kind(k) => vec![k],
            Item::Target(t) => supported().filter(|k| k.target() == t).collect(),
            Item::Replication if shape.is_replicated() => multi_node().collect(),
            Item::Cluster if shape.is_cluster() => multi_node().collect(),
            Item::Replication => {
                return Err(format!(
                    "the group replication needs --server replicated[:N] (on {})",
                    shape.describe()
                ))
            }
            Item::Cluster => {
                return Err(format!(
                    "the group cluster needs --server cluster[:PxR] or container-cluster[:PxR] \
                     (on {})",
                    shape.describe()
                ))
            }
        };
        if kinds.is_empty() && !matches!(self, Item::None) {
            return Err(format!(
                "the group {} selects no fault on {}",
                self.name(),
                shape.describe()
            ));
        }
        Ok(kinds)
    }
}

/// The value of `--faults` as written: kinds and groups added (or, with a
/// leading `-`, removed) in order. What a group selects depends on the
/// server: [`FaultSpec::resolve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpec(Vec<(bool, Item)>);

impl FaultSpec {
    /// The kinds this list selects on `shape`: `all` is every kind the
    /// server supports, a group its supported kinds of that kind; a kind
    /// named that `shape` does not run is refused, with the reason.
    pub fn resolve(&self, shape: &Shape) -> Result<FaultSet, String> {
        let set = self.resolve_named(shape)?;
        set.check(shape)?;
        Ok(set)
    }

    /// [`FaultSpec::resolve`] without refusing the kinds named.
    fn resolve_named(&self, shape: &Shape) -> Result<FaultSet, String> {
        let mut set = BTreeSet::new();
        for &(remove, item) in &self.0 {
            if remove {
                // Removing a group the server has nothing of removes nothing.
                for k in item.select(shape).unwrap_or_default() {
                    set.remove(&k);
                }
            } else {
                set.extend(item.select(shape)?);
            }
        }
        Ok(FaultSet(set))
    }

    /// The kinds named one by one (not through a group).
    pub fn named(&self) -> impl Iterator<Item = FaultKind> + '_ {
        self.0.iter().filter_map(|&(remove, item)| match item {
            Item::Kind(k) if !remove => Some(k),
            _ => None,
        })
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self
            .0
            .iter()
            .map(|&(remove, item)| format!("{}{}", if remove { "-" } else { "" }, item.name()))
            .collect();
        f.write_str(&items.join(","))
    }
}

impl FromStr for FaultSpec {
    type Err = String;

    /// A comma-separated list of kinds and groups: `all`, `none`, `worker`,
    /// `network`, `server`, `replication`, `cluster`, or a kind's name;
    /// `-NAME` removes a kind or a group (`all,-server-kill`). An empty
    /// list is refused: `none` says no faults.
    fn from_str(s: &str) -> Result<FaultSpec, String> {
        let mut items = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (remove, name) = match item.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, item),
            };
            let parsed = match name {
                "all" => Item::All,
                "none" => Item::None,
                "worker" => Item::Target(Target::Worker),
                "network" => Item::Target(Target::Network),
                "server" => Item::Target(Target::Server),
                "replication" => Item::Replication,
                "cluster" => Item::Cluster,
                _ => match FaultKind::all().find(|k| k.name() == name) {
                    Some(k) => Item::Kind(k),
                    None => {
                        let names: Vec<&str> = FaultKind::all().map(|k| k.name()).collect();
                        return Err(format!(
                            "unknown fault {name:?}: expected all, none, worker, network, server, \
                             replication, cluster or one of {}",
                            names.join(", ")
                        ));
                    }
                },
            };
            items.push((remove, parsed));
        }
        if items.is_empty() {
            return Err(
                "no fault named: give a list such as all, worker or server-kill, or none for a \
                 run without faults"
                    .into(),
            );
        }
        Ok(FaultSpec(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::EnumCount;

    /// Every shape a `--server` names, one of each kind and the corners
    /// the requirements tell apart.
    fn shapes() -> Vec<Shape> {
        let none = Instruments::default();
        [
            "process",
            "container",
            "replicated:2",
            "container-replicated:1",
            "cluster:3x1",
            "cluster:2x1",
            "cluster:3x0",
            "container-cluster:3x1",
            "redis://127.0.0.1:1/",
        ]
        .iter()
        .map(|s| Shape::of_spec(&s.parse::<ServerSpec>().unwrap(), none))
        .collect()
    }

    #[test]
    fn the_groups_cover_every_kind() {
        let everything = Shape {
            topology: Topology::Replicated {
                replicas: 2,
                containers: false,
            },
            instruments: Instruments::default(),
        };
        let instrumented = Shape {
            topology: Topology::Single { container: false },
            instruments: Instruments {
                power_loss: true,
                clock: true,
            },
        };
        // A replicated set of processes with libfaketime in every node.
        let skewable = Shape {
            topology: Topology::Replicated {
                replicas: 1,
                containers: false,
            },
            instruments: instrumented.instruments,
        };
        let mut covered = BTreeSet::new();
        for shape in shapes()
            .iter()
            .chain([&everything, &instrumented, &skewable])
        {
            for group in ["worker", "network", "server"] {
                if let Ok(spec) = group.parse::<FaultSpec>() {
                    covered.extend(spec.resolve(shape).map(|s| s.0).unwrap_or_default());
                }
            }
        }
        let every: BTreeSet<FaultKind> = FaultKind::all().collect();
        assert_eq!(every.len(), FaultKind::COUNT);
        assert_eq!(covered, every, "a kind in no group on any server");
        // Each kind is in exactly the group of its target, and `all` on a
        // shape is the union of its groups.
        for shape in shapes() {
            let all = FaultSet::all_on(&shape).0;
            let mut union = BTreeSet::new();
            for t in [Target::Worker, Target::Network, Target::Server] {
                let group = t.name().parse::<FaultSpec>().unwrap().resolve(&shape);
                let group = group.map(|s| s.0).unwrap_or_default();
                assert!(group.iter().all(|k| k.target() == t), "{shape:?}");
                union.extend(group);
            }
            assert_eq!(union, all, "{shape:?}");
        }
    }

    /// Every backend a `--server` names, with the corners its answers tell
    /// apart: the kinds of the server (beyond those that need nothing of
    /// it) it runs bare, and those it adds with both libraries loaded.
    const BACKENDS: [(&str, &str, &str); 10] = [
        (
            "process",
            "server-pause,server-kill",
            "power-loss,clock-jump",
        ),
        (
            "container",
            "server-pause,server-kill",
            "power-loss,clock-jump",
        ),
        (
            "replicated:2",
            "server-pause,server-kill,replica-lag,failover,lag-failover,primary-partition",
            "power-loss,skew-failover",
        ),
        (
            "container-replicated:1",
            "server-pause,server-kill,replica-lag,failover,lag-failover,primary-partition",
            "power-loss,skew-failover",
        ),
        (
            "cluster:3x1",
            "failover,takeover,reshard,reshard-classic",
            "power-loss,clock-jump,skew-failover",
        ),
        (
            "cluster:2x1",
            "takeover,reshard,reshard-classic",
            "power-loss,clock-jump",
        ),
        (
            "cluster:3x0",
            "reshard,reshard-classic",
            "power-loss,clock-jump",
        ),
        ("cluster:1x0", "", "power-loss,clock-jump"),
        (
            "container-cluster:3x1",
            "failover,primary-partition,takeover,reshard,reshard-classic",
            "power-loss,clock-jump,skew-failover",
        ),
        ("redis://127.0.0.1:1/", "", ""),
    ];

    #[test]
    fn every_kind_has_a_supports_answer_on_every_backend_and_faults_all_is_what_it_runs() {
        use crate::fault::Needs;
        use strum::IntoEnumIterator;
        let both = Instruments {
            power_loss: true,
            clock: true,
        };
        let mut somewhere = BTreeSet::new();
        for (server, bare, loaded) in BACKENDS {
            let spec = server.parse::<ServerSpec>().unwrap();
            for (instruments, names) in [
                (Instruments::default(), vec![bare]),
                (both, vec![bare, loaded]),
            ] {
                let shape = Shape::of_spec(&spec, instruments);
                let named: BTreeSet<&str> = names.iter().flat_map(|n| n.split(',')).collect();
                for kind in FaultKind::iter() {
                    let answer = shape.supports(kind);
                    let runs = kind.spec().needs == Needs::Nothing || named.contains(kind.name());
                    assert_eq!(
                        answer.is_ok(),
                        runs,
                        "{kind} on {server}, {instruments:?}: {answer:?}"
                    );
                    // A refusal is a phrase that follows "fault NAME".
                    let why = answer.err().unwrap_or_else(|| "needs ".into());
                    assert!(
                        ["needs ", "is not ", "on a cluster "]
                            .iter()
                            .any(|w| why.starts_with(w)),
                        "{why}"
                    );
                    if runs {
                        somewhere.insert(kind);
                    }
                }
                let all = "all".parse::<FaultSpec>().unwrap().resolve(&shape).unwrap();
                let want: BTreeSet<FaultKind> = FaultKind::iter()
                    .filter(|&k| shape.supports(k).is_ok())
                    .collect();
                assert_eq!(all.0, want, "--faults all on {server}");
            }
        }
        assert_eq!(somewhere.len(), FaultKind::COUNT, "a kind no backend runs");
    }

    #[test]
    fn every_kind_has_a_drawing_its_window_agrees_with() {
        use rand::SeedableRng;
        use strum::IntoEnumIterator;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for kind in FaultKind::iter() {
            let window = kind.draw_window_ms(&mut rng, 1000);
            let drawn_as_window = kind.spec().drawing != crate::fault::Drawing::Instant;
            assert_eq!(window > 0, drawn_as_window, "{kind}: a {window} ms window");
        }
    }

    #[test]
    fn the_topology_groups_are_the_kinds_a_single_server_does_not_run() {
        let on = |faults: &str, server: &str| {
            let shape = Shape::of_spec(
                &server.parse::<ServerSpec>().unwrap(),
                Instruments::default(),
            );
            faults
                .parse::<FaultSpec>()
                .unwrap()
                .resolve(&shape)
                .map(|s| s.to_string())
        };
        assert_eq!(
            on("replication", "replicated:2").unwrap(),
            "replica-lag,failover,lag-failover,primary-partition"
        );
        assert_eq!(
            on("cluster", "cluster:3x1").unwrap(),
            "failover,takeover,reshard,reshard-classic"
        );
        // `all,cluster` on a cluster is every fault it runs, not a refusal.
        assert_eq!(
            on("all,cluster", "cluster:3x1").unwrap(),
            on("all", "cluster:3x1").unwrap()
        );
        assert!(on("replication", "process")
            .unwrap_err()
            .contains("needs --server replicated"));
        assert_eq!(
            on("network", "cluster:3x1").unwrap(),
            on("network", "process").unwrap()
        );
        // A kind named where it does not run is refused with the reason.
        assert!(on("failover", "process")
            .unwrap_err()
            .contains("needs replicas"));
        assert!(on("server-kill", "redis://127.0.0.1:1/")
            .unwrap_err()
            .contains("needs a server this tool owns"));
        assert!(on("failover", "cluster:2x1")
            .unwrap_err()
            .contains("at least 3 primaries"));
    }

    #[test]
    fn power_loss_runs_where_the_shim_loads_and_clock_jump_on_a_process_a_container_or_a_cluster() {
        use FaultKind::{ClockJump, PowerLoss};
        let both = Instruments {
            power_loss: true,
            clock: true,
        };
        let process = Shape::of_spec(&"process".parse::<ServerSpec>().unwrap(), both);
        let all = FaultSet::all_on(&process);
        assert!(all.contains(PowerLoss) && all.contains(ClockJump), "{all}");
        // Without the libraries, `all` leaves them out and naming them
        // says what is missing.
        assert!(!FaultSet::all().contains(PowerLoss));
        let why = Shape::PROCESS.supports(PowerLoss).unwrap_err();
        assert!(why.contains("power-loss shim"), "{why}");
        let container = Shape::of_spec(&ServerSpec::Container, Instruments::default());
        let why = container.supports(ClockJump).unwrap_err();
        assert!(
            why.contains("libfaketime") && why.contains("loaded into the container at start"),
            "{why}"
        );
        // The shim reaches a container and every node of a replicated set
        // or a cluster; libfaketime a process or a container, and every
        // node of a cluster of processes.
        for server in [
            "container",
            "replicated:2",
            "container-replicated:2",
            "cluster:3x1",
            "container-cluster:3x1",
        ] {
            let shape = Shape::of_spec(&server.parse::<ServerSpec>().unwrap(), both);
            assert!(shape.supports(PowerLoss).is_ok(), "{server}");
            assert_eq!(
                shape.supports(ClockJump).is_ok(),
                matches!(
                    server,
                    "cluster:3x1" | "container" | "container-cluster:3x1"
                ),
                "{server}"
            );
            let bare = Shape::of_spec(
                &server.parse::<ServerSpec>().unwrap(),
                Instruments::default(),
            );
            let why = bare.supports(PowerLoss).unwrap_err();
            assert!(
                why.contains("when --faults names power-loss"),
                "{server}: {why}"
            );
        }
        let url = Shape::of_spec(&"redis://127.0.0.1:1/".parse::<ServerSpec>().unwrap(), both);
        for kind in [PowerLoss, ClockJump] {
            let why = url.supports(kind).unwrap_err();
            assert!(why.contains("needs a server this tool owns"), "{why}");
        }
    }

    #[test]
    fn skew_failover_runs_on_a_replicated_set_or_a_voting_cluster_with_libfaketime() {
        let clock = Instruments {
            power_loss: false,
            clock: true,
        };
        let on = |server: &str, instruments| {
            Shape::of_spec(&server.parse::<ServerSpec>().unwrap(), instruments)
                .supports(FaultKind::SkewFailover)
        };
        for server in [
            "replicated:1",
            "container-replicated:1",
            "cluster:3x1",
            "container-cluster:3x1",
        ] {
            assert!(on(server, clock).is_ok(), "{server}");
            let why = on(server, Instruments::default()).unwrap_err();
            assert!(why.contains("libfaketime"), "{server}: {why}");
        }
        // No vote, no replica to promote, or a single server.
        for server in ["cluster:2x1", "cluster:3x0", "container", "process"] {
            assert!(on(server, clock).is_err(), "{server}");
        }
    }

    #[test]
    fn a_cluster_given_as_a_url_takes_the_network_faults_and_no_server_fault() {
        let shape = Shape {
            topology: Topology::Url { cluster: true },
            instruments: Instruments::default(),
        };
        let all = FaultSet::all_on(&shape);
        assert!(all.contains(FaultKind::Partition), "{all}");
        assert!(all.contains(FaultKind::CrashAckGap), "{all}");
        assert!(!all.contains(FaultKind::ServerKill), "{all}");
        let plain = Shape {
            topology: Topology::Url { cluster: false },
            ..shape
        };
        assert_eq!(FaultSet::all_on(&plain), all);
    }

    #[test]
    fn an_empty_fault_list_is_refused_and_none_is_no_faults() {
        for empty in ["", " ", ",", " , "] {
            let e = empty.parse::<FaultSpec>().unwrap_err();
            assert!(e.contains("no fault named"), "{empty:?}: {e}");
        }
        let none = "none".parse::<FaultSpec>().unwrap();
        assert!(none.resolve(&Shape::PROCESS).unwrap().0.is_empty());
    }

    #[test]
    fn fault_lists_parse_groups_and_removals() {
        let set: FaultSet = "all,-server".parse().unwrap();
        assert_eq!(set.0.len(), 11);
        assert!("bogus".parse::<FaultSet>().is_err());
        assert_eq!("none".parse::<FaultSet>().unwrap().to_string(), "none");
        assert_eq!(
            "all,-server-kill".parse::<FaultSpec>().unwrap().to_string(),
            "all,-server-kill"
        );
    }
}
