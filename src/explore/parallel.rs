//! Many seeded walks at once: `--jobs N` keeps N walks in flight, each on a
//! [`Subject`] of its own (its own queue name, so its own hash tag, and its
//! own connection to the same server), and hands the reports back in seed
//! order, so that what a run reports does not depend on N. `--shard K/N`
//! ([`Shard`]) takes every N-th seed of a range, so that N machines walk
//! the range between them and `ackgap merge` puts their reports together.
//!
//! A walk is a function of its seed alone (the queue is cleared before it,
//! the steps are drawn from the seed): which job ran it, and what ran
//! beside it on the same server under another hash tag, changes neither its
//! steps nor its verdict.
//!
//! # Design notes
//!
//! `walk_seeds` keeps one walk in flight per `Subject` it is given (each on
//! its own queue name: `job_queue_name`), each walk a task of its own, and
//! hands the reports back in seed order through `in_order`, which holds a
//! finished walk until every lower seed's is in. A `WalkObserver` (the
//! command's progress bar and failure files, or `PrintFailures`) is told of
//! each in that order and may stop the run (the user campaign stops at its
//! first failure). A walk that stops unjudged stops the run as a loop would:
//! no higher seed starts, the lower ones finish, and the lowest such seed's
//! error is answered. So the lowest failing seed is the one shrunk.
//!
//! `walk_seeds_spread` gives each job a row of subjects and walks seed S on
//! `row[S % len]`: on a cluster `ackgap explore` opens one queue per primary
//! in each row (`BASE-K`, the smallest K whose slot the primary serves by
//! `CLUSTER SLOTS`, `chaos::matrix::name_in_slots`), so the seeds spread over
//! the primaries and a seed replayed alone walks the same queue (the printed
//! command carries a job's `--queue-name`).
//!
//! `Seeds` is a range or a shard of one (`Shard` K/N: the K-th seed and
//! every N-th after it). `explore`, `campaign::campaign_on`,
//! `mutants::matrix_jobs` (mutants in flight, each on its own queue),
//! `testing::Campaign` and the bench's explorer rows use it.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::driver::{ExploreError, Subject};
use super::walk::{explore_unprinted, WalkReport};
use crate::check::Verdict;

/// Which part of a seed range a run walks: shard `index` (from 1) of
/// `count`, the range's `index`-th seed and every `count`-th after it
/// (`1/1`: the whole range). Interleaved rather than cut in blocks, so that
/// the shards of a range whose walks grow slower with the seed still take
/// about as long as each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// From 1.
    pub index: u64,
    /// How many shards the range is cut into.
    pub count: u64,
}

impl Shard {
    /// The whole range.
    pub const WHOLE: Shard = Shard { index: 1, count: 1 };

    /// True for `1/1`.
    pub fn is_whole(&self) -> bool {
        self.count == 1
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `K/N` with `1 <= K <= N`.
    fn from_str(text: &str) -> Result<Shard, String> {
        let bad = || format!("{text:?} is not a shard: expected K/N with 1 <= K <= N, e.g. 2/3");
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let index: u64 = k.trim().parse().map_err(|_| bad())?;
        let count: u64 = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// The seeds a run walks, in order: `first`, then every `stride`-th, `len`
/// of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seeds {
    first: u64,
    stride: u64,
    len: u64,
}

impl Seeds {
    /// `count` consecutive seeds from `first` (`None` when they would run
    /// past `u64::MAX`).
    pub fn range(first: u64, count: u64) -> Option<Seeds> {
        first.checked_add(count.saturating_sub(1))?;
        Some(Seeds {
            first,
            stride: 1,
            len: count,
        })
    }

    /// This range's part `shard`: its `index`-th seed and every `count`-th
    /// after it (empty when the range has fewer seeds than the shard's
    /// index).
    pub fn shard(&self, shard: Shard) -> Seeds {
        let skip = shard.index - 1;
        let len = self.len.saturating_sub(skip).div_ceil(shard.count);
        Seeds {
            first: self.first + skip * self.stride,
            stride: self.stride * shard.count,
            len,
        }
    }

    /// How many seeds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`-th seed, from 0.
    pub fn get(&self, i: u64) -> Option<u64> {
        (i < self.len).then(|| self.first + i * self.stride)
    }

    /// The seeds in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len).map(|i| self.first + i * self.stride)
    }
}

/// Told of each walk as the run goes: what a command's progress bar and
/// failure files are made of. The reports come in seed order (a walk that
/// finished before a lower seed's waits for it), whatever the number of
/// jobs.
pub trait WalkObserver: Send {
    /// `total` walks are about to run.
    fn start(&mut self, _total: u64) {}

