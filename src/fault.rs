//! The fault vocabulary, on the ground floor: every kind of fault the chaos
//! runner injects ([`FaultKind`]), what it hits ([`Target`]) and one row
//! per kind ([`FaultKind::spec`]) saying what every reader of a fault
//! needs to decide: whether it heals, kills a primary, can lose
//! acknowledged writes, moves the primary, the queue's slot or the
//! server's clock, how the report draws it ([`Drawing`]) and what it needs
//! of a server ([`Needs`]). It imports
//! nothing of the crate, so the history, the checkers and the report read
//! a fault event by its kind (`history::FaultEvent`) rather than by name.
//!
//! # Design notes
//!
//! The row is one `match` without a wildcard arm, a tuple per kind: a kind
//! added to the enum does not compile until its row says each of these,
//! and no reader keeps a list of names. The row says what a kind needs of
//! a server ([`Needs`]); whether a server runs it is the server's own
//! answer, each backend's beside the code that does its faults
//! (`Server::supports`). How long its window is drawn (`draw_window_ms`)
//! is the chaos runner's, in `chaos/fault.rs`; its inject and heal are the
//! nemesis's (`chaos/runner/nemesis.rs`), in matches without a wildcard
//! arm too.

use std::fmt;

use serde::{Deserialize, Serialize};
use strum::IntoEnumIterator;

/// One kind of fault. Its name is what `--faults` takes.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::EnumIter,
    strum::EnumCount,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
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
    /// unreplicated writes discarded. Needs `--server replicated`. On a
    /// cluster: kill -9 of the queue's primary and the cluster's own
    /// failover (3 primaries or more, each with a replica).
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
    /// promoted its replica (every client still reaches it); the heal
    /// reconnects it and it
    /// comes back a replica of its successor.
    PrimaryPartition,
    /// `CLUSTER FAILOVER TAKEOVER` on a replica of the queue's primary:
    /// it takes the slots without the primary's agreement; the heal gives
    /// them back with `CLUSTER FAILOVER FORCE` on the old primary. Needs
    /// `--server cluster` with replicas.
    Takeover,
    /// Power loss: every byte the server wrote but did not fsync is lost
    /// (the power-loss shim truncates each file to its synced length) and
    /// the server stays down for the window; the heal starts it again on
    /// its own data. Unlike `server-kill`, which keeps the page cache,
    /// `appendfsync everysec` then loses the last second or so of
    /// acknowledged writes. Runs on every server ackgap starts (every
    /// node of a replicated set or a cluster at once), started with the
    /// shim, which naming the kind asks for.
    PowerLoss,
    /// The server's wall clock jumps forward by the window (every lease it
    /// granted expires at once: the reaper takes jobs from live workers),
    /// and the heal jumps it back as far (the leases granted meanwhile are
    /// stretched by as much). No restart; the monotonic clock is left
    /// alone. On `--server cluster` the queue's primary's clock alone
    /// jumps (the other nodes' stay), and the heal sets every clock back
    /// to the real one. Needs `--server process` or `cluster` with
    /// valkey-server (started with libfaketime, which naming the kind asks
    /// for; Redis 7.0 hangs under it and is refused).
    ClockJump,
    /// A replica whose clock disagrees with its primary's, then promoted:
    /// every replica's wall clock jumps forward by the window, then the
    /// primary is killed and the replica with the largest offset promoted
    /// (as `failover`). The leases the old primary granted are read on the
    /// new primary's clock, already past their deadlines: the reaper takes
    /// jobs from live workers. The heal rejoins the old primary as a
    /// replica and moves every clock back to the real one (the leases
    /// granted meanwhile are stretched by the jump). Needs `--server
    /// replicated[:N]` of processes, or `cluster[:PxR]` of processes that
    /// can fail over by itself (the replicas of the queue's primary
    /// skewed, the cluster promoting one), every node started with
    /// libfaketime (naming the kind asks for it).
    SkewFailover,
    /// The queue's slot moves to another primary while the workers run,
    /// with Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`): the
    /// keys and the writes meanwhile are copied, the target takes the slot
    /// over, and clients see `MOVED` after (never `ASK` or `TRYAGAIN`).
    /// Instant (no heal: the next reshard moves it on). Needs `--server
    /// cluster[:PxR]` or `container-cluster[:PxR]` with at least 2
    /// primaries.
    Reshard,
    /// The queue's slot moves to another primary the classic way, as
    /// `valkey-cli --cluster reshard` does (`CLUSTER SETSLOT … IMPORTING`
    /// and `MIGRATING`, `MIGRATE` of its keys, `SETSLOT … NODE`), the slot
    /// held `MIGRATING` for a while before and after its keys move: clients
    /// see `ASK` once the keys moved, `TRYAGAIN` for a call some of whose
    /// keys moved, `MOVED` after. The report says, per migration, how long
    /// no queue call completed. Needs what `reshard` needs.
    ReshardClassic,
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

