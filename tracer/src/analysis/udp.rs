//! UDP flows whose congestion control is not the kernel's: what a heavy UDP socket carries
//! (QUIC, WireGuard, plain UDP, from its datagrams' first bytes), its rates, and the verdict
//! `limited_by: userspace` with advice that fits the process owning it.
//!
//! Pure like the rest of the analysis: samples come in with the owner's command line and
//! whether it holds a TUN device already read (by the kernel source), time as arguments.

use std::collections::HashMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::analysis::container::{Container, Runtime};
use crate::analysis::environment::Environment;
use crate::analysis::fix::shell_quote;
use crate::analysis::units::rate;

/// First payload bytes kept per datagram (as the kernel keeps them).
pub const HEAD_LEN: usize = 16;

/// The start of one datagram: its first payload bytes and its UDP payload length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub bytes: [u8; HEAD_LEN],
    /// UDP payload length in bytes; 0: no datagram seen.
    pub len: u16,
}

/// What one datagram's first bytes look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// QUIC long header (RFC 9000 17.2): header form and fixed bit set, a non-zero version,
    /// a destination connection id of at most 20 bytes.
    QuicLong {
        version: u32,
    },
    /// Header form clear, fixed bit set: a QUIC short header if the flow has shown a long one.
    QuicShort,
    /// WireGuard message of this type (1 initiation, 2 response, 3 cookie reply, 4 data) with
    /// the reserved bytes zero and the message type's size.
    WireGuard(u8),
    Other,
}

/// WireGuard's fixed message sizes (whitepaper section 5.4): initiation 148, response 92,
/// cookie reply 64; transport data is a 16-byte header, the padded plaintext (a multiple of
/// 16) and a 16-byte tag.
fn wireguard_size_fits(kind: u8, len: u16) -> bool {
    match kind {
        1 => len == 148,
        2 => len == 92,
        3 => len == 64,
        4 => len >= 32 && len.is_multiple_of(16),
        _ => false,
    }
}

/// The shape of one datagram.
pub fn shape(head: &Head) -> Shape {
    let b = &head.bytes;
    if head.len == 0 {
        return Shape::Other;
    }
    if (1..=4).contains(&b[0]) && b[1..4] == [0, 0, 0] && wireguard_size_fits(b[0], head.len) {
        return Shape::WireGuard(b[0]);
    }
    if b[0] & 0xc0 == 0xc0 && head.len >= 7 {
        let version = u32::from_be_bytes([b[1], b[2], b[3], b[4]]);
        if version != 0 && b[5] <= 20 {
            return Shape::QuicLong { version };
        }
    }
    if b[0] & 0xc0 == 0x40 {
        return Shape::QuicShort;
    }
    Shape::Other
}

/// The application protocol a UDP flow carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppProto {
    Quic,
    #[serde(rename = "wireguard")]
    WireGuard,
}

impl AppProto {
    pub fn name(self) -> &'static str {
        match self {
            Self::Quic => "quic",
            Self::WireGuard => "wireguard",
        }
    }
}

/// Datagram shapes seen on one flow, counted; the flow's protocol follows from them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShapeCounts {
    pub quic_long: u32,
    pub quic_short: u32,
    pub wireguard: u32,
    pub other: u32,
}

impl ShapeCounts {
    pub fn add(&mut self, head: &Head) {
        if head.len == 0 {
            return;
        }
        match shape(head) {
            Shape::QuicLong { .. } => self.quic_long += 1,
            Shape::QuicShort => self.quic_short += 1,
            Shape::WireGuard(_) => self.wireguard += 1,
            Shape::Other => self.other += 1,
        }
    }

    /// QUIC when a long header was seen and QUIC-shaped datagrams are most of what was seen
    /// (short headers count only then: a plain payload whose first byte happens to have the
    /// fixed bit is not QUIC); WireGuard when its messages are; else plain UDP.
    pub fn protocol(&self) -> Option<AppProto> {
        let quic = self.quic_long + self.quic_short;
        if self.quic_long > 0 && quic >= self.wireguard + self.other {
            return Some(AppProto::Quic);
        }
        let not_wireguard = self.other + self.quic_short + self.quic_long;
        if self.wireguard > 0 && self.wireguard >= not_wireguard {
            return Some(AppProto::WireGuard);
        }
        None
    }
}

