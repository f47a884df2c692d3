//! Privilege check before anything is loaded: name the capabilities that are missing.

use anyhow::{Context, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

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
    let status = procfs::process::Process::myself().and_then(|p| p.status()).context("reading /proc/self/status")?;
    let missing = missing_capabilities(status.capeff);
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
}
