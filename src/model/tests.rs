//! Claims about the model, each checked against what the Lua scripts do.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use proptest::prelude::*;

use super::*;

const HOUR_MS: u64 = 3_600_000;

fn hash_of(model: &Model) -> u64 {
    let mut hasher = DefaultHasher::new();
    model.hash(&mut hasher);
    hasher.finish()
}

/// A model after `enqueue(id, b"p", max_attempts, 0, 0)` for each id.
fn with_jobs(ids: &[&str], max_attempts: u64) -> Model {
    let mut m = Model::new();
    for id in ids {
        assert_eq!(
            m.enqueue(id, b"p", max_attempts, 0, 0),
            Ok(Enqueued::Enqueued)
        );
    }
    m
}

fn leased(m: &mut Model, now_ms: u64) -> Lease {
    m.lease("w1", 1_000, now_ms).unwrap().expect("a ready job")
}

fn sound(m: &Model) {
    m.check_structure().unwrap();
    assert_eq!(m.snapshot().structure_problems(), Vec::<String>::new());
}

// ---- validation -----------------------------------------------------------

#[test]
fn an_unbranded_id_is_refused_with_emqkind_by_every_operation_that_takes_an_id() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let before = m.clone();
    for id in ["", "job-1", "JO", "XJOB", " JOB-1"] {
        assert_eq!(m.enqueue(id, b"p", 3, 0, 0).unwrap_err().code, "EMQKIND");
        assert_eq!(m.complete(id, 1).unwrap_err().code, "EMQKIND");
        assert_eq!(m.fail(id, 1, 0, 0).unwrap_err().code, "EMQKIND");
        assert_eq!(m.extend(id, 1, 1, 0).unwrap_err().code, "EMQKIND");
    }
    assert_eq!(
        m.enqueue("job-\"1\"", b"p", 3, 0, 0).unwrap_err().message,
        "EMQKIND job id must be JOB-namespaced, got \"job-\\\"1\\\"\""
    );
    assert_eq!(m, before);
}

#[test]
fn an_out_of_range_argument_is_refused_with_emqarg_and_changes_nothing() {
    let mut m = with_jobs(&["JOB-1", "JOB-2"], 3);
    let lease = leased(&mut m, 0);
    let before = m.clone();
    let id = lease.id.as_str();
    let long_id = format!("JOB{}", "x".repeat(510));
    let long_worker = "w".repeat(257);
    let refusals: Vec<(&str, Result<(), ModelError>)> = vec![
        ("long id", m.enqueue(&long_id, b"p", 3, 0, 0).map(drop)),
        (
            "max_attempts 0",
            m.enqueue("JOB-9", b"p", 0, 0, 0).map(drop),
        ),
        (
            "max_attempts big",
            m.enqueue("JOB-9", b"p", 1_000_001, 0, 0).map(drop),
        ),
        (
            "delay big",
            m.enqueue("JOB-9", b"p", 3, MS_MAX + 1, 0).map(drop),
        ),
        (
            "enqueue now big",
            m.enqueue("JOB-9", b"p", 3, 0, MS_MAX + 1).map(drop),
        ),
        ("empty worker", m.lease("", 1, 0).map(drop)),
        ("long worker", m.lease(&long_worker, 1, 0).map(drop)),
        ("lease_ms 0", m.lease("w", 0, 0).map(drop)),
        ("lease_ms big", m.lease("w", MS_MAX + 1, 0).map(drop)),
        ("lease now big", m.lease("w", 1, MS_MAX + 1).map(drop)),
        ("complete token 0", m.complete(id, 0).map(drop)),
        ("complete token big", m.complete(id, MS_MAX + 1).map(drop)),
        ("fail token 0", m.fail(id, 0, 0, 0).map(drop)),
        ("fail delay big", m.fail(id, 1, MS_MAX + 1, 0).map(drop)),
        ("fail now big", m.fail(id, 1, 0, MS_MAX + 1).map(drop)),
        ("extend token 0", m.extend(id, 0, 1, 0).map(drop)),
        ("extend lease_ms 0", m.extend(id, 1, 0, 0).map(drop)),
        ("extend now big", m.extend(id, 1, 1, MS_MAX + 1).map(drop)),
        ("reap limit 0", m.reap(0, 0).map(drop)),
        ("reap limit big", m.reap(100_001, 0).map(drop)),
        ("reap now big", m.reap(1, MS_MAX + 1).map(drop)),
    ];
    for (what, result) in refusals {
        assert_eq!(result.unwrap_err().code, "EMQARG", "{what}");
    }
    assert_eq!(m, before);
    assert_eq!(m.snapshot(), before.snapshot());
}

#[test]
fn the_largest_accepted_arguments_are_accepted() {
    let mut m = Model::new();
    let id = format!("JOB{}", "x".repeat(509));
    assert_eq!(
        m.enqueue(&id, b"", MAX_ATTEMPTS_MAX, MS_MAX, MS_MAX),
        Ok(Enqueued::Enqueued)
    );
    assert_eq!(m.job(&id).unwrap().score_ms(), Some(2 * MS_MAX));
    assert_eq!(m.lease(&"w".repeat(256), MS_MAX, MS_MAX), Ok(None));
    assert_eq!(m.reap(REAP_LIMIT_MAX, MS_MAX), Ok(vec![]));
    assert_eq!(
        m.complete(&id, MS_MAX),
        Ok(Settled::Fenced {
            current: 0,
            state: JobState::Pending
        })
    );
    sound(&m);
}

