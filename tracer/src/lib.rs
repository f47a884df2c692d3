//! cctrace: live TCP congestion-control tracing with eBPF.
//!
//! The layers, bottom up (`docs/architecture.md`; `tests/layers.rs` holds every import to them):
//! [`analysis`], the pure core; the pipeline ([`source`], [`pipeline`], [`side_job`]); host
//! facts ([`host`], [`cgroups`]); the live source ([`kernel`], [`live_filter`]); [`fix`];
//! [`recording`]; the front ends ([`output`], [`metrics`], [`tui`]); [`export`]; and the
//! commands ([`cli`], [`app`]).

pub mod analysis;
pub mod app;
pub mod cgroups;
pub mod cli;
pub mod clock;
#[cfg(feature = "demo")]
pub mod demo;
pub mod export;
pub mod fix;
pub mod host;
pub mod kernel;
pub mod live_filter;
pub mod metrics;
pub mod output;
pub mod pipeline;
pub mod recording;
pub mod side_job;
pub mod signals;
pub mod source;
#[cfg(test)]
mod test_support;
pub mod tui;
