//! Shared helpers: reading the loader-set globals, kernel memory at BTF offsets (0 where the
//! kernel lacks a field) and classic tracepoint records, and the socket facts every hook checks.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_get_socket_cookie, bpf_probe_read_kernel, bpf_probe_read_kernel_buf},
    programs::TracePointContext,
};
use tracer_common::{counter, tcp_state, BitField, HookId, ABSENT, IPPROTO_TCP};

use crate::maps::{bump, CLASSIC, OFFSETS};

/// Read a field of the rodata globals without letting the compiler fold the build-time value.
macro_rules! global {
    ($s:ident . $($f:tt)+) => {{
        // SAFETY: the static is always valid for reads; volatile keeps the load in the program
        // so the value userspace wrote before load is what the program sees.
        #[allow(unused_unsafe)]
        let value = unsafe { core::ptr::read_volatile(&$s.$($f)+) };
        value
    }};
}

/// Read a `T` at `base + off` from kernel memory; 0 when the kernel lacks the field.
#[inline(always)]
pub(crate) fn read<T: Copy + Default>(base: *const u8, off: u32) -> T {
    if off == ABSENT || base.is_null() {
        return T::default();
    }
    // SAFETY: bpf_probe_read_kernel validates the address; a fault returns an error, not a crash.
    match unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize) as *const T) } {
        Ok(v) => v,
        Err(_) => {
            bump(counter::READ_ERRORS);
            T::default()
        }
    }
}

#[inline(always)]
pub(crate) fn read_ptr(base: *const u8, off: u32) -> *const u8 {
    read::<u64>(base, off) as *const u8
}

#[inline(always)]
pub(crate) fn read_bits(base: *const u8, field: BitField) -> u8 {
    if field.byte_offset == ABSENT {
        return 0;
    }
    (read::<u8>(base, field.byte_offset) >> field.shift) & field.mask
}

#[inline(always)]
pub(crate) fn read_bytes(base: *const u8, off: u32, dst: &mut [u8]) {
    if off == ABSENT || base.is_null() {
        return;
    }
    // SAFETY: as in `read`: the helper checks the source address.
    if unsafe { bpf_probe_read_kernel_buf(base.wrapping_add(off as usize), dst) }.is_err() {
        bump(counter::READ_ERRORS);
    }
}

/// A u16 field of `struct sock` at `off`, loaded straight through the typed pointer of a BTF
/// program: the offset is a constant of the frozen read-only data, so the verifier checks the
/// load against BTF and no helper is called. For `sk_protocol` on the socket-call hooks this is
/// most of what a call that is neither a TCP send nor UDP costs, and a helper call (a probe
/// read) costs several times a plain load through this kernel's speculation mitigations.
#[inline(always)]
pub(crate) fn sock_u16(sk: *const u8, off: u32) -> u16 {
    if off == ABSENT || sk.is_null() {
        return 0;
    }
    // SAFETY: `sk` is a BTF program's `struct sock *` argument (the verifier checks the access
    // against the type, and a fault reads as 0); `off` is the offset of a u16 field of it, from
    // the kernel's BTF.
    unsafe { core::ptr::read_volatile(sk.wrapping_add(off as usize) as *const u16) }
}

/// Sockets that carry no flow or are not TCP produce no samples. A listener is already in CLOSE
/// when it is destroyed, so "no peer port" is what identifies it (and any never-connected socket).
#[inline(always)]
pub(crate) fn is_flow_socket(sk: *const u8) -> bool {
    let proto_off = global!(OFFSETS.sk_protocol);
    if proto_off != ABSENT && read::<u16>(sk, proto_off) != IPPROTO_TCP {
        return false;
    }
    read::<u8>(sk, global!(OFFSETS.skc_state)) != tcp_state::LISTEN && read::<u16>(sk, global!(OFFSETS.skc_dport)) != 0
}

#[inline(always)]
pub(crate) fn btf_cookie(sk: *const u8) -> u64 {
    // SAFETY: `sk` is the tracepoint's typed `struct sock *` argument; in tracing programs this
    // helper is bpf_get_socket_ptr_cookie, which assigns the cookie if it is not yet set.
    unsafe { bpf_get_socket_cookie(sk as *mut c_void) }
}

/// The socket of a classic tracepoint's record, for kernels without BTF tracepoints for these
/// events: the record layout is read from tracefs, and its `skaddr` field gives the socket, read
/// with the same BTF offsets as a BTF tracepoint's. Without the cookie helper, flows are keyed
/// by socket address (see `flow_key`).
#[inline(always)]
pub(crate) fn classic_sk(ctx: &TracePointContext, hook: HookId) -> *const u8 {
    let off = global!(CLASSIC.skaddr[hook.index()]);
    if off == ABSENT {
        return core::ptr::null();
    }
    // SAFETY: reads the tracepoint record at an offset taken from its format file.
    unsafe { ctx.read_at::<u64>(off as usize) }.unwrap_or(0) as *const u8
}

/// A `u32` field of a classic tracepoint's record, at the offset its format file gives.
#[inline(always)]
pub(crate) fn classic_u32(ctx: &TracePointContext, off: u32) -> u32 {
    if off == ABSENT {
        return 0;
    }
    // SAFETY: as above.
    unsafe { ctx.read_at::<u32>(off as usize) }.unwrap_or(0)
}
