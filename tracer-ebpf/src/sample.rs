//! Writing one [`FlowSample`] from a socket: every field at its BTF offset, read from a
//! per-CPU copy of the socket where it fits (one kernel read instead of forty).

use core::ffi::c_void;

use aya_ebpf::{helpers::bpf_jiffies64, macros::map, maps::PerCpuArray};
use tracer_common::{
    family, flag, rcv_flag, reason, record_kind, tcp_state, BitField, FlowSample, FlowState, RecordHeader, ABSENT,
    FLOW_SAMPLE_SIZE, SOCK_COPY_MAX, SOCK_NOSPACE_BIT, WIRE_VERSION,
};

use crate::flow_key;
use crate::maps::{CONFIG, OFFSETS};
use crate::observe::{Hit, CA_FROM_SOCKET};
use crate::read::{read, read_bytes, read_ptr};
use crate::receive;

/// Write the sample of `hit`'s socket into `s` (the ring's reserved record, or the start-up
/// listing's per-CPU scratch record). The parts are inlined: one straight run of reads.
#[inline(always)]
pub(crate) fn fill_sample(s: *mut FlowSample, hit: &Hit, state: &FlowState, now: u64) {
    let sk = SockView::of(hit.sk);
    // SAFETY: `s` points to FLOW_SAMPLE_SIZE bytes the caller owns for this run; zeroing first
    // means every byte (padding included) is initialised before the record is published.
    let s = unsafe {
        core::ptr::write_bytes(s as *mut u8, 0, FLOW_SAMPLE_SIZE);
        &mut *s
    };
    fill_identity(s, hit, state, now);
    fill_socket(s, &sk, hit);
    fill_tcp(s, &sk, hit, state);
    fill_periodic(s, &sk, hit);
    fill_receive(s, &sk, hit);
}

/// The record's header and what the tracer's own flow state knows: why, when, who.
#[inline(always)]
fn fill_identity(s: &mut FlowSample, hit: &Hit, state: &FlowState, now: u64) {
    s.header = RecordHeader { version: WIRE_VERSION, kind: record_kind::FLOW_SAMPLE, size: FLOW_SAMPLE_SIZE as u32 };
    s.ts_ns = now;
    s.cookie = flow_key::sample_cookie(state, hit.cookie);
    s.reason = hit.reason;
    s.old_tcp_state = hit.old_state;
    s.retrans_events = state.retrans_events;
    s.pid = state.pid;
    s.comm = state.comm;
    s.flags = state.flags;
    if hit.classic {
        s.flags |= flag::CLASSIC_HOOK;
    }
}

/// The socket as any protocol's: addresses, namespace, cgroup, buffers.
#[inline(always)]
fn fill_socket(s: &mut FlowSample, sk: &SockView, hit: &Hit) {
    let family: u16 = sk.get(global!(OFFSETS.skc_family));
    s.family = family;
    s.tcp_state = if hit.reason == reason::STATE_CHANGE { hit.new_state } else { sk.get(global!(OFFSETS.skc_state)) };
    s.sport = sk.get(global!(OFFSETS.skc_num));
    s.dport = u16::from_be(sk.get(global!(OFFSETS.skc_dport)));
    if family == family::AF_INET6 {
        sk.bytes(global!(OFFSETS.skc_v6_rcv_saddr), &mut s.saddr);
        sk.bytes(global!(OFFSETS.skc_v6_daddr), &mut s.daddr);
    } else if family == family::AF_INET {
        sk.bytes(global!(OFFSETS.skc_rcv_saddr), &mut s.saddr[..4]);
        sk.bytes(global!(OFFSETS.skc_daddr), &mut s.daddr[..4]);
    }
    let net = sk.ptr(global!(OFFSETS.skc_net));
    s.netns = read(net, global!(OFFSETS.net_ns_inum));
    let cgroup = sk.ptr(global!(OFFSETS.sk_cgrp_cgroup));
    let kn = read_ptr(cgroup, global!(OFFSETS.cgroup_kn));
    s.cgroup_id = read(kn, global!(OFFSETS.kernfs_node_id));
    s.pacing_rate = sk.get(global!(OFFSETS.sk_pacing_rate));
    s.sndbuf = sk.get(global!(OFFSETS.sk_sndbuf));
    s.wmem_queued = sk.get(global!(OFFSETS.sk_wmem_queued));
    s.rcvbuf = sk.get(global!(OFFSETS.sk_rcvbuf));
    s.userlocks = sk.bits(global!(OFFSETS.sk_userlocks));
    let wscale = global!(OFFSETS.wscale_ok);
    if wscale.byte_offset != ABSENT && s.tcp_state == tcp_state::ESTABLISHED && sk.bits(wscale) == 0 {
        s.flags |= flag::WINDOW_UNSCALED;
    }
}

