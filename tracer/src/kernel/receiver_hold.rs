//! Which receiving sockets keep `tcp_probe` attached through the probe window's closes.
//!
//! The program counts every segment a receiving socket takes (tracer-ebpf's `receive`: the holes
//! losses leave and their filling), which a window would miss. So while a receiving socket's
//! segments arrive out of order (its samples' out-of-order count moved within the last
//! [`RECEIVER_HOLDS_NS`]) the program stays attached, unless the socket's sender is a socket of
//! this host: that socket's own verdict is the flow's, and its receiving end's is only checked
//! against it, so paying the tracepoint's every run for it buys only that check (a transfer over
//! veth that lost a few segments held the program attached through every window: most of the
//! observer's cost on that transfer). Its receiving end's counts then have the windows' gaps.
//! Pure: the probe window asks it.

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::analysis::flow_table::SENDER_TRACK_MIN_BYTES;
use crate::analysis::sample::Sample;

/// While a receiving socket that takes segments out of order was seen within this long, the
/// program stays attached.
pub(super) const RECEIVER_HOLDS_NS: u64 = 10_000_000_000;

/// The sockets that hold the program attached, and what says whether one does.
#[derive(Debug, Default)]
pub(super) struct ReceiverHold {
    /// Until when the program stays attached.
    until_ns: u64,
    /// Each receiving socket's out-of-order count last seen, by cookie.
    out_of_order: HashMap<u64, u32>,
    /// This host's sending sockets (those the flow table tracks as senders), by (local, remote),
    /// and when each was last sampled.
    senders: HashMap<(SocketAddr, SocketAddr), u64>,
}

impl ReceiverHold {
    /// Take note of a batch of samples at `now_ns`: its senders first, so that a receiver and
    /// its sender sampled together are known as a pair.
    pub(super) fn note(&mut self, batch: &[Sample], now_ns: u64) {
        for s in batch {
            if s.is_closing() {
                self.senders.remove(&(s.local, s.remote));
            } else if s.bytes_sent >= SENDER_TRACK_MIN_BYTES {
                self.senders.insert((s.local, s.remote), now_ns);
            }
        }
        for s in batch {
            self.note_receiver(s, now_ns);
        }
    }

    fn note_receiver(&mut self, s: &Sample, now_ns: u64) {
        if s.is_closing() {
            self.out_of_order.remove(&s.cookie);
            return;
        }
        let ooo = s.receive.ooo_segments;
        if ooo == 0 {
            return;
        }
        let moved = self.out_of_order.insert(s.cookie, ooo).is_some_and(|before| before != ooo);
        if moved && !self.sender_here(s, now_ns) {
            self.until_ns = now_ns + RECEIVER_HOLDS_NS;
        }
    }

    /// Whether `s`'s peer is a socket of this host sampled sending within the hold's span.
    fn sender_here(&self, s: &Sample, now_ns: u64) -> bool {
        self.senders.get(&(s.remote, s.local)).is_some_and(|&seen| now_ns.saturating_sub(seen) < RECEIVER_HOLDS_NS)
    }

    /// Whether a receiving socket keeps the program attached at `now_ns`.
    pub(super) fn holds(&self, now_ns: u64) -> bool {
        now_ns < self.until_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::sample::SampleReason;

    const SEC: u64 = 1_000_000_000;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    /// A receiving socket at 198.18.0.2:5201 from 198.18.0.1:40000 whose out-of-order count is
    /// `ooo`.
    fn receiver(ooo: u32) -> Sample {
        let mut s = crate::analysis::flow_table::tests::sample(2, 0);
        (s.local, s.remote) = (addr("198.18.0.2:5201"), addr("198.18.0.1:40000"));
        s.receive.ooo_segments = ooo;
        s
    }

    /// Its sender's socket, when it is on this host.
    fn sender() -> Sample {
        let mut s = crate::analysis::flow_table::tests::sample(1, 0);
        (s.local, s.remote) = (addr("198.18.0.1:40000"), addr("198.18.0.2:5201"));
        s.bytes_sent = 10 << 20;
        s
    }

    #[test]
    fn a_receiver_taking_segments_out_of_order_holds_for_ten_seconds() {
        let mut hold = ReceiverHold::default();
        hold.note(&[receiver(3)], 0);
        assert!(!hold.holds(0), "a first count is no movement");
        hold.note(&[receiver(5)], SEC);
        assert!(hold.holds(SEC) && hold.holds(10 * SEC));
        assert!(!hold.holds(11 * SEC));
        hold.note(&[receiver(5)], 12 * SEC);
        assert!(!hold.holds(12 * SEC), "a count that stays is no hole");
    }

    #[test]
    fn a_receiver_whose_sender_is_on_this_host_holds_nothing() {
        let mut hold = ReceiverHold::default();
        hold.note(&[receiver(3), sender()], 0);
        hold.note(&[receiver(5), sender()], SEC);
        assert!(!hold.holds(SEC), "the pair is known from one batch, whatever its order");
        // Its sender closed (or went unsampled past the span): the receiver holds again.
        let closing = Sample { reason: SampleReason::Destroy, ..sender() };
        hold.note(&[closing], 2 * SEC);
        hold.note(&[receiver(7)], 3 * SEC);
        assert!(hold.holds(3 * SEC));
    }
}
