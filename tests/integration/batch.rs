//! The batch scripts against real servers: each batch call answers what the
//! same number of successive single calls answer, leaves the same queue
//! behind, and agrees with the model, value for value. Refused batches write
//! nothing. Each test runs on Valkey 9.1, Redis 7.0 and the container (see
//! `common`).

use crate::common; // the server matrix and the `matrix!` macro

use ackgap::model::{Model, ModelError};
use ackgap::queue::client::EnqueueOptions;
use ackgap::queue::{Enqueued, Failed, JobState, Lease, Queue, QueueError, Settled, Snapshot};
use common::Ctx;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const NOW: u64 = 1_000;

/// An id and its payload, as `enqueue_batch` takes them.
type Job = (String, Vec<u8>);

const OPTS: EnqueueOptions = EnqueueOptions {
    max_attempts: 3,
    delay_ms: 0,
};

/// Three views of one queue: `batch` receives the batch calls, `single`
/// the equivalent successive single calls, `model` the batch calls of the
/// pure model. Setup steps go to all three alike.
struct Trio {
    batch: Queue,
    single: Queue,
    model: Model,
}

impl Trio {
    async fn new(c: &Ctx) -> Trio {
        let single = Queue::connect(&c.server.client(), &common::queue_name())
            .await
            .expect("connect a second queue");
        Trio {
            batch: c.queue.clone(),
            single,
            model: Model::new(),
        }
    }

    async fn enqueue(&mut self, id: &str, options: EnqueueOptions) {
        let m = self
            .model
            .enqueue(
                id,
                id.as_bytes(),
                options.max_attempts,
                options.delay_ms,
                NOW,
            )
            .unwrap();
        for q in [&self.batch, &self.single] {
            let got = q.at(NOW).enqueue(id, id.as_bytes(), options).await.unwrap();
            assert_eq!(got, m, "setup enqueue {id}");
        }
    }

    async fn lease(&mut self, lease_ms: u64, now: u64) -> String {
        let m = self.model.lease("w0", lease_ms, now).unwrap().unwrap();
        for q in [&self.batch, &self.single] {
            let got = q.at(now).lease("w0", lease_ms).await.unwrap();
            assert_eq!(got.as_ref(), Some(&m), "setup lease at {now}");
        }
        m.id
    }

    async fn complete(&mut self, id: &str, token: u64) {
        let m = self.model.complete(id, token).unwrap();
        for q in [&self.batch, &self.single] {
            assert_eq!(
                q.complete(id, token).await.unwrap(),
                m,
                "setup complete {id}"
            );
        }
    }

    async fn reap(&mut self, now: u64) {
        let m = self.model.reap(100, now).unwrap();
        for q in [&self.batch, &self.single] {
            assert_eq!(q.at(now).reap(100).await.unwrap(), m, "setup reap at {now}");
        }
    }

    /// The batch queue, the single queue and the model hold the same state,
    /// and its structure is sound.
    async fn assert_same_state(&self) {
        let b = snap(&self.batch).await;
        let s = snap(&self.single).await;
        assert_eq!(b, s, "batch calls and single calls left different queues");
        assert_eq!(
            b,
            self.model.snapshot(),
            "the server disagrees with the model"
        );
    }
}

async fn snap(q: &Queue) -> Snapshot {
    let s = q.snapshot().await.expect("snapshot");
    assert_eq!(s.structure_problems(), Vec::<String>::new(), "{s:#?}");
    s
}

matrix!(
    enqueue_batch_answers_like_successive_enqueues_including_a_duplicate_within_the_batch,
    lease_batch_takes_the_jobs_successive_leases_take_in_their_order,
    a_lease_batch_on_the_server_clock_gives_every_lease_one_deadline,
    complete_batch_fences_each_pair_on_its_own_token_like_successive_completes,
    fail_batch_fences_each_pair_on_its_own_token_like_successive_fails,
    a_refused_batch_writes_nothing_even_when_its_first_entries_are_valid,
    seeded_batch_walks_refine_the_model_step_by_step,
    complete_and_lease_answers_what_complete_then_lease_answer_in_every_case,
    a_refused_lease_half_leaves_the_complete_half_done_as_two_calls_would,
);

