//! The fault schedule: which fault fires when, and at whom, drawn from the
//! seed alone (`ChaCha8Rng`), before the run starts. The same seed and the
//! same settings give the same schedule, whatever the interleaving of the
//! run that follows; what a fault then hits (which job a dropped reply
//! belonged to) depends on timing and is recorded, not predicted.
//!
//! Every enabled kind fires at least once, early enough in the faults
//! phase to find work to disturb; more draws follow, one per two seconds of
//! the phase. Server faults never overlap: each starts after the previous
//! one has healed. A server kill is never drawn in the first fifth of the
//! phase, so acknowledged enqueues always precede it.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One kind of fault. Its name is what `--faults` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FaultKind {
    /// A worker crashes after its lease, before the effect.
    CrashBeforeEffect,
    /// A worker crashes after the effect, before the ack (the ack gap).
    CrashAckGap,
    /// A worker sends its ack and crashes without reading the reply.
    CrashAfterAck,
    /// A worker (heartbeat included) stalls past its lease deadline, then
    /// applies the effect and acks the stale lease.
    StalePause,
    /// A worker's heartbeat stops while its handler works past the deadline.
    HeartbeatStop,
    /// The proxy swallows a worker's next script call and resets its
    /// connection: the request never reaches the server.
    DropRequest,
    /// The proxy forwards a script call, swallows the server's reply and
    /// resets the connection: the script ran, the worker cannot know.
    DropReply,
    /// The proxy holds a reply past the lease deadline.
    DelayReply,
    /// The proxy sends a script call twice and hides the second reply.
    DuplicateRequest,
    /// The proxy resets every connection of a worker.
    ResetConnection,
    /// The proxy cuts a worker off (resets and refuses its connections)
    /// for a while.
    Partition,
    /// The server is paused (SIGSTOP / docker pause), then resumed.
    ServerPause,
    /// The server is killed (SIGKILL / docker kill) and restarted under its
    /// persistence mode; the script cache is lost with it.
    ServerKill,
    /// `SCRIPT FLUSH` and `FUNCTION FLUSH`: the script cache and the
    /// function libraries are emptied; clients must reload on `NOSCRIPT`,
    /// or load their library again when a function is not found.
    ScriptFlush,
    /// Replica lag: every replica is paused (SIGSTOP) for a while, then
    /// resumed; the primary goes on acknowledging writes. Needs
    /// `--server replicated`.
    ReplicaLag,
    /// kill -9 of the primary and the promotion of the replica with the
    /// largest offset (`REPLICAOF NO ONE`, the others repointed); the heal
    /// restarts the old primary as a replica of the new one, its
    /// unreplicated writes discarded. Needs `--server replicated`.
    Failover,
    /// The replication links held (the replicas up and connected, the
    /// primary's stream kept from them), then a failover at the end of the
    /// window: every write the primary acknowledged meanwhile is on no
    /// replica when one is promoted. The old primary rejoins as a replica
    /// at once. Needs `--server replicated`.
    LagFailover,
    /// The primary cut from its replicas (the links held) and from every
    /// other worker (the fault proxy partitions w0, w2, …) while the rest
    /// go on writing to it; the heal fails over to a replica, rejoins the
    /// old primary as a replica and ends the clients' partition: what the
    /// primary acknowledged to the clients it kept is on no replica. Needs
    /// `--server replicated`. On `--server container-cluster` the queue's
    /// primary is cut from the cluster bus network until the cluster
    /// promoted its replica (every client still reaches it: a cluster
    /// client connects past the proxy); the heal reconnects it and it
    /// comes back a replica of its successor.
    PrimaryPartition,
    /// `CLUSTER FAILOVER TAKEOVER` on a replica of the queue's primary:
    /// it takes the slots without the primary's agreement; the heal gives
    /// them back with `CLUSTER FAILOVER FORCE` on the old primary. Needs
    /// `--server cluster` with replicas.
    Takeover,
}

/// Which part of the system a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// One worker process.
    Worker,
    /// One worker's connections, through the proxy.
    Network,
    /// The server.
    Server,
}

impl FaultKind {
    /// The kinds that need a replicated server, outside [`FaultKind::ALL`]
    /// (so `all` stays what a single server supports); `--faults
    /// replication` names them.
    pub const REPLICATION: [FaultKind; 4] = [
        FaultKind::ReplicaLag,
        FaultKind::Failover,
        FaultKind::LagFailover,
        FaultKind::PrimaryPartition,
    ];

