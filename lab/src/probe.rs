//! UDP measurement probes: sequence-numbered, timestamped datagrams for RTT
//! (echo ping-pong), one-way delivery counts and ordering checks.
//!
//! Probe layout (little endian): magic u32, sequence u64, send time u64
//! (CLOCK_MONOTONIC ns of the sending process), then zero padding.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::addr::ensure_lab_addr;
use crate::error::LabError;
use crate::netns::{Netns, NsThread};
use rustix::event::PollFlags;
use rustix::net::{sockopt, RecvFlags, SendFlags, SocketType};

use crate::sys::{self, is_would_block, monotonic_ns, pollfd, EventFd};

const MAGIC: u32 = 0x4343_5450; // "CCTP"
const HEADER: usize = 20;
const MAX_PAYLOAD: usize = 1400;
const MAX_PROBES: u64 = 10_000_000;
/// Receive buffer asked for on probe receivers: bursts released by the
/// emulator must not overflow the socket and masquerade as path loss.
const PROBE_RCVBUF: usize = 8 << 20;

fn encode(buf: &mut [u8], seq: u64, send_ns: u64) {
    buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    buf[4..12].copy_from_slice(&seq.to_le_bytes());
    buf[12..20].copy_from_slice(&send_ns.to_le_bytes());
}

/// (sequence, send time) of a well-formed probe.
fn decode(buf: &[u8]) -> Option<(u64, u64)> {
    if buf.len() < HEADER || buf[0..4] != MAGIC.to_le_bytes() {
        return None;
    }
    let seq = u64::from_le_bytes(buf[4..12].try_into().ok()?);
    let ts = u64::from_le_bytes(buf[12..20].try_into().ok()?);
    Some((seq, ts))
}

fn udp_socket(bind: SocketAddrV4) -> Result<OwnedFd> {
    let fd = sys::socket_for(bind.into(), SocketType::DGRAM).context("socket")?;
    // SO_RCVBUFFORCE: unlike SO_RCVBUF it is not capped by the host-wide net.core.rmem_max,
    // which we must not change from inside a lab.
    if sockopt::set_socket_recv_buffer_size_force(&fd, PROBE_RCVBUF).is_err() {
        sockopt::set_socket_recv_buffer_size(&fd, PROBE_RCVBUF).context("SO_RCVBUF")?;
    }
    rustix::net::bind(&fd, &bind).with_context(|| format!("bind {bind}"))?;
    Ok(fd)
}

fn recv_from(fd: &OwnedFd, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddrV4)> {
    let (n, _, from) = rustix::net::recvfrom(fd, buf, RecvFlags::empty())?;
    match from.map(SocketAddr::try_from) {
        Some(Ok(SocketAddr::V4(from))) => Ok((n, from)),
        _ => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "a datagram not from an IPv4 address")),
    }
}

fn send_to(fd: &OwnedFd, buf: &[u8], to: SocketAddrV4) -> std::io::Result<usize> {
    Ok(rustix::net::sendto(fd, buf, SendFlags::empty(), &to)?)
}

