//! What the tasks of a run share: the context, the worker slots, the
//! connections.

use super::*;
use crate::adapter::{BoxFuture, Exec, ExecError, ExecOptions};
use crate::chaos::fault::Topology;

/// One worker's fixed parts.
pub(super) struct Slot {
    pub(super) name: String,
    pub(super) adapter: Arc<dyn Adapter>,
    /// Worker faults armed on this worker, with their stall (ms).
    pub(super) armed: Mutex<VecDeque<(FaultKind, u64)>>,
    /// The heartbeat skips its extends until this time (ms since start).
    pub(super) silent_until_ms: AtomicU64,
}

/// What the tasks of a run share.
pub(super) struct Ctx {
    pub(super) cfg: ChaosConfig,
    pub(super) rec: Recorder,
    pub(super) start: Instant,
    pub(super) consumer: Arc<dyn Consumer>,
    pub(super) slots: Vec<Slot>,
    /// The direct (unproxied) adapter: producers, reaper, reads.
    pub(super) direct: Arc<dyn Adapter>,
    pub(super) stop_workers: AtomicBool,
    pub(super) ops: AtomicU64,
    /// Serializes the nemesis's invoke/ok pairs (the nemesis, the proxy
    /// and the workers all note fault events).
    pub(super) nemesis: Mutex<()>,
    pub(super) injected: Mutex<BTreeMap<FaultKind, u64>>,
    pub(super) fired: Mutex<BTreeMap<FaultKind, u64>>,
    pub(super) acknowledged: Mutex<BTreeSet<String>>,
    /// The workload's draws ([`ChaosConfig::draws`]).
    pub(super) draws: Draws,
    /// Ids by the class the run last saw them in (the duplicate enqueues
    /// aim at them).
    pub(super) pools: Mutex<Pools>,
    /// Each job's leases the run saw so far (a delivery's number decides
    /// whether its handler fails).
    pub(super) deliveries: Mutex<HashMap<String, u64>>,
    /// The fails and duplicate enqueues sent, and their answers.
    pub(super) workload: Mutex<Workload>,
    /// Why the server could not be brought back from a fault (a restart
    /// that failed, a cluster that forgot itself): the run stops there.
    pub(super) server_lost: Mutex<Option<String>>,
    /// How late the nemesis and the workers ran ([`SlipLog`]).
    pub(super) slip: SlipLog,
}

/// Ids by the class the run last saw them in ([`Seen`]): a vector per class
/// for a drawn pick in constant time, and each id's class and place.
#[derive(Debug, Default)]
pub(super) struct Pools {
    place: HashMap<String, (Seen, usize)>,
    ids: [Vec<String>; 3],
}

impl Pools {
    fn slot(class: Seen) -> usize {
        match class {
            Seen::Pending => 0,
            Seen::Active => 1,
            Seen::Finished => 2,
        }
    }

    /// Moves `id` to `class` (adding it if new).
    pub(super) fn set(&mut self, id: &str, class: Seen) {
        if let Some(&(was, at)) = self.place.get(id) {
            if was == class {
                return;
            }
            let list = &mut self.ids[Self::slot(was)];
            list.swap_remove(at);
            if let Some(moved) = list.get(at) {
                self.place.insert(moved.clone(), (was, at));
            }
        }
        let list = &mut self.ids[Self::slot(class)];
        self.place.insert(id.to_owned(), (class, list.len()));
        list.push(id.to_owned());
    }

    /// Adds `id` as pending unless the run has seen it already (a lease
    /// may be answered before its enqueue's acknowledgement is noted).
    pub(super) fn admit(&mut self, id: &str) {
        if !self.place.contains_key(id) {
            self.set(id, Seen::Pending);
        }
    }

