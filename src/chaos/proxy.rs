//! The fault proxy: a TCP proxy on 127.0.0.1 between the workers and the
//! server that understands RESP frames.
//!
//! Each client (a worker) gets its own listening port, so a fault can aim
//! at one worker: the proxy knows who is behind a connection by the port it
//! came in on. On a cluster each client gets one port per node, and its
//! cluster client connects to each node through it
//! ([`Proxy::addresses`], redis-rs's `node_address_map`): every
//! connection of the worker, to whichever node, passes the proxy, and a
//! fault still aims at one worker. (Valkey's `cluster-announce-*` would
//! route clients through the proxy too, but a node announces one address
//! to every client: a fault could then aim at a node, not a worker.)
//!
//! Requests are cut into frames ([`super::resp`]); each request
//! forwarded upstream queues one *disposition* for its reply (forward,
//! swallow, delay, drop and reset), so replies stay matched to requests in
//! order.
//!
//! One-shot faults are *armed* on a client and hit its next script call
//! (`EVALSHA`, `EVAL`, `FCALL`): the queue's operations and the consumers'
//! effect scripts, not the handshake. A reply is never dropped on a live
//! connection — a client pairs replies with requests by order, so a missing
//! reply would shift every later one; TCP does not lose a segment without
//! breaking the connection either. So "drop a reply" swallows it and resets
//! the connection, and the client sees the outcome as unknown.
//!
//! The proxy stands in for the server, so a client reaches it with the
//! server's own URL, only readdressed ([`Proxy::url`]): the same user and
//! password, database and protocol. The handshake (`AUTH`, `HELLO`,
//! `SELECT`) passes through untouched, on the first connection and on
//! every reconnect after a reset or a partition.
//!
//! # Design notes
//!
//! The runner connects each worker's adapter through its port; producers,
//! the reaper and the final read connect directly. On a cluster (one the
//! tool started or one given as a URL) the runner reads the nodes' announced
//! addresses (`runner/context.rs`, `announced_nodes`), the proxy listens
//! once per worker and node, and each worker's queue gets
//! `QueueConfig::node_addresses` (the slot owner's connection is mapped
//! too), so network faults reach cluster clients. A reset or partition that
//! cut no connection through the proxy is not counted as fired
//! (`Proxy::partition_watched`: the first refused connection fires it).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

use super::resp;
use super::schedule::FaultKind;

/// A fault armed on a client, consumed by its next script call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Armed {
    /// Swallow the request and reset the connection.
    DropRequest,
    /// Forward the request, swallow its reply, reset the connection.
    DropReply,
    /// Hold the reply this long before forwarding it.
    DelayReply(Duration),
    /// Send the request twice; hide the second reply.
    Duplicate,
}

impl Armed {
    /// The fault kind this is.
    pub fn kind(self) -> FaultKind {
        match self {
            Armed::DropRequest => FaultKind::DropRequest,
            Armed::DropReply => FaultKind::DropReply,
            Armed::DelayReply(_) => FaultKind::DelayReply,
            Armed::Duplicate => FaultKind::DuplicateRequest,
        }
    }
}

/// What to do with one reply.
#[derive(Clone, Copy, Debug)]
enum Disposition {
    Forward,
    Swallow,
    Delay(Duration),
    DropAndReset,
}

/// Called when an armed fault actually hits: the kind, the client, and the
/// command it hit.
pub(crate) type FiredHook = Arc<dyn Fn(FaultKind, &str, &str) + Send + Sync>;

#[derive(Default)]
struct ClientState {
    armed: VecDeque<Armed>,
    partitioned: bool,
    /// A partition that has touched nothing yet: its first refused
    /// connection fires it ([`Proxy::partition_watched`]).
    watching: bool,
    conns: BTreeMap<u64, AbortHandle>,
}

struct Inner {
    clients: Mutex<BTreeMap<String, ClientState>>,
    next_conn: Mutex<u64>,
    fired: FiredHook,
}

impl Inner {
    fn with<T>(&self, client: &str, f: impl FnOnce(&mut ClientState) -> T) -> T {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        f(clients.entry(client.to_owned()).or_default())
    }
}

/// A running proxy. Dropping it closes every listener and connection.
pub(crate) struct Proxy {
    inner: Arc<Inner>,
    /// The server's URL, credentials included, readdressed per client.
    server_url: String,
    /// The upstream addresses: the server's, or every node of a cluster
    /// as the nodes announce themselves.
    upstreams: Vec<(String, u16)>,
    /// Each client's port for each upstream, in the order of `upstreams`.
    ports: BTreeMap<String, Vec<u16>>,
    listeners: Vec<AbortHandle>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("upstreams", &self.upstreams)
            .field("ports", &self.ports)
            .finish()
    }
}

