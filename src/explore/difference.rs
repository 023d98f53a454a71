//! The difference between the model's state and the queue's, as the
//! refinement check after each step reports it: only the entries that
//! differ (moved out of `driver.rs` unchanged).

use crate::queue::Snapshot;

/// The parts of two snapshots that differ, as (model, valkey) text.
pub(crate) fn difference(model: &Snapshot, valkey: &Snapshot) -> (String, String) {
    use std::collections::{BTreeMap, BTreeSet};
    use std::fmt::Debug;

    fn maps<V: PartialEq + Debug>(
        name: &str,
        a: &BTreeMap<String, V>,
        b: &BTreeMap<String, V>,
        out: &mut (Vec<String>, Vec<String>),
    ) {
        let ids: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for id in ids {
            let (x, y) = (a.get(id), b.get(id));
            if x != y {
                out.0.push(format!("{name}[{id}]={x:?}"));
                out.1.push(format!("{name}[{id}]={y:?}"));
            }
        }
    }

    let mut out = (Vec::new(), Vec::new());
    maps("rows", &model.rows, &valkey.rows, &mut out);
    maps("pending", &model.pending, &valkey.pending, &mut out);
    maps("active", &model.active, &valkey.active, &mut out);
    maps("dead", &model.dead, &valkey.dead, &mut out);
    if model.done != valkey.done {
        out.0.push(format!("done={:?}", model.done));
        out.1.push(format!("done={:?}", valkey.done));
    }
    if model.foreign != valkey.foreign {
        out.0.push(format!("foreign={:?}", model.foreign));
        out.1.push(format!("foreign={:?}", valkey.foreign));
    }
    if model.strays != valkey.strays {
        out.0.push(format!("strays={:?}", model.strays));
        out.1.push(format!("strays={:?}", valkey.strays));
    }
    (out.0.join("; "), out.1.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Model;
    use crate::queue::JobState;

    #[test]
    fn a_difference_names_only_the_entries_that_differ() {
        let mut model = Model::new();
        model.enqueue("JOB-0", b"p", 3, 0, 5).unwrap();
        model.enqueue("JOB-1", b"p", 3, 0, 5).unwrap();
        let a = model.snapshot();
        let mut b = a.clone();
        b.pending.insert("JOB-1".into(), 9);
        b.rows.get_mut("JOB-1").unwrap().state = Some(JobState::Done);
        let (m, v) = difference(&a, &b);
        assert!(!m.contains("JOB-0") && !v.contains("JOB-0"), "{m} / {v}");
        assert!(m.contains("pending[JOB-1]=Some(5)"), "{m}");
        assert!(v.contains("pending[JOB-1]=Some(9)"), "{v}");
        assert!(v.contains("Done"), "{v}");
        assert_eq!(difference(&a, &a), (String::new(), String::new()));
    }
}
