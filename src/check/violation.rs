//! A violation as data: the invariant it breaks, the job, the events it
//! rests on with what each one is to it, and the sentence for people.
//!
//! Everything that reads a violation (the HTML timeline's rings, the
//! findings report, `--json`, JUnit) reads the fields; the sentence is for
//! people only and may be reworded freely (a test rewords every one and
//! shows the rings and the JSON's fields unchanged).
//!
//! # Design notes
//!
//! Each event a violation rests on carries a `Role`: for fenced-settlement
//! `stale-settle`, `lease-ended` and `current-lease`; for settle-once and
//! admission `first` and `second`; for no-loss `enqueued` and `final-read`;
//! for the others `broke` and `earlier`. The sentence for people is the
//! violation's `Display`.
//!
//! The readers of the fields also include `ackgap check`, and JUnit reads
//! them through the walks' failure text; the timeline's rings are read in
//! `report/facts.rs`.

use serde::{Deserialize, Serialize};

/// What one event is to a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Role {
    /// fenced-settlement: the settle accepted after its lease had ended
    /// (its completion).
    StaleSettle,
    /// fenced-settlement: the event that had ended that lease (a newer
    /// grant, an accepted settle of the lease, the reaper's reply).
    LeaseEnded,
    /// fenced-settlement: the newer lease the stale settle should have
    /// lost to (its grant's completion), when one was granted before.
    CurrentLease,
    /// no-loss: the acknowledged enqueue of the job.
    Enqueued,
    /// no-loss: the final read in which the job is missing, or done with
    /// no settle that could have made it so.
    FinalRead,
    /// The first of two events that may happen once (the first settle as
    /// done, the first admission).
    First,
    /// The second of them: the one that broke the invariant.
    Second,
    /// The event that broke the invariant (a lease after done or dead, a
    /// lease beyond max_attempts, an early reap, a lease with another
    /// payload, a read that showed a structure problem).
    Broke,
    /// An earlier event the violation rests on (the settle as done, the
    /// death, the admission, the grant of the earlier token).
    Earlier,
}

impl Role {
    /// True for the violation's own event (the timeline's solid ring, the
    /// one the list links to); false for an event it cites.
    pub fn primary(self) -> bool {
        match self {
            Role::StaleSettle | Role::FinalRead | Role::Second | Role::Broke => true,
            Role::LeaseEnded
            | Role::CurrentLease
            | Role::Enqueued
            | Role::First
            | Role::Earlier => false,
        }
    }

    /// The role in words, for a ring's title and the findings report.
    pub fn describe(self) -> &'static str {
        match self {
            Role::StaleSettle => "the stale settle, accepted",
            Role::LeaseEnded => "its lease had ended here",
            Role::CurrentLease => "the lease it should have lost to",
            Role::Enqueued => "the enqueue, acknowledged",
            Role::FinalRead => "the final read",
            Role::First => "the first",
            Role::Second => "the second",
            Role::Broke => "the event that broke it",
            Role::Earlier => "an earlier event it rests on",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The serde name: one spelling for JSON and for people.
        let name = serde_json::to_value(self).map_err(|_| std::fmt::Error)?;
        f.write_str(name.as_str().unwrap_or("?"))
    }
}

/// One event a violation rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cited {
    /// The event's history index.
    pub event: u64,
    /// What it is to the violation.
    pub role: Role,
}

/// One violation of an invariant (or, in an `unknown` report, why the
/// invariant could not be judged), as data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// The invariant's name, as the report's.
    pub invariant: &'static str,
    /// The job it is about, when it is about one.
    pub job: Option<String>,
    /// The events it rests on, each with its role, in the order the
    /// checker names them.
    pub events: Vec<Cited>,
    /// The sentence for people. Nothing reads it back.
    pub text: String,
}

impl Violation {
    /// A violation of `invariant` about `job` resting on `events`, said
    /// as `text`.
    pub fn new(
        invariant: &'static str,
        job: Option<&str>,
        events: &[(u64, Role)],
        text: String,
    ) -> Violation {
        Violation {
            invariant,
            job: job.map(str::to_owned),
            events: events
                .iter()
                .map(|&(event, role)| Cited { event, role })
                .collect(),
            text,
        }
    }

    /// The violation's own event (its first primary one), if it names one.
    pub fn primary(&self) -> Option<u64> {
        self.events
            .iter()
            .find(|c| c.role.primary())
            .map(|c| c.event)
    }

    /// The events with their roles, as `events 15 (stale-settle), 11
    /// (lease-ended)`; empty when it cites none.
    pub fn cites(&self) -> String {
        if self.events.is_empty() {
            return String::new();
        }
        let each: Vec<String> = self
            .events
            .iter()
            .map(|c| format!("{} ({})", c.event, c.role))
            .collect();
        format!("events {}", each.join(", "))
    }

    /// The event of `role`, if it names one.
    pub fn event(&self, role: Role) -> Option<u64> {
        self.events.iter().find(|c| c.role == role).map(|c| c.event)
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}
