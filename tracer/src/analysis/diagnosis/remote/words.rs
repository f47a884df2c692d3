//! The receiving-end verdict's words: what holds the sender back as this end sees it, with the
//! numbers, and for a flagged flow what to run on the sender's host.

use std::fmt::Write as _;

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::remote::classify::{reader_slow, standing_queue};
use crate::analysis::diagnosis::remote::view::RemoteView;
use crate::analysis::diagnosis::response::ResponseModel;
use crate::analysis::diagnosis::verdict::RemoteSenderEvidence;
use crate::analysis::diagnosis::verdict::SetBy;
use crate::analysis::flow_table::Flow;
use crate::analysis::units::{bytes, pct, rate};

/// The signals behind the class, in words.
pub(super) fn decided_by(v: &RemoteView, limited: LimitedBy, cfg: &DiagnosisConfig) -> String {
    let episodes = std::fmt::from_fn(|f| {
        if v.episodes == 0 {
            return f.write_str("no loss episodes after slow start");
        }
        write!(
            f,
            "{} loss episodes in {:.0} s: {} with the one-way delay within {:.1} ms of its floor at the loss, {} above (median queue {:.1} ms)",
            v.episodes,
            v.episode_span_secs.max(v.span_secs.min(1.0)),
            v.clean,
            v.threshold_us / 1000.0,
            v.queued,
            v.median_queue_us / 1000.0
        )?;
        if let Some(cut) = v.median_cut {
            write!(f, "; its rate after each over before, median {cut:.2} of {} measured", v.cuts.len())?;
        }
        Ok(())
    });
    match limited {
        LimitedBy::ReceiveWindow => format!(
            "the sender delivers {} of the {} window this host advertises per RTT ({:.1} ms); {} received and unread on average",
            pct(v.window_share()),
            bytes(v.mean_rcv_wnd as u64),
            v.rtt_us / 1000.0,
            bytes(v.mean_unread as u64)
        ),
        LimitedBy::Path if standing_queue(v, cfg) => format!(
            "standing queue: the one-way delay {:.1} ms above its floor on average (threshold {:.1} ms); {episodes}",
            v.mean_queue_us.unwrap_or(0.0) / 1000.0,
            (v.handshake_rtt_us * cfg.standing_queue_ratio + cfg.standing_queue_slack_us) / 1000.0
        ),
        LimitedBy::Path if v.queued >= 2 => format!("queue before the losses: {episodes}"),
        LimitedBy::Path => format!(
            "the sender does not cut at its losses, and its data met a queue of up to {:.1} ms above the one-way delay's floor (threshold {:.1} ms); {episodes}",
            v.max_queue_us / 1000.0,
            v.threshold_us / 1000.0
        ),
        LimitedBy::Application => format!(
            "goodput {} is {} of what its loss response allows ({}), with no queue and the window open; {episodes}",
            rate(v.goodput_bps),
            pct(v.goodput_bps / v.response_bps),
            rate(v.response_bps)
        ),
        _ => episodes.to_string(),
    }
}

/// Who sends: the peer's address, as the user knows it.
fn sender(flow: &Flow) -> String {
    format!("the sender at {} (to {})", flow.latest.remote, flow.latest.local)
}

/// A flagged flow's text: its sender's losses, its cuts, the bound they set, and the advice.
pub(super) fn write_flagged(text: &mut String, flow: &Flow, v: &RemoteView, ev: &RemoteSenderEvidence) {
    let _ = write!(
        text,
        "From this receiving end: {} is held back by loss-based congestion control. {} loss episodes in {:.0} s ({:.1} a second, \
         one per {:.0} segments; {} of segments lost), each a hole the sender filled by retransmission about an RTT later, \
         and the one-way delay stayed within {:.1} ms of its floor before {} of them (median queue {:.1} ms): no queue built up, \
         so the losses are not a bottleneck's.",
        sender(flow),
        ev.loss_episodes,
        v.episode_span_secs,
        ev.episodes_per_s,
        1.0 / ev.loss_event_rate.max(1e-9),
        pct(ev.lost_per_segment),
        ev.queue_threshold_ms,
        ev.clean_episodes,
        ev.queue_at_loss_ms,
    );
    if let (Some(cut), Some(last)) = (ev.median_cut, ev.cuts.last()) {
        let _ = write!(
            text,
            " Its rate fell at each: to {cut:.2} of what it was, median of {} (latest {} before, {} after), as a {} cuts.",
            ev.cuts.len(),
            rate(last.before_bps),
            rate(last.after_bps),
            if cut > 0.6 { "CUBIC-like sender" } else { "Reno-like sender" },
        );
    }
    let _ = write!(
        text,
        " Goodput {} is what its loss response allows: the Mathis bound at {} loss events per segment and RTT {:.1} ms (handshake {:.1} ms) is {}",
        rate(ev.goodput_bps),
        pct(ev.loss_event_rate),
        ev.rtt_ms,
        ev.handshake_rtt_ms,
        rate(ev.mathis_bps),
    );
    if ev.response_model == ResponseModel::Cubic {
        let _ = write!(text, " (CUBIC's response {})", rate(ev.response_bps));
    }
    text.push('.');
    if ev.clean_rate_bps > 1.5 * ev.goodput_bps {
        let _ = write!(text, " The path delivered {} to it without queueing.", rate(ev.clean_rate_bps));
    }
    let _ = write!(
        text,
        " A sender that does not take random loss for congestion (BBR) gets more. On the sender's host: {}.",
        ev.advice.join("; ")
    );
}

