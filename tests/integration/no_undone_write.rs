//! A healthy path writes nothing it takes back (DESIGN.md, issue 31): a
//! poll with no ready job, a delayed job at the head of pending, a
//! duplicate enqueue, a fenced or repeated settle — each leaves the AOF's
//! size and the replication stream's offset where they were, and a
//! complete-and-lease that finds nothing to lease next replicates exactly
//! what the complete alone does. Replicas, the AOF and keyspace
//! notifications see every write, and its undo too, so "the keys end as
//! they started" is not enough: the stream must not move.
//!
//! Every claim has its control beside it: a real write on the same server
//! moves the same counter, so a counter that never moves (a standalone
//! server has no replication backlog until a replica connects, so its
//! `master_repl_offset` stays 0) cannot make a test pass.

use crate::common; // servers and fresh queue names

use ackgap::queue::client::EnqueueOptions;
use ackgap::queue::{Enqueued, Queue};
use ackgap::server::{Persistence, Server, ServerSpec};
use common::Backend;

const OPTS: EnqueueOptions = EnqueueOptions {
    max_attempts: 3,
    delay_ms: 0,
};

/// A counter of everything a server wrote to its stream: the AOF's size
/// (standalone, `appendonly yes`) or a node's replication offset.
#[derive(Clone, Copy, Debug)]
enum Counter {
    AofSize,
    PrimaryOffset,
    ReplicaOffset,
}

async fn read(client: &redis::Client, counter: Counter) -> u64 {
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection for INFO");
    let section = match counter {
        Counter::AofSize => "persistence",
        _ => "replication",
    };
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await
        .expect("INFO");
    let field = match counter {
        Counter::AofSize => "aof_current_size",
        Counter::PrimaryOffset => "master_repl_offset",
        // A replica reports the offset it has processed.
        Counter::ReplicaOffset => "slave_repl_offset",
    };
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {info}"))
}

/// Every counter of `server` worth reading: the AOF's size on a standalone
/// server, the primary's and each replica's offset on a replicated one.
fn counters(server: &Server) -> Vec<(redis::Client, Counter)> {
    let ports = server.node_ports();
    if ports.len() == 1 {
        return vec![(server.client(), Counter::AofSize)];
    }
    ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
            let counter = if i == 0 {
                Counter::PrimaryOffset
            } else {
                Counter::ReplicaOffset
            };
            (client, counter)
        })
        .collect()
}

/// The counters now.
async fn marks(server: &Server) -> Vec<u64> {
    let mut out = Vec::new();
    for (client, counter) in counters(server) {
        out.push(read(&client, counter).await);
    }
    out
}

/// Waits (bounded) until every replica's offset has reached the primary's,
/// so that a mark taken next does not see an earlier write arrive late.
async fn settle(server: &Server) {
    let all = counters(server);
    if all.len() == 1 {
        return;
    }
    for _ in 0..200 {
        let mut at = Vec::new();
        for (client, counter) in &all {
            at.push(read(client, *counter).await);
        }
        if at.iter().all(|o| *o == at[0]) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the replicas did not catch up with the primary within 2 s");
}

/// The change of every counter across `call`, once the replicas caught up.
async fn moved<F, Fut>(server: &Server, call: F) -> Vec<i64>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    settle(server).await;
    let before = marks(server).await;
    call().await;
    settle(server).await;
    let after = marks(server).await;
    before
        .iter()
        .zip(&after)
        .map(|(b, a)| *a as i64 - *b as i64)
        .collect()
}

