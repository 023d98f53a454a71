//! The adapters the binary carries: `adapters/` as committed (each queue's
//! adapter, the Python and Ruby kits, `conformance.py`, with the protocol's
//! doc and schema it reads from `docs/` and `ci/find-valkey`, which it runs),
//! embedded at build time (build.rs lists the directory into `OUT_DIR/shipped.rs`) and
//! written out on first use, so that `--queue celery` works from a
//! `cargo install`ed or wheel-installed binary with no checkout.
//!
//! # Where they are written
//!
//! `$XDG_CACHE_HOME/ackgap/shipped-VERSION-HASH/{adapters,docs}/` (default
//! `~/.cache/ackgap/…`; `$ACKGAP_SHIPPED_DIR` replaces the whole
//! `…/shipped-VERSION-HASH` part), HASH the content hash of the embedded
//! files: a binary writes only its own directory, whole, into a temporary
//! sibling renamed into place, and never rewrites it. A file of that
//! directory that differs from the embedded copy (an edit) is an error
//! naming it, not a file silently overwritten nor silently run: a user who
//! wants to change an adapter copies it elsewhere and runs `exec:COMMAND`.
//!
//! # How a name resolves
//!
//! `--queue NAME`: a built-in adapter of this build first (`reference`,
//! `lmove`, `rpop`, `streams`, `apalis`), then a shipped adapter (`celery`,
//! `rq`, …, [`NAMES`]); `exec:COMMAND` is a command. The two lists never
//! share a name: a clash fails the build (the assertion below).
//!
//! A shipped Python adapter runs in the **current** Python environment:
//! `$ACKGAP_PYTHON` if set, else the `python3` beside the ackgap binary
//! (the venv a wheel was installed into), else `python3` on `PATH`. Before
//! it starts, that Python imports the packages its `adapter.toml` lists
//! (`imports`): one it cannot import is an error naming the package to
//! `pip install`, and the versions it imported are the findings page's
//! library line. `isolated` runs the adapter's own `run` instead: the
//! pinned venv `ci/install-adapters` builds (`adapters/kit/python/run-venv`).
//! A Ruby adapter (sidekiq) runs with `ruby` on `PATH` and the Ruby kit.

use std::path::{Path, PathBuf};

use super::listing::AdapterToml;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/shipped.rs"));
}

/// The shipped adapters' names: the directories of `adapters/` with an
/// `adapter.toml`.
pub const NAMES: &[&str] = &embedded::NAMES;

/// The environment variable naming the Python a shipped adapter runs with.
pub const PYTHON_ENV: &str = "ACKGAP_PYTHON";

/// The environment variable naming the directory the adapters are written
/// out to (instead of `…/ackgap/shipped-VERSION-HASH`).
pub const DIR_ENV: &str = "ACKGAP_SHIPPED_DIR";

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const fn shipped(name: &str) -> bool {
    let mut j = 0;
    while j < embedded::NAMES.len() {
        if same(name, embedded::NAMES[j]) {
            return true;
        }
        j += 1;
    }
    false
}

const fn clash() -> bool {
    let mut i = 0;
    while i < super::NAMES.len() {
        if shipped(super::NAMES[i]) {
            return true;
        }
        i += 1;
    }
    let mut i = 0;
    while i < super::FEATURE_NAMES.len() {
        if shipped(super::FEATURE_NAMES[i].0) {
            return true;
        }
        i += 1;
    }
    false
}

// A shipped adapter named like a built-in one (of any feature) would never
// be reached: the build fails instead.
const _: () = assert!(
    !clash(),
    "an adapters/NAME directory is named like a built-in --queue name"
);

/// `s` as one POSIX shell word (single quotes where needed).
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@".contains(&b))
    {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// True when `name` is a shipped adapter's.
pub fn is_shipped(name: &str) -> bool {
    NAMES.contains(&name)
}

/// Why a shipped adapter could not be made ready.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShippedError {
    /// Writing the adapters out failed, or a file there differs from the
    /// embedded copy.
    #[error("{0}")]
    Files(String),
    /// The Python (or Ruby) could not be run.
    #[error("{0}")]
    Interpreter(String),
    /// The current Python environment cannot import a package the adapter
    /// needs.
    #[error(
        "the {adapter} adapter needs the Python package `{package}`, which {python} cannot import \
         ({detail}): install it into that environment (`{python} -m pip install {package}`), \
         point ${PYTHON_ENV} at a Python that has it, or run the pinned copy with --isolated"
    )]
    Missing {
        /// The adapter.
        adapter: String,
        /// The package to install.
        package: String,
        /// The Python that tried.
        python: String,
        /// Python's own words.
        detail: String,
    },
}

