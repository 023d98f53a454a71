//! The Valkey server a check runs against: a child process, a container or
//! an existing server reached by URL.
//!
//! Every command that talks to a server takes `--server process|container|URL`
//! ([`ServerSpec`]), so the same interleavings run against the embedded
//! process and against a container. [`Server`] owns whichever backend was
//! chosen and offers the faults the nemeses need: [`Server::pause`],
//! [`Server::resume`], [`Server::kill`] and [`Server::restart`]. The url
//! backend does not own its server, so it refuses faults with
//! [`ServerError::Unsupported`].
//!
//! # Backends
//!
//! - **process** (the default): `valkey-server` (or Debian's `redis-server`
//!   7.0, same flags) on a free loopback port, in a fresh temporary directory
//!   named `ackgap-valkey-*`, so `pgrep -f ackgap-valkey-` finds leftovers. The
//!   binary is found by [`find_valkey_binary`]. The child dies with the tool:
//!   on drop, on panic and even on `kill -9` of the tool (see
//!   `src/server/process.rs` for how).
//! - **container**: the local image `ackgap/valkey:9.1.2` built by
//!   `ci/build-image` (override with `$ACKGAP_VALKEY_IMAGE`, e.g.
//!   `valkey/valkey:9.1` where a registry is reachable), run by testcontainers
//!   and published on a loopback port of our choosing that survives restarts.
//! - **url**: `redis://[user:password@]host:port[/db]`, checked with one PING
//!   at start.
//!
//! # Debugging
//!
//! A process server keeps its log in `server.log` inside its data directory;
//! when it fails to come up the error carries the last lines of that log.
//! [`Server::describe`] names the server, its version, where it listens and its
//! persistence mode: print it at the start of every run.
//!
//! # Design notes
//!
//! The container backend is the default feature `container`; a build without
//! it (the fuzz and loom builds) compiles `container_off.rs` in its place.
//!
//! `Server::start_instrumented` loads libraries into a process server
//! (`Instruments`, only when a run asks; every restart loads them again):
//! the power-loss shim (`powercut.rs`) and libfaketime (`clock.rs`).
//! `Server::power_loss` is the shim's cut (checked by the exit status and
//! the shim's line in the log) and a restart on the same dir and port;
//! `Server::power_on` is the heal of any power cut.
//!
//! Each replication fault is a `Server` method (`lag_replicas`,
//! `hold_replication`, `failover`, `rejoin`) that refuses a server without
//! replicas (`ServerError::NotReplicated`).
//!
//! The single container starts through `server::detached`: a task of its own
//! that, when its caller was dropped, ends the start and drops (removes) the
//! container; the binary `server::settle`s such tasks before it exits.
//!
//! `ServerSpec::redacted` is a `--server`'s one password-free name.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

// The container backend needs testcontainers, a default feature that the
// fuzz and loom builds turn off: without it, `--server container` is refused
// with an error that says so.
mod clock;
mod cluster;
#[cfg(feature = "container")]
mod container;
#[cfg(not(feature = "container"))]
#[path = "container_off.rs"]
mod container;
mod container_set;
mod front;
mod image;
mod port;
mod powercut;
mod process;
mod replicated;
mod topology;
mod url;

pub(crate) use port::{free_port, PORT_TRIES};

pub use clock::{LogicalClock, LIBFAKETIME_ENV, LOGICAL_EPOCH_MS};
pub use cluster::{Migration, MigrationKind, Takeover};
pub use container_set::{Cut, Reconnected};
pub use image::{image_reference, IMAGE_ENV, VALKEY_IMAGE_NAME, VALKEY_IMAGE_TAG};
pub use powercut::PowerLoss;
pub use process::{die_with_parent, find_valkey_binary, BINARY_ENV};
pub use replicated::Failover;
pub use topology::Topology;
pub use url::readdress;

/// How long a started or restarted server may take to answer PING.
pub const START_DEADLINE: Duration = Duration::from_secs(10);

/// How long a container may take to start and answer PING; docker adds its own
/// latency on top of the server's.
pub const CONTAINER_START_DEADLINE: Duration = Duration::from_secs(30);

/// Starts run to their end even when their caller's future is dropped
/// (Ctrl-C during a start): counted here until the start ended and, if
/// its caller was gone, what it started was removed again.
static DETACHED: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// Runs `start` as a task of its own and answers its result. Dropped
/// before the start ended, the task goes on to its end and then drops
/// what it started (which removes it): a start cut short in the middle
/// (a container created and not yet known by its handle) would leave it
/// behind. [`settle`] waits for such tasks before the tool exits.
#[cfg_attr(not(feature = "container"), allow(dead_code))]
pub(crate) async fn detached<T, F>(start: F) -> Result<T, ServerError>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, ServerError>> + Send + 'static,
{
    *DETACHED.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let result = start.await;
        // The caller is gone: what started is dropped here, and removed.
        drop(tx.send(result));
        *DETACHED.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
    });
    rx.await.unwrap_or_else(|_| {
        Err(ServerError::Docker {
            reason: "the start's task ended without an answer".into(),
        })
    })
}

/// Waits until every start whose caller went away (`detached`) ended and
/// removed what it started, `deadline` at most. The binary calls it before
/// it exits, so an interrupted start leaves nothing behind.
pub async fn settle(deadline: Duration) {
    let began = std::time::Instant::now();
    while *DETACHED.lock().unwrap_or_else(|e| e.into_inner()) > 0 && began.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long a clean shutdown ([`Server::stop`]) may take before the server is
/// killed and the stop reported as failed.
pub const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// The AOF setting the server runs with. RDB snapshots are always off
/// (`save ""`), so with `None` a killed server comes back empty.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Persistence {
    /// `appendonly no`: nothing survives a kill.
    #[default]
    None,
    /// `appendonly yes`, `appendfsync everysec`: up to about a second of
    /// acknowledged writes may be lost on kill.
    AofEverysec,
    /// `appendonly yes`, `appendfsync always`: every acknowledged write is on
    /// disk before the reply.
    AofAlways,
}

impl Persistence {
    /// The `valkey-server` arguments for this mode; both valkey 9 and redis
    /// 7.0 accept them.
    pub(crate) fn server_args(self) -> Vec<&'static str> {
        match self {
            Persistence::None => vec!["--appendonly", "no"],
            Persistence::AofEverysec => vec!["--appendonly", "yes", "--appendfsync", "everysec"],
            Persistence::AofAlways => vec!["--appendonly", "yes", "--appendfsync", "always"],
        }
    }

    /// A short phrase for [`Server::describe`].
    fn describe(self) -> &'static str {
        match self {
            Persistence::None => "no persistence",
            Persistence::AofEverysec => "aof everysec",
            Persistence::AofAlways => "aof always",
        }
    }
}

impl fmt::Display for Persistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Persistence::None => "none",
            Persistence::AofEverysec => "everysec",
            Persistence::AofAlways => "always",
        })
    }
}

impl FromStr for Persistence {
    type Err = ServerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Persistence::None),
            "everysec" => Ok(Persistence::AofEverysec),
            "always" => Ok(Persistence::AofAlways),
            _ => Err(ServerError::InvalidSpec {
                what: "persistence",
                input: s.to_string(),
                expected: "`none`, `everysec` or `always`",
            }),
        }
    }
}