/// Asserts that none of the healthy no-write paths moves a counter of
/// `server`, and that the controls do.
async fn healthy_paths_write_nothing(server: &Server) {
    let q = Queue::connect(&server.client(), &common::queue_name())
        .await
        .expect("connect");
    // The queue exists (its permanent +inf members too): one job done, one
    // active, one delayed far ahead.
    assert_eq!(
        q.enqueue("JOB-1", b"one", OPTS).await.unwrap(),
        Enqueued::Enqueued
    );
    let held = q.lease("w0", 60_000).await.unwrap().expect("JOB-1 ready");
    q.complete("JOB-1", held.token).await.unwrap();
    q.enqueue("JOB-2", b"two", OPTS).await.unwrap();
    let active = q.lease("w0", 60_000).await.unwrap().expect("JOB-2 ready");
    let delayed = EnqueueOptions {
        max_attempts: 3,
        delay_ms: 3_600_000,
    };
    q.enqueue("JOB-3", b"three", delayed).await.unwrap();

    let none = |d: &[i64]| d.iter().all(|x| *x == 0);
    let d = moved(server, || async {
        assert!(q.lease("w1", 1000).await.unwrap().is_none());
    })
    .await;
    assert!(
        none(&d),
        "a lease with only a delayed job at the head moved {d:?}"
    );
    let d = moved(server, || async {
        assert!(q.lease_batch("w1", 1000, 10).await.unwrap().is_empty());
    })
    .await;
    assert!(none(&d), "an empty lease_batch moved {d:?}");
    let d = moved(server, || async {
        q.enqueue("JOB-1", b"again", OPTS).await.unwrap();
        q.enqueue("JOB-2", b"again", OPTS).await.unwrap();
        q.enqueue_batch(&[("JOB-3", b"again")], OPTS).await.unwrap();
    })
    .await;
    assert!(none(&d), "duplicate enqueues moved {d:?}");
    let d = moved(server, || async {
        q.complete("JOB-1", held.token).await.unwrap(); // repeated
        q.complete("JOB-2", active.token + 1).await.unwrap(); // fenced
        q.fail("JOB-2", active.token + 1, 0).await.unwrap();
        q.extend("JOB-2", active.token + 1, 1000).await.unwrap();
        q.complete_batch(&[("JOB-1", held.token), ("JOB-2", active.token + 1)])
            .await
            .unwrap();
    })
    .await;
    assert!(none(&d), "repeated and fenced settles moved {d:?}");
    let d = moved(server, || async {
        // The loop's call with a fenced half and nothing ready: the one-pass
        // path used to pop the head of pending and put it back.
        q.complete_and_lease("JOB-2", active.token + 1, "w1", 1000)
            .await
            .unwrap();
    })
    .await;
    assert!(
        none(&d),
        "a fenced complete_and_lease with nothing ready moved {d:?}"
    );

    // The controls: a real settle moves every counter, and the loop's call
    // that settles with nothing ready next writes exactly what the settle
    // alone writes.
    q.enqueue("JOB-4", b"four", OPTS).await.unwrap();
    let a = q.lease("w0", 60_000).await.unwrap().expect("JOB-4 ready");
    let alone = moved(server, || async {
        q.complete("JOB-4", a.token).await.unwrap();
    })
    .await;
    assert!(
        alone.iter().all(|x| *x > 0),
        "a settle moved nothing: {alone:?}"
    );
    let both = moved(server, || async {
        let out = q
            .complete_and_lease("JOB-2", active.token, "w0", 1000)
            .await
            .unwrap();
        assert!(format!("{out:?}").contains("Settled"), "{out:?}");
    })
    .await;
    assert_eq!(
        both, alone,
        "complete_and_lease with nothing to lease next wrote more than complete"
    );
}

async fn standalone_with_aof(backend: Backend) {
    let Some(server) = common::start(backend, Persistence::AofAlways).await else {
        return;
    };
    healthy_paths_write_nothing(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_paths_leave_the_aof_as_it_was_valkey() {
    standalone_with_aof(Backend::Valkey).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_paths_leave_the_aof_as_it_was_redis7() {
    standalone_with_aof(Backend::Redis7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_paths_leave_the_primary_and_replica_offsets_as_they_were() {
    let spec: ServerSpec = "replicated:1".parse().unwrap();
    let server = Server::start(&spec, Persistence::None)
        .await
        .expect("the replicated topology starts");
    // The primary PINGs its replicas through the replication stream every
    // repl-ping-replica-period (10 s): a PING inside a measured window would
    // move the offsets with nothing written by the queue.
    let primary =
        redis::Client::open(format!("redis://127.0.0.1:{}/", server.node_ports()[0])).unwrap();
    let mut conn = primary.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "repl-ping-replica-period", "3600"])
        .query_async(&mut conn)
        .await
        .expect("CONFIG SET repl-ping-replica-period");
    healthy_paths_write_nothing(&server).await;
}
