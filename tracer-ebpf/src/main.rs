//! cctrace kernel side: samples TCP sockets from five tracepoints.
//!
//! Each hook exists twice: as a BTF tracepoint (`tp_btf`, typed `struct sock *`, preferred) and
//! as a classic tracefs tracepoint whose `skaddr` field offset userspace reads from the event's
//! `format` file. Both end in [`observe`], which keeps per-flow state in `FLOWS`, rate-limits
//! periodic samples to one per `CONFIG.sample_interval_ns` per flow, and writes [`FlowSample`]
//! records into the `EVENTS` ring buffer. All kernel struct offsets come from `OFFSETS`, which
//! userspace fills from the running kernel's BTF before load, so one object runs on many kernels.
#![no_std]
#![no_main]
// Entry points are `pub` as aya's program macros are written; an eBPF object has no Rust API.
#![allow(unreachable_pub)]
// `atomic_xadd`: the BPF target has no `fetch_add` in `core` (no compare-and-swap), though the
// instruction set has an atomic add; see `count`.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod count;
mod udp;

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_socket_cookie, bpf_getsockopt, bpf_jiffies64,
        bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_buf, bpf_seq_write, bpf_setsockopt,
        bpf_skc_to_tcp_sock,
    },
    macros::{btf_tracepoint, map, tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::{BtfTracePointContext, TracePointContext},
};
use tracer_common::{
    counter, family, filter_mode, flag, reason, record_kind, switch_mode, tcp_state, BitField, CcName,
    ClassicTracepointOffsets, Config, FilterState, FlowSample, FlowState, HookId, Offsets, RecordHeader, SwitchConfig,
    SwitchRecord, ABSENT, CC_NAME_LEN, DEFAULT_RING_BYTES, FILTER_MAX_CGROUPS, FILTER_MAX_CGROUP_DEPTH,
    FILTER_MAX_NETNS, FLOW_SAMPLE_SIZE, IPPROTO_TCP, SOCK_COPY_MAX, SWITCH_MAX_COOKIES, SWITCH_MAX_NAMES,
    SWITCH_RECORD_SIZE, WIRE_VERSION,
};

/// Filled in by userspace from BTF before load (read-only data).
#[no_mangle]
static OFFSETS: Offsets = Offsets::unresolved();
/// Filled in by userspace from tracefs `format` files before load.
#[no_mangle]
static CLASSIC: ClassicTracepointOffsets = ClassicTracepointOffsets::unresolved();
#[no_mangle]
static CONFIG: Config = Config::default_config();

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);
#[map]
static FLOWS: LruHashMap<u64, FlowState> = LruHashMap::with_max_entries(65_536, 0);
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);
/// The flow filter (one entry) and the cgroups and network namespaces it keeps; userspace
/// rewrites them while the programs run.
#[map]
static FILTER: Array<FilterState> = Array::with_max_entries(1, 0);
#[map]
static FILTER_CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(FILTER_MAX_CGROUPS, 0);
#[map]
static FILTER_NETNS: HashMap<u32, u8> = HashMap::with_max_entries(FILTER_MAX_NETNS, 0);
/// The start-up listing's sample under construction: too large for the 512-byte stack.
#[map]
static SNAPSHOT_SAMPLE: PerCpuArray<FlowSample> = PerCpuArray::with_max_entries(1, 0);
/// What `cct_iter_switch` switches (one entry; zeroed: nothing).
#[map]
static SWITCH_CONFIG: Array<SwitchConfig> = Array::with_max_entries(1, 0);
/// For [`switch_mode::COOKIES`]: the sockets to switch and the algorithm each goes back to.
#[map]
static SWITCH_COOKIES: HashMap<u64, CcName> = HashMap::with_max_entries(SWITCH_MAX_COOKIES, 0);
/// For [`switch_mode::NAMES`]: algorithm -> algorithm to switch its sockets to.
#[map]
static SWITCH_NAMES: HashMap<CcName, CcName> = HashMap::with_max_entries(SWITCH_MAX_NAMES, 0);

