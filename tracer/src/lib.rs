//! cctrace: live TCP congestion-control tracing with eBPF.
//!
//! The layers, bottom up (`docs/architecture.md`; `tests/layers.rs` holds every import to them):
//! [`analysis`], the pure core; the pipeline ([`source`], [`pipeline`], [`side_job`]); host
//! facts ([`host`], [`cgroups`]); the live source ([`kernel`]); [`fix`];
//! [`recording`]; the front ends ([`frontend`], [`metrics`], [`tui`]); [`export`]; and the
//! commands ([`cli`], [`app`]).

pub mod analysis;
pub mod app;
pub mod cgroups;
pub mod cli;
pub mod clock;
#[cfg(feature = "demo")]
pub mod demo_lab;
pub mod export;
pub mod fix;
pub mod frontend;
pub mod host;
pub mod kernel;
pub mod metrics;
pub mod pipeline;
pub mod recording;
pub mod side_job;
pub mod signals;
pub mod source;
/// Fixtures for tests and benches (hidden: no part of the tracer's interface).
#[doc(hidden)]
pub mod test_support;
pub mod tui;
