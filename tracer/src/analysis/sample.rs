//! Owned, decoded samples: what every source (live kernel, recording, test feed) yields, and
//! their decoding from the wire record.
//!
//! Decoding checks the record's length and version before reading it, so a short or foreign
//! record is an error, never undefined behaviour.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use tracer_common::family::AF_INET6;

use crate::analysis::loss_signals::LossSignals;
use crate::analysis::receive::ReceiveSide;
use crate::analysis::route::Route;
use tracer_common::{
    flag, reason, record_kind, tcp_state, userlock, FlowSample, RecordHeader, FLOW_SAMPLE_SIZE, WIRE_VERSION,
};

/// TCP state machine states (`include/net/tcp_states.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TcpState {
    Established,
    SynSent,
    SynRecv,
    FinWait1,
    FinWait2,
    TimeWait,
    Close,
    CloseWait,
    LastAck,
    Listen,
    Closing,
    NewSynRecv,
    BoundInactive,
    Unknown(u8),
}

impl TcpState {
    pub fn from_raw(v: u8) -> Self {
        match v {
            tcp_state::ESTABLISHED => Self::Established,
            tcp_state::SYN_SENT => Self::SynSent,
            tcp_state::SYN_RECV => Self::SynRecv,
            tcp_state::FIN_WAIT1 => Self::FinWait1,
            tcp_state::FIN_WAIT2 => Self::FinWait2,
            tcp_state::TIME_WAIT => Self::TimeWait,
            tcp_state::CLOSE => Self::Close,
            tcp_state::CLOSE_WAIT => Self::CloseWait,
            tcp_state::LAST_ACK => Self::LastAck,
            tcp_state::LISTEN => Self::Listen,
            tcp_state::CLOSING => Self::Closing,
            tcp_state::NEW_SYN_RECV => Self::NewSynRecv,
            tcp_state::BOUND_INACTIVE => Self::BoundInactive,
            other => Self::Unknown(other),
        }
    }

    /// Name as `ss` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Established => "ESTAB",
            Self::SynSent => "SYN-SENT",
            Self::SynRecv => "SYN-RECV",
            Self::FinWait1 => "FIN-WAIT-1",
            Self::FinWait2 => "FIN-WAIT-2",
            Self::TimeWait => "TIME-WAIT",
            Self::Close => "CLOSE",
            Self::CloseWait => "CLOSE-WAIT",
            Self::LastAck => "LAST-ACK",
            Self::Listen => "LISTEN",
            Self::Closing => "CLOSING",
            Self::NewSynRecv => "NEW-SYN-RECV",
            Self::BoundInactive => "BOUND-INACTIVE",
            Self::Unknown(_) => "UNKNOWN",
        }
    }
}

/// Congestion-avoidance state (`enum tcp_ca_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CaState {
    Open,
    Disorder,
    Cwr,
    Recovery,
    Loss,
}

impl CaState {
    pub const ALL: [CaState; 5] = [Self::Open, Self::Disorder, Self::Cwr, Self::Recovery, Self::Loss];

    pub fn from_raw(v: u8) -> Self {
        match v {
            1 => Self::Disorder,
            2 => Self::Cwr,
            3 => Self::Recovery,
            4 => Self::Loss,
            _ => Self::Open,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Open => "Open",
            Self::Disorder => "Disorder",
            Self::Cwr => "CWR",
            Self::Recovery => "Recovery",
            Self::Loss => "Loss",
        }
    }
}

/// Why a sample was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleReason {
    Periodic,
    Retransmit,
    CaState,
    StateChange,
    Destroy,
    /// Start-up snapshot of a socket that already existed.
    Snapshot,
    /// A receiving socket measured its sender's rate across a loss episode (`receive`).
    ReceiveEpisode,
}

impl SampleReason {
    fn from_raw(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            reason::PERIODIC => Self::Periodic,
            reason::RETRANSMIT => Self::Retransmit,
            reason::CA_STATE => Self::CaState,
            reason::STATE_CHANGE => Self::StateChange,
            reason::DESTROY => Self::Destroy,
            reason::SNAPSHOT => Self::Snapshot,
            reason::RECV_EPISODE => Self::ReceiveEpisode,
            other => return Err(DecodeError::BadField("reason", u64::from(other))),
        })
    }
}

