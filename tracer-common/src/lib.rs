//! Types shared by the eBPF programs and userspace.
//!
//! Everything here crosses the kernel/user boundary byte for byte, so every type is
//! `#[repr(C)]`, has explicit padding, holds no `bool`, `Option` or payload enum, and has
//! its size asserted at compile time. A record starts with a [`RecordHeader`] whose
//! `version` lets a reader (live or a recording) refuse what it does not understand.
//!
//! One job, one file: this is the whole wire contract between the two sides (records, maps'
//! values, settings, the ids both index by), kept together so that a layout change is read,
//! versioned and reviewed in one place; only the UDP accounting's records live in [`udp`], and
//! deep mode's decision record (written by C programs, checked against the C header) in [`deep`].
#![no_std]

/// Version of the ring-buffer record layout. Bump on any layout change.
pub const WIRE_VERSION: u16 = 7;

/// Nanoseconds per second: kernel timestamps are CLOCK_MONOTONIC nanoseconds.
pub const NS_PER_SEC: u64 = 1_000_000_000;

/// Default ring-buffer size in bytes (the `EVENTS` map; userspace may resize it before load).
pub const DEFAULT_RING_BYTES: u32 = 8 << 20;

/// Default minimum spacing of periodic samples per flow (retransmissions, CA-state changes,
/// opens and closes are sampled at once).
pub const DEFAULT_SAMPLE_INTERVAL_NS: u64 = 100_000_000;

/// `TCP_INFINITE_SSTHRESH`: ssthresh before the first loss (`ss` leaves it out then).
pub const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// `IPPROTO_TCP`, as `sk_protocol` holds it.
pub const IPPROTO_TCP: u16 = 6;

/// Address families as `skc_family` holds them.
pub mod family {
    pub const AF_INET: u16 = 2;
    pub const AF_INET6: u16 = 10;
}

/// TCP states (`include/net/tcp_states.h`).
pub mod tcp_state {
    pub const ESTABLISHED: u8 = 1;
    pub const SYN_SENT: u8 = 2;
    pub const SYN_RECV: u8 = 3;
    pub const FIN_WAIT1: u8 = 4;
    pub const FIN_WAIT2: u8 = 5;
    pub const TIME_WAIT: u8 = 6;
    pub const CLOSE: u8 = 7;
    pub const CLOSE_WAIT: u8 = 8;
    pub const LAST_ACK: u8 = 9;
    pub const LISTEN: u8 = 10;
    pub const CLOSING: u8 = 11;
    pub const NEW_SYN_RECV: u8 = 12;
    pub const BOUND_INACTIVE: u8 = 13;
}

/// Congestion-avoidance states (`enum tcp_ca_state`), as `icsk_ca_state` holds them.
pub mod ca_state {
    pub const CA_OPEN: u8 = 0;
    pub const CA_DISORDER: u8 = 1;
    pub const CA_CWR: u8 = 2;
    pub const CA_RECOVERY: u8 = 3;
    pub const CA_LOSS: u8 = 4;
}

/// Record kinds carried in [`RecordHeader::kind`].
pub mod record_kind {
    pub const FLOW_SAMPLE: u16 = 1;
    /// A classic tracepoint's record as the kernel wrote it ([`TraceRecord`]): the programs of
    /// the mode without BTF, which read no kernel struct.
    pub const TRACE_RECORD: u16 = 2;
}

/// Why the kernel emitted a sample.
pub mod reason {
    /// Sampling interval elapsed on an ACK/segment arrival (`tcp:tcp_probe`).
    pub const PERIODIC: u8 = 1;
    /// A segment was retransmitted (`tcp:tcp_retransmit_skb`).
    pub const RETRANSMIT: u8 = 2;
    /// The congestion-avoidance state changed (`tcp:tcp_cong_state_set`).
    pub const CA_STATE: u8 = 3;
    /// The TCP state machine moved (`sock:inet_sock_set_state`).
    pub const STATE_CHANGE: u8 = 4;
    /// The socket is being destroyed (`tcp:tcp_destroy_sock`).
    pub const DESTROY: u8 = 5;
    /// Start-up snapshot of an existing socket (`iter/tcp`), so idle flows show at once.
    pub const SNAPSHOT: u8 = 6;
    /// A receiving socket finished measuring its sender's rate across a loss episode (see
    /// [`RecvCounts`]): sampled at once, so every episode's figures reach userspace.
    pub const RECV_EPISODE: u8 = 7;
}

/// Bits of [`FlowSample::flags`].
pub mod flag {
    /// `tcp_sock.rate_app_limited`: the last delivery-rate sample was application limited.
    pub const APP_LIMITED: u8 = 1 << 0;
    /// `tcp_sock.is_cwnd_limited`: the flow filled its congestion window in the last window.
    pub const CWND_LIMITED: u8 = 1 << 1;
    /// `pid`/`comm` were captured in process context (connect() or a send), so they name the owner.
    pub const OWNER_KNOWN: u8 = 1 << 2;
    /// The cookie came from `skc_cookie` read in a classic tracepoint, not from the helper.
    pub const CLASSIC_HOOK: u8 = 1 << 3;
    /// `SOCK_NOSPACE` in the socket's `struct socket` flags: a writer found the send buffer
    /// full and waits for room (set by `tcp_sendmsg` and `tcp_poll`, cleared when a third of
    /// the buffer is free again). Read with periodic samples only.
    pub const WRITER_BLOCKED: u8 = 1 << 4;
    /// An established connection that negotiated no window scaling (`tcp_sock.rx_opt`'s
    /// `wscale_ok` clear): the peer's window can never pass 64 KiB. Never set where the kernel's
    /// BTF lacks the field.
    pub const WINDOW_UNSCALED: u8 = 1 << 5;
}

