//! What the crate's own unit tests share.

/// A test that needs something this machine lacks returns early with `why` on stderr; under
/// `CI=true` (where root, BTF and cgroup v2 are given) it fails instead, so a skip can never
/// pass for a check that did not run.
pub(crate) fn skip(why: &str) {
    assert!(!std::env::var("CI").is_ok_and(|v| v == "true"), "CI must run this test, but: {why}");
    eprintln!("skipped: {why}");
}