async fn enqueue_batch_answers_like_successive_enqueues_including_a_duplicate_within_the_batch(
    c: Ctx,
) {
    let mut t = Trio::new(&c).await;
    t.enqueue("JOB-0", OPTS).await;
    let jobs: Vec<(&str, &[u8])> = vec![
        ("JOB-1", b"one"),
        ("JOB-0", b"again"),
        ("JOB-2", b""),
        ("JOB-1", b"twice in one batch"),
    ];
    let delayed = EnqueueOptions {
        max_attempts: 5,
        delay_ms: 7,
    };
    let got = t.batch.at(NOW).enqueue_batch(&jobs, delayed).await.unwrap();
    let mut singles = Vec::new();
    for (id, payload) in &jobs {
        singles.push(
            t.single
                .at(NOW)
                .enqueue(id, payload, delayed)
                .await
                .unwrap(),
        );
    }
    let model = t.model.enqueue_batch(&jobs, 5, 7, NOW).unwrap();
    use Enqueued::{Duplicate, Enqueued as Admitted};
    assert_eq!(got, vec![Admitted, Duplicate, Admitted, Duplicate]);
    assert_eq!(got, singles);
    assert_eq!(got, model);
    t.assert_same_state().await;
    let s = snap(&t.batch).await;
    assert_eq!(
        s.rows["JOB-1"].payload, b"one",
        "the duplicate changed nothing"
    );
    assert_eq!(s.pending["JOB-1"], NOW + 7);
    assert_eq!(s.rows["JOB-0"].max_attempts, 3);
}

async fn lease_batch_takes_the_jobs_successive_leases_take_in_their_order(c: Ctx) {
    let mut t = Trio::new(&c).await;
    for (id, delay_ms) in [
        ("JOB-e", 0),
        ("JOB-late", 500),
        ("JOB-b", 0),
        ("JOB-d", 3),
        ("JOB-a", 3),
    ] {
        t.enqueue(
            id,
            EnqueueOptions {
                max_attempts: 3,
                delay_ms,
            },
        )
        .await;
    }
    // At NOW + 3 four jobs are ready; ask for three, then for ten, then again.
    let now = NOW + 3;
    for count in [3u64, 10, 10] {
        let got = t.batch.at(now).lease_batch("w1", 100, count).await.unwrap();
        let mut singles = Vec::new();
        for _ in 0..count {
            match t.single.at(now).lease("w1", 100).await.unwrap() {
                Some(l) => singles.push(l),
                None => break,
            }
        }
        let model = t.model.lease_batch("w1", 100, count, now).unwrap();
        assert_eq!(got, singles, "count {count}");
        assert_eq!(got, model, "count {count}");
        t.assert_same_state().await;
    }
    let s = snap(&t.batch).await;
    assert_eq!(s.active.len(), 4);
    assert_eq!(s.pending.keys().collect::<Vec<_>>(), ["JOB-late"]);
    // Reaped and leased again: the batch carries the next tokens.
    t.reap(now + 100).await;
    let again = t
        .batch
        .at(now + 100)
        .lease_batch("w2", 10, 2)
        .await
        .unwrap();
    let model = t.model.lease_batch("w2", 10, 2, now + 100).unwrap();
    assert_eq!(again, model);
    assert_eq!(
        again
            .iter()
            .map(|l| (l.id.as_str(), l.token))
            .collect::<Vec<_>>(),
        [("JOB-a", 2), ("JOB-b", 2)],
        "equal scores are taken in id order"
    );
}

async fn a_lease_batch_on_the_server_clock_gives_every_lease_one_deadline(c: Ctx) {
    let q = c.queue.on_server_clock();
    let jobs: Vec<(String, Vec<u8>)> = (0..50).map(|i| (format!("JOB-{i:02}"), vec![])).collect();
    q.enqueue_batch(&jobs, OPTS).await.unwrap();
    let t0 = q.server_time_ms().await.unwrap();
    let leases = q.lease_batch("w1", 60_000, 50).await.unwrap();
    let t1 = q.server_time_ms().await.unwrap();
    assert_eq!(leases.len(), 50);
    let deadline = leases[0].deadline_ms;
    assert!((t0 + 60_000..=t1 + 60_000).contains(&deadline));
    assert!(leases
        .iter()
        .all(|l| l.deadline_ms == deadline && l.token == 1));
    let pairs: Vec<(&str, u64)> = leases.iter().map(|l| (l.id.as_str(), l.token)).collect();
    let settled = q.complete_batch(&pairs).await.unwrap();
    assert!(settled.iter().all(|s| *s == Settled::Settled));
    let s = snap(&q).await;
    assert_eq!((s.done.len(), s.active.len(), s.pending.len()), (50, 0, 0));
}

