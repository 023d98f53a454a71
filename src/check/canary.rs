//! Canaries: hand-written histories, each with one known violation, and a
//! clean one. A checker that is accidentally disabled stops reporting its
//! canary, and these tests fail.

use serde_json::json;

use super::{check_all, Verdict};
use crate::history::{Event, Recorder, F};

fn lease(rec: &Recorder, w: &str, job: &str, token: u64) {
    let op = rec.invoke(w, F::Lease, None, None);
    rec.ok(
        op,
        Some(job),
        Some(token),
        json!({"outcome": "leased", "payload": "p"}),
    );
}

fn settle(rec: &Recorder, w: &str, f: F, job: &str, token: u64, outcome: &str) {
    let op = rec.invoke(w, f, Some(job), Some(token));
    rec.ok(op, None, None, json!({ "outcome": outcome }));
}

fn enqueue(rec: &Recorder, job: &str, payload: &str, outcome: &str) {
    let op = rec.push_invoke_with(
        "producer",
        F::Enqueue,
        Some(job),
        json!({ "payload": payload }),
    );
    rec.ok(op, None, None, json!({ "outcome": outcome }));
}

fn read(rec: &Recorder, jobs: serde_json::Value, problems: &[&str]) {
    let op = rec.invoke("checker", F::Read, None, None);
    rec.ok(op, None, None, json!({"jobs": jobs, "problems": problems}));
}

fn reap(rec: &Recorder, job: &str) {
    let op = rec.invoke("reaper", F::Reap, None, None);
    rec.ok(
        op,
        None,
        None,
        json!({"outcome": "reaped", "reaped": [{"id": job, "to": "pending"}]}),
    );
}

/// The clean base: one job enqueued, leased, completed, read as done.
fn clean() -> Recorder {
    let rec = Recorder::in_memory();
    enqueue(&rec, "JOB-1", "p", "enqueued");
    lease(&rec, "w1", "JOB-1", 1);
    settle(&rec, "w1", F::Complete, "JOB-1", 1, "settled");
    rec
}

fn verdicts(events: &[Event]) -> Vec<(&'static str, Verdict)> {
    // A canary breaks one invariant; the others may not be exercised in
    // so short a history (unknown, and left out of the overall verdict),
    // which is not what it checks: they count as not broken.
    check_all(events)
        .iter()
        .map(|r| {
            let verdict = if r.not_exercised() {
                Verdict::Valid
            } else {
                r.verdict
            };
            (r.invariant, verdict)
        })
        .collect()
}

fn only_invalid(events: &[Event], invariant: &str) {
    for (name, verdict) in verdicts(events) {
        let want = if name == invariant {
            Verdict::Invalid
        } else {
            Verdict::Valid
        };
        assert_eq!(
            verdict,
            want,
            "{name} on the {invariant} canary: {:#?}",
            check_all(events)
        );
    }
}

#[test]
fn a_clean_history_is_valid_for_every_checker() {
    let rec = clean();
    read(&rec, json!({"JOB-1": "done"}), &[]);
    assert!(verdicts(&rec.events())
        .iter()
        .all(|(_, v)| *v == Verdict::Valid));
    assert_eq!(super::overall(&check_all(&rec.events())), Verdict::Valid);
}

#[test]
fn no_loss_reports_a_job_that_vanished() {
    let rec = clean();
    enqueue(&rec, "JOB-2", "p", "enqueued");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    only_invalid(&rec.events(), "no-loss");
}

#[test]
fn no_loss_is_unknown_without_a_final_read() {
    let rec = clean();
    let reports = check_all(&rec.events());
    assert_eq!(reports[0].verdict, Verdict::Unknown);
}