    /// The kinds a cluster (of processes or containers) supports besides the worker faults
    /// and `script-flush`: kill -9 of the queue's primary and the
    /// cluster's own failover (`failover`), and `takeover`; `--faults
    /// cluster` names them.
    pub const CLUSTER: [FaultKind; 2] = [FaultKind::Failover, FaultKind::Takeover];

    /// Every kind, in a stable order.
    pub const ALL: [FaultKind; 14] = [
        FaultKind::CrashBeforeEffect,
        FaultKind::CrashAckGap,
        FaultKind::CrashAfterAck,
        FaultKind::StalePause,
        FaultKind::HeartbeatStop,
        FaultKind::DropRequest,
        FaultKind::DropReply,
        FaultKind::DelayReply,
        FaultKind::DuplicateRequest,
        FaultKind::ResetConnection,
        FaultKind::Partition,
        FaultKind::ServerPause,
        FaultKind::ServerKill,
        FaultKind::ScriptFlush,
    ];

    /// The name `--faults` takes.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::CrashBeforeEffect => "crash-before-effect",
            FaultKind::CrashAckGap => "crash-ack-gap",
            FaultKind::CrashAfterAck => "crash-after-ack",
            FaultKind::StalePause => "stale-pause",
            FaultKind::HeartbeatStop => "heartbeat-stop",
            FaultKind::DropRequest => "drop-request",
            FaultKind::DropReply => "drop-reply",
            FaultKind::DelayReply => "delay-reply",
            FaultKind::DuplicateRequest => "duplicate-request",
            FaultKind::ResetConnection => "reset-connection",
            FaultKind::Partition => "partition",
            FaultKind::ServerPause => "server-pause",
            FaultKind::ServerKill => "server-kill",
            FaultKind::ScriptFlush => "script-flush",
            FaultKind::ReplicaLag => "replica-lag",
            FaultKind::Failover => "failover",
            FaultKind::LagFailover => "lag-failover",
            FaultKind::Takeover => "takeover",
            FaultKind::PrimaryPartition => "primary-partition",
        }
    }

    /// What the fault hits.
    pub fn target(self) -> Target {
        match self {
            FaultKind::CrashBeforeEffect
            | FaultKind::CrashAckGap
            | FaultKind::CrashAfterAck
            | FaultKind::StalePause
            | FaultKind::HeartbeatStop => Target::Worker,
            FaultKind::DropRequest
            | FaultKind::DropReply
            | FaultKind::DelayReply
            | FaultKind::DuplicateRequest
            | FaultKind::ResetConnection
            | FaultKind::Partition => Target::Network,
            FaultKind::ServerPause
            | FaultKind::ServerKill
            | FaultKind::ScriptFlush
            | FaultKind::ReplicaLag
            | FaultKind::Failover
            | FaultKind::LagFailover
            | FaultKind::PrimaryPartition
            | FaultKind::Takeover => Target::Server,
        }
    }

    /// True for the faults that need a server this tool owns (pause, kill).
    pub fn needs_owned_server(self) -> bool {
        matches!(
            self,
            FaultKind::ServerPause | FaultKind::ServerKill | FaultKind::Takeover
        ) || self.needs_replicas()
    }

    /// True for the faults that need a replicated server.
    pub fn needs_replicas(self) -> bool {
        FaultKind::REPLICATION.contains(&self)
    }

    /// True for the faults that kill a primary: never drawn in the first
    /// fifth of the phase, so acknowledged enqueues precede them.
    pub fn kills(self) -> bool {
        matches!(
            self,
            FaultKind::ServerKill
                | FaultKind::Failover
                | FaultKind::LagFailover
                | FaultKind::PrimaryPartition
        )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A set of enabled fault kinds: the value of `--faults`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSet(pub BTreeSet<FaultKind>);

impl FaultSet {
    /// Every kind.
    pub fn all() -> FaultSet {
        FaultSet(FaultKind::ALL.into_iter().collect())
    }

    /// True if `kind` is enabled.
    pub fn contains(&self, kind: FaultKind) -> bool {
        self.0.contains(&kind)
    }

    /// True when a fault of the set fails the primary over to a replica
    /// (or a cluster's takeover): for a moment the old primary may answer
    /// `READONLY`.
    pub fn moves_primary(&self) -> bool {
        self.0
            .iter()
            .any(|k| k.needs_replicas() || *k == FaultKind::Takeover)
    }
}

impl fmt::Display for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        if self.0.iter().eq(FaultKind::ALL.iter()) {
            return f.write_str("all");
        }
        let names: Vec<&str> = self.0.iter().map(|k| k.name()).collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for FaultSet {
    type Err = String;

    /// A comma-separated list of kinds and groups: `all`, `none`, `worker`,
    /// `network`, `server`, or a kind's name; `-NAME` removes a kind or a
    /// group (`all,-server-kill`).
    fn from_str(s: &str) -> Result<FaultSet, String> {
        let mut set = BTreeSet::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (remove, name) = match item.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, item),
            };
            let kinds: Vec<FaultKind> = match name {
                "all" => FaultKind::ALL.to_vec(),
                "none" => Vec::new(),
                "replication" => FaultKind::REPLICATION.to_vec(),
                "cluster" => FaultKind::CLUSTER.to_vec(),
                "worker" | "network" | "server" => {
                    let want = match name {
                        "worker" => Target::Worker,
                        "network" => Target::Network,
                        _ => Target::Server,
                    };
                    FaultKind::ALL
                        .into_iter()
                        .filter(|k| k.target() == want)
                        .collect()
                }
                _ => match FaultKind::ALL
                    .into_iter()
                    .chain(FaultKind::REPLICATION)
                    .chain(FaultKind::CLUSTER)
                    .find(|k| k.name() == name)
                {
                    Some(k) => vec![k],
                    None => {
                        let names: Vec<&str> = FaultKind::ALL
                            .iter()
                            .chain(&FaultKind::REPLICATION)
                            .chain(&[FaultKind::Takeover])
                            .map(|k| k.name())
                            .collect();
                        return Err(format!(
                            "unknown fault {name:?}: expected all, none, worker, network, server, replication, cluster or one of {}",
                            names.join(", ")
                        ));
                    }
                },
            };
            for k in kinds {
                if remove {
                    set.remove(&k);
                } else {
                    set.insert(k);
                }
            }
        }
        Ok(FaultSet(set))
    }
}

