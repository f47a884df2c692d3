//! Reordering: a flow whose retransmissions the kernel mostly took back (DSACK reported them
//! duplicates) lost little or nothing; the path delivered its packets out of order and the
//! sender retransmitted before they arrived. Not flagged, and BBR is not the fix: the kernel
//! already widens its reordering window (`reordering`, RACK) once it has seen it.

use std::fmt::Write as _;

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::losses::LossView;
use crate::analysis::diagnosis::verdict::{Evidence, LossNote};

/// Spurious (DSACKed) share of the segments the flow retransmitted.
pub(super) fn spurious_share(lv: &LossView) -> f64 {
    if lv.retrans_segments == 0 {
        0.0
    } else {
        f64::from(lv.dsack_dups.min(lv.retrans_segments)) / f64::from(lv.retrans_segments)
    }
}

/// The reordering note, when enough retransmissions were seen and most were spurious.
pub(super) fn note_of(lv: &LossView, cfg: &DiagnosisConfig) -> Option<LossNote> {
    (lv.retrans_segments >= cfg.reordering_min_retrans && spurious_share(lv) >= cfg.reordering_spurious_share)
        .then_some(LossNote::Reordering)
}

/// The note's sentence, after the verdict's.
pub(super) fn write_note(text: &mut String, ev: &Evidence) {
    if ev.note != Some(LossNote::Reordering) {
        return;
    }
    let _ = write!(
        text,
        ". Reordering: {:.0}% of its {} retransmissions were spurious (dsack_dups {}, {} cuts undone), \
         so the path delivered those packets out of order rather than losing them (multipath, Wi-Fi aggregation, \
         a jittery tunnel). Not flagged, and the fix is not BBR: the kernel already adapts (its reordering \
         estimate is now {} segments)",
        ev.spurious_share * 100.0,
        ev.retrans_segments,
        ev.dsack_dups,
        ev.undo_events,
        ev.reordering.map_or("unknown".to_string(), |r| r.to_string()),
    );
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnosis::test_feed::{episodic, run_feed};
    use crate::analysis::diagnosis::verdict::LossNote;

    /// `episodic`'s flow (flagged as it is: a loss every 0.7 s without a queue), with DSACK
    /// reporting as spurious the retransmissions of the episodes `spurious(n)` picks (n counts
    /// the episodes from 1), and the kernel undoing their cuts.
    fn with_dsacks(spurious: impl Fn(u32) -> bool + 'static) -> impl Fn(u64) -> Vec<crate::analysis::sample::Sample> {
        let feed = episodic("cubic", 16_000_000, 7, 0, 0);
        move |tick| {
            let mut out = feed(tick);
            for s in &mut out {
                let taken_back = (1..=s.total_retrans).filter(|&n| spurious(n)).count() as u32;
                s.signals.dsack_dups = Some(taken_back);
                s.signals.undo_events = Some(taken_back);
                s.signals.reord_seen = Some(taken_back);
                s.signals.reordering = Some(3 + taken_back.min(60));
            }
            out
        }
    }

    #[test]
    fn retransmissions_the_kernel_took_back_are_no_losses_and_earn_the_reordering_note() {
        let (d, seen) = run_feed(30, with_dsacks(|_| true));
        assert!(seen.iter().all(|(flagged, _)| !flagged), "{seen:?}");
        let v = d.verdict(1).expect("verdict");
        let e = v.evidence.as_ref().expect("evidence");
        assert_eq!(e.loss_episodes, 0, "{e:?}");
        assert!(e.spurious_episodes >= 10, "{e:?}");
        assert_eq!(e.note, Some(LossNote::Reordering));
        assert!(e.retrans_segments > 20 && e.dsack_dups == e.retrans_segments, "{e:?}");
        let said = format!("Reordering: 100% of its {} retransmissions were spurious", e.retrans_segments);
        assert!(v.text.contains(&said), "{}", v.text);
        assert!(v.text.contains("the fix is not BBR"), "{}", v.text);
    }

    #[test]
    fn a_few_spurious_retransmissions_leave_random_loss_flagged_with_them_counted_apart() {
        // One episode in four taken back: the other three still say random loss.
        let (d, seen) = run_feed(30, with_dsacks(|n| n % 4 == 0));
        assert!(seen.last().is_some_and(|(flagged, _)| *flagged), "{seen:?}");
        let v = d.verdict(1).expect("verdict");
        let e = v.evidence.as_ref().expect("evidence");
        assert_eq!(e.note, None);
        assert!(e.spurious_episodes >= 2 && e.loss_episodes >= 3 * e.spurious_episodes - 3, "{e:?}");
        assert!(!v.text.contains("Reordering"), "{}", v.text);
    }
}
