//! Kernel timestamps are CLOCK_MONOTONIC; people read wall-clock time. [`WallClock`] maps one
//! to the other with an offset captured once and handed in: read from the host's clocks by an
//! adapter above the core live, from a recording's header on replay, fixed in tests.

use tracer_common::NS_PER_SEC;

/// Monotonic-to-realtime offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallClock {
    realtime_minus_monotonic_ns: i128,
}

impl WallClock {
    pub fn fixed(realtime_minus_monotonic_ns: i128) -> Self {
        Self { realtime_minus_monotonic_ns }
    }

    /// The mapping given by a wall-clock and a monotonic reading of the same instant (a
    /// recording's header keeps both).
    pub fn from_start(unix_ns: u64, monotonic_ns: u64) -> Self {
        Self::fixed(i128::from(unix_ns) - i128::from(monotonic_ns))
    }

    /// Unix time in seconds (millisecond precision) of a monotonic timestamp.
    pub fn unix_secs(&self, monotonic_ns: u64) -> f64 {
        let ns = i128::from(monotonic_ns) + self.realtime_minus_monotonic_ns;
        let ms_per_ns = i128::from(NS_PER_SEC / 1000);
        ((ns / ms_per_ns) as f64) / 1000.0
    }
}