    /// An id of `class` picked by `r`, or of the next class that has one
    /// (pending, active, finished, round).
    pub(super) fn pick(&self, class: Seen, r: u64) -> Option<(Seen, String)> {
        let start = Self::slot(class);
        (0..3).find_map(|k| {
            let slot = (start + k) % 3;
            let list = &self.ids[slot];
            (!list.is_empty()).then(|| {
                let id = list[(r % list.len() as u64) as usize].clone();
                (Seen::ALL[slot], id)
            })
        })
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ctx {
    pub(super) fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Sleeps `d` as a worker or heartbeat does, noting how late it woke.
    pub(super) async fn nap(&self, d: Duration) {
        let threshold = Duration::from_millis(slip::threshold_ms(self.cfg.lease_ms));
        self.slip.nap(d, threshold).await
    }

    /// Counts one operation, for the progress line.
    pub(super) fn count(&self) {
        self.ops.fetch_add(1, Ordering::Relaxed);
    }

    /// `adapter`'s calls, recorded as `process`.
    pub(super) fn recorded(&self, adapter: &Arc<dyn Adapter>, process: &str) -> Recorded {
        Recorded::new(Arc::clone(adapter), &self.rec, process)
    }

    /// Records one fault event as a `fault` operation of the nemesis: the
    /// typed payload ([`FaultEvent`]), `extra` its detail.
    pub(super) fn note(
        &self,
        kind: FaultKind,
        action: Action,
        target: Option<&str>,
        extra: serde_json::Value,
        error: Option<String>,
    ) {
        let _guard = lock(&self.nemesis);
        let nemesis = Process::new(&self.rec, "nemesis");
        let event = FaultEvent::new(kind, action, target, extra);
        match error {
            None => nemesis.fault(Ok(event)),
            // A clock move that failed may have moved a clock midway: the
            // event keeps its kind for the checkers.
            Some(e) if kind.spec().moves_clock => nemesis.fault_failed(event, e),
            Some(e) => nemesis.fault(Err(e)),
        }
    }

    pub(super) fn fire(&self, kind: FaultKind, target: &str, what: serde_json::Value) {
        *lock(&self.fired).entry(kind).or_default() += 1;
        self.note(
            kind,
            Action::Fired,
            Some(target),
            json!({"hit": what}),
            None,
        );
    }
}

/// Opens the queue under test on a server URL (see [`ChaosSubject`]).
pub type OpenAdapter =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<Arc<dyn Adapter>, String>> + Send + Sync>;

/// A queue under test and a consumer of the caller's own, for
/// [`super::run_with`]: what a library user runs chaos on, in place of
/// [`ChaosConfig::queue`] and [`ChaosConfig::consumer`] (which then only
/// name them in the report).
#[derive(Clone)]
pub struct ChaosSubject {
    /// Opens the queue under test on a server URL, each time on a
    /// connection of its own: once with the server's URL (producers, the
    /// reaper, the reads) and once per worker with its fault-proxy URL, so
    /// that a network fault cuts only that worker.
    pub open: OpenAdapter,
    /// What the workers do with a delivery; its effects are counted for
    /// effect-once.
    pub consumer: Arc<dyn Consumer>,
}

impl std::fmt::Debug for ChaosSubject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChaosSubject")
            .field("consumer", &self.consumer.name())
            .finish_non_exhaustive()
    }
}

