//! The container backend: the valkey image run by testcontainers.
//!
//! No registry is reachable where this tool is built, so the default image
//! is the local `ackgap/valkey:9.1.2` that `ci/build-image` makes (FROM
//! scratch, the same binary as the process backend). Elsewhere set
//! `$ACKGAP_VALKEY_IMAGE=valkey/valkey:9.1`: the official image's entrypoint
//! passes arguments starting with `--` to `valkey-server`, so the same
//! command line works. The image must be present locally; it is never pulled.
//!
//! The server listens on 0.0.0.0 with protected mode off *inside* the
//! container's network namespace; on the host it is published on
//! 127.0.0.1 only, on a port chosen here, so the port survives `docker stop`
//! and `docker start` (a kill and restart). Data lives in `/data` in the
//! container's own filesystem, which also survives a restart.
//!
//! Power loss ([`ContainerServer::power_cut`]): the host's build of the
//! power-loss shim is bind-mounted read-only and preloaded (the image is
//! the host's binary and C library, so the shim links there too), and its
//! cut signal goes through `docker kill --signal`; the container exits with
//! the shim's status, `/data` cut to what was fsynced, until it is started
//! again.
//!
//! Clock jumps ([`ContainerServer::jump_clock`]): the host's libfaketime is
//! bind-mounted read-only and preloaded the same way, and the directory of
//! its control file is bind-mounted too: the host renames a new offset into
//! it, and the server reads it at its next clock call.
//!
//! Containers carry the label `ackgap.owner=ackgap`, so leftovers (after a
//! `kill -9` of the tool, which no destructor survives) can be removed with
//! `docker rm -f $(docker ps -aq --filter label=ackgap.owner=ackgap)`.
//!
//! testcontainers removes the container when it is dropped; its destructor
//! needs a tokio runtime, so [`Drop`] provides one when dropped outside any.

use std::time::{Duration, Instant};

use testcontainers::bollard;
use testcontainers::core::{AccessMode, IntoContainerPort, Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ContainerRequest, GenericImage, ImageExt};

use super::image::image_reference;
use super::powercut::{self, PowerLoss};
use super::{
    free_port, local_url, wait_for_ping, Instruments, Persistence, ServerError,
    CONTAINER_START_DEADLINE, PORT_TRIES, STOP_DEADLINE,
};

use super::clock::{Clock, DIR_IN_CONTAINER, LIB_IN_CONTAINER};
use super::powercut::SHIM_IN_CONTAINER;
use super::topology::{elsewhere, loaded, FAKETIME, SHIM};
use crate::fault::FaultKind;

/// The port the server listens on inside the container.
const CONTAINER_PORT: u16 = 6379;

/// Label on every container this backend starts.
const OWNER_LABEL: (&str, &str) = ("ackgap.owner", "ackgap");

#[derive(Debug)]
pub(crate) struct ContainerServer {
    /// Always `Some` until dropped; an `Option` so `Drop` can move it into a
    /// runtime.
    container: Option<ContainerAsync<GenericImage>>,
    image: String,
    id: String,
    port: u16,
    instruments: Instruments,
    /// The fake clock's control file, with [`Instruments::clock`]
    /// (its directory bind-mounted into the container).
    clock: Option<Clock>,
}

impl ContainerServer {
    /// Starts the container as a task of its own ([`super::detached`]):
    /// Ctrl-C while testcontainers creates, starts or waits for it does not
    /// cut the start short between the container's creation and its
    /// handle, which would leave it running; the start ends, and the
    /// handle dropped removes it.
    ///
    /// With [`Instruments::power_loss`] the power-loss shim (the host's
    /// build: the image holds the host's C library) is bind-mounted
    /// read-only and loaded with `LD_PRELOAD`, following `/data`.
    pub(crate) async fn start(
        persistence: Persistence,
        instruments: Instruments,
    ) -> Result<Self, ServerError> {
        super::detached(Self::start_here(persistence, instruments)).await
    }

    async fn start_here(
        persistence: Persistence,
        instruments: Instruments,
    ) -> Result<Self, ServerError> {
        let (name, tag) = image_reference();
        let image = format!("{name}:{tag}");
        let docker = docker().await?;
        match docker.inspect_image(&image).await {
            Ok(_) => {}
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Err(ServerError::ImageMissing { image }),
            Err(e) => {
                return Err(ServerError::Docker {
                    reason: format!("inspecting image {image}: {e}"),
                })
            }
        }

        // A port another listener took between the draw and docker's
        // bind: a new one.
        let mut tries = 1;
        loop {
            let port = free_port()?;
            match Self::start_on(&image, (&name, &tag), port, persistence, instruments).await {
                Err(e) if e.port_taken() && tries < PORT_TRIES => tries += 1,
                done => return done,
            }
        }
    }

