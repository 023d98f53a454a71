//! The three server backends against real servers.
//!
//! Process tests run twice, against valkey 9.1 (found like the tool finds it;
//! `ci/install-valkey` installs it) and against Debian's redis-server 7.0 at
//! `/usr/bin/redis-server`. Container tests need a docker daemon and the image
//! from `ci/build-image`. When redis-server, docker or the image is missing,
//! a test fails if `CI=true` and otherwise says on stderr why it did not run
//! and returns: see [`unavailable`].

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ackgap::server::{Persistence, ProcessOptions, Server, ServerError, ServerSpec};

/// Debian's redis-server, the second process server in the matrix.
const REDIS7: &str = "/usr/bin/redis-server";

/// How long a paused server gets to (not) answer before the request is
/// declared timed out. The server cannot answer while stopped, so this only
/// bounds the test's duration.
const PAUSED_TIMEOUT: Duration = Duration::from_millis(300);

/// Reports a missing prerequisite: on CI (`CI=true`) that is a failure,
/// elsewhere the test says why it did not run and the caller returns.
fn unavailable(reason: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{reason} (CI=true, so a missing prerequisite is a failure)");
    }
    eprintln!("NOT RUN: {reason}");
}

/// The redis-server 7.0 process spec, or `None` (after [`unavailable`]).
fn redis7() -> Option<ServerSpec> {
    if Path::new(REDIS7).exists() {
        Some(ServerSpec::Process(ProcessOptions {
            binary: Some(PathBuf::from(REDIS7)),
        }))
    } else {
        unavailable(&format!("{REDIS7} is missing; run ci/install-valkey"));
        None
    }
}

fn valkey() -> ServerSpec {
    ServerSpec::Process(ProcessOptions::default())
}

/// Starts a container server, or `None` (after [`unavailable`]) when docker
/// or the image is missing. Any other failure fails the test.
async fn container(persistence: Persistence) -> Option<Server> {
    match Server::start(&ServerSpec::Container, persistence).await {
        Ok(server) => Some(server),
        Err(e @ (ServerError::Docker { .. } | ServerError::ImageMissing { .. })) => {
            unavailable(&format!("the container backend is unavailable: {e}"));
            None
        }
        Err(e) => panic!("the container server did not start: {e}"),
    }
}

async fn start(spec: &ServerSpec, persistence: Persistence) -> Server {
    Server::start(spec, persistence)
        .await
        .unwrap_or_else(|e| panic!("{spec} did not start: {e}"))
}

async fn connection(
    client: &redis::Client,
    timeout: Duration,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

async fn ping(server: &Server) -> redis::RedisResult<String> {
    let mut con = connection(&server.client(), Duration::from_secs(2)).await?;
    redis::cmd("PING").query_async(&mut con).await
}

async fn set(server: &Server, key: &str, value: &str) {
    let mut con = connection(&server.client(), Duration::from_secs(2))
        .await
        .unwrap();
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async::<()>(&mut con)
        .await
        .unwrap();
}

async fn get(server: &Server, key: &str) -> Option<String> {
    let mut con = connection(&server.client(), Duration::from_secs(2))
        .await
        .unwrap();
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut con)
        .await
        .unwrap()
}

/// Whether the process is gone: no `/proc` entry, or a zombie whose parent
/// (not us) has not reaped it yet.
fn process_is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
    }
}

// ---------------------------------------------------------------------------
// Scenarios shared by valkey 9 and redis 7.0 process servers.

async fn answers_ping_and_reports_its_version(spec: ServerSpec, software: &str) {
    let server = start(&spec, Persistence::None).await;
    assert_eq!(ping(&server).await.unwrap(), "PONG");
    assert_eq!(server.kind(), "process");
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    let describe = server.describe();
    assert!(
        describe.starts_with(software) && describe.contains("process on 127.0.0.1:"),
        "{describe}"
    );
    let dir = server.data_dir().unwrap();
    assert!(
        dir.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("ackgap-valkey-"),
        "{dir:?}"
    );
    assert!(dir.join("server.log").exists());
}

