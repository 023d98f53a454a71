//! ackgap as a user runs it: their own consumer, checked from their own
//! `cargo test`, through the public API only. A consumer that credits an
//! account once per job passes; the same consumer without its marker fails
//! the test with the minimal counterexample and the command that replays
//! it; and the printed replay line fails again, alone.
//!
//! Each test starts its own embedded Valkey (or uses `$ACKGAP_SERVER`);
//! `ACKGAP_SEEDS` runs more walks.

use std::sync::Arc;

use ackgap::adapter::{by_name, Adapter};
use ackgap::queue::QueueError;
use ackgap::testing::{assert_holds, Campaign, Handler, Job, MemoryStore};

/// Credits the account of `job` once: the row's unique key on the job id
/// is the marker.
fn credit_once(ledger: MemoryStore) -> Handler {
    Handler::new("credit-once", ledger.clone(), move |_conn, job: Job| {
        let ledger = ledger.clone();
        async move {
            ledger.add_once(&job.id);
            Ok::<(), QueueError>(())
        }
    })
}

/// Credits the account of `job` on every delivery.
fn credit_every_time(ledger: MemoryStore) -> Handler {
    Handler::new(
        "credit-every-time",
        ledger.clone(),
        move |_conn, job: Job| {
            let ledger = ledger.clone();
            async move {
                ledger.add(&job.id);
                Ok::<(), QueueError>(())
            }
        },
    )
}