    /// A phase of a campaign begins (`ackgap run`: the exhaustive search,
    /// each consumer's walks, the smoke scenario): `name` says which, and
    /// `walks` whether its work is walks this observer is told of (the
    /// others cannot say how far they got).
    fn phase(&mut self, _name: &str, _walks: bool) {}

    /// The next walk, in seed order, and what it found; `Break` stops the
    /// run there (the walks still running are dropped, none starts).
    fn walk(&mut self, report: &WalkReport) -> ControlFlow<()>;
}

/// The observer of a library run: a failing walk's schedule and replay
/// command go to stderr, as [`super::explore_on`] writes them.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrintFailures;

impl WalkObserver for PrintFailures {
    fn walk(&mut self, report: &WalkReport) -> ControlFlow<()> {
        if report.verdict != Verdict::Valid {
            // A closed stderr loses the message, never the report.
            use std::io::Write as _;
            let _ = std::io::stderr().write_all(report.failure_text().as_bytes());
        }
        ControlFlow::Continue(())
    }
}

/// A walk that stopped unjudged, and its seed.
#[derive(Debug, thiserror::Error)]
#[error("seed {seed}: {source}")]
pub struct SeedError {
    /// The seed whose walk stopped (the lowest one, when several did).
    pub seed: u64,
    /// Why.
    #[source]
    pub source: ExploreError,
}

/// The queue name of job `job` of a run on queue `name`: `name` itself
/// for job 0 (so `--jobs 1` uses the name given), `name-J` for the others,
/// each its own hash tag.
pub fn job_queue_name(name: &str, job: usize) -> String {
    if job == 0 {
        name.to_owned()
    } else {
        format!("{name}-{job}")
    }
}

/// Walks every seed of `seeds` with `steps_max` random steps, as many at
/// once as there are `subjects` (one walk per subject at a time: give each
/// its own queue name and connection), and answers the reports in seed
/// order, telling `observer` of each in that order (until it says stop).
///
/// A walk that stops unjudged stops the run: no seed after it starts, the
/// walks of lower seeds finish, and the error is the lowest such seed's,
/// exactly what walking the seeds one by one would have answered.
pub async fn walk_seeds(
    subjects: Vec<Arc<Subject>>,
    seeds: Seeds,
    steps_max: usize,
    observer: &mut dyn WalkObserver,
) -> Result<Vec<WalkReport>, SeedError> {
    let rows = subjects.into_iter().map(|s| vec![s]).collect();
    walk_seeds_spread(rows, seeds, steps_max, observer).await
}

/// [`walk_seeds`] with a row of subjects per job (each row as long as the
/// others): seed S walks on `row[S % row.len()]` of the job that takes it,
/// so the seed alone says which of the row's queues it uses (on a
/// cluster, one queue per primary: the seeds spread over the primaries,
/// and a seed replayed alone lands on the same one).
pub async fn walk_seeds_spread(
    subjects: Vec<Vec<Arc<Subject>>>,
    seeds: Seeds,
    steps_max: usize,
    observer: &mut dyn WalkObserver,
) -> Result<Vec<WalkReport>, SeedError> {
    observer.start(seeds.len());
    let jobs = subjects.len();
    let walk = move |job: usize, i: u64| {
        let seed = seeds.get(i).unwrap_or_default();
        let row = &subjects[job];
        let subject = row[(seed % row.len().max(1) as u64) as usize].clone();
        async move { explore_unprinted(&subject, seed, steps_max).await }
    };
    in_order(jobs, seeds.len(), walk, |report| observer.walk(report))
        .await
        .map_err(|(i, source)| SeedError {
            seed: seeds.get(i).unwrap_or_default(),
            source,
        })
}

/// Runs `run(job, i)` for every `i` in `0..count`, `jobs` at a time (`job`
/// in `0..jobs` names the worker that runs it: one at a time each), and
/// answers the results in the order of `i`, handing each to `each` in that
/// order; `each` may stop the run early (the results so far are answered).
/// The first error in that order stops the run as it would have stopped a
/// loop: nothing after it starts, everything before it finishes, and it is
/// the error answered, with its `i`. Each run is a task of its own, so on a
/// multi-threaded runtime they also run on several cores.
pub async fn in_order<T, E, F, Fut>(
    jobs: usize,
    count: u64,
    run: F,
    mut each: impl FnMut(&T) -> ControlFlow<()>,
) -> Result<Vec<T>, (u64, E)>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let run = Arc::new(run);
    let next = Arc::new(AtomicU64::new(0));
    // The lowest index that failed or was the last wanted: none above it
    // starts.
    let stop = Arc::new(AtomicU64::new(u64::MAX));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = tokio::task::JoinSet::new();
    for job in 0..jobs.max(1).min(count.try_into().unwrap_or(usize::MAX)) {
        let (run, next, stop, tx) = (run.clone(), next.clone(), stop.clone(), tx.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= count || i > stop.load(Ordering::SeqCst) {
                    break;
                }
                let done = run(job, i).await;
                if done.is_err() {
                    stop.fetch_min(i, Ordering::SeqCst);
                }
                if tx.send((i, done)).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let mut waiting: BTreeMap<u64, Result<T, E>> = BTreeMap::new();
    let mut done: Vec<T> = Vec::new();
    while let Some((i, result)) = rx.recv().await {
        waiting.insert(i, result);
        while let Some(result) = waiting.remove(&(done.len() as u64)) {
            let i = done.len() as u64;
            // Dropping `tasks` on a return aborts the runs still going.
            let value = result.map_err(|e| (i, e))?;
            let flow = each(&value);
            done.push(value);
            if flow.is_break() {
                return Ok(done);
            }
        }
    }
    // Every sender is gone: each task ran out of work, or one panicked.
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_of_a_range_cover_it_once_in_turn() {
        let all = Seeds::range(10, 10).unwrap();
        let mut seen: Vec<u64> = (1..=3)
            .flat_map(|k| {
                all.shard(Shard { index: k, count: 3 })
                    .iter()
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(
            all.shard(Shard { index: 2, count: 3 })
                .iter()
                .collect::<Vec<_>>(),
            [11, 14, 17]
        );
        seen.sort();
        assert_eq!(seen, all.iter().collect::<Vec<_>>());
        assert!(all
            .shard(Shard {
                index: 5,
                count: 20
            })
            .iter()
            .eq([14]));
        assert!(Seeds::range(1, 2)
            .unwrap()
            .shard(Shard { index: 3, count: 3 })
            .is_empty());
    }

    #[test]
    fn a_shard_is_k_of_n() {
        assert_eq!("2/3".parse(), Ok(Shard { index: 2, count: 3 }));
        for bad in ["0/3", "4/3", "3", "a/b", "1/0", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_range_past_the_last_seed_is_refused() {
        assert!(Seeds::range(u64::MAX, 2).is_none());
        assert!(Seeds::range(u64::MAX, 1).is_some());
        assert!(Seeds::range(1, 0).unwrap().is_empty());
    }
}
