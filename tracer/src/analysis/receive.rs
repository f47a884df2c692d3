//! What a socket's sample says of the data it receives, and so of its peer's sender: the
//! receiving `tcp_sock` fields and what the kernel counted segment by segment (the holes losses
//! leave, their filling, loss episodes and the sender's rate around each). The judgment made
//! from them is `diagnosis/remote/`.

use serde::{Deserialize, Serialize};
use tracer_common::{rcv_flag, FlowSample};

/// Named after the kernel's fields where they are one (`tcp_sock`'s, as `ss -tni` prints
/// several); all 0 in recordings made before cctrace read them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReceiveSide {
    /// The socket's segments were counted one by one (BTF tracepoints): the counts below are
    /// real; otherwise they are 0.
    pub counted: bool,
    /// Data waits out of order now: a hole is open.
    pub out_of_order: bool,
    /// The MSS the peer sends (`icsk_ack.rcv_mss`), bytes.
    pub rcv_mss: u32,
    /// Next byte expected, and next the application reads: the difference is received and
    /// unread (sequence space).
    pub rcv_nxt: u32,
    pub copied_seq: u32,
    /// The window last advertised, its clamp and the slow-start threshold of its growth, bytes.
    pub rcv_wnd: u32,
    pub window_clamp: u32,
    pub rcv_ssthresh: u32,
    /// The receiver's RTT estimate (`tcpi_rcv_rtt`), µs; 0 until measured.
    pub rcv_rtt_us: u32,
    /// What autotuning saw the application copy in an RTT (`tcpi_rcv_space`), bytes.
    pub rcv_space: u32,
    /// Segments that arrived out of order (`tcpi_rcv_ooopack`), and data segments in all.
    pub ooo_segments: u32,
    pub data_segs_in: u32,
    /// The TSval of the segment the sample was taken at (0: none), and whether it counts
    /// microseconds (`tcp_usec_ts`) rather than milliseconds.
    pub seg_tsval: u32,
    pub tsval_usec: bool,
    /// Holes opened, the bytes they skipped, and segments that arrived below the highest byte
    /// seen (retransmissions and late originals).
    pub holes: u32,
    pub hole_bytes: u64,
    pub below: u32,
    /// Followed holes filled late (losses) and early (reordering).
    pub loss_holes: u32,
    pub reorder_holes: u32,
    /// Loss episodes, and when the latest began (the kernel's clock, ns) with the TSval of the
    /// segment that opened it.
    pub episodes: u32,
    pub episode_ns: u64,
    pub episode_tsval: u32,
    /// Episodes whose rates were measured, and the latest one's: new bytes in the RTT before its
    /// first hole and in the RTT after it was filled, and over how long (µs).
    pub measured: u32,
    pub before_bytes: u32,
    pub before_us: u32,
    pub after_bytes: u32,
    pub after_us: u32,
    /// Time the sender left idle between segments of new data (gaps of at least an RTT), µs in
    /// all.
    pub idle_us: u64,
}

impl ReceiveSide {
    /// `hz`: the kernel's CONFIG_HZ (the idle time is counted in jiffies).
    pub fn from_raw(raw: &FlowSample, hz: u32) -> Self {
        let c = &raw.rcv;
        Self {
            counted: raw.rcv_flags & rcv_flag::COUNTED != 0,
            out_of_order: raw.rcv_flags & rcv_flag::OUT_OF_ORDER != 0,
            rcv_mss: raw.rcv_mss,
            rcv_nxt: raw.rcv_nxt,
            copied_seq: raw.copied_seq,
            rcv_wnd: raw.rcv_wnd,
            window_clamp: raw.window_clamp,
            rcv_ssthresh: raw.rcv_ssthresh,
            rcv_rtt_us: raw.rcv_rtt_us,
            rcv_space: raw.rcvq_space,
            ooo_segments: raw.rcv_ooopack,
            data_segs_in: raw.data_segs_in,
            seg_tsval: raw.seg_tsval,
            tsval_usec: raw.rcv_flags & rcv_flag::USEC_TS != 0,
            holes: c.holes,
            hole_bytes: c.hole_bytes,
            below: c.below,
            loss_holes: c.loss_holes,
            reorder_holes: c.reorder_holes,
            episodes: c.episodes,
            episode_ns: c.episode_ns,
            episode_tsval: c.episode_tsval,
            measured: c.measured,
            before_bytes: c.before_bytes,
            before_us: c.before_us,
            after_bytes: c.after_bytes,
            after_us: c.after_us,
            idle_us: u64::from(c.idle_jiffies) * 1_000_000 / u64::from(hz.max(1)),
        }
    }

    /// Bytes received and not yet read by the application.
    pub fn unread_bytes(&self) -> u32 {
        let unread = self.rcv_nxt.wrapping_sub(self.copied_seq);
        // A socket not yet receiving, or fields not read: nothing unread.
        if unread > i32::MAX as u32 {
            0
        } else {
            unread
        }
    }

    /// Microseconds per TSval tick.
    pub fn tsval_unit_us(&self) -> u64 {
        if self.tsval_usec {
            1
        } else {
            1000
        }
    }

    /// The latest measured episode's rates before and after, bits/s (`None` until one was).
    pub fn last_cut(&self) -> Option<(f64, f64)> {
        if self.measured == 0 || self.before_us == 0 || self.after_us == 0 {
            return None;
        }
        let bps = |bytes: u32, us: u32| f64::from(bytes) * 8e6 / f64::from(us);
        Some((bps(self.before_bytes, self.before_us), bps(self.after_bytes, self.after_us)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_counts_and_the_rates_around_an_episode() {
        let mut raw: FlowSample = bytemuck::Zeroable::zeroed();
        raw.rcv_flags = rcv_flag::COUNTED | rcv_flag::USEC_TS;
        raw.rcv_nxt = 10_000;
        raw.copied_seq = 4_000;
        raw.rcv.holes = 5;
        raw.rcv.measured = 2;
        raw.rcv.before_bytes = 150_000;
        raw.rcv.before_us = 30_000;
        raw.rcv.after_bytes = 75_000;
        raw.rcv.after_us = 30_000;
        raw.rcv.idle_jiffies = 25;
        let r = ReceiveSide::from_raw(&raw, 250);
        assert_eq!(r.idle_us, 100_000, "25 jiffies at 250 Hz");
        assert!(r.counted && !r.out_of_order && r.tsval_usec);
        assert_eq!((r.holes, r.unread_bytes(), r.tsval_unit_us()), (5, 6_000, 1));
        assert_eq!(r.last_cut(), Some((40e6, 20e6)));
        // Wrapped sequence numbers, and a reader ahead of nothing (fields not read).
        raw.rcv_nxt = 100;
        raw.copied_seq = u32::MAX - 99;
        assert_eq!(ReceiveSide::from_raw(&raw, 250).unread_bytes(), 200);
        raw.copied_seq = 200;
        assert_eq!(ReceiveSide::from_raw(&raw, 250).unread_bytes(), 0);
    }
}
