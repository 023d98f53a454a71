//! Progress on a terminal: seeds (or states, or mutants) done out of the
//! total, steps per second, failures so far and an ETA, on stderr, for a
//! command that runs longer than a second. Shown only when stdout is a
//! terminal and `--json` is off: piped or machine-read output gets nothing
//! extra. The library never prints it: it tells an observer
//! ([`ackgap::explore::WalkObserver`]) of each walk, and this draws.

use std::io::IsTerminal as _;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use ackgap::check::Verdict;
use ackgap::explore::{WalkObserver, WalkReport};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar, or nothing (not a terminal, `--json`).
pub(super) struct Progress {
    bar: Option<ProgressBar>,
    /// What a failure is called (`failed`, `survived`).
    failed_word: &'static str,
    /// What the rate counts (`steps`, `states and walks`).
    rate_word: &'static str,
    started: Instant,
    steps: u64,
    failed: u64,
}

impl Progress {
    /// A bar of walks when stdout is a terminal and `json` is off; a
    /// silent one otherwise.
    pub(super) fn new(json: bool) -> Progress {
        Progress::of("walks", "steps", "failed", json)
    }

    /// A bar of `unit` (walks, mutants), its rate counting `rate_word`
    /// and its failures called `failed_word`.
    pub(super) fn of(
        unit: &str,
        rate_word: &'static str,
        failed_word: &'static str,
        json: bool,
    ) -> Progress {
        let shown = !json && std::io::stdout().is_terminal();
        let bar = shown.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            let template =
                format!("{{elapsed:>4}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{msg}} ETA {{eta}}");
            if let Ok(style) = ProgressStyle::with_template(&template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            failed_word,
            rate_word,
            started: Instant::now(),
            steps: 0,
            failed: 0,
        }
    }

    /// A spinner that says `what` is running and for how long, for a
    /// command that cannot say how far it got (`exhaust`); shown as
    /// [`Progress::new`]'s bar is.
    pub(super) fn spinner(what: &str, json: bool) -> Progress {
        let shown = !json && std::io::stdout().is_terminal();
        let bar = shown.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}") {
                bar.set_style(style);
            }
            bar.set_message(what.to_owned());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            failed_word: "failed",
            rate_word: "steps",
            started: Instant::now(),
            steps: 0,
            failed: 0,
        }
    }

    /// `total` things are about to run.
    pub(super) fn start(&mut self, total: u64) {
        self.started = Instant::now();
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.reset_elapsed();
            bar.reset_eta();
            self.message();
        }
    }

    /// One more done, with `steps` of the rate's unit, failed or not.
    pub(super) fn done(&mut self, steps: u64, failed: bool) {
        self.steps += steps;
        self.failed += u64::from(failed);
        if let Some(bar) = &self.bar {
            bar.inc(1);
            self.message();
        }
    }

    fn message(&self) {
        if let Some(bar) = &self.bar {
            let secs = self.started.elapsed().as_secs_f64().max(1e-3);
            bar.set_message(format!(
                "· {:.0} {}/s · {} {} ·",
                self.steps as f64 / secs,
                self.rate_word,
                self.failed,
                self.failed_word
            ));
        }
    }

    /// Runs `print` with the bar hidden, so that what it prints (to
    /// stderr or stdout) is not drawn over.
    pub(super) fn suspend<R>(&self, print: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    /// Removes the bar before the summary is printed.
    pub(super) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Walks shown on a [`Progress`] whose total the command set, a failing
/// one's schedule and replay command printed above the bar.
pub(super) struct ShowWalks<'a>(pub(super) &'a mut Progress);

impl WalkObserver for ShowWalks<'_> {
    fn walk(&mut self, report: &WalkReport) -> ControlFlow<()> {
        let failed = report.verdict != Verdict::Valid;
        self.0.done(report.steps as u64, failed);
        if failed {
            self.0.suspend(|| err!("{}", report.failure_text()));
        }
        ControlFlow::Continue(())
    }
}
