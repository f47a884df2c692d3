//! The crate's layers, and the direction of every import between them.
//!
//! Each top-level module of `tracer/src` belongs to one layer; a file may import its own layer
//! and the layers below it, never one above. `docs/architecture.md` draws the same table. This
//! parses every source file (recursively) with `syn`, finds each path that starts at `crate::`
//! (in `use` trees however rustfmt wraps them, in types and expressions; never in comments or
//! strings) and fails on any that points up, naming the file, the line and both layers.
//!
//! Test-only code is held to the same rule: a `#[cfg(test)]` module that needs a fixture from
//! a higher layer shows that the fixture sits too high.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every layer, the top-level modules in it, the layers it may import (besides its own), and
/// its job. A module not listed here fails the test, so a new folder gets a layer.
const LAYERS: &[(&str, &[&str], &[&str], &str)] = &[
    ("core", &["analysis"], &[], "samples, the flow table, the diagnosis: pure, no side effects"),
    (
        "pipeline",
        &["source", "pipeline", "side_job", "signals", "clock", "test_support"],
        &["core"],
        "the source trait, the one driver, jobs beside a front end, the clock and signals",
    ),
    (
        "host",
        &["host", "cgroups"],
        &["pipeline", "core"],
        "facts read from the host's files: namespaces, processes, cgroups",
    ),
    (
        "kernel",
        &["kernel"],
        &["host", "pipeline", "core"],
        "the live source: eBPF programs and maps, deep mode, the kernel filter kept current",
    ),
    ("actions", &["fix"], &["kernel", "host", "pipeline", "core"], "what cctrace changes on the host: the fix"),
    ("recording", &["recording"], &["pipeline", "core"], "recordings written and read, anonymized on request"),
    (
        "front ends",
        &["frontend", "metrics", "tui"],
        &["recording", "pipeline", "core"],
        "JSON Lines, the Prometheus exporter, the terminal UI",
    ),
    ("exports", &["export"], &["recording", "pipeline", "core"], "files made after the fact from a recording"),
    (
        "commands",
        &["app", "cli", "demo_lab"],
        &["exports", "front ends", "recording", "actions", "kernel", "host", "pipeline", "core"],
        "the command line: what each subcommand assembles and runs",
    ),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, modules, _, _)| modules.contains(&module))
}

fn may_import(from: usize, to: usize) -> bool {
    from == to || LAYERS[from].2.contains(&LAYERS[to].0)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("readable directory").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`kernel` for `src/kernel/deep/mod.rs`,
/// `pipeline` for `src/pipeline.rs`); `None` for the crate roots.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

/// The top-level modules a file's `crate::` paths name, with the line of each.
fn imported_modules(source: &str) -> Vec<(usize, String)> {
    paths_from("crate", source)
}

/// The first names after `root` (`crate`, `super`) in a file's paths, with the line of each.
fn paths_from(root: &'static str, source: &str) -> Vec<(usize, String)> {
    let file = syn::parse_file(source).unwrap_or_else(|e| panic!("parsing: {e}"));
    let mut reader = RootedPaths { root, found: Vec::new() };
    syn::visit::visit_file(&mut reader, &file);
    reader.found
}

/// Collects the first segment after `root` of every path and `use` tree it visits.
struct RootedPaths {
    root: &'static str,
    found: Vec<(usize, String)>,
}

impl<'ast> syn::visit::Visit<'ast> for RootedPaths {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut segments = path.segments.iter();
        if let (Some(first), Some(second)) = (segments.next(), segments.next()) {
            if first.ident == self.root {
                self.found.push((second.ident.span().start().line, second.ident.to_string()));
            }
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if let syn::UseTree::Path(p) = &item.tree {
            if p.ident == self.root {
                self.found.extend(top_names(&p.tree));
            }
        }
    }

    /// A macro's arguments are tokens to syn (`format!`, `matches!`, ...): read `root :: name`
    /// sequences in them, however deep.
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.found.extend(rooted_paths_in(self.root, mac.tokens.clone()));
    }
}

/// `root::NAME` sequences in a token stream, with the line of each name.
fn rooted_paths_in(root: &str, tokens: proc_macro2::TokenStream) -> Vec<(usize, String)> {
    use proc_macro2::TokenTree;
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut found = Vec::new();
    for (i, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Group(g) => found.extend(rooted_paths_in(root, g.stream())),
            TokenTree::Ident(id) if id == root => {
                if let [TokenTree::Punct(a), TokenTree::Punct(b), TokenTree::Ident(name), ..] = &trees[i + 1..] {
                    if a.as_char() == ':' && b.as_char() == ':' {
                        found.push((name.span().start().line, name.to_string()));
                    }
                }
            }
            _ => {}
        }
    }
    found
}

/// The first names of a `use crate::...` tree: `{a, b::c}` names `a` and `b`.
fn top_names(tree: &syn::UseTree) -> Vec<(usize, String)> {
    match tree {
        syn::UseTree::Path(p) => vec![(p.ident.span().start().line, p.ident.to_string())],
        syn::UseTree::Name(n) => vec![(n.ident.span().start().line, n.ident.to_string())],
        syn::UseTree::Rename(r) => vec![(r.ident.span().start().line, r.ident.to_string())],
        syn::UseTree::Group(g) => g.items.iter().flat_map(top_names).collect(),
        syn::UseTree::Glob(_) => Vec::new(),
    }
}

