//! The exit-code table of README.md ("## Exit codes"), one test per row:
//! each row's code reached by a real command of the `ackgap` binary, on
//! the embedded server (and Redis 7.0 where a reproduce line names it).

use crate::common::ackgap_env;
use crate::common::text;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

#[test]
fn exit_0_when_every_invariant_held() {
    let out = ackgap_env(&["explore", "--seed", "1", "--steps", "30"], &[]);
    assert_eq!(code(&out), Some(0), "{}", text(&out));
    assert!(text(&out).contains("verdict: valid"), "{}", text(&out));
}

#[test]
fn exit_1_when_an_invariant_was_violated() {
    // The rpop queue hands a job out and forgets it: a crash loses it.
    let out = ackgap_env(
        &[
            "explore",
            "--queue",
            "rpop",
            "--seed",
            "3",
            "--shrink-runs",
            "0",
        ],
        &[],
    );
    assert_eq!(code(&out), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no-loss"), "{}", text(&out));
}

#[test]
fn exit_2_when_the_exhaustive_search_stops_at_its_state_limit() {
    let out = ackgap_env(
        &[
            "exhaust",
            "--depth",
            "100",
            "--model-only",
            "--states-max",
            "1000",
        ],
        &[],
    );
    assert_eq!(code(&out), Some(2), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("past states_max 1000"), "{said}");
    assert!(said.contains("verdict: unknown"), "{said}");
}

#[test]
fn exit_64_when_a_schedule_names_a_worker_the_run_does_not_have() {
    // Seed 1's walk has two workers; its schedule is refused before any
    // server starts.
    let out = ackgap_env(&["explore", "--seed", "1", "--schedule", "l7"], &[]);
    assert_eq!(code(&out), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("names worker 7, but this run has 2"),
        "{}",
        text(&out)
    );
}

#[test]
fn exit_64_when_a_replay_line_names_a_worker_the_run_does_not_have() {
    let out = ackgap_env(&["replay", "reference/marker/j2w2l100m3r1/e1.l9"], &[]);
    assert_eq!(code(&out), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("names worker 9, but this run has 2"),
        "{}",
        text(&out)
    );
}

#[cfg(feature = "apalis")]
#[test]
fn exit_64_before_the_run_when_a_replay_field_or_a_schedule_step_is_out_of_the_queue_s_range() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["replay", "reference/marker/j2w2l0m3r1/e0.l0"],
            "l (the lease in ms) must be 1..=",
        ),
        (
            &["replay", "reference/marker/j2w2l100m3r0/e0.l0"],
            "r (the reap limit) must be 1..=100000",
        ),
        (
            &["replay", "reference/marker/j2w2l100m0r1/e0.l0"],
            "m (max_attempts) must be 1..=1000000",
        ),
        (
            &["replay", "reference/marker/j2w2l100m3r1/e0.w600001"],
            "a wait must be a number of ms in 0..=600000",
        ),
        (
            &["explore", "--schedule", "e0 l0 t1000000000000001"],
            "a tick must be a number of ms in 0..=",
        ),
    ];
    for (args, why) in cases {
        let out = ackgap_env(args, &[]);
        assert_eq!(code(&out), Some(64), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(why), "{args:?}: {}", text(&out));
        assert!(!text(&out).contains("verdict"), "{args:?}: {}", text(&out));
    }
}

#[test]
fn exit_64_naming_the_bound_when_a_count_is_past_it() {
    let cases: [&[&str]; 4] = [
        &["explore", "--steps", "18446744073709551615"],
        &["run", "--seeds", "18446744073709551615"],
        &["exhaust", "--depth", "1001"],
        &["explore", "--jobs", "257"],
    ];
    for args in cases {
        let out = ackgap_env(args, &[]);
        assert_eq!(code(&out), Some(64), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("1..="), "{args:?}: {}", text(&out));
    }
}

