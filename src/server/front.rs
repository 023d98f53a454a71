//! The stable address of a replicated topology: a loopback TCP forwarder
//! that sends every connection to the current primary, as a virtual IP or
//! a Sentinel-aware client does in a real deployment.
//!
//! Clients get the front's URL and never learn the nodes' ports. A
//! failover repoints the front ([`Front::repoint`]): every connection open
//! through it is closed at once (a client with a request in flight sees
//! the connection dropped, an unknown outcome) and new connections reach
//! the promoted node. A connection forwards bytes unchanged, one client
//! connection to one server connection, so `WAIT` after a write on it
//! counts that write.
//!
//! The same forwarder carries each replica's replication link (the
//! replica's `REPLICAOF` names its own forwarder, which points at the
//! current primary), so that a fault can hold a link ([`Front::hold`]: the
//! primary's stream stays unread in the forwarder's socket) and a failover
//! can cut it with whatever it held, which then never reaches the replica.
//!
//! The forwarder's tasks run on the runtime that started the topology and
//! end when the [`Front`] is dropped (the accept task owns a `JoinSet` of
//! the connections, and aborting it drops them all).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::ServerError;

/// A forwarder from a loopback port of its own to the current primary's port.
/// Where a front forwards, which generation of connections is current (a
/// connection of an older one closes), and whether the server's bytes are
/// held back.
#[derive(Clone, Copy, Debug)]
struct State {
    target: SocketAddr,
    generation: u64,
    held: bool,
}

#[derive(Debug)]
pub(crate) struct Front {
    port: u16,
    /// The state every connection watches.
    target: Arc<watch::Sender<State>>,
    accept: JoinHandle<()>,
}

impl Front {
    /// Listens on a free loopback port and forwards to `127.0.0.1:target`.
    pub(crate) async fn start(target: u16) -> Result<Front, ServerError> {
        Front::start_to(loopback(target)).await
    }

    /// Listens on a free loopback port and forwards to `target` (a
    /// container's address on a network of its own).
    pub(crate) async fn start_to(target: SocketAddr) -> Result<Front, ServerError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| ServerError::io("binding the topology's front port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| ServerError::io("reading the front's port", e))?
            .port();
        let (tx, _) = watch::channel(State {
            target,
            generation: 0,
            held: false,
        });
        let tx = Arc::new(tx);
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&tx)));
        Ok(Front {
            port,
            target: tx,
            accept,
        })
    }

    /// The port clients connect to.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Sends new connections to `127.0.0.1:target` and closes every open one.
    pub(crate) fn repoint(&self, target: u16) {
        self.repoint_to(loopback(target));
    }

    /// Sends new connections to `target` and closes every open one.
    pub(crate) fn repoint_to(&self, target: SocketAddr) {
        self.target.send_modify(|s| {
            s.target = target;
            s.generation += 1;
        });
    }

    /// Closes every open connection without changing the target (a primary
    /// killed: its connections are dead anyway, and a client must not wait
    /// on a half-open one), and ends a hold: what it kept is dropped.
    pub(crate) fn reset(&self) {
        self.target.send_modify(|s| {
            s.generation += 1;
            s.held = false;
        });
    }

    /// Stops (or resumes) forwarding the server's bytes to the client: the
    /// client's requests still go through, the answers wait unread.
    pub(crate) fn hold(&self, held: bool) {
        self.target.send_modify(|s| s.held = held);
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, target: Arc<watch::Sender<State>>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let rx = target.subscribe();
                connections.spawn(forward(client, rx));
            }
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Forwards one client connection to the target of the moment until
/// either side closes or the front is repointed or reset.
async fn forward(client: TcpStream, mut rx: watch::Receiver<State>) {
    let State {
        target, generation, ..
    } = *rx.borrow_and_update();
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut held = rx.clone();
    // The server's bytes, unless held.
    let down = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let current = held
                .wait_for(|s| !s.held || s.generation != generation)
                .await
                .map(|s| s.generation == generation)
                .unwrap_or(false);
            if !current {
                return;
            }
            tokio::select! {
                read = server_read.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if client_write.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                },
                // A hold (or a reset) cancels the read: nothing was taken.
                current = async {
                    held.wait_for(|s| s.held || s.generation != generation)
                        .await
                        .map(|s| s.generation == generation)
                        .unwrap_or(false)
                } => {
                    if !current {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = tokio::io::copy(&mut client_read, &mut server_write) => {}
        _ = down => {}
        _ = async {
            while rx.changed().await.is_ok() {
                if rx.borrow().generation != generation {
                    return;
                }
            }
            // The front is gone.
        } => {}
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}