#[test]
fn the_first_failing_check_decides_the_error() {
    let mut m = Model::new();
    // The id is checked before any number.
    assert_eq!(
        m.enqueue("nope", b"p", 0, 0, 0).unwrap_err().code,
        "EMQKIND"
    );
    assert_eq!(m.complete("nope", 0).unwrap_err().code, "EMQKIND");
    // Then the arguments in script order.
    assert_eq!(
        m.enqueue("JOB-1", b"p", 0, MS_MAX + 1, 0)
            .unwrap_err()
            .message,
        "EMQARG max_attempts must be in [1, 1000000], got 0"
    );
    assert_eq!(
        m.lease("", 0, 0).unwrap_err().message,
        "EMQARG worker must be 1 to 256 bytes"
    );
    assert_eq!(
        m.lease("w", 0, MS_MAX + 1).unwrap_err().message,
        "EMQARG lease_ms must be in [1, 1000000000000000], got 0"
    );
    assert_eq!(
        m.fail("JOB-1", 1, MS_MAX + 1, MS_MAX + 1)
            .unwrap_err()
            .message,
        "EMQARG retry_delay_ms must be in [0, 1000000000000000], got 1000000000000001"
    );
    assert_eq!(
        m.reap(0, MS_MAX + 1).unwrap_err().message,
        "EMQARG limit must be in [1, 100000], got 0"
    );
    assert_eq!(
        m.reap(1, MS_MAX + 1).unwrap_err().message,
        "EMQARG now_ms must be in [0, 1000000000000000], got 1000000000000001"
    );
    assert_eq!(m, Model::new());
}

#[test]
fn arguments_are_checked_before_the_job_is_looked_up() {
    let mut m = with_jobs(&["JOB-1"], 1);
    // A duplicate with a bad argument is a refusal, not a duplicate.
    assert_eq!(
        m.enqueue("JOB-1", b"p", 0, 0, 0).unwrap_err().code,
        "EMQARG"
    );
    // An unknown job with a bad token is a refusal, not missing.
    assert_eq!(m.complete("JOB-404", 0).unwrap_err().code, "EMQARG");
    assert_eq!(
        m.fail("JOB-404", 1, 0, MS_MAX + 1).unwrap_err().code,
        "EMQARG"
    );
    assert_eq!(m.extend("JOB-404", 1, 0, 0).unwrap_err().code, "EMQARG");
}

// ---- enqueue ----------------------------------------------------------------

#[test]
fn an_enqueued_job_is_pending_at_now_plus_delay_with_no_attempts() {
    let mut m = Model::new();
    assert_eq!(
        m.enqueue("JOB-1", b"hello", 5, 250, 1_000),
        Ok(Enqueued::Enqueued)
    );
    let job = m.job("JOB-1").unwrap();
    assert_eq!(job.state(), JobState::Pending);
    assert_eq!(job.score_ms(), Some(1_250));
    assert_eq!(job.attempts(), 0);
    assert_eq!(job.max_attempts(), 5);
    assert_eq!(job.payload(), b"hello");
    assert_eq!((job.worker(), job.deadline_ms()), (None, None));
    sound(&m);
}

#[test]
fn a_duplicate_enqueue_is_refused_and_changes_nothing() {
    let mut m = Model::new();
    m.enqueue("JOB-1", b"first", 2, 10, 0).unwrap();
    let before = m.clone();
    assert_eq!(
        m.enqueue("JOB-1", b"second", 9, 0, 5),
        Ok(Enqueued::Duplicate)
    );
    assert_eq!(m, before);
    assert_eq!(m.job("JOB-1").unwrap().payload(), b"first");
}

#[test]
fn a_done_or_dead_job_still_holds_its_id() {
    let mut m = with_jobs(&["JOB-1", "JOB-2"], 1);
    let a = leased(&mut m, 0);
    let b = leased(&mut m, 0);
    assert_eq!(m.complete(&a.id, a.token), Ok(Settled::Settled));
    assert_eq!(m.fail(&b.id, b.token, 0, 0), Ok(Failed::Dead));
    let before = m.clone();
    assert_eq!(m.enqueue("JOB-1", b"p", 1, 0, 0), Ok(Enqueued::Duplicate));
    assert_eq!(m.enqueue("JOB-2", b"p", 1, 0, 0), Ok(Enqueued::Duplicate));
    assert_eq!(m, before);
}

#[test]
fn an_empty_payload_and_arbitrary_bytes_survive_a_lease() {
    let mut m = Model::new();
    m.enqueue("JOB-e", b"", 1, 0, 0).unwrap();
    m.enqueue("JOB-f", &[0, 255, b'\n'], 1, 0, 0).unwrap();
    assert_eq!(leased(&mut m, 0).payload, b"");
    assert_eq!(leased(&mut m, 0).payload, vec![0, 255, b'\n']);
}

// ---- lease ------------------------------------------------------------------

#[test]
fn an_empty_queue_leases_nothing_and_changes_nothing() {
    let mut m = Model::new();
    assert_eq!(m.lease("w1", 1_000, 0), Ok(None));
    assert_eq!(m, Model::new());
}

#[test]
fn a_delayed_job_is_leased_once_its_ready_at_is_reached_and_not_before() {
    let mut m = Model::new();
    m.enqueue("JOB-1", b"p", 3, 100, 1_000).unwrap();
    let before = m.clone();
    assert_eq!(m.lease("w1", 10, 1_099), Ok(None));
    assert_eq!(m, before);
    let lease = m.lease("w1", 10, 1_100).unwrap().unwrap();
    assert_eq!(lease.id, "JOB-1");
}

