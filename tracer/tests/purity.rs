//! The pure core (`tracer/src/analysis`, every file below it) must stay free of the kernel
//! loader, the async runtime, the terminal and the host, and of the project's own layers above
//! it, so that it runs on recordings and test feeds without root, and of `unsafe` code. This
//! reads its sources and fails on any path into those, and on any import cycle among the core's
//! own modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Paths that would tie the core to a side effect or an adapter (outside crates and std).
const FORBIDDEN: &[&str] = &[
    "aya::",
    "aya_log",
    "tokio",
    "ratatui",
    "crossterm",
    "libc::",
    "std::fs",
    "std::process",
    "std::net::TcpStream",
    "std::time::Instant",
    "std::time::SystemTime",
    "std::thread",
];

/// `unsafe` blocks, functions, impls and traits in a source file, by line. The core reads the
/// kernel's records with checked casts (bytemuck): it needs none.
fn unsafe_code(text: &str) -> Vec<usize> {
    #[derive(Default)]
    struct Finder(Vec<usize>);
    impl<'ast> syn::visit::Visit<'ast> for Finder {
        fn visit_expr_unsafe(&mut self, e: &'ast syn::ExprUnsafe) {
            self.0.push(e.unsafe_token.span.start().line);
            syn::visit::visit_expr_unsafe(self, e);
        }
        fn visit_signature(&mut self, sig: &'ast syn::Signature) {
            self.0.extend(sig.unsafety.as_ref().map(|u| u.span.start().line));
            syn::visit::visit_signature(self, sig);
        }
        fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
            self.0.extend(item.unsafety.as_ref().map(|u| u.span.start().line));
            syn::visit::visit_item_impl(self, item);
        }
        fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
            self.0.extend(item.unsafety.as_ref().map(|u| u.span.start().line));
            syn::visit::visit_item_trait(self, item);
        }
    }
    let file = syn::parse_file(text).unwrap_or_else(|e| panic!("parsing: {e}"));
    let mut finder = Finder::default();
    syn::visit::visit_file(&mut finder, &file);
    finder.0
}

#[test]
fn the_core_has_no_unsafe_code_and_the_finder_sees_each_kind() {
    for path in sources(&core_dir()) {
        let text = std::fs::read_to_string(&path).expect("readable source");
        let lines = unsafe_code(&text);
        assert!(
            lines.is_empty(),
            "{}: unsafe code on lines {lines:?}: the pure core reads bytes with bytemuck",
            path.display()
        );
    }
    let sample =
        "fn a() { let _ = \"unsafe { }\"; }\nunsafe fn b() {}\nfn c() { unsafe { b() } }\nunsafe impl Send for X {}\n";
    assert_eq!(unsafe_code(sample), [2, 3, 4]);
}

/// The core's own root: every `crate::` path must stay below it.
const CORE: &str = "crate::analysis";

/// Every `.rs` file below `dir`, recursively, in a stable order.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("readable directory").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn core_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/analysis")
}

/// `crate::` paths in `text` that leave the core (`crate::kernel`, `crate::source::X`, ...).
fn upward_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        let preceded_by_ident = rest[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
        let path: String = rest[i..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
        let in_core = path == CORE || path.starts_with(&format!("{CORE}::"));
        // `crate::{analysis::...}` would dodge a prefix check: a brace right after is refused too.
        if !preceded_by_ident && !in_core {
            out.push(path.clone());
        }
        rest = &rest[i + path.len().max(1)..];
    }
    out
}

#[test]
fn the_analysis_core_uses_no_kernel_runtime_terminal_host_or_upper_layer() {
    let dir = core_dir();
    let files = sources(&dir);
    let mut nested = 0;
    for path in &files {
        nested += usize::from(path.parent() != Some(dir.as_path()));
        let text = std::fs::read_to_string(path).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for bad in FORBIDDEN {
                assert!(!code.contains(bad), "{}:{}: the pure core must not use {bad}: {line}", path.display(), n + 1);
            }
            // Comments too: an intra-doc link into an upper layer is a dependency of the docs.
            if let Some(up) = upward_paths(line).first() {
                panic!(
                    "{}:{}: the pure core must not reach {up} (only paths under {CORE}): {line}",
                    path.display(),
                    n + 1
                );
            }
        }
    }
    assert!(files.len() >= 5, "expected the core's modules under {}, found {}", dir.display(), files.len());
    assert!(nested > 0, "the core's subfolders (diagnosis/, ...) are read too");
}

