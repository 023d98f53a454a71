//! The reference queue against real servers: every outcome of every script,
//! stated as claims. Each test runs on Valkey 9.1, Redis 7.0 and the
//! container (see `common`).

use crate::common; // the server matrix and the `matrix!` macro

use std::time::Duration;

use ackgap::queue::client::{EnqueueOptions, QueueConfig};
use ackgap::queue::{Enqueued, Extended, Failed, JobState, Queue, QueueError, Settled, Snapshot};
use ackgap::server::Persistence;
use common::{Backend, Ctx};

/// A raw script call: the operation, the job id for its keys, the ARGV.
type RawCall<'a> = (&'static str, Vec<&'a [u8]>);

const OPTS: EnqueueOptions = EnqueueOptions {
    max_attempts: 3,
    delay_ms: 0,
};

/// Snapshots the queue and asserts its structure invariant.
async fn snap(q: &Queue) -> Snapshot {
    let s = q.snapshot().await.expect("snapshot");
    assert_eq!(
        s.structure_problems(),
        Vec::<String>::new(),
        "structure broken: {s:#?}"
    );
    s
}

matrix!(
    enqueue_admits_a_job_and_a_duplicate_is_refused_changing_nothing,
    a_non_job_id_is_refused_with_emqkind_and_writes_nothing,
    bad_arguments_are_refused_with_emqarg_and_write_nothing,
    lease_takes_the_ready_job_with_the_lowest_score_and_its_attempts_are_the_token,
    lease_answers_nothing_when_no_job_is_ready,
    a_lease_on_the_server_clock_ends_lease_ms_after_server_time,
    complete_settles_the_current_lease,
    a_repeated_ack_answers_already_settled,
    a_stale_token_is_refused_and_changes_nothing,
    settling_a_job_that_does_not_exist_answers_missing,
    fail_requeues_the_job_after_the_retry_delay,
    fail_on_the_last_attempt_sends_the_job_to_dead,
    extend_moves_the_deadline_and_is_fenced_once_the_lease_is_gone,
    the_reaper_never_takes_a_lease_whose_deadline_has_not_passed,
    max_attempts_sends_a_reaped_job_to_dead,
    the_client_reloads_its_library_after_function_flush,
    the_client_reloads_its_scripts_after_a_server_restart,
    a_request_that_times_out_is_an_unknown_outcome_not_a_refusal,
    the_smoke_campaign_holds_every_invariant,
);

async fn enqueue_admits_a_job_and_a_duplicate_is_refused_changing_nothing(c: Ctx) {
    let q = c.queue.at(1_000);
    assert_eq!(
        q.enqueue("JOB-1", b"first", OPTS).await.unwrap(),
        Enqueued::Enqueued
    );
    let before = common::keyspace(&q).await;
    let again = EnqueueOptions {
        max_attempts: 9,
        delay_ms: 5,
    };
    assert_eq!(
        q.at(2_000)
            .enqueue("JOB-1", b"second", again)
            .await
            .unwrap(),
        Enqueued::Duplicate
    );
    assert_eq!(
        common::keyspace(&q).await,
        before,
        "a duplicate enqueue wrote something"
    );
    let s = snap(&q).await;
    assert_eq!(s.rows["JOB-1"].payload, b"first");
    assert_eq!(s.rows["JOB-1"].state, Some(JobState::Pending));
    assert_eq!(s.rows["JOB-1"].attempts, 0);
    assert_eq!(s.pending["JOB-1"], 1_000);
}

