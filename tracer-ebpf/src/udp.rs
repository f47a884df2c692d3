//! UDP accounting: `cgroup_skb` programs at the cgroup v2 root see every socket's packets in
//! every network namespace. A UDP socket's bytes and packets are counted per direction in an
//! LRU table keyed by its cookie; the first payload bytes of its first datagram each way, and of
//! one datagram each way per window, are kept for the userspace classifier (QUIC, WireGuard,
//! plain). A socket whose bytes in a window reach the threshold goes into `UDP_HEAVY`, the small
//! index userspace reads, so DNS, NTP and mDNS sockets cost a bounded LRU slot and nothing more.
//!
//! Both programs return 1 (allow) on every path: they only count, never drop.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{__sk_buff, bpf_sock},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_socket_cookie, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_sk_fullsock,
        bpf_skb_cgroup_id, bpf_skb_load_bytes,
    },
    macros::{cgroup_skb, map},
    maps::{HashMap, LruHashMap, PerCpuArray},
    programs::SkBuffContext,
};
use tracer_common::udp::{
    udp_counter, udp_head, SkbConfig, UdpSocketState, IPPROTO_UDP, UDP_HEAD_LEN, UDP_MAX_HEAVY, UDP_MAX_SOCKETS,
};
use tracer_common::{family, ABSENT};

#[no_mangle]
static SKB_CONFIG: SkbConfig = SkbConfig::default_config();

#[map]
static UDP_SOCKETS: LruHashMap<u64, UdpSocketState> = LruHashMap::with_max_entries(UDP_MAX_SOCKETS, 0);
/// Cookies of heavy sockets -> when they became heavy; userspace reads this and removes what
/// went quiet.
#[map]
static UDP_HEAVY: HashMap<u64, u64> = HashMap::with_max_entries(UDP_MAX_HEAVY, 0);
#[map]
static UDP_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(udp_counter::COUNT, 0);

const ALLOW: i32 = 1;
const ETH_P_IP: u32 = 0x0800;
const ETH_P_IPV6: u32 = 0x86dd;
const IPV6_HEADER_LEN: u32 = 40;
const UDP_HEADER_LEN: u32 = 8;