#[test]
fn exit_64_when_a_replay_line_calls_an_operation_the_queue_lacks() {
    // apalis has no lease to extend.
    let out = ackgap_env(&["replay", "apalis/marker/j1w1l100m3r1/e0.l0.x0"], &[]);
    assert_eq!(code(&out), Some(64), "{}", text(&out));
    assert!(text(&out).contains("does not support"), "{}", text(&out));
}

#[test]
fn exit_64_with_a_clear_message_for_a_negative_duration() {
    for args in [
        &["chaos", "--duration", "-5s"][..],
        &["chaos", "--duration=-5s"][..],
    ] {
        let out = ackgap_env(args, &[]);
        assert_eq!(code(&out), Some(64), "{}", text(&out));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("a duration must be positive"), "{said}");
        assert!(!said.contains("unexpected argument"), "{said}");
    }
}

#[test]
fn exit_64_when_a_url_server_is_asked_for_persistence() {
    // ackgap cannot configure a server it does not own: the request is
    // refused, the server is not blamed.
    let out = ackgap_env(
        &[
            "explore",
            "--server",
            "redis://127.0.0.1:1",
            "--persistence",
            "always",
        ],
        &[],
    );
    assert_eq!(code(&out), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("cannot set persistence"),
        "{}",
        text(&out)
    );
}

#[test]
fn exit_69_when_the_server_is_unreachable() {
    let out = ackgap_env(
        &["explore", "--server", "redis://127.0.0.1:1", "--steps", "5"],
        &[],
    );
    assert_eq!(code(&out), Some(69), "{}", text(&out));
}

#[test]
fn exit_70_when_the_server_does_not_stop_cleanly() {
    // A wrapper that starts the real server and, told to stop, stops it
    // and then lingers past ackgap's stop deadline (10 s): ackgap kills
    // it and reports an internal error. `exec sleep` keeps one process,
    // so the kill leaves nothing behind.
    let real = ackgap::server::find_valkey_binary().expect("a valkey-server binary");
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("slow-stop.sh");
    let real = real.display();
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \"$1\" in --version|-v) exec '{real}' \"$@\";; esac\n\
             '{real}' \"$@\" &\nchild=$!\n\
             trap 'kill -TERM $child; wait $child; exec sleep 30' TERM\nwait $child\n"
        ),
    )
    .unwrap();
    make_executable(&wrapper);
    let out = ackgap_env(
        &["explore", "--steps", "5"],
        &[("ACKGAP_VALKEY_SERVER", wrapper.to_str().unwrap())],
    );
    assert_eq!(code(&out), Some(70), "{}", text(&out));
    assert!(text(&out).contains("stopping the server"), "{}", text(&out));
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn exit_73_when_run_or_chaos_cannot_write_the_history_and_the_error_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let history = file.join("h.jsonl");
    let history = history.to_str().unwrap();
    for args in [
        &["run", "--history", history][..],
        &[
            "chaos",
            "--duration",
            "1s",
            "--jobs",
            "5",
            "--history",
            history,
        ][..],
    ] {
        let out = ackgap_env(args, &[]);
        assert_eq!(code(&out), Some(73), "{args:?}: {}", text(&out));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&format!("{} is a file, not a directory", file.display())),
            "{args:?}: {said}"
        );
        assert!(!said.contains("os error 17"), "{said}");
    }
}

