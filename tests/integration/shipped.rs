//! The adapters the binary carries (`src/adapter/shipped.rs`): `--queue
//! NAME` from a directory outside the checkout resolves to the embedded copy
//! written out to its own directory, runs in the current Python environment
//! (here the pinned venv's Python, named by `$ACKGAP_PYTHON`), never
//! overwrites a file edited there, and a package that environment lacks is
//! an error naming it.

use crate::common::text;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const ACKGAP: &str = env!("CARGO_BIN_EXE_ackgap");

/// `ackgap ARGS` in `cwd`, the adapters written out to `shipped`, with
/// `python` as the current Python (None: the default one).
fn ackgap_shipped(cwd: &Path, shipped: &Path, python: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(ACKGAP);
    command
        .current_dir(cwd)
        .args(args)
        .env("ACKGAP_SHIPPED_DIR", shipped)
        .env_remove("ACKGAP_PYTHON");
    if let Some(python) = python {
        command.env("ACKGAP_PYTHON", python);
    }
    command.output().expect("run ackgap")
}

/// The Python of the pinned venv `ci/install-adapters` built for `dir`
/// (`adapters/kit/venv.sh` names it).
fn venv_python(dir: &str) -> PathBuf {
    let out = Command::new("bash")
        .current_dir(ROOT)
        .arg("-c")
        .arg(format!(
            "ADAPTER_DIR=adapters/{dir}; source adapters/kit/venv.sh; echo \"$ACKGAP_ADAPTER_VENV\""
        ))
        .output()
        .expect("bash");
    let python = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run ci/install-adapters",
        python.display()
    );
    python
}

/// `ackgap explore --queue rq` from a temporary directory: the name
/// resolves to the embedded RQ adapter, written out to its own directory
/// (no checkout in sight), run by the current Python, and the walks reach a
/// verdict.
#[test]
fn a_bare_rq_resolves_outside_the_checkout_to_the_embedded_adapter() {
    let cwd = tempfile::tempdir().unwrap();
    let shipped = cwd.path().join("shipped");
    let python = venv_python("rq");
    let out = ackgap_shipped(
        cwd.path(),
        &shipped,
        Some(&python),
        &["explore", "--queue", "rq", "--seeds", "2", "--steps", "12"],
    );
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "no verdict: {}",
        text(&out)
    );
    assert!(text(&out).contains("rq"), "{}", text(&out));
    // The embedded copy is the committed one.
    for file in [
        "adapters/rq/adapter.py",
        "adapters/kit/python/ackgap_kit.py",
    ] {
        assert_eq!(
            std::fs::read(shipped.join(file)).unwrap(),
            std::fs::read(Path::new(ROOT).join(file)).unwrap(),
            "{file}"
        );
    }
    assert!(!cwd.path().join("adapters").exists());
}

/// A file of the written-out directory edited by hand is never overwritten
/// and never run: the next `--queue rq` stops before any server with an
/// error naming it (78), and the edit is still there.
#[test]
fn an_edited_file_of_the_written_out_adapters_is_refused_not_overwritten() {
    let cwd = tempfile::tempdir().unwrap();
    let shipped = cwd.path().join("shipped");
    let first = ackgap_shipped(cwd.path(), &shipped, None, &["conformance", "--", "--help"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let edited = shipped.join("adapters/rq/adapter.py");
    std::fs::write(&edited, "# mine\n").unwrap();
    let python = venv_python("rq");
    let out = ackgap_shipped(
        cwd.path(),
        &shipped,
        Some(&python),
        &["run", "--queue", "rq"],
    );
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains(&edited.display().to_string()) && said.contains("never overwrites"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&edited).unwrap(), "# mine\n");
}

/// A Python without RQ: `--queue rq` stops before any server with an
/// error naming the package to install and the Python that lacked it (78).
#[test]
fn a_python_without_the_library_is_an_error_naming_the_package_to_install() {
    let cwd = tempfile::tempdir().unwrap();
    let venv = cwd.path().join("bare");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("python3 -m venv");
    assert!(made.success());
    let python = venv.join("bin/python");
    let out = ackgap_shipped(
        cwd.path(),
        &cwd.path().join("shipped"),
        Some(&python),
        &["run", "--queue", "rq"],
    );
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("the Python package `rq`")
            && said.contains(&format!("{} -m pip install rq", python.display())),
        "{said}"
    );
}

/// `--isolated` names a shipped adapter or nothing: beside a built-in
/// queue it is a usage error (64), before any server.
#[test]
fn isolated_beside_a_built_in_queue_is_a_usage_error() {
    let cwd = tempfile::tempdir().unwrap();
    let out = ackgap_shipped(
        cwd.path(),
        &cwd.path().join("shipped"),
        None,
        &["run", "--queue", "lmove", "--isolated"],
    );
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(text(&out).contains("--isolated"), "{}", text(&out));
}

/// `ackgap chaos --queue rq` from a temporary directory: the chaos runner
/// opens the embedded adapter (an `exec:` one for its workers), leases are
/// granted through RQ, and the run reaches a verdict.
#[test]
fn chaos_runs_a_bare_rq_from_the_embedded_adapter() {
    let cwd = tempfile::tempdir().unwrap();
    let history = cwd.path().join("chaos.jsonl");
    let python = venv_python("rq");
    let out = ackgap_shipped(
        cwd.path(),
        &cwd.path().join("shipped"),
        Some(&python),
        &[
            "chaos",
            "--queue",
            "rq",
            "--duration",
            "2s",
            "--jobs",
            "20",
            // What is checked here is the run; reducing a violation replays
            // on logical time, for minutes.
            "--no-reduce",
            "--json",
            "--history",
            history.to_str().unwrap(),
        ],
    );
    assert!(matches!(out.status.code(), Some(0..=2)), "{}", text(&out));
    let events = ackgap::history::read_file(&history).expect("a well-formed history");
    assert!(
        events
            .iter()
            .any(|e| e.f == ackgap::history::F::Lease && e.kind == ackgap::history::EventKind::Ok),
        "no lease was granted"
    );
}

/// `--app` takes a shipped adapter's name as it takes `exec:` (both load
/// the user's app): with the app's module missing, `explore --queue rq
/// --app` stops at the adapter's hello (78), not as a usage error (64).
#[test]
fn app_is_accepted_beside_a_shipped_adapter_s_name() {
    let cwd = tempfile::tempdir().unwrap();
    let python = venv_python("rq");
    let out = ackgap_shipped(
        cwd.path(),
        &cwd.path().join("shipped"),
        Some(&python),
        &[
            "explore",
            "--queue",
            "rq",
            "--app",
            "nosuchproj.tasks:queue",
            "--seeds",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(78), "{}", text(&out));
    assert!(text(&out).contains("nosuchproj"), "{}", text(&out));
}
