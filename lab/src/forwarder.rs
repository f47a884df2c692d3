//! The userspace packet forwarder between two TUN devices: one thread per
//! direction reads raw IP packets, runs them through a [`LinkModel`] and
//! writes them to the other TUN at their release time.
//!
//! Timing: each thread sleeps in `ppoll` with a nanosecond timeout to the
//! next release (timer slack shrunk to 1 ns), so delay accuracy is bounded by
//! scheduler wake-up latency, not by a millisecond timer wheel. Packets wait
//! in preallocated 2 KiB slots (no per-packet allocation) and are released by
//! due time, ties in arrival order: without jitter due times never decrease,
//! so that is strict arrival order; with jitter later packets may overtake.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::addr::{is_lab_addr, is_lab_addr_v6};
use crate::link::{LinkModel, PathSpec, Verdict};
use rustix::event::PollFlags;

use crate::sys::{self, is_would_block, monotonic_ns, pollfd, EventFd};

/// Slot size: an MTU-1500 IP packet fits with room to spare; anything longer
/// (impossible with offloads off) is truncated by read and dropped below.
const SLOT: usize = 2048;
/// Ring slots per direction (32 MiB of lazily-touched memory). Enough for
/// 1.5 Gbit/s of full-size packets over a 100 ms one-way delay, or the ACK
/// stream of such a flow, before `dropped_other` counts overflow drops.
const RING_SLOTS: usize = 16 * 1024;
/// Packets read per wake-up before releases are serviced again, so a flood
/// on the input cannot delay due releases by more than one batch.
const READ_BATCH: usize = 64;
/// Release lateness above which a packet counts in `late_releases`.
const LATE_NS: u64 = 500_000;

/// Counters for one direction of an [`EmulatedPath`](crate::EmulatedPath).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Packets read from the ingress TUN.
    pub packets_in: u64,
    pub bytes_in: u64,
    /// Dropped by the configured random loss.
    pub dropped_loss: u64,
    /// Dropped by the token-bucket policer (too few tokens).
    pub dropped_policer: u64,
    /// Tail-dropped because the bottleneck queue was full.
    pub dropped_queue: u64,
    /// Dropped for other reasons: not IPv4 inside 198.18.0.0/15 nor IPv6
    /// inside 2001:db8::/32, ring overflow, or an error writing to the
    /// egress TUN.
    pub dropped_other: u64,
    /// Packets written to the egress TUN.
    pub forwarded: u64,
    pub bytes_forwarded: u64,
    /// Largest bottleneck backlog seen, in bytes (0 without a rate cap).
    pub max_queue_bytes: u64,
    /// Largest delay between a packet's release time and its actual write,
    /// in ns: the emulator's own timing error (scheduling latency).
    pub max_release_lateness_ns: u64,
    /// Packets written more than 500 µs after their release time.
    pub late_releases: u64,
    /// Packets written after a packet that arrived later than them (overtaken
    /// by jitter): the count a receiver sees as "sequence below the highest
    /// seen so far". Always 0 without jitter.
    pub reordered: u64,
}

/// Counters for both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    /// Sender to receiver.
    pub forward: DirectionStats,
    /// Receiver to sender.
    pub reverse: DirectionStats,
}

#[derive(Debug, Default)]
struct Counters {
    packets_in: AtomicU64,
    bytes_in: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_policer: AtomicU64,
    dropped_queue: AtomicU64,
    dropped_other: AtomicU64,
    forwarded: AtomicU64,
    bytes_forwarded: AtomicU64,
    max_queue_bytes: AtomicU64,
    max_release_lateness_ns: AtomicU64,
    late_releases: AtomicU64,
    reordered: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> DirectionStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DirectionStats {
            packets_in: g(&self.packets_in),
            bytes_in: g(&self.bytes_in),
            dropped_loss: g(&self.dropped_loss),
            dropped_policer: g(&self.dropped_policer),
            dropped_queue: g(&self.dropped_queue),
            dropped_other: g(&self.dropped_other),
            forwarded: g(&self.forwarded),
            bytes_forwarded: g(&self.bytes_forwarded),
            max_queue_bytes: g(&self.max_queue_bytes),
            max_release_lateness_ns: g(&self.max_release_lateness_ns),
            late_releases: g(&self.late_releases),
            reordered: g(&self.reordered),
        }
    }
}

