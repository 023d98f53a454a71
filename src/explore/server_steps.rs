//! The server's own faults as steps of the explorers: `K`
//! ([`Step::ServerKill`]: kill -9, then a restart on the same data under
//! the server's persistence) and `P` ([`Step::PowerLoss`]: the power-loss
//! shim drops every byte the server did not fsync, then it is powered on
//! again). A durability finding of the chaos runner then replays exactly,
//! on logical time: `e0 w50 e1 P` under `appendfsync everysec` loses the
//! acknowledged `JOB-1` on every run, and under `always` never.
//!
//! They need a server the explorers own ([`OwnedServer`]: `--server
//! process`, started by the explorer), and `P` one started with the shim
//! ([`crate::server::Instruments::power_loss`]); a schedule with one on
//! any other server is refused before it runs
//! ([`ExploreError::Unsupported`]).
//!
//! # The oracle
//!
//! What a crash may lose under each persistence mode is the model's
//! ([`crate::model::durable`]): nothing under `always`, everything under
//! no persistence, a prefix of the writes under `everysec`. After the
//! restart the driver reads the queue back and goes on from the model's
//! state the queue came back in; a state the mode does not allow (a kill
//! under `always` that lost a write) is a divergence. Whether an
//! acknowledged job was lost is judged from the history, by no-loss: the
//! model accepts the loss `everysec` allows, the checkers report it.
//!
//! The step is recorded as a fault of the nemesis (`server-kill` or
//! `power-loss`, inject then heal, as the chaos runner records them), and
//! the driver waits until the queue's connection answers again, so the
//! next step meets a server that is up.
//!
//! # Design notes
//!
//! Under `everysec` the driver makes the cleared queue durable before a
//! walk's first step (`durable_point`): `appendfsync always` for one
//! write, so that a power loss cannot bring back what the previous walk on
//! the same server left (the shrinker replays many walks on one server).
//!
//! Walks draw `K` and `P` only on an [`OwnedServer`] that asks for them
//! ([`OwnedServer::drawing`], `ackgap explore --faults`), with a coin of
//! the walk's side stream: without it a seed's walk is what it was.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use redis::aio::ConnectionManager;
use serde_json::json;
use tokio::sync::{Mutex, MutexGuard};

use super::driver::{ExploreError, Outcome};
use super::op::{Schedule, Step};
use crate::fault::FaultKind;
use crate::history::fault::{Action, FaultEvent};
use crate::history::{Process, Recorder};
use crate::model::durable::Kept;
use crate::queue::QueueError;
use crate::server::{Persistence, Server};

/// How long the driver waits for the queue's connection to answer again
/// after a restart.
const BACK_DEADLINE: Duration = Duration::from_secs(10);

/// A server the explorers own: they may kill it and cut its power between
/// steps. Cloned into every walk's [`super::Subject`]; the explorer takes
/// it back with [`OwnedServer::into_server`] to stop it.
#[derive(Clone)]
pub struct OwnedServer {
    server: Arc<Mutex<Server>>,
    persistence: Persistence,
    power_loss: bool,
    kill_percent: u32,
    power_loss_percent: u32,
    /// Set by a step that restarted the server, taken by
    /// [`reopen_after_restart`].
    restarted: Arc<AtomicBool>,
}

impl std::fmt::Debug for OwnedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnedServer({})", self.persistence)
    }
}

