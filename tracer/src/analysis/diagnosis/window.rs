//! A flow's recent past: a snapshot of its counters at each evaluation, and what the sliding
//! window of snapshots shows (goodput, stalls, shares of samples, loss spread over time).

use std::collections::VecDeque;

use tracer_common::NS_PER_SEC;

use crate::analysis::flow_table::{Flow, SampleCounts};

/// Counters of one flow at one evaluation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Snapshot {
    pub(super) ts_ns: u64,
    pub(super) busy_us: u64,
    pub(super) rwnd_us: u64,
    pub(super) sndbuf_us: u64,
    pub(super) bytes_acked: u64,
    pub(super) bytes_received: u64,
    pub(super) bytes_sent: u64,
    pub(super) bytes_retrans: u64,
    pub(super) total_retrans: u32,
    pub(super) srtt_us: u32,
    pub(super) min_rtt_us: u32,
    pub(super) cwnd: u32,
    pub(super) sndbuf: u32,
    pub(super) in_flight: u64,
    pub(super) snd_wnd: u32,
    pub(super) counts: SampleCounts,
}

impl Snapshot {
    /// The same counters, whenever taken.
    pub(super) fn same_counters(&self, other: &Snapshot) -> bool {
        Snapshot { ts_ns: 0, ..*self } == Snapshot { ts_ns: 0, ..*other }
    }

    pub(super) fn of(flow: &Flow) -> Self {
        let s = &flow.latest;
        Self {
            ts_ns: s.ts_ns,
            busy_us: s.busy_us,
            rwnd_us: s.rwnd_limited_us,
            sndbuf_us: s.sndbuf_limited_us,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_received,
            bytes_sent: s.bytes_sent,
            bytes_retrans: s.bytes_retrans,
            total_retrans: s.total_retrans,
            srtt_us: s.srtt_us,
            min_rtt_us: s.min_rtt_us,
            cwnd: s.snd_cwnd,
            sndbuf: s.sndbuf,
            in_flight: u64::from(s.packets_out) * u64::from(s.mss),
            snd_wnd: s.snd_wnd,
            counts: flow.counts,
        }
    }
}

/// What the window shows, before hysteresis.
#[derive(Clone, Debug)]
pub(super) struct Window {
    pub(super) secs: f64,
    pub(super) goodput_bps: f64,
    pub(super) sent_bytes: u64,
    pub(super) received_bytes: u64,
    pub(super) acked_bytes: u64,
    pub(super) loss_ratio: f64,
    pub(super) busy_share: f64,
    pub(super) rwnd_share: f64,
    /// Of `rwnd_share`, the share held by a closed window (the receiver not reading at all).
    pub(super) rwnd_closed_share: f64,
    pub(super) sndbuf_share: f64,
    pub(super) mean_cwnd: f64,
    pub(super) mean_srtt_us: f64,
    /// Mean srtt of the window's samples taken while the peer read what it got (see
    /// [`SampleCounts::peer_reading`]): the path's queue without the receiver's delay. `None`
    /// when the peer left data unread at every sample of the window.
    pub(super) reading_srtt_us: Option<f64>,
    pub(super) min_rtt_us: f64,
    /// Share of samples in the window with a full congestion window.
    pub(super) cwnd_full_share: f64,
    /// Share of samples in the window where the sender had nothing to send.
    pub(super) no_backlog_share: f64,
    /// Share of samples the kernel marked application-limited.
    pub(super) app_limited_share: f64,
    /// Share of samples with the send buffer under 60 % full.
    pub(super) sndbuf_low_share: f64,
    /// Share of samples with a writer waiting for room in the send buffer, and of those held
    /// by it (see [`SampleCounts::sndbuf_bound`]).
    pub(super) writer_blocked_share: f64,
    pub(super) sndbuf_bound_share: f64,
    /// Mean send buffer, bytes in flight (segments out x mss) and peer's window over the
    /// window's snapshots, bytes.
    pub(super) mean_sndbuf: f64,
    pub(super) mean_in_flight: f64,
    pub(super) mean_snd_wnd: f64,
    /// Share of the window's intervals (between snapshots) with at least one retransmission:
    /// random loss shows up in nearly every interval, a congestion episode in one or two.
    pub(super) lossy_interval_share: f64,
}