/// Bits of [`FlowSample::rcv_flags`].
pub mod rcv_flag {
    /// The socket's segments were counted one by one (`tcp_probe` with its `sk_buff`: BTF
    /// tracepoints only), so [`super::FlowSample::rcv`] holds real counts.
    pub const COUNTED: u8 = 1 << 0;
    /// Data waits in the out-of-order queue: a hole is open now.
    pub const OUT_OF_ORDER: u8 = 1 << 1;
    /// The connection's timestamps count microseconds (`tcp_usec_ts`, Linux 6.7), not
    /// milliseconds: the unit of [`super::FlowSample::seg_tsval`].
    pub const USEC_TS: u8 = 1 << 2;
}

/// Bits of [`FlowSample::userlocks`] (`sk_userlocks`, `include/net/sock.h`): the application
/// set the buffer itself (`SO_SNDBUF` / `SO_RCVBUF`), which turns the kernel's autotuning of
/// it off.
pub mod userlock {
    pub const SNDBUF: u8 = 1;
    pub const RCVBUF: u8 = 2;
}

/// `SOCK_NOSPACE`: its bit number in `struct socket`'s `flags` (`include/linux/net.h`, the
/// same since 2.6).
pub const SOCK_NOSPACE_BIT: u32 = 2;

/// The kernel hooks cctrace attaches. One enum names each hook for both sides: its
/// [`HookId::bit`] in [`Config::hooks`] and its [`HookId::index`] into
/// [`ClassicTracepointOffsets::skaddr`] and the loader's table, so the eBPF programs and the
/// loader cannot disagree about which is which.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookId {
    /// `tcp:tcp_probe`: periodic samples.
    TcpProbe = 0,
    /// `tcp:tcp_retransmit_skb`.
    Retransmit = 1,
    /// `tcp:tcp_cong_state_set`.
    CongState = 2,
    /// `sock:inet_sock_set_state`.
    SetState = 3,
    /// `tcp:tcp_destroy_sock`.
    Destroy = 4,
    /// `sock:sock_send_length`: no sample; the owner of a TCP flow seen sending (and UDP's
    /// sends, when UDP is counted per socket call).
    SendCall = 5,
}

impl HookId {
    pub const COUNT: usize = 6;
    /// Every hook, in index order.
    pub const ALL: [HookId; HookId::COUNT] =
        [HookId::TcpProbe, HookId::Retransmit, HookId::CongState, HookId::SetState, HookId::Destroy, HookId::SendCall];
    /// Every hook's bit.
    pub const ALL_BITS: u32 = (1 << HookId::COUNT) - 1;

    /// Position in [`HookId::ALL`], [`ClassicTracepointOffsets::skaddr`] and the loader's table.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// This hook's bit in [`Config::hooks`].
    pub const fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

// `ALL` lists every id once, in index order (so `ALL[id.index()] == id`), and `ALL_BITS` is
// exactly their bits.
const _: () = {
    let mut bits = 0;
    let mut i = 0;
    while i < HookId::COUNT {
        assert!(HookId::ALL[i].index() == i);
        bits |= HookId::ALL[i].bit();
        i += 1;
    }
    assert!(bits == HookId::ALL_BITS);
};

/// Indexes of the per-CPU counters in the `COUNTERS` map.
pub mod counter {
    /// Ring-buffer reservations that failed: each one is a sample lost.
    pub const RINGBUF_LOST: u32 = 0;
    /// Samples written into the ring buffer.
    pub const EMITTED: u32 = 1;
    /// Kernel reads (`bpf_probe_read_kernel`) that failed.
    pub const READ_ERRORS: u32 = 2;
    /// Flow-state map insertions that failed (map full).
    pub const FLOW_MAP_FULL: u32 = 3;
    /// Samples not written because the flow is outside the filter (`--cgroup`, `--container`,
    /// `--netns`).
    pub const FILTERED: u32 = 4;
    /// Runs of `tcp_probe`'s program, counted roughly (a plain add: a nested run may be lost),
    /// for userspace to weigh detaching it between sampling windows against the runs saved.
    pub const PROBE_RUNS: u32 = 5;
    pub const COUNT: u32 = 6;
}

/// Every record begins with this.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct RecordHeader {
    pub version: u16,
    pub kind: u16,
    /// Size in bytes of the whole record, header included.
    pub size: u32,
}

