//! The start-up listing: an `iter/tcp` program that writes one sample of every existing TCP
//! flow of a network namespace into the iterator's output.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_seq_write},
    macros::map,
    maps::PerCpuArray,
};
use tracer_common::{counter, reason, tcp_state, FlowSample, FLOW_SAMPLE_SIZE};

use crate::filter::passes_filter;
use crate::flow_key::{self, btf_key};
use crate::maps::{bump, FLOWS, OFFSETS};
use crate::observe::{store_flow, Hit, CA_FROM_SOCKET};
use crate::read::{is_flow_socket, read};
use crate::sample::fill_sample;

/// The start-up listing's sample under construction: too large for the 512-byte stack.
#[map]
static SNAPSHOT_SAMPLE: PerCpuArray<FlowSample> = PerCpuArray::with_max_entries(1, 0);

/// `iter/tcp`: one sample of every TCP socket of the iterating process's network namespace, so
/// flows that are idle when cctrace starts are listed too. The samples go into the iterator's
/// own output (`bpf_seq_write`), not the ring buffer: userspace reads them at its own pace while
/// it drains the ring, so a host with 100,000 sockets loses none of them to a full ring. The
/// flow map is left alone (an idle socket needs no rate limiting, and 100,000 of them would
/// push the busy flows' state out of the LRU). The context is
/// `struct bpf_iter__tcp { struct bpf_iter_meta *meta; struct sock_common *sk_common; uid_t uid; }`.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/tcp")]
pub fn cct_iter_tcp(ctx: *mut c_void) -> i32 {
    // SAFETY: the verifier gives iterator programs this context; sk_common is its second field
    // and may be NULL (end of iteration).
    let (meta, sk) = unsafe { (*(ctx as *const *const u8), *(ctx as *const *const u8).add(1)) };
    if sk.is_null() || meta.is_null() {
        return 0;
    }
    // Time-wait and request sockets are not full sockets; listeners carry no flow.
    let state: u8 = read(sk, global!(OFFSETS.skc_state));
    if state == tcp_state::TIME_WAIT
        || state == tcp_state::NEW_SYN_RECV
        || state == tcp_state::LISTEN
        || !is_flow_socket(sk)
    {
        return 0;
    }
    let key = btf_key(sk);
    if key == 0 {
        return 0;
    }
    // What the hooks already know of the flow (its owner, retransmissions), read, not stored.
    let existing = FLOWS.get_ptr_mut(key);
    let mut flow = match existing {
        // SAFETY: the pointer is into the map value, valid for this program run; copied at once.
        Some(p) => unsafe { *p },
        None => flow_key::new_flow_state(key),
    };
    if !passes_filter(sk, &mut flow) {
        bump(counter::FILTERED);
        return 0;
    }
    // Keyed by socket address (classic hooks), a new flow gets its id here: the listing's
    // sample must carry the id the hooks will use, so that state is stored. Keyed by cookie,
    // nothing is stored (100,000 idle sockets would push busy flows out of the LRU).
    if existing.is_none() && flow.flow_id != 0 {
        store_flow(key, None, &flow);
    }
    let Some(sample) = SNAPSHOT_SAMPLE.get_ptr_mut(0) else { return 0 };
    let hit = Hit {
        sk,
        cookie: key,
        reason: reason::SNAPSHOT,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: false,
        undone: false,
        skb: core::ptr::null(),
    };
    // SAFETY: a helper without arguments or preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    fill_sample(sample, &hit, &flow, now);
    // SAFETY: `meta->seq` is the iterator's seq_file (first field of bpf_iter_meta); the record
    // is this CPU's scratch map value, FLOW_SAMPLE_SIZE bytes.
    unsafe {
        let seq = *(meta as *const *mut aya_ebpf::bindings::seq_file);
        bpf_seq_write(seq, sample as *const c_void, FLOW_SAMPLE_SIZE as u32);
    }
    0
}
