//! UDP accounting on every packet, for kernels without the per-syscall tracepoints
//! (`sock_send_length`, Linux 6.3): `cgroup_skb` programs at the cgroup v2 root see every
//! socket's packets in every network namespace, TCP's included, and count the UDP ones into the
//! shared table (`udp`).
//!
//! Both programs return 1 (allow) on every path: they only count, never drop.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{__sk_buff, bpf_sock},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_socket_cookie, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_sk_fullsock,
        bpf_skb_cgroup_id, bpf_skb_load_bytes,
    },
    macros::cgroup_skb,
    programs::SkBuffContext,
};
use tracer_common::family;
use tracer_common::udp::{UdpSocketState, IPPROTO_UDP, UDP_HEAD_LEN};

use crate::udp::{new_socket, store_head, tally, Traffic, SKB_CONFIG};

const ALLOW: i32 = 1;
const ETH_P_IP: u32 = 0x0800;
const ETH_P_IPV6: u32 = 0x86dd;
const IPV6_HEADER_LEN: u32 = 40;
const UDP_HEADER_LEN: u32 = 8;

#[cgroup_skb]
pub fn cct_udp_egress(ctx: SkBuffContext) -> i32 {
    account(&ctx, true);
    ALLOW
}

#[cgroup_skb]
pub fn cct_udp_ingress(ctx: SkBuffContext) -> i32 {
    account(&ctx, false);
    ALLOW
}

/// Where the packet's IP and UDP headers are: (IP header length, family), or None when the
/// packet is not IPv4/IPv6 UDP the programs can read.
#[inline(always)]
fn ip_header(ctx: &SkBuffContext, skb: *mut __sk_buff) -> Option<(u32, u16)> {
    // SAFETY: `skb` is the program's context; `protocol` is a readable context field.
    let proto = u32::from(u16::from_be(unsafe { (*skb).protocol } as u16));
    if proto == ETH_P_IP {
        let first: u8 = ctx.load(0).ok()?;
        let ihl = u32::from(first & 0x0f) * 4;
        let l4: u8 = ctx.load(9).ok()?;
        if ihl < 20 || u32::from(l4) != IPPROTO_UDP {
            return None;
        }
        Some((ihl, family::AF_INET))
    } else if proto == ETH_P_IPV6 {
        // Extension headers before UDP are rare on UDP flows; such packets are not classified.
        let next: u8 = ctx.load(6).ok()?;
        if u32::from(next) != IPPROTO_UDP {
            return None;
        }
        Some((IPV6_HEADER_LEN, family::AF_INET6))
    } else {
        None
    }
}

#[inline(always)]
fn account(ctx: &SkBuffContext, egress: bool) {
    let skb = ctx.skb.skb;
    // SAFETY: context field reads the verifier rewrites; `sk` may be NULL.
    let sk = unsafe { (*skb).__bindgen_anon_2.sk };
    if sk.is_null() {
        return;
    }
    // SAFETY: `sk` is the context's socket pointer, checked non-NULL.
    let full = unsafe { bpf_sk_fullsock(sk) };
    if full.is_null() {
        return;
    }
    // SAFETY: a full socket from bpf_sk_fullsock; `protocol` is readable.
    let protocol = unsafe { (*full).protocol };
    if protocol != IPPROTO_UDP {
        return;
    }
    // SAFETY: cgroup_skb programs may take the cookie of their skb's socket.
    let cookie = unsafe { bpf_get_socket_cookie(skb as *mut c_void) };
    // SAFETY: a helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: context field reads.
    let (len, segs, gso_size) = unsafe { ((*skb).len, (*skb).gso_segs.max(1), (*skb).gso_size) };
    // Egress runs in the sender's context; ingress in whatever softirq took the packet. Where the
    // kernel refuses the helper here (6.1), userspace leaves `sender_pid` 0 and the verifier,
    // which knows the read-only value, never reaches the call.
    // SAFETY: rodata global, read volatile as `global!` (in `read`) does.
    let sender_pid = unsafe { core::ptr::read_volatile(&SKB_CONFIG.sender_pid) };
    let pid = if egress && sender_pid != 0 { (bpf_get_current_pid_tgid() >> 32) as u32 } else { 0 };
    let traffic = Traffic { cookie, now, egress, bytes: u64::from(len), packets: u64::from(segs), pid };
    // SAFETY: a helper taking the context.
    let fresh = || new_socket(sock_address(full), now, unsafe { bpf_skb_cgroup_id(skb) });
    let Some((state, wants_head)) = tally(&traffic, fresh) else { return };
    if wants_head {
        // SAFETY: `state` points into the map value, valid for this run.
        take_head(ctx, skb, unsafe { &mut *state }, egress, len, segs, gso_size);
    }
}

/// Copy the datagram's first payload bytes, its payload length and its endpoints into `state`.
#[inline(always)]
fn take_head(
    ctx: &SkBuffContext,
    skb: *mut __sk_buff,
    state: &mut UdpSocketState,
    egress: bool,
    len: u32,
    segs: u32,
    gso_size: u32,
) {
    let Some((ihl, fam)) = ip_header(ctx, skb) else { return };
    let payload_at = ihl + UDP_HEADER_LEN;
    let payload_len = if segs > 1 && gso_size > 0 { gso_size } else { len.saturating_sub(payload_at) };
    let mut head = [0u8; UDP_HEAD_LEN];
    // SAFETY: the helper checks the offset and length against the packet; a short datagram
    // leaves the head zeroed.
    unsafe {
        bpf_skb_load_bytes(skb as *const c_void, payload_at, head.as_mut_ptr() as *mut c_void, UDP_HEAD_LEN as u32);
    }
    store_head(state, egress, head, payload_len);
    // Endpoints from the packet: an unconnected socket (a QUIC server) has no peer of its own.
    state.family = fam;
    let (src_at, dst_at, addr_len) = if fam == family::AF_INET { (12, 16, 4) } else { (8, 24, 16) };
    let (local_at, remote_at) = if egress { (src_at, dst_at) } else { (dst_at, src_at) };
    let mut local = [0u8; 16];
    let mut remote = [0u8; 16];
    if addr_len == 4 {
        if let (Ok(l), Ok(r)) = (ctx.load::<[u8; 4]>(local_at), ctx.load::<[u8; 4]>(remote_at)) {
            local[..4].copy_from_slice(&l);
            remote[..4].copy_from_slice(&r);
        }
    } else if let (Ok(l), Ok(r)) = (ctx.load::<[u8; 16]>(local_at), ctx.load::<[u8; 16]>(remote_at)) {
        local = l;
        remote = r;
    }
    state.local_addr = local;
    state.remote_addr = remote;
    let ports: Result<[u8; 4], _> = ctx.load(ihl as usize);
    if let Ok(p) = ports {
        let (sport, dport) = (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]));
        (state.local_port, state.remote_port) = if egress { (sport, dport) } else { (dport, sport) };
    }
}

/// The kernel address of a socket the verifier hands out as `bpf_sock`: it forbids arithmetic on
/// that pointer, but copied through the stack it is a plain address the kernel-read helper takes.
#[inline(always)]
fn sock_address(full: *mut bpf_sock) -> *const u8 {
    let raw = full as u64;
    // SAFETY: reads the 8-byte stack slot holding the pointer into a scalar.
    unsafe { bpf_probe_read_kernel(&raw as *const u64) }.unwrap_or(0) as *const u8
}
