//! The reduction's unit tests: schedules read off hand-made histories.

use super::*;
use serde_json::json;

fn ev(index: u64, time_ms: u64, process: &str, kind: EventKind, f: F) -> Event {
    Event {
        index,
        ..Event::bare(time_ms, process, kind, f)
    }
}

fn on(mut e: Event, job: &str, token: Option<u64>, value: serde_json::Value) -> Event {
    e.job = Some(job.into());
    e.token = token;
    e.value = (!value.is_null()).then_some(value);
    e
}

/// The shape of lmove's stale fail found by `ackgap chaos --seed 3
/// --duration 10s --queue lmove`: w3's fail is sent before the reap and
/// answered after w2's new lease.
fn stale_fail_history() -> Vec<Event> {
    use EventKind::{Invoke, Ok};
    let j = "JOB-3-0073";
    vec![
        on(
            ev(0, 100, "p1", Invoke, F::Enqueue),
            j,
            None,
            json!({"max_attempts": 10}),
        ),
        on(
            ev(1, 101, "p1", Ok, F::Enqueue),
            j,
            None,
            json!({"outcome": "enqueued"}),
        ),
        ev(2, 200, "w3", Invoke, F::Lease),
        on(
            ev(3, 201, "w3", Ok, F::Lease),
            j,
            Some(2),
            json!({"outcome": "leased"}),
        ),
        on(
            ev(4, 250, "w3-hb2", Invoke, F::Extend),
            j,
            Some(2),
            json!(null),
        ),
        on(
            ev(5, 251, "w3-hb2", Ok, F::Extend),
            j,
            Some(2),
            json!({"outcome": "extended"}),
        ),
        on(ev(6, 300, "w3", Invoke, F::Fail), j, Some(2), json!(null)),
        ev(7, 850, "reaper", Invoke, F::Reap),
        ev(8, 851, "w2", Invoke, F::Lease),
        Event {
            value: Some(json!({"outcome": "reaped", "reaped": [{"id": j, "to": "pending"}]})),
            ..ev(9, 852, "reaper", Ok, F::Reap)
        },
        on(
            ev(10, 860, "w2", Ok, F::Lease),
            j,
            Some(3),
            json!({"outcome": "leased"}),
        ),
        on(
            ev(11, 870, "w3", Ok, F::Fail),
            j,
            Some(2),
            json!({"outcome": "requeued"}),
        ),
    ]
}

#[test]
fn a_reply_read_late_is_ordered_after_what_overtook_it_by_completion() {
    let h = stale_fail_history();
    let e = extract(&h, "JOB-3-0073", 500, Order::Completion).unwrap();
    assert_eq!(
        e.schedule.to_string(),
        "e0 t100 l0 t50 x0 t601 r t8 l1 t10 f0"
    );
    assert_eq!(e.workers, ["w3", "w2"]);
    assert_eq!(e.config.max_attempts, 10);
    assert_eq!(e.config.workers, 2);
    assert!(e.dropped.is_empty(), "{:?}", e.dropped);
    // The fail was on the wire while the reap and w2's lease ran.
    assert!(
        e.overlaps.iter().any(|o| o.contains("w2")),
        "{:?}",
        e.overlaps
    );
    let by_invocation = extract(&h, "JOB-3-0073", 500, Order::Invocation).unwrap();
    assert_eq!(
        by_invocation.schedule.to_string(),
        "e0 t100 l0 t50 x0 t50 f0 t550 r t1 l1"
    );
}

#[test]
fn calls_that_overlapped_on_the_wire_are_sent_together_at_the_later_send() {
    let h = stale_fail_history();
    let e = extract(&h, "JOB-3-0073", 500, Order::Together).unwrap();
    // w3's fail was on the wire from 300 ms to past w2's lease: the
    // reap (850) and the lease (851) were sent while it was, so the
    // three go together, at 851 ms.
    assert_eq!(e.schedule.to_string(), "e0 t100 l0 t50 x0 t601 f0+r+l1");
    assert!(e.overlaps.is_empty(), "{:?}", e.overlaps);
}