impl Target {
    /// The name of the group of its kinds (`--faults worker`).
    pub fn name(self) -> &'static str {
        match self {
            Target::Worker => "worker",
            Target::Network => "network",
            Target::Server => "server",
        }
    }
}

/// What a kind is, as the readers of its events decide by it: one row per
/// kind ([`FaultKind::spec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Spec {
    /// What it hits.
    pub target: Target,
    /// It has a heal at the end of its window (a server resumed or
    /// restarted, a partition ended, slots given back).
    pub heals: bool,
    /// It kills a primary: never drawn in the first fifth of the phase, so
    /// acknowledged enqueues precede it.
    pub kills: bool,
    /// It can lose writes the server acknowledged: a kill under no
    /// persistence, a power loss, a failover or takeover that promotes a
    /// node without them.
    pub loses_writes: bool,
    /// It moves the primary to a replica (a failover, a cluster's
    /// takeover): for a moment the old primary may answer `READONLY`.
    pub moves_primary: bool,
    /// It moves the queue's slot to another primary (a reshard): its
    /// `fired` event says how (`hit`: kind, slot, from, to, took_ms).
    pub moves_slot: bool,
    /// It moves the server's wall clock (`jumped_ms` in its events):
    /// leases and TTLs expire early or late, nothing goes down.
    pub moves_clock: bool,
    /// How the report draws it.
    pub drawing: Drawing,
    /// What it needs of a server: where it runs, as a backend that does
    /// nothing for it says (`server::Topology::supports`).
    pub needs: Needs,
}

/// What a kind needs of the server, as a refusal names it where a backend
/// does nothing for the kind; whether a backend runs it is the backend's
/// answer (`Server::supports`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Needs {
    /// Nothing: the workers, the fault proxy or a command any server takes.
    Nothing,
    /// A server this tool starts: it pauses, kills or cuts it.
    OwnServer,
    /// A primary with replicas.
    Replicas,
    /// A cluster whose primaries have replicas.
    ClusterReplicas,
    /// Replicas whose clocks it moves: a replicated set or a cluster, each
    /// node started with libfaketime.
    SkewableReplicas,
    /// A cluster of at least 2 primaries to move the queue's slot between.
    TwoPrimaries,
}

/// How the report draws a fault, from inject to heal; one colour each,
/// the same in the overview and the lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Drawing {
    /// The server paused or down: what may lose a job.
    Down,
    /// Replicas behind, a failover, a takeover, a primary cut from its
    /// replicas: the primary the clients reach stays up or another takes
    /// its place, not "down".
    Replication,
    /// The server's clock moved: nothing down, leases expire early.
    Clock,
    /// A worker cut off from the server.
    Partition,
    /// A worker's own stall or a reply held back, for a window.
    Window,
    /// A one-shot fault: a line where it fired.
    Instant,
}

impl FaultKind {
    /// Every kind, in a stable order (the declaration's).
    pub fn all() -> impl Iterator<Item = FaultKind> {
        FaultKind::iter()
    }