/// The panic message of `assert_holds(report)`, if it panicked.
fn failure_message(report: &ackgap::testing::CampaignReport) -> Option<String> {
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| assert_holds(report)));
    caught.err().map(|payload| {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

#[tokio::test]
async fn a_credit_with_a_marker_lands_once_under_redelivery() {
    let report = Campaign::new(credit_once(MemoryStore::new())).check().await;
    assert!(report.holds());
    assert!(report.walks >= 1);
    let effects = report
        .invariants
        .iter()
        .find(|r| r.invariant == "effect-once")
        .expect("effect-once was judged");
    assert_eq!(effects.counts.get("duplicated"), Some(&0));
}

#[tokio::test]
async fn a_credit_without_a_marker_fails_the_test_with_the_replay_command() {
    let report = Campaign::new(credit_every_time(MemoryStore::new()))
        .run()
        .await
        .expect("the campaign ran");
    let failure = report.failure.as_ref().expect("a duplicate credit found");
    assert_eq!(failure.invariant, "effect-once");
    let message = failure_message(&report).expect("assert_holds panicked");
    assert!(
        message.contains("broke effect-once"),
        "the message names the invariant:\n{message}"
    );
    let replay = format!(
        "ACKGAP_REPLAY='{}' cargo test --test integration -- --exact \
         user::a_credit_without_a_marker_fails_the_test_with_the_replay_command",
        failure.line
    );
    assert!(
        message.contains(&replay),
        "the message carries the replay command {replay}:\n{message}"
    );
    assert!(
        failure.line.starts_with("reference/credit-every-time/"),
        "{}",
        failure.line
    );
    // The command line cannot run a user's consumer: the message does not
    // offer `ackgap replay`.
    assert!(!message.contains("ackgap replay"), "{message}");
}

#[tokio::test]
async fn the_printed_replay_line_breaks_the_same_invariant_again() {
    let found = Campaign::new(credit_every_time(MemoryStore::new()))
        .run()
        .await
        .expect("the campaign ran");
    let line = found.failure.expect("a duplicate credit found").line;
    let replayed = Campaign::new(credit_every_time(MemoryStore::new()))
        .replay(&line)
        .run()
        .await
        .expect("the replay ran");
    assert_eq!(replayed.walks, 1);
    let failure = replayed.failure.expect("the replay fails again");
    assert_eq!(failure.invariant, "effect-once");
    assert_eq!(failure.line, line);
}

#[tokio::test]
async fn a_queue_that_loses_a_crashed_workers_job_is_caught_through_the_adapter_trait() {
    // A user's queue behind the adapter trait: here the shipped `rpop`
    // pattern, at-most-once: the job leaves the queue before the work, and
    // a worker that crashes loses it.
    let report = Campaign::new(credit_once(MemoryStore::new()))
        .queue(|queue| by_name("rpop", queue).expect("a shipped adapter") as Arc<dyn Adapter>)
        .seeds(64)
        .run()
        .await
        .expect("the campaign ran");
    assert!(!report.holds(), "{report}");
    let failure = report.failure.as_ref().expect("a finding");
    assert_eq!(failure.invariant, "no-loss", "{report}");
    assert!(
        failure.line.starts_with("rpop/credit-once/"),
        "{}",
        failure.line
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaigns_chaos_phase_runs_the_users_consumer_under_faults_on_the_wall_clock() {
    let ledger = MemoryStore::new();
    let report = Campaign::new(credit_once(ledger.clone()))
        .seeds(2)
        .chaos(std::time::Duration::from_secs(2))
        .run()
        .await
        .expect("the campaign ran");
    let chaos = report.chaos.as_ref().expect("the walks held, so chaos ran");
    assert!(chaos.ops > 0, "{report}");
    assert!(
        chaos.fired.values().sum::<u64>() > 0,
        "faults fired: {:?}",
        chaos.fired
    );
    // The user's consumer did the work: the store holds the credits of
    // the chaos run's jobs, once each.
    let rows = ledger.rows_by_id();
    assert!(
        !rows.is_empty(),
        "the handler credited the chaos run's jobs"
    );
    assert!(rows.values().all(|&n| n == 1), "{rows:?}");
    assert_eq!(report.verdict, chaos.verdict.max(report.verdict));
    assert!(report.holds(), "{report}");
}

/// Credits the account of `job` unless a guard set in the last 50 ms says
/// it was credited: a marker that expires, like a lock with a TTL.
fn credit_with_an_expiring_guard(ledger: MemoryStore) -> Handler {
    let guards: Arc<std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>> =
        Arc::default();
    Handler::new(
        "credit-expiring-guard",
        ledger.clone(),
        move |_conn, job: Job| {
            let (ledger, guards) = (ledger.clone(), guards.clone());
            async move {
                let fresh = {
                    let mut guards = guards.lock().expect("guards");
                    let now = std::time::Instant::now();
                    // A guard from before the store was cleared (an earlier
                    // walk) guards nothing.
                    let live = ledger.get(&job.id) > 0
                        && guards.get(&job.id).is_some_and(|set| {
                            now.duration_since(*set) < std::time::Duration::from_millis(50)
                        });
                    if !live {
                        guards.insert(job.id.clone(), now);
                    }
                    !live
                };
                if fresh {
                    ledger.add(&job.id);
                }
                Ok::<(), QueueError>(())
            }
        },
    )
}

#[tokio::test]
async fn a_guard_that_expires_fails_a_replay_line_with_real_time_and_passes_it_on_logical_time() {
    // A crash in the ack gap, then 100 ms: of real time, the guard has
    // expired when the heal redelivers; of logical time alone, it has not.
    let real = "reference/credit-expiring-guard/j1w1l100m3r1/e0.l0.a0.w100";
    let replayed = Campaign::new(credit_with_an_expiring_guard(MemoryStore::new()))
        .replay(real)
        .run()
        .await
        .expect("the replay ran");
    let failure = replayed
        .failure
        .expect("a second credit after the guard expired");
    assert_eq!(failure.invariant, "effect-once");
    assert_eq!(failure.line, real);
    let logical = "reference/credit-expiring-guard/j1w1l100m3r1/e0.l0.a0.t100";
    let replayed = Campaign::new(credit_with_an_expiring_guard(MemoryStore::new()))
        .replay(logical)
        .run()
        .await
        .expect("the replay ran");
    assert!(replayed.holds(), "{logical}");
}
