//! UDP accounting where UDP is sent and received: the socket-call hooks (`socket_call`) hand
//! every UDP `sendmsg`/`recvmsg` here, so nothing runs per packet. Each call's payload length
//! is counted as IP bytes and datagrams (a `UDP_SEGMENT` send, or a `UDP_GRO` receive, as the
//! datagrams its segment size cuts it into); the payload head the classifier wants is read from
//! the caller's own buffer, which the saved user registers of the syscall point at.

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_ktime_get_ns,
        bpf_probe_read_user, bpf_probe_read_user_buf, bpf_task_pt_regs,
    },
    macros::map,
    maps::Array,
    programs::BtfTracePointContext,
};
use tracer_common::udp::{udp_syscall, UdpSocketState, UdpSyscallConfig, UDP4_HEADERS, UDP6_HEADERS, UDP_HEAD_LEN};
use tracer_common::{family, ABSENT};

use crate::maps::OFFSETS;
use crate::read::{btf_cookie, read, read_bytes, sock_u16};
use crate::udp::{new_socket, store_head, tally, Traffic};

/// Filled in by userspace before load (read-only data).
#[no_mangle]
static UDP_SYSCALL_CONFIG: UdpSyscallConfig = UdpSyscallConfig::unresolved();

const MSG_PEEK: i32 = 2;
const SOL_UDP: u32 = 17;
const UDP_SEGMENT: u32 = 103;
const UDP_GRO: u32 = 104;
/// `struct msghdr` (64-bit) field offsets, and the size of one `struct mmsghdr`.
const MSG_NAME: u64 = 0;
const MSG_IOV: u64 = 16;
const MSG_CONTROL: u64 = 32;
const MSG_CONTROLLEN: u64 = 40;
/// `struct cmsghdr`: `cmsg_len` (8 bytes), level and type (4 each), then the data.
const CMSG_HEADER: u64 = 16;
/// The longest payload one datagram carries on a 1500-byte IPv4 path: a longer call may be a GSO
/// train (or a GRO batch) and is looked at for its segment size. (A train of segments this short
/// in all counts as one datagram.)
const ONE_DATAGRAM_MAX: u32 = 1500 - UDP4_HEADERS;
/// Control messages looked through for a segment size: a QUIC stack puts ECN and packet-info
/// ones beside it.
const CMSG_SCAN: usize = 4;

/// Index 0 is 1 once userspace chose to count UDP per socket call (the receive hook attached
/// beside the send hook). Until then, and when UDP is counted per packet or not at all, the send
/// hook (attached for TCP owners in any case) leaves UDP calls alone.
#[map]
static UDP_BY_CALL: Array<u32> = Array::with_max_entries(1, 0);

/// Whether UDP calls are to be counted here.
#[inline(always)]
pub(crate) fn counting() -> bool {
    UDP_BY_CALL.get(0).is_some_and(|on| *on != 0)
}

#[inline(always)]
fn cfg(f: &u32) -> u32 {
    // SAFETY: rodata global, read volatile as `global!` (in `read`) does.
    unsafe { core::ptr::read_volatile(f) }
}

/// The user memory the current syscall passes: its data buffer, the destination it names (0:
/// none), and its control messages (0: none).
#[derive(Clone, Copy, Default)]
struct UserCall {
    buf: u64,
    name: u64,
    control: u64,
    control_len: u64,
}

#[inline(always)]
fn user_u64(addr: u64) -> u64 {
    if addr == 0 {
        return 0;
    }
    // SAFETY: the helper checks the user address; a fault returns an error, not a crash.
    unsafe { bpf_probe_read_user(addr as *const u64) }.unwrap_or(0)
}

