//! Reading the host's clocks: the side of time the pure core ([`crate::analysis::time`]) leaves
//! to its callers.

use crate::analysis::time::WallClock;

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the valid timespec we pass.
    unsafe { libc::clock_gettime(id, &mut ts) };
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(tracer_common::NS_PER_SEC)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// CLOCK_MONOTONIC now: the clock kernel samples carry.
pub fn monotonic_now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The monotonic-to-realtime mapping as it is now.
pub fn wall_clock_now() -> WallClock {
    let mono = clock_ns(libc::CLOCK_MONOTONIC);
    let real = clock_ns(libc::CLOCK_REALTIME);
    WallClock::fixed(i128::from(real) - i128::from(mono))
}
