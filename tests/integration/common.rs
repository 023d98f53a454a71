//! Shared by the integration test binaries: the server matrix.
//!
//! Every queue test runs against three real servers: Valkey 9.1 as an
//! embedded process, Redis 7.0 (Debian's `redis-server`) as a process, and
//! the Valkey container built by `ci/build-image`. `matrix!` turns one test
//! body into a module with one test per backend, so test names read
//! `claim::valkey`, `claim::redis7`, `claim::container`.
//!
//! A backend that is not installed fails the test when `CI=true` and is
//! skipped with a message elsewhere.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use ackgap::queue::Queue;
use ackgap::server::{Persistence, ProcessOptions, Server, ServerSpec};

/// One server of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// valkey-server 9.1 (discovered like the tool does) as a child process.
    Valkey,
    /// Debian's redis-server 7.0 as a child process.
    Redis7,
    /// The local Valkey image under testcontainers.
    Container,
}

/// A running server and a queue on it.
pub struct Ctx {
    /// The server; tests may pause, kill or restart it.
    pub server: Server,
    /// A queue with a name unique to this test.
    pub queue: Queue,
    /// The backend.
    pub backend: Backend,
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Fails in CI, skips with a message elsewhere.
pub fn unavailable(backend: Backend, why: impl std::fmt::Display) -> Option<Server> {
    if in_ci() {
        panic!("{backend:?} backend unavailable in CI: {why}");
    }
    eprintln!("SKIPPED ({backend:?} backend not available here): {why}");
    None
}

/// The redis-server 7.0 binary: `$ACKGAP_REDIS_SERVER`, else Debian's.
pub fn redis_binary() -> PathBuf {
    std::env::var_os("ACKGAP_REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/redis-server"))
}

/// The spec of `backend`.
pub fn spec(backend: Backend) -> ServerSpec {
    match backend {
        Backend::Valkey => ServerSpec::Process(ProcessOptions { binary: None }),
        Backend::Redis7 => ServerSpec::Process(ProcessOptions {
            binary: Some(redis_binary()),
        }),
        Backend::Container => ServerSpec::Container,
    }
}

/// Starts `backend` with `persistence`, or explains why it cannot.
pub async fn start(backend: Backend, persistence: Persistence) -> Option<Server> {
    if backend == Backend::Redis7 && !redis_binary().exists() {
        return unavailable(
            backend,
            format!(
                "{} not found (ci/install-valkey installs it)",
                redis_binary().display()
            ),
        );
    }
    match Server::start(&spec(backend), persistence).await {
        Ok(server) => Some(server),
        Err(e) if backend == Backend::Container => unavailable(backend, e),
        Err(e) => panic!("{backend:?} server did not start: {e}"),
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh queue name.
pub fn queue_name() -> String {
    format!(
        "t{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `body` against `backend` (no persistence).
pub async fn run<F, Fut>(backend: Backend, body: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()>,
{
    run_with(backend, Persistence::None, body).await
}

/// Runs `body` against `backend` with `persistence`.
pub async fn run_with<F, Fut>(backend: Backend, persistence: Persistence, body: F)
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(server) = start(backend, persistence).await else {
        return;
    };
    let queue = Queue::connect(&server.client(), &queue_name())
        .await
        .expect("connect to the test server");
    body(Ctx {
        server,
        queue,
        backend,
    })
    .await;
}

/// One test per backend for each named async fn taking a [`Ctx`].
#[macro_export]
macro_rules! matrix {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn valkey() {
                $crate::common::run($crate::common::Backend::Valkey, super::$name).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis7() {
                $crate::common::run($crate::common::Backend::Redis7, super::$name).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn container() {
                $crate::common::run($crate::common::Backend::Container, super::$name).await
            }
        }
    )*};
}

/// Every key on the server with its value, to detect *any* write: `DUMP`,
/// except a hash, which is its fields and values in field order. A hash in
/// the hashtable encoding (the queue's jobs column) may be rehashed by a
/// read, and then dumps its fields in another order with nothing written.
pub async fn keyspace(q: &Queue) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut conn = q.connection();
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        let value: Vec<u8> = if kind == "hash" {
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
                .arg(&k)
                .query_async(&mut conn)
                .await
                .unwrap();
            pairs.sort();
            pairs
                .into_iter()
                .flat_map(|(f, v)| {
                    [
                        f.len().to_le_bytes().to_vec(),
                        f,
                        v.len().to_le_bytes().to_vec(),
                        v,
                    ]
                })
                .flatten()
                .collect()
        } else {
            redis::cmd("DUMP")
                .arg(&k)
                .query_async(&mut conn)
                .await
                .unwrap()
        };
        out.push((k, value));
    }
    out
}

/// Whether docker and the container backend's image are here; when not,
/// says so through [`unavailable`] (which panics in CI).
pub fn containers_here() -> bool {
    let image = ackgap::server::image_reference();
    let present = std::process::Command::new("docker")
        .args(["image", "inspect", &format!("{}:{}", image.0, image.1)])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        unavailable(Backend::Container, "docker or the image is missing");
    }
    present
}

/// Pastes `line` into `sh -c` as a user would: `ackgap` found on the
/// PATH, in `dir`, with neither server variable set (the line must
/// carry what it needs).
pub fn paste(line: &str, dir: &std::path::Path) -> std::process::Output {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_ackgap"))
        .parent()
        .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    std::process::Command::new("sh")
        .args(["-c", line])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("ACKGAP_SERVER")
        .env_remove("ACKGAP_VALKEY_SERVER")
        .output()
        .expect("run sh")
}

/// The `ackgap` this test build made, with `args`: a command to set an
/// environment or a directory on before it runs.
pub fn ackgap_command(args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"));
    command.args(args);
    command
}

/// `ackgap ARGS` run to its end in the test's environment.
pub fn ackgap(args: &[&str]) -> std::process::Output {
    ackgap_command(args).output().expect("run ackgap")
}

/// What a run printed: its stdout, then its stderr.
pub fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `ackgap ARGS` run in `dir`.
pub fn ackgap_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    ackgap_command(args)
        .current_dir(dir)
        .output()
        .expect("run ackgap")
}

/// `ackgap ARGS` run with `env` set and without `$ACKGAP_SERVER` (what a
/// command must say itself, a run on the developer's server must not
/// change).
pub fn ackgap_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    ackgap_command(args)
        .env_remove("ACKGAP_SERVER")
        .envs(env.iter().copied())
        .output()
        .expect("run ackgap")
}