/// A shipped adapter made ready to start.
#[derive(Clone, Debug)]
pub struct Shipped {
    /// Its `adapter.toml`.
    pub toml: AdapterToml,
    /// The command `exec:` starts (`sh -c`).
    pub command: String,
    /// The library as the findings page prints it: the versions the current
    /// environment imported (and which Python), or, isolated, the pinned
    /// `library` of its adapter.toml.
    pub library: Option<String>,
}

/// The root the adapters are written under (`ROOT/adapters/…`), written
/// out if it is not there yet, and checked against the embedded copy.
pub fn root() -> Result<PathBuf, ShippedError> {
    let root = match std::env::var_os(DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(std::env::temp_dir);
            cache.join("ackgap").join(format!(
                "shipped-{}-{}",
                env!("CARGO_PKG_VERSION"),
                embedded::HASH
            ))
        }
    };
    if !root.join("adapters").is_dir() {
        write_out(&root)?;
    }
    verify(&root)?;
    Ok(root)
}

/// Writes every embedded file into a temporary sibling of `root`, then
/// renames it into place; another process that won the race is left be.
fn write_out(root: &Path) -> Result<(), ShippedError> {
    let files = |e: String| ShippedError::Files(e);
    let parent = root.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .map_err(|e| files(format!("creating {}: {e}", parent.display())))?;
    let temp = tempfile::Builder::new()
        .prefix(".ackgap-shipped-")
        .tempdir_in(parent)
        .map_err(|e| files(format!("creating a directory in {}: {e}", parent.display())))?;
    for (rel, bytes, executable) in embedded::FILES {
        let path = temp.path().join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| files(format!("creating {}: {e}", dir.display())))?;
        }
        std::fs::write(&path, bytes)
            .map_err(|e| files(format!("writing {}: {e}", path.display())))?;
        #[cfg(unix)]
        if *executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| files(format!("chmod {}: {e}", path.display())))?;
        }
    }
    let made = temp.keep();
    if let Err(e) = std::fs::rename(&made, root) {
        let _ = std::fs::remove_dir_all(&made);
        if !root.join("adapters").is_dir() {
            return Err(files(format!(
                "renaming {} to {}: {e}",
                made.display(),
                root.display()
            )));
        }
    }
    Ok(())
}

/// Every embedded file is in `root` as embedded: an edited or missing one
/// is an error naming it.
fn verify(root: &Path) -> Result<(), ShippedError> {
    for (rel, bytes, _) in embedded::FILES {
        let path = root.join(rel);
        if std::fs::read(&path).ok().as_deref() != Some(*bytes) {
            return Err(ShippedError::Files(format!(
                "{} is not the copy this ackgap carries (edited or removed): it never overwrites \
                 it; remove {} to have it written again, or run an edited adapter as \
                 --queue exec:COMMAND",
                path.display(),
                root.display()
            )));
        }
    }
    Ok(())
}

/// The Python a shipped adapter runs with (module docs).
pub fn python() -> String {
    if let Some(p) = std::env::var_os(PYTHON_ENV).filter(|p| !p.is_empty()) {
        return p.to_string_lossy().into_owned();
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("python3")))
        .filter(|p| p.is_file());
    match beside {
        Some(p) => p.to_string_lossy().into_owned(),
        None => "python3".into(),
    }
}

/// `name`'s adapter, written out and ready: in the current environment
/// (its imports checked, their versions read) or, `isolated`, its own
/// `run` (the pinned venv). Once per process and mode: the runs that
/// reopen the adapter (chaos's cells) reuse the first answer.
pub fn prepare(name: &str, isolated: bool) -> Result<Shipped, ShippedError> {
    type Memo = std::sync::Mutex<std::collections::HashMap<(String, bool), Shipped>>;
    static READY: std::sync::OnceLock<Memo> = std::sync::OnceLock::new();
    let memo = READY.get_or_init(Default::default);
    let key = (name.to_owned(), isolated);
    if let Some(ready) = memo.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(ready.clone());
    }
    let ready = prepare_once(name, isolated)?;
    memo.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, ready.clone());
    Ok(ready)
}

fn prepare_once(name: &str, isolated: bool) -> Result<Shipped, ShippedError> {
    if !is_shipped(name) {
        return Err(ShippedError::Files(format!(
            "{name:?} is not a shipped adapter (those are {})",
            NAMES.join(", ")
        )));
    }
    let root = root()?;
    let toml = AdapterToml::read(&root, name).map_err(ShippedError::Files)?;
    let dir = root.join("adapters").join(name);
    let word = |p: &Path| quote(&p.to_string_lossy());
    if isolated {
        return Ok(Shipped {
            command: word(&dir.join("run")),
            library: toml.library.clone(),
            toml,
        });
    }
    let script = dir.join(toml.script.as_deref().unwrap_or("run"));
    if script.extension().is_some_and(|e| e == "rb") {
        let kit = root.join("adapters/kit/ruby");
        return Ok(Shipped {
            command: format!("ruby -I {} {}", word(&kit), word(&script)),
            library: toml.library.clone(),
            toml,
        });
    }
    let python = python();
    let library = probe(name, &python, &toml.imports)?;
    let kit = root.join("adapters/kit/python");
    Ok(Shipped {
        command: format!(
            "PYTHONPATH={}${{PYTHONPATH:+:$PYTHONPATH}} exec {} -u {}",
            word(&kit),
            quote(&python),
            word(&script)
        ),
        library: Some(library),
        toml,
    })
}

