//! TCP traffic generators: a discard [`Sink`] and a [`Sender`] with bulk,
//! paced (application-limited) and bulk-then-trickle modes.
//!
//! Each runs on its own thread inside a lab namespace, talks only to lab
//! addresses, and is bounded: a sender stops at its duration (and optional
//! byte budget); a sink stops when dropped.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::addr::ensure_lab_ip;
use crate::error::LabError;
use crate::netns::{ensure_congestion_control, Netns, NsThread};
use rustix::event::PollFlags;
use rustix::net::{sockopt, SocketType};

use crate::sys::{self, is_would_block, pollfd, EventFd};

/// Longest run any generator accepts: keeps every run bounded even if a
/// caller computes a duration wrongly.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a sender waits, after its last write, for the receiver to read
/// everything and close (the FIN exchange) before closing anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);
const IO_CHUNK: usize = 256 * 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicked generator thread cannot leave these plain counters in a
    // state worth refusing to read.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn thread_result<T>(r: std::thread::Result<Result<T>>, what: &str) -> Result<T> {
    r.map_err(|_| anyhow!("{what} thread panicked"))?
}

// ---------------------------------------------------------------- sink ---

/// Options for [`Sink::start`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkOptions {
    /// SO_RCVBUF for the listener (inherited by accepted connections); a
    /// small value makes the flows receive-window limited. Note the kernel
    /// doubles it and caps it at net.core.rmem_max.
    pub rcvbuf: Option<usize>,
}

/// One connection accepted by a [`Sink`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkConnection {
    pub peer: SocketAddr,
    pub bytes: u64,
    /// False once the peer closed (EOF) or reset the connection.
    pub open: bool,
}

/// A TCP listener that accepts any number of connections and discards what
/// they send. Stops and joins its thread on drop.
#[derive(Debug)]
pub struct Sink {
    local: SocketAddr,
    stop: Arc<EventFd>,
    conns: Arc<Mutex<Vec<SinkConnection>>>,
    thread: Option<NsThread<Result<()>>>,
}

impl Sink {
    /// Listens on `addr:port` inside `ns` (port 0 picks a free port); IPv4 or IPv6.
    pub fn start(ns: &Netns, addr: impl Into<IpAddr>, port: u16, opts: SinkOptions) -> Result<Sink> {
        let addr = addr.into();
        ensure_lab_ip(addr)?;
        let stop = Arc::new(EventFd::new().context("eventfd")?);
        let conns = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::sync_channel(1);
        let (t_stop, t_conns) = (stop.clone(), conns.clone());
        let thread = ns.spawn_thread("cct-sink", move || -> Result<()> {
            let listener = match listen(SocketAddr::new(addr, port), &opts) {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(anyhow!("{e:#}")));
                    return Err(e);
                }
            };
            let _ = tx.send(sys::local_addr(listener.as_fd()).map_err(anyhow::Error::from));
            sink_loop(&listener, &t_stop, &t_conns)
        })?;
        match rx.recv() {
            Ok(Ok(local)) => Ok(Sink { local, stop, conns, thread: Some(thread) }),
            Ok(Err(e)) => {
                stop.signal();
                let _ = thread.join();
                Err(e.context(format!("sink on {addr}:{port} in {}", ns.name())))
            }
            Err(_) => {
                let r = thread.join();
                thread_result(r, "sink")?;
                bail!("sink thread exited before listening")
            }
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn port(&self) -> u16 {
        self.local.port()
    }

    /// Every connection accepted so far, in accept order.
    pub fn connections(&self) -> Vec<SinkConnection> {
        lock(&self.conns).clone()
    }

    /// Bytes received over all connections.
    pub fn total_bytes(&self) -> u64 {
        lock(&self.conns).iter().map(|c| c.bytes).sum()
    }

    /// Stops accepting and reading, closes every connection, joins the
    /// thread and returns its outcome (idempotent).
    pub fn stop(&mut self) -> Result<()> {
        self.stop.signal();
        match self.thread.take() {
            Some(t) => thread_result(t.join(), "sink"),
            None => Ok(()),
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            log::warn!("sink: {e:#}");
        }
    }
}

