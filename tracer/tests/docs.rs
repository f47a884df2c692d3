//! The README and `docs/` are the user's manual, so they are checked like code:
//!
//! - every relative link leads to a file that exists, and every `#anchor` to a heading of that
//!   file (GitHub's slugs), and the README links every page of `docs/`;
//! - every long flag and every subcommand of the command line is documented somewhere in them;
//! - every default the docs state for a flag is the binary's, and every default is stated.
//!
//! The command line is read from the built `cctrace` itself: clap renders its `--help` from the
//! one definition (`tracer::cli::Cli`), for the top level and, recursively, for every
//! subcommand it lists: what users read, hidden flags and commands left out. Runs without root
//! and without the eBPF object.

use cctrace_lab::child::{OutputWithin, CHILD_DEADLINE};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tracer/ has a parent").to_path_buf()
}

/// README.md and every page of docs/, sorted.
fn doc_files() -> Vec<PathBuf> {
    let root = repo_root();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("readable docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    assert!(pages.len() >= 10, "expected the docs pages under docs/, found {}", pages.len());
    let mut files = vec![root.join("README.md")];
    files.extend(pages);
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(repo_root()).unwrap_or(path).display().to_string()
}

/// The lines outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => lines.push((index + 1, line)),
            _ => {}
        }
    }
    lines
}

/// `line` without its inline code spans: a link written inside backticks is not a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// `[text](target)` becomes `text`, as GitHub renders a heading before slugging it.
fn link_texts(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else { break };
        let Some(close) = rest[open + mid..].find(')') else { break };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    out.push_str(rest);
    out
}

/// GitHub's anchor for a heading: lowercase, spaces to `-`, everything but letters, digits,
/// `-` and `_` dropped.
fn github_slug(heading: &str) -> String {
    let mut slug = String::new();
    for c in link_texts(heading).trim().chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() || c == '-' || c == '_' {
            slug.push(c);
        } else if c == ' ' {
            slug.push('-');
        }
    }
    slug
}

/// The anchors of a markdown file's headings; a repeated heading gets `-1`, `-2`, ... as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug = github_slug(line[hashes..].trim().trim_end_matches('#'));
        let count = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *count == 0 { slug.clone() } else { format!("{slug}-{count}") });
        *count += 1;
    }
    anchors
}

/// The targets of the inline links `[text](target)` and reference definitions `[label]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    if let Some(rest) = line.trim_start().strip_prefix('[') {
        if let Some((_, target)) = rest.split_once("]:") {
            if let Some(target) = target.split_whitespace().next() {
                targets.push(target.to_string());
            }
        }
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        rest = &after[end..];
    }
    targets
}

fn is_external(target: &str) -> bool {
    ["http://", "https://", "mailto:", "ftp://"].iter().any(|scheme| target.starts_with(scheme))
}

