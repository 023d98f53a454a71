//! What stands behind a server's address, typed: each backend says its
//! own [`Topology`] ([`Server::topology`]) and which fault kinds it runs
//! ([`Server::supports`], [`Topology::supports`] before it starts); the
//! faults and the campaign decide by them, never by [`Server::kind`]'s
//! name (a house test greps for that).
//!
//! # Design notes
//!
//! Each backend answers for the kinds in a function beside the code that
//! does its faults (`ProcessServer::supports`, `ContainerServer::supports`,
//! `ReplicaSet::supports`, `cluster::Faults::supports`,
//! `UrlServer::supports`); what it does nothing for it answers with
//! [`elsewhere`], the kind's own need ([`crate::fault::Needs`]) in words.
//! The container sets do the faults their process twins do, and answer
//! through them.

use super::{cluster, container, process, replicated, url, Backend, Instruments, Server};
use crate::fault::{FaultKind, Needs};

/// The nodes behind a server's address, as the faults and the campaign
/// decide by it (never by [`Server::kind`]'s name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One server this tool started: a process (`container: false`) or a
    /// container.
    Single {
        /// A container rather than a process.
        container: bool,
    },
    /// A primary and its replicas, started by this tool.
    Replicated {
        /// Replicas of the primary.
        replicas: usize,
        /// Containers rather than processes.
        containers: bool,
    },
    /// A Valkey Cluster this tool started.
    Cluster {
        /// Primaries.
        primaries: usize,
        /// Replicas of each primary.
        replicas: usize,
        /// Containers rather than processes.
        containers: bool,
    },
    /// A server reached by URL: the tool neither pauses nor kills it.
    Url {
        /// It is a cluster node (known once the server is reached: a
        /// spec alone says false).
        cluster: bool,
    },
}

impl Topology {
    /// Whether a server of this topology, started with `instruments`, runs
    /// fault `kind`; if not, why (a phrase that follows "fault NAME"). Every
    /// backend answers for itself, in a match without a wildcard arm.
    pub fn supports(self, kind: FaultKind, instruments: Instruments) -> Result<(), String> {
        match self {
            Topology::Single { container: false } => {
                process::ProcessServer::supports(kind, instruments)
            }
            Topology::Single { container: true } => {
                container::ContainerServer::supports(kind, instruments)
            }
            // A set of containers does what a set of processes does.
            Topology::Replicated { replicas, .. } => {
                replicated::ReplicaSet::supports(kind, replicas, instruments)
            }
            Topology::Cluster {
                primaries,
                replicas,
                containers,
            } => cluster::Faults::supports(kind, (primaries, replicas), containers, instruments),
            Topology::Url { .. } => url::UrlServer::supports(kind),
        }
    }
}

/// The answer of a backend that does nothing for `kind`: the kinds that
/// need nothing of a server run, the others are refused with what they
/// need (a phrase that follows "fault NAME").
pub(super) fn elsewhere(kind: FaultKind) -> Result<(), String> {
    match kind.spec().needs {
        // The workers, the fault proxy (on a cluster too: each worker
        // reaches every node through its own ports of the proxy), or a
        // command any server takes.
        Needs::Nothing => Ok(()),
        Needs::OwnServer => Err(format!(
            "needs a server this tool starts: use --server process or container, or --faults \
             without {kind}"
        )),
        Needs::Replicas => Err(format!(
            "needs replicas: use --server replicated[:N], or --faults without {kind}"
        )),
        Needs::ClusterReplicas => Err(
            "needs a cluster with replicas: use --server cluster[:PxR] with R at least 1".into(),
        ),
        Needs::SkewableReplicas => Err(format!(
            "needs a replicated set or a cluster, each node started with libfaketime: use \
             --server [container-]replicated[:N] or [container-]cluster[:PxR], or --faults \
             without {kind}"
        )),
        Needs::TwoPrimaries => Err(
            "needs a cluster of at least 2 primaries to move the queue's slot between: use \
             --server cluster[:PxR]"
                .into(),
        ),
    }
}

/// Why `kind` does not run against a URL.
pub(super) fn owned(kind: FaultKind) -> String {
    format!(
        "needs a server this tool owns (it pauses, kills or restarts it); against a URL use \
         --faults all (every fault a URL allows) or --faults without {kind}"
    )
}

/// The power-loss shim, as a refusal names it.
pub(super) const SHIM: &str = "the power-loss shim (src/server/powercut.c, loaded with LD_PRELOAD)";

/// libfaketime as a clock jump loads it, as a refusal names it.
pub(super) const FAKETIME: &str =
    "libfaketime (loaded with LD_PRELOAD, its offset read from a control file)";

/// Ok when the library `what` was `loaded` into `into` (`the server`,
/// `the container`, `every node`) at start, for `kind`; else why not.
pub(super) fn loaded(kind: FaultKind, loaded: bool, what: &str, into: &str) -> Result<(), String> {
    match loaded {
        true => Ok(()),
        false => Err(format!(
            "needs {what} loaded into {into} at start, which ackgap does when --faults names \
             {kind} (`all` alone does not load it)"
        )),
    }
}

impl Backend {
    /// Its name, as messages show it ([`Server::kind`]).
    pub(super) fn name(&self) -> &'static str {
        match self {
            Backend::Process(_) => "process",
            Backend::Replicated(_) => "replicated",
            Backend::Cluster(_) => "cluster",
            Backend::ContainerReplicated(_) => "container-replicated",
            Backend::ContainerCluster(_) => "cluster",
            Backend::Container(_) => "container",
            Backend::Url(_) => "url",
        }
    }
}

impl Server {
    /// Whether this server runs fault `kind`; if not, why (a phrase that
    /// follows "fault NAME"): its backend's own answer
    /// ([`Topology::supports`]) on what it loaded at start.
    pub fn supports(&self, kind: FaultKind) -> Result<(), String> {
        self.topology().supports(kind, self.instruments())
    }

    /// The backend's name, as messages and reports show it (`process`,
    /// `container`, `replicated`, `container-replicated`, `cluster`,
    /// `url`): for words, never for a decision ([`Server::topology`]).
    pub fn kind(&self) -> &'static str {
        self.backend.name()
    }

    /// The nodes behind its address: every backend says its own, in a
    /// match without a wildcard arm.
    pub fn topology(&self) -> Topology {
        match &self.backend {
            Backend::Process(_) => Topology::Single { container: false },
            Backend::Container(_) => Topology::Single { container: true },
            Backend::Replicated(r) => Topology::Replicated {
                replicas: r.replicas(),
                containers: false,
            },
            Backend::ContainerReplicated(c) => Topology::Replicated {
                replicas: c.replicas(),
                containers: true,
            },
            Backend::Cluster(c) => {
                let (primaries, replicas) = c.shape();
                Topology::Cluster {
                    primaries,
                    replicas,
                    containers: false,
                }
            }
            Backend::ContainerCluster(c) => Topology::Cluster {
                primaries: c.shape.0,
                replicas: c.shape.1,
                containers: true,
            },
            Backend::Url(u) => Topology::Url {
                cluster: u.is_cluster(),
            },
        }
    }
}