fn listen(addr: SocketAddr, opts: &SinkOptions) -> Result<OwnedFd> {
    let fd = sys::socket_for(addr, SocketType::STREAM).context("socket")?;
    sockopt::set_socket_reuseaddr(&fd, true).context("SO_REUSEADDR")?;
    if let Some(rcvbuf) = opts.rcvbuf {
        // Must precede listen(): the window scale is fixed at the handshake.
        sockopt::set_socket_recv_buffer_size(&fd, clamp_int(rcvbuf)).context("SO_RCVBUF")?;
    }
    rustix::net::bind(&fd, &addr).with_context(|| format!("bind {addr}"))?;
    rustix::net::listen(&fd, 128).context("listen")?;
    Ok(fd)
}

/// A buffer size as the kernel's `int` option takes it (larger ones are clamped to its maximum).
fn clamp_int(v: usize) -> usize {
    v.min(i32::MAX as usize)
}

/// One thread multiplexes the listener and all connections with ppoll.
fn sink_loop(listener: &OwnedFd, stop: &EventFd, shared: &Mutex<Vec<SinkConnection>>) -> Result<()> {
    let mut buf = vec![0u8; IO_CHUNK];
    // (socket, index into `shared`)
    let mut conns: Vec<(OwnedFd, usize)> = Vec::new();
    loop {
        // Which descriptors are ready, the poll set (which borrows them) dropped before the
        // connections change.
        let (stopped, listener_ready, ready) = {
            let mut pfds = Vec::with_capacity(conns.len() + 2);
            pfds.push(pollfd(stop.fd(), PollFlags::IN));
            pfds.push(pollfd(listener.as_fd(), PollFlags::IN));
            pfds.extend(conns.iter().map(|(fd, _)| pollfd(fd.as_fd(), PollFlags::IN)));
            sys::ppoll(&mut pfds, None).context("ppoll")?;
            let ready: Vec<usize> =
                pfds[2..].iter().enumerate().filter(|(_, p)| !p.revents().is_empty()).map(|(i, _)| i).collect();
            (!pfds[0].revents().is_empty(), !pfds[1].revents().is_empty(), ready)
        };
        if stopped {
            return Ok(());
        }
        if listener_ready {
            loop {
                match sys::accept(listener.as_fd()) {
                    Ok((fd, peer)) => {
                        let mut s = lock(shared);
                        s.push(SinkConnection { peer, bytes: 0, open: true });
                        conns.push((fd, s.len() - 1));
                    }
                    Err(e) if is_would_block(&e) => break,
                    // That one peer is gone (or a signal hit): keep serving.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EPROTO | libc::EINTR)) => {}
                    Err(e) => return Err(e).context("accept"),
                }
            }
        }
        let mut closed = Vec::new();
        for i in ready {
            let (fd, idx) = &conns[i];
            let (got, eof) = drain_socket(fd.as_fd(), &mut buf);
            let mut s = lock(shared);
            s[*idx].bytes += got;
            if eof {
                s[*idx].open = false;
                closed.push(i);
            }
        }
        // Dropping the fd closes our side; the peer's FIN was already read,
        // so this is an orderly close.
        for i in closed.into_iter().rev() {
            conns.swap_remove(i);
        }
    }
}

