//! The mode without BTF: five classic tracepoints whose programs read nothing of the kernel but
//! their own record, and hand it over whole ([`TraceRecord`]). Userspace reads the record's
//! fields at the offsets its tracefs `format` file gives, and asks sock_diag for the socket's
//! state; no socket is dereferenced here, so no kernel struct layout is needed.
//!
//! What is done here is only what keeps the ring small: `tcp_probe` (every segment) and
//! `tcp_retransmit_skb` (every retransmission of a loss burst) hand over one record per flow and
//! sample interval, settled first on this CPU's memo without a helper call (see `due_memo`),
//! then on a table shared by the CPUs; `inet_sock_set_state` only for TCP and not for
//! listeners. The key that spaces a flow's records is the record's `skaddr`, else its
//! `sock_cookie`, else its ports (configured per hook from tracefs).

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel_buf},
    macros::{map, tracepoint},
    maps::LruHashMap,
    programs::TracePointContext,
    EbpfContext as _,
};
use tracer_common::{
    counter, record_kind, tcp_state, HookId, RecordHeader, TraceKeys, TraceRecord, ABSENT, IPPROTO_TCP,
    TRACE_RECORD_BYTES, TRACE_RECORD_SIZE, WIRE_VERSION,
};

use crate::due_memo::{self, PERIODIC_DUE};
use crate::maps::{bump, bump_roughly, enabled, CLASSIC, CONFIG, EVENTS};
use crate::observe::wakeup_flag;
use crate::read::classic_u32;

/// Filled in by userspace from tracefs `format` files before load.
#[no_mangle]
pub(crate) static TRACE_KEYS: TraceKeys = TraceKeys::unresolved();

/// When each flow's next record is due, by hook and key (a flow's `tcp_probe` and
/// retransmissions are spaced apart each on its own).
#[map]
static TRACE_DUE: LruHashMap<u64, u64> = LruHashMap::with_max_entries(65_536, 0);

#[tracepoint(category = "tcp", name = "tcp_probe")]
pub fn cct_nb_probe(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::TcpProbe) {
        return 0;
    }
    bump_roughly(counter::PROBE_RUNS);
    spaced(&ctx, HookId::TcpProbe)
}

#[tracepoint(category = "tcp", name = "tcp_retransmit_skb")]
pub fn cct_nb_retrans(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::Retransmit) {
        return 0;
    }
    spaced(&ctx, HookId::Retransmit)
}

#[tracepoint(category = "tcp", name = "tcp_cong_state_set")]
pub fn cct_nb_cong(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::CongState) {
        return 0;
    }
    hand_over(&ctx, HookId::CongState);
    0
}

#[tracepoint(category = "sock", name = "inet_sock_set_state")]
pub fn cct_nb_setstate(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::SetState) {
        return 0;
    }
    let protocol = classic_u32(&ctx, global!(CLASSIC.set_state_protocol)) as u16;
    let old = classic_u32(&ctx, global!(CLASSIC.set_state_oldstate)) as u8;
    let new = classic_u32(&ctx, global!(CLASSIC.set_state_newstate)) as u8;
    if protocol != IPPROTO_TCP || old == tcp_state::LISTEN || new == tcp_state::LISTEN {
        return 0;
    }
    // connect() moves the socket to SYN_SENT in the calling process: its owner.
    hand_over_with_owner(&ctx, HookId::SetState, new == tcp_state::SYN_SENT);
    0
}

#[tracepoint(category = "tcp", name = "tcp_destroy_sock")]
pub fn cct_nb_destroy(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::Destroy) {
        return 0;
    }
    let key = flow_key(&ctx, HookId::Destroy);
    // The socket's memory may hold a new socket next: its periodic records start afresh.
    due_memo::forget_key(key);
    let _ = TRACE_DUE.remove(due_key(key, HookId::TcpProbe));
    let _ = TRACE_DUE.remove(due_key(key, HookId::Retransmit));
    hand_over(&ctx, HookId::Destroy);
    0
}

