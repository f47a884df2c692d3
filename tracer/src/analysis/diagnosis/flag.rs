//! What is flagged and why: the condition under which a heavy loss-based flow is held back by
//! its loss response rather than by the path, the reason it is not when it is not, and the
//! signals that decided its class, in words.

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::losses::LossView;
use crate::analysis::diagnosis::policer;
use crate::analysis::diagnosis::response::is_loss_based;
use crate::analysis::diagnosis::verdict::{Evidence, LossNote, SetBy};
use crate::analysis::diagnosis::window::Window;
use crate::analysis::flow_table::Flow;
use crate::analysis::units::rate;

/// The signals behind `limited_by`, in words.
pub(super) fn decided_by(
    w: &Window,
    lv: &LossView,
    cfg: &DiagnosisConfig,
    limited: LimitedBy,
    standing: bool,
) -> String {
    let episodes = std::fmt::from_fn(|f| {
        if lv.episodes > 0 {
            write!(
                f,
                "{} loss episodes in {:.0} s: {} with the RTT within {:.1} ms of min_rtt at the loss, {} above (median queue {:.1} ms)",
                lv.episodes,
                lv.span_secs,
                lv.clean,
                lv.threshold_us / 1000.0,
                lv.queued,
                lv.median_queue_us / 1000.0
            )?;
        } else {
            f.write_str("no loss episodes after slow start")?;
        }
        if lv.receiver_held > 0 {
            write!(
                f,
                "; {} more while the receiver left data unread (its window fell), their queue not judged",
                lv.receiver_held
            )?;
        }
        Ok(())
    });
    match limited {
        LimitedBy::Path if standing => format!(
            "standing queue: mean srtt {:.1} ms vs min_rtt {:.1} ms (threshold {:.1} ms); {episodes}",
            w.reading_srtt_us.unwrap_or(w.mean_srtt_us) / 1000.0,
            w.min_rtt_us / 1000.0,
            (w.min_rtt_us * (1.0 + cfg.standing_queue_ratio) + cfg.standing_queue_slack_us) / 1000.0
        ),
        LimitedBy::Path if lv.queued >= 2 && lv.queued_share() >= cfg.rate_based_queued_share => {
            format!("queue before the losses: {episodes}")
        }
        LimitedBy::Path => format!(
            "goodput {} is at the {} the path delivered without queueing; {episodes}",
            rate(w.goodput_bps),
            rate(lv.clean_delivery_bps)
        ),
        LimitedBy::Policer => match lv.policing {
            Some(p) => format!("{}; {episodes}", policer::sign_in_words(&p)),
            None => format!("a policer seen before, not in the latest losses; {episodes}"),
        },
        LimitedBy::CongestionWindow | LimitedBy::Pacing => {
            let paused = std::fmt::from_fn(|f| {
                match w.rwnd_closed_share {
                s if s >= 0.05 => write!(f, "; its receiver closed its window for {:.0}% of the time (reading something else), judged on the rest", s * 100.0),
                _ => Ok(()),
            }
            });
            format!("full cwnd in {:.0}% of samples, no standing queue; {episodes}{paused}", w.cwnd_full_share * 100.0)
        }
        _ => String::new(),
    }
}

/// Why a policed flow is not flagged: it gets most of what the policer passes. This one clears
/// a flag at once (see `hysteresis`): it holds whatever the flow was called before.
pub(super) const GETS_POLICED_RATE: &str =
    "it already gets most of the policed rate: another algorithm cannot get past the policer";

/// Why a window does not meet the flag: not yet enough losses for any reading of them.
pub(super) const TOO_FEW_LOSSES: &str = "too few losses to judge";