#[test]
fn fenced_settlement_reports_a_stale_ack_accepted() {
    let rec = Recorder::in_memory();
    enqueue(&rec, "JOB-1", "p", "enqueued");
    lease(&rec, "w1", "JOB-1", 1);
    reap(&rec, "JOB-1");
    lease(&rec, "w2", "JOB-1", 2);
    settle(&rec, "w1", F::Fail, "JOB-1", 1, "requeued");
    lease(&rec, "w2", "JOB-1", 3);
    settle(&rec, "w2", F::Complete, "JOB-1", 3, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    only_invalid(&rec.events(), "fenced-settlement");
}

#[test]
fn settle_once_reports_a_job_leased_after_it_was_done() {
    let rec = clean();
    lease(&rec, "w2", "JOB-1", 2);
    read(&rec, json!({"JOB-1": "done"}), &[]);
    let events = rec.events();
    let bad: Vec<_> = verdicts(&events)
        .into_iter()
        .filter(|(_, v)| *v != Verdict::Valid)
        .collect();
    assert_eq!(bad, [("settle-once", Verdict::Invalid)]);
}

#[test]
fn no_loss_reports_a_job_read_done_that_no_complete_settled() {
    let rec = clean();
    enqueue(&rec, "JOB-2", "p", "enqueued");
    read(&rec, json!({"JOB-1": "done", "JOB-2": "done"}), &[]);
    only_invalid(&rec.events(), "no-loss");
}

#[test]
fn admission_reports_a_job_leased_that_no_enqueue_attempted() {
    let rec = clean();
    lease(&rec, "w2", "JOB-7", 1);
    settle(&rec, "w2", F::Complete, "JOB-7", 1, "settled");
    read(&rec, json!({"JOB-1": "done", "JOB-7": "done"}), &[]);
    only_invalid(&rec.events(), "admission");
}

#[test]
fn a_history_that_breaks_the_grammar_is_refused_not_judged() {
    let rec = clean();
    read(&rec, json!({"JOB-1": "done"}), &[]);
    let mut events = rec.events();
    events.swap(2, 3);
    assert_eq!(verdicts(&events), [("well-formed", Verdict::Unknown)]);
}

#[test]
fn admission_reports_a_duplicate_admitted() {
    let rec = clean();
    enqueue(&rec, "JOB-1", "other", "enqueued");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    only_invalid(&rec.events(), "admission");
}

/// A read of a queue whose hello said `dedup: false`, as
/// `history::record::with_dedup` records it.
fn read_no_dedup(rec: &Recorder, jobs: serde_json::Value) {
    let op = rec.invoke("checker", F::Read, None, None);
    rec.ok(
        op,
        None,
        None,
        json!({"jobs": jobs, "problems": [], "dedup": false}),
    );
}

#[test]
fn admission_does_not_judge_duplicate_refusal_of_a_queue_that_does_not_promise_it() {
    let rec = clean();
    enqueue(&rec, "JOB-1", "other", "enqueued");
    read_no_dedup(&rec, json!({"JOB-1": "done"}));
    let reports = check_all(&rec.events());
    let admission = reports.iter().find(|r| r.invariant == "admission").unwrap();
    assert_eq!(admission.verdict, Verdict::Valid, "{admission:?}");
    assert_eq!(admission.counts.get("dedup_promised"), Some(&0));
    assert_eq!(admission.counts.get("duplicate_refusal_judged"), Some(&0));
    // The same history from a queue that promises it is a violation.
    let rec = clean();
    enqueue(&rec, "JOB-1", "other", "enqueued");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    let reports = check_all(&rec.events());
    let admission = reports.iter().find(|r| r.invariant == "admission").unwrap();
    assert_eq!(admission.verdict, Verdict::Invalid);
    assert_eq!(admission.counts.get("dedup_promised"), None);
}

#[test]
fn admission_without_dedup_still_reports_an_unexpected_job_and_a_wrong_payload() {
    let rec = clean();
    lease(&rec, "w2", "JOB-7", 1);
    settle(&rec, "w2", F::Complete, "JOB-7", 1, "settled");
    read_no_dedup(&rec, json!({"JOB-1": "done", "JOB-7": "done"}));
    only_invalid(&rec.events(), "admission");
    // JOB-2 admitted with "q", delivered with "p".
    let rec = clean();
    enqueue(&rec, "JOB-2", "q", "enqueued");
    lease(&rec, "w1", "JOB-2", 1);
    settle(&rec, "w1", F::Complete, "JOB-2", 1, "settled");
    read_no_dedup(&rec, json!({"JOB-1": "done", "JOB-2": "done"}));
    only_invalid(&rec.events(), "admission");
}

#[test]
fn structure_reports_a_problem_seen_at_a_read() {
    let rec = clean();
    read(
        &rec,
        json!({"JOB-1": "done"}),
        &["JOB-1: state done but in indexes [active]"],
    );
    only_invalid(&rec.events(), "structure");
}

#[test]
fn structure_reports_a_token_granted_twice() {
    let rec = Recorder::in_memory();
    enqueue(&rec, "JOB-1", "p", "enqueued");
    lease(&rec, "w1", "JOB-1", 1);
    reap(&rec, "JOB-1");
    lease(&rec, "w2", "JOB-1", 1);
    settle(&rec, "w2", F::Complete, "JOB-1", 1, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    let events = rec.events();
    let v = verdicts(&events);
    assert!(v.contains(&("structure", Verdict::Invalid)), "{v:?}");
}

/// A final read that also carries the consumer's effect counts.
fn read_effects(
    rec: &Recorder,
    jobs: serde_json::Value,
    effects: serde_json::Value,
    promised: bool,
) {
    let op = rec.invoke("checker", F::Read, None, None);
    rec.ok(
        op,
        None,
        None,
        json!({"jobs": jobs, "problems": [], "effects": effects,
               "consumer": if promised { "marker" } else { "naive" },
               "effect_once": promised}),
    );
}

/// An enqueue whose invocation names `max_attempts`, as the explorers and
/// the campaign record it.
fn enqueue_bounded(rec: &Recorder, job: &str, max_attempts: u64) {
    let op = rec.push_invoke_with(
        "producer",
        F::Enqueue,
        Some(job),
        json!({ "payload": "p", "max_attempts": max_attempts }),
    );
    rec.ok(op, None, None, json!({ "outcome": "enqueued" }));
}

fn lease_until(rec: &Recorder, w: &str, job: &str, token: u64, deadline_ms: u64) {
    let op = rec.invoke(w, F::Lease, None, None);
    rec.ok(
        op,
        Some(job),
        Some(token),
        json!({"outcome": "leased", "payload": "p", "deadline_ms": deadline_ms}),
    );
}

fn reap_at(rec: &Recorder, job: &str, to: &str, now_ms: u64) {
    let op = rec.invoke("reaper", F::Reap, None, None);
    rec.ok(
        op,
        None,
        None,
        json!({"outcome": "reaped", "reaped": [{"id": job, "to": to}], "now_ms": now_ms}),
    );
}

#[test]
fn effect_once_reports_a_done_job_with_two_effects_under_a_promising_consumer() {
    let rec = clean();
    read_effects(&rec, json!({"JOB-1": "done"}), json!({"JOB-1": 2}), true);
    only_invalid(&rec.events(), "effect-once");
}

#[test]
fn effect_once_reports_a_done_job_whose_effect_was_lost() {
    let rec = clean();
    read_effects(&rec, json!({"JOB-1": "done"}), json!({"JOB-1": 0}), true);
    only_invalid(&rec.events(), "effect-once");
}

#[test]
fn effect_once_counts_but_does_not_judge_a_consumer_that_promises_nothing() {
    let rec = clean();
    read_effects(&rec, json!({"JOB-1": "done"}), json!({"JOB-1": 2}), false);
    let events = rec.events();
    assert!(verdicts(&events).iter().all(|(_, v)| *v == Verdict::Valid));
    let reports = check_all(&events);
    let effect = reports
        .iter()
        .find(|r| r.invariant == "effect-once")
        .unwrap();
    assert_eq!(effect.counts.get("duplicated"), Some(&1));
}

#[test]
fn bounded_retries_reports_a_lease_beyond_max_attempts() {
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 1);
    lease_until(&rec, "w1", "JOB-1", 1, 1_100);
    reap_at(&rec, "JOB-1", "pending", 1_100);
    lease_until(&rec, "w2", "JOB-1", 2, 1_200);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    only_invalid(&rec.events(), "bounded-retries");
}

#[test]
fn bounded_retries_reports_a_dead_job_leased_again() {
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 3);
    lease_until(&rec, "w1", "JOB-1", 1, 1_100);
    reap_at(&rec, "JOB-1", "dead", 1_100);
    lease_until(&rec, "w2", "JOB-1", 2, 1_200);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    only_invalid(&rec.events(), "bounded-retries");
}

