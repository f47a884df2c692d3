//! The loss episodes of a flow (one per recovery) over the loss horizon, and the queue at
//! each: losses at a queue are the bottleneck's, losses without one are not congestive. The
//! place to add other kinds of loss (policers, reordering, spurious retransmissions): each
//! adds its count here and its reading in `limits` (does it fill the path?) and `flag`
//! (does it hold the flow back?).
//!
//! Only genuine losses count: an episode the kernel took back (its cut undone, or every
//! segment it retransmitted reported a duplicate by DSACK) was reordering or a late ACK, not
//! a loss, and says nothing against the path; it is counted apart, in `spurious`.

use tracer_common::NS_PER_SEC;

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::policer::{plateau_forming, policing, EpisodeLoss, Policing};
use crate::analysis::diagnosis::response::is_loss_based;
use crate::analysis::flow_table::{queue_threshold_us, EpisodeKind, Flow, LossEpisode};

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
    /// Episodes the kernel took back (left out of `episodes`), slow-start ones included.
    pub(super) spurious: usize,
    /// Episodes whose srtt held the receiver's delay (its window fell: it left data unread),
    /// left out of `episodes`: the queue at them is not the path's to judge.
    pub(super) receiver_held: usize,
    /// Over the flow's life (the kernel's counters): segments retransmitted, those DSACK
    /// reported spurious, cuts undone. A flow's spurious retransmissions come early, before the
    /// kernel learns how far the path reorders, so a horizon would lose them.
    pub(super) retrans_segments: u32,
    pub(super) dsack_dups: u32,
    pub(super) undo_events: u32,
    /// Of the judged episodes, those a timeout began and those a probe (outside recovery)
    /// began; the rest began in fast retransmit.
    pub(super) timeouts: usize,
    pub(super) probes: usize,
    /// A policer's rate, when the episodes show one (loss-based senders only).
    pub(super) policing: Option<Policing>,
    /// Two loss cycles at one rate, each loss a burst: a policer's plateau whose rate does
    /// not show yet.
    pub(super) plateau_forming: bool,
}

/// `part` of `episodes` loss episodes as a share (0 without any).
pub(super) fn episode_share(part: usize, episodes: usize) -> f64 {
    if episodes == 0 {
        0.0
    } else {
        part as f64 / episodes as f64
    }
}

impl LossView {
    pub(super) fn clean_share(&self) -> f64 {
        episode_share(self.clean, self.episodes)
    }

