//! Privilege check before anything is loaded: name the capabilities that are missing.

use anyhow::{Context, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Parse the `CapEff:` line of /proc/self/status.
pub fn effective_caps(status: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Capabilities cctrace needs and does not have, by name. Empty when it may proceed.
pub fn missing_capabilities(cap_eff: u64) -> Vec<&'static str> {
    let has = |cap: u32| cap_eff & (1u64 << cap) != 0;
    // CAP_SYS_ADMIN covers both on kernels before 5.8 and still implies them after.
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    let mut missing = Vec::new();
    if !has(CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    missing
}

/// Fails with one line naming what is missing.
pub fn check() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let caps = effective_caps(&status).unwrap_or(0);
    let missing = missing_capabilities(caps);
    if missing.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "cctrace needs root or the capabilities CAP_BPF and CAP_PERFMON to load eBPF programs; missing: {} (try: sudo cctrace)",
        missing.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_has_everything() {
        assert!(missing_capabilities(0x000001ffffffffff).is_empty());
    }

    #[test]
    fn names_what_is_missing() {
        assert_eq!(missing_capabilities(0), vec!["CAP_BPF", "CAP_PERFMON"]);
        assert_eq!(missing_capabilities(1 << CAP_BPF), vec!["CAP_PERFMON"]);
        assert!(missing_capabilities((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_empty());
    }

    #[test]
    fn parses_status() {
        let s = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_caps(s), Some(0x1ffffffffff));
    }
}
