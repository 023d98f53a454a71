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
//!
//! It also lists `adapters/` into `OUT_DIR/shipped.rs`, which
//! `src/adapter/shipped.rs` includes: every file as `include_bytes!` (so a
//! `cargo install`ed or wheel-installed binary carries the adapters, the
//! kits and conformance.py), its executable bit, the content hash that
//! names the directory they are written out to, and the names of the
//! adapters (the directories with an `adapter.toml`). A build script
//! rather than the `include_dir` crate: `rerun-if-changed=adapters` makes
//! cargo rebuild when a file is added (include_dir's macro sees only the
//! files it already embedded on stable), and the executable bits and the
//! hash come for free.
//!
//! And it applies each script mutant, `lua/mutants/NAME.patch` (a unified
//! diff of a reference script in `lua/`, named by its `---` line), to that
//! script, writing `OUT_DIR/mutants/NAME.lua`, which `src/mutants/`
//! includes: a fix to `lua/reap.lua` reaches its mutants, or the build
//! stops on the patch it no longer fits. `diffy` applies them (pure Rust,
//! no `patch` command needed where the crate is built).
use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() {
    list_adapters();
    apply_mutant_patches();
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

/// Every file under `dir` but dot files and Python's caches, sorted,
/// relative to `root`.
fn adapter_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with('.') || name == "__pycache__" || name.ends_with(".pyc") {
            continue;
        }
        if path.is_dir() {
            adapter_files(root, &path, out);
        } else {
            out.push(path.strip_prefix(root).expect("under the root").to_owned());
        }
    }
}

/// Writes `OUT_DIR/shipped.rs`: `FILES` (every file of `adapters/` and
/// the protocol's doc and schema and ci/find-valkey, which conformance.py
/// uses, by path from the root: bytes,
/// executable), `HASH` (FNV-1a over paths and contents: a name, not a
/// security boundary) and `NAMES` (the directories with an adapter.toml).
fn list_adapters() {
    println!("cargo:rerun-if-changed=adapters");
    println!("cargo:rerun-if-changed=docs/adapter-protocol.md");
    println!("cargo:rerun-if-changed=docs/adapter-protocol.schema.json");
    println!("cargo:rerun-if-changed=ci/find-valkey");
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let mut files = Vec::new();
    adapter_files(&root, &root.join("adapters"), &mut files);
    // What adapters/conformance.py reads and runs beside it.
    files.push(PathBuf::from("docs/adapter-protocol.md"));
    files.push(PathBuf::from("docs/adapter-protocol.schema.json"));
    files.push(PathBuf::from("ci/find-valkey"));
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut fnv = |bytes: &[u8]| {
        for b in bytes {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut code = String::from("pub(crate) static FILES: &[(&str, &[u8], bool)] = &[\n");
    let mut names = Vec::new();
    for rel in &files {
        let path = root.join(rel);
        let rel = rel.to_str().expect("a UTF-8 path");
        fnv(rel.as_bytes());
        fnv(&fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display())));
        #[cfg(unix)]
        let executable = {
            use std::os::unix::fs::PermissionsExt;
            fs::metadata(&path)
                .map(|m| m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        };
        #[cfg(not(unix))]
        let executable = false;
        // By the manifest's directory when the crate compiles, not this
        // checkout's path: a target directory shared by two checkouts
        // (CI's clean clone and a working tree) keeps this file from the
        // one that ran the script last, which may be gone since.
        code.push_str(&format!(
            "    ({rel:?}, include_bytes!(concat!(env!(\"CARGO_MANIFEST_DIR\"), {:?})), {executable}),\n",
            format!("/{rel}")
        ));
        let name = rel
            .strip_prefix("adapters/")
            .and_then(|r| r.strip_suffix("/adapter.toml"));
        if let Some(dir) = name.filter(|d| !d.contains('/')) {
            names.push(format!("{dir:?}"));
        }
    }
    code.push_str("];\n");
    code.push_str(&format!("pub(crate) const HASH: &str = \"{hash:016x}\";\n"));
    code.push_str(&format!(
        "pub(crate) const NAMES: [&str; {}] = [{}];\n",
        names.len(),
        names.join(", ")
    ));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("shipped.rs");
    fs::write(&out, code).expect("writing OUT_DIR/shipped.rs");
}

/// Writes `OUT_DIR/mutants/NAME.lua` for every `lua/mutants/NAME.patch`:
/// the script its `---` line names (a path from the crate's root) with the
/// patch applied. Its `+++` line must name `lua/mutants/NAME.lua`, so that
/// the header says what the build makes. A patch that no longer applies
/// stops the build, naming the patch and the script (every such patch,
/// not just the first).
fn apply_mutant_patches() {
    println!("cargo:rerun-if-changed=lua");
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("mutants");
    // Anew: a mutant whose patch is gone must not compile from a stale copy.
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).expect("creating OUT_DIR/mutants");
    let dir = root.join("lua/mutants");
    let mut patches: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "patch"))
        .collect();
    patches.sort();
    let mut stale = Vec::new();
    for path in patches {
        let name = path.file_stem().expect("a file name").to_string_lossy();
        let rel = format!("lua/mutants/{name}.patch");
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {rel}: {e}"));
        let patch = diffy::Patch::from_str(&text)
            .unwrap_or_else(|e| panic!("{rel} is not a unified diff: {e}"));
        let base = patch
            .original()
            .unwrap_or_else(|| panic!("{rel} names no base script (its `---` line)"));
        let target = format!("lua/mutants/{name}.lua");
        assert!(
            patch.modified() == Some(target.as_str()),
            "{rel}'s `+++` line must name {target}, not {:?}",
            patch.modified()
        );
        let base_text = fs::read_to_string(root.join(base))
            .unwrap_or_else(|e| panic!("reading {base}, the base script of {rel}: {e}"));
        match diffy::apply(&base_text, &patch) {
            Ok(body) => fs::write(out.join(format!("{name}.lua")), body)
                .unwrap_or_else(|e| panic!("writing OUT_DIR/mutants/{name}.lua: {e}")),
            Err(e) => stale.push(format!(
                "{rel} no longer applies to {base} ({e}): refresh the patch. Write its \
                 mistake into a copy of {base}, keeping the MUTANT comment, and run \
                 `diff -u --label {base} --label {target} {base} COPY > {rel}`"
            )),
        }
    }
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}
