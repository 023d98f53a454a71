//! Judging a run: the final read, liveness, the effect counts, and the
//! report of an interrupted run.
//!
//! # Design notes
//!
//! The report carries the server's own account
//! (`INFO stats memory errorstats` before and after: evicted keys, error
//! replies by code, the memory policy) with the line that names what it
//! explains of the lost jobs.

use super::*;

/// What [`interrupted_report`] judges.
pub(super) struct InterruptedRun<'a> {
    pub(super) ctx: &'a Ctx,
    pub(super) cfg: ChaosConfig,
    pub(super) schedule: FaultSchedule,
    pub(super) history: Option<PathBuf>,
    pub(super) phases: Phases,
    /// The phase the interrupt stopped, and when (ms since the start).
    pub(super) phase: &'static str,
    pub(super) at_ms: u64,
}

/// The report of an interrupted run: the checkers on the history so far
/// (without a final read, so no-loss says `unknown`), and liveness
/// `unknown` since no drain ran to its end.
pub(super) fn interrupted_report(run: InterruptedRun<'_>) -> Result<ChaosReport, ChaosError> {
    let ctx = run.ctx;
    let note = format!(
        "interrupted (Ctrl-C) {:.1} s into the run, in the {} phase: no drain ran to its end and no final read happened, so no-loss and liveness are unknown; the other invariants are judged on the history up to the interrupt",
        run.at_ms as f64 / 1000.0,
        run.phase
    );
    let events = ctx.rec.events();
    let mut invariants = check::check_all(&events);
    let mut counts = BTreeMap::from([("drain_ms", run.phases.drain_ms)]);
    if let Some(bound_ms) = run.cfg.drain_ms_max {
        counts.insert("bound_ms", bound_ms);
    }
    invariants.push(Report {
        invariant: "liveness",
        verdict: Verdict::Unknown,
        counts,
        violations: vec![check::Violation::new(
            "liveness",
            None,
            &[],
            format!(
                "interrupted in the {} phase before the drain ended: cannot tell whether every job would finish",
                run.phase
            ),
        )],
    });
    let verdict = check::overall(&invariants);
    if let Some(e) = ctx.rec.write_error() {
        return Err(ChaosError::History(format!(
            "writing the history failed: {e}"
        )));
    }
    let fired = lock(&ctx.fired).clone();
    let never_fired = run
        .cfg
        .faults
        .0
        .iter()
        .copied()
        .filter(|k| !fired.contains_key(k))
        .collect();
    Ok(ChaosReport {
        injected: lock(&ctx.injected).clone(),
        fired,
        never_fired,
        phases: run.phases,
        invariants,
        verdict,
        ops: ctx.ops.load(Ordering::Relaxed),
        events: events.len(),
        effects: Effects::default(),
        lost: Vec::new(),
        liveness_bound: LivenessBound {
            bound_ms: run.cfg.drain_ms_max,
            wait_ms: 0,
            backlog: None,
            rate_per_s: None,
            derivation: "not derived: the run was interrupted before its drain ended".into(),
        },
        drain_stalled: None,
        errors: count_errors(&events),
        migrations: migration_windows(&events),
        // No final read: no effect counts to name a duplicate by.
        consumer_findings: Vec::new(),
        server: None,
        server_unread: Some("the run was interrupted before its final read".into()),
        history: run.history,
        interrupted: Some(note),
        schedule_slip: ctx.slip.account(run.cfg.lease_ms, &events),
        config: run.cfg,
        schedule: run.schedule,
        draws: ctx.draws.clone(),
        workload: lock(&ctx.workload).clone(),
    })
}

/// Reads the whole queue back with every job's effect count, as one `read`
/// event of the `checker`. Answers the effect counts.
pub(super) async fn final_read(ctx: &Ctx) -> Result<BTreeMap<String, u64>, QueueError> {
    ctx.count();
    let acknowledged = lock(&ctx.acknowledged).clone();
    let (_, effects) = ctx
        .recorded(&ctx.direct, "checker")
        .read_with_effects(ctx.consumer.as_ref(), acknowledged)
        .await?;
    Ok(effects)
}

pub(super) fn summarize_effects(
    states: &BTreeMap<String, String>,
    effects: &BTreeMap<String, u64>,
) -> Effects {
    let mut out = Effects::default();
    for (id, &n) in effects {
        out.total += n;
        *out.histogram.entry(n).or_default() += 1;
        if n > 1 {
            out.duplicated += 1;
        }
        if n == 0 && states.get(id).map(String::as_str) == Some("done") {
            out.missing += 1;
        }
    }
    out
}