    /// The name `--faults` takes, and a fault event's `fault`.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The kind's row: what it hits, whether it heals, kills, loses
    /// writes, moves the primary, the slot or the clock, how it is drawn,
    /// what it needs of a server.
    #[rustfmt::skip]
    pub fn spec(self) -> Spec {
        use Drawing::{Clock, Down, Instant, Replication, Window};
        use FaultKind::*;
        use Needs::{ClusterReplicas as ClR, Nothing as No, OwnServer as Own, Replicas as Rep};
        use Needs::{SkewableReplicas as Skew, TwoPrimaries as TwoP};
        use Target::{Network as Net, Server as Srv, Worker as Wkr};
        let (target, heals, kills, loses_writes, moves_primary, moves_slot, moves_clock, drawing, needs) =
            match self {
                // target   heals  kills  loses  primary slot   clock  drawing  needs
                CrashBeforeEffect => (Wkr, false, false, false, false, false, false, Instant, No),
                CrashAckGap       => (Wkr, false, false, false, false, false, false, Instant, No),
                CrashAfterAck     => (Wkr, false, false, false, false, false, false, Instant, No),
                StalePause        => (Wkr, false, false, false, false, false, false, Window, No),
                HeartbeatStop     => (Wkr, false, false, false, false, false, false, Window, No),
                DropRequest       => (Net, false, false, false, false, false, false, Instant, No),
                DropReply         => (Net, false, false, false, false, false, false, Instant, No),
                DelayReply        => (Net, false, false, false, false, false, false, Window, No),
                DuplicateRequest  => (Net, false, false, false, false, false, false, Instant, No),
                ResetConnection   => (Net, false, false, false, false, false, false, Instant, No),
                Partition         => (Net, true,  false, false, false, false, false, Drawing::Partition, No),
                ServerPause       => (Srv, true,  false, false, false, false, false, Down, Own),
                ServerKill        => (Srv, true,  true,  true,  false, false, false, Down, Own),
                ScriptFlush       => (Srv, false, false, false, false, false, false, Instant, No),
                ReplicaLag        => (Srv, true,  false, false, true,  false, false, Replication, Rep),
                Failover          => (Srv, true,  true,  true,  true,  false, false, Replication, Rep),
                LagFailover       => (Srv, true,  true,  true,  true,  false, false, Replication, Rep),
                PrimaryPartition  => (Srv, true,  true,  true,  true,  false, false, Replication, Rep),
                Takeover          => (Srv, true,  false, true,  true,  false, false, Replication, ClR),
                PowerLoss         => (Srv, true,  true,  true,  false, false, false, Down, Own),
                ClockJump         => (Srv, true,  false, false, false, false, true,  Clock, Own),
                SkewFailover      => (Srv, true,  true,  true,  true,  false, true,  Replication, Skew),
                Reshard           => (Srv, false, false, false, false, true,  false, Instant, TwoP),
                ReshardClassic    => (Srv, false, false, false, false, true,  false, Instant, TwoP),
            };
        Spec { target, heals, kills, loses_writes, moves_primary, moves_slot, moves_clock, drawing, needs }
    }

    /// What the fault hits.
    pub fn target(self) -> Target {
        self.spec().target
    }

    /// True for the faults with a heal at the end of their window
    /// ([`Spec::heals`]).
    pub fn heals(self) -> bool {
        self.spec().heals
    }

    /// True for the faults that kill a primary ([`Spec::kills`]).
    pub fn kills(self) -> bool {
        self.spec().kills
    }

    /// True for the faults that can lose writes the server acknowledged
    /// ([`Spec::loses_writes`]). The report names the ones that fired
    /// beside the jobs lost.
    pub fn can_lose_writes(self) -> bool {
        self.spec().loses_writes
    }

    /// True for the faults that move the primary to a replica
    /// ([`Spec::moves_primary`]).
    pub(crate) fn moves_primary(self) -> bool {
        self.spec().moves_primary
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_s_name_is_its_serde_name_and_reads_back() {
        for k in FaultKind::all() {
            let json = serde_json::to_value(k).unwrap();
            assert_eq!(json, serde_json::json!(k.name()), "{k:?}");
            assert_eq!(serde_json::from_value::<FaultKind>(json).unwrap(), k);
        }
    }

    #[test]
    fn the_rows_agree_with_one_another() {
        for k in FaultKind::all() {
            let s = k.spec();
            // What kills a primary or loses writes is done to the server.
            if s.kills || s.loses_writes || s.moves_primary || s.moves_slot || s.moves_clock {
                assert_eq!(s.target, Target::Server, "{k}");
            }
            // A kill can lose what the primary acknowledged.
            assert!(!s.kills || s.loses_writes, "{k}");
            // A moved primary is drawn as replication, never as the
            // server down; a moved clock is not the server down either.
            if s.moves_primary {
                assert_eq!(s.drawing, Drawing::Replication, "{k}");
            }
            if s.moves_clock {
                assert_ne!(s.drawing, Drawing::Down, "{k}");
            }
            // The server down is a window the heal ends; a one-shot fault
            // has no heal.
            if s.drawing == Drawing::Down {
                assert!(s.heals && s.target == Target::Server, "{k}");
            }
            if s.drawing == Drawing::Instant {
                assert!(!s.heals, "{k}");
            }
        }
        assert_eq!(FaultKind::ClockJump.spec().drawing, Drawing::Clock);
    }
}