#[test]
fn the_lowest_ready_at_is_leased_first() {
    let mut m = Model::new();
    m.enqueue("JOB-a", b"a", 3, 30, 0).unwrap();
    m.enqueue("JOB-b", b"b", 3, 10, 0).unwrap();
    m.enqueue("JOB-c", b"c", 3, 20, 0).unwrap();
    let order: Vec<String> = (0..3).map(|_| leased(&mut m, 100).id).collect();
    assert_eq!(order, ["JOB-b", "JOB-c", "JOB-a"]);
}

#[test]
fn ties_in_pending_are_broken_by_id_in_byte_order() {
    // Byte order, as a Valkey sorted set orders equal scores: '1' < '9',
    // 'Z' < 'a', and a prefix sorts before its extensions.
    let mut m = with_jobs(&["JOBa", "JOB-9", "JOBZ", "JOB-10", "JOB-1"], 3);
    let order: Vec<String> = (0..5).map(|_| leased(&mut m, 0).id).collect();
    assert_eq!(order, ["JOB-1", "JOB-10", "JOB-9", "JOBZ", "JOBa"]);
}

#[test]
fn a_lease_increments_attempts_and_the_new_count_is_the_token() {
    let mut m = with_jobs(&["JOB-1"], 3);
    for expected in 1..=3 {
        let lease = leased(&mut m, 0);
        assert_eq!(lease.token, expected);
        assert_eq!(m.job("JOB-1").unwrap().attempts(), expected);
        if expected < 3 {
            assert_eq!(
                m.fail("JOB-1", lease.token, 0, 0),
                Ok(Failed::Requeued { ready_at_ms: 0 })
            );
        }
    }
}

#[test]
fn a_lease_records_worker_and_deadline_and_carries_the_payload() {
    let mut m = Model::new();
    m.enqueue("JOB-1", b"body", 3, 0, 0).unwrap();
    let lease = m.lease("worker-7", 30_000, 500).unwrap().unwrap();
    assert_eq!(
        lease,
        Lease {
            id: "JOB-1".into(),
            token: 1,
            deadline_ms: 30_500,
            payload: b"body".to_vec()
        }
    );
    let job = m.job("JOB-1").unwrap();
    assert_eq!(job.state(), JobState::Active);
    assert_eq!(job.worker(), Some("worker-7"));
    assert_eq!(job.deadline_ms(), Some(30_500));
    assert_eq!(job.score_ms(), Some(30_500));
    sound(&m);
}

#[test]
fn only_pending_jobs_are_leased() {
    let mut m = with_jobs(&["JOB-1"], 3);
    leased(&mut m, 0);
    assert_eq!(m.lease("w2", 1_000, HOUR_MS), Ok(None));
}

// ---- complete ---------------------------------------------------------------

#[test]
fn the_current_token_settles_an_active_job() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let lease = leased(&mut m, 0);
    assert_eq!(m.complete("JOB-1", lease.token), Ok(Settled::Settled));
    let job = m.job("JOB-1").unwrap();
    assert_eq!(job.state(), JobState::Done);
    assert_eq!(
        (job.worker(), job.deadline_ms(), job.score_ms()),
        (None, None, None)
    );
    assert_eq!(job.attempts(), 1);
    sound(&m);
}

#[test]
fn a_repeated_ack_with_the_same_token_is_already_settled() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let lease = leased(&mut m, 0);
    m.complete("JOB-1", lease.token).unwrap();
    let before = m.clone();
    assert_eq!(
        m.complete("JOB-1", lease.token),
        Ok(Settled::AlreadySettled)
    );
    assert_eq!(
        m.complete("JOB-1", lease.token),
        Ok(Settled::AlreadySettled)
    );
    assert_eq!(m, before);
}

#[test]
fn an_ack_of_a_done_job_with_another_token_is_fenced_as_done() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let first = leased(&mut m, 0);
    m.fail("JOB-1", first.token, 0, 0).unwrap();
    let second = leased(&mut m, 0);
    m.complete("JOB-1", second.token).unwrap();
    let before = m.clone();
    for token in [first.token, second.token + 1] {
        assert_eq!(
            m.complete("JOB-1", token),
            Ok(Settled::Fenced {
                current: 2,
                state: JobState::Done
            })
        );
    }
    assert_eq!(m, before);
}

#[test]
fn a_stale_token_is_fenced_and_changes_nothing() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let stale = leased(&mut m, 0); // deadline 1_000
    assert_eq!(m.reap(10, 1_000).unwrap().len(), 1);
    let fresh = m.lease("w2", 1_000, 1_000).unwrap().unwrap();
    assert_eq!((stale.token, fresh.token), (1, 2));
    let before = m.clone();
    let fenced = (2, JobState::Active);
    assert_eq!(
        m.complete("JOB-1", stale.token),
        Ok(Settled::Fenced {
            current: fenced.0,
            state: fenced.1
        })
    );
    assert_eq!(
        m.fail("JOB-1", stale.token, 0, 1_000),
        Ok(Failed::Fenced {
            current: fenced.0,
            state: fenced.1
        })
    );
    assert_eq!(
        m.extend("JOB-1", stale.token, 1_000, 1_000),
        Ok(Extended::Fenced {
            current: fenced.0,
            state: fenced.1
        })
    );
    assert_eq!(m, before);
    assert_eq!(m.job("JOB-1").unwrap().worker(), Some("w2"));
}