/// The run's adapters: the direct one on `server_url` (producers, the
/// reaper, the reads; the queue cleared through it) and one per worker of
/// `workers` (name, fault-proxy URL). A shipped queue connects each on its
/// own URL; an `exec:` queue starts ONE child whose hello names each
/// worker's URL in `connections`, and each worker gets a handle of it
/// ([`crate::adapter::Exec::for_worker`]).
/// A caller's own `open` ([`ChaosSubject::open`]) opens each of them
/// instead.
///
/// On a cluster `addresses` maps each worker to where it connects for
/// each node ([`crate::queue::QueueConfig::node_addresses`]): a shipped
/// queue's cluster client reaches every node through the worker's ports
/// of the fault proxy. An `exec:` queue or a caller's own `open` gets the
/// URL alone: its connections to other nodes bypass the proxy, and a
/// network fault that touches none of them is reported as not fired.
pub(super) async fn connect_run(
    cfg: &ChaosConfig,
    server_url: &str,
    workers: &[(String, String)],
    addresses: &BTreeMap<String, NodeAddresses>,
    own: Option<&OpenAdapter>,
) -> Result<(Arc<dyn Adapter>, Vec<Arc<dyn Adapter>>), ChaosError> {
    // An adapter the binary carries is an `exec:` one (its command).
    let spec = crate::adapter::shipped::exec_spec(&cfg.queue)
        .map_err(|e| ChaosError::Adapter(e.to_string()))?;
    let (direct, adapters): (Arc<dyn Adapter>, Vec<Arc<dyn Adapter>>) =
        match (own, spec.strip_prefix("exec:")) {
            (Some(open), _) => {
                let unavailable =
                    |e: String| ChaosError::Unavailable(format!("cannot open the queue: {e}"));
                let mut adapters = Vec::new();
                for (_, url) in workers {
                    adapters.push(open(url.clone()).await.map_err(unavailable)?);
                }
                (
                    open(server_url.to_owned()).await.map_err(unavailable)?,
                    adapters,
                )
            }
            (None, Some(command)) => {
                let queue = connect_queue(cfg, server_url, NodeAddresses::new()).await?;
                let options = ExecOptions {
                    request_timeout: cfg.response_timeout(),
                    connections: workers.iter().cloned().collect(),
                    ..ExecOptions::default()
                };
                let exec = Exec::start(command, &queue, server_url, options)
                    .await
                    .map_err(|e| match e {
                        ExecError::Empty => ChaosError::Usage(e.to_string()),
                        other => ChaosError::Adapter(other.to_string()),
                    })?;
                let adapters = workers
                    .iter()
                    .map(|(name, _)| Arc::new(exec.for_worker(name)) as Arc<dyn Adapter>)
                    .collect();
                (Arc::new(exec), adapters)
            }
            (None, None) => {
                let mut adapters = Vec::new();
                for (name, url) in workers {
                    let nodes = addresses.get(name).cloned().unwrap_or_default();
                    adapters.push(connect(cfg, url, nodes).await?);
                }
                (
                    connect(cfg, server_url, NodeAddresses::new()).await?,
                    adapters,
                )
            }
        };
    direct
        .clear()
        .await
        .map_err(|e| ChaosError::Unavailable(format!("cannot clear the queue: {e}")))?;
    Ok((direct, adapters))
}

/// Where a worker connects for each address a cluster's nodes announce.
pub(super) type NodeAddresses = BTreeMap<(String, u16), (String, u16)>;

/// A shipped queue on `url`.
async fn connect(
    cfg: &ChaosConfig,
    url: &str,
    nodes: NodeAddresses,
) -> Result<Arc<dyn Adapter>, ChaosError> {
    let queue = connect_queue(cfg, url, nodes).await?;
    crate::adapter::by_name(&cfg.queue, &queue.on_server_clock()).map_err(ChaosError::Usage)
}

/// ackgap's own connection to the queue on `url`.
async fn connect_queue(
    cfg: &ChaosConfig,
    url: &str,
    nodes: NodeAddresses,
) -> Result<Queue, ChaosError> {
    let client = redis::Client::open(url)
        .map_err(|e| ChaosError::Internal(format!("bad proxy URL {url}: {e}")))?;
    let config = QueueConfig {
        response_timeout: cfg.response_timeout(),
        connect_timeout: Duration::from_secs(2),
        durability: cfg.durability,
        node_addresses: nodes,
        ..QueueConfig::default()
    };
    Queue::connect_with(&client, &cfg.queue_name, config)
        .await
        .map_err(|e| match e {
            QueueError::QueueName(_) => ChaosError::Usage(e.to_string()),
            other => ChaosError::Unavailable(format!("cannot reach the queue: {other}")),
        })
}