#[test]
fn lease_respected_reports_a_reap_before_the_deadline() {
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 3);
    lease_until(&rec, "w1", "JOB-1", 1, 1_100);
    reap_at(&rec, "JOB-1", "pending", 1_050);
    lease_until(&rec, "w2", "JOB-1", 2, 1_150);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    only_invalid(&rec.events(), "lease-respected");
}

fn lease_at(rec: &Recorder, w: &str, job: &str, token: u64, now_ms: u64) {
    let op = rec.invoke(w, F::Lease, None, None);
    rec.ok(
        op,
        Some(job),
        Some(token),
        json!({"outcome": "leased", "payload": "p", "deadline_ms": now_ms + 100, "now_ms": now_ms}),
    );
}

fn fail_ready_at(rec: &Recorder, w: &str, job: &str, token: u64, ready_at_ms: u64) {
    let op = rec.invoke(w, F::Fail, Some(job), Some(token));
    rec.ok(
        op,
        None,
        None,
        json!({"outcome": "requeued", "ready_at_ms": ready_at_ms}),
    );
}

/// The broken fail of issue 27: it answered `ready_at_ms` 1500 and the
/// job was leased again at 1100.
fn leased_before_its_ready_time() -> Recorder {
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 3);
    lease_at(&rec, "w1", "JOB-1", 1, 1_000);
    fail_ready_at(&rec, "w1", "JOB-1", 1, 1_500);
    lease_at(&rec, "w2", "JOB-1", 2, 1_100);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    rec
}

