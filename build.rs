//! Builds the power-loss shim, `src/server/powercut.c`, into a shared object
//! in `OUT_DIR` that `src/server/powercut.rs` embeds with `include_bytes!` (so
//! an installed binary carries it and needs no source tree or compiler).
//!
//! The `cc` crate supplies the C compiler rather than a hard-coded `cc`
//! command: it honours `CC`/`CFLAGS` and their per-target forms, picks the
//! cross compiler for `--target`, and knows each compiler's flags for
//! position-independent code. It builds static archives only, so its
//! compiler is asked for a command and `-shared` is added here.
//!
//! Off Linux the shim (LD_PRELOAD, /proc, real-time signals) has no meaning:
//! an empty file is embedded and `Server::power_loss` refuses.
use std::path::PathBuf;
use std::{env, fs};

fn main() {
    println!("cargo:rerun-if-changed=src/server/powercut.c");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("libackgap_powercut.so");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        fs::write(&out, b"").expect("writing the empty shim");
        return;
    }
    let compiler = cc::Build::new()
        .opt_level(2)
        .pic(true)
        .cargo_metadata(false)
        .get_compiler();
    let status = compiler
        .to_command()
        .args(["-shared", "-Wall", "-Wextra", "-o"])
        .arg(&out)
        .arg("src/server/powercut.c")
        .arg("-ldl")
        .status()
        .expect("running the C compiler for src/server/powercut.c");
    assert!(
        status.success(),
        "compiling src/server/powercut.c failed ({status})"
    );
}