/// One decoded socket snapshot. Times are microseconds, sizes bytes, windows segments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    pub cookie: u64,
    pub netns: u32,
    pub cgroup_id: u64,
    pub reason: SampleReason,
    pub local: std::net::SocketAddr,
    pub remote: std::net::SocketAddr,
    pub tcp_state: TcpState,
    pub old_tcp_state: TcpState,
    pub ca_state: CaState,
    /// Held inline (a kernel name is at most 15 bytes): decoding and copying a sample
    /// allocates nothing.
    pub cc: CompactString,
    /// Process that opened the flow, when the kernel saw it (`connect()` side).
    pub owner: Option<Owner>,
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
    pub srtt_us: u32,
    pub rttvar_us: u32,
    pub min_rtt_us: u32,
    pub mss: u32,
    pub packets_out: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub retrans_out: u32,
    pub total_retrans: u32,
    pub retrans_events: u32,
    pub bytes_sent: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_retrans: u64,
    pub delivered: u32,
    /// Delivery rate, bits/s, as `ss` computes it (`rate_delivered * mss / rate_interval`).
    pub delivery_rate_bps: u64,
    pub app_limited: bool,
    pub cwnd_limited: bool,
    /// `sk_pacing_rate` in bits/s.
    pub pacing_rate_bps: u64,
    pub snd_wnd: u32,
    pub notsent_bytes: u32,
    pub sndbuf: u32,
    pub wmem_queued: u32,
    /// Time the flow has spent busy / receive-window limited / send-buffer limited, µs.
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// `sk_rcvbuf`, bytes (0 in recordings made before cctrace read it).
    #[serde(default)]
    pub rcvbuf: u32,
    /// The application set its send / receive buffer itself (`SO_SNDBUF` / `SO_RCVBUF`: the
    /// socket's `sk_userlocks`), which turns the kernel's autotuning of that buffer off.
    #[serde(default)]
    pub sndbuf_locked: bool,
    #[serde(default)]
    pub rcvbuf_locked: bool,
    /// A writer waits for room in the send buffer (`SOCK_NOSPACE`; periodic samples only).
    #[serde(default)]
    pub writer_blocked: bool,
    /// The connection negotiated no window scaling: the peer's window stays under 64 KiB.
    #[serde(default)]
    pub window_unscaled: bool,
    /// The socket's cached route when the sample was taken (none before the first send and
    /// after close).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Route>,
    /// DSACKs, reordering, timeouts and undone cuts (all `None` in recordings made before
    /// cctrace read them).
    #[serde(default)]
    pub signals: LossSignals,
    /// RACK's RTT of the latest acknowledged segment, µs (0: unknown, as in recordings made
    /// before cctrace read it). See [`tracer_common::FlowSample::rack_rtt_us`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rack_rtt_us: u32,
    /// What the socket receives, and what it shows of its peer's sender.
    #[serde(default)]
    pub receive: ReceiveSide,
    /// The fields the source could not know (the mode without BTF reads no socket struct):
    /// their values above are placeholders, shown as null.
    #[serde(default, skip_serializing_if = "Unknown::is_none")]
    pub unknown: Unknown,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// Fields of a [`Sample`] its source could not read. sock_diag, which the mode without BTF asks,
/// has no `is_cwnd_limited`, no `sk_userlocks` and no `SOCK_NOSPACE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unknown {
    /// `cwnd_limited`.
    #[serde(default)]
    pub cwnd_limited: bool,
    /// `sndbuf_locked` and `rcvbuf_locked`.
    #[serde(default)]
    pub buffer_locks: bool,
    /// `writer_blocked`.
    #[serde(default)]
    pub writer_blocked: bool,
    /// `receive`: the receiving `tcp_sock` fields and the per-segment counts (nothing counts
    /// the segments without BTF).
    #[serde(default)]
    pub receive: bool,
}

impl Unknown {
    /// Everything sock_diag cannot say.
    pub const SOCK_DIAG: Unknown =
        Unknown { cwnd_limited: true, buffer_locks: true, writer_blocked: true, receive: true };

    pub fn is_none(&self) -> bool {
        *self == Self::default()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub pid: u32,
    /// Inline, like [`Sample::cc`].
    pub comm: CompactString,
}

impl Sample {
    /// Keep the identity `prev` had where this sample lacks it: the kernel clears the local port
    /// when a closing socket is unhashed, a connecting one has no peer port yet, and the owner
    /// is known only once seen. The flow's identity is the last complete one.
    pub fn carry_identity_from(&mut self, prev: &Sample) {
        self.keep_addresses(prev.local, prev.remote);
        if self.owner.is_none() {
            self.owner.clone_from(&prev.owner);
        }
        if self.route.is_none() {
            self.route = prev.route;
        }
    }

