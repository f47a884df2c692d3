//! The judgement on one flow as the front ends and the JSON output see it: its class, its flag,
//! its text and fix, and the numbers it rests on.

use serde::{Deserialize, Serialize};

use crate::analysis::diagnosis::limits::LimitedBy;
pub use crate::analysis::diagnosis::policer::PolicerSign;
use crate::analysis::diagnosis::response::ResponseModel;
use crate::analysis::environment::BufferLimits;
use crate::analysis::tunnel::place::Tunnel;
use crate::analysis::udp::RelayedBy;

/// The numbers a flag rests on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Retransmitted share of bytes sent in the window.
    pub loss_ratio: f64,
    pub srtt_ms: f64,
    pub min_rtt_ms: f64,
    pub mean_cwnd: f64,
    pub goodput_bps: f64,
    /// Mathis et al.: MSS/RTT * 1.22/sqrt(p), the most a Reno-like flow gets at this loss.
    pub mathis_bps: f64,
    pub mss: u32,
    pub busy_share: f64,
    pub rwnd_share: f64,
    pub sndbuf_share: f64,
    /// Shares of periodic samples with a full cwnd / marked application-limited by the kernel.
    pub cwnd_full_share: f64,
    pub app_limited_share: f64,
    /// Share of periodic samples with the send buffer under 60 % full.
    pub sndbuf_low_share: f64,
    /// Share of the window's seconds with retransmissions.
    pub lossy_interval_share: f64,
    /// Loss episodes (one per recovery) in the loss horizon, after slow start: all of them,
    /// those without a queue before the loss, those with one; and slow-start overshoots left out.
    pub loss_episodes: u32,
    pub clean_episodes: u32,
    pub queued_episodes: u32,
    pub slow_start_episodes: u32,
    /// Seconds from the first judged episode to now.
    pub episode_span_s: f64,
    /// Median queueing delay (srtt above min_rtt) when the losses were detected, and the
    /// threshold above which an episode counts as queued.
    pub queue_at_loss_ms: f64,
    pub queue_threshold_ms: f64,
    /// Median cwnd reached before each cut (segments).
    pub cwnd_before_loss: f64,
    /// Retransmitted share of bytes and loss episodes per segment sent, over the episodes' span.
    pub episode_loss_ratio: f64,
    pub loss_event_rate: f64,
    /// The congestion control's response function at `loss_event_rate` and srtt (bits/s), and
    /// which one (`mathis` for Reno-like, `cubic` when CUBIC's cubic region predicts more).
    pub response_bps: f64,
    pub response_model: ResponseModel,
    /// Third-highest delivery rate seen without queueing, not application-limited (bits/s).
    pub clean_delivery_bps: f64,
    /// Rate the path has shown beyond the current goodput, when the data supports it (for a
    /// policed flow: up to the policed rate, never beyond).
    pub available_bps: Option<f64>,
    /// The token-bucket policer the losses show, when they show one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policer: Option<PolicerEvidence>,
    /// Mean srtt above the standing-queue threshold over the window.
    pub standing_queue: bool,
    /// The signals that decided `limited_by` and the flag, in words.
    pub decided_by: String,
    /// Of `loss_episodes`, those that began with a retransmission timeout, and those that began
    /// outside recovery (a tail-loss probe); the rest began in fast retransmit.
    #[serde(default)]
    pub timeout_episodes: u32,
    #[serde(default)]
    pub probe_episodes: u32,
    /// The kernel's take-backs: episodes in the loss horizon left out of `loss_episodes`
    /// because the kernel undid their cut or DSACK reported all they retransmitted; over the
    /// flow's life, segments retransmitted, those DSACK reported spurious (`dsack_dups`) and
    /// their share, cuts undone; the kernel's reordering estimate now (segments, null where
    /// unknown).
    #[serde(default)]
    pub spurious_episodes: u32,
    /// Episodes after slow start while the receiver left data unread (its advertised window
    /// fell): counted in the loss rates, left out of `loss_episodes`, as srtt then holds the
    /// receiver's delayed ACKs and not only the path's queue.
    #[serde(default)]
    pub receiver_held_episodes: u32,
    #[serde(default)]
    pub retrans_segments: u32,
    #[serde(default)]
    pub dsack_dups: u32,
    #[serde(default)]
    pub spurious_share: f64,
    #[serde(default)]
    pub undo_events: u32,
    #[serde(default)]
    pub reordering: Option<u32>,
    /// `reordering` when most retransmissions were spurious: not flagged, and not BBR's to fix.
    #[serde(default)]
    pub note: Option<LossNote>,
    /// What the flow's own congestion control decided, when it runs on a deep-mode twin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deep: Option<DeepEvidence>,
    /// The send and receive buffers, for a flow held by one (`sndbuf`, `rwnd`) and for a
    /// loss-based flow whose next limit they may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffers: Option<BufferEvidence>,
    /// For a flow this host receives: what the receiving end alone says of its sender (the
    /// figures above are then the receiving end's, see [`Evidence::of_remote`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_sender: Option<Box<RemoteSenderEvidence>>,
}

