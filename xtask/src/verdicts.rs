//! `cargo xtask verdicts`: each diagnosis test that asserts a flag, run several times in a row
//! (five by default, issue 46). A verdict that holds holds in every run: each run must pass,
//! and the time to flag each test prints (`time to flag: LABEL = S s`) goes with its spread into
//! the figures page's `verdicts` section (docs/figures.md, through `cctrace_lab::figures`, which
//! adds the date, the commit and the load). Not in the default suite: five runs of each take
//! about half an hour.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use cctrace_lab::figures::{Row, Section};

/// The test binary (of the tests package) and test name of each diagnosis test that asserts a
/// flag, with what it flags.
const CHECKS: &[(&str, &str, &str)] = &[
    ("diagnosis", "lossy_wan_flags_cubic_and_spares_bbr_and_thin_streams", "the demo's 2 % WAN"),
    (
        "diagnosis",
        "cubic_and_reno_flagged_at_0_05_0_1_and_1_pct_loss_and_bursty_loss",
        "30 and 80 ms at 0.05, 0.1, 1 % and bursty loss",
    ),
    ("diagnosis", "long_fat_paths_flag_cubic_within_20_s_and_name_bbr_s_send_buffer", "240 ms, 150 Mbit/s, 0.05 %"),
    ("policer", "policers_named_tight_bucket_flagged_up_to_its_rate_deep_bucket_not", "policers and 0.5 % loss"),
    (
        "buffers",
        "a_long_fat_path_held_by_its_send_buffer_is_named_fixed_live_and_undone_with_and_without_btf",
        "200 ms, 0.05 %",
    ),
    (
        "tunnel",
        "senders_through_wireguard_go_name_their_tunnel_and_the_fix_speeds_them_up_by_the_truths_factor",
        "through wireguard-go, 2 %",
    ),
    (
        "player",
        "a_stalled_hls_player_through_wireguard_go_is_flagged_and_the_live_fix_brings_it_to_real_time",
        "ffmpeg playing HLS through wireguard-go",
    ),
];

/// What a test prints for each flow it measured the time to flag of.
const TIME_TO_FLAG: &str = "time to flag: ";

/// One run of one test.
struct Run {
    passed: bool,
    /// (flow, seconds) as the test printed them.
    times: Vec<(String, f64)>,
    took_s: f64,
}

pub(crate) fn run(workspace: &Path, runs: usize, only: Option<&str>, page: bool) -> Result<()> {
    let checks: Vec<_> =
        CHECKS.iter().filter(|(bin, name, _)| only.is_none_or(|o| bin.contains(o) || name.contains(o))).collect();
    if checks.is_empty() {
        bail!("no check matches {only:?}");
    }
    super::run(super::cargo(&["build", "-p", "tracer"]).current_dir(workspace))?;
    let mut rows = Vec::new();
    for (bin, name, what) in checks {
        super::run(super::cargo(&["test", "-p", "cctrace-tests", "--test", bin, "--no-run"]).current_dir(workspace))?;
        let mut results = Vec::new();
        for i in 1..=runs {
            let r = run_once(workspace, bin, name)?;
            super::say(&format!(
                "{bin}::{name} run {i} of {runs}: {} in {:.0} s, time to flag {:?}",
                if r.passed { "passed" } else { "FAILED" },
                r.took_s,
                r.times
            ));
            results.push(r);
        }
        rows.push(((*bin, *name, *what), results));
    }
    let section = section(&rows, runs);
    if page {
        let path = page_path(workspace);
        section.write_to(&path)?;
        super::say(&format!("wrote the verdicts section of {}", path.display()));
    } else {
        for r in section.rows() {
            println!("{}: {} ({})", r.figure, r.value, r.method);
        }
    }
    let failed: Vec<_> = rows
        .iter()
        .filter(|(_, rs)| rs.iter().any(|r| !r.passed))
        .map(|((bin, name, _), _)| format!("{bin}::{name}"))
        .collect();
    if !failed.is_empty() {
        bail!("a verdict did not hold in every run: {failed:?}");
    }
    Ok(())
}

