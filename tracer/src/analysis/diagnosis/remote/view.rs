//! What a receiving flow shows of its sender over the judging window and the loss horizon: the
//! rate, the window it is offered, the loss episodes and the queue at each, how the sender's
//! rate answered them, and what its loss response would allow. From the receiving socket only.

use tracer_common::NS_PER_SEC;

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::losses::episode_share;
use crate::analysis::diagnosis::response::{cubic_bps, mathis_bps, ResponseModel};
use crate::analysis::flow_table::{queue_threshold_us, Cut, Flow, Progress, ReceiveTracker};

/// A cut at or below this is the sender answering a loss (CUBIC's beta is 0.7, Reno's 0.5;
/// a sender that does not cut measures 0.9-1.1, and the rate within one RTT wanders by a
/// tenth).
pub(super) const CUT_AT: f64 = 0.85;
/// Above this median cut a loss-based sender is CUBIC-like (its response is CUBIC's where
/// that is higher than Reno's).
const CUBIC_LIKE_CUT: f64 = 0.6;

/// The receiving flow's view of its sender.
#[derive(Clone, Debug, Default)]
pub(super) struct RemoteView {
    /// Over the judging window: the goodput, the mean window advertised, the mean bytes
    /// received and unread, the mean queue above the one-way delay's floor (µs; `None`
    /// without timestamps).
    pub(super) goodput_bps: f64,
    /// The judging window's length as the flow's progress points span it (s).
    pub(super) window_secs: f64,
    pub(super) mean_rcv_wnd: f64,
    pub(super) mean_unread: f64,
    pub(super) mean_queue_us: Option<f64>,
    /// The largest queue a periodic sample saw in the window (µs; 0 without timestamps).
    pub(super) max_queue_us: f64,
    /// The handshake's RTT (`min_rtt`), the kernel's receive-side estimate, and the RTT the
    /// bounds use: the handshake's plus the mean queue (µs).
    pub(super) handshake_rtt_us: f64,
    pub(super) rcv_rtt_us: f64,
    pub(super) rtt_us: f64,
    pub(super) mss: u32,
    /// Over the loss horizon (from its start or the flow's first sample, to now): seconds,
    /// data segments, holes (all, filled late, filled early).
    pub(super) span_secs: f64,
    pub(super) segments: u64,
    pub(super) holes: u32,
    pub(super) loss_holes: u32,
    pub(super) reorder_holes: u32,
    /// Bytes the holes skipped over the bytes received.
    pub(super) hole_byte_share: f64,
    /// Loss episodes after slow start in the horizon: all, without a queue, with one; and the
    /// median queue at them (µs), against the threshold.
    pub(super) episodes: usize,
    pub(super) clean: usize,
    pub(super) queued: usize,
    pub(super) median_queue_us: f64,
    pub(super) threshold_us: f64,
    /// The episodes' span: from the first judged episode to now (s).
    pub(super) episode_span_secs: f64,
    /// The cuts measured in the horizon, oldest first, and their median (after over before).
    pub(super) cuts: Vec<Cut>,
    pub(super) median_cut: Option<f64>,
    /// Loss episodes per data segment, and the response at that rate and `rtt_us`.
    pub(super) event_rate: f64,
    pub(super) mathis_bps: f64,
    pub(super) response_bps: f64,
    pub(super) response_model: ResponseModel,
    /// The third-highest rate delivered over a second without a queue in the horizon (bits/s):
    /// what the path has shown it carries. (Over a second: between two samples a bottleneck
    /// that drains a burst, or a late emulator, shows rates far above its own.)
    pub(super) clean_rate_bps: f64,
    /// The segments were counted one by one.
    pub(super) counted: bool,
}

impl RemoteView {
    /// Whether the sender cut its rate at its losses (at least two cuts measured).
    pub(super) fn cutting(&self) -> Option<bool> {
        (self.cuts.len() >= 2).then(|| self.median_cut.is_some_and(|c| c <= CUT_AT))
    }

    /// The episodes without a queue, as a share of those judged.
    pub(super) fn clean_share(&self) -> f64 {
        episode_share(self.clean, self.episodes)
    }

