//! `--server cluster` and `--server replicated` under the explorers: the
//! reference queue on a Valkey Cluster built from the client side (its
//! script calls through redis-rs's cluster connection) and behind a
//! replicated topology's front passes `ackgap explore` and `ackgap
//! exhaust`, as it does on one server.

use std::process::Command;

use ackgap::queue::client::EnqueueOptions;
use ackgap::queue::{Enqueued, Queue};
use ackgap::server::{Persistence, Server};

use crate::common;
use crate::common::{ackgap, text};

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
    assert_valid(&report);
    assert!(report.never_fired.is_empty(), "{:?}", report.never_fired);
}

/// Asserts the run valid, naming each invariant that was not and its
/// violations.
fn assert_valid(report: &ackgap::chaos::runner::ChaosReport) {
    let bad: Vec<String> = report
        .invariants
        .iter()
        .filter(|r| r.verdict != ackgap::check::Verdict::Valid)
        .map(|r| format!("{}: {:?}", r.invariant, r.violations))
        .collect();
    assert_eq!(report.verdict, ackgap::check::Verdict::Valid, "{bad:#?}");
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
        assert!(held(r), "{name}: {r:?}");
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

/// `reshard`: the queue's slot moves between the primaries of a
/// `cluster:3x0` by Valkey 9's atomic slot migration while the workers
/// run; the reference queue holds every invariant, and each move ends with
/// the slot on another primary, whose keys then answer there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_by_atomic_slot_migration_moves_the_queue_s_slot_and_every_invariant_holds() {
    reshard_holds_every_invariant(
        "reshard",
        ackgap::chaos::schedule::FaultKind::Reshard,
        "atomic",
    )
    .await;
}

/// `reshard-classic`: the same moves the classic way (`SETSLOT …
/// MIGRATING/IMPORTING`, `MIGRATE`, `SETSLOT … NODE`), each slot held
/// `MIGRATING` before and after its keys move. The reference queue holds
/// every invariant, and during each migration queue calls are answered
/// and none fails: the client follows `ASK` and retries `TRYAGAIN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_reshard_moves_the_queue_s_slot_every_invariant_holds_and_no_queue_call_fails_during_it(
) {
    let report = reshard_holds_every_invariant(
        "reshard-classic",
        ackgap::chaos::schedule::FaultKind::ReshardClassic,
        "classic",
    )
    .await;
    for m in &report.migrations {
        assert!(m.answered > 0, "{}", m.describe());
        assert_eq!(m.failed, 0, "{}", m.describe());
    }
}

