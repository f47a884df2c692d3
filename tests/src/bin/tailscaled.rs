//! A relay that behaves like tailscaled in userspace-networking mode, for the UDP tests: it
//! connects over loopback to a local service, reads what the service sends, and forwards it as
//! WireGuard-shaped datagrams (a handshake initiation, then transport-data messages) to a peer,
//! paced by its own rate, as tailscaled's own TCP stack would. It is named `tailscaled` and
//! takes `--tun=userspace-networking` so cctrace sees the process as the real one would look.
//!
//! `tailscaled --tun=userspace-networking --local ADDR --peer ADDR --rate-mbps N`

use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Plaintext bytes per datagram: a 1500-byte path minus IPv4, UDP and WireGuard overhead.
const PLAINTEXT: usize = 1392;

fn arg(args: &[String], name: &str) -> Result<String> {
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone()).with_context(|| format!("missing {name}"))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--tun=userspace-networking") {
        bail!("this relay only has a userspace mode: pass --tun=userspace-networking");
    }
    let local: SocketAddr = arg(&args, "--local")?.parse()?;
    let peer: SocketAddr = arg(&args, "--peer")?.parse()?;
    let rate_bps: f64 = arg(&args, "--rate-mbps")?.parse::<f64>()? * 1e6;

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
        let padded = n.div_ceil(16) * 16;
        let len = 16 + padded + 16;
        datagram[..4].copy_from_slice(&[4, 0, 0, 0]);
        datagram[4..8].copy_from_slice(&0x0e51_3c9a_u32.to_le_bytes());
        datagram[8..16].copy_from_slice(&counter.to_le_bytes());
        datagram[16..16 + n].copy_from_slice(&buf[..n]);
        datagram[16 + n..len].fill(0);
        counter += 1;
        // The peer may not be reachable for a moment: a userspace VPN drops, it does not stop.
        let _ = udp.send(&datagram[..len]);
        sent_bits += (len * 8) as f64;
        let due = Duration::from_secs_f64(sent_bits / rate_bps);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}
