//! What a receiving flow's samples show of its peer's sender, kept from every sample because
//! the diagnosis judges once a second: the one-way delay's floor and the queue above it (from
//! the sender's timestamps), its loss episodes with the queue at each, the rate before and
//! after each episode, and progress points to take rates and counts over a span.

use std::collections::VecDeque;

use crate::analysis::sample::{Sample, SampleReason};

/// Flows start tracking what they receive once they received this much (as the loss tracker
/// does for what flows send).
pub(super) const TRACK_MIN_BYTES: u64 = 64 * 1024;
/// Episodes and measured cuts kept per flow.
pub const MAX_RECEIVE_EPISODES: usize = 32;
/// Progress points kept (one a second at most): enough for the loss horizon.
const PROGRESS_LEN: usize = 40;
const PROGRESS_STEP_NS: u64 = 1_000_000_000;

/// One loss episode as the receiver saw it: when its first hole opened, and the queue then.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReceiveEpisode {
    pub ts_ns: u64,
    /// One-way delay above its floor when the hole opened, µs (`None`: no timestamps).
    pub queue_us: Option<u32>,
    /// An episode of slow start's: the flow's first, where its slow start ended, and those
    /// while it recovers from that overshoot, until its rate is first seen not to grow through a
    /// loss (a sender recovering from an overshoot sends new data as the holes fill, and its
    /// rate grows through the later holes with the queue drained). They say nothing of the path.
    pub slow_start: bool,
}

/// The sender's rate in the round trip before an episode and the one after it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cut {
    /// When it was measured (the sample that carried it).
    pub ts_ns: u64,
    pub before_bps: f64,
    pub after_bps: f64,
}

impl Cut {
    /// After over before: ~0.7 for CUBIC, ~0.5 for Reno, ~1 for a sender that does not cut.
    pub fn ratio(&self) -> f64 {
        if self.before_bps > 0.0 {
            self.after_bps / self.before_bps
        } else {
            1.0
        }
    }
}

/// Counters at one moment, to take rates and counts over a span.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Progress {
    pub ts_ns: u64,
    pub bytes_received: u64,
    pub data_segs_in: u32,
    pub holes: u32,
    pub hole_bytes: u64,
    pub loss_holes: u32,
    pub reorder_holes: u32,
    /// Sums of the queue estimates of the periodic samples so far, and how many; the largest
    /// since the progress point before.
    pub queue_sum_us: u64,
    pub queue_samples: u64,
    pub queue_max_us: u32,
    /// Sums of the window advertised and of the bytes received but unread over the periodic
    /// samples so far, and how many.
    pub rcv_wnd_sum: u64,
    pub unread_sum: u64,
    pub window_samples: u64,
}

/// Per-flow memory of what it receives, allocated once it received `TRACK_MIN_BYTES`.
#[derive(Clone, Debug, Default)]
pub struct ReceiveTracker {
    /// The lowest arrival time minus the sender's timestamp seen (µs; its clock's offset plus
    /// the path's one-way delay): the floor the queue is measured from.
    pub base_offset_us: Option<i64>,
    /// The latest episodes and measured cuts, oldest first.
    pub episodes: VecDeque<ReceiveEpisode>,
    pub cuts: VecDeque<Cut>,
    /// Progress points, about a second apart, oldest first; and the counters now.
    pub progress: VecDeque<Progress>,
    pub now: Progress,
    /// The sender's rate was seen not to grow through a loss after slow start's own: its
    /// recovery from slow start is over.
    recovered_from_slow_start: bool,
}

impl ReceiveTracker {
    pub(super) fn update(&mut self, prev: &Sample, s: &Sample) {
        let r = &s.receive;
        let queue = self.queue_at(s.ts_ns, r.seg_tsval, r.tsval_unit_us());
        // The cut first: one a sample carries with its episode is that episode's own.
        if r.measured != prev.receive.measured {
            if let Some((before_bps, after_bps)) = r.last_cut() {
                if self.cuts.len() >= MAX_RECEIVE_EPISODES {
                    self.cuts.pop_front();
                }
                let cut = Cut { ts_ns: s.ts_ns, before_bps, after_bps };
                self.cuts.push_back(cut);
                // A rate that did not grow through a loss is no longer slow start's. (The first
                // measurement is of slow start's own loss, whose cut says nothing.)
                self.recovered_from_slow_start |= prev.receive.measured > 0 && cut.ratio() <= 1.0;
            }
        }
        if r.episodes != prev.receive.episodes && r.episode_ns != 0 {
            let at = self.queue_at(r.episode_ns, r.episode_tsval, r.tsval_unit_us());
            if self.episodes.len() >= MAX_RECEIVE_EPISODES {
                self.episodes.pop_front();
            }
            let slow_start = prev.receive.episodes == 0 || !self.recovered_from_slow_start;
            self.episodes.push_back(ReceiveEpisode { ts_ns: r.episode_ns, queue_us: at, slow_start });
        }
        self.now = Progress {
            ts_ns: s.ts_ns,
            bytes_received: s.bytes_received,
            data_segs_in: r.data_segs_in,
            holes: r.holes,
            hole_bytes: r.hole_bytes,
            loss_holes: r.loss_holes,
            reorder_holes: r.reorder_holes,
            ..self.now
        };
        if s.reason == SampleReason::Periodic {
            self.now.rcv_wnd_sum += u64::from(r.rcv_wnd);
            self.now.unread_sum += u64::from(r.unread_bytes());
            self.now.window_samples += 1;
            if let Some(q) = queue {
                self.now.queue_sum_us += u64::from(q);
                self.now.queue_samples += 1;
                self.now.queue_max_us = self.now.queue_max_us.max(q);
            }
        }
        if self.progress.back().is_none_or(|p| s.ts_ns >= p.ts_ns + PROGRESS_STEP_NS) {
            if self.progress.len() >= PROGRESS_LEN {
                self.progress.pop_front();
            }
            self.progress.push_back(self.now);
            self.now.queue_max_us = 0;
        }
    }