#[test]
fn upward_paths_are_found_wherever_they_are_written() {
    assert_eq!(upward_paths("use crate::source::UdpCounters;"), ["crate::source::UdpCounters"]);
    assert_eq!(upward_paths("    x: Option<crate::fix::HostFixer>,"), ["crate::fix::HostFixer"]);
    assert_eq!(upward_paths("use crate::{analysis::flow_table, kernel};"), ["crate::"]);
    assert_eq!(upward_paths("/// see [`crate::clock::wall_clock_now`]"), ["crate::clock::wall_clock_now"]);
    assert!(upward_paths("use crate::analysis::flow_table::Flow; use tracer_crate::x;").is_empty());
    assert_eq!(upward_paths("use crate::analysisx::Y;"), ["crate::analysisx::Y"]);
}

/// A module of the core: `["diagnosis", "flag"]` for `analysis/diagnosis/flag.rs`, `[]` for
/// `analysis/mod.rs`.
type Module = Vec<String>;

fn module_of(dir: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(dir).expect("below the core");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// The code of a file without comments and without its inline test modules (test code may
/// import whatever it tests; it is not part of the build graph). A `#[cfg(test)] mod name;`
/// declaration only names a file of its own, which is read as a module of its own.
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut cfg_test = false;
    let mut skipping: Option<usize> = None;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        if let Some(depth) = skipping.as_mut() {
            *depth = (*depth + code.matches('{').count()).saturating_sub(code.matches('}').count());
            if *depth == 0 {
                skipping = None;
            }
            continue;
        }
        let trimmed = code.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            cfg_test = true;
            continue;
        }
        if cfg_test && trimmed.ends_with('{') {
            // The test item (module, impl, fn) runs to its closing brace.
            skipping = Some(code.matches('{').count() - code.matches('}').count());
            cfg_test = false;
            continue;
        }
        cfg_test = false;
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Expand a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else { return vec![tree.to_string()] };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').expect("balanced braces")];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).flat_map(expand).map(|p| format!("{prefix}{p}")).collect()
}

/// Every core path a module names: its `use` trees and the `crate::analysis::…` and `super::…`
/// paths written inline, as segments below `analysis` (`super` resolved against `module`).
fn named_paths(module: &Module, code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    // `use` statements (any visibility), possibly over several lines.
    let mut statement: Option<String> = None;
    for line in code.lines() {
        let trimmed = line.trim();
        if statement.is_none() {
            let after_vis = trimmed.strip_prefix("pub").map_or(trimmed, |r| {
                r.strip_prefix('(').and_then(|r| r.split_once(')')).map_or(r, |(_, r)| r).trim_start()
            });
            if let Some(tree) = after_vis.strip_prefix("use ") {
                statement = Some(String::new());
                statement.as_mut().expect("just set").push_str(tree);
            }
        } else if let Some(s) = statement.as_mut() {
            s.push(' ');
            s.push_str(trimmed);
        }
        if let Some(s) = statement.take_if(|s| s.contains(';')) {
            let tree = s.split(';').next().unwrap_or("");
            paths.extend(
                expand(tree)
                    .into_iter()
                    .map(|leaf| leaf.split(" as ").next().unwrap_or("").replace(char::is_whitespace, "")),
            );
        }
    }
    for start in ["crate::analysis::", "super::"] {
        let mut rest = code;
        while let Some(i) = rest.find(start) {
            let preceded = rest[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            let path: String =
                rest[i..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            // `crate::analysis::{a, b}` is a `use` tree, expanded above.
            let tree = rest[i + path.len()..].starts_with('{');
            if !preceded && !tree {
                paths.push(path.trim_end_matches(':').to_string());
            }
            rest = &rest[i + start.len()..];
        }
    }
    // `super` of `analysis/x.rs` is `analysis`, and so is that of `analysis/x/mod.rs`: both
    // are the module `x`.
    let parent: Vec<String> = module[..module.len().saturating_sub(1)].to_vec();
    paths
        .into_iter()
        .filter_map(|p| {
            let segs: Vec<String> = p.split("::").map(str::to_string).collect();
            match segs.first().map(String::as_str) {
                Some("crate") if segs.get(1).is_some_and(|s| s == "analysis") => Some(segs[2..].to_vec()),
                Some("super") => {
                    let mut base = parent.clone();
                    let mut rest = &segs[1..];
                    while rest.first().is_some_and(|s| s == "super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    base.extend(rest.iter().cloned());
                    Some(base)
                }
                _ => None,
            }
        })
        .collect()
}

/// The longest module that `path` starts with.
fn target(modules: &BTreeSet<Module>, path: &[String]) -> Module {
    (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|m| modules.contains(m)).unwrap_or_default()
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "analysis".to_string()
    } else {
        format!("analysis::{}", m.join("::"))
    }
}

/// The core's import graph: module -> modules it imports from (itself left out).
fn import_graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let dir = core_dir();
    let files = sources(&dir);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(&dir, f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let module = module_of(&dir, file);
        let code = production_code(&std::fs::read_to_string(file).expect("readable source"));
        let edges: BTreeSet<Module> =
            named_paths(&module, &code).iter().map(|p| target(&modules, p)).filter(|t| *t != module).collect();
        graph.insert(module, edges);
    }
    graph
}

/// A cycle in `graph`, as the modules along it (first repeated at the end), if there is one.
fn find_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        m: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        match marks.get(m) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = stack.iter().position(|s| s == m).expect("an open module is on the stack");
                let mut cycle = stack[from..].to_vec();
                cycle.push(m.clone());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(m.clone(), Mark::Open);
        stack.push(m.clone());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(m.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph.keys().find_map(|m| visit(m, graph, &mut marks, &mut Vec::new()))
}

#[test]
fn the_core_s_modules_import_each_other_without_a_cycle() {
    let graph = import_graph();
    assert!(graph.len() >= 5, "expected the core's modules, found {}", graph.len());
    assert!(
        graph.get(&vec!["diagnosis".to_string()]).is_some_and(|e| !e.is_empty()),
        "the diagnosis' imports are seen: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import cycle among the core's modules: {} (each imports the next; move what they share into a module below them)",
            cycle.iter().map(name).collect::<Vec<_>>().join(" -> ")
        );
    }
}