/// One snapshot of a TCP socket, read from `struct sock`/`tcp_sock` by the eBPF programs.
///
/// Units are the kernel's: microseconds for RTTs, bytes, segments; `chrono_*` in jiffies.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct FlowSample {
    pub header: RecordHeader,
    /// `bpf_ktime_get_ns()` at the hook (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    /// Socket cookie: unique for the life of the host.
    pub cookie: u64,
    /// cgroup v2 id of the socket (`sk_cgrp_data`), 0 when unknown.
    pub cgroup_id: u64,
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_retrans: u64,
    /// `sk_pacing_rate`, bytes per second.
    pub pacing_rate: u64,
    /// Source and destination address; IPv4 in the first 4 bytes.
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    /// Congestion-control algorithm name (`icsk_ca_ops->name`), NUL padded.
    pub cc_name: [u8; 16],
    /// Owner's command name when `flag::OWNER_KNOWN`.
    pub comm: [u8; 16],
    /// Inode number of the socket's network namespace.
    pub netns: u32,
    pub pid: u32,
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
    /// Smoothed RTT, microseconds (already shifted).
    pub srtt_us: u32,
    /// RTT mean deviation, microseconds (already shifted).
    pub rttvar_us: u32,
    pub min_rtt_us: u32,
    pub mss: u32,
    pub packets_out: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub retrans_out: u32,
    pub total_retrans: u32,
    pub delivered: u32,
    pub rate_delivered: u32,
    pub rate_interval_us: u32,
    /// Peer's advertised receive window, bytes.
    pub snd_wnd: u32,
    /// Bytes written by the application and not yet sent (`write_seq - snd_nxt`).
    pub notsent_bytes: u32,
    pub sndbuf: u32,
    pub wmem_queued: u32,
    /// `tcp_jiffies32` when the sample was taken, to finish the running chrono.
    pub jiffies: u32,
    pub chrono_start: u32,
    /// busy, rwnd-limited, sndbuf-limited; jiffies.
    pub chrono_stat: [u32; 3],
    /// Retransmissions this program saw for the flow (`tcp_retransmit_skb` hits).
    pub retrans_events: u32,
    pub sport: u16,
    pub dport: u16,
    pub family: u16,
    pub reason: u8,
    pub ca_state: u8,
    pub tcp_state: u8,
    pub old_tcp_state: u8,
    pub chrono_type: u8,
    pub flags: u8,
    /// Where the flow's packets leave, from the socket's cached route (`sk_dst_cache`): its
    /// device's index (0 when the socket has no route cached), MTU and name, and the path MTU
    /// the socket last used (`icsk_pmtu_cookie`, 0 when unset). Read with the sample rather
    /// than per packet: the socket is in hand here, and the data path pays nothing for it.
    pub route_ifindex: u32,
    pub route_dev_mtu: u32,
    pub route_pmtu: u32,
    pub route_dev: [u8; 16],
    /// The kernel's own verdicts on its retransmissions, as `ss -tni` prints them
    /// (`tcp_sock` fields of the same names): retransmissions the receiver reported by DSACK as
    /// duplicates (spurious), reordering events seen, the reordering degree (segments), and
    /// retransmission timeouts and the recoveries they started. [`ABSENT`] where the running
    /// kernel lacks the field (`total_rto*` came in 6.7).
    pub dsack_dups: u32,
    pub reord_seen: u32,
    pub reordering: u32,
    pub total_rto: u32,
    pub total_rto_recoveries: u32,
    /// Cuts the kernel undid on leaving Recovery or Loss (see [`FlowState::undo_events`]).
    pub undo_events: u32,
    /// `sk_rcvbuf`, bytes.
    pub rcvbuf: u32,
    /// `tcp_sock.rack.rtt_us`: the RTT of the most recently sent segment the peer acknowledged
    /// (RACK's reference), µs; 0 where the kernel lacks the field. Unlike srtt, which moves an
    /// eighth per ACK, it is the path's RTT at that instant: at the loss that ends slow start it
    /// holds the full queue of a drop-tail bottleneck and next to none behind a policer.
    pub rack_rtt_us: u32,
    /// `sk_userlocks` ([`userlock`] bits): which buffers the application fixed itself.
    pub userlocks: u8,
    /// [`rcv_flag`] bits.
    pub rcv_flags: u8,
    pub _pad: [u8; 2],
    /// The receiving side, as a socket that receives sees its peer's sender (`tcp_sock` fields
    /// of the same names unless said): the MSS the peer sends (`icsk_ack.rcv_mss`), the next
    /// byte expected and the next the application reads (`copied_seq`: `rcv_nxt - copied_seq`
    /// is received but unread), the window last advertised (`rcv_wnd`, bytes) and its limits
    /// (`window_clamp`, `rcv_ssthresh`), the receiver's RTT estimate (`rcv_rtt_est.rtt_us`,
    /// unshifted to µs; 0 until measured), what autotuning copies per RTT (`rcvq_space.space`),
    /// segments that arrived out of order and data segments in all (`rcv_ooopack`,
    /// `data_segs_in`), and the TSval of the segment that triggered a periodic sample (0
    /// without timestamps, or when the sample has no segment).
    pub rcv_mss: u32,
    pub rcv_nxt: u32,
    pub copied_seq: u32,
    pub rcv_wnd: u32,
    pub window_clamp: u32,
    pub rcv_ssthresh: u32,
    pub rcv_rtt_us: u32,
    pub rcvq_space: u32,
    pub rcv_ooopack: u32,
    pub data_segs_in: u32,
    pub seg_tsval: u32,
    /// What the kernel counted for this socket per segment it received ([`RecvState`]).
    pub rcv: RecvCounts,
}

pub const FLOW_SAMPLE_SIZE: usize = 424;
const _: () = assert!(core::mem::size_of::<FlowSample>() == FLOW_SAMPLE_SIZE);
const _: () = assert!(core::mem::size_of::<FlowSample>().is_multiple_of(8));

