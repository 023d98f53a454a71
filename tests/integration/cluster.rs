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
    let cfg = ackgap::chaos::runner::ChaosConfig {
        duration_ms: 3_000,
        jobs: 80,
        faults: faults.parse().unwrap(),
        durability: durability.parse().unwrap(),
        queue_name: common::queue_name(),
        ..ackgap::chaos::runner::ChaosConfig::new(1)
    };
    let report = ackgap::chaos::runner::run(&mut server, cfg, Some(path.to_path_buf()), None)
        .await
        .expect("the chaos run completes");
    server.stop().await.unwrap();
    report
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