/// Which syscall the current task is in and where its arguments point, from the user registers
/// the kernel saved at entry. A hit from a kernel caller (no such syscall) gives no buffer.
#[inline(always)]
fn user_call() -> UserCall {
    let (nr_at, arg1_at, arg4_at) =
        (cfg(&UDP_SYSCALL_CONFIG.regs_nr), cfg(&UDP_SYSCALL_CONFIG.regs_arg1), cfg(&UDP_SYSCALL_CONFIG.regs_arg4));
    if nr_at == ABSENT || arg1_at == ABSENT {
        return UserCall::default();
    }
    // SAFETY: the current task, as a BTF pointer the next helper takes; tracing programs run in
    // a task's context.
    let task = unsafe { bpf_get_current_task_btf() };
    // SAFETY: `task` came from the helper above; the result is that task's saved registers.
    let regs = unsafe { bpf_task_pt_regs(task) } as *const u8;
    let nr = read::<u64>(regs, nr_at) as u32;
    let arg1 = read::<u64>(regs, arg1_at);
    let is = |which: usize| nr == cfg(&UDP_SYSCALL_CONFIG.nr[which]);
    if is(udp_syscall::WRITE) || is(udp_syscall::READ) || is(udp_syscall::RECVFROM) {
        return UserCall { buf: arg1, ..UserCall::default() };
    }
    if is(udp_syscall::SENDTO) {
        let name = if arg4_at == ABSENT { 0 } else { read::<u64>(regs, arg4_at) };
        return UserCall { buf: arg1, name, ..UserCall::default() };
    }
    if is(udp_syscall::WRITEV) || is(udp_syscall::READV) {
        return UserCall { buf: user_u64(arg1), ..UserCall::default() };
    }
    // The message of `sendmmsg`/`recvmmsg` taken is the first: its head stands for the batch.
    let messages = [udp_syscall::SENDMSG, udp_syscall::SENDMMSG, udp_syscall::RECVMSG, udp_syscall::RECVMMSG];
    if messages.iter().any(|&m| is(m)) {
        let iov = user_u64(arg1 + MSG_IOV);
        return UserCall {
            buf: user_u64(iov),
            name: user_u64(arg1 + MSG_NAME),
            control: user_u64(arg1 + MSG_CONTROL),
            control_len: user_u64(arg1 + MSG_CONTROLLEN),
        };
    }
    UserCall::default()
}

/// The `SOL_UDP` control message `kind` carries (a segment size), 0 without one. A receive's
/// control messages are already in the user's buffer when the tracepoint fires.
#[inline(always)]
fn segment_from_control(call: &UserCall, kind: u32) -> u32 {
    let mut at = 0u64;
    for _ in 0..CMSG_SCAN {
        if call.control == 0 || at + CMSG_HEADER + 2 > call.control_len {
            return 0;
        }
        let len = user_u64(call.control + at);
        let level_type = user_u64(call.control + at + 8);
        if level_type as u32 == SOL_UDP && (level_type >> 32) as u32 == kind {
            // SAFETY: as in `user_u64`. UDP_SEGMENT is a u16 and UDP_GRO an int below 65 536:
            // on the little-endian hosts cctrace builds for, both start with the value's u16.
            return u32::from(
                unsafe { bpf_probe_read_user((call.control + at + CMSG_HEADER) as *const u16) }.unwrap_or(0),
            );
        }
        if len < CMSG_HEADER {
            return 0;
        }
        at += (len + 7) & !7;
    }
    0
}

