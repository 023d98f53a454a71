//! A consumer's idempotency marker that expires is read on the server's
//! clock: a forward clock jump (`clock-jump`, `skew-failover`) between two
//! effects of a job can expire it early, and the second delivery applies
//! the effect again. That duplicate is the consumer's finding (a guard
//! whose TTL runs on the server's clock), not the queue's: the queue
//! redelivered a job as at-least-once allows. This module names it, job by
//! job, from the history and the final read's effect counts, for a
//! consumer that declares its marker's TTL ([`Consumer::marker_ttl_ms`]).
//!
//! [`Consumer::marker_ttl_ms`]: crate::consumer::Consumer::marker_ttl_ms
//!
//! # Design notes
//!
//! The report lists these findings in `ChaosReport::consumer_findings`.

use std::collections::BTreeMap;

use crate::fault::FaultKind;
use crate::history::{Action, Event, EventKind, F};

/// The forward jumps of the server's clock the nemesis recorded: when each
/// fired (ms of the history), by how much, and which fault.
fn forward_jumps(events: &[Event]) -> Vec<(u64, i64, FaultKind)> {
    events
        .iter()
        .filter_map(|e| {
            let fault = e.fault()?;
            if fault.action != Action::Fired || !fault.fault.spec().moves_clock {
                return None;
            }
            let jumped = fault.hit()?["jumped_ms"].as_i64().filter(|&j| j > 0)?;
            Some((e.time_ms, jumped, fault.fault))
        })
        .collect()
}

/// For each job whose effect landed more than once (`effects`, the final
/// read's counts), when a forward jump of the server's clock fell between
/// its first and its last applied effect, one sentence naming it the
/// consumer's finding. Nothing when the consumer's marker does not expire
/// (`ttl_ms` is `None`).
pub fn findings(
    events: &[Event],
    effects: &BTreeMap<String, u64>,
    ttl_ms: Option<u64>,
) -> Vec<String> {
    let Some(ttl_ms) = ttl_ms else {
        return Vec::new();
    };
    let jumps = forward_jumps(events);
    let mut applied: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for e in events {
        if e.f == F::Effect && e.kind == EventKind::Ok {
            if let Some(job) = &e.job {
                applied.entry(job).or_default().push(e.time_ms);
            }
        }
    }
    effects
        .iter()
        .filter(|(_, &n)| n > 1)
        .filter_map(|(job, &n)| {
            let times = applied.get(job.as_str())?;
            let (first, last) = (*times.iter().min()?, *times.iter().max()?);
            let between: Vec<String> = jumps
                .iter()
                .filter(|(t, _, _)| first < *t && *t < last)
                .map(|(t, jumped, fault)| format!("{fault} of +{jumped} ms at {t} ms"))
                .collect();
            (!between.is_empty()).then(|| {
                format!(
                    "{job}: its effect landed {n} times (applied from {first} to {last} ms), and \
                     between them the server's clock jumped forward ({}): the consumer's marker \
                     lives {ttl_ms} ms on that clock and expired early. The consumer's finding (a \
                     guard whose TTL runs on the server's clock), not the queue's",
                    between.join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn effect(time_ms: u64, job: &str) -> Event {
        Event {
            job: Some(job.into()),
            ..Event::bare(time_ms, "w0", EventKind::Ok, F::Effect)
        }
    }

    fn jump(time_ms: u64, jumped_ms: i64) -> Event {
        Event {
            value: Some(json!({"action": "fired", "fault": "clock-jump",
                               "hit": {"jumped_ms": jumped_ms}})),
            ..Event::bare(time_ms, "nemesis", EventKind::Ok, F::Fault)
        }
    }

    #[test]
    fn a_duplicate_effect_around_a_forward_jump_is_the_consumer_s_finding_when_its_marker_expires()
    {
        let events = vec![
            effect(100, "JOB-1"),
            effect(120, "JOB-2"),
            jump(200, 1500),
            // The heal's jump back is not a forward jump.
            jump(250, -1500),
            effect(300, "JOB-1"),
            effect(310, "JOB-2"),
        ];
        let effects: BTreeMap<String, u64> =
            [("JOB-1".to_string(), 2), ("JOB-2".to_string(), 1)].into();
        let found = findings(&events, &effects, Some(1000));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("JOB-1: its effect landed 2 times"),
            "{}",
            found[0]
        );
        assert!(
            found[0].contains("clock-jump of +1500 ms at 200 ms"),
            "{}",
            found[0]
        );
        assert!(found[0].contains("lives 1000 ms"), "{}", found[0]);
        // A marker without a TTL names nothing.
        assert!(findings(&events, &effects, None).is_empty());
    }

    #[test]
    fn a_duplicate_with_no_forward_jump_between_its_effects_is_not_named() {
        let events = vec![
            jump(50, 1500),
            effect(100, "JOB-1"),
            jump(200, -1500),
            effect(300, "JOB-1"),
        ];
        let effects: BTreeMap<String, u64> = [("JOB-1".to_string(), 2)].into();
        assert!(findings(&events, &effects, Some(1000)).is_empty());
    }
}