/// Which server to run against: the value of `--server`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerSpec {
    /// A `valkey-server` child process (the default).
    Process(ProcessOptions),
    /// `replicated[:N]`: a primary and `replicas` replicas as child
    /// processes, behind one stable loopback address (see
    /// `src/server/replicated.rs`).
    Replicated {
        /// The number of replicas (default 2).
        replicas: usize,
        /// How the nodes' binary is found.
        options: ProcessOptions,
    },
    /// `cluster[:PxR]`: a Valkey Cluster of `primaries` primaries with
    /// `replicas` replicas each, as child processes (see
    /// `src/server/cluster.rs`).
    Cluster {
        /// Primaries (default 3).
        primaries: usize,
        /// Replicas of each primary (default 1).
        replicas: usize,
        /// How the nodes' binary is found.
        options: ProcessOptions,
    },
    /// A container of the local valkey image.
    Container,
    /// `container-replicated[:N]`: a primary and `replicas` replicas as
    /// containers on private networks (see `src/server/container_set.rs`).
    ContainerReplicated {
        /// The number of replicas (default 2).
        replicas: usize,
    },
    /// `container-cluster[:PxR]`: a Valkey Cluster as containers on a
    /// private network (see `src/server/container_set.rs`).
    ContainerCluster {
        /// Primaries (default 3).
        primaries: usize,
        /// Replicas of each primary (default 1).
        replicas: usize,
    },
    /// An existing server, `redis://[user:password@]host:port[/db]`.
    Url(String),
}

impl ServerSpec {
    /// How a printed reproduction command names this server: the
    /// `--server` value, except a URL, which becomes `"$ACKGAP_SERVER"`: a
    /// reproduce line never carries a password, and stays pasteable in a
    /// shell where `ACKGAP_SERVER` holds the URL (every command's
    /// `--server` also reads that variable).
    pub fn redacted(&self) -> String {
        match self {
            ServerSpec::Url(_) => "\"$ACKGAP_SERVER\"".to_string(),
            other => other.to_string(),
        }
    }

    /// True for the forms whose nodes are this tool's child processes
    /// (found by `$ACKGAP_VALKEY_SERVER` like `process`).
    pub fn is_process(&self) -> bool {
        matches!(
            self,
            ServerSpec::Process(_) | ServerSpec::Replicated { .. } | ServerSpec::Cluster { .. }
        )
    }
}

/// The default number of replicas of `replicated`.
pub(crate) const DEFAULT_REPLICAS: usize = 2;

impl Default for ServerSpec {
    fn default() -> Self {
        ServerSpec::Process(ProcessOptions::default())
    }
}

impl fmt::Display for ServerSpec {
    /// The form `FromStr` accepts, so a reproduction command can be printed.
    /// A URL is printed as given, password included: it is the user's own
    /// argument. A custom binary is not part of the spec string; it travels
    /// in `$ACKGAP_VALKEY_SERVER`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerSpec::Process(_) => f.write_str("process"),
            ServerSpec::Replicated { replicas, .. } => write!(f, "replicated:{replicas}"),
            ServerSpec::ContainerReplicated { replicas } => {
                write!(f, "container-replicated:{replicas}")
            }
            ServerSpec::ContainerCluster {
                primaries,
                replicas,
            } => write!(f, "container-cluster:{primaries}x{replicas}"),
            ServerSpec::Cluster {
                primaries,
                replicas,
                ..
            } => write!(f, "cluster:{primaries}x{replicas}"),
            ServerSpec::Container => f.write_str("container"),
            ServerSpec::Url(url) => f.write_str(url),
        }
    }
}

impl FromStr for ServerSpec {
    type Err = ServerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "process" => Ok(ServerSpec::Process(ProcessOptions::default())),
            "container" => Ok(ServerSpec::Container),
            "container-replicated" => Ok(ServerSpec::ContainerReplicated {
                replicas: DEFAULT_REPLICAS,
            }),
            _ if s.starts_with("container-replicated:") => {
                match s["container-replicated:".len()..].parse::<usize>() {
                    Ok(replicas) if (1..=8).contains(&replicas) => {
                        Ok(ServerSpec::ContainerReplicated { replicas })
                    }
                    _ => Err(ServerError::InvalidSpec {
                        what: "server",
                        input: s.to_string(),
                        expected: "`container-replicated[:N]` (N replicas, 1 to 8)",
                    }),
                }
            }
            "replicated" => Ok(ServerSpec::Replicated {
                replicas: DEFAULT_REPLICAS,
                options: ProcessOptions::default(),
            }),
            "cluster" => Ok(ServerSpec::Cluster {
                primaries: 3,
                replicas: 1,
                options: ProcessOptions::default(),
            }),
            "container-cluster" => Ok(ServerSpec::ContainerCluster {
                primaries: 3,
                replicas: 1,
            }),
            _ if s.starts_with("container-cluster:") => {
                match ServerSpec::from_str(&s["container-".len()..]) {
                    Ok(ServerSpec::Cluster {
                        primaries,
                        replicas,
                        ..
                    }) => Ok(ServerSpec::ContainerCluster {
                        primaries,
                        replicas,
                    }),
                    _ => Err(ServerError::InvalidSpec {
                        what: "server",
                        input: s.to_string(),
                        expected: "`container-cluster[:PxR]`: P primaries (1 to 8) with R \
                                   replicas each (0 to 4)",
                    }),
                }
            }
            _ if s.starts_with("redis://") => Ok(ServerSpec::Url(s.to_string())),
            _ if s.starts_with("cluster:") => {
                let shape = s["cluster:".len()..]
                    .split_once('x')
                    .and_then(|(p, r)| Some((p.parse::<usize>().ok()?, r.parse::<usize>().ok()?)));
                match shape {
                    Some((primaries, replicas))
                        if (1..=8).contains(&primaries) && replicas <= 4 =>
                    {
                        Ok(ServerSpec::Cluster {
                            primaries,
                            replicas,
                            options: ProcessOptions::default(),
                        })
                    }
                    _ => Err(ServerError::InvalidSpec {
                        what: "server",
                        input: s.to_string(),
                        expected: "`cluster[:PxR]`: P primaries (1 to 8) with R replicas each \
                                   (0 to 4), e.g. `cluster:3x1`",
                    }),
                }
            }
            _ => match s.strip_prefix("replicated:").map(str::parse::<usize>) {
                Some(Ok(replicas)) if (1..=8).contains(&replicas) => Ok(ServerSpec::Replicated {
                    replicas,
                    options: ProcessOptions::default(),
                }),
                _ => Err(ServerError::InvalidSpec {
                    what: "server",
                    input: s.to_string(),
                    expected: "`process`, `container`, `replicated[:N]` (N replicas, 1 to 8), \
                               `cluster[:PxR]` or a URL `redis://[user:password@]host:port[/db]`",
                }),
            },
        }
    }
}

/// Settings of the process backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessOptions {
    /// The server binary; `None` finds one with [`find_valkey_binary`].
    pub binary: Option<PathBuf>,
}

/// Libraries a process server is started with, for the faults that need one
/// loaded from its first instruction: nothing is loaded unless a run asks.
/// Only the `process` backend takes them for now; the others refuse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Instruments {
    /// The power-loss shim (`src/server/powercut.c`), for
    /// [`Server::power_loss`].
    pub power_loss: bool,
    /// libfaketime with a control file, for [`Server::jump_clock`]; refused
    /// for Debian's redis-server 7.0, which hangs at start under it.
    pub clock: bool,
}

impl Instruments {
    /// True when nothing is loaded.
    pub fn is_none(self) -> bool {
        self == Instruments::default()
    }
}

