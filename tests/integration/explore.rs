//! The model checker against real servers: seeded random walks of the
//! reference queue agree with the model step for step, a schedule survives
//! its text form and replays to the same history, and a queue whose
//! `complete` lost its token check is caught and named by its seed.

use crate::common; // the server matrix (`start`, `matrix!`) and fresh queue names

use crate::common::ackgap;
use ackgap::check::Verdict;
use ackgap::explore::{explore, replay, Divergence, Schedule, WalkReport};
use ackgap::history::Event;
use ackgap::queue::client::QueueConfig;
use ackgap::queue::scripts::Scripts;
use ackgap::queue::Queue;
use ackgap::server::Persistence;
use common::{Backend, Ctx};

/// `complete.lua` without the token check (see the file's header).
const COMPLETE_UNFENCED: &str =
    include_str!(concat!(env!("OUT_DIR"), "/mutants/complete_unfenced.lua"));

const SEEDS: u64 = 100;
const STEPS: usize = 50;

/// What a history says, without the wall-clock times.
fn meaning(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {:?} {:?} {:?} {:?} {:?} {:?}",
                e.process, e.kind, e.f, e.job, e.token, e.value, e.error
            )
        })
        .collect()
}

fn assert_valid(report: &WalkReport) {
    assert_eq!(
        report.verdict,
        Verdict::Valid,
        "{}\n{:#?}",
        report.failure_text(),
        report.invariants
    );
}

async fn the_reference_queue_refines_the_model_on_100_seeds_of_50_steps(ctx: Ctx) {
    let mut steps = 0;
    let mut complete_next = 0;
    let mut delays_judged = 0;
    let mut exclusive = 0;
    for seed in 0..SEEDS {
        let report = explore(&ctx.queue, seed, STEPS)
            .await
            .expect("the walk ran");
        assert_valid(&report);
        complete_next += report
            .schedule
            .split(' ')
            .filter(|s| s.starts_with('n'))
            .count();
        assert!(report.divergence.is_none());
        let names: Vec<&str> = report.invariants.iter().map(|r| r.invariant).collect();
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
                "delay-respected",
                "refinement",
                "liveness"
            ]
        );
        assert!(report.steps > STEPS, "healing adds steps: {}", report.steps);
        steps += report.steps;
        let delay = &report.invariants[9];
        delays_judged += delay.counts["judged"];
        exclusive += report.invariants[8].counts["exercised"];
    }
    // The walks exercise every kind of step, complete_and_lease included.
    assert!(complete_next > 0, "no walk drew an `n` step");
    // The leases after a fail's ready time were judged against it (and
    // held: every walk is valid), not left unjudged.
    assert!(delays_judged > 0, "no lease judged against a ready time");
    // Workers asked for leases while another held a job under a live
    // lease, and the queue never handed that job out (lease-exclusive
    // held where it could have broken).
    assert!(exclusive > 0, "no lease asked for while another was live");
    eprintln!(
        "{SEEDS} seeds, {steps} steps ({complete_next} complete_and_lease) on {:?}",
        ctx.backend
    );
}