/// The flag condition; returns why not, for the verdict text.
pub(super) fn flag_condition(
    flow: &Flow,
    w: &Window,
    lv: &LossView,
    ev: &Evidence,
    limited: LimitedBy,
    cfg: &DiagnosisConfig,
) -> Result<(), &'static str> {
    let total = flow.latest.bytes_acked + flow.latest.bytes_received;
    if limited == LimitedBy::SendBuffer {
        return send_buffer_condition(total, w, ev, cfg);
    }
    if !is_loss_based(&flow.latest.cc) {
        return Err("congestion control is not loss-based");
    }
    if limited == LimitedBy::Path {
        return Err("the flow fills the path: its losses are the bottleneck's");
    }
    // Switching helps a policed flow only up to the policer's rate: flag it only when much of
    // that rate is left unused (also while the class shown is still the one before the policer
    // showed: a new class waits for its confirmations, the flag must not run ahead of it).
    if let Some(p) = lv.policing {
        if !p.leaves_unused(w.goodput_bps, cfg) {
            return Err(GETS_POLICED_RATE);
        }
    }
    if limited == LimitedBy::Policer && lv.policing.is_none() {
        return Err("the latest losses no longer show the policer's rate");
    }
    if !matches!(limited, LimitedBy::Policer | LimitedBy::CongestionWindow) {
        return Err("not congestion-window-limited");
    }
    // Heavy: it moved real data and either moves it fast or wants to (its cwnd is always full,
    // which is exactly what a flow crushed to a few Mbit/s by loss looks like).
    let wants_more = w.cwnd_full_share >= cfg.wants_more_cwnd_full_share;
    if !cfg.is_heavy(total, w.goodput_bps, wants_more) {
        return Err("not a heavy flow");
    }
    if ev.note == Some(LossNote::Reordering) {
        return Err("most of its retransmissions were spurious");
    }
    if lv.episodes < cfg.min_loss_episodes || lv.loss_ratio < cfg.min_loss_ratio {
        return Err(TOO_FEW_LOSSES);
    }
    if lv.clean_share() < cfg.clean_episode_share {
        return Err("srtt rose above min_rtt before too many of the losses: they look congestive");
    }
    // Burst losses at one rate are how a policer cuts; until a third loss cycle tells its
    // rate, what switching would gain is unknown.
    if lv.policing.is_none() && lv.plateau_forming {
        return Err(
            "its losses come in bursts at one rate without a queue, as a policer's do: its rate does not show yet",
        );
    }
    // Its rate is the loss response's, or at least not the path's: the path showed clearly
    // more without queueing. (After a long slow-start overshoot CUBIC drains a huge cwnd for
    // seconds, above its steady-state response, while its losses already show no queue.)
    if w.goodput_bps > cfg.response_slack * ev.response_bps && ev.available_bps.is_none() {
        return Err("goodput is above what its loss response allows: the losses do not hold it back");
    }
    Ok(())
}