#[test]
fn a_token_from_the_future_is_fenced() {
    let mut m = with_jobs(&["JOB-1"], 3);
    leased(&mut m, 0);
    let before = m.clone();
    assert_eq!(
        m.complete("JOB-1", 2),
        Ok(Settled::Fenced {
            current: 1,
            state: JobState::Active
        })
    );
    assert_eq!(m, before);
}

#[test]
fn the_current_token_of_a_reaped_job_is_fenced_with_its_pending_state() {
    // complete checks attempts == token first, then the state: a job that
    // went back to pending keeps its attempts, so the token still matches,
    // but pending is neither active nor done.
    let mut m = with_jobs(&["JOB-1"], 3);
    let lease = leased(&mut m, 0);
    m.reap(1, 1_000).unwrap();
    let before = m.clone();
    let fenced = (1, JobState::Pending);
    assert_eq!(
        m.complete("JOB-1", lease.token),
        Ok(Settled::Fenced {
            current: fenced.0,
            state: fenced.1
        })
    );
    assert_eq!(
        m.fail("JOB-1", lease.token, 0, 0),
        Ok(Failed::Fenced {
            current: fenced.0,
            state: fenced.1
        })
    );
    assert_eq!(
        m.extend("JOB-1", lease.token, 1, 0),
        Ok(Extended::Fenced {
            current: fenced.0,
            state: fenced.1
        })
    );
    assert_eq!(m, before);
}

#[test]
fn a_dead_job_cannot_be_settled_even_with_its_last_token() {
    let mut m = with_jobs(&["JOB-1"], 1);
    let lease = leased(&mut m, 0);
    assert_eq!(m.reap(1, 1_000).unwrap()[0].to, JobState::Dead);
    let before = m.clone();
    assert_eq!(
        m.complete("JOB-1", lease.token),
        Ok(Settled::Fenced {
            current: 1,
            state: JobState::Dead
        })
    );
    assert_eq!(m, before);
}

#[test]
fn a_pending_job_never_leased_is_fenced_with_zero_attempts() {
    let mut m = with_jobs(&["JOB-1"], 1);
    assert_eq!(
        m.complete("JOB-1", 1),
        Ok(Settled::Fenced {
            current: 0,
            state: JobState::Pending
        })
    );
}

#[test]
fn settling_an_unknown_job_answers_missing_and_changes_nothing() {
    let mut m = with_jobs(&["JOB-1"], 1);
    let before = m.clone();
    assert_eq!(m.complete("JOB-2", 1), Ok(Settled::Missing));
    assert_eq!(m.fail("JOB-2", 1, 0, 0), Ok(Failed::Missing));
    assert_eq!(m.extend("JOB-2", 1, 1, 0), Ok(Extended::Missing));
    assert_eq!(m, before);
}

// ---- fail -------------------------------------------------------------------

#[test]
fn a_fail_below_max_attempts_requeues_after_the_retry_delay() {
    let mut m = with_jobs(&["JOB-1"], 2);
    let lease = leased(&mut m, 100);
    assert_eq!(
        m.fail("JOB-1", lease.token, 50, 200),
        Ok(Failed::Requeued { ready_at_ms: 250 })
    );
    let job = m.job("JOB-1").unwrap();
    assert_eq!(job.state(), JobState::Pending);
    assert_eq!(job.score_ms(), Some(250));
    assert_eq!((job.worker(), job.deadline_ms()), (None, None));
    assert_eq!(job.attempts(), 1);
    assert_eq!(m.lease("w1", 1, 249), Ok(None));
    assert_eq!(leased(&mut m, 250).token, 2);
    sound(&m);
}

#[test]
fn max_attempts_sends_a_job_to_dead() {
    let mut m = with_jobs(&["JOB-1"], 2);
    let first = leased(&mut m, 0);
    m.fail("JOB-1", first.token, 0, 10).unwrap();
    let second = leased(&mut m, 10);
    assert_eq!(m.fail("JOB-1", second.token, 999, 20), Ok(Failed::Dead));
    let job = m.job("JOB-1").unwrap();
    assert_eq!(job.state(), JobState::Dead);
    // The time of death is now; the retry delay plays no part.
    assert_eq!(job.score_ms(), Some(20));
    assert_eq!((job.worker(), job.deadline_ms()), (None, None));
    // Once dead, never leased again.
    assert_eq!(m.lease("w1", 1, MS_MAX), Ok(None));
    sound(&m);
}

#[test]
fn a_retried_fail_after_a_lost_reply_is_fenced_not_repeated() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let lease = leased(&mut m, 0);
    m.fail("JOB-1", lease.token, 5, 0).unwrap();
    let before = m.clone();
    assert_eq!(
        m.fail("JOB-1", lease.token, 5, 0),
        Ok(Failed::Fenced {
            current: 1,
            state: JobState::Pending
        })
    );
    assert_eq!(m, before);
}

#[test]
fn a_fail_on_a_done_job_is_fenced() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let lease = leased(&mut m, 0);
    m.complete("JOB-1", lease.token).unwrap();
    assert_eq!(
        m.fail("JOB-1", lease.token, 0, 0),
        Ok(Failed::Fenced {
            current: 1,
            state: JobState::Done
        })
    );
}

// ---- extend -----------------------------------------------------------------

