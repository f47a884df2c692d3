//! Why is each flow as fast as it is? A `limited_by` verdict per flow from what the kernel
//! reports, and a flag on heavy bulk flows held back by loss-based congestion control on a path
//! whose losses are not congestive, with the evidence in numbers and the fix.
//!
//! Pure code: it sees flows through [`FlowTable`] and the environment through [`Environment`],
//! so it judges live data, recordings and test feeds alike. Verdicts are computed over a sliding
//! window of snapshots and change only after they persist (hysteresis), so they do not flap.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::analysis::decisions::{algorithm_of, DecisionKind, DecisionLog};
use crate::analysis::environment::Environment;
use crate::analysis::fix;
use crate::analysis::model::{self, Flow, FlowTable, SampleCounts, TableChanges};
use crate::analysis::units::{pct, rate};

use tracer_common::NS_PER_SEC;

/// Congestion controls that back off on packet loss alone.
pub const LOSS_BASED: &[&str] =
    &["reno", "cubic", "bic", "htcp", "highspeed", "scalable", "hybla", "westwood", "illinois", "veno", "yeah", "lp"];

pub fn is_loss_based(cc: &str) -> bool {
    LOSS_BASED.contains(&algorithm_of(cc))
}

/// What limits a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitedBy {
    /// Not enough observations yet.
    Unknown,
    /// Nothing moved in the window.
    Idle,
    /// The local side only receives; the peer's sender decides the rate.
    Receiving,
    /// The sender had nothing to send much of the time.
    Application,
    /// Stalled by the peer's advertised receive window.
    #[serde(rename = "rwnd")]
    ReceiveWindow,
    /// Stalled by the local send buffer.
    #[serde(rename = "sndbuf")]
    SendBuffer,
    /// The congestion window was full.
    #[serde(rename = "cwnd")]
    CongestionWindow,
    /// Sending at the pacing rate with room left in cwnd (rate-based CC such as BBR).
    Pacing,
    /// The network path: a backlogged sender filling the bottleneck (a standing queue, or the
    /// queue rising before its losses). Not a problem to fix on this host.
    Path,
    /// A process's own congestion control (QUIC, a userspace VPN's TCP stack) decides the rate,
    /// not the kernel's: heavy UDP flows.
    Userspace,
}

impl LimitedBy {
    /// Every verdict, in declaration order.
    pub const ALL: [LimitedBy; 9] = [
        Self::Unknown,
        Self::Idle,
        Self::Receiving,
        Self::Application,
        Self::ReceiveWindow,
        Self::SendBuffer,
        Self::CongestionWindow,
        Self::Pacing,
        Self::Path,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Idle => "idle",
            Self::Receiving => "receiving",
            Self::Application => "application",
            Self::ReceiveWindow => "rwnd",
            Self::SendBuffer => "sndbuf",
            Self::CongestionWindow => "cwnd",
            Self::Pacing => "pacing",
            Self::Path => "path",
            Self::Userspace => "userspace",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Unknown => "not enough data yet",
            Self::Idle => "idle: nothing sent or received",
            Self::Receiving => "receiving: the peer's sender sets the pace",
            Self::Application => "application-limited: the sender often had nothing to send",
            Self::ReceiveWindow => "receive-window-limited: the peer's receive window is full",
            Self::SendBuffer => "send-buffer-limited: the local send buffer is too small",
            Self::CongestionWindow => "congestion-window-limited: cwnd is full",
            Self::Pacing => "pacing/bandwidth-limited: sending at the pacing rate",
            Self::Path => "network-path-limited: the flow fills the bottleneck (its RTT rises with its window)",
            Self::Userspace => "userspace congestion control: the owning process, not the kernel, sets the rate",
        }
    }
}

/// Thresholds; the defaults suit a host doing media streaming and bulk transfers.
#[derive(Clone, Debug)]
pub struct DiagnosisConfig {
    /// Snapshots are taken at each evaluation; this many make the judging window.
    pub window: usize,
    /// Fewer observed seconds than this: "not enough data".
    pub min_observed_secs: f64,
    /// A flow is heavy once it moved this many bytes in total...
    pub heavy_min_bytes: u64,
    /// ...and moves at least this rate (bits/s) over the window, or keeps its cwnd full.
    pub heavy_min_bps: f64,
    /// Share of the window the sender must have been backlogged to count as bulk.
    pub min_busy_share: f64,
    /// Share of the window stalled by rwnd / sndbuf that decides those verdicts.
    pub stall_share: f64,
    /// Share of samples with a full cwnd that makes a flow cwnd-limited.
    pub cwnd_full_share: f64,
    /// Share of samples with a full cwnd that makes a slow flow heavy all the same: it wants
    /// more than it gets (nearly always full, unlike a flow that fills its window now and then).
    pub wants_more_cwnd_full_share: f64,
    /// Share of samples with nothing to send that makes a flow application-limited.
    pub no_backlog_share: f64,
    /// Share of samples the kernel marked application-limited that makes a flow so. Lower than
    /// the others: in loss recovery cwnd shrinks to what is in flight, hiding the idle time.
    pub app_limited_share: f64,
    /// Share of samples with a send buffer under 60 % full that makes a flow application-limited.
    pub sndbuf_low_share: f64,
    /// Loss episodes (see [`model::LossEpisode`]) are judged over this many seconds: at 0.05 %
    /// loss on 80 ms a CUBIC flow loses about once every 3 s, so a five-second window sees 0-2.
    pub loss_horizon_secs: f64,
    /// Episodes (after slow start) needed before the loss pattern is judged at all. Two: at
    /// 0.05 % on 80 ms a third comes only ~10 s after slow start, too late to flag within 15 s;
    /// both must then be without a queue (`clean_episode_share`), so one noisy RTT delays the
    /// flag rather than raising it.
    pub min_loss_episodes: usize,
    /// A loss episode "had a queue" when srtt at the loss exceeded min_rtt by more than
    /// `min_rtt * queue_ratio + queue_slack_us`. A drop-tail bottleneck drops when its queue is
    /// full, so a flow overflowing it sees at least queue/rate there: a quarter BDP is
    /// `0.25 * min_rtt`, well above `0.1 * min_rtt + 2 ms` for any path over 13 ms. A random
    /// loss on an uncongested path shows 0-2 ms (ACK clocking, emulator or NIC scheduling);
    /// the 2 ms slack absorbs that on short paths, the relative part on long ones (measured:
    /// 0.3-1.5 ms typical, single outliers to 6 ms on a busy 2-core host). Buffers shallower than
    /// `0.1 BDP + 2 ms` cannot be told from noise this way; the delivery rate then still shows
    /// the path's ceiling. The flow table uses the same rule for "delivery without queueing".
    pub queue_ratio: f64,
    pub queue_slack_us: f64,
    /// Share of judged episodes without a queue that makes the losses non-congestive (a clear
    /// majority: one noisy RTT sample must not flip the verdict).
    pub clean_episode_share: f64,
    /// Share of judged episodes with a queue that makes a loss-based flow path-limited.
    pub queued_episode_share: f64,
    /// For rate-based senders (BBR), which keep losing at a full bottleneck as they probe,
    /// only part of their losses come at a full queue: this share of episodes with a queue
    /// (and at least two) means they fill the path.
    pub rate_based_queued_share: f64,
    /// A rate-based sender delivering at least this share of the best rate seen without
    /// queueing is at the path's ceiling: its delivery rate stays flat whatever its window.
    /// (Not used for loss-based senders: their best clean rate may date from a slow start cut
    /// short by random loss.)
    pub ceiling_share: f64,
    /// Mean srtt above `min_rtt * (1 + standing_queue_ratio) + standing_queue_slack_us` over
    /// the window is a standing queue: the flow fills the bottleneck's buffer (CUBIC on a deep
    /// buffer may not lose for a long time). Above the 1-3 ms jitter of clean paths and the
    /// ~3 ms of small-window flows on long paths, below the half-full quarter-BDP buffer.
    pub standing_queue_ratio: f64,
    pub standing_queue_slack_us: f64,
    /// Retransmitted share of bytes, over the episodes' span, below which loss is not judged
    /// (0.02 %: below it a flow on a 30 ms path could reach ~33 Mbit/s per the Mathis bound and
    /// loses less than once per 5000 segments, too rarely for a verdict within a horizon).
    pub min_loss_ratio: f64,
    /// The flow's goodput must be at most this times its CC's response function at the measured
    /// loss-event rate and RTT: then its loss response explains its rate.
    pub response_slack: f64,
    /// "At least N available" is said only when the best delivery rate seen without queueing
    /// (in three samples) is at least this times the current goodput.
    pub available_ratio: f64,
    /// Evaluations a new verdict must persist before it replaces the old one.
    pub confirm: u32,
    /// Evaluations the flag condition must fail before the flag is cleared.
    pub release: u32,
}

