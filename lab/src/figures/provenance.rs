//! Where a figure comes from: the date, the commit, the machine and what else loaded it.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// The variable a run sets to say what else the machine was doing (other engineers' builds, a
/// quiet machine): written beside the load average measured.
pub const NOTE_ENV: &str = "CCTRACE_FIGURES_NOTE";

/// One section's provenance, taken when it is written (the load from when it began).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    /// UTC, `YYYY-MM-DD`.
    pub date: String,
    /// The short commit, with `+` when the work tree had changes beyond the figures pages.
    pub commit: String,
    pub machine: String,
    /// The machine in a few words, for each row: "2-CPU VM".
    pub machine_short: String,
    pub load: String,
}

/// The machine's one-minute load average, read when a section begins and when it is written.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

impl Provenance {
    /// Now, for the repository holding `dir`, with the load average `load_at_start` the section
    /// began with.
    pub fn now(dir: &Path, load_at_start: Option<f64>) -> Self {
        Self {
            date: utc_date(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())),
            commit: commit(dir),
            machine: machine(),
            machine_short: machine_short(),
            load: load(load_at_start, load_average(), std::env::var(NOTE_ENV).ok()),
        }
    }
}

/// `YYYY-MM-DD` of a Unix time (the proleptic Gregorian calendar, UTC).
pub(crate) fn utc_date(unix_secs: u64) -> String {
    // Days since 1970-01-01 to a civil date (the algorithm of Howard Hinnant's `civil_from_days`).
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").current_dir(dir).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The short commit of `dir`'s repository, `+` when tracked files other than the figures pages
/// differ from it (the figure then measured code no commit holds).
fn commit(dir: &Path) -> String {
    let Some(head) = git(dir, &["rev-parse", "--short=10", "HEAD"]) else { return "unknown".into() };
    let pages = [":(top,exclude)docs/figures.md", ":(top,exclude)docs/history.md"];
    let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--", ":/"];
    status.extend(pages);
    match git(dir, &status) {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head}+"),
    }
}

/// CPUs and their model, memory, kernel, and whether it is a virtual machine.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let (vm, cpus) = (is_vm(&cpuinfo), cpus());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok())
        })
        .map_or(String::new(), |kb| format!(", {:.0} GiB", kb / 1_048_576.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or(String::new(), |r| format!(", Linux {}", r.trim()));
    format!("{cpus} × {model}{mem_gib}{kernel}{}", if vm { ", a VM" } else { "" })
}

fn is_vm(cpuinfo: &str) -> bool {
    cpuinfo.lines().any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"))
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

fn machine_short() -> String {
    let vm = is_vm(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default());
    let cpus = cpus();
    if vm {
        format!("{cpus}-CPU VM")
    } else {
        format!("{cpus} CPUs")
    }
}

/// "load 0.8-1.9" (the one-minute average when the section began and ended), then the note.
pub(crate) fn load(start: Option<f64>, end: Option<f64>, note: Option<String>) -> String {
    let avg = match (start, end) {
        (Some(a), Some(b)) if (a - b).abs() < 0.05 => format!("load {a:.1}"),
        (Some(a), Some(b)) => format!("load {:.1}-{:.1}", a.min(b), a.max(b)),
        (Some(a), None) | (None, Some(a)) => format!("load {a:.1}"),
        (None, None) => "load unknown".into(),
    };
    match note.filter(|n| !n.trim().is_empty()) {
        Some(n) => format!("{avg}; {}", n.trim()),
        None => avg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_times_become_utc_dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_796_601_599), "2026-12-06");
        assert_eq!(utc_date(1_796_601_600), "2026-12-07");
    }

    #[test]
    fn the_load_is_a_range_with_the_runs_note() {
        assert_eq!(load(Some(0.81), Some(1.94), None), "load 0.8-1.9");
        assert_eq!(load(Some(1.94), Some(0.81), Some(" builds beside ".into())), "load 0.8-1.9; builds beside");
        assert_eq!(load(Some(1.0), Some(1.02), Some(String::new())), "load 1.0");
        assert_eq!(load(None, None, None), "load unknown");
    }
}