    /// Starts `image` (its name and tag) published on 127.0.0.1:`port`.
    async fn start_on(
        image: &str,
        (name, tag): (&str, &str),
        port: u16,
        persistence: Persistence,
        instruments: Instruments,
    ) -> Result<Self, ServerError> {
        // This start's own label: what a failed start left is found by it.
        let start = format!(
            "{}-{port}-{}",
            std::process::id(),
            STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mut args: Vec<String> = [
            "--port",
            &CONTAINER_PORT.to_string(),
            "--bind",
            "0.0.0.0",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--daemonize",
            "no",
            "--dir",
            "/data",
            "--logfile",
            "",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(persistence.server_args().iter().map(|s| s.to_string()));

        let request = GenericImage::new(name, tag)
            .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
            .with_mapped_port(port, CONTAINER_PORT.tcp())
            .with_host_config_modifier(publish_on_loopback)
            .with_label(OWNER_LABEL.0, OWNER_LABEL.1)
            .with_label("ackgap.pid", std::process::id().to_string())
            .with_label(START_LABEL, &start)
            .with_cmd(args)
            .with_startup_timeout(CONTAINER_START_DEADLINE);
        let (request, clock) = instrumented(request, instruments)?;
        let container = match request.start().await {
            Ok(container) => container,
            Err(e) => {
                // A start that failed after docker created the container
                // (a port taken, a mount refused) leaves it created and
                // never started: removed, found by this start's label.
                remove_labelled(&start).await;
                return Err(ServerError::Start {
                    what: format!("a container of {image} on 127.0.0.1:{port}"),
                    reason: e.to_string(),
                    log_tail: String::new(),
                });
            }
        };
        let id = container.id().to_string();
        let server = ContainerServer {
            container: Some(container),
            image: image.to_owned(),
            id,
            port,
            instruments,
            clock,
        };
        server.wait_for_ping().await?;
        Ok(server)
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn image(&self) -> &str {
        &self.image
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn short_id(&self) -> &str {
        &self.id[..self.id.len().min(12)]
    }

    fn what(&self) -> String {
        format!(
            "container {} of {} on 127.0.0.1:{}",
            self.short_id(),
            self.image,
            self.port
        )
    }

    fn container(&self) -> &ContainerAsync<GenericImage> {
        self.container
            .as_ref()
            .expect("the container is only taken in drop")
    }

    fn fault_error(&self, op: &'static str, reason: impl ToString) -> ServerError {
        ServerError::Fault {
            what: self.what(),
            op,
            reason: reason.to_string(),
        }
    }

    async fn wait_for_ping(&self) -> Result<(), ServerError> {
        let client = redis::Client::open(local_url(self.port)).map_err(|e| ServerError::Start {
            what: self.what(),
            reason: format!("bad local URL: {e}"),
            log_tail: String::new(),
        })?;
        if let Err(reason) = wait_for_ping(&client, CONTAINER_START_DEADLINE, || None).await {
            return Err(ServerError::Start {
                what: self.what(),
                reason,
                log_tail: self.log_tail().await,
            });
        }
        Ok(())
    }

    /// The last lines the server wrote to stdout and stderr.
    async fn log_tail(&self) -> String {
        let container = self.container();
        let mut text = String::new();
        for bytes in [
            container.stdout_to_vec().await,
            container.stderr_to_vec().await,
        ] {
            match bytes {
                Ok(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
                Err(e) => text.push_str(&format!("(cannot read the container log: {e})\n")),
            }
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The fault kinds a container runs (its faults follow): a process's,
    /// its libraries bind-mounted; the others as [`super::topology::elsewhere`].
    pub(crate) fn supports(kind: FaultKind, instruments: Instruments) -> Result<(), String> {
        match kind {
            FaultKind::ServerPause | FaultKind::ServerKill => Ok(()),
            FaultKind::PowerLoss => loaded(kind, instruments.power_loss, SHIM, "the container"),
            FaultKind::ClockJump => loaded(kind, instruments.clock, FAKETIME, "the container"),
            other => elsewhere(other),
        }
    }

    pub(crate) async fn pause(&mut self) -> Result<(), ServerError> {
        self.container()
            .pause()
            .await
            .map_err(|e| self.fault_error("pause", e))
    }

    pub(crate) async fn resume(&mut self) -> Result<(), ServerError> {
        self.container()
            .unpause()
            .await
            .map_err(|e| self.fault_error("resume", e))
    }

    /// `docker kill` (SIGKILL), then waits until docker reports the container
    /// stopped. A paused container is killed without running again.
    pub(crate) async fn kill(&mut self) -> Result<(), ServerError> {
        if !self.is_running().await? {
            return Ok(());
        }
        let options = bollard::query_parameters::KillContainerOptions {
            signal: "SIGKILL".to_string(),
        };
        docker()
            .await?
            .kill_container(&self.id, Some(options))
            .await
            .map_err(|e| self.fault_error("kill", e))?;
        let start = Instant::now();
        while self.is_running().await? {
            if start.elapsed() >= STOP_DEADLINE {
                return Err(self.fault_error(
                    "kill",
                    format!(
                        "still running {} ms after SIGKILL",
                        STOP_DEADLINE.as_millis()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// The libraries loaded at start.
    pub(crate) fn instruments(&self) -> Instruments {
        self.instruments
    }

    /// Moves the server's clock by `delta_ms` (libfaketime in the
    /// container reads the control file the host renames into its mounted
    /// directory); returns the offset from the real clock now in force. It
    /// persists across restarts.
    pub(crate) fn jump_clock(&mut self, delta_ms: i64) -> Result<i64, ServerError> {
        let what = self.what();
        Clock::jump_of(self.clock.as_mut(), what, delta_ms)
    }

    /// The clock's offset from the real one, when it can jump.
    pub(crate) fn clock_offset_ms(&self) -> Option<i64> {
        self.clock.as_ref().map(Clock::offset_ms)
    }

    /// libfaketime's control file on the host, when the server runs under
    /// it (the container sees its directory bind-mounted).
    pub(crate) fn clock_file(&self) -> Option<std::path::PathBuf> {
        self.clock.as_ref().map(Clock::file)
    }

    /// Power loss without the restart: the shim's cut signal through
    /// `docker kill --signal`, the container's exit awaited and checked
    /// (status [`powercut::STATUS_CUT`] and the shim's line in its log).
    /// The container stays stopped, its `/data` cut, until
    /// [`ContainerServer::restart`].
    pub(crate) async fn power_cut(&mut self) -> Result<PowerLoss, ServerError> {
        const OP: &str = "cut the power of";
        if !self.instruments.power_loss {
            return Err(self.fault_error(OP, powercut::NOT_LOADED));
        }
        if !self.is_running().await? {
            return Err(self.fault_error(OP, "it is not running"));
        }
        let docker = docker().await?;
        // By number: the image's C library is the host's, so the host's
        // SIGRTMIN is the container's.
        let options = bollard::query_parameters::KillContainerOptions {
            signal: powercut::cut_signal().to_string(),
        };
        docker
            .kill_container(&self.id, Some(options))
            .await
            .map_err(|e| self.fault_error(OP, e))?;
        let start = Instant::now();
        while self.is_running().await? {
            if start.elapsed() >= STOP_DEADLINE {
                let _ = self.kill().await;
                return Err(self.fault_error(
                    OP,
                    format!(
                        "still running {} ms after the cut signal; killed it",
                        STOP_DEADLINE.as_millis()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let status = docker
            .inspect_container(&self.id, None)
            .await
            .map_err(|e| self.fault_error(OP, e))?
            .state
            .and_then(|s| s.exit_code);
        let tail = self.log_tail().await;
        powercut::read_cut(status.and_then(|c| i32::try_from(c).ok()), &tail).map_err(|why| {
            self.fault_error(
                OP,
                format!("{why} (exit status {status:?}); the log ends:\n{tail}"),
            )
        })
    }

    async fn is_running(&self) -> Result<bool, ServerError> {
        self.container()
            .is_running()
            .await
            .map_err(|e| ServerError::Docker {
                reason: format!("inspecting {}: {e}", self.what()),
            })
    }

    /// Kills the container if it runs, starts it again (same host port, same
    /// filesystem) and waits for PING.
    pub(crate) async fn restart(&mut self) -> Result<(), ServerError> {
        self.kill().await?;
        if let Err(e) = self.container().start().await {
            return Err(ServerError::Start {
                what: self.what(),
                reason: e.to_string(),
                log_tail: self.log_tail().await,
            });
        }
        self.wait_for_ping().await
    }

    /// `docker stop` (SIGTERM, SIGKILL past the deadline), then removes the
    /// container.
    pub(crate) async fn stop(mut self: Box<Self>) -> Result<(), ServerError> {
        let what = self.what();
        let container = self
            .container
            .take()
            .expect("the container is only taken in drop or stop");
        // A paused container must run again to act on SIGTERM; unpausing a
        // running one fails harmlessly.
        let _ = container.unpause().await;
        let deadline_s = i32::try_from(STOP_DEADLINE.as_secs()).unwrap_or(i32::MAX);
        let stopped = container.stop_with_timeout(Some(deadline_s)).await;
        let removed = container.rm().await;
        if let Err(e) = stopped {
            return Err(ServerError::Stop {
                what,
                reason: e.to_string(),
            });
        }
        removed.map_err(|e| ServerError::Docker {
            reason: format!("removing {what}: {e}"),
        })
    }
}

impl Drop for ContainerServer {
    fn drop(&mut self) {
        let Some(container) = self.container.take() else {
            return;
        };
        // testcontainers removes the container in its destructor, which calls
        // `Handle::current()` and so panics outside a runtime.
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(container);
        } else if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            runtime.block_on(async move { drop(container) });
        } else {
            // No runtime can be had: leak rather than panic in a destructor.
            // The label lets CI find the container.
            std::mem::forget(container);
        }
    }
}

/// `request` with the instruments `instruments` asks for bind-mounted
/// read-only and preloaded: the power-loss shim (following `/data`), and
/// libfaketime with its control file's directory; and the clock, if any.
fn instrumented(
    request: ContainerRequest<GenericImage>,
    instruments: Instruments,
) -> Result<(ContainerRequest<GenericImage>, Option<Clock>), ServerError> {
    let mut preload = Vec::new();
    let request = if instruments.power_loss {
        let shim = powercut::shim_path()?;
        preload.push(SHIM_IN_CONTAINER);
        request
            .with_mount(
                Mount::bind_mount(shim.display().to_string(), SHIM_IN_CONTAINER)
                    .with_access_mode(AccessMode::ReadOnly),
            )
            .with_env_var("ACKGAP_POWERCUT_DIR", "/data")
    } else {
        request
    };
    let clock = instruments.clock.then(Clock::for_container).transpose()?;
    let request = match &clock {
        Some(clock) => {
            preload.push(LIB_IN_CONTAINER);
            let mut request = request
                .with_mount(
                    Mount::bind_mount(clock.library().display().to_string(), LIB_IN_CONTAINER)
                        .with_access_mode(AccessMode::ReadOnly),
                )
                .with_mount(
                    Mount::bind_mount(clock.dir().display().to_string(), DIR_IN_CONTAINER)
                        .with_access_mode(AccessMode::ReadOnly),
                );
            for (name, value) in clock.container_env() {
                request = request.with_env_var(name, value);
            }
            request
        }
        None => request,
    };
    let request = if preload.is_empty() {
        request
    } else {
        request.with_env_var("LD_PRELOAD", preload.join(":"))
    };
    Ok((request, clock))
}

/// The label naming one start of a container (pid, port, a counter).
const START_LABEL: &str = "ackgap.start";

/// Starts of containers by this process, for [`START_LABEL`].
static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Removes (forced, with its volumes) every container labelled with the
/// start `start`; best effort: what is left carries the owner label that
/// `ci/check-leftovers` and the guide's cleanup line find.
async fn remove_labelled(start: &str) {
    let Ok(docker) = docker().await else { return };
    let options = bollard::query_parameters::ListContainersOptions {
        all: true,
        filters: Some([("label".to_owned(), vec![format!("{START_LABEL}={start}")])].into()),
        ..Default::default()
    };
    let Ok(found) = docker.list_containers(Some(options)).await else {
        return;
    };
    for id in found.into_iter().filter_map(|c| c.id) {
        let options = bollard::query_parameters::RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        let _ = docker.remove_container(&id, Some(options)).await;
    }
}

/// Publishes the mapped port on 127.0.0.1 only; testcontainers leaves the
/// host IP empty, which docker reads as 0.0.0.0.
fn publish_on_loopback(host_config: &mut bollard::models::HostConfig) {
    if let Some(bindings) = host_config.port_bindings.as_mut() {
        for binding in bindings.values_mut().flatten().flatten() {
            binding.host_ip = Some("127.0.0.1".to_string());
        }
    }
}

async fn docker() -> Result<bollard::Docker, ServerError> {
    testcontainers::core::client::docker_client_instance()
        .await
        .map_err(|e| ServerError::Docker {
            reason: format!("cannot set up a docker client: {e}"),
        })
}