impl Default for DiagnosisConfig {
    fn default() -> Self {
        Self {
            window: 5,
            min_observed_secs: 3.0,
            heavy_min_bytes: 500_000,
            heavy_min_bps: 1_000_000.0,
            min_busy_share: 0.7,
            stall_share: 0.3,
            cwnd_full_share: 0.5,
            wants_more_cwnd_full_share: 0.9,
            no_backlog_share: 0.6,
            app_limited_share: 0.4,
            sndbuf_low_share: 0.5,
            loss_horizon_secs: 30.0,
            min_loss_episodes: 2,
            queue_ratio: model::DEFAULT_QUEUE_RATIO,
            queue_slack_us: model::DEFAULT_QUEUE_SLACK_US,
            clean_episode_share: 0.75,
            queued_episode_share: 0.5,
            rate_based_queued_share: 0.2,
            ceiling_share: 0.8,
            standing_queue_ratio: 0.15,
            standing_queue_slack_us: 3_000.0,
            min_loss_ratio: 0.0002,
            response_slack: 2.0,
            available_ratio: 1.5,
            confirm: 2,
            release: 5,
        }
    }
}

impl DiagnosisConfig {
    /// A heavy flow: it moved at least `heavy_min_bytes` in total and moves at least
    /// `heavy_min_bps` (or keeps its congestion window full, which is what a flow crushed to a
    /// few Mbit/s by loss looks like). The one definition the flag, the UI's default view and
    /// its help use.
    pub fn is_heavy(&self, moved_bytes: u64, rate_bps: f64, keeps_cwnd_full: bool) -> bool {
        moved_bytes >= self.heavy_min_bytes && (rate_bps >= self.heavy_min_bps || keeps_cwnd_full)
    }

    /// [`Self::is_heavy`] for one flow of the table and its verdict: what it moved (acked plus
    /// received), its goodput, and whether its verdict says the congestion window held it. A
    /// flagged flow is always heavy. The rule the UI, the exports and the exporter share.
    pub fn flow_is_heavy(&self, flow: &model::Flow, verdict: Option<&Verdict>) -> bool {
        let limited_by = verdict.map_or(LimitedBy::Unknown, |v| v.limited_by);
        self.flow_is_heavy_as(flow, limited_by, verdict.is_some_and(|v| v.flagged))
    }

    /// [`Self::flow_is_heavy`] from the verdict's class and flag, for a front end that keeps
    /// those rather than the verdict.
    pub fn flow_is_heavy_as(&self, flow: &model::Flow, limited_by: LimitedBy, flagged: bool) -> bool {
        let s = &flow.latest;
        let moved = s.bytes_acked.saturating_add(s.bytes_received);
        flagged || self.is_heavy(moved, flow.rates.throughput_bps, limited_by == LimitedBy::CongestionWindow)
    }

    /// [`Self::is_heavy`] in words, for help texts.
    pub fn heavy_rule(&self) -> String {
        format!(
            "heavy: ≥{} MB at ≥{} Mbit/s (or cwnd full)",
            self.heavy_min_bytes as f64 / 1e6,
            self.heavy_min_bps / 1e6
        )
    }
}

/// The numbers a flag rests on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// Rate the path has shown beyond the current goodput, when the data supports it.
    pub available_bps: Option<f64>,
    /// Mean srtt above the standing-queue threshold over the window.
    pub standing_queue: bool,
    /// The signals that decided `limited_by` and the flag, in words.
    pub decided_by: String,
    /// What the flow's own congestion control decided, when it runs on a deep-mode twin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deep: Option<DeepEvidence>,
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
    pub relayed_by: Option<crate::analysis::udp::RelayedBy>,
}

impl Verdict {
    fn unknown(observed: f64) -> Self {
        Self {
            limited_by: LimitedBy::Unknown,
            flagged: false,
            text: format!("not enough data yet ({observed:.1} s observed)"),
            evidence: None,
            fix: Vec::new(),
            relayed_by: None,
        }
    }
}

/// Counters of one flow at one evaluation.
#[derive(Clone, Copy, Debug)]
struct Snapshot {
    ts_ns: u64,
    busy_us: u64,
    rwnd_us: u64,
    sndbuf_us: u64,
    bytes_acked: u64,
    bytes_received: u64,
    bytes_sent: u64,
    bytes_retrans: u64,
    total_retrans: u32,
    srtt_us: u32,
    min_rtt_us: u32,
    cwnd: u32,
    counts: SampleCounts,
}

impl Snapshot {
    fn of(flow: &Flow) -> Self {
        let s = &flow.latest;
        Self {
            ts_ns: s.ts_ns,
            busy_us: s.busy_us,
            rwnd_us: s.rwnd_limited_us,
            sndbuf_us: s.sndbuf_limited_us,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_received,
            bytes_sent: s.bytes_sent,
            bytes_retrans: s.bytes_retrans,
            total_retrans: s.total_retrans,
            srtt_us: s.srtt_us,
            min_rtt_us: s.min_rtt_us,
            cwnd: s.snd_cwnd,
            counts: flow.counts,
        }
    }
}

/// Per-flow memory of the diagnoser: snapshots and hysteresis counters.
#[derive(Debug, Default)]
struct FlowMemory {
    snapshots: VecDeque<Snapshot>,
    shown: Option<Verdict>,
    candidate: Option<LimitedBy>,
    candidate_runs: u32,
    flag_runs: u32,
    unflag_runs: u32,
    flagged: bool,
}

/// What the window shows, before hysteresis.
#[derive(Clone, Debug)]
struct Window {
    secs: f64,
    goodput_bps: f64,
    sent_bytes: u64,
    received_bytes: u64,
    acked_bytes: u64,
    loss_ratio: f64,
    busy_share: f64,
    rwnd_share: f64,
    sndbuf_share: f64,
    mean_cwnd: f64,
    mean_srtt_us: f64,
    min_rtt_us: f64,
    /// Share of samples in the window with a full congestion window.
    cwnd_full_share: f64,
    /// Share of samples in the window where the sender had nothing to send.
    no_backlog_share: f64,
    /// Share of samples the kernel marked application-limited.
    app_limited_share: f64,
    /// Share of samples with the send buffer under 60 % full.
    sndbuf_low_share: f64,
    /// Share of the window's intervals (between snapshots) with at least one retransmission:
    /// random loss shows up in nearly every interval, a congestion episode in one or two.
    lossy_interval_share: f64,
}

