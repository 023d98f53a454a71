//! `--server replicated`: a primary and replicas as processes, the
//! durability dial (`WAIT` after every enqueue and settle) and the
//! failover faults. Each claim is what a run found, on a pinned seed:
//!
//! - a lag-failover (replicas paused, then the primary killed and a
//!   replica promoted) without WAIT loses acknowledged jobs, no-loss names
//!   them, and once the old primary has rejoined as a replica they are on
//!   no node;
//! - with `wait:1` the same seeds lose nothing acknowledged: the writes the
//!   lag kept from every replica are `info`, never `ok`;
//! - WAIT with every replica paused is an unknown outcome, not `ok`.

use std::path::Path;

use ackgap::chaos::runner::{self, ChaosConfig, ChaosReport};
use ackgap::chaos::schedule::FaultKind;
use ackgap::check::Verdict;
use ackgap::history::{self, EventKind, F};
use ackgap::queue::client::{EnqueueOptions, QueueConfig};
use ackgap::queue::{Durability, Queue, QueueError};
use ackgap::server::{Persistence, Server, ServerSpec};

use crate::common;

fn replicated(replicas: usize) -> ServerSpec {
    format!("replicated:{replicas}").parse().unwrap()
}

async fn start(replicas: usize, persistence: Persistence) -> Server {
    Server::start(&replicated(replicas), persistence)
        .await
        .expect("the replicated topology starts")
}

fn failing(report: &ChaosReport) -> String {
    let bad: Vec<String> = report
        .invariants
        .iter()
        .filter(|r| r.verdict != Verdict::Valid)
        .map(|r| format!("{}: {:?}", r.invariant, r.violations))
        .collect();
    format!("{bad:#?}\nfired {:?}", report.fired)
}

/// Asserts that `report` lost acknowledged jobs and that no-loss, invalid,
/// names every one of them.
fn no_loss_names_every_lost_job(report: &ChaosReport) {
    let no_loss = report
        .invariants
        .iter()
        .find(|r| r.invariant == "no-loss")
        .unwrap();
    assert_eq!(no_loss.verdict, Verdict::Invalid, "{}", failing(report));
    assert!(!report.lost.is_empty());
    for id in &report.lost {
        assert!(
            no_loss
                .violations
                .iter()
                .any(|v| v.job.as_deref() == Some(id.as_str())),
            "{id} is not named"
        );
    }
}

/// A short lag-failover run of `seed` with `durability`.
async fn lag_failover(seed: u64, durability: Durability, history: &Path) -> (ChaosReport, Server) {
    let server = start(2, Persistence::None).await;
    lag_failover_on(server, seed, durability, history).await
}