#[test]
fn exit_130_when_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(["chaos", "--duration", "60s", "--faults", "none", "--json"])
        .arg("--history")
        .arg(&history)
        .env_remove("ACKGAP_SERVER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The run is under way once its history holds an event.
    while std::fs::read_to_string(&history).map_or(true, |h| h.is_empty()) {
        assert!(child.try_wait().unwrap().is_none(), "chaos ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), Some(130), "{}", text(&out));
}

/// Runs `ackgap ARGS` with its stdout a pipe whose reading end is closed
/// before the command starts: every write to it fails with EPIPE.
fn with_stdout_closed(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(args)
        .env_remove("ACKGAP_SERVER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

#[test]
fn exit_141_without_a_panic_when_stdout_is_closed_early() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.jsonl");
    let history = history.to_str().unwrap();
    let made = ackgap_env(
        &[
            "chaos",
            "--duration",
            "1s",
            "--jobs",
            "5",
            "--faults",
            "none",
            "--json",
            "--history",
            history,
        ],
        &[],
    );
    assert_eq!(code(&made), Some(0), "{}", text(&made));
    for args in [
        &["check", history][..],
        &["check", history, "--json"][..],
        &["explore", "--seed", "1", "--steps", "20"][..],
    ] {
        let out = with_stdout_closed(args);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!said.contains("panicked"), "{args:?}: {said}");
        assert_eq!(code(&out), Some(141), "{args:?}: {said}");
    }
}

/// The command `out` printed on stdout to run it again: `replay:` (an
/// explorer, exact) or `rerun:` (chaos, wall clock).
fn reproduce_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            l.strip_prefix("replay: ")
                .or_else(|| l.strip_prefix("rerun: "))
        })
        .unwrap_or_else(|| panic!("no reproduce line in\n{}", text(out)))
        .to_owned()
}

/// The lines of `out`'s stdout that start with `prefix`.
fn lines_with(out: &Output, prefix: &str) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

#[test]
fn an_explore_reproduce_line_pasted_reruns_its_schedule_on_the_same_server() {
    let redis = crate::common::redis_binary();
    let redis = redis.to_str().unwrap();
    let out = ackgap_env(
        &[
            "explore",
            "--queue",
            "rpop",
            "--seed",
            "3",
            "--schedule",
            "e0 l0 k0",
        ],
        &[("ACKGAP_VALKEY_SERVER", redis)],
    );
    assert_eq!(code(&out), Some(1), "{}", text(&out));
    let line = reproduce_line(&out);
    assert!(line.contains("--schedule 'e0 l0 k0'"), "{line}");
    assert!(line.starts_with("ACKGAP_VALKEY_SERVER="), "{line}");
    let dir = tempfile::tempdir().unwrap();
    let again = crate::common::paste(&line, dir.path());
    assert_eq!(code(&again), Some(1), "{line}: {}", text(&again));
    assert!(text(&again).contains("server redis 7"), "{}", text(&again));
    for prefix in ["schedule: ", "verdict: invalid ", "no-loss", "replay: "] {
        // The verdict line ends in timings: its first words are compared.
        let words = |o: &Output| -> Vec<String> {
            lines_with(o, prefix)
                .iter()
                .map(|l| l.split("  (").next().unwrap().to_owned())
                .collect()
        };
        assert_eq!(words(&again), words(&out), "{prefix}");
        assert_eq!(words(&out).len(), 1, "{prefix}: {}", text(&out));
    }
}

#[test]
fn a_chaos_reproduce_line_pasted_reruns_on_the_same_server() {
    let redis = crate::common::redis_binary();
    let redis = redis.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ackgap"));
    let out = cmd
        .args([
            "chaos",
            "--seed",
            "4",
            "--duration",
            "1s",
            "--jobs",
            "10",
            "--faults",
            "worker",
            "--persistence",
            "none",
        ])
        .current_dir(dir.path())
        .env_remove("ACKGAP_SERVER")
        .env("ACKGAP_VALKEY_SERVER", redis)
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(0), "{}", text(&out));
    let line = reproduce_line(&out);
    for flag in ["--persistence none", "--server process", "crash-ack-gap"] {
        assert!(line.contains(flag), "{flag}: {line}");
    }
    let again = crate::common::paste(&line, dir.path());
    assert_eq!(code(&again), Some(0), "{line}: {}", text(&again));
    assert!(text(&again).contains("redis 7"), "{}", text(&again));
    assert_eq!(reproduce_line(&again), line);
}

#[test]
fn a_replay_that_finds_nothing_is_not_headed_counterexample() {
    let out = ackgap_env(&["replay", "reference/marker/j2w2l100m3r1/e0.l0.c0"], &[]);
    assert_eq!(code(&out), Some(0), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("replay on reference"), "{said}");
    assert!(!said.contains("counterexample"), "{said}");
    assert!(
        said.contains(
            "replay: ackgap replay reference/marker/j2w2l100m3r1/e0.l0.c0 --server process"
        ),
        "{said}"
    );
}

