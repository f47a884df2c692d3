//! What tests share: wire records as the kernel writes them ([`wire`], for the integration
//! tests and benches too), and, for the crate's own unit tests, the skip rule, a readable writer
//! and `feed`, a deterministic host with five flows for the tests of every layer.

#[cfg(test)]
pub(crate) mod feed;
#[cfg(test)]
mod shared_buf;
pub mod wire;

#[cfg(test)]
pub(crate) use shared_buf::SharedBuf;

/// A test that needs something this machine lacks returns early with `why` on stderr; under
/// `CI=true` (where root, BTF and cgroup v2 are given) it fails instead (the one rule, in the
/// lab crate).
#[cfg(test)]
pub(crate) use cctrace_lab::skip::skip;