/// Why a server could not be started, reached or faulted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// No server binary at any of the places looked.
    #[error(
        "no valkey-server binary found; looked at: {}. Set $ACKGAP_VALKEY_SERVER to a valkey-server \
         (or redis-server) binary, or run `ci/install-valkey` to install one",
        tried.join(", ")
    )]
    BinaryNotFound {
        /// Every place looked, in order.
        tried: Vec<String>,
    },
    /// A process or container did not come up (or back up) answering PING.
    #[error("could not start {what}: {reason}{}", log_section(log_tail))]
    Start {
        /// The server, e.g. `valkey-server /usr/bin/valkey-server on 127.0.0.1:40123`.
        what: String,
        /// What went wrong.
        reason: String,
        /// The last lines of the server's log, empty if there is none.
        log_tail: String,
    },
    /// A clean shutdown did not finish in time; the server was killed.
    #[error("could not stop {what} cleanly: {reason}")]
    Stop {
        /// The server.
        what: String,
        /// What went wrong.
        reason: String,
    },
    /// A fault (pause, resume, kill) could not be applied.
    #[error("could not {op} {what}: {reason}")]
    Fault {
        /// The server.
        what: String,
        /// The operation, e.g. `pause`.
        op: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The url backend could not reach its server.
    #[error("the server at {url} is unreachable: {reason}")]
    Unreachable {
        /// The URL, password hidden.
        url: String,
        /// The connection error.
        reason: String,
    },
    /// The server refused the credentials in the URL.
    #[error(
        "the server at {url} refused the credentials: {reason}; check the user and password in the URL"
    )]
    Auth {
        /// The URL, password hidden.
        url: String,
        /// The server's answer.
        reason: String,
    },
    /// The docker daemon could not be reached or refused a request.
    #[error("docker: {reason}")]
    Docker {
        /// The daemon's or the client's error.
        reason: String,
    },
    /// The container image is not present locally (and no registry is used).
    #[error(
        "the docker image {image} is not present locally; build it with `ci/build-image`, or set \
         $ACKGAP_VALKEY_IMAGE to an image you have"
    )]
    ImageMissing {
        /// `name:tag`.
        image: String,
    },
    /// The backend cannot perform this operation.
    #[error("the {backend} backend cannot {op}{why}")]
    Unsupported {
        /// `process`, `container` or `url`.
        backend: &'static str,
        /// The operation, e.g. `pause`.
        op: &'static str,
        /// Why not, and what to use instead (after the operation).
        why: &'static str,
    },
    /// A replication fault on a server that has no replicas.
    #[error("the {backend} server cannot {op}: it has no replicas; use --server replicated[:N]")]
    NotReplicated {
        /// `process`, `container` or `url`.
        backend: &'static str,
        /// The operation.
        op: &'static str,
    },
    /// A `--server` or persistence argument that does not parse.
    #[error("invalid {what} `{input}`: expected {expected}")]
    InvalidSpec {
        /// `server` or `persistence`.
        what: &'static str,
        /// The argument as given.
        input: String,
        /// The accepted forms.
        expected: &'static str,
    },
    /// A local I/O operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, e.g. `creating the data directory`.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

fn log_section(log_tail: &str) -> String {
    if log_tail.is_empty() {
        String::new()
    } else {
        format!("\n--- last lines of the server log ---\n{log_tail}")
    }
}

impl ServerError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ServerError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A running (or deliberately killed) server owned by this tool, or a server
/// reached by URL.
///
/// Dropping a `Server` kills a process server (SIGKILL and reap) and removes
/// its directory, and removes a container; [`Server::stop`] does the same
/// after a clean shutdown.
#[derive(Debug)]
pub struct Server {
    backend: Backend,
    client: redis::Client,
    url: String,
    /// `valkey 9.1.2`, from INFO server at start.
    software: String,
    persistence: Persistence,
    /// Every node's clock as the explorers drive it, when the server runs
    /// under libfaketime ([`Instruments::clock`]).
    logical: Option<LogicalClock>,
}

#[derive(Debug)]
enum Backend {
    Process(process::ProcessServer),
    Replicated(replicated::ReplicaSet),
    Cluster(cluster::ClusterSet),
    ContainerReplicated(container_set::ContainerSet),
    ContainerCluster(container_set::ContainerCluster),
    /// Boxed: a testcontainers handle is large.
    Container(Box<container::ContainerServer>),
    Url(url::UrlServer),
}

impl Backend {
    /// The error of an operation this backend does not do, with why.
    fn unsupported(&self, op: &'static str) -> ServerError {
        match self {
            Backend::Url(_) => unsupported_on_url(op),
            _ => ServerError::Unsupported {
                backend: self.name(),
                op,
                why: NOT_YET,
            },
        }
    }

    /// Every node's libfaketime control file (on the host for containers).
    fn clock_files(&self) -> Vec<std::path::PathBuf> {
        match self {
            Backend::Process(p) => p.clock_file().into_iter().collect(),
            Backend::Container(c) => c.clock_file().into_iter().collect(),
            Backend::Replicated(r) => r.clock_files(),
            Backend::Cluster(c) => c.clock_files(),
            Backend::ContainerReplicated(c) => c.clock_files(),
            Backend::ContainerCluster(c) => c.clock_files(),
            Backend::Url(_) => Vec::new(),
        }
    }

    /// Each node's URL where ackgap knows it (its processes' ports), else
    /// the server's own `url` (a container's mapped port; a container set's
    /// entry node).
    fn node_urls(&self, url: &str) -> Vec<String> {
        match self {
            Backend::Replicated(r) => r.ports().into_iter().map(local_url).collect(),
            Backend::Cluster(c) => c.ports().into_iter().map(local_url).collect(),
            _ => vec![url.to_owned()],
        }
    }
}