/// The process owning a UDP socket, as `/proc` showed it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub comm: String,
    /// Command line, one argument per element.
    pub cmdline: Vec<String>,
    /// The process has `/dev/net/tun` open (a kernel-mode VPN's device).
    pub tun_open: bool,
    /// Its established TCP connections, (local, remote): a relay's hops to local services,
    /// known even when a kernel filter leaves its own TCP sockets out of the table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp: Vec<(SocketAddr, SocketAddr)>,
}

impl Process {
    /// tailscaled running its own TCP/IP stack instead of a kernel TUN device.
    pub fn is_tailscaled_userspace(&self) -> bool {
        let name = self.cmdline.first().map_or(self.comm.as_str(), |a| a.rsplit('/').next().unwrap_or(a));
        let tailscaled = name == "tailscaled" || self.comm == "tailscaled";
        // Go's flag package takes `--tun=X`, `-tun=X`, `--tun X` and `-tun X` alike.
        let is_tun_flag = |a: &str| a == "--tun" || a == "-tun";
        let userspace_flag = self.cmdline.windows(2).any(|w| is_tun_flag(&w[0]) && w[1] == "userspace-networking")
            || self.cmdline.iter().any(|a| a == "--tun=userspace-networking" || a == "-tun=userspace-networking");
        tailscaled && (userspace_flag || !self.tun_open)
    }
}

/// One reading of a heavy UDP socket's kernel counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UdpSample {
    /// CLOCK_MONOTONIC ns of the reading.
    pub ts_ns: u64,
    pub cookie: u64,
    pub netns: u32,
    pub cgroup_id: u64,
    /// Socket inode (`socket:[INODE]` in `/proc/PID/fd`), 0 when unknown.
    pub inode: u64,
    pub local: SocketAddr,
    /// The latest datagram's peer (an unconnected socket talks to many).
    pub remote: SocketAddr,
    /// IP bytes and packets sent and received over the socket's life.
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub rx_packets: u64,
    /// First datagram sent and received, and the latest ones the kernel kept.
    pub first_tx: Head,
    pub first_rx: Head,
    pub last_tx: Head,
    pub last_rx: Head,
    pub owner: Option<Process>,
}

#[cfg(test)]
impl UdpSample {
    /// A reading for tests: socket `cookie` in the host's namespace sent `tx_bytes` so far,
    /// 198.18.0.1:41641 to 198.18.0.2:41641, with no datagram heads and no owner.
    pub(crate) fn fixture(cookie: u64, ts_ns: u64, tx_bytes: u64) -> Self {
        Self {
            ts_ns,
            cookie,
            netns: 4026531840,
            cgroup_id: 0,
            inode: 0,
            local: "198.18.0.1:41641".parse().expect("addr"),
            remote: "198.18.0.2:41641".parse().expect("addr"),
            tx_bytes,
            rx_bytes: 0,
            tx_packets: 0,
            rx_packets: 0,
            first_tx: Head::default(),
            first_rx: Head::default(),
            last_tx: Head::default(),
            last_rx: Head::default(),
            owner: None,
        }
    }
}

/// What the kernel source reads about sockets once a second, besides the TCP samples: heavy
/// UDP sockets. (Recordings made before TCP routes moved into the samples also carry a
/// `routes` list here; it is ignored.)
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketReadings {
    pub udp: Vec<UdpSample>,
}

/// A heavy UDP flow: its latest reading, rates, and what it carries.
#[derive(Clone, Debug, PartialEq)]
pub struct UdpFlow {
    pub latest: UdpSample,
    pub first_seen_ns: u64,
    /// Bits per second over the last two readings.
    pub tx_bps: f64,
    pub rx_bps: f64,
    pub shapes: ShapeCounts,
    /// Sticky once known: later datagrams of a QUIC flow are short headers.
    pub app_proto: Option<AppProto>,
    /// Readings taken.
    pub samples: u64,
}

impl UdpFlow {
    fn new(s: &UdpSample) -> Self {
        let mut flow = Self {
            latest: s.clone(),
            first_seen_ns: s.ts_ns,
            tx_bps: 0.0,
            rx_bps: 0.0,
            shapes: ShapeCounts::default(),
            app_proto: None,
            samples: 0,
        };
        for head in [&s.first_tx, &s.first_rx] {
            flow.shapes.add(head);
        }
        flow.update(s);
        flow
    }