fn window_of(snaps: &VecDeque<Snapshot>) -> Option<Window> {
    let (first, last) = (snaps.front()?, snaps.back()?);
    let dt_ns = last.ts_ns.checked_sub(first.ts_ns)?;
    if dt_ns == 0 {
        return None;
    }
    let secs = dt_ns as f64 / NS_PER_SEC as f64;
    let span_us = dt_ns as f64 / 1000.0;
    let share = |a: u64, b: u64| (b.saturating_sub(a) as f64 / span_us).clamp(0.0, 1.0);
    let acked = last.bytes_acked.saturating_sub(first.bytes_acked);
    let received = last.bytes_received.saturating_sub(first.bytes_received);
    let sent = last.bytes_sent.saturating_sub(first.bytes_sent);
    let retrans = last.bytes_retrans.saturating_sub(first.bytes_retrans);
    // The first snapshot only anchors the deltas; means are over the rest.
    let tail: Vec<&Snapshot> = snaps.iter().skip(1).collect();
    let n = tail.len().max(1) as f64;
    let mean = |f: &dyn Fn(&Snapshot) -> f64| tail.iter().map(|s| f(s)).sum::<f64>() / n;
    let min_rtt = tail.iter().map(|s| s.min_rtt_us).filter(|&v| v > 0).min().unwrap_or(0);
    let samples = last.counts.samples.saturating_sub(first.counts.samples);
    let count_share =
        |a: u64, b: u64| if samples == 0 { 0.0 } else { (b.saturating_sub(a) as f64 / samples as f64).clamp(0.0, 1.0) };
    Some(Window {
        secs,
        goodput_bps: (acked + received) as f64 * 8.0 / secs,
        sent_bytes: sent,
        received_bytes: received,
        acked_bytes: acked,
        loss_ratio: if sent > 0 { retrans as f64 / sent as f64 } else { 0.0 },
        busy_share: share(first.busy_us, last.busy_us),
        rwnd_share: share(first.rwnd_us, last.rwnd_us),
        sndbuf_share: share(first.sndbuf_us, last.sndbuf_us),
        mean_cwnd: mean(&|s| f64::from(s.cwnd)),
        mean_srtt_us: mean(&|s| f64::from(s.srtt_us)),
        min_rtt_us: f64::from(min_rtt),
        cwnd_full_share: count_share(first.counts.cwnd_full, last.counts.cwnd_full),
        no_backlog_share: count_share(first.counts.no_backlog, last.counts.no_backlog),
        app_limited_share: count_share(first.counts.app_limited, last.counts.app_limited),
        sndbuf_low_share: count_share(first.counts.sndbuf_low, last.counts.sndbuf_low),
        lossy_interval_share: {
            let intervals = snaps.len().saturating_sub(1).max(1) as f64;
            let lossy =
                snaps.iter().zip(snaps.iter().skip(1)).filter(|(a, b)| b.total_retrans > a.total_retrans).count();
            lossy as f64 / intervals
        },
    })
}

/// Mathis et al. (1997) steady-state bound for a Reno-like flow, bits/s.
pub fn mathis_bps(mss: u32, rtt_s: f64, loss: f64) -> f64 {
    if rtt_s <= 0.0 || loss <= 0.0 {
        return f64::INFINITY;
    }
    f64::from(mss) * 8.0 / rtt_s * 1.22 / loss.sqrt()
}

/// CUBIC's average window in its cubic region (RFC 8312 §5.1, C = 0.4, β = 0.7), bits/s. Linux
/// CUBIC takes the larger of this and its Reno-friendly window (the Mathis bound).
pub fn cubic_bps(mss: u32, rtt_s: f64, loss: f64) -> f64 {
    if rtt_s <= 0.0 || loss <= 0.0 {
        return f64::INFINITY;
    }
    let (c, beta) = (0.4_f64, 0.7_f64);
    let w = (c * (3.0 + beta) / (4.0 * (1.0 - beta))).powf(0.25) * rtt_s.powf(0.75) / loss.powf(0.75);
    w * f64::from(mss) * 8.0 / rtt_s
}

/// The response function of `cc` at loss-event rate `p`: (bits/s, model name).
/// Which loss-response model predicts a flow's rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponseModel {
    /// Reno-like: Mathis et al.
    Mathis,
    /// CUBIC's cubic region, where it predicts more than Reno's.
    Cubic,
}

fn response_of(cc: &str, mss: u32, rtt_s: f64, p: f64) -> (f64, ResponseModel) {
    let mathis = mathis_bps(mss, rtt_s, p);
    if algorithm_of(cc) == "cubic" {
        let cubic = cubic_bps(mss, rtt_s, p);
        if cubic > mathis {
            return (cubic, ResponseModel::Cubic);
        }
    }
    (mathis, ResponseModel::Mathis)
}

/// What the flow's loss episodes over the loss horizon show.
#[derive(Clone, Debug, Default)]
struct LossView {
    /// Judged episodes (after slow start for loss-based senders) and how they split.
    episodes: usize,
    clean: usize,
    queued: usize,
    slow_start: usize,
    span_secs: f64,
    median_queue_us: f64,
    threshold_us: f64,
    median_cwnd_before: f64,
    loss_ratio: f64,
    event_rate: f64,
    clean_delivery_bps: f64,
}

impl LossView {
    fn clean_share(&self) -> f64 {
        if self.episodes == 0 {
            0.0
        } else {
            self.clean as f64 / self.episodes as f64
        }
    }

