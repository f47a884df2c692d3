//! The UI is a tree of layers (see the module docs of `tui`): every file imports only from the
//! layers below it. This reads the tui's source files, finds the tui paths each one names in
//! code (`super::…`, `self::…`, `crate::tui::…`, in `use` declarations and inline; comments and
//! strings are left out), and fails on an import of a higher layer, of another module of the
//! same layer, or on files that import each other, directly or through others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, bottom first, numbered as in the module docs of `tui`: (top-level module under
/// `tui`, its layer, why it sits there). A file may import from lower layers and from its own
/// module's files; "" is `tui/mod.rs`.
const LAYERS: &[(&str, u8, &str)] = &[
    ("format", 1, "numbers and text in human units: pure words every layer uses"),
    ("origin", 1, "where a flow comes from, from the host facts alone"),
    ("terminal", 1, "owns the real terminal (raw mode, alternate screen), knows no UI"),
    ("state", 2, "what the UI knows and remembers: the bottom of the UI proper"),
    ("order", 3, "the table's order and grouping: a pure function of the state's rows"),
    ("panels", 3, "what the findings and a flow's fix history show: pure functions of state"),
    ("update", 4, "keys and frames to state changes: drives the order, never reads a view"),
    ("view", 4, "draws the state and what order and panels make of it; writes only layout memory"),
    ("", 5, "the run loop: plugs the update step and the view into the pipeline"),
    ("feed", 6, "the tests' fixture: drives the UI as the run loop does"),
    ("tests", 7, "tests of the whole UI, on the feed"),
    ("frame_tests", 7, "tests of the whole UI, on the feed"),
    ("snapshot_tests", 7, "tests of the whole UI, on the feed"),
    ("layers_test", 7, "this test"),
];

/// A module path under `tui`: `["state", "rows"]`; empty for `tui` itself.
type Module = Vec<String>;

