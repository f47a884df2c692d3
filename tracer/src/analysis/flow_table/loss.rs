//! Each flow's loss episodes (one per recovery), with the moments before each: srtt, cwnd and
//! delivery rate, and whether it was still in slow start; and the best rates it delivered
//! without queueing. Recorded here, from every sample, because the diagnosis judges once a
//! second and would miss them.

use std::collections::VecDeque;

use tracer_common::TCP_INFINITE_SSTHRESH;

use crate::analysis::flow_table::config::{queue_threshold_us, TableConfig};
use crate::analysis::flow_table::counts::peer_window_fell;
use crate::analysis::sample::{CaState, Sample, SampleReason};

/// Flows start tracking loss episodes once they sent this much: smaller flows are never heavy,
/// and most of a busy host's flows stay below it, so they allocate nothing.
pub const TRACK_MIN_BYTES: u64 = 64 * 1024;
/// Loss episodes kept per flow.
pub const MAX_EPISODES: usize = 16;
/// Periodic samples kept to describe the moments before a loss.
const RING_LEN: usize = 8;
/// How far before a loss the "before" figures look.
pub const LOSS_LOOKBACK_NS: u64 = 500_000_000;
/// Slow start's aftermath lasts until srtt has stayed within the queue threshold of min_rtt for
/// a round trip out of recovery, for at most this many min_rtts: the overshoot's queue drains
/// within a few round trips of the cut (on a drop-tail buffer of up to a BDP, CUBIC's cut to 0.7
/// of the window it reached empties it), and a deeper one stands, which the standing-queue
/// test names.
///
/// One sample without a queue is not the end: the first flight after the cut's recovery is
/// released at once, up to 0.7 of the window slow start reached, and overflows a shallow queue
/// again. CUBIC on the 240 ms, 150 Mbit/s path: the queue gone at recovery's end, 60 ms of it
/// 0.1 s later and two more losses to it within 0.8 s, judged as the path's congestion; with one
/// random loss every second or two those two held the flag back (2 of 7 losses queued) and let
/// it drop after it was given (2 runs in 11 of the long-fat-path test, 2026-12-07).
const AFTERMATH_MAX_RTTS: u64 = 16;

/// How the kernel noticed a loss episode: by the CA state its first retransmission came in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EpisodeKind {
    /// In Recovery: fast retransmit (duplicate ACKs, SACK or RACK).
    #[default]
    FastRetransmit,
    /// In Loss: a retransmission timeout.
    Timeout,
    /// Outside both (Open, Disorder, CWR): a tail-loss probe or another retransmission that
    /// needed no recovery.
    Probe,
}

impl EpisodeKind {
    fn of(ca: CaState) -> Self {
        match ca {
            CaState::Recovery => Self::FastRetransmit,
            CaState::Loss => Self::Timeout,
            CaState::Open | CaState::Disorder | CaState::Cwr => Self::Probe,
        }
    }
}

/// The start of one loss episode (a recovery: entering Recovery/Loss, or a retransmission
/// outside one), counted once however many segments it retransmits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossEpisode {
    pub ts_ns: u64,
    /// srtt when the loss was detected. The kernel updates srtt on every ACK (gain 1/8), so
    /// this is the RTT of the segments sent just before the drop: on a drop-tail bottleneck it
    /// includes the full queue (the queue drops exactly when full), on a random loss it does
    /// not. A median over the preceding half second smooths a shallow queue away (it fills in
    /// the last RTTs only: measured 2-6 ms against 6-12 ms at the loss on a quarter-BDP queue).
    pub srtt_at_us: u32,
    /// Median srtt of the periodic samples in the half second before (0: none).
    pub srtt_before_us: u32,
    /// RACK's RTT when the loss was detected (`rack.rtt_us`; 0: unknown): the RTT of the
    /// latest segment acknowledged, without srtt's lag.
    pub rack_rtt_at_us: u32,
    /// The highest srtt while the episode's recovery lasted, its last sample included: a flight
    /// that overflowed a queue after a random loss was detected shows that queue here, where a
    /// policer, which queues nothing, leaves srtt at min_rtt.
    pub srtt_peak_us: u32,
    pub min_rtt_us: u32,
    /// Largest cwnd in the half second before the cut, and at detection.
    pub cwnd_before: u32,
    /// Largest delivery rate in the half second before (not application-limited), bits/s.
    pub delivery_before_bps: u64,
    /// Counters at the episode's start, for loss rates over the episodes' span.
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    /// Counters just before the episode (retransmitted segments, DSACKed ones, undone cuts):
    /// with the next episode's, they tell whether the kernel later took this one back.
    pub retrans_before: u32,
    pub dsack_before: u32,
    pub undo_before: u32,
    pub kind: EpisodeKind,
    /// The sender was still in or leaving slow start (ssthresh unset in the lookback), or in
    /// its aftermath (the overshoot's queue not yet drained): an overshoot of its own making,
    /// which says nothing about the path's losses.
    pub slow_start: bool,
    /// The peer's advertised window fell in the lookback: its application left data unread,
    /// so its ACKs waited and srtt holds the receiver's delay, not only the path's queue.
    pub receiver_held: bool,
}