async fn a_non_job_id_is_refused_with_emqkind_and_writes_nothing(c: Ctx) {
    let q = c.queue.at(1_000);
    q.enqueue("JOB-ok", b"x", OPTS).await.unwrap();
    let lease = q.lease("w1", 100).await.unwrap().unwrap();
    let before = common::keyspace(&q).await;
    for id in ["job-1", "42", "", "JO", "xJOB"] {
        let e = q.enqueue(id, b"x", OPTS).await.unwrap_err();
        assert!(matches!(e, QueueError::Kind { .. }), "enqueue {id:?}: {e}");
        assert!(e.to_string().contains("EMQKIND"), "{e}");
        let e = q.complete(id, lease.token).await.unwrap_err();
        assert!(matches!(e, QueueError::Kind { .. }), "complete {id:?}: {e}");
        let e = q.fail(id, lease.token, 0).await.unwrap_err();
        assert!(matches!(e, QueueError::Kind { .. }), "fail {id:?}: {e}");
        let e = q.extend(id, lease.token, 10).await.unwrap_err();
        assert!(matches!(e, QueueError::Kind { .. }), "extend {id:?}: {e}");
    }
    assert_eq!(
        common::keyspace(&q).await,
        before,
        "a refused call wrote something"
    );
}

async fn bad_arguments_are_refused_with_emqarg_and_write_nothing(c: Ctx) {
    let q = c.queue.at(1_000);
    q.enqueue("JOB-a", b"x", OPTS).await.unwrap();
    q.enqueue("JOB-b", b"x", OPTS).await.unwrap();
    let lease = q.lease("w1", 100).await.unwrap().unwrap();
    let token = lease.token.to_string();
    let id = lease.id.as_str();
    let before = common::keyspace(&q).await;
    let cases: Vec<RawCall> = vec![
        ("enqueue", vec![b"JOB-n", b"p", b"abc", b"0", b""]),
        ("enqueue", vec![b"JOB-n", b"p", b"0", b"0", b""]),
        ("enqueue", vec![b"JOB-n", b"p", b"3", b"-5", b""]),
        ("enqueue", vec![b"JOB-n", b"p", b"3", b"1.5", b""]),
        ("enqueue", vec![b"JOB-n", b"p", b"3", b"0", b"-1"]),
        ("enqueue", vec![b"JOB-n"]),
        ("lease", vec![b"w1", b"0", b""]),
        ("lease", vec![b"w1", b"-100", b""]),
        ("lease", vec![b"w1", b"soon", b""]),
        ("lease", vec![b"w1", b"99999999999999999999", b""]),
        ("lease", vec![b"", b"100", b""]),
        ("complete", vec![id.as_bytes(), b"0"]),
        ("complete", vec![id.as_bytes(), b"one"]),
        ("fail", vec![id.as_bytes(), token.as_bytes(), b"-1", b""]),
        ("fail", vec![id.as_bytes(), token.as_bytes(), b"", b""]),
        ("extend", vec![id.as_bytes(), token.as_bytes(), b"0", b""]),
        ("extend", vec![id.as_bytes(), token.as_bytes(), b"1e3", b""]),
        ("reap", vec![b"0", b""]),
        ("reap", vec![b"10", b"yesterday"]),
    ];
    for (op, args) in cases {
        let e = q.call_raw(op, &args).await.unwrap_err();
        assert!(
            matches!(e, QueueError::BadArgument { .. }),
            "{op} {args:?}: expected EMQARG, got {e}"
        );
    }
    assert_eq!(
        common::keyspace(&q).await,
        before,
        "a refused call wrote something"
    );
}

async fn lease_takes_the_ready_job_with_the_lowest_score_and_its_attempts_are_the_token(c: Ctx) {
    let q = c.queue.at(1_000);
    let later = EnqueueOptions {
        max_attempts: 3,
        delay_ms: 50,
    };
    q.enqueue("JOB-late", b"l", later).await.unwrap();
    q.enqueue("JOB-b", b"b", OPTS).await.unwrap();
    q.enqueue("JOB-a", b"a", OPTS).await.unwrap();
    let first = q.lease("w1", 100).await.unwrap().unwrap();
    assert_eq!(
        (first.id.as_str(), first.token, first.deadline_ms),
        ("JOB-a", 1, 1_100)
    );
    assert_eq!(first.payload, b"a");
    let second = q.lease("w2", 100).await.unwrap().unwrap();
    assert_eq!(second.id, "JOB-b", "equal scores are taken in id order");
    assert_eq!(
        q.lease("w3", 100).await.unwrap(),
        None,
        "JOB-late is not ready at 1000"
    );
    let late = q.at(1_050).lease("w3", 100).await.unwrap().unwrap();
    assert_eq!(late.id, "JOB-late");
    let s = snap(&q).await;
    assert_eq!(s.rows["JOB-a"].worker.as_deref(), Some("w1"));
    assert_eq!(s.active["JOB-a"], 1_100);
    // A second lease of the same job carries the next token.
    q.reap(10).await.unwrap();
    assert_eq!(q.at(1_100).reap(10).await.unwrap().len(), 2);
    let again = q.at(1_100).lease("w4", 100).await.unwrap().unwrap();
    assert_eq!((again.id.as_str(), again.token), ("JOB-a", 2));
}