matrix!(the_reference_queue_refines_the_model_on_100_seeds_of_50_steps);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_schedule_round_trips_through_its_text_form_and_replays_to_the_same_history() {
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    for seed in 0..20 {
        let walked = explore(&queue, seed, STEPS).await.unwrap();
        assert_valid(&walked);
        let schedule = Schedule::parse(&walked.schedule).expect("a printed schedule parses");
        assert_eq!(schedule.to_string(), walked.schedule);
        assert_eq!(schedule.len(), walked.steps);

        // The same seed draws the same walk.
        let again = explore(&queue, seed, STEPS).await.unwrap();
        assert_eq!(again.schedule, walked.schedule);
        assert_eq!(meaning(&again.history), meaning(&walked.history));

        // Replaying the text gives the same history, then heals again: the
        // walk had healed already, so that adds one empty lease and the read.
        let replayed = replay(&queue, seed, &schedule).await.unwrap();
        assert_valid(&replayed);
        assert!(
            replayed.replay.contains(&walked.schedule),
            "{}",
            replayed.replay
        );
        let original = meaning(&walked.history);
        let before_read = &original[..original.len() - 2];
        assert_eq!(
            &meaning(&replayed.history)[..before_read.len()],
            before_read
        );
        assert_eq!(replayed.steps, walked.steps + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_written_schedule_is_fenced_where_it_should_be_and_heals_every_job_it_names() {
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    // Seed 1: 2 workers, lease 50 ms, max_attempts 2. w0 crashes holding
    // JOB-0, the reaper takes it back, w1 leases it again, and w0's stale
    // complete is refused; then six more jobs than the seed's window.
    let schedule = Schedule::parse("e0 l0 k0 t50 r l1 s0 c1 e1 e2 e3 e4 e5 e6").unwrap();
    let report = replay(&queue, 1, &schedule).await.unwrap();
    let c = &report.config;
    assert_eq!(
        (c.workers, c.lease_ms, c.max_attempts),
        (2, 50, 2),
        "seed 1 changed"
    );
    assert_valid(&report);
    let counts = |name: &str| {
        report
            .invariants
            .iter()
            .find(|r| r.invariant == name)
            .unwrap()
            .counts
            .clone()
    };
    assert_eq!(counts("fenced-settlement").get("refused"), Some(&1));
    assert_eq!(counts("no-loss").get("done"), Some(&7));
    assert_eq!(counts("liveness").get("bound"), Some(&7));
    assert_eq!(counts("liveness").get("drain_leases"), Some(&7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_and_lease_steps_refine_the_model_and_record_the_complete_then_the_lease() {
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    // Seed 1: 2 workers, lease 50 ms. w0 settles each job and takes the
    // next in one call, until none is left; then w0 leases JOB-3, loses it
    // to the reaper, w1 takes it, and w0's n0 is fenced and leases nothing.
    let schedule = Schedule::parse("e0 e1 e2 l0 n0 n0 n0 e3 l0 t50 r l1 n0 c1").unwrap();
    let report = replay(&queue, 1, &schedule).await.unwrap();
    assert_valid(&report);
    assert!(report.divergence.is_none());
    let refused = report
        .invariants
        .iter()
        .find(|r| r.invariant == "fenced-settlement")
        .unwrap()
        .counts
        .get("refused")
        .copied();
    assert_eq!(refused, Some(1), "w0's stale complete is refused");
    // Each `n0` is a complete of the job held, then, with nothing between,
    // the lease of the next one.
    let w0: Vec<String> = report
        .history
        .iter()
        .filter(|e| e.process == "w0")
        .map(|e| format!("{:?} {:?} {:?}", e.kind, e.f, e.job))
        .collect();
    let leased = |job: &str| format!("Ok Lease Some(\"{job}\")");
    let settled = |job: &str| format!("Ok Complete Some(\"{job}\")");
    for (held, next) in [("JOB-0", "JOB-1"), ("JOB-1", "JOB-2")] {
        let at = w0
            .iter()
            .position(|e| *e == settled(held))
            .unwrap_or_else(|| panic!("no complete of {held}: {w0:#?}"));
        assert_eq!(w0[at + 1], "Invoke Lease None", "{w0:#?}");
        assert_eq!(w0[at + 2], leased(next), "{w0:#?}");
    }
    let events = &report.history;
    let first = events
        .iter()
        .position(|e| e.process == "w0" && format!("{:?} {:?}", e.kind, e.f) == "Ok Complete")
        .unwrap();
    assert_eq!(
        events[first + 1].process,
        "w0",
        "another event came between the halves"
    );
}

/// The first seed of `0..SEEDS` whose walk the mutant fails, and its report.
async fn first_failing_seed(queue: &Queue) -> Option<(u64, WalkReport)> {
    for seed in 0..SEEDS {
        let report = explore(queue, seed, STEPS).await.expect("the walk ran");
        if report.verdict != Verdict::Valid {
            return Some((seed, report));
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_without_the_token_check_is_caught_by_refinement_and_named_by_its_seed() {
    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let config = QueueConfig {
        scripts: Scripts::with_overrides(&[("complete", COMPLETE_UNFENCED)]),
        ..Default::default()
    };
    let queue = Queue::connect_with(&server.client(), &common::queue_name(), config)
        .await
        .unwrap();

    let (seed, report) = first_failing_seed(&queue)
        .await
        .unwrap_or_else(|| panic!("no seed in 0..{SEEDS} caught the unfenced complete"));
    let divergence: &Divergence = report.divergence.as_ref().expect("a divergence");
    assert_eq!(report.verdict, Verdict::Invalid);
    assert!(
        matches!(divergence.check, "outcome" | "refinement"),
        "{divergence}"
    );
    assert!(
        ['c', 's', 'n']
            .iter()
            .any(|c| divergence.step.to_string().starts_with(*c)),
        "only a complete can diverge: {divergence}"
    );
    assert_eq!(
        report.replay,
        format!("ackgap explore --seed {seed} --steps {STEPS}")
    );
    assert!(report.failure_text().contains(&report.replay));
    assert!(report.failure_text().contains(&report.schedule));

    // The printed command reproduces the same divergence on the same step.
    let again = explore(&queue, seed, STEPS).await.unwrap();
    assert_eq!(again.divergence.as_ref(), Some(divergence));
    assert_eq!(again.schedule, report.schedule);
    assert_eq!(meaning(&again.history), meaning(&report.history));

    // So does the printed schedule.
    let schedule = Schedule::parse(&report.schedule).unwrap();
    let replayed = replay(&queue, seed, &schedule).await.unwrap();
    assert_eq!(replayed.divergence.as_ref(), Some(divergence));

    // And the reference scripts agree with the model on that very schedule.
    let reference = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    let fixed = replay(&reference, seed, &schedule).await.unwrap();
    assert_valid(&fixed);
}

#[test]
fn ackgap_explore_over_several_seeds_exits_valid_with_a_summary_of_steps_per_second() {
    let out = ackgap(&["explore", "--seed", "3", "--steps", "30", "--seeds", "5"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("seeds 3..=7"), "{text}");
    assert!(text.contains("5 seeds, 0 failed;"), "{text}");
    assert!(text.contains("steps/s"), "{text}");
}

/// Like `run` and `chaos`, explore says first what it runs on: its
/// header (the walks, the server with its port and pid, where the files
/// go) is the first thing on stdout, before any walk's result.
#[test]
fn explore_prints_its_header_first_the_server_its_port_and_pid_and_where_the_files_go() {
    for args in [
        &["explore", "--seed", "2", "--steps", "20"][..],
        &["explore", "--seed", "3", "--steps", "20", "--seeds", "3"][..],
    ] {
        let out = ackgap(args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{text}");
        let mut lines = text.lines();
        let first = lines.next().unwrap_or_default();
        assert!(first.starts_with("ackgap explore: seeds "), "{text}");
        let header: Vec<&str> = text.split("\n\n").next().unwrap().lines().collect();
        let server = header
            .iter()
            .find(|l| l.trim_start().starts_with("server "))
            .unwrap_or_else(|| panic!("no server line: {text}"));
        assert!(
            server.contains("process on 127.0.0.1:") && server.contains("(pid "),
            "{server}"
        );
        let files = header
            .iter()
            .find(|l| l.trim_start().starts_with("files: "))
            .unwrap_or_else(|| panic!("no files line: {text}"));
        assert!(
            files.contains("target/ackgap/explore/") && files.contains("target/ackgap/failures/"),
            "{files}"
        );
        // The results come after it.
        let verdict = text.find("verdict").expect("a verdict");
        assert!(text.find("files: ").unwrap() < verdict, "{text}");
    }
}

#[test]
fn ackgap_explore_json_reports_the_configuration_schedule_and_replay_command() {
    let out = ackgap(&["explore", "--seed", "9", "--steps", "40", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["verdict"], "valid");
    assert_eq!(report["seed"], 9);
    assert_eq!(
        report["replay"],
        "ackgap explore --seed 9 --steps 40 --server process"
    );
    let schedule = report["schedule"].as_str().unwrap();
    assert!(Schedule::parse(schedule).is_ok(), "{schedule}");
    assert!(report["config"]["weights"]["lease"].as_u64().unwrap() >= 1);

    // The printed schedule runs again as is.
    let out = ackgap(&["explore", "--seed", "9", "--schedule", schedule]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Every invariant's tally in `explore --json`: the chances the walks gave
/// it to break, and `not exercised` where they gave none. A schedule that
/// never reaps gives fenced-settlement and lease-respected none: its
/// verdict line names them, and `--require-exercised` turns the run into
/// exit 2.
#[test]
fn explore_json_counts_each_invariants_chances_and_a_walk_without_a_reap_exercises_no_fence() {
    let out = ackgap(&[
        "explore", "--seed", "3", "--steps", "30", "--seeds", "4", "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for (name, _) in ackgap::check::CHECKERS {
        let tally = &report["invariants"][name];
        assert_eq!(tally["runs"], 4, "{name}: {report:#}");
        let exercised = tally["exercised"].as_u64().expect("a count");
        let not_exercised = tally["not_exercised"].as_u64().unwrap();
        // A walk that exercised nothing counts among not_exercised, and
        // walks that exercised nothing add nothing.
        assert!(exercised > 0 || not_exercised == 4, "{name}: {tally}");
    }
    assert!(
        report["invariants"]["no-loss"]["exercised"]
            .as_u64()
            .unwrap()
            > 0
    );

    // Enqueue, lease, complete: nothing reaped, nothing leased again.
    let args = ["explore", "--seed", "1", "--schedule", "e0 l0 c0"];
    let out = ackgap(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("verdict: "))
        .expect("a verdict line");
    assert!(
        line.starts_with("verdict: valid; not exercised: fenced-settlement,"),
        "{line}"
    );
    assert!(line.contains("lease-respected"), "{line}");
    for name in ["fenced-settlement", "lease-respected"] {
        let row = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default();
        assert!(row.contains("not exercised"), "{text}");
    }
    let out = ackgap(&[&args[..], &["--require-exercised", "fenced-settlement"]].concat());
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ackgap_explore_refuses_a_malformed_schedule_with_the_usage_exit_code() {
    let out = ackgap(&["explore", "--schedule", "e0 l0 q7"]);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("step 2 \"q7\""), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhaustive_search_of_2_jobs_2_workers_to_depth_6_reaches_4029_states_each_agreeing_with_valkey(
) {
    use ackgap::explore::{exhaust, ExhaustConfig, Subject};

    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    let subject = Subject::reference(&queue);
    let report = exhaust(&subject, ExhaustConfig::new(2, 2, 6))
        .await
        .unwrap();
    assert_eq!(report.failure, None);
    assert_eq!(
        (report.states, report.transitions, report.merged),
        (4029, 13062, 9034)
    );
    // Before the tick to the next deadline: 1206 states, by depth
    // [1, 3, 10, 39, 106, 291, 756]; before the delayed fail and the
    // ticks a ms either side of a deadline: 1814 states, by depth
    // [1, 3, 10, 43, 138, 413, 1206].
    assert_eq!(report.states_by_depth, [1, 3, 10, 53, 230, 833, 2899]);
    assert!(report.valkey_steps > report.states as u64);

    // The model alone, deeper: the counts are pinned too.
    let mut deeper = ExhaustConfig::new(2, 2, 8);
    deeper.valkey = false;
    let report = exhaust(&subject, deeper).await.unwrap();
    // Before the tick to the next deadline: (6735, 30608); before the
    // delayed fail and the boundary ticks: (12396, 55106).
    assert_eq!((report.states, report.transitions), (37414, 161021));
    assert_eq!(
        report.states_by_depth,
        [1, 3, 10, 53, 230, 833, 2899, 8904, 24481]
    );
    assert_eq!(report.valkey_steps, 0);
}

#[test]
fn ackgap_exhaust_reports_states_transitions_and_steps_per_second_as_json() {
    let out = ackgap(&[
        "exhaust",
        "--jobs",
        "1",
        "--workers",
        "1",
        "--depth",
        "5",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["verdict"], "valid");
    assert_eq!(report["states"], 185);
    assert_eq!(report["transitions"], 549);
    assert!(report["valkey_steps_per_s"].as_f64().unwrap() > 0.0);
    assert!(report["model_steps_per_s"].as_f64().unwrap() > 0.0);
}

/// The wait events of a history: (time of the invoke, time of its ok,
/// the real wait the ok notes), in ms.
fn waits(events: &[Event]) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut invoked = None;
    for e in events.iter().filter(|e| e.process == "nemesis") {
        let value = e.value.clone().unwrap_or_default();
        match value.get("outcome").and_then(|o| o.as_str()) {
            Some("wait") if value.get("real") == Some(&serde_json::Value::Bool(true)) => {
                let waited = value["waited_ms"].as_u64().expect("waited_ms");
                out.push((invoked.expect("an invoke before"), e.time_ms, waited));
            }
            _ => invoked = Some(e.time_ms),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_with_real_time_steps_replays_to_the_same_history_with_its_waits_really_waited() {
    use ackgap::explore::{explore_on, run_schedule, Line, Subject, SwarmConfig};

    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    let subject = Subject::reference(&queue);
    // The first seeds whose walks drew real time.
    let seeds: Vec<u64> = (0..80)
        .filter(|seed| SwarmConfig::from_seed(*seed).real_time)
        .take(3)
        .collect();
    assert_eq!(seeds.len(), 3, "one walk in eight draws real time");
    for seed in seeds {
        let config = SwarmConfig::from_seed(seed);
        assert!(
            (50..=100).contains(&config.lease_ms),
            "a real-time walk's lease is scaled down: {config:?}"
        );
        let walked = explore_on(&subject, seed, 30).await.unwrap();
        assert_valid(&walked);
        let line: Line = walked.line.parse().unwrap();
        assert!(
            line.schedule.real_time_ms() > 0,
            "seed {seed} drew no w step: {}",
            walked.line
        );
        assert!(walked
            .counterexample_text()
            .contains("real time: its w steps wait"));
        // The replay line runs the same steps: the same events, and each
        // wait really waited again.
        let replayed = run_schedule(
            &subject,
            &SwarmConfig::from_line(&line.config),
            &line.schedule,
        )
        .await
        .unwrap();
        assert_valid(&replayed);
        assert_eq!(meaning(&replayed.history), meaning(&walked.history));
        for history in [&walked.history, &replayed.history] {
            let waits = waits(history);
            assert!(!waits.is_empty());
            for (invoked, done, waited) in waits {
                // The recorder's clock counts whole ms: a wait of `waited`
                // ms spans at least `waited - 1` of them.
                assert!(done + 1 >= invoked + waited, "{invoked} {done} {waited}");
            }
        }
    }
}

#[test]
fn ackgap_exhaust_on_lmove_and_rpop_finds_the_missing_fence_and_the_loss_with_a_replay_line() {
    let text = |out: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let lmove = ackgap(&[
        "exhaust",
        "--queue",
        "lmove",
        "--jobs",
        "1",
        "--workers",
        "2",
        // The guide's command: the six-step line is in at depth 7, and
        // the search goes on past a break (depth 10 takes minutes).
        "--depth",
        "7",
    ]);
    let t = text(&lmove);
    assert_eq!(lmove.status.code(), Some(1), "{t}");
    assert!(t.contains("broke: fenced-settlement"), "{t}");
    assert!(
        t.contains("replay: ackgap replay lmove/marker/j1w2l100m2r1/"),
        "{t}"
    );

    let rpop = ackgap(&[
        "exhaust",
        "--queue",
        "rpop",
        "--jobs",
        "1",
        "--workers",
        "2",
        "--depth",
        "8",
    ]);
    let t = text(&rpop);
    assert_eq!(rpop.status.code(), Some(1), "{t}");
    assert!(t.contains("broke: no-loss"), "{t}");
    assert!(
        t.contains("replay: ackgap replay rpop/marker/j1w2l100m2r1/"),
        "{t}"
    );

    // The reference queue, its runs judged by every checker too, holds.
    let reference = ackgap(&[
        "exhaust",
        "--jobs",
        "1",
        "--workers",
        "2",
        "--depth",
        "6",
        "--judge",
    ]);
    let t = text(&reference);
    assert_eq!(reference.status.code(), Some(0), "{t}");
    assert!(t.contains("judged: "), "{t}");
    assert!(t.contains("no-loss valid"), "{t}");
}

/// How many times a worker acts late on a stale lease in `events`: a
/// complete, fail or extend of token t on a job whose latest lease has a
/// newer token and whose deadline the logical clock has passed.
fn late_stale_acts(events: &[Event]) -> usize {
    use ackgap::history::{EventKind, F};
    use std::collections::HashMap;

    let mut latest: HashMap<String, (u64, u64)> = HashMap::new();
    let mut now = 0;
    let mut acts = 0;
    for e in events {
        let value = e.value.clone().unwrap_or_default();
        if let Some(n) = value.get("now_ms").and_then(|n| n.as_u64()) {
            now = now.max(n);
        }
        let deadline = value.get("deadline_ms").and_then(|d| d.as_u64());
        match (e.kind, e.f, &e.job, e.token) {
            (EventKind::Ok, F::Lease | F::Extend, Some(job), Some(token)) => {
                if let Some(deadline) = deadline {
                    latest.insert(job.clone(), (token, deadline));
                }
            }
            (EventKind::Invoke, F::Complete | F::Fail | F::Extend, Some(job), Some(token)) => {
                if let Some((newest, deadline)) = latest.get(job) {
                    if *newest > token && now >= *deadline {
                        acts += 1;
                    }
                }
            }
            _ => {}
        }
    }
    acts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stale_holder_options_build_late_stale_holders_that_plain_walks_rarely_do() {
    use ackgap::explore::{explore_on, Subject, SwarmConfig};

    let server = common::start(Backend::Valkey, Persistence::None)
        .await
        .expect("valkey");
    let queue = Queue::connect(&server.client(), &common::queue_name())
        .await
        .unwrap();
    let subject = Subject::reference(&queue);
    let (mut on, mut off) = ((0, 0), (0, 0));
    for seed in 0..200 {
        let options = SwarmConfig::from_seed(seed).stale;
        let walk = explore_on(&subject, seed, 50).await.unwrap();
        assert_valid(&walk);
        let late = usize::from(late_stale_acts(&walk.history) > 0);
        let tally = if options.late_return > 0 || options.stale_retry > 0 {
            &mut on
        } else {
            &mut off
        };
        tally.0 += late;
        tally.1 += 1;
    }
    eprintln!(
        "walks with a late stale holder: {}/{} with the options on, {}/{} without",
        on.0, on.1, off.0, off.1
    );
    // A walk with the options on builds them more often than one without.
    assert!(
        on.0 * off.1 > off.0 * on.1,
        "{}/{} on against {}/{} off",
        on.0,
        on.1,
        off.0,
        off.1
    );
}