/// Bytes of a classic tracepoint's record a [`TraceRecord`] carries: the largest cctrace
/// reads, `tcp:tcp_probe`'s, spans 136 bytes on Linux 6.18 and less before.
pub const TRACE_RECORD_BYTES: usize = 192;

/// One run of a classic tracepoint in the mode without BTF: the event's record copied as it is,
/// its common header included. The programs of that mode read nothing else of the kernel: no
/// socket, no BTF; userspace reads the record's fields at the offsets its tracefs `format` file
/// gives, and asks sock_diag for the rest.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct TraceRecord {
    pub header: RecordHeader,
    /// `bpf_ktime_get_ns()` at the hook (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    /// The [`HookId`] whose program wrote it.
    pub hook: u32,
    /// The process `connect()` ran in, for a move to SYN_SENT (the state change happens in
    /// that process's context); 0 otherwise.
    pub pid: u32,
    /// That process's command name, NUL padded.
    pub comm: [u8; 16],
    /// The tracepoint's record, from its first byte; past its end, whatever follows it in the
    /// kernel's per-CPU trace buffer (never read: userspace knows each record's size).
    pub record: [u8; TRACE_RECORD_BYTES],
}

pub const TRACE_RECORD_SIZE: usize = 232;
const _: () = assert!(core::mem::size_of::<TraceRecord>() == TRACE_RECORD_SIZE);
const _: () = assert!(core::mem::size_of::<TraceRecord>().is_multiple_of(8));

/// Where the programs of the mode without BTF find a flow's key in each hook's record, from
/// tracefs (the `skaddr` offsets of [`ClassicTracepointOffsets`] come first: an address tells
/// sockets apart in every namespace). The key only spaces out one flow's records; userspace
/// tells the flows apart.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceKeys {
    /// `sock_cookie` in each hook's record ([`ABSENT`] where it has none).
    pub cookie: [u32; HookId::COUNT],
    /// `sport`, followed by `dport`, read as one u32: the key of last resort.
    pub ports: [u32; HookId::COUNT],
}

pub const TRACE_KEYS_SIZE: usize = 48;
const _: () = assert!(core::mem::size_of::<TraceKeys>() == TRACE_KEYS_SIZE);

impl TraceKeys {
    pub const fn unresolved() -> Self {
        Self { cookie: [ABSENT; HookId::COUNT], ports: [ABSENT; HookId::COUNT] }
    }
}

/// Location of a bit field inside a struct: byte to read, then `(byte >> shift) & mask`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BitField {
    pub byte_offset: u32,
    pub shift: u8,
    pub mask: u8,
    pub _pad: [u8; 2],
}

/// Marks an offset the running kernel does not have; the program then leaves the field 0.
pub const ABSENT: u32 = u32::MAX;

