//! The kernel's own view of TCP sockets, through sock_diag (`NETLINK_SOCK_DIAG`), as `ss -tnie`
//! asks for it: `struct tcp_info`, the congestion control's name, the socket's memory
//! (`SKMEMINFO`), its cookie, inode and cgroup, of the network namespace of the thread that
//! opened the socket.
//!
//! Two questions: every TCP socket but the listeners (a dump, once at start-up), and given
//! sockets by their addresses (exact lookups: one request each, all sent in one datagram, one
//! answer each). The mode without BTF asks the second for the flows its tracepoints say are
//! busy, each sample interval, rather than dumping every socket as `ss` does.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use compact_str::CompactString;
use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, Nla as _, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::nlas::Nla;
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, InetResponse, SocketId, StateFlags};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::Socket;

/// `INET_DIAG_CGROUP_ID` (Linux 5.9): the socket's cgroup v2 id, which the crate names no variant for.
const INET_DIAG_CGROUP_ID: u16 = 21;
/// `INET_DIAG_NOCOOKIE`: both halves of a lookup's cookie when any socket at the address will do.
const NO_COOKIE: [u8; 8] = [0xff; 8];

/// `struct tcp_info` (`include/uapi/linux/tcp.h`) up to `tcpi_total_rto_time` (Linux 6.7).
/// Older kernels send a shorter one: what they lack reads as zero here, and
/// [`SocketInfo::tcp_info_len`] says where their struct ended.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TcpInfo {
    pub state: u8,
    pub ca_state: u8,
    pub retransmits: u8,
    pub probes: u8,
    pub backoff: u8,
    pub options: u8,
    pub wscale: u8,
    /// Bit 0: `tcpi_delivery_rate_app_limited`; bits 1-2: `tcpi_fastopen_client_fail`.
    pub app_limited_bits: u8,
    pub rto: u32,
    pub ato: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub fackets: u32,
    pub last_data_sent: u32,
    pub last_ack_sent: u32,
    pub last_data_recv: u32,
    pub last_ack_recv: u32,
    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt: u32,
    pub rttvar: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    pub rcv_rtt: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub notsent_bytes: u32,
    pub min_rtt: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub delivery_rate: u64,
    pub busy_time: u64,
    pub rwnd_limited: u64,
    pub sndbuf_limited: u64,
    pub delivered: u32,
    pub delivered_ce: u32,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub dsack_dups: u32,
    pub reord_seen: u32,
    pub rcv_ooopack: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    pub rehash: u32,
    pub total_rto: u16,
    pub total_rto_recoveries: u16,
    pub total_rto_time: u32,
}

const _: () = assert!(std::mem::size_of::<TcpInfo>() == 248);

/// Where fields of [`TcpInfo`] end, to tell a kernel's shorter struct from a zero.
pub mod tcp_info_end {
    /// `tcpi_dsack_dups` and `tcpi_reord_seen` (Linux 4.19 / 5.0).
    pub const REORD_SEEN: usize = 224;
    /// `tcpi_snd_wnd` (Linux 5.4).
    pub const SND_WND: usize = 232;
    /// `tcpi_total_rto_recoveries` (Linux 6.7).
    pub const TOTAL_RTO: usize = 244;
}

impl TcpInfo {
    /// The kernel's `tcp_info` answer, however long: a shorter one is zero-extended.
    pub fn parse(bytes: &[u8]) -> Self {
        let mut info = Self::default();
        let n = bytes.len().min(std::mem::size_of::<Self>());
        bytemuck::bytes_of_mut(&mut info)[..n].copy_from_slice(&bytes[..n]);
        info
    }

    pub fn delivery_rate_app_limited(&self) -> bool {
        self.app_limited_bits & 1 != 0
    }
}

/// `TCPI_OPT_WSCALE` in `tcpi_options`: window scaling negotiated.
pub const TCPI_OPT_WSCALE: u8 = 4;

/// The socket's memory (`SK_MEMINFO_*`), as `ss -m` shows it: the buffers and what they hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketMemory {
    pub rcvbuf: u32,
    pub sndbuf: u32,
    pub wmem_queued: u32,
}

