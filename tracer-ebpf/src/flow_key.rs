//! The key a flow's state in `FLOWS` is kept under, and the id its samples carry.
//!
//! BTF programs get a typed socket and ask the kernel for its cookie, which the helper assigns
//! on first use. Classic tracepoints cannot: they can only read `skc_cookie`, which stays 0
//! until something asks for a cookie (on 6.1 nothing does before close), so every sample before
//! destroy would be dropped. With `CONFIG.key_by_socket` (userspace sets it when classic hooks
//! are the ones in use) every program keys by the socket's address instead, and a flow gets an
//! id of its own when first seen. The entry goes at destroy, so a socket allocated later at the
//! same address starts a new flow with a new id.

use aya_ebpf::{helpers::bpf_get_smp_processor_id, macros::map, maps::PerCpuArray};
use tracer_common::FlowState;

use crate::{btf_cookie, read, CONFIG, OFFSETS};

/// Flow ids handed out so far, per CPU: ids are unique without atomics.
#[map]
static FLOW_IDS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Set on every flow id: kernel cookies count up from 1 and never reach it.
const FLOW_ID_BIT: u64 = 1 << 63;

#[inline(always)]
fn by_socket() -> bool {
    global!(CONFIG.key_by_socket) != 0
}

/// The key for a socket a BTF program got as its typed argument.
#[inline(always)]
pub(crate) fn btf_key(sk: *const u8) -> u64 {
    if by_socket() {
        sk as u64
    } else {
        btf_cookie(sk)
    }
}

/// The key for a socket a classic tracepoint read from its record.
#[inline(always)]
pub(crate) fn classic_key(sk: *const u8) -> u64 {
    if by_socket() {
        sk as u64
    } else {
        read(sk, global!(OFFSETS.skc_cookie))
    }
}

/// State for a flow seen for the first time, with its id when flows are keyed by socket.
#[inline(always)]
pub(crate) fn new_flow_state(sk: *const u8) -> FlowState {
    FlowState { flow_id: if by_socket() { next_flow_id(sk) } else { 0 }, ..FlowState::default() }
}

/// What a sample of the flow carries as its cookie.
#[inline(always)]
pub(crate) fn sample_cookie(state: &FlowState, key: u64) -> u64 {
    if state.flow_id != 0 {
        state.flow_id
    } else {
        key
    }
}

/// CPU, a per-CPU count and the socket's low address bits: sockets alive together differ in
/// address, and one address reused on a CPU differs in count (until 16 million flows later).
/// The count is not atomic: a program interrupting another on the same CPU may read the same
/// count, but it handles another socket, so the address bits still tell the two apart.
#[inline(always)]
fn next_flow_id(sk: *const u8) -> u64 {
    // SAFETY: a helper without arguments or preconditions.
    let cpu = u64::from(unsafe { bpf_get_smp_processor_id() });
    let Some(count) = FLOW_IDS.get_ptr_mut(0) else { return 0 };
    // SAFETY: the pointer is into this CPU's slot of the map, valid for this program run.
    let n = unsafe {
        *count += 1;
        *count
    };
    FLOW_ID_BIT | ((cpu & 0x7f) << 56) | ((n & 0xff_ffff) << 32) | (sk as u64 & 0xffff_ffff)
}