/// Imports `imports` with `python`; their versions and the interpreter, as
/// the findings page prints them.
fn probe(adapter: &str, python: &str, imports: &[String]) -> Result<String, ShippedError> {
    const CODE: &str = "import importlib, importlib.metadata as m, platform, sys\n\
        got = []\n\
        for name in sys.argv[1:]:\n\
        \x20   try:\n\
        \x20       mod = importlib.import_module(name)\n\
        \x20   except ImportError as e:\n\
        \x20       print('missing', name, e, sep='\\t')\n\
        \x20       sys.exit(3)\n\
        \x20   try:\n\
        \x20       v = m.version(name)\n\
        \x20   except m.PackageNotFoundError:\n\
        \x20       v = getattr(mod, '__version__', 'unknown version')\n\
        \x20   got.append(name + ' ' + v)\n\
        print('ok', ', '.join(got), sys.executable, platform.python_version(), sep='\\t')\n";
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(CODE)
        .args(imports)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            ShippedError::Interpreter(format!(
                "the {adapter} adapter runs in the current Python environment, but {python} \
                 could not be started ({e}): put python3 on PATH or set ${PYTHON_ENV}"
            ))
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.trim_end().split('\t').collect();
    match fields.as_slice() {
        ["ok", got, exe, version] if out.status.success() => Ok(if got.is_empty() {
            format!("Python {version} ({exe})")
        } else {
            format!("{got}, as imported by {exe} (Python {version})")
        }),
        ["missing", package, detail] => Err(ShippedError::Missing {
            adapter: adapter.to_owned(),
            package: (*package).to_owned(),
            python: python.to_owned(),
            detail: (*detail).to_owned(),
        }),
        _ => Err(ShippedError::Interpreter(format!(
            "{python} -c (the {adapter} adapter's import check) failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// A shipped adapter opened by name: the `exec:` adapter it resolved to,
/// answering [`super::Adapter::name`] (which replay lines carry) with the
/// `--queue` name, which opens it again, not with the command.
pub(crate) struct Named {
    pub(crate) inner: super::Exec,
    pub(crate) name: String,
}

impl super::Wrapper for Named {
    fn inner(&self) -> &dyn super::Adapter {
        &self.inner
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// `spec` as an `exec:` spec when it names an adapter the binary carries
/// (not a built-in one): `exec:` and its command in the current
/// environment ([`prepare`]); any other spec as it is.
pub fn exec_spec(spec: &str) -> Result<String, ShippedError> {
    if super::NAMES.contains(&spec) || !is_shipped(spec) {
        return Ok(spec.to_owned());
    }
    Ok(format!("exec:{}", prepare(spec, false)?.command))
}

/// The embedded `adapters/conformance.py`, written out: its path.
pub fn conformance() -> Result<PathBuf, ShippedError> {
    Ok(root()?.join("adapters/conformance.py"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded files are the committed tree's, byte for byte, and
    /// every shipped adapter's adapter.toml names it as its directory does,
    /// with a script that is there.
    #[test]
    fn the_embedded_adapters_are_the_committed_ones_each_named_as_its_directory() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (rel, bytes, _) in embedded::FILES {
            assert_eq!(std::fs::read(repo.join(rel)).unwrap(), *bytes, "{rel}");
        }
        assert!(NAMES.len() >= 7 && NAMES.contains(&"celery"), "{NAMES:?}");
        for name in NAMES {
            let toml = AdapterToml::read(repo, name).unwrap();
            assert_eq!(&toml.name, name);
            let script = format!(
                "adapters/{name}/{}",
                toml.script.as_deref().unwrap_or("run")
            );
            assert!(
                embedded::FILES.iter().any(|(rel, _, _)| *rel == script),
                "{script}"
            );
        }
    }

    /// A path with a quote or a space is one shell word; a plain one is
    /// left as it is.
    #[test]
    fn quote_makes_one_shell_word() {
        assert_eq!(quote("/a/b-c.py"), "/a/b-c.py");
        assert_eq!(quote("/a b/it's"), "'/a b/it'\\''s'");
        assert_eq!(quote(""), "''");
    }
}