/// Sends one datagram, waiting out transient local back-pressure (a full
/// socket buffer or device queue reports EAGAIN/ENOBUFS) instead of
/// silently counting the probe as sent.
fn send_probe(fd: &OwnedFd, buf: &[u8], to: SocketAddrV4, deadline: Instant) -> Result<bool> {
    loop {
        match send_to(fd, buf, to) {
            Ok(_) => return Ok(true),
            Err(e) if is_would_block(&e) || e.raw_os_error() == Some(libc::ENOBUFS) => {
                if Instant::now() >= deadline {
                    return Ok(false);
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("sendto {to}")),
        }
    }
}

/// A UDP server started on a thread in a namespace; stops on drop.
#[derive(Debug)]
struct UdpServer {
    local: SocketAddrV4,
    stop: Arc<EventFd>,
    thread: Option<NsThread<Result<()>>>,
}

impl UdpServer {
    fn start(
        ns: &Netns,
        name: &str,
        bind: SocketAddrV4,
        mut on_datagram: impl FnMut(&OwnedFd, &[u8], SocketAddrV4) + Send + 'static,
    ) -> Result<Self> {
        ensure_lab_addr(*bind.ip())?;
        let stop = Arc::new(EventFd::new().context("eventfd")?);
        let t_stop = stop.clone();
        let (tx, rx) = mpsc::sync_channel(1);
        let thread = ns.spawn_thread(name, move || -> Result<()> {
            let fd = match udp_socket(bind).and_then(|fd| {
                let local = match sys::local_addr(fd.as_fd())? {
                    SocketAddr::V4(local) => local,
                    other => bail!("an IPv4 socket bound to {other}"),
                };
                Ok((fd, local))
            }) {
                Ok((fd, local)) => {
                    let _ = tx.send(Ok(local));
                    fd
                }
                Err(e) => {
                    let _ = tx.send(Err(anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            sys::raise_thread_priority();
            let mut buf = vec![0u8; 2048];
            loop {
                let mut p = [pollfd(t_stop.fd(), PollFlags::IN), pollfd(fd.as_fd(), PollFlags::IN)];
                sys::ppoll(&mut p, None).context("ppoll")?;
                if !p[0].revents().is_empty() {
                    return Ok(());
                }
                loop {
                    match recv_from(&fd, &mut buf) {
                        Ok((n, from)) => on_datagram(&fd, &buf[..n], from),
                        Err(e) if is_would_block(&e) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e).context("recvfrom"),
                    }
                }
            }
        })?;
        match rx.recv() {
            Ok(Ok(local)) => Ok(Self { local, stop, thread: Some(thread) }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e.context(format!("{name} on {bind} in {}", ns.name())))
            }
            Err(_) => {
                let _ = thread.join();
                bail!("{name} thread exited before binding")
            }
        }
    }
}

impl Drop for UdpServer {
    fn drop(&mut self) {
        self.stop.signal();
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => log::warn!("udp server: {e:#}"),
                Err(_) => log::error!("udp server thread panicked"),
            }
        }
    }
}

/// Echoes every probe back to its sender (for [`udp_ping`]).
#[derive(Debug)]
pub struct UdpEcho {
    server: UdpServer,
}

impl UdpEcho {
    /// Binds `addr:port` in `ns` (port 0 picks one).
    pub fn start(ns: &Netns, addr: Ipv4Addr, port: u16) -> Result<UdpEcho> {
        let server = UdpServer::start(ns, "cct-udp-echo", SocketAddrV4::new(addr, port), {
            move |fd, data, from| {
                // Only answer our own probes, and only inside the lab.
                if decode(data).is_some() && crate::addr::is_lab_addr(*from.ip()) {
                    let _ = send_to(fd, data, from);
                }
            }
        })?;
        Ok(UdpEcho { server })
    }

    pub fn port(&self) -> u16 {
        self.server.local.port()
    }
}

/// Counters of a [`UdpCounter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpCounterStats {
    pub received: u64,
    /// Probes whose sequence number was below one already seen.
    pub out_of_order: u64,
    /// Highest sequence number seen plus one (0 if none).
    pub next_expected: u64,
}

/// Counts one-way probes (from [`udp_blast`]) and checks their order.
#[derive(Debug)]
pub struct UdpCounter {
    server: UdpServer,
    received: Arc<AtomicU64>,
    out_of_order: Arc<AtomicU64>,
    next_expected: Arc<AtomicU64>,
}

impl UdpCounter {
    pub fn start(ns: &Netns, addr: Ipv4Addr, port: u16) -> Result<UdpCounter> {
        let received = Arc::new(AtomicU64::new(0));
        let out_of_order = Arc::new(AtomicU64::new(0));
        let next_expected = Arc::new(AtomicU64::new(0));
        let (r, o, n) = (received.clone(), out_of_order.clone(), next_expected.clone());
        let server = UdpServer::start(ns, "cct-udp-count", SocketAddrV4::new(addr, port), move |_, data, _| {
            if let Some((seq, _)) = decode(data) {
                r.fetch_add(1, Ordering::Relaxed);
                if seq < n.load(Ordering::Relaxed) {
                    o.fetch_add(1, Ordering::Relaxed);
                } else {
                    n.store(seq + 1, Ordering::Relaxed);
                }
            }
        })?;
        Ok(UdpCounter { server, received, out_of_order, next_expected })
    }

