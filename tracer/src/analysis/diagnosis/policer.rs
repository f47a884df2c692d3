//! Is the flow policed? A token-bucket policer drops, never queues: whatever a flow sends above
//! its rate (once the bucket is empty) is lost, with no RTT inflation before. A loss-based
//! flow behind one shows it in one of two ways, both read from its loss episodes:
//!
//! - a **plateau**: its losses come at one delivery rate, episode after episode, and each
//!   loses a burst (all it sent above the rate until its cut took effect). This is how a deep
//!   bucket shows: the bucket drains, then the excess is dropped. The same reading as BBRv1's
//!   long-term bandwidth sampling in Linux (`bbr_lt_bw_sampling`: lossy intervals whose rates
//!   agree within 1/8), made on the episodes a loss-based flow already has.
//! - a **capped start**: its slow start, which doubles until something stops it, was stopped
//!   without a queue by a loss of a large share of one flight, and the flow has never
//!   delivered faster since than at its losses. This is how a tight bucket shows: bursts
//!   longer than the bucket are cut, so the flow never passes the rate, while random loss
//!   takes a packet or two from a flight and lets slow start run far beyond the rate the flow
//!   later settles at (measured: 63-150 Mbit/s in slow start at 1-0.1 % loss, against a
//!   steady 5-18 Mbit/s).
//!
//! Random loss shows neither: one or two packets per episode, at whatever rate the sawtooth
//! was when the dice fell.

use serde::{Deserialize, Serialize};

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::flow_table::LossEpisode;
use crate::analysis::units::{rate, rate_about};

/// How the policer showed itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicerSign {
    /// Losses in bursts at one delivery rate, episode after episode.
    Plateau,
    /// Slow start cut by a burst loss at the rate the flow never passed since.
    CappedStart,
}

/// A policer's rate as the flow's losses show it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Policing {
    /// The rate the flow was policed at (bits/s).
    pub(super) rate_bps: f64,
    pub(super) sign: PolicerSign,
    /// Loss cycles (a plateau) or episodes (a capped start) whose rate agreed with the
    /// rate, of those judged.
    pub(super) at_ceiling: usize,
    pub(super) judged: usize,
    /// Median segments lost per judged loss.
    pub(super) burst_segments: f64,
    /// The most the flow had delivered without a queue when the policer was first read: a
    /// plateau is carried while nothing delivered since goes past both it and its rate (a
    /// deep bucket's first drain runs at the line rate, before the plateau shows).
    pub(super) best_clean_when_seen: f64,
}

impl Policing {
    /// Whether a flow at `goodput_bps` leaves enough of the policed rate unused for another
    /// algorithm to gain. A plateau's rate is the policer's: a quarter of it unused is enough.
    /// A capped start's is a floor (the policer passes at least what the flow once delivered):
    /// a flow at three quarters of a floor may be well under the policer, so only one whose
    /// rate agrees with the floor (within the tolerance two delivery rates agree by) is taken
    /// to get most of it. Behind the 10 ms bucket one CUBIC run got 13.9 Mbit/s, 0.79 of its
    /// 17.6 Mbit/s floor but 0.72 of the 19.3 the policer passes (BBR 19).
    pub(super) fn leaves_unused(&self, goodput_bps: f64, cfg: &DiagnosisConfig) -> bool {
        let share = match self.sign {
            PolicerSign::Plateau => cfg.policer_flag_below,
            PolicerSign::CappedStart => 1.0 - cfg.policer_rate_tolerance,
        };
        goodput_bps < share * self.rate_bps
    }
}

/// One episode as the policer reading needs it: when, what the flow had delivered by then,
/// its delivery rate just before the loss, the segments retransmitted before the next episode
/// began, and whether a queue came first.
#[derive(Clone, Copy, Debug)]
pub(super) struct EpisodeLoss {
    pub(super) ts_ns: u64,
    pub(super) delivered_bytes: u64,
    pub(super) min_rtt_us: u32,
    pub(super) delivery_before_bps: f64,
    pub(super) cwnd_before: f64,
    pub(super) lost_segments: f64,
    pub(super) queued: bool,
    pub(super) slow_start: bool,
}

impl EpisodeLoss {
    /// `episodes` in order, the flow's retransmitted bytes now, and whether each had a queue.
    pub(super) fn of_all(
        episodes: &[&LossEpisode],
        bytes_retrans_now: u64,
        mss: u32,
        queued: impl Fn(&LossEpisode) -> bool,
    ) -> Vec<EpisodeLoss> {
        let mss = f64::from(mss.max(1));
        episodes
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let until = episodes.get(i + 1).map_or(bytes_retrans_now, |next| next.bytes_retrans);
                EpisodeLoss {
                    ts_ns: e.ts_ns,
                    delivered_bytes: e.bytes_sent.saturating_sub(e.bytes_retrans),
                    min_rtt_us: e.min_rtt_us,
                    delivery_before_bps: e.delivery_before_bps as f64,
                    cwnd_before: f64::from(e.cwnd_before),
                    lost_segments: until.saturating_sub(e.bytes_retrans) as f64 / mss,
                    queued: queued(e),
                    slow_start: e.slow_start,
                }
            })
            .collect()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Do two rates agree as BBR's long-term sampling asks: within 1/8 or 4 kbit/s?