/// Hand the record over if this flow's next one is due, at most one per sample interval.
#[inline(always)]
fn spaced(ctx: &TracePointContext, hook: HookId) -> u32 {
    let key = flow_key(ctx, hook);
    let memo_key = memo_key(key, hook);
    if hook == HookId::TcpProbe && due_memo::not_due_key(&PERIODIC_DUE, memo_key) {
        return 0;
    }
    let interval = global!(CONFIG.sample_interval_ns);
    // SAFETY: a helper without arguments or preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let due_key = due_key(key, hook);
    if let Some(due) = TRACE_DUE.get_ptr(due_key) {
        // SAFETY: a value of the map, valid for this program run.
        let due = unsafe { *due };
        if now < due {
            if hook == HookId::TcpProbe {
                due_memo::remember_key(&PERIODIC_DUE, memo_key, due - now);
            }
            return 0;
        }
    }
    if TRACE_DUE.insert(due_key, now + interval, 0).is_err() {
        bump(counter::FLOW_MAP_FULL);
    }
    if hook == HookId::TcpProbe {
        due_memo::remember_key(&PERIODIC_DUE, memo_key, interval);
    }
    hand_over(ctx, hook);
    0
}

/// What tells this record's flow apart: its socket's address, else its cookie, else its ports.
#[inline(always)]
fn flow_key(ctx: &TracePointContext, hook: HookId) -> u64 {
    let i = hook.index();
    for off in [global!(CLASSIC.skaddr[i]), global!(TRACE_KEYS.cookie[i])] {
        if off != ABSENT {
            // SAFETY: reads the tracepoint record at an offset taken from its format file.
            return unsafe { ctx.read_at::<u64>(off as usize) }.unwrap_or(0);
        }
    }
    u64::from(classic_u32(ctx, global!(TRACE_KEYS.ports[i])))
}

/// The memo's slots are picked by address bits above the low six (sockets are slab objects);
/// a cookie or a pair of ports counts up from 0, so it is moved up to where the slots look.
#[inline(always)]
fn memo_key(key: u64, hook: HookId) -> u64 {
    if global!(CLASSIC.skaddr[hook.index()]) != ABSENT {
        key
    } else {
        key << 6
    }
}

/// The shared table's key: the flow's key with the hook in its low bits (an address has them
/// clear; a cookie or ports are moved up first).
#[inline(always)]
fn due_key(key: u64, hook: HookId) -> u64 {
    (key << 3) ^ (hook as u64)
}

/// Copy the record into the ring, whole.
#[inline(always)]
fn hand_over(ctx: &TracePointContext, hook: HookId) {
    hand_over_with_owner(ctx, hook, false);
}

/// Copy the record into the ring, whole, with the current process when `owner`.
#[inline(always)]
fn hand_over_with_owner(ctx: &TracePointContext, hook: HookId, owner: bool) {
    let Some(mut entry) = EVENTS.reserve::<TraceRecord>(0) else {
        bump(counter::RINGBUF_LOST);
        return;
    };
    let r = entry.as_mut_ptr();
    // SAFETY: `r` is the reserved record, valid and exclusively ours until submitted; the
    // record is copied through the probe-read helper, which checks the source: a tracepoint
    // program's context is its record at the start of the kernel's per-CPU trace buffer
    // (8 KiB), so reading past a shorter record stays within that buffer.
    unsafe {
        (*r).header =
            RecordHeader { version: WIRE_VERSION, kind: record_kind::TRACE_RECORD, size: TRACE_RECORD_SIZE as u32 };
        (*r).ts_ns = bpf_ktime_get_ns();
        (*r).hook = hook as u32;
        (*r).pid = 0;
        (*r).comm = [0; 16];
        if owner {
            (*r).pid = (bpf_get_current_pid_tgid() >> 32) as u32;
            if let Ok(comm) = bpf_get_current_comm() {
                (*r).comm = comm;
            }
        }
        let dst = &mut *core::ptr::addr_of_mut!((*r).record);
        if bpf_probe_read_kernel_buf(ctx.as_ptr() as *const u8, dst).is_err() {
            *dst = [0; TRACE_RECORD_BYTES];
            bump(counter::READ_ERRORS);
        }
    }
    entry.submit(wakeup_flag());
    bump(counter::EMITTED);
}
