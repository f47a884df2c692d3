//! Shared helpers for the lab's integration tests.

#![allow(dead_code)] // each test binary uses a different subset

use std::sync::{Mutex, MutexGuard};

/// Tests that create namespaces and push traffic run one at a time: on two
/// cores, parallel bulk flows would distort each other's timing.
static LAB_LOCK: Mutex<()> = Mutex::new(());

/// Whether this is a CI run (`CI=true`), where every test must run.
pub(crate) fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Returns the lab lock, or `None` (after saying why) when the process may
/// not create namespaces, in which case the test returns early. In CI
/// (`CI=true`) that is a failure: a skipped test would pass without checking
/// anything.
pub(crate) fn lab() -> Option<MutexGuard<'static, ()>> {
    if let Err(e) = cctrace_lab::check_privileges() {
        let detail = match e {
            cctrace_lab::LabError::NotPrivileged(d) => d,
            other => other.to_string(),
        };
        let why = format!("needs root (CAP_NET_ADMIN) to create network namespaces ({detail})");
        assert!(!in_ci(), "CI must run this test, but: {why}");
        println!("skipped: {why}");
        return None;
    }
    Some(LAB_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
}

/// Half-width of the two-sided binomial interval at z standard deviations.
pub(crate) fn binomial_halfwidth(n: u64, p: f64, z: f64) -> f64 {
    z * (n as f64 * p * (1.0 - p)).sqrt()
}

/// z for a two-sided 99 % interval.
pub(crate) const Z99: f64 = 2.576;

pub(crate) fn mbps(bps: f64) -> f64 {
    bps / 1e6
}
