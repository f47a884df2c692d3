//! Running counts over a flow's periodic samples (cwnd full, no backlog, application-limited,
//! send buffer low), so any window's shares are differences of two counts.

use crate::analysis::sample::{Sample, SampleReason};

/// Running counts over every sample of a flow, for shares over any window (deltas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleCounts {
    pub samples: u64,
    /// Samples where the congestion window was full (packets out >= cwnd, or the kernel's
    /// is_cwnd_limited).
    pub cwnd_full: u64,
    /// Samples where the sender had nothing queued: no unsent bytes and room in cwnd.
    pub no_backlog: u64,
    /// Samples whose delivery rate the kernel marked application-limited (`rate_app_limited`).
    pub app_limited: u64,
    /// Samples with the send buffer under 60 % full: the application is not keeping it
    /// stocked, so it, not the network, sets the pace. (Backlogged senders sit at 70-100 %.)
    pub sndbuf_low: u64,
    /// Samples with a writer waiting for room in the send buffer (`SOCK_NOSPACE`).
    pub writer_blocked: u64,
    /// Samples held by the send buffer: the writer waits for room, the buffer is at least 60 %
    /// full, at most half of what it holds is unsent, and the congestion window has room. The
    /// kernel's own condition for its send-buffer chrono, sampled: the chrono starts only when
    /// a transmit finds nothing left to send and stops whenever the writer is woken, so it
    /// ran for 7-25 % of the time of a BBR sender held by its buffer in every sample.
    pub sndbuf_bound: u64,
    /// Samples taken while the peer read what it received (its advertised window did not fall
    /// by more than a segment since the sample before), and the sum of their srtt, µs. A
    /// receiver that leaves data unread delays its ACKs (Linux acknowledges when the
    /// application reads, or when its delayed-ACK timer fires, rather than advertise a window
    /// that shrinks), and the sender's srtt rises with no queue on the path: measured 17-27 ms
    /// above min_rtt on ffmpeg's second HLS connection while it read the first, 2-4 ms while it
    /// read this one. Only these samples tell the path's queue.
    pub peer_reading: u64,
    pub peer_reading_srtt_us: u64,
    /// Time (µs) the kernel counted the flow held by the peer's window while that window was
    /// closed (under a segment): a receiver not reading at all (a player reading its other
    /// connection, a paused one), not a window too small for the path.
    pub rwnd_closed_us: u64,
}

/// Whether the peer's advertised window fell by more than a segment from `before` to `after`:
/// data arrived faster than its application read it.
pub(super) fn peer_window_fell(before: u32, after: u32, mss: u32) -> bool {
    after.saturating_add(mss.max(1)) < before
}

/// Segments in flight as the kernel counts them for its congestion window (`tcp_packets_in_flight`):
/// sent and not acknowledged, less those SACKed or marked lost, plus retransmissions out.
pub(super) fn packets_in_flight(s: &Sample) -> u32 {
    s.packets_out.saturating_sub(s.sacked_out.saturating_add(s.lost_out)).saturating_add(s.retrans_out)
}

impl SampleCounts {
    /// Count `s`, the flow's sample after `prev` (none for its first).
    pub(super) fn add(&mut self, prev: Option<&Sample>, s: &Sample) {
        if let Some(p) = prev {
            if p.snd_wnd < p.mss.max(1) || s.snd_wnd < s.mss.max(1) {
                self.rwnd_closed_us += s.rwnd_limited_us.saturating_sub(p.rwnd_limited_us);
            }
        }
        // Event-triggered samples are taken at moments of loss or state change; only the
        // periodic ones are an unbiased view of the flow's time.
        if s.reason != SampleReason::Periodic {
            return;
        }
        let cwnd_full = s.cwnd_limited || (s.snd_cwnd > 0 && s.packets_out >= s.snd_cwnd);
        self.samples += 1;
        self.cwnd_full += u64::from(cwnd_full);
        self.no_backlog += u64::from(!cwnd_full && s.notsent_bytes == 0);
        self.app_limited += u64::from(s.app_limited);
        let sndbuf_low = s.sndbuf > 0 && u64::from(s.wmem_queued) * 10 < u64::from(s.sndbuf) * 6;
        self.sndbuf_low += u64::from(sndbuf_low);
        let writer_waits = s.writer_waits();
        self.writer_blocked += u64::from(writer_waits);
        let in_flight = s.notsent_bytes.saturating_mul(2) < s.wmem_queued;
        // The congestion window's room as the kernel tests it (what is in flight, SACKed and
        // lost segments out of it): in recovery a sender's queue holds SACKed data that fills
        // `packets_out` while its window has room (BBR at 0.05 % loss on a 240 ms path was in
        // recovery most of the time, its writer waiting on a full buffer throughout).
        let cwnd_room = packets_in_flight(s) < s.snd_cwnd;
        self.sndbuf_bound += u64::from(writer_waits && cwnd_room && s.sndbuf > 0 && !sndbuf_low && in_flight);
        if !prev.is_some_and(|p| peer_window_fell(p.snd_wnd, s.snd_wnd, s.mss)) {
            self.peer_reading += 1;
            self.peer_reading_srtt_us += u64::from(s.srtt_us);
        }
    }
}
