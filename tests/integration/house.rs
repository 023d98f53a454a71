//! The house rules that keep the crate a library with a command line on
//! top, checked on the source tree itself:
//!
//! - the library's top-level modules import one another without a cycle,
//!   and ARCHITECTURE.md's module graph is exactly the graph the code has;
//! - clap, the binary's flags and its exit codes live only under `src/cli/`
//!   and in `src/main.rs`.
//!
//! A failure names the cycle, the edge the document lacks (or no longer
//! has), or the file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The library's source files, with the top-level module each belongs to
/// (`src/chaos/runner/mod.rs` → `chaos`; `src/lib.rs` → `lib`). The binary's
/// files (`src/main.rs`, `src/cli/`) are not the library's and are left out.
fn library_files() -> Vec<(String, PathBuf)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read src/") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(&src).expect("under src/");
                let top = rel
                    .components()
                    .next()
                    .expect("a file name")
                    .as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string();
                if top != "main" && top != "cli" {
                    files.push((top, path));
                }
            }
        }
    }
    files.sort();
    files
}

/// The code of a line: nothing from `//` on (comments and doc comments,
/// whose links name modules without importing them).
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

/// Every `crate::NAME` a file's code mentions, including each first name
/// of a `crate::{a::X, b}` list (which rustfmt may spread over lines).
fn mentioned_modules(text: &str) -> BTreeSet<String> {
    let code: String = text.lines().map(code).collect::<Vec<_>>().join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(list) = after.strip_prefix('{') {
            // The list up to its matching brace; its items split on the
            // commas at depth 0.
            let (mut depth, mut item, mut end) = (0usize, String::new(), list.len());
            for (i, c) in list.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = i;
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        insert_first_name(&mut found, &item);
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            insert_first_name(&mut found, &item);
            rest = &list[end..];
        } else {
            insert_first_name(&mut found, after);
            rest = after;
        }
    }
    found
}

/// The first path segment of `path` (`history::Event` → `history`), unless
/// it is `self` or empty.
fn insert_first_name(found: &mut BTreeSet<String>, path: &str) {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if !name.is_empty() && name != "self" {
        found.insert(name);
    }
}

/// The graph of the code: module → the other top-level modules it imports.
fn code_graph() -> BTreeMap<String, BTreeSet<String>> {
    let files = library_files();
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in &files {
        if module == "lib" {
            continue;
        }
        let text = fs::read_to_string(path).expect("read a source file");
        let edges = graph.entry(module.clone()).or_default();
        for target in mentioned_modules(&text) {
            if target != *module && modules.contains(&target) {
                edges.insert(target);
            }
        }
    }
    graph
}

/// The graph ARCHITECTURE.md draws: the fenced block under its
/// `## Module graph` heading, one line per module, `module -> a, b` (or
/// `module -> nothing`).
fn documented_graph() -> BTreeMap<String, BTreeSet<String>> {
    let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
        .expect("read ARCHITECTURE.md");
    let section = doc
        .split("\n## Module graph")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Module graph` section");
    let block = section
        .split("```")
        .nth(1)
        .expect("the module graph section has a fenced block");
    let mut graph = BTreeMap::new();
    for line in block.lines().skip(1) {
        let Some((module, targets)) = line.split_once("->") else {
            continue;
        };
        let targets = targets.trim();
        let targets: BTreeSet<String> = if targets == "nothing" {
            BTreeSet::new()
        } else {
            targets.split(',').map(|t| t.trim().to_string()).collect()
        };
        graph.insert(module.trim().to_string(), targets);
    }
    graph
}

/// A cycle of `graph`, if it has one, as the path that closes it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|start| visit(start, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_library_module_imports_a_module_that_imports_it_back() {
    let graph = code_graph();
    assert!(graph.len() >= 10, "found too few modules: {graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        panic!("an import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn architecture_md_draws_the_module_graph_the_code_has() {
    let code = code_graph();
    let doc = documented_graph();
    let mut problems = Vec::new();
    for (module, targets) in &code {
        let drawn = doc.get(module).cloned().unwrap_or_default();
        if !doc.contains_key(module) {
            problems.push(format!("module {module} is not in the graph"));
        }
        for t in targets.difference(&drawn) {
            problems.push(format!(
                "{module} imports {t}, which the graph does not draw"
            ));
        }
        for t in drawn.difference(targets) {
            problems.push(format!(
                "the graph draws {module} -> {t}, which the code no longer has"
            ));
        }
    }
    for module in doc.keys().filter(|m| !code.contains_key(*m)) {
        problems.push(format!(
            "the graph names {module}, which is not a module of src/"
        ));
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's module graph is out of date:\n  {}",
        problems.join("\n  ")
    );
    assert_eq!(find_cycle(&doc), None, "the documented graph has a cycle");
}

#[test]
fn clap_and_exit_codes_live_only_in_the_binary() {
    let mut found = Vec::new();
    for (_, path) in library_files() {
        let text = fs::read_to_string(&path).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            let line = code(line);
            let hits = ["clap::", "use clap", "crate::cli", "process::exit", "EXIT_"];
            if hits.iter().any(|h| line.contains(h)) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the binary's concerns in library modules:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_passes_a_chain() {
    let chain: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["c".to_string()])),
    ]
    .into();
    assert_eq!(find_cycle(&chain), None);
    let mut cycle = chain.clone();
    cycle.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        find_cycle(&cycle),
        Some(
            vec!["a", "b", "c", "a"]
                .into_iter()
                .map(String::from)
                .collect()
        )
    );
    assert_eq!(
        mentioned_modules(
            "use crate::{check, history::Event}; // crate::model\nx = crate::queue::Q;"
        ),
        BTreeSet::from(["check".into(), "history".into(), "queue".into()])
    );
}
