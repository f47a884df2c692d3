//! UDP accounting shared by its two ways in: the per-syscall programs (`udp_syscall`, where UDP
//! is sent and received) and the `cgroup_skb` ones (`udp_skb`, on every packet, for kernels
//! before the syscall tracepoints). A UDP socket's bytes and packets are counted per direction in
//! an LRU table keyed by its cookie; the first payload bytes of its first datagram each way, and
//! of one datagram each way per window, are kept for the userspace classifier (QUIC, WireGuard,
//! plain). A socket whose bytes in a window reach the threshold goes into `UDP_HEAVY`, the small
//! index userspace reads, so DNS, NTP and mDNS sockets cost a bounded LRU slot and nothing more.

use aya_ebpf::{
    helpers::bpf_probe_read_kernel,
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray},
};
use tracer_common::udp::{
    udp_counter, udp_head, SkbConfig, UdpSocketState, UDP_HEAD_LEN, UDP_MAX_HEAVY, UDP_MAX_SOCKETS,
};
use tracer_common::ABSENT;

#[no_mangle]
pub(crate) static SKB_CONFIG: SkbConfig = SkbConfig::default_config();

#[map]
static UDP_SOCKETS: LruHashMap<u64, UdpSocketState> = LruHashMap::with_max_entries(UDP_MAX_SOCKETS, 0);
/// Cookies of heavy sockets -> when they became heavy; userspace reads this and removes what
/// went quiet.
#[map]
static UDP_HEAVY: HashMap<u64, u64> = HashMap::with_max_entries(UDP_MAX_HEAVY, 0);
#[map]
static UDP_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(udp_counter::COUNT, 0);

#[inline(always)]
pub(crate) fn bump(index: u32) {
    add(index, 1);
}

#[inline(always)]
fn add(index: u32, n: u64) {
    if let Some(slot) = UDP_COUNTERS.get_ptr_mut(index) {
        crate::count::add(slot, n);
    }
}

/// One direction's datagrams of one socket, as either way in saw them.
pub(crate) struct Traffic {
    pub(crate) cookie: u64,
    pub(crate) now: u64,
    pub(crate) egress: bool,
    /// IP bytes (headers included) and datagrams.
    pub(crate) bytes: u64,
    pub(crate) packets: u64,
    /// The process that sent or received them, 0 when the hook runs in no process's context.
    pub(crate) pid: u32,
}

/// Count `t` into its socket's entry (made by `fresh` when the socket is new), roll the window
/// and mark the socket heavy at the threshold. Returns the entry and whether this direction's
/// payload head is wanted (none taken yet, or none in this window); None when the table refused.
#[inline(always)]
pub(crate) fn tally(t: &Traffic, fresh: impl FnOnce() -> UdpSocketState) -> Option<(*mut UdpSocketState, bool)> {
    bump(udp_counter::PACKETS);
    if !t.egress {
        add(udp_counter::RECEIVED_BYTES, t.bytes);
    }
    let state = match UDP_SOCKETS.get_ptr_mut(t.cookie) {
        Some(p) => p,
        None => {
            if UDP_SOCKETS.insert(t.cookie, fresh(), 0).is_err() {
                bump(udp_counter::SOCKET_INSERT_FAILED);
                return None;
            }
            bump(udp_counter::SOCKETS_NEW);
            UDP_SOCKETS.get_ptr_mut(t.cookie)?
        }
    };
    // The totals take atomic adds: one socket sends (or receives) on two CPUs at once, and a
    // receive can interrupt a send on one CPU.
    // SAFETY: `state` points into the map value, valid for this run; the fields are plain u64s.
    let (bytes, packets) = unsafe {
        if t.egress {
            (&raw mut (*state).tx_bytes, &raw mut (*state).tx_packets)
        } else {
            (&raw mut (*state).rx_bytes, &raw mut (*state).rx_packets)
        }
    };
    crate::count::add(bytes, t.bytes);
    crate::count::add(packets, t.packets);
    // SAFETY: as above. The rest is per-window bookkeeping where a lost update is noise.
    let s = unsafe { &mut *state };
    s.last_ns = t.now;
    if t.pid != 0 {
        s.pid = t.pid;
    }
    // SAFETY: a read of a global the loader sets before attaching; volatile so the compiler
    // does not fold the value it had at build time.
    let window = unsafe { core::ptr::read_volatile(&SKB_CONFIG.window_ns) };
    if t.now.wrapping_sub(s.window_start_ns) >= window {
        s.window_start_ns = t.now;
        s.window_bytes = 0;
        s.head_flags = 0;
    }
    s.window_bytes += t.bytes;
    // SAFETY: as for `window_ns` above.
    let threshold = unsafe { core::ptr::read_volatile(&SKB_CONFIG.heavy_bytes_per_window) };
    if s.heavy == 0 && s.window_bytes >= threshold {
        s.heavy = 1;
        bump(udp_counter::HEAVY);
        if UDP_HEAVY.insert(t.cookie, t.now, 0).is_err() {
            bump(udp_counter::HEAVY_FULL);
        }
    }
    let bit = head_bit(t.egress);
    let first_len = if t.egress { s.first_tx_len } else { s.first_rx_len };
    Some((state, s.head_flags & bit == 0 || first_len == 0))
}

