//! Credentials on every path: against a server that demands a password
//! (or an ACL user), every connection a command opens — the chaos
//! runner's workers through the fault proxy and their reconnects after a
//! reset or a partition, the producers, the reaper, the final read — carries
//! the URL's credentials, so a correct queue passes; a refusal of access
//! (a wrong password, a user without a permission the run needs) stops the
//! command with exit 69 and a clear message, never a verdict about the
//! queue; and the password appears in no output, file or reproduce line.
//!
//! Server errors named: a run over `maxmemory` counts its errors by kind
//! (`OOM`, with the first example and the operations it hit) and reads
//! the server's own account (`INFO`: evicted keys, error replies, the
//! memory policy), whose line names the cause of the lost jobs — the
//! verdict stays invalid.
//!
//! Each test starts an embedded Valkey (the password run: Redis 7.0 too),
//! then locks it with `CONFIG SET requirepass` and `ACL SETUSER` through
//! the connection it already holds.

// The server matrix; only `start` is used here.
use crate::common;

use std::path::Path;
use std::process::Output;

use crate::common::ackgap_env;
use crate::common::text;
use ackgap::chaos::runner::{self, ChaosConfig, ChaosReport};
use ackgap::check::Verdict;
use ackgap::server::{Persistence, Server};
use common::Backend;

/// The password of the default user.
const PASSWORD: &str = "s3cret-default";
/// The ACL user's name and password.
const USER: &str = "runner";
const USER_PASSWORD: &str = "s3cret-runner";

/// An embedded Valkey whose default user needs [`PASSWORD`], with `acl`
/// as the ACL rules of the user [`USER`] (none when empty). Dropping the
/// server kills it.
async fn locked_server(acl: &[&str]) -> Option<Server> {
    locked_server_on(Backend::Valkey, acl).await
}

/// [`locked_server`] on `backend`.
async fn locked_server_on(backend: Backend, acl: &[&str]) -> Option<Server> {
    let server = common::start(backend, Persistence::None).await?;
    let mut con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect before the password is set");
    if !acl.is_empty() {
        let mut setuser = redis::cmd("ACL");
        setuser
            .arg("SETUSER")
            .arg(USER)
            .arg("on")
            .arg(format!(">{USER_PASSWORD}"));
        setuser.arg(acl);
        setuser
            .query_async::<()>(&mut con)
            .await
            .expect("ACL SETUSER");
    }
    redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", PASSWORD])
        .query_async::<()>(&mut con)
        .await
        .expect("CONFIG SET requirepass");
    Some(server)
}

fn default_url(server: &Server, password: &str) -> String {
    format!("redis://:{password}@127.0.0.1:{}/", server.port())
}

fn user_url(server: &Server) -> String {
    format!(
        "redis://{USER}:{USER_PASSWORD}@127.0.0.1:{}/",
        server.port()
    )
}

/// `ackgap chaos` on `url` with worker and network faults (resets and
/// partitions make the workers reconnect through the proxy), as JSON.
fn chaos(url: &str, history: &Path) -> Output {
    ackgap_env(
        &[
            "chaos",
            "--seed",
            "3",
            "--duration",
            "3s",
            "--jobs",
            "40",
            "--faults",
            "worker,network,script-flush",
            "--server",
            url,
            "--queue-name",
            &format!("auth-{}", std::process::id()),
            "--history",
            history.to_str().unwrap(),
            "--json",
        ],
        &[],
    )
}