    pub(super) fn queued_share(&self) -> f64 {
        episode_share(self.queued, self.episodes)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The counters an episode's stretch ends at: the next episode's start, or now.
#[derive(Clone, Copy)]
struct Mark {
    retrans: u32,
    dsack: u32,
    undo: u32,
}

/// Whether the kernel took `e` back by the end of its stretch: it undid a cut, or DSACK
/// reported every segment it retransmitted a duplicate.
fn taken_back(e: &LossEpisode, end: Mark) -> bool {
    let retrans = end.retrans.saturating_sub(e.retrans_before);
    let dsack = end.dsack.saturating_sub(e.dsack_before);
    let undone = end.undo.saturating_sub(e.undo_before);
    undone > 0 || (retrans > 0 && dsack >= retrans)
}

/// The queue at a loss as the policer reading judges it: at the loss that ends slow start, the
/// higher of RACK's RTT (where the kernel gave it) and srtt's. srtt, which moves an eighth per ACK, lags
/// the queue slow start builds in its last round trips and sits on the threshold either way:
/// on a quarter-BDP drop-tail queue at 30 ms it showed 5.0 ms where the threshold is 5.03 (a
/// bottleneck read as a capped start), behind a tight-bucket policer 3.5 ms. RACK's RTT,
/// the latest acknowledged segment's, separates them: 7.0-7.5 ms (19.5-20 ms at 80 ms) on the
/// bottleneck, the full queue it drops at, and 0.05-0.15 ms behind the policer, which queues
/// nothing (bpftrace on `tcp_sock.rack.rtt_us` at the first Recovery, 2026-12-06).
///
/// At that loss, also what srtt rose by while its recovery lasted. A random loss can be
/// detected before the flight slow start already sent reaches the bottleneck; that flight then
/// overflows the queue within the same recovery, and the episode loses a large share of it
/// with no queue at its detection: a capped start, read on CUBIC at 0.1 % random loss on the
/// 80 ms path (the emulated queue had tail-dropped 473 packets; 1 run in 10, 2026-12-07). The
/// overflow's queue shows in srtt during the recovery; a policer's cut leaves srtt where it was.
///
/// RACK's reading adds to srtt's, never replaces it: a random loss detected by the SACK of a
/// segment sent before the queue built gives RACK the path's RTT while srtt already holds the
/// queue. CUBIC at 0.1 % on the 80 ms path: srtt 16.5 ms above min_rtt at detection (the 20 ms
/// queue, 10 ms threshold), RACK 0.4 ms; read by RACK alone it was a capped start at 107 Mbit/s
/// (2026-12-07).
fn start_queue(e: &LossEpisode, min_rtt: u32) -> f64 {
    let base = min_rtt.min(e.min_rtt_us);
    if e.slow_start && e.rack_rtt_at_us > 0 {
        let at_detection = e.rack_rtt_at_us.max(e.srtt_at_us).saturating_sub(base);
        let while_recovering = e.srtt_peak_us.saturating_sub(e.srtt_at_us);
        f64::from(at_detection.max(while_recovering))
    } else {
        f64::from(e.srtt_at_us.saturating_sub(base))
    }
}

/// The queue at a loss after slow start, against today's min_rtt (the kernel's windowed minimum
/// only falls): the lower of srtt's reading and RACK's where the kernel gave RACK's. On a
/// drop-tail bottleneck both hold the queue (it drops exactly when full, and the segments
/// acknowledged past the hole went through it). A receiver's delayed ACK lifts srtt alone: a
/// window of a few segments ends each flight on an odd one whose ACK waits for the timer, and
/// srtt, moving an eighth per ACK, carries that wait, while the segments past a hole are
/// acknowledged at once. CUBIC at 2 % random loss on the 30 ms WAN (cwnd 5-11) read 4 of 14
/// losses above the 5 ms threshold by srtt with no queue on the path.
fn queue_at_loss(e: &LossEpisode, min_rtt: u32) -> f64 {
    let base = min_rtt.min(e.min_rtt_us);
    let by_srtt = e.srtt_at_us.saturating_sub(base);
    let by_rack = if e.rack_rtt_at_us > 0 { e.rack_rtt_at_us.saturating_sub(base) } else { by_srtt };
    f64::from(by_srtt.min(by_rack))
}

/// The flow's loss episodes within the loss horizon and since `since_ns` (its congestion
/// control's last switch: an earlier algorithm's losses say nothing of this one), split by the
/// queue at each loss.
pub(super) fn loss_view(flow: &Flow, cfg: &DiagnosisConfig, now_ns: u64, since_ns: u64) -> LossView {
    let s = &flow.latest;
    let loss_based = is_loss_based(&s.cc);
    let min_rtt = s.min_rtt_us;
    let threshold_us = queue_threshold_us(min_rtt, cfg.queue_ratio, cfg.queue_slack_us);
    let since = now_ns.saturating_sub((cfg.loss_horizon_secs * NS_PER_SEC as f64) as u64).max(since_ns);
    let recent: Vec<_> = flow.loss_episodes().filter(|e| e.ts_ns >= since).collect();
    let now_mark = Mark { retrans: s.total_retrans, dsack: s.signals.spurious(), undo: s.signals.undone() };
    let ends = recent
        .iter()
        .skip(1)
        .map(|n| Mark { retrans: n.retrans_before, dsack: n.dsack_before, undo: n.undo_before })
        .chain(std::iter::once(now_mark));
    let (spurious, genuine): (Vec<_>, Vec<_>) = recent.iter().zip(ends).partition(|(e, end)| taken_back(e, *end));
    let genuine: Vec<&LossEpisode> = genuine.into_iter().map(|(e, _)| *e).collect();
    let queue = |e: &LossEpisode| queue_at_loss(e, min_rtt);
    let best_clean_bps = flow.loss.as_ref().map_or(0.0, |l| l.best_clean_bps[0] as f64);
    // A policer is read from the genuine losses only: what the kernel took back was not dropped.
    let losses = EpisodeLoss::of_all(&genuine, s.bytes_retrans, s.mss, |e| start_queue(e, min_rtt) > threshold_us);
    let policed = if loss_based { policing(&losses, best_clean_bps, cfg) } else { None };
    // Rate-based senders leave ssthresh alone: "slow start" means nothing for them.
    let (overshoots, judged): (Vec<&LossEpisode>, Vec<&LossEpisode>) =
        genuine.into_iter().partition(|e| loss_based && e.slow_start);
    // Every loss after slow start counts for the loss rates; the queue is judged only at those
    // where the receiver read what it got.
    let after_start = judged;
    let judged: Vec<&LossEpisode> = after_start.iter().copied().filter(|e| !e.receiver_held).collect();
    let mut v = LossView {
        threshold_us,
        slow_start: overshoots.len(),
        clean_delivery_bps: flow.loss.as_ref().map_or(0.0, |l| l.best_clean_bps[2] as f64),
        spurious: spurious.len(),
        receiver_held: after_start.len() - judged.len(),
        policing: policed,
        plateau_forming: loss_based && plateau_forming(&losses, cfg),
        ..LossView::default()
    };
    v.retrans_segments = now_mark.retrans;
    v.dsack_dups = now_mark.dsack;
    v.undo_events = now_mark.undo;
    let Some(first) = after_start.first() else { return v };
    v.episodes = judged.len();
    v.queued = judged.iter().filter(|e| queue(e) > threshold_us).count();
    v.clean = v.episodes - v.queued;
    v.timeouts = judged.iter().filter(|e| e.kind == EpisodeKind::Timeout).count();
    v.probes = judged.iter().filter(|e| e.kind == EpisodeKind::Probe).count();
    v.span_secs = now_ns.saturating_sub(first.ts_ns) as f64 / NS_PER_SEC as f64;
    v.median_queue_us = median(judged.iter().map(|e| queue(e)).collect());
    v.median_cwnd_before = median(after_start.iter().map(|e| f64::from(e.cwnd_before)).collect());
    let sent = s.bytes_sent.saturating_sub(first.bytes_sent);
    if sent > 0 {
        // Retransmissions DSACK reported spurious were not lost.
        let dsacked = u64::from(now_mark.dsack.saturating_sub(first.dsack_before)) * u64::from(s.mss);
        let lost = s.bytes_retrans.saturating_sub(first.bytes_retrans).saturating_sub(dsacked);
        v.loss_ratio = lost as f64 / sent as f64;
        // n episodes over the segments sent since the first: slightly high for small n, which
        // lowers the response function, so it never flatters the flag.
        v.event_rate = after_start.len() as f64 / (sent as f64 / f64::from(s.mss.max(1)));
    }
    v
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnosis::test_feed::{episodic, run_feed};
    use crate::analysis::flow_table::LossEpisode;
    use crate::analysis::sample::CaState;

    /// `episodic`'s losses, each begun in `ca` (Recovery is `episodic`'s own).
    fn evidence_with_losses_in(ca: Option<CaState>) -> crate::analysis::diagnosis::Evidence {
        let feed = episodic("cubic", 16_000_000, 7, 0, 0);
        let (d, _) = run_feed(30, move |tick| {
            let mut out = feed(tick);
            for s in out.iter_mut().filter(|s| s.ca_state == CaState::Recovery) {
                match ca {
                    Some(ca) => s.ca_state = ca,
                    // A retransmission without recovery: a tail-loss probe.
                    None => s.ca_state = CaState::Open,
                }
            }
            out
        });
        *d.verdict(1).expect("verdict").evidence.clone().expect("evidence")
    }

    /// A fast retransmit's episode on a `min_rtt_us` path with the RTTs given (µs) and
    /// `srtt_peak_us` at srtt's, the rest zero.
    fn episode(min_rtt_us: u32, srtt_at_us: u32, rack_rtt_at_us: u32, slow_start: bool) -> LossEpisode {
        LossEpisode {
            ts_ns: 1,
            srtt_at_us,
            srtt_before_us: 0,
            rack_rtt_at_us,
            srtt_peak_us: srtt_at_us,
            min_rtt_us,
            cwnd_before: 0,
            delivery_before_bps: 0,
            bytes_sent: 0,
            bytes_retrans: 0,
            retrans_before: 0,
            dsack_before: 0,
            undo_before: 0,
            kind: crate::analysis::flow_table::EpisodeKind::FastRetransmit,
            slow_start,
            receiver_held: false,
        }
    }

    #[test]
    fn a_slow_start_cut_is_queued_when_its_recovery_shows_the_queue() {
        use super::start_queue;
        // 80 ms path: RACK's RTT at detection shows no queue (a random loss ahead of the
        // overflow), then srtt rises by the 20 ms queue the flight overflowed.
        let cut = LossEpisode { srtt_peak_us: 99_500, ..episode(80_000, 83_000, 80_400, true) };
        assert_eq!(start_queue(&cut, 80_000), 16_500.0);
        // Behind a policer srtt stays where it was: under the threshold, as RACK's reading.
        let policed = LossEpisode { srtt_peak_us: 83_200, ..cut };
        assert_eq!(start_queue(&policed, 80_000), 3_000.0);
        // srtt already holding the queue at detection, RACK's RTT that of a segment sent before
        // it built (measured): the queue is srtt's.
        let early_sack = episode(80_000, 96_800, 80_700, true);
        assert_eq!(start_queue(&early_sack, 80_000), 16_800.0);
        // After slow start the queue is srtt's at detection, as before.
        let later = LossEpisode { slow_start: false, ..cut };
        assert_eq!(start_queue(&later, 80_000), 3_000.0);
    }

    #[test]
    fn a_delayed_ack_in_srtt_is_no_queue_at_the_loss_but_a_full_queue_is() {
        use super::queue_at_loss;
        // 30 ms path, cwnd 6: srtt carries the receiver's delayed ACK (7 ms above min_rtt),
        // RACK's RTT, of a segment acknowledged past the hole at once, shows no queue.
        let delayed_ack = episode(30_000, 37_000, 30_300, false);
        assert_eq!(queue_at_loss(&delayed_ack, 30_000), 300.0);
        // A full drop-tail queue shows in both: the lower is the queue.
        let full = LossEpisode { srtt_at_us: 36_500, rack_rtt_at_us: 37_500, ..delayed_ack };
        assert_eq!(queue_at_loss(&full, 30_000), 6_500.0);
        // Without RACK's reading (kernels without BTF), srtt's as before.
        let unknown = LossEpisode { rack_rtt_at_us: 0, ..delayed_ack };
        assert_eq!(queue_at_loss(&unknown, 30_000), 7_000.0);
    }

    #[test]
    fn episodes_say_whether_a_timeout_a_probe_or_fast_retransmit_began_them() {
        let fast = evidence_with_losses_in(Some(CaState::Recovery));
        assert!(fast.loss_episodes >= 3 && fast.timeout_episodes == 0 && fast.probe_episodes == 0, "{fast:?}");
        let rto = evidence_with_losses_in(Some(CaState::Loss));
        assert!(rto.loss_episodes >= 3 && rto.timeout_episodes == rto.loss_episodes, "{rto:?}");
        let probe = evidence_with_losses_in(None);
        assert!(probe.loss_episodes >= 3 && probe.probe_episodes == probe.loss_episodes, "{probe:?}");
    }
}