/// The server's own counters at one moment (`INFO stats memory
/// errorstats`): what it evicted and refused, whatever the clients saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ServerCounters {
    /// The server process's id (`run_id`): a restart changes it, and its
    /// counters begin again.
    run_id: String,
    evicted_keys: u64,
    expired_keys: u64,
    /// Error replies by code (`errorstat_OOM:count=516` → `OOM: 516`).
    error_replies: BTreeMap<String, u64>,
    used_memory: u64,
    maxmemory: u64,
    maxmemory_policy: String,
}

/// Reads the counters of every node of `clients` (a cluster's nodes, or
/// the one server) and adds them up: the keys evicted and expired, the
/// error replies by code, the memory in use and the limits are sums, the
/// `run_id`s are joined in order (any node's restart changes them). The
/// first error's text when a node refuses (an ACL without `INFO`) or
/// cannot be reached.
pub(super) async fn server_counters(clients: &[redis::Client]) -> Result<ServerCounters, String> {
    let mut total = ServerCounters::default();
    for (i, client) in clients.iter().enumerate() {
        let c = node_counters(client).await?;
        if i > 0 {
            total.run_id.push(',');
        }
        total.run_id.push_str(&c.run_id);
        total.evicted_keys += c.evicted_keys;
        total.expired_keys += c.expired_keys;
        total.used_memory += c.used_memory;
        total.maxmemory += c.maxmemory;
        for (code, n) in c.error_replies {
            *total.error_replies.entry(code).or_default() += n;
        }
        if total.maxmemory_policy.is_empty() {
            total.maxmemory_policy = c.maxmemory_policy;
        }
    }
    Ok(total)
}

/// Reads the counters of the server of `client` (one connection, one
/// `INFO`).
async fn node_counters(client: &redis::Client) -> Result<ServerCounters, String> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    let info = async {
        let mut con = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        redis::cmd("INFO")
            .arg(&["server", "stats", "memory", "errorstats"])
            .query_async::<String>(&mut con)
            .await
    }
    .await
    .map_err(|e| e.to_string())?;
    Ok(parse_counters(&info))
}

fn parse_counters(info: &str) -> ServerCounters {
    let mut c = ServerCounters::default();
    for line in info.lines() {
        let Some((name, value)) = line.trim_end().split_once(':') else {
            continue;
        };
        let number = || value.parse::<u64>().unwrap_or(0);
        match name {
            "run_id" => c.run_id = value.to_string(),
            "evicted_keys" => c.evicted_keys = number(),
            "expired_keys" => c.expired_keys = number(),
            "used_memory" => c.used_memory = number(),
            "maxmemory" => c.maxmemory = number(),
            "maxmemory_policy" => c.maxmemory_policy = value.to_string(),
            _ => {
                if let Some(code) = name.strip_prefix("errorstat_") {
                    let count = value
                        .strip_prefix("count=")
                        .and_then(|n| n.split(',').next())
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    c.error_replies.insert(code.to_string(), count);
                }
            }
        }
    }
    c
}

/// The server's own account of a run, from its counters before and after
/// (`INFO stats memory errorstats`), and what it explains of the run's
/// findings. Counters are the whole server's: on a shared server they
/// count other clients too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ServerAccount {
    /// Keys the server evicted under its `maxmemory-policy` during the run.
    pub evicted_keys: u64,
    /// Keys that expired during the run (the queue sets no TTL).
    pub expired_keys: u64,
    /// Error replies the server sent during the run, by code (`OOM`,
    /// `NOSCRIPT`, ...).
    pub error_replies: BTreeMap<String, u64>,
    /// Memory in use at the end (bytes).
    pub used_memory: u64,
    /// The memory limit (bytes; 0 is none).
    pub maxmemory: u64,
    /// What the server does at the limit (`noeviction`, `allkeys-lru`, ...).
    pub maxmemory_policy: String,
    /// False when the server restarted during the run (its `run_id`
    /// changed, or a counter went back): the counters then count since
    /// the restart only.
    pub whole_run: bool,
    /// What the account explains, one sentence each: e.g. `1,993 jobs
    /// lost; the server evicted 2,432 keys (maxmemory-policy allkeys-lru)`.
    pub explains: Vec<String>,
}

