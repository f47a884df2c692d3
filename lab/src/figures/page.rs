//! The page as text: its sections found in what is there, one replaced, the whole written again
//! (the heading, the table of targets, then every section in the page's order). Pure: the
//! caller reads and writes the files.

use super::provenance::Provenance;
use super::targets::TARGETS;
use super::{Row, Verdict};

/// The sections the page lists first, in this order, with their titles (a section not measured
/// yet stands under its title, so that pages can link it); others follow in the order they were
/// first written. (Add a new section's id and title here to give it its place.)
pub const ORDER: &[(&str, &str)] = &[
    ("observer", "The observer's cost"),
    ("selfcost", "cctrace's own process"),
    ("windows", "tcp_probe's windows: the cost model and the interrupts"),
    ("startup", "Start-up with many sockets"),
    ("churn", "Churn: short connections beside a bulk flow"),
    ("throughput", "Throughput of a saturating transfer, traced"),
    ("udp", "UDP accounting"),
    ("flow-table", "The flow table: memory and a tick under churn"),
    ("frame", "The terminal UI: a frame"),
    ("exporter", "The Prometheus exporter"),
    ("recording", "Recordings: size and speed"),
    ("binaries", "The binaries: size and start-up"),
    ("goodput", "Goodput: CUBIC and BBR on the emulated paths"),
    ("deep", "Deep mode: what a twin costs"),
    ("verdicts", "Verdicts that hold run after run"),
    ("suite", "The suite's time"),
];

/// The title [`ORDER`] gives `id`, if it lists it.
pub(super) fn listed_title(id: &str) -> Option<&'static str> {
    ORDER.iter().find(|(o, _)| *o == id).map(|(_, title)| *title)
}

const HEAD: &str = "# Figures

<!-- Written by the figures writer (lab/src/figures/): run the command that measures a section
again, never edit this page by hand. -->

The current figures of cctrace's cost, speed and memory, each written by the run that measured it,
with its target, how it was measured, the date, the commit (`+`: with changes not yet committed)
and the machine and its load. `cargo xtask bench` writes most of them; [Tests and
benchmarks](testing.md#the-figures-page) says which command writes each section, and how a
command adds a row. When a run replaces a section measured on another day or commit, the rows
it replaces go to the [history](history.md), a dated log.
";

const TARGETS_HEAD: &str = "## Targets

One target per measure; each row below that measures one says whether it was met (for a mean
with a 95 % interval, its end on the target's side must be).

| measure | target | measured in |
|---|---|---|
";

const TABLE_HEAD: &str =
    "| figure | measured | target | how | date | commit | machine, load |\n|---|---|---|---|---|---|---|\n";

/// One section as it stands in the page: its id, when and where it was measured, and its text
/// (markers included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Block {
    pub(super) id: String,
    pub(super) date: String,
    pub(super) commit: String,
    pub(super) title: String,
    pub(super) text: String,
}

fn start_marker(id: &str, p: &Provenance) -> String {
    format!("<!-- section {id} {} {} -->", p.date, p.commit)
}

fn end_marker(id: &str) -> String {
    format!("<!-- end {id} -->")
}

/// Every section block in `page`, in page order.
pub(super) fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(at) = rest.find("<!-- section ") {
        let after = &rest[at..];
        let Some(close) = after.find(" -->") else { break };
        let fields: Vec<&str> = after["<!-- section ".len()..close].split_whitespace().collect();
        let [id, date, commit] = fields[..] else {
            rest = &after[close..];
            continue;
        };
        let end = end_marker(id);
        let Some(end_at) = after.find(&end) else { break };
        let text = &after[..end_at + end.len()];
        let title = text.lines().find_map(|l| l.strip_prefix("## ")).unwrap_or(id).trim().to_string();
        out.push(Block { id: id.into(), date: date.into(), commit: commit.into(), title, text: text.into() });
        rest = &after[end_at + end.len()..];
    }
    out
}

/// A table cell: one line, its pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

fn target_cell(row: &Row) -> String {
    match &row.target {
        None => String::new(),
        Some((t, Verdict::Met)) => format!("{}: met", t.text()),
        Some((t, Verdict::Missed)) => format!("{}: **missed**", t.text()),
    }
}