    pub fn port(&self) -> u16 {
        self.server.local.port()
    }

    pub fn stats(&self) -> UdpCounterStats {
        UdpCounterStats {
            received: self.received.load(Ordering::Relaxed),
            out_of_order: self.out_of_order.load(Ordering::Relaxed),
            next_expected: self.next_expected.load(Ordering::Relaxed),
        }
    }
}

fn validate_probe(count: u64, payload_len: usize) -> Result<(), LabError> {
    if count == 0 || count > MAX_PROBES {
        return Err(LabError::InvalidArgument(format!("probe count {count} not in 1..={MAX_PROBES}")));
    }
    if !(HEADER..=MAX_PAYLOAD).contains(&payload_len) {
        return Err(LabError::InvalidArgument(format!("probe payload {payload_len} not in {HEADER}..={MAX_PAYLOAD}")));
    }
    Ok(())
}

/// Options for [`udp_ping`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingOptions {
    pub count: u64,
    /// Gap between probes (they are not stop-and-wait).
    pub interval: Duration,
    /// Datagram size, at least 20 bytes.
    pub payload_len: usize,
    /// How long to wait for stragglers after the last probe.
    pub timeout: Duration,
}

impl Default for PingOptions {
    fn default() -> Self {
        Self { count: 300, interval: Duration::from_millis(5), payload_len: 64, timeout: Duration::from_secs(1) }
    }
}

/// RTT samples of a [`udp_ping`] run.
#[derive(Debug, Clone, PartialEq)]
pub struct PingReport {
    pub sent: u64,
    /// Indexed by sequence number; `None` = no reply.
    pub rtts: Vec<Option<Duration>>,
    /// Replies that arrived after a reply with a higher sequence number.
    pub out_of_order: u64,
}

impl PingReport {
    pub fn received(&self) -> u64 {
        self.rtts.iter().flatten().count() as u64
    }

    /// RTT samples, sorted ascending.
    pub fn sorted(&self) -> Vec<Duration> {
        let mut v: Vec<Duration> = self.rtts.iter().flatten().copied().collect();
        v.sort_unstable();
        v
    }

