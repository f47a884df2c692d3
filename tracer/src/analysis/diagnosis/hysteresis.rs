//! When a verdict changes: a new class must hold for `confirm` evaluations in a row before it
//! replaces the shown one, and the flag goes on after `confirm` windows that meet its condition
//! and off only after `release` that do not, so verdicts do not flap on one odd window. A
//! flagged flow's class is the flag's until the flag clears, so `limited_by`, `flagged` and the
//! words never tell two stories.

use crate::analysis::diagnosis::config::DiagnosisConfig;
use crate::analysis::diagnosis::limits::LimitedBy;

/// One flow's hysteresis counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Hysteresis {
    candidate: Option<LimitedBy>,
    candidate_runs: u32,
    flag_runs: u32,
    unflag_runs: u32,
    flagged: bool,
}

impl Hysteresis {
    /// The class to show, given the one shown (`None` when nothing real was yet) and the one
    /// this window shows.
    pub(super) fn limited_by(
        &mut self,
        previous: Option<LimitedBy>,
        raw: LimitedBy,
        cfg: &DiagnosisConfig,
    ) -> LimitedBy {
        match previous {
            None => raw,
            Some(prev) if prev == raw => {
                self.candidate = None;
                prev
            }
            Some(prev) => {
                if self.candidate == Some(raw) {
                    self.candidate_runs += 1;
                } else {
                    self.candidate = Some(raw);
                    self.candidate_runs = 1;
                }
                if self.candidate_runs >= cfg.confirm {
                    self.candidate = None;
                    raw
                } else {
                    prev
                }
            }
        }
    }

    /// Whether the flow is flagged, given whether this window meets the flag condition.
    pub(super) fn flag(&mut self, condition_met: bool, cfg: &DiagnosisConfig) -> bool {
        if condition_met {
            self.flag_runs += 1;
            self.unflag_runs = 0;
            if self.flag_runs >= cfg.confirm {
                self.flagged = true;
            }
        } else {
            self.flag_runs = 0;
            self.unflag_runs += 1;
            if self.unflag_runs >= cfg.release {
                self.flagged = false;
            }
        }
        self.flagged
    }

    /// Clear the flag now, without waiting for `release` windows: for a reason that holds
    /// whatever the flow was called before (it gets most of a policer's rate), where a window
    /// that still looks like the earlier class must not start the wait again.
    pub(super) fn unflag_now(&mut self, cfg: &DiagnosisConfig) -> bool {
        self.flag_runs = 0;
        self.unflag_runs = self.unflag_runs.max(cfg.release);
        self.flagged = false;
        false
    }

    pub(super) fn flagged(&self) -> bool {
        self.flagged
    }

    /// Keep the class shown as it is (a flagged flow's, held by its flag, or one a clearing flag
    /// replaces at once): no new class is waiting.
    pub(super) fn hold_class(&mut self) {
        self.candidate = None;
        self.candidate_runs = 0;
    }

    /// Evaluations that do not meet the flag's condition still needed before a flag clears.
    pub(super) fn clears_in(&self, cfg: &DiagnosisConfig) -> u32 {
        cfg.release.saturating_sub(self.unflag_runs)
    }

    /// After a judgment that began at `before`: whether more judgments of the same window
    /// would leave the class and the flag as they are. Either it did not count (a flow too
    /// young for a verdict), or no new class waits and the flag's run is past its threshold.
    pub(super) fn at_rest(&self, before: &Hysteresis, cfg: &DiagnosisConfig) -> bool {
        self == before
            || (self.candidate.is_none()
                && if self.flag_runs > 0 { self.flag_runs >= cfg.confirm } else { self.unflag_runs >= cfg.release })
    }
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnosis::test_feed::{bulk, episodic, run, run_feed};
    use crate::analysis::diagnosis::{Diagnoser, DiagnosisConfig, LimitedBy};
    use crate::analysis::environment::Environment;
    use crate::analysis::flow_table::tests::sample;
    use crate::analysis::flow_table::{FlowTable, TableConfig};

    #[test]
    fn verdict_does_not_flap_on_one_odd_window() {
        // Application-limited throughout except one backlogged second.
        let (d, _) = run("cubic", 12, |tick, s| {
            s.bytes_acked = 100_000 * tick;
            s.bytes_sent = s.bytes_acked;
            s.busy_us = (0..tick).map(|t| if (60..70).contains(&t) { 100_000 } else { 10_000 }).sum::<u64>();
            s.cwnd_limited = false;
            s.wmem_queued = if (60..70).contains(&tick) { 87_040 } else { 0 };
            s.min_rtt_us = 30_000;
            s.srtt_us = 30_000;
        });
        assert_eq!(d.verdict(1).expect("verdict").limited_by, LimitedBy::Application);
    }