async fn pause_times_requests_out_until_resume(spec: ServerSpec) {
    let mut server = start(&spec, Persistence::None).await;
    let mut con = connection(&server.client(), PAUSED_TIMEOUT).await.unwrap();
    server.pause().await.unwrap();
    let err = redis::cmd("PING")
        .query_async::<String>(&mut con)
        .await
        .expect_err("a paused server answered");
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    server.resume().await.unwrap();
    assert_eq!(ping(&server).await.unwrap(), "PONG");
}

async fn kill_then_restart_answers_on_the_same_port(spec: ServerSpec) {
    let mut server = start(&spec, Persistence::None).await;
    let port = server.port();
    let pid = server.pid().unwrap();
    server.kill().await.unwrap();
    assert!(process_is_gone(pid));
    assert_eq!(server.pid(), None);
    assert!(ping(&server).await.is_err(), "a killed server answered");
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), Some(pid));
    assert_eq!(ping(&server).await.unwrap(), "PONG");
}

async fn aof_always_keeps_an_acknowledged_write_across_kill(spec: ServerSpec) {
    let mut server = start(&spec, Persistence::AofAlways).await;
    assert!(server.describe().contains("aof always"));
    set(&server, "job:1", "leased").await;
    server.kill().await.unwrap();
    server.restart().await.unwrap();
    assert_eq!(get(&server, "job:1").await.as_deref(), Some("leased"));
}

async fn no_persistence_loses_everything_on_kill(spec: ServerSpec) {
    let mut server = start(&spec, Persistence::None).await;
    set(&server, "job:1", "leased").await;
    server.kill().await.unwrap();
    server.restart().await.unwrap();
    assert_eq!(get(&server, "job:1").await, None);
}

async fn drop_kills_the_child_even_when_paused(spec: ServerSpec) {
    let mut server = start(&spec, Persistence::AofEverysec).await;
    let pid = server.pid().unwrap();
    let dir = server.data_dir().unwrap();
    server.pause().await.unwrap();
    drop(server);
    assert!(process_is_gone(pid), "pid {pid} outlived its Server");
    assert!(!dir.exists(), "{dir:?} outlived its Server");
}

async fn stop_shuts_down_and_removes_the_data_dir(spec: ServerSpec) {
    let server = start(&spec, Persistence::AofAlways).await;
    let pid = server.pid().unwrap();
    let dir = server.data_dir().unwrap();
    server.stop().await.unwrap();
    assert!(process_is_gone(pid));
    assert!(!dir.exists(), "{dir:?} survived stop");
}

/// One test per scenario and server: `scenario::valkey` and
/// `scenario::redis7`.
macro_rules! process_matrix {
    ($($scenario:ident $(($extra:expr))?;)*) => {$(
        mod $scenario {
            #[tokio::test]
            async fn valkey() {
                super::$scenario(super::valkey() $(, $extra.0)?).await;
            }

            #[tokio::test]
            async fn redis7() {
                if let Some(spec) = super::redis7() {
                    super::$scenario(spec $(, $extra.1)?).await;
                }
            }
        }
    )*};
}

process_matrix! {
    answers_ping_and_reports_its_version(("valkey 9.1.2", "redis 7.0.15"));
    pause_times_requests_out_until_resume;
    kill_then_restart_answers_on_the_same_port;
    aof_always_keeps_an_acknowledged_write_across_kill;
    no_persistence_loses_everything_on_kill;
    drop_kills_the_child_even_when_paused;
    stop_shuts_down_and_removes_the_data_dir;
}

// ---------------------------------------------------------------------------
// Process backend: binary discovery and dying with the tool.

#[tokio::test]
async fn a_missing_binary_names_the_env_var_and_the_install_script() {
    let spec = ServerSpec::Process(ProcessOptions {
        binary: Some(PathBuf::from("/nonexistent/valkey-server")),
    });
    let err = Server::start(&spec, Persistence::None).await.unwrap_err();
    assert!(
        matches!(&err, ServerError::BinaryNotFound { tried } if tried[0].contains("/nonexistent/valkey-server")),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("$ACKGAP_VALKEY_SERVER"), "{message}");
    assert!(message.contains("ci/install-valkey"), "{message}");
}