/// A chaos run of `fault` (a reshard) on a fresh `cluster:3x0`: it fired,
/// every invariant holds, the report has each migration as `kind`, each
/// moved the slot to another primary, and the last one's target owns it.
async fn reshard_holds_every_invariant(
    fault: &str,
    kind: ackgap::chaos::schedule::FaultKind,
    migration: &str,
) -> ackgap::chaos::runner::ChaosReport {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster-reshard.jsonl");
    let mut server = Server::start(&"cluster:3x0".parse().unwrap(), Persistence::None)
        .await
        .expect("the cluster starts");
    let report = cluster_run_on(&mut server, fault, "none", &path).await;
    assert!(
        report.fired.get(&kind).copied() >= Some(1),
        "{:?}",
        report.fired
    );
    assert_eq!(
        report.verdict,
        ackgap::check::Verdict::Valid,
        "{:?}",
        report.invariants
    );
    let moves = fault_events(&path, fault, "fired");
    for m in &moves {
        assert_ne!(m["hit"]["from"], m["hit"]["to"], "{m}");
        assert_eq!(m["hit"]["kind"], migration, "{m}");
    }
    assert_eq!(
        report.migrations.len(),
        moves.len(),
        "{:?}",
        report.migrations
    );
    for m in &report.migrations {
        assert_eq!(m.kind, migration, "{}", m.describe());
    }
    // `ackgap check` reads the same migrations off the history, offline.
    let checked = ackgap(&["check", path.to_str().unwrap(), "--json"]);
    let checked: serde_json::Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(
        checked["migrations"],
        serde_json::to_value(&report.migrations).unwrap()
    );
    // The last move's target owns the slot: CLUSTER SLOTS on any node says so.
    let last = &moves.last().unwrap()["hit"];
    let slot = last["slot"].as_u64().unwrap() as i64;
    let mut con = node(server.node_ports()[0]).await;
    let ranges: Vec<(i64, i64, Vec<redis::Value>)> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async::<Vec<redis::Value>>(&mut con)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            redis::Value::Array(parts) => match (&parts[0], &parts[1], &parts[2]) {
                (redis::Value::Int(a), redis::Value::Int(b), redis::Value::Array(p)) => {
                    Some((*a, *b, p.clone()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect();
    let owner = ranges
        .iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, p)| match (&p[0], &p[1]) {
            (redis::Value::BulkString(h), redis::Value::Int(port)) => {
                format!("{}:{port}", String::from_utf8_lossy(h))
            }
            other => panic!("{other:?}"),
        })
        .expect("an owner of the slot");
    assert_eq!(owner, last["to"].as_str().unwrap());
    server.stop().await.unwrap();
    report
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

/// A single server's kill or pause is refused on a cluster before the run
/// (the cluster's own failover stands in for them), with the reason.
#[test]
fn server_faults_on_a_cluster_are_refused_before_the_run() {
    let out = ackgap(&[
        "chaos",
        "--server",
        "cluster:1x0",
        "--faults",
        "server-kill",
        "--duration",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(
        text(&out)
            .contains("not supported on a cluster: a cluster this tool starts takes failover"),
        "{}",
        text(&out)
    );
}

/// Every network fault reaches a cluster's clients: each worker's cluster
/// client connects to every node through its own ports of the fault proxy
/// (redis-rs's `node_address_map`), so each kind fires on the worker it
/// aims at, and the reference queue holds every invariant. The queue's
/// slot lives on a primary other than the node the workers are first
/// pointed at, so a worker partitioned while its script calls went past
/// the proxy would go on working: it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_network_fault_fires_on_a_cluster_and_a_partitioned_worker_completes_nothing() {
    let mut server = Server::start(&"cluster:3x1".parse().unwrap(), Persistence::None)
        .await
        .expect("the cluster starts");
    let seed = match redis::Client::open(server.url())
        .unwrap()
        .get_connection_info()
        .addr()
    {
        redis::ConnectionAddr::Tcp(_, port) => *port,
        other => panic!("{other:?}"),
    };
    let mut queue_name = String::new();
    for i in 0.. {
        let name = format!("{}-{i}", common::queue_name());
        if shard_of(seed, &format!("emq:{{{name}}}:pending")).await.0 != seed {
            queue_name = name;
            break;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("network.jsonl");
    let cfg = ackgap::chaos::runner::ChaosConfig {
        duration_ms: 3_000,
        jobs: 80,
        faults: "network".parse().unwrap(),
        queue_name,
        ..ackgap::chaos::runner::ChaosConfig::new(1)
    };
    let report = ackgap::chaos::runner::run(&mut server, cfg, Some(path.clone()), None)
        .await
        .expect("the chaos run completes");
    server.stop().await.unwrap();
    assert_valid(&report);
    // Every kind the schedule injected fired on its worker. (One
    // injection may touch nothing, reported as such: a reset of a worker
    // whose connections an earlier fault just cut.)
    assert_eq!(
        report.fired.keys().collect::<Vec<_>>(),
        report.injected.keys().collect::<Vec<_>>(),
        "injected {:?}, fired {:?}",
        report.injected,
        report.fired
    );
    assert!(report.injected.len() >= 4, "{:?}", report.injected);
    // While partitioned, a worker completes no call.
    let events = ackgap::history::read_file(&path).unwrap();
    let mut windows = Vec::new();
    for e in events.iter().filter(|e| e.process == "nemesis") {
        let Some(v) = &e.value else { continue };
        if e.kind != ackgap::history::EventKind::Ok || v["fault"] != "partition" {
            continue;
        }
        let target = v["target"].as_str().unwrap_or_default().to_string();
        match v["action"].as_str() {
            Some("inject") => windows.push((target, e.time_ms, u64::MAX)),
            Some("heal") => {
                if let Some(w) = windows.iter_mut().rev().find(|w| w.0 == target) {
                    w.2 = e.time_ms;
                }
            }
            _ => {}
        }
    }
    assert!(!windows.is_empty(), "no partition in the schedule");
    for (worker, from, to) in &windows {
        let done: Vec<String> = events
            .iter()
            .filter(|e| &e.process == worker && e.kind == ackgap::history::EventKind::Ok)
            .filter(|e| e.time_ms > *from && e.time_ms < *to)
            .map(|e| format!("{:?} at {} ms", e.f, e.time_ms))
            .collect();
        assert!(
            done.is_empty(),
            "{worker} partitioned {from}..{to} ms did {done:?}"
        );
    }
}

/// A cluster reached by URL takes the network faults too: the tool reads
/// the nodes it announces (`CLUSTER NODES`) and gives each worker a port
/// of the proxy for each. `--faults network` runs, and every kind fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_faults_on_a_cluster_given_as_a_url_fire_through_the_proxy() {
    let server = Server::start(&"cluster:1x0".parse().unwrap(), Persistence::None)
        .await
        .expect("a cluster of one");
    let url = server.url();
    let out = ackgap(&[
        "chaos",
        "--server",
        &url,
        "--faults",
        "network",
        "--duration",
        "2s",
        "--jobs",
        "60",
    ]);
    server.stop().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("verdict: valid"), "{}", text(&out));
    assert!(!text(&out).contains("never fired"), "{}", text(&out));
}

#[test]
fn explore_and_exhaust_pass_on_a_cluster_of_containers() {
    if !common::containers_here() {
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
                .any(|v| v.job.as_deref() == Some(id.as_str())),
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
        assert!(held(r), "{name}: {r:?}");
    }
}

/// An invariant held where the run tested it: valid, or, for one the
/// faults gave no chance to break (a failover run need not reap a lease
/// a worker then settles), not exercised. no-loss and structure are
/// always exercised here (jobs owed, a final read), so for them only
/// valid holds.
fn held(r: &ackgap::check::Report) -> bool {
    match r.invariant {
        "no-loss" | "structure" => r.verdict == ackgap::check::Verdict::Valid,
        _ => r.verdict == ackgap::check::Verdict::Valid || r.not_exercised(),
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

/// A connection to one node of a cluster of processes (replies may take
/// up to 30 s: a WAIT blocks).
async fn node(port: u16) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(30)));
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// `INFO replication`'s `field` on the node at `port`.
async fn replication(port: u16, field: &str) -> String {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut node(port).await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_default()
        .to_owned()
}

/// Polls `what` on the node at `port` until it holds (at most 20 s).
async fn until<F, Fut>(what: &str, mut holds: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !holds().await {
        assert!(start.elapsed().as_secs() < 20, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The ports of the primary that owns `key`'s slot and of its replica,
/// read from `CLUSTER NODES`.
async fn shard_of(any: u16, key: &str) -> (u16, u16) {
    let mut con = node(any).await;
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut con)
        .await
        .unwrap();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut con)
        .await
        .unwrap();
    let lines: Vec<Vec<&str>> = nodes
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let port =
        |fields: &[&str]| -> u16 { fields[1].split(['@', ':']).nth(1).unwrap().parse().unwrap() };
    let owns = |fields: &[&str]| {
        fields[8..].iter().any(|range| {
            let mut ends = range
                .split('-')
                .map(|n| n.parse::<u16>().unwrap_or(u16::MAX));
            let lo = ends.next().unwrap();
            let hi = ends.next().unwrap_or(lo);
            (lo..=hi).contains(&slot)
        })
    };
    let primary = lines
        .iter()
        .find(|f| f.len() > 8 && f[2].contains("master") && owns(f))
        .expect("an owner");
    let replica = lines
        .iter()
        .find(|f| f[3] == primary[0])
        .expect("a replica");
    (port(primary), port(replica))
}

/// The process id of the node at `port`.
async fn pid_of(port: u16) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut node(port).await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix("process_id:"))
        .unwrap()
        .to_owned()
}

fn signal(pid: &str, sig: &str) {
    let status = Command::new("kill").args([sig, pid]).status().unwrap();
    assert!(status.success());
}

/// The finding behind the `wait:1` takeover cell of the topology grid,
/// reproduced step by step outside the chaos runner, on a cluster of
/// processes (Valkey 9.1 by default):
///
/// 1. the replica B takes its primary A's slots (`TAKEOVER`);
/// 2. B is stopped (SIGSTOP), and a client sends it a write and `WAIT 1`;
///    the queue sends it an enqueue under `wait:1`;
/// 3. A takes the slots back (`FAILOVER FORCE`) while B cannot hear it;
/// 4. B resumes: it runs both writes before it learns of A (it answers
///    the raw `SET` `OK`), the WAITs block (B has no replica), B learns, is
///    demoted and resyncs in full from A, which never had the writes;
/// 5. traffic on A, then B takes the slots again: A, now B's replica,
///    acknowledges offsets past the old ones.
///
/// Valkey's WAIT then answers 1 for a write that no node holds. ackgap's
/// dial reads the node's replication id before the write and after the
/// WAIT, sees it changed, and reports the enqueue unknown, not ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_s_wait_confirms_a_write_that_a_full_resync_discarded_and_the_dial_reports_it_unknown(
) {
    let server = Server::start(&"cluster:3x1".parse().unwrap(), Persistence::None)
        .await
        .expect("the cluster starts");
    let name = common::queue_name();
    let config = ackgap::queue::client::QueueConfig {
        durability: "wait:1:10000".parse().unwrap(),
        response_timeout: std::time::Duration::from_secs(30),
        ..Default::default()
    };
    let queue = Queue::connect_with(&server.client(), &name, config)
        .await
        .unwrap();
    let probe = format!("emq:{{{name}}}:probe");
    let (a, b) = shard_of(server.node_ports()[0], &probe).await;

    // 1. B takes over; A replicates it; the queue follows (its enqueue is
    // confirmed by A).
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query_async(&mut node(b).await)
        .await
        .unwrap();
    until("B is primary", || async {
        replication(b, "role").await == "master"
    })
    .await;
    until("A replicates B", || async {
        replication(a, "master_port").await == b.to_string()
            && replication(a, "master_link_status").await == "up"
    })
    .await;
    let opts = EnqueueOptions::default();
    assert_eq!(
        queue.enqueue("JOB-0", b"x", opts).await.unwrap(),
        Enqueued::Enqueued
    );

    // 2. B stopped; the writes wait in its sockets.
    let mut raw = node(b).await;
    let b_pid = pid_of(b).await;
    signal(&b_pid, "-STOP");
    let raw_write = tokio::spawn({
        let probe = probe.clone();
        async move {
            redis::pipe()
                .cmd("SET")
                .arg(&probe)
                .arg("v")
                .cmd("WAIT")
                .arg(1)
                .arg(0)
                .query_async::<(String, i64)>(&mut raw)
                .await
        }
    });
    let enqueue = tokio::spawn({
        let queue = queue.clone();
        async move { queue.enqueue("JOB-1", b"x", opts).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    // 3. A takes the slots back.
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("FORCE")
        .query_async(&mut node(a).await)
        .await
        .unwrap();
    until("A is primary", || async {
        replication(a, "role").await == "master"
    })
    .await;

    // 4. B resumes, runs the writes, learns of A, resyncs from it.
    signal(&b_pid, "-CONT");
    until("B replicates A", || async {
        replication(b, "master_port").await == a.to_string()
            && replication(b, "master_link_status").await == "up"
    })
    .await;

    // 5. Traffic on A, then B takes over again.
    let mut on_a = node(a).await;
    for i in 0..20 {
        let _: () = redis::cmd("SET")
            .arg(format!("emq:{{{name}}}:traffic{i}"))
            .arg("x".repeat(100))
            .query_async(&mut on_a)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query_async(&mut node(b).await)
        .await
        .unwrap();
    until("B is primary again", || async {
        replication(b, "role").await == "master"
    })
    .await;

    let (set, acks) = tokio::time::timeout(std::time::Duration::from_secs(20), raw_write)
        .await
        .expect("the raw WAIT answers once A acknowledges B")
        .unwrap()
        .expect("B ran the raw SET before it learned of A");
    let on_b: Option<String> = redis::cmd("GET")
        .arg(&probe)
        .query_async(&mut node(b).await)
        .await
        .unwrap();
    // Valkey's side: the write was acknowledged, WAIT counted a replica,
    // and the key is gone.
    assert_eq!(set, "OK");
    assert_eq!(acks, 1, "WAIT 1 0 answered {acks}");
    assert_eq!(on_b, None, "the probe survived: {on_b:?}");

    // ackgap's side: the same sequence under `wait:1` is unknown, and
    // says why.
    let outcome = enqueue.await.unwrap();
    match &outcome {
        Err(ackgap::queue::QueueError::Unknown { reason, .. }) => {
            assert!(reason.contains("replication id"), "{reason}")
        }
        other => panic!("the enqueue under wait:1 answered {other:?}"),
    }
    let snap = queue.snapshot().await.unwrap();
    assert!(!snap.rows.contains_key("JOB-1"), "{snap:?}");
    assert!(snap.rows.contains_key("JOB-0"), "{snap:?}");
    server.stop().await.unwrap();
}

/// Why every key of a reference queue exists from its first enqueue on
/// (`emq_keep` in `lua/prelude.lua`): during a classic migration
/// (`CLUSTER SETSLOT … MIGRATING/IMPORTING`, keys moved by `MIGRATE`) a
/// script that declares a key that exists and one that does not (Valkey
/// deletes an empty sorted set) is refused `TRYAGAIN` by the source before
/// a single key moved, and by the target after `ASKING` too: following
/// `ASK` could not help such a script while the slot migrates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_classic_migration_a_script_with_an_absent_key_gets_tryagain_on_both_nodes() {
    let server = Server::start(&"cluster:2x0".parse().unwrap(), Persistence::None)
        .await
        .expect("the cluster starts");
    let ports = server.node_ports();
    let key = "{q}:pending";
    let mut owner = None;
    for &port in &ports {
        let mut con = node(port).await;
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(key)
            .arg("x")
            .query_async(&mut con)
            .await;
        if set.is_ok() {
            owner = Some(port);
        }
    }
    let source = owner.expect("one node owns the slot");
    let target = *ports.iter().find(|&&p| p != source).unwrap();
    let (mut src, mut dst) = (node(source).await, node(target).await);
    let id = |con: &mut redis::aio::MultiplexedConnection| {
        let mut con = con.clone();
        async move {
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query_async::<String>(&mut con)
                .await
                .unwrap()
        }
    };
    let (src_id, dst_id) = (id(&mut src).await, id(&mut dst).await);
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut src)
        .await
        .unwrap();
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("IMPORTING")
        .arg(&src_id)
        .query_async(&mut dst)
        .await
        .unwrap();
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(&dst_id)
        .query_async(&mut src)
        .await
        .unwrap();
    let mut script = redis::cmd("EVAL");
    script
        .arg("return redis.call('GET', KEYS[1])")
        .arg(2)
        .arg(key)
        .arg("{q}:absent");
    let on_source: redis::RedisResult<redis::Value> = script.query_async(&mut src).await;
    assert_eq!(
        on_source.as_ref().err().and_then(|e| e.code()),
        Some("TRYAGAIN"),
        "{on_source:?}"
    );
    let on_target: redis::RedisResult<Vec<redis::Value>> = redis::pipe()
        .cmd("ASKING")
        .add_command(script.clone())
        .query_async(&mut dst)
        .await;
    let text = format!("{on_target:?}");
    assert!(text.contains("TryAgain"), "{text}");
    // The same script with the present key alone runs on the source.
    let mut alone = redis::cmd("EVAL");
    alone
        .arg("return redis.call('GET', KEYS[1])")
        .arg(1)
        .arg(key);
    let value: String = alone.query_async(&mut src).await.unwrap();
    assert_eq!(value, "x");
    server.stop().await.unwrap();
}

/// `INFO commandstats`' `calls` and `rejected_calls` of `command` on the
/// node at `port` (0 for a command it never saw).
async fn command_calls(port: u16, command: &str) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut node(port).await)
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find(|l| l.starts_with(&prefix)) else {
        return (0, 0);
    };
    let field = |name: &str| {
        line[prefix.len()..]
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    (field("calls"), field("rejected_calls"))
}

/// The queue's client follows `ASK`: once a classic migration has moved
/// the queue's keys (the slot still `MIGRATING` on its owner), an enqueue
/// sent to the owner is answered `ASK`, and the client sends it to the
/// importing node after `ASKING` (one `ASKING` there, the `FCALL` run
/// there, the owner's `FCALL` counted once, rejected) instead of sending
/// it to the owner again or failing. When the migration ends, the queue
/// holds both jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_is_answered_by_asking_on_the_importing_node_not_by_resending_to_the_source() {
    let server = Server::start(&"cluster:2x0".parse().unwrap(), Persistence::None)
        .await
        .expect("the cluster starts");
    let name = common::queue_name();
    let queue = Queue::connect(&server.client(), &name).await.unwrap();
    let opts = EnqueueOptions::default();
    assert_eq!(
        queue.enqueue("JOB-1", b"x", opts).await.unwrap(),
        Enqueued::Enqueued
    );
    let key = queue.keys().pending.clone();
    let ports = server.node_ports();
    let mut source = None;
    for &port in &ports {
        let n: u64 = redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(
                redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(&key)
                    .query_async::<u64>(&mut node(port).await)
                    .await
                    .unwrap(),
            )
            .query_async(&mut node(port).await)
            .await
            .unwrap();
        if n > 0 {
            source = Some(port);
        }
    }
    let source = source.expect("one node holds the queue's keys");
    let target = *ports.iter().find(|&&p| p != source).unwrap();
    let mut src = node(source).await;
    let myid = |port: u16| async move {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query_async::<String>(&mut node(port).await)
            .await
            .unwrap()
    };
    let (src_id, dst_id) = (myid(source).await, myid(target).await);
    let slot: u64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query_async(&mut src)
        .await
        .unwrap();
    let setslot = |port: u16, args: [String; 2]| async move {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(&args)
            .query_async::<()>(&mut node(port).await)
            .await
            .unwrap()
    };
    setslot(target, ["IMPORTING".into(), src_id.clone()]).await;
    setslot(source, ["MIGRATING".into(), dst_id.clone()]).await;
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query_async(&mut src)
        .await
        .unwrap();
    assert_eq!(keys.len(), 4, "every key of the queue exists: {keys:?}");
    let _: redis::Value = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&keys)
        .query_async(&mut src)
        .await
        .unwrap();
    let src_before = command_calls(source, "fcall").await;
    let dst_before = (
        command_calls(target, "asking").await,
        command_calls(target, "fcall").await,
    );
    assert_eq!(
        queue.enqueue("JOB-2", b"y", opts).await.unwrap(),
        Enqueued::Enqueued
    );
    let src_after = command_calls(source, "fcall").await;
    let dst_after = (
        command_calls(target, "asking").await,
        command_calls(target, "fcall").await,
    );
    // The owner saw the enqueue once and refused it (ASK); the importing
    // node ran it, after one ASKING.
    assert_eq!(src_after.0, src_before.0, "the owner ran an FCALL");
    assert_eq!(
        src_after.1,
        src_before.1 + 1,
        "{src_before:?} → {src_after:?}"
    );
    assert_eq!(
        dst_after.0 .0,
        dst_before.0 .0 + 1,
        "{dst_before:?} → {dst_after:?}"
    );
    assert_eq!(
        dst_after.1 .0,
        dst_before.1 .0 + 1,
        "{dst_before:?} → {dst_after:?}"
    );
    // The migration has not ended: the owner still marks the slot
    // migrating to the target.
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut src)
        .await
        .unwrap();
    let marker = format!("[{slot}->-{dst_id}]");
    assert!(
        nodes
            .lines()
            .any(|l| l.contains("myself") && l.contains(&marker)),
        "{marker} not in {nodes}"
    );
    setslot(target, ["NODE".into(), dst_id.clone()]).await;
    setslot(source, ["NODE".into(), dst_id.clone()]).await;
    let snap = queue.snapshot().await.unwrap();
    assert!(snap.rows.contains_key("JOB-1"), "{snap:?}");
    assert!(snap.rows.contains_key("JOB-2"), "{snap:?}");
    server.stop().await.unwrap();
}
