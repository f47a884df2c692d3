//! The few system calls the lab's emulator and traffic make, through rustix: the eventfd that
//! stops a loop, ppoll with a nanosecond timeout, sockets, the monotonic clock, this thread's
//! timer slack and priority. Two have no rustix call and keep `unsafe` here:
//! `sched_setscheduler` and `TCP_INFO`'s struct.

use std::io;
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::net::{AddressFamily, SendFlags, SocketFlags, SocketType};

/// Nanoseconds on CLOCK_MONOTONIC: the single time base of the emulator, so
/// arrival, departure and release stamps are directly comparable.
pub(crate) fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // tv_sec/tv_nsec are non-negative for CLOCK_MONOTONIC.
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// An eventfd used as a "stop" doorbell: once signalled it stays readable, so
/// every poll loop watching it wakes immediately and exits.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(crate) fn new() -> io::Result<Self> {
        use rustix::event::EventfdFlags;
        Ok(Self(rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?))
    }

    /// Makes the eventfd readable (idempotent for our purposes).
    pub(crate) fn signal(&self) {
        // A failure (EAGAIN on counter overflow) still leaves the fd readable.
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    pub(crate) fn is_signalled(&self) -> bool {
        let mut pfd = [pollfd(self.fd(), PollFlags::IN)];
        matches!(ppoll(&mut pfd, Some(Duration::ZERO)), Ok(n) if n > 0)
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

pub(crate) fn pollfd(fd: BorrowedFd<'_>, events: PollFlags) -> PollFd<'_> {
    PollFd::from_borrowed_fd(fd, events)
}

/// `ppoll` with a nanosecond-resolution relative timeout (`None` = forever).
/// EINTR is reported as "nothing ready" so callers simply loop.
pub(crate) fn ppoll(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout
        .map(|d| Timespec { tv_sec: d.as_secs().min(i64::MAX as u64) as i64, tv_nsec: i64::from(d.subsec_nanos()) });
    match rustix::event::poll(fds, ts.as_ref()) {
        Ok(n) => Ok(n),
        Err(rustix::io::Errno::INTR) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Shrinks this thread's timer slack to 1 ns. The default 50 µs slack lets
/// the kernel coalesce our ppoll wake-ups late, which would show up directly
/// as delay jitter in the emulator.
pub(crate) fn set_min_timer_slack() {
    let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1));
}

/// Gives the calling thread a low real-time priority (SCHED_FIFO 10), or
/// failing that (no CAP_SYS_NICE, RT group scheduling without budget) the
/// highest nice value.
///
/// Used only for threads whose wake-up latency *is* the measurement: the
/// emulator's release threads (TCP sees their timing as path RTT) and the
/// UDP probe endpoints. They block in ppoll between packets, so they cannot
/// monopolise a CPU unless the path is saturated, and the kernel's RT
/// throttling still reserves time for everything else.
pub(crate) fn raise_thread_priority() {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: `param` is a valid sched_param; pid 0 = the calling thread. rustix has no
    // sched_setscheduler.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
        return;
    }
    // Failure just leaves the default priority, which only costs timing accuracy.
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), -20);
}

/// TCP_INFO for a socket. Older kernels fill a prefix only; the rest stays
/// zeroed, which is the documented convention. (rustix has no `tcp_info`.)
pub(crate) fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<libc::tcp_info> {
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which is
    // zero-initialised so any unwritten tail is a valid all-zero tcp_info.
    let ret = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len)
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialised plain-old-data struct, possibly partly
    // overwritten by the kernel: every bit pattern is valid for its fields.
    Ok(unsafe { info.assume_init() })
}

/// Creates a close-on-exec, non-blocking socket of `ty` in the family of `addr`.
pub(crate) fn socket_for(addr: SocketAddr, ty: SocketType) -> io::Result<OwnedFd> {
    let family = if addr.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    Ok(rustix::net::socket_with(family, ty, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK, None)?)
}

/// Starts a non-blocking connect; EINPROGRESS is success here.
pub(crate) fn connect(fd: BorrowedFd<'_>, addr: SocketAddr) -> io::Result<()> {
    match rustix::net::connect(fd, &addr) {
        Ok(()) | Err(rustix::io::Errno::INPROGRESS) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// An IPv4 or IPv6 address the kernel gave back.
fn inet(addr: Option<rustix::net::SocketAddrAny>) -> io::Result<SocketAddr> {
    let addr = addr.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no address"))?;
    Ok(SocketAddr::try_from(addr)?)
}

pub(crate) fn local_addr(fd: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    inet(Some(rustix::net::getsockname(fd)?))
}

/// `accept4(2)` of a non-blocking, close-on-exec connection and its peer's address.
pub(crate) fn accept(listener: BorrowedFd<'_>) -> io::Result<(OwnedFd, SocketAddr)> {
    let (fd, peer) = rustix::net::acceptfrom_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?;
    Ok((fd, inet(peer)?))
}

/// `read(2)` into `buf`; returns the byte count (0 = EOF).
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::io::read(fd, buf)?)
}

/// `write(2)` from `buf`; returns the byte count.
pub(crate) fn write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    Ok(rustix::io::write(fd, buf)?)
}

/// `send(2)` with MSG_NOSIGNAL so a reset peer yields EPIPE, not SIGPIPE.
pub(crate) fn send(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(fd, buf, SendFlags::NOSIGNAL)?)
}

pub(crate) fn is_would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// A PM QoS request for zero CPU wake-up latency, held while the lab emulates a path.
///
/// In a VM, an idle vCPU halts and the host decides when it runs again: measured here, sleeps
/// of 1 ms overshot by 2.6 ms at p99 with the default idle states and by 0.14 ms with this
/// request held (the guest then polls instead of halting). The emulator's delay is only as
/// exact as its threads' wake-ups, so the lab holds the request for as long as a path exists;
/// the kernel drops it when the file is closed. Best effort: without the device (or the
/// right to open it) the path works, with the host's wake-up latency.
#[derive(Debug)]
pub(crate) struct ZeroWakeLatency {
    /// The open request; closing it withdraws the request.
    _request: Option<std::fs::File>,
}

impl ZeroWakeLatency {
    pub(crate) fn request() -> Self {
        use std::io::Write;
        let file = std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency").ok().and_then(|mut f| {
            // The request is a native-endian s32 of microseconds.
            f.write_all(&0i32.to_ne_bytes()).ok().map(|()| f)
        });
        if file.is_none() {
            log::info!("no /dev/cpu_dma_latency request: emulated delays carry the host's wake-up latency");
        }
        Self { _request: file }
    }
}