/// Byte offsets of kernel fields, resolved from the running kernel's BTF at start-up.
///
/// All offsets of socket fields are from the start of `struct sock` (a `tcp_sock` begins
/// with its `inet_connection_sock`, which begins with `inet_sock`, which begins with `sock`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    // struct sock_common
    pub skc_family: u32,
    pub skc_state: u32,
    pub skc_num: u32,
    pub skc_dport: u32,
    pub skc_rcv_saddr: u32,
    pub skc_daddr: u32,
    pub skc_v6_rcv_saddr: u32,
    pub skc_v6_daddr: u32,
    pub skc_net: u32,
    pub skc_cookie: u32,
    // struct sock
    pub sk_cgrp_cgroup: u32,
    pub sk_pacing_rate: u32,
    pub sk_sndbuf: u32,
    pub sk_wmem_queued: u32,
    /// `sk_protocol` as a u16 (a plain field since Linux 5.6).
    pub sk_protocol: u32,
    // struct inet_connection_sock
    pub icsk_ca_ops: u32,
    pub icsk_ca_state: BitField,
    // struct tcp_sock
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
    pub srtt_us: u32,
    pub mdev_us: u32,
    pub rtt_min: u32,
    pub mss_cache: u32,
    pub packets_out: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub retrans_out: u32,
    pub total_retrans: u32,
    pub bytes_retrans: u32,
    pub bytes_sent: u32,
    pub bytes_acked: u32,
    pub bytes_received: u32,
    pub delivered: u32,
    pub rate_delivered: u32,
    pub rate_interval_us: u32,
    pub snd_wnd: u32,
    pub write_seq: u32,
    pub snd_nxt: u32,
    pub chrono_start: u32,
    pub chrono_stat: u32,
    pub chrono_type: BitField,
    pub rate_app_limited: BitField,
    pub is_cwnd_limited: BitField,
    // other structs
    /// `struct net` -> `ns.inum`.
    pub net_ns_inum: u32,
    /// `struct cgroup` -> `kn`.
    pub cgroup_kn: u32,
    /// `struct kernfs_node` -> `__parent` (`parent` before 6.14): walks a cgroup's ancestors.
    pub kernfs_node_parent: u32,
    /// `struct kernfs_node` -> `id`.
    pub kernfs_node_id: u32,
    /// `struct tcp_congestion_ops` -> `name`.
    pub ca_ops_name: u32,
    /// A socket's route: `sock.sk_dst_cache` -> `dst_entry.dev` -> `net_device.{ifindex, mtu,
    /// name}`, and `inet_connection_sock.icsk_pmtu_cookie`.
    pub sk_dst_cache: u32,
    pub icsk_pmtu_cookie: u32,
    pub dst_dev: u32,
    pub netdev_ifindex: u32,
    pub netdev_mtu: u32,
    pub netdev_name: u32,
    /// `tcp_sock` loss signals ([`FlowSample::dsack_dups`] and after), and `undo_marker`, which
    /// the kernel zeroes when it undoes a cut.
    pub dsack_dups: u32,
    pub reord_seen: u32,
    pub reordering: u32,
    /// `u16` fields (6.7 and later).
    pub total_rto: u32,
    pub total_rto_recoveries: u32,
    pub undo_marker: u32,
    /// The buffers: `sock.sk_rcvbuf`, `sock.sk_userlocks` (a 4-bit field before Linux 6.x made
    /// it a byte), and `sock.sk_socket` -> `socket.flags` for `SOCK_NOSPACE`.
    pub sk_rcvbuf: u32,
    pub sk_userlocks: BitField,
    pub sk_socket: u32,
    pub socket_flags: u32,
    /// `tcp_sock.rx_opt.wscale_ok`: window scaling negotiated.
    pub wscale_ok: BitField,
    /// `tcp_sock.rack.rtt_us` ([`FlowSample::rack_rtt_us`]).
    pub rack_rtt_us: u32,
    /// The receiving side ([`FlowSample::rcv_mss`] and after): `tcp_sock` fields, `rcv_rtt_us`
    /// at `rcv_rtt_est.rtt_us`, `rcvq_space` at `rcvq_space.space`, `out_of_order_queue` its
    /// `rb_node` (not null while data waits out of order), `rcv_mss` at
    /// `inet_connection_sock.icsk_ack.rcv_mss` (a u16), `tcp_usec_ts` (Linux 6.7).
    pub rcv_nxt: u32,
    pub copied_seq: u32,
    pub rcv_wnd: u32,
    pub window_clamp: u32,
    pub rcv_ssthresh: u32,
    pub rcv_rtt_us: u32,
    pub rcvq_space: u32,
    pub rcv_ooopack: u32,
    pub data_segs_in: u32,
    pub out_of_order_queue: u32,
    pub rcv_mss: u32,
    pub tcp_usec_ts: BitField,
    /// A received `sk_buff`: its `struct tcp_skb_cb`'s `seq` and `end_seq` (inside `cb`), and
    /// `head` and `transport_header`, where its TCP header (and the timestamp option) is.
    pub skb_seq: u32,
    pub skb_end_seq: u32,
    pub skb_head: u32,
    pub skb_transport_header: u32,
}

pub const OFFSETS_SIZE: usize = 356;
const _: () = assert!(core::mem::size_of::<Offsets>() == OFFSETS_SIZE);

impl Offsets {
    /// Every offset absent: the programs read nothing until userspace fills this in.
    pub const fn unresolved() -> Self {
        const NONE: BitField = BitField { byte_offset: ABSENT, shift: 0, mask: 0, _pad: [0; 2] };
        Self {
            skc_family: ABSENT,
            skc_state: ABSENT,
            skc_num: ABSENT,
            skc_dport: ABSENT,
            skc_rcv_saddr: ABSENT,
            skc_daddr: ABSENT,
            skc_v6_rcv_saddr: ABSENT,
            skc_v6_daddr: ABSENT,
            skc_net: ABSENT,
            skc_cookie: ABSENT,
            sk_cgrp_cgroup: ABSENT,
            sk_pacing_rate: ABSENT,
            sk_sndbuf: ABSENT,
            sk_wmem_queued: ABSENT,
            sk_protocol: ABSENT,
            icsk_ca_ops: ABSENT,
            icsk_ca_state: NONE,
            snd_cwnd: ABSENT,
            snd_ssthresh: ABSENT,
            srtt_us: ABSENT,
            mdev_us: ABSENT,
            rtt_min: ABSENT,
            mss_cache: ABSENT,
            packets_out: ABSENT,
            lost_out: ABSENT,
            sacked_out: ABSENT,
            retrans_out: ABSENT,
            total_retrans: ABSENT,
            bytes_retrans: ABSENT,
            bytes_sent: ABSENT,
            bytes_acked: ABSENT,
            bytes_received: ABSENT,
            delivered: ABSENT,
            rate_delivered: ABSENT,
            rate_interval_us: ABSENT,
            snd_wnd: ABSENT,
            write_seq: ABSENT,
            snd_nxt: ABSENT,
            chrono_start: ABSENT,
            chrono_stat: ABSENT,
            chrono_type: NONE,
            rate_app_limited: NONE,
            is_cwnd_limited: NONE,
            net_ns_inum: ABSENT,
            cgroup_kn: ABSENT,
            kernfs_node_parent: ABSENT,
            kernfs_node_id: ABSENT,
            ca_ops_name: ABSENT,
            sk_dst_cache: ABSENT,
            icsk_pmtu_cookie: ABSENT,
            dst_dev: ABSENT,
            netdev_ifindex: ABSENT,
            netdev_mtu: ABSENT,
            netdev_name: ABSENT,
            dsack_dups: ABSENT,
            reord_seen: ABSENT,
            reordering: ABSENT,
            total_rto: ABSENT,
            total_rto_recoveries: ABSENT,
            undo_marker: ABSENT,
            sk_rcvbuf: ABSENT,
            sk_userlocks: NONE,
            sk_socket: ABSENT,
            socket_flags: ABSENT,
            wscale_ok: NONE,
            rack_rtt_us: ABSENT,
            rcv_nxt: ABSENT,
            copied_seq: ABSENT,
            rcv_wnd: ABSENT,
            window_clamp: ABSENT,
            rcv_ssthresh: ABSENT,
            rcv_rtt_us: ABSENT,
            rcvq_space: ABSENT,
            rcv_ooopack: ABSENT,
            data_segs_in: ABSENT,
            out_of_order_queue: ABSENT,
            rcv_mss: ABSENT,
            tcp_usec_ts: NONE,
            skb_seq: ABSENT,
            skb_end_seq: ABSENT,
            skb_head: ABSENT,
            skb_transport_header: ABSENT,
        }
    }
}