/// TCP's own state: the congestion control and its figures, counters, the loss signals.
#[inline(always)]
fn fill_tcp(s: &mut FlowSample, sk: &SockView, hit: &Hit, state: &FlowState) {
    let ops = sk.ptr(global!(OFFSETS.icsk_ca_ops));
    read_bytes(ops, global!(OFFSETS.ca_ops_name), &mut s.cc_name);
    s.ca_state = if hit.ca_state == CA_FROM_SOCKET { sk.bits(global!(OFFSETS.icsk_ca_state)) } else { hit.ca_state };

    s.snd_cwnd = sk.get(global!(OFFSETS.snd_cwnd));
    s.snd_ssthresh = sk.get(global!(OFFSETS.snd_ssthresh));
    s.srtt_us = sk.get::<u32>(global!(OFFSETS.srtt_us)) >> 3;
    s.rttvar_us = sk.get::<u32>(global!(OFFSETS.mdev_us)) >> 2;
    // struct minmax { struct minmax_sample { u32 t; u32 v; } s[3]; }: s[0].v is the minimum.
    let rtt_min = global!(OFFSETS.rtt_min);
    s.min_rtt_us = if rtt_min == ABSENT { 0 } else { sk.get(rtt_min + 4) };
    s.mss = sk.get(global!(OFFSETS.mss_cache));
    s.packets_out = sk.get(global!(OFFSETS.packets_out));
    s.lost_out = sk.get(global!(OFFSETS.lost_out));
    s.sacked_out = sk.get(global!(OFFSETS.sacked_out));
    s.retrans_out = sk.get(global!(OFFSETS.retrans_out));
    s.total_retrans = sk.get(global!(OFFSETS.total_retrans));
    s.bytes_retrans = sk.get(global!(OFFSETS.bytes_retrans));
    s.bytes_sent = sk.get(global!(OFFSETS.bytes_sent));
    s.bytes_acked = sk.get(global!(OFFSETS.bytes_acked));
    s.bytes_received = sk.get(global!(OFFSETS.bytes_received));
    s.delivered = sk.get(global!(OFFSETS.delivered));
    s.rate_delivered = sk.get(global!(OFFSETS.rate_delivered));
    s.rate_interval_us = sk.get(global!(OFFSETS.rate_interval_us));
    s.snd_wnd = sk.get(global!(OFFSETS.snd_wnd));
    let write_seq: u32 = sk.get(global!(OFFSETS.write_seq));
    let snd_nxt: u32 = sk.get(global!(OFFSETS.snd_nxt));
    s.notsent_bytes = write_seq.wrapping_sub(snd_nxt);
    if (s.notsent_bytes as i32) < 0 {
        s.notsent_bytes = 0;
    }
    // SAFETY: bpf_jiffies64 takes nothing and only reads the kernel's jiffies.
    s.jiffies = unsafe { bpf_jiffies64() } as u32;
    s.chrono_start = sk.get(global!(OFFSETS.chrono_start));
    read_chrono(sk, &mut s.chrono_stat);
    s.chrono_type = sk.bits(global!(OFFSETS.chrono_type));
    if sk.bits(global!(OFFSETS.rate_app_limited)) != 0 {
        s.flags |= flag::APP_LIMITED;
    }
    if sk.bits(global!(OFFSETS.is_cwnd_limited)) != 0 {
        s.flags |= flag::CWND_LIMITED;
    }
    s.dsack_dups = sk.get_or_absent(global!(OFFSETS.dsack_dups));
    s.reord_seen = sk.get_or_absent(global!(OFFSETS.reord_seen));
    s.reordering = sk.get_or_absent(global!(OFFSETS.reordering));
    s.total_rto = sk.get_u16_or_absent(global!(OFFSETS.total_rto));
    s.total_rto_recoveries = sk.get_u16_or_absent(global!(OFFSETS.total_rto_recoveries));
    s.undo_events = u32::from(state.undo_events);
    let rack_rtt = global!(OFFSETS.rack_rtt_us);
    s.rack_rtt_us = if rack_rtt == ABSENT { 0 } else { sk.get(rack_rtt) };
}

