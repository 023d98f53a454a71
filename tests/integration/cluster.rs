//! `--server cluster` and `--server replicated` under the explorers: the
//! reference queue on a Valkey Cluster built from the client side (its
//! script calls through redis-rs's cluster connection) and behind a
//! replicated topology's front passes `ackgap explore` and `ackgap
//! exhaust`, as it does on one server.

use std::process::{Command, Output};

use ackgap::queue::client::EnqueueOptions;
use ackgap::queue::{Enqueued, Queue};
use ackgap::server::{Persistence, Server};

use crate::common;

fn ackgap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ackgap"))
        .args(args)
        .output()
        .expect("run ackgap")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_ok_and_queues_with_other_hash_tags_land_on_other_primaries() {
    let server = Server::start(&"cluster:3x1".parse().unwrap(), Persistence::None)
        .await
        .expect("the cluster starts");
    assert_eq!(server.node_ports().len(), 6);
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..12 {
        let queue = Queue::connect(&server.client(), &format!("{}-{i}", common::queue_name()))
            .await
            .unwrap();
        assert!(queue.on_cluster());
        let id = format!("JOB-{i}");
        assert_eq!(
            queue
                .enqueue(&id, b"x", EnqueueOptions::default())
                .await
                .unwrap(),
            Enqueued::Enqueued
        );
        let lease = queue
            .lease("w", 1000)
            .await
            .unwrap()
            .expect("a job is ready");
        assert_eq!(lease.id, id);
        queue.complete(&id, lease.token).await.unwrap();
        let snap = queue.snapshot().await.unwrap();
        assert!(snap.done.contains(&id));
        let mut con = queue.connection();
        let port: String = redis::cmd("CONFIG")
            .arg("GET")
            .arg("port")
            .query_async::<Vec<String>>(&mut con)
            .await
            .unwrap()
            .pop()
            .unwrap();
        owners.insert(port);
    }
    // Twelve hash tags over three primaries: more than one owner.
    assert!(owners.len() > 1, "{owners:?}");
    server.stop().await.unwrap();
}