impl Evidence {
    /// The figures every front end reads (goodput, RTT, losses, the bound) from a receiving
    /// end's evidence, named as a sender's are: the retransmitted share is the share of bytes
    /// the holes skipped, srtt the RTT the bounds use, min_rtt the handshake's.
    pub fn of_remote(r: &RemoteSenderEvidence) -> Self {
        Self {
            loss_ratio: r.lost_share,
            srtt_ms: r.rtt_ms,
            min_rtt_ms: r.handshake_rtt_ms,
            goodput_bps: r.goodput_bps,
            mathis_bps: r.mathis_bps,
            mss: r.mss,
            loss_episodes: r.loss_episodes,
            clean_episodes: r.clean_episodes,
            queued_episodes: r.queued_episodes,
            episode_span_s: r.span_s,
            queue_at_loss_ms: r.queue_at_loss_ms,
            queue_threshold_ms: r.queue_threshold_ms,
            episode_loss_ratio: r.lost_share,
            loss_event_rate: r.loss_event_rate,
            response_bps: r.response_bps,
            response_model: r.response_model,
            clean_delivery_bps: r.clean_rate_bps,
            standing_queue: r.standing_queue,
            decided_by: r.decided_by.clone(),
            ..Self::default()
        }
    }
}

/// A loss episode's rates: the round trip before its first hole, the one after it was filled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CutEvidence {
    /// Seconds before the verdict.
    pub ago_s: f64,
    pub before_bps: f64,
    pub after_bps: f64,
}