/// The window's rates and shares from its snapshots: none from fewer than two, or two at one instant.
pub(super) fn window_of(snaps: &VecDeque<Snapshot>) -> Option<Window> {
    let (first, last) = (snaps.front()?, snaps.back()?);
    let dt_ns = last.ts_ns.checked_sub(first.ts_ns)?;
    if dt_ns == 0 {
        return None;
    }
    let secs = dt_ns as f64 / NS_PER_SEC as f64;
    let span_us = dt_ns as f64 / 1000.0;
    let share = |a: u64, b: u64| (b.saturating_sub(a) as f64 / span_us).clamp(0.0, 1.0);
    let acked = last.bytes_acked.saturating_sub(first.bytes_acked);
    let received = last.bytes_received.saturating_sub(first.bytes_received);
    let sent = last.bytes_sent.saturating_sub(first.bytes_sent);
    let retrans = last.bytes_retrans.saturating_sub(first.bytes_retrans);
    // The first snapshot only anchors the deltas; means are over the rest.
    let tail: Vec<&Snapshot> = snaps.iter().skip(1).collect();
    let n = tail.len().max(1) as f64;
    let mean = |f: &dyn Fn(&Snapshot) -> f64| tail.iter().map(|s| f(s)).sum::<f64>() / n;
    let min_rtt = tail.iter().map(|s| s.min_rtt_us).filter(|&v| v > 0).min().unwrap_or(0);
    let samples = last.counts.samples.saturating_sub(first.counts.samples);
    let count_share =
        |a: u64, b: u64| if samples == 0 { 0.0 } else { (b.saturating_sub(a) as f64 / samples as f64).clamp(0.0, 1.0) };
    Some(Window {
        secs,
        goodput_bps: (acked + received) as f64 * 8.0 / secs,
        sent_bytes: sent,
        received_bytes: received,
        acked_bytes: acked,
        loss_ratio: if sent > 0 { retrans as f64 / sent as f64 } else { 0.0 },
        busy_share: share(first.busy_us, last.busy_us),
        rwnd_share: share(first.rwnd_us, last.rwnd_us),
        rwnd_closed_share: share(first.counts.rwnd_closed_us, last.counts.rwnd_closed_us),
        sndbuf_share: share(first.sndbuf_us, last.sndbuf_us),
        mean_cwnd: mean(&|s| f64::from(s.cwnd)),
        mean_srtt_us: mean(&|s| f64::from(s.srtt_us)),
        reading_srtt_us: {
            let n = last.counts.peer_reading.saturating_sub(first.counts.peer_reading);
            let sum = last.counts.peer_reading_srtt_us.saturating_sub(first.counts.peer_reading_srtt_us);
            // Without periodic samples in the window (a feed of other samples only), the
            // snapshots' srtt is all there is.
            match (samples, n) {
                (0, _) => Some(mean(&|s| f64::from(s.srtt_us))),
                (_, 0) => None,
                _ => Some(sum as f64 / n as f64),
            }
        },
        min_rtt_us: f64::from(min_rtt),
        cwnd_full_share: count_share(first.counts.cwnd_full, last.counts.cwnd_full),
        no_backlog_share: count_share(first.counts.no_backlog, last.counts.no_backlog),
        app_limited_share: count_share(first.counts.app_limited, last.counts.app_limited),
        sndbuf_low_share: count_share(first.counts.sndbuf_low, last.counts.sndbuf_low),
        writer_blocked_share: count_share(first.counts.writer_blocked, last.counts.writer_blocked),
        sndbuf_bound_share: count_share(first.counts.sndbuf_bound, last.counts.sndbuf_bound),
        mean_sndbuf: mean(&|s| f64::from(s.sndbuf)),
        mean_in_flight: mean(&|s| s.in_flight as f64),
        mean_snd_wnd: mean(&|s| f64::from(s.snd_wnd)),
        lossy_interval_share: {
            let intervals = snaps.len().saturating_sub(1).max(1) as f64;
            let lossy =
                snaps.iter().zip(snaps.iter().skip(1)).filter(|(a, b)| b.total_retrans > a.total_retrans).count();
            lossy as f64 / intervals
        },
    })
}

/// The rate a buffer of `buffer` bytes lets a flow carry at `rtt_s`, keeping `share` of it in
/// flight.
pub(super) fn rate_of(buffer: f64, share: f64, rtt_s: f64) -> f64 {
    if rtt_s > 0.0 {
        buffer * share * 8.0 / rtt_s
    } else {
        f64::INFINITY
    }
}