/// No CA state override: read `icsk_ca_state` from the socket.
const CA_FROM_SOCKET: u8 = 0xff;

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

mod due_memo;
use due_memo::{OWNER_CHECK_DUE, OWNER_RECHECK_NS, PERIODIC_DUE};
mod flow_key;
use flow_key::{btf_key, classic_key};

/// Whether userspace enabled `hook` in `CONFIG.hooks`; a disabled hook's programs do nothing.
#[inline(always)]
fn enabled(hook: HookId) -> bool {
    global!(CONFIG.hooks) & hook.bit() != 0
}

#[inline(always)]
fn bump(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        count::add(slot, 1);
    }
}

/// Read a `T` at `base + off` from kernel memory; 0 when the kernel lacks the field.
#[inline(always)]
fn read<T: Copy + Default>(base: *const u8, off: u32) -> T {
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
fn read_ptr(base: *const u8, off: u32) -> *const u8 {
    read::<u64>(base, off) as *const u8
}

#[inline(always)]
fn read_bits(base: *const u8, field: BitField) -> u8 {
    if field.byte_offset == ABSENT {
        return 0;
    }
    (read::<u8>(base, field.byte_offset) >> field.shift) & field.mask
}

#[inline(always)]
fn read_bytes(base: *const u8, off: u32, dst: &mut [u8]) {
    if off == ABSENT || base.is_null() {
        return;
    }
    // SAFETY: as in `read`: the helper checks the source address.
    if unsafe { bpf_probe_read_kernel_buf(base.wrapping_add(off as usize), dst) }.is_err() {
        bump(counter::READ_ERRORS);
    }
}

/// What a hook saw, before the socket is read.
struct Hit {
    sk: *const u8,
    cookie: u64,
    reason: u8,
    /// New CA state from `tcp_cong_state_set`, else [`CA_FROM_SOCKET`].
    ca_state: u8,
    old_state: u8,
    new_state: u8,
    classic: bool,
}

/// Per-flow bookkeeping and rate limiting; emits a sample when one is due.
#[inline(always)]
fn observe(hit: Hit) -> Result<u32, u32> {
    if hit.sk.is_null() || hit.cookie == 0 {
        return Ok(0);
    }
    // SAFETY: a helper without arguments or preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let periodic = hit.reason == reason::PERIODIC;
    let existing = FLOWS.get_ptr_mut(hit.cookie);
    let interval = global!(CONFIG.sample_interval_ns);
    let due = |last: u64| last == 0 || now.wrapping_sub(last) >= interval;
    if let (true, Some(p)) = (periodic, existing) {
        // SAFETY: the pointer is into the map value, valid for this program run.
        let last = unsafe { (*p).last_emit_ns };
        if !due(last) {
            due_memo::remember(&PERIODIC_DUE, hit.sk, last.wrapping_add(interval).saturating_sub(now));
            return Ok(0);
        }
    }
    let mut state = match existing {
        // SAFETY: the pointer is into the map value, valid for this program run.
        Some(p) => unsafe { *p },
        None => flow_key::new_flow_state(hit.cookie),
    };
    if periodic {
        if !due(state.last_emit_ns) {
            return Ok(0);
        }
        state.last_emit_ns = now;
        due_memo::remember(&PERIODIC_DUE, hit.sk, interval);
    }
    if hit.reason == reason::RETRANSMIT {
        state.retrans_events = state.retrans_events.wrapping_add(1);
        // The first retransmission after a quiet interval is sampled at once; the rest of the
        // burst is counted here and seen in the periodic samples.
        if !due(state.last_retrans_emit_ns) {
            store_flow(hit.cookie, existing, &state);
            return Ok(0);
        }
        state.last_retrans_emit_ns = now;
    }
    if hit.reason == reason::STATE_CHANGE && hit.new_state == tcp_state::SYN_SENT {
        // connect() runs in the owner's context: remember who opened the flow.
        state.pid = (bpf_get_current_pid_tgid() >> 32) as u32;
        state.comm = bpf_get_current_comm().unwrap_or_default();
        state.flags |= flag::OWNER_KNOWN;
    }

    if passes_filter(hit.sk, &mut state) {
        emit(&hit, &state, now);
    } else {
        bump(counter::FILTERED);
    }

    // The entry lives until destroy (which follows the move to CLOSE), so the close and destroy
    // samples still carry the owner and the retransmission count.
    if hit.reason == reason::DESTROY {
        let _ = FLOWS.remove(hit.cookie);
        due_memo::forget(hit.sk);
    } else {
        store_flow(hit.cookie, existing, &state);
    }
    Ok(0)
}

/// Keep `state` for the flow: written in place when it has an entry already (an LRU map update
/// takes a fresh node off the free lists and frees the old one, a cost paid on every state
/// change), inserted otherwise.
#[inline(always)]
fn store_flow(cookie: u64, existing: Option<*mut FlowState>, state: &FlowState) {
    match existing {
        // SAFETY: the pointer is into the map value, valid for this program run.
        Some(p) => unsafe { *p = *state },
        None => {
            if FLOWS.insert(cookie, *state, 0).is_err() {
                bump(counter::FLOW_MAP_FULL);
            }
        }
    }
}

/// Whether the flow is inside the user's filter. The answer is kept in the flow's state for the
/// filter's generation, so the namespace read and the cgroup walk run once per flow and filter
/// change, not on every `tcp_probe`.
#[inline(always)]
fn passes_filter(sk: *const u8, state: &mut FlowState) -> bool {
    let Some(filter) = FILTER.get(0) else { return true };
    let filter = *filter;
    if filter.mode == 0 {
        return true;
    }
    if state.filter_generation != filter.generation {
        state.filter_generation = filter.generation;
        state.filter_pass = u8::from(matches_filter(sk, filter.mode));
    }
    state.filter_pass != 0
}

#[inline(always)]
fn matches_filter(sk: *const u8, mode: u32) -> bool {
    if mode & filter_mode::NETNS != 0 {
        let net = read_ptr(sk, global!(OFFSETS.skc_net));
        let inum: u32 = read(net, global!(OFFSETS.net_ns_inum));
        // SAFETY: a lookup in a hash map of plain integers; the value is not used.
        if unsafe { FILTER_NETNS.get(inum) }.is_none() {
            return false;
        }
    }
    if mode & filter_mode::CGROUP != 0 {
        // The socket's cgroup and its ancestors, by their kernfs ids (the cgroup ids userspace
        // sees as directory inodes): a filter on a cgroup keeps everything below it.
        let cgroup = read_ptr(sk, global!(OFFSETS.sk_cgrp_cgroup));
        let mut kn = read_ptr(cgroup, global!(OFFSETS.cgroup_kn));
        let mut level = 0;
        while level < FILTER_MAX_CGROUP_DEPTH {
            if kn.is_null() {
                return false;
            }
            let id: u64 = read(kn, global!(OFFSETS.kernfs_node_id));
            // SAFETY: as above.
            if unsafe { FILTER_CGROUPS.get(id) }.is_some() {
                return true;
            }
            kn = read_ptr(kn, global!(OFFSETS.kernfs_node_parent));
            level += 1;
        }
        return false;
    }
    true
}

#[inline(always)]
fn emit(hit: &Hit, state: &FlowState, now: u64) {
    let Some(mut entry) = EVENTS.reserve::<FlowSample>(0) else {
        bump(counter::RINGBUF_LOST);
        return;
    };
    fill_sample(entry.as_mut_ptr(), hit, state, now);
    entry.submit(wakeup_flag());
    bump(counter::EMITTED);
}

/// How a submitted sample wakes the reader. A wake-up is an `irq_work` (in a VM, a self-IPI and
/// a VM exit) that cost the state hooks most of their 7-10 us per sample; the reader polls the
/// ring on a short timer anyway, so it is woken only once the ring is half full, when a late
/// read could lose samples. The ring's size comes from userspace, which set it: one query of
/// the ring, not two (each is a helper call).
#[inline(always)]
fn wakeup_flag() -> u64 {
    let half = u64::from(global!(CONFIG.ring_bytes)) / 2;
    if EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)) >= half {
        u64::from(BPF_RB_FORCE_WAKEUP)
    } else {
        u64::from(BPF_RB_NO_WAKEUP)
    }
}

