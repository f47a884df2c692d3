//! The one rule for a test that cannot run on this machine: it returns early and says why, and
//! under `CI=true` (where root, BTF and every set-up package are given) it fails instead, so a
//! skip can never pass for a check that did not run.

use std::io::Write as _;

/// The variable naming a file where each skip is also written, one line per skip: the suite
/// (`cargo xtask test`) counts those tests as skipped, not passed, though they returned early.
pub const SKIP_LOG_ENV: &str = "CCTRACE_SKIP_LOG";

/// Whether this is a CI run (`CI=true`), where every test must run.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Say that the running test skips, and why; under CI, fail it instead. The caller returns
/// right after.
pub fn skip(why: &str) {
    assert!(!in_ci(), "CI must run this test, but: {why}");
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    eprintln!("skipped: {why}");
    if let Some(log) = std::env::var_os(SKIP_LOG_ENV) {
        let line = format!("{test}: {why}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("could not record the skip in {}: {e}", log.to_string_lossy());
        }
    }
}

/// What a test that loads eBPF programs and creates namespaces lacks here, if anything: root and
/// the kernel's BTF.
pub fn missing_root_or_btf() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN) to load eBPF and create namespaces".into());
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("needs kernel BTF at /sys/kernel/btf/vmlinux".into());
    }
    None
}