/// Reads what is available (a bounded amount, for fairness between
/// connections). Returns (bytes read, connection finished).
fn drain_socket(fd: BorrowedFd<'_>, buf: &mut [u8]) -> (u64, bool) {
    let mut total = 0;
    for _ in 0..16 {
        match sys::read(fd, buf) {
            Ok(0) => return (total, true),
            Ok(n) => total += n as u64,
            Err(e) if is_would_block(&e) => return (total, false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return (total, true),
        }
    }
    (total, false)
}

// -------------------------------------------------------------- sender ---

/// How a [`Sender`] produces data.
#[derive(Debug, Clone, PartialEq)]
pub enum SendMode {
    /// Write as fast as the socket accepts (network/cwnd limited).
    Bulk,
    /// Application-limited: `write_size`-byte writes at an average of
    /// `rate_bps` (e.g. 25 Mbit/s in 64 KiB chunks for video, 0.5 Mbit/s in
    /// 1 KiB writes for a thin stream).
    Paced { rate_bps: u64, write_size: usize },
    /// Bulk for `bulk_for`, then keep the connection open writing
    /// `trickle_bytes` every `trickle_every` (0 bytes = fully idle) until the
    /// duration ends.
    BulkThenTrickle { bulk_for: Duration, trickle_every: Duration, trickle_bytes: usize },
}

/// Options for [`Sender::start`].
#[derive(Debug, Clone, PartialEq)]
pub struct SenderOptions {
    /// TCP_CONGESTION for this socket ("cubic", "bbr", "reno", ...).
    pub congestion: Option<String>,
    pub mode: SendMode,
    /// Sending stops after this long (then the connection is closed).
    pub duration: Duration,
    /// Sending also stops once this many bytes were written.
    pub max_bytes: Option<u64>,
    /// SO_SNDBUF (fixes the buffer, disabling send autotuning).
    pub sndbuf: Option<usize>,
    /// TCP_NODELAY (disable Nagle), for small paced writes.
    pub nodelay: bool,
    /// Name of the sending thread (at most 15 bytes show), which the kernel reports as the
    /// socket owner's command name; default `cct-sender`.
    pub name: Option<String>,
    /// Create the socket as a member of this cgroup v2 directory (see [`crate::Cgroup`]), as
    /// if a container in it had opened the connection.
    pub socket_cgroup: Option<std::path::PathBuf>,
}

impl Default for SenderOptions {
    fn default() -> Self {
        Self {
            congestion: None,
            mode: SendMode::Bulk,
            duration: Duration::from_secs(1),
            max_bytes: None,
            sndbuf: None,
            nodelay: false,
            name: None,
            socket_cgroup: None,
        }
    }
}

impl SenderOptions {
    /// A sender using congestion control `cc` in `mode` for `duration`; the rest default.
    pub fn new(cc: &str, mode: SendMode, duration: Duration) -> Self {
        Self { congestion: Some(cc.to_string()), mode, duration, ..Self::default() }
    }

    fn validate(&self) -> Result<(), LabError> {
        let bad = |m: &str| Err(LabError::InvalidArgument(m.into()));
        if self.duration.is_zero() || self.duration > MAX_DURATION {
            return bad("duration must be in (0, 1 h]");
        }
        match self.mode {
            SendMode::Paced { rate_bps, write_size } if rate_bps == 0 || write_size == 0 || write_size > 16 << 20 => {
                bad("paced mode needs rate_bps > 0 and 0 < write_size <= 16 MiB")
            }
            SendMode::BulkThenTrickle { trickle_every, trickle_bytes, .. }
                if trickle_every.is_zero() || trickle_bytes > 16 << 20 =>
            {
                bad("trickle needs trickle_every > 0 and trickle_bytes <= 16 MiB")
            }
            _ => Ok(()),
        }
    }
}

/// What a finished [`Sender`] achieved.
#[derive(Debug, Clone, PartialEq)]
pub struct SenderReport {
    /// Bytes accepted by write().
    pub bytes_written: u64,
    /// Bytes the receiver acknowledged (tcpi_bytes_acked at close).
    pub bytes_acked: u64,
    /// From connection establishment until the receiver acknowledged the
    /// FIN (or the drain timeout).
    pub elapsed: Duration,
    /// `bytes_acked * 8 / elapsed`.
    pub goodput_bps: f64,
    /// tcpi_total_retrans at close: segments retransmitted (`ss`: retrans:x/TOTAL).
    pub total_retrans: u32,
    /// tcpi_dsack_dups at close: retransmissions the receiver reported, by
    /// DSACK, as duplicates of data it already had (spurious ones).
    pub dsack_dups: u32,
    /// tcpi_reord_seen at close: reordering events the sender detected.
    pub reord_seen: u32,
    /// tcpi_reordering at close: the sender's reordering degree estimate, in
    /// packets (3 unless reordering was seen).
    pub reordering: u32,
    /// tcpi_total_rto at close: retransmission timeouts (0 on kernels before 6.7).
    pub total_rto: u16,
    /// tcpi_bytes_retrans at close.
    pub bytes_retrans: u64,
    /// The congestion control the socket actually used.
    pub congestion: String,
    pub local_port: u16,
}

/// A running TCP sender. Dropping it stops it promptly and joins.
#[derive(Debug)]
pub struct Sender {
    local: SocketAddr,
    stop: Arc<EventFd>,
    abort: Arc<AtomicBool>,
    thread: Option<NsThread<Result<SenderReport>>>,
}

impl Sender {
    /// Connects from `ns` to `dst:port` and starts sending in the background.
    /// Returns once the connection is established.
    /// IPv4 or IPv6, as `dst` is.
    pub fn start(ns: &Netns, dst: impl Into<IpAddr>, port: u16, opts: SenderOptions) -> Result<Sender> {
        let dst = dst.into();
        ensure_lab_ip(dst)?;
        opts.validate()?;
        if let Some(cc) = &opts.congestion {
            ensure_congestion_control(cc);
        }
        let stop = Arc::new(EventFd::new().context("eventfd")?);
        let abort = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::sync_channel(1);
        let (t_stop, t_abort) = (stop.clone(), abort.clone());
        let peer = SocketAddr::new(dst, port);
        // The thread name becomes the kernel's comm for the socket's owner: tracers show it.
        let name = opts.name.clone().unwrap_or_else(|| "cct-sender".to_string());
        let thread = ns.spawn_thread(&name, move || run_sender(peer, &opts, &t_stop, &t_abort, tx))?;
        match rx.recv() {
            Ok(local) => Ok(Sender { local, stop, abort, thread: Some(thread) }),
            // The thread only drops the channel without sending on failure.
            Err(_) => Err(thread_result(thread.join(), "sender")
                .err()
                .unwrap_or_else(|| anyhow!("sender exited without connecting"))
                .context(format!("sender to {peer} from {}", ns.name()))),
        }
    }

    /// The sender's ephemeral port: with the addresses it identifies the flow
    /// in traces and `ss` output.
    pub fn local_port(&self) -> u16 {
        self.local.port()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Asks the sender to stop writing now; it still closes cleanly.
    pub fn stop(&self) {
        self.stop.signal();
    }

    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(NsThread::is_finished)
    }

    /// Waits for the sender to finish and returns its report.
    pub fn wait(mut self) -> Result<SenderReport> {
        match self.thread.take() {
            Some(t) => thread_result(t.join(), "sender"),
            None => bail!("sender already joined"),
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.abort.store(true, Ordering::Relaxed);
            self.stop.signal();
            let _ = t.join();
        }
    }
}

/// Whether the sender should go on after a write phase: `Done` once it was
/// stopped or its byte budget is spent; reaching a phase's deadline is
/// `Continue` (the next phase may follow).
#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Continue,
    Done,
}