/// A section's block, measured as `p` says.
pub(super) fn render(id: &str, title: &str, about: &str, rows: &[Row], p: &Provenance) -> Block {
    let mut text = format!("{}\n## {title}\n\n", start_marker(id, p));
    if !about.trim().is_empty() {
        text.push_str(about.trim());
        text.push_str("\n\n");
    }
    text.push_str(TABLE_HEAD);
    let machine_load = format!("{}; {}", p.machine_short, p.load);
    for row in rows {
        let cells = [
            cell(&row.figure),
            cell(&row.value),
            cell(&target_cell(row)),
            cell(&row.method),
            cell(&p.date),
            format!("`{}`", p.commit),
            cell(&machine_load),
        ];
        text.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    text.push_str(&format!("\nMachine: {}.\n{}", p.machine, end_marker(id)));
    Block { id: id.into(), date: p.date.clone(), commit: p.commit.clone(), title: title.into(), text }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
pub(super) fn slug(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The table of targets: each links the section that measures it once the page has it.
fn targets_table(sections: &[Block]) -> String {
    let mut text = TARGETS_HEAD.to_string();
    for t in TARGETS {
        let at = sections
            .iter()
            .find(|b| b.id == t.section)
            .map_or_else(|| "not measured yet".to_string(), |b| format!("[{}](#{})", b.title, slug(&b.title)));
        text.push_str(&format!("| {} | {} | {at} |\n", cell(t.measure), cell(&t.text())));
    }
    text
}

/// Where a section goes: its place in [`ORDER`], or after every listed one.
fn rank(id: &str) -> usize {
    ORDER.iter().position(|(o, _)| *o == id).unwrap_or(ORDER.len())
}

/// `page` (possibly empty) with `new` in place of its section of the same id, or added; and
/// the block it replaced, if any.
pub(super) fn replace(page: &str, new: Block) -> (String, Option<Block>) {
    let mut sections = blocks(page);
    let old = sections.iter().position(|b| b.id == new.id).map(|i| sections.remove(i));
    // Listed ids first in their order; the rest keep the order they were first written in.
    let at = sections.iter().position(|b| rank(&b.id) > rank(&new.id)).unwrap_or(sections.len());
    sections.insert(at, new);
    (assemble(&sections), old)
}

/// The whole page: its head, the table of targets, the sections (each listed one not measured
/// yet under its title alone).
pub(super) fn assemble(sections: &[Block]) -> String {
    let mut text = format!("{HEAD}\n{}", targets_table(sections));
    let unlisted = sections.iter().filter(|b| listed_title(&b.id).is_none()).map(|b| b.text.clone());
    let listed = ORDER.iter().map(|(id, title)| {
        sections.iter().find(|b| b.id == *id).map_or_else(|| placeholder(title), |b| b.text.clone())
    });
    for part in listed.chain(unlisted) {
        text.push('\n');
        text.push_str(&part);
        text.push('\n');
    }
    text
}

/// A listed section no run has written yet: its title, and where to find what writes it.
fn placeholder(title: &str) -> String {
    format!(
        "## {title}\n\nNot measured yet: [Tests and benchmarks](testing.md#the-figures-page) says which \
         command writes this section."
    )
}

/// An empty history: its head alone.
pub(super) fn empty_history() -> &'static str {
    HISTORY_HEAD
}

const HISTORY_HEAD: &str = "# History

A log, newest first: figures the [figures page](figures.md) held before a later run replaced them,
each with the day and the commit it was measured on, and earlier measurements the project's pages
once quoted. Nothing here is current; the figures page is.
";

/// `history` (possibly empty) with `old` logged first under the head.
pub(super) fn log(history: &str, old: &Block) -> String {
    let body = history.strip_prefix(HISTORY_HEAD).unwrap_or(if history.trim().is_empty() { "" } else { history });
    let entry = old
        .text
        .lines()
        .filter(|l| !l.starts_with("<!-- "))
        .map(|l| match l.strip_prefix("## ") {
            Some(title) => format!("## {}, `{}`: {title}", old.date, old.commit),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    format!("{HISTORY_HEAD}\n{}\n{}", entry.trim(), body.trim_start_matches('\n').trim_end().to_string() + "\n")
        .replace("\n\n\n", "\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::targets::OBSERVER_SHARE;

    fn at(date: &str, commit: &str) -> Provenance {
        Provenance {
            date: date.into(),
            commit: commit.into(),
            machine: "2 × a CPU, 24 GiB, Linux 6.18, a VM".into(),
            machine_short: "2-CPU VM".into(),
            load: "load 0.8-1.2".into(),
        }
    }

    fn rows() -> Vec<Row> {
        vec![
            Row::new("cctrace, iperf3, 0 idle flows", "0.62 % ± 0.10").judged(&OBSERVER_SHARE, 0.72),
            Row::new("bpftrace | per-flow", "4.4 %").how("4 rounds"),
        ]
    }

    #[test]
    fn a_section_is_added_found_and_replaced_in_place() {
        let (page, old) =
            replace("", render("observer", "The observer's cost", "Shares.", &rows(), &at("2026-12-07", "abc")));
        assert!(old.is_none());
        assert!(page.starts_with("# Figures"), "{page}");
        assert!(page.contains("| cctrace, iperf3, 0 idle flows | 0.62 % ± 0.10 | ≤ 1 %: met |"), "{page}");
        assert!(
            page.contains(
                "| bpftrace \\| per-flow | 4.4 % |  | 4 rounds | 2026-12-07 | `abc` | 2-CPU VM; load 0.8-1.2 |"
            ),
            "{page}"
        );
        assert!(page.contains("| cctrace's share of busy CPU beside a saturating transfer | ≤ 1 % | [The observer's cost](#the-observers-cost) |"), "{page}");
        let (page, _) = replace(&page, render("zz-new", "Later", "", &[], &at("2026-12-07", "abc")));
        let (page, old) = replace(&page, render("startup", "Start-up", "", &[], &at("2026-12-07", "abc")));
        assert!(old.is_none());
        let ids: Vec<String> = blocks(&page).into_iter().map(|b| b.id).collect();
        assert_eq!(ids, ["observer", "startup", "zz-new"], "listed ids in their order, others after");
        let replaced = render("observer", "The observer's cost", "", &[Row::new("x", "1 %")], &at("2026-12-08", "def"));
        let (page, old) = replace(&page, replaced);
        let old = old.expect("the old observer section");
        assert_eq!((old.date.as_str(), old.commit.as_str()), ("2026-12-07", "abc"));
        assert!(!page.contains("0.62 %"), "replaced: {page}");
        let ids: Vec<String> = blocks(&page).into_iter().map(|b| b.id).collect();
        assert_eq!(ids, ["observer", "startup", "zz-new"]);
    }

    #[test]
    fn a_missed_target_is_marked_and_unmeasured_targets_say_so() {
        let missed = vec![Row::new("cctrace", "1.4 %").judged(&OBSERVER_SHARE, 1.5)];
        let (page, _) = replace("", render("observer", "The observer's cost", "", &missed, &at("d", "c")));
        assert!(page.contains("≤ 1 %: **missed**"), "{page}");
        assert!(page.contains("| cctrace's process CPU at rest | ≤ 1 ms/s | not measured yet |"), "{page}");
    }

    #[test]
    fn the_replaced_rows_go_to_the_log_newest_first() {
        let first = render("observer", "The observer's cost", "", &rows(), &at("2026-12-07", "abc"));
        let second = render("observer", "The observer's cost", "", &[Row::new("x", "1 %")], &at("2026-12-08", "def"));
        let history = log("", &first);
        assert!(history.starts_with("# History"), "{history}");
        assert!(history.contains("## 2026-12-07, `abc`: The observer's cost"), "{history}");
        assert!(!history.contains("<!--"), "{history}");
        let history = log(&history, &second);
        let newer = history.find("2026-12-08").expect("logged");
        let older = history.find("2026-12-07, `abc`").expect("kept");
        assert!(newer < older, "newest first: {history}");
        assert_eq!(history.matches("# History").count(), 1);
    }

    #[test]
    fn a_listed_section_not_measured_yet_stands_under_its_title_in_its_place() {
        let page = assemble(&[]);
        let titles: Vec<&str> = page.lines().filter_map(|l| l.strip_prefix("## ")).skip(1).collect();
        let listed: Vec<&str> = ORDER.iter().map(|(_, t)| *t).collect();
        assert_eq!(titles, listed, "{page}");
        let (page, _) = replace(&page, render("startup", "Start-up with many sockets", "", &rows(), &at("d", "c")));
        assert_eq!(page.matches("## Start-up with many sockets").count(), 1, "{page}");
        let measured = page.find("<!-- section startup").expect("written");
        assert!(page.find("## The observer's cost").expect("placeholder") < measured, "{page}");
        assert!(measured < page.find("## Churn: short").expect("placeholder"), "{page}");
        assert_eq!(blocks(&page).len(), 1, "a placeholder is no section: {page}");
    }

    #[test]
    fn slugs_are_githubs() {
        assert_eq!(slug("The observer's cost"), "the-observers-cost");
        assert_eq!(slug("tcp_probe's windows, 2 CPUs"), "tcp_probes-windows-2-cpus");
    }
}