#[tokio::test]
async fn a_server_that_exits_at_startup_fails_with_its_log_tail() {
    // /bin/sh rejects the server's `--port` option on stderr and exits: a
    // stand-in for a server that cannot start (port taken, bad flag).
    let spec = ServerSpec::Process(ProcessOptions {
        binary: Some(PathBuf::from("/bin/sh")),
    });
    let err = Server::start(&spec, Persistence::None).await.unwrap_err();
    let ServerError::Start {
        reason, log_tail, ..
    } = &err
    else {
        panic!("expected Start, got {err:?}");
    };
    assert!(reason.contains("exited during startup"), "{err}");
    assert!(!log_tail.trim().is_empty(), "no log tail in: {err}");
    assert!(err.to_string().contains(log_tail.as_str()));
}

/// Not a test of its own: `the_child_dies_when_the_tool_is_killed` runs this
/// test binary again with `ACKGAP_TEST_HOLD_SERVER=1` to play the tool. It
/// starts a server, prints its pid and waits to be killed. Without the
/// variable it does nothing.
#[tokio::test]
async fn helper_hold_a_server_until_killed() {
    if std::env::var_os("ACKGAP_TEST_HOLD_SERVER").is_none() {
        return;
    }
    let server = start(&valkey(), Persistence::None).await;
    println!("ACKGAP_SERVER_PID {}", server.pid().unwrap());
    std::future::pending::<()>().await;
}

#[tokio::test]
async fn the_child_dies_when_the_tool_is_killed() {
    let mut tool = Command::new(std::env::current_exe().unwrap())
        .args([
            "servers::helper_hold_a_server_until_killed",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ACKGAP_TEST_HOLD_SERVER", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // libtest prints its own text on the same line, so look for the marker
    // anywhere; read on a thread so a silent helper fails the test instead
    // of hanging it.
    let stdout = BufReader::new(tool.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if let Some((_, pid)) = line.split_once("ACKGAP_SERVER_PID ") {
                let _ = tx.send(pid.trim().parse::<u32>().unwrap());
            }
        }
    });
    let pid = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(pid) => pid,
        Err(e) => {
            let _ = tool.kill();
            panic!("the helper printed no server pid within 30 s: {e}");
        }
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("ackgap-valkey-"),
        "pgrep -f ackgap-valkey- would miss the child"
    );
    assert!(!process_is_gone(pid));
    tool.kill().unwrap(); // SIGKILL: no destructor runs in the helper.
    tool.wait().unwrap();
    // The kernel delivers the parent-death signal asynchronously; poll with
    // a deadline (a wait, not an assertion on timing).
    let start = Instant::now();
    while !process_is_gone(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "server pid {pid} outlived the killed tool"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------
// Url backend.

#[tokio::test]
async fn an_unreachable_url_is_reported_as_unreachable() {
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // released at once: nothing listens there
    let url = format!("redis://127.0.0.1:{port}/");
    let err = Server::start(&ServerSpec::Url(url.clone()), Persistence::None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ServerError::Unreachable { url: shown, .. } if *shown == url),
        "{err:?}"
    );
    assert!(err.to_string().contains(&url));
}

#[tokio::test]
async fn a_wrong_password_is_reported_as_auth_and_never_shown() {
    let server = start(&valkey(), Persistence::None).await;
    let port = server.port();
    let mut con = connection(&server.client(), Duration::from_secs(2))
        .await
        .unwrap();
    redis::cmd("ACL")
        .arg(&["SETUSER", "worker", "on", ">right-pw", "~*", "+@all"])
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "default-pw"])
        .query_async::<()>(&mut con)
        .await
        .unwrap();

    for url in [
        format!("redis://worker:wrong-pw@127.0.0.1:{port}/"),
        format!("redis://:wrong-pw@127.0.0.1:{port}/"),
    ] {
        let err = Server::start(&ServerSpec::Url(url.clone()), Persistence::None)
            .await
            .unwrap_err();
        assert!(matches!(err, ServerError::Auth { .. }), "{url}: {err:?}");
        assert!(!err.to_string().contains("wrong-pw"), "{err}");
    }

    let url = format!("redis://worker:right-pw@127.0.0.1:{port}/");
    let reached = start(&ServerSpec::Url(url.clone()), Persistence::None).await;
    assert_eq!(reached.kind(), "url");
    assert_eq!(reached.url(), url);
    assert_eq!(ping(&reached).await.unwrap(), "PONG");
    let describe = reached.describe();
    assert!(describe.starts_with("valkey 9.1.2 url"), "{describe}");
    assert!(!describe.contains("right-pw"), "{describe}");
}