/// A heavy flow held by its send buffer is flagged when the fix can raise that buffer: its
/// autotuning reached the namespace's `tcp_wmem` max, short of what the flow needs. One whose
/// application set the buffer itself is named in the verdict, not flagged: nothing cctrace
/// may change would help it.
fn send_buffer_condition(total: u64, w: &Window, ev: &Evidence, cfg: &DiagnosisConfig) -> Result<(), &'static str> {
    if !cfg.is_heavy(total, w.goodput_bps, false) {
        return Err("not a heavy flow");
    }
    match ev.buffers.as_ref() {
        Some(b) if b.raise_wmem.is_some() => Ok(()),
        Some(b) if b.sndbuf_set_by == SetBy::Application => {
            Err("the application set its own send buffer (SO_SNDBUF): cctrace changes nothing for it")
        }
        _ => Err("its send buffer has not reached the namespace's maximum"),
    }
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnosis::mathis_bps;
    use crate::analysis::diagnosis::test_feed::{bulk, episodic, run, run_feed};
    use crate::analysis::diagnosis::LimitedBy;

    #[test]
    fn random_loss_without_queue_is_flagged_within_seconds_and_stays() {
        // 16 Mbit/s, a loss every 0.7 s (~0.1 % of segments), srtt 0.5 ms above min_rtt.
        let (d, seen) = run_feed(30, episodic("cubic", 16_000_000, 7, 0, 0));
        let first = seen.iter().position(|(f, _)| *f).expect("flagged");
        assert!(first <= 8, "{seen:?}");
        assert!(seen[first..].iter().all(|(f, l)| *f && *l == LimitedBy::CongestionWindow), "{seen:?}");
        let v = d.verdict(1).expect("verdict");
        let e = v.evidence.as_ref().expect("evidence");
        assert!(e.loss_episodes >= 3 && e.clean_episodes == e.loss_episodes, "{e:?}");
        assert_eq!(e.slow_start_episodes, 0);
        assert!((e.loss_event_rate - 0.001).abs() < 0.0003, "{e:?}");
        assert!(e.goodput_bps <= e.response_bps * 2.0);
        // Slow start showed 100 Mbit/s without queueing: that much is at stake.
        assert_eq!(e.clean_delivery_bps, 100e6);
        assert!(e.available_bps.is_some_and(|a| (a - 84e6).abs() < 1e6), "{e:?}");
        assert!(v.text.contains("Mathis bound") && v.text.contains("at least 84.0 Mbit/s more"), "{}", v.text);
        assert!(v.text.contains("episodes over"), "{}", v.text);
    }

    #[test]
    fn a_switch_to_bbr_forgets_cubic_and_never_calls_bbr_loss_based() {
        // The fix applied live at 20 s: the same losses go on, now under BBR.
        let cubic = episodic("cubic", 16_000_000, 7, 0, 0);
        let (d, seen) = run_feed(40, |tick| {
            let mut samples = cubic(tick);
            if tick >= 200 {
                samples.iter_mut().for_each(|s| s.cc = "bbr".into());
            }
            samples
        });
        assert!(seen[19].0, "flagged under cubic: {seen:?}");
        assert!(seen[21..].iter().all(|(f, _)| !*f), "the flag is cubic's, not bbr's: {seen:?}");
        let v = d.verdict(1).expect("verdict");
        assert!(!v.text.contains("bbr lost packets"), "{}", v.text);
        let change = v.changed.as_ref().expect("the switch is the change");
        assert_eq!(change.cc_from.as_deref(), Some("cubic"), "{change:?}");
        assert!(change.was_flagged && (change.at_s - 20.0).abs() < 1.1, "{change:?}");
        assert!(v.text.contains("Its congestion control was cubic until 20 s"), "{}", v.text);
        // Deep mode's twin of the same algorithm is no switch: the flag stays.
        let (_, seen) = run_feed(40, |tick| {
            let mut samples = cubic(tick);
            if tick >= 200 {
                samples.iter_mut().for_each(|s| s.cc = "cct_cubic".into());
            }
            samples
        });
        assert!(seen[19..].iter().all(|(f, _)| *f), "the twin keeps cubic's flag: {seen:?}");
    }

    #[test]
    fn reno_at_a_loss_every_few_seconds_is_flagged() {
        // 80 ms-like sparsity: a loss every 3 s, so a 5 s window sees one or two.
        let (_, seen) = run_feed(30, episodic("reno", 6_000_000, 30, 0, 1));
        let first = seen.iter().position(|(f, _)| *f).expect("flagged");
        assert!(first <= 15, "{seen:?}");
        assert!(seen[first..].iter().all(|(f, _)| *f), "{seen:?}");
    }

    #[test]
    fn one_noisy_rtt_does_not_unflag() {
        // Every fifth loss comes with a jitter spike of 6 ms: still a clear majority.
        let feed = episodic("cubic", 16_000_000, 7, 0, 0);
        let (_, seen) = run_feed(30, move |tick| {
            let mut out = feed(tick);
            if tick >= 10 && (tick - 10) % 35 == 0 {
                if let Some(l) = out.get_mut(1) {
                    l.srtt_us = 36_000;
                }
            }
            out
        });
        let first = seen.iter().position(|(f, _)| *f).expect("flagged");
        assert!(seen[first..].iter().all(|(f, _)| *f), "{seen:?}");
    }

    #[test]
    fn cubic_bulk_on_random_loss_is_flagged_with_evidence_and_fix() {
        let (d, _) = run("cubic", 10, bulk(4_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert!(v.flagged, "{v:?}");
        assert_eq!(v.limited_by, LimitedBy::CongestionWindow);
        let e = v.evidence.as_ref().expect("evidence");
        assert!((e.loss_ratio - 0.02).abs() < 0.001);
        assert!((e.mathis_bps - mathis_bps(1448, 0.031, e.loss_event_rate)).abs() < 1.0);
        assert!(v.text.contains("Mathis bound"), "{}", v.text);
        assert!(
            v.fix.iter().any(|c| c == "nsenter --net=/proc/77/ns/net sysctl -w net.ipv4.tcp_congestion_control=bbr"),
            "{:?}",
            v.fix
        );
        assert!(v.fix.iter().any(|c| c.contains("roll back") && c.contains("tcp_congestion_control=cubic")));
        assert!(v.fix.iter().any(|c| c.contains("/etc/sysctl.d/")));
    }

    #[test]
    fn bbr_is_never_flagged() {
        let (d, _) = run("bbr", 10, bulk(40_000_000, 0.02, 31_000));
        let v = d.verdict(1).expect("verdict");
        assert!(!v.flagged);
    }

    #[test]
    fn one_loss_burst_is_not_sustained_loss() {
        // A slow-start overshoot: 3 % of the first second's bytes retransmitted, then none.
        let (d, _) = run("cubic", 10, |tick, s| {
            bulk(40_000_000, 0.0, 31_000)(tick, s);
            s.bytes_retrans = if tick >= 40 { 150_000 } else { 0 };
            s.total_retrans = if tick >= 40 { 100 } else { 0 };
        });
        let v = d.verdict(1).expect("verdict");
        assert!(!v.flagged, "{v:?}");
    }

    #[test]
    fn no_loss_no_flag() {
        let (d, _) = run("cubic", 10, bulk(100_000_000, 0.0, 31_000));
        assert!(!d.verdict(1).expect("verdict").flagged);
    }
}