fn agree(rate: f64, ceiling: f64, cfg: &DiagnosisConfig) -> bool {
    (rate - ceiling).abs() <= ceiling * cfg.policer_rate_tolerance + 4_000.0
}

/// One loss cycle: from an episode without a queue to the next, at least a few round trips
/// long (a second loss within one cut's aftermath is part of the first), with the rate the
/// flow delivered over it and the segments its first loss took. Behind a policer whose bucket
/// the flow empties at each loss, what it delivers over a cycle is exactly what the bucket
/// took in meanwhile: the policed rate, whatever the bucket's depth.
struct Cycle {
    rate_bps: f64,
    lost_segments: f64,
}

fn cycles(episodes: &[EpisodeLoss], cfg: &DiagnosisConfig) -> Vec<Cycle> {
    let after_start: Vec<&EpisodeLoss> = episodes.iter().filter(|e| !e.slow_start).collect();
    after_start
        .windows(2)
        .filter(|w| !w[0].queued)
        .filter_map(|w| {
            let secs = w[1].ts_ns.saturating_sub(w[0].ts_ns) as f64 / 1e9;
            let min_secs = f64::from(w[0].min_rtt_us) / 1e6 * cfg.policer_min_cycle_rtts;
            (secs > 0.0 && secs >= min_secs).then(|| Cycle {
                rate_bps: w[1].delivered_bytes.saturating_sub(w[0].delivered_bytes) as f64 * 8.0 / secs,
                lost_segments: w[0].lost_segments,
            })
        })
        .collect()
}

/// A plateau in the making: two loss cycles so far, at one rate, each loss a burst; or fewer
/// than two cycles yet, and the losses after slow start without a queue were bursts. Random
/// loss (bursty or not) does not keep its cycles at one rate, and takes a segment or two a
/// loss; until a third cycle tells the rate, what switching would gain is unknown.
///
/// Burst losses before a second cycle are how a deep bucket's first drains look: a loss
/// 0.03-0.09 s after a cut belongs to that cut and makes no cycle, so a flow can show three
/// burst losses without a queue and one cycle. Judged on those, CUBIC behind a 1.5 s bucket was
/// flagged for 2 s before its plateau showed (seen once in the suite, 2026-12-07).
pub(super) fn plateau_forming(episodes: &[EpisodeLoss], cfg: &DiagnosisConfig) -> bool {
    let cycles = cycles(episodes, cfg);
    if cycles.len() >= 2 {
        return plateau_of(&cycles, 2, cfg).is_some();
    }
    let bursts: Vec<f64> = episodes.iter().filter(|e| !e.slow_start && !e.queued).map(|e| e.lost_segments).collect();
    !bursts.is_empty() && median(bursts) >= cfg.policer_burst_segments
}

fn plateau_of(cycles: &[Cycle], min_cycles: usize, cfg: &DiagnosisConfig) -> Option<Policing> {
    if cycles.len() < min_cycles {
        return None;
    }
    let rate_bps = median(cycles.iter().map(|c| c.rate_bps).collect());
    let at = cycles.iter().filter(|c| agree(c.rate_bps, rate_bps, cfg)).count();
    let burst_segments = median(cycles.iter().map(|c| c.lost_segments).collect());
    let consistent = at as f64 >= cfg.policer_consistent_share * cycles.len() as f64;
    (consistent && burst_segments >= cfg.policer_burst_segments).then_some(Policing {
        rate_bps,
        sign: PolicerSign::Plateau,
        at_ceiling: at,
        judged: cycles.len(),
        burst_segments,
        best_clean_when_seen: 0.0,
    })
}

/// The loss cycles a capped start's settled rate is read from: the latest few.
const SETTLED_CYCLES: usize = 3;