/// One TCP socket as sock_diag describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct SocketInfo {
    pub family: u8,
    /// The TCP state (`TCP_ESTABLISHED`, ...).
    pub state: u8,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub cookie: u64,
    /// The socket's inode (0 while it waits in its listener's accept queue).
    pub inode: u32,
    pub cc: Option<CompactString>,
    pub tcp_info: Option<TcpInfo>,
    /// Bytes of `tcp_info` the kernel sent (see [`tcp_info_end`]).
    pub tcp_info_len: usize,
    pub memory: Option<SocketMemory>,
    /// The socket's cgroup v2 id (Linux 5.9 and later).
    pub cgroup_id: Option<u64>,
}

/// A socket to look up: its address family and endpoints as it sees them, and its cookie when
/// known (another socket at the same addresses is then not it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lookup {
    pub family: u8,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub cookie: Option<u64>,
}

/// A sock_diag socket of the network namespace of the thread that opened it.
pub struct SockDiag {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

/// What every question asks the kernel to add to each socket.
fn extensions() -> ExtensionFlags {
    // VEGASINFO also brings BBR's (`INET_DIAG_BBRINFO`), as `ss` asks for it.
    ExtensionFlags::INFO | ExtensionFlags::CONG | ExtensionFlags::SKMEMINFO | ExtensionFlags::VEGASINFO
}

impl SockDiag {
    pub fn open() -> std::io::Result<Self> {
        let socket = super::netlink::open_socket(NETLINK_SOCK_DIAG)?;
        Ok(Self { socket, seq: 0, buf: vec![0; 64 * 1024] })
    }

    /// Every TCP socket of the namespace but the listeners, IPv4 and IPv6.
    pub fn dump(&mut self) -> std::io::Result<Vec<SocketInfo>> {
        let mut out = Vec::new();
        for family in [AF_INET, AF_INET6] {
            let id = if family == AF_INET { SocketId::new_v4() } else { SocketId::new_v6() };
            let states = StateFlags::all() - StateFlags::LISTEN - StateFlags::TIME_WAIT - StateFlags::CLOSE;
            let seq = self.send(&[request(family, states, id)], NLM_F_REQUEST | NLM_F_DUMP)?;
            self.collect(|answer| match answer {
                Answer::Socket(got_seq, info) if got_seq == seq => {
                    out.push(*info);
                    Collected::More
                }
                Answer::Done(got_seq) | Answer::Error(got_seq, _) if got_seq == seq => Collected::Finished,
                _ => Collected::More,
            })?;
        }
        Ok(out)
    }

    /// Each socket asked for, or `None` where none is at its addresses (or another one is, with
    /// another cookie). One datagram carries every request; the kernel answers each in turn.
    pub fn lookup(&mut self, wanted: &[Lookup]) -> std::io::Result<Vec<Option<SocketInfo>>> {
        let mut out = vec![None; wanted.len()];
        if wanted.is_empty() {
            return Ok(out);
        }
        let requests: Vec<InetRequest> = wanted.iter().map(exact_request).collect();
        let first = self.send(&requests, NLM_F_REQUEST)?;
        let mut answered = 0;
        self.collect(|answer| {
            let (seq, info) = match answer {
                Answer::Socket(seq, info) => (seq, Some(*info)),
                Answer::Error(seq, errno) => {
                    // No socket there (ENOENT), or another one than asked for (ESTALE): an
                    // answer. Anything else is worth a line in the log.
                    if ![-libc::ENOENT, -libc::ESTALE].contains(&errno) {
                        log::debug!("sock_diag lookup refused: {}", std::io::Error::from_raw_os_error(-errno));
                    }
                    (seq, None)
                }
                Answer::Done(_) => return Collected::More,
            };
            let Some(i) = seq.checked_sub(first).map(|i| i as usize).filter(|&i| i < out.len()) else {
                return Collected::More;
            };
            out[i] = info;
            answered += 1;
            if answered == out.len() {
                Collected::Finished
            } else {
                Collected::More
            }
        })?;
        Ok(out)
    }

