//! The figures page (`docs/figures.md`): every figure of cctrace's cost, speed and memory the
//! project publishes, each written by the run that measured it. A command that measures builds
//! a [`Section`] of [`Row`]s (the figure, what was measured, its [`Target`] when it has one, how
//! it was measured) and [`Section::write`]s it: the section replaces the one of the same id in
//! the page, with the date, the commit and the machine and its load added to every row, and the
//! rows it replaced, when measured on another day or commit, go to the history (`docs/history.md`,
//! a log). The page is written only when [`PAGE_ENV`] names it (`cargo xtask bench` does), so a
//! quick run by hand prints its rows and changes nothing.
//!
//! ```no_run
//! use cctrace_lab::figures::{targets, Row, Section};
//!
//! # fn main() -> anyhow::Result<()> {
//! let mut section = Section::new("observer", "The observer's cost").about("What each row measures, and how.");
//! let (mean, half_width) = (0.62, 0.10);
//! section.row(
//!     Row::new("cctrace, iperf3, 0 idle flows", format!("{mean:.2} % ± {half_width:.2}"))
//!         .how("4 rounds")
//!         .judged(&targets::OBSERVER_SHARE, mean + half_width),
//! );
//! section.write()?;
//! # Ok(())
//! # }
//! ```

mod page;
mod provenance;
pub mod targets;

use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use page::ORDER;
pub use provenance::{load_average, Provenance, NOTE_ENV};
pub use targets::{Bound, Target};

/// The variable naming the page to write (`cargo xtask bench` sets it to `docs/figures.md`).
pub const PAGE_ENV: &str = "CCTRACE_FIGURES_PAGE";
/// The history's file name, beside the page.
const HISTORY: &str = "history.md";

/// Whether a row's figure met its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
}

/// One figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What it is: "cctrace's share of busy CPU, iperf3, 10,000 idle flows".
    pub figure: String,
    /// What was measured, with its unit and interval: "0.62 % ± 0.10 (n=4)".
    pub value: String,
    /// How, where the section's text does not say it all: "4 interleaved rounds of 4 s".
    pub method: String,
    pub target: Option<(&'static Target, Verdict)>,
}

impl Row {
    pub fn new(figure: impl Into<String>, value: impl Into<String>) -> Self {
        Self { figure: figure.into(), value: value.into(), method: String::new(), target: None }
    }

    pub fn how(mut self, method: impl Into<String>) -> Self {
        self.method = method.into();
        self
    }

    /// Judged against `target` by `worst`, in the target's unit: the figure itself, or for a
    /// mean with an interval the interval's end on the target's side.
    pub fn judged(mut self, target: &'static Target, worst: f64) -> Self {
        let verdict = if target.met_by(worst) { Verdict::Met } else { Verdict::Missed };
        self.target = Some((target, verdict));
        self
    }
}

/// One command's figures: a section of the page, replaced whole each time the command runs.
#[derive(Debug)]
pub struct Section {
    /// The section's id in the page (lower case, no spaces): "observer", "suite".
    id: String,
    title: String,
    about: String,
    rows: Vec<Row>,
    load_at_start: Option<f64>,
}

impl Section {
    /// A section begun now (the load average is taken now and when it is written).
    pub fn new(id: &str, title: &str) -> Self {
        assert!(
            !id.is_empty() && id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "a section id is lower case letters, digits and hyphens: {id:?}"
        );
        Self {
            id: id.into(),
            title: title.into(),
            about: String::new(),
            rows: Vec::new(),
            load_at_start: load_average(),
        }
    }

    /// What the section measures and how: a paragraph above its table.
    pub fn about(mut self, text: &str) -> Self {
        self.about = text.into();
        self
    }

    pub fn row(&mut self, row: Row) -> &mut Self {
        self.rows.push(row);
        self
    }

    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Into the page [`PAGE_ENV`] names, if it names one: the page where it is written, or
    /// `None` (then the section is only printed).
    pub fn write(&self) -> Result<Option<PathBuf>> {
        match std::env::var_os(PAGE_ENV) {
            Some(page) => {
                let page = PathBuf::from(page);
                self.write_to(&page)?;
                println!("figures: section {} written to {}", self.id, page.display());
                Ok(Some(page))
            }
            None => {
                println!(
                    "figures: section {} not written ({PAGE_ENV} names no page; cargo xtask bench sets it)",
                    self.id
                );
                Ok(None)
            }
        }
    }