#[test]
fn delay_respected_reports_a_lease_before_the_ready_time_its_fail_announced() {
    only_invalid(&leased_before_its_ready_time().events(), "delay-respected");
}

#[test]
fn delay_respected_accepts_a_lease_exactly_at_the_ready_time() {
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 3);
    lease_at(&rec, "w1", "JOB-1", 1, 1_000);
    fail_ready_at(&rec, "w1", "JOB-1", 1, 1_500);
    lease_at(&rec, "w2", "JOB-1", 2, 1_500);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    assert!(verdicts(&rec.events())
        .iter()
        .all(|(_, v)| *v == Verdict::Valid));
    let reports = check_all(&rec.events());
    let delay = reports
        .iter()
        .find(|r| r.invariant == "delay-respected")
        .unwrap();
    assert_eq!((delay.verdict, delay.counts["judged"]), (Verdict::Valid, 1));
}

/// A duplicate enqueue overwrote a done job's payload and answered
/// `duplicate`: no delivery follows, and the read's payloads show it.
fn payload_overwritten_when_done() -> Recorder {
    let rec = clean();
    enqueue(&rec, "JOB-1", "other", "duplicate");
    let op = rec.invoke("checker", F::Read, None, None);
    rec.ok(
        op,
        None,
        None,
        json!({"jobs": {"JOB-1": "done"}, "problems": [], "payloads": {"JOB-1": "other"}}),
    );
    rec
}

