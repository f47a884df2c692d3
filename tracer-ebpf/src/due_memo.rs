//! Each CPU's memo of when sockets are next due a periodic sample, and a second of when their
//! owner is next worth checking.
//!
//! `tcp_probe` fires on every ACK, and between two periodic samples of a flow (a second apart
//! by default) every run only finds that none is due; a TCP socket's send call names its owner,
//! and but for a flow's first every run finds its owner already known. The memo settles that
//! without a helper call: a direct-mapped per-CPU array keyed by the socket's address, on jiffies (which the
//! verifier inlines as a load), before the socket's cookie is read (`skc_cookie` sits on a line
//! the TCP fast path does not touch), the clock read or the flow table hashed into. Helper
//! calls, not the work in them, were most of a run's cost: each is a call and a return through
//! the kernel's speculation mitigations.
//!
//! It only says "not due" when that holds. A slot holds the jiffy from which the socket's last
//! sample makes it due, rounded down: a flow's last sample only moves forward (sampled on
//! another CPU, it moves further: this CPU's memo is early, never late, and the flow table has
//! the last word). A socket freed and its memory reused for a new one within an interval is the
//! exception: the slot is cleared at destroy on the CPU that saw it, and on the others the new
//! socket's periodic samples start at most one interval late (its state changes are sampled at
//! once).

use aya_ebpf::{helpers::bpf_jiffies64, macros::map, maps::PerCpuArray};
use tracer_common::{DueMemo, DUE_MEMO_SLOTS};

use crate::flow_key::address_of;
use crate::maps::CONFIG;

/// When sockets are next due a periodic sample.
#[map]
pub(crate) static PERIODIC_DUE: PerCpuArray<DueMemo> = PerCpuArray::with_max_entries(DUE_MEMO_SLOTS, 0);
/// When a socket's owner is next checked on a send. A socket at a reused address on another
/// CPU gets its owner looked for after at most [`OWNER_RECHECK_NS`].
#[map]
pub(crate) static OWNER_CHECK_DUE: PerCpuArray<DueMemo> = PerCpuArray::with_max_entries(DUE_MEMO_SLOTS, 0);

pub(crate) const OWNER_RECHECK_NS: u64 = 1_000_000_000;

#[inline(always)]
fn slot(address: u64) -> u32 {
    // Sockets are slab objects of a few KB: the bits above the low ones tell them apart.
    ((address >> 6) as u32) & (DUE_MEMO_SLOTS - 1)
}

/// Whether this CPU's `memo` says socket `sk` is not due now.
#[inline(always)]
pub(crate) fn not_due(memo: &PerCpuArray<DueMemo>, sk: *const u8) -> bool {
    if sk.is_null() {
        return false;
    }
    not_due_key(memo, address_of(sk))
}

/// Whether this CPU's `memo` says the flow of `address` (a socket's address, or a number
/// spread over the same bits) is not due now.
#[inline(always)]
pub(crate) fn not_due_key(memo: &PerCpuArray<DueMemo>, address: u64) -> bool {
    if address == 0 || global!(CONFIG.jiffy_ns) == 0 {
        return false;
    }
    match memo.get_ptr(slot(address)) {
        // SAFETY: this CPU's slot of the map, valid for this program run; the helper has no
        // arguments or preconditions (the verifier inlines it as a load).
        Some(m) => unsafe { (*m).socket == address && bpf_jiffies64() < (*m).due_jiffies },
        None => false,
    }
}

/// Socket `sk` is next due `in_ns` from now, as far as `memo` goes.
#[inline(always)]
pub(crate) fn remember(memo: &PerCpuArray<DueMemo>, sk: *const u8, in_ns: u64) {
    remember_key(memo, address_of(sk), in_ns);
}

/// The flow of `address` is next due `in_ns` from now, as far as `memo` goes.
#[inline(always)]
pub(crate) fn remember_key(memo: &PerCpuArray<DueMemo>, address: u64, in_ns: u64) {
    let jiffy_ns = u64::from(global!(CONFIG.jiffy_ns));
    if jiffy_ns == 0 || in_ns == 0 {
        return;
    }
    // The current jiffy began up to one jiffy ago: rounding the whole jiffies left down keeps
    // the memo early.
    // SAFETY: a helper without arguments or preconditions (the verifier inlines it as a load).
    let due_jiffies = unsafe { bpf_jiffies64() } + in_ns / jiffy_ns;
    if let Some(m) = memo.get_ptr_mut(slot(address)) {
        // SAFETY: this CPU's slot, valid for this program run. A run nested in this one on the
        // same CPU may read the slot half written (this socket with the slot's previous time):
        // it then skips one `tcp_probe` at worst, and the flow's next ACK finds the slot whole.
        unsafe { *m = DueMemo { socket: address, due_jiffies } };
    }
}

/// Socket `sk` is gone: its memory may hold a new socket next.
#[inline(always)]
pub(crate) fn forget(sk: *const u8) {
    forget_key(address_of(sk));
}

/// The flow of `address` is gone.
#[inline(always)]
pub(crate) fn forget_key(address: u64) {
    for memo in [&PERIODIC_DUE, &OWNER_CHECK_DUE] {
        if let Some(m) = memo.get_ptr_mut(slot(address)) {
            // SAFETY: as in `remember`.
            unsafe {
                if (*m).socket == address {
                    *m = DueMemo::default();
                }
            }
        }
    }
}