    /// The queue above the one-way delay's floor for a segment stamped `tsval` that arrived at
    /// `ts_ns`, lowering the floor when it is the lowest yet; `None` without a timestamp.
    fn queue_at(&mut self, ts_ns: u64, tsval: u32, unit_us: u64) -> Option<u32> {
        if tsval == 0 || ts_ns == 0 {
            return None;
        }
        let offset = (ts_ns / 1000) as i64 - (u64::from(tsval) * unit_us) as i64;
        let base = self.base_offset_us.map_or(offset, |b| b.min(offset));
        self.base_offset_us = Some(base);
        u32::try_from(offset - base).ok()
    }

    /// The progress point at or before `ts_ns` (the oldest kept when none is that old).
    pub fn progress_at(&self, ts_ns: u64) -> Progress {
        self.progress.iter().rev().find(|p| p.ts_ns <= ts_ns).or(self.progress.front()).copied().unwrap_or(self.now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::flow_table::tests::sample;

    fn at(ms: u64, tsval: u32) -> Sample {
        let mut s = sample(1, ms);
        s.receive.seg_tsval = tsval;
        s.min_rtt_us = 30_000;
        s.bytes_received = ms * 10_000;
        s
    }

    #[test]
    fn the_queue_is_the_one_way_delay_above_its_floor_and_episodes_keep_theirs() {
        let mut t = ReceiveTracker::default();
        // The sender's clock runs 5 s ahead; the path's delay is the same for the first three
        // segments, then 8 ms of queue builds.
        let mut prev = at(0, 0);
        for (ms, tsval) in [(100, 5_085), (200, 5_185), (300, 5_285), (400, 5_377)] {
            let s = at(ms, tsval);
            t.update(&prev, &s);
            prev = s;
        }
        assert_eq!(t.now.queue_samples, 4);
        assert_eq!(t.now.queue_sum_us, 8_000, "three at the floor, one 8 ms above");
        assert_eq!(t.now.queue_max_us, 8_000);
        // An episode whose first hole came with 8 ms of queue, measured as a cut to 0.7.
        let mut s = at(500, 5_485);
        s.receive.episodes = 1;
        s.receive.episode_ns = 410_000_000;
        s.receive.episode_tsval = 5_387;
        s.receive.measured = 1;
        s.receive.before_bytes = 100_000;
        s.receive.before_us = 30_000;
        s.receive.after_bytes = 70_000;
        s.receive.after_us = 30_000;
        t.update(&prev, &s);
        assert_eq!(t.episodes.len(), 1);
        assert_eq!(t.episodes[0].queue_us, Some(8_000));
        assert!(t.episodes[0].slow_start, "the first episode ends slow start");
        assert!((t.cuts[0].ratio() - 0.7).abs() < 1e-9);
    }

    /// Episode `n` in its own sample, which carries its cut (`after_bytes` of 100,000 before).
    fn episode(n: u32, ms: u64, after_bytes: u32) -> Sample {
        let mut s = at(ms, 5_000 + ms as u32);
        s.receive.episodes = n;
        s.receive.episode_ns = (ms - 50) * 1_000_000;
        s.receive.episode_tsval = 5_000 + ms as u32 - 50;
        s.receive.measured = n;
        s.receive.before_bytes = 100_000;
        s.receive.before_us = 30_000;
        s.receive.after_bytes = after_bytes;
        s.receive.after_us = 30_000;
        s
    }

    #[test]
    fn slow_start_lasts_while_the_rate_grows_through_its_losses() {
        let mut t = ReceiveTracker::default();
        let mut prev = at(0, 5_000);
        // Slow start's own loss (cut to half), two more holes in its recovery as the rate grows
        // back, then a loss the rate did not grow through: from there the episodes are the path's.
        for (n, after) in [(1, 50_000), (2, 120_000), (3, 110_000), (4, 70_000), (5, 105_000)] {
            let s = episode(n, u64::from(n) * 1_000, after);
            t.update(&prev, &s);
            prev = s;
        }
        let slow: Vec<bool> = t.episodes.iter().map(|e| e.slow_start).collect();
        assert_eq!(slow, [true, true, true, false, false]);
    }
}