#[inline(always)]
fn bump(index: u32) {
    if let Some(slot) = UDP_COUNTERS.get_ptr_mut(index) {
        crate::count::add(slot, 1);
    }
}

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
    bump(udp_counter::PACKETS);
    // SAFETY: cgroup_skb programs may take the cookie of their skb's socket.
    let cookie = unsafe { bpf_get_socket_cookie(skb as *mut c_void) };
    // SAFETY: a helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: context field reads.
    let (len, segs, gso_size) = unsafe { ((*skb).len, (*skb).gso_segs.max(1), (*skb).gso_size) };

    let state = match UDP_SOCKETS.get_ptr_mut(cookie) {
        Some(p) => p,
        None => {
            let fresh = new_socket(skb, full, now);
            if UDP_SOCKETS.insert(cookie, fresh, 0).is_err() {
                bump(udp_counter::SOCKET_INSERT_FAILED);
                return;
            }
            bump(udp_counter::SOCKETS_NEW);
            match UDP_SOCKETS.get_ptr_mut(cookie) {
                Some(p) => p,
                None => return,
            }
        }
    };
    // The totals take atomic adds: one socket sends (or receives) on two CPUs at once, and a
    // receive can interrupt a send on one CPU.
    // SAFETY: `state` points into the map value, valid for this run; the fields are plain u64s.
    let (bytes, packets) = unsafe {
        if egress {
            (&raw mut (*state).tx_bytes, &raw mut (*state).tx_packets)
        } else {
            (&raw mut (*state).rx_bytes, &raw mut (*state).rx_packets)
        }
    };
    crate::count::add(bytes, u64::from(len));
    crate::count::add(packets, u64::from(segs));
    // SAFETY: as above. The rest is per-window bookkeeping where a lost update is noise.
    let state = unsafe { &mut *state };
    state.last_ns = now;
    if egress {
        state.pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    }
    // SAFETY: a read of a global the loader sets before attaching; volatile so the compiler
    // does not fold the value it had at build time.
    let window = unsafe { core::ptr::read_volatile(&SKB_CONFIG.window_ns) };
    if now.wrapping_sub(state.window_start_ns) >= window {
        state.window_start_ns = now;
        state.window_bytes = 0;
        state.head_flags = 0;
    }
    state.window_bytes += u64::from(len);

    let bit = if egress { udp_head::TX_THIS_WINDOW } else { udp_head::RX_THIS_WINDOW };
    let first_len = if egress { state.first_tx_len } else { state.first_rx_len };
    if state.head_flags & bit == 0 || first_len == 0 {
        state.head_flags |= bit;
        // The datagram's own length: one GSO segment's payload, else what the skb holds.
        take_head(ctx, skb, state, egress, len, segs, gso_size);
    }

    // SAFETY: as for `window_ns` above.
    let threshold = unsafe { core::ptr::read_volatile(&SKB_CONFIG.heavy_bytes_per_window) };
    if state.heavy == 0 && state.window_bytes >= threshold {
        state.heavy = 1;
        bump(udp_counter::HEAVY);
        if UDP_HEAVY.insert(cookie, now, 0).is_err() {
            bump(udp_counter::HEAVY_FULL);
        }
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
    let payload_len = payload_len.min(u32::from(u16::MAX)) as u16;
    if egress {
        if state.first_tx_len == 0 {
            state.first_tx_head = head;
            state.first_tx_len = payload_len.max(1);
        }
        state.last_tx_head = head;
        state.last_tx_len = payload_len;
    } else {
        if state.first_rx_len == 0 {
            state.first_rx_head = head;
            state.first_rx_len = payload_len.max(1);
        }
        state.last_rx_head = head;
        state.last_rx_len = payload_len;
    }
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

#[inline(always)]
fn cfg(f: &u32) -> u32 {
    // SAFETY: rodata global, read volatile as `global!` (in `read`) does.
    unsafe { core::ptr::read_volatile(f) }
}

/// A socket's first entry: who and where it is.
#[inline(always)]
fn new_socket(skb: *mut __sk_buff, full: *mut bpf_sock, now: u64) -> UdpSocketState {
    let mut s = UdpSocketState { first_ns: now, window_start_ns: now, ..UdpSocketState::default() };
    // SAFETY: a helper taking the context.
    s.cgroup_id = unsafe { bpf_skb_cgroup_id(skb) };
    let base = sock_address(full);
    if base.is_null() {
        return s;
    }
    let net = read_ptr(base, cfg(&SKB_CONFIG.skc_net));
    s.netns = read_u32(net, cfg(&SKB_CONFIG.net_ns_inum));
    let socket = read_ptr(base, cfg(&SKB_CONFIG.sk_socket));
    let file = read_ptr(socket, cfg(&SKB_CONFIG.socket_file));
    let inode = read_ptr(file, cfg(&SKB_CONFIG.file_inode));
    s.inode = read_u64(inode, cfg(&SKB_CONFIG.inode_ino));
    s
}

#[inline(always)]
fn read_u64(base: *const u8, off: u32) -> u64 {
    if base.is_null() || off == ABSENT {
        return 0;
    }
    // SAFETY: the helper validates the kernel address; a fault is an error, not a crash.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize) as *const u64) }.unwrap_or(0)
}

#[inline(always)]
fn read_u32(base: *const u8, off: u32) -> u32 {
    if base.is_null() || off == ABSENT {
        return 0;
    }
    // SAFETY: as in `read_u64`.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize) as *const u32) }.unwrap_or(0)
}

#[inline(always)]
fn read_ptr(base: *const u8, off: u32) -> *const u8 {
    read_u64(base, off) as *const u8
}
