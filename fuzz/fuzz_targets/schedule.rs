//! The replay-line decoder: `Schedule::parse` and its `Display`.
//!
//! Two halves, chosen by the first byte:
//!
//! - **text**: the rest, as (lossy) UTF-8, is a schedule line typed or
//!   pasted by a user. Parsing never panics; a refusal names the position
//!   and text of a step that is really there; an accepted line has one step
//!   per whitespace-separated word, and its printed form is canonical (it
//!   parses back to the same schedule and prints the same again).
//! - **steps**: `arbitrary` builds a schedule of every kind of step with any
//!   indexes and any durations a line may name (up to `MS_MAX`, a wait up
//!   to `WAIT_MS_MAX`: the parser refuses more); its printed form must
//!   parse back equal.
//!
//! Where the richer `ackgap replay LINE` decoder (being added in
//! `src/explore/`) belongs: give it a third half here, `mode % 3 == 2`,
//! with the same two properties (never panics on any text; every value it
//! can print parses back equal), and seed files `seed-replay-*` in
//! `fuzz/corpus/schedule/` holding lines that `ackgap explore` prints.

#![no_main]

use ackgap::explore::op::{MS_MAX, WAIT_MS_MAX};
use ackgap::explore::{Schedule, Step};
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        text(&String::from_utf8_lossy(rest));
    } else {
        steps(rest);
    }
});

fn text(line: &str) {
    // A byte order mark before the first step is skipped by the parser
    // (a line pasted from a file saved with one): the words are the
    // line's without it.
    let words: Vec<&str> = line
        .strip_prefix('\u{feff}')
        .unwrap_or(line)
        .split_whitespace()
        .collect();
    match Schedule::parse(line) {
        Ok(schedule) => {
            assert_eq!(schedule.len(), words.len(), "one step per word");
            let printed = schedule.to_string();
            let again = Schedule::parse(&printed).expect("a printed schedule parses");
            assert_eq!(again, schedule, "{line:?} printed as {printed:?}");
            assert_eq!(again.to_string(), printed, "the printed form is canonical");
        }
        Err(err) => {
            assert!(err.position < words.len(), "{err} of {} words", words.len());
            assert_eq!(err.token, words[err.position], "{err}");
            assert!(
                Step::parse(&err.token).is_err(),
                "{err}: the step parses alone"
            );
        }
    }
}

/// One step's choices.
#[derive(Arbitrary, Debug)]
enum Choice {
    Enqueue(u8),
    Lease(u8),
    Complete(u8),
    Fail(u8, u64),
    Extend(u8),
    Crash(u8),
    StaleComplete(u8),
    Reap,
    Tick(u64),
    Wait(u64),
}

impl Choice {
    fn step(&self) -> Step {
        match *self {
            Choice::Enqueue(job) => Step::Enqueue { job },
            Choice::Lease(worker) => Step::Lease { worker },
            Choice::Complete(worker) => Step::Complete { worker },
            // Durations within what a line may name (the parser refuses
            // the rest, naming the bound): every such value prints and
            // parses back equal.
            Choice::Fail(worker, delay_ms) => Step::Fail {
                worker,
                delay_ms: delay_ms % (MS_MAX + 1),
            },
            Choice::Extend(worker) => Step::Extend { worker },
            Choice::Crash(worker) => Step::Crash { worker },
            Choice::StaleComplete(worker) => Step::StaleComplete { worker },
            Choice::Reap => Step::Reap,
            Choice::Tick(ms) => Step::Tick {
                ms: ms % (MS_MAX + 1),
            },
            Choice::Wait(ms) => Step::Wait {
                ms: ms % (WAIT_MS_MAX + 1),
            },
        }
    }
}

fn steps(data: &[u8]) {
    let Ok(choices) = Vec::<Choice>::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    let schedule = Schedule(choices.iter().map(Choice::step).collect());
    let printed = schedule.to_string();
    assert_eq!(
        Schedule::parse(&printed),
        Ok(schedule.clone()),
        "{printed:?}"
    );
    for step in schedule.steps() {
        assert_eq!(step.to_string().parse::<Step>().as_ref(), Ok(step));
    }
}