    /// Become `next`, keeping the identity it lacks as [`Sample::carry_identity_from`] does,
    /// in place: the strings' memory is reused rather than allocated for every sample. Returns
    /// whether the text changed (cc or owner).
    pub fn follow(&mut self, next: &Sample) -> bool {
        let (local, remote, route) = (self.local, self.remote, self.route);
        let mut cc = std::mem::take(&mut self.cc);
        let mut owner = self.owner.take();
        let mut changed = false;
        if cc != next.cc {
            cc.clone_from(&next.cc);
            changed = true;
        }
        if let Some(new) = next.owner.as_ref().filter(|&new| owner.as_ref() != Some(new)) {
            match owner.as_mut() {
                Some(old) => {
                    old.pid = new.pid;
                    old.comm.clone_from(&new.comm);
                }
                None => owner = Some(new.clone()),
            }
            changed = true;
        }
        // Every other field is a number or a plain enum: copied as they are.
        *self = Sample { cc, owner, ..*next };
        self.keep_addresses(local, remote);
        if self.route.is_none() {
            self.route = route;
        }
        changed
    }

    fn keep_addresses(&mut self, local: std::net::SocketAddr, remote: std::net::SocketAddr) {
        if self.local.port() == 0 {
            self.local = local;
        }
        if self.remote.port() == 0 {
            self.remote = remote;
        }
    }

    /// Whether a writer waits for room in the send buffer: the kernel's `SOCK_NOSPACE` where it
    /// was read, else what the buffer's fill says. A writer blocks when what the buffer holds
    /// reaches its size and is woken once a third of it is free again, so while it waits the
    /// buffer is at least two thirds full.
    pub fn writer_waits(&self) -> bool {
        if !self.unknown.writer_blocked {
            return self.writer_blocked;
        }
        self.sndbuf > 0 && u64::from(self.wmem_queued) * 3 >= u64::from(self.sndbuf) * 2
    }