/// Offsets of the fields the programs need inside classic (tracefs) tracepoint records,
/// read from `/sys/kernel/tracing/events/<group>/<event>/format` at start-up.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassicTracepointOffsets {
    /// `skaddr` in each hook's event, indexed by [`HookId::index`].
    pub skaddr: [u32; HookId::COUNT],
    /// `oldstate`/`newstate`/`protocol` of `sock:inet_sock_set_state`.
    pub set_state_oldstate: u32,
    pub set_state_newstate: u32,
    pub set_state_protocol: u32,
    /// `cong_state` of `tcp:tcp_cong_state_set`.
    pub cong_state: u32,
}

pub const CLASSIC_OFFSETS_SIZE: usize = 40;
const _: () = assert!(core::mem::size_of::<ClassicTracepointOffsets>() == CLASSIC_OFFSETS_SIZE);

impl ClassicTracepointOffsets {
    pub const fn unresolved() -> Self {
        Self {
            skaddr: [ABSENT; HookId::COUNT],
            set_state_oldstate: ABSENT,
            set_state_newstate: ABSENT,
            set_state_protocol: ABSENT,
            cong_state: ABSENT,
        }
    }
}

/// Run-time settings written into the programs' read-only data before load.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Minimum time between two periodic samples of one flow.
    pub sample_interval_ns: u64,
    /// Hooks whose programs run ([`HookId::bit`]s); a program whose bit is clear returns at
    /// once, so a hook can be switched off without detaching it.
    pub hooks: u32,
    /// Nonzero: flows are keyed by their socket's address, each given a flow id of its own when
    /// first seen, instead of by socket cookie. Classic tracepoints cannot ask for a cookie, and
    /// `skc_cookie` stays 0 until something does, so they key this way whenever they are the
    /// hooks in use (`--hooks classic`, or no kernel BTF); so do the BTF programs where the
    /// kernel lets tracing programs take no cookie (`bpf_get_socket_cookie`, Linux 5.12).
    pub key_by_socket: u32,
    /// Bytes of a `struct tcp_sock` (from BTF), copied in one read when a sample is written
    /// rather than read field by field; 0: field by field.
    pub sock_span: u32,
    /// Nanoseconds per jiffy (`1e9 / CONFIG_HZ`): `tcp_probe` runs between two periodic
    /// samples are settled on jiffies, which the verifier inlines, rather than on a clock
    /// read, a helper call; 0: always read the clock.
    pub jiffy_ns: u32,
    /// Bytes of the `EVENTS` ring as created (the programs wake the reader at half full).
    pub ring_bytes: u32,
    pub _pad: u32,
}

pub const CONFIG_SIZE: usize = 32;
/// Largest socket copied whole into the programs' scratch buffer (a power of two).
pub const SOCK_COPY_MAX: usize = 4096;
const _: () = assert!(core::mem::size_of::<Config>() == CONFIG_SIZE);

impl Config {
    pub const fn default_config() -> Self {
        Self {
            sample_interval_ns: DEFAULT_SAMPLE_INTERVAL_NS,
            hooks: HookId::ALL_BITS,
            key_by_socket: 0,
            sock_span: 0,
            jiffy_ns: 0,
            ring_bytes: DEFAULT_RING_BYTES,
            _pad: 0,
        }
    }
}

/// The kernel-side flow filter, one entry of the `FILTER` array map, rewritten by userspace
/// whenever the user's filter or what it resolves to changes. A flow passes when it matches
/// every dimension `mode` turns on: its cgroup or one of its ancestors is in `FILTER_CGROUPS`,
/// its network namespace is in `FILTER_NETNS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterState {
    /// Bumped on every change, so flows cached under an older filter are checked again. 0 is
    /// never used for a filter (it is what a new flow's cache holds).
    pub generation: u32,
    /// [`filter_mode`] bits; 0: every flow passes.
    pub mode: u32,
}

pub const FILTER_STATE_SIZE: usize = 8;
const _: () = assert!(core::mem::size_of::<FilterState>() == FILTER_STATE_SIZE);

pub mod filter_mode {
    /// Keep flows whose cgroup, or an ancestor of it, is in `FILTER_CGROUPS`.
    pub const CGROUP: u32 = 1;
    /// Keep flows whose network namespace is in `FILTER_NETNS`.
    pub const NETNS: u32 = 2;
}

