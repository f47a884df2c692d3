//! The receiving side of a socket, counted segment by segment: the holes a sender's losses
//! leave in the sequence space and their filling, grouped into loss episodes, and the sender's
//! rate in the round trip before each episode and the one after it ([`RecvCounts`]).
//!
//! It runs in `tcp_probe`'s program, which the kernel calls for every segment an established
//! socket receives, before processing it, with the `sk_buff` whose control block holds the
//! segment's sequence numbers. Everything on the way of a segment is a load: the sequence
//! numbers through the typed `sk_buff` pointer (BTF allows `cb[]` as scratch), the time as
//! jiffies (inlined), the state by the socket's address in an LRU hash. A segment without data
//! (an ACK: every segment a sender receives) returns after two loads. Clock reads and the
//! timestamp option's probe read happen only when a hole opens, an RTT's slot ends or an
//! episode's rate is measured: a few times per round trip at most.
//!
//! What the counts mean, and what a receiver cannot tell from them, is in docs/flagging.md.

use aya_ebpf::{
    helpers::{bpf_jiffies64, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, LruHashMap, PerCpuArray},
};
use tracer_common::{RecvCounts, RecvState, ABSENT, RECV_MAX_SOCKETS};

use crate::flow_key::address_of;
use crate::maps::OFFSETS;
use crate::read::read;

/// Per receiving socket, by its address (cleared at destroy).
#[map]
pub(crate) static RECV: LruHashMap<u64, RecvState> = LruHashMap::with_max_entries(RECV_MAX_SOCKETS, 0);

/// Bumped by userspace before each attach of `tcp_probe`'s program (see
/// [`RecvState::generation`]).
#[map]
static RECV_GENERATION: Array<u32> = Array::with_max_entries(1, 0);

/// A new socket's state under construction: 168 bytes the program's stack cannot spare (the
/// verifier of Linux 5.10 and 6.1 counts the stack of every call on the way, 512 bytes in all).
#[map]
static RECV_SCRATCH: PerCpuArray<RecvState> = PerCpuArray::with_max_entries(1, 0);

/// A followed hole not filled within this many jiffies (4-16 s) is let go: a connection that
/// never retransmits it is gone, and a new hole must be followed.
const STALE_HOLE_JIFFIES: u32 = 4096;

/// `a` is after `b` in sequence space (`after()` in the kernel).
#[inline(always)]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// A `u32` of the segment's `sk_buff`, loaded through the tracepoint's typed pointer: the
/// offset is a constant of the frozen read-only data, so the verifier checks the load against
/// BTF and no helper runs.
#[inline(always)]
fn skb_u32(skb: *const u8, off: u32) -> u32 {
    // SAFETY: `skb` is `tcp_probe`'s typed `struct sk_buff *` argument; `off` is the offset of
    // a u32 inside it (in `cb[]`, which BTF lets programs read as scratch), from the kernel's
    // BTF. A fault reads as 0.
    unsafe { core::ptr::read_volatile(skb.wrapping_add(off as usize) as *const u32) }
}

#[inline(always)]
fn jiffies() -> u32 {
    // SAFETY: a helper without arguments or preconditions (the verifier inlines it as a load).
    unsafe { bpf_jiffies64() as u32 }
}