#[test]
fn admission_reports_a_read_payload_that_a_duplicate_overwrote() {
    let events = payload_overwritten_when_done().events();
    only_invalid(&events, "admission");
    let reports = check_all(&events);
    let admission = reports.iter().find(|r| r.invariant == "admission").unwrap();
    let v = &admission.violations[0];
    assert_eq!(v.job.as_deref(), Some("JOB-1"));
    assert_eq!(v.event(super::Role::Broke), Some(9));
    assert_eq!(v.event(super::Role::Earlier), Some(1));
    // The same read with the admitted payload is valid.
    let rec = clean();
    enqueue(&rec, "JOB-1", "other", "duplicate");
    let op = rec.invoke("checker", F::Read, None, None);
    rec.ok(
        op,
        None,
        None,
        json!({"jobs": {"JOB-1": "done"}, "problems": [], "payloads": {"JOB-1": "p"}}),
    );
    let reports = check_all(&rec.events());
    let admission = reports.iter().find(|r| r.invariant == "admission").unwrap();
    assert_eq!(admission.verdict, Verdict::Valid, "{admission:?}");
    assert_eq!(admission.counts["payloads_compared"], 2);
}

/// Two live leases of one job: w2 is granted JOB-1 at 1050 while w1's
/// lease of it, neither settled nor reaped, runs until 1100.
fn leased_twice_while_live() -> Recorder {
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 3);
    lease_at(&rec, "w1", "JOB-1", 1, 1_000);
    lease_at(&rec, "w2", "JOB-1", 2, 1_050);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    rec
}

#[test]
fn lease_exclusive_reports_a_job_leased_again_while_its_lease_was_live() {
    only_invalid(&leased_twice_while_live().events(), "lease-exclusive");
}

#[test]
fn lease_exclusive_accepts_a_lease_exactly_at_the_earlier_deadline() {
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 3);
    lease_at(&rec, "w1", "JOB-1", 1, 1_000);
    lease_at(&rec, "w2", "JOB-1", 2, 1_100);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    let reports = check_all(&rec.events());
    let r = reports
        .iter()
        .find(|r| r.invariant == "lease-exclusive")
        .unwrap();
    assert_eq!(r.verdict, Verdict::Unknown, "{r:?}");
    assert!(r.not_exercised(), "{r:?}");
    assert_eq!(r.counts["judged"], 2);
}

#[test]
fn lease_respected_accepts_a_reap_exactly_at_the_deadline() {
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 3);
    lease_until(&rec, "w1", "JOB-1", 1, 1_100);
    reap_at(&rec, "JOB-1", "pending", 1_100);
    lease_until(&rec, "w2", "JOB-1", 2, 1_200);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    assert!(verdicts(&rec.events())
        .iter()
        .all(|(_, v)| *v == Verdict::Valid));
}

/// Liveness is not a history checker: the walks judge it from their drain
/// (src/explore/walk.rs). Every checker `check_all` runs has a canary above.
#[test]
fn every_checker_check_all_runs_has_a_canary() {
    let names: Vec<&str> = check_all(&[]).iter().map(|r| r.invariant).collect();
    assert_eq!(
        names,
        [
            "no-loss",
            "fenced-settlement",
            "settle-once",
            "admission",
            "structure",
            "effect-once",
            "bounded-retries",
            "lease-respected",
            "lease-exclusive",
            "delay-respected"
        ],
        "a checker was added or removed: give it a canary here"
    );
}