    #[test]
    fn flag_needs_confirmation_and_releases_slowly() {
        // Flagged regime for 10 s, then loss stops: the flag holds while the losses are in the
        // loss horizon, then for `release` windows.
        let mut table = FlowTable::new(TableConfig::default());
        let mut d = Diagnoser::new(DiagnosisConfig::default());
        let env = Environment::default();
        let lossy = bulk(4_000_000, 0.02, 31_000);
        let mut flags = Vec::new();
        let mut retrans_at_switch = 0;
        for tick in 0..=500u64 {
            let mut s = sample(1, tick * 100);
            lossy(tick, &mut s);
            if tick > 100 {
                if retrans_at_switch == 0 {
                    retrans_at_switch = s.bytes_retrans;
                }
                s.bytes_retrans = retrans_at_switch; // no more loss
                s.total_retrans = (retrans_at_switch / 1448) as u32;
            }
            table.ingest(&s);
            if tick % 10 == 0 {
                d.evaluate(&table, &env, tick * 100_000_000);
                flags.push(d.verdict(1).map(|v| v.flagged).unwrap_or(false));
            }
        }
        let first_flag = flags.iter().position(|f| *f).expect("flagged at some point");
        assert!(first_flag <= 10, "{flags:?}");
        let last_flag = flags.iter().rposition(|f| *f).expect("flag");
        // Loss stops at 10 s; the horizon forgets it at 40 s, then 5 evaluations.
        assert!(last_flag > 39 && last_flag < 46, "{flags:?}");
        assert!(!flags[46]);
    }

    #[test]
    fn a_flag_and_its_class_clear_together_and_the_verdict_says_when_and_why() {
        // Random losses for 20 s, then every loss at a 10 ms queue: the path is full.
        let clean = episodic("cubic", 16_000_000, 7, 0, 0);
        let queued = episodic("cubic", 16_000_000, 7, 10, 0);
        let (d, seen) = run_feed(45, move |tick| if tick < 200 { clean(tick) } else { queued(tick) });
        let first = seen.iter().position(|(f, _)| *f).expect("flagged");
        let cleared = first + seen[first..].iter().position(|(f, _)| !f).expect("cleared");
        // Flagged, it is `cwnd` (its flag's class) until the flag clears, whatever the windows
        // show meanwhile; then at once what they show.
        assert!(seen[first..cleared].iter().all(|(_, l)| *l == LimitedBy::CongestionWindow), "{seen:?}");
        assert_eq!(seen[cleared].1, LimitedBy::Path, "{seen:?}");
        assert!(seen[cleared..].iter().all(|(f, _)| !f), "{seen:?}");
        let v = d.verdict(1).expect("verdict");
        let c = v.changed.as_ref().expect("a change");
        assert!((c.from, c.was_flagged) == (LimitedBy::CongestionWindow, true) && !c.why.is_empty(), "{c:?}");
        assert!(v.text.contains(&format!("No longer flagged since {:.0} s: {}", c.at_s, c.why)), "{}", v.text);
    }

    #[test]
    fn a_flagged_flow_keeps_its_verdict_while_its_receiver_pauses_it_within_the_loss_horizon() {
        // Random losses; from 15 s to 23 s the receiver reads nothing (the window stays shut and
        // nothing moves), then the flow goes on; from 40 s it pauses for good.
        let feed = episodic("cubic", 16_000_000, 7, 0, 0);
        let (d, seen) = run_feed(80, move |tick| {
            let paused = (150..230).contains(&tick) || tick >= 400;
            let resumed_at = if tick >= 230 { tick - 80 } else { tick };
            let mut out = feed(if paused { tick.min(150).max(if tick >= 400 { 320 } else { 0 }) } else { resumed_at });
            for s in &mut out {
                s.ts_ns = tick * 100_000_000 + s.ts_ns % 100_000_000;
                if paused {
                    s.snd_wnd = 0;
                    s.rwnd_limited_us = 0;
                }
            }
            out.truncate(1);
            out
        });
        let first = seen.iter().position(|(f, _)| *f).expect("flagged");
        // Through the first pause and after it: flagged, as `cwnd`.
        assert!(seen[first..40].iter().all(|s| *s == (true, LimitedBy::CongestionWindow)), "{seen:?}");
        // The second pause outlasts the loss horizon: the flag clears.
        assert!(seen.last().is_some_and(|(f, _)| !f), "{seen:?}");
        let v = d.verdict(1).expect("verdict");
        assert!(v.changed.as_ref().is_some_and(|c| c.was_flagged), "{v:?}");
    }
}
