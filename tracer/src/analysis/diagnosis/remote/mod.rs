//! The receiving end's verdict on a flow's remote sender: is its loss-based congestion control
//! holding the download back on losses that are not congestion? From the receiving socket alone
//! (nothing of the sending socket is read, even where it is on this host):
//! - `view`: what the receiving flow shows of its sender: rate, window, losses (the holes they
//!   leave and their filling), the queue at each, the sender's rate around each, its response;
//! - `classify`: what holds the sender back, and the flag condition;
//! - `evidence`: the numbers the front ends see, and the commands advised for the sender's host;
//! - `words`: the text.
//!
//! A flow whose sender is a socket of this host keeps that socket's own verdict; the receiving
//! end's is still made (its evidence says what it would have been), so the two can be checked
//! against each other. docs/flagging.md has the method and its limits.

mod classify;
mod evidence;
mod view;
mod words;

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::hysteresis::Hysteresis;
use crate::analysis::diagnosis::limits::LimitedBy;
use crate::analysis::diagnosis::verdict::{Evidence, Verdict};
use crate::analysis::environment::Environment;
use crate::analysis::flow_table::Flow;

/// What the diagnoser keeps per receiving flow: the receiving end's own class and flag
/// hysteresis, and the class it showed.
#[derive(Clone, Debug, Default)]
pub(super) struct RemoteMemory {
    hysteresis: Hysteresis,
    shown: Option<LimitedBy>,
}