#[test]
fn the_cycle_check_finds_a_cycle_and_resolves_paths() {
    let m = |s: &str| -> Module {
        if s.is_empty() {
            vec![]
        } else {
            s.split("::").map(str::to_string).collect()
        }
    };
    let modules: BTreeSet<Module> = ["", "diagnosis", "diagnosis::flag", "fix", "environment"].map(m).into();
    let code = "use crate::analysis::{fix::{a, b}, environment::Environment};\nuse super::flag::x;\nlet y = crate::analysis::diagnosis::flag::z();\n";
    let named: BTreeSet<Module> =
        named_paths(&m("diagnosis::words"), code).iter().map(|p| target(&modules, p)).collect();
    assert_eq!(named, ["fix", "environment", "diagnosis::flag"].map(m).into());
    // Any visibility, renames, several lines; words that are not a statement are no import.
    let code = "pub(crate) use crate::analysis::{\n    fix as f,\n    environment::Environment as E,\n};\nlet s = \"we use {x} here\";\n";
    let named: BTreeSet<Module> = named_paths(&m("udp"), code).iter().map(|p| target(&modules, p)).collect();
    assert_eq!(named, ["fix", "environment"].map(m).into());
    // In `diagnosis/mod.rs`, `super::` is the core's root.
    let named: BTreeSet<Module> =
        named_paths(&m("diagnosis"), "use super::fix;").iter().map(|p| target(&modules, p)).collect();
    assert_eq!(named, [m("fix")].into());

    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    graph.insert(m("diagnosis"), [m("fix")].into());
    graph.insert(m("fix"), [m("environment")].into());
    graph.insert(m("environment"), BTreeSet::new());
    assert_eq!(find_cycle(&graph), None);
    graph.insert(m("environment"), [m("diagnosis")].into());
    let cycle = find_cycle(&graph).expect("a cycle");
    assert_eq!(
        cycle.iter().map(name).collect::<Vec<_>>().join(" -> "),
        "analysis::diagnosis -> analysis::fix -> analysis::environment -> analysis::diagnosis"
    );
    assert_eq!(
        production_code("use a;\n#[cfg(test)]\nmod tests {\n use b;\n}\n#[cfg(test)]\nmod feed;\nmod c;\n"),
        "use a;\nmod feed;\nmod c;\n"
    );
}
