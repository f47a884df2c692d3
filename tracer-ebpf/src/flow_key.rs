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

use crate::maps::{CONFIG, OFFSETS};
use crate::read::{btf_cookie, read};

/// Where [`address_of`] turns a pointer into a number, per CPU.
#[repr(C)]
pub struct AddressScratch {
    generation: u64,
    bits: u64,
}

#[map]
static ADDRESS_SCRATCH: PerCpuArray<AddressScratch> = PerCpuArray::with_max_entries(1, 0);

/// Flow ids handed out so far, per CPU: ids are unique without atomics.
#[map]
static FLOW_IDS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Set on every flow id: kernel cookies count up from 1 and never reach it. Ids stay below
/// 2^53, so JSON readers that hold numbers as doubles read them exactly.
const FLOW_ID_BIT: u64 = 1 << 52;

#[inline(always)]
fn by_socket() -> bool {
    global!(CONFIG.key_by_socket) != 0
}

/// The key for a socket a BTF program got as its typed argument.
#[inline(always)]
pub(crate) fn btf_key(sk: *const u8) -> u64 {
    if by_socket() {
        address_of(sk)
    } else {
        btf_cookie(sk)
    }
}

/// A typed socket pointer's address as a plain number. The verifier keeps tracking a BTF
/// pointer as a pointer after a cast and refuses bitwise operations on it, and comparisons of
/// it with numbers; stored into a map value (privileged programs may) and loaded back, the same
/// bits are a number. That is a few memory accesses; copying the bits through the probe-read
/// helper, the fallback, is a helper call, several times the cost.
#[inline(always)]
pub(crate) fn address_of(sk: *const u8) -> u64 {
    if let Some(scratch) = ADDRESS_SCRATCH.get_ptr_mut(0) {
        // SAFETY: this CPU's scratch, valid for this program run. A run nested in this one (a
        // softirq over process context) bumps the generation too: if it did so between ours
        // and the read, the value read may be its socket, and the fallback decides. Volatile
        // keeps each access where it is written.
        unsafe {
            let generation = core::ptr::addr_of_mut!((*scratch).generation);
            let bits = core::ptr::addr_of_mut!((*scratch).bits);
            let mine = core::ptr::read_volatile(generation).wrapping_add(1);
            core::ptr::write_volatile(generation, mine);
            core::ptr::write_volatile(bits, sk as u64);
            let number = core::ptr::read_volatile(bits);
            if core::ptr::read_volatile(generation) == mine {
                return number;
            }
        }
    }
    let slot = sk;
    read::<u64>(core::ptr::addr_of!(slot).cast::<u8>(), 0)
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

/// State for a flow seen for the first time (under `key`, the socket's address when flows are
/// keyed by socket), with its id when flows are keyed by socket.
#[inline(always)]
pub(crate) fn new_flow_state(key: u64) -> FlowState {
    FlowState { flow_id: if by_socket() { next_flow_id(key) } else { 0 }, ..FlowState::default() }
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

/// CPU, a per-CPU count and the socket's address bits (sockets are at least 64-byte aligned):
/// sockets alive together differ in address, and one address reused on a CPU differs in count
/// (until 16,384 flows later on that CPU).
/// The count is not atomic: a program interrupting another on the same CPU may read the same
/// count, but it handles another socket, so the address bits still tell the two apart.
#[inline(always)]
fn next_flow_id(address: u64) -> u64 {
    // SAFETY: a helper without arguments or preconditions.
    let cpu = u64::from(unsafe { bpf_get_smp_processor_id() });
    let Some(count) = FLOW_IDS.get_ptr_mut(0) else { return 0 };
    // SAFETY: the pointer is into this CPU's slot of the map, valid for this program run.
    let n = unsafe {
        *count += 1;
        *count
    };
    FLOW_ID_BIT | ((cpu & 0x3f) << 46) | ((n & 0x3fff) << 32) | ((address >> 6) & 0xffff_ffff)
}