/// The capped start: the first overshoot without a queue lost a large share of its flight,
/// and nothing the flow delivered since went far above the rates at its later losses. The
/// rate is then the most the flow ever delivered: a floor under the policed rate (bursts cut
/// by a tight bucket keep a loss-based flow below it).
fn capped_start(
    episodes: &[EpisodeLoss],
    cycles: &[Cycle],
    best_clean_bps: f64,
    cfg: &DiagnosisConfig,
) -> Option<Policing> {
    let judged: Vec<&EpisodeLoss> =
        episodes.iter().filter(|e| !e.slow_start && !e.queued && e.delivery_before_bps > 0.0).collect();
    if judged.len() < cfg.policer_min_episodes {
        return None;
    }
    // The loss that ended slow start, which a policer cuts without a queue. A bottleneck's
    // overflow shows its queue there (measured 7.0-7.3 ms on a quarter-BDP queue at 30 ms,
    // 20 ms at 80 ms), and the next overshoots, while ssthresh settles, may come without one:
    // taking the first unqueued of them read a shallow bottleneck (CUBIC at 0.05 % random loss)
    // and a deep bucket's drain as capped starts.
    let start = episodes.first().filter(|e| e.slow_start && !e.queued)?;
    let cut_share = start.lost_segments / start.cwnd_before.max(1.0);
    if start.cwnd_before < cfg.policer_min_start_flight || cut_share < cfg.policer_start_loss_share {
        return None;
    }
    let at_losses = median(judged.iter().map(|e| e.delivery_before_bps).collect());
    let rate_bps = best_clean_bps.max(at_losses);
    // What the flow settles at, over its latest loss cycles: a policer's flow keeps near its
    // rate, while one that met random loss falls from its start's rate cycle after cycle.
    let latest: Vec<f64> = cycles.iter().rev().take(SETTLED_CYCLES).map(|c| c.rate_bps).collect();
    let settles_near = latest.is_empty() || median(latest) >= rate_bps * cfg.policer_start_settled_share;
    (best_clean_bps <= at_losses * cfg.policer_start_overshoot && settles_near).then(|| Policing {
        rate_bps,
        sign: PolicerSign::CappedStart,
        at_ceiling: judged.iter().filter(|e| agree(e.delivery_before_bps, rate_bps, cfg)).count(),
        judged: judged.len(),
        burst_segments: median(judged.iter().map(|e| e.lost_segments).collect()),
        best_clean_when_seen: best_clean_bps,
    })
}

/// The policer's rate, when the episodes (oldest first, slow-start overshoots included) show
/// one. `best_clean_bps` is the highest delivery rate the flow ever had without a queue.
pub(super) fn policing(episodes: &[EpisodeLoss], best_clean_bps: f64, cfg: &DiagnosisConfig) -> Option<Policing> {
    // A capped start, else a plateau (one rate over the loss cycles, each loss a burst): both
    // read the same cycles, computed once.
    let cycles = cycles(episodes, cfg);
    capped_start(episodes, &cycles, best_clean_bps, cfg).or_else(|| {
        plateau_of(&cycles, cfg.policer_min_episodes, cfg)
            .map(|p| Policing { best_clean_when_seen: best_clean_bps, ..p })
    })
}

/// What the flow showed of a policer before, still holding now. A capped start is seen once
/// (its overshoot leaves the episode memory) and holds while the flow never went far past it
/// (the most it delivered, its rate, may still creep up); a plateau while nothing delivered
/// since it was first seen went past it. (Its loss cycles may stop agreeing for a while: one
/// cycle in four running on a refilled bucket was measured behind a deep bucket, and a plateau
/// judged only on the latest cycles came and went, with the flag's release restarted each
/// time it went.)
pub(super) fn carried(
    now: Option<Policing>,
    before: Option<Policing>,
    best_clean_bps: f64,
    cfg: &DiagnosisConfig,
) -> Option<Policing> {
    let first_seen = |p: Policing| match before {
        Some(b) if b.sign == p.sign => Policing { best_clean_when_seen: b.best_clean_when_seen, ..p },
        _ => p,
    };
    now.map(first_seen).or_else(|| {
        let p = before?;
        match p.sign {
            PolicerSign::CappedStart => (best_clean_bps <= p.rate_bps * cfg.policer_start_overshoot)
                .then_some(Policing { rate_bps: p.rate_bps.max(best_clean_bps), ..p }),
            PolicerSign::Plateau => {
                let ceiling = p.rate_bps * (1.0 + cfg.policer_rate_tolerance) + 4_000.0;
                (best_clean_bps <= ceiling.max(p.best_clean_when_seen)).then_some(p)
            }
        }
    })
}

