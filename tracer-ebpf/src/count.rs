//! Adding to per-CPU counters that nested programs share.
//!
//! Programs do nest on one CPU: `tcp_probe` and the UDP ingress program run in softirq, which
//! can interrupt a send or a state change (or the UDP egress program) between its load and its
//! store. A plain `+= 1` then loses the inner program's add, and counts that must balance
//! (samples emitted against samples read) come out short: a test saw 18,503 samples read of
//! 18,500 emitted.

use core::intrinsics::{atomic_xadd, AtomicOrdering};

/// Add `n` to the `u64` at `slot` in one instruction (BPF `lock add`), so a program that
/// interrupts this one on the same CPU cannot lose its own add.
#[inline(always)]
pub(crate) fn add(slot: *mut u64, n: u64) {
    // SAFETY: `slot` points into a map value that stays valid for this program run (callers
    // pass pointers they got from a map lookup); the add is atomic, so concurrent adds from
    // nested runs or other CPUs are all kept.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, n) };
}