#[test]
fn an_extend_moves_the_deadline_to_now_plus_lease_even_earlier() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let lease = m.lease("w1", 1_000, 0).unwrap().unwrap();
    assert_eq!(
        m.extend("JOB-1", lease.token, 5_000, 500),
        Ok(Extended::Extended { deadline_ms: 5_500 })
    );
    assert_eq!(m.job("JOB-1").unwrap().deadline_ms(), Some(5_500));
    // now + lease_ms, not the old deadline + lease_ms: it may shrink.
    assert_eq!(
        m.extend("JOB-1", lease.token, 1, 600),
        Ok(Extended::Extended { deadline_ms: 601 })
    );
    let job = m.job("JOB-1").unwrap();
    assert_eq!(job.deadline_ms(), Some(601));
    assert_eq!(job.worker(), Some("w1"));
    assert_eq!(job.attempts(), 1);
    sound(&m);
    assert_eq!(m.reap(1, 600), Ok(vec![]));
    assert_eq!(m.reap(1, 601).unwrap().len(), 1);
}

#[test]
fn an_extend_to_the_same_deadline_changes_nothing() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let lease = m.lease("w1", 1_000, 0).unwrap().unwrap();
    let before = m.clone();
    assert_eq!(
        m.extend("JOB-1", lease.token, 1_000, 0),
        Ok(Extended::Extended { deadline_ms: 1_000 })
    );
    assert_eq!(m, before);
    sound(&m);
}

#[test]
fn an_expired_lease_not_yet_reaped_can_still_be_extended() {
    let mut m = with_jobs(&["JOB-1"], 3);
    let lease = m.lease("w1", 1_000, 0).unwrap().unwrap();
    assert_eq!(
        m.extend("JOB-1", lease.token, 1_000, 5_000),
        Ok(Extended::Extended { deadline_ms: 6_000 })
    );
    assert_eq!(m.reap(10, 5_999), Ok(vec![]));
}

// ---- reap -------------------------------------------------------------------

#[test]
fn the_reaper_never_takes_a_lease_whose_deadline_has_not_passed() {
    let mut m = with_jobs(&["JOB-1"], 3);
    leased(&mut m, 0); // deadline 1_000
    let before = m.clone();
    assert_eq!(m.reap(REAP_LIMIT_MAX, 999), Ok(vec![]));
    assert_eq!(m, before);
}

#[test]
fn the_reaper_takes_a_lease_whose_deadline_is_exactly_now() {
    let mut m = with_jobs(&["JOB-1"], 3);
    leased(&mut m, 0);
    assert_eq!(
        m.reap(1, 1_000),
        Ok(vec![Reaped {
            id: "JOB-1".into(),
            to: JobState::Pending
        }])
    );
}

#[test]
fn the_reaper_takes_expired_leases_by_deadline_then_id_up_to_its_limit() {
    let mut m = with_jobs(&["JOB-a", "JOB-b", "JOB-c", "JOB-d", "JOB-e"], 3);
    // Leased in id order; deadlines: a 300, b 100, c 100, d 200, e 900.
    for lease_ms in [300, 100, 100, 200, 900] {
        m.lease("w", lease_ms, 0).unwrap().unwrap();
    }
    let ids = |reaped: Vec<Reaped>| -> Vec<String> { reaped.into_iter().map(|r| r.id).collect() };
    assert_eq!(ids(m.reap(2, 500).unwrap()), ["JOB-b", "JOB-c"]);
    assert_eq!(ids(m.reap(5, 500).unwrap()), ["JOB-d", "JOB-a"]);
    assert_eq!(ids(m.reap(5, 500).unwrap()), Vec::<String>::new());
    assert_eq!(m.job("JOB-e").unwrap().state(), JobState::Active);
    sound(&m);
}

#[test]
fn a_reaped_job_is_ready_at_once_keeps_its_attempts_and_loses_its_lease() {
    let mut m = Model::new();
    m.enqueue("JOB-1", b"p", 3, 0, 0).unwrap();
    m.enqueue("JOB-2", b"p", 3, 1_500, 0).unwrap();
    leased(&mut m, 0);
    m.reap(1, 1_200).unwrap();
    let job = m.job("JOB-1").unwrap();
    assert_eq!(job.state(), JobState::Pending);
    assert_eq!(job.score_ms(), Some(1_200));
    assert_eq!(job.attempts(), 1);
    assert_eq!((job.worker(), job.deadline_ms()), (None, None));
    // Ready at the reap's now, ahead of a job due later.
    assert_eq!(
        leased(&mut m, 1_200),
        Lease {
            id: "JOB-1".into(),
            token: 2,
            deadline_ms: 2_200,
            payload: b"p".to_vec()
        }
    );
    sound(&m);
}

#[test]
fn max_attempts_sends_a_reaped_job_to_dead_at_the_reaps_now() {
    let mut m = with_jobs(&["JOB-1", "JOB-2"], 1);
    let mut m2 = with_jobs(&["JOB-3"], 2);
    leased(&mut m, 0);
    leased(&mut m2, 0);
    assert_eq!(
        m.reap(1, 4_000),
        Ok(vec![Reaped {
            id: "JOB-1".into(),
            to: JobState::Dead
        }])
    );
    assert_eq!(m.job("JOB-1").unwrap().score_ms(), Some(4_000));
    assert_eq!(m2.reap(1, 4_000).unwrap()[0].to, JobState::Pending);
    sound(&m);
}

// ---- snapshot and identity ----------------------------------------------------

#[test]
fn an_empty_model_reads_back_as_an_empty_queue() {
    assert_eq!(Model::new().snapshot(), Snapshot::default());
}