/// What only the once-an-interval samples read: the route and a blocked writer.
#[inline(always)]
fn fill_periodic(s: &mut FlowSample, sk: &SockView, hit: &Hit) {
    // The route is read for the samples that come once an interval (and the start-up
    // listing's): four more reads on every state change would be most of a state hook's
    // cost, and the flow keeps the route its last sample had.
    let periodic = hit.reason == reason::PERIODIC || hit.reason == reason::SNAPSHOT;
    let dst = if periodic { sk.ptr(global!(OFFSETS.sk_dst_cache)) } else { core::ptr::null() };
    // A writer waiting for room in the send buffer: in `struct socket`, one more read, so
    // also only once an interval.
    let socket = if periodic { sk.ptr(global!(OFFSETS.sk_socket)) } else { core::ptr::null() };
    if !socket.is_null() && read::<u64>(socket, global!(OFFSETS.socket_flags)) & (1 << SOCK_NOSPACE_BIT) != 0 {
        s.flags |= flag::WRITER_BLOCKED;
    }
    if !dst.is_null() {
        let dev = read_ptr(dst, global!(OFFSETS.dst_dev));
        s.route_ifindex = read(dev, global!(OFFSETS.netdev_ifindex));
        s.route_dev_mtu = read(dev, global!(OFFSETS.netdev_mtu));
        read_bytes(dev, global!(OFFSETS.netdev_name), &mut s.route_dev);
        s.route_pmtu = sk.get(global!(OFFSETS.icsk_pmtu_cookie));
    }
}

/// The receiving side: what the socket's `tcp_sock` says of its peer's sender, and what was
/// counted segment by segment (see `receive`). The socket's RTT for the counting's slots is
/// noted here: the receiver's own estimate, kept between the handshake's RTT and twice it.
#[inline(always)]
fn fill_receive(s: &mut FlowSample, sk: &SockView, hit: &Hit) {
    s.rcv_mss = u32::from(sk.get::<u16>(global!(OFFSETS.rcv_mss)));
    s.rcv_nxt = sk.get(global!(OFFSETS.rcv_nxt));
    s.copied_seq = sk.get(global!(OFFSETS.copied_seq));
    s.rcv_wnd = sk.get(global!(OFFSETS.rcv_wnd));
    s.window_clamp = sk.get(global!(OFFSETS.window_clamp));
    s.rcv_ssthresh = sk.get(global!(OFFSETS.rcv_ssthresh));
    s.rcv_rtt_us = sk.get::<u32>(global!(OFFSETS.rcv_rtt_us)) >> 3;
    s.rcvq_space = sk.get(global!(OFFSETS.rcvq_space));
    s.rcv_ooopack = sk.get(global!(OFFSETS.rcv_ooopack));
    s.data_segs_in = sk.get(global!(OFFSETS.data_segs_in));
    if sk.get::<u64>(global!(OFFSETS.out_of_order_queue)) != 0 {
        s.rcv_flags |= rcv_flag::OUT_OF_ORDER;
    }
    if sk.bits(global!(OFFSETS.tcp_usec_ts)) != 0 {
        s.rcv_flags |= rcv_flag::USEC_TS;
    }
    if !hit.skb.is_null() {
        s.seg_tsval = receive::segment_tsval(hit.skb);
    }
    let base = if s.min_rtt_us != 0 { s.min_rtt_us } else { s.srtt_us };
    let rtt = match (base, s.rcv_rtt_us) {
        (0, measured) => measured,
        (base, 0) => base,
        (base, measured) => measured.clamp(base, base.saturating_mul(2)),
    };
    if receive::copy_counts(hit.sk, rtt, global!(CONFIG.jiffy_ns), &mut s.rcv) {
        s.rcv_flags |= rcv_flag::COUNTED;
    }
}

