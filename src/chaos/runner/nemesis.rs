//! The nemesis: follows the fault schedule, injecting and healing.
//!
//! # Design notes
//!
//! The nemesis runs in `run_until`'s own future (it needs the `&mut Server`
//! to pause, kill and restart) and notes every fault event (`inject`,
//! `fired`, `heal`, `disarm`) as a `fault` operation of the process
//! `nemesis`; the proxy and the workers note `fired` through the same lock,
//! so its invoke/ok pairs never interleave.

use super::*;
use crate::server::{MigrationKind, ServerError};

/// The nemesis: follows the schedule, injecting and healing.
pub(super) struct Nemesis<'a> {
    pub(super) ctx: Arc<Ctx>,
    pub(super) proxy: &'a Proxy,
    pub(super) schedule: &'a FaultSchedule,
    /// Faults injected whose heal has not run yet.
    pub(super) active: BTreeSet<usize>,
    /// Stops the faults phase early (Ctrl-C).
    pub(super) interrupt: Interrupt,
}

/// How an injection takes effect.
enum Injection {
    /// Armed on the worker's slot: it fires at the worker's next lease.
    Worker,
    /// Armed on the worker's port of the fault proxy: it fires on the
    /// worker's next script call or reply.
    Proxy(Armed),
    /// Done now, with what it hit (or why it failed).
    Done(Result<serde_json::Value, String>),
    /// In force now, having touched nothing yet: it fires (through the
    /// proxy's hook) when it does, and its heal says if it never did.
    Watching,
}