#[test]
fn a_lease_answered_unknown_while_the_job_was_owed_is_a_lost_reply_in_the_fourth_order() {
    let mut h = stale_fail_history();
    // w0 asks for a lease at 400 ms, inside the job's window, and its
    // answer is unknown (the network dropped it).
    h.insert(7, ev(7, 400, "w0", EventKind::Invoke, F::Lease));
    h.insert(
        8,
        Event {
            value: Some(json!("the reply was lost")),
            ..ev(8, 420, "w0", EventKind::Info, F::Lease)
        },
    );
    for (i, e) in h.iter_mut().enumerate() {
        e.index = i as u64;
    }
    let j = "JOB-3-0073";
    let by_invocation = extract(&h, j, 500, Order::Invocation).unwrap();
    assert!(!by_invocation.schedule.to_string().contains('u'));
    assert!(
        by_invocation.dropped.iter().any(|d| d.contains("w0 Lease")),
        "{:?}",
        by_invocation.dropped
    );
    let e = extract(&h, j, 500, Order::Unknown).unwrap();
    assert_eq!(
        e.schedule.to_string(),
        "e0 t100 l0 t50 x0 t50 f0 t100 u1 t450 r t1 l2"
    );
    assert_eq!(e.workers, ["w3", "w0", "w2"]);
    assert!(e.dropped.is_empty(), "{:?}", e.dropped);
}

#[test]
fn a_settle_no_step_can_say_is_dropped_and_named() {
    let mut h = stale_fail_history();
    // The heartbeat extends token 2 after w3's fail gave it up: a
    // worker holds no such lease, and no step sends it.
    let j = "JOB-3-0073";
    h.push(on(
        ev(12, 880, "w3-hb2", EventKind::Invoke, F::Extend),
        j,
        Some(2),
        json!(null),
    ));
    h.push(on(
        ev(13, 881, "w3-hb2", EventKind::Ok, F::Extend),
        j,
        Some(2),
        json!({"outcome": "extended"}),
    ));
    let e = extract(&h, j, 500, Order::Completion).unwrap();
    assert_eq!(e.dropped.len(), 1, "{:?}", e.dropped);
    assert!(
        e.dropped[0].contains("w3-hb2 Extend token 2"),
        "{:?}",
        e.dropped
    );
    assert_eq!(
        e.schedule.to_string(),
        "e0 t100 l0 t50 x0 t601 r t8 l1 t10 f0"
    );
}

#[test]
fn a_reap_that_took_nothing_before_the_replays_deadline_gets_the_time_past_it() {
    use EventKind::Ok;
    let schedule: Schedule = "e0 l0 t100 r".parse().unwrap();
    let run = vec![
        Event {
            value: Some(json!({"outcome": "leased", "deadline_ms": 3000, "now_ms": 1000})),
            ..ev(1, 0, "w0", Ok, F::Lease)
        },
        Event {
            value: Some(json!({"outcome": "reaped", "reaped": [], "now_ms": 1100})),
            ..ev(3, 0, "reaper", Ok, F::Reap)
        },
        // The heal's reap, after the schedule's: not counted.
        Event {
            value: Some(json!({"outcome": "reaped", "reaped": [], "now_ms": 1200})),
            ..ev(5, 0, "reaper", Ok, F::Reap)
        },
    ];
    let (longer, added) = stretched(&schedule, &run).unwrap();
    assert_eq!(longer.to_string(), "e0 l0 t2001 r");
    assert_eq!(added, 1901);
    // A reap that took the job needs nothing.
    let mut took = run.clone();
    took[1].value = Some(json!({"outcome": "reaped", "reaped": [{"id": "JOB-0"}], "now_ms": 3001}));
    assert!(stretched(&schedule, &took).is_none());
}

