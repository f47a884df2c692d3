//! The numbers a receiving-end verdict rests on, as the front ends and JSON see them
//! (`evidence.remote_sender`), and the commands advised for the sender's host.

use serde::{Deserialize, Serialize};

use crate::analysis::diagnosis::buffers::{buffer_rate, buffer_size_for, Side};
use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::remote::view::RemoteView;
use crate::analysis::diagnosis::response::ResponseModel;
use crate::analysis::diagnosis::verdict::SetBy;
use crate::analysis::environment::Environment;
use crate::analysis::model::Flow;

/// The send buffer maximum most kernels ship (`net.ipv4.tcp_wmem` max, 4 MiB): the advice
/// raises the sender's only when the rate the path showed needs more at this RTT.
pub(super) const DEFAULT_WMEM_MAX: u32 = 4 << 20;

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

/// The evidence of `flow`'s receiving-end verdict.
#[allow(clippy::too_many_arguments)] // the view, the verdict's parts and the host facts
pub(super) fn remote_evidence(
    flow: &Flow,
    v: &RemoteView,
    limited: LimitedBy,
    flagged: bool,
    condition: Result<(), &'static str>,
    sender_on_host: Option<u64>,
    decided_by: String,
    cfg: &DiagnosisConfig,
    env: &Environment,
) -> RemoteSenderEvidence {
    let s = &flow.latest;
    let now = flow.last_seen_ns;
    let cuts = v.cuts.iter().rev().take(8).rev();
    RemoteSenderEvidence {
        limited_by: limited,
        flagged,
        sender_on_host,
        not_flagged: condition.err().map(String::from),
        counted: v.counted,
        goodput_bps: v.goodput_bps,
        rtt_ms: v.rtt_us / 1000.0,
        handshake_rtt_ms: v.handshake_rtt_us / 1000.0,
        rcv_rtt_ms: (v.rcv_rtt_us > 0.0).then_some(v.rcv_rtt_us / 1000.0),
        queue_ms: v.mean_queue_us.map(|q| q / 1000.0),
        standing_queue: super::classify::standing_queue(v, cfg),
        mss: v.mss,
        span_s: v.span_secs,
        segments: v.segments,
        holes: v.holes,
        loss_holes: v.loss_holes,
        reorder_holes: v.reorder_holes,
        lost_share: v.hole_byte_share,
        loss_episodes: v.episodes as u32,
        episodes_per_s: v.episodes_per_sec(),
        loss_event_rate: v.event_rate,
        lost_per_segment: v.lost_per_segment(),
        clean_episodes: v.clean as u32,
        queued_episodes: v.queued as u32,
        queue_at_loss_ms: v.median_queue_us / 1000.0,
        queue_threshold_ms: v.threshold_us / 1000.0,
        cuts: cuts
            .map(|c| CutEvidence {
                ago_s: now.saturating_sub(c.ts_ns) as f64 / 1e9,
                before_bps: c.before_bps,
                after_bps: c.after_bps,
            })
            .collect(),
        median_cut: v.median_cut,
        mathis_bps: v.mathis_bps,
        response_bps: v.response_bps,
        response_model: v.response_model,
        clean_rate_bps: v.clean_rate_bps,
        rcv_wnd: v.mean_rcv_wnd,
        window_share: v.window_share(),
        unread_bytes: v.mean_unread,
        rcvbuf: s.rcvbuf,
        rcvbuf_set_by: if s.rcvbuf_locked { SetBy::Application } else { SetBy::Autotuning },
        advice: if flagged { advice(v, cfg, env) } else { Vec::new() },
        decided_by,
    }
}

/// What to run on the sender's host: BBR as its default (loaded first where it is a module, and
/// kept across reboots), and a larger send buffer maximum when the rate the path showed needs
/// more than the usual 4 MiB at this RTT (BBR keeps about 0.6 of a full buffer in flight).
fn advice(v: &RemoteView, cfg: &DiagnosisConfig, env: &Environment) -> Vec<String> {
    let mut out = vec![
        "modprobe tcp_bbr".to_string(),
        "sysctl -w net.ipv4.tcp_congestion_control=bbr".to_string(),
        "persist: echo tcp_bbr > /etc/modules-load.d/bbr.conf; \
         echo net.ipv4.tcp_congestion_control=bbr > /etc/sysctl.d/90-bbr.conf"
            .to_string(),
    ];
    let shown = v.clean_rate_bps.max(v.goodput_bps);
    let rtt_s = v.handshake_rtt_us / 1e6;
    let want = buffer_size_for(Side::Send, shown, rtt_s, cfg, env);
    // The usual maximum must carry what the path showed with room to grow (BBR will ask more).
    if buffer_rate(Side::Send, DEFAULT_WMEM_MAX, rtt_s, cfg) < 2.0 * shown && want > DEFAULT_WMEM_MAX {
        out.push(format!("sysctl -w net.ipv4.tcp_wmem='4096 16384 {want}'"));
        out.push(format!("persist: echo \"net.ipv4.tcp_wmem=4096 16384 {want}\" > /etc/sysctl.d/90-wmem.conf"));
    }
    out
}
