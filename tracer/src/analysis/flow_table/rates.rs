//! A flow's rates (throughput, send rate, retransmissions) between two snapshots of its
//! counters.

use tracer_common::NS_PER_SEC;

use crate::analysis::sample::Sample;

/// Counters at one instant, kept for the rate window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct RatePoint {
    pub(super) ts_ns: u64,
    pub(super) bytes_acked: u64,
    pub(super) bytes_received: u64,
    pub(super) bytes_sent: u64,
    pub(super) bytes_retrans: u64,
    pub(super) total_retrans: u32,
}

impl RatePoint {
    pub(super) fn of(s: &Sample) -> Self {
        Self {
            ts_ns: s.ts_ns,
            bytes_acked: s.bytes_acked,
            bytes_received: s.bytes_received,
            bytes_sent: s.bytes_sent,
            bytes_retrans: s.bytes_retrans,
            total_retrans: s.total_retrans,
        }
    }
}

/// Rates derived from two counter snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Payload the peer acknowledged plus payload received, bits/s: what the flow delivered.
    pub throughput_bps: f64,
    /// Everything put on the wire, retransmissions included, bits/s.
    pub send_rate_bps: f64,
    /// Retransmitted share of bytes sent in the window (0..=1).
    pub retrans_ratio: f64,
    /// Retransmitted segments per second.
    pub retrans_per_sec: f64,
}

/// The rates between two counter snapshots (`None` at one instant or out of order).
pub(super) fn rates_between(a: &RatePoint, b: &RatePoint) -> Option<Rates> {
    let dt_ns = b.ts_ns.checked_sub(a.ts_ns)?;
    if dt_ns == 0 {
        return None;
    }
    let secs = dt_ns as f64 / NS_PER_SEC as f64;
    let acked = b.bytes_acked.saturating_sub(a.bytes_acked);
    let received = b.bytes_received.saturating_sub(a.bytes_received);
    let sent = b.bytes_sent.saturating_sub(a.bytes_sent);
    let retrans_bytes = b.bytes_retrans.saturating_sub(a.bytes_retrans);
    let retrans_segs = b.total_retrans.saturating_sub(a.total_retrans);
    Some(Rates {
        throughput_bps: (acked + received) as f64 * 8.0 / secs,
        send_rate_bps: sent as f64 * 8.0 / secs,
        retrans_ratio: if sent > 0 { retrans_bytes as f64 / sent as f64 } else { 0.0 },
        retrans_per_sec: f64::from(retrans_segs) / secs,
    })
}