/// Fixed-capacity store of packets awaiting release, handed out by due time
/// (ties in arrival order). Packets live in preallocated slots; a min-heap of
/// (due time, arrival number, slot) orders them, a free list recycles slots.
struct ReleaseQueue {
    buf: Vec<u8>,
    lens: Vec<u16>,
    free: Vec<u32>,
    due: BinaryHeap<Reverse<(u64, u64, u32)>>,
    next_seq: u64,
}

impl ReleaseQueue {
    fn new(slots: usize) -> Self {
        Self {
            // vec! of zeros is calloc'd: pages are only touched once used.
            buf: vec![0; slots * SLOT],
            lens: vec![0; slots],
            // Popped from the back: slot 0 first, so the low pages are reused.
            free: (0..slots as u32).rev().collect(),
            due: BinaryHeap::with_capacity(slots),
            next_seq: 0,
        }
    }

    fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    /// The slot the next pushed packet will occupy (read straight into it).
    /// Must not be called when full.
    fn tail_slot(&mut self) -> &mut [u8] {
        let i = *self.free.last().expect("tail_slot on a full queue") as usize;
        &mut self.buf[i * SLOT..(i + 1) * SLOT]
    }

    /// Commits the packet already written into `tail_slot`.
    fn push(&mut self, len: usize, release_ns: u64) {
        let Some(i) = self.free.pop() else { return };
        self.lens[i as usize] = len as u16;
        self.due.push(Reverse((release_ns, self.next_seq, i)));
        self.next_seq += 1;
    }

    /// The packet due first: (due time, arrival number, bytes).
    fn front(&self) -> Option<(u64, u64, &[u8])> {
        self.due.peek().map(|Reverse((rel, seq, i))| {
            let start = *i as usize * SLOT;
            (*rel, *seq, &self.buf[start..start + self.lens[*i as usize] as usize])
        })
    }

    fn pop(&mut self) {
        if let Some(Reverse((_, _, i))) = self.due.pop() {
            self.free.push(i);
        }
    }
}

/// Only IP packets between lab addresses are forwarded: a last line of
/// defence so nothing else can ever cross the emulator.
fn is_forwardable(pkt: &[u8]) -> bool {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => {
            let src = std::net::Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
            let dst = std::net::Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
            is_lab_addr(src) && is_lab_addr(dst)
        }
        Some(6) if pkt.len() >= 40 => {
            let addr = |at: usize| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&pkt[at..at + 16]);
                std::net::Ipv6Addr::from(o)
            };
            is_lab_addr_v6(addr(8)) && is_lab_addr_v6(addr(24))
        }
        _ => false,
    }
}

struct Direction {
    input: Arc<OwnedFd>,
    output: Arc<OwnedFd>,
    model: LinkModel,
    counters: Arc<Counters>,
    stop: Arc<EventFd>,
    /// One past the highest arrival number written so far: a packet written
    /// with a lower number was overtaken.
    next_in_order: Option<u64>,
}

