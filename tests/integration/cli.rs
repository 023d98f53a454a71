//! The `ackgap` binary as a user meets it: the main job, and clear errors
//! with documented exit codes for bad input.

use crate::common::ackgap_env;
use crate::common::text;
use std::process::Command;

#[test]
fn ackgap_run_holds_every_promised_invariant_in_every_phase_and_reports_json() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.jsonl");
    let out = ackgap_env(
        &[
            "run",
            "--seed",
            "5",
            "--seeds",
            "4",
            "--steps",
            "40",
            "--json",
            "--history",
            history.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["verdict"], "valid");
    let strings = |v: &serde_json::Value, field: Option<&str>| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| field.map_or(x, |f| &x[f]).as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        strings(&report["invariants"], None),
        [
            "no-loss",
            "fenced-settlement",
            "settle-once",
            "admission",
            "structure",
            "effect-once",
            "bounded-retries",
            "lease-respected",
            "lease-exclusive",
            "delay-respected",
            "liveness",
            "refinement"
        ]
    );
    assert_eq!(
        strings(&report["phases"], Some("name")),
        [
            "exhaust",
            "naive",
            "natural",
            "marker",
            "marker-before",
            "marker-after",
            "smoke"
        ]
    );
    let phases = report["phases"].as_array().unwrap();
    // The exhaustive search reaches its pinned state count.
    assert_eq!(phases[0]["cells"]["refinement"]["counts"]["states"], 4029);
    // Every history checker judged the run of each new state, healed.
    for invariant in [
        "no-loss",
        "fenced-settlement",
        "effect-once",
        "lease-respected",
    ] {
        assert_eq!(phases[0]["cells"][invariant]["runs"], 4028, "{invariant}");
    }
    for phase in phases {
        let cells = phase["cells"].as_object().unwrap();
        assert!(cells.values().all(|c| c["verdict"] == "valid"), "{phase}");
    }
    // Effect-once is judged for marker, reported only for naive.
    assert_eq!(phases[3]["cells"]["effect-once"]["reported_only"], false);
    assert_eq!(phases[1]["cells"]["effect-once"]["reported_only"], true);
    assert_eq!(phases[1]["runs"], 4);
    assert!(report["replay"].as_str().unwrap().contains("--seed 5"));
    // The stored history re-judges to the same verdict offline.
    let out = ackgap_env(&["check", history.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("verdict: valid"));
}

