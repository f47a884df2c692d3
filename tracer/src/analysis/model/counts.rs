//! Running counts over a flow's periodic samples (cwnd full, no backlog, application-limited,
//! send buffer low), so any window's shares are differences of two counts.

use crate::analysis::event::{Sample, SampleReason};

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
}

impl SampleCounts {
    pub(super) fn add(&mut self, s: &Sample) {
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
        self.sndbuf_bound += u64::from(writer_waits && !cwnd_full && s.sndbuf > 0 && !sndbuf_low && in_flight);
    }
}