    pub(super) fn queued_share(&self) -> f64 {
        episode_share(self.queued, self.episodes)
    }

    /// Late-filled holes over the data segments of the horizon.
    pub(super) fn lost_per_segment(&self) -> f64 {
        if self.segments == 0 {
            0.0
        } else {
            f64::from(self.loss_holes) / self.segments as f64
        }
    }

    /// Loss episodes per second over the episodes' span.
    pub(super) fn episodes_per_sec(&self) -> f64 {
        if self.episode_span_secs > 0.0 {
            self.episodes as f64 / self.episode_span_secs
        } else {
            0.0
        }
    }

    /// Bytes a window-limited sender delivers per RTT, over the window advertised.
    pub(super) fn window_share(&self) -> f64 {
        if self.mean_rcv_wnd <= 0.0 {
            return 0.0;
        }
        self.goodput_bps / 8.0 * self.rtt_us / 1e6 / self.mean_rcv_wnd
    }
}

fn delta(a: &Progress, b: &Progress, f: fn(&Progress) -> u64) -> u64 {
    f(b).saturating_sub(f(a))
}

/// The third-highest rate (the highest of fewer) between the progress points since `from_ns`
/// whose mean queue stayed at most `threshold_us`.
fn clean_rate_bps(t: &ReceiveTracker, from_ns: u64, threshold_us: f64) -> f64 {
    let points: Vec<&Progress> = t.progress.iter().filter(|p| p.ts_ns >= from_ns).chain([&t.now]).collect();
    let mut rates: Vec<f64> = points
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (w[0], w[1]);
            let dt = b.ts_ns.saturating_sub(a.ts_ns) as f64 / NS_PER_SEC as f64;
            let samples = b.queue_samples.saturating_sub(a.queue_samples);
            let queue = b.queue_sum_us.saturating_sub(a.queue_sum_us) as f64 / samples.max(1) as f64;
            (dt >= 0.5 && samples > 0 && queue <= threshold_us)
                .then(|| b.bytes_received.saturating_sub(a.bytes_received) as f64 * 8.0 / dt)
        })
        .collect();
    rates.sort_by(|a, b| b.total_cmp(a));
    rates.get(2).or(rates.last()).copied().unwrap_or(0.0)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The view of `flow`'s sender from what it received (`None` before it tracked any), over the