/// What the schedule is drawn from (besides the seed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScheduleSettings {
    /// Length of the faults phase (ms).
    pub duration_ms: u64,
    /// Number of workers (targets of worker and network faults).
    pub workers: usize,
    /// Lease length (ms): fault windows are sized to outlast it.
    pub lease_ms: u64,
    /// Enabled kinds.
    pub faults: FaultSet,
}

/// One fault of the schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// When it is injected, from the start of the faults phase (ms).
    pub at_ms: u64,
    /// What.
    pub kind: FaultKind,
    /// The worker it hits (`w3`); `None` for server faults.
    pub target: Option<String>,
    /// How long it lasts before its heal (ms): a pause, a partition, a
    /// server's downtime, a delay; 0 for instant faults.
    pub duration_ms: u64,
}

/// The whole schedule, in injection order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSchedule {
    /// The faults, by `at_ms`.
    pub faults: Vec<Fault>,
}

impl FaultSchedule {
    /// Draws the schedule of `seed` under `settings`.
    pub fn generate(seed: u64, settings: &ScheduleSettings) -> FaultSchedule {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xfa17_5c4e_d01e);
        let d = settings.duration_ms.max(1);
        let lease = settings.lease_ms;
        let workers = settings.workers.max(1);
        let kinds: Vec<FaultKind> = settings.faults.0.iter().copied().collect();
        let mut faults = Vec::new();
        let draw =
            |rng: &mut ChaCha8Rng, kind: FaultKind, from: u64, to: u64, who: Option<usize>| {
                let from = if kind.kills() { from.max(d / 5) } else { from };
                let at_ms = rng.random_range(from..to.max(from + 1));
                let target = (kind.target() != Target::Server)
                    .then(|| format!("w{}", who.unwrap_or_else(|| rng.random_range(0..workers))));
                let duration_ms = match kind {
                    // Past the deadline and the reaper, into the next holder's
                    // work: a stale ack then meets a live newer lease.
                    FaultKind::StalePause | FaultKind::HeartbeatStop => lease + lease / 2,
                    FaultKind::DelayReply => lease + lease / 2,
                    FaultKind::Partition => rng.random_range(lease..=lease * 3),
                    FaultKind::ServerPause => rng.random_range(lease..=lease * 2),
                    FaultKind::ServerKill => rng.random_range(50..=lease),
                    // The lag outlasts a lease, so writes pile up unreplicated.
                    FaultKind::ReplicaLag
                    | FaultKind::LagFailover
                    | FaultKind::PrimaryPartition => rng.random_range(lease..=lease * 3),
                    // The old primary's downtime before it rejoins.
                    FaultKind::Failover => rng.random_range(50..=lease),
                    // How long the replica keeps the slots.
                    FaultKind::Takeover => rng.random_range(lease..=lease * 2),
                    _ => 0,
                };
                Fault {
                    at_ms,
                    kind,
                    target,
                    duration_ms,
                }
            };
        // Every enabled kind once, in the first 60% of the phase. The
        // first worker faults go to different workers, round robin from a
        // drawn one: a worker fires its armed faults one delivery at a
        // time, and one stalled worker must not hold back the rest.
        let mut next_worker = rng.random_range(0..workers);
        for &kind in &kinds {
            let who = (kind.target() == Target::Worker).then(|| {
                next_worker = (next_worker + 1) % workers;
                next_worker
            });
            faults.push(draw(&mut rng, kind, d / 10, d * 6 / 10, who));
        }
        // Then more, one per two seconds, anywhere but the last 10%.
        if !kinds.is_empty() {
            for _ in 0..d / 2000 {
                let kind = kinds[rng.random_range(0..kinds.len())];
                faults.push(draw(&mut rng, kind, d / 10, d * 9 / 10, None));
            }
        }
        faults.sort_by_key(|f| (f.at_ms, f.kind));
        // Server faults in sequence: each waits for the previous to heal.
        let mut free_at = 0;
        for f in faults
            .iter_mut()
            .filter(|f| f.kind.target() == Target::Server)
        {
            f.at_ms = f.at_ms.max(free_at);
            free_at = f.at_ms + f.duration_ms + 200;
        }
        faults.sort_by_key(|f| (f.at_ms, f.kind));
        FaultSchedule { faults }
    }

    /// The kinds the schedule contains.
    pub fn kinds(&self) -> BTreeSet<FaultKind> {
        self.faults.iter().map(|f| f.kind).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(faults: &str) -> ScheduleSettings {
        ScheduleSettings {
            duration_ms: 10_000,
            workers: 4,
            lease_ms: 500,
            faults: faults.parse().unwrap(),
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_schedule_and_another_seed_another() {
        let a = FaultSchedule::generate(7, &settings("all"));
        assert_eq!(a, FaultSchedule::generate(7, &settings("all")));
        assert_ne!(a, FaultSchedule::generate(8, &settings("all")));
    }

    #[test]
    fn every_enabled_kind_is_scheduled_and_no_other() {
        let s = FaultSchedule::generate(3, &settings("worker,script-flush"));
        let mut want: BTreeSet<FaultKind> = "worker".parse::<FaultSet>().unwrap().0;
        want.insert(FaultKind::ScriptFlush);
        assert_eq!(s.kinds(), want);
        assert_eq!(
            FaultSchedule::generate(3, &settings("all")).kinds().len(),
            14
        );
    }

    #[test]
    fn server_faults_never_overlap_and_kills_follow_the_first_fifth() {
        for seed in 0..50 {
            let s = FaultSchedule::generate(seed, &settings("server"));
            let server: Vec<&Fault> = s.faults.iter().collect();
            for pair in server.windows(2) {
                assert!(
                    pair[1].at_ms >= pair[0].at_ms + pair[0].duration_ms,
                    "{s:?}"
                );
            }
            for f in &s.faults {
                if f.kind == FaultKind::ServerKill {
                    assert!(f.at_ms >= 2_000, "{f:?}");
                }
            }
        }
    }

    #[test]
    fn fault_lists_parse_groups_and_removals() {
        let set: FaultSet = "all,-server".parse().unwrap();
        assert_eq!(set.0.len(), 11);
        assert!("bogus".parse::<FaultSet>().is_err());
        assert_eq!("none".parse::<FaultSet>().unwrap().to_string(), "none");
        assert_eq!(FaultSet::all().to_string(), "all");
    }
}