#[inline(always)]
pub(crate) fn head_bit(egress: bool) -> u8 {
    if egress {
        udp_head::TX_THIS_WINDOW
    } else {
        udp_head::RX_THIS_WINDOW
    }
}

/// Keep `head` (a datagram's first payload bytes, `payload_len` long) as this direction's latest
/// and, if none was kept yet, its first.
#[inline(always)]
pub(crate) fn store_head(state: &mut UdpSocketState, egress: bool, head: [u8; UDP_HEAD_LEN], payload_len: u32) {
    state.head_flags |= head_bit(egress);
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
}

/// A socket's first entry: who and where it is. `sk` is the kernel address of its `struct sock`.
#[inline(always)]
pub(crate) fn new_socket(sk: *const u8, now: u64, cgroup_id: u64) -> UdpSocketState {
    let mut s = UdpSocketState { first_ns: now, window_start_ns: now, cgroup_id, ..UdpSocketState::default() };
    if sk.is_null() {
        return s;
    }
    let net = read_ptr(sk, cfg(&SKB_CONFIG.skc_net));
    s.netns = read_u32(net, cfg(&SKB_CONFIG.net_ns_inum));
    let socket = read_ptr(sk, cfg(&SKB_CONFIG.sk_socket));
    let file = read_ptr(socket, cfg(&SKB_CONFIG.socket_file));
    let inode = read_ptr(file, cfg(&SKB_CONFIG.file_inode));
    s.inode = read_u64(inode, cfg(&SKB_CONFIG.inode_ino));
    s
}

#[inline(always)]
fn cfg(f: &u32) -> u32 {
    // SAFETY: rodata global, read volatile as `global!` (in `read`) does.
    unsafe { core::ptr::read_volatile(f) }
}

#[inline(always)]
pub(crate) fn read_u64(base: *const u8, off: u32) -> u64 {
    if base.is_null() || off == ABSENT {
        return 0;
    }
    // SAFETY: the helper validates the kernel address; a fault is an error, not a crash.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize) as *const u64) }.unwrap_or(0)
}

#[inline(always)]
pub(crate) fn read_u32(base: *const u8, off: u32) -> u32 {
    if base.is_null() || off == ABSENT {
        return 0;
    }
    // SAFETY: as in `read_u64`.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize) as *const u32) }.unwrap_or(0)
}

#[inline(always)]
pub(crate) fn read_ptr(base: *const u8, off: u32) -> *const u8 {
    read_u64(base, off) as *const u8
}
