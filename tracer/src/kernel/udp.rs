//! The UDP accounting programs (`cct_udp_egress`, `cct_udp_ingress`): attached as `cgroup_skb`
//! at the cgroup v2 root, where they see every socket's packets in every network namespace;
//! read once a second from the heavy-socket index into [`UdpSample`]s with their owners.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray};
use aya::programs::cgroup_skb::CgroupSkbAttachType;
use aya::programs::{CgroupAttachMode, CgroupSkb};
use aya::Ebpf;
use tracer_common::udp::{udp_counter, SkbConfig, UdpSocketState};
use tracer_common::{family, Offsets};

use crate::analysis::udp::{Head, Process, SocketReadings, UdpSample};
use crate::kernel::offsets::BtfResolver;
use crate::kernel::udp_owner::owner_of_socket;

/// A heavy socket without a packet for this long leaves the index (and the LRU table, so a
/// later burst is judged afresh).
const QUIET_NS: u64 = 30_000_000_000;
/// How often an owner nobody was found for is looked for again (a walk of `/proc`).
const OWNER_RETRY_NS: u64 = 10_000_000_000;
/// How long what was read of a found owner (command line, TUN, TCP connections) is kept.
const OWNER_REFRESH_NS: u64 = 5_000_000_000;

#[derive(Debug, thiserror::Error)]
pub enum UdpError {
    #[error("no cgroup v2 mount found in /proc/self/mountinfo")]
    NoCgroup2,
    #[error("opening the cgroup v2 root {0}: {1}")]
    OpenRoot(String, std::io::Error),
    #[error("program {0} missing from the object")]
    ProgramMissing(&'static str),
    #[error("{0}: {1}")]
    Program(&'static str, String),
    #[error("map {0}: {1}")]
    Map(&'static str, String),
}

/// The settings and struct offsets the programs need, from the kernel's BTF.
pub fn config(btf: &BtfResolver, offsets: &Offsets, heavy_bytes_per_window: u64) -> SkbConfig {
    let at = |strukt: &str, path: &str| btf.field(strukt, path).map_or(tracer_common::ABSENT, |f| f.bit_offset / 8);
    SkbConfig {
        heavy_bytes_per_window,
        sk_socket: at("sock", "sk_socket"),
        socket_file: at("socket", "file"),
        file_inode: at("file", "f_inode"),
        inode_ino: at("inode", "i_ino"),
        skc_net: offsets.skc_net,
        net_ns_inum: offsets.net_ns_inum,
        ..SkbConfig::default_config()
    }
}

/// Attached UDP accounting: the maps it reads and the owners it found.
pub struct UdpAccounting {
    sockets: BpfHashMap<MapData, u64, UdpSocketState>,
    heavy: BpfHashMap<MapData, u64, u64>,
    counters: PerCpuArray<MapData, u64>,
    /// Owners by cookie: the kernel's pid hint they were looked up for, what was found, and
    /// when (a socket no process holds, such as the kernel's own, is looked up again only
    /// every [`OWNER_RETRY_NS`]).
    owners: HashMap<u64, (u32, Option<Process>, u64)>,
    /// Heavy sockets that left the index after going quiet, or whose state the LRU dropped.
    pub expired: u64,
    pub vanished: u64,
}

fn attach_one(
    ebpf: &mut Ebpf,
    name: &'static str,
    kind: CgroupSkbAttachType,
    root: &std::fs::File,
) -> Result<(), UdpError> {
    let prog: &mut CgroupSkb = ebpf
        .program_mut(name)
        .ok_or(UdpError::ProgramMissing(name))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| UdpError::Program(name, e.to_string()))?;
    prog.load().map_err(|e| UdpError::Program(name, super::error_chain(&e)))?;
    // Attached as a link (kernels since 5.7), which always runs beside the root's other programs
    // (systemd's, another cctrace's); a link takes no multi flag (the kernel refuses one).
    prog.attach(root, kind, CgroupAttachMode::Single).map_err(|e| UdpError::Program(name, super::error_chain(&e)))?;
    Ok(())
}

impl UdpAccounting {
    /// Attach both programs at the cgroup v2 root and take their maps.
    pub fn attach(ebpf: &mut Ebpf) -> Result<Self, UdpError> {
        let root = crate::cgroups::cgroup2_mount().ok_or(UdpError::NoCgroup2)?;
        let dir = std::fs::File::open(&root).map_err(|e| UdpError::OpenRoot(root.display().to_string(), e))?;
        attach_one(ebpf, "cct_udp_egress", CgroupSkbAttachType::Egress, &dir)?;
        attach_one(ebpf, "cct_udp_ingress", CgroupSkbAttachType::Ingress, &dir)?;
        let take = |ebpf: &mut Ebpf, name: &'static str| {
            ebpf.take_map(name).ok_or(UdpError::Map(name, "missing from the object".into()))
        };
        let sockets = BpfHashMap::try_from(take(ebpf, "UDP_SOCKETS")?)
            .map_err(|e| UdpError::Map("UDP_SOCKETS", e.to_string()))?;
        let heavy =
            BpfHashMap::try_from(take(ebpf, "UDP_HEAVY")?).map_err(|e| UdpError::Map("UDP_HEAVY", e.to_string()))?;
        let counters = PerCpuArray::try_from(take(ebpf, "UDP_COUNTERS")?)
            .map_err(|e| UdpError::Map("UDP_COUNTERS", e.to_string()))?;
        Ok(Self { sockets, heavy, counters, owners: HashMap::new(), expired: 0, vanished: 0 })
    }

    pub fn counter(&self, index: u32) -> u64 {
        self.counters.get(&index, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Totals for the summary.
    pub fn totals(&self) -> crate::analysis::schema::UdpCounters {
        crate::analysis::schema::UdpCounters {
            packets: self.counter(udp_counter::PACKETS),
            sockets_seen: self.counter(udp_counter::SOCKETS_NEW),
            heavy: self.counter(udp_counter::HEAVY),
            heavy_index_full: self.counter(udp_counter::HEAVY_FULL),
            evicted: self.vanished,
        }
    }

    /// Kernel-side counters by name.
    pub fn kernel_counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("udp_packets", self.counter(udp_counter::PACKETS)),
            ("udp_sockets_new", self.counter(udp_counter::SOCKETS_NEW)),
            ("udp_heavy", self.counter(udp_counter::HEAVY)),
            ("udp_heavy_full", self.counter(udp_counter::HEAVY_FULL)),
            ("udp_socket_insert_failed", self.counter(udp_counter::SOCKET_INSERT_FAILED)),
        ]
    }

    /// Read every heavy UDP socket, at `now_ns` (CLOCK_MONOTONIC).
    pub fn poll(&mut self, now_ns: u64) -> SocketReadings {
        SocketReadings { udp: self.poll_udp(now_ns) }
    }

    fn poll_udp(&mut self, now_ns: u64) -> Vec<UdpSample> {
        let cookies: Vec<u64> = self.heavy.keys().flatten().collect();
        let mut out = Vec::with_capacity(cookies.len());
        for cookie in cookies {
            let Ok(state) = self.sockets.get(&cookie, 0) else {
                // The LRU dropped it (the table was full of newer sockets): counted, forgotten.
                let _ = self.heavy.remove(&cookie);
                self.owners.remove(&cookie);
                self.vanished += 1;
                continue;
            };
            if now_ns.saturating_sub(state.last_ns) >= QUIET_NS {
                let _ = self.heavy.remove(&cookie);
                let _ = self.sockets.remove(&cookie);
                self.owners.remove(&cookie);
                self.expired += 1;
                continue;
            }
            let owner = match self.owners.get(&cookie) {
                // Found: kept for a few seconds (its connections change); not found: looked for
                // again less often.
                Some((hint, found, at))
                    if *hint == state.pid
                        && now_ns.saturating_sub(*at)
                            < if found.is_some() { OWNER_REFRESH_NS } else { OWNER_RETRY_NS } =>
                {
                    found.clone()
                }
                _ => {
                    let found = owner_of_socket(state.inode, state.pid);
                    self.owners.insert(cookie, (state.pid, found.clone(), now_ns));
                    found
                }
            };
            out.push(sample_of(cookie, &state, now_ns, owner));
        }
        out
    }
}

fn addr(family_: u16, raw: &[u8; 16], port: u16) -> SocketAddr {
    let ip = if family_ == family::AF_INET6 {
        IpAddr::V6(Ipv6Addr::from(*raw))
    } else {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    };
    SocketAddr::new(ip, port)
}

fn sample_of(cookie: u64, s: &UdpSocketState, now_ns: u64, owner: Option<Process>) -> UdpSample {
    let head = |bytes: [u8; 16], len: u16| Head { bytes, len };
    UdpSample {
        ts_ns: now_ns,
        cookie,
        netns: s.netns,
        cgroup_id: s.cgroup_id,
        inode: s.inode,
        local: addr(s.family, &s.local_addr, s.local_port),
        remote: addr(s.family, &s.remote_addr, s.remote_port),
        tx_bytes: s.tx_bytes,
        rx_bytes: s.rx_bytes,
        tx_packets: s.tx_packets,
        rx_packets: s.rx_packets,
        first_tx: head(s.first_tx_head, s.first_tx_len),
        first_rx: head(s.first_rx_head, s.first_rx_len),
        last_tx: head(s.last_tx_head, s.last_tx_len),
        last_rx: head(s.last_rx_head, s.last_rx_len),
        owner,
    }
}