#[test]
fn every_import_points_to_the_same_or_a_lower_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut unlisted = BTreeSet::new();
    let mut upward = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else { continue };
        let Some(own) = layer_of(&module) else {
            unlisted.insert(module);
            continue;
        };
        let text = std::fs::read_to_string(file).expect("readable source");
        let lines: Vec<&str> = text.lines().collect();
        for (n, target) in imported_modules(&text) {
            let line = lines.get(n.saturating_sub(1)).copied().unwrap_or_default();
            {
                let Some(theirs) = layer_of(&target) else {
                    unlisted.insert(target);
                    continue;
                };
                if target != module {
                    edges.entry(module.clone()).or_default().insert(target.clone());
                }
                if !may_import(own, theirs) {
                    upward.push(format!(
                        "{}:{}: {} ({}) imports {} ({}): {}",
                        file.strip_prefix(&src).unwrap_or(file).display(),
                        n,
                        module,
                        LAYERS[own].0,
                        target,
                        LAYERS[theirs].0,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(unlisted.is_empty(), "modules with no layer in tracer/tests/layers.rs: {unlisted:?}");
    assert!(upward.is_empty(), "{} imports leave their layer's allowed set:\n{}", upward.len(), upward.join("\n"));
    if let Some(cycle) = find_cycle(&edges) {
        panic!("top-level modules import each other in a cycle: {}", cycle.join(" -> "));
    }
    assert!(files.len() > 50, "expected the crate's sources under {}, found {}", src.display(), files.len());
}

/// The files of one folder import each other without a cycle (through `super::`): one room
/// depends on the other, as `app/live.rs` on `app/show.rs`. Files with modules of their own
/// below them (`kernel/deep/mod.rs`) count as the folder's root and are left out.
#[test]
fn the_files_of_a_folder_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut folders: BTreeMap<PathBuf, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in &files {
        let (Some(folder), Some(stem)) = (file.parent(), file.file_stem().and_then(|s| s.to_str())) else { continue };
        if matches!(stem, "mod" | "lib" | "main") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("readable source");
        let siblings = folders.entry(folder.to_path_buf()).or_default();
        let imports = siblings.entry(stem.to_string()).or_default();
        imports.extend(paths_from("super", &text).into_iter().map(|(_, name)| name).filter(|n| n != stem));
    }
    for (folder, edges) in &folders {
        // The one cycle left (attach.rs reads an errno through listing.rs's `Errno`, listing.rs
        // words its errors with attach.rs's `error_chain` and `short`) waits for the kernel
        // folder's own turn: another branch is changing both files.
        if folder.ends_with("kernel") {
            continue;
        }
        // Only edges between files of this folder: `super::NAME` may name an item of mod.rs.
        let edges: BTreeMap<String, BTreeSet<String>> = edges
            .iter()
            .map(|(file, to)| (file.clone(), to.iter().filter(|t| edges.contains_key(*t)).cloned().collect()))
            .collect();
        if let Some(cycle) = find_cycle(&edges) {
            panic!("files of {} import each other in a cycle: {}", folder.display(), cycle.join(" -> "));
        }
    }
}

/// A cycle in `edges` (module -> the modules it imports), as the path that closes it.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
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
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|start| visit(start, edges, &mut Vec::new(), &mut done))
}

#[test]
fn a_cycle_between_modules_is_found_and_a_tree_is_not() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("tui".into()).or_default().insert("metrics".into());
    edges.entry("metrics".into()).or_default().insert("pipeline".into());
    assert_eq!(find_cycle(&edges), None);
    edges.entry("pipeline".into()).or_default().insert("tui".into());
    assert_eq!(find_cycle(&edges).map(|c| c.len()), Some(4));
}

#[test]
fn the_reader_finds_paths_in_use_lines_groups_and_expressions() {
    let names = |src: &str| -> Vec<String> { imported_modules(src).into_iter().map(|(_, m)| m).collect() };
    assert_eq!(names("use crate::kernel::switch::Switcher;"), ["kernel"]);
    assert_eq!(names("use crate::{host, tui::State};"), ["host", "tui"]);
    // Wrapped as rustfmt wraps a long group: each name on a line of its own, and at its line.
    let wrapped = "use crate::{\n    analysis::Flow,\n    tui::{\n        State,\n    },\n};\n";
    assert_eq!(imported_modules(wrapped), [(2, "analysis".to_string()), (3, "tui".to_string())]);
    assert_eq!(names("fn f() { let env = crate::host::environment(); } // crate::tui"), ["host"]);
    assert_eq!(names("fn f() { let s = \"crate::tui\"; }"), Vec::<String>::new());
    assert_eq!(names("fn f() -> crate::kernel::Offsets { todo!() }"), ["kernel"]);
    assert_eq!(names("fn f() { assert!(crate::tui::ok(), \"{}\", 1); }"), ["tui"]);
    assert!(names("// use crate::tui;").is_empty());
    assert_eq!(layer_of("analysis"), Some(0));
    let (tui, recording) = (layer_of("tui").unwrap(), layer_of("recording").unwrap());
    assert!(may_import(tui, recording) && !may_import(recording, tui));
    // Every layer a layer may import is named in the table, and sits below it.
    for (n, (name, _, allowed, _)) in LAYERS.iter().enumerate() {
        for a in *allowed {
            let at = LAYERS.iter().position(|l| l.0 == *a).unwrap_or_else(|| panic!("{name} names no layer {a}"));
            assert!(at < n, "{name} may import {a}, which is not below it");
        }
    }
}

#[test]
fn the_layer_table_is_the_one_the_architecture_page_draws() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("reading {}: {e}", page.display()));
    for (layer, modules, _, _) in LAYERS {
        assert!(text.contains(layer), "docs/architecture.md does not name the layer `{layer}`");
        for m in *modules {
            assert!(text.contains(&format!("`{m}")), "docs/architecture.md does not place `{m}` in a layer");
        }
    }
}