/// Why the server `spec` names cannot run under libfaketime, if it
/// cannot: libfaketime is not installed, or the binary is Debian's
/// redis-server 7.0. A container runs the image's valkey-server.
fn clock_refusal(spec: &ServerSpec) -> Result<(), String> {
    clock::find_libfaketime().map_err(|e| e.to_string())?;
    let options = match spec {
        ServerSpec::Process(options)
        | ServerSpec::Replicated { options, .. }
        | ServerSpec::Cluster { options, .. } => options,
        _ => return Ok(()),
    };
    let binary = match &options.binary {
        Some(path) => path.clone(),
        None => match find_valkey_binary() {
            Ok(path) => path,
            // The start says so, with every place it looked.
            Err(_) => return Ok(()),
        },
    };
    match clock::refusal(&binary) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

impl Server {
    /// Starts (or, for a URL, connects to) the server and returns once it
    /// answers PING.
    ///
    /// `persistence` applies to the process and container backends; the url
    /// backend keeps its server's own setting and refuses anything but
    /// [`Persistence::None`] (meaning "leave it alone").
    pub async fn start(spec: &ServerSpec, persistence: Persistence) -> Result<Server, ServerError> {
        Server::start_instrumented(spec, persistence, Instruments::default()).await
    }

    /// [`Server::start`] with the libraries `instruments` asks for loaded
    /// into the server (and into every restart of it), for
    /// [`Server::power_loss`] and [`Server::jump_clock`]. The power-loss
    /// shim and libfaketime go into every backend ackgap starts; a URL
    /// (not a server of ours) is refused with [`ServerError::Unsupported`].
    pub async fn start_instrumented(
        spec: &ServerSpec,
        persistence: Persistence,
        instruments: Instruments,
    ) -> Result<Server, ServerError> {
        // Every backend ackgap starts loads both (a container's
        // bind-mounted); a URL is not a server of ours.
        if !instruments.is_none() && matches!(spec, ServerSpec::Url(_)) {
            return Err(unsupported_on_url(
                "load the power-loss shim or libfaketime (only into a server ackgap starts)",
            ));
        }
        let (backend, url) = match spec {
            ServerSpec::Process(options) => {
                let server = process::ProcessServer::start_instrumented(
                    options,
                    persistence,
                    Vec::new(),
                    instruments,
                )
                .await?;
                let url = local_url(server.port());
                (Backend::Process(server), url)
            }
            ServerSpec::Replicated { replicas, options } => {
                let set =
                    replicated::ReplicaSet::start(options, persistence, *replicas, instruments)
                        .await?;
                let url = local_url(set.port());
                (Backend::Replicated(set), url)
            }
            ServerSpec::ContainerReplicated { replicas } => {
                let set =
                    container_set::ContainerSet::start(persistence, *replicas, instruments).await?;
                let url = local_url(set.port());
                (Backend::ContainerReplicated(set), url)
            }
            ServerSpec::ContainerCluster {
                primaries,
                replicas,
            } => {
                let set = container_set::ContainerCluster::start(
                    persistence,
                    *primaries,
                    *replicas,
                    instruments,
                )
                .await?;
                let url = format!("redis://{}/", set.addr());
                (Backend::ContainerCluster(set), url)
            }
            ServerSpec::Cluster {
                primaries,
                replicas,
                options,
            } => {
                let set = cluster::ClusterSet::start(
                    options,
                    persistence,
                    *primaries,
                    *replicas,
                    instruments,
                )
                .await?;
                let url = local_url(set.port());
                (Backend::Cluster(set), url)
            }
            ServerSpec::Container => {
                let server = container::ContainerServer::start(persistence, instruments).await?;
                let url = local_url(server.port());
                (Backend::Container(Box::new(server)), url)
            }
            ServerSpec::Url(url) => {
                if persistence != Persistence::None {
                    return Err(unsupported_on_url(
                        "set persistence (configure the server itself)",
                    ));
                }
                let server = url::UrlServer::connect(url).await?;
                (Backend::Url(server), url.clone())
            }
        };
        let client = match &backend {
            Backend::Url(server) => server.client(),
            _ => redis::Client::open(url.as_str()).map_err(|e| ServerError::Start {
                what: url.clone(),
                reason: format!("the redis client rejected the local URL: {e}"),
                log_tail: String::new(),
            })?,
        };
        let software = match &backend {
            Backend::Url(server) => server.software().to_string(),
            _ => server_software(&client, &redact_url(&url)).await?,
        };
        let logical = instruments
            .clock
            .then(|| LogicalClock::new(backend.clock_files(), backend.node_urls(&url)));
        Ok(Server {
            backend,
            client,
            url,
            software,
            persistence,
            logical,
        })
    }

    /// [`Server::start`] for the explorers: every server ackgap starts
    /// runs under libfaketime, so that its clock follows the walk's
    /// logical time ([`Server::logical_clock`]). Where it cannot (a URL,
    /// Debian's redis-server 7.0, which hangs under libfaketime, or no
    /// libfaketime installed) the server starts on real time, and the
    /// second value says why, for the report.
    pub async fn start_for_explorers(
        spec: &ServerSpec,
        persistence: Persistence,
    ) -> Result<(Server, Option<String>), ServerError> {
        let why_not = match spec {
            ServerSpec::Url(_) => Some(
                "a server given as a URL keeps its own clock: queues that read it run on real time"
                    .to_string(),
            ),
            _ => clock_refusal(spec).err(),
        };
        let instruments = Instruments {
            clock: why_not.is_none(),
            ..Instruments::default()
        };
        let server = Server::start_instrumented(spec, persistence, instruments).await?;
        Ok((server, why_not))
    }

    /// The server's clock as the explorers drive it: frozen at each step's
    /// instant on every node. `None` when the server was started without
    /// libfaketime (see [`Server::start_for_explorers`]).
    pub fn logical_clock(&self) -> Option<LogicalClock> {
        self.logical.clone()
    }

    /// The server's URL: `redis://127.0.0.1:PORT/` for the local backends, the
    /// URL as given (credentials included) for the url backend.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// A client for [`Server::url`].
    pub fn client(&self) -> redis::Client {
        self.client.clone()
    }

    /// One line for logs, e.g. `valkey 9.1.2 process on 127.0.0.1:40123 (aof
    /// always)`. Never contains a password.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Process(p) => format!(
                "{} process on 127.0.0.1:{} (pid {}, dir {}, {})",
                self.software,
                p.port(),
                p.pid()
                    .map_or_else(|| "none".to_string(), |pid| pid.to_string()),
                p.dir().display(),
                self.persistence.describe()
            ),
            Backend::Replicated(r) => format!(
                "{} replicated: primary and {} replicas as processes (nodes on 127.0.0.1:{}; \
                 clients through 127.0.0.1:{}; {}; up in {} ms)",
                self.software,
                r.replicas(),
                r.ports()
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                r.port(),
                self.persistence.describe(),
                r.started_in.as_millis()
            ),
            Backend::ContainerReplicated(c) => format!(
                "{} replicated: primary and {} replicas as containers of {} on private networks \
                 ({}; clients through 127.0.0.1:{}; {}; up in {} ms)",
                self.software,
                c.replicas(),
                c.image,
                c.describe_nodes(),
                c.port(),
                self.persistence.describe(),
                c.started_in.as_millis()
            ),
            Backend::ContainerCluster(c) => format!(
                "{} cluster of {} primaries with {} replicas each as containers of {} on a \
                 private network ({}; {}; ok in {} ms)",
                self.software,
                c.shape.0,
                c.shape.1,
                c.image,
                c.describe_nodes(),
                self.persistence.describe(),
                c.started_in.as_millis()
            ),
            Backend::Cluster(c) => format!(
                "{} cluster of {} primaries with {} replicas each as processes (nodes on \
                 127.0.0.1:{}; {}; ok in {} ms)",
                self.software,
                c.shape().0,
                c.shape().1,
                c.ports()
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                self.persistence.describe(),
                c.started_in.as_millis()
            ),
            Backend::Container(c) => format!(
                "{} container {} {} on 127.0.0.1:{} ({})",
                self.software,
                c.image(),
                c.short_id(),
                c.port(),
                self.persistence.describe()
            ),
            Backend::Url(_) => format!(
                "{} url {} (persistence as the server is configured)",
                self.software,
                redact_url(&self.url)
            ),
        }
    }

    /// The TCP port the server listens on (the host side for a container).
    pub fn port(&self) -> u16 {
        match &self.backend {
            Backend::Process(p) => p.port(),
            Backend::Replicated(r) => r.port(),
            Backend::Cluster(c) => c.port(),
            Backend::ContainerReplicated(c) => c.port(),
            Backend::ContainerCluster(c) => c.addr().port(),
            Backend::Container(c) => c.port(),
            Backend::Url(u) => u.port(),
        }
    }

    /// The process id of a running process server; `None` for the other
    /// backends and after [`Server::kill`].
    pub fn pid(&self) -> Option<u32> {
        match &self.backend {
            Backend::Process(p) => p.pid(),
            Backend::Replicated(r) => r.primary().pid(),
            _ => None,
        }
    }

    /// The data directory of a process server (it holds `server.log`);
    /// `None` for the other backends.
    pub fn data_dir(&self) -> Option<PathBuf> {
        match &self.backend {
            Backend::Process(p) => Some(p.dir().to_path_buf()),
            Backend::Replicated(r) => Some(r.primary().dir().to_path_buf()),
            _ => None,
        }
    }

    /// The docker id of a container server; `None` for the other backends.
    pub fn container_id(&self) -> Option<String> {
        match &self.backend {
            Backend::Container(c) => Some(c.id().to_string()),
            _ => None,
        }
    }

    /// Freezes the server: it keeps its connections but answers nothing until
    /// [`Server::resume`]. Process: SIGSTOP, returning once the kernel reports
    /// the process stopped. Container: `docker pause` (cgroup freezer).
    pub async fn pause(&mut self) -> Result<(), ServerError> {
        match &mut self.backend {
            Backend::Process(p) => p.pause().await,
            Backend::Replicated(r) => r.primary_mut().pause().await,
            Backend::Cluster(_) | Backend::ContainerCluster(_) => Err(not_yet_on_cluster("pause")),
            Backend::ContainerReplicated(c) => c.pause().await,
            Backend::Container(c) => c.pause().await,
            Backend::Url(_) => Err(unsupported_on_url("pause")),
        }
    }

    /// Undoes [`Server::pause`]: SIGCONT, or `docker unpause`.
    pub async fn resume(&mut self) -> Result<(), ServerError> {
        match &mut self.backend {
            Backend::Process(p) => p.resume().await,
            Backend::Replicated(r) => r.primary_mut().resume().await,
            Backend::Cluster(_) | Backend::ContainerCluster(_) => Err(not_yet_on_cluster("resume")),
            Backend::ContainerReplicated(c) => c.resume().await,
            Backend::Container(c) => c.resume().await,
            Backend::Url(_) => Err(unsupported_on_url("resume")),
        }
    }

    /// Crashes the server without warning: SIGKILL and reap for a process
    /// (works while paused too), `docker kill` for a container. Only what the
    /// AOF already holds survives; see [`Persistence`]. Killing a killed
    /// server does nothing.
    pub async fn kill(&mut self) -> Result<(), ServerError> {
        match &mut self.backend {
            Backend::Process(p) => p.kill().await,
            Backend::Replicated(r) => {
                let killed = r.primary_mut().kill().await;
                r.reset_front();
                killed
            }
            Backend::Cluster(_) | Backend::ContainerCluster(_) => Err(not_yet_on_cluster("kill")),
            Backend::ContainerReplicated(c) => c.kill().await,
            Backend::Container(c) => c.kill().await,
            Backend::Url(_) => Err(unsupported_on_url("kill")),
        }
    }

    /// Starts the server again on the same data directory and the same port
    /// and returns once it answers PING (not LOADING), or fails past
    /// [`START_DEADLINE`] ([`CONTAINER_START_DEADLINE`] for a container). A
    /// server still running is killed first, so `restart` alone is a crash
    /// and recovery.
    pub async fn restart(&mut self) -> Result<(), ServerError> {
        match &mut self.backend {
            Backend::Process(p) => p.restart().await,
            Backend::Replicated(r) => r.primary_mut().restart().await,
            Backend::Cluster(_) | Backend::ContainerCluster(_) => {
                Err(not_yet_on_cluster("restart"))
            }
            Backend::ContainerReplicated(c) => c.restart().await,
            Backend::Container(c) => c.restart().await,
            Backend::Url(_) => Err(unsupported_on_url("restart")),
        }
    }

    /// Power loss: every byte the server wrote but did not fsync is lost,
    /// then it starts again on its own data directory and port, like
    /// [`Server::restart`]. A kill -9 keeps the page cache (everything
    /// written survives); this keeps only what an fsync or fdatasync made
    /// durable, so `appendfsync everysec` loses the last second or so of
    /// acknowledged writes and `appendonly no` everything since the last
    /// save. Needs [`Instruments::power_loss`] at start (the shim's cut
    /// signal, `SIGRTMIN+7`, makes it truncate each file to its synced
    /// length and exit). Returns what the cut dropped.
    pub async fn power_loss(&mut self) -> Result<PowerLoss, ServerError> {
        let loss = self.power_cut().await?;
        self.power_on().await?;
        Ok(loss)
    }

    /// Starts again what [`Server::power_cut`] cut, each node on its own
    /// data (a replicated set: the primary first, then the replicas, which
    /// resync from it; a single server: its restart, the shim loaded
    /// again); returns once it answers (every replica's link up).
    pub async fn power_on(&mut self) -> Result<(), ServerError> {
        match &mut self.backend {
            Backend::Process(p) => p.restart().await,
            Backend::Container(c) => c.restart().await,
            Backend::Replicated(r) => r.power_on().await,
            Backend::Cluster(c) => c.power_on().await,
            Backend::ContainerReplicated(c) => c.power_on().await,
            Backend::ContainerCluster(c) => c.power_on().await,
            Backend::Url(_) => Err(unsupported_on_url("power on")),
        }
    }

    /// [`Server::power_loss`] without the restart: the server stays down
    /// (its files cut) until [`Server::restart`].
    pub async fn power_cut(&mut self) -> Result<PowerLoss, ServerError> {
        match &mut self.backend {
            Backend::Process(p) => p.power_cut().await,
            Backend::Replicated(r) => r.power_cut().await,
            Backend::Container(c) => c.power_cut().await,
            Backend::Cluster(c) => c.power_cut().await,
            Backend::ContainerReplicated(c) => c.power_cut().await,
            Backend::ContainerCluster(c) => c.power_cut().await,
            Backend::Url(_) => Err(unsupported_on_url(
                "lose power (a server given as a URL is not this tool's to cut)",
            )),
        }
    }

    /// Moves the server's wall clock by `delta_ms` (forward when positive,
    /// back when negative) at run time, without a restart: `TIME`, a
    /// script's `TIME` and key expiry follow at the server's next clock read.
    /// The monotonic clock is untouched. Jumps add up; the offset persists
    /// across restarts. Needs [`Instruments::clock`] at start. Returns the
    /// offset from the real clock now in force, in milliseconds.
    pub fn jump_clock(&mut self, delta_ms: i64) -> Result<i64, ServerError> {
        match &mut self.backend {
            Backend::Process(p) => p.jump_clock(delta_ms),
            Backend::Container(c) => c.jump_clock(delta_ms),
            // A cluster's is its queue's primary's (`jump_primary_clock`),
            // a replicated set's its replicas' (`jump_replica_clocks`).
            Backend::Replicated(_)
            | Backend::ContainerReplicated(_)
            | Backend::Cluster(_)
            | Backend::ContainerCluster(_)
            | Backend::Url(_) => Err(self
                .backend
                .unsupported("jump the clock (only --server process or container for now)")),
        }
    }

    /// On a replicated set started with [`Instruments::clock`], jumps the
    /// clock of every replica by `delta_ms` (the primary's stays): a
    /// replica then disagrees with its primary, as a failover may find it.
    /// On a cluster, the replicas of the queue's primary ([`Server::focus`]).
    /// Answers each replica's address and new offset.
    pub async fn jump_replica_clocks(
        &mut self,
        delta_ms: i64,
    ) -> Result<Vec<(String, i64)>, ServerError> {
        match &mut self.backend {
            Backend::Replicated(r) => r.jump_replica_clocks(delta_ms),
            Backend::ContainerReplicated(r) => r.jump_replica_clocks(delta_ms),
            Backend::Cluster(c) => c.jump_replica_clocks(delta_ms).await,
            Backend::ContainerCluster(c) => c.jump_replica_clocks(delta_ms).await,
            _ => Err(self
                .backend
                .unsupported("jump a replica's clock (only a replicated set or a cluster)")),
        }
    }

    /// On a cluster started with [`Instruments::clock`], jumps the clock
    /// of the node that serves the queue's slot ([`Server::focus`]) by
    /// `delta_ms`, the other nodes' left alone. Answers that node's
    /// address and its new offset.
    pub async fn jump_primary_clock(
        &mut self,
        delta_ms: i64,
    ) -> Result<(String, i64), ServerError> {
        match &mut self.backend {
            Backend::Cluster(c) => c.jump_primary_clock(delta_ms).await,
            Backend::ContainerCluster(c) => c.jump_primary_clock(delta_ms).await,
            _ => Err(self.backend.unsupported(
                "jump the clock of the queue's primary alone (only --server cluster or \
                     container-cluster)",
            )),
        }
    }

    /// Moves every node's clock back to the real one (after
    /// [`Server::jump_clock`], [`Server::jump_replica_clocks`] or
    /// [`Server::jump_primary_clock`]); answers each node moved and its
    /// jump.
    pub fn align_clocks(&mut self) -> Result<Vec<(String, i64)>, ServerError> {
        match &mut self.backend {
            Backend::Replicated(r) => r.align_clocks(),
            Backend::ContainerReplicated(r) => r.align_clocks(),
            Backend::Cluster(c) => c.align_clocks(),
            Backend::ContainerCluster(c) => c.align_clocks(),
            Backend::Process(p) => {
                let addr = format!("127.0.0.1:{}", p.port());
                align_one(p.clock_offset_ms(), addr, |d| p.jump_clock(d))
            }
            Backend::Container(c) => {
                let addr = format!("127.0.0.1:{}", c.port());
                align_one(c.clock_offset_ms(), addr, |d| c.jump_clock(d))
            }
            Backend::Url(_) => Ok(Vec::new()),
        }
    }

    /// The libraries loaded into the server at start
    /// ([`Server::start_instrumented`]); none for a URL.
    pub fn instruments(&self) -> Instruments {
        match &self.backend {
            Backend::Process(p) => p.instruments(),
            Backend::Replicated(r) => r.instruments(),
            Backend::Container(c) => c.instruments(),
            Backend::Cluster(c) => c.instruments(),
            Backend::ContainerReplicated(c) => c.instruments(),
            Backend::ContainerCluster(c) => c.instruments(),
            Backend::Url(_) => Instruments::default(),
        }
    }

    /// The server clock's offset from the real one, in milliseconds, when
    /// it was started with [`Instruments::clock`].
    pub fn clock_offset_ms(&self) -> Option<i64> {
        match &self.backend {
            Backend::Process(p) => p.clock_offset_ms(),
            Backend::Container(c) => c.clock_offset_ms(),
            _ => None,
        }
    }

    /// Shuts the server down cleanly (SIGTERM, or `docker stop`), then removes
    /// its directory or container. Past [`STOP_DEADLINE`] the server is killed
    /// and [`ServerError::Stop`] returned. For a URL this only disconnects.
    pub async fn stop(self) -> Result<(), ServerError> {
        match self.backend {
            Backend::Process(p) => p.stop().await,
            Backend::Replicated(r) => r.stop().await,
            Backend::Cluster(c) => c.stop().await,
            Backend::ContainerReplicated(c) => c.stop().await,
            // Drop removes the containers and the network.
            Backend::ContainerCluster(_) => Ok(()),
            Backend::Container(c) => c.stop().await,
            Backend::Url(_) => Ok(()),
        }
    }

    /// The number of replicas behind the server's address: 0 for a single
    /// server.
    pub fn replicas(&self) -> usize {
        match &self.backend {
            Backend::Replicated(r) => r.replicas(),
            Backend::Cluster(c) => c.shape().1,
            Backend::ContainerCluster(c) => c.shape.1,
            Backend::ContainerReplicated(c) => c.replicas(),
            _ => 0,
        }
    }

    /// The loopback ports of every node behind the server's address, the
    /// primary first: one port for a single server.
    pub fn node_ports(&self) -> Vec<u16> {
        match &self.backend {
            Backend::Replicated(r) => r.ports(),
            Backend::Cluster(c) => c.ports(),
            Backend::ContainerReplicated(c) => c.node_ports(),
            _ => vec![self.port()],
        }
    }

    /// A client for every node whose counters make up the server's own
    /// account of a run: each node of a cluster (the primaries first), or
    /// the one address clients use.
    pub fn node_clients(&self) -> Vec<redis::Client> {
        let urls: Vec<String> = match &self.backend {
            Backend::Cluster(c) => c.ports().into_iter().map(local_url).collect(),
            Backend::ContainerCluster(c) => c
                .addrs()
                .into_iter()
                .map(|a| format!("redis://{a}/"))
                .collect(),
            _ => return vec![self.client()],
        };
        urls.iter()
            .filter_map(|u| redis::Client::open(u.as_str()).ok())
            .collect()
    }

    /// Replica lag: SIGSTOP (or `docker pause`) every replica. The primary
    /// goes on acknowledging writes no replica has yet. Only a replicated
    /// topology.
    pub async fn lag_replicas(&mut self) -> Result<(), ServerError> {
        match self.replicated("pause its replicas")? {
            Replicas::Processes(r) => r.lag().await,
            Replicas::Containers(c) => c.lag().await,
        }
    }

    /// Holds every replication link: the replicas stay up, the primary's
    /// stream stops reaching them (processes: it waits unread in the
    /// links, and a [`Server::failover`] drops it; containers: the primary
    /// is disconnected from the replication network, clients still reach
    /// it). Only a replicated topology.
    pub async fn hold_replication(&mut self) -> Result<(), ServerError> {
        match self.replicated("hold its replication links")? {
            Replicas::Processes(r) => {
                r.hold_links();
                Ok(())
            }
            Replicas::Containers(c) => c.hold_links().await,
        }
    }

    /// Undoes [`Server::hold_replication`]: the replicas catch up.
    pub async fn release_replication(&mut self) -> Result<(), ServerError> {
        match self.replicated("release its replication links")? {
            Replicas::Processes(r) => {
                r.release_links();
                Ok(())
            }
            Replicas::Containers(c) => c.release_links().await,
        }
    }

    /// Undoes [`Server::lag_replicas`].
    pub async fn resume_replicas(&mut self) -> Result<(), ServerError> {
        match self.replicated("resume its replicas")? {
            Replicas::Processes(r) => r.unlag().await,
            Replicas::Containers(c) => c.unlag().await,
        }
    }

    /// kill -9 of the primary, then the promotion of the replica with the
    /// largest replication offset (`REPLICAOF NO ONE`, the others
    /// repointed, the address clients use moved to it). Paused replicas
    /// are resumed first. What the primary acknowledged and no promoted
    /// data holds is lost.
    ///
    /// On a cluster (of processes, or of containers: `docker kill`): kill
    /// -9 of the primary of the focus slot ([`Server::focus`]), then a
    /// wait until the cluster's own failover promoted its replica (after
    /// `cluster-node-timeout`).
    pub async fn failover(&mut self) -> Result<Failover, ServerError> {
        match &mut self.backend {
            Backend::Cluster(c) => return c.failover().await,
            Backend::ContainerCluster(c) => return c.failover().await,
            _ => {}
        }
        match self.replicated("fail over")? {
            Replicas::Processes(r) => r.failover().await,
            Replicas::Containers(c) => c.failover().await,
        }
    }

    /// The primary a [`Server::failover`] killed restarts as a replica of
    /// the new one; its unreplicated writes are discarded by the sync.
    /// Returns its name, or `None` when no failover left one down.
    /// On a cluster the killed node restarts on its own `nodes.conf` and
    /// the cluster makes it a replica of the node promoted in its place.
    pub async fn rejoin(&mut self) -> Result<Option<String>, ServerError> {
        match &mut self.backend {
            Backend::Cluster(c) => return c.rejoin().await,
            Backend::ContainerCluster(c) => return c.rejoin().await,
            _ => {}
        }
        match self.replicated("rejoin its old primary")? {
            Replicas::Processes(r) => r.rejoin().await,
            Replicas::Containers(c) => c.rejoin().await,
        }
    }

    /// True for a cluster this tool started (of processes or of
    /// containers), the cluster whose nodes it can kill and fail over
    /// ([`Server::failover`], [`Server::takeover`]); false for a cluster
    /// reached by URL.
    pub fn is_own_cluster(&self) -> bool {
        matches!(
            self.backend,
            Backend::Cluster(_) | Backend::ContainerCluster(_)
        )
    }

    /// On a cluster, aims [`Server::failover`] and [`Server::takeover`] at
    /// the primary of `key`'s slot (a queue's key: its primary is the one
    /// whose loss the run can see). Elsewhere it does nothing.
    pub fn focus(&mut self, key: &str) {
        match &mut self.backend {
            Backend::Cluster(c) => c.focus(key),
            Backend::ContainerCluster(c) => c.focus(key),
            _ => {}
        }
    }

    /// Moves the focus slot to another primary, the `how` way: Valkey 9's
    /// atomic slot migration (`CLUSTER MIGRATESLOTS`: no `ASK` or
    /// `TRYAGAIN` on the way, `MOVED` after), or the classic one (`ASK`
    /// while the slot migrates, `TRYAGAIN` for a call some of whose keys
    /// have moved). Only a cluster this tool started.
    pub async fn migrate_slot(&mut self, how: MigrationKind) -> Result<Migration, ServerError> {
        match &mut self.backend {
            Backend::Cluster(c) => c.migrate_slot(how).await,
            Backend::ContainerCluster(c) => c.migrate_slot(how).await,
            _ => Err(self
                .backend
                .unsupported("migrate a slot (only --server cluster or container-cluster)")),
        }
    }

    /// `CLUSTER FAILOVER TAKEOVER` on a replica of the focus slot's
    /// primary: the replica takes the slots without the primary's
    /// agreement, the primary becomes its replica. Only a cluster this
    /// tool started.
    pub async fn takeover(&mut self) -> Result<Takeover, ServerError> {
        match &mut self.backend {
            Backend::Cluster(c) => c.takeover().await,
            Backend::ContainerCluster(c) => c.takeover().await,
            _ => Err(self.backend.unsupported(
                "take over a primary's slots (only --server cluster or container-cluster)",
            )),
        }
    }

    /// On a cluster of containers, cuts the focus slot's primary from the
    /// cluster bus network (clients still reach it) and waits until the
    /// cluster promoted a replica in its place (after
    /// `cluster-node-timeout`).
    pub async fn cut_primary(&mut self) -> Result<Cut, ServerError> {
        match &mut self.backend {
            Backend::ContainerCluster(c) => c.cut_focus().await,
            _ => Err(self.backend.unsupported(
                "cut a primary from the cluster bus (only --server container-cluster)",
            )),
        }
    }

    /// Undoes [`Server::cut_primary`] and waits until the node settled;
    /// `None` when none is cut.
    pub async fn reconnect_primary(&mut self) -> Result<Option<Reconnected>, ServerError> {
        match &mut self.backend {
            Backend::ContainerCluster(c) => c.reconnect().await,
            _ => Ok(None),
        }
    }

    /// Undoes [`Server::takeover`]: `CLUSTER FAILOVER FORCE` on the demoted
    /// primary once it replicates its successor. Returns its name, or
    /// `None` when no takeover is in force.
    pub async fn give_back(&mut self) -> Result<Option<String>, ServerError> {
        match &mut self.backend {
            Backend::Cluster(c) => c.give_back().await,
            Backend::ContainerCluster(c) => c.give_back().await,
            _ => Ok(None),
        }
    }

    fn replicated(&mut self, op: &'static str) -> Result<Replicas<'_>, ServerError> {
        let kind = self.kind();
        match &mut self.backend {
            Backend::Replicated(r) => Ok(Replicas::Processes(r)),
            Backend::ContainerReplicated(c) => Ok(Replicas::Containers(c)),
            _ => Err(ServerError::NotReplicated { backend: kind, op }),
        }
    }
}

