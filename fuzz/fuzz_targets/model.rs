//! The pure model under any sequence of operations.
//!
//! `arbitrary` draws operations with arguments that are mostly sensible
//! (small job and worker indexes, short durations) and sometimes hostile
//! (unbranded or oversized ids, empty or oversized workers, zero, boundary
//! and huge numbers, time that jumps or goes back). After every operation:
//! nothing panicked (overflow included: `ci/fuzz` builds with debug
//! assertions), `Model::check_structure` holds, the snapshot the model
//! reads back has no structure problem, and a refused operation changed
//! nothing.
//!
//! The batch operations are drawn too; when the model gains an operation,
//! add it to `Op`.

#![no_main]

use ackgap::model::{Model, BATCH_MAX, ID_BYTES_MAX, MAX_ATTEMPTS_MAX, MS_MAX, REAP_LIMIT_MAX};
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

/// A number: mostly small, sometimes on or past a boundary, sometimes any.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Num {
    Small(u8),
    Edge(u8),
    Any(u64),
}

const EDGES: [u64; 10] = [
    0,
    1,
    MS_MAX,
    MS_MAX + 1,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_MAX + 1,
    REAP_LIMIT_MAX + 1,
    BATCH_MAX + 1,
    10_000_000_000_000_000,
    u64::MAX,
];

impl Num {
    fn get(self) -> u64 {
        match self {
            Num::Small(n) => u64::from(n),
            Num::Edge(i) => EDGES[usize::from(i) % EDGES.len()],
            Num::Any(n) => n,
        }
    }
}

/// A job id: `JOB-{n}` mostly, else something the scripts refuse or barely
/// accept.
#[derive(Arbitrary, Debug, Clone)]
enum Id {
    Job(u8),
    Raw(String),
    Longest,
    TooLong,
}

impl Id {
    fn get(&self) -> String {
        match self {
            Id::Job(n) => format!("JOB-{}", n % 8),
            Id::Raw(s) => s.clone(),
            Id::Longest => format!("JOB{}", "x".repeat(ID_BYTES_MAX - 3)),
            Id::TooLong => format!("JOB{}", "x".repeat(ID_BYTES_MAX - 2)),
        }
    }
}

/// A worker name: `w{n}` mostly, else empty, oversized or anything.
#[derive(Arbitrary, Debug, Clone)]
enum Worker {
    W(u8),
    Raw(String),
}

impl Worker {
    fn get(&self) -> String {
        match self {
            Worker::W(n) => format!("w{}", n % 4),
            Worker::Raw(s) => s.clone(),
        }
    }
}

/// The token of an operation: the job's current attempts, a stale or future
/// one, or any number.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Token {
    Current,
    Offset(i8),
    Num(Num),
}

#[derive(Arbitrary, Debug)]
enum Op {
    Enqueue {
        id: Id,
        payload: Vec<u8>,
        max_attempts: Num,
        delay_ms: Num,
    },
    Lease {
        worker: Worker,
        lease_ms: Num,
    },
    Complete {
        id: Id,
        token: Token,
    },
    Fail {
        id: Id,
        token: Token,
        retry_delay_ms: Num,
    },
    Extend {
        id: Id,
        token: Token,
        lease_ms: Num,
    },
    Reap {
        limit: Num,
    },
    EnqueueBatch {
        jobs: Vec<(Id, Vec<u8>)>,
        max_attempts: Num,
        delay_ms: Num,
    },
    LeaseBatch {
        worker: Worker,
        lease_ms: Num,
        count: Num,
    },
    CompleteBatch {
        leases: Vec<(Id, Token)>,
    },
    FailBatch {
        leases: Vec<(Id, Token)>,
        retry_delay_ms: Num,
    },
    /// Logical time moves: forward by a little, or to any instant (back in
    /// time, or past `MS_MAX`, which every operation must refuse).
    Tick(Num),
    Jump(Num),
}

fn token(model: &Model, id: &str, t: Token) -> u64 {
    let current = model.job(id).map_or(0, |j| j.attempts());
    match t {
        Token::Current => current,
        Token::Offset(d) => current.saturating_add_signed(i64::from(d)),
        Token::Num(n) => n.get(),
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut model = Model::new();
    let mut now_ms: u64 = 1_000;
    for op in &ops {
        let before = model.clone();
        let refused = match op {
            Op::Tick(ms) => {
                now_ms = now_ms.saturating_add(ms.get() % 10_000);
                continue;
            }
            Op::Jump(to) => {
                now_ms = to.get();
                continue;
            }
            Op::Enqueue {
                id,
                payload,
                max_attempts,
                delay_ms,
            } => model
                .enqueue(
                    &id.get(),
                    payload,
                    max_attempts.get(),
                    delay_ms.get(),
                    now_ms,
                )
                .is_err(),
            Op::Lease { worker, lease_ms } => {
                model.lease(&worker.get(), lease_ms.get(), now_ms).is_err()
            }
            Op::Complete { id, token: t } => {
                let id = id.get();
                let t = token(&model, &id, *t);
                model.complete(&id, t).is_err()
            }
            Op::Fail {
                id,
                token: t,
                retry_delay_ms,
            } => {
                let id = id.get();
                let t = token(&model, &id, *t);
                model.fail(&id, t, retry_delay_ms.get(), now_ms).is_err()
            }
            Op::Extend {
                id,
                token: t,
                lease_ms,
            } => {
                let id = id.get();
                let t = token(&model, &id, *t);
                model.extend(&id, t, lease_ms.get(), now_ms).is_err()
            }
            Op::Reap { limit } => model.reap(limit.get(), now_ms).is_err(),
            Op::EnqueueBatch {
                jobs,
                max_attempts,
                delay_ms,
            } => {
                let jobs: Vec<(String, &[u8])> = jobs
                    .iter()
                    .map(|(id, p)| (id.get(), p.as_slice()))
                    .collect();
                model
                    .enqueue_batch(&jobs, max_attempts.get(), delay_ms.get(), now_ms)
                    .is_err()
            }
            Op::LeaseBatch {
                worker,
                lease_ms,
                count,
            } => model
                .lease_batch(&worker.get(), lease_ms.get(), count.get(), now_ms)
                .is_err(),
            Op::CompleteBatch { leases } => {
                let leases = settle_args(&model, leases);
                model.complete_batch(&leases).is_err()
            }
            Op::FailBatch {
                leases,
                retry_delay_ms,
            } => {
                let leases = settle_args(&model, leases);
                model
                    .fail_batch(&leases, retry_delay_ms.get(), now_ms)
                    .is_err()
            }
        };
        if let Err(problem) = model.check_structure() {
            panic!("after {op:?}: {problem}");
        }
        let problems = model.snapshot().structure_problems();
        assert!(problems.is_empty(), "after {op:?}: {problems:?}");
        if refused {
            assert!(model == before, "a refused {op:?} changed the model");
        }
    }
});

fn settle_args(model: &Model, leases: &[(Id, Token)]) -> Vec<(String, u64)> {
    leases
        .iter()
        .map(|(id, t)| {
            let id = id.get();
            let t = token(model, &id, *t);
            (id, t)
        })
        .collect()
}
