//! The matrix's table: a row per kernel and hook mode, what attached, what was disabled and why,
//! the checks passed, and each failure named below it.

use std::fmt::Write as _;

use anyhow::{bail, Result};

/// What one guest showed: per hook mode, the checks and what start-up said about the hooks.
pub(crate) struct GuestResult {
    pub(super) label: String,
    pub(super) release: String,
    pub(super) btf: String,
    pub(super) modes: Vec<ModeResult>,
    /// Why the guest could not be checked at all.
    pub(super) failure: Option<String>,
    /// How long each stage of the guest took (`boot 9 s, auto 31 s, ...`).
    pub(super) stages: String,
}

pub(super) struct ModeResult {
    pub(super) mode: String,
    pub(super) attached: String,
    pub(super) disabled: Vec<String>,
    pub(super) checks: Vec<(String, Result<(), String>)>,
}

/// Print the matrix's table and notes; an error when a check failed.
pub(super) fn report(results: &[GuestResult], notes: &[String]) -> Result<()> {
    let (table, failed) = render(results);
    println!("{table}");
    for n in notes {
        println!("note: {n}");
    }
    if failed {
        bail!("the kernel matrix has failing checks (see the table above)");
    }
    Ok(())
}

/// The table, and whether any check failed.
pub(crate) fn render(results: &[GuestResult]) -> (String, bool) {
    let mut out = String::new();
    let mut failed = false;
    let _ = writeln!(out, "| kernel | BTF | hooks | attached | disabled (why) | checks passed |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    for r in results {
        if let Some(why) = &r.failure {
            failed = true;
            let _ = writeln!(out, "| {} | ? | - | - | - | FAILED: {} |", r.label, why);
            continue;
        }
        for m in &r.modes {
            let passed = m.checks.iter().filter(|(_, c)| c.is_ok()).count();
            for (name, c) in &m.checks {
                if let Err(why) = c {
                    failed = true;
                    failures.push(format!("{} {}: {name}: {why}", r.release, m.mode));
                }
            }
            let disabled = if m.disabled.is_empty() { "none".to_string() } else { m.disabled.join("; ") };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {passed}/{} |",
                r.release,
                r.btf,
                m.mode,
                m.attached,
                disabled,
                m.checks.len()
            );
        }
    }
    for f in failures {
        let _ = writeln!(out, "FAILED {f}");
    }
    (out, failed)
}