impl Direction {
    fn run(mut self) {
        sys::set_min_timer_slack();
        sys::raise_thread_priority();
        let mut ring = ReleaseQueue::new(RING_SLOTS);
        let mut scratch = vec![0u8; SLOT];
        // Owned apart from `self`, which the loop borrows mutably.
        let (input_fd, output_fd) = (Arc::clone(&self.input), Arc::clone(&self.output));
        let (input, output) = (input_fd.as_fd(), output_fd.as_fd());
        loop {
            let out_blocked = self.release_due(&mut ring, output);
            let (batch_full, input_dead) = self.read_batch(&mut ring, &mut scratch, input);
            if input_dead {
                log::warn!("emulator input TUN failed; direction stopped");
                return;
            }
            if batch_full {
                // More may be waiting: service releases, then read again
                // without sleeping, unless asked to stop (a flood must not
                // keep the loop from ever reaching ppoll's stop check).
                if self.stop.is_signalled() {
                    return;
                }
                continue;
            }

            let timeout = if out_blocked {
                // Writable again is signalled through POLLOUT; the timeout is
                // only a safety net.
                Some(Duration::from_millis(1))
            } else {
                ring.front().map(|(rel, _, _)| Duration::from_nanos(rel.saturating_sub(monotonic_ns())))
            };
            let mut pfds =
                [pollfd(self.stop.fd(), PollFlags::IN), pollfd(input, PollFlags::IN), pollfd(output, PollFlags::OUT)];
            let n = if out_blocked { 3 } else { 2 };
            if let Err(e) = sys::ppoll(&mut pfds[..n], timeout) {
                log::warn!("emulator ppoll failed: {e}; direction stopped");
                return;
            }
            if !pfds[0].revents().is_empty() {
                return;
            }
            if pfds[1].revents().intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL) {
                log::warn!("emulator input TUN went away; direction stopped");
                return;
            }
        }
    }

    /// Writes every packet whose release time has come. Returns true if the
    /// output TUN pushed back (EAGAIN), in which case the head stays queued.
    fn release_due(&mut self, ring: &mut ReleaseQueue, output: BorrowedFd<'_>) -> bool {
        let c = &*self.counters;
        while let Some((release_ns, seq, pkt)) = ring.front() {
            // Fresh per packet: each write runs the far stack's receive path
            // in this thread, so time advances noticeably within a burst.
            let now = monotonic_ns();
            if release_ns > now {
                break;
            }
            match sys::write(output, pkt) {
                Ok(n) => {
                    Counters::add(&c.forwarded, 1);
                    Counters::add(&c.bytes_forwarded, n as u64);
                    let late = now - release_ns;
                    if late > LATE_NS {
                        Counters::add(&c.late_releases, 1);
                    }
                    c.max_release_lateness_ns.fetch_max(late, Ordering::Relaxed);
                    match self.next_in_order {
                        Some(next) if seq < next => Counters::add(&c.reordered, 1),
                        _ => self.next_in_order = Some(seq + 1),
                    }
                }
                Err(e) if is_would_block(&e) => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // E.g. the far interface is down: the packet is lost, as it
                // would be on a real link, and counted.
                Err(_) => Counters::add(&c.dropped_other, 1),
            }
            ring.pop();
        }
        false
    }

    /// Reads up to READ_BATCH packets. Returns (read a full batch, input
    /// failed permanently).
    fn read_batch(&mut self, ring: &mut ReleaseQueue, scratch: &mut [u8], input: BorrowedFd<'_>) -> (bool, bool) {
        let c = &*self.counters;
        for _ in 0..READ_BATCH {
            let full = ring.is_full();
            let buf = if full { &mut *scratch } else { ring.tail_slot() };
            let n = match sys::read(input, buf) {
                Ok(n) => n,
                Err(e) if is_would_block(&e) => return (false, false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return (false, true),
            };
            let now = monotonic_ns();
            Counters::add(&c.packets_in, 1);
            Counters::add(&c.bytes_in, n as u64);
            if n >= SLOT || full || !is_forwardable(&buf[..n]) {
                Counters::add(&c.dropped_other, 1);
                continue;
            }
            match self.model.admit(now, n) {
                Verdict::Lost => Counters::add(&c.dropped_loss, 1),
                Verdict::Policed => Counters::add(&c.dropped_policer, 1),
                Verdict::QueueFull => Counters::add(&c.dropped_queue, 1),
                Verdict::Deliver { release_ns, backlog_bytes } => {
                    c.max_queue_bytes.fetch_max(backlog_bytes, Ordering::Relaxed);
                    ring.push(n, release_ns);
                }
            }
        }
        (true, false)
    }
}

/// Both forwarding threads; stopping is prompt (an eventfd in every poll
/// set) and happens on drop.
#[derive(Debug)]
pub(crate) struct Forwarder {
    stop: Arc<EventFd>,
    threads: Vec<JoinHandle<()>>,
    forward: Arc<Counters>,
    reverse: Arc<Counters>,
}

