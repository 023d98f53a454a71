//! The nemesis: follows the fault schedule, injecting and healing.

use super::*;

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

pub(super) fn heals(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::ServerPause
            | FaultKind::ServerKill
            | FaultKind::Partition
            | FaultKind::ReplicaLag
            | FaultKind::Failover
            | FaultKind::LagFailover
            | FaultKind::Takeover
            | FaultKind::PrimaryPartition
    )
}

impl Nemesis<'_> {
    pub(super) async fn run(&mut self, server: &mut Server) {
        // (time, heal before inject at the same instant, fault index).
        let mut timeline: Vec<(u64, bool, usize)> = Vec::new();
        for (i, f) in self.schedule.faults.iter().enumerate() {
            timeline.push((f.at_ms, true, i));
            if heals(f.kind) {
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

    pub(super) async fn inject(&mut self, server: &mut Server, i: usize) {
        let f: &Fault = &self.schedule.faults[i];
        let ctx = &self.ctx;
        let target = f.target.as_deref().unwrap_or("server");
        *lock(&ctx.injected).entry(f.kind).or_default() += 1;
        let scheduled = json!({"at_ms": f.at_ms, "duration_ms": f.duration_ms});
        let armed = match f.kind {
            FaultKind::DropRequest => Some(Armed::DropRequest),
            FaultKind::DropReply => Some(Armed::DropReply),
            FaultKind::DelayReply => Some(Armed::DelayReply(Duration::from_millis(f.duration_ms))),
            FaultKind::DuplicateRequest => Some(Armed::Duplicate),
            _ => None,
        };
        if f.kind.target() == Target::Worker {
            ctx.note(f.kind, "inject", Some(target), scheduled, None);
            if let Some(slot) = ctx.slots.iter().find(|s| s.name == target) {
                lock(&slot.armed).push_back((f.kind, f.duration_ms));
            }
            return;
        }
        if let Some(armed) = armed {
            ctx.note(f.kind, "inject", Some(target), scheduled, None);
            self.proxy.arm(target, armed);
            return;
        }
        let result: Result<serde_json::Value, String> = match f.kind {
            FaultKind::ResetConnection => Ok(json!({"connections": self.proxy.reset(target)})),
            FaultKind::Partition => {
                self.proxy.partition(target);
                Ok(json!({}))
            }
            FaultKind::ServerPause => server
                .pause()
                .await
                .map(|_| json!({}))
                .map_err(|e| e.to_string()),
            FaultKind::ServerKill => server
                .kill()
                .await
                .map(|_| json!({}))
                .map_err(|e| e.to_string()),
            FaultKind::ReplicaLag => server
                .lag_replicas()
                .await
                .map(|_| json!({"paused_replicas": server.replicas()}))
                .map_err(|e| e.to_string()),
            FaultKind::LagFailover => server
                .hold_replication()
                .await
                .map(|_| json!({"held_links": server.replicas()}))
                .map_err(|e| e.to_string()),
            // On a cluster the clients reach every node past the proxy:
            // the primary is cut from the cluster bus alone.
            FaultKind::PrimaryPartition if server.is_own_cluster() => server
                .cut_primary()
                .await
                .map(|cut| {
                    json!({
                        "cut_from_bus": cut.node,
                        "promoted": cut.promoted,
                        "took_ms": cut.took_ms,
                    })
                })
                .map_err(|e| e.to_string()),
            FaultKind::PrimaryPartition => server
                .hold_replication()
                .await
                .map(|_| {
                    let cut = self.cut_clients();
                    for w in &cut {
                        self.proxy.partition(w);
                    }
                    json!({"held_links": server.replicas(), "cut_clients": cut})
                })
                .map_err(|e| e.to_string()),
            FaultKind::Failover => server
                .failover()
                .await
                .map(|f| failover_value(&f))
                .map_err(|e| e.to_string()),
            FaultKind::Takeover => server
                .takeover()
                .await
                .map(|t| {
                    json!({
                        "demoted": t.demoted,
                        "promoted": t.promoted,
                        "offsets": t.offsets.iter().map(|(n, o)| json!({"node": n, "offset": o})).collect::<Vec<_>>(),
                        "took_ms": t.took_ms,
                    })
                })
                .map_err(|e| e.to_string()),
            FaultKind::ScriptFlush => {
                // The script cache (queues on EVALSHA) and the function
                // libraries (the reference queue's FCALL): both reload.
                let mut conn = ctx.direct.connection();
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
            _ => Ok(json!({})),
        };
        match result {
            Ok(hit) => {
                ctx.note(f.kind, "inject", Some(target), scheduled, None);
                if heals(f.kind) {
                    self.active.insert(i);
                }
                ctx.fire(f.kind, target, hit);
            }
            Err(e) => ctx.note(f.kind, "inject", Some(target), scheduled, Some(e)),
        }
    }

    pub(super) async fn heal(&mut self, server: &mut Server, i: usize) {
        let f = &self.schedule.faults[i];
        let target = f.target.as_deref().unwrap_or("server");
        let result: Result<serde_json::Value, String> = match f.kind {
            FaultKind::ServerPause => server.resume().await.map(|_| json!({})),
            FaultKind::ServerKill => server.restart().await.map(|_| json!({})),
            FaultKind::Partition => {
                self.proxy.unpartition(target);
                Ok(json!({}))
            }
            FaultKind::ReplicaLag => server.resume_replicas().await.map(|_| json!({})),
            FaultKind::Failover => server.rejoin().await.map(|port| json!({"rejoined": port})),
            FaultKind::PrimaryPartition if server.is_own_cluster() => {
                server.reconnect_primary().await.map(|back| match back {
                    Some(r) => json!({
                        "reconnected": r.node,
                        "role": r.role,
                        "primary_id": r.primary_id,
                    }),
                    None => json!({}),
                })
            }
            FaultKind::PrimaryPartition => {
                let healed = match server.failover().await {
                    Ok(failover) => server.rejoin().await.map(|port| {
                        let mut value = failover_value(&failover);
                        value["rejoined"] = json!(port);
                        value
                    }),
                    Err(e) => Err(e),
                };
                let cut = self.cut_clients();
                for w in &cut {
                    self.proxy.unpartition(w);
                }
                healed.map(|mut v| {
                    v["reconnected_clients"] = json!(cut);
                    v
                })
            }
            FaultKind::Takeover => server
                .give_back()
                .await
                .map(|node| json!({"given_back_to": node})),
            // The lag ends in a failover: the primary that acknowledged
            // the lag's writes is killed, a replica that has none of them
            // promoted, and the old primary rejoins as a replica at once.
            FaultKind::LagFailover => match server.failover().await {
                Ok(failover) => server.rejoin().await.map(|port| {
                    let mut value = failover_value(&failover);
                    value["rejoined"] = json!(port);
                    value
                }),
                Err(e) => Err(e),
            },
            _ => Ok(json!({})),
        }
        .map_err(|e| e.to_string());
        match result {
            Ok(value) => self.ctx.note(f.kind, "heal", Some(target), value, None),
            Err(e) => self
                .ctx
                .note(f.kind, "heal", Some(target), json!({}), Some(e)),
        }
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
                .note(kind, "disarm", Some(&client), json!({}), None);
        }
        for slot in &self.ctx.slots {
            let armed: Vec<(FaultKind, u64)> = lock(&slot.armed).drain(..).collect();
            for (kind, _) in armed {
                self.ctx
                    .note(kind, "disarm", Some(&slot.name), json!({}), None);
            }
        }
    }
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