/// The replicated backends, for their faults.
enum Replicas<'a> {
    Processes(&'a mut replicated::ReplicaSet),
    Containers(&'a mut container_set::ContainerSet),
}

/// Why a backend does not do an operation it may do one day.
const NOT_YET: &str = " (not implemented for this topology yet)";

/// Why a server given as a URL takes no fault.
const NOT_OURS: &str =
    ": ackgap does not own that server; use --server process or --server container for faults";

fn not_yet_on_cluster(op: &'static str) -> ServerError {
    ServerError::Unsupported {
        backend: "cluster",
        op,
        why: NOT_YET,
    }
}

fn unsupported_on_url(op: &'static str) -> ServerError {
    ServerError::Unsupported {
        backend: "url",
        op,
        why: NOT_OURS,
    }
}

fn local_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

/// `url` with the password replaced by `***`, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest_start = scheme_end + 3;
    let authority_end = url[rest_start..]
        .find('/')
        .map_or(url.len(), |i| rest_start + i);
    let authority = &url[rest_start..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_string();
    };
    let userinfo = &authority[..at];
    let user = userinfo.split(':').next().unwrap_or("");
    format!(
        "{}{user}:***{}",
        &url[..rest_start],
        &url[rest_start + at..]
    )
}

/// A single server's clock set back to the real one when it is `offset`
/// off, by `jump`: its address and the jump, or nothing.
fn align_one(
    offset: Option<i64>,
    addr: String,
    jump: impl FnOnce(i64) -> Result<i64, ServerError>,
) -> Result<Vec<(String, i64)>, ServerError> {
    match offset.filter(|&o| o != 0) {
        Some(offset) => {
            jump(-offset)?;
            Ok(vec![(addr, -offset)])
        }
        None => Ok(Vec::new()),
    }
}