impl Proxy {
    /// Starts one listener on a free loopback port per client name, each
    /// forwarding to the server of `server_url` (a `redis://` URL; the
    /// proxy carries plain TCP only, so a TLS or Unix socket address is
    /// refused with `InvalidInput`); on a cluster (`nodes`: the address
    /// each node announces, the first one reachable at `server_url` or
    /// any), one listener per client and node.
    pub async fn start(
        server_url: &str,
        clients: &[String],
        nodes: &[(String, u16)],
        fired: FiredHook,
    ) -> std::io::Result<Proxy> {
        let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        let client = redis::Client::open(server_url)
            .map_err(|_| invalid("the server URL does not parse".into()))?;
        let upstream = match client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
            other => {
                return Err(invalid(format!(
                    "the fault proxy carries plain TCP only, not {other}"
                )))
            }
        };
        let upstreams = if nodes.is_empty() {
            vec![upstream]
        } else {
            nodes.to_vec()
        };
        let inner = Arc::new(Inner {
            clients: Mutex::new(BTreeMap::new()),
            next_conn: Mutex::new(0),
            fired,
        });
        let mut ports = BTreeMap::new();
        let mut listeners = Vec::new();
        for name in clients {
            let mut own = Vec::new();
            for upstream in &upstreams {
                let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
                own.push(listener.local_addr()?.port());
                let task = tokio::spawn(accept_loop(
                    listener,
                    name.clone(),
                    upstream.clone(),
                    Arc::clone(&inner),
                ));
                listeners.push(task.abort_handle());
            }
            ports.insert(name.clone(), own);
        }
        Ok(Proxy {
            inner,
            server_url: server_url.to_string(),
            upstreams,
            ports,
            listeners,
        })
    }

    /// The URL `client` connects to: the server's URL with the address of
    /// `client`'s port, its credentials, database and query kept.
    /// On a cluster, the port of the first node.
    pub fn url(&self, client: &str) -> Option<String> {
        let port = *self.ports.get(client)?.first()?;
        crate::server::readdress(&self.server_url, "127.0.0.1", port).ok()
    }

    /// Where `client` connects for each node address a cluster announces:
    /// its own port of the proxy for that node (for a single server, its
    /// one address, which no client asks for). A cluster client given this
    /// map ([`crate::queue::QueueConfig::node_addresses`]) reaches every
    /// node through the proxy.
    pub fn addresses(&self, client: &str) -> BTreeMap<(String, u16), (String, u16)> {
        let Some(ports) = self.ports.get(client) else {
            return BTreeMap::new();
        };
        self.upstreams
            .iter()
            .zip(ports)
            .map(|(node, &port)| (node.clone(), ("127.0.0.1".to_string(), port)))
            .collect()
    }

    /// Arms a one-shot fault on `client`'s next script call.
    pub(crate) fn arm(&self, client: &str, fault: Armed) {
        self.inner.with(client, |c| c.armed.push_back(fault));
    }

    /// Resets every connection of `client`; answers how many there were.
    pub fn reset(&self, client: &str) -> usize {
        self.inner.with(client, |c| {
            let n = c.conns.len();
            for (_, conn) in std::mem::take(&mut c.conns) {
                conn.abort();
            }
            n
        })
    }

    /// Cuts `client` off: its connections are reset and new ones closed at
    /// once, until [`Proxy::heal`]. Answers how many connections it reset.
    pub fn partition(&self, client: &str) -> usize {
        self.inner.with(client, |c| c.partitioned = true);
        self.reset(client)
    }

    /// [`Proxy::partition`], which touched something only if it reset a
    /// connection: if it reset none, the first connection it refuses
    /// fires it ([`FaultKind::Partition`], through the fired hook), and a
    /// partition that never does touched nothing. Answers the connections
    /// reset.
    pub(crate) fn partition_watched(&self, client: &str) -> usize {
        let reset = self.partition(client);
        self.inner.with(client, |c| c.watching = reset == 0);
        reset
    }

    /// Ends `client`'s partition. Answers whether it touched anything: a
    /// connection reset or refused.
    pub(crate) fn unpartition(&self, client: &str) -> bool {
        self.inner.with(client, |c| {
            c.partitioned = false;
            !std::mem::take(&mut c.watching)
        })
    }

    /// Heals everything: every partition ends and every armed fault that has
    /// not fired is disarmed. Answers the faults disarmed.
    pub fn heal(&self) -> Vec<(String, FaultKind)> {
        let mut clients = self.inner.clients.lock().unwrap_or_else(|e| e.into_inner());
        let mut disarmed = Vec::new();
        for (name, c) in clients.iter_mut() {
            c.partitioned = false;
            c.watching = false;
            for a in c.armed.drain(..) {
                disarmed.push((name.clone(), a.kind()));
            }
        }
        disarmed
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for l in &self.listeners {
            l.abort();
        }
        let mut clients = self.inner.clients.lock().unwrap_or_else(|e| e.into_inner());
        for c in clients.values_mut() {
            for (_, conn) in std::mem::take(&mut c.conns) {
                conn.abort();
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    client: String,
    upstream: (String, u16),
    inner: Arc<Inner>,
) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        let (refused, first) = inner.with(&client, |c| {
            (
                c.partitioned,
                c.partitioned && std::mem::take(&mut c.watching),
            )
        });
        if refused {
            drop(socket);
            if first {
                (inner.fired)(FaultKind::Partition, &client, "connection refused");
            }
            continue;
        }
        let id = {
            let mut n = inner.next_conn.lock().unwrap_or_else(|e| e.into_inner());
            *n += 1;
            *n
        };
        // Register the connection before it can carry a request, so a reset
        // or a partition never misses it.
        let (start_tx, start_rx) = tokio::sync::oneshot::channel::<()>();
        let conn_inner = Arc::clone(&inner);
        let conn_client = client.clone();
        let conn_upstream = upstream.clone();
        let task = tokio::spawn(async move {
            if start_rx.await.is_err() {
                return;
            }
            let _ = connection(socket, &conn_client, &conn_upstream, &conn_inner).await;
            conn_inner.with(&conn_client, |c| c.conns.remove(&id));
        });
        inner.with(&client, |c| c.conns.insert(id, task.abort_handle()));
        let _ = start_tx.send(());
    }
}