    /// Send `requests` in one datagram, numbered from the sequence number returned.
    fn send(&mut self, requests: &[InetRequest], flags: u16) -> std::io::Result<u32> {
        let first = self.seq.wrapping_add(1);
        let mut datagram = Vec::new();
        for request in requests {
            self.seq = self.seq.wrapping_add(1);
            let mut header = NetlinkHeader::default();
            header.flags = flags;
            header.sequence_number = self.seq;
            let mut packet = NetlinkMessage::new(header, SockDiagMessage::InetRequest(request.clone()).into());
            packet.finalize();
            let at = datagram.len();
            datagram.resize(at + packet.buffer_len(), 0);
            packet.serialize(&mut datagram[at..]);
        }
        self.socket.send(&datagram, 0)?;
        Ok(first)
    }

    /// Read answers and hand each to `take` until it says it has them all.
    fn collect(&mut self, mut take: impl FnMut(Answer) -> Collected) -> std::io::Result<()> {
        loop {
            let n = self.socket.recv(&mut &mut self.buf[..], 0)?;
            let mut rest = &self.buf[..n];
            while !rest.is_empty() {
                let msg = NetlinkMessage::<SockDiagMessage>::deserialize(rest)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
                let len = (msg.header.length as usize).min(rest.len());
                rest = &rest[len.max(1)..];
                let seq = msg.header.sequence_number;
                let answer = match msg.payload {
                    NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => match socket_info(&r) {
                        Some(info) => Answer::Socket(seq, Box::new(info)),
                        None => continue,
                    },
                    NetlinkPayload::Done(_) => Answer::Done(seq),
                    NetlinkPayload::Error(e) => Answer::Error(seq, e.code.map_or(0, std::num::NonZeroI32::get)),
                    _ => continue,
                };
                if take(answer) == Collected::Finished {
                    return Ok(());
                }
            }
        }
    }
}

enum Answer {
    Socket(u32, Box<SocketInfo>),
    Done(u32),
    /// The request's sequence number and the (negative) errno: `ENOENT`, no such socket;
    /// `ESTALE`, another cookie at those addresses.
    Error(u32, i32),
}

#[derive(PartialEq, Eq)]
enum Collected {
    More,
    Finished,
}

fn request(family: u8, states: StateFlags, socket_id: SocketId) -> InetRequest {
    InetRequest { family, protocol: IPPROTO_TCP, extensions: extensions(), states, socket_id }
}

fn exact_request(l: &Lookup) -> InetRequest {
    let ip = |a: SocketAddr| match (l.family, a.ip()) {
        (AF_INET6, IpAddr::V4(v4)) => IpAddr::V6(v4.to_ipv6_mapped()),
        (_, ip) => ip,
    };
    let socket_id = SocketId {
        source_port: l.local.port(),
        destination_port: l.remote.port(),
        source_address: ip(l.local),
        destination_address: ip(l.remote),
        interface_id: 0,
        cookie: l.cookie.map_or(NO_COOKIE, cookie_bytes),
    };
    request(l.family, StateFlags::all(), socket_id)
}

/// `idiag_cookie` is two native-endian u32s, the low half first.
fn cookie_bytes(cookie: u64) -> [u8; 8] {
    let mut b = [0; 8];
    b[..4].copy_from_slice(&(cookie as u32).to_ne_bytes());
    b[4..].copy_from_slice(&((cookie >> 32) as u32).to_ne_bytes());
    b
}

fn cookie_of(b: [u8; 8]) -> u64 {
    let lo = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    let hi = u32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
    u64::from(lo) | (u64::from(hi) << 32)
}

/// An IPv4 peer of a dual-stack socket is the IPv4 address it is.
fn canonical(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip.to_canonical(), port)
}

fn socket_info(r: &InetResponse) -> Option<SocketInfo> {
    let id = &r.header.socket_id;
    let mut info = SocketInfo {
        family: r.header.family,
        state: r.header.state,
        local: canonical(id.source_address, id.source_port),
        remote: canonical(id.destination_address, id.destination_port),
        cookie: cookie_of(id.cookie),
        inode: r.header.inode,
        cc: None,
        tcp_info: None,
        tcp_info_len: 0,
        memory: None,
        cgroup_id: None,
    };
    for nla in &r.nlas {
        match nla {
            Nla::TcpInfo(bytes) => {
                info.tcp_info = Some(TcpInfo::parse(bytes));
                info.tcp_info_len = bytes.len();
            }
            Nla::Congestion(name) => info.cc = Some(CompactString::from(name.as_str())),
            Nla::MemInfo(m) => {
                info.memory = Some(SocketMemory {
                    rcvbuf: m.receive_queue_max,
                    sndbuf: m.send_queue_max,
                    wmem_queued: m.send_queue,
                });
            }
            Nla::Other(other) if other.kind() == INET_DIAG_CGROUP_ID && other.value_len() == 8 => {
                let mut v = [0u8; 8];
                other.emit_value(&mut v);
                info.cgroup_id = Some(u64::from_ne_bytes(v));
            }
            _ => {}
        }
    }
    Some(info)
}