    fn queued_share(&self) -> f64 {
        if self.episodes == 0 {
            0.0
        } else {
            self.queued as f64 / self.episodes as f64
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn loss_view(flow: &Flow, cfg: &DiagnosisConfig, now_ns: u64) -> LossView {
    let s = &flow.latest;
    let loss_based = is_loss_based(&s.cc);
    let min_rtt = s.min_rtt_us;
    let threshold_us = model::queue_threshold_us(min_rtt, cfg.queue_ratio, cfg.queue_slack_us);
    let since = now_ns.saturating_sub((cfg.loss_horizon_secs * NS_PER_SEC as f64) as u64);
    let recent: Vec<_> = flow.loss_episodes().filter(|e| e.ts_ns >= since).collect();
    // Rate-based senders leave ssthresh alone: "slow start" means nothing for them.
    let (overshoots, judged): (Vec<_>, Vec<_>) = recent.into_iter().partition(|e| loss_based && e.slow_start);
    let mut v = LossView {
        threshold_us,
        slow_start: overshoots.len(),
        clean_delivery_bps: flow.loss.as_ref().map_or(0.0, |l| l.best_clean_bps[2] as f64),
        ..LossView::default()
    };
    let Some(first) = judged.first() else { return v };
    // The queue is judged against today's min_rtt: the kernel's windowed minimum only falls.
    let queue = |e: &model::LossEpisode| f64::from(e.srtt_at_us.saturating_sub(min_rtt.min(e.min_rtt_us)));
    v.episodes = judged.len();
    v.queued = judged.iter().filter(|e| queue(e) > threshold_us).count();
    v.clean = v.episodes - v.queued;
    v.span_secs = now_ns.saturating_sub(first.ts_ns) as f64 / NS_PER_SEC as f64;
    v.median_queue_us = median(judged.iter().map(queue).collect());
    v.median_cwnd_before = median(judged.iter().map(|e| f64::from(e.cwnd_before)).collect());
    let sent = s.bytes_sent.saturating_sub(first.bytes_sent);
    if sent > 0 {
        v.loss_ratio = s.bytes_retrans.saturating_sub(first.bytes_retrans) as f64 / sent as f64;
        // n episodes over the segments sent since the first: slightly high for small n, which
        // lowers the response function, so it never flatters the flag.
        v.event_rate = v.episodes as f64 / (sent as f64 / f64::from(s.mss.max(1)));
    }
    v
}

/// Mean srtt above the standing-queue threshold over the window.
fn standing_queue(w: &Window, cfg: &DiagnosisConfig) -> bool {
    w.min_rtt_us > 0.0 && w.mean_srtt_us > w.min_rtt_us * (1.0 + cfg.standing_queue_ratio) + cfg.standing_queue_slack_us
}

/// Does the flow fill the path's bottleneck? A standing queue, or the queue at its losses.
fn fills_path(w: &Window, lv: &LossView, cfg: &DiagnosisConfig, cc: &str) -> bool {
    if standing_queue(w, cfg) {
        return true;
    }
    if is_loss_based(cc) {
        lv.episodes >= 2 && lv.queued_share() >= cfg.queued_episode_share
    } else {
        (lv.queued >= 2 && lv.queued_share() >= cfg.rate_based_queued_share) || at_ceiling(w, lv, cfg)
    }
}

fn at_ceiling(w: &Window, lv: &LossView, cfg: &DiagnosisConfig) -> bool {
    lv.clean_delivery_bps > 0.0 && w.goodput_bps >= cfg.ceiling_share * lv.clean_delivery_bps
}

fn classify(w: &Window, lv: &LossView, cfg: &DiagnosisConfig, cc: &str) -> LimitedBy {
    let moved = w.sent_bytes + w.received_bytes;
    if moved == 0 {
        return LimitedBy::Idle;
    }
    if w.received_bytes > w.acked_bytes.saturating_mul(4) && w.sent_bytes < w.received_bytes / 4 {
        return LimitedBy::Receiving;
    }
    if w.rwnd_share >= cfg.stall_share {
        return LimitedBy::ReceiveWindow;
    }
    // The kernel marks delivery-rate samples application-limited only while packets in flight
    // are below cwnd and nothing is left to send: a stream that keeps up with its application.
    // A sender that never fills its send buffer is paced by its application, even when loss
    // recovery keeps its small cwnd full.
    if w.app_limited_share >= cfg.app_limited_share
        || w.no_backlog_share >= cfg.no_backlog_share
        || w.sndbuf_low_share >= cfg.sndbuf_low_share
    {
        return LimitedBy::Application;
    }
    let backlogged = |fallback: LimitedBy| if fills_path(w, lv, cfg, cc) { LimitedBy::Path } else { fallback };
    // A full cwnd is the root cause even when the application then blocks on its send buffer.
    if w.cwnd_full_share >= cfg.cwnd_full_share {
        return backlogged(LimitedBy::CongestionWindow);
    }
    if w.sndbuf_share >= cfg.stall_share {
        return LimitedBy::SendBuffer;
    }
    // The write queue ran dry much of the time. (Chrono "busy" runs until the retransmit queue
    // empties too, so on a lossy long path this alone would miss streams that keep up.)
    if w.busy_share + w.rwnd_share + w.sndbuf_share < cfg.min_busy_share {
        return LimitedBy::Application;
    }
    backlogged(if is_loss_based(cc) { LimitedBy::CongestionWindow } else { LimitedBy::Pacing })
}

fn evidence_of(flow: &Flow, w: &Window, lv: &LossView, cfg: &DiagnosisConfig, limited: LimitedBy) -> Evidence {
    let s = &flow.latest;
    let mss = s.mss;
    let rtt_s = w.mean_srtt_us / 1e6;
    // The response functions take the loss-event rate when episodes were seen (that is what
    // the AIMD models count), else the retransmitted share.
    let p = if lv.event_rate > 0.0 { lv.event_rate } else { w.loss_ratio };
    let (response_bps, response_model) = response_of(&s.cc, mss, rtt_s, p);
    let available = lv.clean_delivery_bps - w.goodput_bps;
    let available_bps =
        (lv.clean_delivery_bps >= cfg.available_ratio * w.goodput_bps && available > 0.0).then_some(available);
    let standing = standing_queue(w, cfg);
    let decided_by = decided_by(w, lv, cfg, limited, standing);
    Evidence {
        loss_ratio: w.loss_ratio,
        srtt_ms: w.mean_srtt_us / 1000.0,
        min_rtt_ms: w.min_rtt_us / 1000.0,
        mean_cwnd: w.mean_cwnd,
        goodput_bps: w.goodput_bps,
        mathis_bps: mathis_bps(mss, rtt_s, p),
        mss,
        busy_share: w.busy_share,
        rwnd_share: w.rwnd_share,
        sndbuf_share: w.sndbuf_share,
        cwnd_full_share: w.cwnd_full_share,
        app_limited_share: w.app_limited_share,
        sndbuf_low_share: w.sndbuf_low_share,
        lossy_interval_share: w.lossy_interval_share,
        loss_episodes: lv.episodes as u32,
        clean_episodes: lv.clean as u32,
        queued_episodes: lv.queued as u32,
        slow_start_episodes: lv.slow_start as u32,
        episode_span_s: lv.span_secs,
        queue_at_loss_ms: lv.median_queue_us / 1000.0,
        queue_threshold_ms: lv.threshold_us / 1000.0,
        cwnd_before_loss: lv.median_cwnd_before,
        episode_loss_ratio: lv.loss_ratio,
        loss_event_rate: lv.event_rate,
        response_bps,
        response_model,
        clean_delivery_bps: lv.clean_delivery_bps,
        available_bps,
        standing_queue: standing,
        decided_by,
        deep: None,
    }
}

/// The signals behind `limited_by`, in words.
fn deep_evidence(cookie: u64, first_seen_ns: u64, decisions: &DecisionLog) -> Option<DeepEvidence> {
    let mut twin = None;
    let mut ratios = Vec::new();
    let mut last_cut = None;
    for d in decisions.of(cookie) {
        twin = Some(d.algo.twin());
        if let DecisionKind::SsthreshCut { cwnd_before, ssthresh_after, .. } = d.kind {
            if cwnd_before > 0 {
                ratios.push(f64::from(ssthresh_after) / f64::from(cwnd_before));
            }
            let at = d.ts_ns.saturating_sub(first_seen_ns) as f64 / 1e9;
            let text = d.describe();
            // "loss: ssthresh 46, ..." -> "loss at 12.4 s: ssthresh 46, ..."
            last_cut = Some(match text.split_once(": ") {
                Some((what, rest)) => format!("{what} at {at:.1} s: {rest}"),
                None => text,
            });
        }
    }
    ratios.sort_by(f64::total_cmp);
    Some(DeepEvidence {
        twin: twin?.to_string(),
        loss_responses: decisions.loss_responses(cookie),
        median_cut: ratios.get(ratios.len() / 2).copied(),
        last_cut,
    })
}

fn decided_by(w: &Window, lv: &LossView, cfg: &DiagnosisConfig, limited: LimitedBy, standing: bool) -> String {
    let episodes = std::fmt::from_fn(|f| {
        if lv.episodes > 0 {
            write!(
                f,
                "{} loss episodes in {:.0} s: {} with srtt within {:.1} ms of min_rtt at the loss, {} above (median queue {:.1} ms)",
                lv.episodes,
                lv.span_secs,
                lv.clean,
                lv.threshold_us / 1000.0,
                lv.queued,
                lv.median_queue_us / 1000.0
            )
        } else {
            f.write_str("no loss episodes after slow start")
        }
    });
    match limited {
        LimitedBy::Path if standing => format!(
            "standing queue: mean srtt {:.1} ms vs min_rtt {:.1} ms (threshold {:.1} ms); {episodes}",
            w.mean_srtt_us / 1000.0,
            w.min_rtt_us / 1000.0,
            (w.min_rtt_us * (1.0 + cfg.standing_queue_ratio) + cfg.standing_queue_slack_us) / 1000.0
        ),
        LimitedBy::Path if lv.queued >= 2 && lv.queued_share() >= cfg.rate_based_queued_share => {
            format!("queue before the losses: {episodes}")
        }
        LimitedBy::Path => format!(
            "goodput {} is at the {} the path delivered without queueing; {episodes}",
            rate(w.goodput_bps),
            rate(lv.clean_delivery_bps)
        ),
        LimitedBy::CongestionWindow | LimitedBy::Pacing => {
            format!("full cwnd in {:.0}% of samples, no standing queue; {episodes}", w.cwnd_full_share * 100.0)
        }
        _ => String::new(),
    }
}

/// The flag condition; returns why not, for the verdict text.
fn flag_condition(
    flow: &Flow,
    w: &Window,
    lv: &LossView,
    ev: &Evidence,
    limited: LimitedBy,
    cfg: &DiagnosisConfig,
) -> Result<(), &'static str> {
    let total = flow.latest.bytes_acked + flow.latest.bytes_received;
    if !is_loss_based(&flow.latest.cc) {
        return Err("congestion control is not loss-based");
    }
    if limited == LimitedBy::Path {
        return Err("the flow fills the path: its losses are the bottleneck's");
    }
    if limited != LimitedBy::CongestionWindow {
        return Err("not congestion-window-limited");
    }
    // Heavy: it moved real data and either moves it fast or wants to (its cwnd is always full,
    // which is exactly what a flow crushed to a few Mbit/s by loss looks like).
    let wants_more = w.cwnd_full_share >= cfg.wants_more_cwnd_full_share;
    if !cfg.is_heavy(total, w.goodput_bps, wants_more) {
        return Err("not a heavy flow");
    }
    if lv.episodes < cfg.min_loss_episodes || lv.loss_ratio < cfg.min_loss_ratio {
        return Err("too few losses to judge");
    }
    if lv.clean_share() < cfg.clean_episode_share {
        return Err("srtt rose above min_rtt before too many of the losses: they look congestive");
    }
    // Its rate is the loss response's, or at least not the path's: the path showed clearly
    // more without queueing. (After a long slow-start overshoot CUBIC drains a huge cwnd for
    // seconds, above its steady-state response, while its losses already show no queue.)
    if w.goodput_bps > cfg.response_slack * ev.response_bps && ev.available_bps.is_none() {
        return Err("goodput is above what its loss response allows: the losses do not hold it back");
    }
    Ok(())
}

#[derive(Debug, Default)]
pub struct Diagnoser {
    cfg: DiagnosisConfig,
    flows: HashMap<u64, FlowMemory>,
    /// Bumped by every call that may change a verdict: see [`Diagnoser::generation`].
    generation: u64,
    /// The table's departures when its flows were last judged: while they stay the same, no
    /// flow's memory is to be dropped.
    departed: Option<u64>,
}

impl Diagnoser {
    pub fn new(cfg: DiagnosisConfig) -> Self {
        Self { cfg, flows: HashMap::new(), generation: 0, departed: None }
    }

    /// Changes whenever a verdict may have changed (an evaluation, a citation, a relay noted,
    /// everything forgotten): a front end that copies verdicts need not look them up again
    /// on a frame where it did not.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Forget every flow's verdict and memory, keeping the thresholds.
    pub fn forget(&mut self) {
        self.generation += 1;
        self.flows.clear();
        self.departed = None;
    }

    /// Take a snapshot of every flow and re-judge it. Call at a steady rate (e.g. once a second);
    /// `now_ns` is the samples' clock (monotonic), so a flow without new samples is seen idle.
    pub fn evaluate(&mut self, table: &FlowTable, env: &Environment, now_ns: u64) {
        self.generation += 1;
        // A look-up per flow (a cache miss each) only when some flow left the table.
        if self.departed != Some(table.departed()) {
            self.flows.retain(|cookie, _| table.get(*cookie).is_some());
            self.departed = Some(table.departed());
        }
        for flow in table.flows() {
            self.judge_flow(flow, env, now_ns);
        }
    }

    /// The same as [`Diagnoser::evaluate`], with `changes` the table's changes since the last
    /// evaluation, at a cost per open and new flow rather than per flow kept: a closed flow's
    /// verdict never changes once given, so of the closed flows only those born since the last
    /// evaluation (which have none yet) are judged, and the memories of removed flows go.
    pub fn evaluate_changes(&mut self, table: &FlowTable, changes: &TableChanges, env: &Environment, now_ns: u64) {
        for cookie in &changes.removed {
            self.flows.remove(cookie);
        }
        for flow in table.open_flows() {
            self.judge_flow(flow, env, now_ns);
        }
        for flow in changes.born.iter().filter_map(|c| table.get(*c)) {
            if flow.is_closed() {
                self.judge_flow(flow, env, now_ns);
            }
        }
    }

    fn judge_flow(&mut self, flow: &Flow, env: &Environment, now_ns: u64) {
        let mem = self.flows.entry(flow.cookie()).or_default();
        if flow.is_closed() && mem.shown.is_some() {
            // Keep the last verdict of a closed flow as it was.
            return;
        }
        let mut snap = Snapshot::of(flow);
        snap.ts_ns = snap.ts_ns.max(now_ns);
        if mem.snapshots.back().is_some_and(|s| s.ts_ns >= snap.ts_ns) {
            return;
        }
        mem.snapshots.push_back(snap);
        while mem.snapshots.len() > self.cfg.window + 1 {
            mem.snapshots.pop_front();
        }
        let verdict = judge(flow, mem, &self.cfg, env, now_ns);
        mem.shown = Some(verdict);
        if flow.is_closed() {
            // Never judged again: only the verdict stays (a short connection's snapshot
            // memory was most of what the diagnosis kept per flow).
            mem.snapshots = VecDeque::new();
        }
    }

    /// Cite what deep-traced flows' algorithms decided in their verdicts' evidence (and, for a
    /// flagged flow, in its text): the loss responses the flag is about, from the algorithm.
    pub fn cite_decisions(&mut self, table: &FlowTable, decisions: &DecisionLog) {
        self.generation += 1;
        // Deep-traced flows are few; the flows judged may be tens of thousands.
        for cookie in decisions.cookies() {
            let Some(verdict) = self.flows.get_mut(&cookie).and_then(|m| m.shown.as_mut()) else { continue };
            let Some(flow) = table.get(cookie) else { continue };
            let Some(evidence) = verdict.evidence.as_mut() else { continue };
            // A closed flow's verdict is kept as it was, citation included.
            if evidence.deep.is_some() {
                continue;
            }
            let Some(deep) = deep_evidence(cookie, flow.first_seen_ns, decisions) else { continue };
            if verdict.flagged && deep.loss_responses > 0 {
                let ratio = deep
                    .median_cut
                    .map_or(String::new(), |r| format!(", each cutting the window to about {:.0}%", r * 100.0));
                let last = deep.last_cut.as_deref().map_or(String::new(), |l| format!(" (latest: {l})"));
                verdict.text.push_str(&format!(
                    " {} itself responded to {} losses{ratio}{last}.",
                    deep.twin, deep.loss_responses
                ));
            }
            evidence.deep = Some(deep);
        }
    }

    pub fn config(&self) -> &DiagnosisConfig {
        &self.cfg
    }

    pub fn verdict(&self, cookie: u64) -> Option<&Verdict> {
        self.flows.get(&cookie).and_then(|m| m.shown.as_ref())
    }

    /// Mark the verdicts of relayed flows: the note goes first, so such a flow never reads as
    /// simply healthy, application- or rwnd-limited.
    pub fn note_relays(&mut self, relays: &std::collections::HashMap<u64, crate::analysis::udp::RelayedBy>) {
        // No relay, nothing to note: every verdict stays as it is.
        if relays.is_empty() {
            return;
        }
        self.generation += 1;
        for (cookie, r) in relays {
            let Some(v) = self.flows.get_mut(cookie).and_then(|m| m.shown.as_mut()) else { continue };
            if v.relayed_by.as_ref() == Some(r) {
                continue;
            }
            // A closed flow keeps its verdict: take an older note off before the new one.
            if let Some(old) = v.relayed_by.take() {
                let prefix = format!("{} ", old.note());
                if let Some(rest) = v.text.strip_prefix(&prefix) {
                    v.text = rest.to_string();
                }
            }
            v.text = format!("{} {}", r.note(), v.text);
            v.relayed_by = Some(r.clone());
        }
    }

    pub fn flagged(&self) -> impl Iterator<Item = u64> + '_ {
        self.flows.iter().filter(|(_, m)| m.flagged).map(|(c, _)| *c)
    }
}

fn judge(flow: &Flow, mem: &mut FlowMemory, cfg: &DiagnosisConfig, env: &Environment, now_ns: u64) -> Verdict {
    let observed = flow.age_secs();
    let Some(w) = window_of(&mem.snapshots) else { return Verdict::unknown(observed) };
    if observed < cfg.min_observed_secs || mem.snapshots.len() < 3 {
        return Verdict::unknown(observed);
    }
    let lv = loss_view(flow, cfg, now_ns);
    let raw = classify(&w, &lv, cfg, &flow.latest.cc);

    // Hysteresis on limited_by: a new class must hold `confirm` evaluations in a row.
    let previous = mem.shown.as_ref().map(|v| v.limited_by).filter(|l| *l != LimitedBy::Unknown);
    let limited = match previous {
        None => raw,
        Some(prev) if prev == raw => {
            mem.candidate = None;
            prev
        }
        Some(prev) => {
            if mem.candidate == Some(raw) {
                mem.candidate_runs += 1;
            } else {
                mem.candidate = Some(raw);
                mem.candidate_runs = 1;
            }
            if mem.candidate_runs >= cfg.confirm {
                mem.candidate = None;
                raw
            } else {
                prev
            }
        }
    };

    // Hysteresis on the flag: on after `confirm` windows in a row, off after `release`.
    let ev = evidence_of(flow, &w, &lv, cfg, limited);
    let condition = flag_condition(flow, &w, &lv, &ev, limited, cfg);
    if condition.is_ok() {
        mem.flag_runs += 1;
        mem.unflag_runs = 0;
        if mem.flag_runs >= cfg.confirm {
            mem.flagged = true;
        }
    } else {
        mem.flag_runs = 0;
        mem.unflag_runs += 1;
        if mem.unflag_runs >= cfg.release {
            mem.flagged = false;
        }
    }

    let s = &flow.latest;
    // The last verdict's text makes room for this one.
    let mut text = mem.shown.as_mut().map(|v| std::mem::take(&mut v.text)).unwrap_or_default();
    text.clear();
    if mem.flagged {
        let _ = write!(
            text,
            "{} is held back by loss-based congestion control: {} lost packets in {} episodes over {:.0} s ({} of bytes retransmitted) \
             and srtt stayed within {:.1} ms of min_rtt {:.1} ms before {} of them (median queue {:.1} ms): no queue built up, so the losses are not the bottleneck's. \
             Goodput {} is what its loss response allows: the Mathis bound at {} loss events per segment and srtt {:.1} ms is {}",
            flow_name(flow),
            s.cc,
            ev.loss_episodes,
            ev.episode_span_s,
            pct(ev.episode_loss_ratio),
            ev.queue_threshold_ms,
            ev.min_rtt_ms,
            ev.clean_episodes,
            ev.queue_at_loss_ms,
            rate(ev.goodput_bps),
            pct(ev.loss_event_rate),
            ev.srtt_ms,
            rate(ev.mathis_bps),
        );
        if ev.response_model == ResponseModel::Cubic {
            let _ = write!(text, " (CUBIC's response {})", rate(ev.response_bps));
        }
        let _ =
            write!(text, "; mean cwnd {:.0} x {} B, {:.0} before each cut.", ev.mean_cwnd, s.mss, ev.cwnd_before_loss);
        match ev.available_bps {
            Some(more) => {
                let _ = write!(
                    text,
                    " The path delivered {} to this flow without queueing: at least {} more is available.",
                    rate(ev.clean_delivery_bps),
                    rate(more)
                );
            }
            None if ev.clean_delivery_bps > 0.0 => {
                let _ = write!(
                    text,
                    " The most it was seen to deliver without queueing is {}; the path may carry more.",
                    rate(ev.clean_delivery_bps)
                );
            }
            None => {}
        }
        text.push_str(" A model-based algorithm (BBR) does not treat random loss as congestion.");
    } else {
        let _ = write!(text, "{} ({} over {:.0} s", limited.describe(), rate(w.goodput_bps), w.secs);
        if w.loss_ratio > 0.0 {
            let _ = write!(text, ", {} retransmitted", pct(w.loss_ratio));
        }
        text.push(')');
        if limited == LimitedBy::Path && !ev.decided_by.is_empty() {
            let _ = write!(text, ": {}. Not a problem of this host: the path is full", ev.decided_by);
        } else if let Err(why) = condition {
            if is_loss_based(&s.cc) && limited == LimitedBy::CongestionWindow && (lv.episodes > 0 || w.loss_ratio > 0.0)
            {
                let _ = write!(text, "; not flagged: {why} ({})", ev.decided_by);
            }
        }
    }
    Verdict {
        limited_by: limited,
        flagged: mem.flagged,
        text,
        evidence: Some(Box::new(ev)),
        fix: if mem.flagged { fix::fix_commands(flow, env) } else { Vec::new() },
        relayed_by: None,
    }
}

fn flow_name(flow: &Flow) -> String {
    let s = &flow.latest;
    format!("{} -> {}", s.local, s.remote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::model::tests::sample;
    use crate::analysis::model::TableConfig;

    use crate::analysis::event::{Sample, SampleReason};

    fn test_env() -> Environment {
        Environment {
            bbr_available: true,
            host_netns: 1,
            netns_pids: HashMap::from([(4026531840, 77)]),
            netns_names: HashMap::new(),
            ..Environment::default()
        }
    }

    /// Feed `secs` seconds of a synthetic flow (one sample per 100 ms) and evaluate each second.
    fn run(cc: &str, secs: u64, step: impl Fn(u64, &mut Sample)) -> (Diagnoser, FlowTable) {
        run_in(&test_env(), cc, secs, step)
    }

    fn run_in(env: &Environment, cc: &str, secs: u64, step: impl Fn(u64, &mut Sample)) -> (Diagnoser, FlowTable) {
        let mut table = FlowTable::new(TableConfig::default());
        let mut d = Diagnoser::new(DiagnosisConfig::default());
        for tick in 0..=secs * 10 {
            let mut s = sample(1, tick * 100);
            s.cc = cc.into();
            step(tick, &mut s);
            table.ingest(&s);
            if tick % 10 == 0 {
                d.evaluate(&table, env, tick * 100_000_000);
            }
        }
        (d, table)
    }

    /// Bulk sender at `bps` with `loss` retransmitted share, busy all the time.
    fn bulk(bps: u64, loss: f64, srtt_us: u32) -> impl Fn(u64, &mut Sample) {
        move |tick, s| {
            let acked = bps / 8 * tick / 10;
            s.bytes_acked = acked;
            s.bytes_sent = (acked as f64 / (1.0 - loss)) as u64;
            s.bytes_retrans = s.bytes_sent - acked;
            s.total_retrans = (s.bytes_retrans / 1448) as u32;
            s.busy_us = tick * 100_000;
            s.srtt_us = srtt_us;
            s.min_rtt_us = 30_000;
            s.snd_cwnd = 60;
            s.snd_ssthresh = 40;
            s.packets_out = 60;
            s.cwnd_limited = true;
        }
    }

    #[test]
    fn judging_what_changed_gives_the_verdicts_judging_every_flow_gives() {
        use crate::analysis::event::TcpState;
        let cfg = TableConfig {
            max_flows: 400,
            closed_linger_ns: 4 * NS_PER_SEC,
            idle_timeout_ns: 9 * NS_PER_SEC,
            ..TableConfig::default()
        };
        let (mut full_table, mut table) = (FlowTable::new(cfg.clone()), FlowTable::new(cfg));
        let (mut full, mut incremental) = (Diagnoser::default(), Diagnoser::default());
        let env = test_env();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut judged = 0;
        for tick in 0..600u64 {
            // Bulk flows 0..8 (some lossy, some closing late), and short connections that open
            // and close within a tick or two, some idle for a while first.
            let mut batch = Vec::new();
            for cookie in 0..8u64 {
                if cookie == 7 && tick > 300 {
                    continue; // goes idle
                }
                let mut s = sample(cookie, tick * 100);
                bulk(8_000_000 * (cookie + 1), if cookie % 2 == 0 { 0.01 } else { 0.0 }, 30_000)(tick, &mut s);
                if cookie == 5 && tick == 450 {
                    s.reason = SampleReason::Destroy;
                }
                batch.push(s);
            }
            for _ in 0..6 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut s = sample(100 + x % 3_000, tick * 100 + x % 97);
                s.bytes_acked = x % 5_000;
                match x % 5 {
                    0 => s.reason = SampleReason::Destroy,
                    1 => {
                        s.reason = SampleReason::StateChange;
                        s.tcp_state = TcpState::Close;
                    }
                    _ => {}
                }
                batch.push(s);
            }
            for s in &batch {
                full_table.ingest(s);
                table.ingest(s);
            }
            if tick % 10 == 9 {
                let now = (tick + 1) * 100 * 1_000_000;
                full_table.expire(now);
                table.expire(now);
                full.evaluate(&full_table, &env, now);
                let changes = table.take_changes();
                incremental.evaluate_changes(&table, &changes, &env, now);
                assert_eq!(full.flows.len(), incremental.flows.len(), "the same flows remembered");
                for f in full_table.flows() {
                    assert_eq!(full.verdict(f.cookie()), incremental.verdict(f.cookie()), "flow {}", f.cookie());
                    judged += usize::from(full.verdict(f.cookie()).is_some_and(|v| v.limited_by != LimitedBy::Unknown));
                }
            }
        }
        assert!(judged > 100, "the bulk flows got real verdicts ({judged})");
        assert!(full.flagged().count() > 0, "and some were flagged");
    }

    /// Feed `secs` seconds of samples from `feed(tick)` (several per 100 ms tick allowed) and
    /// evaluate each second; returns the flag and limited_by of every evaluation.
    fn run_feed(secs: u64, feed: impl Fn(u64) -> Vec<Sample>) -> (Diagnoser, Vec<(bool, LimitedBy)>) {
        let mut table = FlowTable::new(TableConfig::default());
        let mut d = Diagnoser::new(DiagnosisConfig::default());
        let mut seen = Vec::new();
        for tick in 0..=secs * 10 {
            for s in feed(tick) {
                table.ingest(&s);
            }
            if tick % 10 == 0 {
                d.evaluate(&table, &test_env(), tick * 100_000_000);
                let v = d.verdict(1).expect("verdict");
                seen.push((v.flagged, v.limited_by));
            }
        }
        (d, seen)
    }

    /// A window-limited bulk sender on a 30 ms path: `bps` of goodput, a loss every
    /// `loss_every` ticks after slow start (the first second), srtt at each loss `queue_ms`
    /// above min_rtt, srtt between losses `base_queue_ms` above it.
    fn episodic(
        cc: &'static str,
        bps: u64,
        loss_every: u64,
        queue_ms: u32,
        base_queue_ms: u32,
    ) -> impl Fn(u64) -> Vec<Sample> {
        move |tick| {
            let mut s = sample(1, tick * 100);
            s.cc = cc.into();
            // Losses before this tick; the one at this tick follows the periodic sample.
            let losses = if tick > 10 { (tick - 11) / loss_every + 1 } else { 0 };
            s.bytes_acked = bps / 8 * tick / 10;
            s.bytes_retrans = losses * 1448;
            s.bytes_sent = s.bytes_acked + s.bytes_retrans;
            s.total_retrans = losses as u32;
            s.busy_us = tick * 100_000;
            s.srtt_us = 30_000 + base_queue_ms * 1000;
            s.min_rtt_us = 30_000;
            // Slow start first, at 100 Mbit/s without a queue.
            s.snd_ssthresh = if tick < 10 { u32::MAX >> 1 } else { 40 };
            s.delivery_rate_bps = if tick < 10 { 100_000_000 } else { bps };
            s.snd_cwnd = (bps as f64 * 0.03 / 8.0 / 1448.0) as u32;
            s.packets_out = s.snd_cwnd;
            s.cwnd_limited = true;
            let mut out = vec![s.clone()];
            if tick >= 10 && (tick - 10) % loss_every == 0 {
                let mut l = s.clone();
                l.ts_ns += 5_000_000;
                l.reason = SampleReason::CaState;
                l.ca_state = crate::analysis::event::CaState::Recovery;
                l.srtt_us = 30_000 + queue_ms * 1000;
                out.push(l.clone());
                l.ts_ns += 1_000_000;
                l.reason = SampleReason::Retransmit;
                l.total_retrans += 1;
                l.bytes_retrans += 1448;
                l.bytes_sent += 1448;
                out.push(l.clone());
                l.ts_ns += 40_000_000;
                l.ca_state = crate::analysis::event::CaState::Open;
                l.srtt_us = s.srtt_us;
                out.push(l);
            }
            out
        }
    }

    #[test]
    fn random_loss_without_queue_is_flagged_within_seconds_and_stays() {
        // 16 Mbit/s, a loss every 0.7 s (~0.1 % of segments), srtt 0.5 ms above min_rtt.
        let (d, seen) = run_feed(30, episodic("cubic", 16_000_000, 7, 0, 0));
        let first = seen.iter().position(|(f, _)| *f).expect("flagged");
        assert!(first <= 8, "{seen:?}");
        assert!(seen[first..].iter().all(|(f, l)| *f && *l == LimitedBy::CongestionWindow), "{seen:?}");
        let v = d.verdict(1).expect("verdict");
        let e = v.evidence.as_ref().expect("evidence");
        assert!(e.loss_episodes >= 3 && e.clean_episodes == e.loss_episodes, "{e:?}");
        assert_eq!(e.slow_start_episodes, 0);
        assert!((e.loss_event_rate - 0.001).abs() < 0.0003, "{e:?}");
        assert!(e.goodput_bps <= e.response_bps * 2.0);
        // Slow start showed 100 Mbit/s without queueing: that much is at stake.
        assert_eq!(e.clean_delivery_bps, 100e6);
        assert!(e.available_bps.is_some_and(|a| (a - 84e6).abs() < 1e6), "{e:?}");
        assert!(v.text.contains("Mathis bound") && v.text.contains("at least 84.0 Mbit/s more"), "{}", v.text);
        assert!(v.text.contains("episodes over"), "{}", v.text);
    }

    #[test]
    fn reno_at_a_loss_every_few_seconds_is_flagged() {
        // 80 ms-like sparsity: a loss every 3 s, so a 5 s window sees one or two.
        let (_, seen) = run_feed(30, episodic("reno", 6_000_000, 30, 0, 1));
        let first = seen.iter().position(|(f, _)| *f).expect("flagged");
        assert!(first <= 15, "{seen:?}");
        assert!(seen[first..].iter().all(|(f, _)| *f), "{seen:?}");
    }

    #[test]
    fn queue_before_each_loss_is_the_path_not_a_flag() {
        // A shallow bottleneck: srtt near min_rtt on average, 7 ms of queue at each loss.
        let (d, seen) = run_feed(30, episodic("cubic", 38_000_000, 30, 7, 2));
        assert!(seen.iter().all(|(f, _)| !f), "{seen:?}");
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::Path, "{}", v.text);
        assert!(v.text.contains("queue before the losses"), "{}", v.text);
        let e = v.evidence.as_ref().expect("evidence");
        // Ten losses; the first ends slow start and is left out.
        assert_eq!((e.queued_episodes, e.slow_start_episodes), (9, 1), "{e:?}");
    }

