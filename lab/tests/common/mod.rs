//! Shared helpers for the lab's integration tests.

#![allow(dead_code)] // each test binary uses a different subset

use cctrace_lab::serial::Serial;

/// Returns the lab lock, or `None` (after saying why) when the process may not create
/// namespaces, in which case the test returns early; under `CI=true` that is a failure. Tests
/// that create namespaces and push traffic run one at a time (on two cores, parallel bulk flows
/// would distort each other's timing): the guard is the machine-wide test lock.
pub(crate) fn lab() -> Option<Serial> {
    if let Err(e) = cctrace_lab::check_privileges() {
        let detail = match e {
            cctrace_lab::LabError::NotPrivileged(d) => d,
            other => other.to_string(),
        };
        cctrace_lab::skip::skip(&format!("needs root (CAP_NET_ADMIN) to create network namespaces ({detail})"));
        return None;
    }
    Some(cctrace_lab::serial::serial().expect("the machine-wide test lock"))
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
