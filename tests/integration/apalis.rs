//! apalis-redis 1.0 behind the adapter trait (`--features apalis`), on a
//! real Valkey: the contract's operations answer what apalis did, an
//! orphaned delivery comes back through apalis's own heartbeat and its
//! late ack is refused, and `ackgap chaos` and `ackgap explore` run it end
//! to end. Nothing here states a verdict about apalis: the checkers judge
//! it, and the tests assert only what any correct harness run must show.
//! Without the feature, `--queue apalis` is a usage error naming it.

#[cfg(feature = "apalis")]
use crate::common; // the server matrix (`start`) and fresh queue names

#[cfg(feature = "apalis")]
mod with_the_feature {
    use std::process::Command;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use ackgap::adapter::{by_name, Adapter, Apalis, Operation};
    use ackgap::queue::client::EnqueueOptions;
    use ackgap::queue::{Enqueued, Failed, JobState, Queue, Settled};
    use ackgap::server::{Persistence, Server};

    use super::common::{self, ackgap, text, Backend};

    async fn valkey() -> (Server, Queue) {
        let server = common::start(Backend::Valkey, Persistence::None)
            .await
            .expect("valkey");
        let queue = Queue::connect(&server.client(), &common::queue_name())
            .await
            .unwrap();
        (server, queue)
    }

