//! Which process owns a UDP socket, the way `ss -p` finds it: the socket's inode among the
//! `socket:[INODE]` links in `/proc/PID/fd`. The kernel's hint (the last process seen sending
//! on it) is checked first, so the full walk of `/proc` runs only for sockets nobody was seen
//! sending on, and only once per socket.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use procfs::net::TcpState;

use super::procs::{self, PROC};
use crate::analysis::udp::Process;

/// Most descriptors read per process: a server with more is rare, and the walk stays bounded.
const MAX_FDS: usize = 65_536;

/// What `pid`'s descriptors point at.
type Targets = Vec<(i32, PathBuf)>;

fn holds_socket(targets: &Targets, inode: u64) -> bool {
    targets.iter().any(|(_, t)| procs::socket_inode(t) == Some(inode))
}

/// What `/proc` says about `pid`, with the fd targets already read.
fn describe(pid: u32, targets: &Targets) -> Option<Process> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim_end().to_string();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
        })
        .unwrap_or_default();
    let tun_open = targets.iter().any(|(_, t)| t.as_os_str() == "/dev/net/tun");
    Some(Process { pid, comm, cmdline, tun_open, tcp: tcp_connections(pid, targets) })
}

/// Most TCP connections kept per process: a relay's hops are few; a busy server's are not
/// what the relay check needs.
const MAX_CONNECTIONS: usize = 256;

/// The established TCP connections `pid` holds: the rows of its namespace's
/// `/proc/PID/net/tcp{,6}` whose inode is among its fds (`targets`).
fn tcp_connections(pid: u32, targets: &Targets) -> Vec<(SocketAddr, SocketAddr)> {
    let held: HashSet<u64> = targets.iter().filter_map(|(_, t)| procs::socket_inode(t)).collect();
    let net = Path::new(PROC).join(pid.to_string()).join("net");
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(rows) = std::fs::File::open(net.join(table)).and_then(procs::tcp_table) else { continue };
        let established = rows.into_iter().filter(|r| r.state == TcpState::Established && held.contains(&r.inode));
        out.extend(established.map(|r| (r.local_address, r.remote_address)));
        if out.len() >= MAX_CONNECTIONS {
            out.truncate(MAX_CONNECTIONS);
            break;
        }
    }
    out
}

/// The process owning the socket with `inode`; `hint` is the pid the kernel saw sending on it.
/// With no inode, the hint is taken as it is.
pub fn owner_of_socket(inode: u64, hint: u32) -> Option<Process> {
    let proc = Path::new(PROC);
    if hint != 0 {
        let targets = procs::fd_targets(proc, hint, MAX_FDS);
        if inode == 0 || holds_socket(&targets, inode) {
            return describe(hint, &targets);
        }
    }
    if inode == 0 {
        return None;
    }
    let holder = procs::socket_holders(proc, &[inode].into()).remove(&inode)?;
    describe(holder.pid, &procs::fd_targets(proc, holder.pid, MAX_FDS))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn lists_the_connections_this_process_holds() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (_server, _) = listener.accept().expect("accept");
        let me = std::process::id();
        let targets = procs::fd_targets(Path::new(PROC), me, MAX_FDS);
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
