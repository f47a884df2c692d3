//! A stand-in for tailscaled in userspace-networking mode, and the two ends it joins: a local
//! service it reaches over loopback ([`LoopbackService`]) and a tailnet peer that takes its UDP
//! ([`UdpSink`]). The relay reads what the service sends and forwards it as WireGuard-shaped
//! datagrams (an initiation, then transport-data messages), paced by its own rate as
//! tailscaled's own TCP stack would pace them: the kernel's TCP stops at loopback.
//!
//! [`relay_main`] is the relay process's whole program (its arguments as tailscaled's would
//! read); [`spawn_relay`] starts it, named `tailscaled`, inside a namespace.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::netns::{Netns, NsThread};

/// Plaintext bytes per datagram: a 1500-byte path minus IPv4, UDP and WireGuard overhead.
const PLAINTEXT: usize = 1392;

/// The flag that makes tailscaled run its own TCP/IP stack instead of a TUN device.
pub const USERSPACE_FLAG: &str = "--tun=userspace-networking";

fn arg(args: &[String], name: &str) -> Result<String> {
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone()).with_context(|| format!("missing {name}"))
}

/// The relay: `--tun=userspace-networking --local ADDR --peer ADDR --rate-mbps N`. Runs until the
/// local service closes the connection.
pub fn relay_main(args: &[String]) -> Result<()> {
    if !args.iter().any(|a| a == USERSPACE_FLAG) {
        bail!("this relay only has a userspace mode: pass {USERSPACE_FLAG}");
    }
    // The command name tailscaled has, before any socket is opened (the kernel notes who
    // connects). A program started under another name (the demo's cctrace) takes it here.
    let _ = rustix::thread::set_name(c"tailscaled");
    let local: SocketAddr = arg(args, "--local")?.parse()?;
    let peer: SocketAddr = arg(args, "--peer")?.parse()?;
    let rate_bps: f64 = arg(args, "--rate-mbps")?.parse::<f64>()? * 1e6;

    let udp = UdpSocket::bind("0.0.0.0:0")?;
    udp.connect(peer)?;
    // Handshake initiation: type 1, three reserved zero bytes, 148 bytes in all.
    let mut init = [0u8; 148];
    init[0] = 1;
    let _ = udp.send(&init);

    let mut tcp = TcpStream::connect(local).with_context(|| format!("connecting to {local}"))?;
    let mut buf = [0u8; PLAINTEXT];
    let mut datagram = vec![0u8; 16 + PLAINTEXT.div_ceil(16) * 16 + 16];
    let start = Instant::now();
    let mut sent_bits = 0.0;
    let mut counter = 0u64;
    loop {
        let n = tcp.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        // Transport data: type 4, reserved zeros, receiver index, counter, the padded
        // "ciphertext" and a 16-byte tag.
        let len = 16 + n.div_ceil(16) * 16 + 16;
        datagram[..4].copy_from_slice(&[4, 0, 0, 0]);
        datagram[4..8].copy_from_slice(&0x0e51_3c9a_u32.to_le_bytes());
        datagram[8..16].copy_from_slice(&counter.to_le_bytes());
        datagram[16..16 + n].copy_from_slice(&buf[..n]);
        datagram[16 + n..len].fill(0);
        counter += 1;
        // The peer may be unreachable for a moment: a userspace VPN drops, it does not stop.
        let _ = udp.send(&datagram[..len]);
        sent_bits += (len * 8) as f64;
        let due = Duration::from_secs_f64(sent_bits / rate_bps);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}

/// Start `program args...` inside `ns` with `tailscaled` as its command line's first word
/// (`program` runs [`relay_main`], which takes the command name too), optionally in the cgroup
/// directory `cgroup`.
pub fn spawn_relay(program: &Path, args: &[String], ns: &Netns, cgroup: Option<&Path>) -> Result<Child> {
    let netns = std::fs::File::open(ns.path()).with_context(|| format!("opening {}", ns.path().display()))?;
    let mut cmd = Command::new(program);
    cmd.arg0("tailscaled").args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: between fork and exec the closure makes one async-signal-safe syscall (setns, a
    // raw system call in rustix) on the namespace's file, which the closure owns (close-on-exec).
    unsafe {
        cmd.pre_exec(move || {
            use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
            Ok(move_into_link_name_space(netns.as_fd(), Some(LinkNameSpaceType::Network))?)
        });
    }
    let mut child = cmd.spawn().with_context(|| format!("starting {}", program.display()))?;
    if let Some(dir) = cgroup {
        if let Err(e) = std::fs::write(dir.join("cgroup.procs"), child.id().to_string()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e).with_context(|| format!("moving the relay into {}", dir.display()));
        }
    }
    Ok(child)
}

/// The local service (Jellyfin's part): listens on 127.0.0.1 in a namespace and sends to the
/// first connection, at `rate_bps` or as fast as it can (`None`), until stopped.
pub struct LoopbackService {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<NsThread<std::io::Result<()>>>,
}

impl LoopbackService {
    /// `cgroup`: a cgroup directory the listening socket (and so the accepted one) belongs to.
    pub fn start(ns: &Netns, name: &str, rate_bps: Option<f64>, cgroup: Option<&Path>) -> Result<Self> {
        let listener = ns.run_inside(|| -> Result<std::io::Result<TcpListener>> {
            match cgroup {
                Some(dir) => crate::cgroup::create_sockets_in(dir, || TcpListener::bind("127.0.0.1:0")),
                None => Ok(TcpListener::bind("127.0.0.1:0")),
            }
        })???;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = ns.spawn_thread(name, move || -> std::io::Result<()> {
            listener.set_nonblocking(true)?;
            let mut conn = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if stopped.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => return Err(e),
                }
            };
            conn.set_nonblocking(false)?;
            conn.set_write_timeout(Some(Duration::from_millis(200)))?;
            let chunk = [0x42u8; 64 * 1024];
            let start = Instant::now();
            let mut sent = 0.0;
            while !stopped.load(Ordering::Relaxed) {
                match conn.write(&chunk) {
                    Ok(n) => sent += (n * 8) as f64,
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
                if let Some(rate) = rate_bps {
                    if let Some(wait) = Duration::from_secs_f64(sent / rate).checked_sub(start.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
            }
            Ok(())
        })?;
        Ok(Self { port, stop, thread: Some(thread) })
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for LoopbackService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The tailnet peer: takes the relay's datagrams in another namespace and counts their bytes.
pub struct UdpSink {
    addr: SocketAddr,
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<NsThread<()>>,
}

impl UdpSink {
    pub fn start(ns: &Netns, addr: SocketAddr) -> Result<Self> {
        let socket = ns.run_inside(|| UdpSocket::bind(addr))??;
        socket.set_read_timeout(Some(Duration::from_millis(200)))?;
        let received = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopped) = (received.clone(), stop.clone());
        let thread = ns.spawn_thread("cct-udp-sink", move || {
            let mut buf = [0u8; 2048];
            while !stopped.load(Ordering::Relaxed) {
                if let Ok(n) = socket.recv(&mut buf) {
                    count.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        })?;
        Ok(Self { addr, received, stop, thread: Some(thread) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Payload bytes received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
}

impl Drop for UdpSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