/// A short lag-failover run of `seed` with `durability` on `server`.
async fn lag_failover_on(
    mut server: Server,
    seed: u64,
    durability: Durability,
    history: &Path,
) -> (ChaosReport, Server) {
    let cfg = ChaosConfig {
        duration_ms: 3_000,
        jobs: 80,
        faults: "lag-failover".parse().unwrap(),
        durability,
        queue_name: common::queue_name(),
        ..ChaosConfig::new(seed)
    };
    let report = runner::run(&mut server, cfg, Some(history.to_path_buf()), None)
        .await
        .expect("the chaos run completes");
    (report, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_topology_serves_through_one_address_and_wait_counts_its_replicas() {
    let server = start(2, Persistence::None).await;
    assert_eq!(server.replicas(), 2);
    assert_eq!(server.node_ports().len(), 3);
    assert!(
        server.describe().contains("replicated"),
        "{}",
        server.describe()
    );
    let config = QueueConfig {
        durability: "wait:2".parse().unwrap(),
        ..QueueConfig::default()
    };
    let queue = Queue::connect_with(&server.client(), &common::queue_name(), config)
        .await
        .unwrap();
    queue
        .enqueue("JOB-a", b"x", EnqueueOptions::default())
        .await
        .expect("both replicas confirm");
    // Every node has the row: the primary and the two replicas.
    for port in server.node_ports() {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let n: u64 = redis::cmd("HEXISTS")
            .arg(&queue.keys().jobs)
            .arg("JOB-a")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(n, 1, "node on port {port}");
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_with_every_replica_paused_is_an_unknown_outcome_never_ok() {
    let mut server = start(1, Persistence::None).await;
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap()
        .with_durability("wait:1:100".parse().unwrap());
    server.lag_replicas().await.unwrap();
    let err = queue
        .enqueue("JOB-b", b"x", EnqueueOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, QueueError::Unknown { .. }) && err.is_unknown(),
        "{err}"
    );
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    server.resume_replicas().await.unwrap();
    // Resumed, the replica confirms the next write (and the earlier one).
    queue
        .enqueue("JOB-c", b"x", EnqueueOptions::default())
        .await
        .expect("the resumed replica confirms");
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_s_effect_with_every_replica_paused_is_unconfirmed_under_the_dial_and_ok_without_it(
) {
    use ackgap::consumer::{Delivery, Kind};
    let mut server = start(1, Persistence::None).await;
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    let dial: Durability = "wait:1:100".parse().unwrap();
    let confirmed = Kind::Marker.consumer_with(dial);
    let unconfirmed = Kind::Marker.consumer();
    assert_eq!(confirmed.durability(), dial);
    let mut conn = queue.connection();
    let delivery = |id, token| Delivery {
        id,
        token,
        payload: b"x",
    };
    server.lag_replicas().await.unwrap();
    // The effect's write, then WAIT 1 100 in the same pipeline: no replica
    // answers, so the effect is unknown, never ok.
    let err = confirmed
        .apply(&mut conn, queue.keys(), delivery("JOB-e", 1), 0)
        .await
        .unwrap_err();
    assert!(err.is_unknown(), "{err}");
    assert!(
        err.to_string().contains("unconfirmed") && err.to_string().contains("0 of 1"),
        "{err}"
    );
    // Without the dial the same write is ok at once.
    unconfirmed
        .apply(&mut conn, queue.keys(), delivery("JOB-f", 1), 0)
        .await
        .expect("an unconfirmed consumer does not wait");
    server.resume_replicas().await.unwrap();
    // Resumed, the replica confirms a redelivery's write, which finds the
    // marker and applies nothing twice.
    confirmed
        .apply(&mut conn, queue.keys(), delivery("JOB-e", 2), 0)
        .await
        .expect("the resumed replica confirms");
    assert_eq!(
        confirmed
            .effects(&mut conn, queue.keys(), "JOB-e")
            .await
            .unwrap(),
        1
    );
    server.stop().await.unwrap();
}

/// The pinned seed of the loss claims.
const SEED: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lag_failover_without_wait_loses_acknowledged_jobs_no_loss_names_them_and_the_rejoined_primary_holds_none(
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.jsonl");
    let (report, server) = lag_failover(SEED, Durability::None, &path).await;
    assert!(report.fired.get(&FaultKind::LagFailover).copied() >= Some(1));
    no_loss_names_every_lost_job(&report);
    // The history records the failover: who was killed, who promoted, and
    // the old primary's rejoining.
    let events = history::read_file(&path).unwrap();
    let heal = events
        .iter()
        .filter(|e| e.process == "nemesis" && e.kind == EventKind::Ok && e.f == F::Fault)
        .filter_map(|e| e.value.as_ref())
        .find(|v| v["fault"] == "lag-failover" && v["action"] == "heal")
        .expect("the heal is recorded");
    assert!(
        heal["promoted"].is_string() && heal["killed"].is_string(),
        "{heal}"
    );
    assert_eq!(heal["rejoined"], heal["killed"], "{heal}");
    // The old primary, a replica again, has dropped the writes only it had:
    // no node holds a lost job.
    let queue_name = report.config.queue_name.clone();
    let keys = ackgap::queue::Keys::new(&queue_name).unwrap();
    for port in server.node_ports() {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        for id in &report.lost {
            let n: u64 = redis::cmd("HEXISTS")
                .arg(&keys.jobs)
                .arg(id)
                .query_async(&mut con)
                .await
                .unwrap();
            assert_eq!(n, 0, "{id} is still on the node on port {port}");
        }
    }
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_1_a_lag_failover_loses_no_acknowledged_job() {
    let dir = tempfile::tempdir().unwrap();
    for seed in [SEED, SEED + 1] {
        let path = dir.path().join(format!("wait-{seed}.jsonl"));
        let (report, server) = lag_failover(seed, "wait:1".parse().unwrap(), &path).await;
        server.stop().await.unwrap();
        assert!(report.fired.get(&FaultKind::LagFailover).copied() >= Some(1));
        let no_loss = report
            .invariants
            .iter()
            .find(|r| r.invariant == "no-loss")
            .unwrap();
        assert_eq!(
            no_loss.verdict,
            Verdict::Valid,
            "seed {seed}: {}",
            failing(&report)
        );
        assert!(report.lost.is_empty(), "seed {seed}: {:?}", report.lost);
        // The lag's writes were not confirmed: some completed `info`.
        let events = history::read_file(&path).unwrap();
        assert!(
            events.iter().any(|e| e.kind == EventKind::Info
                && e.error
                    .as_deref()
                    .is_some_and(|m| m.contains("not confirmed"))),
            "seed {seed}: no write went unconfirmed during the lag"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_cut_from_its_replicas_and_from_half_the_workers_loses_what_it_acknowledged_to_the_rest_and_no_loss_names_them(
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("primary-partition.jsonl");
    let mut server = start(2, Persistence::None).await;
    let cfg = ChaosConfig {
        duration_ms: 3_000,
        jobs: 80,
        faults: "primary-partition".parse().unwrap(),
        queue_name: common::queue_name(),
        ..ChaosConfig::new(SEED)
    };
    let report = runner::run(&mut server, cfg, Some(path.clone()), None)
        .await
        .expect("the chaos run completes");
    server.stop().await.unwrap();
    assert!(report.fired.get(&FaultKind::PrimaryPartition).copied() >= Some(1));
    no_loss_names_every_lost_job(&report);
    // The history names the workers cut from the primary, and the heal
    // reconnects them to the promoted replica.
    let events = history::read_file(&path).unwrap();
    let values: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e.process == "nemesis" && e.kind == EventKind::Ok && e.f == F::Fault)
        .filter_map(|e| e.value.as_ref())
        .filter(|v| v["fault"] == "primary-partition")
        .collect();
    let fired = values.iter().find(|v| v["action"] == "fired").unwrap();
    assert_eq!(fired["hit"]["cut_clients"], serde_json::json!(["w0", "w2"]));
    let heal = values.iter().find(|v| v["action"] == "heal").unwrap();
    assert_eq!(heal["reconnected_clients"], fired["hit"]["cut_clients"]);
    assert!(heal["promoted"].is_string(), "{heal}");
}

/// The container topology, or `None` (skipped; a failure in CI) without
/// docker or the image.
async fn start_containers(replicas: usize) -> Option<Server> {
    let spec: ServerSpec = format!("container-replicated:{replicas}").parse().unwrap();
    match Server::start(&spec, Persistence::None).await {
        Ok(server) => Some(server),
        Err(e) => {
            common::unavailable(common::Backend::Container, e);
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_on_private_networks_lose_acknowledged_jobs_when_the_primary_is_cut_from_its_replicas_and_fails_over(
) {
    let Some(server) = start_containers(2).await else {
        return;
    };
    assert!(
        server.describe().contains("containers"),
        "{}",
        server.describe()
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("containers.jsonl");
    let (report, server) = lag_failover_on(server, SEED, Durability::None, &path).await;
    server.stop().await.unwrap();
    assert!(report.fired.get(&FaultKind::LagFailover).copied() >= Some(1));
    let no_loss = report
        .invariants
        .iter()
        .find(|r| r.invariant == "no-loss")
        .unwrap();
    assert_eq!(no_loss.verdict, Verdict::Invalid, "{}", failing(&report));
    assert!(!report.lost.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_lose_what_a_primary_cut_from_the_replication_network_acknowledged_to_the_workers_it_kept_and_no_loss_names_them(
) {
    let Some(mut server) = start_containers(2).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("containers-primary-partition.jsonl");
    // 2 s: one primary-partition of seed 3's schedule (at 808 ms, healed
    // when the faults phase ends); a container restart takes seconds here.
    let cfg = ChaosConfig {
        duration_ms: 2_000,
        jobs: 80,
        faults: "primary-partition".parse().unwrap(),
        queue_name: common::queue_name(),
        ..ChaosConfig::new(SEED)
    };
    let report = runner::run(&mut server, cfg, Some(path.clone()), None)
        .await
        .expect("the chaos run completes");
    server.stop().await.unwrap();
    assert_eq!(
        report.fired.get(&FaultKind::PrimaryPartition).copied(),
        Some(1)
    );
    no_loss_names_every_lost_job(&report);
    // The primary was disconnected from the replication network (the
    // links held) and w0, w2 cut by the proxy; the heal failed over to a
    // replica, rejoined the old primary and reconnected the workers.
    let events = history::read_file(&path).unwrap();
    let values: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e.process == "nemesis" && e.kind == EventKind::Ok && e.f == F::Fault)
        .filter_map(|e| e.value.as_ref())
        .filter(|v| v["fault"] == "primary-partition")
        .collect();
    let action = |a: &str| values.iter().find(|v| v["action"] == a).copied();
    assert!(action("inject").is_some(), "{values:?}");
    let fired = action("fired").expect("the partition fired");
    assert_eq!(fired["hit"]["held_links"], 2, "{fired}");
    assert_eq!(fired["hit"]["cut_clients"], serde_json::json!(["w0", "w2"]));
    let heal = action("heal").expect("the partition healed");
    assert_ne!(heal["promoted"], heal["killed"], "{heal}");
    assert_eq!(heal["rejoined"], heal["killed"], "{heal}");
    assert_eq!(heal["reconnected_clients"], fired["hit"]["cut_clients"]);
}

#[test]
fn a_kill_9_of_ackgap_leaves_no_container_and_no_network_behind() {
    // A primary and a replica on two networks.
    kill_9_leaves_nothing("container-replicated:1", (2, 2));
}

#[test]
fn a_kill_9_of_ackgap_leaves_no_container_and_no_network_of_a_container_cluster_behind() {
    // One node on the bus and the control networks.
    kill_9_leaves_nothing("container-cluster:1x0", (1, 2));
}

/// Starts `ackgap chaos --server SPEC`, checks that it runs `expected`
/// (containers, networks) of its own once the plan is printed, kills it
/// with SIGKILL, and asserts that its watchdog removes them all.
fn kill_9_leaves_nothing(spec: &str, expected: (usize, usize)) {
    if !common::containers_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args([
            "chaos",
            "--server",
            spec,
            "--faults",
            "none",
            "--duration",
            "60s",
            "--jobs",
            "10",
            "--queue-name",
            &common::queue_name(),
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Once the plan is printed, the topology is up.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        assert!(n > 0, "ackgap exited before starting its containers");
        if line.contains("as containers") {
            break;
        }
    }
    let label = format!("ackgap.set={}-", child.id());
    let pid_tag = format!("-{}-", child.id());
    // (containers, networks) of this ackgap.
    let mine = || {
        let containers = std::process::Command::new("docker")
            .args(["ps", "-a", "--format", "{{.Labels}}"])
            .output()
            .unwrap();
        let networks = std::process::Command::new("docker")
            .args(["network", "ls", "--format", "{{.Name}}"])
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&containers.stdout)
                .matches(&label)
                .count(),
            String::from_utf8_lossy(&networks.stdout)
                .lines()
                .filter(|n| n.starts_with("ackgap-") && n.contains(&pid_tag))
                .count(),
        )
    };
    assert_eq!(mine(), expected, "{spec}");
    child.kill().unwrap();
    child.wait().unwrap();
    // The watchdog notices within half a second and removes everything;
    // this waits for it (a readiness wait, bounded), then asserts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while mine() != (0, 0) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(
        mine(),
        (0, 0),
        "containers or networks of the killed ackgap are left"
    );
}

/// The containers and networks of the ackgap whose pid is `pid`: a set's
/// carry `ackgap.set=PID-N` and are named `ackgap-ROLE-PID-N`; a single
/// container carries `ackgap.pid=PID`.
fn left_by(pid: u32) -> (Vec<String>, Vec<String>) {
    let docker = |args: &[&str]| {
        let out = std::process::Command::new("docker")
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let set = format!("ackgap.set={pid}-");
    let single = format!("ackgap.pid={pid}");
    let containers = docker(&[
        "ps",
        "-a",
        "--filter",
        "label=ackgap.owner=ackgap",
        "--format",
        "{{.ID}} {{.Labels}}",
    ])
    .lines()
    .filter(|l| l.contains(&set) || l.split([',', ' ']).any(|label| label.trim() == single))
    .map(str::to_owned)
    .collect();
    let tag = format!("-{pid}-");
    let networks = docker(&["network", "ls", "--format", "{{.Name}}"])
        .lines()
        .filter(|n| n.starts_with("ackgap-") && n.contains(&tag))
        .map(str::to_owned)
        .collect();
    (containers, networks)
}

/// Starts `ackgap chaos --server SPEC` in a process group of its own, sends
/// the group SIGINT after `after` (as a terminal's Ctrl-C reaches the
/// foreground group: ackgap and any `docker` child it has not shielded),
/// and asserts, as soon as it exited, that it exited 130 and left no
/// container and no network. Checked at once: the watchdog, which would
/// clean up after a `kill -9`, has not had its half second yet.
fn interrupted_start_leaves_nothing(spec: &str, after: std::time::Duration) {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args([
            "chaos",
            "--server",
            spec,
            "--faults",
            "none",
            "--duration",
            "60s",
            "--jobs",
            "10",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::sleep(after);
    let sent = std::process::Command::new("kill")
        .args(["-INT", "--", &format!("-{pid}")])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let left = left_by(pid);
    assert_eq!(
        left,
        (Vec::new(), Vec::new()),
        "{spec}, Ctrl-C {} ms in: left behind (stderr: {})",
        after.as_millis(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(130),
        "{spec}, Ctrl-C {} ms in: {}",
        after.as_millis(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ctrl_c_at_any_moment_of_a_container_set_s_start_leaves_no_container_and_no_network() {
    if !common::containers_here() {
        return;
    }
    // Before the networks, among the `docker run`s, while the replica
    // links come up, and once the run is under way.
    for ms in [100, 300, 600, 1_000, 1_500, 2_200, 3_000] {
        interrupted_start_leaves_nothing(
            "container-replicated:1",
            std::time::Duration::from_millis(ms),
        );
    }
}

#[test]
fn ctrl_c_during_a_container_cluster_s_or_a_container_s_start_leaves_nothing() {
    if !common::containers_here() {
        return;
    }
    for ms in [300, 900, 2_000] {
        interrupted_start_leaves_nothing(
            "container-cluster:1x0",
            std::time::Duration::from_millis(ms),
        );
    }
    for ms in [150, 400, 900] {
        interrupted_start_leaves_nothing("container", std::time::Duration::from_millis(ms));
    }
}

#[test]
fn a_durability_dial_the_server_cannot_satisfy_is_a_usage_error_before_any_server_starts() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ackgap"))
            .args(args)
            .output()
            .unwrap()
    };
    for (args, needle) in [
        (
            vec![
                "chaos",
                "--durability",
                "wait:3",
                "--server",
                "replicated:2",
            ],
            "waits for 3 replicas",
        ),
        (vec!["chaos", "--durability", "wait:1"], "has 0"),
        (
            vec![
                "chaos",
                "--durability",
                "waitaof:1:0",
                "--persistence",
                "none",
            ],
            "--persistence everysec or always",
        ),
        (
            vec!["chaos", "--durability", "wait:x"],
            "invalid durability",
        ),
    ] {
        let out = run(&args);
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {text}");
        assert!(text.contains(needle), "{args:?}: {text}");
    }
}