#[inline(always)]
fn clock_ns() -> u64 {
    // SAFETY: a helper without arguments or preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// Count the segment `skb` that socket `sk` (at `key`, its [`address_of`]) is about to
/// process. Returns true when it ended the measurement of an episode's rate: the caller then
/// samples the socket at once.
#[inline(always)]
pub(crate) fn count_segment(sk: *const u8, key: u64, skb: *const u8) -> bool {
    let (seq_off, end_off) = (global!(OFFSETS.skb_seq), global!(OFFSETS.skb_end_seq));
    if seq_off == ABSENT || end_off == ABSENT || skb.is_null() || sk.is_null() {
        return false;
    }
    let seq = skb_u32(skb, seq_off);
    let end = skb_u32(skb, end_off);
    if end == seq {
        return false;
    }
    let generation = RECV_GENERATION.get(0).copied().unwrap_or(0);
    let now = jiffies();
    let Some(state) = RECV.get_ptr_mut(key) else {
        if let Some(fresh) = RECV_SCRATCH.get_ptr_mut(0) {
            // SAFETY: this CPU's scratch value, valid for this program run; written whole
            // before it is copied into the map.
            unsafe {
                core::ptr::write_bytes(fresh, 0, 1);
                resync(&mut *fresh, end, generation, now);
                // By reference: a copy of the value would not fit the program's 512-byte stack,
                // which is why it is built in a per-CPU scratch slot.
                #[allow(clippy::needless_borrows_for_generic_args)]
                let _ = RECV.insert(key, &*fresh, 0);
            }
        }
        return false;
    };
    // SAFETY: the pointer is into the map value, valid for this program run; the kernel
    // processes one socket's segments one at a time (under the socket's lock), so no other
    // run writes it meanwhile (samples of the socket only read it, bar `rtt_jiffies`).
    let st = unsafe { &mut *state };
    if st.generation != generation {
        resync(st, end, generation, now);
        return false;
    }
    let max = st.max_end;
    let mut measured = false;
    if after(seq, max) {
        opened(st, skb, seq.wrapping_sub(max), now);
        measured = new_bytes(st, end.wrapping_sub(seq), now);
        st.max_end = end;
    } else if after(max, seq) {
        st.counts.below = st.counts.below.wrapping_add(1);
        if st.tracking != 0 && !after(seq, st.hole_seq) && after(end, st.hole_seq) {
            filled(st, now);
        }
        if after(end, max) {
            measured = new_bytes(st, end.wrapping_sub(max), now);
            st.max_end = end;
        }
    } else {
        measured = new_bytes(st, end.wrapping_sub(seq), now);
        st.max_end = end;
    }
    if st.tracking != 0 && now.wrapping_sub(st.hole_jiffies) > STALE_HOLE_JIFFIES {
        st.tracking = 0;
    }
    measured
}

/// Start counting afresh at `end` (a new socket, or one whose segments went uncounted).
#[inline(always)]
fn resync(st: &mut RecvState, end: u32, generation: u32, now: u32) {
    st.max_end = end;
    st.generation = generation;
    st.tracking = 0;
    st.measuring = 0;
    st.slot_start_jiffies = now;
    st.slot_start_ns = 0;
    st.slot_bytes = 0;
    st.prev_bytes = 0;
    st.prev_us = 0;
    st.last_data_jiffies = now;
}

/// A segment `gap` bytes beyond the highest byte seen: a hole opens before it.
#[inline(always)]
fn opened(st: &mut RecvState, skb: *const u8, gap: u32, now: u32) {
    st.counts.holes = st.counts.holes.wrapping_add(1);
    st.counts.hole_bytes = st.counts.hole_bytes.wrapping_add(u64::from(gap));
    if st.tracking != 0 {
        return;
    }
    st.tracking = 1;
    st.hole_seq = st.max_end;
    st.hole_jiffies = now;
    st.hole_ns = clock_ns();
    st.hole_tsval = segment_tsval(skb);
    let since_episode = st.hole_ns.wrapping_sub(st.counts.episode_ns);
    st.hole_opens_episode = u8::from(st.counts.episodes == 0 || since_episode >= u64::from(st.rtt_us) * 1000);
    st.hole_before_bytes = st.prev_bytes;
    st.hole_before_us = st.prev_us;
}

/// The followed hole was filled `now`: by a retransmission when it took at least half an RTT
/// (a loss), by the late original when sooner (reordering). Timed by the clock, read once a
/// fill: a jiffy is longer than a LAN's whole RTT.
#[inline(always)]
fn filled(st: &mut RecvState, now: u32) {
    st.tracking = 0;
    let now_ns = clock_ns();
    let waited_ns = now_ns.wrapping_sub(st.hole_ns);
    if st.rtt_us != 0 && waited_ns.saturating_mul(2) < u64::from(st.rtt_us) * 1000 {
        st.counts.reorder_holes = st.counts.reorder_holes.wrapping_add(1);
        return;
    }
    st.counts.loss_holes = st.counts.loss_holes.wrapping_add(1);
    if st.hole_opens_episode == 0 {
        return;
    }
    st.counts.episodes = st.counts.episodes.wrapping_add(1);
    st.counts.episode_ns = st.hole_ns;
    st.counts.episode_tsval = st.hole_tsval;
    if st.measuring == 0 && st.hole_before_us != 0 && st.rtt_jiffies != 0 {
        st.measuring = 1;
        st.after_start_jiffies = now;
        st.after_start_ns = now_ns;
        st.after_bytes = 0;
        st.pending_before_bytes = st.hole_before_bytes;
        st.pending_before_us = st.hole_before_us;
    }
}

/// `bytes` of new data arrived `now`: the RTT slots move on, and an episode's measurement
/// ends once it spans an RTT. Returns whether one ended.
#[inline(always)]
fn new_bytes(st: &mut RecvState, bytes: u32, now: u32) -> bool {
    let rtt = st.rtt_jiffies;
    let mut measured = false;
    if rtt != 0 {
        let in_slot = now.wrapping_sub(st.slot_start_jiffies);
        if in_slot >= rtt {
            let now_ns = clock_ns();
            // A slot that ran past two RTTs held an idle spell: no rate to keep from it.
            let whole = st.slot_start_ns != 0 && in_slot < rtt.saturating_mul(2);
            st.prev_bytes = if whole { st.slot_bytes } else { 0 };
            st.prev_us = if whole { (now_ns.wrapping_sub(st.slot_start_ns) / 1000) as u32 } else { 0 };
            st.slot_start_jiffies = now;
            st.slot_start_ns = now_ns;
            st.slot_bytes = 0;
        }
        if st.measuring != 0 && now.wrapping_sub(st.after_start_jiffies) >= rtt {
            measure(&mut st.counts, st.pending_before_bytes, st.pending_before_us, st.after_bytes, st.after_start_ns);
            st.measuring = 0;
            measured = true;
        }
    }
    let gap = now.wrapping_sub(st.last_data_jiffies);
    if gap >= 2 && gap >= rtt && st.last_data_jiffies != 0 {
        st.counts.idle_jiffies = st.counts.idle_jiffies.wrapping_add(gap);
    }
    st.last_data_jiffies = now;
    st.slot_bytes = st.slot_bytes.wrapping_add(bytes);
    if st.measuring != 0 {
        st.after_bytes = st.after_bytes.wrapping_add(bytes);
    }
    measured
}

/// An episode's rates: `before_bytes` over `before_us` ended when its first hole opened, and
/// `after_bytes` since `after_ns`, now.
#[inline(always)]
fn measure(counts: &mut RecvCounts, before_bytes: u32, before_us: u32, after_bytes: u32, after_ns: u64) {
    counts.measured = counts.measured.wrapping_add(1);
    counts.before_bytes = before_bytes;
    counts.before_us = before_us;
    counts.after_bytes = after_bytes;
    counts.after_us = (clock_ns().wrapping_sub(after_ns) / 1000) as u32;
}

/// The TSval of segment `skb`, from its TCP header's timestamp option where a sender puts it
/// (`NOP NOP TS`, RFC 7323 appendix A, as Linux does, or the option first); 0 without one.
#[inline(always)]
pub(crate) fn segment_tsval(skb: *const u8) -> u32 {
    let (head_off, th_off) = (global!(OFFSETS.skb_head), global!(OFFSETS.skb_transport_header));
    if skb.is_null() || head_off == ABSENT || th_off == ABSENT {
        return 0;
    }
    let head: u64 = read(skb, head_off);
    let th: u16 = read(skb, th_off);
    if head == 0 || th == u16::MAX {
        return 0;
    }
    let header = (head as *const u8).wrapping_add(usize::from(th));
    // The data offset (header length in words), then the first 8 bytes of options.
    if read::<u8>(header, 12) >> 4 < 8 {
        return 0;
    }
    let o: [u8; 8] = read(header, 20);
    if o[0] == 1 && o[1] == 1 && o[2] == 8 && o[3] == 10 {
        u32::from_be_bytes([o[4], o[5], o[6], o[7]])
    } else if o[0] == 8 && o[1] == 10 {
        u32::from_be_bytes([o[2], o[3], o[4], o[5]])
    } else {
        0
    }
}

/// Copy the counts kept for socket `sk` into `out` (the sample's record: nothing crosses the
/// stack), and note its RTT for the slots (`rtt_us`, as the sample reads it): the one write
/// samples make. False when the socket has no counts.
#[inline(always)]
pub(crate) fn copy_counts(sk: *const u8, rtt_us: u32, jiffy_ns: u32, out: &mut RecvCounts) -> bool {
    let Some(state) = RECV.get_ptr_mut(address_of(sk)) else { return false };
    let rtt_jiffies = if jiffy_ns == 0 { 0 } else { ((u64::from(rtt_us) * 1000) / u64::from(jiffy_ns)) as u32 };
    // SAFETY: the pointer is into the map value, valid for this program run; u32 stores.
    unsafe {
        if rtt_us != 0 {
            (*state).rtt_us = rtt_us;
            (*state).rtt_jiffies = rtt_jiffies.max(1);
        }
        core::ptr::copy_nonoverlapping(core::ptr::addr_of!((*state).counts), out, 1);
    }
    true
}

/// Socket `sk` is gone: its address may hold a new socket next.
#[inline(always)]
pub(crate) fn forget(sk: *const u8) {
    let _ = RECV.remove(address_of(sk));
}