async fn lease_answers_nothing_when_no_job_is_ready(c: Ctx) {
    let q = c.queue.at(1_000);
    assert_eq!(q.lease("w1", 100).await.unwrap(), None);
    let delayed = EnqueueOptions {
        max_attempts: 3,
        delay_ms: 10,
    };
    q.enqueue("JOB-1", b"", delayed).await.unwrap();
    assert_eq!(q.at(1_009).lease("w1", 100).await.unwrap(), None);
    assert!(q.at(1_010).lease("w1", 100).await.unwrap().is_some());
}

async fn a_lease_on_the_server_clock_ends_lease_ms_after_server_time(c: Ctx) {
    let q = c.queue.on_server_clock();
    q.enqueue("JOB-1", b"", OPTS).await.unwrap();
    let t0 = q.server_time_ms().await.unwrap();
    let lease = q.lease("w1", 60_000).await.unwrap().unwrap();
    let t1 = q.server_time_ms().await.unwrap();
    assert!(
        (t0 + 60_000..=t1 + 60_000).contains(&lease.deadline_ms),
        "deadline {} not within [{}, {}]",
        lease.deadline_ms,
        t0 + 60_000,
        t1 + 60_000
    );
}

async fn complete_settles_the_current_lease(c: Ctx) {
    let q = c.queue.at(1_000);
    q.enqueue("JOB-1", b"", OPTS).await.unwrap();
    let l = q.lease("w1", 100).await.unwrap().unwrap();
    assert_eq!(q.complete(&l.id, l.token).await.unwrap(), Settled::Settled);
    let s = snap(&q).await;
    assert_eq!(s.rows["JOB-1"].state, Some(JobState::Done));
    assert!(s.done.contains("JOB-1") && s.active.is_empty());
    assert_eq!(
        q.lease("w2", 100).await.unwrap(),
        None,
        "a done job is never leased again"
    );
}

async fn a_repeated_ack_answers_already_settled(c: Ctx) {
    let q = c.queue.at(1_000);
    q.enqueue("JOB-1", b"", OPTS).await.unwrap();
    let l = q.lease("w1", 100).await.unwrap().unwrap();
    q.complete(&l.id, l.token).await.unwrap();
    let before = common::keyspace(&q).await;
    assert_eq!(
        q.complete(&l.id, l.token).await.unwrap(),
        Settled::AlreadySettled
    );
    assert_eq!(common::keyspace(&q).await, before);
}

async fn a_stale_token_is_refused_and_changes_nothing(c: Ctx) {
    let q = c.queue.at(1_000);
    q.enqueue("JOB-1", b"", OPTS).await.unwrap();
    let stale = q.lease("w1", 100).await.unwrap().unwrap();
    q.at(1_100).reap(10).await.unwrap();
    let fresh = q.at(1_100).lease("w2", 100).await.unwrap().unwrap();
    assert_eq!(fresh.token, stale.token + 1);
    let before = common::keyspace(&q).await;
    let fenced = Settled::Fenced {
        current: fresh.token,
        state: JobState::Active,
    };
    assert_eq!(q.complete("JOB-1", stale.token).await.unwrap(), fenced);
    assert!(matches!(
        q.fail("JOB-1", stale.token, 0).await.unwrap(),
        Failed::Fenced {
            current: 2,
            state: JobState::Active
        }
    ));
    assert!(matches!(
        q.extend("JOB-1", stale.token, 1_000).await.unwrap(),
        Extended::Fenced { current: 2, .. }
    ));
    // A token from the future is refused too.
    assert!(matches!(
        q.complete("JOB-1", 7).await.unwrap(),
        Settled::Fenced { .. }
    ));
    assert_eq!(
        common::keyspace(&q).await,
        before,
        "a fenced settle wrote something"
    );
    assert_eq!(
        q.complete("JOB-1", fresh.token).await.unwrap(),
        Settled::Settled
    );
    // Once done, the stale token is still refused (not AlreadySettled).
    assert!(matches!(
        q.complete("JOB-1", stale.token).await.unwrap(),
        Settled::Fenced {
            current: 2,
            state: JobState::Done
        }
    ));
}

