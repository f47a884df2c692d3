//! A flow before and after something was done to it (a fix switched its congestion control):
//! goodput, cwnd, srtt and retransmissions over a window either side of the instant, from the
//! flow's chart history, so the detail view can show whether it paid.

use tracer_common::NS_PER_SEC;

use crate::analysis::flow_table::HistoryPoint;

/// How far either side of the instant is compared.
pub const WINDOW_NS: u64 = 10 * NS_PER_SEC;

/// A flow's means over whole history buckets on one side of the instant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Buckets (seconds, at the default step) the means are over.
    pub buckets: usize,
    pub goodput_bps: f64,
    pub cwnd: f64,
    pub srtt_us: f64,
    /// Segments retransmitted per second.
    pub retrans_per_sec: f64,
}

/// The two sides; `None` where no whole bucket lies in the window yet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BeforeAfter {
    pub before: Option<Window>,
    pub after: Option<Window>,
}

impl BeforeAfter {
    /// After over before goodput, when both are there and before moved anything.
    pub fn goodput_ratio(&self) -> Option<f64> {
        let (b, a) = (self.before?, self.after?);
        (b.goodput_bps > 0.0).then(|| a.goodput_bps / b.goodput_bps)
    }
}

/// Compare the buckets of `history` (oldest first, the newest one still filling) that lie
/// wholly in the `window_ns` before `at_ns` with those wholly in the `window_ns` after it. The
/// bucket the instant falls in mixes both sides and counts for neither; the newest bucket is
/// not complete and is left out too.
pub fn before_after(history: &[&HistoryPoint], at_ns: u64, step_ns: u64, window_ns: u64) -> BeforeAfter {
    let step = step_ns.max(1);
    let complete = &history[..history.len().saturating_sub(1)];
    let before = complete.iter().filter(|h| h.ts_ns + step <= at_ns && h.ts_ns + window_ns >= at_ns).copied();
    let after = complete.iter().filter(|h| h.ts_ns >= at_ns && h.ts_ns + step <= at_ns + window_ns).copied();
    BeforeAfter { before: window(before, step), after: window(after, step) }
}

fn window<'a>(points: impl Iterator<Item = &'a HistoryPoint>, step_ns: u64) -> Option<Window> {
    let (mut n, mut goodput, mut cwnd, mut srtt, mut retrans) = (0usize, 0.0, 0.0, 0.0, 0u64);
    for p in points {
        n += 1;
        goodput += f64::from(p.throughput_bps);
        cwnd += f64::from(p.cwnd);
        srtt += f64::from(p.srtt_us);
        retrans += u64::from(p.retrans);
    }
    if n == 0 {
        return None;
    }
    let count = n as f64;
    Some(Window {
        buckets: n,
        goodput_bps: goodput / count,
        cwnd: cwnd / count,
        srtt_us: srtt / count,
        retrans_per_sec: retrans as f64 / (count * step_ns as f64 / NS_PER_SEC as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::sample::CaState;

    fn point(sec: u64, mbps: f32, cwnd: u32, retrans: u16) -> HistoryPoint {
        HistoryPoint {
            ts_ns: sec * NS_PER_SEC,
            throughput_bps: mbps * 1e6,
            cwnd,
            ssthresh: cwnd,
            srtt_us: 30_000,
            min_rtt_us: 30_000,
            retrans,
            ca_state: CaState::Open,
            worst_ca_state: CaState::Open,
        }
    }

    #[test]
    fn compares_whole_buckets_either_side_and_skips_the_mixed_and_the_filling_ones() {
        // 20 s at 3 Mbit/s, cwnd 40, 5 retransmissions a second; the switch at 20.5 s; then
        // 200 Mbit/s, cwnd 900, 2 a second; the bucket at 20 s mixes both; 31 s is filling.
        let mut points: Vec<HistoryPoint> = (0..20).map(|s| point(s, 3.0, 40, 5)).collect();
        points.push(point(20, 100.0, 400, 3));
        points.extend((21..=31).map(|s| point(s, 200.0, 900, 2)));
        let refs: Vec<&HistoryPoint> = points.iter().collect();
        let at = 20 * NS_PER_SEC + NS_PER_SEC / 2;
        let ba = before_after(&refs, at, NS_PER_SEC, WINDOW_NS);
        let (b, a) = (ba.before.expect("before"), ba.after.expect("after"));
        // 11..=19: wholly inside the 10 s before; 20 holds the instant.
        assert_eq!((b.buckets, b.cwnd, b.retrans_per_sec), (9, 40.0, 5.0));
        // 21..=29: wholly inside the 10 s after 20.5 s; 30 ends past it, 31 is still filling.
        assert_eq!((a.buckets, a.cwnd, a.retrans_per_sec), (9, 900.0, 2.0));
        assert!((ba.goodput_ratio().expect("ratio") - 200.0 / 3.0).abs() < 1e-3);
    }

    #[test]
    fn nothing_after_until_a_whole_bucket_is_there() {
        let points: Vec<HistoryPoint> = (0..12).map(|s| point(s, 3.0, 40, 0)).collect();
        let refs: Vec<&HistoryPoint> = points.iter().collect();
        let ba = before_after(&refs, 11 * NS_PER_SEC, NS_PER_SEC, WINDOW_NS);
        assert!(ba.before.is_some());
        assert_eq!(ba.after, None);
        assert_eq!(ba.goodput_ratio(), None);
        assert_eq!(before_after(&[], 5, NS_PER_SEC, WINDOW_NS), BeforeAfter { before: None, after: None });
    }
}
