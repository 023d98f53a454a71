//! The house rules that keep the crate a library with a command line on
//! top, checked on the source tree itself:
//!
//! - the library's top-level modules import one another without a cycle,
//!   and ARCHITECTURE.md's module graph is exactly the graph the code has;
//! - clap, the binary's flags and its exit codes live only under `src/cli/`
//!   and in `src/main.rs`;
//! - the checkers draw nothing: no HTML or SVG under `src/check/` (the
//!   report is `src/report/`, above them);
//! - no decision by a server's or a fault's name: whether a server runs a
//!   fault kind is its own answer (`Server::supports`);
//! - no function of `src/` over 70 lines nor file over 1,000 but those
//!   `size-ratchet.txt` lists, a list that may only shrink.
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
    let mut files: Vec<(String, PathBuf)> = rust_files(&src)
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(&src).expect("under src/");
            let top = rel
                .components()
                .next()
                .expect("a file name")
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            (top != "main" && top != "cli").then_some((top, path))
        })
        .collect();
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

/// Each line of `files` that `hit` matches, as `PATH:N: LINE`.
fn lines_where(
    files: impl IntoIterator<Item = PathBuf>,
    hit: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut found = Vec::new();
    for path in files {
        let text = fs::read_to_string(&path).expect("read a source file");
        for (n, line) in text.lines().enumerate() {
            if hit(line) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn clap_and_exit_codes_live_only_in_the_binary() {
    let hits = ["clap::", "use clap", "crate::cli", "process::exit", "EXIT_"];
    let files = library_files().into_iter().map(|(_, path)| path);
    let found = lines_where(files, |line| hits.iter().any(|h| code(line).contains(h)));
    assert!(
        found.is_empty(),
        "the binary's concerns in library modules:\n  {}",
        found.join("\n  ")
    );
}

/// The checkers are pure functions of a history: what a run looks like is
/// `src/report/`'s, which reads them. No file under `src/check/` holds a
/// page, a drawing or a table of HTML (code, comments and tests alike).
#[test]
fn check_holds_no_html() {
    let check = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/check");
    let found = lines_where(rust_files(&check), |line| {
        let lower = line.to_ascii_lowercase();
        ["<html", "<svg", "<table"]
            .iter()
            .any(|tag| lower.contains(tag))
    });
    assert!(
        found.is_empty(),
        "HTML in src/check/ (it belongs in src/report/):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn only_the_shared_test_module_declares_how_a_test_runs_ackgap() {
    // Fifteen test modules once declared their own `ackgap` function, with four
    // signatures and two environments: a test read one and ran another.
    // `common.rs` has them (`ackgap`, `ackgap_in`, `ackgap_env`, `text`).
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration");
    let files = rust_files(&tests)
        .into_iter()
        .filter(|path| !path.ends_with("common.rs"));
    let found = lines_where(files, |line| {
        let code = line.trim_start();
        let declares = |name: &str| {
            let decl = format!("fn {name}(");
            code.starts_with(&decl) || code.contains(&format!(" {decl}"))
        };
        declares("ackgap") || declares("text")
    });
    assert!(
        found.is_empty(),
        "a test module declares its own way to run ackgap (use crate::common's):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn no_decision_reads_a_server_s_kind_name_nor_a_fault_s_name() {
    // A server says what it is (`Server::topology`, `Server::supports`) and a
    // fault event what it was (`FaultKind`, `Event::fault`): a decision
    // made on `kind()`'s string or a fault's name breaks silently when a
    // name changes. The binary's files too.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let hits = [
        ".kind() == \"",
        ".kind() != \"",
        "(server.kind(),",
        "match server.kind()",
        "[\"fault\"] == \"",
        "starts_with(\"reshard",
    ];
    let found = lines_where(rust_files(&src), |line| {
        hits.iter().any(|h| code(line).contains(h))
    });
    assert!(
        found.is_empty(),
        "decisions by a server's kind name or a fault's name:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn whether_a_server_runs_a_fault_is_its_own_answer_alone() {
    // Support was once decided twice, `FaultKind::supported_on` over a
    // topology rebuilt from `kind()`'s name and the backends' own
    // matches; an error's words chose on the backend's name too. Now each
    // backend answers `supports` beside its faults: no code compares a
    // backend's name, nor brings the second decision back.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let names = [
        "url",
        "process",
        "container",
        "replicated",
        "container-replicated",
        "cluster",
    ];
    let found = lines_where(rust_files(&src), |line| {
        let code = code(line);
        code.contains("supported_on(")
            || names.iter().any(|n| {
                code.contains(&format!("== \"{n}\"")) || code.contains(&format!("!= \"{n}\""))
            })
    });
    assert!(
        found.is_empty(),
        "a decision on a backend's name, or support decided outside the server:\n  {}",
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

/// The longest a function may be (lines, its signature to its closing
/// brace) and a file, unless the ratchet lists it.
const FN_LINES_MAX: usize = 70;
const FILE_LINES_MAX: usize = 1_000;

/// Every function of `src/` (library and binary, tests modules included)
/// with its length in lines, named `FILE::module::Type::name` (a trait
/// impl's method `Type as Trait::name`), parsed with syn.
fn function_lengths() -> BTreeMap<String, usize> {
    use syn::visit::Visit;

    struct Lengths {
        file: String,
        path: Vec<String>,
        out: BTreeMap<String, usize>,
    }
    impl Lengths {
        fn record(&mut self, name: &syn::Ident, from: proc_macro2::Span, to: proc_macro2::Span) {
            let lines = to.end().line - from.start().line + 1;
            let mut key = format!(
                "{}::{}",
                self.file,
                self.path
                    .iter()
                    .map(|p| format!("{p}::"))
                    .collect::<String>()
            );
            key.push_str(&name.to_string());
            let mut n = 1;
            let base = key.clone();
            while self.out.contains_key(&key) {
                n += 1;
                key = format!("{base}#{n}");
            }
            self.out.insert(key, lines);
        }
    }
    impl<'a> Visit<'a> for Lengths {
        fn visit_item_fn(&mut self, f: &'a syn::ItemFn) {
            self.record(
                &f.sig.ident,
                f.sig.fn_token.span,
                f.block.brace_token.span.close(),
            );
            self.path.push(f.sig.ident.to_string());
            syn::visit::visit_item_fn(self, f);
            self.path.pop();
        }
        fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
            self.record(
                &f.sig.ident,
                f.sig.fn_token.span,
                f.block.brace_token.span.close(),
            );
            syn::visit::visit_impl_item_fn(self, f);
        }
        fn visit_trait_item_fn(&mut self, f: &'a syn::TraitItemFn) {
            if let Some(block) = &f.default {
                self.record(
                    &f.sig.ident,
                    f.sig.fn_token.span,
                    block.brace_token.span.close(),
                );
            }
            syn::visit::visit_trait_item_fn(self, f);
        }
        fn visit_item_mod(&mut self, m: &'a syn::ItemMod) {
            self.path.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.path.pop();
        }
        fn visit_item_impl(&mut self, i: &'a syn::ItemImpl) {
            let ty = &i.self_ty;
            let name = match &i.trait_ {
                Some((_, t, _)) => format!(
                    "{} as {}",
                    quote_ty(ty),
                    t.segments
                        .last()
                        .map_or(String::new(), |s| s.ident.to_string())
                ),
                None => quote_ty(ty),
            };
            self.path.push(name);
            syn::visit::visit_item_impl(self, i);
            self.path.pop();
        }
    }
    fn quote_ty(ty: &syn::Type) -> String {
        match ty {
            syn::Type::Path(p) => p
                .path
                .segments
                .last()
                .map_or("?".into(), |s| s.ident.to_string()),
            _ => "?".into(),
        }
    }

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = BTreeMap::new();
    for path in rust_files(&root.join("src")) {
        let text = fs::read_to_string(&path).expect("read a source file");
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let rel = path.strip_prefix(root).expect("under the root");
        let mut lengths = Lengths {
            file: rel.display().to_string(),
            path: Vec::new(),
            out: BTreeMap::new(),
        };
        lengths.visit_file(&file);
        out.extend(lengths.out);
    }
    out
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read a directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `tests/integration/size-ratchet.txt`: `fn NAME LINES` and `file PATH
/// LINES`, the offenders of the day it was written, each with its length
/// then.
fn ratchet() -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration/size-ratchet.txt");
    let text = fs::read_to_string(&path).expect("read tests/integration/size-ratchet.txt");
    let (mut fns, mut files) = (BTreeMap::new(), BTreeMap::new());
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.rsplitn(2, ' ');
        let lines: usize = words
            .next()
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("size-ratchet.txt:{}: no length: {line}", n + 1));
        let rest = words.next().unwrap_or_default();
        match rest.split_once(' ') {
            Some(("fn", name)) => fns.insert(name.to_owned(), lines),
            Some(("file", name)) => files.insert(name.to_owned(), lines),
            _ => panic!(
                "size-ratchet.txt:{}: expected `fn NAME LINES` or `file PATH LINES`: {line}",
                n + 1
            ),
        };
    }
    (fns, files)
}

/// What breaks the ratchet: an offender not listed, a listed one grown
/// past its recorded length, and a listed one that no longer offends (or
/// is gone), which must leave the list: it may only shrink.
fn ratchet_breaks(
    what: &str,
    max: usize,
    actual: &BTreeMap<String, usize>,
    listed: &BTreeMap<String, usize>,
) -> Vec<String> {
    let mut breaks = Vec::new();
    for (name, &len) in actual.iter().filter(|(_, &len)| len > max) {
        match listed.get(name) {
            None => breaks.push(format!(
                "{what} {name} is {len} lines, over {max}: split it (the ratchet lists only the offenders it was written with)"
            )),
            Some(&was) if len > was => breaks.push(format!(
                "{what} {name} grew from {was} to {len} lines: the ratchet only lets it shrink"
            )),
            _ => {}
        }
    }
    for (name, &was) in listed {
        match actual.get(name) {
            Some(&len) if len > max => {
                if len < was {
                    breaks.push(format!(
                        "{what} {name} shrank from {was} to {len} lines: lower its line in size-ratchet.txt to {len}"
                    ));
                }
            }
            Some(&len) => breaks.push(format!(
                "{what} {name} is {len} lines now, within {max}: take it off size-ratchet.txt"
            )),
            None => breaks.push(format!(
                "{what} {name} is gone: take it off size-ratchet.txt"
            )),
        }
    }
    breaks
}

/// No function of `src/` longer than 70 lines, and no file longer than
/// 1,000, but the offenders `size-ratchet.txt` lists, each no longer than
/// it was; a listed one that was shortened or no longer offends must be
/// lowered or taken off (as TigerBeetle's tidy.zig keeps its list).
#[test]
fn no_function_over_70_lines_nor_file_over_1000_but_the_ratchet_s_and_the_ratchet_only_shrinks() {
    let (fns, files) = ratchet();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file_lengths: BTreeMap<String, usize> = rust_files(&root.join("src"))
        .into_iter()
        .map(|p| {
            let lines = fs::read_to_string(&p).expect("read").lines().count();
            (p.strip_prefix(root).unwrap().display().to_string(), lines)
        })
        .collect();
    let mut breaks = ratchet_breaks("fn", FN_LINES_MAX, &function_lengths(), &fns);
    breaks.extend(ratchet_breaks(
        "file",
        FILE_LINES_MAX,
        &file_lengths,
        &files,
    ));
    assert!(
        breaks.is_empty(),
        "the size ratchet:\n{}",
        breaks.join("\n")
    );
}

/// The ratchet's rule itself: an unlisted offender, a listed one grown,
/// shrunk, within the bound or gone each break it; a listed one as it was
/// passes.
#[test]
fn the_ratchet_refuses_a_new_offender_growth_and_a_stale_entry() {
    let listed = BTreeMap::from([
        ("a".to_owned(), 80),
        ("b".to_owned(), 80),
        ("c".to_owned(), 80),
        ("d".to_owned(), 80),
        ("e".to_owned(), 80),
    ]);
    let actual = BTreeMap::from([
        ("a".to_owned(), 80),
        ("b".to_owned(), 81),
        ("c".to_owned(), 75),
        ("d".to_owned(), 60),
        ("new".to_owned(), 71),
        ("short".to_owned(), 70),
    ]);
    let breaks = ratchet_breaks("fn", 70, &actual, &listed);
    let named: Vec<&str> = breaks
        .iter()
        .map(|b| b.split(' ').nth(1).unwrap())
        .collect();
    assert_eq!(named, ["b", "new", "c", "d", "e"], "{breaks:#?}");
}
