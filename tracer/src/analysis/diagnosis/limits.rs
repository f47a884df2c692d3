//! What limits a flow: the receiver, its application, its buffers, its congestion window or
//! pacing, or the path itself (a standing queue, the queue at its losses, a flat ceiling).

use serde::{Deserialize, Serialize};

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::losses::LossView;
use crate::analysis::diagnosis::response::is_loss_based;
use crate::analysis::diagnosis::window::{rate_of, Window};

/// What limits a flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitedBy {
    /// Not enough observations yet.
    #[default]
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
    /// A token-bucket policer on the path: losses without a queue whenever the flow reaches
    /// one rate (see `policer`). Fixable on this host only up to that rate.
    Policer,
    /// A process's own congestion control (QUIC, a userspace VPN's TCP stack) decides the rate,
    /// not the kernel's: heavy UDP flows.
    Userspace,
    /// A tunnel process's UDP flow: the kernel's TCP flows it carries decide the rate.
    Tunnel,
}

impl LimitedBy {
    /// Every verdict, in declaration order.
    pub const ALL: [LimitedBy; 10] = [
        Self::Unknown,
        Self::Idle,
        Self::Receiving,
        Self::Application,
        Self::ReceiveWindow,
        Self::SendBuffer,
        Self::CongestionWindow,
        Self::Pacing,
        Self::Path,
        Self::Policer,
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
            Self::Policer => "policer",
            Self::Userspace => "userspace",
            Self::Tunnel => "tunnel",
        }
    }

    /// Whether the flow's own sending was held by something other than its path or its
    /// congestion control (its receiver, or nothing to move at all): such seconds say nothing
    /// for or against a flag, and a flagged flow's verdict of its busy seconds stands through
    /// them (see `hysteresis`).
    pub fn pauses(self) -> bool {
        matches!(self, Self::Idle | Self::Receiving | Self::ReceiveWindow)
    }

    /// The description's opening words, up to its colon: what every verdict of the class says,
    /// from whichever end it is judged (the rest of a description speaks from a sender's socket).
    pub fn heading(self) -> &'static str {
        let described = self.describe();
        described.find(':').map_or(described, |colon| &described[..=colon])
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
            Self::Policer => "policed: a token-bucket policer drops what the flow sends above one rate",
            Self::Userspace => "userspace congestion control: the owning process, not the kernel, sets the rate",
            Self::Tunnel => "tunnel: the kernel's TCP flows it carries set the rate, and their fix applies",
        }
    }
}

