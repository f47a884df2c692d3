//! The socket-call hooks: `sock:sock_send_length` and `sock:sock_recv_length` (Linux 6.3), one
//! run per send or receive call of any socket, in the caller's context. A TCP send names the
//! flow's owner (`owner`); a UDP call is counted (`udp_syscall`) when userspace counts UDP this
//! way. Everything else (a TCP receive, a Unix socket's call) leaves after one load, so a bulk
//! transfer pays one early return per call and nothing per packet or per buffer.
//!
//! One program per tracepoint for both jobs: a second program on the same tracepoint would be a
//! second run of every call. The tracefs records of these events name the socket, but a classic
//! twin could not read the caller's buffer for UDP's classifier: they are BTF only.

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use tracer_common::{udp::IPPROTO_UDP, IPPROTO_TCP};

use crate::maps::OFFSETS;
use crate::read::sock_u16;
use crate::{owner, udp_syscall};

#[btf_tracepoint(function = "sock_send_length")]
pub fn cct_send_call(ctx: BtfTracePointContext) -> u32 {
    let sk: *const u8 = ctx.arg(0);
    let protocol = sock_u16(sk, global!(OFFSETS.sk_protocol));
    if protocol == IPPROTO_TCP {
        owner::on_send(sk);
    } else if u32::from(protocol) == IPPROTO_UDP && udp_syscall::counting() {
        udp_syscall::on_call(&ctx, sk, true);
    }
    0
}

/// Attached only while UDP is counted per call: a receive names no owner.
#[btf_tracepoint(function = "sock_recv_length")]
pub fn cct_udp_recv(ctx: BtfTracePointContext) -> u32 {
    let sk: *const u8 = ctx.arg(0);
    if u32::from(sock_u16(sk, global!(OFFSETS.sk_protocol))) == IPPROTO_UDP && udp_syscall::counting() {
        udp_syscall::on_call(&ctx, sk, false);
    }
    0
}