#[test]
fn the_snapshot_shows_each_job_in_the_index_its_state_names() {
    let mut m = Model::new();
    for id in ["JOB-active", "JOB-dead", "JOB-done", "JOB-pending"] {
        m.enqueue(id, id.as_bytes(), 1, 0, 0).unwrap();
    }
    m.enqueue("JOB-zlater", b"z", 1, 70, 0).unwrap();
    let active = m.lease("wa", 100, 5).unwrap().unwrap();
    let dead = m.lease("wb", 100, 5).unwrap().unwrap();
    let done = m.lease("wc", 100, 5).unwrap().unwrap();
    m.fail(&dead.id, dead.token, 0, 6).unwrap();
    m.complete(&done.id, done.token).unwrap();
    let row = |state, attempts, payload: &str, worker: Option<&str>, deadline_ms| JobRow {
        state: Some(state),
        attempts,
        max_attempts: 1,
        payload: payload.as_bytes().to_vec(),
        worker: worker.map(str::to_owned),
        deadline_ms,
    };
    let expected = Snapshot {
        rows: BTreeMap::from([
            (
                active.id.clone(),
                row(JobState::Active, 1, "JOB-active", Some("wa"), Some(105)),
            ),
            (
                "JOB-dead".into(),
                row(JobState::Dead, 1, "JOB-dead", None, None),
            ),
            (
                "JOB-done".into(),
                row(JobState::Done, 1, "JOB-done", None, None),
            ),
            (
                "JOB-pending".into(),
                row(JobState::Pending, 0, "JOB-pending", None, None),
            ),
            (
                "JOB-zlater".into(),
                row(JobState::Pending, 0, "z", None, None),
            ),
        ]),
        pending: BTreeMap::from([("JOB-pending".into(), 0), ("JOB-zlater".into(), 70)]),
        active: BTreeMap::from([("JOB-active".into(), 105)]),
        done: BTreeSet::from(["JOB-done".into()]),
        dead: BTreeMap::from([("JOB-dead".into(), 6)]),
        foreign: vec![],
        strays: vec![],
    };
    assert_eq!(m.snapshot(), expected);
    for (id, job) in m.jobs() {
        assert_eq!(&job.to_row(), &expected.rows[id]);
    }
    sound(&m);
}

#[test]
fn models_reached_by_different_paths_are_equal_and_hash_equal() {
    let mut a = Model::new();
    a.enqueue("JOB-1", b"x", 2, 0, 0).unwrap();
    a.enqueue("JOB-2", b"y", 2, 5, 0).unwrap();
    let mut b = Model::new();
    b.enqueue("JOB-2", b"y", 2, 0, 5).unwrap();
    b.enqueue("JOB-1", b"x", 2, 0, 0).unwrap();
    assert_eq!(a, b);
    assert_eq!(hash_of(&a), hash_of(&b));
    // Leased and reaped at 7 versus never leased: attempts differ.
    let mut c = a.clone();
    c.lease("w", 1, 6).unwrap().unwrap();
    c.reap(1, 7).unwrap();
    assert_ne!(a, c);
    // Extended to the deadline it already had: the same state again.
    let mut d = a.clone();
    let lease = d.lease("w", 10, 0).unwrap().unwrap();
    let before = d.clone();
    d.extend(&lease.id, lease.token, 5, 5).unwrap();
    assert_eq!(d, before);
    assert_eq!(hash_of(&d), hash_of(&before));
}

#[test]
fn models_that_differ_in_one_field_are_unequal() {
    let base = with_jobs(&["JOB-1"], 2);
    let mut payload = Model::new();
    payload.enqueue("JOB-1", b"q", 2, 0, 0).unwrap();
    let mut max = Model::new();
    max.enqueue("JOB-1", b"p", 3, 0, 0).unwrap();
    let mut score = Model::new();
    score.enqueue("JOB-1", b"p", 2, 1, 0).unwrap();
    let mut w1 = base.clone();
    w1.lease("w1", 5, 0).unwrap();
    let mut w2 = base.clone();
    w2.lease("w2", 5, 0).unwrap();
    for other in [&payload, &max, &score, &w1] {
        assert_ne!(&base, other);
    }
    assert_ne!(w1, w2);
}

// ---- random operation sequences ------------------------------------------------

/// One operation with arguments drawn from small domains, so that ids
/// collide, tokens are sometimes current, deadlines are sometimes due, and
/// some arguments are out of range.
#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        id: &'static str,
        payload: u8,
        max_attempts: u64,
        delay_ms: u64,
        now_ms: u64,
    },
    Lease {
        worker: &'static str,
        lease_ms: u64,
        now_ms: u64,
    },
    Complete {
        id: &'static str,
        token: u64,
    },
    Fail {
        id: &'static str,
        token: u64,
        retry_delay_ms: u64,
        now_ms: u64,
    },
    Extend {
        id: &'static str,
        token: u64,
        lease_ms: u64,
        now_ms: u64,
    },
    Reap {
        limit: u64,
        now_ms: u64,
    },
}

const IDS: [&str; 6] = ["JOB-1", "JOB-2", "JOB-10", "JOB-9", "JOB-1", "job-x"];
const WORKERS: [&str; 3] = ["w1", "w2", ""];