/// Most cgroups and namespaces one filter names (map sizes).
pub const FILTER_MAX_CGROUPS: u32 = 4096;
pub const FILTER_MAX_NETNS: u32 = 1024;
/// Deepest a socket's cgroup may sit below a filtered cgroup (levels walked up in the kernel).
pub const FILTER_MAX_CGROUP_DEPTH: u32 = 32;

/// Per-flow state kept in the kernel between samples.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowState {
    /// Last periodic sample.
    pub last_emit_ns: u64,
    /// Last sample triggered by a retransmission (a loss burst yields one, not hundreds).
    pub last_retrans_emit_ns: u64,
    pub retrans_events: u32,
    pub pid: u32,
    pub comm: [u8; 16],
    pub flags: u8,
    /// Whether the flow passed the filter of generation `filter_generation` (1) or not (0):
    /// the filter is checked once per flow and filter change, not on every event.
    pub filter_pass: u8,
    /// Cuts the kernel undid: `tcp_cong_state_set` moving the flow from Recovery or Loss back to
    /// Open or Disorder with `undo_marker` zero. `tcp_try_undo_recovery`, `_loss` and
    /// `_partial` zero it when they restore cwnd and ssthresh, and a recovery that ends
    /// without an undo leaves it set. The kernel keeps no per-socket count of its own; a DSACK
    /// undo after the flow is back in Open changes no state and is not counted here (its
    /// retransmissions are in `dsack_dups`). Wraps at 65536.
    pub undo_events: u16,
    pub filter_generation: u32,
    /// With [`Config::key_by_socket`]: the id samples of this flow carry as their cookie (bit 52
    /// set, so it never equals a kernel cookie); 0 otherwise.
    pub flow_id: u64,
}

/// What the kernel counts for one receiving socket from the sequence numbers of the segments
/// it receives (`tcp_probe`, before the segment is processed), copied into every sample of the
/// socket. A segment that starts beyond the highest byte seen so far leaves a hole (data the
/// sender sent and the path lost or delayed); one that starts below it fills a hole (a
/// retransmission, or a segment that was only delayed). The oldest open hole is followed: filled
/// within half an RTT it was reordering, later a loss (a retransmission takes a round trip and
/// the sender's reordering allowance). A loss hole that opened at least an RTT after the latest
/// episode began starts a new loss episode (the sender cuts once per round trip of losses), and
/// the sender's rate is measured over the RTT before the hole opened and the RTT after the hole
/// was filled: how far it cut.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct RecvCounts {
    /// Bytes the holes skipped, in all.
    pub hole_bytes: u64,
    /// When the latest loss episode's first hole opened (`bpf_ktime_get_ns`), and the TSval of
    /// the segment that opened it (0 without timestamps): its one-way delay then.
    pub episode_ns: u64,
    /// Holes opened; segments that arrived below the highest byte seen; followed holes filled
    /// late (losses) and early (reordering); loss episodes.
    pub holes: u32,
    pub below: u32,
    pub loss_holes: u32,
    pub reorder_holes: u32,
    pub episodes: u32,
    pub episode_tsval: u32,
    /// Episodes whose rates were measured, and the latest one's: new bytes that arrived in the
    /// RTT before its first hole and in the RTT after the hole was filled, and over how long.
    pub measured: u32,
    pub before_bytes: u32,
    pub before_us: u32,
    pub after_bytes: u32,
    pub after_us: u32,
    /// Jiffies the sender left idle: gaps of at least an RTT (and two jiffies) between two
    /// segments of new data. A sender held by its window sends again within each RTT, as the
    /// ACKs of the last window come back (in one burst per RTT, unpaced, on a fast path: shorter
    /// gaps say nothing); one with nothing to send may leave whole RTTs empty.
    pub idle_jiffies: u32,
}

pub const RECV_COUNTS_SIZE: usize = 64;
const _: () = assert!(core::mem::size_of::<RecvCounts>() == RECV_COUNTS_SIZE);

/// Per receiving socket, kept by the kernel between the segments it receives (the `RECV` map,
/// keyed by the socket's address): the counts samples carry, and what counting them needs.
/// Times in jiffies decide on every segment (a load, not a helper call); clock reads are made
/// only when a hole opens, an RTT's slot ends or an episode's rate is measured.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvState {
    pub counts: RecvCounts,
    /// When the followed hole opened; the current RTT slot began; the measurement after an
    /// episode began (`bpf_ktime_get_ns`).
    pub hole_ns: u64,
    pub slot_start_ns: u64,
    pub after_start_ns: u64,
    /// One past the highest byte seen (sequence space).
    pub max_end: u32,
    /// The followed hole: where it starts, when it opened, the TSval of the segment past it.
    pub hole_seq: u32,
    pub hole_jiffies: u32,
    pub hole_tsval: u32,
    /// The connection's RTT (µs) and in jiffies (at least 1), as its latest sample noted it (0
    /// until one did): what tells a late fill from an early one (by the clock: jiffies are too
    /// coarse on short paths), which holes start an episode, and the slots' length.
    pub rtt_us: u32,
    pub rtt_jiffies: u32,
    /// New bytes in the current RTT slot, and in the one before it with its length.
    pub slot_start_jiffies: u32,
    pub slot_bytes: u32,
    pub prev_bytes: u32,
    pub prev_us: u32,
    /// The slot before the followed hole opened, kept for its episode.
    pub hole_before_bytes: u32,
    pub hole_before_us: u32,
    /// The measurement after an episode: since when, new bytes so far, and the slot before it.
    pub after_start_jiffies: u32,
    pub after_bytes: u32,
    pub pending_before_bytes: u32,
    pub pending_before_us: u32,
    /// When the latest segment of new data arrived.
    pub last_data_jiffies: u32,
    pub _pad2: u32,
    /// The `tcp_probe` attachment this state was counted under (the one value of the
    /// `RECV_GENERATION` array, which userspace bumps before each attach): a segment counted
    /// under another one starts counting afresh, so what arrived while the program was detached
    /// is not taken for holes.
    pub generation: u32,
    /// A hole is followed; an episode's rate is being measured; the followed hole may start a
    /// new episode.
    pub tracking: u8,
    pub measuring: u8,
    pub hole_opens_episode: u8,
    pub _pad: u8,
}

