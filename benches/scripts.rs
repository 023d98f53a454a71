//! Per-call latency of each queue script against an embedded valkey-server
//! (one call at a time over one connection: latency, not throughput; `ackgap
//! bench` measures throughput). Setup that a call needs (a pending job to
//! lease, a lease to complete) is made outside the timed part.
//!
//! `cargo bench --bench scripts`; under `cargo test --benches` (or nextest
//! `--all-targets`) each benchmark runs once, as a smoke test.

use std::sync::atomic::{AtomicU64, Ordering};

use ackgap::queue::client::EnqueueOptions;
use ackgap::queue::{Lease, Queue};
use ackgap::server::{Persistence, ProcessOptions, Server, ServerSpec};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use tokio::runtime::Runtime;

const OPTS: EnqueueOptions = EnqueueOptions {
    max_attempts: 1_000_000,
    delay_ms: 0,
};
const BATCH: usize = 100;

static NEXT: AtomicU64 = AtomicU64::new(0);

fn fresh_ids(n: usize) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|_| {
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            (format!("JOB-{i:010}"), b"payload".to_vec())
        })
        .collect()
}

fn enqueue_n(rt: &Runtime, q: &Queue, n: usize) -> Vec<String> {
    let jobs = fresh_ids(n);
    rt.block_on(q.enqueue_batch(&jobs, OPTS)).expect("enqueue");
    jobs.into_iter().map(|(id, _)| id).collect()
}

fn leased_n(rt: &Runtime, q: &Queue, n: usize) -> Vec<Lease> {
    enqueue_n(rt, q, n);
    rt.block_on(q.lease_batch("bench", 600_000, n as u64))
        .expect("lease")
}

fn scripts(c: &mut Criterion) {
    let rt = Runtime::new().expect("tokio runtime");
    let spec = ServerSpec::Process(ProcessOptions { binary: None });
    let server = rt
        .block_on(Server::start(&spec, Persistence::None))
        .expect("start valkey-server (ci/install-valkey installs it)");
    let q = rt
        .block_on(Queue::connect(&server.client(), "criterion"))
        .expect("connect");
    let mut g = c.benchmark_group("script");

    g.bench_function("enqueue", |b| {
        b.iter_batched(
            || fresh_ids(1).pop().expect("one id"),
            |(id, p)| rt.block_on(q.enqueue(&id, &p, OPTS)).expect("enqueue"),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("lease", |b| {
        b.iter_batched(
            || enqueue_n(&rt, &q, 1),
            |_| rt.block_on(q.lease("bench", 600_000)).expect("lease"),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("complete", |b| {
        b.iter_batched(
            || leased_n(&rt, &q, 1).pop().expect("a lease"),
            |l| rt.block_on(q.complete(&l.id, l.token)).expect("complete"),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("complete_and_lease (settles one, leases the next)", |b| {
        b.iter_batched(
            || {
                let held = leased_n(&rt, &q, 1).pop().expect("a lease");
                enqueue_n(&rt, &q, 1);
                held
            },
            |l| {
                rt.block_on(q.complete_and_lease(&l.id, l.token, "bench", 600_000))
                    .expect("complete_and_lease")
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("fail", |b| {
        b.iter_batched(
            || leased_n(&rt, &q, 1).pop().expect("a lease"),
            |l| rt.block_on(q.fail(&l.id, l.token, 600_000)).expect("fail"),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("extend", |b| {
        let l = leased_n(&rt, &q, 1).pop().expect("a lease");
        b.iter(|| {
            rt.block_on(q.extend(&l.id, l.token, 600_000))
                .expect("extend")
        })
    });
    g.bench_function("reap (nothing due)", |b| {
        b.iter(|| rt.block_on(q.reap(100)).expect("reap"))
    });
    g.bench_function("enqueue_batch of 100", |b| {
        b.iter_batched(
            || fresh_ids(BATCH),
            |jobs| rt.block_on(q.enqueue_batch(&jobs, OPTS)).expect("enqueue"),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("lease_batch of 100", |b| {
        b.iter_batched(
            || enqueue_n(&rt, &q, BATCH),
            |_| {
                rt.block_on(q.lease_batch("bench", 600_000, BATCH as u64))
                    .expect("lease")
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("complete_batch of 100", |b| {
        b.iter_batched(
            || {
                leased_n(&rt, &q, BATCH)
                    .into_iter()
                    .map(|l| (l.id, l.token))
                    .collect::<Vec<_>>()
            },
            |pairs| rt.block_on(q.complete_batch(&pairs)).expect("complete"),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("fail_batch of 100", |b| {
        b.iter_batched(
            || {
                leased_n(&rt, &q, BATCH)
                    .into_iter()
                    .map(|l| (l.id, l.token))
                    .collect::<Vec<_>>()
            },
            |pairs| rt.block_on(q.fail_batch(&pairs, 600_000)).expect("fail"),
            BatchSize::SmallInput,
        )
    });
    g.finish();

    // The snapshot reads the whole queue; time it on 1,000 jobs.
    let small = rt
        .block_on(Queue::connect(&server.client(), "criterion-snapshot"))
        .expect("connect");
    for _ in 0..10 {
        enqueue_n(&rt, &small, 100);
    }
    c.bench_function("script/snapshot of 1000 jobs", |b| {
        b.iter(|| rt.block_on(small.snapshot()).expect("snapshot"))
    });
    drop((q, small));
    rt.block_on(server.stop()).expect("stop the server");
}

criterion_group!(benches, scripts);
criterion_main!(benches);
