//! The list of adapters: one `adapters/NAME/adapter.toml` per queue ackgap
//! judges through its own library, read here and only here (the findings
//! page, `ackgap bench`, the tests; `ci/install-adapters` reads the same
//! file with Python's tomllib), with the `toml` crate.

use std::path::Path;

use serde::Deserialize;

/// One adapter of the list, as its `adapter.toml` states it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct AdapterToml {
    /// The queue's name (`rq`): the page's and the bench's.
    pub name: String,
    /// The command that starts it, relative to the repository's root
    /// (`adapters/rq/run`); `exec:COMMAND` opens it.
    pub command: String,
    /// The library and its version as the pages print them
    /// (`rq 2.12.0 (PyPI)`).
    #[serde(default)]
    pub library: Option<String>,
    /// What a dead worker's job does, as `adapters/conformance.py --crash`
    /// printed it (`recovered`, `stranded`).
    #[serde(default)]
    pub crash: Option<String>,
    /// How long that conformance check waits for the job to come back (s);
    /// absent: its default.
    #[serde(default)]
    pub crash_recover_s: Option<u64>,
    /// The file `--queue NAME` runs in the current environment, relative to
    /// the adapter's directory (`adapter.py`; `.rb`: with ruby); absent:
    /// its `run` (see [`super::shipped`]).
    #[serde(default)]
    pub script: Option<String>,
    /// The Python packages the current environment must import before
    /// `--queue NAME` starts it (their versions go on the findings page).
    #[serde(default)]
    pub imports: Vec<String>,
    /// The adapter's directory under `adapters/` (not a field of the
    /// file: where it was found).
    #[serde(skip)]
    pub dir: String,
}

impl AdapterToml {
    /// `root/adapters/DIR/adapter.toml`; an error says which file and why.
    pub fn read(root: &Path, dir: &str) -> Result<AdapterToml, String> {
        let path = root.join("adapters").join(dir).join("adapter.toml");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut listed: AdapterToml =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        listed.dir = dir.to_owned();
        Ok(listed)
    }

    /// Every adapter of `root/adapters/*/adapter.toml`, by directory; one
    /// that cannot be read is said on stderr and left out.
    pub fn all(root: &Path) -> Vec<AdapterToml> {
        let Ok(entries) = std::fs::read_dir(root.join("adapters")) else {
            return Vec::new();
        };
        let mut out: Vec<AdapterToml> = entries
            .flatten()
            .filter(|e| e.path().join("adapter.toml").is_file())
            .filter_map(|e| {
                let dir = e.file_name().to_string_lossy().into_owned();
                AdapterToml::read(root, &dir)
                    .map_err(|why| eprintln!("ackgap: {why}"))
                    .ok()
            })
            .collect();
        out.sort_by(|a, b| a.dir.cmp(&b.dir));
        out
    }

    /// The adapter of the list whose `command` is `spec` (`exec:`
    /// stripped), or, for a bare name (a shipped adapter's `--queue`), whose
    /// `name` it is.
    pub fn of_command(root: &Path, spec: &str) -> Option<AdapterToml> {
        let (command, bare) = match spec.strip_prefix("exec:") {
            Some(command) => (command.trim(), false),
            None => (spec.trim(), true),
        };
        AdapterToml::all(root)
            .into_iter()
            .find(|a| a.command == command || (bare && a.name == command))
    }
}

#[cfg(test)]
mod tests {
    use super::AdapterToml;
    use std::path::Path;

    /// Every committed adapter.toml reads: a name, a command whose program
    /// is there, a library and what a dead worker's job does.
    #[test]
    fn every_committed_adapter_toml_reads_with_its_command_library_and_crash() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let all = AdapterToml::all(root);
        assert!(all.len() >= 7, "{all:?}");
        for a in &all {
            let program = a.command.split_whitespace().next().unwrap();
            assert!(root.join(program).exists(), "{}: {program}", a.dir);
            assert!(a.library.is_some() && a.crash.is_some(), "{a:?}");
        }
        let rq = AdapterToml::of_command(root, "exec:adapters/rq/run").unwrap();
        assert_eq!((rq.name.as_str(), rq.dir.as_str()), ("rq", "rq"));
    }

    /// A malformed file is an error that names it; a field of the wrong
    /// type too (no line parser's silent guess).
    #[test]
    fn a_malformed_adapter_toml_is_an_error_naming_the_file() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("adapters/x");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("adapter.toml"), "name = \"x\"\ncommand = 3\n").unwrap();
        let err = AdapterToml::read(root.path(), "x").unwrap_err();
        assert!(err.contains("adapters/x/adapter.toml"), "{err}");
        assert!(AdapterToml::all(root.path()).is_empty());
    }
}
