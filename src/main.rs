//! The `ackgap` binary: parse, run, exit code. Everything else is in the
//! library (`src/cli.rs` holds the commands).

use std::process::ExitCode;

fn main() -> ExitCode {
    ackgap::cli::main()
}