/// What the receiving end alone says of the flow's sender.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoteSenderEvidence {
    /// Its class and flag from the receiving end, after their own hysteresis. The flow's
    /// verdict is this unless the sending socket is on this host (`sender_on_host`, its
    /// cookie): then the flow keeps that socket's own verdict, and this is what the receiving
    /// end would have said.
    pub limited_by: LimitedBy,
    pub flagged: bool,
    pub sender_on_host: Option<u64>,
    /// Why it is not flagged (null when it is).
    pub not_flagged: Option<String>,
    /// The segments were counted one by one (BTF tracepoints): without that nothing is flagged.
    pub counted: bool,
    /// Over the judging window: goodput, the RTT the bounds use (the handshake's plus the
    /// queue), the handshake's RTT, the kernel's receive-side RTT estimate (null until
    /// measured), the mean one-way delay above its floor (null without timestamps).
    pub goodput_bps: f64,
    pub rtt_ms: f64,
    pub handshake_rtt_ms: f64,
    pub rcv_rtt_ms: Option<f64>,
    pub queue_ms: Option<f64>,
    pub standing_queue: bool,
    /// The MSS the sender uses.
    pub mss: u32,
    /// Over the loss horizon: its seconds, the data segments received, holes opened and those
    /// filled late (losses) and early (reordering), the share of bytes the holes skipped.
    pub span_s: f64,
    pub segments: u64,
    pub holes: u32,
    pub loss_holes: u32,
    pub reorder_holes: u32,
    pub lost_share: f64,
    /// Loss episodes after slow start, per second and per segment (the loss-event rate), those
    /// without a queue and with one, and the median queue at them against the threshold.
    pub loss_episodes: u32,
    pub episodes_per_s: f64,
    pub loss_event_rate: f64,
    pub lost_per_segment: f64,
    pub clean_episodes: u32,
    pub queued_episodes: u32,
    pub queue_at_loss_ms: f64,
    pub queue_threshold_ms: f64,
    /// The sender's rate around each episode measured in the horizon (latest last, at most
    /// eight), and the median of after over before.
    pub cuts: Vec<CutEvidence>,
    pub median_cut: Option<f64>,
    /// Its loss response at the loss-event rate and `rtt_ms`: Mathis, and the response used
    /// (CUBIC's where the cuts look like CUBIC's and it is higher).
    pub mathis_bps: f64,
    pub response_bps: f64,
    pub response_model: ResponseModel,
    /// The best rate it delivered between samples without a queue.
    pub clean_rate_bps: f64,
    /// This host's side: the mean window advertised and the share of it the sender delivers
    /// per RTT, the mean bytes received but unread, the receive buffer and who set it.
    pub rcv_wnd: f64,
    pub window_share: f64,
    pub unread_bytes: f64,
    pub rcvbuf: u32,
    pub rcvbuf_set_by: SetBy,
    /// Commands for the sender's host (empty unless flagged): its congestion control, and its
    /// send buffer's maximum where the rate the path showed needs more at this RTT.
    pub advice: Vec<String>,
    /// The signals that decided the class, in words.
    pub decided_by: String,
}

/// Who set a socket buffer's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetBy {
    /// The kernel's autotuning, up to the namespace's `tcp_wmem` / `tcp_rmem` max.
    Autotuning,
    /// The application (`SO_SNDBUF` / `SO_RCVBUF`), which turns autotuning off for it.
    Application,
}

/// What a flow's buffers allow, and what the fix would set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BufferEvidence {
    /// The send buffer now (bytes) and who set it.
    pub sndbuf: u32,
    pub sndbuf_set_by: SetBy,
    /// The flow's namespace's `net.ipv4.tcp_wmem` (null when not read).
    pub tcp_wmem: Option<BufferLimits>,
    /// The host's `net.core.wmem_max`: half the most `SO_SNDBUF` can set (the kernel doubles
    /// what it is asked). Null when not read.
    pub core_wmem_max: Option<u32>,
    /// Over the window: mean bytes in flight, and the shares of samples with the writer
    /// waiting for room and with the flow held by its send buffer.
    pub in_flight_bytes: f64,
    pub writer_blocked_share: f64,
    pub sndbuf_bound_share: f64,
    /// The rate the send buffer allows at the flow's srtt, bits/s (buffer x the share a full
    /// buffer keeps in flight / srtt).
    pub sndbuf_allows_bps: f64,
    /// The most the path delivered to this flow without queueing (three samples), bits/s.
    pub path_shown_bps: f64,
    /// The peer's advertised window (mean over the window, and the largest so far), and the
    /// bandwidth-delay product at min_rtt of the larger of the goodput and what the path
    /// showed, bytes.
    pub snd_wnd: f64,
    pub max_snd_wnd: u32,
    pub bdp_bytes: f64,
    /// The advertised window never passed 64 KiB on a flow it holds: not scaled.
    pub window_scaling_off: bool,
    /// The receiving socket, when it is on this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<ReceiverEvidence>,
    /// For a loss-based flow: what its send buffer limit (the namespace's `tcp_wmem` max, or
    /// its own `SO_SNDBUF`) lets BBR carry at min_rtt, bits/s, and whether that is the limit
    /// BBR would meet next (then the fix raises it in the same step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbr_sndbuf_bps: Option<f64>,
    #[serde(default)]
    pub next_limit_sndbuf: bool,
    /// What the fix sets, when it raises a buffer: this namespace's `tcp_wmem`, the receiving
    /// namespace's `tcp_rmem`; and how the maxima were sized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raise_wmem: Option<BufferLimits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raise_rmem: Option<BufferLimits>,
    /// The send and receive buffer the flow should be able to grow to (bytes): what the
    /// maxima are raised to, and what an application that sets its own should set.
    #[serde(default)]
    pub want_sndbuf: u32,
    #[serde(default)]
    pub want_rcvbuf: u32,
    #[serde(default)]
    pub sizing: String,
}

