//! Heavy UDP flows: the kernel's readings of each socket, the process owning it, its rates and
//! what it carries, in a bounded table.

use std::collections::HashMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::analysis::udp::shape::{AppProto, Head, ShapeCounts};

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
        // An unconnected socket's peer is known from what it sends: a reading taken after it
        // last received says none, and the peer it sent to stands.
        let remote = if s.remote.ip().is_unspecified() && s.remote.port() == 0 { self.latest.remote } else { s.remote };
        self.latest = s.clone();
        self.latest.owner = owner;
        self.latest.remote = remote;
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
    pub(super) flows: HashMap<u64, UdpFlow>,
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

    /// The busiest flow of process `pid` that moves at least `min_bps` either way: a tunnel's
    /// underlay sends at one end and receives at the other.
    pub fn busiest_of_pid(&self, pid: u32, min_bps: f64) -> Option<&UdpFlow> {
        self.flows
            .values()
            .filter(|f| f.latest.owner.as_ref().is_some_and(|o| o.pid == pid) && f.tx_bps.max(f.rx_bps) >= min_bps)
            .max_by(|a, b| a.tx_bps.max(a.rx_bps).total_cmp(&b.tx_bps.max(b.rx_bps)))
    }
}