async fn settling_a_job_that_does_not_exist_answers_missing(c: Ctx) {
    let q = c.queue.at(1_000);
    assert_eq!(q.complete("JOB-none", 1).await.unwrap(), Settled::Missing);
    assert_eq!(q.fail("JOB-none", 1, 0).await.unwrap(), Failed::Missing);
    assert_eq!(
        q.extend("JOB-none", 1, 10).await.unwrap(),
        Extended::Missing
    );
    assert!(common::keyspace(&q).await.is_empty());
}

async fn fail_requeues_the_job_after_the_retry_delay(c: Ctx) {
    let q = c.queue.at(1_000);
    q.enqueue("JOB-1", b"", OPTS).await.unwrap();
    let l = q.lease("w1", 100).await.unwrap().unwrap();
    assert_eq!(
        q.at(1_010).fail(&l.id, l.token, 500).await.unwrap(),
        Failed::Requeued { ready_at_ms: 1_510 }
    );
    let s = snap(&q).await;
    assert_eq!(s.pending["JOB-1"], 1_510);
    assert_eq!(q.at(1_509).lease("w1", 100).await.unwrap(), None);
    assert_eq!(
        q.at(1_510).lease("w1", 100).await.unwrap().unwrap().token,
        2
    );
}

async fn fail_on_the_last_attempt_sends_the_job_to_dead(c: Ctx) {
    let q = c.queue.at(1_000);
    let once = EnqueueOptions {
        max_attempts: 1,
        delay_ms: 0,
    };
    q.enqueue("JOB-1", b"", once).await.unwrap();
    let l = q.lease("w1", 100).await.unwrap().unwrap();
    assert_eq!(
        q.at(1_020).fail(&l.id, l.token, 0).await.unwrap(),
        Failed::Dead
    );
    let s = snap(&q).await;
    assert_eq!(s.dead["JOB-1"], 1_020);
    assert_eq!(
        q.at(5_000).lease("w1", 100).await.unwrap(),
        None,
        "a dead job is never leased"
    );
}

async fn extend_moves_the_deadline_and_is_fenced_once_the_lease_is_gone(c: Ctx) {
    let q = c.queue.at(1_000);
    q.enqueue("JOB-1", b"", OPTS).await.unwrap();
    let l = q.lease("w1", 100).await.unwrap().unwrap();
    assert_eq!(
        q.at(1_050).extend(&l.id, l.token, 100).await.unwrap(),
        Extended::Extended { deadline_ms: 1_150 }
    );
    assert!(
        q.at(1_100).reap(10).await.unwrap().is_empty(),
        "the extended lease is live"
    );
    assert_eq!(snap(&q).await.active["JOB-1"], 1_150);
    assert_eq!(q.at(1_150).reap(10).await.unwrap().len(), 1);
    assert!(matches!(
        q.at(1_160).extend(&l.id, l.token, 100).await.unwrap(),
        Extended::Fenced {
            current: 1,
            state: JobState::Pending
        }
    ));
}