#[inline(always)]
fn read_chrono(sk: &SockView, out: &mut [u32; 3]) {
    let off = global!(OFFSETS.chrono_stat);
    if off == ABSENT {
        return;
    }
    *out = sk.get(off);
}

/// A socket's fields for one sample: copied whole into this CPU's scratch buffer with one
/// `bpf_probe_read_kernel` (a `struct tcp_sock` is 2.3 KB; forty reads of a few bytes each cost
/// several times that), then taken from the copy. Fields past the copy, or every field when the
/// copy could not be made, are read from the socket one by one.
struct SockView {
    sk: *const u8,
    /// This CPU's copy, or null.
    copy: *const u8,
    span: u32,
}

/// Scratch room for one socket, with slack so a masked offset plus a field stays inside.
#[repr(C)]
pub struct SockCopy {
    bytes: [u8; SOCK_COPY_MAX + 64],
}

#[map]
static SOCK_COPY: PerCpuArray<SockCopy> = PerCpuArray::with_max_entries(1, 0);

impl SockView {
    #[inline(always)]
    fn of(sk: *const u8) -> Self {
        let span = global!(CONFIG.sock_span);
        let none = Self { sk, copy: core::ptr::null(), span: 0 };
        if span == 0 || span as usize > SOCK_COPY_MAX || sk.is_null() {
            return none;
        }
        let Some(buf) = SOCK_COPY.get_ptr_mut(0) else { return none };
        // The mask keeps the size provably within the buffer for the verifier.
        let len = span & (SOCK_COPY_MAX as u32 - 1);
        // SAFETY: `buf` is this CPU's scratch value, SOCK_COPY_MAX + 64 bytes; the helper checks
        // the source address and fails (zeroing the copy) rather than fault.
        let got = unsafe {
            aya_ebpf::helpers::generated::bpf_probe_read_kernel(buf as *mut c_void, len, sk as *const c_void)
        };
        if got != 0 {
            return none;
        }
        Self { sk, copy: buf as *const u8, span: len }
    }

    /// The `T` at `off`, from the copy when it covers it.
    #[inline(always)]
    fn get<T: Copy + Default>(&self, off: u32) -> T {
        if off == ABSENT {
            return T::default();
        }
        if self.copy.is_null() || off as usize + core::mem::size_of::<T>() > self.span as usize {
            return read(self.sk, off);
        }
        let at = (off as usize) & (SOCK_COPY_MAX - 1);
        // SAFETY: `at + size_of::<T>()` is within the copy (checked above, and the mask bounds
        // it within the buffer's slack for the verifier); plain old data read unaligned.
        unsafe { core::ptr::read_unaligned(self.copy.add(at) as *const T) }
    }

    /// A `u32` field, or [`ABSENT`] where the kernel lacks it (so userspace can tell "none"
    /// from "0").
    #[inline(always)]
    fn get_or_absent(&self, off: u32) -> u32 {
        if off == ABSENT {
            ABSENT
        } else {
            self.get(off)
        }
    }

    /// A `u16` field widened, or [`ABSENT`].
    #[inline(always)]
    fn get_u16_or_absent(&self, off: u32) -> u32 {
        if off == ABSENT {
            ABSENT
        } else {
            u32::from(self.get::<u16>(off))
        }
    }

    #[inline(always)]
    fn ptr(&self, off: u32) -> *const u8 {
        self.get::<u64>(off) as *const u8
    }

    #[inline(always)]
    fn bits(&self, field: BitField) -> u8 {
        if field.byte_offset == ABSENT {
            return 0;
        }
        (self.get::<u8>(field.byte_offset) >> field.shift) & field.mask
    }

    #[inline(always)]
    fn bytes(&self, off: u32, dst: &mut [u8]) {
        if off == ABSENT {
            return;
        }
        if self.copy.is_null() || off as usize + dst.len() > self.span as usize {
            read_bytes(self.sk, off, dst);
            return;
        }
        let at = (off as usize) & (SOCK_COPY_MAX - 1);
        let mut i = 0;
        while i < dst.len() && i < 16 {
            // SAFETY: within the copy, as in `get`.
            dst[i] = unsafe { *self.copy.add(at + i) };
            i += 1;
        }
    }
}