struct SendState<'a> {
    fd: OwnedFd,
    stop: &'a EventFd,
    written: u64,
    budget: u64,
    zeros: Vec<u8>,
}

impl SendState<'_> {
    fn done(&self) -> bool {
        self.written >= self.budget || self.stop.is_signalled()
    }

    /// Waits until the socket is writable, `deadline` passes or stop is
    /// signalled. Returns false on deadline/stop.
    fn wait_writable(&self, deadline: Instant) -> Result<bool> {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            let mut p = [pollfd(self.stop.fd(), PollFlags::IN), pollfd(self.fd.as_fd(), PollFlags::OUT)];
            sys::ppoll(&mut p, Some(deadline - now)).context("ppoll")?;
            if !p[0].revents().is_empty() {
                return Ok(false);
            }
            if p[1].revents().intersects(PollFlags::ERR | PollFlags::HUP) {
                let err = sockopt::socket_error(&self.fd).ok().and_then(Result::err);
                bail!("connection failed: {}", err.map_or_else(|| std::io::Error::from_raw_os_error(0), Into::into));
            }
            if p[1].revents().contains(PollFlags::OUT) {
                return Ok(true);
            }
        }
    }

    /// Writes up to `len` bytes (fewer if the budget ends), blocking in poll
    /// as needed, until `deadline`.
    fn write(&mut self, len: u64, deadline: Instant) -> Result<Phase> {
        let mut left = len.min(self.budget - self.written);
        // Checked on every write too, not only when the socket is full: with the receiver on
        // the same CPU a send may never find it full, and a bulk write would never end.
        while left > 0 && Instant::now() < deadline {
            let n = left.min(self.zeros.len() as u64) as usize;
            match sys::send(self.fd.as_fd(), &self.zeros[..n]) {
                Ok(w) => {
                    self.written += w as u64;
                    left -= w as u64;
                }
                Err(e) if is_would_block(&e) => {
                    if !self.wait_writable(deadline)? {
                        // Deadline or stop; `done()` tells which.
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("send"),
            }
        }
        Ok(if self.done() { Phase::Done } else { Phase::Continue })
    }

    /// Sleeps until `until` unless stopped first. Returns false if stopped.
    fn sleep_until(&self, until: Instant) -> Result<bool> {
        let now = Instant::now();
        if until <= now {
            return Ok(!self.stop.is_signalled());
        }
        let mut p = [pollfd(self.stop.fd(), PollFlags::IN)];
        sys::ppoll(&mut p, Some(until - now)).context("ppoll")?;
        Ok(p[0].revents().is_empty())
    }

    /// Waits until everything written so far is acknowledged (or `deadline`), so a phase that
    /// follows starts from an empty send queue rather than megabytes of buffered bulk data.
    fn wait_acked(&self, deadline: Instant, abort: &AtomicBool) {
        while !abort.load(Ordering::Relaxed) && !self.stop.is_signalled() && Instant::now() < deadline {
            match sys::tcp_info(self.fd.as_fd()) {
                // tcpi_notsent_bytes: queued, not yet sent; tcpi_unacked: segments in flight.
                Ok(info) if info.tcpi_notsent_bytes == 0 && info.tcpi_unacked == 0 => return,
                Ok(_) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => return,
            }
        }
    }

    fn bulk(&mut self, deadline: Instant) -> Result<Phase> {
        while Instant::now() < deadline {
            if self.write(u64::MAX, deadline)? == Phase::Done {
                return Ok(Phase::Done);
            }
        }
        Ok(Phase::Continue)
    }

    /// `chunk` bytes every `interval` from `start` until `deadline`. If the
    /// network falls behind, the backlog is caught up (like an encoder's
    /// buffer), but never more than one second of it.
    fn paced(&mut self, start: Instant, deadline: Instant, interval: Duration, chunk: u64) -> Result<Phase> {
        let mut next = start;
        while next < deadline && Instant::now() < deadline {
            if !self.sleep_until(next)? {
                return Ok(Phase::Done);
            }
            if chunk > 0 && self.write(chunk, deadline)? == Phase::Done {
                return Ok(Phase::Done);
            }
            next += interval;
            let now = Instant::now();
            if now.saturating_duration_since(next) > Duration::from_secs(1) {
                next = now;
            }
        }
        Ok(Phase::Continue)
    }

    /// Half-closes and waits (bounded) for the receiver to read everything
    /// and close its side, so the connection ends with a FIN exchange.
    fn drain(&self, abort: &AtomicBool) {
        let _ = rustix::net::shutdown(&self.fd, rustix::net::Shutdown::Write);
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        let mut buf = [0u8; 4096];
        while !abort.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let mut p = [pollfd(self.fd.as_fd(), PollFlags::IN)];
            // Short slices so an abort (Sender dropped) is noticed quickly.
            let slice = (deadline - now).min(Duration::from_millis(50));
            if sys::ppoll(&mut p, Some(slice)).is_err() {
                return;
            }
            if !p[0].revents().is_empty() {
                match sys::read(self.fd.as_fd(), &mut buf) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if is_would_block(&e) => {}
                    Err(_) => return,
                }
            }
        }
    }
}

