//! Hostile conditions for the `ackgap` binary: a history it cannot write,
//! a full disk, a port taken by a program that is not Redis, its server
//! dying mid-run, Ctrl-C pressed twice. Each ends with a clear message, the
//! exit code README.md documents for its class, and no server left running.
//! (`cli.rs` beside this file covers one Ctrl-C, invalid flags, a missing binary, an
//! unreachable URL and a wrong password.)

use crate::common::{ackgap, text};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The pid of the embedded server, from the header `ackgap run` prints
/// (`... process on 127.0.0.1:PORT (pid N, ...`).
fn server_pid(out: &Output) -> Option<u32> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rest = stdout.split_once("(pid ")?.1;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_history_path_that_cannot_be_written_is_exit_73_before_any_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let under_a_file = file.join("h.jsonl");
    for path in [
        "/proc/x.jsonl",
        under_a_file.to_str().unwrap(),
        dir.path().to_str().unwrap(),
    ] {
        let started = Instant::now();
        let out = ackgap(&["run", "--history", path]);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(73), "{path}: {msg}");
        assert!(
            msg.contains(&format!("cannot write the history to {path}")),
            "{msg}"
        );
        assert!(
            !msg.contains("ackgap run: seed"),
            "a server was started first: {msg}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{path}: slow");
    }
}

#[test]
fn a_full_disk_stops_the_run_with_exit_73_and_no_server_outlives_it() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("SKIPPED: no /dev/full here");
        return;
    }
    // A short campaign: the history is the smoke scenario's, which every
    // campaign runs, whatever its budget of walks.
    let out = ackgap(&[
        "run",
        "--seed",
        "2",
        "--seeds",
        "1",
        "--steps",
        "10",
        "--history",
        "/dev/full",
    ]);
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(73), "{msg}");
    assert!(
        msg.contains("cannot write the history to /dev/full"),
        "{msg}"
    );
    assert!(!msg.contains("panicked"), "{msg}");
    let pid = server_pid(&out).expect("the run printed its server");
    assert!(!alive(pid), "server {pid} outlived the tool");
}

/// What a program that is not Redis does with a connection.
#[derive(Clone, Copy, Debug)]
enum Squatter {
    /// Answers like a web server.
    Http,
    /// Closes every connection at once.
    Closes,
    /// Accepts and never says a word.
    Silent,
}

/// Listens on a free loopback port as `kind` does, until the test ends.
fn squat(kind: Squatter) -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            match kind {
                Squatter::Http => {
                    let mut buf = [0u8; 256];
                    let _ = conn.read(&mut buf);
                    let _ =
                        conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
                }
                Squatter::Closes => {}
                Squatter::Silent => held.push(conn),
            }
        }
    });
    port
}

#[test]
fn a_port_taken_by_a_program_that_is_not_redis_is_a_clear_error_with_exit_69() {
    for (kind, says) in [
        (Squatter::Http, "not the Redis protocol"),
        (Squatter::Closes, "127.0.0.1"),
        (Squatter::Silent, "timed out"),
    ] {
        let port = squat(kind);
        let url = format!("redis://127.0.0.1:{port}");
        let started = Instant::now();
        let out = ackgap(&["run", "--server", &url]);
        let msg = text(&out);
        assert_eq!(out.status.code(), Some(69), "{kind:?}: {msg}");
        assert!(
            msg.contains(&format!("127.0.0.1:{port}")),
            "{kind:?}: {msg}"
        );
        assert!(msg.contains(says), "{kind:?}: {msg}");
        assert!(!msg.contains("panicked"), "{kind:?}: {msg}");
        // One short attempt, no retry storm.
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{kind:?} took {:?}",
            started.elapsed()
        );
    }
}

/// The pids of `pid`'s children, from /proc.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Starts a long exploration (it would run for hours) and waits until its
/// embedded server is up and the walks have run for a moment.
fn long_exploration() -> (Child, u32) {
    let child = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args([
            "explore", "--seed", "1", "--steps", "200", "--seeds", "100000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let server = loop {
        // Only server children: binary discovery may run a short python3.
        let found = children(child.id()).into_iter().find(|c| {
            std::fs::read(format!("/proc/{c}/cmdline"))
                .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("ackgap-valkey-"))
        });
        if let Some(server) = found {
            break server;
        }
        assert!(Instant::now() < deadline, "no server child appeared");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(500));
    (child, server)
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// Waits for `child` at most `limit`; kills it and fails past that.
fn finish_within(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the tool still runs {limit:?} later");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn the_server_dying_mid_run_is_a_clear_error_with_exit_69_not_a_hang() {
    let (child, server) = long_exploration();
    signal(server, "-KILL");
    let out = finish_within(child, Duration::from_secs(30));
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(69), "{msg}");
    assert!(msg.contains("the walk stopped"), "{msg}");
    assert!(!msg.contains("panicked"), "{msg}");
}

#[test]
fn ctrl_c_twice_exits_130_once_and_no_server_outlives_it() {
    let (child, server) = long_exploration();
    let pid = child.id();
    signal(pid, "-INT");
    signal(pid, "-INT");
    let out = finish_within(child, Duration::from_secs(30));
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(130), "{msg}");
    assert_eq!(msg.matches("interrupted").count(), 1, "{msg}");
    assert!(!msg.contains("panicked"), "{msg}");
    assert!(!alive(server), "server {server} outlived the tool");
}