/// A request whose reply was to be dropped, cut off by another fault (a
/// dropped request, a reset) before its reply came: the reply was dropped
/// all the same, after the request went upstream.
struct Unanswered<'a> {
    replies: &'a Mutex<VecDeque<Disposition>>,
    inner: &'a Inner,
    client: &'a str,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        let left = std::mem::take(&mut *self.replies.lock().unwrap_or_else(|e| e.into_inner()));
        for d in left {
            if matches!(d, Disposition::DropAndReset) {
                (self.inner.fired)(
                    FaultKind::DropReply,
                    self.client,
                    "reply (connection closed first)",
                );
            }
        }
    }
}

/// Serves one client connection until either side closes, a fault resets
/// it, or its task is aborted.
async fn connection(
    client_sock: TcpStream,
    client: &str,
    upstream: &(String, u16),
    inner: &Inner,
) -> std::io::Result<()> {
    let (host, port) = upstream;
    let upstream = TcpStream::connect((host.as_str(), *port)).await?;
    let _ = upstream.set_nodelay(true);
    let _ = client_sock.set_nodelay(true);
    let (mut client_rd, mut client_wr) = client_sock.into_split();
    let (mut up_rd, mut up_wr) = upstream.into_split();
    let replies: Mutex<VecDeque<Disposition>> = Mutex::new(VecDeque::new());
    // Runs however the connection ends, an abort by a reset included.
    let _unanswered = Unanswered {
        replies: &replies,
        inner,
        client,
    };
    let push = |d: Disposition| {
        replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(d)
    };

    let requests = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = client_rd.read(&mut chunk).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            buf.extend_from_slice(&chunk[..n]);
            let frames = resp::split_frames(&mut buf)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            for frame in frames {
                let cmd = resp::command(&frame).unwrap_or_default();
                let armed = if matches!(cmd.as_str(), "EVALSHA" | "EVAL" | "FCALL") {
                    inner.with(client, |c| c.armed.pop_front())
                } else {
                    None
                };
                match armed {
                    None => {
                        push(Disposition::Forward);
                        up_wr.write_all(&frame).await?;
                    }
                    Some(Armed::DropRequest) => {
                        (inner.fired)(FaultKind::DropRequest, client, &cmd);
                        return Ok(());
                    }
                    Some(Armed::DropReply) => {
                        push(Disposition::DropAndReset);
                        up_wr.write_all(&frame).await?;
                    }
                    Some(Armed::DelayReply(d)) => {
                        push(Disposition::Delay(d));
                        up_wr.write_all(&frame).await?;
                    }
                    Some(Armed::Duplicate) => {
                        (inner.fired)(FaultKind::DuplicateRequest, client, &cmd);
                        push(Disposition::Forward);
                        push(Disposition::Swallow);
                        let mut twice = frame.clone();
                        twice.extend_from_slice(&frame);
                        up_wr.write_all(&twice).await?;
                    }
                }
            }
        }
    };
    let replies_pump = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let n = up_rd.read(&mut chunk).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            buf.extend_from_slice(&chunk[..n]);
            let frames = resp::split_frames(&mut buf)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            for frame in frames {
                // RESP3 pushes answer no request.
                let disposition = if frame.first() == Some(&b'>') {
                    Disposition::Forward
                } else {
                    replies
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .pop_front()
                        .unwrap_or(Disposition::Forward)
                };
                match disposition {
                    Disposition::Forward => client_wr.write_all(&frame).await?,
                    Disposition::Swallow => {}
                    Disposition::Delay(d) => {
                        (inner.fired)(FaultKind::DelayReply, client, "reply");
                        tokio::time::sleep(d).await;
                        client_wr.write_all(&frame).await?;
                    }
                    Disposition::DropAndReset => {
                        (inner.fired)(FaultKind::DropReply, client, "reply");
                        return Ok(());
                    }
                }
            }
        }
    };
    tokio::select! {
        r = requests => r,
        r = replies_pump => r,
    }
}
