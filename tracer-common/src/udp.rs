//! Kernel/user types of the UDP accounting: per-syscall programs where the kernel has the
//! `sock_send_length`/`sock_recv_length` tracepoints (Linux 6.3), else `cgroup_skb` programs at
//! the cgroup v2 root.
//!
//! Every UDP socket that sends or receives gets a [`UdpSocketState`] in an LRU map keyed by its
//! cookie; one whose bytes in a window reach [`SkbConfig::heavy_bytes_per_window`] is marked
//! heavy and its cookie put in a small index map that userspace reads. Small UDP (DNS, NTP,
//! mDNS) never reaches the index, and the LRU bounds what it costs.

/// `IPPROTO_UDP`, as `bpf_sock.protocol` holds it.
pub const IPPROTO_UDP: u32 = 17;

/// Payload bytes kept from a datagram's start: enough for a QUIC long header up to its
/// version and connection-id lengths, and a WireGuard message's type and reserved bytes.
pub const UDP_HEAD_LEN: usize = 16;

/// Sockets the LRU table holds (heavy or not).
pub const UDP_MAX_SOCKETS: u32 = 8192;
/// Heavy sockets the index holds.
pub const UDP_MAX_HEAVY: u32 = 1024;

/// Default heavy threshold: 125 000 bytes in a one-second window (1 Mbit/s).
pub const DEFAULT_UDP_HEAVY_BYTES: u64 = 125_000;
pub const DEFAULT_UDP_WINDOW_NS: u64 = 1_000_000_000;

/// Indexes of the per-CPU `UDP_COUNTERS`.
pub mod udp_counter {
    /// UDP packets the programs saw (both directions).
    pub const PACKETS: u32 = 0;
    /// Sockets entered into the LRU table (a socket the LRU evicted and saw again counts again).
    pub const SOCKETS_NEW: u32 = 1;
    /// Sockets that became heavy.
    pub const HEAVY: u32 = 2;
    /// Heavy sockets the index could not take (full).
    pub const HEAVY_FULL: u32 = 3;
    /// LRU inserts that failed.
    pub const SOCKET_INSERT_FAILED: u32 = 4;
    /// IP bytes counted on receive (what decides whether the per-call receive hook stays).
    pub const RECEIVED_BYTES: u32 = 5;
    pub const COUNT: u32 = 6;
}

/// Direction bits of [`UdpSocketState::head_flags`]: the latest head of that direction was
/// taken in the current window.
pub mod udp_head {
    pub const TX_THIS_WINDOW: u8 = 1 << 0;
    pub const RX_THIS_WINDOW: u8 = 1 << 1;
}

/// Run-time settings of the `cgroup_skb` programs (read-only data, written before load).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkbConfig {
    pub heavy_bytes_per_window: u64,
    pub window_ns: u64,
    /// Byte offsets into `struct sock` and what hangs off it (from BTF; `crate::ABSENT` when
    /// unknown): `sk_socket`, `socket.file`, `file.f_inode`, `inode.i_ino`, `sk_net` ->
    /// `net.ns.inum`.
    pub sk_socket: u32,
    pub socket_file: u32,
    pub file_inode: u32,
    pub inode_ino: u32,
    pub skc_net: u32,
    pub net_ns_inum: u32,
    /// 1 when the kernel lets `cgroup_skb` programs call `bpf_get_current_pid_tgid` (not 5.10's or 6.1's):
    /// the egress program then names the sending process as a hint for the owner lookup.
    pub sender_pid: u32,
    pub _pad: u32,
}

pub const SKB_CONFIG_SIZE: usize = 48;
const _: () = assert!(core::mem::size_of::<SkbConfig>() == SKB_CONFIG_SIZE);

impl SkbConfig {
    pub const fn default_config() -> Self {
        Self {
            heavy_bytes_per_window: DEFAULT_UDP_HEAVY_BYTES,
            window_ns: DEFAULT_UDP_WINDOW_NS,
            sk_socket: crate::ABSENT,
            socket_file: crate::ABSENT,
            file_inode: crate::ABSENT,
            inode_ino: crate::ABSENT,
            skc_net: crate::ABSENT,
            net_ns_inum: crate::ABSENT,
            sender_pid: 0,
            _pad: 0,
        }
    }
}

