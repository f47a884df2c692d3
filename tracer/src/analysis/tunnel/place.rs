//! The tunnel a TCP flow crosses the path in, as its verdict and record name it, and the
//! sentence its verdict gains.

use serde::{Deserialize, Serialize};

use crate::analysis::tunnel::facts::{Forwarded, TunHolder};
use crate::analysis::udp::{AppProto, UdpFlow};
use crate::analysis::units::rate;

/// The UDP flow a tunnel is carried over, as the UDP view reads it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TunnelUdp {
    pub cookie: u64,
    pub src: String,
    pub sport: u16,
    pub dst: String,
    pub dport: u16,
    /// Bits per second over the last readings.
    pub tx_bps: u64,
    pub rx_bps: u64,
    /// `wireguard`, `quic`, or null for plain UDP.
    pub app_proto: Option<AppProto>,
}

impl TunnelUdp {
    pub(super) fn of(u: &UdpFlow) -> Self {
        let s = &u.latest;
        Self {
            cookie: u.cookie(),
            src: s.local.ip().to_string(),
            sport: s.local.port(),
            dst: s.remote.ip().to_string(),
            dport: s.remote.port(),
            tx_bps: u.tx_bps.round() as u64,
            rx_bps: u.rx_bps.round() as u64,
            app_proto: u.app_proto,
        }
    }

    /// `198.19.0.1:51820 -> 198.19.1.1:51820`.
    pub fn endpoints(&self) -> String {
        format!("{}:{} -> {}:{}", self.src, self.sport, self.dst, self.dport)
    }
}

/// The tunnel a TCP flow crosses the path in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tunnel {
    /// The TUN device, its MTU and its namespace (inode).
    pub dev: String,
    pub mtu: u32,
    pub netns: u32,
    /// The process holding the device: the tunnel's engine.
    pub process: TunHolder,
    /// The namespace that forwards the flow into the tunnel, when it is not the flow's own.
    pub via: Option<Forwarded>,
    /// The UDP flow the process carries the tunnel over (the underlay).
    pub udp: TunnelUdp,
}

impl Tunnel {
    /// One line: `wg0 (MTU 1420) of wireguard-go (pid 812), via netns router (masquerading
    /// 198.18.3.1), over UDP 198.19.0.1:51820 -> 198.19.1.1:51820`.
    pub fn describe(&self) -> String {
        format!(
            "{} (MTU {}) of {} (pid {}){}, over UDP {}",
            self.dev,
            self.mtu,
            self.process.comm,
            self.process.pid,
            self.via.as_ref().map_or(String::new(), |v| format!(", {}", v.describe())),
            self.udp.endpoints()
        )
    }

    /// [`Tunnel::describe`] with the underlay's rates: `..., over UDP 198.19.0.1:51820 ->
    /// 198.19.1.1:51820 at 40 Mbit/s out, 1.2 Mbit/s in`, as the detail view and the report show it.
    pub fn describe_with_rates(&self) -> String {
        format!("{} at {} out, {} in", self.describe(), rate(self.udp.tx_bps as f64), rate(self.udp.rx_bps as f64))
    }

    /// Same tunnel, whatever its rates: a verdict's words change only with this.
    pub fn same_place(&self, other: &Tunnel) -> bool {
        let rates = |t: &Tunnel| TunnelUdp { tx_bps: 0, rx_bps: 0, ..t.udp.clone() };
        self.dev == other.dev
            && self.mtu == other.mtu
            && self.netns == other.netns
            && self.process == other.process
            && self.via == other.via
            && rates(self) == rates(other)
    }
}

/// The largest MSS a 1500-byte path gives a flow with TCP timestamps: what a tunnel's smaller
/// MTU is measured against.
const FULL_MSS: u32 = 1448;

/// The sentences a flagged flow's verdict gains from its tunnel: which tunnel, where its losses
/// are, that the fix applies to it, and, when its MSS is small, what the tunnel's MTU costs (the
/// Mathis bound scales with the MSS). `mss`: the flow's MSS.
pub fn tunnel_note(t: &Tunnel, mss: u32) -> String {
    let mut note = format!(
        " Through tunnel {}. Its packets cross the path inside {}'s UDP, so the losses are in the tunnel's \
         underlay, outside this host; the flow itself is the kernel's TCP, so the fix applies to it, in this \
         flow's namespace{}.",
        t.describe(),
        t.process.comm,
        if t.via.is_some() { ", not the router's" } else { "" }
    );
    // A small MSS is part of the story when it is at least 3 % below a full-sized path's.
    if mss > 0 && mss * 100 < FULL_MSS * 97 {
        // The tunnel's MTU less 40 to 72 bytes of IPv4 or IPv6 and TCP headers and options: the
        // MSS follows from it; a smaller one has another cause on the way.
        let why = if (t.mtu.saturating_sub(72)..=t.mtu.saturating_sub(40)).contains(&mss) {
            format!("follows the tunnel's MTU ({} B)", t.mtu)
        } else {
            format!("is below what the tunnel's MTU ({} B) allows", t.mtu)
        };
        note.push_str(&format!(
            " Its MSS of {mss} B {why}: {:.0}% less per segment than {FULL_MSS} B on a 1500-byte path, and the \
             Mathis bound is smaller by as much.",
            100.0 * f64::from(FULL_MSS - mss) / f64::from(FULL_MSS)
        ));
    }
    note
}