/// `window_secs` ending at `now_ns`.
pub(super) fn remote_view(flow: &Flow, window_secs: f64, cfg: &DiagnosisConfig, now_ns: u64) -> Option<RemoteView> {
    let t: &ReceiveTracker = flow.receive.as_deref()?;
    let s = &flow.latest;
    let secs_ns = |secs: f64| (secs * NS_PER_SEC as f64) as u64;
    let now = t.now;
    let win_start = t.progress_at(now.ts_ns.saturating_sub(secs_ns(window_secs)));
    let win_secs = now.ts_ns.saturating_sub(win_start.ts_ns) as f64 / NS_PER_SEC as f64;
    let goodput_bps =
        if win_secs > 0.0 { delta(&win_start, &now, |p| p.bytes_received) as f64 * 8.0 / win_secs } else { 0.0 };
    let periodic = delta(&win_start, &now, |p| p.window_samples);
    let per_sample = |f: fn(&Progress) -> u64| {
        if periodic == 0 {
            0.0
        } else {
            delta(&win_start, &now, f) as f64 / periodic as f64
        }
    };
    let queued_samples = delta(&win_start, &now, |p| p.queue_samples);
    let mean_queue_us =
        (queued_samples > 0).then(|| delta(&win_start, &now, |p| p.queue_sum_us) as f64 / queued_samples as f64);
    let handshake_rtt_us = f64::from(if s.min_rtt_us > 0 { s.min_rtt_us } else { s.srtt_us });
    let rcv_rtt_us = f64::from(s.receive.rcv_rtt_us);
    let rtt_us = match mean_queue_us {
        Some(q) => handshake_rtt_us + q,
        None if rcv_rtt_us > handshake_rtt_us => rcv_rtt_us,
        None => handshake_rtt_us,
    };
    let mss = if s.receive.rcv_mss > 0 { s.receive.rcv_mss } else { s.mss };

    let horizon_from = now_ns.saturating_sub(secs_ns(cfg.loss_horizon_secs));
    let hz_start = t.progress_at(horizon_from.max(flow.first_seen_ns));
    let span_secs = now.ts_ns.saturating_sub(hz_start.ts_ns) as f64 / NS_PER_SEC as f64;
    let received = delta(&hz_start, &now, |p| p.bytes_received);
    let threshold_us = queue_threshold_us(s.min_rtt_us, cfg.queue_ratio, cfg.queue_slack_us);
    let judged: Vec<_> = t.episodes.iter().filter(|e| e.ts_ns >= horizon_from && !e.slow_start).collect();
    let queues: Vec<f64> = judged.iter().filter_map(|e| e.queue_us).map(f64::from).collect();
    let queued = queues.iter().filter(|&&q| q > threshold_us).count();
    // Without timestamps no queue is known at a loss: such episodes count as clean only when
    // the window showed no queue either (the kernel's receive RTT near the handshake's).
    let unknown_clean = rcv_rtt_us <= handshake_rtt_us * (1.0 + cfg.standing_queue_ratio) + cfg.standing_queue_slack_us;
    let unknown = judged.len() - queues.len();
    let clean = queues.len() - queued + if unknown_clean { unknown } else { 0 };
    let first_episode = judged.first().map(|e| e.ts_ns);
    let (episode_span_secs, episode_segments) = match first_episode {
        Some(ts) => {
            let from = t.progress_at(ts);
            (now.ts_ns.saturating_sub(ts) as f64 / NS_PER_SEC as f64, delta(&from, &now, |p| u64::from(p.data_segs_in)))
        }
        None => (0.0, 0),
    };
    let event_rate = if episode_segments > 0 { judged.len() as f64 / episode_segments as f64 } else { 0.0 };
    let cuts: Vec<Cut> = t.cuts.iter().filter(|c| c.ts_ns >= horizon_from).copied().collect();
    let median_cut = median(cuts.iter().map(Cut::ratio).collect());
    let rtt_s = rtt_us / 1e6;
    let mathis = mathis_bps(mss, rtt_s, event_rate);
    let cubic = cubic_bps(mss, rtt_s, event_rate);
    let (response_bps, response_model) = if median_cut.is_some_and(|c| c > CUBIC_LIKE_CUT) && cubic > mathis {
        (cubic, ResponseModel::Cubic)
    } else {
        (mathis, ResponseModel::Mathis)
    };
    let max_queue_us = t
        .progress
        .iter()
        .filter(|p| p.ts_ns > win_start.ts_ns)
        .chain([&now])
        .map(|p| f64::from(p.queue_max_us))
        .fold(0.0, f64::max);
    Some(RemoteView {
        goodput_bps,
        max_queue_us,
        window_secs: win_secs,
        mean_rcv_wnd: per_sample(|p| p.rcv_wnd_sum),
        mean_unread: per_sample(|p| p.unread_sum),
        mean_queue_us,
        handshake_rtt_us,
        rcv_rtt_us,
        rtt_us,
        mss,
        span_secs,
        segments: delta(&hz_start, &now, |p| u64::from(p.data_segs_in)),
        holes: now.holes.wrapping_sub(hz_start.holes),
        loss_holes: now.loss_holes.wrapping_sub(hz_start.loss_holes),
        reorder_holes: now.reorder_holes.wrapping_sub(hz_start.reorder_holes),
        hole_byte_share: if received > 0 {
            delta(&hz_start, &now, |p| p.hole_bytes) as f64 / received as f64
        } else {
            0.0
        },
        episodes: judged.len(),
        clean,
        queued,
        median_queue_us: median(queues).unwrap_or(0.0),
        threshold_us,
        episode_span_secs,
        cuts,
        median_cut,
        event_rate,
        mathis_bps: mathis,
        response_bps,
        response_model,
        clean_rate_bps: clean_rate_bps(t, horizon_from, threshold_us),
        counted: s.receive.counted,
    })
}
