//! Kernel timestamps are CLOCK_MONOTONIC; people read wall-clock time. This maps one to the other.

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the valid timespec we pass.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Monotonic-to-realtime offset, captured once.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    realtime_minus_monotonic_ns: i128,
}

impl WallClock {
    pub fn now() -> Self {
        let mono = clock_ns(libc::CLOCK_MONOTONIC);
        let real = clock_ns(libc::CLOCK_REALTIME);
        Self { realtime_minus_monotonic_ns: i128::from(real) - i128::from(mono) }
    }

    /// A fixed mapping, for deterministic tests and replays.
    pub fn fixed(realtime_minus_monotonic_ns: i128) -> Self {
        Self { realtime_minus_monotonic_ns }
    }

    pub fn monotonic_now_ns(&self) -> u64 {
        clock_ns(libc::CLOCK_MONOTONIC)
    }

    /// Unix time in seconds (millisecond precision) of a monotonic timestamp.
    pub fn unix_secs(&self, monotonic_ns: u64) -> f64 {
        let ns = i128::from(monotonic_ns) + self.realtime_minus_monotonic_ns;
        ((ns / 1_000_000) as f64) / 1000.0
    }
}