async fn complete_batch_fences_each_pair_on_its_own_token_like_successive_completes(c: Ctx) {
    let mut t = Trio::new(&c).await;
    for id in ["JOB-a", "JOB-b", "JOB-c", "JOB-d"] {
        t.enqueue(id, OPTS).await;
    }
    let a = t.lease(50, NOW).await; // JOB-a, token 1, until NOW + 50
    for _ in 0..3 {
        t.lease(1_000, NOW).await; // b, c, d with token 1
    }
    t.reap(NOW + 50).await; // only JOB-a's lease has expired
    assert_eq!(t.lease(1_000, NOW + 50).await, a); // JOB-a again, token 2
    t.complete("JOB-b", 1).await;
    let pairs: Vec<(&str, u64)> = vec![
        ("JOB-a", 1),    // stale: fenced by token 2
        ("JOB-a", 2),    // current: settled
        ("JOB-b", 1),    // done with this token: already settled
        ("JOB-c", 1),    // settled
        ("JOB-c", 1),    // the same pair again within the batch: already settled
        ("JOB-none", 1), // missing
        ("JOB-d", 5),    // a token from the future: fenced
        ("JOB-a", 1),    // stale against a done job: still fenced
    ];
    let got = t.batch.complete_batch(&pairs).await.unwrap();
    let mut singles = Vec::new();
    for (id, token) in &pairs {
        singles.push(t.single.complete(id, *token).await.unwrap());
    }
    let model = t.model.complete_batch(&pairs).unwrap();
    let fenced = |current, state| Settled::Fenced { current, state };
    assert_eq!(
        got,
        vec![
            fenced(2, JobState::Active),
            Settled::Settled,
            Settled::AlreadySettled,
            Settled::Settled,
            Settled::AlreadySettled,
            Settled::Missing,
            fenced(1, JobState::Active),
            fenced(2, JobState::Done),
        ]
    );
    assert_eq!(got, singles);
    assert_eq!(got, model);
    t.assert_same_state().await;
}

async fn fail_batch_fences_each_pair_on_its_own_token_like_successive_fails(c: Ctx) {
    let mut t = Trio::new(&c).await;
    t.enqueue("JOB-a", OPTS).await;
    t.enqueue(
        "JOB-b",
        EnqueueOptions {
            max_attempts: 1,
            delay_ms: 0,
        },
    )
    .await;
    t.enqueue("JOB-c", OPTS).await;
    t.enqueue("JOB-d", OPTS).await;
    t.lease(50, NOW).await; // JOB-a, token 1, until NOW + 50
    for _ in 0..3 {
        t.lease(1_000, NOW).await;
    }
    t.reap(NOW + 50).await;
    t.lease(1_000, NOW + 50).await; // JOB-a, token 2
    t.complete("JOB-d", 1).await;
    let pairs: Vec<(&str, u64)> = vec![
        ("JOB-a", 1),    // stale: fenced
        ("JOB-a", 2),    // requeued
        ("JOB-b", 1),    // its last attempt: dead
        ("JOB-c", 1),    // requeued
        ("JOB-c", 1),    // again within the batch: now pending, fenced
        ("JOB-d", 1),    // done: fenced
        ("JOB-none", 1), // missing
    ];
    let now = NOW + 60;
    let got = t.batch.at(now).fail_batch(&pairs, 25).await.unwrap();
    let mut singles = Vec::new();
    for (id, token) in &pairs {
        singles.push(t.single.at(now).fail(id, *token, 25).await.unwrap());
    }
    let model = t.model.fail_batch(&pairs, 25, now).unwrap();
    let fenced = |current, state| Failed::Fenced { current, state };
    let requeued = Failed::Requeued {
        ready_at_ms: now + 25,
    };
    assert_eq!(
        got,
        vec![
            fenced(2, JobState::Active),
            requeued,
            Failed::Dead,
            requeued,
            fenced(1, JobState::Pending),
            fenced(1, JobState::Done),
            Failed::Missing,
        ]
    );
    assert_eq!(got, singles);
    assert_eq!(got, model);
    t.assert_same_state().await;
    assert_eq!(snap(&t.batch).await.dead["JOB-b"], now);
}

