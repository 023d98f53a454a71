//! The `ackgap` binary: parse, run, exit code. The commands' flags, their
//! output and the exit codes live in `src/cli/`; everything they run is in
//! the library.

use std::process::ExitCode;

mod cli;

fn main() -> ExitCode {
    cli::main().into()
}