impl OwnedServer {
    /// `server`, started by the explorer with `persistence` (the server
    /// does not say its own), for its steps `K` (any process server) and
    /// `P` (one started with the power-loss shim). Walks draw neither
    /// until [`OwnedServer::drawing`] asks.
    pub fn new(server: Server, persistence: Persistence) -> OwnedServer {
        let power_loss = server.supports(crate::fault::FaultKind::PowerLoss).is_ok();
        OwnedServer {
            server: Arc::new(Mutex::new(server)),
            persistence,
            power_loss,
            kill_percent: 0,
            power_loss_percent: 0,
            restarted: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Walks draw a `K` with `kill_percent` chance per step and a `P` with
    /// `power_loss_percent` (0: never; `P` only on a server with the shim).
    pub fn drawing(self, kill_percent: u32, power_loss_percent: u32) -> OwnedServer {
        OwnedServer {
            kill_percent: kill_percent.min(100),
            power_loss_percent: if self.power_loss {
                power_loss_percent.min(100)
            } else {
                0
            },
            ..self
        }
    }

    /// What `ackgap explore` adds to draw the faults this server's walks
    /// draw (` --faults server-kill,power-loss`), or nothing: the seed's
    /// command names it, a replay line does not need it (its `K` and `P`
    /// are in its steps).
    pub fn faults_flag(&self) -> String {
        let kinds: Vec<&str> = [
            (self.kill_percent, FaultKind::ServerKill),
            (self.power_loss_percent, FaultKind::PowerLoss),
        ]
        .iter()
        .filter(|(percent, _)| *percent > 0)
        .map(|(_, kind)| kind.name())
        .collect();
        match kinds.is_empty() {
            true => String::new(),
            false => format!(" --faults {}", kinds.join(",")),
        }
    }

    /// The server, for as long as the guard lives (a fault step waits).
    pub async fn lock(&self) -> MutexGuard<'_, Server> {
        self.server.lock().await
    }

    /// The server back, once no walk holds a clone of this (`Err`: one
    /// still does).
    pub fn into_server(self) -> Result<Server, OwnedServer> {
        let OwnedServer {
            server,
            persistence,
            power_loss,
            kill_percent,
            power_loss_percent,
            restarted,
        } = self;
        Arc::try_unwrap(server)
            .map(Mutex::into_inner)
            .map_err(|server| OwnedServer {
                server,
                persistence,
                power_loss,
                kill_percent,
                power_loss_percent,
                restarted,
            })
    }

    /// The persistence the server runs with.
    pub fn persistence(&self) -> Persistence {
        self.persistence
    }

    /// What a crash (a kill or a power loss: the same) keeps under the
    /// server's persistence (see [`crate::model::durable`]).
    pub fn kept(&self) -> Kept {
        match self.persistence {
            Persistence::None => Kept::Nothing,
            Persistence::AofAlways => Kept::All,
            Persistence::AofEverysec => Kept::Prefix,
        }
    }

    /// Why this server cannot run `step`, if it cannot.
    fn refusal(&self, step: &Step) -> Option<&'static str> {
        match step {
            Step::PowerLoss if !self.power_loss => {
                Some("a power loss (the server was started without the power-loss shim)")
            }
            _ => None,
        }
    }

    /// A `K` or `P` drawn by the walk, with the coins of its side stream
    /// (no coin is drawn while both chances are 0).
    pub(crate) fn draw(&self, coins: &mut ChaCha8Rng) -> Option<Step> {
        let mut coin = |percent: u32| percent > 0 && coins.random_range(0..100) < percent;
        if coin(self.kill_percent) {
            Some(Step::ServerKill)
        } else if coin(self.power_loss_percent) {
            Some(Step::PowerLoss)
        } else {
            None
        }
    }

    /// Kills the server (or cuts its power) and starts it again, recorded
    /// as the nemesis's fault, inject then heal; then waits until `conn`
    /// answers. Answers a note for the step's log line.
    pub(crate) async fn fault(
        &self,
        step: &Step,
        recorder: &Recorder,
        conn: &mut ConnectionManager,
    ) -> Result<String, QueueError> {
        let nemesis = Process::new(recorder, "nemesis");
        let event = |kind, action, detail| {
            nemesis.fault(Ok(FaultEvent::new(kind, action, Some("server"), detail)))
        };
        let failed = |op: &'static str| {
            move |e: crate::server::ServerError| QueueError::Protocol {
                op,
                reply: e.to_string(),
            }
        };
        let mut server = self.server.lock().await;
        let (kind, note) = match step {
            Step::PowerLoss => {
                let cut = server.power_cut().await.map_err(failed("power loss"))?;
                let detail = json!({"files": cut.files, "dropped_bytes": cut.dropped_bytes});
                event(FaultKind::PowerLoss, Action::Inject, detail);
                server.power_on().await.map_err(failed("power on"))?;
                (FaultKind::PowerLoss, format!("({cut}; powered on)"))
            }
            _ => {
                server.kill().await.map_err(failed("kill"))?;
                event(FaultKind::ServerKill, Action::Inject, json!({}));
                server.restart().await.map_err(failed("restart"))?;
                (FaultKind::ServerKill, "(killed; restarted)".to_string())
            }
        };
        drop(server);
        self.restarted.store(true, Ordering::SeqCst);
        event(
            kind,
            Action::Heal,
            json!({"persistence": self.persistence.to_string()}),
        );
        answering(conn).await?;
        Ok(format!("{note} under persistence {}", self.persistence))
    }
}