/// Asserts that a client refusal and the model's refusal carry the same code.
fn same_refusal(op: &str, got: QueueError, model: ModelError) {
    let code = match &got {
        QueueError::Kind { .. } => "EMQKIND",
        QueueError::BadArgument { .. } => "EMQARG",
        other => panic!("{op}: expected a refusal, got {other}"),
    };
    assert_eq!(code, model.code, "{op}: server {got} vs model {model}");
}

async fn a_refused_batch_writes_nothing_even_when_its_first_entries_are_valid(c: Ctx) {
    let mut t = Trio::new(&c).await;
    for id in ["JOB-a", "JOB-b"] {
        t.enqueue(id, OPTS).await;
    }
    let a = t.lease(1_000, NOW).await;
    let q = t.batch.at(NOW);
    let m = &mut t.model;
    let before = common::keyspace(&q).await;
    let model_before = m.clone();
    let long_id = format!("JOB{}", "x".repeat(510));
    let too_many: Vec<(String, Vec<u8>)> =
        (0..1_001).map(|i| (format!("JOB-n{i}"), vec![])).collect();
    let none: Vec<(&str, &[u8])> = Vec::new();

    let enqueues: Vec<(&str, Vec<Job>, EnqueueOptions)> = vec![
        (
            "unbranded id second",
            vec![("JOB-new".into(), vec![]), ("job-2".into(), vec![])],
            OPTS,
        ),
        (
            "long id second",
            vec![("JOB-new".into(), vec![]), (long_id.clone(), vec![])],
            OPTS,
        ),
        (
            "max_attempts 0",
            vec![("JOB-new".into(), vec![])],
            EnqueueOptions {
                max_attempts: 0,
                delay_ms: 0,
            },
        ),
        ("too many", too_many.clone(), OPTS),
    ];
    for (why, jobs, options) in enqueues {
        let got = q.enqueue_batch(&jobs, options).await.unwrap_err();
        let model = m
            .enqueue_batch(&jobs, options.max_attempts, options.delay_ms, NOW)
            .unwrap_err();
        same_refusal(why, got, model);
    }
    let got = q.enqueue_batch(&none, OPTS).await.unwrap_err();
    same_refusal(
        "empty enqueue",
        got,
        m.enqueue_batch(&none, 3, 0, NOW).unwrap_err(),
    );

    for (why, worker, lease_ms, count) in [
        ("count 0", "w", 100, 0),
        ("count 1001", "w", 100, 1_001),
        ("lease_ms 0", "w", 0, 1),
        ("empty worker", "", 100, 1),
    ] {
        let got = q.lease_batch(worker, lease_ms, count).await.unwrap_err();
        let model = m.lease_batch(worker, lease_ms, count, NOW).unwrap_err();
        same_refusal(why, got, model);
    }

    let settles: Vec<(&str, Vec<(&str, u64)>)> = vec![
        ("unbranded id second", vec![(a.as_str(), 1), ("job-b", 1)]),
        ("token 0 second", vec![(a.as_str(), 1), ("JOB-b", 0)]),
        ("empty", vec![]),
    ];
    for (why, pairs) in &settles {
        let got = q.complete_batch(pairs).await.unwrap_err();
        same_refusal(why, got, m.complete_batch(pairs).unwrap_err());
        let got = q.fail_batch(pairs, 0).await.unwrap_err();
        same_refusal(why, got, m.fail_batch(pairs, 0, NOW).unwrap_err());
    }
    let valid = [(a.as_str(), 1)];
    let got = q
        .fail_batch(&valid, 1_000_000_000_000_001)
        .await
        .unwrap_err();
    same_refusal(
        "retry_delay_ms too big",
        got,
        m.fail_batch(&valid, 1_000_000_000_000_001, NOW)
            .unwrap_err(),
    );
    let many: Vec<(String, u64)> = too_many.iter().map(|(id, _)| (id.clone(), 1)).collect();
    let got = q.complete_batch(&many).await.unwrap_err();
    same_refusal("1001 pairs", got, m.complete_batch(&many).unwrap_err());

    assert_eq!(
        common::keyspace(&q).await,
        before,
        "a refused batch wrote something"
    );
    assert_eq!(*m, model_before, "a refused batch changed the model");
}