/// The receiving end of a flow, when it is a socket of this host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReceiverEvidence {
    /// Its network namespace (inode).
    pub netns: u32,
    /// Its receive buffer now (bytes) and who set it.
    pub rcvbuf: u32,
    pub rcvbuf_set_by: SetBy,
    /// That namespace's `net.ipv4.tcp_rmem`, and the host's `net.core.rmem_max` (null when
    /// not read).
    pub tcp_rmem: Option<BufferLimits>,
    pub core_rmem_max: Option<u32>,
}

/// A note on a flow's losses that is not a verdict on what limits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossNote {
    /// Most retransmissions were spurious: the path reorders packets.
    Reordering,
}

impl LossNote {
    pub fn name(self) -> &'static str {
        match self {
            Self::Reordering => "reordering",
        }
    }
}

/// A policer as the flow's losses show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicerEvidence {
    /// The rate it polices at (bits/s).
    pub rate_bps: f64,
    /// `plateau` (burst losses at one rate) or `capped_start` (slow start cut by a burst loss
    /// at the rate the flow never passed since).
    pub sign: PolicerSign,
    /// Loss episodes (after slow start, without a queue) at that rate, of those judged.
    pub episodes_at_rate: u32,
    pub episodes: u32,
    /// Median segments lost per episode.
    pub burst_segments: f64,
}

/// The decisions of a deep-traced flow's algorithm that bear on the verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeepEvidence {
    /// The twin the flow runs (`cct_cubic`).
    pub twin: String,
    /// Loss responses (ssthresh cuts) the algorithm made since it took the flow over.
    pub loss_responses: u64,
    /// Median of ssthresh after / cwnd before over the kept cuts (CUBIC's beta is 0.7, Reno's 0.5).
    pub median_cut: Option<f64>,
    /// The latest cut, as the timeline says it ("loss at 12.4 s: ssthresh 46, cwnd 68 → 46").
    pub last_cut: Option<String>,
}

/// The latest change of a flow's verdict: when, from what, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Seconds into the flow (since its first sample) when the verdict shown changed.
    pub at_s: f64,
    /// What it said before: its class and whether it was flagged.
    pub from: LimitedBy,
    pub was_flagged: bool,
    /// Why a flag cleared (the condition it no longer met); empty for other changes.
    #[serde(default)]
    pub why: String,
    /// The congestion control the flow had before, when the change is a switch of it (the fix,
    /// applied live): the window before it tells nothing of the new one, so it starts afresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cc_from: Option<String>,
}

/// The judgement on one flow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub limited_by: LimitedBy,
    pub flagged: bool,
    /// One paragraph a network engineer can act on.
    pub text: String,
    /// Boxed: most verdicts (every short connection's "not enough data") have none, and a
    /// verdict is kept for every flow in the table.
    pub evidence: Option<Box<Evidence>>,
    /// Commands that apply the fix, make it persistent and roll it back.
    pub fix: Vec<String>,
    /// The flow's peer on this host belongs to a process that carries the traffic on over UDP
    /// with its own congestion control.
    pub relayed_by: Option<RelayedBy>,
    /// The tunnel the flow crosses the path in (its note ends the text).
    pub tunnel: Option<Tunnel>,
    /// The latest change of `limited_by` or `flagged` (its words are in the text).
    pub changed: Option<Change>,
}

impl Verdict {
    pub(super) fn unknown(observed: f64) -> Self {
        Self {
            limited_by: LimitedBy::Unknown,
            flagged: false,
            text: format!("not enough data yet ({observed:.1} s observed)"),
            evidence: None,
            fix: Vec::new(),
            relayed_by: None,
            tunnel: None,
            changed: None,
        }
    }
}
