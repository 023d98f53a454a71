//! The report draws a violation from its fields, never from its words:
//! each checker's violating history (`check/canary.rs`) drawn with the
//! checkers' sentences and again with them reworded.

use crate::check::canary::violating_histories;
use crate::check::{check_all, Report, CHECKERS};

/// The timeline's rings as (violation, role, event), read from its
/// `circle` tags.
fn rings(html: &str) -> Vec<(String, String, String)> {
    let attr = |tag: &str, name: &str| {
        let key = format!(" {name}=\"");
        let from = tag.find(&key)? + key.len();
        Some(tag[from..from + tag[from..].find('"')?].to_owned())
    };
    let mut out: Vec<_> = html
        .match_indices("<circle ")
        .map(|(i, _)| &html[i..i + html[i..].find('>').expect("closed")])
        .filter_map(|t| {
            Some((
                attr(t, "data-violation")?,
                attr(t, "data-role")?,
                attr(t, "data-event")?,
            ))
        })
        .collect();
    out.sort();
    out
}

/// The reports as `--json` carries them, without the sentences.
fn fields(reports: &[Report]) -> serde_json::Value {
    let mut value = serde_json::to_value(reports).expect("serializes");
    for r in value.as_array_mut().expect("a list") {
        for v in r["violations"].as_array_mut().expect("a list") {
            v.as_object_mut().expect("an object").remove("text");
        }
    }
    value
}

/// Every checker's every sentence replaced by words with no number, no
/// job and no colon (what a rewording that reads nothing back would
/// survive): the timeline draws the same rings, and `--json` carries the
/// same fields, so nothing reads a violation's words back. Every checker
/// `check_all` runs broke here, and every ring is on an event of the
/// history.
#[test]
fn rewording_every_sentence_leaves_the_rings_and_the_json_fields_unchanged() {
    let mut broke = std::collections::BTreeSet::new();
    for events in violating_histories() {
        let reports = check_all(&events);
        let html = super::render("t", &events, &reports);
        let mut reworded = reports.clone();
        for (n, v) in reworded
            .iter_mut()
            .flat_map(|r| r.violations.iter_mut())
            .enumerate()
        {
            assert!(!v.events.is_empty(), "{v:?} cites no event");
            broke.insert(v.invariant);
            v.text = format!("reworded sentence {}", "x".repeat(n + 1));
        }
        let again = super::render("t", &events, &reworded);
        let before = rings(&html);
        assert!(!before.is_empty(), "no ring drawn: {reports:#?}");
        assert_eq!(before, rings(&again), "{reports:#?}");
        assert_eq!(fields(&reports), fields(&reworded));
        for v in reports.iter().flat_map(|r| &r.violations) {
            assert!(!again.contains(&v.text), "the old words are still drawn");
        }
    }
    let all: std::collections::BTreeSet<&str> = CHECKERS.iter().map(|(name, _)| *name).collect();
    assert_eq!(broke, all, "a checker has no violating history here");
}
