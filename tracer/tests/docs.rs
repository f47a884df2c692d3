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