#[test]
fn explore_and_exhaust_pass_on_a_cluster_and_on_a_replicated_topology() {
    for server in ["cluster:3x1", "replicated:1"] {
        let out = ackgap(&[
            "explore", "--server", server, "--seeds", "3", "--steps", "60",
        ]);
        assert!(out.status.success(), "explore on {server}: {}", text(&out));
        let out = ackgap(&["exhaust", "--server", server, "--depth", "4"]);
        assert!(out.status.success(), "exhaust on {server}: {}", text(&out));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_chaos_campaign_on_a_cluster_holds_every_invariant_under_worker_faults() {
    let mut server = Server::start(&"cluster:3x1".parse().unwrap(), Persistence::None)
        .await
        .expect("the cluster starts");
    let dir = tempfile::tempdir().unwrap();
    let cfg = ackgap::chaos::runner::ChaosConfig {
        duration_ms: 3_000,
        jobs: 60,
        faults: "worker,script-flush".parse().unwrap(),
        queue_name: common::queue_name(),
        ..ackgap::chaos::runner::ChaosConfig::new(2)
    };
    let report = ackgap::chaos::runner::run(
        &mut server,
        cfg,
        Some(dir.path().join("cluster.jsonl")),
        None,
    )
    .await
    .expect("the chaos run completes");
    server.stop().await.unwrap();
    let bad: Vec<String> = report
        .invariants
        .iter()
        .filter(|r| r.verdict != ackgap::check::Verdict::Valid)
        .map(|r| format!("{}: {:?}", r.invariant, r.violations))
        .collect();
    assert_eq!(report.verdict, ackgap::check::Verdict::Valid, "{bad:#?}");
    assert!(report.never_fired.is_empty(), "{:?}", report.never_fired);
}

/// The fault events of `action` for `fault` in the history at `path`.
fn fault_events(path: &std::path::Path, fault: &str, action: &str) -> Vec<serde_json::Value> {
    ackgap::history::read_file(path)
        .unwrap()
        .into_iter()
        .filter(|e| e.process == "nemesis" && e.kind == ackgap::history::EventKind::Ok)
        .filter_map(|e| e.value)
        .filter(|v| v["fault"] == fault && v["action"] == action)
        .collect()
}

/// A chaos run of `faults` on a fresh `cluster:3x1`, its history at `path`.
async fn cluster_run(
    faults: &str,
    durability: &str,
    path: &std::path::Path,
) -> ackgap::chaos::runner::ChaosReport {
    let mut server = Server::start(&"cluster:3x1".parse().unwrap(), Persistence::None)
        .await
        .expect("the cluster starts");
    let report = cluster_run_on(&mut server, faults, durability, path).await;
    server.stop().await.unwrap();
    report
}

/// A chaos run of seed 1 with `faults` on `server`, its history at `path`.
async fn cluster_run_on(
    server: &mut Server,
    faults: &str,
    durability: &str,
    path: &std::path::Path,
) -> ackgap::chaos::runner::ChaosReport {
    let cfg = ackgap::chaos::runner::ChaosConfig {
        duration_ms: 3_000,
        jobs: 80,
        faults: faults.parse().unwrap(),
        durability: durability.parse().unwrap(),
        queue_name: common::queue_name(),
        ..ackgap::chaos::runner::ChaosConfig::new(1)
    };
    ackgap::chaos::runner::run(server, cfg, Some(path.to_path_buf()), None)
        .await
        .expect("the chaos run completes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_1_a_cluster_s_own_failover_loses_no_acknowledged_job_and_the_old_primary_rejoins(
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster-failover.jsonl");
    let report = cluster_run("failover", "wait:1", &path).await;
    use ackgap::chaos::schedule::FaultKind;
    assert!(
        report.fired.get(&FaultKind::Failover).copied() >= Some(1),
        "{:?}",
        report.fired
    );
    for name in ["no-loss", "structure", "fenced-settlement"] {
        let r = report
            .invariants
            .iter()
            .find(|r| r.invariant == name)
            .unwrap();
        assert_eq!(
            r.verdict,
            ackgap::check::Verdict::Valid,
            "{name}: {:?}",
            r.violations
        );
    }
    // The kill -9 is followed by the cluster's own failover: a replica
    // promotes itself only once the primary has been unreachable for
    // cluster-node-timeout (1000 ms).
    let failover = &fault_events(&path, "failover", "fired")[0]["hit"];
    assert!(failover["took_ms"].as_u64().unwrap() >= 1000, "{failover}");
    assert_ne!(failover["killed"], failover["promoted"], "{failover}");
    let rejoined = fault_events(&path, "failover", "heal");
    assert_eq!(rejoined[0]["rejoined"], failover["killed"], "{rejoined:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_moves_the_queue_s_slots_to_its_replica_and_the_heal_gives_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster-takeover.jsonl");
    let report = cluster_run("takeover", "none", &path).await;
    let taken = fault_events(&path, "takeover", "fired");
    let given = fault_events(&path, "takeover", "heal");
    assert!(!taken.is_empty(), "{:?}", report.fired);
    assert_ne!(taken[0]["hit"]["demoted"], taken[0]["hit"]["promoted"]);
    assert_eq!(
        given[0]["given_back_to"], taken[0]["hit"]["demoted"],
        "{given:?}"
    );
}

#[test]
fn a_failover_on_a_cluster_that_cannot_vote_is_refused_before_the_run() {
    let out = ackgap(&[
        "chaos",
        "--server",
        "cluster:2x1",
        "--faults",
        "failover",
        "--duration",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("at least 3 primaries"),
        "{}",
        text(&out)
    );
}

#[test]
fn the_matrix_is_one_flag_with_grid_as_another_name_and_the_persistence_matrix_is_apart() {
    for (args, says) in [
        (
            &["chaos", "--matrix", "--faults", "all"][..],
            "'--matrix' cannot be used with '--faults",
        ),
        (
            &["chaos", "--grid", "--faults", "all"],
            "'--matrix' cannot be used with '--faults",
        ),
        (
            &["chaos", "--matrix", "--grid-seeds", "0"],
            "for '--matrix-seeds",
        ),
        (
            &["chaos", "--matrix", "--persistence-matrix"],
            "cannot be used with",
        ),
    ] {
        let out = ackgap(args);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
}

#[test]
fn network_and_server_faults_on_a_cluster_are_refused_before_the_run() {
    let out = ackgap(&[
        "chaos",
        "--server",
        "cluster:1x0",
        "--faults",
        "partition",
        "--duration",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(
        text(&out).contains("not supported on a cluster"),
        "{}",
        text(&out)
    );
}

#[test]
fn explore_and_exhaust_pass_on_a_cluster_of_containers() {
    let image = ackgap::server::image_reference();
    let present = Command::new("docker")
        .args(["image", "inspect", &format!("{}:{}", image.0, image.1)])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        common::unavailable(common::Backend::Container, "docker or the image is missing");
        return;
    }
    let out = ackgap(&[
        "explore",
        "--server",
        "container-cluster:3x1",
        "--seeds",
        "2",
        "--steps",
        "40",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("as containers"), "{}", text(&out));
    let out = ackgap(&[
        "exhaust",
        "--server",
        "container-cluster:3x0",
        "--depth",
        "4",
    ]);
    assert!(out.status.success(), "{}", text(&out));
}

/// A `container-cluster:3x1`, or `None` (skipped; a failure in CI)
/// without docker or the image.
async fn start_container_cluster() -> Option<Server> {
    match Server::start(&"container-cluster:3x1".parse().unwrap(), Persistence::None).await {
        Ok(server) => Some(server),
        Err(e) => common::unavailable(common::Backend::Container, e),
    }
}

/// `CLUSTER MYID`, the role and, for a replica, its primary's id, of the
/// node at `addr` (`ip:port`), asked directly.
async fn node_identity(addr: &str) -> (String, String, Option<String>) {
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let id: String = redis::cmd("CLUSTER")
        .arg("MYID")
        .query_async(&mut con)
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut con)
        .await
        .unwrap();
    let role = info
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("role:"))
        .unwrap()
        .to_string();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut con)
        .await
        .unwrap();
    // The `myself` line's fourth field: its primary's id, `-` for a primary.
    let primary = nodes
        .lines()
        .find(|l| {
            l.split_whitespace()
                .nth(2)
                .is_some_and(|f| f.contains("myself"))
        })
        .and_then(|l| l.split_whitespace().nth(3))
        .filter(|p| *p != "-")
        .map(str::to_string);
    (id, role, primary)
}

/// The checkers judged the run (a verdict, not `unknown`), and no-loss
/// names every acknowledged job the run lost.
fn judged_naming_every_lost_job(report: &ackgap::chaos::runner::ChaosReport) {
    assert_ne!(report.verdict, ackgap::check::Verdict::Unknown);
    let no_loss = report
        .invariants
        .iter()
        .find(|r| r.invariant == "no-loss")
        .expect("no-loss was judged");
    for id in &report.lost {
        assert!(
            no_loss
                .violations
                .iter()
                .any(|v| v.starts_with(id.as_str())),
            "{id} is not named: {:?}",
            no_loss.violations
        );
    }
}

/// With `wait:1` a cluster's own failover leaves these holding: no
/// acknowledged job lost, the final read tied to the history, no token
/// reused.
fn judged_and_structurally_sound(report: &ackgap::chaos::runner::ChaosReport) {
    for name in ["no-loss", "structure", "fenced-settlement", "settle-once"] {
        let r = report
            .invariants
            .iter()
            .find(|r| r.invariant == name)
            .unwrap_or_else(|| panic!("{name} was not judged"));
        assert_eq!(
            r.verdict,
            ackgap::check::Verdict::Valid,
            "{name}: {:?}",
            r.violations
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_of_containers_a_killed_primary_s_replica_takes_its_slots_and_the_killed_node_rejoins_as_its_replica_under_its_own_id(
) {
    let Some(mut server) = start_container_cluster().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("container-cluster-failover.jsonl");
    let report = cluster_run_on(&mut server, "failover", "wait:1", &path).await;
    let fired = fault_events(&path, "failover", "fired");
    let healed = fault_events(&path, "failover", "heal");
    // The schedule may fail over more than once: the last failover and
    // its heal left the nodes as they are now.
    let identities = match (fired.last(), healed.last()) {
        (Some(f), Some(h)) => {
            let killed = f["hit"]["killed"].as_str().unwrap().to_string();
            let promoted = f["hit"]["promoted"].as_str().unwrap().to_string();
            Some((
                f["hit"].clone(),
                h.clone(),
                node_identity(&killed).await,
                node_identity(&promoted).await,
            ))
        }
        _ => None,
    };
    server.stop().await.unwrap();
    let (hit, heal, killed, promoted) = identities.unwrap_or_else(|| {
        panic!(
            "the failover did not fire and heal: fired {:?}, injected {:?}",
            report.fired, report.injected
        )
    });
    // docker kill, then the cluster's own failover after
    // cluster-node-timeout (1000 ms): another node, under another id.
    assert!(hit["took_ms"].as_u64().unwrap() >= 1000, "{hit}");
    assert_ne!(hit["killed"], hit["promoted"], "{hit}");
    assert!(hit["killed_id"].is_string(), "{hit}");
    assert_ne!(hit["killed_id"], hit["promoted_id"], "{hit}");
    // docker start: the node came back on its own nodes.conf (its id
    // kept), a replica of the node promoted in its place.
    assert_eq!(heal["rejoined"], hit["killed"], "{heal}");
    assert_eq!(killed.0, hit["killed_id"].as_str().unwrap());
    assert_eq!(killed.1, "slave");
    assert_eq!(killed.2.as_deref(), hit["promoted_id"].as_str());
    assert_eq!(promoted.0, hit["promoted_id"].as_str().unwrap());
    assert_eq!(promoted.1, "master");
    judged_and_structurally_sound(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_of_containers_a_takeover_moves_the_queue_s_slots_to_the_replica_and_the_heal_gives_them_back(
) {
    let Some(mut server) = start_container_cluster().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("container-cluster-takeover.jsonl");
    let report = cluster_run_on(&mut server, "takeover", "none", &path).await;
    let taken = fault_events(&path, "takeover", "fired");
    let given = fault_events(&path, "takeover", "heal");
    // The last takeover and its give-back left the nodes as they are now.
    let roles = match (taken.last(), given.last()) {
        (Some(t), Some(_)) => Some((
            node_identity(t["hit"]["demoted"].as_str().unwrap()).await,
            node_identity(t["hit"]["promoted"].as_str().unwrap()).await,
        )),
        _ => None,
    };
    server.stop().await.unwrap();
    let (demoted, promoted) = roles.unwrap_or_else(|| {
        panic!(
            "the takeover did not fire and heal: fired {:?}",
            report.fired
        )
    });
    let hit = &taken.last().unwrap()["hit"];
    assert_ne!(hit["demoted"], hit["promoted"], "{hit}");
    assert_eq!(
        given.last().unwrap()["given_back_to"],
        hit["demoted"],
        "{given:?}"
    );
    // Given back: the demoted node is the primary again, the replica that
    // took its slots replicates it once more.
    assert_eq!(demoted.1, "master");
    assert_eq!(promoted.1, "slave");
    assert_eq!(promoted.2.as_deref(), Some(demoted.0.as_str()));
    judged_naming_every_lost_job(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_on_a_cluster_walks_its_seeds_on_queues_of_every_primary() {
    let server = Server::start(&"cluster:3x0".parse().unwrap(), Persistence::None)
        .await
        .expect("the cluster starts");
    let url = server.url();
    let out = tokio::task::spawn_blocking(move || {
        ackgap(&[
            "explore", "--server", &url, "--seeds", "6", "--steps", "20", "--jobs", "2",
        ])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("a cluster of 3 primaries"),
        "{}",
        text(&out)
    );
    // Each walk leaves its queue's keys behind (a walk clears its queue
    // when it starts): every primary holds some.
    let mut holders = 0;
    for port in server.node_ports() {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*{ackgap-explore*")
            .query_async(&mut con)
            .await
            .unwrap();
        if !keys.is_empty() {
            holders += 1;
        }
    }
    server.stop().await.unwrap();
    assert_eq!(holders, 3, "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_of_containers_a_primary_cut_from_the_bus_is_failed_over_and_comes_back_a_replica_of_its_successor(
) {
    let Some(mut server) = start_container_cluster().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("container-cluster-partition.jsonl");
    let report = cluster_run_on(&mut server, "primary-partition", "none", &path).await;
    let cut = fault_events(&path, "primary-partition", "fired");
    let back = fault_events(&path, "primary-partition", "heal");
    // The last cut and its heal left the nodes as they are now.
    let identities = match (cut.last(), back.last()) {
        (Some(c), Some(_)) => Some((
            node_identity(c["hit"]["cut_from_bus"].as_str().unwrap()).await,
            node_identity(c["hit"]["promoted"].as_str().unwrap()).await,
        )),
        _ => None,
    };
    server.stop().await.unwrap();
    let (was_cut, promoted) = identities.unwrap_or_else(|| {
        panic!(
            "the partition did not fire and heal: fired {:?}, injected {:?}",
            report.fired, report.injected
        )
    });
    let hit = &cut.last().unwrap()["hit"];
    let back = back.last().unwrap();
    // The rest of the cluster stopped hearing the primary and, after
    // cluster-node-timeout (1000 ms), elected its replica.
    assert!(hit["took_ms"].as_u64().unwrap() >= 1000, "{hit}");
    assert_ne!(hit["cut_from_bus"], hit["promoted"], "{hit}");
    // Reconnected, the cut node learnt of the newer epoch and became a
    // replica of its successor.
    assert_eq!(back["reconnected"], hit["cut_from_bus"], "{back}");
    assert_eq!(back["role"], "slave", "{back}");
    assert_eq!(was_cut.1, "slave");
    assert_eq!(was_cut.2.as_deref(), Some(promoted.0.as_str()));
    assert_eq!(promoted.1, "master");
    judged_naming_every_lost_job(&report);
}