/// Seeded walks of batch calls of random sizes (and of `complete_and_lease`)
/// over a small id space, at advancing logical time, compared with the model
/// after every step.
async fn seeded_batch_walks_refine_the_model_step_by_step(c: Ctx) {
    for seed in 0..4u64 {
        let q = c.queue.at(NOW);
        q.clear().await.unwrap();
        let mut m = Model::new();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut now = NOW;
        let mut held: Vec<(String, u64)> = Vec::new();
        for step in 0..60 {
            let q = q.at(now);
            let n = rng.random_range(1..6usize);
            let why = format!("seed {seed} step {step}");
            match rng.random_range(0..6u8) {
                0 => {
                    let jobs: Vec<(String, Vec<u8>)> = (0..n)
                        .map(|_| (format!("JOB-{}", rng.random_range(0..12u8)), vec![b'p']))
                        .collect();
                    let options = EnqueueOptions {
                        max_attempts: rng.random_range(1..4),
                        delay_ms: rng.random_range(0..3),
                    };
                    let got = q.enqueue_batch(&jobs, options).await.unwrap();
                    let want = m
                        .enqueue_batch(&jobs, options.max_attempts, options.delay_ms, now)
                        .unwrap();
                    assert_eq!(got, want, "{why}");
                }
                1 => {
                    let lease_ms = rng.random_range(1..5);
                    let got = q.lease_batch("w", lease_ms, n as u64).await.unwrap();
                    let want = m.lease_batch("w", lease_ms, n as u64, now).unwrap();
                    assert_eq!(got, want, "{why}");
                    held.extend(got.into_iter().map(|l| (l.id, l.token)));
                }
                2 | 3 if !held.is_empty() => {
                    // Settle some held leases, maybe stale, maybe twice.
                    let pairs: Vec<(String, u64)> = (0..n)
                        .map(|_| held[rng.random_range(0..held.len())].clone())
                        .collect();
                    if rng.random_bool(0.5) {
                        let got = q.complete_batch(&pairs).await.unwrap();
                        assert_eq!(got, m.complete_batch(&pairs).unwrap(), "{why}");
                    } else {
                        let got = q.fail_batch(&pairs, 1).await.unwrap();
                        assert_eq!(got, m.fail_batch(&pairs, 1, now).unwrap(), "{why}");
                    }
                }
                5 if !held.is_empty() => {
                    // Settle one held lease (maybe stale) and take the next.
                    let (id, token) = held[rng.random_range(0..held.len())].clone();
                    let lease_ms = rng.random_range(1..5);
                    let got = q
                        .complete_and_lease(&id, token, "w", lease_ms)
                        .await
                        .unwrap();
                    assert_eq!(
                        got.settled.unwrap(),
                        m.complete(&id, token).unwrap(),
                        "{why}"
                    );
                    let next = got.next.unwrap();
                    assert_eq!(next, m.lease("w", lease_ms, now).unwrap(), "{why}");
                    held.extend(next.into_iter().map(|l| (l.id, l.token)));
                }
                _ => {
                    now += rng.random_range(1..4);
                    let got = q.at(now).reap(100).await.unwrap();
                    assert_eq!(got, m.reap(100, now).unwrap(), "{why}");
                }
            }
            assert_eq!(
                snap(&q).await,
                m.snapshot(),
                "{why}: the server disagrees with the model"
            );
        }
    }
}