    pub fn is_closing(&self) -> bool {
        self.reason == SampleReason::Destroy
            || (self.reason == SampleReason::StateChange && self.tcp_state == TcpState::Close)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than its header")]
    TooShort(usize),
    #[error("record wire version {0} is not supported (this build reads version {WIRE_VERSION})")]
    Version(u16),
    #[error("record kind {0} is unknown")]
    Kind(u16),
    #[error("record says {declared} bytes but {actual} are present")]
    Length { declared: u32, actual: usize },
    #[error("field {0} has invalid value {1}")]
    BadField(&'static str, u64),
}

/// What decoding needs to know about the kernel that produced the record.
#[derive(Clone, Copy, Debug)]
pub struct DecodeContext {
    /// The kernel's CONFIG_HZ: `chrono_*` counters are in jiffies.
    pub hz: u32,
}

/// Decode one ring-buffer record.
pub fn decode(bytes: &[u8], ctx: &DecodeContext) -> Result<Sample, DecodeError> {
    let header_len = std::mem::size_of::<RecordHeader>();
    if bytes.len() < header_len {
        return Err(DecodeError::TooShort(bytes.len()));
    }
    let header: RecordHeader = bytemuck::pod_read_unaligned(&bytes[..header_len]);
    if header.version != WIRE_VERSION {
        return Err(DecodeError::Version(header.version));
    }
    if header.kind != record_kind::FLOW_SAMPLE {
        return Err(DecodeError::Kind(header.kind));
    }
    if header.size as usize != FLOW_SAMPLE_SIZE || bytes.len() < FLOW_SAMPLE_SIZE {
        return Err(DecodeError::Length { declared: header.size, actual: bytes.len() });
    }
    let raw: FlowSample = bytemuck::pod_read_unaligned(&bytes[..FLOW_SAMPLE_SIZE]);
    from_raw(&raw, ctx)
}

/// An IPv4 peer of a dual-stack socket (`::ffff:a.b.c.d`) is shown as the IPv4 address it is,
/// as people write it and as they filter for it.
fn addr(family: u16, bytes: &[u8; 16], port: u16) -> std::net::SocketAddr {
    let ip = if family == AF_INET6 {
        IpAddr::V6(Ipv6Addr::from(*bytes)).to_canonical()
    } else {
        IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))
    };
    std::net::SocketAddr::new(ip, port)
}

fn c_string(bytes: &[u8]) -> CompactString {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    CompactString::from_utf8_lossy(&bytes[..end])
}

/// Chrono counters: finished periods plus the running one, converted from jiffies to µs
/// exactly as `tcp_get_info_chrono_stats()` does.
fn chrono_us(raw: &FlowSample, hz: u32) -> [u64; 3] {
    let mut out = [0u64; 3];
    let us_per_jiffy = 1_000_000 / u64::from(hz.max(1));
    for (i, slot) in out.iter_mut().enumerate() {
        let mut total = u64::from(raw.chrono_stat[i]);
        // chrono_type 1..=3 is the running kind (0 = none).
        if usize::from(raw.chrono_type) == i + 1 {
            total += u64::from(raw.jiffies.wrapping_sub(raw.chrono_start));
        }
        *slot = total * us_per_jiffy;
    }
    out
}

pub fn from_raw(raw: &FlowSample, ctx: &DecodeContext) -> Result<Sample, DecodeError> {
    let delivery_rate_bps = if raw.rate_interval_us > 0 {
        u64::from(raw.rate_delivered) * u64::from(raw.mss) * 8 * 1_000_000 / u64::from(raw.rate_interval_us)
    } else {
        0
    };
    let [busy_us, rwnd_limited_us, sndbuf_limited_us] = chrono_us(raw, ctx.hz);
    let owner = (raw.flags & flag::OWNER_KNOWN != 0).then(|| Owner { pid: raw.pid, comm: c_string(&raw.comm) });
    Ok(Sample {
        ts_ns: raw.ts_ns,
        cookie: raw.cookie,
        netns: raw.netns,
        cgroup_id: raw.cgroup_id,
        reason: SampleReason::from_raw(raw.reason)?,
        local: addr(raw.family, &raw.saddr, raw.sport),
        remote: addr(raw.family, &raw.daddr, raw.dport),
        tcp_state: TcpState::from_raw(raw.tcp_state),
        old_tcp_state: TcpState::from_raw(raw.old_tcp_state),
        ca_state: CaState::from_raw(raw.ca_state),
        cc: c_string(&raw.cc_name),
        owner,
        snd_cwnd: raw.snd_cwnd,
        snd_ssthresh: raw.snd_ssthresh,
        srtt_us: raw.srtt_us,
        rttvar_us: raw.rttvar_us,
        min_rtt_us: raw.min_rtt_us,
        mss: raw.mss,
        packets_out: raw.packets_out,
        lost_out: raw.lost_out,
        sacked_out: raw.sacked_out,
        retrans_out: raw.retrans_out,
        total_retrans: raw.total_retrans,
        retrans_events: raw.retrans_events,
        bytes_sent: raw.bytes_sent,
        bytes_acked: raw.bytes_acked,
        bytes_received: raw.bytes_received,
        bytes_retrans: raw.bytes_retrans,
        delivered: raw.delivered,
        delivery_rate_bps,
        app_limited: raw.flags & flag::APP_LIMITED != 0,
        cwnd_limited: raw.flags & flag::CWND_LIMITED != 0,
        pacing_rate_bps: raw.pacing_rate.saturating_mul(8),
        snd_wnd: raw.snd_wnd,
        notsent_bytes: raw.notsent_bytes,
        sndbuf: raw.sndbuf,
        wmem_queued: raw.wmem_queued,
        busy_us,
        rwnd_limited_us,
        sndbuf_limited_us,
        rcvbuf: raw.rcvbuf,
        sndbuf_locked: raw.userlocks & userlock::SNDBUF != 0,
        rcvbuf_locked: raw.userlocks & userlock::RCVBUF != 0,
        writer_blocked: raw.flags & flag::WRITER_BLOCKED != 0,
        window_unscaled: raw.flags & flag::WINDOW_UNSCALED != 0,
        route: Route::from_raw(raw.route_ifindex, raw.route_dev_mtu, raw.route_pmtu, raw.route_dev),
        signals: LossSignals::from_raw(raw),
        rack_rtt_us: raw.rack_rtt_us,
        receive: ReceiveSide::from_raw(raw, ctx.hz),
        unknown: Unknown::default(),
    })
}
