//! The container backend in a build without the `container` feature: no
//! container can be started, and saying `--server container` gets an error
//! that names the feature. The type is uninhabited, so every other method
//! is unreachable by construction.

use super::powercut::PowerLoss;
use super::{Instruments, Persistence, ServerError};
use crate::fault::FaultKind;

/// Never constructed: [`ContainerServer::start`] always refuses.
#[derive(Debug)]
pub(crate) enum ContainerServer {}

impl ContainerServer {
    pub(crate) async fn start(
        _persistence: Persistence,
        _instruments: Instruments,
    ) -> Result<Self, ServerError> {
        Err(ServerError::Docker {
            reason: "this ackgap was built without its `container` feature (a default one); \
                     rebuild with default features to run a container"
                .to_string(),
        })
    }

    /// What a container would run, as `container.rs` answers (a start
    /// refuses it first).
    pub(crate) fn supports(kind: FaultKind, instruments: Instruments) -> Result<(), String> {
        use super::topology::{elsewhere, loaded, FAKETIME, SHIM};
        match kind {
            FaultKind::ServerPause | FaultKind::ServerKill => Ok(()),
            FaultKind::PowerLoss => loaded(kind, instruments.power_loss, SHIM, "the container"),
            FaultKind::ClockJump => loaded(kind, instruments.clock, FAKETIME, "the container"),
            other => elsewhere(other),
        }
    }

    pub(crate) fn port(&self) -> u16 {
        match *self {}
    }

    pub(crate) fn image(&self) -> &str {
        match *self {}
    }

    pub(crate) fn id(&self) -> &str {
        match *self {}
    }

    pub(crate) fn short_id(&self) -> &str {
        match *self {}
    }

    pub(crate) async fn pause(&mut self) -> Result<(), ServerError> {
        match *self {}
    }

    pub(crate) async fn resume(&mut self) -> Result<(), ServerError> {
        match *self {}
    }

    pub(crate) async fn kill(&mut self) -> Result<(), ServerError> {
        match *self {}
    }

    pub(crate) async fn restart(&mut self) -> Result<(), ServerError> {
        match *self {}
    }

    pub(crate) fn instruments(&self) -> Instruments {
        match *self {}
    }

    pub(crate) fn jump_clock(&mut self, _delta_ms: i64) -> Result<i64, ServerError> {
        match *self {}
    }

    pub(crate) fn clock_offset_ms(&self) -> Option<i64> {
        match *self {}
    }

    pub(crate) fn clock_file(&self) -> Option<std::path::PathBuf> {
        match *self {}
    }

    pub(crate) async fn power_cut(&mut self) -> Result<PowerLoss, ServerError> {
        match *self {}
    }

    pub(crate) async fn stop(self: Box<Self>) -> Result<(), ServerError> {
        match *self {}
    }
}
