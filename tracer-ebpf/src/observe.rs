//! Per-flow bookkeeping: what a hook saw ([`Hit`]), the flow's state in `FLOWS` kept up to date,
//! periodic samples rate-limited per flow, and a sample written into the ring when one is due.

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
};
use tracer_common::{counter, flag, reason, tcp_state, FlowSample, FlowState};

use crate::due_memo::{self, PERIODIC_DUE};
use crate::filter::passes_filter;
use crate::flow_key;
use crate::maps::{bump, CONFIG, EVENTS, FLOWS};
use crate::receive;
use crate::sample::fill_sample;

/// No CA state override: read `icsk_ca_state` from the socket.
pub(crate) const CA_FROM_SOCKET: u8 = 0xff;

/// What a hook saw, before the socket is read.
pub(crate) struct Hit {
    pub(crate) sk: *const u8,
    pub(crate) cookie: u64,
    pub(crate) reason: u8,
    /// New CA state from `tcp_cong_state_set`, else [`CA_FROM_SOCKET`].
    pub(crate) ca_state: u8,
    pub(crate) old_state: u8,
    pub(crate) new_state: u8,
    pub(crate) classic: bool,
    /// A CA-state change that left Recovery or Loss with the cut undone.
    pub(crate) undone: bool,
    /// The segment `tcp_probe` saw arrive (its `struct sk_buff *`), else null.
    pub(crate) skb: *const u8,
}

/// Per-flow bookkeeping and rate limiting; emits a sample when one is due.
#[inline(always)]
pub(crate) fn observe(hit: Hit) -> Result<u32, u32> {
    if hit.sk.is_null() || hit.cookie == 0 {
        return Ok(0);
    }
    // SAFETY: a helper without arguments or preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let periodic = hit.reason == reason::PERIODIC;
    let existing = FLOWS.get_ptr_mut(hit.cookie);
    let interval = global!(CONFIG.sample_interval_ns);
    let due = |last: u64| last == 0 || now.wrapping_sub(last) >= interval;
    // A periodic sample may come an eighth of an interval early: userspace attaches `tcp_probe`
    // only in a short window each interval (see tracer's `kernel::probe_window`), and a flow
    // sampled a little after one window opened must be due again when the next one opens, or
    // its samples would drift later each interval until one window missed it.
    let periodic_gap = interval - (interval >> 3);
    let periodic_due = |last: u64| last == 0 || now.wrapping_sub(last) >= periodic_gap;
    if let (true, Some(p)) = (periodic, existing) {
        // SAFETY: the pointer is into the map value, valid for this program run.
        let last = unsafe { (*p).last_emit_ns };
        if !periodic_due(last) {
            due_memo::remember(&PERIODIC_DUE, hit.sk, last.wrapping_add(periodic_gap).saturating_sub(now));
            return Ok(0);
        }
    }
    let mut state = match existing {
        // SAFETY: the pointer is into the map value, valid for this program run.
        Some(p) => unsafe { *p },
        None => flow_key::new_flow_state(hit.cookie),
    };
    if periodic {
        if !periodic_due(state.last_emit_ns) {
            return Ok(0);
        }
        state.last_emit_ns = now;
        due_memo::remember(&PERIODIC_DUE, hit.sk, periodic_gap);
    }
    if hit.reason == reason::RETRANSMIT {
        state.retrans_events = state.retrans_events.wrapping_add(1);
        // The first retransmission after a quiet interval is sampled at once; the rest of the
        // burst is counted here and seen in the periodic samples.
        if !due(state.last_retrans_emit_ns) {
            store_flow(hit.cookie, existing, &state);
            return Ok(0);
        }
        state.last_retrans_emit_ns = now;
    }
    if hit.undone {
        state.undo_events = state.undo_events.wrapping_add(1);
    }
    if hit.reason == reason::STATE_CHANGE && hit.new_state == tcp_state::SYN_SENT {
        // connect() runs in the owner's context: remember who opened the flow.
        state.pid = (bpf_get_current_pid_tgid() >> 32) as u32;
        state.comm = bpf_get_current_comm().unwrap_or_default();
        state.flags |= flag::OWNER_KNOWN;
    }

    if passes_filter(hit.sk, &mut state) {
        emit(&hit, &state, now);
    } else {
        bump(counter::FILTERED);
    }

    // The entry lives until destroy (which follows the move to CLOSE), so the close and destroy
    // samples still carry the owner and the retransmission count.
    if hit.reason == reason::DESTROY {
        let _ = FLOWS.remove(hit.cookie);
        due_memo::forget(hit.sk);
        receive::forget(hit.sk);
    } else {
        store_flow(hit.cookie, existing, &state);
    }
    Ok(0)
}

/// Keep `state` for the flow: written in place when it has an entry already (an LRU map update
/// takes a fresh node off the free lists and frees the old one, a cost paid on every state
/// change), inserted otherwise.
#[inline(always)]
pub(crate) fn store_flow(cookie: u64, existing: Option<*mut FlowState>, state: &FlowState) {
    match existing {
        // SAFETY: the pointer is into the map value, valid for this program run.
        Some(p) => unsafe { *p = *state },
        None => {
            if FLOWS.insert(cookie, *state, 0).is_err() {
                bump(counter::FLOW_MAP_FULL);
            }
        }
    }
}

#[inline(always)]
fn emit(hit: &Hit, state: &FlowState, now: u64) {
    let Some(mut entry) = EVENTS.reserve::<FlowSample>(0) else {
        bump(counter::RINGBUF_LOST);
        return;
    };
    fill_sample(entry.as_mut_ptr(), hit, state, now);
    entry.submit(wakeup_flag());
    bump(counter::EMITTED);
}

/// How a submitted sample wakes the reader. A wake-up is an `irq_work` (in a VM, a self-IPI and
/// a VM exit) that cost the state hooks most of their 7-10 us per sample; the reader reads the
/// ring at its ticks anyway, so it is woken only once the ring is half full, when a late read
/// could lose samples. The ring's size comes from userspace, which set it: one query of
/// the ring, not two (each is a helper call).
#[inline(always)]
pub(crate) fn wakeup_flag() -> u64 {
    let half = u64::from(global!(CONFIG.ring_bytes)) / 2;
    if EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)) >= half {
        u64::from(BPF_RB_FORCE_WAKEUP)
    } else {
        u64::from(BPF_RB_NO_WAKEUP)
    }
}