/// A sock_diag socket in each network namespace asked about, opened when first needed and
/// closed after [`IDLE_CLOSE`] unused: an open socket keeps its namespace alive (and with it its
/// devices), so a namespace whose last process left is not held for long.
pub struct DiagNamespaces {
    own: Option<u32>,
    open: HashMap<u32, (SockDiag, Instant)>,
    /// A path into each namespace of the host, and when they were listed.
    paths: Vec<(u32, PathBuf)>,
    listed: Option<Instant>,
}

/// How long a namespace's socket stays open unused.
pub const IDLE_CLOSE: Duration = Duration::from_secs(2);
/// How old the list of namespaces may grow before a search reads it again.
const RELIST_AFTER: Duration = Duration::from_secs(1);

impl Default for DiagNamespaces {
    fn default() -> Self {
        Self::new()
    }
}

impl DiagNamespaces {
    pub fn new() -> Self {
        Self { own: super::netns_inode("/proc/self/ns/net"), open: HashMap::new(), paths: Vec::new(), listed: None }
    }

    /// Every network namespace of the host, listed again when the list is older than a second.
    pub fn all(&mut self, now: Instant) -> Vec<u32> {
        if self.listed.is_none_or(|t| now.duration_since(t) >= RELIST_AFTER) {
            self.paths = super::netns_paths();
            self.listed = Some(now);
        }
        self.paths.iter().map(|(ino, _)| *ino).collect()
    }

    /// Open a socket in each of `netns` that has none yet.
    fn open_in(&mut self, netns: &[u32], now: Instant) {
        let missing: Vec<(u32, PathBuf)> = netns
            .iter()
            .filter(|ino| !self.open.contains_key(ino))
            .filter_map(|ino| self.paths.iter().find(|(p, _)| p == ino).cloned())
            .collect();
        let own = self.own;
        let (here, elsewhere): (Vec<_>, Vec<_>) = missing.into_iter().partition(|(ino, _)| Some(*ino) == own);
        for (ino, _) in here {
            if let Ok(diag) = SockDiag::open() {
                self.open.insert(ino, (diag, now));
            }
        }
        if !elsewhere.is_empty() {
            let opened = super::in_each_netns(&elsewhere, |ino| SockDiag::open().ok().map(|d| (ino, d)));
            for (ino, diag) in opened {
                self.open.insert(ino, (diag, now));
            }
        }
    }

    /// Look `wanted` up in namespace `netns`; `None` where it cannot be entered or asked.
    pub fn lookup(&mut self, netns: u32, wanted: &[Lookup], now: Instant) -> Option<Vec<Option<SocketInfo>>> {
        if !self.open.contains_key(&netns) {
            if !self.paths.iter().any(|(ino, _)| *ino == netns) {
                self.all(now);
            }
            self.open_in(&[netns], now);
        }
        let (diag, used) = self.open.get_mut(&netns)?;
        *used = now;
        match diag.lookup(wanted) {
            Ok(found) => Some(found),
            Err(e) => {
                log::debug!("sock_diag lookup in network namespace {netns} failed: {e}");
                self.open.remove(&netns);
                None
            }
        }
    }

    /// Look `wanted` up in every namespace of the host: what each found.
    pub fn search(&mut self, wanted: &[Lookup], now: Instant) -> Vec<(u32, Vec<Option<SocketInfo>>)> {
        let all = self.all(now);
        self.open_in(&all, now);
        all.into_iter().filter_map(|ns| Some((ns, self.lookup(ns, wanted, now)?))).collect()
    }

