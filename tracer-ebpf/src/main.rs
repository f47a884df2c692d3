//! cctrace kernel side: samples TCP sockets from five tracepoints.
//!
//! Each hook exists twice: as a BTF tracepoint (`tp_btf`, typed `struct sock *`, preferred) and
//! as a classic tracefs tracepoint whose `skaddr` field offset userspace reads from the event's
//! `format` file. Both end in [`observe::observe`], which keeps per-flow state in `FLOWS`,
//! rate-limits periodic samples to one per `CONFIG.sample_interval_ns` per flow, and writes
//! [`tracer_common::FlowSample`] records into the `EVENTS` ring buffer. All kernel struct offsets
//! come from `OFFSETS`, which userspace fills from the running kernel's BTF before load, so one
//! object runs on many kernels.
//!
//! This file only declares the modules, one job each: the loader-set config and shared maps
//! (`maps`), reading kernel memory and tracepoint records (`read`), the per-flow bookkeeping
//! (`observe`, `filter`, `flow_key`, `due_memo`), writing a sample (`sample`), the programs by
//! event (`probe`, `state`, `socket_call`, which names owners with `owner`), the receiving side
//! counted per segment (`receive`), the two socket
//! iterators (`listing`, `switch`), and the UDP accounting (`udp`, counted per socket call by
//! `udp_syscall` or per packet by `udp_skb`).
#![no_std]
#![no_main]
// Entry points are `pub` as aya's program macros are written; an eBPF object has no Rust API.
#![allow(unreachable_pub)]
// `atomic_xadd`: the BPF target has no `fetch_add` in `core` (no compare-and-swap), though the
// instruction set has an atomic add; see `count`.
#![feature(core_intrinsics)]
#![allow(internal_features)]

// First: its `global!` macro is used by the modules below.
#[macro_use]
mod read;

mod count;
mod due_memo;
mod filter;
mod flow_key;
mod listing;
mod maps;
mod nobtf;
mod observe;
mod owner;
mod probe;
mod receive;
mod sample;
mod socket_call;
mod state;
mod switch;
mod udp;
mod udp_skb;
mod udp_syscall;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