/// The verdict of `flow`, a socket that receives, as its receiving end sees its sender;
/// `sender_on_host` is the sending socket's cookie when it is on this host. `window_secs` is
/// the judging window's length. `None` before the flow tracked what it receives, and for a
/// flow whose segments were not counted (classic hooks, a recording made before cctrace counted
/// them): it stays `receiving`, as before.
pub(super) fn judge(
    flow: &Flow,
    mem: &mut RemoteMemory,
    cfg: &DiagnosisConfig,
    env: &Environment,
    window_secs: f64,
    now_ns: u64,
    sender_on_host: Option<u64>,
) -> Option<Verdict> {
    if !flow.latest.receive.counted {
        return None;
    }
    let v = view::remote_view(flow, window_secs, cfg, now_ns)?;
    let raw = classify::classify(&v, cfg);
    let limited = mem.hysteresis.limited_by(mem.shown.filter(|l| *l != LimitedBy::Receiving), raw, cfg);
    mem.shown = Some(limited);
    let condition = classify::flag_condition(flow, &v, limited, cfg);
    let flagged = mem.hysteresis.flag(condition.is_ok(), cfg);
    let decided_by = words::decided_by(&v, limited, cfg);
    let ev = evidence::remote_evidence(flow, &v, limited, flagged, condition, sender_on_host, decided_by, cfg, env);
    let here = sender_on_host.is_some();
    let mut text = String::new();
    if here {
        words::write_sender_here(&mut text, &ev);
    } else if flagged {
        words::write_flagged(&mut text, flow, &v, &ev);
    } else {
        words::write_unflagged(&mut text, flow, &v, &ev, limited);
    }
    let evidence = Evidence::of_remote(&ev);
    Some(Verdict {
        limited_by: if here { LimitedBy::Receiving } else { limited },
        flagged: flagged && !here,
        text,
        evidence: Some(Box::new(Evidence { remote_sender: Some(Box::new(ev)), ..evidence })),
        fix: Vec::new(),
        relayed_by: None,
        tunnel: None,
        changed: None,
    })
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnosis::test_feed::run_feed;
    use crate::analysis::diagnosis::LimitedBy;
    use crate::analysis::flow_table::tests::sample;
    use crate::analysis::sample::{Sample, SampleReason};

    /// A download on a 30 ms path (one-way 15 ms), as its receiving socket's samples show it:
    /// `bps` arriving, a loss every `loss_every` ticks after the first second with the
    /// sender's rate after it `cut` of what it was before, the one-way delay `queue_ms` above
    /// its floor at each loss and `base_queue_ms` between, the window `rcv_wnd` advertised and
    /// the sender idle `idle_share` of the time.
    #[derive(Clone, Copy)]
    struct Download {
        bps: u64,
        loss_every: u64,
        cut: f64,
        queue_ms: u32,
        base_queue_ms: u32,
        rcv_wnd: u32,
        idle_share: f64,
        rcvbuf_locked: bool,
    }

    const CUBIC_LIKE: Download = Download {
        bps: 16_000_000,
        loss_every: 7,
        cut: 0.7,
        queue_ms: 0,
        base_queue_ms: 0,
        rcv_wnd: 4 << 20,
        idle_share: 0.0,
        rcvbuf_locked: false,
    };

    fn feed(d: Download) -> impl Fn(u64) -> Vec<Sample> {
        move |tick| {
            let ms = tick * 100;
            let mut s = sample(1, ms);
            s.cc = "bbr".into();
            s.bytes_received = d.bps / 8 * tick / 10;
            s.bytes_acked = 1;
            s.bytes_sent = 1;
            s.min_rtt_us = 30_000;
            s.srtt_us = 30_000;
            s.rcvbuf_locked = d.rcvbuf_locked;
            s.rcvbuf = 2 * d.rcv_wnd;
            let r = &mut s.receive;
            r.counted = true;
            r.rcv_mss = 1448;
            r.rcv_wnd = d.rcv_wnd;
            // The queue builds after the first second (a flow starts on an empty one).
            let base_queue_ms = if tick < 10 { 0 } else { d.base_queue_ms };
            r.rcv_rtt_us = 30_000 + base_queue_ms * 1000;
            r.data_segs_in = (s.bytes_received / 1448) as u32;
            // The sender's clock is 1000 s ahead; a segment is stamped 15 ms and the queue
            // before it arrives.
            let stamp = |at_ms: u64, queue: u32| (1_000_000 + at_ms - 15 - u64::from(queue)) as u32;
            r.seg_tsval = stamp(ms, base_queue_ms);
            r.idle_us = (ms as f64 * 1000.0 * d.idle_share) as u64;
            let losses = if tick > 10 { (tick - 11) / d.loss_every + 1 } else { 0 } as u32;
            r.holes = losses;
            r.loss_holes = losses;
            r.hole_bytes = u64::from(losses) * 1448;
            r.below = losses;
            r.episodes = losses;
            if losses > 0 {
                let at = 1_100 + u64::from(losses - 1) * d.loss_every * 100;
                r.episode_ns = (at - 40) * 1_000_000;
                r.episode_tsval = stamp(at - 40, d.queue_ms);
            }
            // Each episode's rates are measured some 70 ms after it, and reach the next sample.
            r.measured = losses;
            let per_rtt = (d.bps / 8 * 30 / 1000) as u32;
            r.before_bytes = per_rtt;
            r.before_us = 30_000;
            r.after_bytes = (f64::from(per_rtt) * d.cut) as u32;
            r.after_us = 30_000;
            let mut out = vec![s.clone()];
            if losses > 0 && tick > 10 && (tick - 11) % d.loss_every == 0 {
                // The episode's own sample, as the kernel sends it when the measurement ends.
                let mut e = s;
                e.ts_ns += 1_000_000;
                e.reason = SampleReason::ReceiveEpisode;
                out.push(e);
            }
            out
        }
    }

    fn judged(d: Download) -> (crate::analysis::diagnosis::Verdict, Vec<(bool, LimitedBy)>) {
        let (diag, seen) = run_feed(20, feed(d));
        (diag.verdict(1).expect("verdict").clone(), seen)
    }

    #[test]
    fn a_loss_based_sender_cutting_at_random_losses_is_flagged_from_the_receiving_end() {
        let (v, seen) = judged(CUBIC_LIKE);
        assert!(v.flagged, "{}", v.text);
        assert_eq!(v.limited_by, LimitedBy::CongestionWindow);
        let first = seen.iter().position(|(f, _)| *f).expect("flagged");
        assert!(first <= 8, "flagged within 8 s: {seen:?}");
        assert!(seen[first..].iter().all(|(f, _)| *f), "and stays: {seen:?}");
        let e = v.evidence.as_ref().expect("evidence");
        let r = e.remote_sender.as_ref().expect("the receiving end's evidence");
        assert!((r.median_cut.expect("cuts") - 0.7).abs() < 0.01, "{r:?}");
        assert!(r.queue_at_loss_ms < 1.0 && r.clean_episodes == r.loss_episodes, "{r:?}");
        // One loss in 967 segments at 30 ms: Mathis about 14.7 Mbit/s, the goodput 16.
        assert!((r.mathis_bps / 1e6 - 14.7).abs() < 1.5, "{r:?}");
        assert!(r.advice.iter().any(|c| c == "sysctl -w net.ipv4.tcp_congestion_control=bbr"), "{:?}", r.advice);
        assert!(v.fix.is_empty(), "nothing to change on this host: {:?}", v.fix);
        assert_eq!(e.goodput_bps, r.goodput_bps, "the figures every front end reads are the receiving end's");
        for words in ["From this receiving end", "Mathis bound", "On the sender's host", "198.18.0.2:5201"] {
            assert!(v.text.contains(words), "{words}: {}", v.text);
        }
    }

    #[test]
    fn a_sender_that_does_not_cut_at_its_losses_is_not_flagged() {
        // Without a queue nothing but its application holds it; with one now and then (BBR
        // probing into a full bottleneck), the path.
        let (v, seen) = judged(Download { cut: 1.0, ..CUBIC_LIKE });
        assert!(seen.iter().all(|(f, _)| !f), "{seen:?}: {}", v.text);
        assert_eq!(v.limited_by, LimitedBy::Application, "{}", v.text);
        let (v, seen) = judged(Download { cut: 1.0, queue_ms: 8, ..CUBIC_LIKE });
        assert!(seen.iter().all(|(f, _)| !f), "{seen:?}: {}", v.text);
        assert_eq!(v.limited_by, LimitedBy::Path, "{}", v.text);
    }

    #[test]
    fn a_queue_before_the_losses_or_a_standing_one_is_the_path() {
        for d in [Download { queue_ms: 8, ..CUBIC_LIKE }, Download { base_queue_ms: 20, queue_ms: 25, ..CUBIC_LIKE }] {
            let (v, seen) = judged(d);
            assert!(seen.iter().all(|(f, _)| !f), "{seen:?}: {}", v.text);
            assert_eq!(v.limited_by, LimitedBy::Path, "{}", v.text);
        }
    }

    #[test]
    fn this_hosts_window_or_a_sender_with_little_to_send_is_named_not_flagged() {
        // 64 KiB advertised on a 30 ms path carries 17.5 Mbit/s: the sender sends it all.
        let windowed = Download { bps: 17_000_000, rcv_wnd: 64 * 1024, rcvbuf_locked: true, ..CUBIC_LIKE };
        let (v, seen) = judged(windowed);
        assert!(seen.iter().all(|(f, _)| !f), "{seen:?}");
        assert_eq!(v.limited_by, LimitedBy::ReceiveWindow, "{}", v.text);
        assert!(v.text.contains("SO_RCVBUF"), "{}", v.text);
        // A stream its application paces, far below its loss response (one loss in about 1,000
        // segments allows some 15 Mbit/s). Its idle RTTs are counted, not judged by.
        let (v, seen) = judged(Download { bps: 4_000_000, loss_every: 30, idle_share: 0.6, ..CUBIC_LIKE });
        assert!(seen.iter().all(|(f, _)| !f), "{seen:?}");
        assert_eq!(v.limited_by, LimitedBy::Application, "{}", v.text);
        // A stream paced past its losses: a loss every 100 ms allows some 5 Mbit/s, it gets 16,
        // and its rate dips at each loss as its application's bursts wander. Its cuts do not
        // bind: its application, not its congestion window.
        let (v, seen) = judged(Download { loss_every: 1, cut: 0.8, ..CUBIC_LIKE });
        assert!(seen.iter().all(|(f, _)| !f), "{seen:?}");
        assert_eq!(v.limited_by, LimitedBy::Application, "{}", v.text);
        // No loss at all: nothing but its application holds it.
        let (v, _) = judged(Download { loss_every: 10_000, ..CUBIC_LIKE });
        assert_eq!(v.limited_by, LimitedBy::Application, "{}", v.text);
    }
}