/// One run of `bin`'s test `name`, its output read for the times to flag.
fn run_once(workspace: &Path, bin: &str, name: &str) -> Result<Run> {
    let start = Instant::now();
    let mut child = super::cargo(&["test", "-p", "cctrace-tests", "--test", bin, "--", "--exact", name, "--nocapture"])
        .current_dir(workspace)
        .env("PATH", super::tool_path())
        .env("CI", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting cargo test")?;
    let mut times = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            if let Some(t) = time_to_flag(&line) {
                times.push(t);
            }
        }
    }
    let passed = child.wait().context("waiting for cargo test")?.success();
    Ok(Run { passed, times, took_s: start.elapsed().as_secs_f64() })
}

/// `time to flag: LABEL = 6.2 s` as (LABEL, 6.2).
fn time_to_flag(line: &str) -> Option<(String, f64)> {
    let rest = line.trim().strip_prefix(TIME_TO_FLAG)?;
    let (label, secs) = rest.rsplit_once(" = ")?;
    Some((label.to_string(), secs.strip_suffix(" s")?.parse().ok()?))
}

type Checked<'a> = ((&'a str, &'a str, &'a str), Vec<Run>);

/// The figures page's section: a row per flow each test measured, its time to flag over the
/// runs (min / median / max, then each run) and the runs the test passed.
fn section(rows: &[Checked<'_>], runs: usize) -> Section {
    let mut section = Section::new("verdicts", "Verdicts that hold run after run").about(&format!(
        "Each diagnosis test that asserts a flag, run {runs} times in a row by `cargo xtask verdicts`: per flow, \
         the time from its start to its first flag (min / median / max over the runs, then each run), and \
         the runs the test passed."
    ));
    for ((bin, name, what), results) in rows {
        let passed = results.iter().filter(|r| r.passed).count();
        let how = format!("`{bin}::{name}`, {passed} of {runs} runs passed");
        let mut labels: Vec<&str> = results.iter().flat_map(|r| r.times.iter().map(|(l, _)| l.as_str())).collect();
        labels.sort_unstable();
        labels.dedup();
        if labels.is_empty() {
            section.row(Row::new(format!("{what}: no flow flagged"), "none").how(how.clone()));
        }
        for label in labels {
            let each: Vec<f64> =
                results.iter().filter_map(|r| r.times.iter().find(|(l, _)| l == label).map(|(_, s)| *s)).collect();
            let mut sorted = each.clone();
            sorted.sort_by(f64::total_cmp);
            let (min, median, max) = (sorted[0], sorted[sorted.len() / 2], sorted[sorted.len() - 1]);
            let shown: Vec<String> = each.iter().map(|s| format!("{s:.1}")).collect();
            section.row(
                Row::new(
                    format!("{what}: {label}, time to flag"),
                    format!("{min:.1} / {median:.1} / {max:.1} s ({})", shown.join(", ")),
                )
                .how(how.clone()),
            );
        }
    }
    section
}

/// The figures page.
fn page_path(workspace: &Path) -> PathBuf {
    workspace.join("docs/figures.md")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_times_the_tests_print() {
        assert_eq!(
            time_to_flag("time to flag: cubic on 30 ms 0.05% = 6.2 s"),
            Some(("cubic on 30 ms 0.05%".into(), 6.2))
        );
        assert_eq!(time_to_flag("flagged after 6.2 s"), None);
    }

    #[test]
    fn a_row_per_flow_with_its_spread() {
        let runs = vec![
            Run { passed: true, times: vec![("a".into(), 5.0), ("b".into(), 9.0)], took_s: 1.0 },
            Run { passed: true, times: vec![("a".into(), 7.0), ("b".into(), 8.0)], took_s: 1.0 },
            Run { passed: false, times: vec![("a".into(), 6.0)], took_s: 1.0 },
        ];
        let section = section(&[(("diagnosis", "t", "what"), runs)], 3);
        let rows: Vec<(&str, &str, &str)> =
            section.rows().iter().map(|r| (r.figure.as_str(), r.value.as_str(), r.method.as_str())).collect();
        assert_eq!(
            rows,
            [
                ("what: a, time to flag", "5.0 / 6.0 / 7.0 s (5.0, 7.0, 6.0)", "`diagnosis::t`, 2 of 3 runs passed"),
                ("what: b, time to flag", "8.0 / 9.0 / 9.0 s (9.0, 8.0)", "`diagnosis::t`, 2 of 3 runs passed"),
            ]
        );
    }
}