/// Write the sample of `hit`'s socket into `s` (the ring's reserved record, or the start-up
/// listing's per-CPU scratch record).
#[inline(always)]
fn fill_sample(s: *mut FlowSample, hit: &Hit, state: &FlowState, now: u64) {
    let sk = SockView::of(hit.sk);
    // SAFETY: `s` points to FLOW_SAMPLE_SIZE bytes the caller owns for this run; zeroing first
    // means every byte (padding included) is initialised before the record is published.
    unsafe {
        core::ptr::write_bytes(s as *mut u8, 0, FLOW_SAMPLE_SIZE);
        let s = &mut *s;
        s.header =
            RecordHeader { version: WIRE_VERSION, kind: record_kind::FLOW_SAMPLE, size: FLOW_SAMPLE_SIZE as u32 };
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

        let family: u16 = sk.get(global!(OFFSETS.skc_family));
        s.family = family;
        s.tcp_state =
            if hit.reason == reason::STATE_CHANGE { hit.new_state } else { sk.get(global!(OFFSETS.skc_state)) };
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

        let ops = sk.ptr(global!(OFFSETS.icsk_ca_ops));
        read_bytes(ops, global!(OFFSETS.ca_ops_name), &mut s.cc_name);
        s.ca_state =
            if hit.ca_state == CA_FROM_SOCKET { sk.bits(global!(OFFSETS.icsk_ca_state)) } else { hit.ca_state };

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
        s.jiffies = bpf_jiffies64() as u32;
        s.chrono_start = sk.get(global!(OFFSETS.chrono_start));
        read_chrono(&sk, &mut s.chrono_stat);
        s.chrono_type = sk.bits(global!(OFFSETS.chrono_type));
        if sk.bits(global!(OFFSETS.rate_app_limited)) != 0 {
            s.flags |= flag::APP_LIMITED;
        }
        if sk.bits(global!(OFFSETS.is_cwnd_limited)) != 0 {
            s.flags |= flag::CWND_LIMITED;
        }
        // The route is read for the samples that come once an interval (and the start-up
        // listing's): four more reads on every state change would be most of a state hook's
        // cost, and the flow keeps the route its last sample had.
        let periodic = hit.reason == reason::PERIODIC || hit.reason == reason::SNAPSHOT;
        let dst = if periodic { sk.ptr(global!(OFFSETS.sk_dst_cache)) } else { core::ptr::null() };
        if !dst.is_null() {
            let dev = read_ptr(dst, global!(OFFSETS.dst_dev));
            s.route_ifindex = read(dev, global!(OFFSETS.netdev_ifindex));
            s.route_dev_mtu = read(dev, global!(OFFSETS.netdev_mtu));
            read_bytes(dev, global!(OFFSETS.netdev_name), &mut s.route_dev);
            s.route_pmtu = sk.get(global!(OFFSETS.icsk_pmtu_cookie));
        }
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

/// Sockets that carry no flow or are not TCP produce no samples. A listener is already in CLOSE
/// when it is destroyed, so "no peer port" is what identifies it (and any never-connected socket).
#[inline(always)]
fn is_flow_socket(sk: *const u8) -> bool {
    let proto_off = global!(OFFSETS.sk_protocol);
    if proto_off != ABSENT && read::<u16>(sk, proto_off) != IPPROTO_TCP {
        return false;
    }
    read::<u8>(sk, global!(OFFSETS.skc_state)) != tcp_state::LISTEN && read::<u16>(sk, global!(OFFSETS.skc_dport)) != 0
}

#[inline(always)]
fn btf_cookie(sk: *const u8) -> u64 {
    // SAFETY: `sk` is the tracepoint's typed `struct sock *` argument; in tracing programs this
    // helper is bpf_get_socket_ptr_cookie, which assigns the cookie if it is not yet set.
    unsafe { bpf_get_socket_cookie(sk as *mut c_void) }
}

// ---------------------------------------------------------------- BTF tracepoints

#[btf_tracepoint(function = "tcp_probe")]
pub fn cct_probe(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::TcpProbe) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    if due_memo::not_due(&PERIODIC_DUE, sk) {
        return 0;
    }
    let hit = Hit {
        sk,
        cookie: btf_key(sk),
        reason: reason::PERIODIC,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: false,
    };
    match observe(hit) {
        Ok(v) | Err(v) => v,
    }
}

#[btf_tracepoint(function = "tcp_retransmit_skb")]
pub fn cct_retrans(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::Retransmit) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    let hit = Hit {
        sk,
        cookie: btf_key(sk),
        reason: reason::RETRANSMIT,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: false,
    };
    match observe(hit) {
        Ok(v) | Err(v) => v,
    }
}

