//! Which process owns a UDP socket, the way `ss -p` finds it: the socket's inode among the
//! `socket:[INODE]` links in `/proc/PID/fd`. The kernel's hint (the last process seen sending
//! on it) is checked first, so the full walk of `/proc` runs only for sockets nobody was seen
//! sending on, and only once per socket.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use crate::analysis::udp::Process;

/// The fd targets of `pid` (`socket:[123]`, `/dev/net/tun`, ...), at most `limit` of them.
fn fd_targets(pid: u32, limit: usize) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    dir.flatten()
        .take(limit)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .collect()
}

/// Most descriptors read per process: a server with more is rare, and the walk stays bounded.
const MAX_FDS: usize = 65_536;

fn holds_socket(targets: &[String], inode: u64) -> bool {
    let want = format!("socket:[{inode}]");
    targets.contains(&want)
}

/// What `/proc` says about `pid`, with the fd targets already read.
fn describe(pid: u32, targets: &[String]) -> Option<Process> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim_end().to_string();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default();
    let tun_open = targets.iter().any(|t| t == "/dev/net/tun");
    Some(Process { pid, comm, cmdline, tun_open, tcp: tcp_connections(pid, targets) })
}

/// Most TCP connections kept per process: a relay's hops are few; a busy server's are not
/// what the relay check needs.
const MAX_CONNECTIONS: usize = 256;

/// The established TCP connections `pid` holds: the lines of its namespace's
/// `/proc/PID/net/tcp{,6}` whose inode is among its fds (`targets`).
pub fn tcp_connections(pid: u32, targets: &[String]) -> Vec<(SocketAddr, SocketAddr)> {
    let held: HashSet<u64> =
        targets.iter().filter_map(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()).collect();
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
        out.extend(parse_tcp_table(&text).filter(|(_, _, inode)| held.contains(inode)).map(|(l, r, _)| (l, r)));
        if out.len() >= MAX_CONNECTIONS {
            out.truncate(MAX_CONNECTIONS);
            break;
        }
    }
    out
}

/// The established sockets of a `/proc/net/tcp` or `tcp6` table: (local, remote, inode).
/// Addresses are printed as the kernel holds them in memory (32-bit words in host order),
/// ports in plain hex.
pub(super) fn parse_tcp_table(text: &str) -> impl Iterator<Item = (SocketAddr, SocketAddr, u64)> + '_ {
    const ESTABLISHED: &str = "01";
    text.lines().skip(1).filter_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != ESTABLISHED {
            return None;
        }
        Some((endpoint(f[1])?, endpoint(f[2])?, f[9].parse().ok()?))
    })
}

fn endpoint(hex: &str) -> Option<SocketAddr> {
    let (addr, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Option<Vec<[u8; 4]>> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok().map(u32::to_ne_bytes))
        .collect();
    let bytes: Vec<u8> = words?.concat();
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The process owning the socket with `inode`; `hint` is the pid the kernel saw sending on it.
/// With no inode, the hint is taken as it is.
pub fn owner_of_socket(inode: u64, hint: u32) -> Option<Process> {
    if hint != 0 {
        let targets = fd_targets(hint, MAX_FDS);
        if inode == 0 || holds_socket(&targets, inode) {
            return describe(hint, &targets);
        }
    }
    if inode == 0 {
        return None;
    }
    let procs = std::fs::read_dir(Path::new("/proc")).ok()?;
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let targets = fd_targets(pid, MAX_FDS);
        if holds_socket(&targets, inode) {
            return describe(pid, &targets);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn reads_the_tcp_tables_as_the_kernel_prints_them() {
        // A loopback connection 127.0.0.1:51000 -> 127.0.0.1:8096 (established), and a listener.
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1FA0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:C738 0100007F:1FA0 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1
";
        let got: Vec<_> = parse_tcp_table(v4).collect();
        assert_eq!(got, vec![("127.0.0.1:51000".parse().expect("a"), "127.0.0.1:8096".parse().expect("a"), 222)]);
        let v6 = "  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1FA0 00000000000000000000000001000000:C738 01 00000000:00000000 00:00000000 00000000 0 0 333 1
";
        let got: Vec<_> = parse_tcp_table(v6).collect();
        assert_eq!(got, vec![("[::1]:8096".parse().expect("a"), "[::1]:51000".parse().expect("a"), 333)]);
    }

    #[test]
    fn lists_the_connections_this_process_holds() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (_server, _) = listener.accept().expect("accept");
        let me = std::process::id();
        let targets = fd_targets(me, MAX_FDS);
        let conns = tcp_connections(me, &targets);
        let mine = (client.local_addr().expect("a"), client.peer_addr().expect("a"));
        assert!(conns.contains(&mine), "{mine:?} in {conns:?}");
        assert!(conns.contains(&(mine.1, mine.0)), "the accepted end too: {conns:?}");
    }

    #[test]
    fn finds_this_process_by_its_socket_inode() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let inode = std::fs::metadata(format!("/proc/self/fd/{}", sock.as_raw_fd())).expect("fd").ino();
        let me = std::process::id();
        let by_walk = owner_of_socket(inode, 0).expect("found by walking /proc");
        assert_eq!(by_walk.pid, me);
        let by_hint = owner_of_socket(inode, me).expect("found by the hint");
        assert_eq!(by_hint.pid, me);
        assert!(!by_hint.cmdline.is_empty());
        // A wrong hint falls back to the walk.
        assert_eq!(owner_of_socket(inode, 1).map(|p| p.pid), Some(me));
    }
}