/// Mean srtt above the standing-queue threshold over the window's samples taken while the
/// peer read what it received (a receiver that leaves data unread delays its ACKs: that is
/// not a queue on the path), in a window the flow had data to send most of the time. A queue
/// a flow builds drains while it rests: one that rested much of its window and still saw srtt
/// high saw another flow's queue or its receiver's delay (a player's connection read in bursts
/// while its sibling carries the stream).
pub(super) fn standing_queue(w: &Window, cfg: &DiagnosisConfig) -> bool {
    w.min_rtt_us > 0.0
        && w.busy_share + w.sndbuf_share >= cfg.min_busy_share
        && w.reading_srtt_us
            .is_some_and(|srtt| srtt > w.min_rtt_us * (1.0 + cfg.standing_queue_ratio) + cfg.standing_queue_slack_us)
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

/// Whether the send buffer binds: the flow gets most of what a full buffer carries at its RTT,
/// so a larger one would carry more. (A buffer full of data SACKed but not acknowledged holds
/// a writer back without holding the flow.)
fn sndbuf_binds(w: &Window, cfg: &DiagnosisConfig) -> bool {
    let allows = rate_of(w.mean_sndbuf, cfg.sndbuf_carried_share, w.mean_srtt_us / 1e6);
    w.goodput_bps >= cfg.sndbuf_binds_share * allows
}

fn at_ceiling(w: &Window, lv: &LossView, cfg: &DiagnosisConfig) -> bool {
    lv.clean_delivery_bps > 0.0 && w.goodput_bps >= cfg.ceiling_share * lv.clean_delivery_bps
}

/// What limits the flow over the window, before hysteresis.
pub(super) fn classify(w: &Window, lv: &LossView, cfg: &DiagnosisConfig, cc: &str) -> LimitedBy {
    let moved = w.sent_bytes + w.received_bytes;
    if moved == 0 {
        return LimitedBy::Idle;
    }
    if w.received_bytes > w.acked_bytes.saturating_mul(4) && w.sent_bytes < w.received_bytes / 4 {
        return LimitedBy::Receiving;
    }
    // A window too small for the path holds the flow; one the receiver closes (it reads
    // something else meanwhile, or nothing) pauses it, and the rest of the window decides:
    // a flow that moved nothing else is idle.
    if w.rwnd_share - w.rwnd_closed_share >= cfg.stall_share {
        return LimitedBy::ReceiveWindow;
    }
    // A sender held by its send buffer has everything it queued in flight and nothing left to
    // send, so the kernel marks its rate samples application-limited too: what tells it from an
    // application that keeps up is its writer, waiting for room (and the kernel's own chrono,
    // which runs only while the window has room and the writer waits).
    if (w.sndbuf_bound_share >= cfg.sndbuf_bound_share || w.sndbuf_share >= cfg.stall_share) && sndbuf_binds(w, cfg) {
        return LimitedBy::SendBuffer;
    }
    // The kernel marks delivery-rate samples application-limited only while packets in flight
    // are below cwnd and nothing is left to send: a stream that keeps up with its application.
    // A sender that never fills its send buffer is paced by its application, even when loss
    // recovery keeps its small cwnd full. One whose writer waits for room had more to send.
    if (w.app_limited_share >= cfg.app_limited_share
        || w.no_backlog_share >= cfg.no_backlog_share
        || w.sndbuf_low_share >= cfg.sndbuf_low_share)
        && w.writer_blocked_share < cfg.writer_waiting_share
    {
        return LimitedBy::Application;
    }
    let backlogged = |fallback: LimitedBy| {
        if fills_path(w, lv, cfg, cc) {
            LimitedBy::Path
        } else if lv.policing.is_some() {
            LimitedBy::Policer
        } else {
            fallback
        }
    };
    // A full cwnd is the root cause even when the application then blocks on its send buffer.
    if w.cwnd_full_share >= cfg.cwnd_full_share {
        return backlogged(LimitedBy::CongestionWindow);
    }
    // The write queue ran dry much of the time. (Chrono "busy" runs until the retransmit queue
    // empties too, so on a lossy long path this alone would miss streams that keep up.)
    if w.busy_share + w.rwnd_share + w.sndbuf_share < cfg.min_busy_share {
        return LimitedBy::Application;
    }
    backlogged(if is_loss_based(cc) { LimitedBy::CongestionWindow } else { LimitedBy::Pacing })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diagnosis::test_feed::{bulk, episodic, held_by_sndbuf, run, run_feed};

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
    fn bbr_filling_the_path_is_path_limited() {
        // Standing queue: srtt 40 ms on a 30 ms path, losses at the full queue.
        let (d, seen) = run_feed(15, episodic("bbr", 180_000_000, 3, 9, 10));
        assert!(seen.iter().all(|(f, _)| !f));
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Path);
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
    fn standing_queue_means_the_path_and_no_flag() {
        let (d, _) = run("cubic", 10, bulk(100_000_000, 0.01, 80_000));
        let v = d.verdict(1).expect("verdict");
        assert!(!v.flagged);
        assert_eq!(v.limited_by, LimitedBy::Path);
        assert!(v.text.contains("standing queue"), "{}", v.text);
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
    fn a_sender_held_by_its_send_buffer_is_sndbuf_limited_not_application_limited() {
        let (d, _) = run("bbr", 10, |tick, s| {
            held_by_sndbuf(tick, s);
            // Its rate samples all application-limited, the kernel's chrono catching little.
            s.app_limited = true;
            s.sndbuf_limited_us = tick * 10_000;
        });
        let v = d.verdict(1).expect("verdict");
        assert_eq!(v.limited_by, LimitedBy::SendBuffer, "{}", v.text);
        let e = v.evidence.as_ref().expect("evidence");
        assert!(e.app_limited_share > 0.9, "the kernel's rate samples say application: {e:?}");
        // The same writer behind a full congestion window is held by its window.
        let (d, _) = run("cubic", 10, |tick, s| {
            held_by_sndbuf(tick, s);
            (s.cwnd_limited, s.snd_cwnd, s.packets_out) = (true, 300, 300);
            (s.wmem_queued, s.notsent_bytes) = (3_500_000, 3_000_000);
        });
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::CongestionWindow);
        // Without the writer (a kernel or a recording without SOCK_NOSPACE), the kernel's
        // chrono alone decides, as before.
        let (d, _) = run("bbr", 10, |tick, s| {
            held_by_sndbuf(tick, s);
            s.writer_blocked = false;
        });
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Application);
    }

    #[test]
    fn a_writer_waiting_on_a_buffer_that_allows_far_more_than_the_flow_gets_is_not_held_by_it() {
        // BBR at 1.5 % random loss on a 40 ms, 200 Mbit/s path: its 4 MiB queue fills with data
        // SACKed and not yet acknowledged, the writer waits on it and the window has room, yet
        // the flow gets 177 Mbit/s of the 491 the buffer allows at its RTT (and got 178.9 with
        // a 64 MiB maximum).
        let (d, _) = run("bbr", 10, |tick, s| {
            held_by_sndbuf(tick, s);
            s.bytes_acked = 177_000_000 / 8 * tick / 10;
            s.bytes_sent = s.bytes_acked;
            (s.min_rtt_us, s.srtt_us) = (40_000, 41_000);
            (s.snd_cwnd, s.packets_out, s.sacked_out) = (1400, 2700, 2000);
        });
        let v = d.verdict(1).expect("verdict");
        assert_ne!(v.limited_by, LimitedBy::SendBuffer, "{}", v.text);
        assert!(!v.flagged && v.fix.is_empty(), "{v:?}");
        // The same writer on the 200 ms path, where the flow gets what 4 MiB allows: held.
        let (d, _) = run("bbr", 10, held_by_sndbuf);
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::SendBuffer);
    }

    #[test]
    fn srtt_that_rises_only_while_the_receiver_leaves_data_unread_is_no_queue() {
        // A player's second connection, opened ahead: while the player reads the other one, this
        // one's data stays unread, the peer's window falls and its delayed ACKs put 25 ms into
        // srtt, at the losses too; while it is read, srtt is the path's. Random losses throughout.
        let feed = episodic("cubic", 4_000_000, 5, 0, 0);
        let (d, seen) = run_feed(40, move |tick| {
            let unread = (tick / 50) % 2 == 1;
            let mut out = feed(tick);
            for s in &mut out {
                s.mss = 1448;
                s.snd_wnd = if unread { 1_500_000 - (tick % 50) as u32 * 20_000 } else { 1_500_000 };
                // The ACKs wait once data is left unread.
                if unread && tick % 50 > 0 {
                    s.srtt_us += 25_000;
                }
            }
            out
        });
        let after = &seen[10..];
        let flagged = after.iter().filter(|(f, _)| *f).count();
        assert!(flagged * 10 >= after.len() * 9, "flagged in {flagged} of {}: {seen:?}", after.len());
        assert!(after.iter().all(|(_, l)| *l != LimitedBy::Path), "{seen:?}");
        let e = d.verdict(1).expect("verdict").evidence.clone().expect("evidence");
        assert!(e.receiver_held_episodes > 0 && e.queued_episodes == 0, "{e:?}");
        // The same rise with the peer reading everything is a queue: not flagged.
        let feed = episodic("cubic", 4_000_000, 5, 25, 25);
        let (_, seen) = run_feed(40, feed);
        assert!(seen.iter().all(|(f, _)| !f), "{seen:?}");
    }

    #[test]
    fn a_queue_seen_by_a_flow_that_rests_most_of_its_window_is_not_its_own() {
        // A player's connection read in bursts while its sibling carries the stream: backlogged
        // (cwnd full) a third of the time, resting the rest, its srtt 18 ms above min_rtt from the
        // sibling's queue while the peer reads it, its own losses random.
        let resting = |busy_per_tick: u64| {
            let feed = episodic("cubic", 4_000_000, 5, 0, 18);
            move |tick: u64| {
                let mut out = feed(tick);
                out.iter_mut().for_each(|s| s.busy_us = tick * busy_per_tick);
                out
            }
        };
        let (d, seen) = run_feed(30, resting(33_000));
        assert!(seen[5..].iter().all(|(_, l)| *l != LimitedBy::Path), "{seen:?}");
        let e = d.verdict(1).expect("verdict").evidence.clone().expect("evidence");
        assert!(!e.standing_queue && e.busy_share < 0.4, "{e:?}");
        // The same srtt from a flow backlogged throughout is its own standing queue.
        let (d, _) = run_feed(30, resting(100_000));
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Path);
    }

    #[test]
    fn a_receiver_that_closes_its_window_for_a_while_pauses_the_flow_and_the_rest_decides() {
        // A player's next-segment connection: its window shut for 3 s of 5 while the player
        // reads the other one, then read; cwnd-limited whenever it may send, random losses.
        let feed = episodic("cubic", 4_000_000, 5, 0, 0);
        let (_, seen) = run_feed(30, move |tick| {
            let shut = tick % 50 < 30 && tick >= 100;
            let mut out = feed(tick);
            for s in &mut out {
                s.mss = 1448;
                s.snd_wnd = if shut { 0 } else { 1_500_000 };
                // The kernel's rwnd chrono: 100 ms for each tick of a shut window.
                s.rwnd_limited_us = (100..=tick).filter(|t| t % 50 < 30).count() as u64 * 100_000;
            }
            out
        });
        assert!(seen[15..].iter().all(|(_, l)| *l == LimitedBy::CongestionWindow), "{seen:?}");
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
}