#[btf_tracepoint(function = "tcp_cong_state_set")]
pub fn cct_cong_state(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::CongState) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    let new_ca: u8 = ctx.arg(1);
    match try_cong_state(sk, btf_key(sk), new_ca, false) {
        Ok(v) | Err(v) => v,
    }
}

#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn cct_set_state(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::SetState) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    let old: i32 = ctx.arg(1);
    let new: i32 = ctx.arg(2);
    match try_set_state(sk, old as u8, new as u8, false) {
        Ok(v) | Err(v) => v,
    }
}

#[btf_tracepoint(function = "tcp_destroy_sock")]
pub fn cct_destroy(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::Destroy) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    match try_destroy(sk, btf_key(sk), false) {
        Ok(v) | Err(v) => v,
    }
}

/// Remember who sends on a flow whose owner is unknown (accepted connections: the SYN_SENT
/// transition happened on the peer). Runs in the sending process's context; emits nothing.
#[inline(always)]
fn try_sendmsg(sk: *const u8, cookie: u64) -> Result<u32, u32> {
    if sk.is_null() || cookie == 0 {
        return Ok(0);
    }
    due_memo::remember(&OWNER_CHECK_DUE, sk, OWNER_RECHECK_NS);
    if let Some(p) = FLOWS.get_ptr_mut(cookie) {
        // SAFETY: pointer into the map value for this run; sendmsg holds the socket lock, so the
        // other hooks of this socket do not run concurrently.
        let state = unsafe { &mut *p };
        if state.flags & flag::OWNER_KNOWN == 0 {
            state.pid = (bpf_get_current_pid_tgid() >> 32) as u32;
            state.comm = bpf_get_current_comm().unwrap_or_default();
            state.flags |= flag::OWNER_KNOWN;
        }
        return Ok(0);
    }
    let state = FlowState {
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        comm: bpf_get_current_comm().unwrap_or_default(),
        flags: flag::OWNER_KNOWN,
        ..flow_key::new_flow_state(cookie)
    };
    if FLOWS.insert(cookie, state, 0).is_err() {
        bump(counter::FLOW_MAP_FULL);
    }
    Ok(0)
}

