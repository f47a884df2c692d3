//! The verdict's words: the paragraph a network engineer reads for a flagged flow (the losses,
//! the missing queue, the loss response's bound, what more the path carries), the one-line
//! class of any other, deep mode's citation and the relay note that goes first.

use std::fmt::Write as _;

use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::losses::LossView;
use crate::analysis::diagnosis::response::{is_loss_based, ResponseModel};
use crate::analysis::diagnosis::verdict::{Change, DeepEvidence, Evidence, PolicerEvidence, Verdict};
use crate::analysis::diagnosis::window::Window;
use crate::analysis::flow_table::Flow;
use crate::analysis::tunnel::place::{tunnel_note, Tunnel};
use crate::analysis::udp::RelayedBy;
use crate::analysis::units::{pct, rate, rate_about};

/// A flagged flow's text: why its loss response, not the path, holds it back.
pub(super) fn write_flagged(text: &mut String, flow: &Flow, ev: &Evidence) {
    if let Some(p) = &ev.policer {
        write_policed(text, flow, ev, p);
        return;
    }
    let s = &flow.latest;
    let _ = write!(
        text,
        "{} is held back by loss-based congestion control: {} lost packets in {} episodes over {:.0} s ({} of bytes retransmitted) \
         and the RTT stayed within {:.1} ms of min_rtt {:.1} ms before {} of them (median queue {:.1} ms): no queue built up, so the losses are not the bottleneck's. \
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
    let _ = write!(text, "; mean cwnd {:.0} x {} B, {:.0} before each cut.", ev.mean_cwnd, s.mss, ev.cwnd_before_loss);
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
}

/// Any other flow's text: its class and rate, and for a loss-based flow held by its window
/// that lost packets, why it is not flagged.
pub(super) fn write_unflagged(
    text: &mut String,
    flow: &Flow,
    w: &Window,
    lv: &LossView,
    ev: &Evidence,
    limited: LimitedBy,
    condition: Result<(), &'static str>,
) {
    let s = &flow.latest;
    let _ = write!(text, "{} ({} over {:.0} s", limited.describe(), rate(w.goodput_bps), w.secs);
    if w.loss_ratio > 0.0 {
        let _ = write!(text, ", {} retransmitted", pct(w.loss_ratio));
    }
    text.push(')');
    if limited == LimitedBy::Policer {
        let _ = write!(text, ": {}", ev.decided_by);
        if let Err(why) = condition {
            let _ = write!(text, ". Not flagged: {why}");
        }
    } else if limited == LimitedBy::Path && !ev.decided_by.is_empty() {
        let _ = write!(text, ": {}. Not a problem of this host: the path is full", ev.decided_by);
    } else if let Err(why) = condition {
        if is_loss_based(&s.cc) && limited == LimitedBy::CongestionWindow && (lv.episodes > 0 || w.loss_ratio > 0.0) {
            let _ = write!(text, "; not flagged: {why} ({})", ev.decided_by);
        }
    }
    crate::analysis::diagnosis::reordering::write_note(text, ev);
}

/// A flagged policed flow's text: the policer's rate, what the loss response leaves of it, and
/// what switching can gain (up to that rate, never beyond).
fn write_policed(text: &mut String, flow: &Flow, ev: &Evidence, p: &PolicerEvidence) {
    let s = &flow.latest;
    let _ = write!(
        text,
        "{} is policed at {} and its loss-based congestion control ({}) gets {} of it: {}. \
         Each loss is the policer cutting a burst above its rate: the Mathis bound at {} loss events per segment and srtt {:.1} ms is {}.",
        flow_name(flow),
        rate_about(p.rate_bps),
        s.cc,
        rate(ev.goodput_bps),
        ev.decided_by,
        pct(ev.loss_event_rate),
        ev.srtt_ms,
        rate(ev.mathis_bps),
    );
    if let Some(more) = ev.available_bps {
        let _ = write!(text, " Up to {} more is available, no more than the policer passes.", rate(more));
    }
    text.push_str(
        " A paced, model-based algorithm (BBR) sends at the rate the policer passes instead of bursting past it.",
    );
}

/// A flagged flow whose window no longer meets the flag's condition: why, and how many more
/// evaluations like it clear the flag (its class and words stay the flag's until then).
pub(super) fn write_pending_clear(text: &mut String, why: &str, clears_in: u32) {
    let _ = write!(
        text,
        " The latest window does not meet the flag ({why}): the flag clears after {clears_in} more like it."
    );
}

/// When the verdict last changed, from what, and why; `flagged` is whether it is flagged now.
pub(super) fn write_change(text: &mut String, c: &Change, flagged: bool) {
    if let Some(cc) = &c.cc_from {
        let _ = write!(text, " Its congestion control was {cc} until {:.0} s: judged afresh since.", c.at_s);
        return;
    }
    let _ = match (c.was_flagged, flagged) {
        (true, false) => write!(text, " No longer flagged since {:.0} s: {}.", c.at_s, c.why),
        (false, true) => write!(text, " Flagged since {:.0} s (before: {}).", c.at_s, c.from.name()),
        _ => write!(text, " Was {} until {:.0} s.", c.from.name(), c.at_s),
    };
}

/// A flagged flow paused by `pause` (its receiver, or nothing to move) for `secs`: the verdict
/// of its busy seconds stands.
pub(super) fn write_pause(text: &mut String, pause: LimitedBy, secs: f64) {
    let what = match pause {
        LimitedBy::ReceiveWindow => "its receiver has left data unread (the peer's window is full)",
        LimitedBy::Receiving => "it has only received",
        _ => "it has moved nothing",
    };
    let _ = write!(
        text,
        " For the last {secs:.0} s {what}: those seconds say nothing of its congestion control, and this verdict is from the busy seconds before."
    );
}

/// The sentence a flagged flow's text gains from deep mode: the loss responses the algorithm
/// itself made.
pub(super) fn cite_deep(text: &mut String, deep: &DeepEvidence) {
    let ratio =
        deep.median_cut.map_or(String::new(), |r| format!(", each cutting the window to about {:.0}%", r * 100.0));
    let last = deep.last_cut.as_deref().map_or(String::new(), |l| format!(" (latest: {l})"));
    text.push_str(&format!(" {} itself responded to {} losses{ratio}{last}.", deep.twin, deep.loss_responses));
}

/// Put `new`'s note first in `text`, taking off the note of `old` (a closed flow keeps its
/// verdict, and with it an older note).
pub(super) fn note_relay(text: &mut String, old: Option<&RelayedBy>, new: &RelayedBy) {
    if let Some(old) = old {
        let prefix = format!("{} ", old.note());
        if let Some(rest) = text.strip_prefix(&prefix) {
            *text = rest.to_string();
        }
    }
    *text = format!("{} {}", new.note(), text);
}

/// Set `v`'s tunnel (none: no tunnel) and, for a flagged flow, end its text with the tunnel's
/// note in place of the note it ends with (a closed or resting flow keeps its verdict, and with
/// it an older note). Another flow's tunnel is in its record and the detail view, not its words.
pub(super) fn note_tunnel(v: &mut Verdict, tunnel: Option<&Tunnel>) {
    let mss = v.evidence.as_ref().map_or(0, |e| e.mss);
    let same_words = match (&v.tunnel, tunnel) {
        (Some(old), Some(new)) => old.same_place(new),
        (None, None) => true,
        _ => false,
    };
    if v.flagged && !same_words {
        if let Some(old) = &v.tunnel {
            let note = tunnel_note(old, mss);
            if v.text.ends_with(&note) {
                v.text.truncate(v.text.len() - note.len());
            }
        }
        if let Some(t) = tunnel {
            v.text.push_str(&tunnel_note(t, mss));
        }
    }
    v.tunnel = tunnel.cloned();
}

fn flow_name(flow: &Flow) -> String {
    let s = &flow.latest;
    format!("{} -> {}", s.local, s.remote)
}