#[test]
fn an_invalid_flag_is_a_usage_error_with_exit_64() {
    let out = ackgap_env(&["run", "--no-such-flag"], &[]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(text(&out).contains("--no-such-flag"));
    let out = ackgap_env(&["run", "--persistence", "sometimes"], &[]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    let out = ackgap_env(&["run", "--server", "mysql://x"], &[]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    // The default campaign's flags beside --queue (whose budget sets the
    // battery's walks) are refused, not silently ignored. (`--junit` is
    // both's: the battery writes its phases too.)
    for flag in [&["--seeds", "3"][..], &["--steps", "5"]] {
        let mut args = vec!["run", "--queue", "lmove"];
        args.extend_from_slice(flag);
        let out = ackgap_env(&args, &[]);
        assert_eq!(out.status.code(), Some(64), "{flag:?}: {}", text(&out));
        assert!(text(&out).contains("cannot be used with"), "{}", text(&out));
    }
}

#[test]
fn a_missing_server_binary_names_the_variable_and_the_install_script() {
    let out = ackgap_env(
        &["run"],
        &[("ACKGAP_VALKEY_SERVER", "/nonexistent/valkey-server")],
    );
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    let msg = text(&out);
    assert!(msg.contains("ACKGAP_VALKEY_SERVER"), "{msg}");
    assert!(msg.contains("ci/install-valkey"), "{msg}");
}

#[test]
fn an_unreachable_url_is_a_clear_error_with_exit_69() {
    // Port 1 on loopback: nothing listens there.
    let out = ackgap_env(&["run", "--server", "redis://127.0.0.1:1"], &[]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    assert!(text(&out).contains("127.0.0.1:1"), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_clear_error_and_the_right_one_works() {
    use ackgap::server::{Persistence, ProcessOptions, Server, ServerSpec};
    let server = Server::start(
        &ServerSpec::Process(ProcessOptions { binary: None }),
        Persistence::None,
    )
    .await
    .unwrap();
    let mut conn = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("tester")
        .arg("on")
        .arg(">s3cret")
        .arg("~*")
        .arg("+@all")
        .query_async(&mut conn)
        .await
        .unwrap();
    let port = server
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let wrong = format!("redis://tester:nope@127.0.0.1:{port}");
    let out = tokio::task::spawn_blocking(move || ackgap_env(&["run", "--server", &wrong], &[]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    let msg = text(&out).to_lowercase();
    assert!(msg.contains("password") || msg.contains("auth"), "{msg}");
    assert!(
        !msg.contains("nope"),
        "the password is never printed: {msg}"
    );
    // The right one, through a short explore (`ackgap run` under a
    // password, whole, is verdict_auth's).
    let right = format!("redis://tester:s3cret@127.0.0.1:{port}");
    let out = tokio::task::spawn_blocking(move || {
        ackgap_env(
            &[
                "explore", "--seeds", "1", "--steps", "10", "--server", &right,
            ],
            &[],
        )
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn a_malformed_history_is_an_error_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"index\":0,\"time_ms\":0,\"process\":\"p\",\"type\":\"invoke\",\"f\":\"reap\"}\ngarbage\n",
    )
    .unwrap();
    let out = ackgap_env(&["check", path.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(text(&out).contains("bad.jsonl:2:"), "{}", text(&out));
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

#[test]
fn ctrl_c_stops_the_run_with_exit_130_and_no_server_outlives_it() {
    let child = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args([
            "explore", "--seed", "1", "--steps", "200", "--seeds", "100000",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let servers = loop {
        // Only server children: binary discovery may run a short python3.
        let found: Vec<u32> = children(pid)
            .into_iter()
            .filter(|c| {
                std::fs::read(format!("/proc/{c}/cmdline"))
                    .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("ackgap-valkey-"))
            })
            .collect();
        if !found.is_empty() {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no server child appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
    // A server the tool owns is killed and reaped before it exits; one
    // still being started when the interrupt came is killed by the kernel
    // as the tool exits (PR_SET_PDEATHSIG, src/server/process.rs), which
    // completes a moment after the tool's exit (a .ci/run saw /proc/PID
    // still there at once). So each must be gone, or a zombie, within a
    // bounded wait; one still running after it outlived the tool.
    for server in servers {
        let gone = || match std::fs::read_to_string(format!("/proc/{server}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with(['Z', 'X'])),
        };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !gone() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(gone(), "server {server} outlived the tool");
    }
}

#[test]
fn ackgap_bench_only_runs_the_named_rows_and_reports_each_round_checked_as_json() {
    let out = ackgap_env(
        &[
            "bench",
            "--only",
            "drain (complete + lease next",
            "--jobs",
            "300",
            "--rounds",
            "2",
            "--json",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    assert_eq!(
        row["name"],
        "reference: drain (complete + lease next, one call)"
    );
    assert_eq!(row["valid"], true, "{row:#?}");
    assert_eq!(row["per_round"], 300);
    assert_eq!(row["rates"].as_array().unwrap().len(), 2);
    assert!(row["median"].as_f64().unwrap() > 0.0, "{row:#?}");
    assert_eq!(report["valid"], true);
    assert!(
        report["reproduce"]
            .as_str()
            .unwrap()
            .ends_with("--only 'drain (complete + lease next'"),
        "{}",
        report["reproduce"]
    );
}

#[test]
fn ackgap_bench_only_matching_no_row_is_a_usage_error() {
    let out = ackgap_env(&["bench", "--only", "no such row", "--rounds", "1"], &[]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("--only \"no such row\" matches no row"),
        "{}",
        text(&out)
    );
}

#[test]
fn ackgap_bench_html_draws_each_row_as_a_bar_and_never_replaces_an_earlier_file() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("bench.html");
    let html_arg = html.to_str().unwrap();
    let args = [
        "bench",
        "--only",
        "drain (complete + lease next",
        "--jobs",
        "200",
        "--rounds",
        "2",
        "--html",
        html_arg,
    ];
    let out = ackgap_env(&args, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<rect").count(), 1, "one bar per row: {page}");
    assert!(
        page.contains("reference: drain (complete + lease next, one call)"),
        "{page}"
    );
    assert!(page.contains("jobs/s"), "{page}");
    // A second run refuses the file before it measures, and leaves it.
    let again = ackgap_env(&args, &[]);
    assert_eq!(again.status.code(), Some(73), "{}", text(&again));
    assert!(text(&again).contains("the file exists"), "{}", text(&again));
    assert_eq!(std::fs::read_to_string(&html).unwrap(), page);
}

/// `ackgap bench --queue` at a tiny size: one row per queue (a shipped
/// queue in process, an adapter of adapters/ through the protocol), each
/// with nonzero rates, latencies and instruction counts, every round read
/// back and held; the pipe's cost beside them. No figure is compared with
/// another: only that each was measured and checked.
#[test]
fn ackgap_bench_queue_gives_each_queue_a_row_of_nonzero_figures_from_rounds_read_back() {
    let out = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args([
            "bench",
            "--queue",
            "reference,lmove-python",
            "--jobs",
            "40",
            "--rounds",
            "2",
            "--workers",
            "2",
            "--instruction-jobs",
            "10",
            "--json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run ackgap");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let rows = report["queues"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["queue"].as_str().unwrap()).collect();
    assert_eq!(names, ["reference", "lmove-python"], "{report:#}");
    let piped = &report["pipe"]["row"];
    for row in rows.iter().chain([piped]) {
        assert_eq!(row["valid"], true, "{row:#}");
        assert_eq!(row["rounds_checked"], 2, "{row:#}");
        assert_eq!(row["rounds_held"], 2, "{row:#}");
        for figure in ["enqueue", "drain", "latency_p50_ms", "latency_p99_ms"] {
            assert_eq!(
                row[figure]["rounds"].as_array().unwrap().len(),
                2,
                "{row:#}"
            );
            assert!(
                row[figure]["min"].as_f64().unwrap() > 0.0,
                "{figure}: {row:#}"
            );
        }
    }
    for row in rows {
        let i = &row["instructions"];
        assert_eq!(i["valid"], true, "{row:#}");
        assert!(i["enqueue"].as_f64().unwrap() > 0.0, "{row:#}");
        assert!(i["lease_complete"].as_f64().unwrap() > 0.0, "{row:#}");
    }
    let pipe = report["pipe"]["command"].as_str().unwrap();
    assert!(pipe.ends_with(" serve-adapter --queue reference"), "{pipe}");
    assert_eq!(report["valid"], true);
}

/// `ackgap bench --queue`: a name no one knows is a usage error naming the
/// choices; an adapter of adapters/ whose command is not there could not
/// start (78, not the server's 69), said before any server starts, and so
/// could one not installed, said before any queue is measured.
#[test]
fn ackgap_bench_queue_refuses_unknown_queues_and_missing_adapters_with_their_exit_codes() {
    let out = ackgap_env(&["bench", "--queue", "reference,nosuch"], &[]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("ackgap: --queue: unknown queue \"nosuch\": expected one of reference"),
        "{}",
        text(&out)
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("adapters/gone")).unwrap();
    std::fs::write(
        dir.path().join("adapters/gone/adapter.toml"),
        "name = \"gone\"\ncommand = \"adapters/gone/run\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(["bench", "--queue", "gone"])
        .current_dir(dir.path())
        .output()
        .expect("run ackgap");
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(
        text(&out)
            .contains("ackgap: --queue gone: the adapter's command adapters/gone/run is not there"),
        "{}",
        text(&out)
    );
    // An adapter that is there but not installed (no venv) is named before
    // any queue is measured.
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args([
            "bench",
            "--queue",
            "reference,bullmq",
            "--instruction-jobs",
            "0",
        ])
        .env("ACKGAP_VENV_DIR", empty.path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run ackgap");
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(
        text(&out).contains("ackgap: --queue bullmq: exec:adapters/bullmq/run: no answer to hello"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("round 1/"), "{}", text(&out));
}

#[test]
fn ackgap_bench_html_where_no_file_can_be_made_is_refused_before_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let html = file.join("bench.html");
    let out = ackgap_env(
        &[
            "bench",
            "--only",
            "drain (complete + lease next",
            "--rounds",
            "1",
            "--html",
            html.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(73), "{}", text(&out));
    assert!(
        text(&out).contains("is a file, not a directory"),
        "{}",
        text(&out)
    );
    // No row was measured: the refusal came first.
    assert!(out.stdout.is_empty(), "{}", text(&out));
}

/// `ackgap run --queue lmove --budget ci` (lmove has no fencing) writes a
/// findings report naming fenced-settlement broken with a replay line,
/// and that line, pasted, reproduces the violation; every other line the
/// run printed to run something again (each column's reproduce lines,
/// each durability cell's) runs as pasted: a verdict, never a refusal of
/// its arguments.
#[test]
fn the_findings_report_of_lmove_names_a_replay_line_that_reproduces_fenced_settlement_and_every_printed_line_runs_as_pasted(
) {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("lmove.md");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args([
            "run",
            "--queue",
            "lmove",
            "--budget",
            "ci",
            "--json",
            "--findings",
        ])
        .arg(&md)
        .current_dir(dir.path())
        .output()
        .expect("run ackgap");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&md).expect("the findings report");
    assert!(dir.path().join("lmove.html").exists());
    let section = text
        .split("### fenced-settlement")
        .nth(1)
        .unwrap_or_else(|| panic!("fenced-settlement not broken in:\n{text}"));
    let replay = section
        .split("```\n")
        .nth(1)
        .expect("a replay block")
        .trim();
    assert!(replay.contains("ackgap replay "), "{replay}");
    // A line run with $ACKGAP_VALKEY_SERVER set names it first, so that
    // the pasted line runs the same binary.
    let again = crate::common::paste(&format!("{replay} --json"), dir.path());
    assert_eq!(again.status.code(), Some(1), "{replay}");
    let report: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON");
    let fenced = report["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["invariant"] == "fenced-settlement")
        .expect("judged");
    assert_eq!(fenced["verdict"], "invalid", "{fenced}");
    assert_eq!(fenced["violations"][0]["events"][0]["role"], "stale-settle");
    // Every line the run printed to run something again.
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the run's JSON");
    let mut lines: Vec<String> = Vec::new();
    for phase in run["phases"].as_array().expect("phases") {
        for f in phase["failures"].as_array().unwrap() {
            lines.push(f.as_str().unwrap().to_owned());
        }
    }
    for cell in run["durability"].as_array().expect("durability cells") {
        lines.push(cell["rerun"].as_str().unwrap().to_owned());
        // Its breaks replayed exactly (on logical time, a step its fault).
        for replay in cell["replays"]
            .as_object()
            .into_iter()
            .flat_map(|r| r.values())
        {
            lines.push(replay["line"].as_str().unwrap().to_owned());
        }
    }
    // lmove breaks in the exhaust and some chaos columns; 5 durability cells.
    assert!(lines.len() >= 7, "{lines:?}");
    for line in &lines {
        assert_eq!(line.matches(" --server ").count(), 1, "{line}");
        let pasted = crate::common::paste(&format!("{line} --json"), dir.path());
        assert!(
            matches!(pasted.status.code(), Some(0..=2)),
            "{line}: exit {:?}: {}",
            pasted.status.code(),
            String::from_utf8_lossy(&pasted.stderr)
        );
    }
}

#[test]
fn a_reproduce_line_carries_the_queue_name_and_pasted_fails_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ackgap"))
            .current_dir(dir.path())
            .args(args)
            .output()
            .expect("run ackgap")
    };
    let out = run(&[
        "explore",
        "--queue",
        "lmove",
        "--seeds",
        "100",
        "--queue-name",
        "myq",
        "--shrink-runs",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(1), "lmove fails on a few seeds");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let first = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: "))
        .filter(|command| command.starts_with("ackgap explore "))
        .expect("a replay line");
    assert!(first.ends_with(" --queue-name myq"), "{first}");
    let replay = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay line: "))
        .expect("a replay line");
    assert!(replay.ends_with(" --queue-name myq"), "{replay}");
    let seed_line = stderr.lines().next().unwrap();
    let again = run(&first.split(' ').skip(1).collect::<Vec<_>>());
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        text(&again).contains(seed_line),
        "{seed_line}\n{}",
        text(&again)
    );
}
