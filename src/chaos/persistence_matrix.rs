//! The persistence matrix behind `ackgap chaos --persistence-matrix`: the same seed
//! under each persistence mode, server kills added to the faults, so that
//! one table shows which invariants hold under which mode.
//!
//! # Design notes
//!
//! `persistence_matrix::run` runs each mode on a fresh server and answers a
//! `DurabilityMatrix`, or a `MatrixError` (a URL server cannot be killed);
//! the command prints it.

use std::path::{Path, PathBuf};

use super::runner::{self, ChaosConfig, ChaosError, ChaosReport};
use super::schedule::FaultKind;
use crate::check::Verdict;
use crate::server::{Persistence, Server, ServerError, ServerSpec};

/// The persistence modes, in the matrix's column order.
pub const MODES: [Persistence; 3] = [
    Persistence::None,
    Persistence::AofEverysec,
    Persistence::AofAlways,
];

/// Why the matrix could not be run to the end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MatrixError {
    /// A URL server cannot be killed and restarted.
    #[error(
        "--persistence-matrix kills and restarts the server: use --server process or container"
    )]
    UrlServer,
    /// A server could not be found or started.
    #[error(transparent)]
    Server(ServerError),
    /// The run under one mode stopped.
    #[error("persistence {mode}: {source}")]
    Run {
        /// The mode whose run stopped.
        mode: Persistence,
        /// Why.
        source: ChaosError,
    },
    /// A server did not stop cleanly after its run.
    #[error("stopping the server: {0}")]
    Stop(ServerError),
}

/// One run per persistence mode.
#[derive(Debug)]
pub struct DurabilityMatrix {
    /// The configuration every mode ran (server kills included).
    pub config: ChaosConfig,
    /// Each mode's report, in [`MODES`] order.
    pub reports: Vec<(Persistence, ChaosReport)>,
}

impl DurabilityMatrix {
    /// The verdict under `always`, the mode that promises durability: the
    /// matrix's verdict.
    pub fn verdict(&self) -> Verdict {
        self.reports
            .iter()
            .find(|(m, _)| *m == Persistence::AofAlways)
            .map_or(Verdict::Unknown, |(_, r)| r.verdict)
    }
}

/// The history file of seed `seed`'s run under `mode`, in the matrix's
/// directory `dir`.
pub(crate) fn history_path(dir: &Path, seed: u64, mode: Persistence) -> PathBuf {
    dir.join(format!("chaos-{seed}-{mode}.jsonl"))
}

/// Runs `config` (server kills added) once per mode of [`MODES`], each on
/// a fresh server of `spec`, the histories written in `dir`; `started`
/// hears of each server before its run, with its description.
pub async fn run(
    spec: &ServerSpec,
    dir: &Path,
    mut config: ChaosConfig,
    mut started: impl FnMut(Persistence, &str),
) -> Result<DurabilityMatrix, MatrixError> {
    if matches!(spec, ServerSpec::Url(_)) {
        return Err(MatrixError::UrlServer);
    }
    config.faults.0.insert(FaultKind::ServerKill);
    let mut reports = Vec::new();
    for mode in MODES {
        let mut server = Server::start_instrumented(spec, mode, config.faults.instruments())
            .await
            .map_err(MatrixError::Server)?;
        started(mode, &server.describe());
        let history = history_path(dir, config.seed, mode);
        let result = runner::run(&mut server, config.clone(), Some(history), None).await;
        let stopped = server.stop().await;
        let report = result.map_err(|source| MatrixError::Run { mode, source })?;
        stopped.map_err(MatrixError::Stop)?;
        reports.push((mode, report));
    }
    Ok(DurabilityMatrix { config, reports })
}