/// The tui's source files: module path and text.
fn read_sources() -> BTreeMap<Module, String> {
    fn walk(dir: &Path, module: &[String], out: &mut BTreeMap<Module, String>) {
        let mut entries: Vec<_> =
            std::fs::read_dir(dir).expect("tui source folder").map(|e| e.expect("entry").path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().and_then(|n| n.to_str()).expect("utf-8 file name").to_string();
            if path.is_dir() {
                let mut sub = module.to_vec();
                sub.push(name);
                walk(&path, &sub, out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                let mut m = module.to_vec();
                if stem != "mod" {
                    m.push(stem.to_string());
                }
                out.insert(m, std::fs::read_to_string(&path).expect("readable source"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tui"), &[], &mut out);
    out
}

/// `text` with comments, string literals and char literals blanked out (line breaks kept), so
/// that only code is searched.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && !chars[..i].last().is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            while j < chars.len()
                && !(chars[j] == '"' && chars[j + 1..].iter().take(hashes).filter(|h| **h == '#').count() == hashes)
            {
                out.push(blank(chars[j]));
                j += 1;
            }
            i = j + 1 + hashes;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    out.push(blank(c));
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // 'x' (a lifetime has no closing quote).
            i += 3;
            out.push_str("' '");
        } else if c == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{…}'.
            let close = chars[i + 2..].iter().position(|c| *c == '\'').map_or(chars.len(), |p| i + 2 + p);
            i = close + 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The paths a use tree starting at `s` names: `a::b`, `a::{b, c::d}`, `{a, b}`; each as its
/// segments (`self`, `*` and renames dropped). Also how many bytes of `s` it takes.
fn use_tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let ident = |s: &str| s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    let mut prefix = Vec::new();
    let mut at = 0;
    loop {
        let rest = &s[at..];
        let trimmed = rest.trim_start();
        at += rest.len() - trimmed.len();
        if let Some(group) = trimmed.strip_prefix('{') {
            // The matching brace, then each item of the group.
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            let mut paths = Vec::new();
            let (mut item_start, mut depth) = (0, 0);
            for (i, c) in group[..end].char_indices().chain([(end, ',')]) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    // (An empty item: the comma after the last one.)
                    ',' if depth == 0 && group[item_start..i].trim().is_empty() => item_start = i + 1,
                    ',' if depth == 0 => {
                        let (items, _) = use_tree(&group[item_start..i]);
                        for item in items {
                            paths.push(prefix.iter().cloned().chain(item).collect());
                        }
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
            return (paths, at + 1 + end + 1);
        }
        let len = ident(trimmed);
        if len == 0 {
            return (vec![prefix], at);
        }
        let segment = &trimmed[..len];
        if segment != "self" {
            prefix.push(segment.to_string());
        }
        at += len;
        match s[at..].strip_prefix("::") {
            Some(_) => at += 2,
            None => return (vec![prefix], at),
        }
    }
}

/// The tui modules that the code of module `module` names, resolved to files (`files`): each
/// path resolved from `super::`, `self::` or `crate::tui::`, to the longest module of it that
/// is a file. Inline modules (`mod tests { … }` at the top level of a file) resolve `super`
/// from themselves.
fn references(module: &[String], code: &str, files: &BTreeSet<Module>) -> BTreeSet<Module> {
    // Where the inline modules are: (from, to, name), in bytes.
    let mut inline = Vec::new();
    let mut offset = 0;
    let mut open: Option<(usize, String)> = None;
    for line in code.split_inclusive('\n') {
        let text = line.trim_end_matches('\n');
        let declared =
            text.strip_prefix("pub ").unwrap_or(text).strip_prefix("mod ").and_then(|l| l.strip_suffix(" {"));
        if let Some(name) = declared {
            open = Some((offset, name.trim().to_string()));
        } else if text == "}" {
            if let Some((from, name)) = open.take() {
                inline.push((from, offset, name));
            }
        }
        offset += line.len();
    }
    let mut found = BTreeSet::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts_word = !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
        let here: Module = module
            .iter()
            .cloned()
            .chain(inline.iter().find(|(from, to, _)| (*from..*to).contains(&i)).map(|(.., name)| name.clone()))
            .collect();
        let base = if !starts_word {
            None
        } else if let Some(tail) = rest.strip_prefix("crate::tui::") {
            Some((Vec::new(), tail))
        } else if rest.starts_with("super::") || rest.starts_with("self::") {
            let mut base = here;
            let mut tail = rest;
            while let Some(t) = tail.strip_prefix("super::") {
                base.pop();
                tail = t;
            }
            Some((base, tail.strip_prefix("self::").unwrap_or(tail)))
        } else {
            None
        };
        let Some((base, tail)) = base else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let (paths, used) = use_tree(tail);
        for path in paths {
            let full: Module = base.iter().cloned().chain(path).collect();
            let file =
                (0..=full.len()).rev().map(|n| full[..n].to_vec()).find(|m| files.contains(m)).unwrap_or_default();
            found.insert(file);
        }
        i += (rest.len() - tail.len()) + used.max(1);
    }
    found.remove(module);
    found
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "tui/mod.rs".into()
    } else {
        format!("tui::{}", module.join("::"))
    }
}

/// Every import that breaks the layers or closes a cycle, in words.
fn violations(sources: &BTreeMap<Module, String>) -> Vec<String> {
    let files: BTreeSet<Module> = sources.keys().cloned().collect();
    let layer = |m: &[String]| {
        let top = m.first().map_or("", String::as_str);
        LAYERS.iter().find(|(name, ..)| *name == top).map(|&(name, rank, why)| (name, rank, why))
    };
    let mut out = Vec::new();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in sources {
        let refs = references(module, &code_only(text), &files);
        let Some((top, rank, _)) = layer(module) else {
            out.push(format!("{} is in no layer: add its module to LAYERS in tui/layers_test.rs", name(module)));
            // Its imports still count for the cycles.
            edges.insert(module.clone(), refs);
            continue;
        };
        for target in &refs {
            let Some((target_top, target_rank, why)) = layer(target) else { continue };
            if target_top == top {
                continue;
            }
            if target_rank > rank {
                out.push(format!(
                    "{} (layer {rank}) imports {} of a higher layer ({target_rank}: {why})",
                    name(module),
                    name(target)
                ));
            } else if target_rank == rank {
                out.push(format!(
                    "{} imports {}, another module of its own layer {rank}: the two must stay independent",
                    name(module),
                    name(target)
                ));
            }
        }
        edges.insert(module.clone(), refs);
    }
    // Files of one module may import each other, but never in a circle.
    let mut done: BTreeSet<Module> = BTreeSet::new();
    for start in edges.keys() {
        let mut path = vec![start.clone()];
        find_cycle(&edges, &mut path, &mut done, &mut out);
    }
    out
}

/// Depth first from the last file of `path`; a file met again on the path is a cycle.
fn find_cycle(
    edges: &BTreeMap<Module, BTreeSet<Module>>,
    path: &mut Vec<Module>,
    done: &mut BTreeSet<Module>,
    out: &mut Vec<String>,
) {
    let here = path.last().expect("a path").clone();
    if done.contains(&here) {
        return;
    }
    for next in edges.get(&here).into_iter().flatten() {
        if let Some(at) = path.iter().position(|m| m == next) {
            let circle: Vec<String> = path[at..].iter().chain([next]).map(|m| name(m)).collect();
            out.push(format!("files import each other: {}", circle.join(" → ")));
            continue;
        }
        path.push(next.clone());
        find_cycle(edges, path, done, out);
        path.pop();
    }
    done.insert(here);
}

fn module(path: &str) -> Module {
    path.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect()
}

#[test]
fn every_tui_file_imports_only_from_the_layers_below_it() {
    let sources = read_sources();
    assert!(sources.len() > 20, "read {} tui files", sources.len());
    let broken = violations(&sources);
    assert!(broken.is_empty(), "the TUI's layers are broken:\n  {}", broken.join("\n  "));
}

#[test]
fn the_scan_sees_the_imports_the_files_make() {
    let sources = read_sources();
    let files: BTreeSet<Module> = sources.keys().cloned().collect();
    let refs = |m: &str| references(&module(m), &code_only(&sources[&module(m)]), &files);
    // `use super::state::{…}`, a grouped `use super::{…}` two levels up, `crate::tui::…`.
    assert!(refs("order").contains(&module("state")), "{:?}", refs("order"));
    assert!(refs("view::detail::charts").contains(&module("view")), "{:?}", refs("view::detail::charts"));
    assert!(refs("view::detail").contains(&module("view::fix_panel")), "{:?}", refs("view::detail"));
    assert!(refs("view::detail").contains(&module("panels")), "{:?}", refs("view::detail"));
    assert!(refs("state::selection").contains(&module("state::grouping")), "{:?}", refs("state::selection"));
    // A test module's `super::*` is its own file.
    assert!(!refs("order").contains(&module("")), "{:?}", refs("order"));
}

#[test]
fn an_import_upwards_a_sibling_or_a_circle_is_reported() {
    let file = |m: &str, text: &str| (module(m), text.to_string());
    let sources: BTreeMap<Module, String> = [
        file("", "pub mod state;\npub mod view;\npub mod update;\n"),
        // Upwards, inline, hidden from a plain `use` scan.
        file("state", "fn f() { crate::tui::view::dim(); }\n// super::update in a comment is no import\n"),
        file("state::a", "use super::b::X;\n"),
        file("state::b", "use super::a::Y;\nconst S: &str = \"super::update\";\n"),
        file("format", ""),
        // A group over lines, as rustfmt writes long ones.
        file("view", "use super::{\n    format::rate,\n    state::AppState,\n    update::Action,\n};\n"),
        file("update", "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"),
        file("strange", ""),
    ]
    .into_iter()
    .collect();
    let broken = violations(&sources);
    let expect = [
        "tui::state (layer 2) imports tui::view of a higher layer (4: draws the state",
        "tui::view imports tui::update, another module of its own layer 4",
        "files import each other: tui::state → tui::view → tui::state",
        "files import each other: tui::state::a → tui::state::b → tui::state::a",
        "tui::strange is in no layer",
    ];
    for e in expect {
        assert!(broken.iter().any(|b| b.starts_with(e)), "missing {e:?} in {broken:#?}");
    }
    assert_eq!(broken.len(), expect.len(), "only those: {broken:#?}");
}

#[test]
fn comments_and_strings_are_not_code() {
    let code = code_only(
        "let a = \"super::x\"; // super::y\nlet b = r#\"crate::tui::z\"#; let c = '{'; /* self::w */ super::v::f();",
    );
    assert!(!code.contains("super::x") && !code.contains("super::y") && !code.contains("crate::tui::z"));
    assert!(!code.contains("self::w") && code.contains("super::v::f()"), "{code}");
    let (paths, _) = use_tree("{state::{AppState, Column}, update::Action, self}");
    assert_eq!(paths, [module("state::AppState"), module("state::Column"), module("update::Action"), module("")]);
}