    fn update(&mut self, s: &UdpSample) {
        let dt_ns = s.ts_ns.saturating_sub(self.latest.ts_ns);
        if dt_ns > 0 {
            let secs = dt_ns as f64 / 1e9;
            self.tx_bps = s.tx_bytes.saturating_sub(self.latest.tx_bytes) as f64 * 8.0 / secs;
            self.rx_bps = s.rx_bytes.saturating_sub(self.latest.rx_bytes) as f64 * 8.0 / secs;
        }
        // The latest heads are read once per reading; a head unchanged since the last reading is
        // the same datagram and counts once.
        if s.last_tx != self.latest.last_tx || self.samples == 0 {
            self.shapes.add(&s.last_tx);
        }
        if s.last_rx != self.latest.last_rx || self.samples == 0 {
            self.shapes.add(&s.last_rx);
        }
        if self.app_proto.is_none() {
            self.app_proto = self.shapes.protocol();
        }
        let owner = s.owner.clone().or_else(|| self.latest.owner.clone());
        self.latest = s.clone();
        self.latest.owner = owner;
        self.samples += 1;
    }

    pub fn cookie(&self) -> u64 {
        self.latest.cookie
    }

    /// Whether the flow moved at least `bps` either way over the last readings.
    pub fn is_heavy(&self, bps: f64) -> bool {
        self.tx_bps.max(self.rx_bps) >= bps
    }
}

/// Heavy UDP flows by socket cookie, bounded; flows quiet for [`UdpTable::IDLE_NS`] go.
#[derive(Clone, Debug, Default)]
pub struct UdpTable {
    flows: HashMap<u64, UdpFlow>,
    evicted: u64,
}

impl UdpTable {
    pub const MAX_FLOWS: usize = 1024;
    pub const IDLE_NS: u64 = 30_000_000_000;

    pub fn ingest(&mut self, s: &UdpSample) {
        if let Some(flow) = self.flows.get_mut(&s.cookie) {
            flow.update(s);
            return;
        }
        if self.flows.len() >= Self::MAX_FLOWS {
            // The flow idle longest makes room.
            if let Some(oldest) = self.flows.values().min_by_key(|f| f.latest.ts_ns).map(UdpFlow::cookie) {
                self.flows.remove(&oldest);
                self.evicted += 1;
            }
        }
        self.flows.insert(s.cookie, UdpFlow::new(s));
    }

    /// Drop flows without a reading for [`UdpTable::IDLE_NS`].
    pub fn expire(&mut self, now_ns: u64) {
        self.flows.retain(|_, f| now_ns.saturating_sub(f.latest.ts_ns) < Self::IDLE_NS);
    }

    pub fn get(&self, cookie: u64) -> Option<&UdpFlow> {
        self.flows.get(&cookie)
    }

    /// Every flow, in cookie order.
    pub fn flows(&self) -> Vec<&UdpFlow> {
        let mut v: Vec<&UdpFlow> = self.flows.values().collect();
        v.sort_by_key(|f| f.cookie());
        v
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// The busiest flow process `pid` sends at least `min_bps` on, if any: what a relay does
    /// with what it reads (a process that only receives heavy UDP relays nothing onwards).
    pub fn sending_of_pid(&self, pid: u32, min_bps: f64) -> Option<&UdpFlow> {
        self.flows
            .values()
            .filter(|f| f.latest.owner.as_ref().is_some_and(|o| o.pid == pid) && f.tx_bps >= min_bps)
            .max_by(|a, b| a.tx_bps.total_cmp(&b.tx_bps))
    }
}

/// The verdict on a heavy UDP flow: who runs its congestion control and what to do about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UdpVerdict {
    pub text: String,
    /// Commands or configuration lines, in the order to apply them.
    pub advice: Vec<String>,
}

/// Name a process for a sentence: `tailscaled (pid 812)`.
pub fn process_label(owner: Option<&Process>) -> String {
    match owner {
        Some(p) if !p.comm.is_empty() => format!("{} (pid {})", p.comm, p.pid),
        Some(p) => format!("pid {}", p.pid),
        None => "an unknown process".to_string(),
    }
}