pub const RECV_STATE_SIZE: usize = 168;
const _: () = assert!(core::mem::size_of::<RecvState>() == RECV_STATE_SIZE);

/// Receiving sockets counted at once (the `RECV` LRU map's size).
pub const RECV_MAX_SOCKETS: u32 = 16_384;

/// One slot of the kernel's per-CPU memo of when sockets are next due a periodic sample.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DueMemo {
    /// The socket's address.
    pub socket: u64,
    /// Not due before this jiffy.
    pub due_jiffies: u64,
}

/// Slots per CPU (a power of two): 4 KiB a CPU; sockets beyond it share slots and fall back
/// to the flow table.
pub const DUE_MEMO_SLOTS: u32 = 256;
const _: () = assert!(DUE_MEMO_SLOTS.is_power_of_two());
const _: () = assert!(core::mem::size_of::<DueMemo>() == 16);

pub const FLOW_STATE_SIZE: usize = 56;
const _: () = assert!(core::mem::size_of::<FlowState>() == FLOW_STATE_SIZE);

/// Longest congestion-control name with its NUL (`TCP_CA_NAME_MAX`).
pub const CC_NAME_LEN: usize = 16;

/// Which sockets `cct_iter_switch` moves to another congestion control.
pub mod switch_mode {
    /// None: the program only walks (a zeroed config does nothing).
    pub const OFF: u32 = 0;
    // 1 was "every socket not on a target": a fix now switches only the sockets its plan
    // listed (LIST, then COOKIES), so what it changes is what the user confirmed.
    /// Exactly the cookies in `SWITCH_COOKIES`, each to the name stored with it (the fix's
    /// chosen sockets, and undo).
    pub const COOKIES: u32 = 2;
    /// Change nothing: report every full TCP socket with its algorithm (the plan's listing).
    pub const LIST: u32 = 3;
    /// Every socket whose algorithm is a key of `SWITCH_NAMES`, to the name stored with it
    /// (deep mode: `cubic` -> `cct_cubic` on the way in, `cct_cubic` -> `cubic` on the way out).
    pub const NAMES: u32 = 4;
}

/// The one entry of the `SWITCH_CONFIG` array map, written by userspace before the walk.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchConfig {
    /// A [`switch_mode`] value.
    pub mode: u32,
    pub _pad: u32,
}

pub const SWITCH_CONFIG_SIZE: usize = 8;
const _: () = assert!(core::mem::size_of::<SwitchConfig>() == SWITCH_CONFIG_SIZE);

/// A congestion-control name as a map value (`SWITCH_COOKIES`: cookie -> name to switch back to).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CcName {
    pub name: [u8; CC_NAME_LEN],
}

const _: () = assert!(core::mem::size_of::<CcName>() == CC_NAME_LEN);

/// Most algorithm pairs `SWITCH_NAMES` holds.
pub const SWITCH_MAX_NAMES: u32 = 16;

/// Most cookies one undo switches back (the `SWITCH_COOKIES` map size).
pub const SWITCH_MAX_COOKIES: u32 = 16_384;

/// One socket `cct_iter_switch` tried to switch, written with `bpf_seq_write`: userspace reads
/// these back to back from the iterator's file.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(bytemuck::Pod, bytemuck::Zeroable))]
pub struct SwitchRecord {
    pub cookie: u64,
    /// NUL-padded algorithm before the switch.
    pub old_cc: [u8; CC_NAME_LEN],
    /// NUL-padded algorithm asked for.
    pub new_cc: [u8; CC_NAME_LEN],
    /// `bpf_setsockopt`'s return: 0 or a negative errno.
    pub result: i32,
    /// Local and remote port (host order).
    pub sport: u16,
    pub dport: u16,
}

pub const SWITCH_RECORD_SIZE: usize = 48;
const _: () = assert!(core::mem::size_of::<SwitchRecord>() == SWITCH_RECORD_SIZE);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all these are repr(C), contain only integers and byte arrays, and have explicit
    // padding, so every bit pattern is valid and there are no uninitialised bytes.
    unsafe impl aya::Pod for super::FlowSample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Offsets {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ClassicTracepointOffsets {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TraceKeys {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::FilterState {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::FlowState {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RecvState {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SwitchConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CcName {}
}
pub mod deep;
pub mod udp;
