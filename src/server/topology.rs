//! What stands behind a server's address, typed: each backend says its
//! own [`Topology`] ([`Server::topology`]), and the faults and the
//! campaign decide by it, never by [`Server::kind`]'s name (a house test
//! greps for that).

use super::{Backend, Server};

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

impl Server {
    /// The backend's name, as messages and reports show it (`process`,
    /// `container`, `replicated`, `container-replicated`, `cluster`,
    /// `url`): for words, never for a decision ([`Server::topology`]).
    pub fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Process(_) => "process",
            Backend::Replicated(_) => "replicated",
            Backend::Cluster(_) => "cluster",
            Backend::ContainerReplicated(_) => "container-replicated",
            Backend::ContainerCluster(_) => "cluster",
            Backend::Container(_) => "container",
            Backend::Url(_) => "url",
        }
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

    /// True for a server given as a URL: the tool did not start it, and
    /// neither pauses, kills nor restarts it.
    pub fn is_url(&self) -> bool {
        matches!(self.backend, Backend::Url(_))
    }
}