#[test]
fn a_clock_jump_forward_is_a_tick_of_its_size_and_its_heal_none() {
    use EventKind::{Invoke, Ok};
    let mut h = stale_fail_history();
    let fault = |index, action: &str, hit: serde_json::Value| Event {
        value: Some(
            json!({"fault": "clock-jump", "action": action, "target": "server", "hit": hit}),
        ),
        ..ev(index, 240, "nemesis", Ok, F::Fault)
    };
    // Between w3's lease (event 3) and its heartbeat's extend (4).
    h.insert(
        4,
        fault(31, "fired", json!({"jumped_ms": 1778, "offset_ms": 1778})),
    );
    h.insert(4, ev(30, 240, "nemesis", Invoke, F::Fault));
    h.insert(6, fault(33, "heal", json!({"jumped_ms": -1778})));
    h.insert(6, ev(32, 240, "nemesis", Invoke, F::Fault));
    for (i, e) in h.iter_mut().enumerate() {
        e.index = i as u64;
    }
    let e = extract(&h, "JOB-3-0073", 500, Order::Completion).unwrap();
    assert_eq!(
        e.schedule.to_string(),
        "e0 t100 l0 t39 t1778 t11 x0 t601 r t8 l1 t10 f0"
    );
}

#[test]
fn a_kill_and_a_power_loss_that_fired_are_steps_and_their_heals_none() {
    use EventKind::{Invoke, Ok};
    let mut h = stale_fail_history();
    let fault = |index, kind: &str, action: &str| Event {
        value: Some(json!({"fault": kind, "action": action, "target": "server", "hit": {}})),
        ..ev(index, 240, "nemesis", Ok, F::Fault)
    };
    for (at, kind, action) in [(4, "power-loss", "fired"), (4, "server-kill", "heal")] {
        h.insert(at, fault(0, kind, action));
        h.insert(at, ev(0, 240, "nemesis", Invoke, F::Fault));
    }
    for (i, e) in h.iter_mut().enumerate() {
        e.index = i as u64;
    }
    let e = extract(&h, "JOB-3-0073", 500, Order::Completion).unwrap();
    assert_eq!(
        e.schedule.to_string(),
        "e0 t100 l0 t39 P t11 x0 t601 r t8 l1 t10 f0"
    );
    assert_eq!(server_faults(&h), (false, true));
}

#[test]
fn a_history_without_the_jobs_enqueue_is_an_error() {
    let h = stale_fail_history();
    let err = extract(&h, "JOB-9", 500, Order::Completion).unwrap_err();
    assert!(err.contains("JOB-9"), "{err}");
}

/// A queue that follows the server's clock, shrunk on a server the
/// explorers may kill but whose clock they do not own (real time): a line
/// the shrinker took the kill out of replays, pasted, on logical time, so
/// it is not claimed (Sidekiq's `…/e0.l0` broke no-loss 10 of 10 times in
/// the reduction and was valid when pasted); a line that keeps its kill,
/// or one of a queue that reads no clock, is.
#[tokio::test]
async fn a_line_shrunk_off_its_kill_on_real_time_is_not_claimed_for_a_queue_that_follows_the_clock()
{
    use crate::adapter::{Adapter, Capabilities, Reference, Wrapper};
    use std::sync::Arc;
    struct FollowsClock(Reference);
    impl Wrapper for FollowsClock {
        fn inner(&self) -> &dyn Adapter {
            &self.0
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                follows_clock: true,
                logical_time: true,
                ..self.0.capabilities()
            }
        }
    }
    let server = Server::start(&"process".parse().unwrap(), Persistence::None)
        .await
        .expect("a valkey-server (ci/install-valkey)");
    let queue = crate::queue::Queue::connect(&server.client(), "reduce-guard")
        .await
        .unwrap();
    let owned = super::super::OwnedServer::new(server, Persistence::None);
    let marker = || Arc::from(crate::consumer::Kind::Marker.consumer());
    let follows = Subject::new(
        Arc::new(FollowsClock(Reference::new(queue.clone()))),
        marker(),
    )
    .with_server(Some(owned.clone()));
    let reference = Subject::reference(&queue).with_server(Some(owned.clone()));
    let no_kill: Schedule = "e0 l0".parse().unwrap();
    let kill: Schedule = "e0 l0 K".parse().unwrap();
    assert!(replays_elsewhere(&follows, &no_kill).is_some_and(|w| w.contains("not claimed")));
    assert_eq!(replays_elsewhere(&follows, &kill), None);
    assert_eq!(replays_elsewhere(&reference, &no_kill), None);
    assert_eq!(
        replays_elsewhere(&follows.with_server(None), &no_kill),
        None
    );
    drop(reference);
    owned
        .into_server()
        .expect("no walk holds it")
        .stop()
        .await
        .unwrap();
}