/// The policer and how it showed, in words.
pub(super) fn sign_in_words(p: &Policing) -> String {
    match p.sign {
        PolicerSign::Plateau => format!(
            "policed at {}: {} of {} loss cycles delivered that rate (within 1/8), each loss taking {:.0} segments (median) with no queue before it",
            rate_about(p.rate_bps),
            p.at_ceiling,
            p.judged,
            p.burst_segments
        ),
        PolicerSign::CappedStart => format!(
            "policed at {} or more: slow start was cut without a queue by the loss of a large share of one flight, and no delivery rate since went above {}",
            rate_about(p.rate_bps),
            rate(p.rate_bps)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RTT_NS: u64 = 30_000_000;

    /// Episodes after slow start: each `(rate over the cycle before it in Mbit/s, seconds
    /// since the previous, delivery rate before it in Mbit/s, segments it lost)`.
    fn feed(start: Option<EpisodeLoss>, cycles: &[(f64, f64, f64, f64)]) -> Vec<EpisodeLoss> {
        let mut out: Vec<EpisodeLoss> = start.into_iter().collect();
        let (mut ts, mut delivered) = out.last().map_or((1_000_000_000, 1_000_000), |e| (e.ts_ns, e.delivered_bytes));
        for &(mbps, secs, before, lost) in cycles {
            ts += (secs * 1e9) as u64;
            delivered += (mbps * 1e6 / 8.0 * secs) as u64;
            out.push(EpisodeLoss {
                ts_ns: ts,
                delivered_bytes: delivered,
                min_rtt_us: (RTT_NS / 1000) as u32,
                delivery_before_bps: before * 1e6,
                cwnd_before: 30.0,
                lost_segments: lost,
                queued: false,
                slow_start: false,
            });
        }
        out
    }

    fn start(lost: f64, cwnd: f64, queued: bool) -> Option<EpisodeLoss> {
        Some(EpisodeLoss {
            ts_ns: 200_000_000,
            delivered_bytes: 100_000,
            min_rtt_us: 30_000,
            delivery_before_bps: 6.5e6,
            cwnd_before: cwnd,
            lost_segments: lost,
            queued,
            slow_start: true,
        })
    }

    fn cfg() -> DiagnosisConfig {
        DiagnosisConfig::default()
    }

    #[test]
    fn a_deep_bucket_shows_a_plateau_of_burst_losses() {
        // CUBIC's loss cycles behind a 20 Mbit/s policer with a 1.5 s bucket on a 30 ms path
        // (measured): long cycles at 19.0-19.5 Mbit/s, a second loss 0.05-0.09 s after some
        // cuts, 4-35 segments lost each, delivery rates before the losses of 20-32 Mbit/s as
        // a refilled bucket drains.
        let eps = feed(
            start(150.0, 558.0, true),
            &[
                (19.0, 0.58, 22.1, 18.0),
                (19.1, 1.86, 20.6, 5.0),
                (19.4, 2.96, 23.6, 11.0),
                (16.5, 0.09, 31.9, 35.0),
                (19.5, 2.57, 31.9, 8.0),
                (12.9, 0.08, 29.5, 29.0),
                (19.4, 1.69, 29.5, 4.0),
                (19.2, 0.85, 24.7, 14.0),
                (19.3, 1.46, 21.5, 8.0),
                (19.4, 0.95, 23.8, 14.0),
            ],
        );
        let p = policing(&eps, 147e6, &cfg()).expect("policed");
        assert_eq!(p.sign, PolicerSign::Plateau);
        assert!((p.rate_bps / 1e6 - 19.3).abs() < 0.3, "{p:?}");
        assert!(p.burst_segments >= 8.0, "{p:?}");
    }

    #[test]
    fn a_tight_bucket_caps_slow_start_and_every_rate_after() {
        // CUBIC behind a 20 Mbit/s policer with a 10 ms bucket (measured): slow start lost 27
        // of a 38-segment flight, then one or two segments at a time at 8-18 Mbit/s, never
        // faster; its cycles deliver a steady ~6.3 Mbit/s, its own average.
        let befores = [14.2, 17.2, 17.6, 15.3, 12.3, 17.9, 12.6, 11.9, 11.1, 9.2, 9.5, 10.0];
        let cycles: Vec<_> = befores.iter().map(|b| (6.3, 0.45, *b, 1.0)).collect();
        let eps = feed(start(27.0, 38.0, false), &cycles);
        let p = policing(&eps, 17.9e6, &cfg()).expect("policed");
        assert_eq!(p.sign, PolicerSign::CappedStart);
        assert!((p.rate_bps / 1e6 - 17.9).abs() < 0.01, "{p:?}");
        // Without the capped start, single losses at a steady rate are no plateau.
        assert_eq!(policing(&feed(None, &cycles), 17.9e6, &cfg()), None);
    }

    #[test]
    fn two_burst_cycles_at_one_rate_are_a_plateau_forming() {
        let two = feed(None, &[(19.0, 0.58, 22.1, 18.0), (19.1, 1.86, 20.6, 5.0), (19.4, 2.96, 23.6, 11.0)]);
        assert!(plateau_forming(&two, &cfg()));
        assert_eq!(policing(&two, 147e6, &cfg()), None, "two cycles do not tell the rate yet");
        // Bursts at scattered rates (bursty random loss) are not.
        let scattered = feed(None, &[(9.0, 0.5, 9.0, 5.0), (17.0, 0.5, 17.0, 5.0), (6.0, 0.5, 6.0, 5.0)]);
        assert!(!plateau_forming(&scattered, &cfg()));
    }

    #[test]
    fn burst_losses_before_a_second_cycle_may_still_be_a_plateau() {
        // A deep bucket's first drains: the slow start queued at the line, then a cut of 16
        // segments, a second loss 0.05 s after it (the same cut: no cycle), and one more 1.5 s
        // on. One cycle: its rate cannot show yet.
        let early = feed(
            start(150.0, 558.0, true),
            &[(19.0, 0.9, 22.0, 16.0), (5.0, 0.05, 31.0, 14.0), (19.2, 1.5, 24.0, 15.0)],
        );
        assert_eq!(cycles(&early, &cfg()).len(), 1);
        assert!(plateau_forming(&early, &cfg()));
        // Single losses (random loss) before a second cycle say nothing of a policer.
        let single =
            feed(start(1.0, 173.0, false), &[(6.0, 0.9, 8.0, 1.0), (5.0, 0.05, 8.0, 1.0), (7.0, 1.5, 9.0, 2.0)]);
        assert!(!plateau_forming(&single, &cfg()));
        // Nor does a slow start's own overshoot, however large.
        assert!(!plateau_forming(&feed(start(150.0, 558.0, false), &[]), &cfg()));
    }

    #[test]
    fn random_loss_is_not_a_policer() {
        // CUBIC at 1 % random loss (measured): slow start lost 1 of 173 and ran at 63 Mbit/s;
        // later single losses, cycles at 2-9 Mbit/s.
        let one_pct = [3.9, 7.1, 8.8, 6.2, 5.3, 3.3, 3.5, 2.8, 2.6, 2.0, 1.9, 3.1];
        let cycles: Vec<_> = one_pct.iter().map(|r| (*r, 0.2, r * 1.3, 1.0)).collect();
        assert_eq!(policing(&feed(start(1.0, 173.0, false), &cycles), 62.7e6, &cfg()), None);
        // At 0.1 %: cycles at 4-17 Mbit/s, slow start into the bottleneck's queue.
        let tenth = [5.5, 5.1, 4.4, 5.9, 11.1, 13.2, 13.9, 13.7, 16.5, 16.2, 12.9, 10.2];
        let cycles: Vec<_> = tenth.iter().map(|r| (*r, 0.8, r * 1.3, 1.0)).collect();
        assert_eq!(policing(&feed(start(152.0, 567.0, true), &cycles), 151e6, &cfg()), None);
        // Bursty loss (spells losing ~2.5 segments) at scattered rates.
        let cycles: Vec<_> = [9.0, 14.0, 6.0, 11.0, 17.0, 8.0].iter().map(|r| (*r, 0.5, *r, 3.0)).collect();
        assert_eq!(policing(&feed(None, &cycles), 40e6, &cfg()), None);
        // A steady rate with single losses (a Mathis equilibrium) is no plateau either.
        let cycles: Vec<_> = (0..10).map(|_| (6.0, 0.5, 7.0, 1.0)).collect();
        assert_eq!(policing(&feed(None, &cycles), 62.7e6, &cfg()), None);
    }

    #[test]
    fn a_capped_start_needs_a_flow_that_never_went_much_faster() {
        let cycles: Vec<_> = [10.0, 11.0, 9.0, 12.0].iter().map(|r| (*r * 0.7, 0.5, *r, 1.0)).collect();
        assert!(policing(&feed(start(27.0, 38.0, false), &cycles), 12e6, &cfg()).is_some());
        // A heavy start loss, but the flow later delivered far more than at its losses.
        assert_eq!(policing(&feed(start(27.0, 38.0, false), &cycles), 40e6, &cfg()), None);
        // A start that filled a queue is the bottleneck's overshoot, not a policer's, and so is
        // a second overshoot without a queue after it.
        assert_eq!(policing(&feed(start(27.0, 38.0, true), &cycles), 12e6, &cfg()), None);
        let mut two = feed(start(150.0, 560.0, true), &cycles);
        let second = EpisodeLoss { ts_ns: 300_000_000, queued: false, ..start(27.0, 38.0, false).expect("start") };
        two.insert(1, second);
        assert_eq!(policing(&two, 12e6, &cfg()), None);
        two.remove(0);
        assert!(policing(&two, 12e6, &cfg()).is_some(), "the same overshoot first is a capped start");
        // Too small a flight to tell a burst of random losses from a cut.
        assert_eq!(policing(&feed(start(4.0, 12.0, false), &cycles), 12e6, &cfg()), None);
    }

    #[test]
    fn a_start_cut_far_above_the_rate_the_flow_settles_at_is_no_policer() {
        // CUBIC at 0.05 % random loss on an 80 ms path (measured): a start of 127 Mbit/s cut
        // without a queue the smoothed RTT showed, delivery rates of bunched ACKs before its
        // losses at 45-60 Mbit/s, its cycles at 8-14 Mbit/s.
        let cycles: Vec<_> = [9.0, 14.0, 8.5, 12.0, 10.0].iter().map(|r| (*r, 2.0, 50.0, 1.0)).collect();
        assert_eq!(policing(&feed(start(60.0, 200.0, false), &cycles), 127e6, &cfg()), None);
    }

    #[test]
    fn too_few_losses_say_nothing() {
        let eps = feed(start(27.0, 38.0, false), &[(17.0, 0.5, 17.0, 10.0), (17.0, 0.5, 17.5, 10.0)]);
        assert_eq!(policing(&eps, 17.5e6, &cfg()), None);
    }

    #[test]
    fn a_policer_seen_once_holds_until_the_flow_goes_past_it() {
        let p = Policing {
            rate_bps: 18e6,
            sign: PolicerSign::CappedStart,
            at_ceiling: 2,
            judged: 9,
            burst_segments: 1.0,
            best_clean_when_seen: 18e6,
        };
        assert_eq!(carried(None, Some(p), 17e6, &cfg()), Some(p));
        // A capped start's rate is the most the flow delivered: it may creep up, not triple.
        assert_eq!(carried(None, Some(p), 20e6, &cfg()).map(|p| p.rate_bps), Some(20e6));
        assert_eq!(carried(None, Some(p), 60e6, &cfg()), None);
        let plateau = Policing { sign: PolicerSign::Plateau, ..p };
        assert_eq!(carried(None, Some(plateau), 18.5e6, &cfg()), Some(plateau));
        assert_eq!(carried(None, Some(plateau), 25e6, &cfg()), None);
        // A deep bucket's first drain ran at the line rate before the plateau showed: only a
        // rate past both that and the plateau since lets it go.
        let drained = Policing { best_clean_when_seen: 150e6, ..plateau };
        assert_eq!(carried(None, Some(drained), 150e6, &cfg()), Some(drained));
        assert_eq!(carried(None, Some(drained), 160e6, &cfg()), None);
        // Seen again, it keeps the rate the flow had when it was first seen.
        let again = Policing { best_clean_when_seen: 160e6, rate_bps: 19.2e6, ..plateau };
        assert_eq!(carried(Some(again), Some(drained), 160e6, &cfg()).map(|p| p.best_clean_when_seen), Some(150e6));
        let now = Policing { rate_bps: 19e6, ..p };
        assert_eq!(carried(Some(now), Some(p), 25e6, &cfg()), Some(now));
    }

    #[test]
    fn a_capped_starts_rate_is_a_floor_a_flow_must_come_near_to_be_left_alone() {
        let floor = Policing {
            rate_bps: 17.6e6,
            sign: PolicerSign::CappedStart,
            at_ceiling: 6,
            judged: 14,
            burst_segments: 1.0,
            best_clean_when_seen: 17.6e6,
        };
        // As measured behind the 10 ms bucket, which passes 19.3 Mbit/s (BBR gets 19).
        assert!(floor.leaves_unused(13.9e6, &cfg()));
        assert!(!floor.leaves_unused(16.0e6, &cfg()));
        let plateau = Policing { sign: PolicerSign::Plateau, ..floor };
        assert!(!plateau.leaves_unused(13.9e6, &cfg()));
        assert!(plateau.leaves_unused(12.0e6, &cfg()));
    }

    /// A window-limited CUBIC flow on a 30 ms path, one sample per 100 ms: slow start for the
    /// first second at `start_mbps` (losing `start_lost` of a 38-segment flight at tick 5, no
    /// queue), then `avg_mbps` of goodput with a loss of `lost` segments every `every` ticks,
    /// the delivery rate before each at `peak_mbps(tick)`.
    fn cubic_feed(
        start_mbps: u64,
        start_lost: u64,
        avg_mbps: f64,
        every: u64,
        lost: u64,
        peak_mbps: impl Fn(u64) -> f64,
    ) -> impl Fn(u64) -> Vec<crate::analysis::sample::Sample> {
        use crate::analysis::diagnosis::test_feed::loss_after;
        use crate::analysis::flow_table::tests::sample;
        move |tick| {
            let mut s = sample(1, tick * 100);
            s.cc = "cubic".into();
            let in_start = tick < 10;
            let start_bytes = start_mbps * 1_000_000 / 8;
            s.bytes_acked = if in_start {
                start_bytes * tick / 10
            } else {
                start_bytes + (avg_mbps * 1e6 / 8.0 * (tick - 10) as f64 / 10.0) as u64
            };
            let losses_before = if tick > 10 { (tick - 11) / every + 1 } else { 0 };
            let retrans_segs = if tick > 5 { start_lost } else { 0 } + losses_before * lost;
            s.bytes_retrans = retrans_segs * 1448;
            s.bytes_sent = s.bytes_acked + s.bytes_retrans;
            s.total_retrans = retrans_segs as u32;
            s.busy_us = tick * 100_000;
            s.srtt_us = 30_500;
            s.min_rtt_us = 30_000;
            s.snd_ssthresh = if tick <= 5 { u32::MAX >> 1 } else { 40 };
            s.delivery_rate_bps = if in_start { start_mbps * 1_000_000 } else { (peak_mbps(tick) * 1e6) as u64 };
            s.snd_cwnd = if tick <= 5 { 38 } else { 40 };
            s.packets_out = s.snd_cwnd;
            s.cwnd_limited = true;
            let mut out = vec![s.clone()];
            let (loses, n) = match tick {
                5 => (true, start_lost),
                t if t >= 10 && (t - 10) % every == 0 => (true, lost),
                _ => (false, 0),
            };
            if loses {
                out.extend(loss_after(&s, n));
            }
            out
        }
    }

    /// A CUBIC flow on a 30 ms path, one sample per 100 ms: slow start for the first second
    /// at 100 Mbit/s without a queue, then loss cycles, each `(ticks long, Mbit/s delivered
    /// over it, segments its loss takes, delivery rate before the loss in Mbit/s)`, the
    /// loss at the cycle's end.
    fn cycles_feed(cycles: Vec<(u64, f64, u64, f64)>) -> impl Fn(u64) -> Vec<crate::analysis::sample::Sample> {
        use crate::analysis::diagnosis::test_feed::loss_after;
        use crate::analysis::flow_table::tests::sample;
        // Where each cycle ends (its loss), and the bytes delivered by then.
        let mut ends = Vec::new();
        let (mut tick, mut acked) = (10u64, 100_000_000 / 8u64);
        for &(ticks, mbps, lost, peak) in &cycles {
            ends.push((tick, acked, mbps, ticks, lost, peak));
            tick += ticks;
            acked += (mbps * 1e6 / 8.0 * ticks as f64 / 10.0) as u64;
        }
        move |tick| {
            let mut s = sample(1, tick * 100);
            s.cc = "cubic".into();
            // The cycle under way, and the losses before this tick.
            let done: Vec<_> = ends.iter().filter(|e| e.0 + e.3 <= tick).collect();
            let current = ends.iter().find(|e| e.0 <= tick && tick < e.0 + e.3);
            s.bytes_acked = match current {
                None if tick < 10 => 100_000_000 / 8 * tick / 10,
                None => done.last().map_or(0, |e| e.1 + (e.2 * 1e6 / 8.0 * e.3 as f64 / 10.0) as u64),
                Some(e) => e.1 + (e.2 * 1e6 / 8.0 * (tick - e.0) as f64 / 10.0) as u64,
            };
            let retrans_segs: u64 = done.iter().map(|e| e.4).sum();
            s.bytes_retrans = retrans_segs * 1448;
            s.bytes_sent = s.bytes_acked + s.bytes_retrans;
            s.total_retrans = retrans_segs as u32;
            s.busy_us = tick * 100_000;
            s.srtt_us = 30_500;
            s.min_rtt_us = 30_000;
            s.snd_ssthresh = if tick < 10 { u32::MAX >> 1 } else { 40 };
            s.delivery_rate_bps = match current {
                None if tick < 10 => 100_000_000,
                Some(e) => (e.5 * 1e6) as u64,
                None => 1_000_000,
            };
            s.snd_cwnd = 60;
            s.packets_out = s.snd_cwnd;
            s.cwnd_limited = true;
            let mut out = vec![s.clone()];
            if let Some(e) = ends.iter().find(|e| e.0 + e.3 == tick + 1) {
                out.extend(loss_after(&s, e.4));
            }
            out
        }
    }

    #[test]
    fn a_flow_flagged_before_its_policer_showed_is_unflagged_once_it_gets_most_of_the_rate() {
        use crate::analysis::diagnosis::test_feed::run_feed;
        use crate::analysis::diagnosis::LimitedBy;
        // Random single losses first (flagged: its loss response holds it at 6-10 Mbit/s), then
        // a deep bucket: cycles of 1.2 s at 19.3 Mbit/s, ten segments per loss, one in four
        // cycles delivering 24 Mbit/s (the bucket refilled meanwhile), as measured behind a
        // 20 Mbit/s policer.
        let mut cycles: Vec<(u64, f64, u64, f64)> = (0..40u32).map(|i| (5, 6.0 + f64::from(i % 5), 1, 9.0)).collect();
        cycles.extend((0..40u32).map(|i| if i % 4 == 3 { (12, 24.0, 10, 30.0) } else { (12, 19.3, 10, 22.0) }));
        let (d, seen) = run_feed(70, cycles_feed(cycles));
        let text = d.verdict(1).map(|v| v.text.clone()).unwrap_or_default();
        let trail = || format!("{seen:?} {text}");
        // Flagged while the losses looked random.
        let first_flag = seen.iter().position(|(f, _)| *f).unwrap_or_else(|| panic!("never flagged: {}", trail()));
        assert!(first_flag < 20, "{}", trail());
        assert_eq!(seen[first_flag].1, LimitedBy::CongestionWindow, "{}", trail());
        // Once the verdict says policer, the flow gets most of the policed rate: never flagged
        // from then on, whatever it was called before.
        let policed = seen.iter().position(|(_, l)| *l == LimitedBy::Policer).unwrap_or_else(|| panic!("{}", trail()));
        assert!(seen[policed..].iter().all(|(f, _)| !f), "flagged after the policer showed: {}", trail());
        assert!(
            seen[policed..].iter().filter(|(_, l)| *l == LimitedBy::Policer).count() * 10 >= (seen.len() - policed) * 9,
            "{}",
            trail()
        );
        let v = d.verdict(1).expect("verdict");
        assert!(v.text.contains("already gets most of the policed rate"), "{}", v.text);
    }

    #[test]
    fn a_deep_bucket_flow_is_named_and_not_flagged() {
        use crate::analysis::diagnosis::test_feed::run_feed;
        use crate::analysis::diagnosis::LimitedBy;
        // Slow start drains the bucket at 150 Mbit/s (and queues at the line), then 19.3 Mbit/s
        // with ten segments lost every 1.2 s at a 22 Mbit/s peak.
        let (d, seen) = run_feed(20, cubic_feed(150, 0, 19.3, 12, 10, |_| 22.0));
        let v = d.verdict(1).expect("verdict");
        assert!(seen.iter().all(|(f, _)| !f), "{seen:?} {}", v.text);
        assert_eq!(v.limited_by, LimitedBy::Policer, "{}", v.text);
        let p = v.evidence.as_ref().and_then(|e| e.policer.clone()).expect("policer evidence");
        assert_eq!(p.sign, PolicerSign::Plateau);
        assert!((p.rate_bps / 1e6 - 19.3).abs() < 0.5, "{p:?}");
        assert!(v.text.contains("policed at about 19 Mbit/s"), "{}", v.text);
        assert!(v.text.contains("already gets most of the policed rate"), "{}", v.text);
    }

    #[test]
    fn a_deep_bucket_whose_cuts_lose_twice_is_not_flagged_before_its_plateau_shows() {
        use crate::analysis::diagnosis::test_feed::run_feed;
        use crate::analysis::diagnosis::LimitedBy;
        // Behind a 1.5 s bucket each cut is followed 0.1 s later by a second burst (the same
        // cut: no loss cycle), so loss cycles come half as often as burst losses.
        let cycles: Vec<(u64, f64, u64, f64)> =
            (0..40).flat_map(|_| [(15, 19.3, 16, 24.0), (1, 19.3, 14, 30.0)]).collect();
        let (d, seen) = run_feed(60, cycles_feed(cycles));
        let v = d.verdict(1).expect("verdict");
        assert!(seen.iter().all(|(f, _)| !f), "{seen:?} {}", v.text);
        assert_eq!(v.limited_by, LimitedBy::Policer, "{seen:?} {}", v.text);
    }

    #[test]
    fn a_tight_bucket_flow_is_flagged_up_to_the_rate_it_showed() {
        use crate::analysis::diagnosis::test_feed::run_feed;
        use crate::analysis::diagnosis::LimitedBy;
        // Slow start at 6 Mbit/s cut by the loss of 27 of 38 segments; then 8 Mbit/s with one
        // segment lost every 0.5 s, the sawtooth peaking at 9-15 Mbit/s before the losses.
        let (d, seen) = run_feed(20, cubic_feed(6, 27, 8.0, 5, 1, |t| 9.0 + (t % 7) as f64));
        let v = d.verdict(1).expect("verdict");
        assert!(v.flagged, "{seen:?} {}", v.text);
        assert_eq!(v.limited_by, LimitedBy::Policer, "{}", v.text);
        let e = v.evidence.as_ref().expect("evidence");
        let p = e.policer.as_ref().expect("policer evidence");
        assert_eq!(p.sign, PolicerSign::CappedStart);
        assert!((p.rate_bps / 1e6 - 15.0).abs() < 0.01, "{p:?}");
        let said = e.goodput_bps + e.available_bps.expect("available");
        assert!(said <= p.rate_bps * 1.001, "{said} beyond the policed {}", p.rate_bps);
        assert!(v.text.contains("policed at about 15 Mbit/s or more"), "{}", v.text);
        assert!(v.text.contains("no more than the policer passes"), "{}", v.text);
    }

    /// The tight-bucket feed with srtt at slow start's loss `srtt_queue_us` above the path's
    /// RTT and RACK's RTT `rack_queue_us` above it (`None`: a kernel or recording without it).
    fn start_seen_by_rack(
        srtt_queue_us: u32,
        rack_queue_us: Option<u32>,
    ) -> impl Fn(u64) -> Vec<crate::analysis::sample::Sample> {
        let feed = cubic_feed(6, 27, 8.0, 5, 1, |t| 9.0 + (t % 7) as f64);
        move |tick| {
            let mut samples = feed(tick);
            for s in samples.iter_mut().filter(|_| tick == 5) {
                s.srtt_us = s.min_rtt_us + srtt_queue_us;
                s.rack_rtt_us = rack_queue_us.map_or(0, |q| s.min_rtt_us + q);
            }
            samples
        }
    }

    #[test]
    fn slow_starts_loss_is_judged_by_racks_rtt_where_srtt_sits_on_the_threshold() {
        use crate::analysis::diagnosis::test_feed::run_feed;
        let sign = |srtt_q, rack_q| {
            let (d, _) = run_feed(20, start_seen_by_rack(srtt_q, rack_q));
            let v = d.verdict(1).expect("verdict");
            v.evidence.as_ref().and_then(|e| e.policer.as_ref()).map(|p| p.sign)
        };
        // The measured pair at 30 ms: srtt 5.0 ms over for both; RACK 7.3 ms on a drop-tail
        // queue (no policer), 0.1 ms behind the tight bucket (capped start).
        assert_eq!(sign(5_000, Some(7_300)), None);
        assert_eq!(sign(5_000, Some(100)), Some(PolicerSign::CappedStart));
        // Without RACK's RTT srtt decides, as before.
        assert_eq!(sign(1_000, None), Some(PolicerSign::CappedStart));
        assert_eq!(sign(7_300, None), None);
    }
}
