//! A server under `valgrind --tool=callgrind`, for counting the
//! instructions it executes while a piece of client code runs: a figure
//! that does not move with the machine's load (the wall-clock rows of a
//! shared machine move by 2× from one day to the next). `ackgap bench
//! --queue` and `benches/instructions.rs` both count with it.
//!
//! For each count the counters are zeroed (`callgrind_control -z`), the
//! body runs, and the counters are dumped (`callgrind_control -d`); the
//! count covers everything the server did meanwhile: reading the requests,
//! the scripts, writing the replies, and whatever else a client had it do
//! in that window (a library's background polls included).

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a server could not be traced or counted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallgrindError {
    /// valgrind (or `callgrind_control`) is not installed.
    #[error("valgrind is not installed (ci/install-valkey installs it): {0}")]
    Missing(String),
    /// The traced server could not be started or did not answer.
    #[error("the server under callgrind: {0}")]
    Server(String),
    /// `callgrind_control` failed, or no dump appeared.
    #[error("callgrind: {0}")]
    Control(String),
}

/// True when `valgrind --version` runs.
pub fn available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// One server under callgrind; killed (and its directory removed) on drop.
pub struct Traced {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    dumps: usize,
}

/// When set, a directory each traced server's dumps are copied into when
/// it stops (`cg.out.N` as `PORT-cg.out.N`), for `callgrind_annotate`: where
/// a row's instructions go, function by function.
pub(crate) const KEEP_ENV: &str = "ACKGAP_CALLGRIND_KEEP";

impl Drop for Traced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(keep) = std::env::var_os(KEEP_ENV) {
            let keep = Path::new(&keep);
            let _ = std::fs::create_dir_all(keep);
            for n in 1..=self.dumps {
                let name = format!("cg.out.{n}");
                let _ = std::fs::copy(
                    self.dir.path().join(&name),
                    keep.join(format!("{}-{name}", self.port)),
                );
            }
        }
    }
}

impl Traced {
    /// Starts `binary` (a `valkey-server` or `redis-server`) under
    /// callgrind on a free loopback port, persisting nothing. It dies with
    /// this process.
    pub fn start(binary: &Path) -> Result<Traced, CallgrindError> {
        if !available() {
            return Err(CallgrindError::Missing("`valgrind --version` fails".into()));
        }
        // Named like the servers of src/server (`ackgap-valkey-*`), so
        // ci/check-leftovers finds one left running.
        let dir = tempfile::Builder::new()
            .prefix("ackgap-valkey-callgrind-")
            .tempdir()
            .map_err(|e| CallgrindError::Server(format!("a temporary directory: {e}")))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| CallgrindError::Server(format!("a free loopback port: {e}")))?
            .port();
        let log = std::fs::File::create(dir.path().join("server.log"))
            .map_err(|e| CallgrindError::Server(format!("the server log: {e}")))?;
        let log2 = log
            .try_clone()
            .map_err(|e| CallgrindError::Server(format!("the server log: {e}")))?;
        let mut command = Command::new("valgrind");
        // The server dies with this process even when it is killed, and a
        // Ctrl-C in the terminal reaches only this process, which then
        // drops it.
        crate::server::die_with_parent(&mut command);
        command.process_group(0);
        let child = command
            .arg("--tool=callgrind")
            .arg(format!(
                "--callgrind-out-file={}/cg.out",
                dir.path().display()
            ))
            .arg(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(log2)
            .stderr(log)
            .spawn()
            .map_err(|e| CallgrindError::Missing(format!("valgrind does not start: {e}")))?;
        Ok(Traced {
            child,
            dir,
            port,
            dumps: 0,
        })
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A multiplexed connection without a response timeout (a server under
    /// callgrind on a loaded machine takes seconds for a large call), once
    /// the server answers (within a minute).
    pub async fn connect(&self) -> Result<redis::aio::MultiplexedConnection, CallgrindError> {
        let client =
            redis::Client::open(self.url()).map_err(|e| CallgrindError::Server(e.to_string()))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
            match client
                .get_multiplexed_async_connection_with_config(&config)
                .await
            {
                Ok(c) => return Ok(c),
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    return Err(CallgrindError::Server(format!(
                        "did not answer within a minute: {e}"
                    )))
                }
            }
        }
    }

    fn control(&self, args: &[&str]) -> Result<(), CallgrindError> {
        let out = Command::new("callgrind_control")
            .args(args)
            .arg(self.child.id().to_string())
            .output()
            .map_err(|e| CallgrindError::Missing(format!("callgrind_control: {e}")))?;
        if !out.status.success() {
            return Err(CallgrindError::Control(format!(
                "callgrind_control {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Instructions the server executed while `body` ran.
    pub async fn count<F: std::future::Future<Output = ()>>(
        &mut self,
        body: F,
    ) -> Result<u64, CallgrindError> {
        Ok(self.count_timed(body).await?.0)
    }

    /// The instructions an idle server executes per second (its timers:
    /// `serverCron` runs `hz` times a second), counted over `window`. A
    /// count whose calls come slowly (a client in another language through
    /// a pipe, on a loaded machine) holds more of them: subtracting this
    /// rate times the count's duration leaves the calls' own cost.
    pub(crate) async fn idle_per_second(
        &mut self,
        window: Duration,
    ) -> Result<f64, CallgrindError> {
        let (n, elapsed) = self.count_timed(tokio::time::sleep(window)).await?;
        Ok(n as f64 / elapsed.as_secs_f64().max(1e-3))
    }

    /// Instructions the server executed while `body` ran, and how long
    /// `body` took.
    pub(crate) async fn count_timed<F: std::future::Future<Output = ()>>(
        &mut self,
        body: F,
    ) -> Result<(u64, Duration), CallgrindError> {
        self.control(&["-z"])?;
        let started = Instant::now();
        body.await;
        let elapsed = started.elapsed();
        self.control(&["-d"])?;
        self.dumps += 1;
        let file = self.dir.path().join(format!("cg.out.{}", self.dumps));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(n) = std::fs::read_to_string(&file).ok().and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("summary:"))
                    .and_then(|v| v.trim().parse().ok())
            }) {
                return Ok((n, elapsed));
            }
            if Instant::now() >= deadline {
                return Err(CallgrindError::Control(format!(
                    "no callgrind dump at {}",
                    file.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