/// The account of the run between `before` and `after`, and what it
/// explains of `lost` acknowledged jobs (the verdict stays what the
/// checkers said; this names a cause). Answers why there is none when
/// either read failed.
pub(super) fn server_account(
    before: &Result<ServerCounters, String>,
    after: &Result<ServerCounters, String>,
    lost: usize,
) -> Result<ServerAccount, String> {
    let (before, after) = match (before, after) {
        (Ok(b), Ok(a)) => (b, a),
        (Err(e), _) => return Err(format!("INFO before the run failed: {e}")),
        (_, Err(e)) => return Err(format!("INFO after the run failed: {e}")),
    };
    // A restart (a server kill) begins the counters again.
    let restarted = before.run_id != after.run_id;
    let mut whole_run = !restarted;
    let mut delta = |end: u64, start: u64| {
        if restarted {
            end
        } else if end < start {
            whole_run = false;
            end
        } else {
            end - start
        }
    };
    let evicted_keys = delta(after.evicted_keys, before.evicted_keys);
    let expired_keys = delta(after.expired_keys, before.expired_keys);
    let error_replies: BTreeMap<String, u64> = after
        .error_replies
        .iter()
        .map(|(code, &n)| {
            let start = before.error_replies.get(code).copied().unwrap_or(0);
            (code.clone(), delta(n, start))
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    let mut account = ServerAccount {
        evicted_keys,
        expired_keys,
        error_replies,
        used_memory: after.used_memory,
        maxmemory: after.maxmemory,
        maxmemory_policy: after.maxmemory_policy.clone(),
        whole_run,
        explains: Vec::new(),
    };
    account.explains = explain(&account, lost);
    Ok(account)
}

/// What `account` says about `lost` acknowledged jobs: evictions, and
/// calls refused for memory.
fn explain(account: &ServerAccount, lost: usize) -> Vec<String> {
    let limit = format!(
        "maxmemory {}, maxmemory-policy {}",
        if account.maxmemory == 0 {
            "none".to_string()
        } else {
            mib(account.maxmemory)
        },
        account.maxmemory_policy
    );
    let lost_text = match lost {
        0 => "no acknowledged job lost".to_string(),
        1 => "1 job lost".to_string(),
        n => format!("{} jobs lost", thousands(n as u64)),
    };
    let mut lines = Vec::new();
    if account.evicted_keys > 0 {
        lines.push(format!(
            "{lost_text}; the server evicted {} keys ({limit}): an evicted job row or index loses the job",
            thousands(account.evicted_keys)
        ));
    }
    if let Some(&oom) = account.error_replies.get("OOM") {
        lines.push(format!(
            "{lost_text}; the server refused {} calls with OOM (used memory over the limit; {limit}): a refused lease leaves its job pending, a refused enqueue was never acknowledged",
            thousands(oom)
        ));
    }
    if !account.whole_run {
        lines.push(
            "the server restarted during the run: its counters cover the time since the restart only"
                .to_string(),
        );
    }
    if account.expired_keys > 0 {
        lines.push(format!(
            "the server expired {} keys during the run (the queue sets no TTL on its keys; another client's, or a TTL set from outside)",
            thousands(account.expired_keys)
        ));
    }
    lines
}

/// `2097152` → `2.0 MiB`.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// `2432` → `2,432`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Stats\r\nexpired_keys:0\r\nevicted_keys:2432\r\n# Memory\r\nused_memory:2016240\r\nmaxmemory:2097152\r\nmaxmemory_policy:allkeys-lru\r\n# Errorstats\r\nerrorstat_NOSCRIPT:count=17\r\nerrorstat_OOM:count=516\r\n";

    #[test]
    fn the_account_counts_what_the_server_evicted_and_refused_during_the_run() {
        let before = parse_counters(
            "evicted_keys:32\r\nerrorstat_NOSCRIPT:count=17\r\nmaxmemory_policy:allkeys-lru\r\n",
        );
        let after = parse_counters(INFO);
        let account = server_account(&Ok(before), &Ok(after), 1993).unwrap();
        assert_eq!(account.evicted_keys, 2400);
        assert_eq!(
            account.error_replies,
            BTreeMap::from([("OOM".to_string(), 516)])
        );
        assert!(account.whole_run);
        assert_eq!(
            account.explains[0],
            "1,993 jobs lost; the server evicted 2,400 keys (maxmemory 2.0 MiB, maxmemory-policy allkeys-lru): an evicted job row or index loses the job"
        );
        assert!(account.explains[1]
            .starts_with("1,993 jobs lost; the server refused 516 calls with OOM"));
    }

    #[test]
    fn the_counters_of_a_restarted_server_count_since_the_restart() {
        let before = parse_counters("evicted_keys:50\r\n");
        let after = parse_counters("evicted_keys:7\r\n");
        let account = server_account(&Ok(before), &Ok(after), 0).unwrap();
        assert_eq!(account.evicted_keys, 7);
        assert!(!account.whole_run);
        let before = parse_counters("run_id:aaa\r\nevicted_keys:5\r\n");
        let after = parse_counters("run_id:bbb\r\nevicted_keys:9\r\n");
        let account = server_account(&Ok(before), &Ok(after), 0).unwrap();
        assert_eq!(account.evicted_keys, 9);
        assert!(!account.whole_run);
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }
}