#[test]
fn a_url_server_is_named_by_the_variable_in_every_reproduce_line() {
    // The walk's own server, reached by URL: the line names
    // "$ACKGAP_SERVER", never the URL.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let Some(server) = crate::common::start(
            crate::common::Backend::Valkey,
            ackgap::server::Persistence::None,
        )
        .await
        else {
            return;
        };
        let url = server.url();
        let out = ackgap_env(
            &[
                "explore",
                "--server",
                &url,
                "--queue",
                "rpop",
                "--seed",
                "3",
                "--schedule",
                "e0 l0 k0",
            ],
            &[],
        );
        assert_eq!(code(&out), Some(1), "{}", text(&out));
        let line = reproduce_line(&out);
        assert!(line.ends_with("--server \"$ACKGAP_SERVER\""), "{line}");
        assert!(!line.contains("redis://"), "{line}");
        let dir = tempfile::tempdir().unwrap();
        let again =
            crate::common::paste(&format!("export ACKGAP_SERVER='{url}'; {line}"), dir.path());
        assert_eq!(code(&again), Some(1), "{}", text(&again));
        server.stop().await.unwrap();
    });
}

#[test]
fn a_container_reproduce_line_names_the_container_and_pasted_reruns_the_schedule() {
    let args = [
        "explore",
        "--server",
        "container",
        "--queue",
        "rpop",
        "--seed",
        "3",
        "--schedule",
        "e0 l0 k0",
    ];
    let out = ackgap_env(&args, &[]);
    if code(&out) == Some(69) {
        crate::common::unavailable(crate::common::Backend::Container, text(&out));
        return;
    }
    assert_eq!(code(&out), Some(1), "{}", text(&out));
    let line = reproduce_line(&out);
    assert!(line.ends_with("--server container"), "{line}");
    let dir = tempfile::tempdir().unwrap();
    let again = crate::common::paste(&line, dir.path());
    assert_eq!(code(&again), Some(1), "{line}: {}", text(&again));
    assert!(text(&again).contains("container"), "{}", text(&again));
    assert_eq!(reproduce_line(&again), line);
}

#[test]
fn a_closed_stderr_loses_messages_but_never_the_exit_code() {
    // A panic would exit 101; the messages go to a pipe nobody reads.
    for (args, expected) in [
        (&["check", "/nonexistent/h.jsonl"][..], 64),
        (
            &[
                "explore",
                "--queue",
                "rpop",
                "--seed",
                "3",
                "--shrink-runs",
                "5",
            ][..],
            1,
        ),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ackgap"))
            .args(args)
            .env_remove("ACKGAP_SERVER")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stderr.take());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(expected), "{args:?}");
    }
}

/// `ackgap check` of an empty file, or of the summary `.json` a run
/// writes beside its history (given by mistake), is bad input (64), and
/// the error says what a history is; not an unknown verdict (2) nor a
/// bare parse error.
#[test]
fn check_of_an_empty_file_or_of_a_run_s_summary_is_bad_input_saying_what_a_history_is() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let out = ackgap_env(&["check", empty.to_str().unwrap()], &[]);
    assert_eq!(code(&out), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("no event: an empty file is not a history"),
        "{}",
        text(&out)
    );
    let history = dir.path().join("h.jsonl");
    let made = ackgap_env(
        &[
            "chaos",
            "--duration",
            "1s",
            "--jobs",
            "5",
            "--faults",
            "none",
            "--history",
            history.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code(&made), Some(0), "{}", text(&made));
    let summary = history.with_extension("json");
    let out = ackgap_env(&["check", summary.to_str().unwrap()], &[]);
    assert_eq!(code(&out), Some(64), "{}", text(&out));
    assert!(
        text(&out)
            .contains("this is a run's summary (one JSON object with a verdict), not a history")
            && text(&out).contains("a history is JSON lines, one event a line"),
        "{}",
        text(&out)
    );
}
