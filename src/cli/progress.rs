//! Progress on a terminal: seeds (or states, or mutants) done out of the
//! total, steps per second, failures so far and an ETA, on stderr, for a
//! command that runs longer than a second. Shown only when stdout is a
//! terminal and `--json` is off: piped or machine-read output gets nothing
//! extra. The library never prints it: it tells an observer
//! ([`ackgap::explore::WalkObserver`]) of each walk, and this draws.
//!
//! # Design notes
//!
//! It draws with indicatif.

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
    /// What the bar counts (`walks`, `mutants`, `runs`).
    unit: String,
    /// Whether the phase running is one whose work the bar counts (see
    /// [`Progress::phase`]).
    counting: bool,
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
        Progress::drawn_to(
            unit,
            rate_word,
            failed_word,
            shown.then(ProgressDrawTarget::stderr),
        )
    }

    /// [`Progress::of`] drawn to `target` (none: silent).
    fn drawn_to(
        unit: &str,
        rate_word: &'static str,
        failed_word: &'static str,
        target: Option<ProgressDrawTarget>,
    ) -> Progress {
        let bar = target.map(|target| {
            let bar = ProgressBar::with_draw_target(None, target);
            bar.set_style(counting_style(unit));
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            unit: unit.to_owned(),
            counting: true,
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
            unit: String::new(),
            counting: false,
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

    /// A phase begins: the bar names it; while a phase runs whose work
    /// the bar does not count (`counting` false: `run`'s exhaustive search
    /// and smoke scenario), it shows a spinner and no ETA (there is none to
    /// tell) instead of a count standing still; the ETA's estimate starts
    /// afresh when counting starts again, so the uncounted phase's time
    /// does not weigh on the first walks.
    pub(super) fn phase(&mut self, name: &str, counting: bool) {
        let Some(bar) = &self.bar else {
            return;
        };
        // The style first: the prefix redraws the bar, in the style it has.
        if counting {
            bar.set_style(counting_style(&self.unit));
            if !self.counting {
                bar.reset_eta();
                // The rate too counts from the first counted work.
                if self.steps == 0 {
                    self.started = Instant::now();
                }
            }
        } else {
            let template = format!(
                "{{spinner}} {{elapsed:>4}} {{prefix}} · {{pos}}/{{len}} {} done · no ETA for this phase",
                self.unit
            );
            if let Ok(style) = ProgressStyle::with_template(&template) {
                bar.set_style(style);
            }
        }
        bar.set_prefix(name.to_owned());
        self.counting = counting;
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

/// The bar's style while it counts `unit`: the phase (when one is named),
/// the count, the rate and failures, and indicatif's ETA.
fn counting_style(unit: &str) -> ProgressStyle {
    let template = format!(
        "{{elapsed:>4}} {{prefix}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{msg}} ETA {{eta}}"
    );
    ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
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
    fn phase(&mut self, name: &str, walks: bool) {
        self.0.phase(name, walks);
    }

    fn walk(&mut self, report: &WalkReport) -> ControlFlow<()> {
        let failed = report.verdict != Verdict::Valid;
        self.0.done(report.steps as u64, failed);
        if failed {
            self.0.suspend(|| err!("{}", report.failure_text()));
        }
        ControlFlow::Continue(())
    }
}

/// A chaos run's progress lines on stderr, one rewritten in place on a
/// terminal; none under `--json`.
pub(super) fn lines(json: bool) -> Option<ackgap::chaos::runner::Progress> {
    if json {
        None
    } else if std::io::stderr().is_terminal() {
        Some(std::sync::Arc::new(|line: &str| err!("\r{line}   ")))
    } else {
        Some(std::sync::Arc::new(|line: &str| errln!("{line}")))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A terminal that keeps what is drawn on it.
    #[derive(Debug, Default, Clone)]
    struct Screen(Arc<Mutex<String>>);

    impl Screen {
        /// What was drawn since the last look.
        fn take(&self) -> String {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            200
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_bar_names_the_phase_and_shows_an_eta_only_while_it_counts() {
        let screen = Screen::default();
        let target = ProgressDrawTarget::term_like(Box::new(screen.clone()));
        let mut progress = Progress::drawn_to("walks", "steps", "failed", Some(target));
        progress.start(20);
        progress.phase(
            "phase 1/7: exhaustive search (2 jobs, 2 workers, depth 6)",
            false,
        );
        let bar = progress.bar.clone().expect("a bar");
        // The steady tick draws on its own thread: what it drew before the
        // phase changed is dropped here, and every draw from now on is the
        // phase's own (CI once caught a tick drawing the counting bar after
        // an earlier take).
        screen.take();
        bar.force_draw();
        let search = screen.take();
        assert!(
            search.contains("phase 1/7: exhaustive search (2 jobs, 2 workers, depth 6) · 0/20 walks done · no ETA for this phase"),
            "{search:?}"
        );
        assert!(!search.contains("ETA 0s"), "{search:?}");
        progress.phase("phase 2/7: walks, consumer naive", true);
        progress.done(40, false);
        screen.take();
        bar.force_draw();
        let walks = screen.take();
        assert!(
            walks.contains("phase 2/7: walks, consumer naive ["),
            "{walks:?}"
        );
        assert!(
            walks.contains("1/20 walks") && walks.contains("ETA "),
            "{walks:?}"
        );
        progress.phase("phase 7/7: smoke scenario", false);
        screen.take();
        bar.force_draw();
        assert!(screen.take().contains("phase 7/7: smoke scenario · "));
    }
}