    /// Every TCP socket but the listeners, in every namespace that can be entered.
    pub fn dump_all(&mut self, now: Instant) -> Vec<(u32, Vec<SocketInfo>)> {
        let all = self.all(now);
        self.open_in(&all, now);
        let mut out = Vec::new();
        for ns in all {
            let Some((diag, used)) = self.open.get_mut(&ns) else { continue };
            *used = now;
            match diag.dump() {
                Ok(sockets) => out.push((ns, sockets)),
                Err(e) => log::debug!("sock_diag dump in network namespace {ns} failed: {e}"),
            }
        }
        out
    }

    /// Close the sockets of namespaces not asked about for [`IDLE_CLOSE`] (the process's own
    /// namespace keeps its socket).
    pub fn close_idle(&mut self, now: Instant) {
        let own = self.own;
        self.open.retain(|ns, (_, used)| Some(*ns) == own || now.duration_since(*used) < IDLE_CLOSE);
    }

    /// Namespaces with a socket open now.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_info_offsets_are_the_kernels() {
        let info = TcpInfo::default();
        let at = |field: *const u8| field as usize - std::ptr::from_ref(&info) as usize;
        assert_eq!(at(std::ptr::from_ref(&info.rto).cast()), 8);
        assert_eq!(at(std::ptr::from_ref(&info.total_retrans).cast()), 100);
        assert_eq!(at(std::ptr::from_ref(&info.pacing_rate).cast()), 104);
        assert_eq!(at(std::ptr::from_ref(&info.delivery_rate).cast()), 160);
        assert_eq!(at(std::ptr::from_ref(&info.bytes_sent).cast()), 200);
        assert_eq!(at(std::ptr::from_ref(&info.reord_seen).cast()) + 4, tcp_info_end::REORD_SEEN);
        assert_eq!(at(std::ptr::from_ref(&info.snd_wnd).cast()) + 4, tcp_info_end::SND_WND);
        assert_eq!(at(std::ptr::from_ref(&info.total_rto_recoveries).cast()) + 2, tcp_info_end::TOTAL_RTO);
    }

    #[test]
    fn a_shorter_tcp_info_reads_zero_past_its_end() {
        let mut long = TcpInfo { snd_cwnd: 10, snd_wnd: 65_535, ..TcpInfo::default() };
        long.total_rto = 3;
        let bytes = bytemuck::bytes_of(&long);
        let short = TcpInfo::parse(&bytes[..tcp_info_end::REORD_SEEN]);
        assert_eq!((short.snd_cwnd, short.snd_wnd, short.total_rto), (10, 0, 0));
        assert_eq!(TcpInfo::parse(bytes), long);
    }

    #[test]
    fn cookies_go_both_ways() {
        for cookie in [1, 0x1234_5678_9abc_def0, u64::MAX - 1] {
            assert_eq!(cookie_of(cookie_bytes(cookie)), cookie);
        }
    }

    /// A connection of this process, found by a dump and by its addresses, with its cookie,
    /// and not found with another cookie.
    #[test]
    fn a_connection_of_this_process_is_found_by_dump_and_by_lookup() {
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_accepted, _) = listener.accept().unwrap();
        client.write_all(&[0; 1000]).unwrap();
        let mut diag = SockDiag::open().unwrap();
        let (local, remote) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
        let dumped = diag.dump().unwrap();
        let mine = dumped.iter().find(|s| s.local == local && s.remote == remote).expect("dumped");
        assert!(mine.cookie != 0 && mine.tcp_info.is_some() && mine.cc.is_some(), "{mine:?}");
        assert!(mine.tcp_info.unwrap().bytes_acked > 0 || mine.tcp_info.unwrap().bytes_sent > 0);
        let ask = Lookup { family: AF_INET, local, remote, cookie: Some(mine.cookie) };
        let stale = Lookup { cookie: Some(mine.cookie + 1_000_000), ..ask };
        let gone = Lookup { remote: SocketAddr::new(remote.ip(), 1), cookie: None, ..ask };
        let found = diag.lookup(&[ask, stale, gone]).unwrap();
        assert_eq!(found[0].as_ref().map(|s| s.cookie), Some(mine.cookie));
        assert!(found[1].is_none() && found[2].is_none(), "{found:?}");
    }
}