    fn state(read: &ackgap::adapter::Read, id: &str) -> String {
        read.jobs.get(id).cloned().unwrap_or_default()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn apalis_declares_server_clock_no_fencing_and_no_extend() {
        let (_server, queue) = valkey().await;
        let adapter = by_name("apalis", &queue).expect("registered under the feature");
        let caps = adapter.capabilities();
        assert_eq!(adapter.name(), "apalis");
        assert!(!caps.logical_time);
        assert!(!caps.fences);
        assert!(!caps.supports(Operation::Extend));
        assert!(caps.missing_required().is_empty(), "{caps:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pushed_task_is_leased_once_completed_and_read_done_and_a_repeated_id_is_ignored() {
        let (_server, queue) = valkey().await;
        let apalis = Apalis::new(&queue);
        let opts = EnqueueOptions::default();
        assert_eq!(
            apalis.enqueue("j1", b"one", opts, None).await.unwrap(),
            Enqueued::Enqueued
        );
        // apalis's push skips a known task id (HSETNX): nothing changes.
        assert_eq!(
            apalis.enqueue("j1", b"other", opts, None).await.unwrap(),
            Enqueued::Duplicate
        );
        assert_eq!(state(&apalis.read().await.unwrap(), "j1"), "pending");

        let lease = apalis
            .lease("w0", 500, None)
            .await
            .unwrap()
            .expect("a task");
        assert_eq!(lease.id, "j1");
        assert_eq!(lease.token, 1);
        assert_eq!(lease.payload, b"one");
        let read = apalis.read().await.unwrap();
        assert_eq!(state(&read, "j1"), "active");
        assert!(read.problems.is_empty(), "{:?}", read.problems);
        assert_eq!(apalis.lease("w1", 500, None).await.unwrap(), None);

        assert_eq!(
            apalis.complete("j1", lease.token).await.unwrap(),
            Settled::Settled
        );
        let read = apalis.read().await.unwrap();
        assert_eq!(state(&read, "j1"), "done");
        assert!(read.problems.is_empty(), "{:?}", read.problems);
        assert_eq!(apalis.lease("w0", 500, None).await.unwrap(), None);
        // The same delivery twice: this adapter no longer holds it.
        assert!(matches!(
            apalis.complete("j1", lease.token).await.unwrap(),
            Settled::Fenced {
                current: 1,
                state: JobState::Done
            }
        ));
        assert_eq!(apalis.complete("nope", 1).await.unwrap(), Settled::Missing);

        apalis.clear().await.unwrap();
        assert!(apalis.read().await.unwrap().jobs.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_task_goes_back_to_apalis_schedule_and_is_leased_again_with_a_new_token() {
        let (_server, queue) = valkey().await;
        let apalis = Apalis::new(&queue);
        apalis
            .enqueue("j1", b"x", EnqueueOptions::default(), None)
            .await
            .unwrap();
        let lease = apalis
            .lease("w0", 500, None)
            .await
            .unwrap()
            .expect("a task");
        let failed = apalis.fail("j1", lease.token, 0, None).await.unwrap();
        let Failed::Requeued { ready_at_ms } = failed else {
            panic!("a first failure is retried by apalis, got {failed:?}");
        };
        assert!(ready_at_ms > 0);
        assert_eq!(state(&apalis.read().await.unwrap(), "j1"), "pending");
        // apalis's backoff is `attempt` seconds: wait until the task is due.
        wait_until_ms(ready_at_ms + 50).await;
        let again = apalis.lease("w1", 500, None).await.unwrap().expect("due");
        assert_eq!((again.id.as_str(), again.token), ("j1", 2));
        assert_eq!(
            apalis.complete("j1", again.token).await.unwrap(),
            Settled::Settled
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_orphaned_delivery_is_reaped_by_a_heartbeat_and_its_late_ack_is_refused() {
        let (_server, queue) = valkey().await;
        let apalis = Apalis::new(&queue);
        apalis
            .enqueue("j1", b"x", EnqueueOptions::default(), None)
            .await
            .unwrap();
        let first = apalis
            .lease("w0", 500, None)
            .await
            .unwrap()
            .expect("a task");
        // Before the deadline the heartbeat takes nothing.
        assert!(apalis.reap(100, None).await.unwrap().is_empty());
        wait_until_ms(first.deadline_ms + 50).await;
        let reaped = apalis.reap(100, None).await.unwrap();
        assert_eq!(
            reaped.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["j1"]
        );
        assert_eq!(state(&apalis.read().await.unwrap(), "j1"), "pending");

        let second = apalis.lease("w1", 500, None).await.unwrap().expect("back");
        assert_eq!(second.token, 2);
        // w0's worker no longer holds the task: apalis's ack script refuses.
        assert!(matches!(
            apalis.complete("j1", first.token).await.unwrap(),
            Settled::Fenced {
                current: 2,
                state: JobState::Active
            }
        ));
        assert_eq!(
            apalis.complete("j1", second.token).await.unwrap(),
            Settled::Settled
        );
        let read = apalis.read().await.unwrap();
        assert_eq!(state(&read, "j1"), "done");
        assert!(read.problems.is_empty(), "{:?}", read.problems);
    }

    /// Sleeps until the client clock (apalis's clock) reads `ms`.
    async fn wait_until_ms(ms: u64) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        tokio::time::sleep(Duration::from_millis(ms.saturating_sub(now))).await;
    }

    #[test]
    fn ackgap_chaos_on_apalis_finishes_with_a_verdict_and_a_well_formed_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apalis.jsonl");
        let out = ackgap(&[
            "chaos",
            "--queue",
            "apalis",
            "--duration",
            "2s",
            "--json",
            "--history",
            path.to_str().unwrap(),
        ]);
        let code = out.status.code();
        assert!(matches!(code, Some(0..=2)), "{code:?}: {}", text(&out));
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("one JSON object");
        let verdict = report["verdict"].as_str().unwrap_or_default();
        assert!(
            ["valid", "invalid", "unknown"].contains(&verdict),
            "{report}"
        );

        let events = ackgap::history::read_file(&path).expect("a well-formed history");
        assert!(!events.is_empty());
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e.index, i as u64, "events are numbered in order");
        }
        // Re-judged from the file alone, it answers a verdict's exit code.
        let again = ackgap(&["check", path.to_str().unwrap()]);
        assert!(
            matches!(again.status.code(), Some(0..=2)),
            "{}",
            text(&again)
        );
    }

    #[test]
    fn ackgap_explore_on_apalis_finishes_five_seeds_with_a_verdict() {
        // No shrinking: on the server clock each replay waits out apalis's
        // whole-second leases, and the claim here is that the walks finish
        // and are judged, not what they find (README: the findings).
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_ackgap"))
            .args([
                "explore",
                "--queue",
                "apalis",
                "--seeds",
                "5",
                "--shrink-runs",
                "0",
            ])
            .current_dir(dir.path())
            .output()
            .expect("run ackgap");
        let code = out.status.code();
        assert!(matches!(code, Some(0..=2)), "{code:?}: {}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("5 seeds,") && stdout.contains("verdict:"),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn queue_apalis_is_known_exactly_when_the_apalis_feature_is_built() {
    let answer = ackgap::adapter::check_name("apalis");
    if cfg!(feature = "apalis") {
        assert_eq!(answer, Ok(()));
    } else {
        let message = answer.expect_err("a build without the feature refuses it");
        assert!(message.contains("`apalis` cargo feature"), "{message}");
        assert!(!message.contains("unknown"), "{message}");
    }
    assert!(ackgap::adapter::check_name("meteor")
        .expect_err("unknown")
        .contains("unknown queue"));
}