/// Connection settings for probing a server: short, so a dead or paused
/// server costs one timeout, not a retry storm.
pub(crate) fn probe_config(timeout: Duration) -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
}

/// One connection attempt and one PING.
pub(crate) async fn ping_once(
    client: &redis::Client,
    timeout: Duration,
) -> Result<(), redis::RedisError> {
    let mut con = client
        .get_multiplexed_async_connection_with_config(&probe_config(timeout))
        .await?;
    redis::cmd("PING").query_async::<()>(&mut con).await
}

/// Polls PING until it answers or `deadline` passes. `exited` is asked
/// between attempts; when it reports that the server has died, waiting stops
/// at once with that reason. Returns the reason for failing otherwise.
pub(crate) async fn wait_for_ping(
    client: &redis::Client,
    deadline: Duration,
    mut exited: impl FnMut() -> Option<String>,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        if let Some(reason) = exited() {
            return Err(reason);
        }
        let last_error = match ping_once(client, Duration::from_millis(500)).await {
            Ok(()) => return Ok(()),
            Err(e) => e.to_string(),
        };
        if start.elapsed() >= deadline {
            return Err(format!(
                "did not answer PING within {} ms (last error: {last_error})",
                deadline.as_millis()
            ));
        }
        // The poll interval of a readiness wait, not an assertion on timing.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A primary of a cluster and the slots it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterPrimary {
    /// Where clients reach it (`ip:port`, as `CLUSTER SLOTS` names it).
    pub node: String,
    /// Its slot ranges, inclusive, in order.
    pub slots: Vec<(u16, u16)>,
}