#[btf_tracepoint(function = "tcp_sendmsg_locked")]
pub fn cct_sendmsg(ctx: BtfTracePointContext) -> u32 {
    if !enabled(HookId::SendMsg) {
        return 0;
    }
    let sk: *const u8 = ctx.arg(0);
    if due_memo::not_due(&OWNER_CHECK_DUE, sk) {
        return 0;
    }
    match try_sendmsg(sk, btf_key(sk)) {
        Ok(v) | Err(v) => v,
    }
}

#[inline(always)]
fn try_cong_state(sk: *const u8, cookie: u64, new_ca: u8, classic: bool) -> Result<u32, u32> {
    // tcp_set_ca_state() fires the tracepoint before storing the state; many callers set the
    // state it already has, which is no event worth a sample.
    if read_bits(sk, global!(OFFSETS.icsk_ca_state)) == new_ca {
        return Ok(0);
    }
    observe(Hit { sk, cookie, reason: reason::CA_STATE, ca_state: new_ca, old_state: 0, new_state: 0, classic })
}

#[inline(always)]
fn try_set_state(sk: *const u8, old: u8, new: u8, classic: bool) -> Result<u32, u32> {
    if old == tcp_state::LISTEN || new == tcp_state::LISTEN {
        return Ok(0);
    }
    let proto_off = global!(OFFSETS.sk_protocol);
    if proto_off != ABSENT && read::<u16>(sk, proto_off) != IPPROTO_TCP {
        return Ok(0);
    }
    let cookie = if classic { classic_key(sk) } else { btf_key(sk) };
    observe(Hit {
        sk,
        cookie,
        reason: reason::STATE_CHANGE,
        ca_state: CA_FROM_SOCKET,
        old_state: old,
        new_state: new,
        classic,
    })
}

