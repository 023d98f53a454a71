//! Every `ackgap …` line a committed page shows is one a user can paste:
//! the arguments parse (issue 41); and no page names a path of the machine
//! that wrote it. The lines are those of README.md,
//! docs/ and the adapters' READMEs: in a fenced block, a line that starts
//! with `ackgap` (after `$ `, `reproduce: `, `replay: ` or `rerun: `, and
//! environment assignments); outside one, an inline code span that does.
//! A line of the tool's output (`ackgap explore: seed 3 …`: a word ends
//! with `:`) is not a command; a shell redirection or pipe ends one. A
//! word in capitals (`--seed S`, `--shard K/N`, `FILE`) is a placeholder:
//! its line documents a syntax, and is not pasted. An inline span is a
//! mention in a sentence (`` `ackgap run --queue` ``): it is checked for
//! flags and subcommands that do not exist, not for missing values.

use std::path::{Path, PathBuf};

use clap::Parser as _;

use super::Cli;

/// The pages: README.md, every `.md` under docs/ and adapters/.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("README.md")];
    let mut stack = vec![root.join("docs"), root.join("adapters")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The command in `text` when it starts (after a prompt or a label and
/// environment assignments) with `ackgap `.
fn command_in(text: &str) -> Option<String> {
    let mut rest = text.trim();
    for prefix in ["$ ", "reproduce: ", "replay: ", "rerun: "] {
        if let Some(r) = rest.strip_prefix(prefix) {
            rest = r.trim_start();
        }
    }
    // `NAME=value ackgap …`: the assignments go.
    let mut words = rest;
    while let Some((first, after)) = words.split_once(' ') {
        if first.contains('=') && !first.starts_with('-') && first != "ackgap" {
            words = after.trim_start();
        } else {
            break;
        }
    }
    let command = words.strip_prefix("ackgap ")?;
    // `ackgap = "0.1"`: a Cargo.toml line.
    if command.starts_with('=') {
        return None;
    }
    Some(format!(
        "ackgap {}",
        command.trim_end_matches(['.', ',', ';'])
    ))
}

/// The words of `command` as the shell passes them to ackgap: up to a
/// redirection, a pipe or a comment; `None` for the tool's output (a word
/// ending in `:`) or a syntax with a placeholder (a word in capitals).
fn words(command: &str) -> Option<Vec<String>> {
    let mut words = shlex::split(command)?;
    if let Some(end) = words.iter().position(|w| {
        matches!(w.as_str(), ">" | ">>" | "|" | "&&" | ";" | "2>&1") || w.starts_with('#')
    }) {
        words.truncate(end);
    }
    let placeholder = |w: &str| {
        w.chars().any(|c| c.is_ascii_uppercase())
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || matches!(c, '/' | '_' | '.' | ','))
    };
    if words
        .iter()
        .any(|w| w.ends_with(':') || placeholder(w) || w.ends_with("..."))
    {
        return None;
    }
    Some(words)
}

/// Each command of `page` with its line number, and whether it is a line
/// of a fenced block (pasted as is) rather than a mention in a sentence.
fn commands(page: &str) -> Vec<(usize, String, bool)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in page.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let (n, text) = match pending.take() {
                Some((n, head)) => (n, format!("{} {}", head.trim_end(), line.trim())),
                None => (i + 1, line.to_owned()),
            };
            if let Some(head) = text.trim_end().strip_suffix('\\') {
                pending = Some((n, head.to_owned()));
                continue;
            }
            if let Some(c) = command_in(&text) {
                out.push((n, c, true));
            }
        } else {
            for (k, span) in line.split('`').enumerate() {
                if k % 2 == 1 {
                    if let Some(c) = command_in(span) {
                        out.push((i + 1, c, false));
                    }
                }
            }
        }
    }
    out
}

/// Every `ackgap …` line of the committed pages parses: none would exit
/// 64 when pasted.
#[test]
fn every_ackgap_line_the_committed_pages_show_parses_as_pasted() {
    let mut checked = 0;
    let mut refused = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, command, fenced) in commands(&text) {
            if shlex::split(&command).is_none() {
                refused.push(format!(
                    "{}:{n}: unbalanced quotes: {command}",
                    page.display()
                ));
                continue;
            }
            let Some(words) = words(&command) else {
                continue;
            };
            checked += 1;
            if let Err(e) = Cli::try_parse_from(&words) {
                use clap::error::ErrorKind;
                // A mention may leave out what the sentence is not about.
                let mention = !fenced
                    && matches!(
                        e.kind(),
                        ErrorKind::MissingRequiredArgument | ErrorKind::InvalidValue
                    )
                    && e.to_string().contains("none was supplied")
                    || !fenced && e.kind() == ErrorKind::MissingRequiredArgument;
                if e.use_stderr() && !mention {
                    let why = e.to_string();
                    let why = why.lines().next().unwrap_or("");
                    refused.push(format!("{}:{n}: {command}\n    {why}", page.display()));
                }
            }
        }
    }
    // The pages show hundreds: a parser that found none checks nothing.
    assert!(checked > 100, "only {checked} lines found");
    assert!(
        refused.is_empty(),
        "{} of {checked} lines refused:\n{}",
        refused.len(),
        refused.join("\n")
    );
}

/// The extraction: a prompt, an environment, a continuation, an inline
/// span, a pipe cut off; the tool's header line, a placeholder's syntax
/// and a Cargo.toml line left out.
#[test]
fn the_lines_taken_from_a_page_are_its_commands_and_not_its_output() {
    let page = "Run `ackgap run --seeds 3`, then:\n```\n$ V=1 ackgap explore \\\n  --seed 2\n  reproduce: ackgap replay x/y\nackgap run --queue lmove: budget ci, seed 1\nackgap explore --seed S\nackgap check h.jsonl | head # the first lines\nackgap = \"0.1\"\n```\n";
    let got: Vec<Vec<String>> = commands(page)
        .into_iter()
        .filter_map(|(_, c, _)| words(&c))
        .collect();
    assert_eq!(
        got,
        [
            vec!["ackgap", "run", "--seeds", "3"],
            vec!["ackgap", "explore", "--seed", "2"],
            vec!["ackgap", "replay", "x/y"],
            vec!["ackgap", "check", "h.jsonl"],
        ]
    );
}

/// No committed page names a path of the machine that wrote it: no
/// absolute link target, no temporary directory, home, checkout or Python
/// site-packages path (a line a reader pastes, or a link they follow, must
/// work on their machine).
#[test]
fn no_committed_page_names_a_path_of_the_machine_that_wrote_it() {
    let machine = [
        "](/",
        "/tmp/",
        "/root/",
        "/home/",
        "/work/",
        "site-packages/",
        ", dir /",
    ];
    let mut found = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (i, line) in text.lines().enumerate() {
            if let Some(m) = machine.iter().find(|m| line.contains(*m)) {
                found.push(format!("{}:{}: {m}: {line}", page.display(), i + 1));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