/// The primaries of the cluster `client` reaches, each with its slots,
/// ordered by their first slot (`CLUSTER SLOTS`); empty when the server
/// is no cluster.
pub async fn cluster_primaries(client: &redis::Client) -> Result<Vec<ClusterPrimary>, String> {
    let reply: Result<redis::Value, redis::RedisError> = async {
        let mut con = client
            .get_multiplexed_async_connection_with_config(&probe_config(Duration::from_secs(5)))
            .await?;
        redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async::<redis::Value>(&mut con)
            .await
    }
    .await;
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) if e.to_string().contains("cluster support disabled") => return Ok(Vec::new()),
        Err(e) => return Err(format!("CLUSTER SLOTS: {e}")),
    };
    Ok(primaries_of(&reply))
}

/// The primaries in a `CLUSTER SLOTS` reply: each entry is `[start, end,
/// [ip, port, id, ...], replicas...]`.
fn primaries_of(reply: &redis::Value) -> Vec<ClusterPrimary> {
    use redis::Value;
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut out: Vec<ClusterPrimary> = Vec::new();
    let Value::Array(entries) = reply else {
        return out;
    };
    for entry in entries {
        let Value::Array(fields) = entry else {
            continue;
        };
        let (Some(from), Some(to), Some(Value::Array(node))) = (
            fields.first().and_then(int),
            fields.get(1).and_then(int),
            fields.get(2),
        ) else {
            continue;
        };
        let (Some(ip), Some(port)) = (node.first().and_then(text), node.get(1).and_then(int))
        else {
            continue;
        };
        let name = format!("{ip}:{port}");
        match out.iter_mut().find(|p| p.node == name) {
            Some(p) => p.slots.push((from, to)),
            None => out.push(ClusterPrimary {
                node: name,
                slots: vec![(from, to)],
            }),
        }
    }
    for p in &mut out {
        p.slots.sort();
    }
    out.sort_by_key(|p| p.slots.first().map_or(u16::MAX, |s| s.0));
    out
}