#[inline(always)]
fn try_destroy(sk: *const u8, cookie: u64, classic: bool) -> Result<u32, u32> {
    if !is_flow_socket(sk) {
        return Ok(0);
    }
    observe(Hit { sk, cookie, reason: reason::DESTROY, ca_state: CA_FROM_SOCKET, old_state: 0, new_state: 0, classic })
}

// ---------------------------------------------------------------- classic tracepoints
//
// Fallback for kernels without BTF tracepoints for these events. The record layout is read
// from tracefs; `skaddr` gives the socket, read with the same BTF offsets as above. Without the
// cookie helper, flows are keyed by socket address (see `flow_key`).

#[inline(always)]
fn classic_sk(ctx: &TracePointContext, hook: HookId) -> *const u8 {
    let off = global!(CLASSIC.skaddr[hook.index()]);
    if off == ABSENT {
        return core::ptr::null();
    }
    // SAFETY: reads the tracepoint record at an offset taken from its format file.
    unsafe { ctx.read_at::<u64>(off as usize) }.unwrap_or(0) as *const u8
}

#[inline(always)]
fn classic_u32(ctx: &TracePointContext, off: u32) -> u32 {
    if off == ABSENT {
        return 0;
    }
    // SAFETY: as above.
    unsafe { ctx.read_at::<u32>(off as usize) }.unwrap_or(0)
}

#[tracepoint(category = "tcp", name = "tcp_probe")]
pub fn cct_tp_probe(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::TcpProbe) {
        return 0;
    }
    let sk = classic_sk(&ctx, HookId::TcpProbe);
    if due_memo::not_due(&PERIODIC_DUE, sk) {
        return 0;
    }
    let hit = Hit {
        sk,
        cookie: classic_key(sk),
        reason: reason::PERIODIC,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: true,
    };
    match observe(hit) {
        Ok(v) | Err(v) => v,
    }
}

#[tracepoint(category = "tcp", name = "tcp_retransmit_skb")]
pub fn cct_tp_retrans(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::Retransmit) {
        return 0;
    }
    let sk = classic_sk(&ctx, HookId::Retransmit);
    let hit = Hit {
        sk,
        cookie: classic_key(sk),
        reason: reason::RETRANSMIT,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: true,
    };
    match observe(hit) {
        Ok(v) | Err(v) => v,
    }
}

#[tracepoint(category = "tcp", name = "tcp_cong_state_set")]
pub fn cct_tp_cong(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::CongState) {
        return 0;
    }
    let sk = classic_sk(&ctx, HookId::CongState);
    let new_ca = classic_u32(&ctx, global!(CLASSIC.cong_state)) as u8;
    match try_cong_state(sk, classic_key(sk), new_ca, true) {
        Ok(v) | Err(v) => v,
    }
}

#[tracepoint(category = "sock", name = "inet_sock_set_state")]
pub fn cct_tp_setstate(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::SetState) {
        return 0;
    }
    let sk = classic_sk(&ctx, HookId::SetState);
    let protocol = classic_u32(&ctx, global!(CLASSIC.set_state_protocol)) as u16;
    if protocol != IPPROTO_TCP {
        return 0;
    }
    let old = classic_u32(&ctx, global!(CLASSIC.set_state_oldstate)) as u8;
    let new = classic_u32(&ctx, global!(CLASSIC.set_state_newstate)) as u8;
    match try_set_state(sk, old, new, true) {
        Ok(v) | Err(v) => v,
    }
}

