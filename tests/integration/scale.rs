//! Campaigns at scale: `--jobs N` walks in parallel and reports what one
//! job reports, `--shard K/N` and `ackgap merge` give the report of one
//! unsharded run, and the progress bar shows on a terminal only.

use std::process::{Command, Output};

use serde_json::Value;

use crate::common::ackgap;

/// `value` without what differs between two runs of the same walks: the
/// times, the rates and the server's address.
fn without_timing(mut value: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for key in ["elapsed_ms", "steps_per_s", "server"] {
                    map.remove(key);
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut value);
    value
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Walks of the rpop queue, some of which lose a job: failures to order,
/// merge and shrink.
const WALKS: [&str; 12] = [
    "explore",
    "--queue",
    "rpop",
    "--seed",
    "1",
    "--seeds",
    "12",
    "--steps",
    "30",
    "--shrink-runs",
    "40",
    "--json",
];

#[test]
fn explore_with_one_job_and_with_four_gives_the_same_report() {
    let one = ackgap(&[&WALKS[..], &["--jobs", "1"]].concat());
    let four = ackgap(&[&WALKS[..], &["--jobs", "4"]].concat());
    assert_eq!(one.status.code(), four.status.code());
    let (one, four) = (json(&one), json(&four));
    assert!(
        !one["failed"].as_array().unwrap().is_empty(),
        "the walks should fail somewhere: {one}"
    );
    assert_eq!(one["walks"], 12);
    assert_eq!(without_timing(one), without_timing(four));
}

#[test]
fn three_shards_merged_give_the_report_of_one_unsharded_run() {
    let dir = tempfile::tempdir().unwrap();
    let whole = ackgap(&[&WALKS[..], &["--jobs", "2"]].concat());
    let mut files = Vec::new();
    for k in 1..=3 {
        let shard = format!("{k}/3");
        let out = ackgap(&[&WALKS[..], &["--shard", &shard, "--jobs", "1"]].concat());
        assert_eq!(
            json(&out)["shard"],
            serde_json::json!({"index": k, "count": 3})
        );
        let file = dir.path().join(format!("shard-{k}.json"));
        std::fs::write(&file, &out.stdout).unwrap();
        files.push(file.display().to_string());
    }
    // In any order.
    let merged = ackgap(&["merge", &files[2], &files[0], &files[1], "--json"]);
    assert_eq!(merged.status.code(), whole.status.code());
    assert_eq!(merged.status.code(), Some(1), "rpop loses jobs");
    let (whole, merged) = (json(&whole), json(&merged));
    assert_eq!(without_timing(merged.clone()), without_timing(whole));
    assert_eq!(
        merged["failed"][0]["seed"],
        merged["failed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["seed"].as_u64().unwrap())
            .min()
            .unwrap()
    );

    // The summary a person reads says the same.
    let text = ackgap(&["merge", &files[0], &files[1], &files[2]]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("seeds 1..=12,"), "{text}");
    assert!(text.contains("12 seeds, "), "{text}");
    assert!(text.contains("wall time"), "{text}");
}

#[test]
fn merge_refuses_a_missing_shard_a_shard_twice_and_another_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (shard, steps) in [("1/3", "30"), ("2/3", "30"), ("3/3", "31")] {
        let out = ackgap(&[
            "explore", "--seed", "1", "--seeds", "6", "--steps", steps, "--shard", shard, "--json",
        ]);
        let file = dir.path().join(format!("shard-{}.json", &shard[..1]));
        std::fs::write(&file, &out.stdout).unwrap();
        files.push(file.display().to_string());
    }
    for (reports, why) in [
        (vec![&files[0], &files[1]], "shard(s) 3/3 missing"),
        (vec![&files[0], &files[1], &files[1]], "are both shard 2/3"),
        (
            vec![&files[0], &files[1], &files[2]],
            "different configurations",
        ),
    ] {
        let mut args = vec!["merge"];
        args.extend(reports.iter().map(|s| s.as_str()));
        let out = ackgap(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(out.stdout.is_empty());
    }
}

/// `ackgap ARGS` in a pseudo-terminal (`script`), its output as the
/// terminal saw it.
fn in_a_terminal(args: &str) -> String {
    let command = format!("{} {args}", env!("CARGO_BIN_EXE_ackgap"));
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("run script");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn progress_shows_on_a_terminal_and_not_when_piped_or_json() {
    let args = "explore --seed 1 --seeds 20 --steps 40 --jobs 1";
    let seen = in_a_terminal(args);
    assert!(seen.contains("/20 walks"), "{seen}");
    assert!(seen.contains("steps/s"), "{seen}");
    assert!(seen.contains("wall time"), "{seen}");

    // The exhaustive search cannot say how far it got: a spinner.
    let search = in_a_terminal("exhaust --jobs 1 --workers 2 --depth 6");
    assert!(search.contains("searching every interleaving"), "{search}");
    let piped = ackgap(&["exhaust", "--jobs", "1", "--workers", "2", "--depth", "6"]);
    let all = String::from_utf8_lossy(&[piped.stdout, piped.stderr].concat()).into_owned();
    assert!(!all.contains("searching every interleaving"), "{all}");

    let json = in_a_terminal(&format!("{args} --json"));
    assert!(!json.contains("walks ·"), "{json}");

    let piped = ackgap(&args.split(' ').collect::<Vec<_>>());
    let all = [piped.stdout, piped.stderr].concat();
    let all = String::from_utf8_lossy(&all);
    assert!(!all.contains("/20 walks"), "{all}");
    assert!(all.contains("20 seeds, 0 failed;"), "{all}");
}

#[test]
fn the_junit_and_json_of_a_failing_explore_hold_the_minimal_replay_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("explore.xml");
    let out = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .current_dir(dir.path())
        .args([
            "explore", "--queue", "lmove", "--seeds", "100", "--json", "--junit",
        ])
        .arg(&file)
        .output()
        .expect("run ackgap");
    assert_eq!(out.status.code(), Some(1), "lmove fails on a few seeds");
    let value = json(&out);
    let minimal = &value["minimal"];
    let replay = minimal["replay"]
        .as_str()
        .expect("a minimal replay command");
    let line = minimal["line"].as_str().unwrap();
    assert!(
        replay.starts_with(&format!("ackgap replay {line}")),
        "{replay}"
    );
    let (steps, before) = (
        minimal["steps"].as_u64().unwrap(),
        minimal["steps_before"].as_u64().unwrap(),
    );
    assert!(steps < before, "shrunk: {minimal}");
    let seed = minimal["seed"].as_u64().unwrap();
    assert_eq!(
        value["failed"][0]["seed"].as_u64(),
        Some(seed),
        "the first failing walk is shrunk"
    );

    let xml = std::fs::read_to_string(&file).unwrap();
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("JUnit XML");
    let invariant = minimal["invariant"].as_str().unwrap();
    let case = report.test_suites[0]
        .test_cases
        .iter()
        .find(|c| c.name.as_str() == invariant)
        .expect("a case for the broken invariant");
    let quick_junit::TestCaseStatus::NonSuccess {
        message,
        description,
        ..
    } = &case.status
    else {
        panic!("{invariant} failed: {:?}", case.status)
    };
    let message = message.as_ref().map(|m| m.as_str()).unwrap_or("");
    let description = description.as_ref().map(|d| d.as_str()).unwrap_or("");
    assert!(message.contains(replay), "{message}");
    let (shrunk, unshrunk) = description
        .split_once("unshrunk walk:")
        .expect("the unshrunk walk, named");
    assert!(
        shrunk.starts_with("minimal counterexample:"),
        "{description}"
    );
    assert!(
        shrunk.contains(&format!("replay: {replay}")),
        "{description}"
    );
    assert!(
        unshrunk.contains(&format!("replay: ackgap explore --seed {seed} ")),
        "{description}"
    );

    // The minimal line still breaks the invariant when pasted.
    let words: Vec<&str> = replay.split(' ').skip(1).collect();
    let again = Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .current_dir(dir.path())
        .args(&words)
        .output()
        .expect("run ackgap");
    assert_eq!(
        again.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert!(String::from_utf8_lossy(&again.stdout).contains(invariant));
}

#[test]
fn junit_output_parses_with_one_case_per_invariant_and_a_failure_carrying_its_replay() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("explore.xml");
    let file_arg = file.display().to_string();
    let out = ackgap(&[
        "explore",
        "--queue",
        "rpop",
        "--seed",
        "1",
        "--seeds",
        "12",
        "--steps",
        "30",
        "--shrink-runs",
        "0",
        "--junit",
        &file_arg,
    ]);
    assert_eq!(out.status.code(), Some(1), "rpop loses jobs");
    let xml = std::fs::read_to_string(&file).unwrap();
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("JUnit XML");
    assert_eq!(report.test_suites.len(), 1);
    let suite = &report.test_suites[0];
    assert_eq!(suite.name.as_str(), "explore");
    let names: Vec<&str> = suite.test_cases.iter().map(|c| c.name.as_str()).collect();
    for invariant in ["no-loss", "fenced-settlement", "settle-once", "liveness"] {
        assert!(names.contains(&invariant), "{names:?}");
    }
    let failed: Vec<_> = suite
        .test_cases
        .iter()
        .filter(|c| matches!(c.status, quick_junit::TestCaseStatus::NonSuccess { .. }))
        .collect();
    assert!(!failed.is_empty());
    assert_eq!(suite.failures + suite.errors, failed.len());
    for case in failed {
        let quick_junit::TestCaseStatus::NonSuccess { description, .. } = &case.status else {
            unreachable!()
        };
        let description = description.as_ref().map(|d| d.as_str()).unwrap_or("");
        assert!(
            description.contains("replay: ackgap explore --seed"),
            "{description}"
        );
        assert!(
            description.contains("replay: ackgap replay rpop/"),
            "{description}"
        );
    }

    // An existing file is an earlier run's: refused, left as it was.
    let again = ackgap(&["explore", "--seeds", "2", "--junit", &file_arg]);
    assert_eq!(again.status.code(), Some(73));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), xml);

    // A mutant: one case, killed.
    let file = dir.path().join("mutants.xml");
    let file_arg = file.display().to_string();
    let out = ackgap(&[
        "mutants",
        "--only",
        "complete-unfenced",
        "--budget-seeds",
        "0",
        "--junit",
        &file_arg,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let xml = std::fs::read_to_string(&file).unwrap();
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("JUnit XML");
    let case = &report.test_suites[0].test_cases[0];
    assert_eq!(case.name.as_str(), "complete-unfenced");
    assert!(matches!(
        case.status,
        quick_junit::TestCaseStatus::Success { .. }
    ));
}

#[test]
fn mutants_in_three_shards_merged_give_the_matrix_of_one_run() {
    let mutants = [
        "mutants",
        "--only",
        "complete-unfenced",
        "--only",
        "extend-unfenced",
        "--only",
        "fail-unfenced",
        "--budget-seeds",
        "0",
        "--json",
    ];
    let whole = ackgap(&[&mutants[..], &["--jobs", "3"]].concat());
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for k in 1..=3 {
        let shard = format!("{k}/3");
        let out = ackgap(&[&mutants[..], &["--shard", &shard, "--jobs", "1"]].concat());
        assert_eq!(json(&out)["kills"].as_array().unwrap().len(), 1);
        let file = dir.path().join(format!("mutants-{k}.json"));
        std::fs::write(&file, &out.stdout).unwrap();
        files.push(file.display().to_string());
    }
    let merged = ackgap(&["merge", &files[1], &files[2], &files[0], "--json"]);
    assert_eq!(merged.status.code(), whole.status.code());
    let (whole, merged) = (json(&whole), json(&merged));
    assert_eq!(whole["score"]["killed"], 3);
    assert_eq!(without_timing(merged), without_timing(whole));

    // Shards of walks and of mutants are not one run.
    let walks = ackgap(&[
        "explore", "--seeds", "2", "--steps", "10", "--shard", "1/3", "--json",
    ]);
    let file = dir.path().join("walks.json");
    std::fs::write(&file, &walks.stdout).unwrap();
    let out = ackgap(&["merge", &files[0], &files[1], &file.display().to_string()]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn a_run_in_three_shards_merged_gives_the_verdict_table_of_one_run() {
    let run = [
        "run", "--seed", "1", "--seeds", "6", "--steps", "30", "--json",
    ];
    // The four runs at once, each on its own server (as on four machines).
    let start = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ackgap"))
            .args([&run[..], extra].concat())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run ackgap")
    };
    let shards: Vec<_> = ["1/3", "2/3", "3/3"]
        .iter()
        .map(|shard| start(&["--shard", shard]))
        .collect();
    let whole = start(&[]).wait_with_output().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (k, shard) in (1..=3).zip(shards) {
        let out = shard.wait_with_output().unwrap();
        let report = json(&out);
        // Only the first shard measures the mutation score.
        assert_eq!(report["mutation_score"].is_null(), k != 1, "{report}");
        let file = dir.path().join(format!("run-{k}.json"));
        std::fs::write(&file, &out.stdout).unwrap();
        files.push(file.display().to_string());
    }
    let merged = ackgap(&["merge", &files[2], &files[0], &files[1], "--json"]);
    assert_eq!(merged.status.code(), whole.status.code());
    let (whole, merged) = (json(&whole), json(&merged));
    // The smoke scenario runs concurrent workers on the wall clock: its
    // counts differ from run to run, its verdicts do not.
    let table = |report: &Value| {
        let mut report = without_timing(report.clone());
        for key in ["dir", "smoke", "wall_ms", "mutation_score"] {
            report.as_object_mut().unwrap().remove(key);
        }
        for phase in report["phases"].as_array_mut().unwrap() {
            if phase["name"] == "smoke" {
                for cell in phase["cells"].as_object_mut().unwrap().values_mut() {
                    *cell = cell["verdict"].clone();
                }
                phase.as_object_mut().unwrap().remove("steps");
            }
        }
        report
    };
    assert_eq!(table(&merged), table(&whole));
    assert_eq!(
        merged["mutation_score"]["killed"],
        whole["mutation_score"]["killed"]
    );
}

/// `ackgap chaos ARGS` run in `dir` (its files go under `dir/target/`).
fn chaos_in(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .arg("chaos")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run ackgap chaos")
}

/// The small chaos matrix of the shard tests: the five single-server cells
/// (server kills under persistence none and always, power losses under
/// everysec and always, a clock jump), two seeds each.
const MATRIX: [&str; 10] = [
    "--matrix",
    "--matrix-topology",
    "process",
    "--matrix-seeds",
    "2",
    "--duration",
    "300ms",
    "--jobs",
    "20",
    "--json",
];

/// Each cell's identity, runs and the names of its histories (which name
/// its seeds): what two runs of the same matrix share. What a run found
/// (fires, losses, broken invariants) depends on the wall clock and is
/// not compared between runs.
fn cells_and_runs(report: &Value) -> Vec<(Value, Value, Vec<String>)> {
    report["grid"]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let names = c["histories"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_str().unwrap().rsplit('/').next().unwrap().to_string())
                .collect();
            (c["cell"].clone(), c["runs"].clone(), names)
        })
        .collect()
}

#[test]
fn chaos_matrix_in_three_shards_merged_gives_the_cells_and_runs_of_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let whole = chaos_in(dir.path(), &MATRIX);
    let whole_json = json(&whole);
    let mut files = Vec::new();
    let mut shard_runs = 0;
    for k in 1..=3 {
        let shard = format!("{k}/3");
        let out = chaos_in(dir.path(), &[&MATRIX[..], &["--shard", &shard]].concat());
        let report = json(&out);
        assert_eq!(report["shard"]["index"], k, "{report}");
        for c in report["grid"]["cells"].as_array().unwrap() {
            shard_runs += c["runs"].as_u64().unwrap();
        }
        let file = dir.path().join(format!("shard-{k}.json"));
        std::fs::write(&file, &out.stdout).unwrap();
        files.push(file.display().to_string());
    }
    assert_eq!(shard_runs, 10, "each of the 10 runs in exactly one shard");
    let merged = ackgap(&["merge", &files[2], &files[0], &files[1], "--json"]);
    let merged_json = json(&merged);
    assert_eq!(cells_and_runs(&merged_json), cells_and_runs(&whole_json));
    assert_eq!(merged_json["config"], whole_json["config"]);
    assert_eq!(merged_json["grid"]["config"], whole_json["grid"]["config"]);
    assert_eq!(merged_json["shard"], Value::Null);
    // The merged verdict is the matrix's rule over the merged cells: invalid
    // only if a cell that promises to keep acknowledged writes (AOF
    // always, killed or its power lost; a clock jump, which restarts
    // nothing) lost one; the exit code is that verdict's.
    let cells = merged_json["grid"]["cells"].as_array().unwrap();
    let always: Vec<&Value> = cells
        .iter()
        .filter(|c| c["cell"]["persistence"] == "always" || c["cell"]["fault"] == "clock-jump")
        .collect();
    assert_eq!(always.len(), 3, "{merged_json}");
    let lost: u64 = always.iter().map(|c| c["lost"].as_u64().unwrap()).sum();
    let expected = if lost > 0 {
        ("invalid", 1)
    } else {
        ("valid", 0)
    };
    assert_eq!(merged_json["verdict"], expected.0, "{merged_json}");
    assert_eq!(merged.status.code(), Some(expected.1));
    let text = ackgap(&["merge", &files[0], &files[1], &files[2]]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("rerun: ackgap chaos --matrix --seed 1 --matrix-seeds 2 --duration 300ms --jobs 20 --matrix-topology process"),
        "{text}"
    );
    // A shard of another matrix (one seed per cell) is refused.
    let other = chaos_in(
        dir.path(),
        &[
            "--matrix",
            "--matrix-topology",
            "process",
            "--duration",
            "300ms",
            "--jobs",
            "20",
            "--json",
            "--shard",
            "2/3",
        ],
    );
    let file = dir.path().join("other.json");
    std::fs::write(&file, &other.stdout).unwrap();
    let out = ackgap(&["merge", &files[0], &file.display().to_string(), &files[2]]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("different configurations"));
}

#[test]
fn a_shard_of_a_single_chaos_run_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = chaos_in(dir.path(), &["--shard", "1/2", "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing to split"), "{err}");
    assert!(!dir.path().join("target").exists(), "no files written");
}