/// Judge a heavy UDP flow. Its congestion control, if any, runs in the owning process: the
/// kernel's choice (and cctrace's fix) does not reach it, whatever the path does.
pub fn judge(flow: &UdpFlow, env: &Environment) -> UdpVerdict {
    let owner = flow.latest.owner.as_ref();
    let who = process_label(owner);
    let rates = format!("{} out, {} in", rate(flow.tx_bps), rate(flow.rx_bps));
    let container = env.cgroups.get(&flow.latest.cgroup_id).and_then(|c| c.container.as_ref());
    if owner.is_some_and(Process::is_tailscaled_userspace) {
        return tailscaled_userspace(&who, &rates, container);
    }
    // A socket without a file is the kernel's own: kernel WireGuard (wg0, tailscale0 in kernel
    // mode) carries the kernel's TCP, which cctrace sees on the tunnel device and can fix.
    if owner.is_none() && flow.latest.inode == 0 && flow.app_proto == Some(AppProto::WireGuard) {
        return UdpVerdict {
            text: format!(
                "kernel WireGuard ({rates}): the tunnel's own UDP. The TCP flows inside it are the kernel's: \
                 they are listed with the tunnel as their device, and their verdicts and fixes apply."
            ),
            advice: vec!["look at the TCP flows whose device is the WireGuard interface".to_string()],
        };
    }
    match flow.app_proto {
        Some(AppProto::Quic) => UdpVerdict {
            text: format!(
                "userspace congestion control: QUIC ({rates}) owned by {who}. QUIC runs its congestion \
                 control inside {who}, not in the kernel: net.ipv4.tcp_congestion_control and BBR on this \
                 host do not apply to it. On a lossy path a loss-based QUIC sender (quic-go's, used by \
                 Caddy, is NewReno-like) is held back just as CUBIC is."
            ),
            advice: vec![
                format!(
                    "set the QUIC congestion control in {who}'s configuration if it offers one (BBR where available)"
                ),
                "or serve the site without HTTP/3 so clients fetch over TCP, where the kernel's BBR applies \
                 (Caddy: `servers { protocols h1 h2 }` in the global options; nginx: drop `listen ... quic`)"
                    .to_string(),
            ],
        },
        Some(AppProto::WireGuard) => UdpVerdict {
            text: format!(
                "userspace congestion control: WireGuard ({rates}) owned by {who}. The TCP flows inside the \
                 tunnel keep their own congestion control: look for them on this host's tunnel device or at \
                 the other end; WireGuard itself does none."
            ),
            advice: vec![format!(
                "if {who} terminates TCP itself (a userspace VPN stack), give it a kernel TUN device so the \
                 kernel's TCP, and its BBR, carry the traffic"
            )],
        },
        None => UdpVerdict {
            text: format!(
                "userspace congestion control: plain UDP ({rates}) owned by {who}. Whatever paces or backs \
                 off this flow runs inside {who}; the kernel's TCP settings do not apply to it."
            ),
            advice: vec![format!("see {who}'s own rate or congestion-control settings")],
        },
    }
}

fn tailscaled_userspace(who: &str, rates: &str, container: Option<&Container>) -> UdpVerdict {
    let text = format!(
        "userspace congestion control: {who} runs in userspace-networking mode (no TUN device) and \
         carries the tailnet over this UDP flow ({rates}). It terminates the tailnet's TCP connections \
         in its own TCP stack (gVisor netstack, loss-based) and reaches local services over loopback, \
         so the leg that crosses the lossy path is not the kernel's TCP: no sysctl, and not BBR, \
         changes it. With a TUN device the kernel's TCP carries those connections end to end and \
         cctrace's fix applies."
    );
    let mut advice = Vec::new();
    match container.map(|c| (c.runtime, c)) {
        Some((Runtime::Proxmox, c)) => {
            let conf = format!("/etc/pve/lxc/{}.conf", c.id);
            advice.push(format!("on the Proxmox host, add to {}:", shell_quote(&conf)));
            advice.extend(tun_lxc_lines());
        }
        Some((Runtime::Docker | Runtime::Podman, c)) => {
            let name = c.name.clone().unwrap_or_else(|| c.short_id().to_string());
            advice.push(format!(
                "recreate container {} with `--device /dev/net/tun --cap-add NET_ADMIN` (compose: \
                 `devices: [/dev/net/tun]`, `cap_add: [NET_ADMIN]`)",
                shell_quote(&name)
            ));
        }
        _ => {
            advice.push("Proxmox LXC (/etc/pve/lxc/<vmid>.conf):".to_string());
            advice.extend(tun_lxc_lines());
            advice.push("Docker: `--device /dev/net/tun --cap-add NET_ADMIN`".to_string());
        }
    }
    advice.push("then start tailscaled without --tun=userspace-networking".to_string());
    UdpVerdict { text, advice }
}