/// `valkey 9.1.2` or `redis 7.0.15`, from INFO server. Valkey reports
/// `server_name:valkey` and `valkey_version`; its `redis_version` is the
/// compatibility version (7.2.4), so `valkey_version` wins when present.
pub(crate) async fn server_software(
    client: &redis::Client,
    shown_url: &str,
) -> Result<String, ServerError> {
    let info = async {
        let mut con = client
            .get_multiplexed_async_connection_with_config(&probe_config(Duration::from_secs(5)))
            .await?;
        redis::cmd("INFO")
            .arg("server")
            .query_async::<String>(&mut con)
            .await
    }
    .await
    .map_err(|e| ServerError::Unreachable {
        url: shown_url.to_string(),
        reason: format!("INFO server failed: {e}"),
    })?;
    Ok(software_from_info(&info))
}

/// Whether the server at `client` is a cluster node (`INFO cluster` says
/// `cluster_enabled:1`).
pub(crate) async fn cluster_enabled(client: &redis::Client) -> redis::RedisResult<bool> {
    let mut con = client
        .get_multiplexed_async_connection_with_config(&probe_config(Duration::from_secs(5)))
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut con)
        .await?;
    Ok(info.lines().any(|l| l.trim_end() == "cluster_enabled:1"))
}

pub(crate) fn software_from_info(info: &str) -> String {
    let field = |name: &str| {
        info.lines().find_map(|line| {
            line.trim_end()
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(str::to_string)
        })
    };
    match (field("valkey_version"), field("redis_version")) {
        (Some(version), _) => format!("valkey {version}"),
        (None, Some(version)) => {
            let name = field("server_name").unwrap_or_else(|| "redis".to_string());
            format!("{name} {version}")
        }
        (None, None) => "unknown server".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistence_round_trips_through_its_display_form() {
        for p in [
            Persistence::None,
            Persistence::AofEverysec,
            Persistence::AofAlways,
        ] {
            assert_eq!(p.to_string().parse::<Persistence>().unwrap(), p);
        }
        assert!("sometimes".parse::<Persistence>().is_err());
    }

    #[test]
    fn server_spec_parses_the_three_forms_and_rejects_others() {
        assert_eq!(
            "process".parse::<ServerSpec>().unwrap(),
            ServerSpec::Process(ProcessOptions::default())
        );
        assert_eq!(
            "container".parse::<ServerSpec>().unwrap(),
            ServerSpec::Container
        );
        assert_eq!(
            "redis://u:p@h:1/2".parse::<ServerSpec>().unwrap(),
            ServerSpec::Url("redis://u:p@h:1/2".to_string())
        );
        assert_eq!(
            "replicated".parse::<ServerSpec>().unwrap(),
            ServerSpec::Replicated {
                replicas: 2,
                options: ProcessOptions::default()
            }
        );
        let three: ServerSpec = "replicated:3".parse().unwrap();
        assert_eq!(three.to_string().parse::<ServerSpec>().unwrap(), three);
        assert_eq!(three.redacted(), "replicated:3");
        assert_eq!(
            "cluster".parse::<ServerSpec>().unwrap().to_string(),
            "cluster:3x1"
        );
        assert_eq!(
            "cluster:2x0".parse::<ServerSpec>().unwrap().redacted(),
            "cluster:2x0"
        );
        for bad in [
            "replicated:0",
            "replicated:x",
            "replicated:",
            "cluster:3",
            "cluster:0x1",
            "cluster:3x9",
        ] {
            assert!(bad.parse::<ServerSpec>().is_err(), "{bad}");
        }
        let err = "valkey".parse::<ServerSpec>().unwrap_err().to_string();
        assert!(err.contains("process") && err.contains("container") && err.contains("redis://"));
    }

    #[test]
    fn cluster_slots_group_by_primary_and_order_by_first_slot() {
        use redis::Value;
        let node = |ip: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(ip.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let entry = |a: i64, b: i64, ip: &str, port: i64| {
            Value::Array(vec![Value::Int(a), Value::Int(b), node(ip, port)])
        };
        let reply = Value::Array(vec![
            entry(10923, 15999, "10.0.0.3", 6379),
            entry(0, 5460, "10.0.0.1", 6379),
            entry(5461, 10922, "10.0.0.2", 6379),
            entry(16000, 16000, "10.0.0.1", 6379),
        ]);
        let primaries = primaries_of(&reply);
        let nodes: Vec<&str> = primaries.iter().map(|p| p.node.as_str()).collect();
        assert_eq!(nodes, ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]);
        assert_eq!(primaries[0].slots, [(0, 5460), (16000, 16000)]);
        assert!(primaries_of(&Value::Nil).is_empty());
    }

    #[test]
    fn redact_url_hides_only_the_password() {
        assert_eq!(
            redact_url("redis://user:secret@host:1/0"),
            "redis://user:***@host:1/0"
        );
        assert_eq!(redact_url("redis://:secret@host:1"), "redis://:***@host:1");
        assert_eq!(redact_url("redis://host:1/"), "redis://host:1/");
    }

    #[test]
    fn software_prefers_valkey_version_over_the_compat_redis_version() {
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(software_from_info(valkey), "valkey 9.1.2");
        let redis = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:0\r\n";
        assert_eq!(software_from_info(redis), "redis 7.0.15");
    }
}