#[tokio::test]
async fn the_url_backend_refuses_faults() {
    let server = start(&valkey(), Persistence::None).await;
    let mut reached = start(&ServerSpec::Url(server.url()), Persistence::None).await;
    for err in [
        reached.pause().await.unwrap_err(),
        reached.resume().await.unwrap_err(),
        reached.kill().await.unwrap_err(),
        reached.restart().await.unwrap_err(),
    ] {
        assert!(
            matches!(err, ServerError::Unsupported { backend: "url", .. }),
            "{err:?}"
        );
    }
    let err = Server::start(&ServerSpec::Url(server.url()), Persistence::AofAlways)
        .await
        .unwrap_err();
    assert!(matches!(err, ServerError::Unsupported { .. }), "{err:?}");
    assert_eq!(ping(&reached).await.unwrap(), "PONG");
}

// ---------------------------------------------------------------------------
// Container backend.

#[tokio::test]
async fn container_server_answers_ping_and_reports_valkey_9() {
    let Some(server) = container(Persistence::None).await else {
        return;
    };
    assert_eq!(server.kind(), "container");
    assert_eq!(ping(&server).await.unwrap(), "PONG");
    let describe = server.describe();
    assert!(describe.starts_with("valkey 9.1.2 container"), "{describe}");
    assert!(server.url().starts_with("redis://127.0.0.1:"));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn paused_container_times_requests_out_until_resumed() {
    let Some(mut server) = container(Persistence::None).await else {
        return;
    };
    let mut con = connection(&server.client(), PAUSED_TIMEOUT).await.unwrap();
    server.pause().await.unwrap();
    let err = redis::cmd("PING")
        .query_async::<String>(&mut con)
        .await
        .expect_err("a paused container answered");
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    server.resume().await.unwrap();
    assert_eq!(ping(&server).await.unwrap(), "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_container_restarts_on_the_same_port_with_its_aof() {
    let Some(mut server) = container(Persistence::AofAlways).await else {
        return;
    };
    let port = server.port();
    set(&server, "job:1", "leased").await;
    server.pause().await.unwrap();
    server.kill().await.unwrap(); // while paused: the server never runs again
    assert!(ping(&server).await.is_err(), "a killed container answered");
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(get(&server, "job:1").await.as_deref(), Some("leased"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_container_server_removes_the_container() {
    let Some(server) = container(Persistence::None).await else {
        return;
    };
    let id = server.container_id().unwrap();
    drop(server);
    let docker = testcontainers::core::client::docker_client_instance()
        .await
        .unwrap();
    match docker.inspect_container(&id, None).await {
        Err(testcontainers::bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }) => {}
        other => panic!("container {id} survived its Server: {other:?}"),
    }
}

/// A running server answers which fault kinds it runs as its spec did
/// before it started (the refusals `--faults` gives up front hold once it
/// runs): a process bare and with both libraries loaded, and the same
/// server reached by URL, which runs none of the server's own faults.
#[tokio::test]
async fn a_running_server_supports_what_its_spec_said_it_would() {
    use ackgap::chaos::fault::Shape;
    use ackgap::fault::FaultKind;
    use ackgap::server::Instruments;
    let both = Instruments {
        power_loss: true,
        clock: true,
    };
    for instruments in [Instruments::default(), both] {
        let spec = valkey();
        let server = Server::start_instrumented(&spec, Persistence::None, instruments)
            .await
            .unwrap();
        let url = ServerSpec::Url(server.url());
        let reached = start(&url, Persistence::None).await;
        for kind in FaultKind::all() {
            let said = Shape::of_spec(&spec, instruments).supports(kind);
            assert_eq!(server.supports(kind), said, "{kind} on a process");
            let said = Shape::of_spec(&url, Instruments::default()).supports(kind);
            assert_eq!(reached.supports(kind), said, "{kind} by URL");
        }
        let runs = |s: &Server| FaultKind::all().filter(|&k| s.supports(k).is_ok()).count();
        assert!(
            runs(&server) > runs(&reached),
            "a URL takes no pause nor kill"
        );
        assert_eq!(
            server.supports(FaultKind::PowerLoss).is_ok(),
            instruments.power_loss
        );
    }
}
