//! cctrace: live TCP congestion-control tracing with eBPF.
//!
//! Layers, each usable alone: [`event`] (decoded samples), [`source`] (where samples come from),
//! [`model`] (the flow table, pure), [`kernel`] (the live eBPF source), [`output`] (presentation).

pub mod analysis;
pub mod clock;
pub mod demo;
pub mod diagnosis;
pub mod event;
pub mod host;
pub mod kernel;
pub mod model;
pub mod output;
pub mod signals;
pub mod source;
pub mod tui;