/// Count one send (`egress`) or receive call of UDP socket `sk`, the socket-call hook's context.
#[inline(always)]
pub(crate) fn on_call(ctx: &BtfTracePointContext, sk: *const u8, egress: bool) {
    let ret: i32 = ctx.arg(1);
    let flags: i32 = ctx.arg(2);
    // An error, an empty datagram, or a peek that leaves the datagram queued for its real read.
    if ret <= 0 || (!egress && flags & MSG_PEEK != 0) {
        return;
    }
    let payload = ret as u32;
    // Only a call longer than one datagram on a 1500-byte path can be a GSO train or a GRO batch:
    // shorter ones (most) skip the reads of the segment size, each a helper call.
    let (segment, call) = if payload <= ONE_DATAGRAM_MAX {
        (0, None)
    } else {
        let socket_segment = if egress { u32::from(read::<u16>(sk, cfg(&UDP_SYSCALL_CONFIG.udp_gso_size))) } else { 0 };
        if socket_segment > 0 {
            (socket_segment, None)
        } else {
            let call = user_call();
            (segment_from_control(&call, if egress { UDP_SEGMENT } else { UDP_GRO }), Some(call))
        }
    };
    let packets = if segment > 0 && payload > segment { payload.div_ceil(segment) } else { 1 };
    let fam = sock_u16(sk, global!(OFFSETS.skc_family));
    let headers = if fam == family::AF_INET6 { UDP6_HEADERS } else { UDP4_HEADERS };
    let now = now_ns();
    let traffic = Traffic {
        cookie: btf_cookie(sk),
        now,
        egress,
        bytes: u64::from(payload) + u64::from(headers) * u64::from(packets),
        packets: u64::from(packets),
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
    };
    // SAFETY: a helper without preconditions; syscalls run in the caller's cgroup.
    let fresh = || new_socket(sk, now, unsafe { bpf_get_current_cgroup_id() });
    let Some((state, wants_head)) = tally(&traffic, fresh) else { return };
    if wants_head {
        let datagram = if packets > 1 { segment } else { payload };
        let call = match call {
            Some(call) => call,
            None => user_call(),
        };
        // SAFETY: `state` points into the map value, valid for this run.
        take_head(unsafe { &mut *state }, sk, fam, egress, &call, datagram);
    }
}

#[inline(always)]
fn now_ns() -> u64 {
    // SAFETY: a helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// Copy the datagram's first payload bytes from the caller's buffer, and the socket's endpoints
/// (an unconnected sender's peer from the destination it names), into `state`.
#[inline(always)]
fn take_head(state: &mut UdpSocketState, sk: *const u8, fam: u16, egress: bool, call: &UserCall, datagram: u32) {
    if call.buf == 0 {
        return;
    }
    let mut head = [0u8; UDP_HEAD_LEN];
    // SAFETY: the helper checks the user address; a fault (a page not resident) leaves the head
    // untaken, and a later datagram is tried.
    if unsafe { bpf_probe_read_user_buf(call.buf as *const u8, &mut head) }.is_err() {
        return;
    }
    // Bytes past a short datagram are whatever the buffer held before: not the datagram's.
    for (i, b) in head.iter_mut().enumerate() {
        if i as u32 >= datagram {
            *b = 0;
        }
    }
    store_head(state, egress, head, datagram);
    endpoints(state, sk, fam, if egress { call.name } else { 0 });
}

#[inline(always)]
fn endpoints(state: &mut UdpSocketState, sk: *const u8, fam: u16, name: u64) {
    state.family = fam;
    let mut local = [0u8; 16];
    let mut remote = [0u8; 16];
    if fam == family::AF_INET6 {
        read_bytes(sk, global!(OFFSETS.skc_v6_rcv_saddr), &mut local);
        read_bytes(sk, global!(OFFSETS.skc_v6_daddr), &mut remote);
    } else {
        read_bytes(sk, global!(OFFSETS.skc_rcv_saddr), &mut local[..4]);
        read_bytes(sk, global!(OFFSETS.skc_daddr), &mut remote[..4]);
    }
    state.local_addr = local;
    state.local_port = read::<u16>(sk, global!(OFFSETS.skc_num));
    let dport = u16::from_be(read::<u16>(sk, global!(OFFSETS.skc_dport)));
    if dport != 0 || name == 0 {
        state.remote_addr = remote;
        state.remote_port = dport;
        return;
    }
    // An unconnected socket: the peer is the destination this call names (`struct sockaddr_in`
    // or `sockaddr_in6`: family, port, then the address at 4 or 8).
    // SAFETY: as in `user_u64`.
    let Ok(head) = (unsafe { bpf_probe_read_user(name as *const [u8; 24]) }) else { return };
    let name_family = u16::from_ne_bytes([head[0], head[1]]);
    let mut peer = [0u8; 16];
    if name_family == family::AF_INET {
        peer[..4].copy_from_slice(&head[4..8]);
    } else if name_family == family::AF_INET6 {
        peer.copy_from_slice(&head[8..24]);
    } else {
        return;
    }
    state.remote_addr = peer;
    state.remote_port = u16::from_be_bytes([head[2], head[3]]);
}