/// Aborts a task when dropped: a worker's heartbeat dies with the worker.
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The address each node of `server` announces to clients (`CLUSTER
/// NODES`), the node at its URL first: the fault proxy's upstreams
/// ([`super::super::proxy::Proxy::start`]). Empty when the server is not a
/// cluster (its [`Shape`], which already asked).
pub(super) async fn announced_nodes(server: &Server) -> Result<Vec<(String, u16)>, ChaosError> {
    if !matches!(
        Shape::of(server).topology,
        Topology::Cluster { .. } | Topology::Url { cluster: true }
    ) {
        return Ok(Vec::new());
    }
    let url = server.url();
    let unavailable = |e: redis::RedisError| {
        ChaosError::Unavailable(format!("cannot read the cluster's nodes: {e}"))
    };
    let client = redis::Client::open(url.as_str())
        .map_err(|e| ChaosError::Internal(format!("bad server URL {url}: {e}")))?;
    let read = async {
        let mut con = client.get_multiplexed_async_connection().await?;
        redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async::<String>(&mut con)
            .await
    };
    let nodes = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .map_err(|_| {
            ChaosError::Unavailable("cannot read the cluster's nodes: no answer in 5 s".into())
        })?
        .map_err(unavailable)?;
    Ok(parse_cluster_nodes(&nodes))
}

/// The client addresses of `CLUSTER NODES`' lines (`id ip:port@bus[,host]
/// flags ...`), the `myself` line first; a node without an address
/// (`:0`) is left out.
fn parse_cluster_nodes(text: &str) -> Vec<(String, u16)> {
    let mut nodes = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        let client = addr.split(['@', ',']).next().unwrap_or_default();
        let Some((host, port)) = client.rsplit_once(':') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        if host.is_empty() || port == 0 {
            continue;
        }
        let node = (host.to_string(), port);
        if flags.split(',').any(|f| f == "myself") {
            nodes.insert(0, node);
        } else {
            nodes.push(node);
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_move_ids_between_classes_and_a_pick_falls_back_to_the_next_class() {
        let mut pools = Pools::default();
        assert_eq!(pools.pick(Seen::Pending, 0), None);
        for id in ["a", "b", "c"] {
            pools.admit(id);
        }
        pools.set("a", Seen::Active);
        pools.set("b", Seen::Finished);
        // A lease noted before its enqueue's acknowledgement stays active.
        pools.admit("a");
        assert_eq!(
            pools.pick(Seen::Active, 7),
            Some((Seen::Active, "a".into()))
        );
        assert_eq!(
            pools.pick(Seen::Finished, 0),
            Some((Seen::Finished, "b".into()))
        );
        assert_eq!(
            pools.pick(Seen::Pending, 5),
            Some((Seen::Pending, "c".into()))
        );
        // `c` moves out of pending: the next class with an id answers.
        pools.set("c", Seen::Finished);
        assert_eq!(
            pools.pick(Seen::Pending, 0),
            Some((Seen::Active, "a".into()))
        );
        let finished: BTreeSet<String> = (0..4)
            .filter_map(|r| pools.pick(Seen::Finished, r).map(|(_, id)| id))
            .collect();
        assert_eq!(finished, BTreeSet::from(["b".into(), "c".into()]));
        // The swap-remove kept every place right.
        pools.set("b", Seen::Pending);
        assert_eq!(
            pools.pick(Seen::Finished, 0),
            Some((Seen::Finished, "c".into()))
        );
        assert_eq!(
            pools.pick(Seen::Pending, 0),
            Some((Seen::Pending, "b".into()))
        );
    }

    #[test]
    fn cluster_nodes_give_each_client_address_the_queried_node_first() {
        let text = "\
a1 127.0.0.1:7001@17001 master - 0 1 1 connected 0-5460
b2 127.0.0.1:7002@17002,node-b myself,master - 0 0 2 connected 5461-10922
c3 :0@0 master,fail,noaddr - 0 0 3 disconnected
d4 172.18.0.5:6379@16379 slave b2 0 1 2 connected
";
        assert_eq!(
            parse_cluster_nodes(text),
            vec![
                ("127.0.0.1".to_string(), 7002),
                ("127.0.0.1".to_string(), 7001),
                ("172.18.0.5".to_string(), 6379),
            ]
        );
    }
}