impl Nemesis<'_> {
    pub(super) async fn run(&mut self, server: &mut Server) {
        // (time, heal before inject at the same instant, fault index).
        let mut timeline: Vec<(u64, bool, usize)> = Vec::new();
        for (i, f) in self.schedule.faults.iter().enumerate() {
            timeline.push((f.at_ms, true, i));
            if f.kind.heals() {
                timeline.push((f.at_ms + f.duration_ms, false, i));
            }
        }
        timeline.sort();
        let end = self.ctx.start + Duration::from_millis(self.ctx.cfg.duration_ms);
        for (at, inject, i) in timeline {
            if at >= self.ctx.cfg.duration_ms {
                break;
            }
            let due = self.ctx.start + Duration::from_millis(at);
            tokio::select! {
                _ = tokio::time::sleep_until(due.into()) => {}
                _ = self.interrupt.raised() => return,
            }
            // Late when the machine ran the nemesis late, or a heal or an
            // inject before this one (a slow restart) held it.
            let action = if inject { "inject" } else { "heal" };
            let kind = self.schedule.faults[i].kind;
            self.ctx.slip.fault(kind, action, at, due.elapsed());
            if inject {
                self.inject(server, i).await;
            } else if self.active.remove(&i) {
                self.heal(server, i).await;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep_until(end.into()) => {}
            _ = self.interrupt.raised() => {}
        }
    }

    /// Injects fault `i` of the schedule and records it: an event
    /// `inject` when it is armed or done, then `fired` with what it hit
    /// (for an armed fault, when it fires), or `inject` with the error.
    pub(super) async fn inject(&mut self, server: &mut Server, i: usize) {
        let f: &Fault = &self.schedule.faults[i];
        let ctx = &self.ctx;
        let target = f.target.as_deref().unwrap_or("server");
        *lock(&ctx.injected).entry(f.kind).or_default() += 1;
        let scheduled = json!({"at_ms": f.at_ms, "duration_ms": f.duration_ms});
        let from = ctx.rec.next_index();
        match self.injection(server, f, target).await {
            Injection::Worker => {
                ctx.note(f.kind, Action::Inject, Some(target), scheduled, None);
                if let Some(slot) = ctx.slots.iter().find(|s| s.name == target) {
                    lock(&slot.armed).push_back((f.kind, f.duration_ms));
                }
            }
            Injection::Proxy(armed) => {
                ctx.note(f.kind, Action::Inject, Some(target), scheduled, None);
                self.proxy.arm(target, armed);
            }
            Injection::Done(Ok(hit)) => {
                let scheduled = bracketed(f.kind, scheduled, from);
                ctx.note(f.kind, Action::Inject, Some(target), scheduled, None);
                if f.kind.heals() {
                    self.active.insert(i);
                }
                ctx.fire(f.kind, target, hit);
            }
            Injection::Watching => {
                ctx.note(f.kind, Action::Inject, Some(target), scheduled, None);
                self.active.insert(i);
            }
            Injection::Done(Err(e)) => {
                let scheduled = bracketed(f.kind, scheduled, from);
                ctx.note(f.kind, Action::Inject, Some(target), scheduled, Some(e))
            }
        }
    }

    /// What injecting `f` (at `target`) does: each kind's own injection.
    async fn injection(&self, server: &mut Server, f: &Fault, target: &str) -> Injection {
        let done = |r: Result<serde_json::Value, ServerError>| {
            Injection::Done(r.map_err(|e| e.to_string()))
        };
        match f.kind {
            FaultKind::CrashBeforeEffect
            | FaultKind::CrashAckGap
            | FaultKind::CrashAfterAck
            | FaultKind::StalePause
            | FaultKind::HeartbeatStop => Injection::Worker,
            FaultKind::DropRequest => Injection::Proxy(Armed::DropRequest),
            FaultKind::DropReply => Injection::Proxy(Armed::DropReply),
            FaultKind::DelayReply => {
                Injection::Proxy(Armed::DelayReply(Duration::from_millis(f.duration_ms)))
            }
            FaultKind::DuplicateRequest => Injection::Proxy(Armed::Duplicate),
            // A fault that touched nothing did not fire: a worker with no
            // connection through its port of the proxy (a cluster client,
            // an adapter that ignored its URL, a connection already gone).
            FaultKind::ResetConnection => match self.proxy.reset(target) {
                0 => Injection::Done(Err(format!(
                    "touched nothing: {target} had no connection through the fault proxy"
                ))),
                n => Injection::Done(Ok(json!({"connections": n}))),
            },
            FaultKind::Partition => match self.proxy.partition_watched(target) {
                0 => Injection::Watching,
                n => Injection::Done(Ok(json!({"connections": n}))),
            },
            FaultKind::ServerPause => done(server.pause().await.map(|_| json!({}))),
            FaultKind::ServerKill => done(server.kill().await.map(|_| json!({}))),
            FaultKind::ReplicaLag => done(
                server
                    .lag_replicas()
                    .await
                    .map(|_| json!({"paused_replicas": server.replicas()})),
            ),
            FaultKind::LagFailover => done(
                server
                    .hold_replication()
                    .await
                    .map(|_| json!({"held_links": server.replicas()})),
            ),
            FaultKind::PrimaryPartition => done(self.partition_primary(server).await),
            FaultKind::Failover => done(server.failover().await.map(|f| failover_value(&f))),
            FaultKind::Takeover => done(server.takeover().await.map(|t| {
                json!({
                    "demoted": t.demoted,
                    "promoted": t.promoted,
                    "offsets": t.offsets.iter().map(|(n, o)| json!({"node": n, "offset": o})).collect::<Vec<_>>(),
                    "took_ms": t.took_ms,
                })
            })),
            FaultKind::ScriptFlush => Injection::Done(self.flush_scripts().await),
            FaultKind::PowerLoss => done(server.power_cut().await.map(|cut| {
                json!({"files": cut.files, "dropped_bytes": cut.dropped_bytes})
            })),
            // On a cluster, the queue's primary's clock alone.
            FaultKind::ClockJump if server.is_own_cluster() => {
                done(jump_primary(server, f.duration_ms).await)
            }
            FaultKind::ClockJump => done(jump(server, f.duration_ms, 1)),
            FaultKind::SkewFailover => done(skew_and_fail_over(server, f.duration_ms).await),
            FaultKind::Reshard => done(migrate(server, MigrationKind::Atomic).await),
            FaultKind::ReshardClassic => done(migrate(server, MigrationKind::Classic).await),
        }
    }

    /// The primary cut off. On a cluster the primary is cut from the
    /// cluster bus alone (every client still reaches it). On a
    /// replicated set its replication links are held and every other
    /// worker is partitioned from it.
    async fn partition_primary(
        &self,
        server: &mut Server,
    ) -> Result<serde_json::Value, ServerError> {
        if server.is_own_cluster() {
            let cut = server.cut_primary().await?;
            return Ok(json!({
                "cut_from_bus": cut.node,
                "promoted": cut.promoted,
                "took_ms": cut.took_ms,
            }));
        }
        server.hold_replication().await?;
        let cut = self.cut_clients();
        for w in &cut {
            self.proxy.partition(w);
        }
        Ok(json!({"held_links": server.replicas(), "cut_clients": cut}))
    }

    /// `SCRIPT FLUSH` and `FUNCTION FLUSH`: the script cache (queues on
    /// EVALSHA) and the function libraries (the reference queue's FCALL)
    /// both reload.
    async fn flush_scripts(&self) -> Result<serde_json::Value, String> {
        let mut conn = self.ctx.direct.connection();
        redis::pipe()
            .cmd("SCRIPT")
            .arg("FLUSH")
            .cmd("FUNCTION")
            .arg("FLUSH")
            .query_async::<()>(&mut conn)
            .await
            .map(|_| json!({}))
            .map_err(|e| e.to_string())
    }

    /// Heals fault `i` and records it (an event `heal`, with what the heal
    /// did or why it failed).
    pub(super) async fn heal(&mut self, server: &mut Server, i: usize) {
        let f = &self.schedule.faults[i];
        let target = f.target.as_deref().unwrap_or("server");
        let from = self.ctx.rec.next_index();
        let began = Instant::now();
        let result = match f.kind {
            FaultKind::ServerPause => server.resume().await.map(|_| json!({})),
            FaultKind::ServerKill => server.restart().await.map(|_| json!({})),
            FaultKind::Partition => Ok(if self.proxy.unpartition(target) {
                json!({})
            } else {
                json!({"touched": format!(
                    "nothing: {target} had no connection through the fault proxy and \
                     opened none while cut off (not fired)"
                )})
            }),
            FaultKind::ReplicaLag => server.resume_replicas().await.map(|_| json!({})),
            FaultKind::Failover => server.rejoin().await.map(|port| json!({"rejoined": port})),
            FaultKind::PrimaryPartition => self.reconnect_primary(server).await,
            FaultKind::Takeover => server
                .give_back()
                .await
                .map(|node| json!({"given_back_to": node})),
            // The lag ends in a failover: the primary that acknowledged
            // the lag's writes is killed, a replica that has none of them
            // promoted, and the old primary rejoins as a replica at once.
            FaultKind::LagFailover => fail_over_and_rejoin(server).await,
            // Back on its own data, what the cut left of it.
            FaultKind::PowerLoss => server.power_on().await.map(|_| json!({})),
            // On a cluster every clock back to the real one (the primary
            // the inject jumped may have changed since).
            FaultKind::ClockJump if server.is_own_cluster() => align(server),
            // As far back as the inject jumped forward.
            FaultKind::ClockJump => jump(server, f.duration_ms, -1),
            // The old primary back as a replica, then every clock back to
            // the real one: the leases granted on the skewed clock are
            // stretched by the jump.
            FaultKind::SkewFailover => rejoin_and_align(server).await,
            // No heal (`FaultKind::heals` is false): never made active.
            FaultKind::CrashBeforeEffect
            | FaultKind::CrashAckGap
            | FaultKind::CrashAfterAck
            | FaultKind::StalePause
            | FaultKind::HeartbeatStop
            | FaultKind::DropRequest
            | FaultKind::DropReply
            | FaultKind::DelayReply
            | FaultKind::DuplicateRequest
            | FaultKind::ResetConnection
            | FaultKind::ScriptFlush
            | FaultKind::Reshard
            | FaultKind::ReshardClassic => return,
        }
        .map_err(|e| e.to_string());
        match result {
            Ok(value) => {
                let value = restarted(f.kind, bracketed(f.kind, value, from), began);
                self.ctx
                    .note(f.kind, Action::Heal, Some(target), value, None)
            }
            Err(e) => self.heal_failed(f, target, e, from),
        }
    }

    /// Records that fault `f`'s heal failed with `e`, and stops the run if
    /// its server did not come back.
    fn heal_failed(&self, f: &Fault, target: &str, e: String, from: u64) {
        // A server that did not come back: nothing after this can
        // be read, so the run stops (`phases::run_with` says why).
        if matches!(
            f.kind,
            FaultKind::ServerPause | FaultKind::ServerKill | FaultKind::PowerLoss
        ) {
            *lock(&self.ctx.server_lost) = Some(format!(
                "fault {} (scheduled at {} ms) could not be healed: {e}",
                f.kind, f.at_ms
            ));
            self.interrupt.raise();
        }
        let value = bracketed(f.kind, json!({}), from);
        self.ctx
            .note(f.kind, Action::Heal, Some(target), value, Some(e))
    }

    /// Undoes [`Nemesis::partition_primary`]. On a cluster the primary is
    /// reconnected to the bus (it comes back a replica of its successor);
    /// on a replicated set it fails over to a replica, rejoins as a
    /// replica, and the partitioned workers reach the new primary.
    async fn reconnect_primary(
        &self,
        server: &mut Server,
    ) -> Result<serde_json::Value, ServerError> {
        if server.is_own_cluster() {
            return server.reconnect_primary().await.map(|back| match back {
                Some(r) => json!({
                    "reconnected": r.node,
                    "role": r.role,
                    "primary_id": r.primary_id,
                }),
                None => json!({}),
            });
        }
        let healed = fail_over_and_rejoin(server).await;
        let cut = self.cut_clients();
        for w in &cut {
            self.proxy.unpartition(w);
        }
        healed.map(|mut v| {
            v["reconnected_clients"] = json!(cut);
            v
        })
    }

    /// The workers a primary-partition cuts from the primary: every other
    /// one (w0, w2, …); the rest keep writing to it.
    fn cut_clients(&self) -> Vec<String> {
        self.ctx
            .slots
            .iter()
            .step_by(2)
            .map(|s| s.name.clone())
            .collect()
    }

    /// Heals every fault still in force and disarms the ones that never
    /// fired.
    pub(super) async fn heal_all(&mut self, server: &mut Server) {
        for i in std::mem::take(&mut self.active) {
            self.heal(server, i).await;
        }
        // An armed worker fault fires on the worker's next lease. A server
        // fault healed just now may have kept workers from leasing, so give
        // armed faults a bounded chance to fire on a healthy server before
        // they are disarmed. A run stopped (Ctrl-C, a refusal, a server
        // gone) gives them none.
        let deadline = tokio::time::Instant::now() + ARMED_GRACE;
        while tokio::time::Instant::now() < deadline
            && !self.interrupt.is_raised()
            && self.ctx.slots.iter().any(|s| !lock(&s.armed).is_empty())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (client, kind) in self.proxy.heal() {
            self.ctx
                .note(kind, Action::Disarm, Some(&client), json!({}), None);
        }
        for slot in &self.ctx.slots {
            let armed: Vec<(FaultKind, u64)> = lock(&slot.armed).drain(..).collect();
            for (kind, _) in armed {
                self.ctx
                    .note(kind, Action::Disarm, Some(&slot.name), json!({}), None);
            }
        }
    }
}

