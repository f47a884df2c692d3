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

/// CPU time the calling thread has used, system time included (0 where the clock is unreadable).
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CLOCK_REALTIME and CLOCK_MONOTONIC read together, (unix ns, monotonic ns): the start of a
/// run, which its JSON times and its recording's header both derive from.
pub fn start_instants() -> (u64, u64) {
    let mono = clock_ns(libc::CLOCK_MONOTONIC);
    let real = clock_ns(libc::CLOCK_REALTIME);
    (real, mono)
}

/// The monotonic-to-realtime mapping as it is now.
pub fn wall_clock_now() -> WallClock {
    let (real, mono) = start_instants();
    WallClock::from_start(real, mono)
}