fn connect(peer: SocketAddr, opts: &SenderOptions, stop: &EventFd) -> Result<OwnedFd> {
    let fd = match &opts.socket_cgroup {
        Some(dir) => crate::cgroup::create_sockets_in(dir, || sys::socket_for(peer, SocketType::STREAM))?,
        None => sys::socket_for(peer, SocketType::STREAM),
    }
    .context("socket")?;
    if let Some(cc) = &opts.congestion {
        sockopt::set_tcp_congestion(&fd, cc).with_context(|| format!("TCP_CONGESTION {cc}"))?;
    }
    if let Some(sndbuf) = opts.sndbuf {
        sockopt::set_socket_send_buffer_size(&fd, clamp_int(sndbuf)).context("SO_SNDBUF")?;
    }
    if opts.nodelay {
        sockopt::set_tcp_nodelay(&fd, true).context("TCP_NODELAY")?;
    }
    sys::connect(fd.as_fd(), peer).context("connect")?;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        let now = Instant::now();
        if now >= deadline {
            bail!("connect to {peer} timed out");
        }
        let mut p = [pollfd(stop.fd(), PollFlags::IN), pollfd(fd.as_fd(), PollFlags::OUT)];
        sys::ppoll(&mut p, Some(deadline - now)).context("ppoll")?;
        if !p[0].revents().is_empty() {
            bail!("stopped while connecting");
        }
        if !p[1].revents().is_empty() {
            break;
        }
    }
    if let Err(err) = sockopt::socket_error(&fd).context("SO_ERROR")? {
        return Err(std::io::Error::from(err)).context(format!("connect to {peer}"));
    }
    Ok(fd)
}

