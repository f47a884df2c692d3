//! The numbers a receiving-end verdict rests on (`evidence.remote_sender`, defined with the
//! verdict), and the commands advised for the sender's host.

use crate::analysis::diagnosis::buffers::{buffer_rate, buffer_size_for, Side};
use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::remote::view::RemoteView;
use crate::analysis::diagnosis::verdict::{CutEvidence, RemoteSenderEvidence, SetBy};
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::Flow;

/// The send buffer maximum most kernels ship (`net.ipv4.tcp_wmem` max, 4 MiB): the advice
/// raises the sender's only when the rate the path showed needs more at this RTT.
pub(super) const DEFAULT_WMEM_MAX: u32 = 4 << 20;

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