impl LossEpisode {
    /// Queueing delay when the loss was detected, µs.
    pub fn queue_us(&self) -> u32 {
        self.srtt_at_us.saturating_sub(self.min_rtt_us)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct RingPoint {
    ts_ns: u64,
    srtt_us: u32,
    cwnd: u32,
    delivery_bps: u64,
    app_limited: bool,
    slow_start: bool,
    snd_wnd: u32,
}

/// Per-flow loss memory, allocated once the flow has sent `TRACK_MIN_BYTES`.
#[derive(Clone, Debug, Default)]
pub struct LossTracker {
    ring: [RingPoint; RING_LEN],
    ring_next: usize,
    ring_len: usize,
    /// The latest loss episodes, oldest first (at most [`MAX_EPISODES`]).
    pub episodes: VecDeque<LossEpisode>,
    in_loss: bool,
    /// The three highest delivery rates seen without queueing and not application-limited,
    /// highest first (bits/s): what the path has shown it can carry for this flow.
    pub best_clean_bps: [u64; 3],
    /// Until when (ns) slow start's aftermath lasts at most, while its overshoot's queue has
    /// not drained: set when slow start ends, cleared once samples out of recovery have shown
    /// no queue for a min_rtt (since `aftermath_clean_since_ns`).
    aftermath_until_ns: Option<u64>,
    aftermath_clean_since_ns: Option<u64>,
}

impl LossTracker {
    pub(super) fn update(&mut self, prev: &Sample, s: &Sample, cfg: &TableConfig) {
        let lossy = matches!(s.ca_state, CaState::Recovery | CaState::Loss);
        let retransmitted = s.total_retrans > prev.total_retrans;
        let queue_thr = queue_threshold_us(s.min_rtt_us, cfg.queue_ratio, cfg.queue_slack_us);
        let queued = f64::from(s.srtt_us.saturating_sub(s.min_rtt_us)) > queue_thr;
        if prev.snd_ssthresh >= TCP_INFINITE_SSTHRESH && s.snd_ssthresh < TCP_INFINITE_SSTHRESH {
            let max_ns = AFTERMATH_MAX_RTTS * u64::from(s.min_rtt_us.max(1)) * 1000;
            self.aftermath_until_ns = Some(s.ts_ns + max_ns);
            self.aftermath_clean_since_ns = None;
        }
        self.end_aftermath_once_drained(s, queued, lossy);
        if !self.in_loss && (lossy || retransmitted) {
            self.record_episode(prev, s);
        } else if self.in_loss {
            if let Some(e) = self.episodes.back_mut() {
                e.srtt_peak_us = e.srtt_peak_us.max(s.srtt_us);
            }
        }
        // One episode per recovery: it ends when the sender is back in Open (or Disorder/CWR).
        self.in_loss = lossy;
        let clean = s.srtt_us > 0
            && s.min_rtt_us > 0
            && s.min_rtt_us != u32::MAX
            && f64::from(s.srtt_us.saturating_sub(s.min_rtt_us)) <= queue_thr;
        if clean && !s.app_limited && s.delivery_rate_bps > 0 && s.delivery_rate_bps != u64::MAX {
            let best = &mut self.best_clean_bps;
            if s.delivery_rate_bps > best[2] {
                best[2] = s.delivery_rate_bps;
                best.sort_unstable_by(|a, b| b.cmp(a));
            }
        }
        if s.reason == SampleReason::Periodic {
            self.ring[self.ring_next] = RingPoint {
                ts_ns: s.ts_ns,
                srtt_us: s.srtt_us,
                cwnd: s.snd_cwnd,
                delivery_bps: s.delivery_rate_bps,
                app_limited: s.app_limited,
                slow_start: s.snd_ssthresh >= TCP_INFINITE_SSTHRESH,
                snd_wnd: s.snd_wnd,
            };
            self.ring_next = (self.ring_next + 1) % RING_LEN;
            self.ring_len = (self.ring_len + 1).min(RING_LEN);
        }
    }

    /// Slow start's aftermath ends at its cap, or a min_rtt after a periodic sample out of
    /// recovery showed no queue, if none out of recovery has shown one since. Recovery's own
    /// samples are left out: srtt moves on the few segments acknowledged while holes are
    /// repaired (49 ms above min_rtt on one, RACK's RTT 0.4 ms, at 240 ms).
    fn end_aftermath_once_drained(&mut self, s: &Sample, queued: bool, recovering: bool) {
        let Some(until) = self.aftermath_until_ns else { return };
        match (recovering, queued) {
            (true, _) => {}
            (false, true) => self.aftermath_clean_since_ns = None,
            (false, false) if s.reason == SampleReason::Periodic => {
                self.aftermath_clean_since_ns.get_or_insert(s.ts_ns);
            }
            (false, false) => {}
        }
        let rtt_ns = u64::from(s.min_rtt_us) * 1000;
        let drained = self.aftermath_clean_since_ns.is_some_and(|since| s.ts_ns >= since + rtt_ns);
        if s.ts_ns > until || drained {
            self.aftermath_until_ns = None;
            self.aftermath_clean_since_ns = None;
        }
    }

    fn record_episode(&mut self, prev: &Sample, s: &Sample) {
        let since = s.ts_ns.saturating_sub(LOSS_LOOKBACK_NS);
        let before: Vec<&RingPoint> = self.ring.iter().take(self.ring_len).filter(|p| p.ts_ns >= since).collect();
        let mut srtts: Vec<u32> = before.iter().map(|p| p.srtt_us).collect();
        srtts.sort_unstable();
        let cwnd_before = before.iter().map(|p| p.cwnd).max().unwrap_or(0).max(prev.snd_cwnd).max(s.snd_cwnd);
        let delivery_before_bps = before
            .iter()
            .filter(|p| !p.app_limited && p.delivery_bps != u64::MAX)
            .map(|p| p.delivery_bps)
            .max()
            .unwrap_or(0);
        let slow_start = prev.snd_ssthresh >= TCP_INFINITE_SSTHRESH
            || before.iter().any(|p| p.slow_start)
            || self.aftermath_until_ns.is_some();
        let widest = before.iter().map(|p| p.snd_wnd).max().unwrap_or(0).max(prev.snd_wnd);
        let receiver_held = peer_window_fell(widest, s.snd_wnd, s.mss);
        if self.episodes.len() >= MAX_EPISODES {
            self.episodes.pop_front();
        }
        self.episodes.push_back(LossEpisode {
            ts_ns: s.ts_ns,
            srtt_at_us: s.srtt_us,
            srtt_before_us: srtts.get(srtts.len() / 2).copied().unwrap_or(0),
            rack_rtt_at_us: s.rack_rtt_us,
            srtt_peak_us: s.srtt_us,
            min_rtt_us: s.min_rtt_us,
            cwnd_before,
            delivery_before_bps,
            bytes_sent: s.bytes_sent,
            bytes_retrans: s.bytes_retrans,
            retrans_before: prev.total_retrans,
            dsack_before: prev.signals.spurious(),
            undo_before: prev.signals.undone(),
            kind: EpisodeKind::of(s.ca_state),
            slow_start,
            receiver_held,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::flow_table::tests::sample;

    #[test]
    fn an_episode_keeps_the_highest_srtt_of_its_recovery_and_its_last_sample() {
        let cfg = TableConfig::default();
        let mut tracker = LossTracker::default();
        let at = |ms: u64, ca: CaState, srtt_us: u32| Sample { ca_state: ca, srtt_us, ..sample(1, ms) };
        let open = at(0, CaState::Open, 81_000);
        let steps = [
            at(100, CaState::Recovery, 83_000),
            at(200, CaState::Recovery, 95_000),
            at(250, CaState::Open, 99_500),
            at(350, CaState::Open, 120_000),
        ];
        let mut prev = open;
        for s in steps {
            tracker.update(&prev, &s, &cfg);
            prev = s;
        }
        let e = tracker.episodes.back().expect("an episode");
        assert_eq!((e.srtt_at_us, e.srtt_peak_us), (83_000, 99_500));
    }
}
