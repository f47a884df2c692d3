//! cctrace: live TCP congestion-control tracing with eBPF.
//!
//! Layers: [`analysis`] (the pure core: samples, flow table, diagnosis), [`source`] (where
//! samples come from), [`kernel`] (the live eBPF source), [`output`] and [`tui`] (front ends).

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
