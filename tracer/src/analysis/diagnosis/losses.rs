//! The loss episodes of a flow (one per recovery) over the loss horizon, and the queue at
//! each: losses at a queue are the bottleneck's, losses without one are not congestive. The
//! place to add other kinds of loss (policers, reordering, spurious retransmissions): each
//! adds its count here and its reading in `limits` (does it fill the path?) and `flag`
//! (does it hold the flow back?).

use tracer_common::NS_PER_SEC;

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::policer::{plateau_forming, policing, EpisodeLoss, Policing};
use crate::analysis::diagnosis::response::is_loss_based;
use crate::analysis::model::{queue_threshold_us, Flow, LossEpisode};

/// What the flow's loss episodes over the loss horizon show.
#[derive(Clone, Debug, Default)]
pub(super) struct LossView {
    /// Judged episodes (after slow start for loss-based senders) and how they split.
    pub(super) episodes: usize,
    pub(super) clean: usize,
    pub(super) queued: usize,
    pub(super) slow_start: usize,
    pub(super) span_secs: f64,
    pub(super) median_queue_us: f64,
    pub(super) threshold_us: f64,
    pub(super) median_cwnd_before: f64,
    pub(super) loss_ratio: f64,
    pub(super) event_rate: f64,
    pub(super) clean_delivery_bps: f64,
    /// A policer's rate, when the episodes show one (loss-based senders only).
    pub(super) policing: Option<Policing>,
    /// Two loss cycles at one rate, each loss a burst: a policer's plateau whose rate does
    /// not show yet.
    pub(super) plateau_forming: bool,
}

impl LossView {
    pub(super) fn clean_share(&self) -> f64 {
        if self.episodes == 0 {
            0.0
        } else {
            self.clean as f64 / self.episodes as f64
        }
    }

    pub(super) fn queued_share(&self) -> f64 {
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

/// The flow's loss episodes within the loss horizon, split by the queue at each loss.
pub(super) fn loss_view(flow: &Flow, cfg: &DiagnosisConfig, now_ns: u64) -> LossView {
    let s = &flow.latest;
    let loss_based = is_loss_based(&s.cc);
    let min_rtt = s.min_rtt_us;
    let threshold_us = queue_threshold_us(min_rtt, cfg.queue_ratio, cfg.queue_slack_us);
    let since = now_ns.saturating_sub((cfg.loss_horizon_secs * NS_PER_SEC as f64) as u64);
    let recent: Vec<_> = flow.loss_episodes().filter(|e| e.ts_ns >= since).collect();
    // The queue is judged against today's min_rtt: the kernel's windowed minimum only falls.
    let queue = |e: &LossEpisode| f64::from(e.srtt_at_us.saturating_sub(min_rtt.min(e.min_rtt_us)));
    let best_clean_bps = flow.loss.as_ref().map_or(0.0, |l| l.best_clean_bps[0] as f64);
    let losses = EpisodeLoss::of_all(&recent, s.bytes_retrans, s.mss, |e| queue(e) > threshold_us);
    let policed = if loss_based { policing(&losses, best_clean_bps, cfg) } else { None };
    // Rate-based senders leave ssthresh alone: "slow start" means nothing for them.
    let (overshoots, judged): (Vec<_>, Vec<_>) = recent.into_iter().partition(|e| loss_based && e.slow_start);
    let mut v = LossView {
        threshold_us,
        slow_start: overshoots.len(),
        clean_delivery_bps: flow.loss.as_ref().map_or(0.0, |l| l.best_clean_bps[2] as f64),
        policing: policed,
        plateau_forming: loss_based && plateau_forming(&losses, cfg),
        ..LossView::default()
    };
    let Some(first) = judged.first() else { return v };
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
