//! Under load a chaos run still ends with a verdict: the server watch
//! tells a slow server from a dead one (a refusing server's grace is what
//! the run's own restarts took), and a run whose faults fired late says
//! its schedule slipped. Real servers throughout: the slowness is a
//! wrapper around valkey-server that sleeps before it execs the server on
//! every start but the first.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ackgap::chaos::runner::ChaosConfig;
use ackgap::chaos::schedule::{FaultKind, FaultSet, Target};
use serde_json::Value;

use crate::common::{ackgap_command, text};

/// A valkey-server that, on every start but the first in its data
/// directory (its working directory), sleeps `secs` before it execs the
/// real server: a restart slowed, its process alive and not yet listening.
fn slow_restarts(dir: &Path, secs: u64) -> PathBuf {
    let real = ackgap::server::find_valkey_binary().expect("a valkey-server binary");
    let wrapper = dir.join("slow-restart.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \"$1\" in --version|-v) exec '{}' \"$@\";; esac\n\
             if [ -e .started ]; then sleep {secs}; fi\ntouch .started\nexec '{}' \"$@\"\n",
            real.display(),
            real.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    wrapper
}

/// The schedule's actions in the nemesis's order: (due ms, is a heal,
/// kind), as `ackgap chaos --seed SEED --duration DURATION_MS --faults
/// FAULTS` draws them with its default workers and lease.
fn actions(seed: u64, duration_ms: u64, faults: &[FaultKind]) -> Vec<(u64, bool, FaultKind)> {
    let cfg = ChaosConfig {
        duration_ms,
        faults: FaultSet(faults.iter().copied().collect()),
        ..ChaosConfig::new(seed)
    };
    let mut actions = Vec::new();
    for f in cfg.schedule().faults {
        actions.push((f.at_ms, false, f.kind));
        if f.kind.heals() {
            actions.push((f.at_ms + f.duration_ms, true, f.kind));
        }
    }
    actions.retain(|a| a.0 < duration_ms);
    actions.sort();
    actions
}

/// A server whose every restart is slowed by 3 s (alive, not answering)
/// gives a verdict, and the run says its schedule slipped: a kill's heal
/// waits for the slow restart, so the next fault, drawn less than a second
/// after that heal, runs more than 2 s late.
#[test]
fn a_server_whose_restarts_are_slowed_gives_a_verdict_and_the_run_says_its_schedule_slipped() {
    const DURATION_MS: u64 = 5_000;
    // A seed whose schedule has a kill healed inside the faults phase and
    // another action due within a second after that heal.
    let seed = (1..200)
        .find(|&seed| {
            let a = actions(seed, DURATION_MS, &[FaultKind::ServerKill]);
            a.iter().any(|&(heal, is_heal, kind)| {
                is_heal
                    && kind == FaultKind::ServerKill
                    && a.iter().any(|&(t, _, _)| t > heal && t < heal + 1_000)
            })
        })
        .expect("a seed with an action due within a second of a kill's heal");
    let dir = tempfile::tempdir().unwrap();
    let wrapper = slow_restarts(dir.path(), 3);
    let history = dir.path().join("slow.jsonl");
    let out = ackgap_command(&["chaos", "--seed", &seed.to_string(), "--duration", "5s"])
        .args(["--faults", "server-kill", "--jobs", "50", "--json"])
        .args(["--history", history.to_str().unwrap()])
        .env_remove("ACKGAP_SERVER")
        .env("ACKGAP_VALKEY_SERVER", &wrapper)
        .output()
        .unwrap();
    let shown = text(&out);
    // A verdict (0 valid, 1 invalid), not 69 (the server named gone).
    assert!(matches!(out.status.code(), Some(0 | 1)), "{shown}");
    assert!(!shown.contains("stopped answering"), "{shown}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
    let slip = &report["schedule_slip"];
    // Every restart was slowed: the wrapper's sleep is in each.
    let restarts = slip["restarts_ms"].as_array().unwrap();
    assert!(!restarts.is_empty(), "{slip}");
    assert!(
        restarts.iter().all(|ms| ms.as_u64() >= Some(3_000)),
        "{slip}"
    );
    assert_eq!(slip["slipped"], true, "{slip}");
    assert!(slip["faults_late"].as_u64() >= Some(1), "{slip}");
    assert!(slip["fault_late_ms_max"].as_u64() >= Some(2_000), "{slip}");
    let line = report["verdict_line"].as_str().unwrap();
    if report["verdict"] != "invalid" {
        assert!(line.contains("; schedule slipped: "), "{line}");
        assert!(line.contains("weaker"), "{line}");
    }
}

/// The same slowed restarts, then the server killed by hand after the
/// run's own restart answered, with no server fault due for 25 s: the
/// watch names it dead within seconds, its grace twice the slowest
/// restart the run measured (about 2 s here), not at the run's end.
#[test]
fn a_server_that_stays_dead_after_slowed_restarts_is_named_dead_within_seconds() {
    const DURATION_MS: u64 = 60_000;
    // One server fault among the worker and network ones: kills are rare.
    let faults: Vec<FaultKind> = FaultKind::all()
        .filter(|k| k.target() != Target::Server || *k == FaultKind::ServerKill)
        .filter(|k| {
            "worker,network,server-kill"
                .parse::<FaultSet>()
                .unwrap()
                .0
                .contains(k)
        })
        .collect();
    // A seed whose first kill heals before 25 s, and whose next kill comes
    // 25 s after that heal or never.
    let seed = (1..500)
        .find(|&seed| {
            let a = actions(seed, DURATION_MS, &faults);
            let kills: Vec<u64> = a
                .iter()
                .filter(|x| x.2 == FaultKind::ServerKill && !x.1)
                .map(|x| x.0)
                .collect();
            let heal = a
                .iter()
                .find(|x| x.2 == FaultKind::ServerKill && x.1)
                .map(|x| x.0);
            heal.is_some_and(|h| h < 25_000 && kills.iter().all(|&k| k < h || k > h + 25_000))
        })
        .expect("a seed with an early kill and none for 25 s after its heal");
    let dir = tempfile::tempdir().unwrap();
    let wrapper = slow_restarts(dir.path(), 2);
    let history = dir.path().join("dead.jsonl");
    let mut child = ackgap_command(&["chaos", "--seed", &seed.to_string(), "--duration", "60s"])
        .args(["--faults", "worker,network,server-kill"])
        .args(["--jobs", "2000", "--history", history.to_str().unwrap()])
        .env_remove("ACKGAP_SERVER")
        .env("ACKGAP_VALKEY_SERVER", &wrapper)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut header = String::new();
    stdout.read_line(&mut header).unwrap();
    let data_dir = header
        .split("dir ")
        .nth(1)
        .and_then(|rest| rest.split([',', ')']).next())
        .unwrap_or_else(|| panic!("no data dir in {header:?}"))
        .to_string();
    // Once the run's own (slowed) restart has answered, kill the server.
    let healed = Instant::now();
    while !std::fs::read_to_string(&history)
        .unwrap_or_default()
        .contains(r#""action":"heal","fault":"server-kill""#)
    {
        assert!(healed.elapsed() < Duration::from_secs(50), "no heal yet");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pids = std::process::Command::new("pgrep")
        .args(["-f", &data_dir])
        .output()
        .unwrap();
    let pids = String::from_utf8_lossy(&pids.stdout).to_string();
    assert!(!pids.trim().is_empty(), "no server process for {data_dir}");
    for pid in pids.split_whitespace() {
        std::process::Command::new("kill")
            .args(["-9", pid])
            .status()
            .unwrap();
    }
    let killed = Instant::now();
    let status = child.wait().unwrap();
    let named_after = killed.elapsed();
    let mut shown = String::new();
    stdout.read_to_string(&mut shown).unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut shown)
        .unwrap();
    assert_eq!(status.code(), Some(69), "{shown}");
    assert!(shown.contains("the server stopped answering"), "{shown}");
    assert!(
        shown.contains("times the slowest of the run's own restarts"),
        "{shown}"
    );
    // A behaviour bound, generous for a loaded machine: well before the
    // 60 s faults phase would have ended.
    assert!(
        named_after < Duration::from_secs(20),
        "named dead {named_after:?} after the kill: {shown}"
    );
}
