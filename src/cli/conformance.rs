//! `ackgap conformance [ARGS] -- COMMAND`: the adapter protocol's
//! self-check, `adapters/conformance.py`, from the copy the binary carries
//! (written out like the shipped adapters, `adapter::shipped`), so that a
//! team writing an adapter for its own queue needs nothing from the
//! repository. It runs with the Python the shipped adapters use
//! (`$ACKGAP_PYTHON`, else the `python3` beside ackgap, else on `PATH`) and
//! exits with its status.

use super::{Exit, ExitError};

/// The arguments of `ackgap conformance`.
#[derive(Debug, clap::Args)]
pub(super) struct ConformanceArgs {
    /// conformance.py's own arguments, then `--` and the adapter's command
    /// (`ackgap conformance -- python3 my_adapter.py`; `--crash`,
    /// `--server URL`, `--check-doc`: see `ackgap conformance -- --help`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<String>,
}

/// Runs conformance.py and answers its exit status as ackgap's: 0 passed,
/// 1 a check failed; a Python that cannot start is 78.
pub(super) async fn run(args: ConformanceArgs) -> Result<Exit, ExitError> {
    let script =
        ackgap::adapter::shipped::conformance().map_err(|e| ExitError::new(Exit::CantCreate, e))?;
    let python = ackgap::adapter::shipped::python();
    // clap keeps the `--` only when arguments came before it: conformance.py
    // needs it before the command either way.
    let mut argv = args.args;
    if !argv.iter().any(|a| a == "--") && !argv.iter().any(|a| a.starts_with('-')) {
        argv.insert(0, "--".into());
    }
    let mut command = tokio::process::Command::new(&python);
    // The server ackgap itself would start (conformance.py's find-valkey
    // looks only where python3 on PATH and $VIRTUAL_ENV say).
    let binary = ackgap::server::BINARY_ENV;
    if std::env::var_os(binary).is_none_or(|v| v.is_empty()) {
        if let Ok(found) = ackgap::server::find_valkey_binary() {
            command.env(binary, found);
        }
    }
    let status = command
        .arg("-u")
        .arg(&script)
        .args(&argv)
        .status()
        .await
        .map_err(|e| {
            ExitError::new(
                Exit::AdapterUnavailable,
                format!(
                    "cannot start {python} {}: {e} (put python3 on PATH or set ${})",
                    script.display(),
                    ackgap::adapter::shipped::PYTHON_ENV
                ),
            )
        })?;
    Ok(match status.code() {
        Some(0) => Exit::Valid,
        Some(1) => Exit::Invalid,
        _ => Exit::Unknown,
    })
}
