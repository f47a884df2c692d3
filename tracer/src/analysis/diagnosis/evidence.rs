//! The numbers a verdict rests on, gathered from the window and the loss episodes: what the
//! flow's loss response allows, what the path showed it can carry, and the signals in words.

use crate::analysis::diagnosis::buffers::{buffer_evidence, buffers_allow};
use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::flag::decided_by;
use crate::analysis::diagnosis::limits::{standing_queue, LimitedBy};
use crate::analysis::diagnosis::losses::LossView;
use crate::analysis::diagnosis::reordering::{note_of, spurious_share};
use crate::analysis::diagnosis::response::{mathis_bps, response_of};
use crate::analysis::diagnosis::verdict::{BufferEvidence, Evidence, PolicerEvidence};
use crate::analysis::diagnosis::window::Window;
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::Flow;

/// How much more the path would carry for the flow (bits/s), when enough to say. Behind a
/// policer nothing passes above its rate, whatever the path showed in a burst: what is left of
/// the rate is said when it is enough to flag the flow. Nothing said to be available passes what
/// the buffers the fix leaves in place allow.
fn available_bps(w: &Window, lv: &LossView, cfg: &DiagnosisConfig, buffers: Option<&BufferEvidence>) -> Option<f64> {
    let available = match lv.policing {
        Some(p) => p.leaves_unused(w.goodput_bps, cfg).then_some(p.rate_bps - w.goodput_bps),
        None => {
            let available = lv.clean_delivery_bps - w.goodput_bps;
            (lv.clean_delivery_bps >= cfg.available_ratio * w.goodput_bps && available > 0.0).then_some(available)
        }
    };
    let allow = buffers.map_or(f64::INFINITY, |b| buffers_allow(b, w.min_rtt_us / 1e6, cfg));
    available.map(|a| a.min(allow - w.goodput_bps)).filter(|a| *a > 0.0)
}

/// The numbers behind a flow's verdict, from its window and loss episodes (and its buffers,
/// with the host's limits from `env` and the receiving socket `peer` when it is on this host).
/// Long for its one struct literal: every figure is named where it is taken.
pub(super) fn evidence_of(
    flow: &Flow,
    w: &Window,
    lv: &LossView,
    cfg: &DiagnosisConfig,
    limited: LimitedBy,
    env: &Environment,
    peer: Option<&Flow>,
) -> Evidence {
    let s = &flow.latest;
    let mss = s.mss;
    let rtt_s = w.mean_srtt_us / 1e6;
    // The response functions take the loss-event rate when episodes were seen (that is what
    // the AIMD models count), else the retransmitted share.
    let p = if lv.event_rate > 0.0 { lv.event_rate } else { w.loss_ratio };
    let (response_bps, response_model) = response_of(&s.cc, mss, rtt_s, p);
    let buffers = buffer_evidence(flow, w, lv, cfg, env, peer, limited);
    let available_bps = available_bps(w, lv, cfg, buffers.as_ref());
    let policer = lv.policing.map(|p| PolicerEvidence {
        rate_bps: p.rate_bps,
        sign: p.sign,
        episodes_at_rate: p.at_ceiling as u32,
        episodes: p.judged as u32,
        burst_segments: p.burst_segments,
    });
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
        policer,
        standing_queue: standing,
        decided_by,
        timeout_episodes: lv.timeouts as u32,
        probe_episodes: lv.probes as u32,
        spurious_episodes: lv.spurious as u32,
        receiver_held_episodes: lv.receiver_held as u32,
        retrans_segments: lv.retrans_segments,
        dsack_dups: lv.dsack_dups,
        spurious_share: spurious_share(lv),
        undo_events: lv.undo_events,
        reordering: s.signals.reordering,
        note: note_of(lv, cfg),
        deep: None,
        buffers,
        remote_sender: None,
    }
}