/// The server's clock moved by `ms` in `direction` (1 forward, -1 back):
/// the jump and the offset from the real clock now in force.
fn jump(server: &mut Server, ms: u64, direction: i64) -> Result<serde_json::Value, ServerError> {
    let delta = i64::try_from(ms).unwrap_or(i64::MAX) * direction;
    server
        .jump_clock(delta)
        .map(|offset| json!({"jumped_ms": delta, "offset_ms": offset}))
}

/// The clock of the node serving the queue's slot jumped forward by `ms`:
/// the jump, the node and its offset.
async fn jump_primary(server: &mut Server, ms: u64) -> Result<serde_json::Value, ServerError> {
    let delta = i64::try_from(ms).unwrap_or(i64::MAX);
    let (node, offset) = server.jump_primary_clock(delta).await?;
    Ok(json!({"jumped_ms": delta, "node": node, "offset_ms": offset}))
}

/// Every node's clock back to the real one: each node moved and its jump.
fn align(server: &mut Server) -> Result<serde_json::Value, ServerError> {
    let aligned = server.align_clocks()?;
    Ok(json!({
        "aligned": aligned
            .iter()
            .map(|(n, j)| json!({"node": n, "jumped_ms": j}))
            .collect::<Vec<_>>(),
    }))
}

/// Every replica's clock jumped forward by `ms`, then a failover: the
/// jumps and what the failover did.
async fn skew_and_fail_over(
    server: &mut Server,
    ms: u64,
) -> Result<serde_json::Value, ServerError> {
    let delta = i64::try_from(ms).unwrap_or(i64::MAX);
    let skewed = server.jump_replica_clocks(delta).await?;
    let failover = server.failover().await?;
    let mut value = failover_value(&failover);
    value["jumped_ms"] = json!(delta);
    value["skewed"] = json!(skewed
        .iter()
        .map(|(n, o)| json!({"node": n, "offset_ms": o}))
        .collect::<Vec<_>>());
    Ok(value)
}

