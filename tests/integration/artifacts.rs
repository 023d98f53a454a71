//! A run's files as a user keeps them: every run of `ackgap chaos` and
//! `ackgap run` writes into a directory of its own, `latest` links to the
//! newest, and a command that fails (a bad argument, an unreachable server,
//! an existing `--history` file) touches no earlier run's file.
//!
//! Each test runs the binary in a fresh temporary directory, so
//! `target/ackgap/` is its own.

use crate::common::ackgap_in;
use crate::common::text;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Every file under `root` (relative path → bytes) and every symlink
/// (relative path → its target, prefixed `->`).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                files.insert(rel, format!("-> {}", target.display()).into_bytes());
            } else if meta.is_dir() {
                stack.push(path);
            } else {
                files.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// A short chaos run: one second, 20 jobs, as JSON; no faults, because
/// these tests are about the files, not the verdict (a fault could make
/// it invalid, `tests/integration/chaos.rs` judges those).
fn short_chaos(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "chaos",
        "--duration",
        "1s",
        "--jobs",
        "20",
        "--faults",
        "none",
        "--json",
    ];
    args.extend_from_slice(extra);
    ackgap_in(dir, &args)
}

/// The `"dir"` a JSON report names.
fn reported_dir(out: &Output) -> PathBuf {
    let value: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(out)));
    PathBuf::from(value["dir"].as_str().expect("a \"dir\" in the report"))
}

/// Commands that fail before their run: a bad argument, a bad queue name,
/// an unreachable server; with the exit code each must give.
const FAILING_CHAOS: [(&[&str], i32); 3] = [
    (&["chaos", "--queue", "bogus"], 64),
    (&["chaos", "--queue-name", "no spaces"], 64),
    (
        &[
            "chaos",
            "--duration",
            "1s",
            "--server",
            "redis://127.0.0.1:1",
        ],
        69,
    ),
];

#[test]
fn a_failed_chaos_command_after_a_good_run_leaves_its_files_byte_for_byte_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let good = short_chaos(tmp.path(), &[]);
    assert_eq!(good.status.code(), Some(0), "{}", text(&good));
    let root = tmp.path().join("target/ackgap");
    let before = snapshot(&root);
    let history = reported_dir(&good).join("chaos-1.jsonl");
    assert!(
        std::fs::metadata(tmp.path().join(&history)).unwrap().len() > 0,
        "the good run's history is empty"
    );
    for (args, code) in FAILING_CHAOS {
        let out = ackgap_in(tmp.path(), args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out));
        assert_eq!(
            snapshot(&root),
            before,
            "{args:?} changed target/ackgap: {}",
            text(&out)
        );
    }
}

/// `--faults` is resolved on the server before anything starts: a fault
/// the server does not run (server faults against a URL, a failover
/// without replicas) and an empty list are refused with 64, and leave no
/// run directory and no `latest`.
#[tokio::test]
async fn a_chaos_run_refused_for_its_faults_makes_no_directory_and_moves_no_latest() {
    let Some(server) = crate::common::start(
        crate::common::Backend::Valkey,
        ackgap::server::Persistence::None,
    )
    .await
    else {
        return;
    };
    let url = server.url();
    let tmp = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            vec!["chaos", "--server", &url, "--faults", "server-kill"],
            "fault server-kill needs a server this tool owns",
        ),
        (
            vec!["chaos", "--server", &url, "--faults", "all,server-pause"],
            "fault server-pause needs a server this tool owns",
        ),
        (vec!["chaos", "--faults", ""], "no fault named"),
        (vec!["chaos", "--faults", "failover"], "needs replicas"),
    ] {
        let out = ackgap_in(tmp.path(), &args);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
        assert!(
            !tmp.path().join("target/ackgap").exists(),
            "{args:?} made {:?}",
            snapshot(&tmp.path().join("target/ackgap")).keys()
        );
    }
    server.stop().await.unwrap();
}

#[test]
fn a_failed_run_command_after_a_good_run_leaves_its_history_byte_for_byte_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let good = ackgap_in(
        tmp.path(),
        &["run", "--seeds", "1", "--steps", "10", "--json"],
    );
    assert_eq!(good.status.code(), Some(0), "{}", text(&good));
    let root = tmp.path().join("target/ackgap");
    let before = snapshot(&root);
    let dir = reported_dir(&good);
    assert!(
        std::fs::metadata(tmp.path().join(dir).join("run-1.jsonl"))
            .unwrap()
            .len()
            > 0,
        "the good run's history is empty"
    );
    for (args, code) in [
        (&["run", "--server", "redis://127.0.0.1:1"][..], 69),
        (&["run", "--queue-name", "no spaces"][..], 64),
        (&["run", "--seeds", "0"][..], 64),
    ] {
        let out = ackgap_in(tmp.path(), args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out));
        assert_eq!(
            snapshot(&root),
            before,
            "{args:?} changed target/ackgap: {}",
            text(&out)
        );
    }
}