/// Opens the queue's connections afresh ([`crate::adapter::Adapter::reopen`])
/// when a step restarted `subject`'s server since they were last opened:
/// a library that reconnects only on the error its first call meets
/// (arq, BullMQ) would otherwise answer a heal's reads, or the next walk's
/// first calls, with the dead connection's error. Called where no worker
/// holds anything: a heal after its crashes, and a walk's start.
pub(crate) async fn reopen_after_restart(subject: &super::Subject) -> Result<(), QueueError> {
    match &subject.server {
        Some(owned) if owned.restarted.swap(false, Ordering::SeqCst) => {
            subject.adapter.reopen().await
        }
        _ => Ok(()),
    }
}

/// A call's `answer` after a step of `before` restarted the server, on a
/// queue the model does not describe: an unknown or unavailable error is
/// the step's answer ([`Outcome::Unanswered`], recorded `info` or `fail`
/// as the chaos runner records it) and the walk goes on. A library that
/// reconnects only on the error its first call meets (Sidekiq's, arq's)
/// answers the first call of each connection so after a restart, as it
/// would in production. Before any restart, and on the reference queue,
/// an error stops the walk as before.
pub(crate) fn met_the_restart(
    answer: Result<Outcome, QueueError>,
    before: &[Step],
    refines: bool,
) -> Result<Outcome, QueueError> {
    match answer {
        Err(e @ (QueueError::Unknown { .. } | QueueError::Unavailable { .. }))
            if !refines && before.iter().any(Step::is_server_fault) =>
        {
            Ok(Outcome::Unanswered {
                error: e.to_string(),
            })
        }
        answer => answer,
    }
}

/// Waits until `conn` answers `PING` (a connection manager reconnects on
/// the error its first call after a restart meets), [`BACK_DEADLINE`] at
/// most.
async fn answering(conn: &mut ConnectionManager) -> Result<(), QueueError> {
    let began = std::time::Instant::now();
    loop {
        let ping: Result<String, _> = redis::cmd("PING").query_async(conn).await;
        match ping {
            Ok(_) => return Ok(()),
            Err(e) if began.elapsed() > BACK_DEADLINE => {
                return Err(QueueError::from_redis("ping after a restart", e))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Makes everything the server acknowledged so far durable under
/// `appendfsync everysec`: `always` for one write, which fsyncs the whole
/// AOF before its reply, then `everysec` again. Nothing to do under the
/// other modes.
pub(crate) async fn durable_point(
    owned: &OwnedServer,
    conn: &mut ConnectionManager,
) -> Result<(), QueueError> {
    if owned.persistence != Persistence::AofEverysec {
        return Ok(());
    }
    // One at a time: a pipeline's writes would be flushed after the
    // last `CONFIG SET`, under `everysec` again.
    for args in [
        &["CONFIG", "SET", "appendfsync", "always"][..],
        &["INCR", "ackgap-durable-point"],
        &["CONFIG", "SET", "appendfsync", "everysec"],
    ] {
        redis::cmd(args[0])
            .arg(&args[1..])
            .query_async::<redis::Value>(conn)
            .await
            .map_err(|e| QueueError::from_redis("a durable point", e))?;
    }
    Ok(())
}

/// Refuses a schedule with a server step on a subject whose server the
/// explorers do not own, or that cannot run it, before anything runs.
pub(crate) fn refuse(
    owned: Option<&OwnedServer>,
    queue: &str,
    schedule: &Schedule,
) -> Result<(), ExploreError> {
    for (step_index, step) in schedule.steps().iter().enumerate() {
        if !step.is_server_fault() {
            continue;
        }
        let why = match owned {
            None => Some(
                "a server fault: the explorers do not own this server (run with --server process)",
            ),
            Some(owned) => owned.refusal(step),
        };
        if let Some(operation) = why {
            return Err(ExploreError::Unsupported {
                step_index,
                step: step.clone(),
                queue: queue.to_owned(),
                operation,
            });
        }
    }
    Ok(())
}