async fn the_reaper_never_takes_a_lease_whose_deadline_has_not_passed(c: Ctx) {
    let q = c.queue.at(1_000);
    for i in 0..5 {
        q.enqueue(&format!("JOB-{i}"), b"", OPTS).await.unwrap();
    }
    let mut deadlines = Vec::new();
    for i in 0..5u64 {
        let l = q.at(1_000 + i).lease("w", 100).await.unwrap().unwrap();
        deadlines.push((l.deadline_ms, l.id));
    }
    for (deadline, id) in deadlines {
        let before = snap(&q).await;
        assert!(
            q.at(deadline - 1).reap(100).await.unwrap().is_empty(),
            "reaped before {id}'s deadline {deadline}"
        );
        assert_eq!(snap(&q).await, before);
        let reaped = q.at(deadline).reap(100).await.unwrap();
        assert_eq!(reaped.len(), 1);
        assert_eq!(
            (reaped[0].id.as_str(), reaped[0].to),
            (id.as_str(), JobState::Pending)
        );
    }
}

async fn max_attempts_sends_a_reaped_job_to_dead(c: Ctx) {
    let q = c.queue.at(1_000);
    let twice = EnqueueOptions {
        max_attempts: 2,
        delay_ms: 0,
    };
    q.enqueue("JOB-1", b"", twice).await.unwrap();
    let mut now = 1_000;
    for attempt in 1..=2u64 {
        let l = q.at(now).lease("w", 10).await.unwrap().unwrap();
        assert_eq!(l.token, attempt);
        now += 10;
        let reaped = q.at(now).reap(10).await.unwrap();
        let to = if attempt == 2 {
            JobState::Dead
        } else {
            JobState::Pending
        };
        assert_eq!(reaped[0].to, to);
    }
    let s = snap(&q).await;
    assert_eq!(s.rows["JOB-1"].state, Some(JobState::Dead));
    assert_eq!(s.rows["JOB-1"].attempts, 2);
    assert_eq!(q.at(now + 1_000).lease("w", 10).await.unwrap(), None);
}

async fn the_client_reloads_its_library_after_function_flush(c: Ctx) {
    let q = c.queue.at(1_000);
    q.enqueue("JOB-1", b"", OPTS).await.unwrap();
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut q.connection())
        .await
        .unwrap();
    let listed: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(q.scripts().library())
        .query_async(&mut q.connection())
        .await
        .unwrap();
    assert!(listed.is_empty(), "FUNCTION FLUSH left the library loaded");
    assert_eq!(
        q.enqueue("JOB-2", b"", OPTS).await.unwrap(),
        Enqueued::Enqueued
    );
    assert!(q.lease("w1", 100).await.unwrap().is_some());
}

/// Waits until the queue's connection answers again after a restart. The
/// first request after a restart may meet the dead connection: that is an
/// unknown outcome, never a refusal.
async fn reconnect(q: &Queue) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match q.ping().await {
            Ok(()) => return,
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        QueueError::Unknown { .. } | QueueError::Unavailable { .. }
                    ),
                    "{e}"
                );
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no reconnect in 10 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn the_client_reloads_its_scripts_after_a_server_restart(mut c: Ctx) {
    let q = c.queue.at(1_000);
    q.enqueue("JOB-1", b"", OPTS).await.unwrap();
    c.server.kill().await.unwrap();
    c.server.restart().await.unwrap();
    reconnect(&q).await;
    // No persistence: the server came back empty, without our scripts.
    assert_eq!(
        q.enqueue("JOB-1", b"", OPTS).await.unwrap(),
        Enqueued::Enqueued
    );
    assert_eq!(q.lease("w1", 10).await.unwrap().unwrap().id, "JOB-1");
}

async fn a_request_that_times_out_is_an_unknown_outcome_not_a_refusal(mut c: Ctx) {
    let config = QueueConfig {
        response_timeout: Duration::from_millis(200),
        ..QueueConfig::default()
    };
    let q = Queue::connect_with(&c.server.client(), c.queue.keys().name.as_str(), config)
        .await
        .unwrap()
        .at(1_000);
    q.enqueue("JOB-1", b"", OPTS).await.unwrap();
    c.server.pause().await.unwrap();
    let e = q.lease("w1", 100).await.unwrap_err();
    c.server.resume().await.unwrap();
    assert!(e.is_unknown(), "expected an unknown outcome, got {e}");
    // Unknown means "maybe": the lease either ran or did not, and either
    // world is a consistent queue. (redis-rs drops the connection after a
    // timeout, so in practice the request usually dies unexecuted.)
    reconnect(&q).await;
    let s = snap(&q).await;
    let row = &s.rows["JOB-1"];
    assert!(
        matches!(
            (row.state, row.attempts),
            (Some(JobState::Pending), 0) | (Some(JobState::Active), 1)
        ),
        "neither world: {s:#?}"
    );
}