/// Asserts that one half of `complete_and_lease` answered what the same
/// single call answered on the other queue, and what the model answered.
fn same_half<T: PartialEq + std::fmt::Debug>(
    what: &str,
    fused: Result<T, QueueError>,
    single: Result<T, QueueError>,
    model: Result<T, ModelError>,
) {
    match (fused, single, model) {
        (Ok(f), Ok(s), Ok(m)) => {
            assert_eq!(f, s, "{what}: fused vs single call");
            assert_eq!(f, m, "{what}: fused vs model");
        }
        (Err(f), Err(s), Err(m)) => {
            assert_eq!(f.to_string(), s.to_string(), "{what}: fused vs single call");
            same_refusal(what, f, m);
        }
        (f, s, m) => panic!("{what}: fused {f:?}, single {s:?}, model {m:?}"),
    }
}

/// `complete_and_lease` on every kind of complete answer (settled, already
/// settled, fenced, missing, refused) and every kind of lease answer (a job,
/// none ready): each half answers what `complete`, then `lease`, answer on
/// a second queue and in the model, and the three queues end the same.
async fn complete_and_lease_answers_what_complete_then_lease_answer_in_every_case(c: Ctx) {
    let mut t = Trio::new(&c).await;
    for id in ["JOB-a", "JOB-b", "JOB-c"] {
        t.enqueue(id, OPTS).await;
    }
    let a = t.lease(1_000, NOW).await;
    assert_eq!(a, "JOB-a");
    let cases: [(&str, u64, &str); 6] = [
        ("JOB-a", 1, "settled; leases JOB-b"),
        ("JOB-a", 1, "already settled; leases JOB-c"),
        ("JOB-b", 9, "fenced (a token from the future); none ready"),
        ("JOB-none", 1, "missing; none ready"),
        (
            "job-unbranded",
            1,
            "refused with EMQKIND; the lease still runs",
        ),
        ("JOB-b", 1, "settled; none ready"),
    ];
    for (id, token, what) in cases {
        let fused = t
            .batch
            .at(NOW)
            .complete_and_lease(id, token, "w1", 1_000)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let single = t.single.at(NOW);
        let settled = single.complete(id, token).await;
        let next: Result<Option<Lease>, QueueError> = single.lease("w1", 1_000).await;
        let model_settled = t.model.complete(id, token);
        let model_next = t.model.lease("w1", 1_000, NOW);
        same_half(
            &format!("{what}: complete"),
            fused.settled,
            settled,
            model_settled,
        );
        same_half(&format!("{what}: lease"), fused.next, next, model_next);
        t.assert_same_state().await;
    }
    let s = snap(&t.batch).await;
    assert_eq!((s.done.len(), s.active.len()), (2, 1), "{s:#?}");
}

/// A lease half refused (the pending index holds a string) does not undo a
/// complete half that settled: the two halves are two calls in one round
/// trip, not one transaction. The complete is applied; the lease answers
/// the WRONGTYPE a lone lease answers.
async fn a_refused_lease_half_leaves_the_complete_half_done_as_two_calls_would(c: Ctx) {
    let q = c.queue.at(NOW);
    q.enqueue("JOB-a", b"a", OPTS).await.unwrap();
    let lease = q.lease("w1", 1_000).await.unwrap().expect("JOB-a is ready");
    let keys = q.keys().clone();
    let mut conn = q.connection();
    // JOB-a has left the pending index, which is gone now; a string takes its key.
    let _: () = redis::cmd("SET")
        .arg(&keys.pending)
        .arg("not a zset")
        .query_async(&mut conn)
        .await
        .unwrap();
    let fused = q
        .complete_and_lease("JOB-a", lease.token, "w1", 1_000)
        .await
        .unwrap();
    assert_eq!(fused.settled.unwrap(), Settled::Settled);
    match fused.next {
        Err(QueueError::Server { code, message, .. }) => {
            assert_eq!(code, "WRONGTYPE", "{message}");
            assert!(message.contains("nothing was written"), "{message}");
        }
        other => panic!("the lease half should be refused with WRONGTYPE, got {other:?}"),
    }
    let lone = q.lease("w1", 1_000).await.unwrap_err();
    assert!(lone.to_string().contains("WRONGTYPE"), "{lone}");
    let state: String = redis::cmd("HGET")
        .arg(&keys.jobs)
        .arg("~JOB-a")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(state, format!("{} done", lease.token));
}