impl Forwarder {
    /// Forwards `sender_tun` -> `receiver_tun` with `fwd` and the reverse
    /// with `rev`. Both fds must be non-blocking.
    pub(crate) fn start(
        sender_tun: OwnedFd,
        receiver_tun: OwnedFd,
        fwd: &PathSpec,
        rev: &PathSpec,
        seed: u64,
    ) -> Result<Self> {
        let stop = Arc::new(EventFd::new().context("eventfd")?);
        let s = Arc::new(sender_tun);
        let r = Arc::new(receiver_tun);
        let mut me = Self { stop, threads: Vec::with_capacity(2), forward: Arc::default(), reverse: Arc::default() };
        // Distinct, fixed streams per direction derived from one seed.
        let dirs = [
            ("cct-emu-fwd", &s, &r, fwd, seed, me.forward.clone()),
            ("cct-emu-rev", &r, &s, rev, seed ^ 0xA5A5_5A5A_DEAD_BEEF, me.reverse.clone()),
        ];
        for (name, input, output, spec, seed, counters) in dirs {
            let dir = Direction {
                input: input.clone(),
                output: output.clone(),
                model: LinkModel::new(spec, seed),
                counters,
                stop: me.stop.clone(),
                next_in_order: None,
            };
            // On error `me` drops here and stops the thread already started.
            let handle = thread::Builder::new()
                .name(name.into())
                .spawn(move || dir.run())
                .with_context(|| format!("spawning {name}"))?;
            me.threads.push(handle);
        }
        Ok(me)
    }

    pub(crate) fn stats(&self) -> PathStats {
        PathStats { forward: self.forward.snapshot(), reverse: self.reverse.snapshot() }
    }

    /// Stops and joins both threads (idempotent).
    pub(crate) fn shutdown(&mut self) {
        self.stop.signal();
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                log::error!("emulator thread panicked");
            }
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_is_fifo_for_equal_or_rising_due_times_and_bounded() {
        let mut r = ReleaseQueue::new(2);
        r.tail_slot()[0] = 1;
        r.push(1, 10);
        r.tail_slot()[0] = 2;
        r.push(1, 10);
        assert!(r.is_full());
        assert_eq!(r.front(), Some((10, 0, &[1u8][..])));
        r.pop();
        r.tail_slot()[0] = 3;
        r.push(1, 30);
        assert_eq!(r.front(), Some((10, 1, &[2u8][..])));
        r.pop();
        assert_eq!(r.front(), Some((30, 2, &[3u8][..])));
        r.pop();
        assert!(r.front().is_none());
    }

    #[test]
    fn queue_releases_by_due_time_so_later_packets_overtake() {
        let mut r = ReleaseQueue::new(8);
        for (byte, due) in [(1u8, 50), (2, 20), (3, 40), (4, 20)] {
            r.tail_slot()[0] = byte;
            r.push(1, due);
        }
        let mut order = Vec::new();
        while let Some((due, seq, pkt)) = r.front() {
            order.push((due, seq, pkt[0]));
            r.pop();
        }
        assert_eq!(order, [(20, 1, 2), (20, 3, 4), (40, 2, 3), (50, 0, 1)]);
        // Every slot came back.
        assert_eq!(r.free.len(), 8);
    }

    #[test]
    fn only_lab_ipv4_is_forwarded() {
        let mut p = [0u8; 20];
        p[0] = 0x45;
        p[12..16].copy_from_slice(&[198, 19, 0, 1]);
        p[16..20].copy_from_slice(&[198, 19, 1, 1]);
        assert!(is_forwardable(&p));
        p[16..20].copy_from_slice(&[8, 8, 8, 8]);
        assert!(!is_forwardable(&p));
        p[0] = 0x60;
        assert!(!is_forwardable(&p));
        assert!(!is_forwardable(&p[..10]));
    }

    #[test]
    fn only_lab_ipv6_is_forwarded() {
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        let lab: std::net::Ipv6Addr = "2001:db8:0:4::1".parse().expect("addr");
        let other: std::net::Ipv6Addr = "fe80::1".parse().expect("addr");
        v6[8..24].copy_from_slice(&lab.octets());
        v6[24..40].copy_from_slice(&lab.octets());
        assert!(is_forwardable(&v6));
        assert!(!is_forwardable(&v6[..39]));
        v6[24..40].copy_from_slice(&other.octets());
        assert!(!is_forwardable(&v6));
    }
}