#[test]
fn every_relative_link_leads_to_a_file_and_every_anchor_to_a_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    let mut linked_from_readme = BTreeSet::new();
    let readme = repo_root().join("README.md");
    for file in doc_files() {
        let text = read(&file);
        let dir = file.parent().expect("a file has a directory");
        for (number, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.is_empty() {
                    broken.push(format!("{}:{number}: empty link target", shown(&file)));
                    continue;
                }
                if is_external(&target) {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let linked = if path.is_empty() { file.clone() } else { dir.join(path) };
                if !linked.exists() {
                    broken.push(format!("{}:{number}: {target}: no such file {}", shown(&file), linked.display()));
                    continue;
                }
                if file == readme {
                    if let Ok(canonical) = linked.canonicalize() {
                        linked_from_readme.insert(canonical);
                    }
                }
                let Some(anchor) = anchor else { continue };
                if linked.extension().is_none_or(|e| e != "md") {
                    broken.push(format!(
                        "{}:{number}: {target}: an anchor into a file that is not markdown",
                        shown(&file)
                    ));
                    continue;
                }
                let headings = anchors(&read(&linked));
                if !headings.contains(anchor) {
                    broken.push(format!(
                        "{}:{number}: {target}: {} has no heading #{anchor} (it has: {})",
                        shown(&file),
                        shown(&linked),
                        headings.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    for page in doc_files().into_iter().skip(1) {
        let canonical = page.canonicalize().expect("a docs page exists");
        if !linked_from_readme.contains(&canonical) {
            broken.push(format!("README.md does not link {}", shown(&page)));
        }
    }
    assert!(broken.is_empty(), "{} broken links in README.md and docs/:\n{}", broken.len(), broken.join("\n"));
    assert!(checked >= 30, "expected the README and docs/ to link each other, found {checked} relative links");
}

/// `cctrace [path...] --help`, as clap prints it from the command-line definition.
fn help(path: &[String]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_cctrace"))
        .args(path)
        .arg("--help")
        .env("NO_COLOR", "1")
        .env("COLUMNS", "200")
        .output_within(CHILD_DEADLINE)
        .expect("cctrace runs");
    assert!(
        output.status.success(),
        "cctrace {} --help failed: {}",
        path.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

/// One help page: the long flags it lists (`--help` and `--version` left out) and its
/// subcommands (clap's own `help` left out).
fn parse_help(text: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut flags = BTreeSet::new();
    let mut subcommands = Vec::new();
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') {
            section = line.trim_end();
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let first = line.split_whitespace().next().unwrap_or("");
        if section == "Commands:" {
            if indent == 2 && first != "help" {
                subcommands.push(first.to_string());
            }
            continue;
        }
        // Option lines start with the flag (`  -o, --output <OUT>`, `      --json`); their
        // descriptions are indented further and may name other flags in passing.
        if indent > 6 || !first.starts_with('-') {
            continue;
        }
        for word in line.split_whitespace() {
            let word = word.trim_end_matches(',');
            let name: String = word.chars().take_while(|&c| c.is_ascii_alphanumeric() || c == '-').collect();
            if name.starts_with("--") && name.len() > 2 && name != "--help" && name != "--version" {
                flags.insert(name);
            }
        }
    }
    (flags, subcommands)
}

/// Every (sub)command of cctrace, as its path (`[]`, `["fix"]`, ...), with its long flags.
fn command_tree() -> BTreeMap<Vec<String>, BTreeSet<String>> {
    let mut tree = BTreeMap::new();
    let mut pending = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let (flags, subcommands) = parse_help(&help(&path));
        for sub in subcommands {
            let mut child = path.clone();
            child.push(sub);
            pending.push(child);
        }
        tree.insert(path, flags);
    }
    tree
}

/// The defaults one help page gives (`[default: X]` under an option), by long flag.
fn defaults_in_help(text: &str) -> BTreeMap<String, String> {
    let mut defaults = BTreeMap::new();
    let mut flag: Option<String> = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let first = line.split_whitespace().next().unwrap_or("");
        if !line.is_empty() && !line.starts_with(' ') {
            flag = None;
        } else if indent <= 6 && first.starts_with('-') {
            flag = line
                .split_whitespace()
                .map(|w| w.trim_end_matches(','))
                .find(|w| w.starts_with("--"))
                .map(|w| w.chars().take_while(|&c| c.is_ascii_alphanumeric() || c == '-').collect());
        }
        if let (Some(f), Some(value)) = (&flag, line.trim().strip_prefix("[default: ")) {
            defaults.insert(f.clone(), value.trim_end_matches(']').to_string());
        }
    }
    defaults
}

/// What the docs claim a flag's default is, each claim with where it is made: a synopsis
/// `[--flag VALUE]` whose value is not a placeholder (placeholders are upper case or a choice
/// `a|b`); `(default X)` or `(defaults X, Y)` right after the flags it is about
/// (`` `--a`, `--b` (defaults X, Y) ``); and `` `X` (the default) `` in a bullet about the flag.
fn claimed_defaults(docs: &[(String, String)], flag: &str) -> Vec<(String, String)> {
    let mut claims = Vec::new();
    for (file, text) in docs {
        for (number, line) in text.lines().enumerate() {
            for (i, _) in line.match_indices(&format!("[{flag} ")) {
                let value: String = line[i + flag.len() + 2..].chars().take_while(|&c| c != ']' && c != ' ').collect();
                let placeholder = value.contains('|') || value.chars().any(|c| c.is_ascii_uppercase());
                if !placeholder && !value.is_empty() {
                    claims.push((format!("{file}:{}", number + 1), value));
                }
            }
        }
        for (number, block) in prose_blocks(text) {
            let at = format!("{file}:{number}");
            claims.extend(after_flags(&block, flag).into_iter().map(|v| (at.clone(), v)));
            let about_flag = block.strip_prefix("- `").is_some_and(|b| b.split([' ', '`']).next() == Some(flag));
            if let Some((before, _)) = block.split_once("` (the default)").filter(|_| about_flag) {
                claims.push((at.clone(), before.rsplit('`').next().unwrap_or("").to_string()));
            }
        }
    }
    claims
}

/// Bullets and paragraphs outside code blocks, each joined into one line, with the number of
/// its first line.
fn prose_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (number, line) in prose_lines(text) {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('|') {
            open = false;
            continue;
        }
        match blocks.last_mut() {
            Some((_, block)) if open && !trimmed.starts_with("- ") => {
                block.push(' ');
                block.push_str(trimmed);
            }
            _ => blocks.push((number, trimmed.to_string())),
        }
        open = true;
    }
    blocks
}

/// The defaults `(default X)` / `(defaults X, Y)` give `flag` where it is one of the code spans
/// right before them.
fn after_flags(block: &str, flag: &str) -> Vec<String> {
    let mut found = Vec::new();
    for opener in [" (default ", " (defaults "] {
        for (at, _) in block.match_indices(opener) {
            // The code spans just before, separated by ", ": `--a MS`, `--b`.
            let spans: Vec<&str> = block[..at].rsplit(", ").map_while(|s| s.strip_suffix('`')).collect();
            let flags: Vec<&str> =
                spans.iter().rev().filter_map(|s| s.rsplit('`').next()?.split_whitespace().next()).collect();
            let Some(position) = flags.iter().position(|f| *f == flag) else { continue };
            let rest = &block[at + opener.len()..];
            let values: Vec<&str> = rest.split([')', ';', ':']).next().unwrap_or("").split(", ").collect();
            if let Some(value) = values.get(position).and_then(|v| v.trim_matches('`').split_whitespace().next()) {
                found.push(value.trim_matches('`').to_string());
            }
        }
    }
    found
}

/// Two defaults are the same value: equal as numbers (`1` and `1.0`), else as words.
fn same_default(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

#[test]
fn documented_defaults_are_the_binary_s_and_every_default_is_documented() {
    let docs: Vec<(String, String)> = doc_files().iter().map(|f| (shown(f), read(f))).collect();
    let mut defaults = BTreeMap::new();
    let mut pending = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let text = help(&path);
        defaults.extend(defaults_in_help(&text));
        for sub in parse_help(&text).1 {
            let mut child = path.clone();
            child.push(sub);
            pending.push(child);
        }
    }
    // The help must have been understood: these defaults exist today.
    for expected in ["--interval", "--sample-ms", "--hooks", "--cc", "--rtt-ms"] {
        assert!(defaults.contains_key(expected), "no default for {expected} found in cctrace --help: {defaults:?}");
    }
    let mut wrong = Vec::new();
    for (flag, default) in &defaults {
        let claims = claimed_defaults(&docs, flag);
        if claims.is_empty() {
            wrong.push(format!("{flag}: default {default} is stated nowhere in README.md or docs/"));
        }
        for (at, claimed) in claims.iter().filter(|(_, claimed)| !same_default(claimed, default)) {
            wrong.push(format!("{at}: says {flag} defaults to {claimed}; the binary's default is {default}"));
        }
    }
    assert!(wrong.is_empty(), "{} defaults wrong or missing in the docs:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn the_defaults_reader_reads_each_form() {
    let docs = vec![(
        "usage.md".to_string(),
        "cctrace demo [--rtt-ms 30] [--hooks auto|btf|classic] [--interval MS]\n\n\
         - `--interval MS` (default 1000, 10 to 3600000): one object per interval.\n\
         - `--heavy-mb`, `--heavy-mbps` (defaults 0.5 MB, 1 Mbit/s): heavy.\n\
         - `--hooks auto|btf|classic`: tracepoints;\n  `auto` (the default) takes BTF.\n\n\
         Prose: `--scenario vpn` (default `kernel`: the kernel's TCP) builds it.\n"
            .to_string(),
    )];
    let values = |flag: &str| -> Vec<String> { claimed_defaults(&docs, flag).into_iter().map(|(_, v)| v).collect() };
    assert_eq!(values("--rtt-ms"), ["30"]);
    assert_eq!(values("--interval"), ["1000"]);
    assert_eq!(values("--heavy-mbps"), ["1"]);
    assert_eq!(values("--heavy-mb"), ["0.5"]);
    assert_eq!(values("--hooks"), ["auto"]);
    assert_eq!(values("--scenario"), ["kernel"]);
    assert!(same_default("1.0", "1") && !same_default("bbr", "cubic"));
    let help = "Options:\n      --interval <MS>\n          Report interval\n          \n          [default: 1000]\n\n      --json\n          JSON\n";
    assert_eq!(defaults_in_help(help), BTreeMap::from([("--interval".to_string(), "1000".to_string())]));
}

/// Whether `needle` occurs in `text` as a whole word: not inside a longer flag or name.
fn mentions(text: &str, needle: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices(needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + needle.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

#[test]
fn every_flag_and_subcommand_of_the_command_line_is_documented() {
    let docs: String = doc_files().iter().map(|file| read(file)).collect::<Vec<_>>().join("\n");
    let tree = command_tree();
    // The help must have been understood: these exist today, so a parse that finds nothing
    // cannot pass as "nothing to document".
    let all_flags: BTreeSet<&String> = tree.values().flatten().collect();
    for expected in ["--json", "--duration", "--container", "--netns"] {
        assert!(all_flags.iter().any(|f| *f == expected), "{expected} not found in cctrace --help: {all_flags:?}");
    }
    for expected in ["record", "replay", "fix"] {
        assert!(
            tree.contains_key(&vec![expected.to_string()]),
            "`{expected}` not found in cctrace --help: {:?}",
            tree.keys()
        );
    }

    let mut missing = Vec::new();
    // A global flag is listed by every subcommand: name it once, with where it is listed.
    let mut undocumented_flags: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (path, flags) in &tree {
        let command = std::iter::once("cctrace").chain(path.iter().map(String::as_str)).collect::<Vec<_>>().join(" ");
        if !path.is_empty() && !mentions(&docs, &command) {
            missing.push(format!("subcommand `{command}`"));
        }
        for flag in flags.iter().filter(|flag| !mentions(&docs, flag)) {
            undocumented_flags.entry(flag).or_default().push(format!("`{command}`"));
        }
    }
    for (flag, commands) in undocumented_flags {
        missing.push(format!("{flag} (listed by {})", commands.join(", ")));
    }
    assert!(
        missing.is_empty(),
        "not documented anywhere in README.md or docs/*.md ({} of them):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(github_slug("Applying the fix: `cctrace fix`"), "applying-the-fix-cctrace-fix");
    assert_eq!(
        github_slug("When the kernel's fix cannot help: QUIC, userspace VPNs and the hop to them"),
        "when-the-kernels-fix-cannot-help-quic-userspace-vpns-and-the-hop-to-them"
    );
    assert_eq!(
        github_slug("Fixing: `cctrace fix`, and `f` / `u` in the terminal UI"),
        "fixing-cctrace-fix-and-f--u-in-the-terminal-ui"
    );
    assert_eq!(github_slug("See [Usage](docs/usage.md) first"), "see-usage-first");
    assert_eq!(github_slug("snake_case and dash-ed"), "snake_case-and-dash-ed");
    let text = "# Title\n## Same\n```\n# not a heading\n```\n## Same\n";
    assert_eq!(anchors(text), ["same", "same-1", "title"].map(String::from).into_iter().collect());
    assert_eq!(link_targets("[a](x.md#b) and `[c](not-a-link)` and [d](<y.md>)"), vec!["x.md#b", "y.md"]);
    assert!(mentions("use --json here", "--json") && !mentions("use --json-lines", "--json"));
    assert!(!mentions("cctrace replayed", "cctrace replay"));
}

/// The figures page and its log: what the checks below hold the other pages to, and leave out.
const FIGURES: &str = "docs/figures.md";
const HISTORY: &str = "docs/history.md";

/// The numbers in `text` as written ("1,000", "0.62", "12"): digits, thousands groups and a
/// decimal part; a number inside a word or a hex string ("6.18.44", "7296df8") is none.
fn numbers(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit() && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '.'));
        if !starts {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < chars.len() {
            let c = chars[end];
            let next_digit = chars.get(end + 1).is_some_and(char::is_ascii_digit);
            if c.is_ascii_digit() || ((c == ',' || c == '.') && next_digit) {
                end += 1;
            } else {
                break;
            }
        }
        let token: String = chars[i..end].iter().collect();
        let version = token.matches('.').count() > 1;
        if !version && !chars.get(end).is_some_and(|c| c.is_alphanumeric() || *c == '_') {
            out.push(token);
        }
        i = end.max(i + 1);
    }
    out
}

/// Each section of the figures page by its heading's anchor: its text, to the next heading.
fn figures_sections(page: &str) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in page.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            sections.extend(current.take());
            current = Some((github_slug(title), String::new()));
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    sections.extend(current);
    sections
}

/// The links of `text` into the figures page: (the link's text, the anchor it names).
fn figure_quotes(text: &str) -> Vec<(String, String)> {
    let mut quotes = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else { break };
        let after = &rest[open + mid + 2..];
        let Some(close) = after.find(')') else { break };
        let target = &after[..close];
        if let Some((path, anchor)) = target.split_once('#') {
            if path.ends_with("figures.md") {
                quotes.push((rest[open + 1..open + mid].to_string(), anchor.to_string()));
            }
        }
        rest = &after[close..];
    }
    quotes
}

/// The README and the pages of docs/ but the figures page and its log, each as its paragraphs
/// and table rows, one line each, with the line they begin on.
fn quoting_pages() -> Vec<(PathBuf, Vec<(usize, String)>)> {
    let skip = [repo_root().join(FIGURES), repo_root().join(HISTORY)];
    doc_files()
        .into_iter()
        .filter(|f| !skip.contains(f))
        .map(|file| {
            let text = read(&file);
            let mut units = prose_blocks(&text);
            units.extend(
                prose_lines(&text)
                    .into_iter()
                    .filter(|(_, l)| l.trim_start().starts_with('|'))
                    .map(|(n, l)| (n, l.to_string())),
            );
            (file, units.into_iter().map(|(n, u)| (n, without_code_spans(&u))).collect())
        })
        .collect()
}

#[test]
fn every_figure_quoted_from_the_figures_page_is_in_the_section_it_links() {
    let page = read(&repo_root().join(FIGURES));
    let sections = figures_sections(&page);
    let mut wrong = Vec::new();
    let mut links = 0;
    for (file, units) in quoting_pages() {
        for (line, unit) in units {
            for (text, anchor) in figure_quotes(&unit) {
                links += 1;
                let Some(section) = sections.get(&anchor) else {
                    wrong.push(format!(
                        "{}:{line}: [{text}] links #{anchor}, which the figures page lacks",
                        shown(&file)
                    ));
                    continue;
                };
                let held = numbers(section);
                for n in numbers(&text) {
                    if !held.contains(&n) {
                        wrong.push(format!(
                            "{}:{line}: [{text}] quotes {n}, not in #{anchor} of {FIGURES}",
                            shown(&file)
                        ));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} figures quoted that the page does not hold:\n{}", wrong.len(), wrong.join("\n"));
    // Pages link sections rather than quote their numbers (a quote goes stale with the next
    // `cargo xtask bench`, and this test then names it); the links must be there to check.
    assert!(links >= 5, "the README and docs link the figures page's sections; found {links}");
}

/// The numbers in `text` that state a cost, a speed or a size of cctrace: per-run times (ns,
/// µs), CPU (ms/s, ms a second, a share of a CPU or core), memory (MB, GB said of memory: a
/// 30 MB flow or a 0.5 MB threshold is none).
fn performance_numbers(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for n in numbers(text) {
        let mut from = 0;
        while let Some(at) = text[from..].find(&n) {
            let end = from + at + n.len();
            let after = text[end..].trim_start_matches(' ');
            let within = |words: usize| after.split_whitespace().take(words).collect::<Vec<_>>().join(" ");
            let before = text[..from + at].split_whitespace().rev().take(4).collect::<Vec<_>>().join(" ");
            let is_unit =
                |u: &str| after.starts_with(u) && !after[u.len()..].starts_with(|c: char| c.is_alphanumeric());
            let time = ["ns", "µs", "us", "ms/s"].into_iter().any(is_unit);
            let memory = ["MB", "GB"].into_iter().any(is_unit)
                && ["peak", "RSS", "memory", "heap", "resident"]
                    .iter()
                    .any(|w| before.contains(w) || within(4).contains(w));
            let cpu_ms = after.starts_with("ms a second") || after.starts_with("ms of CPU");
            let share = after.starts_with('%') && ["CPU", "core"].iter().any(|w| within(6).contains(w));
            if time || memory || cpu_ms || share {
                found.push(n.clone());
                break;
            }
            from = end;
        }
    }
    found
}

#[test]
fn no_page_states_a_performance_figure_the_figures_page_does_not_hold() {
    let held = numbers(&read(&repo_root().join(FIGURES)));
    let mut stray = Vec::new();
    for (file, units) in quoting_pages() {
        for (line, unit) in units {
            // Quotes are checked against their section above.
            let mut unquoted = unit.clone();
            for (text, anchor) in figure_quotes(&unit) {
                unquoted = unquoted.replace(&format!("[{text}]("), "(").replace(&format!("#{anchor})"), ")");
            }
            for n in performance_numbers(&unquoted) {
                if !held.contains(&n) {
                    stray.push(format!(
                        "{}:{line}: {n} ({})",
                        shown(&file),
                        unit.chars().take(100).collect::<String>()
                    ));
                }
            }
        }
    }
    stray.dedup();
    assert!(
        stray.is_empty(),
        "{} performance figures in README.md and docs/ that {FIGURES} does not hold (quote its rows, or move dated \
         measurements to {HISTORY}):\n{}",
        stray.len(),
        stray.join("\n")
    );
}

#[test]
fn numbers_and_performance_figures_are_read_as_written() {
    assert_eq!(numbers("0.62 % at 10,000 flows, 6.18.44, 7296df8, x2 and 3."), ["0.62", "10,000", "3"]);
    assert_eq!(performance_numbers("took 0.7 % of the machine's busy CPU, 2 % loss"), ["0.7"]);
    assert_eq!(
        performance_numbers("peak 126 MB; 40 ns a run; 0.45 ms/s; 3 ms a second; 1 MiB ring"),
        ["126", "40", "0.45", "3"]
    );
    assert!(performance_numbers("a 30 ms path at 200 Mbit/s with 0.1 % loss; 5 nsenter").is_empty());
    assert!(performance_numbers("a 30 MB bulk flow; defaults 0.5 MB, 1 Mbit/s").is_empty());
    assert_eq!(performance_numbers("its memory at 100,000 sockets: 135 MB"), ["135"]);
    let quotes = figure_quotes("see [0.62 % of busy CPU](docs/figures.md#the-observers-cost) and [x](usage.md#a)");
    assert_eq!(quotes, [("0.62 % of busy CPU".to_string(), "the-observers-cost".to_string())]);
}