    /// Into `page`, whose history is `history.md` beside it.
    pub fn write_to(&self, page: &Path) -> Result<()> {
        if let Some(listed) = page::listed_title(&self.id).filter(|t| *t != self.title) {
            // Pages link a section by its title's anchor, placeholder or not: one title per id.
            anyhow::bail!("section {} is titled {listed:?} in the page's order, not {:?}", self.id, self.title);
        }
        let dir = page.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        ensure_page(page)?;
        let provenance = Provenance::now(dir, self.load_at_start);
        let block = page::render(&self.id, &self.title, &self.about, &self.rows, &provenance);
        let mut file = std::fs::File::options()
            .read(true)
            .write(true)
            .open(page)
            .with_context(|| format!("opening {}", page.display()))?;
        // Two writers at once (a bench and the suite) would each lose the other's section.
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(std::io::Error::from)
            .with_context(|| format!("locking {}", page.display()))?;
        let mut before = String::new();
        file.read_to_string(&mut before).with_context(|| format!("reading {}", page.display()))?;
        let (after, replaced) = page::replace(&before, block);
        if let Some(old) = replaced
            .filter(|o| (o.date.as_str(), o.commit.as_str()) != (provenance.date.as_str(), provenance.commit.as_str()))
        {
            let history = dir.join(HISTORY);
            let logged = std::fs::read_to_string(&history).unwrap_or_default();
            std::fs::write(&history, page::log(&logged, &old))
                .with_context(|| format!("writing {}", history.display()))?;
        }
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(after.as_bytes()).with_context(|| format!("writing {}", page.display()))
    }
}

/// `page` and its history as they are, or with their heads alone where they do not exist yet
/// (a page that links its history needs both).
pub fn ensure_page(page: &Path) -> Result<()> {
    let dir = page.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    for (path, empty) in
        [(page.to_path_buf(), page::assemble(&[])), (dir.join(HISTORY), page::empty_history().to_string())]
    {
        // Created only where absent (O_EXCL): a second writer starting at once finds it made.
        match std::fs::File::options().write(true).create_new(true).open(&path) {
            Ok(mut file) => file.write_all(empty.as_bytes()).with_context(|| format!("writing {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
        }
    }
    Ok(())
}

/// A number as the pages write it: thousands grouped ("10,000"), no trailing zeros ("0.2").
pub fn number(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    let (int, frac) = text.split_once('.').map_or((text, None), |(i, f)| (i, Some(f)));
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_and_trimmed() {
        assert_eq!(number(1.0), "1");
        assert_eq!(number(0.2), "0.2");
        assert_eq!(number(1080.0), "1,080");
        assert_eq!(number(100_000.0), "100,000");
        assert_eq!(number(-1234.5), "-1,234.5");
    }

    #[test]
    fn a_section_written_twice_logs_only_what_another_day_or_commit_measured() {
        let dir = std::env::temp_dir().join(format!("cct-figures-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let page = dir.join("figures.md");
        let mut s = Section::new("observer", "The observer's cost");
        s.row(Row::new("cctrace", "0.5 %").judged(&targets::OBSERVER_SHARE, 0.6));
        s.write_to(&page).expect("written");
        s.write_to(&page).expect("written again");
        let text = std::fs::read_to_string(&page).expect("page");
        assert_eq!(text.matches("| cctrace | 0.5 % | ≤ 1 %: met |").count(), 1, "{text}");
        let logged = std::fs::read_to_string(dir.join(HISTORY)).expect("history");
        assert_eq!(logged, page::empty_history(), "same day and commit: nothing to log");
        // As if measured on an earlier day and commit: the next write logs it.
        let earlier: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with("<!-- section observer ") {
                    "<!-- section observer 2000-01-01 x -->".into()
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&page, earlier.join("\n")).expect("rewrite");
        let mut again = Section::new("observer", "The observer's cost");
        again.row(Row::new("cctrace", "0.4 %"));
        again.write_to(&page).expect("written");
        let history = std::fs::read_to_string(dir.join(HISTORY)).expect("history");
        assert!(
            history.contains("## 2000-01-01, `x`: The observer's cost") && history.contains("| cctrace | 0.5 %"),
            "{history}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