/// Any other receiving flow's text: its class as the receiving end sees it, the numbers, and
/// why it is not flagged.
pub(super) fn write_unflagged(
    text: &mut String,
    flow: &Flow,
    v: &RemoteView,
    ev: &RemoteSenderEvidence,
    limited: LimitedBy,
) {
    let s = &flow.latest;
    let _ = write!(
        text,
        "{} from this receiving end ({} over {:.0} s), ",
        limited.heading(),
        rate(v.goodput_bps),
        v.window_secs
    );
    match limited {
        LimitedBy::ReceiveWindow if reader_slow(v, flow) => {
            let _ = write!(
                text,
                "this host's application reads slower than the data arrives: {} waits unread on average, and the window it \
                 advertises closes ({}); {} holds the sender",
                bytes(ev.unread_bytes as u64),
                ev.decided_by,
                sender(flow)
            );
        }
        LimitedBy::ReceiveWindow => {
            let set_by = match ev.rcvbuf_set_by {
                SetBy::Application => "the application set it (SO_RCVBUF): raise it there",
                SetBy::Autotuning => "autotuned, up to the namespace's net.ipv4.tcp_rmem max",
            };
            let _ = write!(
                text,
                "this host's receive window holds {}: {}. The receive buffer is {} ({set_by})",
                sender(flow),
                ev.decided_by,
                bytes(u64::from(s.rcvbuf)),
            );
        }
        LimitedBy::Path => {
            let _ = write!(text, "{} fills the path: {}. Not a problem of either host", sender(flow), ev.decided_by);
        }
        LimitedBy::Application => {
            let _ = write!(
                text,
                "{} sends little: its application (or its send buffer) sets the rate: {}",
                sender(flow),
                ev.decided_by
            );
        }
        LimitedBy::Pacing => {
            let _ = write!(
                text,
                "{} does not cut its rate at losses as a loss-based one does (a rate-based sender, such as BBR): {}",
                sender(flow),
                ev.decided_by
            );
        }
        LimitedBy::CongestionWindow => {
            let _ = write!(text, "{} cuts its rate at losses: {}", sender(flow), ev.decided_by);
        }
        LimitedBy::Idle => text.push_str("nothing received"),
        _ => {
            let _ = write!(text, "{}; too few losses measured yet to judge {}", ev.decided_by, sender(flow));
        }
    }
    // Where the class does not say it already: a loss-based sender, or one that loses.
    if let Some(why) = &ev.not_flagged {
        if limited == LimitedBy::CongestionWindow || (limited == LimitedBy::Application && v.episodes > 0) {
            let _ = write!(text, ". Not flagged: {why}");
        }
    }
    text.push('.');
}

/// A flow whose sender is on this host: that socket's verdict stands; this end's class and
/// flag are said (its words are in `evidence.remote_sender`, not here: this row is not flagged).
pub(super) fn write_sender_here(text: &mut String, ev: &RemoteSenderEvidence) {
    let _ = write!(
        text,
        "receiving: its sender is a socket of this host (cookie {}), judged there; from this end alone: {}{}",
        ev.sender_on_host.unwrap_or(0),
        ev.limited_by.name(),
        if ev.flagged { ", flagged" } else { "" }
    );
}