    #[test]
    fn one_noisy_rtt_does_not_unflag() {
        // Every fifth loss comes with a jitter spike of 6 ms: still a clear majority.
        let feed = episodic("cubic", 16_000_000, 7, 0, 0);
        let (_, seen) = run_feed(30, move |tick| {
            let mut out = feed(tick);
            if tick >= 10 && (tick - 10) % 35 == 0 {
                if let Some(l) = out.get_mut(1) {
                    l.srtt_us = 36_000;
                }
            }
            out
        });
        let first = seen.iter().position(|(f, _)| *f).expect("flagged");
        assert!(seen[first..].iter().all(|(f, _)| *f), "{seen:?}");
    }

    #[test]
    fn bbr_filling_the_path_is_path_limited() {
        // Standing queue: srtt 40 ms on a 30 ms path, losses at the full queue.
        let (d, seen) = run_feed(15, episodic("bbr", 180_000_000, 3, 9, 10));
        assert!(seen.iter().all(|(f, _)| !f));
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Path);
    }

    #[test]
    fn mathis_bound() {
        // 1448 B, 30 ms, 2 %: 386 kbit/s * 8.63 = 3.33 Mbit/s.
        let b = mathis_bps(1448, 0.030, 0.02);
        assert!((b - 3.331e6).abs() < 5e3, "{b}");
        assert!(mathis_bps(1448, 0.03, 0.0).is_infinite());
    }

    #[test]
    fn a_flow_on_a_deep_mode_twin_is_judged_as_its_original() {
        let (plain, _) = run("cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let (twin, _) = run("cct_cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let (p, t) = (plain.verdict(1).expect("verdict"), twin.verdict(1).expect("verdict"));
        assert!(t.flagged, "{t:?}");
        assert_eq!((t.limited_by, t.flagged), (p.limited_by, p.flagged));
        let (pe, te) = (p.evidence.as_ref().expect("evidence"), t.evidence.as_ref().expect("evidence"));
        assert_eq!((te.response_bps, te.response_model), (pe.response_bps, pe.response_model));
    }

    #[test]
    fn not_enough_data_at_first() {
        let (d, _) = run("cubic", 2, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::Unknown);
        assert!(v.text.contains("not enough data"), "{}", v.text);
        assert!(!v.flagged);
    }

    #[test]
    fn cubic_bulk_on_random_loss_is_flagged_with_evidence_and_fix() {
        let (d, _) = run("cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert!(v.flagged, "{v:?}");
        assert_eq!(v.limited_by, LimitedBy::CongestionWindow);
        let e = v.evidence.as_ref().expect("evidence");
        assert!((e.loss_ratio - 0.02).abs() < 0.001);
        assert!((e.mathis_bps - mathis_bps(1448, 0.031, e.loss_event_rate)).abs() < 1.0);
        assert!(v.text.contains("Mathis bound"), "{}", v.text);
        assert!(
            v.fix.iter().any(|c| c == "nsenter --net=/proc/77/ns/net sysctl -w net.ipv4.tcp_congestion_control=bbr"),
            "{:?}",
            v.fix
        );
        assert!(v.fix.iter().any(|c| c.contains("roll back") && c.contains("tcp_congestion_control=cubic")));
        assert!(v.fix.iter().any(|c| c.contains("/etc/sysctl.d/")));
    }

    #[test]
    fn fix_loads_bbr_when_missing_and_names_the_netns() {
        let mut env = test_env();
        env.bbr_available = false;
        env.netns_names.insert(4026531840, "video".into());
        let (d, _) = run_in(&env, "cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert!(v.flagged);
        assert!(v.fix[0].starts_with("modprobe tcp_bbr"), "{:?}", v.fix);
        assert_eq!(v.fix[1], "ip netns exec video sysctl -w net.ipv4.tcp_congestion_control=bbr");
        // The host's own namespace needs no prefix.
        env.host_netns = 4026531840;
        let (d, _) = run_in(&env, "cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.fix[1], "sysctl -w net.ipv4.tcp_congestion_control=bbr");
    }

    #[test]
    fn bbr_is_never_flagged() {
        let (d, _) = run("bbr", 10, bulk(40_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert!(!v.flagged);
    }

    #[test]
    fn standing_queue_means_the_path_and_no_flag() {
        let (d, _) = run("cubic", 10, bulk(100_000_000, 0.01, 80_000));
        let v = d.verdict(1).expect("verdict");
        assert!(!v.flagged);
        assert_eq!(v.limited_by, LimitedBy::Path);
        assert!(v.text.contains("standing queue"), "{}", v.text);
    }

    #[test]
    fn one_loss_burst_is_not_sustained_loss() {
        // A slow-start overshoot: 3 % of the first second's bytes retransmitted, then none.
        let (d, _) = run("cubic", 10, |tick, s| {
            bulk(40_000_000, 0.0, 31_000)(tick, s);
            s.bytes_retrans = if tick >= 40 { 150_000 } else { 0 };
            s.total_retrans = if tick >= 40 { 100 } else { 0 };
        });
        let v = d.verdict(1).expect("verdict");
        assert!(!v.flagged, "{v:?}");
    }

    #[test]
    fn no_loss_no_flag() {
        let (d, _) = run("cubic", 10, bulk(100_000_000, 0.0, 31_000));
        assert!(!d.verdict(1).expect("verdict").flagged);
    }

    #[test]
    fn paced_app_is_application_limited() {
        // 0.5 Mbit/s in small writes: busy 10 % of the time, no backlog.
        let (d, _) = run("cubic", 10, |tick, s| {
            s.bytes_acked = 500_000 / 8 * tick / 10;
            s.bytes_sent = s.bytes_acked + s.bytes_acked / 50;
            s.bytes_retrans = s.bytes_acked / 50;
            s.busy_us = tick * 10_000;
            s.app_limited = true;
            s.cwnd_limited = false;
            s.wmem_queued = 2_000;
            s.min_rtt_us = 30_000;
            s.srtt_us = 30_500;
        });
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::Application);
        assert!(!v.flagged);
    }

    #[test]
    fn stream_that_keeps_its_send_buffer_low_is_application_limited_even_in_recovery() {
        // BBR under random loss: cwnd shrinks to what is in flight (full), busy never stops,
        // rate samples only sometimes app-limited, but the send buffer stays mostly empty.
        let (d, _) = run("bbr", 10, |tick, s| {
            s.bytes_acked = 25_000_000 / 8 * tick / 10;
            s.bytes_sent = s.bytes_acked + s.bytes_acked / 40;
            s.bytes_retrans = s.bytes_acked / 40;
            s.busy_us = tick * 100_000;
            s.app_limited = tick % 3 == 0;
            s.cwnd_limited = tick % 2 == 0;
            s.notsent_bytes = 30_000;
            s.wmem_queued = 20_000;
            s.sndbuf = 200_000;
        });
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::Application);
        assert!(!v.flagged);
    }

    #[test]
    fn receive_window_limited() {
        let (d, _) = run("cubic", 10, |tick, s| {
            s.bytes_acked = 1_000_000 * tick;
            s.bytes_sent = s.bytes_acked;
            s.busy_us = tick * 40_000;
            s.rwnd_limited_us = tick * 60_000;
            s.min_rtt_us = 30_000;
            s.srtt_us = 30_000;
        });
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::ReceiveWindow);
        assert!(!v.flagged);
    }

    #[test]
    fn idle_and_receiving() {
        let (d, _) = run("cubic", 6, |_, _| {});
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Idle);
        let (d, _) = run("cubic", 6, |tick, s| s.bytes_received = tick * 100_000);
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Receiving);
    }

    #[test]
    fn verdict_does_not_flap_on_one_odd_window() {
        // Application-limited throughout except one backlogged second.
        let (d, _) = run("cubic", 12, |tick, s| {
            s.bytes_acked = 100_000 * tick;
            s.bytes_sent = s.bytes_acked;
            s.busy_us = (0..tick).map(|t| if (60..70).contains(&t) { 100_000 } else { 10_000 }).sum::<u64>();
            s.cwnd_limited = false;
            s.wmem_queued = if (60..70).contains(&tick) { 87_040 } else { 0 };
            s.min_rtt_us = 30_000;
            s.srtt_us = 30_000;
        });
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Application);
    }

    #[test]
    fn flag_needs_confirmation_and_releases_slowly() {
        // Flagged regime for 10 s, then loss stops: the flag holds while the losses are in the
        // loss horizon, then for `release` windows.
        let mut table = FlowTable::new(TableConfig::default());
        let mut d = Diagnoser::new(DiagnosisConfig::default());
        let env = Environment::default();
        let lossy = bulk(4_000_000, 0.02, 31_000);
        let mut flags = Vec::new();
        let mut retrans_at_switch = 0;
        for tick in 0..=500u64 {
            let mut s = sample(1, tick * 100);
            lossy(tick, &mut s);
            if tick > 100 {
                if retrans_at_switch == 0 {
                    retrans_at_switch = s.bytes_retrans;
                }
                s.bytes_retrans = retrans_at_switch; // no more loss
                s.total_retrans = (retrans_at_switch / 1448) as u32;
            }
            table.ingest(&s);
            if tick % 10 == 0 {
                d.evaluate(&table, &env, tick * 100_000_000);
                flags.push(d.verdict(1).map(|v| v.flagged).unwrap_or(false));
            }
        }
        let first_flag = flags.iter().position(|f| *f).expect("flagged at some point");
        assert!(first_flag <= 10, "{flags:?}");
        let last_flag = flags.iter().rposition(|f| *f).expect("flag");
        // Loss stops at 10 s; the horizon forgets it at 40 s, then 5 evaluations.
        assert!(last_flag > 39 && last_flag < 46, "{flags:?}");
        assert!(!flags[46]);
    }
}