#[test]
fn two_chaos_runs_of_one_seed_keep_both_directories_and_latest_points_at_the_second() {
    let tmp = tempfile::tempdir().unwrap();
    let first = short_chaos(tmp.path(), &[]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let first_dir = tmp.path().join(reported_dir(&first));
    let first_files = snapshot(&first_dir);
    let second = short_chaos(tmp.path(), &["--queue", "lmove"]);
    assert!(
        matches!(second.status.code(), Some(0 | 1)),
        "{}",
        text(&second)
    );
    let second_dir = tmp.path().join(reported_dir(&second));
    assert_ne!(first_dir, second_dir);
    assert_eq!(snapshot(&first_dir), first_files, "the first run's files");
    assert!(second_dir.join("chaos-1.jsonl").is_file());
    assert!(second_dir.join("chaos-1.json").is_file());
    // The same seed and queue again: a third directory, even within the
    // same second.
    let third = short_chaos(tmp.path(), &["--queue", "lmove"]);
    let third_dir = tmp.path().join(reported_dir(&third));
    assert_ne!(third_dir, second_dir);
    assert!(second_dir.join("chaos-1.jsonl").is_file());
    let latest = tmp.path().join("target/ackgap/chaos/latest");
    assert_eq!(
        std::fs::read_link(&latest).unwrap(),
        PathBuf::from(third_dir.file_name().unwrap())
    );
    assert_eq!(
        std::fs::read(latest.join("chaos-1.jsonl")).unwrap(),
        std::fs::read(third_dir.join("chaos-1.jsonl")).unwrap()
    );
}

/// ... and its HTML report names the queue, the server and the line
/// that runs it again, as the terminal printed it.
#[test]
fn the_directory_a_chaos_run_prints_exists_and_holds_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    let out = ackgap_in(
        tmp.path(),
        &[
            "chaos",
            "--duration",
            "1s",
            "--jobs",
            "20",
            "--faults",
            "none",
            "--seed",
            "4",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let printed = stdout
        .lines()
        .find_map(|l| l.strip_prefix("files in "))
        .and_then(|l| l.strip_suffix(':'))
        .unwrap_or_else(|| panic!("no `files in DIR:` line: {stdout}"));
    let dir = tmp.path().join(printed);
    assert!(dir.is_dir(), "{printed} is not a directory");
    assert!(
        printed.starts_with("target/ackgap/chaos/") && printed.contains("-seed4-reference"),
        "{printed}"
    );
    for file in ["chaos-4.jsonl", "chaos-4.json", "chaos-4.html"] {
        assert!(dir.join(file).is_file(), "{file} not in {printed}");
    }
    let html = std::fs::read_to_string(dir.join("chaos-4.html")).unwrap();
    let reproduce = stdout
        .lines()
        .find(|l| l.starts_with("rerun: ackgap chaos --seed 4"))
        .unwrap_or_else(|| panic!("no reproduce line: {stdout}"));
    assert!(
        html.contains(&format!("<p><code>{reproduce}</code></p>")),
        "{html}"
    );
    assert!(
        html.contains("<p><code>queue reference, consumer marker</code></p>"),
        "{html}"
    );
    assert!(html.contains("<p><code>server valkey "), "{html}");
}

#[test]
fn an_existing_history_file_is_refused_with_73_unless_force_replaces_it_and_its_stale_reproduce_line(
) {
    let tmp = tempfile::tempdir().unwrap();
    let history = tmp.path().join("mine.jsonl");
    let h = history.to_str().unwrap();
    let first = short_chaos(tmp.path(), &["--history", h]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let before = snapshot(tmp.path());
    let again = short_chaos(tmp.path(), &["--history", h]);
    assert_eq!(again.status.code(), Some(73), "{}", text(&again));
    assert!(text(&again).contains("--force"), "{}", text(&again));
    assert_eq!(snapshot(tmp.path()), before, "a refused run changed files");
    // Only the summary left from before is refused too.
    std::fs::remove_file(&history).unwrap();
    let beside = short_chaos(tmp.path(), &["--history", h]);
    assert_eq!(beside.status.code(), Some(73), "{}", text(&beside));
    assert!(!history.exists(), "the refused run wrote its history");
    // A reproduce line an earlier failed run left must not stay beside a
    // valid run's files.
    let stale = history.with_extension("txt");
    std::fs::write(&stale, "verdict: invalid\n").unwrap();
    let forced = short_chaos(tmp.path(), &["--history", h, "--force", "--seed", "2"]);
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced));
    assert!(!stale.exists(), "the stale reproduce line outlived the run");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(history.with_extension("json")).unwrap()).unwrap();
    assert_eq!(summary["config"]["seed"], 2, "{summary}");
}

#[test]
fn two_failing_explore_runs_of_one_seed_keep_both_counterexamples() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "explore",
        "--queue",
        "rpop",
        "--seed",
        "1",
        "--steps",
        "60",
        "--shrink-runs",
        "0",
    ];
    let first = ackgap_in(tmp.path(), &args);
    assert_eq!(first.status.code(), Some(1), "{}", text(&first));
    let second = ackgap_in(tmp.path(), &args);
    assert_eq!(second.status.code(), Some(1), "{}", text(&second));
    let base = tmp.path().join("target/ackgap/explore");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.is_symlink())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    for dir in &dirs {
        let shown = dir.strip_prefix(tmp.path()).unwrap().display().to_string();
        assert!(
            text(&first).contains(&shown) || text(&second).contains(&shown),
            "{shown} was not printed"
        );
        let failure = std::fs::read_to_string(dir.join("seed-1.txt")).unwrap();
        assert!(failure.contains("--queue rpop"), "{failure}");
    }
    assert_eq!(
        std::fs::read_link(base.join("latest")).unwrap(),
        PathBuf::from(dirs[1].file_name().unwrap())
    );
}