    /// Nearest-rank percentile, `q` in [0, 1].
    pub fn percentile(&self, q: f64) -> Option<Duration> {
        let v = self.sorted();
        if v.is_empty() {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
        v.get(rank.saturating_sub(1).min(v.len() - 1)).copied()
    }
}

/// Sends `count` timestamped probes from `ns` to a [`UdpEcho`] at
/// `dst:port`, one every `interval`, and collects the RTTs.
pub fn udp_ping(ns: &Netns, dst: Ipv4Addr, port: u16, opts: PingOptions) -> Result<PingReport> {
    ensure_lab_addr(dst)?;
    validate_probe(opts.count, opts.payload_len)?;
    let peer = SocketAddrV4::new(dst, port);
    let t = ns.spawn_thread("cct-udp-ping", move || ping_loop(peer, &opts))?;
    t.join().map_err(|_| anyhow!("ping thread panicked"))?
}

fn ping_loop(peer: SocketAddrV4, opts: &PingOptions) -> Result<PingReport> {
    // Our own wake-up latency would be added to every RTT sample.
    sys::raise_thread_priority();
    sys::set_min_timer_slack();
    let fd = udp_socket(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
    let count = opts.count;
    let mut rtts = vec![None; count as usize];
    let mut out_of_order = 0;
    let mut next_expected = 0u64;
    let mut received = 0u64;
    let mut tx = vec![0u8; opts.payload_len];
    let mut rx = vec![0u8; 2048];
    let start = Instant::now();
    let mut sent = 0u64;
    let mut final_deadline = None;
    loop {
        let now = Instant::now();
        if sent < count {
            let due = start + opts.interval.saturating_mul(sent as u32);
            if now >= due {
                encode(&mut tx, sent, monotonic_ns());
                if send_probe(&fd, &tx, peer, now + opts.interval.max(Duration::from_millis(10)))? {
                    sent += 1;
                } else {
                    bail!("could not send probe {sent}: socket stayed busy");
                }
                continue;
            }
        } else if final_deadline.is_none() {
            final_deadline = Some(now + opts.timeout);
        }
        if received == count || final_deadline.is_some_and(|d| now >= d) {
            break;
        }
        let wake = match final_deadline {
            Some(d) => d,
            None => start + opts.interval.saturating_mul(sent as u32),
        };
        let mut p = [pollfd(fd.as_fd(), PollFlags::IN)];
        sys::ppoll(&mut p, Some(wake.saturating_duration_since(now))).context("ppoll")?;
        loop {
            match recv_from(&fd, &mut rx) {
                Ok((n, from)) => {
                    let arrived = monotonic_ns();
                    let Some((seq, ts)) = decode(&rx[..n]) else {
                        continue;
                    };
                    if from != peer || seq >= count {
                        continue;
                    }
                    if let Some(slot @ None) = rtts.get_mut(seq as usize) {
                        *slot = Some(Duration::from_nanos(arrived.saturating_sub(ts)));
                        received += 1;
                    }
                    if seq < next_expected {
                        out_of_order += 1;
                    } else {
                        next_expected = seq + 1;
                    }
                }
                Err(e) if is_would_block(&e) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("recvfrom"),
            }
        }
    }
    Ok(PingReport { sent, rtts, out_of_order })
}

/// Options for [`udp_blast`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlastOptions {
    pub count: u64,
    /// Average send rate in datagrams per second.
    pub rate_pps: u64,
    pub payload_len: usize,
}

/// Sends `count` sequence-numbered probes from `ns` to `dst:port` (e.g. a
/// [`UdpCounter`]) at `rate_pps`; returns how many were sent.
pub fn udp_blast(ns: &Netns, dst: Ipv4Addr, port: u16, opts: BlastOptions) -> Result<u64> {
    ensure_lab_addr(dst)?;
    validate_probe(opts.count, opts.payload_len)?;
    if opts.rate_pps == 0 || opts.rate_pps > 10_000_000 {
        return Err(LabError::InvalidArgument("rate_pps must be in 1..=10^7".into()).into());
    }
    let peer = SocketAddrV4::new(dst, port);
    let t = ns.spawn_thread("cct-udp-blast", move || -> Result<u64> {
        let fd = udp_socket(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
        let mut tx = vec![0u8; opts.payload_len];
        let start = Instant::now();
        for seq in 0..opts.count {
            // Send every probe that is due, then sleep until the next one.
            let due = start + Duration::from_nanos(seq * 1_000_000_000 / opts.rate_pps);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            encode(&mut tx, seq, monotonic_ns());
            if !send_probe(&fd, &tx, peer, Instant::now() + Duration::from_secs(1))? {
                return Ok(seq);
            }
        }
        Ok(opts.count)
    })?;
    t.join().map_err(|_| anyhow!("blast thread panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_roundtrip() {
        let mut b = [0u8; 64];
        encode(&mut b, 42, 123_456);
        assert_eq!(decode(&b), Some((42, 123_456)));
        assert_eq!(decode(&b[..10]), None);
        b[0] ^= 1;
        assert_eq!(decode(&b), None);
    }

    #[test]
    fn percentiles() {
        let r = PingReport {
            sent: 4,
            rtts: vec![
                Some(Duration::from_millis(4)),
                None,
                Some(Duration::from_millis(1)),
                Some(Duration::from_millis(2)),
            ],
            out_of_order: 0,
        };
        assert_eq!(r.received(), 3);
        assert_eq!(r.percentile(0.5), Some(Duration::from_millis(2)));
        assert_eq!(r.percentile(0.99), Some(Duration::from_millis(4)));
        assert_eq!(r.percentile(0.0), Some(Duration::from_millis(1)));
    }
}