fn run_sender(
    peer: SocketAddr,
    opts: &SenderOptions,
    stop: &EventFd,
    abort: &AtomicBool,
    ready: mpsc::SyncSender<SocketAddr>,
) -> Result<SenderReport> {
    let fd = connect(peer, opts, stop)?;
    let local = sys::local_addr(fd.as_fd()).context("getsockname")?;
    let start = Instant::now();
    // The caller is blocked on this; if it vanished we simply run on.
    let _ = ready.send(local);
    drop(ready);

    let mut st =
        SendState { fd, stop, written: 0, budget: opts.max_bytes.unwrap_or(u64::MAX), zeros: vec![0u8; IO_CHUNK] };
    let deadline = start + opts.duration;
    match opts.mode {
        SendMode::Bulk => {
            st.bulk(deadline)?;
        }
        SendMode::Paced { rate_bps, write_size } => {
            let interval = Duration::from_nanos((write_size as u128 * 8_000_000_000 / u128::from(rate_bps)) as u64);
            st.paced(start, deadline, interval, write_size as u64)?;
        }
        SendMode::BulkThenTrickle { bulk_for, trickle_every, trickle_bytes } => {
            let bulk_end = (start + bulk_for).min(deadline);
            if st.bulk(bulk_end)? == Phase::Continue {
                st.wait_acked(deadline, abort);
                let trickle_start = Instant::now().max(bulk_end);
                st.paced(trickle_start, deadline, trickle_every, trickle_bytes as u64)?;
            }
        }
    }
    st.drain(abort);
    let elapsed = start.elapsed();
    let info = sys::tcp_info(st.fd.as_fd()).context("TCP_INFO")?;
    let congestion = sockopt::tcp_congestion(&st.fd).unwrap_or_default();
    let secs = elapsed.as_secs_f64();
    // The acknowledged FIN counts one sequence number: report payload only.
    let bytes_acked = info.tcpi_bytes_acked.min(st.written);
    Ok(SenderReport {
        bytes_written: st.written,
        bytes_acked,
        elapsed,
        goodput_bps: if secs > 0.0 { bytes_acked as f64 * 8.0 / secs } else { 0.0 },
        total_retrans: info.tcpi_total_retrans,
        dsack_dups: info.tcpi_dsack_dups,
        reord_seen: info.tcpi_reord_seen,
        reordering: info.tcpi_reordering,
        total_rto: info.tcpi_total_rto,
        bytes_retrans: info.tcpi_bytes_retrans,
        congestion,
        local_port: local.port(),
    })
    // `st.fd` closes here: the FIN exchange is done (or timed out), so the
    // kernel moves the socket to TIME_WAIT/CLOSE without a reset.
}