fn tun_lxc_lines() -> [String; 2] {
    [
        "lxc.cgroup2.devices.allow: c 10:200 rwm".to_string(),
        "lxc.mount.entry: /dev/net/tun dev/net/tun none bind,create=file".to_string(),
    ]
}

/// A TCP flow's peer socket on this host belongs to a process that carries the traffic on over
/// a heavy UDP flow: that process's congestion control, not this flow's, meets the path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RelayedBy {
    pub pid: u32,
    pub comm: String,
    /// The UDP flow it sends on, and what that carries.
    pub udp_cookie: u64,
    pub app_proto: Option<AppProto>,
    /// The TCP socket of the relay's end of this hop (this flow's own cookie when the flow is
    /// the relay's end; 0 when that socket is not traced and the relay's fd table told).
    pub peer_cookie: u64,
}

impl RelayedBy {
    /// Process `pid` relays the hop over its heavy UDP flow `udp`; `peer_cookie` as the field
    /// says.
    fn over(pid: u32, comm: &str, udp: &UdpFlow, peer_cookie: u64) -> Self {
        Self { pid, comm: comm.to_string(), udp_cookie: udp.cookie(), app_proto: udp.app_proto, peer_cookie }
    }

    /// The sentence that goes before the flow's own verdict.
    pub fn note(&self) -> String {
        let carried = self.app_proto.map_or("UDP", |p| match p {
            AppProto::Quic => "QUIC",
            AppProto::WireGuard => "WireGuard",
        });
        format!(
            "relayed by {} (pid {}): this is the local hop to a process that carries the traffic on as {carried} \
             over UDP with its own congestion control; this flow's rate is what that relay takes, so its \
             verdict says nothing about the path.",
            self.comm, self.pid
        )
    }
}