#[tracepoint(category = "tcp", name = "tcp_destroy_sock")]
pub fn cct_tp_destroy(ctx: TracePointContext) -> u32 {
    if !enabled(HookId::Destroy) {
        return 0;
    }
    let sk = classic_sk(&ctx, HookId::Destroy);
    match try_destroy(sk, classic_key(sk), true) {
        Ok(v) | Err(v) => v,
    }
}

// tcp:tcp_sendmsg_locked has no skaddr in its tracefs record, so it has no classic twin.

// ---------------------------------------------------------------- start-up snapshot

/// `iter/tcp`: one sample of every TCP socket of the iterating process's network namespace, so
/// flows that are idle when cctrace starts are listed too. The samples go into the iterator's
/// own output (`bpf_seq_write`), not the ring buffer: userspace reads them at its own pace while
/// it drains the ring, so a host with 100,000 sockets loses none of them to a full ring. The
/// flow map is left alone (an idle socket needs no rate limiting, and 100,000 of them would
/// push the busy flows' state out of the LRU). The context is
/// `struct bpf_iter__tcp { struct bpf_iter_meta *meta; struct sock_common *sk_common; uid_t uid; }`.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/tcp")]
pub fn cct_iter_tcp(ctx: *mut c_void) -> i32 {
    // SAFETY: the verifier gives iterator programs this context; sk_common is its second field
    // and may be NULL (end of iteration).
    let (meta, sk) = unsafe { (*(ctx as *const *const u8), *(ctx as *const *const u8).add(1)) };
    if sk.is_null() || meta.is_null() {
        return 0;
    }
    // Time-wait and request sockets are not full sockets; listeners carry no flow.
    let state: u8 = read(sk, global!(OFFSETS.skc_state));
    if state == tcp_state::TIME_WAIT
        || state == tcp_state::NEW_SYN_RECV
        || state == tcp_state::LISTEN
        || !is_flow_socket(sk)
    {
        return 0;
    }
    let key = btf_key(sk);
    if key == 0 {
        return 0;
    }
    // What the hooks already know of the flow (its owner, retransmissions), read, not stored.
    let existing = FLOWS.get_ptr_mut(key);
    let mut flow = match existing {
        // SAFETY: the pointer is into the map value, valid for this program run; copied at once.
        Some(p) => unsafe { *p },
        None => flow_key::new_flow_state(key),
    };
    if !passes_filter(sk, &mut flow) {
        bump(counter::FILTERED);
        return 0;
    }
    // Keyed by socket address (classic hooks), a new flow gets its id here: the listing's
    // sample must carry the id the hooks will use, so that state is stored. Keyed by cookie,
    // nothing is stored (100,000 idle sockets would push busy flows out of the LRU).
    if existing.is_none() && flow.flow_id != 0 {
        store_flow(key, None, &flow);
    }
    let Some(sample) = SNAPSHOT_SAMPLE.get_ptr_mut(0) else { return 0 };
    let hit = Hit {
        sk,
        cookie: key,
        reason: reason::SNAPSHOT,
        ca_state: CA_FROM_SOCKET,
        old_state: 0,
        new_state: 0,
        classic: false,
    };
    // SAFETY: a helper without arguments or preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    fill_sample(sample, &hit, &flow, now);
    // SAFETY: `meta->seq` is the iterator's seq_file (first field of bpf_iter_meta); the record
    // is this CPU's scratch map value, FLOW_SAMPLE_SIZE bytes.
    unsafe {
        let seq = *(meta as *const *mut aya_ebpf::bindings::seq_file);
        bpf_seq_write(seq, sample as *const c_void, FLOW_SAMPLE_SIZE as u32);
    }
    0
}

// ---------------------------------------------------------------- live switch (`cctrace fix --live`)

const SOL_TCP: i32 = 6;
const TCP_CONGESTION: i32 = 13;