fn op() -> impl Strategy<Value = Op> {
    let id = proptest::sample::select(&IDS[..]);
    let worker = proptest::sample::select(&WORKERS[..]);
    // Mostly in range, now and then past MS_MAX.
    let now = prop_oneof![9 => 0..40u64, 1 => Just(MS_MAX + 1)];
    prop_oneof![
        3 => (id.clone(), any::<u8>(), 0..4u64, 0..6u64, now.clone()).prop_map(
            |(id, payload, max_attempts, delay_ms, now_ms)| Op::Enqueue { id, payload, max_attempts, delay_ms, now_ms }
        ),
        4 => (worker, 0..12u64, now.clone())
            .prop_map(|(worker, lease_ms, now_ms)| Op::Lease { worker, lease_ms, now_ms }),
        3 => (id.clone(), 0..5u64).prop_map(|(id, token)| Op::Complete { id, token }),
        2 => (id.clone(), 0..5u64, 0..6u64, now.clone()).prop_map(
            |(id, token, retry_delay_ms, now_ms)| Op::Fail { id, token, retry_delay_ms, now_ms }
        ),
        2 => (id, 0..5u64, 0..12u64, now.clone()).prop_map(
            |(id, token, lease_ms, now_ms)| Op::Extend { id, token, lease_ms, now_ms }
        ),
        2 => (0..4u64, now).prop_map(|(limit, now_ms)| Op::Reap { limit, now_ms }),
    ]
}

/// Applies `op`, checks the claims that relate its answer to the state
/// before it, and returns whether it was refused.
fn apply(m: &mut Model, op: &Op) -> bool {
    let before = m.clone();
    let refused = match *op {
        Op::Enqueue {
            id,
            payload,
            max_attempts,
            delay_ms,
            now_ms,
        } => match m.enqueue(id, &[payload], max_attempts, delay_ms, now_ms) {
            Ok(Enqueued::Duplicate) => {
                assert!(before.job(id).is_some());
                assert_eq!(*m, before, "a duplicate changes nothing");
                false
            }
            Ok(Enqueued::Enqueued) => {
                assert!(before.job(id).is_none());
                false
            }
            Err(_) => true,
        },
        Op::Lease {
            worker,
            lease_ms,
            now_ms,
        } => match m.lease(worker, lease_ms, now_ms) {
            Ok(Some(lease)) => {
                let job = before.job(&lease.id).unwrap();
                assert_eq!(job.state(), JobState::Pending);
                assert!(job.score_ms().unwrap() <= now_ms, "leased before ready");
                assert_eq!(lease.token, job.attempts() + 1);
                assert!(lease.token <= job.max_attempts(), "bounded-retries");
                false
            }
            Ok(None) => {
                assert_eq!(*m, before);
                false
            }
            Err(_) => true,
        },
        Op::Complete { id, token } => match m.complete(id, token) {
            Ok(Settled::Settled) => {
                let job = before.job(id).unwrap();
                assert_eq!((job.state(), job.attempts()), (JobState::Active, token));
                false
            }
            Ok(_) => {
                assert_eq!(*m, before, "a refused settle changes nothing");
                false
            }
            Err(_) => true,
        },
        Op::Fail {
            id,
            token,
            retry_delay_ms,
            now_ms,
        } => match m.fail(id, token, retry_delay_ms, now_ms) {
            Ok(Failed::Requeued { .. } | Failed::Dead) => {
                let job = before.job(id).unwrap();
                assert_eq!((job.state(), job.attempts()), (JobState::Active, token));
                false
            }
            Ok(_) => {
                assert_eq!(*m, before, "a refused fail changes nothing");
                false
            }
            Err(_) => true,
        },
        Op::Extend {
            id,
            token,
            lease_ms,
            now_ms,
        } => match m.extend(id, token, lease_ms, now_ms) {
            Ok(Extended::Extended { deadline_ms }) => {
                let job = before.job(id).unwrap();
                assert_eq!((job.state(), job.attempts()), (JobState::Active, token));
                assert_eq!(m.job(id).unwrap().deadline_ms(), Some(deadline_ms));
                false
            }
            Ok(_) => {
                assert_eq!(*m, before, "a refused extend changes nothing");
                false
            }
            Err(_) => true,
        },
        Op::Reap { limit, now_ms } => match m.reap(limit, now_ms) {
            Ok(reaped) => {
                assert!(reaped.len() as u64 <= limit);
                for r in &reaped {
                    let job = before.job(&r.id).unwrap();
                    assert_eq!(job.state(), JobState::Active);
                    assert!(job.deadline_ms().unwrap() <= now_ms, "lease-respected");
                    assert_eq!(m.job(&r.id).unwrap().state(), r.to);
                }
                false
            }
            Err(_) => true,
        },
    };
    if refused {
        assert_eq!(*m, before, "a refusal changes nothing");
        assert_eq!(m.snapshot(), before.snapshot());
    }
    refused
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_never_break_the_structure_and_attempts_never_decrease(
        ops in proptest::collection::vec(op(), 0..80)
    ) {
        let mut m = Model::new();
        let mut attempts: BTreeMap<String, u64> = BTreeMap::new();
        for op in &ops {
            apply(&mut m, op);
            if let Err(problems) = m.check_structure() {
                panic!("after {op:?}: {problems}");
            }
            let snapshot = m.snapshot();
            prop_assert_eq!(snapshot.structure_problems(), Vec::<String>::new());
            for (id, job) in m.jobs() {
                let seen = attempts.entry(id.to_owned()).or_insert(0);
                prop_assert!(job.attempts() >= *seen, "{}: attempts {} after {}", id, job.attempts(), seen);
                *seen = job.attempts();
            }
            prop_assert_eq!(attempts.len(), snapshot.rows.len(), "a job vanished");
            // A clone is equal and hashes equal: the state is all in the rows.
            let copy = m.clone();
            prop_assert_eq!(hash_of(&copy), hash_of(&m));
        }
    }

    #[test]
    fn a_job_done_is_never_leased_again_and_a_dead_job_stays_dead(
        ops in proptest::collection::vec(op(), 0..80)
    ) {
        let mut m = Model::new();
        let mut settled: BTreeMap<String, JobState> = BTreeMap::new();
        for op in &ops {
            apply(&mut m, op);
            for (id, job) in m.jobs() {
                if let Some(state) = settled.get(id) {
                    prop_assert_eq!(job.state(), *state, "{} left {}", id, state);
                }
                if matches!(job.state(), JobState::Done | JobState::Dead) {
                    settled.insert(id.to_owned(), job.state());
                }
            }
        }
    }
}