/// Asserts a chaos run exited 0 with every invariant valid, every network
/// fault fired, and no password in its output or files.
fn assert_valid_without_secrets(out: &Output, history: &Path, secrets: &[&str]) {
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["verdict"], "valid", "{report:#}");
    for inv in report["invariants"].as_array().unwrap() {
        // Each answered lease reads the server's time after it (through
        // the same proxy): lease-exclusive judges them. A seed may
        // announce no ready time: delay-respected is then not exercised,
        // and says so (unknown).
        if inv["invariant"] == "lease-exclusive" {
            assert!(inv["counts"]["judged"].as_u64() > Some(0), "{inv:#}");
        }
        if inv["invariant"] == "delay-respected" && inv["verdict"] == "unknown" {
            assert_eq!(inv["counts"]["judged"], 0, "{inv:#}");
            continue;
        }
        assert_eq!(inv["verdict"], "valid", "{inv:#}");
    }
    for kind in ["reset-connection", "partition"] {
        assert!(
            report["fired"][kind].as_u64() >= Some(1),
            "{kind} never fired: {report:#}"
        );
    }
    assert!(
        report["replay"]
            .as_str()
            .unwrap()
            .contains("--server \"$ACKGAP_SERVER\""),
        "{}",
        report["replay"]
    );
    let mut files = vec![history.to_path_buf()];
    for ext in ["json", "txt", "html"] {
        let f = history.with_extension(ext);
        if f.exists() {
            files.push(f);
        }
    }
    for secret in secrets {
        assert!(!text(out).contains(secret), "the output shows {secret}");
        for f in &files {
            let content = std::fs::read_to_string(f).unwrap();
            assert!(!content.contains(secret), "{} shows {secret}", f.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chaos_run_under_a_password_holds_every_invariant_and_never_shows_it() {
    password_run(Backend::Valkey).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chaos_run_under_a_password_holds_every_invariant_on_redis7_too() {
    password_run(Backend::Redis7).await;
}

async fn password_run(backend: Backend) {
    let Some(server) = locked_server_on(backend, &[]).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("password.jsonl");
    let out = chaos(&default_url(&server, PASSWORD), &history);
    assert_valid_without_secrets(&out, &history, &[PASSWORD]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chaos_run_as_an_acl_user_holds_every_invariant_and_never_shows_the_password() {
    let Some(server) = locked_server(&["~*", "+@all"]).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("acl.jsonl");
    let out = chaos(&user_url(&server), &history);
    assert_valid_without_secrets(&out, &history, &[USER_PASSWORD]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_exits_69_naming_the_refusal_without_showing_it() {
    let Some(server) = locked_server(&[]).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("wrong.jsonl");
    let out = chaos(&default_url(&server, "not-the-password"), &history);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    assert!(
        text(&out).contains("refused the credentials"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("not-the-password"), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_run_scripts_stops_the_chaos_run_with_69_and_no_verdict() {
    // SCAN and DEL pass, so the queue is cleared; the first script call
    // of every producer and worker is refused with NOPERM.
    let Some(server) = locked_server(&["~*", "+@all", "-evalsha", "-eval"]).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("noperm.jsonl");
    let out = chaos(&user_url(&server), &history);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out));
    let shown = text(&out);
    assert!(shown.contains("NOPERM"), "{shown}");
    assert!(shown.contains("without a verdict"), "{shown}");
    assert!(!shown.contains("no-loss"), "a verdict was printed: {shown}");
    assert!(!shown.contains(USER_PASSWORD), "{shown}");
}

/// `ackgap chaos`, `explore` and `run` as the ACL user of `server`, each
/// answered: (the command, its output).
fn chaos_explore_run(server: &Server) -> Vec<(&'static str, Output)> {
    let url = user_url(server);
    let queue = format!("refused-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let (chaos, run) = (dir.path().join("chaos.jsonl"), dir.path().join("run.jsonl"));
    let (chaos, run) = (chaos.to_str().unwrap(), run.to_str().unwrap());
    let common = ["--server", &url, "--queue-name", &queue];
    let commands: [(&str, Vec<&str>); 3] = [
        (
            "chaos",
            vec![
                "chaos",
                "--duration",
                "1s",
                "--jobs",
                "10",
                "--faults",
                "worker",
                "--history",
                chaos,
            ],
        ),
        ("explore", vec!["explore", "--seed", "1", "--steps", "30"]),
        (
            "run",
            vec!["run", "--seeds", "1", "--steps", "20", "--history", run],
        ),
    ];
    commands
        .into_iter()
        .map(|(name, mut args)| {
            args.extend(common);
            (name, ackgap_env(&args, &[]))
        })
        .collect()
}

/// Asserts `out` stopped with 69, showing the server's refusal of
/// `command` and no verdict.
fn assert_refused(name: &str, out: &Output, command: &str) {
    let shown = text(out);
    assert_eq!(out.status.code(), Some(69), "{name}: {shown}");
    assert!(
        shown.contains(&format!("no permissions to run the '{command}' command"))
            || shown.contains("The user executing the script can't run this command"),
        "{name}: {shown}"
    );
    assert!(
        !shown.contains("verdict: "),
        "{name} printed a verdict: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_refused_zrem_inside_the_scripts_stops_chaos_explore_and_run_with_69_on_valkey_and_redis7(
) {
    for backend in [Backend::Valkey, Backend::Redis7] {
        let Some(server) = locked_server_on(backend, &["~*", "+@all", "-zrem"]).await else {
            continue;
        };
        for (name, out) in chaos_explore_run(&server) {
            assert_refused(name, &out, "zrem");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_refused_time_gives_no_verdict_from_chaos_or_run_on_valkey_and_redis7() {
    for backend in [Backend::Valkey, Backend::Redis7] {
        let Some(server) = locked_server_on(backend, &["~*", "+@all", "-time"]).await else {
            continue;
        };
        for (name, out) in chaos_explore_run(&server) {
            if name == "explore" {
                // explore runs the scripts on its own logical clock and
                // never calls TIME: it judges the queue, and truly.
                assert_eq!(out.status.code(), Some(0), "{}", text(&out));
            } else {
                assert_refused(name, &out, "time");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chaos_run_where_no_enqueue_is_acknowledged_is_not_valid() {
    let Some(server) = common::start(Backend::Valkey, Persistence::None).await else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}/", server.port());
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let history = dir.path().join(format!("{name}.jsonl"));
        let args = [
            "chaos",
            "--duration",
            "1s",
            "--jobs",
            "10",
            "--faults",
            "worker",
        ];
        ackgap_env(
            &[
                &args[..],
                &["--server", &url, "--queue-name", name, "--json"],
            ]
            .concat()
            .into_iter()
            .chain(["--history", history.to_str().unwrap()])
            .collect::<Vec<_>>(),
            &[],
        )
    };
    // A first run loads the scripts; then a memory limit of one byte makes
    // the server refuse every enqueue with OOM (reads still pass).
    assert_eq!(run("warm").status.code(), Some(0));
    let mut con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("CONFIG")
        .arg(&["SET", "maxmemory", "1"])
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    let out = run("starved");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["verdict"], "unknown", "{report:#}");
    let no_loss = &report["invariants"][0];
    assert_eq!(no_loss["invariant"], "no-loss");
    assert_eq!(no_loss["verdict"], "unknown");
    assert_eq!(no_loss["counts"]["judged"], 0, "{no_loss:#}");
}

/// The other commands that talk to a server, on a password URL: each
/// exits 0 and never shows the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_run_deliveries_and_bench_pass_under_a_password() {
    let Some(server) = locked_server(&[]).await else {
        return;
    };
    let url = default_url(&server, PASSWORD);
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("run.jsonl");
    let commands: [Vec<&str>; 4] = [
        vec!["explore", "--seed", "2", "--steps", "30", "--server", &url],
        vec![
            "run",
            "--seeds",
            "1",
            "--steps",
            "20",
            "--server",
            &url,
            "--history",
            history.to_str().unwrap(),
        ],
        vec!["deliveries", "--times", "3", "--server", &url],
        vec![
            "bench",
            "--only",
            "drain (complete + lease next",
            "--jobs",
            "100",
            "--rounds",
            "1",
            "--server",
            &url,
        ],
    ];
    for args in commands {
        let out = ackgap_env(&args, &[]);
        assert_eq!(out.status.code(), Some(0), "{}: {}", args[0], text(&out));
        assert!(
            !text(&out).contains(PASSWORD),
            "{}: {}",
            args[0],
            text(&out)
        );
    }
}

// ------------------------------------------------ server errors named

/// A chaos run of 4,000 jobs, no faults, on an embedded Valkey whose
/// memory limit is 512 KiB above what it uses empty, under `policy`: the
/// backlog outgrows it within the run.
///
/// The queue's function library is loaded before the limit is measured:
/// `FUNCTION LOAD` is refused under OOM, and on a loaded machine the
/// backlog could fill the 512 KiB before the run's first call loaded it,
/// so that every call of the run failed (`Function not found`, then the
/// load refused) and the final read too.
async fn chaos_over_maxmemory(policy: &str) -> Option<ChaosReport> {
    let mut server = common::start(Backend::Valkey, Persistence::None).await?;
    ackgap::queue::Queue::connect(&server.client(), "ackgap-chaos")
        .await
        .expect("the queue opens")
        .snapshot()
        .await
        .expect("the first call loads the library");
    let mut con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut con)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("used_memory:"))
        .and_then(|n| n.parse().ok())
        .expect("used_memory in INFO memory");
    for (name, value) in [
        ("maxmemory", (used + 512 * 1024).to_string()),
        ("maxmemory-policy", policy.to_string()),
    ] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async::<()>(&mut con)
            .await
            .unwrap();
    }
    let cfg = ChaosConfig {
        duration_ms: 3_000,
        jobs: 4_000,
        workers: 8,
        faults: "none".parse().unwrap(),
        queue_name: common::queue_name(),
        // The jobs stuck behind a full memory never drain; liveness is not
        // what these tests check.
        drain_ms_max: Some(5_000),
        ..ChaosConfig::new(5)
    };
    let report = runner::run(&mut server, cfg, None, None)
        .await
        .expect("the run completes");
    Some(report)
}

/// `2432` → `2,432`, as the report writes counts.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// How the account's lines count the jobs lost.
fn lost_text(report: &ChaosReport) -> String {
    match report.lost.len() {
        0 => "no acknowledged job lost".to_string(),
        1 => "1 job lost".to_string(),
        n => format!("{} jobs lost", thousands(n as u64)),
    }
}

fn verdict_of(report: &ChaosReport, invariant: &str) -> Verdict {
    report
        .invariants
        .iter()
        .find(|r| r.invariant == invariant)
        .map(|r| r.verdict)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_noeviction_the_oom_refusals_are_counted_by_kind_and_named_as_the_cause() {
    let Some(report) = chaos_over_maxmemory("noeviction").await else {
        return;
    };
    let oom = &report.errors["OOM"];
    assert!(oom.count > 0, "{:#?}", report.errors);
    assert!(oom.first.contains("server error OOM"), "{}", oom.first);
    assert_eq!(oom.by_op.values().sum::<u64>(), oom.count);
    let server = report.server.as_ref().expect("the server's account");
    assert!(server.error_replies["OOM"] >= oom.count, "{server:#?}");
    assert_eq!(server.maxmemory_policy, "noeviction");
    // The verdict stays what the checkers say; the cause is named beside
    // it, with the count of jobs lost.
    assert_eq!(
        verdict_of(&report, "no-loss") == Verdict::Invalid,
        !report.lost.is_empty()
    );
    let line = format!(
        "{}; the server refused {} calls with OOM",
        lost_text(&report),
        thousands(server.error_replies["OOM"])
    );
    assert!(
        server.explains.iter().any(|l| l.starts_with(&line)),
        "{line}\n{:#?}",
        server.explains
    );
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["errors"]["OOM"]["count"].as_u64() > Some(0));
    assert!(json["server"]["explains"][0]
        .as_str()
        .unwrap()
        .contains("OOM"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_allkeys_lru_the_evictions_are_named_as_the_cause_of_the_lost_jobs() {
    let Some(report) = chaos_over_maxmemory("allkeys-lru").await else {
        return;
    };
    let server = report.server.as_ref().expect("the server's account");
    assert!(server.evicted_keys > 0, "{server:#?}");
    assert_eq!(server.maxmemory_policy, "allkeys-lru");
    assert_eq!(
        verdict_of(&report, "no-loss") == Verdict::Invalid,
        !report.lost.is_empty()
    );
    let line = format!(
        "{}; the server evicted {} keys",
        lost_text(&report),
        thousands(server.evicted_keys)
    );
    assert!(
        server
            .explains
            .iter()
            .any(|l| l.starts_with(&line) && l.contains("allkeys-lru")),
        "{line}\n{:#?}",
        server.explains
    );
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["server"]["evicted_keys"].as_u64() > Some(0));
}

/// Sets `maxmemory` of `server` to 512 KiB above what it uses now, under
/// `policy`.
async fn limit_memory(server: &Server, policy: &str) {
    let mut con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut con)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("used_memory:"))
        .and_then(|n| n.parse().ok())
        .expect("used_memory in INFO memory");
    for (name, value) in [
        ("maxmemory", (used + 512 * 1024).to_string()),
        ("maxmemory-policy", policy.to_string()),
    ] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async::<()>(&mut con)
            .await
            .unwrap();
    }
}

/// Under `noeviction` the backlog fills the memory and the server refuses
/// every write (OOM), so no job can finish: the drain stops once every call
/// of a stretch was refused for that one cause, and says so, instead of
/// waiting its whole bound; the jobs it leaves are reported stranded
/// (intact in pending), apart from absent ones (none here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_noeviction_the_drain_stops_early_with_the_reason_and_the_jobs_are_stranded_not_absent(
) {
    let Some(server) = common::start(Backend::Valkey, Persistence::None).await else {
        return;
    };
    // A first run loads the scripts before the memory is limited.
    let url = server.url();
    let queue = common::queue_name();
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("oom.jsonl");
    let warm = ackgap_env(
        &[
            "chaos",
            "--duration",
            "1s",
            "--jobs",
            "10",
            "--faults",
            "none",
            "--server",
            &url,
            "--queue-name",
            &queue,
            "--json",
        ],
        &[],
    );
    assert_eq!(warm.status.code(), Some(0), "{}", text(&warm));
    limit_memory(&server, "noeviction").await;
    let out = ackgap_env(
        &[
            "chaos",
            "--duration",
            "3s",
            "--jobs",
            "4000",
            "--workers",
            "8",
            "--faults",
            "none",
            "--server",
            &url,
            "--queue-name",
            &queue,
            "--history",
            history.to_str().unwrap(),
        ],
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(history.with_extension("json")).unwrap())
            .expect("the summary");
    let stalled = summary["drain_stalled"]
        .as_str()
        .unwrap_or_else(|| panic!("the drain did not stop early: {}", text(&out)));
    assert!(
        stalled.contains("was refused by the server with OOM"),
        "{stalled}"
    );
    assert!(
        stdout.contains(&format!("drain stopped early: {stalled}")),
        "{stdout}"
    );
    // It stopped before the bound it would otherwise have waited.
    let drain_ms = summary["phases"]["drain_ms"].as_u64().unwrap();
    let wait_ms = summary["liveness_bound"]["wait_ms"].as_u64().unwrap();
    assert!(
        drain_ms < wait_ms,
        "drain {drain_ms} ms, bound {wait_ms} ms"
    );
    let liveness = summary["invariants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["invariant"] == "liveness")
        .unwrap();
    assert_eq!(liveness["verdict"], "unknown", "{liveness:#}");
    let no_loss = &summary["invariants"][0];
    assert_eq!(no_loss["invariant"], "no-loss");
    let stranded = no_loss["counts"]["stranded"].as_u64().unwrap_or(0);
    assert!(stranded > 0, "{no_loss:#}");
    assert_eq!(
        no_loss["counts"]["absent"].as_u64().unwrap_or(0),
        0,
        "{no_loss:#}"
    );
    assert!(
        stdout.contains(&format!(
            "{stranded} stranded (still pending or active: the queue holds them intact), 0 absent"
        )),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

// ------------------------------------------------------ liveness bound

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_that_outlasts_15_s_drains_within_the_bound_derived_from_the_run() {
    // Two workers settle about 16 jobs/s (each job works up to a quarter
    // of a second); 400 jobs arrive in 3.4 s, so about 340 wait at the
    // heal: some 20 s of draining, past the old fixed 15 s bound.
    let Some(mut server) = common::start(Backend::Valkey, Persistence::None).await else {
        return;
    };
    let cfg = ChaosConfig {
        duration_ms: 4_000,
        jobs: 400,
        workers: 2,
        faults: "none".parse().unwrap(),
        queue_name: common::queue_name(),
        ..ChaosConfig::new(8)
    };
    let report = runner::run(&mut server, cfg, None, None)
        .await
        .expect("the run completes");
    let liveness = report
        .invariants
        .iter()
        .find(|r| r.invariant == "liveness")
        .unwrap();
    assert_eq!(liveness.verdict, Verdict::Valid, "{liveness:#?}");
    assert_eq!(report.verdict, Verdict::Valid);
    let bound = &report.liveness_bound;
    let backlog = bound.backlog.expect("the backlog at the heal was read");
    let rate = bound.rate_per_s.expect("a rate was measured");
    assert_eq!(liveness.counts["backlog_at_heal"], backlog);
    // The bound is what its derivation says, and covers the drain.
    let predicted_ms = (backlog as f64 / rate * 1000.0).ceil() as u64;
    assert_eq!(
        bound.bound_ms,
        Some(runner::MARGIN * predicted_ms + runner::floor_ms(500, None))
    );
    assert!(report.phases.drain_ms <= bound.bound_ms.unwrap());
    assert!(
        bound.derivation.contains("jobs unfinished at the heal")
            && bound.derivation.contains("no fault was injected"),
        "{}",
        bound.derivation
    );
}

#[test]
fn drain_ms_max_overrides_the_derived_bound_and_is_in_the_reproduce_line() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("bound.jsonl");
    let out = ackgap_env(
        &[
            "chaos",
            "--duration",
            "1s",
            "--jobs",
            "10",
            "--faults",
            "none",
            "--drain-ms-max",
            "20000",
            "--history",
            history.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["liveness_bound"]["bound_ms"], 20_000);
    assert_eq!(
        report["liveness_bound"]["derivation"],
        "20,000 ms, set by --drain-ms-max"
    );
    assert!(
        report["replay"]
            .as_str()
            .unwrap()
            .ends_with("--drain-ms-max 20000"),
        "{}",
        report["replay"]
    );
}