/// TCP flows whose peer socket is on this host (loopback, or another network namespace of this
/// host: the mirrored endpoints are both in the table) and whose pair has an end owned by a
/// process with a heavy UDP flow. Both ends of such a hop get the note.
pub fn find_relays(table: &crate::analysis::model::FlowTable, udp: &UdpTable, min_bps: f64) -> HashMap<u64, RelayedBy> {
    let mut out = HashMap::new();
    if udp.is_empty() {
        return out;
    }
    let mut by_ends: HashMap<(SocketAddr, SocketAddr), Vec<&crate::analysis::model::Flow>> = HashMap::new();
    for f in table.flows() {
        by_ends.entry((f.latest.local, f.latest.remote)).or_default().push(f);
    }
    for f in table.flows() {
        let s = &f.latest;
        // On loopback the same endpoints exist in every namespace: the peer must share this one.
        let peer = by_ends
            .get(&(s.remote, s.local))
            .into_iter()
            .flatten()
            .find(|p| p.cookie() != f.cookie() && (!s.remote.ip().is_loopback() || p.latest.netns == s.netns));
        if let Some(peer) = peer {
            for end in [peer, &f] {
                let Some(owner) = end.latest.owner.as_ref() else { continue };
                if let Some(u) = udp.sending_of_pid(owner.pid, min_bps) {
                    out.insert(f.cookie(), RelayedBy::over(owner.pid, &owner.comm, u, end.cookie()));
                    break;
                }
            }
        }
        if out.contains_key(&f.cookie()) {
            continue;
        }
        // The peer socket is not in the table (a kernel filter left it out): a process sending
        // heavy UDP that holds the mirrored connection is the relay all the same.
        let holder = udp.flows.values().find(|u| {
            u.tx_bps >= min_bps
                && (!s.remote.ip().is_loopback() || u.latest.netns == s.netns)
                && u.latest.owner.as_ref().is_some_and(|o| o.tcp.contains(&(s.remote, s.local)))
        });
        if let Some(u) = holder {
            let owner = u.latest.owner.as_ref().expect("checked above");
            out.insert(f.cookie(), RelayedBy::over(owner.pid, &owner.comm, u, 0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(bytes: &[u8], len: usize) -> Head {
        let mut h = Head { bytes: [0; HEAD_LEN], len: len as u16 };
        let n = bytes.len().min(HEAD_LEN);
        h.bytes[..n].copy_from_slice(&bytes[..n]);
        h
    }

    /// A QUIC v1 client Initial as quinn sends it: 0xc0 | packet-number length, version 1,
    /// DCID length 8 and id, SCID length 8 ...; padded to 1200 bytes.
    const QUIC_INITIAL: [u8; 16] =
        [0xc3, 0x00, 0x00, 0x00, 0x01, 0x08, 0x5e, 0x1a, 0x77, 0x02, 0x9c, 0x41, 0xd0, 0x33, 0x08, 0x91];
    /// A 1-RTT packet: 0x40 | spin/key-phase/pn-length bits, then the DCID.
    const QUIC_SHORT: [u8; 16] =
        [0x5b, 0x8a, 0x13, 0x02, 0x77, 0xf0, 0x42, 0x19, 0x6c, 0x21, 0x85, 0x90, 0x3e, 0x4d, 0x11, 0x07];
    /// WireGuard transport data: type 4, three reserved zero bytes, receiver index, counter.
    const WG_DATA: [u8; 16] = [4, 0, 0, 0, 0x9a, 0x3c, 0x51, 0x0e, 0x27, 0, 0, 0, 0, 0, 0, 0];
    /// iperf3 UDP payload: seconds and microseconds of the send time, then a counter.
    const IPERF3: [u8; 16] = [0x69, 0x2f, 0x4a, 0x10, 0x00, 0x03, 0x8b, 0x2c, 0, 0, 0, 0, 0, 0, 0x01, 0x2d];
    /// A DNS query: id, flags 0x0100, one question.
    const DNS: [u8; 16] = [0x1c, 0x3d, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 7, b'e', b'x', b'a'];

    #[test]
    fn datagram_shapes() {
        assert_eq!(shape(&head(&QUIC_INITIAL, 1200)), Shape::QuicLong { version: 1 });
        assert_eq!(shape(&head(&QUIC_SHORT, 1252)), Shape::QuicShort);
        assert_eq!(shape(&head(&WG_DATA, 1440)), Shape::WireGuard(4));
        assert_eq!(shape(&head(&WG_DATA, 1441)), Shape::Other, "data messages are 16-byte aligned");
        let mut init = WG_DATA;
        init[0] = 1;
        assert_eq!(shape(&head(&init, 148)), Shape::WireGuard(1));
        assert_eq!(shape(&head(&init, 149)), Shape::Other);
        init[0] = 2;
        assert_eq!(shape(&head(&init, 92)), Shape::WireGuard(2));
        init[0] = 3;
        assert_eq!(shape(&head(&init, 64)), Shape::WireGuard(3));
        let mut reserved = WG_DATA;
        reserved[2] = 1;
        assert_eq!(shape(&head(&reserved, 1440)), Shape::Other, "reserved bytes must be zero");
        assert_eq!(shape(&head(&DNS, 40)), Shape::Other);
        // Version negotiation (version 0) is no evidence of a QUIC flow by itself.
        let mut vn = QUIC_INITIAL;
        vn[1..5].copy_from_slice(&[0, 0, 0, 0]);
        assert_eq!(shape(&head(&vn, 60)), Shape::Other);
    }

    #[test]
    fn short_headers_count_as_quic_only_after_a_long_header() {
        let mut plain = ShapeCounts::default();
        for _ in 0..10 {
            plain.add(&head(&IPERF3, 1448));
        }
        assert_eq!(plain.quic_short, 10, "iperf3's timestamp has the fixed bit");
        assert_eq!(plain.protocol(), None);
        let mut quic = ShapeCounts::default();
        quic.add(&head(&QUIC_INITIAL, 1200));
        for _ in 0..10 {
            quic.add(&head(&QUIC_SHORT, 1252));
        }
        assert_eq!(quic.protocol(), Some(AppProto::Quic));
        let mut wg = ShapeCounts::default();
        wg.add(&head(&[1, 0, 0, 0], 148));
        wg.add(&head(&WG_DATA, 1440));
        assert_eq!(wg.protocol(), Some(AppProto::WireGuard));
        let mut dns = ShapeCounts::default();
        dns.add(&head(&DNS, 40));
        assert_eq!(dns.protocol(), None);
    }

    fn sample(ts_s: u64, tx: u64, owner: Option<Process>) -> UdpSample {
        UdpSample {
            netns: 1,
            local: "198.18.0.1:4433".parse().expect("addr"),
            remote: "198.18.0.2:50000".parse().expect("addr"),
            first_tx: head(&QUIC_INITIAL, 1200),
            first_rx: head(&QUIC_INITIAL, 1200),
            last_tx: head(&QUIC_SHORT, 1252),
            owner,
            ..UdpSample::fixture(9, ts_s * 1_000_000_000, tx)
        }
    }

    #[test]
    fn a_quic_flow_names_its_process_and_the_way_to_tcp() {
        let owner = Process {
            pid: 4321,
            comm: "caddy".into(),
            cmdline: vec!["caddy".into()],
            tun_open: false,
            tcp: Vec::new(),
        };
        let mut t = UdpTable::default();
        t.ingest(&sample(1, 0, Some(owner.clone())));
        t.ingest(&sample(2, 2_500_000, None));
        let flow = t.get(9).expect("flow");
        assert_eq!(flow.app_proto, Some(AppProto::Quic));
        assert_eq!(flow.tx_bps, 20_000_000.0);
        assert_eq!(flow.latest.owner.as_ref(), Some(&owner), "the owner is kept when a reading lacks it");
        let v = judge(flow, &Environment::default());
        assert!(v.text.contains("caddy (pid 4321)") && v.text.contains("QUIC"), "{}", v.text);
        assert!(v.advice.iter().any(|a| a.contains("without HTTP/3")), "{:?}", v.advice);
        t.expire(40 * 1_000_000_000);
        assert!(t.is_empty());
    }

    #[test]
    fn tailscaled_in_userspace_mode_gets_the_tun_advice() {
        let p = Process {
            pid: 812,
            comm: "tailscaled".into(),
            cmdline: vec!["/usr/sbin/tailscaled".into(), "--tun=userspace-networking".into()],
            tun_open: false,
            tcp: Vec::new(),
        };
        assert!(p.is_tailscaled_userspace());
        let kernel_mode = Process { cmdline: vec!["/usr/sbin/tailscaled".into()], tun_open: true, ..p.clone() };
        assert!(!kernel_mode.is_tailscaled_userspace());
        let mut t = UdpTable::default();
        let mut s = sample(1, 0, Some(p));
        s.first_tx = head(&WG_DATA, 1440);
        s.first_rx = head(&WG_DATA, 32);
        s.last_tx = head(&WG_DATA, 1440);
        t.ingest(&s);
        let flow = t.get(9).expect("flow");
        assert_eq!(flow.app_proto, Some(AppProto::WireGuard));
        let v = judge(flow, &Environment::default());
        assert!(v.text.contains("userspace-networking"), "{}", v.text);
        assert!(v.advice.contains(&"lxc.cgroup2.devices.allow: c 10:200 rwm".to_string()), "{:?}", v.advice);
        assert!(v.advice.iter().any(|a| a.contains("--device /dev/net/tun --cap-add NET_ADMIN")), "{:?}", v.advice);
    }

    #[test]
    fn kernel_wireguard_points_at_the_tunnels_tcp_flows() {
        let mut s = sample(1, 0, None);
        s.first_tx = head(&WG_DATA, 1440);
        s.last_tx = head(&WG_DATA, 1440);
        let mut t = UdpTable::default();
        t.ingest(&s);
        let v = judge(t.get(9).expect("flow"), &Environment::default());
        assert!(v.text.starts_with("kernel WireGuard"), "{}", v.text);
        // A socket some process holds but nobody was found for is not the kernel's.
        let mut held = s.clone();
        held.inode = 12345;
        let mut t = UdpTable::default();
        t.ingest(&held);
        assert!(!judge(t.get(9).expect("flow"), &Environment::default()).text.starts_with("kernel"));
    }

    /// The relay's end of a hop: the service's endpoints mirrored.
    fn relay_end(service: &crate::analysis::event::Sample) -> (SocketAddr, SocketAddr) {
        (service.remote, service.local)
    }

    #[test]
    fn a_loopback_hop_to_a_process_with_heavy_udp_is_relayed_by_it() {
        use crate::analysis::event::Owner;
        use crate::analysis::model::{tests::sample as tcp_sample, FlowTable, TableConfig};
        let mut table = FlowTable::new(TableConfig::default());
        // The service's socket (accepted, sending) and the relay's (it connected).
        let mut service = tcp_sample(1, 0);
        service.local = "127.0.0.1:8096".parse().expect("addr");
        service.remote = "127.0.0.1:51000".parse().expect("addr");
        service.owner = Some(Owner { pid: 100, comm: "jellyfin".into() });
        let mut relay = tcp_sample(2, 0);
        relay.local = service.remote;
        relay.remote = service.local;
        relay.owner = Some(Owner { pid: 812, comm: "tailscaled".into() });
        // The same endpoints in another namespace are another hop.
        let mut elsewhere = relay.clone();
        elsewhere.cookie = 3;
        elsewhere.netns += 1;
        for s in [&service, &relay, &elsewhere] {
            table.ingest(s);
        }
        let p = Process { pid: 812, comm: "tailscaled".into(), cmdline: Vec::new(), tun_open: false, tcp: Vec::new() };
        let mut udp = UdpTable::default();
        let mut s = sample(1, 0, Some(p));
        s.cookie = 77;
        udp.ingest(&s);
        s.ts_ns += 1_000_000_000;
        s.tx_bytes = 5_000_000;
        udp.ingest(&s);
        let relays = find_relays(&table, &udp, 1e6);
        let hop = relays.get(&1).expect("the service's socket is relayed");
        assert_eq!((hop.pid, hop.udp_cookie, hop.peer_cookie), (812, 77, 2));
        assert!(hop.note().starts_with("relayed by tailscaled (pid 812)"));
        assert_eq!(relays.get(&2).map(|r| r.peer_cookie), Some(2), "the relay's own end too");
        assert!(!relays.contains_key(&3), "no peer in its namespace");
        assert!(find_relays(&table, &udp, 1e9).is_empty(), "a relay must be moving traffic");
        // A process that only receives heavy UDP relays nothing onwards.
        let mut rx_only = UdpTable::default();
        let mut r = s.clone();
        r.tx_bytes = 0;
        r.owner = Some(Process {
            pid: 812,
            comm: "tailscaled".into(),
            cmdline: Vec::new(),
            tun_open: false,
            tcp: Vec::new(),
        });
        rx_only.ingest(&UdpSample { ts_ns: r.ts_ns - 1_000_000_000, rx_bytes: 0, ..r.clone() });
        rx_only.ingest(&UdpSample { rx_bytes: 5_000_000, ..r });
        assert!(find_relays(&table, &rx_only, 1e6).is_empty());

        // With the relay's own socket left out of the table (a kernel filter), the relay's
        // connections from its fd table name it all the same.
        let mut only_service = FlowTable::new(TableConfig::default());
        only_service.ingest(&service);
        let mut udp = UdpTable::default();
        let mut r = UdpSample { netns: service.netns, ..s.clone() };
        let relay = r.owner.as_mut().expect("owner");
        relay.tcp = vec![(relay_end(&service).0, relay_end(&service).1)];
        udp.ingest(&UdpSample { ts_ns: r.ts_ns - 1_000_000_000, tx_bytes: 0, ..r.clone() });
        udp.ingest(&r);
        let hop = find_relays(&only_service, &udp, 1e6);
        assert_eq!(hop.get(&1).map(|h| (h.pid, h.peer_cookie)), Some((812, 0)));
        // On loopback, the same endpoints in another namespace are another hop.
        udp.ingest(&UdpSample {
            netns: service.netns + 1,
            ts_ns: r.ts_ns + 1_000_000_000,
            tx_bytes: 10_000_000,
            ..r.clone()
        });
        assert!(find_relays(&only_service, &udp, 1e6).is_empty());
    }
}