/// Two NUL-padded algorithm names are the same name.
#[inline(always)]
fn same_cc(a: &[u8; CC_NAME_LEN], b: &[u8; CC_NAME_LEN]) -> bool {
    let mut i = 0;
    while i < CC_NAME_LEN {
        if a[i] != b[i] {
            return false;
        }
        if a[i] == 0 {
            return true;
        }
        i += 1;
    }
    true
}

/// `iter/tcp`: switch the congestion control of the full TCP sockets of the iterating thread's
/// network namespace that `SWITCH_CONFIG` selects, with `bpf_setsockopt(TCP_CONGESTION)` (the
/// iterator holds the socket lock), and write one [`SwitchRecord`] per socket tried into the
/// iterator's output. The algorithm must be loaded already: from BPF the kernel loads no module.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/tcp")]
pub fn cct_iter_switch(ctx: *mut c_void) -> i32 {
    // SAFETY: `struct bpf_iter__tcp { struct bpf_iter_meta *meta; struct sock_common *sk_common;
    // uid_t uid; }` is the context the verifier gives; sk_common is NULL at the end.
    let (meta, sk) = unsafe { (*(ctx as *const *const u8), *(ctx as *const *const u8).add(1)) };
    if sk.is_null() || meta.is_null() {
        return 0;
    }
    let Some(config) = SWITCH_CONFIG.get(0) else { return 0 };
    let mode = config.mode;
    let state: u8 = read(sk, global!(OFFSETS.skc_state));
    if state == tcp_state::TIME_WAIT || state == tcp_state::NEW_SYN_RECV || state == tcp_state::LISTEN {
        return 0;
    }
    // SAFETY: `sk` is the iterator's typed sock_common; the helper returns NULL unless it is a
    // full TCP socket.
    let tp = unsafe { bpf_skc_to_tcp_sock(sk as *mut c_void) } as *mut c_void;
    if tp.is_null() {
        return 0;
    }
    let mut rec = SwitchRecord::default();
    // SAFETY: a full TCP socket, locked by the iterator; the buffer is ours and sized.
    let got = unsafe {
        bpf_getsockopt(tp, SOL_TCP, TCP_CONGESTION, rec.old_cc.as_mut_ptr() as *mut c_void, CC_NAME_LEN as i32)
    };
    if got != 0 {
        return 0;
    }
    rec.cookie = btf_cookie(sk);
    if mode == switch_mode::COOKIES {
        // SAFETY: a lookup in a hash map of plain values, copied at once.
        match unsafe { SWITCH_COOKIES.get(rec.cookie) } {
            Some(name) => rec.new_cc = name.name,
            None => return 0,
        }
    } else if mode == switch_mode::LIST {
        // Reported as it is: the same name on both sides is never set below.
        rec.new_cc = rec.old_cc;
    } else if mode == switch_mode::NAMES {
        let old = CcName { name: rec.old_cc };
        // SAFETY: as for SWITCH_COOKIES; the key is the NUL-padded name getsockopt wrote.
        match unsafe { SWITCH_NAMES.get(old) } {
            Some(name) => rec.new_cc = name.name,
            None => return 0,
        }
    } else {
        return 0;
    }
    rec.sport = read(sk, global!(OFFSETS.skc_num));
    rec.dport = u16::from_be(read(sk, global!(OFFSETS.skc_dport)));
    if !same_cc(&rec.old_cc, &rec.new_cc) {
        let mut name = rec.new_cc;
        // SAFETY: as for getsockopt; the name is a NUL-padded buffer of its full length.
        rec.result = unsafe {
            bpf_setsockopt(tp, SOL_TCP, TCP_CONGESTION, name.as_mut_ptr() as *mut c_void, CC_NAME_LEN as i32)
        } as i32;
    }
    // SAFETY: `meta->seq` is the iterator's seq_file (first field of bpf_iter_meta); the record
    // is a plain struct on the stack.
    unsafe {
        let seq = *(meta as *const *mut aya_ebpf::bindings::seq_file);
        bpf_seq_write(seq, &rec as *const SwitchRecord as *const c_void, SWITCH_RECORD_SIZE as u32);
    }
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