// ---- the structure check itself ----------------------------------------------

#[test]
fn the_structure_check_reports_a_job_missing_from_its_index() {
    let mut m = with_jobs(&["JOB-1"], 2);
    m.pending.clear();
    let problems = m.check_structure().unwrap_err();
    assert!(
        problems.contains("JOB-1: pending at 0 but not indexed so"),
        "{problems}"
    );
    assert!(
        problems.contains("pending index has 0 entries for 1 pending jobs"),
        "{problems}"
    );
}

#[test]
fn the_structure_check_reports_an_index_entry_without_a_row_or_with_a_stale_score() {
    let mut m = with_jobs(&["JOB-1"], 2);
    m.active.insert((5, Arc::from("JOB-404")));
    m.pending.insert((7, Arc::from("JOB-1")));
    let problems = m.check_structure().unwrap_err();
    assert!(
        problems.contains("pending index has 2 entries for 1 pending jobs"),
        "{problems}"
    );
    assert!(
        problems.contains("active index has 1 entries for 0 active jobs"),
        "{problems}"
    );
}

#[test]
fn the_structure_check_reports_impossible_attempt_counts() {
    let mut m = with_jobs(&["JOB-1", "JOB-2"], 2);
    m.jobs.get_mut("JOB-1").unwrap().attempts = 3;
    m.jobs.get_mut("JOB-2").unwrap().place = Place::Dead { died_at_ms: 0 };
    m.pending.retain(|(_, id)| &**id != "JOB-2");
    let problems = m.check_structure().unwrap_err();
    assert!(
        problems.contains("JOB-1: attempts 3 above max_attempts 2"),
        "{problems}"
    );
    assert!(
        problems.contains("JOB-1: pending with no attempt left"),
        "{problems}"
    );
    assert!(
        problems.contains("JOB-2: dead after 0 of 2 attempts"),
        "{problems}"
    );
}

// ---- batches --------------------------------------------------------------

#[test]
fn a_batch_answers_and_changes_exactly_what_successive_single_calls_do() {
    let ids = ["JOB-a", "JOB-b", "JOB-a", "JOB-c"];
    let jobs: Vec<(&str, &[u8])> = ids.iter().map(|id| (*id, &b"p"[..])).collect();
    let (mut batch, mut single) = (Model::new(), Model::new());
    let got = batch.enqueue_batch(&jobs, 2, 0, 0).unwrap();
    let want: Vec<Enqueued> = ids
        .iter()
        .map(|id| single.enqueue(id, b"p", 2, 0, 0).unwrap())
        .collect();
    assert_eq!(got, want);
    assert_eq!(got[2], Enqueued::Duplicate, "the second JOB-a of one batch");
    let leases = batch.lease_batch("w", 10, 5, 0).unwrap();
    let singles: Vec<Lease> = (0..3)
        .map(|_| single.lease("w", 10, 0).unwrap().unwrap())
        .collect();
    assert_eq!(leases, singles);
    assert_eq!(single.lease("w", 10, 0).unwrap(), None);
    let pairs = [("JOB-a", 1), ("JOB-a", 1), ("JOB-b", 2), ("JOB-z", 1)];
    let got = batch.complete_batch(&pairs).unwrap();
    let want: Vec<Settled> = pairs
        .iter()
        .map(|(id, t)| single.complete(id, *t).unwrap())
        .collect();
    assert_eq!(got, want);
    let pairs = [("JOB-c", 1), ("JOB-c", 1), ("JOB-a", 1)];
    let got = batch.fail_batch(&pairs, 5, 3).unwrap();
    let want: Vec<Failed> = pairs
        .iter()
        .map(|(id, t)| single.fail(id, *t, 5, 3).unwrap())
        .collect();
    assert_eq!(got, want);
    assert_eq!(batch, single);
    sound(&batch);
}

#[test]
fn a_refused_batch_changes_nothing_even_when_its_first_entries_are_valid() {
    let mut m = with_jobs(&["JOB-1", "JOB-2"], 3);
    let lease = leased(&mut m, 0);
    let before = m.clone();
    let ok_pair = (lease.id.as_str(), lease.token);
    assert_eq!(
        m.complete_batch(&[ok_pair, ("job-2", 1)]).unwrap_err().code,
        "EMQKIND"
    );
    assert_eq!(
        m.fail_batch(&[ok_pair, ("JOB-2", 0)], 0, 0)
            .unwrap_err()
            .code,
        "EMQARG"
    );
    let empty: [(&str, u64); 0] = [];
    assert_eq!(
        m.complete_batch(&empty).unwrap_err().message,
        "EMQARG count must be in [1, 1000], got 0"
    );
    assert_eq!(m.lease_batch("w", 10, 1_001, 0).unwrap_err().code, "EMQARG");
    let jobs: [(&str, &[u8]); 2] = [("JOB-9", b""), ("nope", b"")];
    assert_eq!(m.enqueue_batch(&jobs, 3, 0, 0).unwrap_err().code, "EMQKIND");
    assert_eq!(m, before);
}
