//! Steps and answers in words, for a walk's log and its printed failure:
//! who does what in a step ([`describe`]), what the server answered
//! ([`answer`]). Moved out of `driver.rs` to keep it under its size
//! ratchet once parallel steps and the server's faults both had words.

use super::{job_id, Outcome, Step};

/// Who does what in `step`, in words.
pub fn describe(step: &Step) -> String {
    match step {
        Step::Enqueue { job } => format!("producer enqueues {}", job_id(*job)),
        Step::Lease { worker } => format!("w{worker} leases"),
        Step::LeaseLost { worker } => format!("w{worker} leases; the reply is lost"),
        Step::Complete { worker } => format!("w{worker} applies its effect and acks"),
        Step::StaleComplete { worker } => {
            format!("w{worker} finishes its effect and acks the lease it held before (stale)")
        }
        Step::CompleteLost { worker } => {
            format!("w{worker} applies its effect and acks; the reply is lost")
        }
        Step::CompleteNext { worker } => {
            format!("w{worker} applies its effect, acks and leases the next job in one call")
        }
        Step::Effect { worker } => format!("w{worker} applies the next part of its effect"),
        Step::Fail { worker, delay_ms } => {
            format!("w{worker} fails its lease (retry in {delay_ms} ms)")
        }
        Step::Extend { worker } => format!("w{worker} extends its lease"),
        Step::Crash { worker } => format!("w{worker} crashes"),
        Step::Reap => "the reaper runs".into(),
        Step::Tick { ms } => format!("time passes {ms} ms"),
        Step::Wait { ms } => format!("{ms} ms of real time pass (the server's clock too)"),
        Step::ServerKill => "the server is killed (kill -9) and restarted".into(),
        Step::PowerLoss => "the server loses power and is powered on".into(),
        Step::Parallel { steps } => {
            let each: Vec<String> = steps.iter().map(describe).collect();
            format!("together: {}", each.join(" | "))
        }
    }
}

/// What the server answered, in words.
pub(super) fn answer(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Enqueue(e) => format!("{e:?}").to_lowercase(),
        Outcome::Lease(None) => "nothing ready".into(),
        Outcome::Lease(Some(l)) => {
            format!("{} token {} (deadline {})", l.id, l.token, l.deadline_ms)
        }
        Outcome::Complete(s) => format!("{s:?}"),
        Outcome::Fail(f) => format!("{f:?}"),
        Outcome::Extend(x) => format!("{x:?}"),
        Outcome::Reap(r) if r.is_empty() => "nothing expired".into(),
        Outcome::Reap(r) => r
            .iter()
            .map(|r| format!("{} -> {}", r.id, r.to))
            .collect::<Vec<_>>()
            .join(", "),
        Outcome::Refused { code } => format!("refused {code}"),
        Outcome::Crash => "forgot its lease".into(),
        Outcome::Tick { now_ms } => format!("now {now_ms} ms"),
        Outcome::Effect { part } => format!("part {part} applied"),
        Outcome::Idle => "nothing to do".into(),
        Outcome::Restarted => "the server is back".into(),
        Outcome::Unanswered { error } => format!("no answer: {error}"),
        Outcome::CompleteNext { settled, next } => {
            format!("{}; then {}", answer(settled), answer(next))
        }
        Outcome::Parallel(each) => each.iter().map(answer).collect::<Vec<_>>().join(" | "),
    }
}

/// Where a crash falls relative to the worker's effect.
pub(crate) fn crash_point(parts_done: usize, parts: usize) -> &'static str {
    if parts_done == 0 {
        "before-effect"
    } else if parts_done < parts {
        "between-parts"
    } else {
        "ack-gap"
    }
}