/// Where the per-syscall programs (`sock:sock_send_length`, `sock:sock_recv_length`) find the
/// user buffer of the call they run in: offsets into the task's saved `struct pt_regs` (from BTF,
/// `crate::ABSENT` where unknown, so no payload sample is taken) and the architecture's syscall
/// numbers. Counting needs none of it; only the classifier's payload samples and the peer of an
/// unconnected socket do.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpSyscallConfig {
    /// `pt_regs` offsets of the syscall number and of its arguments 1 (the buffer or message)
    /// and 4 (`sendto`'s destination).
    pub regs_nr: u32,
    pub regs_arg1: u32,
    pub regs_arg4: u32,
    /// `struct udp_sock.gso_size`: a socket-wide `UDP_SEGMENT`.
    pub udp_gso_size: u32,
    /// Syscall numbers by [`udp_syscall`] index (`u32::MAX` where the architecture has none).
    pub nr: [u32; udp_syscall::COUNT],
}

pub const UDP_SYSCALL_CONFIG_SIZE: usize = 56;
const _: () = assert!(core::mem::size_of::<UdpSyscallConfig>() == UDP_SYSCALL_CONFIG_SIZE);

impl UdpSyscallConfig {
    pub const fn unresolved() -> Self {
        Self {
            regs_nr: crate::ABSENT,
            regs_arg1: crate::ABSENT,
            regs_arg4: crate::ABSENT,
            udp_gso_size: crate::ABSENT,
            nr: [u32::MAX; udp_syscall::COUNT],
        }
    }
}

/// The syscalls whose buffer the per-syscall programs can read, by how their argument 1 is
/// shaped: a plain buffer, an iovec array, a `msghdr`, or an `mmsghdr` array.
pub mod udp_syscall {
    pub const WRITE: usize = 0;
    pub const SENDTO: usize = 1;
    pub const WRITEV: usize = 2;
    pub const SENDMSG: usize = 3;
    pub const SENDMMSG: usize = 4;
    pub const READ: usize = 5;
    pub const RECVFROM: usize = 6;
    pub const READV: usize = 7;
    pub const RECVMSG: usize = 8;
    pub const RECVMMSG: usize = 9;
    pub const COUNT: usize = 10;
}

/// Bytes of IPv4 + UDP and IPv6 + UDP header each datagram carries: the per-syscall programs
/// see payload lengths and count IP bytes as the `cgroup_skb` ones do.
pub const UDP4_HEADERS: u32 = 28;
pub const UDP6_HEADERS: u32 = 48;

/// One UDP socket's accounting (value of the `UDP_SOCKETS` LRU map).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpSocketState {
    pub first_ns: u64,
    pub last_ns: u64,
    pub window_start_ns: u64,
    pub window_bytes: u64,
    /// IP bytes (headers included), packets (GSO segments counted one each).
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub rx_packets: u64,
    pub cgroup_id: u64,
    /// Inode of the socket (`/proc/PID/fd` -> `socket:[INODE]`), 0 when unread.
    pub inode: u64,
    pub netns: u32,
    /// Thread-group id of the last process seen sending (egress runs in its context), 0 if none.
    pub pid: u32,
    pub family: u16,
    pub local_port: u16,
    pub remote_port: u16,
    /// 1 once the socket reached the heavy threshold.
    pub heavy: u8,
    pub head_flags: u8,
    pub local_addr: [u8; 16],
    pub remote_addr: [u8; 16],
    /// UDP payload of the first datagram sent / received, and of the latest one per window.
    pub first_tx_head: [u8; UDP_HEAD_LEN],
    pub first_rx_head: [u8; UDP_HEAD_LEN],
    pub last_tx_head: [u8; UDP_HEAD_LEN],
    pub last_rx_head: [u8; UDP_HEAD_LEN],
    /// UDP payload lengths of those datagrams (0: none seen).
    pub first_tx_len: u16,
    pub first_rx_len: u16,
    pub last_tx_len: u16,
    pub last_rx_len: u16,
}

pub const UDP_SOCKET_STATE_SIZE: usize = 200;
const _: () = assert!(core::mem::size_of::<UdpSocketState>() == UDP_SOCKET_STATE_SIZE);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), only integers and byte arrays, explicit padding: every bit pattern is
    // valid and no byte is uninitialised.
    unsafe impl aya::Pod for super::SkbConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::UdpSocketState {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::UdpSyscallConfig {}
}
