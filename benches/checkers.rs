//! The harness's own speed: the checkers over a generated history, and the
//! pure model driven by a seeded step mix (the same generators `ackgap
//! bench` times).
//!
//! `cargo bench --bench checkers`; under `cargo test --benches` (or nextest
//! `--all-targets`) each benchmark runs once, as a smoke test.

use ackgap::bench::harness::{generated_history, model_steps};
use ackgap::check::check_all;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn checkers(c: &mut Criterion) {
    let history = generated_history(1, 2_000);
    let mut g = c.benchmark_group("checkers");
    g.throughput(Throughput::Elements(history.len() as u64));
    g.bench_function("check_all over a 2000-job history", |b| {
        b.iter(|| check_all(std::hint::black_box(&history)))
    });
    g.finish();

    let mut g = c.benchmark_group("model");
    g.throughput(Throughput::Elements(10_000));
    g.bench_function("10000 seeded steps", |b| {
        b.iter(|| model_steps(std::hint::black_box(7), 10_000))
    });
    g.finish();
}

criterion_group!(benches, checkers);
criterion_main!(benches);
