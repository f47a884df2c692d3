//! What holds the remote sender back, from the receiving end alone, and whether that is its
//! loss-based congestion control on losses that are not congestion (the flag).

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::remote::view::RemoteView;
use crate::analysis::flow_table::Flow;

/// A sender delivering this share of the window this host advertises every RTT is held by it
/// (autotuning offers at least twice what the application reads per RTT, so a sender it does
/// not hold uses half of it or less).
pub(super) const WINDOW_BOUND_SHARE: f64 = 0.7;
/// Bytes waiting unread, as a share of the window offered and of the buffer, above which it is
/// the reader, not the buffer's size, that closes the window.
pub(super) const UNREAD_SHARE: f64 = 0.25;
/// A sender whose goodput is below this share of what its loss response allows sends less
/// than its congestion control would: its application (or its send buffer) sets the rate.
/// (A sender held by its loss response gets 0.5-1.5 of it.)
pub(super) const SENDS_LITTLE_SHARE: f64 = 0.4;
/// Holes filled within half an RTT, at least this many and more than those filled late: the
/// path reorders, and the late originals are not losses.
pub(super) const REORDER_MIN_HOLES: u32 = 4;

/// The standing queue: the one-way delay's mean above its floor, against the same threshold as
/// srtt's above min_rtt for the sender's view.
pub(super) fn standing_queue(v: &RemoteView, cfg: &DiagnosisConfig) -> bool {
    v.mean_queue_us.is_some_and(|q| q > v.handshake_rtt_us * cfg.standing_queue_ratio + cfg.standing_queue_slack_us)
}

/// Whether the window this host advertises holds the sender, and then whether the reader (bytes
/// left unread) rather than the buffer's size closes it.
pub(super) fn window_bound(v: &RemoteView) -> bool {
    v.window_share() >= WINDOW_BOUND_SHARE
}

pub(super) fn reader_slow(v: &RemoteView, flow: &Flow) -> bool {
    let rcvbuf = f64::from(flow.latest.rcvbuf);
    v.mean_unread > 0.0
        && (v.mean_unread >= UNREAD_SHARE * v.mean_rcv_wnd.max(1.0) || v.mean_unread >= UNREAD_SHARE * rcvbuf)
}

/// Whether the path is full: a standing queue, or a queue before most losses.
pub(super) fn fills_path(v: &RemoteView, cfg: &DiagnosisConfig) -> bool {
    standing_queue(v, cfg) || (v.episodes >= 2 && v.queued_share() >= cfg.queued_episode_share)
}

/// Whether the sender's data met a queue: at a fifth of at least two of its losses (as for a
/// rate-based sender's own view: one that does not cut keeps probing into a full bottleneck),
/// or in some sample of the window (BBR's probing fills a bottleneck's queue for an RTT every
/// eight) unless it lost at least twice and never with a queue (a stream its application paces
/// queues a moment behind each burst it writes, and meets no full bottleneck at its losses).
fn met_a_queue(v: &RemoteView, cfg: &DiagnosisConfig) -> bool {
    let at_losses = v.queued >= 2 && v.queued_share() >= cfg.rate_based_queued_share;
    let losses_clean = v.episodes >= 2 && v.queued == 0;
    at_losses || (v.max_queue_us > v.threshold_us && !losses_clean)
}

/// The remote sender's limit as the receiving end sees it, before hysteresis.
pub(super) fn classify(v: &RemoteView, cfg: &DiagnosisConfig) -> LimitedBy {
    if v.goodput_bps <= 0.0 {
        return LimitedBy::Idle;
    }
    if window_bound(v) {
        return LimitedBy::ReceiveWindow;
    }
    if fills_path(v, cfg) {
        return LimitedBy::Path;
    }
    // (Idle time is no sign of it: on a lossy path a sender held by its window waits whole RTTs
    // for its retransmission timer, and the receiver cannot tell that wait from an
    // application's.)
    let sends_little = v.goodput_bps < SENDS_LITTLE_SHARE * v.response_bps;
    // A loss-based sender cannot get more than its loss response allows; one that does (a
    // stream its application paces past its losses, whose rate only wanders around them) is
    // not held by its cuts, however deep they measure.
    let beyond_response = v.goodput_bps > cfg.response_slack * v.response_bps;
    match v.cutting() {
        // Cutting at its losses, and at what its loss response allows: its congestion window.
        Some(true) if !sends_little && !beyond_response => LimitedBy::CongestionWindow,
        // Cutting, far below its response: its application sets the rate, the cuts bind briefly.
        Some(true) if sends_little => LimitedBy::Application,
        // A sender that does not cut, or whose cuts do not bind (or that has not lost): at a
        // bottleneck it meets the queue, else nothing but its application (or its send
        // buffer) holds it.
        _ if met_a_queue(v, cfg) => LimitedBy::Path,
        Some(_) => LimitedBy::Application,
        // No loss after slow start either: no window, no queue, no loss response holds it.
        None if v.episodes == 0 => LimitedBy::Application,
        None => LimitedBy::Receiving,
    }
}

/// The flag condition from the receiving end; why not, for the text.
pub(super) fn flag_condition(
    flow: &Flow,
    v: &RemoteView,
    limited: LimitedBy,
    cfg: &DiagnosisConfig,
) -> Result<(), &'static str> {
    if !v.counted {
        return Err("its segments were not counted one by one (BTF tracepoints are needed)");
    }
    match limited {
        LimitedBy::CongestionWindow => {}
        LimitedBy::Path => return Err("the sender fills the path: its losses are the bottleneck's"),
        LimitedBy::ReceiveWindow => return Err("this host's receive window holds the sender, not its losses"),
        LimitedBy::Application if v.cutting() == Some(true) => {
            return Err("the sender gets far less than its loss response allows: something else sets its rate")
        }
        LimitedBy::Application | LimitedBy::Pacing => {
            return Err("the sender does not cut its rate at its losses as a loss-based one does")
        }
        _ => return Err("too few losses measured to judge"),
    }
    // A sender cutting at every loss wants more than it gets: heavy once it moved real data.
    if !cfg.is_heavy(flow.latest.bytes_received, v.goodput_bps, true) {
        return Err("not a heavy flow");
    }
    if v.reorder_holes >= REORDER_MIN_HOLES && v.reorder_holes > v.loss_holes {
        return Err("most holes were filled within half an RTT: the path reorders");
    }
    if v.episodes < cfg.min_loss_episodes || v.hole_byte_share < cfg.min_loss_ratio {
        return Err("too few losses to judge");
    }
    if v.clean_share() < cfg.clean_episode_share {
        return Err("the one-way delay rose above its floor before too many of the losses: they look congestive");
    }
    if v.goodput_bps > cfg.response_slack * v.response_bps {
        return Err("the goodput is above what its loss response allows: the losses do not hold it");
    }
    Ok(())
}