/// One history per violation the checkers can report, each breaking one
/// invariant the way a canary above does (the report's rewording test draws
/// each: `src/report/rewording.rs`).
pub(crate) fn violating_histories() -> Vec<Vec<Event>> {
    let mut out = Vec::new();
    // no-loss: a job vanished; another read done that nobody settled.
    let rec = clean();
    enqueue(&rec, "JOB-2", "p", "enqueued");
    enqueue(&rec, "JOB-3", "p", "enqueued");
    read(&rec, json!({"JOB-1": "done", "JOB-3": "done"}), &[]);
    out.push(rec.events());
    // fenced-settlement: a stale fail accepted after the reaper and a
    // newer lease.
    let rec = Recorder::in_memory();
    enqueue(&rec, "JOB-1", "p", "enqueued");
    lease(&rec, "w1", "JOB-1", 1);
    reap(&rec, "JOB-1");
    lease(&rec, "w2", "JOB-1", 2);
    settle(&rec, "w1", F::Fail, "JOB-1", 1, "requeued");
    lease(&rec, "w2", "JOB-1", 3);
    settle(&rec, "w2", F::Complete, "JOB-1", 3, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    out.push(rec.events());
    // settle-once: leased after done, and settled twice.
    let rec = clean();
    lease(&rec, "w2", "JOB-1", 2);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    out.push(rec.events());
    // admission: admitted twice, leased with no enqueue, read with none.
    let rec = clean();
    enqueue(&rec, "JOB-1", "other", "enqueued");
    lease(&rec, "w2", "JOB-7", 1);
    settle(&rec, "w2", F::Complete, "JOB-7", 1, "settled");
    read(
        &rec,
        json!({"JOB-1": "done", "JOB-7": "done", "JOB-8": "pending"}),
        &[],
    );
    out.push(rec.events());
    // structure: a problem seen at a read, and a token granted twice.
    let rec = Recorder::in_memory();
    enqueue(&rec, "JOB-1", "p", "enqueued");
    lease(&rec, "w1", "JOB-1", 1);
    reap(&rec, "JOB-1");
    lease(&rec, "w2", "JOB-1", 1);
    settle(&rec, "w2", F::Complete, "JOB-1", 1, "settled");
    read(&rec, json!({"JOB-1": "done"}), &["JOB-1: in two indexes"]);
    out.push(rec.events());
    // effect-once: two effects under a consumer that promises one.
    let rec = clean();
    read_effects(&rec, json!({"JOB-1": "done"}), json!({"JOB-1": 2}), true);
    out.push(rec.events());
    // bounded-retries: a lease beyond max_attempts, and one after death.
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 1);
    lease_until(&rec, "w1", "JOB-1", 1, 1_100);
    reap_at(&rec, "JOB-1", "dead", 1_100);
    lease_until(&rec, "w2", "JOB-1", 2, 1_200);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    out.push(rec.events());
    // lease-respected: a reap before the deadline.
    let rec = Recorder::in_memory();
    enqueue_bounded(&rec, "JOB-1", 3);
    lease_until(&rec, "w1", "JOB-1", 1, 1_100);
    reap_at(&rec, "JOB-1", "pending", 1_050);
    lease_until(&rec, "w2", "JOB-1", 2, 1_150);
    settle(&rec, "w2", F::Complete, "JOB-1", 2, "settled");
    read(&rec, json!({"JOB-1": "done"}), &[]);
    out.push(rec.events());
    // lease-exclusive: a lease granted while another of its job was live.
    out.push(leased_twice_while_live().events());
    // delay-respected: a lease before the ready time a fail announced.
    out.push(leased_before_its_ready_time().events());
    // admission: a read payload a duplicate overwrote.
    out.push(payload_overwritten_when_done().events());
    out
}

/// A checker that panics is `unknown` under its own name, with the
/// panic's message, not a bare "checker-crashed".
#[test]
fn a_panicking_checker_is_unknown_under_its_name_with_its_message() {
    let report = super::judge("fenced-settlement", || {
        panic!("token {} is not a number", "x")
    });
    assert_eq!(report.invariant, "fenced-settlement");
    assert_eq!(report.verdict, Verdict::Unknown);
    assert_eq!(report.violations.len(), 1);
    assert_eq!(report.violations[0].invariant, "fenced-settlement");
    assert!(
        report.violations[0]
            .text
            .contains("token x is not a number"),
        "{report:?}"
    );
    let report = super::judge("no-loss", || std::panic::panic_any(7_u32));
    assert_eq!(
        (report.invariant, report.verdict),
        ("no-loss", Verdict::Unknown)
    );
}