async fn the_smoke_campaign_holds_every_invariant(c: Ctx) {
    let config = ackgap::campaign::SmokeConfig::from_seed(7);
    let report = ackgap::campaign::smoke(&c.queue, config, None)
        .await
        .unwrap();
    // Every invariant holds, or was not exercised (effect-once: the smoke
    // runs no consumer), and the run is valid.
    for r in &report.invariants {
        if !r.not_exercised() {
            assert_eq!(r.verdict, ackgap::check::Verdict::Valid, "{r:?}");
        }
    }
    assert_eq!(report.verdict, ackgap::check::Verdict::Valid);
    let redelivered = report.jobs.iter().filter(|j| j.deliveries == 2).count();
    assert_eq!(
        redelivered, 1,
        "the crashed worker's job is delivered again: {:?}",
        report.jobs
    );
    assert!(
        report.jobs.iter().all(|j| j.state == "done"),
        "{:?}",
        report.jobs
    );
    assert_eq!(
        report.invariants[1].counts.get("refused"),
        Some(&1),
        "the stale ack is fenced"
    );
}

// Durability: kill -9 and restart under each persistence mode.

async fn enqueue_ten_and_complete_five(q: &Queue) {
    for i in 0..10 {
        q.enqueue(&format!("JOB-{i}"), b"p", OPTS).await.unwrap();
    }
    for _ in 0..5 {
        let l = q.lease("w", 60_000).await.unwrap().unwrap();
        assert_eq!(q.complete(&l.id, l.token).await.unwrap(), Settled::Settled);
    }
}

mod durability {
    use super::*;

    async fn kill_and_restart(backend: Backend, persistence: Persistence) -> Option<Snapshot> {
        let server = common::start(backend, persistence).await?;
        let mut c = Ctx {
            queue: Queue::connect(&server.client(), &common::queue_name())
                .await
                .unwrap(),
            server,
            backend,
        };
        let q = c.queue.at(1_000);
        enqueue_ten_and_complete_five(&q).await;
        c.server.kill().await.unwrap();
        c.server.restart().await.unwrap();
        reconnect(&q).await;
        Some(snap(&q).await)
    }

    async fn keeps_every_acknowledged_job(backend: Backend) {
        let Some(s) = kill_and_restart(backend, Persistence::AofAlways).await else {
            return;
        };
        assert_eq!(s.rows.len(), 10, "{s:#?}");
        assert_eq!(s.done.len(), 5);
        assert_eq!(s.pending.len(), 5);
    }

    async fn loses_the_jobs(backend: Backend) {
        let Some(s) = kill_and_restart(backend, Persistence::None).await else {
            return;
        };
        assert!(
            s.rows.is_empty(),
            "without persistence the jobs are gone: {s:#?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_aof_always_kill_and_restart_keeps_every_acknowledged_job_valkey() {
        keeps_every_acknowledged_job(Backend::Valkey).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_aof_always_kill_and_restart_keeps_every_acknowledged_job_redis7() {
        keeps_every_acknowledged_job(Backend::Redis7).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_aof_always_kill_and_restart_keeps_every_acknowledged_job_container() {
        keeps_every_acknowledged_job(Backend::Container).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_no_persistence_kill_and_restart_loses_the_jobs_valkey() {
        loses_the_jobs(Backend::Valkey).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_no_persistence_kill_and_restart_loses_the_jobs_redis7() {
        loses_the_jobs(Backend::Redis7).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_no_persistence_kill_and_restart_loses_the_jobs_container() {
        loses_the_jobs(Backend::Container).await
    }
}