/// The queue's slot moved the `how` way: what the migration did.
async fn migrate(
    server: &mut Server,
    how: MigrationKind,
) -> Result<serde_json::Value, ServerError> {
    let m = server.migrate_slot(how).await?;
    Ok(json!({
        "kind": m.kind.name(),
        "slot": m.slot,
        "from": m.from,
        "to": m.to,
        "keys": m.keys,
        "took_ms": m.took_ms,
    }))
}

/// The old primary rejoined as a replica, then every clock aligned.
async fn rejoin_and_align(server: &mut Server) -> Result<serde_json::Value, ServerError> {
    let rejoined = server.rejoin().await?;
    let mut value = align(server)?;
    value["rejoined"] = json!(rejoined);
    Ok(value)
}

/// A failover, then the old primary rejoined as a replica: what both did.
async fn fail_over_and_rejoin(server: &mut Server) -> Result<serde_json::Value, ServerError> {
    let failover = server.failover().await?;
    let port = server.rejoin().await?;
    let mut value = failover_value(&failover);
    value["rejoined"] = json!(port);
    Ok(value)
}

/// What a failover did, as a fault event's fields.
fn failover_value(f: &crate::server::Failover) -> serde_json::Value {
    json!({
        "killed": f.killed,
        "promoted": f.promoted,
        "offsets": f.offsets.iter().map(|(port, offset)| json!({"port": port, "offset": offset})).collect::<Vec<_>>(),
        "repointed": f.repointed,
        "unreplicated_bytes": f.unreplicated_bytes,
        "took_ms": f.took_ms,
        "killed_id": f.killed_id,
        "promoted_id": f.promoted_id,
    })
}

/// `value` with `restart_ms` when `kind`'s heal starts the server again
/// (a kill's, a power loss's): how long since `began` the restart took to
/// answer, which the server watch's grace is measured by
/// (`errors::watch_server`).
fn restarted(kind: FaultKind, mut value: serde_json::Value, began: Instant) -> serde_json::Value {
    if matches!(kind, FaultKind::ServerKill | FaultKind::PowerLoss) {
        if let Some(map) = value.as_object_mut() {
            map.insert(
                "restart_ms".into(),
                (began.elapsed().as_millis() as u64).into(),
            );
        }
    }
    value
}

/// `value` with `from_index` (the history's next index read before the
/// action began) when `kind` moves a server clock: the clock moved between
/// that event and the fault's own, and the checkers leave unjudged a time
/// the server read across it ([`crate::check::clock::ClockMoves`]).
fn bracketed(kind: FaultKind, mut value: serde_json::Value, from: u64) -> serde_json::Value {
    if kind.spec().moves_clock {
        if let Some(map) = value.as_object_mut() {
            map.insert("from_index".into(), from.into());
        }
    }
    value
}
